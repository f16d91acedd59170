//! API logging, FlashInfer's `@flashinfer_api`: every public op reports itself according to
//! `FERRINFER_LOGLEVEL`, read once per process:
//! - 0 (default): nothing; a call costs one load of a cached level;
//! - 1: the op's name, written and flushed *before* the call, so a crash still leaves it;
//! - 3: plus every argument (shape, strides, dtype, device, scalars) before, and the outputs after;
//! - 5: plus statistics of each input (min, max, mean, NaN and Inf counts) — for CUDA tensors
//!   copied to the host first, and deferred (reported as such) while the stream captures a graph.
//!
//! `FERRINFER_LOGDEST` = `stderr` (default), `stdout` or a file path (`%i` = process id).
//! Experimental APIs call [`experimental`], which warns once per process at any level.

use std::fmt::Write as _;
use std::io::Write;
use std::sync::{Mutex, OnceLock};

use cudarc::driver::sys::CUstreamCaptureStatus;

use crate::op::Call;
use crate::{Device, HostElement, Stream, TensorView};

pub const LEVEL_VAR: &str = "FERRINFER_LOGLEVEL";
pub const DEST_VAR: &str = "FERRINFER_LOGDEST";

struct Logger {
    level: u8,
    sink: Mutex<Box<dyn Write + Send>>,
}

fn logger() -> &'static Logger {
    static LOGGER: OnceLock<Logger> = OnceLock::new();
    LOGGER.get_or_init(|| {
        let level = std::env::var(LEVEL_VAR).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(0);
        Logger { level, sink: Mutex::new(sink(std::env::var(DEST_VAR).ok().as_deref())) }
    })
}

fn sink(dest: Option<&str>) -> Box<dyn Write + Send> {
    match dest {
        None | Some("") | Some("stderr") => Box::new(std::io::stderr()),
        Some("stdout") => Box::new(std::io::stdout()),
        Some(path) => {
            let path = path.replace("%i", &std::process::id().to_string());
            match std::fs::OpenOptions::new().create(true).append(true).open(&path) {
                Ok(file) => Box::new(file),
                Err(e) => {
                    eprintln!("ferrinfer: cannot open {DEST_VAR}={path} ({e}); logging to stderr");
                    Box::new(std::io::stderr())
                }
            }
        }
    }
}

/// Marks a call of an experimental API: the first call of each `api` in a process warns (on the
/// log destination, whatever the level), later calls are silent.
pub fn experimental(api: &'static str, why: &str) {
    static WARNED: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let mut warned = WARNED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if !warned.contains(&api) {
        warned.push(api);
        write_line(&format!("warning: {api} is experimental: {why}"));
    }
}

/// The level in force (0 when logging is off).
pub fn level() -> u8 {
    logger().level
}

fn write_line(line: &str) {
    let mut sink = logger().sink.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let _ = writeln!(sink, "[ferrinfer] {line}");
    let _ = sink.flush();
}

/// Logs the start of a call (level ≥ 1) with its named tensors and scalars (≥ 3), before anything
/// is validated or run.
pub(crate) fn begin(call: &Call) {
    let level = level();
    if level == 0 {
        return;
    }
    write_line(call.op.name);
    if level >= 3 {
        for (name, view) in call.named() {
            write_line(&format!("  {name}: {}", describe(view)));
        }
        // A choice by its name (`kv_layout = "NHD"`).
        for (i, (arg, value)) in call.op.scalars.iter().zip(call.scalars).enumerate() {
            match call.per_row.get(i).copied().flatten() {
                Some(view) => write_line(&format!("  {}: {} (one a row)", arg.name, describe(view))),
                None => write_line(&format!("  {} = {}", arg.name, arg.show(*value))),
            }
        }
    }
}

/// Input statistics (level 5), once the family validated the tensors (so reading them is safe).
pub(crate) fn input_statistics(call: &Call) {
    if level() >= 5 {
        for (name, view) in call.read() {
            write_line(&format!("  {name} stats: {}", statistics(view, &call.stream)));
        }
    }
}

/// Logs the outputs after a successful call (level ≥ 3).
pub(crate) fn end(call: &Call) {
    if level() < 3 {
        return;
    }
    let mut line = format!("{} done", call.op.name);
    for (name, view) in call.written() {
        let _ = write!(line, "; {name}: {}", describe(view));
    }
    write_line(&line);
}

fn describe(view: &TensorView) -> String {
    format!("shape {:?} strides {:?} {} on {}", view.shape(), view.strides(), view.dtype(), view.device())
}

/// min, max, mean, NaN and Inf counts of a tensor's elements.
fn statistics(view: &TensorView, stream: &Stream) -> String {
    match (view.device(), stream) {
        (Device::Cpu, _) => host_statistics(view, |address, len| {
            // SAFETY: the caller validated the view: `len` elements from `address` are readable.
            unsafe { std::slice::from_raw_parts(address as *const u8, len) }.to_vec()
        }),
        (Device::Cuda(_), Stream::Cuda(cuda)) => {
            if !matches!(cuda.capture_status(), Ok(CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)) {
                return "deferred: the stream is capturing a graph".into();
            }
            host_statistics(view, |address, len| {
                let mut bytes = vec![0u8; len];
                let copied = cuda
                    .synchronize()
                    .and_then(|_| unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut bytes, address) });
                if copied.is_err() { Vec::new() } else { bytes }
            })
        }
        _ => "unavailable".into(),
    }
}

/// Reads the span the view covers (`read(address, bytes)`), then summarises its elements.
fn host_statistics(view: &TensorView, read: impl Fn(u64, usize) -> Vec<u8>) -> String {
    let span: i64 = view.shape().iter().zip(view.strides()).map(|(&d, &s)| (d.max(1) - 1) * s).sum::<i64>() + 1;
    let bytes = read(view.address(), span as usize * view.dtype().size());
    if bytes.is_empty() {
        return "unavailable (copy failed)".into();
    }
    let values: Vec<f64> = crate::with_host_element!(view.dtype(), T => elements::<T>(view, &bytes));
    let (nan, inf) = (values.iter().filter(|v| v.is_nan()).count(), values.iter().filter(|v| v.is_infinite()).count());
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    let (min, max) = finite.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let mean = finite.iter().sum::<f64>() / finite.len().max(1) as f64;
    format!("min {min:.6} max {max:.6} mean {mean:.6} nan {nan} inf {inf}")
}

/// The view's elements (by shape and strides) out of the bytes of its span.
fn elements<T: HostElement>(view: &TensorView, bytes: &[u8]) -> Vec<f64> {
    let all: Vec<T> = bytes.chunks_exact(std::mem::size_of::<T>()).map(bytemuck::pod_read_unaligned).collect();
    let (shape, strides) = (view.shape(), view.strides());
    let count: i64 = shape.iter().product();
    (0..count)
        .map(|mut linear| {
            let mut offset = 0i64;
            for (&dim, &stride) in shape.iter().zip(strides).rev() {
                offset += (linear % dim) * stride;
                linear /= dim;
            }
            all[offset as usize].to_f64()
        })
        .collect()
}
