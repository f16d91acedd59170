//! The `candle` feature: ferrinfer's norm ops as candle ops, on candle tensors, without copying.
//!
//! | op | new tensor | in place |
//! |---|---|---|
//! | rmsnorm | [`rmsnorm`], `x.apply_op2_no_bwd(&w, &RmsNorm { eps })` | `x.inplace_op2(&w, &RmsNorm { eps })` |
//! | Gemma's rmsnorm (`1 + w`) | [`gemma_rmsnorm`], [`GemmaRmsNorm`] | `x.inplace_op2(&w, &GemmaRmsNorm { eps })` |
//! | layernorm | [`layernorm`], `x.apply_op3_no_bwd(&gamma, &beta, &LayerNorm { eps })` | `x.inplace_op3(&gamma, &beta, &LayerNorm { eps })` |
//! | fused add + rmsnorm | — | [`fused_add_rmsnorm`], [`gemma_fused_add_rmsnorm`] |
//!
//! candle hands an op each operand's storage and [`Layout`]; every operand becomes a
//! [`TensorView`] of the same memory: the storage's data pointer, the layout's start offset as
//! the byte offset, its dims and strides. Narrowed and sliced tensors therefore run without a
//! copy, as long as ferrinfer's layout rules hold (last dimension contiguous, rows at a stride
//! ≥ the row length); otherwise the error names the argument. CPU tensors run on ferrinfer's CPU
//! backend. CUDA tensors (feature `candle-cuda`) run on the stream of candle's device, with device
//! pointers taken from candle's `CudaSlice`s on that stream; cudarc's guards from
//! `device_ptr`/`device_ptr_mut` are kept until after the launch, so the events cudarc records
//! for cross-stream ordering follow our kernel. No backward pass: these are inference ops.
//!
//! Errors are candle errors ([`candle_core::Error::Wrapped`]) carrying the message of
//! ferrinfer's typed error, which names the argument (`input`, `weight`, `gamma`, `beta`,
//! `residual`, `eps`). Everything is validated before anything is written; a new output is
//! dropped on error.
//!
//! **The fused ops have no `InplaceOp`.** They write two tensors (`residual += input;
//! input = rmsnorm(residual) · weight`), but candle's `InplaceOp2`/`InplaceOp3` write-lock only
//! their first operand (the others are read-locked), and candle-core 0.11.1 keeps the write lock
//! crate-private (`Tensor::storage_mut_and_layout` is `pub(crate)`). So [`fused_add_rmsnorm`]
//! nests two in-place ops: the outer one write-locks one of the two tensors, and inside it the
//! inner one write-locks the other; the kernel runs once both are held. The locks are taken in
//! candle's own order (by storage address, as `Tensor::inplace_op` does), so calls on swapped
//! tensors from two threads cannot deadlock. candle locks a storage as a whole, so `input`,
//! `residual` and `weight` must be three storages: the same tensor twice, or two views of one
//! tensor, is refused with an error naming both arguments (it would otherwise deadlock).

use std::ffi::c_void;

use candle_core::backend::BackendStorage;
use candle_core::{
    CpuStorage, CustomOp2, CustomOp3, InplaceOp1, InplaceOp2, InplaceOp3, Layout, Result, Shape, Storage, Tensor,
    WithDType,
};
use ferrinfer_launch::norm::NormRoutine;
use ferrinfer_launch::{DType, Device, Error, Stream, TensorView};

#[cfg(feature = "candle-cuda")]
use cuda::CudaExec;

/// rmsnorm, `out = x / √(mean(x²) + eps) · weight` over the last dimension: a `CustomOp2`
/// (`x.apply_op2_no_bwd(&weight, &op)`, a new tensor) and an `InplaceOp2` (`x.inplace_op2(&weight,
/// &op)`, `x` normalised in place).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RmsNorm {
    pub eps: f32,
}

/// Gemma's rmsnorm, `x / √(mean(x²) + eps) · (1 + weight)`; used as [`RmsNorm`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GemmaRmsNorm {
    pub eps: f32,
}

