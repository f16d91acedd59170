//! What correctness checks share, for every family (tests and the benchmark's `--refcheck`): the
//! comparison of a result with its f64 reference (each op's reference is in its family's file,
//! reached through [`OpInfo::reference`](crate::op::OpInfo::reference)) and seeded random-normal
//! inputs (never zeros).

use ferrinfer_kernels::element::DType;

use crate::HostElement;
use crate::op::{Domain, OpInfo, Problem, Role, TABLE_ROWS, TensorArg};
use crate::scalar::Scalar;

/// How far a result is from its reference.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Agreement {
    /// ‖got − want‖ / ‖want‖.
    pub relative_error: f64,
    /// Largest |got − want| over its elementwise bound (≤ 1 passes).
    pub worst_element: f64,
}

/// The project's check (docs/testing.md): relative error under 1e-5 (f32) or 1e-2 (f16, bf16), and every element
/// within one unit of the dtype's rounding of the reference (plus a floor for values near 0).
/// NaN, infinities and unwritten (NaN-poisoned) elements fail.
pub fn compare(dtype: DType, got: &[f64], want: &[f64]) -> Result<Agreement, String> {
    if got.len() != want.len() {
        return Err(format!("length {} vs reference {}", got.len(), want.len()));
    }
    // The last: half the spacing of the dtype's subnormals, the least error of rounding to it
    // (f16's 2^−25 matters: renormalised probabilities of a 32k vocabulary are ~2e−5).
    let (relative_bound, unit, subnormal) = match dtype {
        DType::F32 => (1e-5, 1e-5, 2f64.powi(-150)),
        // Integers (indices, sampled tokens) are exact.
        DType::I32 | DType::I64 => (f64::MIN_POSITIVE, 0.0, 0.0),
        DType::F16 => (1e-2, 2f64.powi(-10), 2f64.powi(-25)),
        DType::Bf16 => (1e-2, 2f64.powi(-7), 2f64.powi(-134)),
    };
    let scale = want.iter().fold(0f64, |m, w| m.max(w.abs()));
    let floor = scale * 1e-6 + subnormal + f64::MIN_POSITIVE;
    let (mut diff2, mut want2, mut worst) = (0.0, 0.0, 0.0f64);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if g.is_infinite() && g == w {
            // An infinity where the reference has the same one (a masked logit): exact.
            continue;
        }
        if !g.is_finite() {
            return Err(format!("element {i} is {g} (reference {w})"));
        }
        let bound = unit * w.abs() + floor;
        worst = worst.max((g - w).abs() / bound);
        if (g - w).abs() > bound {
            return Err(format!("element {i} is {g}, reference {w}: off by {:e} > bound {bound:e}", (g - w).abs()));
        }
        diff2 += (g - w) * (g - w);
        want2 += w * w;
    }
    let relative_error = (diff2 / want2.max(f64::MIN_POSITIVE)).sqrt();
    // Rounding into the subnormals adds up to `subnormal` an element to the error's norm.
    let rounding = subnormal * (got.len() as f64 / want2.max(f64::MIN_POSITIVE)).sqrt();
    let bound = relative_bound + rounding;
    if relative_error >= bound {
        return Err(format!("relative error {relative_error:e} ≥ {bound:e}"));
    }
    Ok(Agreement { relative_error, worst_element: worst })
}

/// Checks every tensor `op` wrote against its f64 reference: `inputs` by argument (the values
/// before the call; empty for `Out`), `written` the written arguments' values after it, all as
/// contiguous rows. The worst agreement, or what failed, naming the argument.
pub fn check_written(
    op: &OpInfo,
    dtype: DType,
    hidden: usize,
    inputs: &[Vec<f64>],
    written: &[Vec<f64>],
    scalars: &[Scalar],
) -> Result<Agreement, String> {
    let problem = Problem { dtype, hidden, tensors: inputs, written, scalars: op.scalars_of(scalars) };
    let expected = op.reference(&problem);
    // Each written tensor at its own dtype's precision (softmax's f32 probabilities of bf16 logits).
    let outputs = op.tensors.iter().filter(|a| a.role != Role::In).map(|a| (a.name, a.dtype.dtype(dtype, false)));
    let mut worst = Agreement { relative_error: 0.0, worst_element: 0.0 };
    for (((name, out_dtype), got), want) in outputs.zip(written).zip(&expected) {
        let agreement = compare(out_dtype, got, want).map_err(|e| format!("`{name}`: {e}"))?;
        worst.relative_error = worst.relative_error.max(agreement.relative_error);
        worst.worst_element = worst.worst_element.max(agreement.worst_element);
    }
    Ok(worst)
}

/// Values as f64.
pub fn to_f64<T: HostElement>(values: &[T]) -> Vec<f64> {
    values.iter().map(|v| v.to_f64()).collect()
}

/// Values per independently seeded chunk of [`random_normal`].
const RANDOM_CHUNK: usize = 1 << 20;

/// Positions drawn for an input of token positions: below 2^17, far past where an f32 angle
/// keeps its fraction's first digits (and FlashInfer's `__sincosf` its accuracy).
pub const MAX_POSITION: f64 = (1 << 17) as f64;

