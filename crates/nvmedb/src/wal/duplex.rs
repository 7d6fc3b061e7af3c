//! The second copy's writer thread, so both log copies are written and synced in parallel when
//! their devices cannot overlap writes in one thread (real files; emulated devices can, and the
//! flushing committer then writes both itself).
//!
//! Owns: [`Helper`], a one-slot hand-off (idle -> job -> done) to a dedicated thread that writes
//! and syncs copy B while the flush leader writes and syncs copy A. Invariants: at most one job
//! is in flight (the slot is bounded), and every submitted job is answered with its result; the
//! condition variable is signalled only while a thread sleeps on it (each signal is a system
//! call), and the leader polls for the answer for up to [`ANSWER_SPIN`] before it sleeps (the
//! helper's copy usually completes within microseconds of the leader's own).

use crate::io::{AlignedBuf, Device, IoError, IoOpKind};
use crate::util::sync::{CondvarExt, MutexExt};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long the flush leader polls for copy B's answer before it sleeps: about one write and
/// sync of a microsecond device, so a leader whose own copy finished first does not pay two
/// context switches for the last few microseconds of the other.
const ANSWER_SPIN: Duration = Duration::from_micros(20);

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

/// The hand-off slot and the threads asleep on its condition variable.
struct Slot {
    state: HelperState,
    /// Threads waiting on `Helper::cv` (counted in under the lock before they wait).
    sleepers: usize,
}

/// The second copy's writer: one job at a time, so the two copies are written in parallel.
pub(crate) struct Helper {
    slot: Mutex<Slot>,
    cv: Condvar,
    /// Set when an answer is in the slot (the leader polls it before taking the lock).
    answered: AtomicBool,
}

impl Helper {
    fn lock(&self) -> MutexGuard<'_, Slot> {
        self.slot.locked()
    }

    /// Sleeps on the condition variable, counted as a sleeper meanwhile.
    fn sleep<'a>(&'a self, mut st: MutexGuard<'a, Slot>) -> MutexGuard<'a, Slot> {
        st.sleepers += 1;
        let mut st = self.cv.wait_locked(st);
        st.sleepers -= 1;
        st
    }

    /// Wakes the sleepers, if any (the caller holds the lock).
    fn wake(&self, st: &Slot) {
        if st.sleepers > 0 {
            self.cv.notify_all();
        }
    }

    pub(crate) fn run(&self) {
        loop {
            let job = {
                let mut st = self.lock();
                loop {
                    match std::mem::replace(&mut st.state, HelperState::Idle) {
                        HelperState::Job(j) => break j,
                        HelperState::Stop => {
                            st.state = HelperState::Stop;
                            return;
                        }
                        other => {
                            st.state = other;
                            st = self.sleep(st);
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
            let mut st = self.lock();
            st.state = HelperState::Done(r);
            self.answered.store(true, Ordering::Release);
            self.wake(&st);
        }
    }

    pub(crate) fn submit(&self, job: Job) {
        let mut st = self.lock();
        assert!(matches!(st.state, HelperState::Idle), "helper already busy");
        st.state = HelperState::Job(job);
        self.wake(&st);
    }

    pub(crate) fn wait(&self) -> std::result::Result<(), IoError> {
        let until = Instant::now() + ANSWER_SPIN;
        while !self.answered.load(Ordering::Acquire) && Instant::now() < until {
            std::hint::spin_loop();
        }
        let mut st = self.lock();
        loop {
            match std::mem::replace(&mut st.state, HelperState::Idle) {
                HelperState::Done(r) => {
                    self.answered.store(false, Ordering::Release);
                    return r;
                }
                other => {
                    st.state = other;
                    st = self.sleep(st);
                }
            }
        }
    }

    pub(crate) fn stop(&self) {
        let mut st = self.lock();
        st.state = HelperState::Stop;
        self.wake(&st);
    }
}

impl Helper {
    /// An idle helper (start its thread with [`Helper::run`]).
    pub(crate) fn new() -> Self {
        Helper {
            slot: Mutex::new(Slot { state: HelperState::Idle, sleepers: 0 }),
            cv: Condvar::new(),
            answered: AtomicBool::new(false),
        }
    }
}
