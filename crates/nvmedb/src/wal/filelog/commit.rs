//! Appending and committing: records go into the open batch at the next LSN, batches are
//! sealed (not padded: the next batch continues in the same block) and queued, and committers wait in
//! `wait_durable` until a flush covers them, one of them leading each flush (group commit).
//!
//! Owns: `Inner::append`, `Inner::wait_durable`, sealing and the bounded queue of sealed
//! batches. Invariants: record `n + 1` starts where record `n` ends; at most
//! `max_queued_batches` sealed batches wait (appenders block); a committer returns only once
//! `durable >= lsn`, or with the error that poisoned the log; a waiter is counted in `waiters`
//! exactly while it waits.

use super::{Batch, Inner, Layout, Sleeper, State, BATCH, FLUSHED, SPACE};
use crate::error::{Error, Result};
use crate::util::sync::{CondvarExt, MutexExt};
use crate::wal::format::{
    encode_record, RecordHeader, SegmentHeader, RECORD_HEADER_BYTES, SEGMENT_HEADER_BLOCK_BYTES,
};
use crate::wal::Lsn;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, MutexGuard};
use std::time::Duration;

impl Inner {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.st.locked()
    }

    fn cv(&self, which: usize) -> &Condvar {
        match which {
            FLUSHED => &self.flushed_cv,
            SPACE => &self.space_cv,
            _ => &self.batch_cv,
        }
    }

    /// Wakes the threads waiting on condition `which` ([`FLUSHED`], [`SPACE`] or [`BATCH`]),
    /// if any: a signal costs a system call even when nobody waits. The caller holds the
    /// state lock (`st`), under which waiters count themselves in before they wait.
    pub(super) fn signal(&self, st: &State, which: usize) {
        if st.cv_waiting[which] > 0 {
            self.cv(which).notify_all();
        }
    }

    /// Waits on condition `which`, counted as its waiter meanwhile (see [`Inner::signal`]).
    pub(super) fn wait_on<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        which: usize,
    ) -> MutexGuard<'a, State> {
        st.cv_waiting[which] += 1;
        let mut st = self.cv(which).wait_locked(st);
        st.cv_waiting[which] -= 1;
        st
    }

    /// [`Inner::wait_on`] for at most `timeout`.
    pub(super) fn wait_on_for<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        which: usize,
        timeout: Duration,
    ) -> MutexGuard<'a, State> {
        st.cv_waiting[which] += 1;
        let mut st = self.cv(which).wait_timeout_locked(st, timeout).0;
        st.cv_waiting[which] -= 1;
        st
    }

    /// Seals the open batch into the queue. The batch is not padded: the next one starts right
    /// after its last record, in the same block, and its flush re-writes that block's first part
    /// (the bytes already durable, unchanged). Returns false when the queue is full.
    pub(super) fn seal_open(&self, st: &mut State) -> bool {
        if st.open.buf.is_empty() {
            return true;
        }
        if st.sealed.len() >= self.opts.max_queued_batches {
            return false;
        }
        let next_off = st.open.file_off + st.open.buf.len() as u64;
        assert!(next_off <= st.layout.segment_bytes, "sealed batch overruns its segment");
        assert_eq!(st.open.end_lsn(), st.next_lsn, "batch and stream disagree on the end LSN");
        let next = Batch {
            seq: st.layout.seq,
            new_segment: None,
            file_off: next_off,
            start_lsn: st.next_lsn,
            buf: Vec::new(),
            records: 0,
        };
        let sealed = std::mem::replace(&mut st.open, next);
        // The next batch fills the buffer the last flush emptied (no reallocation as it grows).
        st.open.buf = std::mem::take(&mut st.spare_buf);
        st.sealed.push_back(sealed);
        self.signal(st, BATCH);
        true
    }

    /// Waits for queue space: leads a flush when none runs, else waits for the running one.
    fn make_space<'a>(&'a self, st: MutexGuard<'a, State>) -> Result<MutexGuard<'a, State>> {
        if st.flushing {
            return Ok(self.wait_on(st, SPACE));
        }
        let (st, r) = self.flush_one(st, false);
        r.map(|()| st)
    }

    pub(super) fn append(&self, kind: u8, payload: &[u8]) -> Result<(Lsn, Lsn)> {
        let rec = (RECORD_HEADER_BYTES + payload.len()) as u64;
        let mut st = self.lock();
        loop {
            if let Some(p) = &st.poisoned {
                return Err(Error::Poisoned(p.clone()));
            }
            let open_len = st.open.buf.len() as u64;
            if open_len > 0 && open_len + rec > self.opts.max_batch_bytes as u64 && !self.seal_open(&mut st) {
                st = self.make_space(st)?;
                continue;
            }
            let end_off = st.open.file_off + st.open.buf.len() as u64 + rec;
            if end_off > st.layout.segment_bytes {
                if !self.seal_open(&mut st) {
                    st = self.make_space(st)?;
                    continue;
                }
                // Switch to a new segment starting exactly where the stream is.
                let seq = st.layout.seq + 1;
                let segment_bytes = self.opts.segment_bytes;
                st.layout = Layout { seq, segment_bytes };
                let base_lsn = st.next_lsn;
                st.open = Batch {
                    seq,
                    new_segment: Some(SegmentHeader { log_id: self.log_id, seq, base_lsn, segment_bytes }),
                    file_off: SEGMENT_HEADER_BLOCK_BYTES,
                    start_lsn: base_lsn,
                    buf: std::mem::take(&mut st.open.buf),
                    records: 0,
                };
                continue;
            }
            break;
        }
        let lsn = st.next_lsn;
        let h = RecordHeader {
            payload_len: payload.len() as u32,
            lsn,
            flush_lsn: st.open.start_lsn,
            kind,
            log_tag: self.tag,
        };
        encode_record(&mut st.open.buf, &h, payload);
        st.open.records += 1;
        st.next_lsn += rec;
        st.stats.records_appended += 1;
        assert_eq!(st.open.end_lsn(), st.next_lsn, "batch and stream disagree on the end LSN");
        if st.open.buf.len() >= self.opts.max_batch_bytes {
            self.signal(&st, BATCH);
        }
        Ok((lsn, lsn + rec))
    }

    pub(super) fn wait_durable(&self, lsn: Lsn) -> Result<Lsn> {
        let mut st = self.lock();
        let mut registered = false;
        let r = loop {
            if let Some(p) = &st.poisoned {
                break Err(Error::Poisoned(p.clone()));
            }
            let d = self.durable.load(Ordering::Acquire);
            if d >= lsn {
                st.stats.commits += 1;
                break Ok(d);
            }
            if lsn > st.next_lsn {
                break Err(Error::InvalidArgument(format!(
                    "wait_durable({lsn}) beyond the end of the log {}",
                    st.next_lsn
                )));
            }
            if !registered {
                registered = true;
                *st.waiters.entry(lsn).or_insert(0) += 1;
                st.waiter_count += 1;
                self.signal(&st, BATCH);
            }
            if st.flushing {
                if self.opts.targeted_wakeups {
                    // Park until the flush that covers us acknowledges us, or we are chosen to
                    // lead the next one (see `wake_after_flush`). Spurious wake-ups loop.
                    let acked = Arc::new(AtomicU64::new(0));
                    st.sleepers.push(Sleeper { lsn, thread: std::thread::current(), acked: acked.clone() });
                    drop(st);
                    loop {
                        std::thread::park();
                        let d = acked.load(Ordering::Acquire);
                        if d != 0 {
                            // Acknowledged (and counted, and unregistered) by the flusher.
                            return Ok(d);
                        }
                        st = self.lock();
                        // Acknowledged between the load and the lock?
                        let d = acked.load(Ordering::Acquire);
                        if d != 0 {
                            return Ok(d);
                        }
                        let me = std::thread::current().id();
                        let still_parked = st.sleepers.iter().any(|s| s.thread.id() == me);
                        if !still_parked
                            || !st.flushing
                            || self.durable.load(Ordering::Acquire) >= lsn
                            || st.poisoned.is_some()
                        {
                            // Chosen to lead, no flush runs, or woken after an error: back to
                            // the loop (which leads a flush when none runs).
                            st.sleepers.retain(|s| s.thread.id() != me);
                            break;
                        }
                        // A spurious wake-up: park again.
                        drop(st);
                    }
                } else {
                    st = self.wait_on(st, FLUSHED);
                }
                continue;
            }
            let (g, r) = self.flush_one(st, true);
            st = g;
            if let Err(e) = r {
                break Err(e);
            }
        };
        // A flush that made `lsn` durable already removed this waiter; otherwise remove it now.
        if registered && lsn > self.durable.load(Ordering::Acquire) {
            let st = &mut *st;
            if let Some(c) = st.waiters.get_mut(&lsn) {
                *c -= 1;
                st.waiter_count -= 1;
                if *c == 0 {
                    st.waiters.remove(&lsn);
                }
            }
        }
        r
    }
}
