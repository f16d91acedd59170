//! The framework layer of ferrinfer: the only crate that may name a framework (candle, tch,
//! PyO3/DLPack, each behind its own feature). An adapter converts a framework tensor into a
//! `ferrinfer_launch::TensorView` without copying, calls `ferrinfer-launch` on the framework's
//! own stream and reports errors the framework's way.
//!
//! Nothing but `ferrinfer-bench` (and a Python cdylib, part of this layer) may depend on this
//! crate. Today: DLPack (`dlpack`), the exchange format the adapters build on, and the Python
//! module (`python` feature, host tensors); the candle and torch adapters are still to come.

pub mod dlpack;
#[cfg(feature = "python")]
pub mod python;

pub use ferrinfer_launch as launch;
