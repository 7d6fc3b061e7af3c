//! The HA agent's rules over a coordination store (Patroni's, with synchronous_mode_strict).
//!
//! Owns: the key layout under a cluster prefix — `leader` (the leader's name and epoch, bound
//! to its lease), `epoch` (the last epoch handed out, raised by compare-and-swap), `sync` (the
//! synchronous set a primary acknowledges with, written before it acknowledges with it),
//! `members/<name>` (each node's role, epoch and durable LSN, bound to its own lease) — and the
//! [`Agent`] that applies the rules: a primary renews its lease and keeps its acknowledgement
//! gate open only until `renewal sent + TTL − margin`; a standby takes the leader key only when
//! it is absent and the standby is in the recorded synchronous set, then raises the epoch.
//!
//! Invariants:
//! - At most one node holds the leader key; each takeover gets an epoch larger than every
//!   epoch handed out before (the `epoch` key only grows, by compare-and-swap).
//! - A primary's gate closes no later than `margin` before its lease can expire in the store
//!   (the lease is renewed for its full TTL from when the store handles the renewal, which is
//!   after the agent sent it), so an old primary has stopped acknowledging when a standby can
//!   take the key. The margin covers the drift of the two clocks over one TTL and the time
//!   between a gate check and the commit's return.
//! - Only a member of the recorded synchronous set may take over: it holds every acknowledged
//!   commit (eager), or its promotion fences n−k+1 of the set and takes their records (quorum).

use super::clock::{Clock, SystemClock};
use super::coord::{CoordError, CoordStore, LeaseId};
use super::mode::{mode_name, parse_mode};
use super::primary::AckGate;
use crate::xlog::ReplicationMode;
use std::sync::Arc;
use std::time::Duration;

/// The synchronous set a primary acknowledges with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncSet {
    /// The primary's epoch.
    pub epoch: u64,
    /// Its mode.
    pub mode: ReplicationMode,
    /// Names of the standbys in the set.
    pub members: Vec<String>,
    /// The primary that recorded it (`None` in a set stored without its name).
    pub primary: Option<String>,
}

impl SyncSet {
    /// `epoch mode member,member,… [primary]`.
    fn encode(&self) -> String {
        let mut s = format!("{} {} {}", self.epoch, mode_name(self.mode), self.members.join(","));
        if let Some(p) = &self.primary {
            s.push(' ');
            s.push_str(p);
        }
        s
    }

    fn decode(s: &str) -> Option<Self> {
        let mut it = s.splitn(4, ' ');
        let epoch = it.next()?.parse().ok()?;
        let mode = parse_mode(it.next()?)?;
        let members =
            it.next().unwrap_or("").split(',').filter(|m| !m.is_empty()).map(String::from).collect();
        let primary = it.next().filter(|p| !p.is_empty()).map(String::from);
        Some(Self { epoch, mode, members, primary })
    }
}

/// Timing of the leadership lease.
#[derive(Debug, Clone, Copy)]
pub struct LeaseTiming {
    /// The lease's time to live in the store.
    pub ttl: Duration,
    /// How long before the lease could expire the primary stops acknowledging.
    pub margin: Duration,
}

impl Default for LeaseTiming {
    fn default() -> Self {
        Self { ttl: Duration::from_secs(10), margin: Duration::from_secs(2) }
    }
}

/// One node's HA agent (see the module documentation).
pub struct Agent {
    store: Arc<dyn CoordStore>,
    prefix: String,
    name: String,
    timing: LeaseTiming,
    lease: Option<LeaseId>,
    member_lease: Option<LeaseId>,
    gate: Arc<AckGate>,
    clock: Arc<dyn Clock>,
}

impl Agent {
    /// An agent for node `name` of the cluster under `prefix`; its gate starts closed.
    pub fn new(store: Arc<dyn CoordStore>, prefix: &str, name: &str, timing: LeaseTiming) -> Self {
        Self::with_clock(store, prefix, name, timing, SystemClock::shared())
    }

