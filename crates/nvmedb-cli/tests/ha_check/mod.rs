//! The checks of a real cluster's run that `ha_cluster.rs` (kill -9, SIGSTOP) and
//! `ha_partitions.rs` (network partitions) share, once every node has stopped: what the nodes
//! printed (every acknowledged id once, one acknowledging node per epoch, leader epochs
//! growing, acknowledgements after a newer leader took over) and the last leader's directory
//! (every acknowledged commit there, none half there, indexes agreeing with the rows).

use nvmedb::repl::{open_primary, ReplConfig, ReplicationMode};
use nvmedb::Value;
use nvmedb_lab::cluster::{Event, NodeEvent};
use nvmedb_lab::workload::failover::ROWS;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// What the nodes printed, checked.
pub struct Acks {
    /// Every acknowledged id.
    pub acked: BTreeSet<i64>,
    /// Epochs in which commits were acknowledged.
    pub epochs: usize,
    /// The node that led last.
    pub final_leader: usize,
    /// Acknowledgements printed after a newer epoch's leader took over (their lines).
    pub late: Vec<String>,
}

/// Reads the events of a stopped cluster. Panics when an id was acknowledged twice, when two
/// nodes acknowledged in one epoch, when leader epochs did not grow, or when nobody led.
pub fn acks(events: &[Event]) -> Acks {
    let mut by_epoch: BTreeMap<u64, BTreeSet<usize>> = BTreeMap::new();
    let mut acked = BTreeSet::new();
    let mut last_leader_epoch = 0;
    let mut final_leader = None;
    for ev in events {
        match &ev.ev {
            NodeEvent::Ack { epoch, id, .. } => {
                by_epoch.entry(*epoch).or_default().insert(ev.node);
                assert!(acked.insert(*id), "id {id} acknowledged twice ({})", ev.line);
            }
            NodeEvent::Leader { epoch, .. } => {
                assert!(
                    *epoch > last_leader_epoch,
                    "leader epochs must grow: {} after epoch {last_leader_epoch}",
                    ev.line
                );
                last_leader_epoch = *epoch;
                final_leader = Some(ev.node);
            }
            _ => {}
        }
    }
    for (e, nodes) in &by_epoch {
        assert_eq!(nodes.len(), 1, "epoch {e}: commits acknowledged by nodes {nodes:?}");
    }
    let takeovers: BTreeMap<u64, u128> = events
        .iter()
        .filter_map(|e| match e.ev {
            NodeEvent::Leader { epoch, ns } => Some((epoch, ns)),
            _ => None,
        })
        .collect();
    let late = events
        .iter()
        .filter(|e| match e.ev {
            NodeEvent::Ack { epoch, ns, .. } => takeovers.range(epoch + 1..).any(|(_, t)| ns > *t),
            _ => false,
        })
        .map(|e| e.line.clone())
        .collect();
    Acks { acked, epochs: by_epoch.len(), final_leader: final_leader.expect("a leader"), late }
}

/// Opens the last leader's directory `dir` and checks it: both tables pass `check_integrity`,
/// and every `t` row points at an `acks` row that is there (no transaction half there).
/// Returns the acknowledged ids missing there.
pub fn lost_commits(dir: &Path, acked: &BTreeSet<i64>) -> Vec<i64> {
    let cfg = ReplConfig { mode: ReplicationMode::Lazy, secret: b"check".to_vec(), ..ReplConfig::default() };
    let (db, _log) = open_primary(dir, nvmedb::Options::default(), cfg, None).expect("open the last primary");
    let t = db.table("t").unwrap();
    let acks = db.table("acks").unwrap();
    t.check_integrity().unwrap();
    acks.check_integrity().unwrap();
    let mut present = BTreeSet::new();
    acks.scan(|r| {
        present.insert(r.int(0));
        Ok(true)
    })
    .unwrap();
    for k in 0..ROWS {
        let v = t.read(&Value::Int(k), |r| r.int(1)).unwrap().expect("row");
        assert!(v == -1 || present.contains(&v), "row {k} holds id {v} whose transaction is missing");
    }
    acked.difference(&present).copied().collect()
}
