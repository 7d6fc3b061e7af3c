//! An HA node: the agent's loop inside a node process (Patroni's role, built in), over any
//! [`CoordStore`] (etcd in production).
//!
//! Owns: [`HaNode`] — one thread that runs the rules of [`super::ha`] every tick: as a standby
//! it publishes its role, epoch and persisted position, and when the leader key is free and it
//! is eligible (in the recorded synchronous set, having followed the primary that recorded it)
//! it takes the key at a new epoch, promotes itself into a replicating primary
//! ([`Standby::promote_to_primary`], which fences n−k+1 of the old set and takes their records),
//! records its own synchronous set, and only then hands the database out ([`HaNode::leading`]);
//! as a primary it renews its lease every tick (its acknowledgement gate stays open until
//! `renewal sent + TTL − margin`) and publishes its acknowledged position; when the lease is
//! lost (or cannot be renewed for a whole TTL, or a newer epoch fenced it) it steps down: every
//! commit fails from then on, and once every handle of the database is gone the node restarts
//! as a standby of the same directory, which rejoins the new primary at the fork point.
//!
//! Invariants:
//! - The database is handed out only after the synchronous set it acknowledges with is recorded
//!   in the store under this node's epoch (synchronous_mode_strict).
//! - A primary whose renewals fail acknowledges nothing after `sent + TTL − margin` of its last
//!   successful renewal (the gate, see [`super::ha`]); the store cannot expire its lease before
//!   `sent + TTL`.
//! - The data directory is used by one role at a time: the standby restarts only after the
//!   primary's database is closed (its directory lock is free).

use super::clock::{Clock, Cond, Task};
use super::coord::{CoordError, CoordStore};
use super::disk::{DirDisk, Disk};
use super::env::Env;
use super::ha::{Agent, LeaseTiming, SyncSet};
use super::link::{PromoteOptions, PromoteReport, StandbyConfig};
use super::mirror::MirrorConfig;
use super::mode::mode_name;
use super::open::open_primary_on;
use super::primary::{ReplConfig, ReplicatedLog, StandbyPolicy};
use super::standby::Standby;
use super::state::epoch_in;
use crate::error::{Error, Result};
use crate::util::sync::MutexExt;
use crate::xlog::ReplicationMode;
use crate::{Database, Options};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Creates a fresh cluster's tables (called once, by the node that bootstraps the cluster).
pub type BootstrapFn = Arc<dyn Fn(&Database) -> Result<()> + Send + Sync>;

/// Receives the node's events (role changes, refusals), e.g. to print them.
pub type EventFn = Arc<dyn Fn(&NodeEvent) + Send + Sync>;

/// Configuration of one HA node.
#[derive(Clone)]
pub struct NodeConfig {
    /// The node's name in the cluster (unique).
    pub name: String,
    /// Its database directory.
    pub data_dir: PathBuf,
    /// Its replication address: the standby listens here, and the other nodes ship to it when
    /// they lead.
    pub listen: String,
    /// The other nodes: (name, replication address).
    pub peers: Vec<(String, String)>,
    /// The shared secret of the replication handshake.
    pub secret: Vec<u8>,
    /// How a primary acknowledges over its peers (eager, quorum:k, ...).
    pub mode: ReplicationMode,
    /// How long a commit waits for the standbys before it fails.
    pub commit_timeout: Duration,
    /// The leadership lease.
    pub timing: LeaseTiming,
    /// How often the agent runs (renewals, publishing, takeover attempts); at most a third of
    /// the TTL.
    pub tick: Duration,
    /// The cluster's prefix in the store (e.g. `/nvmedb/main`).
    pub prefix: String,
    /// Engine options of the database and of the standby.
    pub options: Options,
    /// Creates the tables when this node bootstraps a fresh cluster.
    pub bootstrap: Option<BootstrapFn>,
    /// How long to wait for peers while fencing and taking records at promotion.
    pub peer_timeout: Duration,
    /// The node's clock and network (the system's by default).
    pub env: Env,
    /// The node's files; `None`: the directory `data_dir` ([`DirDisk`]).
    pub disk: Option<Arc<dyn Disk>>,
    /// Mirror the primary's data pages synchronously to its standby (seed 000's configuration:
    /// exactly one peer, eager mode; the standby applies no redo, its pages arrive written).
    pub mirror: bool,
}

