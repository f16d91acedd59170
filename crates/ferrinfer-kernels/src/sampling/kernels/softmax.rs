//! The softmax kernel: each block of a row's cluster reduces its slice to a [`Partial`], the
//! partials are merged over the cluster, and each block writes its slice's probabilities.

use super::rows::UNROLL;
use crate::device::{ClusterExchange, block_pairs, block_size, chain_after_prior_grids, thread_index};
use crate::element::Element;
use crate::sampling::softmax::{Partial, SoftmaxParams, logit_scale, row_temperature};
use crate::vector::{Kept, Packed, Reused};

impl From<Partial> for [f32; 2] {
    #[inline(always)]
    fn from(p: Partial) -> Self {
        [p.max, p.sum]
    }
}

impl From<[f32; 2]> for Partial {
    #[inline(always)]
    fn from([max, sum]: [f32; 2]) -> Self {
        Partial { max, sum }
    }
}

#[inline(always)]
fn merge_pairs(a: [f32; 2], b: [f32; 2]) -> [f32; 2] {
    Partial::from(a).merge(Partial::from(b)).into()
}

/// The device kernel: the grid's y dimension strides over rows; the `p.slices` blocks of a
/// cluster (x) share a row, each reducing its slice, exchanging partials through the
/// cluster's shared memory, then writing its slice. Launcher's guarantees: `vocab`, strides
/// and pointers multiples of `VEC` elements (probs: `min(VEC · 4, 16)` bytes); the launch's
/// cluster is `(slices, 1, 1)` (none for 1) and its dynamic shared memory
/// [`crate::CLUSTER_EXCHANGE_BYTES`].
#[inline(always)]
pub unsafe fn softmax_rows<T: Element, const VEC: usize>(p: &SoftmaxParams) {
    chain_after_prior_grids();
    let slices = ClusterExchange::new(p.slices);
    let vectors = p.vocab as usize / VEC;
    let per_slice = vectors.div_ceil(slices.count() as usize);
    let begin = (slices.rank() as usize * per_slice).min(vectors);
    let end = (begin + per_slice).min(vectors);
    let (step, first) = (block_size() as usize, begin + thread_index() as usize);
    let (mut row, row_step) =
        unsafe { (core::arch::nvptx::_block_idx_y() as u64, core::arch::nvptx::_grid_dim_y() as u64) };
    let mut round = 0u32;
    while row < p.rows {
        let logits = (p.logits as *const T).wrapping_add((row * p.logits_row_stride) as usize);
        let probs = (p.probs as *mut f32).wrapping_add((row * p.probs_row_stride) as usize);
        let scale = logit_scale(unsafe { row_temperature(p, row) });
        let scaled = |v: usize| {
            let x = unsafe { Packed::<T, VEC>::load::<Reused>(logits.add(v * VEC)) }.to_f32();
            x.map(|x| x * scale)
        };
        let mut partial = Partial::EMPTY;
        let mut v = first;
        while v < end {
            let mut values = [[f32::NEG_INFINITY; VEC]; UNROLL];
            for (k, values) in values.iter_mut().enumerate() {
                if v + k * step < end {
                    *values = scaled(v + k * step);
                }
            }
            for values in &values {
                partial = partial.with(values);
            }
            v += UNROLL * step;
        }
        let block = block_pairs(partial.into(), Partial::EMPTY.into(), merge_pairs);
        let total = Partial::from(slices.merge(block, round, merge_pairs));
        let inverse_sum = 1.0 / total.sum;
        // Unrolled as the reduction: one vector a step waited on each load (its stores keep
        // the next load behind them) — 8 load latencies in a row for a 64 KB slice.
        let mut v = first;
        while v < end {
            let mut values = [[0.0f32; VEC]; UNROLL];
            for (k, values) in values.iter_mut().enumerate() {
                if v + k * step < end {
                    *values = scaled(v + k * step);
                }
            }
            for (k, values) in values.iter().enumerate() {
                if v + k * step < end {
                    let probabilities = values.map(|u| total.probability(u, inverse_sum));
                    let at = probs.wrapping_add((v + k * step) * VEC);
                    unsafe { Packed::<f32, VEC>::from_f32(probabilities).store::<Kept>(at) };
                }
            }
            v += UNROLL * step;
        }
        row += row_step;
        round += 1;
    }
}
