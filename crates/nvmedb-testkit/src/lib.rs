//! The one test-support library of every nvmedb crate (a dev-dependency only; it depends on no
//! nvmedb crate, so the engine's own tests can use it too).
//!
//! Owns:
//! - [`TmpDir`]: a fresh scratch directory (or file path) on the disk the tests build on,
//!   removed when dropped — unless the test is failing, when it is kept and its path printed;
//! - [`seed`] and [`iters`]: every seeded test reads its first seed from `NVMEDB_TEST_SEED`
//!   and its iteration (or seed) count from `NVMEDB_TEST_ITERS`, with a default of its own;
//!   [`replay`] is the text a failure prints so it replays, and [`Replay`] prints it for a test
//!   that panics;
//! - [`kill`]: a test that re-runs its own binary as a child, reads the acknowledgements it
//!   prints, and kills it with SIGKILL;
//! - [`needs`]: whether an external program a test runs (etcd, psql, chromium, ...) is
//!   installed; a missing one skips the test with a message naming the Debian package, or
//!   fails it under CI (`CI` or the program's `NVMEDB_REQUIRE_*` variable set).
//!
//! Invariants: two scratch paths never collide (process id and a counter), and none is left
//! behind by a passing test.

pub mod kill;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable holding the first seed.
pub const SEED_ENV: &str = "NVMEDB_TEST_SEED";
/// The environment variable holding the number of iterations (or seeds).
pub const ITERS_ENV: &str = "NVMEDB_TEST_ITERS";

fn env_u64(key: &str) -> Option<u64> {
    let v = std::env::var(key).ok()?;
    Some(v.trim().parse().unwrap_or_else(|_| panic!("{key}={v} is not a number")))
}

/// The first seed: `NVMEDB_TEST_SEED`, else `default`.
pub fn seed(default: u64) -> u64 {
    env_u64(SEED_ENV).unwrap_or(default)
}

/// The first seed: `NVMEDB_TEST_SEED`, else one taken from the clock (the caller prints it
/// with any failure through [`replay`] or [`Replay`]).
pub fn seed_or_random() -> u64 {
    env_u64(SEED_ENV).unwrap_or_else(|| {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        (t.as_nanos() as u64 ^ u64::from(std::process::id()).rotate_left(32)) % 1_000_000_000
    })
}

/// The number of iterations (or seeds): `NVMEDB_TEST_ITERS`, else `default`.
pub fn iters(default: u64) -> u64 {
    env_u64(ITERS_ENV).unwrap_or(default)
}

/// The command prefix that replays a run: `replay: NVMEDB_TEST_SEED=.. NVMEDB_TEST_ITERS=..`.
pub fn replay(seed: u64, iters: u64) -> String {
    format!("replay: {SEED_ENV}={seed} {ITERS_ENV}={iters}")
}

/// Prints [`replay`] to stderr when dropped during a panic: hold one for the length of a
/// seeded test so that any failure in it — an assertion deep in a helper included — says how
/// to replay it.
#[must_use = "the replay line is printed when this guard is dropped by a panic"]
pub struct Replay {
    /// The first seed.
    pub seed: u64,
    /// The number of iterations (or seeds).
    pub iters: u64,
}

impl Replay {
    /// The seed and iteration count of this run: `NVMEDB_TEST_SEED` / `NVMEDB_TEST_ITERS`, else
    /// the defaults given.
    pub fn from_env(default_seed: u64, default_iters: u64) -> Self {
        Self { seed: seed(default_seed), iters: iters(default_iters) }
    }
}

impl Drop for Replay {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", replay(self.seed, self.iters));
        }
    }
}

/// An external program some tests run, and where it comes from.
#[derive(Debug, Clone, Copy)]
pub struct Program {
    /// The command (`etcd`), or an absolute path.
    pub command: &'static str,
    /// The Debian package that installs it (`etcd-server`).
    pub package: &'static str,
    /// The variable that makes its absence a failure (`NVMEDB_REQUIRE_ETCD`); `.ci/run` sets
    /// it, and `CI` set to anything but `false` does the same for every program.
    pub require_env: &'static str,
}

/// etcd (the automatic-failover tests start members of it).
pub const ETCD: Program =
    Program { command: "etcd", package: "etcd-server", require_env: "NVMEDB_REQUIRE_ETCD" };
/// PostgreSQL 15's server and clients (`lab pgbench` and the SQL server's client tests).
pub const POSTGRES: Program = Program {
    command: "/usr/lib/postgresql/15/bin/pgbench",
    package: "postgresql-15",
    require_env: "NVMEDB_REQUIRE_POSTGRES",
};
/// Headless chromium (the lab page's browser test).
pub const CHROMIUM: Program =
    Program { command: "chromium", package: "chromium", require_env: "NVMEDB_REQUIRE_CHROMIUM" };
/// sysbench (its OLTP scripts drive `nvmedb serve` through its pgsql driver).
pub const SYSBENCH: Program =
    Program { command: "sysbench", package: "sysbench", require_env: "NVMEDB_REQUIRE_SYSBENCH" };
/// fio (the lab's device reference).
pub const FIO: Program = Program { command: "fio", package: "fio", require_env: "NVMEDB_REQUIRE_FIO" };

/// Whether `program` runs (`program --version` starts): true to go on. When it does not, the
/// test must not pass as if it had run: under CI (`CI`, or `program.require_env`, set) this
/// panics naming the package; elsewhere it prints `SKIPPED: ...` with the package to install
/// and returns false (the caller returns).
pub fn needs(program: Program) -> bool {
    let runs = std::process::Command::new(program.command)
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok();
    present_or_skip(program, runs)
}

