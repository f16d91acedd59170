//! Layer 2 (the module cache) and the CUDA half of layer 4. A module — the PTX of one spec,
//! found or built by `ferrinfer-jit` (embedded → AOT dir → disk cache → JIT) — is loaded at most
//! once per CUDA context, even under threads, and its functions looked up once. Kernels are
//! launched with raw device pointers on the caller's stream: no `CudaSlice` arguments, so
//! cudarc's per-slice event tracking stays out of every launch and launches can be graph-captured.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaContext, CudaFunction, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use ferrinfer_jit::{Cache, CudaArch, EmbeddedPtx, JitConfig, JitSpec};
use ferrinfer_kernels::element::DType;

use crate::Error;

/// Modules compiled into this binary (see `build.rs`; empty unless FERRINFER_EMBED_AOT_DIR).
static EMBEDDED_PTX: &[EmbeddedPtx] = include!(concat!(env!("OUT_DIR"), "/embedded_ptx.rs"));

/// Number of CUDA devices; 0 when no driver can be loaded (then nothing here touches CUDA).
pub fn cuda_device_count() -> usize {
    // SAFETY: only tries to dlopen libcuda. (Linked instead, libcuda is there: see Cargo.toml.)
    #[cfg(not(feature = "cuda-dynamic-linking"))]
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return 0;
    }
    CudaContext::device_count().map_or(0, |n| n.max(0) as usize)
}

/// A stream another library owns (torch, a DLPack producer), by device ordinal and raw
/// `CUstream` handle (null: the legacy default stream), in the device's primary context — the
/// one the CUDA runtime, and so PyTorch, uses. The context is retained once per device.
///
/// # Safety
/// `raw` must be null or a live stream of device `ordinal`'s primary context, and stay alive
/// while the returned stream (or anything launched on it from here) is in use.
pub unsafe fn borrowed_stream(ordinal: usize, raw: usize) -> Result<Arc<CudaStream>, Error> {
    static CONTEXTS: OnceLock<Mutex<HashMap<usize, Arc<CudaContext>>>> = OnceLock::new();
    let mut contexts = lock(CONTEXTS.get_or_init(Default::default));
    let context = match contexts.get(&ordinal) {
        Some(context) => context.clone(),
        // First use of the device only: every Python call on CUDA tensors comes through here.
        None => {
            let count = cuda_device_count();
            if ordinal >= count {
                return Err(Error::NoSuchDevice { ordinal, count });
            }
            let _restore = CurrentContext::save()?;
            contexts.entry(ordinal).or_insert(CudaContext::new(ordinal)?).clone()
        }
    };
    // SAFETY: forwarded to the caller.
    Ok(unsafe { context.wrap_borrowed_stream(raw as cudarc::driver::sys::CUstream) })
}

/// Puts the thread's current CUDA context back on drop. cudarc makes its context current before
/// the calls it makes, and the CUDA runtime — so PyTorch — takes its current device from the
/// current context: without this, a launch on device 1 would leave the caller's torch on device
/// 1 (FlashInfer guards the device the same way).
struct CurrentContext(Option<cudarc::driver::sys::CUcontext>);

impl CurrentContext {
    fn save() -> Result<Self, Error> {
        Ok(CurrentContext(cudarc::driver::result::ctx::get_current()?))
    }
}

impl Drop for CurrentContext {
    fn drop(&mut self) {
        if let Some(context) = self.0 {
            // SAFETY: the context was current on this thread a moment ago; nothing here
            // destroys contexts. A failure leaves ours current, which is what cudarc did anyway.
            let _ = unsafe { cudarc::driver::result::ctx::set_current(context) };
        }
    }
}

/// The process's JIT cache, configured from the environment on first use.
fn jit() -> Result<&'static Cache, Error> {
    static JIT: OnceLock<Result<Cache, String>> = OnceLock::new();
    let cache =
        JIT.get_or_init(|| JitConfig::from_env().map(|c| Cache::new(c, EMBEDDED_PTX)).map_err(|e| e.to_string()));
    cache.as_ref().map_err(|message| Error::Config(message.clone()))
}

/// Which module: a family's op variant for a dtype and weight dtype (cheap to hash; the spec is
/// made only on a miss).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ModuleKey {
    pub family: &'static str,
    pub variant: u32,
    pub dtype: DType,
    pub weight: DType,
}

/// A loaded module: its functions, and the most threads a block of each can have (registers
/// permitting), by (vector width, register chunks).
struct LoadedModule {
    functions: HashMap<(u32, u32), (CudaFunction, u32)>,
}

/// What a context's device needs to know once.
#[derive(Clone, Copy)]
struct DeviceInfo {
    arch: CudaArch,
    multiprocessors: u32,
}

type Slot = Arc<Mutex<Option<Arc<LoadedModule>>>>;

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn device_info(context: &Arc<CudaContext>) -> Result<DeviceInfo, Error> {
    static DEVICES: OnceLock<Mutex<HashMap<usize, DeviceInfo>>> = OnceLock::new();
    let devices = DEVICES.get_or_init(Default::default);
    let key = context.cu_ctx() as usize;
    if let Some(info) = lock(devices).get(&key) {
        return Ok(*info);
    }
    let (major, minor) = context.compute_capability()?;
    let device = CudaArch { major: major as u32, minor: minor as u32 };
    let arch = jit()?.config().target_arch(device).map_err(|e| Error::Config(e.to_string()))?;
    let multiprocessors = context.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
    let info = DeviceInfo { arch, multiprocessors };
    lock(devices).insert(key, info);
    Ok(info)
}

