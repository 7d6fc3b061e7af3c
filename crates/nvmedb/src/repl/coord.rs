//! The coordination store an HA agent decides through (etcd in production), behind one trait.
//!
//! Owns: [`CoordStore`] — leases with a time to live, keys that can be bound to a lease (they
//! vanish when it expires), and the two conditional writes leader election needs (create a key
//! only if absent; replace a key only at the revision it was read at) — and [`MemStore`], the
//! in-memory simulated implementation on an injected [`Clock`] (a [`SimClock`] that tests move
//! by hand, or the deterministic simulator's clock), with partitions (a client cut off from the
//! store) for tests. [`conformance`] is the one test suite every implementation passes.
//!
//! Invariants (of every implementation):
//! - A lease granted with TTL t and last renewed at time r expires at r + t; from then on its
//!   keys are gone and renewing it fails with [`CoordError::LeaseExpired`].
//! - Revisions increase with every write to the store; `create` succeeds for one caller only;
//!   `replace` succeeds only if the key still has the revision the caller read.

use super::clock::{Clock, Sched};
use crate::util::sync::MutexExt;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A lease's identifier.
pub type LeaseId = u64;

/// What a coordination store can fail with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoordError {
    /// The store cannot be reached (network, no quorum).
    Unavailable(String),
    /// The lease expired or was revoked.
    LeaseExpired(LeaseId),
}

impl std::fmt::Display for CoordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CoordError::Unavailable(d) => write!(f, "coordination store unavailable: {d}"),
            CoordError::LeaseExpired(l) => write!(f, "lease {l:#x} expired"),
        }
    }
}

impl std::error::Error for CoordError {}

/// A value and the revision of its last write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    /// The bytes.
    pub value: Vec<u8>,
    /// Revision of the write that stored them.
    pub revision: u64,
    /// The lease the key is bound to, if any.
    pub lease: Option<LeaseId>,
}

/// A coordination store (see the module documentation).
pub trait CoordStore: Send + Sync {
    /// Grants a lease of `ttl`.
    fn grant(&self, ttl: Duration) -> Result<LeaseId, CoordError>;
    /// Renews a lease for its full TTL.
    fn keep_alive(&self, lease: LeaseId) -> Result<(), CoordError>;
    /// Revokes a lease (its keys vanish).
    fn revoke(&self, lease: LeaseId) -> Result<(), CoordError>;
    /// The value of `key`.
    fn get(&self, key: &str) -> Result<Option<Versioned>, CoordError>;
    /// Every key under `prefix`, in key order.
    fn list(&self, prefix: &str) -> Result<Vec<(String, Versioned)>, CoordError>;
    /// Stores `value` unconditionally; returns the new revision.
    fn put(&self, key: &str, value: &[u8], lease: Option<LeaseId>) -> Result<u64, CoordError>;
    /// Stores `value` only if `key` is absent; returns the new revision, or `None` if it was
    /// there.
    fn create(&self, key: &str, value: &[u8], lease: Option<LeaseId>) -> Result<Option<u64>, CoordError>;
    /// Stores `value` only if `key` is at `revision`; returns the new revision, or `None`.
    fn replace(
        &self,
        key: &str,
        revision: u64,
        value: &[u8],
        lease: Option<LeaseId>,
    ) -> Result<Option<u64>, CoordError>;
    /// Deletes `key` only if it is at `revision`; returns whether it did.
    fn delete_at(&self, key: &str, revision: u64) -> Result<bool, CoordError>;
}

/// A clock tests move by hand (nanoseconds since an arbitrary start): time moves only by
/// [`SimClock::advance`] (and by [`Clock::sleep`], which advances it instead of waiting).
/// Threads and waits are real ones.
#[derive(Debug, Default)]
pub struct SimClock(AtomicU64);

impl SimClock {
    /// Moves time forward.
    pub fn advance(&self, d: Duration) {
        self.0.fetch_add(d.as_nanos() as u64, Ordering::AcqRel);
    }
}

impl Clock for SimClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.0.load(Ordering::Acquire))
    }

    fn unix_ns(&self) -> u128 {
        self.now().as_nanos()
    }

    fn sched(&self) -> Option<Arc<dyn Sched>> {
        None
    }

    fn sleep(&self, d: Duration) {
        self.advance(d);
    }
}

