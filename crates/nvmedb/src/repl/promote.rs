//! Promotion of a standby, and the fencing protocol on both sides.
//!
//! Owns: [`PromoteOptions`], [`PromoteReport`], the promotion sequence, fencing of the old
//! primary's synchronous set (`Fence` → `FenceAck`), taking the records a fenced peer holds
//! beyond the promoted standby (`Fetch` → `Records`…), and the admin client calls
//! ([`admin_promote`], [`admin_promote_with`]).
//!
//! Invariants:
//! - Promotion raises and persists the epoch before anything else, then ends its own log
//!   session: from then on this standby acknowledges nothing to the old primary.
//! - Promotion succeeds (unless forced) only when the fenced standbys, itself included, are
//!   enough that the old primary can no longer complete a commit in its mode
//!   ([`ClusterView::fenced_enough`]: quorum k of n needs n-k+1, eager one, chain the last), and
//!   when it holds every record any fenced standby holds. Every acknowledged commit is on k
//!   standbys, so on at least one fenced standby, so on the promoted one.
//! - A fenced standby reports its position only after its log session has ended, so that
//!   position covers every acknowledgement it ever sent the old primary.
//! - Records are taken from a peer only if the peer's log holds the promoted log's last record
//!   (same LSN and CRC): the two logs agree up to there.

use super::apply::start_apply;
use super::env::Env;
use super::link::{
    adopt_epoch, append_records, end_log_session, stop_applying, sync_and_store_catalogs, PromoteOptions,
    PromoteReport, Shared,
};
use super::mirror::{MirrorConfig, MirrorStorage};
use super::mode::mode_name;
use super::net::{Conn, Transport};
use super::primary::{ReplConfig, ReplicatedLog, ReplicatedLogOpener, StandbyPolicy};
use super::replica_log::{encode_record, ReplicaLogOpener};
use super::state::{write_history, ClusterView, History};
use super::wire::{self, FrameType, RefuseCode, Role};
use crate::error::ReplError;
use crate::error::{Error, Result};
use crate::util::bytes::{u32_at, u64_at};
use crate::util::sync::{MutexExt, RwLockExt};
use crate::wal::{LogOpener, Lsn};
use crate::xlog::ReplicationMode;
use crate::Database;
use std::io::{BufReader, Write};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What fencing and catching up found.
#[derive(Default)]
struct Fencing {
    fenced: Vec<(String, Lsn)>,
    unreachable: Vec<String>,
    taken: Vec<(String, Lsn, Lsn)>,
    notes: Vec<String>,
}

/// The promoted database, its replicated log when it replicates, and the report.
pub(super) type Promoted = (Database, Option<Arc<ReplicatedLog>>, PromoteReport);

