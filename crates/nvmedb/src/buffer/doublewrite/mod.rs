//! The double-write area: torn-page protection for in-place page writes without full page
//! images in the log (InnoDB's doublewrite buffer).
//!
//! Owns: the double-write file ([`DOUBLEWRITE_FILE`] in a database's data directory; its bytes
//! are described in `docs/format.md`), [`DoubleWrite`] (a ring of batches of page copies, the
//! one sync of the file that concurrent writers share, and the data syncs that free a region
//! of the ring before it is reused), and the open-time repair ([`repair`]).
//!
//! Invariants:
//! - a page is written in place only after a copy of exactly the bytes written is durable in the
//!   area: [`DoubleWrite::write`] writes the batch's copies with one device write, syncs the
//!   file (one sync serves every batch written before it started), and only then calls the
//!   caller's in-place writes;
//! - a region of the ring is overwritten only after the in-place writes its copies protected
//!   are durable: before the ring wraps onto it, every earlier batch's in-place writes have
//!   finished and every data device written since the last such sync is synced (a *data sync*,
//!   counted in [`DoubleWriteStats::data_syncs`]);
//! - so after a crash, a page whose in-place image fails its checks (torn) has a valid copy of
//!   the write that tore it in the area, the newest copy of that page: [`repair`] restores it
//!   before redo. A batch whose own write tore (its header or a copy fails its checks) is
//!   ignored: its in-place writes had not begun;
//! - each read-write open starts a new *generation* (a new random id in the file header, written
//!   in its first 512-byte sector, after the repair): copies of older generations are never used
//!   again, because after the repair every page they protected is intact.

use super::PageId;
use crate::error::{Error, Result};
use crate::io::{AlignedBuf, Device, Storage};
use crate::page::PageHeader;
use crate::util::bytes::{u32_at, u64_at};
use crate::util::sync::{CondvarExt, MutexExt};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};

/// The double-write file of a data directory.
pub const DOUBLEWRITE_FILE: &str = "doublewrite.nvdw";

/// Unit of the area: every batch starts on a block and every copy is whole blocks.
const BLOCK: usize = 4096;
/// Magic of the file header (block 0).
const FILE_MAGIC: [u8; 8] = *b"NVMEDBDW";
/// Magic of a batch header block.
const BATCH_MAGIC: [u8; 8] = *b"NVDWBTCH";
/// Format version of the file.
pub const DOUBLEWRITE_VERSION: u32 = 1;
/// Meaningful bytes of the file header (inside the first 512-byte sector, so that rewriting it
/// is atomic on any disk).
const FILE_HEADER_BYTES: usize = 64;
/// Fixed part of a batch header.
const BATCH_FIXED_BYTES: usize = 32;
/// One page descriptor of a batch header.
const ENTRY_BYTES: usize = 32;
/// Page copies one batch header describes.
pub const MAX_BATCH_PAGES: usize = (BLOCK - 4 - BATCH_FIXED_BYTES) / ENTRY_BYTES;
/// The smallest area [`DoubleWrite::create`] accepts.
pub const MIN_AREA_BYTES: u64 = 1 << 20;
/// The default area ([`Options::doublewrite_bytes`](crate::Options::doublewrite_bytes)).
pub const DEFAULT_AREA_BYTES: u64 = 16 << 20;
/// The file is prepared (preallocated) this far ahead of the ring's first lap.
const PREPARE_STEP: u64 = 1 << 20;
/// Largest share of the ring one write may take (so that writers overlap).
const CHUNK_SHARE: u64 = 4;
/// Largest single write of copies.
const MAX_CHUNK_BYTES: u64 = 4 << 20;

thread_local! {
    /// This thread's buffer for composing batches (grown to the largest chunk seen).
    static STAGING: RefCell<Option<AlignedBuf>> = const { RefCell::new(None) };
}

/// A page to write in place, protected by [`DoubleWrite::write`].
pub struct DwPage<'a> {
    /// The pool's tag in the log (`TAG_TABLE` or `TAG_INDEX` of `wal::engine`): says whether
    /// `pid.file` is a heap or an index file.
    pub tag: u8,
    /// The page.
    pub pid: PageId,
    /// Its sealed bytes, exactly as they are written in place.
    pub bytes: &'a [u8],
    /// The data device the page is written to (synced before the ring reuses the copy's place).
    pub device: &'a Arc<dyn Device>,
}

