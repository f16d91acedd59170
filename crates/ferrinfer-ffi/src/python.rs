//! The `python` feature: every op of the registry as a Python function with FlashInfer's
//! signature — `ferrinfer.rmsnorm(input, weight, eps=1e-6, out=None, enable_pdl=None)` and the
//! rest, made from each op's table line at import ([`register`]): required tensors, then scalars
//! with their defaults, then the optional `out`, then `enable_pdl` (where FlashInfer orders them
//! otherwise, its order: `apply_rope_with_cos_sin_cache(positions, query, key, head_size,
//! cos_sin_cache, is_neox=True, query_out=None, key_out=None, enable_pdl=None)`). Each function
//! is also in its family's submodule, FlashInfer's (`ferrinfer.norm.rmsnorm`, `from
//! ferrinfer.sampling import top_p_sampling_from_probs`). Ops with an output return it
//! (allocated like the input of its extent — `input`, `query` — when `out` is None), an output
//! with a `return_<name>` switch (decode's `return_lse`) only where it is on; in-place ops
//! return None. Errors are raised as
//! Python exceptions carrying the Rust error's message (`TypeError` for dtype errors, naming the
//! dtype; `ValueError` otherwise).
//!
//! Tensors come without copying. PyTorch tensors are read directly (data pointer, sizes, strides,
//! dtype, device: a few attribute reads), the light path eager PyTorch needs; any other DLPack
//! producer — NumPy, CuPy, JAX — through `__dlpack__`. Host (CPU) tensors run on the CPU backend.
//! CUDA tensors run on the producer's *current* stream, as FlashInfer runs on
//! `torch.cuda.current_stream()`: torch's raw current stream, CuPy's current stream, else the legacy
//! default stream; DLPack exports pass that stream (`__dlpack__(stream=…)`, the DLPack stream
//! protocol). Launches are asynchronous and can be captured in a CUDA graph (`torch.cuda.graph`) —
//! except for producers without a current stream (JAX, …): they may reuse an argument's memory
//! on their own streams once we release it, so those calls wait for the kernel before returning.

use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::Arc;

use ferrinfer_launch::cudarc::driver::CudaStream;
use ferrinfer_launch::op::{DTypeRule, Extent, OpInfo, Role, ScalarArg};
use ferrinfer_launch::scalar::ScalarKind;
use ferrinfer_launch::{DType, Device, Error, MAX_DIMS, Scalar, Stream, TensorView, borrowed_stream};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{IntoPyDict, PyCFunction, PyCapsule, PyDict, PyInt, PyTuple};

use crate::dlpack::{DLManagedTensor, view_from_dlpack};

/// Adds one function per op of the registry to `module`, and the same function to its family's
/// submodule (`ferrinfer.norm.rmsnorm`), the submodule FlashInfer has it in: code written for
/// `import flashinfer` runs with `import ferrinfer` instead. `package` is the name users import
/// (`ferrinfer`), which the submodules are registered under; it is not `module`'s own name where
/// a package of that name re-exports the extension (maturin's wheel: the package `ferrinfer`'s
/// `__init__` re-exports the extension `ferrinfer.ferrinfer`'s `__all__`, which `add` fills).
pub fn register(module: &Bound<'_, PyModule>, package: &str) -> PyResult<()> {
    let mut families: Vec<&str> = ferrinfer_launch::ops().map(|op| op.family).collect();
    families.sort_unstable();
    families.dedup();
    for family in families {
        let submodule = family_module(module, package, family)?;
        for op in ferrinfer_launch::ops().filter(|op| op.family == family) {
            let function = function(module.py(), op)?;
            // Where `help()` and `inspect.getmodule` say it lives, as FlashInfer's `flashinfer.norm`.
            function.setattr(intern!(module.py(), "__module__"), submodule.name()?)?;
            module.add(op.name, &function)?;
            submodule.add(op.name, function)?;
        }
    }
    Ok(())
}

/// A new empty submodule `family` of `module`, named `{package}.{family}` (`ferrinfer.norm`): an
/// attribute of `module`, and in `sys.modules` under its dotted name, where `import
/// ferrinfer.norm` and `from ferrinfer.norm import rmsnorm` look (no file holds it).
fn family_module<'py>(module: &Bound<'py, PyModule>, package: &str, family: &str) -> PyResult<Bound<'py, PyModule>> {
    let py = module.py();
    let name = format!("{package}.{family}");
    let submodule = PyModule::new(py, &name)?;
    let doc = format!("The {family} family's functions, as FlashInfer's `flashinfer.{family}`.");
    submodule.setattr(intern!(py, "__doc__"), doc)?;
    module.add(family, &submodule)?;
    py.import("sys")?.getattr("modules")?.set_item(&name, &submodule)?;
    Ok(submodule)
}

