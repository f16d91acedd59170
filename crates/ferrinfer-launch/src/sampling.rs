//! The sampling family at layers 1 and 4: the op table, validation, the launch planner, the CPU
//! path and the f64 references. Each op validates its arguments, then runs on the CPU backend or
//! launches a kernel of `ferrinfer-kernels/src/sampling/` on the caller's stream: `softmax`,
//! `top_k_mask_logits`, `top_k_renorm_probs`, `top_p_renorm_probs`, and the sampling ops
//! (`sampling_from_probs`, `top_k_sampling_from_probs`, `top_p_sampling_from_probs`,
//! `min_p_sampling_from_probs`, `top_k_top_p_sampling_from_probs`, `…_from_logits`).
//!
//! Rules, checked before anything is written (so on error `out` is untouched):
//! - the input (`logits`, `probs`): f16, bf16 or f32, any rank ≥ 1, the last dimension (the
//!   vocabulary, ≥ 1) contiguous, leading dimensions collapsible into rows; no rows is a no-op;
//! - `out`: writable, the input's shape and device, rows as the input's may be, not overlapping
//!   it; f32 for `softmax` whatever the logits' dtype (as FlashInfer's), the input's dtype for
//!   the filters;
//! - `temperature`: finite and ≥ 0; 0 weighs every finite logit alike (FlashInfer's rule; exactly
//!   for |logit| < 2^64) and a masked one (−∞) not at all (not `−∞ · 0`, NaN);
//! - `top_k`: a whole number ≥ 1; `top_k ≥ vocab` keeps every entry;
//! - `top_p`: in (0, 1]; 1 keeps every entry; `min_p`: in [0, 1];
//! - the sampling ops' `samples`: int32, writable, the input's (`probs`' or `logits`') shape
//!   without its last dimension (one token a row), contiguous, on the input's device, not
//!   overlapping it; `seed` and `offset` any u64 (Philox's key and position:
//!   row `r` reads outputs `offset` and `offset + 1` of subsequence `r` — the next call's
//!   `offset` is 2 on);
//! - a scalar given a row (`temperature`, `top_p`, `min_p`: f32; `top_k`: i32; `seed`,
//!   `offset`: int64, or `[1]` for every row): a `[rows]` contiguous tensor on
//!   the input's device, apart from `out`; on the CPU every temperature finite and ≥ 0 (checked
//!   before anything is written; a GPU tensor's values are not read: that would wait for the
//!   device); a `top_k` ≤ 0 keeps its row (a mixed batch's "no top-k"), a `top_p` ≥ 1 keeps
//!   its row and one ≤ 0 or NaN its largest entries only.
//!
//! A renorm's row whose kept probabilities sum to 0 (a row of zeros) comes out NaN (0 / 0), where
//! FlashInfer's returns zeros. A sampling op's row without mass to draw from gives token 0, as
//! FlashInfer's.

use ferrinfer_jit::sampling::{SamplingKernel, SamplingModule};
use ferrinfer_jit::{CudaArch, JitSpec};
use ferrinfer_kernels::element::DType;
use ferrinfer_kernels::sampling::{
    EntryWeight, FILTER_HEADER_BYTES, Filter, FilterOutput, FilterParams, SAMPLE_HEADER_BYTES, SampleParams,
    SoftmaxParams, draw_random_bits, filter_row, mass_target, sample_row, share_of, softmax_row,
};
use ferrinfer_kernels::{CLUSTER_EXCHANGE_BYTES, MAX_CLUSTER_BLOCKS};

use crate::cuda::{self, KernelModule, Launch, Limits, MAX_BLOCK, ModuleCache};
use crate::layout::{self, RowLayout};
use crate::op::{Call, FamilyOp, Problem};
use crate::{Error, PerRow, Stream, TensorView, cpu, logging, tuning};

crate::op_table! { $
    /// The sampling family's ops, one line each (grammar: [`define_ops!`](crate::define_ops)).
    sampling_ops, family sampling;
    /// `out = softmax(logits / temperature)` over the last dimension, in f32 whatever
    /// the logits' dtype. `temperature` 0 weighs every finite logit (|x| < 2^64) alike
    /// and −∞ (a masked logit) not at all; a row of −∞ only, or with +∞ or NaN, gives
    /// NaN. Deterministic: a row's result never depends on timing or on the other rows.
    fn softmax(logits: In[Rows]) -> out: Out[Rows as f32]; temperature: [f32] = 1.0
        => SamplingKernel::Softmax, reference softmax_reference;
    /// `out` = `logits` where the logit is among the row's `top_k` largest (every logit
    /// tied with the `top_k`-th too), −∞ elsewhere. Ranks follow IEEE 754's total order
    /// (−0 below +0, NaN above +∞); `top_k ≥ vocab` copies the row. Deterministic.
    fn top_k_mask_logits(logits: In[Rows]) -> out: Out[Rows]; top_k: [i32] (example 50)
        => SamplingKernel::TopKMaskLogits, reference top_k_mask_reference;
    /// `out` = `probs` divided by the sum of the row's `top_k` largest where the
    /// probability is among them (ties with the `top_k`-th too), 0 elsewhere;
    /// `top_k ≥ vocab` renormalises the whole row. Deterministic: the sum is taken in a
    /// fixed tree.
    fn top_k_renorm_probs(probs: In[Rows, nonnegative]) -> out: Out[Rows]; top_k: [i32] (example 50)
        => SamplingKernel::TopKRenormProbs, reference top_k_renorm_reference;
    /// `out` = `probs` divided by the sum of those it keeps, 0 elsewhere: a row keeps its
    /// largest probabilities holding `top_p` of its sum — an entry is kept when the entries
    /// above it hold less than `top_p` of the row's sum (its ties are kept with it; the
    /// row need not sum to 1). `top_p = 1` renormalises the whole row. Deterministic: the
    /// masses are summed as exact integers (the CPU keeps the same entries as the GPU).
    fn top_p_renorm_probs(probs: In[Rows, nonnegative]) -> out: Out[Rows]; top_p: [f32] (example 0.9)
        => SamplingKernel::TopPRenormProbs, reference top_p_renorm_reference;
    /// `samples` = one token a row of `probs`, drawn with probability proportional to its
    /// entry (the row need not sum to 1; entries ≤ 0 or NaN are never drawn), from
    /// Philox's stream `(seed, row, offset)`. Deterministic: the draw is made in exact
    /// integers (a fixed point of 2^−(62 − ⌈log2 vocab⌉) of the row's largest entry, or
    /// of 1 for a row of probabilities: `MassScale`), so the CPU draws the GPU's token.
    /// `seed` and `offset` are any u64, or int64 tensors (their bits as u64) read on the
    /// device — `[rows]` (a value a row) or `[1]` (one for every row) — so that a captured
    /// CUDA graph draws afresh once they change.
    fn sampling_from_probs(probs: In[Rows, nonnegative]) -> samples: Out[Batch as i32]; seed: [u64] (example 42), offset: [u64] (example 0)
        => SamplingKernel::SamplingFromProbs, reference sampling_reference;
    /// `samples` = one token a row drawn as `sampling_from_probs` among the row's `top_k`
    /// largest entries (ties with the `top_k`-th too, as `top_k_renorm_probs`).
    fn top_k_sampling_from_probs(probs: In[Rows, nonnegative]) -> samples: Out[Batch as i32]; top_k: [i32] (example 50), seed: [u64] (example 42), offset: [u64] (example 0)
        => SamplingKernel::TopKSamplingFromProbs, reference top_k_sampling_reference;
    /// `samples` = one token a row among the entries `top_p_renorm_probs` keeps, each as
    /// likely as its mass: by exact rejection rounds (FlashInfer's scheme) — a draw as
    /// `sampling_from_probs` among the entries above the last rejected token (at first
    /// every one), kept when top-p keeps it; round `j > 0` reads Philox subsequence
    /// `row + j · 2^32` (so `probs` has fewer than 2^32 rows).
    fn top_p_sampling_from_probs(probs: In[Rows, nonnegative]) -> samples: Out[Batch as i32]; top_p: [f32] (example 0.9), seed: [u64] (example 42), offset: [u64] (example 0)
        => SamplingKernel::TopPSamplingFromProbs, reference top_p_sampling_reference;
    /// `samples` = one token a row drawn as `sampling_from_probs` among the entries at least
    /// `min_p` times the row's largest (FlashInfer's `p ≥ min_p · max p`, in f32).
    fn min_p_sampling_from_probs(probs: In[Rows, nonnegative]) -> samples: Out[Batch as i32]; min_p: [f32] (example 0.1), seed: [u64] (example 42), offset: [u64] (example 0)
        => SamplingKernel::MinPSamplingFromProbs, reference min_p_sampling_reference;
    /// `samples` = one token a row among the row's `top_k` largest entries (ties with the
    /// `top_k`-th too), then among those the largest holding `top_p` of their mass
    /// (FlashInfer's default order, "top_k_first": `top_p_sampling_from_probs` of
    /// `top_k_renorm_probs`), each as likely as its mass: by top-p's exact rejection
    /// rounds among the top-k entries (so `probs` has fewer than 2^32 rows).
    fn top_k_top_p_sampling_from_probs(probs: In[Rows, nonnegative]) -> samples: Out[Batch as i32]; top_k: [i32] (example 50), top_p: [f32] (example 0.9), seed: [u64] (example 42), offset: [u64] (example 0)
        => SamplingKernel::TopKTopPSamplingFromProbs, reference top_k_top_p_sampling_reference;
    /// `samples` = `top_k_top_p_sampling_from_probs` of `softmax(logits)` (FlashInfer's
    /// "top_k_first": `top_k_mask_logits`, softmax, then top-p) in one kernel: an entry
    /// weighs `2^(x · log2 e − m)`, `m` the row's largest logit times log2 e, by a
    /// polynomial `exp2` that rounds alike on the CPU and the GPU (so both draw the same
    /// token). A row whose largest logit is +∞, NaN or −∞ — or beyond ~2.4e38, where its
    /// product with log2 e overflows — gives token 0.
    fn top_k_top_p_sampling_from_logits(logits: In[Rows]) -> samples: Out[Batch as i32]; top_k: [i32] (example 50), top_p: [f32] (example 0.9), seed: [u64] (example 42), offset: [u64] (example 0)
        => SamplingKernel::TopKTopPSamplingFromLogits, reference top_k_top_p_logits_sampling_reference;
}

