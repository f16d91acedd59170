//! xtask is the project's tooling, run as `cargo xtask <command>` (an alias in
//! `.cargo/config.toml`): checks and chores written in Rust instead of shell scripts, so they run
//! wherever cargo does. It sits outside the five layers: it depends on no workspace crate (it reads
//! them through `cargo metadata` and their files) and no crate depends on it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Result, bail};
use clap::Parser;
use xtask::{ci, lint_layers};

#[derive(Parser)]
#[command(bin_name = "cargo xtask", about = "ferrinfer's project tooling")]
enum Command {
    /// Check the layer invariants (docs/ARCHITECTURE.md, "Invariants"); non-zero exit on a violation.
    LintLayers {
        /// The workspace's root Cargo.toml (default: this workspace's).
        #[arg(long)]
        manifest_path: Option<PathBuf>,
    },
    /// Build every kernel module of a family (default: all) ahead of time — PTX, and with ptxas a
    /// cubin per module — into a directory that binaries can embed (FERRINFER_EMBED_AOT_DIR at
    /// build time) or read (FERRINFER_AOT_DIR).
    Aot {
        /// Target architectures, e.g. "9.0" (default: FERRINFER_CUDA_ARCH_LIST, else 8.0 8.9 9.0).
        #[arg(long)]
        arch: Option<String>,
        #[arg(long)]
        family: Option<String>,
        #[arg(long, default_value = "target/ferrinfer-aot")]
        out: PathBuf,
    },
    /// Build the GPU wheel of the Python module: every kernel module for the given architectures
    /// built ahead of time (with cubins: needs ptxas, as `.ci/run` installs it) and embedded, so
    /// it runs on a machine with a driver and no Rust. Prints the wheel's path and size.
    Wheel {
        /// Target architectures of the embedded modules.
        #[arg(long, default_value = "8.0,8.9,9.0")]
        arch: String,
        /// Where the AOT modules are built (kept: a second run reuses them).
        #[arg(long, default_value = "target/ferrinfer-aot-wheel")]
        aot_dir: PathBuf,
        #[arg(long, default_value = "target/wheels-gpu")]
        out: PathBuf,
    },
    /// Write README.md's speed table from the benchmark CSVs in docs/perf/data
    /// (`<family>-<gpu>.csv`).
    PerfTable {
        /// Write nothing; fail if README.md differs from what the CSVs make.
        #[arg(long)]
        check: bool,
    },
    /// Everything a PR must pass: rustfmt check, clippy -D warnings, cargo-deny, lint-layers,
    /// no pending insta snapshots.
    Precommit,
    /// Run one op family's tests across all crates, or every test with no FAMILY (then also
    /// `cargo package` of every published crate, and the Python tests).
    Ci {
        /// An op family (a module of both ferrinfer-kernels and ferrinfer-launch), or a crate
        /// by its short name (`jit`).
        #[arg(conflicts_with = "list")]
        family: Option<String>,
        /// Print the known op families (with --changed: the ones the change touches) and exit.
        #[arg(long)]
        list: bool,
        /// Test only the families that files changed since this git revision touch (all of them
        /// when shared code changed; none for docs only).
        #[arg(long, value_name = "BASE", conflicts_with = "family")]
        changed: Option<String>,
        /// Test the release build.
        #[arg(long)]
        release: bool,
    },
}

fn main() -> ExitCode {
    // Not `main() -> Result`: that prints a backtrace under RUST_BACKTRACE, noise for a user error.
    match run(Command::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> Result<()> {
    match command {
        Command::LintLayers { manifest_path } => lint(&manifest_path.map_or_else(workspace_root, root_of)),
        Command::Aot { arch, family, out } => {
            xtask::run_echoed(&mut xtask::aot(&workspace_root(), arch.as_deref(), family.as_deref(), &out))
        }
        Command::Wheel { arch, aot_dir, out } => {
            let root = workspace_root();
            xtask::python::gpu_wheel(&root, &arch, &root.join(aot_dir), &root.join(out))
        }
        Command::PerfTable { check } => xtask::perf_table::run(&workspace_root(), check),
        Command::Precommit => xtask::precommit::run(&workspace_root()),
        Command::Ci { list: true, changed, .. } => {
            let root = workspace_root();
            let families = match changed {
                Some(base) => changed_families(&root, &base)?,
                None => ci::families(&root)?,
            };
            for family in families {
                println!("{family}");
            }
            Ok(())
        }
        Command::Ci { changed: Some(base), release, .. } => {
            let root = workspace_root();
            let mut summary = ci::Summary::default();
            let mut result = Ok(());
            for family in changed_families(&root, &base)? {
                result = ci::run(&root, &ci::plan(&root, Some(&family), release, libtorch())?, &mut summary);
                if result.is_err() {
                    break;
                }
            }
            summary.print();
            result
        }
        Command::Ci { family, release, .. } => {
            let root = workspace_root();
            if matches!(family.as_deref(), None | Some("ffi")) && !libtorch() {
                eprintln!(
                    "SKIPPED: the torch adapter's tests (LIBTORCH is not set: `source scripts/torch/libtorch.sh` first)"
                );
            }
            let mut summary = ci::Summary::default();
            let result = ci_steps(&root, family.as_deref(), release, &mut summary);
            summary.print();
            result
        }
    }
}

/// Whether libtorch is provided for the torch adapter (see `ci::adapter_features`).
fn libtorch() -> bool {
    std::env::var_os("LIBTORCH").is_some()
}

/// Families touched by the files changed since `base` (committed or not).
fn changed_families(root: &Path, base: &str) -> Result<Vec<String>> {
    let output = std::process::Command::new("git").args(["diff", "--name-only", base]).current_dir(root).output()?;
    if !output.status.success() {
        bail!("git diff --name-only {base} failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    let files = String::from_utf8_lossy(&output.stdout).into_owned();
    ci::changed_families(root, &files.lines().collect::<Vec<_>>())
}

fn lint(root: &Path) -> Result<()> {
    let violations = lint_layers::lint(root)?;
    for violation in &violations {
        println!("{violation}");
    }
    if !violations.is_empty() {
        bail!("{} layer violation(s)", violations.len());
    }
    eprintln!("lint-layers: ok");
    Ok(())
}

/// The workspace this xtask was built in: xtask lives at its root.
fn workspace_root() -> PathBuf {
    let xtask = Path::new(env!("CARGO_MANIFEST_DIR"));
    xtask.parent().expect("xtask has a parent directory").to_path_buf()
}

fn root_of(manifest: PathBuf) -> PathBuf {
    match manifest.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Every step of `cargo xtask ci [FAMILY]`, each recorded in `summary`: the cargo tests, the
/// crates' packaging (all tests only) and the Python module's tests (all, or `py`).
fn ci_steps(root: &Path, family: Option<&str>, release: bool, summary: &mut ci::Summary) -> Result<()> {
    ci::run(root, &ci::plan(root, family, release, libtorch())?, summary)?;
    if family.is_none() {
        let started = Instant::now();
        let packaged = ci::package(root);
        summary.add(
            "cargo package (every published crate, verified)",
            packaged.as_ref().ok().map(|_| Default::default()),
            started,
        );
        packaged?;
    }
    // The Python module's tests need a wheel, not `cargo test`.
    if matches!(family, None | Some("py")) {
        let started = Instant::now();
        let tested = xtask::python::run(root);
        summary.add("Python wheel: build, install, pytest", tested.as_ref().ok().copied(), started);
        tested?;
    }
    Ok(())
}