impl NodeConfig {
    /// A configuration with the defaults: eager mode, commit timeout 10 s, lease TTL 10 s with a
    /// 2 s margin, a tick of TTL/4, no bootstrap tables.
    pub fn new(
        name: &str,
        data_dir: PathBuf,
        listen: &str,
        peers: Vec<(String, String)>,
        secret: Vec<u8>,
    ) -> Self {
        let timing = LeaseTiming::default();
        Self {
            name: name.into(),
            data_dir,
            listen: listen.into(),
            peers,
            secret,
            mode: ReplicationMode::Eager,
            commit_timeout: Duration::from_secs(10),
            timing,
            tick: timing.ttl / 4,
            prefix: "/nvmedb/default".into(),
            options: Options::default(),
            bootstrap: None,
            peer_timeout: Duration::from_secs(3),
            env: Env::system(),
            disk: None,
            mirror: false,
        }
    }

    fn check(&self) -> Result<()> {
        let bad = |key: &str, detail: String| Err(Error::Config { key: key.into(), detail });
        if self.timing.margin >= self.timing.ttl {
            return bad(
                "ha.margin",
                format!("the margin {:?} must be below the TTL {:?}", self.timing.margin, self.timing.ttl),
            );
        }
        if self.tick.is_zero() || self.tick * 3 > self.timing.ttl - self.timing.margin {
            return bad(
                "ha.tick",
                format!(
                    "the tick {:?} must be at most a third of TTL − margin ({:?}) so that renewals keep the gate open",
                    self.tick,
                    self.timing.ttl - self.timing.margin
                ),
            );
        }
        if self.peers.iter().any(|(n, _)| n == &self.name) {
            return bad("ha.peers", format!("node {} is listed among its own peers", self.name));
        }
        if self.mirror && (self.peers.len() != 1 || self.mode != ReplicationMode::Eager) {
            return bad(
                "ha.mirror",
                format!(
                    "data-page mirroring needs exactly one peer and eager mode (here {} peers, {})",
                    self.peers.len(),
                    mode_name(self.mode)
                ),
            );
        }
        Ok(())
    }
}

/// What a node tells its owner.
#[derive(Debug, Clone)]
pub enum NodeEvent {
    /// Running as a standby at this epoch.
    Standby {
        /// Its epoch.
        epoch: u64,
    },
    /// Took the leadership and opened the database as the primary (the synchronous set is
    /// recorded; commits may be acknowledged now).
    Leader {
        /// The new epoch.
        epoch: u64,
        /// Wall-clock time of the takeover (ns since the Unix epoch).
        at_unix_ns: u128,
        /// What promotion did (`None`: this node bootstrapped a fresh cluster).
        promotion: Option<Box<PromoteReport>>,
    },
    /// Gave the leadership up.
    SteppedDown {
        /// The epoch it led.
        epoch: u64,
        /// Why.
        why: String,
    },
    /// Something worth saying that changes nothing (a failed promotion, a store error, why it
    /// does not take over).
    Note(String),
}

impl std::fmt::Display for NodeEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeEvent::Standby { epoch } => write!(f, "STANDBY epoch {epoch}"),
            NodeEvent::Leader { epoch, at_unix_ns, promotion } => {
                write!(f, "LEADER epoch {epoch} at {at_unix_ns}")?;
                match promotion {
                    Some(r) => write!(
                        f,
                        " (promoted: log end {}, fenced {:?}, took {:?}, {} pages redone, {} unfinished transactions undone)",
                        r.log_end, r.fenced, r.taken, r.recovery.pages_redone, r.recovery.losers
                    ),
                    None => write!(f, " (bootstrapped a new cluster)"),
                }
            }
            NodeEvent::SteppedDown { epoch, why } => write!(f, "STEPPED DOWN from epoch {epoch}: {why}"),
            NodeEvent::Note(n) => write!(f, "note: {n}"),
        }
    }
}

