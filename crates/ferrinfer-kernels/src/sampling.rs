//! The sampling family: what turns a decode step's logits into probabilities and tokens —
//! `softmax(logits / temperature)` (FlashInfer's `softmax`) and the top-k filters
//! (`top_k_mask_logits`, `top_k_renorm_probs`).
//!
//! Softmax numerics, shared by the device kernel and the CPU backend: a logit `x` of a row with
//! temperature `t` becomes `u = x · s` with `s = log2(e) / t` (`s = 0` for `t = 0`, FlashInfer's
//! rule: every finite logit then weighs the same), and the row's probabilities are
//! `2^(u − max u) / Σ 2^(u − max u)`. The sum is kept online as a [`Partial`] — a running maximum
//! and the sum scaled to it — so a row is read once to reduce and once to write, and partials
//! of slices of a row combine in any fixed order: the device combines them in a fixed tree, so
//! a result never depends on timing or on the other rows. A row of −∞ only, or holding +∞ or
//! NaN, comes out NaN (as FlashInfer's).
//!
//! Top-k: a row's entries are ranked by [`order_key`] (IEEE 754's total order: −NaN < −∞ < … <
//! −0 < +0 < … < +∞ < +NaN), and its *pivot* is the key of its k-th largest entry, found by a
//! radix search ([`PivotSearch`]) over the keys' digits from the top, counting how many entries
//! fall in each digit — integer counts, so the pivot never depends on the order they are added in.
//! Every entry whose key is at least the pivot is kept (ties with the k-th are all kept, as
//! FlashInfer's `>= pivot`); `top_k = 0` or `≥ vocab` keeps the whole row. The mask writes −∞ in
//! place of the others; the renorm writes the kept probabilities divided by their sum (a fixed
//! tree on the device) and 0 in place of the others.

use crate::element::Element;
use crate::math::exp2;

/// Arguments of every softmax kernel, passed by value. Strides and counts in elements.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct SoftmaxParams {
    /// `[rows, vocab]`.
    pub logits: u64,
    /// `[rows, vocab]`, f32.
    pub probs: u64,
    pub rows: u64,
    pub logits_row_stride: u64,
    pub probs_row_stride: u64,
    /// `[rows]` f32, one temperature a row; 0: `temperature` for every row.
    pub temperatures: u64,
    pub vocab: u32,
    /// The temperature of every row, unless `temperatures` is given.
    pub temperature: f32,
    /// Blocks sharing a row (the launch's thread-block cluster, sm_90), each reducing and writing
    /// a contiguous slice of it; 1 without a cluster.
    pub slices: u32,
    pub _reserved: u32,
}

/// `log2(e) / temperature`, 0 for a temperature of 0 (FlashInfer: `inv_temp = 0`).
#[inline(always)]
pub fn logit_scale(temperature: f32) -> f32 {
    if temperature == 0.0 { 0.0 } else { core::f32::consts::LOG2_E / temperature }
}

/// The temperature of row `row`: its entry of `p.temperatures`, or `p.temperature`.
///
/// # Safety
/// `p.temperatures`, when not 0, must hold `p.rows` f32.
#[inline(always)]
pub unsafe fn row_temperature(p: &SoftmaxParams, row: u64) -> f32 {
    if p.temperatures == 0 {
        return p.temperature;
    }
    let at = (p.temperatures as *const f32).wrapping_add(row as usize);
    unsafe { crate::vector::Packed::<f32, 1>::load::<crate::vector::Reused>(at) }.get(0)
}

/// A running softmax denominator in base 2: `sum = Σ 2^(u − max)` over the values seen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Partial {
    pub max: f32,
    pub sum: f32,
}

impl Partial {
    /// Nothing seen yet.
    pub const EMPTY: Partial = Partial { max: f32::NEG_INFINITY, sum: 0.0 };

    /// This partial with `values` added (already scaled to base 2).
    #[inline(always)]
    pub fn with<const N: usize>(self, values: &[f32; N]) -> Partial {
        let mut max = self.max;
        for &u in values {
            max = max.max(u);
        }
        if max == f32::NEG_INFINITY {
            return self;
        }
        let mut sum = self.sum * exp2(self.max - max);
        for &u in values {
            sum += exp2(u - max);
        }
        Partial { max, sum }
    }

