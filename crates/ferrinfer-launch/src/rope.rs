//! The rope family at layers 1 and 4: the op table, validation, the launch planner, the CPU path
//! and the f64 references. Each op validates its arguments, then runs on the CPU backend or
//! launches the rope kernel of `ferrinfer-kernels/src/rope.rs` on the caller's stream.
//!
//! Queries `q` `[nnz, num_qo_heads, head_dim]` and keys `k` `[nnz, num_kv_heads, head_dim]` (f16,
//! bf16 or f32, one dtype; any head counts — grouped-query attention's are unequal), the
//! positions `pos_ids` `[nnz]` (int32 or int64). `apply_rope_with_cos_sin_cache` (vLLM's
//! interface) names them `query`, `key`, `positions`, takes the heads flattened (`[nnz,
//! num_heads · head_size]`, or `[nnz, num_heads, head_size]`) and reads the angles from
//! `cos_sin_cache`. Rules, checked before anything is written (so on error no output is touched):
//! - every tensor on the stream's device; q, k and the outputs of one dtype;
//! - q, k, q_rope, k_rope: three dimensions (flattened: two, of whole heads), the last
//!   contiguous, any token and head strides ≥ 0 (heads of a packed `qkv` tensor are views like
//!   any other); the outputs shaped as their inputs and apart from every input (the `_inplace`
//!   ops write q and k themselves, apart from every other input); the two written tensors each of
//!   distinct elements and apart from each other (or two parts of one packed tensor);
//! - `indptr` (`apply_rope`, …) `[batch + 1]` with batch ≥ 1 where there are tokens, `offsets`
//!   `[batch]` of its integer type; on the CPU `indptr` from 0 to nnz, never down;
//! - `rotary_dim` (None: `head_dim`) even, 2 to `head_dim`; `rope_scale` and `rope_theta`
//!   finite and > 0; llama 3.1's `low_freq_factor` > 0, `high_freq_factor` above it,
//!   `old_context_len` > 0;
//! - `cos_sin_cache` `[max_seq_len, rotary_dim]` f32, rows of `rotary_dim` (even, 2 to
//!   `head_size`) contiguous, any row stride ≥ 0; `head_size` ≥ 1; on the CPU every position
//!   below `max_seq_len` (on the GPU one that is not reads nothing and turns its token's pairs
//!   into NaN: `ferrinfer-kernels/src/rope.rs`, `Cached`);
//! - addresses need only element alignment: the vector width narrows until every stride,
//!   address, `rotary_dim / 2` and `head_dim − rotary_dim` allow it.
//!
//! The angle of pair `i` at position `p` is `f32(p) · freq[i]` in f32 (FlashInfer's), `freq[i]`
//! the f32 of FlashInfer's formula evaluated in f64 (`ferrinfer_kernels::rope::frequencies`), its
//! sine and cosine within two ulp for every angle below 2^30 (FlashInfer's `__sincosf` loses
//! accuracy past a few hundred radians); docs/perf/rope.md compares the two.

use ferrinfer_jit::rope::{RopeModule, RopeSource};
use ferrinfer_jit::spec::IndexType;
use ferrinfer_jit::{CudaArch, JitSpec};
use ferrinfer_kernels::element::DType;
use ferrinfer_kernels::rope::{ANGLE_BYTES, Cached, Computed, Ids, RopeParams, Segments, lanes, rope_token};

use crate::cuda::{self, KernelModule, Launch, Limits, ModuleCache};
use crate::layout::{self, Named};
use crate::op::{Call, FamilyOp, Problem};
use crate::{Error, Stream, TensorView, cpu, logging, tuning};

