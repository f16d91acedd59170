//! The cascade family through the public API on the CPU backend: every op and dtype against its
//! f64 reference over head dimensions from 1 to 11008, contiguous and strided rows; empty
//! partitions; in place; the validation errors (each names its argument and leaves every output
//! untouched).

mod support;

use ferrinfer_launch::reference::random_normal;
use ferrinfer_launch::{DType, Device, Error, Stream, TensorView, merge_state, merge_state_in_place, merge_states};
use support::{Case, Cpu, assert_refused, family, run_cases};

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for rows in [1, 19, 99, 256] {
        for width in [1, 7, 64, 128, 256, 500, 11008] {
            cases.extend([Case::contiguous(rows, width), Case::strided(rows, width)]);
        }
    }
    cases
}

#[test]
fn cascade_cpu_grid() {
    run_cases(&Cpu, &family("cascade"), 4000, &cases());
}

/// The GPU sanitizer's cases on the CPU backend.
#[test]
fn cascade_cpu_sanitizer_cases() {
    run_cases(&Cpu, &family("cascade"), 7_600_000, &support::sanitizer_cases());
}

/// The > 2^31 GPU test's check, here on the CPU: slices of rows of every tensor, the one score
/// a row included, against the reference of those rows.
#[test]
fn a_run_checked_in_slices_of_rows_passes_slice_by_slice() {
    let (op, case) = (&merge_state::INFO, Case::contiguous(1000, 64));
    let before = support::buffers(op, DType::Bf16, false, &case, 9);
    let mut after = before.clone();
    support::Runner::run(&Cpu, op, &mut after, &[]).unwrap();
    let failures = support::check_in_slices(op, DType::Bf16, &case, &before, &after, &[], 300);
    assert!(failures.is_empty(), "{failures:?}");
}

fn view<'a>(x: &'a [f32], shape: &[usize]) -> TensorView<'a> {
    TensorView::from_slice(x, shape).unwrap()
}

/// Values `[rows, 4]` and scores `[rows]` of one state.
fn state(rows: usize, seed: u64, scores: &[f32]) -> (Vec<f32>, Vec<f32>) {
    (random_normal(rows * 4, seed), scores.to_vec())
}

/// `merge_state` of two states of `[rows, 4]` into new (NaN-poisoned) ones.
fn merged((v_a, s_a): &(Vec<f32>, Vec<f32>), (v_b, s_b): &(Vec<f32>, Vec<f32>)) -> (Vec<f32>, Vec<f32>) {
    let rows = s_a.len();
    let (mut v, mut s) = (vec![f32::NAN; rows * 4], vec![f32::NAN; rows]);
    merge_state(
        &view(v_a, &[rows, 4]),
        &view(s_a, &[rows]),
        &view(v_b, &[rows, 4]),
        &view(s_b, &[rows]),
        &mut TensorView::from_slice_mut(&mut v, &[rows, 4]).unwrap(),
        &mut TensorView::from_slice_mut(&mut s, &[rows]).unwrap(),
        Stream::Cpu,
    )
    .unwrap();
    (v, s)
}

#[test]
fn empty_partitions_weigh_nothing_and_both_empty_merge_to_zero() {
    let inf = f32::NEG_INFINITY;
    let (a, b) = (state(3, 1, &[0.5, inf, inf]), state(3, 2, &[inf, -1.0, inf]));
    let (v, s) = merged(&a, &b);
    let (v_a, v_b) = (&a.0, &b.0);
    assert_eq!((&v[..4], s[0]), (&v_a[..4], 0.5), "b empty: a alone");
    assert_eq!((&v[4..8], s[1]), (&v_b[4..8], -1.0), "a empty: b alone");
    assert_eq!((&v[8..], s[2]), (&[0.0; 4][..], inf), "both empty: 0 and −∞, no NaN");
}

