//! Where modules come from, in order: this process's memo → modules embedded in the binary → an AOT
//! directory (`FERRINFER_AOT_DIR`) → the disk cache → a JIT build (unless `FERRINFER_DISABLE_JIT`).
//!
//! Disk layout under the cache directory: `ptx/<key>/` (one entry, see [`crate::entry`]);
//! `locks/<key>.lock`; `build/.tmp-<key>-<pid>/` (sources of a build in progress); `sysroot/`
//! (`core` per toolchain and arch); `toolchains/` (the device toolchain's `rustc -vV`). Freshness
//! is by content (the key), never by file times. An entry is built in a temporary directory and
//! renamed into place under an OS file lock, which dies with its process: N processes asking for
//! one key build it once, and a process killed mid-build leaves neither a lock nor a half entry
//! (its temporaries go when the cache is next locked: [`crate::sweep`]). The directories a build
//! writes to are checked before it starts. An entry that fails its checks is rebuilt, never
//! loaded; a path of the cache in the wrong shape (a file where an entry directory belongs) is
//! repaired.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Instant;

use crate::builder::{BuildOutput, Builder, Progress};
use crate::codegen::{self, GeneratedCrate};
use crate::embed::EmbeddedModule;
use crate::entry::{self, CubinRecord, Expected, Manifest, NewEntry, Rejection};
use crate::lock::LockError;
use crate::ptxas::{self, Assembly, EntryResources};
use crate::sources::KernelSources;
use crate::toolchain::Toolchain;
use crate::{BuildError, CudaArch, JitConfig, JitError, JitSpec, fsutil, key, lock, sweep, sysroot};

pub use crate::entry::Cubin;

/// Where a module was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Embedded,
    Aot,
    Disk,
    Built,
}

/// A spec's PTX, ready to load, and the cubins ptxas assembled from it.
#[derive(Clone, Debug)]
pub struct Module {
    pub spec: JitSpec,
    /// The PTX text (an `Arc<String>`: a megabyte read from disk is moved in, not copied).
    pub ptx: Arc<String>,
    /// Machine code for the spec's arch, where ptxas made some (AOT builds; JIT builds with
    /// ptxas). Loading one skips the driver's compilation of the PTX (seconds, once per driver
    /// cache).
    pub cubins: Vec<Cubin>,
    pub source_key: String,
    pub origin: Origin,
}

impl Module {
    /// The cubin for a device of compute capability `device`, if there is one. Only an exact
    /// match: a cubin of another minor version may run but would be tuned for another chip, and
    /// the PTX (compiled by the driver for this one) is always there.
    pub fn cubin(&self, device: CudaArch) -> Option<Arc<[u8]>> {
        self.cubins.iter().find(|c| c.arch == device).and_then(Cubin::image)
    }
}

/// One spec's place in the memo: resolved once, read without locking afterwards.
#[derive(Default)]
struct Slot {
    module: OnceLock<Arc<Module>>,
    /// Held while resolving, so threads asking at once wait for one lookup or build.
    resolving: Mutex<()>,
}

/// Slots of one spec name, per (arch, debug).
type Variants = Vec<(CudaArch, bool, Arc<Slot>)>;

/// One spec on its way through the disk cache: what it is, its keys, the toolchain.
#[derive(Clone, Copy)]
struct Request<'r> {
    spec: &'r JitSpec,
    generated: &'r GeneratedCrate,
    source_key: &'r str,
    key: &'r str,
    toolchain: &'r Toolchain,
}

/// The module cache (one per process is typical; tests make their own).
pub struct Cache {
    config: JitConfig,
    embedded: &'static [EmbeddedModule],
    sources: KernelSources,
    aot_index: OnceLock<HashMap<String, PathBuf>>,
    /// By spec name, then arch and debug: a spec's identity (see [`Cache::module`]).
    memo: RwLock<HashMap<String, Variants>>,
    /// Treat an entry without a cubin as missing when ptxas is there (AOT builds).
    cubins_required: bool,
}

impl Cache {
    pub fn new(config: JitConfig, embedded: &'static [EmbeddedModule]) -> Self {
        Cache {
            config,
            embedded,
            sources: KernelSources::embedded(),
            aot_index: OnceLock::new(),
            memo: RwLock::default(),
            cubins_required: false,
        }
    }

    /// The same cache over other kernel sources (tests: an edited kernel).
    pub fn with_sources(mut self, sources: KernelSources) -> Self {
        self.sources = sources;
        self
    }

    /// The same cache, rebuilding entries that lack a cubin when ptxas is configured (AOT).
    pub(crate) fn requiring_cubins(mut self) -> Self {
        self.cubins_required = true;
        self
    }