/// layernorm, `(x − mean) / √(var + eps) · gamma + beta` (biased variance): a `CustomOp3`
/// (`x.apply_op3_no_bwd(&gamma, &beta, &op)`) and an `InplaceOp3` (`x.inplace_op3(&gamma, &beta,
/// &op)`). `gamma` and `beta` are of `x`'s dtype, or both f32.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerNorm {
    pub eps: f32,
}

/// rmsnorm of `x` over its last dimension, as a new contiguous tensor.
pub fn rmsnorm(x: &Tensor, weight: &Tensor, eps: f32) -> Result<Tensor> {
    x.apply_op2_no_bwd(weight, &RmsNorm { eps })
}

/// Gemma's rmsnorm (`1 + weight`) of `x`, as a new contiguous tensor.
pub fn gemma_rmsnorm(x: &Tensor, weight: &Tensor, eps: f32) -> Result<Tensor> {
    x.apply_op2_no_bwd(weight, &GemmaRmsNorm { eps })
}

/// layernorm of `x` over its last dimension, as a new contiguous tensor.
pub fn layernorm(x: &Tensor, gamma: &Tensor, beta: &Tensor, eps: f32) -> Result<Tensor> {
    x.apply_op3_no_bwd(gamma, beta, &LayerNorm { eps })
}

/// `residual += input; input = rmsnorm(residual) · weight`, both in place, as FlashInfer does.
/// `input`, `residual` and `weight` must not share a storage (see the module docs).
pub fn fused_add_rmsnorm(input: &Tensor, residual: &Tensor, weight: &Tensor, eps: f32) -> Result<()> {
    Fused::run(NormRoutine::FusedAddRmsNorm, input, residual, weight, eps)
}

/// Gemma's fused add + rmsnorm (`1 + weight`), as [`fused_add_rmsnorm`].
pub fn gemma_fused_add_rmsnorm(input: &Tensor, residual: &Tensor, weight: &Tensor, eps: f32) -> Result<()> {
    Fused::run(NormRoutine::GemmaFusedAddRmsNorm, input, residual, weight, eps)
}

/// ferrinfer's error, the candle way: its message (which names the argument) in a candle error.
fn to_candle(error: Error) -> candle_core::Error {
    candle_core::Error::wrap(error)
}

/// The candle ops: `$custom` (new output) and `$inplace` for `$op`, whose operands after the
/// input are named `$param` (as ferrinfer names them), for CPU and, with `candle-cuda`, CUDA.
macro_rules! norm_ops {
    ($op:ident, $name:literal, $routine:ident, $custom:ident, $inplace:ident, [$($param:ident, $layout:ident);+]) => {
        impl $custom for $op {
            fn name(&self) -> &'static str {
                $name
            }

            fn cpu_fwd(
                &self,
                x: &CpuStorage,
                x_layout: &Layout,
                $($param: &CpuStorage, $layout: &Layout),+
            ) -> Result<(CpuStorage, Shape)> {
                new_output(NormRoutine::$routine, self.eps, (x, x_layout), [$((stringify!($param), $param, $layout)),+])
            }

            #[cfg(feature = "candle-cuda")]
            fn cuda_fwd(
                &self,
                x: &candle_core::CudaStorage,
                x_layout: &Layout,
                $($param: &candle_core::CudaStorage, $layout: &Layout),+
            ) -> Result<(candle_core::CudaStorage, Shape)> {
                new_output(NormRoutine::$routine, self.eps, (x, x_layout), [$((stringify!($param), $param, $layout)),+])
            }
        }

        impl $inplace for $op {
            fn name(&self) -> &'static str {
                $name
            }

            fn cpu_fwd(
                &self,
                x: &mut CpuStorage,
                x_layout: &Layout,
                $($param: &CpuStorage, $layout: &Layout),+
            ) -> Result<()> {
                in_place(NormRoutine::$routine, self.eps, (x, x_layout), [$((stringify!($param), $param, $layout)),+])
            }

            #[cfg(feature = "candle-cuda")]
            fn cuda_fwd(
                &self,
                x: &mut candle_core::CudaStorage,
                x_layout: &Layout,
                $($param: &candle_core::CudaStorage, $layout: &Layout),+
            ) -> Result<()> {
                in_place(NormRoutine::$routine, self.eps, (x, x_layout), [$((stringify!($param), $param, $layout)),+])
            }
        }
    };
}

