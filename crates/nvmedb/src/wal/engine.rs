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
use crate::error::{Error, Result};
use crate::util::bytes::{ByteReader, ByteWriter};
use crate::util::sync::{MutexExt, RwLockExt};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

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

/// One logical operation of a transaction, logged with the first page change it makes, so
/// recovery can undo it if the transaction did not commit.
///
/// In memory (a transaction's undo list) an operation holds whole rows. In the log, an update
/// that keeps the row's length (it is then rewritten in place) is logged lean, as a
/// [`RowPatch`]: only the changed bytes, before and after; [`TxnOp::decode`] gives such an
/// operation back with `patch` set and no rows, and [`TxnOp::resolve`] turns it into whole
/// rows again against the row the table holds for the key at undo time (which is the row
/// before or after the update: every byte outside the patch is the same in both).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnOp {
    /// Transaction id.
    pub txn: u64,
    /// Table id.
    pub table: u32,
    /// Encoded primary key.
    pub pk: Vec<u8>,
    /// Row id the operation started from or created (`u64::MAX` if none yet).
    pub rid: u64,
    /// The row before the operation (`None`: the key was absent — an insert — or the
    /// operation is a `patch`).
    pub before: Option<Vec<u8>>,
    /// The row after the operation (`None`: a delete, or the operation is a `patch`).
    pub after: Option<Vec<u8>>,
    /// A same-length update as logged: its changed bytes (then `before` and `after` are
    /// `None` until [`TxnOp::resolve`]).
    pub patch: Option<RowPatch>,
}

/// The bytes an update of a row changed, without the rest of the row: the row's length and,
/// for each changed range, its offset, its bytes before and its bytes after. Ranges are
/// sorted, disjoint, and separated by at least [`PATCH_MERGE_GAP`] unchanged bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowPatch {
    /// Length of the row before and after.
    pub len: u32,
    /// `(offset, before, after)`, `before.len() == after.len()`.
    pub ranges: Vec<(u32, Vec<u8>, Vec<u8>)>,
}

/// Unchanged gaps shorter than this between two changed ranges of a row are folded into one
/// range (each range costs 6 bytes of framing).
pub const PATCH_MERGE_GAP: usize = 8;

/// Annotation kind of an operation logged with whole rows, fixed-width fields (log format 2).
const OP_ROWS: u8 = 1;
/// Annotation kind of an update logged as a [`RowPatch`], fixed-width fields (log format 2).
const OP_PATCH: u8 = 2;
/// [`OP_ROWS`] with varint numbers and lengths (log format 3; what the engine writes).
const OP_ROWS_V: u8 = 3;
/// [`OP_PATCH`] with varint numbers and lengths (log format 3; what the engine writes).
const OP_PATCH_V: u8 = 4;

impl RowPatch {
    /// The bytes changed from `before` to `after`; `None` when their lengths differ (the row
    /// may move: such an update is logged with whole rows) or exceed 64 KiB.
    pub fn diff(before: &[u8], after: &[u8]) -> Option<Self> {
        if before.len() != after.len() || before.len() > u16::MAX as usize {
            return None;
        }
        let mut ranges: Vec<(u32, Vec<u8>, Vec<u8>)> = Vec::new();
        let mut i = 0;
        while i < before.len() {
            if before[i] == after[i] {
                i += 1;
                continue;
            }
            let start = i;
            let mut end = i + 1;
            // Extend over changes separated by short unchanged gaps.
            let mut j = end;
            while j < before.len() && j - end < PATCH_MERGE_GAP {
                if before[j] != after[j] {
                    end = j + 1;
                }
                j += 1;
            }
            ranges.push((start as u32, before[start..end].to_vec(), after[start..end].to_vec()));
            i = end;
        }
        Some(Self { len: before.len() as u32, ranges })
    }

