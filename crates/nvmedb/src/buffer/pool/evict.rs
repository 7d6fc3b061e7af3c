//! GCLOCK victim selection: finding a frame to reuse.
//!
//! Owns: the clock sweep, the eviction of a victim (write-back first if dirty), and the
//! pool-exhausted error.
//!
//! Invariants:
//! - a frame is unmapped only while the evicting thread holds its pin word at `EVICTING`,
//!   the page-table stripe of its page and its write latch (never waited for), and only if
//!   it is clean;
//! - sticky frames are passed over while they leave an eighth of the partition to the
//!   others, or until a sweep found no other victim;
//! - a claimed frame is returned pinned once and mapped to no page.

use super::{BufferPool, Partition};
use crate::buffer::frames::{EVICTING, NO_PAGE};
use crate::buffer::BufferPolicy;
use crate::error::{Error, Result};
use std::sync::atomic::Ordering::*;

impl BufferPool {
    /// Finds a frame to reuse (GCLOCK) and returns it pinned once, mapped to no page. Pins are
    /// short-lived (a fix, or a write-back in flight, which on a slow or loaded device can take
    /// many milliseconds), so when every frame is pinned it yields and sweeps again for up to
    /// [`Self::CLAIM_PATIENCE`] before reporting the pool exhausted. Sticky frames are passed
    /// over while they leave the partition room ([`Partition::sticky_evictable`]); a sweep that
    /// found no other victim is followed by sweeps that take them too.
    pub(super) fn claim_frame(&self, part: &Partition) -> Result<usize> {
        let mut started = None;
        for attempt in 0u32.. {
            match self.claim_frame_once_with(part, attempt > 0) {
                Err(Error::ResourceExhausted(_)) => {
                    if attempt == 0 {
                        continue; // at once: the next sweep may take sticky frames
                    }
                    let since = *started.get_or_insert_with(std::time::Instant::now);
                    if since.elapsed() >= Self::CLAIM_PATIENCE {
                        return Err(self.exhausted(part));
                    }
                    if attempt < 10 {
                        std::thread::yield_now();
                    } else {
                        std::thread::sleep(std::time::Duration::from_micros(100));
                    }
                }
                other => return other,
            }
        }
        unreachable!("the claim loop returns")
    }

    /// How long [`Self::claim_frame`] keeps sweeping a partition whose frames are all pinned.
    const CLAIM_PATIENCE: std::time::Duration = std::time::Duration::from_secs(1);

    /// The error of a partition in which no frame can be evicted: names the pool, its size and
    /// what holds its frames.
    fn exhausted(&self, part: &Partition) -> Error {
        let n = part.arena.len();
        let (mut pinned, mut writing, mut latched, mut sticky) = (0, 0, 0, 0);
        for (i, f) in part.arena.frames.iter().enumerate() {
            if part.writing[i].load(Relaxed) {
                writing += 1;
            } else if f.pins.load(Relaxed) != 0 {
                pinned += 1;
            } else if f.latch.try_write().is_err() {
                latched += 1;
            } else if f.sticky.load(Relaxed) {
                sticky += 1;
            }
        }
        let page_size = self.config.page_size;
        let whole = match self.config.policy {
            BufferPolicy::Separated { partitions } if partitions > 1 => {
                format!(" (one of {partitions} SEP partitions, {} frames in all)", self.config.frames)
            }
            _ => String::new(),
        };
        Error::ResourceExhausted(format!(
            "{}: no frame can be evicted among its {n} frames of {page_size} B ({} KiB){whole}: \
             {pinned} pinned by page fixes in progress (page guards held by scans, lookups, open \
             mini-transactions or loads), {writing} being written back, {latched} latched by \
             readers, {sticky} kept resident; the working set of the threads running now does \
             not fit: give the {} more memory or run fewer threads at once",
            self.config.name,
            n * page_size / 1024,
            self.config.name,
        ))
    }

    /// One GCLOCK sweep of [`BufferPool::claim_frame`] (read-ahead takes no more: it is advice).
    pub(super) fn claim_frame_once(&self, part: &Partition) -> Result<usize> {
        self.claim_frame_once_with(part, false)
    }

