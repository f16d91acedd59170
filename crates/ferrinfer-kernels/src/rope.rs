//! The rope family: rotary position embedding of queries and keys, FlashInfer's `apply_rope*`.
//! Each head's first `rotary_dim` values form `rotary_dim / 2` pairs `(x, y)` — `(i, i +
//! rotary_dim / 2)` (NeoX, FlashInfer's default) or `(2i, 2i + 1)` (`interleave`, GPT-J) — and
//! pair `i` of a token at position `pos` turns by the angle `a = f32(pos) · freq[i]` (one f32
//! product, as FlashInfer):
//!
//! `x' = x · cos a − y · sin a`, `y' = y · cos a + x · sin a`,
//!
//! in f32 whatever the storage type (`x'` as `fma(x, cos, −(y · sin))`). The values past
//! `rotary_dim` are copied (left as they are in place). `freq[i]` is [`frequencies`]': the f32 of
//! FlashInfer's frequency formula, llama 3.1's scaling included, evaluated in f64. `sin a`,
//! `cos a` are [`sin_cos`]'s: within two ulp for every angle below 2^30, where FlashInfer's `__sincosf`
//! loses accuracy past a few hundred radians ([`Computed`]). Or the cosines and sines are read
//! from a table of them a position ([`Cached`]: vLLM's `cos_sin_cache`, FlashInfer's
//! `apply_rope_with_cos_sin_cache`). A computed angle is computed once a (token, pair), not once
//! a head: on the GPU a block's tokens' into shared memory first; a table's cosines and sines
//! are read where they are turned, a lane's vector at a time (a read costs less than the shared
//! table's barrier).
//!
//! One parameter struct shared with the host, the per-head math (the device kernel and the CPU
//! backend run the same functions) and one device kernel, generic over the element type, the
//! vector width, where positions come from and where their angles come from.

use crate::element::Element;
use crate::math::{exp2_f64, mul_add, sin_cos};
use crate::vector::{Coherent, Index, Kept, Packed, Reused};

/// Arguments of the rope kernel, passed by value. Queries `[tokens, q_heads, head_dim]` and keys
/// `[tokens, k_heads, head_dim]`, each addressed by `[token, head]` strides in elements (the last
/// dimension contiguous); the outputs alike (the inputs themselves in place).
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct RopeParams {
    pub q: u64,
    pub k: u64,
    pub q_out: u64,
    pub k_out: u64,
    /// The tokens' positions, or with segments each segment's first position (FlashInfer's
    /// `offsets`); `Positions` says how to read them.
    pub positions: u64,
    /// Elements from one position (offset) to the next.
    pub position_stride: u64,
    /// With segments (`Segments`): the `segments + 1` tokens where each segment starts (and the
    /// last ends: FlashInfer's `indptr`), `indptr_stride` elements apart; else unused.
    pub indptr: u64,
    pub indptr_stride: u64,
    pub segments: u64,
    /// With [`Cached`] angles: `cache_rows` rows of `rotary_dim` f32 each, `cache_stride`
    /// elements apart — row `pos` holds the cosines of pairs `0 … rotary_dim/2 − 1` at position
    /// `pos`, then their sines; else unused.
    pub cache: u64,
    pub cache_stride: u64,
    pub cache_rows: u64,
    pub tokens: u64,
    pub q_strides: [u64; 2],
    pub k_strides: [u64; 2],
    pub q_out_strides: [u64; 2],
    pub k_out_strides: [u64; 2],
    pub q_heads: u32,
    pub k_heads: u32,
    pub head_dim: u32,
    pub rotary_dim: u32,
    /// 1: pairs are adjacent values (GPT-J); 0: `(i, i + rotary_dim / 2)` (NeoX).
    pub interleave: u32,
    /// 1: copy the values past `rotary_dim` (out of place); 0: leave them (in place).
    pub copy_rest: u32,
    /// Threads on one head are `2^lane_bits`, [`lanes`] of them working (the device kernel's
    /// only: a unit's lane and head are then a mask and a shift).
    pub lane_bits: u32,
    /// Tokens a block takes (the device kernel's only): their angles computed once into shared
    /// memory ([`ANGLE_BYTES`] a pair; a table's are read where turned), then every head of each.
    pub tokens_per_block: u32,
    /// Where angles are computed, pair `i`'s frequency is `f32(φ(2^(−i · exponent_step)))` with
    /// `φ(f) = (1 − s) · f · inverse_scale + s · f`, `s = clamp(f · smooth_a + smooth_b, 0, 1)`
    /// ([`frequencies`]): `exponent_step = 2 · log₂(rope_theta) / rotary_dim`, `inverse_scale = 1 /
    /// rope_scale`, and llama 3.1's smoothing (`smooth_a = old_context_len / (2π · (high_freq_factor
    /// − low_freq_factor))`, `smooth_b = −1 / (high_freq_factor / low_freq_factor − 1)`; both 0
    /// for plain rope, so `s = 0`) — FlashInfer's formula, evaluated in f64 and rounded once.
    pub exponent_step: f64,
    pub inverse_scale: f64,
    pub smooth_a: f64,
    pub smooth_b: f64,
}

