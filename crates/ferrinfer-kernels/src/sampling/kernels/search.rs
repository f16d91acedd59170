//! The pivot search on the device: a round's weights summed by digit in a cluster histogram
//! ([`histogram_pivot`]), and the digit chosen by warp 0 for the block ([`choose_in_warp`]).

use core::arch::asm;

use super::rows::Slice;
use crate::device::{
    ClusterExchange, ClusterHistogram, block_barrier, dynamic_shared, load_shared_u32, load_shared_u64,
    store_shared_u32, store_shared_u64, thread_index, warp_any,
};
use crate::element::Element;
use crate::sampling::keys::word_values;
use crate::sampling::mass::MassScale;
use crate::sampling::search::PivotSearch;

/// How a filter weighs its candidates: top-k counts them, top-p sums their masses.
#[derive(Clone, Copy)]
pub(super) enum Weights {
    Count,
    Mass(MassScale),
}

/// The pivot of the row `slice` holds: each round sums the candidates' weights by their next
/// byte in a cluster histogram, and warp 0 chooses the digit for the block
/// ([`choose_in_warp`]). The first pass over the slice stages it: top-k's first round, or
/// top-p's pass for the masses' scale before.
#[inline(always)]
pub(super) fn histogram_pivot<T: Element, const VEC: usize>(
    slice: &mut Slice<T, VEC>,
    cluster: &ClusterExchange,
    histogram: ClusterHistogram,
    mut search: PivotSearch,
    weights: Weights,
    round: &mut u32,
) -> u32 {
    while !search.done() {
        histogram.clear();
        block_barrier();
        // A warp skips a vector where none of its lanes has a candidate (after the first
        // round most do).
        slice.pass(|keys, here| {
            if warp_any(here && Slice::any_candidate(keys, &search)) {
                let values = keys.map_words(word_values::<T>);
                for i in 0..VEC {
                    let key = keys.get(i).to_bits();
                    let counted = here && search.is_candidate(key);
                    // Entries of weight 0 (a mass of 0: tiny, negative) add nothing.
                    let weight = match weights {
                        Weights::Count => counted as u64,
                        Weights::Mass(scale) => {
                            if counted {
                                scale.mass(values.get_f32(i))
                            } else {
                                0
                            }
                        }
                    };
                    let bin = if weight != 0 { search.digit(key) } else { crate::HISTOGRAM_BINS };
                    if bin < crate::HISTOGRAM_BINS {
                        // One shared-memory atomic (pair) an entry: summing a bin's lanes
                        // first was slower in every round and on every shape
                        // (docs/perf/sampling.md, top-p v2 and top-k v2).
                        add_weight(&histogram, bin, weight, weights);
                    }
                }
            }
        });
        let totals = histogram.total(cluster, *round);
        choose_in_warp(&mut search, totals, histogram_broadcast());
        histogram.recycle(cluster, *round);
        *round += 1;
    }
    search.pivot()
}

/// `weight` into bin `bin` (< [`crate::HISTOGRAM_BINS`]) of the block's histogram: a count
/// in one atomic, a mass in two.
#[inline(always)]
fn add_weight(histogram: &ClusterHistogram, bin: u32, weight: u64, weights: Weights) {
    match weights {
        Weights::Count => histogram.add_one(bin),
        Weights::Mass(_) => histogram.add(bin, weight),
    }
}

/// The shared-memory address of the filters' choice broadcast: after the cluster histogram.
#[inline(always)]
pub(super) fn histogram_broadcast() -> u32 {
    dynamic_shared() + crate::CLUSTER_EXCHANGE_BYTES + crate::CLUSTER_HISTOGRAM_BYTES
}

/// Bins of the histogram each lane of warp 0 reads.
pub(super) const LANE_BINS: u32 = crate::HISTOGRAM_BINS / 32;

/// A round's choice, in every thread of the block: warp 0 reads the [`crate::HISTOGRAM_BINS`]
/// totals at `totals` (`LANE_BINS` a lane), each lane learns the weight above its bins from
/// the lanes' sums (through `broadcast`), the lane whose bins hold the pivot's rank takes the
/// digit, and writes the search as it leaves it for the block. The same choice
/// [`PivotSearch::choose`] makes over the same totals on the host.
#[inline(always)]
fn choose_in_warp(search: &mut PivotSearch, totals: u32, broadcast: u32) {
    let lane = thread_index();
    let state = broadcast + 32 * 8;
    if lane < 32 {
        let first = lane * LANE_BINS;
        let mut bins = [0u64; LANE_BINS as usize];
        let mut mine = 0u64;
        #[allow(clippy::needless_range_loop)]
        for j in 0..bins.len() {
            bins[j] = load_shared_u64(totals + 8 * (first + j as u32));
            mine += bins[j];
        }
        store_shared_u64(broadcast + 8 * lane, mine);
        unsafe { asm!("bar.warp.sync 0xffffffff;", options(nostack)) };
        let (mut above, mut row) = (0u64, 0u64);
        for other in 0..32 {
            let sum = load_shared_u64(broadcast + 8 * other);
            row += sum;
            above += if other > lane { sum } else { 0 };
        }
        let mut chosen = *search;
        chosen.set_row_weight(row);
        let rank = chosen.rank();
        let holds_rank = above < rank && rank <= above + mine;
        if holds_rank {
            // The lane's bins from the top: the first at or above which the rank lies.
            let mut taken = false;
            for j in (0..LANE_BINS as usize).rev() {
                if !taken && above + bins[j] >= rank {
                    chosen.take(first + j as u32, above, bins[j]);
                    taken = true;
                }
                above += bins[j];
            }
        } else if lane == 0 && row < rank {
            chosen.give_up();
        }
        if holds_rank || (lane == 0 && row < rank) {
            let words = [
                chosen.prefix,
                chosen.known,
                chosen.shift,
                chosen.rank as u32,
                (chosen.rank >> 32) as u32,
                chosen.done as u32,
            ];
            // Indexed: an array iterator kept in memory is a local-memory array.
            #[allow(clippy::needless_range_loop)]
            for i in 0..words.len() {
                store_shared_u32(state + 4 * i as u32, words[i]);
            }
        }
    }
    block_barrier();
    let word = |i: u32| load_shared_u32(state + 4 * i);
    search.prefix = word(0);
    search.known = word(1);
    search.shift = word(2);
    search.rank = word(3) as u64 | (word(4) as u64) << 32;
    search.done = word(5) != 0;
}
