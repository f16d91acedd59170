//! The norm family at layers 1 and 4: each op validates its arguments, then runs on the CPU
//! backend or launches a kernel of `ferrinfer-kernels/src/norm.rs` on the caller's stream.
//!
//! Common rules, checked before anything is written (so on error no output is touched):
//! - `input`: f16, bf16 or f32, any rank ≥ 1 (e.g. tokens × heads × head_dim for QK-norm), the
//!   last dimension contiguous, leading dimensions collapsible into rows whose stride is ≥ the
//!   row length (rows of a larger buffer are fine);
//! - `weight` (and layernorm's `beta`): one contiguous row `[hidden]`, of `input`'s dtype (layernorm
//!   also accepts f32 `gamma`/`beta` with f16/bf16 input);
//! - `eps`: finite, ≥ 0; `stream`: [`Stream::Cpu`] for host tensors or the CUDA stream to launch
//!   on (ferrinfer never picks one) for tensors on its device;
//! - addresses need only element alignment: the vector width narrows (to 1) until every address
//!   and row stride allows it.

use std::sync::OnceLock;

use ferrinfer_jit::norm::{CHUNK_COUNTS, NormOp, gen_norm_spec};
use ferrinfer_kernels::element::DType;
use ferrinfer_kernels::norm::NormParams;

use crate::cuda::{self, KernelLaunch, ModuleKey};
use crate::layout::{self, RowLayout};
use crate::{Device, Error, Stream, TensorView, cpu, logging};

/// `out = input / √(mean(input²) + eps) · weight` over the last dimension, in f32.
/// `out`: writable, `input`'s shape and dtype; it may be `input` itself (the identical view: in
/// place) but must not otherwise overlap `input`, nor overlap `weight`.
pub fn rmsnorm(
    input: &TensorView,
    weight: &TensorView,
    out: &mut TensorView,
    eps: f32,
    stream: Stream,
) -> Result<(), Error> {
    NormCall::rms(NormOp::RmsNorm, 0.0, input, weight, out, eps).run(stream)
}

/// Gemma's rmsnorm: as [`rmsnorm`] with `(1 + weight)`.
pub fn gemma_rmsnorm(
    input: &TensorView,
    weight: &TensorView,
    out: &mut TensorView,
    eps: f32,
    stream: Stream,
) -> Result<(), Error> {
    NormCall::rms(NormOp::RmsNorm, 1.0, input, weight, out, eps).run(stream)
}

/// `residual += input; input = rmsnorm(residual) · weight`, both in place, as FlashInfer does.
/// The norm is of the residual as stored (rounded to the dtype). `input` and `residual`: writable,
/// one shape and dtype, disjoint, and neither may overlap `weight`.
pub fn fused_add_rmsnorm(
    input: &mut TensorView,
    residual: &mut TensorView,
    weight: &TensorView,
    eps: f32,
    stream: Stream,
) -> Result<(), Error> {
    NormCall::fused(0.0, input, residual, weight, eps).run(stream)
}

/// Gemma's fused add + rmsnorm: as [`fused_add_rmsnorm`] with `(1 + weight)`.
pub fn gemma_fused_add_rmsnorm(
    input: &mut TensorView,
    residual: &mut TensorView,
    weight: &TensorView,
    eps: f32,
    stream: Stream,
) -> Result<(), Error> {
    NormCall::fused(1.0, input, residual, weight, eps).run(stream)
}

/// `out = (input − mean) / √(var + eps) · gamma + beta` over the last dimension, in f32 (biased
/// variance). `gamma` and `beta`: `[hidden]`, both of `input`'s dtype or both f32. `out` as in
/// [`rmsnorm`], also disjoint from `beta`.
pub fn layernorm(
    input: &TensorView,
    gamma: &TensorView,
    beta: &TensorView,
    out: &mut TensorView,
    eps: f32,
    stream: Stream,
) -> Result<(), Error> {
    let call = NormCall { bias: Some(("beta", beta)), ..NormCall::rms(NormOp::LayerNorm, 0.0, input, gamma, out, eps) };
    NormCall { weight: ("gamma", gamma), ..call }.run(stream)
}

/// The norm ops by name, for callers that pick one at run time (benchmarks, adapters, tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NormRoutine {
    RmsNorm,
    GemmaRmsNorm,
    FusedAddRmsNorm,
    GemmaFusedAddRmsNorm,
    LayerNorm,
}

