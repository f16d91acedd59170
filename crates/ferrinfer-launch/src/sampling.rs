//! The sampling family at layers 1 and 4: the op table, validation, the launch planner, the CPU
//! path and the f64 references. Each op validates its arguments, then runs on the CPU backend or
//! launches the kernel of `ferrinfer-kernels/src/sampling.rs` on the caller's stream. For now
//! one op, `softmax`.
//!
//! Rules, checked before anything is written (so on error `out` is untouched):
//! - `logits`: f16, bf16 or f32, any rank ≥ 1, the last dimension (the vocabulary, ≥ 1)
//!   contiguous, leading dimensions collapsible into rows; no rows is a no-op;
//! - `out` (the probabilities): writable, f32 whatever the logits' dtype (as FlashInfer's),
//!   `logits`' shape and device, rows as `logits`' may be, not overlapping `logits`;
//! - `temperature`: finite and ≥ 0; 0 weighs every finite logit alike (FlashInfer's rule).

use std::sync::OnceLock;

use ferrinfer_jit::sampling::{SamplingKernel, SamplingModule};
use ferrinfer_jit::{CudaArch, JitSpec};
use ferrinfer_kernels::element::DType;
use ferrinfer_kernels::sampling::{SoftmaxParams, softmax_row};
use ferrinfer_kernels::{CLUSTER_PAIRS_BYTES, MAX_CLUSTER_BLOCKS};

use crate::cuda::{self, KernelModule, Launch, Limits, MAX_BLOCK, ModuleCache};
use crate::layout;
use crate::op::{Call, FamilyOp, Problem};
use crate::{Error, Stream, TensorView, cpu, logging, tuning};

/// The sampling family's ops, one line each (grammar: [`define_ops!`](crate::define_ops)).
#[macro_export]
macro_rules! sampling_ops {
    ($callback:path) => {
        $callback! {
            family sampling;
            /// `out = softmax(logits / temperature)` over the last dimension, in f32 whatever
            /// the logits' dtype. `temperature` 0 weighs every finite logit alike; a row of −∞
            /// only, or with +∞ or NaN, gives NaN. Deterministic: a row's result never depends
            /// on timing or on the other rows.
            fn softmax(logits: In[Rows]) -> out: Out[Rows as f32]; temperature: f32 = 1.0
                => SamplingKernel::Softmax, reference softmax_reference;
        }
    };
}

crate::sampling_ops!(crate::define_ops);

impl FamilyOp for SamplingKernel {
    fn run(&self, call: &Call) -> Result<(), Error> {
        let [logits, out] = call.tensors()?;
        let Some(plan) = plan(logits, out, call.scalar(0), &call.stream)? else { return Ok(()) };
        // A bad tuning override fails every call, CPU ones too, rather than being ignored.
        let forced = layout_override()?;
        logging::input_statistics(call);
        match call.stream {
            Stream::Cpu => {
                cpu_rows(plan.dtype, &plan.params);
                Ok(())
            }
            Stream::Cuda(stream) => {
                static MODULES: ModuleCache<SamplingModule> = ModuleCache::new();
                let module = SamplingModule { kernel: *self, dtype: plan.dtype };
                let entry = module
                    .entry(plan.vec)
                    .ok_or_else(|| Error::NoEntryPoint { module: format!("{module:?}"), entry: plan.vec as usize })?;
                cuda::launch(stream, &MODULES, module, |limits| plan.kernel(entry, limits, forced))
            }
        }
    }
}

impl KernelModule for SamplingModule {
    fn spec(&self, arch: CudaArch, debug: bool) -> JitSpec {
        SamplingModule::spec(self, arch, debug)
    }
}

/// A validated call: kernel parameters, logits dtype and vector width.
struct Plan {
    params: SoftmaxParams,
    dtype: DType,
    vec: u32,
}

