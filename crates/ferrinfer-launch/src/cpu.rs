//! The CPU backend: the kernels' own per-row numerics (`ferrinfer_kernels::norm::rmsnorm_row`)
//! over host memory, rows split across threads.

use std::ops::Range;

use ferrinfer_kernels::element::{Bf16, DType, Element, F16};
use ferrinfer_kernels::norm::{NormParams, rmsnorm_row};

/// Below this many elements per thread, spawning costs more than it saves.
const ELEMENTS_PER_THREAD: u64 = 1 << 16;

/// Runs `f` over `T`, the kernels' element type for `dtype`.
macro_rules! with_element_type {
    ($dtype:expr, $t:ident => $body:expr) => {
        match $dtype {
            DType::F16 => {
                type $t = F16;
                $body
            }
            DType::Bf16 => {
                type $t = Bf16;
                $body
            }
            DType::F32 => {
                type $t = f32;
                $body
            }
        }
    };
}

/// rmsnorm over validated host pointers (see `crate::norm`).
pub(crate) fn rmsnorm(dtype: DType, params: &NormParams) {
    with_element_type!(dtype, T => for_row_chunks(params.rows, params.hidden as u64, |rows| {
        for row in rows {
            unsafe { rmsnorm_one_row::<T>(params, row) }
        }
    }))
}

unsafe fn rmsnorm_one_row<T: Element>(p: &NormParams, row: u64) {
    let input = (p.input as *const T).wrapping_add((row * p.input_row_stride) as usize);
    let output = (p.output as *mut T).wrapping_add((row * p.output_row_stride) as usize);
    unsafe { rmsnorm_row(input, p.weight as *const T, output, p.hidden as usize, p.eps) }
}

/// Splits `0..rows` into one contiguous chunk per thread (as many threads as the machine has and
/// the work deserves) and waits for all of them.
fn for_row_chunks(rows: u64, row_len: u64, f: impl Fn(Range<u64>) + Sync) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let threads = (rows * row_len / ELEMENTS_PER_THREAD).clamp(1, cores.min(rows));
    if threads == 1 {
        return f(0..rows);
    }
    let chunk = rows.div_ceil(threads);
    std::thread::scope(|scope| {
        for start in (0..rows).step_by(chunk as usize) {
            let f = &f;
            scope.spawn(move || f(start..(start + chunk).min(rows)));
        }
    });
}
