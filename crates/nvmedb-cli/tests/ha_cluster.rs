//! Automatic failover end to end: three etcd members and three `nvmedb node --ha etcd://…`
//! processes on loopback (quorum 1 of 2), each with three committing clients printing every
//! acknowledged commit. Faults, in turn: kill -9 of the primary (restarted: it rejoins as a
//! standby), SIGSTOP then SIGCONT of the primary (it must not acknowledge after losing its
//! lease), kill -9 of the etcd leader, kill -9 of a standby. After the run the standbys and then
//! the primary are stopped, and the checker opens the last primary's directory:
//! - every acknowledged commit is there, no transaction is half there, the indexes agree with
//!   the rows;
//! - no two nodes acknowledged commits in one epoch; epochs of successive leaders grow;
//! - a SIGSTOPped primary acknowledges at most the commits that were already past their
//!   acknowledgement check when it stopped (one per client).
//!
//! Scale: `NVMEDB_HA_TRIALS` faults (default 5: one of each kind plus another primary kill);
//! `NVMEDB_HA_KINDS` limits them (e.g. `kill-primary,stop-primary` for a failover soak);
//! `NVMEDB_HA_TTL` lease TTL seconds (default 2). Needs `etcd` (Debian's etcd-server).

mod ha_check;
#[path = "../../nvmedb/tests/support/mod.rs"]
mod support;

use nvmedb_lab::cluster::{Cluster, ClusterSpec};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};
use support::TmpDir;

const NODES: usize = 3;
const CLIENTS: usize = 3;
const CLUSTER: &str = "t";

fn env_u64(k: &str, d: u64) -> u64 {
    std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d)
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

#[test]
fn automatic_failover_on_etcd_loses_no_acknowledged_commit() {
    if !nvmedb_testkit::needs(nvmedb_testkit::ETCD) {
        return;
    }
    let trials = env_u64("NVMEDB_HA_TRIALS", 5);
    let ttl = env_u64("NVMEDB_HA_TTL", 2);
    let tmp = TmpDir::new("ha-cluster");
    let spec = ClusterSpec::new(PathBuf::from(env!("CARGO_BIN_EXE_nvmedb")), tmp.join("c"), ttl);
    assert_eq!((spec.nodes, spec.clients, spec.name.as_str()), (NODES, CLIENTS, CLUSTER));
    let mut c = Cluster::start(spec).unwrap();
    let (mut leader, mut epoch) = c.settled(20, "bootstrap").unwrap();
    let mut failover_times = Vec::new();
    let mut stop_late_acks = 0;
    let all = ["kill-primary", "stop-primary", "kill-etcd-leader", "kill-standby", "kill-primary"];
    let chosen = std::env::var("NVMEDB_HA_KINDS").unwrap_or_default();
    let kinds: Vec<&str> = if chosen.is_empty() {
        all.to_vec()
    } else {
        all.iter().copied().filter(|k| chosen.split(',').any(|c| c == *k)).collect()
    };
    for trial in 0..trials {
        let kind = kinds[trial as usize % kinds.len()];
        let ctx = format!("trial {trial} ({kind}, leader n{leader} at epoch {epoch})");
        eprintln!("{ctx}");
        let t0 = Instant::now();
        match kind {
            "kill-primary" => {
                c.kill9(leader).unwrap();
                let (l, e, t) = c.new_leader(epoch, t0, &ctx).unwrap();
                assert_ne!(l, leader, "{ctx}");
                failover_times.push(t);
                c.spawn(leader).unwrap();
                assert!(e > epoch && l != leader, "{ctx}");
            }
            "stop-primary" => {
                c.signal(leader, libc::SIGSTOP).unwrap();
                let (l, e, t) = c.new_leader(epoch, t0, &ctx).unwrap();
                assert_ne!(l, leader, "{ctx}");
                failover_times.push(t);
                // Everything it printed before it stopped has been read by now (the new leader
                // took at least a lease TTL). What it prints after it continues must be at most
                // the commits that had passed their acknowledgement check when it stopped.
                let resumed = Instant::now();
                c.signal(leader, libc::SIGCONT).unwrap();
                let old = leader;
                let deadline = Instant::now() + Duration::from_secs(30);
                while !c.stepped_down_since(old, resumed) {
                    assert!(
                        Instant::now() < deadline,
                        "{ctx}: the resumed primary did not step down; {}",
                        c.tail(old)
                    );
                    std::thread::sleep(Duration::from_millis(20));
                }
                let late = c.acks_since(old, epoch, resumed);
                assert!(
                    late <= CLIENTS,
                    "{ctx}: the old primary acknowledged {late} commits after it resumed without its lease"
                );
                stop_late_acks += late;
                assert_ne!((l, e), (leader, epoch));
            }
            "kill-etcd-leader" => {
                let el = c.etcd.leader().expect("an etcd leader");
                c.etcd.kill(el);
                // Commits go on (the primary renews through the other two members).
                c.settled(20, &ctx).unwrap();
                c.etcd.restart(el).unwrap();
            }
            "kill-standby" => {
                let s = (leader + 1 + (trial as usize / kinds.len()) % (NODES - 1)) % NODES;
                c.kill9(s).unwrap();
                let before = Instant::now();
                let deadline = before + Duration::from_secs(30);
                while c.acks_since(leader, epoch, before) < 20 {
                    assert!(
                        Instant::now() < deadline,
                        "{ctx}: commits stopped with one standby down; {}",
                        c.tail(leader)
                    );
                    std::thread::sleep(Duration::from_millis(20));
                }
                c.spawn(s).unwrap();
            }
            _ => unreachable!(),
        }
        let (l, e) = c.settled(20, &ctx).unwrap();
        (leader, epoch) = (l, e);
    }
    // What an operator sees.
    let out = Command::new(env!("CARGO_BIN_EXE_nvmedb"))
        .args(["status", "--ha", &c.url(), "--cluster", CLUSTER])
        .output()
        .expect("nvmedb status --ha");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains(&format!("leader n{leader}  epoch {epoch}")), "{text}");
    assert_eq!(text.matches(" standby ").count(), NODES - 1, "{text}");
    println!("{text}");
    // Stop the standbys, then the primary (the last leader).
    for i in (0..NODES).filter(|&i| i != leader) {
        c.stop(i).unwrap();
    }
    c.stop(leader).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    // One node per epoch, epochs growing; no acknowledgement of an epoch after a later epoch's
    // leader took over, except the in-flight ones of a stopped primary (counted above).
    let ha_check::Acks { acked, epochs, final_leader, late } = ha_check::acks(&c.events());
    assert!(
        late.len() <= stop_late_acks,
        "{} acknowledgements after a newer leader took over ({stop_late_acks} in-flight ones of stopped primaries)",
        late.len()
    );
    // The last leader's directory holds every acknowledged commit.
    let lost = ha_check::lost_commits(&c.node_dir(final_leader), &acked);
    let mut ft = failover_times.clone();
    println!(
        "{trials} faults ({} failovers), {} acknowledged commits over {} epochs, {} lost; SIGSTOP: {stop_late_acks} in-flight acknowledgements after resuming; failover (fault -> first commit of the new leader) p50 {:?} p99 {:?} max {:?}, lease TTL {ttl} s",
        failover_times.len(),
        acked.len(),
        epochs,
        lost.len(),
        if ft.is_empty() { Duration::ZERO } else { pct(&mut ft, 0.5) },
        if ft.is_empty() { Duration::ZERO } else { pct(&mut ft, 0.99) },
        ft.iter().max().copied().unwrap_or_default(),
    );
    assert!(
        lost.is_empty(),
        "{} acknowledged commits lost, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
}
