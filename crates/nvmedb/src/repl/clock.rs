//! Time, waiting and threads as the replication code sees them, behind one seam.
//!
//! Owns: the [`Clock`] trait (monotonic time, wall time, sleeping, starting threads) and its
//! real implementation [`SystemClock`]; the waiting primitives every thread of `repl/` blocks
//! in — [`Cond`] (a condition variable over a `std` mutex), [`Waker`] with
//! [`park_timeout`](Clock::park_timeout) (a thread parked until woken), [`Task`] (a started
//! thread that can be joined) and [`LongLock`] (a lock that may be held across waits) — and
//! [`Sched`], the interface a simulated clock gives them.
//!
//! With the system clock these are the `std` primitives. With a simulated clock (the
//! deterministic simulator's, `crate::sim`) every thread started through the clock is a task
//! of the simulation, at most one task runs at a time, and each of these primitives is a point
//! where the running task hands control back to the simulation, which decides, from its seed,
//! who runs next and when simulated time moves. So the code under test keeps its threads, and a
//! schedule still replays exactly.
//!
//! Invariants:
//! - A thread of `repl/` blocks only in these primitives (or in storage I/O and in the engine's
//!   own short critical sections): never in a `std` wait that another thread of `repl/` must end,
//!   and it holds no `std` lock across one of them, except a [`LongLock`] (whose waiters wait
//!   here). This is what makes the code runnable under the simulator.
//! - [`Clock::now`] never goes backwards for one clock.

use crate::util::sync::{CondvarExt, MutexExt};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// What a simulated clock's scheduler offers the waiting primitives (see the module
/// documentation). Tasks are numbered by the scheduler.
pub trait Sched: Send + Sync {
    /// The calling task's number (the caller must be a task of this scheduler).
    fn current(&self) -> u64;
    /// Blocks the calling task until [`Sched::unpark`] or `timeout` (simulated time); returns at
    /// once when an unpark came first (each task has one wake-up token, as `std::thread::park`).
    fn park(&self, timeout: Option<Duration>);
    /// Wakes `task` (or leaves it the token).
    fn unpark(&self, task: u64);
    /// Starts `f` as a new task; returns its number.
    fn spawn(&self, name: &str, f: Box<dyn FnOnce() + Send + 'static>) -> std::io::Result<u64>;
    /// Blocks the calling task until `task` has ended.
    fn join(&self, task: u64);
    /// True once `task` has ended.
    fn is_finished(&self, task: u64) -> bool;
}

/// Time and threads (see the module documentation).
pub trait Clock: Send + Sync + 'static {
    /// Monotonic time since the clock's origin.
    fn now(&self) -> Duration;
    /// Wall-clock time, nanoseconds since the Unix epoch (reports only; never used to decide).
    fn unix_ns(&self) -> u128;
    /// The simulation behind a simulated clock; `None` for real time and threads.
    fn sched(&self) -> Option<Arc<dyn Sched>>;
    /// Sleeps for `d`.
    fn sleep(&self, d: Duration) {
        match self.sched() {
            None => std::thread::sleep(d),
            Some(s) => {
                let until = self.now() + d;
                loop {
                    let now = self.now();
                    if now >= until {
                        return;
                    }
                    s.park(Some(until - now));
                }
            }
        }
    }
}

impl dyn Clock {
    /// Starts `f` on a thread (a task of the simulation under a simulated clock) named `name`.
    pub fn spawn<T: Send + 'static>(
        &self,
        name: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::io::Result<Task<T>> {
        let slot: Arc<Mutex<Option<T>>> = Arc::default();
        let s2 = slot.clone();
        let body = move || {
            let v = f();
            *s2.locked() = Some(v);
        };
        let inner = match self.sched() {
            None => TaskInner::Thread(std::thread::Builder::new().name(name.to_string()).spawn(body)?),
            Some(s) => {
                let id = s.spawn(name, Box::new(body))?;
                TaskInner::Sim(s, id)
            }
        };
        Ok(Task { inner: Some(inner), slot })
    }

