//! Where modules come from, in order: this process's memo → PTX embedded in the binary → an AOT
//! directory (`FERRINFER_AOT_DIR`) → the disk cache → a JIT build (unless `FERRINFER_DISABLE_JIT`).
//!
//! Disk layout under the cache directory: `ptx/<key>/` holds `kernels.ptx`, `spec.toml`,
//! `build.log` and `manifest.toml` (the PTX's own SHA-256, written last); `locks/<key>.lock`;
//! `build/<key>/` (sources of a build in progress); `target/` (cargo's, shared). Freshness is
//! by content (the key), never by file times. An entry is built in a temporary directory and
//! renamed into place under an OS file lock, which dies with its process: N processes asking for
//! one key build it once, and a process killed mid-build leaves neither a lock nor a half entry.
//! An entry whose PTX does not match its manifest is rebuilt, never loaded.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::builder::Builder;
use crate::codegen::{self, GeneratedCrate};
use crate::ptxas::{self, EntryResources};
use crate::sources::KernelSources;
use crate::{JitConfig, JitError, JitSpec, key, toolchain};

/// PTX compiled into a binary ahead of time, found by source key.
#[derive(Clone, Copy, Debug)]
pub struct EmbeddedPtx {
    pub source_key: &'static str,
    pub ptx: &'static str,
}

/// Where a module was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Embedded,
    Aot,
    Disk,
    Built,
}

/// A spec's PTX, ready to load.
#[derive(Clone, Debug)]
pub struct Module {
    pub spec: JitSpec,
    pub ptx: Arc<str>,
    pub source_key: String,
    pub origin: Origin,
}

/// `manifest.toml` of a cache entry.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Manifest {
    spec: String,
    key: String,
    source_key: String,
    toolchain: String,
    ptx_sha256: String,
    build_seconds: f64,
    #[serde(default)]
    ptxas: Vec<EntryResources>,
}

type Slot = Arc<Mutex<Option<Arc<Module>>>>;

/// One spec on its way through the disk cache: what it is, its keys, the toolchain.
#[derive(Clone, Copy)]
struct Request<'r> {
    spec: &'r JitSpec,
    generated: &'r GeneratedCrate,
    source_key: &'r str,
    key: &'r str,
    toolchain: &'r str,
}

/// The module cache (one per process is typical; tests make their own).
pub struct Cache {
    config: JitConfig,
    embedded: &'static [EmbeddedPtx],
    sources: KernelSources,
    aot_index: OnceLock<HashMap<String, PathBuf>>,
    memo: Mutex<HashMap<JitSpec, Slot>>,
}

impl Cache {
    pub fn new(config: JitConfig, embedded: &'static [EmbeddedPtx]) -> Self {
        Cache {
            config,
            embedded,
            sources: KernelSources::embedded(),
            aot_index: OnceLock::new(),
            memo: Mutex::default(),
        }
    }

    /// The same cache over other kernel sources (tests: an edited kernel).
    pub fn with_sources(mut self, sources: KernelSources) -> Self {
        self.sources = sources;
        self
    }

    pub fn config(&self) -> &JitConfig {
        &self.config
    }

    /// `(source_key, key)` of `spec`; `key` needs the nightly toolchain.
    pub fn keys(&self, spec: &JitSpec) -> Result<(String, String), JitError> {
        let source_key = key::source_key(spec, &codegen::generate(spec), &self.sources);
        let key = key::key(&source_key, toolchain::nightly_version()?);
        Ok((source_key, key))
    }

    /// The directory an entry with `key` lives in.
    pub fn entry_dir(&self, key: &str) -> PathBuf {
        self.config.cache_dir.join("ptx").join(key)
    }

    /// The module for `spec`, resolved at most once per process (threads asking meanwhile wait).
    pub fn module(&self, spec: &JitSpec) -> Result<Arc<Module>, JitError> {
        let slot = {
            let mut memo = lock(&self.memo);
            match memo.get(spec) {
                Some(slot) => slot.clone(),
                None => memo.entry(spec.clone()).or_default().clone(),
            }
        };
        let mut slot = lock(&slot);
        if let Some(module) = &*slot {
            return Ok(module.clone());
        }
        let module = Arc::new(self.resolve(spec)?);
        *slot = Some(module.clone());
        Ok(module)
    }

