//! Lists this crate's own source files (`src/**/*.rs`) for [`SOURCES`](crate::SOURCES): the JIT
//! hashes them into cache keys and compiles them for the device, and takes them from this crate
//! (a dependency like any other) rather than from a path in the repository, so every crate
//! packages and builds on its own. A build script, not a dependency: this crate still depends on
//! nothing.

use std::path::{Path, PathBuf};

fn main() {
    let src = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap()).join("src");
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
