//! The deterministic scheduler: the simulated [`Clock`] of every simulated node.
//!
//! Owns: the tasks (each an OS thread started through a simulated clock), the one baton that
//! says which of them runs, simulated time, timers, the groups of tasks (one per node
//! incarnation: paused, resumed, killed together) and the seeded choice of the next task.
//!
//! How a schedule stays replayable although the code under test runs on threads: a task runs
//! only while it holds the baton, and gives it back only in a waiting primitive of
//! `nvmedb::repl::clock` (park, a condition variable, sleep, join; the simulated network's
//! reads park too). The driver ([`Sim::run_until`]) then picks the next runnable task with the
//! seeded generator; when no task is runnable it moves time to the next timer. Nothing else
//! moves time: CPU work takes no simulated time. So the order of everything the tasks do, and
//! the simulated time at which they do it, depends on the seed only. Threads the engine starts
//! by itself (outside the clock: the log's preparer, recovery's read-ahead) run freely but
//! change nothing a task can observe at a different point (they only prepare files and read).
//!
//! Invariants:
//! - At most one task runs at a time; the driver waits while one runs.
//! - A task's park returns only when it was unparked, its timeout passed (simulated), or its
//!   group was killed.
//! - A killed group's tasks unwind: their next wait panics with [`Killed`] (not reported as a
//!   failure); waits during that unwinding only yield, so drop code completes.
//! - A panic in a task (other than [`Killed`]) is the schedule's failure.

use nvmedb::repl::clock::{Clock, Sched};
use nvmedb::util::Rng;
use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The panic payload a killed task unwinds with.
#[derive(Debug)]
pub struct Killed;

/// A group of tasks (one incarnation of a node, or the harness).
pub type Group = usize;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    /// Waiting for the baton.
    Runnable,
    /// Parked; a timer or an unpark with this generation makes it runnable.
    Parked(u64),
    /// Its thread is being started (not yet runnable).
    Starting,
    /// Its thread has ended.
    Done,
}

struct TaskSlot {
    name: String,
    group: Group,
    status: Status,
    /// An unpark came while it was not parked: its next park returns at once.
    token: bool,
    /// Incremented at every park (stale timers carry an older one).
    gen: u64,
    /// Tasks joining this one.
    joiners: Vec<usize>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The task's thread, to wake when it gets the baton.
    waker: Option<std::thread::Thread>,
    /// Times the task was given the baton.
    runs: u64,
}

#[derive(Debug, Clone, Default)]
struct GroupState {
    name: String,
    /// Tasks of the group are not picked before this time.
    paused_until: Duration,
    killed: bool,
}

/// A timer: (time, sequence, what). What: `Some((task, Some(gen)))` ends a park of that
/// generation, `Some((task, None))` unparks the task, `None` only marks a time.
type Timer = (Duration, u64, Option<(usize, Option<u64>)>);

struct State {
    now: Duration,
    rng: Rng,
    tasks: Vec<TaskSlot>,
    running: Option<usize>,
    /// (time, sequence, what): `Some((task, Some(gen)))` ends a park of that generation,
    /// `Some((task, None))` unparks the task, `None` only marks a time (a paused group resumes).
    timers: BinaryHeap<Reverse<Timer>>,
    seq: u64,
    groups: Vec<GroupState>,
    /// The group tasks spawned from outside the simulation (the harness) join.
    outside_group: Group,
    failure: Option<String>,
    /// Until when the driver asked to run.
    deadline: Duration,
    /// The driver runs on after a failure (shutting down).
    ignore_failure: bool,
    /// Why the run stopped (set by the task that found nothing to run).
    outcome: Option<Result<Stop, String>>,
    /// Scratch: the runnable tasks.
    runnable: Vec<usize>,
    /// The driver's thread, to wake when the run stops.
    driver: Option<std::thread::Thread>,
    /// Task switches so far.
    steps: u64,
    /// A digest of every decision (task picked, time moved): equal for equal schedules.
    digest: u64,
}

