//! The sampling ops (`sampling_from_probs`, `top_k_`/`top_p_`/`min_p_sampling_from_probs`,
//! `top_k_top_p_sampling_from_…`): their parameters, each row's thresholds, seed and offset, and
//! the CPU's row — the device's keys, masses and search, so the same token.

use super::filter::{FILTER_HEADER_BYTES, Filter, FilterParams, HostRow, Keep, row_top_p};
use super::random_bits::{draw_random_bits, row_random_bits};
use super::search::share_of;
use crate::element::Element;

/// Arguments of the sampling kernels (`sampling_from_probs`, `top_k_sampling_from_probs`,
/// `top_p_sampling_from_probs`, `min_p_sampling_from_probs`, `top_k_top_p_sampling_from_…`),
/// passed by value: a filter's, with `filter.output` the `[rows]` i32 tokens
/// (`output_row_stride` 1; `threshold(s)` top-k's, top-p's or min-p's), the random stream's key
/// and position — `seed` and `offset`, or where `seeds` (`offsets`) is not 0 the address of
/// 64-bit values read on the device: one a row where `seeds_per_row` (`offsets_per_row`) is 1,
/// else one for every row — and `top_k_top_p_…`'s second threshold, its `top_p` (as `threshold`
/// and `thresholds`: one f32's bits, or where `top_ps` is not 0 the address of one a row).
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct SampleParams {
    pub filter: FilterParams,
    pub seed: u64,
    pub offset: u64,
    pub seeds: u64,
    pub offsets: u64,
    pub seeds_per_row: u32,
    pub offsets_per_row: u32,
    pub top_ps: u64,
    pub top_p: u32,
    pub _reserved: u32,
}

/// Row `row`'s second threshold: `top_k_top_p_…`'s `top_p`.
///
/// # Safety
/// `p.top_ps`, when not 0, must hold `p.filter.rows` f32.
#[inline(always)]
pub unsafe fn row_second_top_p(p: &SampleParams, row: u64) -> f32 {
    let second = FilterParams { thresholds: p.top_ps, threshold: p.top_p, ..p.filter };
    unsafe { row_top_p(&second, row) }
}

/// Row `row`'s seed and offset.
///
/// # Safety
/// `p.seeds` (`p.offsets`), when not 0, must hold `p.filter.rows` 64-bit values where
/// `seeds_per_row` (`offsets_per_row`) is 1, else one.
#[inline(always)]
pub unsafe fn row_seed_and_offset(p: &SampleParams, row: u64) -> (u64, u64) {
    let read = |values: u64, per_row: u32, value: u64| {
        if values == 0 {
            return value;
        }
        let at = (values as *const f32).wrapping_add(2 * (row * per_row as u64) as usize);
        let words = unsafe { crate::vector::Packed::<f32, 2>::load::<crate::vector::Reused>(at) };
        words.get(0).to_bits() as u64 | (words.get(1).to_bits() as u64) << 32
    };
    (read(p.seeds, p.seeds_per_row, p.seed), read(p.offsets, p.offsets_per_row, p.offset))
}

/// [`row_random_bits`] of row `row` under its seed and offset.
///
/// # Safety
/// As [`row_seed_and_offset`].
#[inline(always)]
pub unsafe fn random_bits_of_row(p: &SampleParams, row: u64) -> u64 {
    let (seed, offset) = unsafe { row_seed_and_offset(p, row) };
    row_random_bits(seed, row, offset)
}

/// Top-p's rank: the mass the entries strictly above a kept entry must fall short of, for a row
/// of mass `mass` — `⌈top_p · mass⌉`, at least 1 (`top_p ≤ 0` or NaN: the largest entries
/// only), or `u64::MAX` for `top_p ≥ 1` (every entry; masses stay below 2^63). The filters'
/// search ([`PivotSearch::top_p`](super::PivotSearch::top_p)) keeps the same entries.
#[inline(always)]
pub fn top_p_rank(top_p: f32, mass: u64) -> u64 {
    if top_p >= 1.0 { u64::MAX } else { share_of(mass, top_p).max(1) }
}

