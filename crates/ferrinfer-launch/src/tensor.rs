//! `TensorView`: a borrowed, DLPack-shaped description of a tensor — it owns nothing and copies
//! nothing. Host views come from slices (safe); device views from cudarc slices or raw pointers.

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use ferrinfer_kernels::element::DType;

use crate::Error;

/// The most dimensions a view may have.
pub const MAX_DIMS: usize = 8;

/// Where a tensor's memory lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    Cpu,
    /// A CUDA device by ordinal.
    Cuda(usize),
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(ordinal) => write!(f, "cuda:{ordinal}"),
        }
    }
}

/// Where an op runs: the CPU backend, or a CUDA stream (the caller's; ferrinfer never picks one).
#[derive(Clone, Copy)]
pub enum Stream<'a> {
    Cpu,
    Cuda(&'a CudaStream),
}

impl Stream<'_> {
    /// The device this stream executes on.
    pub fn device(&self) -> Device {
        match self {
            Stream::Cpu => Device::Cpu,
            Stream::Cuda(stream) => Device::Cuda(stream.context().ordinal()),
        }
    }
}

/// Host element types a view can be made of; f64 conversions serve references and checks
/// (exact for every type but f64 → 16-bit floats, which round to nearest even).
pub trait HostElement: bytemuck::Pod + cudarc::driver::DeviceRepr + Send + Sync {
    const DTYPE: DType;
    fn to_f64(self) -> f64;
    /// Rounds to nearest, ties to even.
    fn from_f64(value: f64) -> Self;
}

macro_rules! host_element {
    ($($t:ty => $dtype:ident, $to:expr, $from:expr;)*) => {$(
        impl HostElement for $t {
            const DTYPE: DType = DType::$dtype;
            fn to_f64(self) -> f64 {
                $to(self)
            }
            fn from_f64(value: f64) -> Self {
                $from(value)
            }
        }
    )*};
}

host_element! {
    half::f16 => F16, half::f16::to_f64, half::f16::from_f64;
    half::bf16 => Bf16, half::bf16::to_f64, half::bf16::from_f64;
    f32 => F32, f64::from, |v: f64| v as f32;
    i32 => I32, f64::from, |v: f64| v.round_ties_even() as i32;
    i64 => I64, |v: i64| v as f64, |v: f64| v.round_ties_even() as i64;
}

/// Runs `$body` with `$t` naming the host element type ([`HostElement`]: `half::f16`,
/// `half::bf16`, `f32`, `i32`) for `$dtype`: the one dtype dispatch of code that handles host
/// values (logging, the benchmark, the tests, adapters).
#[macro_export]
macro_rules! with_host_element {
    ($dtype:expr, $t:ident => $body:expr) => {
        match $dtype {
            $crate::DType::F16 => {
                type $t = $crate::half::f16;
                $body
            }
            $crate::DType::Bf16 => {
                type $t = $crate::half::bf16;
                $body
            }
            $crate::DType::F32 => {
                type $t = f32;
                $body
            }
            $crate::DType::I32 => {
                type $t = i32;
                $body
            }
            $crate::DType::I64 => {
                type $t = i64;
                $body
            }
        }
    };
}

/// A borrowed tensor: data pointer plus byte offset, dtype, shape, strides (in elements) and
/// device, as in DLPack. `'a` is the borrow of the memory it describes.
#[derive(Clone, Debug)]
pub struct TensorView<'a> {
    data: *mut c_void,
    byte_offset: u64,
    dtype: DType,
    device: Device,
    ndim: usize,
    shape: [i64; MAX_DIMS],
    strides: [i64; MAX_DIMS],
    writable: bool,
    _borrow: PhantomData<&'a mut [u8]>,
}

// Views are plain descriptions of memory the caller already shares; moving one between threads
// moves no data.
unsafe impl Send for TensorView<'_> {}
unsafe impl Sync for TensorView<'_> {}

/// Row-major strides (in elements) for `shape`; saturating at `i64::MAX` (an empty tensor's
/// other dimensions may be as large as any).
pub fn contiguous_strides(shape: &[usize]) -> Vec<i64> {
    let mut strides = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1].saturating_mul(shape[i + 1] as i64);
    }
    strides
}

