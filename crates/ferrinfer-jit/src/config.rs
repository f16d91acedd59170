//! The JIT's settings, from FlashInfer's environment variables (renamed), or set directly. A
//! value that cannot be understood is an error naming the variable, never a silent default.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crate::{CudaArch, JitError};

pub const CACHE_DIR_VAR: &str = "FERRINFER_CACHE_DIR";
pub const AOT_DIR_VAR: &str = "FERRINFER_AOT_DIR";
pub const VERBOSE_VAR: &str = "FERRINFER_JIT_VERBOSE";
pub const DEBUG_VAR: &str = "FERRINFER_JIT_DEBUG";
pub const DISABLE_VAR: &str = "FERRINFER_DISABLE_JIT";
pub const ARCH_LIST_VAR: &str = "FERRINFER_CUDA_ARCH_LIST";
pub const SYSROOT_DIR_VAR: &str = "FERRINFER_JIT_SYSROOT_DIR";
pub const PTXAS_VAR: &str = "FERRINFER_PTXAS";
pub const REQUIRE_PTXAS_VAR: &str = "FERRINFER_REQUIRE_PTXAS";
pub const WAIT_SECS_VAR: &str = "FERRINFER_JIT_WAIT_SECS";

/// Where and how modules are found and built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JitConfig {
    /// Root of the disk cache (`FERRINFER_CACHE_DIR`; default: the platform cache dir +
    /// `ferrinfer`). Entries live in `ptx/<key>/`.
    pub cache_dir: PathBuf,
    /// Where `core` is built for the device, once per toolchain and arch
    /// (`FERRINFER_JIT_SYSROOT_DIR`; default `<cache_dir>/sysroot`); several caches may share one.
    pub sysroot_dir: PathBuf,
    /// A directory made by `cargo xtask aot`, searched before the cache (`FERRINFER_AOT_DIR`).
    pub aot_dir: Option<PathBuf>,
    /// Print lookups and builds on stderr (`FERRINFER_JIT_VERBOSE`).
    pub verbose: bool,
    /// Build kernels with line info (`FERRINFER_JIT_DEBUG`).
    pub debug: bool,
    /// Never build: embedded, AOT or cache only (`FERRINFER_DISABLE_JIT`).
    pub disable_jit: bool,
    /// Targets to build for (`FERRINFER_CUDA_ARCH_LIST`, e.g. "9.0"); `None`: the device's own.
    pub arch_list: Option<Vec<CudaArch>>,
    /// `ptxas` to report registers and spills and assemble cubins (`FERRINFER_PTXAS`; default:
    /// `ptxas` on PATH).
    pub ptxas: Option<PathBuf>,
    /// Fail a build when no ptxas is found (`FERRINFER_REQUIRE_PTXAS`; CI sets it).
    pub require_ptxas: bool,
    /// How long to wait for another process building the same module or `core`
    /// (`FERRINFER_JIT_WAIT_SECS`); `None`: as long as it takes.
    pub lock_wait: Option<Duration>,
}

impl JitConfig {
    /// Defaults for a cache rooted at `cache_dir`, nothing read from the environment.
    pub fn new(cache_dir: impl Into<PathBuf>) -> Self {
        let cache_dir = cache_dir.into();
        JitConfig {
            sysroot_dir: cache_dir.join("sysroot"),
            cache_dir,
            aot_dir: None,
            verbose: false,
            debug: false,
            disable_jit: false,
            arch_list: None,
            ptxas: find_on_path("ptxas"),
            require_ptxas: false,
            lock_wait: None,
        }
    }

    /// The configuration the environment asks for.
    pub fn from_env() -> Result<Self, JitError> {
        Self::from_vars(|name| std::env::var_os(name))
    }

    /// The configuration variables given by `var` ask for (`from_env` with another source).
    pub fn from_vars(var: impl Fn(&str) -> Option<OsString>) -> Result<Self, JitError> {
        let path = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        let flag = |name: &'static str| var(name).map_or(Ok(false), |value| parse_bool(name, &value));
        let cache_dir = path(CACHE_DIR_VAR)
            .or_else(|| dirs::cache_dir().map(|d| d.join("ferrinfer")))
            .unwrap_or_else(|| std::env::temp_dir().join("ferrinfer-cache"));
        let mut config = JitConfig::new(cache_dir);
        if let Some(dir) = path(SYSROOT_DIR_VAR) {
            config.sysroot_dir = dir;
        }
        config.aot_dir = path(AOT_DIR_VAR);
        config.verbose = flag(VERBOSE_VAR)?;
        config.debug = flag(DEBUG_VAR)?;
        config.disable_jit = flag(DISABLE_VAR)?;
        config.require_ptxas = flag(REQUIRE_PTXAS_VAR)?;
        if let Some(ptxas) = path(PTXAS_VAR) {
            config.ptxas = Some(ptxas);
        }
        if let Some(seconds) = var(WAIT_SECS_VAR).filter(|v| !v.is_empty()) {
            config.lock_wait = Some(parse_seconds(WAIT_SECS_VAR, &seconds)?);
        }
        if let Some(list) = var(ARCH_LIST_VAR) {
            let archs = CudaArch::parse_list(&list.to_string_lossy())
                .map_err(|e| JitError::Config { var: ARCH_LIST_VAR, message: e.to_string() })?;
            config.arch_list = Some(archs);
        }
        Ok(config)
    }

