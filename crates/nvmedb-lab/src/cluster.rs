//! An automatically failing-over cluster on loopback, for tests and the lab: etcd members and
//! `nvmedb node --ha etcd://…` processes (children, each with committing clients printing every
//! acknowledged commit), with the faults an operator fears (kill -9, SIGSTOP) and the waits that
//! tell what happened (a settled cluster, the new leader's first commit).
//!
//! Owns: [`ClusterSpec`], [`Cluster`], [`NodeEvent`] and the parsing of a node's output lines.
//! Invariants: every line a node prints is recorded with the node and the instant it was read,
//! in arrival order; a dropped cluster leaves no process (node or etcd member) and no scratch
//! directory behind; a wait that runs out is an error carrying the nodes' last output.

use crate::error::{LabError, Result};
use nvmedb::repl::etcd::{free_port, EtcdStore, LocalEtcd};
use nvmedb::repl::ha::ClusterStatus;
use nvmedb::util::sync::MutexExt;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What to start.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    /// The `nvmedb` executable.
    pub exe: PathBuf,
    /// Scratch directory (etcd data, node directories, the secret, the nodes' stderr); removed
    /// when the cluster is dropped.
    pub dir: PathBuf,
    /// etcd members.
    pub etcd_members: usize,
    /// Nodes.
    pub nodes: usize,
    /// Committing clients per node (they commit while the node leads).
    pub clients: usize,
    /// Replication mode (`eager`, `quorum:1`, ...).
    pub mode: String,
    /// Lease TTL, seconds (the margin is 0.4 × TTL, the CLI's tick (TTL − margin)/4).
    pub ttl: u64,
    /// Cluster name in etcd.
    pub name: String,
    /// Where the members and nodes are reachable and how each node is launched; `None`: all
    /// on loopback, nodes started directly.
    pub hosts: Option<ClusterHosts>,
}

/// Addresses and launchers for a cluster off loopback (e.g. each node in a network namespace
/// of its own).
#[derive(Debug, Clone)]
pub struct ClusterHosts {
    /// The address etcd answers clients on.
    pub etcd: String,
    /// Each node's replication address (`ip:port`).
    pub nodes: Vec<String>,
    /// Each node's command prefix (e.g. `ip netns exec <ns>`); it must exec the node, so that
    /// signals reach it.
    pub launch: Vec<Vec<String>>,
}

impl ClusterSpec {
    /// Three etcd members, three nodes with three clients each, quorum 1 of 2.
    pub fn new(exe: PathBuf, dir: PathBuf, ttl: u64) -> Self {
        Self {
            exe,
            dir,
            etcd_members: 3,
            nodes: 3,
            clients: 3,
            mode: "quorum:1".into(),
            ttl,
            name: "t".into(),
            hosts: None,
        }
    }
}

/// One line a node printed, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeEvent {
    /// `ACK <epoch> <id> <ns>`: a client's commit was acknowledged.
    Ack {
        /// Epoch of the acknowledging primary.
        epoch: u64,
        /// The committed id.
        id: i64,
        /// Wall-clock time, ns since the epoch.
        ns: u128,
    },
    /// `<name> LEADER epoch <e> at <ns> …`: the node became the primary.
    Leader {
        /// Its epoch.
        epoch: u64,
        /// Wall-clock time, ns since the epoch.
        ns: u128,
    },
    /// `<name> STEPPED DOWN …`.
    SteppedDown,
    /// Anything else.
    Other,
}

impl NodeEvent {
    /// Parses one output line of `nvmedb node`.
    pub fn parse(line: &str) -> Self {
        let w: Vec<&str> = line.split_whitespace().collect();
        let n = |s: &str| s.parse().ok();
        match w.as_slice() {
            ["ACK", e, id, ns] => match (n(e), id.parse().ok(), ns.parse().ok()) {
                (Some(epoch), Some(id), Some(ns)) => Self::Ack { epoch, id, ns },
                _ => Self::Other,
            },
            [_, "LEADER", "epoch", e, "at", ns, ..] => match (n(e), ns.parse().ok()) {
                (Some(epoch), Some(ns)) => Self::Leader { epoch, ns },
                _ => Self::Other,
            },
            [_, "STEPPED", "DOWN", ..] => Self::SteppedDown,
            _ => Self::Other,
        }
    }
}

