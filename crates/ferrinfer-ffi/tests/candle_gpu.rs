//! The candle adapter on CUDA tensors (feature `candle-cuda`): every op in every dtype on candle
//! CUDA tensors — contiguous, 3-D, and narrowed views with a start offset and a row stride —
//! against ferrinfer's f64 reference; in place on views; candle-nn's
//! fused CUDA rms_norm against ours; errors, mixed devices included. Without a CUDA driver or
//! device every test prints that it was SKIPPED, and why, and passes.
#![cfg(feature = "candle-cuda")]

mod candle_common;

use std::io::Write;

use candle_common::{EPS, Elem, check_op, dtype, error_of, rms_reference, tensor_on, values, within_two_units};
use candle_core::{DType as CandleDType, Device, IndexOp, Tensor};
use ferrinfer_ffi::candle::{self as fc, Op};
use ferrinfer_launch::reference;
use ferrinfer_launch::{DType, cuda_device_count, rmsnorm};
use half::{bf16, f16};

/// candle's CUDA device 0, or `None` after saying why the test is skipped.
fn gpu(test: &str) -> Option<Device> {
    if cuda_device_count() == 0 {
        // Straight to stderr, past libtest's capture, so a CI log shows every skip.
        let _ = writeln!(std::io::stderr(), "{test}: SKIPPED — no CUDA driver or device on this machine");
        return None;
    }
    Some(Device::new_cuda(0).expect("candle CUDA device 0"))
}

fn every_op<T: Elem>(gpu: &Device, seed: u64) {
    // Rope's heads and positions, the page family's page tables and decode's caches are not made here: their
    // adapter paths have tests of their own below.
    for (i, op) in ferrinfer_launch::ops().filter(|op| !matches!(op.family, "rope" | "page" | "decode")).enumerate() {
        let seed = seed + 100 * i as u64;
        check_op::<T, T>(gpu, op, &[989, 4096], false, seed);
        check_op::<T, T>(gpu, op, &[7, 8, 128], false, seed + 10); // tokens × heads × head_dim
        check_op::<T, T>(gpu, op, &[99, 3584], true, seed + 20);
        check_op::<T, T>(gpu, op, &[19, 8192], true, seed + 30);
        check_op::<T, T>(gpu, op, &[1, 16384], false, seed + 40);
        check_op::<T, f32>(gpu, op, &[99, 1024], true, seed + 50);
    }
}

#[test]
fn candle_gpu_every_op_matches_the_reference() {
    let Some(gpu) = gpu("candle_gpu_every_op_matches_the_reference") else { return };
    every_op::<f32>(&gpu, 1);
    every_op::<f16>(&gpu, 10_000);
    every_op::<bf16>(&gpu, 20_000);
}

fn op(name: &str) -> Op {
    Op::new(name, &[ferrinfer_launch::Scalar::F32(EPS)]).unwrap()
}

/// In place on a narrowed CUDA view (start offset, row stride): the view is normalised exactly as
/// the new-tensor form would, and nothing else of the tensor changes.
#[test]
fn candle_gpu_in_place_on_a_narrowed_view() {
    let Some(gpu) = gpu("candle_gpu_in_place_on_a_narrowed_view") else { return };
    let (w, b) = (tensor_on::<bf16>(&gpu, &[1024], false, 31), tensor_on::<bf16>(&gpu, &[1024], false, 32));
    // Each op twice: in place, and as a new tensor (the expected result).
    type InPlace<'a> = &'a dyn Fn(&Tensor) -> candle_core::Result<()>;
    type New<'a> = &'a dyn Fn(&Tensor) -> candle_core::Result<Tensor>;
    let ops: [(&str, InPlace, New); 3] = [
        ("rmsnorm", &|x| x.inplace_op2(&w, &op("rmsnorm")), &|x| fc::rmsnorm(x, &w, EPS)),
        ("gemma_rmsnorm", &|x| x.inplace_op2(&w, &op("gemma_rmsnorm")), &|x| fc::gemma_rmsnorm(x, &w, EPS)),
        ("layernorm", &|x| x.inplace_op3(&w, &b, &op("layernorm")), &|x| fc::layernorm(x, &w, &b, EPS)),
    ];
    for (i, (name, op, new)) in ops.into_iter().enumerate() {
        let base = tensor_on::<bf16>(&gpu, &[65, 1030], false, 40 + i as u64);
        let view = base.i((1.., 3..1027)).unwrap();
        assert_eq!(view.layout().start_offset(), 1033);
        let want = new(&view);
        let (want, before) = (values(&want.unwrap()), values(&base));
        op(&view).unwrap();
        assert_eq!(values(&view), want, "{name} in place");
        let after = values(&base);
        let outside = |v: &[f64]| -> Vec<f64> {
            let rows = v.chunks(1030).enumerate();
            rows.flat_map(|(r, row)| row.iter().enumerate().filter(move |(c, _)| r == 0 || *c < 3 || *c >= 1027))
                .map(|(_, v)| *v)
                .collect()
        };
        assert_eq!(outside(&after), outside(&before), "{name}: written outside the view");
    }
}

