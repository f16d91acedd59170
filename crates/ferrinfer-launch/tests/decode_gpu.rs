//! The decode family on a CUDA GPU through the public API: both ops, every dtype and index type,
//! head_dim 64, 128 and 256, with each scalar variant (RoPE, soft cap, windows, scales), batches
//! of requests of 0 to 79 keys in one or several work items (the merge), and longer single
//! decodes; small cases for the sanitizers. Without a CUDA driver or device every test prints
//! that it was skipped and passes (CI has no GPU).

mod support;

use support::decode::{HEAD_DIMS, variants};
use support::{Case, Gpu, family, run_cases_with};

#[test]
fn decode_gpu_grid() {
    let Some(gpu) = Gpu::get("decode_gpu_grid") else { return };
    let mut cases = Vec::new();
    for rows in [1, 3, 9, 17, 64, 300] {
        for head_dim in HEAD_DIMS {
            cases.extend([Case::contiguous(rows, head_dim), Case::strided(rows, head_dim)]);
        }
    }
    // A single decode's keys are its rows: 1000 and 4097 keys a head.
    cases.extend([Case::contiguous(1000, 128), Case::strided(4097, 64)]);
    run_cases_with(&gpu, &family("decode"), 6_100_000, &cases, &variants);
}

#[test]
fn decode_gpu_sanitizer_every_kernel_path() {
    let Some(gpu) = Gpu::get("decode_gpu_sanitizer_every_kernel_path") else { return };
    let cases: Vec<Case> = HEAD_DIMS.into_iter().flat_map(|d| [Case::contiguous(9, d), Case::strided(3, d)]).collect();
    run_cases_with(&gpu, &family("decode"), 6_200_000, &cases, &variants);
}
