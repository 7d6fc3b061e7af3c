//! Reads on a standby: read-only snapshots of its applied state that are a prefix of the
//! primary's commits ([`Standby::read_snapshot`](super::Standby::read_snapshot)).
//!
//! Owns: [`CowStorage`], the standby's data storage that keeps, for every live snapshot, what
//! the files held at its registration wherever the apply thread overwrites them (and each
//! file's length before it grows); the snapshot's view of the data files (`SnapView`: the files
//! as they were when the snapshot was registered, plus its own writes in memory); and the
//! building of a snapshot.
//!
//! How a snapshot is built: the apply thread, between two applied records, registers it with
//! the storage (from then on its writes leave the snapshot's view of the files unchanged) and
//! hands it what the files do not hold yet at the applied position P: the pages it changed
//! since their last write-back (its *overlay*: shared, not copied: the apply thread copies a
//! held page before it changes it again) and the page-change records of the transactions
//! unfinished at P, with the record ending at P. The view (the files as registered, those pages
//! over them, its own writes in memory) then holds every change up to P: nothing is left to
//! redo. The database is opened on it with a scratch log in memory holding just those records
//! and a catalog whose checkpoint says so (redo from P, undo from the oldest unfinished
//! transaction's first record): the open undoes the unfinished transactions and checkpoints,
//! all into the view's memory. It is closed and opened again read-only, without a log. So it
//! holds exactly the transactions committed at or before P, never part of one, and every
//! change is refused (`Error::ReadOnly`). Its cost is opening the database twice and undoing
//! what was in flight, whatever the log since the last restartpoint.
//!
//! What the apply thread keeps for a live snapshot, without reading the disk: a data page it
//! writes back was either unwritten (dirty) at the registration, so the snapshot's overlay
//! holds it whole and its bytes in the file do not matter to the snapshot, or it was clean then
//! (held in memory with its file's bytes, or not held, so read from the file later) and changed
//! since: at that first change the apply thread still holds the file's bytes (the page's
//! pre-image, [`RedoPages::keep_pre_images`](crate::db::RedoPages)) and keeps them for the
//! snapshot ([`CowStorage::keep_pages`]). Only writes to other files (the catalog, at a
//! restartpoint) read the blocks they overwrite back first. The double-write file is not part
//! of a snapshot's view: nothing was torn in the files it sees (the apply thread restores torn
//! pages before it serves snapshots, and registers none while it writes).
//!
//! Files: `mod.rs` (the copy-on-write storage, the snapshot handle, what the apply thread hands
//! a snapshot), `view.rs` (a snapshot's view of the files and its building).
//!
//! Invariants: the apply thread waits for no reader: it serves the snapshots asked for between
//! two records (registering is a listing of the directory; the pages and records are shared);
//! a live snapshot costs it one page copy per page it changes for the first time since the
//! snapshot's registration or since the page's last write-back, and no read of the data files;
//! a snapshot never reads a block written after its registration nor a page changed after P.

use super::replica_log::ShippedRecord;
use crate::buffer::doublewrite::DOUBLEWRITE_FILE;
use crate::error::Result;
use crate::io::{AlignedBuf, Device, DeviceInfo, IoRequest, IoResult, Storage};
use crate::util::sync::MutexExt;
use crate::wal::engine::TAG_TABLE;
use crate::wal::Lsn;
use crate::Database;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// The granularity of the copy-on-write bookkeeping of files other than the data pages.
const BLOCK: u64 = 4096;

mod view;
pub(super) use view::build;

/// A kept block: its old contents, or `None` when it lay past the file's end.
type KeptBlock = Option<Box<[u8]>>;

/// Whole pages of one file, by page number, all of one size.
#[derive(Clone, Default)]
struct Pages {
    /// The page size in bytes (0 while there are none).
    size: u64,
    by_page: HashMap<u64, Arc<AlignedBuf>>,
}

