//! The device toolchain is named in one place, the repository's `device-toolchain` file: CI,
//! the README's set-up commands and the workflows read that file, so moving to a newer nightly
//! is a one-line change. And the edition the builder compiles the kernels crate with is the one
//! its manifest declares.

use std::path::{Path, PathBuf};

use ferrinfer_jit::toolchain::DEVICE_TOOLCHAIN;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn jit_the_device_toolchain_is_named_only_in_its_file() {
    assert_eq!(read("device-toolchain").trim(), DEVICE_TOOLCHAIN);
    let mut installers = vec!["README.md".to_string(), ".ci/run".to_string()];
    for workflow in std::fs::read_dir(repo().join(".github/workflows")).unwrap().flatten() {
        installers.push(format!(".github/workflows/{}", workflow.file_name().to_string_lossy()));
    }
    for path in installers {
        let text = read(&path);
        for line in text.lines().filter(|l| l.contains("rustup") && l.contains("toolchain install")) {
            assert!(
                line.contains("\"$(cat device-toolchain)\" --profile minimal --component rust-src"),
                "{path} installs a toolchain other than device-toolchain's: {line}"
            );
        }
        for stale in ["nightly-20", "+nightly", "--toolchain nightly"] {
            assert!(!text.contains(stale), "{path} names a nightly itself ({stale:?}); read device-toolchain instead");
        }
    }
    assert!(read(".ci/run").contains("toolchain install \"$(cat device-toolchain)\""), ".ci/run installs it");
}

#[test]
fn jit_the_kernels_crate_is_compiled_with_its_declared_edition() {
    let workspace: toml::Table = toml::from_str(&read("Cargo.toml")).unwrap();
    let edition = workspace["workspace"]["package"]["edition"].as_str().unwrap();
    assert!(read("crates/ferrinfer-kernels/Cargo.toml").contains("edition.workspace = true"));
    assert_eq!(edition, ferrinfer_jit::builder::KERNELS_EDITION);
}

#[test]
fn jit_a_missing_toolchain_names_the_module_that_needed_it_and_the_fix() {
    // No rustup anywhere: a module that is not embedded, in an AOT directory or cached cannot be
    // built, and the error says which module and how to install the toolchain.
    let (out, home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_ferrinfer-jit"))
        .args(["aot", "--family", "activation", "--arch", "9.0", "--out"])
        .arg(out.path())
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", home.path())
        .env("RUSTUP_HOME", home.path().join("no-rustup"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "{text}");
    for needle in ["kernel module `activation_", "for 9.0", "needs the device toolchain", "rustup toolchain install"] {
        assert!(text.contains(needle), "{text:?} lacks {needle:?}");
    }
}
