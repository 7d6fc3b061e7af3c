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

use super::replica_log::encode_record;
use super::state::{read_history, write_history, ClusterView, History};
use super::wire::{self, FrameType, Role};
use super::{LinkState, ReplError, ReplicationMode};
use crate::error::{Error, Result};
use crate::io::Storage;
use crate::util::bytes::u64_at;
use crate::util::sync::MutexExt;
use crate::wal::{LogOpener, Lsn, RecordLog, RecordReader, RecoveredLog, WalStats};
use crate::xlog::combine;
use std::collections::VecDeque;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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
    at: Instant,
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
    thread: std::thread::Thread,
}

struct Link {
    state: LinkState,
    detail: String,
    connects: u64,
    stream: Option<TcpStream>,
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
    q_cv: Condvar,
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
    stop_cv: Condvar,
    samples: Mutex<VecDeque<(Lsn, Instant)>>,
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
    flusher: std::sync::OnceLock<std::thread::Thread>,
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

/// Whether a primary may acknowledge commits: open until a deadline that its HA agent extends
/// after each renewal of its leadership lease (renewal sent at t, lease TTL T: open until
/// t + T - margin, so acknowledgements stop before the lease can expire in the store).
#[derive(Debug)]
pub struct AckGate {
    base: Instant,
    /// Nanoseconds after `base` until which acknowledgements are allowed (0: closed).
    until_ns: AtomicU64,
}

impl AckGate {
    /// A closed gate.
    pub fn closed() -> Arc<Self> {
        Arc::new(Self { base: Instant::now(), until_ns: AtomicU64::new(0) })
    }

    /// Allows acknowledgements until `deadline` (never moves the deadline back).
    pub fn open_until(&self, deadline: Instant) {
        let ns = deadline.saturating_duration_since(self.base).as_nanos() as u64;
        self.until_ns.fetch_max(ns, Ordering::AcqRel);
    }

    /// Stops acknowledgements now.
    pub fn close(&self) {
        self.until_ns.store(0, Ordering::Release);
    }

    /// True while acknowledgements are allowed.
    pub fn is_open(&self) -> bool {
        (self.base.elapsed().as_nanos() as u64) < self.until_ns.load(Ordering::Acquire)
    }
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

/// Where one standby stands, for status output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StandbyStatus {
    /// Its address.
    pub addr: String,
    /// Link health.
    pub link: LinkState,
    /// Last error or note.
    pub detail: String,
    /// Its shadow counter (persisted position it reported).
    pub shadow: Lsn,
    /// Successful connections so far.
    pub connects: u64,
    /// Its log was given up (`max_retained_bytes`): it needs a base backup.
    pub given_up: bool,
    /// Bytes of log appended here that it has not acknowledged (appended end − shadow).
    pub lag_bytes: u64,
    /// How long ago the first record it has not acknowledged was appended (zero when it has
    /// everything; at least this long when that record already left the shipping queue).
    pub lag: Duration,
}

/// The replication state of a primary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplStatus {
    /// The configured mode.
    pub configured: ReplicationMode,
    /// The mode in force (differs while degraded).
    pub effective: ReplicationMode,
    /// Why the mode is degraded, if it is.
    pub degraded: Option<String>,
    /// Set when a standby fenced this primary.
    pub fenced: Option<String>,
    /// Its acknowledgement gate (leadership lease) is closed.
    pub lease_lost: bool,
    /// This primary's epoch.
    pub epoch: u64,
    /// Local durable LSN.
    pub local_durable: Lsn,
    /// End of the last record appended (the local durable position may lie past it, in
    /// filler that is never shipped).
    pub appended: Lsn,
    /// Durable LSN the engine sees.
    pub durable: Lsn,
    /// Per standby.
    pub standbys: Vec<StandbyStatus>,
    /// Mode changes, oldest first.
    pub events: Vec<String>,
}

