//! The cascade family: merging partial attention states, FlashInfer's `merge_state(s)`. A state of
//! a query row is `(v, s)`: `v` the attention output over one partition of the keys (`width`
//! values), `s` the log-sum-exp of its scores in base 2. States of `n` partitions merge into the
//! state of their union:
//!
//! `m = max sₖ`, `wₖ = 2^(sₖ − m)`, `W = Σ wₖ`, `v = Σ wₖ vₖ / W`, `s = log₂ W + m`,
//!
//! in f32 whatever the values' storage type. Every partition empty (`sₖ = −∞` for all k) merges
//! to `v = 0`, `s = −∞` rather than NaN; a NaN or `+∞` score gives NaN (FlashInfer's arithmetic).
//!
//! One parameter struct shared with the host, the per-vector math (the device kernel and the CPU
//! backend alike; [`crate::math`] gives each side its `exp2` and `log2`) and one device kernel,
//! generic over the element type, the vector width, the vectors a lane merges at once and the
//! states (two, or any count).

use crate::element::Element;
use crate::math::{choose, exp2, log2, mul_add, reciprocal};

/// Arguments of the merge kernel, passed by value. Rows are the `(i, h)` pairs of `rows / heads`
/// outer indices and `heads` inner ones (a query row's position and head), so that
/// `merge_states`' `[seq, states, heads, dim]` values need no copy; each tensor addresses row
/// `(i, h)` at `i · outer + h · head` elements from its base. Strides in elements, 64-bit.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct MergeParams {
    /// State 0's values; state `k`'s start `k · v_state_stride` elements further (signed: two
    /// separate tensors are "states" of any distance).
    pub v: u64,
    /// State 0's scores (f32).
    pub s: u64,
    /// The merged values (`v` itself when merging in place).
    pub v_out: u64,
    /// The merged scores (f32; `s` itself in place).
    pub s_out: u64,
    pub rows: u64,
    /// Inner rows per outer index (≥ 1).
    pub heads: u64,
    pub v_state_stride: i64,
    pub s_state_stride: i64,
    /// `[outer, head]` strides of `v`, `s`, `v_out`, `s_out`.
    pub v_strides: [u64; 2],
    pub s_strides: [u64; 2],
    pub v_out_strides: [u64; 2],
    pub s_out_strides: [u64; 2],
    /// Values a row (`head_dim`).
    pub width: u32,
    /// States merged (≥ 1).
    pub states: u32,
    /// Threads working on one row (a power of two ≤ 32; the device kernel's only).
    pub lanes: u32,
    pub _reserved: u32,
}

impl MergeParams {
    /// Row `row`'s `(outer, head)` indices.
    #[inline(always)]
    fn position(&self, row: u64) -> (u64, u64) {
        // Through NonZeroU64: a division that cannot fail has no panic path for the device.
        let heads = core::num::NonZeroU64::new(self.heads).unwrap_or(core::num::NonZeroU64::MIN);
        if self.heads == 1 { (row, 0) } else { (row / heads, row % heads) }
    }

    /// The row at `(outer, head)` in each tensor: state 0's scores and values, the merged
    /// values and score.
    #[inline(always)]
    fn row_pointers<T>(&self, (outer, head): (u64, u64)) -> RowPointers<T> {
        let offset = |strides: [u64; 2]| (outer * strides[0] + head * strides[1]) as usize;
        RowPointers {
            s: (self.s as *const f32).wrapping_add(offset(self.s_strides)),
            v: (self.v as *const T).wrapping_add(offset(self.v_strides)),
            v_out: (self.v_out as *mut T).wrapping_add(offset(self.v_out_strides)),
            s_out: (self.s_out as *mut f32).wrapping_add(offset(self.s_out_strides)),
        }
    }
}

/// One row's place in each tensor ([`MergeParams::row_pointers`]), computed once a row.
struct RowPointers<T> {
    s: *const f32,
    v: *const T,
    v_out: *mut T,
    s_out: *mut f32,
}