/// candle-nn's rms_norm runs candle's own fused CUDA kernel: ours agrees with it to two units of
/// the dtype's rounding, and with the reference to one.
#[test]
fn candle_gpu_rmsnorm_agrees_with_candle_nn() {
    let Some(gpu) = gpu("candle_gpu_rmsnorm_agrees_with_candle_nn") else { return };
    fn agree<T: Elem>(gpu: &Device, seed: u64) {
        for (rows, hidden) in [(1, 4096), (128, 4096), (1024, 8192)] {
            let x = tensor_on::<T>(gpu, &[rows, hidden], false, seed);
            let w = tensor_on::<T>(gpu, &[hidden], false, seed + 1);
            let want = rms_reference(&values(&x), &values(&w), hidden);
            let ours = values(&fc::rmsnorm(&x, &w, EPS).unwrap());
            let theirs = values(&candle_nn::ops::rms_norm(&x, &w, EPS).unwrap());
            reference::compare(dtype::<T>(), &ours, &want).unwrap_or_else(|e| panic!("{:?}: {e}", dtype::<T>()));
            within_two_units::<T>(&format!("ours vs candle-nn {rows}x{hidden}"), &ours, &theirs, &want);
        }
    }
    agree::<f32>(&gpu, 50);
    agree::<f16>(&gpu, 60);
    agree::<bf16>(&gpu, 70);
}

#[test]
fn candle_gpu_errors_name_the_argument_and_write_nothing() {
    let Some(gpu) = gpu("candle_gpu_errors_name_the_argument_and_write_nothing") else { return };
    let (x, r) = (tensor_on::<bf16>(&gpu, &[4, 256], false, 80), tensor_on::<bf16>(&gpu, &[4, 256], false, 81));
    let w = tensor_on::<bf16>(&gpu, &[256], false, 82);
    let before = (values(&x), values(&r));
    let err = error_of(fc::rmsnorm(&x, &w.to_dtype(CandleDType::F16).unwrap(), EPS));
    assert!(err.contains("`weight` has dtype f16; expected bf16"), "{err}");
    let err = error_of(x.inplace_op2(&w.i(..8).unwrap(), &op("rmsnorm")));
    assert!(err.contains("`weight` has shape [8]"), "{err}");
    let err = error_of(fc::fused_add_rmsnorm(&x, &r, &w.i(..8).unwrap(), EPS));
    assert!(err.contains("`weight` has shape [8]"), "{err}");
    let err = error_of(fc::fused_add_rmsnorm(&x, &x.i(..).unwrap(), &w, EPS));
    assert!(err.contains("`residual`: unsupported layout: shares its candle storage with `input`"), "{err}");
    // Mixed devices: the fused helpers lock their tensors in two candle ops; whichever check
    // meets the mismatch first (candle's, when the weight is locked with the other device's
    // tensor; ours otherwise) refuses it.
    let mismatch = |err: &str| err.contains("device mismatch") || err.contains("`residual` is on");
    let cpu_r = r.to_device(&Device::Cpu).unwrap();
    let err = error_of(fc::fused_add_rmsnorm(&x, &cpu_r, &w, EPS));
    assert!(mismatch(&err), "{err}");
    let cpu_x = x.to_device(&Device::Cpu).unwrap();
    let err = error_of(fc::fused_add_rmsnorm(&cpu_x, &r, &w.to_device(&Device::Cpu).unwrap(), EPS));
    assert!(mismatch(&err), "{err}");
    assert_eq!((values(&x), values(&r)), before);
    assert_eq!(values(&cpu_x), before.0);
}