    /// One sweep; `take_sticky`: sticky frames are victims too, whatever their number.
    ///
    /// A frame is unmapped only while the evicting thread holds its pin word at `EVICTING`, the
    /// page-table stripe of its page and its write latch (taken with `try_write`, never waited
    /// for): a reader holding the latch without a pin (the sticky fast path of `fix_mode`)
    /// keeps its frame, and one that latches it afterwards finds the page key changed.
    fn claim_frame_once_with(&self, part: &Partition, take_sticky: bool) -> Result<usize> {
        let n = part.arena.len();
        let max_weight = self.config.data_weight.max(self.config.index_weight) as usize;
        let limit = n * (max_weight + 2) * 2 + 64;
        let take_sticky = take_sticky || part.sticky_evictable();
        // With a background writer, pass over a few dirty victims (waking it) before writing
        // one on this thread: a clean frame is usually a little further on.
        let writer = self.config.background_writer;
        let mut dirty_skips = writer.map_or(0, |bw| bw.eviction_dirty_skips.min(n));
        for _ in 0..limit {
            let i = part.hand.fetch_add(1, Relaxed) % n;
            let f = &part.arena.frames[i];
            if f.pins.load(Acquire) != 0 {
                continue;
            }
            let key = f.page_key.load(Acquire);
            if key == NO_PAGE {
                if f.pins.compare_exchange(0, 1, AcqRel, Acquire).is_ok() {
                    if f.page_key.load(Acquire) == NO_PAGE {
                        part.set_sticky(i, false);
                        return Ok(i);
                    }
                    part.unpin(i);
                }
                continue;
            }
            if !take_sticky && f.sticky.load(Relaxed) {
                continue;
            }
            let u = f.usage.load(Relaxed);
            if u > 0 {
                f.usage.store(u - 1, Relaxed);
                continue;
            }
            if f.dirty.load(Acquire) {
                if dirty_skips > 0 {
                    dirty_skips -= 1;
                    if let Some(signal) = &self.writer_signal {
                        signal.request();
                    }
                    continue;
                }
                if let Some(bw) = writer {
                    // The writer is behind: help it with one batch ahead of the hand (one log
                    // wait and one mirrored round trip for up to `batch_pages` pages), then
                    // look on for a clean victim. A failed batch leaves its pages dirty and is
                    // not this eviction's error: it then writes this victim alone, as without
                    // a writer, and reports that write's outcome.
                    // The batch takes at most a quarter of the partition, as the writer's
                    // rounds do: its frames stay pinned while they are written, and other
                    // evictions must still find frames to claim meanwhile.
                    dirty_skips = bw.eviction_dirty_skips.min(n);
                    let help = bw.batch_pages.min(n / 4).max(1);
                    if let Ok(written) = self.clean_part(part, help, help, false) {
                        if written > 0 {
                            part.eviction_writes.fetch_add(1, Relaxed);
                            continue;
                        }
                    }
                }
                // Write it here, then take it if it is still clean and unpinned.
                if !self.write_back(part, i, key, false)? {
                    continue;
                }
                part.eviction_writes.fetch_add(1, Relaxed);
            }
            let mut map = part.lock_stripe(key);
            if f.page_key.load(Acquire) == key
                && !f.dirty.load(Acquire)
                && (take_sticky || !f.sticky.load(Relaxed))
                && map.get(&key) == Some(&(i as u32))
                && f.pins.compare_exchange(0, EVICTING | 1, AcqRel, Acquire).is_ok()
            {
                // A writer may have dirtied the page and unpinned it between the check above and
                // the claim; its dirty flag is visible now (set before its unpin). A reader may
                // hold the latch without a pin (sticky fast path): leave the frame to it.
                let latch = match f.latch.try_write() {
                    Ok(g) if !f.dirty.load(Acquire) => g,
                    _ => {
                        f.pins.fetch_sub(EVICTING | 1, AcqRel);
                        continue;
                    }
                };
                map.remove(&key);
                part.xlate.clear(key, i);
                f.page_key.store(NO_PAGE, Release);
                f.valid.store(false, Release);
                part.set_sticky(i, false);
                drop(latch);
                // Keep our pin; lock-free pinners that saw EVICTING have backed off (or will),
                // later ones find the page key changed.
                f.pins.fetch_and(!EVICTING, AcqRel);
                drop(map);
                part.evictions.fetch_add(1, Relaxed);
                return Ok(i);
            }
        }
        Err(Error::ResourceExhausted(format!("{}: no evictable frame in one sweep of {n}", self.config.name)))
    }
}
