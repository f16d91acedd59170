//! The `ferrinfer` Python module: a thin cdylib around `ferrinfer-ffi`'s `python` feature, which
//! holds the functions (this crate is part of the ffi layer). Built as an abi3 wheel by maturin
//! (`maturin build -m crates/ferrinfer-py/Cargo.toml`).

use std::num::NonZeroU64;

use pyo3::prelude::*;

#[pymodule]
fn ferrinfer(module: &Bound<'_, PyModule>) -> PyResult<()> {
    // The wheel's version: maturin takes the package's from this crate's too (pyproject.toml's
    // `dynamic = ["version"]`), so the two cannot drift. `add` lists it in `__all__`, which the
    // package's `__init__` re-exports (a name with `_` would not pass a bare `import *`).
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    module.add_function(wrap_pyfunction!(_decode_plan, module)?)?;
    module.add_function(wrap_pyfunction!(_decode_plan_capacity, module)?)?;
    // The lib's name, `ferrinfer`: maturin names the package users import after it.
    ferrinfer_ffi::python::register(module, env!("CARGO_CRATE_NAME"))
}

/// `ferrinfer_launch::decode::plan` for the decode wrapper's `plan` (python/ferrinfer/_decode.py):
/// the work items of requests of `kv_lengths` keys, `(work, work_indptr)` as flat lists; items of
/// `fixed_split_keys` keys where given, whole requests with `disable_split`, else the planner's.
#[pyfunction]
#[pyo3(signature = (kv_lengths, kv_heads, multiprocessors, fixed_split_keys=None, disable_split=false))]
fn _decode_plan(
    kv_lengths: Vec<u64>,
    kv_heads: u32,
    multiprocessors: u32,
    fixed_split_keys: Option<NonZeroU64>,
    disable_split: bool,
) -> (Vec<i32>, Vec<i32>) {
    use ferrinfer_ffi::launch::decode::{Split, plan};
    let split = match (disable_split, fixed_split_keys) {
        (true, _) => Split::Disabled,
        (false, Some(keys)) => Split::Fixed { keys },
        (false, None) => Split::Auto { multiprocessors },
    };
    plan(&kv_lengths, kv_heads, split)
}

/// `ferrinfer_launch::decode::plan_capacity`: the most work items a plan of `batch` requests has
/// on `multiprocessors`, the padded size of a CUDA-graph wrapper's plan tensors.
#[pyfunction]
fn _decode_plan_capacity(batch: usize, multiprocessors: u32) -> usize {
    ferrinfer_ffi::launch::decode::plan_capacity(batch, multiprocessors)
}
