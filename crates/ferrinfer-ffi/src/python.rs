//! The `python` feature: FlashInfer's Python norm API (`ferrinfer.rmsnorm(x, w, eps=1e-6,
//! out=None)` and the rest) over any DLPack producer — NumPy, PyTorch, CuPy, JAX — without
//! copying. Errors are raised as Python exceptions carrying the Rust error's message (`TypeError`
//! for a dtype mismatch, `ValueError` otherwise).
//!
//! Host (CPU) tensors run on the CPU backend. CUDA tensors run on the producer's *current*
//! stream, as FlashInfer runs on `torch.cuda.current_stream()`: the stream is asked of the
//! producer's framework (torch, CuPy; any other producer: the legacy default stream), and every
//! argument is exported with `__dlpack__(stream=that stream)` — the DLPack stream protocol, under
//! which the producer makes its pending work visible to that stream before handing the tensor over.
//! Launches are asynchronous and can be captured in a CUDA graph (`torch.cuda.graph`) — except for
//! producers without a current stream (JAX, …): they may reuse an argument's memory on their own
//! streams once we release it, so those calls wait for the kernel before returning.
//! Tensors that require grad (model parameters) are exported through `detach()`, the same memory.

use std::ptr::NonNull;
use std::sync::Arc;

use ferrinfer_launch::cudarc::driver::CudaStream;
use ferrinfer_launch::norm::NormRoutine;
use ferrinfer_launch::{Error, Stream, TensorView, borrowed_stream};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{IntoPyDict, PyCapsule};

use crate::dlpack::{DLManagedTensor, view_from_dlpack};

/// Adds the functions to the `ferrinfer` module.
pub fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(rmsnorm, module)?)?;
    module.add_function(wrap_pyfunction!(gemma_rmsnorm, module)?)?;
    module.add_function(wrap_pyfunction!(fused_add_rmsnorm, module)?)?;
    module.add_function(wrap_pyfunction!(gemma_fused_add_rmsnorm, module)?)?;
    module.add_function(wrap_pyfunction!(layernorm, module)?)?;
    Ok(())
}

/// `out = input / sqrt(mean(input**2) + eps) * weight` over the last dimension; returns `out`.
#[pyfunction]
#[pyo3(signature = (input, weight, eps = 1e-6, out = None))]
fn rmsnorm<'py>(
    input: &Bound<'py, PyAny>,
    weight: &Bound<'py, PyAny>,
    eps: f32,
    out: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    normalize(NormRoutine::RmsNorm, input, weight, None, eps, out)
}

/// Gemma's rmsnorm: `weight + 1`; returns `out`.
#[pyfunction]
#[pyo3(signature = (input, weight, eps = 1e-6, out = None))]
fn gemma_rmsnorm<'py>(
    input: &Bound<'py, PyAny>,
    weight: &Bound<'py, PyAny>,
    eps: f32,
    out: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    normalize(NormRoutine::GemmaRmsNorm, input, weight, None, eps, out)
}

/// `out = (input - mean) / sqrt(var + eps) * gemma + beta`; returns `out` (new).
#[pyfunction]
#[pyo3(signature = (input, gemma, beta, eps = 1e-6))]
fn layernorm<'py>(
    input: &Bound<'py, PyAny>,
    gemma: &Bound<'py, PyAny>,
    beta: &Bound<'py, PyAny>,
    eps: f32,
) -> PyResult<Bound<'py, PyAny>> {
    normalize(NormRoutine::LayerNorm, input, gemma, Some(beta), eps, None)
}

/// `residual += input; input = rmsnorm(residual) * weight`, both in place.
#[pyfunction]
#[pyo3(signature = (input, residual, weight, eps = 1e-6))]
fn fused_add_rmsnorm(
    input: &Bound<'_, PyAny>,
    residual: &Bound<'_, PyAny>,
    weight: &Bound<'_, PyAny>,
    eps: f32,
) -> PyResult<()> {
    fused(NormRoutine::FusedAddRmsNorm, input, residual, weight, eps)
}

/// Gemma's fused add + rmsnorm (`weight + 1`), both in place.
#[pyfunction]
#[pyo3(signature = (input, residual, weight, eps = 1e-6))]
fn gemma_fused_add_rmsnorm(
    input: &Bound<'_, PyAny>,
    residual: &Bound<'_, PyAny>,
    weight: &Bound<'_, PyAny>,
    eps: f32,
) -> PyResult<()> {
    fused(NormRoutine::GemmaFusedAddRmsNorm, input, residual, weight, eps)
}

