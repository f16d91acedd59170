//! Layers 1, 2 and 4 of ferrinfer: the Rust API over borrowed tensors and everything between it
//! and a kernel launch.
//!
//! - Layer 1 (API): [`TensorView`] (borrowed and DLPack-shaped: pointer, byte offset, dtype,
//!   shape, strides in elements, device) and one function per op, e.g. [`rmsnorm`], each made
//!   from one line of its family's op table ([`op`]; [`ops()`] lists them all). Every argument
//!   is validated first, with a typed [`Error`] naming it; on any error the output is untouched.
//! - Layer 2 (module cache): each module's PTX (from `ferrinfer-jit`: embedded, AOT directory,
//!   disk cache or a JIT build) is loaded once per process and CUDA context.
//! - Layer 4 (launcher): dtype dispatch, vector width and launch configuration, and the launch
//!   itself with cudarc on the caller's stream — or the CPU backend for host tensors, which runs
//!   the same per-row numerics from `ferrinfer-kernels`.
//!
//! Every public op logs itself according to `FERRINFER_LOGLEVEL` / `FERRINFER_LOGDEST`
//! ([`logging`]).
//!
//! Shared files (`op`, `cuda`, `cpu`, `layout`, `tensor`, `tuning`, `error`, `logging`, `reference`)
//! know no op family; each family's vocabulary stays in its own file (`norm.rs`, `activation.rs`,
//! `sampling.rs`, `cascade.rs`, `rope.rs`, `page.rs`, `decode.rs`).
//!
//! This crate never names a framework (candle, torch, Python live in `ferrinfer-ffi`, above it),
//! and nothing needs CUDA installed to build it: without a driver
//! [`cuda_device_count`] is 0 and the CPU backend still works.

pub mod activation;
pub mod cascade;
mod cpu;
mod cuda;
pub mod decode;
mod error;
mod layout;
pub mod logging;
pub mod norm;
pub mod op;
pub mod page;
pub mod reference;
pub mod rope;
pub mod sampling;
pub mod scalar;
mod tensor;
mod tuning;

pub use activation::{gelu_and_mul, gelu_tanh_and_mul, silu_and_mul};
pub use cascade::{merge_state, merge_state_in_place, merge_states};
pub use cuda::{ENABLE_PDL_VAR, borrowed_stream, cuda_device_count, with_pdl};
pub use decode::{PosEncodingMode, batch_decode_with_paged_kv_cache, single_decode_with_kv_cache};
pub use error::Error;
pub use ferrinfer_kernels::element::DType;
pub use norm::{fused_add_rmsnorm, gemma_fused_add_rmsnorm, gemma_rmsnorm, layernorm, rmsnorm};
pub use op::OpInfo;
pub use page::{KvLayout, append_paged_kv_cache, get_batch_indices_positions};
pub use rope::{
    apply_llama31_rope, apply_llama31_rope_inplace, apply_llama31_rope_pos_ids, apply_llama31_rope_pos_ids_inplace,
    apply_rope, apply_rope_inplace, apply_rope_pos_ids, apply_rope_pos_ids_inplace, apply_rope_with_cos_sin_cache,
    apply_rope_with_cos_sin_cache_inplace,
};
pub use sampling::{
    min_p_sampling_from_probs, sampling_from_probs, softmax, top_k_mask_logits, top_k_renorm_probs,
    top_k_sampling_from_probs, top_k_top_p_sampling_from_logits, top_k_top_p_sampling_from_probs, top_p_renorm_probs,
    top_p_sampling_from_probs,
};
pub use scalar::{PerRow, Scalar};
pub use tensor::{Device, HostElement, MAX_DIMS, Stream, TensorView, contiguous_strides};

/// Re-exported so callers name the same cudarc and half types this crate uses.
pub use {cudarc, half};

/// Every op of every family, family by family in table order: one line per family.
pub fn ops() -> impl Iterator<Item = &'static OpInfo> {
    norm::OPS
        .iter()
        .chain(activation::OPS)
        .chain(sampling::OPS)
        .chain(cascade::OPS)
        .chain(rope::OPS)
        .chain(page::OPS)
        .chain(decode::OPS)
        .copied()
}

/// The op FlashInfer calls `name`.
pub fn op(name: &str) -> Option<&'static OpInfo> {
    ops().find(|op| op.name == name)
}

/// Every family's op table handed to an adapter's macro, in the form [`define_ops!`] gives
/// adapters (`ferrinfer_launch::all_ops!(tch_functions);`): one line per op, types resolved.
#[macro_export]
macro_rules! all_ops {
    ($adapter:path) => {
        $crate::norm_ops!($crate::define_ops, $adapter);
        $crate::activation_ops!($crate::define_ops, $adapter);
        $crate::sampling_ops!($crate::define_ops, $adapter);
        $crate::cascade_ops!($crate::define_ops, $adapter);
        $crate::rope_ops!($crate::define_ops, $adapter);
        $crate::page_ops!($crate::define_ops, $adapter);
        $crate::decode_ops!($crate::define_ops, $adapter);
    };
}