crate::op_table! { $
    /// The rope family's ops, one line each (grammar: [`define_ops!`](crate::define_ops)).
    rope_ops, family rope;
    /// Rotary position embedding of queries and keys at the positions `pos_ids`,
    /// FlashInfer's `apply_rope_pos_ids`: `q` `[nnz, num_qo_heads, head_dim]`, `k`
    /// `[nnz, num_kv_heads, head_dim]`, `pos_ids` `[nnz]` (int32 or int64) → `q_rope`,
    /// `k_rope` shaped as `q`, `k`. The first `rotary_dim` (None: all) values of each head
    /// turn in pairs — `(i, i + rotary_dim/2)`, or adjacent with `interleave` — pair `i`
    /// by `pos · rope_theta^(−2i/rotary_dim) / rope_scale`; the rest are copied.
    fn apply_rope_pos_ids(q: In[Heads], k: In[KvHeads], pos_ids: In[Batch as index, positions])
        -> q_rope: Out[Heads], k_rope: Out[KvHeads];
        rotary_dim: Option<u32>, interleave: bool = false, rope_scale: f32 = 1.0, rope_theta: f32 = 1e4
        => RopeOp::PLAIN, reference rope_reference;
    /// `apply_rope_pos_ids` in place, FlashInfer's `apply_rope_pos_ids_inplace`: `q` and
    /// `k` become their rotations.
    fn apply_rope_pos_ids_inplace(q: InOut[Heads], k: InOut[KvHeads], pos_ids: In[Batch as index, positions]);
        rotary_dim: Option<u32>, interleave: bool = false, rope_scale: f32 = 1.0, rope_theta: f32 = 1e4
        => RopeOp::PLAIN_IN_PLACE, reference rope_reference;
    /// `apply_rope_pos_ids` with llama 3.1's frequencies, FlashInfer's
    /// `apply_llama31_rope_pos_ids`: a frequency `f` whose wavelength `2π / f` is below
    /// `old_context_len / high_freq_factor` is kept, one above `old_context_len /
    /// low_freq_factor` divided by `rope_scale`, and one between blended smoothly.
    fn apply_llama31_rope_pos_ids(q: In[Heads], k: In[KvHeads], pos_ids: In[Batch as index, positions])
        -> q_rope: Out[Heads], k_rope: Out[KvHeads];
        rotary_dim: Option<u32>, interleave: bool = false, rope_scale: f32 = 8.0, rope_theta: f32 = 5e5,
        low_freq_factor: f32 = 1.0, high_freq_factor: f32 = 4.0, old_context_len: i32 = 8192
        => RopeOp::LLAMA31, reference rope_reference;
    /// `apply_llama31_rope_pos_ids` in place, FlashInfer's
    /// `apply_llama31_rope_pos_ids_inplace`.
    fn apply_llama31_rope_pos_ids_inplace(q: InOut[Heads], k: InOut[KvHeads], pos_ids: In[Batch as index, positions]);
        rotary_dim: Option<u32>, interleave: bool = false, rope_scale: f32 = 8.0, rope_theta: f32 = 5e5,
        low_freq_factor: f32 = 1.0, high_freq_factor: f32 = 4.0, old_context_len: i32 = 8192
        => RopeOp::LLAMA31_IN_PLACE, reference rope_reference;
    /// `apply_rope_pos_ids` over a ragged batch, FlashInfer's `apply_rope`: segment `b`
    /// of the tokens (`indptr[b] ≤ t < indptr[b + 1]`; `indptr` `[batch_size + 1]`, from
    /// 0 to nnz) starts at position `offsets[b]` (`offsets` `[batch_size]`, of
    /// `indptr`'s int32 or int64), its tokens at consecutive positions.
    fn apply_rope(q: In[Heads], k: In[KvHeads], indptr: In[SegmentBounds as index, segment_bounds], offsets: In[Segments as index, positions])
        -> q_rope: Out[Heads], k_rope: Out[KvHeads];
        rotary_dim: Option<u32>, interleave: bool = false, rope_scale: f32 = 1.0, rope_theta: f32 = 1e4
        => RopeOp::PLAIN.segmented(), reference segments_reference;
    /// `apply_rope` in place, FlashInfer's `apply_rope_inplace`.
    fn apply_rope_inplace(q: InOut[Heads], k: InOut[KvHeads], indptr: In[SegmentBounds as index, segment_bounds], offsets: In[Segments as index, positions]);
        rotary_dim: Option<u32>, interleave: bool = false, rope_scale: f32 = 1.0, rope_theta: f32 = 1e4
        => RopeOp::PLAIN_IN_PLACE.segmented(), reference segments_reference;
    /// `apply_rope` with llama 3.1's frequencies, FlashInfer's `apply_llama31_rope`.
    fn apply_llama31_rope(q: In[Heads], k: In[KvHeads], indptr: In[SegmentBounds as index, segment_bounds], offsets: In[Segments as index, positions])
        -> q_rope: Out[Heads], k_rope: Out[KvHeads];
        rotary_dim: Option<u32>, interleave: bool = false, rope_scale: f32 = 8.0, rope_theta: f32 = 5e5,
        low_freq_factor: f32 = 1.0, high_freq_factor: f32 = 4.0, old_context_len: i32 = 8192
        => RopeOp::LLAMA31.segmented(), reference segments_reference;
    /// `apply_llama31_rope` in place, FlashInfer's `apply_llama31_rope_inplace`.
    fn apply_llama31_rope_inplace(q: InOut[Heads], k: InOut[KvHeads], indptr: In[SegmentBounds as index, segment_bounds], offsets: In[Segments as index, positions]);
        rotary_dim: Option<u32>, interleave: bool = false, rope_scale: f32 = 8.0, rope_theta: f32 = 5e5,
        low_freq_factor: f32 = 1.0, high_freq_factor: f32 = 4.0, old_context_len: i32 = 8192
        => RopeOp::LLAMA31_IN_PLACE.segmented(), reference segments_reference;
    /// Rotary embedding with the angles read from a table, FlashInfer's
    /// `apply_rope_with_cos_sin_cache` (vLLM's and SGLang's rope): `query` `[nnz,
    /// num_q_heads · head_size]`, `key` `[nnz, num_k_heads · head_size]` (or three
    /// dimensions, `[nnz, heads, head_size]`), `positions` `[nnz]` (int32 or int64), each
    /// below the rows of `cos_sin_cache` `[max_seq_len, rotary_dim]` (f32), whose row `pos`
    /// holds the cosines of pairs `0 … rotary_dim/2 − 1` at `pos`, then their sines → `query_out`,
    /// `key_out` shaped as `query`, `key`. Pair `i` — `(i, i + rotary_dim/2)` with `is_neox`,
    /// else adjacent values — turns by its row's cosine and sine; values past `rotary_dim`
    /// are copied.
    fn apply_rope_with_cos_sin_cache(positions: In[Batch as index, table_rows], query: In[FlatHeads], key: In[FlatKvHeads], cos_sin_cache: In[Table as f32])
        -> query_out: Out[FlatHeads], key_out: Out[FlatKvHeads];
        head_size: i32 (example hidden), is_neox: bool = true
        => RopeOp::CACHED, reference cached_reference, order (positions, query, key, head_size, cos_sin_cache, is_neox);
    /// `apply_rope_with_cos_sin_cache` in place, FlashInfer's
    /// `apply_rope_with_cos_sin_cache_inplace`: `query` and `key` become their rotations.
    fn apply_rope_with_cos_sin_cache_inplace(positions: In[Batch as index, table_rows], query: InOut[FlatHeads], key: InOut[FlatKvHeads], cos_sin_cache: In[Table as f32]);
        head_size: i32 (example hidden), is_neox: bool = true
        => RopeOp::CACHED_IN_PLACE, reference cached_reference, order (positions, query, key, head_size, cos_sin_cache, is_neox);
}

/// Which op of the family a call is (the table's selectors): all run the one rope kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RopeOp {
    /// Llama 3.1's frequencies (three more scalars).
    llama31: bool,
    /// q and k rotated where they are (no outputs).
    in_place: bool,
    /// Where positions and angles come from: `pos_ids`, segments (`indptr`, `offsets`), or
    /// `positions` and a `cos_sin_cache` (whose op orders its arguments as vLLM's).
    source: RopeSource,
}

