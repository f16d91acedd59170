//! The device build is independent of the caller: each hostile setting of issue 12 — cargo
//! configuration files in the working directory or CARGO_HOME (`target-cpu=native`,
//! `target-cpu=sm_70`, `debug = 2`, a rustc wrapper), a `rust-toolchain.toml`, and the variables
//! a parent cargo or a user sets — is put around a child process that builds the bf16 rmsnorm
//! module, which must come out byte for byte as built here, under the same key. Also: the PTX
//! does not depend on the cache's location, and `-C target-cpu` reaches the kernels crate (the
//! bf16 conversions use sm_80's `cvt.rn.bf16` instruction).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use ferrinfer_jit::norm::{NormKernel, NormModule};
use ferrinfer_jit::{Cache, CudaArch, JitConfig, JitSpec, Origin};
use ferrinfer_kernels::element::DType;

fn shared_sysroot_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("jit-sysroot")
}

fn config(cache_dir: &Path) -> JitConfig {
    JitConfig { sysroot_dir: shared_sysroot_dir(), ptxas: None, ..JitConfig::new(cache_dir) }
}

fn spec(debug: bool) -> JitSpec {
    NormModule { kernel: NormKernel::Rms, dtype: DType::Bf16, weight: DType::Bf16, vec: 8 }
        .spec(CudaArch::HOPPER, debug)
}

/// `(key, PTX)` of the bf16 rmsnorm module built in this process's own environment.
fn baseline() -> &'static (String, String) {
    static BASELINE: OnceLock<(String, String)> = OnceLock::new();
    BASELINE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap().keep();
        let cache = Cache::new(config(&dir), &[]);
        let module = cache.module(&spec(false)).unwrap();
        (cache.keys(&spec(false)).unwrap().1, module.ptx.to_string())
    })
}

/// Child side (a no-op unless a test below started this process): builds the module with a
/// configuration from the environment and prints its key.
#[test]
fn jit_isolation_child() {
    if std::env::var_os("FERRINFER_TEST_ISOLATION_CHILD").is_none() {
        return;
    }
    let cache = Cache::new(JitConfig::from_env().unwrap(), &[]);
    let module = cache.module(&spec(false)).unwrap();
    assert_eq!(module.origin, Origin::Built);
    println!("KEY {}", cache.keys(&spec(false)).unwrap().1);
}

/// A hostile place to run from: a working directory and a CARGO_HOME with their own files.
struct Hostile {
    root: tempfile::TempDir,
}

impl Hostile {
    fn new() -> Self {
        let hostile = Hostile { root: tempfile::tempdir().unwrap() };
        std::fs::create_dir_all(hostile.cwd().join(".cargo")).unwrap();
        std::fs::create_dir_all(hostile.cargo_home()).unwrap();
        hostile
    }

    fn cwd(&self) -> PathBuf {
        self.root.path().join("project/sub")
    }

    fn cargo_home(&self) -> PathBuf {
        self.root.path().join("cargo-home")
    }

    /// A script that records that it ran, then runs what it wraps (as a rustc wrapper would).
    fn wrapper(&self) -> PathBuf {
        let script = self.root.path().join("wrapper.sh");
        let marker = self.marker();
        std::fs::write(&script, format!("#!/bin/sh\ntouch {}\nexec \"$@\"\n", marker.display())).unwrap();
        let executable = std::os::unix::fs::PermissionsExt::from_mode(0o755);
        std::fs::set_permissions(&script, executable).unwrap();
        script
    }

    fn marker(&self) -> PathBuf {
        self.root.path().join("wrapper-ran")
    }