impl FamilyOp for SamplingKernel {
    fn run(&self, call: &Call) -> Result<(), Error> {
        let [input, out] = call.tensors()?;
        let input_name = call.op.tensors[0].name;
        let plan = match self {
            SamplingKernel::Softmax => softmax_plan(input, out, call.per_row("temperature")?, &call.stream)?,
            SamplingKernel::TopKMaskLogits | SamplingKernel::TopKRenormProbs | SamplingKernel::TopPRenormProbs => {
                let threshold = call_threshold(call, filter_of(*self).0)?;
                filter_plan(*self, input_name, input, out, threshold, &call.stream)?
            }
            _ => sample_plan(*self, input_name, input, out, call)?,
        };
        let Some(plan) = plan else { return Ok(()) };
        // A bad tuning override fails every call, CPU ones too, rather than being ignored.
        let forced = layout_override()?;
        logging::input_statistics(call);
        match call.stream {
            Stream::Cpu => {
                plan.run_on_cpu(*self);
                Ok(())
            }
            Stream::Cuda(stream) => {
                static MODULES: ModuleCache<SamplingModule> = ModuleCache::new();
                let module = SamplingModule { kernel: *self, dtype: plan.dtype };
                let entry = module
                    .entry(plan.vec)
                    .ok_or_else(|| Error::NoEntryPoint { module: format!("{module:?}"), entry: plan.vec as usize })?;
                match plan.params {
                    Params::Softmax(params) => cuda::launch(stream, &MODULES, module, |limits| {
                        plan.softmax_launch(params, entry, limits, forced)
                    }),
                    Params::Filter(params) => cuda::launch(stream, &MODULES, module, |limits| {
                        plan.filter_launch(params, entry, limits, forced)
                    }),
                    Params::Sample(params) => cuda::launch(stream, &MODULES, module, |limits| {
                        plan.sample_launch(params, stages(*self), entry, limits, forced)
                    }),
                }
            }
        }
    }
}

impl KernelModule for SamplingModule {
    fn spec(&self, arch: CudaArch, debug: bool) -> JitSpec {
        SamplingModule::spec(self, arch, debug)
    }
}

/// A validated call: kernel parameters, input dtype, vector width and the rows' shape.
struct Plan {
    params: Params,
    dtype: DType,
    vec: u32,
    rows: u64,
    vocab: u64,
}

#[derive(Clone, Copy)]
enum Params {
    Softmax(SoftmaxParams),
    Filter(FilterParams),
    Sample(SampleParams),
}

/// The checks every op of the family makes of its input (named `input_name`) and `out`, in
/// the order a caller would fix them, once the op's own (`out`'s dtype, scalars) have passed;
/// `None` when there are no rows.
fn rows_of(
    input_name: &'static str,
    input: &TensorView,
    out: &TensorView,
) -> Result<Option<(RowLayout, RowLayout)>, Error> {
    let x = vocabulary_rows(input_name, input)?;
    if out.shape() != input.shape() {
        let expected = format!("{:?} (`{input_name}`' shape)", input.shape());
        return Err(Error::ShapeMismatch { argument: "out", expected, found: out.shape().to_vec() });
    }
    let y = layout::row_layout("out", out)?;
    if layout::overlaps(out, input) {
        return Err(Error::Overlap { argument: "out", other: input_name });
    }
    Ok((x.rows > 0).then_some((x, y)))
}

/// `input`'s rows (named `input_name`), each a vocabulary of 1 to `u32::MAX` entries (the
/// kernels index a row in 32 bits).
fn vocabulary_rows(input_name: &'static str, input: &TensorView) -> Result<RowLayout, Error> {
    layout::bounded_rows(input_name, input, "the vocabulary")
}

/// `softmax`'s checks and parameters: one temperature, or `temperatures` a row.
fn softmax_plan(
    logits: &TensorView,
    out: &TensorView,
    temperature: PerRow<f32>,
    stream: &Stream,
) -> Result<Option<Plan>, Error> {
    let (temperature, temperatures) = match temperature {
        PerRow::All(t) => (f64::from(t), None),
        PerRow::Rows(view) => (0.0, Some(view)),
    };
    layout::check_placement(stream, [("logits", logits), ("out", out)])?;
    if out.dtype() != DType::F32 {
        return Err(Error::UnsupportedDType {
            argument: "out",
            found: out.dtype().to_string(),
            expected: "f32 (probabilities are f32 whatever the logits' dtype)".into(),
        });
    }
    layout::check_writable("out", out)?;
    let valid_temperature = |t: f64| t.is_finite() && t >= 0.0;
    if temperatures.is_none() && !valid_temperature(temperature) {
        return Err(Error::invalid_scalar("temperature", temperature, "finite and ≥ 0"));
    }
    let rows = rows_of("logits", logits, out)?;
    let per_row = layout::PerRowCheck { argument: "temperature", reference: "logits", expected: "finite and ≥ 0" };
    let temperatures = match temperatures {
        Some(view) => {
            per_row.check(view, rows.map_or(0, |(x, _)| x.rows), DType::F32, ("out", out), valid_temperature)?
        }
        None => 0,
    };
    let Some((x, y)) = rows else { return Ok(None) };
    let dtype = logits.dtype();
    let vec = vector_width(dtype, x.hidden, (x.row_stride, logits.address()), (y.row_stride, out.address()));
    let params = SoftmaxParams {
        logits: logits.address(),
        probs: out.address(),
        rows: x.rows,
        logits_row_stride: x.row_stride,
        probs_row_stride: y.row_stride,
        temperatures,
        vocab: x.hidden as u32,
        temperature: if temperatures == 0 { temperature as f32 } else { 0.0 },
        slices: 1,
        _reserved: 0,
    };
    Ok(Some(Plan { params: Params::Softmax(params), dtype, vec, rows: x.rows, vocab: x.hidden }))
}

