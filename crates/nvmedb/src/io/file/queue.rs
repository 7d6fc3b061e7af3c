//! [`UringQueue`]: an io_uring of its own per open queue, keeping up to `depth` operations of
//! one thread in flight (a scan's read-ahead, the lab's deep I/O).
//!
//! Owns: the queue's ring, its in-flight slots, and the thread's idle rings kept for reuse.
//! Invariants: a buffer lent to the ring stays in its slot until its completion is reaped; a
//! queue waits for all its in-flight operations when dropped, so a ring kept for reuse has
//! nothing in it; a thread keeps at most [`IDLE_QUEUE_RINGS_KEPT`] idle rings.

use super::FileDevice;
use crate::io::{
    check_alignment, Completion, IoOpKind, IoQueue, IoRequest, IoResult, QueuedOp, QueuedOpKind,
    DIRECT_IO_ALIGN,
};
use io_uring::{opcode, types, IoUring};
use std::cell::RefCell;
use std::os::unix::io::AsRawFd;

thread_local! {
    /// Idle rings of this thread's closed [`UringQueue`]s, reused by its next queues: a scan
    /// opens a queue per table, and each ring set up and torn down (the kernel frees it in a
    /// worker after an RCU grace period) is CPU spent per scan; reusing them cut the CPU per
    /// page of TPC-H Q3's scans by about a tenth (`docs/tpch.md`).
    static IDLE_QUEUE_RINGS: RefCell<Vec<IoUring>> = const { RefCell::new(Vec::new()) };
}

/// Idle queue rings a thread keeps for reuse.
const IDLE_QUEUE_RINGS_KEPT: usize = 4;

/// An io_uring of its own that keeps up to `depth` operations of one thread in flight.
pub struct UringQueue<'d> {
    device: &'d FileDevice,
    /// Taken out only in `Drop` (to be kept for reuse or freed).
    ring: std::mem::ManuallyDrop<IoUring>,
    depth: usize,
    /// In-flight operations by slot; the slot index is the entry's user data.
    slots: Vec<Option<QueuedOp>>,
    free: Vec<usize>,
    in_flight: usize,
    /// Scratch space for completions copied out of the ring (reused, no allocation per reap).
    cqes: Vec<(u64, i32)>,
}

impl<'d> UringQueue<'d> {
    pub(super) fn new(device: &'d FileDevice, depth: usize) -> IoResult<Self> {
        let depth = depth.max(1);
        let entries = (depth as u32).next_power_of_two().max(2);
        let idle = IDLE_QUEUE_RINGS.with(|r| {
            let mut r = r.borrow_mut();
            let i = r.iter().position(|ring| ring.params().sq_entries() == entries)?;
            Some(r.swap_remove(i))
        });
        if let Some(ring) = idle {
            return Ok(Self::with_ring(device, ring, depth));
        }
        // Cooperative task running: completions are processed when this thread enters the
        // kernel anyway (it waits in io_uring_enter), which saves an interrupt per completion.
        // Older kernels refuse the flag; then the ring is built without it.
        let ring = match IoUring::builder().setup_cqsize(entries * 2).setup_coop_taskrun().build(entries) {
            Ok(r) => r,
            Err(_) => IoUring::builder()
                .setup_cqsize(entries * 2)
                .build(entries)
                .map_err(|e| device.err(IoOpKind::Setup, 0, 0, e))?,
        };
        Ok(Self::with_ring(device, ring, depth))
    }

    fn with_ring(device: &'d FileDevice, ring: IoUring, depth: usize) -> Self {
        Self {
            device,
            ring: std::mem::ManuallyDrop::new(ring),
            depth,
            slots: (0..depth).map(|_| None).collect(),
            free: (0..depth).rev().collect(),
            in_flight: 0,
            cqes: Vec::with_capacity(depth),
        }
    }

