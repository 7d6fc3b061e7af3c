//! Shared support of the engine's integration tests. Scratch directories, seeds and iteration
//! counts, and the child-process kill loop come from `nvmedb-testkit` (the one test-support
//! crate of every nvmedb crate) and are re-exported here; this module adds what needs the
//! engine.
//!
//! Owns:
//! - [`cut_log`] and [`snapshot`]: a file log's tail cut at an LSN, a storage copied to memory;
//! - [`PowerCut`]: an I/O hook that fails every write from the n-th on (a power cut);
//! - [`decoders`]: every on-disk and wire decoder fed arbitrary bytes (fuzzing);
//! - [`workload`]: transactions over four tables (inserts, updates and deletes of rows of
//!   10 B–3 KiB, secondary indexes, counters shared by all clients so that transactions
//!   deadlock) and the check of a recovered database against what was acknowledged.
//!
//! Each test binary compiles this module; what one binary does not use is not dead code.
#![allow(dead_code)]

pub mod decoders;
pub mod workload;

#[allow(unused_imports)]
pub use nvmedb_testkit::{iters, kill, replay, seed, seed_or_random, Replay, TmpDir, ITERS_ENV, SEED_ENV};

use std::sync::Arc;

/// The defaults with 4 KiB pages and 1 MiB buffers per pool: small tables span many pages
/// and leaves (the read races use it).
pub fn small_page_options() -> nvmedb::Options {
    nvmedb::Options {
        table_page_size: 4096,
        index_page_size: 4096,
        table_buffer: nvmedb::BufferSize::Bytes(256 * 4096),
        index_buffer: nvmedb::BufferSize::Bytes(256 * 4096),
        ..nvmedb::Options::default()
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

/// Fails every write, sync and resize once the shared countdown reaches zero (the power is
/// cut); reads still work. Tests set `countdown` to the number of writes before the cut.
pub struct PowerCut {
    /// Writes, syncs and resizes left before the cut (`i64::MAX`: none planned).
    pub countdown: std::sync::atomic::AtomicI64,
}

impl nvmedb::io::IoHook for PowerCut {
    fn before(
        &self,
        device: &str,
        op: nvmedb::io::IoOpKind,
        offset: u64,
        len: usize,
    ) -> nvmedb::io::IoResult<()> {
        use std::sync::atomic::Ordering::SeqCst;
        if op != nvmedb::io::IoOpKind::Read && self.countdown.fetch_sub(1, SeqCst) <= 0 {
            let eio = std::io::Error::from_raw_os_error(5);
            return Err(nvmedb::io::IoError::os(device, op, offset, len, eio));
        }
        Ok(())
    }
}

/// The simulated disks of a database with a duplexed log: its data and the log's two copies,
/// which lose power together. The crash tests' set-up: each opens them behind hooks of its own.
pub struct SimDisks {
    /// The data directory.
    pub data: Arc<nvmedb::io::CrashSimStorage>,
    /// The log's first copy.
    pub log_a: Arc<nvmedb::io::CrashSimStorage>,
    /// The log's second copy.
    pub log_b: Arc<nvmedb::io::CrashSimStorage>,
}

impl SimDisks {
    /// Three empty disks.
    pub fn new() -> Self {
        use nvmedb::io::CrashSimStorage;
        Self {
            data: Arc::new(CrashSimStorage::new()),
            log_a: Arc::new(CrashSimStorage::new()),
            log_b: Arc::new(CrashSimStorage::new()),
        }
    }

    /// Opens (or creates) the database they hold, the data behind `data_hook` and both log
    /// copies behind `log_hook` when given.
    pub fn open(
        &self,
        data_hook: Option<Arc<dyn nvmedb::io::IoHook>>,
        log_hook: Option<Arc<dyn nvmedb::io::IoHook>>,
        options: nvmedb::Options,
    ) -> nvmedb::Result<nvmedb::Database> {
        use nvmedb::io::{HookedStorage, Storage};
        let wrap = |s: &Arc<nvmedb::io::CrashSimStorage>, hook: &Option<Arc<dyn nvmedb::io::IoHook>>| {
            let s: Arc<dyn Storage> = s.clone();
            match hook {
                Some(h) => Arc::new(HookedStorage::new(s, h.clone())) as Arc<dyn Storage>,
                None => s,
            }
        };
        nvmedb::Database::open_with_storages(
            wrap(&self.data, &data_hook),
            Some((wrap(&self.log_a, &log_hook), wrap(&self.log_b, &log_hook))),
            options,
        )
    }

    /// The power fails: each write not synced is dropped, persisted or torn as `rng` draws
    /// (disk by disk, device by device in name order, so the seed replays it).
    pub fn crash(&self, rng: &mut nvmedb::util::Rng) {
        for s in [&self.data, &self.log_a, &self.log_b] {
            s.crash(rng);
        }
    }

    /// The power fails and every write not synced is lost.
    pub fn crash_dropping_unsynced(&self) {
        for s in [&self.data, &self.log_a, &self.log_b] {
            s.crash_with(|_, _, _| nvmedb::io::WriteFate::Dropped);
        }
    }
}

impl Default for SimDisks {
    fn default() -> Self {
        Self::new()
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
