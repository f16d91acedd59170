//! `cargo xtask ci [NAME]`: the tests of one op family across all crates, of one crate, or all.
//!
//! Families are discovered, not listed: FlashInfer's one-file-per-op-per-layer convention means an
//! op `F` has `crates/ferrinfer-kernels/src/<F>.rs` and `crates/ferrinfer-launch/src/<F>.rs`. Its
//! tests are the unit tests under a module `F::` and the integration test targets named `F` or `F_*`.
//! A crate is named by its directory without `ferrinfer-` (`jit` for `crates/ferrinfer-jit`): its
//! tests are all of that crate's, plus integration tests named `jit` or `jit_*` elsewhere.

use std::collections::BTreeSet;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// Insta in check mode: a changed snapshot fails the run instead of writing `.snap.new` files.
const TEST_ENV: &[(&str, &str)] = &[("INSTA_UPDATE", "no"), ("CI", "true")];

/// File stems that are modules in both the kernels and the launch layer.
pub fn families(root: &Path) -> Result<Vec<String>> {
    let kernels = module_stems(&root.join("crates/ferrinfer-kernels/src"))?;
    let launch = module_stems(&root.join("crates/ferrinfer-launch/src"))?;
    Ok(kernels.intersection(&launch).cloned().collect())
}

fn module_stems(dir: &Path) -> Result<BTreeSet<String>> {
    let mut stems = BTreeSet::new();
    for entry in fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let path = entry?.path();
        let stem = path.file_stem().unwrap_or_default().to_string_lossy();
        let is_rs = path.is_file() && path.extension().is_some_and(|e| e == "rs");
        // A module of several files: a folder with its `mod.rs` (`sampling/`).
        let is_folder_module = path.is_dir() && path.join("mod.rs").is_file();
        if (is_rs || is_folder_module) && !["lib", "mod", "main"].contains(&stem.as_ref()) {
            stems.insert(stem.into_owned());
        }
    }
    Ok(stems)
}

/// The op families a change touches: a family's own files (`<F>.rs` or `<F>/…` in a crate's `src/`, its
/// tests `<F>.rs`/`<F>_*.rs`) select it; any other code or build file under `crates/`, `xtask/`
/// or the root manifests is shared, and selects every family; docs and other files select none.
pub fn changed_families(root: &Path, changed: &[&str]) -> Result<Vec<String>> {
    let known = families(root)?;
    let mut chosen = BTreeSet::new();
    for file in changed {
        let path = Path::new(file);
        let stem = path.file_stem().unwrap_or_default().to_string_lossy();
        let code = path.extension().is_some_and(|e| e == "rs" || e == "toml" || e == "lock" || e == "snap");
        let in_code_tree = file.starts_with("crates/") || file.starts_with("xtask/") || !file.contains('/');
        if !code || !in_code_tree {
            continue;
        }
        // A file in a family's folder (a file of `ferrinfer-kernels/src/sampling/`) is that family's.
        let folder = file.split_once("/src/").and_then(|(_, rest)| rest.split_once('/')).map(|(dir, _)| dir);
        let owns = |f: &String| belongs_to(&stem, f) || file.contains(&format!("__{f}_")) || folder == Some(f.as_str());
        match known.iter().find(|f| owns(f)) {
            Some(family) if file.starts_with("crates/") => {
                chosen.insert(family.clone());
            }
            _ => return Ok(known),
        }
    }
    Ok(chosen.into_iter().collect())
}

/// The `cargo` argument lists to run, in order. All tests, a family's, or the crate `ffi`'s run
/// with the framework adapters' features (`adapter_features`; torch's only where `libtorch` is
/// available), all tests in one cargo run, a family's over the whole workspace too: cargo
/// resolves features per run, and one with other packages or features builds shared crates again
/// (`-p ferrinfer-launch --test norm` rebuilt ferrinfer-launch after a full run).
pub fn plan(root: &Path, family: Option<&str>, release: bool, libtorch: bool) -> Result<Vec<Vec<String>>> {
    let workspace = format!("test --workspace --features {}", adapter_features(libtorch));
    let mut runs = match family {
        None => vec![args(&workspace)],
        Some(f) => family_runs(root, f, &workspace)?,
    };
    if family == Some("ffi") {
        runs[0].extend(["--features".to_owned(), adapter_features(libtorch)]);
    }
    if release {
        // Before any `--`, where cargo (not the test binary) reads it.
        for run in &mut runs {
            let at = run.iter().position(|a| a == "--").unwrap_or(run.len());
            run.insert(at, "--release".into());
        }
    }
    Ok(runs)
}

