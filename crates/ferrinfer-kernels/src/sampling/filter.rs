//! The filters (`top_k_mask_logits`, `top_k_renorm_probs`, `top_p_renorm_probs`): a row's entries
//! are ranked by their keys (`keys.rs`), each entry has a *weight*, and the row's *pivot* is the
//! largest key at or above which the row holds a target weight (`search.rs`). Every entry whose
//! key is at least the pivot is kept (ties with it too: FlashInfer's `>= pivot`). Top-k weighs
//! each entry 1 and targets `top_k` (`top_k = 0` or `≥ vocab` keeps the whole row): the pivot is
//! the k-th largest. Top-p weighs each entry by its probability as an exact fixed-point integer
//! ([`MassScale`]) and targets `⌈top_p · the row's mass⌉`: an entry is kept when the mass of the
//! entries above it is short of the target — FlashInfer's rule, with `top_p` a share of the row's
//! own sum (probabilities that do not quite sum to 1 lose nothing). The mask writes −∞ in place of
//! the others; the renorms write the kept probabilities divided by their sum (a fixed tree on the
//! device) and 0 in place of the others.
//!
//! Here: the filters' parameters, what a filter keeps ([`Keep`]), a row as the host reads it
//! ([`HostRow`], the sampling ops' too) and the CPU's row ([`filter_row`]).

use super::keys::order_key;
use super::mass::{EntryWeight, MassScale};
use super::random_bits::mass_target;
use super::search::PivotSearch;
use super::softmax::HOST_CHUNK;
use crate::element::Element;

/// Arguments of the filter kernels (`top_k_mask_logits`, `top_k_renorm_probs`,
/// `top_p_renorm_probs`), passed by value. Strides and counts in elements; input and output of
/// one dtype.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct FilterParams {
    /// `[rows, vocab]`: logits (mask) or probabilities (renorms).
    pub input: u64,
    /// `[rows, vocab]`.
    pub output: u64,
    pub rows: u64,
    pub input_row_stride: u64,
    pub output_row_stride: u64,
    /// `[rows]`, one threshold a row — i32 `top_k` (≤ 0 keeps the row) or f32 `top_p`; 0:
    /// `threshold` for every row.
    pub thresholds: u64,
    pub vocab: u32,
    /// Every row's threshold unless `thresholds` is given: `top_k` (0 or `≥ vocab` keeps the
    /// row), or `top_p`'s f32 bits.
    pub threshold: u32,
    /// Blocks sharing a row (the launch's thread-block cluster, sm_90), each counting and writing
    /// a contiguous slice of it; 1 without a cluster.
    pub slices: u32,
    /// 1 when each block keeps its slice in shared memory (after the filters' header,
    /// [`FILTER_HEADER_BYTES`]) between the passes over it; 0: every pass reads global memory.
    pub staged: u32,
}

/// Row `row`'s threshold bits: its entry of `p.thresholds`, or `p.threshold`.
///
/// # Safety
/// `p.thresholds`, when not 0, must hold `p.rows` 32-bit values.
#[inline(always)]
unsafe fn row_threshold(p: &FilterParams, row: u64) -> u32 {
    if p.thresholds == 0 {
        return p.threshold;
    }
    let at = (p.thresholds as *const f32).wrapping_add(row as usize);
    unsafe { crate::vector::Packed::<f32, 1>::load::<crate::vector::Reused>(at) }.get(0).to_bits()
}

/// The `top_k` of row `row` (a row's ≤ 0 read as 0: the whole row).
///
/// # Safety
/// As [`row_threshold`]: `p.thresholds`, when not 0, holds `p.rows` i32.
#[inline(always)]
pub unsafe fn row_top_k(p: &FilterParams, row: u64) -> u32 {
    (unsafe { row_threshold(p, row) } as i32).max(0) as u32
}

/// The `top_p` of row `row`.
///
/// # Safety
/// As [`row_threshold`]: `p.thresholds`, when not 0, holds `p.rows` f32.
#[inline(always)]
pub unsafe fn row_top_p(p: &FilterParams, row: u64) -> f32 {
    f32::from_bits(unsafe { row_threshold(p, row) })
}