/// A parameter of an op's Python signature.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Parameter {
    /// Tensor argument `i` of the op (an `Out` one is optional).
    Tensor(usize),
    /// Scalar `i`, with its default.
    Scalar(usize),
    /// `enable_pdl=None`.
    EnablePdl,
}

/// FlashInfer's parameter order: required tensors, scalars, optional outputs, `enable_pdl` —
/// the parameters the op's [`OpInfo::order`] names first, in that order.
fn parameters(op: &OpInfo) -> Vec<Parameter> {
    // A tensor of a group (see [`group`]) but its first has no parameter of its own.
    let tensors = |out: bool| {
        (0..op.tensors.len()).filter(move |&i| (op.tensors[i].role == Role::Out) == out && group(op, i).1 == 0)
    };
    let table: Vec<Parameter> = tensors(false)
        .map(Parameter::Tensor)
        .chain((0..op.scalars.len()).map(Parameter::Scalar))
        .chain(tensors(true).map(Parameter::Tensor))
        .chain([Parameter::EnablePdl])
        .collect();
    // An order names a tensor by its name or its alias, as keywords may.
    let named = |p: &Parameter, name: &str| {
        parameter_name(op, *p) == name || matches!(p, Parameter::Tensor(i) if op.tensors[*i].name == name)
    };
    let first = op.order.iter().filter_map(|name| table.iter().find(|p| named(p, name)));
    let rest = table.iter().filter(|p| !op.order.iter().any(|name| named(p, name)));
    first.chain(rest).copied().collect()
}

/// Tensor `i`'s group: consecutive tensors sharing an alias are one Python parameter of that
/// name (`paged_kv_cache`: `paged_k_cache` and `paged_v_cache`), which takes a tuple of them or
/// one tensor holding them along its second dimension. `(first tensor, i's part, parts)`; a
/// tensor of its own is a group of one.
fn group(op: &OpInfo, i: usize) -> (usize, usize, usize) {
    let alias = op.tensors[i].alias;
    let shares = |j: &usize| alias.is_some() && op.tensors[*j].alias == alias;
    let first = (0..i).rev().take_while(|j| shares(j)).last().unwrap_or(i);
    let parts = (first..op.tensors.len()).take_while(|j| *j == first || shares(j)).count();
    (first, i - first, parts)
}

/// Part `part` of `parts` of a group's Python object: item `part` of a tuple or list of `parts`,
/// or of one tensor, `object[:, part]` (a view).
fn group_part<'py>(
    op: &OpInfo,
    first: usize,
    (part, parts): (usize, usize),
    object: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = object.py();
    let name = op.tensors[first].alias.unwrap_or(op.tensors[first].name);
    let names: Vec<&str> = op.tensors[first..first + parts].iter().map(|t| t.name).collect();
    if object.is_instance_of::<PyTuple>() || object.is_instance_of::<pyo3::types::PyList>() {
        let items = object.len()?;
        if items != parts {
            let expected = format!(
                "a tuple of {parts} tensors ({}) or one tensor holding them along dimension 1",
                names.join(", ")
            );
            return Err(PyValueError::new_err(format!("`{name}` must be {expected}; got {items} items")));
        }
        return object.get_item(part);
    }
    let shape: Vec<i64> = object.getattr(intern!(py, "shape")).and_then(|s| s.extract()).map_err(|_| {
        PyTypeError::new_err(format!(
            "`{name}` must be a tuple of tensors ({}) or one tensor; got {}",
            names.join(", "),
            type_name(object)
        ))
    })?;
    if shape.len() < 2 || shape[1] != parts as i64 {
        let message = format!(
            "`{name}` as one tensor holds {} along dimension 1 (of size {parts}); got shape {shape:?}",
            names.join(", ")
        );
        return Err(PyValueError::new_err(message));
    }
    let index = PyTuple::new(py, [pyo3::types::PySlice::full(py).into_any(), part.into_pyobject(py)?.into_any()])?;
    object.get_item(index)
}

fn parameter_name(op: &OpInfo, parameter: Parameter) -> &'static str {
    match parameter {
        Parameter::Tensor(i) => op.tensors[i].alias.unwrap_or(op.tensors[i].name),
        Parameter::Scalar(i) => op.scalars[i].name,
        Parameter::EnablePdl => "enable_pdl",
    }
}