/// The database while this node leads.
#[derive(Clone)]
pub struct Leadership {
    /// The database (commits fail once the node steps down; drop it then).
    pub db: Database,
    /// The epoch this node leads.
    pub epoch: u64,
    /// Its replicated log (status).
    pub log: Arc<ReplicatedLog>,
}

struct Shared {
    cfg: NodeConfig,
    store: Arc<dyn CoordStore>,
    events: EventFn,
    clock: Arc<dyn Clock>,
    disk: Arc<dyn Disk>,
    leading: Mutex<Option<Leadership>>,
    leading_cv: Cond,
    stop: AtomicBool,
    stop_mx: Mutex<()>,
    stop_cv: Cond,
    status: Mutex<String>,
    /// The standby's positions as of its last tick (`None` while leading).
    standby_positions: Mutex<Option<super::StandbyPositions>>,
    role_changes: AtomicU64,
    store_error: Mutex<Option<String>>,
}

/// A running HA node (see the module documentation). Dropping it stops it.
pub struct HaNode {
    sh: Arc<Shared>,
    thread: Mutex<Option<Task<()>>>,
}

enum Role {
    Standby { sb: Standby, deferred: u32, why_not: String, retry_at: Duration },
    Primary { lead: Leadership, _sb: Option<Standby>, last_renewal: Duration, sync_recorded: bool },
}

impl HaNode {
    /// Starts the node: its directory opens as a standby (a former primary's rejoins), and the
    /// agent thread starts deciding through `store`. `events` receives every role change.
    pub fn start(cfg: NodeConfig, store: Arc<dyn CoordStore>, events: EventFn) -> Result<Self> {
        cfg.check()?;
        let clock = cfg.env.clock.clone();
        let disk = cfg.disk.clone().unwrap_or_else(|| DirDisk::shared(&cfg.data_dir));
        let sh = Arc::new(Shared {
            cfg,
            store,
            events,
            leading: Mutex::new(None),
            leading_cv: Cond::new(clock.as_ref()),
            stop: AtomicBool::new(false),
            stop_mx: Mutex::new(()),
            stop_cv: Cond::new(clock.as_ref()),
            clock: clock.clone(),
            disk,
            status: Mutex::new("starting".into()),
            standby_positions: Mutex::new(None),
            role_changes: AtomicU64::new(0),
            store_error: Mutex::new(None),
        });
        let sb = start_standby(&sh)?;
        (sh.events)(&NodeEvent::Standby { epoch: sb.epoch() });
        let s2 = sh.clone();
        let t = clock.spawn(&format!("nvmedb-ha-{}", sh.cfg.name), move || run(s2, sb)).map_err(|e| {
            Error::Config { key: "ha".into(), detail: format!("cannot start the agent thread: {e}") }
        })?;
        Ok(Self { sh, thread: Mutex::new(Some(t)) })
    }

    /// The database while this node leads (`None` as a standby).
    pub fn leading(&self) -> Option<Leadership> {
        self.sh.leading.locked().clone()
    }

    /// Waits up to `timeout` for this node to lead.
    pub fn wait_leading(&self, timeout: Duration) -> Option<Leadership> {
        let clock = &self.sh.clock;
        let deadline = clock.now() + timeout;
        let mut g = self.sh.leading.locked();
        loop {
            if let Some(l) = g.as_ref() {
                return Some(l.clone());
            }
            let now = clock.now();
            if now >= deadline || self.sh.stop.load(Ordering::Acquire) {
                return None;
            }
            g = self.sh.leading_cv.wait_timeout(&self.sh.leading, g, deadline - now);
        }
    }

    /// How many times the node changed role.
    pub fn role_changes(&self) -> u64 {
        self.sh.role_changes.load(Ordering::Acquire)
    }

