//! Scalar math that `core` lacks on a `no_std` target. The host versions are exact and portable
//! (the CPU backend's arithmetic); the device versions use the GPU's instructions, and tests say
//! how far the two may differ.

const TWO_POW_MINUS_100: f32 = 7.888_609e-31;

/// One PTX instruction of one f32 operand and result (`approx!("ex2.approx.ftz.f32", x)`),
/// opaque to LLVM: the device side of the functions below (their host side is portable
/// arithmetic, which tests compare it with).
#[cfg(target_arch = "nvptx64")]
macro_rules! approx {
    ($instruction:literal, $x:expr) => {{
        let r: f32;
        unsafe {
            core::arch::asm!(concat!($instruction, " {r}, {x};"), r = out(reg32) r, x = in(reg32) $x, options(pure, nomem, nostack))
        };
        r
    }};
}

/// `a · b + c`: one fused multiply-add (`fma.rn.f32`) on the GPU — Rust never contracts `a * b + c`
/// by itself — and an unfused multiply then add on the host.
#[inline(always)]
pub fn mul_add(a: f32, b: f32, c: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    return core::intrinsics::fmaf32(a, b, c);
    #[cfg(not(target_arch = "nvptx64"))]
    return a * b + c;
}

/// `if keep { value } else { otherwise }`, as a select (`selp.f32`) that the compiler can neither
/// see through nor turn into a branch: computing `value` stays unconditional. Where a result is
/// dropped under some condition, a plain `if` lets LLVM branch around its arithmetic and ptxas
/// then sink the arithmetic's loads under that branch — after whatever decided it (the cascade
/// merge's value loads waited on its scores so: docs/perf/cascade.md).
#[inline(always)]
pub fn choose(keep: bool, value: f32, otherwise: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let r: f32;
        unsafe {
            core::arch::asm!(
                "{{ .reg .pred p; setp.ne.u32 p, {k}, 0; selp.f32 {r}, {v}, {o}, p; }}",
                r = out(reg32) r, k = in(reg32) keep as u32, v = in(reg32) value, o = in(reg32) otherwise,
                options(pure, nomem, nostack),
            )
        };
        r
    }
    #[cfg(not(target_arch = "nvptx64"))]
    if keep { value } else { otherwise }
}

/// `x` truncated toward zero to a u64, for `x` in 0..2^64 (both saturate outside it, NaN to 0):
/// one `cvt.rzi.u64.f32` on the GPU, opaque to LLVM — which otherwise moves a select of the f32
/// below the conversion, as two selects of a u64 (the sampling weighings: docs/perf/sampling.md).
#[inline(always)]
pub fn truncate_to_u64(x: f32) -> u64 {
    #[cfg(target_arch = "nvptx64")]
    {
        let r: u64;
        unsafe {
            core::arch::asm!("cvt.rzi.u64.f32 {r}, {x};", r = out(reg64) r, x = in(reg32) x, options(pure, nomem, nostack))
        };
        r
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        x as u64
    }
}