    pub fn config(&self) -> &JitConfig {
        &self.config
    }

    /// The arch to use on a device of compute capability `device`: [`JitConfig::target_arch`],
    /// except that a binary with embedded modules and no `FERRINFER_CUDA_ARCH_LIST` takes the
    /// embedded archs as its list — a wheel built for 8.0, 8.9 and 9.0 then runs out of the box
    /// on an 8.6 device (the 8.0 PTX, compiled by the driver) or a 10.0 one (the 9.0 PTX).
    pub fn target_arch(&self, device: CudaArch) -> Result<CudaArch, JitError> {
        if self.config.arch_list.is_some() || self.embedded.is_empty() {
            return self.config.target_arch(device);
        }
        let mut archs: Vec<CudaArch> = self.embedded.iter().map(|e| e.arch).collect();
        archs.sort();
        archs.dedup();
        JitConfig { arch_list: Some(archs), ..self.config.clone() }.target_arch(device)
    }

    /// `(source_key, key)` of `spec`; `key` needs the device toolchain.
    pub fn keys(&self, spec: &JitSpec) -> Result<(String, String), JitError> {
        let source_key = key::source_key(spec, &codegen::generate(spec), &self.sources);
        let key = key::key(&source_key, &Toolchain::device(&self.config.sysroot_dir)?.version);
        Ok((source_key, key))
    }

    /// The directory an entry with `key` lives in.
    pub fn entry_dir(&self, key: &str) -> PathBuf {
        self.config.cache_dir.join("ptx").join(key)
    }

    /// ptxas's report of every entry point of `spec`'s module as this cache's entry records it
    /// (empty where it was built without ptxas); `None` when there is no readable entry.
    pub fn ptxas_report(&self, spec: &JitSpec) -> Option<Vec<EntryResources>> {
        let (_, key) = self.keys(spec).ok()?;
        entry::read_manifest(&self.entry_dir(&key)).ok().map(|manifest| manifest.ptxas)
    }

    /// The module for `spec`, resolved at most once per process (threads asking meanwhile wait).
    ///
    /// A spec is identified by its name, arch and debug flag — `JitSpec::name` is unique per
    /// module, as FlashInfer's module names are — so a repeated lookup costs a hash of the name,
    /// not a comparison of every entry point. Debug builds also compare the whole spec and
    /// return [`JitError::SpecConflict`] for two different specs under one identity.
    pub fn module(&self, spec: &JitSpec) -> Result<Arc<Module>, JitError> {
        let slot = self.slot(spec);
        let module = match slot.module.get() {
            Some(module) => module.clone(),
            None => self.resolve_once(&slot, spec)?,
        };
        if cfg!(debug_assertions) && module.spec != *spec {
            return Err(JitError::SpecConflict { name: spec.name.clone(), arch: spec.arch });
        }
        Ok(module)
    }

    fn slot(&self, spec: &JitSpec) -> Arc<Slot> {
        let find = |variants: &Variants| {
            variants.iter().find(|(arch, debug, _)| *arch == spec.arch && *debug == spec.debug).map(|v| v.2.clone())
        };
        if let Some(slot) = self.memo.read().unwrap_or_else(|p| p.into_inner()).get(&spec.name).and_then(find) {
            return slot;
        }
        let mut memo = self.memo.write().unwrap_or_else(|p| p.into_inner());
        let variants = memo.entry(spec.name.clone()).or_default();
        find(variants).unwrap_or_else(|| {
            let slot = Arc::new(Slot::default());
            variants.push((spec.arch, spec.debug, slot.clone()));
            slot
        })
    }

    /// Resolves `spec` into `slot` unless another thread did while this one waited; a failure
    /// is not remembered (the next call tries again).
    fn resolve_once(&self, slot: &Slot, spec: &JitSpec) -> Result<Arc<Module>, JitError> {
        let _resolving = slot.resolving.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(module) = slot.module.get() {
            return Ok(module.clone());
        }
        let module = Arc::new(self.resolve(spec)?);
        Ok(slot.module.get_or_init(|| module).clone())
    }

