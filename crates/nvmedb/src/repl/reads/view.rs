//! A read snapshot's view of the standby's data files and its building (see the parent
//! module): the files as they were at the snapshot's registration (the base files, with what
//! the copy-on-write storage kept for it and its overlay of unwritten pages over them), plus
//! its own writes in memory; and [`build`], which opens the database on that view.
//!
//! Invariant: a view never reads a block written after its registration: a block the apply
//! thread overwrote since is served from what was kept for the snapshot, never from the file.

use super::{CowShared, CowStorage, Pages, Preserved, SnapSource, StandbySnapshot, BLOCK};
use crate::error::{Error, Result};
use crate::io::{
    AlignedBuf, Device, DeviceInfo, IoError, IoOpKind, IoResult, MemDevice, MemStorage, Storage,
};
use crate::page::PageHeader;
use crate::repl::replica_log::{ReplicaLog, ReplicaLogOpener};
use crate::util::sync::{MutexExt, RwLockExt};
use crate::wal::Lsn;
use crate::{Database, Options};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};

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
        } else if create || self.pres.overlay.contains_key(name) {
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
        let overlay = self.pres.overlay.get(name).cloned().unwrap_or_default();
        let len = overlay.by_page.keys().map(|p| (p + 1) * overlay.size).fold(len, u64::max);
        let d = Arc::new(SnapDevice {
            name: name.to_string(),
            base,
            pres: self.pres.clone(),
            len: Mutex::new(len),
            own: RwLock::new(HashMap::new()),
            overlay,
        });
        files.insert(name.to_string(), d.clone());
        Ok(d)
    }
    fn exists(&self, name: &str) -> bool {
        self.files.locked().contains_key(name)
            || self.visible_in_base(name)
            || (self.pres.overlay.contains_key(name) && !self.removed.locked().contains(name))
    }
    fn list(&self) -> IoResult<Vec<String>> {
        let mut v: HashSet<String> = self.files.locked().keys().cloned().collect();
        v.extend(self.pres.names.iter().filter(|n| self.visible_in_base(n)).cloned());
        let removed = self.removed.locked();
        v.extend(self.pres.overlay.keys().filter(|n| !removed.contains(*n)).cloned());
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
    /// The apply thread's unsealed pages at the snapshot's position.
    overlay: Pages,
}

impl SnapDevice {
    /// Reads `[offset, offset + buf.len())` as the snapshot sees it.
    fn read_view(&self, offset: u64, buf: &mut [u8]) -> IoResult<()> {
        let len = *self.len.locked();
        // The directory's bytes first (only below the length the snapshot saw, and not where
        // the apply thread's pages cover the whole range), then what the apply thread kept for
        // the snapshot (looked at after the read: a block it overwrote meanwhile was kept
        // before it was written), then the snapshot's own blocks.
        let end = offset + buf.len() as u64;
        let covered = |f: Option<&Pages>| {
            f.is_some_and(|f| (offset / BLOCK..end.div_ceil(BLOCK)).all(|b| f.covers_block(b)))
        };
        let in_memory = covered(Some(&self.overlay)) || covered(self.pres.pages.locked().get(&self.name));
        let from_base = if in_memory {
            0
        } else {
            len.min(self.base.capacity()).min(end).saturating_sub(offset) as usize
        };
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
        // Newer over older: what the apply thread kept, its pages at the snapshot's position
        // (sealed as a write-back would), the snapshot's own blocks.
        let kept = self.pres.blocks.locked();
        for b in offset / BLOCK..end.div_ceil(BLOCK) {
            match kept.get(&(self.name.clone(), b)) {
                Some(Some(old)) => copy_part(buf, offset, b * BLOCK, old),
                Some(None) => copy_part(buf, offset, b * BLOCK, &ZEROS),
                None => {}
            }
        }
        drop(kept);
        if let Some(f) = self.pres.pages.locked().get(&self.name) {
            for p in offset.checked_div(f.size).unwrap_or(end)..end.div_ceil(f.size.max(1)) {
                if let Some(page) = f.by_page.get(&p) {
                    copy_part(buf, offset, p * f.size, page);
                }
            }
        }
        let ps = self.overlay.size;
        if let Some(first) = offset.checked_div(ps) {
            for p in first..end.div_ceil(ps) {
                if let Some(page) = self.overlay.by_page.get(&p) {
                    let mut sealed = page.to_vec();
                    PageHeader::seal(&mut sealed);
                    copy_part(buf, offset, p * ps, &sealed);
                }
            }
        }
        let own = self.own.read_locked();
        for b in offset / BLOCK..end.div_ceil(BLOCK) {
            if let Some(o) = own.get(&b) {
                copy_part(buf, offset, b * BLOCK, o);
            }
        }
        Ok(())
    }
}

