//! DLPack, the tensor-exchange ABI every framework speaks (torch, JAX, NumPy, CuPy, TVM-FFI):
//! `#[repr(C)]` mirrors of `dlpack.h` (v0.8/v1 `DLTensor`, `DLManagedTensor`), their layout
//! pinned by tests, and conversions to and from `ferrinfer_launch::TensorView` without copying.

use std::ffi::c_void;

use ferrinfer_launch::{DType, Device, Error, TensorView, contiguous_strides};

/// `DLDeviceType` values ferrinfer understands.
pub const DL_CPU: i32 = 1;
pub const DL_CUDA: i32 = 2;
/// Pinned host memory: readable by the CPU backend.
pub const DL_CUDA_HOST: i32 = 3;

/// `DLDataTypeCode` values ferrinfer understands.
pub const DL_INT: u8 = 0;
pub const DL_FLOAT: u8 = 2;
pub const DL_BFLOAT: u8 = 4;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLDevice {
    pub device_type: i32,
    pub device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

#[repr(C)]
#[derive(Debug)]
pub struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    /// May be null: compact row-major.
    pub strides: *mut i64,
    pub byte_offset: u64,
}

#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensor {
    pub dl_tensor: DLTensor,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// A DLPack dtype as ferrinfer's, or an error naming the argument.
pub fn dtype_from_dlpack(argument: &'static str, dtype: DLDataType) -> Result<DType, Error> {
    match (dtype.code, dtype.bits, dtype.lanes) {
        (DL_FLOAT, 16, 1) => Ok(DType::F16),
        (DL_BFLOAT, 16, 1) => Ok(DType::Bf16),
        (DL_FLOAT, 32, 1) => Ok(DType::F32),
        (DL_INT, 32, 1) => Ok(DType::I32),
        (DL_INT, 64, 1) => Ok(DType::I64),
        _ => {
            Err(Error::UnsupportedDType { argument, found: dlpack_dtype_name(dtype), expected: EXPECTED_DTYPES.into() })
        }
    }
}

/// What ops accept, as the frameworks spell it (int32 only where an op takes integers: each op
/// says so when it refuses one).
const EXPECTED_DTYPES: &str = "float16, bfloat16, float32, int32 or int64";

/// A DLPack dtype as NumPy and torch name it (`int32`, `float64`, `uint8`, `bool`, …), with the
/// lane count when it is a vector type.
fn dlpack_dtype_name(dtype: DLDataType) -> String {
    let kind = match dtype.code {
        DL_INT => "int",
        1 => "uint",
        DL_FLOAT => "float",
        3 => "opaque_handle",
        DL_BFLOAT => "bfloat",
        5 => "complex",
        6 => "bool",
        code => return format!("DLPack type code {code} ({} bits)", dtype.bits),
    };
    let name = if kind == "bool" { "bool".to_owned() } else { format!("{kind}{}", dtype.bits) };
    if dtype.lanes == 1 { name } else { format!("{name}x{}", dtype.lanes) }
}

/// ferrinfer's dtype as DLPack's.
pub fn dtype_to_dlpack(dtype: DType) -> DLDataType {
    match dtype {
        DType::F16 => DLDataType { code: DL_FLOAT, bits: 16, lanes: 1 },
        DType::Bf16 => DLDataType { code: DL_BFLOAT, bits: 16, lanes: 1 },
        DType::F32 => DLDataType { code: DL_FLOAT, bits: 32, lanes: 1 },
        DType::I32 => DLDataType { code: DL_INT, bits: 32, lanes: 1 },
        DType::I64 => DLDataType { code: DL_INT, bits: 64, lanes: 1 },
    }
}

fn device_from_dlpack(argument: &'static str, device: DLDevice) -> Result<Device, Error> {
    match device.device_type {
        DL_CPU | DL_CUDA_HOST => Ok(Device::Cpu),
        DL_CUDA if device.device_id >= 0 => Ok(Device::Cuda(device.device_id as usize)),
        other => Err(Error::UnsupportedLayout {
            argument,
            reason: format!(
                "DLPack device type {other} (id {}); expected CPU (1), CUDA (2) or CUDA host (3)",
                device.device_id
            ),
        }),
    }
}

/// A writable view of a DLPack tensor (no copy). Null strides mean compact row-major.
///
/// # Safety
/// `tensor` must be a valid `DLTensor` whose memory stays alive and unaliased by writers other
/// than ferrinfer for `'a`.
pub unsafe fn view_from_dlpack<'a>(argument: &'static str, tensor: &'a DLTensor) -> Result<TensorView<'a>, Error> {
    let dtype = dtype_from_dlpack(argument, tensor.dtype)?;
    let device = device_from_dlpack(argument, tensor.device)?;
    let ndim = usize::try_from(tensor.ndim)
        .map_err(|_| Error::UnsupportedLayout { argument, reason: format!("ndim {}; expected ≥ 0", tensor.ndim) })?;
    let shape: &[i64] = if ndim == 0 { &[] } else { unsafe { std::slice::from_raw_parts(tensor.shape, ndim) } };
    let strides = if tensor.strides.is_null() {
        let dims: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
        contiguous_strides(&dims)
    } else {
        unsafe { std::slice::from_raw_parts(tensor.strides, ndim) }.to_vec()
    };
    unsafe { TensorView::from_raw_parts(tensor.data, tensor.byte_offset, dtype, shape, &strides, device) }
}

