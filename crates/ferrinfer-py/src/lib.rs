//! The `ferrinfer` Python module: a thin cdylib around `ferrinfer-ffi`'s `python` feature, which
//! holds the functions (this crate is part of the ffi layer). Built as an abi3 wheel by maturin
//! (`maturin build -m crates/ferrinfer-py/Cargo.toml`).

use pyo3::prelude::*;

#[pymodule]
fn ferrinfer(module: &Bound<'_, PyModule>) -> PyResult<()> {
    ferrinfer_ffi::python::register(module)
}