/// Which entries a filter keeps (and a sampling op draws among): the row's `top_k` largest, its
/// largest holding `top_p` of its mass, those at least `min_p` times its largest, every one, or
/// (`top_k_top_p_…`, FlashInfer's "top_k_first") the largest holding `top_p` of the mass of the
/// row's `top_k` largest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Filter {
    TopK,
    TopP,
    MinP,
    Everything,
    TopKTopP,
}

/// The entries a filter keeps, once found: those whose [`order_key`] is at least `pivot` (top-k's
/// or top-p's) and whose value is at least `floor` (min-p's `min_p · max`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Keep {
    pub pivot: u32,
    pub floor: f32,
}

impl Keep {
    /// Every entry.
    pub const EVERYTHING: Keep = Keep { pivot: 0, floor: f32::NEG_INFINITY };

    /// The entries at or above a search's pivot.
    #[inline(always)]
    pub fn from_pivot(pivot: u32) -> Self {
        Keep { pivot, floor: f32::NEG_INFINITY }
    }

    /// Min-p's: the entries at least `min_p` times the row's largest entry `max` (FlashInfer's
    /// `p ≥ max_p · min_p`, the product in f32).
    #[inline(always)]
    pub fn min_p(min_p: f32, max: f32) -> Self {
        Keep { pivot: 0, floor: min_p * max }
    }

    /// Whether the entry of key `key` and value `value` is kept (a NaN value by its key alone:
    /// top-k ranks NaN above +∞).
    #[inline(always)]
    // `!(value < floor)`: one unordered compare (`setp.geu`), NaN included.
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    pub fn keeps(&self, key: u32, value: f32) -> bool {
        key >= self.pivot && !(value < self.floor)
    }

    /// The entry's weight in a draw whose entries weigh `weight.of(value)`: its mass under
    /// `scale` where kept, else 0 — the weight taken only for a kept entry (a branch: logits'
    /// `exp2` is ~30 instructions, and a top-k keeps few entries).
    #[inline(always)]
    pub fn weighed_mass(&self, key: u32, value: f32, weight: EntryWeight, scale: &MassScale) -> u64 {
        if self.keeps(key, value) { scale.mass(weight.of(value)) } else { 0 }
    }
}

/// What a filter kernel writes for the entries it keeps and those it drops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FilterOutput {
    /// `top_k_mask_logits`: kept logits as they are, −∞ for the others.
    Mask,
    /// The renorms: kept probabilities divided by their sum, 0 for the others.
    Renorm,
}

/// A row's entries on the host, as the device reads them: values, keys, the largest value (or
/// [`EntryWeight::least`]), how a draw weighs an entry and the masses' scale.
pub(super) struct HostRow<T: Element> {
    input: *const T,
    pub(super) vocab: u32,
    max: f32,
    weight: EntryWeight,
    scale: MassScale,
}

impl<T: Element> HostRow<T> {
    /// Row `row` of `p.input`, probabilities or (`logits`) logits.
    ///
    /// # Safety
    /// As [`filter_row`].
    pub(super) unsafe fn new(p: &FilterParams, row: u64, logits: bool) -> Self {
        let input = (p.input as *const T).wrapping_add((row * p.input_row_stride) as usize);
        let value = |i: usize| unsafe { input.add(i).read() }.to_f32();
        let max = (0..p.vocab as usize).fold(EntryWeight::least(logits), |max, i| max.max(value(i)));
        let weight = EntryWeight::of_row(logits, max);
        HostRow { input, vocab: p.vocab, max, weight, scale: weight.scale(max, p.vocab) }
    }

    fn element(&self, i: usize) -> T {
        // SAFETY: `i < vocab`, in bounds by `new`'s contract.
        unsafe { self.input.add(i).read() }
    }

    fn value(&self, i: usize) -> f32 {
        self.element(i).to_f32()
    }

    pub(super) fn key(&self, i: usize) -> u32 {
        order_key(self.element(i))
    }

    /// Entry `i`'s weight in a draw among the entries `keep` keeps.
    pub(super) fn mass(&self, keep: Keep, i: usize) -> u64 {
        keep.weighed_mass(self.key(i), self.value(i), self.weight, &self.scale)
    }

