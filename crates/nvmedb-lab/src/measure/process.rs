//! Server child processes: started, waited for until they say they are ready, stopped, and
//! never left behind.
//!
//! Owns: [`ChildProcess`] and [`free_port`]. Invariants: a process is reported started only
//! once a line of its output said it is ready; its stdout and stderr are drained continuously
//! (a full pipe would stall it) and its last lines are kept for error messages; one dropped
//! without a clean stop gets its drop signal, then SIGKILL after 30 s, and is waited for.

use crate::error::{LabError, Result};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a server may take to start or stop.
const START_TIMEOUT: Duration = Duration::from_secs(120);
const STOP_TIMEOUT: Duration = Duration::from_secs(120);

/// Reads `stream` line by line in a thread: the first line `ready` accepts is sent on `tx`,
/// the last 20 lines are kept in `tail`.
fn drain(
    stream: impl Read + Send + 'static,
    ready: fn(&str) -> Option<String>,
    tx: Sender<String>,
    tail: Arc<Mutex<VecDeque<String>>>,
) {
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stream).lines().map_while(std::result::Result::ok) {
            if !sent {
                if let Some(v) = ready(&line) {
                    sent = tx.send(v).is_ok();
                }
            }
            let mut q = tail.lock().unwrap_or_else(|p| p.into_inner());
            if q.len() == 20 {
                q.pop_front();
            }
            q.push_back(line);
        }
    });
}

/// A free TCP port on loopback (bound and released: another process could take it first, in
/// which case the server fails to start with an error saying so).
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(LabError::io("127.0.0.1:0", "bind a free port on"))?;
    l.local_addr().map(|a| a.port()).map_err(LabError::io("127.0.0.1:0", "read the port of"))
}

/// A server child process whose output (stdout and stderr) is drained by two threads, its
/// last lines kept for error messages.
#[derive(Debug)]
pub struct ChildProcess {
    name: &'static str,
    child: Child,
    tail: Arc<Mutex<VecDeque<String>>>,
    /// Signal sent when dropped without a clean stop.
    drop_signal: i32,
}

impl ChildProcess {
    /// Spawns `cmd` and waits until a line it prints (on stdout or stderr) gives `ready` a
    /// value (the address or port it listens on).
    pub fn spawn(
        name: &'static str,
        mut cmd: Command,
        ready: fn(&str) -> Option<String>,
        drop_signal: i32,
    ) -> Result<(Self, String)> {
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| LabError::tool(name, format!("cannot start: {e}")))?;
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let (tx, rx) = channel();
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        drain(stdout, ready, tx.clone(), tail.clone());
        drain(stderr, ready, tx, tail.clone());
        let mut p = ChildProcess { name, child, tail, drop_signal };
        let v = p.wait_ready(&rx)?;
        Ok((p, v))
    }

    fn wait_ready(&mut self, rx: &Receiver<String>) -> Result<String> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(v) => return Ok(v),
                Err(_) if Instant::now() > deadline => {
                    return Err(LabError::tool(
                        self.name,
                        format!(
                            "not ready after {} s; its last output:\n{}",
                            START_TIMEOUT.as_secs(),
                            self.tail()
                        ),
                    ))
                }
                Err(_) => {
                    if let Ok(Some(status)) = self.child.try_wait() {
                        // Let the reader thread take the last lines.
                        std::thread::sleep(Duration::from_millis(100));
                        return Err(LabError::tool(
                            self.name,
                            format!("exited with {status} while starting; its last output:\n{}", self.tail()),
                        ));
                    }
                }
            }
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its last lines of output, indented (for an error message).
    pub fn tail(&self) -> String {
        let q = self.tail.lock().unwrap_or_else(|p| p.into_inner());
        q.iter().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n")
    }

    /// Sends `signal` and waits for the exit; an exit status other than success is an error.
    pub fn stop(mut self, signal: i32) -> Result<()> {
        // SAFETY: kill with a pid this value owns (its child has not been waited for yet).
        unsafe { libc::kill(self.child.id() as i32, signal) };
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) if status.success() => return Ok(()),
                Ok(Some(status)) => {
                    return Err(LabError::tool(
                        self.name,
                        format!("exited with {status} when asked to stop; its last output:\n{}", self.tail()),
                    ))
                }
                Ok(None) if Instant::now() > deadline => {
                    return Err(LabError::tool(
                        self.name,
                        format!("still running {} s after it was asked to stop", STOP_TIMEOUT.as_secs()),
                    ))
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(LabError::tool(self.name, format!("cannot wait for it: {e}"))),
            }
        }
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: as in `stop`.
            unsafe { libc::kill(self.child.id() as i32, self.drop_signal) };
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
