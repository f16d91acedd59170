//! Softmax, `softmax(logits / temperature)` (FlashInfer's `softmax`): its numerics, shared by the
//! device kernel and the CPU backend, and the CPU's row. A logit `x` of a row with temperature `t`
//! becomes `u = x · s` with `s = log2(e) / t` (`s = 0` for `t = 0`, FlashInfer's rule: every
//! finite logit then weighs the same), and the row's probabilities are
//! `2^(u − max u) / Σ 2^(u − max u)`. The sum is kept online as a [`Partial`] — a running maximum
//! and the sum scaled to it — so a row is read once to reduce and once to write, and partials of
//! slices of a row combine in any fixed order: the device combines them in a fixed tree, so a
//! result never depends on timing or on the other rows. A row of −∞ only, or holding +∞ or NaN,
//! comes out NaN (as FlashInfer's).

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
pub(super) const HOST_CHUNK: usize = 256;

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
}
