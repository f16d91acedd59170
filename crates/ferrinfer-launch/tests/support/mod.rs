//! Shared by the CPU and GPU norm tests: DESIGN.md's grid, fresh random inputs, NaN-poisoned
//! outputs, the f64 references, and the check that every element (and nothing else) was written.
#![allow(dead_code)] // each test binary uses its own part

use ferrinfer_launch::reference::{self, Agreement};
use ferrinfer_launch::{DType, Error, HostElement, Stream, TensorView};

pub const BATCHES: [usize; 4] = [1, 19, 99, 989];
pub const HIDDENS: [usize; 9] = [111, 500, 1004, 1024, 3072, 3584, 4096, 8192, 16384];
pub const EPS: f32 = 1e-6;

pub use ferrinfer_launch::norm::NormRoutine as Op;

/// `call`'s arguments, as `NormRoutine::run` takes them, with the tests' eps.
pub fn call(
    op: Op,
    x: &mut TensorView,
    r: &mut TensorView,
    w: &TensorView,
    b: &TensorView,
    out: &mut TensorView,
    stream: Stream,
) -> Result<(), Error> {
    op.run(x, r, w, b, out, EPS, stream)
}

/// One grid point: `rows` rows of `hidden`; input rows `in_stride` apart, output and residual
/// rows `out_stride` apart.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub rows: usize,
    pub hidden: usize,
    pub in_stride: usize,
    pub out_stride: usize,
}

impl Case {
    pub fn contiguous(rows: usize, hidden: usize) -> Self {
        Case { rows, hidden, in_stride: hidden, out_stride: hidden }
    }

    /// Rows of larger buffers (strides > hidden, multiples of 8 so vector widths still apply).
    pub fn strided(rows: usize, hidden: usize) -> Self {
        Case { rows, hidden, in_stride: hidden + 40, out_stride: hidden + 72 }
    }

    pub fn shape(&self) -> [usize; 2] {
        [self.rows, self.hidden]
    }

    pub fn in_strides(&self) -> [i64; 2] {
        [self.in_stride as i64, 1]
    }

    pub fn out_strides(&self) -> [i64; 2] {
        [self.out_stride as i64, 1]
    }

    pub fn in_len(&self) -> usize {
        (self.rows - 1) * self.in_stride + self.hidden
    }

    pub fn out_len(&self) -> usize {
        (self.rows - 1) * self.out_stride + self.hidden
    }

    /// The rows of a buffer with row stride `stride`, as f64.
    fn rows_of<T: HostElement>(&self, data: &[T], stride: usize) -> Vec<f64> {
        (0..self.rows).flat_map(|r| reference::to_f64(&data[r * stride..r * stride + self.hidden])).collect()
    }

    /// The first element between rows of `data` that differs (bitwise) from `original`.
    fn touched_gap<T: HostElement>(&self, data: &[T], original: &[T], stride: usize) -> Option<usize> {
        (0..self.rows.saturating_sub(1))
            .flat_map(|r| r * stride + self.hidden..(r + 1) * stride)
            .find(|&i| bytemuck::bytes_of(&data[i]) != bytemuck::bytes_of(&original[i]))
    }
}

/// The grid: every batch × hidden, contiguous and strided.
pub fn grid() -> Vec<Case> {
    let mut cases = Vec::new();
    for rows in BATCHES {
        for hidden in HIDDENS {
            cases.push(Case::contiguous(rows, hidden));
            cases.push(Case::strided(rows, hidden));
        }
    }
    cases
}

/// Runs a norm somewhere (CPU backend, GPU) on host buffers laid out as `case` says.
pub trait Runner {
    #[allow(clippy::too_many_arguments)]
    fn norm<T: HostElement, W: HostElement>(
        &self,
        op: Op,
        case: &Case,
        x: &mut [T],
        r: &mut [T],
        w: &[W],
        b: &[W],
        out: &mut [T],
    ) -> Result<(), Error>;
}

