//! The standby: receives the primary's log (and, in mirroring mode, its data-page writes),
//! persists it, acknowledges, applies redo continuously, and is promoted on demand.
//!
//! Owns: the listener and its connections (log, mirror, admin), the standby's epoch and the
//! synchronous set it learned (kept by `state.rs` in `<data>/repl/`), its [`ReplicaLog`]
//! (`<data>/standby/`), and the apply thread; promotion and the fencing protocol are in
//! `promote.rs`. A standby's data directory starts as a copy of a closed primary's
//! ([`seed_standby`]).
//!
//! Invariants:
//! - An acknowledgement is sent only after the records it covers are synced to the replica log.
//! - Every frame whose epoch is older than the standby's epoch is refused (`Refused(Fenced)`)
//!   and its connection closed; an epoch bump is persisted before it is acted on. When the
//!   epoch moves on during a log session (promotion, or fencing by a promoting peer), the
//!   session ends with a `Refused(Fenced)` frame, so the old primary learns it was fenced.
//! - Once a log session has ended, nothing it received is acknowledged any more; so the
//!   position a fenced standby reports is at least every position it ever acknowledged.
//! - The apply thread applies records in log order, only those durable in the replica log and
//!   at or below what the primary reported as durable in its own log (so a primary restart,
//!   which may drop records it never made durable, never finds them applied here).
//! - Promotion bumps the epoch first, then closes the connections, stops the apply thread, and
//!   opens the database on the replica log (redo of everything received, undo of unfinished
//!   transactions, checkpoint).

use super::apply::{page_changes, request_snapshot, start_apply, APPLY_WRITE_BACK_EVERY};
use super::clock::{Cond, LongLock, Task};
use super::disk::{DirDisk, Disk};
use super::env::Env;
use super::forward;
use super::link::{
    ack_payload, adopt_epoch, append_records, repair_torn_pages, stop_apply, sync_and_store_catalogs,
    Counters, PromoteOptions, PromoteReport, Shared, StandbyConfig,
};
use super::mode::mode_name;
use super::net::{Conn, Listener};
use super::primary::{ReplConfig, ReplicatedLog};
use super::promote;
use super::replica_log::ReplicaLog;
use super::seed;
use super::state::{self, ClusterView, History};
use super::wire::{self, FrameType, RefuseCode, Role};
use crate::error::{Error, ReplError, Result};
use crate::io::{AlignedBuf, Device, DirStorage, EmulatedDevice, FileOptions, MemDevice, Storage};
use crate::page::PageHeader;
use crate::table::catalog::CatalogStore;
use crate::util::bytes::u64_at;
use crate::util::sync::MutexExt;
use crate::wal::engine::TAG_TABLE;
use crate::wal::Lsn;
use crate::xlog::ReplicationMode;
use crate::Database;
use std::collections::HashMap;
use std::io::{BufReader, BufWriter, Write};
use std::net::Shutdown;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, TryLockError};
use std::time::Duration;

/// Where a standby keeps its data and log when they are not plain files of its directory
/// ([`Standby::start_on`]): the lab puts a standby on an emulated device of its own.
pub struct StandbyDevices {
    /// The data files (catalog, heap, index), e.g. an [`crate::io::EmulatedStorage`] over the
    /// data directory on tmpfs; promotion opens the database on it.
    pub data: Arc<dyn Storage>,
    /// The emulated device the replica log's writes are charged to (its bytes stay in
    /// `<data>/standby/`, which must then be in RAM); `None`: the file's own `fdatasync`.
    pub log: Option<Arc<EmulatedDevice<MemDevice>>>,
}

/// A standby's epoch and log positions ([`Standby::positions`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StandbyPositions {
    /// Its epoch.
    pub epoch: u64,
    /// The persisted end of the received log (what it acknowledges).
    pub persisted: Lsn,
    /// The end of the last record applied to its data files.
    pub applied: Lsn,
    /// The primary's acknowledged durable position, as the last frame carried it (the apply
    /// thread applies up to here).
    pub primary_acknowledged: Lsn,
}

/// A running standby. See the module documentation.
pub struct Standby {
    sh: Arc<Shared>,
    addr: String,
    listener: Arc<dyn Listener>,
    accept: Mutex<Option<Task<()>>>,
}

/// Makes `standby_dir` a standby of the (closed, cleanly checkpointed) database in
/// `primary_dir`: copies the catalog, the table and index files, and the epoch. The standby's
/// log starts at the primary's last checkpoint. Refuses to overwrite an existing database.
pub fn seed_standby(primary_dir: &Path, standby_dir: &Path) -> Result<()> {
    seed_standby_on(&DirDisk::new(primary_dir), &DirDisk::new(standby_dir))
}

/// [`seed_standby`] between any two node disks.
pub fn seed_standby_on(primary: &dyn Disk, standby: &dyn Disk) -> Result<()> {
    let (from, to) = (primary.data()?, standby.data()?);
    if to.exists(crate::db::CATALOG_FILE) {
        return Err(Error::AlreadyExists(format!("a database in {}", standby.location())));
    }
    for name in from.list()? {
        if crate::table::files::is_data_file(&name) {
            seed::copy_device(from.as_ref(), to.as_ref(), &name)?;
        }
    }
    state::copy_epoch(primary.state()?.as_ref(), standby.state()?.as_ref())
}

impl Standby {
    /// Opens the standby's data and log (in `cfg.data_dir`) and starts listening.
    pub fn start(cfg: StandbyConfig) -> Result<Self> {
        let disk = DirDisk::shared(&cfg.data_dir);
        Self::start_with(cfg, Env::system(), disk)
    }

