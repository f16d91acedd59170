//! The CPU backend's shared part: rows of work split across the machine's cores. Each family's
//! CPU path (in its own file) runs the kernels crate's host numerics over those rows.

use std::ops::Range;

/// Below this many elements per thread, spawning costs more than it saves.
const ELEMENTS_PER_THREAD: u64 = 1 << 16;

/// The machine's cores, asked once: on Linux `available_parallelism` reads cgroup files, a cost
/// a one-row call (T = 1 decode) would otherwise pay every time.
fn cores() -> u64 {
    static CORES: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u64))
}

/// Splits `0..rows` (rows of `row_len` elements) into one contiguous chunk per thread (as many
/// threads as the machine has and the work deserves) and waits for all of them.
pub(crate) fn for_rows(rows: u64, row_len: u64, f: impl Fn(Range<u64>) + Sync) {
    let threads = (rows.saturating_mul(row_len) / ELEMENTS_PER_THREAD).clamp(1, cores().min(rows.max(1)));
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