norm_ops!(RmsNorm, "ferrinfer-rmsnorm", RmsNorm, CustomOp2, InplaceOp2, [weight, weight_layout]);
norm_ops!(GemmaRmsNorm, "ferrinfer-gemma-rmsnorm", GemmaRmsNorm, CustomOp2, InplaceOp2, [weight, weight_layout]);
norm_ops!(LayerNorm, "ferrinfer-layernorm", LayerNorm, CustomOp3, InplaceOp3, [gamma, gamma_layout; beta, beta_layout]);

/// A storage operand of a call: argument name, storage, layout.
type Operand<'a, S> = (&'static str, &'a S, &'a Layout);

/// A non-fused op into a new contiguous storage shaped like `x`.
fn new_output<S: Backend, const N: usize>(
    routine: NormRoutine,
    eps: f32,
    (x, x_layout): (&S, &Layout),
    params: [Operand<'_, S>; N],
) -> Result<(S, Shape)> {
    let exec = x.exec();
    let input = x.view("input", x_layout, &exec)?;
    let params = params.iter().map(|(argument, storage, layout)| storage.view(argument, layout, &exec));
    let params = params.collect::<Result<Vec<_>>>()?;
    let shape = x_layout.shape().clone();
    let mut out = x.alloc_like(shape.elem_count())?;
    {
        // Scoped: the view (and its CUDA guard) must end before `out` is returned.
        let out_view = out.view_mut("out", &Layout::contiguous(&shape), &exec)?;
        Operands::norm(&input, &params, &out_view).run(routine, eps, &exec)?;
    }
    Ok((out, shape))
}

/// A non-fused op writing `x` itself (ferrinfer allows `out` to be the identical view of `input`).
fn in_place<S: Backend, const N: usize>(
    routine: NormRoutine,
    eps: f32,
    (x, x_layout): (&mut S, &Layout),
    params: [Operand<'_, S>; N],
) -> Result<()> {
    let exec = x.exec();
    let params = params.iter().map(|(argument, storage, layout)| storage.view(argument, layout, &exec));
    let params = params.collect::<Result<Vec<_>>>()?;
    let input = x.view_mut("input", x_layout, &exec)?;
    Operands::norm(&input, &params, &input).run(routine, eps, &exec)
}

/// The views of one call, by the role `ferrinfer_launch::norm` gives them.
struct Operands<'a, 'v> {
    input: &'a TensorView<'v>,
    residual: Option<&'a TensorView<'v>>,
    weight: &'a TensorView<'v>,
    bias: Option<&'a TensorView<'v>>,
    out: &'a TensorView<'v>,
}

impl<'a, 'v> Operands<'a, 'v> {
    /// A non-fused op's operands: the input, then weight (rmsnorm) or gamma and beta (layernorm).
    fn norm(input: &'a Viewed<'v>, params: &'a [Viewed<'v>], out: &'a Viewed<'v>) -> Self {
        let weight = params.first().map_or(&input.view, |w| &w.view);
        let bias = params.get(1).map(|b| &b.view);
        Operands { input: &input.view, residual: None, weight, bias, out: &out.view }
    }

    /// Runs `routine`; roles it does not take get stand-ins that `NormRoutine::run` ignores.
    fn run(&self, routine: NormRoutine, eps: f32, exec: &Exec) -> Result<()> {
        let (mut input, mut out) = (self.input.clone(), self.out.clone());
        let mut residual = self.residual.unwrap_or(self.input).clone();
        let bias = self.bias.unwrap_or(self.weight);
        routine.run(&mut input, &mut residual, self.weight, bias, &mut out, eps, exec.stream()).map_err(to_candle)
    }
}

/// What a call runs on: the CPU backend or the CUDA stream of candle's device (owned, so device
/// pointers can be taken on it for as long as the call lasts).
enum Exec {
    Cpu,
    #[cfg(feature = "candle-cuda")]
    Cuda(CudaExec),
}

impl Exec {
    /// The backend of `device`: candle's stream for a CUDA device.
    fn of(device: &candle_core::Device) -> Result<Self> {
        match device {
            candle_core::Device::Cpu => Ok(Exec::Cpu),
            #[cfg(feature = "candle-cuda")]
            candle_core::Device::Cuda(device) => Ok(Exec::Cuda(CudaExec::new(device))),
            other => Err(candle_core::Error::Msg(format!(
                "ferrinfer's candle ops run on CPU{} tensors; `input` is on {:?}",
                if cfg!(feature = "candle-cuda") { " and CUDA" } else { " (feature candle-cuda for CUDA)" },
                other.location()
            ))),
        }
    }

    fn stream(&self) -> Stream<'_> {
        match self {
            Exec::Cpu => Stream::Cpu,
            #[cfg(feature = "candle-cuda")]
            Exec::Cuda(cuda) => Stream::Cuda(cuda.stream()),
        }
    }
}