/// The workspace's crates meant for crates.io (every one whose `publish` is not `false`).
pub fn published_crates(root: &Path) -> Result<Vec<String>> {
    let metadata = crate::lint_layers::metadata(root)?;
    let mut names: Vec<String> = metadata
        .workspace_packages()
        .into_iter()
        .filter(|p| p.publish.as_ref().is_none_or(|registries| !registries.is_empty()))
        .map(|p| p.name.to_string())
        .collect();
    names.sort();
    Ok(names)
}

/// `cargo package` of every published crate, verified: each builds from its own `.crate` alone
/// (no file outside its directory, every dependency versioned), with its metadata complete.
pub fn package(root: &Path) -> Result<()> {
    let names = published_crates(root)?;
    forget_unpacked_packages(&names)?;
    let target = root.join(PACKAGE_TARGET_DIR);
    let mut clean = crate::cargo(root);
    clean.args(["clean", "--quiet", "--target-dir"]).arg(&target);
    let mut command = crate::cargo(root);
    command.args(["package", "--allow-dirty", "--quiet", "--target-dir"]).arg(&target);
    for name in &names {
        clean.args(["-p", name]);
        command.args(["-p", name]);
    }
    crate::run_echoed(&mut clean)?;
    crate::run_echoed(&mut command)
}

/// Where `cargo package` verifies the crates. Cargo takes a registry crate's build as final for
/// its name and version, and the verification builds our crates as registry crates (0.1.0, from
/// a temporary registry): a second run linked the first run's ferrinfer-jit against a changed
/// ferrinfer-launch and failed. So the verification builds in a target directory of its own,
/// from which our crates' builds are cleaned first (third-party builds stay).
const PACKAGE_TARGET_DIR: &str = "target/package-verify";

/// Cargo verifies the packages against each other through a temporary local registry, which it
/// unpacks into `$CARGO_HOME/registry/src/-<hash>/<name>-<version>/` once per name and version
/// and never again: after a change, a second run built `ferrinfer-launch` against the first
/// run's `ferrinfer-jit` 0.1.0 and failed. Removes those unpacked copies of `names` (local
/// registries' directories start with `-`; crates.io's never do).
fn forget_unpacked_packages(names: &[String]) -> Result<()> {
    let home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cargo")));
    let Some(sources) = home.map(|home| home.join("registry/src")).filter(|dir| dir.is_dir()) else {
        return Ok(());
    };
    for registry in fs::read_dir(&sources).with_context(|| format!("listing {}", sources.display()))? {
        let registry = registry?;
        if !registry.file_name().to_string_lossy().starts_with('-') {
            continue;
        }
        for unpacked in fs::read_dir(registry.path())? {
            let unpacked = unpacked?;
            let dir = unpacked.file_name().to_string_lossy().into_owned();
            if names.iter().any(|name| is_unpacked_package(&dir, name)) {
                fs::remove_dir_all(unpacked.path())
                    .with_context(|| format!("removing the stale {}", unpacked.path().display()))?;
            }
        }
    }
    Ok(())
}

/// Whether directory `dir` is crate `name` unpacked: `<name>-<version>`.
fn is_unpacked_package(dir: &str, name: &str) -> bool {
    dir.strip_prefix(name)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|version| version.starts_with(|c: char| c.is_ascii_digit()))
}

/// ferrinfer-ffi's framework adapters, whose test targets compile empty without their feature.
/// candle builds from crates.io alone; torch needs libtorch (`LIBTORCH`, which
/// `source scripts/torch/libtorch.sh` provides; .ci/run does). Given to the workspace's own test
/// run, not to a run of ferrinfer-ffi alone: cargo resolves a package's features over what one
/// run builds, so a separate `-p ferrinfer-ffi --features candle` run gave shared dependencies
/// other features and built ferrinfer-jit, ferrinfer-launch and their dependencies again.
pub fn adapter_features(libtorch: bool) -> String {
    let adapters: &[&str] = if libtorch { &["candle", "torch"] } else { &["candle"] };
    adapters.iter().map(|a| format!("ferrinfer-ffi/{a}")).collect::<Vec<_>>().join(",")
}

