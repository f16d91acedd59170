//! The correctness harness of every op family, CPU and GPU alike, driven by the op registry: for
//! any op it makes fresh random inputs (never zeros), NaN-poisoned outputs, rows inside larger
//! buffers, runs the op, and checks every written element against the op's f64 reference, that
//! read-only tensors and the gaps between rows stayed untouched (docs/testing.md).
#![allow(dead_code)] // each test binary uses its own part

pub mod decode;
pub mod page;
pub mod rope;
pub mod sampling;

use std::io::Write;
use std::sync::Arc;

use ferrinfer_launch::cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtrMut};
use ferrinfer_launch::op::{Extent, OpInfo, Role, TensorArg};
use ferrinfer_launch::reference::{self, Agreement};
use ferrinfer_launch::{
    DType, Device, Error, HostElement, Scalar, Stream, TensorView, cuda_device_count, with_host_element,
};

/// Sets the environment variable `name` to `value` once in this process, before any test reads
/// it: for the test binaries that force a layout override (read once per process), which call
/// this first in every test. One binary forces one value; a second would be a test bug.
pub fn force_env(name: &'static str, value: &'static str) {
    static FORCED: std::sync::OnceLock<(&str, &str)> = std::sync::OnceLock::new();
    let forced = FORCED.get_or_init(|| {
        // SAFETY: the first caller sets the variable inside `get_or_init`, which every other
        // test thread waits on; nothing reads the environment meanwhile.
        unsafe { std::env::set_var(name, value) };
        (name, value)
    });
    assert_eq!(*forced, (name, value), "a test binary forces one override");
}

pub const BATCHES: [usize; 4] = [1, 19, 99, 989];
pub const HIDDENS: [usize; 9] = [111, 500, 1004, 1024, 3072, 3584, 4096, 8192, 16384];

/// One grid point: `rows` rows of `hidden` (an op's `H`); each row tensor's rows lie `pad`
/// elements apart beyond their length (0: contiguous).
#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub rows: usize,
    pub hidden: usize,
    pub pad: usize,
}

impl Case {
    pub fn contiguous(rows: usize, hidden: usize) -> Self {
        Case { rows, hidden, pad: 0 }
    }

    /// Rows of larger buffers (a pad that is a multiple of 8, so vector widths still apply).
    pub fn strided(rows: usize, hidden: usize) -> Self {
        Case { rows, hidden, pad: 40 }
    }
}

/// The grid: every batch × hidden, contiguous and strided.
pub fn grid() -> Vec<Case> {
    BATCHES
        .into_iter()
        .flat_map(|r| HIDDENS.into_iter().flat_map(move |h| [Case::contiguous(r, h), Case::strided(r, h)]))
        .collect()
}

/// Small cases that still reach every kernel path — rows narrower than a warp, one and several
/// warps per row, partial and full chunks, vector widths down to one element, the streaming
/// kernel, grids that stride — sized for compute-sanitizer, which slows kernels ~1000×.
pub fn sanitizer_cases() -> Vec<Case> {
    let mut cases = vec![Case::contiguous(2113, 1024), Case::strided(2113, 4096), Case::strided(5, 200_000)];
    // 1001 and 4094: rows of 2- and 4-byte vectors (few rows: read narrow; norm_peeled_gpu has
    // the peeled kernels' own list).
    for hidden in [8, 64, 111, 128, 1001, 1004, 3000, 4094, 4096, 5120, 8192, 16384] {
        cases.extend([Case::contiguous(3, hidden), Case::strided(40, hidden)]);
    }
    cases.push(Case::contiguous(5000, 128));
    cases
}

/// One tensor argument's host buffer: its dtype, bytes, and how the view sees them.
#[derive(Clone, Debug)]
pub struct Buffer {
    pub dtype: DType,
    pub bytes: Vec<u8>,
    pub shape: Vec<usize>,
    pub strides: Vec<i64>,
}

