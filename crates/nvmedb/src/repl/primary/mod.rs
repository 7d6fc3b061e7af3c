//! The primary side: [`ReplicatedLog`] ships every appended record to the standbys and makes
//! durability wait for their shadow counters.
//!
//! Owns: the in-memory queue of records not yet confirmed by every standby, one shipper thread
//! (plus an acknowledgement reader) per standby, the shadow counters, the mode in force
//! (configured or degraded), fencing state, and the replication-delay samples.
//!
//! Invariants:
//! - Records enter the queue in LSN order: the local append and the push into the queue happen
//!   under one append lock, which is not the queue's lock, so a local append that blocks (the
//!   fast log's ring full until a checkpoint's page flush, which waits for the standbys, lets
//!   destaging go on) never keeps the shippers from the queue. A record appended locally but
//!   not yet queued lies past every queued record, so no shipper skips it.
//! - The queue holds every record with `lsn >= queue.start`; records leave it only when they are
//!   locally durable (so a shipper that finds its position below `queue.start` can read them
//!   back from the local log) and, unless the queue exceeds its memory bound, confirmed by all
//!   standbys.
//! - `durable_lsn()` = the largest value ever returned by `combine(mode, local durable,
//!   shadows)`: it never runs ahead of the local log and never goes backwards.
//! - Once fenced (a standby reported a newer epoch), no commit is acknowledged again.
//! - A commit never waits out its timeout for standbys that refused our secret: when those
//!   alone keep the mode from being satisfied, it fails at once with the authentication error
//!   naming the standby (a misconfiguration is reported as such, under either policy).
//! - Every standby learns the synchronous set (mode and members, in chain order) right after
//!   the handshake, so that a promotion can fence it.
//! - Committers do not flush the local log themselves: one local-flusher thread makes it
//!   durable up to the highest LSN asked for (by a shipper for each frame it sends, or by a
//!   committer while no shipper is connected), then wakes the commits covered. A commit so
//!   parks once, until both the local log and the standbys cover it, and is woken by whichever
//!   of the two comes last (the acknowledgement reader or the flusher). A failed local flush
//!   wakes every commit, and each then reports the local log's error.
//! - Commit groups: a shipper with records to send waits until as many committers wait as the
//!   last acknowledgement released (`expected`), or `ReplConfig::group_wait` passes, whichever
//!   comes first; the committer that completes the group wakes it. One frame, one local flush
//!   and one acknowledgement then serve the whole group (on a primary whose CPUs are busy,
//!   shipping at the first committer's arrival sent frames of one or two commits).

use super::clock::{Clock, Cond, Task, Waker};
use super::env::Env;
use super::net::Conn;
use super::state::{history_in, write_history, History};
use crate::error::ReplError;
use crate::error::{Error, Result};
use crate::io::Storage;
use crate::util::sync::MutexExt;
use crate::wal::{LogOpener, Lsn, RecordLog, RecordReader, RecoveredLog, WalStats};
use crate::xlog::combine;
use crate::xlog::{LinkState, ReplicationMode};
use std::collections::VecDeque;
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod gate;
mod ship;
mod status;

pub use gate::AckGate;
use ship::{kick_flusher, local_flusher, set_link, shipper};
pub use status::{ReplStatus, StandbyStatus};

/// What a commit does when the standbys do not confirm it in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StandbyPolicy {
    /// Wait up to `timeout`, then fail the commit with [`ReplError::Timeout`]. The commit's
    /// records are still in the local log (they may survive a crash); the caller learns that
    /// durability on the standbys is not guaranteed.
    Fail {
        /// How long a commit waits for the standbys.
        timeout: Duration,
    },
    /// Wait up to `timeout`, then switch to mode `to` (logged to stderr and shown in status)
    /// and go on; the configured mode returns when the standbys catch up.
    Degrade {
        /// How long a commit waits before degrading.
        timeout: Duration,
        /// The weaker mode (usually `Lazy`).
        to: ReplicationMode,
    },
}

