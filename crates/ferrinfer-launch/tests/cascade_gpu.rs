//! The cascade family on a CUDA GPU through the public API: every op and dtype over head
//! dimensions and row counts (past the grid's 65535 blocks too), `merge_states` of 1 to 9
//! states, every kernel path at sanitizer-friendly sizes, and more than 2^31 elements a state. Without a CUDA driver or
//! device every test prints that it was skipped and passes (CI has no GPU). The planner merges
//! two states in the widest vectors two vectors a lane only for some calls (rows of 32 vectors
//! or more, calls of 2^14 vectors or more); run the binary again with
//! `FERRINFER_CASCADE_LAYOUT=1` and `=2` to force those calls one way
//! (docs/perf/gpu-correctness.md).

mod support;

use ferrinfer_launch::DType;
use ferrinfer_launch::reference::{self, random_normal};
use support::{Case, Gpu, Runner, family, run_cases};

#[test]
fn cascade_gpu_grid() {
    let Some(gpu) = Gpu::get("cascade_gpu_grid") else { return };
    let mut cases = Vec::new();
    for rows in [1, 19, 99, 989, 4096] {
        for width in [1, 7, 64, 128, 256, 500, 11008] {
            cases.extend([Case::contiguous(rows, width), Case::strided(rows, width)]);
        }
    }
    // The seq 2048 × 32 heads, and more rows than 65535 blocks of 8 hold. (Eight cases
    // run at once with their f64 references: 65536 rows of 11008 ran the GPU machine's 128 GiB
    // out of memory.)
    cases.extend([Case::contiguous(32 * 2048, 128), Case::strided(32 * 2048, 256), Case::contiguous(600_000, 128)]);
    run_cases(&gpu, &family("cascade"), 3_100_000, &cases);
}

#[test]
fn cascade_gpu_sanitizer_every_kernel_path() {
    let Some(gpu) = Gpu::get("cascade_gpu_sanitizer_every_kernel_path") else { return };
    run_cases(&gpu, &family("cascade"), 7_600_000, &support::sanitizer_cases());
}

/// More than 2^31 elements a state: every offset must be 64-bit. Checked on slices of rows, on
/// all cores.
#[test]
fn cascade_gpu_over_2_pow_31_elements() {
    let Some(gpu) = Gpu::get("cascade_gpu_over_2_pow_31_elements") else { return };
    let case = Case::contiguous(16_800_000, 128);
    assert!(case.rows * case.hidden > 1 << 31);
    let op = &ferrinfer_launch::merge_state::INFO;
    let before = support::buffers(op, DType::Bf16, false, &case, 52);
    let mut after = before.clone();
    gpu.run(op, &mut after, &[]).unwrap();
    let failures = support::check_in_slices(op, DType::Bf16, &case, &before, &after, &[], 100_000);
    assert!(failures.is_empty(), "{failures:?}");
}

/// `merge_states` of 1 to 9 states (the any-count entry's steps of four: one, a partial one,
/// several with the sums rescaled between) against the f64 merge; empty partitions (−∞) in some.
#[test]
fn cascade_gpu_merge_states_of_any_count() {
    let Some(gpu) = Gpu::get("cascade_gpu_merge_states_of_any_count") else { return };
    // One head and three: two states take the two-state entry's walk of one head, then its walk
    // dividing by the heads.
    for heads in [1usize, 3] {
        merge_states_against_f64(&gpu, heads);
    }
}

/// `merge_states` of 1 to 9 states of `[37, states, heads, 64]` f32 against the f64 merge.
fn merge_states_against_f64(gpu: &Gpu, heads: usize) {
    let op = &ferrinfer_launch::merge_states::INFO;
    let (seq, width) = (37usize, 64usize);
    for states in 1..=9usize {
        let v: Vec<f32> = random_normal(seq * states * heads * width, 40 + states as u64);
        let mut s: Vec<f32> =
            random_normal::<f32>(seq * states * heads, 50 + states as u64).iter().map(|x| x * 6.0).collect();
        s.iter_mut().step_by(7).for_each(|x| *x = f32::NEG_INFINITY);
        let mut buffers = vec![
            support::buffer_of(&v, &[seq, states, heads, width]),
            support::buffer_of(&s, &[seq, states, heads]),
            support::buffer_of(&vec![f32::NAN; seq * heads * width], &[seq, heads, width]),
            support::buffer_of(&vec![f32::NAN; seq * heads], &[seq, heads]),
        ];
        gpu.run(op, &mut buffers, &[]).unwrap();
        let (mut want_v, mut want_s) = (Vec::new(), Vec::new());
        for row in 0..seq * heads {
            let (i, h) = (row / heads, row % heads);
            let score = |k: usize| s[(i * states + k) * heads + h] as f64;
            let m = (0..states).map(score).fold(f64::NEG_INFINITY, f64::max);
            let base = if m == f64::NEG_INFINITY { 0.0 } else { m };
            let w: Vec<f64> = (0..states).map(|k| (score(k) - base).exp2()).collect();
            let total: f64 = w.iter().sum();
            for d in 0..width {
                let value = |k: usize| v[((i * states + k) * heads + h) * width + d] as f64;
                let sum: f64 = (0..states).map(|k| w[k] * value(k)).sum();
                want_v.push(if total > 0.0 { sum / total } else { 0.0 });
            }
            want_s.push(if total > 0.0 { total.log2() + base } else { f64::NEG_INFINITY });
        }
        let context = |what: &str, e: String| format!("{states} states, {heads} heads, `{what}`: {e}");
        reference::compare(DType::F32, &buffers[2].values(), &want_v).map_err(|e| context("v_merged", e)).unwrap();
        reference::compare(DType::F32, &buffers[3].values(), &want_s).map_err(|e| context("s_merged", e)).unwrap();
    }
}