impl<'a> TensorView<'a> {
    /// A read-only view of a contiguous host slice.
    pub fn from_slice<T: HostElement>(data: &'a [T], shape: &[usize]) -> Result<Self, Error> {
        Self::from_slice_strided(data, shape, &contiguous_strides(shape))
    }

    /// A read-only view of a host slice with explicit strides (in elements).
    pub fn from_slice_strided<T: HostElement>(data: &'a [T], shape: &[usize], strides: &[i64]) -> Result<Self, Error> {
        check_fits("data", data.len(), shape, strides)?;
        let view = unsafe { Self::host(data.as_ptr() as *mut c_void, T::DTYPE, shape, strides)? };
        Ok(Self { writable: false, ..view })
    }

    /// A writable view of a contiguous host slice.
    pub fn from_slice_mut<T: HostElement>(data: &'a mut [T], shape: &[usize]) -> Result<Self, Error> {
        Self::from_slice_strided_mut(data, shape, &contiguous_strides(shape))
    }

    /// A writable view of a host slice with explicit strides (in elements).
    pub fn from_slice_strided_mut<T: HostElement>(
        data: &'a mut [T],
        shape: &[usize],
        strides: &[i64],
    ) -> Result<Self, Error> {
        check_fits("data", data.len(), shape, strides)?;
        unsafe { Self::host(data.as_mut_ptr() as *mut c_void, T::DTYPE, shape, strides) }
    }

    /// A read-only view of a CUDA slice (contiguous when `strides` is `None`).
    pub fn from_cuda<T: HostElement>(
        slice: &'a CudaSlice<T>,
        shape: &[usize],
        strides: Option<&[i64]>,
    ) -> Result<Self, Error> {
        let strides = strides.map_or_else(|| contiguous_strides(shape), <[i64]>::to_vec);
        check_fits("data", slice.len(), shape, &strides)?;
        let (pointer, _sync) = slice.device_ptr(slice.stream());
        let device = Device::Cuda(slice.ordinal());
        let view = unsafe { Self::cuda(pointer, T::DTYPE, shape, &strides, device)? };
        Ok(Self { writable: false, ..view })
    }

    /// A writable view of a CUDA slice (contiguous when `strides` is `None`).
    pub fn from_cuda_mut<T: HostElement>(
        slice: &'a mut CudaSlice<T>,
        shape: &[usize],
        strides: Option<&[i64]>,
    ) -> Result<Self, Error> {
        let strides = strides.map_or_else(|| contiguous_strides(shape), <[i64]>::to_vec);
        check_fits("data", slice.len(), shape, &strides)?;
        let device = Device::Cuda(slice.ordinal());
        let stream = slice.stream().clone();
        let (pointer, _sync) = slice.device_ptr_mut(&stream);
        unsafe { Self::cuda(pointer, T::DTYPE, shape, &strides, device) }
    }

    unsafe fn host(data: *mut c_void, dtype: DType, shape: &[usize], strides: &[i64]) -> Result<Self, Error> {
        let shape: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        unsafe { Self::from_raw_parts(data, 0, dtype, &shape, strides, Device::Cpu) }
    }

    unsafe fn cuda(
        pointer: u64,
        dtype: DType,
        shape: &[usize],
        strides: &[i64],
        device: Device,
    ) -> Result<Self, Error> {
        let shape: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        unsafe { Self::from_raw_parts(pointer as *mut c_void, 0, dtype, &shape, strides, device) }
    }