/// Copies into `buf` (the bytes from `offset`) the part of `src` (the bytes from `at`) they share.
fn copy_part(buf: &mut [u8], offset: u64, at: u64, src: &[u8]) {
    let lo = at.max(offset);
    let hi = (at + src.len() as u64).min(offset + buf.len() as u64);
    if lo < hi {
        buf[(lo - offset) as usize..(hi - offset) as usize]
            .copy_from_slice(&src[(lo - at) as usize..(hi - at) as usize]);
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

/// Builds a snapshot of `cow` from `src` (see the module's comment).
pub(in crate::repl) fn build(
    cow: &CowStorage,
    src: SnapSource,
    options: &Options,
) -> Result<StandbySnapshot> {
    let started = std::time::Instant::now();
    let SnapSource { pres, lsn, acknowledged, records } = src;
    let view = Arc::new(SnapView {
        base: cow.inner().clone(),
        cow: cow.sh.clone(),
        pres: pres.clone(),
        files: Mutex::new(HashMap::new()),
        removed: Mutex::new(HashSet::new()),
        location: format!("{} (standby snapshot at LSN {lsn})", cow.location()),
    });
    let undo_from = records.first().map_or(lsn, |r| r.lsn.min(lsn));
    set_checkpoint(&view, lsn, undo_from)?;
    let scratch = ReplicaLog::open(Arc::new(MemStorage::new()), undo_from)?;
    for r in &records {
        scratch.append_at(r.lsn, r.end, r.kind, &r.payload)?;
    }
    scratch.sync()?;
    let opts = Options { create_if_missing: false, read_only: false, ..options.clone() };
    let db = Database::open_with_log(view.clone(), Some(Box::new(ReplicaLogOpener(scratch))), opts)?;
    let undone = db.recovery_report().losers;
    db.close()?;
    let ro = Options { create_if_missing: false, read_only: true, ..options.clone() };
    let db = Database::open_with_log(view, None, ro)?;
    Ok(StandbySnapshot {
        db,
        lsn,
        acknowledged,
        taken: std::time::SystemTime::now(),
        build: started.elapsed(),
        undone,
        _pres: pres,
    })
}

/// Writes the view's catalog (in the view's memory) with a checkpoint at `redo` (every change
/// up to it is in the view's pages) whose oldest unfinished transaction began at `undo`.
fn set_checkpoint(view: &SnapView, redo: Lsn, undo: Lsn) -> Result<()> {
    let (mut store, cat) =
        crate::table::catalog::CatalogStore::load(view.open(crate::db::CATALOG_FILE, false)?)?;
    let mut cat = cat.ok_or_else(|| Error::Corruption {
        file: format!("{}/{}", view.location, crate::db::CATALOG_FILE),
        offset: 0,
        detail: "the catalog is empty".into(),
    })?;
    cat.checkpoint_redo_lsn = redo;
    cat.checkpoint_undo_lsn = undo;
    store.store(&cat)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::mtr::PageChange;
    use crate::buffer::PageId;
    use crate::db::{PageFiles, RedoPages};
    use crate::io::{HookedStorage, IoHook};
    use crate::wal::engine::TAG_TABLE;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Counts the reads that reach the storage below.
    #[derive(Default)]
    struct Reads(AtomicU64);

    impl IoHook for Reads {
        fn before(&self, _: &str, op: IoOpKind, _: u64, _: usize) -> IoResult<()> {
            if matches!(op, IoOpKind::Read) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
            Ok(())
        }
    }

    const PS: usize = 4096;

    /// Page `page` of heap file 1 set (as a new page) to hold `v` at byte 100, at `lsn`.
    fn set(pages: &mut RedoPages<'_>, page: u64, v: u8, lsn: u64) {
        let change = PageChange::NewPage(vec![(100, vec![v; 8])]);
        let r = pages.apply(TAG_TABLE, PageId::new(1, page), &change, lsn, PS).unwrap();
        assert!(matches!(r, crate::db::Redo::Applied { .. }), "{r:?}");
    }

    /// The byte at 100 of page `page` of heap file 1 as `view` sees it.
    fn seen(view: &SnapView, page: u64) -> u8 {
        let dev = view.open(&crate::db::heap_name(1), false).unwrap();
        let mut buf = AlignedBuf::new(PS);
        dev.read_at(page * PS as u64, &mut buf).unwrap();
        buf[100]
    }

    /// Every way a page can stand when a snapshot registers — unwritten in the apply thread's
    /// memory, held clean, not held (read back from the file later, after its cache was
    /// cleared) — and write-backs of it changed twice since: the snapshot sees each page as it
    /// was, and the write-backs read nothing.
    #[test]
    fn write_back_keeps_what_a_live_snapshot_needs_without_reading() {
        let reads = Arc::new(Reads::default());
        let cow = CowStorage::new(Arc::new(HookedStorage::new(Arc::new(MemStorage::new()), reads.clone())));
        let mut pages = RedoPages::new(PageFiles::One(&cow), u64::MAX, 3, None);
        for p in 0..3 {
            set(&mut pages, p, 1, 10 + p);
        }
        pages.write_back().unwrap();
        pages.clear();
        // Page 0 unwritten, page 1 held clean, page 2 not held.
        set(&mut pages, 0, 2, 20);
        set(&mut pages, 1, 1, 21);
        pages.write_back().unwrap();
        set(&mut pages, 0, 3, 22);
        let pres = cow.register(pages.dirty_pages()).unwrap();
        let view = SnapView {
            base: cow.inner().clone(),
            cow: cow.sh.clone(),
            pres,
            files: Mutex::new(HashMap::new()),
            removed: Mutex::new(HashSet::new()),
            location: "test".into(),
        };
        assert!(cow.has_live());
        for (round, v) in [(0u64, 4u8), (1, 5)] {
            pages.keep_pre_images(cow.has_live());
            for p in 0..3 {
                set(&mut pages, p, v, 30 + 10 * round + p);
            }
            cow.keep_pages(pages.take_pre_images());
            let before = reads.0.load(Ordering::SeqCst);
            pages.write_back().unwrap();
            assert_eq!(reads.0.load(Ordering::SeqCst), before, "write-back {round} read back");
            assert_eq!([seen(&view, 0), seen(&view, 1), seen(&view, 2)], [3, 1, 1], "round {round}");
        }
        assert_eq!(cow.blocks_read_back(), 0);
        drop(view);
        assert!(!cow.has_live());
    }
}
