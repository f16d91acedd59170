//! The norm routines: inputs as the peers make them (random normal), the op run through
//! `ferrinfer-launch`, bytes counted as inputs read once plus outputs written once.

use ferrinfer_launch::norm::NormRoutine;
use ferrinfer_launch::reference::{self, Agreement};
use ferrinfer_launch::{DType, Error, HostElement, Stream, TensorView};

use crate::report::Row;
use crate::timing::Executor;

/// One case of a norm routine.
pub struct Setup {
    pub routine: NormRoutine,
    pub tokens: usize,
    pub hidden: usize,
    pub eps: f32,
    pub refcheck: bool,
    pub iters: usize,
}

/// Runs and times one case; layernorm's γ/β are of the input dtype.
pub fn run(executor: &Executor, dtype: DType, setup: &Setup) -> Result<Row, Error> {
    match dtype {
        DType::Bf16 => typed::<half::bf16>(executor, setup),
        DType::F16 => typed::<half::f16>(executor, setup),
        DType::F32 => typed::<f32>(executor, setup),
    }
}

/// Host buffers of one case: input, residual, weight, bias, output.
#[derive(Clone)]
struct Buffers<T> {
    x: Vec<T>,
    r: Vec<T>,
    w: Vec<T>,
    b: Vec<T>,
    out: Vec<T>,
}

impl<T: HostElement> Buffers<T> {
    fn new(s: &Setup) -> Self {
        let n = s.tokens * s.hidden;
        Buffers {
            x: reference::random_normal(n, 0x5eed),
            r: reference::random_normal(n, 0x7e51),
            w: reference::random_normal(s.hidden, 0x3e19),
            b: reference::random_normal(s.hidden, 0xb1a5),
            out: vec![T::from_f64(f64::NAN); n],
        }
    }
}

fn typed<T: HostElement>(executor: &Executor, s: &Setup) -> Result<Row, Error> {
    let shape = [s.tokens, s.hidden];
    let host = Buffers::<T>::new(s);
    let stream = executor.stream();
    let (us, after) = match executor {
        Executor::Cpu => {
            // Timing repeats the op (fused ops keep updating their buffers): time on a working
            // copy, check a single run on another.
            let us = with_host_op(&mut host.clone(), s, stream, |op| executor.time_us(s.iters, op))?;
            let mut after = host.clone();
            with_host_op(&mut after, s, stream, |op| op())?;
            (us, after)
        }
        Executor::Cuda(cuda) => {
            let (mut x, mut r, mut out) =
                (cuda.clone_htod(&host.x)?, cuda.clone_htod(&host.r)?, cuda.clone_htod(&host.out)?);
            let (w, b) = (cuda.clone_htod(&host.w)?, cuda.clone_htod(&host.b)?);
            let (wv, bv) =
                (TensorView::from_cuda(&w, &[s.hidden], None)?, TensorView::from_cuda(&b, &[s.hidden], None)?);
            let mut xv = TensorView::from_cuda_mut(&mut x, &shape, None)?;
            let mut rv = TensorView::from_cuda_mut(&mut r, &shape, None)?;
            let mut ov = TensorView::from_cuda_mut(&mut out, &shape, None)?;
            let started = std::time::Instant::now();
            s.routine.run(&mut xv, &mut rv, &wv, &bv, &mut ov, s.eps, stream)?;
            cuda.synchronize()?;
            // The process's first call includes finding and loading the module (driver PTX JIT).
            eprintln!(
                "# first call {} T={} H={}: {:.3} ms",
                s.routine.name(),
                s.tokens,
                s.hidden,
                started.elapsed().as_secs_f64() * 1e3
            );
            let after = match s.refcheck {
                true => Buffers {
                    x: cuda.clone_dtoh(&x)?,
                    r: cuda.clone_dtoh(&r)?,
                    out: cuda.clone_dtoh(&out)?,
                    ..host.clone()
                },
                false => host.clone(),
            };
            let mut xv = TensorView::from_cuda_mut(&mut x, &shape, None)?;
            let mut rv = TensorView::from_cuda_mut(&mut r, &shape, None)?;
            let mut ov = TensorView::from_cuda_mut(&mut out, &shape, None)?;
            let us = executor.time_us(s.iters, || s.routine.run(&mut xv, &mut rv, &wv, &bv, &mut ov, s.eps, stream))?;
            (us, after)
        }
    };
    let refcheck = s.refcheck.then(|| check(s, &host, &after));
    Ok(Row::new(s.routine.name(), T::DTYPE, s.tokens, s.hidden, executor.impl_name(), us, bytes::<T>(s), refcheck))
}

/// Hands `use_op` a closure that runs the routine once on host views of `buffers`.
fn with_host_op<T: HostElement, R>(
    buffers: &mut Buffers<T>,
    s: &Setup,
    stream: Stream,
    use_op: impl FnOnce(&mut dyn FnMut() -> Result<(), Error>) -> Result<R, Error>,
) -> Result<R, Error> {
    let shape = [s.tokens, s.hidden];
    let mut x = TensorView::from_slice_mut(&mut buffers.x, &shape)?;
    let mut r = TensorView::from_slice_mut(&mut buffers.r, &shape)?;
    let (w, b) = (TensorView::from_slice(&buffers.w, &[s.hidden])?, TensorView::from_slice(&buffers.b, &[s.hidden])?);
    let mut out = TensorView::from_slice_mut(&mut buffers.out, &shape)?;
    use_op(&mut || s.routine.run(&mut x, &mut r, &w, &b, &mut out, s.eps, stream))
}

/// Inputs read once + outputs written once, as the peers count.
fn bytes<T: HostElement>(s: &Setup) -> f64 {
    let (rows, weights) = ((s.tokens * s.hidden) as f64, s.hidden as f64);
    let elements = match s.routine {
        r if r.is_fused() => 4.0 * rows + weights,
        NormRoutine::LayerNorm => 2.0 * rows + 2.0 * weights,
        _ => 2.0 * rows + weights,
    };
    elements * T::DTYPE.size() as f64
}

/// The result of the first call against the f64 reference.
fn check<T: HostElement>(s: &Setup, before: &Buffers<T>, after: &Buffers<T>) -> Result<Agreement, String> {
    let (x, w, eps, offset) =
        (reference::to_f64(&before.x), reference::to_f64(&before.w), s.eps as f64, s.routine.weight_offset() as f64);
    let compare = |got: &[T], want: &[f64]| reference::compare(T::DTYPE, &reference::to_f64(got), want);
    match s.routine {
        r if r.is_fused() => {
            let (_, sums) =
                reference::fused_add_rmsnorm::<T>(&x, &reference::to_f64(&before.r), &w, s.hidden, eps, offset);
            compare(&after.r, &sums).map_err(|e| format!("residual: {e}"))?;
            compare(&after.x, &reference::rmsnorm(&reference::to_f64(&after.r), &w, s.hidden, eps, offset))
        }
        NormRoutine::LayerNorm => {
            compare(&after.out, &reference::layernorm(&x, &w, &reference::to_f64(&before.b), s.hidden, eps))
        }
        _ => compare(&after.out, &reference::rmsnorm(&x, &w, s.hidden, eps, offset)),
    }
}
