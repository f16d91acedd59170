//! The page family at layers 1 and 4: the op table, validation, the launch planner, the CPU
//! path and the f64 reference. `append_paged_kv_cache` validates its arguments, then runs on the
//! CPU backend or launches the append kernel of `ferrinfer-kernels/src/page.rs` on the caller's
//! stream.
//!
//! A paged KV cache holds each sequence's keys and values in pages of `page_size` entries: the
//! pages of sequence `b` are `kv_indices[kv_indptr[b]..kv_indptr[b + 1]]`, its last page holding
//! `kv_last_page_len[b]` entries (the sequence's length after the append included). A cache is a
//! `(k_cache, v_cache)` pair of `[max_num_pages, page_size, num_kv_heads, head_dim]` tensors
//! ("NHD"; "HND": `[max_num_pages, num_kv_heads, page_size, head_dim]`); the Python module also
//! takes FlashInfer's single `[max_num_pages, 2, …]` tensor. Rules, checked before anything is
//! written:
//! - every tensor on the stream's device; keys, values and caches of one dtype (f16, bf16,
//!   f32); the index tensors (`batch_indices`, `positions`, `kv_indices`, `kv_indptr`,
//!   `kv_last_page_len`) all int32 or all int64, one-dimensional, any stride;
//! - `append_key`, `append_value`: `[nnz, num_kv_heads, head_dim]`, the last dimension
//!   contiguous; `batch_indices`, `positions`: `[nnz]`; the caches the layout's shape with the
//!   keys' heads and head_dim, page_size ≥ 1, the last dimension contiguous, each element its
//!   own address, apart from each other (or the two halves of one packed tensor) and from every
//!   input; `kv_indptr` one bound more than `kv_last_page_len` has sequences;
//! - on the CPU backend, the page tables' values too (read there at no cost): `kv_indptr`
//!   never going down, within `kv_indices`; every page in the caches; every last-page length in
//!   `0..=page_size` (0 only for a sequence of no pages); every token's sequence in range and its
//!   position below its sequence's length; no two tokens to one entry;
//!   `get_batch_indices_positions`' `append_indptr` ≥ 0, never going down, and each
//!   `seq_lens` at least its sequence's appended tokens, every value an int32.
//! - On a GPU those values are on the device, and reading them would cost a synchronisation:
//!   they are not checked. The kernel never writes outside the caches: a token whose sequence,
//!   page or position leads outside them (or outside `kv_indices`) is not written; within them
//!   FlashInfer's arithmetic holds (a position past its sequence's pages reaches the next
//!   sequence's, and two tokens to one entry leave either).

use ferrinfer_jit::page::{PageModule, PositionsModule};
use ferrinfer_jit::spec::IndexType;
use ferrinfer_jit::{CudaArch, JitSpec};
use ferrinfer_kernels::element::DType;
use ferrinfer_kernels::page::{AppendParams, PositionsParams, append_token, write_sequence_and_position};

use crate::cuda::{self, KernelModule, Launch, Limits, ModuleCache};
use crate::layout::{self, Named};
use crate::op::{Call, FamilyExtent, FamilyOp, FixedValues, KV_HEADS, Problem, SEGMENTS};
use crate::tuning;
use crate::{Error, Stream, TensorView, cpu, logging};

crate::op_table! { $
    /// The page family's ops, one line each (grammar: [`define_ops!`](crate::define_ops)).
    page_ops, family page;
    /// Appends keys and values to a paged KV cache, FlashInfer's `append_paged_kv_cache`:
    /// token `i` (`append_key[i]`, `append_value[i]`: `[num_kv_heads, head_dim]`) goes to
    /// sequence `batch_indices[i]` at position `positions[i]`, the entry
    /// `divmod(kv_indptr[b] · page_size + positions[i], page_size)` of page
    /// `kv_indices[…]`. The caches (`paged_kv_cache`: a `(k_cache, v_cache)` pair, or in
    /// Python one `[max_num_pages, 2, …]` tensor) are `[max_num_pages, page_size,
    /// num_kv_heads, head_dim]` (`kv_layout="NHD"`) or `[max_num_pages, num_kv_heads,
    /// page_size, head_dim]` (`"HND"`); the index tensors int32 or int64.
    fn append_paged_kv_cache(
        append_key: In[KvHeads],
        append_value: In[KvHeads],
        batch_indices: In[Batch as index, PAGE_SEQUENCES],
        positions: In[Batch as index, PAGE_POSITIONS],
        paged_k_cache / paged_kv_cache: InOut[PAGED_CACHE],
        paged_v_cache / paged_kv_cache: InOut[PAGED_CACHE],
        kv_indices: In[PAGE_IDS as index, PAGE_ID_VALUES],
        kv_indptr: In[SegmentBounds as index, PAGE_BOUNDS],
        kv_last_page_len: In[Segments as index, LAST_PAGE_LENGTHS]
    ) ; kv_layout: KvLayout = "NHD"
        => PageOp::Append, reference append_reference;
    /// Each appended token's sequence and position, FlashInfer's
    /// `get_batch_indices_positions`: token `i` of sequence `b` (`append_indptr[b] ≤ i <
    /// append_indptr[b + 1]`) is at position `seq_lens[b] − (append_indptr[b + 1] −
    /// append_indptr[b]) + (i − append_indptr[b])`, `seq_lens` the lengths after the
    /// append. Outputs int32 `[nnz]`; tokens past the bounds' last get −1 and −1.
    fn get_batch_indices_positions(
        append_indptr: In[SegmentBounds as index, segment_bounds],
        seq_lens: In[Segments as index, sequence_lengths]
    ) -> batch_indices: Out[Count as i32], positions: Out[Count as i32]; nnz: i32 (example rows)
        => PageOp::BatchIndicesPositions, reference batch_indices_positions_reference;
}

