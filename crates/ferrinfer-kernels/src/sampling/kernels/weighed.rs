//! The sampling kernels that weigh a row as they read it, nothing staged (`sampling_from_probs`,
//! `top_p_sampling_from_probs`, `min_p_sampling_from_probs`): each warp weighs a contiguous span
//! of its block's slice ([`WarpSpan`]), and the warp whose span holds the draw's target finds the
//! entry.

use super::draw::{Draw, RejectionRow, Rounds, RowMass, chunk_masses};
use super::rows::{RowSlices, UNROLL};
use super::search::histogram_broadcast;
use crate::device::{
    ClusterExchange, ClusterHistogram, block_barrier, block_size, divide, lane_index, load_shared_u32, load_shared_u64,
    store_shared_u32, store_shared_u64, thread_index, warp_ballot, warp_broadcast_u64, warp_inclusive_sum_u64,
    warp_max_u32, warp_sum_u64,
};
use crate::element::Element;
use crate::math::choose;
use crate::sampling::filter::{Filter, Keep, row_top_p};
use crate::sampling::mass::{EntryWeight, MassScale};
use crate::sampling::random_bits::mass_target;
use crate::sampling::sample::{SampleParams, min_p_lowest_bits, random_bits_of_row};
use crate::vector::{Packed, Reused};

/// `sampling_from_probs`: see [`sample_weighed_rows`].
#[inline(always)]
pub unsafe fn sample_rows<T: Element, const VEC: usize>(p: &SampleParams) {
    unsafe { sample_weighed_rows::<T, VEC, { Filter::Everything as u32 }, UNROLL>(p) }
}

/// Top-p's f32 steps loaded together on sm_90: twice [`UNROLL`] — its registers (two
/// blocks of 256 a multiprocessor at 96 or at 128) allow twice the loads in flight at no
/// cost in occupancy. Before sm_90 ptxas spilled them.
const TOP_P_STEPS: usize = if cfg!(target_feature = "sm_90") { 2 * UNROLL } else { UNROLL };

/// `top_p_sampling_from_probs`: see [`sample_weighed_rows`].
#[inline(always)]
pub unsafe fn top_p_sample_rows<T: Element, const VEC: usize>(p: &SampleParams) {
    unsafe { sample_weighed_rows::<T, VEC, { Filter::TopP as u32 }, TOP_P_STEPS>(p) }
}

/// `min_p_sampling_from_probs`: see [`sample_weighed_rows`].
#[inline(always)]
pub unsafe fn min_p_sample_rows<T: Element, const VEC: usize>(p: &SampleParams) {
    unsafe { sample_weighed_rows::<T, VEC, { Filter::MinP as u32 }, UNROLL>(p) }
}

/// The sampling ops that weigh a row as they read it (`FILTER`: everything, top-p or min-p;
/// nothing staged): each warp weighs a contiguous span of its block's slice, at the scale of
/// probabilities (a row whose largest entry is outside [2^−20, 2) is weighed again at its
/// own, [`MassScale`]), the spans' masses are summed over the block and the cluster, and the
/// warp whose span holds [`mass_target`] reads the 32 vectors that hold it again to find the
/// entry. Min-p weighs the row again from its floor ([`min_p_lowest_bits`]); top-p draws by
/// rejection rounds ([`top_p_draw`]), each a weighing that checks the last token. Integers
/// throughout: the token is [`sample_row`]'s. Grid and cluster as [`filter_rows`]; dynamic
/// shared memory [`SAMPLE_HEADER_BYTES`]; `p.filter.staged` unused.
#[inline(always)]
unsafe fn sample_weighed_rows<T: Element, const VEC: usize, const FILTER: u32, const STEPS: usize>(p: &SampleParams) {
    let f = &p.filter;
    let RowSlices { histogram, cluster, begin, end, mut row, row_step } = RowSlices::of_launch(f.slices, f.vocab, VEC);
    let mut round = 0u32;
    while row < f.rows {
        let input = (f.input as *const T).wrapping_add((row * f.input_row_stride) as usize);
        let span = WarpSpan::<T, VEC, STEPS>::of_slice(input, begin, end);
        let mut scale = MassScale::of_probabilities(f.vocab);
        let (mut weighed, mut row_mass) = span.weigh(&scale, 0, &cluster, histogram, &mut round);
        let max = f32::from_bits(row_mass.max);
        let own_scale = MassScale::new(max, f.vocab);
        let lowest =
            if FILTER == Filter::MinP as u32 { min_p_lowest_bits(unsafe { row_top_p(f, row) }, max) } else { 0 };
        if own_scale != scale || lowest != 0 {
            scale = own_scale;
            (weighed, row_mass) = span.weigh(&scale, lowest, &cluster, histogram, &mut round);
        }
        let token = (f.output as *mut i32).wrapping_add(row as usize);
        if FILTER == Filter::TopP as u32 {
            let top_p = unsafe { row_top_p(f, row) };
            let rounds = Rounds { cluster: &cluster, histogram, top_p, p, row };
            let drawn = rounds.draw(&ScaledSpan { span: &span, scale: &scale }, ((weighed, 0), row_mass), &mut round);
            if cluster.rank() == 0 && thread_index() == 0 {
                unsafe { Draw::write_to(token, drawn) };
            }
        } else {
            let bits = unsafe { random_bits_of_row(p, row) };
            let draw = Draw { keep: Keep::EVERYTHING, weight: EntryWeight::Value, scale, bits, token };
            span.draw(&draw, lowest, weighed, row_mass, &cluster);
        }
        row += row_step;
    }
}

