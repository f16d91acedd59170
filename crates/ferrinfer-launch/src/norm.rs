//! The norm family at layers 1 and 4: `rmsnorm` validates its arguments, then runs on the CPU
//! backend or launches the kernel of `ferrinfer-kernels/src/norm.rs` on the caller's stream.

use ferrinfer_jit::norm::{NormOp, gen_norm_spec};
use ferrinfer_kernels::element::DType;
use ferrinfer_kernels::norm::NormParams;

use crate::layout::{self, RowLayout};
use crate::{Device, Error, Stream, TensorView, cpu, cuda};

/// Most threads a norm block may have (the kernel's reduction holds one slot per warp).
const MAX_BLOCK: u64 = 1024;

/// `out = input / √(mean(input²) + eps) · weight` over the last dimension, accumulating in f32.
///
/// - `input`: f16, bf16 or f32, any rank ≥ 1, the last dimension contiguous, leading dimensions
///   collapsible into rows (a row stride ≥ the row length, e.g. rows of a larger buffer).
/// - `weight`: one contiguous row, `[hidden]`, of `input`'s dtype.
/// - `out`: writable, `input`'s shape and dtype, its own row stride. It may be `input` itself (the
///   identical view: in place) but must not otherwise overlap `input`, nor overlap `weight`.
/// - `eps`: finite, ≥ 0.
/// - `stream`: [`Stream::Cpu`] for host tensors, or the CUDA stream to launch on (never a stream
///   ferrinfer picks) for tensors on that stream's device.
///
/// Addresses need only element alignment: the vector width narrows (down to 1) until every
/// address and row stride allows it. Every check runs before anything is written, so on error
/// `out` is untouched.
pub fn rmsnorm(
    input: &TensorView,
    weight: &TensorView,
    out: &mut TensorView,
    eps: f32,
    stream: Stream,
) -> Result<(), Error> {
    let plan = NormPlan::new(input, weight, out, eps, &stream)?;
    match stream {
        Stream::Cpu => {
            cpu::rmsnorm(plan.dtype, &plan.params);
            Ok(())
        }
        Stream::Cuda(stream) => {
            let block = plan.block_size();
            let launch = cuda::Launch {
                module: cuda::ModuleKey { family: "norm", variant: NormOp::RmsNorm as u32, dtype: plan.dtype },
                spec: |arch, debug| gen_norm_spec(NormOp::RmsNorm, plan.dtype, arch, debug),
                vec: plan.vec,
                params: plan.params,
                grid: |sms| plan.grid_size(block, sms),
                block,
            };
            launch.run(stream)
        }
    }
}

/// A validated norm call: the kernel's parameters, dtype and vector width.
struct NormPlan {
    params: NormParams,
    dtype: DType,
    vec: u32,
}

impl NormPlan {
    fn new(
        input: &TensorView,
        weight: &TensorView,
        out: &TensorView,
        eps: f32,
        stream: &Stream,
    ) -> Result<Self, Error> {
        if !eps.is_finite() || eps < 0.0 {
            return Err(Error::InvalidEps(eps));
        }
        let (device, dtype) = (input.device(), input.dtype());
        check_stream(stream, device)?;
        for (argument, view) in [("weight", weight), ("out", out)] {
            layout::check_device(argument, view, "input", device)?;
            layout::check_dtype(argument, view, "input", dtype)?;
        }
        for (argument, view) in [("input", input), ("weight", weight), ("out", out)] {
            layout::check_aligned(argument, view)?;
        }
        layout::check_writable("out", out)?;
        let x = layout::row_layout("input", input)?;
        check_weight(weight, x.hidden)?;
        if out.shape() != input.shape() {
            let expected = format!("{:?} (the shape of `input`)", input.shape());
            return Err(Error::ShapeMismatch { argument: "out", expected, found: out.shape().to_vec() });
        }
        let y = layout::row_layout("out", out)?;
        check_aliasing(input, weight, out)?;
        if x.hidden > u32::MAX as u64 {
            return Err(Error::TooLarge {
                argument: "input",
                what: "the row length",
                value: x.hidden,
                limit: u32::MAX as u64,
            });
        }
        let addresses = [input.address(), weight.address(), out.address()];
        let vec = layout::vector_width(dtype, x.hidden, &[x.row_stride, y.row_stride], &addresses);
        Ok(Self { params: params(input, weight, out, x, y, eps), dtype, vec })
    }

    /// One thread per vector of the row, in whole warps, at most 1024.
    fn block_size(&self) -> u32 {
        let vectors = self.params.hidden as u64 / self.vec as u64;
        (vectors.div_ceil(32) * 32).clamp(32, MAX_BLOCK) as u32
    }

    /// A block per row, but no more blocks than the device holds at once (they stride over rows).
    fn grid_size(&self, block: u32, multiprocessors: u32) -> u32 {
        let resident_per_sm = (2048 / block).clamp(1, 32);
        self.params.rows.min((multiprocessors * resident_per_sm) as u64) as u32
    }
}

fn check_stream(stream: &Stream, device: Device) -> Result<(), Error> {
    match stream.device() {
        found if found == device => Ok(()),
        found => Err(Error::DeviceMismatch { argument: "stream", reference: "input", expected: device, found }),
    }
}

fn check_weight(weight: &TensorView, hidden: u64) -> Result<(), Error> {
    let w = layout::row_layout("weight", weight)?;
    if weight.shape() != [hidden as i64] || w.rows != 1 {
        let expected = format!("[{hidden}] (the last dimension of `input`)");
        return Err(Error::ShapeMismatch { argument: "weight", expected, found: weight.shape().to_vec() });
    }
    Ok(())
}

/// `out` may be `input` itself, nothing else it could race with.
fn check_aliasing(input: &TensorView, weight: &TensorView, out: &TensorView) -> Result<(), Error> {
    if layout::overlaps(out, weight) {
        return Err(Error::Overlap { argument: "out", other: "weight" });
    }
    if layout::overlaps(out, input) && !layout::same_view(out, input) {
        return Err(Error::Overlap { argument: "out", other: "input" });
    }
    Ok(())
}

fn params(
    input: &TensorView,
    weight: &TensorView,
    out: &TensorView,
    x: RowLayout,
    y: RowLayout,
    eps: f32,
) -> NormParams {
    NormParams {
        input: input.address(),
        weight: weight.address(),
        output: out.address(),
        rows: x.rows,
        input_row_stride: x.row_stride,
        output_row_stride: y.row_stride,
        hidden: x.hidden as u32,
        eps,
    }
}