/// The larger of two scores, never a NaN (`f32::max` would drop it too): a NaN score reaches the
/// row through its weight, `exp2(NaN − m)`.
#[inline(always)]
fn larger(a: f32, b: f32) -> f32 {
    if b > a { b } else { a }
}

/// `UNROLL` vectors of `VEC` values of the merge of a row's `states`, and its merged score:
/// `Σ wₖ vₖ / W` with `wₖ = 2^(sₖ − m)`, `W = Σ wₖ`, `m = max sₖ`, and `log₂ W + m`; zeros and
/// −∞ when every score is −∞ (or NaN). States are taken `STEP` a step, every state's score and
/// values read in the source before any is used, and the sums rescaled when a step raises the
/// largest score (a step's arithmetic does not depend on what is loaded, so no load needs to
/// wait on a score): on the device one memory round trip a step — a single step for
/// `merge_state`'s two, and for `merge_states`' up to four — where ptxas keeps that order. It
/// does in most entries; not in the two-state entries of four 16-bit elements (`v4_s2`: the
/// values after the scores' comparison), and in f32's any-count `v4` and unrolled `v4x2_s2`
/// one load comes late (the `jit_sass` snapshot's "LDG in flight"). A step's states past the
/// last are not read (`score(k, false)`, `values(k, false)` give anything finite) and weigh 0.
/// The host and the device run this same function: their merges differ only in `exp2`/`log2`.
#[inline(always)]
fn merged<const VEC: usize, const UNROLL: usize, const STEP: usize>(
    states: u32,
    score: impl Fn(u32, bool) -> f32,
    values: impl Fn(u32, bool) -> [[f32; VEC]; UNROLL],
) -> ([[f32; VEC]; UNROLL], f32) {
    let (mut m, mut total, mut sum) = (f32::NEG_INFINITY, 0.0f32, [[0.0f32; VEC]; UNROLL]);
    let mut k = 0;
    while k < states {
        let live: [bool; STEP] = core::array::from_fn(|j| k + (j as u32) < states);
        // The values read first: the scores' arithmetic comes first, and a load issued after
        // it waits on the scores (ptxas moved state 0's value load there when scores came first).
        let v: [[[f32; VEC]; UNROLL]; STEP] = core::array::from_fn(|j| values(k + j as u32, live[j]));
        let read: [f32; STEP] = core::array::from_fn(|j| score(k + j as u32, live[j]));
        let s: [f32; STEP] = core::array::from_fn(|j| if live[j] { read[j] } else { f32::NEG_INFINITY });
        let step_max = s.iter().fold(m, |a, &b| larger(a, b));
        // While every score so far is −∞, weigh against 0: each weight is then 0, not NaN.
        let base = if step_max == f32::NEG_INFINITY { 0.0 } else { step_max };
        let w: [f32; STEP] = core::array::from_fn(|j| exp2(s[j] - base));
        let scale = if k == 0 { 0.0 } else { exp2(m - base) };
        total = mul_add(total, scale, w.iter().skip(1).fold(w[0], |a, &b| a + b));
        for (u, sum) in sum.iter_mut().enumerate() {
            for i in 0..VEC {
                sum[i] = (0..STEP).fold(sum[i] * scale, |acc, j| mul_add(w[j], v[j][u][i], acc));
            }
        }
        m = step_max;
        k += STEP as u32;
    }
    // `choose`, not an early return nor a plain `if`: given a branch, the compiler moves the
    // value loads under it, after the scores' round trip.
    let merged = m != f32::NEG_INFINITY;
    let inverse = reciprocal(total);
    let values = sum.map(|vector| vector.map(|x| choose(merged, x * inverse, 0.0)));
    (values, choose(merged, log2(total) + m, f32::NEG_INFINITY))
}

