//! rmsnorm on a CUDA GPU through the public API: DESIGN.md's grid, in place, narrow vectors,
//! 3-D input, CUDA-graph capture and a tensor of more than 2^31 elements. Without a CUDA driver
//! or device every test here prints that it was skipped and passes (CI has no GPU).

mod support;

use std::io::Write;
use std::sync::Arc;

use ferrinfer_launch::cudarc::driver::{
    CudaContext, CudaStream, sys::CUgraphInstantiate_flags, sys::CUstreamCaptureMode,
};
use ferrinfer_launch::reference::{self, random_normal};
use ferrinfer_launch::{DType, Error, HostElement, Stream, TensorView, cuda_device_count, rmsnorm};
use half::bf16;
use support::{Case, Op, Runner, run_cases, run_grid};

struct Gpu {
    stream: Arc<CudaStream>,
}

/// The GPU, or `None` after saying why the test is skipped.
fn gpu(test: &str) -> Option<Gpu> {
    if cuda_device_count() == 0 {
        // Straight to stderr, past libtest's capture, so a CI log shows every skip.
        let _ = writeln!(std::io::stderr(), "{test}: SKIPPED — no CUDA driver or device on this machine");
        return None;
    }
    let stream = CudaContext::new(0).and_then(|ctx| ctx.new_stream()).expect("CUDA device 0");
    Some(Gpu { stream })
}

impl Runner for Gpu {
    fn norm<T: HostElement, W: HostElement>(
        &self,
        op: Op,
        case: &Case,
        x: &mut [T],
        r: &mut [T],
        w: &[W],
        b: &[W],
        out: &mut [T],
    ) -> Result<(), Error> {
        let s = &self.stream;
        let (mut xd, mut rd, mut od) = (s.clone_htod(x)?, s.clone_htod(r)?, s.clone_htod(out)?);
        let (wd, bd) = (s.clone_htod(w)?, s.clone_htod(b)?);
        let mut xv = TensorView::from_cuda_mut(&mut xd, &case.shape(), Some(&case.in_strides()))?;
        let mut rv = TensorView::from_cuda_mut(&mut rd, &case.shape(), Some(&case.out_strides()))?;
        let (wv, bv) =
            (TensorView::from_cuda(&wd, &[case.hidden], None)?, TensorView::from_cuda(&bd, &[case.hidden], None)?);
        let mut ov = TensorView::from_cuda_mut(&mut od, &case.shape(), Some(&case.out_strides()))?;
        support::call(op, &mut xv, &mut rv, &wv, &bv, &mut ov, Stream::Cuda(s))?;
        s.memcpy_dtoh(&xd, x)?;
        s.memcpy_dtoh(&rd, r)?;
        s.memcpy_dtoh(&od, out)?;
        s.synchronize()?;
        Ok(())
    }
}

/// DESIGN.md's grid for `op`, every dtype and weight dtype. One test per op, so a sanitizer
/// run can take them one at a time.
fn grid_of(test: &str, op: Op, seed: u64) {
    let Some(gpu) = gpu(test) else { return };
    for (i, (_, dtype, f32_weights)) in support::every_op_and_dtype().into_iter().filter(|(o, ..)| *o == op).enumerate()
    {
        run_grid(&gpu, op, dtype, f32_weights, seed + 100_000 * i as u64);
    }
}

#[test]
fn norm_gpu_grid_rmsnorm() {
    grid_of("norm_gpu_grid_rmsnorm", Op::RmsNorm, 1_000_000);
}

#[test]
fn norm_gpu_grid_gemma_rmsnorm() {
    grid_of("norm_gpu_grid_gemma_rmsnorm", Op::GemmaRmsNorm, 2_000_000);
}

#[test]
fn norm_gpu_grid_fused_add_rmsnorm() {
    grid_of("norm_gpu_grid_fused_add_rmsnorm", Op::FusedAddRmsNorm, 3_000_000);
}

#[test]
fn norm_gpu_grid_gemma_fused_add_rmsnorm() {
    grid_of("norm_gpu_grid_gemma_fused_add_rmsnorm", Op::GemmaFusedAddRmsNorm, 4_000_000);
}

#[test]
fn norm_gpu_grid_layernorm() {
    grid_of("norm_gpu_grid_layernorm", Op::LayerNorm, 5_000_000);
}

