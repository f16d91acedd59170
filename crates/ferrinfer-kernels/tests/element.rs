//! The conversions and scalar math the kernels share with the host, checked against the `half`
//! crate and f64 on the host.

use ferrinfer_kernels::element::{Bf16, Element, F16, f16_bits_to_f32, f32_to_bf16_bits, f32_to_f16_bits};
use ferrinfer_kernels::math::rsqrt_exact as rsqrt;

/// Every f32 bit pattern whose low bits are `step`-spaced, plus each neighbourhood of a rounding
/// boundary: enough to cover every exponent, sign, tie and subnormal case in well under a second.
fn sampled_f32() -> impl Iterator<Item = f32> {
    let strided = (0..=u32::MAX).step_by(4099).map(f32::from_bits);
    let edges = [
        0x0000_0000u32,
        0x0000_0001,
        0x3380_0000,
        0x3380_0001,
        0x337f_ffff,
        0x3300_0000,
        0x3300_0001,
        0x387f_ffff,
        0x3880_0000,
        0x477f_efff,
        0x477f_f000,
        0x477f_e000,
        0x7f7f_ffff,
        0x7f80_0000,
        0x7fc0_0000,
        0x7f80_0001,
        0x3f80_8000,
        0x3f81_8000,
    ];
    let ties = (0u32..1 << 16).map(|hi| (hi << 16) | 0x8000);
    strided
        .chain(edges.into_iter().flat_map(|e| [e, e | 0x8000_0000].map(f32::from_bits)))
        .chain(ties.map(f32::from_bits))
}

