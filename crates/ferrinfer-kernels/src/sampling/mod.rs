//! The sampling family: what turns a decode step's logits into probabilities and tokens —
//! `softmax(logits / temperature)` (FlashInfer's `softmax`), the filters that keep a row's
//! largest entries (`top_k_mask_logits`, `top_k_renorm_probs`, `top_p_renorm_probs`) and the
//! sampling ops that draw a token among them (`sampling_from_probs`,
//! `top_k_`/`top_p_`/`min_p_sampling_from_probs`, `top_k_top_p_sampling_from_…`).
//!
//! One concern a file, each the numerics the device kernels and the CPU backend share:
//! `softmax.rs`; the entries' order (`keys.rs`), the search for a row's pivot (`search.rs`) and
//! the entries' exact masses (`mass.rs`), from which the filters (`filter.rs`) and the sampling
//! ops (`sample.rs`, with their random bits: `random_bits.rs`) are made. The device kernels are in
//! `kernels/` (nvptx64 only).

mod filter;
mod keys;
mod mass;
mod random_bits;
mod sample;
mod search;
mod softmax;

#[cfg(target_arch = "nvptx64")]
mod kernels;

pub use filter::{FILTER_HEADER_BYTES, Filter, FilterOutput, FilterParams, Keep, filter_row, row_top_k, row_top_p};
pub use keys::{order_key, word_keys, word_values};
pub use mass::{EntryWeight, MassScale};
pub use random_bits::{draw_random_bits, mass_target, row_random_bits};
pub use sample::{
    SAMPLE_HEADER_BYTES, SampleParams, min_p_lowest_bits, random_bits_of_row, row_second_top_p, row_seed_and_offset,
    sample_row, top_p_rank,
};
pub use search::{DIGIT_BITS, PivotSearch, share_of};
pub use softmax::{Partial, SoftmaxParams, logit_scale, row_temperature, softmax_row};

#[cfg(target_arch = "nvptx64")]
pub use kernels::{
    min_p_sample_rows, sample_rows, softmax_rows, top_k_mask_rows, top_k_renorm_rows, top_k_sample_rows,
    top_k_top_p_logits_sample_rows, top_k_top_p_sample_rows, top_p_renorm_rows, top_p_sample_rows,
};