/// One row on the host (the CPU backend's inner loop).
///
/// # Safety
/// `params` must describe valid memory as the launcher validates it: every row of every state in
/// bounds; the outputs disjoint from the inputs or exactly state 0 (in place).
pub unsafe fn merge_row<T: Element>(p: &MergeParams, row: u64) {
    let RowPointers { s, v, v_out, s_out } = p.row_pointers::<T>(p.position(row));
    let score = |k: u32, read: bool| match read {
        true => unsafe { s.wrapping_offset(k as isize * p.s_state_stride as isize).read() },
        false => 0.0,
    };
    let width = p.width as usize;
    // Chunks of 8 values, then one at a time: each state's weight computed once a chunk.
    let mut merged_score = f32::NEG_INFINITY;
    let mut i = 0;
    while i < width {
        if width - i >= HOST_CHUNK {
            let ([out], score_out) =
                merged::<HOST_CHUNK, 1, 2>(p.states, score, |k, read| [unsafe { state_values(p, v, k, i, read) }]);
            for (j, x) in out.into_iter().enumerate() {
                unsafe { v_out.add(i + j).write(T::from_f32(x)) };
            }
            merged_score = score_out;
            i += HOST_CHUNK;
        } else {
            let ([[x]], score_out) =
                merged::<1, 1, 2>(p.states, score, |k, read| [unsafe { state_values(p, v, k, i, read) }]);
            unsafe { v_out.add(i).write(T::from_f32(x)) };
            merged_score = score_out;
            i += 1;
        }
    }
    unsafe { s_out.write(merged_score) };
}

/// Values a host step merges at once.
const HOST_CHUNK: usize = 8;

/// `N` values of state `k` from element `at` of the row whose state 0 starts at `v`, as f32
/// (zeros, nothing read, unless `read`).
///
/// # Safety
/// As [`merge_row`], where `read`.
unsafe fn state_values<T: Element, const N: usize>(
    p: &MergeParams,
    v: *const T,
    k: u32,
    at: usize,
    read: bool,
) -> [f32; N] {
    let state = v.wrapping_offset(k as isize * p.v_state_stride as isize).wrapping_add(at);
    core::array::from_fn(|j| if read { unsafe { state.add(j).read() }.to_f32() } else { 0.0 })
}

/// States a step of the device's any-count merge (`merge_states`): up to four states' loads in
/// flight a vector, a row of up to four states one step.
#[cfg(target_arch = "nvptx64")]
const ANY_COUNT_STEP: usize = 4;

#[cfg(target_arch = "nvptx64")]
pub use device_kernels::merge_rows;

#[cfg(target_arch = "nvptx64")]
mod device_kernels {
    use super::*;
    use crate::device::{block_size, chain_after_prior_grids, thread_index, warp_sync};
    use crate::vector::{Coherent, Kept, Packed};

    /// The device kernel. A row is worked on by `p.lanes` threads (a power of two ≤ 32, so a
    /// row never spans warps), each taking every `lanes`-th vector of `VEC` values, `UNROLL` of
    /// them merged at once (a row's scores, weights and pointers once for all: where a row is
    /// short, those are most of a lane's instructions); a block's groups take consecutive rows
    /// and the grid (x) strides over the rest. Every thread of a warp runs the same number of
    /// row steps (a row past the end is skipped, not the step), so the warp can synchronise
    /// inside one: a row's scores are read by every lane before its first lane writes the
    /// merged score, which in place overwrites state 0's.
    /// Loads are coherent: in place the kernel writes what it reads. `STATES`: the states
    /// merged, fixed (2: `merge_state`'s and any two states', an entry of its own whose merge
    /// is one unrolled step in fewer registers) or 0, `p.states` at run time. Launcher's
    /// guarantees: `width`, every stride and pointer are multiples of `VEC` elements (scores:
    /// f32-aligned).
    #[inline(always)]
    pub unsafe fn merge_rows<T: Element, const VEC: usize, const UNROLL: usize, const STATES: u32>(p: &MergeParams) {
        chain_after_prior_grids();
        // A two-state entry walks rows of one head (every `merge_state`) in a copy of its own:
        // a row's place is its index, its pointers one product of a stride each — the division
        // by the heads (a 64-bit subroutine) and the heads' stride products are not in that
        // copy. The any-count entries keep the one walk: the second copy made `merge_states` of
        // three states 1 % slower at 2^19 rows (H200, docs/perf/cascade.md).
        if STATES != 0 && p.heads == 1 {
            unsafe { walk_rows::<T, VEC, UNROLL, STATES>(p, |row| (row, 0)) }
        } else {
            unsafe { walk_rows::<T, VEC, UNROLL, STATES>(p, |row| p.position(row)) }
        }
    }

