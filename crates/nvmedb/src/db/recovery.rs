//! Crash recovery: redo page changes from the last checkpoint, find the transactions that did
//! not finish.
//!
//! Owns: the redo pass and [`RedoPages`], the page cache redo works in (also a standby's). A
//! reader thread (`nvmedb-redo-read`) reads and decodes the log in windows of records
//! ([`REDO_WINDOW_RECORDS`]), up to [`REDO_READ_AHEAD_WINDOWS`] ahead, while the calling thread
//! applies them: it reads the pages a window's changes touch that are not cached in one batch
//! (io_uring where the device has it) before applying them, so redo waits for the disk once per
//! window rather than once per page, and never for the log unless the reader falls behind. It
//! reads the log from the checkpoint's undo start, applies every page
//! change at or after the redo start whose LSN is above the page's LSN (pages torn by the crash
//! were restored from the double-write area before redo, [`repair_torn_pages`]; full images,
//! when the log holds them, and new pages' first changes apply to unreadable pages; a diff on a
//! page that is neither valid nor preceded by one of those is corruption), writes the repaired
//! pages back (through the double-write area) and syncs them, and returns each unfinished transaction's
//! logical operations with their LSNs for the undo pass (which runs through the tables once
//! they are open, over every loser's operations at once in reverse LSN order).
//! Invariant: redo is idempotent — running it twice, or crashing during it, is harmless.

use super::{heap_name, index_name};
use crate::buffer::doublewrite::{self, DoubleWrite, DwPage, RepairReport};
use crate::buffer::mtr::{apply_page_change, MtrRecord, PageChange};
use crate::buffer::PageId;
use crate::error::{Error, Result};
use crate::io::{AlignedBuf, Device, Storage, DIRECT_IO_ALIGN};
use crate::page::PageHeader;
use crate::table::catalog::CatalogData;
use crate::wal::engine::{EngineRecord, TxnOp, TAG_INDEX, TAG_TABLE};
use crate::wal::{LogRecord, Lsn, RecordLog, RecordReader};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

/// Pages kept in memory during redo before they are written back.
const REDO_CACHE_PAGES: usize = 16 * 1024;

/// Log records read ahead of redo: the pages their changes touch are read in one batch.
pub(crate) const REDO_WINDOW_RECORDS: usize = 2048;

/// Windows of decoded records the reader thread may hold ready ahead of the applying thread.
const REDO_READ_AHEAD_WINDOWS: usize = 2;

/// Largest single read ([`RedoPages::prefetch`]) or write ([`RedoPages::write_back`]) of
/// consecutive pages.
const RUN_BYTES: usize = 1 << 20;

/// Dirty pages written back per batch (submitted together: io_uring where the device has it).
const WRITE_BACK_BATCH_PAGES: usize = 256;

/// A window of records, each with its page changes decoded.
type Window = Vec<(LogRecord, Decoded)>;

/// What redo needs of a record, decoded by the reader thread from its [`EngineRecord`].
pub(crate) enum Decoded {
    /// Page changes of the pool tagged `tag`.
    Pages {
        /// `TAG_TABLE` or `TAG_INDEX`.
        tag: u8,
        /// The changes and the transaction operation they carry.
        mtr: MtrRecord,
    },
    /// A transaction ended (committed or rolled back): it is not a loser.
    Ended(u64),
    /// A record redo passes over (checkpoint, recovery, catalog).
    Other,
}

