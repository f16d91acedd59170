//! `ferrinfer-bench`: the benchmark CLI (the role of FlashInfer's `flashinfer_benchmark.py`).
//! It times ferrinfer's ops exactly as `../shared/peers/peers.py` times torch and FlashInfer — a
//! CUDA graph of 50 calls, 3 untimed and `--num-iters` timed replays, the median over 50 — and
//! prints the peers' CSV columns (`op,dtype,T,H,impl,us,tbps`), so both outputs concatenate into
//! one table. Without a GPU, `--backend auto` runs the CPU backend and says so. Any op of the
//! registry is a routine (`ferrinfer_launch::ops()`); `--mode eager` times the host path instead.
//!
//! The top of the layer stack: it may depend on every ferrinfer crate, and nothing depends on it.

mod grid;
mod report;
mod routine;
mod timing;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use ferrinfer_launch::{DType, Scalar, cuda_device_count};

/// Benchmark ferrinfer's ops: time, bandwidth and (with --refcheck) correctness.
#[derive(Parser, Debug)]
#[command(name = "ferrinfer-bench", version)]
pub struct Args {
    /// The op to run.
    #[arg(long, value_parser = routine_parser())]
    routine: String,
    /// Rows (tokens), T.
    #[arg(long, required_unless_present = "grid")]
    batch_size: Option<usize>,
    /// Row length, H.
    #[arg(long, required_unless_present = "grid")]
    hidden_size: Option<usize>,
    #[arg(long, value_enum, default_value = "bf16")]
    dtype: DTypeArg,
    /// A scalar argument by name, e.g. `--scalar eps=1e-5` (default: FlashInfer's).
    #[arg(long, value_parser = scalar_parser, value_name = "NAME=VALUE")]
    scalar: Vec<(String, String)>,
    /// auto: CUDA when a driver and device are present, else the CPU backend.
    #[arg(long, value_enum, default_value = "auto")]
    backend: BackendArg,
    /// Check every result against an f64 reference; a mismatch fails the run.
    #[arg(long)]
    refcheck: bool,
    /// Timed repetitions (graph replays on CUDA, calls on the CPU); the median is reported.
    #[arg(long, default_value_t = 15)]
    num_iters: usize,
    /// CUDA timing: the GPU time of a call in graph replay (the peers' method); eager: the wall
    /// time per call of 2000 back-to-back calls (the host path's cost, or the GPU's where it is
    /// slower); issue: the host's time to enqueue a call alone (256 calls from an idle stream,
    /// timed before the sync, too few to fill the launch queue).
    #[arg(long, value_enum, default_value = "graph")]
    mode: ModeArg,
    /// Programmatic dependent launch: auto (on where the GPU has it), on, off.
    #[arg(long, value_enum, default_value = "auto")]
    pdl: PdlArg,
    /// Run the peers' standard grid of the routine's family (norm: H ∈ {4096, 8192} × T ∈ {1, 16,
    /// …, 65536}; activation: d ∈ {4096, 11008, 14336} × T ∈ {1, 16, …, 16384}).
    #[arg(long)]
    grid: bool,
    /// Append the CSV rows to this file (the header only when it is new).
    #[arg(long)]
    output_path: Option<PathBuf>,
    /// Seconds of device warm-up before timing (the peers use 3).
    #[arg(long, default_value_t = 3.0)]
    warmup_seconds: f64,
}

/// FlashInfer's names of every op.
fn routine_parser() -> clap::builder::PossibleValuesParser {
    ferrinfer_launch::ops().map(|op| op.name).collect::<Vec<_>>().into()
}

