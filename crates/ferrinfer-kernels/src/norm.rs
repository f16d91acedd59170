//! The norm family: rmsnorm (`y = x / √(mean(x²) + eps) · w` per row), accumulating in f32.
//!
//! One parameter struct for every norm kernel, shared with the host; the per-row math shared by
//! the device kernel and the host's CPU backend; and the device kernel, generic over element type
//! and vector width. Entry points (`extern "ptx-kernel"` instantiations) are generated per spec by
//! `ferrinfer-jit`.

use crate::element::Element;
use crate::math::rsqrt;

/// Arguments of every norm kernel, passed by value. Pointers are device (or, for the CPU backend,
/// host) addresses; strides and counts are in elements and 64-bit, so no offset can overflow.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct NormParams {
    pub input: u64,
    pub weight: u64,
    pub output: u64,
    pub rows: u64,
    pub input_row_stride: u64,
    pub output_row_stride: u64,
    pub hidden: u32,
    pub eps: f32,
}

/// 1/rms of a row from its sum of squares: 1/√(Σx²/hidden + eps).
#[inline(always)]
pub fn inverse_rms(sum_of_squares: f32, hidden: u32, eps: f32) -> f32 {
    rsqrt(sum_of_squares / hidden as f32 + eps)
}

/// One output element: x · (1/rms) · w, rounded once to the storage type.
#[inline(always)]
pub fn rmsnorm_element<T: Element>(x: T, inverse_rms: f32, weight: T) -> T {
    T::from_f32(x.to_f32() * inverse_rms * weight.to_f32())
}

/// rmsnorm of one row on the host (the CPU backend's inner loop).
///
/// # Safety
/// `input` and `output` must be valid for `hidden` elements, `weight` too; `output` may be
/// `input` itself (in place) but must not otherwise overlap `input` or `weight`.
pub unsafe fn rmsnorm_row<T: Element>(input: *const T, weight: *const T, output: *mut T, hidden: usize, eps: f32) {
    // Eight partial sums, like a vectorised device thread, so long rows lose less to rounding.
    let mut partial = [0.0f32; 8];
    for i in 0..hidden {
        let x = unsafe { input.add(i).read() }.to_f32();
        partial[i % 8] += x * x;
    }
    let inverse = inverse_rms(partial.iter().sum(), hidden as u32, eps);
    for i in 0..hidden {
        unsafe {
            let y = rmsnorm_element(input.add(i).read(), inverse, weight.add(i).read());
            output.add(i).write(y);
        }
    }
}

/// The rmsnorm kernel: a block per row (the grid strides over rows), each thread taking every
/// `blockDim`-th vector of the row. Pass one sums squares; pass two re-reads the row (from L1/L2)
/// and writes. Requirements (the launcher's): `blockDim.x` a multiple of 32, at most 1024;
/// `hidden`, both row strides and all three pointers multiples of `VEC` elements.
#[cfg(target_arch = "nvptx64")]
#[inline(always)]
pub unsafe fn rmsnorm_block<T: Element, const VEC: usize>(params: &NormParams) {
    use crate::device::{block_index, block_size, block_sum, grid_size, thread_index};
    use crate::vector::{load, store};

    let vectors = params.hidden as usize / VEC;
    let (first, step) = (thread_index() as usize, block_size() as usize);
    let weight = params.weight as *const T;
    let mut row = block_index() as u64;
    while row < params.rows {
        let input = (params.input as *const T).wrapping_add((row * params.input_row_stride) as usize);
        let output = (params.output as *mut T).wrapping_add((row * params.output_row_stride) as usize);
        let mut sum = 0.0f32;
        let mut v = first;
        while v < vectors {
            let x = unsafe { load::<T, VEC>(input.add(v * VEC)) };
            for i in 0..VEC {
                sum += x[i].to_f32() * x[i].to_f32();
            }
            v += step;
        }
        let inverse = inverse_rms(block_sum(sum), params.hidden, params.eps);
        let mut v = first;
        while v < vectors {
            let x = unsafe { load::<T, VEC>(input.add(v * VEC)) };
            let w = unsafe { load::<T, VEC>(weight.add(v * VEC)) };
            let mut y = x;
            for i in 0..VEC {
                y[i] = rmsnorm_element(x[i], inverse, w[i]);
            }
            unsafe { store::<T, VEC>(output.add(v * VEC), y) };
            v += step;
        }
        row += grid_size() as u64;
    }
}
