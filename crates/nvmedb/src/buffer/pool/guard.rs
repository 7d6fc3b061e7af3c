//! Page guards: a shared fix ([`PageRef`]) and an exclusive fix ([`PageMut`]) of a page.
//!
//! Owns: the guards and the fix modes. Invariants:
//! - a guard holds its frame's latch (shared or exclusive) and, except a sticky index page
//!   fixed through the fast path, a pin, until it drops: the page stays in its frame;
//! - a modified page is marked dirty before its pin is released, so an evictor that sees no
//!   pin sees the dirty flag; while the pool logs, the change is handed, still latched and
//!   pinned, to the thread's open mini-transaction (`logging.rs`) instead;
//! - while the pool logs, the page as it was before its first change is copied once (its
//!   before-image, for a rollback and for the diff), and a page changed other than through
//!   [`PageMut::change_logged`] is marked raw, so its operations are never logged alone.

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
    /// Copy of the page before its first change (only while the pool logs changes; never for
    /// a new page).
    pub(super) before: Option<Box<[u8]>>,
    /// A page allocated by this fix: it has no before-image.
    pub(super) fresh: bool,
    /// The page operations of the changes made through [`PageMut::change_logged`].
    pub(super) ops: Vec<u8>,
    /// Changed through `DerefMut`: its bytes, not its operations, must be logged.
    pub(super) raw: bool,
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

    /// Notes that the page is about to change: the first time, while the pool logs, its
    /// before-image is taken.
    fn about_to_change(&mut self) {
        if self.modified {
            return;
        }
        self.modified = true;
        if !self.fresh && self.before.is_none() && self.pool.logger.get().is_some() {
            // SAFETY: we hold the frame's latch exclusively and a pin.
            let now = unsafe { self.part.arena.bytes(self.frame) };
            self.before = Some(super::logging::page_copy(now));
        }
    }

    /// Changes the page by `change` and logs the change as the page operation(s) `op` appends
    /// (given `change`'s result) instead of the bytes it moved. The operations must redo
    /// exactly what `change` did on the page as it was (debug builds check every commit), and
    /// `op` must append nothing only when `change` left the page as it was. Without a logger
    /// `op` is not called.
    pub fn change_logged<R>(
        &mut self,
        change: impl FnOnce(&mut [u8]) -> R,
        op: impl FnOnce(&R, &mut Vec<u8>),
    ) -> R {
        self.about_to_change();
        // SAFETY: we hold the frame's latch exclusively and a pin; &mut self prevents aliasing.
        let r = change(unsafe { self.part.arena.bytes_mut(self.frame) });
        if self.pool.logger.get().is_some() {
            if self.ops.capacity() == 0 {
                self.ops = super::logging::ops_buffer();
            }
            op(&r, &mut self.ops);
        }
        r
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
        self.about_to_change();
        self.raw = true;
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
                ops: std::mem::take(&mut self.ops),
                raw: self.raw,
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
