//! The decode family at layers 1 and 4: the op table, validation, the plan (how each request's
//! keys are cut into work items), the launch and the CPU path, and the f64 references. The math
//! is in `ferrinfer-kernels/src/decode.rs`.
//!
//! - `single_decode_with_kv_cache`: one query token (`q` `[num_qo_heads, head_dim]`) over
//!   contiguous keys and values (`[kv_len, num_kv_heads, head_dim]`, "NHD", or `[num_kv_heads,
//!   kv_len, head_dim]`, "HND").
//! - `batch_decode_with_paged_kv_cache`: a query token a request (`q` `[batch, num_qo_heads,
//!   head_dim]`) over a paged cache (the page family's layout and page table), cut into the work
//!   items of a plan ([`plan`]: `work` int32 `[items, 3]`, `work_indptr` int32 `[batch + 1]`),
//!   requests of several items merged from partial states (`partial_v` f32 `[items,
//!   num_qo_heads, head_dim]`, `partial_s` f32 `[items, num_qo_heads]`, a workspace). What
//!   FlashInfer's `BatchDecodeWithPagedKVCacheWrapper.run` does after its `plan`.
//!
//! Rules, checked before anything is written: every tensor on the stream's device; `q`, the
//! caches and `out` of one dtype (f16, bf16, f32), `lse` and the partial states f32, the page
//! table int32 or int64 alike, the plan int32; head_dim 64, 128 or 256; num_qo_heads a multiple
//! of num_kv_heads; rows 16-byte aligned (strides and addresses); outputs writable and apart
//! from every input. On the CPU backend the page table's and the plan's values are checked too;
//! on a GPU they are not read before the launch, and no value makes the kernel read outside
//! the caches (a page outside them is no key).

use std::num::NonZeroU64;

use ferrinfer_jit::decode::{DecodeModule, HEAD_DIMS, HEADS_PER_THREAD};
use ferrinfer_jit::spec::IndexType;
use ferrinfer_jit::{CudaArch, JitSpec};
use ferrinfer_kernels::decode::{
    DecodeParams, ITEM_THREADS, MAX_MMA_STAGES, MMA_ROWS, MMA_TILE_KEYS, decode_item, item_shared_bytes, merge_request,
    mma_shared_bytes,
};
use ferrinfer_kernels::element::DType;

use crate::cuda::{self, KernelModule, Launch, Limits, ModuleCache};
use crate::layout::{self, Named};
use crate::op::{Call, FamilyExtent, FamilyOp, FixedValues, KV_HEADS, Problem, QUERY_HEADS};
use crate::page::{self, KvLayout};
use crate::{Error, Stream, TensorView, logging, tuning};

crate::op_table! { $
    /// The decode family's ops, one line each (grammar: [`define_ops!`](crate::define_ops)).
    decode_ops, family decode;
    /// Attention of one query token over a request's keys and values, FlashInfer's
    /// `single_decode_with_kv_cache`: `q` `[num_qo_heads, head_dim]`, `k`, `v`
    /// `[kv_len, num_kv_heads, head_dim]` ("NHD") or `[num_kv_heads, kv_len, head_dim]`
    /// ("HND") → `out` like `q`, `lse` f32 `[num_qo_heads]` (base 2, as `merge_state`
    /// takes it; returned where `return_lse`). head_dim 64, 128 or 256; `sm_scale`
    /// 1/√head_dim unless given, times `q_scale` and `k_scale`; `out` times `v_scale`;
    /// `window_left` ≥ 0 keeps that many keys before the query's; `logits_soft_cap` > 0
    /// caps the scores as `c · tanh(x / c)`; "ROPE_LLAMA" turns the query to position
    /// kv_len − 1 and key j to j (`rope_scale` 1, `rope_theta` 10⁴ unless given).
    fn single_decode_with_kv_cache(q: In[SINGLE_QUERY], k: In[SINGLE_CACHE], v: In[SINGLE_CACHE])
        -> out: Out[SINGLE_QUERY], lse: Out[SINGLE_SCORES as f32];
        kv_layout: KvLayout = "NHD", pos_encoding_mode: PosEncodingMode = "NONE",
        use_tensor_cores: bool = false, q_scale: Option<f32>, k_scale: Option<f32>,
        v_scale: Option<f32>, window_left: i32 = -1, logits_soft_cap: Option<f32>,
        sm_scale: Option<f32>, rope_scale: Option<f32>, rope_theta: Option<f32>,
        return_lse: bool = false
        => DecodeOp::Single, reference single_reference;
    /// Attention of each request's query token over its keys and values in a paged
    /// cache, FlashInfer's `BatchDecodeWithPagedKVCacheWrapper.run` after `plan`: `q`
    /// `[batch, num_qo_heads, head_dim]`; the caches and page table as
    /// `append_paged_kv_cache` takes them; the plan of [`plan`] (`work`, `work_indptr`)
    /// and its workspace (`partial_v`, `partial_s`) → `out` like `q`, `lse` f32 `[batch,
    /// num_qo_heads]`. Scalars as `single_decode_with_kv_cache`'s.
    fn batch_decode_with_paged_kv_cache(
        q: In[Heads],
        paged_k_cache / paged_kv_cache: In[DECODE_CACHE],
        paged_v_cache / paged_kv_cache: In[DECODE_CACHE],
        kv_indptr: In[DECODE_BOUNDS as index, DECODE_BOUND_VALUES],
        kv_indices: In[DECODE_PAGE_IDS as index, DECODE_PAGE_ID_VALUES],
        kv_last_page_len: In[DECODE_REQUESTS as index, DECODE_LAST_PAGE_LENGTHS],
        work: In[DECODE_WORK as i32, DECODE_WORK_VALUES],
        work_indptr: In[DECODE_BOUNDS as i32, DECODE_WORK_BOUNDS],
        partial_v: InOut[DECODE_PARTIAL_V as f32],
        partial_s: InOut[DECODE_PARTIAL_S as f32]
    ) -> out: Out[Heads], lse: Out[HEAD_SCORES as f32];
        kv_layout: KvLayout = "NHD", pos_encoding_mode: PosEncodingMode = "NONE",
        q_scale: Option<f32>, k_scale: Option<f32>, v_scale: Option<f32>,
        window_left: i32 = -1, logits_soft_cap: Option<f32>, sm_scale: Option<f32>,
        rope_scale: Option<f32>, rope_theta: Option<f32>, return_lse: bool = false
        => DecodeOp::Batch, reference batch_reference;
}

/// How positions enter attention (FlashInfer's `pos_encoding_mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PosEncodingMode {
    /// None: the caller applied RoPE before (or the model has none).
    #[default]
    None,
    /// Llama's RoPE on the query and the keys, in the kernel.
    RopeLlama,
}

crate::choice_scalar!(PosEncodingMode { None = "NONE", RopeLlama = "ROPE_LLAMA" });

/// Which op of the family a call is (the table's selectors).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeOp {
    Single,
    Batch,
}

