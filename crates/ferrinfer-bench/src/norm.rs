//! The norm routines: inputs as the peers make them (random normal), the op run through
//! `ferrinfer-launch`, bytes counted as inputs read once plus outputs written once.

use ferrinfer_launch::reference::{self, Agreement};
use ferrinfer_launch::{DType, Error, HostElement, TensorView, rmsnorm as launch_rmsnorm};

use crate::report::Row;
use crate::timing::Executor;

/// One case of a norm routine.
pub struct Setup {
    pub tokens: usize,
    pub hidden: usize,
    pub eps: f32,
    pub refcheck: bool,
    pub iters: usize,
}

pub fn rmsnorm(executor: &Executor, dtype: DType, setup: &Setup) -> Result<Row, Error> {
    match dtype {
        DType::Bf16 => rmsnorm_typed::<half::bf16>(executor, setup),
        DType::F16 => rmsnorm_typed::<half::f16>(executor, setup),
        DType::F32 => rmsnorm_typed::<f32>(executor, setup),
    }
}

fn rmsnorm_typed<T: HostElement>(executor: &Executor, s: &Setup) -> Result<Row, Error> {
    let shape = [s.tokens, s.hidden];
    let x: Vec<T> = reference::random_normal(s.tokens * s.hidden, 0x5eed);
    let w: Vec<T> = reference::random_normal(s.hidden, 0x3e19);
    let poison = vec![T::from_f64(f64::NAN); x.len()];
    let (us, out) = match executor {
        Executor::Cpu => {
            let mut out = poison;
            let (xv, wv) = (TensorView::from_slice(&x, &shape)?, TensorView::from_slice(&w, &[s.hidden])?);
            let mut ov = TensorView::from_slice_mut(&mut out, &shape)?;
            launch_rmsnorm(&xv, &wv, &mut ov, s.eps, executor.stream())?;
            let us =
                executor.time_us(s.iters, || launch_rmsnorm(&xv, &wv, &mut ov.clone(), s.eps, executor.stream()))?;
            (us, out)
        }
        Executor::Cuda(stream) => {
            let (xd, wd, mut od) = (stream.clone_htod(&x)?, stream.clone_htod(&w)?, stream.clone_htod(&poison)?);
            let (xv, wv) = (TensorView::from_cuda(&xd, &shape, None)?, TensorView::from_cuda(&wd, &[s.hidden], None)?);
            let ov = TensorView::from_cuda_mut(&mut od, &shape, None)?;
            let started = std::time::Instant::now();
            launch_rmsnorm(&xv, &wv, &mut ov.clone(), s.eps, executor.stream())?;
            stream.synchronize()?;
            // The process's first call includes finding and loading the module (driver PTX JIT).
            eprintln!("# first call T={} H={}: {:.3} ms", s.tokens, s.hidden, started.elapsed().as_secs_f64() * 1e3);
            let out = if s.refcheck { stream.clone_dtoh(&od)? } else { Vec::new() };
            let ov = TensorView::from_cuda_mut(&mut od, &shape, None)?;
            let us =
                executor.time_us(s.iters, || launch_rmsnorm(&xv, &wv, &mut ov.clone(), s.eps, executor.stream()))?;
            (us, out)
        }
    };
    let refcheck = s.refcheck.then(|| check(&x, &w, &out, s));
    let bytes = ((2 * s.tokens * s.hidden + s.hidden) * T::DTYPE.size()) as f64;
    Ok(Row::new("rmsnorm", T::DTYPE, s.tokens, s.hidden, executor.impl_name(), us, bytes, refcheck))
}

fn check<T: HostElement>(x: &[T], w: &[T], out: &[T], s: &Setup) -> Result<Agreement, String> {
    let want = reference::rmsnorm(&reference::to_f64(x), &reference::to_f64(w), s.hidden, s.eps as f64);
    reference::compare(T::DTYPE, &reference::to_f64(out), &want)
}