/// Every check, in the order a caller would fix them; `None` when there is nothing to compute.
fn plan(logits: &TensorView, out: &TensorView, temperature: f64, stream: &Stream) -> Result<Option<Plan>, Error> {
    let (device, dtype) = (logits.device(), logits.dtype());
    if stream.device() != device {
        return Err(Error::DeviceMismatch {
            argument: "stream",
            reference: "logits",
            expected: device,
            found: stream.device(),
        });
    }
    layout::check_device("out", out, "logits", device)?;
    for (argument, view) in [("logits", logits), ("out", out)] {
        layout::check_aligned(argument, view)?;
    }
    if out.dtype() != DType::F32 {
        return Err(Error::UnsupportedDType {
            argument: "out",
            found: out.dtype().to_string(),
            expected: "f32 (probabilities are f32 whatever the logits' dtype)".into(),
        });
    }
    layout::check_writable("out", out)?;
    if !(temperature.is_finite() && temperature >= 0.0) {
        return Err(Error::InvalidScalar { argument: "temperature", value: temperature, expected: "finite and ≥ 0" });
    }
    let x = layout::row_layout("logits", logits)?;
    if x.hidden == 0 {
        let expected = "a last dimension (the vocabulary) of at least 1".to_owned();
        return Err(Error::ShapeMismatch { argument: "logits", expected, found: logits.shape().to_vec() });
    }
    if out.shape() != logits.shape() {
        let expected = format!("{:?} (`logits`' shape)", logits.shape());
        return Err(Error::ShapeMismatch { argument: "out", expected, found: out.shape().to_vec() });
    }
    let y = layout::row_layout("out", out)?;
    if layout::overlaps(out, logits) {
        return Err(Error::Overlap { argument: "out", other: "logits" });
    }
    if x.hidden > u32::MAX as u64 {
        let limit = u32::MAX as u64;
        return Err(Error::TooLarge { argument: "logits", what: "the vocabulary", value: x.hidden, limit });
    }
    if x.rows == 0 {
        return Ok(None);
    }
    let vec = vector_width(dtype, x.hidden, (x.row_stride, logits.address()), (y.row_stride, out.address()));
    let params = SoftmaxParams {
        logits: logits.address(),
        probs: out.address(),
        rows: x.rows,
        logits_row_stride: x.row_stride,
        probs_row_stride: y.row_stride,
        vocab: x.hidden as u32,
        temperature: temperature as f32,
        slices: 1,
        _reserved: 0,
    };
    Ok(Some(Plan { params, dtype, vec }))
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

/// The CPU backend: the kernels crate's host numerics, rows split across cores.
fn cpu_rows(dtype: DType, params: &SoftmaxParams) {
    ferrinfer_kernels::with_element!(dtype, T => cpu::for_rows(params.rows, params.vocab as u64, |rows| {
        for row in rows {
            // SAFETY: the launcher validated every pointer, stride and overlap in `params`.
            unsafe { softmax_row::<T>(params, row) }
        }
    }))
}

/// Threads per block at most: a block reduces and writes its slice of a row.
const BLOCK_THREADS: u32 = 512;
/// Elements of a row per block below which a row is not split further: a cluster's blocks each
/// take at least this many (8 of them share a 128256-entry row).
const MIN_SLICE: u64 = 8192;
/// The grid's y dimension at most (CUDA's limit); the kernel strides over further rows.
const MAX_GRID_Y: u64 = 65_535;

/// `FERRINFER_SAMPLING_LAYOUT=block:slices` (each a number or `*` for the planner's choice):
/// forces the threads per block (a multiple of 32 up to what the entry can have) and the blocks
/// sharing a row (1, 2, 4 or 8; more than 1 needs sm_90) — a knob for tuning sweeps with the
/// benchmark, read once. A value outside those bounds makes every sampling call a configuration
/// error naming the variable.
pub const LAYOUT_VAR: &str = "FERRINFER_SAMPLING_LAYOUT";

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct LayoutOverride {
    block: Option<u32>,
    slices: Option<u32>,
}

fn layout_override() -> Result<LayoutOverride, Error> {
    static PARSED: OnceLock<Result<LayoutOverride, String>> = OnceLock::new();
    tuning::env_override(&PARSED, LAYOUT_VAR, parse_layout, || {
        format!("block:slices, each a number or *, block a multiple of 32 ≤ {MAX_BLOCK}, slices 1, 2, 4 or 8")
    })
}

fn parse_layout(value: &str) -> Option<LayoutOverride> {
    let [block, slices] = tuning::fields(value)?;
    let block_ok = block.is_none_or(|b| b > 0 && b.is_multiple_of(32) && b <= MAX_BLOCK as u64);
    let slices_ok = slices.is_none_or(|s| s.is_power_of_two() && s <= MAX_CLUSTER_BLOCKS as u64);
    (block_ok && slices_ok)
        .then_some(LayoutOverride { block: block.map(|b| b as u32), slices: slices.map(|s| s as u32) })
}

impl Plan {
    /// The launch of entry `entry` within `limits`, or `forced`'s where it is given.
    fn kernel(&self, entry: usize, limits: &Limits, forced: LayoutOverride) -> Result<Launch<SoftmaxParams>, Error> {
        let ((slices, rows), block) = self.geometry(limits.clusters, limits.max_threads(entry), forced)?;
        let params = SoftmaxParams { slices, ..self.params };
        let shared_bytes = if slices > 1 { CLUSTER_PAIRS_BYTES } else { 0 };
        Ok(Launch { entry, params, grid: (slices, rows), block, shared_bytes, cluster: slices })
    }

    /// ((blocks per row, rows in parallel), block) where clusters are available or not, for an
    /// entry of at most `max_threads` threads: a row split into a cluster's blocks of at least
    /// [`MIN_SLICE`] elements each, as many rows in parallel as the grid allows.
    fn geometry(&self, clusters: bool, max_threads: u32, forced: LayoutOverride) -> Result<((u32, u32), u32), Error> {
        let vocab = self.params.vocab as u64;
        let planned = if clusters { (vocab / MIN_SLICE).clamp(1, MAX_CLUSTER_BLOCKS as u64) as u32 } else { 1 };
        let slices = match forced.slices {
            Some(s) if s > 1 && !clusters => {
                return Err(Error::Config(format!(
                    "{LAYOUT_VAR}: {s} blocks a row need thread-block clusters (sm_90); this device or module has none"
                )));
            }
            Some(s) => s,
            None => 1 << planned.ilog2(),
        };
        let most = max_threads.max(32);
        let vectors_per_slice = (vocab / self.vec as u64).div_ceil(slices as u64);
        let block = match forced.block {
            Some(block) if block > most => {
                return Err(Error::Config(format!(
                    "{LAYOUT_VAR}: a block of {block} threads; expected at most {most}, the most this kernel can have"
                )));
            }
            Some(block) => block,
            None => (vectors_per_slice.next_multiple_of(32) as u32).min(BLOCK_THREADS).min(most),
        };
        Ok(((slices, self.params.rows.min(MAX_GRID_Y) as u32), block))
    }
}

/// `softmax(x / t)` in f64 per row of `hidden` (t = 0: every finite logit alike).
fn softmax_reference(p: &Problem) -> Vec<Vec<f64>> {
    let temperature = p.scalars[0];
    let scale = if temperature == 0.0 { 0.0 } else { 1.0 / temperature };
    let rows = p.tensors[0].chunks_exact(p.hidden);
    vec![
        rows.flat_map(|row| {
            let scaled: Vec<f64> = row.iter().map(|x| x * scale).collect();
            let max = scaled.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let exps: Vec<f64> = scaled.iter().map(|u| (u - max).exp()).collect();
            let sum: f64 = exps.iter().sum();
            exps.into_iter().map(move |e| e / sum)
        })
        .collect(),
    ]
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
            vocab,
            temperature: 1.0,
            slices: 1,
            _reserved: 0,
        };
        Plan { params, dtype: DType::F32, vec }
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

    #[test]
    fn a_large_vocabulary_is_split_across_a_cluster_where_there_are_clusters() {
        let unforced = LayoutOverride::default();
        assert_eq!(plan(1, 128256, 4).geometry(true, 1024, unforced).unwrap(), ((8, 1), 512));
        assert_eq!(plan(256, 32000, 4).geometry(true, 1024, unforced).unwrap(), ((2, 256), 512), "3 → 2 a row");
        assert_eq!(plan(64, 128256, 4).geometry(false, 1024, unforced).unwrap(), ((1, 64), 512), "no clusters");
        assert_eq!(plan(3, 1000, 4).geometry(true, 1024, unforced).unwrap(), ((1, 3), 256), "250 vectors");
        assert_eq!(plan(1 << 20, 7, 1).geometry(true, 1024, unforced).unwrap(), ((1, 65535), 32), "rows strided");
        assert_eq!(plan(1, 128256, 4).geometry(true, 1024, forced(Some(128), Some(2))).unwrap(), ((2, 1), 128));
        let error = plan(1, 128256, 4).geometry(false, 1024, forced(None, Some(4))).unwrap_err();
        assert!(
            matches!(&error, Error::Config(text) if text.contains(LAYOUT_VAR) && text.contains("sm_90")),
            "{error}"
        );
        let error = plan(1, 128256, 4).geometry(true, 256, forced(Some(512), None)).unwrap_err();
        assert!(matches!(&error, Error::Config(text) if text.contains("at most 256")), "{error}");
    }

    #[test]
    fn probabilities_vectors_narrow_for_their_own_alignment() {
        assert_eq!(vector_width(DType::Bf16, 128256, (128256, 0), (128256, 0)), 8);
        assert_eq!(vector_width(DType::Bf16, 128256, (128256, 0), (128256, 8)), 2, "probs 8-byte aligned");
        assert_eq!(vector_width(DType::F32, 128256, (128256, 0), (128258, 0)), 2, "probs stride");
        assert_eq!(vector_width(DType::F16, 1001, (1001, 0), (1001, 0)), 1);
    }
}
