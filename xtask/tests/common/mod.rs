//! What the repository's tidy tests share: the repository's root and the files they read.

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

/// Tracked files plus untracked, not ignored ones (a new file is checked before its commit);
/// files deleted from the work tree but still in the index are left out.
pub fn files(root: &Path) -> Vec<String> {
    let output = Command::new("git")
        .args(["ls-files", "--cached", "--others", "--exclude-standard"])
        .current_dir(root)
        .output()
        .expect("git ls-files");
    String::from_utf8_lossy(&output.stdout).lines().filter(|p| root.join(p).exists()).map(str::to_owned).collect()
}