/// Decodes a record for redo: every engine record kind is named here (a kind added to
/// [`EngineRecord`] must be), and a record of no engine kind is corruption.
pub(crate) fn decode_for_redo(rec: &LogRecord, table_page: usize, index_page: usize) -> Result<Decoded> {
    let corrupt =
        |detail: String| Error::Corruption { file: "write-ahead log".into(), offset: rec.lsn, detail };
    let decoded = EngineRecord::decode(rec.kind, &rec.payload).map_err(corrupt)?;
    Ok(match decoded {
        Some(EngineRecord::Pages { tag, format, mtr }) => {
            let ps = if tag == TAG_TABLE { table_page } else { index_page };
            let m =
                format.decode(mtr, ps).ok_or_else(|| corrupt("page-change record does not decode".into()))?;
            if m.page_size != ps {
                return Err(corrupt(format!(
                    "page-change record for {}-byte pages in a database of {ps}-byte pages",
                    m.page_size
                )));
            }
            Decoded::Pages { tag, mtr: m }
        }
        Some(EngineRecord::Commit { txn } | EngineRecord::Abort { txn }) => Decoded::Ended(txn),
        Some(EngineRecord::Checkpoint { .. } | EngineRecord::Recovery(_) | EngineRecord::Catalog(_)) => {
            Decoded::Other
        }
        None => return Err(corrupt(format!("a record of kind {} is none of the engine's", rec.kind))),
    })
}

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
    /// Pages torn by the crash, restored from the double-write area before redo.
    pub pages_restored: u64,
    /// Transactions that had not committed and were rolled back.
    pub losers: u64,
    /// Their operations undone.
    pub ops_undone: u64,
    /// Wall time of opening the log, redo and undo, microseconds.
    pub micros: u64,
    /// Of redo's time: waiting for the log reader's next window of decoded records, µs.
    pub redo_wait_log_micros: u64,
    /// Of redo's time: reading the pages a window changes, µs.
    pub redo_read_pages_micros: u64,
    /// Of redo's time: writing redone pages back (through the double-write area), µs.
    pub redo_write_back_micros: u64,
}

/// Unfinished transactions and their operations with each one's LSN, oldest first.
pub(crate) type Losers = BTreeMap<u64, Vec<(Lsn, TxnOp)>>;

struct CachedPage {
    /// Shared with a standby's read snapshots ([`RedoPages::dirty_pages`]): copied before it
    /// changes while one holds it.
    buf: Arc<AlignedBuf>,
    valid: bool,
    dirty: bool,
}

/// What [`RedoPages::apply`] did with one page change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Redo {
    /// The change was applied (`full`: it was a full page image).
    Applied {
        /// The change was a full page image.
        full: bool,
    },
    /// The page already holds the change (its LSN is at or past the record's end).
    AlreadyThere,
    /// The page is unreadable (torn or missing) and the change is a diff: it cannot be applied.
    Unappliable,
}

/// Where [`RedoPages`] finds a data file.
#[derive(Clone, Copy)]
pub(crate) enum PageFiles<'a> {
    /// Every data file is in one storage (a standby's data directory).
    One(&'a dyn Storage),
    /// Each table's files are in the tablespaces the catalog names for them.
    Placed(&'a super::tablespace::Spaces, &'a CatalogData),
}

/// Pages being redone, shared by crash recovery and a standby's continuous redo: each page is
/// read once from its data file, changed in memory, and written back in page order.
/// Invariant: a page's bytes change only through [`RedoPages::apply`], which applies a change
/// only to a page below the change's LSN, so applying a record twice changes nothing.
pub(crate) struct RedoPages<'a> {
    files: PageFiles<'a>,
    /// Pages must not be newer than this (the end of the log), unless a lost log was accepted.
    lsn_limit: u64,
    capacity: usize,
    pages: HashMap<(u8, u32, u64), CachedPage>,
    devices: HashMap<(u8, u32), Arc<dyn Device>>,
    /// Buffers of pages dropped by [`RedoPages::clear`], by size (heap and index pages may
    /// differ), reused for the next pages read.
    spare: HashMap<usize, Vec<AlignedBuf>>,
    /// Where [`RedoPages::write_back`] copies runs of consecutive pages to write each with one
    /// request.
    staging: Option<AlignedBuf>,
    /// The double-write area write-backs go through (none: pages are written in place only).
    doublewrite: Option<Arc<DoubleWrite>>,
    /// Keep each clean page's image as it was before its first change ([`RedoPages::keep_pre_images`]).
    keep_pre_images: bool,
    /// Those images, until taken ([`RedoPages::take_pre_images`]).
    pre_images: Vec<((u8, u32, u64), Arc<AlignedBuf>)>,
}

impl<'a> RedoPages<'a> {
    /// Pages of the data files `files` holds, at most `capacity` of them before
    /// [`RedoPages::needs_room`] says so; a page read with an LSN above `lsn_limit` is
    /// corruption (`u64::MAX` accepts any). Write-backs go through `doublewrite` when given.
    pub(crate) fn new(
        files: PageFiles<'a>,
        lsn_limit: u64,
        capacity: usize,
        doublewrite: Option<Arc<DoubleWrite>>,
    ) -> Self {
        Self {
            files,
            lsn_limit,
            capacity,
            pages: HashMap::new(),
            devices: HashMap::new(),
            spare: HashMap::new(),
            staging: None,
            doublewrite,
            keep_pre_images: false,
            pre_images: Vec::new(),
        }
    }

