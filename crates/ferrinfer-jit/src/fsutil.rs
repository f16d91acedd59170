//! File-system steps the cache repeats: temporaries named by the process that writes them,
//! atomic writes, a directory's writability checked before work that ends in writing to it, and
//! repairs of paths a user or a crash left in the wrong shape (a file where a directory belongs,
//! or the reverse).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// What every temporary's name starts with.
const TEMPORARY_PREFIX: &str = ".tmp-";

/// This process's temporary for `stem` in `dir`: `.tmp-<stem>-<pid>`. The pid tells whoever
/// finds it after this process died that it is garbage ([`crate::sweep`]).
pub fn temporary(dir: &Path, stem: &str) -> PathBuf {
    dir.join(format!("{TEMPORARY_PREFIX}{stem}-{}", std::process::id()))
}

/// The stem and pid of a temporary's file name; `None` for any other name.
pub fn temporary_owner(name: &str) -> Option<(&str, u32)> {
    let (stem, pid) = name.strip_prefix(TEMPORARY_PREFIX)?.rsplit_once('-')?;
    let pid: u32 = pid.parse().ok()?;
    (!stem.is_empty() && pid > 0).then_some((stem, pid))
}

/// Writes `contents` to `path` through a temporary file and a rename, so a reader sees the old
/// file or the new one, never half of one.
pub fn write_atomically(path: &Path, contents: &[u8]) -> io::Result<()> {
    let parent = path.parent().ok_or_else(|| io::Error::other("a file path has a parent"))?;
    ensure_dir(parent)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = temporary(parent, &name);
    std::fs::write(&tmp, contents)?;
    std::fs::rename(&tmp, path)
}

/// Creates directory `dir` if missing ([`ensure_dir`]) and checks that a file can be created in
/// it, so that work which ends in writing there fails before it starts, not after.
pub fn check_writable(dir: &Path) -> io::Result<()> {
    // One probe name a call: threads of one process (an AOT build) check the same directory.
    static PROBES: AtomicU64 = AtomicU64::new(0);
    ensure_dir(dir)?;
    let probe = temporary(dir, &format!("probe{}", PROBES.fetch_add(1, Ordering::Relaxed)));
    std::fs::write(&probe, b"")?;
    std::fs::remove_file(&probe)
}

/// Removes whatever is at `path` (directory tree, file or link); nothing there is fine.
pub fn remove_path(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Creates directory `path` (and its parents); a file or link in its place is removed first. Only
/// `path` itself is repaired: a file further up is the caller's directory, not ours to delete.
pub fn ensure_dir(path: &Path) -> io::Result<()> {
    match std::fs::create_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) => match std::fs::symlink_metadata(path) {
            Ok(meta) if !meta.is_dir() => {
                std::fs::remove_file(path)?;
                std::fs::create_dir_all(path)
            }
            _ => Err(e),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_in_place_of_a_directory_is_replaced_but_not_one_above_it() {
        let dir = tempfile::tempdir().unwrap();
        let squatter = dir.path().join("ptx");
        std::fs::write(&squatter, "not a directory").unwrap();
        ensure_dir(&squatter).unwrap();
        assert!(squatter.is_dir());
        let above = dir.path().join("file");
        std::fs::write(&above, "").unwrap();
        assert!(ensure_dir(&above.join("cache")).is_err());
        assert!(above.is_file(), "a file above the cache is not ours to remove");
    }

    #[test]
    fn remove_path_removes_files_directories_and_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (file, tree) = (dir.path().join("f"), dir.path().join("t"));
        std::fs::write(&file, "").unwrap();
        std::fs::create_dir_all(tree.join("a")).unwrap();
        for path in [&file, &tree, &dir.path().join("absent")] {
            remove_path(path).unwrap();
            assert!(!path.exists());
        }
    }

    #[test]
    fn temporaries_record_their_writer() {
        let dir = Path::new("/cache/ptx");
        let own = temporary(dir, "0a1b");
        assert_eq!(own, dir.join(format!(".tmp-0a1b-{}", std::process::id())));
        let name = own.file_name().unwrap().to_str().unwrap();
        assert_eq!(temporary_owner(name), Some(("0a1b", std::process::id())));
        assert_eq!(
            temporary_owner(".tmp-nightly-2026-05-20-sm_90-0f1e-42"),
            Some(("nightly-2026-05-20-sm_90-0f1e", 42))
        );
        for other in ["0a1b", ".tmp-0a1b", ".tmp-0a1b-", ".tmp--42", ".tmp-0a1b-x42", ".tmp-0a1b-0", "tmp-0a1b-42"] {
            assert_eq!(temporary_owner(other), None, "{other}");
        }
    }

    #[test]
    fn writability_is_checked_by_writing() {
        let dir = tempfile::tempdir().unwrap();
        let ptx = dir.path().join("ptx");
        check_writable(&ptx).unwrap();
        assert!(ptx.is_dir(), "a missing directory is created");
        assert_eq!(std::fs::read_dir(&ptx).unwrap().count(), 0, "the probe is removed");
        let below_a_file = dir.path().join("file");
        std::fs::write(&below_a_file, "").unwrap();
        assert!(check_writable(&below_a_file.join("ptx")).is_err());
    }

    #[test]
    fn atomic_writes_replace_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/v.toml");
        write_atomically(&path, b"one").unwrap();
        write_atomically(&path, b"two").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "two");
        assert_eq!(std::fs::read_dir(path.parent().unwrap()).unwrap().count(), 1, "no temporary left");
    }
}
