//! Emulated devices: a latency model wrapped around any [`Device`].
//!
//! Owns: [`EmulatedDevice`] (the model's state: IOPS- and bandwidth-cap pacing, service channels, GC stalls,
//! the recent write share, the last offset for sequential detection), [`EmuQueue`] (depth-N
//! overlap: each operation completes at its own due time), [`lateness`] (how late waits ended,
//! per profile), [`wait_until`] (sleep for the bulk,
//! poll only the last few µs), and [`open_emulated`] which enforces the backing rule.
//!
//! Invariants: an operation's data reaches the inner device at submission and its completion is
//! reported no earlier than `due = start + service time`, where `start` is the later of the
//! submission time, the throughput-cap slot (IOPS or bandwidth), the end of any GC stall and (with channels) the first free
//! channel; the inner device's own latency counts inside that window, so the emulated latency is
//! a floor. The model's state is behind one short mutex, never held while waiting.

use super::{
    check_alignment,
    profile::{Backing, DeviceProfile},
    Completion, Device, DeviceInfo, IoError, IoOpKind, IoQueue, IoRequest, IoResult, MemDevice, QueuedOp,
    QueuedOpKind,
};
use crate::util::sync::MutexExt;
use crate::util::Rng;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

thread_local! {
    static SLACK_SET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// This thread's running estimate of how late a sleep wakes up, in ns (a VM's vCPU that
    /// halted while idle takes tens of µs to be scheduled again).
    static OVERSHOOT_NS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Upper bound on the learned wake-up lateness: on a loaded machine sleeps wake late by
/// milliseconds, and following that would turn every wait into a spin; past this bound the
/// emulator accepts late completions rather than burn a core.
const MAX_OVERSHOOT_NS: u64 = 50_000;

/// Asks the kernel for 1 ns timer slack on this thread (default 50 µs), once per thread, so a
/// sleep ends close to when it was asked to.
fn tighten_timer_slack() {
    SLACK_SET.with(|s| {
        if !s.get() {
            // SAFETY: prctl(PR_SET_TIMERSLACK) takes a plain integer and affects only this thread.
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
            s.set(true);
        }
    });
}

/// Waits until `deadline`: sleeps while more than `spin` (plus the thread's learned wake-up
/// lateness, at most `MAX_OVERSHOOT_NS`) remains, then polls the clock. Costs CPU only for
/// the last few µs of every wait.
///
/// The polling spins while no more threads of this process are polling than there are CPUs,
/// and yields between polls beyond that. A `sched_yield` hands the core to any runnable thread,
/// and one from another process (a build at nice 19, say) then keeps it until the next
/// scheduler tick: measured on the 2-vCPU VM under such a load with a scratch loop (a 10 µs
/// wait after 20 µs of work, 1, 2 and 4 threads, 2 s each), yielding gave p50 23–47 µs and means
/// of 135–1 117 µs, spinning p50 10.0–10.1 µs and means of 11–24 µs. With more pollers than cores (20 clients on 2 vCPUs),
/// spinners would keep the cores from threads whose I/O is already due, so they yield (seed
/// 000's primitive workload, optane 1 % SELECT: 46 K tps spinning, 59 K yielding).
pub fn wait_until(deadline: Instant, spin: Duration) {
    tighten_timer_slack();
    loop {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        let left = deadline - now;
        let late = Duration::from_nanos(OVERSHOOT_NS.with(|c| c.get()));
        if left > spin + late {
            let nap = left - spin - late;
            std::thread::sleep(nap);
            let overshoot = (Instant::now() - now).saturating_sub(nap).as_nanos() as u64;
            OVERSHOOT_NS.with(|c| {
                // EWMA with weight 1/8 per observation.
                let est = (c.get() * 7 + overshoot.min(MAX_OVERSHOOT_NS)) / 8;
                c.set(est);
            });
        } else {
            let _polling = Poller::enter();
            while Instant::now() < deadline {
                if POLLERS.load(Ordering::Relaxed) > cpus() {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
            return;
        }
    }
}

/// Threads of this process in the polling stretch of [`wait_until`].
static POLLERS: AtomicUsize = AtomicUsize::new(0);

/// Counts its thread in [`POLLERS`] from creation to drop.
struct Poller;

impl Poller {
    fn enter() -> Self {
        POLLERS.fetch_add(1, Ordering::Relaxed);
        Poller
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        POLLERS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// CPUs this process may run on (read once).
fn cpus() -> usize {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// How late emulated operations completed: the time from an operation's due time (its
/// modelled completion) to when the waiting thread returned, over synchronous operations
/// (reads, writes, batches; queued operations are reaped when their caller asks, so they are
/// not counted). Large values mean the machine, not the model, set the latency: a busy CPU
/// delays the waiting thread's wake-up or poll.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Lateness {
    /// Operations counted.
    pub ops: u64,
    /// Their total lateness, ns.
    pub late_ns: u64,
    /// Operations that completed more than [`LATE_THRESHOLD`] after their due time.
    pub late_ops: u64,
}

/// Lateness past which an operation counts in [`Lateness::late_ops`].
pub const LATE_THRESHOLD: Duration = Duration::from_micros(50);

impl Lateness {
    /// The counts between `earlier` and `self`.
    pub fn since(&self, earlier: &Lateness) -> Lateness {
        Lateness {
            ops: self.ops.saturating_sub(earlier.ops),
            late_ns: self.late_ns.saturating_sub(earlier.late_ns),
            late_ops: self.late_ops.saturating_sub(earlier.late_ops),
        }
    }

    /// Mean lateness per operation, µs (0 without operations).
    pub fn mean_us(&self) -> f64 {
        if self.ops == 0 {
            0.0
        } else {
            self.late_ns as f64 / self.ops as f64 / 1e3
        }
    }

    /// Share of operations later than [`LATE_THRESHOLD`] (0 without operations).
    pub fn late_share(&self) -> f64 {
        if self.ops == 0 {
            0.0
        } else {
            self.late_ops as f64 / self.ops as f64
        }
    }
}

/// One profile's lateness counters.
#[derive(Debug, Default)]
struct LateCounters {
    ops: AtomicU64,
    late_ns: AtomicU64,
    late_ops: AtomicU64,
}

impl LateCounters {
    fn record(&self, late: Duration) {
        self.ops.fetch_add(1, Ordering::Relaxed);
        self.late_ns.fetch_add(late.as_nanos() as u64, Ordering::Relaxed);
        if late > LATE_THRESHOLD {
            self.late_ops.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn get(&self) -> Lateness {
        Lateness {
            ops: self.ops.load(Ordering::Relaxed),
            late_ns: self.late_ns.load(Ordering::Relaxed),
            late_ops: self.late_ops.load(Ordering::Relaxed),
        }
    }
}

/// Every profile's counters in this process, by profile name.
static LATE: Mutex<Vec<(String, Arc<LateCounters>)>> = Mutex::new(Vec::new());

fn late_counters(profile: &str) -> Arc<LateCounters> {
    let mut all = LATE.locked();
    if let Some((_, c)) = all.iter().find(|(n, _)| n == profile) {
        return c.clone();
    }
    let c = Arc::new(LateCounters::default());
    all.push((profile.to_string(), c.clone()));
    c
}

/// The lateness of every emulated device of profile `profile` in this process so far (zero if
/// none was opened); take two and subtract with [`Lateness::since`] for a window.
pub fn lateness(profile: &str) -> Lateness {
    LATE.locked().iter().find(|(n, _)| n == profile).map_or_else(Lateness::default, |(_, c)| c.get())
}

#[derive(Debug)]
struct EmuState {
    rng: Rng,
    /// Earliest start of the next operation under the IOPS cap.
    cap_next: Instant,
    /// Busy-until time of each channel (empty: unlimited channels).
    channels: Vec<Instant>,
    /// Operations may not start before this (a GC stall in progress).
    gc_until: Instant,
    /// File (see [`EmulatedDevice`]'s `file_tag`) and end offset of the previous operation,
    /// for sequential detection.
    last_end: (u64, u64),
    /// Exponentially weighted share of writes among recent operations.
    write_share: f64,
    /// Number of GC stalls triggered.
    gc_stalls: u64,
}

/// A device whose latency follows a [`DeviceProfile`].
#[derive(Debug)]
pub struct EmulatedDevice<D: Device> {
    inner: D,
    /// Name used in errors and reports: the inner device's name plus the profile.
    name: String,
    profile: DeviceProfile,
    spin: Duration,
    state: EmulatedMedium,
    /// Tells this file's operations from other files' on the same medium.
    file_tag: u64,
    /// Where this device's lateness is counted (shared by every device of its profile).
    late: Arc<LateCounters>,
}

/// The state of one emulated device (throughput-cap pacing, channels, GC stalls, recent
/// writes, last offset): files opened "on the same device" share one, so they share its
/// IOPS, bandwidth and channels as files on one real device do.
#[derive(Debug, Clone)]
pub struct EmulatedMedium(Arc<Mutex<EmuState>>);

impl EmulatedMedium {
    /// A fresh device state for `profile`; `seed` drives jitter, spikes and GC stalls.
    pub fn new(profile: &DeviceProfile, seed: u64) -> Self {
        let now = Instant::now();
        Self(Arc::new(Mutex::new(EmuState {
            rng: Rng::new(seed),
            cap_next: now,
            channels: vec![now; profile.channels as usize],
            gc_until: now,
            last_end: (u64::MAX, u64::MAX),
            write_share: 0.0,
            gc_stalls: 0,
        })))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, EmuState> {
        self.0.locked()
    }
}

fn us(v: f64) -> Duration {
    Duration::from_nanos((v.max(0.0) * 1000.0) as u64)
}

impl<D: Device> EmulatedDevice<D> {
    /// Wraps `inner` as a device of its own; `seed` drives jitter, spikes and GC stalls. The
    /// caller is responsible for the backing rule ([`open_emulated`] enforces it).
    pub fn new(inner: D, profile: DeviceProfile, seed: u64) -> Self {
        let medium = EmulatedMedium::new(&profile, seed);
        Self::on_medium(inner, profile, medium)
    }

    /// Wraps `inner` as one more file on the emulated device `medium` (made for `profile`):
    /// its operations share that device's throughput caps, channels and GC stalls.
    pub fn on_medium(inner: D, profile: DeviceProfile, medium: EmulatedMedium) -> Self {
        let spin = us(profile.spin_us);
        let name = format!("{} (emulated {})", inner.info().name, profile.name);
        static NEXT_TAG: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let file_tag = NEXT_TAG.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let late = late_counters(&profile.name);
        Self { inner, name, spin, profile, state: medium, file_tag, late }
    }

    /// The profile in force.
    pub fn profile(&self) -> &DeviceProfile {
        &self.profile
    }

    /// The wrapped device.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// Number of garbage-collection stalls the model has triggered so far, on this file's
    /// emulated device (shared with the other files on its [`EmulatedMedium`]).
    pub fn gc_stalls(&self) -> u64 {
        self.state.lock().gc_stalls
    }

    /// Charges the model for a write of `len` bytes at `offset`, submitted at `submitted`, whose
    /// data reached RAM by another path (an unaligned append to a buffered file on tmpfs, which
    /// this device's alignment rules would refuse), and returns once the write is due: the time
    /// already spent since `submitted` counts inside the device's service time, as for
    /// [`Device::write_at`].
    pub fn charge_write(&self, offset: u64, len: usize, submitted: Instant) {
        let due = self.schedule(true, offset, len, submitted);
        self.complete_at(due);
    }

    /// Waits until `due` and counts how late the wait ended ([`lateness`]).
    fn complete_at(&self, due: Instant) {
        wait_until(due, self.spin);
        let late = Instant::now().saturating_duration_since(due);
        self.late.record(late);
    }

    /// When an operation submitted at `now` completes.
    fn schedule(&self, write: bool, offset: u64, len: usize, now: Instant) -> Instant {
        let p = &self.profile;
        let mut st = self.state.lock();
        st.write_share = st.write_share * 0.97 + if write { 0.03 } else { 0.0 };
        let sequential = p.sequential_latency_us > 0.0 && (self.file_tag, offset) == st.last_end;
        st.last_end = (self.file_tag, offset + len as u64);
        let mut svc_us = if sequential {
            p.sequential_latency_us
        } else if write {
            p.write_latency_us
        } else {
            p.read_latency_us * (1.0 + p.read_mix_slowdown * st.write_share)
        };
        if p.jitter_us > 0.0 {
            // Jitter is given for random access; a sequential access gets the same share of
            // its (shorter) service time.
            let base = if write { p.write_latency_us } else { p.read_latency_us };
            let jitter = if sequential && base > 0.0 {
                p.jitter_us * p.sequential_latency_us / base
            } else {
                p.jitter_us
            };
            svc_us += (st.rng.unit_f64() * 2.0 - 1.0) * jitter;
        }
        if p.spike_probability > 0.0 && st.rng.chance(p.spike_probability) {
            svc_us += p.spike_us;
        }
        let svc = us(svc_us);
        let mut start = now;
        // The device's throughput limits: each operation occupies it for the longer of one
        // operation slot under the IOPS cap and its transfer time at the bandwidth cap.
        let slot_s = f64::max(
            if p.iops_cap > 0.0 { 1.0 / p.iops_cap } else { 0.0 },
            if p.bandwidth_mb_s > 0.0 { len as f64 / (p.bandwidth_mb_s * 1e6) } else { 0.0 },
        );
        if slot_s > 0.0 {
            start = start.max(st.cap_next);
            st.cap_next = start + Duration::from_secs_f64(slot_s);
        }
        start = start.max(st.gc_until);
        if let Some(ch) = st.channels.iter_mut().min() {
            start = start.max(*ch);
            *ch = start + svc;
        }
        let due = start + svc;
        if write && p.gc_stall_probability > 0.0 && st.rng.chance(p.gc_stall_probability) {
            st.gc_until = st.gc_until.max(due + us(p.gc_stall_us));
            st.gc_stalls += 1;
        }
        due
    }
}

impl<D: Device> Device for EmulatedDevice<D> {
    fn info(&self) -> DeviceInfo {
        let inner = self.inner.info();
        DeviceInfo {
            name: self.name.clone(),
            backend: format!("emulated {} over {}", self.profile.name, inner.backend),
            emulated_profile: Some(self.profile.name.clone()),
        }
    }

    fn alignment(&self) -> usize {
        self.inner.alignment()
    }

    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }

    fn ensure_capacity(&self, len: u64) -> IoResult<()> {
        self.inner.ensure_capacity(len)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> IoResult<()> {
        check_alignment(&self.name, self.alignment(), offset, buf.len(), buf.as_ptr() as usize)?;
        let due = self.schedule(false, offset, buf.len(), Instant::now());
        let r = self.inner.read_at(offset, buf);
        self.complete_at(due);
        r
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> IoResult<()> {
        check_alignment(&self.name, self.alignment(), offset, buf.len(), buf.as_ptr() as usize)?;
        let due = self.schedule(true, offset, buf.len(), Instant::now());
        let r = self.inner.write_at(offset, buf);
        self.complete_at(due);
        r
    }

    fn submit_batch(&self, reqs: &mut [IoRequest<'_>]) -> IoResult<()> {
        // A batch's operations overlap: each is scheduled at the batch's submission time.
        for req in reqs.iter() {
            let addr = match req {
                IoRequest::Read { buf, .. } => buf.as_ptr() as usize,
                IoRequest::Write { buf, .. } => buf.as_ptr() as usize,
            };
            check_alignment(&self.name, self.alignment(), req.offset(), req.len(), addr)?;
        }
        let now = Instant::now();
        let mut last_due = now;
        for req in reqs.iter() {
            let due = self.schedule(matches!(req, IoRequest::Write { .. }), req.offset(), req.len(), now);
            last_due = last_due.max(due);
        }
        let r = self.inner.submit_batch(reqs);
        self.complete_at(last_due);
        r
    }

    fn sync(&self) -> IoResult<()> {
        self.inner.sync()
    }

    fn overlaps_writes(&self) -> bool {
        true
    }

    fn start_write(&self, offset: u64, buf: &[u8]) -> IoResult<Option<Instant>> {
        check_alignment(&self.name, self.alignment(), offset, buf.len(), buf.as_ptr() as usize)?;
        let due = self.schedule(true, offset, buf.len(), Instant::now());
        self.inner.write_at(offset, buf)?;
        Ok(Some(due))
    }

    fn finish_write(&self, due: Option<Instant>) {
        if let Some(due) = due {
            self.complete_at(due);
        }
    }

    fn open_queue(&self, depth: usize) -> IoResult<Box<dyn IoQueue + '_>> {
        Ok(Box::new(EmuQueue { device: self, depth: depth.max(1), pending: Vec::new() }))
    }
}

/// A queue on an [`EmulatedDevice`]: up to `depth` operations overlap, each completing at its
/// own due time.
pub struct EmuQueue<'d, D: Device> {
    device: &'d EmulatedDevice<D>,
    depth: usize,
    pending: Vec<(Instant, Completion)>,
}

impl<D: Device> IoQueue for EmuQueue<'_, D> {
    fn submit(&mut self, ops: Vec<QueuedOp>) -> IoResult<()> {
        assert!(self.pending.len() + ops.len() <= self.depth, "queue depth {} exceeded", self.depth);
        for op in &ops {
            let (d, a) = (self.device, self.device.alignment());
            check_alignment(&d.name, a, op.offset, op.buf.len(), op.buf.as_ptr() as usize)?;
        }
        for mut op in ops {
            let now = Instant::now();
            let write = op.kind == QueuedOpKind::Write;
            let due = self.device.schedule(write, op.offset, op.buf.len(), now);
            let result = match op.kind {
                QueuedOpKind::Read => self.device.inner.read_at(op.offset, &mut op.buf),
                QueuedOpKind::Write => self.device.inner.write_at(op.offset, &op.buf),
            };
            self.pending.push((due, Completion { tag: op.tag, buf: op.buf, result }));
        }
        Ok(())
    }

    fn reap(&mut self, min: usize, out: &mut Vec<Completion>) -> IoResult<()> {
        let mut got = 0;
        loop {
            let now = Instant::now();
            let mut i = 0;
            while i < self.pending.len() {
                if self.pending[i].0 <= now {
                    out.push(self.pending.swap_remove(i).1);
                    got += 1;
                } else {
                    i += 1;
                }
            }
            if got >= min || self.pending.is_empty() {
                return Ok(());
            }
            let next = self.pending.iter().map(|(d, _)| *d).min().unwrap_or(now);
            wait_until(next, self.device.spin);
        }
    }

    fn in_flight(&self) -> usize {
        self.pending.len()
    }
}

/// Opens the built-in or overridden `profile` over RAM or over the file at `file`.
///
/// A profile whose backing is [`Backing::Ram`] (faster than the real disk: its latency must
/// replace the medium's) refuses a file. A file-backed profile without a file uses RAM.
pub fn open_emulated(
    profile: DeviceProfile,
    file: Option<&Path>,
    file_opts: &super::FileOptions,
    seed: u64,
) -> IoResult<Arc<dyn Device>> {
    match (profile.backing, file) {
        (Backing::Ram, Some(path)) => Err(IoError::os(
            &path.display().to_string(),
            IoOpKind::Setup,
            0,
            0,
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "profile `{}` ({} µs reads) is faster than a real disk and must be backed by RAM, \
                     not a file",
                    profile.name, profile.read_latency_us
                ),
            ),
        )),
        (Backing::File, Some(path)) => {
            let f = super::FileDevice::open_with(path, file_opts)?;
            Ok(Arc::new(EmulatedDevice::new(f, profile, seed)))
        }
        (_, None) => {
            let name = format!("memory:{}", profile.name);
            Ok(Arc::new(EmulatedDevice::new(MemDevice::new(name), profile, seed)))
        }
    }
}