impl Pages {
    fn insert(&mut self, page: u64, buf: Arc<AlignedBuf>) {
        debug_assert!(self.size == 0 || self.size == buf.len() as u64, "pages of one file differ in size");
        self.size = buf.len() as u64;
        self.by_page.entry(page).or_insert(buf);
    }

    /// True when the pages held cover all of block `b` (of [`BLOCK`] bytes).
    fn covers_block(&self, b: u64) -> bool {
        self.size > 0
            && (b * BLOCK / self.size..=((b + 1) * BLOCK - 1) / self.size)
                .all(|p| self.by_page.contains_key(&p))
    }
}

/// The data file a pool's file is (heap or index).
fn data_file_name(tag: u8, file: u32) -> String {
    if tag == TAG_TABLE {
        crate::db::heap_name(file)
    } else {
        crate::db::index_name(file)
    }
}

/// Groups pages keyed by (pool tag, file, page) by file name.
fn by_file(pages: Vec<((u8, u32, u64), Arc<AlignedBuf>)>) -> HashMap<String, Pages> {
    let mut names: HashMap<(u8, u32), String> = HashMap::new();
    let mut out: HashMap<String, Pages> = HashMap::new();
    for ((tag, file, page), buf) in pages {
        let name = names.entry((tag, file)).or_insert_with(|| data_file_name(tag, file));
        if !out.contains_key(name.as_str()) {
            out.insert(name.clone(), Pages::default());
        }
        out.get_mut(name.as_str()).expect("inserted above").insert(page, buf);
    }
    out
}

/// What one snapshot keeps of the files as they were at its registration.
pub(super) struct Preserved {
    /// Old contents of blocks read back before they were overwritten since (`None`: the block
    /// lay past the file's end): files other than the apply thread's pages.
    blocks: Mutex<HashMap<(String, u64), KeptBlock>>,
    /// Pages as their files held them at the registration, kept by the apply thread at their
    /// first change since ([`CowStorage::keep_pages`]), by file name.
    pages: Mutex<HashMap<String, Pages>>,
    /// The apply thread's pages not yet written back at the registration (unsealed), by file
    /// name: the snapshot reads them over the files.
    overlay: HashMap<String, Pages>,
    /// File lengths before they grew since.
    lengths: Mutex<HashMap<String, u64>>,
    /// The files that existed (but the double-write file).
    names: HashSet<String>,
    /// The storage's count of live snapshots, which this one leaves when dropped.
    live: Arc<AtomicUsize>,
}

impl Drop for Preserved {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Preserved {
    /// True when the snapshot holds block `b` of `name` already (kept, or in its overlay).
    fn holds_block(&self, name: &str, b: u64) -> bool {
        self.overlay.get(name).is_some_and(|f| f.covers_block(b))
            || self.pages.locked().get(name).is_some_and(|f| f.covers_block(b))
            || self.blocks.locked().contains_key(&(name.to_string(), b))
    }

    fn note_length(&self, name: &str, cap: u64) {
        let mut l = self.lengths.locked();
        if !l.contains_key(name) {
            l.insert(name.to_string(), cap);
        }
    }
}

struct CowShared {
    inner: Arc<dyn Storage>,
    /// The live snapshots.
    snaps: Mutex<Vec<Weak<Preserved>>>,
    /// How many snapshots are live (registered and not dropped).
    live: Arc<AtomicUsize>,
    /// Serializes writes and growth with the preservation they trigger and with snapshots'
    /// first look at a file's length.
    write: Mutex<()>,
    /// Blocks read back from the files to keep them for live snapshots.
    read_back: AtomicU64,
}

/// The standby's data storage: passes everything through to the directory, keeping first what
/// each live snapshot would lose.
pub struct CowStorage {
    sh: Arc<CowShared>,
}

impl CowStorage {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Storage>) -> Self {
        Self {
            sh: Arc::new(CowShared {
                inner,
                snaps: Mutex::new(Vec::new()),
                live: Arc::new(AtomicUsize::new(0)),
                write: Mutex::new(()),
                read_back: AtomicU64::new(0),
            }),
        }
    }

