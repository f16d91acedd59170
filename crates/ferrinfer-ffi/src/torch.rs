//! The `torch` feature: every op of the registry as a function on `tch::Tensor`s (tch 0.24,
//! libtorch 2.11), made from each family's op table: inputs, outputs, scalars, then the stream to
//! run on — `rmsnorm(input, weight, out, eps, stream)` returns `out` (a new tensor like `input`
//! when `None`); in-place ops (`fused_add_rmsnorm(input, residual, weight, eps, stream)`) update
//! their `&mut` tensors.
//!
//! - No copies: a tensor's data pointer (tch's `data_ptr` includes the storage offset), sizes
//!   and strides become a `TensorView`; strided rows (`narrow`, slices of a larger buffer) are
//!   used as they are, and anything the kernels cannot take is an error, never a silent copy.
//! - The stream is always the caller's: tch has no API for PyTorch's current CUDA stream, so
//!   there is no default to fall back on. [`TorchStream::Cuda`] takes a cudarc stream or, through
//!   [`TorchStream::cuda`], a raw `CUstream` PyTorch owns (0: its default, the legacy stream).
//!   As with any PyTorch side stream, work on it must be ordered after the work that produced
//!   the tensors (nothing to do on PyTorch's default stream).
//! - Errors are `tch::TchError`s carrying ferrinfer's message, which names the argument: `Kind`
//!   for dtypes, `Shape` for shapes and layouts, `Torch` for the rest (devices, streams, `eps`,
//!   CUDA) — what tch returns for torch's own errors. Every check runs before anything is
//!   written, and nothing here panics (tch's panicking methods are avoided or guarded).
//! - Inference only, like FlashInfer's kernels: autograd does not see these writes.

use std::sync::Arc;

use ferrinfer_launch::cudarc::driver::CudaStream;
use ferrinfer_launch::op::{DTypeRule, Extent};
use ferrinfer_launch::{DType, Device, Error, MAX_DIMS, Scalar, Stream, TensorView};
use tch::{Kind, TchError, Tensor};

/// Where an op runs: named by the caller on every call (see the module docs).
#[derive(Clone, Debug)]
pub enum TorchStream {
    /// The CPU backend, for CPU tensors only.
    Cpu,
    /// A CUDA stream of the tensors' device, in its primary context: the context PyTorch uses,
    /// and the one cudarc's `CudaContext::new` retains (so `ctx.new_stream()` qualifies).
    Cuda(Arc<CudaStream>),
}

impl TorchStream {
    /// A CUDA stream someone else owns, by device ordinal and raw `CUstream` handle — from
    /// Python, `torch.cuda.current_stream().cuda_stream`; 0 is the legacy default stream
    /// (PyTorch's default stream).
    ///
    /// # Safety
    /// `raw_stream` must be 0 or a live stream of device `device`'s primary context, and stay
    /// alive while the returned value, or work launched on it, is in use.
    pub unsafe fn cuda(device: usize, raw_stream: usize) -> Result<Self, TchError> {
        // SAFETY: forwarded to the caller.
        let stream = unsafe { ferrinfer_launch::borrowed_stream(device, raw_stream) }.map_err(to_tch)?;
        Ok(TorchStream::Cuda(stream))
    }

    fn launch_stream(&self) -> Stream<'_> {
        match self {
            TorchStream::Cpu => Stream::Cpu,
            TorchStream::Cuda(stream) => Stream::Cuda(stream),
        }
    }
}

