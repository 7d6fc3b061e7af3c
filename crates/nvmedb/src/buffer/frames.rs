//! Frame memory and per-frame metadata.
//!
//! Owns: one aligned allocation holding every frame of a partition, and the metadata word set
//! of each frame (page id, pins, GCLOCK usage, dirty/valid/sticky flags, content latch).
//! Invariant: the bytes of frame `i` are only read under its latch held shared and only written
//! under its latch held exclusively (or while the frame is owned privately by a loader that
//! claimed it with pins = 1 while it was mapped to no page).
//!
//! Frame memory is one anonymous mapping ([`crate::io::aligned::Mapping`], zero-filled lazily by
//! the kernel). With `huge_pages` the mapping is aligned to and advised for huge pages before it
//! is touched, so random access over a large pool costs far fewer TLB misses and multi-page reads
//! reach the device in few segments (the kernel may still fall back to 4 KiB pages).

use crate::io::aligned::{Mapping, HUGE_PAGE};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use std::sync::RwLock;

/// Page id key of a frame holding no page.
pub(crate) const NO_PAGE: u64 = u64::MAX;

/// Metadata of one frame: one cache line, so two threads working on neighbouring frames do not
/// share a line.
#[derive(Debug)]
#[repr(align(64))]
pub(crate) struct Frame {
    /// Shared/exclusive latch on the frame's bytes.
    pub latch: RwLock<()>,
    /// Key of the page held, or `NO_PAGE`.
    pub page_key: AtomicU64,
    /// Guards and loaders currently using the frame.
    pub pins: AtomicU32,
    /// GCLOCK usage count.
    pub usage: AtomicU32,
    /// Modified since last written.
    pub dirty: AtomicBool,
    /// Bytes hold a verified copy of `page_key` (false while loading or after a failed load).
    pub valid: AtomicBool,
    /// Kept resident (an index page while `pin_index_pages` is on): passed over by eviction
    /// while sticky frames leave room for other pages. Changed only under the write latch or
    /// by a frame's private owner (`Partition::set_sticky` keeps the count).
    pub sticky: AtomicBool,
}

impl Frame {
    fn new() -> Self {
        Self {
            latch: RwLock::new(()),
            page_key: AtomicU64::new(NO_PAGE),
            pins: AtomicU32::new(0),
            usage: AtomicU32::new(0),
            dirty: AtomicBool::new(false),
            valid: AtomicBool::new(false),
            sticky: AtomicBool::new(false),
        }
    }
}

/// Maps `bytes` of frame memory or metadata, advised for huge pages (and aligned to one) when
/// `huge_pages` and it spans at least one.
fn map(bytes: usize, huge_pages: bool) -> crate::error::Result<Mapping> {
    Mapping::new(bytes, huge_pages && bytes >= HUGE_PAGE).map_err(|e| {
        crate::error::Error::ResourceExhausted(format!(
            "cannot map {bytes} bytes of buffer frame memory: {e}"
        ))
    })
}

/// The metadata of every frame of a partition, in its own mapping (advised for huge pages
/// like the frame memory: the metadata of a large pool spans megabytes, and a hit reads one
/// frame's line at random, so 4 KiB pages would cost a TLB miss on most hits).
pub(crate) struct FrameTable {
    mem: Mapping,
    len: usize,
}

// SAFETY: the mapping holds `Frame`s, which are Sync (atomics and a RwLock); the table owns it.
unsafe impl Send for FrameTable {}
// SAFETY: as above.
unsafe impl Sync for FrameTable {}

impl FrameTable {
    fn new(count: usize, huge_pages: bool) -> crate::error::Result<Self> {
        let bytes = count
            .checked_mul(std::mem::size_of::<Frame>())
            .ok_or_else(|| {
                crate::error::Error::ResourceExhausted(format!(
                    "{count} buffer frames do not fit the address space"
                ))
            })?
            .max(1);
        let mem = map(bytes, huge_pages)?;
        let frames = mem.base().cast::<Frame>();
        debug_assert!(frames.is_aligned(), "mmap returns page-aligned memory");
        for i in 0..count {
            // SAFETY: in range of the fresh mapping, aligned; each slot written once.
            unsafe { frames.add(i).write(Frame::new()) };
        }
        Ok(Self { mem, len: count })
    }
}

impl std::ops::Deref for FrameTable {
    type Target = [Frame];
    fn deref(&self) -> &[Frame] {
        // SAFETY: `len` initialised frames start at the mapping's base and live as long as it.
        unsafe { std::slice::from_raw_parts(self.mem.base().cast::<Frame>(), self.len) }
    }
}

impl Drop for FrameTable {
    fn drop(&mut self) {
        // SAFETY: the frames were initialised in `new` and are dropped once, here, before the
        // mapping is unmapped (fields drop after this body).
        unsafe {
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(
                self.mem.base().cast::<Frame>(),
                self.len,
            ))
        };
    }
}