/// The frequencies of pairs `first … first + VEC − 1` (see [`RopeParams::exponent_step`]): each
/// within 10^-13 of the exact value before its one rounding to f32, so almost always the
/// correctly rounded f32 of FlashInfer's formula (FlashInfer's own `__powf` in f32 is off by a
/// few ulp). Two f64 `exp2`s — the first pair's, and the ratio from one pair to the next, by
/// which the rest follow — whatever `VEC`.
#[inline(always)]
pub fn frequencies<const VEC: usize>(p: &RopeParams, first: u32) -> [f32; VEC] {
    let ratio = exp2_f64(-p.exponent_step);
    let mut base = exp2_f64(-(first as f64) * p.exponent_step);
    let mut out = [0.0; VEC];
    for frequency in &mut out {
        let smooth = (base * p.smooth_a + p.smooth_b).clamp(0.0, 1.0);
        *frequency = ((1.0 - smooth) * (base * p.inverse_scale) + smooth * base) as f32;
        base *= ratio;
    }
    out
}

/// Where a token's position comes from.
pub trait Positions {
    /// Token `token`'s position.
    ///
    /// # Safety
    /// The position arrays of `p` as the launcher validated them.
    unsafe fn of(p: &RopeParams, token: u64) -> i64;
}

/// A position a token (FlashInfer's `pos_ids`).
pub struct Ids<I>(core::marker::PhantomData<I>);

impl<I: Index> Positions for Ids<I> {
    #[inline(always)]
    unsafe fn of(p: &RopeParams, token: u64) -> i64 {
        unsafe { I::read(p.positions, token, p.position_stride) }
    }
}

/// Segments of consecutive tokens (FlashInfer's ragged `indptr`), a segment's tokens at
/// consecutive positions from its offset: token `t` of segment `b` (`indptr[b] ≤ t <
/// indptr[b + 1]`, the last such `b`, found by bisection) is at `offsets[b] + t − indptr[b]`.
/// Whatever the bounds hold, only `indptr[0 … segments]` and `offsets[0 … segments − 1]` are
/// read.
pub struct Segments<I>(core::marker::PhantomData<I>);

impl<I: Index> Positions for Segments<I> {
    #[inline(always)]
    unsafe fn of(p: &RopeParams, token: u64) -> i64 {
        let bound = |b: u64| unsafe { I::read(p.indptr, b, p.indptr_stride) };
        let (mut low, mut high) = (0, p.segments.max(1));
        while high - low > 1 {
            let middle = low + (high - low) / 2;
            if bound(middle) <= token as i64 { low = middle } else { high = middle }
        }
        let offset = unsafe { I::read(p.positions, low, p.position_stride) };
        offset.wrapping_add((token as i64).wrapping_sub(bound(low)))
    }
}

/// Where the cosine and sine of a pair at a position come from.
pub trait Angles {
    /// Read where they are needed, not through the device kernel's shared table: a read costs
    /// less than the table's barrier.
    const DIRECT: bool;