/// The promotion sequence; see the module documentation. With `replicate`, the promoted
/// database is a replicating primary at once (its log, the replica log, wrapped in a
/// [`ReplicatedLog`] at the new epoch): the log its former peers and the old primary need to
/// follow it is kept for them.
pub(super) fn promote(
    sh: &Arc<Shared>,
    opts: &PromoteOptions,
    replicate: Option<ReplConfig>,
) -> Result<Promoted> {
    let mut done = sh.promote_lock.lock();
    if done.is_some() {
        return Err(Error::InvalidArgument("this standby is already promoted".into()));
    }
    if !sh.seeded.load(Ordering::Acquire) {
        return Err(Error::InvalidArgument(
            "this standby holds no copy of the database yet (it waits for a base backup)".into(),
        ));
    }
    let epoch = {
        let _g = sh.epoch_lock.locked();
        let e = (sh.epoch.load(Ordering::Acquire) + 1).max(opts.epoch.unwrap_or(0));
        adopt_epoch(sh, e)?;
        sh.promoting.store(true, Ordering::Release);
        e
    };
    let fencing = match fence_and_catch_up(sh, epoch, opts) {
        Ok(f) => f,
        Err(e) => {
            // Still a standby, at the new epoch: the old primary stays refused here.
            sh.promoting.store(false, Ordering::Release);
            eprintln!("nvmedb standby: promotion to epoch {epoch} refused: {e}");
            return Err(e);
        }
    };
    let opened = open_promoted(sh, epoch, replicate, opts.mirror.clone());
    let (db, rlog, log_end, applied) = match opened {
        Ok(o) => o,
        Err(e) => {
            // Still a standby, at the new epoch (the old primary stays refused here). It must
            // follow whichever primary comes next (which drops what this attempt wrote past the
            // fork point, or copies it again): accept log connections and fences again, and
            // apply again.
            sh.promoting.store(false, Ordering::Release);
            if let Err(a) = start_apply(sh) {
                eprintln!("nvmedb standby: restarting the apply thread after a failed promotion: {a}");
            }
            eprintln!("nvmedb standby: promotion to epoch {epoch} failed after fencing: {e}");
            return Err(e);
        }
    };
    let report = PromoteReport {
        epoch,
        log_end,
        applied,
        recovery: db.recovery_report().clone(),
        fenced: fencing.fenced,
        unreachable: fencing.unreachable,
        taken: fencing.taken,
        notes: fencing.notes,
    };
    eprintln!(
        "nvmedb standby: PROMOTED to epoch {epoch} at LSN {log_end} (redo {} pages, {} losers undone; fenced {:?}; took {:?}{})",
        report.recovery.pages_redone,
        report.recovery.losers,
        report.fenced.iter().map(|f| &f.0).collect::<Vec<_>>(),
        report.taken,
        report.notes.iter().map(|n| format!("; {n}")).collect::<String>()
    );
    *done = Some(report.clone());
    Ok((db, rlog, report))
}

/// Stops applying, extends the history, and opens the database on the replica log (a
/// replicating primary with `replicate`); returns it, its replicated log, the log's end and what
/// had been applied.
fn open_promoted(
    sh: &Arc<Shared>,
    epoch: u64,
    replicate: Option<ReplConfig>,
    mirror: Option<MirrorConfig>,
) -> Result<(Database, Option<Arc<ReplicatedLog>>, Lsn, Lsn)> {
    let mut storage = sh.storage.clone();
    if let (Some(m), Some(config)) = (mirror, &replicate) {
        if config.mode != ReplicationMode::Eager || !matches!(config.policy, StandbyPolicy::Fail { .. }) {
            return Err(Error::Config {
                key: "repl.mode".into(),
                detail: "data-page mirroring needs eager mode with the fail policy".into(),
            });
        }
        storage = Arc::new(MirrorStorage::new_in(storage, MirrorConfig { epoch, ..m }, config.env.clone()));
    }
    let _session = sh.log_session.lock();
    let _mirror = sh.mirror_lock.write_locked();
    let (log_end, applied) = stop_applying(sh)?;
    // Records of the new epoch begin at the end of what was received.
    {
        let mut h = sh.history.locked();
        h.begin(epoch, log_end);
        write_history(sh.state.as_ref(), &h)?;
    }
    let handle = Arc::new(Mutex::new(None));
    let opener: Box<dyn LogOpener> = match replicate {
        None => Box::new(ReplicaLogOpener(sh.log.clone())),
        Some(mut config) => {
            config.epoch = epoch;
            Box::new(ReplicatedLogOpener {
                inner: Box::new(ReplicaLogOpener(sh.log.clone())),
                config,
                handle: handle.clone(),
                state: Some(sh.state.clone()),
                backup: Some(storage.clone()),
            })
        }
    };
    let db = Database::open_with_log(storage, Some(opener), sh.cfg.options.clone())?;
    let rlog = handle.locked().take();
    Ok((db, rlog, log_end, applied))
}

