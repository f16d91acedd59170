//! The one error type of the launch layer. Every variant that concerns an argument names it, as
//! the caller spelled it (`input`, `weight`, `out`, `eps`, `stream`), and says what was expected.

use cudarc::driver::DriverError;
use ferrinfer_jit::JitError;
use ferrinfer_kernels::element::DType;

use crate::Device;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("`{argument}` has dtype {found}; expected {expected} (the dtype of `{reference}`)")]
    DTypeMismatch { argument: &'static str, reference: &'static str, expected: DType, found: DType },

    #[error("`{argument}` has shape {found:?}; expected {expected}")]
    ShapeMismatch { argument: &'static str, expected: String, found: Vec<i64> },

    #[error("`{argument}` is empty (shape {shape:?}); expected at least one element")]
    Empty { argument: &'static str, shape: Vec<i64> },

    #[error("`{argument}`: the last dimension must be contiguous (stride 1); found stride {stride}")]
    LastDimNotContiguous { argument: &'static str, stride: i64 },

    #[error("`{argument}`: unsupported layout: {reason}")]
    UnsupportedLayout { argument: &'static str, reason: String },

    #[error("`{argument}`: {what} is {value}; the kernels support at most {limit}")]
    TooLarge { argument: &'static str, what: &'static str, value: u64, limit: u64 },

    #[error("`{argument}`: address {address:#x} is not aligned to its element size ({align} bytes)")]
    Misaligned { argument: &'static str, address: u64, align: usize },

    #[error("`{argument}` is on {found}; expected {expected} (the device of `{reference}`)")]
    DeviceMismatch { argument: &'static str, reference: &'static str, expected: Device, found: Device },

    #[error("`eps` is {0}; expected a finite number ≥ 0")]
    InvalidEps(f32),

    #[error(
        "`{argument}` overlaps `{other}` in memory; expected disjoint memory (in-place is allowed only where documented, as the identical view)"
    )]
    Overlap { argument: &'static str, other: &'static str },

    #[error("`{argument}` is a read-only view; expected a writable one (TensorView::from_slice_mut / from_cuda_mut)")]
    ReadOnly { argument: &'static str },

    #[error("`{argument}`: a slice of {len} elements is too short for shape {shape:?} with strides {strides:?}")]
    OutOfBounds { argument: &'static str, len: usize, shape: Vec<usize>, strides: Vec<i64> },

    #[error("CUDA device {ordinal} does not exist; this process sees {count} CUDA device(s)")]
    NoSuchDevice { ordinal: usize, count: usize },

    #[error("kernel module unavailable: {0}")]
    Jit(#[from] JitError),

    #[error("configuration: {0}")]
    Config(String),

    #[error("the `{module}` module has no entry point for vector width {vec}, {chunks} register chunks")]
    NoEntryPoint { module: &'static str, vec: u32, chunks: u32 },

    #[error("CUDA driver error: {0}")]
    Cuda(#[from] DriverError),
}