    /// [`Standby::start`] with the node's files on `disk` and its threads and connections in
    /// `env` (the simulator's, for a simulated node); `cfg.data_dir` only names it then.
    pub fn start_with(cfg: StandbyConfig, env: Env, disk: Arc<dyn Disk>) -> Result<Self> {
        let data = disk.data()?;
        Self::start_inner(cfg, env, disk, data, None)
    }

    /// [`Standby::start`] with the data files on `devices.data` and the replica log's writes
    /// charged to `devices.log`. An emulated log device needs the data directory in RAM
    /// (tmpfs): its latency replaces the medium's.
    pub fn start_on(cfg: StandbyConfig, devices: StandbyDevices) -> Result<Self> {
        if devices.log.is_some() && !DirStorage::new(&cfg.data_dir, FileOptions::default())?.in_ram() {
            return Err(Error::Config {
                key: "standby log device".into(),
                detail: format!(
                    "{} is not in RAM (tmpfs): an emulated log device must wrap RAM",
                    cfg.data_dir.display()
                ),
            });
        }
        let disk = DirDisk::shared(&cfg.data_dir);
        Self::start_inner(cfg, Env::system(), disk, devices.data, devices.log)
    }

    fn start_inner(
        cfg: StandbyConfig,
        env: Env,
        disk: Arc<dyn Disk>,
        storage: Arc<dyn Storage>,
        log_device: Option<Arc<EmulatedDevice<MemDevice>>>,
    ) -> Result<Self> {
        if cfg.secret.is_empty() {
            return Err(Error::Config {
                key: "repl.secret".into(),
                detail: "an empty secret is not allowed".into(),
            });
        }
        let cow = Arc::new(super::reads::CowStorage::new(storage));
        let storage: Arc<dyn Storage> = cow.clone();
        // Without a catalog the directory holds no complete copy: it waits for a base backup.
        let cat = if storage.exists(crate::db::CATALOG_FILE) {
            let (_, cat) = CatalogStore::load(storage.open(crate::db::CATALOG_FILE, false)?)?;
            Some(cat.ok_or_else(|| Error::Corruption {
                file: format!("{}/{}", disk.location(), crate::db::CATALOG_FILE),
                offset: 0,
                detail: "the catalog is empty".into(),
            })?)
        } else {
            None
        };
        if let Some(cat) = &cat {
            if let Some((from, to, n)) = seed::adopt_primary_log(disk.as_ref(), &cfg.options, cat)? {
                eprintln!(
                    "nvmedb standby: {} was a primary: its log from LSN {from} to {to} ({n} records) is now this standby's log; what it wrote after its successor's fork point is dropped when that primary connects",
                    disk.location()
                );
            }
        }
        let log = ReplicaLog::open(
            disk.replica()?,
            cat.as_ref().map_or(0, |c| c.checkpoint_undo_lsn.min(c.checkpoint_redo_lsn)),
        )?;
        if let Some(d) = log_device {
            log.set_device(d);
        }
        let st = disk.state()?;
        let epoch = state::epoch_in(st.as_ref())?;
        let cluster = state::cluster_in(st.as_ref())?;
        let history = state::history_in(st.as_ref())?;
        let listener: Arc<dyn Listener> = Arc::from(env.net.listen(&cfg.listen).map_err(|e| {
            Error::Config { key: "listen".into(), detail: format!("cannot listen on {}: {e}", cfg.listen) }
        })?);
        let addr = listener.local_addr();
        let clock = env.clock.clone();
        let sh = Arc::new(Shared {
            env: env.clone(),
            state: st,
            log,
            storage,
            epoch: AtomicU64::new(epoch),
            epoch_lock: Mutex::new(()),
            promoting: AtomicBool::new(false),
            seeded: AtomicBool::new(cat.is_some()),
            reseed_next: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            safe: AtomicU64::new(0),
            applied: AtomicU64::new(0),
            apply_gen: AtomicU64::new(0),
            apply_stop: AtomicBool::new(false),
            apply_mx: Mutex::new(()),
            apply_cv: Cond::new(clock.as_ref()),
            record_waiters: AtomicUsize::new(0),
            applied_waiters: AtomicUsize::new(0),
            log_session: LongLock::new((), clock.as_ref()),
            log_conn: Mutex::new(None),
            upstream_writes: Mutex::new(()),
            downstream: Mutex::new(Vec::new()),
            forwarder: Mutex::new(None),
            mirror_lock: RwLock::new(()),
            conns: Mutex::new(Vec::new()),
            counters: Mutex::new(Counters::default()),
            promote_lock: LongLock::new(None, clock.as_ref()),
            announced: Mutex::new(None),
            admin_promotion: LongLock::new((), clock.as_ref()),
            cluster: Mutex::new(cluster),
            history: Mutex::new(history),
            catalog_lock: Mutex::new(()),
            write_back_every_ms: AtomicU64::new(APPLY_WRITE_BACK_EVERY.as_millis() as u64),
            apply_thread: Mutex::new(None),
            table_page: AtomicUsize::new(cat.as_ref().map_or(0, |c| c.table_page_size as usize)),
            index_page: AtomicUsize::new(cat.as_ref().map_or(0, |c| c.index_page_size as usize)),
            cow,
            snap_requests: Mutex::new(Vec::new()),
            snap_pending: AtomicUsize::new(0),
            cfg,
        });
        if sh.seeded.load(Ordering::Acquire) && !sh.cfg.apply {
            // Pages arrive written by a primary (mirroring): a crash here may have torn one
            // mid-write, and only this node's double-write area can restore it.
            repair_torn_pages(&sh)?;
        }
        let (s2, l2) = (sh.clone(), listener.clone());
        let accept = clock
            .spawn("nvmedb-standby-accept", move || accept_loop(s2, l2))
            .map_err(|e| Error::Io(crate::io::IoError::os("standby", crate::io::IoOpKind::Setup, 0, 0, e)))?;
        if sh.seeded.load(Ordering::Acquire) {
            start_apply(&sh)?;
        }
        Ok(Self { sh, addr, listener, accept: Mutex::new(Some(accept)) })
    }

