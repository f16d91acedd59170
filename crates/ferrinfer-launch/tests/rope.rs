//! The rope family through the public API on the CPU backend: every op and dtype (int32 and int64
//! positions) against its f64 reference over head dimensions from 2 to 256, contiguous and
//! strided heads, NeoX and interleaved pairs, partial rotary dimensions, positions to 2^17, and
//! for the cos/sin-cache ops tables narrower than the head; in place on views of a packed qkv
//! tensor (three-dimensional heads, and vLLM's flattened ones); the validation errors (each names
//! its argument and leaves every output untouched).

mod support;

use ferrinfer_launch::{
    DType, Error, Scalar, Stream, TensorView, apply_rope_pos_ids, apply_rope_pos_ids_inplace,
    apply_rope_with_cos_sin_cache, apply_rope_with_cos_sin_cache_inplace,
};
use support::rope::rope_scalar_variants;
use support::{Case, Cpu, assert_refused, family, run_cases_with};

/// Head dimensions: FlashInfer's 64/128/256, and others whose halves narrow the vectors (f16/bf16:
/// 72 four elements, 100 two, 6 and 2 one).
const HEAD_DIMS: [usize; 7] = [2, 6, 64, 72, 100, 128, 256];

fn cases(tokens: &[usize]) -> Vec<Case> {
    tokens
        .iter()
        .flat_map(|&t| HEAD_DIMS.into_iter().flat_map(move |d| [Case::contiguous(t, d), Case::strided(t, d)]))
        .collect()
}

#[test]
fn rope_cpu_grid() {
    run_cases_with(&Cpu, &family("rope"), 9000, &cases(&[1, 7, 99]), &rope_scalar_variants);
}

/// `apply_rope_pos_ids` with FlashInfer's defaults, on the CPU.
fn rope_defaults(
    q: &TensorView,
    k: &TensorView,
    pos: &TensorView,
    q_rope: &mut TensorView,
    k_rope: &mut TensorView,
) -> Result<(), Error> {
    apply_rope_pos_ids(q, k, pos, q_rope, k_rope, None, false, 1.0, 1e4, Stream::Cpu)
}

/// A `[tokens, heads, dim]` f32 view of `base` (elements from `offset`) at `strides`.
///
/// # Safety
/// `base` must hold every element the view addresses.
unsafe fn strided(base: *mut f32, offset: usize, shape: [usize; 3], strides: [i64; 3]) -> TensorView<'static> {
    let shape = shape.map(|d| d as i64);
    let bytes = (offset * 4) as u64;
    unsafe {
        TensorView::from_raw_parts(base.cast(), bytes, DType::F32, &shape, &strides, ferrinfer_launch::Device::Cpu)
    }
    .unwrap()
}

fn q_k(tokens: usize, q_heads: usize, k_heads: usize, dim: usize) -> (Vec<f32>, Vec<f32>) {
    let q = ferrinfer_launch::reference::random_normal(tokens * q_heads * dim, 1);
    let k = ferrinfer_launch::reference::random_normal(tokens * k_heads * dim, 2);
    (q, k)
}