/// Configuration of a primary's replication.
#[derive(Debug, Clone)]
pub struct ReplConfig {
    /// Standby addresses (`host:port`), in chain order.
    pub standbys: Vec<String>,
    /// The shared secret of the handshake.
    pub secret: Vec<u8>,
    /// How commits combine the standbys' positions.
    pub mode: ReplicationMode,
    /// What happens when standbys are down or slow.
    pub policy: StandbyPolicy,
    /// This primary's epoch (term); must be at least the standbys' epoch.
    pub epoch: u64,
    /// Upper bound of one records frame.
    pub max_frame_bytes: usize,
    /// Records kept in memory for shipping beyond this are read back from the local log.
    pub max_queue_bytes: usize,
    /// Pause between reconnection attempts.
    pub reconnect_delay: Duration,
    /// Record the delay from append to the first standby's matching acknowledgement.
    pub record_delays: bool,
    /// Log kept for an absent or lagging standby, at most: when a checkpoint would have to keep
    /// more than this for one standby, the primary gives that standby up (says so on stderr and
    /// in its status) and frees the log; the standby then takes a base backup when it returns.
    pub max_retained_bytes: u64,
    /// When set, commits are acknowledged only while this gate is open (an HA agent keeps it
    /// open while it holds the leadership lease).
    pub ack_gate: Option<Arc<AckGate>>,
    /// The longest a shipper holds records back while a commit group gathers (as many
    /// committers as the last acknowledgement released); zero ships every record at once.
    pub group_wait: Duration,
    /// The clock and network the primary's threads and connections use.
    pub env: Env,
}

impl Default for ReplConfig {
    fn default() -> Self {
        Self {
            standbys: Vec::new(),
            secret: Vec::new(),
            mode: ReplicationMode::Eager,
            policy: StandbyPolicy::Fail { timeout: Duration::from_secs(10) },
            epoch: 1,
            max_frame_bytes: 1 << 20,
            max_queue_bytes: 64 << 20,
            reconnect_delay: Duration::from_millis(100),
            record_delays: false,
            max_retained_bytes: 1 << 30,
            ack_gate: None,
            group_wait: Duration::from_micros(200),
            env: Env::system(),
        }
    }
}

struct QRec {
    lsn: Lsn,
    end: Lsn,
    kind: u8,
    payload: Vec<u8>,
    /// When it was appended (a standby's lag in seconds: how long ago the first record it has
    /// not acknowledged was appended).
    at: Duration,
}

struct Queue {
    recs: VecDeque<QRec>,
    /// Every record with `lsn >= start` is in `recs`.
    start: Lsn,
    bytes: usize,
}

struct ModeState {
    mode: ReplicationMode,
    degraded: Option<String>,
    fenced: Option<ReplError>,
    events: Vec<String>,
    /// Commits parked until the standbys confirm their LSN (see [`wake_covered`]).
    sleepers: Vec<Sleeper>,
}

/// A commit waiting for the standbys: woken only when the combined position covers `lsn` (or
/// everything changes: fencing, shutdown, a refused secret), not on every acknowledgement.
struct Sleeper {
    lsn: Lsn,
    waker: Waker,
}

struct Link {
    state: LinkState,
    detail: String,
    connects: u64,
    stream: Option<Box<dyn Conn>>,
    /// The standby refused our secret (until a handshake succeeds).
    auth: Option<ReplError>,
    /// The log it needs was given up (`max_retained_bytes`); cleared when it follows again.
    given_up: bool,
}