/// A warp's contiguous share of its block's slice of a row: vectors `lo..hi`, read a step of
/// 32 (a vector a lane) at a time, a batch of steps' loads in flight together (`STEPS` of
/// f32, see [`WarpSpan::BATCH`]), the steps
/// taken in groups of `group` (whole batches; at most 32 groups: a lane keeps the mass of
/// one).
struct WarpSpan<T: Element, const VEC: usize, const STEPS: usize> {
    input: *const T,
    lo: usize,
    hi: usize,
    group: usize,
}

/// What a warp keeps of [`WarpSpan::weigh`]: the mass of this lane's group of steps, and the
/// span's.
#[derive(Clone, Copy)]
struct Weighed {
    group: u64,
    span: u64,
}

/// The shared-memory address of the block's warps' masses (a u64 each) and, after them, their
/// largest entries' bits (a u32 each): the sampling header's chunk masses.
#[inline(always)]
fn warp_masses() -> u32 {
    chunk_masses()
}

impl<T: Element, const VEC: usize, const STEPS: usize> WarpSpan<T, VEC, STEPS> {
    /// This warp's span of the slice `begin..end` of the row at `input`.
    #[inline(always)]
    fn of_slice(input: *const T, begin: usize, end: usize) -> Self {
        let warps = (block_size() / 32).max(1) as usize;
        let per_warp = (end - begin).div_ceil(warps);
        let lo = (begin + (thread_index() / 32) as usize * per_warp).min(end);
        let hi = (lo + per_warp).min(end);
        // Whole loads' worth of steps a group: a group's steps are weighed together.
        let group = (hi - lo).div_ceil(32 * 32).max(1).next_multiple_of(Self::BATCH);
        WarpSpan { input, lo, hi, group }
    }

    /// Steps loaded together: `STEPS` of f32, half of [`UNROLL`] for 16-bit types (whose
    /// vectors hold twice the entries: with four, the weighing of a batch took 134
    /// registers).
    const BATCH: usize = if size_of::<T>() == 2 { UNROLL / 2 } else { STEPS };

    /// This lane's vectors of the batch of steps from `step` (zeros past the span, and in
    /// the array past [`Self::BATCH`]).
    #[inline(always)]
    fn load_batch(&self, step: usize) -> [Packed<T, VEC>; STEPS] {
        let mut loaded = [Packed::<T, VEC>::ZERO; STEPS];
        // Indexed: an array iterator kept in memory is a local-memory array.
        #[allow(clippy::needless_range_loop)]
        for k in 0..Self::BATCH {
            loaded[k] = self.load(step + k);
        }
        loaded
    }

    fn steps(&self) -> usize {
        (self.hi - self.lo).div_ceil(32)
    }

    /// This lane's vector of step `step` (zeros past the span).
    #[inline(always)]
    fn load(&self, step: usize) -> Packed<T, VEC> {
        let v = self.lo + step * 32 + lane_index() as usize;
        if v < self.hi { unsafe { Packed::<T, VEC>::load::<Reused>(self.input.add(v * VEC)) } } else { Packed::ZERO }
    }

    /// The batch's bound for [`MassScale::mass_from`] — the value of the bits `lowest` (NaN,
    /// weighing nothing, past infinity's) — and the bits of its largest entry (0 for
    /// negatives and NaN, as `f32::max` from 0 on the host). The bound depends on every
    /// entry of the batch (it never changes it): ptxas then issues all of the batch's loads
    /// before it weighs any, where it would otherwise weigh each vector as it arrives,
    /// one load in flight at a time (docs/perf/sampling.md).
    #[inline(always)]
    fn batch_bound(loaded: &[Packed<T, VEC>; STEPS], lowest: u32) -> (f32, u32) {
        let mut top = 0f32;
        #[allow(clippy::needless_range_loop)]
        for k in 0..Self::BATCH {
            for i in 0..VEC {
                top = top.max(loaded[k].get_f32(i));
            }
        }
        let bound = f32::from_bits(lowest.min(f32::NAN.to_bits()));
        (choose(top >= 0.0, bound, f32::NAN), top.to_bits() & !(1 << 31))
    }

