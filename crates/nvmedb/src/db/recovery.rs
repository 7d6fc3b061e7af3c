//! Crash recovery: redo page changes from the last checkpoint, find the transactions that did
//! not finish.
//!
//! Owns: the redo pass. It reads the log from the checkpoint's undo start, applies every page
//! change at or after the redo start whose LSN is above the page's LSN (full images repair torn
//! pages; a diff on a page that is neither valid nor preceded by a full image is corruption),
//! writes the repaired pages back and syncs them, and returns each unfinished transaction's
//! logical operations for the undo pass (which runs through the tables once they are open).
//! Invariant: redo is idempotent — running it twice, or crashing during it, is harmless.

use crate::buffer::mtr::{apply_page_change, decode_mtr, PageChange};
use crate::error::{Error, Result};
use crate::io::{AlignedBuf, Device, Storage};
use crate::page::PageHeader;
use crate::table::catalog::CatalogData;
use crate::wal::engine::{
    TxnOp, KIND_ABORT, KIND_CHECKPOINT, KIND_COMMIT, KIND_PAGES_INDEX, KIND_PAGES_TABLE, TAG_INDEX, TAG_TABLE,
};
use crate::wal::{Lsn, RecordLog};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

/// Pages kept in memory during redo before they are written back.
const REDO_CACHE_PAGES: usize = 16 * 1024;

/// What recovery did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Where redo started.
    pub redo_from: Lsn,
    /// End of the log found.
    pub log_end: Lsn,
    /// Log records read.
    pub records: u64,
    /// Page changes applied (the rest were already on disk).
    pub pages_redone: u64,
    /// Full page images applied.
    pub full_images_applied: u64,
    /// Transactions that had not committed and were rolled back.
    pub losers: u64,
    /// Their operations undone.
    pub ops_undone: u64,
    /// Wall time of opening the log, redo and undo, microseconds.
    pub micros: u64,
}

/// Unfinished transactions and their operations, oldest first.
pub(crate) type Losers = BTreeMap<u64, Vec<TxnOp>>;

struct CachedPage {
    buf: AlignedBuf,
    valid: bool,
    dirty: bool,
}

struct PageCache<'a> {
    storage: &'a dyn Storage,
    /// Pages must not be newer than this (the end of the log), unless a lost log was accepted.
    lsn_limit: u64,
    table_page: usize,
    index_page: usize,
    pages: HashMap<(u8, u32, u64), CachedPage>,
    devices: HashMap<(u8, u32), Arc<dyn Device>>,
}

impl PageCache<'_> {
    fn device(&mut self, tag: u8, file: u32) -> Result<Arc<dyn Device>> {
        if let Some(d) = self.devices.get(&(tag, file)) {
            return Ok(d.clone());
        }
        let name = if tag == TAG_TABLE { format!("t{file}.heap") } else { format!("t{file}.idx") };
        let d = self.storage.open(&name, true)?;
        self.devices.insert((tag, file), d.clone());
        Ok(d)
    }

    fn page(&mut self, tag: u8, file: u32, page: u64) -> Result<&mut CachedPage> {
        if !self.pages.contains_key(&(tag, file, page)) {
            if self.pages.len() >= REDO_CACHE_PAGES {
                self.write_back()?;
                self.pages.clear();
            }
            let ps = if tag == TAG_TABLE { self.table_page } else { self.index_page };
            let dev = self.device(tag, file)?;
            let mut buf = AlignedBuf::new(ps);
            let offset = page * ps as u64;
            let mut valid = false;
            if offset + ps as u64 <= dev.capacity() {
                dev.read_at(offset, &mut buf)?;
                valid = PageHeader::verify(&buf, &dev.info().name, offset, file, page).is_ok();
                let lsn = PageHeader::lsn_of(&buf);
                if valid && lsn > self.lsn_limit {
                    return Err(Error::Corruption {
                        file: dev.info().name,
                        offset,
                        detail: format!(
                            "page {page} has LSN {lsn}, beyond the end of the log ({}): log records this \
                             page depends on were lost (Options::accept_lost_log opens anyway, accepting \
                             the loss)",
                            self.lsn_limit
                        ),
                    });
                }
            }
            self.pages.insert((tag, file, page), CachedPage { buf, valid, dirty: false });
        }
        Ok(self.pages.get_mut(&(tag, file, page)).expect("inserted above"))
    }

    fn write_back(&mut self) -> Result<()> {
        let mut keys: Vec<(u8, u32, u64)> =
            self.pages.iter().filter(|(_, p)| p.dirty).map(|(k, _)| *k).collect();
        keys.sort_unstable();
        for (tag, file, page) in keys {
            let dev = self.device(tag, file)?;
            let p = self.pages.get_mut(&(tag, file, page)).expect("listed");
            PageHeader::seal(&mut p.buf);
            dev.write_at(page * p.buf.len() as u64, &p.buf)?;
            p.dirty = false;
        }
        for dev in self.devices.values() {
            dev.sync()?;
        }
        Ok(())
    }
}

