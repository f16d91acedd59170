//! The search for a row's *pivot*: the largest key ([`order_key`](super::order_key)) at or above which the row holds
//! a target weight, found a digit of the keys a round from the top by summing the candidates'
//! weights by digit ([`PivotSearch`]). Weights are integers — 1 an entry for top-k, exact
//! fixed-point masses for top-p — so the pivot never depends on the order they are added in: the
//! device's blocks and the CPU find the same one.

use super::keys::key_bits;
use crate::element::Element;

/// Bits of a digit of the filters' search: 256 weights a round, summed in a shared-memory
/// histogram — 4 rounds for f32 keys, 2 for 16-bit ones, the later ones over few candidates.
pub const DIGIT_BITS: u32 = 8;

/// The search for a row's pivot, [`DIGIT_BITS`] of the keys a round from the top: `prefix` holds the
/// digits found (`known` their bits), and `rank` is how much weight of the entries that share
/// them the pivot must still leave at or above it. A round sums the candidates' weights by their
/// next digit ([`PivotSearch::digit`]); [`PivotSearch::choose`] takes the totals (every block's,
/// in `1 << DIGIT_BITS` digits). With unit weights it ends early when the chosen digit's candidates are
/// exactly those still wanted: the pivot is then the digit's lowest key. (Not with masses: an
/// entry of mass 0 below the others would be kept.) Top-p's target is its `share` of the row's
/// mass, which the first round's totals give.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PivotSearch {
    pub(super) prefix: u32,
    pub(super) known: u32,
    pub(super) shift: u32,
    pub(super) rank: u64,
    share: f32,
    unit_weights: bool,
    pub(super) done: bool,
}

impl PivotSearch {
    const DIGIT_MASK: u32 = (1 << DIGIT_BITS) - 1;

    /// The search for the `top_k`-th largest of `vocab` keys of `T` (done at once, pivot 0 —
    /// every key — for 0 or `≥ vocab`).
    #[inline(always)]
    pub fn top_k<T: Element>(top_k: u32, vocab: u32) -> Self {
        let done = top_k == 0 || top_k >= vocab;
        let shift = key_bits::<T>() - DIGIT_BITS;
        PivotSearch { prefix: 0, known: 0, shift, rank: top_k as u64, share: 1.0, unit_weights: true, done }
    }

    /// The search for the largest keys of `T` holding `top_p` of a row's mass (done at once,
    /// every key, for `top_p ≥ 1`); its target is set by the first round
    /// ([`PivotSearch::set_row_weight`]).
    #[inline(always)]
    pub fn top_p<T: Element>(top_p: f32) -> Self {
        let shift = key_bits::<T>() - DIGIT_BITS;
        PivotSearch { prefix: 0, known: 0, shift, rank: 0, share: top_p, unit_weights: false, done: top_p >= 1.0 }
    }

    #[inline(always)]
    pub fn done(&self) -> bool {
        self.done
    }

    /// The pivot's key once [`PivotSearch::done`].
    #[inline(always)]
    pub fn pivot(&self) -> u32 {
        self.prefix
    }

    /// Whether `key` has every digit found so far: a candidate of this round.
    #[inline(always)]
    pub fn is_candidate(&self, key: u32) -> bool {
        key & self.known == self.prefix
    }

    /// The digit this round sums `key` in, or `1 << DIGIT_BITS` when `key` is no longer a candidate.
    #[inline(always)]
    pub fn digit(&self, key: u32) -> u32 {
        if self.is_candidate(key) { (key >> self.shift) & Self::DIGIT_MASK } else { 1 << DIGIT_BITS }
    }

    /// Takes a round's totals (candidates' weight per digit, over the whole row): the largest
    /// digit at or above which `rank` of it lies.
    #[inline(always)]
    pub fn choose(&mut self, totals: &[u64]) {
        self.set_row_weight(totals.iter().sum());
        let mut above = 0u64;
        for digit in (0..totals.len()).rev() {
            if above + totals[digit] >= self.rank {
                self.take(digit as u32, above, totals[digit]);
                return;
            }
            above += totals[digit];
        }
        self.give_up();
    }

    /// In top-p's first round (nothing found yet), the target from the row's whole weight
    /// `mass`: `⌈top_p · mass⌉`, at least 1 (`top_p ≤ 0` or NaN: the largest entries only).
    /// Nothing for top-k, whose target is its `top_k`.
    #[inline(always)]
    pub fn set_row_weight(&mut self, mass: u64) {
        if !self.unit_weights && self.first_round() {
            self.rank = share_of(mass, self.share).max(1);
        }
    }

    /// Whether no digit is found yet.
    #[inline(always)]
    fn first_round(&self) -> bool {
        self.known == 0
    }

    /// The search to its end over `count` entries of keys `key` and weights `weight`, one pass
    /// a round (the host's): the pivot and the rounds it took.
    pub fn run_on_host(
        mut self,
        count: usize,
        key: impl Fn(usize) -> u32,
        weight: impl Fn(usize) -> u64,
    ) -> (u32, u32) {
        let mut rounds = 0;
        while !self.done() {
            let mut totals = [0u64; 1 << DIGIT_BITS];
            for i in 0..count {
                if let Some(total) = totals.get_mut(self.digit(key(i)) as usize) {
                    *total = total.wrapping_add(weight(i));
                }
            }
            self.choose(&totals);
            rounds += 1;
        }
        (self.pivot(), rounds)
    }

