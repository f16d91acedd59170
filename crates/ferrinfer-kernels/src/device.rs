//! The few device primitives `core::arch::nvptx` lacks or spells awkwardly: thread geometry, warp
//! shuffles, named barriers, row-group reductions, programmatic dependent launch (PDL) and
//! (sm_90) bulk copies into shared memory completing on an mbarrier ([`StagingRing`]).
//! Warp-level `asm!` is never `pure`/`nomem`: rustc does not mark inline asm convergent, and with
//! `pure` LLVM may move a shuffle under a divergent branch.

use core::arch::{asm, nvptx};

#[cfg(target_feature = "sm_90")]
use crate::STAGING_HEADER_BYTES;
use crate::{CLUSTER_SLOT_WORDS, HISTOGRAM_BINS, MAX_CLUSTER_BLOCKS};

/// Most warps a block can have (1024 threads).
pub const MAX_WARPS: usize = 32;

/// Declares the module-scope `.shared` arrays the device code uses: two slots of one f32 per warp
/// for row-group reductions (every block gets its own copy), and the block's dynamic shared
/// memory (its size is the launch's), where [`StagingRing`]s live. Module-level asm is emitted only into
/// the crate that expands it, so each generated entry-point crate invokes this once
/// (`ferrinfer_kernels::module_globals!();`) — the kernels crate's own PTX never reaches a GPU.
#[macro_export]
macro_rules! module_globals {
    () => {
        core::arch::global_asm!(
            ".shared .align 16 .b8 ferrinfer_group_partials[256];",
            ".extern .shared .align 16 .b8 ferrinfer_dynamic[];"
        );
    };
}

#[inline(always)]
pub fn thread_index() -> u32 {
    unsafe { nvptx::_thread_idx_x() as u32 }
}

#[inline(always)]
pub fn block_size() -> u32 {
    unsafe { nvptx::_block_dim_x() as u32 }
}

#[inline(always)]
pub fn block_index() -> u32 {
    unsafe { nvptx::_block_idx_x() as u32 }
}

#[inline(always)]
pub fn grid_size() -> u32 {
    unsafe { nvptx::_grid_dim_x() as u32 }
}

/// `a / b` without a division-by-zero check (a check would be a panic path: an unresolved
/// function in the PTX); `b = 0` divides by 1.
#[inline(always)]
pub fn divide(a: usize, b: usize) -> usize {
    a / core::num::NonZeroUsize::new(b).unwrap_or(core::num::NonZeroUsize::MIN)
}

/// The shared-memory address of the block's dynamic shared memory (its size is the launch's).
#[inline(always)]
pub fn dynamic_shared() -> u32 {
    let base: u32;
    unsafe { asm!("mov.u32 {b}, ferrinfer_dynamic;", b = out(reg32) base, options(pure, nomem, nostack)) };
    base
}

/// Butterfly exchange within a full warp (every lane must execute it).
#[inline(always)]
pub fn shuffle_xor(value: f32, lane_mask: u32) -> f32 {
    f32::from_bits(shuffle_xor_bits(value.to_bits(), lane_mask))
}

#[inline(always)]
fn shuffle_xor_bits(value: u32, lane_mask: u32) -> u32 {
    let result: u32;
    unsafe {
        asm!(
            "shfl.sync.bfly.b32 {r}, {v}, {m}, 0x1f, 0xffffffff;",
            r = out(reg32) result,
            v = in(reg32) value,
            m = in(reg32) lane_mask,
        );
    }
    result
}

/// Sum over the 32 lanes of a warp; every lane gets the same total (one butterfly tree).
#[inline(always)]
pub fn warp_sum(value: f32) -> f32 {
    lanes_sum(value, 32)
}

/// Sum over each aligned group of `width` lanes (a power of two ≤ 32); all 32 lanes take part.
/// Every lane runs all five shuffles and adds those within its group: the control flow stays
/// uniform (a loop over a run-time count of shuffles made ptxas guard each one with a
/// divergence check).
#[inline(always)]
fn lanes_sum(mut value: f32, width: u32) -> f32 {
    for step in 0..5 {
        let mask = 16 >> step;
        let other = shuffle_xor(value, mask);
        if mask < width {
            value += other;
        }
    }
    value
}

