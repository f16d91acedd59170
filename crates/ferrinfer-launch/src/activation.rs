//! The activation family at layers 1 and 4: the op table, validation, the launch planner, the CPU
//! path and the f64 references. Each op validates its arguments, then runs on the CPU backend or
//! launches the kernel of `ferrinfer-kernels/src/activation.rs` on the caller's stream.
//!
//! Rules, checked before anything is written (so on error `out` is untouched):
//! - `input`: f16, bf16 or f32, any rank ≥ 1, the last dimension `2d` (even) and contiguous,
//!   leading dimensions collapsible into rows at a stride ≥ `2d`; no rows is a no-op;
//! - `out`: writable, `input`'s dtype and device, its shape with the last dimension `d`, rows
//!   as `input`'s may be; it must not overlap `input` (FlashInfer's kernels do not run in place);
//! - addresses need only element alignment: the vector width narrows until `d`, every row stride
//!   and address allow it.

use ferrinfer_jit::activation::{ActivationKernel, ActivationModule};
use ferrinfer_jit::{CudaArch, JitSpec};
use ferrinfer_kernels::activation::{ActivationParams, Gelu, GeluTanh, Silu, act_and_mul_row};
use ferrinfer_kernels::element::DType;

use crate::cuda::{self, KernelModule, Launch, Limits, MAX_BLOCK, ModuleCache};
use crate::layout;
use crate::op::{Call, FamilyOp, Problem};
use crate::{Error, Stream, TensorView, cpu, logging, tuning};

crate::op_table! { $
    /// The activation family's ops, one line each (grammar: [`define_ops!`](crate::define_ops)).
    activation_ops, family activation;
    /// `out = silu(input[..., :d]) · input[..., d:]` (SiLU: `x · σ(x)`), in f32. `input`:
    /// `[..., 2d]`; `out`: `[..., d]`, not overlapping `input`.
    fn silu_and_mul(input: In[DoubleRows]) -> out: Out[Rows]
        => ActivationKernel::Silu, reference silu_and_mul_reference;
    /// `out = gelu(input[..., :d]) · input[..., d:]` with the exact GELU,
    /// `½ x (1 + erf(x / √2))`; shapes as `silu_and_mul`.
    fn gelu_and_mul(input: In[DoubleRows]) -> out: Out[Rows]
        => ActivationKernel::Gelu, reference gelu_and_mul_reference;
    /// `out = gelu_tanh(input[..., :d]) · input[..., d:]` with GELU's tanh approximation,
    /// `½ x (1 + tanh(√(2/π) (x + 0.044715 x³)))`; shapes as `silu_and_mul`.
    fn gelu_tanh_and_mul(input: In[DoubleRows]) -> out: Out[Rows]
        => ActivationKernel::GeluTanh, reference gelu_tanh_and_mul_reference;
}

impl FamilyOp for ActivationKernel {
    fn run(&self, call: &Call) -> Result<(), Error> {
        let [input, out] = call.tensors()?;
        let Some(plan) = plan(input, out, &call.stream)? else { return Ok(()) };
        // A bad tuning override fails every call, CPU ones too, rather than being ignored.
        let forced = layout_override()?;
        logging::input_statistics(call);
        match call.stream {
            Stream::Cpu => {
                cpu_rows(*self, plan.dtype, &plan.params);
                Ok(())
            }
            Stream::Cuda(stream) => {
                static MODULES: ModuleCache<ActivationModule> = ModuleCache::new();
                let module = ActivationModule { kernel: *self, dtype: plan.dtype };
                let entry = module
                    .entry(plan.vec)
                    .ok_or_else(|| Error::NoEntryPoint { module: format!("{module:?}"), entry: plan.vec as usize })?;
                cuda::launch(stream, &MODULES, module, |limits| plan.kernel(entry, limits, forced))
            }
        }
    }
}

impl KernelModule for ActivationModule {
    fn spec(&self, arch: CudaArch, debug: bool) -> JitSpec {
        ActivationModule::spec(self, arch, debug)
    }
}

/// A validated call: kernel parameters, dtype and vector width.
struct Plan {
    params: ActivationParams,
    dtype: DType,
    vec: u32,
}