/// The filters' checks and parameters (`input_name`: `logits` or `probs`; `threshold`: `top_k`
/// or `top_p`, or their tensor of values a row: [`call_threshold`]).
fn filter_plan(
    kernel: SamplingKernel,
    input_name: &'static str,
    input: &TensorView,
    out: &TensorView,
    (threshold, thresholds): (f64, Option<&TensorView>),
    stream: &Stream,
) -> Result<Option<Plan>, Error> {
    layout::check_placement(stream, [(input_name, input), ("out", out)])?;
    let dtype = input.dtype();
    layout::check_dtype("out", out, input_name, dtype)?;
    layout::check_writable("out", out)?;
    let filter = filter_of(kernel).0;
    check_threshold(filter, threshold, thresholds.is_some())?;
    let rows = rows_of(input_name, input, out)?;
    let thresholds = match thresholds {
        Some(view) => threshold_check(filter, input_name).check(
            view,
            rows.map_or(0, |(x, _)| x.rows),
            threshold_dtype(filter),
            ("out", out),
            |_| true,
        )?,
        None => 0,
    };
    let Some((x, y)) = rows else { return Ok(None) };
    let vec = layout::vector_width(dtype, x.hidden, &[x.row_stride, y.row_stride], &[input.address(), out.address()]);
    let threshold = threshold_bits(filter, threshold, thresholds, x.hidden);
    let params = FilterParams {
        input: input.address(),
        output: out.address(),
        rows: x.rows,
        input_row_stride: x.row_stride,
        output_row_stride: y.row_stride,
        thresholds,
        vocab: x.hidden as u32,
        threshold,
        slices: 1,
        staged: 0,
    };
    Ok(Some(Plan { params: Params::Filter(params), dtype, vec, rows: x.rows, vocab: x.hidden }))
}

/// A filter's threshold argument: its name, and what a value must be.
fn threshold_rule(filter: Filter) -> (&'static str, fn(f64) -> bool, &'static str) {
    match filter {
        Filter::TopK | Filter::TopKTopP => ("top_k", |k| k.fract() == 0.0 && k >= 1.0, "a whole number ≥ 1"),
        Filter::TopP => ("top_p", |p| p > 0.0 && p <= 1.0, "in (0, 1]"),
        Filter::MinP => ("min_p", |p| (0.0..=1.0).contains(&p), "in [0, 1]"),
        Filter::Everything => ("", |_| true, ""),
    }
}

/// A filter's threshold argument in `call` (`top_k`: i32, `top_p` and `min_p`: f32, each exact
/// as an f64), or its tensor of values a row (the value then 0, never read).
fn call_threshold<'c>(call: &'c Call, filter: Filter) -> Result<(f64, Option<&'c TensorView<'c>>), Error> {
    let (argument, _, _) = threshold_rule(filter);
    let split = |value: PerRow<'c, f64>| match value {
        PerRow::All(value) => (value, None),
        PerRow::Rows(view) => (0.0, Some(view)),
    };
    Ok(match threshold_dtype(filter) {
        DType::I32 => split(per_row_f64(call.per_row::<i32>(argument)?)),
        _ => split(per_row_f64(call.per_row::<f32>(argument)?)),
    })
}

/// A per-row threshold's value as f64 (exact for i32 and f32).
fn per_row_f64<'c, T: Into<f64>>(value: PerRow<'c, T>) -> PerRow<'c, f64> {
    match value {
        PerRow::All(value) => PerRow::All(value.into()),
        PerRow::Rows(view) => PerRow::Rows(view),
    }
}

/// A filter's one threshold in a reference's problem, as f64.
fn problem_threshold(p: &Problem, filter: Filter) -> f64 {
    let (argument, _, _) = threshold_rule(filter);
    match threshold_dtype(filter) {
        DType::I32 => p.scalar::<i32>(argument).into(),
        _ => p.scalar::<f32>(argument).into(),
    }
}

/// The dtype of a filter's threshold given a row: int32 `top_k`, f32 `top_p` and `min_p`.
fn threshold_dtype(filter: Filter) -> DType {
    if matches!(filter, Filter::TopK | Filter::TopKTopP) { DType::I32 } else { DType::F32 }
}

/// A filter's one threshold, unless a tensor gives one a row.
fn check_threshold(filter: Filter, threshold: f64, per_row: bool) -> Result<(), Error> {
    let (argument, valid, expected) = threshold_rule(filter);
    if per_row || valid(threshold) { Ok(()) } else { Err(Error::invalid_scalar(argument, threshold, expected)) }
}

/// The checks of a filter's thresholds given a row: any value a row — a top_k ≤ 0 (as ≥ vocab),
/// a top_p ≥ 1 or a min_p ≤ 0 keeps the row, a mixed batch's "no filter".
fn threshold_check(filter: Filter, input_name: &'static str) -> layout::PerRowCheck {
    let (argument, _, _) = threshold_rule(filter);
    let expected = if threshold_dtype(filter) == DType::I32 { "an int32" } else { "an f32" };
    layout::PerRowCheck { argument, reference: input_name, expected }
}

/// The kernel's `threshold` word: top-k's `k` (past the vocabulary every k keeps the whole row)
/// or an f32's bits; 0 where `thresholds` (an address) gives one a row.
fn threshold_bits(filter: Filter, threshold: f64, thresholds: u64, vocab: u64) -> u32 {
    match (thresholds, filter) {
        (0, Filter::TopK | Filter::TopKTopP) => threshold.min(vocab as f64) as u32,
        (0, _) => (threshold as f32).to_bits(),
        _ => 0,
    }
}

/// The sampling ops' checks and parameters: the input (`input_name`: `probs`, or `logits`) as
/// the filters', `samples` one int32 token a row (the input's shape without its last dimension,
/// contiguous), the filter's thresholds ([`threshold_filters`]: none for
/// `sampling_from_probs`, two for `top_k_top_p_…`), `seed` and `offset`.
fn sample_plan(
    kernel: SamplingKernel,
    input_name: &'static str,
    probs: &TensorView,
    samples: &TensorView,
    call: &Call,
) -> Result<Option<Plan>, Error> {
    let filter = filter_of(kernel).0;
    let thresholds = threshold_filters(filter);
    layout::check_placement(&call.stream, [(input_name, probs), ("samples", samples)])?;
    if samples.dtype() != DType::I32 {
        let expected = "int32 (one token a row)".to_owned();
        return Err(Error::UnsupportedDType { argument: "samples", found: samples.dtype().to_string(), expected });
    }
    layout::check_writable("samples", samples)?;
    let given: Vec<(f64, Option<&TensorView>)> =
        thresholds.iter().map(|&filter| call_threshold(call, filter)).collect::<Result<_, _>>()?;
    for (&threshold, &(value, view)) in thresholds.iter().zip(&given) {
        check_threshold(threshold, value, view.is_some())?;
    }
    let x = vocabulary_rows(input_name, probs)?;
    let leading = &probs.shape()[..probs.shape().len() - 1];
    if samples.shape() != leading {
        let expected = format!("{leading:?} (`{input_name}`' shape without the vocabulary: one token a row)");
        return Err(Error::ShapeMismatch { argument: "samples", expected, found: samples.shape().to_vec() });
    }
    if samples.numel() > 1 && samples.strides() != ferrinfer_contiguous(samples.shape()) {
        let reason = format!("strides {:?}; expected the tokens contiguous", samples.strides());
        return Err(Error::UnsupportedLayout { argument: "samples", reason });
    }
    if layout::overlaps(samples, probs) {
        return Err(Error::Overlap { argument: "samples", other: input_name });
    }
    if thresholds.contains(&Filter::TopP) && x.rows > u32::MAX as u64 {
        // A later draw of row r reads Philox subsequence r + draw · 2^32 (`draw_random_bits`).
        let (what, limit) =
            ("the rows (top-p's rejection rounds draw from subsequences row + draw · 2^32)", u32::MAX as u64);
        return Err(Error::TooLarge { argument: input_name, what, value: x.rows, limit });
    }
    let mut words = [(0u64, 0u32); 2];
    for (i, (&threshold, &(value, view))) in thresholds.iter().zip(&given).enumerate() {
        let address = match view {
            Some(view) => threshold_check(threshold, input_name).check(
                view,
                x.rows,
                threshold_dtype(threshold),
                ("samples", samples),
                |_| true,
            )?,
            None => 0,
        };
        words[i] = (address, threshold_bits(threshold, value, address, x.hidden));
    }
    let random = |argument| random_source(argument, input_name, call.per_row(argument)?, x.rows, samples);
    let ((seed, seeds, seeds_per_row), (offset, offsets, offsets_per_row)) = (random("seed")?, random("offset")?);
    if x.rows == 0 {
        return Ok(None);
    }
    let dtype = probs.dtype();
    let vec = layout::vector_width(dtype, x.hidden, &[x.row_stride], &[probs.address()]);
    let [(thresholds, threshold), (top_ps, top_p)] = words;
    let filter_params = FilterParams {
        input: probs.address(),
        output: samples.address(),
        rows: x.rows,
        input_row_stride: x.row_stride,
        output_row_stride: 1,
        thresholds,
        vocab: x.hidden as u32,
        threshold,
        slices: 1,
        staged: 0,
    };
    let params = SampleParams {
        filter: filter_params,
        seed,
        offset,
        seeds,
        offsets,
        seeds_per_row,
        offsets_per_row,
        top_ps,
        top_p,
        _reserved: 0,
    };
    Ok(Some(Plan { params: Params::Sample(params), dtype, vec, rows: x.rows, vocab: x.hidden }))
}

