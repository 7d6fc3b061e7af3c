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

use super::apply::{request_snapshot, start_apply, APPLY_WRITE_BACK_EVERY};
use super::clock::{Cond, LongLock, Task};
use super::disk::{DirDisk, Disk};
use super::env::Env;
use super::link::{
    repair_torn_pages, stop_apply, Counters, PromoteOptions, PromoteReport, Shared, StandbyConfig,
};
use super::mode::mode_name;
use super::net::Listener;
use super::primary::{ReplConfig, ReplicatedLog};
use super::promote;
use super::replica_log::ReplicaLog;
use super::seed;
use super::state::{self, ClusterView};
use crate::error::{Error, Result};
use crate::io::{DirStorage, EmulatedDevice, FileOptions, MemDevice, Storage};
use crate::table::catalog::CatalogStore;
use crate::util::sync::MutexExt;
use crate::wal::Lsn;
use crate::Database;
use std::net::Shutdown;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

mod admin;
mod conn;
mod log_session;

pub use admin::admin_status;
use conn::accept_loop;

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

pub(super) fn status_text(sh: &Shared) -> String {
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
