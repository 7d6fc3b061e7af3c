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

use super::forward::{ack_payload, Forwarder};
use super::promote::{self, PromoteOptions, PromoteReport};
use super::replica_log::{decode_record_ref, ReplicaLog, TailReader};
use super::seed;
use super::state::{self, ClusterView, History};
use super::wire::{self, FrameType, RefuseCode, Role};
use super::ReplError;
use crate::buffer::doublewrite::{DoubleWrite, DEFAULT_AREA_BYTES};
use crate::buffer::mtr::MtrRecord;
use crate::db::{PageFiles, Redo, RedoPages};
use crate::error::{Error, Result};
use crate::io::{AlignedBuf, Device, DirStorage, EmulatedDevice, FileOptions, MemDevice, Storage};
use crate::page::PageHeader;
use crate::table::catalog::CatalogStore;
use crate::util::bytes::{u32_at, u64_at};
use crate::util::sync::{CondvarExt, MutexExt, RwLockExt};
use crate::wal::engine::{EngineRecord, KIND_CATALOG, TAG_TABLE};
use crate::wal::Lsn;
use crate::{Database, Options};
use std::collections::HashMap;
use std::io::{BufReader, BufWriter, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

/// Configuration of a standby.
#[derive(Debug, Clone)]
pub struct StandbyConfig {
    /// Address to listen on (`127.0.0.1:0` picks a free loopback port).
    pub listen: String,
    /// The standby's database directory (seeded from the primary).
    pub data_dir: PathBuf,
    /// The shared secret.
    pub secret: Vec<u8>,
    /// Apply redo continuously (turn off in data-mirroring mode: pages arrive written).
    pub apply: bool,
    /// Options of the database opened at promotion.
    pub options: Options,
}

#[derive(Default)]
struct Counters {
    frames: u64,
    records: u64,
    page_writes: u64,
    refused: u64,
    base_backups: u64,
    restartpoints: u64,
    log_released: u64,
    /// Why the last base backup was taken.
    base_backup_reason: String,
    last_error: String,
}

pub(super) struct Shared {
    pub(super) cfg: StandbyConfig,
    pub(super) log: Arc<ReplicaLog>,
    pub(super) storage: Arc<dyn Storage>,
    pub(super) epoch: AtomicU64,
    /// Orders epoch changes with the checks of new connections and with promotion.
    pub(super) epoch_lock: Mutex<()>,
    /// Set from the epoch bump of a promotion on (cleared if promotion fails): log and mirror
    /// connections are refused.
    pub(super) promoting: AtomicBool,
    /// The directory holds a complete copy (a catalog); otherwise it waits for a base backup.
    pub(super) seeded: AtomicBool,
    /// The primary found this standby's log unusable: take a base backup at the next handshake.
    reseed_next: AtomicBool,
    stop: AtomicBool,
    pub(super) safe: AtomicU64,
    pub(super) applied: AtomicU64,
    apply_gen: AtomicU64,
    apply_stop: AtomicBool,
    apply_mx: Mutex<()>,
    apply_cv: Condvar,
    /// Threads waiting on `apply_cv` for newly synced records (the idle apply thread, a chain
    /// forwarder): the log session wakes them only when there are some.
    record_waiters: AtomicUsize,
    /// Threads waiting on `apply_cv` for the apply thread's progress ([`Standby::wait_applied`]).
    applied_waiters: AtomicUsize,
    /// Held by the log session for its whole life.
    pub(super) log_session: Mutex<()>,
    pub(super) log_conn: Mutex<Option<TcpStream>>,
    /// Serializes frames written to the upstream log connection (acknowledgements from the
    /// session and relayed ones from the forwarder).
    pub(super) upstream_writes: Mutex<()>,
    /// Chain mode: the positions the rest of the chain reported, in chain order.
    pub(super) downstream: Mutex<Vec<u64>>,
    /// Chain mode: the forwarder to the next standby.
    forwarder: Mutex<Option<Forwarder>>,
    pub(super) mirror_lock: RwLock<()>,
    conns: Mutex<Vec<TcpStream>>,
    counters: Mutex<Counters>,
    /// The promotion's report once it has finished (held while promoting).
    pub(super) promote_lock: Mutex<Option<PromoteReport>>,
    /// The report, once whoever asked for the promotion has been told.
    announced: Mutex<Option<PromoteReport>>,
    /// Serializes admin promotion requests.
    admin_promotion: Mutex<()>,
    /// The synchronous set the last primary announced.
    pub(super) cluster: Mutex<Option<ClusterView>>,
    /// The epochs of the log this standby holds (its last primary's history).
    pub(super) history: Mutex<History>,
    /// Serializes writes of the catalog (shipped catalogs, restartpoints).
    catalog_lock: Mutex<()>,
    /// How often the caught-up apply thread writes back and takes a restartpoint.
    write_back_every_ms: AtomicU64,
    apply_thread: Mutex<Option<JoinHandle<()>>>,
    table_page: AtomicUsize,
    index_page: AtomicUsize,
    /// The data storage keeping what live read snapshots would lose ([`Standby::read_snapshot`]).
    cow: Arc<super::reads::CowStorage>,
    /// Held by the apply thread while it applies one record or writes pages back; a read
    /// snapshot registers under it, so it starts between two records.
    read_step: Mutex<()>,
    /// Read snapshots copying the replica log: it releases nothing meanwhile.
    snapshot_copies: AtomicUsize,
    /// Read snapshots taken (names their scratch logs).
    snapshots_taken: AtomicU64,
}

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
    addr: SocketAddr,
    accept: Mutex<Option<JoinHandle<()>>>,
}