/// `barrier.sync id, threads`: waits for `threads` threads (a multiple of 32) at barrier `id`
/// (1–15; 0 is `__syncthreads`'). Several row groups of one block synchronise independently this
/// way. Not the `.aligned` form (`bar.sync`), which LLVM's freedom to duplicate asm would make
/// unsound (see [`block_barrier`]).
#[inline(always)]
fn named_barrier(id: u32, threads: u32) {
    unsafe { asm!("barrier.sync {id}, {threads};", id = in(reg32) id, threads = in(reg32) threads) };
}

/// The shared-memory address of partial `index` (of `ferrinfer_group_partials`).
#[inline(always)]
fn partial_address(index: u32) -> u32 {
    let base: u32;
    unsafe { asm!("mov.u32 {b}, ferrinfer_group_partials;", b = out(reg32) base, options(pure, nomem, nostack)) };
    base + 4 * index
}

/// Writes partial `index` with an explicit `st.shared` (a generic store through a converted
/// pointer costs an address-space check in SASS).
#[inline(always)]
fn store_partial(index: u32, value: f32) {
    unsafe {
        asm!("st.shared.f32 [{a}], {v};", a = in(reg32) partial_address(index), v = in(reg32) value, options(nostack))
    };
}

#[inline(always)]
fn load_partial(index: u32) -> f32 {
    let value: f32;
    unsafe {
        asm!("ld.shared.f32 {v}, [{a}];", v = out(reg32) value, a = in(reg32) partial_address(index), options(nostack))
    };
    value
}

/// A block's threads cut into groups of `threads` consecutive threads, each group working on one
/// row at a time; `group` is this thread's group and `lane` its index in it. A group narrower
/// than a warp is a power of two of lanes, and the groups sharing a warp reduce with the warp's
/// shuffles, so they must call [`RowGroup::sum`] together. A wider group is any whole number of
/// warps (≤ 1024 threads) — a row of 640 vectors takes 5, not 8 with 3 idle — and runs
/// independently.
#[derive(Clone, Copy)]
pub struct RowGroup {
    pub threads: u32,
    pub group: u32,
    pub lane: u32,
    /// Which of the two partials slots the next multi-warp reduction uses.
    slot: u32,
}

impl RowGroup {
    /// This thread's group for groups of `threads` threads.
    #[inline(always)]
    pub fn of_thread(threads: u32) -> Self {
        let tid = thread_index();
        // Shifts where they do (the common case); a division only for groups of whole warps
        // that are not a power of two (`max(1)`: device code must not reach a panic).
        let (group, lane) = if threads.is_power_of_two() {
            (tid >> threads.trailing_zeros(), tid & (threads - 1))
        } else {
            (tid / threads.max(1), tid % threads.max(1))
        };
        RowGroup { threads, group, lane, slot: 0 }
    }

    /// Groups per block.
    #[inline(always)]
    pub fn per_block(&self) -> u32 {
        if self.threads.is_power_of_two() {
            block_size() >> self.threads.trailing_zeros()
        } else {
            block_size() / self.threads.max(1)
        }
    }

    /// The first group of this thread's warp (itself, for groups of a warp or more).
    #[inline(always)]
    pub fn first_of_warp(&self) -> u32 {
        if self.threads >= 32 {
            self.group
        } else {
            self.group & !(32u32.wrapping_shr(self.threads.trailing_zeros()) - 1)
        }
    }

    /// Sum of `value` over the group's threads; every thread of the group gets the same total
    /// (a fixed tree: the result never depends on timing). Every thread of the warp (and, for
    /// multi-warp groups, of the group) must call it. Groups of more than one warp meet at a
    /// named barrier (id 1 + group) and exchange warp totals through shared memory, in
    /// alternating slots so that one barrier per call suffices.
    #[inline(always)]
    pub fn sum(&mut self, value: f32) -> f32 {
        if self.threads <= 32 {
            return lanes_sum(value, self.threads);
        }
        let warp_total = warp_sum(value);
        let warps = self.threads / 32;
        let base = self.slot * MAX_WARPS as u32 + self.group * warps;
        self.slot ^= 1;
        if self.lane % 32 == 0 {
            store_partial(base + self.lane / 32, warp_total);
        }
        named_barrier(1 + self.group, self.threads);
        let lane = self.lane % 32;
        let mine = if lane < warps { load_partial(base + lane) } else { 0.0 };
        warp_sum(mine)
    }
}

