//! The state a standby's threads share: its log link (the log session and its connection, the
//! upstream acknowledgements, the chain's positions), its epoch, its replica log and data files,
//! the apply thread's controls, the forwarder's handle, the promotion's report — and the few
//! operations on it that several of them use (adopting an epoch, ending the log session,
//! stopping the apply thread, storing shipped records and catalogs).
//!
//! Owns no thread and no connection handling of its own: `standby/` (the listener and the
//! log, mirror and admin connections), `apply.rs` (the apply thread), `forward.rs` (chain
//! forwarding), `promote.rs` (promotion and fencing) and `seed.rs` (base backups) all work on
//! this one [`Shared`], and none of them imports another for it: the imports of `repl/` point
//! one way (`tests/layers.rs` checks it).
//!
//! Invariants:
//! - An epoch bump is persisted before it is acted on ([`adopt_epoch`]).
//! - Once [`end_log_session`] returned, the log session that was running has ended and
//!   acknowledges nothing more.
//! - Records reach the replica log only through [`append_records`], and catalogs they carry
//!   take effect only once their record is durable ([`sync_and_store_catalogs`]).

use super::clock::{Cond, LongLock, Task};
use super::env::Env;
use super::mirror::MirrorConfig;
use super::net::Conn;
use super::replica_log::{decode_record_ref, ReplicaLog, TailReader};
use super::state::{self, ClusterView, History};
use crate::db::{PageFiles, RecoveryReport};
use crate::error::{Error, ReplError, Result};
use crate::io::Storage;
use crate::table::catalog::CatalogStore;
use crate::util::bytes::u32_at;
use crate::util::sync::MutexExt;
use crate::wal::engine::KIND_CATALOG;
use crate::wal::Lsn;
use crate::Options;
use std::net::Shutdown;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
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
pub(super) struct Counters {
    pub(super) frames: u64,
    pub(super) records: u64,
    pub(super) page_writes: u64,
    pub(super) refused: u64,
    pub(super) base_backups: u64,
    pub(super) restartpoints: u64,
    pub(super) log_released: u64,
    /// Why the last base backup was taken.
    pub(super) base_backup_reason: String,
    pub(super) last_error: String,
}

pub(super) struct Shared {
    pub(super) cfg: StandbyConfig,
    /// The clock and network of the standby's threads and connections.
    pub(super) env: Env,
    /// The node's replication state (epoch, synchronous set, history).
    pub(super) state: Arc<dyn Storage>,
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
    pub(super) reseed_next: AtomicBool,
    pub(super) stop: AtomicBool,
    pub(super) safe: AtomicU64,
    pub(super) applied: AtomicU64,
    pub(super) apply_gen: AtomicU64,
    pub(super) apply_stop: AtomicBool,
    pub(super) apply_mx: Mutex<()>,
    pub(super) apply_cv: Cond,
    /// Threads waiting on `apply_cv` for newly synced records (the idle apply thread, a chain
    /// forwarder): the log session wakes them only when there are some.
    pub(super) record_waiters: AtomicUsize,
    /// Threads waiting on `apply_cv` for the apply thread's progress ([`Standby::wait_applied`]).
    pub(super) applied_waiters: AtomicUsize,
    /// Held by the log session for its whole life.
    pub(super) log_session: LongLock<()>,
    pub(super) log_conn: Mutex<Option<Box<dyn Conn>>>,
    /// Serializes frames written to the upstream log connection (acknowledgements from the
    /// session and relayed ones from the forwarder).
    pub(super) upstream_writes: Mutex<()>,
    /// Chain mode: the positions the rest of the chain reported, in chain order.
    pub(super) downstream: Mutex<Vec<u64>>,
    /// Chain mode: the forwarder to the next standby.
    pub(super) forwarder: Mutex<Option<Forwarder>>,
    pub(super) mirror_lock: RwLock<()>,
    pub(super) conns: Mutex<Vec<Box<dyn Conn>>>,
    pub(super) counters: Mutex<Counters>,
    /// The promotion's report once it has finished (held while promoting).
    pub(super) promote_lock: LongLock<Option<PromoteReport>>,
    /// The report, once whoever asked for the promotion has been told.
    pub(super) announced: Mutex<Option<PromoteReport>>,
    /// Serializes admin promotion requests.
    pub(super) admin_promotion: LongLock<()>,
    /// The synchronous set the last primary announced.
    pub(super) cluster: Mutex<Option<ClusterView>>,
    /// The epochs of the log this standby holds (its last primary's history).
    pub(super) history: Mutex<History>,
    /// Serializes writes of the catalog (shipped catalogs, restartpoints).
    pub(super) catalog_lock: Mutex<()>,
    /// How often the caught-up apply thread writes back and takes a restartpoint.
    pub(super) write_back_every_ms: AtomicU64,
    pub(super) apply_thread: Mutex<Option<Task<()>>>,
    pub(super) table_page: AtomicUsize,
    pub(super) index_page: AtomicUsize,
    /// The data storage keeping what live read snapshots would lose ([`Standby::read_snapshot`](super::Standby::read_snapshot)).
    pub(super) cow: Arc<super::reads::CowStorage>,
    /// Read snapshots asked for: the apply thread hands each its start between two records.
    pub(super) snap_requests: Mutex<Vec<std::sync::mpsc::Sender<Result<super::reads::SnapSource>>>>,
    /// `snap_requests.len()`, read by the apply thread without the lock.
    pub(super) snap_pending: AtomicUsize,
}