/// `name(input, weight, eps=1e-6, out=None, enable_pdl=None)`: what `inspect.signature` shows.
fn signature(op: &OpInfo) -> String {
    let parameters: Vec<String> = parameters(op)
        .into_iter()
        .map(|p| match p {
            Parameter::Tensor(i) if op.tensors[i].role == Role::Out => format!("{}=None", parameter_name(op, p)),
            Parameter::Scalar(i) => {
                let arg = &op.scalars[i];
                match arg.default {
                    Some(default) => format!("{}={}", arg.name, python_literal(arg, default)),
                    None => arg.name.into(),
                }
            }
            Parameter::EnablePdl => "enable_pdl=None".into(),
            Parameter::Tensor(_) => parameter_name(op, p).into(),
        })
        .collect();
    format!("{}({})", op.name, parameters.join(", "))
}

/// A scalar's value as Python writes it: `1e-06`, `8192`, `True`, `None`, `"NHD"`.
fn python_literal(arg: &ScalarArg, value: Scalar) -> String {
    match value {
        // Python's repr of the f32 as a float: the shortest digits that give it back.
        Scalar::F32(v) => format!("{v:?}"),
        Scalar::Bool(v) => if v { "True" } else { "False" }.into(),
        Scalar::Absent => "None".into(),
        Scalar::Choice(_) => arg.show(value),
        integer => integer.to_string(),
    }
}

/// Scalar `i`'s value: the one given (a number; an `int` for an integer scalar, in its type's
/// range; a `bool` for a flag; a `str` for a choice; None for an optional one), else its
/// default; a required one missing is a `TypeError`, as Python's own; a value out of its type's
/// range a `ValueError` naming the argument.
fn scalar(op: &OpInfo, i: usize, given: Option<&Bound<'_, PyAny>>) -> PyResult<Scalar> {
    let arg = &op.scalars[i];
    let Some(value) = given else {
        return arg
            .default
            .ok_or_else(|| PyTypeError::new_err(format!("{}() missing required argument: '{}'", op.name, arg.name)));
    };
    let expected = arg.kind.expected();
    let wrong_type =
        |what: &str| PyTypeError::new_err(format!("`{}` must be {what}; got {}", arg.name, type_name(value)));
    match arg.kind {
        _ if arg.optional && value.is_none() => Ok(Scalar::Absent),
        ScalarKind::Choice(names) => {
            let name: String = value.extract().map_err(|_| wrong_type(&format!("a str ({expected})")))?;
            let index = names
                .iter()
                .position(|&n| n == name)
                .ok_or_else(|| PyValueError::new_err(format!("`{}` is {name:?}; expected {expected}", arg.name)))?;
            Ok(Scalar::Choice(index))
        }
        ScalarKind::Bool => value.extract::<bool>().map(Scalar::Bool).map_err(|_| wrong_type("a bool")),
        kind if kind.integer() => {
            if !value.is_instance_of::<PyInt>() {
                return Err(wrong_type("an int"));
            }
            let number: i128 = value.extract().map_err(|_| {
                PyValueError::new_err(format!("`{}` is {}; expected {expected}", arg.name, python_repr(value)))
            })?;
            kind.from_integer(number)
                .ok_or_else(|| PyValueError::new_err(format!("`{}` is {number}; expected {expected}", arg.name)))
        }
        _ => value.extract::<f64>().map(|v| Scalar::F32(v as f32)).map_err(|_| wrong_type("a number")),
    }
}

/// `repr(value)`, or its type's name where that fails.
fn python_repr(value: &Bound<'_, PyAny>) -> String {
    value.repr().map(|r| r.to_string()).unwrap_or_else(|_| type_name(value))
}

/// The Python function of `op`.
fn function<'py>(py: Python<'py>, op: &'static OpInfo) -> PyResult<Bound<'py, PyCFunction>> {
    let leak = |text: String| -> PyResult<&'static std::ffi::CStr> {
        let text = CString::new(text).map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(Box::leak(text.into_boxed_c_str()))
    };
    let name = leak(op.name.to_owned())?;
    let doc = leak(format!("{}\n--\n\n{}", signature(op), op.doc.trim()))?;
    PyCFunction::new_closure(py, Some(name), Some(doc), move |args, kwargs| call(op, args, kwargs).map(Bound::unbind))
}

