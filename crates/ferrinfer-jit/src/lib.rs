//! Layer 3 of ferrinfer: what to compile, and compiling it — FlashInfer's JIT, done by content.
//!
//! A [`JitSpec`] (one per module; each op family describes its own, e.g.
//! [`norm::NormModule::spec`]) becomes a tiny generated crate that instantiates the generic kernels
//! of `ferrinfer-kernels` as `extern "ptx-kernel"` entry points ([`codegen`]). Its key is a
//! SHA-256 over the spec, the generated source, the kernel sources it uses (embedded in this
//! crate at build time), the builder's flags and the exact device toolchain ([`key`], pinned in
//! the repository's `device-toolchain` file: [`toolchain`]). The [`Cache`] finds a module in the
//! binary (embedded AOT), an AOT directory, the disk cache, or builds it with the rustc-nvptx64
//! [`builder`] — once, under a per-key OS file lock — with the device toolchain's rustc run
//! directly, so no cargo configuration or environment variable of the caller's reaches it.
//!
//! This crate never touches a GPU and never names a framework: it depends on `ferrinfer-kernels`
//! and host crates that need no CUDA. Loading PTX onto a device is `ferrinfer-launch`'s job.

pub mod activation;
pub mod aot;
pub mod arch;
pub mod builder;
pub mod cache;
pub mod cascade;
mod child;
pub mod codegen;
pub mod config;
pub mod decode;
mod digest;
pub mod embed;
mod entry;
mod error;
mod fsutil;
pub mod key;
pub mod lock;
pub mod norm;
pub mod page;
pub mod ptxas;
pub mod rope;
mod rustc;
pub mod sampling;
pub mod sass;
pub mod sources;
pub mod spec;
mod sweep;
pub mod sysroot;
pub mod toolchain;

use std::path::PathBuf;

pub use arch::CudaArch;
pub use builder::Ptx;
pub use cache::{Cache, Cubin, Module, Origin};
pub use config::JitConfig;
pub use embed::EmbeddedModule;
pub use error::BuildError;
pub use spec::{EntrySpec, JitSpec};

/// An op family as layer 3 sees it: its kernel source files and the modules it declares.
#[derive(Clone, Copy, Debug)]
pub struct Family {
    pub name: &'static str,
    /// Its files in `ferrinfer-kernels/src` (besides [`sources::CORE_SOURCES`]); `name/` stands
    /// for every file under directory `name`.
    pub sources: &'static [&'static str],
    /// Every module of the family for an arch, debug or not (what AOT builds).
    pub specs: fn(CudaArch, bool) -> Vec<JitSpec>,
}

impl Family {
    /// A module of this family: its kernel sources, no constants or extra flags.
    pub fn spec(&self, name: String, arch: CudaArch, debug: bool, entry_points: Vec<EntrySpec>) -> JitSpec {
        JitSpec {
            name,
            family: self.name.into(),
            arch,
            debug,
            sources: self.sources.iter().map(|s| s.to_string()).collect(),
            constants: std::collections::BTreeMap::new(),
            flags: Vec::new(),
            entry_points,
        }
    }
}

/// Every op family. Each kernel source file is a core file or belongs to one of these (a test
/// checks it, so no file can change without changing the keys that depend on it).
pub const FAMILIES: &[Family] =
    &[norm::FAMILY, activation::FAMILY, sampling::FAMILY, cascade::FAMILY, rope::FAMILY, page::FAMILY, decode::FAMILY];

/// Why a module could not be had.
#[derive(Debug, thiserror::Error)]
pub enum JitError {
    #[error(transparent)]
    Build(#[from] BuildError),
    #[error(
        "kernel module `{spec}` is neither embedded, in an AOT directory nor in the cache, and FERRINFER_DISABLE_JIT forbids building it; build it ahead of time with `cargo xtask aot --arch {arch} --family {family} --out DIR` and run with FERRINFER_AOT_DIR=DIR{}",
        rejected_entry(rejected.as_deref())
    )]
    JitDisabled {
        spec: String,
        family: String,
        arch: CudaArch,
        /// Where there is a cache entry for it: `<path> was rejected: <why>`.
        rejected: Option<String>,
    },
    #[error(
        "kernel module `{spec}` for {arch} is neither embedded in this binary, in an AOT directory nor in the cache, and building it needs the device toolchain: {source}"
    )]
    CannotBuild { spec: String, arch: CudaArch, source: BuildError },
    #[error(
        "the kernel cache directory {dir} is not writable ({source}); make it writable, or set FERRINFER_CACHE_DIR to a writable directory"
    )]
    CacheNotWritable { dir: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Lock(#[from] lock::LockError),
    #[error("I/O error on {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{var}: {message}")]
    Config { var: &'static str, message: String },
    #[error(
        "two different specs are named `{name}` for {arch}; a spec's name, arch and debug flag identify its module, so give each spec its own name"
    )]
    SpecConflict { name: String, arch: CudaArch },
}

/// What [`JitError::JitDisabled`] adds about a cache entry that is there but was rejected.
fn rejected_entry(rejected: Option<&str>) -> String {
    let rebuild = "a run without FERRINFER_DISABLE_JIT rebuilds it";
    rejected.map(|why| format!(". Its cache entry {why}; {rebuild}")).unwrap_or_default()
}
