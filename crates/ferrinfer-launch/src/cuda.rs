//! Layer 2 (the module cache) and the CUDA half of layer 4, for every op family. A module — the
//! PTX of one spec, found or built by `ferrinfer-jit` (embedded → AOT dir → disk cache → JIT) —
//! is loaded at most once per CUDA context, even under threads, and its functions looked up once.
//! Kernels are launched with raw device pointers on the caller's stream (no `CudaSlice`
//! arguments, so cudarc's per-slice event tracking stays out and launches can be graph-captured),
//! with programmatic dependent launch (PDL) where the device has it.
//!
//! A family names its modules with its own key type ([`KernelModule`]: which op, dtype, vector
//! width… — whatever its axes are) and keeps one [`ModuleCache`] of them; its entry points are
//! addressed by their index in the spec. Nothing here knows a family.

use std::cell::Cell;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys::{self, CUdevice_attribute, CUlaunchAttributeID};
use cudarc::driver::{CudaContext, CudaFunction, CudaStream, DriverError};
use cudarc::nvrtc::Ptx;
use ferrinfer_jit::{Cache, CudaArch, EmbeddedModule, JitConfig, JitSpec};

use crate::Error;

/// Modules compiled into this binary (see `build.rs`; empty unless FERRINFER_EMBED_AOT_DIR).
static EMBEDDED_MODULES: &[EmbeddedModule] = include!(concat!(env!("OUT_DIR"), "/embedded_modules.rs"));

/// `FERRINFER_ENABLE_PDL`: programmatic dependent launch on (`1`, default where the device
/// supports it) or off (`0`).
pub const ENABLE_PDL_VAR: &str = "FERRINFER_ENABLE_PDL";

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

/// Runs `f` with PDL forced on (`Some(true)`), off (`Some(false)`) or left to the default
/// (`None`: on where the device supports it, unless `FERRINFER_ENABLE_PDL=0`) for the launches
/// this thread makes meanwhile — FlashInfer's `enable_pdl` argument.
pub fn with_pdl<R>(enabled: Option<bool>, f: impl FnOnce() -> R) -> R {
    let previous = PDL_OVERRIDE.replace(enabled);
    let result = f();
    PDL_OVERRIDE.set(previous);
    result
}

thread_local! {
    static PDL_OVERRIDE: Cell<Option<bool>> = const { Cell::new(None) };
}

/// Whether a launch on a device that supports PDL uses it.
fn pdl_wanted() -> Result<bool, Error> {
    static DEFAULT: OnceLock<Result<bool, String>> = OnceLock::new();
    if let Some(forced) = PDL_OVERRIDE.get() {
        return Ok(forced);
    }
    let default = DEFAULT.get_or_init(|| match std::env::var(ENABLE_PDL_VAR) {
        Err(_) => Ok(true),
        Ok(value) => parse_switch(ENABLE_PDL_VAR, &value),
    });
    default.clone().map_err(Error::Config)
}

/// An on/off environment variable: 1/0, true/false, yes/no, on/off in any case; anything else is
/// an error naming the variable.
fn parse_switch(var: &str, value: &str) -> Result<bool, String> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(format!("{var}={value:?}: expected 1/0, true/false, yes/no or on/off")),
    }
}

/// Puts the thread's current CUDA context back on drop. cudarc makes its context current before
/// the calls it makes, and the CUDA runtime — so PyTorch — takes its current device from the
/// current context: without this, a launch on device 1 would leave the caller's torch on device
/// 1 (FlashInfer guards the device the same way).
struct CurrentContext(Option<sys::CUcontext>);

impl CurrentContext {
    fn save() -> Result<Self, Error> {
        Ok(CurrentContext(cudarc::driver::result::ctx::get_current()?))
    }

