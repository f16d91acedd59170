//! The commands of `cargo xtask`, as a library so their tests can run them on copies of the
//! workspace. See `main.rs` for what xtask is.

pub mod ci;
pub mod lint_layers;
pub mod perf_table;
pub mod precommit;
pub mod python;

use std::path::Path;
use std::process::Command;

/// The cargo that runs xtask (`$CARGO`, else `cargo` on PATH), working in `root`.
pub fn cargo(root: &Path) -> Command {
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    command.current_dir(root);
    command
}

/// `ferrinfer-jit aot` into `out` for `arch` and `family` (each: the tool's default if `None`),
/// built and run by cargo: xtask itself depends on no workspace crate.
pub fn aot(root: &Path, arch: Option<&str>, family: Option<&str>, out: &Path) -> Command {
    let mut command = cargo(root);
    command.args(["run", "--release", "--quiet", "-p", "ferrinfer-jit", "--", "aot", "--out"]).arg(out);
    command.args(arch.iter().flat_map(|a| ["--arch", a]));
    command.args(family.iter().flat_map(|f| ["--family", f]));
    command
}

/// Runs `command` (echoed first, as `$ program args`), failing with that line if it fails.
pub fn run_echoed(command: &mut Command) -> anyhow::Result<()> {
    let args: Vec<String> = command.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
    let line = format!("{} {}", command.get_program().to_string_lossy(), args.join(" "));
    eprintln!("$ {line}");
    let status = command.status().map_err(|e| anyhow::anyhow!("starting `{line}`: {e}"))?;
    anyhow::ensure!(status.success(), "`{line}` failed: {status}");
    Ok(())
}