/// Crates by short name (`jit` → `ferrinfer-jit`, `xtask` → `xtask`).
pub fn crate_suites(root: &Path) -> Result<Vec<(String, String)>> {
    let mut suites = vec![("xtask".to_owned(), "xtask".to_owned())];
    for entry in fs::read_dir(root.join("crates")).context("listing crates/")? {
        let package = entry?.file_name().to_string_lossy().into_owned();
        let short = package.strip_prefix("ferrinfer-").unwrap_or(&package).to_owned();
        suites.push((short, package));
    }
    suites.sort();
    Ok(suites)
}

/// A family's runs (`workspace`: the full run's command, packages and features): its unit tests
/// in every crate, then its integration tests, in two runs over the workspace. A crate's: its
/// every test, then its named tests elsewhere.
fn family_runs(root: &Path, name: &str, workspace: &str) -> Result<Vec<Vec<String>>> {
    let (known, suites) = (families(root)?, crate_suites(root)?);
    if known.iter().any(|f| f == name) {
        let mut runs = vec![args(&format!("{workspace} --lib --bins -- {name}::"))];
        let targets: BTreeSet<String> = integration_tests(root, name)?.into_iter().map(|(_, t)| t).collect();
        if !targets.is_empty() {
            let named: Vec<String> = targets.iter().map(|t| format!("--test {t}")).collect();
            runs.push(args(&format!("{workspace} {}", named.join(" "))));
        }
        return Ok(runs);
    }
    let mut runs = if let Some((_, package)) = suites.iter().find(|(short, _)| short == name) {
        vec![args(&format!("test -p {package}"))]
    } else {
        let list = if known.is_empty() { "none".into() } else { known.join(", ") };
        let crates: Vec<&str> = suites.iter().map(|(short, _)| short.as_str()).collect();
        bail!("unknown op family `{name}`; known families: {list}; crates: {}", crates.join(", "));
    };
    let own_package = suites.iter().find(|(short, _)| short == name).map(|(_, p)| p.as_str());
    for (krate, target) in integration_tests(root, name)? {
        if Some(krate.as_str()) != own_package {
            runs.push(args(&format!("test -p {krate} --test {target}")));
        }
    }
    Ok(runs)
}

/// `(package, test target)` for `crates/*/tests/F*.rs`, `xtask/tests/F*.rs` and their
/// `tests/F*/main.rs` form. The directory name is the package name (a workspace convention).
fn integration_tests(root: &Path, family: &str) -> Result<Vec<(String, String)>> {
    let mut packages = vec![root.join("xtask")];
    for entry in fs::read_dir(root.join("crates")).context("listing crates/")? {
        packages.push(entry?.path());
    }
    let mut found = Vec::new();
    for package in packages {
        let Ok(entries) = fs::read_dir(package.join("tests")) else {
            continue;
        };
        let krate = package.file_name().unwrap_or_default().to_string_lossy().into_owned();
        for entry in entries {
            if let Some(target) = test_target(&entry?.path())
                && belongs_to(&target, family)
            {
                found.push((krate.clone(), target));
            }
        }
    }
    found.sort();
    Ok(found)
}

/// The target name cargo gives `tests/<NAME>.rs` or `tests/<NAME>/main.rs`.
fn test_target(path: &Path) -> Option<String> {
    let is_target =
        if path.is_dir() { path.join("main.rs").is_file() } else { path.extension().is_some_and(|e| e == "rs") };
    let stem = path.file_stem()?.to_string_lossy().into_owned();
    is_target.then_some(stem)
}

/// `norm` owns `norm` and `norm_gpu` but not `normalize`: a prefix alone would also hand a
/// family `rope` the tests of a family `rope_scaling`.
fn belongs_to(target: &str, family: &str) -> bool {
    target.strip_prefix(family).is_some_and(|rest| rest.is_empty() || rest.starts_with('_'))
}

fn args(line: &str) -> Vec<String> {
    line.split_whitespace().map(str::to_owned).collect()
}

/// Runs each planned `cargo` command in `root`, printing it first; stops at the first failure.
pub fn run(root: &Path, runs: &[Vec<String>], summary: &mut Summary) -> Result<()> {
    let env: Vec<String> = TEST_ENV.iter().map(|(k, v)| format!("{k}={v}")).collect();
    eprintln!("(environment: {})", env.join(" "));
    for run in runs {
        let started = Instant::now();
        let counts = run_counted(crate::cargo(root).args(run).envs(TEST_ENV.iter().copied()));
        summary.add(&format!("cargo {}", run.join(" ")), counts.as_ref().ok().copied(), started);
        counts?;
    }
    Ok(())
}

