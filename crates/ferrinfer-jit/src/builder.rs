//! The rustc-nvptx64 builder: compiles the kernels crate and a generated entry-point crate to PTX
//! for one architecture and checks the result. It plays the role `cuda-builder` plays in
//! Rust-CUDA and `nvcc` in FlashInfer.
//!
//! No cargo: cargo reads configuration files from the working directory up and from
//! `CARGO_HOME` (`[build] rustflags`, `[profile.release]`, `build.rustc-wrapper`, ...) and
//! environment variables (`RUSTFLAGS`, `CARGO_TARGET_DIR`, ...), any of which changed the PTX
//! without changing its key, and `cargo rustc -- -C target-cpu` reached only the last crate. The
//! device toolchain's own `rustc` is run instead, by path, with an empty environment, in the
//! build directory: rustc reads no configuration file, so its arguments — all listed here and
//! in [`crate::sysroot`], and hashed into every key — decide the PTX. Three crates, each with
//! the spec's `-C target-cpu`: `core` (once per toolchain and arch, [`crate::sysroot`]), the
//! kernels crate (an rlib) and the entry-point crate (`--emit=asm`: the PTX).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::arch::PtxVersion;
use crate::codegen::GeneratedCrate;
pub use crate::error::BuildError;
pub(crate) use crate::rustc::Progress;
use crate::rustc::{CODEGEN_FLAGS, run};
use crate::sources::KernelSources;
use crate::toolchain::Toolchain;
use crate::{CudaArch, JitSpec, fsutil, sysroot};

/// Edition of the kernels crate (its `Cargo.toml` inherits the workspace's; a test compares).
pub const KERNELS_EDITION: &str = "2024";

/// Flags of the kernels and entry-point crates beyond [`CODEGEN_FLAGS`]. LLVM only keeps small
/// register arrays in registers once loops over them are fully unrolled; below this threshold
/// the f16 kernels' per-element loops spilled to `.local` memory.
pub const KERNEL_FLAGS: &[&str] = &["-Cllvm-args=-unroll-threshold=100000"];

/// The oldest PTX ISA the kernels may be emitted as: their loads use `.L1::no_allocate` (PTX ISA
/// 7.4). LLVM emits an architecture's oldest ISA (7.0 for sm_80), so older targets are raised to
/// this one with `-C target-feature=+ptxNN` (rustc calls the feature unstable and says so in
/// the build log; the device toolchain is pinned). Part of every key.
pub const MIN_PTX_ISA: PtxVersion = PtxVersion { major: 7, minor: 4 };

/// The oldest PTX ISA of sm_90 kernels: the staged norm kernels use bulk copies
/// (`cp.async.bulk`, PTX ISA 8.0); LLVM's oldest for sm_90 is 7.8.
pub const HOPPER_PTX_ISA: PtxVersion = PtxVersion { major: 8, minor: 0 };

/// What the build directory is called inside the PTX (line info of debug builds), so the PTX
/// does not depend on where the cache is.
const REMAPPED_BUILD_DIR: &str = "/ferrinfer-jit";

/// PTX text for one architecture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ptx {
    pub arch: CudaArch,
    pub source: String,
}

/// Compiles generated entry-point crates to PTX with the device toolchain, against a `core` built
/// once per toolchain and arch under `sysroot_dir`.
#[derive(Clone, Debug)]
pub struct Builder<'t> {
    pub toolchain: &'t Toolchain,
    pub sysroot_dir: PathBuf,
    /// How long to wait for another process building the same `core` (`None`: as long as it
    /// takes).
    pub lock_wait: Option<Duration>,
}

/// What a build produced.
#[derive(Clone, Debug)]
pub struct BuildOutput {
    pub ptx: Ptx,
    /// The PTX ISA version of its `.version` line.
    pub ptx_version: PtxVersion,
    /// rustc's diagnostics (kernels crate, then entry crate), kept as the entry's build log.
    pub log: String,
}

impl Builder<'_> {
    /// Writes the kernels crate and `generated` under `build_dir` (replacing what is there),
    /// compiles both for the spec's arch and checks the PTX: its target, every entry point, no
    /// `.local` memory, no unresolved call.
    pub fn build(
        &self,
        spec: &JitSpec,
        generated: &GeneratedCrate,
        sources: &KernelSources,
        build_dir: &Path,
    ) -> Result<BuildOutput, BuildError> {
        if !spec.arch.is_known() {
            return Err(BuildError::UnknownArch { arch: spec.arch });
        }
        let sysroot = sysroot::core_sysroot(self.toolchain, spec.arch, &self.sysroot_dir, self.lock_wait)?;
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| BuildError::Io { path, source }
        };
        fsutil::remove_path(build_dir).map_err(io(build_dir))?;
        sources.write_crate(&build_dir.join("kernels")).map_err(io(build_dir))?;
        let entry_dir = build_dir.join("entry");
        fsutil::ensure_dir(&entry_dir).map_err(io(&entry_dir))?;
        std::fs::write(entry_dir.join("lib.rs"), &generated.lib_rs).map_err(io(&entry_dir))?;
        let compile = Compile { toolchain: self.toolchain, spec, build_dir, sysroot: &sysroot };
        let mut log = compile.kernels()?;
        log += &compile.entry()?;
        let path = build_dir.join("out/kernels.ptx");
        let source = std::fs::read_to_string(&path).map_err(io(&path))?;
        let ptx = Ptx { arch: spec.arch, source: with_register_caps(&source, spec) };
        let ptx_version = ptx.check_target(spec.debug).map_err(BuildError::WrongTarget)?;
        ptx.validate(spec.entry_points.iter().map(|e| e.name.as_str()))?;
        Ok(BuildOutput { ptx, ptx_version, log })
    }
}

