//! The simulated world: one schedule of an HA cluster, run and checked.
//!
//! Owns: the nodes (each an `nvmedb::repl::node::HaNode` — the real agent, standby, primary,
//! promotion and fencing code — on its own simulated clock, network endpoint, coordination
//! store client and crash-simulated disk), their embedded clients, the nemesis, the heal phase,
//! and the record of what was acknowledged, by whom, in which epoch, when.
//!
//! A run: the nodes start empty; the first to take the leader key creates the database (tables
//! `t`, `acks`, `gone`) and the others copy it (base backup). For the schedule's run time the
//! clients of whichever node leads commit transactions — insert an `acks` row and point a `t`
//! row at it; delete an `acks` row and record it in `gone`, in one transaction; read back what
//! they were acknowledged — while the nemesis injects the schedule's faults. Then everything
//! heals (links, disks, stopped and crashed nodes restart), the cluster must converge (a leader,
//! every standby caught up), a last transaction goes through, every node stops cleanly, every
//! disk loses power once more, and each node's files are opened (recovery) and checked
//! ([`crate::check`]).
//!
//! Files: `mod.rs` (the world, its nodes and clients, the heal phase, a run), `nemesis.rs` (the
//! faults applied and undone), `workload.rs` (the clients' transactions and the reads the checks
//! use).

use crate::check::{self, Ack, AckKind, Facts, LeaderEvent};
use crate::disk::{CrashPlan, DiskIo, SimDisk};
use crate::net::SimNet;
use crate::sched::{Group, NodeClock, Sim, Stop};
use crate::schedule::Schedule;
use crate::store::NodeStore;
use nvmedb::repl::clock::{Clock, Cond};
use nvmedb::repl::coord::MemStore;
use nvmedb::repl::disk::Disk;
use nvmedb::repl::ha::LeaseTiming;
use nvmedb::repl::node::{HaNode, Leadership, NodeConfig, NodeEvent};
use nvmedb::repl::{Env, ReplicationMode};
use nvmedb::util::Rng;
use nvmedb::{BufferSize, Database, Options, Value};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;
pub use workload::read_ids;
use workload::{create_tables, delete_tx, insert_tx};

mod nemesis;
mod workload;

/// Rows of table `t` each client updates (its own: clients never wait for each other's locks).
pub const KEYS_PER_CLIENT: i64 = 6;
const SECRET: &[u8] = b"simulated-cluster";
const PREFIX: &str = "/sim";

/// The engine's options on every simulated node: small pages and pools (no eviction waits for
/// the standbys), no background writer (it would write pages at real-time moments), small log
/// segments and frequent checkpoints (so restartpoints, log truncation and base backups from a
/// checkpoint are exercised).
pub fn node_options() -> Options {
    let mut o = Options {
        table_page_size: 4096,
        index_page_size: 4096,
        table_buffer: BufferSize::Bytes(64 * 4096),
        index_buffer: BufferSize::Bytes(64 * 4096),
        background_writer: None,
        huge_pages: false,
        async_read_ahead: false,
        row_hint_bytes: 0,
        ..Options::default()
    };
    o.wal_options.segment_bytes = 256 << 10;
    o.wal_options.checkpoint_after_bytes = 192 << 10;
    o
}

struct Incarnation {
    group: Group,
    io: DiskIo,
    clock: Arc<NodeClock>,
    /// The node's agent, once started.
    ha: Arc<Mutex<Option<Arc<HaNode>>>>,
    /// Set to stop the node cleanly (clients first, then the agent).
    stop: Arc<AtomicBool>,
    stop_cv: Arc<(Mutex<()>, Cond)>,
}

/// Who committed: the node, its incarnation, its epoch as leader.
#[derive(Clone, Copy)]
struct Who {
    node: usize,
    group: Group,
    epoch: u64,
}

struct NodeSlot {
    name: String,
    addr: String,
    disk: SimDisk,
    inc: Option<Incarnation>,
    starts: u64,
}

/// One schedule's world (see the module documentation).
pub struct World {
    sched: Schedule,
    sim: Sim,
    net: SimNet,
    store: MemStore,
    store_clock: Arc<NodeClock>,
    nodes: Mutex<Vec<NodeSlot>>,
    facts: Mutex<Facts>,
    trace: Mutex<Vec<String>>,
    rng: Mutex<Rng>,
    next_id: AtomicI64,
    /// The workload is over: clients stop committing.
    quiet: AtomicBool,
    me: Weak<World>,
}

