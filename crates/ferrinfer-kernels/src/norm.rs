//! The norm family, accumulating in f32 whatever the storage type:
//! - rmsnorm: `y = x / √(mean(x²) + eps) · (w + offset)` (offset 1 for Gemma);
//! - fused add + rmsnorm: `residual += x`, then `x = rmsnorm(residual)` — both in place;
//! - layernorm: `y = (x − mean) / √(var + eps) · γ + β`.
//!
//! One parameter struct for every norm kernel, shared with the host; the per-row math shared by
//! the device kernels and the host's CPU backend; and two device kernels, generic over the norm,
//! the element and weight types and the vector width: `norm_regs` keeps the row in registers
//! (one pass over global memory; `CHUNKS` vectors per thread, `warps_per_row` warps per row) and
//! `norm_stream` re-reads it (any row length). Entry points are generated per spec by
//! `ferrinfer-jit`.

use crate::element::Element;
use crate::math::rsqrt;

/// Arguments of every norm kernel, passed by value. Pointers are device (or, for the CPU backend,
/// host) addresses, 0 where an op has no such tensor; strides and counts are in elements and
/// 64-bit, so no offset can overflow.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct NormParams {
    pub input: u64,
    /// Fused add: the residual, read and written in place.
    pub residual: u64,
    pub weight: u64,
    /// Layernorm: β.
    pub bias: u64,
    /// Fused add: the input itself (normalised in place).
    pub output: u64,
    pub rows: u64,
    pub input_row_stride: u64,
    pub residual_row_stride: u64,
    pub output_row_stride: u64,
    pub hidden: u32,
    pub eps: f32,
    /// Added to every weight: 1 for Gemma's `(1 + w)`, else 0.
    pub weight_offset: f32,
    /// `norm_regs`: warps that share one row (the block holds `blockDim / 32 / warps_per_row` rows).
    pub warps_per_row: u32,
}

/// Which norm a kernel computes: a type parameter, so each compiles to its own code.
pub trait NormKind: 'static {
    /// `residual += input` first; the norm is of the new residual and overwrites `input`.
    const FUSED_ADD: bool;
    /// Centre on the mean and add a bias (layernorm); else scale by the root mean square.
    const CENTERED: bool;
}

/// rmsnorm (and Gemma's, through `weight_offset`).
pub struct Rms;
/// Fused add + rmsnorm.
pub struct FusedAddRms;
/// layernorm.
pub struct Layer;

impl NormKind for Rms {
    const FUSED_ADD: bool = false;
    const CENTERED: bool = false;
}
impl NormKind for FusedAddRms {
    const FUSED_ADD: bool = true;
    const CENTERED: bool = false;
}
impl NormKind for Layer {
    const FUSED_ADD: bool = false;
    const CENTERED: bool = true;
}

/// How a row's values map to outputs: `y = (x − shift) · scale · (w + offset) + b`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowScale {
    pub shift: f32,
    pub scale: f32,
}

/// rms: no shift, scale 1/√(Σx²/hidden + eps).
#[inline(always)]
pub fn rms_scale(sum_of_squares: f32, hidden: u32, eps: f32) -> RowScale {
    RowScale { shift: 0.0, scale: rsqrt(sum_of_squares / hidden as f32 + eps) }
}

/// layernorm: shift by the mean, scale 1/√(Σ(x − mean)²/hidden + eps).
#[inline(always)]
pub fn layer_scale(mean: f32, centered_sum_of_squares: f32, hidden: u32, eps: f32) -> RowScale {
    RowScale { shift: mean, scale: rsqrt(centered_sum_of_squares / hidden as f32 + eps) }
}

/// The input value a row's statistics are taken from: for a fused add, the new residual as
/// stored (rounded to T), so the output is exactly the norm of what the residual now holds.
#[inline(always)]
pub fn fused_sum<T: Element>(x: T, residual: T) -> T {
    T::from_f32(x.to_f32() + residual.to_f32())
}

