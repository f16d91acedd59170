//! The cascade family through the public API on the CPU backend: every op and dtype against its
//! f64 reference over head dimensions from 1 to 11008, contiguous and strided rows; empty
//! partitions; in place; the validation errors (each names its argument and leaves every output
//! untouched).

mod support;

use ferrinfer_launch::reference::random_normal;
use ferrinfer_launch::{DType, Device, Error, Stream, TensorView, merge_state, merge_state_in_place};
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