/// How a promotion is done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromoteOptions {
    /// Promote even when too few standbys of the old synchronous set could be fenced or read.
    /// Only safe when the old primary is known to be down (it might otherwise acknowledge
    /// commits the new primary does not have).
    pub force: bool,
    /// The epoch to promote to, if at least the next one (a coordination store hands out
    /// epochs); `None`: the standby's epoch plus one.
    pub epoch: Option<u64>,
    /// How long to wait for each peer while fencing and taking records.
    pub peer_timeout: Duration,
    /// Promoting into a replicating primary ([`Standby::promote_to_primary`](super::Standby::promote_to_primary)):
    /// mirror its data pages synchronously to this standby (eager mode with the fail policy
    /// only, as [`open_primary`](super::open_primary) requires).
    pub mirror: Option<MirrorConfig>,
}

impl Default for PromoteOptions {
    fn default() -> Self {
        Self { force: false, epoch: None, peer_timeout: Duration::from_secs(5), mirror: None }
    }
}

impl PromoteOptions {
    /// Payload of an admin `Promote` frame: flags u8 (bit 0 = force), epoch u64 (0 = next).
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut p = vec![u8::from(self.force)];
        p.extend_from_slice(&self.epoch.unwrap_or(0).to_le_bytes());
        p
    }

    pub(super) fn decode(p: &[u8]) -> Self {
        let epoch =
            p.get(1..9).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))).filter(|&e| e > 0);
        Self { force: p.first().is_some_and(|f| f & 1 != 0), epoch, ..Self::default() }
    }
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
    /// Peers of the old synchronous set that were fenced (address and position).
    pub fenced: Vec<(String, Lsn)>,
    /// Peers that could not be fenced or read, with the reason.
    pub unreachable: Vec<String>,
    /// Records taken from fenced peers: (peer, from LSN, to LSN).
    pub taken: Vec<(String, Lsn, Lsn)>,
    /// Anything an operator should know (no synchronous set known; forced).
    pub notes: Vec<String>,
}

/// The handle of a standby's chain forwarder (its thread runs `forward.rs`'s loop).
pub(super) struct Forwarder {
    /// The next standby's address.
    pub(super) target: String,
    /// The epoch it ships at (it ends once the standby's epoch moves on).
    pub(super) epoch: u64,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) conn: Arc<Mutex<Option<Box<dyn Conn>>>>,
    pub(super) thread: Option<Task<()>>,
}

