//! Shared by the CPU and GPU norm tests: DESIGN.md's grid, fresh random inputs, NaN-poisoned
//! outputs, the f64 reference and the check that every element (and nothing else) was written.
#![allow(dead_code)] // each test binary uses its own part

use ferrinfer_launch::reference::{self, Agreement};
use ferrinfer_launch::{DType, Error, HostElement};

pub const BATCHES: [usize; 4] = [1, 19, 99, 989];
pub const HIDDENS: [usize; 9] = [111, 500, 1004, 1024, 3072, 3584, 4096, 8192, 16384];
pub const EPS: f32 = 1e-6;

/// One grid point: `rows` rows of `hidden`, rows `in_stride` / `out_stride` elements apart.
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

    fn len(stride: usize, rows: usize, hidden: usize) -> usize {
        (rows - 1) * stride + hidden
    }

    pub fn in_len(&self) -> usize {
        Self::len(self.in_stride, self.rows, self.hidden)
    }

    pub fn out_len(&self) -> usize {
        Self::len(self.out_stride, self.rows, self.hidden)
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

/// Runs rmsnorm somewhere (CPU backend, GPU) on host buffers laid out as `case` says.
pub trait Runner {
    fn rmsnorm<T: HostElement>(&self, case: &Case, x: &[T], w: &[T], out: &mut [T], eps: f32) -> Result<(), Error>;
}

/// Runs one case with fresh inputs from `seed` and checks it; the error says what was wrong.
pub fn run_case<T: HostElement>(runner: &impl Runner, case: &Case, seed: u64) -> Result<Agreement, String> {
    let x: Vec<T> = reference::random_normal(case.in_len(), seed);
    let w: Vec<T> = reference::random_normal(case.hidden, seed ^ 0x5eed);
    let poison = T::from_f64(f64::NAN);
    let mut out = vec![poison; case.out_len()];
    runner.rmsnorm(case, &x, &w, &mut out, EPS).map_err(|e| e.to_string())?;
    check(case, &x, &w, &out)
}

/// Compares the rows of `out` with the f64 reference; the gaps between rows must still hold the
/// NaN poison, bit for bit (a kernel must not write outside its rows).
pub fn check<T: HostElement>(case: &Case, x: &[T], w: &[T], out: &[T]) -> Result<Agreement, String> {
    let rows = |data: &[T], stride: usize| -> Vec<f64> {
        (0..case.rows).flat_map(|r| reference::to_f64(&data[r * stride..r * stride + case.hidden])).collect()
    };
    let want = reference::rmsnorm(&rows(x, case.in_stride), &reference::to_f64(w), case.hidden, EPS as f64);
    let agreement = reference::compare(T::DTYPE, &rows(out, case.out_stride), &want);
    let poison = bytemuck::bytes_of(&T::from_f64(f64::NAN)).to_vec();
    for r in 0..case.rows.saturating_sub(1) {
        let gap = r * case.out_stride + case.hidden..(r + 1) * case.out_stride;
        if let Some(i) = gap.clone().find(|&i| bytemuck::bytes_of(&out[i]) != poison.as_slice()) {
            return Err(format!("element {i} between rows {r} and {} was written", r + 1));
        }
    }
    agreement.map_err(|e| format!("{case:?} {}: {e}", T::DTYPE))
}

/// Runs every grid case for `dtype` and panics listing all failures.
pub fn run_grid(runner: &impl Runner, dtype: DType, seed: u64) {
    let failures: Vec<String> = grid()
        .iter()
        .enumerate()
        .filter_map(|(i, case)| {
            let seed = seed + i as u64;
            let result = match dtype {
                DType::F16 => run_case::<half::f16>(runner, case, seed),
                DType::Bf16 => run_case::<half::bf16>(runner, case, seed),
                DType::F32 => run_case::<f32>(runner, case, seed),
            };
            result.err()
        })
        .collect();
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), grid().len(), failures.join("\n"));
}
