//! The `candle` feature: every op of the registry as a candle op, on candle tensors, without
//! copying — made from each family's op table.
//!
//! - [`Op`] (`Op::new("rmsnorm", &[Scalar::F32(eps)])`) is the op as a `CustomOp1/2/3` (a new output:
//!   `x.apply_op2_no_bwd(&w, &op)`) and an `InplaceOp1/2/3` (the first operand is the output:
//!   `x.inplace_op2(&w, &op)`, for ops whose output has the first input's shape).
//! - Helpers per op, made by [`candle_functions!`] from the table: `rmsnorm(&x, &w, eps)` returns a
//!   new contiguous tensor; in-place ops such as `fused_add_rmsnorm(&input, &residual, &weight,
//!   eps)` update their tensors.
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
//! ferrinfer's typed error, which names the argument. Everything is validated before anything is
//! written; a new output is dropped on error.
//!
//! **Ops that write several tensors have no `InplaceOp` or `CustomOp`** (the fused norms update
//! `input` and `residual`; `merge_state` writes values and scores; `merge_state_in_place` updates
//! both and reads four tensors in all): candle's `InplaceOp2`/`InplaceOp3` write-lock only their
//! first operand, its custom ops take at most three, and candle-core 0.11.1 keeps the write lock
//! crate-private (`Tensor::storage_mut_and_layout` is `pub(crate)`). So their helpers lock every
//! operand in turn: a written one by an in-place op on it, inside which the next is locked; a
//! read one by its public read guard (`Tensor::storage_and_layout`); the kernel runs once all
//! are held (new outputs are allocated first, then written the same way). The locks are taken in
//! candle's own order (by storage address, as `Tensor::inplace_op` does), so calls on swapped
//! tensors from two threads cannot deadlock. candle locks a storage as a whole, so every tensor
//! of such a call must have its own storage: the same tensor twice, or two views of one tensor,
//! is refused with an error naming both arguments (it would otherwise deadlock).

use std::ffi::c_void;

use candle_core::backend::BackendStorage;
use candle_core::{
    CpuStorage, CustomOp1, CustomOp2, CustomOp3, InplaceOp1, InplaceOp2, InplaceOp3, Layout, Result, Shape, Storage,
    Tensor, WithDType,
};
pub use ferrinfer_launch::Scalar;
use ferrinfer_launch::op::{DTypeRule, Extent, OpInfo, Role};
use ferrinfer_launch::scalar::ScalarType;
use ferrinfer_launch::{DType, Device, Error, Stream, TensorView};

#[cfg(feature = "candle-cuda")]
use cuda::CudaExec;

/// One op of the registry with its scalars, as a candle op (see the module docs).
#[derive(Clone, Debug)]
pub struct Op {
    info: &'static OpInfo,
    scalars: Vec<Scalar>,
}

impl Op {
    /// The op FlashInfer calls `name`, with its scalars (`[Scalar::F32(eps)]` for the norms).
    pub fn new(name: &str, scalars: &[Scalar]) -> Result<Self> {
        let info = ferrinfer_launch::op(name)
            .ok_or_else(|| candle_core::Error::Msg(format!("ferrinfer has no op `{name}`")))?;
        Op::of(info, scalars)
    }

    /// `info` with its scalars.
    pub fn of(info: &'static OpInfo, scalars: &[Scalar]) -> Result<Self> {
        if scalars.len() != info.scalars.len() {
            let expected = info.scalars.iter().map(|s| s.name).collect::<Vec<_>>();
            return Err(candle_core::Error::Msg(format!(
                "`{}` takes scalars {expected:?}; got {}",
                info.name,
                scalars.len()
            )));
        }
        Ok(Op { info, scalars: scalars.to_vec() })
    }

    /// Runs the op on `tensors` (its inputs, in argument order): its new outputs in table order
    /// (none for ops that update their tensors in place).
    pub fn apply(&self, tensors: &[&Tensor]) -> Result<Vec<Tensor>> {
        match self.info.tensors.iter().filter(|t| t.role == Role::Out).count() {
            0 => <()>::run(self, tensors).map(|()| Vec::new()),
            1 => Tensor::run(self, tensors).map(|out| vec![out]),
            _ => <(Tensor, Tensor)>::run(self, tensors).map(|(v, s)| vec![v, s]),
        }
    }

    /// Runs the op on views in argument order.
    fn run(&self, views: &[&TensorView], exec: &Exec) -> Result<()> {
        self.info.call(views, &self.scalars, exec.stream()).map_err(to_candle)
    }

