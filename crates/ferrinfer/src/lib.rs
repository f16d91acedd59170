//! The facade of ferrinfer: the one crate a Rust user adds. It re-exports the public API of
//! `ferrinfer-launch` (every op, [`TensorView`], [`Stream`], [`Error`], the op registry
//! [`ops()`], and `half` and `cudarc`), and with its features the framework adapters of
//! `ferrinfer-ffi`: `candle`, `torch` and `python`, as the modules of the same names.
//!
//! It adds no code of its own and sits above every layer; nothing in the workspace depends on
//! it (`cargo xtask lint-layers`).
//!
//! README.md's Rust example is a doctest of this crate (`ReadmeDoctests`), so the example a user
//! copies compiles and runs in every `cargo test`.

pub use ferrinfer_launch::*;

#[cfg(feature = "candle")]
pub use ferrinfer_ffi::candle;
#[cfg(any(feature = "candle", feature = "torch", feature = "python"))]
pub use ferrinfer_ffi::dlpack;
#[cfg(feature = "python")]
pub use ferrinfer_ffi::python;
#[cfg(feature = "torch")]
pub use ferrinfer_ffi::torch;

/// README.md's Rust snippets, compiled and run as doctests of this crate (the one users add).
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