/// The entries a page of [`PAGED_CACHE`] holds in the problems the benchmark and the tests make.
pub const PAGE_SIZE: usize = 16;

/// The page table of a problem of `rows` rows appended to a paged cache ([`PAGED_CACHE`]):
/// row `i` belongs to sequence `i mod SEGMENTS` at position `i / SEGMENTS` (so every sequence's
/// rows hold its first positions, and a sequence may have none), each sequence owns the fewest
/// pages of [`PAGE_SIZE`] entries that hold them, sequence by sequence, and page `u` of that order
/// is cache page `U − u` (pages out of order, cache page 0 spare). Returns each sequence's row
/// count.
pub fn page_table(rows: usize) -> [usize; SEGMENTS] {
    std::array::from_fn(|b| (rows + SEGMENTS - 1 - b) / SEGMENTS)
}

/// The pages each sequence of [`page_table`] owns.
fn pages_of(rows: usize) -> [usize; SEGMENTS] {
    page_table(rows).map(|n| n.div_ceil(PAGE_SIZE))
}

/// `[P, PAGE_SIZE, KH, H]`: a paged cache of [`KV_HEADS`] heads of `H` ("NHD"), into which the
/// append writes one entry a row of the problem: [`page_table`]'s pages and one spare page no row
/// reaches. Calls take any page size, page count and layout.
pub static PAGED_CACHE: FamilyExtent = FamilyExtent {
    name: "paged cache",
    shape: |rows, hidden| vec![pages_of(rows).iter().sum::<usize>() + 1, PAGE_SIZE, KV_HEADS, hidden],
    touched: |rows, hidden| rows * KV_HEADS * hidden,
    read_in_place: false,
    output: None,
};

/// `[U]`: the cache page of each page the problem's sequences use, in order (`kv_indices`).
pub static PAGE_IDS: FamilyExtent = FamilyExtent {
    name: "page ids",
    shape: |rows, _| vec![pages_of(rows).iter().sum()],
    touched: |rows, _| pages_of(rows).iter().sum(),
    read_in_place: true,
    output: None,
};

/// [`page_table`]'s sequence of each row (`batch_indices`).
pub static PAGE_SEQUENCES: FixedValues =
    FixedValues { name: "page sequences", values: |rows| (0..rows).map(|i| (i % SEGMENTS) as i64).collect() };

/// [`page_table`]'s position of each row in its sequence (`positions`).
pub static PAGE_POSITIONS: FixedValues =
    FixedValues { name: "page positions", values: |rows| (0..rows).map(|i| (i / SEGMENTS) as i64).collect() };

/// [`page_table`]'s cache page of each page the sequences use (`kv_indices`).
pub static PAGE_ID_VALUES: FixedValues = FixedValues {
    name: "page ids",
    values: |rows| {
        let used: usize = pages_of(rows).iter().sum();
        (0..used).map(|u| (used - u) as i64).collect()
    },
};

/// [`page_table`]'s bounds of each sequence's pages in [`PAGE_IDS`] (`kv_indptr`).
pub static PAGE_BOUNDS: FixedValues = FixedValues {
    name: "page bounds",
    values: |rows| {
        let ends = pages_of(rows).into_iter().scan(0, |end, pages| {
            *end += pages as i64;
            Some(*end)
        });
        [0].into_iter().chain(ends).collect()
    },
};

/// [`page_table`]'s entries used in each sequence's last page (`kv_last_page_len`; 0 for a
/// sequence of no pages).
pub static LAST_PAGE_LENGTHS: FixedValues = FixedValues {
    name: "last page lengths",
    values: |rows| {
        let pages = pages_of(rows);
        page_table(rows).iter().zip(pages).map(|(&n, p)| (n - p.saturating_sub(1) * PAGE_SIZE) as i64).collect()
    },
};

/// Where an entry's heads lie in a page (FlashInfer's `kv_layout`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvLayout {
    /// `[max_num_pages, page_size, num_kv_heads, head_dim]`: an entry's heads side by side.
    #[default]
    Nhd,
    /// `[max_num_pages, num_kv_heads, page_size, head_dim]`: a head's entries side by side.
    Hnd,
}

crate::choice_scalar!(KvLayout { Nhd = "NHD", Hnd = "HND" });

impl KvLayout {
    /// The dimensions of a cache's shape holding `(entries, heads)`.
    fn dims(self) -> (usize, usize) {
        match self {
            KvLayout::Nhd => (1, 2),
            KvLayout::Hnd => (2, 1),
        }
    }
}