    /// The masses of `vector`'s entries under `scale` from `bound` up, summed.
    #[inline(always)]
    fn vector_mass(vector: &Packed<T, VEC>, scale: &MassScale, bound: f32) -> u64 {
        let mut mass = 0u64;
        for i in 0..VEC {
            mass += scale.mass_from(vector.get_f32(i), bound);
        }
        mass
    }

    /// The span's masses under `scale` of the entries whose bits are at least `lowest`,
    /// summed over the block and the cluster (an exchange of `round`): every thread of every
    /// block of the cluster must call it.
    #[inline(always)]
    fn weigh(
        &self,
        scale: &MassScale,
        lowest: u32,
        cluster: &ClusterExchange,
        histogram: ClusterHistogram,
        round: &mut u32,
    ) -> (Weighed, RowMass) {
        histogram.clear();
        let (steps, lane) = (self.steps(), lane_index() as usize);
        let (mut group, mut max) = (0u64, 0u32);
        let mut step = 0;
        while step < steps {
            let loaded = self.load_batch(step);
            let (bound, top) = Self::batch_bound(&loaded, lowest);
            max = max.max(top);
            // The steps loaded together are of one group: one warp sum for them.
            let mut mass = 0u64;
            #[allow(clippy::needless_range_loop)]
            for k in 0..Self::BATCH {
                mass += Self::vector_mass(&loaded[k], scale, bound);
            }
            let steps_mass = warp_sum_u64(mass);
            group += if divide(step, self.group) == lane { steps_mass } else { 0 };
            step += Self::BATCH;
        }
        let weighed = Weighed { group, span: warp_sum_u64(group) };
        let warp = thread_index() / 32;
        let max = warp_max_u32(max);
        if lane == 0 {
            store_shared_u64(warp_masses() + 8 * warp, weighed.span);
            store_shared_u32(warp_masses() + 8 * 32 + 4 * warp, max);
        }
        block_barrier();
        if thread_index() == 0 {
            let (mut block, mut block_max) = (0u64, 0u32);
            for w in 0..block_size() / 32 {
                block += load_shared_u64(warp_masses() + 8 * w);
                block_max = block_max.max(load_shared_u32(warp_masses() + 8 * 32 + 4 * w));
            }
            // Bins 0..count: the blocks' masses; from MAX_CLUSTER_BLOCKS on, their largest
            // entries (each block's own bin, so the sum is the value).
            if block != 0 {
                histogram.add(cluster.rank(), block);
            }
            if block_max != 0 {
                histogram.add(crate::MAX_CLUSTER_BLOCKS + cluster.rank(), block_max as u64);
            }
        }
        let totals = histogram.total(cluster, *round);
        let mut mass = RowMass { total: 0, before: 0, own: 0, max: 0 };
        for rank in 0..cluster.count() {
            let sum = load_shared_u64(totals + 8 * rank);
            mass.before += if rank < cluster.rank() { sum } else { 0 };
            mass.total += sum;
            mass.max = mass.max.max(load_shared_u64(totals + 8 * (crate::MAX_CLUSTER_BLOCKS + rank)) as u32);
        }
        mass.own = load_shared_u64(totals + 8 * cluster.rank());
        histogram.recycle(cluster, *round);
        *round += 1;
        (weighed, mass)
    }

    /// Writes the row's token: the first entry (of bits at least `lowest`) at which the
    /// masses summed in index order pass `draw`'s target in the row's mass ([`WarpSpan::find`];
    /// 0 for a row without mass, by the cluster's first block). Every thread of the block
    /// must call it; the span's masses as [`WarpSpan::weigh`] left them.
    #[inline(always)]
    fn draw(&self, draw: &Draw, lowest: u32, weighed: Weighed, mass: RowMass, cluster: &ClusterExchange) {
        if mass.total == 0 {
            if cluster.rank() == 0 && thread_index() == 0 {
                unsafe { draw.write(0) };
            }
            return;
        }
        let target = mass_target(draw.bits, mass.total);
        if let Some((token, _)) = self.find(&draw.scale, lowest, target, weighed, &mass) {
            unsafe { draw.write(token) };
        }
    }

