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
//! - a change outside any scope is logged on its own; if that fails, `log_failure` says why;
//! - a page is logged by its operations only when it has a before-image and was changed only
//!   through `PageMut::change_logged`; debug builds replay the operations on the before-image
//!   at every commit and panic unless they give the page byte for byte;
//! - before-images and operation buffers are reused by the thread (no allocation per page
//!   change once warm).

use super::{BufferPool, Partition};
use crate::buffer::mtr::{self, change_for, PageLogger};
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
    pub(super) ops: Vec<u8>,
    pub(super) raw: bool,
    pub(super) latch: RwLockWriteGuard<'static, ()>,
}

impl Deferred {
    /// The operations that log this page's change, if they alone may.
    fn loggable_ops(&self) -> Option<&[u8]> {
        (!self.raw && !self.ops.is_empty() && self.before.is_some()).then_some(&self.ops[..])
    }
}

/// Before-images and operation buffers a thread keeps for reuse.
const SPARE_COPIES: usize = 32;

/// A thread's spare before-image buffers and operation buffers.
type Spares = (Vec<Box<[u8]>>, Vec<Vec<u8>>);

thread_local! {
    static SPARES: RefCell<Spares> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// A copy of `page`, in a buffer this thread used before when it has one of the size.
pub(super) fn page_copy(page: &[u8]) -> Box<[u8]> {
    let spare = SPARES.with(|s| {
        let copies = &mut s.borrow_mut().0;
        copies.iter().rposition(|b| b.len() == page.len()).map(|i| copies.swap_remove(i))
    });
    match spare {
        Some(mut b) => {
            b.copy_from_slice(page);
            b
        }
        None => Box::from(page),
    }
}

/// Keeps a before-image's buffer and an operation buffer for this thread's next changes.
fn give_back(before: Option<Box<[u8]>>, mut ops: Vec<u8>) {
    SPARES.with(|s| {
        let mut s = s.borrow_mut();
        if let Some(b) = before {
            if s.0.len() < SPARE_COPIES {
                s.0.push(b);
            }
        }
        if ops.capacity() > 0 && s.1.len() < SPARE_COPIES {
            ops.clear();
            s.1.push(ops);
        }
    });
}

/// An empty operation buffer, reused when this thread has one.
pub(super) fn ops_buffer() -> Vec<u8> {
    SPARES.with(|s| s.borrow_mut().1.pop()).unwrap_or_default()
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
            give_back(d.before, d.ops);
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
        #[cfg(debug_assertions)]
        for d in pages {
            if let (Some(ops), Some(before)) = (d.loggable_ops(), &d.before) {
                let mut replay = before.to_vec();
                // SAFETY: `d.part` is alive (see finish_changes); the latch is held.
                let after = unsafe { (*d.part).arena.bytes(d.frame) };
                if let Err(e) = logger.apply_page_ops(&mut replay, ops) {
                    panic!("page operations of {} do not apply to its before-image: {e}", d.pid);
                }
                assert!(
                    mtr::same_but_lsn(&replay, after),
                    "page operations of {} do not redo its change (ops {:?})",
                    d.pid,
                    ops
                );
            }
        }
        let mut build = |horizon: Option<u64>| {
            let mut payload = Vec::with_capacity(64 + pages.len() * 64);
            mtr::encode_compact_start(&mut payload, pages.len());
            for d in pages {
                // SAFETY: `d.part` is alive (see finish_changes); the latch is held.
                let after = unsafe { (*d.part).arena.bytes(d.frame) };
                let change = change_for(d.before.as_deref(), after, d.loggable_ops(), horizon);
                mtr::encode_compact_change(&mut payload, d.pid, change);
            }
            mtr::encode_compact_annotation(&mut payload, annotation.as_deref());
            payload
        };
        logger.log_page_changes(*tag, &mut build)
    }
}