pub(super) struct Shared {
    pub(super) cfg: ReplConfig,
    pub(super) local: Arc<dyn RecordLog>,
    q: Mutex<Queue>,
    /// Orders appends: held across the local append and the push into `q` (see the invariants).
    append_mx: Mutex<()>,
    q_cv: Cond,
    /// Shippers waiting on `q_cv` (incremented under `q`): committers skip the wake-up syscall
    /// when nobody waits.
    q_waiters: std::sync::atomic::AtomicUsize,
    /// Per standby: the end of what its shipper has sent on the current connection
    /// (`u64::MAX` while it is not shipping: a wake-up would not help it). A committer wakes
    /// the shippers only when one of them has not sent its records yet.
    sent: Vec<AtomicU64>,
    pub(super) shadows: Vec<AtomicU64>,
    links: Vec<Mutex<Link>>,
    ms: Mutex<ModeState>,
    published: AtomicU64,
    stop: AtomicBool,
    stop_mx: Mutex<()>,
    stop_cv: Cond,
    /// (record end, append time on `clock`), for the delay samples.
    samples: Mutex<VecDeque<(Lsn, Duration)>>,
    delays: Mutex<Vec<u64>>,
    /// End of the last appended record (the local durable position may lie past it, in filler).
    last_end: AtomicU64,
    /// The epochs of this log (sent at the handshake: a standby finds its fork point with it).
    history: History,
    /// The data files, for base backups of standbys that have none (or cannot follow).
    backup: Option<Arc<dyn Storage>>,
    gate: Option<Arc<AckGate>>,
    /// The highest LSN a committer asked the local flusher to make durable.
    flush_req: AtomicU64,
    /// The local flusher is parked (or about to park): a committer that raised `flush_req`
    /// unparks it.
    flusher_idle: AtomicBool,
    /// The local flusher's thread, to unpark it.
    flusher: std::sync::OnceLock<Waker>,
    clock: Arc<dyn Clock>,
    /// A local flush failed: commits get the local log's error from the log itself.
    flush_failed: AtomicBool,
    /// Per standby: committers that arrived since its shipper last took a group (see
    /// `kick_shippers`).
    pending: Vec<std::sync::atomic::AtomicUsize>,
    /// The size of the last group an acknowledgement (or local flush) released: a shipper waits
    /// for this many committers before it sends (or `group_wait`).
    expected: std::sync::atomic::AtomicUsize,
    /// Shippers waiting for a group to fill (`q_waiters` counts these and the idle ones).
    group_waiters: std::sync::atomic::AtomicUsize,
}

/// What a primary knows about its node beyond the replication settings.
#[derive(Clone, Default)]
pub struct PrimaryNode {
    /// The epochs of its log.
    pub history: History,
    /// Its data files (base backups are sent from them); `None`: standbys that need one are
    /// refused as diverged.
    pub backup: Option<Arc<dyn Storage>>,
}

/// A [`RecordLog`] that replicates the local log to standbys. See the module documentation.
pub struct ReplicatedLog {
    sh: Arc<Shared>,
    threads: Mutex<Vec<Task<()>>>,
}

impl std::fmt::Debug for ReplicatedLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ReplicatedLog({:?} to {:?})", self.sh.cfg.mode, self.sh.cfg.standbys)
    }
}

impl ReplicatedLog {
    /// Starts replicating `local` to `cfg.standbys` (connections are made in the background;
    /// commits wait for them as the mode and policy say).
    pub fn start(local: Arc<dyn RecordLog>, cfg: ReplConfig) -> Result<Arc<Self>> {
        Self::start_node(local, cfg, PrimaryNode::default())
    }

