//! Exclusive OS file locks (std's `File::lock`, `flock` on Unix): the OS drops one when its
//! process dies, so a killed builder never leaves a stale lock. A live holder that stops (a
//! SIGSTOP, a debugger, a slow disk) would make everyone else wait in silence, so each holder
//! writes its pid and command line into the lock file, and a process that waits longer than
//! [`FIRST_NOTICE`] says on stderr — always, not only when verbose — whom it waits for, then
//! again every [`REPEAT_NOTICE`] until it has the lock. A waiter given a limit
//! (`FERRINFER_JIT_WAIT_SECS`) gives up after it, naming the holder.

use std::fs::{File, TryLockError};
use std::io::{self, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::config::WAIT_SECS_VAR;

/// How long a process waits for a lock before saying so.
pub const FIRST_NOTICE: Duration = Duration::from_secs(3);
/// How often it says so again while it keeps waiting.
pub const REPEAT_NOTICE: Duration = Duration::from_secs(5);
/// How often a waiter with a limit tries the lock (the OS has no timed `flock`).
const POLL: Duration = Duration::from_millis(50);

/// A held lock; dropping it releases the lock.
#[derive(Debug)]
pub struct Held {
    _file: File,
}

/// Why a lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("{path} is a directory, where the lock file for {what} belongs; remove it (`rm -r {path}`)")]
    Directory { path: PathBuf, what: String },
    #[error("cannot lock {path} ({source})")]
    Io { path: PathBuf, source: io::Error },
    #[error(
        "gave up waiting for {what} after {} s ({WAIT_SECS_VAR}): {path} is locked by {holder}; let that process finish, end it if it is stuck, or raise {WAIT_SECS_VAR} (unset: wait as long as it takes)",
        limit.as_secs_f64()
    )]
    TimedOut { path: PathBuf, what: String, holder: String, limit: Duration },
}

/// Takes the exclusive lock of `path` (created if missing), waiting visibly while another
/// process holds it: at most `limit`, or as long as it takes. `what` names what the lock
/// protects, for the waiting notices and errors.
pub fn acquire(path: &Path, what: &str, limit: Option<Duration>) -> Result<Held, LockError> {
    let file = File::options().create(true).truncate(false).read(true).write(true).open(path).map_err(|source| {
        if path.is_dir() {
            LockError::Directory { path: path.to_owned(), what: what.to_owned() }
        } else {
            LockError::Io { path: path.to_owned(), source }
        }
    })?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => wait(&file, path, what, limit)?,
        Err(TryLockError::Error(source)) => return Err(LockError::Io { path: path.to_owned(), source }),
    }
    // Best effort: a holder that cannot describe itself still holds the lock.
    let _ = record_holder(&file);
    Ok(Held { _file: file })
}

/// Whether no process holds the lock of `path` (none does of a missing file). It is taken and
/// dropped at once, and nothing is written; this process's own locks count as held.
pub(crate) fn is_free(path: &Path) -> bool {
    match File::open(path) {
        Ok(file) => file.try_lock().is_ok(),
        Err(e) => e.kind() == io::ErrorKind::NotFound,
    }
}

/// Waits for the lock (at most `limit`) while [`Notices`] say who holds it.
fn wait(file: &File, path: &Path, what: &str, limit: Option<Duration>) -> Result<(), LockError> {
    let started = Instant::now();
    let notices = Notices::start(path, what, started);
    let locked = match limit {
        None => file.lock().map_err(|source| LockError::Io { path: path.to_owned(), source }),
        Some(limit) => wait_at_most(file, path, what, limit),
    };
    notices.stop();
    if locked.is_ok() && started.elapsed() >= FIRST_NOTICE {
        eprintln!("ferrinfer-jit: got the lock for {what} after {:.1} s", started.elapsed().as_secs_f64());
    }
    locked
}

/// Tries the lock every [`POLL`] until `limit` has passed, then gives up naming its holder.
fn wait_at_most(file: &File, path: &Path, what: &str, limit: Duration) -> Result<(), LockError> {
    let deadline = Instant::now() + limit;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(()),
            Err(TryLockError::Error(source)) => return Err(LockError::Io { path: path.to_owned(), source }),
            Err(TryLockError::WouldBlock) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    let (path, what, holder) = (path.to_owned(), what.to_owned(), holder(path));
                    return Err(LockError::TimedOut { path, what, holder, limit });
                }
                std::thread::sleep(left.min(POLL));
            }
        }
    }
}