    /// [`Agent::new`] whose gate deadlines are on `clock` (the node's).
    pub fn with_clock(
        store: Arc<dyn CoordStore>,
        prefix: &str,
        name: &str,
        timing: LeaseTiming,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            store,
            prefix: prefix.trim_end_matches('/').to_string(),
            name: name.to_string(),
            timing,
            lease: None,
            member_lease: None,
            gate: AckGate::closed_on(clock.clone()),
            clock,
        }
    }

    /// The gate a primary run by this agent acknowledges through (`ReplConfig::ack_gate`).
    pub fn gate(&self) -> Arc<AckGate> {
        self.gate.clone()
    }

    fn key(&self, k: &str) -> String {
        format!("{}/{k}", self.prefix)
    }

    /// The current leader: (name, epoch).
    pub fn leader(&self) -> Result<Option<(String, u64)>, CoordError> {
        Ok(self.store.get(&self.key("leader"))?.and_then(|v| {
            let s = String::from_utf8(v.value).ok()?;
            let (n, e) = s.rsplit_once(' ')?;
            Some((n.to_string(), e.parse().ok()?))
        }))
    }

    /// The recorded synchronous set.
    pub fn sync_set(&self) -> Result<Option<SyncSet>, CoordError> {
        Ok(self
            .store
            .get(&self.key("sync"))?
            .and_then(|v| SyncSet::decode(&String::from_utf8(v.value).ok()?)))
    }

    /// Primary: records the synchronous set before acknowledging with it (only while leader).
    /// A compare-and-swap that never replaces a set of a newer epoch: a primary that was
    /// stopped between its takeover and this call, and lost its lease meanwhile, cannot
    /// overwrite its successor's set. Returns false when a newer set is there (the caller is
    /// no longer the leader and must not acknowledge).
    pub fn record_sync_set(&self, set: &SyncSet) -> Result<bool, CoordError> {
        let key = self.key("sync");
        loop {
            let cur = self.store.get(&key)?;
            let won = match &cur {
                Some(v) => {
                    let old = SyncSet::decode(&String::from_utf8_lossy(&v.value));
                    if old.is_some_and(|o| o.epoch > set.epoch) {
                        return Ok(false);
                    }
                    self.store.replace(&key, v.revision, set.encode().as_bytes(), None)?
                }
                None => self.store.create(&key, set.encode().as_bytes(), None)?,
            };
            if won.is_some() {
                return Ok(true);
            }
        }
    }

    /// Publishes this node's role, epoch and durable position under `members/<name>`, bound to
    /// a member lease of its own (granted here, renewed at each call), so a node that stops
    /// publishing drops out of the cluster view after one TTL.
    pub fn publish(&mut self, role: &str, epoch: u64, durable: u64) -> Result<(), CoordError> {
        let lease = match self.member_lease {
            Some(l) => match self.store.keep_alive(l) {
                Ok(()) => l,
                Err(CoordError::LeaseExpired(_)) => self.store.grant(self.timing.ttl)?,
                Err(e) => return Err(e),
            },
            None => self.store.grant(self.timing.ttl)?,
        };
        self.member_lease = Some(lease);
        let v = format!("{role} {epoch} {durable}");
        match self.store.put(&self.key(&format!("members/{}", self.name)), v.as_bytes(), Some(lease)) {
            Ok(_) => Ok(()),
            Err(e) => {
                self.member_lease = None;
                Err(e)
            }
        }
    }

    /// True while this agent holds the leader key's lease (as far as it knows).
    pub fn is_leader(&self) -> bool {
        self.lease.is_some()
    }

    /// The cluster as the store shows it.
    pub fn cluster_status(&self) -> Result<ClusterStatus, CoordError> {
        ClusterStatus::read(self.store.as_ref(), &self.prefix)
    }

    /// Primary: renews the leadership lease; on success the gate stays open until
    /// `sent + TTL − margin`. Returns false when the lease is gone (this node is no longer the
    /// leader and must step down).
    pub fn renew(&mut self) -> Result<bool, CoordError> {
        let Some(l) = self.lease else { return Ok(false) };
        let sent = self.clock.now();
        match self.store.keep_alive(l) {
            Ok(()) => {
                self.gate.open_until(sent + self.timing.ttl.saturating_sub(self.timing.margin));
                Ok(true)
            }
            Err(CoordError::LeaseExpired(_)) => {
                self.gate.close();
                self.lease = None;
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Whether a standby may take over under the recorded synchronous set `set`: with no set
    /// (nothing was ever acknowledged in this cluster) any node may; otherwise only a member of
    /// the set that learned that very set from the primary that recorded it (`view_epoch`, the
    /// epoch of the cluster view its primary sent it, equals the set's epoch), or that primary
    /// itself, restarted as a standby, in lazy mode, as long as no epoch was handed out after
    /// the set's (`last_epoch`, the store's epoch counter). Such a standby holds every acknowledged commit
    /// (eager), or its promotion fences n−k+1 of the set and takes their records (quorum); a
    /// member that never followed that primary might lack commits that primary acknowledged.
    /// The primary that recorded the set acknowledged every commit of its epoch from its own
    /// durable log, and held every earlier one when it took over: without it, a cluster whose
    /// members all missed its epoch (down or cut off while it led) could never elect anyone
    /// again. Once a later epoch was handed out, a member may have promoted (and fenced, and
    /// written records of that epoch) meanwhile: then only the members that followed it may.
    pub fn eligible(
        &self,
        set: Option<&SyncSet>,
        view_epoch: Option<u64>,
        last_epoch: Option<u64>,
    ) -> Result<(), String> {
        let Some(set) = set else { return Ok(()) };
        if set.mode == ReplicationMode::Lazy
            && set.primary.as_deref() == Some(self.name.as_str())
            && last_epoch.is_none_or(|e| e <= set.epoch)
        {
            return Ok(());
        }
        if !set.members.iter().any(|m| m == &self.name) {
            return Err(format!(
                "not in the synchronous set of epoch {} ({})",
                set.epoch,
                set.members.join(",")
            ));
        }
        if view_epoch != Some(set.epoch) {
            return Err(format!(
                "has not followed the primary of epoch {} (its cluster view is of epoch {})",
                set.epoch,
                view_epoch.map_or("-".to_string(), |e| e.to_string())
            ));
        }
        Ok(())
    }

    /// Standby: takes the leader key if it is free and this node is [`Agent::eligible`] (with
    /// `view_epoch`, the epoch of the cluster view it learned from its last primary). Returns
    /// the new epoch, which is larger than `my_epoch` and than every epoch handed out before.
    /// The caller promotes at that epoch, records its synchronous set
    /// ([`Agent::record_sync_set`]) before acknowledging, and calls [`Agent::renew`]; if
    /// promotion fails it calls [`Agent::release`].
    pub fn try_take_over(
        &mut self,
        my_epoch: u64,
        view_epoch: Option<u64>,
    ) -> Result<Option<u64>, CoordError> {
        if self.leader()?.is_some() {
            return Ok(None);
        }
        // The epoch counter, read once: eligibility depends on it, and the compare-and-swap
        // below fails if another node moved it since.
        let (rev, last) = match self.store.get(&self.key("epoch"))? {
            Some(v) => (Some(v.revision), String::from_utf8_lossy(&v.value).parse::<u64>().unwrap_or(0)),
            None => (None, 0),
        };
        if self.eligible(self.sync_set()?.as_ref(), view_epoch, rev.map(|_| last)).is_err() {
            return Ok(None);
        }
        let sent = self.clock.now();
        let lease = self.store.grant(self.timing.ttl)?;
        // Reserve the next epoch first (compare-and-swap on the counter), then the key.
        let epoch = last.max(my_epoch) + 1;
        let value = epoch.to_string();
        let won_epoch = match rev {
            Some(r) => self.store.replace(&self.key("epoch"), r, value.as_bytes(), None)?,
            None => self.store.create(&self.key("epoch"), value.as_bytes(), None)?,
        };
        if won_epoch.is_none()
            || self
                .store
                .create(&self.key("leader"), format!("{} {epoch}", self.name).as_bytes(), Some(lease))?
                .is_none()
        {
            let _ = self.store.revoke(lease);
            return Ok(None);
        }
        self.lease = Some(lease);
        self.gate.open_until(sent + self.timing.ttl.saturating_sub(self.timing.margin));
        Ok(Some(epoch))
    }

    /// Gives the leadership up (promotion failed, or shutting down): closes the gate and
    /// revokes the lease, which removes the leader key.
    pub fn release(&mut self) -> Result<(), CoordError> {
        self.gate.close();
        if let Some(l) = self.lease.take() {
            self.store.revoke(l)?;
        }
        Ok(())
    }

    /// Forgets the leadership without asking the store (it cannot be reached): closes the
    /// gate; the lease expires in the store by itself.
    pub fn abandon(&mut self) {
        self.gate.close();
        self.lease = None;
    }

    /// Removes this node's member key (shutting down).
    pub fn unpublish(&mut self) -> Result<(), CoordError> {
        if let Some(l) = self.member_lease.take() {
            self.store.revoke(l)?;
        }
        Ok(())
    }
}

/// One node as it publishes itself under `members/<name>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberStatus {
    /// Its name.
    pub name: String,
    /// `primary` or `standby` (or what else it published).
    pub role: String,
    /// Its epoch.
    pub epoch: u64,
    /// Its durable log position (a primary: acknowledged; a standby: persisted).
    pub durable: u64,
}

/// The cluster as the coordination store shows it (`nvmedb status --ha`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterStatus {
    /// The prefix the cluster lives under.
    pub prefix: String,
    /// The leader key: name and epoch.
    pub leader: Option<(String, u64)>,
    /// The last epoch handed out.
    pub epoch: Option<u64>,
    /// The recorded synchronous set.
    pub sync: Option<SyncSet>,
    /// Every member that published itself within one TTL.
    pub members: Vec<MemberStatus>,
}