/// Counters of a [`DoubleWrite`] since it was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DoubleWriteStats {
    /// Size of the ring, bytes.
    pub area_bytes: u64,
    /// Writes of batches to the area (one device write each).
    pub writes: u64,
    /// Page copies written.
    pub pages: u64,
    /// Bytes written to the area (headers included).
    pub bytes: u64,
    /// Syncs of the area (a sync serves every write finished before it began).
    pub syncs: u64,
    /// Times the ring had to sync the data devices before reusing a region (keep it rare by
    /// sizing the area).
    pub data_syncs: u64,
    /// Reservations that waited for earlier batches' in-place writes before a data sync.
    pub space_waits: u64,
}

/// The ring's bookkeeping, under `DoubleWrite::ring`.
struct Ring {
    /// Next free block, counted from the start of the first lap (block `p` lies at file offset
    /// `BLOCK × (1 + p mod area_blocks)`).
    next: u64,
    /// Sequence number of the next batch.
    seq: u64,
    /// Every reservation ending at or before this block has its in-place writes durable.
    retired: u64,
    /// Reservations whose in-place writes have not finished: start → end.
    in_flight: BTreeMap<u64, u64>,
    /// Data devices written in place since the last data sync.
    written: Vec<Arc<dyn Device>>,
    /// A data sync is running (others wait for it).
    data_sync_running: bool,
    /// Threads waiting for space.
    waiters: usize,
    /// Bytes of the file prepared for writes.
    prepared: u64,
}

/// The shared sync of the area: tickets of finished writes and how far a sync has covered them.
struct SyncState {
    written: u64,
    synced: u64,
    running: bool,
}

/// The double-write area of one data directory (one file, copies of any page size).
pub struct DoubleWrite {
    dev: Arc<dyn Device>,
    name: String,
    generation: u64,
    area_blocks: u64,
    max_chunk_blocks: u64,
    ring: Mutex<Ring>,
    space: Condvar,
    sync: Mutex<SyncState>,
    synced: Condvar,
    writes: AtomicU64,
    pages: AtomicU64,
    bytes: AtomicU64,
    syncs: AtomicU64,
    data_syncs: AtomicU64,
    space_waits: AtomicU64,
}

impl std::fmt::Debug for DoubleWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DoubleWrite")
            .field("file", &self.name)
            .field("area_blocks", &self.area_blocks)
            .finish()
    }
}

/// The file header's bytes for `generation` and an area of `area_bytes`.
fn file_header(generation: u64, area_bytes: u64) -> [u8; FILE_HEADER_BYTES] {
    let mut h = [0u8; FILE_HEADER_BYTES];
    h[0..8].copy_from_slice(&FILE_MAGIC);
    h[8..12].copy_from_slice(&DOUBLEWRITE_VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&(BLOCK as u32).to_le_bytes());
    h[16..24].copy_from_slice(&generation.to_le_bytes());
    h[24..32].copy_from_slice(&area_bytes.to_le_bytes());
    let crc = crate::util::crc32c(&h[..60]);
    h[60..64].copy_from_slice(&crc.to_le_bytes());
    h
}

/// The file header: `Some((generation, area bytes))` when it is valid.
fn parse_file_header(b: &[u8]) -> Option<(u64, u64)> {
    let ok = b[0..8] == FILE_MAGIC
        && u32_at(b, 8) == DOUBLEWRITE_VERSION
        && u32_at(b, 12) == BLOCK as u32
        && u32_at(b, 60) == crate::util::crc32c(&b[..60]);
    ok.then(|| (u64_at(b, 16), u64_at(b, 24)))
}

