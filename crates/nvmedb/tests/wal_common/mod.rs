//! Shared helpers of the `wal_*` integration tests.
//!
//! Owns: `CutStorage`, a `Storage` wrapper that models a power cut at the N-th write or sync
//! (that operation and every later one fail with EIO and leave the medium untouched), and
//! small helpers to build logs, derive payloads from a seed and read a whole log back.
#![allow(dead_code)]

use nvmedb::io::{AlignedBuf, CrashSimStorage, Device, DeviceInfo, IoError, IoOpKind, IoResult, Storage};
use nvmedb::util::Rng;
use nvmedb::wal::{FileLog, LogReader, LogRecord, WalOptions};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

/// Power-cut wrapper: `budget` write/sync operations succeed, then all fail. With
/// `split_blocks`, each write is issued as separate 4 KiB writes in a seeded random order (each
/// costing one unit of budget), so a crash can persist the blocks of one write out of order.
pub struct CutStorage {
    pub inner: Arc<dyn Storage>,
    pub budget: Arc<AtomicI64>,
    pub split_blocks: Option<Arc<Mutex<Rng>>>,
}

impl CutStorage {
    pub fn new(inner: Arc<dyn Storage>, budget: Arc<AtomicI64>) -> Self {
        Self { inner, budget, split_blocks: None }
    }

    pub fn reordering(inner: Arc<dyn Storage>, budget: Arc<AtomicI64>, seed: u64) -> Self {
        Self { inner, budget, split_blocks: Some(Arc::new(Mutex::new(Rng::new(seed)))) }
    }
}

struct CutDevice {
    inner: Arc<dyn Device>,
    budget: Arc<AtomicI64>,
    split_blocks: Option<Arc<Mutex<Rng>>>,
}

fn cut(budget: &AtomicI64, name: &str, op: IoOpKind, offset: u64, len: usize) -> IoResult<()> {
    if budget.fetch_sub(1, Ordering::SeqCst) <= 0 {
        return Err(IoError::os(name, op, offset, len, std::io::Error::from_raw_os_error(libc_eio())));
    }
    Ok(())
}

fn libc_eio() -> i32 {
    5
}

impl Device for CutDevice {
    fn info(&self) -> DeviceInfo {
        self.inner.info()
    }
    fn alignment(&self) -> usize {
        self.inner.alignment()
    }
    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }
    fn ensure_capacity(&self, len: u64) -> IoResult<()> {
        self.inner.ensure_capacity(len)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> IoResult<()> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> IoResult<()> {
        let Some(rng) = &self.split_blocks else {
            cut(&self.budget, &self.inner.info().name, IoOpKind::Write, offset, buf.len())?;
            return self.inner.write_at(offset, buf);
        };
        let blocks = buf.len() / 4096;
        let mut order: Vec<usize> = (0..blocks).collect();
        {
            let mut r = rng.lock().unwrap();
            for i in (1..blocks).rev() {
                let j = r.below(i as u64 + 1) as usize;
                order.swap(i, j);
            }
        }
        let mut one = AlignedBuf::new(4096);
        for i in order {
            let off = offset + (i * 4096) as u64;
            cut(&self.budget, &self.inner.info().name, IoOpKind::Write, off, 4096)?;
            one.copy_from_slice(&buf[i * 4096..(i + 1) * 4096]);
            self.inner.write_at(off, &one)?;
        }
        Ok(())
    }
    fn sync(&self) -> IoResult<()> {
        cut(&self.budget, &self.inner.info().name, IoOpKind::Sync, 0, 0)?;
        self.inner.sync()
    }
}

impl Storage for CutStorage {
    fn open(&self, name: &str, create: bool) -> IoResult<Arc<dyn Device>> {
        let inner = self.inner.open(name, create)?;
        Ok(Arc::new(CutDevice {
            inner,
            budget: self.budget.clone(),
            split_blocks: self.split_blocks.clone(),
        }))
    }
    fn exists(&self, name: &str) -> bool {
        self.inner.exists(name)
    }
    fn list(&self) -> IoResult<Vec<String>> {
        self.inner.list()
    }
    fn remove(&self, name: &str) -> IoResult<()> {
        self.inner.remove(name)
    }
    fn location(&self) -> String {
        self.inner.location()
    }
}

/// Two crash-sim storages (the two log copies).
pub fn sim_pair() -> (Arc<CrashSimStorage>, Arc<CrashSimStorage>) {
    (Arc::new(CrashSimStorage::new()), Arc::new(CrashSimStorage::new()))
}

pub fn dynp(a: &Arc<CrashSimStorage>) -> Arc<dyn Storage> {
    a.clone()
}

/// Options with small segments so tests cross segment boundaries often.
pub fn small_opts() -> WalOptions {
    WalOptions { segment_bytes: 64 * 1024, max_batch_bytes: 16 * 1024, ..WalOptions::default() }
}

/// A payload fully determined by `(stream, index)`, of length `len`.
pub fn payload(stream: u64, index: u64, len: usize) -> Vec<u8> {
    let mut r = nvmedb::util::Rng::new(stream.wrapping_mul(1_000_003) ^ index.wrapping_mul(7919));
    let mut v = vec![0u8; len];
    r.fill(&mut v);
    v
}

/// Reads every record from `from` to the end of the log kept in `a` and `b`.
pub fn read_all(a: Arc<dyn Storage>, b: Arc<dyn Storage>, from: u64) -> nvmedb::Result<Vec<LogRecord>> {
    LogReader::open(a, b, from)?.collect()
}

/// Opens a log on two crash-sim storages.
pub fn open(a: &Arc<CrashSimStorage>, b: &Arc<CrashSimStorage>, opts: WalOptions) -> FileLog {
    FileLog::open(dynp(a), dynp(b), opts).expect("open log")
}