/// Runs `op` on one case with fresh inputs from `seed` and checks everything it wrote and did
/// not write; the error says what was wrong.
pub fn run_case<T: HostElement, W: HostElement>(
    runner: &impl Runner,
    op: Op,
    case: &Case,
    seed: u64,
) -> Result<Agreement, String> {
    let (x0, r0): (Vec<T>, Vec<T>) =
        (reference::random_normal(case.in_len(), seed), reference::random_normal(case.out_len(), seed ^ 1));
    let (w, b): (Vec<W>, Vec<W>) =
        (reference::random_normal(case.hidden, seed ^ 2), reference::random_normal(case.hidden, seed ^ 3));
    let (mut x, mut r) = (x0.clone(), r0.clone());
    let poison = vec![T::from_f64(f64::NAN); case.out_len()];
    let mut out = poison.clone();
    runner.norm(op, case, &mut x, &mut r, &w, &b, &mut out).map_err(|e| e.to_string())?;
    let context = |e: String| format!("{op:?} {case:?} {}: {e}", T::DTYPE);
    let (wf, bf) = (reference::to_f64(&w), reference::to_f64(&b));
    let eps = EPS as f64;
    let agreement = if op.is_fused() {
        let (_, sums) = reference::fused_add_rmsnorm::<T>(
            &case.rows_of(&x0, case.in_stride),
            &case.rows_of(&r0, case.out_stride),
            &wf,
            case.hidden,
            eps,
            op.weight_offset() as f64,
        );
        let residual = case.rows_of(&r, case.out_stride);
        reference::compare(T::DTYPE, &residual, &sums).map_err(|e| context(format!("residual: {e}")))?;
        // The output is the norm of the residual as stored: x + r is summed in f32 and rounded,
        // which can differ by one unit from the exact sum's rounding (checked just above).
        let want = reference::rmsnorm(&residual, &wf, case.hidden, eps, op.weight_offset() as f64);
        if let Some(i) = case.touched_gap(&x, &x0, case.in_stride).or(case.touched_gap(&r, &r0, case.out_stride)) {
            return Err(context(format!("element {i} between rows was written")));
        }
        reference::compare(T::DTYPE, &case.rows_of(&x, case.in_stride), &want)
    } else {
        let input = case.rows_of(&x0, case.in_stride);
        let want = match op {
            Op::LayerNorm => reference::layernorm(&input, &wf, &bf, case.hidden, eps),
            _ => reference::rmsnorm(&input, &wf, case.hidden, eps, op.weight_offset() as f64),
        };
        if bytemuck::cast_slice::<T, u8>(&x) != bytemuck::cast_slice::<T, u8>(&x0) {
            return Err(context("the input was written".into()));
        }
        if let Some(i) = case.touched_gap(&out, &poison, case.out_stride) {
            return Err(context(format!("element {i} between output rows was written")));
        }
        reference::compare(T::DTYPE, &case.rows_of(&out, case.out_stride), &want)
    };
    agreement.map_err(context)
}

/// Runs every grid case of `op` for input dtype `dtype` (and, with `f32_weights`, f32 γ/β) on
/// all cores (the inputs and checks are host work) and panics listing all failures.
pub fn run_grid(runner: &(impl Runner + Sync), op: Op, dtype: DType, f32_weights: bool, seed: u64) {
    run_cases(runner, op, dtype, f32_weights, seed, &grid());
}

/// Small cases that still reach every kernel path — one and several warps per row, two rows per
/// block with the last block half empty, partial and full chunks, vector widths down to one
/// element, the streaming kernel — sized for compute-sanitizer, which slows kernels ~1000×.
pub fn sanitizer_cases() -> Vec<Case> {
    let mut cases = vec![Case::contiguous(2113, 1024), Case::strided(2113, 4096), Case::strided(5, 200_000)];
    for hidden in [111, 1004, 4096, 8192, 16384] {
        cases.extend([Case::contiguous(3, hidden), Case::strided(40, hidden)]);
    }
    cases
}

/// Like `run_grid`, over `cases`.
pub fn run_cases(runner: &(impl Runner + Sync), op: Op, dtype: DType, f32_weights: bool, seed: u64, cases: &[Case]) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(8);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(case) = cases.get(i) else { break };
                    let seed = seed + 10 * i as u64;
                    let result = match (dtype, f32_weights) {
                        (DType::F16, false) => run_case::<half::f16, half::f16>(runner, op, case, seed),
                        (DType::Bf16, false) => run_case::<half::bf16, half::bf16>(runner, op, case, seed),
                        (DType::F16, true) => run_case::<half::f16, f32>(runner, op, case, seed),
                        (DType::Bf16, true) => run_case::<half::bf16, f32>(runner, op, case, seed),
                        (DType::F32, _) => run_case::<f32, f32>(runner, op, case, seed),
                    };
                    if let Err(e) = result {
                        failures.lock().unwrap().push(e);
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
}

/// Every (op, dtype, f32 weights) the norm family supports.
pub fn every_op_and_dtype() -> Vec<(Op, DType, bool)> {
    let mut all = Vec::new();
    for op in Op::ALL {
        for dtype in DType::ALL {
            all.push((op, dtype, false));
            if op == Op::LayerNorm && dtype != DType::F32 {
                all.push((op, dtype, true));
            }
        }
    }
    all
}