    /// `(cos, sin)` of pair `pair` at `position`.
    ///
    /// # Safety
    /// The angle table of `p` (if any) as the launcher validated it.
    unsafe fn of(p: &RopeParams, position: i64, pair: u32) -> (f32, f32);

    /// Cosines and sines of `VEC` pairs from pair `first` (a multiple of `VEC`) at `position`.
    ///
    /// # Safety
    /// As [`Angles::of`]; with a table, its address, row stride and `rotary_dim / 2` multiples
    /// of `VEC` f32 where `VEC · 4 ≤ 16` bytes, else of 4.
    #[inline(always)]
    unsafe fn lane<const VEC: usize>(p: &RopeParams, position: i64, first: u32) -> ([f32; VEC], [f32; VEC]) {
        let (mut cos, mut sin) = ([0.0; VEC], [0.0; VEC]);
        for i in 0..VEC {
            (cos[i], sin[i]) = unsafe { Self::of(p, position, first + i as u32) };
        }
        (cos, sin)
    }
}

/// Computed: `sin_cos` of `f32(position) · freq[pair]` ([`frequencies`]).
pub struct Computed;

impl Angles for Computed {
    const DIRECT: bool = false;

    #[inline(always)]
    unsafe fn of(p: &RopeParams, position: i64, pair: u32) -> (f32, f32) {
        let [frequency] = frequencies::<1>(p, pair);
        let (sin, cos) = sin_cos(position as f32 * frequency);
        (cos, sin)
    }
}

/// Read from the table at `p.cache` ([`RopeParams::cache`]). A position outside its rows (which
/// the launcher cannot check on the GPU without waiting for it) reads nothing and gives NaN,
/// so its token's rotated values come out NaN rather than from other memory.
pub struct Cached;

impl Angles for Cached {
    const DIRECT: bool = true;

    #[inline(always)]
    unsafe fn of(p: &RopeParams, position: i64, pair: u32) -> (f32, f32) {
        let ([cos], [sin]) = unsafe { Self::lane::<1>(p, position, pair) };
        (cos, sin)
    }

    #[inline(always)]
    unsafe fn lane<const VEC: usize>(p: &RopeParams, position: i64, first: u32) -> ([f32; VEC], [f32; VEC]) {
        // A negative position is far above the rows as a u64.
        let inside = (position as u64) < p.cache_rows;
        let row = (p.cache as *const f32).wrapping_add((position as u64).wrapping_mul(p.cache_stride) as usize);
        let read = |at: u32| unsafe { Packed::<f32, VEC>::load_if::<Reused>(inside, row.wrapping_add(at as usize)) };
        let (cos, sin) = (read(first).to_f32(), read(p.rotary_dim / 2 + first).to_f32());
        if inside { (cos, sin) } else { ([f32::NAN; VEC], [f32::NAN; VEC]) }
    }
}

/// One lane's two vectors of a head: for a rotating lane the `x` and `y` halves of its `VEC`
/// pairs (NeoX: `VEC` values at `lane · VEC` and at `rotary_dim / 2` further; interleaved: the
/// `2 · VEC` values from `2 · lane · VEC`, one pair after another), for a copying lane two
/// consecutive vectors past `rotary_dim` (the second only if inside the head).
#[derive(Clone, Copy)]
struct LaneSpan {
    offsets: [u32; 2],
    /// Whether the second vector lies inside the head (a copying lane's may not).
    second: bool,
    rotates: bool,
}

impl LaneSpan {
    #[inline(always)]
    fn of<const VEC: usize>(p: &RopeParams, lane: u32) -> Self {
        let vec = VEC as u32;
        let rotating = p.rotary_dim / (2 * vec);
        if lane < rotating {
            let first = if p.interleave != 0 { 2 * lane * vec } else { lane * vec };
            let second = if p.interleave != 0 { first + vec } else { first + p.rotary_dim / 2 };
            return LaneSpan { offsets: [first, second], second: true, rotates: true };
        }
        let first = p.rotary_dim + 2 * (lane - rotating) * vec;
        LaneSpan { offsets: [first, first + vec], second: first + vec < p.head_dim, rotates: false }
    }
}

