//! The nightly toolchain that builds device code: its exact identity (`rustc -vV`, part of every
//! JIT cache key), queried once per process.

use std::sync::OnceLock;

use crate::builder::{BuildError, nightly_command};

/// `rustc +nightly -vV`, or why it cannot be had.
pub fn nightly_version() -> Result<&'static str, BuildError> {
    static VERSION: OnceLock<Result<String, String>> = OnceLock::new();
    let result = VERSION.get_or_init(|| match nightly_command("rustc").arg("-vV").output() {
        Ok(out) if out.status.success() => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        Ok(out) => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
        Err(e) => Err(format!("cannot run rustc: {e}")),
    });
    match result {
        Ok(version) => Ok(version),
        Err(stderr) if stderr.contains("not installed") => Err(BuildError::NightlyMissing),
        Err(stderr) => Err(BuildError::Toolchain(stderr.clone())),
    }
}