    /// `row` with every range set to its `before` (`want_after` false) or `after` bytes;
    /// `None` if `row` has another length or a range lies outside it.
    pub fn apply(&self, row: &[u8], want_after: bool) -> Option<Vec<u8>> {
        if row.len() != self.len as usize {
            return None;
        }
        let mut out = row.to_vec();
        for (off, b, a) in &self.ranges {
            let bytes = if want_after { a } else { b };
            out.get_mut(*off as usize..*off as usize + bytes.len())?.copy_from_slice(bytes);
        }
        Some(out)
    }

    /// Bytes of the changed ranges (before and after).
    pub fn changed_bytes(&self) -> usize {
        self.ranges.iter().map(|(_, b, a)| b.len() + a.len()).sum()
    }
}

impl TxnOp {
    /// Encodes for an annotation: an update that changes a row but keeps its length as a
    /// [`RowPatch`] (unless the patch would not be smaller), anything else with whole rows;
    /// numbers and lengths as varints.
    pub fn encode(&self) -> Vec<u8> {
        let computed;
        let patch = match (&self.patch, &self.before, &self.after) {
            (Some(p), _, _) => Some(p),
            (None, Some(b), Some(a)) => {
                // Not for an unchanged row (an undo that rewrites a row logs it whole): a patch
                // needs a change to tell the row before from the row after.
                computed = RowPatch::diff(b, a)
                    .filter(|p| !p.ranges.is_empty() && p.changed_bytes() + 6 * p.ranges.len() < 2 * b.len());
                computed.as_ref()
            }
            _ => None,
        };
        let rows = self.before.as_ref().map_or(0, Vec::len) + self.after.as_ref().map_or(0, Vec::len);
        let mut out = Vec::with_capacity(24 + self.pk.len() + rows);
        let mut w = ByteWriter::to(&mut out);
        if let Some(p) = patch {
            w.u8(OP_PATCH_V);
            w.var(self.txn).var(u64::from(self.table)).var(self.rid.wrapping_add(1));
            w.var_bytes(&self.pk);
            w.var(u64::from(p.len)).var(p.ranges.len() as u64);
            let mut prev_end = 0u64;
            for (off, b, a) in &p.ranges {
                // Ranges are sorted and disjoint; a malformed patch wraps here and fails to decode.
                w.var(u64::from(*off).wrapping_sub(prev_end)).var(b.len() as u64).bytes(b).bytes(a);
                prev_end = u64::from(*off) + b.len() as u64;
            }
            return out;
        }
        w.u8(OP_ROWS_V);
        w.var(self.txn).var(u64::from(self.table)).var(self.rid.wrapping_add(1));
        w.var_bytes(&self.pk);
        for part in [self.before.as_ref(), self.after.as_ref()] {
            // 0: absent; else the length plus one, then the bytes.
            match part {
                Some(b) => w.var(b.len() as u64 + 1).bytes(b),
                None => w.var(0),
            };
        }
        out
    }