/// Which op of the family a call is (the table's selectors).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageOp {
    Append,
    BatchIndicesPositions,
}

impl FamilyOp for PageOp {
    fn run(&self, call: &Call) -> Result<(), Error> {
        match self {
            PageOp::Append => append(call),
            PageOp::BatchIndicesPositions => batch_indices_positions(call),
        }
    }
}

fn append(call: &Call) -> Result<(), Error> {
    let forced = layout_override()?;
    let Some(plan) = plan(call)? else { return Ok(()) };
    logging::input_statistics(call);
    match call.stream {
        Stream::Cpu => {
            cpu_tokens(plan.dtype, plan.index, &plan.params);
            Ok(())
        }
        Stream::Cuda(stream) => {
            static MODULES: ModuleCache<PageModule> = ModuleCache::new();
            let module = PageModule { dtype: plan.dtype, index: plan.index };
            let entry = module
                .entry(plan.vec)
                .ok_or_else(|| Error::NoEntryPoint { module: format!("{module:?}"), entry: plan.vec as usize })?;
            cuda::launch(stream, &MODULES, module, |limits: &Limits| Ok(plan.kernel(entry, limits, forced)))
        }
    }
}

/// `get_batch_indices_positions`: its checks, then the CPU backend or the positions kernel.
fn batch_indices_positions(call: &Call) -> Result<(), Error> {
    let Some((params, index)) = positions_plan(call)? else { return Ok(()) };
    logging::input_statistics(call);
    match call.stream {
        Stream::Cpu => {
            for i in 0..params.nnz {
                // SAFETY: validated shapes, strides and outputs; every read index in bounds.
                match index {
                    IndexType::I32 => unsafe { write_sequence_and_position::<i32>(&params, i) },
                    IndexType::I64 => unsafe { write_sequence_and_position::<i64>(&params, i) },
                }
            }
            Ok(())
        }
        Stream::Cuda(stream) => {
            static MODULES: ModuleCache<PositionsModule> = ModuleCache::new();
            let grid = params.nnz.div_ceil(POSITIONS_BLOCK as u64).clamp(1, MAX_GRID_X) as u32;
            let launch =
                Launch { entry: 0, params, grid: (grid, 1), block: POSITIONS_BLOCK, shared_bytes: 0, cluster: 1 };
            cuda::launch(stream, &MODULES, PositionsModule { index }, |_: &Limits| Ok(launch))
        }
    }
}

/// Threads per block of the positions kernel.
const POSITIONS_BLOCK: u32 = 256;

/// `get_batch_indices_positions`' checks, in the order a caller would fix them: devices,
/// alignment, one index type, writable outputs, `nnz`, shapes (`seq_lens` a length a sequence of
/// `append_indptr`, the outputs `[nnz]`), outputs of an element each, apart from the inputs and
/// each other. `None` when `nnz` is 0.
fn positions_plan(call: &Call) -> Result<Option<(PositionsParams, IndexType)>, Error> {
    let [bounds, lengths, batch_out, positions_out] = call.tensors()?;
    let (inputs, outputs) = (
        [("append_indptr", bounds), ("seq_lens", lengths)],
        [("batch_indices", batch_out), ("positions", positions_out)],
    );
    layout::check_placement(&call.stream, inputs.iter().chain(&outputs).copied())?;
    layout::check_dtype("seq_lens", lengths, "append_indptr", bounds.dtype())?;
    for &(name, view) in &outputs {
        layout::check_writable(name, view)?;
    }
    let nnz: i32 = call.scalar("nnz")?;
    if nnz < 0 {
        return Err(Error::invalid_scalar("nnz", nnz, "0 ≤ nnz < 2^31"));
    }
    let sequences = match bounds.shape() {
        [n] if *n >= 1 => *n - 1,
        found => {
            let expected = "[batch_size + 1]: one dimension, at least one bound".to_owned();
            return Err(Error::ShapeMismatch { argument: "append_indptr", expected, found: found.to_vec() });
        }
    };
    let expected_shapes = [
        ("seq_lens", lengths, sequences, "`append_indptr`'s length − 1"),
        ("batch_indices", batch_out, i64::from(nnz), "nnz"),
        ("positions", positions_out, i64::from(nnz), "nnz"),
    ];
    for (name, view, len, what) in expected_shapes {
        if view.shape() != [len] {
            return Err(Error::ShapeMismatch {
                argument: name,
                expected: format!("[{len}] ({what})"),
                found: view.shape().to_vec(),
            });
        }
    }
    let mut strides = [0; 4];
    for (i, &(name, view)) in inputs.iter().chain(&outputs).enumerate() {
        strides[i] = layout::sequence_stride(name, view)?;
    }
    for &(name, view) in &outputs {
        for &(other, input) in &inputs {
            if layout::overlaps(view, input) {
                return Err(Error::Overlap { argument: name, other });
            }
        }
    }
    if layout::overlaps(batch_out, positions_out) {
        return Err(Error::Overlap { argument: "positions", other: "batch_indices" });
    }
    if matches!(call.stream, Stream::Cpu) {
        check_segments(bounds, lengths, [strides[0], strides[1]])?;
    }
    if nnz == 0 {
        return Ok(None);
    }
    let params = PositionsParams {
        append_indptr: bounds.address(),
        seq_lens: lengths.address(),
        batch_indices: batch_out.address(),
        positions: positions_out.address(),
        sequences: sequences as u64,
        nnz: nnz as u64,
        strides,
    };
    Ok(Some((params, layout::index_type(bounds))))
}

