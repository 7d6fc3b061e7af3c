//! Real network partitions: three etcd members and three `nvmedb node --ha etcd://…` processes
//! (quorum 1 of 2, three committing clients each, printing every acknowledged commit), each node
//! in a network namespace of its own (`ip netns`), joined by veth pairs to a bridge on which the
//! etcd members listen. During the workload the links between a random subset of the nodes and
//! the rest — and the coordination store on one side or the other — are cut (blackhole routes
//! inside the namespaces, both ways: TCP sees lost packets, as on a real network) and healed,
//! `NVMEDB_PARTITIONS` times (default 12; `scripts/soak.sh partitions` runs 50). After the run
//! the standbys, then the primary, are stopped, and the checker opens the last primary's
//! directory:
//! - every acknowledged commit is there, no transaction is half there, the indexes agree with
//!   the rows;
//! - no two nodes acknowledged commits in one epoch; leader epochs grow;
//! - no commit was acknowledged in an epoch after a newer epoch's leader took over (never two
//!   acknowledging primaries).
//!
//! Needs root (network namespaces), `ip` (iproute2) and `etcd`; without root the test says so
//! and passes, unless it runs under CI (`CI` set) or `NVMEDB_REQUIRE_NETNS` is set: then it fails.
//! (`.ci/run` runs as root and installs etcd, so there it runs.)

mod ha_check;
#[path = "../../nvmedb/tests/support/mod.rs"]
mod support;

use nvmedb::util::Rng;
use nvmedb_lab::cluster::{Cluster, ClusterHosts, ClusterSpec};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};
use support::TmpDir;

const NODES: usize = 3;
const CLIENTS: usize = 3;

fn env_u64(k: &str, d: u64) -> u64 {
    std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d)
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// The namespaces, veth pairs and bridge of one run; removed on drop.
struct Net {
    prefix: String,
    /// The bridge's address (etcd listens there).
    gw: String,
    /// Each node's address.
    ips: Vec<String>,
    /// Blackhole routes in place: (namespace index, destination).
    cuts: BTreeSet<(usize, String)>,
}

impl Net {
    fn ns(&self, i: usize) -> String {
        format!("{}n{i}", self.prefix)
    }

