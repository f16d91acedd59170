//! The peeled norm kernels (rows off 16-byte boundaries read in 16-byte vectors past a per-row
//! head) forced onto every call of this process with `FERRINFER_NORM_LAYOUT=*:*:*:*:1`, so that
//! few rows — which the planner reads narrow — run through them too: heads of every length
//! (odd widths, 2-mod-4 widths for the fused ops), sub-warp to multi-warp groups, long rows,
//! strided rows and odd strides (each group its own head). Where a call cannot be peeled (rmsnorm's
//! 4-byte vectors, rows under 32 vectors, rows aligned anyway) the planner reads it as before and
//! the case checks that path instead. The variable is read once per process: hence a test binary
//! of its own. Without a CUDA driver or device every test prints that it was skipped and passes
//! (CI has no GPU).

mod support;

use support::{Case, Gpu, family, force_env, run_cases};

fn force_peeled_rows() {
    force_env("FERRINFER_NORM_LAYOUT", "*:*:*:*:1");
}

#[test]
fn norm_peeled_gpu_layouts() {
    force_peeled_rows();
    let Some(gpu) = Gpu::get("norm_peeled_gpu_layouts") else { return };
    let mut cases = Vec::new();
    for hidden in [257, 333, 1001, 1002, 2049, 4094, 4095, 5001, 12287, 16383] {
        cases.extend([Case::contiguous(1, hidden), Case::contiguous(7, hidden), Case::strided(2500, hidden)]);
    }
    cases.extend([Case { rows: 33, hidden: 4096, pad: 1 }, Case { rows: 999, hidden: 3001, pad: 3 }]);
    run_cases(&gpu, &family("norm"), 9_900_000, &cases);
}

/// Small enough for compute-sanitizer (what `suite.sh memcheck|racecheck` run here).
#[test]
fn norm_peeled_gpu_sanitizer() {
    force_peeled_rows();
    let Some(gpu) = Gpu::get("norm_peeled_gpu_sanitizer") else { return };
    let cases = [
        Case::contiguous(3, 1001),
        Case::strided(40, 4095),
        Case::contiguous(9, 4094),
        Case::strided(17, 12287),
        Case { rows: 33, hidden: 1024, pad: 1 },
    ];
    run_cases(&gpu, &family("norm"), 9_950_000, &cases);
}
