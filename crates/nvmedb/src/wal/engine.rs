//! The engine's use of the log: record kinds, the page logger and the WAL rule hook.
//!
//! Owns: [`EngineLog`], which turns mini-transaction commits into records of a [`RecordLog`]
//! (the duplexed [`FileLog`](super::FileLog) or any other implementation), transaction commits and aborts into their records, and enforces the buffer
//! rule (a dirty page is written only after the log covers its LSN). It also owns the
//! full-image horizon, used only when torn pages are repaired from the log (full page images,
//! [`EngineLog::with_full_page_images`]; by default the double-write area repairs them and no
//! page is logged whole after a checkpoint): a checkpoint raises it under the same lock under
//! which page changes decide between a full image and a diff and are appended, so no page
//! change can slip past a checkpoint with a diff that redo could not apply to a page torn after
//! the checkpoint.

use super::{Lsn, RecordLog, KIND_USER_MIN};
use crate::buffer::mtr::{decode_mtr, decode_mtr_compact, MtrRecord};
use crate::buffer::{PageLogger, WalGate};
use crate::error::Result;
use crate::util::sync::{MutexExt, RwLockExt};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

pub use super::txnop::{RowPatch, TxnOp, PATCH_MERGE_GAP};

/// Page changes of the table pool in the fixed-width format of log format 2 and before
/// (payload: a mini-transaction record, `buffer::mtr::decode_mtr`); read, no longer written.
pub const KIND_PAGES_TABLE: u8 = KIND_USER_MIN;
/// Page changes of the index pool, fixed-width format (read, no longer written).
pub const KIND_PAGES_INDEX: u8 = KIND_USER_MIN + 1;
/// A transaction committed (payload: transaction id u64).
pub const KIND_COMMIT: u8 = KIND_USER_MIN + 2;
/// A transaction's changes were undone (payload: transaction id u64).
pub const KIND_ABORT: u8 = KIND_USER_MIN + 3;
/// A checkpoint completed (payload: redo start u64, undo start u64).
pub const KIND_CHECKPOINT: u8 = KIND_USER_MIN + 4;

/// Recovery finished (payload: redo start, log end, records, pages redone, full images,
/// losers, operations undone, microseconds — eight u64).
pub const KIND_RECOVERY: u8 = KIND_USER_MIN + 5;

/// The catalog changed (payload: the encoded catalog). Recovery ignores it (the catalog file
/// is the truth locally); a standby stores it, so tables created on the primary exist there.
pub const KIND_CATALOG: u8 = KIND_USER_MIN + 6;

/// Page changes of the table pool in the compact format (payload:
/// `buffer::mtr::decode_mtr_compact`; page operations or changed bytes per page).
pub const KIND_MTR_TABLE: u8 = KIND_USER_MIN + 7;
/// Page changes of the index pool, compact format.
pub const KIND_MTR_INDEX: u8 = KIND_USER_MIN + 8;

/// How a page-change record's payload is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MtrFormat {
    /// Fixed-width fields (log format 2 and before): [`decode_mtr`].
    Fixed,
    /// Varints, page operations (log format 3): [`decode_mtr_compact`].
    Compact,
}

impl MtrFormat {
    /// Decodes a payload of this format for a pool of `page_size`-byte pages (`None` if
    /// malformed).
    pub fn decode(self, payload: &[u8], page_size: usize) -> Option<MtrRecord> {
        match self {
            MtrFormat::Fixed => decode_mtr(payload),
            MtrFormat::Compact => decode_mtr_compact(payload, page_size),
        }
    }
}

/// What recovery did, as its [`KIND_RECOVERY`] record carries it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecoveryRecord {
    /// Where redo started.
    pub redo_from: Lsn,
    /// End of the log found.
    pub log_end: Lsn,
    /// Log records read.
    pub records: u64,
    /// Page changes applied.
    pub pages_redone: u64,
    /// Full page images applied.
    pub full_images: u64,
    /// Unfinished transactions rolled back.
    pub losers: u64,
    /// Their operations undone.
    pub ops_undone: u64,
    /// Wall time, microseconds.
    pub micros: u64,
}