/// One call from Python: binds the arguments, imports the tensors, allocates missing outputs,
/// runs, and returns the output (a tuple of several; None when the op works in place).
fn call<'py>(
    op: &'static OpInfo,
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = args.py();
    ferrinfer_launch::logging::experimental("the ferrinfer Python module", "its Python API may still change");
    let bound = bind(op, args, kwargs)?;
    let tensor_object = |i: usize| -> PyResult<Option<Bound<'py, PyAny>>> {
        let (first, part, parts) = group(op, i);
        let object = bound.iter().find(|(p, _)| *p == Parameter::Tensor(first)).and_then(|(_, v)| v.clone());
        match object {
            Some(object) if parts > 1 => group_part(op, first, (part, parts), &object).map(Some),
            object => Ok(object),
        }
    };
    let first = tensor_object(0)?
        .ok_or_else(|| PyTypeError::new_err(format!("{}: missing `{}`", op.name, op.tensors[0].name)))?;
    let target = Target::of(op.tensors[0].name, &first)?;
    let scalar_object = |i: usize| bound.iter().find(|(p, _)| *p == Parameter::Scalar(i)).and_then(|(_, v)| v.as_ref());
    // A per-row scalar given as a tensor: imported as the others.
    let per_row_objects: Vec<Option<&Bound<PyAny>>> =
        (0..op.scalars.len()).map(|i| scalar_object(i).filter(|v| op.scalars[i].per_row && is_tensor(v))).collect();
    let scalars = (0..op.scalars.len())
        .map(|i| match per_row_objects[i] {
            Some(_) => Ok(Scalar::Absent),
            None => scalar(op, i, scalar_object(i)),
        })
        .collect::<PyResult<Vec<Scalar>>>()?;
    let mut objects: Vec<Bound<PyAny>> = Vec::with_capacity(op.tensors.len());
    let mut input_shapes: Vec<(Extent, Vec<i64>)> = Vec::new();
    for (i, arg) in op.tensors.iter().enumerate() {
        let object = match tensor_object(i)? {
            Some(object) => object,
            None => allocate_like(&objects[op.output_source(i)], op, i, (&input_shapes, &scalars))?,
        };
        if arg.role != Role::Out {
            input_shapes.push((arg.extent, shape_of(arg.name, &object)?));
        }
        objects.push(object);
    }
    let imported = op
        .tensors
        .iter()
        .zip(&objects)
        .map(|(arg, object)| target.import(arg.name, object))
        .collect::<PyResult<Vec<_>>>()?;
    let views = imported.iter().map(Imported::view).collect::<PyResult<Vec<_>>>()?;
    let per_row_imported = op
        .scalars
        .iter()
        .zip(&per_row_objects)
        .map(|(arg, object)| object.map(|object| target.import(arg.name, object)).transpose())
        .collect::<PyResult<Vec<_>>>()?;
    let per_row_views = per_row_imported
        .iter()
        .map(|imported| imported.as_ref().map(Imported::view).transpose())
        .collect::<PyResult<Vec<_>>>()?;
    let pdl = match bound.iter().find(|(p, _)| *p == Parameter::EnablePdl).and_then(|(_, v)| v.as_ref()) {
        Some(value) if !value.is_none() => Some(value.extract::<bool>()?),
        _ => None,
    };
    let view_refs: Vec<&TensorView> = views.iter().collect();
    let per_row: Vec<Option<&TensorView>> = per_row_views.iter().map(Option::as_ref).collect();
    ferrinfer_launch::with_pdl(pdl, || op.call_per_row(&view_refs, &scalars, &per_row, target.stream()))
        .map_err(to_python)?;
    target.finish()?;
    // One output is returned as it is, several as a tuple (`merge_state`'s `(v, s)`), none as
    // None; an output with a `return_<name>` switch (decode's `return_lse`) only where it is on.
    let returned = |name: &str| {
        let switch = op.scalars.iter().position(|s| s.name.strip_prefix("return_") == Some(name));
        switch.is_none_or(|i| scalars[i] == Scalar::Bool(true))
    };
    let outputs: Vec<_> = op
        .tensors
        .iter()
        .zip(&objects)
        .filter(|(arg, _)| arg.role == Role::Out && returned(arg.name))
        .map(|(_, o)| o)
        .collect();
    match outputs.as_slice() {
        [] => Ok(py.None().into_bound(py)),
        [one] => Ok((*one).clone()),
        several => Ok(PyTuple::new(py, several.iter().copied())?.into_any()),
    }
}

