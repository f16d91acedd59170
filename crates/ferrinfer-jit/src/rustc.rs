//! One rustc run of a device build, as both the builder ([`crate::builder`]: the kernels and
//! entry-point crates) and the sysroot ([`crate::sysroot`]: `core`) make them: the target, the
//! code generation flags every crate gets, the run itself (rustc's diagnostics turned into a
//! [`BuildError`]) and the note on stderr while a long build runs.

use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::CudaArch;
use crate::error::BuildError;
use crate::toolchain::DEVICE_TOOLCHAIN;

/// The device target.
pub const TARGET: &str = "nvptx64-nvidia-cuda";

/// Code generation flags of every crate of a device build: cargo's release profile with
/// `panic = "abort"` and `codegen-units = 1`, what the generated crates asked cargo for. Part of
/// every key; the target CPU, debug info and a spec's own flags are added per spec.
pub const CODEGEN_FLAGS: &[&str] = &[
    "--target=nvptx64-nvidia-cuda",
    "-Copt-level=3",
    "-Cpanic=abort",
    "-Ccodegen-units=1",
    "-Cdebug-assertions=off",
    "-Coverflow-checks=off",
    "-Cembed-bitcode=no",
];

/// Runs one rustc; returns its diagnostics. LLVM's "not a recognized processor" is only a
/// warning to rustc, and the PTX it then writes targets a processor that does not exist: here it
/// is an error.
pub(crate) fn run(mut cmd: Command, stage: &str, arch: CudaArch) -> Result<String, BuildError> {
    let output = cmd.output().map_err(|e| BuildError::Toolchain {
        toolchain: DEVICE_TOOLCHAIN.to_owned(),
        message: format!("cannot run rustc: {e}"),
    })?;
    let log = String::from_utf8_lossy(&output.stderr).into_owned();
    if let Some(cpu) = unrecognized_processor(&log) {
        return Err(BuildError::UnknownTargetCpu { cpu, log });
    }
    if !output.status.success() {
        return Err(diagnose(stage, arch, log));
    }
    Ok(log)
}

/// The processor LLVM warned about, if it did.
fn unrecognized_processor(log: &str) -> Option<String> {
    let line = log.lines().find(|l| l.contains("is not a recognized processor"))?;
    Some(line.split('\'').nth(1).unwrap_or(line).to_owned())
}

fn diagnose(stage: &str, arch: CudaArch, log: String) -> BuildError {
    let toolchain = DEVICE_TOOLCHAIN.to_owned();
    if log.contains("could not find specification for target") || log.contains("unknown target") {
        BuildError::NoNvptxSupport { toolchain, log }
    } else {
        BuildError::CompileFailed { stage: stage.to_owned(), arch: arch.to_string(), log }
    }
}

/// Says on stderr what is being built once it has taken over a second, and how long it took.
pub(crate) struct Progress {
    done: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Progress {
    const AFTER: Duration = Duration::from_secs(1);

    pub(crate) fn start(message: String) -> Self {
        let (done, finished) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            if finished.recv_timeout(Self::AFTER).is_err() {
                eprintln!("ferrinfer-jit: {message} ...");
                let _ = finished.recv();
                eprintln!("ferrinfer-jit: done in {:.1} s", started.elapsed().as_secs_f64());
            }
        });
        Progress { done, thread }
    }

    pub(crate) fn finish(self) {
        let _ = self.done.send(());
        let _ = self.thread.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llvm_unknown_processor_warnings_are_errors() {
        let log = "'sm_79' is not a recognized processor for this target (ignoring processor)\n";
        let mut cmd = Command::new("sh");
        cmd.args(["-c", &format!("printf \"{log}\" >&2")]);
        let err = run(cmd, "test", CudaArch::HOPPER).unwrap_err();
        assert!(matches!(&err, BuildError::UnknownTargetCpu { cpu, .. } if cpu == "sm_79"), "{err}");
    }

    #[test]
    fn a_target_rustc_does_not_know_is_a_toolchain_without_nvptx() {
        let no_target = diagnose("core", CudaArch::HOPPER, "error: could not find specification for target".into());
        assert!(matches!(no_target, BuildError::NoNvptxSupport { .. }));
        assert!(matches!(
            diagnose("m", CudaArch::HOPPER, "error[E0308]: mismatched types".into()),
            BuildError::CompileFailed { .. }
        ));
    }
}
