//! The activation family on a CUDA GPU through the public API: every op and dtype over a grid of
//! widths (FlashInfer's benchmark widths among them) and rows, every kernel path at
//! sanitizer-friendly sizes, and more than 2^31 input elements. Without a CUDA driver or device
//! every test prints that it was skipped and passes (CI has no GPU).

mod support;

use ferrinfer_launch::DType;
use support::{Case, Gpu, Runner, family, run_cases};

#[test]
fn activation_gpu_grid() {
    let Some(gpu) = Gpu::get("activation_gpu_grid") else { return };
    let mut cases = Vec::new();
    for rows in [1, 19, 99, 989, 4096] {
        for width in [1, 7, 64, 111, 500, 1004, 4096, 11008, 14336] {
            cases.extend([Case::contiguous(rows, width), Case::strided(rows, width)]);
        }
    }
    run_cases(&gpu, &family("activation"), 3_000_000, &cases);
}

#[test]
fn activation_gpu_sanitizer_every_kernel_path() {
    let Some(gpu) = Gpu::get("activation_gpu_sanitizer_every_kernel_path") else { return };
    run_cases(&gpu, &family("activation"), 7_500_000, &support::sanitizer_cases());
}

/// More than 2^31 input elements: every offset must be 64-bit. Checked on slices of rows, on all
/// cores.
#[test]
fn activation_gpu_over_2_pow_31_elements() {
    let Some(gpu) = Gpu::get("activation_gpu_over_2_pow_31_elements") else { return };
    let case = Case::contiguous(75_000, 14336);
    assert!(case.rows * 2 * case.hidden > 1 << 31);
    let op = &ferrinfer_launch::silu_and_mul::INFO;
    let before = support::buffers(op, DType::Bf16, false, &case, 51);
    let mut after = before.clone();
    gpu.run(op, &mut after, &[]).unwrap();
    let failures = support::check_in_slices(op, DType::Bf16, &case, &before, &after, &[], 1000);
    assert!(failures.is_empty(), "{failures:?}");
}