/// 1/√v for v ≥ 0. On the GPU `rsqrt.approx.ftz.f32` (one MUFU op, relative error < 2^-22.9, as
/// FlashInfer's `rsqrtf`; a subnormal `v` counts as 0); on the host the portable [`rsqrt_exact`].
#[inline(always)]
pub fn rsqrt(v: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    return approx!("rsqrt.approx.ftz.f32", v);
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

/// 2^x. On the GPU `ex2.approx.ftz.f32` (one MUFU op, relative error < 2^-22; results below
/// 2^-126 flush to 0); on the host [`exp2_portable`].
#[inline(always)]
pub fn exp2(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    return approx!("ex2.approx.ftz.f32", x);
    #[cfg(not(target_arch = "nvptx64"))]
    exp2_portable(x)
}

/// 2^x by a range reduction to [-1/2, 1/2] and a degree-6 polynomial (relative error < 4e-7),
/// exact powers of two included, 0 below 2^-149 and +inf above 2^128 — in IEEE operations alone
/// (no FMA: Rust never contracts, and the device's PTX multiplies and adds with `.rn`), so the
/// host and the GPU compute it bit for bit alike, where a draw needs them to agree.
#[inline(always)]
pub fn exp2_portable(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    let x = x.clamp(-150.0, 129.0);
    let n = floor_small(x + 0.5);
    let f = x - n;
    // Taylor coefficients of 2^f = e^(f ln 2) to degree 6: |f| ≤ 1/2 keeps the remainder < 2e-7.
    const C: [f32; 7] =
        [1.0, core::f32::consts::LN_2, 0.240_226_5, 0.055_504_11, 0.009_618_129, 0.001_333_355_8, 0.000_154_035_3];
    let mut p = C[6];
    for c in C[..6].iter().rev() {
        p = p * f + c;
    }
    // 2^n in two halves, each a normal f32, so results near the range's ends round right.
    let n = n as i32;
    let power = |k: i32| f32::from_bits(((k + 127) as u32) << 23);
    p * power(n / 2) * power(n - n / 2)
}

/// `floor` without `std`, for [`exp2_portable`]'s range reduction (`|x| ≤ 130`).
#[inline(always)]
fn floor_small(x: f32) -> f32 {
    let t = x as i32 as f32; // truncates toward zero
    if t > x { t - 1.0 } else { t }
}

/// log₂ x for x > 0 (−∞ at 0, NaN below). On the GPU `lg2.approx.ftz.f32` (one MUFU op, absolute
/// error < 2^-22 around 1, as FlashInfer's `ptx_log2`); on the host [`log2_portable`].
#[inline(always)]
pub fn log2(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    return approx!("lg2.approx.ftz.f32", x);
    #[cfg(not(target_arch = "nvptx64"))]
    log2_portable(x)
}

/// log₂ x from the exponent and an odd series in `t = (m − 1)/(m + 1)` for the mantissa
/// `m ∈ [√½, √2)` (|t| ≤ 0.172: five terms leave < 1e-9), within a few ulp; subnormals
/// scaled up first; `core` has no `log2` without `std`.
#[inline(always)]
pub fn log2_portable(x: f32) -> f32 {
    if x.is_nan() || x < 0.0 {
        return f32::NAN;
    }
    if x == 0.0 {
        return f32::NEG_INFINITY;
    }
    if x == f32::INFINITY {
        return x;
    }
    let (x, bias) = if x < f32::MIN_POSITIVE { (x * 8_388_608.0, -23) } else { (x, 0) };
    let bits = x.to_bits();
    let mut exponent = ((bits >> 23) as i32) - 127 + bias;
    let mut m = f32::from_bits((bits & 0x007f_ffff) | 0x3f80_0000);
    if m > core::f32::consts::SQRT_2 {
        m *= 0.5;
        exponent += 1;
    }
    let t = (m - 1.0) / (m + 1.0);
    let t2 = t * t;
    // 2/ln 2 · (t + t³/3 + t⁵/5 + t⁷/7 + t⁹/9)
    let series = t * (1.0 + t2 * (1.0 / 3.0 + t2 * (0.2 + t2 * (1.0 / 7.0 + t2 * (1.0 / 9.0)))));
    exponent as f32 + 2.0 * core::f32::consts::LOG2_E * series
}

/// `1 / x`: `rcp.approx.ftz.f32` on the GPU (within 1 ulp), a division on the host.
#[inline(always)]
pub fn reciprocal(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    return approx!("rcp.approx.ftz.f32", x);
    #[cfg(not(target_arch = "nvptx64"))]
    {
        1.0 / x
    }
}

/// tanh x as `(1 − t) / (1 + t)`, `t = 2^(−2 log₂e · |x|)`, with the sign of `x` (a NaN stays
/// NaN): [`exp2`] and [`reciprocal`], so one MUFU pair on the GPU and the same steps on the host.
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let magnitude = f32::from_bits(x.to_bits() & 0x7fff_ffff);
    let t = exp2(-2.0 * core::f32::consts::LOG2_E * magnitude);
    let y = (1.0 - t) * reciprocal(1.0 + t);
    f32::from_bits(y.to_bits() | (x.to_bits() & 0x8000_0000))
}