/// What one schedule did (when it passed).
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Task switches.
    pub steps: u64,
    /// Simulated time at the end.
    pub sim_ms: u64,
    /// Acknowledged commits.
    pub acks: usize,
    /// Leaders (epochs that acknowledged or were handed out and led).
    pub leaders: usize,
    /// Digest of every scheduling decision and the final state (equal runs, equal digests).
    pub digest: u64,
    /// Acknowledged commits lost (lazy mode only: measured, allowed).
    pub lazy_lost: usize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl World {
    fn new(sched: Schedule, cpu: Option<usize>) -> Arc<Self> {
        let sim = Sim::on_cpu(sched.seed, cpu);
        let net = SimNet::new(&sim, sched.seed, (Duration::from_micros(50), Duration::from_micros(600)));
        let store_clock = sim.clock();
        let store = MemStore::new(store_clock.clone());
        let nodes = (0..sched.nodes)
            .map(|i| NodeSlot {
                name: format!("n{i}"),
                addr: format!("n{i}:7000"),
                disk: SimDisk::new(),
                inc: None,
                starts: 0,
            })
            .collect();
        let seed = sched.seed;
        Arc::new_cyclic(|me| Self {
            sched,
            sim,
            net,
            store,
            store_clock,
            nodes: Mutex::new(nodes),
            facts: Mutex::new(Facts::default()),
            trace: Mutex::new(Vec::new()),
            rng: Mutex::new(Rng::new(seed ^ 0x000e_e5e5_0000_0003)),
            next_id: AtomicI64::new(1),
            quiet: AtomicBool::new(false),
            me: me.clone(),
        })
    }

    fn note(&self, what: String) {
        let line = format!("{:>7.3}s {what}", self.sim.now().as_secs_f64());
        let mut t = lock(&self.trace);
        t.push(line);
        if t.len() > 400 {
            t.drain(..100);
        }
    }

    fn name(&self, i: usize) -> String {
        format!("n{i}")
    }

    /// Starts (or restarts) node `i` as a new incarnation.
    fn start_node(&self, i: usize) {
        let mut nodes = lock(&self.nodes);
        let slot = &mut nodes[i];
        if slot.inc.is_some() {
            return;
        }
        slot.starts += 1;
        let group = self.sim.new_group(&format!("{}#{}", slot.name, slot.starts));
        let clock = self.sim.clock();
        let io = DiskIo::new(&slot.disk, &self.sim, &slot.name);
        let net = self.net.node(&slot.name, group);
        let store = NodeStore::new(&self.store, &self.sim, &self.net, &slot.name, group, clock.clone());
        let inc = Incarnation {
            group,
            io: io.clone(),
            clock: clock.clone(),
            ha: Arc::default(),
            stop: Arc::default(),
            stop_cv: Arc::new((Mutex::new(()), Cond::new(clock.as_ref()))),
        };
        let peers: Vec<(String, String)> =
            (0..self.sched.nodes).filter(|&j| j != i).map(|j| (self.name(j), format!("n{j}:7000"))).collect();
        let mut cfg = NodeConfig::new(
            &slot.name,
            std::path::PathBuf::from(&slot.name),
            &slot.addr,
            peers,
            SECRET.to_vec(),
        );
        cfg.mode = self.sched.mode;
        cfg.mirror = self.sched.mirror;
        cfg.commit_timeout = self.sched.commit_timeout;
        cfg.timing = LeaseTiming { ttl: self.sched.ttl, margin: self.sched.margin };
        cfg.tick = self.sched.tick;
        cfg.prefix = PREFIX.into();
        cfg.options = node_options();
        cfg.peer_timeout = Duration::from_millis(500);
        cfg.env = Env { clock: clock.clone(), net };
        let disk: Arc<dyn Disk> = Arc::new(io);
        cfg.disk = Some(disk);
        let clients = self.sched.clients;
        cfg.bootstrap = Some(Arc::new(move |db: &Database| create_tables(db, clients)));
        let (ha, stop, stop_cv) = (inc.ha.clone(), inc.stop.clone(), inc.stop_cv.clone());
        let name = slot.name.clone();
        slot.inc = Some(inc);
        drop(nodes);
        self.note(format!("{name} starts"));
        let w = self.me.upgrade().expect("the world is alive");
        let spawned = self.sim.spawn_in(group, &format!("{name}-boot"), move || {
            w.boot(i, cfg, store, ha, stop, stop_cv);
        });
        if let Err(e) = spawned {
            self.sim.fail(format!("cannot start a task: {e}"));
        }
    }

    /// The node's "process": starts its agent and clients, and stops them when asked.
    fn boot(
        self: Arc<Self>,
        i: usize,
        cfg: NodeConfig,
        store: NodeStore,
        ha_slot: Arc<Mutex<Option<Arc<HaNode>>>>,
        stop: Arc<AtomicBool>,
        stop_cv: Arc<(Mutex<()>, Cond)>,
    ) {
        let clock = cfg.env.clock.clone();
        let w = self.me.clone();
        let events = Arc::new(move |e: &NodeEvent| {
            if let Some(w) = w.upgrade() {
                w.node_event(i, e);
            }
        });
        let ha = match HaNode::start(cfg, Arc::new(store), events) {
            Ok(h) => Arc::new(h),
            Err(e) => {
                self.note(format!("n{i} could not start: {e}"));
                // Down until the heal phase restarts it.
                self.mark_down(i);
                return;
            }
        };
        *lock(&ha_slot) = Some(ha.clone());
        let mut clients = Vec::new();
        for c in 0..self.sched.clients {
            let (w, ha, stop) = (self.clone(), ha.clone(), stop.clone());
            let clock2 = clock.clone();
            match clock.spawn(&format!("n{i}-client{c}"), move || w.client(i, c, &ha, &stop, clock2)) {
                Ok(t) => clients.push(t),
                Err(e) => self.sim.fail(format!("cannot start a client: {e}")),
            }
        }
        // Wait until asked to stop.
        {
            let (m, cv) = &*stop_cv;
            let mut g = lock(m);
            while !stop.load(Ordering::Acquire) {
                g = cv.wait(m, g);
            }
        }
        for t in clients {
            t.join();
        }
        ha.stop();
        *lock(&ha_slot) = None;
        drop(ha);
        self.note(format!("n{i} stopped"));
    }

    fn mark_down(&self, i: usize) {
        let mut nodes = lock(&self.nodes);
        if let Some(inc) = nodes[i].inc.take() {
            self.sim.kill(inc.group);
            self.net.kill_node(&nodes[i].name);
            inc.io.die();
            nodes[i].disk.process_died();
        }
    }

    fn node_event(&self, i: usize, e: &NodeEvent) {
        if let NodeEvent::Leader { epoch, .. } = e {
            let at = self.sim.now();
            lock(&self.facts).leaders.push(LeaderEvent { node: i, epoch: *epoch, at });
        }
        if !matches!(e, NodeEvent::Note(n) if n.contains("may not take over")) {
            self.note(format!("n{i}: {e}"));
        }
    }

    /// True while node `i`'s incarnation `group` is alive (acknowledgements of a dead process
    /// reached nobody).
    fn alive(&self, group: Group) -> bool {
        !self.sim.is_killed(group)
    }

    fn client(&self, i: usize, c: usize, ha: &HaNode, stop: &AtomicBool, clock: Arc<dyn Clock>) {
        let group = self.sim.current_group();
        let mut rng = Rng::new(self.sched.seed ^ ((i as u64) << 40) ^ ((c as u64) << 32) ^ group as u64);
        let keys: Vec<i64> = (0..KEYS_PER_CLIENT).map(|k| c as i64 * KEYS_PER_CLIENT + k).collect();
        // Ids this client inserted and was told so, not yet deleted.
        let mut mine: Vec<i64> = Vec::new();
        let mut seen_epoch = 0;
        while !stop.load(Ordering::Acquire) {
            if self.quiet.load(Ordering::Acquire) {
                clock.sleep(Duration::from_millis(50));
                continue;
            }
            let Some(lead) = ha.leading() else {
                clock.sleep(Duration::from_millis(20 + rng.below(80)));
                continue;
            };
            if lead.epoch != seen_epoch {
                seen_epoch = lead.epoch;
                if let Err(why) = self.check_new_leader(i, &lead) {
                    self.sim.fail(why);
                    return;
                }
            }
            let op = rng.below(10);
            if op < 6 || mine.is_empty() {
                let id = self.next_id.fetch_add(1, Ordering::AcqRel);
                let k = keys[rng.below(keys.len() as u64) as usize];
                let r = insert_tx(&lead.db, id, k, i);
                self.record(Who { node: i, group, epoch: lead.epoch }, id, k, AckKind::Insert, r);
                if self.facts_has_ack(id) {
                    mine.push(id);
                }
            } else if op < 8 {
                let id = mine.swap_remove(rng.below(mine.len() as u64) as usize);
                let r = delete_tx(&lead.db, id);
                self.record(Who { node: i, group, epoch: lead.epoch }, id, 0, AckKind::Delete, r);
            } else {
                let id = mine[rng.below(mine.len() as u64) as usize];
                if let Err(why) = self.check_read(i, &lead, id) {
                    self.sim.fail(why);
                    return;
                }
            }
            drop(lead);
            clock.sleep(Duration::from_millis(rng.below(30)));
        }
    }

    fn facts_has_ack(&self, id: i64) -> bool {
        lock(&self.facts).acked_insert(id)
    }

    /// Records a transaction's outcome: acknowledged (only while the node is alive), failed
    /// before its commit (must not be there), or unknown.
    fn record(&self, who: Who, id: i64, k: i64, kind: AckKind, r: Result<(), (nvmedb::Error, bool)>) {
        let at = self.sim.now();
        let mut f = lock(&self.facts);
        match r {
            Ok(()) if self.alive(who.group) => {
                f.acks.push(Ack { id, key: k, kind, node: who.node, epoch: who.epoch, at });
            }
            Ok(()) => {
                f.unknown.insert((id, kind));
            }
            Err((_, true)) => {
                f.unknown.insert((id, kind));
            }
            Err((_, false)) => {
                if kind == AckKind::Insert {
                    f.never.insert(id);
                } else {
                    f.unknown.insert((id, kind));
                }
            }
        }
    }

    /// A node that just became the leader holds every commit acknowledged so far (except in
    /// lazy mode, which promises nothing across a failover).
    fn check_new_leader(&self, i: usize, lead: &Leadership) -> Result<(), String> {
        if self.sched.mode == ReplicationMode::Lazy {
            return Ok(());
        }
        let facts = lock(&self.facts).clone();
        let (acks, gone) = match read_ids(&lead.db) {
            Ok(x) => x,
            // The node may be failing already (fenced, a crash in progress): nothing to check.
            Err(_) => return Ok(()),
        };
        if let Some(v) = check::acked_present(&facts, &acks, &gone) {
            return Err(format!(
                "n{i}, the new leader of epoch {}, lacks an acknowledged commit: {v}",
                lead.epoch
            ));
        }
        Ok(())
    }

    /// A read on the primary that acknowledged `id` in its current epoch sees it (or its
    /// acknowledged deletion).
    fn check_read(&self, i: usize, lead: &Leadership, id: i64) -> Result<(), String> {
        let (ack, pending_delete) = {
            let f = lock(&self.facts);
            let a = f.acks.iter().rev().find(|a| a.id == id).cloned();
            (a, f.unknown.contains(&(id, AckKind::Delete)))
        };
        let Some(a) = ack else { return Ok(()) };
        if a.node != i || a.epoch != lead.epoch || pending_delete {
            return Ok(());
        }
        let acks = match lead.db.table("acks") {
            Ok(t) => t,
            Err(_) => return Ok(()),
        };
        match acks.read(&Value::Int(id), |_| ()) {
            Ok(found) => {
                let want = a.kind == AckKind::Insert;
                if found.is_some() != want {
                    return Err(format!(
                        "n{i} (epoch {}) read id {id} as {}, after acknowledging its {:?}",
                        lead.epoch,
                        if found.is_some() { "present" } else { "absent" },
                        a.kind
                    ));
                }
                Ok(())
            }
            Err(_) => Ok(()),
        }
    }

    /// The leader now, if exactly one node leads: (node, its leadership).
    fn leader(&self) -> Option<(usize, Leadership)> {
        let nodes = lock(&self.nodes);
        let mut found = None;
        for (i, n) in nodes.iter().enumerate() {
            let Some(inc) = &n.inc else { continue };
            let ha = lock(&inc.ha).clone();
            if let Some(l) = ha.and_then(|h| h.leading()) {
                if found.is_some() {
                    return None;
                }
                found = Some((i, l));
            }
        }
        found
    }

    /// True when a node leads, every other node runs, and every standby holds everything the
    /// leader appended (its shadow counter).
    fn converged(&self) -> bool {
        let Some((_, lead)) = self.leader() else { return false };
        if lock(&self.nodes).iter().any(|n| n.inc.is_none()) {
            return false;
        }
        let st = lead.log.status();
        st.fenced.is_none() && st.standbys.iter().all(|s| s.shadow >= st.appended)
    }

    /// Heal everything, wait for the cluster to converge, commit once more, converge again.
    fn heal_and_converge(&self) -> Result<(), String> {
        let clock = self.sim.clock();
        self.note("heal: links, disks, stopped and crashed nodes".into());
        self.net.heal_all();
        for i in 0..self.sched.nodes {
            let (down, group) = {
                let nodes = lock(&self.nodes);
                nodes[i].disk.set_full(false);
                (nodes[i].inc.is_none(), nodes[i].inc.as_ref().map(|n| n.group))
            };
            if let Some(g) = group {
                self.sim.resume(g);
                if let Some(inc) = &lock(&self.nodes)[i].inc {
                    inc.io.plan_crash(CrashPlan { at: u64::MAX, cut: Box::new(|| {}) });
                }
            }
            if down {
                self.start_node(i);
            }
        }
        let wait = |what: &str| -> Result<(), String> {
            let deadline = clock.now() + Duration::from_secs(60);
            while !self.converged() {
                if clock.now() >= deadline {
                    return Err(format!("the cluster did not converge within 60 s after {what}"));
                }
                // A node that could not start (or crashed in its start) is started again.
                for i in 0..self.sched.nodes {
                    if lock(&self.nodes)[i].inc.is_none() {
                        self.start_node(i);
                    }
                }
                clock.sleep(Duration::from_millis(100));
            }
            Ok(())
        };
        wait("healing")?;
        self.note("converged".into());
        // One more transaction through the converged cluster.
        let deadline = clock.now() + Duration::from_secs(30);
        let mut last = "no single node led".to_string();
        loop {
            if let Some((i, lead)) = self.leader() {
                let id = self.next_id.fetch_add(1, Ordering::AcqRel);
                let group = lock(&self.nodes)[i].inc.as_ref().map(|n| n.group).unwrap_or(0);
                let r = insert_tx(&lead.db, id, 0, i);
                match &r {
                    Ok(()) => last.clear(),
                    Err((e, _)) => last = format!("n{i} at epoch {}: {e}", lead.epoch),
                }
                self.record(Who { node: i, group, epoch: lead.epoch }, id, 0, AckKind::Insert, r);
                if last.is_empty() {
                    break;
                }
            } else {
                last = "no single node led".to_string();
            }
            if clock.now() >= deadline {
                return Err(format!(
                    "no transaction went through in 30 s after the cluster converged (the last attempt: {last})"
                ));
            }
            clock.sleep(Duration::from_millis(100));
        }
        wait("the last transaction")?;
        self.note("converged after the last transaction".into());
        Ok(())
    }

    /// Stops every node cleanly (standbys first).
    fn stop_all(&self) {
        let lead = self.leader().map(|l| l.0);
        let mut order: Vec<usize> = (0..self.sched.nodes).filter(|&i| Some(i) != lead).collect();
        order.extend(lead);
        for i in order {
            let nodes = lock(&self.nodes);
            if let Some(inc) = &nodes[i].inc {
                inc.stop.store(true, Ordering::Release);
                let (m, cv) = &*inc.stop_cv;
                let _g = lock(m);
                cv.notify_all();
            }
        }
    }
}