/// A record of one of the engine's kinds. The one codec of the engine's log records: the
/// engine appends what [`EngineRecord::encode`] makes, and recovery, a standby and `inspect`
/// read records through [`EngineRecord::decode`]. Page changes and catalogs stay in their own
/// layers' encodings (`buffer::mtr`, `table::catalog`) and are carried as bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineRecord<'a> {
    /// Page changes of the pool tagged `tag` (a mini-transaction record).
    Pages {
        /// [`TAG_TABLE`] or [`TAG_INDEX`].
        tag: u8,
        /// How `mtr` is encoded.
        format: MtrFormat,
        /// The encoded mini-transaction.
        mtr: &'a [u8],
    },
    /// A transaction committed.
    Commit {
        /// Its id.
        txn: u64,
    },
    /// A transaction's changes were undone.
    Abort {
        /// Its id.
        txn: u64,
    },
    /// A checkpoint completed.
    Checkpoint {
        /// Where redo starts after it.
        redo: Lsn,
        /// Where the oldest transaction active at it began.
        undo: Lsn,
    },
    /// Recovery finished.
    Recovery(RecoveryRecord),
    /// The catalog changed (the encoded catalog).
    Catalog(&'a [u8]),
}

impl<'a> EngineRecord<'a> {
    /// The record kind.
    pub fn kind(&self) -> u8 {
        match self {
            EngineRecord::Pages { tag, format: MtrFormat::Compact, .. } => kind_for_tag(*tag),
            EngineRecord::Pages { tag, format: MtrFormat::Fixed, .. } => {
                if *tag == TAG_TABLE {
                    KIND_PAGES_TABLE
                } else {
                    KIND_PAGES_INDEX
                }
            }
            EngineRecord::Commit { .. } => KIND_COMMIT,
            EngineRecord::Abort { .. } => KIND_ABORT,
            EngineRecord::Checkpoint { .. } => KIND_CHECKPOINT,
            EngineRecord::Recovery(_) => KIND_RECOVERY,
            EngineRecord::Catalog(_) => KIND_CATALOG,
        }
    }

    /// The payload.
    pub fn encode(&self) -> Vec<u8> {
        let words = |w: &[u64]| w.iter().flat_map(|v| v.to_le_bytes()).collect();
        match self {
            EngineRecord::Pages { mtr: b, .. } | EngineRecord::Catalog(b) => b.to_vec(),
            EngineRecord::Commit { txn } | EngineRecord::Abort { txn } => words(&[*txn]),
            EngineRecord::Checkpoint { redo, undo } => words(&[*redo, *undo]),
            EngineRecord::Recovery(r) => words(&[
                r.redo_from,
                r.log_end,
                r.records,
                r.pages_redone,
                r.full_images,
                r.losers,
                r.ops_undone,
                r.micros,
            ]),
        }
    }

    /// Decodes a record of kind `kind`: `Ok(None)` for a kind that is not the engine's, an
    /// error saying what is wrong for a payload too short for its kind.
    pub fn decode(kind: u8, payload: &'a [u8]) -> std::result::Result<Option<Self>, String> {
        let word = |i: usize| -> std::result::Result<u64, String> {
            payload.get(i * 8..i * 8 + 8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes).ok_or_else(
                || {
                    format!(
                        "record of kind {kind} has {} payload bytes, too short for its fields",
                        payload.len()
                    )
                },
            )
        };
        Ok(Some(match kind {
            KIND_PAGES_TABLE => {
                EngineRecord::Pages { tag: TAG_TABLE, format: MtrFormat::Fixed, mtr: payload }
            }
            KIND_PAGES_INDEX => {
                EngineRecord::Pages { tag: TAG_INDEX, format: MtrFormat::Fixed, mtr: payload }
            }
            KIND_MTR_TABLE => {
                EngineRecord::Pages { tag: TAG_TABLE, format: MtrFormat::Compact, mtr: payload }
            }
            KIND_MTR_INDEX => {
                EngineRecord::Pages { tag: TAG_INDEX, format: MtrFormat::Compact, mtr: payload }
            }
            KIND_COMMIT => EngineRecord::Commit { txn: word(0)? },
            KIND_ABORT => EngineRecord::Abort { txn: word(0)? },
            KIND_CHECKPOINT => EngineRecord::Checkpoint { redo: word(0)?, undo: word(1)? },
            KIND_RECOVERY => EngineRecord::Recovery(RecoveryRecord {
                redo_from: word(0)?,
                log_end: word(1)?,
                records: word(2)?,
                pages_redone: word(3)?,
                full_images: word(4)?,
                losers: word(5)?,
                ops_undone: word(6)?,
                micros: word(7)?,
            }),
            KIND_CATALOG => EngineRecord::Catalog(payload),
            _ => return Ok(None),
        }))
    }
}

