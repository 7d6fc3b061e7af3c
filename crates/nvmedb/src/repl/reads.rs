//! Reads on a standby: read-only snapshots of its applied state that are a prefix of the
//! primary's commits ([`Standby::read_snapshot`](super::Standby::read_snapshot)).
//!
//! Owns: [`CowStorage`], the standby's data storage that keeps, for every live snapshot, the
//! old contents of each block it overwrites (and each file's length before it grows); the
//! snapshot's view of the data files (`SnapView`: the files as they were when the snapshot
//! was registered, plus its own writes in memory); and the building of a snapshot.
//!
//! How a snapshot is built: between two applied records (the apply thread holds its step lock
//! while it applies one and while it writes pages back) the snapshot is registered with the
//! storage and takes the applied position P. Every page in the data files then is at most as
//! new as P, and from then on the apply thread's writes leave the snapshot's view unchanged.
//! The records from the view's catalog's checkpoint start up to P are copied into a scratch
//! replica log (the replica log keeps them meanwhile: its release waits while a snapshot is
//! copying), and the database is opened on the view with that log: redo up to P, undo of every
//! transaction unfinished at P, a checkpoint, all into the view's memory. It is closed and
//! opened again read-only, without a log. So it holds exactly the transactions committed at
//! or before P, never part of one, and every change is refused (`Error::ReadOnly`).
//!
//! Invariants: the apply thread waits for a snapshot only while one is registered (a lock
//! held for microseconds between two records); a live snapshot costs the apply thread one
//! extra block read per block it overwrites for the first time; a snapshot never reads a
//! block written after its registration.

use super::replica_log::{ReplicaLog, ReplicaLogOpener};
use crate::error::{Error, Result};
use crate::io::{AlignedBuf, Device, DeviceInfo, IoError, IoOpKind, IoRequest, IoResult, MemDevice, Storage};
use crate::util::sync::{MutexExt, RwLockExt};
use crate::wal::Lsn;
use crate::{Database, Options};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock, Weak};

/// The granularity of the copy-on-write bookkeeping.
const BLOCK: u64 = 4096;

/// A kept block: its old contents, or `None` when it lay past the file's end.
type KeptBlock = Option<Box<[u8]>>;

/// What one snapshot keeps of the files as they were at its registration.
#[derive(Default)]
pub(super) struct Preserved {
    /// Old contents of blocks overwritten since (`None`: the block lay past the file's end).
    blocks: Mutex<HashMap<(String, u64), KeptBlock>>,
    /// File lengths before they grew since.
    lengths: Mutex<HashMap<String, u64>>,
    /// The files that existed.
    names: HashSet<String>,
}

struct CowShared {
    inner: Arc<dyn Storage>,
    /// The live snapshots.
    snaps: Mutex<Vec<Weak<Preserved>>>,
    /// Serializes writes and growth with the preservation they trigger and with snapshots'
    /// first look at a file's length.
    write: Mutex<()>,
}

/// The standby's data storage: passes everything through to the directory, keeping first what
/// each live snapshot would lose.
pub struct CowStorage {
    sh: Arc<CowShared>,
}

impl CowStorage {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Storage>) -> Self {
        Self { sh: Arc::new(CowShared { inner, snaps: Mutex::new(Vec::new()), write: Mutex::new(()) }) }
    }

    /// Registers a snapshot: from now on, what it would lose is kept for it while it lives.
    pub(super) fn register(&self) -> Result<Arc<Preserved>> {
        let _w = self.sh.write.locked();
        let names = self.sh.inner.list()?.into_iter().collect();
        let p = Arc::new(Preserved { names, ..Default::default() });
        let mut s = self.sh.snaps.locked();
        s.retain(|w| w.strong_count() > 0);
        s.push(Arc::downgrade(&p));
        Ok(p)
    }

    /// The storage it wraps.
    pub(super) fn inner(&self) -> &Arc<dyn Storage> {
        &self.sh.inner
    }
}

impl CowShared {
    fn live(&self) -> Vec<Arc<Preserved>> {
        self.snaps.locked().iter().filter_map(Weak::upgrade).collect()
    }

    /// Keeps for every live snapshot the blocks of `[offset, offset + len)` of `name` (and its
    /// length) before they change. Called with `write` held.
    fn preserve(&self, name: &str, dev: &dyn Device, offset: u64, len: u64) -> IoResult<()> {
        let live = self.live();
        if live.is_empty() || len == 0 {
            return Ok(());
        }
        let cap = dev.capacity();
        for p in &live {
            p.lengths.locked().entry(name.to_string()).or_insert(cap);
        }
        let mut buf: Option<AlignedBuf> = None;
        for b in offset / BLOCK..(offset + len).div_ceil(BLOCK) {
            let key = (name.to_string(), b);
            let wanting: Vec<&Arc<Preserved>> =
                live.iter().filter(|p| !p.blocks.locked().contains_key(&key)).collect();
            if wanting.is_empty() {
                continue;
            }
            let old = if (b + 1) * BLOCK <= cap {
                let buf = buf.get_or_insert_with(|| AlignedBuf::new(BLOCK as usize));
                dev.read_at(b * BLOCK, buf)?;
                Some(buf.to_vec().into_boxed_slice())
            } else {
                None
            };
            for p in wanting {
                p.blocks.locked().entry(key.clone()).or_insert_with(|| old.clone());
            }
        }
        Ok(())
    }