/// Makes `standby_dir` a standby of the (closed, cleanly checkpointed) database in
/// `primary_dir`: copies the catalog, the table and index files, and the epoch. The standby's
/// log starts at the primary's last checkpoint. Refuses to overwrite an existing database.
pub fn seed_standby(primary_dir: &Path, standby_dir: &Path) -> Result<()> {
    let io = |p: &Path, e| {
        Error::Io(crate::io::IoError::os(&p.display().to_string(), crate::io::IoOpKind::Setup, 0, 0, e))
    };
    if standby_dir.join(crate::db::CATALOG_FILE).exists() {
        return Err(Error::AlreadyExists(format!("a database in {}", standby_dir.display())));
    }
    std::fs::create_dir_all(standby_dir).map_err(|e| io(standby_dir, e))?;
    let rd = std::fs::read_dir(primary_dir).map_err(|e| io(primary_dir, e))?;
    for entry in rd {
        let entry = entry.map_err(|e| io(primary_dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_data = crate::table::files::is_data_file(&name);
        if is_data && entry.file_type().map(|t| t.is_file()).unwrap_or(false) {
            let dst = standby_dir.join(&name);
            std::fs::copy(entry.path(), &dst).map_err(|e| io(&dst, e))?;
            std::fs::File::open(&dst).and_then(|f| f.sync_all()).map_err(|e| io(&dst, e))?;
        }
    }
    std::fs::File::open(standby_dir).and_then(|d| d.sync_all()).map_err(|e| io(standby_dir, e))?;
    state::copy_epoch(primary_dir, standby_dir)
}

impl Standby {
    /// Opens the standby's data and log and starts listening.
    pub fn start(cfg: StandbyConfig) -> Result<Self> {
        let data = Arc::new(DirStorage::new(&cfg.data_dir, FileOptions::default())?);
        Self::start_on(cfg, StandbyDevices { data, log: None })
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
        if cfg.secret.is_empty() {
            return Err(Error::Config {
                key: "repl.secret".into(),
                detail: "an empty secret is not allowed".into(),
            });
        }
        let cow = Arc::new(super::reads::CowStorage::new(devices.data));
        let storage: Arc<dyn Storage> = cow.clone();
        // Without a catalog the directory holds no complete copy: it waits for a base backup.
        let cat = if storage.exists(crate::db::CATALOG_FILE) {
            let (_, cat) = CatalogStore::load(storage.open(crate::db::CATALOG_FILE, false)?)?;
            Some(cat.ok_or_else(|| Error::Corruption {
                file: format!("{}/{}", cfg.data_dir.display(), crate::db::CATALOG_FILE),
                offset: 0,
                detail: "the catalog is empty".into(),
            })?)
        } else {
            None
        };
        if let Some(cat) = &cat {
            if let Some((from, to, n)) = seed::adopt_primary_log(&cfg.data_dir, &cfg.options, cat)? {
                eprintln!(
                    "nvmedb standby: {} was a primary: its log from LSN {from} to {to} ({n} records) is now this standby's log; what it wrote after its successor's fork point is dropped when that primary connects",
                    cfg.data_dir.display()
                );
            }
        }
        let sdir = cfg.data_dir.join("standby");
        let log = ReplicaLog::open(
            &sdir,
            cat.as_ref().map_or(0, |c| c.checkpoint_undo_lsn.min(c.checkpoint_redo_lsn)),
        )?;
        if let Some(d) = devices.log {
            log.set_device(d);
        }
        let epoch = state::read_epoch(&cfg.data_dir)?;
        let cluster = state::read_cluster(&cfg.data_dir)?;
        let history = state::read_history(&cfg.data_dir)?;
        let listener = TcpListener::bind(&cfg.listen).map_err(|e| Error::Config {
            key: "listen".into(),
            detail: format!("cannot listen on {}: {e}", cfg.listen),
        })?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::Config { key: "listen".into(), detail: e.to_string() })?;
        let sh = Arc::new(Shared {
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
            apply_cv: Condvar::new(),
            record_waiters: AtomicUsize::new(0),
            applied_waiters: AtomicUsize::new(0),
            log_session: Mutex::new(()),
            log_conn: Mutex::new(None),
            upstream_writes: Mutex::new(()),
            downstream: Mutex::new(Vec::new()),
            forwarder: Mutex::new(None),
            mirror_lock: RwLock::new(()),
            conns: Mutex::new(Vec::new()),
            counters: Mutex::new(Counters::default()),
            promote_lock: Mutex::new(None),
            announced: Mutex::new(None),
            admin_promotion: Mutex::new(()),
            cluster: Mutex::new(cluster),
            history: Mutex::new(history),
            catalog_lock: Mutex::new(()),
            write_back_every_ms: AtomicU64::new(APPLY_WRITE_BACK_EVERY.as_millis() as u64),
            apply_thread: Mutex::new(None),
            table_page: AtomicUsize::new(cat.as_ref().map_or(0, |c| c.table_page_size as usize)),
            index_page: AtomicUsize::new(cat.as_ref().map_or(0, |c| c.index_page_size as usize)),
            cow,
            read_step: Mutex::new(()),
            snapshot_copies: AtomicUsize::new(0),
            snapshots_taken: AtomicU64::new(0),
            cfg,
        });
        let s2 = sh.clone();
        let accept = std::thread::Builder::new()
            .name("nvmedb-standby-accept".into())
            .spawn(move || accept_loop(s2, listener))
            .map_err(|e| Error::Io(crate::io::IoError::os("standby", crate::io::IoOpKind::Setup, 0, 0, e)))?;
        if sh.seeded.load(Ordering::Acquire) {
            start_apply(&sh)?;
        }
        Ok(Self { sh, addr, accept: Mutex::new(Some(accept)) })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
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
    /// snapshot lives, the old contents of the blocks it overwrites. Building it copies the log
    /// from the standby's restartpoint and redoes it in memory (see `repl::reads`).
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
        let (pres, lsn, acknowledged) = {
            let _step = sh.read_step.locked();
            let pres = sh.cow.register()?;
            sh.snapshot_copies.fetch_add(1, Ordering::AcqRel);
            (pres, sh.applied.load(Ordering::Acquire), sh.safe.load(Ordering::Acquire))
        };
        let n = sh.snapshots_taken.fetch_add(1, Ordering::Relaxed);
        let shm = Path::new("/dev/shm");
        let scratch = if shm.is_dir() {
            shm.join(format!(
                "nvmedb-standby-read-{}-{:x}-{n}",
                std::process::id(),
                self as *const _ as usize
            ))
        } else {
            sh.cfg.data_dir.join("standby-reads").join(n.to_string())
        };
        let release = || {
            sh.snapshot_copies.fetch_sub(1, Ordering::AcqRel);
        };
        super::reads::build(
            &sh.cow,
            pres,
            lsn,
            acknowledged.max(lsn),
            &sh.log,
            scratch,
            &sh.cfg.options,
            release,
        )
    }

    /// Blocks until the apply thread has applied everything up to `lsn` or `timeout` passes;
    /// returns whether it got there.
    pub fn wait_applied(&self, lsn: Lsn, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let mut g = self.sh.apply_mx.locked();
        self.sh.applied_waiters.fetch_add(1, Ordering::SeqCst);
        let reached = loop {
            if self.sh.applied.load(Ordering::Acquire) >= lsn {
                break true;
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                break false;
            }
            g = self.sh.apply_cv.wait_timeout_locked(g, deadline - now).0;
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
        config: super::ReplConfig,
    ) -> Result<(Database, Arc<super::ReplicatedLog>, PromoteReport)> {
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
        if let Some(t) = self.accept.locked().take() {
            // Wake the accept call.
            let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
            let _ = t.join();
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
            super::mode_name(v.mode),
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
        "role {}  epoch {}  received (persisted) LSN {}  applied {}  primary-acknowledged {}  log from {}\n  frames {}  records {}  mirrored page writes {}  base backups {}  restartpoints {} ({} log bytes released)  refused {}  last error: {}\n{set}  history (epoch from LSN): {}\n{}",
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

/// Starts the apply thread (when the configuration applies redo).
fn start_apply(sh: &Arc<Shared>) -> Result<()> {
    if !sh.cfg.apply {
        return Ok(());
    }
    sh.apply_stop.store(false, Ordering::Release);
    let s3 = sh.clone();
    let t = std::thread::Builder::new()
        .name("nvmedb-standby-apply".into())
        .spawn(move || {
            if let Err(e) = apply_loop(&s3) {
                eprintln!("nvmedb standby: apply stopped: {e}");
                s3.counters.locked().last_error = format!("apply: {e}");
            }
        })
        .map_err(|e| Error::Io(crate::io::IoError::os("standby", crate::io::IoOpKind::Setup, 0, 0, e)))?;
    *sh.apply_thread.locked() = Some(t);
    Ok(())
}

fn stop_apply(sh: &Shared) {
    sh.apply_stop.store(true, Ordering::Release);
    {
        let _g = sh.apply_mx.locked();
        sh.apply_cv.notify_all();
    }
    let t = sh.apply_thread.locked().take();
    if let Some(t) = t {
        let _ = t.join();
    }
}

/// Raises the node's epoch to `e` (persisted first); no-op when it is not newer.
pub(super) fn adopt_epoch(sh: &Shared, e: u64) -> Result<()> {
    if e > sh.epoch.load(Ordering::Acquire) {
        state::write_epoch(&sh.cfg.data_dir, e)?;
        sh.epoch.store(e, Ordering::Release);
    }
    Ok(())
}

/// Ends the current log session, if any, and waits for its handler: it sees the epoch has
/// moved on, tells the primary it is fenced, and acknowledges nothing more. Call after the
/// epoch was raised.
pub(super) fn end_log_session(sh: &Shared) {
    if let Some(c) = sh.log_conn.locked().take() {
        // Reading ends; the handler still writes its refusal.
        let _ = c.shutdown(Shutdown::Read);
    }
    drop(sh.log_session.locked());
}

/// Stops the apply thread (it writes back and syncs its pages) and syncs the log; returns the
/// log's end and what was applied.
pub(super) fn stop_applying(sh: &Shared) -> Result<(Lsn, Lsn)> {
    stop_apply(sh);
    let end = sh.log.sync()?;
    Ok((end, sh.applied.load(Ordering::Acquire)))
}

fn accept_loop(sh: Arc<Shared>, listener: TcpListener) {
    for conn in listener.incoming() {
        if sh.stop.load(Ordering::Acquire) {
            return;
        }
        let Ok(s) = conn else { continue };
        let _ = s.set_nodelay(true);
        if let Ok(c) = s.try_clone() {
            let mut conns = sh.conns.locked();
            conns.retain(|c| c.peer_addr().is_ok());
            conns.push(c);
        }
        let sh = sh.clone();
        let _ = std::thread::Builder::new().name("nvmedb-standby-conn".into()).spawn(move || {
            let peer = s.peer_addr().map(|a| a.to_string()).unwrap_or_else(|_| "?".into());
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

fn serve(sh: &Arc<Shared>, s: TcpStream, peer: &str) -> std::result::Result<(), ReplError> {
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
    s: TcpStream,
    mut r: BufReader<TcpStream>,
    mut w: BufWriter<TcpStream>,
    peer: &str,
    hello: &wire::Hello,
) -> std::result::Result<(), ReplError> {
    let (primary_durable, session_epoch) = (hello.arg, hello.epoch);
    // A newer connection takes over from an older one.
    if let Some(old) = sh.log_conn.locked().take() {
        let _ = old.shutdown(Shutdown::Both);
    }
    let _session = sh.log_session.locked();
    *sh.log_conn.locked() = s.try_clone().ok();
    // Checked after publishing the connection: an epoch raised before this point is seen here,
    // one raised after it finds the connection and ends it (see `end_log_session`).
    let fenced = |w: &mut BufWriter<TcpStream>| {
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
            state::write_history(&sh.cfg.data_dir, &primary_history).map_err(local)?;
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

/// Appends the records of a `Records` frame payload (`primary_durable | count | records`) to the
/// replica log; catalogs among the new ones are collected for [`sync_and_store_catalogs`].
/// Returns the number of records in the frame.
pub(super) fn append_records(
    sh: &Shared,
    payload: &[u8],
    peer: &str,
    catalogs: &mut Vec<Vec<u8>>,
) -> std::result::Result<u32, ReplError> {
    let count = u32_at(payload, 8);
    let mut off = 12;
    for _ in 0..count {
        let (rec, n) = match decode_record_ref(&payload[off..]) {
            Ok(Some(x)) => x,
            Ok(None) => {
                return Err(ReplError::Corrupt {
                    peer: peer.into(),
                    detail: "truncated record in frame".into(),
                })
            }
            Err(d) => return Err(ReplError::Corrupt { peer: peer.into(), detail: d }),
        };
        off += n;
        let fresh = sh
            .log
            .append_encoded(&rec)
            .map_err(|e| ReplError::Protocol { peer: peer.into(), detail: format!("standby log: {e}") })?;
        if fresh && rec.kind == KIND_CATALOG && sh.cfg.apply {
            catalogs.push(rec.payload.to_vec());
        }
    }
    Ok(count)
}

/// Syncs the replica log; then catalog changes (new tables) take effect, once their record is
/// durable here. In mirroring mode (no apply) the catalog file arrives mirrored instead.
pub(super) fn sync_and_store_catalogs(sh: &Shared, catalogs: Vec<Vec<u8>>) -> Result<Lsn> {
    let end = sh.log.sync()?;
    for c in catalogs {
        store_catalog(sh, &c)?;
    }
    Ok(end)
}

/// Stores the synchronous set a primary announced (durably, when it changed).
fn learn_cluster(sh: &Arc<Shared>, f: &wire::Frame, peer: &str) -> std::result::Result<(), ReplError> {
    let v = std::str::from_utf8(&f.payload)
        .ok()
        .and_then(ClusterView::decode)
        .ok_or_else(|| ReplError::Protocol { peer: peer.into(), detail: "malformed cluster frame".into() })?;
    let mut cur = sh.cluster.locked();
    if cur.as_ref() != Some(&v) {
        state::write_cluster(&sh.cfg.data_dir, &v).map_err(|e| ReplError::Protocol {
            peer: peer.into(),
            detail: format!("cannot store the synchronous set: {e}"),
        })?;
        *cur = Some(v.clone());
    }
    drop(cur);
    // Chain mode: forward to the next standby.
    let next = match (v.mode, v.me) {
        (super::ReplicationMode::Chain, Some(m)) if m + 1 < v.members.len() => {
            Some(ClusterView { me: Some(m + 1), ..v })
        }
        _ => None,
    };
    let mut fw = sh.forwarder.locked();
    let target = next.as_ref().map(|n| n.members[m_of(n)].clone());
    if fw.as_ref().map(|f| &f.target) != target.as_ref() || fw.as_ref().is_some_and(|f| f.finished()) {
        if let Some(old) = fw.take() {
            old.stop();
        }
        *fw = next.and_then(|n| Forwarder::start(sh, n));
    }
    Ok(())
}

fn m_of(v: &ClusterView) -> usize {
    v.me.unwrap_or(0)
}

impl Shared {
    /// Records a forwarding failure in the status.
    pub(super) fn note_forward_error(&self, e: &str) {
        if !self.stop.load(Ordering::Acquire) {
            self.counters.locked().last_error = e.to_string();
        }
    }

    /// A reader of the durable log from its start.
    pub(super) fn log_tail(self: &Shared) -> Result<TailReader> {
        self.log.tail()
    }

    /// Waits (at most `timeout`) for newly synced records.
    pub(super) fn wait_for_records(&self, timeout: Duration) {
        let g = self.apply_mx.locked();
        self.record_waiters.fetch_add(1, Ordering::SeqCst);
        let _ = self.apply_cv.wait_timeout(g, timeout);
        self.record_waiters.fetch_sub(1, Ordering::SeqCst);
    }

    /// Wakes the threads waiting for newly synced records (or a raised `safe`), if any: call
    /// after publishing them. No system call when nobody waits.
    pub(super) fn records_synced(&self) {
        if self.record_waiters.load(Ordering::SeqCst) > 0 {
            let _g = self.apply_mx.locked();
            self.apply_cv.notify_all();
        }
    }

    /// Stops chain forwarding (promotion, fencing, shutdown).
    pub(super) fn stop_forwarding(&self) {
        let f = self.forwarder.locked().take();
        if let Some(f) = f {
            f.stop();
        }
        self.downstream.locked().clear();
    }
}

/// Stores a catalog shipped by the primary, keeping this standby's own checkpoint positions
/// (its redo still starts where its data files were seeded or last written back).
fn store_catalog(sh: &Shared, payload: &[u8]) -> Result<()> {
    let mut data = crate::table::catalog::decode_catalog(payload).ok_or_else(|| Error::Corruption {
        file: "replicated log".into(),
        offset: 0,
        detail: "catalog record does not decode".into(),
    })?;
    let _one = sh.catalog_lock.locked();
    let (mut store, cur) = CatalogStore::load(sh.storage.open(crate::db::CATALOG_FILE, false)?)?;
    if let Some(cur) = cur {
        data.checkpoint_redo_lsn = cur.checkpoint_redo_lsn;
        data.checkpoint_undo_lsn = cur.checkpoint_undo_lsn;
    }
    store.store(&data)
}

fn serve_mirror(
    sh: &Arc<Shared>,
    mut r: BufReader<TcpStream>,
    mut w: BufWriter<TcpStream>,
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
        let _m = sh.mirror_lock.read_locked();
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
    mut r: BufReader<TcpStream>,
    mut w: BufWriter<TcpStream>,
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
                let _one = sh.admin_promotion.locked();
                let r =
                    promote::promote(sh, &options, None).and_then(|(db, _, rep)| db.close().map(|()| rep));
                // A repeated request (the client lost the first reply) gets the same answer.
                let r = match r {
                    Err(e) => sh.promote_lock.locked().clone().ok_or(e),
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
    let mut s = promote::admin_connect(addr, secret, Duration::from_secs(10))?;
    wire::write_frame(&mut s, addr, 0, FrameType::Status, &[])?;
    let f = wire::expect_frame(&mut s, addr)?;
    Ok(String::from_utf8_lossy(&f.payload).into_owned())
}

/// Pages the apply thread keeps in memory; when full they are written back and dropped.
const APPLY_CACHE_PAGES: usize = 16 * 1024;
/// How long the apply thread, while records keep arriving, waits before it takes the next
/// batch (it is not woken per synced group then).
const APPLY_BATCH_WAIT: Duration = Duration::from_millis(1);
/// How often the apply thread writes its dirty pages back (and syncs, and takes a restartpoint)
/// when it has caught up, by default: rarely, because those writes compete with the log syncs
/// for the disk (on a shared machine they slow the primary). Promotion writes everything back
/// first, so nothing depends on it.
const APPLY_WRITE_BACK_EVERY: Duration = Duration::from_secs(10);

/// The apply thread: redo of durable records up to the primary's durable position.
fn apply_loop(sh: &Arc<Shared>) -> Result<()> {
    let mut tail: TailReader = sh.log.tail()?;
    let mut held: Option<(super::ShippedRecord, u64)> = None;
    let mut gen = sh.apply_gen.load(Ordering::Acquire);
    // Pages a crash tore while this standby wrote them back are restored first; write-backs
    // then go through a new generation of the double-write area, as a primary's do.
    let sizes = (sh.table_page.load(Ordering::Acquire), sh.index_page.load(Ordering::Acquire));
    crate::db::repair_torn_pages(
        sh.storage.as_ref(),
        PageFiles::One(sh.storage.as_ref()),
        None,
        sizes,
        true,
    )?;
    let dw = DoubleWrite::create(sh.storage.as_ref(), DEFAULT_AREA_BYTES)?;
    let mut pages =
        RedoPages::new(PageFiles::One(sh.storage.as_ref()), u64::MAX, APPLY_CACHE_PAGES, Some(dw));
    let start = sh.log.start_lsn();
    sh.applied.store(start, Ordering::Release);
    let mut last_write_back = std::time::Instant::now();
    // The last checkpoint record applied: once the pages are written back, it is this
    // standby's restartpoint (unless a change could not be applied: promotion must redo it).
    let mut restart: Option<(Lsn, Lsn)> = None;
    let mut skipped = false;
    // Applied something since it last waited.
    let mut busy = false;
    loop {
        // Read snapshots register between two records (see `reads`).
        let step = sh.read_step.locked();
        if sh.apply_stop.load(Ordering::Acquire) {
            return flush(sh, &mut pages, &mut restart, skipped);
        }
        let g = sh.apply_gen.load(Ordering::Acquire);
        if g != gen {
            gen = g;
            if let Some((_, off)) = held.take() {
                tail.seek_to(off)?;
            }
        }
        let next = match held.take() {
            Some(h) => Some(h),
            None => {
                let off = tail.offset();
                tail.next_record()?.map(|r| (r, off))
            }
        };
        let safe = sh.safe.load(Ordering::Acquire);
        let rec = match next {
            Some((rec, _)) if rec.end <= safe => rec,
            other => {
                // Caught up (or the next record is past what the primary holds durably).
                held = other;
                let every = Duration::from_millis(sh.write_back_every_ms.load(Ordering::Acquire));
                if last_write_back.elapsed() >= every {
                    flush(sh, &mut pages, &mut restart, skipped)?;
                    last_write_back = std::time::Instant::now();
                }
                drop(step);
                let g = sh.apply_mx.locked();
                if sh.applied_waiters.load(Ordering::SeqCst) > 0 {
                    sh.apply_cv.notify_all();
                }
                if sh.apply_stop.load(Ordering::Acquire) {
                    continue;
                }
                if busy {
                    // Records keep coming: take them in batches, one wake-up per
                    // `APPLY_BATCH_WAIT` rather than one per group the log session syncs.
                    busy = false;
                    let _ = sh.apply_cv.wait_timeout(g, APPLY_BATCH_WAIT);
                } else {
                    // Idle: the log session wakes us when records arrive. Seen under the lock
                    // after registering, so a sync in between is not missed.
                    sh.record_waiters.fetch_add(1, Ordering::SeqCst);
                    let moved = sh.safe.load(Ordering::SeqCst) != safe;
                    let g = if moved {
                        g
                    } else {
                        sh.apply_cv.wait_timeout_locked(g, Duration::from_millis(20)).0
                    };
                    sh.record_waiters.fetch_sub(1, Ordering::SeqCst);
                    drop(g);
                }
                continue;
            }
        };
        if let Some((tag, m)) = page_changes(sh, rec.kind, &rec.payload, rec.lsn)? {
            for (pid, change) in &m.changes {
                if pages.needs_room(tag, pid.file, pid.page) {
                    flush(sh, &mut pages, &mut restart, skipped)?;
                    pages.clear();
                }
                let ps =
                    if tag == TAG_TABLE { &sh.table_page } else { &sh.index_page }.load(Ordering::Acquire);
                if pages.apply(tag, *pid, change, rec.end, ps)? == Redo::Unappliable {
                    // Not appliable yet (promotion's redo decides).
                    skipped = true;
                }
            }
        } else if let Ok(Some(EngineRecord::Checkpoint { redo, undo })) =
            EngineRecord::decode(rec.kind, &rec.payload)
        {
            restart = Some((redo, undo));
        }
        sh.applied.store(rec.end, Ordering::Release);
        busy = true;
    }
}

/// The page changes a record carries (`None` for the other engine records), decoded for this
/// standby's page sizes. Every engine record kind is named here; a record of no engine kind,
/// or one that does not decode, is corruption of the replica log (never skipped).
fn page_changes(sh: &Shared, kind: u8, payload: &[u8], lsn: Lsn) -> Result<Option<(u8, MtrRecord)>> {
    let corrupt = |detail: String| Error::Corruption { file: "replica log".into(), offset: lsn, detail };
    match EngineRecord::decode(kind, payload).map_err(corrupt)? {
        Some(EngineRecord::Pages { tag, format, mtr }) => {
            let ps = if tag == TAG_TABLE { &sh.table_page } else { &sh.index_page }.load(Ordering::Acquire);
            let m =
                format.decode(mtr, ps).ok_or_else(|| corrupt("page-change record does not decode".into()))?;
            Ok(Some((tag, m)))
        }
        Some(
            EngineRecord::Commit { .. }
            | EngineRecord::Abort { .. }
            | EngineRecord::Checkpoint { .. }
            | EngineRecord::Recovery(_)
            | EngineRecord::Catalog(_),
        ) => Ok(None),
        None => Err(corrupt(format!("a record of kind {kind} is none of the engine's"))),
    }
}

/// Writes the applied pages back; then the last applied checkpoint becomes this standby's
/// restartpoint: its catalog takes the checkpoint's redo and undo positions (everything before
/// the redo position is in its pages; the transactions it may have to undo began at or after
/// the undo position) and the replica log releases what lies before them.
fn flush(
    sh: &Shared,
    pages: &mut RedoPages<'_>,
    restart: &mut Option<(Lsn, Lsn)>,
    skipped: bool,
) -> Result<()> {
    if pages.has_dirty() {
        pages.write_back()?;
    }
    let Some((redo, undo)) = restart.take() else { return Ok(()) };
    if skipped {
        return Ok(());
    }
    {
        let _one = sh.catalog_lock.locked();
        let (mut store, cur) = CatalogStore::load(sh.storage.open(crate::db::CATALOG_FILE, false)?)?;
        let Some(mut cat) = cur else { return Ok(()) };
        if cat.checkpoint_redo_lsn >= redo && cat.checkpoint_undo_lsn >= undo {
            return Ok(());
        }
        cat.checkpoint_redo_lsn = cat.checkpoint_redo_lsn.max(redo);
        cat.checkpoint_undo_lsn = cat.checkpoint_undo_lsn.max(undo);
        store.store(&cat)?;
    }
    // A read snapshot copying the log needs it from the catalog it saw: release nothing then
    // (the next restartpoint will).
    let released = if sh.snapshot_copies.load(Ordering::Acquire) > 0 {
        0
    } else {
        sh.log.truncate_before(redo.min(undo))?
    };
    let mut c = sh.counters.locked();
    c.restartpoints += 1;
    c.log_released += released;
    Ok(())
}
