//! The device toolchain: one dated nightly, named in the repository's `device-toolchain` file
//! (read by `build.rs`), whatever the caller's environment says (`RUSTUP_TOOLCHAIN`, a
//! `rust-toolchain.toml` in the working directory, ...). Its `rustc` is found by path, not through
//! a rustup proxy, so nothing the caller sets can substitute another compiler; its exact identity
//! (`rustc -vV`) is part of every JIT cache key.
//!
//! `rustc -vV` costs 20-80 ms per process; the answer is kept on disk, keyed by the size and
//! modification time of the compiler's files, so a fresh process's first cache hit spawns nothing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::UNIX_EPOCH;

use serde::{Deserialize, Serialize};

use crate::digest::sha256_hex;
use crate::error::BuildError;
use crate::{child, fsutil};

/// The toolchain device code is built with (the `device-toolchain` file's one line).
pub const DEVICE_TOOLCHAIN: &str = env!("FERRINFER_DEVICE_TOOLCHAIN");

/// The host this crate was built for; rustup names toolchain directories `<name>-<host>`.
const HOST: &str = env!("FERRINFER_HOST_TRIPLE");

/// A resolved toolchain: its own `rustc` binary and identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Toolchain {
    pub name: String,
    /// The toolchain's `bin/rustc` itself (not a rustup proxy).
    pub rustc: PathBuf,
    /// `rustc -vV`: release, commit hash and date, host, LLVM version.
    pub version: String,
}

impl Toolchain {
    /// The device toolchain, resolved once per process. `state_dir` (the sysroot directory)
    /// keeps `rustc -vV` between processes, in `toolchains/`; the first caller's is used (the
    /// answer does not depend on it).
    pub fn device(state_dir: &Path) -> Result<&'static Toolchain, BuildError> {
        static DEVICE: OnceLock<Result<Toolchain, BuildError>> = OnceLock::new();
        DEVICE.get_or_init(|| Toolchain::resolve(DEVICE_TOOLCHAIN, state_dir)).as_ref().map_err(again)
    }

    /// Finds toolchain `name` and its identity (`rustc -vV`, kept in `state_dir/toolchains/`).
    pub fn resolve(name: &str, state_dir: &Path) -> Result<Toolchain, BuildError> {
        let rustc = locate_rustc(name)?;
        let version = cached_version(&rustc, state_dir)
            .map_err(|message| BuildError::Toolchain { toolchain: name.to_owned(), message })?;
        Ok(Toolchain { name: name.to_owned(), rustc, version })
    }

    /// The toolchain's directory (`<rustup home>/toolchains/<name>-<host>`), rustc's sysroot.
    pub fn sysroot(&self) -> &Path {
        self.rustc.parent().and_then(Path::parent).unwrap_or(Path::new("/"))
    }

    /// The standard library sources of the `rust-src` component.
    pub fn library_source(&self) -> PathBuf {
        self.sysroot().join("lib/rustlib/src/rust/library")
    }

    /// `rustc` with an empty environment: rustc reads no configuration files, so its arguments
    /// are then everything that decides its output. It dies with this process ([`crate::child`]).
    pub fn rustc_command(&self) -> Command {
        let mut command = child::command(&self.rustc);
        command.env_clear();
        command
    }
}

/// The same error again, for the device toolchain's, which is remembered per process: the variants
/// a toolchain lookup returns are rebuilt exactly, others keep their message.
fn again(error: &BuildError) -> BuildError {
    match error {
        BuildError::ToolchainMissing { toolchain } => BuildError::ToolchainMissing { toolchain: toolchain.clone() },
        BuildError::Toolchain { toolchain, message } => {
            BuildError::Toolchain { toolchain: toolchain.clone(), message: message.clone() }
        }
        other => BuildError::Toolchain { toolchain: DEVICE_TOOLCHAIN.to_owned(), message: other.to_string() },
    }
}

/// The toolchain's `bin/rustc`: under rustup's home where rustup puts it, else wherever
/// `rustup which` says (custom toolchains, other layouts).
fn locate_rustc(name: &str) -> Result<PathBuf, BuildError> {
    let direct = rustup_home().map(|home| home.join("toolchains").join(format!("{name}-{HOST}")).join("bin/rustc"));
    if let Some(rustc) = direct.filter(|p| p.is_file()) {
        return Ok(rustc);
    }
    let mut which = child::command("rustup");
    which.args(["which", "rustc", "--toolchain", name]).env_remove("RUSTUP_TOOLCHAIN");
    match which.output() {
        Ok(out) if out.status.success() => {
            let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            if path.is_file() { Ok(path) } else { Err(BuildError::ToolchainMissing { toolchain: name.to_owned() }) }
        }
        _ => Err(BuildError::ToolchainMissing { toolchain: name.to_owned() }),
    }
}

