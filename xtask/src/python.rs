//! The Python tests of `cargo xtask ci` (all, or `ci py`): build the `ferrinfer` wheel with
//! maturin, install it, run `crates/ferrinfer-py/tests` with pytest on NumPy (CPU backend).
//! maturin, NumPy and pytest are installed with pip when missing, so a fresh machine needs
//! nothing but python3 with pip.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};

const PACKAGES: &[&str] = &["maturin>=1.9,<2", "numpy", "pytest"];

pub fn run(root: &Path) -> Result<()> {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let has_tools =
        Command::new(&python).args(["-c", "import maturin, numpy, pytest"]).output().is_ok_and(|o| o.status.success());
    if !has_tools {
        step(
            root,
            &python,
            &[&["-m", "pip", "install", "--quiet", "--disable-pip-version-check"][..], PACKAGES].concat(),
        )?;
    }
    let wheels = root.join("target/wheels-ci");
    let _ = std::fs::remove_dir_all(&wheels);
    let wheels_arg = wheels.to_string_lossy().into_owned();
    step(
        root,
        &python,
        &["-m", "maturin", "build", "--release", "-m", "crates/ferrinfer-py/Cargo.toml", "-o", &wheels_arg],
    )?;
    let wheel = std::fs::read_dir(&wheels)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .context("maturin wrote no wheel")?;
    let wheel = wheel.to_string_lossy().into_owned();
    step(
        root,
        &python,
        &["-m", "pip", "install", "--quiet", "--force-reinstall", "--no-deps", "--disable-pip-version-check", &wheel],
    )?;
    step(root, &python, &["-m", "pytest", "-q", "-rs", "crates/ferrinfer-py/tests"])
}

fn step(root: &Path, python: &str, args: &[&str]) -> Result<()> {
    crate::run_echoed(Command::new(python).args(args).current_dir(root))
}
