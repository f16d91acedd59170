//! The sampling kernels that stage a row in shared memory (`top_k_sampling_from_probs`,
//! `top_k_top_p_sampling_from_…`): the row's largest entry and its top-k pivot as the filter
//! kernels find them, then one token drawn among the kept entries, by chunks of the staged slice
//! ([`staged_draw`]) or by top-p's rejection rounds.

use core::arch::asm;

use super::draw::{Draw, RejectionRow, Rounds, RowMass, chunk_masses};
use super::rows::{RowSlices, Slice, row_max};
use super::search::{LANE_BINS, Weights, histogram_broadcast, histogram_pivot};
use crate::device::{
    ClusterExchange, ClusterHistogram, block_barrier, block_size, load_shared_u32, load_shared_u64, store_shared_u32,
    store_shared_u64, thread_index,
};
use crate::element::Element;
use crate::sampling::filter::{Keep, row_top_k};
use crate::sampling::mass::EntryWeight;
use crate::sampling::random_bits::mass_target;
use crate::sampling::sample::{SAMPLE_HEADER_BYTES, SampleParams, random_bits_of_row, row_second_top_p};
use crate::sampling::search::PivotSearch;

/// `top_k_sampling_from_probs`: see [`top_k_draw_rows`].
#[inline(always)]
pub unsafe fn top_k_sample_rows<T: Element, const VEC: usize>(p: &SampleParams) {
    unsafe { top_k_draw_rows::<T, VEC, false, false>(p) }
}

/// `top_k_top_p_sampling_from_probs`: see [`top_k_draw_rows`].
#[inline(always)]
pub unsafe fn top_k_top_p_sample_rows<T: Element, const VEC: usize>(p: &SampleParams) {
    unsafe { top_k_draw_rows::<T, VEC, true, false>(p) }
}

/// `top_k_top_p_sampling_from_logits`: see [`top_k_draw_rows`].
#[inline(always)]
pub unsafe fn top_k_top_p_logits_sample_rows<T: Element, const VEC: usize>(p: &SampleParams) {
    unsafe { top_k_draw_rows::<T, VEC, true, true>(p) }
}

/// The sampling ops that stage a row: the row's largest entry (a pass that stages the
/// slice), the top-k pivot by [`histogram_pivot`] (as the filter kernels'), then one token
/// drawn from the kept entries in proportion to their exact masses ([`staged_draw`]) — or,
/// with `TOP_P`, by top-p's rejection rounds among them ([`Rounds`]; FlashInfer's
/// "top_k_first"). `LOGITS`: the row holds logits, weighed as [`EntryWeight::Softmax`].
/// Integers throughout: the token is [`sample_row`]'s, whatever the slicing. Grid, cluster
/// and launcher's guarantees as [`filter_rows`], with [`SAMPLE_HEADER_BYTES`] in place of
/// [`FILTER_HEADER_BYTES`].
#[inline(always)]
unsafe fn top_k_draw_rows<T: Element, const VEC: usize, const TOP_P: bool, const LOGITS: bool>(p: &SampleParams) {
    let f = &p.filter;
    let RowSlices { histogram, cluster, begin, end, mut row, row_step } = RowSlices::of_launch(f.slices, f.vocab, VEC);
    let (step, first) = (block_size() as usize, begin + thread_index() as usize);
    let header = SAMPLE_HEADER_BYTES as usize;
    let mut round = 0u32;
    while row < f.rows {
        let input = (f.input as *const T).wrapping_add((row * f.input_row_stride) as usize);
        let mut slice = Slice::<T, VEC>::new(input, header, (begin, first, end, step), f.staged != 0, true);
        let max = row_max(&mut slice, &cluster, EntryWeight::least(LOGITS), &mut round);
        let weight = EntryWeight::of_row(LOGITS, max);
        let scale = weight.scale(max, f.vocab);
        let search = PivotSearch::top_k::<T>(unsafe { row_top_k(f, row) }, f.vocab);
        let keep =
            Keep::from_pivot(histogram_pivot(&mut slice, &cluster, histogram, search, Weights::Count, &mut round));
        let token = (f.output as *mut i32).wrapping_add(row as usize);
        let draw = Draw { keep, weight, scale, bits: unsafe { random_bits_of_row(p, row) }, token };
        if TOP_P {
            let top_p = unsafe { row_second_top_p(p, row) };
            let rounds = Rounds { cluster: &cluster, histogram, top_p, p, row };
            let staged = StagedRow { slice: &slice, draw };
            let first = staged.weigh_from(keep.pivot, &cluster, histogram, &mut round);
            let drawn = rounds.draw(&staged, first, &mut round);
            if cluster.rank() == 0 && thread_index() == 0 {
                unsafe { Draw::write_to(token, drawn) };
            }
        } else {
            staged_draw(&slice, &cluster, histogram, draw, &mut round);
        }
        // The chunks' threads read staged keys other threads staged: none may stage the
        // next row's before they are done (a block takes several rows past the grid's 65535).
        block_barrier();
        row += row_step;
    }
}

