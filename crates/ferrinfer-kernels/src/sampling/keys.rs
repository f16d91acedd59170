//! The order the filters rank a row's entries by: an entry's *key*, an unsigned integer whose order
//! is IEEE 754's total order of the values (−NaN < −∞ < … < −0 < +0 < … < +∞ < +NaN), of one
//! element or of every element a 32-bit word packs at once.

use crate::element::Element;

/// Bits of `T`'s keys: its size.
#[inline(always)]
pub(super) const fn key_bits<T>() -> u32 {
    8 * core::mem::size_of::<T>() as u32
}

/// The rank key of `x`: unsigned order of keys is IEEE 754's total order of values (negative
/// values' bits inverted, positive ones' sign bit set), in the low `8 · size` bits.
#[inline(always)]
pub fn order_key<T: Element>(x: T) -> u32 {
    word_keys::<T>(x.to_bits()) & word_signs::<T>().1
}

/// The sign bits of the elements of `T` a 32-bit word packs (one f32, two 16-bit values).
#[inline(always)]
const fn word_signs<T>() -> (u32, u32) {
    if key_bits::<T>() == 32 { (0x8000_0000, u32::MAX) } else { (0x8000_8000, 0xffff) }
}

/// [`order_key`] of every element packed in `word`, at once: a negative element's bits are
/// inverted, a positive one's sign set (`word ^ (all-ones where negative | signs)`).
#[inline(always)]
pub fn word_keys<T>(word: u32) -> u32 {
    let (signs, ones) = word_signs::<T>();
    let negative = ((word & signs) >> (key_bits::<T>() - 1)).wrapping_mul(ones);
    word ^ (negative | signs)
}

/// The elements whose [`word_keys`] `keys` are.
#[inline(always)]
pub fn word_values<T>(keys: u32) -> u32 {
    let (signs, ones) = word_signs::<T>();
    let negative = ((!keys & signs) >> (key_bits::<T>() - 1)).wrapping_mul(ones);
    keys ^ (negative | signs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_keys_follow_the_total_order_of_each_type() {
        use crate::element::{Bf16, F16};
        let values = [f32::NEG_INFINITY, -3.5, -1e-30, -0.0, 0.0, 1e-30, 2.0, f32::INFINITY, f32::NAN];
        let keys = values.map(order_key::<f32>);
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:x?}");
        assert!(order_key(-f32::NAN) < keys[0], "−NaN below −∞");
        let halves = [f32::NEG_INFINITY, -2.0, -0.0, 0.0, 0.5, 65504.0, f32::INFINITY];
        assert!(halves.map(|v| order_key(Bf16::from_f32(v))).windows(2).all(|w| w[0] < w[1]));
        assert!(halves.map(|v| order_key(F16::from_f32(v))).windows(2).all(|w| w[0] < w[1]));
        assert!(order_key(F16::from_f32(f32::INFINITY)) <= 0xffff, "16-bit keys stay in 16 bits");
    }

    #[test]
    fn word_keys_are_the_keys_of_each_packed_element_and_invert() {
        use crate::element::Bf16;
        for (low, high) in [(1.5f32, -2.0f32), (-0.0, 0.0), (f32::NEG_INFINITY, 3.0e38), (-1e-3, -7.0)] {
            let (low, high) = (Bf16::from_f32(low), Bf16::from_f32(high));
            let word = low.to_bits() | (high.to_bits() << 16);
            let keys = word_keys::<Bf16>(word);
            assert_eq!((keys & 0xffff, keys >> 16), (order_key(low), order_key(high)));
            assert_eq!(word_values::<Bf16>(keys), word);
        }
        for x in [1.5f32, -2.0, -0.0, 0.0, f32::NAN, f32::NEG_INFINITY, 1e-40] {
            assert_eq!(word_values::<f32>(word_keys::<f32>(x.to_bits())), x.to_bits());
        }
    }
}