impl RopeOp {
    const PLAIN: RopeOp = RopeOp { llama31: false, in_place: false, source: RopeSource::Ids };
    const PLAIN_IN_PLACE: RopeOp = RopeOp { in_place: true, ..Self::PLAIN };
    const LLAMA31: RopeOp = RopeOp { llama31: true, ..Self::PLAIN };
    const LLAMA31_IN_PLACE: RopeOp = RopeOp { in_place: true, ..Self::LLAMA31 };
    const CACHED: RopeOp = RopeOp { source: RopeSource::CachedIds, ..Self::PLAIN };
    const CACHED_IN_PLACE: RopeOp = RopeOp { in_place: true, ..Self::CACHED };

    /// The op over a ragged batch (`indptr`, `offsets`) in place of `pos_ids`.
    const fn segmented(self) -> RopeOp {
        RopeOp { source: RopeSource::Segments, ..self }
    }
}

impl FamilyOp for RopeOp {
    fn run(&self, call: &Call) -> Result<(), Error> {
        // Read on every call, CPU ones too: a rejected value is an error wherever it runs.
        let forced = layout_override()?;
        let Some(plan) = plan(*self, call)? else { return Ok(()) };
        logging::input_statistics(call);
        match call.stream {
            Stream::Cpu => {
                cpu_tokens(&plan);
                Ok(())
            }
            Stream::Cuda(stream) => {
                static MODULES: ModuleCache<RopeModule> = ModuleCache::new();
                let module = RopeModule { dtype: plan.dtype, positions: plan.positions, source: plan.source };
                let entry = module
                    .entry(plan.vec)
                    .ok_or_else(|| Error::NoEntryPoint { module: format!("{module:?}"), entry: plan.vec as usize })?;
                cuda::launch(stream, &MODULES, module, |limits: &Limits| plan.kernel(entry, limits, forced))
            }
        }
    }
}

impl KernelModule for RopeModule {
    fn spec(&self, arch: CudaArch, debug: bool) -> JitSpec {
        RopeModule::spec(self, arch, debug)
    }
}

/// A validated call: kernel parameters, dtypes, where positions come from and vector width.
struct Plan {
    params: RopeParams,
    /// `q`, or the cache op's `query`: what an error about the tokens names.
    q_name: &'static str,
    dtype: DType,
    positions: IndexType,
    source: RopeSource,
    vec: u32,
}

/// A call's tensors by what they are.
struct Arguments<'a> {
    q: Named<'a>,
    k: Named<'a>,
    /// `pos_ids`; `indptr`, `offsets`; or `positions`.
    positions: Vec<Named<'a>>,
    cache: Option<Named<'a>>,
    /// The written tensors: `q_rope`, `k_rope` (or their cache op's names), or in place q and k.
    outputs: [Named<'a>; 2],
}

impl<'a> Arguments<'a> {
    /// The call's tensors in its op's order: `q, k, positions…, outputs` — or, for the cache
    /// op, `positions, query, key, cos_sin_cache, outputs`.
    fn of(op: RopeOp, call: &'a Call) -> Result<Self, Error> {
        let position_count = if op.source == RopeSource::Segments { 2 } else { 1 };
        let cache_count = (op.source == RopeSource::CachedIds) as usize;
        let inputs = 2 + position_count + cache_count;
        let count = inputs + if op.in_place { 0 } else { 2 };
        if call.tensors.len() != count {
            let expected = (count, call.scalars.len());
            return Err(Error::Arity { op: call.op.name, expected, found: (call.tensors.len(), call.scalars.len()) });
        }
        let named: Vec<Named> = call.named().collect();
        let (q, k, positions, cache) = match op.source {
            RopeSource::CachedIds => (named[1], named[2], vec![named[0]], Some(named[3])),
            _ => (named[0], named[1], named[2..inputs].to_vec(), None),
        };
        let outputs = if op.in_place { [q, k] } else { [named[inputs], named[inputs + 1]] };
        Ok(Arguments { q, k, positions, cache, outputs })
    }

    /// Every tensor the call only reads.
    fn read_only(&self, in_place: bool) -> Vec<Named<'a>> {
        let heads = if in_place { Vec::new() } else { vec![self.q, self.k] };
        heads.into_iter().chain(self.positions.iter().copied()).chain(self.cache).collect()
    }
}

