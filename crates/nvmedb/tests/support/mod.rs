//! Shared support of the engine's integration tests: the one place for scratch directories,
//! seeds and iteration counts, the child-process kill loop, and the multi-table transaction
//! workload that the crash tests run.
//!
//! Owns:
//! - [`seed`] and [`iters`]: every seeded test reads its first seed from `NVMEDB_TEST_SEED` and
//!   its iteration (or seed) count from `NVMEDB_TEST_ITERS`, with a default of its own, and
//!   prints [`replay`] with any failure so the failure replays;
//! - [`TmpDir`]: a fresh scratch directory (or file path), removed when dropped;
//! - [`kill`]: a test that re-runs its own binary as a child, reads the acknowledgements it
//!   prints, and kills it with SIGKILL;
//! - [`workload`]: transactions over four tables (inserts, updates and deletes of rows of
//!   10 B–3 KiB, secondary indexes, counters shared by all clients so that transactions
//!   deadlock) and the check of a recovered database against what was acknowledged.
//!
//! Each test binary compiles this module; what one binary does not use is not dead code.
#![allow(dead_code)]

pub mod decoders;
pub mod kill;
pub mod workload;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

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

/// The first seed: `NVMEDB_TEST_SEED`, else one taken from the clock (printed by the caller's
/// failure messages through [`replay`]).
pub fn seed_or_random() -> u64 {
    env_u64(SEED_ENV).unwrap_or_else(|| nvmedb::util::Rng::seed_from_time() % 1_000_000_000)
}

/// The number of iterations (or seeds): `NVMEDB_TEST_ITERS`, else `default`.
pub fn iters(default: u64) -> u64 {
    env_u64(ITERS_ENV).unwrap_or(default)
}

/// The command prefix that replays a run: `NVMEDB_TEST_SEED=.. NVMEDB_TEST_ITERS=..`.
pub fn replay(seed: u64, iters: u64) -> String {
    format!("replay: {SEED_ENV}={seed} {ITERS_ENV}={iters}")
}

/// The target's temporary directory (on the disk the tests build on, where O_DIRECT works).
fn disk_tmp() -> PathBuf {
    option_env!("CARGO_TARGET_TMPDIR").map(PathBuf::from).unwrap_or_else(std::env::temp_dir)
}

/// A unique scratch path (a directory once created), removed with everything under it when
/// dropped. Under the target's temporary directory, or on tmpfs with [`TmpDir::on_tmpfs`].
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
        }
        Self(p)
    }

    /// A new, empty directory on the disk the tests build on (O_DIRECT works there).
    pub fn new(tag: &str) -> Self {
        let base =
            std::env::var("CARGO_TARGET_TMPDIR").map(PathBuf::from).unwrap_or_else(|_| std::env::temp_dir());
        Self::under(base, tag, true)
    }

    /// A path that does not exist yet, on the disk the tests build on.
    pub fn path_only(tag: &str) -> Self {
        let base =
            std::env::var("CARGO_TARGET_TMPDIR").map(PathBuf::from).unwrap_or_else(|_| std::env::temp_dir());
        Self::under(base, tag, false)
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
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TmpDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Makes `lsn` the end of the file log kept in `a` and `b` (`b` empty for a single log): every byte from there on
/// is zeroed and later segments are removed, as if nothing after it had reached either copy
/// (a crash that lost the log's tail, or both copies truncated).
pub fn cut_log(a: &dyn nvmedb::io::Storage, b: &dyn nvmedb::io::Storage, lsn: u64) {
    use nvmedb::io::AlignedBuf;
    const BLOCK: u64 = 4096;
    let copies: [Arc<dyn nvmedb::io::Storage>; 2] = [snapshot(a), snapshot(b)];
    let segs = nvmedb::wal::live_segments(&copies).expect("live segments");
    for s in &segs {
        for st in [a, b] {
            if !st.exists(&s.name) {
                // A single (not duplexed) log has no files in the mirror.
                continue;
            }
            if s.base_lsn > lsn || (s.base_lsn == lsn && s.seq != segs[0].seq) {
                st.remove(&s.name).expect("remove segment");
                continue;
            }
            let dev = st.open(&s.name, false).expect("open segment");
            let from = BLOCK + (lsn - s.base_lsn);
            if from >= dev.capacity() {
                continue;
            }
            let block = from / BLOCK * BLOCK;
            let mut buf = AlignedBuf::new(BLOCK as usize);
            dev.read_at(block, &mut buf).expect("read");
            buf[(from - block) as usize..].fill(0);
            dev.write_at(block, &buf).expect("write");
            let rest = dev.capacity().saturating_sub(block + BLOCK) as usize;
            if rest > 0 {
                dev.write_at(block + BLOCK, &AlignedBuf::new(rest)).expect("write");
            }
            dev.sync().expect("sync");
        }
    }
}

/// A copy in memory of every device of `s`.
pub fn snapshot(s: &dyn nvmedb::io::Storage) -> Arc<nvmedb::io::MemStorage> {
    use nvmedb::io::{AlignedBuf, MemStorage, Storage};
    let out = Arc::new(MemStorage::new());
    for name in s.list().expect("list") {
        let from = s.open(&name, false).expect("open");
        let to = out.open(&name, true).expect("create");
        let cap = from.capacity() as usize;
        if cap > 0 {
            let mut buf = AlignedBuf::new(cap.div_ceil(4096) * 4096);
            from.read_at(0, &mut buf).expect("read");
            to.write_at(0, &buf).expect("write");
        }
    }
    out
}
