//! Cache keys: stable for the same inputs, changed by exactly what changes the PTX.

use ferrinfer_jit::codegen::generate;
use ferrinfer_jit::key::{key, source_key};
use ferrinfer_jit::norm::{NormKernel, NormModule};
use ferrinfer_jit::sources::{CORE_SOURCES, KernelSources, covers};
use ferrinfer_jit::{CudaArch, FAMILIES, JitSpec};
use ferrinfer_kernels::element::DType;

fn spec(dtype: DType) -> JitSpec {
    NormModule { kernel: NormKernel::Rms, dtype, weight: dtype, vec: 16 / dtype.size() as u32 }
        .spec(CudaArch::HOPPER, false)
}

fn key_of(spec: &JitSpec, sources: &KernelSources) -> String {
    source_key(spec, &generate(spec), sources)
}

/// Every norm spec's source key.
fn norm_keys(sources: &KernelSources) -> Vec<String> {
    DType::ALL.into_iter().map(|d| key_of(&spec(d), sources)).collect()
}

/// The same file with one character added.
fn edited(sources: &KernelSources, path: &str) -> KernelSources {
    let text = format!("{} ", sources.get(path).unwrap());
    sources.clone().with_file(path, &text)
}

#[test]
fn jit_keys_are_stable() {
    let sources = KernelSources::embedded();
    assert_eq!(norm_keys(&sources), norm_keys(&KernelSources::embedded()));
    assert_eq!(key("abc", "rustc 1.97.0-nightly"), key("abc", "rustc 1.97.0-nightly"));
    let keys = norm_keys(&sources);
    assert!(keys.iter().all(|k| k.len() == 64 && k.chars().all(|c| c.is_ascii_hexdigit())));
    assert_eq!(keys.len(), keys.iter().collect::<std::collections::HashSet<_>>().len(), "dtypes share a key");
}

#[test]
fn jit_keys_change_with_the_family_kernel_file_and_core_files() {
    let sources = KernelSources::embedded();
    let before = norm_keys(&sources);
    for path in ["norm.rs", "element.rs", "lib.rs"] {
        let after = norm_keys(&edited(&sources, path));
        assert!(before.iter().zip(&after).all(|(b, a)| b != a), "editing {path} left a norm key unchanged");
    }
}

/// A family whose sources name a folder: every file in it, and one added to it, changes its keys.
#[test]
fn jit_keys_change_with_every_file_of_a_family_folder() {
    let sources = KernelSources::embedded();
    let family = FAMILIES.iter().find(|f| f.sources.iter().any(|s| s.ends_with('/'))).expect("a family with a folder");
    let folder = family.sources.iter().find(|s| s.ends_with('/')).unwrap();
    let spec = (family.specs)(CudaArch::HOPPER, false).remove(0);
    let before = key_of(&spec, &sources);
    let files: Vec<&str> = sources.paths().filter(|path| covers(folder, path)).collect();
    assert!(files.len() > 1, "{folder}: {files:?}");
    for path in files {
        assert_ne!(before, key_of(&spec, &edited(&sources, path)), "editing {path} left {} unchanged", spec.name);
    }
    let added = sources.clone().with_file(&format!("{folder}new.rs"), "");
    assert_ne!(before, key_of(&spec, &added), "a file added to {folder}");
}

#[test]
fn jit_keys_ignore_files_the_spec_does_not_use() {
    let sources = KernelSources::embedded();
    let with_other_family = sources.clone().with_file("activation.rs", "pub fn silu() {}");
    assert_eq!(norm_keys(&sources), norm_keys(&with_other_family));
}

#[test]
fn jit_keys_change_with_spec_fields_and_toolchain() {
    let sources = KernelSources::embedded();
    let base = spec(DType::Bf16);
    let variants = [
        JitSpec { debug: true, ..base.clone() },
        JitSpec { arch: "8.0".parse().unwrap(), ..base.clone() },
        JitSpec { flags: vec!["-Cllvm-args=-x".into()], ..base.clone() },
        JitSpec { constants: [("HIDDEN".to_string(), 4096)].into(), ..base.clone() },
    ];
    for variant in variants {
        assert_ne!(key_of(&base, &sources), key_of(&variant, &sources), "{variant:?}");
    }
    let source = key_of(&base, &sources);
    assert_ne!(
        key(&source, "rustc 1.97.0-nightly (a 2026-05-19)"),
        key(&source, "rustc 1.97.0-nightly (b 2026-05-20)")
    );
}

#[test]
fn jit_every_kernel_source_is_core_or_belongs_to_a_family() {
    let sources = KernelSources::embedded();
    for path in sources.paths() {
        let mut entries = CORE_SOURCES.iter().chain(FAMILIES.iter().flat_map(|f| f.sources));
        let owned = entries.any(|entry| covers(entry, path));
        assert!(owned, "kernels/src/{path} is in no spec's key: add it to CORE_SOURCES or a family's sources");
    }
}
