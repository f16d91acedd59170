//! Child processes (rustc, ptxas, rustup, nvdisasm) die with this process. A JIT killed on its
//! own (`kill -9 PID`, not its process group) would otherwise leave its rustc running, orphaned:
//! it goes on writing into a temporary directory that the next build has already swept away, and
//! that directory then stays.
//!
//! On Linux each child asks the kernel, between fork and exec, for SIGKILL when its parent ends
//! (`PR_SET_PDEATHSIG`). The kernel sends it when the *thread* that spawned the child ends; every
//! spawn here waits for its child on the spawning thread (`Command::output`), so that is when the
//! process ends. Other systems have no such call: there a child outlives a killed JIT.

use std::ffi::OsStr;
use std::process::Command;

/// `Command::new(program)`, whose process dies with this one (on Linux).
pub(crate) fn command(program: impl AsRef<OsStr>) -> Command {
    let mut command = Command::new(program);
    dies_with_this_process(&mut command);
    command
}

#[cfg(target_os = "linux")]
fn dies_with_this_process(command: &mut Command) {
    linux::dies_with(command, std::process::id() as libc::pid_t);
}

#[cfg(not(target_os = "linux"))]
fn dies_with_this_process(_: &mut Command) {}

#[cfg(target_os = "linux")]
mod linux {
    use std::io;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    /// Makes `command`'s process die with process `parent`, which must be the one spawning it.
    pub(super) fn dies_with(command: &mut Command, parent: libc::pid_t) {
        // SAFETY: the hook runs between fork and exec, where only async-signal-safe calls are
        // allowed: it makes two system calls and allocates nothing.
        unsafe { command.pre_exec(move || die_with(parent)) };
    }

    /// In the child, before exec: SIGKILL when the parent ends, and an error (so the spawn fails)
    /// if `parent` has ended already.
    fn die_with(parent: libc::pid_t) -> io::Result<()> {
        // SAFETY: system calls on this process only. prctl reads its argument as an unsigned long.
        if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // A parent that died between fork and prctl sends no signal: the child has been handed to
        // another process (init, a subreaper), so its parent's pid is no longer `parent`.
        // SAFETY: getppid cannot fail.
        if unsafe { libc::getppid() } != parent {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        Ok(())
    }

    #[cfg(test)]
    mod tests {
        use std::io::{BufRead, BufReader};
        use std::process::Stdio;
        use std::time::{Duration, Instant};

        use super::*;

        const MIDDLE_VAR: &str = "FERRINFER_TEST_CHILD_MIDDLE";

        /// Middle side of the test below (a no-op unless that test started this process): starts
        /// a long `sleep` as the JIT starts rustc, says its pid, and waits for it.
        #[test]
        fn middle_process() {
            if std::env::var_os(MIDDLE_VAR).is_none() {
                return;
            }
            let mut sleeper = super::super::command("sleep").arg("600").spawn().unwrap();
            println!("SLEEPER {}", sleeper.id());
            sleeper.wait().unwrap();
        }

        #[test]
        fn a_child_dies_when_its_parent_alone_is_killed() {
            let mut middle = Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "child::linux::tests::middle_process", "--nocapture", "--test-threads=1"])
                .env(MIDDLE_VAR, "1")
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let stdout = BufReader::new(middle.stdout.take().unwrap());
            let said = stdout.lines().map_while(Result::ok).find_map(|l| Some(l.split("SLEEPER ").nth(1)?.to_owned()));
            let sleeper: u32 = said.expect("the middle process names its child").trim().parse().unwrap();
            middle.kill().unwrap(); // SIGKILL to the middle process only, not to its group
            middle.wait().unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            while is_running(sleeper) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if is_running(sleeper) {
                let _ = Command::new("kill").args(["-s", "KILL", &sleeper.to_string()]).status();
                panic!("the child {sleeper} outlived its killed parent");
            }
        }

        #[test]
        fn a_child_whose_parent_has_ended_does_not_run() {
            let mut command = Command::new("true");
            dies_with(&mut command, libc::pid_t::MAX);
            let err = command.status().unwrap_err();
            assert_eq!(err.raw_os_error(), Some(libc::ESRCH), "{err}");
        }

        /// Whether process `pid` exists and is not a zombie (dead, waiting to be reaped).
        fn is_running(pid: u32) -> bool {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next());
            state.is_some_and(|s| s != 'Z')
        }
    }
}