    /// The arch to build for a device of compute capability `device`: with an arch list, the
    /// newest listed arch the device can run (PTX runs on newer devices); without one, the
    /// device's own, or for a device newer than every known arch, the newest known one.
    pub fn target_arch(&self, device: CudaArch) -> Result<CudaArch, JitError> {
        let Some(list) = &self.arch_list else {
            return device.newest_known_at_most().ok_or_else(|| JitError::Config {
                var: ARCH_LIST_VAR,
                message: format!("compute capability {device} is older than every supported architecture (7.0+)"),
            });
        };
        list.iter().copied().filter(|a| *a <= device).max().ok_or_else(|| JitError::Config {
            var: ARCH_LIST_VAR,
            message: format!("no listed arch runs on a compute capability {device} device (list: {list:?})"),
        })
    }
}

/// A boolean variable: 1/0, true/false, yes/no, on/off in any case; empty is unset (false).
/// Anything else is an error: `FERRINFER_DISABLE_JIT=ture` must not quietly build.
pub fn parse_bool(var: &'static str, value: &std::ffi::OsStr) -> Result<bool, JitError> {
    let text = value.to_string_lossy();
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" | "" => Ok(false),
        _ => Err(JitError::Config {
            var,
            message: format!("{text:?} is not a boolean; use 1/0, true/false, yes/no or on/off"),
        }),
    }
}

/// A duration in seconds: a non-negative number (`600`, `0.5`). Anything else is an error.
pub fn parse_seconds(var: &'static str, value: &std::ffi::OsStr) -> Result<Duration, JitError> {
    let text = value.to_string_lossy();
    let seconds = text.trim().parse::<f64>().ok().and_then(|s| Duration::try_from_secs_f64(s).ok());
    seconds.ok_or_else(|| JitError::Config {
        var,
        message: format!(
            "{text:?} is not a number of seconds; use a non-negative number such as 600 (unset: wait as long as it takes)"
        ),
    })
}

fn find_on_path(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|dir| dir.join(program)).find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn config(vars: &[(&str, &str)]) -> Result<JitConfig, JitError> {
        let vars: HashMap<String, OsString> = vars.iter().map(|(k, v)| (k.to_string(), v.into())).collect();
        JitConfig::from_vars(|name| vars.get(name).cloned())
    }

    #[test]
    fn target_arch_prefers_the_device_then_the_newest_compatible_listed_arch() {
        let mut config = JitConfig::new("/tmp/x");
        let hopper = CudaArch::HOPPER;
        assert_eq!(config.target_arch(hopper).unwrap(), hopper);
        let future = CudaArch { major: 13, minor: 0 };
        assert_eq!(config.target_arch(future).unwrap().to_string(), "12.1");
        config.arch_list = Some(CudaArch::parse_list("8.0 8.9 10.0").unwrap());
        assert_eq!(config.target_arch(hopper).unwrap().to_string(), "8.9");
        config.arch_list = Some(CudaArch::parse_list("10.0").unwrap());
        assert!(config.target_arch(hopper).unwrap_err().to_string().contains(ARCH_LIST_VAR));
    }

    #[test]
    fn booleans_take_the_usual_spellings_in_any_case() {
        for (value, expected) in
            [("1", true), ("TRUE", true), ("Yes", true), ("on", true), ("0", false), ("False", false), ("NO", false)]
        {
            assert_eq!(config(&[(DISABLE_VAR, value)]).unwrap().disable_jit, expected, "{value}");
        }
        assert!(!config(&[(DISABLE_VAR, "")]).unwrap().disable_jit, "empty is unset");
    }

    #[test]
    fn other_boolean_values_are_errors_naming_the_variable() {
        for var in [DISABLE_VAR, VERBOSE_VAR, DEBUG_VAR, REQUIRE_PTXAS_VAR] {
            let err = config(&[(var, "ture")]).unwrap_err().to_string();
            assert!(err.contains(var) && err.contains("\"ture\""), "{err}");
        }
    }

    #[test]
    fn the_wait_for_another_build_is_unbounded_unless_limited_in_seconds() {
        assert_eq!(config(&[]).unwrap().lock_wait, None);
        assert_eq!(config(&[(WAIT_SECS_VAR, "")]).unwrap().lock_wait, None, "empty is unset");
        assert_eq!(config(&[(WAIT_SECS_VAR, "600")]).unwrap().lock_wait, Some(Duration::from_secs(600)));
        assert_eq!(config(&[(WAIT_SECS_VAR, " 0.5 ")]).unwrap().lock_wait, Some(Duration::from_millis(500)));
        assert_eq!(config(&[(WAIT_SECS_VAR, "0")]).unwrap().lock_wait, Some(Duration::ZERO));
        for value in ["-1", "ten", "1e400", "NaN", "5s"] {
            let err = config(&[(WAIT_SECS_VAR, value)]).unwrap_err().to_string();
            assert!(err.contains(WAIT_SECS_VAR) && err.contains(&format!("{value:?}")), "{value}: {err}");
        }
    }

    #[test]
    fn an_empty_or_unknown_arch_list_is_an_error() {
        for list in ["", " ", "7.9", "9.9"] {
            let err = config(&[(ARCH_LIST_VAR, list)]).unwrap_err().to_string();
            assert!(err.contains(ARCH_LIST_VAR), "{list:?}: {err}");
        }
        assert_eq!(config(&[(ARCH_LIST_VAR, "8.0;9.0")]).unwrap().arch_list.unwrap().len(), 2);
    }
}
