//! The kernel sources, as `ferrinfer-kernels` embeds them (its `SOURCES`): cache keys hash them
//! and JIT builds compile them, without the repository.

use std::collections::BTreeMap;
use std::path::Path;

/// `(path relative to ferrinfer-kernels/src, contents)` of every kernel source file.
static EMBEDDED: &[(&str, &str)] = ferrinfer_kernels::SOURCES;

/// Files every spec depends on: the crate root and the shared device, element, math and random
/// number code, the tensor cores' instructions.
pub const CORE_SOURCES: &[&str] =
    &["lib.rs", "element.rs", "math.rs", "random.rs", "vector.rs", "device.rs", "matrix.rs"];

/// Whether `entry` of a list of sources ([`CORE_SOURCES`], a family's) names the file `path`: it
/// is that file, or a directory (`sampling/`) with the file under it.
pub fn covers(entry: &str, path: &str) -> bool {
    if entry.ends_with('/') { path.starts_with(entry) } else { path == entry }
}

/// A set of kernel sources (the embedded ones, or an edited copy in tests).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelSources {
    files: BTreeMap<String, String>,
}

impl KernelSources {
    pub fn embedded() -> Self {
        KernelSources { files: EMBEDDED.iter().map(|(p, s)| (p.to_string(), s.to_string())).collect() }
    }

    pub fn get(&self, path: &str) -> Option<&str> {
        self.files.get(path).map(String::as_str)
    }

    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.files.keys().map(String::as_str)
    }

    /// The files `entry` names ([`covers`]): a directory's, or the one file (there or not).
    pub fn named_by(&self, entry: &str) -> Vec<String> {
        if !entry.ends_with('/') {
            return vec![entry.to_owned()];
        }
        self.paths().filter(|path| covers(entry, path)).map(str::to_owned).collect()
    }

    /// A copy with `path` replaced (tests: a one-character kernel edit).
    pub fn with_file(mut self, path: &str, contents: &str) -> Self {
        self.files.insert(path.to_owned(), contents.to_owned());
        self
    }

    /// Writes the crate's sources: `src/**` (rustc compiles `src/lib.rs`; no manifest).
    pub fn write_crate(&self, dir: &Path) -> std::io::Result<()> {
        for (path, contents) in &self.files {
            let target = dir.join("src").join(path);
            std::fs::create_dir_all(target.parent().expect("a file has a parent"))?;
            std::fs::write(target, contents)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_sources_are_embedded() {
        let sources = KernelSources::embedded();
        for core in CORE_SOURCES {
            assert!(sources.get(core).is_some(), "{core} is not embedded");
        }
        assert!(sources.get("lib.rs").unwrap().contains("#![no_std]"));
    }

    #[test]
    fn a_directory_entry_names_every_file_under_it() {
        let sources = KernelSources::embedded().with_file("family/a.rs", "").with_file("family/sub/b.rs", "");
        let sources = sources.with_file("family.rs", "").with_file("familyx/c.rs", "");
        assert_eq!(sources.named_by("family/"), ["family/a.rs", "family/sub/b.rs"]);
        assert_eq!(sources.named_by("family.rs"), ["family.rs"]);
        assert_eq!(sources.named_by("absent.rs"), ["absent.rs"], "a file entry is hashed, there or not");
        assert!(covers("family/", "family/sub/b.rs") && !covers("family/", "familyx/c.rs"));
    }
}