/// Binds positional and keyword arguments to `op`'s parameters, as Python would (a TypeError for
/// a missing, repeated or unknown argument).
fn bind<'py>(
    op: &OpInfo,
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Vec<(Parameter, Option<Bound<'py, PyAny>>)>> {
    let parameters = parameters(op);
    if args.len() > parameters.len() {
        let message = format!("{}() takes at most {} arguments ({} given)", op.name, parameters.len(), args.len());
        return Err(PyTypeError::new_err(message));
    }
    let mut bound: Vec<(Parameter, Option<Bound<'py, PyAny>>)> = parameters.iter().map(|&p| (p, None)).collect();
    for (slot, value) in bound.iter_mut().zip(args.iter()) {
        slot.1 = Some(value);
    }
    for (key, value) in kwargs.into_iter().flat_map(|k| k.iter()) {
        let key: String = key.extract()?;
        let slot = bound.iter_mut().find(|(p, _)| {
            parameter_name(op, *p) == key || matches!(p, Parameter::Tensor(i) if op.tensors[*i].name == key)
        });
        let Some(slot) = slot else {
            return Err(PyTypeError::new_err(format!("{}() got an unexpected keyword argument '{key}'", op.name)));
        };
        if slot.1.is_some() {
            return Err(PyTypeError::new_err(format!("{}() got multiple values for argument '{key}'", op.name)));
        }
        slot.1 = Some(value);
    }
    for (parameter, value) in &mut bound {
        // `out=None` is no output given.
        if value.as_ref().is_some_and(|v| v.is_none()) && matches!(parameter, Parameter::Tensor(_)) {
            *value = None;
        }
        if let (Parameter::Tensor(i), None) = (*parameter, &value)
            && op.tensors[i].role != Role::Out
        {
            let name = parameter_name(op, *parameter);
            return Err(PyTypeError::new_err(format!("{}() missing required argument: '{name}'", op.name)));
        }
    }
    Ok(bound)
}

fn type_name(object: &Bound<'_, PyAny>) -> String {
    object.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
}

/// DLPack's device type code for CUDA memory (`kDLCUDA`).
const DLPACK_CUDA: i32 = 2;

/// torch's objects the light path compares with, looked up once (only if torch is imported).
struct Torch {
    tensor: Py<PyAny>,
    dtypes: [(Py<PyAny>, DType); 5],
    strided: Py<PyAny>,
    /// `torch._C._cuda_getCurrentRawStream(device)`: the current stream as an integer.
    raw_stream: Py<PyAny>,
    empty_like: Py<PyAny>,
}

fn torch(py: Python<'_>) -> PyResult<Option<&Torch>> {
    static TORCH: PyOnceLock<Torch> = PyOnceLock::new();
    if let Some(torch) = TORCH.get(py) {
        return Ok(Some(torch));
    }
    // Not imported by anyone yet: no argument can be a torch tensor (and we do not import it).
    if modules(py)?.get_item(intern!(py, "torch")).is_err() {
        return Ok(None);
    }
    TORCH
        .get_or_try_init(py, || -> PyResult<Torch> {
            let torch = py.import("torch")?;
            let dtype = |name: &str| torch.getattr(name).map(Bound::unbind);
            Ok(Torch {
                tensor: torch.getattr("Tensor")?.unbind(),
                dtypes: [
                    (dtype("float16")?, DType::F16),
                    (dtype("bfloat16")?, DType::Bf16),
                    (dtype("float32")?, DType::F32),
                    (dtype("int32")?, DType::I32),
                    (dtype("int64")?, DType::I64),
                ],
                strided: dtype("strided")?,
                raw_stream: torch.getattr("_C")?.getattr("_cuda_getCurrentRawStream")?.unbind(),
                empty_like: torch.getattr("empty_like")?.unbind(),
            })
        })
        .map(Some)
}

/// `sys.modules`, looked up once.
fn modules(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static MODULES: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    MODULES.get_or_try_init(py, || py.import("sys")?.getattr("modules").map(Bound::unbind)).map(|m| m.bind(py))
}

/// Whether a scalar argument is a tensor of values (a DLPack exporter of at least one dimension)
/// rather than a number. Not "whatever does not convert to a float": a one-element tensor does,
/// by reading its value — for a CUDA tensor a device sync, which also breaks graph capture.
fn is_tensor(object: &Bound<'_, PyAny>) -> bool {
    let py = object.py();
    object.hasattr(intern!(py, "__dlpack__")).unwrap_or(false)
        && object.getattr(intern!(py, "ndim")).and_then(|n| n.extract::<usize>()).map_or(true, |n| n > 0)
}

/// `object` as a torch tensor, if it is one (subclasses too).
fn as_torch<'a, 'py>(object: &Bound<'py, PyAny>, torch: Option<&'a Torch>) -> PyResult<Option<&'a Torch>> {
    Ok(match torch {
        Some(t) if object.is_instance(t.tensor.bind(object.py()))? => Some(t),
        _ => None,
    })
}