    /// Makes `context` current, to be undone on drop — or, when it already is (every call
    /// after the first on a thread that launches on one device), nothing to do either way: one
    /// driver query on a launch's path instead of two queries and a `cuCtxSetCurrent`.
    fn bind(context: &CudaContext) -> Result<Self, Error> {
        context.check_err()?;
        let current = cudarc::driver::result::ctx::get_current()?;
        if current == Some(context.cu_ctx()) {
            return Ok(CurrentContext(None));
        }
        // SAFETY: a live context (`context` holds it).
        unsafe { cudarc::driver::result::ctx::set_current(context.cu_ctx()) }?;
        Ok(CurrentContext(current))
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
        JIT.get_or_init(|| JitConfig::from_env().map(|c| Cache::new(c, EMBEDDED_MODULES)).map_err(|e| e.to_string()));
    cache.as_ref().map_err(|message| Error::Config(message.clone()))
}

/// A family's name for one of its modules: cheap to copy and hash (the spec is made only on a
/// miss).
pub(crate) trait KernelModule: Copy + Eq + Hash + Send + 'static {
    /// The module's spec for `arch` (with line info if `debug`).
    fn spec(&self, arch: CudaArch, debug: bool) -> JitSpec;
}

/// One loaded entry point: the function, the most threads a block of it can have (registers
/// permitting), and how many blocks of each size fit on a multiprocessor (asked once per size).
struct Function {
    function: CudaFunction,
    max_threads: u32,
    /// Blocks per multiprocessor by (threads, dynamic shared bytes).
    resident: Mutex<HashMap<(u32, u32), u32>>,
    /// The dynamic shared memory the function has been allowed beyond the default 48 KB.
    shared_allowed: AtomicU32,
}

/// A loaded module: its entry points, in spec order.
struct LoadedModule {
    name: String,
    functions: Vec<Function>,
}

type Slot = Arc<Mutex<Option<Arc<LoadedModule>>>>;

/// A family's loaded modules, by CUDA context and module key: one `static` per family.
pub(crate) struct ModuleCache<M> {
    slots: OnceLock<Mutex<HashMap<(usize, M), Slot>>>,
}

impl<M: KernelModule> ModuleCache<M> {
    pub const fn new() -> Self {
        ModuleCache { slots: OnceLock::new() }
    }

    /// The module `key` in `context`, loaded at most once (threads asking meanwhile wait).
    fn get(&self, context: &Arc<CudaContext>, key: M, device: &DeviceInfo) -> Result<Arc<LoadedModule>, Error> {
        let slots = self.slots.get_or_init(Default::default);
        let slot = lock(slots).entry((context.cu_ctx() as usize, key)).or_default().clone();
        let mut slot = lock(&slot);
        if let Some(module) = &*slot {
            return Ok(module.clone());
        }
        let loaded = Arc::new(load(context, &key.spec(device.arch, jit()?.config().debug), device.device)?);
        *slot = Some(loaded.clone());
        Ok(loaded)
    }
}

/// Finds or builds `spec`'s module and loads it into `context` (of a `device`).
fn load(context: &Arc<CudaContext>, spec: &JitSpec, device: CudaArch) -> Result<LoadedModule, Error> {
    let module = jit()?.module(spec)?;
    // A cubin for this very device skips the driver's compilation of the PTX (seconds while its
    // cache is cold); the PTX serves every other device, and any cubin the driver refuses.
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
            Ok(Function { function, max_threads, resident: Mutex::default(), shared_allowed: AtomicU32::new(0) })
        })
        .collect::<Result<_, Error>>()?;
    Ok(LoadedModule { name: spec.name.clone(), functions })
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What a context's device needs to know once.
#[derive(Clone, Copy)]
struct DeviceInfo {
    /// The device's compute capability.
    device: CudaArch,
    /// What modules are built for (the device's own, or the arch list's best match).
    arch: CudaArch,
    multiprocessors: u32,
    /// Most dynamic shared memory a block may be given (with the function's opt-in).
    max_shared_bytes: u32,
    /// The L2 cache's size.
    l2_bytes: u64,
    /// Programmatic dependent launch and thread-block clusters (compute capability 9.0+, on
    /// the device and in the module's target).
    supports_pdl: bool,
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
    let arch = jit()?.target_arch(device).map_err(|e| Error::Config(e.to_string()))?;
    let multiprocessors = context.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
    let max_shared_bytes =
        context.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)? as u32;
    let l2_bytes = context.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as u64;
    let supports_pdl = major >= 9 && arch.major >= 9;
    let info = DeviceInfo { device, arch, multiprocessors, max_shared_bytes, l2_bytes, supports_pdl };
    lock(devices).insert(key, info);
    Ok(info)
}