impl ClusterStatus {
    /// Reads the cluster under `prefix`.
    pub fn read(store: &dyn CoordStore, prefix: &str) -> Result<Self, CoordError> {
        let prefix = prefix.trim_end_matches('/').to_string();
        let leader = store.get(&format!("{prefix}/leader"))?.and_then(|v| {
            let s = String::from_utf8(v.value).ok()?;
            let (n, e) = s.rsplit_once(' ')?;
            Some((n.to_string(), e.parse().ok()?))
        });
        let epoch = store
            .get(&format!("{prefix}/epoch"))?
            .and_then(|v| String::from_utf8_lossy(&v.value).parse().ok());
        let sync = store
            .get(&format!("{prefix}/sync"))?
            .and_then(|v| SyncSet::decode(&String::from_utf8_lossy(&v.value)));
        let mp = format!("{prefix}/members/");
        let members = store
            .list(&mp)?
            .into_iter()
            .filter_map(|(k, v)| {
                let s = String::from_utf8_lossy(&v.value).into_owned();
                let mut it = s.split(' ');
                Some(MemberStatus {
                    name: k.strip_prefix(&mp)?.to_string(),
                    role: it.next()?.to_string(),
                    epoch: it.next()?.parse().ok()?,
                    durable: it.next()?.parse().ok()?,
                })
            })
            .collect();
        Ok(Self { prefix, leader, epoch, sync, members })
    }
}

