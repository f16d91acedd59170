//! One benchmark routine, for any op of the registry: inputs as the peers make them (random
//! normal, rows of probabilities where the op reads probabilities; outputs NaN-poisoned), the
//! op run through `ferrinfer-launch` by position, bytes counted as inputs read once plus outputs
//! written once, and (with `--refcheck`) the first call's results against the op's f64
//! reference.

use ferrinfer_launch::cudarc::driver::{CudaSlice, DevicePtrMut};
use ferrinfer_launch::op::{Domain, Extent, OpInfo, Role, TensorArg};
use ferrinfer_launch::reference::{self, Agreement};
use ferrinfer_launch::{DType, Device, Error, Scalar, Stream, TensorView, with_host_element};

use crate::report::Row;
use crate::timing::{Executor, Mode};

/// One case of a routine.
pub struct Setup {
    pub op: &'static OpInfo,
    pub dtype: DType,
    pub tokens: usize,
    pub hidden: usize,
    pub scalars: Vec<Scalar>,
    pub refcheck: bool,
    pub iters: usize,
    pub mode: Mode,
}

/// A tensor argument's host buffer.
#[derive(Clone)]
struct Buffer {
    bytes: Vec<u8>,
    shape: Vec<i64>,
    dtype: DType,
}

impl Setup {
    /// The shape of each tensor argument ([`Extent::shape`]), contiguous.
    fn shape(&self, extent: Extent) -> Vec<i64> {
        extent.shape(self.tokens, self.hidden).into_iter().map(|d| d as i64).collect()
    }

    /// The dtype of tensor argument `arg` for this case's input dtype (softmax's f32 `probs`).
    fn dtype(&self, arg: &TensorArg) -> DType {
        arg.dtype.dtype(self.dtype, false)
    }

    /// Fresh inputs (seeded per argument; an input of probabilities as rows that sum to 1, as a
    /// softmax makes them and as the peers' bench feeds them), NaN in outputs; each argument of
    /// its dtype.
    fn buffers(&self) -> Vec<Buffer> {
        let seeds = [0x5eed, 0x7e51, 0x3e19, 0xb1a5, 0xc0de, 0xfeed];
        self.op
            .tensors
            .iter()
            .enumerate()
            .map(|(i, arg)| {
                let shape = self.shape(arg.extent);
                let len = shape.iter().product::<i64>() as usize;
                let dtype = self.dtype(arg);
                let bytes = with_host_element!(dtype, T => {
                    let values: Vec<T> = match arg.role {
                        Role::Out => vec![<T as ferrinfer_launch::HostElement>::from_f64(f64::NAN); len],
                        _ if arg.domain == Domain::Nonnegative => {
                            let values: Vec<T> = reference::random_input(arg, len, self.tokens, seeds[i % seeds.len()]);
                            rows_summing_to_one(values, self.hidden)
                        }
                        _ => reference::random_input(arg, len, self.tokens, seeds[i % seeds.len()]),
                    };
                    bytemuck::cast_slice::<T, u8>(&values).to_vec()
                });
                Buffer { bytes, shape, dtype }
            })
            .collect()
    }

    /// Inputs read once + outputs written once, as the peers count (of a table, the rows the
    /// problem's rows look up at most; of a paged cache, the entries appended: [`Extent::touched`]).
    fn bytes(&self) -> f64 {
        let bytes: i64 = self
            .op
            .tensors
            .iter()
            .map(|arg| {
                let n = (arg.extent.touched(self.tokens, self.hidden) * self.dtype(arg).size()) as i64;
                if arg.role == Role::InOut && arg.extent.read_in_place() { 2 * n } else { n }
            })
            .sum();
        bytes as f64
    }
}

/// `values` (non-negative) in rows of `row` divided by their row's sum, in f64: probabilities
/// (a sampling op weighs a row whose largest entry is 2 or more again at its own scale — not
/// the path a softmax's rows take).
fn rows_summing_to_one<T: ferrinfer_launch::HostElement>(values: Vec<T>, row: usize) -> Vec<T> {
    values
        .chunks(row.max(1))
        .flat_map(|row| {
            let sum: f64 = row.iter().map(|v| v.to_f64()).sum();
            row.iter().map(move |v| T::from_f64(v.to_f64() / sum))
        })
        .collect()
}

