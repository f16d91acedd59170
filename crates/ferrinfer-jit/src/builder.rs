//! The rustc-nvptx64 builder: compiles the kernels crate to PTX for one architecture and checks
//! the result. It plays the role `cuda-builder` plays in Rust-CUDA and `nvcc` in FlashInfer.
//!
//! The build runs a child `cargo +nightly rustc` with a scrubbed environment: a parent cargo (when
//! this runs inside a build script) exports `RUSTC`, `RUSTFLAGS`, `CARGO_TARGET_DIR`,
//! `RUSTUP_TOOLCHAIN` and friends, which would otherwise leak into the child and pick the wrong
//! compiler, flags or directory.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::codegen::GeneratedCrate;
use crate::sources::KernelSources;
use crate::{CudaArch, JitSpec};

/// The toolchain that compiles device code (nvptx64 needs `-Zbuild-std`, so a nightly).
pub const NIGHTLY: &str = "nightly";

/// Flags every build passes to rustc (part of the cache key); the target CPU comes from the spec.
pub const FIXED_RUSTC_FLAGS: &[&str] = &["--emit=asm", "-C", UNROLL_FLAG];

/// LLVM only keeps small register arrays in registers once loops over them are fully unrolled;
/// below this threshold the f16 kernels' per-element loops spilled to `.local` memory.
const UNROLL_FLAG: &str = "llvm-args=-unroll-threshold=100000";

/// PTX text for one architecture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ptx {
    pub arch: CudaArch,
    pub source: String,
}

/// Why a kernel build failed, with the command that fixes it where there is one.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(
        "cannot run `cargo +{NIGHTLY}` ({source}); install Rust with rustup, then: rustup toolchain install {NIGHTLY} --component rust-src"
    )]
    CargoNotFound { source: std::io::Error },
    #[error(
        "the `{NIGHTLY}` toolchain is not installed (nvptx64 kernels need -Zbuild-std); fix: rustup toolchain install {NIGHTLY} --component rust-src"
    )]
    NightlyMissing,
    #[error(
        "the `{NIGHTLY}` toolchain lacks rust-src (needed to build `core` for nvptx64); fix: rustup component add rust-src --toolchain {NIGHTLY}"
    )]
    RustSrcMissing,
    #[error("the `{NIGHTLY}` toolchain cannot compile for nvptx64-nvidia-cuda:\n{0}\nfix: rustup update {NIGHTLY}")]
    NoNvptxSupport(String),
    #[error("compiling {crate_dir} for {arch} failed:\n{log}")]
    CompileFailed { crate_dir: PathBuf, arch: String, log: String },
    #[error("the build succeeded but wrote no PTX under {0}")]
    NoPtx(PathBuf),
    #[error("kernel `{entry}` uses .local memory (a register array spilled); the PTX is rejected")]
    LocalMemory { entry: String },
    #[error("PTX calls unresolved function `{name}` (device code must be generic or #[inline] and never panic)")]
    UnresolvedFunction { name: String },
    #[error("entry point `{0}` is missing from the PTX")]
    MissingEntryPoint(String),
    #[error("I/O error on {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error(
        "cannot query the `{NIGHTLY}` toolchain: {0}; fix: rustup toolchain install {NIGHTLY} --component rust-src"
    )]
    Toolchain(String),
    #[error("ptxas reports {what} in kernel `{entry}`; the PTX is rejected:\n{report}")]
    Resources { entry: String, what: String, report: String },
    #[error(
        "ptxas is required ({REQUIRE}=1) but was not found; install it with `pip install nvidia-cuda-nvcc-cu12` and set {PTXAS} to its bin/ptxas"
    )]
    PtxasMissing,
    #[error("ptxas failed on the PTX of `{spec}`:\n{log}")]
    PtxasFailed { spec: String, log: String },
}

const REQUIRE: &str = crate::config::REQUIRE_PTXAS_VAR;
const PTXAS: &str = crate::config::PTXAS_VAR;

/// Compiles generated entry-point crates to PTX, sharing one cargo target directory (so `core`,
/// built by `-Zbuild-std`, is compiled once per toolchain, not once per module).
#[derive(Clone, Debug)]
pub struct Builder {
    pub target_dir: PathBuf,
}

/// What a build produced.
#[derive(Clone, Debug)]
pub struct BuildOutput {
    pub ptx: Ptx,
    /// cargo's stderr, kept as the entry's build log.
    pub log: String,
}