    /// [`ReplicatedLog::start`] with the node's history and data files (for base backups).
    pub fn start_node(local: Arc<dyn RecordLog>, cfg: ReplConfig, node: PrimaryNode) -> Result<Arc<Self>> {
        if cfg.secret.is_empty() {
            return Err(Error::Config {
                key: "repl.secret".into(),
                detail: "an empty secret is not allowed".into(),
            });
        }
        if let ReplicationMode::Quorum(k) = cfg.mode {
            if k == 0 || k > cfg.standbys.len() {
                return Err(Error::Config {
                    key: "repl.mode".into(),
                    detail: format!("quorum {k} needs between 1 and {} standbys", cfg.standbys.len()),
                });
            }
        }
        let end = local.end_lsn();
        let n = cfg.standbys.len();
        let clock = cfg.env.clock.clone();
        let sh = Arc::new(Shared {
            local: local.clone(),
            q: Mutex::new(Queue { recs: VecDeque::new(), start: end, bytes: 0 }),
            append_mx: Mutex::new(()),
            q_cv: Cond::new(clock.as_ref()),
            q_waiters: std::sync::atomic::AtomicUsize::new(0),
            sent: (0..n).map(|_| AtomicU64::new(u64::MAX)).collect(),
            shadows: (0..n).map(|_| AtomicU64::new(0)).collect(),
            links: (0..n)
                .map(|_| {
                    Mutex::new(Link {
                        state: LinkState::Stale,
                        detail: "connecting".into(),
                        connects: 0,
                        stream: None,
                        auth: None,
                        given_up: false,
                    })
                })
                .collect(),
            ms: Mutex::new(ModeState {
                mode: cfg.mode,
                degraded: None,
                fenced: None,
                events: Vec::new(),
                sleepers: Vec::new(),
            }),
            published: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            stop_mx: Mutex::new(()),
            stop_cv: Cond::new(clock.as_ref()),
            samples: Mutex::new(VecDeque::new()),
            delays: Mutex::new(Vec::new()),
            last_end: AtomicU64::new(end),
            history: node.history,
            backup: node.backup,
            gate: cfg.ack_gate.clone(),
            flush_req: AtomicU64::new(0),
            flusher_idle: AtomicBool::new(false),
            flusher: std::sync::OnceLock::new(),
            flush_failed: AtomicBool::new(false),
            pending: (0..n).map(|_| std::sync::atomic::AtomicUsize::new(0)).collect(),
            expected: std::sync::atomic::AtomicUsize::new(1),
            group_waiters: std::sync::atomic::AtomicUsize::new(0),
            clock: clock.clone(),
            cfg,
        });
        let mut threads = Vec::new();
        let s = sh.clone();
        let t = clock.spawn("nvmedb-repl-flush", move || local_flusher(s)).map_err(|e| {
            Error::Io(crate::io::IoError::os("repl local flusher", crate::io::IoOpKind::Setup, 0, 0, e))
        })?;
        threads.push(t);
        // Chain mode: only the first standby is shipped to; it forwards along the chain.
        let shipped = if sh.cfg.mode == ReplicationMode::Chain { n.min(1) } else { n };
        for i in shipped..n {
            set_link(&sh, i, LinkState::Stale, "reached through the chain".into());
        }
        for i in 0..shipped {
            let s = sh.clone();
            let t = clock.spawn(&format!("nvmedb-ship-{i}"), move || shipper(s, i)).map_err(|e| {
                Error::Io(crate::io::IoError::os("repl shipper", crate::io::IoOpKind::Setup, 0, 0, e))
            })?;
            threads.push(t);
        }
        Ok(Arc::new(Self { sh, threads: Mutex::new(threads) }))
    }