impl FamilyOp for DecodeOp {
    fn run(&self, call: &Call) -> Result<(), Error> {
        let plan = match self {
            DecodeOp::Single => single_plan(call)?,
            DecodeOp::Batch => batch_plan(call)?,
        };
        logging::input_statistics(call);
        match call.stream {
            Stream::Cpu => {
                cpu_run(&plan);
                Ok(())
            }
            Stream::Cuda(stream) => {
                static MODULES: ModuleCache<DecodeModule> = ModuleCache::new();
                let module = DecodeModule { dtype: plan.dtype, index: plan.index, head_dim: plan.params.head_dim };
                let items = |limits: &Limits| items_launch(&plan, &module, limits);
                cuda::launch(stream, &MODULES, module, items)?;
                if plan.split {
                    let merge = Launch {
                        entry: DecodeModule::MERGE,
                        params: plan.params,
                        grid: (plan.params.batch, plan.params.qo_heads),
                        block: plan.params.head_dim,
                        shared_bytes: 0,
                        cluster: 1,
                    };
                    cuda::launch(stream, &MODULES, module, |_: &Limits| Ok(merge))?;
                }
                Ok(())
            }
        }
    }
}

impl KernelModule for DecodeModule {
    fn spec(&self, arch: CudaArch, debug: bool) -> JitSpec {
        DecodeModule::spec(self, arch, debug)
    }
}

tuning::layout_override! {
    /// `FERRINFER_DECODE_LAYOUT=tensor_cores:stages`: the items' kernel on tensor cores (1) or
    /// CUDA cores (0), and the tensor-core kernel's tiles in flight; read once.
    pub const LAYOUT_VAR: &str = "FERRINFER_DECODE_LAYOUT";
    struct LayoutOverride {
        tensor_cores: Flag,
        stages: u32 if |s| (2..=MAX_MMA_STAGES).contains(&s),
    }
    expected = "tensor_cores:stages, each a number or *: tensor_cores 0 or 1, stages 2 to 4";
}

/// The items' kernel's launch: on tensor cores where the module has them (f16 and bf16, sm_80
/// on), without RoPE, and their shared memory fits the device; else on CUDA cores.
fn items_launch(plan: &Plan, module: &DecodeModule, limits: &Limits) -> Result<Launch<DecodeParams>, Error> {
    let forced = layout_override()?;
    let head_dim = plan.params.head_dim;
    let tensor_cores = module.tensor_core_entry(limits.arch).filter(|_| plan.params.rope == 0);
    let stages = forced.stages.unwrap_or_else(|| preferred_stages(head_dim));
    let stages = (2..=stages).rev().find(|&s| mma_shared_bytes(head_dim, s) <= limits.max_shared_bytes);
    if let (Some(entry), Some(stages), true) = (tensor_cores, stages, forced.tensor_cores != Some(false)) {
        return Ok(Launch {
            entry,
            params: DecodeParams { stages, ..plan.params },
            grid: (plan.items, plan.kv_heads * plan.params.group.div_ceil(MMA_ROWS)),
            block: ITEM_THREADS,
            shared_bytes: mma_shared_bytes(head_dim, stages),
            cluster: 1,
        });
    }
    let heads = heads_per_thread(plan.params.group);
    let entry = module
        .entry(heads, plan.params.rope != 0)
        .ok_or_else(|| Error::NoEntryPoint { module: format!("{module:?}"), entry: heads as usize })?;
    Ok(Launch {
        entry,
        params: plan.params,
        grid: (plan.items, plan.kv_heads * plan.params.group.div_ceil(heads)),
        block: ITEM_THREADS,
        shared_bytes: item_shared_bytes(head_dim, module.vec(), heads),
        cluster: 1,
    })
}

/// The tensor-core kernel's tiles in flight for `head_dim`: about 100 KB of staging, two blocks
/// a multiprocessor on sm_90 for head_dim ≤ 128.
fn preferred_stages(head_dim: u32) -> u32 {
    match head_dim {
        0..=64 => 4,
        65..=128 => 3,
        _ => 2,
    }
}

/// The query heads a thread takes for a group of `group`: the fewest entries' count that covers
/// it in one chunk, else the most (registers: 80, 124 and 161 for 1, 2 and 4 heads of 128 in
/// bf16 on sm_90).
fn heads_per_thread(group: u32) -> u32 {
    HEADS_PER_THREAD.into_iter().find(|&h| h >= group).unwrap_or(HEADS_PER_THREAD[HEADS_PER_THREAD.len() - 1])
}

/// A validated call.
struct Plan {
    params: DecodeParams,
    dtype: DType,
    index: IndexType,
    kv_heads: u32,
    /// Work items (the grid's x).
    items: u32,
    /// Whether a request may have several items (the merge runs).
    split: bool,
}

/// The scalars both ops share, as the kernels take them.
struct Scores {
    score_scale: f32,
    cap_scale: f32,
    v_scale: f32,
    rope: bool,
    rope_exponent_step: f64,
    rope_inverse_scale: f64,
    window_left: i32,
}

/// The call's scalars for a head size of `head_dim`, each checked.
fn scores(call: &Call, head_dim: u32) -> Result<Scores, Error> {
    let positive = |name: &'static str, value: Option<f32>, default: f32| -> Result<f32, Error> {
        match value {
            None => Ok(default),
            Some(x) if x.is_finite() && x > 0.0 => Ok(x),
            Some(x) => Err(Error::invalid_scalar(name, x, "a finite number > 0, or None")),
        }
    };
    let sm_scale = positive("sm_scale", call.scalar("sm_scale")?, 1.0 / (head_dim as f32).sqrt())?
        * positive("q_scale", call.scalar("q_scale")?, 1.0)?
        * positive("k_scale", call.scalar("k_scale")?, 1.0)?;
    let v_scale = positive("v_scale", call.scalar("v_scale")?, 1.0)?;
    let cap: Option<f32> = call.scalar("logits_soft_cap")?;
    let cap = match cap {
        Some(c) if c.is_nan() || c < 0.0 => return Err(Error::invalid_scalar("logits_soft_cap", c, "≥ 0, or None")),
        Some(c) if c > 0.0 => Some(c),
        _ => None,
    };
    let log2e = std::f32::consts::LOG2_E;
    let (score_scale, cap_scale) = match cap {
        Some(c) => (c * log2e, sm_scale / c),
        None => (sm_scale * log2e, 0.0),
    };
    let mode: PosEncodingMode = call.scalar("pos_encoding_mode")?;
    let rope_scale = positive("rope_scale", call.scalar("rope_scale")?, 1.0)?;
    let rope_theta = positive("rope_theta", call.scalar("rope_theta")?, 1e4)?;
    Ok(Scores {
        score_scale,
        cap_scale,
        v_scale,
        rope: mode == PosEncodingMode::RopeLlama,
        rope_exponent_step: 2.0 * (rope_theta as f64).log2() / head_dim as f64,
        rope_inverse_scale: 1.0 / rope_scale as f64,
        window_left: call.scalar("window_left")?,
    })
}

/// `q`'s last dimension, which must be a head size with kernels.
fn head_dim_of(argument: &'static str, view: &TensorView, expected: &str) -> Result<u32, Error> {
    let head_dim = view.shape().last().copied().unwrap_or(0);
    if !HEAD_DIMS.contains(&(head_dim as u32)) {
        let expected = format!("{expected} with head_dim one of {HEAD_DIMS:?}");
        return Err(Error::ShapeMismatch { argument, expected, found: view.shape().to_vec() });
    }
    Ok(head_dim as u32)
}

