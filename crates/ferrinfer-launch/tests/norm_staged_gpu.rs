//! The staged norm kernel (sm_90: rows copied ahead into shared memory) forced onto every call of
//! this process with `FERRINFER_NORM_LAYOUT=*:*:7:2` (two stages, 7 rows a block), so that few
//! rows, rows that wrap the ring several times, a block's last rows past the tensor's end,
//! strided rows, partial chunks and the fused ops' two-tensor slots all run through
//! it; where it cannot hold a row (narrow vectors, rows too short or too long) the planner falls
//! back, and the case checks that path instead. The variable is read once per process: hence a
//! test binary of its own. Without a CUDA driver or device every test prints that it was skipped
//! and passes (CI has no GPU).

mod support;

use support::{Case, Gpu, family, force_env, run_cases};

/// Two stages and 7 rows a block: a block wraps its ring after two rows, so the cases below reuse
/// every slot (and flip every mbarrier's phase) three times, and most tensors end inside a block.
fn force_staged_layout() {
    force_env("FERRINFER_NORM_LAYOUT", "*:*:7:2");
}

#[test]
fn norm_staged_gpu_grid() {
    force_staged_layout();
    let Some(gpu) = Gpu::get("norm_staged_gpu_grid") else { return };
    let mut cases = Vec::new();
    for hidden in [1000, 1032, 3000, 4104, 5120, 8192, 16384] {
        cases.extend([Case::contiguous(1, hidden), Case::contiguous(7, hidden), Case::strided(3000, hidden)]);
    }
    cases.push(Case::contiguous(20_000, 4096));
    run_cases(&gpu, &family("norm"), 9_000_000, &cases);
}

/// Small enough for compute-sanitizer (what `suite.sh memcheck|racecheck` run here), still
/// wrapping the ring: 2113 rows over at most a few hundred blocks.
#[test]
fn norm_staged_gpu_sanitizer() {
    force_staged_layout();
    let Some(gpu) = Gpu::get("norm_staged_gpu_sanitizer") else { return };
    let cases = [
        Case::contiguous(3, 1024),
        Case::strided(40, 4104),
        Case::strided(40, 5120),
        Case::contiguous(2113, 1024),
        Case::strided(2113, 4096),
    ];
    run_cases(&gpu, &family("norm"), 9_500_000, &cases);
}

/// What compute-sanitizer's racecheck can finish with the staged kernel on (it instruments every
/// shared-memory access, the copies' barrier waits included: `norm_staged_gpu_sanitizer` ran
/// past 540 s under it, docs/perf/gpu-correctness.md): one block wrapping its two-stage ring
/// (3 and 9 rows, 7 a block), a partial chunk, the fused ops' two-tensor slots.
#[test]
fn norm_staged_gpu_racecheck() {
    force_staged_layout();
    let Some(gpu) = Gpu::get("norm_staged_gpu_racecheck") else { return };
    run_cases(&gpu, &family("norm"), 9_700_000, &[Case::contiguous(3, 1024), Case::strided(9, 4104)]);
}