/// One recorded line.
#[derive(Debug, Clone)]
pub struct Event {
    /// The node that printed it.
    pub node: usize,
    /// When it was read.
    pub at: Instant,
    /// What it says.
    pub ev: NodeEvent,
    /// The line.
    pub line: String,
}

/// A running cluster. See the module documentation.
pub struct Cluster {
    spec: ClusterSpec,
    /// The etcd members (kill and restart them to test the store's failures).
    pub etcd: LocalEtcd,
    store: EtcdStore,
    addrs: Vec<String>,
    procs: Vec<Option<Child>>,
    log: Arc<Mutex<Vec<Event>>>,
}

fn failed(what: impl Into<String>, detail: impl Into<String>) -> LabError {
    LabError::Inconsistent { what: what.into(), detail: detail.into() }
}

impl Cluster {
    /// Starts the etcd members and every node.
    pub fn start(spec: ClusterSpec) -> Result<Self> {
        std::fs::create_dir_all(&spec.dir).map_err(LabError::io(&spec.dir, "create directory"))?;
        let etcd_host = spec.hosts.as_ref().map_or("127.0.0.1", |h| h.etcd.as_str());
        let etcd = LocalEtcd::start_on(
            &spec.dir.join("etcd"),
            spec.etcd_members,
            Duration::from_secs(30),
            etcd_host,
        )
        .map_err(|e| failed("starting etcd members", e.to_string()))?;
        let store = EtcdStore::connect(&etcd.url(), Duration::from_secs(3))
            .map_err(|e| failed("connecting to etcd", e.to_string()))?;
        let secret = spec.dir.join("secret");
        std::fs::write(&secret, "nvmedb-cluster-secret\n").map_err(LabError::io(&secret, "write"))?;
        let addrs = match &spec.hosts {
            Some(h) => h.nodes.clone(),
            None => (0..spec.nodes)
                .map(|_| free_port().map(|p| format!("127.0.0.1:{p}")))
                .collect::<std::io::Result<_>>()
                .map_err(LabError::io(&spec.dir, "picking free ports"))?,
        };
        let mut c = Self {
            procs: (0..spec.nodes).map(|_| None).collect(),
            spec,
            etcd,
            store,
            addrs,
            log: Arc::new(Mutex::new(Vec::new())),
        };
        for i in 0..c.spec.nodes {
            c.spawn(i)?;
        }
        Ok(c)
    }

    /// The scratch directory.
    pub fn dir(&self) -> &Path {
        &self.spec.dir
    }

    /// The data directory of node `i`.
    pub fn node_dir(&self, i: usize) -> PathBuf {
        self.spec.dir.join(format!("n{i}"))
    }

    /// The lease TTL, seconds.
    pub fn ttl(&self) -> u64 {
        self.spec.ttl
    }

