//! The two servers `lab pgbench` compares: a private PostgreSQL 15 cluster and an `nvmedb serve`,
//! each a child process over a directory in the run's scratch directory.
//!
//! Owns: finding PostgreSQL's programs ([`PgBins`]), running them as the `postgres` user when the
//! lab runs as root (PostgreSQL refuses root), `initdb`, starting and stopping both servers
//! ([`Postgres`], [`Nvmedb`]), their CPU clocks ([`Postgres::cpu_ns_after`] waits for ended
//! backends to be counted), their loaded data ([`loaded_bytes`]), how much of their files the
//! OS page cache holds ([`page_cache_bytes`]), a client's error with a server's last output
//! ([`with_tail`]), and [`Scratch`], the directory that holds both data directories. Invariants: a server is reported started only once it has said it accepts
//! connections (`measure::process`: its output is drained, its last lines kept for error
//! messages); a server dropped without a clean stop is shut down
//! immediately (PostgreSQL) or killed (nvmedb), and [`Scratch`] deletes its directory when
//! dropped, so a failed run leaves no process and no data behind.

use crate::error::{LabError, Result};
use crate::files::dir_bytes;
use crate::measure::process::{free_port, ChildProcess};
use crate::measure::{pid_cpu_ns, tree_cpu_ns};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// How to install what is missing (Debian 12 packages).
pub const INSTALL_HINT: &str =
    "install PostgreSQL 15 (Debian 12: apt-get install postgresql-15 postgresql-client-15) or point --pg-bin at its bin directory";

/// PostgreSQL's programs in one directory, and their version.
#[derive(Debug, Clone)]
pub struct PgBins {
    /// The directory (`/usr/lib/postgresql/15/bin` on Debian).
    pub dir: PathBuf,
    /// `postgres --version`, e.g. "postgres (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)".
    pub version: String,
}

impl PgBins {
    /// The programs the experiment runs.
    pub const PROGRAMS: [&'static str; 3] = ["initdb", "postgres", "pgbench"];

    /// Finds initdb, postgres and pgbench in `dir` and checks they are PostgreSQL 15; the error
    /// says how to install them.
    pub fn find(dir: &Path) -> Result<Self> {
        for p in Self::PROGRAMS {
            if !dir.join(p).is_file() {
                return Err(LabError::tool(
                    format!("PostgreSQL's {p}"),
                    format!("{} not found: {INSTALL_HINT}", dir.join(p).display()),
                ));
            }
        }
        let out = Command::new(dir.join("postgres"))
            .arg("--version")
            .output()
            .map_err(|e| LabError::tool("postgres --version", format!("{e}: {INSTALL_HINT}")))?;
        let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !version.contains("PostgreSQL) 15.") {
            return Err(LabError::tool(
                "postgres --version",
                format!("`{version}` is not PostgreSQL 15 (the peer the experiment compares with): {INSTALL_HINT}"),
            ));
        }
        Ok(Self { dir: dir.to_path_buf(), version })
    }

    /// The path of program `name`.
    pub fn program(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// The account PostgreSQL runs as: `None` runs it as the lab's own user; as root, the `postgres`
/// user (PostgreSQL refuses to run as root).
#[derive(Debug, Clone, Copy)]
pub struct RunAs {
    uid: u32,
    gid: u32,
}

impl RunAs {
    /// `None` unless the lab runs as root; as root, the `postgres` user or an error saying so.
    pub fn for_postgres() -> Result<Option<RunAs>> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Ok(None);
        }
        let name = std::ffi::CString::new("postgres").expect("no NUL");
        // SAFETY: getpwnam reads a NUL-terminated name and returns a pointer into static storage
        // (or null), read at once below; the lab makes no other getpw* call concurrently.
        let pw = unsafe { libc::getpwnam(name.as_ptr()) };
        if pw.is_null() {
            return Err(LabError::tool(
                "PostgreSQL",
                format!("refuses to run as root and there is no `postgres` user to run it as: {INSTALL_HINT} (the package creates the user) or run the lab as another user"),
            ));
        }
        // SAFETY: non-null result of getpwnam, read before any other call can overwrite it.
        let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
        Ok(Some(RunAs { uid, gid }))
    }

    /// Makes `dir` (created if missing) the account's, mode 0700 as PostgreSQL requires.
    fn own(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(LabError::io(dir, "create directory"))?;
        std::os::unix::fs::chown(dir, Some(self.uid), Some(self.gid)).map_err(LabError::io(dir, "chown"))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(LabError::io(dir, "chmod 0700"))
    }

    fn apply(self, cmd: &mut Command) {
        cmd.uid(self.uid).gid(self.gid);
    }
}

/// The run's scratch directory: both servers' data. Deleted when dropped (also on error).
#[derive(Debug)]
pub struct Scratch {
    dir: PathBuf,
    /// The root directory this run created (removed too, when empty).
    made_root: Option<PathBuf>,
}

impl Scratch {
    /// Creates `<root>/run-<pid>` (emptied if a run with the same pid left it).
    pub fn create(root: &Path) -> Result<Self> {
        let made_root = (!root.exists()).then(|| root.to_path_buf());
        let dir = root.join(format!("run-{}", std::process::id()));
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(LabError::io(&dir, "remove"))?;
        }
        std::fs::create_dir_all(&dir).map_err(LabError::io(&dir, "create directory"))?;
        let dir = dir.canonicalize().map_err(LabError::io(&dir, "resolve"))?;
        Ok(Self { dir, made_root })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some(root) = &self.made_root {
            // The root too, when this run made it and nothing else is in it.
            let _ = std::fs::remove_dir(root);
        }
    }
}