/// The logistic function `1 / (1 + e^-x)`, without cancellation at either end.
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    reciprocal(1.0 + exp2(-x * core::f32::consts::LOG2_E))
}

/// Past this |x| the exact erf rounds to ±1 in f32 (erfc(3.9192) = 2^-25).
const ERF_SATURATES: f32 = 3.919_206;

/// The error function, from a rational approximation on [-4, 4]: `x · P(x²) / Q(x²)`, the
/// coefficients of Eigen's `generic_fast_erf_float` (absolute error under 1e-7 in exact
/// arithmetic, under 5e-7 evaluated in f32; a host test checks it); exactly ±1 where erf rounds
/// to it ([`ERF_SATURATES`]), so that `1 + erf(x)` is 0 there — the approximation's residue of a
/// few 1e-8 made `gelu(−1e8)` −4, not 0. (Below the edge the approximation may pass ±1 by an ulp:
/// within its error, but `gelu` of x in about (−5.5, −5.2) is then +1e-6, not −3e-7.)
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    const ALPHA: [f32; 7] = [
        -2.726_142_3e-10,
        2.770_681_4e-8,
        -2.101_024e-6,
        -5.692_506_4e-5,
        -7.349_906_3e-4,
        -2.954_6e-3,
        -1.609_603_3e-2,
    ];
    const BETA: [f32; 5] = [-1.456_607_2e-5, -2.133_740_6e-4, -1.682_827e-3, -7.373_329_2e-3, -1.426_474e-2];
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = ALPHA[0];
    for a in &ALPHA[1..] {
        p = mul_add(x2, p, *a);
    }
    let mut q = BETA[0];
    for b in &BETA[1..] {
        q = mul_add(x2, q, *b);
    }
    let one = f32::from_bits((x.to_bits() & 0x8000_0000) | 1f32.to_bits());
    choose(x.abs() >= ERF_SATURATES, one, x * p * reciprocal(q))
}

/// `(sin a, cos a)` of an f32 angle, each within two ulp of the exact value for every |a| <
/// 2^30 — an angle of a position times a frequency, which reaches 10^5 and beyond, where the
/// GPU's `sin.approx` (FlashInfer's `__sincosf`) loses its accuracy. The angle is reduced by the
/// nearest multiple `k` of π/2 in f64 (Cody–Waite, π/2 in three parts, the first two of 23
/// significant bits so that `k` times either is exact for every `k < 2^30`), the remainder
/// |r| ≤ π/4 rounded to f32 and given to Cephes' single-precision polynomials, the quadrant
/// `k mod 4` (read from the rounding's bits: no conversion, no branch) choosing and signing
/// them. On the GPU: nine f64 operations, eight FMAs.
#[inline(always)]
pub fn sin_cos(a: f32) -> (f32, f32) {
    const FRAC_2_PI: f64 = core::f64::consts::FRAC_2_PI;
    const PIO2_1: f64 = 1.570_796_251_296_997; // π/2 to 23 bits (0x1.921fb4p0)
    const PIO2_2: f64 = 7.549_789_415_861_596e-8; // the next 23 bits (0x1.4442dp-24)
    const PIO2_3: f64 = 5.390_302_858_158_119e-15; // π/2 − PIO2_1 − PIO2_2, rounded
    // 1.5 · 2^52: adding it rounds to an integer kept in the low bits of the sum (|x| < 2^51).
    const ROUNDER: f64 = 6_755_399_441_055_744.0;
    let x = a as f64;
    let rounded = x * FRAC_2_PI + ROUNDER;
    let k = rounded - ROUNDER;
    let r = (((x - k * PIO2_1) - k * PIO2_2) - k * PIO2_3) as f32;
    let quadrant = rounded.to_bits() as u32 & 3;
    let z = r * r;
    // Cephes' sinf and cosf on [−π/4, π/4].
    let s = mul_add(mul_add(mul_add(-1.951_529_6e-4, z, 8.332_161e-3), z, -1.666_665_5e-1), z * r, r);
    let c = mul_add(mul_add(mul_add(mul_add(2.443_315_7e-5, z, -1.388_731_6e-3), z, 4.166_664_6e-2), z, -0.5), z, 1.0);
    // a = k·π/2 + r: (sin, cos) a = (s, c), (c, −s), (−s, −c), (−c, s) for k mod 4 = 0, 1, 2, 3.
    let odd = quadrant & 1 == 1;
    let (sin, cos) = (choose(odd, c, s), choose(odd, s, c));
    let negate = |v: f32, yes: bool| f32::from_bits(v.to_bits() ^ ((yes as u32) << 31));
    let (sin, cos) = (negate(sin, quadrant & 2 != 0), negate(cos, (quadrant + 1) & 2 != 0));
    if a.is_finite() { (sin, cos) } else { (f32::NAN, f32::NAN) }
}