    fn grow(&self, name: &str, dev: &dyn Device) {
        let live = self.live();
        if live.is_empty() {
            return;
        }
        let cap = dev.capacity();
        for p in &live {
            p.lengths.locked().entry(name.to_string()).or_insert(cap);
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

/// A snapshot's view of the data files: as they were at its registration, with its own
/// writes (recovery's, the checkpoint's) kept in memory.
struct SnapView {
    base: Arc<dyn Storage>,
    cow: Arc<CowShared>,
    pres: Arc<Preserved>,
    files: Mutex<HashMap<String, Arc<SnapDevice>>>,
    removed: Mutex<HashSet<String>>,
    location: String,
}

impl SnapView {
    fn visible_in_base(&self, name: &str) -> bool {
        self.pres.names.contains(name) && !self.removed.locked().contains(name)
    }
}

impl Storage for SnapView {
    fn open(&self, name: &str, create: bool) -> IoResult<Arc<dyn Device>> {
        let mut files = self.files.locked();
        if let Some(d) = files.get(name) {
            return Ok(d.clone());
        }
        let (base, len): (Arc<dyn Device>, u64) = if self.visible_in_base(name) {
            let base = self.base.open(name, false)?;
            let _w = self.cow.write.locked();
            let len = self.pres.lengths.locked().get(name).copied().unwrap_or_else(|| base.capacity());
            (base, len)
        } else if create {
            self.removed.locked().remove(name);
            (Arc::new(MemDevice::new(name)), 0)
        } else {
            return Err(IoError::os(
                name,
                IoOpKind::Setup,
                0,
                0,
                std::io::Error::new(std::io::ErrorKind::NotFound, "not in the standby snapshot"),
            ));
        };
        let d = Arc::new(SnapDevice {
            name: name.to_string(),
            base,
            pres: self.pres.clone(),
            len: Mutex::new(len),
            own: RwLock::new(HashMap::new()),
        });
        files.insert(name.to_string(), d.clone());
        Ok(d)
    }
    fn exists(&self, name: &str) -> bool {
        self.files.locked().contains_key(name) || self.visible_in_base(name)
    }
    fn list(&self) -> IoResult<Vec<String>> {
        let mut v: HashSet<String> = self.files.locked().keys().cloned().collect();
        v.extend(self.pres.names.iter().filter(|n| self.visible_in_base(n)).cloned());
        Ok(v.into_iter().collect())
    }
    fn remove(&self, name: &str) -> IoResult<()> {
        self.files.locked().remove(name);
        self.removed.locked().insert(name.to_string());
        Ok(())
    }
    fn location(&self) -> String {
        self.location.clone()
    }
    fn in_ram(&self) -> bool {
        false
    }
}

/// One file of a [`SnapView`].
struct SnapDevice {
    name: String,
    base: Arc<dyn Device>,
    pres: Arc<Preserved>,
    /// Its length as the snapshot sees it.
    len: Mutex<u64>,
    /// Blocks the snapshot wrote.
    own: RwLock<HashMap<u64, Box<[u8]>>>,
}

impl SnapDevice {
    /// Reads `[offset, offset + buf.len())` as the snapshot sees it.
    fn read_view(&self, offset: u64, buf: &mut [u8]) -> IoResult<()> {
        let len = *self.len.locked();
        // The directory's bytes first (only below the length the snapshot saw), then what the
        // apply thread kept for the snapshot (looked at after the read: a block it overwrote
        // meanwhile was kept before it was written), then the snapshot's own blocks.
        let end = offset + buf.len() as u64;
        let from_base = len.min(self.base.capacity()).min(end).saturating_sub(offset) as usize;
        let aligned = from_base / self.base.alignment().max(1) * self.base.alignment().max(1);
        if aligned > 0 {
            self.base.read_at(offset, &mut buf[..aligned])?;
        }
        if aligned < from_base {
            // An unaligned tail below the length: read its whole aligned block.
            let a = self.base.alignment().max(1) as u64;
            let mut tmp = AlignedBuf::new(a as usize);
            self.base.read_at(offset + aligned as u64, &mut tmp)?;
            buf[aligned..from_base].copy_from_slice(&tmp[..from_base - aligned]);
        }
        buf[from_base..].fill(0);
        let kept = self.pres.blocks.locked();
        let own = self.own.read_locked();
        for b in offset / BLOCK..end.div_ceil(BLOCK) {
            let bs = b * BLOCK;
            let src: Option<&[u8]> = if let Some(o) = own.get(&b) {
                Some(o)
            } else {
                match kept.get(&(self.name.clone(), b)) {
                    Some(Some(old)) => Some(old),
                    Some(None) => Some(&ZEROS[..]),
                    None => None,
                }
            };
            if let Some(src) = src {
                let lo = bs.max(offset);
                let hi = (bs + BLOCK).min(end);
                buf[(lo - offset) as usize..(hi - offset) as usize]
                    .copy_from_slice(&src[(lo - bs) as usize..(hi - bs) as usize]);
            }
        }
        Ok(())
    }
}

static ZEROS: [u8; BLOCK as usize] = [0; BLOCK as usize];

impl Device for SnapDevice {
    fn info(&self) -> DeviceInfo {
        let mut i = self.base.info();
        i.backend = format!("standby snapshot over {}", i.backend);
        i
    }
    fn alignment(&self) -> usize {
        self.base.alignment()
    }
    fn capacity(&self) -> u64 {
        *self.len.locked()
    }
    fn ensure_capacity(&self, len: u64) -> IoResult<()> {
        let mut l = self.len.locked();
        *l = (*l).max(len);
        Ok(())
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> IoResult<()> {
        self.read_view(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> IoResult<()> {
        let end = offset + buf.len() as u64;
        for b in offset / BLOCK..end.div_ceil(BLOCK) {
            let bs = b * BLOCK;
            let (lo, hi) = (bs.max(offset), (bs + BLOCK).min(end));
            let mut block = if lo == bs && hi == bs + BLOCK {
                vec![0u8; BLOCK as usize].into_boxed_slice()
            } else {
                let mut a = AlignedBuf::new(BLOCK as usize);
                self.read_view(bs, &mut a)?;
                a.to_vec().into_boxed_slice()
            };
            block[(lo - bs) as usize..(hi - bs) as usize]
                .copy_from_slice(&buf[(lo - offset) as usize..(hi - offset) as usize]);
            self.own.write_locked().insert(b, block);
        }
        let mut l = self.len.locked();
        *l = (*l).max(end);
        Ok(())
    }
    fn sync(&self) -> IoResult<()> {
        Ok(())
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
    /// How long building it took (copying the log and the in-memory recovery).
    pub fn build_time(&self) -> std::time::Duration {
        self.build
    }
}

impl std::fmt::Debug for StandbySnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StandbySnapshot(LSN {}, lag {} bytes)", self.lsn, self.lag_bytes())
    }
}

/// Builds a snapshot at `lsn` from the registration `pres` of `cow`: copies the records from
/// the view's checkpoint start to `lsn` out of `log` into a scratch log in `scratch`, and opens
/// the database on the view (`release` is called once the replica log is no longer read).
#[allow(clippy::too_many_arguments)]
pub(super) fn build(
    cow: &CowStorage,
    pres: Arc<Preserved>,
    lsn: Lsn,
    acknowledged: Lsn,
    log: &Arc<ReplicaLog>,
    scratch: PathBuf,
    options: &Options,
    release: impl FnOnce(),
) -> Result<StandbySnapshot> {
    let started = std::time::Instant::now();
    let view = Arc::new(SnapView {
        base: cow.inner().clone(),
        cow: cow.sh.clone(),
        pres: pres.clone(),
        files: Mutex::new(HashMap::new()),
        removed: Mutex::new(HashSet::new()),
        location: format!("{} (standby snapshot at LSN {lsn})", cow.location()),
    });
    let copied = copy_log(&view, log, lsn, &scratch);
    release();
    let _cleanup = Scratch(scratch.clone());
    let scratch_log = copied?;
    let opts = Options { create_if_missing: false, read_only: false, ..options.clone() };
    let db = Database::open_with_log(view.clone(), Some(Box::new(ReplicaLogOpener(scratch_log))), opts)?;
    db.close()?;
    let ro = Options { create_if_missing: false, read_only: true, ..options.clone() };
    let db = Database::open_with_log(view, None, ro)?;
    Ok(StandbySnapshot {
        db,
        lsn,
        acknowledged,
        taken: std::time::SystemTime::now(),
        build: started.elapsed(),
        _pres: pres,
    })
}

/// Removes a scratch directory when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn copy_log(
    view: &SnapView,
    log: &Arc<ReplicaLog>,
    lsn: Lsn,
    scratch: &std::path::Path,
) -> Result<Arc<ReplicaLog>> {
    let (_, cat) = crate::table::catalog::CatalogStore::load(view.open(crate::db::CATALOG_FILE, false)?)?;
    let cat = cat.ok_or_else(|| Error::Corruption {
        file: format!("{}/{}", view.location, crate::db::CATALOG_FILE),
        offset: 0,
        detail: "the catalog is empty".into(),
    })?;
    let start = cat.checkpoint_redo_lsn.min(cat.checkpoint_undo_lsn);
    let _ = std::fs::remove_dir_all(scratch);
    let out = ReplicaLog::open(scratch, start)?;
    let mut tail = log.tail()?;
    // The replica log holds every record from `start` on: it releases only records before a
    // restartpoint the catalog holds, and nothing while a snapshot copies.
    while let Some(r) = tail.next_record()? {
        if r.end > lsn {
            break;
        }
        if r.lsn < start {
            continue;
        }
        out.append_at(r.lsn, r.end, r.kind, &r.payload)?;
    }
    out.sync()?;
    Ok(out)
}