/// A short name of an engine record kind, for reports (`"?"` for a kind that is not the
/// engine's).
pub fn kind_name(kind: u8) -> &'static str {
    match kind {
        KIND_PAGES_TABLE => "table page changes (fixed)",
        KIND_PAGES_INDEX => "index page changes (fixed)",
        KIND_MTR_TABLE => "table page changes",
        KIND_MTR_INDEX => "index page changes",
        KIND_COMMIT => "commit",
        KIND_ABORT => "abort",
        KIND_CHECKPOINT => "checkpoint",
        KIND_RECOVERY => "recovery",
        KIND_CATALOG => "catalog",
        _ => "?",
    }
}

/// Pool tag of the table pool in page-change records.
pub const TAG_TABLE: u8 = 0;
/// Pool tag of the index pool.
pub const TAG_INDEX: u8 = 1;

/// The record kind the engine writes page changes of the pool tagged `tag` in (compact).
pub fn kind_for_tag(tag: u8) -> u8 {
    if tag == TAG_TABLE {
        KIND_MTR_TABLE
    } else {
        KIND_MTR_INDEX
    }
}

/// The engine's log: a [`RecordLog`] plus the checkpoint horizon.
pub struct EngineLog {
    log: Arc<dyn RecordLog>,
    /// Redo start of the last checkpoint; guarded for the page-change decision by `horizon_lock`.
    horizon: AtomicU64,
    horizon_lock: RwLock<()>,
    /// Whether a page's first change after a checkpoint is logged as a full image.
    full_page_images: bool,
    /// The end of the log when it was opened: every page on disk then must be at or below it.
    opened_end: Lsn,
    /// Whether pages read later are checked against the log's end (off when the user accepted
    /// a lost log).
    check_page_lsns: bool,
}

impl EngineLog {
    /// Wraps an open log. No page change is logged as a full image (torn pages are repaired
    /// from the double-write area) unless [`EngineLog::with_full_page_images`] says so.
    pub fn new(log: Arc<dyn RecordLog>) -> Self {
        let opened_end = log.end_lsn();
        Self {
            log,
            horizon: AtomicU64::new(opened_end),
            horizon_lock: RwLock::new(()),
            full_page_images: false,
            opened_end,
            check_page_lsns: true,
        }
    }

    /// Logs the first change of a page after each checkpoint as a full image (and after the
    /// open: pages whose LSN is at or below the end of the log then), which is then what
    /// repairs a page torn by a crash (PostgreSQL's full_page_writes).
    pub fn with_full_page_images(mut self) -> Self {
        self.full_page_images = true;
        self
    }

    /// Stops checking pages read from devices against the end of the log (a database opened
    /// with `Options::accept_lost_log`).
    pub fn accept_lost_log(mut self) -> Self {
        self.check_page_lsns = false;
        self
    }

    /// The underlying record log.
    pub fn record_log(&self) -> &Arc<dyn RecordLog> {
        &self.log
    }

    /// Appends a record of an engine kind; returns its end LSN.
    pub fn append(&self, kind: u8, payload: &[u8]) -> Result<Lsn> {
        let end = self.log.append_record(kind, payload)?.1;
        super::volume::count(kind, payload.len());
        Ok(end)
    }

    /// Waits until the log is durable up to `lsn`.
    pub fn wait_durable(&self, lsn: Lsn) -> Result<()> {
        if self.log.durable_lsn() < lsn {
            let _traced = crate::trace::span(crate::trace::TraceKind::LogWait);
            self.log.wait_durable(lsn)?;
        }
        Ok(())
    }

    /// Starts a checkpoint: raises the full-image horizon to the current end of the log and
    /// returns it (the checkpoint's redo start). Every page change logged after this returns
    /// uses the new horizon.
    pub fn begin_checkpoint(&self) -> Lsn {
        let _w = self.horizon_lock.write_locked();
        let end = self.log.end_lsn();
        self.horizon.store(end, Ordering::Release);
        end
    }

    /// The current full-image horizon.
    pub fn horizon(&self) -> Lsn {
        self.horizon.load(Ordering::Acquire)
    }
}

impl PageLogger for EngineLog {
    fn log_page_changes(&self, pool_tag: u8, build: &mut dyn FnMut(Option<u64>) -> Vec<u8>) -> Result<u64> {
        let _r = self.full_page_images.then(|| self.horizon_lock.read_locked());
        let payload = build(self.full_page_images.then(|| self.horizon.load(Ordering::Acquire)));
        let kind = kind_for_tag(pool_tag);
        let end = self.log.append_record(kind, &payload)?.1;
        super::volume::count(kind, payload.len());
        Ok(end)
    }