    fn resolve(&self, spec: &JitSpec) -> Result<Module, JitError> {
        let generated = codegen::generate(spec);
        let source_key = key::source_key(spec, &generated, &self.sources);
        let found = |origin, ptx: Arc<str>| {
            self.log(&format!("{}: {origin:?} ({})", spec.name, &source_key[..12]));
            Module { spec: spec.clone(), ptx, source_key: source_key.clone(), origin }
        };
        if let Some(e) = self.embedded.iter().find(|e| e.source_key == source_key) {
            return Ok(found(Origin::Embedded, e.ptx.into()));
        }
        if let Some(dir) = self.aot_index().get(&source_key) {
            match read_entry(dir, &source_key) {
                Some(ptx) => return Ok(found(Origin::Aot, ptx.into())),
                None => self.log(&format!("{}: AOT entry {} is damaged; ignored", spec.name, dir.display())),
            }
        }
        if self.config.disable_jit {
            let cached = toolchain::nightly_version()
                .ok()
                .and_then(|t| read_entry(&self.entry_dir(&key::key(&source_key, t)), &source_key));
            return match cached {
                Some(ptx) => Ok(found(Origin::Disk, ptx.into())),
                None => {
                    Err(JitError::JitDisabled { spec: spec.name.clone(), family: spec.family.clone(), arch: spec.arch })
                }
            };
        }
        let toolchain = toolchain::nightly_version()?;
        let key = key::key(&source_key, toolchain);
        let request = Request { spec, generated: &generated, source_key: &source_key, key: &key, toolchain };
        let (ptx, origin) = self.disk_or_build(&request)?;
        Ok(found(origin, ptx.into()))
    }

    fn disk_or_build(&self, request: &Request) -> Result<(String, Origin), JitError> {
        let Request { spec, source_key, key, .. } = *request;
        let entry = self.entry_dir(key);
        if let Some(ptx) = read_entry(&entry, source_key) {
            return Ok((ptx, Origin::Disk));
        }
        let _lock = self.lock_key(key)?;
        // Another process may have built it while we waited for the lock.
        if let Some(ptx) = read_entry(&entry, source_key) {
            return Ok((ptx, Origin::Disk));
        }
        if entry.exists() {
            self.log(&format!("{}: entry {} does not match its manifest; rebuilding", spec.name, entry.display()));
            std::fs::remove_dir_all(&entry).map_err(|e| io_error(&entry, e))?;
        }
        let ptx = self.build(request, &entry)?;
        Ok((ptx, Origin::Built))
    }