impl DoubleWrite {
    /// Starts a new generation of the area in `storage` ([`DOUBLEWRITE_FILE`], created when
    /// missing) with a ring of `area_bytes` (rounded down to 4 KiB; at least
    /// [`MIN_AREA_BYTES`]). Call [`repair`] first: copies of earlier generations are never
    /// read again.
    pub fn create(storage: &dyn Storage, area_bytes: u64) -> Result<Arc<Self>> {
        if area_bytes < MIN_AREA_BYTES {
            return Err(Error::Config {
                key: "doublewrite_bytes".into(),
                detail: format!("{area_bytes} bytes is smaller than the minimum {MIN_AREA_BYTES}"),
            });
        }
        let area_blocks = area_bytes / BLOCK as u64;
        let dev = storage.open(DOUBLEWRITE_FILE, true)?;
        let name = dev.info().name;
        let generation = crate::util::Rng::new(crate::util::Rng::seed_from_time()).next_u64() | 1;
        let mut block = AlignedBuf::new(BLOCK);
        block[..FILE_HEADER_BYTES].copy_from_slice(&file_header(generation, area_blocks * BLOCK as u64));
        dev.write_at(0, &block)?;
        dev.sync()?;
        let prepared = dev.capacity() / BLOCK as u64 * BLOCK as u64;
        Ok(Arc::new(Self {
            dev,
            name,
            generation,
            area_blocks,
            max_chunk_blocks: (area_blocks / CHUNK_SHARE).min(MAX_CHUNK_BYTES / BLOCK as u64),
            ring: Mutex::new(Ring {
                next: 0,
                seq: 1,
                retired: 0,
                in_flight: BTreeMap::new(),
                written: Vec::new(),
                data_sync_running: false,
                waiters: 0,
                prepared,
            }),
            space: Condvar::new(),
            sync: Mutex::new(SyncState { written: 0, synced: 0, running: false }),
            synced: Condvar::new(),
            writes: AtomicU64::new(0),
            pages: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            data_syncs: AtomicU64::new(0),
            space_waits: AtomicU64::new(0),
        }))
    }

    /// The file's name (for messages).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Counters since this generation began.
    pub fn stats(&self) -> DoubleWriteStats {
        DoubleWriteStats {
            area_bytes: self.area_blocks * BLOCK as u64,
            writes: self.writes.load(Relaxed),
            pages: self.pages.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            syncs: self.syncs.load(Relaxed),
            data_syncs: self.data_syncs.load(Relaxed),
            space_waits: self.space_waits.load(Relaxed),
        }
    }