impl KernelModule for PositionsModule {
    fn spec(&self, arch: CudaArch, debug: bool) -> JitSpec {
        PositionsModule::spec(self, arch, debug)
    }
}

impl KernelModule for PageModule {
    fn spec(&self, arch: CudaArch, debug: bool) -> JitSpec {
        PageModule::spec(self, arch, debug)
    }
}

/// A validated call: kernel parameters, dtype, index type and vector width.
struct Plan {
    params: AppendParams,
    dtype: DType,
    index: IndexType,
    vec: u32,
}

/// Every check, in the order a caller would fix them; `None` when there is nothing to append.
fn plan(call: &Call) -> Result<Option<Plan>, Error> {
    let [key, value, batch_indices, positions, k_cache, v_cache, kv_indices, kv_indptr, last_page_len] =
        call.tensors()?;
    let rows = [("append_key", key), ("append_value", value)];
    let caches = [("paged_k_cache", k_cache), ("paged_v_cache", v_cache)];
    let indices = [
        ("batch_indices", batch_indices),
        ("positions", positions),
        ("kv_indices", kv_indices),
        ("kv_indptr", kv_indptr),
        ("kv_last_page_len", last_page_len),
    ];
    let dtype = check_tensors(&rows, &caches, &indices, &call.stream)?;
    let layout: KvLayout = call.scalar("kv_layout")?;
    let (tokens, heads, width) = check_rows(&rows)?;
    let [index_strides @ .., last_stride] = check_indices(&indices, tokens)?;
    let cache = check_caches(&caches, layout, (heads, width))?;
    for &(name, view) in &caches {
        layout::check_distinct_elements(name, view)?;
        for &(other, input) in rows.iter().chain(&indices) {
            if layout::overlaps(view, input) {
                return Err(Error::Overlap { argument: name, other });
            }
        }
    }
    if layout::overlaps(k_cache, v_cache) && !layout::interleaved_apart(k_cache, v_cache) {
        return Err(Error::Overlap { argument: "paged_v_cache", other: "paged_k_cache" });
    }
    let key_strides = [layout_stride(key, 0), layout_stride(key, 1)];
    let value_strides = [layout_stride(value, 0), layout_stride(value, 1)];
    let params = AppendParams {
        key: key.address(),
        value: value.address(),
        k_cache: k_cache.address(),
        v_cache: v_cache.address(),
        batch_indices: batch_indices.address(),
        positions: positions.address(),
        kv_indices: kv_indices.address(),
        kv_indptr: kv_indptr.address(),
        tokens,
        sequences: last_page_len.shape()[0] as u64,
        page_ids: kv_indices.shape()[0] as u64,
        pages: cache.pages,
        key_strides,
        value_strides,
        k_cache_strides: cache.strides[0],
        v_cache_strides: cache.strides[1],
        index_strides,
        heads: heads as u32,
        width: width as u32,
        page_size: cache.page_size as u32,
        streams: 0,
    };
    if matches!(call.stream, Stream::Cpu) {
        check_page_table(&params, &indices, last_stride)?;
    }
    if tokens == 0 || heads == 0 || width == 0 {
        return Ok(None);
    }
    let row_strides: Vec<u64> =
        key_strides.iter().chain(&value_strides).chain(cache.strides.iter().flatten()).copied().collect();
    let addresses = [key.address(), value.address(), k_cache.address(), v_cache.address()];
    let vec = layout::vector_width(dtype, width, &row_strides, &addresses);
    Ok(Some(Plan { params, dtype, index: layout::index_type(batch_indices), vec }))
}

/// The stride of `view`'s dimension `i`, 0 where it has one element (never stepped over).
fn layout_stride(view: &TensorView, i: usize) -> u64 {
    if view.shape()[i] <= 1 { 0 } else { view.strides()[i] as u64 }
}

/// Devices, alignment, dtypes and writability, in the order a caller would fix them. The
/// values' dtype.
fn check_tensors(
    rows: &[Named; 2],
    caches: &[Named; 2],
    indices: &[Named; 5],
    stream: &Stream,
) -> Result<DType, Error> {
    let (first, key) = rows[0];
    layout::check_placement(stream, rows.iter().chain(caches).chain(indices).copied())?;
    for &(name, view) in rows[1..].iter().chain(caches) {
        layout::check_dtype(name, view, first, key.dtype())?;
    }
    let (index_name, index) = indices[0];
    for &(name, view) in &indices[1..] {
        layout::check_dtype(name, view, index_name, index.dtype())?;
    }
    for &(name, view) in caches {
        layout::check_writable(name, view)?;
    }
    Ok(key.dtype())
}

