//! The sampling family: what turns a decode step's logits into probabilities and tokens —
//! `softmax(logits / temperature)` (FlashInfer's `softmax`) and the filters that keep a row's
//! largest entries (`top_k_mask_logits`, `top_k_renorm_probs`, `top_p_renorm_probs`).
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
//! Filters (`top_k_mask_logits`, `top_k_renorm_probs`, `top_p_renorm_probs`): a row's entries
//! are ranked by [`order_key`] (IEEE 754's total order: −NaN < −∞ < … < −0 < +0 < … < +∞ <
//! +NaN), each entry has a *weight*, and the row's *pivot* is the largest key at or above which
//! the row holds a target weight — found by a radix search ([`PivotSearch`]) over the keys'
//! digits from the top, summing the weights of each digit. Every entry whose key is at least the
//! pivot is kept (ties with it too: FlashInfer's `>= pivot`). Top-k weighs each entry 1 and
//! targets `top_k` (`top_k = 0` or `≥ vocab` keeps the whole row): the pivot is the k-th
//! largest. Top-p weighs each entry by its probability as an exact fixed-point integer
//! ([`MassScale`]) and targets `⌈top_p · the row's mass⌉`: an entry is kept when the mass of the
//! entries above it is short of the target — FlashInfer's rule, with `top_p` a share of the row's
//! own sum (probabilities that do not quite sum to 1 lose nothing). Weights are integers, so the
//! pivot never depends on the order they are added in: device and CPU find the same one. The
//! mask writes −∞ in place of the others; the renorms write the kept probabilities divided by
//! their sum (a fixed tree on the device) and 0 in place of the others.

use crate::element::Element;
use crate::math::{choose, exp2, exp2_portable, truncate_to_u64};

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

/// `log2(e) / temperature`; for a temperature of 0 the smallest normal f32, not FlashInfer's 0:
/// every finite logit under 2^64 in magnitude then scales below 2^-62, so each weighs exactly 1,
/// while a masked one (−∞, `top_k_mask_logits`) stays −∞ and weighs nothing — `−∞ · 0` would be
/// NaN — and NaN and +∞ stay what they are at any temperature.
#[inline(always)]
pub fn logit_scale(temperature: f32) -> f32 {
    if temperature == 0.0 { f32::MIN_POSITIVE } else { core::f32::consts::LOG2_E / temperature }
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

/// Arguments of the filter kernels (`top_k_mask_logits`, `top_k_renorm_probs`,
/// `top_p_renorm_probs`), passed by value. Strides and counts in elements; input and output of
/// one dtype.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct FilterParams {
    /// `[rows, vocab]`: logits (mask) or probabilities (renorms).
    pub input: u64,
    /// `[rows, vocab]`.
    pub output: u64,
    pub rows: u64,
    pub input_row_stride: u64,
    pub output_row_stride: u64,
    /// `[rows]`, one threshold a row — i32 `top_k` (≤ 0 keeps the row) or f32 `top_p`; 0:
    /// `threshold` for every row.
    pub thresholds: u64,
    pub vocab: u32,
    /// Every row's threshold unless `thresholds` is given: `top_k` (0 or `≥ vocab` keeps the
    /// row), or `top_p`'s f32 bits.
    pub threshold: u32,
    /// Blocks sharing a row (the launch's thread-block cluster, sm_90), each counting and writing
    /// a contiguous slice of it; 1 without a cluster.
    pub slices: u32,
    /// 1 when each block keeps its slice in shared memory (after the filters' header,
    /// [`FILTER_HEADER_BYTES`]) between the passes over it; 0: every pass reads global memory.
    pub staged: u32,
}

/// Row `row`'s threshold bits: its entry of `p.thresholds`, or `p.threshold`.
///
/// # Safety
/// `p.thresholds`, when not 0, must hold `p.rows` 32-bit values.
#[inline(always)]
unsafe fn row_threshold(p: &FilterParams, row: u64) -> u32 {
    if p.thresholds == 0 {
        return p.threshold;
    }
    let at = (p.thresholds as *const f32).wrapping_add(row as usize);
    unsafe { crate::vector::Packed::<f32, 1>::load::<crate::vector::Reused>(at) }.get(0).to_bits()
}

/// The `top_k` of row `row` (a row's ≤ 0 read as 0: the whole row).
///
/// # Safety
/// As [`row_threshold`]: `p.thresholds`, when not 0, holds `p.rows` i32.
#[inline(always)]
pub unsafe fn row_top_k(p: &FilterParams, row: u64) -> u32 {
    (unsafe { row_threshold(p, row) } as i32).max(0) as u32
}

/// The `top_p` of row `row`.
///
/// # Safety
/// As [`row_threshold`]: `p.thresholds`, when not 0, holds `p.rows` f32.
#[inline(always)]
pub unsafe fn row_top_p(p: &FilterParams, row: u64) -> f32 {
    f32::from_bits(unsafe { row_threshold(p, row) })
}

/// Which entries a filter keeps (and a sampling op draws among): the row's `top_k` largest, its
/// largest holding `top_p` of its mass, those at least `min_p` times its largest, every one, or
/// (`top_k_top_p_…`, FlashInfer's "top_k_first") the largest holding `top_p` of the mass of the
/// row's `top_k` largest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Filter {
    TopK,
    TopP,
    MinP,
    Everything,
    TopKTopP,
}

/// What a sampling op weighs an entry `x` by: its value (probabilities), or softmax's numerator
/// `2^(x · log2 e − m)` (logits; `m` the row's largest logit times log2 e, so the largest weighs
/// exactly 1 and every weight lies in [0, 1]; a row whose largest logit is +∞ or NaN, or −∞,
/// weighs nothing) — by [`exp2_portable`], not the GPU's `ex2.approx`: every operation rounds
/// alike on the host and the device, so the CPU draws the GPU's token from logits too.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum EntryWeight {
    Value,
    Softmax { scaled_max: f32 },
}

impl EntryWeight {
    /// A row's weighing, `max` its largest entry (logits: from −∞; probabilities: from 0).
    #[inline(always)]
    pub fn of_row(logits: bool, max: f32) -> Self {
        if logits { EntryWeight::Softmax { scaled_max: max * core::f32::consts::LOG2_E } } else { EntryWeight::Value }
    }

    /// The largest entry's starting point: what a row of no entries reads as.
    #[inline(always)]
    pub fn least(logits: bool) -> f32 {
        if logits { f32::NEG_INFINITY } else { 0.0 }
    }

    /// `x`'s weight.
    #[inline(always)]
    pub fn of(&self, x: f32) -> f32 {
        match *self {
            EntryWeight::Value => x,
            EntryWeight::Softmax { scaled_max } => exp2_portable(x * core::f32::consts::LOG2_E - scaled_max),
        }
    }

    /// The scale of the row's masses: its largest value's (probabilities), or 1's (logits).
    #[inline(always)]
    pub fn scale(&self, max: f32, vocab: u32) -> MassScale {
        match self {
            EntryWeight::Value => MassScale::new(max, vocab),
            EntryWeight::Softmax { .. } => MassScale::of_probabilities(vocab),
        }
    }
}

/// The entries a filter keeps, once found: those whose [`order_key`] is at least `pivot` (top-k's
/// or top-p's) and whose value is at least `floor` (min-p's `min_p · max`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Keep {
    pub pivot: u32,
    pub floor: f32,
}

impl Keep {
    /// Every entry.
    pub const EVERYTHING: Keep = Keep { pivot: 0, floor: f32::NEG_INFINITY };

    /// The entries at or above a search's pivot.
    #[inline(always)]
    pub fn from_pivot(pivot: u32) -> Self {
        Keep { pivot, floor: f32::NEG_INFINITY }
    }

    /// Min-p's: the entries at least `min_p` times the row's largest entry `max` (FlashInfer's
    /// `p ≥ max_p · min_p`, the product in f32).
    #[inline(always)]
    pub fn min_p(min_p: f32, max: f32) -> Self {
        Keep { pivot: 0, floor: min_p * max }
    }

    /// Whether the entry of key `key` and value `value` is kept (a NaN value by its key alone:
    /// top-k ranks NaN above +∞).
    #[inline(always)]
    // `!(value < floor)`: one unordered compare (`setp.geu`), NaN included.
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    pub fn keeps(&self, key: u32, value: f32) -> bool {
        key >= self.pivot && !(value < self.floor)
    }

    /// The entry's weight in a draw whose entries weigh `weight.of(value)`: its mass under
    /// `scale` where kept, else 0 — the weight taken only for a kept entry (a branch: logits'
    /// `exp2` is ~30 instructions, and a top-k keeps few entries).
    #[inline(always)]
    pub fn weighed_mass(&self, key: u32, value: f32, weight: EntryWeight, scale: &MassScale) -> u64 {
        if self.keeps(key, value) { scale.mass(weight.of(value)) } else { 0 }
    }
}

/// What a filter kernel writes for the entries it keeps and those it drops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FilterOutput {
    /// `top_k_mask_logits`: kept logits as they are, −∞ for the others.
    Mask,
    /// The renorms: kept probabilities divided by their sum, 0 for the others.
    Renorm,
}

/// Bits of a digit of the filters' search: 256 weights a round, summed in a shared-memory
/// histogram — 4 rounds for f32 keys, 2 for 16-bit ones, the later ones over few candidates.
pub const DIGIT_BITS: u32 = 8;

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

/// The search for a row's pivot, [`DIGIT_BITS`] of the keys a round from the top: `prefix` holds the
/// digits found (`known` their bits), and `rank` is how much weight of the entries that share
/// them the pivot must still leave at or above it. A round sums the candidates' weights by their
/// next digit ([`PivotSearch::digit`]); [`PivotSearch::choose`] takes the totals (every block's,
/// in `1 << DIGIT_BITS` digits). With unit weights it ends early when the chosen digit's candidates are
/// exactly those still wanted: the pivot is then the digit's lowest key. (Not with masses: an
/// entry of mass 0 below the others would be kept.) Top-p's target is its `share` of the row's
/// mass, which the first round's totals give.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PivotSearch {
    prefix: u32,
    known: u32,
    shift: u32,
    rank: u64,
    share: f32,
    unit_weights: bool,
    done: bool,
}

impl PivotSearch {
    const DIGIT_MASK: u32 = (1 << DIGIT_BITS) - 1;

    /// The search for the `top_k`-th largest of `vocab` keys of `T` (done at once, pivot 0 —
    /// every key — for 0 or `≥ vocab`).
    #[inline(always)]
    pub fn top_k<T: Element>(top_k: u32, vocab: u32) -> Self {
        let done = top_k == 0 || top_k >= vocab;
        let shift = key_bits::<T>() - DIGIT_BITS;
        PivotSearch { prefix: 0, known: 0, shift, rank: top_k as u64, share: 1.0, unit_weights: true, done }
    }