/// A view of an operand, and (CUDA) cudarc's guard for its device pointer: it records the
/// stream's work on the slice's event when dropped, so it must outlive the launch.
struct Viewed<'s> {
    view: TensorView<'s>,
    #[cfg(feature = "candle-cuda")]
    _guard: Option<ferrinfer_launch::cudarc::driver::SyncOnDrop<'s>>,
}

impl<'s> Viewed<'s> {
    fn host(view: TensorView<'s>) -> Self {
        Viewed {
            view,
            #[cfg(feature = "candle-cuda")]
            _guard: None,
        }
    }
}

/// A candle backend's storage, as ferrinfer views it.
trait Backend: Sized {
    /// What an op on this storage runs on.
    fn exec(&self) -> Exec;
    /// A view of `layout` in this storage, to read.
    fn view<'s>(&'s self, argument: &'static str, layout: &Layout, exec: &'s Exec) -> Result<Viewed<'s>>;
    /// A view of `layout` in this storage, to write.
    fn view_mut<'s>(&'s mut self, argument: &'static str, layout: &Layout, exec: &'s Exec) -> Result<Viewed<'s>>;
    /// Storage for `len` elements of this storage's dtype on its device (contents unspecified).
    fn alloc_like(&self, len: usize) -> Result<Self>;
}

/// Evaluates `$body` with `$data` bound to the data of `$storage` (a variant of `$kind`, candle's
/// per-dtype storage enum) and `$t` naming its element type, giving `Ok(($body, dtype))` for the
/// dtypes ferrinfer runs, `Err($otherwise)` for the rest (evaluated only then: errors capture a
/// backtrace when RUST_BACKTRACE is set, far too slow for every call).
macro_rules! with_float_data {
    ($kind:ident, $storage:expr, |$data:ident: $t:ident| $body:expr, else $otherwise:expr) => {
        match $storage {
            $kind::F16($data) => {
                #[allow(dead_code)]
                type $t = half::f16;
                Ok(($body, DType::F16))
            }
            $kind::BF16($data) => {
                #[allow(dead_code)]
                type $t = half::bf16;
                Ok(($body, DType::Bf16))
            }
            $kind::F32($data) => {
                #[allow(dead_code)]
                type $t = f32;
                Ok(($body, DType::F32))
            }
            _ => Err($otherwise),
        }
    };
}
/// candle dtypes ferrinfer does not run.
fn unsupported_dtype(argument: &'static str, dtype: candle_core::DType) -> candle_core::Error {
    let reason = format!("candle dtype {}; expected f16, bf16 or f32", dtype.as_str());
    to_candle(Error::UnsupportedLayout { argument, reason })
}

