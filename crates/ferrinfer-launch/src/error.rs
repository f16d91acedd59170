//! The one error type of the launch layer, shared by every op family. Every variant that concerns
//! an argument names it, as the caller spelled it (`input`, `weight`, `out`, `eps`, `stream`),
//! and says what was expected. Families add no variants: their rules are stated through these
//! (a dtype an op does not take is [`Error::UnsupportedDType`], a bad scalar
//! [`Error::InvalidScalar`]). `#[non_exhaustive]`: match the kinds you handle, keep a fallback.

use cudarc::driver::DriverError;
use ferrinfer_jit::JitError;
use ferrinfer_kernels::element::DType;

use crate::Device;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("`{argument}` has dtype {found}; expected {expected} (the dtype of `{reference}`)")]
    DTypeMismatch { argument: &'static str, reference: &'static str, expected: DType, found: DType },

    /// A dtype no op of ferrinfer takes (`int32`, `float64`, …), or one this op does not.
    #[error("`{argument}` has dtype {found}; expected {expected}")]
    UnsupportedDType { argument: &'static str, found: String, expected: String },

    #[error("`{argument}` has shape {found:?}; expected {expected}")]
    ShapeMismatch { argument: &'static str, expected: String, found: Vec<i64> },

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

    #[error("`{argument}` is {value}; expected {expected}")]
    InvalidScalar { argument: &'static str, value: String, expected: String },

    /// A value of an index tensor (a page table's, read on the host) out of its range;
    /// `expected` is the rule for that element as people write it, `0 ≤ kv_indices[5] < 9`.
    #[error("{expected}, got {value}")]
    InvalidIndex { argument: &'static str, index: usize, value: i64, expected: String },

    #[error(
        "`{argument}` overlaps `{other}` in memory; expected disjoint memory (in-place is allowed only where documented, as the identical view)"
    )]
    Overlap { argument: &'static str, other: &'static str },

    #[error("`{argument}` is a read-only view; expected a writable one (TensorView::from_slice_mut / from_cuda_mut)")]
    ReadOnly { argument: &'static str },

    #[error("`{argument}`: a slice of {len} elements is too short for shape {shape:?} with strides {strides:?}")]
    OutOfBounds { argument: &'static str, len: usize, shape: Vec<usize>, strides: Vec<i64> },

    #[error("`{op}` takes {} tensors and {} scalars; it was given {} and {}", expected.0, expected.1, found.0, found.1)]
    Arity { op: &'static str, expected: (usize, usize), found: (usize, usize) },

    #[error("`{argument}` of `{op}` is one value for every row; it takes no tensor of values a row")]
    NotPerRow { op: &'static str, argument: &'static str },

    #[error("CUDA device {ordinal} does not exist; this process sees {count} CUDA device(s)")]
    NoSuchDevice { ordinal: usize, count: usize },

    #[error("kernel module unavailable: {0}")]
    Jit(#[from] JitError),

    #[error("configuration: {0}")]
    Config(String),

    #[error("kernel module `{module}` has no entry point #{entry}")]
    NoEntryPoint { module: String, entry: usize },

    #[error("CUDA driver error: {0}")]
    Cuda(#[from] DriverError),
}

impl Error {
    /// A scalar argument's bad value: `Error::invalid_scalar("eps", -1.0, "a finite number ≥ 0")`.
    pub fn invalid_scalar(argument: &'static str, value: impl std::fmt::Display, expected: impl Into<String>) -> Self {
        Error::InvalidScalar { argument, value: value.to_string(), expected: expected.into() }
    }

    /// Whether the error is about a dtype (adapters raise these as their framework's type
    /// errors: Python's `TypeError`, tch's `Kind`).
    pub fn is_dtype(&self) -> bool {
        matches!(self, Error::DTypeMismatch { .. } | Error::UnsupportedDType { .. })
    }

    /// Whether the error is about a shape or layout (tch's `Shape`).
    pub fn is_shape(&self) -> bool {
        matches!(
            self,
            Error::ShapeMismatch { .. }
                | Error::LastDimNotContiguous { .. }
                | Error::UnsupportedLayout { .. }
                | Error::TooLarge { .. }
                | Error::Misaligned { .. }
                | Error::OutOfBounds { .. }
        )
    }
}