    /// The address it listens on (`host:port`).
    pub fn addr(&self) -> String {
        self.addr.clone()
    }

    /// The standby's epoch.
    pub fn epoch(&self) -> u64 {
        self.sh.epoch.load(Ordering::Acquire)
    }

    /// The persisted end of the received log (what it acknowledges).
    pub fn position(&self) -> Lsn {
        self.sh.log.durable_lsn()
    }

    /// Where its log begins (moves forward at restartpoints).
    pub fn log_start(&self) -> Lsn {
        self.sh.log.start_lsn()
    }

    /// The end of the last record applied to the data files.
    pub fn applied(&self) -> Lsn {
        self.sh.applied.load(Ordering::Acquire)
    }

    /// Its epoch and log positions at one moment (the operational metrics).
    pub fn positions(&self) -> StandbyPositions {
        StandbyPositions {
            epoch: self.epoch(),
            persisted: self.position(),
            applied: self.applied(),
            primary_acknowledged: self.sh.safe.load(Ordering::Acquire),
        }
    }

    /// What promotion did, once it has finished and whoever asked for it has been told (for an
    /// admin `Promote` request: once the reply was sent, so a process may exit when it sees
    /// this).
    pub fn promotion(&self) -> Option<PromoteReport> {
        self.sh.announced.locked().clone()
    }

    /// True when its directory holds a complete copy (seeded, or a base backup finished): only
    /// then can it be promoted.
    pub fn is_seeded(&self) -> bool {
        self.sh.seeded.load(Ordering::Acquire)
    }

    /// True once promotion has begun (and not failed).
    pub fn is_promoted(&self) -> bool {
        self.sh.promoting.load(Ordering::Acquire)
    }

    /// How often the apply thread, when it has caught up, writes its pages back and takes a
    /// restartpoint (default 10 s).
    pub fn set_write_back_interval(&self, every: Duration) {
        self.sh.write_back_every_ms.store(every.as_millis().max(1) as u64, Ordering::Release);
    }

    /// The synchronous set the last primary announced (what promotion fences).
    pub fn cluster(&self) -> Option<ClusterView> {
        self.sh.cluster.locked().clone()
    }

    /// A read-only database holding exactly the primary's transactions committed at or before
    /// the position this standby has applied now (a prefix of the primary's commits, never
    /// part of a transaction), with the lag it was taken at. Read-your-writes: call
    /// [`Standby::wait_applied`] with the commit's LSN first. Applying goes on meanwhile: it
    /// waits for the snapshot only to register between two records, and keeps, while the
    /// snapshot lives, the old contents of the blocks it overwrites and of the pages it changes.
    /// Building it undoes, in memory, the transactions in flight at its position (see
    /// `repl::reads`); it waits at most 30 s for the apply thread to hand it its start.
    pub fn read_snapshot(&self) -> Result<super::reads::StandbySnapshot> {
        let sh = &self.sh;
        if !sh.seeded.load(Ordering::Acquire) || !sh.cfg.apply {
            return Err(Error::Config {
                key: "standby reads".into(),
                detail: format!(
                    "the standby in {} {}",
                    sh.cfg.data_dir.display(),
                    if sh.cfg.apply {
                        "holds no copy yet (waiting for a base backup)"
                    } else {
                        "does not apply the log (data-page mirroring)"
                    }
                ),
            });
        }
        if sh.promoting.load(Ordering::Acquire) {
            return Err(Error::Config {
                key: "standby reads".into(),
                detail: "the standby is being promoted".into(),
            });
        }
        let src = request_snapshot(sh)?;
        super::reads::build(&sh.cow, src, &sh.cfg.options)
    }

    /// Blocks until the apply thread has applied everything up to `lsn` or `timeout` passes;
    /// returns whether it got there.
    pub fn wait_applied(&self, lsn: Lsn, timeout: Duration) -> bool {
        let clock = &self.sh.env.clock;
        let deadline = clock.now() + timeout;
        let mut g = self.sh.apply_mx.locked();
        self.sh.applied_waiters.fetch_add(1, Ordering::SeqCst);
        let reached = loop {
            if self.sh.applied.load(Ordering::Acquire) >= lsn {
                break true;
            }
            let now = clock.now();
            if now >= deadline {
                break false;
            }
            g = self.sh.apply_cv.wait_timeout(&self.sh.apply_mx, g, deadline - now);
        };
        self.sh.applied_waiters.fetch_sub(1, Ordering::SeqCst);
        reached
    }

    /// One-paragraph status (role, epoch, positions, counters).
    pub fn status(&self) -> String {
        status_text(&self.sh)
    }

    /// Promotes this standby with the default [`PromoteOptions`]; see [`Standby::promote_with`].
    pub fn promote(&self) -> Result<(Database, PromoteReport)> {
        self.promote_with(&PromoteOptions::default())
    }