/// A view of `layout` over `len` elements of `dtype` at `data` on `device`.
///
/// # Safety
/// `data` must point at `len` elements of `dtype` on `device`, valid (and, if the view is
/// written, writable and not otherwise borrowed) for `'s`.
unsafe fn view_of_layout<'s>(
    argument: &'static str,
    (data, len, dtype): (*mut c_void, usize, DType),
    layout: &Layout,
    device: Device,
) -> Result<TensorView<'s>> {
    let (dims, strides) = (layout.dims(), layout.stride());
    // candle's layouts stay inside their storage; checked anyway, since the view is unchecked.
    let last = dims
        .iter()
        .zip(strides)
        .try_fold(layout.start_offset(), |end, (&d, &s)| end.checked_add(d.checked_sub(1)?.checked_mul(s)?));
    if last.is_some_and(|last| last >= len) {
        let strides = strides.iter().map(|&s| s as i64).collect();
        return Err(to_candle(Error::OutOfBounds { argument, len, shape: dims.to_vec(), strides }));
    }
    let shape: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
    let strides: Vec<i64> = strides.iter().map(|&s| s as i64).collect();
    let byte_offset = (layout.start_offset() * dtype.size()) as u64;
    // SAFETY: forwarded to the caller; the layout was checked to stay within the `len` elements.
    let view = unsafe { TensorView::from_raw_parts(data, byte_offset, dtype, &shape, &strides, device) };
    view.map_err(|error| match error {
        Error::UnsupportedLayout { reason, .. } => to_candle(Error::UnsupportedLayout { argument, reason }),
        error => to_candle(error),
    })
}

impl Backend for CpuStorage {
    fn exec(&self) -> Exec {
        Exec::Cpu
    }

    fn view<'s>(&'s self, argument: &'static str, layout: &Layout, _: &'s Exec) -> Result<Viewed<'s>> {
        let candle_dtype = self.dtype();
        // Read through this pointer only: `view` operands are never written by the ops.
        let ((data, len), dtype) = with_float_data!(CpuStorage, self,
            |v: T| (v.as_ptr().cast_mut().cast(), v.len()),
            else unsupported_dtype(argument, candle_dtype))?;
        // SAFETY: the Vec's elements, borrowed for 's.
        Ok(Viewed::host(unsafe { view_of_layout(argument, (data, len, dtype), layout, Device::Cpu)? }))
    }

    fn view_mut<'s>(&'s mut self, argument: &'static str, layout: &Layout, _: &'s Exec) -> Result<Viewed<'s>> {
        let candle_dtype = self.dtype();
        let ((data, len), dtype) = with_float_data!(CpuStorage, self,
            |v: T| (v.as_mut_ptr().cast(), v.len()),
            else unsupported_dtype(argument, candle_dtype))?;
        // SAFETY: the Vec's elements, borrowed mutably for 's.
        Ok(Viewed::host(unsafe { view_of_layout(argument, (data, len, dtype), layout, Device::Cpu)? }))
    }

    fn alloc_like(&self, len: usize) -> Result<Self> {
        let candle_dtype = self.dtype();
        let zeros = with_float_data!(CpuStorage, self,
            |_v: T| T::to_cpu_storage_owned(vec![T::from_f64(0.0); len]),
            else unsupported_dtype("input", candle_dtype));
        zeros.map(|(storage, _)| storage)
    }
}

/// Where `tensor`'s storage lives: equal for tensors sharing one (a tensor and its views), and
/// ordered as candle orders its locks (candle's crate-private `Tensor::storage_key` is the
/// address of the lock holding this storage, at a fixed offset from it). The read lock is
/// released before returning.
fn storage_key(tensor: &Tensor) -> usize {
    let (storage, _) = tensor.storage_and_layout();
    std::ptr::from_ref::<Storage>(&storage).addr()
}

/// The fused ops: which tensor each of the two nested in-place ops locks (see the module docs).
struct Fused<'t> {
    routine: NormRoutine,
    eps: f32,
    exec: Exec,
    /// The written tensors, in candle's lock order: the outer step locks `first`.
    first: (&'static str, &'t Tensor),
    second: (&'static str, &'t Tensor),
    weight: &'t Tensor,
    /// Whether the outer step read-locks `weight` (it precedes `second` in lock order).
    weight_first: bool,
}

