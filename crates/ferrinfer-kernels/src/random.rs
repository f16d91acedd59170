//! Counter-based random numbers, one stream for the CPU backend and the GPU: Philox4x32-10
//! (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC 2011), the
//! generator behind cuRAND's `curandStatePhilox4_32_10_t` and FlashInfer's sampling. A draw is a
//! pure function of (seed, subsequence, offset): no state is carried between calls or threads,
//! so a row's numbers never depend on the other rows, on scheduling or on the device.
//!
//! [`Philox`] follows cuRAND's stream exactly — `curand_init(seed, subsequence, offset)`, then
//! `curand()` / `curand_uniform()` — so a kernel written against either draws the same numbers.
//! The block function is checked against Random123's known-answer vectors, the stream against
//! draws recorded from cuRAND on an H200 (tests below).

/// Philox4x32's round multipliers and Weyl key increments (Random123's constants).
const MULTIPLIERS: [u32; 2] = [0xD251_1F53, 0xCD9E_8D57];
const KEY_STEPS: [u32; 2] = [0x9E37_79B9, 0xBB67_AE85];

/// The high and low words of the 64-bit product `a · b` (`mul.hi.u32` / `mul.lo.u32` on the GPU).
#[inline(always)]
fn mul_hi_lo(a: u32, b: u32) -> (u32, u32) {
    let product = a as u64 * b as u64;
    ((product >> 32) as u32, product as u32)
}

/// One Philox round on counter `c` under round key `k`.
#[inline(always)]
fn round(c: [u32; 4], k: [u32; 2]) -> [u32; 4] {
    let (hi0, lo0) = mul_hi_lo(MULTIPLIERS[0], c[0]);
    let (hi1, lo1) = mul_hi_lo(MULTIPLIERS[1], c[2]);
    [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0]
}

/// The Philox4x32-10 block function: four 32-bit random words for `counter` under `key`.
#[inline(always)]
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let (mut c, mut k) = (counter, key);
    for r in 0..10 {
        if r > 0 {
            k = [k[0].wrapping_add(KEY_STEPS[0]), k[1].wrapping_add(KEY_STEPS[1])];
        }
        c = round(c, k);
    }
    c
}

/// A position in the Philox stream of one (seed, subsequence), cuRAND's layout: the key is the
/// seed; the counter's high 64 bits are the subsequence, its low 64 bits the block of four
/// outputs; `lane` is the next output's index in that block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Philox {
    key: [u32; 2],
    counter: [u32; 4],
    block: [u32; 4],
    lane: u32,
}

impl Philox {
    /// `curand_init(seed, subsequence, offset)`: the stream of `subsequence` under `seed`, skipped
    /// ahead by `offset` outputs.
    #[inline(always)]
    pub fn new(seed: u64, subsequence: u64, offset: u64) -> Self {
        let block = offset / 4;
        let counter = [block as u32, (block >> 32) as u32, subsequence as u32, (subsequence >> 32) as u32];
        let key = [seed as u32, (seed >> 32) as u32];
        Philox { key, counter, block: philox4x32_10(counter, key), lane: (offset % 4) as u32 }
    }

    /// `curand()`: the next 32 random bits.
    #[inline(always)]
    pub fn next_u32(&mut self) -> u32 {
        // Selected, not indexed: a run-time index into the block puts it in local memory.
        let [a, b, c, d] = self.block;
        let value = match self.lane & 3 {
            0 => a,
            1 => b,
            2 => c,
            _ => d,
        };
        self.lane += 1;
        if self.lane == 4 {
            self.counter = increment(self.counter);
            self.block = philox4x32_10(self.counter, self.key);
            self.lane = 0;
        }
        value
    }

    /// `curand_uniform()`: a float in (0, 1] (see [`uniform_from_bits`]).
    #[inline(always)]
    pub fn uniform(&mut self) -> f32 {
        uniform_from_bits(self.next_u32())
    }
}

/// cuRAND's `_curand_uniform`: `float(bits) · 2⁻³² + 2⁻³³`, one rounding (nvcc contracts it to
/// an FMA). On the GPU an `fma.rn.f32`; on the host the same value through f64, where the
/// product and the sum are exact (a multiple of 2⁻³³ no larger than 1), so the one rounding to
/// f32 is the FMA's and both sides draw bit-identical numbers.
#[inline(always)]
pub fn uniform_from_bits(bits: u32) -> f32 {
    const TWO_POW_MINUS_32: f32 = 2.328_306_4e-10;
    #[cfg(target_arch = "nvptx64")]
    return crate::math::mul_add(bits as f32, TWO_POW_MINUS_32, TWO_POW_MINUS_32 / 2.0);
    #[cfg(not(target_arch = "nvptx64"))]
    return ((bits as f32) as f64 * TWO_POW_MINUS_32 as f64 + TWO_POW_MINUS_32 as f64 / 2.0) as f32;
}