/// One output element, rounded once to the storage type.
#[inline(always)]
pub fn normalize<K: NormKind, T: Element, W: Element>(x: f32, row: RowScale, weight: W, offset: f32, bias: W) -> T {
    let scaled = if K::CENTERED { (x - row.shift) * row.scale } else { x * row.scale };
    let y = scaled * (weight.to_f32() + offset);
    T::from_f32(if K::CENTERED { y + bias.to_f32() } else { y })
}

/// Sum of `f(x)` over a row in eight partial sums (like a vectorised device thread), so long
/// rows lose less to rounding.
fn row_sum<T: Element>(row: *const T, hidden: usize, f: impl Fn(f32) -> f32) -> f32 {
    let mut partial = [0.0f32; 8];
    for i in 0..hidden {
        partial[i % 8] += f(unsafe { row.add(i).read() }.to_f32());
    }
    partial.iter().sum()
}

/// Pointer to element 0 of `row` of a tensor with the given row stride.
#[inline(always)]
fn row_ptr<T>(base: u64, row: u64, stride: u64) -> *mut T {
    (base as *mut T).wrapping_add((row * stride) as usize)
}

/// One row of any norm on the host (the CPU backend's inner loop).
///
/// # Safety
/// `params` must describe valid, writable memory as the launcher validates it: every row of
/// every tensor in bounds; `output` may be `input` (in place), nothing else may overlap.
pub unsafe fn norm_row<K: NormKind, T: Element, W: Element>(params: &NormParams, row: u64) {
    let p = params;
    let hidden = p.hidden as usize;
    let input = row_ptr::<T>(p.input, row, p.input_row_stride);
    // Fused add: the residual row becomes the row the statistics and outputs come from.
    let source = if K::FUSED_ADD {
        let residual = row_ptr::<T>(p.residual, row, p.residual_row_stride);
        for i in 0..hidden {
            unsafe { residual.add(i).write(fused_sum(input.add(i).read(), residual.add(i).read())) };
        }
        residual
    } else {
        input
    };
    let stats = if K::CENTERED {
        let mean = row_sum(source, hidden, |x| x) / hidden as f32;
        layer_scale(mean, row_sum(source, hidden, |x| (x - mean) * (x - mean)), p.hidden, p.eps)
    } else {
        rms_scale(row_sum(source, hidden, |x| x * x), p.hidden, p.eps)
    };
    let (weight, bias) = (p.weight as *const W, p.bias as *const W);
    let output = row_ptr::<T>(p.output, row, p.output_row_stride);
    for i in 0..hidden {
        unsafe {
            let b = if K::CENTERED { bias.add(i).read() } else { W::from_f32(0.0) };
            output.add(i).write(normalize::<K, T, W>(
                source.add(i).read().to_f32(),
                stats,
                weight.add(i).read(),
                p.weight_offset,
                b,
            ));
        }
    }
}

#[cfg(target_arch = "nvptx64")]
pub use device_kernels::{norm_regs, norm_stream};

#[cfg(target_arch = "nvptx64")]
mod device_kernels {
    use super::*;
    use crate::device::{block_index, block_size, block_sum, divide, grid_size, thread_index, warp_sum};
    use crate::vector::{Packed, load, store};

    /// `norm_regs` loads weights before the row's reduction at up to this many chunks.
    const PREFETCH_WEIGHT_CHUNKS: usize = 4;

    /// Sum over the threads of one row: its warp, or (several warps per row) the block.
    #[inline(always)]
    fn row_group_sum(value: f32, warps_per_row: u32) -> f32 {
        if warps_per_row == 1 { warp_sum(value) } else { block_sum(value) }
    }

