//! A schedule: everything the simulator decides from a seed before the run — the cluster's
//! shape, its commit mode, its timing, the workload's size and the nemesis's faults with their
//! times. (Decisions made during the run — which task runs next, each message's latency, each
//! unsynced write's fate at a power cut — follow the same seed.)

use nvmedb::repl::{mode_name, ReplicationMode};
use nvmedb::util::Rng;
use std::time::Duration;

/// One fault the nemesis injects (node indexes count from 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// The nodes of `side` (and the coordination store, with `store_on_side`) are cut off from
    /// the others, both ways, for `heal_after`.
    Partition {
        /// One side of the cut.
        side: Vec<usize>,
        /// The coordination store is on that side.
        store_on_side: bool,
        /// How long the cut lasts.
        heal_after: Duration,
    },
    /// The node's machine loses power: every unsynced write is dropped, kept or torn; the node
    /// restarts after `restart_after`.
    PowerCut {
        /// The node.
        node: usize,
        /// Down for this long.
        restart_after: Duration,
    },
    /// The node loses power at its `after_ops`-th storage operation from now (whatever it is
    /// then doing); it restarts `restart_after` after this fault's time.
    CrashAtIo {
        /// The node.
        node: usize,
        /// Which operation, counted from now.
        after_ops: u64,
        /// Restart this long after the fault's time (if it crashed by then).
        restart_after: Duration,
    },
    /// The node's process is killed (its unsynced writes survive in the page cache); it
    /// restarts after `restart_after`.
    Kill {
        /// The node.
        node: usize,
        /// Down for this long.
        restart_after: Duration,
    },
    /// The node's process is stopped (SIGSTOP) for `duration`: its lease may run out meanwhile.
    Pause {
        /// The node.
        node: usize,
        /// Stopped for this long.
        duration: Duration,
    },
    /// Messages from `from` to `to` take `extra` longer for `duration`.
    Slow {
        /// Sender.
        from: usize,
        /// Receiver.
        to: usize,
        /// Added delay.
        extra: Duration,
        /// For this long.
        duration: Duration,
    },
    /// One of the node's connections is reset (chosen by `pick`).
    Reset {
        /// The node.
        node: usize,
        /// Which connection.
        pick: u64,
    },
    /// The node's disk is full (files cannot grow) for `duration`.
    DiskFull {
        /// The node.
        node: usize,
        /// For this long.
        duration: Duration,
    },
    /// A monotonic clock jumps forward by `by`: the node's (`Some`) or the coordination store's
    /// (`None`, its leases then expire early).
    ClockJump {
        /// Whose clock.
        node: Option<usize>,
        /// How far.
        by: Duration,
    },
}

