//! The cascade family's shared numerics on the host — `merge_row`, which the CPU backend runs,
//! built from the same math as the device kernel — against f64 references.

use ferrinfer_kernels::cascade::{MergeParams, merge_row};
use ferrinfer_kernels::element::{Bf16, Element};

/// `states` states of `rows` rows of `width` values, state-major (`[states, rows, width]`), and
/// their scores (`[states, rows]`).
struct States<T> {
    v: Vec<T>,
    s: Vec<f32>,
    rows: usize,
    width: usize,
    states: usize,
}

impl<T: Element> States<T> {
    fn new(states: usize, rows: usize, width: usize, scores: impl Fn(usize, usize) -> f32) -> Self {
        let v = (0..states * rows * width).map(|i| T::from_f32(((i * 37 % 101) as f32 - 50.0) / 25.0)).collect();
        let s = (0..states * rows).map(|i| scores(i / rows, i % rows)).collect();
        States { v, s, rows, width, states }
    }

    /// Params merging every state into `v_out` / `s_out` (row-major `[rows, width]`, `[rows]`).
    fn params(&self, v_out: *mut T, s_out: *mut f32) -> MergeParams {
        MergeParams {
            v: self.v.as_ptr() as u64,
            s: self.s.as_ptr() as u64,
            v_out: v_out as u64,
            s_out: s_out as u64,
            rows: self.rows as u64,
            heads: 1,
            v_state_stride: (self.rows * self.width) as i64,
            s_state_stride: self.rows as i64,
            v_strides: [self.width as u64, 0],
            s_strides: [1, 0],
            v_out_strides: [self.width as u64, 0],
            s_out_strides: [1, 0],
            width: self.width as u32,
            states: self.states as u32,
            lanes: 1,
            _reserved: 0,
        }
    }

    /// f64: the merged values and score of `row`.
    fn reference(&self, row: usize) -> (Vec<f64>, f64) {
        let scores: Vec<f64> = (0..self.states).map(|k| self.s[k * self.rows + row] as f64).collect();
        let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if m == f64::NEG_INFINITY {
            return (vec![0.0; self.width], m);
        }
        let w: Vec<f64> = scores.iter().map(|s| (s - m).exp2()).collect();
        let total: f64 = w.iter().sum();
        let value = |k: usize, i: usize| self.v[(k * self.rows + row) * self.width + i].to_f32() as f64;
        let v = (0..self.width).map(|i| (0..self.states).map(|k| w[k] * value(k, i)).sum::<f64>() / total).collect();
        (v, total.log2() + m)
    }

    fn merge(&self) -> (Vec<T>, Vec<f32>) {
        let mut v_out = vec![T::from_f32(f32::NAN); self.rows * self.width];
        let mut s_out = vec![f32::NAN; self.rows];
        let params = self.params(v_out.as_mut_ptr(), s_out.as_mut_ptr());
        for row in 0..self.rows as u64 {
            // SAFETY: every buffer holds what the params address.
            unsafe { merge_row::<T>(&params, row) };
        }
        (v_out, s_out)
    }
}

fn assert_merged<T: Element>(states: &States<T>, v_out: &[T], s_out: &[f32], unit: f64) {
    for row in 0..states.rows {
        let (want_v, want_s) = states.reference(row);
        let got_s = s_out[row] as f64;
        assert!(
            got_s == want_s || (got_s - want_s).abs() <= 1e-6 * want_s.abs().max(1.0),
            "row {row}: s {got_s}, want {want_s}"
        );
        for (i, want) in want_v.iter().enumerate() {
            let got = v_out[row * states.width + i].to_f32() as f64;
            assert!((got - want).abs() <= unit * want.abs() + 1e-6, "row {row}[{i}]: {got}, want {want}");
        }
    }
}

#[test]
fn two_and_five_states_merge_as_the_f64_reference() {
    for states in [2, 5] {
        for width in [1, 7, 8, 64, 130] {
            let f32_states =
                States::<f32>::new(states, 9, width, |k, r| (k as f32 - 1.5) * 3.7 + r as f32 * 0.61 - 2.0);
            let (v, s) = f32_states.merge();
            assert_merged(&f32_states, &v, &s, 2e-6);
            let bf16_states = States::<Bf16>::new(states, 9, width, |k, r| k as f32 * 0.3 - r as f32 * 1.9);
            let (v, s) = bf16_states.merge();
            assert_merged(&bf16_states, &v, &s, 2f64.powi(-8));
        }
    }
}

#[test]
fn empty_partitions_weigh_nothing_and_all_empty_is_zero_not_nan() {
    // Row 0: state 1 empty; row 1: every state empty; row 2: state 0 empty.
    let scores = |k: usize, r: usize| match (k, r) {
        (1, 0) | (_, 1) | (0, 2) => f32::NEG_INFINITY,
        _ => 0.75 * k as f32 - 0.2,
    };
    let states = States::<f32>::new(2, 3, 16, scores);
    let (v, s) = states.merge();
    assert_merged(&states, &v, &s, 2e-6);
    assert!(v[16..32].iter().all(|&x| x == 0.0) && s[1] == f32::NEG_INFINITY, "all empty: v = 0, s = −∞");
    assert_eq!(&v[..16], &states.v[..16], "row 0 is state 0 alone");
    assert_eq!(s[0], states.s[0]);
}

#[test]
fn a_nan_score_spreads_to_its_row_only() {
    let states = States::<f32>::new(2, 2, 4, |k, r| if (k, r) == (1, 0) { f32::NAN } else { 1.0 });
    let (v, s) = states.merge();
    assert!(s[0].is_nan() && v[..4].iter().all(|x| x.is_nan()));
    assert!(s[1].is_finite() && v[4..].iter().all(|x| x.is_finite()));
}

#[test]
fn merging_in_place_reads_state_zero_before_writing_it() {
    let states = States::<f32>::new(3, 4, 24, |k, r| (k * 3 + r) as f32 * 0.37 - 1.0);
    let (want_v, want_s) = states.merge();
    let mut in_place = States::<f32>::new(3, 4, 24, |k, r| (k * 3 + r) as f32 * 0.37 - 1.0);
    let (v, s) = (in_place.v.as_mut_ptr(), in_place.s.as_mut_ptr());
    let params = in_place.params(v, s);
    for row in 0..4 {
        // SAFETY: the outputs are state 0 itself.
        unsafe { merge_row::<f32>(&params, row) };
    }
    assert_eq!(&in_place.v[..4 * 24], &want_v[..]);
    assert_eq!(&in_place.s[..4], &want_s[..]);
}