    /// An exclusive OS lock on `key`, released when the file closes — or the process dies.
    fn lock_key(&self, key: &str) -> Result<File, JitError> {
        let dir = self.config.cache_dir.join("locks");
        std::fs::create_dir_all(&dir).map_err(|source| JitError::CacheNotWritable { dir: dir.clone(), source })?;
        let path = dir.join(format!("{key}.lock"));
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|source| JitError::CacheNotWritable { dir, source })?;
        file.lock().map_err(|e| io_error(&path, e))?;
        Ok(file)
    }

    /// Builds under the lock: compile, check, write a temporary entry, rename it into place.
    fn build(&self, request: &Request, entry: &Path) -> Result<String, JitError> {
        let Request { spec, generated, source_key, key, toolchain } = *request;
        let started = Instant::now();
        let build_dir = self.config.cache_dir.join("build").join(key);
        let progress = Progress::start(format!(
            "building kernel module `{}` for {} (first use; cached in {})",
            spec.name,
            spec.arch.target_cpu(),
            self.config.cache_dir.display()
        ));
        let output =
            Builder { target_dir: self.config.target_dir.clone() }.build(spec, generated, &self.sources, &build_dir);
        progress.finish();
        let output = output?;
        let ptxas = self.ptxas_report(spec, &output.ptx, &build_dir)?;
        let seconds = started.elapsed().as_secs_f64();
        let manifest = Manifest {
            spec: spec.name.clone(),
            key: key.to_owned(),
            source_key: source_key.to_owned(),
            toolchain: toolchain.to_owned(),
            ptx_sha256: key::sha256_hex(output.ptx.source.as_bytes()),
            build_seconds: seconds,
            ptxas,
        };
        let parent = entry.parent().expect("entries live under ptx/");
        let tmp = parent.join(format!(".tmp-{key}-{}", std::process::id()));
        remove_stale_temporaries(parent, key)?;
        let write = |name: &str, contents: &str| {
            std::fs::write(tmp.join(name), contents).map_err(|e| io_error(&tmp.join(name), e))
        };
        std::fs::create_dir_all(&tmp)
            .map_err(|source| JitError::CacheNotWritable { dir: parent.to_owned(), source })?;
        write("kernels.ptx", &output.ptx.source)?;
        write("spec.toml", &spec.to_toml())?;
        write("build.log", &output.log)?;
        write("manifest.toml", &toml::to_string(&manifest).expect("a manifest serialises"))?;
        std::fs::rename(&tmp, entry).map_err(|e| io_error(entry, e))?;
        let _ = std::fs::remove_dir_all(&build_dir);
        self.log(&format!("built {} ({}) in {seconds:.2} s", spec.name, &key[..12]));
        Ok(output.ptx.source)
    }

    /// ptxas's per-entry report where ptxas is present; spills or stack reject the build.
    fn ptxas_report(&self, spec: &JitSpec, ptx: &crate::Ptx, scratch: &Path) -> Result<Vec<EntryResources>, JitError> {
        let Some(ptxas) = &self.config.ptxas else {
            return if self.config.require_ptxas {
                Err(crate::BuildError::PtxasMissing.into())
            } else {
                Ok(Vec::new())
            };
        };
        let report = ptxas::report(ptxas, ptx, &spec.name, scratch)?;
        ptxas::check(&report)?;
        Ok(report)
    }

    /// `source_key → entry directory` of the AOT directory, read once.
    fn aot_index(&self) -> &HashMap<String, PathBuf> {
        self.aot_index.get_or_init(|| self.config.aot_dir.as_deref().map(index_entries).unwrap_or_default())
    }

    fn log(&self, message: &str) {
        if self.config.verbose {
            eprintln!("ferrinfer-jit: {message}");
        }
    }
}

/// Every entry of a cache or AOT directory, by source key.
pub fn index_entries(dir: &Path) -> HashMap<String, PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir.join("ptx")) else { return HashMap::new() };
    entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter_map(|path| Some((read_manifest(&path)?.source_key, path)))
        .collect()
}

fn read_manifest(entry: &Path) -> Option<Manifest> {
    toml::from_str(&std::fs::read_to_string(entry.join("manifest.toml")).ok()?).ok()
}

/// The entry's PTX if its manifest is for `source_key` and the PTX hashes to what it records.
pub fn read_entry(entry: &Path, source_key: &str) -> Option<String> {
    let manifest = read_manifest(entry)?;
    let ptx = std::fs::read_to_string(entry.join("kernels.ptx")).ok()?;
    (manifest.source_key == source_key && key::sha256_hex(ptx.as_bytes()) == manifest.ptx_sha256).then_some(ptx)
}

/// Temporary entries of `key` left by killed builds (safe to remove: we hold the key's lock).
fn remove_stale_temporaries(parent: &Path, key: &str) -> Result<(), JitError> {
    std::fs::create_dir_all(parent).map_err(|source| JitError::CacheNotWritable { dir: parent.to_owned(), source })?;
    let prefix = format!(".tmp-{key}-");
    for entry in std::fs::read_dir(parent).map_err(|e| io_error(parent, e))?.flatten() {
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            std::fs::remove_dir_all(entry.path()).map_err(|e| io_error(&entry.path(), e))?;
        }
    }
    Ok(())
}

fn io_error(path: &Path, source: std::io::Error) -> JitError {
    JitError::Io { path: path.to_owned(), source }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Says on stderr what is being built once it has taken over a second, and how long it took.
struct Progress {
    done: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Progress {
    const AFTER: Duration = Duration::from_secs(1);

    fn start(message: String) -> Self {
        let (done, finished) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            if finished.recv_timeout(Self::AFTER).is_err() {
                eprintln!("ferrinfer-jit: {message} ...");
                let _ = finished.recv();
                eprintln!("ferrinfer-jit: done in {:.1} s", started.elapsed().as_secs_f64());
            }
        });
        Progress { done, thread }
    }

    fn finish(self) {
        let _ = self.done.send(());
        let _ = self.thread.join();
    }
}
