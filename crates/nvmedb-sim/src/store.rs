//! The simulated coordination store as each node reaches it.
//!
//! Owns: [`NodeStore`], one node incarnation's client of the shared [`MemStore`] (whose leases
//! run on the store's own simulated clock, which the nemesis can make jump): every call takes a
//! seeded round trip (handled when sent, answered a round trip later), a call across a cut link waits out the
//! client's timeout and fails `Unavailable` (as etcd's client does), and a dead incarnation's
//! calls fail. The store itself never fails (three etcd members keep a quorum in this model).

use crate::net::SimNet;
use crate::sched::{Group, Sim};
use nvmedb::repl::clock::Clock;
use nvmedb::repl::coord::{CoordError, CoordStore, LeaseId, MemStore, Versioned};
use std::sync::Arc;
use std::time::Duration;

/// The name the store has in the network's link table (cut a node from it with
/// [`SimNet::set_cut`]).
pub const STORE: &str = "store";

/// One node incarnation's client of the simulated store (see the module documentation).
pub struct NodeStore {
    inner: MemStore,
    sim: Sim,
    net: SimNet,
    node: String,
    group: Group,
    clock: Arc<dyn Clock>,
    /// How long a call waits across a cut link before it fails.
    timeout: Duration,
}

impl NodeStore {
    /// Node `node`'s (incarnation `group`) client of `store`, waiting with `clock`.
    pub fn new(
        store: &MemStore,
        sim: &Sim,
        net: &SimNet,
        node: &str,
        group: Group,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            inner: store.client(),
            sim: sim.clone(),
            net: net.clone(),
            node: node.to_string(),
            group,
            clock,
            timeout: Duration::from_secs(1),
        }
    }

    fn call<R>(&self, f: impl FnOnce(&MemStore) -> Result<R, CoordError>) -> Result<R, CoordError> {
        if self.sim.is_killed(self.group) {
            return Err(CoordError::Unavailable("this node is down".into()));
        }
        let cut = || self.net.is_cut(&self.node, STORE) || self.net.is_cut(STORE, &self.node);
        if cut() {
            self.clock.sleep(self.timeout);
            return Err(CoordError::Unavailable(format!("{}: the store cannot be reached", self.node)));
        }
        // The request is handled at once; the answer takes a round trip.
        let r = f(&self.inner);
        self.clock.sleep(Duration::from_micros(400 + self.sim.rand_below(1600)));
        if cut() {
            // Handled, but the answer is lost.
            self.clock.sleep(self.timeout);
            return Err(CoordError::Unavailable(format!("{}: the store's answer was lost", self.node)));
        }
        r
    }
}

impl CoordStore for NodeStore {
    fn grant(&self, ttl: Duration) -> Result<LeaseId, CoordError> {
        self.call(|s| s.grant(ttl))
    }
    fn keep_alive(&self, lease: LeaseId) -> Result<(), CoordError> {
        self.call(|s| s.keep_alive(lease))
    }
    fn revoke(&self, lease: LeaseId) -> Result<(), CoordError> {
        self.call(|s| s.revoke(lease))
    }
    fn get(&self, key: &str) -> Result<Option<Versioned>, CoordError> {
        self.call(|s| s.get(key))
    }
    fn list(&self, prefix: &str) -> Result<Vec<(String, Versioned)>, CoordError> {
        self.call(|s| s.list(prefix))
    }
    fn put(&self, key: &str, value: &[u8], lease: Option<LeaseId>) -> Result<u64, CoordError> {
        self.call(|s| s.put(key, value, lease))
    }
    fn create(&self, key: &str, value: &[u8], lease: Option<LeaseId>) -> Result<Option<u64>, CoordError> {
        self.call(|s| s.create(key, value, lease))
    }
    fn replace(
        &self,
        key: &str,
        revision: u64,
        value: &[u8],
        lease: Option<LeaseId>,
    ) -> Result<Option<u64>, CoordError> {
        self.call(|s| s.replace(key, revision, value, lease))
    }
    fn delete_at(&self, key: &str, revision: u64) -> Result<bool, CoordError> {
        self.call(|s| s.delete_at(key, revision))
    }
}
