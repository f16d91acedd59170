//! The framework layer of ferrinfer: the only crate that may name a framework (candle, tch,
//! PyO3/DLPack, each behind its own feature). An adapter converts a framework tensor into a
//! `ferrinfer_launch::TensorView` without copying, calls `ferrinfer-launch` on the framework's
//! own stream and reports errors the framework's way.
//!
//! Nothing but `ferrinfer-bench` (and a Python cdylib, part of this layer) may depend on this
//! crate. Today: DLPack (`dlpack`), the exchange format the adapters build on, and the Python
//! module (`python` feature): any DLPack producer, CUDA tensors on the producer's current stream.
//!
//! The candle adapter (`candle` feature and module) makes every registered op a candle op (`CustomOp2`/
//! `CustomOp3`, `InplaceOp2`/`InplaceOp3`) plus helpers such as `candle::rmsnorm(&x, &w, eps)`;
//! CPU tensors run on ferrinfer's CPU backend, CUDA tensors (`candle-cuda` feature, which needs
//! nvcc to build candle) on candle's stream; errors are `candle_core::Error`s.
//!
//! The tch adapter (`torch` feature and module) takes `tch::Tensor`s: CPU or CUDA, on a stream
//! the caller names on every call (tch cannot tell PyTorch's current one), errors as
//! `tch::TchError`. Building it needs libtorch 2.11 (`source scripts/torch/libtorch.sh`;
//! docs/adapters.md).

/// What an adapter's per-op function returns: its new output tensor (the framework's `Tensor`,
/// named where the macro expands), or `()` for ops that update their input in place.
#[cfg(any(feature = "candle", feature = "torch"))]
macro_rules! returns_of {
    () => {
        ()
    };
    ($out:ident) => {
        Tensor
    };
    ($first:ident $second:ident) => {
        (Tensor, Tensor)
    };
}

#[cfg(feature = "candle")]
pub mod candle;
pub mod dlpack;
#[cfg(feature = "python")]
pub mod python;
#[cfg(feature = "torch")]
pub mod torch;

pub use ferrinfer_launch as launch;