/// The chunks a staged slice is weighed by: `(count, vectors a chunk)`.
#[inline(always)]
fn chunking<T: Element, const VEC: usize>(slice: &Slice<T, VEC>) -> (u32, usize) {
    let chunks = block_size().min(crate::HISTOGRAM_BINS);
    (chunks, (slice.end - slice.begin).div_ceil(chunks as usize))
}

/// The vectors `lo..hi` of chunk `c`.
#[inline(always)]
fn chunk<T: Element, const VEC: usize>(slice: &Slice<T, VEC>, c: u32) -> (usize, usize) {
    let per_chunk = chunking(slice).1;
    let lo = (slice.begin + c as usize * per_chunk).min(slice.end);
    (lo, (lo + per_chunk).min(slice.end))
}

/// The staged slice's masses under `draw` (its `keep`, `weight` and `scale`): each of the
/// block's first (up to [`crate::HISTOGRAM_BINS`]) threads sums the kept masses of a chunk of
/// consecutive vectors (kept in shared memory for [`find_staged`]); warp 0 adds the chunks
/// (`LANE_BINS` a lane) into the cluster histogram's bin of the block's rank; the bins give
/// every block the row's kept mass and the mass before its slice (an exchange of `round`).
/// Every thread of every block of the cluster must call it.
#[inline(always)]
fn weigh_staged<T: Element, const VEC: usize>(
    slice: &Slice<T, VEC>,
    cluster: &ClusterExchange,
    histogram: ClusterHistogram,
    draw: &Draw,
    round: &mut u32,
) -> RowMass {
    let chunks = chunking(slice).0;
    let thread = thread_index();
    if thread < chunks {
        let (lo, hi) = chunk(slice, thread);
        let mut own = 0u64;
        for v in lo..hi {
            let keys = slice.keys(v);
            for i in 0..VEC {
                own += draw.entry_mass(&keys, i);
            }
        }
        store_shared_u64(chunk_masses() + 8 * thread, own);
    }
    histogram.clear();
    block_barrier();
    // The lanes' sums of their chunks, for the block's sum and then the chunk's search.
    let lanes = histogram_broadcast();
    if thread < 32 {
        let mut mine = 0u64;
        for j in 0..LANE_BINS {
            mine += chunk_mass(thread * LANE_BINS + j, chunks);
        }
        store_shared_u64(lanes + 8 * thread, mine);
        unsafe { asm!("bar.warp.sync 0xffffffff;", options(nostack)) };
        if thread == 0 {
            let mut block = 0u64;
            for lane in 0..32 {
                block += load_shared_u64(lanes + 8 * lane);
            }
            if block != 0 {
                histogram.add(cluster.rank(), block);
            }
        }
    }
    let totals = histogram.total(cluster, *round);
    let mut mass = RowMass { total: 0, before: 0, own: 0, max: 0 };
    for rank in 0..cluster.count() {
        let sum = load_shared_u64(totals + 8 * rank);
        mass.before += if rank < cluster.rank() { sum } else { 0 };
        mass.total += sum;
    }
    mass.own = load_shared_u64(totals + 8 * cluster.rank());
    histogram.recycle(cluster, *round);
    *round += 1;
    mass
}

/// Chunk `c`'s mass as [`weigh_staged`] left it (0 past the `chunks`).
#[inline(always)]
fn chunk_mass(c: u32, chunks: u32) -> u64 {
    if c < chunks { load_shared_u64(chunk_masses() + 8 * c) } else { 0 }
}

