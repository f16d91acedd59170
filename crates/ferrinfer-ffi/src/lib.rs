//! The framework layer of ferrinfer: the only crate that may name a framework (candle, tch,
//! PyO3/DLPack, each behind its own feature). An adapter converts a framework tensor into a
//! `ferrinfer_launch::TensorView` without copying, calls `ferrinfer-launch` on the framework's
//! own stream and reports errors the framework's way.
//!
//! Nothing but `ferrinfer-bench` (and a Python cdylib, part of this layer) may depend on this
//! crate. Today: DLPack (`dlpack`), the exchange format the adapters build on; the candle,
//! torch and Python adapters are still to come.

pub mod dlpack;

pub use ferrinfer_launch as launch;