impl<'t> Fused<'t> {
    fn run(routine: NormRoutine, input: &'t Tensor, residual: &'t Tensor, weight: &'t Tensor, eps: f32) -> Result<()> {
        let tensors = [("input", input), ("residual", residual), ("weight", weight)];
        let keys = tensors.map(|(_, tensor)| storage_key(tensor));
        for (a, b) in [(0, 1), (0, 2), (1, 2)] {
            if keys[a] == keys[b] {
                let reason = format!(
                    "shares its candle storage with `{}` (the same tensor, or views of one); candle locks a storage as a whole, so the fused op needs separate tensors",
                    tensors[a].0
                );
                return Err(to_candle(Error::UnsupportedLayout { argument: tensors[b].0, reason }));
            }
        }
        let (first, second) = if keys[0] < keys[1] { (0, 1) } else { (1, 0) };
        let (weight_first, first, second) = (keys[2] < keys[second], tensors[first], tensors[second]);
        let fused = Fused { routine, eps, exec: Exec::of(input.device())?, first, second, weight, weight_first };
        fused.lock(first.1, weight_first, &FusedStep { fused: &fused, held: Vec::new() })
    }

    /// Write-locks `tensor` (and read-locks the weight if `with_weight`) for `step`.
    fn lock(&self, tensor: &Tensor, with_weight: bool, step: &FusedStep) -> Result<()> {
        if with_weight { tensor.inplace_op2(self.weight, step) } else { tensor.inplace_op1(step) }
    }
}

/// One of the fused call's nested in-place ops. The outer step (nothing held yet) views the
/// tensor it locked and locks the other in an inner step; the inner step runs the op.
struct FusedStep<'f, 'v> {
    fused: &'f Fused<'f>,
    /// Views taken by the outer step, by argument name.
    held: Vec<(&'static str, TensorView<'v>)>,
}

impl FusedStep<'_, '_> {
    fn forward<S: Backend>(&self, locked: &mut S, layout: &Layout, weight: Option<(&S, &Layout)>) -> Result<()> {
        let fused = self.fused;
        let outer = self.held.is_empty();
        let argument = if outer { fused.first.0 } else { fused.second.0 };
        let weight = weight.map(|(storage, layout)| storage.view("weight", layout, &fused.exec)).transpose()?;
        let locked = locked.view_mut(argument, layout, &fused.exec)?;
        let mut held = self.held.clone();
        held.push((argument, locked.view.clone()));
        held.extend(weight.as_ref().map(|w| ("weight", w.view.clone())));
        if outer {
            let inner = FusedStep { fused, held };
            return fused.lock(fused.second.1, !fused.weight_first, &inner);
        }
        let view = |name| held.iter().find(|(argument, _)| *argument == name).map(|(_, view)| view);
        let (Some(input), Some(residual), Some(weight)) = (view("input"), view("residual"), view("weight")) else {
            return Err(candle_core::Error::Msg("ferrinfer: a fused op ran before every operand was locked".into()));
        };
        let operands = Operands { input, residual: Some(residual), weight, bias: None, out: input };
        operands.run(fused.routine, fused.eps, &fused.exec)
        // `locked` and `weight` (with their cudarc guards) drop here, after the launch.
    }
}

impl InplaceOp1 for FusedStep<'_, '_> {
    fn name(&self) -> &'static str {
        self.fused.routine.name()
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> Result<()> {
        self.forward(storage, layout, None)
    }

    #[cfg(feature = "candle-cuda")]
    fn cuda_fwd(&self, storage: &mut candle_core::CudaStorage, layout: &Layout) -> Result<()> {
        self.forward(storage, layout, None)
    }
}

impl InplaceOp2 for FusedStep<'_, '_> {
    fn name(&self) -> &'static str {
        self.fused.routine.name()
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout, weight: &CpuStorage, w_layout: &Layout) -> Result<()> {
        self.forward(storage, layout, Some((weight, w_layout)))
    }

    #[cfg(feature = "candle-cuda")]
    fn cuda_fwd(
        &self,
        storage: &mut candle_core::CudaStorage,
        layout: &Layout,
        weight: &candle_core::CudaStorage,
        w_layout: &Layout,
    ) -> Result<()> {
        self.forward(storage, layout, Some((weight, w_layout)))
    }
}

#[cfg(feature = "candle-cuda")]
mod cuda {
    //! CUDA storage: device pointers of candle's `CudaSlice`s, taken on the stream the op runs on.