/// The thresholds a sampling op's filter takes, in call order: none (everything), its own, or
/// `top_k_top_p_…`'s `top_k` then `top_p`.
fn threshold_filters(filter: Filter) -> &'static [Filter] {
    match filter {
        Filter::Everything => &[],
        Filter::TopK => &[Filter::TopK],
        Filter::TopP => &[Filter::TopP],
        Filter::MinP => &[Filter::MinP],
        Filter::TopKTopP => &[Filter::TopK, Filter::TopP],
    }
}

/// A sampling op's `seed` or `offset` as the kernel takes it — `(value, tensor address, 1 where the
/// tensor holds a value a row)`: the call's number, any u64, or an int64 tensor the device reads
/// (its bits as a u64: every u64 too), `[rows]` or `[1]` for every row.
fn random_source(
    argument: &'static str,
    input_name: &'static str,
    value: PerRow<u64>,
    rows: u64,
    samples: &TensorView,
) -> Result<(u64, u64, u32), Error> {
    let view = match value {
        PerRow::All(value) => return Ok((value, 0, 0)),
        PerRow::Rows(view) => view,
    };
    let one_for_every_row = view.shape() == [1] && rows != 1;
    let check = layout::PerRowCheck { argument, reference: input_name, expected: "an int64" };
    let address =
        check.check(view, if one_for_every_row { 1 } else { rows }, DType::I64, ("samples", samples), |_| true)?;
    Ok((0, address, !one_for_every_row as u32))
}

/// The contiguous strides of `shape`.
fn ferrinfer_contiguous(shape: &[i64]) -> Vec<i64> {
    crate::contiguous_strides(&shape.iter().map(|&d| d as usize).collect::<Vec<_>>())
}

/// The widest vector of logits (16 bytes at most) whose f32 probabilities are aligned too (to
/// `min(vec · 4, 16)` bytes: two 16-byte stores for 8): `(row stride, address)` of each.
fn vector_width(dtype: DType, vocab: u64, logits: (u64, u64), probs: (u64, u64)) -> u32 {
    let mut vec = layout::vector_width(dtype, vocab, &[logits.0], &[logits.1]) as u64;
    while vec > 1 && (!probs.0.is_multiple_of(vec) || !probs.1.is_multiple_of((vec * 4).min(16))) {
        vec /= 2;
    }
    vec as u32
}

impl Plan {
    /// The CPU backend: the kernels crate's host numerics, rows split across cores.
    fn run_on_cpu(&self, kernel: SamplingKernel) {
        let (filter, output) = filter_of(kernel);
        ferrinfer_kernels::with_element!(self.dtype, T => cpu::for_rows(self.rows, self.vocab, |rows| {
            for row in rows {
                // SAFETY: the launcher validated every pointer, stride and overlap in `params`.
                match &self.params {
                    Params::Softmax(params) => unsafe { softmax_row::<T>(params, row) },
                    Params::Filter(params) => unsafe { filter_row::<T>(params, row, filter, output) },
                    Params::Sample(params) => unsafe { sample_row::<T>(params, row, filter, reads_logits(kernel)) },
                }
            }
        }))
    }
}

/// Whether `kernel` stages its block's slice of a row in shared memory (where it fits): the
/// filters, top-k sampling and top-k then top-p sampling read it several times; the ops that weigh a row as they read it
/// (`sampling_from_probs`, top-p's and min-p's) once or twice, top-p again a rejected round.
fn stages(kernel: SamplingKernel) -> bool {
    !matches!(
        kernel,
        SamplingKernel::SamplingFromProbs
            | SamplingKernel::TopPSamplingFromProbs
            | SamplingKernel::MinPSamplingFromProbs
    )
}

/// The filter a kernel applies and what it writes (softmax's is never asked for, nor a sampling
/// op's output).
fn filter_of(kernel: SamplingKernel) -> (Filter, FilterOutput) {
    match kernel {
        SamplingKernel::TopPRenormProbs => (Filter::TopP, FilterOutput::Renorm),
        SamplingKernel::TopKRenormProbs => (Filter::TopK, FilterOutput::Renorm),
        SamplingKernel::TopKMaskLogits | SamplingKernel::Softmax => (Filter::TopK, FilterOutput::Mask),
        SamplingKernel::SamplingFromProbs => (Filter::Everything, FilterOutput::Mask),
        SamplingKernel::TopKSamplingFromProbs => (Filter::TopK, FilterOutput::Mask),
        SamplingKernel::TopPSamplingFromProbs => (Filter::TopP, FilterOutput::Mask),
        SamplingKernel::MinPSamplingFromProbs => (Filter::MinP, FilterOutput::Mask),
        SamplingKernel::TopKTopPSamplingFromProbs | SamplingKernel::TopKTopPSamplingFromLogits => {
            (Filter::TopKTopP, FilterOutput::Mask)
        }
    }
}

/// Whether a sampling op draws from logits (weighed as softmax's numerators), not probabilities.
fn reads_logits(kernel: SamplingKernel) -> bool {
    kernel == SamplingKernel::TopKTopPSamplingFromLogits
}

/// Threads per block at most: a block reduces and writes its slice of a row.
const BLOCK_THREADS: u32 = 512;
/// The filter kernels' blocks at most: each round of the search waits at barriers, so more,
/// smaller blocks a multiprocessor keep it busier (H200, f32 128256-entry rows, 2026-12-01: 256
/// threads 101 / 334 µs at 64 / 256 rows against 123 / 428 with 512; docs/perf/sampling.md).
const FILTER_BLOCK_THREADS: u32 = 256;
/// Elements of a row per block below which a row is not split further: a cluster's blocks each
/// take at least this many (8 of them share a 128256-entry row).
const MIN_SLICE: u64 = 8192;
/// A filter's [`MIN_SLICE`] when its batch is too small to fill the multiprocessors (H200,
/// 2026-12-02: top-p f32 32000 × 1 in 8 blocks 23.8 µs, in 2 42.0; bf16 top-k mask 32000 × 1 in
/// 4 blocks 9.1 µs, in 2 12.5).
const FEW_ROWS_MIN_SLICE: u64 = 4000;
/// A filter's threads a block at most when its batch is too small to fill the multiprocessors
/// (bf16 top-k mask 128256 × 1: 11.8 µs with 512, 14.7 with 256).
const FEW_ROWS_BLOCK_THREADS: u32 = 512;
/// A filter's threads a block where its batch holds one or two blocks a multiprocessor and a
/// slice of the row fits in shared memory ([`Plan::filter_split`]; H100, 2026-12-05: bf16
/// top-k mask 32000 × 64 in 2 blocks of 512 11.4 µs, of 256 14.1).
const WIDE_FILTER_BLOCK_THREADS: u32 = 512;
/// The widest block a filter takes, where its entry can and each thread still has four
/// vectors of its slice ([`Plan::filter_split`]; H100, 2026-12-05: bf16 top-k mask 128256 × 64 in
/// 2 blocks of 1024 23.9 µs, of 512 29.1).
const WIDEST_FILTER_BLOCK_THREADS: u32 = 1024;
/// The grid's y dimension at most (CUDA's limit); the kernel strides over further rows.
const MAX_GRID_Y: u64 = 65_535;