    /// From now on (`on`), [`RedoPages::apply`] keeps the image of each page it changes while
    /// the page is clean (its bytes are those of its data file: read from it, or written back
    /// to it since), taken before the change, for [`RedoPages::take_pre_images`]. A standby
    /// keeps them for its live read snapshots, so its write-back reads nothing back.
    pub(crate) fn keep_pre_images(&mut self, on: bool) {
        self.keep_pre_images = on;
    }

    /// The images kept since the last call (see [`RedoPages::keep_pre_images`]), keyed by
    /// (pool tag, file, page): each page's bytes in its data file before its change (zeros for
    /// a page that lay past the file's end).
    pub(crate) fn take_pre_images(&mut self) -> Vec<((u8, u32, u64), Arc<AlignedBuf>)> {
        std::mem::take(&mut self.pre_images)
    }

    fn device(&mut self, tag: u8, file: u32) -> Result<Arc<dyn Device>> {
        if let Some(d) = self.devices.get(&(tag, file)) {
            return Ok(d.clone());
        }
        let name = if tag == TAG_TABLE { heap_name(file) } else { index_name(file) };
        let d = match self.files {
            PageFiles::One(storage) => storage.open(&name, true)?,
            PageFiles::Placed(spaces, catalog) => spaces.for_file(catalog, tag, file)?.open(&name, true)?,
        };
        self.devices.insert((tag, file), d.clone());
        Ok(d)
    }

    /// True when page `page` of file `file` (pool `tag`) is not held and the cache is full: the
    /// caller writes back and [`clear`](RedoPages::clear)s first.
    pub(crate) fn needs_room(&self, tag: u8, file: u32, page: u64) -> bool {
        !self.pages.contains_key(&(tag, file, page)) && self.pages.len() >= self.capacity
    }

    /// A zeroed `page_size`-byte buffer: a spare one when there is one of that size.
    fn buffer(&mut self, page_size: usize) -> AlignedBuf {
        match self.spare.get_mut(&page_size).and_then(Vec::pop) {
            Some(mut b) => {
                b.fill(0);
                b
            }
            None => AlignedBuf::new(page_size),
        }
    }

    /// A `page_size`-byte buffer that a read is about to fill whole: a spare one (not zeroed)
    /// when there is one of that size.
    fn read_buffer(&mut self, page_size: usize) -> AlignedBuf {
        self.spare.get_mut(&page_size).and_then(Vec::pop).unwrap_or_else(|| AlignedBuf::new(page_size))
    }

    /// The staging buffer for runs of pages, at least `len` bytes (taken: put it back).
    fn staging(&mut self, len: usize) -> AlignedBuf {
        AlignedBuf::reuse_or_new(self.staging.take(), len.max(DIRECT_IO_ALIGN))
    }

    fn page(&mut self, tag: u8, file: u32, page: u64, page_size: usize) -> Result<&mut CachedPage> {
        if !self.pages.contains_key(&(tag, file, page)) {
            let dev = self.device(tag, file)?;
            let mut buf = self.buffer(page_size);
            let offset = page * page_size as u64;
            let read = offset + page_size as u64 <= dev.capacity();
            if read {
                dev.read_at(offset, &mut buf)?;
            }
            self.admit(tag, file, page, &*dev, buf, read)?;
        }
        Ok(self.pages.get_mut(&(tag, file, page)).expect("inserted above"))
    }