#[test]
fn merging_in_place_equals_merging_into_new_tensors() {
    let (a, b) = (state(5, 3, &[0.1, 2.0, -3.0, 0.0, 7.5]), state(5, 4, &[1.0, -2.0, -3.0, 0.25, 7.0]));
    let (v, s) = merged(&a, &b);
    let ((v_a, s_a), (v_b, s_b)) = (&a, &b);
    let (mut v_in_place, mut s_in_place) = (v_a.clone(), s_a.clone());
    merge_state_in_place(
        &mut TensorView::from_slice_mut(&mut v_in_place, &[5, 4]).unwrap(),
        &mut TensorView::from_slice_mut(&mut s_in_place, &[5]).unwrap(),
        &view(v_b, &[5, 4]),
        &view(s_b, &[5]),
        Stream::Cpu,
    )
    .unwrap();
    assert_eq!((v_in_place, s_in_place), (v, s));
}

#[test]
fn cascade_errors_name_the_argument_and_leave_the_outputs_untouched() {
    let (v_a, s_a) = state(4, 5, &[0.0; 4]);
    let (v_b, s_b) = state(4, 6, &[1.0; 4]);
    let (mut v, mut s) = (vec![f32::NAN; 16], vec![f32::NAN; 4]);
    let mut call = |v_b_shape: &[usize], s_a: &[f32], s_a_shape: &[usize]| {
        let result = merge_state(
            &view(&v_a, &[4, 4]),
            &view(s_a, s_a_shape),
            &view(&v_b[..v_b_shape.iter().product()], v_b_shape),
            &view(&s_b, &[4]),
            &mut TensorView::from_slice_mut(&mut v, &[4, 4]).unwrap(),
            &mut TensorView::from_slice_mut(&mut s, &[4]).unwrap(),
            Stream::Cpu,
        );
        (result, v.clone(), s.clone())
    };
    let (result, v_after, s_after) = call(&[4, 3], &s_a, &[4]);
    assert!(s_after.iter().all(|x| x.is_nan()));
    assert_refused(result, &v_after, &|e| {
        matches!(e, Error::ShapeMismatch { argument: "v_b", .. }) && e.to_string().contains("[4, 4]")
    });
    let (result, v_after, _) = call(&[4, 4], &s_a[..2], &[2]);
    assert_refused(result, &v_after, &|e| {
        matches!(e, Error::ShapeMismatch { argument: "s_a", .. }) && e.to_string().contains("one score a row")
    });
    // Scores must be f32 whatever the values' dtype.
    let s_bf16 = vec![half::bf16::ZERO; 4];
    let result = merge_state(
        &view(&v_a, &[4, 4]),
        &TensorView::from_slice(&s_bf16, &[4]).unwrap(),
        &view(&v_b, &[4, 4]),
        &view(&s_b, &[4]),
        &mut TensorView::from_slice_mut(&mut v, &[4, 4]).unwrap(),
        &mut TensorView::from_slice_mut(&mut s, &[4]).unwrap(),
        Stream::Cpu,
    );
    assert_refused(result, &v, &|e| matches!(e, Error::UnsupportedDType { argument: "s_a", .. }));
    // In place, the other state may not overlap the one updated.
    let (mut values, mut scores) = (v_a.clone(), s_a.clone());
    let before = values.clone();
    // Rows 0–1 updated, rows 1–2 the other state: row 1 in both.
    let raw = |data: &mut Vec<f32>, byte_offset: u64| unsafe {
        TensorView::from_raw_parts(data.as_mut_ptr().cast(), byte_offset, DType::F32, &[2, 4], &[4, 1], Device::Cpu)
            .unwrap()
    };
    let mut updated = raw(&mut values, 0);
    let overlapping = raw(&mut values, 16);
    let result = merge_state_in_place(
        &mut updated,
        &mut TensorView::from_slice_mut(&mut scores[..2], &[2]).unwrap(),
        &overlapping,
        &view(&s_b[..2], &[2]),
        Stream::Cpu,
    );
    assert!(matches!(result, Err(Error::Overlap { argument: "v", other: "v_other" })), "{result:?}");
    assert_eq!(values, before);
}

/// `merge_states` of `v` (`[seq, states, heads, 4]`, strided as given) and `s` into new
/// (NaN-poisoned) `[seq, heads, 4]` / `[seq, heads]` tensors.
fn merged_stack(v: &TensorView, s: &TensorView) -> Result<(Vec<f32>, Vec<f32>), Error> {
    let (seq, heads, width) = (v.shape()[0] as usize, v.shape()[2] as usize, v.shape()[3] as usize);
    let (mut v_out, mut s_out) = (vec![f32::NAN; seq * heads * width], vec![f32::NAN; seq * heads]);
    merge_states(
        v,
        s,
        &mut TensorView::from_slice_mut(&mut v_out, &[seq, heads, width])?,
        &mut TensorView::from_slice_mut(&mut s_out, &[seq, heads])?,
        Stream::Cpu,
    )?;
    Ok((v_out, s_out))
}