/// Lanes a head needs: one a `VEC` of pairs, one for every two vectors past `rotary_dim`.
#[inline(always)]
pub fn lanes(head_dim: u32, rotary_dim: u32, vec: u32) -> u32 {
    rotary_dim / (2 * vec) + (head_dim - rotary_dim).div_ceil(2 * vec)
}

/// `(x', y')` of `VEC` pairs given as their `x` and `y` halves (NeoX order).
#[inline(always)]
fn rotate<const VEC: usize>(
    x: [f32; VEC],
    y: [f32; VEC],
    cos: &[f32; VEC],
    sin: &[f32; VEC],
) -> ([f32; VEC], [f32; VEC]) {
    let (mut x2, mut y2) = ([0.0; VEC], [0.0; VEC]);
    for i in 0..VEC {
        x2[i] = mul_add(x[i], cos[i], -(y[i] * sin[i]));
        y2[i] = mul_add(y[i], cos[i], x[i] * sin[i]);
    }
    (x2, y2)
}

/// The lane's two vectors of one head rotated (or, for a copying lane, as they are): interleaved
/// pairs are split into halves and rejoined around [`rotate`] (at one element a vector the
/// halves are the vectors themselves).
#[inline(always)]
fn turned<T: Element, const VEC: usize>(
    p: &RopeParams,
    span: LaneSpan,
    values: [Packed<T, VEC>; 2],
    cos: &[f32; VEC],
    sin: &[f32; VEC],
) -> [Packed<T, VEC>; 2] {
    if !span.rotates {
        return values;
    }
    let (a, b) = (values[0].to_f32(), values[1].to_f32());
    if p.interleave == 0 || VEC == 1 {
        let (x, y) = rotate(a, b, cos, sin);
        return packed(x, y);
    }
    // Pair m is (e[2m], e[2m + 1]) of e = a ++ b.
    let element = |j: usize| if j < VEC { a[j % VEC] } else { b[j % VEC] };
    let (x, y) =
        rotate(core::array::from_fn(|m| element(2 * m)), core::array::from_fn(|m| element(2 * m + 1)), cos, sin);
    let joined = |j: usize| if j.is_multiple_of(2) { x[(j / 2) % VEC] } else { y[(j / 2) % VEC] };
    [Packed::from_f32(core::array::from_fn(joined)), Packed::from_f32(core::array::from_fn(|j| joined(VEC + j)))]
}

/// Two vectors of `VEC` values rounded to `T`; single 16-bit values as a pair, by one
/// conversion (`cvt.rn.{bf16x2,f16x2}.f32` on the GPU) rather than two.
#[inline(always)]
fn packed<T: Element, const VEC: usize>(x: [f32; VEC], y: [f32; VEC]) -> [Packed<T, VEC>; 2] {
    if VEC == 1 && core::mem::size_of::<T>() == 2 {
        let word = T::pack_pair(x[0], y[0]);
        return [Packed::ZERO.map_words(|_| word & 0xffff), Packed::ZERO.map_words(|_| word >> 16)];
    }
    [Packed::from_f32(x), Packed::from_f32(y)]
}

/// Head `head` of token `token` (the queries' first, then the keys'): `(input, output)`.
#[inline(always)]
fn head_pointers<T: Element>(p: &RopeParams, token: u64, head: u32) -> (*const T, *mut T) {
    let (input, output, strides, out_strides, h) = if head < p.q_heads {
        (p.q, p.q_out, p.q_strides, p.q_out_strides, head)
    } else {
        (p.k, p.k_out, p.k_strides, p.k_out_strides, head - p.q_heads)
    };
    let at = |strides: [u64; 2]| (token * strides[0] + h as u64 * strides[1]) as usize;
    ((input as *const T).wrapping_add(at(strides)), (output as *mut T).wrapping_add(at(out_strides)))
}