/// A pair of f32 values reduced over a whole block with `combine`; every thread gets the same
/// result (butterfly trees within warps, then across the warps' results: a fixed order, so the
/// result never depends on timing). `combine` must be symmetric bit for bit and `empty` its
/// identity. Every thread of the block must call it; it uses `ferrinfer_group_partials` between
/// two block barriers, so no [`RowGroup`] reduction may be in flight.
#[inline(always)]
pub fn block_pairs(value: [f32; 2], empty: [f32; 2], combine: impl Fn([f32; 2], [f32; 2]) -> [f32; 2]) -> [f32; 2] {
    let warp = |mut v: [f32; 2]| {
        for step in 0..5 {
            let mask = 16 >> step;
            v = combine(v, [shuffle_xor(v[0], mask), shuffle_xor(v[1], mask)]);
        }
        v
    };
    let total = warp(value);
    let (lane, warp_index, warps) = (thread_index() % 32, thread_index() / 32, block_size().div_ceil(32));
    block_barrier();
    if lane == 0 {
        store_partial(warp_index, total[0]);
        store_partial(MAX_WARPS as u32 + warp_index, total[1]);
    }
    block_barrier();
    let mine = if lane < warps { [load_partial(lane), load_partial(MAX_WARPS as u32 + lane)] } else { empty };
    warp(mine)
}

/// The blocks of a thread-block cluster along x (sm_90), exchanging values through their shared
/// memory: each block writes its values into every block's slot for it, and all read the slots
/// back in rank order — a pair of f32 folded with a combine step ([`ClusterExchange::merge`]).
/// Slots live at the start of the dynamic shared memory ([`crate::CLUSTER_EXCHANGE_BYTES`] of
/// it), in two sets used alternately, so that one cluster barrier per exchange suffices: a block
/// cannot write a set again before every block has passed the barrier of the exchange between.
/// A count of 1 (no cluster) exchanges nothing. A block may write another's shared memory only
/// once that block runs: [`ClusterExchange::new`] waits for the whole cluster
/// (compute-sanitizer's racecheck flagged the writes without it).
#[derive(Clone, Copy)]
pub struct ClusterExchange {
    count: u32,
}

impl ClusterExchange {
    /// Exchanges among `count` blocks (≤ [`MAX_CLUSTER_BLOCKS`]; the launch's cluster size), once
    /// every block of the cluster has started. Every thread of every block must call it.
    #[inline(always)]
    pub fn new(count: u32) -> Self {
        // Before sm_90 there are no clusters (nor the instructions of an exchange): one block.
        let count = if cfg!(target_feature = "sm_90") { count.clamp(1, MAX_CLUSTER_BLOCKS) } else { 1 };
        let exchange = ClusterExchange { count };
        if exchange.count > 1 {
            cluster_barrier();
        }
        exchange
    }

    #[inline(always)]
    pub fn count(&self) -> u32 {
        self.count
    }

    /// This block's rank in its cluster (0 without one).
    #[inline(always)]
    pub fn rank(&self) -> u32 {
        if self.count == 1 {
            return 0;
        }
        #[cfg(target_feature = "sm_90")]
        {
            let rank: u32;
            unsafe { asm!("mov.u32 {r}, %cluster_ctarank;", r = out(reg32) rank, options(pure, nomem, nostack)) };
            rank
        }
        #[cfg(not(target_feature = "sm_90"))]
        0
    }

    /// The shared-memory address of word `word` of `rank`'s slot in the set of exchange `round`.
    #[inline(always)]
    fn slot(&self, round: u32, rank: u32, word: u32) -> u32 {
        dynamic_shared() + (round & 1) * (crate::CLUSTER_EXCHANGE_BYTES / 2) + (rank * CLUSTER_SLOT_WORDS + word) * 4
    }