/// Bytes of the regular files under `dir` (recursively) that are resident in the OS page cache,
/// and their total size (each file mapped and asked with `mincore`; a file that cannot be opened
/// or mapped counts as not resident). PostgreSQL reads through the page cache, nvmedb with
/// O_DIRECT: this says how much of each server's data a miss of its own buffer finds in RAM.
pub fn page_cache_bytes(dir: &Path) -> (u64, u64) {
    let Ok(entries) = std::fs::read_dir(dir) else { return (0, 0) };
    let mut sum = (0, 0);
    for e in entries.filter_map(|e| e.ok()) {
        let (r, t) = match e.file_type() {
            Ok(t) if t.is_dir() => page_cache_bytes(&e.path()),
            Ok(t) if t.is_file() => file_page_cache_bytes(&e.path()),
            _ => (0, 0),
        };
        sum = (sum.0 + r, sum.1 + t);
    }
    sum
}

/// [`page_cache_bytes`] of one file.
fn file_page_cache_bytes(path: &Path) -> (u64, u64) {
    use std::os::fd::AsRawFd;
    let Ok(f) = std::fs::File::open(path) else { return (0, 0) };
    let len = f.metadata().map_or(0, |m| m.len());
    if len == 0 {
        return (0, 0);
    }
    // SAFETY: sysconf reads a constant of the system.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    // SAFETY: a read-only shared mapping of an open file, unmapped below; its memory is never
    // read (mincore only asks the kernel which of its pages are resident).
    let addr = unsafe {
        libc::mmap(std::ptr::null_mut(), len as usize, libc::PROT_READ, libc::MAP_SHARED, f.as_raw_fd(), 0)
    };
    if addr == libc::MAP_FAILED {
        return (0, len);
    }
    let mut vec = vec![0u8; len.div_ceil(page) as usize];
    // SAFETY: `addr` maps `len` bytes; `vec` has one byte per page of them.
    let ok = unsafe { libc::mincore(addr, len as usize, vec.as_mut_ptr()) } == 0;
    // SAFETY: unmaps the mapping made above.
    unsafe { libc::munmap(addr, len as usize) };
    if !ok {
        return (0, len);
    }
    let resident = vec.iter().filter(|&&b| b & 1 != 0).count() as u64 * page;
    (resident.min(len), len)
}

