//! Reading a replica log as it grows ([`TailReader`]), and the replica log as the log of a
//! promoted standby's database ([`ReplicaLogHandle`], [`ReplicaLogOpener`]).
//!
//! Invariant: a tail reader returns only records below the durable end, each checked.

use super::blocks::BlockReader;
use super::record::{check_record, encode_record, ShippedRecord, REPLICA_HEADER_BYTES};
use super::{ReplicaLog, LOG_FILE};
use crate::error::{Error, Result};
use crate::util::bytes::u32_at;
use crate::util::sync::MutexExt;
use crate::wal::{LogRecord, Lsn, RecordReader, RecoveredLog, WalStats};
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl ReplicaLog {
    /// A reader that follows the log as it grows, from its first record.
    pub fn tail(self: &Arc<Self>) -> Result<TailReader> {
        let mut t = TailReader { log: self.clone(), r: BlockReader::new(self.dev()), offset: 0 };
        t.seek_to(self.start_off())?;
        Ok(t)
    }
}

/// Reads a [`ReplicaLog`] sequentially, only as far as it is durable, resuming where it left off.
pub struct TailReader {
    log: Arc<ReplicaLog>,
    r: BlockReader,
    offset: u64,
}

impl TailReader {
    /// Byte offset of the next record in the file.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Repositions at byte offset `off` (a record start this reader returned before).
    pub fn seek_to(&mut self, off: u64) -> Result<()> {
        self.r.invalidate();
        self.offset = off;
        Ok(())
    }

    /// The next durable record, `None` when the reader has caught up with the durable end.
    pub fn next_record(&mut self) -> Result<Option<ShippedRecord>> {
        let limit = self.log.durable_len.load(Ordering::Acquire);
        if self.offset + REPLICA_HEADER_BYTES as u64 > limit {
            return Ok(None);
        }
        let off = self.offset;
        let mut head = [0u8; REPLICA_HEADER_BYTES];
        self.r.read(off, &mut head, limit)?;
        let len = u32_at(&head, 21) as usize;
        let n = (REPLICA_HEADER_BYTES + len) as u64;
        let corrupt = |detail: String| Error::Corruption {
            file: format!("{}/{LOG_FILE}", self.log.storage.location()),
            offset: off,
            detail,
        };
        if off + n > limit {
            return Err(corrupt(format!("record of {len} bytes crosses the durable end {limit}")));
        }
        // The payload is read straight into the record's own buffer (one copy).
        let mut payload = vec![0u8; len];
        self.r.read(off + REPLICA_HEADER_BYTES as u64, &mut payload, limit)?;
        let (lsn, end) = check_record(&head, &payload).map_err(corrupt)?;
        self.offset += n;
        Ok(Some(ShippedRecord { lsn, end, kind: head[20], payload }))
    }
}

/// A [`RecordReader`] over a replica log from an LSN.
struct FromReader {
    tail: TailReader,
    from: Lsn,
}

impl RecordReader for FromReader {
    fn next_record(&mut self) -> Result<Option<LogRecord>> {
        while let Some(r) = self.tail.next_record()? {
            if r.lsn >= self.from {
                return Ok(Some(LogRecord { lsn: r.lsn, end_lsn: r.end, kind: r.kind, payload: r.payload }));
            }
        }
        Ok(None)
    }
}

/// Lets a promoted standby's [`ReplicaLog`] be the log of a [`Database`](crate::Database).
pub struct ReplicaLogHandle(pub Arc<ReplicaLog>);

impl crate::wal::RecordLog for ReplicaLogHandle {
    fn append_record(&self, kind: u8, payload: &[u8]) -> Result<(Lsn, Lsn)> {
        let mut p = self.0.pending.locked();
        let lsn = p.end;
        let end = lsn + (REPLICA_HEADER_BYTES + payload.len()) as u64;
        let crc = encode_record(&mut p.buf, lsn, end, kind, payload);
        p.end = end;
        p.last = Some((lsn, crc));
        p.records += 1;
        drop(p);
        self.0.stats.locked().records_appended += 1;
        Ok((lsn, end))
    }

    fn end_lsn(&self) -> Lsn {
        self.0.pending.locked().end
    }

    fn durable_lsn(&self) -> Lsn {
        self.0.durable.load(Ordering::Acquire)
    }

    fn wait_durable(&self, lsn: Lsn) -> Result<Lsn> {
        let d = self.0.durable.load(Ordering::Acquire);
        if d >= lsn {
            return Ok(d);
        }
        let d = self.0.sync_to(lsn)?;
        self.0.stats.locked().commits += 1;
        Ok(d)
    }

    fn recovered(&self) -> RecoveredLog {
        // Where the log begins and ends now (it may have been truncated since it was opened).
        RecoveredLog {
            start_lsn: self.0.start_lsn(),
            end_lsn: self.0.durable_lsn(),
            ..self.0.recovered.clone()
        }
    }

    fn reader(&self, from: Lsn) -> Result<Box<dyn RecordReader>> {
        Ok(Box::new(FromReader { tail: self.0.tail()?, from }))
    }

    fn truncate_before(&self, lsn: Lsn) -> Result<usize> {
        Ok(self.0.truncate_before(lsn)? as usize)
    }

    fn stats(&self) -> WalStats {
        *self.0.stats.locked()
    }

    fn describe(&self) -> String {
        format!(
            "standby replica log (aligned block writes + sync, primary's LSNs) in {}",
            self.0.storage.location()
        )
    }
}

/// Opens a database over an already open replica log (promotion).
pub struct ReplicaLogOpener(pub Arc<ReplicaLog>);

impl crate::wal::LogOpener for ReplicaLogOpener {
    fn is_empty(&self) -> Result<bool> {
        Ok(false)
    }

    fn open(self: Box<Self>, _initial_lsn: Lsn) -> Result<Arc<dyn crate::wal::RecordLog>> {
        Ok(Arc::new(ReplicaLogHandle(self.0)))
    }
}