/// Every check, in the order a caller would fix them; `None` when there is nothing to compute.
fn plan(op: RopeOp, call: &Call) -> Result<Option<Plan>, Error> {
    let args = Arguments::of(op, call)?;
    let (q, k) = (args.q.1, args.k.1);
    let heads = [args.q, args.k, args.outputs[0], args.outputs[1]];
    let others: Vec<Named> = args.positions.iter().copied().chain(args.cache).collect();
    let dtype = check_tensors(&heads, &others, &call.stream)?;
    let head_size = match op.source {
        RopeSource::CachedIds => Some(head_size(call.scalar("head_size")?)?),
        _ => None,
    };
    let [q_layout, k_layout, q_out_layout, k_out_layout] = heads.map(|named| head_layout(named, head_size));
    let (q_layout, k_layout, q_out_layout, k_out_layout) = (q_layout?, k_layout?, q_out_layout?, k_out_layout?);
    let (tokens, head_dim) = (q.shape()[0], q_layout.head_dim);
    if k.shape()[0] != tokens || k_layout.head_dim != head_dim {
        let expected = format!("{tokens} tokens of heads of {head_dim} (`{}`'s)", args.q.0);
        return Err(Error::ShapeMismatch { argument: args.k.0, expected, found: k.shape().to_vec() });
    }
    for ((name, out), input) in args.outputs.into_iter().zip([q, k]) {
        if out.shape() != input.shape() {
            let expected = format!("{:?} (the shape of its input)", input.shape());
            return Err(Error::ShapeMismatch { argument: name, expected, found: out.shape().to_vec() });
        }
    }
    let source = match op.source {
        RopeSource::Segments => PositionSource::segments(args.positions[0], args.positions[1], tokens)?,
        _ => PositionSource::ids(args.positions[0], tokens, args.q.0)?,
    };
    if q_layout.heads as u64 + k_layout.heads as u64 > u32::MAX as u64 {
        let value = q_layout.heads as u64 + k_layout.heads as u64;
        let what = "num_qo_heads + num_kv_heads";
        return Err(Error::TooLarge { argument: args.k.0, what, value, limit: u32::MAX as u64 });
    }
    let table = args.cache.map(|cache| CacheTable::of(cache, head_dim as u64, &source, tokens)).transpose()?;
    check_written(args.outputs, &args.read_only(op.in_place))?;
    if tokens == 0 || head_dim == 0 || q_layout.heads + k_layout.heads == 0 {
        return Ok(None);
    }
    let (frequencies, cache) = match table {
        Some(table) => (Frequencies::cached(table.rotary_dim, call.scalar("is_neox")?), table),
        None => (Frequencies::of(op, call, head_dim as u64)?, CacheTable::NONE),
    };
    let layouts = [q_layout, k_layout, q_out_layout, k_out_layout];
    let rotary_dim = frequencies.rotary_dim;
    let divisor = gcd(rotary_dim as u64 / 2, head_dim as u64 - rotary_dim as u64);
    let strides: Vec<u64> = layouts.iter().flat_map(|l| l.strides).collect();
    let addresses = heads.map(|(_, view)| view.address());
    let vec = cache.narrowed(layout::vector_width(dtype, divisor, &strides, &addresses));
    let params = RopeParams {
        q: q.address(),
        k: k.address(),
        q_out: addresses[2],
        k_out: addresses[3],
        positions: source.positions,
        position_stride: source.position_stride,
        indptr: source.indptr,
        indptr_stride: source.indptr_stride,
        segments: source.segments,
        cache: cache.address,
        cache_stride: cache.row_stride,
        cache_rows: cache.rows,
        tokens: tokens as u64,
        q_strides: q_layout.strides,
        k_strides: k_layout.strides,
        q_out_strides: q_out_layout.strides,
        k_out_strides: k_out_layout.strides,
        q_heads: q_layout.heads,
        k_heads: k_layout.heads,
        head_dim,
        rotary_dim,
        interleave: frequencies.interleave as u32,
        copy_rest: !op.in_place as u32,
        lane_bits: 0,
        tokens_per_block: 1,
        exponent_step: frequencies.exponent_step,
        inverse_scale: frequencies.inverse_scale,
        smooth_a: frequencies.smooth_a,
        smooth_b: frequencies.smooth_b,
    };
    Ok(Some(Plan { params, q_name: args.q.0, dtype, positions: source.index, source: op.source, vec }))
}

/// The cache op's `head_size`: at least 1.
fn head_size(value: i32) -> Result<u32, Error> {
    u32::try_from(value).ok().filter(|&size| size >= 1).ok_or_else(|| Error::invalid_scalar("head_size", value, "≥ 1"))
}

/// `cos_sin_cache`, validated: `[max_seq_len, rotary_dim]` f32, rows contiguous.
struct CacheTable {
    address: u64,
    row_stride: u64,
    rows: u64,
    rotary_dim: u32,
}

impl CacheTable {
    /// No table (angles computed).
    const NONE: CacheTable = CacheTable { address: 0, row_stride: 0, rows: 0, rotary_dim: 0 };

    /// The widest vector of at most `vec` in which the kernel can read the table's rows (`vec`
    /// f32 at a time: 16-byte alignment from four, the f32's own below; the kernels crate's
    /// `Angles::lane`): `vec` halved until its address and row stride allow it.
    fn narrowed(&self, mut vec: u32) -> u32 {
        let aligned = |vec: u32| {
            let bytes = (4 * vec as u64).min(16);
            self.address.is_multiple_of(bytes) && (4 * self.row_stride).is_multiple_of(bytes)
        };
        while vec > 1 && !aligned(vec) {
            vec /= 2;
        }
        vec
    }

    /// The table for heads of `head_dim`; on the CPU also every position of `source` (`tokens`
    /// of them) below its rows (read before anything is written; a GPU's are not read — that
    /// would wait for the device —, and the kernel reads no row outside the table).
    fn of((name, view): Named, head_dim: u64, source: &PositionSource, tokens: i64) -> Result<Self, Error> {
        if view.dtype() != DType::F32 {
            let (found, expected) = (view.dtype().to_string(), "float32".to_owned());
            return Err(Error::UnsupportedDType { argument: name, found, expected });
        }
        let (shape, strides) = (view.shape(), view.strides());
        if shape.len() != 2 {
            let expected = "[max_seq_len, rotary_dim]: 2 dimensions".to_owned();
            return Err(Error::ShapeMismatch { argument: name, expected, found: shape.to_vec() });
        }
        if shape[1] > 1 && strides[1] != 1 {
            return Err(Error::LastDimNotContiguous { argument: name, stride: strides[1] });
        }
        if strides[0] < 0 {
            let reason = format!("negative stride {}; expected strides ≥ 0", strides[0]);
            return Err(Error::UnsupportedLayout { argument: name, reason });
        }
        let rotary_dim = shape[1];
        if !(rotary_dim >= 2 && rotary_dim as u64 <= head_dim && rotary_dim % 2 == 0) {
            let expected = format!("[max_seq_len, rotary_dim] with rotary_dim even, 2 to head_size ({head_dim})");
            return Err(Error::ShapeMismatch { argument: name, expected, found: shape.to_vec() });
        }
        let rows = shape[0] as u64;
        if view.device() == crate::Device::Cpu
            && let Some(position) = (0..tokens as u64).map(|t| source.host_id(t)).find(|&p| p < 0 || p as u64 >= rows)
        {
            let expected = "positions below cos_sin_cache's rows (max_seq_len)";
            return Err(Error::invalid_scalar(source.name, position, expected));
        }
        let row_stride = if rows > 1 { strides[0] as u64 } else { 0 };
        Ok(CacheTable { address: view.address(), row_stride, rows, rotary_dim: rotary_dim as u32 })
    }
}