    /// A handle that wakes the calling thread out of [`park_timeout`](Self::park_timeout).
    pub fn current_waker(&self) -> Waker {
        match self.sched() {
            None => Waker(WakerInner::Thread(std::thread::current())),
            Some(s) => {
                let id = s.current();
                Waker(WakerInner::Sim(s, id))
            }
        }
    }

    /// Parks the calling thread until its [`Waker`] wakes it or `timeout` passes (it may also
    /// return early: callers check their condition again).
    pub fn park_timeout(&self, timeout: Duration) {
        match self.sched() {
            None => std::thread::park_timeout(timeout),
            Some(s) => s.park(Some(timeout)),
        }
    }

    /// Parks the calling thread until its [`Waker`] wakes it (it may return early).
    pub fn park(&self) {
        match self.sched() {
            None => std::thread::park(),
            Some(s) => s.park(None),
        }
    }
}

/// Real time and `std` threads.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

/// The origin of every [`SystemClock`] (one per process, so two of them agree).
fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

impl SystemClock {
    /// The system clock as the shared handle the replication code takes.
    pub fn shared() -> Arc<dyn Clock> {
        static SHARED: OnceLock<Arc<dyn Clock>> = OnceLock::new();
        SHARED.get_or_init(|| Arc::new(SystemClock)).clone()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        origin().elapsed()
    }

    fn unix_ns(&self) -> u128 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
    }

    fn sched(&self) -> Option<Arc<dyn Sched>> {
        None
    }
}

enum WakerInner {
    Thread(std::thread::Thread),
    Sim(Arc<dyn Sched>, u64),
}

/// Wakes one parked thread (see [`Clock::park_timeout`]).
pub struct Waker(WakerInner);

impl Waker {
    /// Wakes the thread (or leaves it the token, so its next park returns at once).
    pub fn wake(&self) {
        match &self.0 {
            WakerInner::Thread(t) => t.unpark(),
            WakerInner::Sim(s, id) => s.unpark(*id),
        }
    }

    /// True when both wake the same thread.
    pub fn same(&self, other: &Waker) -> bool {
        match (&self.0, &other.0) {
            (WakerInner::Thread(a), WakerInner::Thread(b)) => a.id() == b.id(),
            (WakerInner::Sim(_, a), WakerInner::Sim(_, b)) => a == b,
            _ => false,
        }
    }
}

enum TaskInner {
    Thread(std::thread::JoinHandle<()>),
    Sim(Arc<dyn Sched>, u64),
}

/// A thread started through a [`Clock`]; its result is taken by [`Task::join`].
pub struct Task<T> {
    inner: Option<TaskInner>,
    slot: Arc<Mutex<Option<T>>>,
}

impl<T> Task<T> {
    /// Waits for the thread to end; its result, or `None` when it panicked.
    pub fn join(mut self) -> Option<T> {
        match self.inner.take() {
            Some(TaskInner::Thread(h)) => {
                let _ = h.join();
            }
            Some(TaskInner::Sim(s, id)) => s.join(id),
            None => {}
        }
        self.slot.locked().take()
    }

    /// True once the thread has ended.
    pub fn is_finished(&self) -> bool {
        match &self.inner {
            Some(TaskInner::Thread(h)) => h.is_finished(),
            Some(TaskInner::Sim(s, id)) => s.is_finished(*id),
            None => true,
        }
    }
}

/// A condition variable whose waits go through the clock (see the module documentation).
pub struct Cond {
    std: Condvar,
    sim: Option<SimWaiters>,
}

/// A simulated condition variable: the scheduler and the tasks waiting.
type SimWaiters = (Arc<dyn Sched>, Mutex<Vec<u64>>);

impl std::fmt::Debug for Cond {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.sim.is_some() { "Cond(simulated)" } else { "Cond" })
    }
}

impl Cond {
    /// A condition variable for threads of `clock`.
    pub fn new(clock: &dyn Clock) -> Self {
        Self { std: Condvar::new(), sim: clock.sched().map(|s| (s, Mutex::new(Vec::new()))) }
    }

