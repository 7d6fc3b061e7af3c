//! A standby's log session: a primary's connection that ships records. The standby compares
//! its history and log with the primary's (continue, cut a tail, or take a base backup), then
//! receives frames, appends them to the replica log, syncs once per group of frames and
//! acknowledges the end; in chain mode it starts forwarding to the next standby.
//!
//! Invariants: an acknowledgement covers only records synced to the replica log; one log
//! session at a time (a newer connection ends the older one); a session whose epoch is
//! overtaken ends with `Refused(Fenced)` and acknowledges nothing after that.

use crate::error::{Error, ReplError, Result};
use crate::io::AlignedBuf;
use crate::page::PageHeader;
use crate::repl::apply::{page_changes, start_apply};
use crate::repl::forward;
use crate::repl::link::{ack_payload, append_records, stop_apply, sync_and_store_catalogs, Shared};
use crate::repl::net::Conn;
use crate::repl::seed;
use crate::repl::state::{self, ClusterView, History};
use crate::repl::wire::{self, FrameType, RefuseCode};
use crate::util::bytes::u64_at;
use crate::util::sync::MutexExt;
use crate::wal::engine::TAG_TABLE;
use crate::wal::Lsn;
use crate::xlog::ReplicationMode;
use std::io::{BufReader, BufWriter};
use std::net::Shutdown;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::conn::{fenced_frame, refuse};

type Reader = BufReader<Box<dyn Conn>>;
type Writer = BufWriter<Box<dyn Conn>>;

/// Serves one log session (see the module documentation).
pub(super) fn serve_log(
    sh: &Arc<Shared>,
    s: Box<dyn Conn>,
    mut r: Reader,
    mut w: Writer,
    peer: &str,
    hello: &wire::Hello,
) -> std::result::Result<(), ReplError> {
    // A newer connection takes over from an older one.
    if let Some(old) = sh.log_conn.locked().take() {
        let _ = old.shutdown(Shutdown::Both);
    }
    let _session = sh.log_session.lock();
    *sh.log_conn.locked() = s.try_clone().ok();
    let session = Session { sh, peer, epoch: hello.epoch };
    // Checked after publishing the connection: an epoch raised before this point is seen here,
    // one raised after it finds the connection and ends it (see `end_log_session`).
    if let Some(e) = session.fenced(&mut w) {
        return Err(e);
    }
    session.join(&mut r, &mut w, hello)?;
    session.receive(&mut r, &mut w)
}

/// One log session's standby, peer and epoch.
struct Session<'a> {
    sh: &'a Arc<Shared>,
    peer: &'a str,
    /// The primary's epoch when it connected.
    epoch: u64,
}

/// What one group of frames brought (see [`Session::read_group`]).
#[derive(Default)]
struct Group {
    frames: u64,
    records: u64,
    /// The primary's durable position, as the group's last frame carried it.
    primary_durable: u64,
    catalogs: Vec<Vec<u8>>,
}