/// A failed schedule: its seed and schedule, what was violated, and the end of its trace.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The schedule.
    pub schedule: Schedule,
    /// What went wrong.
    pub why: String,
    /// The last events of the run.
    pub trace: Vec<String>,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "SIMULATION FAILED: {}", self.why)?;
        write!(f, "{}", self.schedule.describe())?;
        writeln!(
            f,
            "replay: NVMEDB_SIM_SEED={} cargo test -p nvmedb-sim --test sim -- --nocapture",
            self.schedule.seed
        )?;
        writeln!(f, "last events:")?;
        for l in self.trace.iter().rev().take(80).collect::<Vec<_>>().into_iter().rev() {
            writeln!(f, "  {l}")?;
        }
        Ok(())
    }
}

/// Runs and checks the schedule of `seed` (see the module documentation).
pub fn run_seed(seed: u64) -> Result<Outcome, Box<Failure>> {
    run_schedule(Schedule::from_seed(seed), None)
}

/// Runs and checks `sched`, every thread of the simulation on CPU `cpu` when set (runs on
/// different CPUs run side by side; see [`Sim::on_cpu`]).
pub fn run_schedule(sched: Schedule, cpu: Option<usize>) -> Result<Outcome, Box<Failure>> {
    let w = World::new(sched.clone(), cpu);
    let r = run_world(&w);
    // Whatever happened, no task may outlive the run.
    let left = w.sim.shutdown();
    if std::env::var("NVMEDB_SIM_TRACE").is_ok() {
        for l in lock(&w.trace).iter() {
            eprintln!("{l}");
        }
    }
    let r = match (r, left.is_empty()) {
        (Ok(_), false) => Err(format!("tasks did not end when their nodes were killed: {}", left.join(", "))),
        (r, _) => r,
    };
    let trace = lock(&w.trace).clone();
    r.map_err(|why| Box::new(Failure { schedule: sched, why, trace }))
}