    /// The search for the largest keys of `T` holding `top_p` of a row's mass (done at once,
    /// every key, for `top_p ≥ 1`); its target is set by the first round
    /// ([`PivotSearch::set_row_weight`]).
    #[inline(always)]
    pub fn top_p<T: Element>(top_p: f32) -> Self {
        let shift = key_bits::<T>() - DIGIT_BITS;
        PivotSearch { prefix: 0, known: 0, shift, rank: 0, share: top_p, unit_weights: false, done: top_p >= 1.0 }
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

    /// The digit this round sums `key` in, or `1 << DIGIT_BITS` when `key` is no longer a candidate.
    #[inline(always)]
    pub fn digit(&self, key: u32) -> u32 {
        if self.is_candidate(key) { (key >> self.shift) & Self::DIGIT_MASK } else { 1 << DIGIT_BITS }
    }

    /// Takes a round's totals (candidates' weight per digit, over the whole row): the largest
    /// digit at or above which `rank` of it lies.
    #[inline(always)]
    pub fn choose(&mut self, totals: &[u64]) {
        self.set_row_weight(totals.iter().sum());
        let mut above = 0u64;
        for digit in (0..totals.len()).rev() {
            if above + totals[digit] >= self.rank {
                self.take(digit as u32, above, totals[digit]);
                return;
            }
            above += totals[digit];
        }
        self.give_up();
    }

    /// In top-p's first round (nothing found yet), the target from the row's whole weight
    /// `mass`: `⌈top_p · mass⌉`, at least 1 (`top_p ≤ 0` or NaN: the largest entries only).
    /// Nothing for top-k, whose target is its `top_k`.
    #[inline(always)]
    pub fn set_row_weight(&mut self, mass: u64) {
        if !self.unit_weights && self.first_round() {
            self.rank = share_of(mass, self.share).max(1);
        }
    }

    /// Whether no digit is found yet.
    #[inline(always)]
    fn first_round(&self) -> bool {
        self.known == 0
    }

    /// The search to its end over `count` entries of keys `key` and weights `weight`, one pass
    /// a round (the host's): the pivot and the rounds it took.
    pub fn run_on_host(
        mut self,
        count: usize,
        key: impl Fn(usize) -> u32,
        weight: impl Fn(usize) -> u64,
    ) -> (u32, u32) {
        let mut rounds = 0;
        while !self.done() {
            let mut totals = [0u64; 1 << DIGIT_BITS];
            for i in 0..count {
                if let Some(total) = totals.get_mut(self.digit(key(i)) as usize) {
                    *total = total.wrapping_add(weight(i));
                }
            }
            self.choose(&totals);
            rounds += 1;
        }
        (self.pivot(), rounds)
    }

    /// The weight the pivot must still leave at or above it.
    #[inline(always)]
    pub fn rank(&self) -> u64 {
        self.rank
    }

    /// The round's choice: `digit`, with `above` of the candidates' weight in the digits above
    /// it and `total` in it.
    #[inline(always)]
    pub fn take(&mut self, digit: u32, above: u64, total: u64) {
        self.prefix |= digit << self.shift;
        self.known |= Self::DIGIT_MASK << self.shift;
        self.rank -= above;
        self.done = (self.unit_weights && self.rank == total) || self.shift == 0;
        self.shift = self.shift.saturating_sub(DIGIT_BITS);
    }

    /// Less weight than `rank` in a round: counts that disagree with the row (never, when every
    /// block counts the same row), or a row without mass; keeps what was found rather than loop.
    #[inline(always)]
    pub fn give_up(&mut self) {
        self.done = true;
    }
}

/// `⌈mass · share⌉`, exactly, for `share` in [0, 1) (0 for less or NaN): the share's f32
/// mantissa times the mass in 128 bits, shifted by its exponent, rounded up.
#[inline(always)]
pub fn share_of(mass: u64, share: f32) -> u64 {
    if share.is_nan() || share <= 0.0 {
        return 0;
    }
    let bits = share.to_bits();
    let exponent = (bits >> 23) as i32;
    let mantissa = ((bits & 0x7f_ffff) | if exponent > 0 { 0x80_0000 } else { 0 }) as u128;
    // share = mantissa · 2^−drop, drop > 23 below 1.
    let drop = (150 - exponent.max(1)) as u32;
    let product = mass as u128 * mantissa;
    let whole = product.checked_shr(drop).unwrap_or(0);
    let below = product.wrapping_sub(whole.checked_shl(drop).unwrap_or(0));
    (whole + (below != 0) as u128).min(mass as u128) as u64
}

/// Top-p's and the draws' fixed point: an entry `x ≥ 0` weighs `⌊x · 2^(F − e)⌋`, `e` the
/// exponent of the row's largest entry and `F = 62 − ⌈log2 vocab⌉`, so that a row's mass fits 63
/// bits and every entry counts to within 2^−F of the largest. A row whose largest entry lies in
/// [2^−20, 2) — every row of probabilities up to 2^20 entries — takes `e = 0` (the exponent of
/// 1): one scale for all of them, so that a kernel can weigh a row of probabilities as it reads
/// it, before it knows the largest entry. Negative, infinite and NaN entries weigh 0. Integer
/// weights sum to the same total in any order: the device's blocks and the CPU find the same
/// pivot and draw the same token, bit for bit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MassScale {
    /// `2^(F − e)` as two powers of two, each a normal f32 (the product alone ranges over
    /// 2^−97..2^188): an entry times both is its weight, exactly — a product by a power of two
    /// is exact wherever it stays normal, and where the first product falls to a subnormal the
    /// weight is below 1 either way.
    factors: [f32; 2],
    /// `2^63 / 2^(F − e)` (or infinity where that is beyond f32): entries from it up weigh 0.
    limit: f32,
}

impl MassScale {
    /// The scale of a row of `vocab` entries whose largest (or 0) is `max`.
    #[inline(always)]
    pub fn new(max: f32, vocab: u32) -> Self {
        let fraction_bits = 62 - (32 - vocab.max(1).wrapping_sub(1).leading_zeros()) as i32;
        let max_exponent = ((max.to_bits() >> 23) & 0xff).clamp(1, 254) as i32;
        let exponent = if Self::PROBABILITY_EXPONENTS.contains(&max_exponent) { Self::ONE } else { max_exponent };
        let total = fraction_bits - (exponent - Self::ONE);
        let first = total.div_euclid(2);
        let limit = if 63 - total > 127 { f32::INFINITY } else { power_of_two(63 - total) };
        MassScale { factors: [power_of_two(first), power_of_two(total - first)], limit }
    }

    /// The biased exponent of 1.
    const ONE: i32 = 127;
    /// The biased exponents of the largest entries of rows weighed as if it were 1: [2^−20, 2).
    const PROBABILITY_EXPONENTS: core::ops::RangeInclusive<i32> = Self::ONE - 20..=Self::ONE;

    /// The scale of every row of `vocab` entries whose largest lies in [2^−20, 2).
    #[inline(always)]
    pub fn of_probabilities(vocab: u32) -> Self {
        Self::new(1.0, vocab)
    }

    /// `x`'s weight, `⌊x · 2^(F − e)⌋`; 0 for negatives, NaN, and where that would be 2^63 or
    /// more (infinities; any entry weighed at the probabilities' scale before a row's largest
    /// is known).
    #[inline(always)]
    pub fn mass(&self, x: f32) -> u64 {
        self.mass_from(x, 0.0)
    }

    /// As [`MassScale::mass`] for `x` at least `lowest` (≥ 0, or NaN: nothing is), else 0: the
    /// entry chosen as an f32 (two compares, one select), then two exact products and one
    /// truncating conversion ([`truncate_to_u64`]) — a dozen fewer integer instructions an
    /// entry than shifting the mantissa by the exponent, the weighings' bottleneck
    /// (docs/perf/sampling.md).
    #[inline(always)]
    pub fn mass_from(&self, x: f32, lowest: f32) -> u64 {
        let [first, second] = self.factors;
        let weighed = lowest <= x && x < self.limit;
        truncate_to_u64(choose(weighed, x, 0.0) * first * second)
    }
}

/// `2^n` for `n` in −126..=127.
#[inline(always)]
fn power_of_two(n: i32) -> f32 {
    f32::from_bits(((n + 127) as u32) << 23)
}

/// A row's entries on the host, as the device reads them: values, keys, the largest value (or
/// [`EntryWeight::least`]), how a draw weighs an entry and the masses' scale.
struct HostRow<T: Element> {
    input: *const T,
    vocab: u32,
    max: f32,
    weight: EntryWeight,
    scale: MassScale,
}

impl<T: Element> HostRow<T> {
    /// Row `row` of `p.input`, probabilities or (`logits`) logits.
    ///
    /// # Safety
    /// As [`filter_row`].
    unsafe fn new(p: &FilterParams, row: u64, logits: bool) -> Self {
        let input = (p.input as *const T).wrapping_add((row * p.input_row_stride) as usize);
        let value = |i: usize| unsafe { input.add(i).read() }.to_f32();
        let max = (0..p.vocab as usize).fold(EntryWeight::least(logits), |max, i| max.max(value(i)));
        let weight = EntryWeight::of_row(logits, max);
        HostRow { input, vocab: p.vocab, max, weight, scale: weight.scale(max, p.vocab) }
    }

    fn element(&self, i: usize) -> T {
        // SAFETY: `i < vocab`, in bounds by `new`'s contract.
        unsafe { self.input.add(i).read() }
    }

    fn value(&self, i: usize) -> f32 {
        self.element(i).to_f32()
    }

    fn key(&self, i: usize) -> u32 {
        order_key(self.element(i))
    }

    /// Entry `i`'s weight in a draw among the entries `keep` keeps.
    fn mass(&self, keep: Keep, i: usize) -> u64 {
        keep.weighed_mass(self.key(i), self.value(i), self.weight, &self.scale)
    }

    /// The first entry at which the masses `mass` summed in index order pass [`mass_target`] of
    /// random bits `bits` in their total (None for a total of 0).
    fn draw(&self, mass: impl Fn(usize) -> u64, bits: u64) -> Option<usize> {
        let total = (0..self.vocab as usize).map(&mass).fold(0u64, u64::wrapping_add);
        self.draw_from(mass, total, bits)
    }

    /// [`HostRow::draw`] where the masses' total is known.
    fn draw_from(&self, mass: impl Fn(usize) -> u64, total: u64, bits: u64) -> Option<usize> {
        let vocab = self.vocab as usize;
        if total == 0 {
            return None;
        }
        let target = mass_target(bits, total);
        let mut below = 0u64;
        (0..vocab).find(|&i| {
            below += mass(i);
            below > target
        })
    }

    /// What `filter` keeps of the row (its threshold from `p`): the same keys, weights and
    /// search as the device, so the same entries.
    ///
    /// # Safety
    /// As [`row_threshold`].
    unsafe fn keep(&self, p: &FilterParams, row: u64, filter: Filter) -> Keep {
        let vocab = self.vocab as usize;
        match filter {
            Filter::TopK => {
                let search = PivotSearch::top_k::<T>(unsafe { row_top_k(p, row) }, self.vocab);
                Keep::from_pivot(search.run_on_host(vocab, |i| self.key(i), |_| 1).0)
            }
            Filter::TopP => {
                let search = PivotSearch::top_p::<T>(unsafe { row_top_p(p, row) });
                Keep::from_pivot(search.run_on_host(vocab, |i| self.key(i), |i| self.scale.mass(self.value(i))).0)
            }
            Filter::MinP => Keep::min_p(unsafe { row_top_p(p, row) }, self.max),
            Filter::Everything => Keep::EVERYTHING,
            Filter::TopKTopP => unsafe { self.keep(p, row, Filter::TopK) },
        }
    }
}