/// The entry (under `draw`) at which the masses summed in index order pass `target` (< the
/// row's mass), found by the block whose range holds it — warp 0 finds the chunk, the
/// chunk's thread the entry: its index and key, in that one thread of the cluster (None in
/// every other). Every thread of the block must call it; the masses as [`weigh_staged`]
/// left them.
#[inline(always)]
fn find_staged<T: Element, const VEC: usize>(
    slice: &Slice<T, VEC>,
    draw: &Draw,
    target: u64,
    mass: &RowMass,
) -> Option<(u32, u32)> {
    // The same in every thread of the block: the block returns as one.
    if target < mass.before || target - mass.before >= mass.own {
        return None;
    }
    let target = target - mass.before;
    let (chunks, thread) = (chunking(slice).0, thread_index());
    let lanes = histogram_broadcast();
    let state = lanes + 32 * 8;
    if thread < 32 {
        let mut below = 0u64;
        for lane in 0..thread {
            below += load_shared_u64(lanes + 8 * lane);
        }
        if below <= target && target - below < load_shared_u64(lanes + 8 * thread) {
            // This lane's chunks hold the target: the chunk, and the mass before it.
            let mut found = false;
            for j in 0..LANE_BINS {
                let sum = chunk_mass(thread * LANE_BINS + j, chunks);
                if !found && target - below < sum {
                    store_shared_u32(state, thread * LANE_BINS + j);
                    store_shared_u64(state + 8, below);
                    found = true;
                }
                below += if found { 0 } else { sum };
            }
        }
    }
    block_barrier();
    if thread != load_shared_u32(state) {
        return None;
    }
    let mut below = load_shared_u64(state + 8);
    let (lo, hi) = chunk(slice, thread);
    let mut found = None;
    let mut v = lo;
    while v < hi {
        let keys = slice.keys(v);
        // The vector's entries all summed, the first past the target noted: a loop without
        // an exit unrolls (an exit would index the vector from local memory).
        let (mut hit, mut key) = (VEC, 0);
        for i in 0..VEC {
            below += draw.entry_mass(&keys, i);
            let passes = hit == VEC && below > target;
            (hit, key) = if passes { (i, keys.get(i).to_bits()) } else { (hit, key) };
        }
        if hit < VEC {
            found = Some(((v * VEC + hit) as u32, key));
            v = hi;
        }
        v += 1;
    }
    found
}

/// One token of the row `slice` holds ([`weigh_staged`], then [`mass_target`] of the draw's
/// bits and [`find_staged`]), written by the one thread that finds it; a row without kept
/// mass gets 0 (from the cluster's first block). Every thread of every block of the
/// cluster must call it.
#[inline(always)]
fn staged_draw<T: Element, const VEC: usize>(
    slice: &Slice<T, VEC>,
    cluster: &ClusterExchange,
    histogram: ClusterHistogram,
    draw: Draw,
    round: &mut u32,
) {
    let mass = weigh_staged(slice, cluster, histogram, &draw, round);
    if mass.total == 0 {
        if cluster.rank() == 0 && thread_index() == 0 {
            unsafe { draw.write(0) };
        }
        return;
    }
    if let Some((token, _)) = find_staged(slice, &draw, mass_target(draw.bits, mass.total), &mass) {
        unsafe { draw.write(token) };
    }
}

/// The staged kernels' row: a block's staged slice, weighed under `draw` from a key up.
struct StagedRow<'a, T: Element, const VEC: usize> {
    slice: &'a Slice<T, VEC>,
    draw: Draw,
}

impl<T: Element, const VEC: usize> RejectionRow for StagedRow<'_, T, VEC> {
    /// The entries weighed: those the chunks' masses count.
    type Weighed = Keep;

    #[inline(always)]
    fn weigh_from(
        &self,
        key: u32,
        cluster: &ClusterExchange,
        histogram: ClusterHistogram,
        round: &mut u32,
    ) -> (Keep, RowMass) {
        let keep = Keep::from_pivot(key);
        (keep, weigh_staged(self.slice, cluster, histogram, &Draw { keep, ..self.draw }, round))
    }

    #[inline(always)]
    fn find(&self, keep: Keep, target: u64, mass: &RowMass) -> Option<(u32, u32)> {
        find_staged(self.slice, &Draw { keep, ..self.draw }, target, mass)
    }
}