fn run_world(w: &Arc<World>) -> Result<Outcome, String> {
    let sim = w.sim.clone();
    for i in 0..w.sched.nodes {
        w.start_node(i);
    }
    let w2 = w.clone();
    let done = Arc::new(AtomicBool::new(false));
    let d2 = done.clone();
    sim.spawn_in(0, "nemesis", move || {
        w2.nemesis();
        let clock = w2.sim.clock();
        let left = w2.sched.run_for.saturating_sub(clock.now());
        clock.sleep(left);
        w2.quiet.store(true, Ordering::Release);
        let r = w2.heal_and_converge();
        if let Err(why) = r {
            w2.sim.fail(why);
        }
        w2.stop_all();
        if std::env::var("NVMEDB_SIM_TRACE").is_ok() {
            let c = w2.sim.clock();
            c.sleep(Duration::from_secs(1));
            w2.note(format!("1 s after the stop: {}", w2.sim.describe_live()));
        }
        d2.store(true, Ordering::Release);
    })
    .map_err(|e| format!("cannot start the nemesis: {e}"))?;
    // Run until the nemesis has stopped every node and every task has ended.
    let horizon = w.sched.run_for + Duration::from_secs(600);
    match sim.run_until(horizon)? {
        Stop::Quiet => {}
        Stop::Deadline => {
            return Err(format!(
                "the run did not end within {} s of simulated time: {}",
                horizon.as_secs(),
                sim.describe_live()
            ))
        }
    }
    if !done.load(Ordering::Acquire) {
        return Err(format!("every task waits forever (a deadlock): {}", sim.describe_live()));
    }
    sim.reap();
    // Every disk loses power once more after the clean stop: nothing may be lost.
    let disks: Vec<SimDisk> = lock(&w.nodes).iter().map(|n| n.disk.clone()).collect();
    for d in &disks {
        d.power_cut(&mut lock(&w.rng));
    }
    let facts = lock(&w.facts).clone();
    let mut states = Vec::new();
    for (i, d) in disks.iter().enumerate() {
        let st = check::open_offline(&sim, d, &format!("n{i}"), node_options())
            .map_err(|e| format!("n{i}'s files after the run: {e}"))?;
        states.push(st);
    }
    let lazy_lost = check::final_state(&w.sched, &facts, &states)?;
    let (steps, digest) = sim.progress();
    if std::env::var("NVMEDB_SIM_PROFILE").is_ok() {
        eprintln!("steps by task: {:?}", sim.profile());
    }
    Ok(Outcome {
        steps,
        sim_ms: sim.now().as_millis() as u64,
        acks: facts.acks.len(),
        leaders: facts.leaders.len(),
        digest: check::digest(digest, &states),
        lazy_lost,
    })
}