    /// The node's status (role, epoch, positions) as of its last tick.
    pub fn status(&self) -> String {
        self.sh.status.locked().clone()
    }

    /// While a standby: its epoch and log positions as of its last tick (the operational
    /// metrics; while leading, [`HaNode::leading`] gives the replicated log's status).
    pub fn standby_positions(&self) -> Option<super::StandbyPositions> {
        *self.sh.standby_positions.locked()
    }

    /// Stops the agent: a primary steps down and releases its lease (a standby takes over at
    /// once), a standby shuts down; the member key is removed.
    pub fn stop(&self) {
        self.sh.stop.store(true, Ordering::Release);
        {
            let _g = self.sh.stop_mx.locked();
            self.sh.stop_cv.notify_all();
        }
        {
            let _g = self.sh.leading.locked();
            self.sh.leading_cv.notify_all();
        }
        if let Some(t) = self.thread.locked().take() {
            t.join();
        }
    }
}

impl Drop for HaNode {
    fn drop(&mut self) {
        self.stop();
    }
}

fn start_standby(sh: &Shared) -> Result<Standby> {
    Standby::start_with(
        StandbyConfig {
            listen: sh.cfg.listen.clone(),
            data_dir: sh.cfg.data_dir.clone(),
            secret: sh.cfg.secret.clone(),
            // With mirroring the pages arrive written: no redo to apply.
            apply: !sh.cfg.mirror,
            options: sh.cfg.options.clone(),
        },
        sh.cfg.env.clone(),
        sh.disk.clone(),
    )
}

fn repl_config(sh: &Shared, epoch: u64, agent: &Agent) -> ReplConfig {
    ReplConfig {
        standbys: sh.cfg.peers.iter().map(|(_, a)| a.clone()).collect(),
        secret: sh.cfg.secret.clone(),
        mode: sh.cfg.mode,
        policy: StandbyPolicy::Fail { timeout: sh.cfg.commit_timeout },
        epoch,
        ack_gate: Some(agent.gate()),
        env: sh.cfg.env.clone(),
        ..ReplConfig::default()
    }
}

/// Where a primary of `epoch` mirrors its data pages (its one peer), when the node mirrors.
fn mirror_config(sh: &Shared, epoch: u64) -> Option<MirrorConfig> {
    let (_, addr) = sh.cfg.peers.first().filter(|_| sh.cfg.mirror)?;
    Some(MirrorConfig { addr: addr.clone(), secret: sh.cfg.secret.clone(), epoch })
}

fn sync_set(sh: &Shared, epoch: u64) -> SyncSet {
    SyncSet {
        epoch,
        mode: sh.cfg.mode,
        members: sh.cfg.peers.iter().map(|(n, _)| n.clone()).collect(),
        primary: Some(sh.cfg.name.clone()),
    }
}

/// Sleeps one tick (or less when stopping).
fn pause(sh: &Shared, d: Duration) {
    let g = sh.stop_mx.locked();
    if !sh.stop.load(Ordering::Acquire) {
        drop(sh.stop_cv.wait_timeout(&sh.stop_mx, g, d));
    }
}

fn set_leading(sh: &Shared, l: Option<Leadership>) {
    if l.is_some() {
        *sh.standby_positions.locked() = None;
    }
    *sh.leading.locked() = l;
    sh.role_changes.fetch_add(1, Ordering::AcqRel);
    sh.leading_cv.notify_all();
}

