//! `FERRINFER_NORM_LAYOUT` is read once per process, so its error case has a test binary of its
//! own: a layout no kernel has is a configuration error naming the variable, on every call (CPU
//! ones too, so a misconfigured process fails loudly wherever it runs), and the output stays
//! untouched.

use ferrinfer_launch::{Error, Stream, TensorView, rmsnorm};

#[test]
fn norm_layout_override_rejects_a_chunk_count_without_kernels() {
    // SAFETY: the only test in this binary; no other thread reads the environment.
    unsafe { std::env::set_var("FERRINFER_NORM_LAYOUT", "3:*:*") };
    let (x, w) = (vec![1.0f32; 64], vec![1.0f32; 64]);
    let mut out = vec![f32::NAN; 64];
    let xv = TensorView::from_slice(&x, &[1, 64]).unwrap();
    let wv = TensorView::from_slice(&w, &[64]).unwrap();
    for _ in 0..2 {
        let mut ov = TensorView::from_slice_mut(&mut out, &[1, 64]).unwrap();
        let error = rmsnorm(&xv, &wv, &mut ov, 1e-6, Stream::Cpu).expect_err("3 chunks have no kernel");
        assert!(matches!(error, Error::Config(_)), "{error:?}");
        let text = error.to_string();
        assert!(
            text.contains("FERRINFER_NORM_LAYOUT=\"3:*:*\"") && text.contains("chunks one of [1, 2, 4, 8]"),
            "{text}"
        );
    }
    assert!(out.iter().all(|v| v.is_nan()));
}