struct Inner {
    st: Mutex<State>,
    id: usize,
    /// The CPU every thread of the simulation runs on (they run one at a time: handing the
    /// baton to a thread on the same CPU is the cheapest switch); `None`: anywhere.
    cpu: Option<usize>,
}

/// The simulation's scheduler and simulated time (see the module documentation).
#[derive(Clone)]
pub struct Sim {
    inner: Arc<Inner>,
}

thread_local! {
    /// (simulation id, task) of the task running on this thread.
    static CURRENT: Cell<Option<(usize, usize)>> = const { Cell::new(None) };
}

/// How long the driver waits for a running task to give the baton back before it declares the
/// schedule stuck (a task blocked outside the simulation). Real time.
const STUCK_AFTER: Duration = Duration::from_secs(120);

fn mix(h: u64, v: u64) -> u64 {
    (h ^ v).wrapping_mul(0x100_0000_01b3).rotate_left(17)
}

/// Pins the calling thread to `cpu` (when set).
fn pin_to(cpu: Option<usize>) {
    let Some(cpu) = cpu else { return };
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET and sched_setaffinity get valid
    // pointers to it, for the calling thread (pid 0).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// What runs next.
enum Next {
    /// This task.
    Run(usize),
    /// Nothing: the run stops with this.
    Done(Result<Stop, String>),
}

/// What [`Sim::run_until`] stopped at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// Simulated time reached the deadline.
    Deadline,
    /// No task can run and no timer is set: every task has ended or waits forever.
    Quiet,
}

impl Sim {
    /// A new simulation whose choices follow `seed`.
    pub fn new(seed: u64) -> Self {
        Self::on_cpu(seed, None)
    }