    /// A writable view of raw memory, DLPack-style. A view of no element (a dimension of 0)
    /// takes row-major strides whatever `strides` says: it addresses nothing, and frameworks
    /// give such tensors any strides (NumPy: all 0, which the ops' layout checks would refuse).
    ///
    /// # Safety
    /// For `'a`, every element the shape and strides address (from `data + byte_offset`) must be
    /// memory of `device`, valid to read and, if the view is used as an output, to write.
    pub unsafe fn from_raw_parts(
        data: *mut c_void,
        byte_offset: u64,
        dtype: DType,
        shape: &[i64],
        strides: &[i64],
        device: Device,
    ) -> Result<Self, Error> {
        if shape.len() > MAX_DIMS || strides.len() != shape.len() {
            return Err(Error::UnsupportedLayout {
                argument: "tensor",
                reason: format!(
                    "shape {shape:?} with strides {strides:?}: need equal lengths, at most {MAX_DIMS} dims"
                ),
            });
        }
        let mut view = Self {
            data,
            byte_offset,
            dtype,
            device,
            ndim: shape.len(),
            shape: [0; MAX_DIMS],
            strides: [0; MAX_DIMS],
            writable: true,
            _borrow: PhantomData,
        };
        view.shape[..shape.len()].copy_from_slice(shape);
        if shape.contains(&0) {
            let extents: Vec<usize> = shape.iter().map(|&d| d.max(1) as usize).collect();
            view.strides[..shape.len()].copy_from_slice(&contiguous_strides(&extents));
        } else {
            view.strides[..strides.len()].copy_from_slice(strides);
        }
        Ok(view)
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn device(&self) -> Device {
        self.device
    }

    pub fn shape(&self) -> &[i64] {
        &self.shape[..self.ndim]
    }

    pub fn strides(&self) -> &[i64] {
        &self.strides[..self.ndim]
    }

    /// Address of the first element (data pointer + byte offset).
    pub fn address(&self) -> u64 {
        (self.data as u64).wrapping_add(self.byte_offset)
    }

    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// Number of elements.
    pub fn numel(&self) -> i64 {
        self.shape().iter().product()
    }
}

/// Checks a slice of `len` elements holds every element `shape`/`strides` address.
fn check_fits(argument: &'static str, len: usize, shape: &[usize], strides: &[i64]) -> Result<(), Error> {
    let out_of_bounds = || Error::OutOfBounds { argument, len, shape: shape.to_vec(), strides: strides.to_vec() };
    if strides.len() != shape.len() || strides.iter().any(|&s| s < 0) {
        return Err(out_of_bounds());
    }
    if shape.contains(&0) {
        return Ok(());
    }
    let last = shape
        .iter()
        .zip(strides)
        .try_fold(0u64, |acc, (&d, &s)| (d as u64 - 1).checked_mul(s as u64).and_then(|o| acc.checked_add(o)));
    match last {
        Some(last) if last < len as u64 => Ok(()),
        _ => Err(out_of_bounds()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_strides_are_row_major() {
        assert_eq!(contiguous_strides(&[2, 3, 4]), [12, 4, 1]);
        assert_eq!(contiguous_strides(&[5]), [1]);
    }

    #[test]
    fn slices_too_short_for_their_layout_are_rejected() {
        let data = [0f32; 10];
        assert!(TensorView::from_slice(&data, &[2, 5]).is_ok());
        assert!(matches!(TensorView::from_slice(&data, &[3, 4]), Err(Error::OutOfBounds { .. })));
        assert!(matches!(TensorView::from_slice_strided(&data, &[2, 5], &[6, 1]), Err(Error::OutOfBounds { .. })));
    }

    #[test]
    fn slice_views_know_dtype_device_and_writability() {
        let mut data = [half::bf16::ZERO; 6];
        let view = TensorView::from_slice(&data, &[2, 3]).unwrap();
        assert_eq!((view.dtype(), view.device(), view.is_writable()), (DType::Bf16, Device::Cpu, false));
        assert_eq!(view.strides(), [3, 1]);
        assert!(TensorView::from_slice_mut(&mut data, &[6]).unwrap().is_writable());
    }

    #[test]
    fn a_view_of_no_element_takes_row_major_strides() {
        let data = [0f32; 1];
        let view = |shape: &[i64], strides: &[i64]| unsafe {
            TensorView::from_raw_parts(data.as_ptr() as *mut c_void, 0, DType::F32, shape, strides, Device::Cpu)
        };
        assert_eq!(view(&[3, 0, 4, 8], &[0, 0, 0, 0]).unwrap().strides(), [32, 32, 8, 1], "NumPy's strides of 0");
        assert_eq!(view(&[0, 5], &[-5, 7]).unwrap().strides(), [5, 1]);
        assert_eq!(view(&[2, 5], &[7, 1]).unwrap().strides(), [7, 1], "a view of elements keeps its own");
        assert_eq!(view(&[0, 1 << 40, 1 << 40], &[0; 3]).unwrap().strides(), [i64::MAX, 1 << 40, 1]);
    }
}