    /// The first entry at which the masses `mass` summed in index order pass [`mass_target`] of
    /// random bits `bits` in their total (None for a total of 0).
    pub(super) fn draw(&self, mass: impl Fn(usize) -> u64, bits: u64) -> Option<usize> {
        let total = (0..self.vocab as usize).map(&mass).fold(0u64, u64::wrapping_add);
        self.draw_from(mass, total, bits)
    }

    /// [`HostRow::draw`] where the masses' total is known.
    pub(super) fn draw_from(&self, mass: impl Fn(usize) -> u64, total: u64, bits: u64) -> Option<usize> {
        let vocab = self.vocab as usize;
        if total == 0 {
            return None;
        }
        let target = mass_target(bits, total);
        let mut below = 0u64;
        (0..vocab).find(|&i| {
            below += mass(i);
            below > target
        })
    }

    /// What `filter` keeps of the row (its threshold from `p`): the same keys, weights and
    /// search as the device, so the same entries.
    ///
    /// # Safety
    /// As [`row_threshold`].
    pub(super) unsafe fn keep(&self, p: &FilterParams, row: u64, filter: Filter) -> Keep {
        let vocab = self.vocab as usize;
        match filter {
            Filter::TopK => {
                let search = PivotSearch::top_k::<T>(unsafe { row_top_k(p, row) }, self.vocab);
                Keep::from_pivot(search.run_on_host(vocab, |i| self.key(i), |_| 1).0)
            }
            Filter::TopP => {
                let search = PivotSearch::top_p::<T>(unsafe { row_top_p(p, row) });
                Keep::from_pivot(search.run_on_host(vocab, |i| self.key(i), |i| self.scale.mass(self.value(i))).0)
            }
            Filter::MinP => Keep::min_p(unsafe { row_top_p(p, row) }, self.max),
            Filter::Everything => Keep::EVERYTHING,
            Filter::TopKTopP => unsafe { self.keep(p, row, Filter::TopK) },
        }
    }
}

/// One row of a filter on the host (the CPU backend): the same keys, weights and search as the
/// device (so the same pivot); the renorm's sum by chunks of [`HOST_CHUNK`].
///
/// # Safety
/// `p` must describe valid memory as the launcher validates it: the row in bounds, input and
/// output of `T`, disjoint.
pub unsafe fn filter_row<T: Element>(p: &FilterParams, row: u64, filter: Filter, output: FilterOutput) {
    let entries = unsafe { HostRow::<T>::new(p, row, false) };
    let out = (p.output as *mut T).wrapping_add((row * p.output_row_stride) as usize);
    let value = |i: usize| entries.element(i);
    let vocab = p.vocab as usize;
    let keep = unsafe { entries.keep(p, row, filter) };
    let kept = |i: usize| keep.keeps(entries.key(i), entries.value(i));
    let scale = match output {
        FilterOutput::Mask => 1.0,
        FilterOutput::Renorm => {
            let chunk_sum = |start: usize| {
                (start..(start + HOST_CHUNK).min(vocab)).filter(|&i| kept(i)).map(|i| value(i).to_f32()).sum::<f32>()
            };
            1.0 / (0..vocab).step_by(HOST_CHUNK).map(chunk_sum).sum::<f32>()
        }
    };
    for i in 0..vocab {
        let x = value(i);
        let y = match (kept(i), output) {
            (true, FilterOutput::Mask) => x,
            (true, FilterOutput::Renorm) => T::from_f32(x.to_f32() * scale),
            (false, FilterOutput::Mask) => T::from_f32(f32::NEG_INFINITY),
            (false, FilterOutput::Renorm) => T::from_f32(0.0),
        };
        unsafe { out.add(i).write(y) };
    }
}

/// The warp-wide choice of a digit in shared memory: the 32 lanes' sums of their 8 bins, then the
/// search as the choosing lane leaves it (6 words).
const SEARCH_BROADCAST_BYTES: u32 = 32 * 8 + 32;

/// Dynamic shared memory of a filter block before its staged slice: the cluster exchange, the
/// cluster histogram and the choice's broadcast.
pub const FILTER_HEADER_BYTES: u32 =
    crate::CLUSTER_EXCHANGE_BYTES + crate::CLUSTER_HISTOGRAM_BYTES + SEARCH_BROADCAST_BYTES;
