//! The child-process kill loop: a test re-runs its own binary as a child (one test function,
//! selected by name, that does its work only when [`CHILD_ENV`] is set), reads the lines the
//! child prints (its acknowledgements), and kills it with SIGKILL at a moment of its choosing.
//!
//! Invariants: a child that stops printing for the stall time is killed and reported (a hang
//! never hangs the suite); a child that exits by itself before it is killed (a panic, an
//! error) is a failure, not a kill; every line the child printed before it died is passed on,
//! including those still in the pipe when it was killed.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

/// How long a child may print nothing before [`KillChild::kill_after`] takes it for hung.
pub const STALL: Duration = Duration::from_secs(120);

/// Set in a child's environment: the role the parent gave it (often a directory).
pub const CHILD_ENV: &str = "NVMEDB_TEST_CHILD";

/// The role given by the parent when this process is a child, `None` in a normal test run.
pub fn child_role() -> Option<String> {
    std::env::var(CHILD_ENV).ok()
}

/// A running child process of this test binary.
pub struct KillChild {
    child: std::process::Child,
    lines: Receiver<String>,
    /// Kept open so a child waiting on stdin stays alive until it is killed.
    _stdin: Option<std::process::ChildStdin>,
}

/// Starts test `test_name` of this binary as a child with role `role` and the extra
/// environment `envs`.
pub fn spawn(test_name: &str, role: &str, envs: &[(&str, String)]) -> KillChild {
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = Command::new(exe);
    cmd.args([test_name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, role)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn child test process");
    let stdout = child.stdout.take().expect("child stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(strip_harness_prefix(line)).is_err() {
                break;
            }
        }
    });
    let stdin = child.stdin.take();
    KillChild { child, lines: rx, _stdin: stdin }
}

impl KillChild {
    /// The child's process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Passes each line the child prints to `f` until `f` returns true. Fails if the child
    /// exits first, or prints nothing for `stall` (then it is killed).
    pub fn read_until(&mut self, stall: Duration, mut f: impl FnMut(&str) -> bool) -> Result<(), String> {
        loop {
            match self.lines.recv_timeout(stall) {
                Ok(line) => {
                    if f(&line) {
                        return Ok(());
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    dump_stacks(self.child.id());
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return Err(format!(
                        "child {} printed nothing for {stall:?}; killed it",
                        self.child.id()
                    ));
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait().map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
                    return Err(format!("child {} exited by itself ({status})", self.child.id()));
                }
            }
        }
    }

    /// Passes each line the child prints to `note`, which returns how many acknowledgements it
    /// has counted; once that reaches `n`, kills the child with SIGKILL and passes on the lines
    /// still in the pipe. Fails as [`read_until`](Self::read_until) (stall: [`STALL`]) and
    /// [`kill`](Self::kill) do.
    pub fn kill_after<N: PartialOrd>(mut self, n: N, mut note: impl FnMut(&str) -> N) -> Result<(), String> {
        self.read_until(STALL, |l| note(l) >= n)?;
        self.kill(|l| {
            note(l);
        })
    }

    /// Kills the child with SIGKILL, then passes the lines still in the pipe to `f`. Fails if
    /// the child had already exited by itself.
    pub fn kill(mut self, mut f: impl FnMut(&str)) -> Result<(), String> {
        if let Ok(Some(status)) = self.child.try_wait() {
            for line in self.lines.try_iter() {
                f(&line);
            }
            return Err(format!("child {} exited by itself before the kill ({status})", self.child.id()));
        }
        self.child.kill().map_err(|e| format!("SIGKILL child {}: {e}", self.child.id()))?;
        let status = self.child.wait().map_err(|e| format!("wait for child: {e}"))?;
        // The reader thread ends when the pipe closes, which it does now that the child died.
        for line in self.lines.iter() {
            f(&line);
        }
        use std::os::unix::process::ExitStatusExt;
        match status.signal() {
            Some(9) => Ok(()),
            _ => Err(format!("child {} ended with {status}, not by the kill", self.child.id())),
        }
    }
}

/// The test harness prints `test <name> ... ` without a newline when the child's test starts,
/// so the child's first line arrives glued to it: give the child's own text only.
fn strip_harness_prefix(line: String) -> String {
    match line.strip_prefix("test ").and_then(|rest| rest.find(" ... ").map(|i| i + 5 + " ... ".len())) {
        Some(at) => line[at..].to_string(),
        None => line,
    }
}

/// Prints every thread's stack of a hung child to stderr, if gdb is installed (best effort).
fn dump_stacks(pid: u32) {
    let out = Command::new("gdb")
        .args(["-p", &pid.to_string(), "-batch", "-ex", "thread apply all bt"])
        .stdin(Stdio::null())
        .output();
    if let Ok(out) = out {
        eprintln!("stacks of the hung child {pid}:\n{}", String::from_utf8_lossy(&out.stdout));
    }
}
