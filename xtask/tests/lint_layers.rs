//! The layer lint on the real workspace (so plain `cargo test` fails on a violation), and on
//! copies of it with one violation planted each, to show each rule fires, exactly once, where it should.

use std::fs;
use std::path::{Path, PathBuf};

use regex::Regex;
use tempfile::TempDir;
use xtask::lint_layers::{Rule, Violation, lint};

fn real_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

#[test]
fn the_workspace_keeps_its_layers() {
    let violations = lint(&real_root()).unwrap();
    let lines: Vec<String> = violations.iter().map(ToString::to_string).collect();
    assert!(violations.is_empty(), "layer violations:\n{}", lines.join("\n"));
}

/// A copy of the workspace's manifests, lock file and sources under `<tmp>/ws`; `<tmp>` also
/// holds fake crates, outside the workspace so that cargo does not make them members.
struct Copy {
    tmp: TempDir,
}

impl Copy {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        copy_tree(&real_root(), &tmp.path().join("ws"));
        Copy { tmp }
    }

    fn ws(&self) -> PathBuf {
        self.tmp.path().join("ws")
    }

    fn edit(&self, file: &str, f: impl FnOnce(String) -> String) {
        let path = self.ws().join(file);
        fs::write(&path, f(fs::read_to_string(&path).unwrap())).unwrap();
    }

    fn write(&self, file: &str, text: &str) {
        fs::write(self.ws().join(file), text).unwrap();
    }

    /// A crate `name` outside the workspace, depending on `deps` (earlier fake crates).
    fn fake_crate(&self, name: &str, deps: &[&str]) {
        let dir = self.tmp.path().join("fake").join(name);
        fs::create_dir_all(dir.join("src")).unwrap();
        fs::write(dir.join("src/lib.rs"), "").unwrap();
        let deps: String = deps.iter().map(|d| format!("{d} = {{ path = '../{d}' }}\n")).collect();
        let manifest =
            format!("[package]\nname = '{name}'\nversion = '0.0.0'\nedition = '2024'\n\n[dependencies]\n{deps}");
        fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    }

    /// Adds `dep = <spec>` to the `[dependencies]` of workspace crate `krate`.
    fn add_dependency(&self, krate: &str, line: &str) {
        self.edit(&format!("crates/{krate}/Cargo.toml"), |m| {
            assert!(m.contains("\n[dependencies]\n"), "{krate} has no [dependencies] table");
            m.replacen("\n[dependencies]\n", &format!("\n[dependencies]\n{line}\n"), 1)
        });
    }

    fn fake_path(&self, name: &str) -> String {
        let path = self.tmp.path().join("fake").join(name);
        format!("{{ path = '{}' }}", path.display())
    }

    fn violations(&self) -> Vec<Violation> {
        lint(&self.ws()).unwrap()
    }
}

/// Manifests, the lock file (so that the copy resolves offline) and sources; no build output.
fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let keep = name.ends_with(".rs") || name.ends_with(".toml") || name == "Cargo.lock";
        if path.is_dir() && name != "target" && !name.starts_with('.') {
            copy_tree(&path, &to.join(&name));
        } else if path.is_file() && keep {
            fs::copy(&path, to.join(&name)).unwrap();
        }
    }
}

fn expect(found: Vec<Violation>, expected: &[(&str, &str, Rule)]) {
    let expected: Vec<Violation> = expected
        .iter()
        .map(|&(krate, path, rule)| Violation { krate: krate.into(), path: path.into(), rule })
        .collect();
    let show = |v: &[Violation]| v.iter().map(|v| format!("\n  {v}")).collect::<String>();
    assert_eq!(found, expected, "found:{}\nexpected:{}", show(&found), show(&expected));
}

#[test]
fn a_framework_dependency_of_kernels_is_reported() {
    let copy = Copy::new();
    copy.fake_crate("candle-core", &[]);
    copy.add_dependency("ferrinfer-kernels", &format!("candle-core = {}", copy.fake_path("candle-core")));
    let path = "ferrinfer-kernels -> candle-core";
    expect(
        copy.violations(),
        &[("ferrinfer-kernels", path, Rule::KernelsDependency), ("ferrinfer-kernels", path, Rule::FrameworkDependency)],
    );
}

#[test]
fn a_transitive_framework_dependency_of_launch_is_reported_with_its_path() {
    let copy = Copy::new();
    copy.fake_crate("candle-core", &[]);
    copy.fake_crate("foo", &["candle-core"]);
    copy.add_dependency("ferrinfer-launch", &format!("foo = {}", copy.fake_path("foo")));
    let path = "ferrinfer-launch -> foo -> candle-core";
    expect(copy.violations(), &[("ferrinfer-launch", path, Rule::FrameworkDependency)]);
}