/// The lane's two vectors of a head where `read` (else zeros, no access).
///
/// # Safety
/// `head` as the launcher validated it, where `read`.
#[inline(always)]
unsafe fn load_span<T: Element, const VEC: usize>(read: bool, head: *const T, span: LaneSpan) -> [Packed<T, VEC>; 2] {
    unsafe {
        [
            Packed::load_if::<Coherent>(read, head.wrapping_add(span.offsets[0] as usize)),
            Packed::load_if::<Coherent>(read && span.second, head.wrapping_add(span.offsets[1] as usize)),
        ]
    }
}

/// Writes the lane's two vectors of a head, unless it is a copying lane in place.
///
/// # Safety
/// As [`load_span`], writable.
#[inline(always)]
unsafe fn store_span<T: Element, const VEC: usize>(
    p: &RopeParams,
    head: *mut T,
    span: LaneSpan,
    values: [Packed<T, VEC>; 2],
) {
    let write = span.rotates || p.copy_rest != 0;
    unsafe {
        values[0].store_if::<Kept>(write, head.wrapping_add(span.offsets[0] as usize));
        values[1].store_if::<Kept>(write && span.second, head.wrapping_add(span.offsets[1] as usize));
    }
}

/// One head's lane: its input and output and what it covers.
#[derive(Clone, Copy)]
struct Unit<T> {
    input: *const T,
    output: *mut T,
    span: LaneSpan,
}

impl<T: Element> Unit<T> {
    /// Lane `lane` of head `head` (the queries' first, then the keys') of token `token`.
    #[inline(always)]
    fn of<const VEC: usize>(p: &RopeParams, token: u64, head: u32, lane: u32) -> Self {
        let (input, output) = head_pointers::<T>(p, token, head);
        Unit { input, output, span: LaneSpan::of::<VEC>(p, lane) }
    }

    /// Its two vectors where `read` (else zeros, no access).
    ///
    /// # Safety
    /// As the launcher validated the unit, where `read`.
    #[inline(always)]
    unsafe fn load_if<const VEC: usize>(&self, read: bool) -> [Packed<T, VEC>; 2] {
        unsafe { load_span::<T, VEC>(read, self.input, self.span) }
    }

    /// `values` turned by the lane's angles and written (not written: a copying lane in place).
    ///
    /// # Safety
    /// As [`Unit::load_if`].
    #[inline(always)]
    unsafe fn store<const VEC: usize>(
        &self,
        p: &RopeParams,
        values: [Packed<T, VEC>; 2],
        angles: &([f32; VEC], [f32; VEC]),
    ) {
        let turned = turned(p, self.span, values, &angles.0, &angles.1);
        unsafe { store_span(p, self.output, self.span, turned) }
    }
}

/// One token on the host (the CPU backend's inner loop): every lane of every head, each lane's
/// angles computed once.
///
/// # Safety
/// `params` as the launcher validates them.
pub unsafe fn rope_token<T: Element, P: Positions, A: Angles>(p: &RopeParams, token: u64) {
    let position = unsafe { P::of(p, token) };
    for lane in 0..lanes(p.head_dim, p.rotary_dim, 1) {
        let rotates = LaneSpan::of::<1>(p, lane).rotates;
        let (cos, sin) = if rotates { unsafe { A::of(p, position, lane) } } else { (0.0, 0.0) };
        let angles = ([cos], [sin]);
        for head in 0..p.q_heads + p.k_heads {
            let unit = Unit::<T>::of::<1>(p, token, head, lane);
            unsafe { unit.store(p, unit.load_if::<1>(true), &angles) };
        }
    }
}

/// Shared-memory bytes an angle takes in the device kernel's table: its cosine and its sine.
pub const ANGLE_BYTES: u32 = 8;

#[cfg(target_arch = "nvptx64")]
pub use device_kernels::rope_rows;

#[cfg(target_arch = "nvptx64")]
mod device_kernels {
    use super::*;
    use crate::device::{
        block_barrier, block_index, block_size, chain_after_prior_grids, dynamic_shared, thread_index,
    };
    use crate::vector::Shared;

