//! Temporaries whose builder is gone. A builder writes an entry, a build directory or a `core`
//! sysroot as a temporary named after its pid ([`fsutil::temporary`]) while it holds the lock of
//! that key or sysroot, then renames it into place or removes it; killed, it leaves the
//! temporary behind. Whoever next locks the cache removes what dead builders left, of every key
//! (a key that is never built again would otherwise keep its garbage for good).
//!
//! A temporary is garbage once its pid names no live process *and* no other process holds the
//! lock that guards it. The pid alone could mislead: a cache shared between containers sees
//! builders of other pid namespaces, whose pids mean nothing here (the lock works across them),
//! and a pid can be reused. A temporary no lock guards (a small file written atomically) is
//! judged by its pid alone.

use std::path::{Path, PathBuf};

use crate::{fsutil, lock};

/// Removes from `dir` every temporary whose builder is gone, and returns them. `guard` names the
/// lock that guards a temporary of a stem, if one does; `held` is the lock this process holds,
/// which keeps every other builder out of what it guards. Best effort: what cannot be read or
/// removed stays.
pub(crate) fn dead_temporaries(dir: &Path, guard: impl Fn(&str) -> Option<PathBuf>, held: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let names: Vec<String> = entries.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    let dead = names.iter().filter(|name| {
        fsutil::temporary_owner(name).is_some_and(|(stem, pid)| {
            !is_alive(pid) && guard(stem).is_none_or(|lock| lock == held || lock::is_free(&lock))
        })
    });
    dead.map(|name| dir.join(name)).filter(|path| fsutil::remove_path(path).is_ok()).collect()
}

/// Whether process `pid` exists (a zombie too); signal 0 asks without sending anything.
#[cfg(unix)]
fn is_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    let answered = unsafe { libc::kill(pid, 0) } == 0;
    // EPERM: it exists, as another user's.
    answered || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Without a way to ask, every builder counts as alive: nothing is removed by its pid.
#[cfg(not(unix))]
fn is_alive(_: u32) -> bool {
    true
}

/// The pid of a process that has ended (tests of what sweeps).
#[cfg(test)]
pub(crate) fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_dead_builders_left_is_removed_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let locks = dir.path().join("locks");
        std::fs::create_dir(&locks).unwrap();
        let lock_of = |stem: &str| locks.join(format!("{stem}.lock"));
        let (dead, own) = (dead_pid(), std::process::id());
        let held = lock_of("held");
        let _held = lock::acquire(&held, "the sweeper's key", None).unwrap();
        let _building = lock::acquire(&lock_of("building"), "another key", None).unwrap();
        let garbage = [format!(".tmp-dead-{dead}"), format!(".tmp-held-{dead}")];
        let kept = [
            format!(".tmp-live-{own}"),
            format!(".tmp-building-{dead}"), // its lock is held: another pid namespace's builder
            "0a1b2c".to_owned(),             // an entry
            "0a1b2c.lock".to_owned(),
            ".tmp-odd-name".to_owned(),
        ];
        for name in garbage.iter().chain(&kept) {
            std::fs::create_dir_all(dir.path().join(name).join("sub")).unwrap();
        }
        std::fs::write(dir.path().join(format!(".tmp-file-{dead}")), "").unwrap();
        let mut swept = dead_temporaries(dir.path(), |stem| Some(lock_of(stem)), &held);
        swept.sort();
        let mut expected: Vec<PathBuf> = garbage.iter().map(|n| dir.path().join(n)).collect();
        expected.push(dir.path().join(format!(".tmp-file-{dead}")));
        expected.sort();
        assert_eq!(swept, expected);
        for name in &kept {
            assert!(dir.path().join(name).exists(), "{name} was removed");
        }
        assert!(expected.iter().all(|p| !p.exists()));
    }

    #[test]
    fn unguarded_temporaries_go_by_their_pid() {
        let dir = tempfile::tempdir().unwrap();
        let (dead, own) = (format!(".tmp-v.toml-{}", dead_pid()), format!(".tmp-w.toml-{}", std::process::id()));
        for name in [&dead, &own] {
            std::fs::write(dir.path().join(name), "").unwrap();
        }
        let swept = dead_temporaries(dir.path(), |_| None, Path::new("/nonexistent.lock"));
        assert_eq!(swept, [dir.path().join(&dead)]);
        assert!(dir.path().join(&own).exists());
    }
}