/// Where a call runs, decided by the op's first tensor: the CPU backend, or the producer's
/// current CUDA stream.
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
    /// The target of a call whose first tensor, `argument`, is `input`.
    fn of(argument: &'static str, input: &Bound<'_, PyAny>) -> PyResult<Self> {
        let torch = as_torch(input, torch(input.py())?)?;
        let cuda = match torch {
            Some(_) => torch_cuda_ordinal(argument, input)?,
            None => match dlpack_device(argument, input)? {
                (DLPACK_CUDA, ordinal) => Some(ordinal),
                _ => None,
            },
        };
        let Some(ordinal) = cuda else { return Ok(Target::Cpu) };
        let current = current_stream(input, torch, ordinal)?;
        let raw = current.unwrap_or(0);
        // SAFETY: the producer's framework owns this stream of device `ordinal` (primary context,
        // as the CUDA runtime uses) and keeps it alive across this call; 0 is the legacy stream.
        let stream = unsafe { borrowed_stream(ordinal, raw) }.map_err(to_python)?;
        Ok(Target::Cuda { stream, protocol: if raw == 0 { 1 } else { raw }, producers_stream: current.is_some() })
    }

    /// `object` without copying: torch tensors directly, others through DLPack (CUDA data for
    /// this target's stream; a tensor elsewhere is exported plainly and named in a device error).
    fn import(&self, argument: &'static str, object: &Bound<'_, PyAny>) -> PyResult<Imported> {
        if let Some(torch) = as_torch(object, torch(object.py())?)? {
            return torch_parts(argument, object, torch).map(Imported::Torch);
        }
        let stream = match self {
            Target::Cuda { protocol, .. } if dlpack_device(argument, object)?.0 == DLPACK_CUDA => Some(*protocol),
            _ => None,
        };
        Imported::dlpack(argument, object, stream)
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
    let not_dlpack = |_| not_a_tensor(argument, object, "no __dlpack_device__");
    object.call_method0(intern!(object.py(), "__dlpack_device__")).and_then(|d| d.extract()).map_err(not_dlpack)
}

/// Tensor argument `argument`'s shape; a TypeError naming it where `object` has none (a list, a
/// number, None where a tensor is due).
fn shape_of(argument: &str, object: &Bound<'_, PyAny>) -> PyResult<Vec<i64>> {
    let py = object.py();
    let shape = object.getattr(intern!(py, "shape")).map_err(|e| {
        // An exception the object's own `shape` raises is its, not ours to rename.
        if e.is_instance_of::<pyo3::exceptions::PyAttributeError>(py) {
            not_a_tensor(argument, object, "no shape")
        } else {
            e
        }
    })?;
    shape.extract().map_err(|_| not_a_tensor(argument, object, "its shape is not a sequence of ints"))
}

/// The TypeError of tensor argument `argument` given `object`, which is not one (`why`).
fn not_a_tensor(argument: &str, object: &Bound<'_, PyAny>, why: &str) -> PyErr {
    PyTypeError::new_err(format!(
        "`{argument}` is a {}, which supports neither torch's tensor API nor DLPack ({why})",
        type_name(object)
    ))
}

/// The raw `CUstream` the producer's framework currently issues work to on device `ordinal`
/// (0: PyTorch's default stream, the legacy one); `None` for producers with no notion of a
/// current stream (JAX, …).
fn current_stream(input: &Bound<'_, PyAny>, torch: Option<&Torch>, ordinal: usize) -> PyResult<Option<usize>> {
    if let Some(torch) = torch {
        return torch.raw_stream.bind(input.py()).call1((ordinal,))?.extract().map(Some);
    }
    if let Ok(cupy) = modules(input.py())?.get_item(intern!(input.py(), "cupy"))
        && input.is_instance(&cupy.getattr("ndarray")?)?
    {
        // CuPy's current stream is per device: ask with `ordinal` current.
        let device = cupy.getattr("cuda")?.call_method1("Device", (ordinal,))?;
        device.call_method0("__enter__")?;
        let stream = cupy.getattr("cuda")?.call_method0("get_current_stream").and_then(|s| s.getattr("ptr"));
        device.call_method1("__exit__", (None::<()>, None::<()>, None::<()>))?;
        return stream?.extract().map(Some);
    }
    Ok(None)
}

