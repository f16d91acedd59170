//! `cargo xtask precommit`: everything a PR must pass before review, in one command (CI runs it
//! too): rustfmt in check mode, clippy with warnings denied, the layer lint, cargo-deny (bans,
//! licenses, sources) and insta in check mode (no pending `.snap.new`).

use std::path::Path;

use anyhow::{Result, bail, ensure};

/// The cargo invocations, in the order they run (cheapest first).
pub const STEPS: &[&[&str]] = &[
    &["fmt", "--all", "--check"],
    &["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"],
    // The candle adapter's code is behind its feature (torch's needs libtorch: .ci/run lints it).
    &["clippy", "-p", "ferrinfer-ffi", "--features", "candle", "--all-targets", "--", "-D", "warnings"],
    &["deny", "check", "bans", "licenses", "sources"],
];

pub fn run(root: &Path) -> Result<()> {
    for step in STEPS {
        if step[0] == "deny" && !has_cargo_deny(root) {
            bail!("cargo-deny is not installed; install it with `cargo install cargo-deny --locked`");
        }
        crate::run_echoed(crate::cargo(root).args(*step))?;
    }
    eprintln!("$ cargo xtask lint-layers");
    let violations = crate::lint_layers::lint(root)?;
    ensure!(
        violations.is_empty(),
        "layer violations:\n{}",
        violations.iter().map(|v| v.to_string()).collect::<Vec<_>>().join("\n")
    );
    let pending = pending_snapshots(root)?;
    ensure!(pending.is_empty(), "insta snapshots pending review (run `cargo insta review`):\n{}", pending.join("\n"));
    eprintln!("precommit: ok");
    Ok(())
}

fn has_cargo_deny(root: &Path) -> bool {
    crate::cargo(root).args(["deny", "--version"]).output().is_ok_and(|o| o.status.success())
}

/// `*.snap.new` files under `crates/` and `xtask/` (insta writes them for changed snapshots).
pub fn pending_snapshots(root: &Path) -> Result<Vec<String>> {
    let mut pending = Vec::new();
    for top in ["crates", "xtask"] {
        collect(&root.join(top), &mut pending)?;
    }
    Ok(pending)
}

fn collect(dir: &Path, found: &mut Vec<String>) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Ok(()) };
    for entry in entries {
        let path = entry?.path();
        if path.is_dir() && path.file_name().is_some_and(|n| n != "target") {
            collect(&path, found)?;
        } else if path.to_string_lossy().ends_with(".snap.new") {
            found.push(path.display().to_string());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_snapshots_are_found_below_crates() {
        let dir = tempfile::tempdir().unwrap();
        let snapshots = dir.path().join("crates/a/tests/snapshots");
        std::fs::create_dir_all(&snapshots).unwrap();
        std::fs::write(snapshots.join("x.snap"), "").unwrap();
        assert!(pending_snapshots(dir.path()).unwrap().is_empty());
        std::fs::write(snapshots.join("x.snap.new"), "").unwrap();
        assert_eq!(pending_snapshots(dir.path()).unwrap().len(), 1);
    }
}