    /// Registers a snapshot whose overlay is `overlay` (the apply thread's pages not written
    /// back, keyed by (pool tag, file, page), unsealed): from now on, what it would lose is
    /// kept for it while it lives.
    pub(super) fn register(&self, overlay: Vec<((u8, u32, u64), Arc<AlignedBuf>)>) -> Result<Arc<Preserved>> {
        let _w = self.sh.write.locked();
        let names = self.sh.inner.list()?.into_iter().filter(|n| n != DOUBLEWRITE_FILE).collect();
        self.sh.live.fetch_add(1, Ordering::AcqRel);
        let p = Arc::new(Preserved {
            blocks: Mutex::new(HashMap::new()),
            pages: Mutex::new(HashMap::new()),
            overlay: by_file(overlay),
            lengths: Mutex::new(HashMap::new()),
            names,
            live: self.sh.live.clone(),
        });
        let mut s = self.sh.snaps.locked();
        s.retain(|w| w.strong_count() > 0);
        s.push(Arc::downgrade(&p));
        Ok(p)
    }

    /// True while some registered snapshot lives.
    pub(super) fn has_live(&self) -> bool {
        self.sh.live.load(Ordering::Acquire) > 0
    }

    /// Keeps for every live snapshot that does not hold them yet these page images, each the
    /// bytes its file holds for the page (the apply thread's pre-images: the page was clean when
    /// it changed, and is written back only after this call). Reads nothing.
    pub(super) fn keep_pages(&self, images: Vec<((u8, u32, u64), Arc<AlignedBuf>)>) {
        if images.is_empty() {
            return;
        }
        let live = self.sh.live();
        if live.is_empty() {
            return;
        }
        let images = by_file(images);
        for p in &live {
            let mut kept = p.pages.locked();
            for (name, f) in &images {
                let over = p.overlay.get(name);
                for (&page, buf) in &f.by_page {
                    if over.is_some_and(|o| o.by_page.contains_key(&page)) {
                        continue;
                    }
                    if !kept.contains_key(name.as_str()) {
                        kept.insert(name.clone(), Pages::default());
                    }
                    kept.get_mut(name.as_str()).expect("inserted above").insert(page, buf.clone());
                }
            }
        }
    }

    /// The blocks read back from the files to keep them for live snapshots so far (only writes
    /// to files other than the apply thread's pages need that).
    pub(super) fn blocks_read_back(&self) -> u64 {
        self.sh.read_back.load(Ordering::Relaxed)
    }

    /// The storage it wraps.
    pub(super) fn inner(&self) -> &Arc<dyn Storage> {
        &self.sh.inner
    }
}

impl CowShared {
    fn live(&self) -> Vec<Arc<Preserved>> {
        if self.live.load(Ordering::Acquire) == 0 {
            return Vec::new();
        }
        self.snaps.locked().iter().filter_map(Weak::upgrade).collect()
    }