tuning::layout_override! {
    /// `FERRINFER_SAMPLING_LAYOUT=block:slices` (each a number or `*` for the planner's choice):
    /// forces the threads per block (a multiple of 32 up to what the entry can have) and the blocks
    /// sharing a row (1, 2, 4 or 8; more than 1 needs sm_90) — a knob for tuning sweeps with the
    /// benchmark, read once. A value outside those bounds makes every sampling call a configuration
    /// error naming the variable. A block of `*` is the planner's block for its own blocks a row,
    /// whatever slices are forced (`*:1` at 64 rows of a 128256-entry 16-bit mask: 1024 threads,
    /// planned for two blocks a row): force both to sweep a layout.
    pub const LAYOUT_VAR: &str = "FERRINFER_SAMPLING_LAYOUT";
    struct LayoutOverride {
        block: Block,
        slices: u32 if |s| s.is_power_of_two() && s <= MAX_CLUSTER_BLOCKS,
    }
    expected = format!("block:slices, each a number or *, block a multiple of 32 ≤ {MAX_BLOCK}, slices 1, 2, 4 or 8");
}

impl Plan {
    /// Softmax's launch of entry `entry` within `limits`, or `forced`'s where it is given.
    fn softmax_launch(
        &self,
        params: SoftmaxParams,
        entry: usize,
        limits: &Limits,
        forced: LayoutOverride,
    ) -> Result<Launch<SoftmaxParams>, Error> {
        let planned = (self.split(MIN_SLICE, MAX_CLUSTER_BLOCKS), BLOCK_THREADS);
        let ((slices, rows), block) = self.geometry(limits.clusters, limits.max_threads(entry), planned, forced)?;
        let params = SoftmaxParams { slices, ..params };
        let shared_bytes = if slices > 1 { CLUSTER_EXCHANGE_BYTES } else { 0 };
        Ok(Launch { entry, params, grid: (slices, rows), block, shared_bytes, cluster: slices })
    }

    /// A filter's launch: as softmax's, plus the block's slice staged in shared memory when it
    /// fits there (the row is then read from global memory once, whatever the rounds of the
    /// search).
    fn filter_launch(
        &self,
        params: FilterParams,
        entry: usize,
        limits: &Limits,
        forced: LayoutOverride,
    ) -> Result<Launch<FilterParams>, Error> {
        let shared = |slices| self.staged_shared_bytes(slices, FILTER_HEADER_BYTES, limits.max_shared_bytes);
        let resident = |slices, block| limits.resident_blocks(entry, block, shared(slices).1);
        let max_threads = limits.max_threads(entry);
        let staged = |slices| shared(slices).0;
        let planned = self.filter_split(limits.multiprocessors, limits.clusters, max_threads, staged, resident);
        let (params, grid, block, shared_bytes) =
            self.staged_layout(params, FILTER_HEADER_BYTES, planned, entry, limits, forced)?;
        Ok(Launch { entry, params, grid, block, shared_bytes, cluster: grid.0 })
    }

    /// A sampling op's launch: a filter's, with the sampling header (each thread's kept mass)
    /// before the staged slice where the kernel `stages` it.
    fn sample_launch(
        &self,
        params: SampleParams,
        stages: bool,
        entry: usize,
        limits: &Limits,
        forced: LayoutOverride,
    ) -> Result<Launch<SampleParams>, Error> {
        let (filter, grid, block, shared_bytes) = if stages {
            let planned = self.staged_split(limits.multiprocessors);
            self.staged_layout(params.filter, SAMPLE_HEADER_BYTES, planned, entry, limits, forced)?
        } else {
            let planned = self.streamed_split(limits.multiprocessors);
            let ((slices, rows), block) = self.geometry(limits.clusters, limits.max_threads(entry), planned, forced)?;
            (FilterParams { slices, staged: 0, ..params.filter }, (slices, rows), block, SAMPLE_HEADER_BYTES)
        };
        Ok(Launch { entry, params: SampleParams { filter, ..params }, grid, block, shared_bytes, cluster: grid.0 })
    }

    /// The layout of a kernel that stages its block's slice after `header` bytes of shared
    /// memory (the filters', the sampling ops'), `planned` (blocks a row, threads a block at
    /// most) unless forced: `params` with its slices and staging, the grid (blocks a row, rows
    /// in parallel), the block and the dynamic shared memory.
    fn staged_layout(
        &self,
        params: FilterParams,
        header: u32,
        planned: (u32, u32),
        entry: usize,
        limits: &Limits,
        forced: LayoutOverride,
    ) -> Result<(FilterParams, (u32, u32), u32, u32), Error> {
        let ((slices, rows), block) = self.geometry(limits.clusters, limits.max_threads(entry), planned, forced)?;
        let (staged, shared_bytes) = self.staged_shared_bytes(slices, header, limits.max_shared_bytes);
        Ok((FilterParams { slices, staged: staged as u32, ..params }, (slices, rows), block, shared_bytes))
    }

    /// Whether a block's slice of `slices` fits in `max_shared_bytes` after `header` bytes, and
    /// the dynamic shared memory the launch then takes.
    fn staged_shared_bytes(&self, slices: u32, header: u32, max_shared_bytes: u32) -> (bool, u32) {
        let vectors = (self.vocab / self.vec as u64).div_ceil(slices as u64);
        let slice_bytes = vectors * self.vec as u64 * self.dtype.size() as u64;
        let staged = header as u64 + slice_bytes <= max_shared_bytes as u64;
        (staged, header + if staged { slice_bytes as u32 } else { 0 })
    }

    /// Blocks a row when each takes at least `min_slice` of its elements: a power of two, at
    /// most `most`.
    fn split(&self, min_slice: u64, most: u32) -> u32 {
        1 << ((self.vocab / min_slice).clamp(1, most as u64) as u32).ilog2()
    }

    /// A filter's (blocks a row, threads a block at most), from the layout sweep of 2026-12-05
    /// (docs/perf/sampling.md): where clusters share a row, the row is long enough
    /// for [`Plan::staged_split`] to share it ([`MIN_SLICE`]) and the batch is past its few
    /// rows, fewer and wider blocks than that split's. A batch of fewer rows than
    /// multiprocessors takes 2 blocks a row where half a row fits in shared memory
    /// (`staged(2)`), of [`WIDEST_FILTER_BLOCK_THREADS`] where the entry takes that many
    /// (`max_threads`) and each thread still has four vectors, else [`WIDE_FILTER_BLOCK_THREADS`];
    /// one of at most two rows a multiprocessor, a block of [`WIDE_FILTER_BLOCK_THREADS`] a row
    /// where the whole row fits. Elsewhere (f32 128256-entry rows, where 8 blocks of 256 stayed
    /// the fastest; more rows, where the split's smaller blocks won at 1024 rows) the staged
    /// kernels' split. H100, µs, that split → this: bf16 top-k mask 32000 × 64 14.1 → 11.4,
    /// × 256 24.3 → 21.1, 128256 × 64 34.9 → 23.9; bf16 top-k renorm 128256 × 64 37.1 → 29.0.
    /// Never where the wider blocks take more waves than the split's: `resident(slices, block)`
    /// (blocks a multiprocessor holds at once, from the entry's registers and the layout's shared
    /// memory) is one for a block of 512 of an 80-register entry, three of 256 — 100 rows of
    /// 32000 in two blocks of 512 a row would take two waves where the split's take one (every
    /// point the sweep moved takes no more waves than the split).
    fn filter_split(
        &self,
        multiprocessors: u32,
        clusters: bool,
        max_threads: u32,
        staged: impl Fn(u32) -> bool,
        resident: impl Fn(u32, u32) -> u32,
    ) -> (u32, u32) {
        let split = self.staged_split(multiprocessors);
        let few_rows = self.rows * MAX_CLUSTER_BLOCKS as u64 <= multiprocessors as u64;
        if few_rows || !clusters || self.split(MIN_SLICE, MAX_CLUSTER_BLOCKS) < 2 {
            return split;
        }
        let wide = if self.rows < multiprocessors as u64 && staged(2) {
            // Multiprocessors a block a row would leave idle: what they lack is threads.
            let vectors_per_slice = (self.vocab / self.vec as u64).div_ceil(2);
            let widest = WIDEST_FILTER_BLOCK_THREADS;
            let wide = max_threads >= widest && vectors_per_slice >= 4 * widest as u64;
            (2, if wide { widest } else { WIDE_FILTER_BLOCK_THREADS })
        } else if self.rows <= 2 * multiprocessors as u64 && staged(1) {
            (1, WIDE_FILTER_BLOCK_THREADS)
        } else {
            return split;
        };
        let waves = |(slices, block_threads)| {
            let block = self.block_threads(slices, block_threads, max_threads);
            let at_once = multiprocessors as u64 * resident(slices, block).max(1) as u64;
            (self.rows * slices as u64).div_ceil(at_once)
        };
        if waves(wide) <= waves(split) { wide } else { split }
    }

