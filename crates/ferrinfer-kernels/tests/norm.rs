//! The norm family's shared numerics on the host — `norm_row`, which the CPU backend runs, built
//! from the same element math as the device kernels — against f64 references.

use ferrinfer_kernels::element::{Bf16, Element, F16};
use ferrinfer_kernels::norm::{FusedAddRms, GemmaRms, Layer, NormKind, NormParams, Rms, norm_row};

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

fn values<T: Element>(len: usize, seed: u32) -> Vec<T> {
    pseudo_random(len, seed).into_iter().map(T::from_f32).collect()
}

fn f64s<T: Element>(v: &[T]) -> Vec<f64> {
    v.iter().map(|x| x.to_f32() as f64).collect()
}

/// Runs `norm_row::<K>` on one row; returns (output, residual after).
fn run<K: NormKind, T: Element, W: Element>(x: &[T], r: &[T], w: &[W], b: &[W]) -> (Vec<T>, Vec<T>) {
    let hidden = x.len();
    let (mut x, mut r) = (x.to_vec(), r.to_vec());
    let mut out = vec![T::from_f32(f32::NAN); hidden];
    let output = if K::FUSED_ADD { x.as_mut_ptr() } else { out.as_mut_ptr() };
    let params = NormParams {
        input: x.as_mut_ptr() as u64,
        residual: r.as_mut_ptr() as u64,
        weight: w.as_ptr() as u64,
        bias: b.as_ptr() as u64,
        output: output as u64,
        rows: 1,
        input_row_stride: hidden as u64,
        residual_row_stride: hidden as u64,
        output_row_stride: hidden as u64,
        hidden: hidden as u32,
        eps: 1e-6,
        threads_per_row: 1,
        stages: 0,
    };
    unsafe { norm_row::<K, T, W>(&params, 0) };
    (if K::FUSED_ADD { x } else { out }, r)
}

fn assert_close(got: &[f64], want: &[f64], tolerance: f64, what: &str) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tolerance * w.abs() + 1e-5, "{what}, element {i}: {g} vs {w}");
    }
}

fn rms_reference(x: &[f64], w: &[f64], offset: f64) -> Vec<f64> {
    let inverse = 1.0 / (x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64 + 1e-6).sqrt();
    x.iter().zip(w).map(|(x, w)| x * inverse * (w + offset)).collect()
}

fn check_all<T: Element, W: Element>(tolerance: f64) {
    for hidden in [1, 3, 111, 1004, 4096] {
        let (x, r, w, b) = (
            values::<T>(hidden, hidden as u32),
            values::<T>(hidden, 9),
            values::<W>(hidden, 7),
            values::<W>(hidden, 8),
        );
        let what = format!("{} hidden {hidden}", std::any::type_name::<T>());
        let (y, _) = run::<Rms, T, W>(&x, &r, &w, &b);
        assert_close(&f64s(&y), &rms_reference(&f64s(&x), &f64s(&w), 0.0), tolerance, &what);
        let (y, _) = run::<GemmaRms, T, W>(&x, &r, &w, &b);
        assert_close(&f64s(&y), &rms_reference(&f64s(&x), &f64s(&w), 1.0), tolerance, &what);
        let (y, r_after) = run::<FusedAddRms, T, W>(&x, &r, &w, &b);
        let sums: Vec<T> = x.iter().zip(&r).map(|(x, r)| T::from_f32(x.to_f32() + r.to_f32())).collect();
        assert_eq!(f64s(&r_after), f64s(&sums), "{what}: the residual holds x + r, rounded");
        assert_close(&f64s(&y), &rms_reference(&f64s(&sums), &f64s(&w), 0.0), tolerance, &what);
        let (y, _) = run::<Layer, T, W>(&x, &r, &w, &b);
        let xs = f64s(&x);
        let mean = xs.iter().sum::<f64>() / hidden as f64;
        let inverse = 1.0 / (xs.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / hidden as f64 + 1e-6).sqrt();
        let want: Vec<f64> = (0..hidden).map(|i| (xs[i] - mean) * inverse * f64s(&w)[i] + f64s(&b)[i]).collect();
        // Layernorm of a 1-element row is exactly β: absolute, not relative, tolerance.
        assert_close(&f64s(&y), &want, tolerance, &format!("{what} layernorm"));
    }
}

#[test]
fn norm_rows_match_f64_for_every_op_and_dtype() {
    check_all::<f32, f32>(1e-5);
    check_all::<F16, F16>(2f64.powi(-10));
    check_all::<Bf16, Bf16>(2f64.powi(-7));
    check_all::<Bf16, f32>(2f64.powi(-7));
    check_all::<F16, f32>(2f64.powi(-10));
}

#[test]
fn norm_in_place_row_equals_out_of_place() {
    let x: Vec<f32> = pseudo_random(500, 3);
    let w: Vec<f32> = pseudo_random(500, 4);
    let (y, _) = run::<Rms, f32, f32>(&x, &x, &w, &w);
    let mut z = x.clone();
    let params = NormParams {
        input: z.as_mut_ptr() as u64,
        residual: 0,
        weight: w.as_ptr() as u64,
        bias: 0,
        output: z.as_mut_ptr() as u64,
        rows: 1,
        input_row_stride: 500,
        residual_row_stride: 0,
        output_row_stride: 500,
        hidden: 500,
        eps: 1e-6,
        threads_per_row: 1,
        stages: 0,
    };
    unsafe { norm_row::<Rms, f32, f32>(&params, 0) };
    assert_eq!(y, z);
}