fn normalize<'py>(
    routine: NormRoutine,
    input: &Bound<'py, PyAny>,
    weight: &Bound<'py, PyAny>,
    bias: Option<&Bound<'py, PyAny>>,
    eps: f32,
    out: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let target = Target::of(input)?;
    let weight_name = if bias.is_some() { "gamma" } else { "weight" };
    let (x, w) = (target.import("input", input)?, target.import(weight_name, weight)?);
    let out = match out {
        Some(out) => out,
        None => empty_like(input)?,
    };
    let o = target.import("out", &out)?;
    let b = bias.map(|b| target.import("beta", b)).transpose()?;
    let (mut xv, wv, mut ov) = (x.view()?, w.view()?, o.view()?);
    let bv = b.as_ref().map(Imported::view).transpose()?.unwrap_or_else(|| wv.clone());
    routine.run(&mut xv.clone(), &mut xv, &wv, &bv, &mut ov, eps, target.stream()).map_err(to_python)?;
    target.finish()?;
    Ok(out)
}

fn fused(
    routine: NormRoutine,
    input: &Bound<'_, PyAny>,
    residual: &Bound<'_, PyAny>,
    weight: &Bound<'_, PyAny>,
    eps: f32,
) -> PyResult<()> {
    let target = Target::of(input)?;
    let (x, r, w) =
        (target.import("input", input)?, target.import("residual", residual)?, target.import("weight", weight)?);
    let (mut xv, mut rv, wv) = (x.view()?, r.view()?, w.view()?);
    routine.run(&mut xv.clone(), &mut rv, &wv, &wv, &mut xv, eps, target.stream()).map_err(to_python)?;
    target.finish()
}

/// DLPack's device type code for CUDA memory (`kDLCUDA`).
const DLPACK_CUDA: i32 = 2;

/// Where a call runs, decided by `input`: the CPU backend, or the producer's current CUDA stream.
enum Target {
    Cpu,
    Cuda {
        stream: Arc<CudaStream>,
        /// The same stream as the DLPack stream protocol numbers it (1: the legacy default).
        protocol: usize,
        /// Whether the stream is the producer's own current stream (torch, CuPy). If not, the
        /// producer may free or reuse an argument's memory on its own streams as soon as we
        /// release it, so the call waits for the kernel first (see `finish`).
        producers_stream: bool,
    },
}

impl Target {
    fn of(input: &Bound<'_, PyAny>) -> PyResult<Self> {
        ferrinfer_launch::logging::experimental("the ferrinfer Python module", "its Python API may still change");
        let (device_type, ordinal) = dlpack_device("input", input)?;
        if device_type != DLPACK_CUDA {
            return Ok(Target::Cpu);
        }
        let current = current_stream(input, ordinal)?;
        let raw = current.unwrap_or(0);
        // SAFETY: the producer's framework owns this stream of device `ordinal` (primary context,
        // as the CUDA runtime uses) and keeps it alive across this call; 0 is the legacy stream.
        let stream = unsafe { borrowed_stream(ordinal, raw) }.map_err(to_python)?;
        Ok(Target::Cuda { stream, protocol: if raw == 0 { 1 } else { raw }, producers_stream: current.is_some() })
    }

    /// Exports `object` through DLPack; CUDA data for this target's stream. (A tensor on another
    /// kind of device is exported plainly: the launch layer then names it in a device error.)
    fn import(&self, argument: &'static str, object: &Bound<'_, PyAny>) -> PyResult<Imported> {
        let stream = match self {
            Target::Cuda { protocol, .. } if dlpack_device(argument, object)?.0 == DLPACK_CUDA => Some(*protocol),
            _ => None,
        };
        Imported::new(argument, object, stream)
    }

    /// After a launch: on a stream the producer does not order its own work by, wait for it
    /// before the arguments are released.
    fn finish(&self) -> PyResult<()> {
        match self {
            Target::Cuda { stream, producers_stream: false, .. } => {
                stream.synchronize().map_err(|e| to_python(Error::Cuda(e)))
            }
            _ => Ok(()),
        }
    }

    fn stream(&self) -> Stream<'_> {
        match self {
            Target::Cpu => Stream::Cpu,
            Target::Cuda { stream, .. } => Stream::Cuda(stream),
        }
    }
}

/// `object.__dlpack_device__()`: (DLPack device type, device ordinal).
fn dlpack_device(argument: &str, object: &Bound<'_, PyAny>) -> PyResult<(i32, usize)> {
    let not_dlpack = |_| {
        PyTypeError::new_err(format!(
            "`{argument}` does not support DLPack (no __dlpack_device__ returning (type, id))"
        ))
    };
    object.call_method0("__dlpack_device__").and_then(|d| d.extract()).map_err(not_dlpack)
}