/// `view`'s strides as `u64`, after checking none is negative, the last dimension is contiguous
/// and, for a GPU (`aligned`), every row start is 16-byte aligned (the kernels load 16 bytes at a
/// time).
fn row_strides(argument: &'static str, view: &TensorView, aligned: bool) -> Result<Vec<u64>, Error> {
    page::check_strides(argument, view)?;
    let size = view.dtype().size() as u64;
    let vec = 16 / size;
    let strides: Vec<u64> =
        view.shape().iter().zip(view.strides()).map(|(&n, &s)| if n <= 1 { 0 } else { s as u64 }).collect();
    let empty = view.shape().contains(&0);
    let rows_aligned =
        view.address().is_multiple_of(16) && strides[..strides.len() - 1].iter().all(|s| s.is_multiple_of(vec));
    if aligned && !empty && !rows_aligned {
        let reason =
            format!("rows must start 16-byte aligned (address {:#x}, strides {:?})", view.address(), view.strides());
        return Err(Error::UnsupportedLayout { argument, reason });
    }
    Ok(strides)
}

/// Whether the call runs on a GPU.
fn gpu(call: &Call) -> bool {
    matches!(call.stream, Stream::Cuda(_))
}

/// `view`'s shape must be `expected`.
fn check_shape(argument: &'static str, view: &TensorView, expected: &[i64], what: &str) -> Result<(), Error> {
    if view.shape() != expected {
        return Err(Error::ShapeMismatch {
            argument,
            expected: format!("{expected:?} ({what})"),
            found: view.shape().to_vec(),
        });
    }
    Ok(())
}

/// Outputs writable, apart from every input and from each other.
fn check_outputs(outputs: &[Named], inputs: &[Named]) -> Result<(), Error> {
    for &(name, view) in outputs {
        layout::check_writable(name, view)?;
        for &(other, input) in inputs {
            if layout::overlaps(view, input) {
                return Err(Error::Overlap { argument: name, other });
            }
        }
    }
    for (i, &(name, view)) in outputs.iter().enumerate() {
        if let Some(&(other, _)) = outputs[..i].iter().find(|(_, o)| layout::overlaps(view, o)) {
            return Err(Error::Overlap { argument: name, other });
        }
    }
    Ok(())
}

/// An f32 tensor's check.
fn check_f32(argument: &'static str, view: &TensorView, what: &str) -> Result<(), Error> {
    if view.dtype() != DType::F32 {
        let expected = format!("float32 ({what})");
        return Err(Error::UnsupportedDType { argument, found: view.dtype().to_string(), expected });
    }
    Ok(())
}

/// The query heads a kv head of `kv_heads` serves, or the error naming `q`.
fn group_of(q: &TensorView, qo_heads: i64, kv_heads: i64, cache: &'static str) -> Result<u32, Error> {
    if kv_heads < 1 || qo_heads < kv_heads || qo_heads % kv_heads != 0 {
        let expected = format!("num_qo_heads a multiple of num_kv_heads ({kv_heads}, `{cache}`'s)");
        return Err(Error::ShapeMismatch { argument: "q", expected, found: q.shape().to_vec() });
    }
    Ok((qo_heads / kv_heads) as u32)
}

fn single_plan(call: &Call) -> Result<Plan, Error> {
    let [q, k, v, out, lse] = call.tensors()?;
    let named = [("q", q), ("k", k), ("v", v), ("out", out), ("lse", lse)];
    layout::check_placement(&call.stream, named.iter().copied())?;
    for (name, view) in [("k", k), ("v", v), ("out", out)] {
        layout::check_dtype(name, view, "q", q.dtype())?;
    }
    check_f32("lse", lse, "the log-sum-exp of each head's scores")?;
    let head_dim = head_dim_of("q", q, "[num_qo_heads, head_dim]")?;
    if q.shape().len() != 2 {
        let expected = "[num_qo_heads, head_dim]".to_owned();
        return Err(Error::ShapeMismatch { argument: "q", expected, found: q.shape().to_vec() });
    }
    let layout: KvLayout = call.scalar("kv_layout")?;
    let (entries_dim, heads_dim) = match layout {
        KvLayout::Nhd => (0, 1),
        KvLayout::Hnd => (1, 0),
    };
    let shape = k.shape();
    if shape.len() != 3 || shape[2] != head_dim as i64 {
        let expected = match layout {
            KvLayout::Nhd => format!("[kv_len, num_kv_heads, {head_dim}] (kv_layout \"NHD\")"),
            KvLayout::Hnd => format!("[num_kv_heads, kv_len, {head_dim}] (kv_layout \"HND\")"),
        };
        return Err(Error::ShapeMismatch { argument: "k", expected, found: shape.to_vec() });
    }
    check_shape("v", v, shape, "`k`'s shape")?;
    let group = group_of(q, q.shape()[0], shape[heads_dim], "k")?;
    check_shape("out", out, q.shape(), "`q`'s shape")?;
    check_shape("lse", lse, &q.shape()[..1], "[num_qo_heads]")?;
    let [q_strides, k_strides, v_strides, out_strides] =
        [("q", q), ("k", k), ("v", v), ("out", out)].map(|(name, view)| row_strides(name, view, gpu(call)));
    let (q_strides, k_strides, v_strides, out_strides) = (q_strides?, k_strides?, v_strides?, out_strides?);
    if k_strides != v_strides {
        let reason = format!("strides {:?}; expected `k`'s, {:?}", v.strides(), k.strides());
        return Err(Error::UnsupportedLayout { argument: "v", reason });
    }
    let lse_stride = layout::sequence_stride("lse", lse)?;
    check_outputs(&named[3..], &named[..3])?;
    let scores = scores(call, head_dim)?;
    let params = DecodeParams {
        q: q.address(),
        k: k.address(),
        v: v.address(),
        out: out.address(),
        lse: lse.address(),
        q_strides: [0, q_strides[0]],
        kv_strides: [0, k_strides[entries_dim], k_strides[heads_dim]],
        out_strides: [0, out_strides[0]],
        lse_strides: [0, lse_stride],
        kv_len: shape[entries_dim] as u64,
        batch: 1,
        qo_heads: q.shape()[0] as u32,
        group,
        head_dim,
        page_size: 1,
        ..params_of(&scores)
    };
    Ok(Plan {
        params,
        dtype: q.dtype(),
        index: IndexType::I32,
        kv_heads: shape[heads_dim] as u32,
        items: 1,
        split: false,
    })
}

/// The parameters every call shares, from its scalars (pointers, shapes and strides zero).
fn params_of(s: &Scores) -> DecodeParams {
    DecodeParams {
        q: 0,
        k: 0,
        v: 0,
        kv_indices: 0,
        kv_indptr: 0,
        kv_last_page_len: 0,
        work: 0,
        work_indptr: 0,
        out: 0,
        lse: 0,
        partial_v: 0,
        partial_s: 0,
        q_strides: [0; 2],
        kv_strides: [0; 3],
        out_strides: [0; 2],
        lse_strides: [0; 2],
        index_strides: [0; 3],
        pages: 0,
        page_ids: 0,
        kv_len: 0,
        batch: 0,
        qo_heads: 0,
        group: 1,
        head_dim: 0,
        page_size: 1,
        window_left: s.window_left,
        score_scale: s.score_scale,
        cap_scale: s.cap_scale,
        v_scale: s.v_scale,
        rope: s.rope as u32,
        stages: 2,
        rope_exponent_step: s.rope_exponent_step,
        rope_inverse_scale: s.rope_inverse_scale,
    }
}