impl NormRoutine {
    pub const ALL: [NormRoutine; 5] = [
        NormRoutine::RmsNorm,
        NormRoutine::GemmaRmsNorm,
        NormRoutine::FusedAddRmsNorm,
        NormRoutine::GemmaFusedAddRmsNorm,
        NormRoutine::LayerNorm,
    ];

    /// FlashInfer's name for it.
    pub fn name(self) -> &'static str {
        match self {
            NormRoutine::RmsNorm => "rmsnorm",
            NormRoutine::GemmaRmsNorm => "gemma_rmsnorm",
            NormRoutine::FusedAddRmsNorm => "fused_add_rmsnorm",
            NormRoutine::GemmaFusedAddRmsNorm => "gemma_fused_add_rmsnorm",
            NormRoutine::LayerNorm => "layernorm",
        }
    }

    /// Updates `input` and `residual` in place instead of writing `out`.
    pub fn is_fused(self) -> bool {
        matches!(self, NormRoutine::FusedAddRmsNorm | NormRoutine::GemmaFusedAddRmsNorm)
    }

    /// What is added to every weight (1 for Gemma's `1 + w`).
    pub fn weight_offset(self) -> f32 {
        match self {
            NormRoutine::GemmaRmsNorm | NormRoutine::GemmaFusedAddRmsNorm => 1.0,
            _ => 0.0,
        }
    }

    /// Runs the op: fused ops update `input` and `residual`; the others write `out`. Arguments an
    /// op does not take (`residual`, `bias`, or `out` for fused ops) are ignored.
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        self,
        input: &mut TensorView,
        residual: &mut TensorView,
        weight: &TensorView,
        bias: &TensorView,
        out: &mut TensorView,
        eps: f32,
        stream: Stream,
    ) -> Result<(), Error> {
        match self {
            NormRoutine::RmsNorm => rmsnorm(input, weight, out, eps, stream),
            NormRoutine::GemmaRmsNorm => gemma_rmsnorm(input, weight, out, eps, stream),
            NormRoutine::FusedAddRmsNorm => fused_add_rmsnorm(input, residual, weight, eps, stream),
            NormRoutine::GemmaFusedAddRmsNorm => gemma_fused_add_rmsnorm(input, residual, weight, eps, stream),
            NormRoutine::LayerNorm => layernorm(input, weight, bias, out, eps, stream),
        }
    }
}