/// `NAME=VALUE`; the value is read as the scalar's type once the routine is known ([`scalars`]).
fn scalar_parser(text: &str) -> Result<(String, String), String> {
    let (name, value) = text.split_once('=').ok_or("expected NAME=VALUE")?;
    Ok((name.to_owned(), value.to_owned()))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ModeArg {
    Graph,
    Eager,
    Issue,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum PdlArg {
    Auto,
    On,
    Off,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum DTypeArg {
    #[value(alias = "bfloat16")]
    Bf16,
    #[value(alias = "float16")]
    F16,
    #[value(alias = "float32")]
    F32,
}

impl From<DTypeArg> for DType {
    fn from(arg: DTypeArg) -> DType {
        match arg {
            DTypeArg::Bf16 => DType::Bf16,
            DTypeArg::F16 => DType::F16,
            DTypeArg::F32 => DType::F32,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum BackendArg {
    Auto,
    Cpu,
    Cuda,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    let op = ferrinfer_launch::op(&args.routine).ok_or("clap checked the routine's name")?;
    let executor = timing::Executor::new(resolve_backend(args.backend)?).map_err(|e| e.to_string())?;
    let cases: Vec<(usize, usize)> = match (args.grid, args.batch_size, args.hidden_size) {
        (true, _, _) => grid::peers(op.family).ok_or(format!("no standard grid for the {} family", op.family))?,
        (false, Some(t), Some(h)) => vec![(t, h)],
        _ => return Err("give --batch-size and --hidden-size, or --grid".into()),
    };
    // An unknown `--scalar` name fails before the warm-up (the values depend on the case).
    scalars(op, &args.scalar, (0, 0))?;
    executor.warm_up(args.warmup_seconds).map_err(|e| e.to_string())?;
    let mode = match args.mode {
        ModeArg::Graph => timing::Mode::Graph,
        ModeArg::Eager => timing::Mode::Eager,
        ModeArg::Issue => timing::Mode::Issue,
    };
    let pdl = match args.pdl {
        PdlArg::Auto => None,
        PdlArg::On => Some(true),
        PdlArg::Off => Some(false),
    };
    let mut report = report::Report::new(args.output_path.clone());
    println!("{}", report::CSV_HEADER);
    for (tokens, hidden) in cases {
        let setup = routine::Setup {
            op,
            dtype: args.dtype.into(),
            tokens,
            hidden,
            scalars: scalars(op, &args.scalar, (tokens, hidden))?,
            refcheck: args.refcheck,
            iters: args.num_iters,
            mode,
        };
        let row = ferrinfer_launch::with_pdl(pdl, || routine::run(&executor, &setup))
            .map_err(|e| format!("{} T={tokens} H={hidden}: {e}", args.routine))?;
        report.push(row).map_err(|e| e.to_string())?;
    }
    report.print_table();
    report.failures()
}

/// The op's scalars for `tokens` rows of `hidden`: FlashInfer's defaults (or the table's
/// examples), overridden by `--scalar NAME=VALUE` (a value of the scalar's type: a number,
/// `true`/`false`, a choice's name, or `None` for an optional one).
fn scalars(
    op: &ferrinfer_launch::OpInfo,
    given: &[(String, String)],
    (tokens, hidden): (usize, usize),
) -> Result<Vec<Scalar>, String> {
    let mut values = op.examples(tokens, hidden);
    for (name, text) in given {
        let known = || op.scalars.iter().map(|s| s.name).collect::<Vec<_>>();
        let i = op.scalars.iter().position(|s| s.name == name);
        let i = i.ok_or_else(|| format!("--scalar {name}: `{}` takes {:?}", op.name, known()))?;
        let arg = &op.scalars[i];
        let value = match text.as_str() {
            "None" if arg.optional => Some(Scalar::Absent),
            text => arg.kind.parse(text),
        };
        values[i] = value.ok_or_else(|| format!("--scalar {name}={text}: expected {}", arg.kind.expected()))?;
    }
    Ok(values)
}

fn resolve_backend(backend: BackendArg) -> Result<timing::Backend, String> {
    let devices = cuda_device_count();
    match backend {
        BackendArg::Cpu => Ok(timing::Backend::Cpu),
        BackendArg::Cuda if devices == 0 => Err("--backend cuda: no CUDA driver or device found".into()),
        BackendArg::Cuda => Ok(timing::Backend::Cuda),
        BackendArg::Auto if devices == 0 => {
            eprintln!("# backend auto: no CUDA driver or device found, running the CPU backend");
            Ok(timing::Backend::Cpu)
        }
        BackendArg::Auto => Ok(timing::Backend::Cuda),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Args;

    #[test]
    fn cli_help_is_stable() {
        insta::assert_snapshot!(Args::command().render_long_help().to_string());
    }

    #[test]
    fn cli_arguments_are_consistent() {
        Args::command().debug_assert();
    }
}
