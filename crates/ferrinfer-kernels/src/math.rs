//! Scalar math that `core` lacks on a `no_std` target. The host versions are exact and portable
//! (the CPU backend's arithmetic); the device versions use the GPU's instructions, and tests say
//! how far the two may differ.

const TWO_POW_MINUS_100: f32 = 7.888_609e-31;

/// `a · b + c`: one fused multiply-add (`fma.rn.f32`) on the GPU — Rust never contracts `a * b + c`
/// by itself — and an unfused multiply then add on the host.
#[inline(always)]
pub fn mul_add(a: f32, b: f32, c: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    return core::intrinsics::fmaf32(a, b, c);
    #[cfg(not(target_arch = "nvptx64"))]
    return a * b + c;
}

/// 1/√v for v ≥ 0. On the GPU `rsqrt.approx.ftz.f32` (one MUFU op, relative error < 2^-22.9, as
/// FlashInfer's `rsqrtf`; a subnormal `v` counts as 0); on the host the portable [`rsqrt_exact`].
#[inline(always)]
pub fn rsqrt(v: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let r: f32;
        unsafe {
            core::arch::asm!("rsqrt.approx.ftz.f32 {r}, {v};", r = out(reg32) r, v = in(reg32) v, options(pure, nomem, nostack))
        };
        r
    }
    #[cfg(not(target_arch = "nvptx64"))]
    rsqrt_exact(v)
}

/// 1/√v for v ≥ 0, within about 2 ulp: a bit-level first guess refined by three Newton steps.
/// `core` has no `sqrt` without `std`; this keeps the CPU backend free of libm.
#[inline(always)]
pub fn rsqrt_exact(v: f32) -> f32 {
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