fn run(sh: Arc<Shared>, sb: Standby) {
    let mut agent =
        Agent::with_clock(sh.store.clone(), &sh.cfg.prefix, &sh.cfg.name, sh.cfg.timing, sh.clock.clone());
    let mut role = Some(Role::Standby { sb, deferred: 0, why_not: String::new(), retry_at: sh.clock.now() });
    let mut last_store_error = String::new();
    while !sh.stop.load(Ordering::Acquire) {
        let started = sh.clock.now();
        let r = role.take().expect("a role");
        role = Some(match r {
            Role::Standby { sb, deferred, why_not, retry_at } => {
                standby_tick(&sh, &mut agent, sb, deferred, why_not, retry_at)
            }
            Role::Primary { lead, _sb, last_renewal, sync_recorded } => {
                primary_tick(&sh, &mut agent, lead, _sb, last_renewal, sync_recorded)
            }
        });
        if let Some(e) = store_error(&sh) {
            if e != last_store_error {
                (sh.events)(&NodeEvent::Note(e.clone()));
                last_store_error = e;
            }
        }
        pause(&sh, sh.cfg.tick.saturating_sub(sh.clock.now().saturating_sub(started)));
    }
    // Stopping.
    match role.take() {
        Some(Role::Primary { lead, _sb, .. }) => {
            set_leading(&sh, None);
            lead.log.step_down("the node is stopping");
            let epoch = lead.epoch;
            drop(lead);
            let _ = agent.release();
            (sh.events)(&NodeEvent::SteppedDown { epoch, why: "the node is stopping".into() });
            if let Some(sb) = _sb {
                sb.shutdown();
                drop(sb);
            }
            wait_closed(&sh, Duration::from_secs(30));
        }
        Some(Role::Standby { sb, .. }) => sb.shutdown(),
        None => {}
    }
    let _ = agent.unpublish();
}

/// Remembers the last store error of this tick (reported once per change by the loop).
fn note_store_error(sh: &Shared, e: &CoordError) {
    *sh.store_error.locked() = Some(e.to_string());
}

fn store_error(sh: &Shared) -> Option<String> {
    sh.store_error.locked().take()
}

fn standby_tick(
    sh: &Shared,
    agent: &mut Agent,
    sb: Standby,
    deferred: u32,
    why_not: String,
    retry_at: Duration,
) -> Role {
    let epoch = sb.epoch();
    let pos = sb.position();
    *sh.status.locked() =
        format!("{} standby epoch {epoch} persisted {pos} applied {}", sh.cfg.name, sb.applied());
    *sh.standby_positions.locked() = Some(sb.positions());
    if let Err(e) = agent.publish("standby", epoch, pos) {
        note_store_error(sh, &e);
    }
    let cluster = match agent.cluster_status() {
        Ok(c) => c,
        Err(e) => {
            note_store_error(sh, &e);
            return Role::Standby { sb, deferred, why_not, retry_at };
        }
    };
    if cluster.leader.is_some() || sh.clock.now() < retry_at {
        return Role::Standby { sb, deferred: 0, why_not, retry_at };
    }
    let view_epoch = sb.cluster().map(|v| v.epoch);
    if !sb.is_seeded() && cluster.sync.is_some() {
        let w = "no leader, but this node holds no complete copy yet (waiting for a base backup)".to_string();
        if w != why_not {
            (sh.events)(&NodeEvent::Note(w.clone()));
        }
        return Role::Standby { sb, deferred, why_not: w, retry_at };
    }
    if let Err(w) = agent.eligible(cluster.sync.as_ref(), view_epoch, cluster.epoch) {
        let w = format!("no leader, but this node may not take over: it {w}");
        if w != why_not {
            (sh.events)(&NodeEvent::Note(w.clone()));
        }
        return Role::Standby { sb, deferred, why_not: w, retry_at };
    }
    // Let a more advanced member of the set go first (one tick), so that the usual winner
    // needs to take nothing from its peers.
    let ahead = cluster.members.iter().any(|m| {
        m.name != sh.cfg.name
            && m.role == "standby"
            && m.durable > pos
            && cluster.sync.as_ref().is_some_and(|s| s.members.contains(&m.name))
    });
    if ahead && deferred < 2 {
        return Role::Standby { sb, deferred: deferred + 1, why_not, retry_at };
    }
    let my_epoch = epoch.max(sh.disk.state().and_then(|st| epoch_in(st.as_ref())).unwrap_or(0));
    let new_epoch = match agent.try_take_over(my_epoch, view_epoch) {
        Ok(Some(e)) => e,
        Ok(None) => return Role::Standby { sb, deferred: 0, why_not, retry_at },
        Err(e) => {
            note_store_error(sh, &e);
            return Role::Standby { sb, deferred: 0, why_not, retry_at };
        }
    };
    let taken_at = sh.clock.unix_ns();
    let renewed = sh.clock.now();
    if !sb.is_seeded() {
        // A fresh cluster (nothing recorded, nothing acknowledged): this node creates it.
        sb.shutdown();
        drop(sb);
        let opened = bootstrap(sh, new_epoch).and_then(|()| {
            open_primary_on(
                sh.disk.as_ref(),
                sh.cfg.options.clone(),
                repl_config(sh, new_epoch, agent),
                mirror_config(sh, new_epoch),
            )
        });
        return match opened {
            Ok((db, log)) => {
                let lead = Leadership { db, epoch: new_epoch, log };
                become_leader(sh, agent, lead, None, None, renewed, taken_at)
            }
            Err(e) => {
                let _ = agent.release();
                (sh.events)(&NodeEvent::Note(format!("bootstrapping the cluster failed: {e}")));
                restart_standby(sh)
            }
        };
    }
    let opts = PromoteOptions {
        epoch: Some(new_epoch),
        force: false,
        peer_timeout: sh.cfg.peer_timeout,
        mirror: mirror_config(sh, new_epoch),
    };
    match sb.promote_to_primary(&opts, repl_config(sh, new_epoch, agent)) {
        Ok((db, log, rep)) => {
            let lead = Leadership { db, epoch: new_epoch, log };
            become_leader(sh, agent, lead, Some(sb), Some(rep), renewed, taken_at)
        }
        Err(e) => {
            let _ = agent.release();
            (sh.events)(&NodeEvent::Note(format!(
                "took the leader key at epoch {new_epoch} but promotion failed: {e}; next attempt in one TTL"
            )));
            // Not again at once: each attempt spends an epoch and fences the peers anew.
            Role::Standby { sb, deferred: 0, why_not, retry_at: sh.clock.now() + sh.cfg.timing.ttl }
        }
    }
}

