//! The page family through the public API on the CPU backend: `append_paged_kv_cache` for every
//! dtype and index type against its f64 reference — the registry's problems (contiguous and
//! strided rows), both layouts, page sizes 1 to 64, sequences with entries before the append, a
//! single packed `[pages, 2, …]` cache; the validation errors, page tables' values included (each
//! names its argument and leaves both caches untouched); `get_batch_indices_positions` with more
//! and fewer tokens than the bounds hold, empty sequences, and its errors.

mod support;

use ferrinfer_launch::scalar::ScalarType;
use ferrinfer_launch::{DType, Error, KvLayout, Scalar, Stream, TensorView, append_paged_kv_cache};
use support::page::PagedCase;
use support::{Case, Cpu, family, run_cases};

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for rows in [1, 2, 3, 19, 99, 256] {
        for head_dim in [1, 7, 64, 128, 256] {
            cases.extend([Case::contiguous(rows, head_dim), Case::strided(rows, head_dim)]);
        }
    }
    cases
}

#[test]
fn page_cpu_grid() {
    run_cases(&Cpu, &family("page"), 5000, &cases());
}

/// Both layouts, page sizes from 1 to 64 (a prime one too), entries before the append, one
/// sequence or many, every dtype, int32 and int64 page tables.
pub fn paged_cases() -> Vec<PagedCase> {
    let mut cases = Vec::new();
    for layout in [KvLayout::Nhd, KvLayout::Hnd] {
        for (page_size, prefix) in [(1, 0), (5, 3), (16, 0), (16, 17), (64, 100)] {
            for (tokens, sequences) in [(1, 1), (40, 3), (130, 7)] {
                for index in [DType::I32, DType::I64] {
                    let (heads, head_dim) = (3, 24);
                    cases.push(PagedCase { tokens, sequences, heads, head_dim, page_size, layout, index, prefix });
                }
            }
        }
    }
    cases
}

#[test]
fn page_cpu_layouts_and_page_sizes() {
    for case in paged_cases() {
        for dtype in [DType::F16, DType::Bf16, DType::F32] {
            case.run(&Cpu, dtype, 77).unwrap();
        }
    }
}

/// The caches of FlashInfer's single tensor, `[pages, 2, page_size, heads, head_dim]`: the keys
/// and values halves of each page, apart though their spans interleave.
#[test]
fn a_packed_cache_takes_keys_and_values_in_its_halves() {
    let (pages, page_size, heads, dim) = (4usize, 2usize, 2usize, 4usize);
    let key: Vec<f32> = (0..heads * dim).map(|i| i as f32).collect();
    let value: Vec<f32> = (0..heads * dim).map(|i| 100.0 + i as f32).collect();
    let mut cache = vec![f32::NAN; pages * 2 * page_size * heads * dim];
    let base = cache.as_mut_ptr();
    let page = (2 * page_size * heads * dim) as i64;
    let half = |offset: usize| {
        let shape = [pages as i64, page_size as i64, heads as i64, dim as i64];
        let strides = [page, (heads * dim) as i64, dim as i64, 1];
        // SAFETY: both halves lie inside `cache`, which outlives the views.
        unsafe {
            TensorView::from_raw_parts(
                base.cast(),
                offset as u64 * 4,
                DType::F32,
                &shape,
                &strides,
                ferrinfer_launch::Device::Cpu,
            )
        }
        .unwrap()
    };
    let (mut k_cache, mut v_cache) = (half(0), half(page_size * heads * dim));
    let index = |values: &'static [i32]| TensorView::from_slice(values, &[values.len()]).unwrap();
    // One sequence of pages [2, 0], two entries in its second page: token 0 lands at its entry 1.
    append_paged_kv_cache(
        &TensorView::from_slice(&key, &[1, heads, dim]).unwrap(),
        &TensorView::from_slice(&value, &[1, heads, dim]).unwrap(),
        &index(&[0]),
        &index(&[3]),
        &mut k_cache,
        &mut v_cache,
        &index(&[2, 0]),
        &index(&[0, 2]),
        &index(&[2]),
        KvLayout::Nhd,
        Stream::Cpu,
    )
    .unwrap();
    let entry = heads * dim;
    // Page 0's keys half, entry 1; then its values half, entry 1.
    assert_eq!(cache[entry..2 * entry], key[..]);
    assert_eq!(cache[page_size * entry + entry..page_size * entry + 2 * entry], value[..]);
    let written: usize = cache.iter().filter(|v| !v.is_nan()).count();
    assert_eq!(written, 2 * entry, "nothing else written");
}

