//! The checks after (and during) a schedule.
//!
//! Owns: [`Facts`] (what clients were told: acknowledged commits with their node, epoch and
//! time; transactions whose outcome is unknown; transactions that failed before committing;
//! each leader's epoch and the time it began to lead), the offline reading of a node's files
//! after the run ([`open_offline`]: recovery on its disk, then every row and an integrity check
//! of every table), and the verdicts:
//! - every acknowledged commit is on every node once the cluster healed (its insert present,
//!   its delete applied) — except in lazy mode, which promises nothing across a failover (lost
//!   ones are counted there);
//! - no transaction is half there (an id is never in both `acks` and `gone`; every `t` row
//!   points at an id that was inserted), none that failed before its commit is there;
//! - at most one node acknowledges in an epoch; no commit is acknowledged in an epoch after a
//!   newer epoch's leader began to lead (its promotion had fenced the old synchronous set);
//!   leaders' epochs grow;
//! - every node's tables are identical and pass `check_integrity` (every row has exactly its
//!   index entries).

use crate::disk::{DiskIo, SimDisk};
use crate::sched::Sim;
use crate::schedule::Schedule;
use nvmedb::repl::disk::Disk;
use nvmedb::repl::{ReplicaLog, ReplicaLogOpener, ReplicationMode};
use nvmedb::wal::{FileLogOpener, LogOpener};
use nvmedb::{Database, Options};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// What a transaction did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum AckKind {
    /// Inserted `acks` row `id` (and pointed a `t` row at it).
    Insert,
    /// Deleted `acks` row `id` and inserted it into `gone`.
    Delete,
}

/// One acknowledged commit.
#[derive(Debug, Clone)]
pub struct Ack {
    /// The row id.
    pub id: i64,
    /// The `t` row the insert pointed at.
    pub key: i64,
    /// Insert or delete.
    pub kind: AckKind,
    /// The node that acknowledged it.
    pub node: usize,
    /// That node's epoch as leader.
    pub epoch: u64,
    /// Simulated time of the acknowledgement.
    pub at: Duration,
}

/// A node began to lead (its synchronous set recorded, its database handed to clients).
#[derive(Debug, Clone)]
pub struct LeaderEvent {
    /// The node.
    pub node: usize,
    /// Its epoch.
    pub epoch: u64,
    /// When.
    pub at: Duration,
}

/// What the clients were told during a run.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// Acknowledged commits, in order.
    pub acks: Vec<Ack>,
    /// Transactions whose commit was attempted but not acknowledged.
    pub unknown: BTreeSet<(i64, AckKind)>,
    /// Inserts that failed before their commit (must never be there).
    pub never: BTreeSet<i64>,
    /// Leaders, in the order they began.
    pub leaders: Vec<LeaderEvent>,
}

impl Facts {
    /// True when the insert of `id` was acknowledged.
    pub fn acked_insert(&self, id: i64) -> bool {
        self.acks.iter().rev().any(|a| a.id == id && a.kind == AckKind::Insert)
    }
}

/// The first acknowledged commit that `acks`/`gone` (a node's rows) do not reflect, if any.
pub fn acked_present(f: &Facts, acks: &BTreeSet<i64>, gone: &BTreeSet<i64>) -> Option<String> {
    for a in &f.acks {
        match a.kind {
            AckKind::Insert if !acks.contains(&a.id) && !gone.contains(&a.id) => {
                return Some(format!(
                    "insert of id {} (acknowledged by n{} in epoch {} at {:.3}s) is missing",
                    a.id,
                    a.node,
                    a.epoch,
                    a.at.as_secs_f64()
                ))
            }
            AckKind::Delete if acks.contains(&a.id) || !gone.contains(&a.id) => {
                return Some(format!(
                    "delete of id {} (acknowledged by n{} in epoch {} at {:.3}s) is not applied",
                    a.id,
                    a.node,
                    a.epoch,
                    a.at.as_secs_f64()
                ))
            }
            _ => {}
        }
    }
    None
}

/// A node's tables as recovery finds them on its disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeState {
    /// `t`: key → id.
    pub t: BTreeMap<i64, i64>,
    /// `acks`: id → (k, node).
    pub acks: BTreeMap<i64, (i64, i64)>,
    /// `gone`: ids.
    pub gone: BTreeSet<i64>,
}

/// Opens the node's files on `disk` as the node's next start would (its replica log when it
/// was a standby or a promoted one, else its file log), runs recovery, reads every table and
/// checks its integrity. Runs outside the simulation's tasks, after the run.
pub fn open_offline(sim: &Sim, disk: &SimDisk, name: &str, options: Options) -> Result<NodeState, String> {
    let io = DiskIo::new(disk, sim, name);
    let e = |e: nvmedb::Error| e.to_string();
    let data = io.data().map_err(e)?;
    let replica = io.replica().map_err(e)?;
    let file_log =
        FileLogOpener { copies: io.file_log(&options).map_err(e)?, options: options.wal_options.clone() };
    let log: Box<dyn LogOpener> = if ReplicaLog::exists(replica.as_ref()) && file_log.is_empty().map_err(e)? {
        Box::new(ReplicaLogOpener(ReplicaLog::open(replica, 0).map_err(e)?))
    } else {
        Box::new(file_log)
    };
    let options = Options { create_if_missing: false, ..options };
    let db = Database::open_with_log(data, Some(log), options).map_err(|e| format!("recovery: {e}"))?;
    let mut st = NodeState { t: BTreeMap::new(), acks: BTreeMap::new(), gone: BTreeSet::new() };
    for (name, _) in [("t", 0), ("acks", 0), ("gone", 0)] {
        let tab = db.table(name).map_err(e)?;
        tab.check_integrity().map_err(|e| format!("table {name}: {e}"))?;
        tab.scan(|r| {
            match name {
                "t" => {
                    st.t.insert(r.int(0), r.int(1));
                }
                "acks" => {
                    st.acks.insert(r.int(0), (r.int(1), r.int(2)));
                }
                _ => {
                    st.gone.insert(r.int(0));
                }
            }
            Ok(true)
        })
        .map_err(e)?;
    }
    db.close().map_err(e)?;
    Ok(st)
}

