//! The norm family through the public API on the CPU backend: the correctness grid for every op
//! and dtype, and every validation error (each names its argument and leaves `out` untouched).

mod support;

use ferrinfer_launch::reference::{compare, random_normal, to_f64};
use ferrinfer_launch::{DType, Device, Error, Scalar, Stream, TensorView, gemma_rmsnorm, layernorm, rmsnorm};
use half::bf16;
use support::{Cpu, family, run_cases};

#[test]
fn norm_cpu_grid() {
    run_cases(&Cpu, &family("norm"), 1000, &support::grid());
}

/// The GPU sanitizer's cases on the CPU backend, so a case that is wrong in itself fails here,
/// not first under compute-sanitizer.
#[test]
fn norm_cpu_sanitizer_cases() {
    run_cases(&Cpu, &family("norm"), 7_000_000, &support::sanitizer_cases());
}

/// rmsnorm's result in f64, through the op's own reference.
fn rms_reference(x: &[f64], w: &[f64], hidden: usize) -> Vec<f64> {
    rmsnorm::INFO
        .reference_of(DType::F32, hidden, &[x.to_vec(), w.to_vec(), Vec::new()], &[Scalar::F32(1e-6)])
        .remove(0)
}

#[test]
fn norm_references_of_known_rows() {
    // mean(x²) = (9 + 16) / 2 = 12.5 → 1/√12.5; Gemma scales by 1 + w.
    let inv = 1.0 / (12.5f64 + 1e-6).sqrt();
    let tensors = [vec![3.0, 4.0], vec![1.0, 2.0], Vec::new()];
    assert_eq!(rmsnorm::INFO.reference_of(DType::F32, 2, &tensors, &[Scalar::F32(1e-6)]), [vec![3.0 * inv, 8.0 * inv]]);
    assert_eq!(
        gemma_rmsnorm::INFO.reference_of(DType::F32, 2, &tensors, &[Scalar::F32(1e-6)]),
        [vec![6.0 * inv, 12.0 * inv]]
    );
    // mean 2, variance ((−1)² + 1²)/2 = 1.
    let tensors = [vec![1.0, 3.0], vec![2.0, 2.0], vec![0.5, 0.5], Vec::new()];
    assert_eq!(layernorm::INFO.reference_of(DType::F32, 2, &tensors, &[Scalar::F32(0.0)]), [vec![-1.5, 2.5]]);
    // The fused op's new residual is the sum rounded to the dtype: 1 + 2^-9 is 1 in bf16.
    let tensors = [vec![1.0], vec![1.0 / 512.0], vec![1.0]];
    assert_eq!(
        ferrinfer_launch::fused_add_rmsnorm::INFO.reference_of(DType::Bf16, 1, &tensors, &[Scalar::F32(0.0)])[1],
        [1.0]
    );
}

#[test]
fn norm_cpu_three_dims_normalise_the_last() {
    // tokens × heads × head_dim, as QK-norm uses it.
    let (tokens, heads, dim) = (5, 4, 128);
    let x: Vec<f32> = random_normal(tokens * heads * dim, 1);
    let w: Vec<f32> = random_normal(dim, 2);
    let mut out = vec![f32::NAN; x.len()];
    let xv = TensorView::from_slice(&x, &[tokens, heads, dim]).unwrap();
    let wv = TensorView::from_slice(&w, &[dim]).unwrap();
    let mut ov = TensorView::from_slice_mut(&mut out, &[tokens, heads, dim]).unwrap();
    rmsnorm(&xv, &wv, &mut ov, 1e-6, Stream::Cpu).unwrap();
    compare(DType::F32, &to_f64(&out), &rms_reference(&to_f64(&x), &to_f64(&w), dim)).unwrap();
}

#[test]
fn norm_cpu_in_place_on_the_identical_view() {
    let x: Vec<bf16> = random_normal(3 * 64, 5);
    let w: Vec<bf16> = random_normal(64, 6);
    let mut data = x.clone();
    let view = unsafe {
        TensorView::from_raw_parts(data.as_mut_ptr().cast(), 0, DType::Bf16, &[3, 64], &[64, 1], Device::Cpu).unwrap()
    };
    let wv = TensorView::from_slice(&w, &[64]).unwrap();
    rmsnorm(&view, &wv, &mut view.clone(), 1e-6, Stream::Cpu).unwrap();
    compare(DType::Bf16, &to_f64(&data), &rms_reference(&to_f64(&x), &to_f64(&w), 64)).unwrap();
}

