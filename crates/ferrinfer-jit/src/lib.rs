//! Layer 3 of ferrinfer: describe what to compile and compile it. Turns the kernels of
//! `ferrinfer-kernels` into PTX for a CUDA architecture with the nightly nvptx64 recipe
//! (`cargo +nightly rustc --target nvptx64-nvidia-cuda -Zbuild-std=core -- --emit=asm`), checks
//! the result (every entry point present, no `.local` memory, no unresolved functions) and names
//! each op family's entry points.
//!
//! This crate never touches a GPU and never names a framework: it depends on `ferrinfer-kernels`
//! (for the entry-point tables) and on the standard library, nothing that needs CUDA. Today the
//! builder runs at build time of `ferrinfer-launch` (the PTX is embedded, AOT); the JIT disk
//! cache grows from this same builder.

pub mod arch;
pub mod builder;
pub mod norm;

pub use arch::CudaArch;
pub use builder::{BuildError, KernelBuild, Ptx};