    /// Caches page `page` of `file` (pool `tag`) whose bytes `buf` were read from `dev`
    /// (`read` false: the page lies past the file's end): checks it and its LSN.
    fn admit(
        &mut self,
        tag: u8,
        file: u32,
        page: u64,
        dev: &dyn Device,
        buf: AlignedBuf,
        read: bool,
    ) -> Result<()> {
        let offset = page * buf.len() as u64;
        let mut valid = false;
        if read {
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
        self.pages.insert((tag, file, page), CachedPage { buf: Arc::new(buf), valid, dirty: false });
        Ok(())
    }

    /// Reads the pages of `wanted` (pool tag, file, page, page size) that are not cached, as
    /// many as fit, in one batch per file (submitted together: io_uring where the device has
    /// it, each page into its own buffer), so that applying the changes that follow does not wait for the disk page by page.
    /// Pages past a file's end are cached as unreadable, as [`RedoPages::apply`] would.
    pub(crate) fn prefetch(&mut self, wanted: &[(u8, u32, u64, usize)]) -> Result<()> {
        let mut room = self.capacity.saturating_sub(self.pages.len());
        let mut by_file: BTreeMap<(u8, u32), Vec<(u64, usize)>> = BTreeMap::new();
        let mut seen = std::collections::HashSet::new();
        for &(tag, file, page, ps) in wanted {
            if room == 0 {
                break;
            }
            if self.pages.contains_key(&(tag, file, page)) || !seen.insert((tag, file, page)) {
                continue;
            }
            by_file.entry((tag, file)).or_default().push((page, ps));
            room -= 1;
        }
        for ((tag, file), mut pages) in by_file {
            pages.sort_unstable();
            let ps = pages[0].1;
            let dev = self.device(tag, file)?;
            let cap = dev.capacity();
            let (inside, past): (Vec<u64>, Vec<u64>) =
                pages.iter().map(|&(p, _)| p).partition(|&p| (p + 1) * ps as u64 <= cap);
            // Each page is read straight into its own buffer (no staging copy), all of them in
            // one batch.
            let mut bufs: Vec<AlignedBuf> = inside.iter().map(|_| self.read_buffer(ps)).collect();
            {
                let mut reqs: Vec<crate::io::IoRequest<'_>> = bufs
                    .iter_mut()
                    .zip(&inside)
                    .map(|(b, &p)| crate::io::IoRequest::Read { offset: p * ps as u64, buf: &mut b[..] })
                    .collect();
                dev.submit_batch(&mut reqs)?;
            }
            for (buf, &p) in bufs.into_iter().zip(&inside) {
                self.admit(tag, file, p, &*dev, buf, true)?;
            }
            for p in past {
                let buf = self.buffer(ps);
                self.admit(tag, file, p, &*dev, buf, false)?;
            }
        }
        Ok(())
    }

    /// Applies `change` of the record ending at `end_lsn` to page `pid` of pool `tag`
    /// (`page_size`-byte pages), reading the page first if it is not held.
    pub(crate) fn apply(
        &mut self,
        tag: u8,
        pid: PageId,
        change: &PageChange,
        end_lsn: Lsn,
        page_size: usize,
    ) -> Result<Redo> {
        let keep = self.keep_pre_images;
        let p = self.page(tag, pid.file, pid.page, page_size)?;
        let full = matches!(change, PageChange::FullImage(_));
        if p.valid && PageHeader::lsn_of(&p.buf) >= end_lsn {
            return Ok(Redo::AlreadyThere);
        }
        if !p.valid && !change.is_whole() {
            return Ok(Redo::Unappliable);
        }
        // A clean page's bytes are its file's: shared here, they are copied by the change.
        let pre = (keep && !p.dirty).then(|| p.buf.clone());
        apply_page_change(
            &mut Arc::<AlignedBuf>::make_mut(&mut p.buf)[..],
            change,
            end_lsn,
            &crate::btree::apply_page_ops,
        )
        .map_err(|detail| Error::Corruption {
            file: if tag == TAG_TABLE { heap_name(pid.file) } else { index_name(pid.file) },
            offset: pid.page * page_size as u64,
            detail: format!(
                "page {}: the logged change ending at LSN {end_lsn} does not apply: {detail}",
                pid.page
            ),
        })?;
        p.valid = true;
        p.dirty = true;
        if let Some(pre) = pre {
            self.pre_images.push(((tag, pid.file, pid.page), pre));
        }
        Ok(Redo::Applied { full })
    }

    /// The pages changed since their last write-back, keyed by (pool tag, file, page), unsealed
    /// and shared: a standby's read snapshot holds them as they are now while redo goes on (a
    /// held page is copied before its next change).
    pub(crate) fn dirty_pages(&self) -> Vec<((u8, u32, u64), Arc<AlignedBuf>)> {
        self.pages.iter().filter(|(_, p)| p.dirty).map(|(k, p)| (*k, p.buf.clone())).collect()
    }

    /// True when some page changed since the last write-back.
    pub(crate) fn has_dirty(&self) -> bool {
        self.pages.values().any(|p| p.dirty)
    }

    /// Writes every changed page back (sealed, in file and page order, in batches of
    /// [`WRITE_BACK_BATCH_PAGES`] per file, each batch's copies first made durable in the
    /// double-write area when there is one), then syncs every data file read.
    pub(crate) fn write_back(&mut self) -> Result<()> {
        let mut keys: Vec<(u8, u32, u64)> =
            self.pages.iter().filter(|(_, p)| p.dirty).map(|(k, _)| *k).collect();
        keys.sort_unstable();
        for k in &keys {
            PageHeader::seal(
                &mut Arc::<AlignedBuf>::make_mut(&mut self.pages.get_mut(k).expect("listed").buf)[..],
            );
        }
        let mut from = 0;
        while from < keys.len() {
            let (tag, file, _) = keys[from];
            let same_file = keys[from..].iter().take_while(|k| (k.0, k.1) == (tag, file)).count();
            let batch = &keys[from..from + same_file.min(WRITE_BACK_BATCH_PAGES)];
            let dev = self.device(tag, file)?;
            let ps = self.pages[&batch[0]].buf.len();
            // Copied into one staging buffer, so that runs of consecutive pages are written with
            // one request each.
            let mut staging = self.staging(batch.len() * ps);
            for (j, k) in batch.iter().enumerate() {
                staging[j * ps..(j + 1) * ps].copy_from_slice(&self.pages[k].buf[..]);
            }
            let pages: Vec<u64> = batch.iter().map(|k| k.2).collect();
            // Runs of consecutive pages among `pages[range]`, one write request each.
            let write_runs = |range: std::ops::Range<usize>| -> Result<()> {
                let base = range.start;
                let mut reqs: Vec<crate::io::IoRequest<'_>> = runs(&pages[range], RUN_BYTES / ps)
                    .into_iter()
                    .map(|(i, n)| crate::io::IoRequest::Write {
                        offset: pages[base + i] * ps as u64,
                        buf: &staging[(base + i) * ps..(base + i + n) * ps],
                    })
                    .collect();
                Ok(dev.submit_batch(&mut reqs)?)
            };
            match &self.doublewrite {
                Some(dw) => {
                    let copies: Vec<DwPage<'_>> = pages
                        .iter()
                        .enumerate()
                        .map(|(j, &page)| DwPage {
                            tag,
                            pid: PageId::new(file, page),
                            bytes: &staging[j * ps..(j + 1) * ps],
                            device: &dev,
                        })
                        .collect();
                    dw.write(&copies, &mut |r| write_runs(r))?;
                }
                None => write_runs(0..pages.len())?,
            }
            self.staging = Some(staging);
            from += batch.len();
        }
        for k in &keys {
            self.pages.get_mut(k).expect("listed").dirty = false;
        }
        for dev in self.devices.values() {
            dev.sync()?;
        }
        Ok(())
    }

    /// Drops every page held (after a write-back), keeping their buffers for the next pages.
    pub(crate) fn clear(&mut self) {
        debug_assert!(!self.has_dirty(), "dirty pages dropped before their write-back");
        for (_, p) in self.pages.drain() {
            if let Ok(buf) = Arc::try_unwrap(p.buf) {
                self.spare.entry(buf.len()).or_default().push(buf);
            }
        }
    }
}

/// Restores the pages of `files` that a crash tore during their write-back from their copies
/// in the double-write file of `dw_storage` (see [`doublewrite::repair`]), with `write`; only
/// the files of live tables (those `live` names, or any that exists when `live` is `None`)
/// with their pool's page size (`table_page`, `index_page`) are considered.
pub(crate) fn repair_torn_pages(
    dw_storage: &dyn Storage,
    files: PageFiles<'_>,
    live: Option<&std::collections::HashSet<u32>>,
    (table_page, index_page): (usize, usize),
    write: bool,
) -> Result<RepairReport> {
    let mut locate = |tag: u8, file: u32, ps: usize| -> Result<Option<Arc<dyn Device>>> {
        let expected = if tag == TAG_TABLE { table_page } else { index_page };
        if (tag != TAG_TABLE && tag != TAG_INDEX)
            || ps != expected
            || live.is_some_and(|l| !l.contains(&file))
        {
            return Ok(None);
        }
        let name = if tag == TAG_TABLE { heap_name(file) } else { index_name(file) };
        let storage = match files {
            PageFiles::One(storage) => storage,
            PageFiles::Placed(spaces, catalog) => spaces.for_file(catalog, tag, file)?.as_ref(),
        };
        Ok(if storage.exists(&name) { Some(storage.open(&name, false)?) } else { None })
    };
    doublewrite::repair(dw_storage, &mut locate, write)
}

/// Redo pass. Returns the unfinished transactions, the largest transaction id seen, and a
/// report (undo counters filled in by the caller). With `check_only` (a read-only open) it
/// writes nothing and stops at the first page change it would apply (`pages_redone` 1).
/// Write-backs go through `doublewrite` when given.
pub(crate) fn redo(
    spaces: &super::tablespace::Spaces,
    catalog: &CatalogData,
    log: &dyn RecordLog,
    accept_lost_log: bool,
    check_only: bool,
    doublewrite: Option<Arc<DoubleWrite>>,
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
    let cache = RedoPages::new(
        PageFiles::Placed(spaces, catalog),
        if accept_lost_log { u64::MAX } else { log_end },
        REDO_CACHE_PAGES,
        doublewrite,
    );
    let (table_page, index_page) = (catalog.table_page_size as usize, catalog.index_page_size as usize);
    let mut r = Redoer {
        cache,
        live: catalog.tables.iter().map(|t| t.id).collect(),
        redo_from,
        page_sizes: (table_page, index_page),
        check_only,
        ops: BTreeMap::new(),
        max_txn: 0,
        report: RecoveryReport { redo_from, log_end: recovered.end_lsn, ..Default::default() },
    };
    let mut reader = log.reader(read_from)?;
    std::thread::scope(|s| -> Result<(Losers, u64, RecoveryReport)> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Window>>(REDO_READ_AHEAD_WINDOWS);
        std::thread::Builder::new()
            .name("nvmedb-redo-read".into())
            .spawn_scoped(s, move || loop {
                let w = read_window(&mut *reader, table_page, index_page);
                let last = !matches!(&w, Ok(w) if !w.is_empty());
                // A closed channel means redo stopped early: nothing more to read.
                if tx.send(w).is_err() || last {
                    break;
                }
            })
            .map_err(|e| Error::ResourceExhausted(format!("starting the redo's log reader thread: {e}")))?;
        loop {
            let waited = Instant::now();
            let mut window = rx.recv().map_err(|_| {
                Error::Poisoned("the redo's log reader thread stopped without a result".into())
            })??;
            r.report.redo_wait_log_micros += waited.elapsed().as_micros() as u64;
            if window.is_empty() {
                break;
            }
            if r.window(&mut window)? {
                // `check_only` found a page to redo.
                r.report.pages_redone = 1;
                break;
            }
        }
        if !check_only {
            r.write_back()?;
        }
        r.report.losers = r.ops.len() as u64;
        r.report.micros = started.elapsed().as_micros() as u64;
        Ok((r.ops, r.max_txn, r.report))
    })
}

