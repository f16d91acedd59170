//! A private sysroot per (device toolchain, arch): `core` built from the toolchain's rust-src
//! with the spec's `-C target-cpu` and the flags cargo's `-Zbuild-std=core` uses, beside an empty
//! `compiler_builtins` (rustc links one into every `#![no_std]` crate; PTX never calls it — an
//! unresolved call is rejected anyway — so an empty one gives the same PTX and needs no build
//! script of the real one's). Built once, under a lock, in a temporary directory renamed into
//! place: `<sysroot_dir>/<toolchain>-<sm_XY>-<hash>/lib/rustlib/nvptx64-nvidia-cuda/lib/`. The
//! kernels crate's rlib, which every module of an arch links, is built once the same way
//! ([`Shared`], used by [`crate::builder`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::digest::hex;
use crate::error::BuildError;
use crate::lock::LockError;
use crate::rustc::{CODEGEN_FLAGS, Progress, TARGET, run};
use crate::toolchain::{self, Toolchain};
use crate::{CudaArch, fsutil, lock, sweep};

/// Flags `core` gets beyond [`CODEGEN_FLAGS`] and the target CPU: what cargo adds for the
/// standard library's crates.
pub const CORE_FLAGS: &[&str] = &["-Zforce-unstable-if-unmarked", "--cap-lints=allow", "-Cmetadata=ferrinfer-core"];

/// The `compiler_builtins` every no_std crate links (see the module documentation).
pub const COMPILER_BUILTINS: &str = "#![no_std]\n#![feature(compiler_builtins)]\n#![compiler_builtins]\n";

/// What `core`'s paths are called in the PTX of debug builds (not the installing user's home).
const REMAPPED_LIBRARY: &str = "/rust/library";

/// Marker written last into a finished sysroot.
const COMPLETE: &str = "complete";

/// Everything a sysroot's contents depend on besides the toolchain and arch (hashed into its
/// directory name and into every module key).
pub fn recipe() -> String {
    format!("sysroot v1\n{}\n{}\n{COMPILER_BUILTINS}", CODEGEN_FLAGS.join(" "), CORE_FLAGS.join(" "))
}

/// The sysroot for `arch`, built now if it is not there yet — after waiting at most `lock_wait`
/// (`None`: as long as it takes) for another process building it.
pub fn core_sysroot(
    toolchain: &Toolchain,
    arch: CudaArch,
    sysroot_dir: &Path,
    lock_wait: Option<Duration>,
) -> Result<PathBuf, BuildError> {
    let hash = Sha256::new().chain_update(&toolchain.version).chain_update(arch.target_cpu()).chain_update(recipe());
    let name = format!("{}-{}-{}", toolchain.name, arch.target_cpu(), hex(&hash.finalize()[..8]));
    let shared = Shared {
        name,
        what: format!("the `core` build for {}", arch.target_cpu()),
        progress: format!(
            "building `core` for {} with {} (once per toolchain and architecture; cached in {})",
            arch.target_cpu(),
            toolchain.name,
            sysroot_dir.display()
        ),
    };
    shared.get_or_build(sysroot_dir, lock_wait, |root| build(toolchain, arch, root))
}

/// A directory of `sysroot_dir` that every module build of a toolchain and arch shares (`core`'s
/// sysroot, the kernels crate's rlib): built once, under the lock `<name>.lock`, into a temporary
/// directory renamed into place with a marker written last.
pub(crate) struct Shared {
    /// The directory's name (what its contents depend on, hashed in).
    pub name: String,
    /// What it is, for a lock error ("the `core` build for sm_90").
    pub what: String,
    /// The note on stderr while it builds.
    pub progress: String,
}

