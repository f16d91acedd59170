//! The commands of `cargo xtask`, as a library so their tests can run them on copies of the
//! workspace. See `main.rs` for what xtask is.

pub mod ci;
pub mod lint_layers;
pub mod precommit;
pub mod python;

use std::process::Command;

/// Runs `command` (echoed first, as `$ program args`), failing with that line if it fails.
pub fn run_echoed(command: &mut Command) -> anyhow::Result<()> {
    let args: Vec<String> = command.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
    let line = format!("{} {}", command.get_program().to_string_lossy(), args.join(" "));
    eprintln!("$ {line}");
    let status = command.status().map_err(|e| anyhow::anyhow!("starting `{line}`: {e}"))?;
    anyhow::ensure!(status.success(), "`{line}` failed: {status}");
    Ok(())
}