/// In place on `q` and `k` viewed inside one packed `[tokens, (4 + 2 + 2) · 8]` qkv buffer (as
/// FlashInfer's example), equal to the out-of-place results; `v` untouched.
#[test]
fn in_place_on_a_packed_qkv_tensor_matches_out_of_place() {
    let (tokens, dim) = (5, 8);
    let width = (4 + 2 + 2) * dim;
    let mut qkv: Vec<f32> = ferrinfer_launch::reference::random_normal(tokens * width, 3);
    let positions: Vec<i64> = vec![0, 1, 7, 100, 70_000];
    let pos = TensorView::from_slice(&positions, &[tokens]).unwrap();
    let packed = qkv.clone();
    let (q, k): (Vec<f32>, Vec<f32>) = (
        packed.chunks(width).flat_map(|t| t[..4 * dim].to_vec()).collect(),
        packed.chunks(width).flat_map(|t| t[4 * dim..6 * dim].to_vec()).collect(),
    );
    let (mut q_rope, mut k_rope) = (vec![f32::NAN; q.len()], vec![f32::NAN; k.len()]);
    rope_defaults(
        &TensorView::from_slice(&q, &[tokens, 4, dim]).unwrap(),
        &TensorView::from_slice(&k, &[tokens, 2, dim]).unwrap(),
        &pos,
        &mut TensorView::from_slice_mut(&mut q_rope, &[tokens, 4, dim]).unwrap(),
        &mut TensorView::from_slice_mut(&mut k_rope, &[tokens, 2, dim]).unwrap(),
    )
    .unwrap();
    let (base, strides) = (qkv.as_mut_ptr(), [width as i64, dim as i64, 1]);
    // SAFETY: both views lie inside `qkv`, q's heads in each token's first 4 · dim values, k's
    // in the next 2 · dim: disjoint elements.
    let (mut q_view, mut k_view) =
        unsafe { (strided(base, 0, [tokens, 4, dim], strides), strided(base, 4 * dim, [tokens, 2, dim], strides)) };
    apply_rope_pos_ids_inplace(&mut q_view, &mut k_view, &pos, None, false, 1.0, 1e4, Stream::Cpu).unwrap();
    for (t, token) in qkv.chunks(width).enumerate() {
        assert_eq!(&token[..4 * dim], &q_rope[t * 4 * dim..(t + 1) * 4 * dim], "token {t}'s q");
        assert_eq!(&token[4 * dim..6 * dim], &k_rope[t * 2 * dim..(t + 1) * 2 * dim], "token {t}'s k");
        assert_eq!(&token[6 * dim..], &packed[t * width + 6 * dim..(t + 1) * width], "token {t}'s v");
    }
}