#[derive(Default)]
struct MemState {
    revision: u64,
    next_lease: u64,
    /// Lease → (TTL, expiry).
    leases: BTreeMap<LeaseId, (Duration, Duration)>,
    keys: BTreeMap<String, Versioned>,
}

impl MemState {
    /// Drops expired leases and their keys.
    fn expire(&mut self, now: Duration) {
        let dead: Vec<LeaseId> =
            self.leases.iter().filter(|(_, (_, at))| *at <= now).map(|(l, _)| *l).collect();
        for l in dead {
            self.leases.remove(&l);
            self.keys.retain(|_, v| v.lease != Some(l));
        }
    }

    fn store(&mut self, key: &str, value: &[u8], lease: Option<LeaseId>) -> Result<u64, CoordError> {
        if let Some(l) = lease {
            if !self.leases.contains_key(&l) {
                return Err(CoordError::LeaseExpired(l));
            }
        }
        self.revision += 1;
        self.keys
            .insert(key.to_string(), Versioned { value: value.to_vec(), revision: self.revision, lease });
        Ok(self.revision)
    }
}

/// The in-memory simulated store: one shared state, any number of clients, one injected clock;
/// a client can be cut off ([`MemStore::partition`]) to model a node that cannot reach etcd.
#[derive(Clone)]
pub struct MemStore {
    state: Arc<Mutex<MemState>>,
    clock: Arc<dyn Clock>,
    cut: Arc<std::sync::atomic::AtomicBool>,
}

impl MemStore {
    /// A new, empty store on `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self { state: Arc::default(), clock, cut: Arc::default() }
    }

    /// Another client of the same store (with its own partition switch).
    pub fn client(&self) -> Self {
        Self { state: self.state.clone(), clock: self.clock.clone(), cut: Arc::default() }
    }

    /// Cuts this client off the store (`true`) or reconnects it.
    pub fn partition(&self, cut: bool) {
        self.cut.store(cut, Ordering::Release);
    }

    fn with<R>(
        &self,
        f: impl FnOnce(&mut MemState, Duration) -> Result<R, CoordError>,
    ) -> Result<R, CoordError> {
        if self.cut.load(Ordering::Acquire) {
            return Err(CoordError::Unavailable("partitioned from the simulated store".into()));
        }
        let now = self.clock.now();
        let mut st = self.state.locked();
        st.expire(now);
        f(&mut st, now)
    }
}

impl CoordStore for MemStore {
    fn grant(&self, ttl: Duration) -> Result<LeaseId, CoordError> {
        self.with(|st, now| {
            st.next_lease += 1;
            let id = st.next_lease;
            st.leases.insert(id, (ttl, now + ttl));
            Ok(id)
        })
    }

    fn keep_alive(&self, lease: LeaseId) -> Result<(), CoordError> {
        self.with(|st, now| match st.leases.get_mut(&lease) {
            Some((ttl, at)) => {
                *at = now + *ttl;
                Ok(())
            }
            None => Err(CoordError::LeaseExpired(lease)),
        })
    }

    fn revoke(&self, lease: LeaseId) -> Result<(), CoordError> {
        self.with(|st, _| {
            st.leases.remove(&lease);
            st.keys.retain(|_, v| v.lease != Some(lease));
            Ok(())
        })
    }

    fn get(&self, key: &str) -> Result<Option<Versioned>, CoordError> {
        self.with(|st, _| Ok(st.keys.get(key).cloned()))
    }

    fn list(&self, prefix: &str) -> Result<Vec<(String, Versioned)>, CoordError> {
        self.with(|st, _| {
            Ok(st
                .keys
                .range(prefix.to_string()..)
                .take_while(|(k, _)| k.starts_with(prefix))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect())
        })
    }

    fn put(&self, key: &str, value: &[u8], lease: Option<LeaseId>) -> Result<u64, CoordError> {
        self.with(|st, _| st.store(key, value, lease))
    }

    fn create(&self, key: &str, value: &[u8], lease: Option<LeaseId>) -> Result<Option<u64>, CoordError> {
        self.with(
            |st, _| if st.keys.contains_key(key) { Ok(None) } else { st.store(key, value, lease).map(Some) },
        )
    }