/// What to launch, decided once the device and the module are known: an entry point by its index
/// in the spec, its by-value parameter struct (`#[repr(C)]`, defined in `ferrinfer-kernels`) and
/// the geometry.
pub(crate) struct Launch<P> {
    pub entry: usize,
    pub params: P,
    /// Blocks along x and y.
    pub grid: (u32, u32),
    pub block: u32,
    /// Dynamic shared memory per block, in bytes.
    pub shared_bytes: u32,
    /// Blocks per thread-block cluster along x (1: no cluster); divides `grid.0`. Only where
    /// [`Limits::clusters`].
    pub cluster: u32,
}

/// Threads per block at most, on every CUDA device (an entry's registers may allow fewer).
pub(crate) const MAX_BLOCK: u32 = 1024;

/// What a launch configuration may use of a device and module.
pub(crate) struct Limits<'m> {
    /// What the module is built for.
    pub arch: CudaArch,
    pub multiprocessors: u32,
    /// Most dynamic shared memory a block may be given.
    pub max_shared_bytes: u32,
    /// The L2 cache's size.
    pub l2_bytes: u64,
    /// Whether launches may group blocks into clusters ([`Launch::cluster`]; sm_90).
    pub clusters: bool,
    module: &'m LoadedModule,
}

impl Limits<'_> {
    /// Most threads per block of entry `entry`; 0 if there is none.
    pub fn max_threads(&self, entry: usize) -> u32 {
        self.module.functions.get(entry).map_or(0, |f| f.max_threads)
    }

    /// Blocks of `block` threads of entry `entry`, each with `shared_bytes` of dynamic shared
    /// memory, that fit on one multiprocessor at once (registers, shared memory, threads); at
    /// least 1. The function is first opted in to `shared_bytes`: without the opt-in the
    /// occupancy API counts a block past 48 KB as not fitting at all.
    pub fn resident_blocks(&self, entry: usize, block: u32, shared_bytes: u32) -> u32 {
        let Some(function) = self.module.functions.get(entry) else { return 1 };
        let mut resident = lock(&function.resident);
        *resident.entry((block, shared_bytes)).or_insert_with(|| {
            let occupancy = allow_shared_bytes(function, shared_bytes).ok().and_then(|()| {
                function
                    .function
                    .occupancy_max_active_blocks_per_multiprocessor(block, shared_bytes as usize, None)
                    .ok()
            });
            occupancy.unwrap_or(1).max(1)
        })
    }
}

/// Launches an entry point of module `key` (from `cache`) on `stream`; the caller validated every
/// pointer and size, and `P` is the entry's parameter type. `configure` picks entry, parameters
/// and geometry within the device's and module's limits, or refuses (a forced layout the loaded
/// kernel cannot run): then nothing is launched.
pub(crate) fn launch<M: KernelModule, P: Copy>(
    stream: &CudaStream,
    cache: &ModuleCache<M>,
    key: M,
    configure: impl FnOnce(&Limits) -> Result<Launch<P>, Error>,
) -> Result<(), Error> {
    let context = stream.context();
    let _restore = CurrentContext::bind(context)?;
    let device = device_info(context)?;
    let loaded = cache.get(context, key, &device)?;
    let limits = Limits {
        arch: device.arch,
        multiprocessors: device.multiprocessors,
        max_shared_bytes: device.max_shared_bytes,
        l2_bytes: device.l2_bytes,
        clusters: device.supports_pdl,
        module: &loaded,
    };
    let kernel = configure(&limits)?;
    let missing = || Error::NoEntryPoint { module: loaded.name.clone(), entry: kernel.entry };
    let function = loaded.functions.get(kernel.entry).ok_or_else(missing)?;
    allow_shared_bytes(function, kernel.shared_bytes)?;
    let pdl = device.supports_pdl && pdl_wanted()?;
    // SAFETY: the caller validated `params` for this entry point, whose parameter type is `P`.
    unsafe { launch_raw(stream, &function.function, &kernel, pdl) }?;
    Ok(())
}

