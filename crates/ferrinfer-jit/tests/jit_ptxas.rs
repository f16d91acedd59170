//! Every module every family declares, built ahead of time for the default architectures (8.0,
//! 8.9, 9.0) and assembled by ptxas: it must assemble (no undefined symbol), no kernel may spill
//! or keep a stack frame, and each entry stores the cubin for its arch beside the PTX, found
//! again through an AOT lookup. ptxas comes from the PyPI wheel `nvidia-cuda-nvcc-cu12` (CI
//! installs it and sets FERRINFER_PTXAS and FERRINFER_REQUIRE_PTXAS=1); elsewhere, without
//! ptxas, that test says it skipped. Without ptxas `aot` still works and says cubins were
//! skipped, unless ptxas is required.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use ferrinfer_jit::{Cache, CudaArch, JitConfig, Origin, aot};

fn shared_sysroot_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("jit-sysroot")
}

/// Where the tests that build every module keep them (jit_sass reuses sm_90's): an AOT
/// directory kept between runs like the sysroot, keyed like any cache.
fn shared_modules_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("jit-modules")
}

#[test]
fn jit_aot_assembles_every_declared_module_for_the_default_archs_without_spills() {
    let env = JitConfig::from_env().unwrap();
    let Some(ptxas) = env.ptxas.clone() else {
        assert!(!env.require_ptxas, "FERRINFER_REQUIRE_PTXAS=1 but no ptxas was found");
        let _ = writeln!(
            std::io::stderr(),
            "jit_aot_assembles_every_declared_module_for_the_default_archs_without_spills: SKIPPED — no ptxas (set FERRINFER_PTXAS)"
        );
        return;
    };
    let (out, cache_dir, scratch) = (shared_modules_dir(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let config =
        JitConfig { ptxas: Some(ptxas), sysroot_dir: shared_sysroot_dir(), ..JitConfig::new(cache_dir.path()) };
    let modules = aot::build(&out, &CudaArch::AOT_DEFAULT, None, &config)
        .unwrap_or_else(|e| panic!("an AOT build with ptxas failed: {e}"));
    let in_out = Cache::new(JitConfig { cache_dir: out.clone(), ..config.clone() }, &[]);
    for module in &modules {
        let (spec, arch) = (&module.spec, module.spec.arch);
        let entry = in_out.entry_dir(&in_out.keys(spec).unwrap().1);
        let manifest = std::fs::read_to_string(entry.join("manifest.toml")).unwrap();
        for e in &spec.entry_points {
            assert!(manifest.contains(&format!("name = \"{}\"", e.name)), "no ptxas report for {} ({arch})", e.name);
        }
        let cubin = module.cubin(arch).unwrap_or_else(|| panic!("{} has no cubin for {arch}", spec.name));
        assert!(cubin.starts_with(b"\x7fELF"), "{} {arch}: a cubin is an ELF image", spec.name);
        assert!(entry.join(format!("kernels.{}.cubin", arch.target_cpu())).is_file());
        assert!(module.ptx.contains("ferrinfer_group_partials"), "{}: the module-scope shared memory", spec.name);
    }
    // ptxas runs with `--split-compile 0` (every core): the first module of each arch must get
    // the very cubin a plain single-threaded ptxas makes.
    for arch in CudaArch::AOT_DEFAULT {
        let module = modules.iter().find(|m| m.spec.arch == arch).unwrap();
        let (ptx, cubin) = (scratch.path().join("plain.ptx"), scratch.path().join("plain.cubin"));
        std::fs::write(&ptx, module.ptx.as_bytes()).unwrap();
        let status = Command::new(config.ptxas.as_ref().unwrap())
            .arg(format!("-arch={}", arch.target_cpu()))
            .arg(&ptx)
            .arg("-o")
            .arg(&cubin)
            .status()
            .unwrap();
        assert!(status.success());
        let plain = std::fs::read(&cubin).unwrap();
        assert!(
            module.cubin(arch).unwrap()[..] == plain[..],
            "{} ({arch}): split compile changed the cubin",
            module.spec.name
        );
    }
    // Found again from the AOT directory, cubin included, with no build allowed.
    let from_aot = JitConfig { aot_dir: Some(out.clone()), disable_jit: true, ..config };
    let lookup = Cache::new(from_aot, &[]);
    for module in &modules {
        let found = lookup.module(&module.spec).unwrap();
        assert_eq!((found.origin, found.cubin(module.spec.arch)), (Origin::Aot, module.cubin(module.spec.arch)));
    }
    // A cubin damaged after the lookup (same size, one byte changed) is not loaded: the caller
    // gets `None` and loads the PTX. Damaged in a copy of the entry: the shared one stays whole.
    let module = &modules[0];
    let entry = in_out.entry_dir(&in_out.keys(&module.spec).unwrap().1);
    let copy = scratch.path().join("aot").join(entry.strip_prefix(&out).unwrap());
    std::fs::create_dir_all(&copy).unwrap();
    for file in std::fs::read_dir(&entry).unwrap() {
        let file = file.unwrap();
        std::fs::copy(file.path(), copy.join(file.file_name())).unwrap();
    }
    let fresh = Cache::new(
        JitConfig { aot_dir: Some(scratch.path().join("aot")), disable_jit: true, ..JitConfig::new(cache_dir.path()) },
        &[],
    );
    let found = fresh.module(&module.spec).unwrap();
    let cubin = copy.join(format!("kernels.{}.cubin", module.spec.arch.target_cpu()));
    let mut bytes = std::fs::read(&cubin).unwrap();
    bytes[100] ^= 0xff;
    std::fs::write(&cubin, bytes).unwrap();
    assert_eq!(found.cubin(module.spec.arch), None, "a damaged cubin was handed out");
}

/// `ferrinfer-jit aot` for the cascade family (its few modules) on sm_90 with no ptxas anywhere,
/// and `vars`.
fn aot_without_ptxas(out: &Path, vars: &[(&str, &str)]) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_ferrinfer-jit"))
        .args(["aot", "--family", "cascade", "--arch", "9.0", "--out"])
        .arg(out)
        .env("FERRINFER_JIT_SYSROOT_DIR", shared_sysroot_dir())
        .env("PATH", "/usr/bin:/bin")
        .env_remove("FERRINFER_PTXAS")
        .env_remove("FERRINFER_REQUIRE_PTXAS")
        .envs(vars.iter().copied())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}

#[test]
fn jit_aot_without_ptxas_says_cubins_were_skipped_unless_ptxas_is_required() {
    let out = tempfile::tempdir().unwrap();
    let (ok, text) = aot_without_ptxas(out.path(), &[("FERRINFER_REQUIRE_PTXAS", "1")]);
    assert!(!ok && text.contains("ptxas is required"), "{text}");
    let (ok, text) = aot_without_ptxas(out.path(), &[]);
    assert!(ok, "{text}");
    assert!(text.contains("cubins: skipped, no ptxas"), "{text}");
    assert_eq!(
        aot::embeddable(out.path()).len(),
        ferrinfer_jit::cascade::declared_specs(CudaArch::HOPPER, false).len()
    );
}