/// Seeded input values for argument `arg` of an op of `rows` rows ([`TensorArg::domain`]):
/// [`random_normal`], made `|x|` for an input the op reads as probabilities, whole positions in
/// `[0, MAX_POSITION)` spread as `|x| · MAX_POSITION / 4` (lengths after an append: `rows` more),
/// rows of a table uniform in `[0,
/// TABLE_ROWS)`, segment bounds — 0, then the rows cut at random points in order (some
/// segments may be empty), then `rows` — or a page table's part ([`Domain::fixed`]).
pub fn random_input<T: HostElement>(arg: &TensorArg, len: usize, rows: usize, seed: u64) -> Vec<T> {
    let normal = || random_normal::<f32>(len, seed).into_iter().map(f64::from);
    let position = |v: f64| (v.abs() * MAX_POSITION / 4.0).floor().min(MAX_POSITION - 1.0);
    match arg.domain {
        Domain::Any => random_normal::<T>(len, seed),
        Domain::Nonnegative => {
            random_normal::<T>(len, seed).into_iter().map(|v| T::from_f64(v.to_f64().abs())).collect()
        }
        Domain::Positions => normal().map(|v| T::from_f64(position(v))).collect(),
        Domain::SequenceLengths => normal().map(|v| T::from_f64(rows as f64 + position(v))).collect(),
        Domain::TableRows => {
            // The normal's CDF (by the logistic approximation) makes it uniform in (0, 1).
            let rows = TABLE_ROWS as f64;
            normal().map(|v| T::from_f64((rows / (1.0 + (-1.702 * v).exp())).floor().min(rows - 1.0))).collect()
        }
        Domain::Fixed(_) => {
            arg.domain.fixed(rows).unwrap_or_default().into_iter().map(|v| T::from_f64(v as f64)).collect()
        }
        Domain::SegmentBounds => {
            let mut cuts: Vec<f64> =
                normal().map(|v| (rows as f64 * (0.5 + v.clamp(-2.0, 2.0) / 4.0)).floor()).collect();
            cuts.sort_by(f64::total_cmp);
            let last = cuts.len().saturating_sub(1);
            let bound = |(i, cut): (usize, &f64)| match i {
                0 => 0.0,
                i if i == last => rows as f64,
                _ => *cut,
            };
            cuts.iter().enumerate().map(|c| T::from_f64(bound(c))).collect()
        }
    }
}

/// `len` standard-normal values of type `T` from `seed`: fresh per seed, reproducible, never all
/// zeros. Chunks of 2^20 values, each seeded from (`seed`, chunk index), fill on all cores, so
/// billions of values take seconds.
pub fn random_normal<T: HostElement>(len: usize, seed: u64) -> Vec<T> {
    let mut values = vec![T::zeroed(); len];
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunks_per_thread = len.div_ceil(RANDOM_CHUNK).div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        for (t, part) in values.chunks_mut(chunks_per_thread * RANDOM_CHUNK).enumerate() {
            scope.spawn(move || {
                for (c, chunk) in part.chunks_mut(RANDOM_CHUNK).enumerate() {
                    fill_normal(chunk, seed, (t * chunks_per_thread + c) as u64);
                }
            });
        }
    });
    values
}

/// splitmix64 seeded from (seed, stream), through Box–Muller.
fn fill_normal<T: HostElement>(values: &mut [T], seed: u64, stream: u64) {
    let mut state = seed ^ stream.wrapping_mul(0xd1b5_4a32_d192_ed03);
    let mut uniform = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    };
    for value in values {
        let (u1, u2) = (1.0 - uniform(), uniform());
        *value = T::from_f64((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_accepts_rounding_and_rejects_errors() {
        let want = [1.0, -2.0, 3.0];
        assert!(compare(DType::Bf16, &[1.0 + 2f64.powi(-8), -2.0, 3.0], &want).is_ok());
        assert!(compare(DType::Bf16, &[1.02, -2.0, 3.0], &want).is_err(), "beyond one bf16 unit");
        assert!(compare(DType::F32, &[f64::NAN, -2.0, 3.0], &want).is_err(), "NaN poison");
        assert!(compare(DType::F32, &[1.0 + 1e-4, -2.0, 3.0], &want).is_err());
        // f16 subnormals are 2^−24 apart: values of ~1e−6 round by up to 3 %, and no further.
        let tiny: Vec<f64> = (0..1000).map(|i| 1e-6 + i as f64 * 1e-9).collect();
        let rounded: Vec<f64> = tiny.iter().map(|&w| (w * 2f64.powi(24)).round() / 2f64.powi(24)).collect();
        assert!(compare(DType::F16, &rounded, &tiny).is_ok());
        let off_by_a_step: Vec<f64> = rounded.iter().map(|&g| g + 2f64.powi(-24)).collect();
        assert!(compare(DType::F16, &off_by_a_step, &tiny).is_err(), "a whole subnormal step off");
    }

    #[test]
    fn random_normal_looks_normal_and_depends_on_seed() {
        let a: Vec<f32> = random_normal(100_000, 1);
        let mean = a.iter().map(|&v| v as f64).sum::<f64>() / a.len() as f64;
        let var = a.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / a.len() as f64;
        assert!(mean.abs() < 0.02 && (var - 1.0).abs() < 0.02, "mean {mean}, var {var}");
        assert_ne!(a[..8], random_normal::<f32>(8, 2)[..]);
    }
}