/// Every check, in the order a caller would fix them; `None` when there is nothing to compute.
fn plan(input: &TensorView, out: &TensorView, stream: &Stream) -> Result<Option<Plan>, Error> {
    let dtype = input.dtype();
    layout::check_placement(stream, [("input", input), ("out", out)])?;
    layout::check_dtype("out", out, "input", dtype)?;
    layout::check_writable("out", out)?;
    let x = layout::row_layout("input", input)?;
    if x.hidden == 0 || !x.hidden.is_multiple_of(2) {
        // An empty batch (no rows) is valid; rows of nothing are not (as FlashInfer).
        let expected = "a last dimension of 2·d, d ≥ 1 (gate and up halves)".to_owned();
        return Err(Error::ShapeMismatch { argument: "input", expected, found: input.shape().to_vec() });
    }
    let width = x.hidden / 2;
    let mut expected_shape = input.shape().to_vec();
    if let Some(last) = expected_shape.last_mut() {
        *last = width as i64;
    }
    if out.shape() != expected_shape {
        let expected = format!("{expected_shape:?} (`input`'s shape with the last dimension halved)");
        return Err(Error::ShapeMismatch { argument: "out", expected, found: out.shape().to_vec() });
    }
    let y = layout::row_layout("out", out)?;
    if layout::overlaps(out, input) {
        return Err(Error::Overlap { argument: "out", other: "input" });
    }
    if width > u32::MAX as u64 {
        return Err(Error::TooLarge {
            argument: "input",
            what: "the row length",
            value: x.hidden,
            limit: 2 * u32::MAX as u64,
        });
    }
    if x.rows == 0 {
        return Ok(None);
    }
    let vec = layout::vector_width(dtype, width, &[x.row_stride, y.row_stride], &[input.address(), out.address()]);
    let params = ActivationParams {
        input: input.address(),
        output: out.address(),
        rows: x.rows,
        input_row_stride: x.row_stride,
        output_row_stride: y.row_stride,
        width: width as u32,
        streams: 0,
    };
    Ok(Some(Plan { params, dtype, vec }))
}

/// The CPU backend: the kernels crate's host numerics, rows split across cores.
fn cpu_rows(kernel: ActivationKernel, dtype: DType, params: &ActivationParams) {
    fn rows<A: ferrinfer_kernels::activation::Activation, T: ferrinfer_kernels::element::Element>(
        params: &ActivationParams,
    ) {
        cpu::for_rows(params.rows, params.width as u64, |rows| {
            for row in rows {
                // SAFETY: the launcher validated every pointer, stride and overlap in `params`.
                unsafe { act_and_mul_row::<A, T>(params, row) }
            }
        });
    }
    ferrinfer_kernels::with_element!(dtype, T => match kernel {
        ActivationKernel::Silu => rows::<Silu, T>(params),
        ActivationKernel::Gelu => rows::<Gelu, T>(params),
        ActivationKernel::GeluTanh => rows::<GeluTanh, T>(params),
    })
}

/// Threads per block: each owns one vector of every row it visits.
const BLOCK_THREADS: u32 = 128;
/// Rows a thread visits when there are enough to fill the device: the grid's y dimension is
/// `rows / 4`. The kernel takes them in steps of its `ROWS_PER_STEP` (2), so every thread
/// has two full steps; two rows a thread (one step) made gelu_and_mul 2–11 % slower at
/// streaming sizes (docs/perf/activation.md).
const ROWS_PER_THREAD: u64 = 4;
/// The grid's y dimension at most (CUDA's limit).
const MAX_GRID_Y: u64 = 65_535;
/// Blocks per multiprocessor below which a thread takes one row, not four. 1, from the
/// H200 sweep of docs/perf/activation.md (v1c): T = 128, d = 14336 (448 stepped blocks) runs in
/// 2.74 µs stepped, 3.49 a row a thread; T = 16 (16 blocks) 1.33 a row a thread, 1.91 stepped.
const FILL_BLOCKS_PER_SM: u64 = 1;

tuning::layout_override! {
    /// `FERRINFER_ACTIVATION_LAYOUT=block:grid_y:stream` (each field a number or `*` for the
    /// planner's choice): forces the launch's threads per block (a multiple of 32, at most what the
    /// entry can have), the grid's y dimension (rows walked in parallel, 1 to 65535; the kernel
    /// strides over the rest) and the cache policy (`ActivationParams::streams`, 0 or 1) — a knob
    /// for tuning sweeps with the benchmark, read once. Nothing is clamped: a value outside those
    /// bounds makes every activation call a configuration error naming the variable (a block past
    /// the entry's limit: every CUDA call, the limit being the loaded kernel's).
    pub const LAYOUT_VAR: &str = "FERRINFER_ACTIVATION_LAYOUT";
    struct LayoutOverride {
        block: Block,
        grid_y: u32 if |y| (1..=MAX_GRID_Y).contains(&u64::from(y)),
        streams: Flag,
    }
    expected = format!(
        "block:grid_y:stream, each a number or *, block a multiple of 32 ≤ {MAX_BLOCK}, grid_y 1 to {MAX_GRID_Y}, stream 0 or 1"
    );
}