impl Builder {
    /// Writes the kernels crate and `generated` under `build_dir` (replacing what is there),
    /// compiles it for the spec's arch and checks the PTX exports every entry point.
    pub fn build(
        &self,
        spec: &JitSpec,
        generated: &GeneratedCrate,
        sources: &KernelSources,
        build_dir: &Path,
    ) -> Result<BuildOutput, BuildError> {
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| BuildError::Io { path, source }
        };
        if build_dir.exists() {
            std::fs::remove_dir_all(build_dir).map_err(io(build_dir))?;
        }
        let crate_dir = build_dir.join("entry");
        sources.write_crate(&build_dir.join("kernels")).map_err(io(build_dir))?;
        std::fs::create_dir_all(&crate_dir).map_err(io(&crate_dir))?;
        std::fs::write(crate_dir.join("Cargo.toml"), &generated.cargo_toml).map_err(io(&crate_dir))?;
        std::fs::write(crate_dir.join("lib.rs"), &generated.lib_rs).map_err(io(&crate_dir))?;
        let compile = Compile {
            crate_dir,
            lib_name: format!("ferrinfer_jit_{}", spec.name),
            arch: spec.arch,
            target_dir: self.target_dir.clone(),
            flags: spec.flags.clone(),
        };
        let (path, log) = compile.run()?;
        let source = std::fs::read_to_string(&path).map_err(io(&path))?;
        let ptx = Ptx { arch: spec.arch, source: with_register_caps(&source, spec) };
        ptx.validate(spec.entry_points.iter().map(|e| e.name.as_str()))?;
        Ok(BuildOutput { ptx, log })
    }
}

/// One `cargo +nightly rustc` of one crate.
struct Compile {
    crate_dir: PathBuf,
    lib_name: String,
    arch: CudaArch,
    target_dir: PathBuf,
    flags: Vec<String>,
}

impl Compile {
    /// Compiles; returns the PTX's path and cargo's stderr.
    fn run(&self) -> Result<(PathBuf, String), BuildError> {
        match self.compile() {
            // A fresh rlib whose `.s` was deleted: cargo would not rerun rustc, so clean and redo.
            Err(BuildError::NoPtx(_)) => {
                let mut clean = self.cargo("clean");
                clean.args(["--release", "--target", "nvptx64-nvidia-cuda", "-p"]).arg(self.lib_name.replace('_', "-"));
                clean.output().map_err(|source| BuildError::CargoNotFound { source })?;
                self.compile()
            }
            result => result,
        }
    }

    fn compile(&self) -> Result<(PathBuf, String), BuildError> {
        let output = self.rustc_command().output().map_err(|source| BuildError::CargoNotFound { source })?;
        let log = String::from_utf8_lossy(&output.stderr).into_owned();
        if !output.status.success() {
            return Err(diagnose(&self.crate_dir, self.arch, &log));
        }
        Ok((self.ptx_path(&String::from_utf8_lossy(&output.stdout))?, log))
    }

    /// `cargo +nightly <subcommand>` for this crate and target directory, environment scrubbed.
    fn cargo(&self, subcommand: &str) -> Command {
        let mut cmd = nightly_command("cargo");
        cmd.arg(subcommand)
            .arg("--manifest-path")
            .arg(self.crate_dir.join("Cargo.toml"))
            .arg("--target-dir")
            .arg(&self.target_dir);
        cmd
    }

    fn rustc_command(&self) -> Command {
        let mut cmd = self.cargo("rustc");
        cmd.args(["--release", "--lib", "--target", "nvptx64-nvidia-cuda", "-Zbuild-std=core"])
            .arg("--message-format=json")
            .arg("--")
            .args(FIXED_RUSTC_FLAGS)
            .arg("-C")
            .arg(format!("target-cpu={}", self.arch.target_cpu()))
            .args(&self.flags);
        cmd
    }
}

