//! The `ferrinfer` Python module: a thin cdylib around `ferrinfer-ffi`'s `python` feature, which
//! holds the functions (this crate is part of the ffi layer). Built as an abi3 wheel by maturin
//! (`maturin build -m crates/ferrinfer-py/Cargo.toml`).

use pyo3::prelude::*;

#[pymodule]
fn ferrinfer(module: &Bound<'_, PyModule>) -> PyResult<()> {
    // The wheel's version: maturin takes the package's from this crate's too (pyproject.toml's
    // `dynamic = ["version"]`), so the two cannot drift. `add` lists it in `__all__`, which the
    // package's `__init__` re-exports (a name with `_` would not pass a bare `import *`).
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // The lib's name, `ferrinfer`: maturin names the package users import after it.
    ferrinfer_ffi::python::register(module, env!("CARGO_CRATE_NAME"))
}
