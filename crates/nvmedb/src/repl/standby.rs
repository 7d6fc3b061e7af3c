//! The standby: receives the primary's log (and, in mirroring mode, its data-page writes),
//! persists it, acknowledges, applies redo continuously, and is promoted on demand.
//!
//! Owns: the listener and its connections (log, mirror, admin), the standby's epoch (file
//! `<data>/standby/epoch`), its [`ReplicaLog`] (`<data>/standby/`), the apply thread, and
//! promotion. A standby's data directory starts as a copy of a closed primary's
//! ([`seed_standby`]).
//!
//! Invariants:
//! - An acknowledgement is sent only after the records it covers are synced to the replica log.
//! - Every frame whose epoch is older than the standby's epoch is refused (`Refused(Fenced)`)
//!   and its connection closed; an epoch bump is persisted before it is acted on.
//! - The apply thread applies records in log order, only those durable in the replica log and
//!   at or below what the primary reported as durable in its own log (so a primary restart,
//!   which may drop records it never made durable, never finds them applied here).
//! - Promotion bumps the epoch first, then closes the connections, stops the apply thread, and
//!   opens the database on the replica log (redo of everything received, undo of unfinished
//!   transactions, checkpoint).

use super::replica_log::{decode_record, ReplicaLog, ReplicaLogOpener, TailReader};
use super::wire::{self, FrameType, RefuseCode, Role};
use super::ReplError;
use crate::buffer::mtr::{apply_page_change, decode_mtr, PageChange};
use crate::db::RecoveryReport;
use crate::error::{Error, Result};
use crate::io::{AlignedBuf, Device, DirStorage, FileOptions, Storage};
use crate::page::PageHeader;
use crate::table::catalog::CatalogStore;
use crate::wal::engine::{KIND_CATALOG, KIND_PAGES_INDEX, KIND_PAGES_TABLE, TAG_TABLE};
use crate::wal::Lsn;
use crate::{Database, Options};
use std::collections::HashMap;
use std::io::{BufReader, BufWriter, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

/// What promotion did.
#[derive(Debug, Clone)]
pub struct PromoteReport {
    /// The new epoch.
    pub epoch: u64,
    /// End of the received log.
    pub log_end: Lsn,
    /// Records the apply thread had applied before promotion.
    pub applied: Lsn,
    /// Recovery of the promoted database (redo of the rest, undo of unfinished transactions).
    pub recovery: RecoveryReport,
}

#[derive(Default)]
struct Counters {
    frames: u64,
    records: u64,
    page_writes: u64,
    refused: u64,
    last_error: String,
}

struct Shared {
    cfg: StandbyConfig,
    log: Arc<ReplicaLog>,
    storage: Arc<DirStorage>,
    epoch_path: PathBuf,
    epoch: AtomicU64,
    epoch_lock: Mutex<()>,
    promoted: AtomicBool,
    stop: AtomicBool,
    safe: AtomicU64,
    applied: AtomicU64,
    apply_gen: AtomicU64,
    apply_stop: AtomicBool,
    apply_mx: Mutex<()>,
    apply_cv: Condvar,
    log_session: Mutex<()>,
    log_conn: Mutex<Option<TcpStream>>,
    mirror_lock: RwLock<()>,
    conns: Mutex<Vec<TcpStream>>,
    counters: Mutex<Counters>,
    promote_lock: Mutex<Option<PromoteReport>>,
    apply_thread: Mutex<Option<JoinHandle<()>>>,
    table_page: usize,
    index_page: usize,
}

/// A running standby. See the module documentation.
pub struct Standby {
    sh: Arc<Shared>,
    addr: SocketAddr,
    accept: Mutex<Option<JoinHandle<()>>>,
}

/// Reads the epoch stored in a standby's (or promoted standby's) data directory (0 if none).
pub fn read_epoch(data_dir: &Path) -> Result<u64> {
    let p = data_dir.join("standby").join("epoch");
    match std::fs::read_to_string(&p) {
        Ok(s) => s.trim().parse().map_err(|_| Error::Corruption {
            file: p.display().to_string(),
            offset: 0,
            detail: format!("epoch file holds {s:?}"),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(Error::Io(crate::io::IoError::os(
            &p.display().to_string(),
            crate::io::IoOpKind::Setup,
            0,
            0,
            e,
        ))),
    }
}

fn write_epoch(path: &Path, epoch: u64) -> Result<()> {
    let io = |e| {
        Error::Io(crate::io::IoError::os(&path.display().to_string(), crate::io::IoOpKind::Write, 0, 0, e))
    };
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(io)?;
    f.write_all(format!("{epoch}\n").as_bytes()).and_then(|()| f.sync_all()).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)?;
    if let Some(d) = path.parent() {
        std::fs::File::open(d).and_then(|d| d.sync_all()).map_err(io)?;
    }
    Ok(())
}

/// Makes `standby_dir` a standby of the (closed, cleanly checkpointed) database in
/// `primary_dir`: copies the catalog and the table and index files. The standby's log starts at
/// the primary's last checkpoint. Refuses to overwrite an existing database.
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
        let is_data = name == crate::db::CATALOG_FILE || name.ends_with(".heap") || name.ends_with(".idx");
        if is_data && entry.file_type().map(|t| t.is_file()).unwrap_or(false) {
            let dst = standby_dir.join(&name);
            std::fs::copy(entry.path(), &dst).map_err(|e| io(&dst, e))?;
            std::fs::File::open(&dst).and_then(|f| f.sync_all()).map_err(|e| io(&dst, e))?;
        }
    }
    std::fs::File::open(standby_dir).and_then(|d| d.sync_all()).map_err(|e| io(standby_dir, e))?;
    Ok(())
}

