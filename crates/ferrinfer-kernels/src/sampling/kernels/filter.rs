//! The filter kernels: a row's pivot found by the blocks of its cluster together, then (renorms)
//! the kept sum, and each block writes its slice.

use super::rows::{RowSlices, Slice, add_pairs, row_max};
use super::search::{Weights, histogram_pivot};
use crate::device::{block_pairs, block_size, thread_index};
use crate::element::Element;
use crate::sampling::filter::{FILTER_HEADER_BYTES, FilterParams, row_top_k, row_top_p};
use crate::sampling::keys::word_values;
use crate::sampling::mass::MassScale;
use crate::sampling::search::PivotSearch;
use crate::vector::{Kept, Packed};

/// `top_k_mask_logits`: see [`filter_rows`].
#[inline(always)]
pub unsafe fn top_k_mask_rows<T: Element, const VEC: usize>(p: &FilterParams) {
    unsafe { filter_rows::<T, VEC, false, false>(p) }
}

/// `top_k_renorm_probs`: see [`filter_rows`].
#[inline(always)]
pub unsafe fn top_k_renorm_rows<T: Element, const VEC: usize>(p: &FilterParams) {
    unsafe { filter_rows::<T, VEC, false, true>(p) }
}

/// `top_p_renorm_probs`: see [`filter_rows`].
#[inline(always)]
pub unsafe fn top_p_renorm_rows<T: Element, const VEC: usize>(p: &FilterParams) {
    unsafe { filter_rows::<T, VEC, true, true>(p) }
}

/// The filter kernels: the grid's y dimension strides over rows; the `p.slices` blocks of a
/// cluster (x) share a row, each summing its slice's weights by digit a round, the sums
/// added over the cluster, until every block holds the same pivot; then (renorms) the kept
/// sum, exchanged likewise, and each block writes its slice. With `p.staged` a block keeps
/// its slice's keys in shared memory from the first pass on, so the row is read from global
/// memory once. Launcher's guarantees: `vocab`, strides and pointers multiples of `VEC`
/// elements; the launch's cluster is `(slices, 1, 1)` (none for 1); its dynamic shared
/// memory [`FILTER_HEADER_BYTES`] plus, with `staged`, the largest slice
/// (`⌈vocab / VEC / slices⌉` vectors).
#[inline(always)]
unsafe fn filter_rows<T: Element, const VEC: usize, const TOP_P: bool, const RENORM: bool>(p: &FilterParams) {
    let RowSlices { histogram, cluster, begin, end, mut row, row_step } = RowSlices::of_launch(p.slices, p.vocab, VEC);
    let (step, first) = (block_size() as usize, begin + thread_index() as usize);
    let header = FILTER_HEADER_BYTES as usize;
    let mut round = 0u32;
    while row < p.rows {
        let input = (p.input as *const T).wrapping_add((row * p.input_row_stride) as usize);
        let output = (p.output as *mut T).wrapping_add((row * p.output_row_stride) as usize);
        // Keys, not values, are staged: the passes after the first read them as they are.
        let mut slice = Slice::<T, VEC>::new(
            input,
            header,
            (begin, first, end, step),
            p.staged != 0,
            size_of::<T>() == 4 || RENORM,
        );
        let (search, weights) = if TOP_P {
            let search = PivotSearch::top_p::<T>(unsafe { row_top_p(p, row) });
            // Top-p ≥ 1 keeps the row: no pass for its masses either.
            let masses = if search.done() {
                MassScale::new(0.0, p.vocab)
            } else {
                MassScale::new(row_max(&mut slice, &cluster, 0.0, &mut round), p.vocab)
            };
            (search, Weights::Mass(masses))
        } else {
            (PivotSearch::top_k::<T>(unsafe { row_top_k(p, row) }, p.vocab), Weights::Count)
        };
        let pivot = histogram_pivot(&mut slice, &cluster, histogram, search, weights, &mut round);
        let scale = if RENORM {
            let mut sum = 0.0f32;
            let mut v = first;
            while v < end {
                let keys = slice.keys(v);
                let values = keys.map_words(word_values::<T>);
                for i in 0..VEC {
                    if keys.get(i).to_bits() >= pivot {
                        sum += values.get_f32(i);
                    }
                }
                v += step;
            }
            let total = cluster.merge(block_pairs([sum, 0.0], [0.0, 0.0], add_pairs), round, add_pairs);
            round += 1;
            1.0 / total[0]
        } else {
            1.0
        };
        let dropped = if RENORM { 0.0 } else { f32::NEG_INFINITY };
        let mut v = first;
        while v < end {
            let keys = slice.keys(v);
            let values = keys.map_words(word_values::<T>);
            let mut out = [0.0f32; VEC];
            for (i, out) in out.iter_mut().enumerate() {
                let x = values.get_f32(i);
                *out = if keys.get(i).to_bits() < pivot {
                    dropped
                } else if RENORM {
                    x * scale
                } else {
                    x
                };
            }
            unsafe { Packed::<T, VEC>::from_f32(out).store::<Kept>(output.add(v * VEC)) };
            v += step;
        }
        row += row_step;
    }
}
