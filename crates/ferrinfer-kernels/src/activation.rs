//! The activation family: gated activations, FlashInfer's `act_and_mul`. For an input row
//! `[gate | up]` of `2d` elements the output row is `act(gate) · up` (`d` elements), in f32
//! whatever the storage type:
//! - `silu(x) = x · σ(x)`;
//! - `gelu(x) = x · Φ(x) = ½ x (1 + erf(x / √2))` (exact GELU);
//! - `gelu_tanh(x) = ½ x (1 + tanh(√(2/π) (x + 0.044715 x³)))`, computed as `x · σ(2u)`, the same
//!   function without tanh's cancellation.
//!
//! One parameter struct shared with the host, the per-element math (used by the device kernel and
//! the CPU backend alike; [`crate::math`] gives each side its own exp, reciprocal and erf) and one
//! device kernel, generic over the activation, the element type and the vector width.

use crate::element::Element;
use crate::math::{erf, exp2, mul_add, reciprocal, sigmoid};

/// Arguments of every activation kernel, passed by value. Strides and counts in elements,
/// 64-bit, so no offset overflows.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct ActivationParams {
    /// `[rows, 2d]`: gate then up in each row.
    pub input: u64,
    /// `[rows, d]`.
    pub output: u64,
    pub rows: u64,
    pub input_row_stride: u64,
    pub output_row_stride: u64,
    /// The output width `d`.
    pub width: u32,
    /// The cache policy, the launcher's choice by the call's size. Nonzero (streaming): inputs
    /// read without allocating in L1 (`vector::Once`), outputs stored evicted first
    /// (`vector::Evicted`). Zero (cached): inputs read as cached read-only data
    /// (`vector::Reused` — read with `.L1::no_allocate`, a 25 MB call's input came from DRAM on
    /// every call: ncu, H200, docs/perf/activation.md v3), outputs stored as usual.
    pub streams: u32,
}

/// Which activation a kernel applies to the gate: a type parameter, so each compiles to its own
/// code.
pub trait Activation: 'static {
    fn apply(x: f32) -> f32;
}

/// SiLU (swish): `x · σ(x)`.
pub struct Silu;
/// Exact GELU: `½ x (1 + erf(x / √2))`.
pub struct Gelu;
/// GELU's tanh approximation.
pub struct GeluTanh;

impl Activation for Silu {
    #[inline(always)]
    fn apply(x: f32) -> f32 {
        x * sigmoid(x)
    }
}

impl Activation for Gelu {
    #[inline(always)]
    fn apply(x: f32) -> f32 {
        let half = 0.5 * x;
        mul_add(half, erf(x * core::f32::consts::FRAC_1_SQRT_2), half)
    }
}

impl Activation for GeluTanh {
    /// `½ (1 + tanh(u)) = σ(2u) = 1 / (1 + 2^(−2 log2(e) u))`, `u = √(2/π) (x + 0.044715 x³)`: the
    /// three constant factors of the exponent folded into one (Rust does not fold `a · (b · x)`),
    /// two multiplies an element fewer.
    #[inline(always)]
    fn apply(x: f32) -> f32 {
        const SQRT_2_OVER_PI: f32 = 0.797_884_6;
        const EXPONENT: f32 = -2.0 * core::f32::consts::LOG2_E * SQRT_2_OVER_PI;
        x * reciprocal(1.0 + exp2(EXPONENT * mul_add(0.044_715 * x * x, x, x)))
    }
}

/// One output element: `act(gate) · up`, rounded once to the storage type.
#[inline(always)]
pub fn act_and_mul<A: Activation, T: Element>(gate: T, up: T) -> T {
    T::from_f32(A::apply(gate.to_f32()) * up.to_f32())
}

/// One row on the host (the CPU backend's inner loop).
///
/// # Safety
/// `params` must describe valid memory as the launcher validates it: every row in bounds, the
/// output disjoint from the input.
pub unsafe fn act_and_mul_row<A: Activation, T: Element>(p: &ActivationParams, row: u64) {
    let input = (p.input as *const T).wrapping_add((row * p.input_row_stride) as usize);
    let output = (p.output as *mut T).wrapping_add((row * p.output_row_stride) as usize);
    let width = p.width as usize;
    for i in 0..width {
        unsafe { output.add(i).write(act_and_mul::<A, T>(input.add(i).read(), input.add(width + i).read())) };
    }
}

#[cfg(target_arch = "nvptx64")]
pub use device_kernels::act_and_mul_rows;

