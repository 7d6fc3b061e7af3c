//! The write scheduler shared by destaging and the engine's other writers (seed 002 §4.3).
//!
//! Owns: [`IoScheduler`], which lets at most `slots` writes run on the device at once (the
//! software stand-in for the device's channels) and, when a slot frees while both classes
//! wait, picks the next class by [`SchedMode`]: `Neutral` alternates, `DestagePriority` and
//! `ConventionalPriority` serve the favoured class first and let the other one in only when the
//! favoured class has nobody waiting (opportunistic destaging). Within a class, requests are
//! served in arrival order (tickets).
//!
//! Invariants: `in_flight <= slots` at all times; a granted ticket is always the oldest waiting
//! ticket of its class; every grant is matched by exactly one release (a guard releases on drop,
//! so a panicking writer cannot leak a slot). The number of waiters is bounded by the number of
//! threads that use the scheduler.

use crate::io::{Device, DeviceInfo, IoQueue, IoRequest, IoResult};
use crate::util::sync::{CondvarExt, MutexExt};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

/// Which source a write comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteClass {
    /// Pages moved from the fast side to the conventional log ring.
    Destage,
    /// Every other write of the engine to the same device (data pages, checkpoints...).
    Conventional,
}

impl WriteClass {
    fn idx(self) -> usize {
        match self {
            WriteClass::Destage => 0,
            WriteClass::Conventional => 1,
        }
    }
}

/// Arbitration policy between destage and conventional writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchedMode {
    /// Divide write opportunities equally (alternate when both classes wait).
    Neutral,
    /// Destage writes first; conventional writes fill the gaps.
    DestagePriority,
    /// Conventional writes first; destage fills the gaps.
    ConventionalPriority,
}

#[derive(Debug, Default)]
struct State {
    in_flight: usize,
    next_ticket: [u64; 2],
    serving: [u64; 2],
    last_granted: usize,
}

impl State {
    fn waiting(&self, c: usize) -> bool {
        self.next_ticket[c] > self.serving[c]
    }
}

/// Per-class counters.
#[derive(Debug, Default)]
pub struct ClassStats {
    /// Writes completed.
    pub writes: AtomicU64,
    /// Bytes written.
    pub bytes: AtomicU64,
    /// Total nanoseconds spent waiting for a slot.
    pub wait_ns: AtomicU64,
}

/// Arbitrates writes of two classes to one device.
pub struct IoScheduler {
    device: Arc<dyn Device>,
    mode: Mutex<SchedMode>,
    slots: usize,
    state: Mutex<State>,
    cv: Condvar,
    stats: [ClassStats; 2],
}

impl std::fmt::Debug for IoScheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IoScheduler {{ device: {}, slots: {} }}", self.device.info().name, self.slots)
    }
}

struct SlotGuard<'a> {
    sched: &'a IoScheduler,
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        let mut st = self.sched.lock();
        assert!(st.in_flight > 0, "scheduler slot released twice");
        st.in_flight -= 1;
        drop(st);
        self.sched.cv.notify_all();
    }
}

impl IoScheduler {
    /// A scheduler over `device` allowing `slots` concurrent writes (at least 1).
    pub fn new(device: Arc<dyn Device>, mode: SchedMode, slots: usize) -> Self {
        Self {
            device,
            mode: Mutex::new(mode),
            slots: slots.max(1),
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
            stats: Default::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.locked()
    }

    /// The scheduled device.
    pub fn device(&self) -> &Arc<dyn Device> {
        &self.device
    }

    /// Current mode.
    pub fn mode(&self) -> SchedMode {
        *self.mode.locked()
    }

    /// Changes the mode; takes effect at the next grant.
    pub fn set_mode(&self, mode: SchedMode) {
        *self.mode.locked() = mode;
        self.cv.notify_all();
    }

    /// Counters of a class.
    pub fn stats(&self, class: WriteClass) -> &ClassStats {
        &self.stats[class.idx()]
    }

    fn may_go(&self, st: &State, c: usize, ticket: u64) -> bool {
        if st.in_flight >= self.slots || st.serving[c] != ticket {
            return false;
        }
        let other = 1 - c;
        if !st.waiting(other) {
            return true;
        }
        match self.mode() {
            SchedMode::Neutral => st.last_granted != c,
            SchedMode::DestagePriority => c == WriteClass::Destage.idx(),
            SchedMode::ConventionalPriority => c == WriteClass::Conventional.idx(),
        }
    }

    fn acquire(&self, class: WriteClass) -> SlotGuard<'_> {
        let c = class.idx();
        let t0 = Instant::now();
        let mut st = self.lock();
        let ticket = st.next_ticket[c];
        st.next_ticket[c] += 1;
        while !self.may_go(&st, c, ticket) {
            st = self.cv.wait_locked(st);
        }
        st.serving[c] += 1;
        st.in_flight += 1;
        st.last_granted = c;
        assert!(st.in_flight <= self.slots, "scheduler exceeded its slots");
        drop(st);
        // Others of this class (next ticket) or of the other class may now be eligible.
        self.cv.notify_all();
        self.stats[c].wait_ns.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        SlotGuard { sched: self }
    }