    /// A new contiguous output for an op with one `Out` argument, from its inputs' storages.
    fn new_output<S: Backend>(&self, operands: &[(&S, &Layout)]) -> Result<(S, Shape)> {
        let out_index = self.output_arg()?;
        let out_arg = &self.info.tensors[out_index];
        let first = operands[0].0;
        let exec = first.exec();
        let inputs = self.info.tensors.iter().zip(operands);
        let inputs =
            inputs.map(|(arg, (storage, layout))| storage.view(arg.name, layout, &exec)).collect::<Result<Vec<_>>>()?;
        let input_shapes: Vec<(Extent, &Shape)> =
            self.info.tensors.iter().zip(operands).map(|(arg, (_, layout))| (arg.extent, layout.shape())).collect();
        let shape = output_shape(self, out_index, &input_shapes);
        let mut out = first.alloc_like(shape.elem_count(), out_arg.dtype)?;
        {
            // Scoped: the view (and its CUDA guard) must end before `out` is returned.
            let out_view = out.view_mut(out_arg.name, &Layout::contiguous(&shape), &exec)?;
            let views: Vec<&TensorView> = inputs.iter().map(|v| &v.view).chain([&out_view.view]).collect();
            self.run(&views, &exec)?;
        }
        Ok((out, shape))
    }

    /// The op writing into its first operand (its output is the identical view of `input`).
    fn in_place<S: Backend>(&self, (first, first_layout): (&mut S, &Layout), rest: &[(&S, &Layout)]) -> Result<()> {
        self.output_arg()?;
        let exec = first.exec();
        let names = self.info.tensors.iter().skip(1).map(|a| a.name);
        let rest = names
            .zip(rest)
            .map(|(name, (storage, layout))| storage.view(name, layout, &exec))
            .collect::<Result<Vec<_>>>()?;
        let first = first.view_mut(self.info.tensors[0].name, first_layout, &exec)?;
        let views: Vec<&TensorView> =
            [&first.view].into_iter().chain(rest.iter().map(|v| &v.view)).chain([&first.view]).collect();
        self.run(&views, &exec)
    }

    /// The op's output argument, by position (candle ops produce exactly one).
    fn output_arg(&self) -> Result<usize> {
        let outputs: Vec<usize> =
            (0..self.info.tensors.len()).filter(|&i| self.info.tensors[i].role == Role::Out).collect();
        match outputs.as_slice() {
            [one] => Ok(*one),
            _ => Err(candle_core::Error::Msg(format!(
                "`{}` updates its tensors in place; call ferrinfer_ffi::candle::{} instead of applying it as an op",
                self.info.name, self.info.name
            ))),
        }
    }
}

/// Output `out`'s shape, by [`OpInfo::output_shape`] from the inputs' `(extent, shape)` and the
/// op's scalars.
fn output_shape(op: &Op, out: usize, inputs: &[(Extent, &Shape)]) -> Shape {
    let dims: Vec<Vec<i64>> = inputs.iter().map(|(_, s)| s.dims().iter().map(|&d| d as i64).collect()).collect();
    let inputs: Vec<(Extent, &[i64])> = inputs.iter().zip(&dims).map(|((e, _), d)| (*e, d.as_slice())).collect();
    let shape = op.info.output_shape(out, &inputs, &op.scalars);
    Shape::from(shape.into_iter().map(|d| d.max(0) as usize).collect::<Vec<_>>())
}