/// The module for `key` in `context`, loaded at most once (threads asking meanwhile wait).
fn loaded_module(
    context: &Arc<CudaContext>,
    key: ModuleKey,
    make_spec: impl FnOnce() -> JitSpec,
) -> Result<Arc<LoadedModule>, Error> {
    static MODULES: OnceLock<Mutex<HashMap<(usize, ModuleKey), Slot>>> = OnceLock::new();
    let slot = lock(MODULES.get_or_init(Default::default)).entry((context.cu_ctx() as usize, key)).or_default().clone();
    let mut slot = lock(&slot);
    if let Some(module) = &*slot {
        return Ok(module.clone());
    }
    let spec = make_spec();
    let module = jit()?.module(&spec)?;
    // A cubin for this very device skips the driver's compilation of the PTX (seconds while its
    // cache is cold); the PTX serves every other device, and any cubin the driver refuses.
    let (major, minor) = context.compute_capability()?;
    let device = CudaArch { major: major as u32, minor: minor as u32 };
    let cubin = module.cubin(device).and_then(|image| context.load_module(Ptx::from_binary(image.to_vec())).ok());
    let cuda_module = match cubin {
        Some(loaded) => loaded,
        None => context.load_module(Ptx::from_src(module.ptx.as_str()))?,
    };
    let functions = spec
        .entry_points
        .iter()
        .map(|entry| {
            let function = cuda_module.load_function(&entry.name)?;
            let max_threads = function.max_threads_per_block()? as u32;
            Ok(((entry.vec, entry.chunks), (function, max_threads)))
        })
        .collect::<Result<_, Error>>()?;
    let loaded = Arc::new(LoadedModule { functions });
    *slot = Some(loaded.clone());
    Ok(loaded)
}

/// A kernel's by-value parameter struct (`#[repr(C)]`, defined in `ferrinfer-kernels`).
#[repr(transparent)]
struct KernelParams<P>(P);

// SAFETY: P is a `#[repr(C)]` plain-data struct shared with the kernel, passed by value.
unsafe impl<P: Copy> DeviceRepr for KernelParams<P> {}

/// What to launch, decided once the device's multiprocessor count is known.
pub(crate) struct KernelLaunch<P> {
    /// The entry point, by vector width and register chunks (0: streaming).
    pub vec: u32,
    pub chunks: u32,
    pub params: P,
    pub grid: u32,
    pub block: u32,
}

/// What a launch configuration may use of a device and module.
pub(crate) struct Limits<'m> {
    pub multiprocessors: u32,
    module: &'m LoadedModule,
}

impl Limits<'_> {
    /// Most threads per block of the entry (vector width, chunks); 0 if there is none.
    pub fn max_threads(&self, vec: u32, chunks: u32) -> u32 {
        self.module.functions.get(&(vec, chunks)).map_or(0, |(_, threads)| *threads)
    }
}

/// Launches a kernel of module `module` on `stream` (the caller validated every pointer and
/// size): `spec` makes the module's spec for an arch (debug or not) if it is not loaded yet,
/// `configure` picks entry point, parameters and geometry within the device's and module's limits.
pub(crate) fn launch<P: Copy>(
    stream: &CudaStream,
    module: ModuleKey,
    spec: impl FnOnce(CudaArch, bool) -> JitSpec,
    configure: impl FnOnce(&Limits) -> KernelLaunch<P>,
) -> Result<(), Error> {
    let _restore = CurrentContext::save()?;
    let context = stream.context();
    let device = device_info(context)?;
    let debug = jit()?.config().debug;
    let loaded = loaded_module(context, module, || spec(device.arch, debug))?;
    let kernel = configure(&Limits { multiprocessors: device.multiprocessors, module: &loaded });
    let missing = Error::NoEntryPoint { module: module.family, vec: kernel.vec, chunks: kernel.chunks };
    let (function, _) = loaded.functions.get(&(kernel.vec, kernel.chunks)).ok_or(missing)?;
    let config = LaunchConfig { grid_dim: (kernel.grid, 1, 1), block_dim: (kernel.block, 1, 1), shared_mem_bytes: 0 };
    let params = KernelParams(kernel.params);
    // SAFETY: the caller validated `params`; the entry point's parameter type is P (same spec).
    unsafe { stream.launch_builder(function).arg(&params).launch(config)? };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn borrowed_stream_names_a_device_that_does_not_exist() {
        let count = cuda_device_count();
        // SAFETY: the call fails before touching the (null) handle.
        let error = unsafe { borrowed_stream(count, 0) }.expect_err("no device past the last one");
        assert!(matches!(error, Error::NoSuchDevice { ordinal, count: c } if ordinal == count && c == count));
        assert!(error.to_string().contains(&format!("CUDA device {count} does not exist")), "{error}");
    }
}