/// Creates the fresh cluster's database and tables alone (lazy, no standbys: nothing is
/// acknowledged to a client yet, and the standbys take a base backup of the result), so that
/// creating it does not wait for standbys still copying.
fn bootstrap(sh: &Shared, epoch: u64) -> Result<()> {
    let cfg = ReplConfig {
        secret: sh.cfg.secret.clone(),
        mode: ReplicationMode::Lazy,
        epoch,
        env: sh.cfg.env.clone(),
        ..ReplConfig::default()
    };
    let (db, log) = open_primary_on(sh.disk.as_ref(), sh.cfg.options.clone(), cfg, None)?;
    if let Some(b) = &sh.cfg.bootstrap {
        b(&db)?;
    }
    db.close()?;
    log.shutdown();
    drop(log);
    if !wait_closed(sh, Duration::from_secs(10)) {
        return Err(Error::Config {
            key: "ha".into(),
            detail: "the bootstrapped database did not close".into(),
        });
    }
    Ok(())
}

/// Records the synchronous set, then hands the database out.
fn become_leader(
    sh: &Shared,
    agent: &mut Agent,
    lead: Leadership,
    sb: Option<Standby>,
    promotion: Option<PromoteReport>,
    renewed: Duration,
    taken_at: u128,
) -> Role {
    match agent.record_sync_set(&sync_set(sh, lead.epoch)) {
        Ok(true) => {
            set_leading(sh, Some(lead.clone()));
            (sh.events)(&NodeEvent::Leader {
                epoch: lead.epoch,
                at_unix_ns: taken_at,
                promotion: promotion.map(Box::new),
            });
            Role::Primary { lead, _sb: sb, last_renewal: renewed, sync_recorded: true }
        }
        Ok(false) => step_down(sh, agent, lead, sb, "a newer primary recorded its synchronous set".into()),
        Err(e) => {
            // Not recorded yet: keep the lease and try again next tick; nothing is handed out.
            note_store_error(sh, &e);
            Role::Primary { lead, _sb: sb, last_renewal: renewed, sync_recorded: false }
        }
    }
}