    fn enter(&mut self, want: usize) -> IoResult<()> {
        loop {
            let r = if want == 0 { self.ring.submit() } else { self.ring.submit_and_wait(want) };
            match r {
                Ok(submitted) => {
                    if submitted > 0 {
                        super::count_submission();
                    }
                    return Ok(());
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                    // Interrupted: submit again; a wait returns to the caller, which loops.
                    if want == 0 {
                        continue;
                    }
                    return Ok(());
                }
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) || e.raw_os_error() == Some(libc::EAGAIN) => {
                    // Completion queue is full: the caller must reap first.
                    return Ok(());
                }
                Err(e) => return Err(self.device.err(IoOpKind::Setup, 0, 0, e)),
            }
        }
    }

    fn drain(&mut self, out: &mut Vec<Completion>) -> usize {
        let mut n = 0;
        let mut done = std::mem::take(&mut self.cqes);
        done.extend(self.ring.completion().map(|cqe| (cqe.user_data(), cqe.result())));
        for (slot, res) in done.drain(..) {
            let Some(mut op) = self.slots[slot as usize].take() else { continue };
            self.free.push(slot as usize);
            self.in_flight -= 1;
            n += 1;
            let offset = op.offset;
            let result = {
                let mut req = match op.kind {
                    QueuedOpKind::Read => IoRequest::Read { offset, buf: &mut op.buf },
                    QueuedOpKind::Write => IoRequest::Write { offset, buf: &op.buf },
                };
                self.device.finish(&mut req, res)
            };
            out.push(Completion { tag: op.tag, buf: op.buf, result });
        }
        self.cqes = done;
        n
    }
}

impl UringQueue<'_> {
    /// Pushes one operation into the submission ring without entering the kernel.
    fn push_one(&mut self, op: QueuedOp) {
        let slot = self.free.pop().unwrap_or_else(|| unreachable!("depth checked by the caller"));
        let fd = types::Fd(self.device.file.as_raw_fd());
        let stored = self.slots[slot].insert(op);
        let len = stored.buf.len() as u32;
        let e = match stored.kind {
            QueuedOpKind::Read => {
                opcode::Read::new(fd, stored.buf.as_mut_ptr(), len).offset(stored.offset).build()
            }
            QueuedOpKind::Write => {
                opcode::Write::new(fd, stored.buf.as_ptr(), len).offset(stored.offset).build()
            }
        }
        .user_data(slot as u64);
        // SAFETY: the buffer lives in `self.slots` (heap memory that does not move while the
        // AlignedBuf value is moved) until its completion is reaped, and Drop waits for every
        // in-flight entry. The ring has at least `depth` entries and at most `depth` are in
        // flight, so the push cannot overflow.
        if unsafe { self.ring.submission().push(&e) }.is_err() {
            unreachable!("submission queue overflow below depth");
        }
        self.in_flight += 1;
    }

    /// Checks every op (nothing is submitted if one is misaligned), then pushes them, entering
    /// the kernel after every `batch`; the last chunk is left for the caller to
    /// submit when `keep_last` (it enters right after, submitting and waiting in one call).
    fn submit_chunks(&mut self, ops: Vec<QueuedOp>, keep_last: bool, batch: usize) -> IoResult<()> {
        assert!(self.in_flight + ops.len() <= self.depth, "queue depth {} exceeded", self.depth);
        for op in &ops {
            check_alignment(
                &self.device.name,
                DIRECT_IO_ALIGN,
                op.offset,
                op.buf.len(),
                op.buf.as_ptr() as usize,
            )?;
        }
        let n = ops.len();
        for (i, op) in ops.into_iter().enumerate() {
            self.push_one(op);
            let last = i + 1 == n;
            if (last && !keep_last) || (!last && (i + 1) % batch == 0) {
                self.enter(0)?;
            }
        }
        Ok(())
    }
}