    fn resolve(&self, spec: &JitSpec) -> Result<Module, JitError> {
        let generated = codegen::generate(spec);
        let source_key = key::source_key(spec, &generated, &self.sources);
        let found = |origin, stored: entry::Stored| {
            self.log(&format!("{}: {origin:?} ({})", spec.name, &source_key[..12]));
            Module {
                spec: spec.clone(),
                ptx: stored.ptx,
                cubins: stored.cubins,
                source_key: source_key.clone(),
                origin,
            }
        };
        if let Some(stored) = self.embedded.iter().find(|e| e.source_key == source_key).and_then(|e| e.inflate()) {
            return Ok(found(Origin::Embedded, stored));
        }
        if let Some(stored) = self.aot_entry(spec, &source_key) {
            return Ok(found(Origin::Aot, stored));
        }
        if self.config.disable_jit {
            return match self.disk_entry_only(spec, &source_key) {
                Ok(stored) => Ok(found(Origin::Disk, stored)),
                Err(rejected) => Err(JitError::JitDisabled {
                    spec: spec.name.clone(),
                    family: spec.family.clone(),
                    arch: spec.arch,
                    rejected,
                }),
            };
        }
        let toolchain = Toolchain::device(&self.config.sysroot_dir).map_err(|source| JitError::CannotBuild {
            spec: spec.name.clone(),
            arch: spec.arch,
            source,
        })?;
        let key = key::key(&source_key, &toolchain.version);
        let request = Request { spec, generated: &generated, source_key: &source_key, key: &key, toolchain };
        let (stored, origin) = self.disk_or_build(&request)?;
        Ok(found(origin, stored))
    }

    /// The AOT directory's entry for `source_key`; a damaged one is ignored, saying why.
    fn aot_entry(&self, spec: &JitSpec, source_key: &str) -> Option<entry::Stored> {
        let dir = self.aot_index().get(source_key)?;
        let expected =
            Expected { source_key, arch: Some((spec.arch, spec.debug)), built_by: None, cubin_required: false };
        match entry::load(dir, &expected) {
            Ok(stored) => Some(stored),
            Err(rejection) => {
                eprintln!(
                    "ferrinfer-jit: ignoring AOT entry {} of `{}`: {}",
                    dir.display(),
                    spec.name,
                    reason(&rejection)
                );
                None
            }
        }
    }

    /// With JIT disabled: the disk entry if the toolchain is there to name its key; else, where
    /// there is an entry, `<path> was rejected: <why>`.
    fn disk_entry_only(&self, spec: &JitSpec, source_key: &str) -> Result<entry::Stored, Option<String>> {
        let toolchain = Toolchain::device(&self.config.sysroot_dir).map_err(|_| None)?;
        let key = key::key(source_key, &toolchain.version);
        let dir = self.entry_dir(&key);
        entry::load(&dir, &self.expected(spec, source_key, &key, toolchain)).map_err(|rejection| match rejection {
            Rejection::Missing => None,
            Rejection::Damaged(why) => Some(format!("{} was rejected: {why}", dir.display())),
        })
    }