/// Redo's state between the windows of records the reader thread hands it.
struct Redoer<'a> {
    cache: RedoPages<'a>,
    /// The tables of the catalog: changes to other files (dropped tables, or ones rebuilt but
    /// not yet switched in) are skipped.
    live: std::collections::HashSet<u32>,
    redo_from: Lsn,
    /// Table and index page sizes.
    page_sizes: (usize, usize),
    check_only: bool,
    /// The transactions without an end record so far, with their operations.
    ops: Losers,
    max_txn: u64,
    report: RecoveryReport,
}

impl Redoer<'_> {
    /// Redoes one window of records: reads the pages its changes touch in one batch per file,
    /// then applies each change not already on its page. Returns `true` when `check_only`
    /// found a change to redo (the rest is not needed).
    fn window(&mut self, window: &mut Window) -> Result<bool> {
        let wanted: Vec<(u8, u32, u64, usize)> = window
            .iter()
            .filter(|(rec, _)| rec.lsn >= self.redo_from)
            .filter_map(|(_, d)| match d {
                Decoded::Pages { tag, mtr } => Some((*tag, mtr)),
                Decoded::Ended(_) | Decoded::Other => None,
            })
            .flat_map(|(tag, m)| {
                m.changes
                    .iter()
                    .filter(|(pid, _)| self.live.contains(&pid.file))
                    .map(move |(pid, _)| (tag, pid.file, pid.page, m.page_size))
            })
            .collect();
        let reading = Instant::now();
        self.cache.prefetch(&wanted)?;
        self.report.redo_read_pages_micros += reading.elapsed().as_micros() as u64;
        for (rec, decoded) in window.drain(..) {
            self.report.records += 1;
            match decoded {
                Decoded::Pages { tag, mtr: m } => {
                    if let Some(a) = &m.annotation {
                        let op = TxnOp::decode(a)?;
                        self.max_txn = self.max_txn.max(op.txn);
                        self.ops.entry(op.txn).or_default().push((rec.lsn, op));
                    }
                    if rec.lsn >= self.redo_from && self.changes(tag, &m, &rec)? {
                        return Ok(true);
                    }
                }
                Decoded::Ended(txn) => {
                    self.max_txn = self.max_txn.max(txn);
                    self.ops.remove(&txn);
                }
                Decoded::Other => {}
            }
        }
        Ok(false)
    }

    /// Writes the redone pages back, timed.
    fn write_back(&mut self) -> Result<()> {
        let writing = Instant::now();
        self.cache.write_back()?;
        self.report.redo_write_back_micros += writing.elapsed().as_micros() as u64;
        Ok(())
    }

    /// Applies the page changes of the record `rec` of pool `tag`; `true` as [`Self::window`].
    fn changes(&mut self, tag: u8, m: &MtrRecord, rec: &LogRecord) -> Result<bool> {
        let ps = if tag == TAG_TABLE { self.page_sizes.0 } else { self.page_sizes.1 };
        for (pid, change) in &m.changes {
            if !self.live.contains(&pid.file) {
                // A dropped table, or one rebuilt but not yet switched in: its files are gone
                // or about to be removed.
                continue;
            }
            if self.cache.needs_room(tag, pid.file, pid.page) {
                self.write_back()?;
                self.cache.clear();
            }
            match self.cache.apply(tag, *pid, change, rec.end_lsn, ps)? {
                Redo::Applied { .. } if self.check_only => return Ok(true),
                Redo::Applied { full } => {
                    self.report.pages_redone += 1;
                    self.report.full_images_applied += u64::from(full);
                }
                Redo::AlreadyThere => {}
                Redo::Unappliable => return Err(unappliable(tag, *pid, rec.lsn)),
            }
        }
        Ok(false)
    }
}