/// One helper per op of the registry (`ferrinfer_launch::all_ops!(candle_functions)`): inputs
/// as `&Tensor`, then scalars; returns the new output, or `()` for in-place ops.
macro_rules! candle_functions {
    (
        family $family:ident;
        $(
            $(#[doc = $doc:literal])*
            fn $name:ident($($tensor:ident : $role:ident),+) -> ($($out:ident),*); ($($scalar:ident : $type:ty),*);
        )+
    ) => {
        $(
            $(#[doc = $doc])*
            #[allow(clippy::too_many_arguments)]
            pub fn $name($($tensor: &Tensor,)+ $($scalar: $type,)*) -> Result<returns_of!($($out)*)> {
                let op = Op::of(&ferrinfer_launch::$family::$name::INFO, &[$(ScalarType::into_scalar($scalar)),*])?;
                Produced::run(&op, &[$($tensor),+])
            }
        )+
    };
}

ferrinfer_launch::all_ops!(candle_functions);

/// How a helper runs its op, by what it returns.
trait Produced: Sized {
    fn run(op: &Op, tensors: &[&Tensor]) -> Result<Self>;
}

/// Ops with an output: applied as a custom op on the first tensor.
impl Produced for Tensor {
    fn run(op: &Op, tensors: &[&Tensor]) -> Result<Self> {
        match tensors {
            [a] => a.apply_op1_no_bwd(op),
            [a, b] => a.apply_op2_no_bwd(b, op),
            [a, b, c] => a.apply_op3_no_bwd(b, c, op),
            _ => Err(candle_core::Error::Msg(format!("`{}`: candle ops take 1 to 3 tensors", op.info.name))),
        }
    }
}

/// Ops updating their tensors in place: the nested locks of the module docs.
impl Produced for () {
    fn run(op: &Op, tensors: &[&Tensor]) -> Result<Self> {
        Nested::run(op, tensors)
    }
}

/// Ops with two outputs (`merge_state`'s values and scores, rope's `q_rope` and `k_rope`): both
/// allocated like their source inputs (`OpInfo::output_source`), then written under the nested
/// locks.
impl Produced for (Tensor, Tensor) {
    fn run(op: &Op, tensors: &[&Tensor]) -> Result<Self> {
        let inputs: Vec<(Extent, &Shape)> =
            op.info.tensors.iter().zip(tensors).map(|(a, t)| (a.extent, t.shape())).collect();
        let outputs = (tensors.len()..op.info.tensors.len())
            .map(|out| {
                let (arg, source) = (&op.info.tensors[out], tensors[op.info.output_source(out)]);
                let dtype = match arg.dtype {
                    DTypeRule::F32 => candle_core::DType::F32,
                    DTypeRule::I32 => candle_core::DType::I32,
                    _ => source.dtype(),
                };
                Tensor::zeros(output_shape(op, out, &inputs), dtype, source.device())
            })
            .collect::<Result<Vec<_>>>()?;
        let [v, s] = <[Tensor; 2]>::try_from(outputs)
            .map_err(|_| candle_core::Error::Msg(format!("`{}` has two outputs", op.info.name)))?;
        let operands: Vec<&Tensor> = tensors.iter().copied().chain([&v, &s]).collect();
        Nested::run(op, &operands)?;
        Ok((v, s))
    }
}

/// ferrinfer's error, the candle way: its message (which names the argument) in a candle error.
fn to_candle(error: Error) -> candle_core::Error {
    candle_core::Error::wrap(error)
}

macro_rules! custom_op {
    ($custom:ident, $inplace:ident, [$($storage:ident, $layout:ident);*]) => {
        impl $custom for Op {
            fn name(&self) -> &'static str {
                self.info.name
            }

            fn cpu_fwd(&self, x: &CpuStorage, x_layout: &Layout, $($storage: &CpuStorage, $layout: &Layout),*) -> Result<(CpuStorage, Shape)> {
                self.new_output(&[(x, x_layout) $(, ($storage, $layout))*])
            }

            #[cfg(feature = "candle-cuda")]
            fn cuda_fwd(
                &self,
                x: &candle_core::CudaStorage,
                x_layout: &Layout,
                $($storage: &candle_core::CudaStorage, $layout: &Layout),*
            ) -> Result<(candle_core::CudaStorage, Shape)> {
                self.new_output(&[(x, x_layout) $(, ($storage, $layout))*])
            }
        }

        impl $inplace for Op {
            fn name(&self) -> &'static str {
                self.info.name
            }

            fn cpu_fwd(&self, x: &mut CpuStorage, x_layout: &Layout, $($storage: &CpuStorage, $layout: &Layout),*) -> Result<()> {
                self.in_place((x, x_layout), &[$(($storage, $layout)),*])
            }

            #[cfg(feature = "candle-cuda")]
            fn cuda_fwd(
                &self,
                x: &mut candle_core::CudaStorage,
                x_layout: &Layout,
                $($storage: &candle_core::CudaStorage, $layout: &Layout),*
            ) -> Result<()> {
                self.in_place((x, x_layout), &[$(($storage, $layout)),*])
            }
        }
    };
}

custom_op!(CustomOp1, InplaceOp1, []);
custom_op!(CustomOp2, InplaceOp2, [b, b_layout]);
custom_op!(CustomOp3, InplaceOp3, [b, b_layout; c, c_layout]);

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
    /// `len` elements of this storage's dtype, or of f32 (an output that is always f32).
    fn alloc_like(&self, len: usize, rule: DTypeRule) -> Result<Self>;
}

