//! The decode family's test cases: the scalar variants both decode ops run with (the CPU and GPU
//! tests').

use ferrinfer_launch::scalar::ScalarType;
use ferrinfer_launch::{PosEncodingMode, Scalar};

use super::*;

/// The head sizes with kernels.
pub const HEAD_DIMS: [usize; 3] = [64, 128, 256];

/// The op's examples with `changes` (by name) applied.
fn with(op: &OpInfo, case: &Case, changes: &[(&str, Scalar)]) -> Vec<Scalar> {
    let mut scalars = op.examples(case.rows, case.hidden);
    for (name, value) in changes {
        let i = op.scalars.iter().position(|s| s.name == *name).expect("a scalar of the op");
        scalars[i] = *value;
    }
    scalars
}

/// Each scalar's variants, one at a time and a few together: RoPE (default and other scale and
/// base), a soft cap, windows of 7 and 0 keys, the scales (which multiply `sm_scale` and the
/// output), and RoPE, a soft cap and a window at once.
pub fn variants(op: &OpInfo, case: &Case) -> Vec<Vec<Scalar>> {
    let f = |x: f32| Some(x).into_scalar();
    let rope = PosEncodingMode::RopeLlama.into_scalar();
    let changes: Vec<Vec<(&str, Scalar)>> = vec![
        vec![],
        vec![("pos_encoding_mode", rope)],
        vec![("pos_encoding_mode", rope), ("rope_scale", f(2.0)), ("rope_theta", f(5e5))],
        vec![("logits_soft_cap", f(5.0))],
        vec![("window_left", Scalar::I32(7))],
        vec![("window_left", Scalar::I32(0))],
        vec![("sm_scale", f(0.1)), ("k_scale", f(0.5)), ("v_scale", f(2.0)), ("q_scale", f(1.5))],
        vec![("pos_encoding_mode", rope), ("logits_soft_cap", f(30.0)), ("window_left", Scalar::I32(20))],
    ];
    changes.iter().map(|c| with(op, case, c)).collect()
}
