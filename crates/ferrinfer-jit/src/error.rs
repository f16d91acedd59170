//! Why a kernel build failed, with the command that fixes it where there is one. Below every
//! module that builds (the toolchain lookup, the sysroot, the builder, ptxas), so that each of
//! them can fail with it.

use std::path::{Path, PathBuf};

use crate::CudaArch;
use crate::config::{PTXAS_VAR, REQUIRE_PTXAS_VAR};
use crate::lock::LockError;

/// Why a kernel build failed, with the command that fixes it where there is one.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(
        "the device toolchain `{toolchain}` (pinned in the repository's `device-toolchain` file) is not installed; fix: {}",
        install_command(toolchain)
    )]
    ToolchainMissing { toolchain: String },
    #[error(
        "the device toolchain `{toolchain}` lacks rust-src (needed to build `core` for nvptx64); fix: rustup component add rust-src --toolchain {toolchain}"
    )]
    RustSrcMissing { toolchain: String },
    #[error("the device toolchain `{toolchain}` cannot compile for nvptx64-nvidia-cuda:\n{log}")]
    NoNvptxSupport { toolchain: String, log: String },
    #[error("cannot query the device toolchain: {message}; fix: {}", install_command(toolchain))]
    Toolchain { toolchain: String, message: String },
    #[error(
        "CUDA architecture {arch} is not one the JIT builds for (known: {known}); set FERRINFER_CUDA_ARCH_LIST to an older one the device runs (PTX runs on newer devices)",
        known = crate::arch::known_list()
    )]
    UnknownArch { arch: CudaArch },
    #[error(
        "rustc does not know the processor `{cpu}` (LLVM: \"not a recognized processor\"); the build is rejected:\n{log}"
    )]
    UnknownTargetCpu { cpu: String, log: String },
    #[error("compiling {stage} for {arch} failed:\n{log}")]
    CompileFailed { stage: String, arch: String, log: String },
    #[error("the PTX does not match its spec: {0}")]
    WrongTarget(String),
    #[error("kernel `{entry}` uses .local memory (a register array spilled); the PTX is rejected")]
    LocalMemory { entry: String },
    #[error("PTX calls unresolved function `{name}` (device code must be generic or #[inline] and never panic)")]
    UnresolvedFunction { name: String },
    #[error("entry point `{0}` is missing from the PTX")]
    MissingEntryPoint(String),
    #[error("I/O error on {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("ptxas reports {what} in kernel `{entry}`; the PTX is rejected:\n{report}")]
    Resources { entry: String, what: String, report: String },
    #[error(
        "ptxas is required ({REQUIRE_PTXAS_VAR}=1) but was not found; install it with `pip install nvidia-cuda-nvcc-cu12` and set {PTXAS_VAR} to its bin/ptxas"
    )]
    PtxasMissing,
    #[error("ptxas failed on the PTX of `{spec}`:\n{log}")]
    PtxasFailed { spec: String, log: String },
    #[error("ptxas {ptxas} cannot assemble for {arch} (too old for it); install a newer one and set {PTXAS_VAR}")]
    PtxasTooOld { ptxas: String, arch: String },
}

impl BuildError {
    /// For `map_err`: an I/O error on `path` as [`BuildError::Io`].
    pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BuildError {
        let path = path.to_owned();
        move |source| BuildError::Io { path, source }
    }
}

/// The command that installs `toolchain` with what device builds need.
fn install_command(toolchain: &str) -> String {
    format!("rustup toolchain install {toolchain} --profile minimal --component rust-src")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toolchain_failures_name_the_fix() {
        let missing = BuildError::ToolchainMissing { toolchain: "nightly-2026-05-20".into() }.to_string();
        assert!(missing.contains("rustup toolchain install nightly-2026-05-20 --profile minimal --component rust-src"));
        let no_src = BuildError::RustSrcMissing { toolchain: "nightly-2026-05-20".into() }.to_string();
        assert!(no_src.contains("rustup component add rust-src --toolchain nightly-2026-05-20"));
        let unusable = BuildError::Toolchain { toolchain: "nightly-2026-05-20".into(), message: "no rustc".into() };
        assert_eq!(
            unusable.to_string(),
            "cannot query the device toolchain: no rustc; fix: rustup toolchain install nightly-2026-05-20 --profile minimal --component rust-src"
        );
    }
}