/// The verdicts on the run's facts and every node's final tables; returns how many
/// acknowledged commits lazy mode lost (always 0 in the other modes, or it is an error).
pub fn final_state(s: &Schedule, f: &Facts, nodes: &[NodeState]) -> Result<usize, String> {
    // At most one node acknowledges in an epoch; none after a newer leader began.
    let mut by_epoch: BTreeMap<u64, usize> = BTreeMap::new();
    for a in &f.acks {
        if let Some(n) = by_epoch.insert(a.epoch, a.node) {
            if n != a.node {
                return Err(format!(
                    "two nodes acknowledged commits in epoch {}: n{n} and n{}",
                    a.epoch, a.node
                ));
            }
        }
    }
    let mut top = 0;
    for l in &f.leaders {
        if l.epoch <= top {
            return Err(format!("n{} began to lead epoch {} after epoch {top} had led", l.node, l.epoch));
        }
        top = l.epoch;
    }
    if s.mode != ReplicationMode::Lazy {
        for a in &f.acks {
            if let Some(l) = f.leaders.iter().find(|l| l.epoch > a.epoch && l.at < a.at) {
                return Err(format!(
                    "n{} acknowledged id {} in epoch {} at {:.3}s, after n{} began to lead epoch {} at {:.3}s (the old primary was not fenced)",
                    a.node,
                    a.id,
                    a.epoch,
                    a.at.as_secs_f64(),
                    l.node,
                    l.epoch,
                    l.at.as_secs_f64()
                ));
            }
        }
    }
    // Every node the same, each consistent.
    let first = &nodes[0];
    for (i, n) in nodes.iter().enumerate().skip(1) {
        if n != first {
            let diff = describe_diff(first, n);
            return Err(format!("n0 and n{i} hold different tables after the cluster healed: {diff}"));
        }
    }
    let st = first;
    for id in st.acks.keys() {
        if st.gone.contains(id) {
            return Err(format!("id {id} is in acks and in gone (half a delete)"));
        }
        if f.never.contains(id) {
            return Err(format!("id {id} is there although its transaction failed before committing"));
        }
    }
    for (k, v) in &st.t {
        if *v != 0 && !st.acks.contains_key(v) && !st.gone.contains(v) {
            return Err(format!(
                "t row {k} points at id {v}, whose insert is not there (half a transaction)"
            ));
        }
    }
    let acks: BTreeSet<i64> = st.acks.keys().copied().collect();
    let lost = f
        .acks
        .iter()
        .filter(|a| match a.kind {
            AckKind::Insert => !acks.contains(&a.id) && !st.gone.contains(&a.id),
            AckKind::Delete => acks.contains(&a.id) || !st.gone.contains(&a.id),
        })
        .count();
    if s.mode == ReplicationMode::Lazy {
        return Ok(lost);
    }
    if let Some(v) = acked_present(f, &acks, &st.gone) {
        return Err(format!("after the cluster healed: {v} ({lost} acknowledged commits lost in all)"));
    }
    Ok(0)
}

fn describe_diff(a: &NodeState, b: &NodeState) -> String {
    let mut out = Vec::new();
    for (k, v) in &a.t {
        if b.t.get(k) != Some(v) {
            out.push(format!("t[{k}] = {v} vs {:?}", b.t.get(k)));
        }
    }
    let only_a: Vec<_> = a.acks.keys().filter(|k| !b.acks.contains_key(k)).take(5).collect();
    let only_b: Vec<_> = b.acks.keys().filter(|k| !a.acks.contains_key(k)).take(5).collect();
    if !only_a.is_empty() || !only_b.is_empty() {
        out.push(format!("acks only in the first: {only_a:?}, only in the second: {only_b:?}"));
    }
    if a.gone != b.gone {
        out.push(format!("gone: {} vs {} ids", a.gone.len(), b.gone.len()));
    }
    out.truncate(6);
    out.join("; ")
}

/// Folds the final tables into the run's digest.
pub fn digest(d: u64, nodes: &[NodeState]) -> u64 {
    let mut h = d;
    for n in nodes {
        for (k, v) in &n.t {
            h = (h ^ (*k as u64).rotate_left(7) ^ (*v as u64)).wrapping_mul(0x100_0000_01b3);
        }
        for k in n.acks.keys().chain(n.gone.iter()) {
            h = (h ^ *k as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    h
}