/// A new array for `Out` argument `out`, like its source input `first` ([`OpInfo::output_source`]:
/// the first input of its extent, else the first tensor): its shape by [`OpInfo::output_shape`]
/// of the inputs' `(extent, shape)` and the scalars (a count output's: its scalar's), `first`'s
/// device and (unless the output's dtype is fixed) dtype, from its own framework.
fn allocate_like<'py>(
    first: &Bound<'py, PyAny>,
    op: &OpInfo,
    out: usize,
    (inputs, scalars): (&[(Extent, Vec<i64>)], &[Scalar]),
) -> PyResult<Bound<'py, PyAny>> {
    let py = first.py();
    let arg = &op.tensors[out];
    let shape: Vec<i64> = first.getattr(intern!(py, "shape"))?.extract()?;
    let shapes: Vec<(Extent, &[i64])> = inputs.iter().map(|(e, s)| (*e, s.as_slice())).collect();
    let out_shape = op.output_shape(out, &shapes, scalars);
    // The output's own dtype where the table fixes it (the framework's name for it).
    let fixed = match arg.dtype {
        DTypeRule::F32 => Some("float32"),
        DTypeRule::I32 | DTypeRule::Index => Some("int32"),
        DTypeRule::Same | DTypeRule::SameOrF32 => None,
    };
    let same = out_shape == shape && fixed.is_none();
    if let Some(torch) = as_torch(first, torch(py)?)? {
        if same {
            return torch.empty_like.bind(py).call1((first,));
        }
        let kwargs = fixed.map(|name| [("dtype", py.import("torch")?.getattr(name)?)].into_py_dict(py)).transpose()?;
        return first.call_method(intern!(py, "new_empty"), (out_shape,), kwargs.as_ref());
    }
    if first.hasattr("__array_namespace__")? {
        let xp = first.call_method0("__array_namespace__")?;
        if same {
            return xp.call_method1("empty_like", (first,));
        }
        let dtype = match fixed {
            Some(name) => xp.getattr(name)?,
            None => first.getattr("dtype")?,
        };
        let kwargs = [("dtype", dtype)].into_py_dict(py)?;
        return xp.call_method("empty", (out_shape,), Some(&kwargs));
    }
    Err(PyTypeError::new_err(format!("cannot allocate an output like a {} ; pass out=", type_name(first))))
}

fn to_python(error: Error) -> PyErr {
    if error.is_dtype() { PyTypeError::new_err(error.to_string()) } else { PyValueError::new_err(error.to_string()) }
}

/// What a torch tensor is, read from its attributes.
struct TorchParts {
    argument: &'static str,
    data: usize,
    dtype: DType,
    device: Device,
    shape: Vec<i64>,
    strides: Vec<i64>,
}

/// A torch tensor's memory as ferrinfer sees it, or a typed error naming the argument.
fn torch_parts(argument: &'static str, object: &Bound<'_, PyAny>, torch: &Torch) -> PyResult<TorchParts> {
    let py = object.py();
    let dtype_object = object.getattr(intern!(py, "dtype"))?;
    let Some(&(_, dtype)) = torch.dtypes.iter().find(|(d, _)| d.bind(py).is(&dtype_object)) else {
        let found = dtype_object.str()?.to_string().trim_start_matches("torch.").to_owned();
        let expected = "float16, bfloat16, float32, int32 or int64".into();
        return Err(to_python(Error::UnsupportedDType { argument, found, expected }));
    };
    let layout_error = |reason: String| to_python(Error::UnsupportedLayout { argument, reason });
    if !object.getattr(intern!(py, "layout"))?.is(torch.strided.bind(py)) {
        return Err(layout_error("not a strided (dense) tensor".into()));
    }
    // A lazily negated view (torch's neg bit) stores the values un-negated.
    if object.call_method0(intern!(py, "is_neg"))?.extract::<bool>()? {
        return Err(layout_error("a lazily negated view (neg bit set); call `resolve_neg()` first".into()));
    }
    let device = match torch_cuda_ordinal(argument, object)? {
        Some(ordinal) => Device::Cuda(ordinal),
        None => Device::Cpu,
    };
    let shape: Vec<i64> = object.getattr(intern!(py, "shape"))?.extract()?;
    if shape.len() > MAX_DIMS {
        return Err(layout_error(format!("{} dimensions; at most {MAX_DIMS} are supported", shape.len())));
    }
    let strides: Vec<i64> = object.call_method0(intern!(py, "stride"))?.extract()?;
    let data: usize = object.call_method0(intern!(py, "data_ptr"))?.extract()?;
    Ok(TorchParts { argument, data, dtype, device, shape, strides })
}