    /// The entry (of bits at least `lowest`) at which the masses under `scale` summed in
    /// index order pass `target` (< the row's mass), found by the block, then the warp,
    /// whose span holds it: its index and bits, in the one lane of the cluster that finds
    /// it (None in every other). Every thread of the block must call it; the span's masses
    /// as [`WarpSpan::weigh`] left them.
    #[inline(always)]
    fn find(
        &self,
        scale: &MassScale,
        lowest: u32,
        target: u64,
        weighed: Weighed,
        mass: &RowMass,
    ) -> Option<(u32, u32)> {
        let thread = thread_index();
        // The same in every thread of the block: the block returns as one.
        if target < mass.before || target - mass.before >= mass.own {
            return None;
        }
        let mut target = target - mass.before;
        let state = histogram_broadcast();
        if thread == 0 {
            let mut found = false;
            for w in 0..block_size() / 32 {
                let span = load_shared_u64(warp_masses() + 8 * w);
                if !found && target < span {
                    store_shared_u32(state, w);
                    store_shared_u64(state + 8, target);
                    found = true;
                }
                target -= if found { 0 } else { span };
            }
        }
        block_barrier();
        if thread / 32 != load_shared_u32(state) {
            return None;
        }
        let target = load_shared_u64(state + 8);
        // The group of steps, then the step, then the lane, then the entry.
        let groups = warp_inclusive_sum_u64(weighed.group);
        let group = warp_ballot(groups > target).trailing_zeros();
        let mut below = warp_broadcast_u64(groups - weighed.group, group);
        let mut step = group as usize * self.group;
        while step < self.steps() {
            let loaded = self.load_batch(step);
            let (bound, _) = Self::batch_bound(&loaded, lowest);
            // Without an exit from the loop (which would index `loaded` from local memory).
            let (mut found, mut token) = (false, None);
            #[allow(clippy::needless_range_loop)]
            for k in 0..Self::BATCH {
                let vector = &loaded[k];
                if found {
                    continue;
                }
                let lane_mass = Self::vector_mass(vector, scale, bound);
                let lanes = warp_inclusive_sum_u64(lane_mass);
                let holder = warp_ballot(below + lanes > target);
                found = holder != 0;
                if found && lane_index() == holder.trailing_zeros() {
                    let v = self.lo + (step + k) * 32 + lane_index() as usize;
                    let (entry, bits) = Self::entry_passing(vector, below + lanes - lane_mass, target, scale, bound);
                    token = Some(((v * VEC + entry) as u32, bits));
                }
                below += warp_broadcast_u64(lanes, 31);
            }
            if found {
                return token;
            }
            step += Self::BATCH;
        }
        None
    }

    /// The first entry of `vector` (from `bound` up) at which the masses summed from `below`
    /// pass `target`, and its bits (`VEC` where none does): a loop without an exit unrolls
    /// (an exit would index the vector from local memory).
    #[inline(always)]
    fn entry_passing(
        vector: &Packed<T, VEC>,
        mut below: u64,
        target: u64,
        scale: &MassScale,
        bound: f32,
    ) -> (usize, u32) {
        let (mut hit, mut hit_bits) = (VEC, 0);
        for i in 0..VEC {
            let x = vector.get_f32(i);
            below += scale.mass_from(x, bound);
            let passes = hit == VEC && below > target;
            (hit, hit_bits) = if passes { (i, x.to_bits()) } else { (hit, hit_bits) };
        }
        (hit, hit_bits)
    }
}

/// The unstaged kernel's row: a warp's span, weighed at `scale` from the bits `lowest` up.
struct ScaledSpan<'a, T: Element, const VEC: usize, const STEPS: usize> {
    span: &'a WarpSpan<T, VEC, STEPS>,
    scale: &'a MassScale,
}

impl<T: Element, const VEC: usize, const STEPS: usize> RejectionRow for ScaledSpan<'_, T, VEC, STEPS> {
    /// The span's masses and the bound they were weighed from.
    type Weighed = (Weighed, u32);

    #[inline(always)]
    fn weigh_from(
        &self,
        lowest: u32,
        cluster: &ClusterExchange,
        histogram: ClusterHistogram,
        round: &mut u32,
    ) -> ((Weighed, u32), RowMass) {
        let (weighed, mass) = self.span.weigh(self.scale, lowest, cluster, histogram, round);
        ((weighed, lowest), mass)
    }

    #[inline(always)]
    fn find(&self, (weighed, lowest): (Weighed, u32), target: u64, mass: &RowMass) -> Option<(u32, u32)> {
        self.span.find(self.scale, lowest, target, weighed, mass)
    }
}