/// Frame memory of a partition.
pub(crate) struct FrameArena {
    mem: Mapping,
    base: *mut u8,
    page_size: usize,
    pub frames: FrameTable,
}

// SAFETY: the raw base pointer refers to `mem`, owned by the arena; concurrent access to frame
// bytes is serialised by each frame's latch (see the module invariant).
unsafe impl Send for FrameArena {}
// SAFETY: as above.
unsafe impl Sync for FrameArena {}

impl FrameArena {
    pub fn new(page_size: usize, count: usize, huge_pages: bool) -> crate::error::Result<Self> {
        assert!(page_size.is_multiple_of(4096), "frame size {page_size} must be a multiple of 4096");
        let bytes = page_size.checked_mul(count).ok_or_else(|| {
            crate::error::Error::ResourceExhausted(format!(
                "{count} frames of {page_size} B do not fit the address space"
            ))
        })?;
        let mem = map(bytes, huge_pages)?;
        let base = mem.base();
        let frames = FrameTable::new(count, huge_pages)?;
        Ok(Self { mem, base, page_size, frames })
    }

    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// Share of the frame memory resident now (tests).
    #[cfg(test)]
    pub fn resident_share(&self) -> f64 {
        self.mem.resident_share()
    }

    /// Faults the frame memory in now (see `Mapping::populate`).
    pub fn populate(&self) -> std::io::Result<()> {
        self.mem.populate()
    }

    /// Bytes of frame `i`.
    ///
    /// # Safety
    /// The caller holds frame `i`'s latch (shared suffices) or owns the frame privately.
    pub unsafe fn bytes(&self, i: usize) -> &[u8] {
        debug_assert!(i < self.frames.len());
        // SAFETY: i is in range, so the slice lies inside `mem`; the caller excludes writers.
        unsafe { std::slice::from_raw_parts(self.base.add(i * self.page_size), self.page_size) }
    }

    /// Mutable bytes of frame `i`.
    ///
    /// # Safety
    /// The caller holds frame `i`'s latch exclusively or owns the frame privately, and no
    /// other reference to these bytes exists.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn bytes_mut(&self, i: usize) -> &mut [u8] {
        debug_assert!(i < self.frames.len());
        // SAFETY: i is in range; exclusivity is the caller's obligation.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(i * self.page_size), self.page_size) }
    }

    /// Address of frame `i`'s first byte (for prefetch hints; not for access).
    ///
    /// # Safety
    /// `i` must be below the frame count.
    pub unsafe fn frame_ptr(&self, i: usize) -> *const u8 {
        debug_assert!(i < self.frames.len());
        // SAFETY: in range per the caller's obligation.
        unsafe { self.base.add(i * self.page_size) }
    }

    /// Total bytes of frame memory (the frames; the mapping may extend to a huge-page
    /// boundary beyond them, never touched).
    pub fn bytes_total(&self) -> usize {
        debug_assert!(self.page_size * self.frames.len() <= self.mem.len());
        self.page_size * self.frames.len()
    }
}

/// A fast hasher for the u64 page keys of the page table (multiplicative, Fx-style).
#[derive(Default, Clone, Copy)]
pub(crate) struct PageKeyHasher(u64);