    /// Writes `pages` in place, protected: in chunks that fit the ring, each chunk's copies are
    /// written to the area with one device write and made durable (a sync shared with
    /// concurrent writers), then `in_place` is called with the range of `pages` to write in
    /// place (it returns once those writes are done). A failure stops at the chunk that failed.
    pub fn write(
        &self,
        pages: &[DwPage<'_>],
        in_place: &mut dyn FnMut(Range<usize>) -> Result<()>,
    ) -> Result<()> {
        let mut from = 0;
        while from < pages.len() {
            let (to, blocks) = self.chunk(pages, from)?;
            let (start, seq) = self.reserve(blocks)?;
            let r = self.write_copies(start, seq, &pages[from..to]).and_then(|()| self.sync_area());
            let r = r.and_then(|()| in_place(from..to));
            // The in-place writes were attempted (or none was): either way their devices are
            // synced before this region is reused, and the region is no longer in flight.
            self.finish(start, &pages[from..to]);
            r?;
            from = to;
        }
        Ok(())
    }

    /// The end of the chunk starting at `pages[from]` and the blocks it takes.
    fn chunk(&self, pages: &[DwPage<'_>], from: usize) -> Result<(usize, u64)> {
        let mut blocks = 0;
        let mut to = from;
        while to < pages.len() {
            let len = pages[to].bytes.len();
            if len == 0 || !len.is_multiple_of(BLOCK) {
                return Err(Error::InvalidArgument(format!(
                    "a page of {len} bytes cannot be double-written (whole {BLOCK}-byte blocks only)"
                )));
            }
            let need = (len / BLOCK) as u64 + u64::from((to - from).is_multiple_of(MAX_BATCH_PAGES));
            if blocks + need > self.max_chunk_blocks {
                if to == from {
                    return Err(Error::Config {
                        key: "doublewrite_bytes".into(),
                        detail: format!(
                            "a {len}-byte page does not fit a quarter of the {}-byte double-write area",
                            self.area_blocks * BLOCK as u64
                        ),
                    });
                }
                break;
            }
            blocks += need;
            to += 1;
        }
        Ok((to, blocks))
    }

    /// Reserves `blocks` consecutive blocks of the ring (never across its end), waiting for a
    /// data sync when they would overwrite copies whose in-place writes may not be durable yet.
    /// Returns the first block and the batch's sequence number.
    fn reserve(&self, blocks: u64) -> Result<(u64, u64)> {
        let area = self.area_blocks;
        let mut r = self.ring.locked();
        let mut waited = false;
        loop {
            let mut start = r.next;
            if start % area + blocks > area {
                start += area - start % area; // the ring's tail is too short: skip it
            }
            let end = start + blocks;
            if end <= r.retired + area {
                let phys_end = BLOCK as u64 * (1 + start % area + blocks);
                if phys_end > r.prepared {
                    let upto = (r.prepared + PREPARE_STEP).max(phys_end).min(BLOCK as u64 * (1 + area));
                    self.dev.preallocate(r.prepared, upto - r.prepared)?;
                    r.prepared = upto;
                }
                r.next = end;
                r.in_flight.insert(start, end);
                let seq = r.seq;
                r.seq += 1;
                return Ok((start, seq));
            }
            // The region still holds copies that may be needed: once every batch before it has
            // finished its in-place writes, sync the data devices they wrote.
            let need = end - area;
            let finished = r.in_flight.keys().next().copied().unwrap_or(r.next);
            if finished >= need && !r.data_sync_running {
                r.data_sync_running = true;
                let devices = std::mem::take(&mut r.written);
                drop(r);
                let synced = devices.iter().try_for_each(|d| d.sync());
                r = self.ring.locked();
                r.data_sync_running = false;
                match synced {
                    Ok(()) => {
                        r.retired = r.retired.max(finished);
                        self.data_syncs.fetch_add(1, Relaxed);
                    }
                    Err(e) => {
                        // Still unsynced: keep them for the next attempt.
                        for d in devices {
                            note_device(&mut r.written, &d);
                        }
                        self.space.notify_all();
                        return Err(e.into());
                    }
                }
                self.space.notify_all();
                continue;
            }
            if !waited {
                waited = true;
                self.space_waits.fetch_add(1, Relaxed);
            }
            r.waiters += 1;
            r = self.space.wait_locked(r);
            r.waiters -= 1;
        }
    }

    /// Composes the copies of `pages` (batches of at most [`MAX_BATCH_PAGES`], each behind its
    /// header block) at block `start` and writes them with one device write.
    fn write_copies(&self, start: u64, seq: u64, pages: &[DwPage<'_>]) -> Result<()> {
        let blocks: usize = pages.len().div_ceil(MAX_BATCH_PAGES)
            + pages.iter().map(|p| p.bytes.len() / BLOCK).sum::<usize>();
        let offset = BLOCK as u64 * (1 + start % self.area_blocks);
        STAGING.with(|cell| {
            let mut slot = cell.borrow_mut();
            let buf = AlignedBuf::reuse_or_large(slot.take(), blocks * BLOCK);
            let buf = slot.insert(buf);
            let out = &mut buf[..blocks * BLOCK];
            let mut at = 0;
            for batch in pages.chunks(MAX_BATCH_PAGES) {
                let header = &mut out[at..at + BLOCK];
                header.fill(0);
                header[0..8].copy_from_slice(&BATCH_MAGIC);
                header[8..16].copy_from_slice(&self.generation.to_le_bytes());
                header[16..24].copy_from_slice(&seq.to_le_bytes());
                header[24..28].copy_from_slice(&(batch.len() as u32).to_le_bytes());
                for (k, p) in batch.iter().enumerate() {
                    let e = &mut header[BATCH_FIXED_BYTES + k * ENTRY_BYTES..][..ENTRY_BYTES];
                    e[0] = p.tag;
                    e[4..8].copy_from_slice(&(p.bytes.len() as u32).to_le_bytes());
                    e[8..12].copy_from_slice(&p.pid.file.to_le_bytes());
                    e[16..24].copy_from_slice(&p.pid.page.to_le_bytes());
                    e[24..32].copy_from_slice(&PageHeader::lsn_of(p.bytes).to_le_bytes());
                }
                let crc = crate::util::crc32c(&header[..BLOCK - 4]);
                header[BLOCK - 4..].copy_from_slice(&crc.to_le_bytes());
                at += BLOCK;
                for p in batch {
                    out[at..at + p.bytes.len()].copy_from_slice(p.bytes);
                    at += p.bytes.len();
                }
            }
            debug_assert_eq!(at, blocks * BLOCK);
            self.dev.write_at(offset, out)?;
            self.writes.fetch_add(1, Relaxed);
            self.pages.fetch_add(pages.len() as u64, Relaxed);
            self.bytes.fetch_add(out.len() as u64, Relaxed);
            Ok(())
        })
    }

    /// Makes every finished write of the area durable: one thread syncs while the others whose
    /// writes finished before that sync began wait for it (as a group commit does).
    fn sync_area(&self) -> Result<()> {
        let mut s = self.sync.locked();
        s.written += 1;
        let ticket = s.written;
        loop {
            if s.synced >= ticket {
                return Ok(());
            }
            if s.running {
                s = self.synced.wait_locked(s);
                continue;
            }
            s.running = true;
            let target = s.written;
            drop(s);
            let r = self.dev.sync();
            s = self.sync.locked();
            s.running = false;
            if r.is_ok() {
                s.synced = s.synced.max(target);
                self.syncs.fetch_add(1, Relaxed);
            }
            self.synced.notify_all();
            r?;
        }
    }

    /// The reservation at `start` is done: its pages' devices join those the next data sync
    /// syncs, and the region is no longer in flight.
    fn finish(&self, start: u64, pages: &[DwPage<'_>]) {
        let mut r = self.ring.locked();
        for p in pages {
            note_device(&mut r.written, p.device);
        }
        r.in_flight.remove(&start);
        if r.waiters > 0 {
            self.space.notify_all();
        }
    }
}

/// Adds `d` to `devices` unless it is there already.
fn note_device(devices: &mut Vec<Arc<dyn Device>>, d: &Arc<dyn Device>) {
    let same = |x: &Arc<dyn Device>| std::ptr::addr_eq(Arc::as_ptr(x), Arc::as_ptr(d));
    if !devices.iter().any(same) {
        devices.push(d.clone());
    }
}

mod repair;
pub use repair::{repair, RepairReport};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{CrashSimStorage, MemStorage, WriteFate};
    use crate::page::PageType;

    fn page(file: u32, no: u64, lsn: u64, fill: u8, size: usize) -> AlignedBuf {
        let mut p = AlignedBuf::new(size);
        PageHeader::init(&mut p, PageType::Heap, file, no);
        p[64..size - 8].fill(fill);
        PageHeader::set_lsn(&mut p, lsn);
        PageHeader::seal(&mut p);
        p
    }

    fn locate_in<'a>(
        s: &'a dyn Storage,
    ) -> impl FnMut(u8, u32, usize) -> Result<Option<Arc<dyn Device>>> + 'a {
        move |tag, file, _| {
            let n = format!("f{tag}.{file}");
            Ok(if s.exists(&n) { Some(s.open(&n, false)?) } else { None })
        }
    }

    /// Writes `pages` through the area into `f<tag>.<file>` devices of `s`.
    fn write_through(dw: &DoubleWrite, s: &dyn Storage, pages: &[(u8, u32, &AlignedBuf)]) {
        let devs: Vec<Arc<dyn Device>> =
            pages.iter().map(|(t, f, _)| s.open(&format!("f{t}.{f}"), true).unwrap()).collect();
        let dw_pages: Vec<DwPage<'_>> = pages
            .iter()
            .zip(&devs)
            .map(|((t, f, b), d)| DwPage {
                tag: *t,
                pid: PageId::new(*f, u64_at(b, 16)),
                bytes: &b[..],
                device: d,
            })
            .collect();
        dw.write(&dw_pages, &mut |r| {
            for p in &dw_pages[r] {
                p.device.write_at(p.pid.page * p.bytes.len() as u64, p.bytes)?;
            }
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn a_torn_in_place_write_is_restored_from_its_copy() {
        let s = CrashSimStorage::new();
        let dw = DoubleWrite::create(&s, MIN_AREA_BYTES).unwrap();
        let v1 = page(3, 2, 10, 1, 16384);
        write_through(&dw, &s, &[(0, 3, &v1)]);
        s.device("f0.3").unwrap().sync().unwrap();
        let v2 = page(3, 2, 20, 2, 16384);
        write_through(&dw, &s, &[(0, 3, &v2)]);
        // The power fails while the in-place write is in progress: only its first sector lands.
        let data = s.device("f0.3").unwrap();
        assert_eq!(data.pending_writes(), 1);
        data.crash_with(|_, _, _| WriteFate::Torn(1));
        let mut back = AlignedBuf::new(16384);
        data.read_at(2 * 16384, &mut back).unwrap();
        assert!(PageHeader::verify(&back, "f", 0, 3, 2).is_err(), "the page is torn");
        let rep = repair(&s, &mut locate_in(&s), true).unwrap();
        assert_eq!((rep.pages_checked, rep.pages_restored, rep.pages_without_copy), (1, 1, 0), "{rep:?}");
        data.read_at(2 * 16384, &mut back).unwrap();
        assert_eq!(&back[..], &v2[..], "the newest copy is restored");
        // The restore was synced: a crash now keeps it.
        data.crash_with(|_, _, _| WriteFate::Dropped);
        data.read_at(2 * 16384, &mut back).unwrap();
        assert_eq!(&back[..], &v2[..]);
    }

    #[test]
    fn a_torn_copy_is_ignored_and_intact_pages_are_left_alone() {
        let s = CrashSimStorage::new();
        let dw = DoubleWrite::create(&s, MIN_AREA_BYTES).unwrap();
        let v1 = page(1, 0, 5, 7, 4096);
        write_through(&dw, &s, &[(1, 1, &v1)]);
        s.device("f1.1").unwrap().sync().unwrap();
        // A second batch whose own write tears: the crash comes before its sync, so its
        // in-place write never began. Composed by hand (write() would sync it).
        let v2 = page(1, 0, 9, 8, 4096);
        let dev = s.device("f1.1").unwrap();
        let d: Arc<dyn Device> = dev.clone();
        let (start, seq) = dw.reserve(2).unwrap();
        dw.write_copies(start, seq, &[DwPage { tag: 1, pid: PageId::new(1, 0), bytes: &v2, device: &d }])
            .unwrap();
        s.device(DOUBLEWRITE_FILE).unwrap().crash_with(|_, _, _| WriteFate::Torn(3));
        let rep = repair(&s, &mut locate_in(&s), true).unwrap();
        assert_eq!((rep.pages_checked, rep.pages_restored), (1, 0), "{rep:?}");
        let mut back = AlignedBuf::new(4096);
        dev.read_at(0, &mut back).unwrap();
        assert_eq!(&back[..], &v1[..], "the intact page is not replaced");
    }

    #[test]
    fn a_new_generation_ignores_older_copies() {
        let s = MemStorage::new();
        let dw = DoubleWrite::create(&s, MIN_AREA_BYTES).unwrap();
        let v1 = page(2, 1, 5, 7, 4096);
        write_through(&dw, &s, &[(0, 2, &v1)]);
        drop(dw);
        let _dw = DoubleWrite::create(&s, MIN_AREA_BYTES).unwrap();
        // The page is destroyed after the new generation began: its old copy is not used.
        let data = s.open("f0.2", false).unwrap();
        data.write_at(4096, &AlignedBuf::new(4096)).unwrap();
        let rep = repair(&s, &mut locate_in(&s), true).unwrap();
        assert_eq!((rep.batches, rep.copies, rep.pages_restored), (0, 0, 0), "{rep:?}");
    }

    #[test]
    fn the_ring_wraps_only_after_syncing_the_data_it_protected() {
        let s = CrashSimStorage::new();
        let dw = DoubleWrite::create(&s, MIN_AREA_BYTES).unwrap();
        // 1 MiB ring of 256 blocks; batches of 64 KiB pages (17 blocks with the header).
        let pages: Vec<AlignedBuf> = (0..40).map(|i| page(4, i, 100 + i, i as u8, 65536)).collect();
        for p in &pages {
            write_through(&dw, &s, &[(0, 4, p)]);
        }
        let st = dw.stats();
        assert_eq!(st.writes, 40);
        assert!(st.data_syncs >= 2 && st.data_syncs <= 3, "{st:?}");
        // Everything written before the last data sync is durable in place: tear every pending
        // write and repair; every page is intact or restored.
        let data = s.device("f0.4").unwrap();
        let pending = data.pending_writes();
        assert!(pending > 0 && pending < 40, "{pending}");
        data.crash_with(|_, _, _| WriteFate::Torn(2));
        s.device(DOUBLEWRITE_FILE).unwrap().crash_with(|_, _, _| WriteFate::Persisted);
        let rep = repair(&s, &mut locate_in(&s), true).unwrap();
        assert_eq!(rep.pages_restored, pending as u64, "{rep:?}");
        assert_eq!(rep.pages_without_copy, 0, "{rep:?}");
        let mut back = AlignedBuf::new(65536);
        for (i, p) in pages.iter().enumerate() {
            data.read_at(i as u64 * 65536, &mut back).unwrap();
            assert_eq!(&back[..], &p[..], "page {i}");
        }
    }

    #[test]
    fn concurrent_writers_share_syncs_and_big_batches_are_split() {
        let s = MemStorage::new();
        let dw = DoubleWrite::create(&s, 8 * MIN_AREA_BYTES).unwrap();
        let big: Vec<AlignedBuf> = (0..300).map(|i| page(5, i, 1 + i, 3, 4096)).collect();
        let refs: Vec<(u8, u32, &AlignedBuf)> = big.iter().map(|p| (0u8, 5u32, p)).collect();
        write_through(&dw, &s, &refs);
        let st = dw.stats();
        assert_eq!(st.pages, 300);
        assert_eq!(st.writes, 1, "300 pages of 4 KiB and 3 headers fit one quarter of an 8 MiB ring");
        std::thread::scope(|sc| {
            for t in 0..4u32 {
                let (dw, s) = (&dw, &s);
                sc.spawn(move || {
                    for i in 0..50 {
                        let p = page(10 + t, i, 1000 + i, 9, 8192);
                        write_through(dw, s, &[(1, 10 + t, &p)]);
                    }
                });
            }
        });
        let st = dw.stats();
        assert_eq!(st.writes, 201);
        assert!(st.syncs <= st.writes, "{st:?}");
        let rep = repair(&s, &mut locate_in(&s), false).unwrap();
        assert_eq!((rep.pages_checked, rep.pages_restored), (500, 0), "{rep:?}");
    }

    #[test]
    fn a_damaged_header_still_repairs_from_checked_batches() {
        let s = CrashSimStorage::new();
        let dw = DoubleWrite::create(&s, MIN_AREA_BYTES).unwrap();
        let v = page(6, 3, 42, 5, 4096);
        write_through(&dw, &s, &[(0, 6, &v)]);
        let file = s.device(DOUBLEWRITE_FILE).unwrap();
        let mut head = AlignedBuf::new(4096);
        file.read_at(0, &mut head).unwrap();
        head[20] ^= 0xFF;
        file.write_at(0, &head).unwrap();
        s.device("f0.6").unwrap().crash_with(|_, _, _| WriteFate::Torn(1));
        let rep = repair(&s, &mut locate_in(&s), true).unwrap();
        assert!(rep.header_damaged, "{rep:?}");
        assert_eq!(rep.pages_restored, 1, "{rep:?}");
        let missing = repair(&MemStorage::new(), &mut |_, _, _| Ok(None), true).unwrap();
        assert!(missing.missing);
    }
}
