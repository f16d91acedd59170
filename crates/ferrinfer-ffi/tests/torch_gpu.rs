//! The tch adapter on CUDA tensors: every op and kind, contiguous and narrowed, on (a) a stream
//! cudarc made and (b) the legacy default stream PyTorch uses (raw handle 0), against the f64
//! reference; CUDA tensors with the CPU stream, or with a CPU weight,
//! are refused and left untouched. Without a CUDA device, or when torch's CUDA backend cannot be
//! loaded, each test prints SKIPPED and why, and passes (CI has no GPU).
//!
//! On the GPU machine: scripts/gpu/bundle-torch.sh builds this binary and says how to run it.
#![cfg(feature = "torch")]

use std::ffi::{CStr, c_char, c_int, c_void};
use std::io::Write;
use std::sync::Arc;

use ferrinfer_ffi::torch::{self as ft, TorchStream};
use ferrinfer_launch::cudarc::driver::{CudaContext, CudaStream};
use ferrinfer_launch::op::{DTypeRule, Domain, Extent, OpInfo, Role};
use ferrinfer_launch::reference::{self, random_normal};
use ferrinfer_launch::{DType, cuda_device_count};
use tch::{Device, Kind, TchError, Tensor};

const EPS: f32 = 1e-6;
const CUDA: Device = Device::Cuda(0);
const ROWS: i64 = 19;
const HIDDEN: i64 = 1024;

/// Loads libtorch_cuda.so (found through LD_LIBRARY_PATH), which registers torch's CUDA backend
/// as `import torch` does. Linking it is not enough: tch's own calls need only libtorch_cpu, so
/// the linker's --as-needed drops libtorch_cuda, and torch then sees no GPU.
fn load_torch_cuda() -> Result<(), String> {
    unsafe extern "C" {
        fn dlopen(file: *const c_char, mode: c_int) -> *mut c_void;
        fn dlerror() -> *const c_char;
    }
    const RTLD_NOW: c_int = 2;
    const RTLD_GLOBAL: c_int = 0x100;
    // SAFETY: a NUL-terminated name; dlerror's string is read before any other dl call.
    unsafe {
        if dlopen(c"libtorch_cuda.so".as_ptr(), RTLD_NOW | RTLD_GLOBAL).is_null() {
            let error = dlerror();
            let error = if error.is_null() { "unknown error".into() } else { CStr::from_ptr(error).to_string_lossy() };
            return Err(error.into_owned());
        }
    }
    Ok(())
}

/// cudarc's stream on device 0, or `None` after saying why the test is skipped.
fn gpu(test: &str) -> Option<Arc<CudaStream>> {
    let skip = |why: String| {
        // Straight to stderr, past libtest's capture, so a CI log shows every skip.
        let _ = writeln!(std::io::stderr(), "{test}: SKIPPED — {why}");
        None
    };
    if cuda_device_count() == 0 {
        return skip("no CUDA driver or device on this machine".into());
    }
    if let Err(error) = load_torch_cuda() {
        return skip(format!("libtorch_cuda.so did not load ({error}); put torch's lib/ on LD_LIBRARY_PATH"));
    }
    if !tch::Cuda::is_available() {
        return skip("libtorch_cuda.so loaded, but tch::Cuda::is_available() is false".into());
    }
    Some(CudaContext::new(0).and_then(|context| context.new_stream()).expect("CUDA device 0"))
}

/// Random-normal values of `kind` on `device`: `[rows, hidden]`, or (`narrow`) rows 1.. and
/// columns 3.. of `[rows + 1, hidden + 5]`. Returns (view, whole buffer).
fn tensor(kind: Kind, rows: i64, hidden: i64, narrow: bool, seed: u64, device: Device) -> (Tensor, Tensor) {
    let (all_rows, width) = if narrow { (rows + 1, hidden + 5) } else { (rows, hidden) };
    let values = random_normal::<f32>((all_rows * width) as usize, seed);
    let buffer = Tensor::from_slice(&values).view([all_rows, width]).to_kind(kind).to_device(device);
    let view = if narrow { buffer.narrow(0, 1, rows).narrow(1, 3, hidden) } else { buffer.shallow_clone() };
    (view, buffer)
}

fn values(t: &Tensor) -> Vec<f64> {
    Vec::<f64>::try_from(t.to_device(Device::Cpu).to_kind(Kind::Double).contiguous().view([-1])).unwrap()
}

fn dtype(kind: Kind) -> DType {
    match kind {
        Kind::Half => DType::F16,
        Kind::BFloat16 => DType::Bf16,
        _ => DType::F32,
    }
}