/// The keys' and values' shapes: `[nnz, num_kv_heads, head_dim]` alike, the last dimension
/// contiguous, strides never negative. `(nnz, heads, head_dim)`.
fn check_rows(rows: &[Named; 2]) -> Result<(u64, u64, u64), Error> {
    let (first, key) = rows[0];
    if key.shape().len() != 3 {
        let expected = "[nnz, num_kv_heads, head_dim]".to_owned();
        return Err(Error::ShapeMismatch { argument: first, expected, found: key.shape().to_vec() });
    }
    for &(name, view) in rows {
        if view.shape() != key.shape() {
            let expected = format!("{:?} (`{first}`'s shape)", key.shape());
            return Err(Error::ShapeMismatch { argument: name, expected, found: view.shape().to_vec() });
        }
        check_strides(name, view)?;
    }
    let [tokens, heads, width] = [0, 1, 2].map(|i| key.shape()[i] as u64);
    if heads * width > u32::MAX as u64 {
        let what = "num_kv_heads · head_dim";
        return Err(Error::TooLarge { argument: first, what, value: heads * width, limit: u32::MAX as u64 });
    }
    Ok((tokens, heads, width))
}

/// No negative stride, and the last dimension contiguous where it has more than one element.
pub(crate) fn check_strides(argument: &'static str, view: &TensorView) -> Result<(), Error> {
    if let Some(&stride) = view.strides().iter().find(|&&s| s < 0) {
        let reason = format!("negative stride {stride}; expected strides ≥ 0");
        return Err(Error::UnsupportedLayout { argument, reason });
    }
    match (view.shape().last(), view.strides().last()) {
        (Some(&size), Some(&stride)) if size > 1 && stride != 1 => {
            Err(Error::LastDimNotContiguous { argument, stride })
        }
        _ => Ok(()),
    }
}

/// The index tensors' shapes: one dimension each, `batch_indices` and `positions` a value a
/// token, `kv_indptr` one bound more than `kv_last_page_len`'s sequences. Their strides (in the
/// kernel's order: `batch_indices`, `positions`, `kv_indices`, `kv_indptr`), then
/// `kv_last_page_len`'s.
fn check_indices(indices: &[Named; 5], tokens: u64) -> Result<[u64; 5], Error> {
    let [_, _, _, (bounds_name, bounds), (lengths_name, lengths)] = *indices;
    let expected_len = |name: &str| match name {
        "batch_indices" | "positions" => Some((tokens as i64, "nnz (`append_key`'s first dimension)".to_owned())),
        "kv_indptr" => lengths.shape().first().map(|&n| (n + 1, format!("`{lengths_name}`'s length + 1"))),
        _ => None,
    };
    let mut strides = [0; 5];
    for (i, &(name, view)) in indices.iter().enumerate() {
        let shape = view.shape();
        let wrong = match expected_len(name) {
            _ if shape.len() != 1 => Some("one dimension".to_owned()),
            Some((len, what)) if shape[0] != len => Some(format!("[{len}] ({what})")),
            _ => None,
        };
        if let Some(expected) = wrong {
            return Err(Error::ShapeMismatch { argument: name, expected, found: shape.to_vec() });
        }
        strides[i] = layout::sequence_stride(name, view)?;
    }
    if bounds.shape()[0] < 1 {
        let expected = "[num_sequences + 1]: at least one bound".to_owned();
        return Err(Error::ShapeMismatch { argument: bounds_name, expected, found: bounds.shape().to_vec() });
    }
    Ok(strides)
}

/// A validated pair of caches.
pub(crate) struct Cache {
    pub pages: u64,
    pub page_size: u64,
    /// `[page, entry, head]` strides of each.
    pub strides: [[u64; 3]; 2],
}

/// The caches' shapes: 4 dimensions, the layout's, with the keys' heads and head_dim, alike.
pub(crate) fn check_caches(caches: &[Named; 2], layout: KvLayout, (heads, width): (u64, u64)) -> Result<Cache, Error> {
    let (first, k_cache) = caches[0];
    let (entries_dim, heads_dim) = layout.dims();
    let shape = k_cache.shape();
    let expected = || match layout {
        KvLayout::Nhd => format!("[max_num_pages, page_size ≥ 1, {heads}, {width}] (kv_layout \"NHD\")"),
        KvLayout::Hnd => format!("[max_num_pages, {heads}, page_size ≥ 1, {width}] (kv_layout \"HND\")"),
    };
    if shape.len() != 4 || shape[heads_dim] as u64 != heads || shape[3] as u64 != width || shape[entries_dim] < 1 {
        return Err(Error::ShapeMismatch { argument: first, expected: expected(), found: shape.to_vec() });
    }
    let mut strides = [[0; 3]; 2];
    for (i, &(name, view)) in caches.iter().enumerate() {
        if view.shape() != shape {
            let expected = format!("{shape:?} (`{first}`'s shape)");
            return Err(Error::ShapeMismatch { argument: name, expected, found: view.shape().to_vec() });
        }
        check_strides(name, view)?;
        strides[i] = [0, entries_dim, heads_dim].map(|d| view.strides()[d] as u64);
    }
    Ok(Cache { pages: shape[0] as u64, page_size: shape[entries_dim] as u64, strides })
}