    /// Releases `guard` (of `mutex`), waits for a notification or `timeout`, and locks `mutex`
    /// again. May return early (callers check their condition again).
    pub fn wait_timeout<'a, T>(
        &self,
        mutex: &'a Mutex<T>,
        guard: MutexGuard<'a, T>,
        timeout: Duration,
    ) -> MutexGuard<'a, T> {
        self.wait_inner(mutex, guard, Some(timeout))
    }

    /// Releases `guard` (of `mutex`), waits for a notification, and locks `mutex` again. May
    /// return early.
    pub fn wait<'a, T>(&self, mutex: &'a Mutex<T>, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.wait_inner(mutex, guard, None)
    }

    fn wait_inner<'a, T>(
        &self,
        mutex: &'a Mutex<T>,
        guard: MutexGuard<'a, T>,
        timeout: Option<Duration>,
    ) -> MutexGuard<'a, T> {
        match &self.sim {
            None => match timeout {
                Some(t) => self.std.wait_timeout_locked(guard, t).0,
                None => self.std.wait_locked(guard),
            },
            Some((s, waiters)) => {
                let me = s.current();
                waiters.locked().push(me);
                drop(guard);
                s.park(timeout);
                waiters.locked().retain(|&w| w != me);
                mutex.locked()
            }
        }
    }

    /// Wakes every waiter.
    pub fn notify_all(&self) {
        match &self.sim {
            None => self.std.notify_all(),
            Some((s, waiters)) => {
                let ws = std::mem::take(&mut *waiters.locked());
                for w in ws {
                    s.unpark(w);
                }
            }
        }
    }
}

/// A lock that may be held across waits (a whole log session, a promotion with its network
/// round trips): its waiters wait in a [`Cond`], so under the simulator a task waiting for it
/// lets the holder run. Not for short critical sections (use `std::sync::Mutex`).
pub struct LongLock<T> {
    slot: Mutex<Option<T>>,
    cv: Cond,
}

/// The holder's access to a [`LongLock`]'s value; dropping it releases the lock.
pub struct LongGuard<'a, T> {
    lock: &'a LongLock<T>,
    value: Option<T>,
}

impl<T> LongLock<T> {
    /// A lock holding `value`, waited for through `clock`.
    pub fn new(value: T, clock: &dyn Clock) -> Self {
        Self { slot: Mutex::new(Some(value)), cv: Cond::new(clock) }
    }

    /// Takes the lock, waiting while another thread holds it.
    pub fn lock(&self) -> LongGuard<'_, T> {
        let mut g = self.slot.locked();
        loop {
            if let Some(v) = g.take() {
                return LongGuard { lock: self, value: Some(v) };
            }
            g = self.cv.wait(&self.slot, g);
        }
    }
}

impl<T> std::ops::Deref for LongGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.value.as_ref().expect("held")
    }
}

impl<T> std::ops::DerefMut for LongGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.value.as_mut().expect("held")
    }
}

impl<T> Drop for LongGuard<'_, T> {
    fn drop(&mut self) {
        *self.lock.slot.locked() = self.value.take();
        self.lock.cv.notify_all();
    }
}

/// The conformance suite every [`Clock`] passes (the system's with threads, the simulator's
/// with its tasks): run it on a thread of `clock` (for a simulated clock: inside a task).
pub mod conformance {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    /// Runs every check; panics with the first failure.
    pub fn run(clock: &Arc<dyn Clock>) {
        time_moves_forward_by_at_least_the_sleep(clock);
        threads_run_and_are_joined_with_their_result(clock);
        a_wait_ends_at_its_timeout_or_at_a_notification(clock);
        a_wake_before_the_park_is_not_lost(clock);
        a_long_lock_excludes_across_waits(clock);
    }

    fn time_moves_forward_by_at_least_the_sleep(clock: &Arc<dyn Clock>) {
        let t0 = clock.now();
        clock.sleep(Duration::from_millis(20));
        let t1 = clock.now();
        assert!(t1 >= t0 + Duration::from_millis(20), "slept 20 ms: {t0:?} -> {t1:?}");
        assert!(clock.now() >= t1, "time went backwards");
        assert!(clock.unix_ns() > 0);
    }