    /// A staged kernel's (blocks a row, threads a block), from the layout sweep of 2026-12-02
    /// (docs/perf/sampling.md; the staged sampling ops', and the filters' outside
    /// [`Plan::filter_split`]'s rows): a batch that leaves most multiprocessors idle even at 8
    /// blocks a row splits its rows finer ([`FEW_ROWS_MIN_SLICE`]) into wider blocks
    /// ([`FEW_ROWS_BLOCK_THREADS`]: more loads in flight a row); a larger one as softmax, but
    /// 16-bit rows in at most 4 blocks (clusters of 8 cost them more than their slices' halved
    /// work saves: 128256 × 256 renorm 151.7 µs in 8 blocks, 125.2 in 4).
    fn staged_split(&self, multiprocessors: u32) -> (u32, u32) {
        if self.rows * MAX_CLUSTER_BLOCKS as u64 <= multiprocessors as u64 {
            return (self.split(FEW_ROWS_MIN_SLICE, MAX_CLUSTER_BLOCKS), FEW_ROWS_BLOCK_THREADS);
        }
        let most = if self.dtype.size() == 2 { MAX_CLUSTER_BLOCKS / 2 } else { MAX_CLUSTER_BLOCKS };
        (self.split(MIN_SLICE, most), FILTER_BLOCK_THREADS)
    }

    /// `sampling_from_probs`' (blocks a row, threads a block), from the layout sweep of
    /// 2026-12-02 (docs/perf/sampling.md): a small batch as the filters'; a larger
    /// one in at most 2 blocks a row (more blocks wait on more of each other: f32 128256 × 256
    /// in 8 blocks 100.1 µs, in 2 80.6), of 512 threads while the batch's blocks fit the
    /// multiprocessors once (× 64: 22.8 µs against 31.9 with 256), else 256.
    fn streamed_split(&self, multiprocessors: u32) -> (u32, u32) {
        if self.rows * MAX_CLUSTER_BLOCKS as u64 <= multiprocessors as u64 {
            return self.staged_split(multiprocessors);
        }
        let slices = self.split(MIN_SLICE, 2);
        let block = if self.rows * slices as u64 <= multiprocessors as u64 { 512 } else { FILTER_BLOCK_THREADS };
        (slices, block)
    }

    /// ((blocks per row, rows in parallel), block) where clusters are available or not, for an
    /// entry of at most `max_threads` threads, `planned` (blocks a row, threads a block at most)
    /// unless forced: as many rows in parallel as the grid allows.
    fn geometry(
        &self,
        clusters: bool,
        max_threads: u32,
        (planned, block_threads): (u32, u32),
        forced: LayoutOverride,
    ) -> Result<((u32, u32), u32), Error> {
        let planned = if clusters { planned } else { 1 };
        let slices = match forced.slices {
            Some(s) if s > 1 && !clusters => {
                return Err(Error::Config(format!(
                    "{LAYOUT_VAR}: {s} blocks a row need thread-block clusters (sm_90); this device or module has none"
                )));
            }
            Some(s) => s,
            None => planned,
        };
        let most = max_threads.max(32);
        let block = match forced.block {
            Some(block) if block > most => {
                return Err(Error::Config(format!(
                    "{LAYOUT_VAR}: a block of {block} threads; expected at most {most}, the most this kernel can have"
                )));
            }
            Some(block) => block,
            None => self.block_threads(slices, block_threads, max_threads),
        };
        Ok(((slices, self.rows.min(MAX_GRID_Y) as u32), block))
    }

    /// The threads of a block of `slices` a row: a thread a vector of its slice, in whole
    /// warps, at most `block_threads` and what the entry can have (`max_threads`).
    fn block_threads(&self, slices: u32, block_threads: u32, max_threads: u32) -> u32 {
        let vectors_per_slice = (self.vocab / self.vec as u64).div_ceil(slices as u64);
        (vectors_per_slice.next_multiple_of(32) as u32).min(block_threads).min(max_threads.max(32))
    }
}

/// `softmax(x / t)` in f64 per row of `hidden` (t = 0: every finite logit alike, −∞ none).
fn softmax_reference(p: &Problem) -> Vec<Vec<f64>> {
    let temperature = f64::from(p.scalar::<f32>("temperature"));
    let scale = if temperature == 0.0 { 0.0 } else { 1.0 / temperature };
    let rows = p.tensors[0].chunks_exact(p.hidden);
    vec![
        rows.flat_map(|row| {
            let scaled: Vec<f64> = row.iter().map(|&x| if x == f64::NEG_INFINITY { x } else { x * scale }).collect();
            let max = scaled.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let exps: Vec<f64> = scaled.iter().map(|u| (u - max).exp()).collect();
            let sum: f64 = exps.iter().sum();
            exps.into_iter().map(move |e| e / sum)
        })
        .collect(),
    ]
}

/// Which entries of `row` a top-k keeps: those at or above its `k`-th largest in IEEE 754's
/// total order (all of them for `k ≥ len`).
fn top_k_kept(row: &[f64], k: usize) -> Vec<bool> {
    if k >= row.len() {
        return vec![true; row.len()];
    }
    let mut sorted = row.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    let pivot = sorted[k - 1];
    row.iter().map(|x| x.total_cmp(&pivot).is_ge()).collect()
}

/// `top_k_mask_logits` in f64: kept logits, −∞ elsewhere.
fn top_k_mask_reference(p: &Problem) -> Vec<Vec<f64>> {
    top_k_reference(p, |row, kept| {
        row.iter().zip(kept).map(|(&x, kept)| if kept { x } else { f64::NEG_INFINITY }).collect()
    })
}

/// `top_k_renorm_probs` in f64: kept probabilities over their sum, 0 elsewhere.
fn top_k_renorm_reference(p: &Problem) -> Vec<Vec<f64>> {
    top_k_reference(p, |row, kept| {
        let sum: f64 = row.iter().zip(&kept).filter(|(_, kept)| **kept).map(|(x, _)| x).sum();
        row.iter().zip(kept).map(|(&x, kept)| if kept { x / sum } else { 0.0 }).collect()
    })
}

/// `top_p_renorm_probs` in f64: an entry is kept when the entries above it (strictly) hold less
/// than `top_p` of the row's sum (`top_p ≥ 1`: every entry); kept probabilities over their sum,
/// 0 elsewhere.
fn top_p_renorm_reference(p: &Problem) -> Vec<Vec<f64>> {
    // The op's `top_p` is an f32: 0.9 is 0.89999998 to the kernels.
    let top_p = f64::from(p.scalar::<f32>("top_p"));
    let rows = p.tensors[0].chunks_exact(p.hidden);
    vec![
        rows.flat_map(|row| {
            let mut sorted = row.to_vec();
            sorted.sort_by(|a, b| b.total_cmp(a));
            // before[i]: the sum of the i largest.
            let before: Vec<f64> = std::iter::once(0.0)
                .chain(sorted.iter().scan(0.0, |sum, x| {
                    *sum += x;
                    Some(*sum)
                }))
                .collect();
            let target = top_p * before[row.len()];
            let above = |x: &f64| before[sorted.partition_point(|y| y.total_cmp(x).is_gt())];
            let kept: Vec<bool> = row.iter().map(|x| top_p >= 1.0 || above(x) < target).collect();
            let sum: f64 = row.iter().zip(&kept).filter(|(_, kept)| **kept).map(|(x, _)| x).sum();
            row.iter().zip(kept).map(move |(&x, kept)| if kept { x / sum } else { 0.0 }).collect::<Vec<_>>()
        })
        .collect(),
    ]
}

/// A top-k op's one output, row by row: `write(row, which entries it keeps)`.
fn top_k_reference(p: &Problem, write: impl Fn(&[f64], Vec<bool>) -> Vec<f64>) -> Vec<Vec<f64>> {
    let k = usize::try_from(p.scalar::<i32>("top_k")).unwrap_or(0);
    vec![p.tensors[0].chunks_exact(p.hidden).flat_map(|row| write(row, top_k_kept(row, k))).collect()]
}

/// `sampling_from_probs` by its definition, row by row (see [`sample_reference`]).
fn sampling_reference(p: &Problem) -> Vec<Vec<f64>> {
    sample_reference(p, Filter::Everything)
}