fn batch_plan(call: &Call) -> Result<Plan, Error> {
    let [q, k_cache, v_cache, kv_indptr, kv_indices, last_page_len, work, work_indptr, partial_v, partial_s, out, lse] =
        call.tensors()?;
    let inputs = [
        ("q", q),
        ("paged_k_cache", k_cache),
        ("paged_v_cache", v_cache),
        ("kv_indptr", kv_indptr),
        ("kv_indices", kv_indices),
        ("kv_last_page_len", last_page_len),
        ("work", work),
        ("work_indptr", work_indptr),
    ];
    let outputs = [("partial_v", partial_v), ("partial_s", partial_s), ("out", out), ("lse", lse)];
    layout::check_placement(&call.stream, inputs.iter().chain(&outputs).copied())?;
    for (name, view) in [("paged_k_cache", k_cache), ("paged_v_cache", v_cache), ("out", out)] {
        layout::check_dtype(name, view, "q", q.dtype())?;
    }
    for (name, view) in [("kv_indices", kv_indices), ("kv_last_page_len", last_page_len)] {
        layout::check_dtype(name, view, "kv_indptr", kv_indptr.dtype())?;
    }
    check_f32("partial_v", partial_v, "the workspace's partial states")?;
    check_f32("partial_s", partial_s, "the workspace's partial log-sum-exps")?;
    check_f32("lse", lse, "the log-sum-exp of each head's scores")?;
    let head_dim = head_dim_of("q", q, "[batch_size, num_qo_heads, head_dim]")?;
    if q.shape().len() != 3 {
        let expected = "[batch_size, num_qo_heads, head_dim]".to_owned();
        return Err(Error::ShapeMismatch { argument: "q", expected, found: q.shape().to_vec() });
    }
    let (batch, qo_heads) = (q.shape()[0], q.shape()[1]);
    let layout: KvLayout = call.scalar("kv_layout")?;
    let heads_dim = if layout == KvLayout::Nhd { 2 } else { 1 };
    let kv_heads = k_cache.shape().get(heads_dim).copied().unwrap_or(0);
    let cache = page::check_caches(
        &[("paged_k_cache", k_cache), ("paged_v_cache", v_cache)],
        layout,
        (kv_heads as u64, head_dim as u64),
    )?;
    let group = group_of(q, qo_heads, kv_heads, "paged_k_cache")?;
    let index_strides = check_page_table_shapes(kv_indptr, kv_indices, last_page_len, batch)?;
    let items = check_plan_shapes(work, work_indptr, batch)?;
    check_shape(
        "partial_v",
        partial_v,
        &[items, qo_heads, head_dim as i64],
        "[items, num_qo_heads, head_dim]: the plan's items",
    )?;
    check_shape("partial_s", partial_s, &[items, qo_heads], "[items, num_qo_heads]: the plan's items")?;
    for (name, view) in [("partial_v", partial_v), ("partial_s", partial_s)] {
        if !is_contiguous(view) {
            let reason = "a workspace must be contiguous".to_owned();
            return Err(Error::UnsupportedLayout { argument: name, reason });
        }
    }
    check_shape("out", out, q.shape(), "`q`'s shape")?;
    check_shape("lse", lse, &q.shape()[..2], "[batch_size, num_qo_heads]")?;
    let (q_strides, out_strides) = (row_strides("q", q, gpu(call))?, row_strides("out", out, gpu(call))?);
    for (name, view) in [("paged_k_cache", k_cache), ("paged_v_cache", v_cache)] {
        row_strides(name, view, gpu(call))?;
    }
    if cache.strides[0] != cache.strides[1] {
        let reason = format!("strides {:?}; expected `paged_k_cache`'s, {:?}", v_cache.strides(), k_cache.strides());
        return Err(Error::UnsupportedLayout { argument: "paged_v_cache", reason });
    }
    let lse_strides = [0, 1].map(|i| if lse.shape()[i] <= 1 { 0 } else { lse.strides()[i].max(0) as u64 });
    check_outputs(&outputs, &inputs)?;
    let scores = scores(call, head_dim)?;
    let params = DecodeParams {
        q: q.address(),
        k: k_cache.address(),
        v: v_cache.address(),
        kv_indices: kv_indices.address(),
        kv_indptr: kv_indptr.address(),
        kv_last_page_len: last_page_len.address(),
        work: work.address(),
        work_indptr: work_indptr.address(),
        out: out.address(),
        lse: lse.address(),
        partial_v: partial_v.address(),
        partial_s: partial_s.address(),
        q_strides: [q_strides[0], q_strides[1]],
        kv_strides: cache.strides[0],
        out_strides: [out_strides[0], out_strides[1]],
        lse_strides,
        index_strides,
        pages: cache.pages,
        page_ids: kv_indices.shape()[0] as u64,
        batch: batch as u32,
        qo_heads: qo_heads as u32,
        group,
        head_dim,
        page_size: cache.page_size as u32,
        ..params_of(&scores)
    };
    if matches!(call.stream, Stream::Cpu) {
        check_values(&params, [kv_indptr, kv_indices, last_page_len], (work, work_indptr))?;
    }
    let plan = Plan {
        params,
        dtype: q.dtype(),
        index: layout::index_type(kv_indptr),
        kv_heads: kv_heads as u32,
        items: items as u32,
        split: items > batch,
    };
    Ok(plan)
}

/// The page table's shapes: one dimension each, `kv_indptr` `[batch + 1]`, `kv_last_page_len`
/// `[batch]`. Their strides (`kv_indices`, `kv_indptr`, `kv_last_page_len`).
fn check_page_table_shapes(
    kv_indptr: &TensorView,
    kv_indices: &TensorView,
    last_page_len: &TensorView,
    batch: i64,
) -> Result<[u64; 3], Error> {
    check_shape("kv_indptr", kv_indptr, &[batch + 1], "batch_size + 1: `q`'s first dimension + 1")?;
    check_shape("kv_last_page_len", last_page_len, &[batch], "batch_size: `q`'s first dimension")?;
    if kv_indices.shape().len() != 1 {
        let expected = "[num_pages_used]: one dimension".to_owned();
        return Err(Error::ShapeMismatch { argument: "kv_indices", expected, found: kv_indices.shape().to_vec() });
    }
    Ok([
        layout::sequence_stride("kv_indices", kv_indices)?,
        layout::sequence_stride("kv_indptr", kv_indptr)?,
        layout::sequence_stride("kv_last_page_len", last_page_len)?,
    ])
}

/// The plan's shapes: `work` `[items, 3]` with at least a request's items, `work_indptr`
/// `[batch + 1]`, both contiguous. Its items.
fn check_plan_shapes(work: &TensorView, work_indptr: &TensorView, batch: i64) -> Result<i64, Error> {
    let items = match work.shape() {
        [items, 3] if *items >= batch.max(1) => *items,
        found => {
            let expected = format!("[items ≥ {}, 3]: a plan's work items (`decode::plan`)", batch.max(1));
            return Err(Error::ShapeMismatch { argument: "work", expected, found: found.to_vec() });
        }
    };
    check_shape("work_indptr", work_indptr, &[batch + 1], "batch_size + 1: a plan's bounds")?;
    for (name, view) in [("work", work), ("work_indptr", work_indptr)] {
        if !is_contiguous(view) {
            let reason = "a plan's tensor must be contiguous".to_owned();
            return Err(Error::UnsupportedLayout { argument: name, reason });
        }
    }
    Ok(items)
}