/// Everything decided before the run (see the module documentation).
#[derive(Debug, Clone)]
pub struct Schedule {
    /// The seed everything follows.
    pub seed: u64,
    /// Nodes (one primary and 1–3 standbys once the cluster formed).
    pub nodes: usize,
    /// The commit mode of every primary.
    pub mode: ReplicationMode,
    /// Data-page mirroring (then: two nodes, eager mode).
    pub mirror: bool,
    /// Committing clients per node (they commit while their node leads).
    pub clients: usize,
    /// How long the workload and the nemesis run (simulated).
    pub run_for: Duration,
    /// Leadership lease TTL.
    pub ttl: Duration,
    /// The margin the gate closes before the lease can expire.
    pub margin: Duration,
    /// The agents' tick.
    pub tick: Duration,
    /// How long a commit waits for the standbys before it fails.
    pub commit_timeout: Duration,
    /// The faults, by simulated time from the start.
    pub faults: Vec<(Duration, Fault)>,
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

impl Schedule {
    /// The schedule of `seed`.
    pub fn from_seed(seed: u64) -> Self {
        let mut r = Rng::new(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x51_3d_0e);
        // One schedule in seven: a mirrored pair (seed 000's configuration); the others: one to
        // three standbys in any mode.
        let mirror = r.below(7) == 0;
        let nodes = if mirror { 2 } else { 2 + r.below(3) as usize };
        let standbys = nodes - 1;
        let mode = match r.below(4) {
            _ if mirror => ReplicationMode::Eager,
            0 => ReplicationMode::Eager,
            1 => ReplicationMode::Quorum(1 + r.below(standbys as u64) as usize),
            2 => ReplicationMode::Chain,
            _ => ReplicationMode::Lazy,
        };
        let clients = 1 + r.below(2) as usize;
        let run_for = ms(2000 + r.below(3000));
        let ttl = ms(1000 + 500 * r.below(3));
        let margin = ttl * 2 / 5;
        let tick = (ttl - margin) / 4;
        let commit_timeout = ms(800 + r.below(1500));
        let mut faults = Vec::new();
        // The cluster forms in the first second or so; faults come after 1.5 s, before the end of
        // the workload (the heal phase then undoes what is left).
        let n_faults = 1 + r.below(4) as usize + usize::from(r.chance(0.3)) * 3;
        for _ in 0..n_faults {
            let at = ms(1500 + r.below(run_for.as_millis() as u64 - 1500));
            let node = r.below(nodes as u64) as usize;
            let f = match r.below(100) {
                0..=19 => {
                    let mut side: Vec<usize> = (0..nodes).filter(|_| r.chance(0.4)).collect();
                    if side.is_empty() {
                        side.push(node);
                    }
                    Fault::Partition {
                        side,
                        store_on_side: r.chance(0.5),
                        heal_after: ms(200 + r.below(3000)),
                    }
                }
                20..=31 => Fault::PowerCut { node, restart_after: ms(100 + r.below(2500)) },
                32..=47 => Fault::CrashAtIo {
                    node,
                    after_ops: {
                        let span = if r.chance(0.5) { 40 } else { 400 };
                        1 + r.below(span)
                    },
                    restart_after: ms(300 + r.below(2500)),
                },
                48..=55 => Fault::Kill { node, restart_after: ms(100 + r.below(2000)) },
                56..=67 => Fault::Pause { node, duration: ms(100 + r.below(3 * ttl.as_millis() as u64)) },
                68..=75 => {
                    let to = (node + 1 + r.below(nodes as u64 - 1) as usize) % nodes;
                    Fault::Slow {
                        from: node,
                        to,
                        extra: ms(1 + r.below(400)),
                        duration: ms(100 + r.below(2000)),
                    }
                }
                76..=85 => Fault::Reset { node, pick: r.next_u64() },
                86..=91 => Fault::DiskFull { node, duration: ms(100 + r.below(1500)) },
                _ => Fault::ClockJump {
                    node: r.chance(0.6).then_some(node),
                    by: ms(1 + r.below(2 * ttl.as_millis() as u64)),
                },
            };
            faults.push((at, f));
        }
        faults.sort_by_key(|f| f.0);
        Self { seed, nodes, mode, mirror, clients, run_for, ttl, margin, tick, commit_timeout, faults }
    }

    /// The schedule in a few lines (printed with every failure).
    pub fn describe(&self) -> String {
        let mut s = format!(
            "seed {}: {} nodes, {} mode{}, {} client(s) per node, {} ms of workload, lease TTL {} ms (margin {} ms, tick {} ms), commit timeout {} ms\n",
            self.seed,
            self.nodes,
            mode_name(self.mode),
            if self.mirror { " with data-page mirroring" } else { "" },
            self.clients,
            self.run_for.as_millis(),
            self.ttl.as_millis(),
            self.margin.as_millis(),
            self.tick.as_millis(),
            self.commit_timeout.as_millis()
        );
        if self.faults.is_empty() {
            s.push_str("  no faults\n");
        }
        for (at, f) in &self.faults {
            s.push_str(&format!("  at {:>5} ms: {f:?}\n", at.as_millis()));
        }
        s
    }
}