/// A torch tensor's CUDA device ordinal, `None` on the CPU, an error naming any other device.
/// One call for a CUDA tensor (`get_device()` is -1 off CUDA: meta, MPS, … too, hence the CPU
/// check then).
fn torch_cuda_ordinal(argument: &'static str, object: &Bound<'_, PyAny>) -> PyResult<Option<usize>> {
    let py = object.py();
    let ordinal: i64 = object.call_method0(intern!(py, "get_device"))?.extract()?;
    if ordinal >= 0 {
        return Ok(Some(ordinal as usize));
    }
    if object.getattr(intern!(py, "is_cpu"))?.extract::<bool>()? {
        return Ok(None);
    }
    let kind: String = object.getattr(intern!(py, "device"))?.getattr(intern!(py, "type"))?.extract()?;
    let reason = format!("on device `{kind}`; ferrinfer runs CPU and CUDA tensors");
    Err(to_python(Error::UnsupportedLayout { argument, reason }))
}

/// A tensor taken without copying: a torch tensor's parts (alive while the caller holds the
/// object), or a DLPack export (the capsule is marked used, and the producer's deleter runs when
/// this is dropped — the DLPack ownership rule).
enum Imported {
    Torch(TorchParts),
    Dlpack { argument: &'static str, tensor: NonNull<DLManagedTensor> },
}

impl Imported {
    /// Takes `object.__dlpack__()`, passing `stream` (DLPack's stream protocol) for CUDA data.
    fn dlpack(argument: &'static str, object: &Bound<'_, PyAny>, stream: Option<usize>) -> PyResult<Self> {
        let not_dlpack = |_| {
            PyTypeError::new_err(format!("`{argument}` does not support DLPack (no __dlpack__ returning a capsule)"))
        };
        let py = object.py();
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
        Ok(Imported::Dlpack { argument, tensor: pointer.cast() })
    }

    fn view(&self) -> PyResult<TensorView<'_>> {
        match self {
            // SAFETY: the torch tensor keeps its storage alive while the call holds the object.
            Imported::Torch(p) => {
                unsafe { TensorView::from_raw_parts(p.data as *mut _, 0, p.dtype, &p.shape, &p.strides, p.device) }
                    .map_err(|e| to_python(rename(e, p.argument)))
            }
            // SAFETY: the producer keeps the memory alive until our deleter call (in Drop).
            Imported::Dlpack { argument, tensor } => {
                unsafe { view_from_dlpack(argument, &tensor.as_ref().dl_tensor) }.map_err(to_python)
            }
        }
    }
}

/// A view error, naming the argument (views are made before they know it).
fn rename(error: Error, argument: &'static str) -> Error {
    match error {
        Error::UnsupportedLayout { reason, .. } => Error::UnsupportedLayout { argument, reason },
        error => error,
    }
}

impl Drop for Imported {
    fn drop(&mut self) {
        if let Imported::Dlpack { tensor, .. } = self {
            // SAFETY: we own the managed tensor since renaming its capsule; deleter runs once.
            unsafe {
                if let Some(deleter) = tensor.as_ref().deleter {
                    deleter(tensor.as_ptr());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every op's signature: its name, each parameter once — tensors and scalars by name (an
    /// optional one with its default), outputs `=None` — and `enable_pdl=None` last. The
    /// families' own signatures are checked against FlashInfer's by the wheel's tests.
    #[test]
    fn every_signature_names_each_parameter_once_enable_pdl_last() {
        for op in ferrinfer_launch::ops() {
            let text = signature(op);
            let inner = text.strip_prefix(&format!("{}(", op.name)).and_then(|t| t.strip_suffix(')')).unwrap();
            let names: Vec<&str> = inner.split(", ").map(|p| p.split('=').next().unwrap()).collect();
            assert_eq!(names.last(), Some(&"enable_pdl"), "{text}");
            let mut unique = names.clone();
            unique.sort();
            unique.dedup();
            assert_eq!(unique.len(), names.len(), "{text}: a parameter twice");
            for parameter in parameters(op) {
                assert!(names.contains(&parameter_name(op, parameter)), "{text}");
            }
            for out in op.tensors.iter().filter(|t| t.role == Role::Out) {
                assert!(inner.contains(&format!("{}=None", out.name)), "{text}: `{}` optional", out.name);
            }
        }
    }
}