/// The CPU backend's checks of the page table's and the plan's values, each naming the tensor
/// and index of the first bad value.
fn check_values(
    p: &DecodeParams,
    [kv_indptr, kv_indices, last_page_len]: [&TensorView; 3],
    (work, work_indptr): (&TensorView, &TensorView),
) -> Result<(), Error> {
    let [ids_stride, bounds_stride, last_stride] = p.index_strides;
    // SAFETY: host views of the shapes and strides `batch_plan` validated.
    let (bounds, ids, lengths) = unsafe {
        (
            layout::host_indices(kv_indptr, bounds_stride),
            layout::host_indices(kv_indices, ids_stride),
            layout::host_indices(last_page_len, last_stride),
        )
    };
    page::check_page_ids(&bounds, &ids, p.pages)?;
    let page_size = p.page_size as i64;
    for (b, &last) in lengths.iter().enumerate() {
        // A request of no pages may give any length up to a page (FlashInfer's plans pass 0 or
        // a stale value there); one with pages, a length of its last page.
        let least = if bounds[b + 1] == bounds[b] { 0 } else { 1 };
        if !(least..=page_size).contains(&last) {
            let expected = format!("{least} ≤ kv_last_page_len[{b}] ≤ {page_size}");
            return Err(Error::InvalidIndex { argument: "kv_last_page_len", index: b, value: last, expected });
        }
    }
    check_plan_values(work, work_indptr)
}

/// A plan's values: each request's items consecutive (`work_indptr` from 0, rising by at least
/// one a request, to at most `work`'s items), each item of its request, its keys a range from
/// ≥ 0; the items past the last request's idle (request −1, as a plan padded to
/// [`plan_capacity`] for CUDA graphs leaves them).
fn check_plan_values(work: &TensorView, work_indptr: &TensorView) -> Result<(), Error> {
    // SAFETY: contiguous host int32 views of the shapes `check_plan_shapes` validated.
    let (work, bounds) = unsafe { (host_i32s(work), host_i32s(work_indptr)) };
    let items = (work.len() / 3) as i64;
    let invalid =
        |argument, index, value, expected: String| Err(Error::InvalidIndex { argument, index, value, expected });
    let last = bounds.len() - 1;
    if bounds[0] != 0 {
        return invalid("work_indptr", 0, bounds[0], "work_indptr[0] = 0 (a plan's first bound)".to_owned());
    }
    if bounds[last] > items {
        return invalid("work_indptr", last, bounds[last], format!("work_indptr[{last}] ≤ {items} (`work`'s items)"));
    }
    for item in bounds[last]..items {
        let request = work[3 * item as usize];
        if request != IDLE_ITEM as i64 {
            let expected = format!("work[{item}] = [{IDLE_ITEM}, …] (an idle item: past the last request's)");
            return invalid("work", 3 * item as usize, request, expected);
        }
    }
    for (b, pair) in bounds.windows(2).enumerate() {
        if pair[1] <= pair[0] {
            let expected = format!("work_indptr[{}] > {} (an item or more a request)", b + 1, pair[0]);
            return invalid("work_indptr", b + 1, pair[1], expected);
        }
        for item in pair[0]..pair[1] {
            let [request, begin, end] = [0, 1, 2].map(|j| work[3 * item as usize + j]);
            if request != b as i64 || begin < 0 || end < begin {
                let expected = format!("work[{item}] = [{b}, first ≥ 0, end ≥ first] (request {b}'s item)");
                return invalid("work", 3 * item as usize, request, expected);
            }
        }
    }
    Ok(())
}

/// Every value of a contiguous host int32 tensor.
///
/// # Safety
/// `view` a contiguous host int32 view (validated).
unsafe fn host_i32s(view: &TensorView) -> Vec<i64> {
    let count: i64 = view.shape().iter().product();
    let base = view.address() as *const i32;
    // SAFETY: forwarded to the caller.
    (0..count.max(0) as usize).map(|i| unsafe { base.add(i).read_unaligned() } as i64).collect()
}

/// Whether `view`'s elements are its shape's in row-major order, without gaps.
fn is_contiguous(view: &TensorView) -> bool {
    let shape: Vec<usize> = view.shape().iter().map(|&n| n.max(0) as usize).collect();
    let wanted = crate::contiguous_strides(&shape);
    view.shape().iter().zip(view.strides()).zip(&wanted).all(|((&n, &s), &w)| n <= 1 || s == w)
}

/// The CPU backend: the plan's items, then the merge of requests of several.
fn cpu_run(plan: &Plan) {
    let p = &plan.params;
    let kv_heads = plan.kv_heads;
    ferrinfer_kernels::with_element!(plan.dtype, T => {
        for item in 0..plan.items {
            for kv_head in 0..kv_heads {
                // SAFETY: the launcher validated every pointer, stride and the values (on the host).
                match plan.index {
                    IndexType::I32 => unsafe { decode_item::<T, i32>(p, item, kv_head) },
                    IndexType::I64 => unsafe { decode_item::<T, i64>(p, item, kv_head) },
                }
            }
        }
        if plan.split {
            for b in 0..p.batch {
                for head in 0..p.qo_heads {
                    // SAFETY: as above; every partial state of a split request was written.
                    unsafe { merge_request::<T>(p, b, head) };
                }
            }
        }
    });
}

/// How [`plan`] cuts each request's keys into work items.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// The planner's choice for a device of `multiprocessors`: the cut that its cost model
    /// (`estimated_cost`) expects to finish first — long requests in equal items, tile-aligned,
    /// where their blocks would otherwise leave multiprocessors idle.
    Auto { multiprocessors: u32 },
    /// Items of `keys` keys from each request's start (FlashInfer's `fixed_split_size`, which
    /// counts pages): a request's items, so its result's bits, depend on its own length alone,
    /// whatever else is in the batch.
    Fixed { keys: NonZeroU64 },
    /// Every request one item (FlashInfer's `disable_split_kv`): batch-invariant too.
    Disabled,
}

/// A plan for a batch of requests of `kv_lengths` keys: which keys each work item takes, for
/// `kv_heads` blocks an item. `(work, work_indptr)`: int32 `[items, 3]` (flattened) and
/// `[batch + 1]`, for `batch_decode_with_paged_kv_cache`'s `work` and `work_indptr`; the
/// workspace then needs `items · num_qo_heads · (head_dim + 1)` f32.
pub fn plan(kv_lengths: &[u64], kv_heads: u32, split: Split) -> (Vec<i32>, Vec<i32>) {
    let chunk = match split {
        Split::Auto { multiprocessors } => auto_chunk(kv_lengths, kv_heads, multiprocessors),
        Split::Fixed { keys } => keys.get(),
        Split::Disabled => u64::MAX,
    };
    let item_keys = |len: u64| match split {
        // Equal items, not `chunk`-long ones and a short rest.
        Split::Auto { .. } => len.div_ceil(len.div_ceil(chunk).max(1)).next_multiple_of(TILE_KEYS).max(1),
        _ => chunk,
    };
    let mut work = Vec::new();
    let mut bounds = vec![0i32];
    for (b, &len) in kv_lengths.iter().enumerate() {
        let step = item_keys(len);
        let mut begin = 0u64;
        loop {
            let end = begin.saturating_add(step).min(len);
            work.extend([b as i32, begin as i32, end as i32]);
            begin = end;
            if begin >= len {
                break;
            }
        }
        bounds.push((work.len() / 3) as i32);
    }
    (work, bounds)
}

/// The request of an item that does nothing: the rows of a plan padded to [`plan_capacity`].
pub const IDLE_ITEM: i32 = -1;

/// The most work items an automatic plan ([`Split::Auto`]) gives a batch of `batch` requests on
/// `multiprocessors`, whatever their lengths and kv heads: a plan padded to it with idle items
/// (`[IDLE_ITEM, 0, 0]`) keeps its tensors' shapes, and a CUDA graph's launches, from one plan to
/// the next. (Its items take at least `total keys / slots` keys each: at most one short item a
/// request beyond `slots`.)
pub fn plan_capacity(batch: usize, multiprocessors: u32) -> usize {
    batch.max(1) + max_pieces(multiprocessors) as usize
}