impl Shared {
    /// `<sysroot_dir>/<name>`, made by `build` (given the temporary directory to fill) unless it
    /// is there — after waiting at most `lock_wait` for another process building it.
    pub(crate) fn get_or_build(
        &self,
        sysroot_dir: &Path,
        lock_wait: Option<Duration>,
        build: impl FnOnce(&Path) -> Result<(), BuildError>,
    ) -> Result<PathBuf, BuildError> {
        let dir = sysroot_dir.join(&self.name);
        if dir.join(COMPLETE).is_file() {
            return Ok(dir);
        }
        fsutil::ensure_dir(sysroot_dir).map_err(BuildError::io(sysroot_dir))?;
        let lock_path = lock_path(sysroot_dir, &self.name);
        let _lock = lock::acquire(&lock_path, &self.what, lock_wait).map_err(|e| match e {
            LockError::Io { path, source } => BuildError::Io { path, source },
            other => BuildError::Lock(other),
        })?;
        sweep_dead_builds(sysroot_dir, &lock_path);
        if dir.join(COMPLETE).is_file() {
            return Ok(dir); // another process built it while we waited
        }
        // A half-built directory, or this process's own failed attempt (we hold the lock).
        let tmp = fsutil::temporary(sysroot_dir, &self.name);
        for path in [&dir, &tmp] {
            fsutil::remove_path(path).map_err(BuildError::io(path))?;
        }
        let progress = Progress::start(self.progress.clone());
        let built = build(&tmp);
        progress.finish();
        built?;
        std::fs::write(tmp.join(COMPLETE), &self.what).map_err(BuildError::io(&tmp))?;
        std::fs::rename(&tmp, &dir).map_err(BuildError::io(&dir))?;
        Ok(dir)
    }
}

/// The lock of the sysroot called `name`.
fn lock_path(sysroot_dir: &Path, name: &str) -> PathBuf {
    sysroot_dir.join(format!("{name}.lock"))
}

/// Removes what dead builders left in `sysroot_dir`, while this process holds lock `held`: `core`
/// builds, and `rustc -vV` records being written. Returns what it removed.
pub(crate) fn sweep_dead_builds(sysroot_dir: &Path, held: &Path) -> Vec<PathBuf> {
    let mut swept = sweep::dead_temporaries(sysroot_dir, |name| Some(lock_path(sysroot_dir, name)), held);
    swept.extend(sweep::dead_temporaries(&toolchain::versions_dir(sysroot_dir), |_| None, held));
    swept
}

/// `core` and the empty `compiler_builtins` into sysroot `root`.
fn build(toolchain: &Toolchain, arch: CudaArch, root: &Path) -> Result<(), BuildError> {
    let library = toolchain.library_source();
    let core = library.join("core/src/lib.rs");
    if !core.is_file() {
        return Err(BuildError::RustSrcMissing { toolchain: toolchain.name.clone() });
    }
    let lib = root.join("lib/rustlib").join(TARGET).join("lib");
    fsutil::ensure_dir(&lib).map_err(|source| BuildError::Io { path: lib.clone(), source })?;
    let builtins = root.join("compiler_builtins.rs");
    std::fs::write(&builtins, COMPILER_BUILTINS).map_err(|source| BuildError::Io { path: builtins.clone(), source })?;
    let edition = core_edition(toolchain, &library)?;
    let crate_command = |name: &str, source: &Path| {
        let mut cmd = toolchain.rustc_command();
        cmd.current_dir(root)
            .args(["--crate-name", name, "--crate-type=lib", &format!("--edition={edition}")])
            .arg(source)
            .args(CODEGEN_FLAGS)
            .args(CORE_FLAGS)
            .arg(format!("-Ctarget-cpu={}", arch.target_cpu()))
            .arg("--remap-path-prefix")
            .arg(format!("{}={REMAPPED_LIBRARY}", library.display()))
            .arg("--sysroot")
            .arg(root)
            .args(["--emit=metadata,link", "--out-dir"])
            .arg(&lib);
        cmd
    };
    run(crate_command("core", &core), "core", arch)?;
    run(crate_command("compiler_builtins", &builtins), "compiler_builtins", arch)?;
    Ok(())
}

/// The edition `<rust-src>/library/core/Cargo.toml` of `toolchain` declares (what cargo would
/// pass).
fn core_edition(toolchain: &Toolchain, library: &Path) -> Result<String, BuildError> {
    let manifest = library.join("core/Cargo.toml");
    let unusable = |message: String| BuildError::Toolchain { toolchain: toolchain.name.clone(), message };
    let text =
        std::fs::read_to_string(&manifest).map_err(|source| BuildError::Io { path: manifest.clone(), source })?;
    let value: toml::Table = toml::from_str(&text).map_err(|e| unusable(format!("{}: {e}", manifest.display())))?;
    value
        .get("package")
        .and_then(|p| p.get("edition"))
        .and_then(|e| e.as_str())
        .map(str::to_owned)
        .ok_or_else(|| unusable(format!("{} declares no edition", manifest.display())))
}