fn fence_and_catch_up(sh: &Arc<Shared>, epoch: u64, opts: &PromoteOptions) -> Result<Fencing> {
    end_log_session(sh);
    sh.stop_forwarding();
    sh.log.sync()?;
    let mut out = Fencing::default();
    let Some(view) = sh.cluster.locked().clone() else {
        out.notes.push(
            "no synchronous set known (no primary ever connected): only this standby was fenced".into(),
        );
        return Ok(out);
    };
    let mut fenced = vec![false; view.members.len()];
    if let Some(m) = view.me {
        fenced[m] = true;
    }
    let peers: Vec<usize> = (0..view.members.len()).filter(|&i| Some(i) != view.me).collect();
    // In parallel: one thread per peer.
    let tasks: Vec<_> = peers
        .iter()
        .map(|&i| {
            let (addr, secret, net) = (view.members[i].clone(), sh.cfg.secret.clone(), sh.env.net.clone());
            let timeout = opts.peer_timeout;
            let t = sh
                .env
                .clock
                .spawn("nvmedb-fence", move || fence_one(net.as_ref(), &addr, &secret, epoch, timeout));
            (i, t)
        })
        .collect();
    let results: Vec<(usize, std::result::Result<Fenced, ReplError>)> = tasks
        .into_iter()
        .map(|(i, t)| {
            let failed =
                |detail: &str| ReplError::Protocol { peer: view.members[i].clone(), detail: detail.into() };
            let r = match t {
                Ok(t) => t.join().unwrap_or_else(|| Err(failed("fencing panicked"))),
                Err(e) => Err(failed(&format!("cannot start a fencing thread: {e}"))),
            };
            (i, r)
        })
        .collect();
    let mut positions = Vec::new();
    for (i, r) in results {
        match r {
            Ok((pos, history)) => {
                fenced[i] = true;
                out.fenced.push((view.members[i].clone(), pos));
                let usable = usable_end(sh, &view.members[i], pos, history.as_ref(), &mut out.notes);
                positions.push((usable, i));
            }
            Err(e) => out.unreachable.push(format!("{}: {e}", view.members[i])),
        }
    }
    if view.mode != ReplicationMode::Lazy && !view.fenced_enough(&fenced) {
        let detail = format!(
            "{} of the {} standbys of the {} set of epoch {} fenced (this one included), {} needed; not fenced: {}",
            fenced.iter().filter(|f| **f).count(),
            view.members.len(),
            mode_name(view.mode),
            view.epoch,
            needed(&view),
            out.unreachable.join("; ")
        );
        if !opts.force {
            return Err(ReplError::NotFenced { detail }.into());
        }
        out.notes.push(format!("forced: {detail}"));
    }
    if view.mode == ReplicationMode::Lazy {
        out.notes.push("lazy mode: the old primary needs no standby, fencing cannot stop it".into());
    }
    // Take what fenced peers hold beyond this standby: every acknowledged commit is on one of them.
    positions.sort_unstable_by(|a, b| b.cmp(a));
    let target = positions.first().map_or(0, |p| p.0);
    for &(pos, i) in &positions {
        let ours = sh.log.durable_lsn();
        if ours >= target {
            break;
        }
        if pos <= ours {
            continue;
        }
        let addr = &view.members[i];
        match fetch_from(sh, addr, epoch, opts.peer_timeout, pos) {
            Ok(end) => out.taken.push((addr.clone(), ours, end)),
            Err(e) => out.unreachable.push(format!("{addr}: taking its records: {e}")),
        }
    }
    let ours = sh.log.durable_lsn();
    if ours < target {
        let detail = format!(
            "a fenced standby holds the log up to LSN {target}, this one only to {ours}, and its records could not be taken: {}",
            out.unreachable.join("; ")
        );
        if view.mode == ReplicationMode::Lazy {
            // A lazy primary acknowledged without its standbys: their records protect no
            // acknowledged commit, and a peer's log may have gone another way (its primary went
            // on after it was superseded). Taking them is best effort; insisting would keep
            // every candidate from promoting.
            out.notes.push(format!("lazy mode: {detail}"));
        } else if !opts.force {
            return Err(ReplError::NotFenced { detail }.into());
        } else {
            out.notes.push(format!("forced: {detail}"));
        }
    }
    Ok(out)
}

/// How far the log of fenced peer `peer` (at `pos`, of epoch history `history`) continues
/// this one's history. Past the point where the two histories fork, its records were written
/// by a primary of an older epoch after it was superseded (never acknowledged: the primaries
/// since took every acknowledged commit when they promoted), so they are neither needed nor
/// wanted, and a peer that holds only such records past this log's end has nothing to give.
fn usable_end(sh: &Shared, peer: &str, pos: Lsn, history: Option<&History>, notes: &mut Vec<String>) -> Lsn {
    let Some(h) = history else { return pos };
    let fork = sh.history.locked().fork_point(h);
    if fork < pos {
        let epochs: Vec<String> = h.0.iter().map(|(e, l)| format!("{e}@{l}")).collect();
        notes.push(format!(
            "{peer}: its log forks from this one's at LSN {fork} (its history {}); its records from there to {pos} were never acknowledged",
            epochs.join(",")
        ));
    }
    pos.min(fork)
}

