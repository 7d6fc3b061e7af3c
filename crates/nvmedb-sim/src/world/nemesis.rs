//! The nemesis of a simulated run: applies each fault of the schedule at its moment and undoes
//! it at its end (partitions of the network and of the coordination store, disk faults, stops,
//! crashes and power losses of nodes).
//!
//! Invariant: every fault applied is undone by the heal phase at the latest, so the cluster
//! can converge before it is checked.

use super::{lock, World};
use crate::disk::CrashPlan;
use crate::schedule::Fault;
use crate::store::STORE;
use nvmedb::repl::clock::Clock;
use std::time::Duration;

impl World {
    /// Applies one fault now.
    fn apply(&self, f: &Fault) {
        self.note(format!("nemesis: {f:?}"));
        match f {
            Fault::Partition { side, store_on_side, .. } => {
                self.set_partition(side, *store_on_side, true);
            }
            Fault::PowerCut { node, .. } => self.crash(*node, true),
            Fault::Kill { node, .. } => self.crash(*node, false),
            Fault::CrashAtIo { node, after_ops, .. } => {
                let nodes = lock(&self.nodes);
                if let Some(inc) = &nodes[*node].inc {
                    let at = inc.io.ops() + after_ops;
                    let w = self.me.clone();
                    let n = *node;
                    inc.io.plan_crash(CrashPlan {
                        at,
                        cut: Box::new(move || {
                            if let Some(w) = w.upgrade() {
                                w.note(format!("n{n} loses power at a storage operation"));
                                w.crash(n, true);
                            }
                        }),
                    });
                }
            }
            Fault::Pause { node, duration } => {
                let nodes = lock(&self.nodes);
                if let Some(inc) = &nodes[*node].inc {
                    self.sim.pause(inc.group, self.sim.now() + *duration);
                }
            }
            Fault::Slow { from, to, extra, .. } => {
                self.net.set_slow(&self.name(*from), &self.name(*to), *extra)
            }
            Fault::Reset { node, pick } => {
                self.net.reset_one(&self.name(*node), *pick);
            }
            Fault::DiskFull { node, .. } => lock(&self.nodes)[*node].disk.set_full(true),
            Fault::ClockJump { node, by } => match node {
                Some(n) => {
                    if let Some(inc) = &lock(&self.nodes)[*n].inc {
                        inc.clock.jump(*by);
                    }
                }
                None => self.store_clock.jump(*by),
            },
        }
    }

    /// Undoes one fault (heals it).
    fn undo(&self, f: &Fault) {
        match f {
            Fault::Partition { side, store_on_side, .. } => {
                self.note(format!("nemesis heals the partition of {side:?}"));
                self.set_partition(side, *store_on_side, false);
            }
            Fault::PowerCut { node, .. } | Fault::Kill { node, .. } | Fault::CrashAtIo { node, .. } => {
                let mut nodes = lock(&self.nodes);
                if let (Fault::CrashAtIo { .. }, Some(inc)) = (f, &nodes[*node].inc) {
                    // Not crashed by now: the plan is dropped.
                    inc.io.plan_crash(CrashPlan { at: u64::MAX, cut: Box::new(|| {}) });
                    return;
                }
                let down = nodes[*node].inc.is_none();
                let _ = &mut nodes;
                drop(nodes);
                if down {
                    self.start_node(*node);
                }
            }
            Fault::Slow { from, to, .. } => {
                self.net.set_slow(&self.name(*from), &self.name(*to), Duration::ZERO)
            }
            Fault::DiskFull { node, .. } => lock(&self.nodes)[*node].disk.set_full(false),
            Fault::Pause { .. } | Fault::Reset { .. } | Fault::ClockJump { .. } => {}
        }
    }

    fn set_partition(&self, side: &[usize], store_on_side: bool, cut: bool) {
        let names: Vec<String> = (0..self.sched.nodes).map(|i| self.name(i)).collect();
        for a in 0..self.sched.nodes {
            for b in 0..self.sched.nodes {
                if side.contains(&a) && !side.contains(&b) {
                    self.net.set_cut(&names[a], &names[b], cut);
                    self.net.set_cut(&names[b], &names[a], cut);
                }
            }
            let a_side = side.contains(&a);
            if a_side != store_on_side {
                self.net.set_cut(&names[a], STORE, cut);
                self.net.set_cut(STORE, &names[a], cut);
            }
        }
    }

    /// Node `i` goes down: `power` cuts its machine's power (unsynced writes dropped, kept or
    /// torn), otherwise only its process dies.
    fn crash(&self, i: usize, power: bool) {
        let mut nodes = lock(&self.nodes);
        let Some(inc) = nodes[i].inc.take() else { return };
        self.sim.kill(inc.group);
        self.net.kill_node(&nodes[i].name);
        inc.io.die();
        if power {
            let o = nodes[i].disk.power_cut(&mut lock(&self.rng));
            drop(nodes);
            self.note(format!(
                "n{i} lost power: {} unsynced writes dropped, {} kept, {} torn",
                o.dropped, o.persisted, o.torn
            ));
        } else {
            nodes[i].disk.process_died();
            drop(nodes);
            self.note(format!("n{i} was killed"));
        }
    }

    /// The nemesis: applies the schedule's faults at their times, and heals each after its
    /// duration.
    pub(super) fn nemesis(&self) {
        let clock = self.sim.clock();
        let mut actions: Vec<(Duration, bool, Fault)> = Vec::new();
        for (at, f) in &self.sched.faults {
            actions.push((*at, true, f.clone()));
            let undo_after = match f {
                Fault::Partition { heal_after, .. } => Some(*heal_after),
                Fault::PowerCut { restart_after, .. }
                | Fault::Kill { restart_after, .. }
                | Fault::CrashAtIo { restart_after, .. } => Some(*restart_after),
                Fault::Slow { duration, .. } | Fault::DiskFull { duration, .. } => Some(*duration),
                _ => None,
            };
            if let Some(d) = undo_after {
                actions.push(((*at + d).min(self.sched.run_for), false, f.clone()));
            }
        }
        actions.sort_by_key(|a| (a.0, !a.1));
        for (at, apply, f) in actions {
            let now = clock.now();
            if at > now {
                clock.sleep(at - now);
            }
            if apply {
                self.apply(&f);
            } else {
                self.undo(&f);
            }
        }
    }
}