    /// [`merge_rows`]' walk, `place` giving a row's `(outer, head)`.
    #[inline(always)]
    unsafe fn walk_rows<T: Element, const VEC: usize, const UNROLL: usize, const STATES: u32>(
        p: &MergeParams,
        place: impl Fn(u64) -> (u64, u64),
    ) {
        // Lanes a power of two (the launcher's guarantee): groups by shifts, no division.
        let shift = p.lanes.trailing_zeros();
        let (group, lane) = (thread_index().wrapping_shr(shift), thread_index() & p.lanes.wrapping_sub(1));
        let groups = block_size().wrapping_shr(shift);
        let vectors = p.width / VEC as u32;
        let (block_row, grid_rows) = unsafe {
            (
                core::arch::nvptx::_block_idx_x() as u64 * groups as u64,
                core::arch::nvptx::_grid_dim_x() as u64 * groups as u64,
            )
        };
        let mut first = block_row;
        while first < p.rows {
            let row = first + group as u64;
            let live = row < p.rows;
            let at = p.row_pointers::<T>(place(row));
            let mut merged_score = f32::NEG_INFINITY;
            if live {
                merged_score = unsafe { merge_vectors::<T, VEC, UNROLL, STATES>(p, &at, lane, vectors) };
            }
            warp_sync();
            if live && lane == 0 {
                unsafe { Packed::<f32, 1>::from_f32([merged_score]).store::<Kept>(at.s_out) };
            }
            first += grid_rows;
        }
    }

    /// This lane's vectors of the row at `at`; the merged score (−∞ for a lane without a
    /// vector; lane 0 always has one).
    #[inline(always)]
    unsafe fn merge_vectors<T: Element, const VEC: usize, const UNROLL: usize, const STATES: u32>(
        p: &MergeParams,
        &RowPointers { s, v, v_out, .. }: &RowPointers<T>,
        lane: u32,
        vectors: u32,
    ) -> f32 {
        let score = |k: u32, read: bool| {
            let at = s.wrapping_offset(k as isize * p.s_state_stride as isize);
            unsafe { Packed::<f32, 1>::load_if::<Coherent>(read, at) }.get(0)
        };
        let states = if STATES == 0 { p.states } else { STATES };
        let mut merged_score = f32::NEG_INFINITY;
        let mut column = lane;
        while column < vectors {
            // The step's vectors `lanes` apart, so that each load of a warp is contiguous; the
            // first always in the row, the others where they are.
            let has: [bool; UNROLL] = core::array::from_fn(|u| column + u as u32 * p.lanes < vectors);
            let at: [usize; UNROLL] = core::array::from_fn(|u| (column + u as u32 * p.lanes) as usize * VEC);
            let values = |k: u32, read: bool| {
                let state = v.wrapping_offset(k as isize * p.v_state_stride as isize);
                core::array::from_fn(|u| {
                    unsafe { Packed::<T, VEC>::load_if::<Coherent>(read && has[u], state.wrapping_add(at[u])) }.to_f32()
                })
            };
            // `merge_state`'s two states in one step; any count four a step.
            let (out, score_out) = match STATES {
                2 => merged::<VEC, UNROLL, 2>(states, score, values),
                _ => merged::<VEC, UNROLL, ANY_COUNT_STEP>(states, score, values),
            };
            merged_score = score_out;
            for u in 0..UNROLL {
                unsafe { Packed::<T, VEC>::from_f32(out[u]).store_if::<Kept>(has[u], v_out.wrapping_add(at[u])) };
            }
            column += p.lanes * UNROLL as u32;
        }
        merged_score
    }
}