    /// Both partials' values together. Symmetric bit for bit (`a.merge(b) == b.merge(a)`), so
    /// both lanes of a butterfly exchange hold the same result.
    #[inline(always)]
    pub fn merge(self, other: Partial) -> Partial {
        let max = self.max.max(other.max);
        if max == f32::NEG_INFINITY {
            return Partial::EMPTY;
        }
        Partial { max, sum: self.sum * exp2(self.max - max) + other.sum * exp2(other.max - max) }
    }

    /// The probability of scaled value `u` once every value of the row is in.
    #[inline(always)]
    pub fn probability(&self, u: f32, inverse_sum: f32) -> f32 {
        exp2(u - self.max) * inverse_sum
    }
}

/// Values a host partial takes before it is merged into the row's: summing a 128k row's values
/// one after another into one f32 would lose ~1e-5 of the sum to rounding, in chunks ~1e-7.
const HOST_CHUNK: usize = 256;

/// One row on the host (the CPU backend): the same scaling, partials and rounding steps as the
/// device, summed by chunks of [`HOST_CHUNK`], eight values a step.
///
/// # Safety
/// `p` must describe valid memory as the launcher validates it: the row in bounds, the output
/// f32 and disjoint from the logits.
pub unsafe fn softmax_row<T: Element>(p: &SoftmaxParams, row: u64) {
    let logits = (p.logits as *const T).wrapping_add((row * p.logits_row_stride) as usize);
    let probs = (p.probs as *mut f32).wrapping_add((row * p.probs_row_stride) as usize);
    let scale = logit_scale(unsafe { row_temperature(p, row) });
    let scaled = |i: usize| unsafe { logits.add(i).read() }.to_f32() * scale;
    let vocab = p.vocab as usize;
    let mut partial = Partial::EMPTY;
    for start in (0..vocab).step_by(HOST_CHUNK) {
        let end = (start + HOST_CHUNK).min(vocab);
        // Eight values a step, as the device takes a vector: one rescaling `exp2` per eight
        // values, not per value (−∞ pads the last step; it adds nothing).
        let chunk = (start..end).step_by(8).fold(Partial::EMPTY, |chunk, group| {
            let mut values = [f32::NEG_INFINITY; 8];
            for (k, value) in values.iter_mut().enumerate().filter(|(k, _)| group + k < end) {
                *value = scaled(group + k);
            }
            chunk.with(&values)
        });
        partial = partial.merge(chunk);
    }
    let inverse_sum = 1.0 / partial.sum;
    for i in 0..vocab {
        unsafe { probs.add(i).write(partial.probability(scaled(i), inverse_sum)) };
    }
}

/// Arguments of the top-k kernels (`top_k_mask_logits`, `top_k_renorm_probs`), passed by value.
/// Strides and counts in elements; input and output of one dtype.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct TopKParams {
    /// `[rows, vocab]`: logits (mask) or probabilities (renorm).
    pub input: u64,
    /// `[rows, vocab]`.
    pub output: u64,
    pub rows: u64,
    pub input_row_stride: u64,
    pub output_row_stride: u64,
    /// `[rows]` i32, one `top_k` a row (≤ 0 keeps the row); 0: `top_k` for every row.
    pub top_ks: u64,
    pub vocab: u32,
    /// Entries kept a row (ties with the last one kept too); 0 or `≥ vocab` keeps them all.
    pub top_k: u32,
    /// Blocks sharing a row (the launch's thread-block cluster, sm_90), each counting and writing
    /// a contiguous slice of it; 1 without a cluster.
    pub slices: u32,
    /// 1 when each block keeps its slice in shared memory (after the exchange and counting areas,
    /// `top_k_shared_bytes`) between the passes over it; 0: every pass reads global memory.
    pub staged: u32,
}

/// The `top_k` of row `row`: its entry of `p.top_ks` (≤ 0 read as 0: the whole row), or
/// `p.top_k`.
///
/// # Safety
/// `p.top_ks`, when not 0, must hold `p.rows` i32.
#[inline(always)]
pub unsafe fn row_top_k(p: &TopKParams, row: u64) -> u32 {
    if p.top_ks == 0 {
        return p.top_k;
    }
    let at = (p.top_ks as *const f32).wrapping_add(row as usize);
    let bits = unsafe { crate::vector::Packed::<f32, 1>::load::<crate::vector::Reused>(at) }.get(0).to_bits();
    (bits as i32).max(0) as u32
}

/// What a top-k kernel writes for the entries it keeps and those it drops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopKOutput {
    /// `top_k_mask_logits`: kept logits as they are, −∞ for the others.
    Mask,
    /// `top_k_renorm_probs`: kept probabilities divided by their sum, 0 for the others.
    Renorm,
}

