//! Drawing a token on the device, for both kinds of sampling kernels: the masses a block sees of
//! a row ([`RowMass`]), what a draw draws among and where it writes ([`Draw`]), the shared memory
//! of the blocks' masses, and top-p's rejection rounds ([`Rounds`]).

use crate::device::{ClusterExchange, ClusterHistogram, block_barrier, dynamic_shared, load_shared_u64};
use crate::element::Element;
use crate::sampling::filter::{FILTER_HEADER_BYTES, Keep};
use crate::sampling::keys::word_values;
use crate::sampling::mass::{EntryWeight, MassScale};
use crate::sampling::random_bits::{draw_random_bits, mass_target};
use crate::sampling::sample::{SampleParams, row_seed_and_offset, top_p_rank};
use crate::vector::{Kept, Packed};

/// A block's masses of a row, once summed over the cluster.
pub(super) struct RowMass {
    /// The row's.
    pub(super) total: u64,
    /// The blocks' of lower rank.
    pub(super) before: u64,
    /// This block's.
    pub(super) own: u64,
    /// The bits of the row's largest entry (or 0).
    pub(super) max: u32,
}

/// What a draw draws among and where it writes.
#[derive(Clone, Copy)]
pub(super) struct Draw {
    pub(super) keep: Keep,
    pub(super) weight: EntryWeight,
    pub(super) scale: MassScale,
    /// [`row_random_bits`] of the row.
    pub(super) bits: u64,
    pub(super) token: *mut i32,
}

impl Draw {
    /// Writes the row's token (`st.global`: a plain write would be a generic store).
    ///
    /// # Safety
    /// `token` writable, as the launcher guarantees.
    #[inline(always)]
    pub(super) unsafe fn write(&self, token: u32) {
        unsafe { Self::write_to(self.token, token) }
    }

    /// Writes `token` at `at`, as [`Draw::write`].
    ///
    /// # Safety
    /// `at` writable, as the launcher guarantees.
    #[inline(always)]
    pub(super) unsafe fn write_to(at: *mut i32, token: u32) {
        unsafe { <Kept as crate::vector::Store>::words::<4>(at.cast(), [token, 0, 0, 0]) }
    }

    /// The mass of entry `i` of a staged vector of keys.
    #[inline(always)]
    pub(super) fn entry_mass<T: Element, const VEC: usize>(&self, keys: &Packed<T, VEC>, i: usize) -> u64 {
        let values = keys.map_words(word_values::<T>);
        self.keep.weighed_mass(keys.get(i).to_bits(), values.get_f32(i), self.weight, &self.scale)
    }
}

/// The shared-memory address of a sampling block's kept masses by chunk: after the filters'
/// header.
#[inline(always)]
pub(super) fn chunk_masses() -> u32 {
    dynamic_shared() + FILTER_HEADER_BYTES
}

/// The token and bits one thread of the cluster `found` (None in every other), made known to
/// every thread of the cluster through the histogram's bin 0 (an exchange of `round`):
/// every thread of every block must call it.
#[inline(always)]
fn share_found(
    found: Option<(u32, u32)>,
    cluster: &ClusterExchange,
    histogram: ClusterHistogram,
    round: &mut u32,
) -> (u32, u32) {
    histogram.clear();
    block_barrier();
    if let Some((token, bits)) = found {
        histogram.add(0, (bits as u64) << 32 | token as u64);
    }
    let totals = histogram.total(cluster, *round);
    let shared = load_shared_u64(totals);
    histogram.recycle(cluster, *round);
    *round += 1;
    (shared as u32, (shared >> 32) as u32)
}

/// A row drawn from by top-p's rejection rounds ([`Rounds`]): weighed from a bound up (the
/// bits, or the key, of the entries a round keeps) and searched for a target.
pub(super) trait RejectionRow {
    /// What a weighing leaves its search.
    type Weighed: Copy;

    /// The row's masses of the entries from `bound` up, summed over the cluster (an
    /// exchange of `round`): every thread of every block of the cluster must call it.
    fn weigh_from(
        &self,
        bound: u32,
        cluster: &ClusterExchange,
        histogram: ClusterHistogram,
        round: &mut u32,
    ) -> (Self::Weighed, RowMass);

    /// The entry at which the masses `weighed` summed in index order pass `target` (< the
    /// row's mass): its index and bound (bits or key), in the one thread of the cluster that
    /// finds it (None in every other). Every thread of the block must call it.
    fn find(&self, weighed: Self::Weighed, target: u64, mass: &RowMass) -> Option<(u32, u32)>;
}

/// Top-p's rejection rounds of a row ([`top_p_draw`]): the cluster, its histogram, the
/// row's `top_p` and its random stream's parameters.
pub(super) struct Rounds<'a> {
    pub(super) cluster: &'a ClusterExchange,
    pub(super) histogram: ClusterHistogram,
    pub(super) top_p: f32,
    pub(super) p: &'a SampleParams,
    pub(super) row: u64,
}

impl Rounds<'_> {
    /// The token, from the masses `first` of the entries a draw begins among (every one,
    /// or top-k's): each round finds a token ([`RejectionRow::find`]), makes it known to
    /// the cluster ([`share_found`]) and weighs the entries above it — the next round's
    /// masses where the check rejects it. The same in every thread of the cluster; every
    /// one must call it.
    #[inline(always)]
    pub(super) fn draw<R: RejectionRow>(&self, row: &R, first: (R::Weighed, RowMass), round: &mut u32) -> u32 {
        let (mut weighed, mut mass) = first;
        let rank = top_p_rank(self.top_p, mass.total);
        let mut draw = 0u32;
        loop {
            if mass.total == 0 {
                return 0;
            }
            // Read again each round: fewer registers held across a weighing.
            let (seed, offset) = unsafe { row_seed_and_offset(self.p, self.row) };
            let target = mass_target(draw_random_bits(seed, self.row, offset, draw), mass.total);
            let found = row.find(weighed, target, &mass);
            let (token, bound) = share_found(found, self.cluster, self.histogram, round);
            if rank == u64::MAX {
                return token;
            }
            let (above, above_mass) = row.weigh_from(bound + 1, self.cluster, self.histogram, round);
            if above_mass.total < rank {
                return token;
            }
            (weighed, mass, draw) = (above, above_mass, draw + 1);
        }
    }
}