/// The call's positions, validated, as the kernel reads them.
struct PositionSource {
    /// The tensor's name (`pos_ids`, `positions`; `offsets` with segments).
    name: &'static str,
    index: IndexType,
    positions: u64,
    position_stride: u64,
    indptr: u64,
    indptr_stride: u64,
    segments: u64,
}

impl PositionSource {
    /// `pos_ids`: one position a token of `q`'s (`q_name`'s) `tokens`.
    fn ids((name, pos_ids): Named, tokens: i64, q_name: &str) -> Result<Self, Error> {
        if pos_ids.shape() != [tokens] {
            let expected = format!("[{tokens}] (a position a token of `{q_name}`)");
            return Err(Error::ShapeMismatch { argument: name, expected, found: pos_ids.shape().to_vec() });
        }
        Ok(PositionSource {
            name,
            index: layout::index_type(pos_ids),
            positions: pos_ids.address(),
            position_stride: layout::sequence_stride(name, pos_ids)?,
            indptr: 0,
            indptr_stride: 0,
            segments: 0,
        })
    }

    /// `indptr` `[batch + 1]` and `offsets` `[batch]` of one integer type; on the CPU `indptr`
    /// must also run from 0 to `tokens` and never down (read before anything is written; a
    /// GPU's values are not read — that would wait for the device —, and the kernel reads only
    /// inside both tensors whatever they hold).
    fn segments((indptr_name, indptr): Named, (offsets_name, offsets): Named, tokens: i64) -> Result<Self, Error> {
        if indptr.shape().len() != 1 || indptr.shape()[0] < 1 {
            let expected = "[batch_size + 1]: one dimension of at least 1".to_owned();
            return Err(Error::ShapeMismatch { argument: indptr_name, expected, found: indptr.shape().to_vec() });
        }
        let segments = indptr.shape()[0] - 1;
        if segments == 0 && tokens > 0 {
            let expected = format!("[batch_size + 1] with batch_size ≥ 1: {tokens} tokens need a segment");
            return Err(Error::ShapeMismatch { argument: indptr_name, expected, found: indptr.shape().to_vec() });
        }
        if offsets.shape() != [segments] {
            let expected = format!("[{segments}] (one offset a segment of `{indptr_name}`)");
            return Err(Error::ShapeMismatch { argument: offsets_name, expected, found: offsets.shape().to_vec() });
        }
        layout::check_dtype(offsets_name, offsets, indptr_name, indptr.dtype())?;
        let indptr_stride = layout::sequence_stride(indptr_name, indptr)?;
        if indptr.device() == crate::Device::Cpu {
            check_bounds(indptr_name, indptr, indptr_stride, tokens)?;
        }
        Ok(PositionSource {
            name: offsets_name,
            index: layout::index_type(indptr),
            positions: offsets.address(),
            position_stride: layout::sequence_stride(offsets_name, offsets)?,
            indptr: indptr.address(),
            indptr_stride,
            segments: segments as u64,
        })
    }
}

impl PositionSource {
    /// Token `token`'s position from `pos_ids` (a source of [`PositionSource::ids`]), read on
    /// the host (a validated host tensor's).
    fn host_id(&self, token: u64) -> i64 {
        // SAFETY: a validated host call's positions, one a token.
        unsafe { layout::host_index(self.index, self.positions, token, self.position_stride) }
    }
}

/// A host `indptr`'s values: 0 first, `tokens` last, never down.
fn check_bounds(argument: &'static str, indptr: &TensorView, stride: u64, tokens: i64) -> Result<(), Error> {
    let count = indptr.shape()[0] as usize;
    // SAFETY: a validated host view of `count` elements `stride` apart.
    let read = |i: usize| unsafe { layout::host_index(layout::index_type(indptr), indptr.address(), i as u64, stride) };
    let bounds: Vec<i64> = (0..count).map(read).collect();
    let invalid = |value: i64, expected: &str| Err(Error::invalid_scalar(argument, value, expected));
    if bounds[0] != 0 {
        return invalid(bounds[0], "0 first (segment 0 starts at token 0)");
    }
    if let Some(pair) = bounds.windows(2).find(|pair| pair[1] < pair[0]) {
        return invalid(pair[1], "bounds that never go down");
    }
    if bounds[count - 1] != tokens {
        return invalid(bounds[count - 1], "nnz (q's tokens) last");
    }
    Ok(())
}

/// The written tensors (`q_rope`, `k_rope`, or in place `q`, `k`): each one's own elements
/// distinct (no head or token stride folding two onto one), the two apart from each other —
/// where their byte ranges meet, as two parts of one packed tensor: the same token stride, each
/// token's heads of one between the other's — and apart from every tensor the call only reads.
fn check_written(outputs: [Named; 2], read_only: &[Named]) -> Result<(), Error> {
    for (name, view) in outputs {
        layout::check_distinct_elements(name, view)?;
    }
    let [(first_name, first), (second_name, second)] = outputs;
    if layout::overlaps(first, second) && !layout::interleaved_apart(first, second) {
        return Err(Error::Overlap { argument: second_name, other: first_name });
    }
    for (name, out) in outputs {
        for &(input_name, input) in read_only {
            if layout::overlaps(out, input) {
                return Err(Error::Overlap { argument: name, other: input_name });
            }
        }
    }
    Ok(())
}

/// The checks every op makes first, in the order a caller would fix them: the stream's and every
/// tensor's device, alignment, one dtype for the heads (q's), the written tensors writable (the
/// positions' integer dtypes the registry checked). The heads' dtype.
fn check_tensors(heads: &[Named; 4], others: &[Named], stream: &Stream) -> Result<DType, Error> {
    let (q_name, dtype) = (heads[0].0, heads[0].1.dtype());
    layout::check_placement(stream, heads.iter().chain(others).copied())?;
    for &(name, view) in &heads[1..] {
        layout::check_dtype(name, view, q_name, dtype)?;
    }
    for &(name, view) in &heads[2..] {
        layout::check_writable(name, view)?;
    }
    Ok(dtype)
}