impl Plan {
    /// The launch of entry `entry` within `limits`, or `forced`'s where it is given.
    fn kernel(&self, entry: usize, limits: &Limits, forced: LayoutOverride) -> Result<Launch<ActivationParams>, Error> {
        let (grid, block) = self.geometry(limits.multiprocessors, limits.max_threads(entry), forced)?;
        let streams = forced.streams.unwrap_or(self.streams(limits.l2_bytes));
        let params = ActivationParams { streams: streams as u32, ..self.params };
        Ok(Launch { entry, params, grid, block, shared_bytes: 0, cluster: 1 })
    }

    /// Whether the call streams (`ActivationParams::streams`): its bytes (input and output) pass
    /// the L2's size. Below, the whole call fits and cached loads find the input in L2 (ncu);
    /// above, evict-first output keeps it from displacing input still to be read. H200,
    /// silu_and_mul, cached → streaming, µs (docs/perf/activation.md v3): 1024 × 4096 (25 MB
    /// moved) 4.16 → 5.20; 1024 × 11008 (68 MB) 17.09 → 16.02; 4096 × 4096 (101 MB) 25.65 →
    /// 24.89. Past twice L2 the Rust bench finds cached faster (16384 × 4096: 94.94 against
    /// 98.44) while the Python module's streaming times there already match it; not taken
    /// until the two are measured side by side.
    fn streams(&self, l2_bytes: u64) -> bool {
        let output_bytes = self.params.rows.saturating_mul(self.params.width as u64 * self.dtype.size() as u64);
        output_bytes.saturating_mul(3) > l2_bytes
    }

    /// Grid and block on a device of `sms` multiprocessors, for an entry of at most `max_threads`
    /// threads a block: vectors across the grid's x dimension, rows across y (the kernel strides
    /// over the rest). Either may be `forced`; a forced block the entry cannot have is an error.
    fn geometry(&self, sms: u32, max_threads: u32, forced: LayoutOverride) -> Result<((u32, u32), u32), Error> {
        let vectors = (self.params.width / self.vec).max(1);
        let most = max_threads.max(32);
        let block = match forced.block {
            Some(block) if block > most => {
                return Err(Error::Config(format!(
                    "{LAYOUT_VAR}: a block of {block} threads; expected at most {most}, the most this kernel can have"
                )));
            }
            Some(block) => block,
            None => BLOCK_THREADS.min(vectors.next_multiple_of(32)).min(most),
        };
        // gridDim.x · blockDim.x ≥ vectors: every output vector has a thread.
        let grid_x = vectors.div_ceil(block);
        // Four rows a thread when that still gives every multiprocessor a block; fewer rows
        // (latency-bound) get a thread each instead.
        let stepped = self.params.rows.div_ceil(ROWS_PER_THREAD);
        let fills = grid_x as u64 * stepped >= FILL_BLOCKS_PER_SM * sms as u64;
        let planned = if fills { stepped } else { self.params.rows }.clamp(1, MAX_GRID_Y) as u32;
        Ok(((grid_x, forced.grid_y.unwrap_or(planned)), block))
    }
}

/// `act(gate) · up` in f64 over rows `[gate | up]` of `2 · hidden`.
fn gated(p: &Problem, act: impl Fn(f64) -> f64) -> Vec<Vec<f64>> {
    let rows = p.tensors[0].chunks_exact(2 * p.hidden);
    vec![rows.flat_map(|row| (0..p.hidden).map(|i| act(row[i]) * row[p.hidden + i]).collect::<Vec<_>>()).collect()]
}

fn silu_and_mul_reference(p: &Problem) -> Vec<Vec<f64>> {
    gated(p, |x| x / (1.0 + (-x).exp()))
}

fn gelu_and_mul_reference(p: &Problem) -> Vec<Vec<f64>> {
    gated(p, |x| 0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2)))
}