impl Buffer {
    /// Random values for `arg` (seeded: `reference::random_input`), or NaN everywhere for an output.
    fn new(
        arg: &TensorArg,
        dtype: DType,
        (shape, strides): (Vec<usize>, Vec<i64>),
        (len, rows): (usize, usize),
        seed: u64,
    ) -> Self {
        let bytes = with_host_element!(dtype, T => {
            let poison = arg.role == Role::Out;
            let values: Vec<T> = if poison { vec![T::from_f64(f64::NAN); len] } else { reference::random_input(arg, len, rows, seed) };
            bytemuck::cast_slice(&values).to_vec()
        });
        Buffer { dtype, bytes, shape, strides }
    }

    /// Every element as f64, in memory order.
    pub fn values(&self) -> Vec<f64> {
        with_host_element!(self.dtype, T => {
            let values: Vec<T> = self.bytes.chunks_exact(std::mem::size_of::<T>()).map(bytemuck::pod_read_unaligned).collect();
            reference::to_f64(&values)
        })
    }

    /// `(rows, width, stride)`: every buffer's leading dimensions collapse into rows of its last
    /// dimension (`width` elements), `stride` elements from one row to the next.
    fn rows(&self) -> (usize, usize, usize) {
        let width = *self.shape.last().unwrap_or(&1);
        let rows = self.shape.iter().rev().skip(1).product::<usize>();
        let stride = match self.shape.len() {
            0 | 1 => width,
            n => self.strides[n - 2] as usize,
        };
        (rows, width, stride)
    }

    /// The view's elements (rows of the last dimension, gaps skipped) as f64.
    pub fn logical(&self) -> Vec<f64> {
        let values = self.values();
        let (rows, width, stride) = self.rows();
        (0..rows).flat_map(|r| values[r * stride..r * stride + width].to_vec()).collect()
    }

    /// The elements between rows (stride padding), bytewise.
    fn gaps(&self) -> Vec<u8> {
        let size = self.dtype.size();
        let (rows, width, stride) = self.rows();
        (0..rows.saturating_sub(1))
            .flat_map(|r| self.bytes[(r * stride + width) * size..(r + 1) * stride * size].to_vec())
            .collect()
    }
}