#[test]
fn norm_cpu_misaligned_for_vectors_still_runs_narrower() {
    // Offsetting by one element leaves only element alignment: the vector width falls to 1.
    let x: Vec<f32> = random_normal(4 * 256 + 1, 7);
    let w: Vec<f32> = random_normal(256, 8);
    let mut out = vec![f32::NAN; 4 * 256 + 1];
    let xv = TensorView::from_slice(&x[1..], &[4, 256]).unwrap();
    let wv = TensorView::from_slice(&w, &[256]).unwrap();
    let mut ov = TensorView::from_slice_mut(&mut out[1..], &[4, 256]).unwrap();
    rmsnorm(&xv, &wv, &mut ov, 1e-6, Stream::Cpu).unwrap();
    compare(DType::F32, &to_f64(&out[1..]), &rms_reference(&to_f64(&x[1..]), &to_f64(&w), 256)).unwrap();
}

#[test]
fn norm_cpu_empty_batches_are_no_work_and_empty_rows_an_error() {
    let w: Vec<f32> = random_normal(16, 3);
    let wv = TensorView::from_slice(&w, &[16]).unwrap();
    let (x, mut out) = (Vec::<f32>::new(), Vec::<f32>::new());
    let xv = TensorView::from_slice(&x, &[0, 16]).unwrap();
    rmsnorm(&xv, &wv, &mut TensorView::from_slice_mut(&mut out, &[0, 16]).unwrap(), 1e-6, Stream::Cpu).unwrap();
    let empty = TensorView::from_slice(&x, &[4, 0]).unwrap();
    let (w0, mut o0) = (Vec::<f32>::new(), Vec::<f32>::new());
    let w0v = TensorView::from_slice(&w0, &[0]).unwrap();
    let err = rmsnorm(&empty, &w0v, &mut TensorView::from_slice_mut(&mut o0, &[4, 0]).unwrap(), 1e-6, Stream::Cpu);
    assert!(matches!(&err, Err(Error::ShapeMismatch { argument: "input", .. })), "{err:?}");
    assert!(err.unwrap_err().to_string().contains("hidden size) of at least 1"));
    // Validation still runs: a wrong weight is an error even with no rows.
    let err = rmsnorm(&xv, &w0v, &mut TensorView::from_slice_mut(&mut out, &[0, 16]).unwrap(), 1e-6, Stream::Cpu);
    assert!(matches!(err, Err(Error::ShapeMismatch { argument: "weight", .. })), "{err:?}");
}

/// Calls rmsnorm with one thing wrong and checks the error and that `out` kept its poison.
fn expect_error(make_call: impl FnOnce(&mut [f32]) -> Result<(), Error>, check: impl FnOnce(&Error) -> bool) {
    let mut out = vec![f32::NAN; 64];
    let err = make_call(&mut out).expect_err("the call should fail");
    assert!(check(&err), "unexpected error: {err}");
    assert!(out.iter().all(|v| v.is_nan()), "out was written on the error path");
}

fn input_views<'a>(x: &'a [f32], w: &'a [f32]) -> (TensorView<'a>, TensorView<'a>) {
    (TensorView::from_slice(x, &[4, 16]).unwrap(), TensorView::from_slice(w, &[16]).unwrap())
}

fn out_view(out: &mut [f32]) -> TensorView<'_> {
    TensorView::from_slice_mut(out, &[4, 16]).unwrap()
}