#[test]
fn kernels_with_a_default_featured_half_is_reported() {
    let copy = Copy::new();
    copy.add_dependency("ferrinfer-kernels", "half = \"2\"");
    let path = "ferrinfer-kernels -> half";
    expect(copy.violations(), &[("ferrinfer-kernels", path, Rule::KernelsDependency)]);
}

#[test]
fn frameworks_are_fine_in_ffi() {
    let copy = Copy::new();
    // A framework ffi does not use yet (candle-core, tch, pyo3 are real dependencies already).
    copy.fake_crate("candle-transformers", &[]);
    copy.add_dependency("ferrinfer-ffi", &format!("candle-transformers = {}", copy.fake_path("candle-transformers")));
    copy.write("crates/ferrinfer-ffi/src/planted.rs", "use candle_transformers::Model;\n");
    expect(copy.violations(), &[]);
}

/// Comments and string literals that mention std, then `code` on line 4.
fn kernels_source(code: &str) -> String {
    format!("// use std::vec::Vec;\n/* extern crate alloc; */\nconst S: &str = \"std::x\";\n{code}\n")
}

#[test]
fn extern_crate_std_in_kernels_is_reported() {
    let copy = Copy::new();
    copy.write("crates/ferrinfer-kernels/src/planted.rs", &kernels_source("extern crate std;"));
    let path = "crates/ferrinfer-kernels/src/planted.rs:4: extern crate std;";
    expect(copy.violations(), &[("ferrinfer-kernels", path, Rule::KernelsStd)]);
}

#[test]
fn use_std_in_kernels_is_reported() {
    let copy = Copy::new();
    copy.write("crates/ferrinfer-kernels/src/planted.rs", &kernels_source("use std::vec::Vec;"));
    let path = "crates/ferrinfer-kernels/src/planted.rs:4: use std::vec::Vec;";
    expect(copy.violations(), &[("ferrinfer-kernels", path, Rule::KernelsStd)]);
}

#[test]
fn kernels_without_no_std_is_reported() {
    let copy = Copy::new();
    copy.edit("crates/ferrinfer-kernels/src/lib.rs", |lib| lib.replace("#![no_std]", ""));
    let path = "crates/ferrinfer-kernels/src/lib.rs";
    expect(copy.violations(), &[("ferrinfer-kernels", path, Rule::KernelsNotNoStd)]);
}

/// Removes `krate`'s dependency on `dep` (and features forwarded to it) from its manifest.
fn cut_dependency(manifest: &str, dep: &str) -> String {
    let line = Regex::new(&format!(r"(?m)^\s*{dep}\s*=.*\n")).unwrap();
    let feature = Regex::new(&format!(r#""(dep:)?{dep}\??(/[^"]*)?"\s*,?\s*"#)).unwrap();
    feature.replace_all(&line.replace_all(manifest, ""), "").into_owned()
}

#[test]
fn launch_depending_on_ffi_is_reported() {
    let copy = Copy::new();
    // ffi depends on launch; drop that edge in the copy, or cargo rejects the cycle.
    copy.edit("crates/ferrinfer-ffi/Cargo.toml", |m| cut_dependency(&m, "ferrinfer-launch"));
    copy.add_dependency("ferrinfer-launch", "ferrinfer-ffi = { workspace = true }");
    let path = "ferrinfer-launch -> ferrinfer-ffi";
    expect(
        copy.violations(),
        &[("ferrinfer-launch", path, Rule::Upward), ("ferrinfer-launch", path, Rule::DependsOnFfi)],
    );
}

#[test]
fn framework_names_in_launch_sources_are_reported() {
    let copy = Copy::new();
    let source = "//! candle_core::Tensor in a doc comment is prose.\n\
                  use candle_core::Tensor;\n\
                  fn f(_: &tch::Tensor) {}\n\
                  const S: &str = \"pyo3::Python\";\n";
    copy.write("crates/ferrinfer-launch/src/planted.rs", source);
    let file = "crates/ferrinfer-launch/src/planted.rs";
    expect(
        copy.violations(),
        &[
            ("ferrinfer-launch", &format!("{file}:2: use candle_core::Tensor;"), Rule::FrameworkSource),
            ("ferrinfer-launch", &format!("{file}:3: fn f(_: &tch::Tensor) {{}}"), Rule::FrameworkSource),
        ],
    );
}

#[test]
fn a_crate_without_a_layer_is_reported() {
    let copy = Copy::new();
    let dir = copy.ws().join("crates/ferrinfer-extra");
    fs::create_dir_all(dir.join("src")).unwrap();
    fs::write(dir.join("src/lib.rs"), "").unwrap();
    let manifest = "[package]\nname = 'ferrinfer-extra'\nversion.workspace = true\nedition.workspace = true\n";
    fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    expect(copy.violations(), &[("ferrinfer-extra", "ferrinfer-extra", Rule::Unlayered)]);
}