/// Runs an op somewhere (the CPU backend, a GPU) on host buffers, writing results back into them.
pub trait Runner {
    fn run(&self, op: &'static OpInfo, buffers: &mut [Buffer], scalars: &[Scalar]) -> Result<(), Error>;
}

/// The dtype of each of `op`'s tensors for input dtype `dtype`: `SameOrF32` arguments in f32
/// when `wide` (layernorm's f32 γ/β), `Index` ones in int64, `F32` ones always.
fn dtypes(op: &OpInfo, dtype: DType, wide: bool) -> Vec<DType> {
    op.tensors.iter().map(|t| t.dtype.dtype(dtype, wide)).collect()
}

/// The buffers of `op` for `case`, inputs from `seed`.
pub fn buffers(op: &OpInfo, dtype: DType, wide: bool, case: &Case, seed: u64) -> Vec<Buffer> {
    op.tensors
        .iter()
        .zip(dtypes(op, dtype, wide))
        .enumerate()
        .map(|(i, (arg, dtype))| {
            let shape = arg.extent.shape(case.rows, case.hidden);
            let (strides, len) = match arg.extent {
                Extent::Row
                | Extent::Batch
                | Extent::StackedBatch
                | Extent::SegmentBounds
                | Extent::Segments
                | Extent::Table
                | Extent::Family(_)
                | Extent::Count => (ferrinfer_launch::contiguous_strides(&shape), shape.iter().product()),
                // Rows of values, `pad` elements apart beyond their length.
                Extent::Rows
                | Extent::DoubleRows
                | Extent::Stacked
                | Extent::Heads
                | Extent::KvHeads
                | Extent::FlatHeads
                | Extent::FlatKvHeads => padded_rows(&shape, case.pad),
            };
            Buffer::new(arg, dtype, (shape, strides), (len, case.rows), seed ^ (i as u64 * 0x9e37))
        })
        .collect()
}

/// Strides and element count of `shape`'s rows (its last dimension) laid `pad` elements apart
/// beyond their length, the leading dimensions collapsing into them.
fn padded_rows(shape: &[usize], pad: usize) -> (Vec<i64>, usize) {
    let (last, width) = (shape.len() - 1, shape[shape.len() - 1]);
    let mut strides = vec![1i64; shape.len()];
    let mut stride = (width + pad) as i64;
    for i in (0..last).rev() {
        strides[i] = stride;
        stride *= shape[i] as i64;
    }
    let rows = shape[..last].iter().product::<usize>();
    (strides, (rows.max(1) - 1) * (width + pad) + width)
}

/// Runs `op` on one case with fresh inputs and checks everything it wrote and did not write; the
/// error says what was wrong.
pub fn run_case(
    runner: &impl Runner,
    op: &'static OpInfo,
    dtype: DType,
    wide: bool,
    case: &Case,
    seed: u64,
) -> Result<Agreement, String> {
    run_case_with(runner, op, (dtype, wide), case, seed, &op.examples(case.rows, case.hidden))
}

/// [`run_case`] with the scalars `scalars`.
pub fn run_case_with(
    runner: &impl Runner,
    op: &'static OpInfo,
    (dtype, wide): (DType, bool),
    case: &Case,
    seed: u64,
    scalars: &[Scalar],
) -> Result<Agreement, String> {
    let wide_label = if wide { " (wide: f32 weights, int64 positions)" } else { "" };
    let label = format!("{} {case:?} {dtype}{wide_label} scalars {scalars:?}", op.name);
    let context = |e: String| format!("{label}: {e}");
    // FERRINFER_TEST_TRACE=1 (with --nocapture): each case's start, then the time its call took
    // and the whole case's (inputs, call, checks), to tell a slow sanitizer run from a stuck one.
    let trace = std::env::var("FERRINFER_TEST_TRACE").is_ok_and(|value| value == "1");
    let started = std::time::Instant::now();
    if trace {
        eprintln!("case start: {label}");
    }
    let before = buffers(op, dtype, wide, case, seed);
    let mut after = before.clone();
    let call_started = std::time::Instant::now();
    let ran = runner.run(op, &mut after, scalars).map_err(|e| context(e.to_string()));
    let call = call_started.elapsed();
    let checked = ran.and_then(|()| check(op, dtype, case, &before, &after, scalars).map_err(context));
    if trace {
        let whole = started.elapsed().as_secs_f64();
        eprintln!("case done in {whole:.3} s (call {:.3} s): {label}", call.as_secs_f64());
    }
    checked
}

/// The checks of [`run_case`], on buffers before and after a call.
pub fn check(
    op: &OpInfo,
    dtype: DType,
    case: &Case,
    before: &[Buffer],
    after: &[Buffer],
    scalars: &[Scalar],
) -> Result<Agreement, String> {
    for ((arg, b), a) in op.tensors.iter().zip(before).zip(after) {
        if arg.role == Role::In && a.bytes != b.bytes {
            return Err(format!("`{}` (read-only) was written", arg.name));
        }
        if a.gaps() != b.gaps() {
            return Err(format!("`{}`: an element between rows was written", arg.name));
        }
    }
    let inputs: Vec<Vec<f64>> = op
        .tensors
        .iter()
        .zip(before)
        .map(|(arg, b)| if arg.role == Role::Out { Vec::new() } else { b.logical() })
        .collect();
    let written: Vec<Vec<f64>> =
        op.tensors.iter().zip(after).filter(|(arg, _)| arg.role != Role::In).map(|(_, b)| b.logical()).collect();
    reference::check_written(op, dtype, case.hidden, &inputs, &written, scalars)
}

/// Every (op, input dtype, wide) of `ops`: `wide` where an argument has a wider alternative
/// (f32 weights of f16/bf16 input, int64 positions).
pub fn every_dtype(ops: &[&'static OpInfo]) -> Vec<(&'static OpInfo, DType, bool)> {
    let mut all = Vec::new();
    for &op in ops {
        for dtype in DType::ALL {
            all.push((op, dtype, false));
            let wider = |t: &TensorArg| t.dtype.dtype(dtype, true) != t.dtype.dtype(dtype, false);
            if op.tensors.iter().any(wider) {
                all.push((op, dtype, true));
            }
        }
    }
    all
}

/// Runs every case for every (op, dtype, weights) of `ops` on all cores (the inputs and checks
/// are host work) and panics listing all failures.
pub fn run_cases(runner: &(impl Runner + Sync), ops: &[&'static OpInfo], seed: u64, cases: &[Case]) {
    run_cases_with(runner, ops, seed, cases, &|op, case| vec![op.examples(case.rows, case.hidden)]);
}

/// [`run_cases`], each case once for every set of scalars `scalars(op, case)` gives.
pub fn run_cases_with(
    runner: &(impl Runner + Sync),
    ops: &[&'static OpInfo],
    seed: u64,
    cases: &[Case],
    scalars: &(dyn Fn(&OpInfo, &Case) -> Vec<Vec<Scalar>> + Sync),
) {
    let work: Vec<_> = every_dtype(ops)
        .into_iter()
        .flat_map(|(op, d, w)| {
            cases.iter().flat_map(move |c| scalars(op, c).into_iter().map(move |s| (op, d, w, *c, s)))
        })
        .collect();
    let failures = on_all_cores(work.len(), 8, |i| {
        let (op, dtype, wide, case, scalars) = &work[i];
        run_case_with(runner, op, (*dtype, *wide), case, seed + 10 * i as u64, scalars).err()
    });
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), work.len(), failures.join("\n"));
}

/// [`run_case_with`] with `op`'s [`Extent::Table`] argument `width` values wide instead of the
/// case's `H` (a rope cache narrower than the head: partial rotary), its rows `pad` elements
/// apart beyond their width (an odd pad: rows off 16-byte boundaries).
pub fn run_case_with_table(
    runner: &impl Runner,
    op: &'static OpInfo,
    dtype: DType,
    case: &Case,
    seed: u64,
    (scalars, width, pad): (&[Scalar], usize, usize),
) -> Result<Agreement, String> {
    let label = format!("{} {case:?} {dtype} table width {width} pad {pad} scalars {scalars:?}", op.name);
    let mut before = buffers(op, dtype, false, case, seed);
    let table = op.tensors.iter().position(|t| t.extent == Extent::Table).ok_or(format!("{label}: no table"))?;
    let arg = &op.tensors[table];
    let shape = arg.extent.shape(case.rows, width);
    let (strides, len) = padded_rows(&shape, pad);
    before[table] = Buffer::new(arg, DType::F32, (shape, strides), (len, case.rows), seed);
    let mut after = before.clone();
    runner.run(op, &mut after, scalars).map_err(|e| format!("{label}: {e}"))?;
    check(op, dtype, case, &before, &after, scalars).map_err(|e| format!("{label}: {e}"))
}

/// Asserts that a call was refused as `expect` says and left `out` (NaN-poisoned before the
/// call) untouched: the error path writes nothing.
pub fn assert_refused(result: Result<(), Error>, out: &[f32], expect: &dyn Fn(&Error) -> bool) {
    let error = result.expect_err("the call should fail");
    assert!(expect(&error), "unexpected error: {error}");
    assert!(out.iter().all(|v| v.is_nan()), "out was written on the error path");
}

/// The ops of one family.
pub fn family(name: &str) -> Vec<&'static OpInfo> {
    ferrinfer_launch::ops().filter(|op| op.family == name).collect()
}

/// `values` of type `T` as a host buffer of `shape` (contiguous).
pub fn buffer_of<T: HostElement>(values: &[T], shape: &[usize]) -> Buffer {
    let strides = ferrinfer_launch::contiguous_strides(shape);
    Buffer { dtype: T::DTYPE, bytes: bytemuck::cast_slice(values).to_vec(), shape: shape.to_vec(), strides }
}

/// Checks a run over more rows than fit in memory as f64 at once: slices of `slice_rows` rows,
/// on a few threads at a time (each slice's f64 copies are hundreds of MB). Every failure, by
/// slice.
pub fn check_in_slices(
    op: &OpInfo,
    dtype: DType,
    case: &Case,
    before: &[Buffer],
    after: &[Buffer],
    scalars: &[Scalar],
    slice_rows: usize,
) -> Vec<String> {
    on_all_cores(case.rows.div_ceil(slice_rows), 16, |i| {
        let rows = i * slice_rows..((i + 1) * slice_rows).min(case.rows);
        let part = Case { rows: rows.len(), ..*case };
        let result = check(op, dtype, &part, &rows_of(op, before, &rows), &rows_of(op, after, &rows), scalars);
        result.err().map(|e| format!("rows {rows:?}: {e}"))
    })
}

/// Runs `task(0..count)` on up to `max_threads` threads (each task taken by the next free
/// thread, so at most `max_threads` tasks' memory is held at once); the failures it returned.
fn on_all_cores(count: usize, max_threads: usize, task: impl Fn(usize) -> Option<String> + Sync) -> Vec<String> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(max_threads);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= count {
                        break;
                    }
                    if let Some(failure) = task(i) {
                        failures.lock().unwrap().push(failure);
                    }
                }
            });
        }
    });
    failures.into_inner().unwrap()
}