/// Runs a PostgreSQL program to completion; an error carries its output.
fn run_tool(what: String, mut cmd: Command) -> Result<()> {
    let out = cmd.output().map_err(|e| LabError::tool(&what, format!("cannot start: {e}")))?;
    if out.status.success() {
        return Ok(());
    }
    Err(LabError::tool(
        what,
        format!(
            "exited with {}:\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    ))
}

use crate::measure::pgbench::USER;

/// A private PostgreSQL cluster.
#[derive(Debug)]
pub struct Postgres {
    process: ChildProcess,
    /// The TCP port on loopback.
    pub port: u16,
}

impl Postgres {
    /// `initdb` of a new cluster in `pgdata` (superuser [`USER`], trust authentication, UTF8).
    pub fn init(bins: &PgBins, pgdata: &Path, run_as: Option<RunAs>) -> Result<()> {
        if let Some(r) = run_as {
            r.own(pgdata)?;
        }
        let mut cmd = Command::new(bins.program("initdb"));
        cmd.arg("-D").arg(pgdata).args(["-U", USER, "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"]);
        if let Some(r) = run_as {
            r.apply(&mut cmd);
        }
        run_tool(format!("initdb -D {}", pgdata.display()), cmd)
    }

    /// Starts the cluster in `pgdata` on a free loopback port: fsync and synchronous_commit on
    /// (PostgreSQL's defaults, set explicitly), `shared_buffers` as given, autovacuum off
    /// (pgbench vacuums before each run itself; a background vacuum would run during the other
    /// engine's measurement), the socket directory in `pgdata`.
    pub fn start(
        bins: &PgBins,
        pgdata: &Path,
        shared_buffers_bytes: u64,
        run_as: Option<RunAs>,
    ) -> Result<Self> {
        let port = free_port()?;
        let mut cmd = Command::new(bins.program("postgres"));
        cmd.arg("-D").arg(pgdata).args(["-p", &port.to_string()]);
        let kb = (shared_buffers_bytes / 1024).max(128);
        for setting in [
            "listen_addresses=127.0.0.1".to_string(),
            format!("unix_socket_directories={}", pgdata.display()),
            format!("shared_buffers={kb}kB"),
            "fsync=on".into(),
            "synchronous_commit=on".into(),
            "full_page_writes=on".into(),
            "autovacuum=off".into(),
            "max_connections=100".into(),
        ] {
            cmd.arg("-c").arg(setting);
        }
        if let Some(r) = run_as {
            r.apply(&mut cmd);
        }
        let ready = |l: &str| l.contains("ready to accept connections").then(String::new);
        let (process, _) = ChildProcess::spawn("postgres", cmd, ready, libc::SIGQUIT)?;
        Ok(Self { process, port })
    }

    /// CPU time of the postmaster and every backend, those still running and those ended, ns,
    /// and the number of its processes running now.
    pub fn cpu_ns(&self) -> (u64, usize) {
        tree_cpu_ns(self.process.pid()).unwrap_or((0, 0))
    }

    /// [`Postgres::cpu_ns`] after a client that started with `live_before` processes running
    /// disconnected. Backends' CPU time reaches the postmaster's count only when it has reaped
    /// them (measured: up to half a second later): read until the backends are gone and the
    /// count is still for 100 ms (at most 5 s).
    pub fn cpu_ns_after(&self, live_before: usize) -> (u64, usize) {
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut cpu = self.cpu_ns();
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
            let next = self.cpu_ns();
            if next == cpu && next.1 <= live_before {
                break;
            }
            cpu = next;
        }
        cpu
    }

    /// Fast shutdown (SIGINT: connections end, a checkpoint is written).
    pub fn stop(self) -> Result<()> {
        self.process.stop(libc::SIGINT)
    }

    /// Its last lines of output (for an error message).
    pub fn tail(&self) -> String {
        self.process.tail()
    }
}

/// An `nvmedb serve` child process.
#[derive(Debug)]
pub struct Nvmedb {
    process: ChildProcess,
    /// The TCP port on loopback.
    pub port: u16,
}

impl Nvmedb {
    /// Starts `<bin> serve` over `data` on a free loopback port with these buffers (bytes).
    pub fn start(bin: &Path, data: &Path, table_buffer: u64, index_buffer: u64) -> Result<Self> {
        let mut cmd = Command::new(bin);
        cmd.arg("serve")
            .arg("--data")
            .arg(data)
            .args(["--listen", "127.0.0.1:0", "--buffer", &table_buffer.to_string()])
            .args(["--index-buffer", &index_buffer.to_string()]);
        // "nvmedb: serving <dir> on 127.0.0.1:<port> (...".
        let ready = |l: &str| {
            let rest = l.split(" on 127.0.0.1:").nth(1)?;
            Some(rest.split(|c: char| !c.is_ascii_digit()).next()?.to_string())
        };
        let (process, port) = ChildProcess::spawn("nvmedb serve", cmd, ready, libc::SIGKILL)?;
        let port = port
            .parse()
            .map_err(|_| LabError::tool("nvmedb serve", format!("reported port `{port}` is not a number")))?;
        Ok(Self { process, port })
    }

    /// CPU time of the server (every thread), ns.
    pub fn cpu_ns(&self) -> u64 {
        pid_cpu_ns(self.process.pid()).unwrap_or(0)
    }

    /// Clean shutdown (SIGTERM: connections close, a checkpoint, exit).
    pub fn stop(self) -> Result<()> {
        self.process.stop(libc::SIGTERM)
    }

    /// Its last lines of output (for an error message).
    pub fn tail(&self) -> String {
        self.process.tail()
    }
}

/// The loaded data of both servers: nvmedb's heap files, its index files, PostgreSQL's `base/`
/// (tables and indexes), bytes; an error when one is empty.
pub fn loaded_bytes(nvdata: &Path, pgdata: &Path) -> Result<(u64, u64, u64)> {
    let (mut heap, mut idx) = (0, 0);
    for e in std::fs::read_dir(nvdata).map_err(LabError::io(nvdata, "list"))?.filter_map(|e| e.ok()) {
        let name = e.file_name().to_string_lossy().to_string();
        let len = e.metadata().map_err(LabError::io(e.path(), "stat"))?.len();
        if nvmedb::table::files::is_heap_file(&name) {
            heap += len;
        } else if nvmedb::table::files::is_index_file(&name) {
            idx += len;
        }
    }
    let pg_bytes = dir_bytes(&pgdata.join("base"))?;
    if heap == 0 || idx == 0 || pg_bytes == 0 {
        return Err(LabError::Inconsistent {
            what: "the loaded data".into(),
            detail: format!(
                "nvmedb heap {heap} B, index {idx} B, PostgreSQL base/ {pg_bytes} B: one is empty"
            ),
        });
    }
    Ok((heap, idx, pg_bytes))
}

/// A client's error `e` with the last output of the server (`label`) it ran against.
pub fn with_tail(e: LabError, label: &str, tail: String) -> LabError {
    match e {
        LabError::Tool { tool, detail } => {
            LabError::Tool { tool, detail: format!("{detail}\n{label}'s last output:\n{tail}") }
        }
        other => other,
    }
}