/// A page table's bounds and page ids (host values): `kv_indptr` from ≥ 0 never going down and
/// within `kv_indices`, every page one of the caches' `pages`; the error names the tensor and
/// index of the first bad value.
pub(crate) fn check_page_ids(bounds: &[i64], ids: &[i64], pages: u64) -> Result<(), Error> {
    let invalid =
        |argument, index, value, expected: String| Err(Error::InvalidIndex { argument, index, value, expected });
    let page_ids = ids.len() as i64;
    for (i, pair) in bounds.windows(2).enumerate() {
        if pair[0] < 0 || pair[1] < pair[0] || pair[1] > page_ids {
            let (index, value, least) = if pair[0] < 0 { (i, pair[0], 0) } else { (i + 1, pair[1], pair[0]) };
            let expected =
                format!("{least} ≤ kv_indptr[{index}] ≤ {page_ids} (never going down; at most `kv_indices`' length)");
            return invalid("kv_indptr", index, value, expected);
        }
    }
    if let Some((i, &page)) = ids.iter().enumerate().find(|&(_, &page)| page < 0 || page as u64 >= pages) {
        return invalid("kv_indices", i, page, format!("0 ≤ kv_indices[{i}] < {pages} (a page of the caches)"));
    }
    Ok(())
}

/// The CPU backend's checks of the page tables' values (see the module docs), each naming the
/// tensor and index of the first bad value.
fn check_page_table(p: &AppendParams, indices: &[Named; 5], last_stride: u64) -> Result<(), Error> {
    // SAFETY: host views of the strides `plan` validated (`p.index_strides`, `last_stride`).
    let values = |i: usize, stride: u64| unsafe { layout::host_indices(indices[i].1, stride) };
    let [batch_stride, position_stride, ids_stride, bounds_stride] = p.index_strides;
    let (sequences, positions) = (values(0, batch_stride), values(1, position_stride));
    let (ids, bounds, lengths) = (values(2, ids_stride), values(3, bounds_stride), values(4, last_stride));
    let invalid =
        |argument, index, value, expected: String| Err(Error::InvalidIndex { argument, index, value, expected });
    check_page_ids(&bounds, &ids, p.pages)?;
    let page_size = p.page_size as i64;
    let pages = |b: usize| bounds[b + 1] - bounds[b];
    let length = |b: usize| (pages(b) - 1).max(0) * page_size + lengths[b];
    for (b, &last) in lengths.iter().enumerate() {
        let allowed = if pages(b) == 0 { 0..=0 } else { 1..=page_size };
        if !allowed.contains(&last) {
            let (least, most) = (allowed.start(), allowed.end());
            let expected = format!("{least} ≤ kv_last_page_len[{b}] ≤ {most} (0 only for a sequence of no pages)");
            return invalid("kv_last_page_len", b, last, expected);
        }
    }
    let mut written = std::collections::HashSet::with_capacity(sequences.len());
    for (i, (&b, &position)) in sequences.iter().zip(&positions).enumerate() {
        if b < 0 || b as usize >= lengths.len() {
            return invalid("batch_indices", i, b, format!("0 ≤ batch_indices[{i}] < {} (a sequence)", lengths.len()));
        }
        if position < 0 || position >= length(b as usize) {
            let expected =
                format!("0 ≤ positions[{i}] < {} (sequence {b}'s length after the append)", length(b as usize));
            return invalid("positions", i, position, expected);
        }
        let at = bounds[b as usize] * page_size + position;
        let entry = (ids[(at / page_size) as usize], at % page_size);
        if !written.insert(entry) {
            let expected = format!(
                "an entry of its own for positions[{i}] (page {}'s entry {} is an earlier token's)",
                entry.0, entry.1
            );
            return invalid("positions", i, position, expected);
        }
    }
    Ok(())
}

/// The CPU backend's checks of `get_batch_indices_positions`' values, each naming the tensor and
/// index of the first bad value: bounds ≥ 0, never going down, and each sequence's length
/// after the append at least its appended tokens (else positions go negative, indistinguishable
/// from the −1 of a token past the bounds), every value an int32 (the outputs').
fn check_segments(
    bounds: &TensorView,
    lengths: &TensorView,
    [bounds_stride, lengths_stride]: [u64; 2],
) -> Result<(), Error> {
    // SAFETY: host views of the strides `positions_plan` validated.
    let (bounds, lengths) =
        unsafe { (layout::host_indices(bounds, bounds_stride), layout::host_indices(lengths, lengths_stride)) };
    let invalid =
        |argument, index, value, expected: String| Err(Error::InvalidIndex { argument, index, value, expected });
    let most = i32::MAX as i64;
    for (i, &bound) in bounds.iter().enumerate() {
        let least = if i == 0 { 0 } else { bounds[i - 1] };
        if !(least..=most).contains(&bound) {
            let expected = format!("{least} ≤ append_indptr[{i}] ≤ {most} (never going down)");
            return invalid("append_indptr", i, bound, expected);
        }
    }
    for (b, (&length, pair)) in lengths.iter().zip(bounds.windows(2)).enumerate() {
        let appended = pair[1] - pair[0];
        if !(appended..=most).contains(&length) {
            let expected = format!("{appended} ≤ seq_lens[{b}] ≤ {most} (at least sequence {b}'s appended tokens)");
            return invalid("seq_lens", b, length, expected);
        }
    }
    Ok(())
}

