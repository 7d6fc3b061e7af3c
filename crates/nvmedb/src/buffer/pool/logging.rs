//! Mini-transaction scopes on a pool: the pages an operation changes stay latched and pinned
//! until its one log record is appended (see `buffer/mtr.rs` for the record).
//!
//! Owns: [`Mtr`], the thread's open scopes (`OPEN_MTRS`), the page logger hook and the
//! logging failure flag.
//!
//! Invariants:
//! - nested scopes on the same pool join the outermost one; the changes are logged once,
//!   when it commits, then stamped with the record's LSN and marked dirty;
//! - a scope that ends without committing restores every changed page from its
//!   before-image (a new page stays, unreferenced);
//! - a change outside any scope is logged on its own; if that fails, `log_failure` says why.

use super::{BufferPool, Partition};
use crate::buffer::mtr::{self, change_for, encode_page_change, PageLogger};
use crate::buffer::PageId;
use crate::error::{Error, Result};
use crate::page::PageHeader;
use crate::util::sync::MutexExt;
use std::cell::RefCell;
use std::sync::atomic::Ordering::*;
use std::sync::{Arc, RwLockWriteGuard};

/// A page changed inside a mini-transaction, still latched and pinned.
pub(super) struct Deferred {
    pub(super) part: *const Partition,
    pub(super) frame: usize,
    pub(super) pid: PageId,
    pub(super) before: Option<Box<[u8]>>,
    pub(super) latch: RwLockWriteGuard<'static, ()>,
}

struct OpenMtr {
    pool: *const BufferPool,
    depth: usize,
    pages: Vec<Deferred>,
}

thread_local! {
    static OPEN_MTRS: RefCell<Vec<OpenMtr>> = const { RefCell::new(Vec::new()) };
}

/// An open mini-transaction on one pool: every page changed while it is open is logged in one
/// record when it commits, and restored if it ends without committing. Nested scopes on the
/// same pool join the outermost one.
#[must_use = "a mini-transaction must be committed, or its changes are rolled back"]
pub struct Mtr<'a> {
    pool: &'a BufferPool,
    done: bool,
}

impl Mtr<'_> {
    /// Logs the changes (when this is the outermost scope) and releases the pages.
    pub fn commit(mut self) -> Result<()> {
        self.done = true;
        self.pool.end_mtr(true)
    }
}

impl Drop for Mtr<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.pool.end_mtr(false);
        }
    }
}

impl BufferPool {
    /// Installs the WAL hook: from now on every page change is logged (see [`Mtr`]). `tag`
    /// names this pool in the log. Can be set once.
    pub fn set_page_logger(&self, logger: Arc<dyn PageLogger>, tag: u8) -> Result<()> {
        self.logger
            .set((logger, tag))
            .map_err(|_| Error::InvalidArgument("the buffer pool already has a page logger".into()))
    }

    /// True when page changes are logged.
    pub fn is_logging(&self) -> bool {
        self.logger.get().is_some()
    }

    /// Opens (or joins) this thread's mini-transaction on this pool. The thread's outermost
    /// mini-transaction (none open on any pool) first passes the logger's space gate
    /// ([`PageLogger::wait_for_space`]): call it before latching the pages it will change.
    pub fn begin_mtr(&self) -> Mtr<'_> {
        let me = self as *const BufferPool;
        if let Some((logger, _)) = self.logger.get() {
            if OPEN_MTRS.with(|m| m.borrow().is_empty()) {
                logger.wait_for_space();
            }
        }
        OPEN_MTRS.with(|m| {
            let mut m = m.borrow_mut();
            match m.iter_mut().find(|o| o.pool == me) {
                Some(o) => o.depth += 1,
                None => m.push(OpenMtr { pool: me, depth: 1, pages: Vec::new() }),
            }
        });
        Mtr { pool: self, done: false }
    }

    /// The failure that poisoned logging outside a mini-transaction, if any.
    pub fn log_failure(&self) -> Option<String> {
        self.log_failure.locked().clone()
    }

    pub(super) fn defer_change(&self, d: Deferred) {
        let me = self as *const BufferPool;
        let orphan = OPEN_MTRS.with(|m| {
            let mut m = m.borrow_mut();
            match m.iter_mut().find(|o| o.pool == me) {
                Some(o) => {
                    o.pages.push(d);
                    None
                }
                None => Some(d),
            }
        });
        if let Some(d) = orphan {
            // A change outside any mini-transaction: log it on its own.
            if let Err(e) = self.finish_changes(vec![d], true) {
                *self.log_failure.locked() = Some(e.to_string());
            }
        }
    }

    fn end_mtr(&self, commit: bool) -> Result<()> {
        let me = self as *const BufferPool;
        let pages = OPEN_MTRS.with(|m| {
            let mut m = m.borrow_mut();
            let idx = m.iter().position(|o| o.pool == me).expect("mini-transaction scope is open");
            m[idx].depth -= 1;
            if m[idx].depth > 0 {
                return None;
            }
            Some(m.remove(idx).pages)
        });
        match pages {
            None if commit => Ok(()),
            None => Err(Error::InvalidArgument("inner mini-transaction scope ended without commit".into())),
            Some(pages) => self.finish_changes(pages, commit),
        }
    }

    /// Logs (or rolls back) deferred changes, then releases their latches and pins.
    fn finish_changes(&self, pages: Vec<Deferred>, commit: bool) -> Result<()> {
        if pages.is_empty() {
            return Ok(());
        }
        let result =
            if commit { self.log_changes(&pages) } else { Err(Error::InvalidArgument("rolled back".into())) };
        for d in pages {
            // SAFETY: `d.part` points into `self.parts`, alive while `self` is.
            let part = unsafe { &*d.part };
            let f = &part.arena.frames[d.frame];
            match (&result, &d.before) {
                (Ok(lsn), _) => {
                    // SAFETY: the deferred guard still holds the frame's write latch.
                    PageHeader::set_lsn(unsafe { part.arena.bytes_mut(d.frame) }, *lsn);
                    f.dirty.store(true, Release);
                }
                (Err(_), Some(before)) => {
                    // SAFETY: as above.
                    unsafe { part.arena.bytes_mut(d.frame) }.copy_from_slice(before);
                }
                // A new page cannot be un-allocated: it stays, unreferenced and unlogged.
                (Err(_), None) => f.dirty.store(true, Release),
            }
            drop(d.latch);
            part.unpin(d.frame);
        }
        match result {
            Ok(_) => Ok(()),
            Err(e) if commit => Err(e),
            Err(_) => Ok(()),
        }
    }

    fn log_changes(&self, pages: &[Deferred]) -> Result<u64> {
        let (logger, tag) = self.logger.get().expect("changes are deferred only while logging");
        let annotation = mtr::take_annotation();
        let mut build = |horizon: u64| {
            let mut payload = Vec::with_capacity(64 + pages.len() * 64);
            payload.extend_from_slice(&(self.config.page_size as u32).to_le_bytes());
            payload.extend_from_slice(&(pages.len() as u32).to_le_bytes());
            for d in pages {
                // SAFETY: `d.part` is alive (see finish_changes); the latch is held.
                let after = unsafe { (*d.part).arena.bytes(d.frame) };
                encode_page_change(&mut payload, d.pid, &change_for(d.before.as_deref(), after, horizon));
            }
            mtr::encode_annotation(&mut payload, annotation.as_deref());
            payload
        };
        logger.log_page_changes(*tag, &mut build)
    }
}
