//! The rope family's test cases: the scalar variants every rope op runs with, the cache ops' narrow tables.

use super::*;

/// The scalars each rope case runs with (the CPU and GPU tests'): the defaults; interleaved; half the head rotated (NeoX
/// and interleaved) where that is even; another scale and base. The cache ops (`head_size`,
/// `is_neox`; their table sets the rotary dimension, see [`run_case_with_table`]): NeoX and
/// interleaved.
pub fn rope_scalar_variants(op: &OpInfo, case: &Case) -> Vec<Vec<Scalar>> {
    let defaults = op.examples(case.rows, case.hidden);
    let with = |changes: &[(&str, Scalar)]| {
        let mut scalars = defaults.clone();
        for &(name, value) in changes {
            let i = op.scalars.iter().position(|s| s.name == name).expect("a scalar of the rope ops");
            scalars[i] = value;
        }
        scalars
    };
    if op.scalars.iter().any(|s| s.name == "is_neox") {
        return vec![defaults.clone(), with(&[("is_neox", Scalar::Bool(false))])];
    }
    let interleaved = ("interleave", Scalar::Bool(true));
    let mut variants = vec![
        defaults.clone(),
        with(&[interleaved]),
        with(&[("rope_scale", Scalar::F32(2.5)), ("rope_theta", Scalar::F32(5e5))]),
    ];
    let half = case.hidden / 2;
    if half >= 2 && half.is_multiple_of(2) {
        let half = ("rotary_dim", Scalar::U32(half as u32));
        variants.extend([with(&[half]), with(&[half, interleaved])]);
    }
    variants
}

/// [`run_case_with_table`] for every cache op, dtype and rope scalar variant of `cases`, with
/// tables of half the head (where even) and of one pair, their rows `case.pad + 1` elements
/// apart beyond their width (odd: off 16-byte boundaries where the case is strided).
pub fn run_narrow_tables(runner: &impl Runner, seed: u64, cases: &[Case]) {
    use ferrinfer_launch::{apply_rope_with_cos_sin_cache, apply_rope_with_cos_sin_cache_inplace};
    let ops = [&apply_rope_with_cos_sin_cache::INFO, &apply_rope_with_cos_sin_cache_inplace::INFO];
    let mut failures = Vec::new();
    for (i, (op, case)) in ops.into_iter().flat_map(|op| cases.iter().map(move |c| (op, c))).enumerate() {
        let widths = [case.hidden / 2, 2].into_iter().filter(|&w| w >= 2 && w % 2 == 0 && w < case.hidden);
        for (width, dtype) in widths.flat_map(|w| DType::ALL.into_iter().map(move |d| (w, d))) {
            for scalars in rope_scalar_variants(op, case) {
                let pad = if case.pad > 0 { case.pad + 1 } else { 0 };
                let run = run_case_with_table(runner, op, dtype, case, seed + i as u64, (&scalars, width, pad));
                failures.extend(run.err());
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
