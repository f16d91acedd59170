//! A block's part of a row, as the filter and sampling kernels read it: the launch's slicing of
//! rows over a cluster's blocks ([`RowSlices`]), a block's slice of vectors as keys — from global
//! memory or, once staged, from shared memory ([`Slice`]) — and the row's largest entry.

use crate::device::{
    ClusterExchange, ClusterHistogram, block_pairs, chain_after_prior_grids, dynamic_shared, warp_any,
};
use crate::element::Element;
use crate::sampling::keys::{word_keys, word_values};
use crate::sampling::search::PivotSearch;
use crate::vector::{Packed, Reused, Shared};

/// Vectors each thread loads before it reduces them: their loads are in flight together.
pub(super) const UNROLL: usize = 4;

#[inline(always)]
pub(super) fn add_pairs(a: [f32; 2], b: [f32; 2]) -> [f32; 2] {
    [a[0] + b[0], a[1] + b[1]]
}

#[inline(always)]
fn max_pairs(a: [f32; 2], b: [f32; 2]) -> [f32; 2] {
    [a[0].max(b[0]), a[1].max(b[1])]
}

/// One block's part of a row: vectors `first`, `first + step`, … below `end`, read from
/// global memory or, once staged, from shared memory, as keys.
pub(super) struct Slice<T: Element, const VEC: usize> {
    input: *const T,
    /// Where the staged keys start: after the filter's header.
    header: usize,
    pub(super) begin: usize,
    first: usize,
    pub(super) end: usize,
    step: usize,
    staged: bool,
    in_shared: bool,
    /// Whether a pass issues a batch's loads together ([`Slice::batch_keys`]) — a constant
    /// of the kernel, which every kernel but the 16-bit mask takes: its batch needs 72
    /// registers, and a cap of 72 leaves it three blocks a multiprocessor instead of four
    /// (22 % slower at 32000 × 256, docs/perf/sampling.md).
    batched: bool,
}

impl<T: Element, const VEC: usize> Slice<T, VEC> {
    /// The slice of vectors `first`, `first + step`, … below `end` of the row at `input`
    /// (its block's from `begin`), not yet staged.
    #[inline(always)]
    pub(super) fn new(
        input: *const T,
        header: usize,
        (begin, first, end, step): (usize, usize, usize, usize),
        staged: bool,
        batched: bool,
    ) -> Self {
        Slice { input, header, begin, first, end, step, staged, in_shared: false, batched }
    }

    /// [`Slice::each_keys`], but from the row every load of the batch is issued before any
    /// vector is turned into keys ([`Packed::batch_zero`]; with each conversion in the branch
    /// of its own load, ptxas issued a pass's loads one at a time).
    #[inline(always)]
    fn batch_keys(&self, v: usize) -> [Packed<T, VEC>; UNROLL] {
        if self.in_shared {
            return self.each_keys(v);
        }
        let mut loaded = [Packed::<T, VEC>::ZERO; UNROLL];
        let at = |k: usize| v + k * self.step;
        for (k, vector) in loaded.iter_mut().enumerate() {
            let src = self.input.wrapping_add(at(k) * VEC);
            *vector = unsafe { Packed::<T, VEC>::load_if::<Reused>(at(k) < self.end, src) };
        }
        let zero = Packed::batch_zero(&loaded);
        for (k, vector) in loaded.iter_mut().enumerate() {
            if at(k) < self.end {
                *vector = vector.map_words(|word| word_keys::<T>(word) ^ zero);
            }
        }
        loaded
    }

    /// The keys of the batch of vectors `v + k · step` (zeros past the slice's end), staged
    /// or from the row, each loaded and converted in a branch of its own: fewer registers
    /// than [`Slice::batch_keys`], but ptxas issues the row's loads one at a time.
    #[inline(always)]
    fn each_keys(&self, v: usize) -> [Packed<T, VEC>; UNROLL] {
        let mut loaded = [Packed::<T, VEC>::ZERO; UNROLL];
        for (k, vector) in loaded.iter_mut().enumerate() {
            if v + k * self.step < self.end {
                *vector = self.keys(v + k * self.step);
            }
        }
        loaded
    }

    /// Where vector `v` is staged: after the header, from the block's first vector on.
    #[inline(always)]
    fn staged_at(&self, v: usize) -> *mut T {
        (self.header + dynamic_shared() as usize + (v - self.begin) * VEC * size_of::<T>()) as *mut T
    }