/// How many standbys of `view` must be fenced, in words.
fn needed(view: &ClusterView) -> String {
    let n = view.members.len();
    match view.mode {
        ReplicationMode::Quorum(k) => format!("{}", (n + 1).saturating_sub(k)),
        ReplicationMode::Eager => "1".into(),
        ReplicationMode::Chain => {
            format!("the last ({})", view.members.last().map_or("none", |s| s.as_str()))
        }
        ReplicationMode::Lazy => "none".into(),
    }
}

/// Connects to the standby at `addr` as an administrator (handshake done); reads and writes
/// time out after `timeout`.
pub(super) fn admin_connect(
    net: &dyn Transport,
    addr: &str,
    secret: &[u8],
    timeout: Duration,
) -> std::result::Result<Box<dyn Conn>, ReplError> {
    let mut s = net.connect(addr, timeout)?;
    s.set_read_timeout(Some(timeout)).map_err(|e| ReplError::io(addr, "timeout", e))?;
    s.set_write_timeout(Some(timeout)).map_err(|e| ReplError::io(addr, "timeout", e))?;
    wire::client_handshake(&mut s, addr, secret, Role::Admin, 0, 0)?;
    Ok(s)
}

/// A fenced peer's persisted position and its log's epoch history (unknown from older peers).
type Fenced = (Lsn, Option<History>);

/// Fences the standby at `addr` at `epoch`; returns its position and its log's epoch history.
fn fence_one(
    net: &dyn Transport,
    addr: &str,
    secret: &[u8],
    epoch: u64,
    timeout: Duration,
) -> std::result::Result<Fenced, ReplError> {
    let mut s = admin_connect(net, addr, secret, timeout)?;
    wire::write_frame(&mut s, addr, epoch, FrameType::Fence, &[])?;
    let f = wire::expect_frame(&mut s, addr)?;
    match f.kind {
        // Position, then the peer's epoch history (a peer of an older version sends only the
        // position).
        FrameType::FenceAck if f.payload.len() == 8 => Ok((u64_at(&f.payload, 0), None)),
        FrameType::FenceAck if f.payload.len() > 8 => match History::decode(&f.payload[8..]) {
            Some(h) => Ok((u64_at(&f.payload, 0), Some(h))),
            None => Err(ReplError::Protocol {
                peer: addr.into(),
                detail: "a fence acknowledgement with a malformed epoch history".into(),
            }),
        },
        FrameType::Refused => Err(wire::refused_error(addr, &f, epoch)),
        k => Err(ReplError::Protocol {
            peer: addr.into(),
            detail: format!("expected a fence acknowledgement, got {k:?}"),
        }),
    }
}

/// Takes the records the (fenced) standby at `addr` holds beyond this log, up to LSN `until`;
/// returns the new end.
fn fetch_from(
    sh: &Shared,
    addr: &str,
    epoch: u64,
    timeout: Duration,
    until: Lsn,
) -> std::result::Result<Lsn, ReplError> {
    let mut s = admin_connect(sh.env.net.as_ref(), addr, &sh.cfg.secret, timeout)?;
    let from = sh.log.end_lsn();
    let (last_lsn, last_crc) = sh.log.last_record().unwrap_or((u64::MAX, 0));
    let mut p = from.to_le_bytes().to_vec();
    p.extend_from_slice(&last_lsn.to_le_bytes());
    p.extend_from_slice(&last_crc.to_le_bytes());
    p.extend_from_slice(&until.to_le_bytes());
    wire::write_frame(&mut s, addr, epoch, FrameType::Fetch, &p)?;
    let mut r = BufReader::with_capacity(1 << 20, s);
    let mut catalogs = Vec::new();
    loop {
        let f = wire::expect_frame(&mut r, addr)?;
        match f.kind {
            FrameType::Records if f.payload.len() >= 12 => {
                if append_records(sh, &f.payload, addr, &mut catalogs)? == 0 {
                    break;
                }
            }
            FrameType::Refused => return Err(wire::refused_error(addr, &f, epoch)),
            k => {
                return Err(ReplError::Protocol {
                    peer: addr.into(),
                    detail: format!("expected records, got {k:?}"),
                })
            }
        }
    }
    sync_and_store_catalogs(sh, catalogs)
        .map_err(|e| ReplError::Protocol { peer: addr.into(), detail: format!("standby log: {e}") })
}

