//! The correctness harness of every op family, CPU and GPU alike, driven by the op registry: for
//! any op it makes fresh random inputs (never zeros), NaN-poisoned outputs, rows inside larger
//! buffers, runs the op, and checks every written element against the op's f64 reference, that
//! read-only tensors and the gaps between rows stayed untouched (docs/testing.md).
#![allow(dead_code)] // each test binary uses its own part

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

/// `rows` rows of `vocab` probabilities, softmax of `3 · x` for standard-normal `x` from
/// `seed`: peaked as a language model's, a few hundred entries holding most of a row's mass.
pub fn peaked_probabilities(rows: usize, vocab: usize, seed: u64) -> Vec<f32> {
    let logits: Vec<f32> = reference::random_normal(rows * vocab, seed);
    logits
        .chunks_exact(vocab)
        .flat_map(|row| {
            let weights: Vec<f32> = row.iter().map(|&x| (3.0 * x).exp()).collect();
            let sum: f32 = weights.iter().sum();
            weights.into_iter().map(move |w| w / sum)
        })
        .collect()
}

/// What a sampling test feeds `op` for rows of probabilities: the probabilities, or for an op
/// that draws from logits their logarithms (0 → −∞), whose softmax they are.
pub fn sampling_input(op: &OpInfo, probs: &[f32]) -> Vec<f32> {
    if reads_logits(op) { probs.iter().map(|p| p.ln()).collect() } else { probs.to_vec() }
}

/// Whether a sampling op draws from logits (weighed as softmax's numerators).
pub fn reads_logits(op: &OpInfo) -> bool {
    op.tensors[0].name == "logits"
}

/// Which of `probs` (one row) a sampling op keeps given its `thresholds`, by the ops'
/// definitions (the table's docs), in f32 sums: the support tests' and the expected
/// distributions' set.
pub fn sampling_kept(op: &OpInfo, thresholds: &[Scalar], probs: &[f32]) -> Vec<bool> {
    let max = probs.iter().fold(0.0f32, |m, &p| m.max(p));
    let mut sorted = probs.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    let given = op.scalars_of(thresholds);
    let top_k = || {
        let k: i32 = given.get("top_k").unwrap();
        probs.iter().map(|&p| p >= sorted[k as usize - 1]).collect::<Vec<bool>>()
    };
    let share = |name| given.get::<f32>(name).unwrap();
    // Top-p among the entries `among` keeps: the mass strictly above an entry short of the share.
    let top_p = |among: &[bool]| {
        let total: f32 = probs.iter().zip(among).filter(|(_, k)| **k).map(|(p, _)| p).sum();
        let above = |p: f32| probs.iter().filter(|&&q| q > p).sum::<f32>();
        probs.iter().zip(among).map(|(&p, &k)| k && above(p) < share("top_p") * total).collect::<Vec<bool>>()
    };
    match op.name.trim_end_matches("_from_probs").trim_end_matches("_from_logits") {
        "top_k_sampling" => top_k(),
        "top_p_sampling" => top_p(&vec![true; probs.len()]),
        "min_p_sampling" => probs.iter().map(|&p| p >= share("min_p") * max).collect(),
        "top_k_top_p_sampling" => top_p(&top_k()),
        _ => probs.iter().map(|&p| p > 0.0).collect(),
    }
}

/// The sampling ops with their thresholds (none for `sampling_from_probs`), chosen so that each
/// filter drops entries of both the CPU tests' 10-entry row and the GPU tests' 16-entry one
/// (top-k then top-p: top-k keeps 3 there, top-p 2 of them).
pub fn sampling_ops() -> [(&'static OpInfo, &'static [Scalar]); 6] {
    use ferrinfer_launch::{
        min_p_sampling_from_probs, sampling_from_probs, top_k_sampling_from_probs, top_k_top_p_sampling_from_logits,
        top_k_top_p_sampling_from_probs, top_p_sampling_from_probs,
    };
    [
        (&sampling_from_probs::INFO, &[]),
        (&top_k_sampling_from_probs::INFO, &[Scalar::I32(3)]),
        (&top_p_sampling_from_probs::INFO, &[Scalar::F32(0.6)]),
        (&min_p_sampling_from_probs::INFO, &[Scalar::F32(0.3)]),
        (&top_k_top_p_sampling_from_probs::INFO, &[Scalar::I32(3), Scalar::F32(0.6)]),
        (&top_k_top_p_sampling_from_logits::INFO, &[Scalar::I32(3), Scalar::F32(0.6)]),
    ]
}

/// The scalars each rope case runs with (the CPU and GPU tests'): the defaults; interleaved; half the head rotated (NeoX
/// and interleaved) where that is even; another scale and base. The cache ops (`head_size`,
/// `is_neox`; their table sets the rotary dimension, see [`run_case_with_table`]): NeoX and
/// interleaved.
pub fn rope_scalar_variants(op: &OpInfo, case: &Case) -> Vec<Vec<Scalar>> {
    let defaults = op.examples(case.rows, case.hidden);
    let with = |changes: &[(&str, Scalar)]| {
        let mut scalars = defaults.clone();
        for &(name, value) in changes {
            let i = op.scalars.iter().position(|s| s.name == name).expect("a scalar of the rope ops");
            scalars[i] = value;
        }
        scalars
    };
    if op.scalars.iter().any(|s| s.name == "is_neox") {
        return vec![defaults.clone(), with(&[("is_neox", Scalar::Bool(false))])];
    }
    let interleaved = ("interleave", Scalar::Bool(true));
    let mut variants = vec![
        defaults.clone(),
        with(&[interleaved]),
        with(&[("rope_scale", Scalar::F32(2.5)), ("rope_theta", Scalar::F32(5e5))]),
    ];
    let half = case.hidden / 2;
    if half >= 2 && half.is_multiple_of(2) {
        let half = ("rotary_dim", Scalar::U32(half as u32));
        variants.extend([with(&[half]), with(&[half, interleaved])]);
    }
    variants
}