    /// Decodes [`TxnOp::encode`] and the fixed-width encoding of earlier logs (a lean update
    /// comes back with `patch` set).
    pub fn decode(b: &[u8]) -> Result<Self> {
        let bad = || Error::InvalidArgument("malformed transaction operation in the log".into());
        let mut r = ByteReader::new(b);
        let kind = r.u8().ok_or_else(bad)?;
        let var_u32 = |r: &mut ByteReader<'_>| r.var().and_then(|v| u32::try_from(v).ok()).ok_or_else(bad);
        let (txn, table, rid, pk) = match kind {
            OP_ROWS | OP_PATCH => {
                let txn = r.u64().ok_or_else(bad)?;
                let table = r.u32().ok_or_else(bad)?;
                let rid = r.u64().ok_or_else(bad)?;
                let pk = if kind == OP_PATCH {
                    let n = r.u32().ok_or_else(bad)? as usize;
                    Some(r.take(n).ok_or_else(bad)?.to_vec())
                } else {
                    None
                };
                (txn, table, rid, pk)
            }
            OP_ROWS_V | OP_PATCH_V => {
                let txn = r.var().ok_or_else(bad)?;
                let table = var_u32(&mut r)?;
                let rid = r.var().ok_or_else(bad)?.wrapping_sub(1);
                (txn, table, rid, Some(r.var_bytes().ok_or_else(bad)?.to_vec()))
            }
            _ => return Err(bad()),
        };
        if kind == OP_PATCH || kind == OP_PATCH_V {
            let pk = pk.ok_or_else(bad)?;
            let fixed = kind == OP_PATCH;
            let len = if fixed { r.u32().ok_or_else(bad)? } else { var_u32(&mut r)? };
            let count = if fixed { r.u32().ok_or_else(bad)? as usize } else { var_u32(&mut r)? as usize };
            let mut ranges = Vec::with_capacity(count.min(b.len()));
            let mut end = 0u64;
            for _ in 0..count {
                let (off, n) = if fixed {
                    (u64::from(r.u32().ok_or_else(bad)?), r.u16().ok_or_else(bad)? as usize)
                } else {
                    let gap = r.var().ok_or_else(bad)?;
                    (end.checked_add(gap).ok_or_else(bad)?, r.var().ok_or_else(bad)? as usize)
                };
                let before = r.take(n).ok_or_else(bad)?.to_vec();
                let after = r.take(n).ok_or_else(bad)?.to_vec();
                // Sorted, disjoint ranges inside the row.
                if off < end || off + n as u64 > u64::from(len) {
                    return Err(bad());
                }
                end = off + n as u64;
                ranges.push((off as u32, before, after));
            }
            if !fixed && r.remaining() != 0 {
                return Err(bad());
            }
            let patch = Some(RowPatch { len, ranges });
            return Ok(Self { txn, table, pk, rid, before: None, after: None, patch });
        }
        let mut parts: Vec<Option<Vec<u8>>> = Vec::new();
        if kind == OP_ROWS {
            for _ in 0..3 {
                if r.u8().ok_or_else(bad)? == 1 {
                    let n = r.u32().ok_or_else(bad)? as usize;
                    parts.push(Some(r.take(n).ok_or_else(bad)?.to_vec()));
                } else {
                    parts.push(None);
                }
            }
        } else {
            parts.push(pk);
            for _ in 0..2 {
                let n = r.var().ok_or_else(bad)?;
                parts.push(match n {
                    0 => None,
                    n => Some(r.take(usize::try_from(n - 1).map_err(|_| bad())?).ok_or_else(bad)?.to_vec()),
                });
            }
        }
        if r.remaining() != 0 && kind == OP_ROWS_V {
            return Err(bad());
        }
        let after = parts.pop().ok_or_else(bad)?;
        let before = parts.pop().ok_or_else(bad)?;
        let pk = parts.pop().flatten().ok_or_else(bad)?;
        Ok(Self { txn, table, pk, rid, before, after, patch: None })
    }

    /// The operation with whole rows: itself if it has them, else its patch applied to `row`,
    /// the key's row at undo time (the row before or after the update). `None` if a patch
    /// cannot be applied (no row, or one of another length).
    pub fn resolve(&self, row: Option<&[u8]>) -> Option<std::borrow::Cow<'_, TxnOp>> {
        let Some(p) = &self.patch else { return Some(std::borrow::Cow::Borrowed(self)) };
        let row = row?;
        Some(std::borrow::Cow::Owned(TxnOp {
            before: Some(p.apply(row, false)?),
            after: Some(p.apply(row, true)?),
            patch: None,
            ..self.clone()
        }))
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

