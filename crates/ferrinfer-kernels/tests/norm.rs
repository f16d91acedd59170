//! The norm family's shared numerics on the host: the per-row function the CPU backend runs and
//! the element math the device kernel runs, against an f64 reference.

use ferrinfer_kernels::element::{Bf16, Element, F16};
use ferrinfer_kernels::norm::{inverse_rms, rmsnorm_row};

fn pseudo_random(len: usize, seed: u32) -> Vec<f32> {
    let mut state = seed.wrapping_mul(2_654_435_761).max(1);
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            (state as f32 / u32::MAX as f32) * 4.0 - 2.0
        })
        .collect()
}

fn check_row<T: Element>(hidden: usize, tolerance: f64) {
    let x: Vec<T> = pseudo_random(hidden, hidden as u32).into_iter().map(T::from_f32).collect();
    let w: Vec<T> = pseudo_random(hidden, 7).into_iter().map(T::from_f32).collect();
    let mut y = vec![T::from_f32(f32::NAN); hidden];
    unsafe { rmsnorm_row(x.as_ptr(), w.as_ptr(), y.as_mut_ptr(), hidden, 1e-6) };

    let xf: Vec<f64> = x.iter().map(|v| v.to_f32() as f64).collect();
    let inverse = 1.0 / (xf.iter().map(|v| v * v).sum::<f64>() / hidden as f64 + 1e-6).sqrt();
    for i in 0..hidden {
        let want = xf[i] * inverse * w[i].to_f32() as f64;
        let got = y[i].to_f32() as f64;
        assert!((got - want).abs() <= tolerance * want.abs() + 1e-6, "hidden {hidden}, element {i}: {got} vs {want}");
    }
}

#[test]
fn norm_row_matches_f64_for_every_dtype() {
    for hidden in [1, 3, 111, 1004, 4096] {
        check_row::<f32>(hidden, 1e-5);
        check_row::<F16>(hidden, 2f64.powi(-10));
        check_row::<Bf16>(hidden, 2f64.powi(-7));
    }
}

#[test]
fn norm_in_place_row_equals_out_of_place() {
    let x: Vec<f32> = pseudo_random(500, 3);
    let w: Vec<f32> = pseudo_random(500, 4);
    let mut y = vec![0.0; 500];
    unsafe { rmsnorm_row(x.as_ptr(), w.as_ptr(), y.as_mut_ptr(), 500, 1e-5) };
    let mut z = x.clone();
    unsafe { rmsnorm_row(z.as_ptr(), w.as_ptr(), z.as_mut_ptr(), 500, 1e-5) };
    assert_eq!(y, z);
}

#[test]
fn norm_inverse_rms_uses_mean_plus_eps() {
    let got = inverse_rms(8.0, 2, 0.5) as f64; // 1/√(4 + 0.5)
    assert!((got - 1.0 / 4.5f64.sqrt()).abs() < 1e-7);
}
