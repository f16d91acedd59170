//! The norm family on a CUDA GPU through the public API: the grid for every op and dtype, every
//! kernel path at sanitizer-friendly sizes, in place, narrow vectors, 3-D input, PDL on and off,
//! CUDA-graph capture and a tensor of more than 2^31 elements. Without a CUDA driver or device
//! every test here prints that it was skipped and passes (CI has no GPU).

mod support;

use ferrinfer_launch::cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use ferrinfer_launch::reference::{self, random_normal};
use ferrinfer_launch::{DType, Scalar, Stream, TensorView, rmsnorm};
use half::bf16;
use support::{Case, Gpu, Runner, family, run_case, run_cases};

#[test]
fn norm_gpu_grid() {
    let Some(gpu) = Gpu::get("norm_gpu_grid") else { return };
    run_cases(&gpu, &family("norm"), 1_000_000, &support::grid());
}

/// Hidden sizes from 64 to 16384, odd ones too, and many short rows (a per-head norm): every
/// layout the planner picks, row groups of whole warps that are not a power of two among them
/// (3000, 5120, 6144, 12288), odd and 2-mod-4 widths (333, 1002, 2049, 4094, 4095, 12287, 16383:
/// peeled where 2500 rows are many for the kernel, read narrow otherwise; `norm_peeled_gpu` forces
/// every batch onto the peeled kernels).
#[test]
fn norm_gpu_layouts_across_hidden_sizes() {
    let Some(gpu) = Gpu::get("norm_gpu_layouts_across_hidden_sizes") else { return };
    let mut cases = vec![Case::contiguous(110_000, 128), Case::strided(30_000, 64)];
    let hiddens = [64, 96, 127, 128, 200, 256, 333, 512, 768, 1000, 1002, 1536, 2048, 2049, 3000, 4094, 4095, 5120];
    for hidden in hiddens.into_iter().chain([6144, 12287, 12288, 16383, 16384]) {
        cases.extend([Case::contiguous(1, hidden), Case::contiguous(7, hidden), Case::strided(2500, hidden)]);
    }
    run_cases(&gpu, &family("norm"), 8_000_000, &cases);
}

/// Every op and dtype over `support::sanitizer_cases`: what `suite.sh memcheck|racecheck` run
/// in place of the grid, which takes hours under compute-sanitizer.
#[test]
fn norm_gpu_sanitizer_every_kernel_path() {
    let Some(gpu) = Gpu::get("norm_gpu_sanitizer_every_kernel_path") else { return };
    run_cases(&gpu, &family("norm"), 7_000_000, &support::sanitizer_cases());
}

/// With and without programmatic dependent launch, bitwise the same results, back to back on one
/// stream: a chain of in-place rmsnorms and fused adds, each launch reading what the previous one
/// wrote (a launch that started reading early would change the bits). The chain's first step is
/// also checked against the f64 reference.
#[test]
fn norm_gpu_pdl_on_and_off_chain_correctly() {
    let Some(gpu) = Gpu::get("norm_gpu_pdl_on_and_off_chain_correctly") else { return };
    let s = &gpu.stream;
    let (rows, hidden) = (300, 4096);
    let x: Vec<bf16> = random_normal(rows * hidden, 61);
    let r: Vec<bf16> = random_normal(rows * hidden, 63);
    let w: Vec<bf16> = random_normal(hidden, 62);
    let run = |pdl: Option<bool>, steps: usize| {
        let (mut data, mut residual, wd) =
            (s.clone_htod(&x).unwrap(), s.clone_htod(&r).unwrap(), s.clone_htod(&w).unwrap());
        let mut view = TensorView::from_cuda_mut(&mut data, &[rows, hidden], None).unwrap();
        let mut rv = TensorView::from_cuda_mut(&mut residual, &[rows, hidden], None).unwrap();
        let wv = TensorView::from_cuda(&wd, &[hidden], None).unwrap();
        ferrinfer_launch::with_pdl(pdl, || {
            for step in 0..steps {
                if step % 2 == 0 {
                    rmsnorm(&view, &wv, &mut view.clone(), 1e-6, Stream::Cuda(s)).unwrap();
                } else {
                    ferrinfer_launch::fused_add_rmsnorm(&mut view, &mut rv, &wv, 1e-6, Stream::Cuda(s)).unwrap();
                }
            }
        });
        (s.clone_dtoh(&data).unwrap(), s.clone_dtoh(&residual).unwrap())
    };
    let first = reference::to_f64(&run(Some(true), 1).0);
    reference::compare(DType::Bf16, &first, &rms_rows(&reference::to_f64(&x), &reference::to_f64(&w), hidden)).unwrap();
    let without = run(Some(false), 16);
    for pdl in [Some(true), None] {
        assert!(run(pdl, 16) == without, "PDL {pdl:?} changed the chain's bits");
    }
}

/// rmsnorm in f64 (through the op's reference).
fn rms_rows(x: &[f64], w: &[f64], hidden: usize) -> Vec<f64> {
    rmsnorm::INFO
        .reference_of(DType::Bf16, hidden, &[x.to_vec(), w.to_vec(), Vec::new()], &[Scalar::F32(1e-6)])
        .remove(0)
}

#[test]
fn norm_gpu_narrow_vectors_from_odd_strides() {
    let Some(gpu) = Gpu::get("norm_gpu_narrow_vectors_from_odd_strides") else { return };
    for (hidden, pad) in [(4096, 1), (1024, 2), (3584, 4)] {
        let case = Case { rows: 33, hidden, pad };
        for &op in &family("norm") {
            for dtype in [DType::Bf16, DType::F32] {
                run_case(&gpu, op, dtype, false, &case, 1).unwrap();
            }
        }
    }
}