/// One tch function per op of the registry (`ferrinfer_launch::all_ops!(tch_functions)`):
/// inputs (`&Tensor`; `&mut Tensor` for those updated in place), outputs (`Option<&mut Tensor>`:
/// a new tensor when `None`), scalars, the stream; returns the output (or `()`).
macro_rules! tch_functions {
    (
        family $family:ident;
        $(
            $(#[doc = $doc:literal])*
            fn $name:ident($($tensor:ident : $role:ident),+) -> ($($out:ident),*); ($($scalar:ident : $type:ty),*);
        )+
    ) => {
        $(
            $(#[doc = $doc])*
            #[allow(clippy::too_many_arguments)]
            pub fn $name(
                $($tensor: tch_param!($role),)+
                $($out: Option<&mut Tensor>,)*
                $($scalar: $type,)*
                stream: &TorchStream,
            ) -> Result<returns_of!($($out)*), TchError> {
                let outputs: Vec<Option<&Tensor>> = vec![$($out.map(|t| &*t)),*];
                let scalars = [$(ferrinfer_launch::scalar::ScalarType::into_scalar($scalar)),*];
                let produced = call(&ferrinfer_launch::$family::$name::INFO, &[$(&*$tensor),+], outputs, &scalars, stream)?;
                Produced::take(produced)
            }
        )+
    };
}

/// An input's parameter type: `&mut` for tensors updated in place, as tch's in-place ops.
macro_rules! tch_param {
    (In) => {
        &Tensor
    };
    (InOut) => {
        &mut Tensor
    };
}

ferrinfer_launch::all_ops!(tch_functions);

/// The outputs an op produced, as its function returns them.
trait Produced: Sized {
    fn take(outputs: Vec<Tensor>) -> Result<Self, TchError>;
}

impl Produced for () {
    fn take(_: Vec<Tensor>) -> Result<Self, TchError> {
        Ok(())
    }
}

impl Produced for Tensor {
    fn take(outputs: Vec<Tensor>) -> Result<Self, TchError> {
        outputs.into_iter().next().ok_or_else(|| TchError::Torch("ferrinfer: the op produced no output".into()))
    }
}

/// Two outputs (`merge_state`'s values and scores), in table order.
impl Produced for (Tensor, Tensor) {
    fn take(outputs: Vec<Tensor>) -> Result<Self, TchError> {
        let mut outputs = outputs.into_iter();
        match (outputs.next(), outputs.next()) {
            (Some(first), Some(second)) => Ok((first, second)),
            _ => Err(TchError::Torch("ferrinfer: the op produced fewer than two outputs".into())),
        }
    }
}

/// Runs any op on tch tensors, by position (what the per-op functions call): views of every input
/// and output (a missing output allocated like its source input — the first of its extent, else
/// the first: its device and kind, its shape by [`Extent::output_shape`]), then ferrinfer-launch validates and runs. Returns the
/// outputs.
pub fn call(
    op: &'static ferrinfer_launch::OpInfo,
    inputs: &[&Tensor],
    outputs: Vec<Option<&Tensor>>,
    scalars: &[Scalar],
    stream: &TorchStream,
) -> Result<Vec<Tensor>, TchError> {
    let names = op.tensors.iter().map(|a| a.name);
    let mut views = inputs.iter().zip(names.clone()).map(|(t, name)| view(name, t)).collect::<Result<Vec<_>, _>>()?;
    // Allocated only once the inputs are known to be tensors we can read; `empty_like` keeps
    // `input`'s device (and, for dense inputs, its strides).
    let outputs: Vec<Tensor> = outputs
        .into_iter()
        .zip(inputs.len()..)
        .map(|(given, out)| match given {
            Some(tensor) => Ok(tensor.shallow_clone()),
            None => allocate_like(op, inputs, out, scalars),
        })
        .collect::<Result<_, TchError>>()?;
    for (tensor, name) in outputs.iter().zip(names.skip(inputs.len())) {
        views.push(view(name, tensor)?);
    }
    let views: Vec<&TensorView> = views.iter().collect();
    op.call(&views, scalars, stream.launch_stream()).map_err(to_tch)?;
    Ok(outputs)
}

/// A new tensor for output `arg` (argument `out`) of `op`, like its `inputs`: the device of
/// its source ([`OpInfo::output_source`](ferrinfer_launch::OpInfo::output_source): `query_out`'s
/// is `query`), its kind unless the output's is fixed (f32, int32), its shape by
/// [`OpInfo::output_shape`](ferrinfer_launch::OpInfo::output_shape) (a count output's: its scalar's).
fn allocate_like(
    op: &ferrinfer_launch::OpInfo,
    inputs: &[&Tensor],
    out: usize,
    scalars: &[Scalar],
) -> Result<Tensor, TchError> {
    let (arg, first) = (&op.tensors[out], inputs[op.output_source(out)]);
    let kind = match arg.dtype {
        DTypeRule::F32 => Kind::Float,
        DTypeRule::I32 | DTypeRule::Index => Kind::Int,
        DTypeRule::Same | DTypeRule::SameOrF32 => first.f_kind()?,
    };
    let sizes: Vec<Vec<i64>> = inputs.iter().map(|t| t.size()).collect();
    let shapes: Vec<(Extent, &[i64])> = op.tensors.iter().zip(&sizes).map(|(a, s)| (a.extent, s.as_slice())).collect();
    let shape = op.output_shape(out, &shapes, scalars);
    if shape == first.size() && kind == first.f_kind()? {
        return first.f_empty_like();
    }
    Tensor::f_empty(shape, (kind, first.device()))
}

/// A view of `tensor`'s memory (no copy), valid while `tensor` is borrowed. The checks before
/// the raw accessors keep tch from panicking: `size`, `stride` and `data_ptr` unwrap torch's
/// errors, which undefined, sparse (COO, CSR, …) and MKL-DNN tensors raise.
fn view<'t>(argument: &'static str, tensor: &'t Tensor) -> Result<TensorView<'t>, TchError> {
    if !tensor.defined() {
        return Err(TchError::Torch(format!("`{argument}` is an undefined tensor")));
    }
    let dtype = dtype(argument, tensor.f_kind()?)?;
    let device = device(argument, tensor.device())?;
    if tensor.is_sparse() || tensor.is_mkldnn() || tensor.f_sparse_dim()? != 0 {
        let reason = "not a strided (dense) tensor".to_owned();
        return Err(to_tch(Error::UnsupportedLayout { argument, reason }));
    }
    // A lazily negated view (torch's neg bit) stores the values un-negated: its memory is not
    // what it reads as, so using it would silently compute on the wrong values.
    if tensor.f_is_neg()? {
        let reason = "a lazily negated view (neg bit set); call `resolve_neg()` first".to_owned();
        return Err(to_tch(Error::UnsupportedLayout { argument, reason }));
    }
    let (shape, strides) = (tensor.size(), tensor.stride());
    if shape.len() > MAX_DIMS {
        let reason = format!("{} dimensions; at most {MAX_DIMS} are supported", shape.len());
        return Err(to_tch(Error::UnsupportedLayout { argument, reason }));
    }
    // SAFETY: `data_ptr` is the first element (storage offset included) of memory on `device`
    // that the tensor keeps alive while borrowed for 't; sizes and strides describe it.
    unsafe { TensorView::from_raw_parts(tensor.data_ptr(), 0, dtype, &shape, &strides, device) }.map_err(to_tch)
}

fn dtype(argument: &'static str, kind: Kind) -> Result<DType, TchError> {
    match kind {
        Kind::Half => Ok(DType::F16),
        Kind::BFloat16 => Ok(DType::Bf16),
        Kind::Float => Ok(DType::F32),
        // Sampled tokens (and per-row `top_k`).
        Kind::Int => Ok(DType::I32),
        // Per-row seeds and offsets.
        Kind::Int64 => Ok(DType::I64),
        other => {
            let expected = "Half, BFloat16 or Float (Int for sampled tokens, Int64 for seeds)".into();
            Err(to_tch(Error::UnsupportedDType { argument, found: format!("{other:?}"), expected }))
        }
    }
}

fn device(argument: &'static str, device: tch::Device) -> Result<Device, TchError> {
    match device {
        tch::Device::Cpu => Ok(Device::Cpu),
        tch::Device::Cuda(ordinal) => Ok(Device::Cuda(ordinal)),
        other => Err(TchError::Torch(format!("`{argument}` is on {other:?}; ferrinfer runs CPU and CUDA tensors"))),
    }
}

/// ferrinfer's error as the `TchError` variant tch uses for that kind of problem.
fn to_tch(error: Error) -> TchError {
    let message = error.to_string();
    if error.is_dtype() {
        TchError::Kind(message)
    } else if error.is_shape() {
        TchError::Shape(message)
    } else {
        TchError::Torch(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torch_kinds_and_devices_map_or_name_the_argument() {
        assert_eq!(dtype("x", Kind::BFloat16).unwrap(), DType::Bf16);
        assert_eq!(dtype("seed", Kind::Int64).unwrap(), DType::I64, "per-row seeds");
        let error = dtype("weight", Kind::Double).unwrap_err();
        assert!(
            matches!(&error, TchError::Kind(m) if m.starts_with("`weight` has dtype Double; expected Half, BFloat16 or Float")),
            "{error}"
        );
        assert_eq!(device("x", tch::Device::Cuda(3)).unwrap(), Device::Cuda(3));
        let error = device("out", tch::Device::Mps).unwrap_err();
        assert!(matches!(&error, TchError::Torch(m) if m.starts_with("`out` is on Mps")), "{error}");
    }

    #[test]
    fn torch_errors_keep_ferrinfer_messages_in_tch_variants() {
        let shape = Error::ShapeMismatch { argument: "out", expected: "[2, 3]".into(), found: vec![3] };
        assert!(matches!(to_tch(shape), TchError::Shape(m) if m.starts_with("`out` has shape [3]")));
        let eps = Error::invalid_scalar("eps", -1.0, "a finite number ≥ 0");
        assert!(matches!(to_tch(eps), TchError::Torch(m) if m.starts_with("`eps` is -1")));
    }
}
