//! The family's device kernels (nvptx64 only), made of the numerics beside them: the softmax
//! kernel, the filter kernels, and two kinds of sampling kernels — those that weigh a row as they
//! read it and those that stage it in shared memory — over a block's part of a row (`rows.rs`),
//! the pivot search's rounds (`search.rs`) and the draw of a token (`draw.rs`).

mod draw;
mod filter;
mod rows;
mod search;
mod softmax;
mod staged;
mod weighed;

pub use filter::{top_k_mask_rows, top_k_renorm_rows, top_p_renorm_rows};
pub use softmax::softmax_rows;
pub use staged::{top_k_sample_rows, top_k_top_p_logits_sample_rows, top_k_top_p_sample_rows};
pub use weighed::{min_p_sample_rows, sample_rows, top_p_sample_rows};