/// A thread that says on stderr whom a waiter waits for, first after [`FIRST_NOTICE`].
struct Notices {
    done: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Notices {
    fn start(path: &Path, what: &str, started: Instant) -> Self {
        let (done, finished) = mpsc::channel::<()>();
        let (path, what) = (path.to_owned(), what.to_owned());
        let thread = std::thread::spawn(move || {
            let mut timeout = FIRST_NOTICE;
            while finished.recv_timeout(timeout) == Err(RecvTimeoutError::Timeout) {
                eprintln!(
                    "ferrinfer-jit: still waiting after {:.0} s for {what}: {} is locked by {}",
                    started.elapsed().as_secs_f64(),
                    path.display(),
                    holder(&path)
                );
                timeout = REPEAT_NOTICE;
            }
        });
        Notices { done, thread }
    }

    fn stop(self) {
        let _ = self.done.send(());
        let _ = self.thread.join();
    }
}

/// `pid 123 (cargo test ...)`, as the holder wrote it into the lock file.
pub fn holder(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut lines = text.lines();
    match (lines.next().and_then(|l| l.strip_prefix("pid ")), lines.next()) {
        (Some(pid), command) => {
            let command = command_line(pid).or(command.map(str::to_owned)).unwrap_or_else(|| "command unknown".into());
            format!("pid {pid} ({command})")
        }
        (None, _) => "a process that has not written its pid yet".into(),
    }
}

/// The live command line of process `pid`, where the OS shows it (`/proc`).
fn command_line(pid: &str) -> Option<String> {
    let raw = std::fs::read(PathBuf::from("/proc").join(pid.trim()).join("cmdline")).ok()?;
    let args: Vec<String> =
        raw.split(|b| *b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
    (!args.is_empty()).then(|| args.join(" "))
}

/// Writes `pid N` and this process's command line into the (locked) file.
fn record_holder(mut file: &File) -> io::Result<()> {
    let command: Vec<String> = std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect();
    file.set_len(0)?;
    file.rewind()?;
    write!(file, "pid {}\n{}\n", std::process::id(), command.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holder_is_recorded_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.lock");
        let held = acquire(&path, "a test", None).unwrap();
        let named = holder(&path);
        assert!(named.starts_with(&format!("pid {} (", std::process::id())), "{named}");
        drop(held);
        std::fs::write(&path, "").unwrap();
        assert_eq!(holder(&path), "a process that has not written its pid yet");
    }

    #[test]
    fn a_waiter_with_a_limit_gives_up_naming_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.lock");
        let _held = acquire(&path, "a test", None).unwrap();
        // flock is per open file: this process's second open of the file waits like another's.
        let started = Instant::now();
        let err = acquire(&path, "kernel module `m`", Some(Duration::from_millis(300))).unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(300), "it gave up early");
        assert!(matches!(err, LockError::TimedOut { .. }), "{err}");
        let message = err.to_string();
        for needle in [
            "gave up waiting for kernel module `m` after 0.3 s",
            &format!("is locked by pid {} (", std::process::id()),
            "FERRINFER_JIT_WAIT_SECS",
        ] {
            assert!(message.contains(needle), "{message:?} lacks {needle:?}");
        }
    }

    #[test]
    fn a_waiter_with_a_limit_gets_a_lock_released_in_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.lock");
        let held = acquire(&path, "a test", None).unwrap();
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            drop(held);
        });
        acquire(&path, "a test", Some(Duration::from_secs(30))).unwrap();
        release.join().unwrap();
    }

    #[test]
    fn a_directory_in_place_of_the_lock_file_is_named_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.lock");
        std::fs::create_dir(&path).unwrap();
        let err = acquire(&path, "kernel module `m`", None).unwrap_err();
        assert!(matches!(err, LockError::Directory { .. }), "{err}");
        let message = err.to_string();
        assert!(message.contains("is a directory, where the lock file for kernel module `m` belongs"), "{message}");
        assert!(message.contains(&format!("rm -r {}", path.display())), "{message}");
    }

    #[test]
    fn a_lock_is_free_unless_some_open_file_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.lock");
        assert!(is_free(&path), "no file, no holder");
        let held = acquire(&path, "a test", None).unwrap();
        assert!(!is_free(&path), "held by this process");
        drop(held);
        assert!(is_free(&path));
        assert!(is_free(&path), "checking takes the lock and lets go of it");
    }
}