/// One row of a filter on the host (the CPU backend): the same keys, weights and search as the
/// device (so the same pivot); the renorm's sum by chunks of [`HOST_CHUNK`].
///
/// # Safety
/// `p` must describe valid memory as the launcher validates it: the row in bounds, input and
/// output of `T`, disjoint.
pub unsafe fn filter_row<T: Element>(p: &FilterParams, row: u64, filter: Filter, output: FilterOutput) {
    let entries = unsafe { HostRow::<T>::new(p, row, false) };
    let out = (p.output as *mut T).wrapping_add((row * p.output_row_stride) as usize);
    let value = |i: usize| entries.element(i);
    let vocab = p.vocab as usize;
    let keep = unsafe { entries.keep(p, row, filter) };
    let kept = |i: usize| keep.keeps(entries.key(i), entries.value(i));
    let scale = match output {
        FilterOutput::Mask => 1.0,
        FilterOutput::Renorm => {
            let chunk_sum = |start: usize| {
                (start..(start + HOST_CHUNK).min(vocab)).filter(|&i| kept(i)).map(|i| value(i).to_f32()).sum::<f32>()
            };
            1.0 / (0..vocab).step_by(HOST_CHUNK).map(chunk_sum).sum::<f32>()
        }
    };
    for i in 0..vocab {
        let x = value(i);
        let y = match (kept(i), output) {
            (true, FilterOutput::Mask) => x,
            (true, FilterOutput::Renorm) => T::from_f32(x.to_f32() * scale),
            (false, FilterOutput::Mask) => T::from_f32(f32::NEG_INFINITY),
            (false, FilterOutput::Renorm) => T::from_f32(0.0),
        };
        unsafe { out.add(i).write(y) };
    }
}

/// Arguments of the sampling kernels (`sampling_from_probs`, `top_k_sampling_from_probs`,
/// `top_p_sampling_from_probs`, `min_p_sampling_from_probs`, `top_k_top_p_sampling_from_…`),
/// passed by value: a filter's, with `filter.output` the `[rows]` i32 tokens
/// (`output_row_stride` 1; `threshold(s)` top-k's, top-p's or min-p's), the random stream's key
/// and position — `seed` and `offset`, or where `seeds` (`offsets`) is not 0 the address of
/// 64-bit values read on the device: one a row where `seeds_per_row` (`offsets_per_row`) is 1,
/// else one for every row — and `top_k_top_p_…`'s second threshold, its `top_p` (as `threshold`
/// and `thresholds`: one f32's bits, or where `top_ps` is not 0 the address of one a row).
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct SampleParams {
    pub filter: FilterParams,
    pub seed: u64,
    pub offset: u64,
    pub seeds: u64,
    pub offsets: u64,
    pub seeds_per_row: u32,
    pub offsets_per_row: u32,
    pub top_ps: u64,
    pub top_p: u32,
    pub _reserved: u32,
}

/// Row `row`'s second threshold: `top_k_top_p_…`'s `top_p`.
///
/// # Safety
/// `p.top_ps`, when not 0, must hold `p.filter.rows` f32.
#[inline(always)]
pub unsafe fn row_second_top_p(p: &SampleParams, row: u64) -> f32 {
    let second = FilterParams { thresholds: p.top_ps, threshold: p.top_p, ..p.filter };
    unsafe { row_top_p(&second, row) }
}

/// Row `row`'s seed and offset.
///
/// # Safety
/// `p.seeds` (`p.offsets`), when not 0, must hold `p.filter.rows` 64-bit values where
/// `seeds_per_row` (`offsets_per_row`) is 1, else one.
#[inline(always)]
pub unsafe fn row_seed_and_offset(p: &SampleParams, row: u64) -> (u64, u64) {
    let read = |values: u64, per_row: u32, value: u64| {
        if values == 0 {
            return value;
        }
        let at = (values as *const f32).wrapping_add(2 * (row * per_row as u64) as usize);
        let words = unsafe { crate::vector::Packed::<f32, 2>::load::<crate::vector::Reused>(at) };
        words.get(0).to_bits() as u64 | (words.get(1).to_bits() as u64) << 32
    };
    (read(p.seeds, p.seeds_per_row, p.seed), read(p.offsets, p.offsets_per_row, p.offset))
}

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

/// [`row_random_bits`] of row `row` under its seed and offset.
///
/// # Safety
/// As [`row_seed_and_offset`].
#[inline(always)]
pub unsafe fn random_bits_of_row(p: &SampleParams, row: u64) -> u64 {
    let (seed, offset) = unsafe { row_seed_and_offset(p, row) };
    row_random_bits(seed, row, offset)
}

/// 64 random bits for draw `draw` (from 0) of row `row`: [`row_random_bits`] for the first; a
/// later one (top-p's rejection rounds) from Philox subsequence `row + draw · 2^32` at the same
/// offset, so no draw reads another's outputs, nor another row's (rows < 2^32), nor another
/// call's (each moves the offset on by 2).
#[inline(always)]
pub fn draw_random_bits(seed: u64, row: u64, offset: u64, draw: u32) -> u64 {
    row_random_bits(seed, row + ((draw as u64) << 32), offset)
}

/// Top-p's rank: the mass the entries strictly above a kept entry must fall short of, for a row
/// of mass `mass` — `⌈top_p · mass⌉`, at least 1 (`top_p ≤ 0` or NaN: the largest entries
/// only), or `u64::MAX` for `top_p ≥ 1` (every entry; masses stay below 2^63). The filters'
/// search ([`PivotSearch::top_p`]) keeps the same entries.
#[inline(always)]
pub fn top_p_rank(top_p: f32, mass: u64) -> u64 {
    if top_p >= 1.0 { u64::MAX } else { share_of(mass, top_p).max(1) }
}

/// The lowest f32 bits min-p keeps in a row whose largest entry is `max`: those of its floor
/// `min_p · max` (FlashInfer's `p ≥ max · min_p`, the product in f32), 0 (every entry) for a
/// floor ≤ 0 or NaN. Among entries with mass (positive and finite) bits order as values do, so
/// an entry's bits reaching these is [`Keep::min_p`]'s test.
#[inline(always)]
pub fn min_p_lowest_bits(min_p: f32, max: f32) -> u32 {
    let floor = min_p * max;
    if floor > 0.0 { floor.to_bits() } else { 0 }
}

/// Where random bits `bits` fall in a row's kept mass `mass`: `⌊bits · mass / 2^64⌋`, in
/// `[0, mass)` for `mass > 0`; every unit of mass as likely as any other to within 2^−64.
#[inline(always)]
pub fn mass_target(bits: u64, mass: u64) -> u64 {
    ((bits as u128 * mass as u128) >> 64) as u64
}

/// One row of a sampling op on the host (the CPU backend): the same keys, masses and search as
/// the device, then the first entry at which the kept masses summed in index order pass
/// [`mass_target`] — integers throughout, so the GPU draws the same token. Top-p (alone, or
/// after top-k) draws by [`top_p_draw`] instead. `logits`: the row holds logits, weighed as
/// [`EntryWeight::Softmax`]. A row without mass to draw from (zeros, negatives, NaN; or a filter
/// keeping none of its mass) gives 0, as FlashInfer's.
///
/// # Safety
/// As [`filter_row`], with `p.filter.output` a `[rows]` i32 buffer and `p.top_ps` as
/// [`row_second_top_p`] needs.
pub unsafe fn sample_row<T: Element>(p: &SampleParams, row: u64, filter: Filter, logits: bool) {
    let f = &p.filter;
    let entries = unsafe { HostRow::<T>::new(f, row, logits) };
    let (seed, offset) = unsafe { row_seed_and_offset(p, row) };
    let bits_of_draw = |draw| draw_random_bits(seed, row, offset, draw);
    let token = match filter {
        Filter::TopP => top_p_draw(&entries, Keep::EVERYTHING, unsafe { row_top_p(f, row) }, bits_of_draw),
        Filter::TopKTopP => {
            let top_k = unsafe { entries.keep(f, row, Filter::TopK) };
            top_p_draw(&entries, top_k, unsafe { row_second_top_p(p, row) }, bits_of_draw)
        }
        _ => {
            let keep = unsafe { entries.keep(f, row, filter) };
            entries.draw(|i| entries.mass(keep, i), bits_of_draw(0))
        }
    };
    unsafe { (f.output as *mut i32).add(row as usize).write(token.unwrap_or(0) as i32) };
}

/// Top-p's token by rejection rounds (FlashInfer's scheme, made exact), among the entries
/// `kept` keeps (every one, or top-k's): draw among those above the last rejected token (at
/// first every kept one) in proportion to their masses; accept the token where the mass of the
/// entries above it falls short of [`top_p_rank`] of the kept mass — then it is one top-p keeps,
/// and every kept entry was as likely as its mass says; else none at or below it is kept, so the
/// next round draws (with the next [`draw_random_bits`]) from those above it, whose mass that
/// check just summed. A round is a read of the row; each removes at least the token drawn, and
/// in expectation half the mass left outside the kept set. Among entries with mass, keys order
/// as values (and their bits, which the device's unstaged kernel compares) do.
fn top_p_draw<T: Element>(
    entries: &HostRow<T>,
    kept: Keep,
    top_p: f32,
    bits_of_draw: impl Fn(u32) -> u64,
) -> Option<usize> {
    let vocab = entries.vocab as usize;
    let mass_of = |keep: Keep| move |i: usize| entries.mass(keep, i);
    let total_of = |keep: Keep| (0..vocab).map(mass_of(keep)).sum::<u64>();
    let (mut keep, mut total, mut draw) = (kept, total_of(kept), 0u32);
    let rank = top_p_rank(top_p, total);
    loop {
        let token = entries.draw_from(mass_of(keep), total, bits_of_draw(draw))?;
        if rank == u64::MAX {
            return Some(token);
        }
        // The check's sum is the next round's total.
        let above = Keep::from_pivot(entries.key(token) + 1);
        let above_total = total_of(above);
        if above_total < rank {
            return Some(token);
        }
        (keep, total, draw) = (above, above_total, draw + 1);
    }
}

/// The warp-wide choice of a digit in shared memory: the 32 lanes' sums of their 8 bins, then the
/// search as the choosing lane leaves it (6 words).
const SEARCH_BROADCAST_BYTES: u32 = 32 * 8 + 32;

/// Dynamic shared memory of a filter block before its staged slice: the cluster exchange, the
/// cluster histogram and the choice's broadcast.
pub const FILTER_HEADER_BYTES: u32 =
    crate::CLUSTER_EXCHANGE_BYTES + crate::CLUSTER_HISTOGRAM_BYTES + SEARCH_BROADCAST_BYTES;

/// Dynamic shared memory of a sampling block before its staged slice: the filters' header, then
/// the kept mass of each thread's chunk of the slice (one u64 a thread, up to
/// [`crate::HISTOGRAM_BINS`] threads).
pub const SAMPLE_HEADER_BYTES: u32 = FILTER_HEADER_BYTES + crate::HISTOGRAM_BINS * 8;

#[cfg(target_arch = "nvptx64")]
pub use device_kernels::{
    min_p_sample_rows, sample_rows, softmax_rows, top_k_mask_rows, top_k_renorm_rows, top_k_sample_rows,
    top_k_top_p_logits_sample_rows, top_k_top_p_sample_rows, top_p_renorm_rows, top_p_sample_rows,
};

#[cfg(target_arch = "nvptx64")]
mod device_kernels {
    use super::*;
    use core::arch::asm;

