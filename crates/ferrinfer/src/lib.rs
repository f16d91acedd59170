//! The facade of ferrinfer: the one crate a Rust user adds. It re-exports the public API of
//! `ferrinfer-launch` (every op, [`TensorView`], [`Stream`], [`Error`], the op registry
//! [`ops()`], and `half` and `cudarc`), and with its features the framework adapters of
//! `ferrinfer-ffi`: `candle`, `torch` and `python`, as the modules of the same names.
//!
//! It adds no code of its own and sits above every layer; nothing in the workspace depends on
//! it (`cargo xtask lint-layers`).
//!
//! ```
//! use ferrinfer::half::bf16;
//! use ferrinfer::{Stream, TensorView, rmsnorm};
//!
//! let x = vec![bf16::from_f32(1.0); 4 * 4096];
//! let w = vec![bf16::from_f32(1.0); 4096];
//! let mut y = vec![bf16::ZERO; 4 * 4096];
//! rmsnorm(
//!     &TensorView::from_slice(&x, &[4, 4096])?,
//!     &TensorView::from_slice(&w, &[4096])?,
//!     &mut TensorView::from_slice_mut(&mut y, &[4, 4096])?,
//!     1e-6,
//!     Stream::Cpu, // or Stream::Cuda(&stream) for device tensors
//! )?;
//! assert!(y.iter().all(|v| (v.to_f32() - 1.0).abs() < 1e-2));
//! # Ok::<(), ferrinfer::Error>(())
//! ```

pub use ferrinfer_launch::*;

#[cfg(feature = "candle")]
pub use ferrinfer_ffi::candle;
#[cfg(any(feature = "candle", feature = "torch", feature = "python"))]
pub use ferrinfer_ffi::dlpack;
#[cfg(feature = "python")]
pub use ferrinfer_ffi::python;
#[cfg(feature = "torch")]
pub use ferrinfer_ffi::torch;