/// Two stacked states merge bitwise as `merge_state` merges them (one arithmetic, one step),
/// heads and all; one state merges to itself; none to zeros and −∞.
#[test]
fn merge_states_agrees_with_merge_state_and_with_one_and_no_state() {
    let (seq, heads, width) = (3usize, 2usize, 4usize);
    let inf = f32::NEG_INFINITY;
    // [seq, 2, heads, width], and each state's [seq, heads, width] apart.
    let v: Vec<f32> = random_normal(seq * 2 * heads * width, 11);
    let s: Vec<f32> = vec![0.5, 1.0, inf, -2.0, 3.0, inf, inf, inf, -1.0, 4.0, 2.5, inf];
    let state = |k: usize| -> (Vec<f32>, Vec<f32>) {
        let rows = (0..seq).flat_map(|i| (0..heads).map(move |h| (i, h)));
        let values = rows.clone().flat_map(|(i, h)| v[((i * 2 + k) * heads + h) * width..][..width].to_vec()).collect();
        (values, rows.map(|(i, h)| s[(i * 2 + k) * heads + h]).collect())
    };
    let stacked = merged_stack(&view(&v, &[seq, 2, heads, width]), &view(&s, &[seq, 2, heads])).unwrap();
    let rows = seq * heads;
    let (a, b) = (state(0), state(1));
    let pairwise = {
        let (mut v_out, mut s_out) = (vec![f32::NAN; rows * width], vec![f32::NAN; rows]);
        merge_state(
            &view(&a.0, &[rows, width]),
            &view(&a.1, &[rows]),
            &view(&b.0, &[rows, width]),
            &view(&b.1, &[rows]),
            &mut TensorView::from_slice_mut(&mut v_out, &[rows, width]).unwrap(),
            &mut TensorView::from_slice_mut(&mut s_out, &[rows]).unwrap(),
            Stream::Cpu,
        )
        .unwrap();
        (v_out, s_out)
    };
    assert_eq!(stacked, pairwise);
    assert!(stacked.1.iter().filter(|x| x.is_infinite()).count() == 1, "one row of two empty states: {:?}", stacked.1);
    let one = merged_stack(&view(&a.0, &[seq, 1, heads, width]), &view(&a.1, &[seq, 1, heads])).unwrap();
    let a_empty: Vec<bool> = a.1.iter().map(|&x| x == inf).collect();
    let expected: Vec<f32> = a.0.iter().enumerate().map(|(i, &x)| if a_empty[i / width] { 0.0 } else { x }).collect();
    assert_eq!(one, (expected, a.1.clone()), "one state: itself (an empty one: zeros)");
    let none = merged_stack(&view(&[], &[seq, 0, heads, width]), &view(&[], &[seq, 0, heads])).unwrap();
    assert_eq!(none, (vec![0.0; rows * width], vec![inf; rows]), "no states: zeros and −∞");
}

/// States that are not neighbours in memory (`v` as a `[states, seq, heads, dim]` buffer seen as
/// `[seq, states, heads, dim]`), five of them, against the f64 merge.
#[test]
fn merge_states_takes_states_at_any_distance() {
    let (seq, states, heads, width) = (4usize, 5usize, 3usize, 4usize);
    let v: Vec<f32> = random_normal(states * seq * heads * width, 12);
    let s: Vec<f32> = random_normal::<f32>(states * seq * heads, 13).iter().map(|x| x * 3.0).collect();
    let row = (heads * width) as i64;
    let v_view =
        TensorView::from_slice_strided(&v, &[seq, states, heads, width], &[row, seq as i64 * row, width as i64, 1])
            .unwrap();
    let s_view =
        TensorView::from_slice_strided(&s, &[seq, states, heads], &[heads as i64, (seq * heads) as i64, 1]).unwrap();
    let (v_out, s_out) = merged_stack(&v_view, &s_view).unwrap();
    for (i, h) in (0..seq).flat_map(|i| (0..heads).map(move |h| (i, h))) {
        let score = |k: usize| s[(k * seq + i) * heads + h] as f64;
        let m = (0..states).map(score).fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = (0..states).map(|k| (score(k) - m).exp2()).collect();
        let total: f64 = w.iter().sum();
        let row_out = (i * heads + h) * width;
        for d in 0..width {
            let expected =
                (0..states).map(|k| w[k] * v[((k * seq + i) * heads + h) * width + d] as f64).sum::<f64>() / total;
            assert!(
                (v_out[row_out + d] as f64 - expected).abs() < 1e-5,
                "({i}, {h}, {d}): {} vs {expected}",
                v_out[row_out + d]
            );
        }
        assert!((s_out[i * heads + h] as f64 - (total.log2() + m)).abs() < 1e-5);
    }
}