    /// Keeps for every live snapshot the blocks of `[offset, offset + len)` of `name` (and its
    /// length) before they change, unless it holds them already (the apply thread's pages: in
    /// its overlay or kept from memory); those it lacks are read back, all in one read. Called
    /// with `write` held.
    fn preserve(&self, name: &str, dev: &dyn Device, offset: u64, len: u64) -> IoResult<()> {
        if len == 0 || name == DOUBLEWRITE_FILE {
            return Ok(());
        }
        let live = self.live();
        if live.is_empty() {
            return Ok(());
        }
        let cap = dev.capacity();
        for p in &live {
            p.note_length(name, cap);
        }
        // Which snapshots lack which blocks.
        let mut wanting: Vec<(u64, Vec<&Arc<Preserved>>)> = Vec::new();
        for b in offset / BLOCK..(offset + len).div_ceil(BLOCK) {
            let lack: Vec<&Arc<Preserved>> = live.iter().filter(|p| !p.holds_block(name, b)).collect();
            if !lack.is_empty() {
                wanting.push((b, lack));
            }
        }
        let inside: Vec<u64> = wanting.iter().map(|(b, _)| *b).filter(|b| (b + 1) * BLOCK <= cap).collect();
        let mut old = None;
        if let (Some(&lo), Some(&hi)) = (inside.first(), inside.last()) {
            let mut buf = AlignedBuf::new(((hi - lo + 1) * BLOCK) as usize);
            dev.read_at(lo * BLOCK, &mut buf)?;
            self.read_back.fetch_add(hi - lo + 1, Ordering::Relaxed);
            old = Some((lo, buf));
        }
        for (b, lack) in wanting {
            let block: KeptBlock = match &old {
                Some((lo, buf)) if (b + 1) * BLOCK <= cap => {
                    let at = ((b - lo) * BLOCK) as usize;
                    Some(buf[at..at + BLOCK as usize].to_vec().into_boxed_slice())
                }
                _ => None,
            };
            for p in lack {
                p.blocks.locked().entry((name.to_string(), b)).or_insert_with(|| block.clone());
            }
        }
        Ok(())
    }

    fn grow(&self, name: &str, dev: &dyn Device) {
        if name == DOUBLEWRITE_FILE {
            return;
        }
        let live = self.live();
        if live.is_empty() {
            return;
        }
        let cap = dev.capacity();
        for p in &live {
            p.note_length(name, cap);
        }
    }
}

impl Storage for CowStorage {
    fn open(&self, name: &str, create: bool) -> IoResult<Arc<dyn Device>> {
        let inner = self.sh.inner.open(name, create)?;
        Ok(Arc::new(CowDevice { name: name.to_string(), inner, sh: self.sh.clone() }))
    }
    fn exists(&self, name: &str) -> bool {
        self.sh.inner.exists(name)
    }
    fn list(&self) -> IoResult<Vec<String>> {
        self.sh.inner.list()
    }
    fn remove(&self, name: &str) -> IoResult<()> {
        self.sh.inner.remove(name)
    }
    fn location(&self) -> String {
        self.sh.inner.location()
    }
    fn lock(&self) -> IoResult<()> {
        self.sh.inner.lock()
    }
    fn lock_shared(&self) -> IoResult<()> {
        self.sh.inner.lock_shared()
    }
    fn in_ram(&self) -> bool {
        self.sh.inner.in_ram()
    }
}

struct CowDevice {
    name: String,
    inner: Arc<dyn Device>,
    sh: Arc<CowShared>,
}

