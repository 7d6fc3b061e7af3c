//! The second copy's writer thread, so both log copies are written and synced in parallel when
//! their devices cannot overlap writes in one thread (real files; emulated devices can, and the
//! flushing committer then writes both itself).
//!
//! Owns: [`Helper`], a one-slot hand-off (idle -> job -> done) to a dedicated thread that writes
//! and syncs copy B while the flush leader writes and syncs copy A. Invariant: at most one job is
//! in flight (the slot is bounded), and every submitted job is answered with its result.

use crate::io::{AlignedBuf, Device, IoError, IoOpKind};
use crate::util::sync::{CondvarExt, MutexExt};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// A copy-B write handed to the helper thread.
pub(crate) struct Job {
    pub(crate) dev: Arc<dyn Device>,
    pub(crate) offset: u64,
    pub(crate) buf: Arc<AlignedBuf>,
    /// Bytes of `buf` to write.
    pub(crate) len: usize,
}

enum HelperState {
    Idle,
    Job(Job),
    Done(std::result::Result<(), IoError>),
    Stop,
}

/// The second copy's writer: one job at a time, so the two copies are written in parallel.
pub(crate) struct Helper {
    state: Mutex<HelperState>,
    cv: Condvar,
}

impl Helper {
    fn lock(&self) -> MutexGuard<'_, HelperState> {
        self.state.locked()
    }

    pub(crate) fn run(&self) {
        loop {
            let job = {
                let mut st = self.lock();
                loop {
                    match std::mem::replace(&mut *st, HelperState::Idle) {
                        HelperState::Job(j) => break j,
                        HelperState::Stop => {
                            *st = HelperState::Stop;
                            return;
                        }
                        other => {
                            *st = other;
                            st = self.cv.wait_locked(st);
                        }
                    }
                }
            };
            // A panicking device must not leave the flush leader waiting forever.
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                job.dev.write_at(job.offset, &job.buf[..job.len]).and_then(|()| job.dev.sync())
            }))
            .unwrap_or_else(|_| {
                Err(IoError::os(
                    &job.dev.info().name,
                    IoOpKind::Write,
                    job.offset,
                    job.len,
                    std::io::Error::other("device panicked while writing the log's second copy"),
                ))
            });
            // The buffer's reference goes before the answer, so the leader can reuse it.
            drop(job);
            *self.lock() = HelperState::Done(r);
            self.cv.notify_all();
        }
    }

    pub(crate) fn submit(&self, job: Job) {
        let mut st = self.lock();
        assert!(matches!(*st, HelperState::Idle), "helper already busy");
        *st = HelperState::Job(job);
        self.cv.notify_all();
    }

    pub(crate) fn wait(&self) -> std::result::Result<(), IoError> {
        let mut st = self.lock();
        loop {
            match std::mem::replace(&mut *st, HelperState::Idle) {
                HelperState::Done(r) => return r,
                other => {
                    *st = other;
                    st = self.cv.wait_locked(st);
                }
            }
        }
    }

    pub(crate) fn stop(&self) {
        *self.lock() = HelperState::Stop;
        self.cv.notify_all();
    }
}

impl Helper {
    /// An idle helper (start its thread with [`Helper::run`]).
    pub(crate) fn new() -> Self {
        Helper { state: Mutex::new(HelperState::Idle), cv: Condvar::new() }
    }
}
