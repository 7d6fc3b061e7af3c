//! Low-overhead interval tracer: what each thread ("client") spent its time on during a short
//! window, for trace charts like seed 000 Figs. 8/10 and seed 001 Figs. 7/8.
//!
//! Owns: the process-wide enable flag, the trace epoch, the registry of per-thread buffers, and
//! the `span` / `record` / `collect` API. Invariants:
//! - When tracing is off, [`span`] and [`record`] cost one relaxed atomic load and record
//!   nothing.
//! - Every thread buffer is bounded: it holds at most the configured capacity of intervals;
//!   intervals that do not fit are counted as dropped, never stored (no unbounded growth).
//! - Collected times are nanoseconds since the trace epoch (the last [`start`]), from the
//!   monotonic clock; an interval never ends before it starts.
//! - A thread's buffer outlives the thread until the next [`collect`] or [`start`], so the
//!   intervals of a client that has already exited are still collected.
//!
//! Usage:
//! ```
//! use nvmedb::trace::{self, TraceConfig, TraceKind};
//! trace::start(TraceConfig::default());
//! trace::set_thread_label("client 0");
//! {
//!     let _s = trace::span(TraceKind::DataRead);
//!     // ... read a page ...
//! }
//! trace::stop();
//! let t = trace::collect();
//! assert_eq!(t.threads.iter().map(|th| th.intervals.len()).sum::<usize>(), 1);
//! ```

mod buffer;
mod stats;

pub use stats::{Interval, KindStats, KindTotals, ThreadTrace, Trace};

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// What a thread was doing during an interval. Extensible: new kinds are appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum TraceKind {
    /// Engine CPU work (between I/Os and waits).
    Cpu,
    /// Reading a data page from the device (buffer miss).
    DataRead,
    /// Writing a dirty data page back to the device.
    DataWrite,
    /// Writing the log (the log writer's own I/O).
    LogWrite,
    /// Waiting for the log to become durable (group commit).
    LogWait,
    /// Waiting for a lock or latch.
    LockWait,
}

impl TraceKind {
    /// Number of kinds.
    pub const COUNT: usize = 6;
    /// Every kind, in index order.
    pub const ALL: [TraceKind; TraceKind::COUNT] = [
        TraceKind::Cpu,
        TraceKind::DataRead,
        TraceKind::DataWrite,
        TraceKind::LogWrite,
        TraceKind::LogWait,
        TraceKind::LockWait,
    ];

    /// Dense index in `0..COUNT`.
    pub const fn index(self) -> usize {
        match self {
            TraceKind::Cpu => 0,
            TraceKind::DataRead => 1,
            TraceKind::DataWrite => 2,
            TraceKind::LogWrite => 3,
            TraceKind::LogWait => 4,
            TraceKind::LockWait => 5,
        }
    }

    /// Short stable name, used in CSV files and legends.
    pub const fn name(self) -> &'static str {
        match self {
            TraceKind::Cpu => "cpu",
            TraceKind::DataRead => "data_read",
            TraceKind::DataWrite => "data_write",
            TraceKind::LogWrite => "log_write",
            TraceKind::LogWait => "log_wait",
            TraceKind::LockWait => "lock_wait",
        }
    }

    /// Human label for legends.
    pub const fn label(self) -> &'static str {
        match self {
            TraceKind::Cpu => "CPU (engine)",
            TraceKind::DataRead => "read I/O (data)",
            TraceKind::DataWrite => "write I/O (dirty write-back)",
            TraceKind::LogWrite => "log write I/O",
            TraceKind::LogWait => "waiting for log",
            TraceKind::LockWait => "lock wait",
        }
    }

    /// The kind named `name` (as returned by [`TraceKind::name`]).
    pub fn from_name(name: &str) -> Option<TraceKind> {
        TraceKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Rank when intervals of one thread overlap (a read inside a CPU span): the higher rank
    /// owns the overlapped time in exclusive accounting and is drawn on top.
    pub const fn priority(self) -> u8 {
        match self {
            TraceKind::Cpu => 0,
            TraceKind::LogWrite => 1,
            TraceKind::DataWrite => 2,
            TraceKind::DataRead => 3,
            TraceKind::LogWait => 4,
            TraceKind::LockWait => 5,
        }
    }
}

