//! candle's own rms_norm against ferrinfer's through the candle adapter, on the GPU:
//! `cargo bench -p ferrinfer-ffi --features candle-cuda --bench candle`.
//!
//! - `candle`: `candle_nn::ops::rms_norm`, which on CUDA runs candle's fused kernel
//!   (`rmsnorm_bf16`/`rmsnorm_f16` of candle-kernels' reduce module, one block per row; it needs
//!   contiguous input, as here).
//! - `ferrinfer-candle`: `ferrinfer_ffi::candle::rmsnorm`.
//!
//! Sizes: bf16 and f16, T ∈ {1, 16, 128, 1024, 8192, 16384, 65536} × H ∈ {4096, 8192}, eps 1e-6.
//!
//! Method: both run on candle's stream of device 0 and are called as a candle model calls them:
//! each call allocates its output (both ops return a new tensor, through candle's stream-ordered
//! allocator) and is launched eagerly. The GPU's clocks are first brought up with a second of
//! work. Then, per size and implementation: `WARMUP` untimed calls, then `REPS` repetitions of `n`
//! back-to-back calls between two CUDA events recorded on candle's stream (`n` from 10 to 200, so
//! that a repetition moves about 2 GB); the time is the median repetition's elapsed time / `n`.
//! There is no CUDA graph, so at small T the time includes each call's host work (validation,
//! allocation, launch), when that is longer than the kernel: the per-call cost a candle model
//! pays. (ferrinfer-bench times graph replays, i.e. kernel time only; its numbers are not these.)
//! bytes = input read + weight read + output written, tbps = bytes / time.
//!
//! Output: CSV `op,dtype,T,H,impl,us,tbps` on stdout, the columns of ferrinfer-bench's report.rs.
//! Each size also checks that the two results agree to two units of the dtype's rounding; a
//! mismatch is reported on stderr and fails the run (exit 1). Without a CUDA device this prints
//! SKIPPED and exits 0.

use std::sync::Arc;
use std::time::{Duration, Instant};

use candle_core::{DType, Device, Result, Tensor};
use ferrinfer_launch::cuda_device_count;
use ferrinfer_launch::cudarc::driver::CudaStream;
use ferrinfer_launch::cudarc::driver::sys::CUevent_flags;

const TOKENS: [usize; 7] = [1, 16, 128, 1024, 8192, 16384, 65536];
const HIDDEN: [usize; 2] = [4096, 8192];
const EPS: f32 = 1e-6;
const WARMUP: usize = 5;
const REPS: usize = 15;
/// Bytes a timed repetition should move (it sets the calls per repetition).
const BYTES_PER_REP: f64 = 2e9;
const CSV_HEADER: &str = "op,dtype,T,H,impl,us,tbps";

type RmsNormFn = fn(&Tensor, &Tensor, f32) -> Result<Tensor>;

const IMPLS: [(&str, RmsNormFn); 2] =
    [("candle", candle_nn::ops::rms_norm), ("ferrinfer-candle", ferrinfer_ffi::candle::rmsnorm)];

fn main() -> Result<()> {
    if cuda_device_count() == 0 {
        println!("candle bench: SKIPPED — no CUDA driver or device on this machine");
        return Ok(());
    }
    let device = Device::new_cuda(0)?;
    let stream = device.as_cuda_device()?.cuda_stream();
    warm_up(&device, Duration::from_secs(1))?;
    println!("{CSV_HEADER}");
    let mut mismatches = Vec::new();
    for dtype in [DType::BF16, DType::F16] {
        for hidden in HIDDEN {
            for tokens in TOKENS {
                let x = Tensor::randn(0f32, 1.0, (tokens, hidden), &device)?.to_dtype(dtype)?;
                let w = Tensor::randn(0f32, 1.0, hidden, &device)?.to_dtype(dtype)?;
                let bytes = ((2 * tokens + 1) * hidden * dtype.size_in_bytes()) as f64;
                let calls = (BYTES_PER_REP / bytes).clamp(10.0, 200.0) as usize;
                for (name, rmsnorm) in IMPLS {
                    let us = time_us(&stream, calls, || rmsnorm(&x, &w, EPS).map(drop))?;
                    let (dt, tbps) = (torch_name(dtype), bytes / us / 1e6);
                    println!("rmsnorm,{dt},{tokens},{hidden},{name},{us:.3},{tbps:.3}");
                }
                if let Err(e) = agree(dtype, &IMPLS[0].1(&x, &w, EPS)?, &IMPLS[1].1(&x, &w, EPS)?) {
                    eprintln!("{} T={tokens} H={hidden}: candle and ferrinfer disagree: {e}", dtype.as_str());
                    mismatches.push((dtype, tokens, hidden));
                }
            }
        }
    }
    if !mismatches.is_empty() {
        eprintln!("{} size(s) disagree", mismatches.len());
        std::process::exit(1);
    }
    Ok(())
}

/// The peers' spelling of a dtype (torch's names), as ferrinfer-bench prints it.
fn torch_name(dtype: DType) -> &'static str {
    match dtype {
        DType::BF16 => "bfloat16",
        DType::F16 => "float16",
        _ => "float32",
    }
}

/// Brings the GPU's clocks up: large copies on candle's stream for `duration`.
fn warm_up(device: &Device, duration: Duration) -> Result<()> {
    let source = Tensor::zeros(1 << 28, DType::BF16, device)?;
    let start = Instant::now();
    while start.elapsed() < duration {
        source.copy()?;
        device.synchronize()?;
    }
    Ok(())
}

/// Median microseconds per call of `op`: `REPS` repetitions of `calls` calls between CUDA events
/// on `stream`, after `WARMUP` untimed calls.
fn time_us(stream: &Arc<CudaStream>, calls: usize, mut op: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..WARMUP {
        op()?;
    }
    stream.synchronize().map_err(candle_core::Error::wrap)?;
    let context = stream.context();
    let mut times = Vec::with_capacity(REPS);
    for _ in 0..REPS {
        let event = || context.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(candle_core::Error::wrap);
        let (start, end) = (event()?, event()?);
        start.record(stream).map_err(candle_core::Error::wrap)?;
        for _ in 0..calls {
            op()?;
        }
        end.record(stream).map_err(candle_core::Error::wrap)?;
        end.synchronize().map_err(candle_core::Error::wrap)?;
        let ms = start.elapsed_ms(&end).map_err(candle_core::Error::wrap)?;
        times.push(ms as f64 * 1e3 / calls as f64);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[REPS / 2])
}

/// Whether two results agree to two units of `dtype`'s rounding (relative to their size).
fn agree(dtype: DType, a: &Tensor, b: &Tensor) -> std::result::Result<(), String> {
    let unit = if dtype == DType::BF16 { 2f32.powi(-7) } else { 2f32.powi(-10) };
    let (a, b) =
        (a.to_dtype(DType::F32).map_err(|e| e.to_string())?, b.to_dtype(DType::F32).map_err(|e| e.to_string())?);
    let a: Vec<f32> = a.flatten_all().and_then(|t| t.to_vec1()).map_err(|e| e.to_string())?;
    let b: Vec<f32> = b.flatten_all().and_then(|t| t.to_vec1()).map_err(|e| e.to_string())?;
    match a.iter().zip(&b).position(|(x, y)| (x - y).abs() > 2.0 * unit * x.abs().max(y.abs()) + 1e-3) {
        Some(i) => Err(format!("element {i}: {} vs {}", a[i], b[i])),
        None => Ok(()),
    }
}