    /// Promotes this standby: bumps and persists the epoch (from now on the old primary's
    /// frames are refused and its session ends with `Refused(Fenced)`), fences enough of the
    /// old primary's synchronous set that it cannot complete another commit, takes the records
    /// a fenced standby holds beyond this one, stops applying, and opens the database on the
    /// received log (redo, undo of unfinished transactions, checkpoint). The returned database
    /// accepts writes; its log is the replica log.
    ///
    /// Errors: [`ReplError::NotFenced`] (inside [`Error::Replication`]) when too few standbys
    /// of the synchronous set could be fenced or read and `options.force` is off; this standby
    /// then stays a standby, at the new epoch.
    pub fn promote_with(&self, options: &PromoteOptions) -> Result<(Database, PromoteReport)> {
        let (db, _, rep) = promote::promote(&self.sh, options, None)?;
        *self.sh.announced.locked() = Some(rep.clone());
        Ok((db, rep))
    }

    /// [`Standby::promote_with`], opening the promoted database as a replicating primary (at the
    /// new epoch, whatever `config.epoch` says) that ships to `config.standbys` — typically its
    /// former peers and the old primary, which rejoin it. Returns the database, its replicated
    /// log, and the report.
    pub fn promote_to_primary(
        &self,
        options: &PromoteOptions,
        config: ReplConfig,
    ) -> Result<(Database, Arc<ReplicatedLog>, PromoteReport)> {
        let (db, log, rep) = promote::promote(&self.sh, options, Some(config))?;
        let log = log.ok_or_else(|| Error::Config {
            key: "wal".into(),
            detail: "replication needs the write-ahead log".into(),
        })?;
        *self.sh.announced.locked() = Some(rep.clone());
        Ok((db, log, rep))
    }

    /// Stops listening and closes every connection (also done on drop).
    pub fn shutdown(&self) {
        self.sh.stop.store(true, Ordering::Release);
        self.sh.stop_forwarding();
        stop_apply(&self.sh);
        for c in self.sh.conns.locked().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
        self.listener.close();
        if let Some(t) = self.accept.locked().take() {
            t.join();
        }
        for c in self.sh.conns.locked().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Standby {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn status_text(sh: &Shared) -> String {
    let c = sh.counters.locked();
    let set = match &*sh.cluster.locked() {
        Some(v) => format!(
            "  synchronous set (epoch {}): {} over [{}]{}\n",
            v.epoch,
            mode_name(v.mode),
            v.members.join(", "),
            v.me.map(|m| format!(", this standby is #{m}")).unwrap_or_default()
        ),
        None => "  synchronous set: not known (no primary has connected)\n".into(),
    };
    let role = if sh.announced.locked().is_some() {
        "promoted"
    } else if sh.promoting.load(Ordering::Acquire) {
        "promoting"
    } else if !sh.seeded.load(Ordering::Acquire) {
        "standby (awaiting a base backup)"
    } else {
        "standby"
    };
    let history = sh.history.locked().clone();
    format!(
        "role {}  epoch {}  received (persisted) LSN {}  applied {}  primary-acknowledged {}  log from {}\n  frames {}  records {}  mirrored page writes {}  base backups {}  restartpoints {} ({} log bytes released)  blocks read back for read snapshots {}  refused {}  last error: {}\n{set}  history (epoch from LSN): {}\n{}",
        role,
        sh.epoch.load(Ordering::Acquire),
        sh.log.durable_lsn(),
        sh.applied.load(Ordering::Acquire),
        sh.safe.load(Ordering::Acquire),
        sh.log.start_lsn(),
        c.frames,
        c.records,
        c.page_writes,
        c.base_backups,
        c.restartpoints,
        c.log_released,
        sh.cow.blocks_read_back(),
        c.refused,
        if c.last_error.is_empty() { "none" } else { &c.last_error },
        history.0.iter().map(|(e, l)| format!("{e} from {l}")).collect::<Vec<_>>().join(", "),
        if c.base_backup_reason.is_empty() {
            String::new()
        } else {
            format!("  last base backup because {}\n", c.base_backup_reason)
        }
    )
}

fn accept_loop(sh: Arc<Shared>, listener: Arc<dyn Listener>) {
    loop {
        let conn = listener.accept();
        if sh.stop.load(Ordering::Acquire) {
            return;
        }
        let s = match conn {
            Ok(s) => s,
            // The listener was closed (shutdown, or the node went down).
            Err(e) if e.kind() == std::io::ErrorKind::NotConnected => return,
            Err(_) => continue,
        };
        if let Ok(c) = s.try_clone() {
            let mut conns = sh.conns.locked();
            conns.retain(|c| c.is_connected());
            conns.push(c);
        }
        let sh = sh.clone();
        let clock = sh.env.clock.clone();
        let _ = clock.spawn("nvmedb-standby-conn", move || {
            let peer = s.peer();
            let closer = s.try_clone();
            let r = serve(&sh, s, &peer);
            // Other handles of this socket live on (status, promotion): close it for real.
            if let Ok(c) = closer {
                let _ = c.shutdown(Shutdown::Both);
            }
            if let Err(e) = r {
                if !sh.stop.load(Ordering::Acquire) {
                    let mut c = sh.counters.locked();
                    if matches!(e, ReplError::Fenced { .. } | ReplError::AuthFailed { .. }) {
                        c.refused += 1;
                    }
                    c.last_error = e.to_string();
                }
            }
        });
    }
}

fn refuse(s: &mut impl Write, peer: &str, epoch: u64, code: RefuseCode, msg: &str) {
    let _ = wire::write_frame(s, peer, epoch, FrameType::Refused, &wire::refuse_payload(code, msg));
}

fn serve(sh: &Arc<Shared>, s: Box<dyn Conn>, peer: &str) -> std::result::Result<(), ReplError> {
    let mut r =
        BufReader::with_capacity(1 << 20, s.try_clone().map_err(|e| ReplError::io(peer, "clone", e))?);
    let mut w = BufWriter::new(s.try_clone().map_err(|e| ReplError::io(peer, "clone", e))?);
    let mut rw = RwPair { r: &mut r, w: &mut w };
    // A client that connects and says nothing must not hold a thread forever.
    s.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| ReplError::io(peer, "timeout", e))?;
    let hello = wire::server_handshake(&mut rw, peer, &sh.cfg.secret, sh.epoch.load(Ordering::Acquire))?;
    s.set_read_timeout(None).map_err(|e| ReplError::io(peer, "timeout", e))?;
    // Epoch check (and adoption of a newer one), atomically with promotion.
    {
        let _g = sh.epoch_lock.locked();
        let ours = sh.epoch.load(Ordering::Acquire);
        let stale = hello.role != Role::Admin && (hello.epoch < ours || sh.promoting.load(Ordering::Acquire));
        if stale {
            let msg = format!("epoch {} is older than this node's epoch {ours}", hello.epoch);
            refuse(&mut w, peer, ours, RefuseCode::Fenced, &msg);
            return Err(ReplError::Fenced { peer: peer.into(), our_epoch: ours, their_epoch: hello.epoch });
        }
        if hello.role != Role::Admin {
            adopt_epoch(sh, hello.epoch).map_err(|e| ReplError::Protocol {
                peer: peer.into(),
                detail: format!("cannot persist the new epoch: {e}"),
            })?;
        }
    }
    match hello.role {
        Role::Log => serve_log(sh, s, r, w, peer, &hello),
        Role::Mirror => serve_mirror(sh, r, w, peer),
        Role::Admin => serve_admin(sh, r, w, peer),
    }
}

/// Reads from one half and writes to the other, for the handshake.
struct RwPair<'a, R, W> {
    r: &'a mut R,
    w: &'a mut W,
}

impl<R: std::io::Read, W> std::io::Read for RwPair<'_, R, W> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.r.read(buf)
    }
}

