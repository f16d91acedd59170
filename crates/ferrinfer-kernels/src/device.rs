//! The few device primitives `core::arch::nvptx` lacks or spells awkwardly: thread geometry, warp
//! shuffles and the block-wide sum. Warp-level `asm!` is never `pure`/`nomem`: rustc does not mark
//! inline asm convergent, and with `pure` LLVM may move a shuffle under a divergent branch.

use core::arch::{asm, nvptx};

/// Most warps a block can have (1024 threads).
const MAX_WARPS: usize = 32;

/// Declares the module-scope `.shared` arrays the device code uses (one f32 per warp for block
/// reductions; every block gets its own copy). Module-level asm is emitted only into the crate
/// that expands it, so each generated entry-point crate invokes this once
/// (`ferrinfer_kernels::module_globals!();`) — the kernels crate's own PTX never reaches a GPU.
#[macro_export]
macro_rules! module_globals {
    () => {
        core::arch::global_asm!(".shared .align 16 .b8 ferrinfer_block_partials[128];");
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

/// Butterfly exchange within a full warp.
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

/// Sum over the 32 lanes of a warp; every lane gets the total.
#[inline(always)]
pub fn warp_sum(mut value: f32) -> f32 {
    let mut mask = 16;
    while mask > 0 {
        value += shuffle_xor(value, mask);
        mask >>= 1;
    }
    value
}

#[inline(always)]
fn block_partials() -> *mut f32 {
    let pointer: *mut f32;
    unsafe {
        asm!("cvta.shared.u64 {p}, ferrinfer_block_partials;", p = out(reg64) pointer);
    }
    pointer
}

/// Sum over all threads of the block (blockDim.x a multiple of 32, at most 1024); every thread
/// gets the total, summed in the same order by all of them. Safe to call again right after.
#[inline(always)]
pub fn block_sum(value: f32) -> f32 {
    let partials = block_partials();
    let warp_total = warp_sum(value);
    let warps = (block_size() / 32) as usize;
    unsafe {
        if thread_index() % 32 == 0 {
            partials.add((thread_index() / 32) as usize).write(warp_total);
        }
        nvptx::_syncthreads();
        let mut total = 0.0;
        let mut warp = 0;
        while warp < warps && warp < MAX_WARPS {
            total += partials.add(warp).read();
            warp += 1;
        }
        // The next call overwrites the partials: nobody may still be reading them then.
        nvptx::_syncthreads();
        total
    }
}