    /// Writes `words` into this block's slot in every block of the cluster.
    #[inline(always)]
    fn publish(&self, round: u32, words: [u32; CLUSTER_SLOT_WORDS as usize]) {
        #[cfg(not(target_feature = "sm_90"))]
        let _ = (round, words);
        #[cfg(target_feature = "sm_90")]
        let own = self.slot(round, self.rank(), 0);
        #[cfg(target_feature = "sm_90")]
        for target in 0..self.count {
            // Indexed, not `into_iter`: an array iterator kept in memory is a local-memory array.
            #[allow(clippy::needless_range_loop)]
            for i in 0..words.len() {
                let word = words[i];
                unsafe {
                    asm!(
                        "{{ .reg .b32 remote; mapa.shared::cluster.u32 remote, {own}, {target}; st.shared::cluster.u32 [remote], {w}; }}",
                        own = in(reg32) own + 4 * i as u32, target = in(reg32) target, w = in(reg32) word,
                        options(nostack)
                    )
                };
            }
        }
    }

    /// Word `word` of `rank`'s slot in this block's own set of exchange `round`.
    #[inline(always)]
    fn read(&self, round: u32, rank: u32, word: u32) -> u32 {
        load_shared_u32(self.slot(round, rank, word))
    }

    /// `combine` folded over every block's `value`, in rank order; every thread of every block
    /// of the cluster must call it, with the same `round` (its exchange's count, from 0).
    #[inline(always)]
    pub fn merge(&self, value: [f32; 2], round: u32, combine: impl Fn([f32; 2], [f32; 2]) -> [f32; 2]) -> [f32; 2] {
        if self.count == 1 {
            return value;
        }
        if thread_index() == 0 {
            self.publish(round, [value[0].to_bits(), value[1].to_bits()]);
        }
        cluster_barrier();
        let pair = |rank: u32| [f32::from_bits(self.read(round, rank, 0)), f32::from_bits(self.read(round, rank, 1))];
        let mut total = pair(0);
        for rank in 1..self.count {
            total = combine(total, pair(rank));
        }
        total
    }
}

/// A histogram of [`HISTOGRAM_BINS`] u64 bins summed over a block and then over the blocks of a
/// cluster, by integer atomics: exact, so the same whatever the order of the adds. Lives at
/// `base` in shared memory ([`crate::CLUSTER_HISTOGRAM_BYTES`]): the block's bins, then two sets
/// of the cluster's sums, used by alternate rounds. A round: [`ClusterHistogram::clear`],
/// a block barrier, every thread's [`ClusterHistogram::add`]s, [`ClusterHistogram::total`] (the
/// address of the summed bins, the same in every block), the reads, then
/// [`ClusterHistogram::recycle`]. A block adds its bins into every block's set (8 remote atomics
/// a bin at most), so each block reads its own after one cluster barrier; a set is cleared by its
/// owner after its reads, which the other blocks cannot overtake: they add into it again only two
/// rounds on, after the next round's cluster barrier, which the owner reaches after clearing.
#[derive(Clone, Copy)]
pub struct ClusterHistogram {
    base: u32,
}

impl ClusterHistogram {
    const BIN_BYTES: u32 = 8;
    const SET_BYTES: u32 = HISTOGRAM_BINS * Self::BIN_BYTES;

    /// The histogram at `base`, both sets of the cluster's sums cleared. Every thread must call
    /// it before the cluster's first barrier ([`ClusterExchange::new`]): no block may add into
    /// a set before its owner has cleared it.
    #[inline(always)]
    pub fn new(base: u32) -> Self {
        let histogram = ClusterHistogram { base };
        histogram.zero(base + Self::SET_BYTES, 2 * HISTOGRAM_BINS);
        histogram
    }