impl<R, W: Write> Write for RwPair<'_, R, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.w.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.w.flush()
    }
}

fn fenced_frame(sh: &Shared, f: &wire::Frame, w: &mut impl Write, peer: &str) -> Option<ReplError> {
    let ours = sh.epoch.load(Ordering::Acquire);
    if f.epoch < ours || sh.promoting.load(Ordering::Acquire) {
        let msg = format!("frame of epoch {} refused: this node is at epoch {ours}", f.epoch);
        refuse(w, peer, ours, RefuseCode::Fenced, &msg);
        return Some(ReplError::Fenced { peer: peer.into(), our_epoch: ours, their_epoch: f.epoch });
    }
    None
}

fn serve_log(
    sh: &Arc<Shared>,
    s: Box<dyn Conn>,
    mut r: BufReader<Box<dyn Conn>>,
    mut w: BufWriter<Box<dyn Conn>>,
    peer: &str,
    hello: &wire::Hello,
) -> std::result::Result<(), ReplError> {
    let (primary_durable, session_epoch) = (hello.arg, hello.epoch);
    // A newer connection takes over from an older one.
    if let Some(old) = sh.log_conn.locked().take() {
        let _ = old.shutdown(Shutdown::Both);
    }
    let _session = sh.log_session.lock();
    *sh.log_conn.locked() = s.try_clone().ok();
    // Checked after publishing the connection: an epoch raised before this point is seen here,
    // one raised after it finds the connection and ends it (see `end_log_session`).
    let fenced = |w: &mut BufWriter<Box<dyn Conn>>| {
        let ours = sh.epoch.load(Ordering::Acquire);
        (ours > session_epoch || sh.promoting.load(Ordering::Acquire)).then(|| {
            let msg =
                format!("this node moved on to epoch {ours}: the primary of epoch {session_epoch} is fenced");
            refuse(w, peer, ours, RefuseCode::Fenced, &msg);
            ReplError::Fenced { peer: peer.into(), our_epoch: ours, their_epoch: session_epoch }
        })
    };
    if let Some(e) = fenced(&mut w) {
        return Err(e);
    }
    let local = |e: Error| ReplError::Protocol { peer: peer.into(), detail: format!("standby log: {e}") };
    let primary_history = state::History::decode(&hello.extra).ok_or_else(|| ReplError::Protocol {
        peer: peer.into(),
        detail: "the primary sent no epoch history".into(),
    })?;
    sh.log.sync().map_err(local)?;
    // The apply thread pauses while this log is compared with the primary's (it writes its pages
    // back, so `applied` is what the data files hold) and restarts from the log start after.
    stop_apply(sh);
    let mut reseed = None;
    if sh.reseed_next.swap(false, Ordering::AcqRel) {
        reseed = Some("the primary cannot ship from this standby's log position".to_string());
    } else if sh.seeded.load(Ordering::Acquire) {
        match follow_point(sh, &primary_history, primary_durable).map_err(local)? {
            Follow::Continue => {}
            Follow::Cut { at, fork } => {
                let end = sh.log.end_lsn();
                sh.log.truncate_after(at).map_err(local)?;
                sh.apply_gen.fetch_add(1, Ordering::AcqRel);
                if fork {
                    eprintln!(
                        "nvmedb standby: REJOIN: this node's log and the primary's (epoch {session_epoch}) fork at LSN {at}: dropped LSN {at}..{end}, written under epoch {} and never acknowledged",
                        sh.history.locked().last_epoch()
                    );
                }
            }
            Follow::Reseed(why) => reseed = Some(why),
        }
    } else {
        reseed = Some("it holds no copy of the database".to_string());
    }
    if let Some(why) = &reseed {
        eprintln!("nvmedb standby: taking a base backup from {peer}: {why}");
        sh.seeded.store(false, Ordering::Release);
        seed::wipe(sh.storage.as_ref()).map_err(local)?;
        wire::write_frame(
            &mut w,
            peer,
            sh.epoch.load(Ordering::Acquire),
            FrameType::Welcome,
            &[0u64.to_le_bytes(), wire::WELCOME_NEEDS_BASE_BACKUP.to_le_bytes()].concat(),
        )?;
        let (start, cat) = seed::receive_base_backup(sh, &mut r, &mut w, peer)?;
        sh.table_page.store(cat.table_page_size as usize, Ordering::Release);
        sh.index_page.store(cat.index_page_size as usize, Ordering::Release);
        sh.safe.store(start, Ordering::Release);
        sh.apply_gen.fetch_add(1, Ordering::AcqRel);
        sh.seeded.store(true, Ordering::Release);
        let mut c = sh.counters.locked();
        c.base_backups += 1;
        c.base_backup_reason = why.clone();
    }
    // From here this log follows the primary's history.
    {
        let mut h = sh.history.locked();
        if *h != primary_history {
            state::write_history(sh.state.as_ref(), &primary_history).map_err(local)?;
            *h = primary_history;
        }
    }
    if reseed.is_none() {
        let pos = sh.log.durable_lsn();
        wire::write_frame(
            &mut w,
            peer,
            sh.epoch.load(Ordering::Acquire),
            FrameType::Welcome,
            &pos.to_le_bytes(),
        )?;
    }
    start_apply(sh).map_err(local)?;
    // The position last acknowledged on this connection: a frame that brings no new record
    // (the primary's durable position alone) is not answered.
    let mut acked = 0;
    loop {
        // Group commit: take every frame that has already arrived, then sync once and
        // acknowledge the end of all of them.
        let (mut frames, mut records, mut pdur) = (0u64, 0u64, 0u64);
        let mut catalogs: Vec<Vec<u8>> = Vec::new();
        loop {
            let f = match wire::read_frame(&mut r, peer) {
                Ok(Some(f)) => f,
                other => {
                    if let Some(e) = fenced(&mut w) {
                        return Err(e);
                    }
                    return other.map(|_| ());
                }
            };
            if let Some(e) = fenced_frame(sh, &f, &mut w, peer) {
                return Err(e);
            }
            if f.kind == FrameType::Cluster {
                learn_cluster(sh, &f, peer)?;
                continue;
            }
            if f.kind == FrameType::Refused {
                let e = wire::refused_error(peer, &f, sh.epoch.load(Ordering::Acquire));
                if matches!(e, ReplError::Diverged { .. }) {
                    eprintln!("nvmedb standby: {e}; taking a base backup at the next connection");
                    sh.reseed_next.store(true, Ordering::Release);
                }
                return Err(e);
            }
            if f.kind != FrameType::Records || f.payload.len() < 12 {
                refuse(
                    &mut w,
                    peer,
                    sh.epoch.load(Ordering::Acquire),
                    RefuseCode::Protocol,
                    "expected records",
                );
                return Err(ReplError::Protocol {
                    peer: peer.into(),
                    detail: format!("unexpected {:?} frame", f.kind),
                });
            }
            pdur = pdur.max(u64_at(&f.payload, 0));
            let count = append_records(sh, &f.payload, peer, &mut catalogs)?;
            frames += 1;
            records += u64::from(count);
            if r.buffer().len() < wire::FRAME_HEADER_BYTES || frames >= 256 {
                break;
            }
        }
        let end = sync_and_store_catalogs(sh, catalogs).map_err(local)?;
        {
            let mut c = sh.counters.locked();
            c.frames += frames;
            c.records += records;
        }
        sh.safe.fetch_max(pdur.min(end), Ordering::SeqCst);
        sh.records_synced();
        if end > acked {
            acked = end;
            let _one = sh.upstream_writes.locked();
            wire::write_frame(
                &mut w,
                peer,
                sh.epoch.load(Ordering::Acquire),
                FrameType::Ack,
                &ack_payload(sh, end),
            )?;
        }
    }
}

