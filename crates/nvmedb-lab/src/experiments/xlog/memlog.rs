//! A memory-only record log for Fig. 9: the engine with every log cost but persistence.
//!
//! Owns: [`MemLogOpener`] (and the log it opens). Invariant: appends copy the record into a RAM
//! ring under a mutex and are "durable" at once; the log survives nothing and recovers nothing,
//! and says so in [`RecordLog::describe`].

use nvmedb::util::sync::MutexExt;
use nvmedb::wal::{LogOpener, LogRecord, Lsn, RecordLog, RecordReader, RecoveredLog, WalStats};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A memory-only record log: appends copy the record into a RAM ring under a mutex and are
/// "durable" at once. It survives nothing (no recovery); it measures the engine without any log
/// persistence cost.
struct MemLog {
    ring: Mutex<Vec<u8>>,
    end: AtomicU64,
    start: Lsn,
    records: AtomicU64,
}

struct Empty;

impl RecordReader for Empty {
    fn next_record(&mut self) -> nvmedb::Result<Option<LogRecord>> {
        Ok(None)
    }
}

impl RecordLog for MemLog {
    fn append_record(&self, _kind: u8, payload: &[u8]) -> nvmedb::Result<(Lsn, Lsn)> {
        let mut ring = self.ring.locked();
        let len = payload.len() as u64 + 20;
        let start = self.end.load(Ordering::Relaxed);
        let n = ring.len();
        let at = (start as usize + 20) % n;
        let first = payload.len().min(n - at);
        ring[at..at + first].copy_from_slice(&payload[..first]);
        ring[..payload.len() - first].copy_from_slice(&payload[first..]);
        self.end.store(start + len, Ordering::Release);
        self.records.fetch_add(1, Ordering::Relaxed);
        Ok((start, start + len))
    }
    fn end_lsn(&self) -> Lsn {
        self.end.load(Ordering::Acquire)
    }
    fn durable_lsn(&self) -> Lsn {
        self.end.load(Ordering::Acquire)
    }
    fn wait_durable(&self, _lsn: Lsn) -> nvmedb::Result<Lsn> {
        Ok(self.durable_lsn())
    }
    fn recovered(&self) -> RecoveredLog {
        RecoveredLog { log_id: 0, start_lsn: self.start, end_lsn: self.start, segments: 0, created: true }
    }
    fn reader(&self, _from: Lsn) -> nvmedb::Result<Box<dyn RecordReader>> {
        Ok(Box::new(Empty))
    }
    fn truncate_before(&self, _lsn: Lsn) -> nvmedb::Result<usize> {
        Ok(0)
    }
    fn stats(&self) -> WalStats {
        WalStats { records_appended: self.records.load(Ordering::Relaxed), ..Default::default() }
    }
    fn describe(&self) -> String {
        "memory-only log: records copied to RAM, durable at once; survives nothing (no recovery)".into()
    }
}

/// Opens a fresh 64 MiB memory-only log.
pub struct MemLogOpener;

impl LogOpener for MemLogOpener {
    fn is_empty(&self) -> nvmedb::Result<bool> {
        Ok(true)
    }
    fn open(self: Box<Self>, initial_lsn: Lsn) -> nvmedb::Result<Arc<dyn RecordLog>> {
        Ok(Arc::new(MemLog {
            ring: Mutex::new(vec![0; 64 << 20]),
            end: AtomicU64::new(initial_lsn),
            start: initial_lsn,
            records: AtomicU64::new(0),
        }))
    }
}
