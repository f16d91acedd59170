//! The activation family through the public API on the CPU backend: every op and dtype against
//! its f64 reference over odd and even widths, strided rows; the validation errors (each names
//! its argument and leaves `out` untouched).

mod support;

use ferrinfer_launch::reference::random_normal;
use ferrinfer_launch::{DType, Error, Stream, TensorView, silu_and_mul};
use support::{Case, Cpu, assert_refused, family, run_cases};

/// Widths from one element to a large model's, odd ones too (narrow vectors).
fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for rows in [1, 19, 99] {
        for width in [1, 7, 64, 111, 500, 1004, 4096, 11008] {
            cases.extend([Case::contiguous(rows, width), Case::strided(rows, width)]);
        }
    }
    cases
}

#[test]
fn activation_cpu_grid() {
    run_cases(&Cpu, &family("activation"), 2000, &cases());
}

/// The GPU sanitizer's cases on the CPU backend.
#[test]
fn activation_cpu_sanitizer_cases() {
    run_cases(&Cpu, &family("activation"), 7_500_000, &support::sanitizer_cases());
}

#[test]
fn activation_errors_name_the_argument_and_leave_out_untouched() {
    let x: Vec<f32> = random_normal(4 * 64, 1);
    let xv = TensorView::from_slice(&x, &[4, 64]).unwrap();
    let mut out = vec![f32::NAN; 4 * 64];
    let wrong_width = silu_and_mul(&xv, &mut TensorView::from_slice_mut(&mut out, &[4, 64]).unwrap(), Stream::Cpu);
    assert_refused(wrong_width, &out, &|e| {
        matches!(e, Error::ShapeMismatch { argument: "out", .. }) && e.to_string().contains("[4, 32]")
    });
    let odd: Vec<f32> = random_normal(4 * 63, 2);
    let oddv = TensorView::from_slice(&odd, &[4, 63]).unwrap();
    let result =
        silu_and_mul(&oddv, &mut TensorView::from_slice_mut(&mut out[..4 * 31], &[4, 31]).unwrap(), Stream::Cpu);
    assert_refused(result, &out, &|e| {
        matches!(e, Error::ShapeMismatch { argument: "input", .. }) && e.to_string().contains("2·d")
    });
    let mut half_out = vec![half::bf16::NAN; 4 * 32];
    let error =
        silu_and_mul(&xv, &mut TensorView::from_slice_mut(&mut half_out, &[4, 32]).unwrap(), Stream::Cpu).unwrap_err();
    assert!(
        matches!(error, Error::DTypeMismatch { argument: "out", expected: DType::F32, found: DType::Bf16, .. }),
        "{error}"
    );
    // In place is refused: the output would overwrite `up` values not yet read.
    let mut data: Vec<f32> = random_normal(4 * 64, 3);
    let before = data.clone();
    let view = unsafe {
        TensorView::from_raw_parts(
            data.as_mut_ptr().cast(),
            0,
            DType::F32,
            &[4, 64],
            &[64, 1],
            ferrinfer_launch::Device::Cpu,
        )
    }
    .unwrap();
    let mut in_place = unsafe {
        TensorView::from_raw_parts(
            data.as_mut_ptr().cast(),
            0,
            DType::F32,
            &[4, 32],
            &[64, 1],
            ferrinfer_launch::Device::Cpu,
        )
    }
    .unwrap();
    let error = silu_and_mul(&view, &mut in_place, Stream::Cpu).unwrap_err();
    assert!(matches!(error, Error::Overlap { argument: "out", other: "input" }), "{error}");
    assert_eq!(data, before);
}

#[test]
fn activation_empty_batches_are_no_work_and_empty_rows_an_error() {
    let (x, mut out) = (Vec::<f32>::new(), Vec::<f32>::new());
    let xv = TensorView::from_slice(&x, &[0, 64]).unwrap();
    silu_and_mul(&xv, &mut TensorView::from_slice_mut(&mut out, &[0, 32]).unwrap(), Stream::Cpu).unwrap();
    let empty = TensorView::from_slice(&x, &[3, 0]).unwrap();
    let err = silu_and_mul(&empty, &mut TensorView::from_slice_mut(&mut out, &[3, 0]).unwrap(), Stream::Cpu);
    assert!(matches!(err, Err(Error::ShapeMismatch { argument: "input", .. })), "{err:?}");
}

/// Far in either tail the gates are exact: `gelu(x)` is 0 for large negative x (erf is −1 there
/// in f32; the rational approximation's residue once gave −4 at −1e8), `x` for large positive.
#[test]
fn activation_gates_saturate_exactly_in_the_tails() {
    use ferrinfer_launch::{gelu_and_mul, gelu_tanh_and_mul};
    for op in [gelu_and_mul, gelu_tanh_and_mul, silu_and_mul] {
        let x = [-1e8f32, -1e4, -200.0, 1e4, 1.0, 1.0, 1.0, 1.0];
        let mut out = [f32::NAN; 4];
        let xv = TensorView::from_slice(&x, &[1, 8]).unwrap();
        op(&xv, &mut TensorView::from_slice_mut(&mut out, &[1, 4]).unwrap(), Stream::Cpu).unwrap();
        assert_eq!(out, [0.0, 0.0, 0.0, 1e4], "{out:?}");
    }
}