/// One call's tensors, f32 rows and int32 tables, as `PagedCase` makes them, for the error cases.
struct Call {
    buffers: Vec<support::Buffer>,
}

impl Call {
    fn new() -> Self {
        let case = PagedCase {
            tokens: 6,
            sequences: 2,
            heads: 2,
            head_dim: 8,
            page_size: 4,
            layout: KvLayout::Nhd,
            index: DType::I32,
            prefix: 1,
        };
        Call { buffers: case.buffers(DType::F32, 3) }
    }

    /// Replaces index tensor `i`'s values.
    fn with_index(mut self, i: usize, values: &[i32]) -> Self {
        self.buffers[i] = support::buffer_of(values, &[values.len()]);
        self
    }

    /// Runs in the layout its caches are made in (NHD) and returns the error; asserts both
    /// caches stayed as they were.
    fn refused(self) -> Error {
        self.refused_as(KvLayout::Nhd.into_scalar())
    }

    /// [`Call::refused`] with `layout` as the `kv_layout` scalar.
    fn refused_as(mut self, layout: Scalar) -> Error {
        let before: Vec<Vec<u8>> = self.buffers[4..6].iter().map(|b| b.bytes.clone()).collect();
        let op = &ferrinfer_launch::append_paged_kv_cache::INFO;
        let error = support::Runner::run(&Cpu, op, &mut self.buffers, &[layout]).expect_err("the call should fail");
        let after: Vec<Vec<u8>> = self.buffers[4..6].iter().map(|b| b.bytes.clone()).collect();
        assert_eq!(before, after, "a cache was written on the error path ({error})");
        error
    }
}

fn is_index(error: &Error, name: &str, at: usize) -> bool {
    matches!(error, Error::InvalidIndex { argument, index, .. } if *argument == name && *index == at)
}

#[test]
fn bad_page_tables_are_refused_naming_the_tensor_and_index() {
    // PagedCase's table here: two sequences of 4 entries (1 before, 3 appended), a page each —
    // pages 3 and 2 of a 4-page cache; each case breaks one value.
    let e = Call::new().with_index(6, &[3, 9]).refused();
    assert!(is_index(&e, "kv_indices", 1), "a page past the cache: {e}");
    let e = Call::new().with_index(7, &[0, 2, 1]).refused();
    assert!(is_index(&e, "kv_indptr", 2), "bounds going down: {e}");
    let e = Call::new().with_index(7, &[0, 1, 3]).refused();
    assert!(is_index(&e, "kv_indptr", 2), "bounds past kv_indices: {e}");
    let e = Call::new().with_index(8, &[4, 5]).refused();
    assert!(is_index(&e, "kv_last_page_len", 1), "a last page longer than a page: {e}");
    let e = Call::new().with_index(2, &[0, 1, 0, 2, 0, 1]).refused();
    assert!(is_index(&e, "batch_indices", 3), "a sequence out of range: {e}");
    let e = Call::new().with_index(3, &[1, 1, 2, 2, 3, 7]).refused();
    assert!(is_index(&e, "positions", 5), "a position past the sequence's length: {e}");
    let e = Call::new().with_index(3, &[1, 1, 2, 2, 2, 3]).refused();
    assert!(is_index(&e, "positions", 4), "two tokens to one entry: {e}");
}

