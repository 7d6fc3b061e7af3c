//! The background ("deferred") writer.
//!
//! Owns: one thread per pool that periodically writes dirty pages ahead of the clock hand so
//! evictions find clean victims. Invariant: it holds only a weak reference to the pool between
//! sweeps, so dropping the pool stops it; it never writes a pinned page.

use super::pool::BufferPool;
use super::BackgroundWriter;
use crate::util::sync::{CondvarExt, MutexExt};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;

struct Shared {
    stop: Mutex<bool>,
    wake: Condvar,
    last_error: Mutex<Option<String>>,
}

/// Handle to a running background writer.
pub(crate) struct WriterHandle {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl WriterHandle {
    pub fn start(pool: Weak<BufferPool>, cfg: BackgroundWriter) -> Self {
        let shared =
            Arc::new(Shared { stop: Mutex::new(false), wake: Condvar::new(), last_error: Mutex::new(None) });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("nvmedb-bgwriter".into())
            .spawn(move || loop {
                {
                    let stop = s.stop.locked();
                    let (stop, _) = s.wake.wait_timeout_locked(stop, cfg.interval);
                    if *stop {
                        return;
                    }
                }
                let Some(pool) = pool.upgrade() else { return };
                if let Err(e) = pool.background_sweep(cfg.frames_per_sweep) {
                    *s.last_error.locked() = Some(e.to_string());
                }
            })
            .ok();
        Self { shared, thread }
    }

    pub fn last_error(&self) -> Option<String> {
        self.shared.last_error.locked().clone()
    }

    pub fn stop(mut self) {
        *self.shared.stop.locked() = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            // The last pool reference may be dropped by the writer thread itself.
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}
