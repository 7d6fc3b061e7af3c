//! Keeping the file log's current segment (and the standby's replica log) backed by storage
//! ahead of its writes.
//!
//! Owns: [`Preparer`]. A log write into a hole of its segment file makes that flush's sync also
//! write the file's allocation metadata: a second synchronous device write on every commit (on
//! this project's VM, 130 µs commits instead of 80 µs). So the segment is filled with zeroes
//! ([`Device::preallocate`]) ahead of the flushes: a background thread prepares the next
//! [`PREPARE_AHEAD_BYTES`] while the flushes write below what is prepared, and a flush that
//! reaches unprepared bytes prepares them itself first. A segment that is already allocated (a
//! recycled slot) costs an `lseek` per window.
//!
//! The same thread also deletes the segment files a truncation gives up (a deletion of a large
//! file takes tens of milliseconds, and the checkpoint that truncates need not wait for it):
//! [`Preparer::remove_later`]; the files left when the log closes are deleted then. A deletion
//! lost to a crash leaves a file without a live header, which the next open finds as a free slot.
//!
//! Invariants: only holes are filled, and no range is filled while a flush may write it: the
//! flushing thread writes only below `prepared_to`, the background thread fills only from
//! `prepared_to` up, and a flush that must pass `prepared_to` waits for the background job in
//! progress first. A change of segment waits for any job in progress, so a job never fills a
//! file that a later segment reuses. A background failure is dropped: the flush that needs
//! the range prepares it itself and reports the error.

use crate::error::Result;
use crate::io::{Device, Storage};
use crate::util::sync::{CondvarExt, MutexExt};
use std::sync::{Arc, Condvar, Mutex};

/// Bytes of the current segment kept prepared ahead of the log's writes.
pub const PREPARE_AHEAD_BYTES: u64 = 8 << 20;

/// Work for the background thread: fill `[from, to)` of segment `seq` on `devs`.
struct Job {
    seq: u64,
    devs: Vec<Arc<dyn Device>>,
    from: u64,
    to: u64,
}

struct State {
    /// The segment the flushes write.
    seq: u64,
    /// Bytes of it that are backed by storage, from its start.
    prepared_to: u64,
    /// A fill in progress (background or a flush's), of this segment.
    busy: Option<u64>,
    job: Option<Job>,
    /// Files to delete: (storage, name).
    removals: Vec<(Arc<dyn Storage>, String)>,
    /// Files asked for and not yet deleted (those in `removals` and those being deleted).
    unremoved: usize,
    stop: bool,
}

/// Prepares the file log's current segment ahead of its flushes (see the module comment).
pub struct Preparer {
    state: Mutex<State>,
    cv: Condvar,
}

impl Default for Preparer {
    fn default() -> Self {
        Self::new()
    }
}

impl Preparer {
    /// A preparer with no segment yet; [`Preparer::run`] is its background thread.
    pub fn new() -> Self {
        Self {
            state: Mutex::new(State {
                seq: u64::MAX,
                prepared_to: 0,
                busy: None,
                job: None,
                removals: Vec::new(),
                unremoved: 0,
                stop: false,
            }),
            cv: Condvar::new(),
        }
    }

    /// Called by the flushing thread before it writes segment `seq` (on `devs`, one device per
    /// copy, `segment_bytes` long) up to `write_end`: returns once `[0, write_end)` is backed
    /// by storage, and asks the background thread for the next window when less than half of
    /// one remains.
    pub fn before_write(
        &self,
        seq: u64,
        devs: &[Arc<dyn Device>],
        write_end: u64,
        segment_bytes: u64,
    ) -> Result<()> {
        let mut st = self.state.locked();
        if st.seq != seq {
            while st.busy.is_some() {
                st = self.cv.wait_locked(st);
            }
            st.seq = seq;
            st.prepared_to = 0;
            st.job = None;
        }
        while write_end > st.prepared_to {
            if st.busy.is_some() {
                st = self.cv.wait_locked(st);
                continue;
            }
            let (from, to) =
                (st.prepared_to, (write_end + PREPARE_AHEAD_BYTES).min(segment_bytes).max(write_end));
            st.busy = Some(seq);
            st.job = None;
            drop(st);
            let r = devs.iter().try_for_each(|d| d.preallocate(from, to - from));
            st = self.state.locked();
            st.busy = None;
            self.cv.notify_all();
            r?;
            st.prepared_to = st.prepared_to.max(to);
        }
        if st.busy.is_none()
            && st.job.is_none()
            && st.prepared_to < segment_bytes
            && st.prepared_to - write_end < PREPARE_AHEAD_BYTES / 2
        {
            let from = st.prepared_to;
            st.job = Some(Job {
                seq,
                devs: devs.to_vec(),
                from,
                to: (from + PREPARE_AHEAD_BYTES).min(segment_bytes),
            });
            self.cv.notify_all();
        }
        Ok(())
    }

    /// Makes `seq` the file the flushes write, with `[0, prepared_to)` taken as backed by storage
    /// (a file that is not a fresh segment: the standby's log, which resumes at its end and is
    /// cut back by truncations). Waits for a fill in progress first, so no job fills the old
    /// range after this returns.
    pub fn restart(&self, seq: u64, prepared_to: u64) {
        let mut st = self.state.locked();
        while st.busy.is_some() {
            st = self.cv.wait_locked(st);
        }
        st.seq = seq;
        st.prepared_to = prepared_to;
        st.job = None;
    }

    /// Asks the background thread to delete file `name` of `storage` (a segment slot given up;
    /// nothing reads or writes it any more).
    pub fn remove_later(&self, storage: Arc<dyn Storage>, name: String) {
        let mut st = self.state.locked();
        st.removals.push((storage, name));
        st.unremoved += 1;
        self.cv.notify_all();
    }

    /// Files asked for by [`Preparer::remove_later`] that are not deleted yet.
    pub fn unremoved(&self) -> usize {
        self.state.locked().unremoved
    }

    /// Deletes the files asked for. A failure is dropped: the file stays, without a live header,
    /// and the next open of the log finds it as a free slot.
    fn remove(removals: Vec<(Arc<dyn Storage>, String)>) {
        for (storage, name) in removals {
            if storage.exists(&name) {
                let _ = storage.remove(&name);
            }
        }
    }

    /// The background thread: runs jobs and deletions until [`Preparer::stop`], then deletes
    /// what is left to delete.
    pub fn run(&self) {
        let mut st = self.state.locked();
        loop {
            if !st.removals.is_empty() {
                let removals = std::mem::take(&mut st.removals);
                let n = removals.len();
                drop(st);
                Self::remove(removals);
                st = self.state.locked();
                st.unremoved -= n;
                continue;
            }
            if st.stop {
                return;
            }
            let Some(job) = st.job.take() else {
                st = self.cv.wait_locked(st);
                continue;
            };
            if job.seq != st.seq || st.busy.is_some() || job.from != st.prepared_to {
                continue; // stale: the flushes moved on
            }
            st.busy = Some(job.seq);
            drop(st);
            let r = job.devs.iter().try_for_each(|d| d.preallocate(job.from, job.to - job.from));
            st = self.state.locked();
            st.busy = None;
            if r.is_ok() && st.seq == job.seq {
                st.prepared_to = st.prepared_to.max(job.to);
            }
            self.cv.notify_all();
        }
    }

    /// Ends [`Preparer::run`] (after the job in progress).
    pub fn stop(&self) {
        self.state.locked().stop = true;
        self.cv.notify_all();
    }
}
