//! The standby's apply thread: continuous redo of the replica log into the standby's data
//! files, and restartpoints.
//!
//! Owns: the apply loop (redo of durable records, in log order, up to what the primary reported
//! as durable in its own log), its page cache ([`RedoPages`], shared with recovery), and the
//! restartpoints (after a write-back, the last applied checkpoint's positions go into the
//! standby's catalog and the replica log releases what lies before them).
//!
//! Invariants:
//! - Only records durable in the replica log and at or below the primary's reported durable
//!   position (`Shared::safe`) are applied, so a primary restart, which may drop records it
//!   never made durable, never finds them applied here.
//! - No restartpoint is taken after a change could not be applied (promotion's redo must see it).
//! - While a read snapshot lives, the image a clean page had before a change is handed to the
//!   storage (`reads`) before the page is written back: write-back never reads the data files
//!   back for a snapshot.

use super::link::{repair_torn_pages, Shared};
use super::reads::{Role, SnapSource, Unfinished};
use super::replica_log::{ShippedRecord, TailReader};
use crate::buffer::doublewrite::{DoubleWrite, DEFAULT_AREA_BYTES};
use crate::buffer::mtr::MtrRecord;
use crate::db::{PageFiles, Redo, RedoPages};
use crate::error::{Error, Result};
use crate::table::catalog::CatalogStore;
use crate::util::sync::MutexExt;
use crate::wal::engine::{EngineRecord, TxnOp, TAG_TABLE};
use crate::wal::Lsn;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Starts the apply thread (when the configuration applies redo).
pub(super) fn start_apply(sh: &Arc<Shared>) -> Result<()> {
    if !sh.cfg.apply {
        return Ok(());
    }
    sh.apply_stop.store(false, Ordering::Release);
    let s3 = sh.clone();
    let t = sh
        .env
        .clock
        .spawn("nvmedb-standby-apply", move || {
            if let Err(e) = apply_loop(&s3) {
                eprintln!("nvmedb standby: apply stopped: {e}");
                s3.counters.locked().last_error = format!("apply: {e}");
            }
        })
        .map_err(|e| Error::Io(crate::io::IoError::os("standby", crate::io::IoOpKind::Setup, 0, 0, e)))?;
    *sh.apply_thread.locked() = Some(t);
    Ok(())
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
pub(super) const APPLY_WRITE_BACK_EVERY: Duration = Duration::from_secs(10);

/// The apply thread: redo of durable records up to the primary's durable position.
fn apply_loop(sh: &Arc<Shared>) -> Result<()> {
    let mut tail: TailReader = sh.log.tail()?;
    let mut held: Option<(ShippedRecord, u64)> = None;
    let mut gen = sh.apply_gen.load(Ordering::Acquire);
    // Pages a crash tore while this standby wrote them back are restored first; write-backs
    // then go through a new generation of the double-write area, as a primary's do.
    repair_torn_pages(sh)?;
    let dw = DoubleWrite::create(sh.storage.as_ref(), DEFAULT_AREA_BYTES)?;
    let mut pages =
        RedoPages::new(PageFiles::One(sh.storage.as_ref()), u64::MAX, APPLY_CACHE_PAGES, Some(dw));
    let start = sh.log.start_lsn();
    sh.applied.store(start, Ordering::Release);
    let clock = sh.env.clock.clone();
    let mut last_write_back = clock.now();
    // The last checkpoint record applied: once the pages are written back, it is this
    // standby's restartpoint (unless a change could not be applied: promotion must redo it).
    let mut restart: Option<(Lsn, Lsn)> = None;
    let mut skipped = false;
    // Applied something since it last waited.
    let mut busy = false;
    // The transactions in flight, for read snapshots; they are served once the pages are no
    // newer than the applied position (the files may hold pages up to the log's end, written
    // back before this thread last stopped).
    let mut unfinished = Unfinished::default();
    let serve_from = sh.log.durable_lsn();
    loop {
        // Read snapshots start between two records (see `reads`).
        if sh.snap_pending.load(Ordering::Acquire) > 0 && sh.applied.load(Ordering::Acquire) >= serve_from {
            serve_snapshots(sh, &pages, &unfinished);
        }
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
                if clock.now().saturating_sub(last_write_back) >= every {
                    flush(sh, &mut pages, &mut restart, skipped)?;
                    last_write_back = clock.now();
                }
                wait_for_records(sh, std::mem::take(&mut busy), safe);
                continue;
            }
        };
        let role = if let Some((tag, m)) = page_changes(sh, rec.kind, &rec.payload, rec.lsn)? {
            // A live read snapshot needs the images of the clean pages this record changes.
            pages.keep_pre_images(sh.cow.has_live());
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
            keep_pre_images(sh, &mut pages);
            match &m.annotation {
                Some(a) => Role::Change(TxnOp::decode(a)?.txn),
                None => Role::Other,
            }
        } else {
            match EngineRecord::decode(rec.kind, &rec.payload) {
                Ok(Some(EngineRecord::Checkpoint { redo, undo })) => {
                    restart = Some((redo, undo));
                    Role::Other
                }
                Ok(Some(EngineRecord::Commit { txn } | EngineRecord::Abort { txn })) => Role::End(txn),
                _ => Role::Other,
            }
        };
        sh.applied.store(rec.end, Ordering::Release);
        unfinished.applied(rec, role);
        busy = true;
    }
}