    /// The keys of vector `v`.
    #[inline(always)]
    pub(super) fn keys(&self, v: usize) -> Packed<T, VEC> {
        unsafe {
            if self.in_shared {
                Packed::<T, VEC>::load::<Shared>(self.staged_at(v))
            } else {
                Packed::<T, VEC>::load::<Reused>(self.input.add(v * VEC)).map_words(word_keys::<T>)
            }
        }
    }

    /// `visit(keys, here)` over the slice, [`UNROLL`] vectors' loads in flight together; the
    /// first pass stages the keys in shared memory where the launch gave it room, and the
    /// passes after it read them there. Warp-uniform, so that `visit` may use the warp's
    /// instructions: a warp steps while any of its lanes has a vector left, and a lane past
    /// its end visits zeros with `here` false. Every thread must call it.
    #[inline(always)]
    pub(super) fn pass(&mut self, mut visit: impl FnMut(&Packed<T, VEC>, bool)) {
        let mut v = self.first;
        while warp_any(v < self.end) {
            let loaded = if self.batched { self.batch_keys(v) } else { self.each_keys(v) };
            for (k, vector) in loaded.iter().enumerate() {
                let here = v + k * self.step < self.end;
                if here && self.staged && !self.in_shared {
                    unsafe { vector.store::<Shared>(self.staged_at(v + k * self.step)) };
                }
                visit(vector, here);
            }
            v += UNROLL * self.step;
        }
        self.in_shared = self.staged;
    }

    /// Whether any key of `keys` is a candidate of `search`'s round: after the first rounds
    /// few are, and a vector without any skips the summing (a branch the warp mostly takes
    /// together).
    #[inline(always)]
    pub(super) fn any_candidate(keys: &Packed<T, VEC>, search: &PivotSearch) -> bool {
        let mut any = false;
        for i in 0..VEC {
            any |= search.is_candidate(keys.get(i).to_bits());
        }
        any
    }
}

/// The largest entry (or `least`) of the row `slice` holds, over the cluster: a pass, which
/// stages the slice.
#[inline(always)]
pub(super) fn row_max<T: Element, const VEC: usize>(
    slice: &mut Slice<T, VEC>,
    cluster: &ClusterExchange,
    least: f32,
    round: &mut u32,
) -> f32 {
    let mut max = least;
    slice.pass(|keys, here| {
        let values = keys.map_words(word_values::<T>);
        for i in 0..VEC {
            if here {
                max = max.max(values.get_f32(i));
            }
        }
    });
    let max = cluster.merge(block_pairs([max, least], [least, least], max_pairs), *round, max_pairs)[0];
    *round += 1;
    max
}

/// What the filter and sampling kernels set up first: the cluster's histogram and exchange,
/// this block's slice `begin..end` of a row's vectors (`VEC` entries each), and the first row
/// the block takes and the step to its next (the grid's y dimension strides over rows).
pub(super) struct RowSlices {
    pub(super) histogram: ClusterHistogram,
    pub(super) cluster: ClusterExchange,
    pub(super) begin: usize,
    pub(super) end: usize,
    pub(super) row: u64,
    pub(super) row_step: u64,
}

impl RowSlices {
    /// For a launch of `slices` blocks a row of `vocab` entries, after the grids before it
    /// ([`chain_after_prior_grids`]). Every thread of every block must call it.
    #[inline(always)]
    pub(super) fn of_launch(slices: u32, vocab: u32, vec: usize) -> Self {
        chain_after_prior_grids();
        // Before the cluster's first barrier: its sums' sets cleared before any block adds.
        let histogram = ClusterHistogram::new(dynamic_shared() + crate::CLUSTER_EXCHANGE_BYTES);
        let cluster = ClusterExchange::new(slices);
        let vectors = vocab as usize / vec;
        let per_slice = vectors.div_ceil(cluster.count() as usize);
        let begin = (cluster.rank() as usize * per_slice).min(vectors);
        let end = (begin + per_slice).min(vectors);
        let (row, row_step) =
            unsafe { (core::arch::nvptx::_block_idx_y() as u64, core::arch::nvptx::_grid_dim_y() as u64) };
        RowSlices { histogram, cluster, begin, end, row, row_step }
    }
}
