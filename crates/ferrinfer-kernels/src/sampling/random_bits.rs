//! A row's random bits — Philox's, as cuRAND draws them — and where they fall in the row's mass.

/// 64 random bits for row `row`: Philox's outputs `offset` and `offset + 1` of subsequence
/// `row` under `seed` (cuRAND's `curand_init(seed, row, offset)`, then two `curand()`), the
/// first the low word. A call reads two outputs: the next call's `offset` is 2 on (FlashInfer's
/// generator path moves on by 4).
#[inline(always)]
pub fn row_random_bits(seed: u64, row: u64, offset: u64) -> u64 {
    let mut stream = crate::random::Philox::new(seed, row, offset);
    let low = stream.next_u32();
    ((stream.next_u32() as u64) << 32) | low as u64
}

/// 64 random bits for draw `draw` (from 0) of row `row`: [`row_random_bits`] for the first; a
/// later one (top-p's rejection rounds) from Philox subsequence `row + draw · 2^32` at the same
/// offset, so no draw reads another's outputs, nor another row's (rows < 2^32), nor another
/// call's (each moves the offset on by 2).
#[inline(always)]
pub fn draw_random_bits(seed: u64, row: u64, offset: u64, draw: u32) -> u64 {
    row_random_bits(seed, row + ((draw as u64) << 32), offset)
}

/// Where random bits `bits` fall in a row's kept mass `mass`: `⌊bits · mass / 2^64⌋`, in
/// `[0, mass)` for `mass > 0`; every unit of mass as likely as any other to within 2^−64.
#[inline(always)]
pub fn mass_target(bits: u64, mass: u64) -> u64 {
    ((bits as u128 * mass as u128) >> 64) as u64
}
