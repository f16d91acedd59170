//! The Python tests of `cargo xtask ci` (all, or `ci py`): build the `ferrinfer` wheel with
//! maturin and run `crates/ferrinfer-py/tests` with pytest on NumPy (CPU backend), all inside a
//! virtual environment under `target/`, so the caller's Python is never changed. maturin, NumPy
//! and pytest are installed into it with pip when missing: a fresh machine needs python3 with
//! its `venv` module (`$PYTHON` names another interpreter).

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};

const PACKAGES: &[&str] = &["maturin>=1.9,<2", "numpy", "pytest"];

pub fn run(root: &Path) -> Result<crate::ci::Counts> {
    let python = virtual_env(root)?;
    install_missing(root, &python, "maturin, numpy, pytest", PACKAGES)?;
    let wheels = root.join("target/wheels-ci");
    let _ = std::fs::remove_dir_all(&wheels);
    let wheels_arg = wheels.to_string_lossy().into_owned();
    // The dev profile, which `cargo test` shares: the crates under the extension are built once
    // for both (the GPU wheel, `gpu_wheel`, is a release build).
    step(
        root,
        &python,
        &["-m", "maturin", "build", "--profile", "dev", "-m", "crates/ferrinfer-py/Cargo.toml", "-o", &wheels_arg],
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
    let mut pytest = Command::new(&python);
    pytest.current_dir(root).args(["-m", "pytest", "-q", "-rs", "crates/ferrinfer-py/tests"]);
    crate::ci::run_counted(&mut pytest)
}

/// The GPU wheel: every kernel module of every family built ahead of time for `archs` (PTX and,
/// assembled by ptxas, cubins: `ptxas` names it, else FERRINFER_PTXAS) and embedded in the
/// module, so `pip install` on a machine with a driver and no Rust runs every op. Built in the
/// virtual environment under `target/`; prints the wheel's path and size.
pub fn gpu_wheel(root: &Path, archs: &str, aot_dir: &Path, out: &Path) -> Result<()> {
    let python = virtual_env(root)?;
    install_missing(root, &python, "maturin", &PACKAGES[..1])?;
    // Cubins are the point of the wheel (a first call without the driver's PTX compilation).
    crate::run_echoed(crate::aot(root, Some(archs), None, aot_dir).env("FERRINFER_REQUIRE_PTXAS", "1"))?;
    let _ = std::fs::remove_dir_all(out);
    let mut build = Command::new(&python);
    build.args(["-m", "maturin", "build", "--release", "-m", "crates/ferrinfer-py/Cargo.toml", "-o"]).arg(out);
    crate::run_echoed(build.env("FERRINFER_EMBED_AOT_DIR", aot_dir).current_dir(root))?;
    for wheel in std::fs::read_dir(out)?.filter_map(|e| e.ok()) {
        let bytes = wheel.metadata()?.len();
        println!("{} ({:.1} MB; kernels for {archs})", wheel.path().display(), bytes as f64 / 1e6);
    }
    Ok(())
}

/// `pip install packages` into `python`'s environment unless `import {imports}` already works.
fn install_missing(root: &Path, python: &str, imports: &str, packages: &[&str]) -> Result<()> {
    let import = format!("import {imports}");
    if Command::new(python).args(["-c", &import]).output().is_ok_and(|o| o.status.success()) {
        return Ok(());
    }
    step(root, python, &[&["-m", "pip", "install", "--quiet", "--disable-pip-version-check"][..], packages].concat())
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