/// The lowest f32 bits min-p keeps in a row whose largest entry is `max`: those of its floor
/// `min_p · max` (FlashInfer's `p ≥ max · min_p`, the product in f32), 0 (every entry) for a
/// floor ≤ 0 or NaN. Among entries with mass (positive and finite) bits order as values do, so
/// an entry's bits reaching these is [`Keep::min_p`]'s test.
#[inline(always)]
pub fn min_p_lowest_bits(min_p: f32, max: f32) -> u32 {
    let floor = min_p * max;
    if floor > 0.0 { floor.to_bits() } else { 0 }
}

/// One row of a sampling op on the host (the CPU backend): the same keys, masses and search as
/// the device, then the first entry at which the kept masses summed in index order pass
/// [`mass_target`](super::mass_target) — integers throughout, so the GPU draws the same token. Top-p (alone, or
/// after top-k) draws by [`top_p_draw`] instead. `logits`: the row holds logits, weighed as
/// [`EntryWeight::Softmax`](super::EntryWeight::Softmax). A row without mass to draw from (zeros, negatives, NaN; or a filter
/// keeping none of its mass) gives 0, as FlashInfer's.
///
/// # Safety
/// As [`filter_row`](super::filter_row), with `p.filter.output` a `[rows]` i32 buffer and `p.top_ps` as
/// [`row_second_top_p`] needs.
pub unsafe fn sample_row<T: Element>(p: &SampleParams, row: u64, filter: Filter, logits: bool) {
    let f = &p.filter;
    let entries = unsafe { HostRow::<T>::new(f, row, logits) };
    let (seed, offset) = unsafe { row_seed_and_offset(p, row) };
    let bits_of_draw = |draw| draw_random_bits(seed, row, offset, draw);
    let token = match filter {
        Filter::TopP => top_p_draw(&entries, Keep::EVERYTHING, unsafe { row_top_p(f, row) }, bits_of_draw),
        Filter::TopKTopP => {
            let top_k = unsafe { entries.keep(f, row, Filter::TopK) };
            top_p_draw(&entries, top_k, unsafe { row_second_top_p(p, row) }, bits_of_draw)
        }
        _ => {
            let keep = unsafe { entries.keep(f, row, filter) };
            entries.draw(|i| entries.mass(keep, i), bits_of_draw(0))
        }
    };
    unsafe { (f.output as *mut i32).add(row as usize).write(token.unwrap_or(0) as i32) };
}

/// Top-p's token by rejection rounds (FlashInfer's scheme, made exact), among the entries
/// `kept` keeps (every one, or top-k's): draw among those above the last rejected token (at
/// first every kept one) in proportion to their masses; accept the token where the mass of the
/// entries above it falls short of [`top_p_rank`] of the kept mass — then it is one top-p keeps,
/// and every kept entry was as likely as its mass says; else none at or below it is kept, so the
/// next round draws (with the next [`draw_random_bits`]) from those above it, whose mass that
/// check just summed. A round is a read of the row; each removes at least the token drawn, and
/// in expectation half the mass left outside the kept set. Among entries with mass, keys order
/// as values (and their bits, which the device's unstaged kernel compares) do.
fn top_p_draw<T: Element>(
    entries: &HostRow<T>,
    kept: Keep,
    top_p: f32,
    bits_of_draw: impl Fn(u32) -> u64,
) -> Option<usize> {
    let vocab = entries.vocab as usize;
    let mass_of = |keep: Keep| move |i: usize| entries.mass(keep, i);
    let total_of = |keep: Keep| (0..vocab).map(mass_of(keep)).sum::<u64>();
    let (mut keep, mut total, mut draw) = (kept, total_of(kept), 0u32);
    let rank = top_p_rank(top_p, total);
    loop {
        let token = entries.draw_from(mass_of(keep), total, bits_of_draw(draw))?;
        if rank == u64::MAX {
            return Some(token);
        }
        // The check's sum is the next round's total.
        let above = Keep::from_pivot(entries.key(token) + 1);
        let above_total = total_of(above);
        if above_total < rank {
            return Some(token);
        }
        (keep, total, draw) = (above, above_total, draw + 1);
    }
}

/// Dynamic shared memory of a sampling block before its staged slice: the filters' header, then
/// the kept mass of each thread's chunk of the slice (one u64 a thread, up to
/// [`crate::HISTOGRAM_BINS`] threads).
pub const SAMPLE_HEADER_BYTES: u32 = FILTER_HEADER_BYTES + crate::HISTOGRAM_BINS * 8;