    use std::sync::Arc;

    use candle_core::backend::BackendStorage;
    use candle_core::cuda_backend::CudaStorageSlice;
    use candle_core::{CudaDevice, CudaStorage, Layout, Result};
    use ferrinfer_launch::cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut};
    use ferrinfer_launch::{DType, Device, Error};

    use super::{Backend, Exec, Viewed, to_candle, unsupported_dtype, view_of_layout};

    /// candle's stream for a CUDA device: where its own kernels run, so ours are ordered with them.
    pub struct CudaExec {
        stream: Arc<CudaStream>,
    }

    impl CudaExec {
        pub(super) fn new(device: &CudaDevice) -> Self {
            CudaExec { stream: device.cuda_stream() }
        }

        pub(super) fn stream(&self) -> &CudaStream {
            &self.stream
        }
    }

    /// The stream to take `argument`'s device pointer on: the call's, which must be on the
    /// slice's device (only the fused ops can mix devices).
    fn stream_for<'e>(exec: &'e Exec, argument: &'static str, ordinal: usize) -> Result<&'e CudaStream> {
        let found = Device::Cuda(ordinal);
        match exec {
            Exec::Cuda(cuda) if cuda.stream.context().ordinal() == ordinal => Ok(&cuda.stream),
            exec => {
                let expected = exec.stream().device();
                Err(to_candle(Error::DeviceMismatch { argument, reference: "input", expected, found }))
            }
        }
    }

    impl Backend for CudaStorage {
        fn exec(&self) -> Exec {
            Exec::Cuda(CudaExec::new(&self.device))
        }

        fn view<'s>(&'s self, argument: &'static str, layout: &Layout, exec: &'s Exec) -> Result<Viewed<'s>> {
            let candle_dtype = self.dtype();
            let ((slice, guard), dtype) = with_float_data!(CudaStorageSlice, &self.slice, |s: T| {
                let stream = stream_for(exec, argument, s.ordinal())?;
                ((s.ordinal(), s.len()), s.device_ptr(stream))
            }, else unsupported_dtype(argument, candle_dtype))?;
            view_of_cuda(argument, slice, guard, dtype, layout)
        }

        fn view_mut<'s>(&'s mut self, argument: &'static str, layout: &Layout, exec: &'s Exec) -> Result<Viewed<'s>> {
            let candle_dtype = self.dtype();
            let ((slice, guard), dtype) = with_float_data!(CudaStorageSlice, &mut self.slice, |s: T| {
                let stream = stream_for(exec, argument, s.ordinal())?;
                ((s.ordinal(), s.len()), s.device_ptr_mut(stream))
            }, else unsupported_dtype(argument, candle_dtype))?;
            view_of_cuda(argument, slice, guard, dtype, layout)
        }

        fn alloc_like(&self, len: usize) -> Result<Self> {
            let (device, candle_dtype) = (self.device.clone(), self.dtype());
            // SAFETY: the contents are unspecified until the op writes every element; on error the
            // storage is dropped unread.
            let storage = with_float_data!(CudaStorageSlice, &self.slice, |_s: T| {
                CudaStorage::wrap_cuda_slice(unsafe { device.alloc::<T>(len) }?, device.clone())
            }, else unsupported_dtype("input", candle_dtype));
            storage.map(|(storage, _)| storage)
        }
    }

    /// The view of a device pointer (`pointer`, with its guard) to `len` elements on `ordinal`.
    fn view_of_cuda<'s>(
        argument: &'static str,
        (ordinal, len): (usize, usize),
        (pointer, guard): (u64, ferrinfer_launch::cudarc::driver::SyncOnDrop<'s>),
        dtype: DType,
        layout: &Layout,
    ) -> Result<Viewed<'s>> {
        let device = Device::Cuda(ordinal);
        // SAFETY: the slice's `len` elements on `ordinal`, borrowed (mutably for view_mut) for 's.
        let view = unsafe { view_of_layout(argument, (pointer as *mut _, len, dtype), layout, device)? };
        Ok(Viewed { view, _guard: Some(guard) })
    }
}