/// [`run_case_with_table`] for every cache op, dtype and rope scalar variant of `cases`, with
/// tables of half the head (where even) and of one pair, their rows `case.pad + 1` elements
/// apart beyond their width (odd: off 16-byte boundaries where the case is strided).
pub fn run_narrow_tables(runner: &impl Runner, seed: u64, cases: &[Case]) {
    use ferrinfer_launch::{apply_rope_with_cos_sin_cache, apply_rope_with_cos_sin_cache_inplace};
    let ops = [&apply_rope_with_cos_sin_cache::INFO, &apply_rope_with_cos_sin_cache_inplace::INFO];
    let mut failures = Vec::new();
    for (i, (op, case)) in ops.into_iter().flat_map(|op| cases.iter().map(move |c| (op, c))).enumerate() {
        let widths = [case.hidden / 2, 2].into_iter().filter(|&w| w >= 2 && w % 2 == 0 && w < case.hidden);
        for (width, dtype) in widths.flat_map(|w| DType::ALL.into_iter().map(move |d| (w, d))) {
            for scalars in rope_scalar_variants(op, case) {
                let pad = if case.pad > 0 { case.pad + 1 } else { 0 };
                let run = run_case_with_table(runner, op, dtype, case, seed + i as u64, (&scalars, width, pad));
                failures.extend(run.err());
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A paged-KV append of its own geometry (the registry's problems are "NHD" pages of
/// `page::PAGE_SIZE` entries): `tokens` tokens dealt round-robin to `sequences` sequences, each
/// holding `prefix` entries before the append; pages of `page_size`, in `layout`; index
/// tensors of `index` (int32 or int64).
#[derive(Clone, Copy, Debug)]
pub struct PagedCase {
    pub tokens: usize,
    pub sequences: usize,
    pub heads: usize,
    pub head_dim: usize,
    pub page_size: usize,
    pub layout: ferrinfer_launch::KvLayout,
    pub index: DType,
    pub prefix: usize,
}

impl PagedCase {
    /// The op's buffers: keys and values of `dtype` from `seed`, caches of every used page
    /// and two spare ones (also from `seed`: what the append leaves must stay), and the page
    /// table — each sequence's pages in reverse order of the cache's.
    pub fn buffers(&self, dtype: DType, seed: u64) -> Vec<Buffer> {
        let (s, ps) = (self.sequences, self.page_size);
        let appended = |b: usize| (self.tokens + s - 1 - b) / s;
        let lengths: Vec<usize> = (0..s).map(|b| self.prefix + appended(b)).collect();
        let pages: Vec<usize> = lengths.iter().map(|l| l.div_ceil(ps)).collect();
        let used: usize = pages.iter().sum();
        let cache_pages = used + 2;
        let mut bounds = vec![0];
        for p in &pages {
            bounds.push(bounds.last().unwrap() + p);
        }
        let last: Vec<usize> = lengths.iter().zip(&pages).map(|(l, p)| l - p.saturating_sub(1) * ps).collect();
        let index = |values: Vec<usize>| {
            let len = values.len();
            with_host_element!(self.index, T => buffer_of(&values.iter().map(|&v| T::from_f64(v as f64)).collect::<Vec<T>>(), &[len]))
        };
        let rows = [self.tokens, self.heads, self.head_dim];
        let cache_shape = match self.layout {
            ferrinfer_launch::KvLayout::Nhd => [cache_pages, ps, self.heads, self.head_dim],
            ferrinfer_launch::KvLayout::Hnd => [cache_pages, self.heads, ps, self.head_dim],
        };
        let values = |shape: &[usize], seed: u64| {
            let len = shape.iter().product();
            with_host_element!(dtype, T => buffer_of(&reference::random_normal::<T>(len, seed), shape))
        };
        vec![
            values(&rows, seed),
            values(&rows, seed + 1),
            index((0..self.tokens).map(|i| i % s).collect()),
            index((0..self.tokens).map(|i| self.prefix + i / s).collect()),
            values(&cache_shape, seed + 2),
            values(&cache_shape, seed + 3),
            index((0..used).map(|u| cache_pages - 1 - u).collect()),
            index(bounds),
            index(last),
        ]
    }

    /// Runs the append on `runner` and checks both caches, every element, against the f64
    /// reference of its geometry.
    pub fn run(&self, runner: &impl Runner, dtype: DType, seed: u64) -> Result<(), String> {
        let op = &ferrinfer_launch::append_paged_kv_cache::INFO;
        let label = format!("{self:?} {dtype}");
        let mut buffers = self.buffers(dtype, seed);
        let inputs: Vec<Vec<f64>> = buffers.iter().map(Buffer::values).collect();
        let layout = ferrinfer_launch::scalar::ScalarType::into_scalar(self.layout);
        runner.run(op, &mut buffers, &[layout]).map_err(|e| format!("{label}: {e}"))?;
        let geometry = ferrinfer_launch::page::CacheGeometry {
            heads: self.heads,
            head_dim: self.head_dim,
            page_size: self.page_size,
            layout: self.layout,
        };
        let want = ferrinfer_launch::page::appended(&inputs, geometry);
        for (i, (name, want)) in ["paged_k_cache", "paged_v_cache"].iter().zip(&want).enumerate() {
            reference::compare(dtype, &buffers[4 + i].values(), want).map_err(|e| format!("{label}: `{name}`: {e}"))?;
        }
        Ok(())
    }
}