    fn replace(
        &self,
        key: &str,
        revision: u64,
        value: &[u8],
        lease: Option<LeaseId>,
    ) -> Result<Option<u64>, CoordError> {
        self.with(|st, _| match st.keys.get(key) {
            Some(v) if v.revision == revision => st.store(key, value, lease).map(Some),
            _ => Ok(None),
        })
    }

    fn delete_at(&self, key: &str, revision: u64) -> Result<bool, CoordError> {
        self.with(|st, _| match st.keys.get(key) {
            Some(v) if v.revision == revision => {
                st.keys.remove(key);
                st.revision += 1;
                Ok(true)
            }
            _ => Ok(false),
        })
    }
}

/// The conformance suite every [`CoordStore`] passes: `clients` gives two clients of one
/// store, `sleep` lets time pass (the simulated clock, or real time for a real store).
pub mod conformance {
    use super::*;

    /// Runs every check; panics with the first failure.
    pub fn run(a: &dyn CoordStore, b: &dyn CoordStore, prefix: &str, sleep: &dyn Fn(Duration)) {
        create_is_exclusive_and_replace_checks_the_revision(a, b, prefix);
        keys_vanish_with_their_lease(a, b, prefix, sleep);
    }

    fn create_is_exclusive_and_replace_checks_the_revision(a: &dyn CoordStore, b: &dyn CoordStore, p: &str) {
        let k = format!("{p}/leader");
        let r1 = a.create(&k, b"a", None).unwrap().expect("first create wins");
        assert_eq!(b.create(&k, b"b", None).unwrap(), None, "a second create must lose");
        let got = b.get(&k).unwrap().unwrap();
        assert_eq!((got.value.as_slice(), got.revision), (&b"a"[..], r1));
        let r2 = b.replace(&k, r1, b"b", None).unwrap().expect("replace at the read revision");
        assert!(r2 > r1);
        assert_eq!(a.replace(&k, r1, b"c", None).unwrap(), None, "a stale revision must lose");
        assert!(!a.delete_at(&k, r1).unwrap());
        assert!(a.delete_at(&k, r2).unwrap());
        assert_eq!(b.get(&k).unwrap(), None);
        a.put(&format!("{p}/m/1"), b"x", None).unwrap();
        a.put(&format!("{p}/m/2"), b"y", None).unwrap();
        a.put(&format!("{p}/n"), b"z", None).unwrap();
        let l: Vec<String> = b.list(&format!("{p}/m/")).unwrap().into_iter().map(|(k, _)| k).collect();
        assert_eq!(l, vec![format!("{p}/m/1"), format!("{p}/m/2")]);
    }

    fn keys_vanish_with_their_lease(
        a: &dyn CoordStore,
        b: &dyn CoordStore,
        p: &str,
        sleep: &dyn Fn(Duration),
    ) {
        let ttl = Duration::from_secs(2);
        let k = format!("{p}/leased");
        let l = a.grant(ttl).unwrap();
        a.create(&k, b"me", Some(l)).unwrap().expect("created");
        sleep(ttl / 2);
        a.keep_alive(l).unwrap();
        sleep(ttl * 3 / 4);
        assert!(b.get(&k).unwrap().is_some(), "renewed: still there");
        sleep(ttl * 2);
        assert_eq!(b.get(&k).unwrap(), None, "expired: gone");
        assert_eq!(a.keep_alive(l), Err(CoordError::LeaseExpired(l)));
        assert!(b.create(&k, b"other", None).unwrap().is_some(), "someone else may take it now");
        let l2 = a.grant(ttl).unwrap();
        a.put(&format!("{p}/leased2"), b"x", Some(l2)).unwrap();
        a.revoke(l2).unwrap();
        assert_eq!(b.get(&format!("{p}/leased2")).unwrap(), None, "revoked: gone");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_simulated_store_passes_the_conformance_suite() {
        let clock = Arc::new(SimClock::default());
        let a = MemStore::new(clock.clone());
        let b = a.client();
        conformance::run(&a, &b, "/t", &|d| clock.advance(d));
    }

    #[test]
    fn a_partitioned_client_cannot_renew() {
        let clock = Arc::new(SimClock::default());
        let a = MemStore::new(clock.clone());
        let l = a.grant(Duration::from_secs(1)).unwrap();
        a.partition(true);
        assert!(matches!(a.keep_alive(l), Err(CoordError::Unavailable(_))));
        a.partition(false);
        a.keep_alive(l).unwrap();
    }
}