tuning::layout_override! {
    /// The variable forcing the append launch's layout, `block:waves:stream` (each a number or `*`,
    /// the planner's choice): threads a block (a multiple of 32 to 1024), the grid's size in waves —
    /// blocks as many times as every multiprocessor holds at once (0: a vector a thread, however many
    /// blocks that takes) — and the store policy (`AppendParams::streams`, 0 or 1: the sanitizer's
    /// small cases reach the evicted-first copy of the loop only so) — the knobs the benchmark
    /// sweeps (scripts/gpu/suite.sh's `layouts`).
    pub const LAYOUT_VAR: &str = "FERRINFER_PAGE_LAYOUT";
    struct LayoutOverride {
        block: Block,
        waves: u64,
        streams: Flag,
    }
    expected = "block:waves:stream, each a number or *, block a multiple of 32 to 1024, stream 0 or 1";
}

impl Plan {
    /// Blocks of [`BLOCK_THREADS`], one wave of them (as many as every multiprocessor holds at
    /// once: a thread's steps copy the rest), fewer where the work is small; the stores
    /// [`Plan::streams`]; each may be `forced`.
    fn kernel(&self, entry: usize, limits: &Limits, forced: LayoutOverride) -> Launch<AppendParams> {
        let p = &self.params;
        let block = forced.block.unwrap_or(BLOCK_THREADS);
        let vectors = p.tokens * p.heads as u64 * (p.width / self.vec) as u64;
        let resident = limits.resident_blocks(entry, block, 0).max(1);
        let wave = (limits.multiprocessors * resident) as u64;
        let blocks = match forced.waves.unwrap_or(WAVES) {
            0 => u64::MAX,
            waves => waves * wave,
        };
        let grid = vectors.div_ceil(block as u64).clamp(1, blocks.min(MAX_GRID_X)) as u32;
        let streams = forced.streams.unwrap_or_else(|| self.streams(limits.l2_bytes));
        let params = AppendParams { streams: streams as u32, ..*p };
        Launch { entry, params, grid: (grid, 1), block, shared_bytes: 0, cluster: 1 }
    }

    /// Whether the append stores evicted first (`AppendParams::streams`): the entries it writes
    /// pass the L2's size. H200, bf16, 64 sequences from Python beside the peers
    /// (docs/perf/page.md): 131072 tokens (537 MB written) 289.9 → 279.5 µs
    /// evicted first, but 8192 tokens (34 MB) 19.63 → 20.03.
    fn streams(&self, l2_bytes: u64) -> bool {
        let p = &self.params;
        let entry_bytes = 2 * p.heads as u64 * p.width as u64 * self.dtype.size() as u64;
        p.tokens.saturating_mul(entry_bytes) > l2_bytes
    }
}

/// Threads per block of the append kernel.
const BLOCK_THREADS: u32 = 128;

/// The grid's size in waves of resident blocks.
const WAVES: u64 = 1;

/// Blocks along x at most.
const MAX_GRID_X: u64 = (1 << 31) - 1;

/// The CPU backend: the kernels crate's host copy, tokens split across cores (no two write one
/// entry: checked).
fn cpu_tokens(dtype: DType, index: IndexType, params: &AppendParams) {
    let row = params.heads as u64 * params.width as u64;
    ferrinfer_kernels::with_element!(dtype, T => cpu::for_rows(params.tokens, row, |tokens| {
        for token in tokens {
            // SAFETY: the launcher validated every pointer, stride and page table entry.
            match index {
                IndexType::I32 => unsafe { append_token::<T, i32>(params, token) },
                IndexType::I64 => unsafe { append_token::<T, i64>(params, token) },
            }
        }
    }));
}

/// A paged cache's geometry, for [`appended`].
#[derive(Clone, Copy, Debug)]
pub struct CacheGeometry {
    pub heads: usize,
    pub head_dim: usize,
    pub page_size: usize,
    pub layout: KvLayout,
}

/// The f64 reference of a problem (the tests' and the benchmark's: pages of
/// [`PAGE_SIZE`], "NHD" unless the scalar says otherwise).
pub fn append_reference(problem: &Problem) -> Vec<Vec<f64>> {
    let tokens = problem.tensors[2].len();
    let heads = match tokens * problem.hidden {
        0 => 0,
        per_head => problem.tensors[0].len() / per_head,
    };
    let layout = problem.scalar::<KvLayout>("kv_layout");
    let geometry = CacheGeometry { heads, head_dim: problem.hidden, page_size: PAGE_SIZE, layout };
    appended(problem.tensors, geometry)
}

