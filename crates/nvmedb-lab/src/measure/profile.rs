//! CPU profiles of a measured window: `perf record` attached to this process, sampling only
//! while the window is open.
//!
//! Owns: [`Profiler`] (starts `perf record -p <this pid>` with its events disabled, enables them
//! when the window opens and disables them when it closes, through perf's control FIFOs, so
//! set-up, warm-up and the consistency checks never reach the profile) and [`folded_stacks`]
//! (`perf script` folded into one line per distinct stack by `inferno`, what the flame graph
//! and the top-function table in `report::flame` are drawn from).
//!
//! Invariants: samples come only from between [`Profiler::enable`] and [`Profiler::disable`]
//! (each returns only once perf has acknowledged the command); a missing or failing `perf` is a
//! [`LabError::Tool`] that says how to install it, never a silent empty profile; the FIFOs are
//! removed when the profiler is finished or dropped. Call stacks are unwound from DWARF
//! (`--call-graph dwarf`): release builds keep line tables (`debug = 1`) but no frame pointers.

use crate::error::{LabError, Result};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Samples per second per CPU: enough for a few thousand samples in a window of seconds, few
/// enough that unwinding them stays a small share of the machine.
pub const SAMPLE_HZ: u32 = 499;

/// How many times a perf that exits before the first window is started ([`Profiler::enable`]).
pub const ATTACH_ATTEMPTS: u32 = 3;

/// How long perf may take to start or to acknowledge a command before the profile fails.
const PERF_TIMEOUT: Duration = Duration::from_secs(60);

/// `perf record` attached to this process (see the module comment).
pub struct Profiler {
    child: Option<Child>,
    ctl: Option<File>,
    ack: BufReader<File>,
    data: PathBuf,
    fifos: [PathBuf; 2],
    enabled_for: Duration,
    enabled_at: Option<Instant>,
}

fn tool_err(detail: String) -> LabError {
    LabError::Tool { tool: "perf record (CPU profile of the measured window)".into(), detail }
}

fn io_err(path: &Path, action: &'static str) -> impl FnOnce(std::io::Error) -> LabError {
    let path = path.to_path_buf();
    move |source| LabError::Io { path, action, source }
}

/// True when `perf` can be run.
pub fn perf_installed() -> bool {
    Command::new("perf").arg("--version").output().is_ok_and(|o| o.status.success())
}

/// Whether perf can sample here: `perf record -e cpu-clock` of `true`. Installed is not enough:
/// a container or a `kernel.perf_event_paranoid` setting may forbid `perf_event_open`. The
/// error is perf's own explanation.
pub fn perf_can_sample() -> std::result::Result<(), String> {
    let data = std::env::temp_dir().join(format!("nvmedb-perf-probe-{}.data", std::process::id()));
    let out = Command::new("perf")
        .args(["record", "-e", "cpu-clock", "-o"])
        .arg(&data)
        .args(["--", "true"])
        .stdin(Stdio::null())
        .output();
    let _ = std::fs::remove_file(&data);
    match out {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => {
            Err(format!("perf record failed ({}): {}", o.status, String::from_utf8_lossy(&o.stderr).trim()))
        }
        Err(e) => Err(format!("could not run perf: {e}")),
    }
}

fn mkfifo(path: &Path) -> Result<()> {
    let _ = std::fs::remove_file(path);
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| tool_err(format!("{} holds a NUL byte", path.display())))?;
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
        return Err(io_err(path, "create a FIFO for perf's control")(std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Waits until `fd` is readable, at most `timeout`.
fn wait_readable(fd: i32, timeout: Duration) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: `p` is one valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut p, 1, timeout.as_millis() as i32) > 0 }
}