    /// A new simulation whose choices follow `seed`, its threads on CPU `cpu` when set (they run
    /// one at a time, and handing the baton to a thread on the same CPU is the cheapest switch;
    /// the driver's thread is pinned there during each run too).
    pub fn on_cpu(seed: u64, cpu: Option<usize>) -> Self {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);
        let st = State {
            now: Duration::ZERO,
            rng: Rng::new(seed ^ 0x5eed_5c4e_d000_0001),
            tasks: Vec::new(),
            running: None,
            timers: BinaryHeap::new(),
            seq: 0,
            groups: vec![GroupState { name: "harness".into(), ..GroupState::default() }],
            outside_group: 0,
            failure: None,
            deadline: Duration::ZERO,
            ignore_failure: false,
            outcome: None,
            runnable: Vec::new(),
            driver: None,
            steps: 0,
            digest: seed,
        };
        Self {
            inner: Arc::new(Inner {
                st: Mutex::new(st),
                id: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                cpu,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Simulated time since the start.
    pub fn now(&self) -> Duration {
        self.lock().now
    }

    /// A new group of tasks named `name` (a node incarnation).
    pub fn new_group(&self, name: &str) -> Group {
        let mut st = self.lock();
        st.groups.push(GroupState { name: name.into(), ..GroupState::default() });
        st.groups.len() - 1
    }

    /// Tasks spawned from outside the simulation (by the harness) join `g` from now on.
    pub fn set_outside_group(&self, g: Group) {
        self.lock().outside_group = g;
    }

    /// The group of the running task (or the outside group).
    pub fn current_group(&self) -> Group {
        let st = self.lock();
        match self.me() {
            Some(t) => st.tasks[t].group,
            None => st.outside_group,
        }
    }

    /// Pauses group `g` until simulated time `until` (a stopped process: its tasks are not
    /// scheduled, its timers fire late).
    pub fn pause(&self, g: Group, until: Duration) {
        let mut st = self.lock();
        st.groups[g].paused_until = st.groups[g].paused_until.max(until);
        st.seq += 1;
        let seq = st.seq;
        st.timers.push(Reverse((until, seq, None)));
    }

    /// Resumes a paused group now.
    pub fn resume(&self, g: Group) {
        self.lock().groups[g].paused_until = Duration::ZERO;
    }

    /// Groups so far (group 0 is the harness's).
    pub fn groups(&self) -> usize {
        self.lock().groups.len()
    }

    /// True when the calling thread is a task of this simulation.
    pub fn in_task(&self) -> bool {
        self.me().is_some()
    }

    /// Starts `f` as a task of group `g` (whoever calls).
    pub fn spawn_in(&self, g: Group, name: &str, f: impl FnOnce() + Send + 'static) -> std::io::Result<u64> {
        self.spawn_task(name, Some(g), Box::new(f))
    }

    /// Kills group `g`: its tasks unwind at their next wait (see the module documentation).
    pub fn kill(&self, g: Group) {
        let mut st = self.lock();
        st.groups[g].killed = true;
        st.groups[g].paused_until = Duration::ZERO;
        for t in st.tasks.iter_mut() {
            if t.group == g && matches!(t.status, Status::Parked(_)) {
                t.status = Status::Runnable;
            }
        }
    }

    /// True once group `g` was killed.
    pub fn is_killed(&self, g: Group) -> bool {
        self.lock().groups[g].killed
    }

    /// Names of the tasks of group `g` that have not ended.
    pub fn live_tasks(&self, g: Group) -> Vec<String> {
        let st = self.lock();
        st.tasks.iter().filter(|t| t.group == g && t.status != Status::Done).map(|t| t.name.clone()).collect()
    }

    /// Names and states of every task that has not ended (for reports of stuck schedules).
    pub fn describe_live(&self) -> String {
        let st = self.lock();
        st.tasks
            .iter()
            .enumerate()
            .filter(|(_, t)| t.status != Status::Done)
            .map(|(i, t)| format!("#{i} {} [{}] {:?}", t.name, st.groups[t.group].name, t.status))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Wakes `task` at simulated time `at` (a message arrives then).
    pub fn unpark_at(&self, task: u64, at: Duration) {
        let mut st = self.lock();
        st.seq += 1;
        let seq = st.seq;
        st.timers.push(Reverse((at, seq, Some((task as usize, None)))));
    }

    /// The first failure (a task's panic), if any.
    pub fn failure(&self) -> Option<String> {
        self.lock().failure.clone()
    }

    /// Records a failure found by the harness (the first one is kept).
    pub fn fail(&self, why: String) {
        let mut st = self.lock();
        if st.failure.is_none() {
            st.failure = Some(why);
        }
    }

    /// How often tasks of each name got the baton, most first (where a schedule's steps go).
    pub fn profile(&self) -> Vec<(String, u64)> {
        let st = self.lock();
        let mut m: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
        for t in &st.tasks {
            let name: String = t.name.chars().filter(|c| !c.is_ascii_digit()).collect();
            *m.entry(name).or_default() += t.runs;
        }
        let mut v: Vec<_> = m.into_iter().collect();
        v.sort_by_key(|e| std::cmp::Reverse(e.1));
        v
    }

    /// Task switches so far and the digest of every decision.
    pub fn progress(&self) -> (u64, u64) {
        let st = self.lock();
        (st.steps, st.digest)
    }

    /// A draw from the simulation's generator (for the harness: the network, the nemesis).
    pub fn rand_below(&self, n: u64) -> u64 {
        self.lock().rng.below(n.max(1))
    }

    fn me(&self) -> Option<usize> {
        CURRENT.with(|c| c.get()).and_then(|(sim, t)| (sim == self.inner.id).then_some(t))
    }

    /// Runs tasks until simulated time reaches `deadline`, every task waits forever, or a task
    /// fails. Called from outside the simulation (the harness's thread).
    pub fn run_until(&self, deadline: Duration) -> Result<Stop, String> {
        self.run(deadline, false)
    }

    /// Ends the simulation: kills every group and runs until every task has unwound (whatever
    /// failed before). Returns the tasks that did not end.
    pub fn shutdown(&self) -> Vec<String> {
        let groups = self.groups();
        for g in 0..groups {
            self.kill(g);
        }
        let deadline = self.now() + Duration::from_secs(24 * 3600);
        let _ = self.run(deadline, true);
        self.reap();
        let st = self.lock();
        st.tasks.iter().filter(|t| t.status != Status::Done).map(|t| t.name.clone()).collect()
    }

    fn run(&self, deadline: Duration, ignore_failure: bool) -> Result<Stop, String> {
        assert!(self.me().is_none(), "the simulation is driven by the harness, not by a task");
        pin_to(self.inner.cpu);
        let mut st = self.lock();
        st.deadline = deadline;
        st.ignore_failure = ignore_failure;
        st.outcome = None;
        st.driver = Some(std::thread::current());
        match self.advance(&mut st) {
            Next::Run(t) => {
                st.running = Some(t);
                let w = st.tasks[t].waker.clone();
                drop(st);
                if let Some(w) = w {
                    w.unpark();
                }
            }
            Next::Done(o) => return o,
        }
        // The tasks hand the baton to each other; the last one tells the driver why it stopped.
        let mut seen = (u64::MAX, std::time::Instant::now());
        loop {
            std::thread::park_timeout(Duration::from_secs(5));
            let mut st = self.lock();
            if st.running.is_none() {
                return st.outcome.take().unwrap_or(Ok(Stop::Quiet));
            }
            if st.steps != seen.0 {
                seen = (st.steps, std::time::Instant::now());
            } else if seen.1.elapsed() >= STUCK_AFTER {
                let name = st.running.map(|r| st.tasks[r].name.clone()).unwrap_or_default();
                let why = format!(
                    "task {name} ran {:?} of real time without waiting in the simulation (blocked outside it?)",
                    seen.1.elapsed()
                );
                st.failure.get_or_insert(why.clone());
                return Err(why);
            }
        }
    }

    /// Decides what runs next (moving time to the next timer when nothing can run now), or why
    /// the run stops. Called with the state locked, by the driver or by the task handing the baton
    /// on.
    fn advance(&self, st: &mut State) -> Next {
        loop {
            if let (Some(f), false) = (&st.failure, st.ignore_failure) {
                return Next::Done(Err(f.clone()));
            }
            let now = st.now;
            let mut runnable = std::mem::take(&mut st.runnable);
            runnable.clear();
            runnable.extend(
                st.tasks
                    .iter()
                    .enumerate()
                    .filter(|(_, t)| {
                        t.status == Status::Runnable && {
                            let g = &st.groups[t.group];
                            g.killed || g.paused_until <= now
                        }
                    })
                    .map(|(i, _)| i),
            );
            if runnable.is_empty() {
                st.runnable = runnable;
                // Move time to the next timer.
                let next = st.timers.peek().map(|Reverse((t, _, _))| *t);
                let Some(t) = next else { return Next::Done(Ok(Stop::Quiet)) };
                if t > st.deadline {
                    st.now = st.now.max(st.deadline);
                    return Next::Done(Ok(Stop::Deadline));
                }
                if t > st.now {
                    st.now = t;
                    st.digest = mix(st.digest, t.as_nanos() as u64);
                }
                while let Some(Reverse((at, _, what))) = st.timers.peek().cloned() {
                    if at > st.now {
                        break;
                    }
                    st.timers.pop();
                    if let Some((task, gen)) = what {
                        let slot = &mut st.tasks[task];
                        match (slot.status, gen) {
                            (Status::Parked(g), Some(want)) if g == want => slot.status = Status::Runnable,
                            (Status::Parked(_), None) => slot.status = Status::Runnable,
                            (Status::Runnable, None) => slot.token = true,
                            _ => {}
                        }
                    }
                }
                continue;
            }
            let pick = runnable[st.rng.below(runnable.len() as u64) as usize];
            st.runnable = runnable;
            st.steps += 1;
            st.digest = mix(st.digest, pick as u64);
            st.tasks[pick].runs += 1;
            return Next::Run(pick);
        }
    }

    /// Hands the baton on (the calling task's status is already set) and waits for it.
    fn hand_back<'a>(&'a self, mut st: MutexGuard<'a, State>, me: usize) -> MutexGuard<'a, State> {
        if let Some(w) = self.pass_on(&mut st, Some(me)) {
            drop(st);
            w.unpark();
        } else if st.running == Some(me) {
            return st;
        } else {
            drop(st);
        }
        // Woken (std park tokens) when given the baton; any other wake-up just looks again.
        loop {
            std::thread::park();
            let st = self.lock();
            if st.running == Some(me) {
                return st;
            }
        }
    }

    /// Decides who runs next and records it: returns the thread to wake (the next task's, or the
    /// driver's when the run stops), `None` when `me` itself runs on.
    fn pass_on(&self, st: &mut State, me: Option<usize>) -> Option<std::thread::Thread> {
        match self.advance(st) {
            Next::Run(t) if Some(t) == me => {
                st.running = Some(t);
                None
            }
            Next::Run(t) => {
                st.running = Some(t);
                st.tasks[t].waker.clone()
            }
            Next::Done(o) => {
                st.outcome = Some(o);
                st.running = None;
                st.driver.clone()
            }
        }
    }

    /// After a task got the baton back: a killed task unwinds (unless it is unwinding already).
    fn after_wake(&self, st: MutexGuard<'_, State>, me: usize) {
        let killed = st.groups[st.tasks[me].group].killed;
        drop(st);
        if killed && !std::thread::panicking() {
            std::panic::resume_unwind(Box::new(Killed));
        }
    }

    /// Makes the calling task wait until runnable again (a yield when `timeout` is zero).
    fn park_current(&self, timeout: Option<Duration>) {
        let Some(me) = self.me() else {
            let name = std::thread::current().name().unwrap_or("unnamed").to_string();
            panic!("thread {name} waits on the simulated clock but is not a task of the simulation");
        };
        let mut st = self.lock();
        let killed = st.groups[st.tasks[me].group].killed;
        if killed {
            // Unwinding (or about to): only let the others run.
            st.tasks[me].status = Status::Runnable;
            let st = self.hand_back(st, me);
            return self.after_wake(st, me);
        }
        if std::mem::take(&mut st.tasks[me].token) {
            return;
        }
        st.tasks[me].gen += 1;
        let gen = st.tasks[me].gen;
        st.tasks[me].status = Status::Parked(gen);
        if let Some(t) = timeout {
            let at = st.now + t;
            st.seq += 1;
            let seq = st.seq;
            st.timers.push(Reverse((at, seq, Some((me, Some(gen))))));
        }
        let st = self.hand_back(st, me);
        self.after_wake(st, me)
    }

    /// Lets other runnable tasks run before the caller goes on.
    pub fn yield_now(&self) {
        let Some(me) = self.me() else { return };
        let mut st = self.lock();
        st.tasks[me].status = Status::Runnable;
        let st = self.hand_back(st, me);
        self.after_wake(st, me)
    }

    fn spawn_task(
        &self,
        name: &str,
        group: Option<Group>,
        f: Box<dyn FnOnce() + Send + 'static>,
    ) -> std::io::Result<u64> {
        let me = self.me();
        let mut st = self.lock();
        let group = match (group, me) {
            (Some(g), _) => g,
            (None, Some(t)) => st.tasks[t].group,
            (None, None) => st.outside_group,
        };
        let id = st.tasks.len();
        st.tasks.push(TaskSlot {
            name: name.to_string(),
            group,
            status: Status::Starting,
            token: false,
            gen: 0,
            joiners: Vec::new(),
            thread: None,
            waker: None,
            runs: 0,
        });
        drop(st);
        let sim = self.clone();
        let cpu = self.inner.cpu;
        let body = move || {
            CURRENT.with(|c| c.set(Some((sim.inner.id, id))));
            pin_to(cpu);
            {
                let mut st = sim.lock();
                while st.running != Some(id) {
                    drop(st);
                    std::thread::park();
                    st = sim.lock();
                }
                let killed = st.groups[st.tasks[id].group].killed;
                drop(st);
                if !killed {
                    if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
                        if p.downcast_ref::<Killed>().is_none() {
                            let msg = p
                                .downcast_ref::<String>()
                                .cloned()
                                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                                .unwrap_or_else(|| "a panic without a message".into());
                            let mut st = sim.lock();
                            let who =
                                format!("{} [{}]", st.tasks[id].name, st.groups[st.tasks[id].group].name);
                            st.failure.get_or_insert(format!("task {who} panicked: {msg}"));
                        }
                    }
                }
            }
            let mut st = sim.lock();
            st.tasks[id].status = Status::Done;
            let joiners = std::mem::take(&mut st.tasks[id].joiners);
            for j in joiners {
                if matches!(st.tasks[j].status, Status::Parked(_)) {
                    st.tasks[j].status = Status::Runnable;
                } else {
                    st.tasks[j].token = true;
                }
            }
            let w = sim.pass_on(&mut st, None);
            drop(st);
            if let Some(w) = w {
                w.unpark();
            }
            CURRENT.with(|c| c.set(None));
        };
        let h = std::thread::Builder::new().name(format!("sim-{name}")).stack_size(1 << 20).spawn(body)?;
        let mut st = self.lock();
        st.tasks[id].waker = Some(h.thread().clone());
        st.tasks[id].thread = Some(h);
        st.tasks[id].status = Status::Runnable;
        Ok(id as u64)
    }

    /// Joins the OS threads of every ended task (the harness calls this between phases, so a
    /// long run does not keep thousands of ended threads).
    pub fn reap(&self) {
        let handles: Vec<_> = {
            let mut st = self.lock();
            st.tasks.iter_mut().filter(|t| t.status == Status::Done).filter_map(|t| t.thread.take()).collect()
        };
        for h in handles {
            let _ = h.join();
        }
    }

    /// A clock of this simulation for a node whose clock runs `offset` ahead of simulated time
    /// (jumps move the offset; see [`NodeClock::jump`]).
    pub fn clock(&self) -> Arc<NodeClock> {
        Arc::new(NodeClock { sim: self.clone(), offset_ns: std::sync::atomic::AtomicU64::new(0) })
    }
}

impl Sched for Sim {
    fn current(&self) -> u64 {
        self.me().expect("not a task of this simulation") as u64
    }

    fn park(&self, timeout: Option<Duration>) {
        self.park_current(timeout)
    }

    fn unpark(&self, task: u64) {
        let mut st = self.lock();
        let t = &mut st.tasks[task as usize];
        match t.status {
            Status::Parked(_) => t.status = Status::Runnable,
            Status::Runnable => t.token = true,
            Status::Done | Status::Starting => {}
        }
    }

    fn spawn(&self, name: &str, f: Box<dyn FnOnce() + Send + 'static>) -> std::io::Result<u64> {
        self.spawn_task(name, None, f)
    }

    fn join(&self, task: u64) {
        loop {
            {
                let mut st = self.lock();
                if st.tasks[task as usize].status == Status::Done {
                    return;
                }
                let me = self.me().expect("join is called by a task");
                if !st.tasks[task as usize].joiners.contains(&me) {
                    st.tasks[task as usize].joiners.push(me);
                }
            }
            self.park_current(None);
        }
    }

    fn is_finished(&self, task: u64) -> bool {
        self.lock().tasks[task as usize].status == Status::Done
    }
}

/// One node's clock: simulated time plus the node's offset (see [`Sim::clock`]).
pub struct NodeClock {
    sim: Sim,
    offset_ns: std::sync::atomic::AtomicU64,
}

impl NodeClock {
    /// Moves this clock forward by `d` (a jump: the node's monotonic clock is suddenly ahead).
    pub fn jump(&self, d: Duration) {
        self.offset_ns.fetch_add(d.as_nanos() as u64, std::sync::atomic::Ordering::AcqRel);
    }

    /// The simulation.
    pub fn sim(&self) -> &Sim {
        &self.sim
    }
}

impl Clock for NodeClock {
    fn now(&self) -> Duration {
        self.sim.now() + Duration::from_nanos(self.offset_ns.load(std::sync::atomic::Ordering::Acquire))
    }

    fn unix_ns(&self) -> u128 {
        // A fixed wall-clock origin (2030-01-01), so reports are reproducible.
        1_893_456_000_000_000_000u128 + self.now().as_nanos()
    }

    fn sched(&self) -> Option<Arc<dyn Sched>> {
        Some(Arc::new(self.sim.clone()))
    }
}
