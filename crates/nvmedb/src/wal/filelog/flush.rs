//! One flush: the leader takes the oldest sealed batch (or seals the open one after waiting
//! for company), writes it to every copy in parallel and syncs them, then acknowledges the
//! committers it covered and hands the lead on.
//!
//! Owns: `Inner::flush_one`, writing a batch (switching to a new segment, whose header is
//! synced before its first records) and releasing a segment's header. Invariants: one flush at
//! a time, started only after the previous one is durable on every copy; `durable` advances
//! only after every copy synced and never goes backwards; a failed write poisons the log.

use super::{Batch, Inner, State, BATCH, FLUSHED, SPACE};
use crate::error::Result;
use crate::io::{AlignedBuf, Device};
use crate::wal::duplex::Job;
use crate::wal::format::{BLOCK_BYTES, SEGMENT_HEADER_BLOCK_BYTES};
use crate::wal::segment::{slot_name, Segment};
use crate::wal::Lsn;
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

impl Inner {
    /// Leads one flush: takes the oldest sealed batch (or seals the open one, after waiting up
    /// to `group_commit_wait_us` for company), writes it to every copy and syncs them.
    /// Precondition: no flush runs and something is pending.
    ///
    /// With `may_wait` (a committer leads) and `group_commit_wait_us > 0`, the leader waits until
    /// as many committers wait as did at the end of recent flushes (`expected_company`), the
    /// batch reaches `max_batch_bytes`, or the time bound passes (the smaller of
    /// `group_commit_wait_us` and the average flush time), whichever comes first. This
    /// merges the committers released by one flush with those that arrived during it, instead of
    /// letting two half-size groups alternate.
    pub(super) fn flush_one<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        may_wait: bool,
    ) -> (MutexGuard<'a, State>, Result<()>) {
        assert!(!st.flushing, "two flush leaders");
        st.flushing = true;
        if may_wait && st.sealed.is_empty() && self.opts.group_commit_wait_us > 0 {
            let bound_ns = (self.opts.group_commit_wait_us * 1000).min(st.flush_ewma_ns);
            let deadline = Instant::now() + Duration::from_nanos(bound_ns);
            while st.sealed.is_empty()
                && st.open.buf.len() < self.opts.max_batch_bytes
                && st.waiter_count < st.expected_company
            {
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                st = self.wait_on_for(st, BATCH, deadline - now);
            }
        }
        if st.sealed.is_empty() {
            let ok = self.seal_open(&mut st);
            assert!(ok, "sealing into an empty queue cannot fail");
        }
        let Some(batch) = st.sealed.pop_front() else {
            unreachable!("flush_one called with nothing pending");
        };
        self.signal(&st, SPACE);
        let aligned = st.spare_aligned.take();
        let mut tail = std::mem::take(&mut st.tail);
        let target = match batch.new_segment {
            Some(_) => {
                let name = match st.free_slots.pop() {
                    Some(n) => n,
                    None => {
                        st.next_slot += 1;
                        slot_name(st.next_slot - 1)
                    }
                };
                Target::New(name)
            }
            None => match st.chain.last() {
                Some(last) if last.header.seq == batch.seq => Target::Existing(last.clone()),
                _ => unreachable!("a batch without a new segment targets the newest segment"),
            },
        };
        drop(st);
        let started = Instant::now();
        let (result, aligned, device_bytes) = self.write_batch(&batch, target, aligned, &mut tail);
        let took_ns = started.elapsed().as_nanos().min(u128::from(u32::MAX)) as u64;
        let mut st = self.lock();
        st.flushing = false;
        st.tail = tail;
        let r = match result {
            Ok(new_seg) => {
                if let Some(seg) = new_seg {
                    if let Some(last) = st.chain.last() {
                        assert_eq!(last.header.seq + 1, seg.header.seq, "segment sequence gap");
                        assert!(last.header.base_lsn <= seg.header.base_lsn, "segment base went backwards");
                    }
                    st.chain.push(seg);
                }
                let prev = self.durable.swap(batch.end_lsn(), Ordering::AcqRel);
                assert_eq!(prev, batch.start_lsn, "flushes must make the stream durable in order");
                // Committers waiting now = the concurrency to expect for the next flush.
                let sample = st.waiter_count;
                st.expected_company = sample.max(st.expected_company.saturating_sub(1)).max(1);
                let durable = batch.end_lsn();
                let done: Vec<Lsn> = st.waiters.range(..=durable).map(|(k, _)| *k).collect();
                let mut released = 0;
                for k in done {
                    if let Some(c) = st.waiters.remove(&k) {
                        st.waiter_count -= c;
                        released += c;
                    }
                }
                st.stats.count_group(released);
                st.flush_ewma_ns =
                    if st.flush_ewma_ns == 0 { took_ns } else { (7 * st.flush_ewma_ns + took_ns) / 8 };
                st.stats.flushes += 1;
                st.stats.records_flushed += batch.records;
                st.stats.durable_bytes += batch.buf.len() as u64;
                st.stats.bytes_written +=
                    device_bytes + if batch.new_segment.is_some() { SEGMENT_HEADER_BLOCK_BYTES } else { 0 };
                Ok(())
            }
            Err(e) => {
                st.poisoned = Some(format!("log flush at LSN {} failed: {e}", batch.start_lsn));
                Err(e)
            }
        };
        // The batch's buffers serve the next ones.
        if st.spare_buf.capacity() < batch.buf.capacity() {
            let mut buf = batch.buf;
            buf.clear();
            st.spare_buf = buf;
        }
        if aligned.is_some() {
            st.spare_aligned = aligned;
        }
        let wake = self.wake_after_flush(&mut st);
        self.signal(&st, FLUSHED);
        self.signal(&st, SPACE);
        if !wake.is_empty() {
            // Unpark outside the lock: each unpark is a system call, and the woken committers
            // need the lock at once.
            drop(st);
            for t in wake {
                t.unpark();
            }
            st = self.lock();
        }
        (st, r)
    }

    /// Takes out of the sleeper list the committers a finished flush made durable —
    /// acknowledging each (its commit is counted here, its waiter entry was removed with the
    /// flush) — or all of them after an error, and the earliest of the rest, which leads the
    /// next flush: nobody else would be awake to. The next leader comes first in the returned
    /// list, so it is woken first. The caller unparks them after releasing the lock.
    fn wake_after_flush(&self, st: &mut State) -> Vec<std::thread::Thread> {
        if st.sleepers.is_empty() {
            return Vec::new();
        }
        let durable = self.durable.load(Ordering::Acquire);
        let failed = st.poisoned.is_some();
        let mut wake = Vec::with_capacity(st.sleepers.len() + 1);
        let mut rest = Vec::with_capacity(st.sleepers.len());
        let mut acked = Vec::with_capacity(st.sleepers.len());
        let sleepers = std::mem::take(&mut st.sleepers);
        for s in sleepers {
            if failed {
                wake.push(s.thread);
            } else if s.lsn <= durable {
                s.acked.store(durable, Ordering::Release);
                st.stats.commits += 1;
                acked.push(s.thread);
            } else {
                rest.push(s);
            }
        }
        if let Some(i) = (0..rest.len()).min_by_key(|&i| rest[i].lsn) {
            wake.push(rest.swap_remove(i).thread);
        }
        wake.extend(acked);
        st.sleepers = rest;
        wake
    }

    /// Writes one batch to every copy (two in parallel: copy B on the helper thread) and syncs
    /// them; a batch that starts a segment writes and syncs the segment's header first, on its
    /// own. The write covers whole blocks: from the block holding the batch's first byte, whose
    /// first part is `tail` (the end of the previous flush, re-written unchanged), to the block
    /// holding its last byte, zero after it; `tail` becomes the new end's partial block.
    /// Returns the new segment when the batch started one, and the bytes written per copy.
    /// `spare`: an aligned buffer an earlier flush wrote from, reused when large enough; the
    /// buffer this flush wrote from is returned with the result, for the next one.
    fn write_batch(
        &self,
        batch: &Batch,
        target: Target,
        spare: Option<AlignedBuf>,
        tail: &mut Vec<u8>,
    ) -> (Result<Option<Segment>>, Option<AlignedBuf>, u64) {
        let prefix = (batch.file_off % BLOCK_BYTES as u64) as usize;
        if batch.new_segment.is_some() {
            assert_eq!(prefix, 0, "a segment's first flush starts on a block boundary");
            tail.clear();
        }
        assert_eq!(prefix, tail.len(), "the re-written start of a block must be the last flush's tail");
        let used = prefix + batch.buf.len();
        let len = used.div_ceil(BLOCK_BYTES) * BLOCK_BYTES;
        let mut buf = AlignedBuf::reuse_or_new(spare, len);
        buf[..prefix].copy_from_slice(tail);
        buf[prefix..used].copy_from_slice(&batch.buf);
        buf[used..len].fill(0);
        tail.clear();
        tail.extend_from_slice(&buf[used - used % BLOCK_BYTES..used]);
        let mut buf = Some(buf);
        let r = self.write_batch_from(batch, target, &mut buf, batch.file_off - prefix as u64, len);
        (r, buf, len as u64)
    }

    /// [`Inner::write_batch`] from `buf`, whose first `len` bytes go to the block-aligned file
    /// `offset`; leaves the buffer in `buf` unless a copy's writer still holds it.
    fn write_batch_from(
        &self,
        batch: &Batch,
        target: Target,
        buf: &mut Option<AlignedBuf>,
        offset: u64,
        len: usize,
    ) -> Result<Option<Segment>> {
        let (devs, new_seg, segment_bytes): (Vec<Arc<dyn Device>>, Option<Segment>, u64) = match target {
            Target::Existing(seg) => {
                let mut devs = Vec::with_capacity(self.storages.len());
                for (c, s) in self.storages.iter().enumerate() {
                    match &seg.devs[c] {
                        Some(d) => devs.push(d.clone()),
                        None => devs.push(s.open(&seg.name, true)?),
                    }
                }
                let segment_bytes = seg.header.segment_bytes;
                (devs, None, segment_bytes)
            }
            Target::New(name) => {
                let Some(header) = batch.new_segment else { unreachable!() };
                let mut devs = Vec::with_capacity(self.storages.len());
                for s in &self.storages {
                    devs.push(s.open(&name, true)?);
                }
                let recycled = devs.iter().any(|d| d.capacity() >= header.segment_bytes);
                for d in &devs {
                    d.ensure_capacity(header.segment_bytes)?;
                }
                {
                    let mut st = self.lock();
                    if recycled {
                        st.stats.segments_recycled += 1;
                    } else {
                        st.stats.segments_created += 1;
                    }
                }
                let seg = Segment { name, header, devs: devs.iter().cloned().map(Some).collect() };
                (devs, Some(seg), header.segment_bytes)
            }
        };
        self.prepare.before_write(batch.seq, &devs, offset + len as u64, segment_bytes)?;
        if let Some(h) = &batch.new_segment {
            // The header is durable before any record of the segment is written. A recycled
            // slot may hold records of an earlier segment; had a crash kept records of this
            // segment but lost its header, the next open would start its new segment at these
            // very LSNs (the recovered end) in some slot, and could later read this segment's
            // lost records as its own. With the header first, a slot holds records only of the
            // segment its header names (or of older ones, at other LSNs).
            assert_eq!(batch.file_off, SEGMENT_HEADER_BLOCK_BYTES);
            let mut block = Some(AlignedBuf::new(BLOCK_BYTES));
            h.encode(block.as_mut().expect("just made"));
            self.write_synced(&devs, 0, &mut block, BLOCK_BYTES)?;
        }
        self.write_synced(&devs, offset, buf, len)?;
        Ok(new_seg)
    }

    /// Writes the first `len` bytes of `buf` at `offset` of every copy's device and syncs them
    /// (two copies in parallel: from this thread when both devices overlap writes, as emulated
    /// ones do, else copy B on the helper thread). The buffer is put back in `buf`
    /// for reuse once no writer holds it.
    fn write_synced(
        &self,
        devs: &[Arc<dyn Device>],
        offset: u64,
        buf: &mut Option<AlignedBuf>,
        len: usize,
    ) -> Result<()> {
        let Some(owned) = buf.take() else { unreachable!("a buffer to write from") };
        match (&self.helper, devs) {
            (None, [a]) => {
                let r = a.write_at(offset, &owned[..len]).and_then(|()| a.sync());
                *buf = Some(owned);
                r?
            }
            (Some(_), [a, b]) if a.overlaps_writes() && b.overlaps_writes() => {
                // Both copies from this thread, overlapped (each write's completion is a
                // modelled time): no hand-off to the helper thread and back.
                let data = &owned[..len];
                let r = a.start_write(offset, data).and_then(|due_a| {
                    let due_b = b.start_write(offset, data);
                    a.finish_write(due_a);
                    b.finish_write(due_b?);
                    a.sync().and_then(|()| b.sync())
                });
                *buf = Some(owned);
                r?
            }
            (Some(helper), [a, b]) => {
                let shared = Arc::new(owned);
                helper.submit(Job { dev: b.clone(), offset, buf: shared.clone(), len });
                let r0 = a.write_at(offset, &shared[..len]).and_then(|()| a.sync());
                let r1 = helper.wait();
                // The helper dropped its reference before it answered.
                *buf = Arc::try_unwrap(shared).ok();
                r0?;
                r1?;
            }
            _ => unreachable!("a helper exactly when there are two copies"),
        }
        Ok(())
    }

    /// Zeroes the header block of a released segment in every copy that has its file, and
    /// syncs, so a later open sees a free slot.
    pub(super) fn release_header(&self, seg: &Segment) -> Result<()> {
        let zero = AlignedBuf::new(BLOCK_BYTES);
        for (c, s) in self.storages.iter().enumerate() {
            let dev = match &seg.devs[c] {
                Some(d) => d.clone(),
                None if s.exists(&seg.name) => s.open(&seg.name, false)?,
                None => continue,
            };
            if dev.capacity() >= BLOCK_BYTES as u64 {
                dev.write_at(0, &zero)?;
                dev.sync()?;
            }
        }
        Ok(())
    }
}

enum Target {
    Existing(Segment),
    New(String),
}
