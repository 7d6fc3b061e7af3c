//! Lock acquisition that outlives a panicking holder.
//!
//! Owns: [`MutexExt`], [`RwLockExt`] and [`CondvarExt`], the engine's one way to take a
//! `std::sync` lock or wait on a condition variable. Invariant: a lock poisoned by a thread that
//! panicked while holding it is taken anyway. Every structure the engine guards this way is
//! either left consistent at each step (counters, queues, maps updated by one call) or guarded
//! by its own recovery (a mini-transaction restores its pages from before-images when it
//! unwinds), so one failed thread does not take the whole database down with it.

use std::sync::{Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard, WaitTimeoutResult};
use std::time::Duration;

/// [`Mutex::lock`] ignoring poison.
pub trait MutexExt<T: ?Sized> {
    /// Locks the mutex, whether or not an earlier holder panicked.
    fn locked(&self) -> MutexGuard<'_, T>;
    /// The guarded value of a mutex no one else can reach, whether or not a holder panicked.
    fn into_value(self) -> T
    where
        Self: Sized,
        T: Sized;
    /// The guarded value through an exclusive reference, whether or not a holder panicked.
    fn value_mut(&mut self) -> &mut T;
}

impl<T: ?Sized> MutexExt<T> for Mutex<T> {
    #[inline]
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[inline]
    fn into_value(self) -> T
    where
        T: Sized,
    {
        self.into_inner().unwrap_or_else(|e| e.into_inner())
    }

    #[inline]
    fn value_mut(&mut self) -> &mut T {
        self.get_mut().unwrap_or_else(|e| e.into_inner())
    }
}

/// [`RwLock::read`] and [`RwLock::write`] ignoring poison.
pub trait RwLockExt<T: ?Sized> {
    /// Takes the lock shared, whether or not an earlier holder panicked.
    fn read_locked(&self) -> RwLockReadGuard<'_, T>;
    /// Takes the lock exclusively, whether or not an earlier holder panicked.
    fn write_locked(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> RwLockExt<T> for RwLock<T> {
    #[inline]
    fn read_locked(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(|e| e.into_inner())
    }

    #[inline]
    fn write_locked(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// [`Condvar::wait`] and [`Condvar::wait_timeout`] ignoring poison.
pub trait CondvarExt {
    /// Waits for a notification, whether or not a holder of the mutex panicked meanwhile.
    fn wait_locked<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T>;
    /// Waits for a notification or `timeout`, whether or not a holder of the mutex panicked.
    fn wait_timeout_locked<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        timeout: Duration,
    ) -> (MutexGuard<'a, T>, WaitTimeoutResult);
}

impl CondvarExt for Condvar {
    #[inline]
    fn wait_locked<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.wait(guard).unwrap_or_else(|e| e.into_inner())
    }

    #[inline]
    fn wait_timeout_locked<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        timeout: Duration,
    ) -> (MutexGuard<'a, T>, WaitTimeoutResult) {
        self.wait_timeout(guard, timeout).unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_poisoned_lock_is_still_taken() {
        let m = Arc::new(Mutex::new(1));
        let rw = Arc::new(RwLock::new(2));
        let (m2, rw2) = (m.clone(), rw.clone());
        let r = std::thread::spawn(move || {
            let _a = m2.lock().unwrap();
            let _b = rw2.write().unwrap();
            panic!("poison both");
        })
        .join();
        assert!(r.is_err());
        assert!(m.is_poisoned() && rw.is_poisoned());
        *m.locked() += 1;
        assert_eq!(*m.locked(), 2);
        *rw.write_locked() += 1;
        assert_eq!(*rw.read_locked(), 3);
        let cv = Condvar::new();
        let (g, t) = cv.wait_timeout_locked(m.locked(), Duration::from_millis(1));
        assert!(t.timed_out());
        assert_eq!(*g, 2);
        drop(g);
        let mut m = Arc::into_inner(m).expect("the thread has ended");
        *m.value_mut() += 1;
        assert_eq!(m.into_value(), 3);
    }
}
