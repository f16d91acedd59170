//! What the candle tests share (tests/candle.rs on the CPU, tests/candle_gpu.rs on CUDA): inputs,
//! the ops through the adapter's helpers, and their f64 references.
#![allow(dead_code)] // each test binary uses a part

use candle_core::{DType as CandleDType, Device, IndexOp, Tensor, WithDType};
use ferrinfer_ffi::candle as fc;
use ferrinfer_launch::norm::NormRoutine;
use ferrinfer_launch::reference::{self, random_normal};
use ferrinfer_launch::{DType, HostElement};

pub const EPS: f32 = 1e-6;

/// Element types both ferrinfer's references and candle's tensors know.
pub trait Elem: HostElement + WithDType {}

impl<T: HostElement + WithDType> Elem for T {}

/// ferrinfer's dtype of `T` (both traits name theirs `DTYPE`).
pub fn dtype<T: Elem>() -> DType {
    <T as HostElement>::DTYPE
}

/// Random-normal values as a tensor on `device`: contiguous, or (`narrow`, 2-D) rows 1.. and
/// columns 3.. of a larger tensor, so the view has a start offset and a row stride longer than
/// its rows.
pub fn tensor_on<T: Elem>(device: &Device, shape: &[usize], narrow: bool, seed: u64) -> Tensor {
    if !narrow {
        let n = shape.iter().product();
        return Tensor::from_vec(random_normal::<T>(n, seed), shape, device).unwrap();
    }
    let (rows, hidden) = (shape[0], shape[1]);
    let base = tensor_on::<T>(device, &[rows + 1, hidden + 5], false, seed);
    let view = base.i((1.., 3..3 + hidden)).unwrap();
    assert!(!view.is_contiguous() && view.layout().start_offset() == hidden + 5 + 3);
    view
}

/// [`tensor_on`] the CPU.
pub fn tensor<T: Elem>(shape: &[usize], narrow: bool, seed: u64) -> Tensor {
    tensor_on::<T>(&Device::Cpu, shape, narrow, seed)
}

/// The elements in row-major order, as f64 (exact for every dtype here).
pub fn values(t: &Tensor) -> Vec<f64> {
    t.to_dtype(CandleDType::F64).unwrap().flatten_all().unwrap().to_vec1().unwrap()
}

/// Runs `routine` through the helpers; returns the output (for the fused ops, `x` itself).
pub fn run_helper(routine: NormRoutine, x: &Tensor, r: &Tensor, w: &Tensor, b: &Tensor) -> candle_core::Result<Tensor> {
    match routine {
        NormRoutine::RmsNorm => fc::rmsnorm(x, w, EPS),
        NormRoutine::GemmaRmsNorm => fc::gemma_rmsnorm(x, w, EPS),
        NormRoutine::LayerNorm => fc::layernorm(x, w, b, EPS),
        NormRoutine::FusedAddRmsNorm => fc::fused_add_rmsnorm(x, r, w, EPS).map(|()| x.clone()),
        NormRoutine::GemmaFusedAddRmsNorm => fc::gemma_fused_add_rmsnorm(x, r, w, EPS).map(|()| x.clone()),
    }
}

/// The f64 reference of `routine` on the values `x`, `r`, `w`, `b` had before the call: (output,
/// new residual).
pub fn reference_of<T: HostElement>(
    routine: NormRoutine,
    x: &[f64],
    r: &[f64],
    w: &[f64],
    b: &[f64],
) -> (Vec<f64>, Vec<f64>) {
    let (hidden, eps, offset) = (w.len(), EPS as f64, routine.weight_offset() as f64);
    match routine {
        NormRoutine::LayerNorm => (reference::layernorm(x, w, b, hidden, eps), r.to_vec()),
        _ if routine.is_fused() => reference::fused_add_rmsnorm::<T>(x, r, w, hidden, eps, offset),
        _ => (reference::rmsnorm(x, w, hidden, eps, offset), r.to_vec()),
    }
}

/// One unit of `T`'s rounding, relative (as `reference::compare` counts it).
pub fn unit<T: Elem>() -> f64 {
    match dtype::<T>() {
        DType::F32 => 1e-5,
        DType::F16 => 2f64.powi(-10),
        DType::Bf16 => 2f64.powi(-7),
    }
}

/// Two results that are each within one unit of `want` are within two units of each other.
pub fn within_two_units<T: Elem>(what: &str, a: &[f64], b: &[f64], want: &[f64]) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (i, ((a, b), w)) in a.iter().zip(b).zip(want).enumerate() {
        assert!((a - b).abs() <= 2.0 * unit::<T>() * w.abs() + 1e-6, "{what}: element {i}: {a} vs {b} (reference {w})");
    }
}

/// The message of `result`'s error (which must be one).
pub fn error_of<T: std::fmt::Debug>(result: candle_core::Result<T>) -> String {
    result.expect_err("expected an error").to_string()
}