/// Tests a run reported (`test result:` lines summed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub passed: u64,
    pub failed: u64,
    pub ignored: u64,
}

impl Counts {
    /// Adds a libtest `test result: ok. 5 passed; 0 failed; 1 ignored; …` line's counts, or a
    /// pytest `152 passed, 2 skipped in 1.2s` line's (skipped counted as ignored).
    pub fn add_line(&mut self, line: &str) {
        let words: Vec<&str> = line.split([' ', ';', ',']).filter(|w| !w.is_empty()).collect();
        let libtest = line.starts_with("test result:");
        let pytest = words.windows(2).any(|w| w[1] == "passed" || w[1] == "failed") && line.contains(" in ");
        if !libtest && !pytest {
            return;
        }
        for pair in words.windows(2) {
            let Ok(n) = pair[0].parse::<u64>() else { continue };
            match pair[1] {
                "passed" => self.passed += n,
                "failed" => self.failed += n,
                "ignored" | "skipped" => self.ignored += n,
                _ => {}
            }
        }
    }
}

/// Runs `command` as [`crate::run_echoed`] does, its standard output passed through line by
/// line and its test counts summed.
pub fn run_counted(command: &mut Command) -> Result<Counts> {
    let args: Vec<String> = command.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
    let line = format!("{} {}", command.get_program().to_string_lossy(), args.join(" "));
    eprintln!("$ {line}");
    let mut child = command.stdout(Stdio::piped()).spawn().with_context(|| format!("starting `{line}`"))?;
    let mut counts = Counts::default();
    let stdout = child.stdout.take().context("the child's standard output")?;
    for text in BufReader::new(stdout).lines() {
        let text = text?;
        println!("{text}");
        counts.add_line(&text);
    }
    let status = child.wait()?;
    anyhow::ensure!(status.success(), "`{line}` failed: {status}");
    Ok(counts)
}

/// One line a step of a `ci` run (what ran, its tests, its seconds), printed at the end so that
/// a slow or failing step is visible without scrolling.
#[derive(Default)]
pub struct Summary {
    lines: Vec<String>,
}

impl Summary {
    /// Records a step that ran `what` from `started`, with its tests where it counted them.
    pub fn add(&mut self, what: &str, counts: Option<Counts>, started: Instant) {
        let tests = match counts {
            Some(c) if c != Counts::default() => {
                format!("{} passed, {} failed, {} ignored", c.passed, c.failed, c.ignored)
            }
            Some(_) => "no tests".to_owned(),
            None => "failed".to_owned(),
        };
        self.lines.push(format!("{:>7.1} s  {tests:<36}  {what}", started.elapsed().as_secs_f64()));
    }

    /// Prints every step's line.
    pub fn print(&self) {
        eprintln!("ci steps:");
        for line in &self.lines {
            eprintln!("  {line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_sum_libtest_and_pytest_result_lines_only() {
        let mut counts = Counts::default();
        for line in [
            "test result: ok. 5 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.1s",
            "test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out",
            "152 passed, 2 skipped in 1.16s",
            "test a_test_named_3_passed ... ok",
            "running 5 tests",
        ] {
            counts.add_line(line);
        }
        assert_eq!(counts, Counts { passed: 159, failed: 1, ignored: 3 });
    }

    fn touch(root: &Path, files: &[&str]) {
        for file in files {
            let path = root.join(file);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, "").unwrap();
        }
    }

    fn layout() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        touch(
            dir.path(),
            &[
                "crates/ferrinfer-kernels/src/lib.rs",
                "crates/ferrinfer-kernels/src/norm.rs",
                "crates/ferrinfer-kernels/src/rope.rs",
                "crates/ferrinfer-kernels/src/math.rs",
                "crates/ferrinfer-launch/src/lib.rs",
                "crates/ferrinfer-launch/src/norm.rs",
                "crates/ferrinfer-launch/src/rope.rs",
                "crates/ferrinfer-launch/src/tensor.rs",
                "crates/ferrinfer-launch/tests/norm_gpu.rs",
                "crates/ferrinfer-launch/tests/normalize.rs",
                "crates/ferrinfer-ffi/tests/norm/main.rs",
                "crates/ferrinfer-ffi/tests/rope.rs",
                "xtask/tests/norm.rs",
            ],
        );
        dir
    }

