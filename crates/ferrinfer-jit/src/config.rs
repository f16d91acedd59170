//! The JIT's settings, from FlashInfer's environment variables (renamed), or set directly.

use std::path::PathBuf;

use crate::{CudaArch, JitError};

pub const CACHE_DIR_VAR: &str = "FERRINFER_CACHE_DIR";
pub const AOT_DIR_VAR: &str = "FERRINFER_AOT_DIR";
pub const VERBOSE_VAR: &str = "FERRINFER_JIT_VERBOSE";
pub const DEBUG_VAR: &str = "FERRINFER_JIT_DEBUG";
pub const DISABLE_VAR: &str = "FERRINFER_DISABLE_JIT";
pub const ARCH_LIST_VAR: &str = "FERRINFER_CUDA_ARCH_LIST";
pub const TARGET_DIR_VAR: &str = "FERRINFER_JIT_TARGET_DIR";
pub const PTXAS_VAR: &str = "FERRINFER_PTXAS";
pub const REQUIRE_PTXAS_VAR: &str = "FERRINFER_REQUIRE_PTXAS";

/// Where and how modules are found and built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JitConfig {
    /// Root of the disk cache (`FERRINFER_CACHE_DIR`; default: the platform cache dir +
    /// `ferrinfer`). Entries live in `ptx/<key>/`.
    pub cache_dir: PathBuf,
    /// Cargo target directory of JIT builds (`FERRINFER_JIT_TARGET_DIR`; default
    /// `<cache_dir>/target`): shared, so `core` is built once per toolchain.
    pub target_dir: PathBuf,
    /// A directory made by `cargo xtask aot`, searched before the cache (`FERRINFER_AOT_DIR`).
    pub aot_dir: Option<PathBuf>,
    /// Print lookups and builds on stderr (`FERRINFER_JIT_VERBOSE=1`).
    pub verbose: bool,
    /// Build kernels with line info (`FERRINFER_JIT_DEBUG=1`).
    pub debug: bool,
    /// Never build: embedded, AOT or cache only (`FERRINFER_DISABLE_JIT=1`).
    pub disable_jit: bool,
    /// Targets to build for (`FERRINFER_CUDA_ARCH_LIST`, e.g. "9.0"); `None`: the device's own.
    pub arch_list: Option<Vec<CudaArch>>,
    /// `ptxas` to report registers and spills (`FERRINFER_PTXAS`; default: `ptxas` on PATH).
    pub ptxas: Option<PathBuf>,
    /// Fail a build when no ptxas is found (`FERRINFER_REQUIRE_PTXAS=1`; CI sets it).
    pub require_ptxas: bool,
}

impl JitConfig {
    /// Defaults for a cache rooted at `cache_dir`, nothing read from the environment.
    pub fn new(cache_dir: impl Into<PathBuf>) -> Self {
        let cache_dir = cache_dir.into();
        JitConfig {
            target_dir: cache_dir.join("target"),
            cache_dir,
            aot_dir: None,
            verbose: false,
            debug: false,
            disable_jit: false,
            arch_list: None,
            ptxas: find_on_path("ptxas"),
            require_ptxas: false,
        }
    }

    /// The configuration the environment asks for.
    pub fn from_env() -> Result<Self, JitError> {
        let var = |name| std::env::var_os(name).filter(|v| !v.is_empty());
        let flag = |name| std::env::var(name).is_ok_and(|v| v == "1");
        let cache_dir = var(CACHE_DIR_VAR)
            .map(PathBuf::from)
            .or_else(|| dirs::cache_dir().map(|d| d.join("ferrinfer")))
            .unwrap_or_else(|| std::env::temp_dir().join("ferrinfer-cache"));
        let mut config = JitConfig::new(cache_dir);
        if let Some(dir) = var(TARGET_DIR_VAR) {
            config.target_dir = dir.into();
        }
        config.aot_dir = var(AOT_DIR_VAR).map(PathBuf::from);
        config.verbose = flag(VERBOSE_VAR);
        config.debug = flag(DEBUG_VAR);
        config.disable_jit = flag(DISABLE_VAR);
        config.require_ptxas = flag(REQUIRE_PTXAS_VAR);
        if let Some(ptxas) = var(PTXAS_VAR) {
            config.ptxas = Some(ptxas.into());
        }
        if let Ok(list) = std::env::var(ARCH_LIST_VAR) {
            let archs = CudaArch::parse_list(&list)
                .map_err(|e| JitError::Config { var: ARCH_LIST_VAR, message: e.to_string() })?;
            config.arch_list = Some(archs);
        }
        Ok(config)
    }

    /// The arch to build for a device of compute capability `device`: the device's own, or with
    /// an arch list, the newest listed arch the device can run (PTX runs on newer devices).
    pub fn target_arch(&self, device: CudaArch) -> Result<CudaArch, JitError> {
        let Some(list) = &self.arch_list else { return Ok(device) };
        list.iter().copied().filter(|a| *a <= device).max().ok_or_else(|| JitError::Config {
            var: ARCH_LIST_VAR,
            message: format!("no listed arch runs on a compute capability {device} device (list: {list:?})"),
        })
    }
}

fn find_on_path(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|dir| dir.join(program)).find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_arch_prefers_the_device_then_the_newest_compatible_listed_arch() {
        let mut config = JitConfig::new("/tmp/x");
        let hopper = CudaArch::HOPPER;
        assert_eq!(config.target_arch(hopper).unwrap(), hopper);
        config.arch_list = Some(CudaArch::parse_list("8.0 8.9 10.0").unwrap());
        assert_eq!(config.target_arch(hopper).unwrap().to_string(), "8.9");
        config.arch_list = Some(CudaArch::parse_list("10.0").unwrap());
        assert!(config.target_arch(hopper).unwrap_err().to_string().contains(ARCH_LIST_VAR));
    }
}