    /// Writes `.cargo/config.toml` in the working directory, in a parent of it and in CARGO_HOME.
    fn cargo_config(&self, text: &str) {
        for dir in [self.cwd().join(".cargo"), self.root.path().join("project/.cargo"), self.cargo_home()] {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("config.toml"), text).unwrap();
        }
    }

    /// Builds in a child run from here with `vars` set; returns its key and PTX.
    fn build(&self, vars: &[(&str, &str)]) -> (String, String) {
        let cache_dir = self.root.path().join("cache");
        let mut child = Command::new(std::env::current_exe().unwrap());
        child
            .args(["--exact", "jit_isolation_child", "--nocapture", "--test-threads=1"])
            .current_dir(self.cwd())
            .env("FERRINFER_TEST_ISOLATION_CHILD", "1")
            .env("FERRINFER_CACHE_DIR", &cache_dir)
            .env("FERRINFER_JIT_SYSROOT_DIR", shared_sysroot_dir())
            .env("CARGO_HOME", self.cargo_home())
            .env_remove("FERRINFER_PTXAS")
            .env_remove("FERRINFER_REQUIRE_PTXAS")
            .env_remove("FERRINFER_AOT_DIR")
            .env_remove("FERRINFER_DISABLE_JIT");
        child.envs(vars.iter().copied());
        let out = child.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "the child failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        // The harness prints the test's name on the same line, before the key.
        let key = stdout.split("KEY ").nth(1).and_then(|rest| rest.split_whitespace().next());
        let key = key.unwrap_or_else(|| panic!("the child printed no key:\n{stdout}")).to_owned();
        let ptx = std::fs::read_to_string(cache_dir.join("ptx").join(&key).join("kernels.ptx")).unwrap();
        (key, ptx)
    }
}