    /// The register-resident kernel. Each row belongs to `32 · warps_per_row` threads, each of
    /// which holds up to `CHUNKS` vectors of it: vector `c · threads + lane` for chunk `c`. The
    /// row is read from global memory once. Launcher's guarantees: `blockDim.x` is a multiple of
    /// `32 · warps_per_row`, at most 1024, and one row per block when `warps_per_row > 1`; one
    /// block per `blockDim / (32 · warps_per_row)` rows (no grid-stride loop: loop-invariant chunk
    /// offsets hoisted out of one cost registers); `hidden ≤ CHUNKS · 32 · warps_per_row · VEC`;
    /// `hidden`, row strides and pointers are multiples of `VEC` elements (of their own type).
    #[inline(always)]
    pub unsafe fn norm_regs<T: Element, W: Element, K: NormKind, const VEC: usize, const CHUNKS: usize>(
        p: &NormParams,
    ) {
        // Rows that fill every chunk of every lane (the common case) need no per-chunk bounds
        // test: a separate copy without them loads all chunks back to back, with fewer registers.
        if p.hidden as usize / VEC == CHUNKS * 32 * p.warps_per_row as usize {
            unsafe { norm_regs_row::<T, W, K, VEC, CHUNKS, true>(p) }
        } else {
            unsafe { norm_regs_row::<T, W, K, VEC, CHUNKS, false>(p) }
        }
    }

    #[inline(always)]
    unsafe fn norm_regs_row<
        T: Element,
        W: Element,
        K: NormKind,
        const VEC: usize,
        const CHUNKS: usize,
        const FULL: bool,
    >(
        p: &NormParams,
    ) {
        let threads_per_row = p.warps_per_row as usize * 32;
        let rows_per_block = divide(block_size() as usize, threads_per_row);
        let group = divide(thread_index() as usize, threads_per_row);
        let lane = thread_index() as usize - group * threads_per_row;
        let vectors = p.hidden as usize / VEC;
        let slot = |c: usize| c * threads_per_row + lane;
        let valid = |c: usize| FULL || slot(c) < vectors;
        let row = block_index() as u64 * rows_per_block as u64 + group as u64;
        if row >= p.rows {
            return;
        }
        let input = row_ptr::<T>(p.input, row, p.input_row_stride);
        let mut v = [Packed::<T, VEC>::ZERO; CHUNKS];
        for c in 0..CHUNKS {
            if valid(c) {
                let at = slot(c) * VEC;
                v[c] = unsafe { Packed::load(input.add(at)) };
                if K::FUSED_ADD {
                    let residual = row_ptr::<T>(p.residual, row, p.residual_row_stride).wrapping_add(at);
                    let r = unsafe { load::<T, VEC>(residual) };
                    for i in 0..VEC {
                        v[c].set(i, fused_sum(v[c].get(i), r[i]));
                    }
                    unsafe { v[c].store(residual) };
                }
            }
        }
        // Few chunks (short rows per thread: small batches, where latency is all): load the
        // weights before the reduction so their latency overlaps it rather than following it.
        // With many chunks the extra registers would cost more occupancy than they save.
        let weights = |c: usize| {
            let at = slot(c) * VEC;
            let w = unsafe { load::<W, VEC>((p.weight as *const W).add(at)) };
            let b = if K::CENTERED { unsafe { load::<W, VEC>((p.bias as *const W).add(at)) } } else { w };
            (w, b)
        };
        let mut early = [([W::from_bits(0); VEC], [W::from_bits(0); VEC]); CHUNKS];
        if CHUNKS <= PREFETCH_WEIGHT_CHUNKS {
            for (c, slot) in early.iter_mut().enumerate() {
                if valid(c) {
                    *slot = weights(c);
                }
            }
        }
        let stats = if K::CENTERED {
            let mut sum = 0.0;
            for c in 0..CHUNKS {
                for i in 0..VEC {
                    sum += v[c].get_f32(i);
                }
            }
            let mean = row_group_sum(sum, p.warps_per_row) / p.hidden as f32;
            let mut centered = 0.0;
            for c in 0..CHUNKS {
                if valid(c) {
                    for i in 0..VEC {
                        let d = v[c].get_f32(i) - mean;
                        centered += d * d;
                    }
                }
            }
            layer_scale(mean, row_group_sum(centered, p.warps_per_row), p.hidden, p.eps)
        } else {
            let mut squares = 0.0;
            for c in 0..CHUNKS {
                for i in 0..VEC {
                    let x = v[c].get_f32(i);
                    squares += x * x;
                }
            }
            rms_scale(row_group_sum(squares, p.warps_per_row), p.hidden, p.eps)
        };
        let output = row_ptr::<T>(p.output, row, p.output_row_stride);
        for c in 0..CHUNKS {
            if valid(c) {
                let at = slot(c) * VEC;
                let (w, b) = if CHUNKS <= PREFETCH_WEIGHT_CHUNKS { early[c] } else { weights(c) };
                let mut y = [T::from_bits(0); VEC];
                for i in 0..VEC {
                    y[i] = normalize::<K, T, W>(v[c].get_f32(i), stats, w[i], p.weight_offset, b[i]);
                }
                unsafe { store::<T, VEC>(output.add(at), y) };
            }
        }
    }