/// Evaluates `$body` with `$data` bound to the data of `$storage` (a variant of `$kind`, candle's
/// per-dtype storage enum) and `$t` naming its element type, giving `Ok(($body, dtype))` for the
/// dtypes ferrinfer runs, `Err($otherwise)` for the rest (evaluated only then: errors capture a
/// backtrace when RUST_BACKTRACE is set, far too slow for every call).
macro_rules! with_element_data {
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
            // Sampled tokens.
            $kind::I32($data) => {
                #[allow(dead_code)]
                type $t = i32;
                Ok(($body, DType::I32))
            }
            $kind::I64($data) => {
                #[allow(dead_code)]
                type $t = i64;
                Ok(($body, DType::I64))
            }
            _ => Err($otherwise),
        }
    };
}
/// candle dtypes ferrinfer does not run.
fn unsupported_dtype(argument: &'static str, dtype: candle_core::DType) -> candle_core::Error {
    let expected = "f16, bf16 or f32 (int32 for sampled tokens)".into();
    to_candle(Error::UnsupportedDType { argument, found: dtype.as_str().into(), expected })
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
        let ((data, len), dtype) = with_element_data!(CpuStorage, self,
            |v: T| (v.as_ptr().cast_mut().cast(), v.len()),
            else unsupported_dtype(argument, candle_dtype))?;
        // SAFETY: the Vec's elements, borrowed for 's.
        Ok(Viewed::host(unsafe { view_of_layout(argument, (data, len, dtype), layout, Device::Cpu)? }))
    }

    fn view_mut<'s>(&'s mut self, argument: &'static str, layout: &Layout, _: &'s Exec) -> Result<Viewed<'s>> {
        let candle_dtype = self.dtype();
        let ((data, len), dtype) = with_element_data!(CpuStorage, self,
            |v: T| (v.as_mut_ptr().cast(), v.len()),
            else unsupported_dtype(argument, candle_dtype))?;
        // SAFETY: the Vec's elements, borrowed mutably for 's.
        Ok(Viewed::host(unsafe { view_of_layout(argument, (data, len, dtype), layout, Device::Cpu)? }))
    }

    fn alloc_like(&self, len: usize, rule: DTypeRule) -> Result<Self> {
        match rule {
            DTypeRule::F32 => return Ok(CpuStorage::F32(vec![0.0; len])),
            DTypeRule::I32 | DTypeRule::Index => return Ok(CpuStorage::I32(vec![0; len])),
            DTypeRule::Same | DTypeRule::SameOrF32 => {}
        }
        let candle_dtype = self.dtype();
        let zeros = with_element_data!(CpuStorage, self,
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

/// An op whose written tensors candle cannot hand one custom op (several updated in place, or
/// several new outputs): every operand locked in candle's order (by storage, as
/// `Tensor::inplace_op` orders its locks), a written one by an in-place op on it (candle keeps
/// the write lock crate-private) inside which the next operand is locked, a read one by its
/// public read guard; the op runs in the innermost step (see the module docs). Operands are
/// addressed by argument index.
struct Nested<'t> {
    op: &'t Op,
    exec: Exec,
    /// `(argument index, tensor, written)`, in lock order.
    order: Vec<(usize, &'t Tensor, bool)>,
}

impl<'t> Nested<'t> {
    fn run(op: &'t Op, tensors: &[&'t Tensor]) -> Result<()> {
        let args = op.info.tensors;
        let keys: Vec<usize> = tensors.iter().map(|t| storage_key(t)).collect();
        for y in 0..tensors.len() {
            if let Some(x) = (0..y).find(|&x| keys[x] == keys[y]) {
                let reason = format!(
                    "shares its candle storage with `{}` (the same tensor, or views of one); candle locks a storage as a whole, so `{}` needs separate tensors",
                    args[x].name, op.info.name
                );
                return Err(to_candle(Error::UnsupportedLayout { argument: args[y].name, reason }));
            }
        }
        let mut order: Vec<_> = (0..tensors.len()).map(|i| (i, tensors[i], args[i].role != Role::In)).collect();
        order.sort_by_key(|&(i, _, _)| keys[i]);
        Nested { op, exec: Exec::of(tensors[0].device())?, order }.step(Vec::new())
    }

    /// Locks the next operand of the lock order (`held` has the views of those before it) and
    /// goes on inside; runs the op once every operand is held.
    fn step<'v>(&self, held: Vec<(usize, TensorView<'v>)>) -> Result<()> {
        let Some(&(index, tensor, written)) = self.order.get(held.len()) else {
            let views: Option<Vec<&TensorView>> =
                (0..self.order.len()).map(|i| held.iter().find(|(held, _)| *held == i).map(|(_, view)| view)).collect();
            let views = views.ok_or_else(|| {
                candle_core::Error::Msg("ferrinfer: an op ran before every operand was locked".into())
            })?;
            return self.op.run(&views, &self.exec);
        };
        if written {
            return tensor.inplace_op1(&NestedStep { nested: self, held });
        }
        let name = self.op.info.tensors[index].name;
        let (storage, layout) = tensor.storage_and_layout();
        let viewed = match &*storage {
            Storage::Cpu(storage) => storage.view(name, layout, &self.exec)?,
            #[cfg(feature = "candle-cuda")]
            Storage::Cuda(storage) => storage.view(name, layout, &self.exec)?,
            other => {
                return Err(Exec::of(&other.device())
                    .err()
                    .unwrap_or_else(|| candle_core::Error::Msg(format!("`{name}`: unsupported device"))));
            }
        };
        let mut held = held;
        held.push((index, viewed.view.clone()));
        self.step(held)
        // `viewed` (with its cudarc guard) and the read guard drop here, after the launch.
    }
}