#[test]
fn norm_errors_name_the_argument_and_leave_out_untouched() {
    let x: Vec<f32> = random_normal(64, 9);
    let w: Vec<f32> = random_normal(16, 10);
    let w_bf16: Vec<bf16> = random_normal(16, 11);
    let (xv, wv) = input_views(&x, &w);

    // dtype mismatch
    expect_error(
        |out| {
            let wv = TensorView::from_slice(&w_bf16, &[16]).unwrap();
            rmsnorm(&xv, &wv, &mut out_view(out), 1e-6, Stream::Cpu)
        },
        |e| matches!(e, Error::DTypeMismatch { argument: "weight", expected: DType::F32, found: DType::Bf16, .. }),
    );
    // weight shape mismatch
    expect_error(
        |out| {
            let wv = TensorView::from_slice(&w[..8], &[8]).unwrap();
            rmsnorm(&xv, &wv, &mut out_view(out), 1e-6, Stream::Cpu)
        },
        |e| matches!(e, Error::ShapeMismatch { argument: "weight", .. }) && e.to_string().contains("[16]"),
    );
    // out shape mismatch
    expect_error(
        |out| rmsnorm(&xv, &wv, &mut TensorView::from_slice_mut(out, &[2, 32]).unwrap(), 1e-6, Stream::Cpu),
        |e| matches!(e, Error::ShapeMismatch { argument: "out", .. }),
    );
    // last dimension not contiguous
    expect_error(
        |out| {
            let xv = TensorView::from_slice_strided(&x, &[4, 16], &[1, 4]).unwrap();
            rmsnorm(&xv, &wv, &mut out_view(out), 1e-6, Stream::Cpu)
        },
        |e| matches!(e, Error::LastDimNotContiguous { argument: "input", stride: 4 }),
    );
    // misaligned below the element size (2 bytes into an f32 buffer)
    expect_error(
        |out| {
            let base = x.as_ptr() as *mut _;
            let xv = unsafe { TensorView::from_raw_parts(base, 2, DType::F32, &[4, 16], &[15, 1], Device::Cpu) };
            rmsnorm(&xv.unwrap(), &wv, &mut out_view(out), 1e-6, Stream::Cpu)
        },
        |e| matches!(e, Error::Misaligned { argument: "input", align: 4, .. }),
    );
    // device mismatch: a CUDA-tagged view among CPU ones
    expect_error(
        |out| {
            let wv =
                unsafe { TensorView::from_raw_parts(0x1000 as *mut _, 0, DType::F32, &[16], &[1], Device::Cuda(0)) };
            rmsnorm(&xv, &wv.unwrap(), &mut out_view(out), 1e-6, Stream::Cpu)
        },
        |e| {
            matches!(e, Error::DeviceMismatch { argument: "weight", expected: Device::Cpu, found: Device::Cuda(0), .. })
        },
    );
    // eps: negative, NaN, infinite
    for eps in [-1e-6, f32::NAN, f32::INFINITY] {
        expect_error(
            |out| rmsnorm(&xv, &wv, &mut out_view(out), eps, Stream::Cpu),
            |e| matches!(e, Error::InvalidScalar { argument: "eps", .. }) && e.to_string().starts_with("`eps`"),
        );
    }
    // read-only out
    expect_error(
        |out| rmsnorm(&xv, &wv, &mut TensorView::from_slice(out, &[4, 16]).unwrap(), 1e-6, Stream::Cpu),
        |e| matches!(e, Error::ReadOnly { argument: "out" }),
    );
}

#[test]
fn norm_errors_on_overlap() {
    let w: Vec<f32> = random_normal(16, 12);
    let mut buffer: Vec<f32> = random_normal(80, 13);
    let before = buffer.clone();
    let base = buffer.as_mut_ptr().cast();
    let view = |offset_elements: u64, shape: &[i64], strides: &[i64]| unsafe {
        TensorView::from_raw_parts(base, offset_elements * 4, DType::F32, shape, strides, Device::Cpu).unwrap()
    };
    // out overlapping weight
    let (x, weight_in_buffer) = (TensorView::from_slice(&w, &[1, 16]).unwrap(), view(0, &[16], &[1]));
    let err = rmsnorm(&x, &weight_in_buffer, &mut view(8, &[1, 16], &[16, 1]), 1e-6, Stream::Cpu).unwrap_err();
    assert!(matches!(err, Error::Overlap { argument: "out", other: "weight" }), "{err}");
    // out overlapping input, shifted by one row: not the identical view
    let wv = TensorView::from_slice(&w, &[16]).unwrap();
    let err =
        rmsnorm(&view(0, &[4, 16], &[16, 1]), &wv, &mut view(16, &[4, 16], &[16, 1]), 1e-6, Stream::Cpu).unwrap_err();
    assert!(matches!(err, Error::Overlap { argument: "out", other: "input" }), "{err}");
    assert_eq!(buffer, before, "nothing may be written on the error path");
}

#[test]
fn norm_errors_on_a_stream_of_another_device() {
    let fake = [0u8; 64];
    let xv = unsafe {
        TensorView::from_raw_parts(fake.as_ptr() as *mut _, 0, DType::F32, &[4, 4], &[4, 1], Device::Cuda(0))
    }
    .unwrap();
    let wv = unsafe { TensorView::from_raw_parts(fake.as_ptr() as *mut _, 0, DType::F32, &[4], &[1], Device::Cuda(0)) }
        .unwrap();
    let mut ov = unsafe {
        TensorView::from_raw_parts(fake.as_ptr() as *mut _, 0, DType::F32, &[4, 4], &[4, 1], Device::Cuda(0))
    }
    .unwrap();
    let err = rmsnorm(&xv, &wv, &mut ov, 1e-6, Stream::Cpu).unwrap_err();
    assert!(matches!(err, Error::DeviceMismatch { argument: "stream", found: Device::Cpu, .. }), "{err}");
}