/// The arguments of one norm call, named as the caller named them.
struct NormCall<'c, 'v> {
    op: NormOp,
    weight_offset: f32,
    input: &'c TensorView<'v>,
    residual: Option<&'c TensorView<'v>>,
    weight: (&'static str, &'c TensorView<'v>),
    bias: Option<(&'static str, &'c TensorView<'v>)>,
    /// Written: `out`, or for the fused op `input` itself.
    output: (&'static str, &'c TensorView<'v>),
    eps: f32,
}

impl<'c, 'v> NormCall<'c, 'v> {
    fn rms(
        op: NormOp,
        weight_offset: f32,
        input: &'c TensorView<'v>,
        weight: &'c TensorView<'v>,
        out: &'c TensorView<'v>,
        eps: f32,
    ) -> Self {
        NormCall {
            op,
            weight_offset,
            input,
            residual: None,
            weight: ("weight", weight),
            bias: None,
            output: ("out", out),
            eps,
        }
    }

    fn fused(
        weight_offset: f32,
        input: &'c TensorView<'v>,
        residual: &'c TensorView<'v>,
        weight: &'c TensorView<'v>,
        eps: f32,
    ) -> Self {
        let call = NormCall::rms(NormOp::FusedAddRmsNorm, weight_offset, input, weight, input, eps);
        NormCall { residual: Some(residual), output: ("input", input), ..call }
    }

    /// FlashInfer's name of the call (Gemma's variants are the rms ops with offset 1).
    fn name(&self) -> &'static str {
        match (self.op, self.weight_offset != 0.0) {
            (NormOp::RmsNorm, false) => "rmsnorm",
            (NormOp::RmsNorm, true) => "gemma_rmsnorm",
            (NormOp::FusedAddRmsNorm, false) => "fused_add_rmsnorm",
            (NormOp::FusedAddRmsNorm, true) => "gemma_fused_add_rmsnorm",
            (NormOp::LayerNorm, _) => "layernorm",
        }
    }

    fn run(self, stream: Stream) -> Result<(), Error> {
        logging::begin(self.name(), &self.tensors(), &[("eps", self.eps)]);
        let plan = self.plan(&stream)?;
        logging::input_statistics(&self.inputs(), &stream);
        self.launch(&plan, stream)?;
        logging::end(self.name(), &self.written());
        Ok(())
    }

    fn launch(&self, plan: &Plan, stream: Stream) -> Result<(), Error> {
        match stream {
            Stream::Cpu => {
                cpu::norm(self.op, plan.dtype, plan.weight_dtype, &plan.params);
                Ok(())
            }
            Stream::Cuda(stream) => {
                let module =
                    ModuleKey { family: "norm", variant: self.op as u32, dtype: plan.dtype, weight: plan.weight_dtype };
                let spec = |arch, debug| gen_norm_spec(self.op, plan.dtype, plan.weight_dtype, arch, debug);
                cuda::launch(stream, module, spec, |limits| {
                    plan.kernel(limits.multiprocessors, |chunks| limits.max_threads(plan.vec, chunks))
                })
            }
        }
    }

    /// Every check, in the order a caller would fix them; the kernel parameters if all pass.
    fn plan(&self, stream: &Stream) -> Result<Plan, Error> {
        if !self.eps.is_finite() || self.eps < 0.0 {
            return Err(Error::InvalidEps(self.eps));
        }
        let (device, dtype) = (self.input.device(), self.input.dtype());
        check_stream(stream, device)?;
        let weight_dtype = self.weight_dtype()?;
        for (argument, view) in self.tensors() {
            layout::check_device(argument, view, "input", device)?;
            layout::check_aligned(argument, view)?;
        }
        for (argument, view) in self.residual.map(|r| ("residual", r)).into_iter().chain([self.output]) {
            layout::check_dtype(argument, view, "input", dtype)?;
            layout::check_writable(argument, view)?;
        }
        let x = layout::row_layout("input", self.input)?;
        for (argument, view) in [Some(self.weight), self.bias].into_iter().flatten() {
            check_weight(argument, view, x.hidden)?;
        }
        let rows_of = |(argument, view): (&'static str, &TensorView)| -> Result<RowLayout, Error> {
            if view.shape() != self.input.shape() {
                let expected = format!("{:?} (the shape of `input`)", self.input.shape());
                return Err(Error::ShapeMismatch { argument, expected, found: view.shape().to_vec() });
            }
            layout::row_layout(argument, view)
        };
        let y = rows_of(self.output)?;
        let r = self.residual.map(|r| rows_of(("residual", r))).transpose()?;
        self.check_aliasing()?;
        if x.hidden > u32::MAX as u64 {
            return Err(Error::TooLarge {
                argument: "input",
                what: "the row length",
                value: x.hidden,
                limit: u32::MAX as u64,
            });
        }
        let row_strides = [Some(x.row_stride), Some(y.row_stride), r.map(|r| r.row_stride)];
        let vec = layout::vector_width(
            dtype,
            x.hidden,
            &row_strides.into_iter().flatten().collect::<Vec<_>>(),
            &self.addresses(),
        );
        Ok(Plan { params: self.params(x, y, r), dtype, weight_dtype, vec, chunks: chunks_override()? })
    }

    /// The weight dtype: the input's, or (layernorm) f32; β must match γ.
    fn weight_dtype(&self) -> Result<DType, Error> {
        let dtype = self.input.dtype();
        let (argument, weight) = self.weight;
        let allowed = self.op.weight_dtypes(dtype);
        if !allowed.contains(&weight.dtype()) {
            return Err(Error::DTypeMismatch { argument, reference: "input", expected: dtype, found: weight.dtype() });
        }
        if let Some((bias_name, bias)) = self.bias {
            layout::check_dtype(bias_name, bias, argument, weight.dtype())?;
        }
        Ok(weight.dtype())
    }

    /// The tensors the call reads (fused ops read their residual too).
    fn inputs(&self) -> Vec<(&'static str, &TensorView<'v>)> {
        let mut inputs = vec![("input", self.input), self.weight];
        inputs.extend(self.residual.map(|r| ("residual", r)));
        inputs.extend(self.bias);
        inputs
    }

    /// The tensors the call writes.
    fn written(&self) -> Vec<(&'static str, &TensorView<'v>)> {
        self.residual.map(|r| ("residual", r)).into_iter().chain([self.output]).collect()
    }

    /// Every tensor of the call, by argument name.
    fn tensors(&self) -> Vec<(&'static str, &TensorView<'v>)> {
        let mut tensors = vec![("input", self.input), self.weight, self.output];
        tensors.extend(self.residual.map(|r| ("residual", r)));
        tensors.extend(self.bias);
        tensors
    }

    /// Writes may not race with any other tensor's reads or writes; the only sharing allowed is
    /// an output that is exactly `input` (in place).
    fn check_aliasing(&self) -> Result<(), Error> {
        let written: Vec<(&str, &TensorView)> =
            self.residual.map(|r| ("residual", r)).into_iter().chain([self.output]).collect();
        for (argument, view) in written {
            for (other, other_view) in self.tensors() {
                let same_tensor = std::ptr::eq(view, other_view);
                let in_place = other == "input" && layout::same_view(view, other_view) && self.residual.is_none();
                if !same_tensor && !in_place && other != argument && layout::overlaps(view, other_view) {
                    return Err(Error::Overlap { argument, other });
                }
            }
        }
        Ok(())
    }

    /// Addresses in units of their own element size, for the vector width.
    fn addresses(&self) -> Vec<u64> {
        let dtype_size = self.input.dtype().size() as u64;
        self.tensors()
            .into_iter()
            .map(|(_, view)| {
                // In elements of the input's dtype: f32 weights need twice the byte alignment.
                let scale = view.dtype().size() as u64 / dtype_size;
                view.address() / scale.max(1)
            })
            .collect()
    }

    fn params(&self, x: RowLayout, y: RowLayout, r: Option<RowLayout>) -> NormParams {
        NormParams {
            input: self.input.address(),
            residual: self.residual.map_or(0, |r| r.address()),
            weight: self.weight.1.address(),
            bias: self.bias.map_or(0, |(_, b)| b.address()),
            output: self.output.1.address(),
            rows: x.rows,
            input_row_stride: x.row_stride,
            residual_row_stride: r.map_or(0, |r| r.row_stride),
            output_row_stride: y.row_stride,
            hidden: x.hidden as u32,
            eps: self.eps,
            weight_offset: self.weight_offset,
            warps_per_row: 1,
        }
    }
}

fn check_stream(stream: &Stream, device: Device) -> Result<(), Error> {
    match stream.device() {
        found if found == device => Ok(()),
        found => Err(Error::DeviceMismatch { argument: "stream", reference: "input", expected: device, found }),
    }
}

fn check_weight(argument: &'static str, weight: &TensorView, hidden: u64) -> Result<(), Error> {
    let w = layout::row_layout(argument, weight)?;
    if weight.shape() != [hidden as i64] || w.rows != 1 {
        let expected = format!("[{hidden}] (the last dimension of `input`)");
        return Err(Error::ShapeMismatch { argument, expected, found: weight.shape().to_vec() });
    }
    Ok(())
}

/// A validated call: kernel parameters, dtypes and vector width.
struct Plan {
    params: NormParams,
    dtype: DType,
    weight_dtype: DType,
    vec: u32,
    /// `FERRINFER_NORM_CHUNKS`, if set.
    chunks: Option<u64>,
}

/// `FERRINFER_NORM_CHUNKS`: register chunks per thread for every register-kernel launch in place
/// of the planner's choice (raised where a row would need more than 32 warps, or a block more
/// registers than the kernel has) — a knob for tuning sweeps with the benchmark, read once.
fn chunks_override() -> Result<Option<u64>, Error> {
    static CHUNKS: OnceLock<Result<Option<u64>, String>> = OnceLock::new();
    let parsed = CHUNKS.get_or_init(|| match std::env::var("FERRINFER_NORM_CHUNKS") {
        Err(_) => Ok(None),
        Ok(value) => value
            .parse::<u32>()
            .ok()
            .filter(|c| CHUNK_COUNTS.contains(c))
            .map(|c| Some(c as u64))
            .ok_or_else(|| format!("FERRINFER_NORM_CHUNKS is `{value}`; expected one of {CHUNK_COUNTS:?}")),
    });
    parsed.clone().map_err(Error::Config)
}

/// Most register chunks a kernel has (see `ferrinfer_jit::norm::CHUNK_COUNTS`).
const MAX_CHUNKS: u64 = CHUNK_COUNTS[CHUNK_COUNTS.len() - 1] as u64;
/// Most register chunks the planner picks while a row fits 32 warps with them (see `kernel`).
const PREFERRED_MAX_CHUNKS: u64 = 8;
/// Warps worth keeping busy per multiprocessor before spreading rows over more warps stops paying.
const WARPS_PER_SM: u64 = 16;
/// Most threads per block.
const MAX_BLOCK: u64 = 1024;

impl Plan {
    /// The launch for a device with `sms` multiprocessors, given the most threads per block of
    /// each register kernel (by chunk count; registers limit it). Rows that fit in registers use
    /// the register kernel: as few warps per row as large batches need (one pass over memory,
    /// many rows in flight), as many as small batches can use (a shorter serial path per thread);
    /// two single-warp rows per 64-thread block. Longer rows — or more rows than one launch's
    /// grid holds — stream, a block per row.
    fn kernel(&self, sms: u32, max_threads: impl Fn(u32) -> u32) -> KernelLaunch<NormParams> {
        let (rows, vectors) = (self.params.rows, self.params.hidden as u64 / self.vec as u64);
        let max_warps = MAX_BLOCK / 32;
        // At most 8 chunks where a row fits 32 warps that way: at 16 (a warp per 4096-wide bf16
        // row) rmsnorm ran 5-11% slower at T >= 16384 on the H200 (docs/perf/norm.md, v3 sweep).
        let fits_preferred = vectors.div_ceil(32 * PREFERRED_MAX_CHUNKS) <= max_warps;
        let fewest = vectors.div_ceil(32 * if fits_preferred { PREFERRED_MAX_CHUNKS } else { MAX_CHUNKS });
        if fewest > max_warps {
            return self.streaming(sms, max_threads(0));
        }
        let wanted = (sms as u64 * WARPS_PER_SM).div_ceil(rows);
        let warps = wanted.clamp(fewest, vectors.div_ceil(32).min(max_warps)).max(1);
        let natural = vectors.div_ceil(32 * warps).next_power_of_two();
        let mut chunks = self.chunks.map_or(natural, |c| c.max(vectors.div_ceil(32 * max_warps).next_power_of_two()));
        // Fewer, fuller threads until a block fits the kernel's registers.
        while chunks <= MAX_CHUNKS && vectors.div_ceil(32 * chunks) * 32 > max_threads(chunks as u32) as u64 {
            chunks *= 2;
        }
        let warps = vectors.div_ceil(32 * chunks);
        let rows_per_block = if warps == 1 { 2 } else { 1 };
        let grid = rows.div_ceil(rows_per_block);
        if chunks > MAX_CHUNKS || grid > i32::MAX as u64 {
            return self.streaming(sms, max_threads(0));
        }
        self.launch(chunks as u32, warps as u32, grid, (rows_per_block * warps * 32) as u32)
    }

    /// A block per row, at most as many blocks as the device holds at once (they stride over rows).
    fn streaming(&self, sms: u32, max_threads: u32) -> KernelLaunch<NormParams> {
        let vectors = self.params.hidden as u64 / self.vec as u64;
        let most = MAX_BLOCK.min(max_threads as u64 / 32 * 32).max(32);
        let block = (vectors.div_ceil(32) * 32).clamp(32, most) as u32;
        let resident = sms as u64 * (2048 / block as u64).clamp(1, 32);
        self.launch(0, 1, self.params.rows.min(resident), block)
    }

    fn launch(&self, chunks: u32, warps_per_row: u32, grid: u64, block: u32) -> KernelLaunch<NormParams> {
        let params = NormParams { warps_per_row, ..self.params };
        KernelLaunch { vec: self.vec, chunks, params, grid: grid as u32, block }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(rows: u64, hidden: u32, vec: u32) -> Plan {
        plan_with(rows, hidden, vec, None)
    }

    fn plan_with(rows: u64, hidden: u32, vec: u32, chunks: Option<u64>) -> Plan {
        let params = NormParams {
            input: 0,
            residual: 0,
            weight: 0,
            bias: 0,
            output: 0,
            rows,
            input_row_stride: hidden as u64,
            residual_row_stride: 0,
            output_row_stride: hidden as u64,
            hidden,
            eps: 1e-6,
            weight_offset: 0.0,
            warps_per_row: 1,
        };
        Plan { params, dtype: DType::Bf16, weight_dtype: DType::Bf16, vec, chunks }
    }

    /// The H200's limits for the bf16 rmsnorm module as ptxas built it (177 registers at 16
    /// chunks → 320 threads per block; the others allow 512 or 1024).
    fn h200_max_threads(chunks: u32) -> u32 {
        match chunks {
            16 => 320,
            8 => 512,
            _ => 1024,
        }
    }

    /// (chunks, warps per row, grid, block) on an H200 (132 SMs).
    fn shape(rows: u64, hidden: u32, vec: u32) -> (u32, u32, u32, u32) {
        let k = plan(rows, hidden, vec).kernel(132, h200_max_threads);
        (k.chunks, k.params.warps_per_row, k.grid, k.block)
    }

    #[test]
    fn norm_launch_shapes_cover_small_and_large_batches() {
        assert_eq!(shape(65536, 4096, 8), (8, 2, 65536, 64), "large T: few warps per row, 8 chunks");
        assert_eq!(shape(65536, 8192, 8), (8, 4, 65536, 128));
        assert_eq!(shape(65536, 32768, 8), (8, 16, 65536, 512), "the widest rows 8 chunks hold in a block");
        assert_eq!(shape(1, 4096, 8), (1, 16, 1, 512), "T = 1: a vector per thread");
        assert_eq!(shape(4096, 1024, 8), (4, 1, 2048, 64), "enough rows to fill the GPU with one warp each");
        assert_eq!(shape(65536, 256, 8), (1, 1, 32768, 64), "single-warp rows, two per block");
        assert_eq!(shape(7, 111, 1), (1, 4, 7, 128));
    }

    #[test]
    fn norm_chunk_override_is_followed_where_the_row_fits() {
        let forced = |rows, hidden, c| {
            let k = plan_with(rows, hidden, 8, Some(c)).kernel(132, h200_max_threads);
            (k.chunks, k.params.warps_per_row)
        };
        assert_eq!(forced(65536, 4096, 1), (1, 16));
        assert_eq!(forced(65536, 4096, 4), (4, 4));
        assert_eq!(forced(1, 4096, 16), (16, 1));
        assert_eq!(forced(65536, 16384, 1), (2, 32), "2048 vectors need 2 chunks in a 32-warp block");
    }

    #[test]
    fn norm_every_register_launch_covers_its_row_within_limits() {
        let overrides = [None, Some(1), Some(2), Some(4), Some(8), Some(16)];
        for hidden in [1u32, 3, 111, 500, 1004, 4096, 8192, 16384, 65536, 131072] {
            for (rows, chunks) in [1u64, 19, 989, 65536].into_iter().flat_map(|r| overrides.map(|c| (r, c))) {
                for vec in [1u32, 2, 4, 8].into_iter().filter(|v| hidden.is_multiple_of(*v)) {
                    let k = plan_with(rows, hidden, vec, chunks).kernel(132, h200_max_threads);
                    assert!(
                        k.block.is_multiple_of(32) && k.block <= 1024 && k.grid >= 1,
                        "{hidden} {rows} {vec}: {}",
                        k.block
                    );
                    assert!(k.block <= h200_max_threads(k.chunks), "{hidden} {rows} {vec}: registers");
                    if k.chunks > 0 {
                        let covered = k.chunks as u64 * 32 * k.params.warps_per_row as u64 * vec as u64;
                        assert!(covered >= hidden as u64 && CHUNK_COUNTS.contains(&k.chunks), "{hidden} {rows} {vec}");
                        let rows_per_block = k.block / 32 / k.params.warps_per_row;
                        assert!(k.params.warps_per_row == 1 || rows_per_block == 1, "barriers need one row per block");
                        assert!(k.grid as u64 * rows_per_block as u64 >= rows.min(i32::MAX as u64));
                    }
                }
            }
        }
    }
}