    /// Starts node `i` (again).
    pub fn spawn(&mut self, i: usize) -> Result<()> {
        let s = &self.spec;
        let mut cmd = match s.hosts.as_ref().and_then(|h| h.launch.get(i)).filter(|l| !l.is_empty()) {
            Some(l) => {
                let mut c = Command::new(&l[0]);
                c.args(&l[1..]).arg(&s.exe);
                c
            }
            None => Command::new(&s.exe),
        };
        cmd.args(["node", "--ha", &self.etcd.url(), "--cluster", &s.name, "--name", &format!("n{i}")])
            .arg("--data")
            .arg(self.node_dir(i))
            .args(["--listen", &self.addrs[i]])
            .arg("--secret-file")
            .arg(s.dir.join("secret"))
            .args(["--mode", &s.mode, "--ttl", &s.ttl.to_string()])
            .args(["--margin", &format!("{}", s.ttl as f64 * 0.4), "--commit-timeout", "2"])
            .args(["--clients", &s.clients.to_string(), "--print-acks", "--status-every", "5"]);
        for j in (0..s.nodes).filter(|&j| j != i) {
            cmd.args(["--peer", &format!("n{j}={}", self.addrs[j])]);
        }
        let errp = s.dir.join(format!("n{i}.stderr"));
        let err = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&errp)
            .map_err(LabError::io(&errp, "open"))?;
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(err);
        let mut child = cmd.spawn().map_err(LabError::io(&s.exe, "spawn nvmedb node"))?;
        let out = child.stdout.take().ok_or_else(|| failed(format!("node n{i}"), "no stdout pipe"))?;
        let log = self.log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(std::result::Result::ok) {
                let ev = NodeEvent::parse(&line);
                log.locked().push(Event { node: i, at: Instant::now(), ev, line });
            }
        });
        self.procs[i] = Some(child);
        Ok(())
    }

    /// Sends `sig` to node `i`.
    pub fn signal(&self, i: usize, sig: libc::c_int) -> Result<()> {
        let pid = self.procs[i].as_ref().ok_or_else(|| failed(format!("node n{i}"), "not running"))?.id();
        // SAFETY: sending a signal to our own child process.
        if unsafe { libc::kill(pid as libc::pid_t, sig) } != 0 {
            return Err(failed(
                format!("node n{i}"),
                format!("signal {sig}: {}", std::io::Error::last_os_error()),
            ));
        }
        Ok(())
    }

    /// Kills node `i` with SIGKILL and reaps it.
    pub fn kill9(&mut self, i: usize) -> Result<()> {
        let mut ch = self.procs[i].take().ok_or_else(|| failed(format!("node n{i}"), "not running"))?;
        ch.kill().and_then(|()| ch.wait().map(drop)).map_err(LabError::io(&self.spec.exe, "kill -9 a node"))
    }

    /// Stops node `i` with SIGTERM and waits (60 s at most) for a clean exit.
    pub fn stop(&mut self, i: usize) -> Result<()> {
        if self.procs[i].is_none() {
            return Ok(());
        }
        self.signal(i, libc::SIGTERM)?;
        let mut ch = self.procs[i].take().expect("checked above");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match ch.try_wait() {
                Ok(Some(st)) if st.success() => return Ok(()),
                Ok(Some(st)) => {
                    return Err(failed(format!("node n{i}"), format!("stopped with {st}; {}", self.tail(i))))
                }
                Ok(None) if Instant::now() > deadline => {
                    let _ = ch.kill();
                    return Err(failed(
                        format!("node n{i}"),
                        format!("did not stop within 60 s of SIGTERM; {}", self.tail(i)),
                    ));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => return Err(LabError::io(&self.spec.exe, "wait for a node")(e)),
            }
        }
    }

    /// Node `i`'s last 30 output lines that are not acknowledgements, and of its stderr.
    pub fn tail(&self, i: usize) -> String {
        let err = std::fs::read_to_string(self.spec.dir.join(format!("n{i}.stderr"))).unwrap_or_default();
        let out: Vec<String> = self
            .events()
            .into_iter()
            .filter(|e| e.node == i && !matches!(e.ev, NodeEvent::Ack { .. }))
            .map(|e| e.line)
            .collect();
        let last = |v: &[String]| v[v.len().saturating_sub(30)..].join("\n");
        let errs: Vec<String> = err.lines().map(String::from).collect();
        format!("n{i} stdout (no acks):\n{}\nn{i} stderr:\n{}", last(&out), last(&errs))
    }

    fn tails(&self) -> String {
        (0..self.spec.nodes).map(|i| self.tail(i)).collect::<Vec<_>>().join("\n")
    }

    /// Every line read so far, in arrival order.
    pub fn events(&self) -> Vec<Event> {
        self.log.locked().clone()
    }

    /// The cluster as etcd shows it.
    pub fn status(&self) -> Option<ClusterStatus> {
        ClusterStatus::read(&self.store, &format!("/nvmedb/{}", self.spec.name)).ok()
    }

    /// The etcd endpoints (`etcd://…`).
    pub fn url(&self) -> String {
        self.etcd.url()
    }

    /// Acknowledgements node `node` printed at `epoch` since `since`.
    pub fn acks_since(&self, node: usize, epoch: u64, since: Instant) -> usize {
        self.count_acks(node, Some(epoch), since)
    }

    /// Acknowledgements node `node` printed since `since`, at `epoch` or (`None`) at any.
    fn count_acks(&self, node: usize, epoch: Option<u64>, since: Instant) -> usize {
        self.log
            .locked()
            .iter()
            .filter(|e| {
                e.node == node
                    && e.at >= since
                    && matches!(e.ev, NodeEvent::Ack { epoch: x, .. } if epoch.is_none_or(|y| x == y))
            })
            .count()
    }

    /// True once node `node` printed that it stepped down, after `since`.
    pub fn stepped_down_since(&self, node: usize, since: Instant) -> bool {
        self.log.locked().iter().any(|e| e.node == node && e.at >= since && e.ev == NodeEvent::SteppedDown)
    }

    /// Waits for a leader whose clients committed `n` more commits and for every other node to
    /// follow it (published as a standby at its epoch); returns (leader index, epoch).
    pub fn settled(&self, n: usize, ctx: &str) -> Result<(usize, u64)> {
        let deadline = Instant::now() + Duration::from_secs(60 + 10 * self.spec.ttl);
        let since = Instant::now();
        loop {
            if let Some(st) = self.status() {
                if let Some((name, epoch)) = &st.leader {
                    if let Ok(li) = name.trim_start_matches('n').parse::<usize>() {
                        let following = st
                            .members
                            .iter()
                            .filter(|m| m.name != *name && m.role == "standby" && m.epoch == *epoch)
                            .count();
                        if following == self.spec.nodes - 1 && self.acks_since(li, *epoch, since) >= n {
                            return Ok((li, *epoch));
                        }
                    }
                }
            }
            if Instant::now() > deadline {
                // The short diagnosis first, on its own (a CI log may keep only the start of a
                // long panic message), then the nodes' output.
                let status = match ClusterStatus::read(&self.store, &format!("/nvmedb/{}", self.spec.name)) {
                    Ok(st) => st.to_string(),
                    Err(e) => format!("the store could not be read: {e}"),
                };
                let acks: Vec<String> = (0..self.spec.nodes)
                    .map(|i| format!("n{i}: {} acks since", self.count_acks(i, None, since)))
                    .collect();
                let short = format!(
                    "the cluster did not settle within {:?} ({}):\n{status}",
                    deadline.saturating_duration_since(since),
                    acks.join(", ")
                );
                eprintln!("{ctx}: {short}");
                return Err(failed(ctx, format!("{short}\n{}", self.tails())));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits for the first commit acknowledged at an epoch above `above` after `t0`; returns
    /// (its node, its epoch, the time from `t0` to it).
    pub fn new_leader(&self, above: u64, t0: Instant, ctx: &str) -> Result<(usize, u64, Duration)> {
        let deadline = Instant::now() + Duration::from_secs(60 + 10 * self.spec.ttl);
        loop {
            let first = self.log.locked().iter().find_map(|e| match e.ev {
                NodeEvent::Ack { epoch, .. } if epoch > above && e.at >= t0 => {
                    Some((e.node, epoch, e.at - t0))
                }
                _ => None,
            });
            if let Some(f) = first {
                return Ok(f);
            }
            if Instant::now() > deadline {
                return Err(failed(
                    ctx,
                    format!("no new leader committed: {:?}\n{}", self.status(), self.tails()),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Cluster {
    /// Kills the nodes and the etcd members, then removes the scratch directory (etcd data,
    /// node directories): a run, passed or failed, leaves neither processes nor disk behind.
    fn drop(&mut self) {
        for ch in self.procs.iter_mut().flatten() {
            let _ = ch.kill();
            let _ = ch.wait();
        }
        for i in 0..self.spec.etcd_members {
            self.etcd.kill(i);
        }
        let _ = std::fs::remove_dir_all(&self.spec.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::NodeEvent;

    #[test]
    fn node_lines_parse() {
        assert_eq!(NodeEvent::parse("ACK 3 17 99"), NodeEvent::Ack { epoch: 3, id: 17, ns: 99 });
        assert_eq!(
            NodeEvent::parse("n1: LEADER epoch 4 at 1234 (promoted: log end 2485353)"),
            NodeEvent::Leader { epoch: 4, ns: 1234 }
        );
        // As `nvmedb node --ha` prints them.
        assert_eq!(
            NodeEvent::parse(
                "n0: STEPPED DOWN from epoch 6: its lease could not be renewed for a whole TTL (2s)"
            ),
            NodeEvent::SteppedDown
        );
        assert_eq!(NodeEvent::parse("ACK x 1 2"), NodeEvent::Other);
    }
}