/// Each bad argument is refused by name, before anything is written.
#[test]
fn bad_arguments_are_refused_by_name_and_write_nothing() {
    let (tokens, dim) = (3, 8);
    let (q, k) = q_k(tokens, 4, 2, dim);
    let positions: Vec<i32> = vec![0, 1, 2];
    let (mut q_rope, mut k_rope) = (vec![f32::NAN; q.len()], vec![f32::NAN; k.len()]);
    let call = |k_shape: &[usize],
                rotary_dim: Option<u32>,
                scale: f32,
                positions: &[i32],
                q_rope: &mut [f32],
                k_rope: &mut [f32]| {
        apply_rope_pos_ids(
            &TensorView::from_slice(&q, &[tokens, 4, dim]).unwrap(),
            &TensorView::from_slice(&k[..k_shape.iter().product::<usize>()], k_shape).unwrap(),
            &TensorView::from_slice(positions, &[positions.len()]).unwrap(),
            &mut TensorView::from_slice_mut(q_rope, &[tokens, 4, dim]).unwrap(),
            &mut TensorView::from_slice_mut(&mut k_rope[..k_shape.iter().product::<usize>()], k_shape).unwrap(),
            rotary_dim,
            false,
            scale,
            1e4,
            Stream::Cpu,
        )
    };
    let invalid =
        |name: &'static str| move |e: &Error| matches!(e, Error::InvalidScalar { argument, .. } if *argument == name);
    let shape =
        |name: &'static str| move |e: &Error| matches!(e, Error::ShapeMismatch { argument, .. } if *argument == name);
    // Odd, none, past the head (u32::MAX too, which must not wrap to a small or negative one).
    for rotary_dim in [3, 0, 10, u32::MAX] {
        assert_refused(
            call(&[tokens, 2, dim], Some(rotary_dim), 1.0, &positions, &mut q_rope, &mut k_rope),
            &q_rope,
            &invalid("rotary_dim"),
        );
    }
    // A negative one is no `Option<u32>`: through the registry (as an adapter passes it), refused by its type.
    let op = &apply_rope_pos_ids::INFO;
    let mut scalars = op.examples(tokens, dim);
    scalars[op.scalars.iter().position(|s| s.name == "rotary_dim").unwrap()] = Scalar::I32(-2);
    let negative = {
        let views = [
            TensorView::from_slice(&q, &[tokens, 4, dim]).unwrap(),
            TensorView::from_slice(&k, &[tokens, 2, dim]).unwrap(),
            TensorView::from_slice(&positions, &[tokens]).unwrap(),
            TensorView::from_slice_mut(&mut q_rope, &[tokens, 4, dim]).unwrap(),
            TensorView::from_slice_mut(&mut k_rope, &[tokens, 2, dim]).unwrap(),
        ];
        op.call(&views.iter().collect::<Vec<_>>(), &scalars, Stream::Cpu)
    };
    assert_refused(negative, &q_rope, &invalid("rotary_dim"));
    assert_refused(
        call(&[tokens, 2, dim], None, 0.0, &positions, &mut q_rope, &mut k_rope),
        &q_rope,
        &invalid("rope_scale"),
    );
    assert_refused(call(&[tokens, 2, 4], None, 1.0, &positions, &mut q_rope, &mut k_rope), &q_rope, &shape("k"));
    assert_refused(
        call(&[tokens, 2, dim], None, 1.0, &positions[..2], &mut q_rope, &mut k_rope),
        &q_rope,
        &shape("pos_ids"),
    );
    // q_rope over q itself (out of place) overlaps its input.
    let mut aliased = q.clone();
    let base = aliased.as_mut_ptr();
    let k_view = TensorView::from_slice(&k, &[tokens, 2, dim]).unwrap();
    let pos = TensorView::from_slice(&positions, &[tokens]).unwrap();
    let mut k_out = TensorView::from_slice_mut(&mut k_rope, &[tokens, 2, dim]).unwrap();
    // SAFETY (each): views of `aliased`, which holds tokens · 4 · dim elements.
    let q_view = unsafe { strided(base, 0, [tokens, 4, dim], [32, 8, 1]) };
    let refused = rope_defaults(
        &q_view,
        &k_view,
        &pos,
        &mut unsafe { strided(base, 0, [tokens, 4, dim], [32, 8, 1]) },
        &mut k_out,
    );
    assert!(matches!(refused, Err(Error::Overlap { argument: "q_rope", other: "q" })), "{refused:?}");
    // Outputs whose elements share memory — heads folded onto one by a stride of 0, or k_rope
    // over q_rope's second half — would be written twice at once.
    let mut outputs = vec![f32::NAN; tokens * 4 * dim];
    let out = outputs.as_mut_ptr();
    let q_in = TensorView::from_slice(&q, &[tokens, 4, dim]).unwrap();
    // SAFETY (each): views of `outputs`, which holds tokens · 4 · dim elements.
    let folded =
        rope_defaults(&q_in, &k_view, &pos, &mut unsafe { strided(out, 0, [tokens, 4, dim], [32, 0, 1]) }, &mut k_out);
    assert!(matches!(folded, Err(Error::UnsupportedLayout { argument: "q_rope", .. })), "{folded:?}");
    let (mut q_out, mut k_over) =
        unsafe { (strided(out, 0, [tokens, 4, dim], [32, 8, 1]), strided(out, 16, [tokens, 2, dim], [32, 8, 1])) };
    let overlapping = rope_defaults(&q_in, &k_view, &pos, &mut q_out, &mut k_over);
    assert!(matches!(overlapping, Err(Error::Overlap { argument: "k_rope", other: "q_rope" })), "{overlapping:?}");
    assert!(k_rope.iter().chain(&outputs).all(|v| v.is_nan()), "an output written on an error path");
}