/// What a (seeded) standby must do before it follows a primary.
enum Follow {
    /// Its log is a prefix of the primary's (or of what the primary will re-send).
    Continue,
    /// Drop the records after `at`: records the primary does not hold durably (a restarted
    /// primary), or, with `fork`, records of an epoch the primary's history does not have.
    Cut { at: Lsn, fork: bool },
    /// It cannot follow (its pages hold changes past the fork point, or its log begins after
    /// it): it needs a base backup.
    Reseed(String),
}

/// Compares this standby's history and log with a connecting primary's.
fn follow_point(sh: &Shared, primary: &History, primary_durable: Lsn) -> Result<Follow> {
    let fork = sh.history.locked().fork_point(primary);
    let end = sh.log.end_lsn();
    let at = fork.min(primary_durable);
    if end <= at {
        return Ok(Follow::Continue);
    }
    if fork >= end {
        // Same history; the primary restarted and lost records it had not made durable.
        sh.safe.fetch_min(at, Ordering::AcqRel);
        return Ok(Follow::Cut { at, fork: false });
    }
    // The logs diverge at `fork`: the records after it were written by a primary that was
    // deposed before they were acknowledged (in eager and quorum modes). They can be dropped
    // if nothing of them reached this node's pages.
    if fork < sh.log.start_lsn() {
        return Ok(Follow::Reseed(format!(
            "the fork point LSN {fork} lies before this standby's log, which begins at {}",
            sh.log.start_lsn()
        )));
    }
    sh.safe.fetch_min(fork, Ordering::AcqRel);
    let applied = sh.applied.load(Ordering::Acquire);
    if applied > fork {
        return Ok(Follow::Reseed(format!(
            "it applied the log up to LSN {applied}, past the fork point LSN {fork}"
        )));
    }
    if let Some(page) = page_past(sh, fork)? {
        return Ok(Follow::Reseed(format!("{page} holds changes past the fork point LSN {fork}")));
    }
    Ok(Follow::Cut { at, fork: true })
}

