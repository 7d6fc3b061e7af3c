//! Page guards: a shared fix ([`PageRef`]) and an exclusive fix ([`PageMut`]) of a page.
//!
//! Owns: the guards and the fix modes. Invariants:
//! - a guard holds its frame's latch (shared or exclusive) and, except a sticky index page
//!   fixed through the fast path, a pin, until it drops: the page stays in its frame;
//! - a modified page is marked dirty before its pin is released, so an evictor that sees no
//!   pin sees the dirty flag; while the pool logs, the change is handed, still latched and
//!   pinned, to the thread's open mini-transaction (`logging.rs`) instead.

use super::logging::Deferred;
use super::{BufferPool, Partition};
use crate::buffer::PageId;
use crate::page::PageHeader;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::Ordering::*;
use std::sync::{RwLockReadGuard, RwLockWriteGuard};

/// A shared (read) fix of a page. The page stays resident and unchanged while the guard lives.
pub struct PageRef<'a> {
    pub(super) part: &'a Partition,
    pub(super) frame: usize,
    pub(super) pid: PageId,
    /// False for a kept-resident (sticky) index page fixed through the fast path: the shared
    /// latch alone keeps it in its frame (eviction unmaps a frame only under its write latch).
    pub(super) pinned: bool,
    pub(super) latch: Option<RwLockReadGuard<'a, ()>>,
}

/// An exclusive (write) fix of a page. Mutable access marks the page dirty.
pub struct PageMut<'a> {
    pub(super) pool: &'a BufferPool,
    pub(super) part: &'a Partition,
    pub(super) frame: usize,
    pub(super) pid: PageId,
    pub(super) modified: bool,
    /// Copy of the page as fixed (only while the pool logs changes; `None` for a new page).
    pub(super) before: Option<Box<[u8]>>,
    pub(super) latch: Option<RwLockWriteGuard<'a, ()>>,
}

impl PageRef<'_> {
    /// The page this guard fixes.
    pub fn page_id(&self) -> PageId {
        self.pid
    }
}

impl Deref for PageRef<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: we hold the frame's latch shared (and a pin, or the frame is sticky: it is
        // unmapped only under its write latch).
        unsafe { self.part.arena.bytes(self.frame) }
    }
}

impl Drop for PageRef<'_> {
    fn drop(&mut self) {
        self.latch.take();
        if self.pinned {
            self.part.unpin(self.frame);
        }
    }
}

impl PageMut<'_> {
    /// The page this guard fixes.
    pub fn page_id(&self) -> PageId {
        self.pid
    }

    /// Records the LSN of the change just made (the WAL rule uses it at write-back).
    pub fn set_lsn(&mut self, lsn: u64) {
        PageHeader::set_lsn(self, lsn);
    }
}

impl Deref for PageMut<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: we hold the frame's latch exclusively and a pin.
        unsafe { self.part.arena.bytes(self.frame) }
    }
}

impl DerefMut for PageMut<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.modified = true;
        // SAFETY: we hold the frame's latch exclusively and a pin; &mut self prevents aliasing.
        unsafe { self.part.arena.bytes_mut(self.frame) }
    }
}

impl Drop for PageMut<'_> {
    fn drop(&mut self) {
        if self.modified && self.pool.logger.get().is_some() {
            let latch = self.latch.take().expect("latch held until drop");
            // SAFETY (lifetime erasure): the guard borrows a latch inside `self.pool`. It is
            // stored in this thread's open mini-transaction for that pool, which borrows the
            // pool too and releases every stored guard when it ends, so the latch outlives it.
            let latch: RwLockWriteGuard<'static, ()> = unsafe { std::mem::transmute(latch) };
            let d = Deferred {
                part: self.part as *const Partition,
                frame: self.frame,
                pid: self.pid,
                before: self.before.take(),
                latch,
            };
            self.pool.defer_change(d);
            return;
        }
        if self.modified {
            // Set before the pin is released so an evictor that sees pins == 0 sees dirty too.
            self.part.arena.frames[self.frame].dirty.store(true, Release);
        }
        self.latch.take();
        self.part.unpin(self.frame);
    }
}

pub(super) enum FixMode {
    Shared,
    Exclusive,
}

pub(super) enum Fixed<'a> {
    Shared(PageRef<'a>),
    Exclusive(PageMut<'a>),
}