#[test]
fn merge_states_errors_name_the_argument_and_leave_the_outputs_untouched() {
    let v: Vec<f32> = random_normal(2 * 3 * 4, 14);
    let s = [0.0f32; 2 * 3];
    let (mut v_out, mut s_out) = (vec![f32::NAN; 2 * 4], vec![f32::NAN; 2]);
    let mut call = |v_shape: &[usize], s_shape: &[usize], v_out_shape: &[usize], s_out_shape: &[usize]| {
        let result = merge_states(
            &view(&v, v_shape),
            &view(&s[..s_shape.iter().product()], s_shape),
            &mut TensorView::from_slice_mut(&mut v_out[..v_out_shape.iter().product()], v_out_shape).unwrap(),
            &mut TensorView::from_slice_mut(&mut s_out[..s_out_shape.iter().product()], s_out_shape).unwrap(),
            Stream::Cpu,
        );
        (result, v_out.clone(), s_out.clone())
    };
    // (v, s, v_merged, s_merged shapes; what the error says)
    type Case<'a> = (&'a [usize], &'a [usize], &'a [usize], &'a [usize], &'a str);
    let cases: [Case; 4] = [
        (&[6, 4], &[6], &[2, 4], &[2], "at least 3 dimensions"),
        (&[2, 3, 4], &[3, 2], &[2, 4], &[2], "a score a state"),
        (&[2, 3, 4], &[2, 3], &[2, 2], &[2], "without num_states"),
        (&[2, 3, 4], &[2, 3], &[2, 4], &[1], "without num_states and head_dim"),
    ];
    for (v_shape, s_shape, v_out_shape, s_out_shape, says) in cases {
        let (result, v_after, s_after) = call(v_shape, s_shape, v_out_shape, s_out_shape);
        assert!(s_after.iter().all(|x| x.is_nan()));
        assert_refused(result, &v_after, &|e| matches!(e, Error::ShapeMismatch { .. }) && e.to_string().contains(says));
    }
    // The merged values may not be written over the states.
    let mut stacked = v.clone();
    let result = {
        let (head, tail) = stacked.split_at_mut(8);
        let states = TensorView::from_slice(&tail[..8], &[2, 1, 4]).unwrap();
        merge_states(
            &states,
            &view(&s[..2], &[2, 1]),
            &mut TensorView::from_slice_mut(head, &[2, 4]).unwrap(),
            &mut TensorView::from_slice_mut(&mut s_out, &[2]).unwrap(),
            Stream::Cpu,
        )
    };
    assert!(result.is_ok(), "apart: fine");
    let base = stacked.as_mut_ptr();
    // SAFETY: both views lie in `stacked`, which outlives them; the call must refuse before writing.
    let (states, mut out) = unsafe {
        (
            TensorView::from_raw_parts(base as *mut _, 0, DType::F32, &[2, 1, 4], &[4, 4, 1], Device::Cpu).unwrap(),
            TensorView::from_raw_parts(base as *mut _, 16, DType::F32, &[2, 4], &[4, 1], Device::Cpu).unwrap(),
        )
    };
    let error = merge_states(
        &states,
        &view(&s[..2], &[2, 1]),
        &mut out,
        &mut TensorView::from_slice_mut(&mut s_out, &[2]).unwrap(),
        Stream::Cpu,
    )
    .unwrap_err();
    assert!(matches!(error, Error::Overlap { argument: "v_merged", other: "v" }), "{error}");
}