fn refuse(w: &mut impl Write, peer: &str, epoch: u64, code: RefuseCode, msg: &str) {
    let _ = wire::write_frame(w, peer, epoch, FrameType::Refused, &wire::refuse_payload(code, msg));
}

/// A promoting peer fences this standby: adopt its epoch, end the old primary's session, and
/// report the position (which covers every acknowledgement sent).
pub(super) fn serve_fence(
    sh: &Shared,
    f: &wire::Frame,
    w: &mut impl Write,
    peer: &str,
) -> std::result::Result<(), ReplError> {
    {
        let _g = sh.epoch_lock.locked();
        let ours = sh.epoch.load(Ordering::Acquire);
        if f.epoch < ours || sh.promoting.load(Ordering::Acquire) {
            let msg = if sh.promoting.load(Ordering::Acquire) {
                format!("this standby is being or was promoted itself (epoch {ours})")
            } else {
                format!("this standby is already at epoch {ours}, newer than {}", f.epoch)
            };
            refuse(w, peer, ours, RefuseCode::Fenced, &msg);
            return Err(ReplError::Fenced { peer: peer.into(), our_epoch: ours, their_epoch: f.epoch });
        }
        adopt_epoch(sh, f.epoch).map_err(|e| ReplError::Protocol {
            peer: peer.into(),
            detail: format!("cannot persist the new epoch: {e}"),
        })?;
    }
    end_log_session(sh);
    sh.stop_forwarding();
    let pos = sh
        .log
        .sync()
        .map_err(|e| ReplError::Protocol { peer: peer.into(), detail: format!("standby log: {e}") })?;
    let mut p = pos.to_le_bytes().to_vec();
    p.extend_from_slice(&sh.history.locked().encode());
    wire::write_frame(w, peer, f.epoch, FrameType::FenceAck, &p)
}

/// A promoting peer takes this standby's records from an LSN on (after checking the logs agree).
pub(super) fn serve_fetch(
    sh: &Shared,
    f: &wire::Frame,
    w: &mut impl Write,
    peer: &str,
) -> std::result::Result<(), ReplError> {
    let ours = sh.epoch.load(Ordering::Acquire);
    let local = |e: Error| ReplError::Protocol { peer: peer.into(), detail: format!("standby log: {e}") };
    if f.epoch < ours {
        refuse(w, peer, ours, RefuseCode::Fenced, &format!("epoch {} is older than {ours}", f.epoch));
        return Err(ReplError::Fenced { peer: peer.into(), our_epoch: ours, their_epoch: f.epoch });
    }
    if f.payload.len() != 20 && f.payload.len() != 28 {
        return Err(ReplError::Protocol { peer: peer.into(), detail: "malformed fetch".into() });
    }
    let from = u64_at(&f.payload, 0);
    let last_lsn = u64_at(&f.payload, 8);
    let last_crc = u32_at(&f.payload, 16);
    // The caller's limit (an older caller sends none: everything).
    let until = if f.payload.len() == 28 { u64_at(&f.payload, 20) } else { u64::MAX };
    if last_lsn != u64::MAX && !sh.log.holds(last_lsn, last_crc).map_err(local)? {
        let msg = format!("this log does not hold the record at LSN {last_lsn} the caller's log ends with");
        refuse(w, peer, ours, RefuseCode::Diverged, &msg);
        return Err(ReplError::Diverged { peer: peer.into(), detail: msg });
    }
    if last_lsn == u64::MAX && from != sh.log.start_lsn() {
        let msg = format!("the caller's empty log starts at LSN {from}, this one at {}", sh.log.start_lsn());
        refuse(w, peer, ours, RefuseCode::Diverged, &msg);
        return Err(ReplError::Diverged { peer: peer.into(), detail: msg });
    }
    let mut t = sh.log.tail().map_err(local)?;
    let durable = sh.log.durable_lsn();
    let head = |frame: &mut Vec<u8>| {
        frame.clear();
        frame.extend_from_slice(&durable.to_le_bytes());
        frame.extend_from_slice(&0u32.to_le_bytes());
    };
    let mut frame = Vec::new();
    head(&mut frame);
    let mut count = 0u32;
    while let Some(rec) = t.next_record().map_err(local)? {
        if rec.lsn < from {
            continue;
        }
        if rec.lsn >= until {
            break;
        }
        encode_record(&mut frame, rec.lsn, rec.end, rec.kind, &rec.payload);
        count += 1;
        if frame.len() >= 1 << 20 {
            frame[8..12].copy_from_slice(&count.to_le_bytes());
            wire::write_frame(w, peer, ours, FrameType::Records, &frame)?;
            head(&mut frame);
            count = 0;
        }
    }
    if count > 0 {
        frame[8..12].copy_from_slice(&count.to_le_bytes());
        wire::write_frame(w, peer, ours, FrameType::Records, &frame)?;
        head(&mut frame);
    }
    wire::write_frame(w, peer, ours, FrameType::Records, &frame)
}