/// The Python database drivers the client tests run (psycopg2, psycopg 3, SQLAlchemy 2;
/// `scripts/setup.sh` installs them with pip).
pub const PYTHON_DRIVERS: Program = Program {
    command: "python3",
    package:
        "python3-pip, then: pip3 install --break-system-packages psycopg2-binary 'psycopg[binary]' sqlalchemy",
    require_env: "NVMEDB_REQUIRE_PYDRIVERS",
};

/// Whether `python3` imports every module of `modules`: true to go on; otherwise as [`needs`]
/// (skip with a message naming [`PYTHON_DRIVERS`]' install, or fail under CI).
pub fn needs_python(modules: &[&str]) -> bool {
    let runs = std::process::Command::new("python3")
        .arg("-c")
        .arg(format!("import {}", modules.join(", ")))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    present_or_skip(PYTHON_DRIVERS, runs)
}

fn present_or_skip(program: Program, runs: bool) -> bool {
    if runs {
        return true;
    }
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
    let required = std::env::var_os(program.require_env).is_some();
    assert!(
        !(ci || required),
        "`{}` is not installed but this test must run here ({}): apt-get install {} \
         (./scripts/test.sh installs it when run as root)",
        program.command,
        if required { program.require_env } else { "CI is set" },
        program.package
    );
    eprintln!(
        "SKIPPED: `{}` is not installed (Debian: apt-get install {}; ./scripts/test.sh installs it \
         when run as root); {}=1 makes this a failure",
        program.command, program.package, program.require_env
    );
    false
}

/// The target's temporary directory (`target/tmp`, on the disk the tests build on, where
/// O_DIRECT works): `CARGO_TARGET_TMPDIR` when set, else found from the test binary's path
/// (`target/<profile>/deps/<binary>`), else the system's temporary directory.
pub fn target_tmp() -> PathBuf {
    if let Some(d) = std::env::var_os("CARGO_TARGET_TMPDIR") {
        return PathBuf::from(d);
    }
    let from_exe = std::env::current_exe().ok().and_then(|exe| {
        let deps = exe.parent()?;
        (deps.file_name()? == "deps").then(|| deps.parent()?.parent().map(|t| t.join("tmp")))?
    });
    from_exe.unwrap_or_else(std::env::temp_dir)
}

/// A unique scratch path (a directory once created), removed with everything under it when
/// dropped — unless the thread is panicking (a failing test), when it is kept for a look and
/// its path printed. Under the target's temporary directory, or on tmpfs with
/// [`TmpDir::on_tmpfs`].
pub struct TmpDir(PathBuf);

impl TmpDir {
    fn under(base: PathBuf, tag: &str, create: bool) -> Self {
        static N: AtomicU64 = AtomicU64::new(0);
        let p = base.join(format!(
            "nvmedb-test-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_file(&p);
        let _ = std::fs::remove_dir_all(&p);
        if create {
            std::fs::create_dir_all(&p).unwrap_or_else(|e| panic!("create {}: {e}", p.display()));
        } else if let Some(parent) = p.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        Self(p)
    }

    /// A new, empty directory on the disk the tests build on (O_DIRECT works there).
    pub fn new(tag: &str) -> Self {
        Self::under(target_tmp(), tag, true)
    }

    /// A path that does not exist yet (its parent does), on the disk the tests build on.
    pub fn path_only(tag: &str) -> Self {
        Self::under(target_tmp(), tag, false)
    }

    /// A path that does not exist yet, on /dev/shm when the machine has it (for the fast log's
    /// rings, which survive kill -9 there).
    pub fn on_tmpfs(tag: &str) -> Self {
        let base =
            if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        Self::under(base, tag, false)
    }

    /// The path.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// A path inside this directory.
    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.0.join(name)
    }

    /// The path as a string (for APIs and commands that take one).
    pub fn as_str(&self) -> &str {
        self.0.to_str().expect("scratch paths are UTF-8")
    }
}

impl AsRef<Path> for TmpDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl std::ops::Deref for TmpDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TmpDir {
    fn drop(&mut self) {
        if std::thread::panicking() && self.0.exists() {
            eprintln!("test failed: its scratch data is kept at {}", self.0.display());
            return;
        }
        let _ = std::fs::remove_file(&self.0);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_dirs_are_unique_and_removed_on_drop() {
        let (a, b) = (TmpDir::new("kit"), TmpDir::new("kit"));
        assert_ne!(a.path(), b.path());
        assert!(a.is_dir() && b.is_dir());
        std::fs::write(a.join("f"), b"x").unwrap();
        let pa = a.to_path_buf();
        drop(a);
        assert!(!pa.exists(), "{} was not removed", pa.display());
        let p = TmpDir::path_only("kit");
        assert!(!p.exists() && p.parent().unwrap().is_dir());
    }

    #[test]
    fn scratch_dir_is_kept_when_the_test_fails() {
        let kept = std::thread::spawn(|| {
            let d = TmpDir::new("kit-fail");
            let p = d.to_path_buf();
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
                let _d = d;
                panic!("failing on purpose");
            }));
            assert!(r.is_err());
            p
        })
        .join()
        .unwrap();
        assert!(kept.is_dir(), "a failing test's scratch dir was removed");
        std::fs::remove_dir_all(&kept).unwrap();
    }

    #[test]
    fn scratch_dirs_live_under_target_tmp() {
        let d = TmpDir::new("kit-where");
        assert!(d.starts_with(target_tmp()), "{} not under {}", d.display(), target_tmp().display());
        assert!(target_tmp().ends_with("tmp"));
    }
}