impl Device for CowDevice {
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
        let _w = self.sh.write.locked();
        self.sh.grow(&self.name, self.inner.as_ref());
        self.inner.ensure_capacity(len)
    }
    fn preallocate(&self, offset: u64, len: u64) -> IoResult<()> {
        let _w = self.sh.write.locked();
        self.sh.grow(&self.name, self.inner.as_ref());
        self.inner.preallocate(offset, len)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> IoResult<()> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> IoResult<()> {
        let _w = self.sh.write.locked();
        self.sh.preserve(&self.name, self.inner.as_ref(), offset, buf.len() as u64)?;
        self.inner.write_at(offset, buf)
    }
    fn submit_batch(&self, reqs: &mut [IoRequest<'_>]) -> IoResult<()> {
        if !reqs.iter().any(|r| matches!(r, IoRequest::Write { .. })) {
            return self.inner.submit_batch(reqs);
        }
        let _w = self.sh.write.locked();
        for r in reqs.iter() {
            if let IoRequest::Write { offset, buf } = r {
                self.sh.preserve(&self.name, self.inner.as_ref(), *offset, buf.len() as u64)?;
            }
        }
        self.inner.submit_batch(reqs)
    }
    fn sync(&self) -> IoResult<()> {
        self.inner.sync()
    }
}

/// A read-only database holding exactly the transactions the primary committed at or before
/// an LSN the standby had applied ([`Standby::read_snapshot`](super::Standby::read_snapshot)).
/// Every change is refused with [`Error::ReadOnly`]. The standby keeps what the snapshot needs
/// while it lives: drop it when done.
pub struct StandbySnapshot {
    db: Database,
    lsn: Lsn,
    acknowledged: Lsn,
    taken: std::time::SystemTime,
    build: std::time::Duration,
    undone: u64,
    _pres: Arc<Preserved>,
}

impl StandbySnapshot {
    /// The snapshot's database (read-only).
    pub fn db(&self) -> &Database {
        &self.db
    }
    /// The position it was taken at: every transaction whose commit record ends at or before
    /// it, and no other.
    pub fn lsn(&self) -> Lsn {
        self.lsn
    }
    /// The primary's durable position the standby knew then; `acknowledged - lsn` is the lag
    /// in bytes the snapshot was taken at.
    pub fn primary_acknowledged(&self) -> Lsn {
        self.acknowledged
    }
    /// The log bytes the primary had made durable that the snapshot does not hold.
    pub fn lag_bytes(&self) -> u64 {
        self.acknowledged.saturating_sub(self.lsn)
    }
    /// When it was taken.
    pub fn taken(&self) -> std::time::SystemTime {
        self.taken
    }
    /// The transactions in flight at its position, whose changes building it undid.
    pub fn undone(&self) -> u64 {
        self.undone
    }
    /// How long building it took (the in-memory undo of what was in flight and the two opens).
    pub fn build_time(&self) -> std::time::Duration {
        self.build
    }
}

impl std::fmt::Debug for StandbySnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StandbySnapshot(LSN {}, lag {} bytes)", self.lsn, self.lag_bytes())
    }
}

/// What a read snapshot starts from, handed over by the apply thread between two records.
pub(super) struct SnapSource {
    /// Its registration with the storage, with the pages changed up to P and not yet written
    /// back (its overlay).
    pub(super) pres: Arc<Preserved>,
    /// The applied position P.
    pub(super) lsn: Lsn,
    /// The primary's durable position the standby knew then.
    pub(super) acknowledged: Lsn,
    /// The page-change records of the transactions unfinished at P and the record ending at P,
    /// in log order.
    pub(super) records: Vec<Arc<ShippedRecord>>,
}

/// What an applied record is to the transactions ([`Unfinished::applied`]).
pub(super) enum Role {
    /// It changes pages for transaction `0` (it carries an operation to undo).
    Change(u64),
    /// It ends transaction `0` (commit or abort).
    End(u64),
    /// Neither.
    Other,
}

/// The transactions the apply thread saw begin and not yet end, with their page-change
/// records (what a snapshot's undo needs, as recovery's undo would), and the last record
/// applied. Fed every applied record from the replica log's start, where the oldest
/// transaction unfinished at the restartpoint began.
#[derive(Default)]
pub(super) struct Unfinished {
    txns: HashMap<u64, Vec<Arc<ShippedRecord>>>,
    last: Option<Arc<ShippedRecord>>,
}

impl Unfinished {
    /// Notes an applied record.
    pub(super) fn applied(&mut self, rec: ShippedRecord, role: Role) {
        let rec = Arc::new(rec);
        match role {
            Role::Change(t) => self.txns.entry(t).or_default().push(rec.clone()),
            Role::End(t) => {
                self.txns.remove(&t);
            }
            Role::Other => {}
        }
        self.last = Some(rec);
    }

    /// The records a snapshot at the last applied position needs, in log order.
    pub(super) fn records(&self) -> Vec<Arc<ShippedRecord>> {
        let mut v: Vec<Arc<ShippedRecord>> = self.txns.values().flatten().cloned().collect();
        if let Some(l) = &self.last {
            if !v.iter().any(|r| Arc::ptr_eq(r, l)) {
                v.push(l.clone());
            }
        }
        v.sort_unstable_by_key(|r| r.lsn);
        v
    }
}