/// Redo pass. Returns the unfinished transactions, the largest transaction id seen, and a
/// report (undo counters filled in by the caller).
pub(crate) fn redo(
    storage: &dyn Storage,
    catalog: &CatalogData,
    log: &dyn RecordLog,
    accept_lost_log: bool,
) -> Result<(Losers, u64, RecoveryReport)> {
    let started = Instant::now();
    let recovered = &log.recovered();
    if recovered.created {
        // A new log: nothing to redo or undo.
        return Ok((
            BTreeMap::new(),
            0,
            RecoveryReport { redo_from: recovered.end_lsn, log_end: recovered.end_lsn, ..Default::default() },
        ));
    }
    // The end of the log as it stands (a standby's log has grown since it was opened).
    let log_end = recovered.end_lsn.max(log.end_lsn());
    if catalog.checkpoint_redo_lsn > log_end && !accept_lost_log {
        return Err(Error::Corruption {
            file: "write-ahead log".into(),
            offset: log_end,
            detail: format!(
                "the catalog's last checkpoint starts redo at LSN {}, beyond the end of the log found at {}: \
                 log records were lost (Options::accept_lost_log opens anyway, accepting the loss)",
                catalog.checkpoint_redo_lsn, log_end
            ),
        });
    }
    let redo_from = catalog.checkpoint_redo_lsn.max(recovered.start_lsn).min(log_end);
    let read_from = catalog.checkpoint_undo_lsn.max(recovered.start_lsn).min(redo_from);
    let mut report = RecoveryReport { redo_from, log_end: recovered.end_lsn, ..Default::default() };
    let mut cache = PageCache {
        storage,
        lsn_limit: if accept_lost_log { u64::MAX } else { log_end },
        table_page: catalog.table_page_size as usize,
        index_page: catalog.index_page_size as usize,
        pages: HashMap::new(),
        devices: HashMap::new(),
    };
    let live: std::collections::HashSet<u32> = catalog.tables.iter().map(|t| t.id).collect();
    let mut ops: Losers = BTreeMap::new();
    let mut max_txn = 0u64;
    let mut reader = log.reader(read_from)?;
    while let Some(rec) = reader.next_record()? {
        report.records += 1;
        match rec.kind {
            KIND_PAGES_TABLE | KIND_PAGES_INDEX => {
                let tag = if rec.kind == KIND_PAGES_TABLE { TAG_TABLE } else { TAG_INDEX };
                let m = decode_mtr(&rec.payload).ok_or_else(|| Error::Corruption {
                    file: "write-ahead log".into(),
                    offset: rec.lsn,
                    detail: "page-change record does not decode".into(),
                })?;
                let ps = if tag == TAG_TABLE { cache.table_page } else { cache.index_page };
                if m.page_size != ps {
                    return Err(Error::Corruption {
                        file: "write-ahead log".into(),
                        offset: rec.lsn,
                        detail: format!(
                            "page-change record for {}-byte pages in a database of {ps}-byte pages",
                            m.page_size
                        ),
                    });
                }
                if let Some(a) = &m.annotation {
                    let op = TxnOp::decode(a)?;
                    max_txn = max_txn.max(op.txn);
                    ops.entry(op.txn).or_default().push(op);
                }
                if rec.lsn < redo_from {
                    continue;
                }
                for (pid, change) in &m.changes {
                    if !live.contains(&pid.file) {
                        // A dropped table, or one rebuilt but not yet switched in: its files
                        // are gone or about to be removed.
                        continue;
                    }
                    let p = cache.page(tag, pid.file, pid.page)?;
                    let full = matches!(change, PageChange::FullImage(_));
                    if p.valid && PageHeader::lsn_of(&p.buf) >= rec.end_lsn {
                        continue;
                    }
                    if !p.valid && !full {
                        return Err(Error::Corruption {
                            file: format!("{} page {}", if tag == TAG_TABLE { "heap" } else { "index" }, pid),
                            offset: rec.lsn,
                            detail:
                                "page is unreadable (torn or missing) and the log holds no full image of it \
                                     before this change"
                                    .into(),
                        });
                    }
                    apply_page_change(&mut p.buf, change, rec.end_lsn);
                    p.valid = true;
                    p.dirty = true;
                    report.pages_redone += 1;
                    report.full_images_applied += u64::from(full);
                }
            }
            KIND_COMMIT | KIND_ABORT => {
                let txn =
                    u64::from_le_bytes(rec.payload.get(..8).and_then(|b| b.try_into().ok()).ok_or_else(
                        || Error::Corruption {
                            file: "write-ahead log".into(),
                            offset: rec.lsn,
                            detail: "short commit record".into(),
                        },
                    )?);
                max_txn = max_txn.max(txn);
                ops.remove(&txn);
            }
            KIND_CHECKPOINT => {}
            _ => {}
        }
    }
    cache.write_back()?;
    report.losers = ops.len() as u64;
    report.micros = started.elapsed().as_micros() as u64;
    Ok((ops, max_txn, report))
}