    fn wait_for_space(&self) {
        // A failure (a poisoned log) shows where it matters: at the append.
        let _ = self.log.wait_for_space();
    }

    fn apply_page_ops(&self, page: &mut [u8], ops: &[u8]) -> std::result::Result<(), String> {
        crate::btree::apply_page_ops(page, ops)
    }
}

impl WalGate for EngineLog {
    fn ensure_durable(&self, lsn: u64) -> Result<()> {
        self.wait_durable(lsn)
    }

    fn page_lsn_limit(&self) -> u64 {
        if !self.check_page_lsns {
            return u64::MAX;
        }
        // A page written back since the open waited for the log to be durable up to its LSN.
        self.opened_end.max(self.log.durable_lsn())
    }
}

/// Transaction bookkeeping over the engine log: ids, the set of active transactions (for the
/// checkpoint's undo start), and commit/abort records.
pub struct TxnLog {
    log: Arc<EngineLog>,
    next_txn: AtomicU64,
    active: Mutex<BTreeMap<u64, Lsn>>,
}

impl TxnLog {
    /// Hands out ids above `last_txn`.
    pub fn new(log: Arc<EngineLog>, last_txn: u64) -> Self {
        Self { log, next_txn: AtomicU64::new(last_txn + 1), active: Mutex::new(BTreeMap::new()) }
    }

    /// The engine log.
    pub fn log(&self) -> &Arc<EngineLog> {
        &self.log
    }

    /// Starts a transaction.
    pub fn begin(&self) -> u64 {
        let id = self.next_txn.fetch_add(1, Ordering::Relaxed);
        let first = self.log.record_log().end_lsn();
        self.active.locked().insert(id, first);
        id
    }

    /// Logs the commit and waits until it is durable (group commit shares the flush).
    pub fn commit(&self, txn: u64) -> Result<()> {
        self.log.wait_durable(self.append_commit(txn)?)
    }

    /// Appends the commit record (the transaction leaves the active set) without waiting;
    /// returns its end LSN, which the caller waits for before it acknowledges the commit.
    pub fn append_commit(&self, txn: u64) -> Result<Lsn> {
        let end = self.log.append(KIND_COMMIT, &EngineRecord::Commit { txn }.encode());
        self.forget(txn);
        end
    }

    /// Logs that the transaction's changes were undone.
    pub fn abort(&self, txn: u64) -> Result<()> {
        let r = self.log.append(KIND_ABORT, &EngineRecord::Abort { txn }.encode());
        self.forget(txn);
        r.map(|_| ())
    }

    /// Ends a transaction that logged nothing.
    pub fn forget(&self, txn: u64) {
        self.active.locked().remove(&txn);
    }

    /// Log position from which every active transaction's operations can be read.
    pub fn oldest_active_lsn(&self) -> Option<Lsn> {
        self.active.locked().values().min().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_records_round_trip_and_short_payloads_are_errors() {
        let r = RecoveryRecord {
            redo_from: 1,
            log_end: 2,
            records: 3,
            pages_redone: 4,
            full_images: 5,
            losers: 6,
            ops_undone: 7,
            micros: 8,
        };
        let recs = [
            EngineRecord::Pages { tag: TAG_TABLE, format: MtrFormat::Fixed, mtr: &[1, 2, 3] },
            EngineRecord::Pages { tag: TAG_INDEX, format: MtrFormat::Fixed, mtr: &[] },
            EngineRecord::Pages { tag: TAG_TABLE, format: MtrFormat::Compact, mtr: &[4] },
            EngineRecord::Pages { tag: TAG_INDEX, format: MtrFormat::Compact, mtr: &[5, 6] },
            EngineRecord::Commit { txn: 42 },
            EngineRecord::Abort { txn: u64::MAX },
            EngineRecord::Checkpoint { redo: 100, undo: 90 },
            EngineRecord::Recovery(r),
            EngineRecord::Catalog(&[9; 20]),
        ];
        for rec in recs {
            let payload = rec.encode();
            assert_eq!(EngineRecord::decode(rec.kind(), &payload), Ok(Some(rec.clone())));
            if matches!(
                rec,
                EngineRecord::Commit { .. } | EngineRecord::Checkpoint { .. } | EngineRecord::Recovery(_)
            ) {
                let e = EngineRecord::decode(rec.kind(), &payload[..payload.len() - 1]).unwrap_err();
                assert!(e.contains("too short"), "{e}");
            }
        }
        assert_eq!(EngineRecord::decode(KIND_USER_MIN + 100, &[1]), Ok(None));
    }
}