/// Every op and dtype over `support::sanitizer_cases`: what `suite.sh memcheck|racecheck` run
/// in place of the grid, which takes hours under compute-sanitizer.
#[test]
fn norm_gpu_sanitizer_every_kernel_path() {
    let Some(gpu) = gpu("norm_gpu_sanitizer_every_kernel_path") else { return };
    for (i, (op, dtype, f32_weights)) in support::every_op_and_dtype().into_iter().enumerate() {
        run_cases(&gpu, op, dtype, f32_weights, 7_000_000 + 1000 * i as u64, &support::sanitizer_cases());
    }
}

#[test]
fn norm_gpu_narrow_vectors_from_odd_strides_and_offsets() {
    let Some(gpu) = gpu("norm_gpu_narrow_vectors_from_odd_strides_and_offsets") else { return };
    for (hidden, in_stride, out_stride) in [(4096, 4097, 4099), (1024, 1026, 1028), (3584, 3588, 3584)] {
        let case = Case { rows: 33, hidden, in_stride, out_stride };
        for op in Op::ALL {
            support::run_case::<bf16, bf16>(&gpu, op, &case, 1).unwrap();
            support::run_case::<f32, f32>(&gpu, op, &case, 2).unwrap();
        }
    }
}

#[test]
fn norm_gpu_in_place_and_three_dims() {
    let Some(gpu) = gpu("norm_gpu_in_place_and_three_dims") else { return };
    let s = &gpu.stream;
    let (tokens, heads, dim) = (7, 8, 128);
    let x: Vec<bf16> = random_normal(tokens * heads * dim, 21);
    let w: Vec<bf16> = random_normal(dim, 22);
    let (mut data, wd) = (s.clone_htod(&x).unwrap(), s.clone_htod(&w).unwrap());
    let view = TensorView::from_cuda_mut(&mut data, &[tokens, heads, dim], None).unwrap();
    let wv = TensorView::from_cuda(&wd, &[dim], None).unwrap();
    rmsnorm(&view, &wv, &mut view.clone(), 1e-6, Stream::Cuda(s)).unwrap();
    let out = s.clone_dtoh(&data).unwrap();
    let want = reference::rmsnorm(&reference::to_f64(&x), &reference::to_f64(&w), dim, 1e-6, 0.0);
    reference::compare(DType::Bf16, &reference::to_f64(&out), &want).unwrap();
}

#[test]
fn norm_gpu_launches_replay_inside_a_cuda_graph() {
    let Some(gpu) = gpu("norm_gpu_launches_replay_inside_a_cuda_graph") else { return };
    let s = &gpu.stream;
    let case = Case::contiguous(64, 4096);
    let x: Vec<bf16> = random_normal(case.in_len(), 31);
    let w: Vec<bf16> = random_normal(4096, 32);
    let (xd, wd) = (s.clone_htod(&x).unwrap(), s.clone_htod(&w).unwrap());
    let mut od = s.clone_htod(&vec![bf16::NAN; case.out_len()]).unwrap();
    let xv = TensorView::from_cuda(&xd, &case.shape(), None).unwrap();
    let wv = TensorView::from_cuda(&wd, &[4096], None).unwrap();
    let mut ov = TensorView::from_cuda_mut(&mut od, &case.shape(), None).unwrap();
    rmsnorm(&xv, &wv, &mut ov, 1e-6, Stream::Cuda(s)).unwrap(); // loads the module outside capture
    s.memcpy_htod(&vec![bf16::NAN; case.out_len()], &mut od).unwrap();
    let mut ov = TensorView::from_cuda_mut(&mut od, &case.shape(), None).unwrap();
    s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).unwrap();
    rmsnorm(&xv, &wv, &mut ov, 1e-6, Stream::Cuda(s)).unwrap();
    let graph = s.end_capture(CUgraphInstantiate_flags(0)).unwrap().expect("a captured graph");
    graph.launch().unwrap();
    let out = s.clone_dtoh(&od).unwrap();
    let want = reference::rmsnorm(&reference::to_f64(&x), &reference::to_f64(&w), 4096, 1e-6, 0.0);
    reference::compare(DType::Bf16, &reference::to_f64(&out), &want).unwrap();
}