/// The counter's low 64 bits plus one, carrying into the subsequence words as cuRAND does.
#[inline(always)]
fn increment(c: [u32; 4]) -> [u32; 4] {
    let low = (((c[1] as u64) << 32) | c[0] as u64).wrapping_add(1);
    let carry = (low == 0) as u64;
    let high = (((c[3] as u64) << 32) | c[2] as u64).wrapping_add(carry);
    [low as u32, (low >> 32) as u32, high as u32, (high >> 32) as u32]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random123 1.14's `kat_vectors`, the three `philox4x32 10` lines: counter, key, output.
    const KNOWN_ANSWERS: [([u32; 4], [u32; 2], [u32; 4]); 3] = [
        ([0; 4], [0; 2], [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]),
        ([u32::MAX; 4], [u32::MAX; 2], [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]),
        (
            [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344],
            [0xa409_3822, 0x299f_31d0],
            [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1],
        ),
    ];

    #[test]
    fn philox_block_function_matches_random123s_known_answers() {
        for (counter, key, output) in KNOWN_ANSWERS {
            assert_eq!(philox4x32_10(counter, key), output, "counter {counter:08x?} key {key:08x?}");
        }
    }

    /// `curand_init(seed, subsequence, offset)`, then six `curand()` and, from a fresh init, six
    /// `curand_uniform()` (their bits), as cuRAND drew them on an H200
    /// (`scripts/gpu/curand_philox_draws.cu`).
    #[allow(clippy::type_complexity)]
    const CURAND_DRAWS: [(u64, u64, u64, [u32; 6], [u32; 6]); 7] = [
        (
            0,
            0,
            0,
            [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8, 0xf8e4cca4, 0x5cb200db],
            [0x3ecc4fd2, 0x3f6169c6, 0x3f3c57ac, 0x3f1b00dc, 0x3f78e4cd, 0x3eb96402],
        ),
        (
            0x2a,
            0,
            0,
            [0x9ceaf053, 0x77f5493b, 0x12bf50ad, 0x5742b3d7, 0xfcdb2127, 0x53ba6cfd],
            [0x3f1ceaf0, 0x3eefea92, 0x3d95fa85, 0x3eae8568, 0x3f7cdb21, 0x3ea774da],
        ),
        (
            0x2a,
            0x7,
            0,
            [0x67ee6f2c, 0xe55410cc, 0x6c7eca35, 0x557398d3, 0xe5dde940, 0x600f6196],
            [0x3ecfdcde, 0x3f655411, 0x3ed8fd94, 0x3eaae732, 0x3f65dde9, 0x3ec01ec3],
        ),
        (
            0x2a,
            0x7,
            0x5,
            [0x600f6196, 0x8fcdf8f1, 0x2c8ed839, 0x24ecfc6e, 0xf000aacd, 0x571a4cf0],
            [0x3ec01ec3, 0x3f0fcdf9, 0x3e323b61, 0x3e13b3f2, 0x3f7000ab, 0x3eae349a],
        ),
        (
            0x123456789abcdef,
            0x3,
            0x4,
            [0xefd94150, 0xb6791cd7, 0x349cc23d, 0x1eadfc3f, 0x9b5e271a, 0x7af0c634],
            [0x3f6fd941, 0x3f36791d, 0x3e527309, 0x3df56fe2, 0x3f1b5e27, 0x3ef5e18c],
        ),
        (
            u64::MAX,
            0xffffffff,
            0xfffffffffffffffe,
            [0xd8bb1852, 0xa9402a01, 0x664cf5c2, 0xbcb052c2, 0x3804e01a, 0x06067e70],
            [0x3f58bb18, 0x3f29402a, 0x3ecc99ec, 0x3f3cb053, 0x3e601380, 0x3cc0cfce],
        ),
        (
            0x4d2,
            0x186a0,
            0x200000000,
            [0xdb656968, 0xf7dbd3b7, 0x594d3259, 0x95e27f32, 0xeebadbc3, 0x0ead3509],
            [0x3f5b6569, 0x3f77dbd4, 0x3eb29a65, 0x3f15e27f, 0x3f6ebadc, 0x3d6ad351],
        ),
    ];

    #[test]
    fn philox_stream_draws_what_curand_draws() {
        for (seed, subsequence, offset, raw, uniform) in CURAND_DRAWS {
            let mut stream = Philox::new(seed, subsequence, offset);
            let drawn: [u32; 6] = core::array::from_fn(|_| stream.next_u32());
            assert_eq!(drawn, raw, "curand(), seed {seed:#x} subsequence {subsequence:#x} offset {offset:#x}");
            let mut stream = Philox::new(seed, subsequence, offset);
            let drawn: [u32; 6] = core::array::from_fn(|_| stream.uniform().to_bits());
            assert_eq!(
                drawn, uniform,
                "curand_uniform(), seed {seed:#x} subsequence {subsequence:#x} offset {offset:#x}"
            );
        }
    }

    #[test]
    fn philox_stream_offsets_are_positions_in_one_stream() {
        let mut from_start = Philox::new(42, 7, 0);
        let drawn: [u32; 11] = core::array::from_fn(|_| from_start.next_u32());
        for offset in 0..6 {
            let mut skipped = Philox::new(42, 7, offset);
            for expected in &drawn[offset as usize..offset as usize + 5] {
                assert_eq!(skipped.next_u32(), *expected, "offset {offset}");
            }
        }
        assert_eq!(&drawn[..4], &philox4x32_10([0, 0, 7, 0], [42, 0]));
    }

    #[test]
    fn philox_counter_carries_into_the_subsequence() {
        assert_eq!(increment([u32::MAX, u32::MAX, 5, 0]), [0, 0, 6, 0]);
        assert_eq!(increment([u32::MAX, 0, 5, 0]), [0, 1, 5, 0]);
        assert_eq!(increment([u32::MAX; 4]), [0; 4]);
    }

    #[test]
    fn philox_uniform_lies_in_zero_one_inclusive_of_one() {
        let mut stream = Philox::new(0, 0, 0);
        assert!((0..4096).map(|_| stream.uniform()).all(|u| u > 0.0 && u <= 1.0));
        assert_eq!(uniform_from_bits(u32::MAX), 1.0, "the largest draws round to 1, as cuRAND's");
        assert_eq!(uniform_from_bits(0), 2.328_306_4e-10 / 2.0);
    }
}