    fn expected<'a>(
        &self,
        spec: &JitSpec,
        source_key: &'a str,
        key: &'a str,
        toolchain: &'a Toolchain,
    ) -> Expected<'a> {
        Expected {
            source_key,
            arch: Some((spec.arch, spec.debug)),
            built_by: Some((key, &toolchain.version)),
            cubin_required: self.cubins_required && self.config.ptxas.is_some(),
        }
    }

    fn disk_or_build(&self, request: &Request) -> Result<(entry::Stored, Origin), JitError> {
        let Request { spec, source_key, key, toolchain, .. } = *request;
        let entry = self.entry_dir(key);
        let expected = self.expected(spec, source_key, key, toolchain);
        if let Ok(stored) = entry::load(&entry, &expected) {
            return Ok((stored, Origin::Disk));
        }
        let _lock = self.lock_key(spec, key)?;
        // Another process may have built it while we waited for the lock.
        match entry::load(&entry, &expected) {
            Ok(stored) => return Ok((stored, Origin::Disk)),
            Err(Rejection::Missing) => self.check_writable()?,
            Err(Rejection::Damaged(why)) => {
                eprintln!(
                    "ferrinfer-jit: cache entry {} of `{}` is rejected ({why}); rebuilding",
                    entry.display(),
                    spec.name
                );
                self.check_writable()?;
                fsutil::remove_path(&entry).map_err(|e| io_error(&entry, e))?;
            }
        }
        Ok((self.build(request, &entry)?, Origin::Built))
    }

    fn locks_dir(&self) -> PathBuf {
        self.config.cache_dir.join("locks")
    }

    /// The lock file of `key`, which guards its entry's and build's temporaries too.
    fn lock_path(&self, key: &str) -> PathBuf {
        self.locks_dir().join(format!("{key}.lock"))
    }

    fn build_root(&self) -> PathBuf {
        self.config.cache_dir.join("build")
    }

    /// An exclusive OS lock on `key`, released when dropped — or when the process dies. Taking
    /// it sweeps what dead builders left.
    fn lock_key(&self, spec: &JitSpec, key: &str) -> Result<lock::Held, JitError> {
        let dir = self.locks_dir();
        fsutil::ensure_dir(&dir).map_err(|source| JitError::CacheNotWritable { dir: dir.clone(), source })?;
        let what = format!("kernel module `{}` ({})", spec.name, &key[..12]);
        let path = self.lock_path(key);
        let held = lock::acquire(&path, &what, self.config.lock_wait).map_err(|e| match e {
            LockError::Io { source, .. } => JitError::CacheNotWritable { dir, source },
            other => JitError::Lock(other),
        })?;
        self.sweep_dead_builds(&path);
        Ok(held)
    }

    /// Removes every temporary of the cache and its sysroot directory whose builder is gone,
    /// while this process holds lock `held`.
    fn sweep_dead_builds(&self, held: &Path) {
        let key_lock = |key: &str| Some(self.lock_path(key));
        let mut swept = sweep::dead_temporaries(&self.config.cache_dir.join("ptx"), key_lock, held);
        swept.extend(sweep::dead_temporaries(&self.build_root(), key_lock, held));
        swept.extend(sysroot::sweep_dead_builds(&self.config.sysroot_dir, held));
        for path in swept {
            self.log(&format!("removed {}, left by a builder that is gone", path.display()));
        }
    }

    /// Fails, naming FERRINFER_CACHE_DIR, unless a build can write its files and its entry:
    /// checked before the build, not after it.
    fn check_writable(&self) -> Result<(), JitError> {
        for dir in [self.config.cache_dir.join("ptx"), self.build_root()] {
            fsutil::check_writable(&dir).map_err(|source| JitError::CacheNotWritable { dir, source })?;
        }
        Ok(())
    }

    /// Builds under the lock: compile, check, assemble, write a temporary entry, rename it into
    /// place.
    fn build(&self, request: &Request, entry: &Path) -> Result<entry::Stored, JitError> {
        let Request { spec, generated, key, toolchain, .. } = *request;
        let started = Instant::now();
        let build_dir = fsutil::temporary(&self.build_root(), key);
        let progress = Progress::start(format!(
            "building kernel module `{}` for {} (first use; cached in {})",
            spec.name,
            spec.arch.target_cpu(),
            self.config.cache_dir.display()
        ));
        let builder =
            Builder { toolchain, sysroot_dir: self.config.sysroot_dir.clone(), lock_wait: self.config.lock_wait };
        let output = builder.build(spec, generated, &self.sources, &build_dir);
        progress.finish();
        let output = output?;
        let assembly = self.assemble(spec, &output, &build_dir)?;
        let seconds = started.elapsed().as_secs_f64();
        let manifest = self.manifest(request, &output, assembly.as_ref(), seconds);
        self.store(entry, key, spec, &output, manifest, assembly.as_ref())?;
        let _ = fsutil::remove_path(&build_dir);
        self.log(&format!("built {} ({}) in {seconds:.2} s", spec.name, &key[..12]));
        let cubins = assembly.map(|a| Cubin::in_memory(spec.arch, a.cubin)).into_iter().collect();
        Ok(entry::Stored { arch: spec.arch, ptx: Arc::new(output.ptx.source), cubins })
    }

    fn manifest(&self, request: &Request, output: &BuildOutput, assembly: Option<&Assembly>, seconds: f64) -> Manifest {
        let Request { spec, source_key, key, toolchain, .. } = *request;
        Manifest {
            spec: spec.name.clone(),
            key: key.to_owned(),
            source_key: source_key.to_owned(),
            toolchain: toolchain.version.clone(),
            arch: spec.arch,
            debug: spec.debug,
            ptx_version: output.ptx_version.to_string(),
            ptx_bytes: output.ptx.source.len() as u64,
            ptx_crc32: key::crc32_hex(output.ptx.source.as_bytes()),
            build_seconds: seconds,
            ptxas: assembly.map(|a| a.resources.clone()).unwrap_or_default(),
            cubins: assembly
                .map(|a| CubinRecord {
                    arch: spec.arch,
                    file: CubinRecord::file_name(spec.arch),
                    bytes: a.cubin.len() as u64,
                    crc32: key::crc32_hex(&a.cubin),
                    ptxas: a.ptxas_version.clone(),
                })
                .into_iter()
                .collect(),
        }
    }

    /// Writes the entry as `ptx/.tmp-<key>-<pid>/` and renames it to `entry`.
    fn store(
        &self,
        entry: &Path,
        key: &str,
        spec: &JitSpec,
        output: &BuildOutput,
        manifest: Manifest,
        assembly: Option<&Assembly>,
    ) -> Result<(), JitError> {
        let parent = entry.parent().expect("entries live under ptx/");
        fsutil::ensure_dir(parent).map_err(|source| JitError::CacheNotWritable { dir: parent.to_owned(), source })?;
        // What an earlier failed attempt of this process left (others' went when it locked).
        let tmp = fsutil::temporary(parent, key);
        fsutil::remove_path(&tmp).map_err(|e| io_error(&tmp, e))?;
        let new = NewEntry {
            manifest,
            ptx: &output.ptx.source,
            spec_toml: &spec.to_toml(),
            log: &output.log,
            cubin: assembly.map(|a| a.cubin.as_slice()),
        };
        entry::write(&tmp, new).map_err(|e| io_error(&tmp, e))?;
        std::fs::rename(&tmp, entry).map_err(|e| io_error(entry, e))
    }

    /// ptxas's report and cubin where ptxas is present; spills or stack reject the build. A
    /// ptxas too old for the arch is skipped, saying so, unless ptxas is required.
    fn assemble(&self, spec: &JitSpec, output: &BuildOutput, scratch: &Path) -> Result<Option<Assembly>, JitError> {
        let Some(ptxas) = &self.config.ptxas else {
            return if self.config.require_ptxas { Err(BuildError::PtxasMissing.into()) } else { Ok(None) };
        };
        match ptxas::assemble(ptxas, &output.ptx, &spec.name, &scratch.join("ptxas")) {
            Ok(assembly) => {
                ptxas::check(&assembly.resources)?;
                Ok(Some(assembly))
            }
            Err(e @ BuildError::PtxasTooOld { .. }) if !self.config.require_ptxas => {
                eprintln!("ferrinfer-jit: {e}; `{}` is stored without cubin or ptxas report", spec.name);
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// `source_key → entry directory` of the AOT directory, read once.
    fn aot_index(&self) -> &HashMap<String, PathBuf> {
        self.aot_index.get_or_init(|| self.config.aot_dir.as_deref().map(entry::index).unwrap_or_default())
    }

    fn log(&self, message: &str) {
        if self.config.verbose {
            eprintln!("ferrinfer-jit: {message}");
        }
    }
}

fn reason(rejection: &Rejection) -> &str {
    match rejection {
        Rejection::Missing => "it is gone",
        Rejection::Damaged(why) => why,
    }
}

/// Every entry of a cache or AOT directory, by source key.
pub fn index_entries(dir: &Path) -> HashMap<String, PathBuf> {
    entry::index(dir)
}

/// The entry's PTX and cubins if it holds `source_key` and passes its checks (files match the
/// manifest, the PTX targets the manifest's arch).
pub(crate) fn read_entry(entry: &Path, source_key: &str) -> Option<entry::Stored> {
    let expected = Expected { source_key, arch: None, built_by: None, cubin_required: false };
    entry::load(entry, &expected).ok()
}

fn io_error(path: &Path, source: std::io::Error) -> JitError {
    JitError::Io { path: path.to_owned(), source }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::dead_pid;

    #[test]
    fn locking_the_cache_sweeps_what_dead_builders_left_of_every_key() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(JitConfig::new(dir.path()), &[]);
        let spec = JitSpec {
            name: "m".into(),
            family: "f".into(),
            arch: CudaArch::HOPPER,
            debug: false,
            sources: Vec::new(),
            constants: Default::default(),
            flags: Vec::new(),
            entry_points: Vec::new(),
        };
        let (locked, other) = ("a".repeat(64), "b".repeat(64));
        let (dead, own) = (dead_pid(), std::process::id());
        let at = |path: String| dir.path().join(path);
        let garbage = [
            at(format!("ptx/.tmp-{locked}-{dead}")),
            at(format!("ptx/.tmp-{other}-{dead}")),
            at(format!("build/.tmp-{other}-{dead}")),
            at(format!("sysroot/.tmp-nightly-2026-05-20-sm_90-0f1e2d3c-{dead}")),
            at(format!("sysroot/toolchains/.tmp-0f1e.toml-{dead}")),
        ];
        let kept = [at(format!("ptx/.tmp-{other}-{own}")), at(format!("ptx/{other}"))];
        for path in garbage.iter().chain(&kept) {
            std::fs::create_dir_all(path.join("sub")).unwrap();
        }
        // No build follows: taking the lock is what sweeps.
        let _held = cache.lock_key(&spec, &locked).unwrap();
        for path in &garbage {
            assert!(!path.exists(), "{} is left", path.display());
        }
        for path in &kept {
            assert!(path.exists(), "{} was removed", path.display());
        }
    }
}