/// A written operand's step of [`Nested`]: candle's in-place op on it, holding its write lock.
struct NestedStep<'n, 'v> {
    nested: &'n Nested<'n>,
    held: Vec<(usize, TensorView<'v>)>,
}

impl NestedStep<'_, '_> {
    fn forward<S: Backend>(&self, locked: &mut S, layout: &Layout) -> Result<()> {
        let nested = self.nested;
        let index = nested.order[self.held.len()].0;
        let locked = locked.view_mut(nested.op.info.tensors[index].name, layout, &nested.exec)?;
        let mut held = self.held.clone();
        held.push((index, locked.view.clone()));
        nested.step(held)
        // `locked` (with its cudarc guard) drops here, after the launch.
    }
}

impl InplaceOp1 for NestedStep<'_, '_> {
    fn name(&self) -> &'static str {
        self.nested.op.info.name
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> Result<()> {
        self.forward(storage, layout)
    }

    #[cfg(feature = "candle-cuda")]
    fn cuda_fwd(&self, storage: &mut candle_core::CudaStorage, layout: &Layout) -> Result<()> {
        self.forward(storage, layout)
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

    use super::{Backend, DTypeRule, Exec, Viewed, to_candle, unsupported_dtype, view_of_layout};

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
            let ((slice, guard), dtype) = with_element_data!(CudaStorageSlice, &self.slice, |s: T| {
                let stream = stream_for(exec, argument, s.ordinal())?;
                ((s.ordinal(), s.len()), s.device_ptr(stream))
            }, else unsupported_dtype(argument, candle_dtype))?;
            view_of_cuda(argument, slice, guard, dtype, layout)
        }

        fn view_mut<'s>(&'s mut self, argument: &'static str, layout: &Layout, exec: &'s Exec) -> Result<Viewed<'s>> {
            let candle_dtype = self.dtype();
            let ((slice, guard), dtype) = with_element_data!(CudaStorageSlice, &mut self.slice, |s: T| {
                let stream = stream_for(exec, argument, s.ordinal())?;
                ((s.ordinal(), s.len()), s.device_ptr_mut(stream))
            }, else unsupported_dtype(argument, candle_dtype))?;
            view_of_cuda(argument, slice, guard, dtype, layout)
        }

        fn alloc_like(&self, len: usize, rule: DTypeRule) -> Result<Self> {
            let (device, candle_dtype) = (self.device.clone(), self.dtype());
            // SAFETY (each): as below.
            match rule {
                DTypeRule::F32 => {
                    return Ok(CudaStorage::wrap_cuda_slice(unsafe { device.alloc::<f32>(len) }?, device));
                }
                DTypeRule::I32 | DTypeRule::Index => {
                    return Ok(CudaStorage::wrap_cuda_slice(unsafe { device.alloc::<i32>(len) }?, device));
                }
                DTypeRule::Same | DTypeRule::SameOrF32 => {}
            }
            // SAFETY: the contents are unspecified until the op writes every element; on error the
            // storage is dropped unread.
            let storage = with_element_data!(CudaStorageSlice, &self.slice, |_s: T| {
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