/// Bits of a digit of the pivot search: 16 counts per round.
pub const DIGIT_BITS: u32 = 4;
/// Digits a round counts.
pub const DIGITS: usize = 1 << DIGIT_BITS;

/// Bits of `T`'s keys: its size.
#[inline(always)]
const fn key_bits<T>() -> u32 {
    8 * core::mem::size_of::<T>() as u32
}

/// The rank key of `x`: unsigned order of keys is IEEE 754's total order of values (negative
/// values' bits inverted, positive ones' sign bit set), in the low `8 · size` bits.
#[inline(always)]
pub fn order_key<T: Element>(x: T) -> u32 {
    word_keys::<T>(x.to_bits()) & word_signs::<T>().1
}

/// The sign bits of the elements of `T` a 32-bit word packs (one f32, two 16-bit values).
#[inline(always)]
const fn word_signs<T>() -> (u32, u32) {
    if key_bits::<T>() == 32 { (0x8000_0000, u32::MAX) } else { (0x8000_8000, 0xffff) }
}

/// [`order_key`] of every element packed in `word`, at once: a negative element's bits are
/// inverted, a positive one's sign set (`word ^ (all-ones where negative | signs)`).
#[inline(always)]
pub fn word_keys<T>(word: u32) -> u32 {
    let (signs, ones) = word_signs::<T>();
    let negative = ((word & signs) >> (key_bits::<T>() - 1)).wrapping_mul(ones);
    word ^ (negative | signs)
}

/// The elements whose [`word_keys`] `keys` are.
#[inline(always)]
pub fn word_values<T>(keys: u32) -> u32 {
    let (signs, ones) = word_signs::<T>();
    let negative = ((!keys & signs) >> (key_bits::<T>() - 1)).wrapping_mul(ones);
    keys ^ (negative | signs)
}

/// The search for a row's pivot, a digit a round from the top: `prefix` holds the digits found
/// (`known` their bits), and `rank` is how many of the entries that share them the pivot must
/// still leave at or above it. A round counts the candidates' next digit ([`PivotSearch::digit`]);
/// [`PivotSearch::choose`] takes the totals. It ends early when the chosen digit's candidates are
/// exactly those still wanted: the pivot is then the digit's lowest key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PivotSearch {
    prefix: u32,
    known: u32,
    shift: u32,
    rank: u32,
    done: bool,
}

impl PivotSearch {
    /// The search for the `top_k`-th largest of `vocab` keys of `T` (done at once, pivot 0 —
    /// every key — for 0 or `≥ vocab`).
    #[inline(always)]
    pub fn new<T: Element>(top_k: u32, vocab: u32) -> Self {
        let done = top_k == 0 || top_k >= vocab;
        PivotSearch { prefix: 0, known: 0, shift: key_bits::<T>() - DIGIT_BITS, rank: top_k, done }
    }

    #[inline(always)]
    pub fn done(&self) -> bool {
        self.done
    }

    /// The pivot's key once [`PivotSearch::done`].
    #[inline(always)]
    pub fn pivot(&self) -> u32 {
        self.prefix
    }

    /// Whether `key` has every digit found so far: a candidate of this round.
    #[inline(always)]
    pub fn is_candidate(&self, key: u32) -> bool {
        key & self.known == self.prefix
    }

    /// The digit this round counts for `key`, or [`DIGITS`] when `key` is no longer a candidate.
    #[inline(always)]
    pub fn digit(&self, key: u32) -> u32 {
        if self.is_candidate(key) { (key >> self.shift) & (DIGITS as u32 - 1) } else { DIGITS as u32 }
    }

    /// Takes a round's totals (candidates per digit, over the whole row): the largest digit at
    /// or above which `rank` candidates lie.
    #[inline(always)]
    pub fn choose(&mut self, totals: &[u32; DIGITS]) {
        let mut above = 0;
        for digit in (0..DIGITS).rev() {
            let with = above + totals[digit];
            if with >= self.rank {
                self.prefix |= (digit as u32) << self.shift;
                self.known |= (DIGITS as u32 - 1) << self.shift;
                self.rank -= above;
                self.done = self.rank == totals[digit] || self.shift == 0;
                self.shift = self.shift.saturating_sub(DIGIT_BITS);
                return;
            }
            above = with;
        }
        // Fewer candidates than `rank`: counts that disagree with the row (never, when every
        // block counts the same row); keep what was found rather than loop.
        self.done = true;
    }
}