    fn threads_run_and_are_joined_with_their_result(clock: &Arc<dyn Clock>) {
        let c2 = clock.clone();
        let t = clock
            .spawn("conformance", move || {
                c2.sleep(Duration::from_millis(5));
                42u32
            })
            .expect("spawn");
        assert_eq!(t.join(), Some(42));
    }

    fn a_wait_ends_at_its_timeout_or_at_a_notification(clock: &Arc<dyn Clock>) {
        let m = Arc::new(Mutex::new(false));
        let cv = Arc::new(Cond::new(clock.as_ref()));
        // Nobody notifies: the wait ends at its timeout (never much before it).
        let t0 = clock.now();
        let mut g = m.locked();
        while clock.now() < t0 + Duration::from_millis(30) {
            g = cv.wait_timeout(&m, g, Duration::from_millis(30));
        }
        drop(g);
        assert!(clock.now() >= t0 + Duration::from_millis(30));
        // A notification after the condition changed wakes the waiter, which sees it.
        let (m2, cv2, c2) = (m.clone(), cv.clone(), clock.clone());
        let t = clock
            .spawn("conformance-notify", move || {
                c2.sleep(Duration::from_millis(10));
                *m2.locked() = true;
                cv2.notify_all();
            })
            .expect("spawn");
        let t0 = clock.now();
        let mut g = m.locked();
        while !*g {
            assert!(clock.now() < t0 + Duration::from_secs(30), "the notification was lost");
            g = cv.wait_timeout(&m, g, Duration::from_secs(60));
        }
        drop(g);
        t.join();
    }

    fn a_wake_before_the_park_is_not_lost(clock: &Arc<dyn Clock>) {
        let waker = clock.current_waker();
        waker.wake();
        let t0 = clock.now();
        clock.park_timeout(Duration::from_secs(60));
        assert!(clock.now() < t0 + Duration::from_secs(30), "the early wake-up was lost");
        // A wake-up from another thread ends a park.
        let flag = Arc::new(AtomicBool::new(false));
        let (f2, c2) = (flag.clone(), clock.clone());
        let w = clock.current_waker();
        assert!(w.same(&clock.current_waker()));
        let t = clock
            .spawn("conformance-wake", move || {
                c2.sleep(Duration::from_millis(10));
                f2.store(true, Ordering::Release);
                w.wake();
            })
            .expect("spawn");
        let t0 = clock.now();
        while !flag.load(Ordering::Acquire) {
            assert!(clock.now() < t0 + Duration::from_secs(30), "the wake-up was lost");
            clock.park_timeout(Duration::from_secs(60));
        }
        t.join();
    }

    fn a_long_lock_excludes_across_waits(clock: &Arc<dyn Clock>) {
        let l = Arc::new(LongLock::new(0u64, clock.as_ref()));
        let inside = Arc::new(AtomicU64::new(0));
        let tasks: Vec<_> = (0..3)
            .map(|_| {
                let (l, inside, c) = (l.clone(), inside.clone(), clock.clone());
                clock
                    .spawn("conformance-lock", move || {
                        for _ in 0..5 {
                            let mut g = l.lock();
                            assert_eq!(inside.fetch_add(1, Ordering::AcqRel), 0, "two holders");
                            // Held across a wait: the others wait for it.
                            c.sleep(Duration::from_millis(2));
                            *g += 1;
                            inside.fetch_sub(1, Ordering::AcqRel);
                        }
                    })
                    .expect("spawn")
            })
            .collect();
        for t in tasks {
            t.join().expect("no holder panicked");
        }
        assert_eq!(*l.lock(), 15);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_lock_passes_its_value_between_threads() {
        let clock = SystemClock::shared();
        let l = Arc::new(LongLock::new(0u64, clock.as_ref()));
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let l = l.clone();
                clock
                    .spawn("t", move || {
                        for _ in 0..1000 {
                            *l.lock() += 1;
                        }
                    })
                    .unwrap()
            })
            .collect();
        for t in tasks {
            t.join().unwrap();
        }
        assert_eq!(*l.lock(), 4000);
    }
}
