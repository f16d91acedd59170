//! `FERRINFER_CASCADE_LAYOUT` is read once per process, so its error case has a test binary of
//! its own: a layout no launch can have is a configuration error naming the variable and what was
//! expected, on every call (CPU ones too, so a misconfigured process fails loudly wherever it
//! runs), and the outputs stay untouched.

use ferrinfer_launch::{Error, Stream, TensorView, merge_state};

#[test]
fn cascade_layout_override_rejects_lanes_not_a_power_of_two() {
    // SAFETY: the only test in this binary; no other thread reads the environment.
    unsafe { std::env::set_var(ferrinfer_launch::cascade::LAYOUT_VAR, "*:12") };
    let (v, s) = (vec![1.0f32; 2 * 8], vec![0.0f32; 2]);
    let (mut v_out, mut s_out) = (vec![f32::NAN; 2 * 8], vec![f32::NAN; 2]);
    let (vv, sv) = (TensorView::from_slice(&v, &[2, 8]).unwrap(), TensorView::from_slice(&s, &[2]).unwrap());
    for _ in 0..2 {
        let mut vo = TensorView::from_slice_mut(&mut v_out, &[2, 8]).unwrap();
        let mut so = TensorView::from_slice_mut(&mut s_out, &[2]).unwrap();
        let error =
            merge_state(&vv, &sv, &vv, &sv, &mut vo, &mut so, Stream::Cpu).expect_err("12 lanes: no power of two");
        assert!(matches!(error, Error::Config(_)), "{error:?}");
        let text = error.to_string();
        assert!(
            text.contains("FERRINFER_CASCADE_LAYOUT=\"*:12\"") && text.contains("lanes a power of two ≤ 32"),
            "{text}"
        );
    }
    assert!(v_out.iter().chain(&s_out).all(|x| x.is_nan()));
}
