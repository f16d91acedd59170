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
//! kernels crate (an rlib, once per kernel sources, arch and flags) and the entry-point crate
//! (`--emit=asm`: the PTX).

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
use sha2::{Digest, Sha256};

use crate::digest::hex;
use crate::sysroot::Shared;
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
    /// Compiles `generated` under `build_dir` (replacing what is there) for the spec's arch,
    /// against the kernels crate built from `sources` (once: [`Builder::kernels_library`]), and
    /// checks the PTX: its target, every entry point, no `.local` memory, no unresolved call.
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
        let compile = Compile { toolchain: self.toolchain, spec, sysroot: &sysroot };
        let kernels = self.kernels_library(&compile, sources)?;
        fsutil::remove_path(build_dir).map_err(BuildError::io(build_dir))?;
        let entry_dir = build_dir.join("entry");
        for dir in [&entry_dir, &build_dir.join("out")] {
            fsutil::ensure_dir(dir).map_err(BuildError::io(dir))?;
        }
        std::fs::write(entry_dir.join("lib.rs"), &generated.lib_rs).map_err(BuildError::io(&entry_dir))?;
        let log = kernels.log + &compile.entry(build_dir, &kernels.rlib)?;
        let path = build_dir.join("out/kernels.ptx");
        let source = std::fs::read_to_string(&path).map_err(BuildError::io(&path))?;
        let ptx = Ptx { arch: spec.arch, source: with_register_caps(&source, spec) };
        let ptx_version = ptx.check_target(spec.debug).map_err(BuildError::WrongTarget)?;
        ptx.validate(spec.entry_points.iter().map(|e| e.name.as_str()))?;
        Ok(BuildOutput { ptx, ptx_version, log })
    }

    /// The kernels crate as an rlib for the spec's arch, debug setting and flags, built once per
    /// set of kernel sources and shared by every module built from them (most of a module's
    /// build time was this crate): `<sysroot_dir>/kernels-<toolchain>-<sm_XY>-<hash>/`.
    fn kernels_library(&self, compile: &Compile, sources: &KernelSources) -> Result<KernelsLibrary, BuildError> {
        let cpu = compile.spec.arch.target_cpu();
        let shared = Shared {
            name: format!("kernels-{}-{cpu}-{}", self.toolchain.name, compile.kernels_hash(sources)),
            what: format!("the kernels crate's build for {cpu}"),
            progress: format!(
                "building the kernels crate for {cpu} (once per kernel sources and architecture; cached in {})",
                self.sysroot_dir.display()
            ),
        };
        let dir = shared.get_or_build(&self.sysroot_dir, self.lock_wait, |root| {
            let crate_dir = root.join("kernels");
            sources.write_crate(&crate_dir).map_err(BuildError::io(&crate_dir))?;
            let log = compile.kernels(root)?;
            let log_path = root.join(KERNELS_LOG);
            std::fs::write(&log_path, log).map_err(BuildError::io(&log_path))?;
            fsutil::remove_path(&crate_dir).map_err(BuildError::io(&crate_dir))
        })?;
        let log_path = dir.join(KERNELS_LOG);
        let log = std::fs::read_to_string(&log_path).map_err(BuildError::io(&log_path))?;
        Ok(KernelsLibrary { rlib: dir.join(KERNELS_RLIB), log })
    }
}

/// Where a kernels library keeps rustc's diagnostics of its build (each module's log starts
/// with them).
const KERNELS_LOG: &str = "rustc.log";

/// The rlib in a kernels library's directory.
const KERNELS_RLIB: &str = "out/libferrinfer_kernels.rlib";

/// The kernels crate built for one arch: its rlib and rustc's diagnostics.
struct KernelsLibrary {
    rlib: PathBuf,
    log: String,
}

/// The two rustc runs of one module.
struct Compile<'a> {
    toolchain: &'a Toolchain,
    spec: &'a JitSpec,
    sysroot: &'a Path,
}

impl Compile<'_> {
    /// `<dir>/kernels/src/lib.rs` → `<dir>/out/libferrinfer_kernels.rlib`.
    fn kernels(&self, dir: &Path) -> Result<String, BuildError> {
        let mut cmd = self.rustc(dir, "ferrinfer_kernels", "kernels/src/lib.rs");
        cmd.args(["--emit=metadata,link", "--out-dir=out"]);
        run(cmd, "the kernels crate", self.spec.arch)
    }

    /// `<dir>/entry/lib.rs` → `<dir>/out/kernels.ptx`, linking the kernels crate's `rlib`.
    fn entry(&self, dir: &Path, rlib: &Path) -> Result<String, BuildError> {
        let mut cmd = self.rustc(dir, &format!("ferrinfer_jit_{}", self.spec.name), "entry/lib.rs");
        cmd.arg("--extern").arg(format!("ferrinfer_kernels={}", rlib.display()));
        cmd.args(["--emit=asm", "-o", "out/kernels.ptx"]);
        run(cmd, &format!("module `{}`", self.spec.name), self.spec.arch)
    }

    /// What the kernels crate's rlib depends on besides the toolchain's name: the toolchain's
    /// exact version, every kernel source and every flag of [`Compile::rustc`] (16 hex digits).
    fn kernels_hash(&self, sources: &KernelSources) -> String {
        let mut hash = Sha256::new();
        let mut field = |name: &str, value: &str| {
            hash.update(format!("{name} {}\n", value.len()));
            hash.update(value);
        };
        field("toolchain", &self.toolchain.version);
        field("sysroot", &sysroot::recipe());
        field("edition", KERNELS_EDITION);
        field("flags", &self.flags().join(" "));
        for path in sources.paths() {
            field(path, sources.get(path).unwrap_or_default());
        }
        hex(&hash.finalize()[..8])
    }

    /// Every flag of both crates but their names, paths and what to emit.
    fn flags(&self) -> Vec<String> {
        let fixed = CODEGEN_FLAGS.iter().chain(KERNEL_FLAGS).map(|f| f.to_string());
        let debuginfo = if self.spec.debug { "-Cdebuginfo=line-tables-only" } else { "-Cdebuginfo=0" };
        fixed
            .chain([format!("-Ctarget-cpu={}", self.spec.arch.target_cpu())])
            .chain(ptx_isa_flag(self.spec.arch))
            .chain([debuginfo.to_owned()])
            .chain(self.spec.flags.iter().cloned())
            .collect()
    }

    /// rustc for one crate of the spec in `dir`, everything but what to emit. `dir` is called
    /// [`REMAPPED_BUILD_DIR`] in the output, wherever it is.
    fn rustc(&self, dir: &Path, crate_name: &str, root: &str) -> Command {
        let mut cmd = self.toolchain.rustc_command();
        cmd.current_dir(dir)
            .args(["--crate-name", crate_name, "--crate-type=rlib", &format!("--edition={KERNELS_EDITION}"), root])
            .args(self.flags())
            .arg(format!("-Cmetadata={crate_name}"))
            .arg("--remap-path-prefix")
            .arg(format!("{}={REMAPPED_BUILD_DIR}", dir.display()))
            .arg("--sysroot")
            .arg(self.sysroot);
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