/// Builds around `setup` and checks the key and the PTX are the baseline's.
fn assert_unchanged(what: &str, setup: impl FnOnce(&Hostile) -> Vec<(&'static str, String)>) {
    let hostile = Hostile::new();
    let vars = setup(&hostile);
    let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (key, ptx) = hostile.build(&vars);
    let (base_key, base_ptx) = baseline();
    assert_eq!(&key, base_key, "{what} changed the key");
    assert!(ptx == *base_ptx, "{what} changed the PTX (header: {:?})", ptx.lines().take(8).collect::<Vec<_>>());
    assert!(!hostile.marker().exists(), "{what}: a rustc wrapper was run");
}

#[test]
fn jit_cargo_config_target_cpu_native_changes_nothing() {
    assert_unchanged("`[build] rustflags = [\"-C\", \"target-cpu=native\"]`", |h| {
        h.cargo_config("[build]\nrustflags = [\"-C\", \"target-cpu=native\"]\n");
        Vec::new()
    });
}

#[test]
fn jit_cargo_config_target_cpu_sm_70_changes_nothing() {
    assert_unchanged("`target-cpu=sm_70` in cargo configuration", |h| {
        h.cargo_config(
            "[build]\nrustflags = [\"-C\", \"target-cpu=sm_70\"]\n\
             [target.nvptx64-nvidia-cuda]\nrustflags = [\"-C\", \"target-cpu=sm_70\"]\n",
        );
        Vec::new()
    });
}

#[test]
fn jit_cargo_config_debug_profile_changes_nothing() {
    assert_unchanged("`[profile.release] debug = 2`", |h| {
        h.cargo_config("[profile.release]\ndebug = 2\nopt-level = 0\n[profile.dev]\ndebug = 2\n");
        Vec::new()
    });
}

#[test]
fn jit_cargo_config_rustc_wrapper_is_not_run() {
    assert_unchanged("`build.rustc-wrapper`", |h| {
        let wrapper = h.wrapper();
        h.cargo_config(&format!("[build]\nrustc-wrapper = {:?}\nrustc = {:?}\n", wrapper.display(), "/bin/false"));
        Vec::new()
    });
}

#[test]
fn jit_hostile_environment_and_toolchain_files_change_nothing() {
    assert_unchanged("hostile environment variables and a rust-toolchain.toml", |h| {
        std::fs::write(h.cwd().join("rust-toolchain.toml"), "[toolchain]\nchannel = \"stable\"\n").unwrap();
        std::fs::write(h.cwd().join("rust-toolchain"), "stable\n").unwrap();
        let wrapper = h.wrapper().display().to_string();
        let target_dir = h.root.path().join("target").display().to_string();
        vec![
            ("RUSTFLAGS", "-C target-cpu=sm_70 -C debuginfo=2".into()),
            ("CARGO_ENCODED_RUSTFLAGS", "-Ctarget-cpu=sm_70".into()),
            ("CARGO_BUILD_RUSTFLAGS", "-Ctarget-cpu=sm_70".into()),
            ("RUSTUP_TOOLCHAIN", "stable".into()),
            ("RUSTC", "/bin/false".into()),
            ("RUSTC_WRAPPER", wrapper.clone()),
            ("RUSTC_WORKSPACE_WRAPPER", wrapper),
            ("CARGO_TARGET_DIR", target_dir),
            ("CARGO_PROFILE_RELEASE_DEBUG", "2".into()),
            ("CARGO_PROFILE_RELEASE_OPT_LEVEL", "0".into()),
            ("CARGO_BUILD_TARGET", "x86_64-unknown-linux-gnu".into()),
            ("RUSTC_BOOTSTRAP", "1".into()),
            ("RUSTC_LOG", "debug".into()),
            ("RUSTDOCFLAGS", "--cfg hostile".into()),
        ]
    });
}

/// The reproduction, through the command line: `ferrinfer-jit aot` run from a directory
/// whose cargo configuration asks for `target-cpu=native`.
#[test]
fn jit_aot_command_from_a_hostile_directory_builds_the_same_ptx() {
    let hostile = Hostile::new();
    hostile.cargo_config("[build]\nrustflags = [\"-C\", \"target-cpu=native\"]\n[profile.release]\ndebug = 2\n");
    let out_dir = hostile.root.path().join("aot");
    let status = Command::new(env!("CARGO_BIN_EXE_ferrinfer-jit"))
        .args(["aot", "--family", "norm", "--arch", "9.0", "--out"])
        .arg(&out_dir)
        .current_dir(hostile.cwd())
        .env("CARGO_HOME", hostile.cargo_home())
        .env("RUSTFLAGS", "-C target-cpu=native")
        .env("FERRINFER_JIT_SYSROOT_DIR", shared_sysroot_dir())
        .env_remove("FERRINFER_PTXAS")
        .env_remove("FERRINFER_REQUIRE_PTXAS")
        .status()
        .unwrap();
    assert!(status.success());
    let (source_key, _) = {
        let cache = Cache::new(config(&out_dir), &[]);
        cache.keys(&spec(false)).unwrap()
    };
    let entries = ferrinfer_jit::aot::embeddable(&out_dir);
    assert_eq!(entries.len(), ferrinfer_jit::norm::declared_specs(CudaArch::HOPPER, false).len());
    let entry = entries.iter().find(|e| e.source_key == source_key).expect("the bf16 rmsnorm module");
    assert!(entry.ptx == baseline().1, "the AOT build from a hostile directory differs");
    assert!(entries.iter().all(|e| e.arch == CudaArch::HOPPER && e.ptx.contains("\n.target sm_90\n")));
}

#[test]
fn jit_target_cpu_reaches_the_kernels_crate() {
    // `cfg(target_feature = "sm_80")` in ferrinfer-kernels picks the hardware bf16 conversion;
    // with the target CPU only on the entry crate it was false and bf16 rounded in software.
    let ptx = &baseline().1;
    assert!(ptx.contains("cvt.rn.bf16x2.f32"), "the bf16 module rounds in software: -C target-cpu missed a crate");
}

#[test]
fn jit_ptx_does_not_depend_on_where_the_cache_is() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let deeper = b.path().join("a/much/longer/path");
    let build = |dir: &Path| Cache::new(config(dir), &[]).module(&spec(true)).unwrap().ptx.to_string();
    let (first, second) = (build(a.path()), build(&deeper));
    assert!(first.contains(".loc"), "a debug build has line info");
    assert!(first == second, "the debug PTX names the cache directory");
    assert!(!first.contains(&a.path().display().to_string()));
}
