//! Embeds the kernel sources (`ferrinfer-kernels/src/**/*.rs`) in this crate, so cache keys and
//! JIT builds need neither the repository nor its path at run time; records the host triple (to
//! find the device toolchain's rustc without spawning rustup) and the device toolchain named by
//! the repository's one-line `device-toolchain` file (the only place it is named).

use std::path::{Path, PathBuf};

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let src = manifest_dir.join("../ferrinfer-kernels/src").canonicalize().expect("ferrinfer-kernels/src");
    println!("cargo:rerun-if-changed={}", src.display());
    let mut files = Vec::new();
    collect_rs(&src, &src, &mut files);
    files.sort();
    let rows: String = files
        .iter()
        .map(|rel| format!("    ({rel:?}, include_str!({:?})),\n", src.join(rel).display().to_string()))
        .collect();
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    std::fs::write(out.join("kernel_sources.rs"), format!("&[\n{rows}]\n")).unwrap();
    println!("cargo:rustc-env=FERRINFER_HOST_TRIPLE={}", std::env::var("TARGET").unwrap());
    println!(
        "cargo:rustc-env=FERRINFER_DEVICE_TOOLCHAIN={}",
        device_toolchain(&manifest_dir.join("../../device-toolchain"))
    );
}

/// The toolchain name in `path`: one line, one word (e.g. `nightly-2026-05-20`).
fn device_toolchain(path: &Path) -> String {
    println!("cargo:rerun-if-changed={}", path.display());
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let name = text.trim();
    assert!(
        !name.is_empty() && !name.contains(char::is_whitespace),
        "{} must hold one toolchain name such as nightly-2026-05-20, not {text:?}",
        path.display()
    );
    name.to_owned()
}

/// Every `.rs` file under `dir`, as '/'-separated paths relative to `root`.
fn collect_rs(root: &Path, dir: &Path, files: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect_rs(root, &path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(root).unwrap();
            files.push(rel.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/"));
        }
    }
}
