//! The Python tests of `cargo xtask ci` (all, or `ci py`): build the `ferrinfer` wheel with
//! maturin and run `crates/ferrinfer-py/tests` with pytest on NumPy (CPU backend), all inside a
//! virtual environment under `target/`, so the caller's Python is never changed. maturin, NumPy
//! and pytest are installed into it with pip when missing: a fresh machine needs python3 with
//! its `venv` module (`$PYTHON` names another interpreter).

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};

const PACKAGES: &[&str] = &["maturin>=1.9,<2", "numpy", "pytest"];

pub fn run(root: &Path) -> Result<()> {
    let python = virtual_env(root)?;
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

/// The interpreter of `target/py-venv`, created from `$PYTHON` (default `python3`) on first use.
fn virtual_env(root: &Path) -> Result<String> {
    let venv = root.join("target/py-venv");
    let python = venv.join("bin/python");
    if !python.exists() {
        let base = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        step(root, &base, &["-m", "venv", &venv.to_string_lossy()])
            .with_context(|| format!("creating {} (Debian: apt install python3-venv)", venv.display()))?;
    }
    Ok(python.to_string_lossy().into_owned())
}

fn step(root: &Path, python: &str, args: &[&str]) -> Result<()> {
    crate::run_echoed(Command::new(python).args(args).current_dir(root))
}
