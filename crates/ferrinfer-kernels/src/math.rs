//! Scalar math that `core` lacks on a `no_std` target, written once for host and device so both
//! compute bit-identical results from identical inputs.

const TWO_POW_MINUS_100: f32 = 7.888_609e-31;

/// 1/√v for v ≥ 0, within about 2 ulp: a bit-level first guess refined by three Newton steps.
/// `core` has no `sqrt` without `std`; this keeps the device free of libdevice and the host's
/// CPU backend on exactly the same arithmetic.
#[inline(always)]
pub fn rsqrt(v: f32) -> f32 {
    if v == 0.0 {
        return f32::INFINITY;
    }
    if v == f32::INFINITY {
        return 0.0;
    }
    // Tiny or subnormal v: the bit-level guess and `0.5 · v` need a comfortably normal input, so
    // scale v by 2^64 and the result back by 2^32 (no recursion: device code must not call).
    let tiny = v < TWO_POW_MINUS_100;
    let (v, unscale) = if tiny { (v * 18_446_744_073_709_551_616.0, 4_294_967_296.0) } else { (v, 1.0) };
    let mut y = f32::from_bits(0x5f37_5a86u32.wrapping_sub(v.to_bits() >> 1));
    let half_v = 0.5 * v;
    y *= 1.5 - half_v * y * y;
    y *= 1.5 - half_v * y * y;
    // Last step as a small correction added to y: fewer roundings land on the result.
    (y + y * (0.5 - half_v * y * y)) * unscale
}