/// Settings of one tracing window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceConfig {
    /// Intervals each thread can hold before further ones are dropped (and counted).
    pub capacity_per_thread: usize,
}

impl Default for TraceConfig {
    fn default() -> Self {
        Self { capacity_per_thread: 1 << 16 }
    }
}

static ENABLED: AtomicBool = AtomicBool::new(false);
/// Trace epoch as nanoseconds since [`clock_base`].
static EPOCH_NS: AtomicU64 = AtomicU64::new(0);
static CAPACITY: AtomicUsize = AtomicUsize::new(1 << 16);

/// The process-wide origin of the monotonic clock all raw timestamps are measured from.
fn clock_base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// Nanoseconds from the clock base to `t` (0 if `t` is earlier).
fn raw_ns(t: Instant) -> u64 {
    let d = t.saturating_duration_since(clock_base());
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Whether tracing is on. One relaxed load.
#[inline]
pub fn is_enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Starts a tracing window: discards whatever the buffers held, sets the trace epoch to now,
/// sizes every buffer to `config.capacity_per_thread`, and turns tracing on.
pub fn start(config: TraceConfig) {
    let _ = clock_base();
    ENABLED.store(false, Ordering::SeqCst);
    CAPACITY.store(config.capacity_per_thread, Ordering::SeqCst);
    buffer::reset_all(config.capacity_per_thread);
    EPOCH_NS.store(raw_ns(Instant::now()), Ordering::SeqCst);
    ENABLED.store(true, Ordering::SeqCst);
}

/// Turns tracing off. Recorded intervals stay in the buffers until [`collect`] or [`start`].
pub fn stop() {
    ENABLED.store(false, Ordering::SeqCst);
}

/// Names the calling thread in collected traces (e.g. `"client 3"`). Works whether or not
/// tracing is on; the label persists across windows for the life of the thread.
pub fn set_thread_label(label: impl Into<String>) {
    buffer::with_local(|b| b.set_label(label.into()));
}

/// Records that the calling thread did `kind` from `start` to `end`. Nothing happens when
/// tracing is off. An `end` before `start` is recorded as an empty interval at `start`.
#[inline]
pub fn record(kind: TraceKind, start: Instant, end: Instant) {
    if !is_enabled() {
        return;
    }
    record_raw(kind, raw_ns(start), raw_ns(end));
}

#[inline(never)]
fn record_raw(kind: TraceKind, start_ns: u64, end_ns: u64) {
    let cap = CAPACITY.load(Ordering::Relaxed);
    buffer::with_local(|b| b.push(kind, start_ns, end_ns.max(start_ns), cap));
}

/// A scope guard that records one interval of its kind from its creation to its drop.
#[must_use = "a span records when dropped; bind it with `let _s = ...`"]
#[derive(Debug)]
pub struct Span {
    kind: TraceKind,
    start: Option<Instant>,
}

impl Span {
    /// Ends the span now (same as dropping it).
    pub fn end(self) {}
}

impl Drop for Span {
    #[inline]
    fn drop(&mut self) {
        if let Some(start) = self.start {
            record(self.kind, start, Instant::now());
        }
    }
}

/// Opens a span of `kind` on the calling thread; it records when dropped. When tracing is off
/// this is one relaxed load and the guard does nothing.
#[inline]
pub fn span(kind: TraceKind) -> Span {
    let start = if is_enabled() { Some(Instant::now()) } else { None };
    Span { kind, start }
}

/// Drains every thread's buffer into a [`Trace`] whose times are relative to the trace epoch.
/// Intervals that ended before the epoch are discarded; one that began before it is clipped.
/// Tracing stays on or off as it was. Buffers of threads that have exited are released.
pub fn collect() -> Trace {
    let epoch = EPOCH_NS.load(Ordering::SeqCst);
    let mut threads = buffer::drain_all();
    // Read the clock after draining, so every collected interval ends within the duration.
    let now = raw_ns(Instant::now());
    for t in &mut threads {
        t.intervals.retain(|iv| iv.end_ns >= epoch);
        for iv in &mut t.intervals {
            iv.start_ns = iv.start_ns.max(epoch) - epoch;
            iv.end_ns -= epoch;
        }
        t.intervals.sort_by_key(|iv| (iv.start_ns, iv.end_ns));
    }
    threads.sort_by_key(|t| t.thread_index);
    Trace { duration_ns: now.saturating_sub(epoch), threads }
}