/// Blocks a multiprocessor runs at once, as the cost model counts them (the tensor-core kernel's
/// at head_dim ≤ 128 on sm_90).
const RESIDENT_BLOCKS: u64 = 2;
/// The keys of a tile of the tensor-core kernel: automatic items are whole tiles but the last.
const TILE_KEYS: u64 = MMA_TILE_KEYS as u64;
/// Keys an automatic item takes at least.
const MIN_CHUNK: u64 = TILE_KEYS;
/// What a block costs beyond its keys, in keys: staging the query, the pipeline's first tiles'
/// latency, and writing its state.
const BLOCK_OVERHEAD: u64 = 64;
/// What merging split requests' states costs, in keys of one block: a second launch.
const MERGE_OVERHEAD: u64 = 64;

/// The blocks running at once, the most items the longest request is cut into: more cannot
/// finish sooner.
fn max_pieces(multiprocessors: u32) -> u64 {
    RESIDENT_BLOCKS * multiprocessors.max(1) as u64
}

/// The automatic plan's item length: among cuts of the longest request into 1, 2, … pieces
/// (every 8th from 16 on), the one [`estimated_cost`] finds cheapest.
fn auto_chunk(kv_lengths: &[u64], kv_heads: u32, multiprocessors: u32) -> u64 {
    let longest = kv_lengths.iter().copied().max().unwrap_or(0).max(1);
    let total: u64 = kv_lengths.iter().sum();
    let slots = max_pieces(multiprocessors);
    let cost = |chunk: u64| estimated_cost(kv_lengths, kv_heads, slots, chunk.min(longest));
    let mut best = (cost(longest), longest);
    let mut pieces = 2;
    while pieces <= slots {
        let chunk = longest.div_ceil(pieces).next_multiple_of(TILE_KEYS);
        // Items of at least `total / slots` keys number at most `batch + slots` (the capacity).
        if chunk < MIN_CHUNK || chunk >= longest || chunk * slots < total {
            break;
        }
        best = best.min((cost(chunk), chunk));
        pieces += if pieces < 16 { 1 } else { pieces / 8 };
    }
    best.1
}

/// A plan's time in keys of one block, its items `longest_item` keys at most: its blocks' work
/// spread over the `slots` running at once, or its longest items' waves where that is longer
/// (blocks of items over half that long, in whole waves of `slots`), plus the merge where it
/// splits a request.
fn estimated_cost(kv_lengths: &[u64], kv_heads: u32, slots: u64, longest_item: u64) -> u64 {
    let (mut work, mut long_items, mut split) = (0u64, 0u64, false);
    let chunk = longest_item.max(1);
    for &len in kv_lengths {
        let items = len.div_ceil(chunk).max(1);
        work += len + items * BLOCK_OVERHEAD;
        long_items += if 2 * len.div_ceil(items) > longest_item { items } else { 0 };
        split |= items > 1;
    }
    let heads = kv_heads.max(1) as u64;
    let spread = (work * heads).div_ceil(slots);
    let waves = (long_items * heads).div_ceil(slots) * (longest_item + BLOCK_OVERHEAD);
    spread.max(waves) + if split { MERGE_OVERHEAD } else { 0 }
}

// The problems the tests and the benchmark make: `rows` requests, each of `request_length`
// keys in pages of `DECODE_PAGE` entries (lengths 0, 1, a page, not a multiple of one…), the
// pages in reverse order (cache page 0 spare), items of at most `TEST_CHUNK` keys.

/// Entries a page of the problems' caches.
pub const DECODE_PAGE: usize = 16;
/// Keys an item of the problems' plans takes at most (two pages: requests of one, two and many
/// items).
const TEST_CHUNK: usize = 32;

/// Request `b`'s keys in a problem.
fn request_length(b: usize) -> usize {
    const LENGTHS: [usize; 8] = [17, 0, 1, 16, 70, 5, 33, 64];
    LENGTHS[b % LENGTHS.len()] + 3 * ((b / LENGTHS.len()) % 4)
}

fn pages_of(b: usize) -> usize {
    request_length(b).div_ceil(DECODE_PAGE)
}

fn total_pages(rows: usize) -> usize {
    (0..rows).map(pages_of).sum()
}

fn items_of_request(b: usize) -> usize {
    request_length(b).div_ceil(TEST_CHUNK).max(1)
}

fn total_items(rows: usize) -> usize {
    (0..rows).map(items_of_request).sum()
}

/// `[QH, H]`: a single decode's query.
pub static SINGLE_QUERY: FamilyExtent = FamilyExtent {
    name: "decode query",
    shape: |_, hidden| vec![QUERY_HEADS, hidden],
    touched: |_, hidden| QUERY_HEADS * hidden,
    read_in_place: true,
    output: None,
};

/// `[T, KH, H]`: a single decode's keys or values, `T` of them.
pub static SINGLE_CACHE: FamilyExtent = FamilyExtent {
    name: "decode keys",
    shape: |rows, hidden| vec![rows, KV_HEADS, hidden],
    touched: |rows, hidden| rows * KV_HEADS * hidden,
    read_in_place: true,
    output: None,
};

/// `[QH]`: a single decode's log-sum-exp, one a head.
pub static SINGLE_SCORES: FamilyExtent = FamilyExtent {
    name: "decode head scores",
    shape: |_, _| vec![QUERY_HEADS],
    touched: |_, _| QUERY_HEADS,
    read_in_place: true,
    output: Some(without_last),
};

/// `[T, QH]`: a batch's log-sum-exp, one a request's head.
pub static HEAD_SCORES: FamilyExtent = FamilyExtent {
    name: "decode batch scores",
    shape: |rows, _| vec![rows, QUERY_HEADS],
    touched: |rows, _| rows * QUERY_HEADS,
    read_in_place: true,
    output: Some(without_last),
};

/// An output shaped like the first input without its last dimension (a score a head).
fn without_last(first: &[i64]) -> Vec<i64> {
    first[..first.len().saturating_sub(1)].to_vec()
}

/// `[P, DECODE_PAGE, KH, H]`: the problem's pages and a spare one.
pub static DECODE_CACHE: FamilyExtent = FamilyExtent {
    name: "decode paged cache",
    shape: |rows, hidden| vec![total_pages(rows) + 1, DECODE_PAGE, KV_HEADS, hidden],
    touched: |rows, hidden| (0..rows).map(request_length).sum::<usize>() * KV_HEADS * hidden,
    read_in_place: true,
    output: None,
};

/// `[T + 1]`: a bound a request and one more (`kv_indptr`, `work_indptr`).
pub static DECODE_BOUNDS: FamilyExtent = FamilyExtent {
    name: "decode bounds",
    shape: |rows, _| vec![rows + 1],
    touched: |rows, _| rows + 1,
    read_in_place: true,
    output: None,
};

/// `[T]`: a value a request (`kv_last_page_len`).
pub static DECODE_REQUESTS: FamilyExtent = FamilyExtent {
    name: "decode requests",
    shape: |rows, _| vec![rows],
    touched: |rows, _| rows,
    read_in_place: true,
    output: None,
};

/// `[U]`: the pages the requests use (`kv_indices`).
pub static DECODE_PAGE_IDS: FamilyExtent = FamilyExtent {
    name: "decode page ids",
    shape: |rows, _| vec![total_pages(rows)],
    touched: |rows, _| total_pages(rows),
    read_in_place: true,
    output: None,
};

