//! The few device primitives `core::arch::nvptx` lacks or spells awkwardly: thread geometry, warp
//! shuffles, named barriers, row-group reductions and programmatic dependent launch (PDL).
//! Warp-level `asm!` is never `pure`/`nomem`: rustc does not mark inline asm convergent, and with
//! `pure` LLVM may move a shuffle under a divergent branch.

use core::arch::{asm, nvptx};

/// Most warps a block can have (1024 threads).
pub const MAX_WARPS: usize = 32;

/// Declares the module-scope `.shared` arrays the device code uses: two slots of one f32 per warp
/// for row-group reductions (every block gets its own copy). Module-level asm is emitted only into
/// the crate that expands it, so each generated entry-point crate invokes this once
/// (`ferrinfer_kernels::module_globals!();`) — the kernels crate's own PTX never reaches a GPU.
#[macro_export]
macro_rules! module_globals {
    () => {
        core::arch::global_asm!(".shared .align 16 .b8 ferrinfer_group_partials[256];");
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

/// Butterfly exchange within a full warp (every lane must execute it).
#[inline(always)]
fn shuffle_xor(value: f32, lane_mask: u32) -> f32 {
    let result: f32;
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

/// `bar.sync id, threads`: waits for `threads` threads (a multiple of 32) at barrier `id` (1–15;
/// 0 is `__syncthreads`'). Several row groups of one block synchronise independently this way.
#[inline(always)]
fn named_barrier(id: u32, threads: u32) {
    unsafe { asm!("bar.sync {id}, {threads};", id = in(reg32) id, threads = in(reg32) threads) };
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

/// A block's threads cut into groups of `threads` consecutive threads (a power of two, ≤ 1024),
/// each group working on one row at a time; `group` is this thread's group and `lane` its
/// index in it. Groups of a warp or more run independently; the groups sharing a warp reduce
/// with the warp's shuffles, so they must call [`RowGroup::sum`] together.
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
        let shift = threads.trailing_zeros();
        let tid = thread_index();
        RowGroup { threads, group: tid >> shift, lane: tid & (threads - 1), slot: 0 }
    }

    /// Groups per block.
    #[inline(always)]
    pub fn per_block(&self) -> u32 {
        block_size() >> self.threads.trailing_zeros()
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

/// Programmatic dependent launch (sm_90+): the kernels of a stream may start before the previous
/// kernel has finished; each waits here, before touching global memory, until the grids it
/// depends on have completed and their writes are visible. A no-op when launched without PDL and
/// on targets before sm_90. Not `nomem`: no load may move above it.
#[inline(always)]
pub fn wait_for_prior_grids() {
    #[cfg(target_feature = "sm_90")]
    unsafe {
        asm!("griddepcontrol.wait;", options(nostack))
    };
}

/// Lets the next kernel of the stream (launched with PDL) start its prologue: this grid's
/// remaining work is only stores, which that kernel's [`wait_for_prior_grids`] still waits for.
#[inline(always)]
pub fn allow_dependent_grids() {
    #[cfg(target_feature = "sm_90")]
    unsafe {
        asm!("griddepcontrol.launch_dependents;", options(nostack))
    };
}