    /// `bins` u64 from `at` set to 0 by the block's threads.
    #[inline(always)]
    fn zero(&self, at: u32, bins: u32) {
        let mut bin = thread_index();
        while bin < bins {
            // An immediate 0 (`store_shared_u64` would first move it into a register).
            unsafe { asm!("st.shared.u64 [{a}], 0;", a = in(reg32) at + bin * Self::BIN_BYTES, options(nostack)) };
            bin += block_size();
        }
    }

    /// Clears the block's bins; a block barrier must follow before any [`ClusterHistogram::add`].
    #[inline(always)]
    pub fn clear(&self) {
        self.zero(self.base, HISTOGRAM_BINS);
    }

    /// Adds `value` to the block's bin `bin` (< [`HISTOGRAM_BINS`]), as [`add_u64`].
    #[inline(always)]
    pub fn add(&self, bin: u32, value: u64) {
        let at = self.base + bin * Self::BIN_BYTES;
        add_u64(
            value,
            |low| {
                let old: u32;
                unsafe {
                    asm!("atom.shared.add.u32 {o}, [{a}], {v};", o = out(reg32) old, a = in(reg32) at, v = in(reg32) low, options(nostack))
                };
                old
            },
            |high| unsafe {
                asm!("red.shared.add.u32 [{a}], {v};", a = in(reg32) at + 4, v = in(reg32) high, options(nostack))
            },
        );
    }

    /// Adds 1 to the block's bin `bin` (< [`HISTOGRAM_BINS`]): one 32-bit atomic on the low word,
    /// which a count (fewer than 2^32 entries) never carries out of.
    #[inline(always)]
    pub fn add_one(&self, bin: u32) {
        let at = self.base + bin * Self::BIN_BYTES;
        unsafe { asm!("red.shared.add.u32 [{a}], 1;", a = in(reg32) at, options(nostack)) };
    }

    /// The shared-memory address of the bins summed over the cluster (`round`: the exchange's
    /// count, from 0, as [`ClusterExchange`]'s), once every thread of every block has added its
    /// values: every thread of every block must call it.
    #[inline(always)]
    pub fn total(&self, cluster: &ClusterExchange, round: u32) -> u32 {
        block_barrier();
        if cluster.count() == 1 {
            return self.base;
        }
        let set = self.base + Self::SET_BYTES * (1 + (round & 1));
        #[cfg(target_feature = "sm_90")]
        {
            let mut bin = thread_index();
            while bin < HISTOGRAM_BINS {
                let at = bin * Self::BIN_BYTES;
                let value = load_shared_u64(self.base + at);
                if value != 0 {
                    for target in 0..cluster.count() {
                        let remote: u32;
                        unsafe {
                            asm!("mapa.shared::cluster.u32 {r}, {own}, {t};", r = out(reg32) remote, own = in(reg32) set + at,
                                t = in(reg32) target, options(pure, nomem, nostack))
                        };
                        add_u64(
                            value,
                            |low| {
                                let old: u32;
                                unsafe {
                                    asm!("atom.shared::cluster.add.u32 {o}, [{r}], {v};", o = out(reg32) old, r = in(reg32) remote,
                                    v = in(reg32) low, options(nostack))
                                };
                                old
                            },
                            |high| unsafe {
                                asm!("red.shared::cluster.add.u32 [{r}], {v};", r = in(reg32) remote + 4, v = in(reg32) high, options(nostack))
                            },
                        );
                    }
                }
                bin += block_size();
            }
        }
        cluster_barrier();
        set
    }

    /// After every thread's reads of round `round`'s sums (a block barrier first): clears this
    /// block's set for its next use (the block's own bins, without a cluster, are cleared by
    /// the next round's [`ClusterHistogram::clear`]).
    #[inline(always)]
    pub fn recycle(&self, cluster: &ClusterExchange, round: u32) {
        block_barrier();
        if cluster.count() > 1 {
            self.zero(self.base + Self::SET_BYTES * (1 + (round & 1)), HISTOGRAM_BINS);
        }
    }
}