/// One call's tensors on a device: the inputs (layernorm's gamma and beta f32), and each output
/// as a (narrowed) window of a NaN-filled buffer.
struct Call {
    inputs: Vec<Tensor>,
    outputs: Vec<(Tensor, Tensor)>,
}

/// States a stacked argument holds ([`ferrinfer_launch::op::STACKED_STATES`]).
const STACKED: i64 = ferrinfer_launch::op::STACKED_STATES as i64;

/// The same values (per seed) on any device.
fn tensors(op: &OpInfo, kind: Kind, narrow: bool, seed: u64, device: Device) -> Call {
    let inputs = op
        .tensors
        .iter()
        .filter(|a| a.role != Role::Out)
        .enumerate()
        .map(|(i, arg)| {
            let seed = seed + i as u64;
            let weight_kind = if arg.dtype == DTypeRule::SameOrF32 { Kind::Float } else { kind };
            match arg.extent {
                Extent::Row => tensor(weight_kind, 1, HIDDEN, false, seed, device).0.view([HIDDEN]),
                Extent::Rows if arg.domain == Domain::Nonnegative => {
                    tensor(kind, ROWS, HIDDEN, narrow, seed, device).0.abs_()
                }
                Extent::Rows => tensor(kind, ROWS, HIDDEN, narrow, seed, device).0,
                Extent::DoubleRows => tensor(kind, ROWS, 2 * HIDDEN, narrow, seed, device).0,
                // One value a row (attention states' scores, always f32).
                Extent::Batch => tensor(Kind::Float, ROWS, 1, false, seed, device).0.reshape([ROWS]),
                // States of every row (`[rows, S, H]`) and their scores (`[rows, S]`).
                Extent::Stacked => {
                    tensor(kind, ROWS * STACKED, HIDDEN, narrow, seed, device).0.view([ROWS, STACKED, HIDDEN])
                }
                Extent::StackedBatch => {
                    tensor(Kind::Float, ROWS * STACKED, 1, false, seed, device).0.reshape([ROWS, STACKED])
                }
                _ => {
                    unreachable!("rope's, the page family's and decode's ops are tested on their own")
                }
            }
        })
        .collect();
    let outputs = op
        .tensors
        .iter()
        .filter(|a| a.role == Role::Out)
        .map(|arg| {
            if arg.extent == Extent::Batch {
                // One a row, in a buffer two longer than the rows: tokens in int32 filled with
                // -1, scores in f32 filled with NaN.
                let buffer = match arg.dtype {
                    DTypeRule::I32 => Tensor::full([ROWS + 2], -1, (Kind::Int, device)),
                    _ => Tensor::full([ROWS + 2], f64::NAN, (Kind::Float, device)),
                };
                return (buffer.narrow(0, narrow as i64, ROWS), buffer);
            }
            // f32 where the op's outputs are always f32 (softmax).
            let out_kind = if arg.dtype == DTypeRule::F32 { Kind::Float } else { kind };
            let (out, mut buffer) = tensor(out_kind, ROWS, HIDDEN, narrow, 0, device);
            let _ = buffer.fill_(f64::NAN);
            (out, buffer)
        })
        .collect();
    Call { inputs, outputs }
}

/// Runs `op` on `stream` and waits for it (a cudarc stream is synchronized, the legacy default
/// stream through torch); returns what it wrote (in-out inputs, then outputs) and the outputs'
/// whole buffers.
fn run(op: &'static OpInfo, call: Call, stream: &TorchStream) -> (Vec<Vec<f64>>, Vec<Vec<f64>>) {
    // The inputs were written on torch's stream; a cudarc stream (non-blocking) does not wait.
    sync_torch(&call.inputs[0]);
    let refs: Vec<&Tensor> = call.inputs.iter().collect();
    let scalars = op.examples(ROWS as usize, HIDDEN as usize);
    ft::call(op, &refs, call.outputs.iter().map(|(o, _)| Some(o)).collect(), &scalars, stream).unwrap();
    if let TorchStream::Cuda(stream) = stream {
        stream.synchronize().unwrap();
    }
    sync_torch(&call.inputs[0]);
    let in_out = op.tensors.iter().zip(&call.inputs).filter(|(a, _)| a.role == Role::InOut).map(|(_, t)| values(t));
    let written = in_out.chain(call.outputs.iter().map(|(o, _)| values(o))).collect();
    (written, call.outputs.iter().map(|(_, b)| values(b)).collect())
}