    /// The streaming kernel, for rows too long for registers: a block per row (the grid strides
    /// over rows), each thread taking every `blockDim`-th vector; statistics passes read the row,
    /// the last pass re-reads it (from L1/L2) and writes. `blockDim.x` a multiple of 32, ≤ 1024.
    #[inline(always)]
    pub unsafe fn norm_stream<T: Element, W: Element, K: NormKind, const VEC: usize>(p: &NormParams) {
        let vectors = p.hidden as usize / VEC;
        let (first, step) = (thread_index() as usize, block_size() as usize);
        let mut row = block_index() as u64;
        while row < p.rows {
            let input = row_ptr::<T>(p.input, row, p.input_row_stride);
            let source = if K::FUSED_ADD { row_ptr::<T>(p.residual, row, p.residual_row_stride) } else { input };
            // Pass 1: (fused: add and store the residual) Σx or Σx².
            let mut sum = 0.0;
            let mut v = first;
            while v < vectors {
                let mut x = unsafe { load::<T, VEC>(input.add(v * VEC)) };
                if K::FUSED_ADD {
                    let r = unsafe { load::<T, VEC>(source.add(v * VEC)) };
                    for i in 0..VEC {
                        x[i] = fused_sum(x[i], r[i]);
                    }
                    unsafe { store::<T, VEC>(source.add(v * VEC), x) };
                }
                for i in 0..VEC {
                    sum += if K::CENTERED { x[i].to_f32() } else { x[i].to_f32() * x[i].to_f32() };
                }
                v += step;
            }
            let total = block_sum(sum);
            let stats = if K::CENTERED {
                let mean = total / p.hidden as f32;
                let mut centered = 0.0;
                let mut v = first;
                while v < vectors {
                    let x = unsafe { load::<T, VEC>(source.add(v * VEC)) };
                    for i in 0..VEC {
                        centered += (x[i].to_f32() - mean) * (x[i].to_f32() - mean);
                    }
                    v += step;
                }
                layer_scale(mean, block_sum(centered), p.hidden, p.eps)
            } else {
                rms_scale(total, p.hidden, p.eps)
            };
            let output = row_ptr::<T>(p.output, row, p.output_row_stride);
            let mut v = first;
            while v < vectors {
                let x = unsafe { load::<T, VEC>(source.add(v * VEC)) };
                let w = unsafe { load::<W, VEC>((p.weight as *const W).add(v * VEC)) };
                let b = if K::CENTERED { unsafe { load::<W, VEC>((p.bias as *const W).add(v * VEC)) } } else { w };
                let mut y = x;
                for i in 0..VEC {
                    y[i] = normalize::<K, T, W>(x[i].to_f32(), stats, w[i], p.weight_offset, b[i]);
                }
                unsafe { store::<T, VEC>(output.add(v * VEC), y) };
                v += step;
            }
            row += grid_size() as u64;
        }
    }
}