/// `value` added to a u64 in shared memory as two 32-bit atomics (sm_90 has no 64-bit
/// shared-memory add: `red.shared.add.u64` compiles to a compare-and-swap loop): `add_low` adds
/// the low word and returns its old value, whose carry goes with the high word into `add_high`
/// (skipped when that is 0).
#[inline(always)]
fn add_u64(value: u64, add_low: impl Fn(u32) -> u32, add_high: impl Fn(u32)) {
    let (low, high) = (value as u32, (value >> 32) as u32);
    let old = add_low(low);
    let high = high + (old.checked_add(low).is_none() as u32);
    if high != 0 {
        add_high(high);
    }
}

/// Whether `predicate` holds in any lane of the warp; every lane must call it.
#[inline(always)]
pub fn warp_any(predicate: bool) -> bool {
    let any: u32;
    unsafe {
        asm!(
            "{{ .reg .pred p; setp.ne.u32 p, {v}, 0; vote.sync.any.pred p, p, 0xffffffff; selp.u32 {a}, 1, 0, p; }}",
            a = out(reg32) any, v = in(reg32) predicate as u32, options(nostack)
        )
    };
    any != 0
}

/// The lanes where `predicate` holds, a bit a lane; every lane must call it.
#[inline(always)]
pub fn warp_ballot(predicate: bool) -> u32 {
    let lanes: u32;
    unsafe {
        asm!(
            "{{ .reg .pred p; setp.ne.u32 p, {v}, 0; vote.sync.ballot.b32 {b}, p, 0xffffffff; }}",
            b = out(reg32) lanes, v = in(reg32) predicate as u32, options(nostack)
        )
    };
    lanes
}

/// This thread's lane in its warp.
#[inline(always)]
pub fn lane_index() -> u32 {
    thread_index() % 32
}

/// `redux.sync` of a u32 over the warp (sm_80+): `op` is `add` or `max`.
macro_rules! warp_redux {
    ($op:literal, $value:expr) => {{
        let result: u32;
        unsafe {
            asm!(concat!("redux.sync.", $op, ".u32 {r}, {v}, 0xffffffff;"), r = out(reg32) result, v = in(reg32) $value,
                options(nostack))
        };
        result
    }};
}

/// Sum over the warp of u64 values whose sum is below 2^64, exact and in every lane: three
/// `redux.sync` adds of 27-, 27- and 10-bit parts (32 parts of 27 bits cannot carry out of a
/// u32), rather than ten shuffles.
#[inline(always)]
pub fn warp_sum_u64(value: u64) -> u64 {
    const PART: u32 = 27;
    const MASK: u64 = (1 << PART) - 1;
    let low = warp_redux!("add", (value & MASK) as u32) as u64;
    let middle = warp_redux!("add", ((value >> PART) & MASK) as u32) as u64;
    let high = warp_redux!("add", (value >> (2 * PART)) as u32) as u64;
    low.wrapping_add(middle << PART).wrapping_add(high << (2 * PART))
}

/// The largest u32 over the warp, in every lane.
#[inline(always)]
pub fn warp_max_u32(value: u32) -> u32 {
    warp_redux!("max", value)
}

/// Lane `lane`'s `value`, in every lane.
#[inline(always)]
pub fn warp_broadcast_u64(value: u64, lane: u32) -> u64 {
    let shuffle = |word: u32| {
        let result: u32;
        unsafe {
            asm!("shfl.sync.idx.b32 {r}, {v}, {l}, 0x1f, 0xffffffff;", r = out(reg32) result, v = in(reg32) word,
                l = in(reg32) lane, options(nostack))
        };
        result
    };
    shuffle(value as u32) as u64 | (shuffle((value >> 32) as u32) as u64) << 32
}

/// The sum of `value` over this lane and the lanes below it (an inclusive scan; the warp's sum
/// below 2^64): five steps of a pair of shuffles.
#[inline(always)]
pub fn warp_inclusive_sum_u64(mut value: u64) -> u64 {
    let lane = lane_index();
    for step in 0..5 {
        let distance = 1u32 << step;
        let shuffle = |word: u32| {
            let result: u32;
            unsafe {
                asm!("shfl.sync.up.b32 {r}, {v}, {d}, 0, 0xffffffff;", r = out(reg32) result, v = in(reg32) word,
                    d = in(reg32) distance, options(nostack))
            };
            result
        };
        let below = shuffle(value as u32) as u64 | (shuffle((value >> 32) as u32) as u64) << 32;
        value += if lane >= distance { below } else { 0 };
    }
    value
}