/// A ragged batch's `indptr` must hold a segment where there are tokens (on any device) and run
/// from 0 to nnz, never down (on the CPU, where it is read before anything is written);
/// `offsets` takes `indptr`'s integer type and one value a segment.
#[test]
fn bad_segments_are_refused_by_name_and_write_nothing() {
    let (tokens, dim) = (4, 8);
    let (q, k) = q_k(tokens, 4, 2, dim);
    let offsets: Vec<i32> = vec![0, 10];
    let call = |indptr: &[i32], offsets: &TensorView, q_rope: &mut [f32]| {
        let mut k_rope = vec![f32::NAN; k.len()];
        ferrinfer_launch::apply_rope(
            &TensorView::from_slice(&q, &[tokens, 4, dim]).unwrap(),
            &TensorView::from_slice(&k, &[tokens, 2, dim]).unwrap(),
            &TensorView::from_slice(indptr, &[indptr.len()]).unwrap(),
            offsets,
            &mut TensorView::from_slice_mut(q_rope, &[tokens, 4, dim]).unwrap(),
            &mut TensorView::from_slice_mut(&mut k_rope, &[tokens, 2, dim]).unwrap(),
            None,
            false,
            1.0,
            1e4,
            Stream::Cpu,
        )
    };
    let mut q_rope = vec![f32::NAN; q.len()];
    let offsets_view = TensorView::from_slice(&offsets, &[2]).unwrap();
    let invalid = |e: &Error| matches!(e, Error::InvalidScalar { argument: "indptr", .. });
    for indptr in [[1, 2, 4], [0, 3, 2], [0, 1, 3]] {
        assert_refused(call(&indptr, &offsets_view, &mut q_rope), &q_rope, &invalid);
    }
    let wide: Vec<i64> = vec![0, 10];
    let mismatched = call(&[0, 1, 4], &TensorView::from_slice(&wide, &[2]).unwrap(), &mut q_rope);
    assert_refused(mismatched, &q_rope, &|e| matches!(e, Error::DTypeMismatch { argument: "offsets", .. }));
    let short = call(&[0, 1, 4], &TensorView::from_slice(&offsets[..1], &[1]).unwrap(), &mut q_rope);
    assert_refused(short, &q_rope, &|e| matches!(e, Error::ShapeMismatch { argument: "offsets", .. }));
    let no_segments = call(&[0], &TensorView::from_slice(&offsets[..0], &[0]).unwrap(), &mut q_rope);
    assert_refused(no_segments, &q_rope, &|e| matches!(e, Error::ShapeMismatch { argument: "indptr", .. }));
    call(&[0, 1, 4], &offsets_view, &mut q_rope).unwrap();
    assert!(q_rope.iter().all(|v| v.is_finite()));
}

/// The cache ops with tables narrower than the head (partial rotary: the values past the
/// table's width copied, or left in place): half the head where that is even, and one pair.
#[test]
fn cos_sin_cache_tables_narrower_than_the_head() {
    support::rope::run_narrow_tables(&Cpu, 9100, &cases(&[1, 7]));
}

/// vLLM's layout: `query` and `key` two-dimensional column slices of one packed `[tokens, (4 +
/// 2 + 2) · 8]` qkv buffer, turned in place, equal to the out-of-place results on copies; `v`
/// and the table untouched.
#[test]
fn cos_sin_cache_in_place_on_a_packed_qkv_tensor_matches_out_of_place() {
    let (tokens, dim, rows) = (5, 8, 64);
    let width = (4 + 2 + 2) * dim;
    let mut qkv: Vec<f32> = ferrinfer_launch::reference::random_normal(tokens * width, 3);
    let table: Vec<f32> = ferrinfer_launch::reference::random_normal(rows * dim, 4);
    let positions: Vec<i64> = vec![0, 1, 7, 63, 30];
    let pos = TensorView::from_slice(&positions, &[tokens]).unwrap();
    let cache = TensorView::from_slice(&table, &[rows, dim]).unwrap();
    let packed = qkv.clone();
    let columns =
        |from: usize, to: usize| -> Vec<f32> { packed.chunks(width).flat_map(|t| t[from..to].to_vec()).collect() };
    let (q, k) = (columns(0, 4 * dim), columns(4 * dim, 6 * dim));
    let (mut q_out, mut k_out) = (vec![f32::NAN; q.len()], vec![f32::NAN; k.len()]);
    apply_rope_with_cos_sin_cache(
        &pos,
        &TensorView::from_slice(&q, &[tokens, 4 * dim]).unwrap(),
        &TensorView::from_slice(&k, &[tokens, 2 * dim]).unwrap(),
        &cache,
        &mut TensorView::from_slice_mut(&mut q_out, &[tokens, 4 * dim]).unwrap(),
        &mut TensorView::from_slice_mut(&mut k_out, &[tokens, 2 * dim]).unwrap(),
        dim as i32,
        false,
        Stream::Cpu,
    )
    .unwrap();
    let base = qkv.as_mut_ptr();
    let flat = |offset: usize, columns: usize| {
        let shape = [tokens as i64, columns as i64];
        // SAFETY: the view lies inside `qkv` (each token's `columns` values from `offset`).
        unsafe {
            TensorView::from_raw_parts(
                base.cast(),
                (offset * 4) as u64,
                DType::F32,
                &shape,
                &[width as i64, 1],
                ferrinfer_launch::Device::Cpu,
            )
        }
        .unwrap()
    };
    let (mut q_view, mut k_view) = (flat(0, 4 * dim), flat(4 * dim, 2 * dim));
    apply_rope_with_cos_sin_cache_inplace(&pos, &mut q_view, &mut k_view, &cache, dim as i32, false, Stream::Cpu)
        .unwrap();
    for (t, token) in qkv.chunks(width).enumerate() {
        assert_eq!(&token[..4 * dim], &q_out[t * 4 * dim..(t + 1) * 4 * dim], "token {t}'s query");
        assert_eq!(&token[4 * dim..6 * dim], &k_out[t * 2 * dim..(t + 1) * 2 * dim], "token {t}'s key");
        assert_eq!(&token[6 * dim..], &packed[t * width + 6 * dim..(t + 1) * width], "token {t}'s value");
    }
}

