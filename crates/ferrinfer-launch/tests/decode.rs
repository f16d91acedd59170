//! The decode family through the public API on the CPU backend: both ops, every dtype and index
//! type, head_dim 64, 128 and 256, contiguous and strided rows, against the f64 reference — the
//! registry's problems (requests of 0, 1, a page, several pages and several work items; pages
//! out of order), with each scalar's variants (HND, RoPE, a soft cap, a window, scales); the
//! plan; the validation errors, each naming its argument and leaving the outputs untouched.

mod support;

use ferrinfer_launch::decode::{Split, plan};
use ferrinfer_launch::{Error, KvLayout, PosEncodingMode, Stream, TensorView, single_decode_with_kv_cache};
use support::decode::{HEAD_DIMS, variants};
use support::{Case, Cpu, assert_refused, family, run_cases_with};

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for rows in [1, 3, 9, 17] {
        for head_dim in HEAD_DIMS {
            cases.extend([Case::contiguous(rows, head_dim), Case::strided(rows, head_dim)]);
        }
    }
    cases
}

#[test]
fn decode_cpu_grid() {
    run_cases_with(&Cpu, &family("decode"), 6000, &cases(), &variants);
}

#[test]
fn a_plan_covers_every_request_in_items_of_its_keys() {
    let lengths = [0u64, 1, 4096, 300, 70_000];
    let (work, bounds) = plan(&lengths, 8, Split::Auto { multiprocessors: 132 });
    assert_eq!(bounds.len(), lengths.len() + 1);
    for (b, &len) in lengths.iter().enumerate() {
        let items: Vec<&[i32]> =
            work.chunks(3).skip(bounds[b] as usize).take((bounds[b + 1] - bounds[b]) as usize).collect();
        assert!(!items.is_empty(), "request {b} has an item");
        assert_eq!(items[0][1], 0);
        assert_eq!(items[items.len() - 1][2] as u64, len, "request {b}'s items end at its length");
        assert!(items.windows(2).all(|w| w[0][2] == w[1][1] && w[0][0] == b as i32), "consecutive ranges");
    }
}

/// `[num_qo_heads, head_dim]` of f32 zeros and its score.
fn outputs(heads: usize, dim: usize) -> (Vec<f32>, Vec<f32>) {
    (vec![f32::NAN; heads * dim], vec![f32::NAN; heads])
}

fn single(
    q: &[f32],
    k: &[f32],
    kv_len: usize,
    (heads, kv_heads, dim): (usize, usize, usize),
    out: &mut [f32],
    lse: &mut [f32],
    window_left: i32,
) -> Result<(), Error> {
    let q = TensorView::from_slice(q, &[heads, dim]).unwrap();
    let k = TensorView::from_slice(k, &[kv_len, kv_heads, dim]).unwrap();
    let mut out = TensorView::from_slice_mut(out, &[heads, dim]).unwrap();
    let mut lse = TensorView::from_slice_mut(lse, &[heads]).unwrap();
    single_decode_with_kv_cache(
        &q,
        &k,
        &k,
        &mut out,
        &mut lse,
        KvLayout::Nhd,
        PosEncodingMode::None,
        false,
        None,
        None,
        None,
        window_left,
        None,
        None,
        None,
        None,
        false,
        Stream::Cpu,
    )
}

#[test]
fn no_key_gives_zeros_and_minus_infinity() {
    let (q, k) = (vec![1.0f32; 2 * 64], Vec::<f32>::new());
    let (mut out, mut lse) = outputs(2, 64);
    single(&q, &k, 0, (2, 1, 64), &mut out, &mut lse, -1).unwrap();
    assert!(out.iter().all(|&x| x == 0.0));
    assert!(lse.iter().all(|&x| x == f32::NEG_INFINITY));
}

#[test]
fn one_key_gives_its_value_and_its_score() {
    let q = vec![0.5f32; 64];
    let k: Vec<f32> = (0..64).map(|i| i as f32 / 64.0).collect();
    let (mut out, mut lse) = outputs(1, 64);
    single(&q, &k, 1, (1, 1, 64), &mut out, &mut lse, -1).unwrap();
    assert_eq!(out, k, "one key: its value");
    let dot: f32 = k.iter().map(|x| 0.5 * x).sum();
    let expected = dot / 8.0 * std::f32::consts::LOG2_E;
    assert!((lse[0] - expected).abs() < 1e-5, "{} vs {expected}", lse[0]);
}

#[test]
fn bad_calls_are_refused_before_anything_is_written() {
    let q = vec![0.0f32; 4 * 64];
    let k = vec![0.0f32; 10 * 3 * 64];
    let (mut out, mut lse) = outputs(4, 64);
    // 4 query heads over 3 kv heads: no whole group.
    let result = single(&q, &k, 10, (4, 3, 64), &mut out, &mut lse, -1);
    assert_refused(result, &out, &|e| matches!(e, Error::ShapeMismatch { argument: "q", .. }));
    let q48 = vec![0.0f32; 4 * 48];
    let k48 = vec![0.0f32; 10 * 48];
    let (mut out48, mut lse48) = outputs(4, 48);
    let result = single(&q48, &k48, 10, (4, 1, 48), &mut out48, &mut lse48, -1);
    assert_refused(result, &out48, &|e| {
        matches!(e, Error::ShapeMismatch { argument: "q", .. }) && e.to_string().contains("64, 128, 256")
    });
}