/// The two rustc runs of one module.
struct Compile<'a> {
    toolchain: &'a Toolchain,
    spec: &'a JitSpec,
    build_dir: &'a Path,
    sysroot: &'a Path,
}

impl Compile<'_> {
    /// `<build>/kernels/src/lib.rs` → `<build>/out/libferrinfer_kernels.rlib`.
    fn kernels(&self) -> Result<String, BuildError> {
        let mut cmd = self.rustc("ferrinfer_kernels", "kernels/src/lib.rs");
        cmd.args(["--emit=metadata,link", "--out-dir=out"]);
        run(cmd, "the kernels crate", self.spec.arch)
    }

    /// `<build>/entry/lib.rs` → `<build>/out/kernels.ptx`.
    fn entry(&self) -> Result<String, BuildError> {
        let mut cmd = self.rustc(&format!("ferrinfer_jit_{}", self.spec.name), "entry/lib.rs");
        cmd.args([
            "--extern",
            "ferrinfer_kernels=out/libferrinfer_kernels.rlib",
            "--emit=asm",
            "-o",
            "out/kernels.ptx",
        ]);
        run(cmd, &format!("module `{}`", self.spec.name), self.spec.arch)
    }

    /// rustc for one crate of the spec, everything but what to emit.
    fn rustc(&self, crate_name: &str, root: &str) -> Command {
        let mut cmd = self.toolchain.rustc_command();
        cmd.current_dir(self.build_dir)
            .args(["--crate-name", crate_name, "--crate-type=rlib", &format!("--edition={KERNELS_EDITION}"), root])
            .args(CODEGEN_FLAGS)
            .args(KERNEL_FLAGS)
            .arg(format!("-Ctarget-cpu={}", self.spec.arch.target_cpu()))
            .args(ptx_isa_flag(self.spec.arch))
            .arg(if self.spec.debug { "-Cdebuginfo=line-tables-only" } else { "-Cdebuginfo=0" })
            .arg(format!("-Cmetadata={crate_name}"))
            .arg("--remap-path-prefix")
            .arg(format!("{}={REMAPPED_BUILD_DIR}", self.build_dir.display()))
            .arg("--sysroot")
            .arg(self.sysroot)
            .args(&self.spec.flags);
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

/// The PTX ISA the kernels are emitted as for `arch`: its oldest, raised to [`MIN_PTX_ISA`] (and
/// on sm_90 and later to [`HOPPER_PTX_ISA`]); `None` for an unknown architecture.
fn ptx_isa(arch: CudaArch) -> Option<PtxVersion> {
    let floor = if arch >= CudaArch::HOPPER { HOPPER_PTX_ISA } else { MIN_PTX_ISA };
    arch.min_ptx_version().map(|oldest| oldest.max(floor))
}

/// `-Ctarget-feature=+ptxNN` where [`ptx_isa`] is newer than what LLVM would emit (the
/// architecture's oldest); nothing where it is not.
fn ptx_isa_flag(arch: CudaArch) -> Option<String> {
    let isa = ptx_isa(arch)?;
    (Some(isa) > arch.min_ptx_version()).then(|| format!("-Ctarget-feature=+ptx{}{}", isa.major, isa.minor))
}

impl Ptx {
    /// Checks the module header against the arch it is for: `.target` names exactly that
    /// processor (not another one), with `, debug` exactly when built with line info, and
    /// `.version` is a PTX ISA that can target it. Returns the version. Only the header is
    /// read: this runs on every load.
    pub fn check_target(&self, debug: bool) -> Result<PtxVersion, String> {
        let header = || self.source.lines().take(64).map(str::trim);
        let directive = |name: &str| header().find_map(|l| l.strip_prefix(name).map(str::trim));
        let cpu = self.arch.target_cpu();
        let expected = if debug { format!("{cpu}, debug") } else { cpu.clone() };
        match directive(".target ") {
            Some(target) if target == expected => {}
            Some(target) => return Err(format!("it targets `{target}`, not `{expected}`")),
            None => return Err("it has no .target line".into()),
        }
        let version = directive(".version ").and_then(PtxVersion::parse).ok_or("it has no valid .version line")?;
        match ptx_isa(self.arch) {
            Some(min) if version >= min => Ok(version),
            Some(min) => Err(format!("PTX ISA {version} cannot target {cpu} (needs {min} or newer)")),
            None => Err(format!("{} is not a known CUDA architecture", self.arch)),
        }
    }

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
    fn the_header_must_name_the_specs_processor_and_a_ptx_isa_that_targets_it() {
        let header = |version: &str, target: &str| ptx(&format!("//\n\n.version {version}\n.target {target}\n"));
        assert_eq!(header("8.0", "sm_90").check_target(false), Ok(PtxVersion { major: 8, minor: 0 }));
        assert!(header("8.0", "sm_90, debug").check_target(true).is_ok());
        for (version, target, debug, why) in [
            ("8.0", "znver3", false, "targets `znver3`"),
            ("7.0", "sm_70", false, "targets `sm_70`"),
            ("8.0", "sm_90, debug", false, "targets `sm_90, debug`"),
            ("8.0", "sm_90", true, "targets `sm_90`, not `sm_90, debug`"),
            ("7.8", "sm_90", false, "PTX ISA 7.8 cannot target sm_90 (needs 8.0 or newer)"),
        ] {
            let err = header(version, target).check_target(debug).unwrap_err();
            assert!(err.contains(why), "{version} {target}: {err}");
        }
        assert!(ptx(".version 8.0\n").check_target(false).is_err(), "no .target line");
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
}
