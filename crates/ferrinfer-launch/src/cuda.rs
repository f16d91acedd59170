//! Layer 2 (the module cache) and the CUDA half of layer 4: the PTX embedded at build time is
//! loaded once per process and CUDA context, its functions looked up once, and kernels launched
//! with raw device pointers on the caller's stream. Raw pointers (no `CudaSlice` arguments) keep
//! cudarc's per-slice event tracking out of every launch, so launches can be graph-captured.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaContext, CudaFunction, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use ferrinfer_jit::CudaArch;

use crate::Error;

/// PTX per architecture, built by `build.rs` with `ferrinfer-jit`'s builder.
static EMBEDDED_PTX: &[(CudaArch, &str)] = include!(concat!(env!("OUT_DIR"), "/embedded_ptx.rs"));

/// The architectures this build carries PTX for.
pub fn embedded_archs() -> Vec<CudaArch> {
    EMBEDDED_PTX.iter().map(|(arch, _)| *arch).collect()
}

/// Number of CUDA devices; 0 when no driver can be loaded (then nothing here touches CUDA).
pub fn cuda_device_count() -> usize {
    if !driver_present() {
        return 0;
    }
    CudaContext::device_count().map_or(0, |n| n.max(0) as usize)
}

fn driver_present() -> bool {
    // SAFETY: only tries to dlopen libcuda.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// The kernels of one CUDA context, loaded once.
struct LoadedKernels {
    functions: HashMap<String, CudaFunction>,
    multiprocessors: u32,
}

/// Module cache: one entry per CUDA context (keyed by its handle), filled at most once.
fn cache() -> &'static Mutex<HashMap<usize, Arc<LoadedKernels>>> {
    static CACHE: OnceLock<Mutex<HashMap<usize, Arc<LoadedKernels>>>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

fn kernels_for(context: &Arc<CudaContext>) -> Result<Arc<LoadedKernels>, Error> {
    let mut cache = cache().lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let key = context.cu_ctx() as usize;
    if let Some(loaded) = cache.get(&key) {
        return Ok(loaded.clone());
    }
    let loaded = Arc::new(load(context)?);
    cache.insert(key, loaded.clone());
    Ok(loaded)
}

/// Loads the newest embedded PTX the device can run (PTX is forward compatible).
fn load(context: &Arc<CudaContext>) -> Result<LoadedKernels, Error> {
    let (major, minor) = context.compute_capability()?;
    let device = CudaArch { major: major as u32, minor: minor as u32 };
    let (_, source) = EMBEDDED_PTX
        .iter()
        .filter(|(arch, _)| *arch <= device)
        .max_by_key(|(arch, _)| *arch)
        .ok_or_else(|| Error::NoPtxForArch { device, built: embedded_archs() })?;
    let module = context.load_module(Ptx::from_src(*source))?;
    let functions = ferrinfer_jit::norm::entry_points()
        .map(|entry| Ok((entry.name.to_owned(), module.load_function(entry.name)?)))
        .collect::<Result<_, Error>>()?;
    let multiprocessors = context.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    Ok(LoadedKernels { functions, multiprocessors: multiprocessors as u32 })
}

/// A kernel's by-value parameter struct (`#[repr(C)]`, defined in `ferrinfer-kernels`).
#[repr(transparent)]
struct KernelParams<P>(P);

// SAFETY: P is a `#[repr(C)]` plain-data struct shared with the kernel, passed by value.
unsafe impl<P: Copy> DeviceRepr for KernelParams<P> {}

/// Launches `entry` on `stream` with `params`; `grid` gets the device's multiprocessor count.
pub(crate) fn launch<P: Copy>(
    stream: &CudaStream,
    entry: &str,
    params: P,
    grid: impl FnOnce(u32) -> u32,
    block: u32,
) -> Result<(), Error> {
    let kernels = kernels_for(stream.context())?;
    let function = &kernels.functions[entry];
    let config =
        LaunchConfig { grid_dim: (grid(kernels.multiprocessors), 1, 1), block_dim: (block, 1, 1), shared_mem_bytes: 0 };
    let params = KernelParams(params);
    // SAFETY: the caller validated every pointer and size in `params` for this kernel.
    unsafe { stream.launch_builder(function).arg(&params).launch(config)? };
    Ok(())
}
