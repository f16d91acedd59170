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

use crate::cuda::{self, KernelModule, Launch, Limits, ModuleCache};
use crate::layout;
use crate::op::{Call, FamilyOp, Problem};
use crate::{Error, Stream, TensorView, cpu, logging};

/// The activation family's ops, one line each (grammar: [`define_ops!`](crate::define_ops)).
#[macro_export]
macro_rules! activation_ops {
    ($callback:path) => {
        $callback! {
            family activation;
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
    };
}

crate::activation_ops!(crate::define_ops);

impl FamilyOp for ActivationKernel {
    fn run(&self, call: &Call) -> Result<(), Error> {
        let [input, out] = call.tensors()?;
        let Some(plan) = plan(input, out, &call.stream)? else { return Ok(()) };
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
                cuda::launch(stream, &MODULES, module, |limits| plan.kernel(entry, limits))
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
    let (device, dtype) = (input.device(), input.dtype());
    if stream.device() != device {
        return Err(Error::DeviceMismatch {
            argument: "stream",
            reference: "input",
            expected: device,
            found: stream.device(),
        });
    }
    layout::check_device("out", out, "input", device)?;
    for (argument, view) in [("input", input), ("out", out)] {
        layout::check_aligned(argument, view)?;
    }
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
/// Rows a thread visits per step (the kernel's `ROWS_PER_STEP`): the grid's y dimension needs
/// no more than `rows / 4` to give every thread a full step.
const ROWS_PER_STEP: u64 = 4;
/// The grid's y dimension at most (CUDA's limit).
const MAX_GRID_Y: u64 = 65_535;
/// Blocks per multiprocessor below which a thread takes one row, not a step of them.
const FILL_BLOCKS_PER_SM: u64 = 4;

impl Plan {
    /// Vectors across the grid's x dimension, rows across y (the kernel strides over the rest).
    fn kernel(&self, entry: usize, limits: &Limits) -> Launch<ActivationParams> {
        let vectors = (self.params.width / self.vec).max(1);
        let block = BLOCK_THREADS.min(vectors.next_multiple_of(32)).min(limits.max_threads(entry).max(32));
        let grid_x = vectors.div_ceil(block);
        // Rows a step each when that still fills the GPU; few rows (latency-bound) get a thread
        // each instead (T = 16 ran 4 rows a thread on 16 blocks: 1.9 µs against torch's 1.3).
        let stepped = self.params.rows.div_ceil(ROWS_PER_STEP);
        let fills = grid_x as u64 * stepped >= FILL_BLOCKS_PER_SM * limits.multiprocessors as u64;
        let grid_y = if fills { stepped } else { self.params.rows }.clamp(1, MAX_GRID_Y) as u32;
        Launch { entry, params: self.params, grid: (grid_x, grid_y), block }
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
