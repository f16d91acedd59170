//! The norm family at layers 1 and 4: the op table, validation, the launch planner, the CPU path
//! and the f64 references. Each op validates its arguments, then runs on the CPU backend or
//! launches a kernel of `ferrinfer-kernels/src/norm.rs` on the caller's stream.
//!
//! Common rules, checked before anything is written (so on error no output is touched):
//! - `input`: f16, bf16 or f32, any rank ≥ 1 (e.g. tokens × heads × head_dim for QK-norm), the
//!   last dimension contiguous, leading dimensions collapsible into rows whose stride is ≥ the
//!   row length (rows of a larger buffer are fine); no rows (or empty rows) is a no-op;
//! - `weight` (and layernorm's `beta`): one contiguous row `[hidden]`, of `input`'s dtype
//!   (layernorm also accepts f32 `gamma`/`beta` with f16/bf16 input);
//! - `eps`: finite, ≥ 0; `stream`: [`Stream::Cpu`] for host tensors or the CUDA stream to launch
//!   on (ferrinfer never picks one) for tensors on its device;
//! - addresses need only element alignment: the vector width narrows (to 1) until every address
//!   and row stride allows it; rows left with 2-byte vectors (the fused ops: up to 4 bytes), at
//!   least 32 16-byte vectors long and many, are read in 16-byte vectors past a per-row head where
//!   every row tensor is aligned alike (the peeled kernels).

use ferrinfer_jit::norm::{CHUNK_COUNTS, NormKernel, NormModule, PEELED_CHUNK_COUNTS, STAGED_CHUNK_COUNTS};
use ferrinfer_jit::{CudaArch, JitSpec};
use ferrinfer_kernels::element::DType;
use ferrinfer_kernels::norm::{
    FusedAddRms, GemmaFusedAddRms, GemmaRms, Layer, NARROW_VECTOR_BYTES, NormKind, NormParams, Rms, norm_row,
};
use ferrinfer_kernels::{MAX_STAGING_STAGES, STAGING_HEADER_BYTES};

use crate::cuda::{self, KernelModule, Launch, Limits, MAX_BLOCK, ModuleCache};
use crate::layout::{self, RowLayout};
use crate::op::{Call, FamilyOp, Problem};
use crate::{Error, Stream, TensorView, cpu, logging, tuning};

crate::op_table! { $
    /// The norm family's ops, one line each (grammar: [`define_ops!`](crate::define_ops)):
    /// FlashInfer's name, the input tensors with their role and shape (`/ alias`: FlashInfer's Python
    /// name), the outputs, the scalars with their defaults, the kernel and the f64 reference.
    norm_ops, family norm;
    /// `out = input / √(mean(input²) + eps) · weight` over the last dimension, in f32.
    /// `out`: writable, `input`'s shape and dtype; it may be `input` itself (the identical
    /// view: in place) but must not otherwise overlap `input`, nor overlap `weight`.
    fn rmsnorm(input: In[Rows], weight: In[Row]) -> out: Out[Rows]; eps: f32 = 1e-6
        => NormKernel::Rms, reference rmsnorm_reference;
    /// Gemma's rmsnorm: as `rmsnorm` with `(1 + weight)`.
    fn gemma_rmsnorm(input: In[Rows], weight: In[Row]) -> out: Out[Rows]; eps: f32 = 1e-6
        => NormKernel::GemmaRms, reference gemma_rmsnorm_reference;
    /// `residual += input; input = rmsnorm(residual) · weight`, both in place, as FlashInfer
    /// does. The norm is of the residual as stored (rounded to the dtype). `input` and
    /// `residual`: writable, one shape and dtype, disjoint, and neither may overlap `weight`.
    fn fused_add_rmsnorm(input: InOut[Rows], residual: InOut[Rows], weight: In[Row]); eps: f32 = 1e-6
        => NormKernel::FusedAddRms, reference fused_add_rmsnorm_reference;
    /// Gemma's fused add + rmsnorm: as `fused_add_rmsnorm` with `(1 + weight)`.
    fn gemma_fused_add_rmsnorm(input: InOut[Rows], residual: InOut[Rows], weight: In[Row]); eps: f32 = 1e-6
        => NormKernel::GemmaFusedAddRms, reference gemma_fused_add_rmsnorm_reference;
    /// `out = (input − mean) / √(var + eps) · gamma + beta` over the last dimension, in f32
    /// (biased variance). `gamma` and `beta`: `[hidden]`, both of `input`'s dtype or both
    /// f32. `out` as in `rmsnorm`, also disjoint from `beta`.
    fn layernorm(input: In[Rows], gamma / gemma: In[Row | f32], beta: In[Row | f32]) -> out: Out[Rows]; eps: f32 = 1e-6
        => NormKernel::Layer, reference layernorm_reference;
}

impl FamilyOp for NormKernel {
    fn run(&self, call: &Call) -> Result<(), Error> {
        let eps: f32 = call.scalar("eps")?;
        let norm = match self {
            NormKernel::Rms | NormKernel::GemmaRms => {
                let [input, weight, out] = call.tensors()?;
                NormCall::new(*self, input, weight, ("out", out), eps)
            }
            NormKernel::FusedAddRms | NormKernel::GemmaFusedAddRms => {
                let [input, residual, weight] = call.tensors()?;
                NormCall { residual: Some(residual), ..NormCall::new(*self, input, weight, ("input", input), eps) }
            }
            NormKernel::Layer => {
                let [input, gamma, beta, out] = call.tensors()?;
                let norm = NormCall::new(*self, input, gamma, ("out", out), eps);
                NormCall { weight: ("gamma", gamma), bias: Some(("beta", beta)), ..norm }
            }
        };
        let Some(mut plan) = norm.plan(&call.stream)? else { return Ok(()) };
        // A bad tuning override fails every call, CPU ones too, rather than being ignored.
        let forced = layout_override()?;
        plan.peel &= forced.peel != Some(false);
        logging::input_statistics(call);
        match call.stream {
            Stream::Cpu => {
                cpu_rows(*self, plan.dtype, plan.weight_dtype, &plan.params);
                Ok(())
            }
            Stream::Cuda(stream) => {
                static MODULES: ModuleCache<NormModule> = ModuleCache::new();
                let module = NormModule { kernel: *self, dtype: plan.dtype, weight: plan.weight_dtype, vec: plan.vec };
                cuda::launch(stream, &MODULES, module, |limits| Ok(plan.kernel(limits, forced)))
            }
        }
    }
}

impl KernelModule for NormModule {
    fn spec(&self, arch: CudaArch, debug: bool) -> JitSpec {
        NormModule::spec(self, arch, debug)
    }
}