/// Counts of the [`DIGITS`] digits without indexing (on the device an indexed array would live in
/// local memory): a count is one 64-bit add of a one-hot nibble (`1 << 4·digit`), the nibbles
/// spread into bytes (even and odd digits apart) after at most 15 counts
/// ([`DigitCounts::spread`]), the bytes widened into [`DigitCounts::wide`] before any reaches 256.
#[derive(Clone, Copy)]
pub struct DigitCounts {
    nibbles: u64,
    bytes: [u64; 2],
    pending: u32,
    pub wide: [u32; DIGITS],
}

impl DigitCounts {
    /// Counts the bytes take before they are widened.
    const BYTE_LIMIT: u32 = 255;
    /// Counts the nibbles take before they are spread.
    pub const NIBBLE_LIMIT: u32 = 15;
    const LOW_NIBBLES: u64 = 0x0f0f_0f0f_0f0f_0f0f;

    pub const ZERO: DigitCounts = DigitCounts { nibbles: 0, bytes: [0; 2], pending: 0, wide: [0; DIGITS] };

    /// Counts `digit` (≥ [`DIGITS`]: nothing). At most [`DigitCounts::NIBBLE_LIMIT`] calls between
    /// two [`DigitCounts::spread`]s.
    #[inline(always)]
    pub fn add(&mut self, digit: u32) {
        self.nibbles += 1u64.checked_shl(4 * digit).unwrap_or(0);
    }

    /// Moves the nibbles' counts (`next` of them, at most [`DigitCounts::NIBBLE_LIMIT`]) into the
    /// bytes, widening the bytes first if they could overflow.
    #[inline(always)]
    pub fn spread(&mut self, next: u32) {
        if self.pending + next > Self::BYTE_LIMIT {
            self.widen();
        }
        self.pending += next;
        self.bytes[0] += self.nibbles & Self::LOW_NIBBLES;
        self.bytes[1] += (self.nibbles >> 4) & Self::LOW_NIBBLES;
        self.nibbles = 0;
    }

    /// Every spread count in [`DigitCounts::wide`].
    #[inline(always)]
    pub fn widen(&mut self) {
        for (digit, wide) in self.wide.iter_mut().enumerate() {
            *wide += ((self.bytes[digit % 2] >> (8 * (digit / 2))) & 0xff) as u32;
        }
        self.bytes = [0; 2];
        self.pending = 0;
    }
}

/// One row of a top-k op on the host (the CPU backend): the same keys, search and rounding as
/// the device; the renorm's sum by chunks of [`HOST_CHUNK`].
///
/// # Safety
/// `p` must describe valid memory as the launcher validates it: the row in bounds, input and
/// output of `T`, disjoint.
pub unsafe fn top_k_row<T: Element>(p: &TopKParams, row: u64, output: TopKOutput) {
    let input = (p.input as *const T).wrapping_add((row * p.input_row_stride) as usize);
    let out = (p.output as *mut T).wrapping_add((row * p.output_row_stride) as usize);
    let value = |i: usize| unsafe { input.add(i).read() };
    let vocab = p.vocab as usize;
    let mut search = PivotSearch::new::<T>(unsafe { row_top_k(p, row) }, p.vocab);
    while !search.done() {
        let mut totals = [0u32; DIGITS];
        for i in 0..vocab {
            let digit = search.digit(order_key(value(i)));
            if let Some(total) = totals.get_mut(digit as usize) {
                *total += 1;
            }
        }
        search.choose(&totals);
    }
    let kept = |i: usize| order_key(value(i)) >= search.pivot();
    let scale = match output {
        TopKOutput::Mask => 1.0,
        TopKOutput::Renorm => {
            let chunk_sum = |start: usize| {
                (start..(start + HOST_CHUNK).min(vocab)).filter(|&i| kept(i)).map(|i| value(i).to_f32()).sum::<f32>()
            };
            1.0 / (0..vocab).step_by(HOST_CHUNK).map(chunk_sum).sum::<f32>()
        }
    };
    for i in 0..vocab {
        let x = value(i);
        let y = match (kept(i), output) {
            (true, TopKOutput::Mask) => x,
            (true, TopKOutput::Renorm) => T::from_f32(x.to_f32() * scale),
            (false, TopKOutput::Mask) => T::from_f32(f32::NEG_INFINITY),
            (false, TopKOutput::Renorm) => T::from_f32(0.0),
        };
        unsafe { out.add(i).write(y) };
    }
}

