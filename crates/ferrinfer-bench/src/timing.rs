//! Where and how ops are timed. CUDA: the peers' method exactly (a graph of 50 calls, 3 untimed
//! replays, then `iters` timed with events; median / 50). CPU: the median of `iters` calls.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrinfer_launch::Error;
use ferrinfer_launch::cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
use ferrinfer_launch::cudarc::driver::{CudaContext, CudaStream, DriverError};

/// Calls per captured graph, as in the peers.
const CALLS_PER_GRAPH: usize = 50;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Cpu,
    Cuda,
}

/// A backend ready to run: for CUDA, device 0's primary context and a fresh stream.
pub enum Executor {
    Cpu,
    Cuda(Arc<CudaStream>),
}

impl Executor {
    pub fn new(backend: Backend) -> Result<Self, DriverError> {
        Ok(match backend {
            Backend::Cpu => Executor::Cpu,
            Backend::Cuda => Executor::Cuda(CudaContext::new(0)?.new_stream()?),
        })
    }

    /// The name in the CSV's `impl` column.
    pub fn impl_name(&self, mode: Mode) -> &'static str {
        match (self, mode) {
            (Executor::Cpu, _) => "ferrinfer_cpu",
            (Executor::Cuda(_), Mode::Graph) => "ferrinfer",
            (Executor::Cuda(_), Mode::Eager) => "ferrinfer_eager",
            (Executor::Cuda(_), Mode::Issue) => "ferrinfer_issue",
        }
    }

    /// Brings the GPU's clocks up, as the peers do: device-to-device copies of 2^28 bf16 values
    /// for `seconds`.
    pub fn warm_up(&self, seconds: f64) -> Result<(), DriverError> {
        let Executor::Cuda(stream) = self else { return Ok(()) };
        let source = stream.alloc_zeros::<u16>(1 << 28)?;
        let mut destination = stream.alloc_zeros::<u16>(1 << 28)?;
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs_f64(seconds) {
            stream.memcpy_dtod(&source, &mut destination)?;
            stream.synchronize()?;
        }
        Ok(())
    }

    /// Median microseconds of one call of `op`: on CUDA, of the GPU's time in a graph replay, of
    /// the wall time per call of back-to-back calls (eager), or of the host's enqueueing alone
    /// (issue).
    pub fn time_us(&self, iters: usize, mode: Mode, mut op: impl FnMut() -> Result<(), Error>) -> Result<f64, Error> {
        match self {
            Executor::Cuda(stream) if mode == Mode::Eager => eager_us(stream, iters, op),
            Executor::Cuda(stream) if mode == Mode::Issue => issue_us(stream, iters, op),
            Executor::Cpu => {
                op()?;
                let mut times: Vec<f64> = Vec::with_capacity(iters);
                for _ in 0..iters {
                    let start = Instant::now();
                    op()?;
                    times.push(start.elapsed().as_secs_f64() * 1e6);
                }
                Ok(median(times))
            }
            Executor::Cuda(stream) => graph_us(stream, iters, op),
        }
    }
}

/// How CUDA calls are timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The GPU time of a call, from graph replays (the peers' method).
    Graph,
    /// The wall time per call of `EAGER_CALLS` calls issued back to back, then one sync.
    Eager,
    /// The host's time per call to enqueue `ISSUE_CALLS` calls on an idle stream, the sync
    /// after them not counted: where `Eager` exceeds it, the GPU (not the host) set the pace.
    Issue,
}

/// Calls per eager timing.
const EAGER_CALLS: usize = 2000;

fn eager_us(stream: &Arc<CudaStream>, iters: usize, mut op: impl FnMut() -> Result<(), Error>) -> Result<f64, Error> {
    for _ in 0..100 {
        op()?;
    }
    stream.synchronize()?;
    let mut times = Vec::with_capacity(iters);
    for _ in 0..iters {
        let start = Instant::now();
        for _ in 0..EAGER_CALLS {
            op()?;
        }
        stream.synchronize()?;
        times.push(start.elapsed().as_secs_f64() * 1e6 / EAGER_CALLS as f64);
    }
    Ok(median(times))
}

/// Calls per issue timing: well under the launch queue's depth (about a thousand pending
/// launches), so no launch waits for the GPU to drain the queue.
const ISSUE_CALLS: usize = 256;

fn issue_us(stream: &Arc<CudaStream>, iters: usize, mut op: impl FnMut() -> Result<(), Error>) -> Result<f64, Error> {
    for _ in 0..ISSUE_CALLS {
        op()?;
    }
    let mut times = Vec::with_capacity(iters);
    for _ in 0..iters {
        stream.synchronize()?;
        let start = Instant::now();
        for _ in 0..ISSUE_CALLS {
            op()?;
        }
        times.push(start.elapsed().as_secs_f64() * 1e6 / ISSUE_CALLS as f64);
    }
    stream.synchronize()?;
    Ok(median(times))
}

fn graph_us(stream: &Arc<CudaStream>, iters: usize, mut op: impl FnMut() -> Result<(), Error>) -> Result<f64, Error> {
    for _ in 0..3 {
        op()?;
    }
    stream.synchronize()?;
    stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    let captured = (0..CALLS_PER_GRAPH).try_for_each(|_| op());
    let graph = stream.end_capture(CUgraphInstantiate_flags(0))?;
    captured?;
    let graph = graph.ok_or(Error::Cuda(DriverError(
        ferrinfer_launch::cudarc::driver::sys::CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
    )))?;
    for _ in 0..3 {
        graph.launch()?;
    }
    let context = stream.context();
    let mut times = Vec::with_capacity(iters);
    for _ in 0..iters {
        let (start, end) = (
            context.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?,
            context.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?,
        );
        start.record(stream)?;
        graph.launch()?;
        end.record(stream)?;
        end.synchronize()?;
        times.push(start.elapsed_ms(&end)? as f64 * 1e3 / CALLS_PER_GRAPH as f64);
    }
    Ok(median(times))
}

/// The median (the mean of the middle two for even counts, as Python's statistics.median).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_matches_python_statistics() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(vec![]).is_nan());
    }
}