impl IoQueue for UringQueue<'_> {
    fn submit(&mut self, ops: Vec<QueuedOp>) -> IoResult<()> {
        self.submit_chunks(ops, false, self.device.queue_submit_batch)
    }

    fn submit_all(&mut self, ops: Vec<QueuedOp>) -> IoResult<()> {
        self.submit_chunks(ops, false, usize::MAX)
    }

    fn submit_and_reap(&mut self, ops: Vec<QueuedOp>, min: usize, out: &mut Vec<Completion>) -> IoResult<()> {
        self.submit_chunks(ops, true, self.device.queue_submit_batch)?;
        let mut got = self.drain(out);
        if got >= min {
            return self.enter(0);
        }
        // One io_uring_enter submits the new entries and waits for the completions still needed.
        while got < min && self.in_flight > 0 {
            let want = (min - got).min(self.in_flight);
            self.enter(want)?;
            got += self.drain(out);
        }
        Ok(())
    }

    fn reap(&mut self, min: usize, out: &mut Vec<Completion>) -> IoResult<()> {
        let mut got = self.drain(out);
        while got < min && self.in_flight > 0 {
            let want = (min - got).min(self.in_flight);
            self.enter(want)?;
            got += self.drain(out);
        }
        Ok(())
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }
}

impl Drop for UringQueue<'_> {
    fn drop(&mut self) {
        let mut sink = Vec::new();
        while self.in_flight > 0 {
            if let Err(e) = self.reap(self.in_flight, &mut sink) {
                eprintln!("io_uring queue on {} could not reap in-flight I/O: {e}", self.device.name);
                std::process::abort();
            }
            sink.clear();
        }
        // SAFETY: taken once, here; `self.ring` is not used after this.
        let mut ring = unsafe { std::mem::ManuallyDrop::take(&mut self.ring) };
        // Nothing in flight and both queues empty: the next queue of this thread may use it.
        if ring.submission().is_empty() && ring.completion().is_empty() {
            // During the thread's exit the cache may be gone: the ring is then freed.
            let _ = IDLE_QUEUE_RINGS.try_with(|r| {
                let mut r = r.borrow_mut();
                if r.len() < IDLE_QUEUE_RINGS_KEPT {
                    r.push(ring);
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{AlignedBuf, Device, QueuedOp, QueuedOpKind};
    use std::fs::File;

    #[test]
    fn a_closed_queue_lends_its_ring_to_the_threads_next_queue() {
        let path = std::env::temp_dir().join(format!("nvmedb-ring-reuse-{}.db", std::process::id()));
        let dev = FileDevice::open(&path).unwrap();
        if !dev.uring {
            return; // io_uring refused here: queues are synchronous, there is no ring to keep
        }
        let mut page = AlignedBuf::new(4096);
        page[..5].copy_from_slice(b"hello");
        dev.write_at(0, &page).unwrap();
        let p = path.clone();
        std::thread::spawn(move || {
            let read_back = |q: &mut UringQueue<'_>| {
                let op = QueuedOp { tag: 7, kind: QueuedOpKind::Read, offset: 0, buf: AlignedBuf::new(4096) };
                q.submit(vec![op]).unwrap();
                let mut done = Vec::new();
                q.reap(1, &mut done).unwrap();
                assert_eq!(&done[0].buf[..5], b"hello");
            };
            let mut first = UringQueue::new(&dev, 8).unwrap();
            read_back(&mut first);
            let fd = first.ring.as_raw_fd();
            drop(first);
            // Had the ring been closed, this file would take its descriptor number.
            let _blocker = File::open(&p).unwrap();
            let mut second = UringQueue::new(&dev, 8).unwrap();
            assert_eq!(second.ring.as_raw_fd(), fd, "the second queue set up a ring of its own");
            read_back(&mut second);
            // A queue of another depth needs a ring of another size.
            let third = UringQueue::new(&dev, 64).unwrap();
            assert_ne!(third.ring.as_raw_fd(), second.ring.as_raw_fd());
        })
        .join()
        .unwrap();
        let _ = std::fs::remove_file(&path);
    }
}