/// The caches after the append, `[k_cache, v_cache]`, from the op's inputs in argument order
/// (contiguous, as f64): FlashInfer's arithmetic on valid page tables.
pub fn appended(tensors: &[Vec<f64>], g: CacheGeometry) -> Vec<Vec<f64>> {
    let [key, value, sequences, positions, k_cache, v_cache, ids, bounds, _] = tensors else {
        return Vec::new();
    };
    let (mut k_out, mut v_out) = (k_cache.clone(), v_cache.clone());
    let row = g.heads * g.head_dim;
    for (token, (&b, &position)) in sequences.iter().zip(positions).enumerate() {
        let at = bounds[b as usize] as usize * g.page_size + position as usize;
        let (page, entry) = (ids[at / g.page_size] as usize, at % g.page_size);
        for head in 0..g.heads {
            let slot = match g.layout {
                KvLayout::Nhd => ((page * g.page_size + entry) * g.heads + head) * g.head_dim,
                KvLayout::Hnd => ((page * g.heads + head) * g.page_size + entry) * g.head_dim,
            };
            let from = token * row + head * g.head_dim;
            k_out[slot..slot + g.head_dim].copy_from_slice(&key[from..from + g.head_dim]);
            v_out[slot..slot + g.head_dim].copy_from_slice(&value[from..from + g.head_dim]);
        }
    }
    vec![k_out, v_out]
}

/// The f64 reference of `get_batch_indices_positions`: token `i`'s sequence is the one whose
/// bounds hold it, found by a walk over the bounds.
pub fn batch_indices_positions_reference(problem: &Problem) -> Vec<Vec<f64>> {
    let (bounds, lengths) = (&problem.tensors[0], &problem.tensors[1]);
    let nnz = usize::try_from(problem.scalar::<i32>("nnz")).unwrap_or(0);
    let mut out = [vec![-1.0; nnz], vec![-1.0; nnz]];
    for b in 0..lengths.len() {
        let (first, end) = (bounds[b], bounds[b + 1]);
        for i in (first.max(0.0) as usize..end.max(0.0) as usize).take_while(|&i| i < nnz) {
            let position = lengths[b] - (end - first) + (i as f64 - first);
            out[0][i] = b as f64;
            out[1][i] = position as i64 as i32 as f64;
        }
    }
    out.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_override_takes_a_block_waves_and_a_store_policy() {
        assert_eq!(parse_layout("256:2"), Some(LayoutOverride { block: Some(256), waves: Some(2), streams: None }));
        assert_eq!(parse_layout("*:0"), Some(LayoutOverride { block: None, waves: Some(0), streams: None }));
        assert_eq!(parse_layout("*:*:1"), Some(LayoutOverride { streams: Some(true), ..LayoutOverride::default() }));
        assert_eq!(parse_layout("*:*:0"), Some(LayoutOverride { streams: Some(false), ..LayoutOverride::default() }));
        assert_eq!(parse_layout("100"), None, "a block not a multiple of 32");
        assert_eq!(parse_layout("*:*:2"), None, "a store policy is 0 or 1");
        assert_eq!(parse_layout("1:2:3:4"), None);
    }

    #[test]
    fn kv_layout_choices_are_their_names_in_the_registry() {
        use crate::scalar::{Scalar, ScalarKind, ScalarType};
        for layout in [KvLayout::Nhd, KvLayout::Hnd] {
            let ScalarKind::Choice(names) = KvLayout::KIND else { panic!("kv_layout is a choice") };
            let Scalar::Choice(index) = layout.into_scalar() else { panic!("{layout:?} is a choice") };
            assert_eq!(names[index], format!("{layout:?}").to_uppercase());
            assert_eq!(KvLayout::from_scalar(Scalar::Choice(index)), Some(layout));
        }
        let default = append_paged_kv_cache::INFO.scalars[0].default;
        assert_eq!(default, Some(KvLayout::Nhd.into_scalar()), "the table's \"NHD\"");
    }

    #[test]
    fn appends_larger_than_l2_store_evicted_first() {
        const H200_L2: u64 = 50 << 20;
        let plan = |tokens: u64| {
            let params = AppendParams {
                key: 0,
                value: 0,
                k_cache: 0,
                v_cache: 0,
                batch_indices: 0,
                positions: 0,
                kv_indices: 0,
                kv_indptr: 0,
                tokens,
                sequences: 1,
                page_ids: 1,
                pages: 1,
                key_strides: [1024, 128],
                value_strides: [1024, 128],
                k_cache_strides: [16384, 1024, 128],
                v_cache_strides: [16384, 1024, 128],
                index_strides: [1; 4],
                heads: 8,
                width: 128,
                page_size: 16,
                streams: 0,
            };
            Plan { params, dtype: DType::Bf16, index: IndexType::I32, vec: 8 }
        };
        assert!(!plan(8192).streams(H200_L2), "8192 tokens × 8 heads × 128, bf16: 32 MiB written");
        assert!(!plan(12800).streams(H200_L2), "50 MiB: not past L2");
        assert!(plan(12801).streams(H200_L2), "just past L2");
        assert!(plan(131_072).streams(H200_L2), "512 MiB");
        assert!(plan(u64::MAX).streams(H200_L2), "no overflow");
    }
}