/// Runs and times one case.
pub fn run(executor: &Executor, s: &Setup) -> Result<Row, Error> {
    let host = s.buffers();
    let (us, after) = match executor {
        Executor::Cpu => {
            // Timing repeats the op (in-place ops keep updating their buffers): time on a working
            // copy, check a single run on another.
            let mut timed = host.clone();
            let views = host_views(&mut timed)?;
            let us = executor.time_us(s.iters, s.mode, || call(s, &views, Stream::Cpu))?;
            let mut after = host.clone();
            call(s, &host_views(&mut after)?, Stream::Cpu)?;
            (us, after)
        }
        Executor::Cuda(cuda) => {
            let mut device: Vec<CudaSlice<u8>> =
                host.iter().map(|b| cuda.clone_htod(&b.bytes)).collect::<Result<_, _>>()?;
            let started = std::time::Instant::now();
            call(s, &device_views(&mut device, &host, cuda)?, Stream::Cuda(cuda))?;
            cuda.synchronize()?;
            // The process's first call includes finding and loading the module (driver PTX JIT).
            eprintln!(
                "# first call {} T={} H={}: {:.3} ms",
                s.op.name,
                s.tokens,
                s.hidden,
                started.elapsed().as_secs_f64() * 1e3
            );
            let after = match s.refcheck {
                true => device
                    .iter()
                    .zip(&host)
                    .map(|(d, h)| Ok(Buffer { bytes: cuda.clone_dtoh(d)?, shape: h.shape.clone(), dtype: h.dtype }))
                    .collect::<Result<_, Error>>()?,
                false => host.clone(),
            };
            let views = device_views(&mut device, &host, cuda)?;
            let us = executor.time_us(s.iters, s.mode, || call(s, &views, Stream::Cuda(cuda)))?;
            (us, after)
        }
    };
    let refcheck = s.refcheck.then(|| check(s, &host, &after));
    Ok(Row::new(s.op.name, s.dtype, s.tokens, s.hidden, executor.impl_name(s.mode), us, s.bytes(), refcheck))
}

fn call(s: &Setup, views: &[TensorView], stream: Stream) -> Result<(), Error> {
    let views: Vec<&TensorView> = views.iter().collect();
    s.op.call(&views, &s.scalars, stream)
}

/// Views of host buffers.
fn host_views(buffers: &mut [Buffer]) -> Result<Vec<TensorView<'_>>, Error> {
    buffers
        .iter_mut()
        .map(|b| {
            let strides = contiguous(&b.shape);
            // SAFETY: the buffer holds every element of its contiguous shape, borrowed for 'b.
            unsafe {
                TensorView::from_raw_parts(b.bytes.as_mut_ptr().cast(), 0, b.dtype, &b.shape, &strides, Device::Cpu)
            }
        })
        .collect()
}

/// Views of device copies of `host`'s buffers.
fn device_views<'b>(
    device: &'b mut [CudaSlice<u8>],
    host: &[Buffer],
    stream: &ferrinfer_launch::cudarc::driver::CudaStream,
) -> Result<Vec<TensorView<'b>>, Error> {
    device
        .iter_mut()
        .zip(host)
        .map(|(d, Buffer { shape, dtype, .. })| {
            let (pointer, _sync) = d.device_ptr_mut(stream);
            let ordinal = stream.context().ordinal();
            // SAFETY: the device copy holds every element of its contiguous shape, borrowed for 'b.
            unsafe {
                TensorView::from_raw_parts(
                    pointer as *mut _,
                    0,
                    *dtype,
                    shape,
                    &contiguous(shape),
                    Device::Cuda(ordinal),
                )
            }
        })
        .collect()
}

fn contiguous(shape: &[i64]) -> Vec<i64> {
    ferrinfer_launch::contiguous_strides(&shape.iter().map(|&d| d as usize).collect::<Vec<_>>())
}

/// The first call's results against the op's f64 reference.
fn check(s: &Setup, before: &[Buffer], after: &[Buffer]) -> Result<Agreement, String> {
    let values = |b: &Buffer| {
        with_host_element!(b.dtype, T => {
            let typed: Vec<T> = b.bytes.chunks_exact(std::mem::size_of::<T>()).map(bytemuck::pod_read_unaligned).collect();
            reference::to_f64(&typed)
        })
    };
    let inputs: Vec<Vec<f64>> =
        s.op.tensors
            .iter()
            .zip(before)
            .map(|(arg, b)| if arg.role == Role::Out { Vec::new() } else { values(b) })
            .collect();
    let written: Vec<Vec<f64>> =
        s.op.tensors.iter().zip(after).filter(|(arg, _)| arg.role != Role::In).map(|(_, b)| values(b)).collect();
    reference::check_written(s.op, s.dtype, s.hidden, &inputs, &written, &s.scalars)
}
