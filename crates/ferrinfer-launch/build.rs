//! Optional ahead-of-time kernels: with `FERRINFER_EMBED_AOT_DIR=DIR` (a directory made by
//! `cargo xtask aot`), every valid module in it is compiled into this crate, and found before any
//! cache or JIT build. Without it nothing is embedded and modules come from FERRINFER_AOT_DIR, the
//! disk cache or a JIT build.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=FERRINFER_EMBED_AOT_DIR");
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    let mut rows = String::new();
    if let Some(dir) = std::env::var_os("FERRINFER_EMBED_AOT_DIR").filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        println!("cargo:rerun-if-changed={}", dir.display());
        let entries = ferrinfer_jit::aot::entries(&dir);
        if entries.is_empty() {
            eprintln!(
                "error: FERRINFER_EMBED_AOT_DIR={} holds no valid module (make one with `cargo xtask aot`)",
                dir.display()
            );
            std::process::exit(1);
        }
        for (i, (source_key, ptx)) in entries.iter().enumerate() {
            let path = out_dir.join(format!("aot_{i}.ptx"));
            std::fs::write(&path, ptx).unwrap();
            rows += &format!(
                "    ferrinfer_jit::EmbeddedPtx {{ source_key: {source_key:?}, ptx: include_str!({path:?}) }},\n"
            );
        }
    }
    std::fs::write(out_dir.join("embedded_ptx.rs"), format!("&[\n{rows}]\n")).unwrap();
}