/// Waits for torch's work on the device of `t`, if a CUDA one.
fn sync_torch(t: &Tensor) {
    if let Device::Cuda(ordinal) = t.device() {
        tch::Cuda::synchronize(ordinal as i64);
    }
}

/// Every op, kind and layout on both streams: the GPU writes what matches the f64 reference, and
/// nothing outside a narrowed output.
#[test]
fn torch_gpu_every_op_on_a_cudarc_stream_and_the_default_stream() {
    let Some(cudarc_stream) = gpu("torch_gpu_every_op_on_a_cudarc_stream_and_the_default_stream") else { return };
    // SAFETY: 0 is the legacy default stream of device 0 (PyTorch's default), always alive.
    let default_stream = unsafe { TorchStream::cuda(0, 0) }.unwrap();
    let streams = [("cudarc stream", TorchStream::Cuda(cudarc_stream)), ("default stream", default_stream)];
    // Rope's heads and positions, the page family's page tables and decode's caches are not made here: their
    // adapter paths have tests of their own below.
    for (i, op) in ferrinfer_launch::ops().filter(|op| !matches!(op.family, "rope" | "page" | "decode")).enumerate() {
        for (j, kind) in [Kind::Float, Kind::Half, Kind::BFloat16].into_iter().enumerate() {
            for narrow in [false, true] {
                let seed = 10_000 * i as u64 + 1_000 * j as u64 + 100 * narrow as u64;
                let on_cpu = tensors(op, kind, narrow, seed, Device::Cpu);
                let mut before: Vec<Vec<f64>> = on_cpu.inputs.iter().map(values).collect();
                before.extend(on_cpu.outputs.iter().map(|_| Vec::new()));
                let scalars = op.examples(ROWS as usize, HIDDEN as usize);
                for (name, stream) in &streams {
                    let (written, buffers) = run(op, tensors(op, kind, narrow, seed, CUDA), stream);
                    let context = format!("{} {kind:?} narrow={narrow} on the {name}", op.name);
                    reference::check_written(op, dtype(kind), HIDDEN as usize, &before, &written, &scalars)
                        .unwrap_or_else(|e| panic!("{context}: {e}"));
                    let out_args = op.tensors.iter().filter(|a| a.role == Role::Out);
                    for (buffer, arg) in buffers.iter().zip(out_args) {
                        let unwritten = |v: f64| if arg.dtype == DTypeRule::I32 { v == -1.0 } else { v.is_nan() };
                        let written = buffer.iter().filter(|&&v| !unwritten(v)).count();
                        let expected = if arg.extent == Extent::Batch { ROWS } else { ROWS * HIDDEN };
                        assert_eq!(written, expected as usize, "{context}: wrote outside `{}`", arg.name);
                    }
                }
            }
        }
    }
}

/// CUDA tensors never run on the CPU stream (no silent default stream), nor with a CPU weight;
/// the errors name the argument and nothing is written.
#[test]
fn torch_gpu_refuses_the_cpu_stream_and_mixed_devices() {
    let Some(_) = gpu("torch_gpu_refuses_the_cpu_stream_and_mixed_devices") else { return };
    let (mut x, mut r) =
        (tensor(Kind::BFloat16, 4, 256, false, 1, CUDA).0, tensor(Kind::BFloat16, 4, 256, false, 2, CUDA).0);
    let w = tensor(Kind::BFloat16, 1, 256, false, 3, CUDA).0.view([256]);
    let (x0, r0) = (values(&x), values(&r));
    let error = ft::rmsnorm(&x, &w, None, EPS, &TorchStream::Cpu).unwrap_err();
    assert!(matches!(&error, TchError::Torch(m) if m.starts_with("`stream` is on cpu; expected cuda:0")), "{error}");
    let error = ft::fused_add_rmsnorm(&mut x, &mut r, &w, EPS, &TorchStream::Cpu).unwrap_err();
    assert!(matches!(&error, TchError::Torch(m) if m.starts_with("`stream` is on cpu")), "{error}");
    // SAFETY: the legacy default stream of device 0.
    let stream = unsafe { TorchStream::cuda(0, 0) }.unwrap();
    let error = ft::rmsnorm(&x, &w.to_device(Device::Cpu), None, EPS, &stream).unwrap_err();
    assert!(matches!(&error, TchError::Torch(m) if m.starts_with("`weight` is on cpu; expected cuda:0")), "{error}");
    assert_eq!((values(&x), values(&r)), (x0, r0), "inputs untouched");
}