impl Session<'_> {
    /// `Some` (after sending `Refused(Fenced)`) when this node's epoch moved past the session's,
    /// or it is promoting.
    fn fenced(&self, w: &mut Writer) -> Option<ReplError> {
        let ours = self.sh.epoch.load(Ordering::Acquire);
        (ours > self.epoch || self.sh.promoting.load(Ordering::Acquire)).then(|| {
            let msg =
                format!("this node moved on to epoch {ours}: the primary of epoch {} is fenced", self.epoch);
            refuse(w, self.peer, ours, RefuseCode::Fenced, &msg);
            ReplError::Fenced { peer: self.peer.into(), our_epoch: ours, their_epoch: self.epoch }
        })
    }

    /// A local failure (the replica log, the data files) as the session's error.
    fn local(&self, e: Error) -> ReplError {
        ReplError::Protocol { peer: self.peer.into(), detail: format!("standby log: {e}") }
    }

    /// Compares this log with the primary's history and durable position, cuts or reseeds as
    /// needed, answers `Welcome` and restarts the apply thread.
    fn join(
        &self,
        r: &mut Reader,
        w: &mut Writer,
        hello: &wire::Hello,
    ) -> std::result::Result<(), ReplError> {
        let (sh, peer) = (self.sh, self.peer);
        let primary_durable = hello.arg;
        let primary_history = state::History::decode(&hello.extra).ok_or_else(|| ReplError::Protocol {
            peer: peer.into(),
            detail: "the primary sent no epoch history".into(),
        })?;
        sh.log.sync().map_err(|e| self.local(e))?;
        // The apply thread pauses while this log is compared with the primary's (it writes its
        // pages back, so `applied` is what the data files hold) and restarts from the log start
        // after.
        stop_apply(sh);
        let reseed = self.reseed_reason(&primary_history, primary_durable)?;
        if let Some(why) = &reseed {
            self.take_base_backup(r, w, why)?;
        }
        // From here this log follows the primary's history.
        {
            let mut h = sh.history.locked();
            if *h != primary_history {
                state::write_history(sh.state.as_ref(), &primary_history).map_err(|e| self.local(e))?;
                *h = primary_history;
            }
        }
        if reseed.is_none() {
            let pos = sh.log.durable_lsn();
            wire::write_frame(
                w,
                peer,
                sh.epoch.load(Ordering::Acquire),
                FrameType::Welcome,
                &pos.to_le_bytes(),
            )?;
        }
        start_apply(sh).map_err(|e| self.local(e))
    }

    /// Why this standby needs a base backup before it follows the primary (`None`: it follows
    /// from its log, after cutting what the primary does not hold).
    fn reseed_reason(
        &self,
        primary_history: &History,
        primary_durable: Lsn,
    ) -> std::result::Result<Option<String>, ReplError> {
        let sh = self.sh;
        if sh.reseed_next.swap(false, Ordering::AcqRel) {
            return Ok(Some("the primary cannot ship from this standby's log position".to_string()));
        }
        if !sh.seeded.load(Ordering::Acquire) {
            return Ok(Some("it holds no copy of the database".to_string()));
        }
        match follow_point(sh, primary_history, primary_durable).map_err(|e| self.local(e))? {
            Follow::Continue => {}
            Follow::Cut { at, fork } => {
                let end = sh.log.end_lsn();
                sh.log.truncate_after(at).map_err(|e| self.local(e))?;
                sh.apply_gen.fetch_add(1, Ordering::AcqRel);
                if fork {
                    eprintln!(
                        "nvmedb standby: REJOIN: this node's log and the primary's (epoch {}) fork at LSN {at}: dropped LSN {at}..{end}, written under epoch {} and never acknowledged",
                        self.epoch,
                        sh.history.locked().last_epoch()
                    );
                }
            }
            Follow::Reseed(why) => return Ok(Some(why)),
        }
        Ok(None)
    }

    /// Wipes the data files and receives a base backup from the primary (`why` is logged and
    /// counted).
    fn take_base_backup(
        &self,
        r: &mut Reader,
        w: &mut Writer,
        why: &str,
    ) -> std::result::Result<(), ReplError> {
        let (sh, peer) = (self.sh, self.peer);
        eprintln!("nvmedb standby: taking a base backup from {peer}: {why}");
        sh.seeded.store(false, Ordering::Release);
        seed::wipe(sh.storage.as_ref()).map_err(|e| self.local(e))?;
        wire::write_frame(
            w,
            peer,
            sh.epoch.load(Ordering::Acquire),
            FrameType::Welcome,
            &[0u64.to_le_bytes(), wire::WELCOME_NEEDS_BASE_BACKUP.to_le_bytes()].concat(),
        )?;
        let (start, cat) = seed::receive_base_backup(sh, r, w, peer)?;
        sh.table_page.store(cat.table_page_size as usize, Ordering::Release);
        sh.index_page.store(cat.index_page_size as usize, Ordering::Release);
        sh.safe.store(start, Ordering::Release);
        sh.apply_gen.fetch_add(1, Ordering::AcqRel);
        sh.seeded.store(true, Ordering::Release);
        let mut c = sh.counters.locked();
        c.base_backups += 1;
        c.base_backup_reason = why.to_string();
        Ok(())
    }

    /// Receives records until the connection ends: per group of frames, one sync and one
    /// acknowledgement of its end.
    fn receive(&self, r: &mut Reader, w: &mut Writer) -> std::result::Result<(), ReplError> {
        let sh = self.sh;
        // The position last acknowledged on this connection: a frame that brings no new record
        // (the primary's durable position alone) is not answered.
        let mut acked = 0;
        loop {
            let Some(g) = self.read_group(r, w)? else { return Ok(()) };
            let end = sync_and_store_catalogs(sh, g.catalogs).map_err(|e| self.local(e))?;
            {
                let mut c = sh.counters.locked();
                c.frames += g.frames;
                c.records += g.records;
            }
            sh.safe.fetch_max(g.primary_durable.min(end), Ordering::SeqCst);
            sh.records_synced();
            if end > acked {
                acked = end;
                let _one = sh.upstream_writes.locked();
                let epoch = sh.epoch.load(Ordering::Acquire);
                wire::write_frame(w, self.peer, epoch, FrameType::Ack, &ack_payload(sh, end))?;
            }
        }
    }

    /// Group commit: takes every frame that has already arrived (at least one, at most 256) and
    /// appends its records. `None` when the primary closed the connection; `Err` (the session
    /// ends) on a fenced, refused or unexpected frame.
    fn read_group(&self, r: &mut Reader, w: &mut Writer) -> std::result::Result<Option<Group>, ReplError> {
        let (sh, peer) = (self.sh, self.peer);
        let mut g = Group::default();
        loop {
            let f = match wire::read_frame(r, peer) {
                Ok(Some(f)) => f,
                other => {
                    if let Some(e) = self.fenced(w) {
                        return Err(e);
                    }
                    // The primary closed the connection (`Ok(None)`), or it failed.
                    return other.map(|_| None);
                }
            };
            if let Some(e) = fenced_frame(sh, &f, w, peer) {
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
                refuse(w, peer, sh.epoch.load(Ordering::Acquire), RefuseCode::Protocol, "expected records");
                return Err(ReplError::Protocol {
                    peer: peer.into(),
                    detail: format!("unexpected {:?} frame", f.kind),
                });
            }
            g.primary_durable = g.primary_durable.max(u64_at(&f.payload, 0));
            let count = append_records(sh, &f.payload, peer, &mut g.catalogs)?;
            g.frames += 1;
            g.records += u64::from(count);
            if r.buffer().len() < wire::FRAME_HEADER_BYTES || g.frames >= 256 {
                return Ok(Some(g));
            }
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
