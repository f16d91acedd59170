//! The `torch` feature: FlashInfer's norm ops on `tch::Tensor`s (tch 0.24, libtorch 2.11),
//! with FlashInfer's signatures plus the stream to run on: `rmsnorm(input, weight, eps, out,
//! stream)` returns `out` (a new tensor like `input` when `None`); the fused ops update `input`
//! and `residual` in place.
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
use ferrinfer_launch::norm::NormRoutine;
use ferrinfer_launch::{DType, Device, Error, MAX_DIMS, Stream, TensorView};
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

/// `out = input / sqrt(mean(input²) + eps) * weight` over the last dimension; returns `out`.
pub fn rmsnorm(
    input: &Tensor,
    weight: &Tensor,
    eps: f32,
    out: Option<&mut Tensor>,
    stream: &TorchStream,
) -> Result<Tensor, TchError> {
    normalize(NormRoutine::RmsNorm, input, weight, None, eps, out, stream)
}

/// Gemma's rmsnorm (`weight + 1`); returns `out`.
pub fn gemma_rmsnorm(
    input: &Tensor,
    weight: &Tensor,
    eps: f32,
    out: Option<&mut Tensor>,
    stream: &TorchStream,
) -> Result<Tensor, TchError> {
    normalize(NormRoutine::GemmaRmsNorm, input, weight, None, eps, out, stream)
}

/// `(input - mean) / sqrt(var + eps) * gamma + beta`; returns a new tensor like `input`.
/// `gamma` and `beta` are of `input`'s kind or both f32 (FlashInfer's signature has no `out`).
pub fn layernorm(
    input: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    eps: f32,
    stream: &TorchStream,
) -> Result<Tensor, TchError> {
    normalize(NormRoutine::LayerNorm, input, gamma, Some(beta), eps, None, stream)
}

/// `residual += input; input = rmsnorm(residual) * weight`, both in place.
pub fn fused_add_rmsnorm(
    input: &mut Tensor,
    residual: &mut Tensor,
    weight: &Tensor,
    eps: f32,
    stream: &TorchStream,
) -> Result<(), TchError> {
    fused(NormRoutine::FusedAddRmsNorm, input, residual, weight, eps, stream)
}

/// Gemma's fused add + rmsnorm (`weight + 1`), both in place.
pub fn gemma_fused_add_rmsnorm(
    input: &mut Tensor,
    residual: &mut Tensor,
    weight: &Tensor,
    eps: f32,
    stream: &TorchStream,
) -> Result<(), TchError> {
    fused(NormRoutine::GemmaFusedAddRmsNorm, input, residual, weight, eps, stream)
}

/// The ops that write `out`: views of every argument, then ferrinfer-launch validates and runs.
fn normalize(
    routine: NormRoutine,
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    eps: f32,
    out: Option<&mut Tensor>,
    stream: &TorchStream,
) -> Result<Tensor, TchError> {
    // layernorm's weight is `gamma` in ferrinfer-launch's errors; ours must agree.
    let weight_name = if bias.is_some() { "gamma" } else { "weight" };
    let (mut x, w) = (view("input", input)?, view(weight_name, weight)?);
    let b = bias.map(|b| view("beta", b)).transpose()?;
    // Allocated only once the inputs are known to be tensors we can read; `empty_like` keeps
    // `input`'s device (and, for dense inputs, its strides).
    let out = match out {
        Some(out) => out.shallow_clone(),
        None => input.f_empty_like()?,
    };
    let mut o = view("out", &out)?;
    let b = b.unwrap_or_else(|| w.clone()); // ignored by the rms ops
    routine.run(&mut x.clone(), &mut x, &w, &b, &mut o, eps, stream.launch_stream()).map_err(to_tch)?;
    Ok(out)
}

/// The fused ops: `input` and `residual` are written in place (`&mut`, as tch's in-place ops).
fn fused(
    routine: NormRoutine,
    input: &mut Tensor,
    residual: &mut Tensor,
    weight: &Tensor,
    eps: f32,
    stream: &TorchStream,
) -> Result<(), TchError> {
    let (x, mut r, w) = (view("input", input)?, view("residual", residual)?, view("weight", weight)?);
    // The fused ops ignore `out` and `bias`; `run` still wants something in their place.
    routine.run(&mut x.clone(), &mut r, &w, &w, &mut x.clone(), eps, stream.launch_stream()).map_err(to_tch)
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
        other => Err(TchError::Kind(format!("`{argument}` has kind {other:?}; expected Half, BFloat16 or Float"))),
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
    match error {
        Error::DTypeMismatch { .. } => TchError::Kind(message),
        Error::ShapeMismatch { .. }
        | Error::Empty { .. }
        | Error::LastDimNotContiguous { .. }
        | Error::UnsupportedLayout { .. }
        | Error::TooLarge { .. }
        | Error::Misaligned { .. }
        | Error::OutOfBounds { .. } => TchError::Shape(message),
        _ => TchError::Torch(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torch_kinds_and_devices_map_or_name_the_argument() {
        assert_eq!(dtype("x", Kind::BFloat16).unwrap(), DType::Bf16);
        let error = dtype("weight", Kind::Int64).unwrap_err();
        assert!(matches!(&error, TchError::Kind(m) if m.starts_with("`weight` has kind Int64")), "{error}");
        assert_eq!(device("x", tch::Device::Cuda(3)).unwrap(), Device::Cuda(3));
        let error = device("out", tch::Device::Mps).unwrap_err();
        assert!(matches!(&error, TchError::Torch(m) if m.starts_with("`out` is on Mps")), "{error}");
    }

    #[test]
    fn torch_errors_keep_ferrinfer_messages_in_tch_variants() {
        let shape = Error::ShapeMismatch { argument: "out", expected: "[2, 3]".into(), found: vec![3] };
        assert!(matches!(to_tch(shape), TchError::Shape(m) if m.starts_with("`out` has shape [3]")));
        assert!(matches!(to_tch(Error::InvalidEps(-1.0)), TchError::Torch(m) if m.starts_with("`eps` is -1")));
    }
}