impl std::fmt::Display for ReplStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "role primary  epoch {}  mode {:?} (configured {:?}){}{}{}",
            self.epoch,
            self.effective,
            self.configured,
            self.degraded.as_ref().map(|d| format!("  DEGRADED: {d}")).unwrap_or_default(),
            self.fenced.as_ref().map(|d| format!("  FENCED: {d}")).unwrap_or_default(),
            if self.lease_lost { "  NOT ACKNOWLEDGING: leadership lease not renewed" } else { "" }
        )?;
        writeln!(f, "local durable {}  acknowledged durable {}", self.local_durable, self.durable)?;
        for s in &self.standbys {
            writeln!(
                f,
                "  standby {:<22} link {:?}{}  shadow {}  lag {} B  connects {}  {}",
                s.addr,
                s.link,
                if s.given_up { "  GAVE UP (needs a base backup)" } else { "" },
                s.shadow,
                self.local_durable.saturating_sub(s.shadow),
                s.connects,
                s.detail
            )?;
        }
        for e in &self.events {
            writeln!(f, "  event: {e}")?;
        }
        Ok(())
    }
}

/// A [`RecordLog`] that replicates the local log to standbys. See the module documentation.
pub struct ReplicatedLog {
    sh: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
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
        let sh = Arc::new(Shared {
            local: local.clone(),
            q: Mutex::new(Queue { recs: VecDeque::new(), start: end, bytes: 0 }),
            append_mx: Mutex::new(()),
            q_cv: Condvar::new(),
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
            stop_cv: Condvar::new(),
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
            cfg,
        });
        let mut threads = Vec::new();
        let s = sh.clone();
        let t = std::thread::Builder::new()
            .name("nvmedb-repl-flush".into())
            .spawn(move || local_flusher(s))
            .map_err(|e| {
                Error::Io(crate::io::IoError::os("repl local flusher", crate::io::IoOpKind::Setup, 0, 0, e))
            })?;
        let _ = sh.flusher.set(t.thread().clone());
        threads.push(t);
        // Chain mode: only the first standby is shipped to; it forwards along the chain.
        let shipped = if sh.cfg.mode == ReplicationMode::Chain { n.min(1) } else { n };
        for i in shipped..n {
            set_link(&sh, i, LinkState::Stale, "reached through the chain".into());
        }
        for i in 0..shipped {
            let s = sh.clone();
            let t = std::thread::Builder::new()
                .name(format!("nvmedb-ship-{i}"))
                .spawn(move || shipper(s, i))
                .map_err(|e| {
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
            let now = Instant::now();
            shadows
                .iter()
                .map(|&s| {
                    if s >= appended {
                        return Duration::ZERO;
                    }
                    let i = q.recs.partition_point(|r| r.end <= s);
                    q.recs.get(i).or(q.recs.front()).map_or(Duration::ZERO, |r| now.duration_since(r.at))
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
        self.sh.q_cv.notify_all();
        if let Some(f) = self.sh.flusher.get() {
            f.unpark();
        }
        wake_all(&mut self.sh.ms.locked());
        let threads = std::mem::take(&mut *self.threads.locked());
        for t in threads {
            let _ = t.join();
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
        s.thread.unpark();
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
            s.thread.unpark();
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
        q.recs.push_back(QRec { lsn, end, kind, payload: payload.to_vec(), at: Instant::now() });
        self.sh.last_end.store(end, Ordering::Release);
        if self.sh.cfg.record_delays {
            let mut smp = self.sh.samples.locked();
            if smp.len() >= 4_000_000 {
                smp.pop_front(); // no acknowledgements arrive: keep the newest
            }
            smp.push_back((end, Instant::now()));
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
        let started = Instant::now();
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
            let waited = started.elapsed();
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
            let me = std::thread::current();
            let id = me.id();
            ms.sleepers.push(Sleeper { lsn, thread: me });
            drop(ms);
            std::thread::park_timeout(left);
            ms = self.sh.ms.locked();
            ms.sleepers.retain(|s| s.thread.id() != id);
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
    /// The node's directory: its epoch history is read there, and extended when this primary's
    /// epoch is new (its records begin at the log's end at open).
    pub state_dir: Option<std::path::PathBuf>,
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
        if let Some(dir) = &self.state_dir {
            history = read_history(dir)?;
            if self.config.epoch > history.last_epoch() {
                history.begin(self.config.epoch, local.end_lsn());
                write_history(dir, &history)?;
            }
        }
        let r = ReplicatedLog::start_node(local, self.config, PrimaryNode { history, backup: self.backup })?;
        *self.handle.locked() = Some(r.clone());
        Ok(r)
    }
}

fn set_link(sh: &Shared, i: usize, state: LinkState, detail: String) {
    let mut l = sh.links[i].locked();
    l.state = state;
    l.detail = detail;
}

fn fence(sh: &Shared, e: ReplError) {
    let mut ms = sh.ms.locked();
    if ms.fenced.is_none() {
        eprintln!("nvmedb repl: FENCED: {e}");
        ms.events.push(format!("fenced: {e}"));
        ms.fenced = Some(e);
    }
    wake_all(&mut ms);
}

/// One standby's shipper: connect, hand-shake, ship, repeat after failures until stopped.
/// Asks the local flusher to make the local log durable up to `lsn`, waking it when parked.
fn kick_flusher(sh: &Shared, lsn: Lsn) {
    // SeqCst on both sides (here: raise, then read idle; the flusher: set idle, then read the
    // request) so that one of the two sees the other's write: no request is left unserved.
    if sh.flush_req.fetch_max(lsn, Ordering::SeqCst) < lsn && sh.flusher_idle.load(Ordering::SeqCst) {
        if let Some(f) = sh.flusher.get() {
            f.unpark();
        }
    }
}

/// The local flusher: makes the local log durable up to the highest requested LSN, then wakes
/// the commits that are now covered (those whose standbys acknowledged first); parks when
/// nothing is requested. Exits at shutdown or after a failed flush (the log is poisoned then;
/// every commit reports its error).
fn local_flusher(sh: Arc<Shared>) {
    loop {
        if sh.stop.load(Ordering::Acquire) {
            return;
        }
        let target = sh.flush_req.load(Ordering::SeqCst);
        if target > sh.local.durable_lsn() {
            let failed = sh.local.wait_durable(target).is_err();
            let mut ms = sh.ms.locked();
            if failed {
                sh.flush_failed.store(true, Ordering::Release);
                wake_all(&mut ms);
                return;
            }
            wake_covered(&sh, &mut ms);
            continue;
        }
        sh.flusher_idle.store(true, Ordering::SeqCst);
        if sh.flush_req.load(Ordering::SeqCst) <= sh.local.durable_lsn() && !sh.stop.load(Ordering::Acquire) {
            std::thread::park();
        }
        sh.flusher_idle.store(false, Ordering::SeqCst);
    }
}

fn shipper(sh: Arc<Shared>, i: usize) {
    let addr = sh.cfg.standbys[i].clone();
    while !sh.stop.load(Ordering::Acquire) {
        match ship_once(&sh, i, &addr) {
            Ok(()) => {}
            Err(ReplError::Fenced { their_epoch, our_epoch, .. }) if their_epoch <= our_epoch => {
                // A node promoted at an older epoch (a primary this one superseded, not yet
                // stepped down) refuses log connections: not a reason to stop; it follows this
                // primary once it restarts as a standby.
                set_link(
                    &sh,
                    i,
                    LinkState::Failed,
                    format!("{addr} was promoted at epoch {their_epoch} (older than {our_epoch}): waiting for it to rejoin as a standby"),
                );
            }
            Err(e @ ReplError::Fenced { .. }) => {
                set_link(&sh, i, LinkState::Failed, e.to_string());
                fence(&sh, e);
                return;
            }
            Err(e @ ReplError::AuthFailed { .. }) => {
                set_link(&sh, i, LinkState::Failed, e.to_string());
                sh.links[i].locked().auth = Some(e);
                // Wake waiting commits: they fail now rather than at their timeout.
                wake_all(&mut sh.ms.locked());
            }
            Err(e) => set_link(&sh, i, LinkState::Failed, e.to_string()),
        }
        sh.links[i].locked().stream = None;
        let g = sh.stop_mx.locked();
        if !sh.stop.load(Ordering::Acquire) {
            let _ = sh.stop_cv.wait_timeout(g, sh.cfg.reconnect_delay);
        }
    }
}

fn ship_once(sh: &Arc<Shared>, i: usize, addr: &str) -> std::result::Result<(), ReplError> {
    let mut s = wire::connect(addr, Duration::from_secs(2))?;
    // The standby will drop records past what we hold durably; lower the shadow first so no
    // commit is acknowledged on records it is about to drop.
    let durable = sh.local.durable_lsn();
    sh.shadows[i].fetch_min(durable, Ordering::AcqRel);
    // A peer that accepts but never answers must not hang the shipper (or shutdown).
    s.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| ReplError::io(addr, "timeout", e))?;
    let w = wire::client_handshake_with(
        &mut s,
        addr,
        &sh.cfg.secret,
        Role::Log,
        sh.cfg.epoch,
        durable,
        &sh.history.encode(),
    )?;
    sh.links[i].locked().auth = None;
    s.set_read_timeout(None).map_err(|e| ReplError::io(addr, "timeout", e))?;
    let view =
        ClusterView { epoch: sh.cfg.epoch, mode: sh.cfg.mode, members: sh.cfg.standbys.clone(), me: Some(i) };
    let mut pos = w.position;
    if w.flags & wire::WELCOME_NEEDS_BASE_BACKUP != 0 {
        let Some(storage) = &sh.backup else {
            return Err(ReplError::Diverged {
                peer: addr.into(),
                detail:
                    "the standby asks for a base backup, and this primary was started without its data files"
                        .into(),
            });
        };
        pos = super::seed::send_base_backup(sh, storage.as_ref(), i, addr, &mut s)?;
        sh.links[i].locked().given_up = false;
    }
    wire::write_frame(&mut s, addr, sh.cfg.epoch, FrameType::Cluster, view.encode().as_bytes())?;
    let recovered_start = sh.local.recovered().start_lsn;
    let end = sh.local.end_lsn();
    let given_up = sh.links[i].locked().given_up;
    if pos < recovered_start || pos > end || given_up {
        let why = if given_up {
            format!("standby is at LSN {pos}, and the primary gave up its log (max_retained_bytes)")
        } else if pos < recovered_start {
            format!("standby is at LSN {pos}, the primary's log starts at {recovered_start}")
        } else {
            format!("standby is at LSN {pos}, past the primary's log end {end}")
        };
        if sh.backup.is_some() {
            // It takes a base backup when it next connects.
            let msg = format!("reseed: {why}");
            let _ = wire::write_frame(
                &mut s,
                addr,
                sh.cfg.epoch,
                FrameType::Refused,
                &wire::refuse_payload(wire::RefuseCode::Diverged, &msg),
            );
        }
        return Err(ReplError::Diverged {
            peer: addr.into(),
            detail: format!("{why}: it needs a base backup"),
        });
    }
    sh.shadows[i].store(pos, Ordering::Release);
    {
        let mut l = sh.links[i].locked();
        l.given_up = false;
        l.state = LinkState::Up;
        l.detail = format!("connected at LSN {pos}");
        l.connects += 1;
        l.stream = s.try_clone().ok();
    }
    wake_covered(sh, &mut sh.ms.locked());
    let dead = Arc::new(AtomicBool::new(false));
    let reader = {
        let (sh, dead, addr) = (sh.clone(), dead.clone(), addr.to_string());
        let rs = s.try_clone().map_err(|e| ReplError::io(&addr, "clone", e))?;
        std::thread::spawn(move || {
            // Buffered: a frame is one receive call, not three.
            let mut br = std::io::BufReader::with_capacity(4096, rs);
            let r = ack_reader(&sh, i, &addr, &mut br);
            dead.store(true, Ordering::Release);
            sh.q_cv.notify_all();
            let _ = br.get_ref().shutdown(Shutdown::Both);
            r
        })
    };
    let mut out = s.try_clone().map_err(|e| ReplError::io(addr, "clone", e))?;
    // One buffer per connection: the frame header is filled in place (`wire::send_frame`), so
    // a group of records is copied once, from the queue into the frame, and sent in one call.
    const H: usize = wire::FRAME_HEADER_BYTES;
    let mut frame = Vec::with_capacity(64 << 10);
    let mut sent_durable = 0;
    // Since when nothing was left to ship (the durable position alone is sent only after a
    // quiet spell: under load it rides on the next records frame instead).
    let mut idle_since: Option<Instant> = None;
    // Since when this shipper has been gathering a commit group.
    let mut group_since: Option<Instant> = None;
    sh.sent[i].store(pos, Ordering::Release);
    let result = (|| -> std::result::Result<(), ReplError> {
        loop {
            if sh.stop.load(Ordering::Acquire) || dead.load(Ordering::Acquire) {
                return Ok(());
            }
            frame.clear();
            frame.resize(H, 0);
            frame.extend_from_slice(&0u64.to_le_bytes());
            frame.extend_from_slice(&0u32.to_le_bytes());
            let mut count = 0u32;
            let q = sh.q.locked();
            if pos < q.start {
                // Behind the queue: read back from the local log.
                let qstart = q.start;
                drop(q);
                let mut r = sh.local.reader(pos).map_err(|e| ReplError::Diverged {
                    peer: addr.into(),
                    detail: format!("reading the local log: {e}"),
                })?;
                while frame.len() < sh.cfg.max_frame_bytes {
                    match r.next_record() {
                        Ok(Some(rec)) if rec.lsn < qstart => {
                            if rec.end_lsn > pos {
                                encode_record(&mut frame, rec.lsn, rec.end_lsn, rec.kind, &rec.payload);
                                count += 1;
                                pos = rec.end_lsn;
                            }
                        }
                        Ok(_) => {
                            pos = pos.max(qstart);
                            break;
                        }
                        Err(e) => {
                            return Err(ReplError::Diverged {
                                peer: addr.into(),
                                detail: format!("reading the local log: {e}"),
                            })
                        }
                    }
                }
                if count == 0 && pos < qstart {
                    pos = qstart;
                }
            } else {
                let from = q.recs.partition_point(|r| r.lsn < pos);
                if from == q.recs.len() {
                    // Idle. After a quiet spell, tell the standby how far our own log is
                    // durable (it applies only that far); otherwise wait for a committer's
                    // wake-up (`kick_shippers`) or the quiet spell's end.
                    let quiet = idle_since.is_some_and(|t| t.elapsed() >= IDLE_DURABLE_AFTER);
                    if quiet {
                        drop(q);
                        let d = apply_limit(sh);
                        if d > sent_durable {
                            sent_durable = d;
                            frame[H..H + 8].copy_from_slice(&d.to_le_bytes());
                            wire::send_frame(&mut out, addr, sh.cfg.epoch, FrameType::Records, &mut frame)?;
                        }
                        idle_since = None;
                        continue;
                    }
                    idle_since.get_or_insert_with(Instant::now);
                    // Commits publish what they were acknowledged up to (`combined`).
                    let wait = if sent_durable < sh.published.load(Ordering::Acquire) {
                        IDLE_DURABLE_AFTER
                    } else {
                        IDLE_WAIT
                    };
                    sh.q_waiters.fetch_add(1, Ordering::AcqRel);
                    let r = sh.q_cv.wait_timeout(q, wait);
                    sh.q_waiters.fetch_sub(1, Ordering::AcqRel);
                    drop(r);
                    continue;
                }
                // Gather a commit group (see the module's invariants) unless the queue is big.
                let expected = sh.expected.load(Ordering::Acquire).max(1);
                let since = *group_since.get_or_insert_with(Instant::now);
                let waited = since.elapsed();
                if sh.pending[i].load(Ordering::Acquire) < expected
                    && waited < sh.cfg.group_wait
                    && q.recs.len() - from < MAX_GROUP_RECORDS
                {
                    sh.q_waiters.fetch_add(1, Ordering::AcqRel);
                    sh.group_waiters.fetch_add(1, Ordering::AcqRel);
                    let r = sh.q_cv.wait_timeout(q, sh.cfg.group_wait - waited);
                    sh.group_waiters.fetch_sub(1, Ordering::AcqRel);
                    sh.q_waiters.fetch_sub(1, Ordering::AcqRel);
                    drop(r);
                    continue;
                }
                group_since = None;
                sh.pending[i].store(0, Ordering::Release);
                for r in q.recs.range(from..) {
                    encode_record(&mut frame, r.lsn, r.end, r.kind, &r.payload);
                    count += 1;
                    pos = r.end;
                    if frame.len() >= sh.cfg.max_frame_bytes {
                        break;
                    }
                }
                drop(q);
            }
            if count == 0 {
                continue;
            }
            idle_since = None;
            // The local flush of these records runs while they travel.
            kick_flusher(sh, pos);
            let durable = apply_limit(sh);
            sent_durable = durable;
            frame[H..H + 8].copy_from_slice(&durable.to_le_bytes());
            frame[H + 8..H + 12].copy_from_slice(&count.to_le_bytes());
            wire::send_frame(&mut out, addr, sh.cfg.epoch, FrameType::Records, &mut frame)?;
            sh.sent[i].store(pos, Ordering::Release);
        }
    })();
    sh.sent[i].store(u64::MAX, Ordering::Release);
    // Commits that counted on this shipper for their local flush get it now.
    kick_flusher(sh, sh.last_end.load(Ordering::Acquire));
    let _ = s.shutdown(Shutdown::Both);
    let acks = reader.join().unwrap_or_else(|_| {
        Err(ReplError::Protocol { peer: addr.into(), detail: "ack reader panicked".into() })
    });
    match (result, acks) {
        // A refusal by epoch explains whatever else went wrong on the connection.
        (_, Err(e @ ReplError::Fenced { .. })) => Err(e),
        (Err(e), _) => Err(e),
        (Ok(()), Err(e)) if !sh.stop.load(Ordering::Acquire) => Err(e),
        _ => Ok(()),
    }
}

fn ack_reader(
    sh: &Shared,
    i: usize,
    addr: &str,
    s: &mut impl std::io::Read,
) -> std::result::Result<(), ReplError> {
    loop {
        let f = match wire::read_frame(s, addr)? {
            Some(f) => f,
            None => {
                return Err(ReplError::Disconnected {
                    peer: addr.into(),
                    detail: "standby closed the connection".into(),
                })
            }
        };
        if f.epoch > sh.cfg.epoch {
            return Err(ReplError::Fenced {
                peer: addr.into(),
                our_epoch: sh.cfg.epoch,
                their_epoch: f.epoch,
            });
        }
        match f.kind {
            FrameType::Ack if f.payload.len() >= 8 && f.payload.len() % 8 == 0 => {
                let pos = u64_at(&f.payload, 0);
                let now = sh.shadows[i].fetch_max(pos, Ordering::AcqRel).max(pos);
                // Chain mode: the positions of the standbys after this one, as they reported
                // them along the chain.
                for (j, c) in f.payload[8..].chunks(8).enumerate() {
                    if let Some(sc) = sh.shadows.get(i + 1 + j) {
                        sc.store(u64::from_le_bytes(c.try_into().expect("8 bytes")), Ordering::Release);
                        let mut l = sh.links[i + 1 + j].locked();
                        l.state = LinkState::Up;
                        l.detail = format!("through the chain via {addr}");
                    }
                }
                if i == 0 && sh.cfg.record_delays {
                    let t = Instant::now();
                    let mut smp = sh.samples.locked();
                    let mut d = sh.delays.locked();
                    while let Some(&(end, at)) = smp.front() {
                        if end > now {
                            break;
                        }
                        smp.pop_front();
                        if d.len() < 4_000_000 {
                            d.push(t.duration_since(at).as_nanos() as u64);
                        }
                    }
                }
                let mut ms = sh.ms.locked();
                restore_mode_if_caught_up(sh, &mut ms);
                wake_covered(sh, &mut ms);
            }
            FrameType::Refused => return Err(wire::refused_error(addr, &f, sh.cfg.epoch)),
            k => {
                return Err(ReplError::Protocol {
                    peer: addr.into(),
                    detail: format!("unexpected {k:?} frame"),
                })
            }
        }
    }
}

/// A shipper holding back more records than this for a commit group sends them at once.
const MAX_GROUP_RECORDS: usize = 4096;

/// An idle shipper sends the primary's durable position alone (so the standby applies the
/// last commits) after this long without records to ship.
const IDLE_DURABLE_AFTER: Duration = Duration::from_millis(1);
/// How long an idle shipper with nothing to tell waits before it looks at the queue again
/// (records appended without a commit waiting for them go out at the latest then).
const IDLE_WAIT: Duration = Duration::from_millis(5);

/// How far standbys may apply: what this primary has acknowledged (or could acknowledge now).
/// A standby never applies past it, so after a failover its pages hold nothing the new
/// primary lacks (in eager and quorum modes every acknowledged record is on the new primary).
fn apply_limit(sh: &Shared) -> Lsn {
    combined(sh, &sh.ms.locked())
}

/// Returns to the configured mode once the standbys satisfy it again for everything durable.
fn restore_mode_if_caught_up(sh: &Shared, ms: &mut ModeState) {
    if ms.degraded.is_none() || ms.fenced.is_some() {
        return;
    }
    let local = sh.local.durable_lsn();
    // Caught up: the configured combination covers everything locally durable (the durable
    // position may end in filler, which is never shipped: the last record's end is enough).
    let need = local.min(sh.last_end.load(Ordering::Acquire));
    if with_shadows(sh, |shadows| combine(sh.cfg.mode, local, shadows)) >= need {
        eprintln!("nvmedb repl: RESTORED {:?} mode: standbys caught up at LSN {local}", sh.cfg.mode);
        ms.events.push(format!("restored {:?} at LSN {local}", sh.cfg.mode));
        ms.mode = sh.cfg.mode;
        ms.degraded = None;
    }
}