#[test]
fn bad_shapes_dtypes_and_layouts_are_refused_by_name() {
    let e = Call::new().refused_as(Scalar::Choice(2));
    assert!(matches!(e, Error::InvalidScalar { argument: "kv_layout", .. }), "a choice past its names: {e}");
    let e = Call::new().refused_as(Scalar::U32(0));
    assert!(matches!(e, Error::InvalidScalar { argument: "kv_layout", .. }), "a number for a choice: {e}");
    // "HND" reads the NHD caches' [pages, 4, 2, 8] as 4 heads: not the keys' 2.
    let e = Call::new().refused_as(KvLayout::Hnd.into_scalar());
    assert!(matches!(e, Error::ShapeMismatch { argument: "paged_k_cache", .. }), "{e}");
    let mut call = Call::new();
    call.buffers[3] = support::buffer_of(&[1i64, 1, 2, 2, 3, 3], &[6]);
    let e = call.refused();
    assert!(matches!(e, Error::DTypeMismatch { argument: "positions", reference: "batch_indices", .. }), "{e}");
    let e = Call::new().with_index(2, &[0, 1, 0]).refused();
    assert!(matches!(e, Error::ShapeMismatch { argument: "batch_indices", .. }), "{e}");
    let e = Call::new().with_index(8, &[4]).refused();
    assert!(matches!(e, Error::ShapeMismatch { argument: "kv_indptr", .. }), "one bound a sequence + 1: {e}");
    let mut call = Call::new();
    call.buffers[5] = call.buffers[4].clone();
    call.buffers[5].shape[0] -= 1;
    let e = call.refused();
    assert!(matches!(e, Error::ShapeMismatch { argument: "paged_v_cache", .. }), "{e}");
    let mut call = Call::new();
    call.buffers[1] = support::buffer_of(&[ferrinfer_launch::half::bf16::ZERO; 6 * 2 * 8], &[6, 2, 8]);
    let e = call.refused();
    assert!(matches!(e, Error::DTypeMismatch { argument: "append_value", .. }), "{e}");
}

/// The two caches may not be one (each would take the other's rows).
#[test]
fn one_tensor_as_both_caches_is_refused() {
    let mut call = Call::new();
    let pointers: Vec<*mut u8> = call.buffers.iter_mut().map(|b| b.bytes.as_mut_ptr()).collect();
    let view = |i: usize, memory: usize| {
        let b = &call.buffers[i];
        let shape: Vec<i64> = b.shape.iter().map(|&d| d as i64).collect();
        // SAFETY: buffer `memory` holds what buffer `i`'s shape and strides address (the two
        // caches' buffers are alike).
        unsafe {
            TensorView::from_raw_parts(
                pointers[memory].cast(),
                0,
                b.dtype,
                &shape,
                &b.strides,
                ferrinfer_launch::Device::Cpu,
            )
        }
        .unwrap()
    };
    let views: Vec<TensorView> = (0..9).map(|i| view(i, if i == 5 { 4 } else { i })).collect();
    let e = ferrinfer_launch::append_paged_kv_cache::INFO.call(
        &views.iter().collect::<Vec<_>>(),
        &[KvLayout::Nhd.into_scalar()],
        Stream::Cpu,
    );
    assert!(matches!(e, Err(Error::Overlap { argument: "paged_v_cache", other: "paged_k_cache" })), "{e:?}");
}

/// `get_batch_indices_positions` of `bounds` and `lengths` (int32) for `nnz` tokens.
fn positions_of(bounds: &[i32], lengths: &[i32], nnz: usize) -> Result<(Vec<i32>, Vec<i32>), Error> {
    let (mut batch, mut positions) = (vec![i32::MIN; nnz], vec![i32::MIN; nnz]);
    ferrinfer_launch::get_batch_indices_positions(
        &TensorView::from_slice(bounds, &[bounds.len()]).unwrap(),
        &TensorView::from_slice(lengths, &[lengths.len()]).unwrap(),
        &mut TensorView::from_slice_mut(&mut batch, &[nnz]).unwrap(),
        &mut TensorView::from_slice_mut(&mut positions, &[nnz]).unwrap(),
        nnz as i32,
        Stream::Cpu,
    )?;
    Ok((batch, positions))
}