/// The rows `rows` of each (contiguous) row buffer; weights whole.
pub fn rows_of(op: &OpInfo, buffers: &[Buffer], rows: &std::ops::Range<usize>) -> Vec<Buffer> {
    op.tensors
        .iter()
        .zip(buffers)
        .map(|(arg, b)| {
            if matches!(arg.extent, Extent::Row | Extent::Table) {
                return b.clone();
            }
            // Contiguous: each row's elements (a row of values, or its one score or token).
            let per_row = b.shape[1..].iter().product::<usize>() * b.dtype.size();
            let bytes = b.bytes[rows.start * per_row..rows.end * per_row].to_vec();
            // Not `..b.clone()`: that copies the whole buffer (gigabytes in the > 2^31 tests)
            // for every slice, only to drop it.
            let shape: Vec<usize> = [rows.len()].into_iter().chain(b.shape[1..].iter().copied()).collect();
            let strides = ferrinfer_launch::contiguous_strides(&shape);
            Buffer { dtype: b.dtype, bytes, shape, strides }
        })
        .collect()
}

/// The CPU backend.
pub struct Cpu;

impl Runner for Cpu {
    fn run(&self, op: &'static OpInfo, buffers: &mut [Buffer], scalars: &[Scalar]) -> Result<(), Error> {
        let views = buffers
            .iter_mut()
            .map(|b| {
                let shape: Vec<i64> = b.shape.iter().map(|&d| d as i64).collect();
                // SAFETY: the buffer holds every element its shape and strides address.
                unsafe {
                    TensorView::from_raw_parts(b.bytes.as_mut_ptr().cast(), 0, b.dtype, &shape, &b.strides, Device::Cpu)
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        op.call(&views.iter().collect::<Vec<_>>(), scalars, Stream::Cpu)
    }
}

/// A CUDA GPU: device 0 and a stream of its own.
pub struct Gpu {
    pub stream: Arc<CudaStream>,
}

impl Gpu {
    /// The GPU, or `None` after saying why the test is skipped.
    pub fn get(test: &str) -> Option<Gpu> {
        if cuda_device_count() == 0 {
            // Straight to stderr, past libtest's capture, so a CI log shows every skip.
            let _ = writeln!(std::io::stderr(), "{test}: SKIPPED — no CUDA driver or device on this machine");
            return None;
        }
        let stream = CudaContext::new(0).and_then(|ctx| ctx.new_stream()).expect("CUDA device 0");
        Some(Gpu { stream })
    }
}

impl Runner for Gpu {
    fn run(&self, op: &'static OpInfo, buffers: &mut [Buffer], scalars: &[Scalar]) -> Result<(), Error> {
        let s = &self.stream;
        let mut device: Vec<CudaSlice<u8>> =
            buffers.iter().map(|b| s.clone_htod(&b.bytes)).collect::<Result<_, _>>()?;
        {
            let views = device
                .iter_mut()
                .zip(buffers.iter())
                .map(|(d, b)| {
                    let shape: Vec<i64> = b.shape.iter().map(|&d| d as i64).collect();
                    let (pointer, _sync) = d.device_ptr_mut(s);
                    // SAFETY: the device copy holds every element its shape and strides address.
                    unsafe {
                        TensorView::from_raw_parts(pointer as *mut _, 0, b.dtype, &shape, &b.strides, Device::Cuda(0))
                    }
                })
                .collect::<Result<Vec<_>, _>>()?;
            op.call(&views.iter().collect::<Vec<_>>(), scalars, Stream::Cuda(s))?;
        }
        for (d, b) in device.iter().zip(buffers.iter_mut()) {
            s.memcpy_dtoh(d, &mut b.bytes)?;
        }
        s.synchronize()?;
        Ok(())
    }
}