/// Dynamic shared memory past 48 KB needs the function's opt-in, given once per size increase.
fn allow_shared_bytes(function: &Function, bytes: u32) -> Result<(), Error> {
    const DEFAULT_LIMIT: u32 = 48 * 1024;
    if bytes > DEFAULT_LIMIT && bytes > function.shared_allowed.load(Ordering::Relaxed) {
        let attribute = sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
        function.function.set_attribute(attribute, bytes as i32)?;
        function.shared_allowed.fetch_max(bytes, Ordering::Relaxed);
    }
    Ok(())
}

/// `cuLaunchKernelEx` with one by-value parameter and, if `pdl`, programmatic stream
/// serialization: the kernel may start while the previous one on the stream finishes, and waits
/// for it at its `griddepcontrol.wait` (every ferrinfer kernel has one before its first read);
/// the launch's cluster dimension when it has one.
///
/// # Safety
/// `params` must be what the kernel expects, every pointer in it valid for the launch.
unsafe fn launch_raw<P>(
    stream: &CudaStream,
    function: &CudaFunction,
    kernel: &Launch<P>,
    pdl: bool,
) -> Result<(), DriverError> {
    let attribute = |id| sys::CUlaunchAttribute {
        id,
        pad: [0; 4],
        // SAFETY: a plain C union of integers; all-zero is a valid value of every member.
        value: unsafe { std::mem::zeroed() },
    };
    // A fixed array rather than a Vec: a launch is on every call's path and allocates nothing.
    let mut attributes = [attribute(CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_IGNORE); 2];
    let mut count = 0;
    if pdl {
        let serialization = &mut attributes[count];
        serialization.id = CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        serialization.value.programmaticStreamSerializationAllowed = 1;
        count += 1;
    }
    if kernel.cluster > 1 {
        let cluster = &mut attributes[count];
        cluster.id = CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        cluster.value.clusterDim.x = kernel.cluster;
        cluster.value.clusterDim.y = 1;
        cluster.value.clusterDim.z = 1;
        count += 1;
    }
    let config = sys::CUlaunchConfig {
        gridDimX: kernel.grid.0,
        gridDimY: kernel.grid.1,
        gridDimZ: 1,
        blockDimX: kernel.block,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: kernel.shared_bytes,
        hStream: stream.cu_stream(),
        attrs: attributes.as_mut_ptr(),
        numAttrs: count as u32,
    };
    let mut argument = &kernel.params as *const P as *mut std::ffi::c_void;
    // SAFETY: forwarded; the argument array holds one pointer to the by-value struct, which
    // outlives the call (the driver copies parameters at launch).
    unsafe { sys::cuLaunchKernelEx(&config, function.cu_function(), &mut argument, std::ptr::null_mut()).result() }
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

    #[test]
    fn switches_take_the_usual_spellings_and_reject_the_rest() {
        for (value, expected) in
            [("1", true), ("TRUE", true), (" yes", true), ("On", true), ("0", false), ("off", false)]
        {
            assert_eq!(parse_switch("V", value), Ok(expected), "{value:?}");
        }
        assert!(parse_switch("FERRINFER_ENABLE_PDL", "maybe").unwrap_err().contains("FERRINFER_ENABLE_PDL"));
    }

    #[test]
    fn pdl_can_be_forced_per_thread_and_scope() {
        assert!(!with_pdl(Some(false), || pdl_wanted().unwrap()));
        assert_eq!(with_pdl(Some(true), || with_pdl(Some(false), || PDL_OVERRIDE.get())), Some(false));
        assert_eq!(with_pdl(Some(true), || PDL_OVERRIDE.get()), Some(true));
        assert_eq!(PDL_OVERRIDE.get(), None, "restored after the scope");
    }
}
