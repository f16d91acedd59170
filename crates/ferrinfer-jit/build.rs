//! Records the host triple (to find the device toolchain's rustc without spawning rustup) and the
//! device toolchain named by the repository's one-line `device-toolchain` file (the only place it
//! is named; this crate's `device-toolchain` is a link to it, which `cargo package` stores as the
//! file itself).

use std::path::{Path, PathBuf};

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    println!("cargo:rustc-env=FERRINFER_HOST_TRIPLE={}", std::env::var("TARGET").unwrap());
    println!("cargo:rustc-env=FERRINFER_DEVICE_TOOLCHAIN={}", device_toolchain(&manifest_dir.join("device-toolchain")));
}

/// The toolchain name in `path`: one line, one word (e.g. `nightly-2026-05-20`).
fn device_toolchain(path: &Path) -> String {
    println!("cargo:rerun-if-changed={}", path.display());
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let name = text.trim();
    assert!(
        !name.is_empty() && !name.contains(char::is_whitespace),
        "{} must hold one toolchain name such as nightly-2026-05-20, not {text:?}",
        path.display()
    );
    name.to_owned()
}