#[cfg(target_arch = "nvptx64")]
mod device_kernels {
    use super::*;
    use crate::device::chain_after_prior_grids;
    use crate::vector::{Evicted, Kept, Load, Once, Packed, Reused, Store};

    /// Rows each thread works on per step: their loads are issued together. Two, not four: with
    /// four ptxas (holding 32 registers) scheduled row 0's loads, math and store before rows
    /// 1–3's loads, two memory round trips a step; two rows' loads it issues together. H200,
    /// Rust bench, bf16, 4 → 2 (launch unchanged: 4 rows a thread, now two steps): silu_and_mul
    /// 1024 × 4096 4.10 → 3.76 µs, gelu_and_mul 1024 × 4096 7.24 → 5.37, silu 128 × 14336 2.77 →
    /// 2.52, 1 × 4096 1.02 → 0.93; 128 × 4096 (a row a thread) 1.57 → 1.67, the one loss
    /// (docs/perf/activation.md v4).
    const ROWS_PER_STEP: u64 = 2;

    /// The device kernel. Thread `x` of the grid's x dimension owns output vector `x` (`VEC`
    /// elements) of every row; the grid's y dimension strides over rows, `ROWS_PER_STEP` rows a
    /// step (all loads of a step before any math). Launcher's guarantees: `width`, row strides
    /// and pointers are multiples of `VEC` elements; `gridDim.x · blockDim.x ≥ width / VEC`.
    /// The cache policy (`p.streams`) picks one of two copies of the loop: with a branch per
    /// access inside one loop ptxas took 40 registers, not 32 — 12 blocks of 128 threads a
    /// multiprocessor instead of 16, too few for the next call's blocks to wait beside these
    /// (programmatic dependent launch) — and silu_and_mul 1024 × 4096 ran 5.28 µs against 4.08
    /// for the same policy without the branch (H200, docs/perf/activation.md v3).
    #[inline(always)]
    pub unsafe fn act_and_mul_rows<A: Activation, T: Element, const VEC: usize>(p: &ActivationParams) {
        chain_after_prior_grids();
        match p.streams {
            0 => unsafe { rows_with::<A, T, Reused, Kept, VEC>(p) },
            _ => unsafe { rows_with::<A, T, Once, Evicted, VEC>(p) },
        }
    }

    #[inline(always)]
    unsafe fn rows_with<A: Activation, T: Element, L: Load, S: Store, const VEC: usize>(p: &ActivationParams) {
        let vectors = (p.width as usize / VEC) as u32;
        let column = unsafe {
            core::arch::nvptx::_block_idx_x() as u32 * core::arch::nvptx::_block_dim_x() as u32
                + core::arch::nvptx::_thread_idx_x() as u32
        };
        if column >= vectors {
            return;
        }
        let (first_row, row_step) =
            unsafe { (core::arch::nvptx::_block_idx_y() as u64, core::arch::nvptx::_grid_dim_y() as u64) };
        let at = column as usize * VEC;
        // Pointers advance by a step's distance (a multiply per row would cost three 64-bit
        // integer instructions a pointer: a quarter of the instructions of a step, in SASS).
        let (input_gap, output_gap) = (row_step * p.input_row_stride, row_step * p.output_row_stride);
        let mut input = (p.input as *const T).wrapping_add((first_row * p.input_row_stride) as usize + at);
        let mut output = (p.output as *mut T).wrapping_add((first_row * p.output_row_stride) as usize + at);
        let mut row = first_row;
        while row < p.rows {
            let mut gate = [Packed::<T, VEC>::ZERO; ROWS_PER_STEP as usize];
            let mut up = gate;
            for k in 0..ROWS_PER_STEP as usize {
                if row + k as u64 * row_step < p.rows {
                    let input = input.wrapping_add(k * input_gap as usize);
                    gate[k] = unsafe { Packed::load::<L>(input) };
                    up[k] = unsafe { Packed::load::<L>(input.add(p.width as usize)) };
                }
            }
            for k in 0..ROWS_PER_STEP as usize {
                if row + k as u64 * row_step < p.rows {
                    let mut y = [0.0f32; VEC];
                    for (i, y) in y.iter_mut().enumerate() {
                        *y = A::apply(gate[k].get_f32(i)) * up[k].get_f32(i);
                    }
                    let output = output.wrapping_add(k * output_gap as usize);
                    unsafe { Packed::<T, VEC>::from_f32(y).store::<S>(output) };
                }
            }
            row += ROWS_PER_STEP * row_step;
            input = input.wrapping_add(ROWS_PER_STEP as usize * input_gap as usize);
            output = output.wrapping_add(ROWS_PER_STEP as usize * output_gap as usize);
        }
    }
}