/// `[I, 3]`: the plan's items.
pub static DECODE_WORK: FamilyExtent = FamilyExtent {
    name: "decode work",
    shape: |rows, _| vec![total_items(rows), 3],
    touched: |rows, _| 3 * total_items(rows),
    read_in_place: true,
    output: None,
};

/// `[I, QH, H]`: the workspace's partial states.
pub static DECODE_PARTIAL_V: FamilyExtent = FamilyExtent {
    name: "decode partial values",
    shape: |rows, hidden| vec![total_items(rows), QUERY_HEADS, hidden],
    touched: |rows, hidden| (total_items(rows) - rows) * QUERY_HEADS * hidden,
    read_in_place: false,
    output: None,
};

/// `[I, QH]`: the workspace's partial log-sum-exps.
pub static DECODE_PARTIAL_S: FamilyExtent = FamilyExtent {
    name: "decode partial scores",
    shape: |rows, _| vec![total_items(rows), QUERY_HEADS],
    touched: |rows, _| (total_items(rows) - rows) * QUERY_HEADS,
    read_in_place: false,
    output: None,
};

/// The problem's `kv_indptr`.
pub static DECODE_BOUND_VALUES: FixedValues =
    FixedValues { name: "decode page bounds", values: |rows| prefix(rows, pages_of) };

/// The problem's `kv_indices`: page `u` of the requests' order is cache page `U − u`.
pub static DECODE_PAGE_ID_VALUES: FixedValues = FixedValues {
    name: "decode page ids",
    values: |rows| {
        let used = total_pages(rows);
        (0..used).map(|u| (used - u) as i64).collect()
    },
};

/// The problem's `kv_last_page_len` (a full page's where a request fills its last page; 0 for
/// a request of no pages).
pub static DECODE_LAST_PAGE_LENGTHS: FixedValues = FixedValues {
    name: "decode last page lengths",
    values: |rows| {
        (0..rows).map(|b| (request_length(b) - pages_of(b).saturating_sub(1) * DECODE_PAGE) as i64).collect()
    },
};

/// The problem's plan: items of at most [`TEST_CHUNK`] keys.
pub static DECODE_WORK_VALUES: FixedValues = FixedValues {
    name: "decode work",
    values: |rows| {
        (0..rows)
            .flat_map(|b| {
                (0..items_of_request(b)).flat_map(move |c| {
                    let begin = c * TEST_CHUNK;
                    [b, begin, (begin + TEST_CHUNK).min(request_length(b)).max(begin)].map(|x| x as i64)
                })
            })
            .collect()
    },
};

/// The problem's `work_indptr`.
pub static DECODE_WORK_BOUNDS: FixedValues =
    FixedValues { name: "decode work bounds", values: |rows| prefix(rows, items_of_request) };

/// `[0, n(0), n(0) + n(1), …]` over `rows` requests.
fn prefix(rows: usize, n: fn(usize) -> usize) -> Vec<i64> {
    let mut bounds = vec![0i64];
    for b in 0..rows {
        bounds.push(bounds[b] + n(b) as i64);
    }
    bounds
}

/// The f64 state of query `q` (`head_dim` values) over keys `keys` (each a row of `k`'s and
/// `v`'s at an element offset): `(o, lse)`, scores as the kernels make them.
struct Reference<'a> {
    p: &'a Problem<'a>,
    head_dim: usize,
}

impl Reference<'_> {
    /// The f64 scalars: `(score scale, soft cap, v scale, rope?, rope scale, rope theta,
    /// window_left)`.
    fn scalars(&self) -> (f64, Option<f64>, f64, bool, f64, f64, i32) {
        let p = self.p;
        let get = |name| p.scalar::<Option<f32>>(name).map(f64::from);
        let sm = get("sm_scale").unwrap_or(1.0 / (self.head_dim as f64).sqrt())
            * get("q_scale").unwrap_or(1.0)
            * get("k_scale").unwrap_or(1.0);
        let cap = get("logits_soft_cap").filter(|&c| c > 0.0);
        let rope = p.scalar::<PosEncodingMode>("pos_encoding_mode") == PosEncodingMode::RopeLlama;
        let (rope_scale, rope_theta) = (get("rope_scale").unwrap_or(1.0), get("rope_theta").unwrap_or(1e4));
        (sm, cap, get("v_scale").unwrap_or(1.0), rope, rope_scale, rope_theta, p.scalar::<i32>("window_left"))
    }

    /// `x` turned to `position` (llama's RoPE, the halves rotated), or as it is.
    fn rotated(&self, x: &[f64], position: usize) -> Vec<f64> {
        let (_, _, _, rope, scale, theta, _) = self.scalars();
        if !rope {
            return x.to_vec();
        }
        let d = x.len();
        let half = d / 2;
        (0..d)
            .map(|i| {
                let pair = (i % half) as f64;
                let angle = position as f64 / scale * theta.powf(-2.0 * pair / d as f64);
                let partner = if i < half { -x[i + half] } else { x[i - half] };
                x[i] * angle.cos() + partner * angle.sin()
            })
            .collect()
    }

    /// The state over keys `first..end` (of a request of `kv_len`), key `j`'s row of `k` and
    /// `v` at `row(j)`.
    fn state(
        &self,
        q: &[f64],
        (k, v): (&[f64], &[f64]),
        (first, end, kv_len): (usize, usize, usize),
        row: impl Fn(usize) -> usize,
    ) -> (Vec<f64>, f64) {
        let (sm, cap, v_scale, _, _, _, window_left) = self.scalars();
        let d = self.head_dim;
        let q = self.rotated(q, kv_len.saturating_sub(1));
        let start = if window_left < 0 { 0 } else { kv_len.saturating_sub(1 + window_left as usize) };
        let keys: Vec<usize> = (first.max(start)..end.min(kv_len)).collect();
        if keys.is_empty() {
            return (vec![0.0; d], f64::NEG_INFINITY);
        }
        let scores: Vec<f64> = keys
            .iter()
            .map(|&j| {
                let key = self.rotated(&k[row(j)..row(j) + d], j);
                let dot: f64 = q.iter().zip(&key).map(|(a, b)| a * b).sum::<f64>() * sm;
                let z = match cap {
                    Some(c) => c * (dot / c).tanh(),
                    None => dot,
                };
                z * std::f64::consts::LOG2_E
            })
            .collect();
        let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let weights: Vec<f64> = scores.iter().map(|s| (s - m).exp2()).collect();
        let total: f64 = weights.iter().sum();
        let o = (0..d)
            .map(|i| keys.iter().zip(&weights).map(|(&j, w)| w * v[row(j) + i]).sum::<f64>() / total * v_scale)
            .collect();
        (o, total.log2() + m)
    }
}

fn single_reference(p: &Problem) -> Vec<Vec<f64>> {
    let r = Reference { p, head_dim: p.hidden };
    let d = p.hidden;
    let (q, k, v) = (&p.tensors[0], &p.tensors[1], &p.tensors[2]);
    let kv_len = k.len() / (KV_HEADS * d);
    let group = QUERY_HEADS / KV_HEADS;
    let nhd = p.scalar::<KvLayout>("kv_layout") == KvLayout::Nhd;
    let (mut out, mut lse) = (Vec::new(), Vec::new());
    for head in 0..QUERY_HEADS {
        let kv_head = head / group;
        // Problems lay keys out `[T, KH, H]`; HND reads the same buffer as `[KH, T, H]`.
        let row = |j: usize| if nhd { (j * KV_HEADS + kv_head) * d } else { (kv_head * kv_len + j) * d };
        let (o, s) = r.state(&q[head * d..(head + 1) * d], (k, v), (0, kv_len, kv_len), row);
        out.extend(o);
        lse.push(s);
    }
    vec![out, lse]
}