/// The apply thread caught up with what it may apply (`safe`): wakes the threads waiting for
/// the applied position, then waits for more records: `APPLY_BATCH_WAIT` while records keep
/// coming (`busy`: it applied some since it last waited), else until the log session wakes it.
fn wait_for_records(sh: &Shared, busy: bool, safe: Lsn) {
    let g = sh.apply_mx.locked();
    if sh.applied_waiters.load(Ordering::SeqCst) > 0 {
        sh.apply_cv.notify_all();
    }
    if sh.apply_stop.load(Ordering::Acquire) {
        return;
    }
    if busy {
        // Records keep coming: take them in batches, one wake-up per
        // `APPLY_BATCH_WAIT` rather than one per group the log session syncs.
        drop(sh.apply_cv.wait_timeout(&sh.apply_mx, g, APPLY_BATCH_WAIT));
    } else {
        // Idle: the log session wakes us when records arrive. Seen under the lock
        // after registering, so a sync in between is not missed.
        sh.record_waiters.fetch_add(1, Ordering::SeqCst);
        let moved = sh.safe.load(Ordering::SeqCst) != safe;
        let g = if moved { g } else { sh.apply_cv.wait_timeout(&sh.apply_mx, g, Duration::from_millis(20)) };
        sh.record_waiters.fetch_sub(1, Ordering::SeqCst);
        drop(g);
    }
}

/// How long [`request_snapshot`] waits for the apply thread to hand a snapshot its start.
const SNAPSHOT_WAIT: Duration = Duration::from_secs(30);

/// Asks the apply thread for a read snapshot's start and waits for it (at most
/// [`SNAPSHOT_WAIT`]).
pub(super) fn request_snapshot(sh: &Shared) -> Result<SnapSource> {
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let mut q = sh.snap_requests.locked();
        q.push(tx);
        sh.snap_pending.fetch_add(1, Ordering::AcqRel);
    }
    {
        // An idle apply thread waits on this for records: wake it to serve the request.
        let _g = sh.apply_mx.locked();
        sh.apply_cv.notify_all();
    }
    let deadline = std::time::Instant::now() + SNAPSHOT_WAIT;
    loop {
        match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(src) => return src,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout)
                    if std::time::Instant::now() < deadline && !sh.promoting.load(Ordering::Acquire) => {}
                Err(_) => {
                    return Err(Error::Config {
                        key: "standby reads".into(),
                        detail: format!(
                            "the standby in {} did not start a snapshot within {} s (its apply thread is stopped, catching up after a restart, or the standby is being promoted)",
                            sh.cfg.data_dir.display(),
                            SNAPSHOT_WAIT.as_secs()
                        ),
                    })
                }
            }
    }
}

/// Hands every read snapshot asked for its start at the applied position (see `reads`): its
/// registration with the storage, the pages not yet written back and the records of the
/// transactions in flight.
fn serve_snapshots(sh: &Shared, pages: &RedoPages<'_>, unfinished: &Unfinished) {
    let waiting = std::mem::take(&mut *sh.snap_requests.locked());
    sh.snap_pending.fetch_sub(waiting.len(), Ordering::AcqRel);
    let lsn = sh.applied.load(Ordering::Acquire);
    let acknowledged = sh.safe.load(Ordering::Acquire).max(lsn);
    let src = sh.cow.register(pages.dirty_pages()).map(|pres| (pres, unfinished.records()));
    for tx in waiting {
        let one = match &src {
            Ok((pres, records)) => {
                Ok(SnapSource { pres: pres.clone(), lsn, acknowledged, records: records.clone() })
            }
            Err(e) => Err(Error::Config {
                key: "standby reads".into(),
                detail: format!("registering a snapshot with {}: {e}", sh.storage.location()),
            }),
        };
        // A reader that gave up has dropped its receiver.
        let _ = tx.send(one);
    }
}

/// Hands the live read snapshots the images of the pages changed since they were last clean
/// (see `reads`): before those pages are written back, so that the write-back reads nothing.
fn keep_pre_images(sh: &Shared, pages: &mut RedoPages<'_>) {
    let pre = pages.take_pre_images();
    if !pre.is_empty() {
        sh.cow.keep_pages(pre);
    }
}

/// The page changes a record carries (`None` for the other engine records), decoded for this
/// standby's page sizes. Every engine record kind is named here; a record of no engine kind,
/// or one that does not decode, is corruption of the replica log (never skipped).
pub(super) fn page_changes(
    sh: &Shared,
    kind: u8,
    payload: &[u8],
    lsn: Lsn,
) -> Result<Option<(u8, MtrRecord)>> {
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
    keep_pre_images(sh, pages);
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
    let released = sh.log.truncate_before(redo.min(undo))?;
    let mut c = sh.counters.locked();
    c.restartpoints += 1;
    c.log_released += released;
    Ok(())
}