impl Profiler {
    /// Starts `perf record` on this process with its events disabled, writing `data` (perf's
    /// output file; its FIFOs and log sit beside it).
    pub fn attach(data: &Path) -> Result<Self> {
        if !perf_installed() {
            return Err(tool_err(
                "`perf` is not installed (Debian: apt-get install linux-perf); the profile needs it".into(),
            ));
        }
        let fifos = [data.with_extension("ctl"), data.with_extension("ack")];
        for f in &fifos {
            mkfifo(f)?;
        }
        // The acknowledgement FIFO is opened for reading first (non-blocking: no writer yet), so
        // perf's open of it for writing does not block.
        let ack = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifos[1])
            .map_err(io_err(&fifos[1], "open perf's acknowledgement FIFO"))?;
        let log_path = data.with_extension("log");
        let log = File::create(&log_path).map_err(io_err(&log_path, "create perf's log"))?;
        let child = Command::new("perf")
            // cpu-clock, a software event: machines whose virtual CPUs count no cycles (perf's
            // default event) still sample it.
            .args([
                "record",
                "-e",
                "cpu-clock",
                "-F",
                &SAMPLE_HZ.to_string(),
                "--call-graph",
                "dwarf,16384",
                "-D",
                "-1",
            ])
            .arg("--control")
            .arg(format!("fifo:{},{}", fifos[0].display(), fifos[1].display()))
            .args(["-p", &std::process::id().to_string(), "-o"])
            .arg(data)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(io_err(&log_path, "duplicate perf's log"))?)
            .stderr(log)
            .spawn()
            .map_err(|e| tool_err(format!("could not start perf: {e}")))?;
        let mut p = Self {
            child: Some(child),
            ctl: None,
            ack: BufReader::new(ack),
            data: data.to_path_buf(),
            fifos,
            enabled_for: Duration::ZERO,
            enabled_at: None,
        };
        // The control FIFO opens for writing once perf has opened it for reading.
        let start = Instant::now();
        loop {
            match std::fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(&p.fifos[0]) {
                Ok(f) => {
                    p.ctl = Some(f);
                    break;
                }
                Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {}
                Err(e) => return Err(io_err(&p.fifos[0], "open perf's control FIFO")(e)),
            }
            if let Some(status) = p.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                return Err(tool_err(format!("perf exited at start ({status}): {}", p.log_tail())));
            }
            if start.elapsed() > PERF_TIMEOUT {
                return Err(tool_err(format!("perf did not open its control FIFO: {}", p.log_tail())));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(p)
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.data.with_extension("log")).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(5).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
    }

    fn command(&mut self, cmd: &str) -> Result<()> {
        let ctl = self.ctl.as_mut().ok_or_else(|| tool_err("perf's control FIFO is closed".into()))?;
        ctl.write_all(format!("{cmd}\n").as_bytes())
            .map_err(io_err(&self.fifos[0], "write to perf's control FIFO"))?;
        let deadline = Instant::now() + PERF_TIMEOUT;
        let mut line = String::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !wait_readable(self.ack.get_ref().as_raw_fd(), left) {
                return Err(tool_err(format!("perf did not acknowledge `{cmd}`: {}", self.log_tail())));
            }
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                return Err(tool_err(format!(
                    "perf exited ({status}) before acknowledging `{cmd}`: {}",
                    self.log_tail()
                )));
            }
            match self.ack.read_line(&mut line) {
                Ok(_) if line.ends_with('\n') => break,
                // End of file: perf closed its end; the exit check above names why.
                Ok(0) => std::thread::sleep(Duration::from_millis(5)),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(io_err(&self.fifos[1], "read perf's acknowledgement")(e)),
            }
        }
        // perf ends its answer with a NUL byte, which the next answer's line starts with.
        let answer = line.trim_matches(|c: char| c.is_whitespace() || c == '\0');
        if answer != "ack" {
            return Err(tool_err(format!("perf answered `{answer}` to `{cmd}`")));
        }
        Ok(())
    }

    /// Starts sampling; returns once perf has acknowledged.
    ///
    /// perf attaches to each thread this process has when it starts, and a thread that exits
    /// meanwhile can make it give up ("Ignored open failure for pid …", then exit 255). A perf
    /// that exited before the first window is attached again (nothing was sampled yet, so
    /// nothing is lost), up to [`ATTACH_ATTEMPTS`] times in all.
    pub fn enable(&mut self) -> Result<()> {
        let mut attempts = 1;
        loop {
            match self.command("enable") {
                Ok(()) => break,
                Err(_) if attempts < ATTACH_ATTEMPTS && self.never_enabled() && self.perf_exited() => {
                    attempts += 1;
                    let data = self.data.clone();
                    self.release();
                    *self = Self::attach(&data)?;
                }
                Err(e) => return Err(e),
            }
        }
        self.enabled_at = Some(Instant::now());
        Ok(())
    }

    fn never_enabled(&self) -> bool {
        self.enabled_at.is_none() && self.enabled_for.is_zero()
    }

    fn perf_exited(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| c.try_wait().ok().flatten().is_some())
    }

    /// Stops perf and removes the FIFOs (their paths are forgotten, so a profiler attached
    /// again at the same paths keeps its own).
    fn release(&mut self) {
        self.ctl = None;
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for f in &mut self.fifos {
            let _ = std::fs::remove_file(&*f);
            *f = PathBuf::new();
        }
    }

    /// Stops sampling; returns once perf has acknowledged.
    pub fn disable(&mut self) -> Result<()> {
        self.command("disable")?;
        if let Some(t) = self.enabled_at.take() {
            self.enabled_for += t.elapsed();
        }
        Ok(())
    }

    /// Time the events were enabled.
    pub fn sampled(&self) -> Duration {
        self.enabled_for
    }

    /// Stops perf (it writes its data file on SIGINT) and returns the data file.
    pub fn finish(mut self) -> Result<PathBuf> {
        self.ctl = None;
        let mut child = self.child.take().ok_or_else(|| tool_err("perf already finished".into()))?;
        // SAFETY: signalling our own child by its pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let status = child.wait().map_err(|e| tool_err(format!("waiting for perf: {e}")))?;
        if !self.data.exists() {
            return Err(tool_err(format!(
                "perf ended ({status}) without writing {}: {}",
                self.data.display(),
                self.log_tail()
            )));
        }
        Ok(self.data.clone())
    }
}