fn gelu_tanh_and_mul_reference(p: &Problem) -> Vec<Vec<f64>> {
    let k = (2.0 / std::f64::consts::PI).sqrt();
    gated(p, |x| 0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(rows: u64, width: u32, vec: u32) -> Plan {
        let params = ActivationParams {
            input: 0,
            output: 0,
            rows,
            input_row_stride: 2 * width as u64,
            output_row_stride: width as u64,
            width,
            streams: 0,
        };
        Plan { params, dtype: DType::Bf16, vec }
    }

    /// ((grid x, grid y), block) on an H200 (132 multiprocessors), an entry of 1024 threads.
    fn geometry(rows: u64, width: u32, forced: LayoutOverride) -> Result<((u32, u32), u32), Error> {
        plan(rows, width, 8).geometry(132, 1024, forced)
    }

    fn forced(block: Option<u32>, grid_y: Option<u32>) -> LayoutOverride {
        LayoutOverride { block, grid_y, streams: None }
    }

    #[test]
    fn activation_layout_override_parses_and_rejects_what_no_launch_has() {
        assert_eq!(parse_layout("256:1024"), Some(forced(Some(256), Some(1024))));
        assert_eq!(parse_layout("*:*"), Some(LayoutOverride::default()));
        assert_eq!(parse_layout("64"), Some(forced(Some(64), None)), "grid_y left off: the planner's");
        assert_eq!(parse_layout("*:65535"), Some(forced(None, Some(65535))));
        assert_eq!(parse_layout("1024:1"), Some(forced(Some(1024), Some(1))));
        let streams = |e| LayoutOverride { streams: Some(e), ..forced(Some(128), Some(4)) };
        assert_eq!(parse_layout("128:4:1"), Some(streams(true)));
        assert_eq!(parse_layout("128:4:0"), Some(streams(false)));
        let bad =
            ["0:*", "100:*", "16:*", "1056:*", "*:0", "*:65536", "128:4:2", "1:1:1:1", "x", "128:-1", "4294967424:*"];
        for bad in bad {
            assert_eq!(parse_layout(bad), None, "{bad}");
        }
    }

    #[test]
    fn activation_layout_override_is_followed_exactly() {
        let unforced = LayoutOverride::default();
        assert_eq!(geometry(16384, 14336, unforced).unwrap(), ((14, 4096), 128), "planner: 4 rows a thread");
        assert_eq!(geometry(16, 4096, unforced).unwrap(), ((4, 16), 128), "few rows: a row a thread");
        assert_eq!(geometry(128, 4096, unforced).unwrap(), ((4, 128), 128), "128 stepped blocks < 132 SMs");
        assert_eq!(geometry(128, 14336, unforced).unwrap(), ((14, 32), 128), "448 stepped blocks ≥ 132 SMs");
        assert_eq!(geometry(16384, 14336, forced(Some(512), None)).unwrap(), ((4, 4096), 512));
        assert_eq!(geometry(16384, 14336, forced(None, Some(16384))).unwrap(), ((14, 16384), 128));
        assert_eq!(geometry(128, 4096, forced(Some(64), Some(32))).unwrap(), ((8, 32), 64));
        // Nothing clamped: a block wider than the row, more y blocks than rows.
        assert_eq!(geometry(3, 64, forced(Some(1024), Some(100))).unwrap(), ((1, 100), 1024));
        let error = plan(128, 4096, 8).geometry(132, 512, forced(Some(1024), None)).unwrap_err();
        let text = error.to_string();
        assert!(
            matches!(error, Error::Config(_)) && text.contains(LAYOUT_VAR) && text.contains("at most 512"),
            "{text}"
        );
    }

    #[test]
    fn activation_calls_larger_than_l2_stream() {
        const H200_L2: u64 = 50 << 20;
        assert!(!plan(1024, 4096, 8).streams(H200_L2), "25 MB: cached");
        assert!(!plan(2133, 4096, 8).streams(H200_L2), "just under 50 MiB moved: cached");
        assert!(plan(2134, 4096, 8).streams(H200_L2), "just past 50 MiB");
        assert!(plan(1024, 11008, 8).streams(H200_L2), "68 MB");
        assert!(plan(16384, 14336, 8).streams(H200_L2), "1.4 GB moved");
        assert!(plan(u64::MAX, 1 << 20, 8).streams(H200_L2), "no overflow");
    }

    #[test]
    fn activation_every_launch_covers_its_vectors_within_limits() {
        for width in [1u32, 7, 64, 111, 1004, 4096, 11008, 14336, 1 << 20] {
            for rows in [1u64, 16, 989, 16384, 5_000_000_000] {
                for vec in [1, 2, 4, 8].into_iter().filter(|v| width.is_multiple_of(*v)) {
                    for block in [None, Some(32), Some(64), Some(128), Some(256), Some(512), Some(1024)] {
                        for grid_y in [None, Some(1), Some(rows.min(MAX_GRID_Y) as u32), Some(65535)] {
                            let what = format!("{rows} × {width} v{vec} {block:?}:{grid_y:?}");
                            let ((x, y), b) =
                                plan(rows, width, vec).geometry(132, 1024, forced(block, grid_y)).unwrap();
                            assert!(b.is_multiple_of(32) && (32..=1024).contains(&b), "{what}: {b}");
                            assert!(x as u64 * b as u64 >= (width / vec) as u64, "{what}: every vector");
                            assert!(x <= i32::MAX as u32 && (1..=MAX_GRID_Y as u32).contains(&y), "{what}: {x} × {y}");
                            assert_eq!((block.unwrap_or(b), grid_y.unwrap_or(y)), (b, y), "{what}: as forced");
                        }
                    }
                }
            }
        }
    }
}
