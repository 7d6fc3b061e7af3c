//! The acknowledgement gate: whether a primary may acknowledge commits now (its HA agent keeps
//! it open while the leadership lease is renewed).
//!
//! Owns: [`AckGate`].
//!
//! Invariants: the deadline only moves forward (`open_until` takes the maximum) until `close`
//! resets it; the gate is open only strictly before its deadline on its own clock.

use super::super::clock::{Clock, SystemClock};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Whether a primary may acknowledge commits: open until a deadline that its HA agent extends
/// after each renewal of its leadership lease (renewal sent at t, lease TTL T: open until
/// t + T - margin, so acknowledgements stop before the lease can expire in the store).
pub struct AckGate {
    clock: Arc<dyn Clock>,
    /// The time on `clock` (ns) until which acknowledgements are allowed (0: closed).
    until_ns: AtomicU64,
}

impl std::fmt::Debug for AckGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AckGate(open until {} ns)", self.until_ns.load(Ordering::Acquire))
    }
}

impl AckGate {
    /// A closed gate on the system clock.
    pub fn closed() -> Arc<Self> {
        Self::closed_on(SystemClock::shared())
    }

    /// A closed gate on `clock` (the HA agent's).
    pub fn closed_on(clock: Arc<dyn Clock>) -> Arc<Self> {
        Arc::new(Self { clock, until_ns: AtomicU64::new(0) })
    }

    /// Allows acknowledgements until `deadline`, a time on the gate's clock
    /// ([`Clock::now`]); never moves the deadline back.
    pub fn open_until(&self, deadline: Duration) {
        self.until_ns.fetch_max(deadline.as_nanos() as u64, Ordering::AcqRel);
    }

    /// Stops acknowledgements now.
    pub fn close(&self) {
        self.until_ns.store(0, Ordering::Release);
    }

    /// True while acknowledgements are allowed.
    pub fn is_open(&self) -> bool {
        (self.clock.now().as_nanos() as u64) < self.until_ns.load(Ordering::Acquire)
    }

    /// The clock the gate's deadlines are on.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }
}
