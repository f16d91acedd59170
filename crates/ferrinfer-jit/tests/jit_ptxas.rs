//! Every module every family declares, built and assembled by ptxas for sm_90: it must load
//! (no undefined symbol), and no kernel may spill or keep a stack frame. ptxas comes from the
//! PyPI wheel `nvidia-cuda-nvcc-cu12` (CI installs it and sets FERRINFER_PTXAS and
//! FERRINFER_REQUIRE_PTXAS=1); elsewhere, without ptxas, this test says it skipped.

use std::io::Write;

use ferrinfer_jit::{Cache, CudaArch, FAMILIES, JitConfig};

#[test]
fn jit_every_declared_module_passes_ptxas_without_spills() {
    let env = JitConfig::from_env().unwrap();
    let Some(ptxas) = env.ptxas.clone() else {
        assert!(!env.require_ptxas, "FERRINFER_REQUIRE_PTXAS=1 but no ptxas was found");
        let _ = writeln!(
            std::io::stderr(),
            "jit_every_declared_module_passes_ptxas_without_spills: SKIPPED — no ptxas (set FERRINFER_PTXAS)"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sysroot_dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("jit-sysroot");
    let config = JitConfig { ptxas: Some(ptxas), sysroot_dir, ..JitConfig::new(dir.path()) };
    let cache = Cache::new(config, &[]);
    for family in FAMILIES {
        for spec in (family.specs)(CudaArch::HOPPER, false) {
            let module = cache.module(&spec).unwrap_or_else(|e| panic!("{}: {e}", spec.name));
            let manifest =
                std::fs::read_to_string(cache.entry_dir(&cache.keys(&spec).unwrap().1).join("manifest.toml")).unwrap();
            for entry in &spec.entry_points {
                assert!(manifest.contains(&format!("name = \"{}\"", entry.name)), "no ptxas report for {}", entry.name);
            }
            assert!(module.ptx.contains("ferrinfer_block_partials"));
        }
    }
}