impl Forwarder {
    /// True once its thread has ended, or is about to: its epoch is not `epoch`, the
    /// standby's (a forwarder of an epoch that moved on stops on its own, perhaps only after a
    /// new primary's synchronous set arrived: that set must start a new one).
    pub(super) fn finished(&self, epoch: u64) -> bool {
        self.epoch != epoch || self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Stops the thread and closes its connection.
    pub(super) fn stop(mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(c) = self.conn.locked().take() {
            let _ = c.shutdown(Shutdown::Both);
        }
        if let Some(t) = self.thread.take() {
            t.join();
        }
    }
}

pub(super) fn stop_apply(sh: &Shared) {
    sh.apply_stop.store(true, Ordering::Release);
    {
        let _g = sh.apply_mx.locked();
        sh.apply_cv.notify_all();
    }
    let t = sh.apply_thread.locked().take();
    if let Some(t) = t {
        t.join();
    }
}

/// Restores this node's data pages that a crash (or a write cut off half-way) tore from their
/// copies in its double-write area, as an open does before redo. The apply thread runs it
/// before its first write-back; a standby without one (data-page mirroring) runs it when it
/// starts and before a primary's new double-write generation replaces the old copies: they are
/// the only intact images of the pages torn here, which the primary, whose own images are
/// intact, never sends again. Page sizes come from the catalog; a node without one has nothing
/// to repair.
pub(super) fn repair_torn_pages(sh: &Shared) -> Result<crate::buffer::doublewrite::RepairReport> {
    let mut sizes = (sh.table_page.load(Ordering::Acquire), sh.index_page.load(Ordering::Acquire));
    if (sizes.0 == 0 || sizes.1 == 0) && sh.storage.exists(crate::db::CATALOG_FILE) {
        // A mirrored catalog arrived without a base backup: its page sizes are the pools'.
        if let (_, Some(cat)) = CatalogStore::load(sh.storage.open(crate::db::CATALOG_FILE, false)?)? {
            sizes = (cat.table_page_size as usize, cat.index_page_size as usize);
        }
    }
    let rep = crate::db::repair_torn_pages(
        sh.storage.as_ref(),
        PageFiles::One(sh.storage.as_ref()),
        None,
        sizes,
        true,
    )?;
    if rep.pages_restored > 0 || rep.pages_without_copy > 0 {
        eprintln!(
            "nvmedb standby: {} torn page(s) restored from the double-write area of {}, {} torn without a copy",
            rep.pages_restored,
            sh.storage.location(),
            rep.pages_without_copy
        );
    }
    Ok(rep)
}

/// Raises the node's epoch to `e` (persisted first); no-op when it is not newer.
pub(super) fn adopt_epoch(sh: &Shared, e: u64) -> Result<()> {
    if e > sh.epoch.load(Ordering::Acquire) {
        state::write_epoch(sh.state.as_ref(), e)?;
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
    drop(sh.log_session.lock());
}

/// Stops the apply thread (it writes back and syncs its pages) and syncs the log; returns the
/// log's end and what was applied.
pub(super) fn stop_applying(sh: &Shared) -> Result<(Lsn, Lsn)> {
    stop_apply(sh);
    let end = sh.log.sync()?;
    Ok((end, sh.applied.load(Ordering::Acquire)))
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
        drop(self.apply_cv.wait_timeout(&self.apply_mx, g, timeout));
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
pub(super) fn store_catalog(sh: &Shared, payload: &[u8]) -> Result<()> {
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

/// The acknowledgement payload: this standby's persisted position, then the rest of the chain's.
pub(super) fn ack_payload(sh: &Shared, own: Lsn) -> Vec<u8> {
    let mut p = own.to_le_bytes().to_vec();
    for d in sh.downstream.locked().iter() {
        p.extend_from_slice(&d.to_le_bytes());
    }
    p
}