    /// The replication state (mode in force, links, shadow counters).
    pub fn status(&self) -> ReplStatus {
        let local_durable = self.sh.local.durable_lsn();
        let appended = self.sh.last_end.load(Ordering::Acquire);
        let shadows: Vec<Lsn> = self.sh.shadows.iter().map(|s| s.load(Ordering::Acquire)).collect();
        let lags: Vec<Duration> = {
            let q = self.sh.q.locked();
            let now = self.sh.clock.now();
            shadows
                .iter()
                .map(|&s| {
                    if s >= appended {
                        return Duration::ZERO;
                    }
                    let i = q.recs.partition_point(|r| r.end <= s);
                    q.recs.get(i).or(q.recs.front()).map_or(Duration::ZERO, |r| now.saturating_sub(r.at))
                })
                .collect()
        };
        let ms = self.sh.ms.locked();
        ReplStatus {
            configured: self.sh.cfg.mode,
            effective: ms.mode,
            degraded: ms.degraded.clone(),
            fenced: ms.fenced.as_ref().map(|e| e.to_string()),
            lease_lost: self.sh.gate.as_ref().is_some_and(|g| !g.is_open()),
            epoch: self.sh.cfg.epoch,
            local_durable,
            appended,
            durable: self.sh.published.load(Ordering::Acquire),
            standbys: self
                .sh
                .cfg
                .standbys
                .iter()
                .enumerate()
                .map(|(i, a)| {
                    let l = self.sh.links[i].locked();
                    StandbyStatus {
                        addr: a.clone(),
                        link: l.state,
                        detail: l.detail.clone(),
                        shadow: shadows[i],
                        connects: l.connects,
                        given_up: l.given_up,
                        lag_bytes: appended.saturating_sub(shadows[i]),
                        lag: lags[i],
                    }
                })
                .collect(),
            events: ms.events.clone(),
        }
    }

    /// Replication delays recorded so far (nanoseconds from append to the first standby's
    /// acknowledgement covering the record), draining them. Needs `record_delays`.
    pub fn take_delays(&self) -> Vec<u64> {
        std::mem::take(&mut *self.sh.delays.locked())
    }

    /// Stops acknowledging for good (an HA agent that lost its leadership steps down): every
    /// waiting and later commit fails at once with [`ReplError::LeaseLost`] carrying `why`,
    /// and the status shows it; then shipping stops as in [`ReplicatedLog::shutdown`].
    pub fn step_down(&self, why: &str) {
        {
            let mut ms = self.sh.ms.locked();
            if ms.fenced.is_none() {
                ms.fenced = Some(ReplError::LeaseLost { detail: format!("stepped down: {why}") });
                ms.events.push(format!("stepped down: {why}"));
            }
            wake_all(&mut ms);
        }
        self.shutdown();
    }