/// Asks the standby at `addr` to promote itself with the default options; see
/// [`admin_promote_with`].
pub fn admin_promote(addr: &str, secret: &[u8]) -> std::result::Result<(u64, Lsn), ReplError> {
    admin_promote_with(addr, secret, &PromoteOptions::default())
}

/// Asks the standby at `addr` to promote itself (it fences the old synchronous set, takes what
/// it lacks from fenced peers, and closes the promoted database cleanly, so its directory then
/// opens as an ordinary database). Returns (new epoch, log end).
///
/// The standby answers before it acts on its promotion (e.g. exits); if the connection still
/// drops before the answer, the request is repeated on a new connection, and a standby that is
/// already promoted answers with the same epoch.
pub fn admin_promote_with(
    addr: &str,
    secret: &[u8],
    options: &PromoteOptions,
) -> std::result::Result<(u64, Lsn), ReplError> {
    admin_promote_in(&Env::system(), addr, secret, options)
}

/// [`admin_promote_with`] through `env` (its network; its clock between attempts).
pub fn admin_promote_in(
    env: &Env,
    addr: &str,
    secret: &[u8],
    options: &PromoteOptions,
) -> std::result::Result<(u64, Lsn), ReplError> {
    let attempt = || -> std::result::Result<(u64, Lsn), ReplError> {
        let mut s = admin_connect(env.net.as_ref(), addr, secret, Duration::from_secs(10))?;
        // Promotion runs recovery: no read deadline for its answer.
        s.set_read_timeout(None).map_err(|e| ReplError::io(addr, "timeout", e))?;
        wire::write_frame(&mut s, addr, 0, FrameType::Promote, &options.encode())?;
        let f = wire::expect_frame(&mut s, addr)?;
        match f.kind {
            FrameType::Promoted if f.payload.len() == 16 => {
                Ok((u64_at(&f.payload, 0), u64_at(&f.payload, 8)))
            }
            FrameType::Refused => Err(wire::refused_error(addr, &f, 0)),
            k => Err(ReplError::Protocol { peer: addr.into(), detail: format!("unexpected {k:?}") }),
        }
    };
    let mut last = None;
    for i in 0..5 {
        match attempt() {
            Err(e @ ReplError::Disconnected { .. }) => {
                last = Some(e);
                env.clock.sleep(Duration::from_millis(100 << i));
            }
            r => return r,
        }
    }
    let e = last.expect("five attempts failed");
    Err(ReplError::Disconnected {
        peer: addr.into(),
        detail: format!(
            "{e}; the standby did not answer, it may or may not have been promoted: check its log or `nvmedb status` before promoting another standby"
        ),
    })
}