/// Streams owned by someone else (torch, a DLPack producer) arrive as raw handles: a stream made
/// here, and the legacy default stream (null), each wrapped by `borrowed_stream`.
#[test]
fn norm_gpu_runs_on_a_borrowed_raw_stream() {
    let Some(gpu) = gpu("norm_gpu_runs_on_a_borrowed_raw_stream") else { return };
    let owner = &gpu.stream;
    let case = Case::contiguous(33, 4096);
    let x: Vec<bf16> = random_normal(case.in_len(), 51);
    let w: Vec<bf16> = random_normal(4096, 52);
    let want = reference::rmsnorm(&reference::to_f64(&x), &reference::to_f64(&w), 4096, 1e-6, 0.0);
    let (xd, wd) = (owner.clone_htod(&x).unwrap(), owner.clone_htod(&w).unwrap());
    owner.synchronize().unwrap();
    for raw in [owner.cu_stream() as usize, 0] {
        // SAFETY: `owner` (or the legacy default stream) outlives `stream`; device 0's primary context.
        let stream = unsafe { ferrinfer_launch::borrowed_stream(0, raw) }.unwrap();
        let mut od = stream.clone_htod(&vec![bf16::NAN; case.out_len()]).unwrap();
        let xv = TensorView::from_cuda(&xd, &case.shape(), None).unwrap();
        let wv = TensorView::from_cuda(&wd, &[4096], None).unwrap();
        let mut ov = TensorView::from_cuda_mut(&mut od, &case.shape(), None).unwrap();
        rmsnorm(&xv, &wv, &mut ov, 1e-6, Stream::Cuda(&stream)).unwrap();
        let out = stream.clone_dtoh(&od).unwrap();
        reference::compare(DType::Bf16, &reference::to_f64(&out), &want).unwrap();
    }
}

/// More than 2^31 elements, for rmsnorm and the fused op: every offset must be 64-bit. Inputs
/// are made and checked on all cores.
#[test]
fn norm_gpu_over_2_pow_31_elements() {
    let Some(gpu) = gpu("norm_gpu_over_2_pow_31_elements") else { return };
    let case = Case::contiguous(524_289, 4096);
    assert!(case.rows * case.hidden > 1 << 31);
    for op in [Op::RmsNorm, Op::FusedAddRmsNorm] {
        check_in_parallel(&gpu, op, &case);
    }
}

/// Runs `op` on the GPU over all of `case`, then checks slices of 1024 rows on all cores (the f64
/// copies of the whole tensor would not fit in memory).
fn check_in_parallel(gpu: &Gpu, op: Op, case: &Case) {
    let n = case.rows * case.hidden;
    let (x0, r0): (Vec<bf16>, Vec<bf16>) = (random_normal(n, 41), random_normal(n, 42));
    let w: Vec<bf16> = random_normal(case.hidden, 40);
    let (mut x, mut r, mut out) = (x0.clone(), r0.clone(), vec![bf16::NAN; n]);
    gpu.norm(op, case, &mut x, &mut r, &w, &w, &mut out).unwrap();
    let slice = 1024 * case.hidden;
    let failures: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n.div_ceil(slice))
            .map(|i| {
                let range = i * slice..((i + 1) * slice).min(n);
                let (x0, r0, x, r, out, w) =
                    (&x0[range.clone()], &r0[range.clone()], &x[range.clone()], &r[range.clone()], &out[range], &w);
                scope.spawn(move || {
                    let (xf, wf) = (reference::to_f64(x0), reference::to_f64(w));
                    let (got, want) = if op.is_fused() {
                        let residual = reference::to_f64(r);
                        let (_, sums) =
                            reference::fused_add_rmsnorm::<bf16>(&xf, &reference::to_f64(r0), &wf, 4096, 1e-6, 0.0);
                        reference::compare(DType::Bf16, &residual, &sums).map_err(|e| format!("residual: {e}"))?;
                        (reference::to_f64(x), reference::rmsnorm(&residual, &wf, 4096, 1e-6, 0.0))
                    } else {
                        (reference::to_f64(out), reference::rmsnorm(&xf, &wf, 4096, 1e-6, 0.0))
                    };
                    reference::compare(DType::Bf16, &got, &want).map(|_| ())
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().unwrap().err()).collect()
    });
    assert!(failures.is_empty(), "{op:?}: {failures:?}");
}