impl Hasher for PageKeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (v ^ (v >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// HashMap builder using [`PageKeyHasher`].
pub(crate) type PageKeyBuild = BuildHasherDefault<PageKeyHasher>;

/// Mixes a page key into a stripe index.
pub(crate) fn stripe_of(key: u64, stripes: usize) -> usize {
    let h = (key ^ (key >> 31)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    ((h >> 32) as usize) % stripes
}

/// Pin-count bit an evicting thread holds while it unmaps a frame: a lock-free pinner that
/// sees it backs off, so eviction never races with a hit that skipped the page-table lock.
pub(crate) const EVICTING: u32 = 1 << 31;

const XLATE_CHUNK_BITS: u32 = 14;
const XLATE_CHUNK: usize = 1 << XLATE_CHUNK_BITS;
/// Files the translation table covers (larger file ids take the page-table path only).
const XLATE_FILES: usize = 1024;
/// Chunks per file (pages beyond `XLATE_CHUNKS * XLATE_CHUNK` take the page-table path only).
const XLATE_CHUNKS: usize = 4096;

type XlateChunk = [AtomicU32; XLATE_CHUNK];
type XlateFile = [std::sync::atomic::AtomicPtr<XlateChunk>; XLATE_CHUNKS];

/// A lock-free page → frame hint table: `(file, page)` → frame index + 1 (0: unknown).
///
/// It is only a hint: the authoritative mapping is the striped page table, and a reader must
/// pin the frame and then check the frame's `page_key` before trusting it. Writers (the page
/// table's owners, under its stripe lock) keep it equal to the page table for every page they
/// map or unmap. Memory is allocated lazily in chunks of 16 Ki entries and freed on drop.
pub(crate) struct Xlate {
    files: Box<[std::sync::atomic::AtomicPtr<XlateFile>]>,
}

impl Xlate {
    pub fn new() -> Self {
        Self {
            files: (0..XLATE_FILES)
                .map(|_| std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
        }
    }

    fn split(key: u64) -> Option<(usize, usize, usize)> {
        let file = (key >> 40) as usize;
        let page = key & ((1 << 40) - 1);
        let chunk = (page >> XLATE_CHUNK_BITS) as usize;
        (file < XLATE_FILES && chunk < XLATE_CHUNKS).then_some((
            file,
            chunk,
            page as usize & (XLATE_CHUNK - 1),
        ))
    }

    /// The frame last mapped to `key`, if the table knows one.
    #[inline]
    pub fn get(&self, key: u64) -> Option<usize> {
        use std::sync::atomic::Ordering::Acquire;
        let (f, c, i) = Self::split(key)?;
        let file = self.files[f].load(Acquire);
        if file.is_null() {
            return None;
        }
        // SAFETY: non-null pointers in `files` point to live allocations owned by `self`.
        let chunk = unsafe { (*file)[c].load(Acquire) };
        if chunk.is_null() {
            return None;
        }
        // SAFETY: as above, for chunks.
        let v = unsafe { (*chunk)[i].load(Acquire) };
        (v != 0).then(|| v as usize - 1)
    }

    /// Records that `key` is mapped to `frame`.
    pub fn set(&self, key: u64, frame: usize) {
        use std::sync::atomic::Ordering::Release;
        let Some((f, c, i)) = Self::split(key) else { return };
        let file = get_or_alloc(&self.files[f], || {
            Box::new(std::array::from_fn(|_| std::sync::atomic::AtomicPtr::new(std::ptr::null_mut())))
        });
        // SAFETY: `file` is live (owned by self).
        let chunk =
            get_or_alloc(unsafe { &(*file)[c] }, || Box::new(std::array::from_fn(|_| AtomicU32::new(0))));
        // SAFETY: `chunk` is live (owned by self).
        unsafe { (*chunk)[i].store(frame as u32 + 1, Release) };
    }

    /// Forgets `key` if it still points at `frame`.
    pub fn clear(&self, key: u64, frame: usize) {
        use std::sync::atomic::Ordering::{AcqRel, Acquire};
        let Some((f, c, i)) = Self::split(key) else { return };
        let file = self.files[f].load(Acquire);
        if file.is_null() {
            return;
        }
        // SAFETY: live, owned by self.
        let chunk = unsafe { (*file)[c].load(Acquire) };
        if chunk.is_null() {
            return;
        }
        // SAFETY: live, owned by self.
        let _ = unsafe { (*chunk)[i].compare_exchange(frame as u32 + 1, 0, AcqRel, Acquire) };
    }
}

/// The allocation `slot` points at, installing `make()` first if it is null (a racing installer
/// wins; the loser's box is dropped unshared).
fn get_or_alloc<T>(slot: &std::sync::atomic::AtomicPtr<T>, make: impl FnOnce() -> Box<T>) -> *mut T {
    use std::sync::atomic::Ordering::{AcqRel, Acquire};
    let cur = slot.load(Acquire);
    if !cur.is_null() {
        return cur;
    }
    let raw = Box::into_raw(make());
    match slot.compare_exchange(std::ptr::null_mut(), raw, AcqRel, Acquire) {
        Ok(_) => raw,
        Err(existing) => {
            // SAFETY: `raw` was never shared.
            drop(unsafe { Box::from_raw(raw) });
            existing
        }
    }
}

impl Drop for Xlate {
    fn drop(&mut self) {
        for f in self.files.iter() {
            let file = f.load(std::sync::atomic::Ordering::Acquire);
            if file.is_null() {
                continue;
            }
            // SAFETY: we own every allocation reachable from `files`, and nobody else can
            // reach them any more (we have `&mut self`).
            let file = unsafe { Box::from_raw(file) };
            for c in file.iter() {
                let chunk = c.load(std::sync::atomic::Ordering::Acquire);
                if !chunk.is_null() {
                    // SAFETY: as above.
                    drop(unsafe { Box::from_raw(chunk) });
                }
            }
        }
    }
}

#[cfg(test)]
mod xlate_tests {
    use super::*;

    #[test]
    fn set_get_clear() {
        let x = Xlate::new();
        let k = |f: u64, p: u64| (f << 40) | p;
        assert_eq!(x.get(k(3, 5)), None);
        x.set(k(3, 5), 0);
        x.set(k(3, 70_000), 9);
        assert_eq!(x.get(k(3, 5)), Some(0));
        assert_eq!(x.get(k(3, 70_000)), Some(9));
        assert_eq!(x.get(k(4, 5)), None);
        x.clear(k(3, 5), 1); // not the frame it points at: kept
        assert_eq!(x.get(k(3, 5)), Some(0));
        x.clear(k(3, 5), 0);
        assert_eq!(x.get(k(3, 5)), None);
        // Out of range keys are simply not covered.
        x.set(k(5000, 1), 1);
        assert_eq!(x.get(k(5000, 1)), None);
    }
}