impl Drop for Profiler {
    fn drop(&mut self) {
        self.release();
    }
}

/// The samples of a perf data file as folded stacks (`frame;frame;… count`, root first), one
/// line per distinct stack, by `perf script` and `inferno`'s perf collapser.
pub fn folded_stacks(data: &Path) -> Result<Vec<String>> {
    use inferno::collapse::perf::{Folder, Options};
    use inferno::collapse::Collapse;
    let mut child = Command::new("perf")
        .args(["script", "--no-inline", "-F", "comm,tid,period,event,ip,sym,dso", "-i"])
        .arg(data)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| tool_err(format!("could not start perf script: {e}")))?;
    let mut out = Vec::new();
    let stdout = child.stdout.take().ok_or_else(|| tool_err("perf script has no output".into()))?;
    let mut opts = Options::default();
    opts.include_tid = false;
    opts.annotate_kernel = true;
    let fold = Folder::from(opts).collapse(BufReader::new(stdout), &mut out);
    let status = child.wait().map_err(|e| tool_err(format!("waiting for perf script: {e}")))?;
    fold.map_err(|e| tool_err(format!("folding perf script's output of {}: {e}", data.display())))?;
    if !status.success() {
        return Err(tool_err(format!("perf script -i {} failed ({status})", data.display())));
    }
    let mut text = String::new();
    out.as_slice().read_to_string(&mut text).map_err(|e| tool_err(format!("perf script's output: {e}")))?;
    Ok(text.lines().map(str::to_string).collect())
}