#[test]
fn batch_indices_positions_follow_the_bounds_and_lengths() {
    // Three sequences appending 2, 0 and 3 tokens, 5, 9 and 3 long after the append.
    let (bounds, lengths) = ([0, 2, 2, 5], [5, 9, 3]);
    let (batch, positions) = positions_of(&bounds, &lengths, 5).unwrap();
    assert_eq!(batch, [0, 0, 2, 2, 2]);
    assert_eq!(positions, [3, 4, 0, 1, 2]);
    // More tokens than the bounds hold: the rest −1; fewer: the first ones.
    assert_eq!(positions_of(&bounds, &lengths, 7).unwrap().0, [0, 0, 2, 2, 2, -1, -1]);
    assert_eq!(positions_of(&bounds, &lengths, 3).unwrap(), (vec![0, 0, 2], vec![3, 4, 0]));
    assert_eq!(positions_of(&[0], &[], 2).unwrap(), (vec![-1, -1], vec![-1, -1]), "no sequences");
}

#[test]
fn batch_indices_positions_errors_name_the_argument() {
    let error = positions_of(&[0, 2, 5], &[5], 5).unwrap_err();
    assert!(matches!(error, Error::ShapeMismatch { argument: "seq_lens", .. }), "{error}");
    let (mut batch, mut positions) = (vec![0i32; 4], vec![0i32; 5]);
    let (bounds, lengths) = ([0i32, 5], [5i32]);
    let error = ferrinfer_launch::get_batch_indices_positions(
        &TensorView::from_slice(&bounds, &[2]).unwrap(),
        &TensorView::from_slice(&lengths, &[1]).unwrap(),
        &mut TensorView::from_slice_mut(&mut batch, &[4]).unwrap(),
        &mut TensorView::from_slice_mut(&mut positions, &[5]).unwrap(),
        5,
        Stream::Cpu,
    )
    .unwrap_err();
    assert!(matches!(error, Error::ShapeMismatch { argument: "batch_indices", .. }), "{error}");
    let op = &ferrinfer_launch::get_batch_indices_positions::INFO;
    let (mut b, mut p) = (vec![7i32; 1], vec![7i32; 1]);
    let views = [
        TensorView::from_slice(&bounds, &[2]).unwrap(),
        TensorView::from_slice(&lengths, &[1]).unwrap(),
        TensorView::from_slice_mut(&mut b, &[1]).unwrap(),
        TensorView::from_slice_mut(&mut p, &[1]).unwrap(),
    ];
    let error = op.call(&views.iter().collect::<Vec<_>>(), &[Scalar::I32(-1)], Stream::Cpu);
    assert!(matches!(error, Err(Error::InvalidScalar { argument: "nnz", .. })), "{error:?}");
    assert_eq!((b, p), (vec![7], vec![7]), "nothing written on the error path");
}

/// The CPU backend checks the values before writing (the GPU's are in device memory, read by
/// the kernel only): bounds ≥ 0, never going down; lengths at least the appended tokens.
#[test]
fn batch_indices_positions_refuse_bad_bounds_and_lengths_on_the_cpu() {
    let refused = |bounds: &[i32], lengths: &[i32]| match positions_of(bounds, lengths, 5) {
        Err(Error::InvalidIndex { argument, index, value, .. }) => (argument, index, value),
        other => panic!("{bounds:?} {lengths:?}: {other:?}"),
    };
    assert_eq!(refused(&[0, 3, 2], &[4, 3]), ("append_indptr", 2, 2), "going down");
    assert_eq!(refused(&[-1, 2, 5], &[4, 3]), ("append_indptr", 0, -1), "below 0");
    assert_eq!(refused(&[0, 2, 5], &[1, 3]), ("seq_lens", 0, 1), "shorter than its 2 tokens");
    let error = positions_of(&[0, 2, 5], &[1, 3], 5).unwrap_err().to_string();
    assert_eq!(error, "2 ≤ seq_lens[0] ≤ 2147483647 (at least sequence 0's appended tokens), got 1");
}