fn batch_reference(p: &Problem) -> Vec<Vec<f64>> {
    let r = Reference { p, head_dim: p.hidden };
    let d = p.hidden;
    let t = p.tensors;
    let (q, k, v, bounds, ids, work, work_bounds) = (&t[0], &t[1], &t[2], &t[3], &t[4], &t[6], &t[7]);
    let batch = bounds.len() - 1;
    let group = QUERY_HEADS / KV_HEADS;
    let nhd = p.scalar::<KvLayout>("kv_layout") == KvLayout::Nhd;
    let (mut partial_v, mut partial_s) = (t[8].clone(), t[9].clone());
    let (mut out, mut lse) = (Vec::new(), Vec::new());
    for b in 0..batch {
        let kv_len = request_length(b);
        let first_page = bounds[b] as usize;
        let items = (work_bounds[b] as usize)..(work_bounds[b + 1] as usize);
        for head in 0..QUERY_HEADS {
            let kv_head = head / group;
            let row = |j: usize| {
                let page = ids[first_page + j / DECODE_PAGE] as usize;
                let slot = j % DECODE_PAGE;
                // The cache is `[P, page, KH, H]` in the buffer; HND reads it as `[P, KH, page, H]`.
                let entry = if nhd { slot * KV_HEADS + kv_head } else { kv_head * DECODE_PAGE + slot };
                (page * DECODE_PAGE * KV_HEADS + entry) * d
            };
            let q_row = &q[(b * QUERY_HEADS + head) * d..][..d];
            if items.len() > 1 {
                for item in items.clone() {
                    let (begin, end) = (work[3 * item + 1] as usize, work[3 * item + 2] as usize);
                    let (o, s) = r.state(q_row, (k, v), (begin, end, kv_len), row);
                    let at = item * QUERY_HEADS + head;
                    partial_v[at * d..(at + 1) * d].copy_from_slice(&o);
                    partial_s[at] = s;
                }
            }
            let (o, s) = r.state(q_row, (k, v), (0, kv_len, kv_len), row);
            out.extend(o);
            lse.push(s);
        }
    }
    vec![partial_v, partial_s, out, lse]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auto(lengths: &[u64], kv_heads: u32, multiprocessors: u32) -> (Vec<i32>, Vec<i32>) {
        plan(lengths, kv_heads, Split::Auto { multiprocessors })
    }

    fn items(lengths: &[u64], kv_heads: u32) -> Vec<i32> {
        let (work, _) = auto(lengths, kv_heads, 132);
        work.chunks(3).map(|item| item[2] - item[1]).collect()
    }

    #[test]
    fn an_automatic_plan_keeps_requests_whole_where_their_blocks_fill_the_machine() {
        for lengths in [&[1024; 128][..], &[4096; 64], &[16384; 64]] {
            assert_eq!(items(lengths, 8).len(), lengths.len(), "{} × {}", lengths.len(), lengths[0]);
        }
    }

    #[test]
    fn an_automatic_plan_cuts_short_batches_into_equal_tile_aligned_items_over_the_machine() {
        let one = items(&[4096], 8);
        assert!((24..=48).contains(&one.len()), "1 × 4096 on 264 slots of 8 heads: {} items", one.len());
        assert!(one.iter().all(|&n| n == one[0] && n % 64 == 0), "{one:?}");
        let sixteen = items(&[4096; 16], 8);
        assert_eq!(sixteen.len(), 32, "16 × 4096: 128 blocks, two items each fill 264 slots");
        assert!(sixteen.iter().all(|&n| n == 2048));
        let uneven = items(&[4000], 8);
        assert!(uneven[..uneven.len() - 1].iter().all(|&n| n == uneven[0] && n % 64 == 0), "{uneven:?}");
    }

    #[test]
    fn an_automatic_plan_splits_a_long_request_among_short_ones() {
        let skewed: Vec<u64> = [32768].into_iter().chain([512; 63]).collect();
        let (work, bounds) = auto(&skewed, 8, 132);
        assert!(bounds[1] >= 8, "the long request in {} items", bounds[1]);
        assert_eq!(work.len() / 3 - bounds[1] as usize, 63, "the short ones whole");
        let (work, bounds) = auto(&[0, 5], 8, 132);
        assert_eq!((work, bounds), (vec![0, 0, 0, 1, 0, 5], vec![0, 1, 2]), "an empty request keeps an item");
    }

    #[test]
    fn fixed_and_disabled_splits_cut_a_request_by_its_own_length_alone() {
        let fixed = Split::Fixed { keys: NonZeroU64::new(100).unwrap() };
        let alone = plan(&[250], 8, fixed).0;
        assert_eq!(alone, [0, 0, 100, 0, 100, 200, 0, 200, 250]);
        let (among, bounds) = plan(&[7, 250, 100_000], 8, fixed);
        let second: Vec<i32> = among[3 * bounds[1] as usize..3 * bounds[2] as usize].to_vec();
        assert_eq!(second, alone.iter().enumerate().map(|(i, &v)| if i % 3 == 0 { 1 } else { v }).collect::<Vec<_>>());
        assert_eq!(plan(&[0, 300_000], 8, Split::Disabled), (vec![0, 0, 0, 1, 0, 300_000], vec![0, 1, 2]));
    }

    #[test]
    fn no_automatic_plan_has_more_items_than_its_capacity() {
        let skewed: Vec<u64> = [131072].into_iter().chain([1; 63]).collect();
        let many: Vec<u64> = (0..3000).map(|i| 1 + (i * 7919) % 20_000).collect();
        let batches: [&[u64]; 7] = [&[4096], &[4096; 64], &[0; 7], &[1, 100_000, 3], &skewed, &[257; 500], &many];
        for lengths in batches {
            for (kv_heads, multiprocessors) in [(1, 132), (8, 132), (32, 20), (1, 1), (2, 1000)] {
                let (work, _) = auto(lengths, kv_heads, multiprocessors);
                let capacity = plan_capacity(lengths.len(), multiprocessors);
                assert!(work.len() / 3 <= capacity, "{} items > {capacity}", work.len() / 3);
            }
        }
    }

    #[test]
    fn the_tensor_core_kernel_keeps_two_blocks_a_multiprocessor_up_to_head_dim_128() {
        let hopper = 227 * 1024;
        for head_dim in [64, 128] {
            assert!(2 * mma_shared_bytes(head_dim, preferred_stages(head_dim)) <= hopper, "head_dim {head_dim}");
        }
        assert!(mma_shared_bytes(256, preferred_stages(256)) <= hopper);
    }

    #[test]
    fn heads_per_thread_covers_a_group_in_one_chunk_where_it_can() {
        assert_eq!([1, 2, 3, 4, 5, 16].map(heads_per_thread), [1, 2, 4, 4, 4, 4]);
    }

    #[test]
    fn the_problems_plan_splits_long_requests_into_two_page_items() {
        assert_eq!((DECODE_WORK_BOUNDS.values)(3), [0, 1, 2, 3]);
        assert_eq!(items_of_request(4), 3, "70 keys: 32 + 32 + 6");
        let work = (DECODE_WORK_VALUES.values)(5);
        assert_eq!(&work[9..18], [3, 0, 16, 4, 0, 32, 4, 32, 64]);
    }
}