/// A `[tokens, heads, head_dim]` tensor's head count, head size and `[token, head]` strides.
#[derive(Clone, Copy)]
struct HeadLayout {
    heads: u32,
    head_dim: u32,
    strides: [u64; 2],
}

/// Three dimensions `[tokens, heads, head_dim]` — or, with a `head_size` (the cache op's), two,
/// `[tokens, heads · head_size]`, or three of that head size —, the last contiguous, strides ≥ 0
/// (of a dimension of one: 0, never used).
fn head_layout((argument, view): Named, head_size: Option<u32>) -> Result<HeadLayout, Error> {
    let (shape, strides) = (view.shape(), view.strides());
    let flat = head_size.is_some() && shape.len() == 2;
    if !(shape.len() == 3 || flat) {
        let expected = match head_size {
            Some(size) => format!("[nnz, num_heads · {size}] or [nnz, num_heads, {size}] (head_size {size})"),
            None => "[nnz, num_heads, head_dim]: 3 dimensions".to_owned(),
        };
        return Err(Error::ShapeMismatch { argument, expected, found: shape.to_vec() });
    }
    let last = shape.len() - 1;
    if shape[last] > 1 && strides[last] != 1 {
        return Err(Error::LastDimNotContiguous { argument, stride: strides[last] });
    }
    if let Some(&stride) = strides.iter().find(|&&s| s < 0) {
        let reason = format!("negative stride {stride}; expected strides ≥ 0");
        return Err(Error::UnsupportedLayout { argument, reason });
    }
    let (heads, head_dim, head_stride) = match head_size {
        Some(size) if flat => (shape[1] / size as i64, size as i64, size as i64),
        _ => (shape[1], shape[2], strides[1]),
    };
    if head_size.is_some_and(|size| heads * head_dim != shape[1..].iter().product::<i64>() || head_dim != size as i64) {
        let size = head_size.unwrap_or(0);
        let expected =
            format!("[nnz, num_heads · {size}] or [nnz, num_heads, {size}]: whole heads of head_size {size}");
        return Err(Error::ShapeMismatch { argument, expected, found: shape.to_vec() });
    }
    let heads = u32::try_from(heads).map_err(|_| Error::TooLarge {
        argument,
        what: "num_heads",
        value: heads as u64,
        limit: u32::MAX as u64,
    })?;
    if head_dim > u32::MAX as i64 {
        return Err(Error::TooLarge { argument, what: "head_dim", value: head_dim as u64, limit: u32::MAX as u64 });
    }
    let used = |size: i64, stride: i64| if size > 1 { stride as u64 } else { 0 };
    Ok(HeadLayout {
        heads,
        head_dim: head_dim as u32,
        strides: [used(shape[0], strides[0]), used(heads as i64, head_stride)],
    })
}

/// The frequency scalars, validated, as the kernel takes them.
struct Frequencies {
    rotary_dim: u32,
    interleave: bool,
    exponent_step: f64,
    inverse_scale: f64,
    smooth_a: f64,
    smooth_b: f64,
}

impl Frequencies {
    /// The cache op's: pairs of `rotary_dim` (`cos_sin_cache`'s), NeoX's unless `is_neox` is
    /// false; no frequencies (the table has the angles).
    fn cached(rotary_dim: u32, is_neox: bool) -> Self {
        Frequencies {
            rotary_dim,
            interleave: !is_neox,
            exponent_step: 0.0,
            inverse_scale: 0.0,
            smooth_a: 0.0,
            smooth_b: 0.0,
        }
    }

    /// The scalars of `call` (`rotary_dim`, `interleave`, `rope_scale`, `rope_theta`, and
    /// llama 3.1's three) for heads of `head_dim`, validated.
    fn of(op: RopeOp, call: &Call, head_dim: u64) -> Result<Self, Error> {
        let rotary_dim = call.scalar::<Option<u32>>("rotary_dim")?.map_or(head_dim, u64::from);
        if !(rotary_dim >= 2 && rotary_dim <= head_dim && rotary_dim.is_multiple_of(2)) {
            let expected = "an even number from 2 to head_dim (or None: head_dim)";
            return Err(Error::invalid_scalar("rotary_dim", rotary_dim, expected));
        }
        if rotary_dim > MAX_ROTARY_DIM as u64 {
            let limit = MAX_ROTARY_DIM as u64;
            return Err(Error::TooLarge { argument: "rotary_dim", what: "rotary_dim", value: rotary_dim, limit });
        }
        let positive = |argument: &'static str| {
            let value = f64::from(call.scalar::<f32>(argument)?);
            match value.is_finite() && value > 0.0 {
                true => Ok(value),
                false => Err(Error::invalid_scalar(argument, value, "finite and > 0")),
            }
        };
        let (scale, theta) = (positive("rope_scale")?, positive("rope_theta")?);
        let (smooth_a, smooth_b) = match op.llama31 {
            false => (0.0, 0.0),
            true => {
                let low = positive("low_freq_factor")?;
                let high = f64::from(call.scalar::<f32>("high_freq_factor")?);
                if !(high.is_finite() && high > low) {
                    let expected = "finite and above low_freq_factor";
                    return Err(Error::invalid_scalar("high_freq_factor", high, expected));
                }
                let old_context_len: i32 = call.scalar("old_context_len")?;
                if old_context_len <= 0 {
                    return Err(Error::invalid_scalar("old_context_len", old_context_len, "> 0"));
                }
                llama31_smoothing(low, high, old_context_len.into())
            }
        };
        Ok(Frequencies {
            rotary_dim: rotary_dim as u32,
            interleave: call.scalar("interleave")?,
            exponent_step: 2.0 * theta.log2() / rotary_dim as f64,
            inverse_scale: 1.0 / scale,
            smooth_a,
            smooth_b,
        })
    }
}