/// The first data page changed by a record after `fork` whose copy on disk is newer than
/// `fork` (a former primary may have written it back), if any.
fn page_past(sh: &Shared, fork: Lsn) -> Result<Option<String>> {
    let mut t = sh.log.tail()?;
    let mut seen = std::collections::HashSet::new();
    while let Some(rec) = t.next_record()? {
        if rec.lsn < fork {
            continue;
        }
        let Some((tag, m)) = page_changes(sh, rec.kind, &rec.payload, rec.lsn)? else { continue };
        let heap = tag == TAG_TABLE;
        for (pid, _) in &m.changes {
            if !seen.insert((heap, pid.file, pid.page)) {
                continue;
            }
            let (name, ps) = if heap {
                (crate::db::heap_name(pid.file), sh.table_page.load(Ordering::Acquire))
            } else {
                (crate::db::index_name(pid.file), sh.index_page.load(Ordering::Acquire))
            };
            if !sh.storage.exists(&name) {
                continue;
            }
            let dev = sh.storage.open(&name, false)?;
            let off = pid.page * ps as u64;
            if off + ps as u64 > dev.capacity() {
                continue;
            }
            let mut buf = AlignedBuf::new(ps);
            dev.read_at(off, &mut buf)?;
            if PageHeader::verify(&buf, &name, off, pid.file, pid.page).is_ok()
                && PageHeader::lsn_of(&buf) > fork
            {
                return Ok(Some(format!("page {} of {name} (LSN {})", pid.page, PageHeader::lsn_of(&buf))));
            }
        }
    }
    Ok(None)
}

/// Stores the synchronous set a primary announced (durably, when it changed).
fn learn_cluster(sh: &Arc<Shared>, f: &wire::Frame, peer: &str) -> std::result::Result<(), ReplError> {
    let v = std::str::from_utf8(&f.payload)
        .ok()
        .and_then(ClusterView::decode)
        .ok_or_else(|| ReplError::Protocol { peer: peer.into(), detail: "malformed cluster frame".into() })?;
    let mut cur = sh.cluster.locked();
    if cur.as_ref() != Some(&v) {
        state::write_cluster(sh.state.as_ref(), &v).map_err(|e| ReplError::Protocol {
            peer: peer.into(),
            detail: format!("cannot store the synchronous set: {e}"),
        })?;
        *cur = Some(v.clone());
    }
    drop(cur);
    // Chain mode: forward to the next standby.
    let next = match (v.mode, v.me) {
        (ReplicationMode::Chain, Some(m)) if m + 1 < v.members.len() => {
            Some(ClusterView { me: Some(m + 1), ..v })
        }
        _ => None,
    };
    let mut fw = sh.forwarder.locked();
    let target = next.as_ref().map(|n| n.members[m_of(n)].clone());
    let epoch = sh.epoch.load(Ordering::Acquire);
    if fw.as_ref().map(|f| &f.target) != target.as_ref() || fw.as_ref().is_some_and(|f| f.finished(epoch)) {
        if let Some(old) = fw.take() {
            old.stop();
        }
        *fw = next.and_then(|n| forward::start(sh, n));
    }
    Ok(())
}

fn m_of(v: &ClusterView) -> usize {
    v.me.unwrap_or(0)
}