/// The arguments of one norm call, named as the caller named them.
struct NormCall<'c, 'v> {
    kernel: NormKernel,
    input: &'c TensorView<'v>,
    residual: Option<&'c TensorView<'v>>,
    weight: (&'static str, &'c TensorView<'v>),
    bias: Option<(&'static str, &'c TensorView<'v>)>,
    /// Written: `out`, or for the fused ops `input` itself.
    output: (&'static str, &'c TensorView<'v>),
    eps: f32,
}

impl<'c, 'v> NormCall<'c, 'v> {
    fn new(
        kernel: NormKernel,
        input: &'c TensorView<'v>,
        weight: &'c TensorView<'v>,
        output: (&'static str, &'c TensorView<'v>),
        eps: f32,
    ) -> Self {
        NormCall { kernel, input, residual: None, weight: ("weight", weight), bias: None, output, eps }
    }

    /// Every check, in the order a caller would fix them; the kernel parameters if all pass, or
    /// `None` when there is nothing to compute (no rows, or empty rows).
    fn plan(&self, stream: &Stream) -> Result<Option<Plan>, Error> {
        if !self.eps.is_finite() || self.eps < 0.0 {
            return Err(Error::invalid_scalar("eps", self.eps, "a finite number ≥ 0"));
        }
        let dtype = self.input.dtype();
        layout::check_placement(stream, self.tensors())?;
        let weight_dtype = self.weight_dtype()?;
        for (argument, view) in self.written() {
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
        if x.hidden == 0 {
            // No rows is an empty batch; rows of nothing have no norm (as FlashInfer).
            let expected = "a last dimension (the hidden size) of at least 1".into();
            return Err(Error::ShapeMismatch { argument: "input", expected, found: self.input.shape().to_vec() });
        }
        if x.rows == 0 {
            return Ok(None);
        }
        let row_strides = [Some(x.row_stride), Some(y.row_stride), r.map(|r| r.row_stride)];
        let vec = layout::vector_width(
            dtype,
            x.hidden,
            &row_strides.into_iter().flatten().collect::<Vec<_>>(),
            &self.addresses(),
        );
        let module = NormModule { kernel: self.kernel, dtype, weight: weight_dtype, vec };
        let peel = module.has_peeled()
            && x.hidden >= PEELED_MIN_VECTORS as u64 * module.peeled_vec() as u64
            && self.rows_aligned_alike([Some(x), Some(y), r]);
        Ok(Some(Plan { params: self.params(x, y, r), dtype, weight_dtype, vec, peel }))
    }

    /// Whether every row of every row tensor (`input`, `out`, `residual`: their layouts in that
    /// order) starts at the same offset from a 16-byte boundary, as the peeled kernels need.
    fn rows_aligned_alike(&self, layouts: [Option<RowLayout>; 3]) -> bool {
        let size = self.input.dtype().size() as u64;
        let views = [Some(self.input), Some(self.output.1), self.residual];
        let mut phases = views.into_iter().zip(layouts).filter_map(|(view, layout)| {
            let (view, layout) = (view?, layout?);
            Some((view.address() % 16, layout.row_stride * size % 16))
        });
        // Compared with the first rather than collected: this runs on every call's host path.
        let first = phases.next();
        phases.all(|phase| Some(phase) == first)
    }

    /// The weight dtype: the input's, or (layernorm) f32; β must match γ.
    fn weight_dtype(&self) -> Result<DType, Error> {
        let dtype = self.input.dtype();
        let (argument, weight) = self.weight;
        let allowed = self.kernel.weight_dtypes(dtype);
        if !allowed.contains(&weight.dtype()) {
            return Err(Error::DTypeMismatch { argument, reference: "input", expected: dtype, found: weight.dtype() });
        }
        if let Some((bias_name, bias)) = self.bias {
            layout::check_dtype(bias_name, bias, argument, weight.dtype())?;
        }
        Ok(weight.dtype())
    }

    /// The tensors the call writes.
    fn written(&self) -> impl Iterator<Item = (&'static str, &TensorView<'v>)> {
        self.residual.map(|r| ("residual", r)).into_iter().chain([self.output])
    }

    /// Every tensor of the call, by argument name.
    fn tensors(&self) -> impl Iterator<Item = (&'static str, &TensorView<'v>)> + Clone {
        [("input", self.input), self.weight, self.output]
            .into_iter()
            .chain(self.residual.map(|r| ("residual", r)))
            .chain(self.bias)
    }

    /// Writes may not race with any other tensor's reads or writes; the only sharing allowed is
    /// an output that is exactly `input` (in place).
    fn check_aliasing(&self) -> Result<(), Error> {
        for (argument, view) in self.written() {
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

    /// Addresses in units of the input's element size, for the vector width.
    fn addresses(&self) -> Vec<u64> {
        let dtype_size = self.input.dtype().size() as u64;
        self.tensors()
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
            threads_per_row: 1,
            stages: 0,
        }
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

/// The CPU backend: the kernels crate's host numerics (`norm_row`), rows split across cores.
fn cpu_rows(kernel: NormKernel, dtype: DType, weight: DType, params: &NormParams) {
    fn rows<K: NormKind, T: ferrinfer_kernels::element::Element, W: ferrinfer_kernels::element::Element>(
        params: &NormParams,
    ) {
        cpu::for_rows(params.rows, params.hidden as u64, |rows| {
            for row in rows {
                // SAFETY: the launcher validated every pointer, stride and overlap in `params`.
                unsafe { norm_row::<K, T, W>(params, row) }
            }
        });
    }
    ferrinfer_kernels::with_element!(dtype, T => ferrinfer_kernels::with_element!(weight, W => match kernel {
        NormKernel::Rms => rows::<Rms, T, W>(params),
        NormKernel::GemmaRms => rows::<GemmaRms, T, W>(params),
        NormKernel::FusedAddRms => rows::<FusedAddRms, T, W>(params),
        NormKernel::GemmaFusedAddRms => rows::<GemmaFusedAddRms, T, W>(params),
        NormKernel::Layer => rows::<Layer, T, W>(params),
    }))
}

/// A validated call: kernel parameters, dtypes and vector width (the module's), and whether the
/// rows may be peeled (read in 16-byte vectors past a per-row head: [`Plan::row_vec`]).
#[derive(Clone, Copy)]
struct Plan {
    params: NormParams,
    dtype: DType,
    weight_dtype: DType,
    vec: u32,
    peel: bool,
}

/// How a register kernel's launch spreads rows: vectors per thread, threads per row, rows per
/// block, rows each row group works through, and whether it loads its next row during the current
/// one's reduction (pipelined).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    chunks: u32,
    threads_per_row: u32,
    rows_per_block: u32,
    rows_per_group: u64,
    pipelined: bool,
    /// At least one wave of groups: bandwidth-bound.
    many_rows: bool,
}

/// What the planner needs to know of the kernels on a device: the most threads a block of each
/// can have (registers permitting; 0 where the module lacks it), how many blocks of a size fit on
/// a multiprocessor, and the most dynamic shared memory a block may have.
trait RegisterKernels {
    fn max_threads(&self, chunks: u32, pipelined: bool, peeled: bool) -> u32;
    fn resident_blocks(&self, chunks: u32, pipelined: bool, peeled: bool, block: u32) -> u32;
    fn staged_max_threads(&self, chunks: u32) -> u32;
    fn staged_resident_blocks(&self, chunks: u32, block: u32, shared_bytes: u32) -> u32;
    fn stream_max_threads(&self) -> u32;
    fn stream_resident_blocks(&self, block: u32) -> u32;
    fn max_shared_bytes(&self) -> u32;
}

impl RegisterKernels for Limits<'_> {
    fn max_threads(&self, chunks: u32, pipelined: bool, peeled: bool) -> u32 {
        register_entry(chunks, pipelined, peeled).map_or(0, |e| Limits::max_threads(self, e))
    }

    fn resident_blocks(&self, chunks: u32, pipelined: bool, peeled: bool, block: u32) -> u32 {
        register_entry(chunks, pipelined, peeled).map_or(1, |e| Limits::resident_blocks(self, e, block, 0))
    }

    fn staged_max_threads(&self, chunks: u32) -> u32 {
        NormModule::staged_entry(chunks).map_or(0, |e| Limits::max_threads(self, e))
    }

    fn staged_resident_blocks(&self, chunks: u32, block: u32, shared_bytes: u32) -> u32 {
        NormModule::staged_entry(chunks).map_or(1, |e| Limits::resident_blocks(self, e, block, shared_bytes))
    }

    fn stream_max_threads(&self) -> u32 {
        Limits::max_threads(self, NormModule::STREAM_ENTRY)
    }

    fn stream_resident_blocks(&self, block: u32) -> u32 {
        Limits::resident_blocks(self, NormModule::STREAM_ENTRY, block, 0)
    }

    fn max_shared_bytes(&self) -> u32 {
        self.max_shared_bytes
    }
}

/// The staged kernel's launch: vectors per thread, threads per row (the block), rows staged
/// ahead, dynamic shared memory and the grid (each block takes every `grid`-th row).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Staged {
    chunks: u32,
    threads: u32,
    stages: u32,
    shared_bytes: u32,
    grid: u32,
}

/// The entry index of the register kernel (peeled or not) holding `chunks` vectors a thread.
fn register_entry(chunks: u32, pipelined: bool, peeled: bool) -> Option<usize> {
    if peeled { NormModule::peeled_entry(chunks, pipelined) } else { NormModule::register_entry(chunks, pipelined) }
}

/// Fewest 16-byte vectors of a row for the peeled kernels to take it (a guess, not measured:
/// below, a row is a few vectors beside a head and a tail read an element a lane).
const PEELED_MIN_VECTORS: u32 = 32;
/// Most blocks a peeled launch adds so that each row group's rows lie a multiple of a vector
/// apart ([`Plan::register_launch`]).
const PEELED_MAX_EXTRA_BLOCKS: u64 = 16;

/// Rows a staged block has in flight by default (H200 sweep, docs/perf/norm.md v5: 2 beat 4 at
/// every mid-size point).
const STAGES: u32 = 2;
/// Vectors per thread of the staged kernel by default.
const STAGED_CHUNKS: u32 = 4;
/// Rows a call reads that the H200's L2 (50 MB) still largely serves across back-to-back calls;
/// past it, rows stream from DRAM.
const STAGED_MAX_CACHED_READ_BYTES: u64 = 64 << 20;
/// Rows each staged block works through (H200 sweep, docs/perf/norm.md v6). Rows streamed from
/// DRAM: 2 — both copies leave at the block's start, and a finished block's successor starts
/// its own at once (rmsnorm 65536 × 4096: 257.5 µs; 4 rows 261.3, a persistent grid 280.3, the
/// register kernels 271.8). Fewer rows: one wave of blocks, 2 to 4 rows each (rmsnorm 4096 ×
/// 4096: 4 rows 17.6 µs, 2 rows 17.8; fused 1024 × 8192: 4 rows 10.3, 2 rows 12.5, which is
/// two waves). The staged kernel takes fewer rows only when they outnumber its blocks at once
/// (with a row a block nothing overlaps a row's copy), and the fused ops' DRAM-streamed rows
/// stay with the register kernels (fused 65536 × 8192: 1050 µs against 1067 staged). layernorm
/// follows rmsnorm's rule; it was not swept separately.
const STAGED_ROWS_PER_BLOCK: u64 = 2;
/// Most rows a staged block works through when the rows make about one wave (see above).
const STAGED_MAX_ROWS_PER_BLOCK: u64 = 4;
/// Fewest bytes of a row (of the input) for the staged kernel to take it unasked: a shorter row
/// leaves its block too little to overlap with the row's copy and barrier (H200, bf16, 2 KB rows:
/// rmsnorm 4096 × 1024 staged 4.95 µs, the register kernels 3.64–3.75; fused 16384 × 1024
/// staged 38.3, registers 33.1; docs/perf/norm.md v9).
const STAGED_MIN_ROW_BYTES: u32 = 4096;
/// Most bytes of a row for the staged kernel to take it unasked: longer rmsnorm rows run 7–13 %
/// faster on 8 register chunks a thread, one row a group (H200, bf16: 4096 × 12288 54.9 µs
/// against 62.6 staged, 16384 × 16384 267.6 against 287.3; at 8192 staged wins, 35.5 against
/// 35.6; docs/perf/norm.md v10). The fused ops' long rows are on registers already.
const STAGED_MAX_ROW_BYTES: u32 = 16384;

/// Bytes of its row each rmsnorm/layernorm thread holds when rows are many (bandwidth-bound);
/// measured best on the H200 (docs/perf/norm.md, v4 sweep): 4 vectors of 16 bytes, pipelined.
const LARGE_BATCH_BYTES_PER_THREAD: u32 = 64;
/// Vectors of each tensor a fused thread holds when rows are many, unpipelined (H200 sweep,
/// docs/perf/norm.md v9: 4 matched or beat 8 from 1024 to 65536 rows of 1024–8192, e.g. fused
/// 16384 × 4096 bf16 126.1 µs against 128.0, 65536 × 8192 992.8 against 1000.5)…
const FUSED_CHUNKS: u32 = 4;
/// …unless a row of 16-byte vectors would need more threads than this at 4 (12288: 8 chunks,
/// 96.9 µs at 4096 rows; 4 chunks, 384 threads, over 101). Rows of 8-byte vectors keep 4
/// (4096 × 4100 bf16: 4 chunks, 288 threads, 37.3 µs; 8 chunks 40.1; docs/perf/norm.md v10).
/// rmsnorm's rows too long for the staged kernel take the same rule (see
/// [`STAGED_MAX_ROW_BYTES`]).
const FUSED_MAX_THREADS_PER_ROW: u32 = 256;
/// Narrow vectors ([`NARROW_VECTOR_BYTES`]) leave a fused thread too few bytes in flight
/// unpipelined: such rows are pipelined, 4 chunks (H200, fused 4096 × 4095 bf16, 2-byte vectors:
/// 90.7 µs unpipelined, 71.6 pipelined two rows a group, 59.9 four rows; 8-byte vectors gain
/// nothing: docs/perf/norm.md v9), each group working through rows totalling this many bytes of a
/// vector (2-byte vectors: 4
/// rows, 59.9 µs at 4096 × 4095; 4-byte: 2 rows, 40.7 µs at 4096 × 4094, 4 rows 43.5). rmsnorm's
/// (and layernorm's) pipelined groups of rows that deep take the same rows (rmsnorm 4096 × 4095
/// bf16, 8 chunks: 4 rows 25.8 µs, 2 rows 29.8; docs/perf/norm.md v11).
const NARROW_GROUP_VECTOR_BYTES: u32 = 8;
/// Most threads per row when rows are few (latency-bound: more threads load a row sooner, but a
/// longer reduction follows).
const SMALL_BATCH_THREADS_PER_ROW: u32 = 256;
/// Threads per block the planner aims for when rows are narrower than that.
const BLOCK_THREADS: u32 = 256;
/// Bytes a row group's chunk should span at least (a cache line), so a warp's loads of narrow
/// rows are not broken into partial lines.
const LINE_BYTES: u32 = 128;
/// Rows each group works through when rows are many waves' worth: enough for a pipelined group
/// to overlap one row's loads with another's reduction, few enough that the grid stays many
/// blocks (balanced tails).
const LARGE_BATCH_ROWS_PER_GROUP: u64 = 2;
/// Most rows per group when the rows fit a few waves: the grid is then one wave of groups.
const MAX_ROWS_PER_GROUP: u64 = 4;

tuning::layout_override! {
    /// `FERRINFER_NORM_LAYOUT=chunks:threads_per_row:rows_per_group:stages` (each field a number or
    /// `*` for the planner's choice): forces the layout wherever it fits — a knob for tuning sweeps
    /// with the benchmark, read once. `stages` 0 keeps to the register kernels; 1–16 takes the staged
    /// kernel (sm_90, 16-byte vectors) with that many rows in flight per block, whatever the batch;
    /// there `rows_per_group` is the rows each block works through (default: the planner's 2 to 4).
    /// `chunks` 0 takes the streaming kernel (a statistics pass over each row, two for layernorm,
    /// then an output pass): `threads_per_row` threads a block (≥ 32; default: the planner's),
    /// `rows_per_group` rows a block (default: as many blocks as the device holds at once, striding
    /// over the rows); no `stages`. A fifth field, `peel`: 0 keeps rows of narrow vectors off the
    /// peeled kernels, 1 peels them whatever the batch where the planner may peel them at all (the
    /// module has peeled kernels, the rows are long enough and every row tensor aligned alike; `*`:
    /// where rows are many).
    /// A value that names no kernel makes every norm call a configuration error naming the variable.
    pub const LAYOUT_VAR: &str = "FERRINFER_NORM_LAYOUT";
    struct LayoutOverride {
        chunks: u32 if |c| c == 0 || CHUNK_COUNTS.contains(&c),
        threads_per_row: u32 if |t| t <= MAX_BLOCK && group_threads(t) == t,
        rows_per_group: u64 if |rows| rows != 0,
        stages: u32 if |s| s <= MAX_STAGING_STAGES,
        peel: Flag,
    }
    // The streaming kernel's block is its row group: a warp at least; it stages nothing.
    if |layout| layout.chunks != Some(0) || (layout.threads_per_row.is_none_or(|t| t >= 32) && layout.stages.is_none());
    expected = format!(
        "chunks:threads_per_row:rows_per_group:stages[:peel], each a number or *, chunks one of {CHUNK_COUNTS:?} or 0 (the streaming kernel: threads ≥ 32, no stages), threads a power of two below 32 or a multiple of 32 ≤ 1024, stages ≤ {MAX_STAGING_STAGES}, peel 0 or 1"
    );
}

/// Threads a row group needs to hold `threads` threads' worth of a row: a power of two below a
/// warp (narrow groups share their warp), else whole warps — the kernels' groups take any number
/// (rounded up to a power of two, a 5120-wide bf16 row's 640 vectors in 4 chunks took 256
/// threads where 160 hold them: docs/perf/norm.md v9).
fn group_threads(threads: u32) -> u32 {
    if threads <= 32 { threads.next_power_of_two() } else { threads.next_multiple_of(32) }
}

impl Plan {
    /// The launch within `limits`: the staged kernel where rows are many and it holds them, else
    /// a register kernel where a row fits in at most 1024 threads of at most 8 vectors each
    /// (registers permitting), else the streaming kernel.
    fn kernel(&self, limits: &Limits, forced: LayoutOverride) -> Launch<NormParams> {
        if forced.chunks == Some(0) {
            return self.streaming(limits.multiprocessors, forced, limits);
        }
        if let Some(staged) = self.staged(limits.multiprocessors, forced, limits) {
            return self.staged_launch(staged);
        }
        match self.register_layout(limits.multiprocessors, forced, limits) {
            Some((plan, layout)) => plan.register_launch(layout),
            None => self.streaming(limits.multiprocessors, forced, limits),
        }
    }

    /// The register layout, and the plan it is for: peeled where rows are many (bandwidth-bound)
    /// or the override asks for it, else read in the module's own vectors. Fewer rows are
    /// latency-bound, and gathering a peeled row's weights costs its threads more than the
    /// narrow accesses it saves (H200, bf16: rmsnorm 1 × 1001 1.04 µs narrow, 1.34 peeled; 128 ×
    /// 1001 1.38, 1.74; docs/perf/norm.md v12).
    fn register_layout(
        &self,
        sms: u32,
        forced: LayoutOverride,
        kernels: &impl RegisterKernels,
    ) -> Option<(Plan, Layout)> {
        let peeled = self.peel.then(|| self.layout(sms, forced, kernels)).flatten();
        if let Some(layout) = peeled.filter(|l| l.many_rows || forced.peel == Some(true)) {
            return Some((*self, layout));
        }
        let plain = Plan { peel: false, ..*self };
        plain.layout(sms, forced, kernels).map(|layout| (plain, layout))
    }

    /// The staged kernel's launch on a device of `sms` multiprocessors, if the module has it
    /// (sm_90, 16-byte vectors), a row takes a warp to 1024 threads of its vectors, the ring
    /// fits in shared memory, and it pays (or the override asks for it): each block works through
    /// a few rows, `stages` of them in flight (see [`STAGED_ROWS_PER_BLOCK`]).
    fn staged(&self, sms: u32, forced: LayoutOverride, kernels: &impl RegisterKernels) -> Option<Staged> {
        // Only 16-byte vectors' modules have staged kernels (a narrow one's peeled kernels take
        // their entry indices).
        if forced.stages == Some(0) || self.vec * self.dtype.size() as u32 != 16 {
            return None;
        }
        let vectors = self.params.hidden / self.vec;
        let chunks = forced.chunks.filter(|c| STAGED_CHUNK_COUNTS.contains(c)).unwrap_or(STAGED_CHUNKS);
        let fit = group_threads(vectors.div_ceil(chunks));
        let threads = forced.threads_per_row.filter(|&t| t >= fit).unwrap_or(fit);
        if threads < 32 || threads > kernels.staged_max_threads(chunks).min(MAX_BLOCK) {
            return None;
        }
        let stages = forced.stages.unwrap_or(STAGES);
        let slot_bytes = self.params.hidden * self.dtype.size() as u32 * (1 + self.is_fused() as u32);
        let shared_bytes = slot_bytes.checked_mul(stages)?.checked_add(STAGING_HEADER_BYTES)?;
        if shared_bytes > kernels.max_shared_bytes() {
            return None;
        }
        let rows = self.params.rows;
        let blocks_at_once = sms as u64 * kernels.staged_resident_blocks(chunks, threads, shared_bytes) as u64;
        let from_dram = rows.saturating_mul(slot_bytes as u64) > STAGED_MAX_CACHED_READ_BYTES;
        let row_bytes = self.params.hidden * self.dtype.size() as u32;
        let long_rows = (STAGED_MIN_ROW_BYTES..=STAGED_MAX_ROW_BYTES).contains(&row_bytes);
        let pays = long_rows && if from_dram { !self.is_fused() } else { rows > blocks_at_once };
        if forced.stages.is_none() && !pays {
            return None;
        }
        let rows_per_block = forced.rows_per_group.unwrap_or(if from_dram {
            STAGED_ROWS_PER_BLOCK
        } else {
            rows.div_ceil(blocks_at_once).clamp(STAGED_ROWS_PER_BLOCK, STAGED_MAX_ROWS_PER_BLOCK)
        });
        let grid = rows.div_ceil(rows_per_block).min(i32::MAX as u64) as u32;
        Some(Staged { chunks, threads, stages, shared_bytes, grid })
    }

    fn staged_launch(&self, staged: Staged) -> Launch<NormParams> {
        Launch {
            entry: NormModule::staged_entry(staged.chunks).unwrap_or(NormModule::STREAM_ENTRY),
            params: NormParams { threads_per_row: staged.threads, stages: staged.stages, ..self.params },
            grid: (staged.grid, 1),
            block: staged.threads,
            shared_bytes: staged.shared_bytes,
            cluster: 1,
        }
    }

    /// The register layout for this call on a device of `sms` multiprocessors; `None` if no
    /// register kernel holds the row. Rows at least one wave of groups deep are bandwidth-bound:
    /// each thread gets its share of bytes in flight (pipelined groups, two rows each, or as many
    /// as make one wave). Fewer rows are latency-bound: more threads per row, one row per group.
    fn layout(&self, sms: u32, forced: LayoutOverride, kernels: &impl RegisterKernels) -> Option<Layout> {
        let vec = self.row_vec();
        let vectors = (self.params.hidden / vec).max(1);
        let rows = self.params.rows;
        let vector_bytes = vec * self.dtype.size() as u32;
        let chunk_counts: &[u32] = if self.peel { &PEELED_CHUNK_COUNTS } else { &CHUNK_COUNTS };
        // The most chunks a kernel of these holds: where no fewer keep a row to the threads
        // wanted. (An 8 here took peeled rows past 8192 2-byte elements for latency-bound, so
        // never peeled: bf16 rmsnorm 4096 × 12287 read narrow 139.3 µs, peeled 64.8.)
        let most = chunk_counts.last().copied().unwrap_or(8);
        let max_threads = |c: u32, pipelined: bool| kernels.max_threads(c, pipelined, self.peel);
        // A chunk of a row spans a cache line where the row is that long; a peeled row's head
        // and tail take a lane an element.
        let line_threads = (LINE_BYTES / vector_bytes).clamp(1, vectors.next_power_of_two());
        let least_threads = if self.peel { line_threads.max(2 * vec) } else { line_threads };
        let threads_for = |chunks: u32| group_threads(vectors.div_ceil(chunks)).max(least_threads);
        let most_chunks = (vectors / line_threads).max(1);
        let narrow = vector_bytes < NARROW_VECTOR_BYTES as u32;
        let narrow_fused = self.is_fused() && narrow;
        // Rows of the staged kernel's vectors (16 bytes) too long for it.
        let past_staged = vector_bytes == 16 && self.params.hidden * self.dtype.size() as u32 > STAGED_MAX_ROW_BYTES;
        // The fused ops' rows of 8- and 16-byte vectors, and rmsnorm's past the staged kernel.
        let unpipelined = (self.is_fused() && !narrow_fused) || (!self.is_fused() && past_staged);
        let wide = if self.is_fused() && vector_bytes < 16 {
            FUSED_CHUNKS
        } else if unpipelined {
            chunk_counts
                .iter()
                .copied()
                .filter(|&c| c >= FUSED_CHUNKS)
                .find(|&c| threads_for(c) <= FUSED_MAX_THREADS_PER_ROW)
                .unwrap_or(most)
        } else {
            LARGE_BATCH_BYTES_PER_THREAD / vector_bytes
        };
        let wide = wide.clamp(1, 8).min(most_chunks.next_power_of_two());
        let large_pipelined = !unpipelined;
        let deep_rows_per_group =
            if narrow { (NARROW_GROUP_VECTOR_BYTES / vector_bytes) as u64 } else { LARGE_BATCH_ROWS_PER_GROUP };
        let fits = |c: u32, pipelined: bool| threads_for(c) <= max_threads(c, pipelined).min(MAX_BLOCK);
        let slots = |c: u32, pipelined: bool| {
            let (threads, block) = (threads_for(c), BLOCK_THREADS.max(threads_for(c)));
            let rows_per_block = (block / threads).max(1) as u64;
            sms as u64 * kernels.resident_blocks(c, pipelined, self.peel, block) as u64 * rows_per_block
        };
        let large = fits(wide, large_pipelined) && rows >= slots(wide, large_pipelined);
        let (preferred, rows_per_group) = if large {
            let waves = rows.div_ceil(slots(wide, large_pipelined));
            let rows_per_group = match (large_pipelined, waves) {
                (false, _) => 1,
                (true, w) if w > MAX_ROWS_PER_GROUP => deep_rows_per_group,
                (true, w) => w,
            };
            (wide, rows_per_group)
        } else {
            let small = chunk_counts.iter().copied().find(|&c| threads_for(c) <= SMALL_BATCH_THREADS_PER_ROW);
            (small.unwrap_or(most), 1)
        };
        let rows_per_group = forced.rows_per_group.unwrap_or(rows_per_group);
        let pipelined = rows_per_group > 1;
        // No more chunks than vectors. If a row needs more threads than a block of that many
        // chunks can have (registers), more chunks; failing that, fewer.
        let preferred = forced.chunks.unwrap_or(preferred).min(vectors.next_power_of_two()).max(1);
        let more = chunk_counts.iter().copied().filter(|&c| c >= preferred);
        let fewer = chunk_counts.iter().copied().rev().filter(|&c| c < preferred);
        let (chunks, threads_per_row) = more
            .chain(fewer)
            .map(|c| {
                let fit = group_threads(vectors.div_ceil(c)).max(least_threads);
                (c, forced.threads_per_row.filter(|&t| t >= fit).unwrap_or(threads_for(c)))
            })
            .find(|&(c, t)| t <= max_threads(c, pipelined).min(MAX_BLOCK))?;
        let block = BLOCK_THREADS.max(threads_per_row).min(max_threads(chunks, pipelined));
        let rows_per_block = (block / threads_per_row).max(1);
        // The grid holds at most 2^31 − 1 blocks (less the few a peeled launch may add): beyond
        // that, groups take more rows (pipelined or not, as chosen: the kernel loops over any
        // number).
        let most_blocks = i32::MAX as u64 - PEELED_MAX_EXTRA_BLOCKS;
        let rows_per_group = rows_per_group.max(rows.div_ceil(rows_per_block as u64 * most_blocks));
        Some(Layout { chunks, threads_per_row, rows_per_block, rows_per_group, pipelined, many_rows: large })
    }

    fn is_fused(&self) -> bool {
        self.params.residual != 0
    }

    /// Elements of a register kernel's vector: 16 bytes' worth for peeled rows, else the module's.
    fn row_vec(&self) -> u32 {
        if self.peel { 16 / self.dtype.size() as u32 } else { self.vec }
    }

    fn register_launch(&self, layout: Layout) -> Launch<NormParams> {
        let rows_per_launch_block = layout.rows_per_block as u64 * layout.rows_per_group;
        let grid = self.params.rows.div_ceil(rows_per_launch_block) as u32;
        // The block holds whole warps: groups narrower than a warp come 32 / threads to a warp.
        let block = (layout.rows_per_block * layout.threads_per_row).next_multiple_of(32);
        let rows_per_block = block / layout.threads_per_row;
        let grid = if rows_per_block != layout.rows_per_block {
            self.params.rows.div_ceil(rows_per_block as u64 * layout.rows_per_group) as u32
        } else {
            grid
        };
        // A peeled group's rows must share their head: whole vectors of rows apart (the grid's
        // groups times the row stride, in elements, a multiple of the vector) unless it has one.
        let one_row_a_group = grid as u64 * rows_per_block as u64 >= self.params.rows;
        let grid = if self.peel && !one_row_a_group {
            let vec = self.row_vec() as u64;
            let apart = rows_per_block as u64 * self.params.input_row_stride % vec;
            grid.next_multiple_of((vec / gcd(vec, apart)) as u32)
        } else {
            grid
        };
        Launch {
            entry: register_entry(layout.chunks, layout.pipelined, self.peel).unwrap_or(NormModule::STREAM_ENTRY),
            params: NormParams { threads_per_row: layout.threads_per_row, ..self.params },
            grid: (grid.max(1), 1),
            block,
            shared_bytes: 0,
            cluster: 1,
        }
    }

    /// A block per row at a time, at most as many blocks as the device holds at once (they
    /// stride over rows) unless the override sets the rows a block takes; the block a power of
    /// two unless the override sets it (whole warps).
    fn streaming(&self, sms: u32, forced: LayoutOverride, kernels: &impl RegisterKernels) -> Launch<NormParams> {
        let entry = NormModule::STREAM_ENTRY;
        let vectors = (self.params.hidden / self.vec).max(1);
        let largest = 1 << MAX_BLOCK.min(kernels.stream_max_threads()).max(32).ilog2();
        let block = vectors.next_power_of_two().clamp(32, largest);
        let block = forced.threads_per_row.filter(|&t| t >= 32).map_or(block, |t| t.min(largest));
        let resident = sms as u64 * kernels.stream_resident_blocks(block) as u64;
        let grid = match forced.rows_per_group {
            Some(rows) => self.params.rows.div_ceil(rows).min(i32::MAX as u64),
            None => self.params.rows.min(resident),
        } as u32;
        let params = NormParams { threads_per_row: block, ..self.params };
        Launch { entry, params, grid: (grid, 1), block, shared_bytes: 0, cluster: 1 }
    }
}

/// Greatest common divisor (`gcd(a, 0) = a`).
fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// rmsnorm in f64 of `[input, weight, out]`.
fn rmsnorm_reference(p: &Problem) -> Vec<Vec<f64>> {
    vec![rms_rows(&p.tensors[0], &p.tensors[1], p.hidden, p.scalar::<f32>("eps").into(), 0.0)]
}

/// Gemma's rmsnorm in f64: `1 + weight`.
fn gemma_rmsnorm_reference(p: &Problem) -> Vec<Vec<f64>> {
    vec![rms_rows(&p.tensors[0], &p.tensors[1], p.hidden, p.scalar::<f32>("eps").into(), 1.0)]
}

/// Fused add + rmsnorm in f64 of `[input, residual, weight]`: the new residual is `input +
/// residual` rounded to the dtype (what the residual tensor stores), and the new input the
/// rmsnorm of the residual as the op stored it (a sum one rounding unit off is caught above).
fn fused_add_rmsnorm_reference(p: &Problem) -> Vec<Vec<f64>> {
    fused_rows(p, 0.0)
}

/// Gemma's fused add + rmsnorm in f64: `1 + weight`.
fn gemma_fused_add_rmsnorm_reference(p: &Problem) -> Vec<Vec<f64>> {
    fused_rows(p, 1.0)
}

fn fused_rows(p: &Problem, offset: f64) -> Vec<Vec<f64>> {
    let round = |v: f64| crate::with_host_element!(p.dtype, T => crate::HostElement::to_f64(<T as crate::HostElement>::from_f64(v)));
    let sums = p.tensors[0].iter().zip(&p.tensors[1]).map(|(x, r)| round(x + r)).collect();
    let stored = p.written.get(1).unwrap_or(&sums);
    vec![rms_rows(stored, &p.tensors[2], p.hidden, p.scalar::<f32>("eps").into(), offset), sums]
}

/// rmsnorm in f64 over contiguous rows of `hidden`, with `(weight + offset)`.
fn rms_rows(input: &[f64], weight: &[f64], hidden: usize, eps: f64, offset: f64) -> Vec<f64> {
    input
        .chunks_exact(hidden)
        .flat_map(|row| {
            let inverse = 1.0 / (row.iter().map(|x| x * x).sum::<f64>() / hidden as f64 + eps).sqrt();
            row.iter().zip(weight).map(move |(x, w)| x * inverse * (w + offset))
        })
        .collect()
}

/// layernorm in f64 (biased variance) of `[input, gamma, beta, out]`.
fn layernorm_reference(p: &Problem) -> Vec<Vec<f64>> {
    let (gamma, beta, hidden) = (&p.tensors[1], &p.tensors[2], p.hidden);
    let rows = p.tensors[0].chunks_exact(hidden).flat_map(|row| {
        let mean = row.iter().sum::<f64>() / hidden as f64;
        let var = row.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / hidden as f64;
        let inverse = 1.0 / (var + f64::from(p.scalar::<f32>("eps"))).sqrt();
        row.iter().zip(gamma.iter().zip(beta)).map(move |(x, (g, b))| (x - mean) * inverse * g + b)
    });
    vec![rows.collect()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Device;

    fn plan(rows: u64, hidden: u32, vec: u32, dtype: DType, fused: bool) -> Plan {
        let params = NormParams {
            input: 0,
            residual: fused as u64,
            weight: 0,
            bias: 0,
            output: 0,
            rows,
            input_row_stride: hidden as u64,
            residual_row_stride: hidden as u64,
            output_row_stride: hidden as u64,
            hidden,
            eps: 1e-6,
            threads_per_row: 1,
            stages: 0,
        };
        Plan { params, dtype, weight_dtype: dtype, vec, peel: false }
    }

    /// As [`plan`], rows of narrow vectors read peeled.
    fn peeled(rows: u64, hidden: u32, vec: u32, dtype: DType, fused: bool) -> Plan {
        Plan { peel: true, ..plan(rows, hidden, vec, dtype, fused) }
    }

    /// The H200 (132 SMs, 64K registers and 2048 threads per SM) with the kernels' registers as
    /// ptxas builds them for bf16 rmsnorm (sm_90 report,
    /// crates/ferrinfer-jit/tests/snapshots/jit_sass__norm_sm90.snap).
    struct H200;

    fn registers(chunks: u32, pipelined: bool) -> u32 {
        match (chunks, pipelined) {
            (1, _) => 56,
            (2, false) => 64,
            (2, true) => 72,
            (4, false) => 80,
            (4, true) => 100,
            (_, false) => 120,
            (_, true) => 162,
        }
    }

    /// The staged kernels' registers (same report): 56 with 2 chunks, 96 with 4.
    fn staged_registers(chunks: u32) -> u32 {
        if chunks == 2 { 56 } else { 96 }
    }

    /// Shared memory per multiprocessor, and per block with the opt-in (bytes).
    const SHARED_PER_SM: u32 = 228 * 1024;
    const SHARED_PER_BLOCK: u32 = 227 * 1024;

    /// Peeled kernels only of [`PEELED_CHUNK_COUNTS`], with the registers of the others.
    impl RegisterKernels for H200 {
        fn max_threads(&self, chunks: u32, pipelined: bool, peeled: bool) -> u32 {
            if peeled && !PEELED_CHUNK_COUNTS.contains(&chunks) {
                return 0;
            }
            (65536 / (registers(chunks, pipelined) * 32) * 32).min(1024)
        }

        fn resident_blocks(&self, chunks: u32, pipelined: bool, _: bool, block: u32) -> u32 {
            (65536 / (registers(chunks, pipelined) * block)).min(2048 / block).clamp(1, 32)
        }

        fn staged_max_threads(&self, chunks: u32) -> u32 {
            (65536 / (staged_registers(chunks) * 32) * 32).min(1024)
        }

        fn staged_resident_blocks(&self, chunks: u32, block: u32, shared_bytes: u32) -> u32 {
            // The runtime reserves 1 KB of shared memory per block.
            let by_shared = SHARED_PER_SM / (shared_bytes + 1024);
            (65536 / (staged_registers(chunks) * block)).min(2048 / block).min(by_shared).clamp(1, 32)
        }

        fn stream_max_threads(&self) -> u32 {
            1024
        }

        fn stream_resident_blocks(&self, block: u32) -> u32 {
            (2048 / block).clamp(1, 32)
        }

        fn max_shared_bytes(&self) -> u32 {
            SHARED_PER_BLOCK
        }
    }

    /// An sm_80 module (no staged kernels), otherwise the H200's limits.
    struct NoStaged;

    impl RegisterKernels for NoStaged {
        fn max_threads(&self, chunks: u32, pipelined: bool, peeled: bool) -> u32 {
            H200.max_threads(chunks, pipelined, peeled)
        }

        fn resident_blocks(&self, chunks: u32, pipelined: bool, peeled: bool, block: u32) -> u32 {
            H200.resident_blocks(chunks, pipelined, peeled, block)
        }

        fn staged_max_threads(&self, _: u32) -> u32 {
            0
        }

        fn staged_resident_blocks(&self, _: u32, _: u32, _: u32) -> u32 {
            1
        }

        fn stream_max_threads(&self) -> u32 {
            H200.stream_max_threads()
        }

        fn stream_resident_blocks(&self, block: u32) -> u32 {
            H200.stream_resident_blocks(block)
        }

        fn max_shared_bytes(&self) -> u32 {
            SHARED_PER_BLOCK
        }
    }

    fn staged(rows: u64, hidden: u32, vec: u32, dtype: DType, fused: bool, forced: LayoutOverride) -> Option<Staged> {
        plan(rows, hidden, vec, dtype, fused).staged(132, forced, &H200)
    }

    #[test]
    fn norm_staged_kernel_takes_many_rows_where_the_module_has_it() {
        use DType::*;
        let none = LayoutOverride::default();
        let s = staged(4096, 4096, 8, Bf16, false, none).expect("32 MiB of rows: staged");
        // 128 threads × 4 vectors of 8; 2 rows of 8 KB; 5 blocks an SM (registers): 660 at once,
        // so 4 rows a block (4096 / 660 rounds up to 7, clamped to 4).
        assert_eq!(s, Staged { chunks: 4, threads: 128, stages: 2, shared_bytes: 128 + 2 * 8192, grid: 1024 });
        assert_eq!(staged(1024, 4096, 8, Bf16, false, none).map(|s| s.grid), Some(512), "2 rows a block, one wave");
        let f = staged(4096, 4096, 8, Bf16, true, none).expect("fused: staged too");
        assert_eq!((f.threads, f.shared_bytes), (128, 128 + 2 * 2 * 8192), "input and residual rows");
        assert_eq!(staged(8192, 4096, 8, Bf16, true, none), None, "fused 8192 × 4096 reads 128 MiB: registers");
        let streamed = staged(65536, 4096, 8, Bf16, false, none).expect("rows streamed from DRAM: staged");
        assert_eq!(streamed.grid, 32768, "2 rows a block");
        assert_eq!(staged(65536, 4096, 8, Bf16, true, none), None, "fused rows streamed from DRAM: registers");
        let forced_wide = LayoutOverride { stages: Some(2), ..none };
        let wide = staged(16384, 8192, 4, F32, false, forced_wide).expect("f32, 32 KB rows");
        assert_eq!((wide.threads, wide.shared_bytes, wide.grid), (512, 128 + 2 * 32768, 8192));
        assert_eq!(staged(16384, 16384, 4, F32, false, forced_wide), None, "1024 threads of 96 registers do not fit");
        assert_eq!(staged(256, 8192, 8, Bf16, true, none), None, "a row a block (264 blocks): registers");
        assert_eq!(staged(221_184, 128, 8, Bf16, false, none), None, "16 vectors a row: under a warp");
        assert_eq!(staged(4096, 1024, 8, Bf16, false, none), None, "2 KB rows: registers");
        assert_eq!(staged(16384, 1024, 8, Bf16, true, none), None, "fused 2 KB rows: registers");
        let odd = staged(4096, 5120, 8, Bf16, false, none).expect("10 KB rows: staged");
        assert_eq!(odd.threads, 160, "640 vectors, 4 a thread: 5 warps, none idle");
        let forced_two = LayoutOverride { stages: Some(2), ..none };
        assert_eq!(staged(64, 32768, 8, Bf16, true, forced_two), None, "2 × 128 KB slots do not fit");
        let ampere = plan(4096, 4096, 8, Bf16, false).staged(108, none, &NoStaged);
        assert_eq!(ampere, None, "no staged kernel in the module");
        let off = LayoutOverride { stages: Some(0), ..none };
        assert_eq!(staged(4096, 4096, 8, Bf16, false, off), None, "stages 0: register kernels only");
        let forced = LayoutOverride { stages: Some(2), chunks: Some(2), ..none };
        let one = staged(1, 4096, 8, Bf16, false, forced).expect("forced: even one row");
        assert_eq!((one.chunks, one.threads, one.stages, one.grid), (2, 256, 2, 1));
        let per_block = |rows| LayoutOverride { stages: Some(2), rows_per_group: Some(rows), ..none };
        assert_eq!(staged(65536, 4096, 8, Bf16, false, per_block(1)).map(|s| s.grid), Some(65536), "a block a row");
        assert_eq!(staged(65536, 4096, 8, Bf16, false, per_block(3)).map(|s| s.grid), Some(21846), "3 rows a block");
        let launch = plan(4096, 4096, 8, Bf16, false).staged_launch(s);
        assert_eq!((launch.block, launch.params.threads_per_row, launch.params.stages), (128, 128, 2));
        assert_eq!(
            (launch.grid, launch.shared_bytes, launch.entry),
            ((1024, 1), s.shared_bytes, NormModule::staged_entry(4).unwrap())
        );
    }

    /// (chunks, threads per row, rows per block, rows per group, pipelined) on an H200.
    fn shape(rows: u64, hidden: u32, vec: u32, dtype: DType, fused: bool) -> Option<(u32, u32, u32, u64, bool)> {
        let layout = plan(rows, hidden, vec, dtype, fused).layout(132, LayoutOverride::default(), &H200)?;
        Some((layout.chunks, layout.threads_per_row, layout.rows_per_block, layout.rows_per_group, layout.pipelined))
    }

    #[test]
    fn norm_layouts_for_small_and_large_batches() {
        use DType::*;
        assert_eq!(shape(65536, 4096, 8, Bf16, false), Some((4, 128, 2, 2, true)), "many waves: 64 bytes, pipelined");
        assert_eq!(shape(1024, 8192, 8, Bf16, false), Some((4, 256, 1, 4, true)), "a few waves: one wave of groups");
        assert_eq!(shape(65536, 4096, 8, Bf16, true), Some((4, 128, 2, 1, false)), "fused: 4 chunks of each tensor");
        assert_eq!(shape(1, 4096, 8, Bf16, false), Some((2, 256, 1, 1, false)), "T = 1: more threads, one row");
        assert_eq!(shape(128, 8192, 8, Bf16, false), Some((4, 256, 1, 1, false)), "fewer rows than slots");
        assert_eq!(shape(1, 16384, 8, Bf16, false), Some((8, 256, 1, 1, false)));
        assert_eq!(shape(221_184, 128, 8, Bf16, false), Some((2, 8, 32, 2, true)), "short rows: a cache line a chunk");
        assert_eq!(shape(7, 111, 1, F16, false), Some((1, 128, 2, 1, false)), "odd rows: one element a vector");
        assert_eq!(shape(65536, 4096, 4, F32, false), Some((4, 256, 1, 2, true)));
        assert_eq!(shape(1, 32768, 8, Bf16, false).map(|s| (s.0, s.1)), Some((8, 512)), "8 chunks fit 512 threads");
        assert_eq!(shape(1, 65536, 8, Bf16, false), None, "rows past what registers hold stream");
        assert_eq!(
            shape(4096, 12288, 8, Bf16, true),
            Some((8, 192, 1, 1, false)),
            "1536 vectors: 6 warps of 8, not 12 of 4"
        );
        assert_eq!(shape(4096, 3000, 8, Bf16, true), Some((4, 96, 2, 1, false)), "375 vectors: 3 warps of 4");
        assert_eq!(
            shape(4096, 1001, 1, Bf16, true),
            Some((4, 256, 1, 4, true)),
            "fused, 2-byte vectors: pipelined, 4 rows"
        );
        assert_eq!(shape(4096, 4094, 2, F16, true).map(|s| (s.0, s.3, s.4)), Some((4, 2, true)), "4-byte: 2 rows");
        assert_eq!(
            shape(4096, 4100, 4, Bf16, true).map(|s| (s.0, s.1, s.4)),
            Some((4, 288, false)),
            "8-byte vectors: unpipelined, 4 chunks even at 288 threads"
        );
        assert_eq!(shape(4096, 1001, 1, Bf16, false), Some((8, 128, 2, 4, true)), "rmsnorm, 2-byte vectors: 4 rows");
        assert_eq!(shape(4096, 1002, 2, Bf16, false).map(|s| s.3), Some(2), "4-byte vectors: 2 rows");
        assert_eq!(shape(4096, 12288, 8, Bf16, false), Some((8, 192, 1, 1, false)), "24 KB rows: the fused rule");
        assert_eq!(shape(16384, 16384, 8, Bf16, false), Some((8, 256, 1, 1, false)), "32 KB rows");
        assert_eq!(shape(4096, 8192, 4, F32, false), Some((8, 256, 1, 1, false)), "f32, 32 KB rows");
    }

    #[test]
    fn norm_peeled_rows_take_16_byte_vectors_past_their_head() {
        use DType::*;
        // (chunks, threads per row, rows per group, pipelined, grid, entry) on an H200.
        let peeled_launch = |rows, hidden, vec, dtype, fused| {
            let plan = peeled(rows, hidden, vec, dtype, fused);
            let l = plan.layout(132, LayoutOverride::default(), &H200).unwrap();
            let launch = plan.register_launch(l);
            (l.chunks, l.threads_per_row, l.rows_per_group, l.pipelined, launch.grid.0, launch.entry)
        };
        let entry = |chunks, pipelined| NormModule::peeled_entry(chunks, pipelined).unwrap();
        // 511 vectors past the head: 4 a thread, as an aligned 4096-wide row.
        assert_eq!(peeled_launch(4096, 4095, 1, Bf16, false), (4, 128, 2, true, 1024, entry(4, true)));
        assert_eq!(peeled_launch(4096, 4095, 1, Bf16, true), (4, 128, 1, false, 2048, entry(4, false)));
        assert_eq!(peeled_launch(4096, 4094, 2, F16, false).0, 4, "4-byte vectors peeled alike");
        assert_eq!(peeled_launch(4096, 4095, 1, F32, false).1, 256, "f32: 4 elements a vector");
        assert_eq!(peeled_launch(1, 4095, 1, Bf16, false), (2, 256, 1, false, 1, entry(2, false)), "T = 1");
        assert_eq!(peeled_launch(1, 16383, 1, Bf16, false).0, 4, "no 8-chunk peeled kernel: 4 at 512 threads");
        assert_eq!(peeled_launch(4096, 1001, 1, Bf16, true).1, 32, "125 vectors: a warp");
        assert_eq!(peeled_launch(7, 300, 1, Bf16, false).1, 32, "head and tail: at least 16 lanes");
        // Rows a group takes lie whole vectors of rows apart: 2 groups a block of rows 4095
        // elements long, so the grid is a multiple of 4 (grid · 2 · 4095 ≡ 0 mod 8).
        let grid = |rows| peeled_launch(rows, 4095, 1, Bf16, false).4;
        assert_eq!((grid(1_000_001), grid(4097)), (250_004, 1028));
        for rows in [5_000u64, 99_999, 1_000_001, 5_000_000_000] {
            for hidden in [333u32, 1001, 4095, 4094, 12287] {
                let plan = peeled(rows, hidden, 1, Bf16, rows % 2 == 0);
                let Some(l) = plan.layout(132, LayoutOverride::default(), &H200) else { panic!("{rows} × {hidden}") };
                let launch = plan.register_launch(l);
                let groups = (launch.block / l.threads_per_row) as u64;
                let one_row_a_group = launch.grid.0 as u64 * groups >= rows;
                let apart = launch.grid.0 as u64 * groups * hidden as u64;
                assert!(one_row_a_group || apart.is_multiple_of(8), "{rows} × {hidden}: rows a vector apart");
                assert!(launch.grid.0 as u64 * groups * l.rows_per_group >= rows, "{rows} × {hidden}: every row");
                assert!(l.threads_per_row >= 16 && l.chunks * l.threads_per_row * 8 >= hidden, "{rows} × {hidden}");
            }
        }
        // Peeled where rows are many; latency-bound batches read narrow, unless asked.
        let peels =
            |rows, forced| peeled(rows, 1001, 1, Bf16, false).register_layout(132, forced, &H200).unwrap().0.peel;
        let asked = LayoutOverride { peel: Some(true), ..LayoutOverride::default() };
        assert!(peels(4096, LayoutOverride::default()) && peels(1, asked));
        assert!(!peels(1, LayoutOverride::default()) && !peels(128, LayoutOverride::default()));
        // Rows past 8192 2-byte elements need more threads than 256 at 4 chunks, the most a peeled
        // kernel holds: still many rows, so peeled.
        for (hidden, fused) in [(12287, false), (16383, false), (12287, true), (16383, true)] {
            let plan = peeled(4096, hidden, 1, Bf16, fused);
            let (chosen, layout) = plan.register_layout(132, LayoutOverride::default(), &H200).unwrap();
            assert!(chosen.peel && layout.chunks == 4, "{hidden} fused {fused}: {layout:?}");
        }
        let plain = LayoutOverride { peel: Some(false), ..LayoutOverride::default() };
        assert_eq!(parse_layout("*:*:*:*:0"), Some(plain), "the override can keep rows off the peeled kernels");
        assert_eq!(
            staged(4096, 4096, 1, Bf16, false, LayoutOverride { stages: Some(2), ..plain }),
            None,
            "narrow: never staged"
        );
    }

    #[test]
    fn norm_rows_are_peeled_only_where_every_row_tensor_is_aligned_alike() {
        // bf16 rows of 4095 in buffers at `offset` bytes, rows `stride` elements apart.
        let view = |offset: u64, stride: i64| unsafe {
            TensorView::from_raw_parts(4096 as *mut _, offset, DType::Bf16, &[8, 4095], &[stride, 1], Device::Cpu)
                .unwrap()
        };
        let weight =
            unsafe { TensorView::from_raw_parts(4096 as *mut _, 2, DType::Bf16, &[4095], &[1], Device::Cpu).unwrap() };
        let alike = |input: &TensorView, out: &TensorView| {
            let call = NormCall::new(NormKernel::Rms, input, &weight, ("out", out), 1e-6);
            let rows = |name, v| layout::row_layout(name, v).unwrap();
            call.rows_aligned_alike([Some(rows("input", input)), Some(rows("out", out)), None])
        };
        let input = view(0, 4095);
        assert!(alike(&input, &view(1 << 20, 4095)), "same offset mod 16 and stride: alike");
        assert!(alike(&input, &view(32, 4103)), "strides 8 apart: every row alike");
        assert!(!alike(&input, &view(2, 4095)), "2 bytes further: each row's head differs");
        assert!(!alike(&input, &view(0, 4096)), "another stride: the rows drift apart");
        let plan =
            |out: &TensorView| NormCall::new(NormKernel::Rms, &input, &weight, ("out", out), 1e-6).plan(&Stream::Cpu);
        let (aligned, shifted) =
            (plan(&view(1 << 20, 4095)).unwrap().unwrap(), plan(&view((1 << 20) + 2, 4095)).unwrap().unwrap());
        assert!(aligned.peel && !shifted.peel && aligned.vec == 1, "the weight's own alignment does not matter");
    }

    #[test]
    fn norm_rows_past_16_kb_are_not_staged_unasked() {
        use DType::*;
        let none = LayoutOverride::default();
        assert!(staged(4096, 8192, 8, Bf16, false, none).is_some(), "16 KB rows: staged");
        assert_eq!(staged(4096, 8200, 8, Bf16, false, none), None, "past 16 KB: registers");
        assert_eq!(staged(65536, 12288, 8, Bf16, false, none), None, "even streamed from DRAM");
        let forced = LayoutOverride { stages: Some(2), ..none };
        assert!(staged(4096, 12288, 8, Bf16, false, forced).is_some(), "asked for: staged");
    }

    #[test]
    fn norm_layout_override_is_followed_where_it_fits() {
        let forced = |chunks, threads, rows| LayoutOverride {
            chunks,
            threads_per_row: threads,
            rows_per_group: rows,
            stages: None,
            peel: None,
        };
        let layout = |rows, hidden, o| plan(rows, hidden, 8, DType::Bf16, false).layout(132, o, &H200).unwrap();
        let l = layout(65536, 4096, forced(Some(8), None, Some(4)));
        assert_eq!((l.chunks, l.threads_per_row, l.rows_per_group, l.pipelined), (8, 64, 4, true));
        let l = layout(65536, 4096, forced(Some(2), None, Some(1)));
        assert_eq!((l.chunks, l.rows_per_group, l.pipelined), (2, 1, false), "one row a group: not pipelined");
        let l = layout(1, 4096, forced(Some(1), Some(1024), None));
        assert_eq!((l.chunks, l.threads_per_row), (1, 1024), "more threads than vectors is allowed");
        let l = layout(1, 4096, forced(Some(1), Some(64), None));
        assert_eq!((l.chunks, l.threads_per_row), (1, 512), "too few threads for the row: ignored");
        assert_eq!(parse_layout("4:128:2"), Some(forced(Some(4), Some(128), Some(2))));
        assert_eq!(parse_layout("*:*:8"), Some(forced(None, None, Some(8))));
        assert_eq!(parse_layout("8"), Some(forced(Some(8), None, None)));
        assert_eq!(parse_layout("0:512:1"), Some(forced(Some(0), Some(512), Some(1))), "0: the streaming kernel");
        assert_eq!(parse_layout("*:*:*:3"), Some(LayoutOverride { stages: Some(3), ..forced(None, None, None) }));
        assert_eq!(parse_layout("4:160"), Some(forced(Some(4), Some(160), None)), "whole warps");
        for bad in
            ["3", "4:100", "4:128:0", "4:128:2:17", "4:128:2:1:2", "4:1:1:1:1:1", "x", "4294967297", "0:16", "0:*:*:1"]
        {
            assert_eq!(parse_layout(bad), None, "{bad}");
        }
    }

    #[test]
    fn norm_streaming_launch_follows_the_override() {
        let forced = |threads, rows| LayoutOverride {
            chunks: Some(0),
            threads_per_row: threads,
            rows_per_group: rows,
            stages: None,
            peel: None,
        };
        let stream = |rows, hidden, o| plan(rows, hidden, 8, DType::Bf16, true).streaming(132, o, &H200);
        let launch = stream(65536, 4096, forced(None, Some(2)));
        assert_eq!(launch.entry, NormModule::STREAM_ENTRY);
        assert_eq!(
            (launch.block, launch.params.threads_per_row, launch.grid.0),
            (512, 512, 32768),
            "a thread a vector"
        );
        let launch = stream(65536, 4096, forced(Some(256), None));
        assert_eq!((launch.block, launch.grid.0), (256, 132 * 8), "as many blocks as fit, striding");
        let launch = stream(1000, 65536 * 8, forced(None, Some(1)));
        assert_eq!((launch.block, launch.grid.0), (1024, 1000), "rows past registers: the most threads");
        let launch = stream(5_000_000_000, 4096, forced(None, Some(1)));
        assert_eq!(launch.grid.0, i32::MAX as u32, "the grid's limit; blocks stride over the rest");
    }

    #[test]
    fn norm_every_register_launch_covers_its_rows_within_limits() {
        for hidden in [1u32, 3, 8, 64, 111, 128, 500, 1004, 3000, 4095, 4096, 5120, 8192, 12288, 16384, 65536] {
            for rows in [1u64, 19, 989, 65536, 5_000_000_000] {
                for (vec, dtype) in
                    [(1, DType::Bf16), (2, DType::F16), (4, DType::Bf16), (8, DType::Bf16), (4, DType::F32)]
                {
                    if !hidden.is_multiple_of(vec) {
                        continue;
                    }
                    for fused in [false, true] {
                        let plan = plan(rows, hidden, vec, dtype, fused);
                        let Some(layout) = plan.layout(132, LayoutOverride::default(), &H200) else {
                            assert!(hidden / vec > 4 * 1024, "{hidden} {vec}: no register layout");
                            continue;
                        };
                        let launch = plan.register_launch(layout);
                        let what =
                            format!("{hidden} × {rows} v{vec} {dtype} fused {fused}: {layout:?} {}", launch.block);
                        let threads = launch.params.threads_per_row;
                        let whole = if threads < 32 { threads.is_power_of_two() } else { threads.is_multiple_of(32) };
                        assert!(whole && launch.block.is_multiple_of(threads), "{what}: groups share warps evenly");
                        let most = H200.max_threads(layout.chunks, layout.pipelined, false);
                        assert!(launch.block.is_multiple_of(32) && launch.block <= most, "{what}");
                        assert!(layout.chunks * threads * vec >= hidden, "{what}: the row is covered");
                        let groups = launch.block / threads;
                        assert!(threads <= 32 || groups <= 15, "{what}: named barriers 1–15");
                        let covered = launch.grid.0 as u64 * groups as u64 * layout.rows_per_group;
                        assert!(covered >= rows && launch.grid.0 >= 1, "{what}: every row");
                    }
                }
            }
        }
    }
}