/// Each bad argument of the cache op is refused by name, before anything is written: the
/// table's dtype, shape and width; `head_size`; positions outside the table (on the CPU).
#[test]
fn bad_cos_sin_cache_arguments_are_refused_by_name_and_write_nothing() {
    let (tokens, dim, rows) = (3, 8, 16);
    let (q, k) = q_k(tokens, 4, 2, dim);
    let table: Vec<f32> = ferrinfer_launch::reference::random_normal(rows * dim, 5);
    let positions: Vec<i32> = vec![0, 15, 2];
    let mut out = vec![f32::NAN; q.len()];
    let call = |positions: &[i32], cache: &TensorView, head_size: i32, q_shape: &[usize], out: &mut [f32]| {
        let mut k_out = vec![f32::NAN; k.len()];
        apply_rope_with_cos_sin_cache(
            &TensorView::from_slice(positions, &[positions.len()]).unwrap(),
            &TensorView::from_slice(&q, q_shape).unwrap(),
            &TensorView::from_slice(&k, &[tokens, 2 * dim]).unwrap(),
            cache,
            &mut TensorView::from_slice_mut(out, q_shape).unwrap(),
            &mut TensorView::from_slice_mut(&mut k_out, &[tokens, 2 * dim]).unwrap(),
            head_size,
            true,
            Stream::Cpu,
        )
    };
    let named = |kind: &'static str, name: &'static str| {
        move |e: &Error| match e {
            Error::InvalidScalar { argument, .. } => kind == "invalid" && *argument == name,
            Error::ShapeMismatch { argument, .. } => kind == "shape" && *argument == name,
            Error::UnsupportedDType { argument, .. } => kind == "dtype" && *argument == name,
            _ => false,
        }
    };
    let cache = TensorView::from_slice(&table, &[rows, dim]).unwrap();
    let q_shape = [tokens, 4 * dim];
    for outside in [[0, 16, 2], [0, -1, 2]] {
        assert_refused(call(&outside, &cache, dim as i32, &q_shape, &mut out), &out, &named("invalid", "positions"));
    }
    for head_size in [0, -8] {
        assert_refused(call(&positions, &cache, head_size, &q_shape, &mut out), &out, &named("invalid", "head_size"));
    }
    // 32 columns are not whole heads of 12, nor is [3, 4, 8] of 16.
    assert_refused(call(&positions, &cache, 12, &q_shape, &mut out), &out, &named("shape", "query"));
    assert_refused(call(&positions, &cache, 16, &[tokens, 4, dim], &mut out), &out, &named("shape", "query"));
    let half = vec![half::f16::ZERO; rows * dim];
    let f16_cache = TensorView::from_slice(&half, &[rows, dim]).unwrap();
    assert_refused(
        call(&positions, &f16_cache, dim as i32, &q_shape, &mut out),
        &out,
        &named("dtype", "cos_sin_cache"),
    );
    // An odd width, and one wider than the head.
    let wide: Vec<f32> = ferrinfer_launch::reference::random_normal(rows * 10, 6);
    for width in [3, 10] {
        let misfit = TensorView::from_slice(&wide[..rows * width], &[rows, width]).unwrap();
        let refused = call(&positions, &misfit, dim as i32, &q_shape, &mut out);
        assert_refused(refused, &out, &named("shape", "cos_sin_cache"));
    }
    // The 3-dimensional form of the same heads runs.
    call(&positions, &cache, dim as i32, &[tokens, 4, dim], &mut out).unwrap();
    assert!(out.iter().all(|v| v.is_finite()));
}