/// The raw `CUstream` the producer's framework currently issues work to on device `ordinal`
/// (0: PyTorch's default stream, the legacy one); `None` for producers with no notion of a
/// current stream (JAX, …). Subclasses count: `isinstance`, not the type's module name.
fn current_stream(input: &Bound<'_, PyAny>, ordinal: usize) -> PyResult<Option<usize>> {
    if let Some(torch) = framework(input, "torch", "Tensor")? {
        let stream = torch.getattr("cuda")?.call_method1("current_stream", (ordinal,))?;
        return stream.getattr("cuda_stream")?.extract().map(Some);
    }
    if let Some(cupy) = framework(input, "cupy", "ndarray")? {
        // CuPy's current stream is per device: ask with `ordinal` current.
        let device = cupy.getattr("cuda")?.call_method1("Device", (ordinal,))?;
        device.call_method0("__enter__")?;
        let stream = cupy.getattr("cuda")?.call_method0("get_current_stream").and_then(|s| s.getattr("ptr"));
        device.call_method1("__exit__", (None::<()>, None::<()>, None::<()>))?;
        return stream?.extract().map(Some);
    }
    Ok(None)
}

/// The module `name` if it is imported and `object` is one of its `class` (no import forced).
fn framework<'py>(object: &Bound<'py, PyAny>, name: &str, class: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
    let modules = object.py().import("sys")?.getattr("modules")?;
    let Ok(module) = modules.get_item(name) else { return Ok(None) };
    Ok(object.is_instance(&module.getattr(class)?)?.then_some(module))
}

/// A new array like `input`, from the producer's own namespace (array API, else torch).
fn empty_like<'py>(input: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    if input.hasattr("__array_namespace__")? {
        return input.call_method0("__array_namespace__")?.call_method1("empty_like", (input,));
    }
    let module: String = input.get_type().getattr("__module__")?.extract()?;
    if module.starts_with("torch") {
        return input.py().import("torch")?.call_method1("empty_like", (input,));
    }
    Err(PyTypeError::new_err(format!("cannot allocate an output like a `{module}` tensor; pass out=")))
}

fn to_python(error: Error) -> PyErr {
    match error {
        Error::DTypeMismatch { .. } => PyTypeError::new_err(error.to_string()),
        _ => PyValueError::new_err(error.to_string()),
    }
}

/// A tensor taken through `__dlpack__`: the capsule is marked used, and the producer's deleter
/// runs when this is dropped (the DLPack ownership rule).
struct Imported {
    argument: &'static str,
    tensor: NonNull<DLManagedTensor>,
}

impl Imported {
    /// Takes `object.__dlpack__()`, passing `stream` (DLPack's stream protocol) for CUDA data.
    fn new(argument: &'static str, object: &Bound<'_, PyAny>, stream: Option<usize>) -> PyResult<Self> {
        let not_dlpack = |_| {
            PyTypeError::new_err(format!("`{argument}` does not support DLPack (no __dlpack__ returning a capsule)"))
        };
        let py = object.py();
        // torch refuses to export a tensor that requires grad (model parameters do); its
        // detached twin is the same memory.
        let object = if object.getattr("requires_grad").and_then(|g| g.extract::<bool>()).unwrap_or(false) {
            object.call_method0("detach")?
        } else {
            object.clone()
        };
        let export = object.getattr("__dlpack__").map_err(not_dlpack)?;
        let capsule = match stream {
            None => export.call0(),
            Some(stream) => export.call((), Some(&[("stream", stream)].into_py_dict(py)?)),
        }
        .map_err(|e| PyErr::from_type(e.get_type(py), format!("`{argument}`: __dlpack__ failed: {}", e.value(py))))?;
        let capsule = capsule
            .cast::<PyCapsule>()
            .map_err(|_| PyTypeError::new_err(format!("`{argument}`.__dlpack__() did not return a capsule")))?;
        let pointer = capsule.pointer_checked(Some(c"dltensor"))?;
        // SAFETY: a live capsule; renaming it passes ownership of the tensor to us.
        unsafe { pyo3::ffi::PyCapsule_SetName(capsule.as_ptr(), c"used_dltensor".as_ptr()) };
        Ok(Imported { argument, tensor: pointer.cast() })
    }

    fn view(&self) -> PyResult<TensorView<'_>> {
        // SAFETY: the producer keeps the memory alive until our deleter call (in Drop).
        unsafe { view_from_dlpack(self.argument, &self.tensor.as_ref().dl_tensor) }.map_err(to_python)
    }
}

impl Drop for Imported {
    fn drop(&mut self) {
        // SAFETY: we own the managed tensor since renaming its capsule; deleter runs once.
        unsafe {
            if let Some(deleter) = self.tensor.as_ref().deleter {
                deleter(self.tensor.as_ptr());
            }
        }
    }
}
