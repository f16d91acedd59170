//! What an entry weighs in a top-p search or a draw: an exact fixed-point integer ([`MassScale`])
//! of its value, or of softmax's numerator where a row holds logits ([`EntryWeight`]).

use crate::math::{choose, exp2_portable, truncate_to_u64};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