impl std::fmt::Display for ClusterStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "cluster {}", self.prefix)?;
        match &self.leader {
            Some((n, e)) => writeln!(f, "leader {n}  epoch {e}")?,
            None => writeln!(f, "leader NONE (no node holds the leadership lease)")?,
        }
        writeln!(f, "last epoch handed out {}", self.epoch.map_or("-".to_string(), |e| e.to_string()))?;
        match &self.sync {
            Some(s) => writeln!(
                f,
                "synchronous set (epoch {}, {}, recorded by {}): {}",
                s.epoch,
                mode_name(s.mode),
                s.primary.as_deref().unwrap_or("-"),
                if s.members.is_empty() { "-".to_string() } else { s.members.join(", ") }
            )?,
            None => writeln!(f, "synchronous set: none recorded")?,
        }
        let top = self
            .members
            .iter()
            .filter(|m| m.role == "primary")
            .map(|m| m.durable)
            .max()
            .or_else(|| self.members.iter().map(|m| m.durable).max())
            .unwrap_or(0);
        writeln!(
            f,
            "{:<12} {:<8} {:>6} {:>16} {:>14}",
            "member", "role", "epoch", "durable LSN", "lag (bytes)"
        )?;
        for m in &self.members {
            let lag =
                if m.role == "primary" { "-".to_string() } else { top.saturating_sub(m.durable).to_string() };
            writeln!(f, "{:<12} {:<8} {:>6} {:>16} {:>14}", m.name, m.role, m.epoch, m.durable, lag)?;
        }
        if self.members.is_empty() {
            writeln!(f, "(no member has published itself within its lease)")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::coord::{MemStore, SimClock};
    use super::*;

    fn agents(n: usize, timing: LeaseTiming) -> (Arc<SimClock>, MemStore, Vec<Agent>) {
        let clock = Arc::new(SimClock::default());
        let store = MemStore::new(clock.clone());
        let agents = (0..n)
            .map(|i| Agent::new(Arc::new(store.client()), "/nvmedb/c", &format!("n{i}"), timing))
            .collect();
        (clock, store, agents)
    }

    #[test]
    fn one_node_takes_over_at_a_time_and_epochs_only_grow() {
        let timing = LeaseTiming { ttl: Duration::from_secs(10), margin: Duration::from_secs(2) };
        let (clock, _, mut a) = agents(3, timing);
        let e1 = a[0].try_take_over(1, None).unwrap().expect("the first node leads");
        assert_eq!(e1, 2);
        assert!(a[0].gate().is_open());
        assert_eq!(a[1].try_take_over(1, None).unwrap(), None, "the key is held");
        let set = SyncSet {
            epoch: e1,
            mode: ReplicationMode::Eager,
            members: vec!["n1".into(), "n2".into()],
            primary: Some("n0".into()),
        };
        assert!(a[0].record_sync_set(&set).unwrap());
        assert_eq!(a[0].leader().unwrap(), Some(("n0".into(), e1)));
        // The leader stops renewing: the key vanishes after the TTL; only the set's member that
        // followed it (or the leader itself) may take over, at a larger epoch.
        clock.advance(timing.ttl + Duration::from_millis(1));
        assert!(a[0].eligible(Some(&set), None, Some(e1)).is_err(), "n0 is not in the synchronous set");
        let lazy = SyncSet { mode: ReplicationMode::Lazy, ..set.clone() };
        assert!(
            a[0].eligible(Some(&lazy), None, Some(e1)).is_ok(),
            "lazy: n0 recorded the set, it has every commit"
        );
        assert!(
            a[0].eligible(Some(&lazy), None, Some(e1 + 1)).is_err(),
            "a later epoch was handed out: a member may have promoted and written past n0's log"
        );
        assert_eq!(
            a[2].try_take_over(1, Some(e1 - 1)).unwrap(),
            None,
            "n2 is in the set but never followed the primary that recorded it"
        );
        let e2 = a[1].try_take_over(1, Some(e1)).unwrap().expect("n1 is, and followed it");
        assert!(e2 > e1);
        // The old leader, resuming, cannot put back a set older than its successor's.
        let set2 = SyncSet {
            epoch: e2,
            members: vec!["n0".into(), "n2".into()],
            primary: Some("n1".into()),
            ..set.clone()
        };
        assert!(a[1].record_sync_set(&set2).unwrap());
        assert!(!a[0].record_sync_set(&set).unwrap(), "a stale set never replaces a newer one");
        assert_eq!(a[0].sync_set().unwrap().unwrap(), set2);
        assert!(
            a[0].eligible(Some(&set2), Some(e1), Some(e2)).is_err(),
            "n0 led the epoch before, not the one recorded, and never followed n1"
        );
        assert!(!a[0].renew().unwrap(), "the old leader learns it lost the lease");
        assert!(!a[0].gate().is_open());
        assert!(a[1].renew().unwrap());
        a[1].release().unwrap();
        assert_eq!(a[1].leader().unwrap(), None);
        assert!(!a[1].gate().is_open());
    }

    #[test]
    fn a_primary_cut_off_from_the_store_closes_its_gate_before_its_lease_can_expire() {
        let timing = LeaseTiming { ttl: Duration::from_millis(400), margin: Duration::from_millis(150) };
        let (_, _, mut a) = agents(1, timing);
        let clock_start = std::time::Instant::now();
        a[0].try_take_over(1, None).unwrap().expect("leads");
        assert!(a[0].gate().is_open());
        // No renewal reaches the store (here: none is sent). The gate closes on its own at
        // sent + ttl - margin, before the store could expire the lease (sent + ttl or later).
        while a[0].gate().is_open() {
            assert!(clock_start.elapsed() < timing.ttl - timing.margin + Duration::from_secs(5));
            std::thread::yield_now();
        }
        assert!(clock_start.elapsed() < timing.ttl + Duration::from_secs(5));
        assert!(clock_start.elapsed() >= timing.ttl - timing.margin);
    }

    #[test]
    fn members_publish_under_their_own_lease_and_the_status_shows_them() {
        let timing = LeaseTiming::default();
        let (clock, store, mut a) = agents(2, timing);
        a[0].try_take_over(1, None).unwrap().expect("leads");
        a[0].publish("primary", 2, 5000).unwrap();
        a[1].publish("standby", 2, 4000).unwrap();
        let st = ClusterStatus::read(&store, "/nvmedb/c").unwrap();
        assert_eq!(st.leader, Some(("n0".into(), 2)));
        assert_eq!(st.members.len(), 2);
        let text = st.to_string();
        assert!(text.contains("leader n0  epoch 2") && text.contains("1000"), "{text}");
        // n1 stops publishing: its key goes with its member lease; n0 renews its own.
        clock.advance(timing.ttl / 2);
        a[0].publish("primary", 2, 6000).unwrap();
        clock.advance(timing.ttl / 2 + Duration::from_millis(1));
        let st = ClusterStatus::read(&store, "/nvmedb/c").unwrap();
        assert_eq!(st.members.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(), vec!["n0"]);
    }

    #[test]
    fn sync_sets_round_trip() {
        let s = SyncSet {
            epoch: 4,
            mode: ReplicationMode::Quorum(2),
            members: vec!["a".into(), "b".into()],
            primary: Some("c".into()),
        };
        assert_eq!(SyncSet::decode(&s.encode()), Some(s));
        let e =
            SyncSet { epoch: 1, mode: ReplicationMode::Eager, members: vec![], primary: Some("a".into()) };
        assert_eq!(SyncSet::decode(&e.encode()), Some(e));
        let old = SyncSet { epoch: 3, mode: ReplicationMode::Lazy, members: vec!["b".into()], primary: None };
        assert_eq!(old.encode(), "3 lazy b", "a set without its primary's name reads as before");
        assert_eq!(SyncSet::decode(&old.encode()), Some(old));
    }
}
