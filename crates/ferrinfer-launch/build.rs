//! Optional ahead-of-time kernels: with `FERRINFER_EMBED_AOT_DIR=DIR` (a directory made by
//! `cargo xtask aot`), every valid module in it — its PTX and, where ptxas made one, its cubin —
//! is compiled into this crate, compressed (`ferrinfer_jit::embed`), and found before any AOT
//! directory, cache or JIT build. Without it nothing is embedded and modules come from
//! FERRINFER_AOT_DIR, the disk cache or a JIT build.

use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-env-changed=FERRINFER_EMBED_AOT_DIR");
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    let mut rows = String::new();
    if let Some(dir) = std::env::var_os("FERRINFER_EMBED_AOT_DIR").filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        println!("cargo:rerun-if-changed={}", dir.display());
        let entries = ferrinfer_jit::aot::embeddable(&dir);
        if entries.is_empty() {
            eprintln!(
                "error: FERRINFER_EMBED_AOT_DIR={} holds no valid module (make one with `cargo xtask aot`)",
                dir.display()
            );
            std::process::exit(1);
        }
        for (i, entry) in entries.iter().enumerate() {
            let ptx = write_compressed(&out_dir, &format!("aot_{i}.ptx.z"), entry.ptx.as_bytes());
            let cubin = match &entry.cubin {
                Some(cubin) => format!(
                    "Some(include_bytes!({:?}))",
                    write_compressed(&out_dir, &format!("aot_{i}.cubin.z"), cubin)
                ),
                None => "None".to_owned(),
            };
            let arch =
                format!("ferrinfer_jit::CudaArch {{ major: {}, minor: {} }}", entry.arch.major, entry.arch.minor);
            rows += &format!(
                "    ferrinfer_jit::EmbeddedModule {{ source_key: {:?}, arch: {arch}, ptx: include_bytes!({ptx:?}), cubin: {cubin} }},\n",
                entry.source_key
            );
        }
    }
    std::fs::write(out_dir.join("embedded_modules.rs"), format!("&[\n{rows}]\n")).unwrap();
}

/// Writes `bytes` compressed to `name` in `dir`; returns its path.
fn write_compressed(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, ferrinfer_jit::embed::compress(bytes)).unwrap();
    path
}