fn serve_mirror(
    sh: &Arc<Shared>,
    mut r: BufReader<Box<dyn Conn>>,
    mut w: BufWriter<Box<dyn Conn>>,
    peer: &str,
) -> std::result::Result<(), ReplError> {
    wire::write_frame(
        &mut w,
        peer,
        sh.epoch.load(Ordering::Acquire),
        FrameType::Welcome,
        &0u64.to_le_bytes(),
    )?;
    let mut devs: HashMap<String, Arc<dyn Device>> = HashMap::new();
    loop {
        let Some(f) = wire::read_frame(&mut r, peer)? else { return Ok(()) };
        // Held exclusively while this node's promotion opens its files. Not waited for while
        // that promotion runs: it may be mirroring to the sender, which may be promoting too and
        // waiting in turn for this node's answer. It is refused instead (the promotion set
        // `promoting` before it took the lock).
        let _m = loop {
            match sh.mirror_lock.try_read() {
                Ok(g) => break g,
                Err(TryLockError::Poisoned(e)) => break e.into_inner(),
                Err(TryLockError::WouldBlock) => {
                    if let Some(e) = fenced_frame(sh, &f, &mut w, peer) {
                        return Err(e);
                    }
                    // A promotion that failed is letting go of it.
                    sh.env.clock.sleep(Duration::from_millis(1));
                }
            }
        };
        if let Some(e) = fenced_frame(sh, &f, &mut w, peer) {
            return Err(e);
        }
        let bad = || ReplError::Corrupt { peer: peer.into(), detail: "malformed page frame".into() };
        let nl =
            u16::from_le_bytes(f.payload.get(..2).ok_or_else(bad)?.try_into().expect("2 bytes")) as usize;
        let name =
            std::str::from_utf8(f.payload.get(2..2 + nl).ok_or_else(bad)?).map_err(|_| bad())?.to_string();
        if name.contains('/') || name.starts_with('.') {
            return Err(ReplError::Protocol { peer: peer.into(), detail: format!("bad file name {name:?}") });
        }
        let dev = match devs.get(&name) {
            Some(d) => d.clone(),
            None => {
                let d = sh.storage.open(&name, true).map_err(|e| ReplError::Protocol {
                    peer: peer.into(),
                    detail: format!("open {name}: {e}"),
                })?;
                devs.insert(name.clone(), d.clone());
                d
            }
        };
        let io =
            |e: crate::io::IoError| ReplError::Protocol { peer: peer.into(), detail: format!("{name}: {e}") };
        match f.kind {
            FrameType::PageWrite => {
                let rest = &f.payload[2 + nl..];
                let offset = u64::from_le_bytes(rest.get(..8).ok_or_else(bad)?.try_into().expect("8 bytes"));
                let bytes = &rest[8..];
                if name == crate::buffer::DOUBLEWRITE_FILE && offset == 0 {
                    // A primary opened and starts a new generation of the double-write area,
                    // which makes the copies in it unusable: first they restore the pages a
                    // crash or a cut-off mirrored write tore here (the primary's own images are
                    // intact, so it never sends those pages again).
                    repair_torn_pages(sh).map_err(|e| ReplError::Protocol {
                        peer: peer.into(),
                        detail: format!("repairing torn pages before a new double-write generation: {e}"),
                    })?;
                }
                let mut buf = AlignedBuf::new(bytes.len());
                buf.copy_from_slice(bytes);
                dev.write_at(offset, &buf).map_err(io)?;
                sh.counters.locked().page_writes += 1;
            }
            FrameType::PageSync => dev.sync().map_err(io)?,
            k => {
                return Err(ReplError::Protocol {
                    peer: peer.into(),
                    detail: format!("unexpected {k:?} frame"),
                })
            }
        }
        // A primary's batch arrives as a burst: acknowledge its frames in one send, after the
        // last one buffered.
        let mut ack = Vec::with_capacity(16);
        wire::encode_frame(&mut ack, sh.epoch.load(Ordering::Acquire), FrameType::PageAck, &[]);
        w.write_all(&ack).map_err(|e| ReplError::io(peer, "send", e))?;
        if r.buffer().is_empty() {
            w.flush().map_err(|e| ReplError::io(peer, "send", e))?;
        }
    }
}

fn serve_admin(
    sh: &Arc<Shared>,
    mut r: BufReader<Box<dyn Conn>>,
    mut w: BufWriter<Box<dyn Conn>>,
    peer: &str,
) -> std::result::Result<(), ReplError> {
    wire::write_frame(
        &mut w,
        peer,
        sh.epoch.load(Ordering::Acquire),
        FrameType::Welcome,
        &0u64.to_le_bytes(),
    )?;
    loop {
        let Some(f) = wire::read_frame(&mut r, peer)? else { return Ok(()) };
        match f.kind {
            FrameType::Status => {
                let t = status_text(sh);
                wire::write_frame(
                    &mut w,
                    peer,
                    sh.epoch.load(Ordering::Acquire),
                    FrameType::StatusReply,
                    t.as_bytes(),
                )?;
            }
            FrameType::Promote => {
                let options = PromoteOptions::decode(&f.payload);
                // One admin promotion at a time, closed before anyone is told.
                let _one = sh.admin_promotion.lock();
                let r =
                    promote::promote(sh, &options, None).and_then(|(db, _, rep)| db.close().map(|()| rep));
                // A repeated request (the client lost the first reply) gets the same answer.
                let r = match r {
                    Err(e) => sh.promote_lock.lock().clone().ok_or(e),
                    ok => ok,
                };
                match r {
                    Ok(rep) => {
                        let mut p = rep.epoch.to_le_bytes().to_vec();
                        p.extend_from_slice(&rep.log_end.to_le_bytes());
                        let sent = wire::write_frame(&mut w, peer, rep.epoch, FrameType::Promoted, &p);
                        // Only now may the process act on the promotion (e.g. exit).
                        *sh.announced.locked() = Some(rep);
                        sent?;
                    }
                    Err(e) => {
                        let code = match e {
                            Error::Replication(ReplError::NotFenced { .. }) => RefuseCode::Unavailable,
                            _ => RefuseCode::Protocol,
                        };
                        refuse(
                            &mut w,
                            peer,
                            sh.epoch.load(Ordering::Acquire),
                            code,
                            &format!("promotion failed: {e}"),
                        );
                    }
                }
            }
            FrameType::Fence => promote::serve_fence(sh, &f, &mut w, peer)?,
            FrameType::Fetch => promote::serve_fetch(sh, &f, &mut w, peer)?,
            k => {
                return Err(ReplError::Protocol {
                    peer: peer.into(),
                    detail: format!("unexpected {k:?} frame"),
                })
            }
        }
    }
}

/// Asks the standby at `addr` for its status text.
pub fn admin_status(addr: &str, secret: &[u8]) -> std::result::Result<String, ReplError> {
    let mut s = promote::admin_connect(Env::system().net.as_ref(), addr, secret, Duration::from_secs(10))?;
    wire::write_frame(&mut s, addr, 0, FrameType::Status, &[])?;
    let f = wire::expect_frame(&mut s, addr)?;
    Ok(String::from_utf8_lossy(&f.payload).into_owned())
}
