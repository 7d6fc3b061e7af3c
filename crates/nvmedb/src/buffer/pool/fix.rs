//! Fixing pages: [`BufferPool::fix`], [`BufferPool::fix_mut`] and the page-table lookup
//! behind them (lock-free hint first, then the striped page table, else a load).
//!
//! Owns: the hit path, GCLOCK usage on hits, prefetching of a resident page's lines.
//!
//! Invariants:
//! - a frame found through the lock-free hint is used only if, after pinning it, its pin
//!   word has no `EVICTING` bit and it still holds the page; a sticky frame fixed without a
//!   pin is checked under its shared latch, which an evictor must take exclusively;
//! - a guard is returned only for a frame that is valid and holds the page asked for (a
//!   failed load leaves the frame invalid and the fix retries).

use super::guard::{FixMode, Fixed, PageMut, PageRef};
use super::{BufferPool, Partition};
use crate::buffer::frames::{Frame, EVICTING};
use crate::buffer::{PageClass, PageId};
use crate::error::Result;
use crate::util::sync::RwLockExt;
use std::sync::atomic::Ordering::*;

/// Prefetches the cache line holding `p` into all cache levels (a no-op off x86-64).
#[inline(always)]
fn prefetch_line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetch is a hint; it never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch(p.cast::<i8>(), std::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

impl BufferPool {
    /// Counts a hit on frame `f` and raises its GCLOCK usage to the class weight.
    pub(super) fn record_hit(&self, part: &Partition, f: &Frame, class: PageClass, file: u32) {
        let w = self.weight(class);
        if f.usage.load(Relaxed) < w {
            f.usage.store(w, Relaxed);
        }
        part.count_hit(&self.file_hits, file);
    }

    /// A hint that the caller is about to fix `pid` and read the bytes at `offsets` of it: if
    /// the page is resident, its frame metadata and those cache lines are prefetched, so their
    /// memory latencies overlap instead of adding up. Never blocks, never fails. Returns whether
    /// the page looked resident (a hint, as the page may come or go at any moment: `false` tells
    /// a caller that a fix would probably miss, so it may read the page ahead with others,
    /// [`BufferPool::prefetch_pages`]).
    #[inline]
    pub fn prefetch_lines(&self, pid: PageId, offsets: &[usize]) -> bool {
        let part = self.partition();
        if !self.config.lock_free_hits {
            // No lock-free table to look in (nor to prefetch through): the page table says.
            return part.lock_stripe(pid.key()).contains_key(&pid.key());
        }
        match part.xlate.get(pid.key()) {
            Some(i) => {
                self.prefetch_frame(part, i, offsets);
                true
            }
            None => false,
        }
    }

    /// Prefetches frame `i`'s metadata and the lines at `offsets` of its bytes.
    #[inline]
    pub(super) fn prefetch_frame(&self, part: &Partition, i: usize, offsets: &[usize]) {
        prefetch_line((&part.arena.frames[i] as *const Frame).cast());
        let page = self.config.page_size;
        // SAFETY: only an address is computed (in range: i < frames, offset < page size);
        // a prefetch never faults and reads nothing the program observes.
        let base = unsafe { part.arena.frame_ptr(i) };
        for &o in offsets {
            if o < page {
                prefetch_line(base.wrapping_add(o));
            }
        }
    }

    /// Fixes a page for reading.
    pub fn fix(&self, pid: PageId, class: PageClass) -> Result<PageRef<'_>> {
        self.fix_prefetching(pid, class, &[])
    }

    /// [`BufferPool::fix`] for a caller that reads the bytes at `offsets` of the page next: if
    /// the page is resident, those cache lines are prefetched together with the frame's
    /// metadata (see [`BufferPool::prefetch_lines`]), with one translation for both.
    pub fn fix_prefetching(&self, pid: PageId, class: PageClass, offsets: &[usize]) -> Result<PageRef<'_>> {
        match self.fix_mode(pid, class, FixMode::Shared, offsets)? {
            Fixed::Shared(g) => Ok(g),
            Fixed::Exclusive(_) => unreachable!("shared fix returned an exclusive guard"),
        }
    }

    /// Fixes a page for writing.
    pub fn fix_mut(&self, pid: PageId, class: PageClass) -> Result<PageMut<'_>> {
        self.check_writable()?;
        match self.fix_mode(pid, class, FixMode::Exclusive, &[])? {
            Fixed::Exclusive(g) => Ok(g),
            Fixed::Shared(_) => unreachable!("exclusive fix returned a shared guard"),
        }
    }

    pub(super) fn fix_mode(
        &self,
        pid: PageId,
        class: PageClass,
        mode: FixMode,
        prefetch: &[usize],
    ) -> Result<Fixed<'_>> {
        let part = self.partition();
        let key = pid.key();
        // Where the page probably is: a hint the paths below check after pinning or latching.
        let hint = if self.config.lock_free_hits { part.xlate.get(key) } else { None };
        if let Some(i) = hint.filter(|_| !prefetch.is_empty()) {
            self.prefetch_frame(part, i, prefetch);
        }
        if matches!(mode, FixMode::Shared) && class == PageClass::Index {
            // Fast path for index pages kept resident: no page-table lock, no pin. A sticky
            // frame changes page only under its write latch (see `claim_frame_once`), which
            // the shared latch taken here excludes: the page key checked under it stays.
            if let Some(i) = hint {
                let f = &part.arena.frames[i];
                if f.sticky.load(Acquire) && f.page_key.load(Acquire) == key {
                    let g = f.latch.read_locked();
                    if f.valid.load(Acquire) && f.page_key.load(Acquire) == key {
                        // Raises the GCLOCK usage like any hit (a load, and a store only once
                        // the hand aged it): an index larger than its buffer keeps its hot
                        // upper levels resident.
                        self.record_hit(part, f, class, pid.file);
                        return Ok(Fixed::Shared(PageRef {
                            part,
                            frame: i,
                            pid,
                            pinned: false,
                            latch: Some(g),
                        }));
                    }
                }
            }
        }
        let mut hint = hint;
        loop {
            let i = self.pin_page(part, pid, class, hint.take())?;
            let f = &part.arena.frames[i];
            let fixed = match mode {
                FixMode::Shared => {
                    let g = part.read_latch(i);
                    Fixed::Shared(PageRef { part, frame: i, pid, pinned: true, latch: Some(g) })
                }
                FixMode::Exclusive => {
                    let g = f.latch.write_locked();
                    Fixed::Exclusive(PageMut {
                        pool: self,
                        part,
                        frame: i,
                        pid,
                        modified: false,
                        before: None,
                        fresh: false,
                        ops: Vec::new(),
                        raw: false,
                        latch: Some(g),
                    })
                }
            };
            // A failed load leaves the frame invalid; the guard's drop unpins it. Retry.
            if f.valid.load(Acquire) && f.page_key.load(Acquire) == key {
                return Ok(fixed);
            }
        }
    }

    /// Returns a pinned frame holding `pid` (possibly still being loaded by another thread:
    /// latch it and check `valid`).
    /// `hint`: the frame the page→frame table gave for `pid` (`None`: look it up here).
    pub(super) fn pin_page(
        &self,
        part: &Partition,
        pid: PageId,
        class: PageClass,
        hint: Option<usize>,
    ) -> Result<usize> {
        let key = pid.key();
        if self.config.lock_free_hits {
            if let Some(i) = hint.or_else(|| part.xlate.get(key)) {
                // Pin first, then check the frame still holds the page: an evictor claims a
                // frame only by moving its pins from 0 to EVICTING, so a pin taken without it
                // keeps the frame's page until unpinned.
                let f = &part.arena.frames[i];
                let prev = f.pins.fetch_add(1, AcqRel);
                if prev & EVICTING == 0 && f.page_key.load(Acquire) == key {
                    self.record_hit(part, f, class, pid.file);
                    return Ok(i);
                }
                part.unpin(i);
            }
        }
        loop {
            {
                let map = part.lock_stripe(key);
                if let Some(&i) = map.get(&key) {
                    let f = &part.arena.frames[i as usize];
                    f.pins.fetch_add(1, AcqRel);
                    drop(map);
                    self.record_hit(part, f, class, pid.file);
                    return Ok(i as usize);
                }
            }
            if let Some(i) = self.load_page(part, pid, class)? {
                return Ok(i);
            }
        }
    }
}
