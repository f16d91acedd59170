//! What the candle tests share (tests/candle.rs on the CPU, tests/candle_gpu.rs on CUDA): inputs,
//! every op through the adapter's generic `Op`, checked against the op's f64 reference.
#![allow(dead_code)] // each test binary uses a part

use candle_core::{DType as CandleDType, Device, IndexOp, Tensor, WithDType};
use ferrinfer_ffi::candle as fc;
use ferrinfer_launch::op::{DTypeRule, Domain, Extent, OpInfo, Role, STACKED_STATES};
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
    values_on::<T>(device, shape, narrow, seed, false)
}

/// [`tensor_on`], made `|x|` where `nonnegative` (an input of probabilities).
fn values_on<T: Elem>(device: &Device, shape: &[usize], narrow: bool, seed: u64, nonnegative: bool) -> Tensor {
    if !narrow {
        let n = shape.iter().product();
        let values = Tensor::from_vec(random_normal::<T>(n, seed), shape, device).unwrap();
        return if nonnegative { values.abs().unwrap() } else { values };
    }
    let (rows, hidden) = (shape[0], shape[1]);
    let base = values_on::<T>(device, &[rows + 1, hidden + 5], false, seed, nonnegative);
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

/// The rows of a problem of `shape` (its leading dimensions, collapsed).
fn rows(shape: &[usize]) -> usize {
    shape[..shape.len() - 1].iter().product()
}

/// `op` on random inputs of `T` (weights of `W`): rows of `shape` (2-D for narrowed views),
/// through `Op::apply`; checks every written tensor against the op's f64 reference and that the
/// read-only ones were not written.
pub fn check_op<T: Elem, W: Elem>(device: &Device, op: &'static OpInfo, shape: &[usize], narrow: bool, seed: u64) {
    let hidden = shape[shape.len() - 1];
    let inputs: Vec<Tensor> = op
        .tensors
        .iter()
        .filter(|a| a.role != Role::Out)
        .enumerate()
        .map(|(i, arg)| {
            let seed = seed + i as u64;
            match arg.extent {
                Extent::Row if arg.dtype == DTypeRule::SameOrF32 => tensor_on::<W>(device, &[hidden], false, seed),
                Extent::Row => tensor_on::<T>(device, &[hidden], false, seed),
                Extent::Rows => values_on::<T>(device, shape, narrow, seed, arg.domain == Domain::Nonnegative),
                Extent::DoubleRows => {
                    let mut wide = shape.to_vec();
                    *wide.last_mut().unwrap() *= 2;
                    tensor_on::<T>(device, &wide, narrow, seed)
                }
                // One value a row (attention states' scores, always f32).
                Extent::Batch => tensor_on::<f32>(device, &shape[..shape.len() - 1], false, seed),
                // States of every row (`[rows, S, H]`) and their scores (`[rows, S]`).
                Extent::Stacked => tensor_on::<T>(device, &[rows(shape), STACKED_STATES, hidden], false, seed),
                Extent::StackedBatch => tensor_on::<f32>(device, &[rows(shape), STACKED_STATES], false, seed),
                _ => {
                    unreachable!("rope's, the page family's and decode's ops are tested on their own")
                }
            }
        })
        .collect();
    let before: Vec<Vec<f64>> = inputs.iter().map(values).collect();
    let scalars = op.examples(rows(shape), hidden);
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let out = fc::Op::of(op, &scalars).unwrap().apply(&refs).unwrap();
    let context = format!("{} {:?} {shape:?} narrow={narrow}", op.name, dtype::<T>());
    let mut tensors = before.clone();
    tensors.extend(out.iter().map(|_| Vec::new()));
    let mut written = Vec::new();
    for ((arg, t), b) in op.tensors.iter().zip(&inputs).zip(&before) {
        match arg.role {
            Role::InOut => written.push(values(t)),
            _ => assert_eq!(&values(t), b, "{context}: `{}` was written", arg.name),
        }
    }
    let out_args = op.tensors.iter().filter(|a| a.role == Role::Out);
    written.extend(out.iter().zip(out_args).map(|(o, arg)| {
        // A row's length, or (one value a row) none.
        let leading = if arg.extent == Extent::Batch { o.dims() } else { &o.dims()[..o.rank() - 1] };
        if op.tensors[0].extent == Extent::Stacked {
            assert_eq!(leading, [rows(shape)], "{context}: output shape");
        } else {
            assert_eq!(leading, &shape[..shape.len() - 1], "{context}: output shape");
        }
        let expected = match arg.dtype.dtype(dtype::<T>(), false) {
            DType::F32 => CandleDType::F32,
            DType::F16 => CandleDType::F16,
            DType::Bf16 => CandleDType::BF16,
            DType::I32 => CandleDType::I32,
            DType::I64 => CandleDType::I64,
        };
        assert_eq!(o.dtype(), expected, "{context}: `{}`'s dtype", arg.name);
        values(o)
    }));
    reference::check_written(op, dtype::<T>(), hidden, &tensors, &written, &scalars)
        .unwrap_or_else(|e| panic!("{context}: {e}"));
}

/// One unit of `T`'s rounding, relative (as `reference::compare` counts it).
pub fn unit<T: Elem>() -> f64 {
    match dtype::<T>() {
        DType::F32 => 1e-5,
        DType::F16 => 2f64.powi(-10),
        DType::Bf16 => 2f64.powi(-7),
        DType::I32 | DType::I64 => 0.0,
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

/// rmsnorm in f64, through the op's own reference.
pub fn rms_reference(x: &[f64], w: &[f64], hidden: usize) -> Vec<f64> {
    let tensors = [x.to_vec(), w.to_vec(), Vec::new()];
    ferrinfer_launch::rmsnorm::INFO
        .reference_of(DType::F32, hidden, &tensors, &[ferrinfer_launch::Scalar::F32(EPS)])
        .remove(0)
}
