//! The CPU backend: the kernels' own per-row numerics (`ferrinfer_kernels::norm::norm_row`)
//! over host memory, rows split across threads.

use std::ops::Range;

use ferrinfer_jit::norm::NormOp;
use ferrinfer_kernels::element::{Bf16, DType, F16};
use ferrinfer_kernels::norm::{FusedAddRms, Layer, NormParams, Rms, norm_row};

/// Below this many elements per thread, spawning costs more than it saves.
const ELEMENTS_PER_THREAD: u64 = 1 << 16;

/// Runs `$body` with `$t` naming the kernels' element type for `$dtype`.
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

/// Any norm over validated host pointers (see `crate::norm`).
pub(crate) fn norm(op: NormOp, dtype: DType, weight: DType, params: &NormParams) {
    with_element_type!(dtype, T => with_element_type!(weight, W => match op {
        NormOp::RmsNorm => rows::<Rms, T, W>(params),
        NormOp::FusedAddRmsNorm => rows::<FusedAddRms, T, W>(params),
        NormOp::LayerNorm => rows::<Layer, T, W>(params),
    }))
}

fn rows<
    K: ferrinfer_kernels::norm::NormKind,
    T: ferrinfer_kernels::element::Element,
    W: ferrinfer_kernels::element::Element,
>(
    params: &NormParams,
) {
    for_row_chunks(params.rows, params.hidden as u64, |rows| {
        for row in rows {
            // SAFETY: the launcher validated every pointer, stride and overlap in `params`.
            unsafe { norm_row::<K, T, W>(params, row) }
        }
    });
}

/// The machine's cores, asked once: on Linux `available_parallelism` reads cgroup files, a cost
/// a one-row call (T = 1 decode) would otherwise pay every time.
fn cores() -> u64 {
    static CORES: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u64))
}

/// Splits `0..rows` into one contiguous chunk per thread (as many threads as the machine has and
/// the work deserves) and waits for all of them.
fn for_row_chunks(rows: u64, row_len: u64, f: impl Fn(Range<u64>) + Sync) {
    let threads = (rows * row_len / ELEMENTS_PER_THREAD).clamp(1, cores().min(rows));
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
