//! The `python` feature: FlashInfer's Python norm API (`ferrinfer.rmsnorm(x, w, eps=1e-6,
//! out=None)` and the rest) over any DLPack producer — NumPy, PyTorch, JAX — without copying.
//! Errors are raised as Python exceptions carrying the Rust error's message (`TypeError` for a
//! dtype mismatch, `ValueError` otherwise).
//!
//! Host (CPU) tensors run on the CPU backend. CUDA tensors are refused with a clear error for
//! now: running on the producer's current stream needs the DLPack stream protocol, which is not
//! implemented (and could not be tested on a GPU yet).

use std::ptr::NonNull;

use ferrinfer_launch::norm::NormRoutine;
use ferrinfer_launch::{Device, Error, Stream, TensorView};
use pyo3::exceptions::{PyNotImplementedError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

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
    let (x, w) = (Imported::new("input", input)?, Imported::new("weight", weight)?);
    let out = match out {
        Some(out) => out,
        None => empty_like(input)?,
    };
    let o = Imported::new("out", &out)?;
    let b = bias.map(|b| Imported::new("beta", b)).transpose()?;
    let (mut xv, wv, mut ov) = (x.view()?, w.view()?, o.view()?);
    let bv = b.as_ref().map(Imported::view).transpose()?.unwrap_or_else(|| wv.clone());
    let stream = host_stream(&xv)?;
    routine.run(&mut xv.clone(), &mut xv, &wv, &bv, &mut ov, eps, stream).map_err(to_python)?;
    Ok(out)
}

fn fused(
    routine: NormRoutine,
    input: &Bound<'_, PyAny>,
    residual: &Bound<'_, PyAny>,
    weight: &Bound<'_, PyAny>,
    eps: f32,
) -> PyResult<()> {
    let (x, r, w) =
        (Imported::new("input", input)?, Imported::new("residual", residual)?, Imported::new("weight", weight)?);
    let (mut xv, mut rv, wv) = (x.view()?, r.view()?, w.view()?);
    let stream = host_stream(&xv)?;
    routine.run(&mut xv.clone(), &mut rv, &wv, &wv, &mut xv, eps, stream).map_err(to_python)
}

/// The CPU backend for host tensors; CUDA tensors are not supported here yet (see module docs).
fn host_stream(input: &TensorView) -> PyResult<Stream<'static>> {
    ferrinfer_launch::logging::experimental(
        "the ferrinfer Python module",
        "host (CPU) tensors only; CUDA support is tracked in the FFI issue",
    );
    match input.device() {
        Device::Cpu => Ok(Stream::Cpu),
        Device::Cuda(_) => Err(PyNotImplementedError::new_err(
            "ferrinfer's Python module runs host (CPU) tensors only so far; CUDA tensors need the DLPack stream protocol, not yet implemented",
        )),
    }
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
    fn new(argument: &'static str, object: &Bound<'_, PyAny>) -> PyResult<Self> {
        let not_dlpack = |_| {
            PyTypeError::new_err(format!("`{argument}` does not support DLPack (no __dlpack__ returning a capsule)"))
        };
        let capsule = object.call_method0("__dlpack__").map_err(not_dlpack)?;
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