/// Puts each entry's `.maxnreg` between its parameter list and its body, where PTX wants
/// performance directives (rustc has no attribute for it).
fn with_register_caps(ptx: &str, spec: &JitSpec) -> String {
    let mut out = String::with_capacity(ptx.len() + 64 * spec.entry_points.len());
    let mut cap = None;
    for line in ptx.lines() {
        if let Some(name) = entry_name(line) {
            cap = spec.entry_points.iter().find(|e| e.name == name).and_then(|e| e.max_registers);
        }
        if line == "{"
            && let Some(registers) = cap.take()
        {
            out.push_str(&format!(".maxnreg {registers}\n"));
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// `program +nightly` (a rustup proxy: cargo, rustc) with every variable a parent cargo or rustup
/// set removed, so the outer build's compiler, flags and directories do not leak into it.
pub(crate) fn nightly_command(program: &str) -> Command {
    let mut cmd = Command::new(program);
    for (key, _) in std::env::vars_os() {
        if leaks_into_child(&key) {
            cmd.env_remove(key);
        }
    }
    cmd.arg(format!("+{NIGHTLY}"));
    cmd
}

/// Variables a parent cargo or rustup sets that must not reach the child build.
fn leaks_into_child(key: &OsString) -> bool {
    let key = key.to_string_lossy();
    (key.starts_with("CARGO_") && key != "CARGO_HOME")
        || key.starts_with("RUSTC")
        || matches!(key.as_ref(), "RUSTUP_TOOLCHAIN" | "RUSTFLAGS" | "RUSTDOCFLAGS" | "CARGO")
}

fn diagnose(crate_dir: &Path, arch: CudaArch, stderr: &str) -> BuildError {
    if stderr.contains("not installed") {
        BuildError::NightlyMissing
    } else if stderr.contains("rust-src") || stderr.contains("library/Cargo.lock") {
        BuildError::RustSrcMissing
    } else if stderr.contains("nvptx64-nvidia-cuda") && (stderr.contains("target") && stderr.contains("not")) {
        BuildError::NoNvptxSupport(stderr.to_owned())
    } else {
        BuildError::CompileFailed { crate_dir: crate_dir.to_owned(), arch: arch.to_string(), log: stderr.to_owned() }
    }
}

impl Compile {
    /// The `.s` file of this build: rustc writes it beside the rlib/rmeta, under the same hash, which
    /// cargo reports (even when the build was fresh and rustc did not run).
    fn ptx_path(&self, cargo_json: &str) -> Result<PathBuf, BuildError> {
        let rlib_prefix = format!("lib{}-", self.lib_name);
        let rlib = cargo_json
            .lines()
            .filter(|line| line.contains(r#""reason":"compiler-artifact""#))
            .flat_map(|line| line.split('"'))
            .map(Path::new)
            .find(|path| {
                let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
                name.starts_with(&rlib_prefix) && (name.ends_with(".rlib") || name.ends_with(".rmeta"))
            });
        let deps = self.target_dir.join("nvptx64-nvidia-cuda/release/deps");
        let rlib = rlib.ok_or_else(|| BuildError::NoPtx(deps.clone()))?;
        let stem = rlib.file_stem().unwrap_or_default().to_string_lossy();
        let path = rlib.with_file_name(format!("{}.s", &stem[3..]));
        if path.is_file() { Ok(path) } else { Err(BuildError::NoPtx(path)) }
    }
}

impl Ptx {
    /// Rejects PTX that would load but run badly or not at all: a missing entry point, a kernel
    /// with `.local` memory, a call to a function the module does not define.
    pub fn validate<'a>(&self, entry_points: impl IntoIterator<Item = &'a str>) -> Result<(), BuildError> {
        if let Some(line) = self.source.lines().find(|l| l.trim_start().starts_with(".extern .func")) {
            let name = line.split_whitespace().last().unwrap_or(line).trim_end_matches(['(', ';']);
            return Err(BuildError::UnresolvedFunction { name: name.to_owned() });
        }
        if let Some(entry) = self.entries_using_local_memory().into_iter().next() {
            return Err(BuildError::LocalMemory { entry });
        }
        let defined = self.entry_points();
        for name in entry_points {
            if !defined.iter().any(|d| d == name) {
                return Err(BuildError::MissingEntryPoint(name.to_owned()));
            }
        }
        Ok(())
    }

    /// Names of the `.entry` functions, in order.
    pub fn entry_points(&self) -> Vec<String> {
        self.source.lines().filter_map(entry_name).map(str::to_owned).collect()
    }

    fn entries_using_local_memory(&self) -> Vec<String> {
        let mut current = None;
        let mut offenders = Vec::new();
        for line in self.source.lines() {
            if let Some(name) = entry_name(line) {
                current = Some(name.to_owned());
            } else if line.contains(".local")
                && let Some(name) = current.take()
            {
                offenders.push(name);
            }
        }
        offenders
    }
}

fn entry_name(line: &str) -> Option<&str> {
    let rest = line.trim_start().strip_prefix(".visible .entry ")?;
    Some(rest.split('(').next().unwrap_or(rest).trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ptx(source: &str) -> Ptx {
        Ptx { arch: CudaArch::HOPPER, source: source.to_owned() }
    }

    #[test]
    fn accepts_clean_ptx_with_all_entries() {
        let p = ptx(".visible .entry k_a(\n.param .b64 x\n)\n{\nret;\n}\n.visible .entry k_b(\n)\n{\n}\n");
        assert_eq!(p.entry_points(), ["k_a", "k_b"]);
        p.validate(["k_a", "k_b"]).unwrap();
    }

    #[test]
    fn rejects_missing_entry() {
        let err = ptx(".visible .entry k_a(\n)\n").validate(["k_b"]).unwrap_err();
        assert!(matches!(err, BuildError::MissingEntryPoint(n) if n == "k_b"));
    }

    #[test]
    fn rejects_local_memory_and_names_the_kernel() {
        let p = ptx(
            ".visible .entry k_a(\n)\n{\n}\n.visible .entry k_b(\n)\n{\n.local .align 8 .b8 __local_depot0[24];\n}\n",
        );
        assert!(matches!(p.validate([]).unwrap_err(), BuildError::LocalMemory { entry } if entry == "k_b"));
    }

    #[test]
    fn rejects_unresolved_functions() {
        let p = ptx(".extern .func _ZN4core9panicking5panic\n(\n);\n.visible .entry k(\n)\n");
        assert!(
            matches!(p.validate([]).unwrap_err(), BuildError::UnresolvedFunction { name } if name.contains("panic"))
        );
    }

    #[test]
    fn toolchain_failures_name_the_fix() {
        let dir = Path::new("/k");
        let cases = [
            (
                "error: toolchain 'nightly-x86_64-unknown-linux-gnu' is not installed",
                "rustup toolchain install nightly --component rust-src",
            ),
            (
                "error: \"/root/.rustup/toolchains/nightly/lib/rustlib/src/rust/library/Cargo.lock\" does not exist, unable to build with the standard library, try:\n rustup component add rust-src",
                "rustup component add rust-src --toolchain nightly",
            ),
            ("error: target `nvptx64-nvidia-cuda` not found in this toolchain", "rustup update nightly"),
        ];
        for (stderr, fix) in cases {
            let message = diagnose(dir, CudaArch::HOPPER, stderr).to_string();
            assert!(message.contains(fix), "{stderr:?} → {message:?}");
        }
        assert!(matches!(
            diagnose(dir, CudaArch::HOPPER, "error[E0308]: mismatched types"),
            BuildError::CompileFailed { .. }
        ));
    }

    #[test]
    fn register_caps_go_between_parameters_and_body() {
        use ferrinfer_kernels::element::DType;
        let module = crate::norm::NormModule {
            kernel: crate::norm::NormKernel::Rms,
            dtype: DType::F32,
            weight: DType::F32,
            vec: 4,
        };
        let mut spec = module.spec(CudaArch::HOPPER, false);
        spec.entry_points.truncate(1);
        spec.entry_points[0].max_registers = Some(96);
        let name = spec.entry_points[0].name.clone();
        let ptx = format!(".visible .entry {name}(\n.param .b64 p\n)\n{{\nret;\n}}\n");
        assert_eq!(
            with_register_caps(&ptx, &spec),
            format!(".visible .entry {name}(\n.param .b64 p\n)\n.maxnreg 96\n{{\nret;\n}}\n")
        );
    }

    #[test]
    fn child_environment_is_scrubbed() {
        for leaky in [
            "RUSTC",
            "RUSTC_WRAPPER",
            "RUSTUP_TOOLCHAIN",
            "RUSTFLAGS",
            "CARGO_TARGET_DIR",
            "CARGO_ENCODED_RUSTFLAGS",
            "CARGO",
        ] {
            assert!(leaks_into_child(&leaky.into()), "{leaky} would leak");
        }
        assert!(!leaks_into_child(&"CARGO_HOME".into()));
        assert!(!leaks_into_child(&"PATH".into()));
    }
}