/// A `DLTensor` describing `view`, borrowing the shape and strides of `dims` (which must
/// outlive the result).
pub fn view_to_dlpack(view: &TensorView, dims: &mut DlpackDims) -> DLTensor {
    dims.shape = view.shape().to_vec();
    dims.strides = view.strides().to_vec();
    let device = match view.device() {
        Device::Cpu => DLDevice { device_type: DL_CPU, device_id: 0 },
        Device::Cuda(ordinal) => DLDevice { device_type: DL_CUDA, device_id: ordinal as i32 },
    };
    DLTensor {
        data: view.address() as *mut c_void,
        device,
        ndim: dims.shape.len() as i32,
        dtype: dtype_to_dlpack(view.dtype()),
        shape: dims.shape.as_mut_ptr(),
        strides: dims.strides.as_mut_ptr(),
        byte_offset: 0,
    }
}

/// Storage for a `DLTensor`'s shape and strides.
#[derive(Default, Debug)]
pub struct DlpackDims {
    shape: Vec<i64>,
    strides: Vec<i64>,
}

#[cfg(test)]
mod tests {
    use std::mem::{offset_of, size_of};

    use super::*;

    /// The offsets and sizes of dlpack.h on a 64-bit target.
    #[test]
    fn dlpack_layout_matches_the_c_header() {
        assert_eq!((size_of::<DLDevice>(), size_of::<DLDataType>()), (8, 4));
        assert_eq!(offset_of!(DLTensor, data), 0);
        assert_eq!(offset_of!(DLTensor, device), 8);
        assert_eq!(offset_of!(DLTensor, ndim), 16);
        assert_eq!(offset_of!(DLTensor, dtype), 20);
        assert_eq!(offset_of!(DLTensor, shape), 24);
        assert_eq!(offset_of!(DLTensor, strides), 32);
        assert_eq!(offset_of!(DLTensor, byte_offset), 40);
        assert_eq!(size_of::<DLTensor>(), 48);
        assert_eq!(offset_of!(DLManagedTensor, manager_ctx), 48);
        assert_eq!(offset_of!(DLManagedTensor, deleter), 56);
        assert_eq!(size_of::<DLManagedTensor>(), 64);
    }

    #[test]
    fn dlpack_round_trip_keeps_pointer_shape_strides_dtype_device() {
        let mut data = vec![half::bf16::ZERO; 3 * 10];
        let view = TensorView::from_slice_strided_mut(&mut data, &[3, 8], &[10, 1]).unwrap();
        let mut dims = DlpackDims::default();
        let tensor = view_to_dlpack(&view, &mut dims);
        let back = unsafe { view_from_dlpack("x", &tensor) }.unwrap();
        assert_eq!((back.address(), back.shape(), back.strides()), (view.address(), view.shape(), view.strides()));
        assert_eq!((back.dtype(), back.device()), (DType::Bf16, Device::Cpu));
    }

    #[test]
    fn dlpack_null_strides_are_row_major_and_byte_offset_is_kept() {
        let mut data = [0f32; 12];
        let mut shape = [3i64, 4];
        let tensor = DLTensor {
            data: data.as_mut_ptr().cast(),
            device: DLDevice { device_type: DL_CUDA, device_id: 1 },
            ndim: 2,
            dtype: DLDataType { code: DL_FLOAT, bits: 32, lanes: 1 },
            shape: shape.as_mut_ptr(),
            strides: std::ptr::null_mut(),
            byte_offset: 16,
        };
        let view = unsafe { view_from_dlpack("x", &tensor) }.unwrap();
        assert_eq!((view.strides(), view.device()), (&[4i64, 1][..], Device::Cuda(1)));
        assert_eq!(view.address(), data.as_ptr() as u64 + 16);
    }

    #[test]
    fn dlpack_unsupported_dtypes_and_devices_name_the_argument() {
        let int32 = DLDataType { code: DL_INT, bits: 32, lanes: 1 };
        assert_eq!(dtype_from_dlpack("top_k", int32).unwrap(), DType::I32, "int32: per-row `top_k`");
        let int64 = DLDataType { code: DL_INT, bits: 64, lanes: 1 };
        assert_eq!(dtype_from_dlpack("seed", int64).unwrap(), DType::I64, "int64: per-row `seed`");
        let uint32 = DLDataType { code: 1, bits: 32, lanes: 1 }; // kDLUInt
        let err = dtype_from_dlpack("input", uint32).unwrap_err();
        assert!(
            err.is_dtype()
                && err.to_string() == "`input` has dtype uint32; expected float16, bfloat16, float32, int32 or int64",
            "{err}"
        );
        let f64x2 = DLDataType { code: DL_FLOAT, bits: 64, lanes: 2 };
        assert!(dtype_from_dlpack("x", f64x2).unwrap_err().to_string().contains("float64x2"));
        let int8 = DLDataType { code: DL_INT, bits: 8, lanes: 1 };
        let err = dtype_from_dlpack("weight", int8).unwrap_err().to_string();
        assert_eq!(err, "`weight` has dtype int8; expected float16, bfloat16, float32, int32 or int64");
        let rocm = DLDevice { device_type: 10, device_id: 0 };
        assert!(device_from_dlpack("input", rocm).unwrap_err().to_string().contains("device type 10"));
    }
}