fn rustup_home() -> Option<PathBuf> {
    let home = std::env::var_os("RUSTUP_HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
    home.or_else(|| dirs::home_dir().map(|home| home.join(".rustup")))
}

/// Where `rustc -vV` is kept under `state_dir`.
pub(crate) fn versions_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("toolchains")
}

/// `<cache>/toolchains/<fingerprint hash>.toml`: one toolchain's `rustc -vV`.
#[derive(Serialize, Deserialize)]
struct CachedVersion {
    rustc: PathBuf,
    fingerprint: String,
    version: String,
}

/// `rustc -vV`, from the disk cache when the compiler's files are unchanged; else why it could not
/// be had.
fn cached_version(rustc: &Path, state_dir: &Path) -> Result<String, String> {
    let fingerprint = fingerprint(rustc);
    let file = versions_dir(state_dir).join(format!("{}.toml", sha256_hex(fingerprint.as_bytes())));
    let cached = std::fs::read_to_string(&file).ok().and_then(|text| toml::from_str::<CachedVersion>(&text).ok());
    if let Some(cached) = cached.filter(|c| c.fingerprint == fingerprint && c.rustc == rustc) {
        return Ok(cached.version);
    }
    let version = query_version(rustc)?;
    // Best effort: an unwritable cache only costs the query next time (and fails the build
    // later with an error naming FERRINFER_CACHE_DIR, if one is needed).
    let record = CachedVersion { rustc: rustc.to_owned(), fingerprint, version: version.clone() };
    let _ = fsutil::write_atomically(&file, toml::to_string(&record).expect("serialises").as_bytes());
    Ok(version)
}

/// What identifies an installed compiler without running it: path, size and modification time
/// of `rustc` and of `librustc_driver-<hash>.so` (the compiler proper; its name changes with
/// every build of rustc).
fn fingerprint(rustc: &Path) -> String {
    let stat = |path: &Path| match std::fs::metadata(path) {
        Ok(meta) => {
            let modified = meta.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).unwrap_or_default();
            format!("{} {} {}\n", path.display(), meta.len(), modified.as_nanos())
        }
        Err(_) => format!("{} missing\n", path.display()),
    };
    let lib = rustc.parent().and_then(Path::parent).map(|sysroot| sysroot.join("lib"));
    let mut drivers: Vec<PathBuf> = lib
        .and_then(|lib| std::fs::read_dir(lib).ok())
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("librustc_driver")))
        .collect();
    drivers.sort();
    std::iter::once(rustc.to_owned()).chain(drivers).map(|p| stat(&p)).collect()
}

fn query_version(rustc: &Path) -> Result<String, String> {
    let mut command = child::command(rustc);
    let output = command.env_clear().arg("-vV").output();
    match output {
        Ok(out) if out.status.success() => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        Ok(out) => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
        Err(e) => Err(format!("cannot run {}: {e}", rustc.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pinned_toolchain_is_one_dated_nightly() {
        let date = DEVICE_TOOLCHAIN.strip_prefix("nightly-").expect("a nightly");
        assert!(date.len() == 10 && date.chars().all(|c| c.is_ascii_digit() || c == '-'), "{DEVICE_TOOLCHAIN}");
    }

    #[test]
    fn a_missing_toolchain_names_the_install_command() {
        let dir = tempfile::tempdir().unwrap();
        let err = Toolchain::resolve("nightly-1999-01-01", dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("rustup toolchain install nightly-1999-01-01 --profile minimal --component rust-src"),
            "{err}"
        );
    }

    #[test]
    fn the_fingerprint_changes_with_the_compiler_files() {
        let dir = tempfile::tempdir().unwrap();
        let rustc = dir.path().join("bin/rustc");
        std::fs::create_dir_all(rustc.parent().unwrap()).unwrap();
        std::fs::create_dir_all(dir.path().join("lib")).unwrap();
        std::fs::write(&rustc, "a").unwrap();
        let before = fingerprint(&rustc);
        std::fs::write(dir.path().join("lib/librustc_driver-0123.so"), "b").unwrap();
        assert_ne!(before, fingerprint(&rustc));
    }
}