/// `top_k_sampling_from_probs` by its definition.
fn top_k_sampling_reference(p: &Problem) -> Vec<Vec<f64>> {
    sample_reference(p, Filter::TopK)
}

/// `top_p_sampling_from_probs` by its definition.
fn top_p_sampling_reference(p: &Problem) -> Vec<Vec<f64>> {
    sample_reference(p, Filter::TopP)
}

/// `min_p_sampling_from_probs` by its definition.
fn min_p_sampling_reference(p: &Problem) -> Vec<Vec<f64>> {
    sample_reference(p, Filter::MinP)
}

/// `top_k_top_p_sampling_from_probs` by its definition.
fn top_k_top_p_sampling_reference(p: &Problem) -> Vec<Vec<f64>> {
    sample_reference(p, Filter::TopKTopP)
}

/// `top_k_top_p_sampling_from_logits` by its definition.
fn top_k_top_p_logits_sampling_reference(p: &Problem) -> Vec<Vec<f64>> {
    sample_reference_of(p, Filter::TopKTopP, true)
}

/// A sampling op's tokens by the definition, without the kernels' search or sums: each entry's
/// mass (the kernels crate's fixed point, `MassScale`, which defines the op's numerics), the
/// kept entries found by sorting, the masses summed in u128, the target from the row's 64
/// Philox bits ([`draw_random_bits`], [`mass_target`]), and the first entry whose running sum
/// passes it (0 for a row without kept mass). Top-p draws by rejection rounds
/// ([`top_p_reference_token`]); after top-k, among the top-k entries.
fn sample_reference(p: &Problem, filter: Filter) -> Vec<Vec<f64>> {
    sample_reference_of(p, filter, false)
}

/// [`sample_reference`] of probabilities, or (`logits`) of logits weighed as the kernels crate's
/// [`EntryWeight::Softmax`] (its portable `exp2`, the kernels' own).
fn sample_reference_of(p: &Problem, filter: Filter, logits: bool) -> Vec<Vec<f64>> {
    let thresholds: Vec<f64> = threshold_filters(filter).iter().map(|&f| problem_threshold(p, f)).collect();
    let (seed, offset) = (p.scalar::<u64>("seed"), p.scalar::<u64>("offset"));
    let rows = p.tensors[0].chunks_exact(p.hidden).enumerate();
    vec![
        rows.map(|(row, values)| {
            let values: Vec<f32> = values.iter().map(|&v| v as f32).collect();
            let max = values.iter().fold(EntryWeight::least(logits), |max, &v| max.max(v));
            let weight = EntryWeight::of_row(logits, max);
            let scale = weight.scale(max, values.len() as u32);
            let mut masses: Vec<u128> = values.iter().map(|&v| scale.mass(weight.of(v)) as u128).collect();
            // Top-k then top-p: top-p over the top-k entries' masses alone.
            let (filter, threshold) = match filter {
                Filter::TopKTopP => {
                    let row: Vec<f64> = values.iter().map(|&v| v as f64).collect();
                    let in_top_k = top_k_kept(&row, thresholds[0] as usize);
                    masses.iter_mut().zip(in_top_k).filter(|(_, kept)| !kept).for_each(|(m, _)| *m = 0);
                    (Filter::TopP, thresholds[1])
                }
                _ => (filter, thresholds.first().copied().unwrap_or(f64::NAN)),
            };
            let kept = reference_kept(filter, &values, &masses, threshold, max);
            let bits_of_draw = |draw| draw_random_bits(seed, row as u64, offset, draw);
            let token = if filter == Filter::TopP {
                top_p_reference_token(&values, &masses, &kept, bits_of_draw)
            } else {
                let weights: Vec<u128> = masses.iter().zip(&kept).map(|(&m, &k)| if k { m } else { 0 }).collect();
                reference_draw(&weights, bits_of_draw(0))
            };
            token.unwrap_or(0) as f64
        })
        .collect(),
    ]
}

/// The first entry whose running sum of `weights` passes [`mass_target`] of `bits` in their
/// total (None for a total of 0).
fn reference_draw(weights: &[u128], bits: u64) -> Option<usize> {
    let total: u128 = weights.iter().sum();
    if total == 0 {
        return None;
    }
    let target = mass_target(bits, total as u64) as u128;
    let mut below = 0u128;
    weights.iter().position(|&w| {
        below += w;
        below > target
    })
}

/// Top-p's token by rejection rounds: draw among the entries greater than the last rejected
/// token (at first every one) in proportion to their masses; accept a token top-p keeps
/// (`kept`, by sorting), else draw again from the entries greater than it, with the next draw's
/// bits.
fn top_p_reference_token(
    values: &[f32],
    masses: &[u128],
    kept: &[bool],
    bits_of_draw: impl Fn(u32) -> u64,
) -> Option<usize> {
    let (mut floor, mut draw) = (f32::NEG_INFINITY, 0);
    loop {
        let weights: Vec<u128> = values.iter().zip(masses).map(|(&v, &m)| if v > floor { m } else { 0 }).collect();
        let token = reference_draw(&weights, bits_of_draw(draw))?;
        if kept[token] {
            return Some(token);
        }
        (floor, draw) = (values[token], draw + 1);
    }
}