    fn setup(n: usize) -> Result<Self, String> {
        let pid = std::process::id();
        let prefix = format!("nvp{}", pid % 100_000);
        let subnet = format!("10.213.{}", pid % 250);
        let mut net = Net {
            prefix: prefix.clone(),
            gw: format!("{subnet}.1"),
            ips: (0..n).map(|i| format!("{subnet}.{}", 10 + i)).collect(),
            cuts: BTreeSet::new(),
        };
        let br = format!("{prefix}b");
        ip(&["link", "add", &br, "type", "bridge"])?;
        ip(&["addr", "add", &format!("{}/24", net.gw), "dev", &br])?;
        ip(&["link", "set", &br, "up"])?;
        for i in 0..n {
            let (ns, h, c) = (net.ns(i), format!("{prefix}h{i}"), format!("{prefix}c{i}"));
            ip(&["netns", "add", &ns])?;
            ip(&["link", "add", &h, "type", "veth", "peer", "name", &c])?;
            ip(&["link", "set", &c, "netns", &ns])?;
            ip(&["link", "set", &h, "master", &br])?;
            ip(&["link", "set", &h, "up"])?;
            ip(&["-n", &ns, "addr", "add", &format!("{}/24", net.ips[i]), "dev", &c])?;
            ip(&["-n", &ns, "link", "set", &c, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        // Reachability before anything starts: every node reaches the bridge and each other
        // (checked where `ping` is installed; otherwise a broken set-up shows as a cluster that
        // does not settle).
        let dsts: Vec<String> = net.ips.iter().cloned().chain(std::iter::once(net.gw.clone())).collect();
        let has_ping = Command::new("ping").arg("-V").output().is_ok();
        for i in (0..n).filter(|_| has_ping) {
            for dst in &dsts {
                let out = Command::new("ip")
                    .args(["netns", "exec", &net.ns(i), "ping", "-c", "1", "-W", "2", dst])
                    .output();
                if let Ok(o) = out {
                    if !o.status.success() {
                        let ns = net.ns(i);
                        net.teardown();
                        return Err(format!("{ns} cannot reach {dst}"));
                    }
                }
            }
        }
        Ok(net)
    }

    /// Cuts (or heals) the path between namespace `i` and address `dst`, one way.
    fn set(&mut self, i: usize, dst: &str, cut: bool) {
        let key = (i, dst.to_string());
        let ns = self.ns(i);
        let route = format!("{dst}/32");
        if cut && self.cuts.insert(key.clone()) {
            ip(&["-n", &ns, "route", "add", "blackhole", &route]).expect("cut a link");
        } else if !cut && self.cuts.remove(&key) {
            ip(&["-n", &ns, "route", "del", "blackhole", &route]).expect("heal a link");
        }
    }

    /// Cuts `side` off the other nodes (both ways), and the store off the side it is not on.
    fn partition(&mut self, side: &[usize], store_on_side: bool) {
        let n = self.ips.len();
        for a in 0..n {
            for b in 0..n {
                if side.contains(&a) != side.contains(&b) {
                    let dst = self.ips[b].clone();
                    self.set(a, &dst, true);
                }
            }
            if side.contains(&a) != store_on_side {
                let gw = self.gw.clone();
                self.set(a, &gw, true);
            }
        }
    }

    fn heal(&mut self) {
        for (i, dst) in std::mem::take(&mut self.cuts) {
            let _ = ip(&["-n", &self.ns(i), "route", "del", "blackhole", &format!("{dst}/32")]);
        }
    }

    fn teardown(&mut self) {
        for i in 0..self.ips.len() {
            let _ = ip(&["netns", "del", &self.ns(i)]);
        }
        let _ = ip(&["link", "del", &format!("{}b", self.prefix)]);
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        self.teardown();
    }
}

fn can_use_netns() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root".into());
    }
    Command::new("ip").arg("-V").output().map_err(|e| format!("no `ip` (iproute2): {e}"))?;
    Command::new("etcd").arg("--version").output().map_err(|e| format!("no etcd: {e}"))?;
    Ok(())
}

#[test]
fn network_partitions_lose_no_acknowledged_commit_and_never_make_two_primaries() {
    if let Err(why) = can_use_netns() {
        let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
        assert!(
            !ci && std::env::var_os("NVMEDB_REQUIRE_NETNS").is_none(),
            "network namespaces are required here (CI or NVMEDB_REQUIRE_NETNS) but unavailable: {why}"
        );
        eprintln!("skipped: real network partitions need root, iproute2 and etcd ({why})");
        return;
    }
    let partitions = env_u64("NVMEDB_PARTITIONS", 12);
    let ttl = env_u64("NVMEDB_HA_TTL", 1);
    let seed = support::seed(0x9a27);
    let mut rng = Rng::new(seed);
    let mut net = Net::setup(NODES).unwrap();
    let tmp = TmpDir::new("ha-partitions");
    let mut spec = ClusterSpec::new(PathBuf::from(env!("CARGO_BIN_EXE_nvmedb")), tmp.join("c"), ttl);
    assert_eq!((spec.nodes, spec.clients), (NODES, CLIENTS));
    spec.hosts = Some(ClusterHosts {
        etcd: net.gw.clone(),
        nodes: net.ips.iter().map(|ip| format!("{ip}:7700")).collect(),
        launch: (0..NODES).map(|i| vec!["ip".into(), "netns".into(), "exec".into(), net.ns(i)]).collect(),
    });
    let c = Cluster::start(spec).unwrap();
    let (mut leader, mut epoch) = c.settled(20, "bootstrap").unwrap();
    let started = Instant::now();
    let mut failovers = 0;
    for p in 0..partitions {
        // A random side: one or two of the three nodes; the store on either side.
        let mut side: Vec<usize> = (0..NODES).filter(|_| rng.chance(0.5)).collect();
        if side.is_empty() || side.len() == NODES {
            side = vec![rng.below(NODES as u64) as usize];
        }
        let store_on_side = rng.chance(0.5);
        let hold = Duration::from_millis(300 + rng.below(2500));
        let ctx = format!(
            "partition {p} (seed {seed}): {side:?} cut off{}, {} ms, leader n{leader} at epoch {epoch}",
            if store_on_side { " with the store" } else { "" },
            hold.as_millis()
        );
        eprintln!("{ctx}");
        net.partition(&side, store_on_side);
        std::thread::sleep(hold);
        net.heal();
        // Every few partitions (and at the end), the cluster must settle: a leader committing
        // and both standbys following it.
        if p % 4 == 3 || p + 1 == partitions {
            let (l, e) = c.settled(10, &ctx).unwrap();
            if e != epoch {
                failovers += 1;
            }
            (leader, epoch) = (l, e);
        } else {
            std::thread::sleep(Duration::from_millis(200 + rng.below(800)));
        }
    }
    let (l, _) = c.settled(20, "after the last partition").unwrap();
    leader = l;
    let elapsed = started.elapsed();
    let mut c = c;
    for i in (0..NODES).filter(|&i| i != leader) {
        c.stop(i).unwrap();
    }
    c.stop(leader).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let ha_check::Acks { acked, epochs, final_leader, late } = ha_check::acks(&c.events());
    assert!(
        late.is_empty(),
        "acknowledged after a newer leader took over (two acknowledging primaries): {late:?}"
    );
    let lost = ha_check::lost_commits(&c.node_dir(final_leader), &acked);
    println!(
        "{partitions} real network partitions in {:.0} s (lease TTL {ttl} s, seed {seed}): {} acknowledged commits over {} epochs ({failovers} leader changes seen at settles), {} lost, {} acknowledged after a newer leader took over",
        elapsed.as_secs_f64(),
        acked.len(),
        epochs,
        lost.len(),
        late.len()
    );
    assert!(
        lost.is_empty(),
        "{} acknowledged commits lost, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    drop(c);
    drop(net);
}
