//! rmsnorm on a CUDA GPU through the public API: DESIGN.md's grid, in place, narrow vectors,
//! 3-D input, CUDA-graph capture and a tensor of more than 2^31 elements. Without a CUDA driver
//! or device every test here prints that it was skipped and passes (CI has no GPU).

mod support;

use std::io::Write;
use std::sync::Arc;

use ferrinfer_launch::cudarc::driver::{
    CudaContext, CudaStream, sys::CUgraphInstantiate_flags, sys::CUstreamCaptureMode,
};
use ferrinfer_launch::reference::random_normal;
use ferrinfer_launch::{DType, Error, HostElement, Stream, TensorView, cuda_device_count, rmsnorm};
use half::bf16;
use support::{Case, Runner, run_grid};

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
    fn rmsnorm<T: HostElement>(&self, case: &Case, x: &[T], w: &[T], out: &mut [T], eps: f32) -> Result<(), Error> {
        let s = &self.stream;
        let (xd, wd, mut od) = (s.clone_htod(x)?, s.clone_htod(w)?, s.clone_htod(out)?);
        let xv = TensorView::from_cuda(&xd, &case.shape(), Some(&case.in_strides()))?;
        let wv = TensorView::from_cuda(&wd, &[case.hidden], None)?;
        let mut ov = TensorView::from_cuda_mut(&mut od, &case.shape(), Some(&case.out_strides()))?;
        rmsnorm(&xv, &wv, &mut ov, eps, Stream::Cuda(s))?;
        s.memcpy_dtoh(&od, out)?;
        s.synchronize()?;
        Ok(())
    }
}

#[test]
fn norm_gpu_grid_f32() {
    if let Some(gpu) = gpu("norm_gpu_grid_f32") {
        run_grid(&gpu, DType::F32, 11_000);
    }
}

#[test]
fn norm_gpu_grid_f16() {
    if let Some(gpu) = gpu("norm_gpu_grid_f16") {
        run_grid(&gpu, DType::F16, 12_000);
    }
}

#[test]
fn norm_gpu_grid_bf16() {
    if let Some(gpu) = gpu("norm_gpu_grid_bf16") {
        run_grid(&gpu, DType::Bf16, 13_000);
    }
}

#[test]
fn norm_gpu_narrow_vectors_from_odd_strides_and_offsets() {
    let Some(gpu) = gpu("norm_gpu_narrow_vectors_from_odd_strides_and_offsets") else { return };
    for (hidden, in_stride, out_stride) in [(4096, 4097, 4099), (1024, 1026, 1028), (3584, 3588, 3584)] {
        let case = Case { rows: 33, hidden, in_stride, out_stride };
        for seed in 0..2 {
            support::run_case::<bf16>(&gpu, &case, seed).unwrap();
            support::run_case::<f32>(&gpu, &case, seed).unwrap();
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
    support::check(&Case::contiguous(tokens * heads, dim), &x, &w, &out).unwrap();
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
    support::check(&case, &x, &w, &out).unwrap();
}

/// More than 2^31 elements: every offset must be 64-bit. The check runs on all cores, a chunk of
/// rows per thread.
#[test]
fn norm_gpu_over_2_pow_31_elements() {
    let Some(gpu) = gpu("norm_gpu_over_2_pow_31_elements") else { return };
    let (rows, hidden) = (524_289usize, 4096usize);
    assert!(rows * hidden > 1 << 31);
    let chunk_rows = rows.div_ceil(std::thread::available_parallelism().map_or(1, |n| n.get()));
    let x: Vec<bf16> = random_normal(rows * hidden, 41);
    let w: Vec<bf16> = random_normal(hidden, 40);
    let mut out = vec![bf16::NAN; rows * hidden];
    gpu.rmsnorm(&Case::contiguous(rows, hidden), &x, &w, &mut out, support::EPS).unwrap();
    // Each thread checks its rows 1024 at a time, so the f64 copies stay small.
    let check_rows = |xc: &[bf16], oc: &[bf16]| -> Vec<String> {
        let pieces = xc.chunks(1024 * hidden).zip(oc.chunks(1024 * hidden));
        pieces
            .filter_map(|(xp, op)| support::check(&Case::contiguous(xp.len() / hidden, hidden), xp, &w, op).err())
            .collect()
    };
    let failures: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = x
            .chunks(chunk_rows * hidden)
            .zip(out.chunks(chunk_rows * hidden))
            .map(|(xc, oc)| scope.spawn(move || check_rows(xc, oc)))
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    assert!(failures.is_empty(), "{failures:?}");
}