    #[test]
    fn txn_ops_round_trip() {
        let ops = [
            TxnOp {
                txn: 7,
                table: 2,
                pk: vec![1, 2],
                rid: 99,
                before: None,
                after: Some(vec![5; 10]),
                patch: None,
            },
            TxnOp {
                txn: 8,
                table: 0,
                pk: vec![3],
                rid: u64::MAX,
                before: Some(vec![1]),
                after: None,
                patch: None,
            },
            // An update that changes the row's length keeps whole rows.
            TxnOp {
                txn: 9,
                table: 1,
                pk: vec![4],
                rid: 5,
                before: Some(vec![1; 8]),
                after: Some(vec![2; 9]),
                patch: None,
            },
        ];
        for op in ops {
            let enc = op.encode();
            assert_eq!(TxnOp::decode(&enc).unwrap(), op);
            assert!(enc.len() < fixed_rows(&op).len(), "varints are shorter than fixed fields");
            // Logs of format 2 hold fixed-width operations: they still decode.
            assert_eq!(TxnOp::decode(&fixed_rows(&op)).unwrap(), op);
            for cut in 0..enc.len() {
                assert!(TxnOp::decode(&enc[..cut]).is_err(), "cut at {cut}");
            }
        }
        assert!(TxnOp::decode(&[1, 2, 3]).is_err());
        assert!(TxnOp::decode(&[9; 40]).is_err(), "unknown operation kind");
    }

    /// The fixed-width encoding of whole-row operations that log format 2 wrote.
    fn fixed_rows(op: &TxnOp) -> Vec<u8> {
        let mut out = Vec::new();
        let mut w = ByteWriter::to(&mut out);
        w.u8(OP_ROWS).u64(op.txn).u32(op.table).u64(op.rid);
        for part in [Some(&op.pk), op.before.as_ref(), op.after.as_ref()] {
            match part {
                Some(b) => w.u8(1).u32(b.len() as u32).bytes(b),
                None => w.u8(0),
            };
        }
        out
    }

    #[test]
    fn same_length_updates_are_logged_as_patches_and_resolve_against_either_row() {
        let before: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        let mut after = before.clone();
        after[100..108].copy_from_slice(&42u64.to_le_bytes());
        after[110] ^= 1; // within the merge gap: one range
        after[4000] ^= 0xff; // a second range
        let op = TxnOp {
            txn: 3,
            table: 4,
            pk: vec![9, 9],
            rid: 77,
            before: Some(before.clone()),
            after: Some(after.clone()),
            patch: None,
        };
        let bytes = op.encode();
        assert!(bytes.len() < 100, "a one-integer update logs {} bytes", bytes.len());
        let logged = TxnOp::decode(&bytes).unwrap();
        let p = logged.patch.as_ref().expect("logged as a patch");
        assert_eq!((p.len, p.ranges.len()), (4096, 2));
        assert_eq!((logged.before.as_ref(), logged.after.as_ref()), (None, None));
        // Re-encoding a decoded patch gives the same bytes.
        assert_eq!(logged.encode(), bytes);
        // Whichever row the table holds at undo time, the whole operation comes back.
        for row in [&before, &after] {
            assert_eq!(*logged.resolve(Some(row)).unwrap(), op);
        }
        assert!(logged.resolve(None).is_none());
        assert!(logged.resolve(Some(&before[1..])).is_none(), "a row of another length");
        // A full op resolves to itself.
        assert_eq!(*op.resolve(None).unwrap(), op);
        // Truncations and overlapping ranges are errors, not panics.
        for n in 0..bytes.len() {
            assert!(TxnOp::decode(&bytes[..n]).is_err(), "prefix of {n} bytes");
        }
        let overlapping =
            RowPatch { len: 10, ranges: vec![(2, vec![0; 4], vec![1; 4]), (4, vec![0], vec![1])] };
        let bad = TxnOp { patch: Some(overlapping), before: None, after: None, ..op.clone() };
        assert!(TxnOp::decode(&bad.encode()).is_err());
        // An update that changes most bytes is logged whole (no gain from a patch).
        let other: Vec<u8> = before.iter().map(|b| b ^ 0x55).collect();
        let whole = TxnOp { after: Some(other), ..op };
        assert_eq!(TxnOp::decode(&whole.encode()).unwrap(), whole);
    }
}