/// The error for a diff to a page that is unreadable (torn or missing) with no full image of
/// it logged before the change at `lsn`.
fn unappliable(tag: u8, pid: PageId, lsn: Lsn) -> Error {
    Error::Corruption {
        file: format!("{} page {}", if tag == TAG_TABLE { "heap" } else { "index" }, pid),
        offset: lsn,
        detail: format!(
            "page is unreadable (torn or missing), the double-write file ({}) held no valid copy of it, \
             and the log holds no full image of it before this change",
            doublewrite::DOUBLEWRITE_FILE
        ),
    }
}

/// Splits `pages` (sorted page numbers) into runs of consecutive pages of at most `max_pages`
/// each: (index in `pages` of the run's first page, pages in the run).
fn runs(pages: &[u64], max_pages: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < pages.len() {
        let mut n = 1;
        while i + n < pages.len() && pages[i + n] == pages[i] + n as u64 && n < max_pages.max(1) {
            n += 1;
        }
        out.push((i, n));
        i += n;
    }
    out
}

/// Reads the next window of at most [`REDO_WINDOW_RECORDS`] records (empty at the end of the
/// log), decoding the page changes of page-change records and checking their page size against
/// the database's (`table_page`, `index_page`).
fn read_window(reader: &mut dyn RecordReader, table_page: usize, index_page: usize) -> Result<Window> {
    let mut window = Vec::with_capacity(REDO_WINDOW_RECORDS);
    while window.len() < REDO_WINDOW_RECORDS {
        let Some(rec) = reader.next_record()? else { break };
        let decoded = decode_for_redo(&rec, table_page, index_page)?;
        window.push((rec, decoded));
    }
    Ok(window)
}