    /// The device kernel: a block takes `tokens_per_block` tokens. First its threads compute
    /// (or read) each (token, pair)'s cosine and sine once into shared memory — the cosines of the
    /// block's tokens, then their sines, pair after pair — then they take the tokens' units
    /// (lane, head, token: lane fastest), two a step, both units' loads issued before either
    /// is turned. [`Angles::DIRECT`] angles (a table's) skip the first phase: each unit reads
    /// its lane's where it turns them, beside its values, with no barrier between.
    /// Launcher's guarantees: `rotary_dim / 2`, `head_dim − rotary_dim`, every stride and
    /// pointer multiples of `VEC` elements (a table's as [`Angles::lane`] needs); dynamic shared
    /// memory of `tokens_per_block · rotary_dim / 2 · ANGLE_BYTES` unless direct.
    #[inline(always)]
    pub unsafe fn rope_rows<T: Element, P: Positions, A: Angles, const VEC: usize>(p: &RopeParams) {
        chain_after_prior_grids();
        let (thread, threads) = (thread_index(), block_size());
        let first = block_index() as u64 * p.tokens_per_block as u64;
        let tokens = (p.tokens - first).min(p.tokens_per_block as u64) as u32;
        // Through NonZero: divisions that cannot fail have no panic path.
        let nonzero = |n: u32| core::num::NonZeroU32::new(n).unwrap_or(core::num::NonZeroU32::MIN);
        let pairs = p.rotary_dim / 2;
        let cosines = dynamic_shared();
        let sines = cosines + p.tokens_per_block * pairs * 4;
        let mut i = if A::DIRECT { tokens * pairs } else { thread };
        while i < tokens * pairs {
            let (token, pair) = (i / nonzero(pairs), i % nonzero(pairs));
            let (cos, sin) = unsafe { A::of(p, P::of(p, first + token as u64), pair) };
            crate::device::store_shared_u32(cosines + 4 * i, cos.to_bits());
            crate::device::store_shared_u32(sines + 4 * i, sin.to_bits());
            i += threads;
        }
        if !A::DIRECT {
            block_barrier();
        }
        let heads = p.q_heads + p.k_heads;
        let lanes_mask = (1u32 << p.lane_bits) - 1;
        let units = (tokens * heads) << p.lane_bits;
        // Unit `u`: lane, head, token (local), and whether it is one (idle padding lanes are not).
        let unit = |u: u32| {
            let (lane, rest) = (u & lanes_mask, u >> p.lane_bits);
            let (token, head) = (rest / nonzero(heads), rest % nonzero(heads));
            let working = u < units && lane < lanes(p.head_dim, p.rotary_dim, VEC as u32);
            (Unit::<T>::of::<VEC>(p, first + token as u64, head, lane), token, lane, working)
        };
        let angles_of = |token: u32, lane: u32| {
            if A::DIRECT {
                // SAFETY: the launcher validated the token's position and the table.
                return unsafe { A::lane::<VEC>(p, P::of(p, first + token as u64), lane * VEC as u32) };
            }
            let at = 4 * (token * pairs + lane * VEC as u32);
            // SAFETY: inside the table the first phase wrote (a rotating lane's pairs).
            unsafe {
                (
                    Packed::<f32, VEC>::load::<Shared>((cosines + at) as usize as *const f32).to_f32(),
                    Packed::<f32, VEC>::load::<Shared>((sines + at) as usize as *const f32).to_f32(),
                )
            }
        };
        let mut u = thread;
        while u < units {
            let (first_unit, token0, lane0, working0) = unit(u);
            let (second_unit, token1, lane1, working1) = unit(u + threads);
            let values0 = unsafe { first_unit.load_if::<VEC>(working0) };
            let values1 = unsafe { second_unit.load_if::<VEC>(working1) };
            if working0 {
                let angles = if first_unit.span.rotates { angles_of(token0, lane0) } else { ([0.0; VEC], [0.0; VEC]) };
                unsafe { first_unit.store(p, values0, &angles) };
            }
            if working1 {
                let angles = if second_unit.span.rotates { angles_of(token1, lane1) } else { ([0.0; VEC], [0.0; VEC]) };
                unsafe { second_unit.store(p, values1, &angles) };
            }
            u += 2 * threads;
        }
    }
}