/// 2^x in f64 for |x| ≤ 1000, relative error below 10^-13: x split into its nearest integer `n`
/// and `f` (|f| ≤ 1/2), a degree-11 Taylor polynomial of e^(f ln 2), times 2^n built from its
/// bits (results below 2^-1022 flush to 0). IEEE operations alone, as [`sin_cos`]: the host and
/// the GPU agree bit for bit, and rounded to f32 it is the correctly rounded 2^x but within
/// 10^-13 of a tie. Rope's frequencies are its only user.
#[inline(always)]
pub fn exp2_f64(x: f64) -> f64 {
    const ROUNDER: f64 = 6_755_399_441_055_744.0;
    let n = (x + ROUNDER) - ROUNDER;
    let f = (x - n) * core::f64::consts::LN_2;
    // e^f = Σ fᵏ/k!, Horner from k = 11 (1/k! as constants: no f64 division on the GPU).
    const INVERSE_FACTORIALS: [f64; 12] = [
        1.0,
        1.0,
        1.0 / 2.0,
        1.0 / 6.0,
        1.0 / 24.0,
        1.0 / 120.0,
        1.0 / 720.0,
        1.0 / 5_040.0,
        1.0 / 40_320.0,
        1.0 / 362_880.0,
        1.0 / 3_628_800.0,
        1.0 / 39_916_800.0,
    ];
    let mut p = INVERSE_FACTORIALS[11];
    for c in INVERSE_FACTORIALS[..11].iter().rev() {
        p = p * f + c;
    }
    let n = n as i64;
    if n < -1022 {
        return 0.0;
    }
    p * f64::from_bits(((n + 1023) as u64) << 52)
}

/// Division of 32-bit numbers by a fixed divisor as a multiply-high, an add and a shift
/// (Granlund and Montgomery's method: `shift = ⌈log₂ d⌉`, `multiplier = 1 + ⌊2³² (2^shift − d) /
/// d⌋`), for a divisor known only at run time but used many times (a page size): one 32-bit
/// division costs the GPU a few dozen instructions, this three.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastDivisor {
    divisor: u32,
    multiplier: u32,
    shift: u32,
}

impl FastDivisor {
    /// The divisor `divisor` (0 is taken as 1).
    #[inline(always)]
    pub fn new(divisor: u32) -> Self {
        let divisor = divisor.max(1);
        let shift = 32 - (divisor - 1).leading_zeros();
        let d = core::num::NonZeroU64::new(divisor as u64).unwrap_or(core::num::NonZeroU64::MIN);
        let multiplier = (((1u64 << 32) * ((1u64 << shift) - divisor as u64)) / d + 1) as u32;
        FastDivisor { divisor, multiplier, shift }
    }

    /// `(n / divisor, n % divisor)`, exact for every `n`.
    #[inline(always)]
    pub fn div_rem(&self, n: u32) -> (u32, u32) {
        let high = (n as u64 * self.multiplier as u64) >> 32;
        let quotient = ((high + n as u64) >> self.shift) as u32;
        (quotient, n - quotient * self.divisor)
    }
}