    /// The weight the pivot must still leave at or above it.
    #[inline(always)]
    pub fn rank(&self) -> u64 {
        self.rank
    }

    /// The round's choice: `digit`, with `above` of the candidates' weight in the digits above
    /// it and `total` in it.
    #[inline(always)]
    pub fn take(&mut self, digit: u32, above: u64, total: u64) {
        self.prefix |= digit << self.shift;
        self.known |= Self::DIGIT_MASK << self.shift;
        self.rank -= above;
        self.done = (self.unit_weights && self.rank == total) || self.shift == 0;
        self.shift = self.shift.saturating_sub(DIGIT_BITS);
    }

    /// Less weight than `rank` in a round: counts that disagree with the row (never, when every
    /// block counts the same row), or a row without mass; keeps what was found rather than loop.
    #[inline(always)]
    pub fn give_up(&mut self) {
        self.done = true;
    }
}

/// `⌈mass · share⌉`, exactly, for `share` in [0, 1) (0 for less or NaN): the share's f32
/// mantissa times the mass in 128 bits, shifted by its exponent, rounded up.
#[inline(always)]
pub fn share_of(mass: u64, share: f32) -> u64 {
    if share.is_nan() || share <= 0.0 {
        return 0;
    }
    let bits = share.to_bits();
    let exponent = (bits >> 23) as i32;
    let mantissa = ((bits & 0x7f_ffff) | if exponent > 0 { 0x80_0000 } else { 0 }) as u128;
    // share = mantissa · 2^−drop, drop > 23 below 1.
    let drop = (150 - exponent.max(1)) as u32;
    let product = mass as u128 * mantissa;
    let whole = product.checked_shr(drop).unwrap_or(0);
    let below = product.wrapping_sub(whole.checked_shl(drop).unwrap_or(0));
    (whole + (below != 0) as u128).min(mass as u128) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::keys::order_key;
    use crate::sampling::mass::MassScale;

    /// Pseudo-random f32 values with many ties.
    fn tied_values<const N: usize>() -> [f32; N] {
        let mut state = 12345u32;
        core::array::from_fn(|_| {
            state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
            (state >> 20) as f32 - 2048.0 + if state & 1 == 0 { 0.0 } else { 0.5 }
        })
    }

    /// The search against a sort, over values with ties, every k.
    #[test]
    fn pivot_search_finds_the_kth_largest_key() {
        let keys = tied_values::<200>().map(order_key);
        let mut sorted = keys;
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        for k in 1..keys.len() as u32 {
            let search = PivotSearch::top_k::<f32>(k, keys.len() as u32);
            let (pivot, rounds) = search.run_on_host(keys.len(), |i| keys[i], |_| 1);
            let kth = sorted[k as usize - 1];
            let kept = keys.iter().filter(|&&key| key >= pivot).count();
            assert_eq!(kept, keys.iter().filter(|&&key| key >= kth).count(), "k = {k}");
            assert!(rounds <= 4, "k = {k}: {rounds} rounds");
        }
        let top_k = PivotSearch::top_k::<f32>;
        assert!(top_k(200, 200).done() && top_k(0, 200).done());
        assert_eq!(top_k(500, 200).pivot(), 0, "every key kept");
    }

    /// Top-p's pivot against its definition: an entry is kept exactly when the mass of the
    /// entries above it is short of `⌈top_p · mass⌉`, for every share, ties included.
    #[test]
    fn top_p_keeps_an_entry_when_the_mass_above_it_is_short_of_the_share() {
        let values = tied_values::<300>().map(|x| (x / 512.0).abs());
        let keys = values.map(order_key);
        let max = values.iter().copied().fold(0.0f32, f32::max);
        let scale = MassScale::new(max, values.len() as u32);
        let masses = values.map(|x| scale.mass(x));
        let total: u64 = masses.iter().sum();
        for top_p in [1e-6f32, 0.1, 0.25, 0.5, 0.77, 0.9, 0.999, 0.0, f32::NAN] {
            let search = PivotSearch::top_p::<f32>(top_p);
            let (pivot, rounds) = search.run_on_host(keys.len(), |i| keys[i], |i| masses[i]);
            assert_eq!(rounds, 4, "a byte a round, to the last");
            let target = share_of(total, top_p).max(1);
            for (i, &key) in keys.iter().enumerate() {
                let above: u64 = keys.iter().zip(&masses).filter(|&(&other, _)| other > key).map(|(_, m)| m).sum();
                assert_eq!(key >= pivot, above < target, "top_p {top_p}, entry {i}");
            }
        }
        assert!(PivotSearch::top_p::<f32>(1.0).done(), "1 keeps every entry");
    }

    #[test]
    fn shares_round_up_exactly() {
        assert_eq!(share_of(10, 0.5), 5);
        assert_eq!(share_of(11, 0.5), 6);
        assert_eq!(share_of(3, 0.1), 1, "0.3000000045 rounds up");
        assert_eq!(share_of(1 << 62, 0.25), 1 << 60);
        assert_eq!(
            share_of(u64::MAX >> 1, f32::from_bits(0x3f7f_ffff)),
            ((u64::MAX >> 1) as u128 * 0xff_ffff).div_ceil(1 << 24) as u64
        );
        assert_eq!(share_of(1000, f32::from_bits(1)), 1, "the least subnormal");
        for share in [0.0, -0.5, f32::NAN] {
            assert_eq!(share_of(1000, share), 0);
        }
    }
}