    use crate::device::{
        ClusterExchange, ClusterHistogram, block_barrier, block_pairs, block_size, chain_after_prior_grids, divide,
        dynamic_shared, lane_index, load_shared_u32, load_shared_u64, store_shared_u32, store_shared_u64, thread_index,
        warp_any, warp_ballot, warp_broadcast_u64, warp_inclusive_sum_u64, warp_max_u32, warp_sum_u64,
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

    /// `top_k_mask_logits`: see [`filter_rows`].
    #[inline(always)]
    pub unsafe fn top_k_mask_rows<T: Element, const VEC: usize>(p: &FilterParams) {
        unsafe { filter_rows::<T, VEC, false, false>(p) }
    }

    /// `top_k_renorm_probs`: see [`filter_rows`].
    #[inline(always)]
    pub unsafe fn top_k_renorm_rows<T: Element, const VEC: usize>(p: &FilterParams) {
        unsafe { filter_rows::<T, VEC, false, true>(p) }
    }

    /// `top_p_renorm_probs`: see [`filter_rows`].
    #[inline(always)]
    pub unsafe fn top_p_renorm_rows<T: Element, const VEC: usize>(p: &FilterParams) {
        unsafe { filter_rows::<T, VEC, true, true>(p) }
    }

    #[inline(always)]
    fn add_pairs(a: [f32; 2], b: [f32; 2]) -> [f32; 2] {
        [a[0] + b[0], a[1] + b[1]]
    }

    #[inline(always)]
    fn max_pairs(a: [f32; 2], b: [f32; 2]) -> [f32; 2] {
        [a[0].max(b[0]), a[1].max(b[1])]
    }

    /// One block's part of a row: vectors `first`, `first + step`, … below `end`, read from
    /// global memory or, once staged, from shared memory, as keys.
    struct Slice<T: Element, const VEC: usize> {
        input: *const T,
        /// Where the staged keys start: after the filter's header.
        header: usize,
        begin: usize,
        first: usize,
        end: usize,
        step: usize,
        staged: bool,
        in_shared: bool,
        /// Whether a pass issues a batch's loads together ([`Slice::batch_keys`]) — a constant
        /// of the kernel, which every kernel but the 16-bit mask takes: its batch needs 72
        /// registers, and a cap of 72 leaves it three blocks a multiprocessor instead of four
        /// (22 % slower at 32000 × 256, docs/perf/sampling.md).
        batched: bool,
    }

    impl<T: Element, const VEC: usize> Slice<T, VEC> {
        /// The slice of vectors `first`, `first + step`, … below `end` of the row at `input`
        /// (its block's from `begin`), not yet staged.
        #[inline(always)]
        fn new(
            input: *const T,
            header: usize,
            (begin, first, end, step): (usize, usize, usize, usize),
            staged: bool,
            batched: bool,
        ) -> Self {
            Slice { input, header, begin, first, end, step, staged, in_shared: false, batched }
        }

        /// [`Slice::each_keys`], but from the row every load of the batch is issued before any
        /// vector is turned into keys ([`Packed::batch_zero`]; with each conversion in the branch
        /// of its own load, ptxas issued a pass's loads one at a time).
        #[inline(always)]
        fn batch_keys(&self, v: usize) -> [Packed<T, VEC>; UNROLL] {
            if self.in_shared {
                return self.each_keys(v);
            }
            let mut loaded = [Packed::<T, VEC>::ZERO; UNROLL];
            let at = |k: usize| v + k * self.step;
            for (k, vector) in loaded.iter_mut().enumerate() {
                let src = self.input.wrapping_add(at(k) * VEC);
                *vector = unsafe { Packed::<T, VEC>::load_if::<Reused>(at(k) < self.end, src) };
            }
            let zero = Packed::batch_zero(&loaded);
            for (k, vector) in loaded.iter_mut().enumerate() {
                if at(k) < self.end {
                    *vector = vector.map_words(|word| word_keys::<T>(word) ^ zero);
                }
            }
            loaded
        }

        /// The keys of the batch of vectors `v + k · step` (zeros past the slice's end), staged
        /// or from the row, each loaded and converted in a branch of its own: fewer registers
        /// than [`Slice::batch_keys`], but ptxas issues the row's loads one at a time.
        #[inline(always)]
        fn each_keys(&self, v: usize) -> [Packed<T, VEC>; UNROLL] {
            let mut loaded = [Packed::<T, VEC>::ZERO; UNROLL];
            for (k, vector) in loaded.iter_mut().enumerate() {
                if v + k * self.step < self.end {
                    *vector = self.keys(v + k * self.step);
                }
            }
            loaded
        }

        /// Where vector `v` is staged: after the header, from the block's first vector on.
        #[inline(always)]
        fn staged_at(&self, v: usize) -> *mut T {
            (self.header + dynamic_shared() as usize + (v - self.begin) * VEC * size_of::<T>()) as *mut T
        }

        /// The keys of vector `v`.
        #[inline(always)]
        fn keys(&self, v: usize) -> Packed<T, VEC> {
            unsafe {
                if self.in_shared {
                    Packed::<T, VEC>::load::<Shared>(self.staged_at(v))
                } else {
                    Packed::<T, VEC>::load::<Reused>(self.input.add(v * VEC)).map_words(word_keys::<T>)
                }
            }
        }

        /// `visit(keys, here)` over the slice, [`UNROLL`] vectors' loads in flight together; the
        /// first pass stages the keys in shared memory where the launch gave it room, and the
        /// passes after it read them there. Warp-uniform, so that `visit` may use the warp's
        /// instructions: a warp steps while any of its lanes has a vector left, and a lane past
        /// its end visits zeros with `here` false. Every thread must call it.
        #[inline(always)]
        fn pass(&mut self, mut visit: impl FnMut(&Packed<T, VEC>, bool)) {
            let mut v = self.first;
            while warp_any(v < self.end) {
                let loaded = if self.batched { self.batch_keys(v) } else { self.each_keys(v) };
                for (k, vector) in loaded.iter().enumerate() {
                    let here = v + k * self.step < self.end;
                    if here && self.staged && !self.in_shared {
                        unsafe { vector.store::<Shared>(self.staged_at(v + k * self.step)) };
                    }
                    visit(vector, here);
                }
                v += UNROLL * self.step;
            }
            self.in_shared = self.staged;
        }

        /// Whether any key of `keys` is a candidate of `search`'s round: after the first rounds
        /// few are, and a vector without any skips the summing (a branch the warp mostly takes
        /// together).
        #[inline(always)]
        fn any_candidate(keys: &Packed<T, VEC>, search: &PivotSearch) -> bool {
            let mut any = false;
            for i in 0..VEC {
                any |= search.is_candidate(keys.get(i).to_bits());
            }
            any
        }
    }

    /// How a filter weighs its candidates: top-k counts them, top-p sums their masses.
    #[derive(Clone, Copy)]
    enum Weights {
        Count,
        Mass(MassScale),
    }

    /// The largest entry (or `least`) of the row `slice` holds, over the cluster: a pass, which
    /// stages the slice.
    #[inline(always)]
    fn row_max<T: Element, const VEC: usize>(
        slice: &mut Slice<T, VEC>,
        cluster: &ClusterExchange,
        least: f32,
        round: &mut u32,
    ) -> f32 {
        let mut max = least;
        slice.pass(|keys, here| {
            let values = keys.map_words(word_values::<T>);
            for i in 0..VEC {
                if here {
                    max = max.max(values.get_f32(i));
                }
            }
        });
        let max = cluster.merge(block_pairs([max, least], [least, least], max_pairs), *round, max_pairs)[0];
        *round += 1;
        max
    }

    /// The pivot of the row `slice` holds: each round sums the candidates' weights by their next
    /// byte in a cluster histogram, and warp 0 chooses the digit for the block
    /// ([`choose_in_warp`]). The first pass over the slice stages it: top-k's first round, or
    /// top-p's pass for the masses' scale before.
    #[inline(always)]
    fn histogram_pivot<T: Element, const VEC: usize>(
        slice: &mut Slice<T, VEC>,
        cluster: &ClusterExchange,
        histogram: ClusterHistogram,
        mut search: PivotSearch,
        weights: Weights,
        round: &mut u32,
    ) -> u32 {
        while !search.done() {
            histogram.clear();
            block_barrier();
            // A warp skips a vector where none of its lanes has a candidate (after the first
            // round most do).
            slice.pass(|keys, here| {
                if warp_any(here && Slice::any_candidate(keys, &search)) {
                    let values = keys.map_words(word_values::<T>);
                    for i in 0..VEC {
                        let key = keys.get(i).to_bits();
                        let counted = here && search.is_candidate(key);
                        // Entries of weight 0 (a mass of 0: tiny, negative) add nothing.
                        let weight = match weights {
                            Weights::Count => counted as u64,
                            Weights::Mass(scale) => {
                                if counted {
                                    scale.mass(values.get_f32(i))
                                } else {
                                    0
                                }
                            }
                        };
                        let bin = if weight != 0 { search.digit(key) } else { crate::HISTOGRAM_BINS };
                        if bin < crate::HISTOGRAM_BINS {
                            // One shared-memory atomic (pair) an entry: summing a bin's lanes
                            // first was slower in every round and on every shape
                            // (docs/perf/sampling.md, top-p v2 and top-k v2).
                            add_weight(&histogram, bin, weight, weights);
                        }
                    }
                }
            });
            let totals = histogram.total(cluster, *round);
            choose_in_warp(&mut search, totals, histogram_broadcast());
            histogram.recycle(cluster, *round);
            *round += 1;
        }
        search.pivot()
    }

    /// `weight` into bin `bin` (< [`crate::HISTOGRAM_BINS`]) of the block's histogram: a count
    /// in one atomic, a mass in two.
    #[inline(always)]
    fn add_weight(histogram: &ClusterHistogram, bin: u32, weight: u64, weights: Weights) {
        match weights {
            Weights::Count => histogram.add_one(bin),
            Weights::Mass(_) => histogram.add(bin, weight),
        }
    }

    /// The shared-memory address of the filters' choice broadcast: after the cluster histogram.
    #[inline(always)]
    fn histogram_broadcast() -> u32 {
        dynamic_shared() + crate::CLUSTER_EXCHANGE_BYTES + crate::CLUSTER_HISTOGRAM_BYTES
    }

    /// Bins of the histogram each lane of warp 0 reads.
    const LANE_BINS: u32 = crate::HISTOGRAM_BINS / 32;

    /// A round's choice, in every thread of the block: warp 0 reads the [`HISTOGRAM_BINS`]
    /// totals at `totals` (`LANE_BINS` a lane), each lane learns the weight above its bins from
    /// the lanes' sums (through `broadcast`), the lane whose bins hold the pivot's rank takes the
    /// digit, and writes the search as it leaves it for the block. The same choice
    /// [`PivotSearch::choose`] makes over the same totals on the host.
    #[inline(always)]
    fn choose_in_warp(search: &mut PivotSearch, totals: u32, broadcast: u32) {
        let lane = thread_index();
        let state = broadcast + 32 * 8;
        if lane < 32 {
            let first = lane * LANE_BINS;
            let mut bins = [0u64; LANE_BINS as usize];
            let mut mine = 0u64;
            #[allow(clippy::needless_range_loop)]
            for j in 0..bins.len() {
                bins[j] = load_shared_u64(totals + 8 * (first + j as u32));
                mine += bins[j];
            }
            store_shared_u64(broadcast + 8 * lane, mine);
            unsafe { asm!("bar.warp.sync 0xffffffff;", options(nostack)) };
            let (mut above, mut row) = (0u64, 0u64);
            for other in 0..32 {
                let sum = load_shared_u64(broadcast + 8 * other);
                row += sum;
                above += if other > lane { sum } else { 0 };
            }
            let mut chosen = *search;
            chosen.set_row_weight(row);
            let rank = chosen.rank();
            let holds_rank = above < rank && rank <= above + mine;
            if holds_rank {
                // The lane's bins from the top: the first at or above which the rank lies.
                let mut taken = false;
                for j in (0..LANE_BINS as usize).rev() {
                    if !taken && above + bins[j] >= rank {
                        chosen.take(first + j as u32, above, bins[j]);
                        taken = true;
                    }
                    above += bins[j];
                }
            } else if lane == 0 && row < rank {
                chosen.give_up();
            }
            if holds_rank || (lane == 0 && row < rank) {
                let words = [
                    chosen.prefix,
                    chosen.known,
                    chosen.shift,
                    chosen.rank as u32,
                    (chosen.rank >> 32) as u32,
                    chosen.done as u32,
                ];
                // Indexed: an array iterator kept in memory is a local-memory array.
                #[allow(clippy::needless_range_loop)]
                for i in 0..words.len() {
                    store_shared_u32(state + 4 * i as u32, words[i]);
                }
            }
        }
        block_barrier();
        let word = |i: u32| load_shared_u32(state + 4 * i);
        search.prefix = word(0);
        search.known = word(1);
        search.shift = word(2);
        search.rank = word(3) as u64 | (word(4) as u64) << 32;
        search.done = word(5) != 0;
    }

    /// What the filter and sampling kernels set up first: the cluster's histogram and exchange,
    /// this block's slice `begin..end` of a row's vectors (`VEC` entries each), and the first row
    /// the block takes and the step to its next (the grid's y dimension strides over rows).
    struct RowSlices {
        histogram: ClusterHistogram,
        cluster: ClusterExchange,
        begin: usize,
        end: usize,
        row: u64,
        row_step: u64,
    }

    impl RowSlices {
        /// For a launch of `slices` blocks a row of `vocab` entries, after the grids before it
        /// ([`chain_after_prior_grids`]). Every thread of every block must call it.
        #[inline(always)]
        fn of_launch(slices: u32, vocab: u32, vec: usize) -> Self {
            chain_after_prior_grids();
            // Before the cluster's first barrier: its sums' sets cleared before any block adds.
            let histogram = ClusterHistogram::new(dynamic_shared() + crate::CLUSTER_EXCHANGE_BYTES);
            let cluster = ClusterExchange::new(slices);
            let vectors = vocab as usize / vec;
            let per_slice = vectors.div_ceil(cluster.count() as usize);
            let begin = (cluster.rank() as usize * per_slice).min(vectors);
            let end = (begin + per_slice).min(vectors);
            let (row, row_step) =
                unsafe { (core::arch::nvptx::_block_idx_y() as u64, core::arch::nvptx::_grid_dim_y() as u64) };
            RowSlices { histogram, cluster, begin, end, row, row_step }
        }
    }

    /// The filter kernels: the grid's y dimension strides over rows; the `p.slices` blocks of a
    /// cluster (x) share a row, each summing its slice's weights by digit a round, the sums
    /// added over the cluster, until every block holds the same pivot; then (renorms) the kept
    /// sum, exchanged likewise, and each block writes its slice. With `p.staged` a block keeps
    /// its slice's keys in shared memory from the first pass on, so the row is read from global
    /// memory once. Launcher's guarantees: `vocab`, strides and pointers multiples of `VEC`
    /// elements; the launch's cluster is `(slices, 1, 1)` (none for 1); its dynamic shared
    /// memory [`FILTER_HEADER_BYTES`] plus, with `staged`, the largest slice
    /// (`⌈vocab / VEC / slices⌉` vectors).
    #[inline(always)]
    unsafe fn filter_rows<T: Element, const VEC: usize, const TOP_P: bool, const RENORM: bool>(p: &FilterParams) {
        let RowSlices { histogram, cluster, begin, end, mut row, row_step } =
            RowSlices::of_launch(p.slices, p.vocab, VEC);
        let (step, first) = (block_size() as usize, begin + thread_index() as usize);
        let header = FILTER_HEADER_BYTES as usize;
        let mut round = 0u32;
        while row < p.rows {
            let input = (p.input as *const T).wrapping_add((row * p.input_row_stride) as usize);
            let output = (p.output as *mut T).wrapping_add((row * p.output_row_stride) as usize);
            // Keys, not values, are staged: the passes after the first read them as they are.
            let mut slice = Slice::<T, VEC>::new(
                input,
                header,
                (begin, first, end, step),
                p.staged != 0,
                size_of::<T>() == 4 || RENORM,
            );
            let (search, weights) = if TOP_P {
                let search = PivotSearch::top_p::<T>(unsafe { row_top_p(p, row) });
                // Top-p ≥ 1 keeps the row: no pass for its masses either.
                let masses = if search.done() {
                    MassScale::new(0.0, p.vocab)
                } else {
                    MassScale::new(row_max(&mut slice, &cluster, 0.0, &mut round), p.vocab)
                };
                (search, Weights::Mass(masses))
            } else {
                (PivotSearch::top_k::<T>(unsafe { row_top_k(p, row) }, p.vocab), Weights::Count)
            };
            let pivot = histogram_pivot(&mut slice, &cluster, histogram, search, weights, &mut round);
            let scale = if RENORM {
                let mut sum = 0.0f32;
                let mut v = first;
                while v < end {
                    let keys = slice.keys(v);
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
                let keys = slice.keys(v);
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

    /// `sampling_from_probs`: see [`sample_weighed_rows`].
    #[inline(always)]
    pub unsafe fn sample_rows<T: Element, const VEC: usize>(p: &SampleParams) {
        unsafe { sample_weighed_rows::<T, VEC, { Filter::Everything as u32 }, UNROLL>(p) }
    }

    /// Top-p's f32 steps loaded together on sm_90: twice [`UNROLL`] — its registers (two
    /// blocks of 256 a multiprocessor at 96 or at 128) allow twice the loads in flight at no
    /// cost in occupancy. Before sm_90 ptxas spilled them.
    const TOP_P_STEPS: usize = if cfg!(target_feature = "sm_90") { 2 * UNROLL } else { UNROLL };

    /// `top_p_sampling_from_probs`: see [`sample_weighed_rows`].
    #[inline(always)]
    pub unsafe fn top_p_sample_rows<T: Element, const VEC: usize>(p: &SampleParams) {
        unsafe { sample_weighed_rows::<T, VEC, { Filter::TopP as u32 }, TOP_P_STEPS>(p) }
    }

    /// `min_p_sampling_from_probs`: see [`sample_weighed_rows`].
    #[inline(always)]
    pub unsafe fn min_p_sample_rows<T: Element, const VEC: usize>(p: &SampleParams) {
        unsafe { sample_weighed_rows::<T, VEC, { Filter::MinP as u32 }, UNROLL>(p) }
    }

    /// The sampling ops that weigh a row as they read it (`FILTER`: everything, top-p or min-p;
    /// nothing staged): each warp weighs a contiguous span of its block's slice, at the scale of
    /// probabilities (a row whose largest entry is outside [2^−20, 2) is weighed again at its
    /// own, [`MassScale`]), the spans' masses are summed over the block and the cluster, and the
    /// warp whose span holds [`mass_target`] reads the 32 vectors that hold it again to find the
    /// entry. Min-p weighs the row again from its floor ([`min_p_lowest_bits`]); top-p draws by
    /// rejection rounds ([`top_p_draw`]), each a weighing that checks the last token. Integers
    /// throughout: the token is [`sample_row`]'s. Grid and cluster as [`filter_rows`]; dynamic
    /// shared memory [`SAMPLE_HEADER_BYTES`]; `p.filter.staged` unused.
    #[inline(always)]
    unsafe fn sample_weighed_rows<T: Element, const VEC: usize, const FILTER: u32, const STEPS: usize>(
        p: &SampleParams,
    ) {
        let f = &p.filter;
        let RowSlices { histogram, cluster, begin, end, mut row, row_step } =
            RowSlices::of_launch(f.slices, f.vocab, VEC);
        let mut round = 0u32;
        while row < f.rows {
            let input = (f.input as *const T).wrapping_add((row * f.input_row_stride) as usize);
            let span = WarpSpan::<T, VEC, STEPS>::of_slice(input, begin, end);
            let mut scale = MassScale::of_probabilities(f.vocab);
            let (mut weighed, mut row_mass) = span.weigh(&scale, 0, &cluster, histogram, &mut round);
            let max = f32::from_bits(row_mass.max);
            let own_scale = MassScale::new(max, f.vocab);
            let lowest =
                if FILTER == Filter::MinP as u32 { min_p_lowest_bits(unsafe { row_top_p(f, row) }, max) } else { 0 };
            if own_scale != scale || lowest != 0 {
                scale = own_scale;
                (weighed, row_mass) = span.weigh(&scale, lowest, &cluster, histogram, &mut round);
            }
            let token = (f.output as *mut i32).wrapping_add(row as usize);
            if FILTER == Filter::TopP as u32 {
                let top_p = unsafe { row_top_p(f, row) };
                let rounds = Rounds { cluster: &cluster, histogram, top_p, p, row };
                let drawn =
                    rounds.draw(&ScaledSpan { span: &span, scale: &scale }, ((weighed, 0), row_mass), &mut round);
                if cluster.rank() == 0 && thread_index() == 0 {
                    unsafe { Draw::write_to(token, drawn) };
                }
            } else {
                let bits = unsafe { random_bits_of_row(p, row) };
                let draw = Draw { keep: Keep::EVERYTHING, weight: EntryWeight::Value, scale, bits, token };
                span.draw(&draw, lowest, weighed, row_mass, &cluster);
            }
            row += row_step;
        }
    }

    /// A warp's contiguous share of its block's slice of a row: vectors `lo..hi`, read a step of
    /// 32 (a vector a lane) at a time, a batch of steps' loads in flight together (`STEPS` of
    /// f32, see [`WarpSpan::BATCH`]), the steps
    /// taken in groups of `group` (whole batches; at most 32 groups: a lane keeps the mass of
    /// one).
    struct WarpSpan<T: Element, const VEC: usize, const STEPS: usize> {
        input: *const T,
        lo: usize,
        hi: usize,
        group: usize,
    }

    /// A block's masses of a row, once summed over the cluster.
    struct RowMass {
        /// The row's.
        total: u64,
        /// The blocks' of lower rank.
        before: u64,
        /// This block's.
        own: u64,
        /// The bits of the row's largest entry (or 0).
        max: u32,
    }

    /// What a warp keeps of [`WarpSpan::weigh`]: the mass of this lane's group of steps, and the
    /// span's.
    #[derive(Clone, Copy)]
    struct Weighed {
        group: u64,
        span: u64,
    }

    /// The shared-memory address of the block's warps' masses (a u64 each) and, after them, their
    /// largest entries' bits (a u32 each): the sampling header's chunk masses.
    #[inline(always)]
    fn warp_masses() -> u32 {
        chunk_masses()
    }

    impl<T: Element, const VEC: usize, const STEPS: usize> WarpSpan<T, VEC, STEPS> {
        /// This warp's span of the slice `begin..end` of the row at `input`.
        #[inline(always)]
        fn of_slice(input: *const T, begin: usize, end: usize) -> Self {
            let warps = (block_size() / 32).max(1) as usize;
            let per_warp = (end - begin).div_ceil(warps);
            let lo = (begin + (thread_index() / 32) as usize * per_warp).min(end);
            let hi = (lo + per_warp).min(end);
            // Whole loads' worth of steps a group: a group's steps are weighed together.
            let group = (hi - lo).div_ceil(32 * 32).max(1).next_multiple_of(Self::BATCH);
            WarpSpan { input, lo, hi, group }
        }

        /// Steps loaded together: `STEPS` of f32, half of [`UNROLL`] for 16-bit types (whose
        /// vectors hold twice the entries: with four, the weighing of a batch took 134
        /// registers).
        const BATCH: usize = if size_of::<T>() == 2 { UNROLL / 2 } else { STEPS };

        /// This lane's vectors of the batch of steps from `step` (zeros past the span, and in
        /// the array past [`Self::BATCH`]).
        #[inline(always)]
        fn load_batch(&self, step: usize) -> [Packed<T, VEC>; STEPS] {
            let mut loaded = [Packed::<T, VEC>::ZERO; STEPS];
            // Indexed: an array iterator kept in memory is a local-memory array.
            #[allow(clippy::needless_range_loop)]
            for k in 0..Self::BATCH {
                loaded[k] = self.load(step + k);
            }
            loaded
        }

        fn steps(&self) -> usize {
            (self.hi - self.lo).div_ceil(32)
        }

        /// This lane's vector of step `step` (zeros past the span).
        #[inline(always)]
        fn load(&self, step: usize) -> Packed<T, VEC> {
            let v = self.lo + step * 32 + lane_index() as usize;
            if v < self.hi {
                unsafe { Packed::<T, VEC>::load::<Reused>(self.input.add(v * VEC)) }
            } else {
                Packed::ZERO
            }
        }

        /// The batch's bound for [`MassScale::mass_from`] — the value of the bits `lowest` (NaN,
        /// weighing nothing, past infinity's) — and the bits of its largest entry (0 for
        /// negatives and NaN, as `f32::max` from 0 on the host). The bound depends on every
        /// entry of the batch (it never changes it): ptxas then issues all of the batch's loads
        /// before it weighs any, where it would otherwise weigh each vector as it arrives,
        /// one load in flight at a time (docs/perf/sampling.md).
        #[inline(always)]
        fn batch_bound(loaded: &[Packed<T, VEC>; STEPS], lowest: u32) -> (f32, u32) {
            let mut top = 0f32;
            #[allow(clippy::needless_range_loop)]
            for k in 0..Self::BATCH {
                for i in 0..VEC {
                    top = top.max(loaded[k].get_f32(i));
                }
            }
            let bound = f32::from_bits(lowest.min(f32::NAN.to_bits()));
            (choose(top >= 0.0, bound, f32::NAN), top.to_bits() & !(1 << 31))
        }

        /// The masses of `vector`'s entries under `scale` from `bound` up, summed.
        #[inline(always)]
        fn vector_mass(vector: &Packed<T, VEC>, scale: &MassScale, bound: f32) -> u64 {
            let mut mass = 0u64;
            for i in 0..VEC {
                mass += scale.mass_from(vector.get_f32(i), bound);
            }
            mass
        }

        /// The span's masses under `scale` of the entries whose bits are at least `lowest`,
        /// summed over the block and the cluster (an exchange of `round`): every thread of every
        /// block of the cluster must call it.
        #[inline(always)]
        fn weigh(
            &self,
            scale: &MassScale,
            lowest: u32,
            cluster: &ClusterExchange,
            histogram: ClusterHistogram,
            round: &mut u32,
        ) -> (Weighed, RowMass) {
            histogram.clear();
            let (steps, lane) = (self.steps(), lane_index() as usize);
            let (mut group, mut max) = (0u64, 0u32);
            let mut step = 0;
            while step < steps {
                let loaded = self.load_batch(step);
                let (bound, top) = Self::batch_bound(&loaded, lowest);
                max = max.max(top);
                // The steps loaded together are of one group: one warp sum for them.
                let mut mass = 0u64;
                #[allow(clippy::needless_range_loop)]
                for k in 0..Self::BATCH {
                    mass += Self::vector_mass(&loaded[k], scale, bound);
                }
                let steps_mass = warp_sum_u64(mass);
                group += if divide(step, self.group) == lane { steps_mass } else { 0 };
                step += Self::BATCH;
            }
            let weighed = Weighed { group, span: warp_sum_u64(group) };
            let warp = thread_index() / 32;
            let max = warp_max_u32(max);
            if lane == 0 {
                store_shared_u64(warp_masses() + 8 * warp, weighed.span);
                store_shared_u32(warp_masses() + 8 * 32 + 4 * warp, max);
            }
            block_barrier();
            if thread_index() == 0 {
                let (mut block, mut block_max) = (0u64, 0u32);
                for w in 0..block_size() / 32 {
                    block += load_shared_u64(warp_masses() + 8 * w);
                    block_max = block_max.max(load_shared_u32(warp_masses() + 8 * 32 + 4 * w));
                }
                // Bins 0..count: the blocks' masses; from MAX_CLUSTER_BLOCKS on, their largest
                // entries (each block's own bin, so the sum is the value).
                if block != 0 {
                    histogram.add(cluster.rank(), block);
                }
                if block_max != 0 {
                    histogram.add(crate::MAX_CLUSTER_BLOCKS + cluster.rank(), block_max as u64);
                }
            }
            let totals = histogram.total(cluster, *round);
            let mut mass = RowMass { total: 0, before: 0, own: 0, max: 0 };
            for rank in 0..cluster.count() {
                let sum = load_shared_u64(totals + 8 * rank);
                mass.before += if rank < cluster.rank() { sum } else { 0 };
                mass.total += sum;
                mass.max = mass.max.max(load_shared_u64(totals + 8 * (crate::MAX_CLUSTER_BLOCKS + rank)) as u32);
            }
            mass.own = load_shared_u64(totals + 8 * cluster.rank());
            histogram.recycle(cluster, *round);
            *round += 1;
            (weighed, mass)
        }

        /// Writes the row's token: the first entry (of bits at least `lowest`) at which the
        /// masses summed in index order pass `draw`'s target in the row's mass ([`WarpSpan::find`];
        /// 0 for a row without mass, by the cluster's first block). Every thread of the block
        /// must call it; the span's masses as [`WarpSpan::weigh`] left them.
        #[inline(always)]
        fn draw(&self, draw: &Draw, lowest: u32, weighed: Weighed, mass: RowMass, cluster: &ClusterExchange) {
            if mass.total == 0 {
                if cluster.rank() == 0 && thread_index() == 0 {
                    unsafe { draw.write(0) };
                }
                return;
            }
            let target = mass_target(draw.bits, mass.total);
            if let Some((token, _)) = self.find(&draw.scale, lowest, target, weighed, &mass) {
                unsafe { draw.write(token) };
            }
        }

        /// The entry (of bits at least `lowest`) at which the masses under `scale` summed in
        /// index order pass `target` (< the row's mass), found by the block, then the warp,
        /// whose span holds it: its index and bits, in the one lane of the cluster that finds
        /// it (None in every other). Every thread of the block must call it; the span's masses
        /// as [`WarpSpan::weigh`] left them.
        #[inline(always)]
        fn find(
            &self,
            scale: &MassScale,
            lowest: u32,
            target: u64,
            weighed: Weighed,
            mass: &RowMass,
        ) -> Option<(u32, u32)> {
            let thread = thread_index();
            // The same in every thread of the block: the block returns as one.
            if target < mass.before || target - mass.before >= mass.own {
                return None;
            }
            let mut target = target - mass.before;
            let state = histogram_broadcast();
            if thread == 0 {
                let mut found = false;
                for w in 0..block_size() / 32 {
                    let span = load_shared_u64(warp_masses() + 8 * w);
                    if !found && target < span {
                        store_shared_u32(state, w);
                        store_shared_u64(state + 8, target);
                        found = true;
                    }
                    target -= if found { 0 } else { span };
                }
            }
            block_barrier();
            if thread / 32 != load_shared_u32(state) {
                return None;
            }
            let target = load_shared_u64(state + 8);
            // The group of steps, then the step, then the lane, then the entry.
            let groups = warp_inclusive_sum_u64(weighed.group);
            let group = warp_ballot(groups > target).trailing_zeros();
            let mut below = warp_broadcast_u64(groups - weighed.group, group);
            let mut step = group as usize * self.group;
            while step < self.steps() {
                let loaded = self.load_batch(step);
                let (bound, _) = Self::batch_bound(&loaded, lowest);
                // Without an exit from the loop (which would index `loaded` from local memory).
                let (mut found, mut token) = (false, None);
                #[allow(clippy::needless_range_loop)]
                for k in 0..Self::BATCH {
                    let vector = &loaded[k];
                    if found {
                        continue;
                    }
                    let lane_mass = Self::vector_mass(vector, scale, bound);
                    let lanes = warp_inclusive_sum_u64(lane_mass);
                    let holder = warp_ballot(below + lanes > target);
                    found = holder != 0;
                    if found && lane_index() == holder.trailing_zeros() {
                        let v = self.lo + (step + k) * 32 + lane_index() as usize;
                        let (entry, bits) =
                            Self::entry_passing(vector, below + lanes - lane_mass, target, scale, bound);
                        token = Some(((v * VEC + entry) as u32, bits));
                    }
                    below += warp_broadcast_u64(lanes, 31);
                }
                if found {
                    return token;
                }
                step += Self::BATCH;
            }
            None
        }

        /// The first entry of `vector` (from `bound` up) at which the masses summed from `below`
        /// pass `target`, and its bits (`VEC` where none does): a loop without an exit unrolls
        /// (an exit would index the vector from local memory).
        #[inline(always)]
        fn entry_passing(
            vector: &Packed<T, VEC>,
            mut below: u64,
            target: u64,
            scale: &MassScale,
            bound: f32,
        ) -> (usize, u32) {
            let (mut hit, mut hit_bits) = (VEC, 0);
            for i in 0..VEC {
                let x = vector.get_f32(i);
                below += scale.mass_from(x, bound);
                let passes = hit == VEC && below > target;
                (hit, hit_bits) = if passes { (i, x.to_bits()) } else { (hit, hit_bits) };
            }
            (hit, hit_bits)
        }
    }

    /// The token and bits one thread of the cluster `found` (None in every other), made known to
    /// every thread of the cluster through the histogram's bin 0 (an exchange of `round`):
    /// every thread of every block must call it.
    #[inline(always)]
    fn share_found(
        found: Option<(u32, u32)>,
        cluster: &ClusterExchange,
        histogram: ClusterHistogram,
        round: &mut u32,
    ) -> (u32, u32) {
        histogram.clear();
        block_barrier();
        if let Some((token, bits)) = found {
            histogram.add(0, (bits as u64) << 32 | token as u64);
        }
        let totals = histogram.total(cluster, *round);
        let shared = load_shared_u64(totals);
        histogram.recycle(cluster, *round);
        *round += 1;
        (shared as u32, (shared >> 32) as u32)
    }

    /// `top_k_sampling_from_probs`: see [`top_k_draw_rows`].
    #[inline(always)]
    pub unsafe fn top_k_sample_rows<T: Element, const VEC: usize>(p: &SampleParams) {
        unsafe { top_k_draw_rows::<T, VEC, false, false>(p) }
    }

    /// `top_k_top_p_sampling_from_probs`: see [`top_k_draw_rows`].
    #[inline(always)]
    pub unsafe fn top_k_top_p_sample_rows<T: Element, const VEC: usize>(p: &SampleParams) {
        unsafe { top_k_draw_rows::<T, VEC, true, false>(p) }
    }

    /// `top_k_top_p_sampling_from_logits`: see [`top_k_draw_rows`].
    #[inline(always)]
    pub unsafe fn top_k_top_p_logits_sample_rows<T: Element, const VEC: usize>(p: &SampleParams) {
        unsafe { top_k_draw_rows::<T, VEC, true, true>(p) }
    }

    /// The sampling ops that stage a row: the row's largest entry (a pass that stages the
    /// slice), the top-k pivot by [`histogram_pivot`] (as the filter kernels'), then one token
    /// drawn from the kept entries in proportion to their exact masses ([`staged_draw`]) — or,
    /// with `TOP_P`, by top-p's rejection rounds among them ([`Rounds`]; FlashInfer's
    /// "top_k_first"). `LOGITS`: the row holds logits, weighed as [`EntryWeight::Softmax`].
    /// Integers throughout: the token is [`sample_row`]'s, whatever the slicing. Grid, cluster
    /// and launcher's guarantees as [`filter_rows`], with [`SAMPLE_HEADER_BYTES`] in place of
    /// [`FILTER_HEADER_BYTES`].
    #[inline(always)]
    unsafe fn top_k_draw_rows<T: Element, const VEC: usize, const TOP_P: bool, const LOGITS: bool>(p: &SampleParams) {
        let f = &p.filter;
        let RowSlices { histogram, cluster, begin, end, mut row, row_step } =
            RowSlices::of_launch(f.slices, f.vocab, VEC);
        let (step, first) = (block_size() as usize, begin + thread_index() as usize);
        let header = SAMPLE_HEADER_BYTES as usize;
        let mut round = 0u32;
        while row < f.rows {
            let input = (f.input as *const T).wrapping_add((row * f.input_row_stride) as usize);
            let mut slice = Slice::<T, VEC>::new(input, header, (begin, first, end, step), f.staged != 0, true);
            let max = row_max(&mut slice, &cluster, EntryWeight::least(LOGITS), &mut round);
            let weight = EntryWeight::of_row(LOGITS, max);
            let scale = weight.scale(max, f.vocab);
            let search = PivotSearch::top_k::<T>(unsafe { row_top_k(f, row) }, f.vocab);
            let keep =
                Keep::from_pivot(histogram_pivot(&mut slice, &cluster, histogram, search, Weights::Count, &mut round));
            let token = (f.output as *mut i32).wrapping_add(row as usize);
            let draw = Draw { keep, weight, scale, bits: unsafe { random_bits_of_row(p, row) }, token };
            if TOP_P {
                let top_p = unsafe { row_second_top_p(p, row) };
                let rounds = Rounds { cluster: &cluster, histogram, top_p, p, row };
                let staged = StagedRow { slice: &slice, draw };
                let first = staged.weigh_from(keep.pivot, &cluster, histogram, &mut round);
                let drawn = rounds.draw(&staged, first, &mut round);
                if cluster.rank() == 0 && thread_index() == 0 {
                    unsafe { Draw::write_to(token, drawn) };
                }
            } else {
                staged_draw(&slice, &cluster, histogram, draw, &mut round);
            }
            // The chunks' threads read staged keys other threads staged: none may stage the
            // next row's before they are done (a block takes several rows past the grid's 65535).
            block_barrier();
            row += row_step;
        }
    }

    /// What a draw draws among and where it writes.
    #[derive(Clone, Copy)]
    struct Draw {
        keep: Keep,
        weight: EntryWeight,
        scale: MassScale,
        /// [`row_random_bits`] of the row.
        bits: u64,
        token: *mut i32,
    }

    impl Draw {
        /// Writes the row's token (`st.global`: a plain write would be a generic store).
        ///
        /// # Safety
        /// `token` writable, as the launcher guarantees.
        #[inline(always)]
        unsafe fn write(&self, token: u32) {
            unsafe { Self::write_to(self.token, token) }
        }

        /// Writes `token` at `at`, as [`Draw::write`].
        ///
        /// # Safety
        /// `at` writable, as the launcher guarantees.
        #[inline(always)]
        unsafe fn write_to(at: *mut i32, token: u32) {
            unsafe { <Kept as crate::vector::Store>::words::<4>(at.cast(), [token, 0, 0, 0]) }
        }

        /// The mass of entry `i` of a staged vector of keys.
        #[inline(always)]
        fn entry_mass<T: Element, const VEC: usize>(&self, keys: &Packed<T, VEC>, i: usize) -> u64 {
            let values = keys.map_words(word_values::<T>);
            self.keep.weighed_mass(keys.get(i).to_bits(), values.get_f32(i), self.weight, &self.scale)
        }
    }

    /// The shared-memory address of a sampling block's kept masses by chunk: after the filters'
    /// header.
    #[inline(always)]
    fn chunk_masses() -> u32 {
        dynamic_shared() + FILTER_HEADER_BYTES
    }

    /// The chunks a staged slice is weighed by: `(count, vectors a chunk)`.
    #[inline(always)]
    fn chunking<T: Element, const VEC: usize>(slice: &Slice<T, VEC>) -> (u32, usize) {
        let chunks = block_size().min(crate::HISTOGRAM_BINS);
        (chunks, (slice.end - slice.begin).div_ceil(chunks as usize))
    }

    /// The vectors `lo..hi` of chunk `c`.
    #[inline(always)]
    fn chunk<T: Element, const VEC: usize>(slice: &Slice<T, VEC>, c: u32) -> (usize, usize) {
        let per_chunk = chunking(slice).1;
        let lo = (slice.begin + c as usize * per_chunk).min(slice.end);
        (lo, (lo + per_chunk).min(slice.end))
    }

    /// The staged slice's masses under `draw` (its `keep`, `weight` and `scale`): each of the
    /// block's first (up to [`crate::HISTOGRAM_BINS`]) threads sums the kept masses of a chunk of
    /// consecutive vectors (kept in shared memory for [`find_staged`]); warp 0 adds the chunks
    /// (`LANE_BINS` a lane) into the cluster histogram's bin of the block's rank; the bins give
    /// every block the row's kept mass and the mass before its slice (an exchange of `round`).
    /// Every thread of every block of the cluster must call it.
    #[inline(always)]
    fn weigh_staged<T: Element, const VEC: usize>(
        slice: &Slice<T, VEC>,
        cluster: &ClusterExchange,
        histogram: ClusterHistogram,
        draw: &Draw,
        round: &mut u32,
    ) -> RowMass {
        let chunks = chunking(slice).0;
        let thread = thread_index();
        if thread < chunks {
            let (lo, hi) = chunk(slice, thread);
            let mut own = 0u64;
            for v in lo..hi {
                let keys = slice.keys(v);
                for i in 0..VEC {
                    own += draw.entry_mass(&keys, i);
                }
            }
            store_shared_u64(chunk_masses() + 8 * thread, own);
        }
        histogram.clear();
        block_barrier();
        // The lanes' sums of their chunks, for the block's sum and then the chunk's search.
        let lanes = histogram_broadcast();
        if thread < 32 {
            let mut mine = 0u64;
            for j in 0..LANE_BINS {
                mine += chunk_mass(thread * LANE_BINS + j, chunks);
            }
            store_shared_u64(lanes + 8 * thread, mine);
            unsafe { asm!("bar.warp.sync 0xffffffff;", options(nostack)) };
            if thread == 0 {
                let mut block = 0u64;
                for lane in 0..32 {
                    block += load_shared_u64(lanes + 8 * lane);
                }
                if block != 0 {
                    histogram.add(cluster.rank(), block);
                }
            }
        }
        let totals = histogram.total(cluster, *round);
        let mut mass = RowMass { total: 0, before: 0, own: 0, max: 0 };
        for rank in 0..cluster.count() {
            let sum = load_shared_u64(totals + 8 * rank);
            mass.before += if rank < cluster.rank() { sum } else { 0 };
            mass.total += sum;
        }
        mass.own = load_shared_u64(totals + 8 * cluster.rank());
        histogram.recycle(cluster, *round);
        *round += 1;
        mass
    }

    /// Chunk `c`'s mass as [`weigh_staged`] left it (0 past the `chunks`).
    #[inline(always)]
    fn chunk_mass(c: u32, chunks: u32) -> u64 {
        if c < chunks { load_shared_u64(chunk_masses() + 8 * c) } else { 0 }
    }

    /// The entry (under `draw`) at which the masses summed in index order pass `target` (< the
    /// row's mass), found by the block whose range holds it — warp 0 finds the chunk, the
    /// chunk's thread the entry: its index and key, in that one thread of the cluster (None in
    /// every other). Every thread of the block must call it; the masses as [`weigh_staged`]
    /// left them.
    #[inline(always)]
    fn find_staged<T: Element, const VEC: usize>(
        slice: &Slice<T, VEC>,
        draw: &Draw,
        target: u64,
        mass: &RowMass,
    ) -> Option<(u32, u32)> {
        // The same in every thread of the block: the block returns as one.
        if target < mass.before || target - mass.before >= mass.own {
            return None;
        }
        let target = target - mass.before;
        let (chunks, thread) = (chunking(slice).0, thread_index());
        let lanes = histogram_broadcast();
        let state = lanes + 32 * 8;
        if thread < 32 {
            let mut below = 0u64;
            for lane in 0..thread {
                below += load_shared_u64(lanes + 8 * lane);
            }
            if below <= target && target - below < load_shared_u64(lanes + 8 * thread) {
                // This lane's chunks hold the target: the chunk, and the mass before it.
                let mut found = false;
                for j in 0..LANE_BINS {
                    let sum = chunk_mass(thread * LANE_BINS + j, chunks);
                    if !found && target - below < sum {
                        store_shared_u32(state, thread * LANE_BINS + j);
                        store_shared_u64(state + 8, below);
                        found = true;
                    }
                    below += if found { 0 } else { sum };
                }
            }
        }
        block_barrier();
        if thread != load_shared_u32(state) {
            return None;
        }
        let mut below = load_shared_u64(state + 8);
        let (lo, hi) = chunk(slice, thread);
        let mut found = None;
        let mut v = lo;
        while v < hi {
            let keys = slice.keys(v);
            // The vector's entries all summed, the first past the target noted: a loop without
            // an exit unrolls (an exit would index the vector from local memory).
            let (mut hit, mut key) = (VEC, 0);
            for i in 0..VEC {
                below += draw.entry_mass(&keys, i);
                let passes = hit == VEC && below > target;
                (hit, key) = if passes { (i, keys.get(i).to_bits()) } else { (hit, key) };
            }
            if hit < VEC {
                found = Some(((v * VEC + hit) as u32, key));
                v = hi;
            }
            v += 1;
        }
        found
    }

    /// One token of the row `slice` holds ([`weigh_staged`], then [`mass_target`] of the draw's
    /// bits and [`find_staged`]), written by the one thread that finds it; a row without kept
    /// mass gets 0 (from the cluster's first block). Every thread of every block of the
    /// cluster must call it.
    #[inline(always)]
    fn staged_draw<T: Element, const VEC: usize>(
        slice: &Slice<T, VEC>,
        cluster: &ClusterExchange,
        histogram: ClusterHistogram,
        draw: Draw,
        round: &mut u32,
    ) {
        let mass = weigh_staged(slice, cluster, histogram, &draw, round);
        if mass.total == 0 {
            if cluster.rank() == 0 && thread_index() == 0 {
                unsafe { draw.write(0) };
            }
            return;
        }
        if let Some((token, _)) = find_staged(slice, &draw, mass_target(draw.bits, mass.total), &mass) {
            unsafe { draw.write(token) };
        }
    }

    /// A row drawn from by top-p's rejection rounds ([`Rounds`]): weighed from a bound up (the
    /// bits, or the key, of the entries a round keeps) and searched for a target.
    trait RejectionRow {
        /// What a weighing leaves its search.
        type Weighed: Copy;

        /// The row's masses of the entries from `bound` up, summed over the cluster (an
        /// exchange of `round`): every thread of every block of the cluster must call it.
        fn weigh_from(
            &self,
            bound: u32,
            cluster: &ClusterExchange,
            histogram: ClusterHistogram,
            round: &mut u32,
        ) -> (Self::Weighed, RowMass);

        /// The entry at which the masses `weighed` summed in index order pass `target` (< the
        /// row's mass): its index and bound (bits or key), in the one thread of the cluster that
        /// finds it (None in every other). Every thread of the block must call it.
        fn find(&self, weighed: Self::Weighed, target: u64, mass: &RowMass) -> Option<(u32, u32)>;
    }

    /// The unstaged kernel's row: a warp's span, weighed at `scale` from the bits `lowest` up.
    struct ScaledSpan<'a, T: Element, const VEC: usize, const STEPS: usize> {
        span: &'a WarpSpan<T, VEC, STEPS>,
        scale: &'a MassScale,
    }

    impl<T: Element, const VEC: usize, const STEPS: usize> RejectionRow for ScaledSpan<'_, T, VEC, STEPS> {
        /// The span's masses and the bound they were weighed from.
        type Weighed = (Weighed, u32);

        #[inline(always)]
        fn weigh_from(
            &self,
            lowest: u32,
            cluster: &ClusterExchange,
            histogram: ClusterHistogram,
            round: &mut u32,
        ) -> ((Weighed, u32), RowMass) {
            let (weighed, mass) = self.span.weigh(self.scale, lowest, cluster, histogram, round);
            ((weighed, lowest), mass)
        }

        #[inline(always)]
        fn find(&self, (weighed, lowest): (Weighed, u32), target: u64, mass: &RowMass) -> Option<(u32, u32)> {
            self.span.find(self.scale, lowest, target, weighed, mass)
        }
    }

    /// The staged kernels' row: a block's staged slice, weighed under `draw` from a key up.
    struct StagedRow<'a, T: Element, const VEC: usize> {
        slice: &'a Slice<T, VEC>,
        draw: Draw,
    }

    impl<T: Element, const VEC: usize> RejectionRow for StagedRow<'_, T, VEC> {
        /// The entries weighed: those the chunks' masses count.
        type Weighed = Keep;

        #[inline(always)]
        fn weigh_from(
            &self,
            key: u32,
            cluster: &ClusterExchange,
            histogram: ClusterHistogram,
            round: &mut u32,
        ) -> (Keep, RowMass) {
            let keep = Keep::from_pivot(key);
            (keep, weigh_staged(self.slice, cluster, histogram, &Draw { keep, ..self.draw }, round))
        }

        #[inline(always)]
        fn find(&self, keep: Keep, target: u64, mass: &RowMass) -> Option<(u32, u32)> {
            find_staged(self.slice, &Draw { keep, ..self.draw }, target, mass)
        }
    }

    /// Top-p's rejection rounds of a row ([`top_p_draw`]): the cluster, its histogram, the
    /// row's `top_p` and its random stream's parameters.
    struct Rounds<'a> {
        cluster: &'a ClusterExchange,
        histogram: ClusterHistogram,
        top_p: f32,
        p: &'a SampleParams,
        row: u64,
    }

