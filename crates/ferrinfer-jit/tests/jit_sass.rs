//! The static guard on the kernels' machine code, without a GPU: every module every family
//! declares, built for sm_90 and assembled by ptxas (the cache keeps its cubin and report of
//! registers and spills), disassembled by nvdisasm.
//! It fails when a kernel spills or keeps a stack frame, issues a generic load or store, stores
//! bf16/f16 without the hardware conversion, or uses more registers than its budget; and it
//! snapshots one report line per entry point (registers, instruction mix), so that a change to
//! the kernels, the builder or the toolchain shows its codegen difference in review.
//!
//! ptxas and nvdisasm come from PyPI (`nvidia-cuda-nvcc-cu12`, `nvidia-cuda-nvdisasm`, at the
//! versions `.ci/run` pins): FERRINFER_PTXAS and FERRINFER_NVDISASM name them (else PATH). CI sets
//! FERRINFER_REQUIRE_PTXAS=1, which makes a missing tool a failure; elsewhere the test says it
//! skipped.

use std::io::Write;
use std::path::{Path, PathBuf};

use ferrinfer_jit::{Cache, CudaArch, FAMILIES, JitConfig, JitSpec, sass};

/// `FERRINFER_NVDISASM`, else `nvdisasm` on PATH.
fn nvdisasm() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("FERRINFER_NVDISASM").filter(|v| !v.is_empty()) {
        return Some(path.into());
    }
    std::env::split_paths(&std::env::var_os("PATH")?).map(|dir| dir.join("nvdisasm")).find(|p| p.is_file())
}

#[test]
fn jit_sass_every_kernel_keeps_the_codegen_rules() {
    let env = JitConfig::from_env().unwrap();
    let (Some(ptxas_path), Some(nvdisasm)) = (env.ptxas.clone(), nvdisasm()) else {
        assert!(!env.require_ptxas, "FERRINFER_REQUIRE_PTXAS=1 but ptxas or nvdisasm was not found");
        let _ = writeln!(
            std::io::stderr(),
            "jit_sass_every_kernel_keeps_the_codegen_rules: SKIPPED — no ptxas or nvdisasm (set FERRINFER_PTXAS, FERRINFER_NVDISASM)"
        );
        return;
    };
    let sysroot_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("jit-sysroot");
    let config = JitConfig { ptxas: Some(ptxas_path), sysroot_dir, ..JitConfig::new(shared_modules_dir()) };
    let cache = Cache::new(config, &[]);
    let specs: Vec<(&str, JitSpec)> =
        FAMILIES.iter().flat_map(|f| (f.specs)(CudaArch::HOPPER, false).into_iter().map(|s| (f.name, s))).collect();
    let checked = on_every_core(&specs, |(_, spec)| check_module(&cache, spec, &nvdisasm));
    let mut failures = Vec::new();
    for family in FAMILIES {
        let mut report = String::new();
        for ((owner, _), (module_report, module_failures)) in specs.iter().zip(&checked) {
            if *owner == family.name {
                report.push_str(module_report);
                failures.extend(module_failures.iter().cloned());
            }
        }
        insta::assert_snapshot!(format!("{}_sm90", family.name), report);
    }
    assert!(failures.is_empty(), "{} codegen rule(s) broken:\n{}", failures.len(), failures.join("\n"));
}

/// Where the tests that build every module keep them: jit_ptxas builds them (for every default
/// arch, with cubins) and this test finds sm_90's there, built only when run alone. Keyed like
/// any cache, so a source change builds new entries.
fn shared_modules_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("jit-modules")
}

/// `check(item)` for every item, on every core, the results in the items' order (a module's
/// nvdisasm run is single-threaded).
fn on_every_core<T: Sync, R: Send>(items: &[T], check: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let mut results: Vec<(usize, R)> = std::thread::scope(|scope| {
        let stripes: Vec<_> = (0..cores)
            .map(|core| {
                let check = &check;
                scope.spawn(move || {
                    items
                        .iter()
                        .enumerate()
                        .skip(core)
                        .step_by(cores)
                        .map(|(i, item)| (i, check(item)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        stripes.into_iter().flat_map(|stripe| stripe.join().unwrap()).collect()
    });
    results.sort_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, r)| r).collect()
}

/// The module of `spec` as the cache assembled it (its cubin and ptxas's report), disassembled:
/// its report lines (the module's name, then one line an entry) and every rule it breaks.
fn check_module(cache: &Cache, spec: &JitSpec, nvdisasm: &Path) -> (String, Vec<String>) {
    let module = cache.module(spec).unwrap_or_else(|e| panic!("{}: {e}", spec.name));
    let image = module.cubin(spec.arch).unwrap_or_else(|| panic!("{}: built without a cubin", spec.name));
    let resources = cache.ptxas_report(spec).unwrap_or_else(|| panic!("{}: no ptxas report", spec.name));
    let scratch = tempfile::tempdir().unwrap();
    let cubin = scratch.path().join("module.cubin");
    std::fs::write(&cubin, &image).unwrap();
    let functions = sass::disassemble(nvdisasm, &cubin).unwrap();
    let (mut report, mut failures) = (format!("{}\n", spec.name), Vec::new());
    for entry in &spec.entry_points {
        let used = resources.iter().find(|r| r.name == entry.name);
        let (Some(used), Some(code)) = (used, functions.get(&entry.name)) else {
            failures.push(format!("{}: no ptxas report or SASS", entry.name));
            continue;
        };
        let spilled = used.spill_store_bytes + used.spill_load_bytes + used.stack_bytes;
        if spilled > 0 {
            failures.push(format!("{}: {spilled} bytes of spills or stack", entry.name));
        }
        failures.extend(
            sass::violations(entry, code, used.registers, &module.ptx)
                .into_iter()
                .map(|v| format!("{}: {v}", entry.name)),
        );
        report.push_str(&format!("  {}\n", sass::report_line(&entry.name, code, used.registers, spilled)));
    }
    (report, failures)
}