/// Dynamic shared memory of a top-k block before its staged slice: the cluster exchange, the
/// digit counts' scratch and the round's 16 totals.
pub const TOP_K_HEADER_BYTES: u32 = crate::CLUSTER_EXCHANGE_BYTES + crate::BIN_SCRATCH_BYTES + 4 * DIGITS as u32;

#[cfg(target_arch = "nvptx64")]
pub use device_kernels::{softmax_rows, top_k_mask_rows, top_k_renorm_rows};

#[cfg(target_arch = "nvptx64")]
mod device_kernels {
    use super::*;
    use core::arch::asm;

    use crate::device::{
        ClusterExchange, block_barrier, block_pairs, block_size, block_sum_bins, chain_after_prior_grids,
        dynamic_shared, thread_index,
    };
    use crate::vector::{Kept, Packed, Reused, Shared};

    /// Vectors each thread loads before it reduces them: their loads are in flight together.
    const UNROLL: usize = 4;

    impl From<Partial> for [f32; 2] {
        #[inline(always)]
        fn from(p: Partial) -> Self {
            [p.max, p.sum]
        }
    }

    impl From<[f32; 2]> for Partial {
        #[inline(always)]
        fn from([max, sum]: [f32; 2]) -> Self {
            Partial { max, sum }
        }
    }

    #[inline(always)]
    fn merge_pairs(a: [f32; 2], b: [f32; 2]) -> [f32; 2] {
        Partial::from(a).merge(Partial::from(b)).into()
    }

    /// The device kernel: the grid's y dimension strides over rows; the `p.slices` blocks of a
    /// cluster (x) share a row, each reducing its slice, exchanging partials through the
    /// cluster's shared memory, then writing its slice. Launcher's guarantees: `vocab`, strides
    /// and pointers multiples of `VEC` elements (probs: `min(VEC · 4, 16)` bytes); the launch's
    /// cluster is `(slices, 1, 1)` (none for 1) and its dynamic shared memory
    /// [`crate::CLUSTER_EXCHANGE_BYTES`].
    #[inline(always)]
    pub unsafe fn softmax_rows<T: Element, const VEC: usize>(p: &SoftmaxParams) {
        chain_after_prior_grids();
        let slices = ClusterExchange::new(p.slices);
        let vectors = p.vocab as usize / VEC;
        let per_slice = vectors.div_ceil(slices.count() as usize);
        let begin = (slices.rank() as usize * per_slice).min(vectors);
        let end = (begin + per_slice).min(vectors);
        let (step, first) = (block_size() as usize, begin + thread_index() as usize);
        let (mut row, row_step) =
            unsafe { (core::arch::nvptx::_block_idx_y() as u64, core::arch::nvptx::_grid_dim_y() as u64) };
        let mut round = 0u32;
        while row < p.rows {
            let logits = (p.logits as *const T).wrapping_add((row * p.logits_row_stride) as usize);
            let probs = (p.probs as *mut f32).wrapping_add((row * p.probs_row_stride) as usize);
            let scale = logit_scale(unsafe { row_temperature(p, row) });
            let scaled = |v: usize| {
                let x = unsafe { Packed::<T, VEC>::load::<Reused>(logits.add(v * VEC)) }.to_f32();
                x.map(|x| x * scale)
            };
            let mut partial = Partial::EMPTY;
            let mut v = first;
            while v < end {
                let mut values = [[f32::NEG_INFINITY; VEC]; UNROLL];
                for (k, values) in values.iter_mut().enumerate() {
                    if v + k * step < end {
                        *values = scaled(v + k * step);
                    }
                }
                for values in &values {
                    partial = partial.with(values);
                }
                v += UNROLL * step;
            }
            let block = block_pairs(partial.into(), Partial::EMPTY.into(), merge_pairs);
            let total = Partial::from(slices.merge(block, round, merge_pairs));
            let inverse_sum = 1.0 / total.sum;
            // Unrolled as the reduction: one vector a step waited on each load (its stores keep
            // the next load behind them) — 8 load latencies in a row for a 64 KB slice.
            let mut v = first;
            while v < end {
                let mut values = [[0.0f32; VEC]; UNROLL];
                for (k, values) in values.iter_mut().enumerate() {
                    if v + k * step < end {
                        *values = scaled(v + k * step);
                    }
                }
                for (k, values) in values.iter().enumerate() {
                    if v + k * step < end {
                        let probabilities = values.map(|u| total.probability(u, inverse_sum));
                        let at = probs.wrapping_add((v + k * step) * VEC);
                        unsafe { Packed::<f32, VEC>::from_f32(probabilities).store::<Kept>(at) };
                    }
                }
                v += UNROLL * step;
            }
            row += row_step;
            round += 1;
        }
    }