    /// Writes `buf` at `offset` once the scheduler grants `class` a slot.
    pub fn write_at(&self, class: WriteClass, offset: u64, buf: &[u8]) -> IoResult<()> {
        let _slot = self.acquire(class);
        self.device.write_at(offset, buf)?;
        let s = &self.stats[class.idx()];
        s.writes.fetch_add(1, Ordering::Relaxed);
        s.bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// A [`Device`] view whose writes go through the scheduler as [`WriteClass::Conventional`];
    /// reads and syncs pass straight through. Give this to the engine's other writers.
    pub fn conventional_device(self: &Arc<Self>) -> Arc<dyn Device> {
        Arc::new(ScheduledDevice { sched: Arc::clone(self) })
    }
}

/// A device view that routes writes through an [`IoScheduler`] as conventional writes.
struct ScheduledDevice {
    sched: Arc<IoScheduler>,
}

impl Device for ScheduledDevice {
    fn info(&self) -> DeviceInfo {
        let mut i = self.sched.device.info();
        i.backend = format!("{} via xlog scheduler", i.backend);
        i
    }
    fn alignment(&self) -> usize {
        self.sched.device.alignment()
    }
    fn capacity(&self) -> u64 {
        self.sched.device.capacity()
    }
    fn ensure_capacity(&self, len: u64) -> IoResult<()> {
        self.sched.device.ensure_capacity(len)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> IoResult<()> {
        self.sched.device.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> IoResult<()> {
        self.sched.write_at(WriteClass::Conventional, offset, buf)
    }
    fn submit_batch(&self, reqs: &mut [IoRequest<'_>]) -> IoResult<()> {
        let mut first = None;
        for r in reqs.iter_mut() {
            let res = match r {
                IoRequest::Read { offset, buf } => self.read_at(*offset, buf),
                IoRequest::Write { offset, buf } => self.write_at(*offset, buf),
            };
            if let Err(e) = res {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
    fn sync(&self) -> IoResult<()> {
        self.sched.device.sync()
    }
    fn open_queue(&self, depth: usize) -> IoResult<Box<dyn IoQueue + '_>> {
        // The default synchronous queue calls our write_at, so queued writes are scheduled too.
        struct Q<'d> {
            dev: &'d ScheduledDevice,
            depth: usize,
            done: Vec<crate::io::Completion>,
        }
        impl IoQueue for Q<'_> {
            fn submit(&mut self, ops: Vec<crate::io::QueuedOp>) -> IoResult<()> {
                assert!(
                    self.done.len() + ops.len() <= self.depth.max(1),
                    "queue depth {} exceeded",
                    self.depth
                );
                for mut op in ops {
                    let result = match op.kind {
                        crate::io::QueuedOpKind::Read => self.dev.read_at(op.offset, &mut op.buf),
                        crate::io::QueuedOpKind::Write => self.dev.write_at(op.offset, &op.buf),
                    };
                    self.done.push(crate::io::Completion { tag: op.tag, buf: op.buf, result });
                }
                Ok(())
            }
            fn reap(&mut self, _min: usize, out: &mut Vec<crate::io::Completion>) -> IoResult<()> {
                out.append(&mut self.done);
                Ok(())
            }
            fn in_flight(&self) -> usize {
                self.done.len()
            }
        }
        Ok(Box::new(Q { dev: self, depth, done: Vec::new() }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::MemDevice;
    use std::sync::atomic::AtomicUsize;

    /// With one slot and both classes always waiting, the grant order follows the mode.
    #[test]
    fn modes_order_grants() {
        for mode in [SchedMode::Neutral, SchedMode::DestagePriority, SchedMode::ConventionalPriority] {
            let dev: Arc<dyn Device> = Arc::new(MemDevice::new("sched"));
            let s = Arc::new(IoScheduler::new(dev, mode, 1));
            // Hold the only slot so that all test writers queue up behind it.
            let blocker = s.acquire(WriteClass::Conventional);
            let order = Arc::new(Mutex::new(Vec::new()));
            let queued = Arc::new(AtomicUsize::new(0));
            let mut hs = Vec::new();
            for i in 0..6 {
                let class = if i % 2 == 0 { WriteClass::Destage } else { WriteClass::Conventional };
                let (s, order, queued) = (Arc::clone(&s), Arc::clone(&order), Arc::clone(&queued));
                hs.push(std::thread::spawn(move || {
                    queued.fetch_add(1, Ordering::SeqCst);
                    let _g = s.acquire(class);
                    order.locked().push(class);
                }));
            }
            // Wait (without sleeping) until all six hold tickets.
            loop {
                let st = s.lock();
                if st.next_ticket[0] - st.serving[0] == 3 && st.next_ticket[1] - st.serving[1] == 3 {
                    break;
                }
                drop(st);
                std::thread::yield_now();
            }
            drop(blocker);
            for h in hs {
                h.join().expect("writer thread");
            }
            let order = order.locked().clone();
            use WriteClass::*;
            let expect = match mode {
                // Last grant was the conventional blocker, so neutral starts with destage.
                SchedMode::Neutral => {
                    vec![Destage, Conventional, Destage, Conventional, Destage, Conventional]
                }
                SchedMode::DestagePriority => {
                    vec![Destage, Destage, Destage, Conventional, Conventional, Conventional]
                }
                SchedMode::ConventionalPriority => {
                    vec![Conventional, Conventional, Conventional, Destage, Destage, Destage]
                }
            };
            assert_eq!(order, expect, "mode {mode:?}");
        }
    }
}