    /// Stops shipping and closes the connections (also done on drop).
    pub fn shutdown(&self) {
        self.sh.stop.store(true, Ordering::Release);
        for l in &self.sh.links {
            if let Some(s) = &l.locked().stream {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        {
            let _g = self.sh.stop_mx.locked();
            self.sh.stop_cv.notify_all();
        }
        {
            let _g = self.sh.q.locked();
            self.sh.q_cv.notify_all();
        }
        if let Some(f) = self.sh.flusher.get() {
            f.wake();
        }
        wake_all(&mut self.sh.ms.locked());
        let threads = std::mem::take(&mut *self.threads.locked());
        for t in threads {
            t.join();
        }
    }

    /// The authentication error that alone keeps `mode` from ever being satisfied, if any.
    fn auth_blocked(&self, mode: ReplicationMode) -> Option<ReplError> {
        if mode == ReplicationMode::Lazy {
            return None;
        }
        let mut first = None;
        let shadows: Vec<u64> = self
            .sh
            .links
            .iter()
            .map(|l| match &l.locked().auth {
                Some(e) => {
                    first.get_or_insert_with(|| e.clone());
                    0
                }
                None => u64::MAX,
            })
            .collect();
        first.filter(|_| combine(mode, u64::MAX, &shadows) == 0)
    }

    fn combined(&self, ms: &ModeState) -> Lsn {
        combined(&self.sh, ms)
    }

    /// Wakes the shippers when one of them has not sent the records up to `lsn` (a committer
    /// is about to wait for them): one wake-up per commit group at most, none while the
    /// shippers are busy (they come back for everything queued before they sleep).
    fn kick_shippers(&self, lsn: Lsn) {
        let sh = &self.sh;
        let arrived = sh.pending.iter().map(|p| p.fetch_add(1, Ordering::AcqRel) + 1).max().unwrap_or(0);
        let waiting = sh.q_waiters.load(Ordering::Acquire);
        if waiting == 0 || sh.sent.iter().all(|s| s.load(Ordering::Acquire) >= lsn) {
            return;
        }
        // A shipper idle (not yet gathering a group) is woken to start one; one gathering a
        // group only by the committer that completes it (its timer covers the rest).
        let gathering = sh.group_waiters.load(Ordering::Acquire);
        if gathering >= waiting && arrived < sh.expected.load(Ordering::Acquire) {
            return;
        }
        // Taking the queue's lock orders this wake-up after a shipper's check of the queue and
        // its wait (a shipper that checked before our records were queued is waiting by now).
        drop(sh.q.locked());
        sh.q_cv.notify_all();
    }
}

/// The position commits may be acknowledged up to (under `ms`): `combine(mode, local durable,
/// shadows)`, never below what was published before; frozen once fenced.
fn combined(sh: &Shared, ms: &ModeState) -> Lsn {
    if ms.fenced.is_some() {
        return sh.published.load(Ordering::Acquire);
    }
    let local = sh.local.durable_lsn();
    let c = with_shadows(sh, |shadows| combine(ms.mode, local, shadows));
    sh.published.fetch_max(c, Ordering::AcqRel).max(c)
}

/// Calls `f` with a snapshot of the shadow counters (on the stack for up to 8 standbys).
fn with_shadows<T>(sh: &Shared, f: impl FnOnce(&[u64]) -> T) -> T {
    let n = sh.shadows.len();
    if n <= 8 {
        let mut a = [0u64; 8];
        for (d, s) in a.iter_mut().zip(&sh.shadows) {
            *d = s.load(Ordering::Acquire);
        }
        f(&a[..n])
    } else {
        f(&sh.shadows.iter().map(|s| s.load(Ordering::Acquire)).collect::<Vec<_>>())
    }
}

/// Wakes every parked commit (fencing, shutdown, a refused secret, a mode change: each
/// re-examines its case).
fn wake_all(ms: &mut ModeState) {
    for s in ms.sleepers.drain(..) {
        s.waker.wake();
    }
}

/// Wakes the parked commits whose LSN the combined position now covers, and only those.
fn wake_covered(sh: &Shared, ms: &mut ModeState) {
    if ms.sleepers.is_empty() {
        return;
    }
    let c = combined(sh, ms);
    let before = ms.sleepers.len();
    ms.sleepers.retain(|s| {
        if s.lsn <= c {
            s.waker.wake();
            false
        } else {
            true
        }
    });
    let woken = before - ms.sleepers.len();
    if woken > 0 {
        // The group just released comes back as the next one (see the module's invariants).
        sh.expected.store(woken, Ordering::Release);
    }
}

impl Drop for ReplicatedLog {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl RecordLog for ReplicatedLog {
    fn ships_records(&self) -> bool {
        true
    }

    fn append_record(&self, kind: u8, payload: &[u8]) -> Result<(Lsn, Lsn)> {
        let order = self.sh.append_mx.locked();
        let (lsn, end) = self.sh.local.append_record(kind, payload)?;
        let mut q = self.sh.q.locked();
        q.bytes += payload.len() + 32;
        q.recs.push_back(QRec { lsn, end, kind, payload: payload.to_vec(), at: self.sh.clock.now() });
        self.sh.last_end.store(end, Ordering::Release);
        if self.sh.cfg.record_delays {
            let mut smp = self.sh.samples.locked();
            if smp.len() >= 4_000_000 {
                smp.pop_front(); // no acknowledgements arrive: keep the newest
            }
            smp.push_back((end, self.sh.clock.now()));
        }
        // Trim what every standby has and the local log holds durably (or, over the memory
        // bound, what the local log holds durably: shippers read it back from there).
        let local = self.sh.local.durable_lsn();
        let min_shadow = self.sh.shadows.iter().map(|s| s.load(Ordering::Acquire)).min().unwrap_or(local);
        let over = q.bytes > self.sh.cfg.max_queue_bytes;
        while let Some(f) = q.recs.front() {
            if f.end <= local && (f.end <= min_shadow || over) {
                let f = q.recs.pop_front().expect("front exists");
                q.bytes -= f.payload.len() + 32;
                q.start = f.end;
            } else {
                break;
            }
        }
        drop(q);
        drop(order);
        // No wake-up here: the shippers are woken when a commit waits for its records
        // (`kick_shippers`), once per commit group rather than once per record.
        Ok((lsn, end))
    }

    fn end_lsn(&self) -> Lsn {
        self.sh.local.end_lsn()
    }

    fn durable_lsn(&self) -> Lsn {
        let ms = self.sh.ms.locked();
        self.combined(&ms)
    }

    fn wait_durable(&self, lsn: Lsn) -> Result<Lsn> {
        // Nothing lies beyond the end of the last record but the local log's filler (after a
        // flush, `end_lsn` may point past it), which is never shipped: a wait for the log's
        // end is a wait for its last record.
        let lsn = lsn.min(self.sh.last_end.load(Ordering::Acquire));
        // The records go out while the local log makes them durable.
        self.kick_shippers(lsn);
        if self.sh.local.durable_lsn() < lsn
            && self.sh.sent.iter().all(|s| s.load(Ordering::Acquire) == u64::MAX)
        {
            // No shipper is connected (none will ask for the local flush of these records).
            kick_flusher(&self.sh, lsn);
        }
        let clock = &self.sh.clock;
        let started = clock.now();
        let timeout = match self.sh.cfg.policy {
            StandbyPolicy::Fail { timeout } | StandbyPolicy::Degrade { timeout, .. } => timeout,
        };
        let mut ms = self.sh.ms.locked();
        loop {
            if let Some(f) = &ms.fenced {
                return Err(Error::Replication(f.clone()));
            }
            let c = self.combined(&ms);
            if c >= lsn {
                if let Some(g) = &self.sh.gate {
                    if !g.is_open() {
                        return Err(Error::Replication(ReplError::LeaseLost {
                            detail: "the HA agent has not renewed this primary's leadership lease in time"
                                .into(),
                        }));
                    }
                }
                return Ok(c);
            }
            if let Some(e) = self.auth_blocked(ms.mode) {
                return Err(Error::Replication(e));
            }
            if self.sh.flush_failed.load(Ordering::Acquire) && self.sh.local.durable_lsn() < lsn {
                // The local log's own error (it is poisoned); flushing here reports it.
                drop(ms);
                self.sh.local.wait_durable(lsn)?;
                ms = self.sh.ms.locked();
                continue;
            }
            let waited = clock.now().saturating_sub(started);
            if waited >= timeout {
                match self.sh.cfg.policy {
                    StandbyPolicy::Fail { .. } => {
                        return Err(Error::Replication(ReplError::Timeout {
                            lsn,
                            mode: ms.mode,
                            waited,
                            shadows: self.sh.shadows.iter().map(|s| s.load(Ordering::Acquire)).collect(),
                        }))
                    }
                    StandbyPolicy::Degrade { to, .. } => {
                        if ms.mode != to {
                            let why = format!(
                                "standbys did not confirm LSN {lsn} within {timeout:?} in {:?} mode (positions {:?})",
                                ms.mode,
                                self.sh.shadows.iter().map(|s| s.load(Ordering::Acquire)).collect::<Vec<_>>()
                            );
                            let from = ms.mode;
                            eprintln!("nvmedb repl: DEGRADED from {from:?} to {to:?}: {why}");
                            ms.events.push(format!("degraded {from:?} -> {to:?}: {why}"));
                            ms.mode = to;
                            ms.degraded = Some(why);
                            // The other parked commits are judged by the weaker mode now.
                            wake_covered(&self.sh, &mut ms);
                            continue;
                        }
                    }
                }
            }
            let left = timeout.saturating_sub(waited).max(Duration::from_millis(1));
            // Park until an acknowledgement covers `lsn` (or everything changes), or the
            // timeout; then look again (a spurious wake-up just loops).
            let me = clock.current_waker();
            ms.sleepers.push(Sleeper { lsn, waker: clock.current_waker() });
            drop(ms);
            clock.park_timeout(left);
            ms = self.sh.ms.locked();
            ms.sleepers.retain(|s| !s.waker.same(&me));
        }
    }

    fn recovered(&self) -> RecoveredLog {
        self.sh.local.recovered()
    }

    fn reader(&self, from: Lsn) -> Result<Box<dyn RecordReader>> {
        self.sh.local.reader(from)
    }

    fn truncate_before(&self, lsn: Lsn) -> Result<usize> {
        // Keep what a standby may still need to be re-shipped, up to the retention bound.
        let end = self.sh.local.end_lsn();
        let mut keep = lsn;
        for (i, s) in self.sh.shadows.iter().enumerate() {
            let shadow = s.load(Ordering::Acquire);
            let mut l = self.sh.links[i].locked();
            if l.given_up || shadow >= lsn {
                continue;
            }
            if end.saturating_sub(shadow) > self.sh.cfg.max_retained_bytes {
                l.given_up = true;
                let what = format!(
                    "gave up standby {} at LSN {shadow}: keeping its log would take more than {} bytes (max_retained_bytes); it takes a base backup when it returns",
                    self.sh.cfg.standbys[i], self.sh.cfg.max_retained_bytes
                );
                l.detail = what.clone();
                drop(l);
                eprintln!("nvmedb repl: {what}");
                self.sh.ms.locked().events.push(what);
            } else {
                keep = keep.min(shadow);
            }
        }
        self.sh.local.truncate_before(keep)
    }

    fn stats(&self) -> WalStats {
        self.sh.local.stats()
    }

    fn wants_checkpoint(&self) -> bool {
        self.sh.local.wants_checkpoint()
    }

    fn wait_for_space(&self) -> Result<()> {
        self.sh.local.wait_for_space()
    }

    fn describe(&self) -> String {
        format!(
            "{}, replicated ({:?}, epoch {}) to {}",
            self.sh.local.describe(),
            self.sh.cfg.mode,
            self.sh.cfg.epoch,
            self.sh.cfg.standbys.join(", ")
        )
    }
}

/// Opens a [`ReplicatedLog`] over the log another opener opens.
pub struct ReplicatedLogOpener {
    /// The local log.
    pub inner: Box<dyn LogOpener>,
    /// Replication settings.
    pub config: ReplConfig,
    /// Receives the replicated log once open (for status and delays).
    pub handle: Arc<Mutex<Option<Arc<ReplicatedLog>>>>,
    /// The node's replication state ([`Disk::state`](super::disk::Disk::state)): its epoch
    /// history is read there, and extended when this primary's epoch is new (its records begin
    /// at the log's end at open).
    pub state: Option<Arc<dyn Storage>>,
    /// The data files, for base backups.
    pub backup: Option<Arc<dyn Storage>>,
}

impl LogOpener for ReplicatedLogOpener {
    fn is_empty(&self) -> Result<bool> {
        self.inner.is_empty()
    }

    fn open(self: Box<Self>, initial_lsn: Lsn) -> Result<Arc<dyn RecordLog>> {
        let local = self.inner.open(initial_lsn)?;
        let mut history = History::default();
        if let Some(st) = &self.state {
            history = history_in(st.as_ref())?;
            if self.config.epoch > history.last_epoch() {
                history.begin(self.config.epoch, local.end_lsn());
                write_history(st.as_ref(), &history)?;
            }
        }
        let r = ReplicatedLog::start_node(local, self.config, PrimaryNode { history, backup: self.backup })?;
        *self.handle.locked() = Some(r.clone());
        Ok(r)
    }
}
