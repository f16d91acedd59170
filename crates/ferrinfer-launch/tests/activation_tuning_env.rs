//! `FERRINFER_ACTIVATION_LAYOUT` is read once per process, so its error case has a test binary of
//! its own: a layout no launch can have is a configuration error naming the variable and what was
//! expected, on every call (CPU ones too, so a misconfigured process fails loudly wherever it
//! runs), and the output stays untouched.

use ferrinfer_launch::{Error, Stream, TensorView, silu_and_mul};

#[test]
fn activation_layout_override_rejects_a_block_of_partial_warps() {
    // SAFETY: the only test in this binary; no other thread reads the environment.
    unsafe { std::env::set_var(ferrinfer_launch::activation::LAYOUT_VAR, "100:*") };
    let x = vec![1.0f32; 2 * 64];
    let mut out = vec![f32::NAN; 64];
    let xv = TensorView::from_slice(&x, &[1, 128]).unwrap();
    for _ in 0..2 {
        let mut ov = TensorView::from_slice_mut(&mut out, &[1, 64]).unwrap();
        let error = silu_and_mul(&xv, &mut ov, Stream::Cpu).expect_err("100 threads are not whole warps");
        assert!(matches!(error, Error::Config(_)), "{error:?}");
        let text = error.to_string();
        assert!(
            text.contains("FERRINFER_ACTIVATION_LAYOUT=\"100:*\"") && text.contains("block a multiple of 32 ≤ 1024"),
            "{text}"
        );
    }
    assert!(out.iter().all(|v| v.is_nan()));
}