    impl Rounds<'_> {
        /// The token, from the masses `first` of the entries a draw begins among (every one,
        /// or top-k's): each round finds a token ([`RejectionRow::find`]), makes it known to
        /// the cluster ([`share_found`]) and weighs the entries above it — the next round's
        /// masses where the check rejects it. The same in every thread of the cluster; every
        /// one must call it.
        #[inline(always)]
        fn draw<R: RejectionRow>(&self, row: &R, first: (R::Weighed, RowMass), round: &mut u32) -> u32 {
            let (mut weighed, mut mass) = first;
            let rank = top_p_rank(self.top_p, mass.total);
            let mut draw = 0u32;
            loop {
                if mass.total == 0 {
                    return 0;
                }
                // Read again each round: fewer registers held across a weighing.
                let (seed, offset) = unsafe { row_seed_and_offset(self.p, self.row) };
                let target = mass_target(draw_random_bits(seed, self.row, offset, draw), mass.total);
                let found = row.find(weighed, target, &mass);
                let (token, bound) = share_found(found, self.cluster, self.histogram, round);
                if rank == u64::MAX {
                    return token;
                }
                let (above, above_mass) = row.weigh_from(bound + 1, self.cluster, self.histogram, round);
                if above_mass.total < rank {
                    return token;
                }
                (weighed, mass, draw) = (above, above_mass, draw + 1);
            }
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

    /// Pseudo-random f32 values with many ties.
    fn tied_values<const N: usize>() -> [f32; N] {
        let mut state = 12345u32;
        core::array::from_fn(|_| {
            state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
            (state >> 20) as f32 - 2048.0 + if state & 1 == 0 { 0.0 } else { 0.5 }
        })
    }

    /// The search against a sort, over values with ties, every k.
    #[test]
    fn pivot_search_finds_the_kth_largest_key() {
        let keys = tied_values::<200>().map(order_key);
        let mut sorted = keys;
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        for k in 1..keys.len() as u32 {
            let search = PivotSearch::top_k::<f32>(k, keys.len() as u32);
            let (pivot, rounds) = search.run_on_host(keys.len(), |i| keys[i], |_| 1);
            let kth = sorted[k as usize - 1];
            let kept = keys.iter().filter(|&&key| key >= pivot).count();
            assert_eq!(kept, keys.iter().filter(|&&key| key >= kth).count(), "k = {k}");
            assert!(rounds <= 4, "k = {k}: {rounds} rounds");
        }
        let top_k = PivotSearch::top_k::<f32>;
        assert!(top_k(200, 200).done() && top_k(0, 200).done());
        assert_eq!(top_k(500, 200).pivot(), 0, "every key kept");
    }

    /// Top-p's pivot against its definition: an entry is kept exactly when the mass of the
    /// entries above it is short of `⌈top_p · mass⌉`, for every share, ties included.
    #[test]
    fn top_p_keeps_an_entry_when_the_mass_above_it_is_short_of_the_share() {
        let values = tied_values::<300>().map(|x| (x / 512.0).abs());
        let keys = values.map(order_key);
        let max = values.iter().copied().fold(0.0f32, f32::max);
        let scale = MassScale::new(max, values.len() as u32);
        let masses = values.map(|x| scale.mass(x));
        let total: u64 = masses.iter().sum();
        for top_p in [1e-6f32, 0.1, 0.25, 0.5, 0.77, 0.9, 0.999, 0.0, f32::NAN] {
            let search = PivotSearch::top_p::<f32>(top_p);
            let (pivot, rounds) = search.run_on_host(keys.len(), |i| keys[i], |i| masses[i]);
            assert_eq!(rounds, 4, "a byte a round, to the last");
            let target = share_of(total, top_p).max(1);
            for (i, &key) in keys.iter().enumerate() {
                let above: u64 = keys.iter().zip(&masses).filter(|&(&other, _)| other > key).map(|(_, m)| m).sum();
                assert_eq!(key >= pivot, above < target, "top_p {top_p}, entry {i}");
            }
        }
        assert!(PivotSearch::top_p::<f32>(1.0).done(), "1 keeps every entry");
    }

    #[test]
    fn shares_round_up_exactly() {
        assert_eq!(share_of(10, 0.5), 5);
        assert_eq!(share_of(11, 0.5), 6);
        assert_eq!(share_of(3, 0.1), 1, "0.3000000045 rounds up");
        assert_eq!(share_of(1 << 62, 0.25), 1 << 60);
        assert_eq!(
            share_of(u64::MAX >> 1, f32::from_bits(0x3f7f_ffff)),
            ((u64::MAX >> 1) as u128 * 0xff_ffff).div_ceil(1 << 24) as u64
        );
        assert_eq!(share_of(1000, f32::from_bits(1)), 1, "the least subnormal");
        for share in [0.0, -0.5, f32::NAN] {
            assert_eq!(share_of(1000, share), 0);
        }
    }

    #[test]
    fn masses_are_exact_fixed_point_and_a_row_fits() {
        let scale = MassScale::new(0.75, 128_256);
        // F = 62 − 17 = 45; a largest entry in [2^−20, 2) weighs as 1: a weight is x · 2^45.
        assert_eq!(scale, MassScale::of_probabilities(128_256));
        assert_eq!(scale.mass(0.75), 3 << 43);
        assert_eq!(scale.mass(2f32.powi(-40)), 1 << 5);
        assert_eq!(scale.mass(2f32.powi(-50)), 0, "below 2^−45: truncated");
        assert!(scale.mass(f32::from_bits(2f32.to_bits() - 1)) as u128 * 128_256 < 1 << 63, "a row below 2 fits");
        for own in [2f32.powi(-21), 2.0, 3.5e9] {
            let scale = MassScale::new(own, 128_256);
            assert_ne!(scale, MassScale::of_probabilities(128_256), "{own}");
            assert_eq!(scale.mass(own) >> 45, 1, "{own}: the largest entry weighs 2^45 (and a bit more)");
        }
        for nothing in [-0.5, -0.0, 0.0, f32::INFINITY, f32::NAN, f32::NEG_INFINITY] {
            assert_eq!(scale.mass(nothing), 0, "{nothing}");
        }
        let biggest = MassScale::new(f32::MAX, u32::MAX);
        assert!(biggest.mass(f32::MAX) as u128 * u32::MAX as u128 <= 1 << 63);
        let one = MassScale::new(1.0, 1);
        assert_eq!(one.mass(1.0), 1 << 62);
        assert_eq!(MassScale::new(0.0, 5).mass(1e-45), 1 << 36, "F = 59: the least subnormal is 2^(F − 23) of 2^−126");
    }

    /// `⌊x · 2^(F − e)⌋` by the definition, in integers: `x`'s mantissa shifted by its exponent
    /// (0 for negatives, NaN, infinities and weights of 2^63 or more).
    fn mass_by_definition(x: f32, max: f32, vocab: u32) -> u64 {
        let fraction_bits = 62 - (32 - vocab.max(1).wrapping_sub(1).leading_zeros()) as i32;
        let max_exponent = ((max.to_bits() >> 23) & 0xff).clamp(1, 254) as i32;
        let e = if (107..=127).contains(&max_exponent) { 0 } else { max_exponent - 127 };
        let bits = x.to_bits();
        let exponent = (bits >> 23) as i32;
        if bits >> 31 != 0 || exponent == 255 {
            return 0;
        }
        // x = mantissa · 2^(max(exponent, 1) − 150).
        let mantissa = (bits & 0x7f_ffff | if exponent > 0 { 0x80_0000 } else { 0 }) as u128;
        let shift = exponent.max(1) - 150 + fraction_bits - e;
        // A mantissa of at least 1 shifted 63 places or more weighs 2^63 or more.
        let weight = match shift {
            63.. => return 0,
            0.. => mantissa << shift,
            _ => mantissa >> (-shift).min(127),
        };
        if weight >= 1 << 63 { 0 } else { weight as u64 }
    }

    #[test]
    fn masses_are_the_definitions_floor_for_every_kind_of_value_and_scale() {
        let vocabs = [1, 5, 32_000, 128_256, 1 << 20, u32::MAX];
        let maxima =
            [0.0, 1e-45, 1e-38, 2f32.powi(-100), 1e-7, 2f32.powi(-21), 0.75, 1.5, 3.0, 1e30, f32::MAX, f32::INFINITY];
        // Every exponent and sign, with mantissas spread over their range (and both ends).
        let values = || (0..=u32::MAX).step_by(65_521).chain([0, 1, 0x7f_ffff, 0x7f7f_ffff, 0x7f80_0000, 0x8000_0000]);
        for vocab in vocabs {
            for max in maxima {
                let scale = MassScale::new(max, vocab);
                for x in values().map(f32::from_bits) {
                    let expected = mass_by_definition(x, max, vocab);
                    assert_eq!(scale.mass(x), expected, "x = {x:e} ({:#x}), max {max:e}, vocab {vocab}", x.to_bits());
                    // From a bound: the entry's weight at or above it, nothing below.
                    for bound in [0.0, 1e-30, 0.5, f32::NAN] {
                        let from = if x >= bound { expected } else { 0 };
                        assert_eq!(scale.mass_from(x, bound), from, "x = {x:e}, from {bound:e}, max {max:e}");
                    }
                }
            }
        }
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
