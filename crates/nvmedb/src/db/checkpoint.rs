//! Fuzzy checkpoints: taken at open, at close, on demand, and when the log asks for one at a
//! transaction start.
//!
//! Owns: [`Database::checkpoint`], the hook transaction starts call, and the checkpoints'
//! durations ([`Database::checkpoint_stats`]). Invariants: one
//! checkpoint at a time; the catalog names a redo/undo start only once every commit appended
//! before it is durable and every page dirtied before it is written; log segments are released
//! only below the undo start.

use super::Database;
use crate::error::Result;
use crate::util::sync::MutexExt;
use crate::wal::engine::{EngineRecord, KIND_CHECKPOINT};
use std::sync::Arc;

impl Database {
    /// With a log: installs the hook through which transaction starts take the checkpoints the
    /// log asks for, and takes the first checkpoint (the recovered state becomes the redo start).
    pub(super) fn start_checkpointing(&self) -> Result<()> {
        if self.inner.txn.log.is_none() {
            return Ok(());
        }
        let weak = Arc::downgrade(&self.inner);
        let hook = move || {
            if let Some(inner) = weak.upgrade() {
                // A failure here shows again where it matters (the next commit or
                // checkpoint); the caller is starting a transaction, not checkpointing.
                let _ = Database { inner }.checkpoint_if_wanted();
            }
        };
        let _ = self.inner.txn.checkpointer.set(Box::new(hook));
        self.checkpoint()
    }

    /// A fuzzy checkpoint: raises the full-image horizon (used only by the full-page-image
    /// protection), writes every dirty page (through the double-write area; while other
    /// threads keep working), records the new redo start in the catalog, and releases log
    /// segments no longer needed. Without a log it is [`Database::flush`].
    pub fn checkpoint(&self) -> Result<()> {
        if self.inner.txn.log.is_none() {
            return self.flush();
        }
        let _one = self.inner.checkpoint_lock.locked();
        self.checkpoint_locked()
    }

    /// Checkpoints when the log asks for it ([`RecordLog::wants_checkpoint`](crate::wal::RecordLog::wants_checkpoint))
    /// and no checkpoint is running; called at transaction start (explicit or auto-commit).
    pub(crate) fn checkpoint_if_wanted(&self) -> Result<()> {
        let Some(t) = &self.inner.txn.log else { return Ok(()) };
        if !t.log().record_log().wants_checkpoint() {
            return Ok(());
        }
        match self.inner.checkpoint_lock.try_lock() {
            Ok(_one) => self.checkpoint_locked(),
            Err(_) => Ok(()),
        }
    }

    /// How long the checkpoints since open took (nanoseconds; the operational metrics).
    pub fn checkpoint_stats(&self) -> crate::util::hist::HistogramSnapshot {
        self.inner.checkpoint_ns.snapshot()
    }

    fn checkpoint_locked(&self) -> Result<()> {
        let started = std::time::Instant::now();
        let r = self.checkpoint_steps();
        if r.is_ok() {
            self.inner.checkpoint_ns.record(started.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64);
        }
        r
    }

    fn checkpoint_steps(&self) -> Result<()> {
        let Some(t) = &self.inner.txn.log else { return self.flush() };
        let redo = t.log().begin_checkpoint();
        let undo = t.oldest_active_lsn().map_or(redo, |a| a.min(redo));
        // A transaction leaves the active set when its commit record is appended; with early
        // lock release (or between the append and the flush in any case) that record may not
        // be durable yet. The undo start may skip such a transaction's operations, so every
        // commit appended so far must be durable before the catalog names that start.
        t.log().wait_durable(t.log().record_log().end_lsn())?;
        self.flush()?;
        {
            let mut cat = self.inner.catalog.locked();
            let mut next = cat.1.clone();
            next.checkpoint_redo_lsn = redo;
            next.checkpoint_undo_lsn = undo;
            cat.0.store(&next)?;
            cat.1 = next;
        }
        let end = t.log().append(KIND_CHECKPOINT, &EngineRecord::Checkpoint { redo, undo }.encode())?;
        t.log().wait_durable(end)?;
        t.log().record_log().truncate_before(undo)?;
        Ok(())
    }
}