/// Llama 3.1's `(smooth_a, smooth_b)`: a frequency `f`'s weight on itself (against `f /
/// rope_scale`) is `clamp(f · smooth_a + smooth_b, 0, 1)` (FlashInfer's `pos_enc.cuh`).
fn llama31_smoothing(low: f64, high: f64, old_context_len: f64) -> (f64, f64) {
    let tau = std::f64::consts::TAU;
    (old_context_len / (tau * high - tau * low), -1.0 / (high / low - 1.0))
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// Threads a block of the rope kernel.
const BLOCK_THREADS: u32 = 256;
/// The most values a head turns with computed angles: a token's (`ANGLE_BYTES` a pair) then fit
/// the 48 KB of shared memory a block has without opting in (a table's take none).
const MAX_ROTARY_DIM: u32 = 8192;
/// The grid's x dimension at most (CUDA's limit).
const MAX_GRID_X: u64 = (1 << 31) - 1;

tuning::layout_override! {
    /// The variable forcing the rope launch's layout, `block:tokens` (each a number or `*`, the
    /// planner's choice): threads a block (a multiple of 32 to 1024) and tokens a block — the knobs
    /// the benchmark sweeps (scripts/gpu/suite.sh).
    pub const LAYOUT_VAR: &str = "FERRINFER_ROPE_LAYOUT";
    struct LayoutOverride {
        block: Block,
        tokens_per_block: u64 if |t| t >= 1,
    }
    expected = "block:tokens, each a number or *, block a multiple of 32 to 1024, tokens ≥ 1";
}

impl Plan {
    /// A block of [`BLOCK_THREADS`] takes as many tokens as it has threads for their angles (one
    /// each), fewer where that leaves multiprocessors idle (tokens below twice their count);
    /// `lanes` threads a head, padded to a power of two; with a table's angles (no shared table)
    /// a block of a grid smaller than the multiprocessors has a thread for every two units.
    /// Block and tokens may be `forced`.
    fn kernel(&self, entry: usize, limits: &Limits, forced: LayoutOverride) -> Result<Launch<RopeParams>, Error> {
        let p = &self.params;
        let block = forced.block.unwrap_or(BLOCK_THREADS);
        let lane_bits = lanes(p.head_dim, p.rotary_dim, self.vec).next_power_of_two().trailing_zeros();
        let pairs = (p.rotary_dim / 2) as u64;
        let filling = p.tokens.div_ceil(2 * limits.multiprocessors as u64);
        let planned = (block as u64 / pairs).min(filling).max(1);
        let tokens_per_block = forced.tokens_per_block.unwrap_or(planned).min(p.tokens);
        let blocks = p.tokens.div_ceil(tokens_per_block);
        if blocks > MAX_GRID_X {
            let limit = MAX_GRID_X * tokens_per_block;
            return Err(Error::TooLarge { argument: self.q_name, what: "nnz", value: p.tokens, limit });
        }
        let heads = p.q_heads as u64 + p.k_heads as u64;
        // A block's units (lane, head, token) are counted in 32 bits, with room for the loop's
        // last step past them; its angles must fit the block's shared memory.
        let units = (tokens_per_block * heads) << lane_bits;
        // Angles read where they are turned (a table's) need no shared memory, and a block of
        // a grid that leaves multiprocessors idle takes all its units in one step (two a
        // thread): one token of bf16 heads of 128 (8 lanes a head) is 320 units, 160 threads
        // (docs/perf/rope.md, v2b).
        let direct = self.source == RopeSource::CachedIds;
        let block = match (forced.block, direct && blocks < limits.multiprocessors as u64) {
            (Some(block), _) => block,
            (None, true) => units.div_ceil(64).clamp(1, 32) as u32 * 32,
            (None, false) => block,
        };
        let shared_bytes = if direct { 0 } else { tokens_per_block * pairs * ANGLE_BYTES as u64 };
        if units + 2 * block as u64 > u32::MAX as u64 || shared_bytes > limits.max_shared_bytes as u64 {
            let reason = format!(
                "{tokens_per_block} tokens a block of {heads} heads ({units} units, {shared_bytes} bytes of angles): more than one block holds; force fewer tokens a block ({LAYOUT_VAR})"
            );
            return Err(Error::Config(reason));
        }
        let params = RopeParams { lane_bits, tokens_per_block: tokens_per_block as u32, ..*p };
        Ok(Launch { entry, params, grid: (blocks as u32, 1), block, shared_bytes: shared_bytes as u32, cluster: 1 })
    }
}

/// The CPU backend: the kernels crate's host numerics, tokens split across cores.
fn cpu_tokens(plan: &Plan) {
    let p = &plan.params;
    let width = (p.q_heads as u64 + p.k_heads as u64) * p.head_dim as u64;
    ferrinfer_kernels::with_element!(plan.dtype, T => cpu::for_rows(p.tokens, width, |tokens| {
        for token in tokens {
            // SAFETY: the launcher validated every pointer and stride in `params`.
            match (plan.positions, plan.source) {
                (IndexType::I32, RopeSource::Ids) => unsafe { rope_token::<T, Ids<i32>, Computed>(p, token) },
                (IndexType::I64, RopeSource::Ids) => unsafe { rope_token::<T, Ids<i64>, Computed>(p, token) },
                (IndexType::I32, RopeSource::Segments) => unsafe { rope_token::<T, Segments<i32>, Computed>(p, token) },
                (IndexType::I64, RopeSource::Segments) => unsafe { rope_token::<T, Segments<i64>, Computed>(p, token) },
                (IndexType::I32, RopeSource::CachedIds) => unsafe { rope_token::<T, Ids<i32>, Cached>(p, token) },
                (IndexType::I64, RopeSource::CachedIds) => unsafe { rope_token::<T, Ids<i64>, Cached>(p, token) },
            }
        }
    }));
}

/// The f64 reference of the `pos_ids` ops: `(q', k')` from the problem's `q` `[T, QH, H]`, `k`
/// `[T, KH, H]` and positions. Each pair turns by the angle FlashInfer defines in f32 —
/// `f32(pos) · freq` with `freq` the f32 of its formula (here evaluated with libm's `powf` in
/// f64) — whose sine and cosine are f64's.
fn rope_reference(p: &Problem) -> Vec<Vec<f64>> {
    computed_at(p, &p.tensors[2])
}

/// [`rope_reference`] with the positions of segments: token `t` of segment `b` at `offsets[b] +
/// t − indptr[b]`.
fn segments_reference(p: &Problem) -> Vec<Vec<f64>> {
    let (indptr, offsets) = (&p.tensors[2], &p.tensors[3]);
    let tokens = indptr.last().copied().unwrap_or(0.0) as usize;
    let positions: Vec<f64> = (0..tokens)
        .map(|t| {
            let b = (0..offsets.len()).rev().find(|&b| indptr[b] <= t as f64).unwrap_or(0);
            offsets[b] + t as f64 - indptr[b]
        })
        .collect();
    computed_at(p, &positions)
}

/// The cache ops' reference: `(query', key')` from the problem's `positions`, `query` `[T, QH ·
/// H]`, `key` `[T, KH · H]` and `cos_sin_cache` (its [`TABLE_ROWS`](crate::op::TABLE_ROWS) rows
/// of `rotary_dim`), heads of `head_size`; pair `i` at `pos` turns by the table's `(cos, sin)`
/// = `(row[i], row[rotary_dim/2 + i])` of row `pos`.
fn cached_reference(p: &Problem) -> Vec<Vec<f64>> {
    let (positions, table) = (&p.tensors[0], &p.tensors[3]);
    let rotary_dim = table.len() / crate::op::TABLE_ROWS;
    let head_dim = p.scalar::<i32>("head_size") as usize;
    let interleave = !p.scalar::<bool>("is_neox");
    let turn = |token: usize, pair: usize| {
        let row = &table[positions[token] as usize * rotary_dim..];
        (row[pair], row[rotary_dim / 2 + pair])
    };
    let heads = Heads { head_dim, rotary_dim, interleave, tokens: positions.len() };
    vec![heads.turned(&p.tensors[1], turn), heads.turned(&p.tensors[2], turn)]
}

/// `(q', k')` of the problem's `q` and `k` at `positions`, by the frequencies of its scalars
/// (`rotary_dim`, `interleave`, `rope_scale`, `rope_theta`, llama 3.1's three).
fn computed_at(p: &Problem, positions: &[f64]) -> Vec<Vec<f64>> {
    let number = |name| f64::from(p.scalar::<f32>(name));
    let rotary_dim = p.scalar::<Option<u32>>("rotary_dim").map_or(p.hidden, |d| d as usize);
    let (scale, theta) = (number("rope_scale"), number("rope_theta"));
    let llama31 = p.scalars.args.iter().any(|arg| arg.name == "old_context_len");
    let (smooth_a, smooth_b) = match llama31 {
        true => {
            let old_context_len = p.scalar::<i32>("old_context_len").into();
            llama31_smoothing(number("low_freq_factor"), number("high_freq_factor"), old_context_len)
        }
        false => (0.0, 0.0),
    };
    let frequencies: Vec<f32> = (0..rotary_dim / 2)
        .map(|i| {
            let f = theta.powf(-2.0 * i as f64 / rotary_dim as f64);
            let smooth = (f * smooth_a + smooth_b).clamp(0.0, 1.0);
            ((1.0 - smooth) * f / scale + smooth * f) as f32
        })
        .collect();
    // Every head of a token turns by the same angles: one sine-cosine a (token, pair).
    let angles: Vec<(f64, f64)> = positions
        .iter()
        .flat_map(|&position| {
            frequencies.iter().map(move |&frequency| {
                let (sin, cos) = ((position as f32 * frequency) as f64).sin_cos();
                (cos, sin)
            })
        })
        .collect();
    let turn = |token: usize, pair: usize| angles[token * frequencies.len() + pair];
    let heads = Heads { head_dim: p.hidden, rotary_dim, interleave: p.scalar("interleave"), tokens: positions.len() };
    vec![heads.turned(&p.tensors[0], turn), heads.turned(&p.tensors[1], turn)]
}

/// How a reference's heads turn: heads of `head_dim`, `tokens` tokens' worth in a tensor.
struct Heads {
    head_dim: usize,
    rotary_dim: usize,
    interleave: bool,
    tokens: usize,
}

impl Heads {
    /// `values` (token-major heads) with pair `i` of every head of token `t` turned by `turn(t,
    /// i)` = `(cos, sin)`; the rest as they are.
    fn turned(&self, values: &[f64], turn: impl Fn(usize, usize) -> (f64, f64)) -> Vec<f64> {
        let mut out = values.to_vec();
        let heads_per_token = (values.len() / (self.tokens * self.head_dim).max(1)).max(1);
        for (h, head) in out.chunks_mut(self.head_dim).enumerate() {
            for pair in 0..self.rotary_dim / 2 {
                let (cos, sin) = turn(h / heads_per_token, pair);
                let (a, b) =
                    if self.interleave { (2 * pair, 2 * pair + 1) } else { (pair, pair + self.rotary_dim / 2) };
                let (x, y) = (head[a], head[b]);
                head[a] = x * cos - y * sin;
                head[b] = y * cos + x * sin;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama31_smoothing_is_flashinfers() {
        let (a, b) = llama31_smoothing(1.0, 4.0, 8192.0);
        assert!((a - 8192.0 / (2.0 * std::f64::consts::PI * 3.0)).abs() < 1e-9);
        assert!((b + 1.0 / 3.0).abs() < 1e-15);
    }
}