fn same_float(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

#[test]
fn f16_to_f32_is_exact_for_every_f16() {
    for bits in 0..=u16::MAX {
        let want = half::f16::from_bits(bits).to_f32();
        assert!(same_float(f16_bits_to_f32(bits), want), "f16 {bits:#06x}");
    }
}

#[test]
fn f32_to_f16_rounds_to_nearest_even() {
    for x in sampled_f32() {
        let (got, want) = (f32_to_f16_bits(x), half::f16::from_f32(x).to_bits());
        let both_nan = half::f16::from_bits(got).is_nan() && x.is_nan();
        assert!(got == want || both_nan, "{x:e} ({:#010x}): got {got:#06x}, want {want:#06x}", x.to_bits());
    }
}

#[test]
fn f32_to_bf16_rounds_to_nearest_even() {
    for x in sampled_f32() {
        let (got, want) = (f32_to_bf16_bits(x), half::bf16::from_f32(x).to_bits());
        let both_nan = half::bf16::from_bits(got).is_nan() && x.is_nan();
        assert!(got == want || both_nan, "{x:e} ({:#010x}): got {got:#06x}, want {want:#06x}", x.to_bits());
    }
}

#[test]
fn element_round_trips_are_identity_on_representable_values() {
    for bits in (0..=u16::MAX).filter(|&b| !half::bf16::from_bits(b).is_nan()) {
        assert_eq!(Bf16::from_f32(Bf16(bits).to_f32()), Bf16(bits));
    }
    for bits in (0..=u16::MAX).filter(|&b| !half::f16::from_bits(b).is_nan()) {
        assert_eq!(F16::from_f32(F16(bits).to_f32()), F16(bits));
    }
}

#[test]
fn rsqrt_is_within_two_ulp_over_the_whole_range() {
    let samples = (1u32..0x7f80_0000).step_by(997).map(f32::from_bits);
    for v in samples {
        let want = 1.0 / (v as f64).sqrt();
        let got = rsqrt(v) as f64;
        let ulp = (want as f32).to_bits();
        let ulp = (f32::from_bits(ulp + 1) - f32::from_bits(ulp)) as f64;
        assert!((got - want).abs() <= 2.0 * ulp, "rsqrt({v:e}) = {got:e}, want {want:e}");
    }
    assert_eq!(rsqrt(0.0), f32::INFINITY);
    assert_eq!(rsqrt(f32::INFINITY), 0.0);
    assert!(rsqrt(f32::NAN).is_nan());
}

#[test]
fn exp2_erf_and_sigmoid_are_close_to_f64_on_the_host() {
    use ferrinfer_kernels::math::{erf, exp2, sigmoid};
    let mut x = -130.0f32;
    while x < 130.0 {
        let want = 2f64.powf(x as f64);
        let got = exp2(x) as f64;
        if want >= f32::MIN_POSITIVE as f64 && want <= f32::MAX as f64 {
            assert!((got - want).abs() <= 4e-7 * want, "exp2({x}) = {got:e}, want {want:e}");
        }
        x += 0.0173;
    }
    assert_eq!(exp2(0.0), 1.0);
    assert_eq!(exp2(10.0), 1024.0);
    assert_eq!(exp2(-200.0), 0.0);
    assert_eq!(exp2(200.0), f32::INFINITY);
    let mut x = -6.0f32;
    while x < 6.0 {
        let want = libm::erf(x as f64);
        assert!((erf(x) as f64 - want).abs() < 5e-7, "erf({x}) = {}, want {want}", erf(x));
        let want = 1.0 / (1.0 + (-(x as f64)).exp());
        assert!((sigmoid(x) as f64 - want).abs() <= 1e-6 * want, "sigmoid({x})");
        x += 0.001;
    }
    // ±1 exactly where erf rounds to it in f32, so that 1 + erf(x) is 0 (gelu of large negatives).
    for x in [3.9193f32, 4.0, 10.0, 1e8, f32::MAX, f32::INFINITY] {
        assert_eq!((erf(x), erf(-x)), (1.0, -1.0), "erf(±{x})");
    }
    assert!(erf(3.919) < 1.0, "erf rounds to 1 only from 3.9192 on");
    assert!(erf(f32::NAN).is_nan());
}

#[test]
fn log2_is_close_to_f64_over_the_whole_range() {
    use ferrinfer_kernels::math::log2;
    for x in sampled_f32().filter(|x| *x > 0.0 && x.is_finite()) {
        let want = (x as f64).log2();
        let got = log2(x) as f64;
        assert!((got - want).abs() <= 2e-7 * want.abs().max(1.0), "log2({x:e}) = {got}, want {want}");
    }
    assert_eq!(log2(1.0), 0.0);
    assert_eq!(log2(1024.0), 10.0);
    assert_eq!(log2(0.0), f32::NEG_INFINITY);
    assert_eq!(log2(f32::INFINITY), f32::INFINITY);
    assert!(log2(-1.0).is_nan() && log2(f32::NAN).is_nan());
}

/// Within two ulp of f64's sin and cos (of the same f32 angle) for every angle below 2^30 (rope's
/// positions to 2^30 at frequencies up to 1).
#[test]
fn sin_cos_is_within_two_ulp_of_f64_for_every_rope_angle() {
    use ferrinfer_kernels::math::sin_cos;
    let ulp = |v: f32| (f32::from_bits(v.abs().to_bits() + 1) - v.abs()) as f64;
    let mut worst = 0.0f64;
    for a in sampled_f32().filter(|a| a.is_finite() && a.abs() < (1u32 << 30) as f32) {
        let (s, c) = sin_cos(a);
        let (want_s, want_c) = ((a as f64).sin(), (a as f64).cos());
        for (got, want) in [(s, want_s), (c, want_c)] {
            let off = (got as f64 - want).abs() / ulp(want as f32).max(f32::MIN_POSITIVE as f64);
            worst = worst.max(off);
            assert!(off <= 2.0, "sin_cos({a:e}): {got:e}, want {want:e} ({off} ulp)");
        }
    }
    assert!(worst > 0.0, "compared something");
    assert_eq!(sin_cos(0.0), (0.0, 1.0));
    let (s, c) = sin_cos(f32::NAN);
    assert!(s.is_nan() && c.is_nan());
}

/// Within 10^-13 of f64's `exp2` over the exponents rope's frequencies use, exact at integers.
#[test]
fn exp2_f64_is_within_1e13_of_std() {
    use ferrinfer_kernels::math::exp2_f64;
    let mut x = -60.0;
    while x <= 60.0 {
        let (got, want) = (exp2_f64(x), x.exp2());
        assert!((got - want).abs() <= 1e-13 * want, "exp2_f64({x}) = {got:e}, want {want:e}");
        x += 0.000_731;
    }
    assert_eq!(exp2_f64(0.0), 1.0);
    assert_eq!(exp2_f64(-3.0), 0.125);
}

#[test]
fn fast_division_is_exact_for_every_divisor_shape() {
    use ferrinfer_kernels::math::FastDivisor;
    let divisors = (1..=300).chain([
        511,
        512,
        513,
        1000,
        4096,
        65535,
        65536,
        1 << 20,
        (1 << 31) - 1,
        1 << 31,
        (1 << 31) + 1,
        u32::MAX,
    ]);
    for d in divisors {
        let fast = FastDivisor::new(d);
        let edges = [
            0,
            1,
            d - 1,
            d,
            d.wrapping_add(1),
            2 * (d / 2).max(1) - 1,
            u32::MAX,
            u32::MAX - 1,
            u32::MAX / d * d,
            1 << 31,
        ];
        let spread = (0..2000u64).map(|i| (i * 2_147_483_647 % (1 << 32)) as u32);
        for n in edges.into_iter().chain(spread) {
            assert_eq!(fast.div_rem(n), (n / d, n % d), "{n} / {d}");
        }
    }
    assert_eq!(FastDivisor::new(0).div_rem(7), (7, 0), "0 is taken as 1");
}