fn primary_tick(
    sh: &Shared,
    agent: &mut Agent,
    lead: Leadership,
    sb: Option<Standby>,
    mut last_renewal: Duration,
    sync_recorded: bool,
) -> Role {
    match agent.renew() {
        Ok(true) => last_renewal = sh.clock.now(),
        Ok(false) => {
            return step_down(
                sh,
                agent,
                lead,
                sb,
                "its leadership lease expired (another node may lead)".into(),
            )
        }
        Err(e) => {
            note_store_error(sh, &e);
            if sh.clock.now().saturating_sub(last_renewal) >= sh.cfg.timing.ttl {
                agent.abandon();
                return step_down(
                    sh,
                    agent,
                    lead,
                    sb,
                    format!("its lease could not be renewed for a whole TTL ({:?}): {e}", sh.cfg.timing.ttl),
                );
            }
        }
    }
    let st = lead.log.status();
    if let Some(f) = &st.fenced {
        return step_down(sh, agent, lead, sb, format!("fenced: {f}"));
    }
    *sh.status.locked() = format!(
        "{} primary epoch {} acknowledged {} local {}{}",
        sh.cfg.name,
        lead.epoch,
        st.durable,
        st.local_durable,
        if st.lease_lost { "  NOT ACKNOWLEDGING (lease not renewed)" } else { "" }
    );
    if let Err(e) = agent.publish("primary", lead.epoch, st.durable) {
        note_store_error(sh, &e);
    }
    if !sync_recorded {
        return become_leader(sh, agent, lead, sb, None, last_renewal, sh.clock.unix_ns());
    }
    Role::Primary { lead, _sb: sb, last_renewal, sync_recorded }
}

/// Waits until every handle of the database is gone (its directory lock is free).
fn wait_closed(sh: &Shared, limit: Duration) -> bool {
    let deadline = sh.clock.now() + limit;
    loop {
        if let Ok(st) = sh.disk.data() {
            if st.lock().is_ok() {
                return true;
            }
        }
        if sh.clock.now() >= deadline {
            return false;
        }
        sh.clock.sleep(Duration::from_millis(20));
    }
}

fn step_down(sh: &Shared, agent: &mut Agent, lead: Leadership, sb: Option<Standby>, why: String) -> Role {
    set_leading(sh, None);
    lead.log.step_down(&why);
    let epoch = lead.epoch;
    drop(lead);
    if let Err(e) = agent.release() {
        note_store_error(sh, &e);
        agent.abandon();
    }
    (sh.events)(&NodeEvent::SteppedDown { epoch, why });
    *sh.status.locked() =
        format!("{} stepped down from epoch {epoch}; waiting for the database to close", sh.cfg.name);
    // The promoted standby's storage holds the directory lock with the database: it goes
    // first, then the clients' handles.
    if let Some(sb) = sb {
        sb.shutdown();
        drop(sb);
    }
    if !wait_closed(sh, Duration::from_secs(60)) {
        (sh.events)(&NodeEvent::Note(
            "the database is still open 60 s after stepping down (a client keeps a handle); waiting".into(),
        ));
        wait_closed(sh, Duration::from_secs(3600));
    }
    restart_standby(sh)
}

fn restart_standby(sh: &Shared) -> Role {
    loop {
        match start_standby(sh) {
            Ok(sb) => {
                (sh.events)(&NodeEvent::Standby { epoch: sb.epoch() });
                return Role::Standby { sb, deferred: 0, why_not: String::new(), retry_at: sh.clock.now() };
            }
            Err(e) => {
                (sh.events)(&NodeEvent::Note(format!("restarting as a standby failed: {e}; retrying")));
                pause(sh, Duration::from_secs(1));
            }
        }
    }
}