    #[test]
    fn families_are_modules_of_both_kernels_and_launch() {
        let dir = layout();
        assert_eq!(families(dir.path()).unwrap(), ["norm", "rope"]);
    }

    #[test]
    fn a_family_runs_its_unit_and_integration_tests() {
        let dir = layout();
        let runs: Vec<String> =
            plan(dir.path(), Some("norm"), true, false).unwrap().iter().map(|r| r.join(" ")).collect();
        assert_eq!(
            runs,
            [
                "test --workspace --features ferrinfer-ffi/candle --lib --bins --release -- norm::",
                "test --workspace --features ferrinfer-ffi/candle --test norm --test norm_gpu --release",
            ]
        );
    }

    #[test]
    fn a_crate_runs_all_its_tests_and_its_named_tests_elsewhere() {
        let dir = layout();
        touch(dir.path(), &["crates/ferrinfer-jit/tests/jit_cache.rs", "crates/ferrinfer-launch/tests/jit_modules.rs"]);
        let runs: Vec<String> =
            plan(dir.path(), Some("jit"), false, false).unwrap().iter().map(|r| r.join(" ")).collect();
        assert_eq!(runs, ["test -p ferrinfer-jit", "test -p ferrinfer-launch --test jit_modules"]);
    }

    #[test]
    fn changed_files_select_their_family_or_all() {
        let dir = layout();
        let changed = |files: &[&str]| changed_families(dir.path(), files).unwrap();
        assert_eq!(
            changed(&["crates/ferrinfer-kernels/src/norm.rs", "crates/ferrinfer-launch/tests/norm_gpu.rs"]),
            ["norm"]
        );
        assert_eq!(changed(&["crates/ferrinfer-jit/src/rope.rs", "docs/perf/norm.md"]), ["rope"]);
        assert_eq!(changed(&["crates/ferrinfer-kernels/src/math.rs"]), ["norm", "rope"], "shared code: every family");
        assert_eq!(changed(&["Cargo.toml"]), ["norm", "rope"]);
        assert!(changed(&["README.md", "docs/jit.md"]).is_empty(), "docs only: nothing to test");
    }

    #[test]
    fn the_library_crates_are_published_and_the_tools_are_not() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let expected = ["ferrinfer", "ferrinfer-ffi", "ferrinfer-jit", "ferrinfer-kernels", "ferrinfer-launch"];
        assert_eq!(published_crates(root).unwrap(), expected);
    }

    #[test]
    fn unpacked_packages_are_recognised_by_name_and_version() {
        assert!(is_unpacked_package("ferrinfer-jit-0.1.0", "ferrinfer-jit"));
        assert!(is_unpacked_package("ferrinfer-0.1.0", "ferrinfer"));
        assert!(!is_unpacked_package("ferrinfer-jit-0.1.0", "ferrinfer"), "another crate of the family");
        assert!(!is_unpacked_package("ferrinfer-jitter-0.1.0", "ferrinfer-jit"));
        assert!(!is_unpacked_package("ferrinfer-jit", "ferrinfer-jit"));
    }

    #[test]
    fn no_family_runs_everything_and_the_adapters_in_one_run() {
        let dir = layout();
        assert_eq!(
            plan(dir.path(), None, false, false).unwrap(),
            [args("test --workspace --features ferrinfer-ffi/candle")]
        );
        let with_torch = plan(dir.path(), None, true, true).unwrap();
        assert_eq!(
            with_torch,
            [args("test --workspace --features ferrinfer-ffi/candle,ferrinfer-ffi/torch --release")]
        );
        let ffi = plan(dir.path(), Some("ffi"), false, false).unwrap();
        assert_eq!(ffi[0], args("test -p ferrinfer-ffi --features ferrinfer-ffi/candle"), "the crate's own run");
    }

    #[test]
    fn an_unknown_family_is_an_error_naming_the_known_ones() {
        let dir = layout();
        let err = plan(dir.path(), Some("math"), false, false).unwrap_err().to_string();
        assert!(err.contains("unknown op family `math`"), "{err}");
        assert!(err.contains("known families: norm, rope; crates: "), "{err}");
    }
}