#[test]
fn norm_gpu_in_place_and_three_dims() {
    let Some(gpu) = Gpu::get("norm_gpu_in_place_and_three_dims") else { return };
    let s = &gpu.stream;
    let (tokens, heads, dim) = (7, 8, 128);
    let x: Vec<bf16> = random_normal(tokens * heads * dim, 21);
    let w: Vec<bf16> = random_normal(dim, 22);
    let (mut data, wd) = (s.clone_htod(&x).unwrap(), s.clone_htod(&w).unwrap());
    let view = TensorView::from_cuda_mut(&mut data, &[tokens, heads, dim], None).unwrap();
    let wv = TensorView::from_cuda(&wd, &[dim], None).unwrap();
    rmsnorm(&view, &wv, &mut view.clone(), 1e-6, Stream::Cuda(s)).unwrap();
    let out = s.clone_dtoh(&data).unwrap();
    let want = rms_rows(&reference::to_f64(&x), &reference::to_f64(&w), dim);
    reference::compare(DType::Bf16, &reference::to_f64(&out), &want).unwrap();
}

#[test]
fn norm_gpu_launches_replay_inside_a_cuda_graph() {
    let Some(gpu) = Gpu::get("norm_gpu_launches_replay_inside_a_cuda_graph") else { return };
    let s = &gpu.stream;
    let (rows, hidden) = (64, 4096);
    let x: Vec<bf16> = random_normal(rows * hidden, 31);
    let w: Vec<bf16> = random_normal(4096, 32);
    let (xd, wd) = (s.clone_htod(&x).unwrap(), s.clone_htod(&w).unwrap());
    let mut od = s.clone_htod(&vec![bf16::NAN; rows * hidden]).unwrap();
    let xv = TensorView::from_cuda(&xd, &[rows, hidden], None).unwrap();
    let wv = TensorView::from_cuda(&wd, &[4096], None).unwrap();
    let mut ov = TensorView::from_cuda_mut(&mut od, &[rows, hidden], None).unwrap();
    rmsnorm(&xv, &wv, &mut ov, 1e-6, Stream::Cuda(s)).unwrap(); // loads the module outside capture
    s.memcpy_htod(&vec![bf16::NAN; rows * hidden], &mut od).unwrap();
    let mut ov = TensorView::from_cuda_mut(&mut od, &[rows, hidden], None).unwrap();
    s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).unwrap();
    rmsnorm(&xv, &wv, &mut ov, 1e-6, Stream::Cuda(s)).unwrap();
    let graph = s.end_capture(CUgraphInstantiate_flags(0)).unwrap().expect("a captured graph");
    graph.launch().unwrap();
    let out = s.clone_dtoh(&od).unwrap();
    let want = rms_rows(&reference::to_f64(&x), &reference::to_f64(&w), 4096);
    reference::compare(DType::Bf16, &reference::to_f64(&out), &want).unwrap();
}

/// Streams owned by someone else (torch, a DLPack producer) arrive as raw handles: a stream made
/// here, and the legacy default stream (null), each wrapped by `borrowed_stream`.
#[test]
fn norm_gpu_runs_on_a_borrowed_raw_stream() {
    let Some(gpu) = Gpu::get("norm_gpu_runs_on_a_borrowed_raw_stream") else { return };
    let owner = &gpu.stream;
    let (rows, hidden) = (33, 4096);
    let x: Vec<bf16> = random_normal(rows * hidden, 51);
    let w: Vec<bf16> = random_normal(4096, 52);
    let want = rms_rows(&reference::to_f64(&x), &reference::to_f64(&w), 4096);
    let (xd, wd) = (owner.clone_htod(&x).unwrap(), owner.clone_htod(&w).unwrap());
    owner.synchronize().unwrap();
    for raw in [owner.cu_stream() as usize, 0] {
        // SAFETY: `owner` (or the legacy default stream) outlives `stream`; device 0's primary context.
        let stream = unsafe { ferrinfer_launch::borrowed_stream(0, raw) }.unwrap();
        let mut od = stream.clone_htod(&vec![bf16::NAN; rows * hidden]).unwrap();
        let xv = TensorView::from_cuda(&xd, &[rows, hidden], None).unwrap();
        let wv = TensorView::from_cuda(&wd, &[4096], None).unwrap();
        let mut ov = TensorView::from_cuda_mut(&mut od, &[rows, hidden], None).unwrap();
        rmsnorm(&xv, &wv, &mut ov, 1e-6, Stream::Cuda(&stream)).unwrap();
        let out = stream.clone_dtoh(&od).unwrap();
        reference::compare(DType::Bf16, &reference::to_f64(&out), &want).unwrap();
    }
}

/// More than 2^31 elements, for rmsnorm and the fused op: every offset must be 64-bit. The
/// check runs on slices of rows, on all cores (f64 copies of the whole tensor would not fit).
#[test]
fn norm_gpu_over_2_pow_31_elements() {
    let Some(gpu) = Gpu::get("norm_gpu_over_2_pow_31_elements") else { return };
    let case = Case::contiguous(524_289, 4096);
    assert!(case.rows * case.hidden > 1 << 31);
    for op in [&ferrinfer_launch::rmsnorm::INFO, &ferrinfer_launch::fused_add_rmsnorm::INFO] {
        let before = support::buffers(op, DType::Bf16, false, &case, 41);
        let mut after = before.clone();
        let eps = [Scalar::F32(1e-6)];
        gpu.run(op, &mut after, &eps).unwrap();
        let failures = support::check_in_slices(op, DType::Bf16, &case, &before, &after, &eps, 1024);
        assert!(failures.is_empty(), "{}: {failures:?}", op.name);
    }
}