impl Standby {
    /// Opens the standby's data and log and starts listening.
    pub fn start(cfg: StandbyConfig) -> Result<Self> {
        if cfg.secret.is_empty() {
            return Err(Error::Config {
                key: "repl.secret".into(),
                detail: "an empty secret is not allowed".into(),
            });
        }
        let storage = Arc::new(DirStorage::new(&cfg.data_dir, FileOptions::default())?);
        if !storage.exists(crate::db::CATALOG_FILE) {
            return Err(Error::Config {
                key: "data".into(),
                detail: format!(
                    "{} holds no database: seed it from the primary first",
                    cfg.data_dir.display()
                ),
            });
        }
        let (_, cat) = CatalogStore::load(storage.open(crate::db::CATALOG_FILE, false)?)?;
        let cat = cat.ok_or_else(|| Error::Corruption {
            file: format!("{}/{}", cfg.data_dir.display(), crate::db::CATALOG_FILE),
            offset: 0,
            detail: "the catalog is empty".into(),
        })?;
        let sdir = cfg.data_dir.join("standby");
        let log = ReplicaLog::open(&sdir, cat.checkpoint_undo_lsn.min(cat.checkpoint_redo_lsn))?;
        let epoch = read_epoch(&cfg.data_dir)?;
        let listener = TcpListener::bind(&cfg.listen).map_err(|e| Error::Config {
            key: "listen".into(),
            detail: format!("cannot listen on {}: {e}", cfg.listen),
        })?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::Config { key: "listen".into(), detail: e.to_string() })?;
        let end = log.durable_lsn();
        let sh = Arc::new(Shared {
            epoch_path: sdir.join("epoch"),
            log,
            storage,
            epoch: AtomicU64::new(epoch),
            epoch_lock: Mutex::new(()),
            promoted: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            safe: AtomicU64::new(0),
            applied: AtomicU64::new(0),
            apply_gen: AtomicU64::new(0),
            apply_stop: AtomicBool::new(false),
            apply_mx: Mutex::new(()),
            apply_cv: Condvar::new(),
            log_session: Mutex::new(()),
            log_conn: Mutex::new(None),
            mirror_lock: RwLock::new(()),
            conns: Mutex::new(Vec::new()),
            counters: Mutex::new(Counters::default()),
            promote_lock: Mutex::new(None),
            apply_thread: Mutex::new(None),
            table_page: cat.table_page_size as usize,
            index_page: cat.index_page_size as usize,
            cfg,
        });
        let _ = end;
        let s2 = sh.clone();
        let accept = std::thread::Builder::new()
            .name("nvmedb-standby-accept".into())
            .spawn(move || accept_loop(s2, listener))
            .map_err(|e| Error::Io(crate::io::IoError::os("standby", crate::io::IoOpKind::Setup, 0, 0, e)))?;
        if sh.cfg.apply {
            let s3 = sh.clone();
            let t = std::thread::Builder::new()
                .name("nvmedb-standby-apply".into())
                .spawn(move || {
                    if let Err(e) = apply_loop(&s3) {
                        eprintln!("nvmedb standby: apply stopped: {e}");
                        s3.counters.lock().unwrap_or_else(|e| e.into_inner()).last_error =
                            format!("apply: {e}");
                    }
                })
                .map_err(|e| {
                    Error::Io(crate::io::IoError::os("standby", crate::io::IoOpKind::Setup, 0, 0, e))
                })?;
            *sh.apply_thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(t);
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

    /// The end of the last record applied to the data files.
    pub fn applied(&self) -> Lsn {
        self.sh.applied.load(Ordering::Acquire)
    }

    /// What promotion did, once it has finished.
    pub fn promotion(&self) -> Option<PromoteReport> {
        self.sh.promote_lock.try_lock().ok().and_then(|g| g.clone())
    }

    /// True once promotion has begun.
    pub fn is_promoted(&self) -> bool {
        self.sh.promoted.load(Ordering::Acquire)
    }

    /// Blocks until the apply thread has applied everything up to `lsn` or `timeout` passes;
    /// returns whether it got there.
    pub fn wait_applied(&self, lsn: Lsn, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let mut g = self.sh.apply_mx.lock().unwrap_or_else(|e| e.into_inner());
        while self.sh.applied.load(Ordering::Acquire) < lsn {
            let now = std::time::Instant::now();
            if now >= deadline {
                return false;
            }
            g = self.sh.apply_cv.wait_timeout(g, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
        }
        true
    }

    /// One-paragraph status (role, epoch, positions, counters).
    pub fn status(&self) -> String {
        status_text(&self.sh)
    }

    /// Promotes this standby: bumps and persists the epoch (from now on the old primary's
    /// frames are refused), closes the connections, stops applying, and opens the database on
    /// the received log (redo, undo of unfinished transactions, checkpoint). The returned
    /// database accepts writes; its log is the replica log.
    pub fn promote(&self) -> Result<(Database, PromoteReport)> {
        promote(&self.sh)
    }

    /// Stops listening and closes every connection (also done on drop).
    pub fn shutdown(&self) {
        self.sh.stop.store(true, Ordering::Release);
        stop_apply(&self.sh);
        for c in self.sh.conns.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
        if let Some(t) = self.accept.lock().unwrap_or_else(|e| e.into_inner()).take() {
            // Wake the accept call.
            let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
            let _ = t.join();
        }
        for c in self.sh.conns.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
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
    let c = sh.counters.lock().unwrap_or_else(|e| e.into_inner());
    format!(
        "role {}  epoch {}  received (persisted) LSN {}  applied {}  primary-durable {}\n  frames {}  records {}  mirrored page writes {}  refused {}  last error: {}\n",
        if sh.promoted.load(Ordering::Acquire) { "promoted" } else { "standby" },
        sh.epoch.load(Ordering::Acquire),
        sh.log.durable_lsn(),
        sh.applied.load(Ordering::Acquire),
        sh.safe.load(Ordering::Acquire),
        c.frames,
        c.records,
        c.page_writes,
        c.refused,
        if c.last_error.is_empty() { "none" } else { &c.last_error }
    )
}

fn stop_apply(sh: &Shared) {
    sh.apply_stop.store(true, Ordering::Release);
    {
        let _g = sh.apply_mx.lock().unwrap_or_else(|e| e.into_inner());
        sh.apply_cv.notify_all();
    }
    let t = sh.apply_thread.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(t) = t {
        let _ = t.join();
    }
}

fn promote(sh: &Arc<Shared>) -> Result<(Database, PromoteReport)> {
    let mut done = sh.promote_lock.lock().unwrap_or_else(|e| e.into_inner());
    if done.is_some() {
        return Err(Error::InvalidArgument("this standby is already promoted".into()));
    }
    let epoch = {
        let _g = sh.epoch_lock.lock().unwrap_or_else(|e| e.into_inner());
        let e = sh.epoch.load(Ordering::Acquire) + 1;
        write_epoch(&sh.epoch_path, e)?;
        sh.epoch.store(e, Ordering::Release);
        sh.promoted.store(true, Ordering::Release);
        e
    };
    if let Some(c) = sh.log_conn.lock().unwrap_or_else(|e| e.into_inner()).take() {
        let _ = c.shutdown(Shutdown::Both);
    }
    let _session = sh.log_session.lock().unwrap_or_else(|e| e.into_inner());
    let _mirror = sh.mirror_lock.write().unwrap_or_else(|e| e.into_inner());
    stop_apply(sh);
    let log_end = sh.log.sync()?;
    let applied = sh.applied.load(Ordering::Acquire);
    let db = Database::open_with_log(
        sh.storage.clone(),
        Some(Box::new(ReplicaLogOpener(sh.log.clone()))),
        sh.cfg.options.clone(),
    )?;
    let report = PromoteReport { epoch, log_end, applied, recovery: db.recovery_report().clone() };
    eprintln!(
        "nvmedb standby: PROMOTED to epoch {epoch} at LSN {log_end} (redo {} pages, {} losers undone)",
        report.recovery.pages_redone, report.recovery.losers
    );
    *done = Some(report.clone());
    Ok((db, report))
}

fn accept_loop(sh: Arc<Shared>, listener: TcpListener) {
    for conn in listener.incoming() {
        if sh.stop.load(Ordering::Acquire) {
            return;
        }
        let Ok(s) = conn else { continue };
        let _ = s.set_nodelay(true);
        if let Ok(c) = s.try_clone() {
            let mut conns = sh.conns.lock().unwrap_or_else(|e| e.into_inner());
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
                    let mut c = sh.counters.lock().unwrap_or_else(|e| e.into_inner());
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
        let _g = sh.epoch_lock.lock().unwrap_or_else(|e| e.into_inner());
        let ours = sh.epoch.load(Ordering::Acquire);
        let stale = hello.role != Role::Admin && (hello.epoch < ours || sh.promoted.load(Ordering::Acquire));
        if stale {
            let msg = format!("epoch {} is older than this node's epoch {ours}", hello.epoch);
            refuse(&mut w, peer, ours, RefuseCode::Fenced, &msg);
            return Err(ReplError::Fenced { peer: peer.into(), our_epoch: ours, their_epoch: hello.epoch });
        }
        if hello.role != Role::Admin && hello.epoch > ours {
            write_epoch(&sh.epoch_path, hello.epoch).map_err(|e| ReplError::Protocol {
                peer: peer.into(),
                detail: format!("cannot persist the new epoch: {e}"),
            })?;
            sh.epoch.store(hello.epoch, Ordering::Release);
        }
    }
    match hello.role {
        Role::Log => serve_log(sh, s, r, w, peer, hello.arg),
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
    if f.epoch < ours || sh.promoted.load(Ordering::Acquire) {
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
    primary_durable: Lsn,
) -> std::result::Result<(), ReplError> {
    // A newer connection takes over from an older one.
    if let Some(old) = sh.log_conn.lock().unwrap_or_else(|e| e.into_inner()).take() {
        let _ = old.shutdown(Shutdown::Both);
    }
    let _session = sh.log_session.lock().unwrap_or_else(|e| e.into_inner());
    if sh.promoted.load(Ordering::Acquire) {
        let ours = sh.epoch.load(Ordering::Acquire);
        refuse(&mut w, peer, ours, RefuseCode::Fenced, "this node was promoted");
        return Err(ReplError::Fenced { peer: peer.into(), our_epoch: ours, their_epoch: 0 });
    }
    *sh.log_conn.lock().unwrap_or_else(|e| e.into_inner()) = s.try_clone().ok();
    let local = |e: Error| ReplError::Protocol { peer: peer.into(), detail: format!("standby log: {e}") };
    sh.log.sync().map_err(local)?;
    if sh.log.end_lsn() > primary_durable {
        // Records the primary does not hold durably (it restarted, or shipped ahead of its own
        // flush): drop them; it re-ships what it still has.
        sh.log.truncate_after(primary_durable).map_err(local)?;
        sh.apply_gen.fetch_add(1, Ordering::AcqRel);
    }
    let pos = sh.log.durable_lsn();
    wire::write_frame(
        &mut w,
        peer,
        sh.epoch.load(Ordering::Acquire),
        FrameType::Welcome,
        &pos.to_le_bytes(),
    )?;
    loop {
        // Group commit: take every frame that has already arrived, then sync once and
        // acknowledge the end of all of them.
        let (mut frames, mut records, mut pdur) = (0u64, 0u64, 0u64);
        let mut catalogs: Vec<Vec<u8>> = Vec::new();
        loop {
            let Some(f) = wire::read_frame(&mut r, peer)? else { return Ok(()) };
            if let Some(e) = fenced_frame(sh, &f, &mut w, peer) {
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
            pdur = pdur.max(u64::from_le_bytes(f.payload[..8].try_into().expect("8 bytes")));
            let count = u32::from_le_bytes(f.payload[8..12].try_into().expect("4 bytes"));
            let mut off = 12;
            for _ in 0..count {
                let (rec, n) = match decode_record(&f.payload[off..]) {
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
                let fresh = sh.log.append_at(rec.lsn, rec.end, rec.kind, &rec.payload).map_err(local)?;
                if fresh && rec.kind == KIND_CATALOG && sh.cfg.apply {
                    catalogs.push(rec.payload);
                }
            }
            frames += 1;
            records += u64::from(count);
            if r.buffer().len() < wire::FRAME_HEADER_BYTES || frames >= 256 {
                break;
            }
        }
        let end = sh.log.sync().map_err(local)?;
        // Catalog changes (new tables) take effect once their record is durable here. In
        // mirroring mode (no apply) the catalog file arrives mirrored instead.
        for c in catalogs {
            store_catalog(sh, &c).map_err(local)?;
        }
        {
            let mut c = sh.counters.lock().unwrap_or_else(|e| e.into_inner());
            c.frames += frames;
            c.records += records;
        }
        sh.safe.fetch_max(pdur.min(end), Ordering::AcqRel);
        {
            let _g = sh.apply_mx.lock().unwrap_or_else(|e| e.into_inner());
            sh.apply_cv.notify_all();
        }
        wire::write_frame(
            &mut w,
            peer,
            sh.epoch.load(Ordering::Acquire),
            FrameType::Ack,
            &end.to_le_bytes(),
        )?;
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
        let _m = sh.mirror_lock.read().unwrap_or_else(|e| e.into_inner());
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
                sh.counters.lock().unwrap_or_else(|e| e.into_inner()).page_writes += 1;
            }
            FrameType::PageSync => dev.sync().map_err(io)?,
            k => {
                return Err(ReplError::Protocol {
                    peer: peer.into(),
                    detail: format!("unexpected {k:?} frame"),
                })
            }
        }
        wire::write_frame(&mut w, peer, sh.epoch.load(Ordering::Acquire), FrameType::PageAck, &[])?;
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
                let r = promote(sh).and_then(|(db, rep)| db.close().map(|()| rep));
                match r {
                    Ok(rep) => {
                        let mut p = rep.epoch.to_le_bytes().to_vec();
                        p.extend_from_slice(&rep.log_end.to_le_bytes());
                        wire::write_frame(&mut w, peer, rep.epoch, FrameType::Promoted, &p)?;
                    }
                    Err(e) => {
                        refuse(
                            &mut w,
                            peer,
                            sh.epoch.load(Ordering::Acquire),
                            RefuseCode::Protocol,
                            &format!("promotion failed: {e}"),
                        );
                    }
                }
            }
            k => {
                return Err(ReplError::Protocol {
                    peer: peer.into(),
                    detail: format!("unexpected {k:?} frame"),
                })
            }
        }
    }
}

/// Asks the standby at `addr` to promote itself (it closes the promoted database cleanly, so
/// its directory then opens as an ordinary database). Returns (new epoch, log end).
pub fn admin_promote(addr: &str, secret: &[u8]) -> std::result::Result<(u64, Lsn), ReplError> {
    let mut s = TcpStream::connect(addr).map_err(|e| ReplError::io(addr, "connect", e))?;
    wire::client_handshake(&mut s, addr, secret, Role::Admin, 0, 0)?;
    wire::write_frame(&mut s, addr, 0, FrameType::Promote, &[])?;
    let f = wire::expect_frame(&mut s, addr)?;
    match f.kind {
        FrameType::Promoted if f.payload.len() == 16 => Ok((
            u64::from_le_bytes(f.payload[..8].try_into().expect("8 bytes")),
            u64::from_le_bytes(f.payload[8..].try_into().expect("8 bytes")),
        )),
        FrameType::Refused => Err(wire::refused_error(addr, &f, 0)),
        k => Err(ReplError::Protocol { peer: addr.into(), detail: format!("unexpected {k:?}") }),
    }
}

/// Asks the standby at `addr` for its status text.
pub fn admin_status(addr: &str, secret: &[u8]) -> std::result::Result<String, ReplError> {
    let mut s = TcpStream::connect(addr).map_err(|e| ReplError::io(addr, "connect", e))?;
    wire::client_handshake(&mut s, addr, secret, Role::Admin, 0, 0)?;
    wire::write_frame(&mut s, addr, 0, FrameType::Status, &[])?;
    let f = wire::expect_frame(&mut s, addr)?;
    Ok(String::from_utf8_lossy(&f.payload).into_owned())
}

/// Pages the apply thread keeps in memory; when full they are written back and dropped.
const APPLY_CACHE_PAGES: usize = 16 * 1024;
/// How often the apply thread writes its dirty pages back (and syncs) when it has caught up:
/// rarely, because those writes compete with the log syncs for the disk (on a shared machine
/// they slow the primary). Promotion writes everything back first, so nothing depends on it.
const APPLY_WRITE_BACK_EVERY: Duration = Duration::from_secs(10);

struct CachedPage {
    buf: AlignedBuf,
    valid: bool,
    dirty: bool,
}

/// The apply thread: redo of durable records up to the primary's durable position.
fn apply_loop(sh: &Arc<Shared>) -> Result<()> {
    let mut tail: TailReader = sh.log.tail()?;
    let mut held: Option<(super::ShippedRecord, u64)> = None;
    let mut gen = sh.apply_gen.load(Ordering::Acquire);
    let mut pages: HashMap<(u8, u32, u64), CachedPage> = HashMap::new();
    let mut devs: HashMap<(u8, u32), Arc<dyn Device>> = HashMap::new();
    let start = sh.log.start_lsn();
    sh.applied.store(start, Ordering::Release);
    let mut last_write_back = std::time::Instant::now();
    loop {
        if sh.apply_stop.load(Ordering::Acquire) {
            return write_back(&mut pages, &mut devs);
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
                if last_write_back.elapsed() >= APPLY_WRITE_BACK_EVERY {
                    write_back(&mut pages, &mut devs)?;
                    last_write_back = std::time::Instant::now();
                }
                let g = sh.apply_mx.lock().unwrap_or_else(|e| e.into_inner());
                sh.apply_cv.notify_all();
                if !sh.apply_stop.load(Ordering::Acquire) {
                    let _ = sh.apply_cv.wait_timeout(g, Duration::from_millis(20));
                }
                continue;
            }
        };
        if rec.kind == KIND_PAGES_TABLE || rec.kind == KIND_PAGES_INDEX {
            let tag = if rec.kind == KIND_PAGES_TABLE { TAG_TABLE } else { crate::wal::engine::TAG_INDEX };
            if let Some(m) = decode_mtr(&rec.payload) {
                for (pid, change) in &m.changes {
                    let key = (tag, pid.file, pid.page);
                    if !pages.contains_key(&key) {
                        if pages.len() >= APPLY_CACHE_PAGES {
                            write_back(&mut pages, &mut devs)?;
                            pages.clear();
                        }
                        let dev = match devs.get(&(tag, pid.file)) {
                            Some(d) => d.clone(),
                            None => {
                                let name = if tag == TAG_TABLE {
                                    format!("t{}.heap", pid.file)
                                } else {
                                    format!("t{}.idx", pid.file)
                                };
                                let d = sh.storage.open(&name, true)?;
                                devs.insert((tag, pid.file), d.clone());
                                d
                            }
                        };
                        let ps = if tag == TAG_TABLE { sh.table_page } else { sh.index_page };
                        let mut buf = AlignedBuf::new(ps);
                        let offset = pid.page * ps as u64;
                        let mut valid = false;
                        if offset + ps as u64 <= dev.capacity() {
                            dev.read_at(offset, &mut buf)?;
                            valid = PageHeader::verify(&buf, &dev.info().name, offset, pid.file, pid.page)
                                .is_ok();
                        }
                        pages.insert(key, CachedPage { buf, valid, dirty: false });
                    }
                    let p = pages.get_mut(&key).expect("inserted above");
                    let full = matches!(change, PageChange::FullImage(_));
                    if (p.valid && PageHeader::lsn_of(&p.buf) >= rec.end) || (!p.valid && !full) {
                        // Already there, or not appliable yet (promotion's redo decides).
                        continue;
                    }
                    apply_page_change(&mut p.buf, change, rec.end);
                    p.valid = true;
                    p.dirty = true;
                }
            }
        }
        sh.applied.store(rec.end, Ordering::Release);
    }
}

fn write_back(
    pages: &mut HashMap<(u8, u32, u64), CachedPage>,
    devs: &mut HashMap<(u8, u32), Arc<dyn Device>>,
) -> Result<()> {
    let mut keys: Vec<(u8, u32, u64)> = pages.iter().filter(|(_, p)| p.dirty).map(|(k, _)| *k).collect();
    if keys.is_empty() {
        return Ok(());
    }
    keys.sort_unstable();
    for key in keys {
        let dev = devs.get(&(key.0, key.1)).expect("device opened when the page was read").clone();
        let p = pages.get_mut(&key).expect("listed");
        PageHeader::seal(&mut p.buf);
        dev.write_at(key.2 * p.buf.len() as u64, &p.buf)?;
        p.dirty = false;
    }
    for d in devs.values() {
        d.sync()?;
    }
    Ok(())
}