/// A u32 in shared memory at `at`.
#[inline(always)]
pub fn load_shared_u32(at: u32) -> u32 {
    let value: u32;
    unsafe { asm!("ld.shared.u32 {v}, [{a}];", v = out(reg32) value, a = in(reg32) at, options(nostack)) };
    value
}

/// Stores `value` in shared memory at `at`.
#[inline(always)]
pub fn store_shared_u32(at: u32, value: u32) {
    unsafe { asm!("st.shared.u32 [{a}], {v};", a = in(reg32) at, v = in(reg32) value, options(nostack)) };
}

/// A u64 in shared memory at `at`.
#[inline(always)]
pub fn load_shared_u64(at: u32) -> u64 {
    let value: u64;
    unsafe { asm!("ld.shared.u64 {v}, [{a}];", v = out(reg64) value, a = in(reg32) at, options(nostack)) };
    value
}

/// Stores `value` in shared memory at `at`.
#[inline(always)]
pub fn store_shared_u64(at: u32, value: u64) {
    unsafe { asm!("st.shared.u64 [{a}], {v};", a = in(reg32) at, v = in(reg64) value, options(nostack)) };
}

/// Every thread of every block of the cluster meets here; shared-memory writes before it (remote
/// ones too) are visible after it. Not `.aligned`, for the reason of [`block_barrier`]. A no-op
/// before sm_90 (no clusters).
#[inline(always)]
fn cluster_barrier() {
    #[cfg(target_feature = "sm_90")]
    unsafe {
        asm!("barrier.cluster.arrive.release;", "barrier.cluster.wait.acquire;", options(nostack))
    };
}

/// Programmatic dependent launch (sm_90+): the kernels of a stream may start before the previous
/// kernel has finished. Each kernel calls this once, before touching global memory: it waits
/// until the grids it depends on have completed and their writes are visible, then at once lets
/// the next kernel of the stream launch — its blocks are scheduled while this grid still works
/// and wait here in turn, so no launch latency sits between two kernels. (Releasing dependents
/// only at the end, as v6 did, cost 3–12 % at T ≤ 1024 and gained nothing at large T:
/// docs/perf/norm.md, v7.) A no-op when launched without PDL and on targets before sm_90. Not
/// `nomem`: no load may move above it.
#[inline(always)]
pub fn chain_after_prior_grids() {
    #[cfg(target_feature = "sm_90")]
    unsafe {
        asm!("griddepcontrol.wait;", options(nostack));
        asm!("griddepcontrol.launch_dependents;", options(nostack));
    };
}

/// `bar.warp.sync` over the whole warp (every lane must execute it): a lane's memory accesses
/// before it are ordered before every lane's after it.
#[inline(always)]
pub fn warp_sync() {
    unsafe { asm!("bar.warp.sync 0xffffffff;", options(nostack)) };
}

/// Barrier 0 for every thread of the block, as `barrier.sync` (not `bar.sync`, which is
/// `barrier.sync.aligned`: every thread must reach the *same* instruction). LLVM may duplicate the
/// asm into both arms of a branch around it — it did, between the staged kernel's two
/// `if leader` blocks — and an aligned barrier reached from two places hangs the block.
#[inline(always)]
pub fn block_barrier() {
    unsafe { asm!("barrier.sync 0;", options(nostack)) };
}

/// A ring of `stages` slots in the block's dynamic shared memory, each filled by bulk copies
/// (`cp.async.bulk`, the TMA's one-dimensional form, sm_90) that complete on the slot's mbarrier:
/// one thread issues a slot's copies, every thread waits for them, and the bytes in flight are
/// `stages` slots per block whatever the registers. Layout: the mbarriers (8 bytes each) in the
/// first [`STAGING_HEADER_BYTES`], then the slots.
#[cfg(target_feature = "sm_90")]
#[derive(Clone, Copy)]
pub struct StagingRing {
    base: u32,
    stages: u32,
    slot_bytes: u32,
}

