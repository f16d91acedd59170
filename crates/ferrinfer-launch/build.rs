//! Ahead-of-time kernels: compiles `ferrinfer-kernels` to PTX for every architecture in
//! `FERRINFER_CUDA_ARCH_LIST` (default "9.0") with `ferrinfer-jit`'s builder, and writes
//! `embedded_ptx.rs`, which the module cache includes. Needs the nightly toolchain with rust-src;
//! without it the build stops with the command that installs them.

use std::path::{Path, PathBuf};

use ferrinfer_jit::{CudaArch, KernelBuild};

fn main() {
    println!("cargo:rerun-if-env-changed=FERRINFER_CUDA_ARCH_LIST");
    println!("cargo:rerun-if-env-changed=FERRINFER_JIT_DEBUG");
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let kernels_dir = manifest_dir.join("../ferrinfer-kernels");
    println!("cargo:rerun-if-changed={}", kernels_dir.join("src").display());
    println!("cargo:rerun-if-changed={}", kernels_dir.join("Cargo.toml").display());
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());

    let archs = std::env::var("FERRINFER_CUDA_ARCH_LIST").unwrap_or_else(|_| "9.0".into());
    let archs = CudaArch::parse_list(&archs).unwrap_or_else(|e| fail(&format!("FERRINFER_CUDA_ARCH_LIST: {e}")));
    let debug = std::env::var("FERRINFER_JIT_DEBUG").is_ok_and(|v| v == "1");
    let entries: Vec<String> = archs.iter().map(|&arch| build_arch(&kernels_dir, &out_dir, arch, debug)).collect();
    let table = format!("&[\n{}]\n", entries.concat());
    std::fs::write(out_dir.join("embedded_ptx.rs"), table).unwrap();
}

/// Builds one architecture's PTX into OUT_DIR; returns its row of the embedded table.
fn build_arch(kernels_dir: &Path, out_dir: &Path, arch: CudaArch, debug: bool) -> String {
    let build = KernelBuild {
        crate_dir: kernels_dir.to_owned(),
        lib_name: "ferrinfer_kernels".into(),
        arch,
        target_dir: out_dir.join("nvptx"),
        debug,
    };
    let ptx = build.run(ferrinfer_jit::norm::entry_points().map(|e| e.name)).unwrap_or_else(|e| fail(&e.to_string()));
    let path = out_dir.join(format!("kernels_{}.ptx", arch.target_cpu()));
    std::fs::write(&path, ptx.source).unwrap();
    format!(
        "    (ferrinfer_jit::CudaArch {{ major: {}, minor: {} }}, include_str!({:?})),\n",
        arch.major, arch.minor, path
    )
}

fn fail(message: &str) -> ! {
    eprintln!("error: ferrinfer-launch could not build its GPU kernels: {message}");
    std::process::exit(1);
}