/// Which entries `filter` keeps, by sorting: top-k's `k` largest (ties too), top-p's entries
/// with less than `⌈top_p · Σ masses⌉` of mass strictly above them, min-p's at least
/// `min_p · max` (in f32).
fn reference_kept(filter: Filter, values: &[f32], masses: &[u128], threshold: f64, max: f32) -> Vec<bool> {
    match filter {
        Filter::Everything => vec![true; values.len()],
        Filter::TopK | Filter::TopKTopP => {
            let row: Vec<f64> = values.iter().map(|&v| v as f64).collect();
            top_k_kept(&row, threshold as usize)
        }
        Filter::TopP => {
            let top_p = threshold as f32;
            let total: u128 = masses.iter().sum();
            let target = (share_of(total as u64, top_p) as u128).max(1);
            let mut order: Vec<usize> = (0..values.len()).collect();
            order.sort_by(|&a, &b| values[b].total_cmp(&values[a]));
            let mut kept = vec![top_p >= 1.0; values.len()];
            let (mut above, mut group_start) = (0u128, 0);
            // Entries tied with each other have the same mass above them.
            while group_start < order.len() {
                let value = values[order[group_start]];
                let group_end = order[group_start..].iter().position(|&i| values[i].total_cmp(&value).is_ne());
                let group_end = group_end.map_or(order.len(), |n| group_start + n);
                for &i in &order[group_start..group_end] {
                    kept[i] |= above < target;
                }
                above += order[group_start..group_end].iter().map(|&i| masses[i]).sum::<u128>();
                group_start = group_end;
            }
            kept
        }
        Filter::MinP => {
            // As the kernels' `!(v < floor)`: a NaN value, or a NaN floor (min_p 0 of +∞), keeps.
            let floor = threshold as f32 * max;
            values.iter().map(|&v| v >= floor || v.is_nan() || floor.is_nan()).collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(rows: u64, vocab: u32, vec: u32) -> Plan {
        let params = SoftmaxParams {
            logits: 0,
            probs: 0,
            rows,
            logits_row_stride: vocab as u64,
            probs_row_stride: vocab as u64,
            temperatures: 0,
            vocab,
            temperature: 1.0,
            slices: 1,
            _reserved: 0,
        };
        Plan { params: Params::Softmax(params), dtype: DType::F32, vec, rows, vocab: vocab as u64 }
    }

    fn forced(block: Option<u32>, slices: Option<u32>) -> LayoutOverride {
        LayoutOverride { block, slices }
    }

    #[test]
    fn sampling_layout_override_parses_and_rejects_what_no_launch_has() {
        assert_eq!(parse_layout("256:4"), Some(forced(Some(256), Some(4))));
        assert_eq!(parse_layout("*:*"), Some(LayoutOverride::default()));
        assert_eq!(parse_layout("*:1"), Some(forced(None, Some(1))));
        for bad in ["0:*", "100:*", "2048:*", "*:0", "*:3", "*:16", "1:1:1", "x"] {
            assert_eq!(parse_layout(bad), None, "{bad}");
        }
    }

    /// Softmax's planned split of `plan`'s rows.
    fn softmax_split(plan: &Plan) -> (u32, u32) {
        (plan.split(MIN_SLICE, MAX_CLUSTER_BLOCKS), BLOCK_THREADS)
    }

    #[test]
    fn a_large_vocabulary_is_split_across_a_cluster_where_there_are_clusters() {
        let unforced = LayoutOverride::default();
        let geometry = |rows, vocab, vec, clusters, forced| {
            let plan = plan(rows, vocab, vec);
            plan.geometry(clusters, 1024, softmax_split(&plan), forced)
        };
        assert_eq!(geometry(1, 128256, 4, true, unforced).unwrap(), ((8, 1), 512));
        assert_eq!(geometry(256, 32000, 4, true, unforced).unwrap(), ((2, 256), 512), "3 → 2 a row");
        assert_eq!(geometry(64, 128256, 4, false, unforced).unwrap(), ((1, 64), 512), "no clusters");
        assert_eq!(geometry(3, 1000, 4, true, unforced).unwrap(), ((1, 3), 256), "250 vectors");
        assert_eq!(geometry(1 << 20, 7, 1, true, unforced).unwrap(), ((1, 65535), 32), "rows strided");
        assert_eq!(geometry(1, 128256, 4, true, forced(Some(128), Some(2))).unwrap(), ((2, 1), 128));
        let error = geometry(1, 128256, 4, false, forced(None, Some(4))).unwrap_err();
        assert!(
            matches!(&error, Error::Config(text) if text.contains(LAYOUT_VAR) && text.contains("sm_90")),
            "{error}"
        );
        let plan = plan(1, 128256, 4);
        let error = plan.geometry(true, 256, softmax_split(&plan), forced(Some(512), None)).unwrap_err();
        assert!(matches!(&error, Error::Config(text) if text.contains("at most 256")), "{error}");
    }

    /// The staged kernels' split by batch and dtype, at the points of the sweep of 2026-12-02 (H200: 132
    /// multiprocessors).
    #[test]
    fn a_staged_kernel_splits_rows_finer_for_small_batches_and_16_bit_rows_less_for_large_ones() {
        let split = |rows, vocab: u32, dtype: DType| {
            let vec = 16 / dtype.size() as u32;
            Plan { dtype, ..plan(rows, vocab, vec) }.staged_split(132)
        };
        assert_eq!(split(1, 128256, DType::Bf16), (8, 512));
        assert_eq!(split(1, 32000, DType::F32), (8, 512), "4000 elements a block");
        assert_eq!(split(16, 32000, DType::Bf16), (8, 512), "16 × 8 blocks: one wave");
        assert_eq!(split(17, 32000, DType::Bf16), (2, 256));
        assert_eq!(split(64, 128256, DType::Bf16), (4, 256), "16-bit: at most 4");
        assert_eq!(split(256, 128256, DType::F16), (4, 256));
        assert_eq!(split(256, 128256, DType::F32), (8, 256));
        assert_eq!(split(256, 32000, DType::F32), (2, 256));
        assert_eq!(split(1, 3000, DType::F32), (1, 512), "below a slice: one block");
    }

    /// The filters' split at the points of the sweep of 2026-12-05 and its edges (H100 and H200: 132
    /// multiprocessors, 227 KB of shared memory a block), for entries of 64 registers (the
    /// 16-bit mask: up to 1024 threads) and of 80 (the others: up to 768).
    #[test]
    fn a_filter_takes_fewer_wider_blocks_where_its_batch_leaves_multiprocessors_free() {
        let split = |rows, vocab: u32, dtype: DType, max_threads, registers: u32| {
            let vec = 16 / dtype.size() as u32;
            let plan = Plan { dtype, ..plan(rows, vocab, vec) };
            let shared = |slices| plan.staged_shared_bytes(slices, FILTER_HEADER_BYTES, 232_448);
            // A multiprocessor's 65536 registers and 228 KB of shared memory, 1 KB a block reserved.
            let resident = |slices, block: u32| (65_536 / (registers * block)).min(233_472 / (shared(slices).1 + 1024));
            (plan.filter_split(132, true, max_threads, |slices| shared(slices).0, resident), plan.staged_split(132))
        };
        let planned = |rows, vocab, dtype, max_threads, registers| split(rows, vocab, dtype, max_threads, registers).0;
        assert_eq!(planned(64, 32000, DType::Bf16, 1024, 64), (2, 512), "2000 vectors a slice: not 4 a thread at 1024");
        assert_eq!(planned(131, 32000, DType::Bf16, 1024, 64), (2, 512), "two blocks of 512 a multiprocessor");
        assert_eq!(planned(66, 32000, DType::Bf16, 768, 80), (2, 512), "132 blocks of 512: one wave");
        assert_eq!(planned(67, 32000, DType::Bf16, 768, 80), (2, 256), "134 blocks of 512: two waves");
        assert_eq!(planned(131, 32000, DType::Bf16, 768, 80), (2, 256), "the split's 256 fit three a multiprocessor");
        assert_eq!(planned(64, 128256, DType::Bf16, 1024, 64), (2, 1024), "the widest the entry takes");
        assert_eq!(planned(64, 128256, DType::Bf16, 768, 80), (2, 512), "an entry short of 1024 threads");
        assert_eq!(planned(64, 32000, DType::F32, 768, 80), (2, 512));
        assert_eq!(planned(132, 32000, DType::Bf16, 1024, 64), (1, 512), "a block a row from a row a multiprocessor");
        assert_eq!(planned(256, 32000, DType::Bf16, 768, 80), (1, 512), "two waves, as the split's");
        assert_eq!(planned(256, 32000, DType::F32, 768, 80), (1, 512), "128 KB a row: staged");
        assert_eq!(planned(264, 32768, DType::Bf16, 768, 80), (1, 512), "4096 vectors, but the machine is full");
        for (rows, vocab, dtype, why) in [
            (265, 32000, DType::Bf16, "past two rows a multiprocessor"),
            (1024, 32000, DType::F32, "many rows"),
            (256, 128256, DType::Bf16, "250 KB a row: not staged in one block"),
            (64, 128256, DType::F32, "250 KB half a row: not staged in two"),
            (64, 10000, DType::Bf16, "too short for the split to share"),
            (16, 32000, DType::Bf16, "few rows"),
        ] {
            let (planned, staged) = split(rows, vocab, dtype, 1024, 64);
            assert_eq!(planned, staged, "{rows} × {vocab} {dtype:?}: {why}");
        }
        let plan = Plan { dtype: DType::Bf16, ..plan(64, 128256, 8) };
        assert_eq!(plan.filter_split(132, false, 1024, |_| true, |_, _| 1), plan.staged_split(132), "no clusters");
    }

    #[test]
    fn sampling_from_probs_shares_a_row_among_at_most_two_blocks_past_small_batches() {
        let split = |rows, vocab: u32| plan(rows, vocab, 4).streamed_split(132);
        assert_eq!(split(1, 128256), (8, 512), "a small batch: as the filters");
        assert_eq!(split(64, 128256), (2, 512), "64 × 2 blocks fit 132 multiprocessors once");
        assert_eq!(split(66, 32000), (2, 512));
        assert_eq!(split(67, 32000), (2, 256));
        assert_eq!(split(1024, 128256), (2, 256));
        assert_eq!(split(256, 9000), (1, 256), "below two slices: one block");
    }

    #[test]
    fn a_filter_slice_is_staged_in_shared_memory_when_it_fits() {
        let llama3 = plan(1, 128_256, 4);
        let header = FILTER_HEADER_BYTES;
        assert_eq!(llama3.staged_shared_bytes(8, header, 232_448), (true, header + 16_032 * 4), "64 KB a block");
        assert_eq!(llama3.staged_shared_bytes(1, header, 232_448), (false, header), "513 KB a row: global memory");
        assert_eq!(plan(1, 1001, 1).staged_shared_bytes(1, header, 49_152), (true, header + 1001 * 4));
    }

    #[test]
    fn probabilities_vectors_narrow_for_their_own_alignment() {
        assert_eq!(vector_width(DType::Bf16, 128256, (128256, 0), (128256, 0)), 8);
        assert_eq!(vector_width(DType::Bf16, 128256, (128256, 0), (128256, 8)), 2, "probs 8-byte aligned");
        assert_eq!(vector_width(DType::F32, 128256, (128256, 0), (128258, 0)), 2, "probs stride");
        assert_eq!(vector_width(DType::F16, 1001, (1001, 0), (1001, 0)), 1);
    }
}