#[cfg(target_feature = "sm_90")]
impl StagingRing {
    /// The ring over this block's dynamic shared memory, which must hold
    /// `STAGING_HEADER_BYTES + stages · slot_bytes` (`stages` ≤ [`crate::MAX_STAGING_STAGES`],
    /// `slot_bytes` a multiple of 16).
    #[inline(always)]
    pub fn new(stages: u32, slot_bytes: u32) -> Self {
        let base: u32;
        unsafe { asm!("mov.u32 {b}, ferrinfer_dynamic;", b = out(reg32) base, options(pure, nomem, nostack)) };
        StagingRing { base, stages, slot_bytes }
    }

    #[inline(always)]
    fn barrier(&self, stage: u32) -> u32 {
        self.base + 8 * stage
    }

    /// The shared-memory address of `stage`'s slot.
    #[inline(always)]
    pub fn slot(&self, stage: u32) -> u32 {
        self.base + STAGING_HEADER_BYTES + stage * self.slot_bytes
    }

    /// One thread, before any copy: readies every stage's mbarrier (one arrival a phase), then
    /// makes them visible to the copy engine. The block must meet at a barrier before others wait.
    #[inline(always)]
    pub fn init(&self) {
        for stage in 0..self.stages {
            unsafe {
                asm!("mbarrier.init.shared::cta.b64 [{b}], 1;", b = in(reg32) self.barrier(stage), options(nostack))
            };
        }
        unsafe { asm!("fence.mbarrier_init.release.cluster;", options(nostack)) };
    }

    /// One thread: announces `bytes` of copies into `stage` (its phase completes when they land).
    /// The slot's earlier readers must be done (they met this thread at a barrier or a shuffle).
    #[inline(always)]
    pub fn expect(&self, stage: u32, bytes: u32) {
        unsafe {
            // Orders the generic-proxy reads of the slot's previous contents before the copy's
            // async-proxy writes.
            asm!("fence.proxy.async.shared::cta;", options(nostack));
            asm!(
                "mbarrier.arrive.expect_tx.shared::cta.b64 _, [{b}], {n};",
                b = in(reg32) self.barrier(stage),
                n = in(reg32) bytes,
                options(nostack),
            );
        }
    }

    /// Copies `bytes` (a multiple of 16) from global `src` (16-byte aligned) to `offset` bytes
    /// into `stage`'s slot, completing on its mbarrier (announced by [`StagingRing::expect`]).
    /// No L2 hint: keeping rows written back in place with `evict_last` (as
    /// [`crate::vector::Lingering`] loads do) made fused_add_rmsnorm 4096 × 4096 slower from
    /// Python, 31.7 → 34.3 µs on an H200 (docs/perf/norm.md v9).
    ///
    /// # Safety
    /// `src..src + bytes` readable global memory; the slot holds `offset + bytes`.
    #[inline(always)]
    pub unsafe fn copy(&self, stage: u32, offset: u32, src: *const u8, bytes: u32) {
        let (dst, barrier) = (self.slot(stage) + offset, self.barrier(stage));
        unsafe {
            asm!(
                "{{ .reg .u64 g; cvta.to.global.u64 g, {src}; ",
                "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [{dst}], [g], {n}, [{b}]; }}",
                src = in(reg64) src, dst = in(reg32) dst, n = in(reg32) bytes, b = in(reg32) barrier,
                options(nostack),
            )
        };
    }

    /// Waits until `stage`'s copies of its `use_count`-th filling (from 0) have landed.
    #[inline(always)]
    pub fn wait(&self, stage: u32, use_count: u32) {
        let parity = use_count & 1;
        loop {
            let done: u32;
            unsafe {
                asm!(
                    "{{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [{b}], {parity}; selp.u32 {d}, 1, 0, p; }}",
                    b = in(reg32) self.barrier(stage),
                    parity = in(reg32) parity,
                    d = out(reg32) done,
                    options(nostack),
                )
            };
            if done != 0 {
                break;
            }
        }
    }
}