    /// `top_k_mask_logits`: see [`top_k_rows`].
    #[inline(always)]
    pub unsafe fn top_k_mask_rows<T: Element, const VEC: usize>(p: &TopKParams) {
        unsafe { top_k_rows::<T, VEC, false>(p) }
    }

    /// `top_k_renorm_probs`: see [`top_k_rows`].
    #[inline(always)]
    pub unsafe fn top_k_renorm_rows<T: Element, const VEC: usize>(p: &TopKParams) {
        unsafe { top_k_rows::<T, VEC, true>(p) }
    }

    #[inline(always)]
    fn add_pairs(a: [f32; 2], b: [f32; 2]) -> [f32; 2] {
        [a[0] + b[0], a[1] + b[1]]
    }

    /// The top-k kernels: the grid's y dimension strides over rows; the `p.slices` blocks of a
    /// cluster (x) share a row, each counting its slice's digits a round, the counts summed over
    /// the cluster, until every block holds the same pivot; then (renorm) the kept sum, exchanged
    /// likewise, and each block writes its slice. With `p.staged` a block keeps its slice's keys
    /// in shared memory from the first round on, so the row is read from global memory once.
    /// Launcher's guarantees: `vocab`, strides and pointers multiples of `VEC` elements; the
    /// launch's cluster is `(slices, 1, 1)` (none for 1); its dynamic shared memory
    /// [`TOP_K_HEADER_BYTES`] plus, with `staged`, the largest slice (`⌈vocab / VEC / slices⌉`
    /// vectors).
    #[inline(always)]
    unsafe fn top_k_rows<T: Element, const VEC: usize, const RENORM: bool>(p: &TopKParams) {
        chain_after_prior_grids();
        let cluster = ClusterExchange::new(p.slices);
        let vectors = p.vocab as usize / VEC;
        let per_slice = vectors.div_ceil(cluster.count() as usize);
        let begin = (cluster.rank() as usize * per_slice).min(vectors);
        let end = (begin + per_slice).min(vectors);
        let (step, first) = (block_size() as usize, begin + thread_index() as usize);
        let scratch = dynamic_shared() + crate::CLUSTER_EXCHANGE_BYTES;
        let totals_at = scratch + crate::BIN_SCRATCH_BYTES;
        let staged_at = |v: usize| {
            (TOP_K_HEADER_BYTES as usize + dynamic_shared() as usize + (v - begin) * VEC * size_of::<T>()) as *mut T
        };
        let (mut row, row_step) =
            unsafe { (core::arch::nvptx::_block_idx_y() as u64, core::arch::nvptx::_grid_dim_y() as u64) };
        let mut round = 0u32;
        while row < p.rows {
            let input = (p.input as *const T).wrapping_add((row * p.input_row_stride) as usize);
            let output = (p.output as *mut T).wrapping_add((row * p.output_row_stride) as usize);
            // Keys, not values, are staged: the rounds after the first read them as they are.
            let mut in_shared = false;
            let keys = |v: usize, in_shared: bool| unsafe {
                if in_shared {
                    Packed::<T, VEC>::load::<Shared>(staged_at(v))
                } else {
                    Packed::<T, VEC>::load::<Reused>(input.add(v * VEC)).map_words(word_keys::<T>)
                }
            };
            let mut search = PivotSearch::new::<T>(unsafe { row_top_k(p, row) }, p.vocab);
            while !search.done() {
                let mut counts = DigitCounts::ZERO;
                let mut v = first;
                while v < end {
                    let mut loaded = [Packed::<T, VEC>::ZERO; UNROLL];
                    for (k, vector) in loaded.iter_mut().enumerate() {
                        if v + k * step < end {
                            *vector = keys(v + k * step, in_shared);
                        }
                    }
                    for (k, vector) in loaded.iter().enumerate() {
                        if v + k * step < end {
                            if p.staged != 0 && !in_shared {
                                unsafe { vector.store::<Shared>(staged_at(v + k * step)) };
                            }
                            // After the first rounds few keys are candidates: a vector without
                            // any skips the counting (a branch the warp mostly takes together).
                            let mut any = false;
                            for i in 0..VEC {
                                any |= search.is_candidate(vector.get(i).to_bits());
                            }
                            if any {
                                for i in 0..VEC {
                                    counts.add(search.digit(vector.get(i).to_bits()));
                                }
                                counts.spread(VEC as u32);
                            }
                        }
                    }
                    v += UNROLL * step;
                }
                counts.widen();
                let total = cluster.sum_words(block_sum_bins(counts.wide, scratch), round);
                round += 1;
                let digit = thread_index();
                if digit < DIGITS as u32 {
                    unsafe {
                        asm!("st.shared.u32 [{a}], {v};", a = in(reg32) totals_at + 4 * digit, v = in(reg32) total, options(nostack))
                    };
                }
                block_barrier();
                let mut totals = [0u32; DIGITS];
                for (digit, total) in totals.iter_mut().enumerate() {
                    unsafe {
                        asm!("ld.shared.u32 {v}, [{a}];", v = out(reg32) *total, a = in(reg32) totals_at + 4 * digit as u32, options(nostack))
                    };
                }
                search.choose(&totals);
                in_shared = p.staged != 0;
            }
            let pivot = search.pivot();
            let scale = if RENORM {
                let mut sum = 0.0f32;
                let mut v = first;
                while v < end {
                    let keys = keys(v, in_shared);
                    let values = keys.map_words(word_values::<T>);
                    for i in 0..VEC {
                        if keys.get(i).to_bits() >= pivot {
                            sum += values.get_f32(i);
                        }
                    }
                    v += step;
                }
                let total = cluster.merge(block_pairs([sum, 0.0], [0.0, 0.0], add_pairs), round, add_pairs);
                round += 1;
                1.0 / total[0]
            } else {
                1.0
            };
            let dropped = if RENORM { 0.0 } else { f32::NEG_INFINITY };
            let mut v = first;
            while v < end {
                let keys = keys(v, in_shared);
                let values = keys.map_words(word_values::<T>);
                let mut out = [0.0f32; VEC];
                for (i, out) in out.iter_mut().enumerate() {
                    let x = values.get_f32(i);
                    *out = if keys.get(i).to_bits() < pivot {
                        dropped
                    } else if RENORM {
                        x * scale
                    } else {
                        x
                    };
                }
                unsafe { Packed::<T, VEC>::from_f32(out).store::<Kept>(output.add(v * VEC)) };
                v += step;
            }
            row += row_step;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn softmax<const N: usize>(logits: [f32; N], temperature: f32) -> [f32; N] {
        let mut probs = [0.0f32; N];
        let p = SoftmaxParams {
            logits: logits.as_ptr() as u64,
            probs: probs.as_mut_ptr() as u64,
            rows: 1,
            logits_row_stride: N as u64,
            probs_row_stride: N as u64,
            temperatures: 0,
            vocab: N as u32,
            temperature,
            slices: 1,
            _reserved: 0,
        };
        unsafe { softmax_row::<f32>(&p, 0) };
        probs
    }

    /// The f64 references are the launch crate's (`softmax_reference`); here the definition's
    /// two properties: the probabilities sum to 1 and their ratios are `e^((x_i − x_j) / t)`
    /// (host `exp2`, itself tested against exact powers in `math`).
    #[test]
    fn softmax_row_sums_to_one_in_the_ratios_of_the_definition() {
        let logits = [1.0f32, -2.0, 0.5, 3.0, f32::NEG_INFINITY];
        for temperature in [1.0f32, 0.5, 2.0] {
            let probs = softmax(logits, temperature);
            assert!((probs.iter().sum::<f32>() - 1.0).abs() < 1e-6, "{probs:?}");
            for i in 0..4 {
                let ratio = exp2((logits[i] - logits[3]) / temperature * core::f32::consts::LOG2_E);
                assert!((probs[i] / probs[3] - ratio).abs() < 2e-6 * ratio.max(1.0), "{i}: {probs:?}");
            }
            assert_eq!(probs[4], 0.0);
        }
    }

    #[test]
    fn zero_temperature_weighs_every_finite_logit_alike_and_degenerate_rows_are_nan() {
        assert_eq!(softmax([1.0, 5.0, -3.0, 0.0], 0.0), [0.25; 4]);
        assert!(softmax([f32::NEG_INFINITY; 3], 1.0).iter().all(|p| p.is_nan()));
        assert!(softmax([1.0, f32::INFINITY], 1.0).iter().all(|p| p.is_nan()));
    }

    #[test]
    fn partials_merge_symmetrically_and_as_one_pass() {
        let a = Partial::EMPTY.with(&[1.0, 4.0, -2.0]);
        let b = Partial::EMPTY.with(&[7.5, 0.0]);
        assert_eq!(a.merge(b), b.merge(a));
        let whole = Partial::EMPTY.with(&[1.0, 4.0, -2.0, 7.5, 0.0]);
        assert!((a.merge(b).sum - whole.sum).abs() < 1e-6 && a.merge(b).max == whole.max);
        assert_eq!(a.merge(Partial::EMPTY), a);
        assert_eq!(Partial::EMPTY.merge(Partial::EMPTY), Partial::EMPTY);
    }

    #[test]
    fn order_keys_follow_the_total_order_of_each_type() {
        use crate::element::{Bf16, F16};
        let values = [f32::NEG_INFINITY, -3.5, -1e-30, -0.0, 0.0, 1e-30, 2.0, f32::INFINITY, f32::NAN];
        let keys = values.map(order_key::<f32>);
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:x?}");
        assert!(order_key(-f32::NAN) < keys[0], "−NaN below −∞");
        let halves = [f32::NEG_INFINITY, -2.0, -0.0, 0.0, 0.5, 65504.0, f32::INFINITY];
        assert!(halves.map(|v| order_key(Bf16::from_f32(v))).windows(2).all(|w| w[0] < w[1]));
        assert!(halves.map(|v| order_key(F16::from_f32(v))).windows(2).all(|w| w[0] < w[1]));
        assert!(order_key(F16::from_f32(f32::INFINITY)) <= 0xffff, "16-bit keys stay in 16 bits");
    }

    /// The search against a sort, over values with ties, every k.
    #[test]
    fn pivot_search_finds_the_kth_largest_key() {
        let mut keys = [0u32; 200];
        let mut state = 12345u32;
        for key in keys.iter_mut() {
            state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
            *key = order_key((state >> 20) as f32 - 2048.0 + if state & 1 == 0 { 0.0 } else { 0.5 });
        }
        let mut sorted = keys;
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        for k in 1..keys.len() as u32 {
            let mut search = PivotSearch::new::<f32>(k, keys.len() as u32);
            let mut rounds = 0;
            while !search.done() {
                let mut totals = [0u32; DIGITS];
                for &key in &keys {
                    if let Some(total) = totals.get_mut(search.digit(key) as usize) {
                        *total += 1;
                    }
                }
                search.choose(&totals);
                rounds += 1;
            }
            let kth = sorted[k as usize - 1];
            let kept = keys.iter().filter(|&&key| key >= search.pivot()).count();
            assert_eq!(kept, keys.iter().filter(|&&key| key >= kth).count(), "k = {k}");
            assert!(rounds <= 8, "k = {k}: {rounds} rounds");
        }
        assert!(PivotSearch::new::<f32>(200, 200).done() && PivotSearch::new::<f32>(0, 200).done());
        assert_eq!(PivotSearch::new::<f32>(500, 200).pivot(), 0, "every key kept");
    }

    #[test]
    fn digit_counts_spread_and_widen_before_a_count_overflows() {
        let digit = |i: u32| if i.is_multiple_of(3) { 15 } else { i % 16 };
        let mut counts = DigitCounts::ZERO;
        for group in 0..1000u32 {
            for i in 0..DigitCounts::NIBBLE_LIMIT {
                counts.add(digit(group * 15 + i));
                counts.add(DIGITS as u32); // not a candidate: nothing
            }
            counts.spread(DigitCounts::NIBBLE_LIMIT);
        }
        counts.widen();
        let mut want = [0u32; DIGITS];
        for i in 0..15_000u32 {
            want[digit(i) as usize] += 1;
        }
        assert_eq!(counts.wide, want);
    }

    #[test]
    fn word_keys_are_the_keys_of_each_packed_element_and_invert() {
        use crate::element::Bf16;
        for (low, high) in [(1.5f32, -2.0f32), (-0.0, 0.0), (f32::NEG_INFINITY, 3.0e38), (-1e-3, -7.0)] {
            let (low, high) = (Bf16::from_f32(low), Bf16::from_f32(high));
            let word = low.to_bits() | (high.to_bits() << 16);
            let keys = word_keys::<Bf16>(word);
            assert_eq!((keys & 0xffff, keys >> 16), (order_key(low), order_key(high)));
            assert_eq!(word_values::<Bf16>(keys), word);
        }
        for x in [1.5f32, -2.0, -0.0, 0.0, f32::NAN, f32::NEG_INFINITY, 1e-40] {
            assert_eq!(word_values::<f32>(word_keys::<f32>(x.to_bits())), x.to_bits());
        }
    }
}
