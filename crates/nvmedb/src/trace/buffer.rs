//! Per-thread bounded interval buffers and their registry.
//!
//! Owns: one `ThreadBuf` per thread that has recorded or been labelled, reachable from the
//! thread's thread-local slot and from the global registry (so `collect` can drain it).
//! Invariants: a buffer never holds more intervals than the capacity passed to `push`, and its
//! storage is reserved up front by `reset_all` / registration so a push does not reallocate;
//! the registry keeps a buffer only while its thread lives or until it is drained once after.

use super::stats::{Interval, ThreadTrace};
use super::TraceKind;
use crate::util::sync::MutexExt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// One thread's intervals. The mutex is uncontended except while `collect` drains it.
pub(super) struct ThreadBuf {
    index: u32,
    inner: Mutex<Inner>,
}

struct Inner {
    label: Option<String>,
    intervals: Vec<Interval>,
    dropped: u64,
}

impl ThreadBuf {
    pub(super) fn set_label(&self, label: String) {
        self.inner.locked().label = Some(label);
    }

    #[inline]
    pub(super) fn push(&self, kind: TraceKind, start_ns: u64, end_ns: u64, cap: usize) {
        let mut g = self.inner.locked();
        if g.intervals.len() < cap {
            g.intervals.push(Interval { kind, start_ns, end_ns });
        } else {
            g.dropped += 1;
        }
    }
}

static REGISTRY: Mutex<Vec<Arc<ThreadBuf>>> = Mutex::new(Vec::new());
static NEXT_INDEX: AtomicU32 = AtomicU32::new(0);

thread_local! {
    static LOCAL: Arc<ThreadBuf> = register();
}

fn register() -> Arc<ThreadBuf> {
    let cap = if super::is_enabled() { super::CAPACITY.load(Ordering::Relaxed) } else { 0 };
    let buf = Arc::new(ThreadBuf {
        index: NEXT_INDEX.fetch_add(1, Ordering::Relaxed),
        inner: Mutex::new(Inner { label: None, intervals: Vec::with_capacity(cap), dropped: 0 }),
    });
    REGISTRY.locked().push(Arc::clone(&buf));
    buf
}

/// Runs `f` on the calling thread's buffer, registering it on first use. Does nothing while
/// the thread is being torn down (its thread-local already destroyed).
#[inline]
pub(super) fn with_local(f: impl FnOnce(&ThreadBuf)) {
    let _ = LOCAL.try_with(|b| f(b));
}

/// Empties every buffer (dropped counts too), reserves `cap` intervals in each, and forgets
/// the buffers of exited threads.
pub(super) fn reset_all(cap: usize) {
    let mut reg = REGISTRY.locked();
    reg.retain(|b| Arc::strong_count(b) > 1);
    for b in reg.iter() {
        let mut g = b.inner.locked();
        g.intervals.clear();
        g.dropped = 0;
        let additional = cap.saturating_sub(g.intervals.capacity());
        g.intervals.reserve_exact(additional);
    }
}

/// Takes every buffer's intervals and dropped count (keeping the storage for reuse), then
/// forgets the buffers of exited threads. Threads with nothing recorded and nothing dropped
/// are left out.
pub(super) fn drain_all() -> Vec<ThreadTrace> {
    let mut reg = REGISTRY.locked();
    let mut out = Vec::with_capacity(reg.len());
    for b in reg.iter() {
        let mut g = b.inner.locked();
        if g.intervals.is_empty() && g.dropped == 0 {
            continue;
        }
        let intervals: Vec<Interval> = g.intervals.drain(..).collect();
        let label = g.label.clone().unwrap_or_else(|| format!("thread {}", b.index));
        out.push(ThreadTrace { thread_index: b.index, label, intervals, dropped: g.dropped });
        g.dropped = 0;
    }
    // Strong count 1 means only the registry holds it: the thread has exited.
    reg.retain(|b| Arc::strong_count(b) > 1);
    out
}
