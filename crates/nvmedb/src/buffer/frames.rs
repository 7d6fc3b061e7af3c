//! Frame memory and per-frame metadata.
//!
//! Owns: one aligned allocation holding every frame of a partition, and the metadata word set
//! of each frame (page id, pins, GCLOCK usage, dirty/valid/sticky flags, content latch).
//! Invariant: the bytes of frame `i` are only read under its latch held shared and only written
//! under its latch held exclusively (or while the frame is owned privately by a loader that
//! claimed it with pins = 1 while it was mapped to no page).

use crate::io::AlignedBuf;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use std::sync::RwLock;

/// Page id key of a frame holding no page.
pub(crate) const NO_PAGE: u64 = u64::MAX;

/// Metadata of one frame.
#[derive(Debug)]
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
    /// Never chosen as a victim (pinned index page).
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

/// Frame memory of a partition.
pub(crate) struct FrameArena {
    mem: AlignedBuf,
    base: *mut u8,
    page_size: usize,
    pub frames: Box<[Frame]>,
}

// SAFETY: the raw base pointer refers to `mem`, owned by the arena; concurrent access to frame
// bytes is serialised by each frame's latch (see the module invariant).
unsafe impl Send for FrameArena {}
// SAFETY: as above.
unsafe impl Sync for FrameArena {}

impl FrameArena {
    pub fn new(page_size: usize, count: usize) -> Self {
        let mut mem = AlignedBuf::new(page_size * count);
        let base = mem.as_mut_ptr();
        let frames = (0..count).map(|_| Frame::new()).collect::<Vec<_>>().into_boxed_slice();
        Self { mem, base, page_size, frames }
    }

    pub fn len(&self) -> usize {
        self.frames.len()
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

    /// Total bytes of frame memory.
    pub fn bytes_total(&self) -> usize {
        self.mem.len()
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
