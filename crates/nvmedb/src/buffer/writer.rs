//! The background writer.
//!
//! Owns: one thread per pool that keeps clean frames ahead of each clock hand, writing dirty
//! pages there in batches ([`BufferPool::clean_ahead`](super::pool::BufferPool)), and the
//! [`Signal`] through which evictions that pass over a dirty victim wake it.
//!
//! Invariants: it holds only a weak reference to the pool between rounds, so dropping the pool
//! stops it; closing the database stops it and waits for its round in progress, so no page is
//! written by it after the close returns; it never writes a pinned page; it writes a page only after the log is durable up
//! to the page's LSN (the pool's write path checks the WAL gate for the whole batch first).

use super::pool::BufferPool;
use super::BackgroundWriter;
use crate::util::sync::{CondvarExt, MutexExt};
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;

/// How an eviction wakes the writer: a flag (cheap to test and set on the eviction path) and a
/// condition variable the writer sleeps on.
pub(crate) struct Signal {
    pending: AtomicBool,
    stop: Mutex<bool>,
    wake: Condvar,
}

impl Signal {
    pub fn new() -> Self {
        Self { pending: AtomicBool::new(false), stop: Mutex::new(false), wake: Condvar::new() }
    }

    /// Asks for a round now; only the first request since the last round takes the lock.
    pub fn request(&self) {
        if !self.pending.swap(true, AcqRel) {
            let _g = self.stop.locked();
            self.wake.notify_one();
        }
    }
}

/// Handle to a running background writer.
pub(crate) struct WriterHandle {
    signal: Arc<Signal>,
    last_error: Arc<Mutex<Option<String>>>,
    thread: Option<JoinHandle<()>>,
}

impl WriterHandle {
    pub fn start(pool: Weak<BufferPool>, signal: Arc<Signal>, cfg: BackgroundWriter) -> Self {
        let last_error = Arc::new(Mutex::new(None));
        let (s, err) = (signal.clone(), last_error.clone());
        let thread = std::thread::Builder::new()
            .name("nvmedb-bgwriter".into())
            .spawn(move || loop {
                {
                    let mut stop = s.stop.locked();
                    if !s.pending.load(Acquire) && !*stop {
                        stop = s.wake.wait_timeout_locked(stop, cfg.interval).0;
                    }
                    if *stop {
                        return;
                    }
                }
                s.pending.store(false, Release);
                let Some(pool) = pool.upgrade() else { return };
                match pool.clean_ahead(&cfg) {
                    Ok(_) => {}
                    Err(e) => {
                        *err.locked() = Some(e.to_string());
                        // A failing device or log: do not spin on it; evictions write (and
                        // report) for themselves meanwhile.
                        drop(pool);
                        std::thread::sleep(cfg.interval);
                    }
                }
            })
            .ok();
        Self { signal, last_error, thread }
    }

    pub fn last_error(&self) -> Option<String> {
        self.last_error.locked().clone()
    }

    pub fn stop(mut self) {
        *self.signal.stop.locked() = true;
        self.signal.wake.notify_all();
        if let Some(t) = self.thread.take() {
            // The last pool reference may be dropped by the writer thread itself.
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}
