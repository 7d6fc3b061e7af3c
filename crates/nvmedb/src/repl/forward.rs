//! Chain forwarding: in chain mode the primary ships to the first standby only, and standby k
//! ships what it holds to standby k+1.
//!
//! Owns: a standby's forwarder (one thread and connection to the next standby of the chain: it
//! ships the records durable here, in log order, at the primary's LSNs and epoch, with the
//! primary's acknowledged position, and sends the next standby a base backup of this one when
//! it holds no usable copy; its acknowledgement reader relays the rest of the chain's positions
//! upstream).
//!
//! Invariants:
//! - Only records durable in this standby's log are forwarded (store and forward).
//! - The next standby is shipped to only from a position this log still holds: one behind this
//!   log's start (released at a restartpoint) is refused for a base backup, never shipped from
//!   the first record held (which would leave a gap it acknowledges past).
//! - An acknowledgement lists this standby's persisted position, then the positions the rest
//!   of the chain reported, in chain order; it is built and sent under one lock, so the
//!   positions a primary receives on one connection never go back.
//! - A forwarder ships at the epoch the standby had when it started; when that epoch moves on
//!   (promotion, fencing, a new primary) it stops: a new primary's synchronous set starts a
//!   new one.

use super::link::{ack_payload, Forwarder, Shared};
use super::net::Conn;
use super::replica_log::{encode_record, ReplicaLogHandle};
use super::seed;
use super::state::ClusterView;
use super::wire::{self, FrameType, Role};
use crate::error::ReplError;
use crate::util::sync::MutexExt;
use crate::wal::Lsn;
use std::io::BufWriter;
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Starts forwarding to `view.members[view.me]` (the view as the next standby must see it).
pub(super) fn start(sh: &Arc<Shared>, view: ClusterView) -> Option<Forwarder> {
    let target = view.members.get(view.me?)?.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let conn = Arc::new(Mutex::new(None));
    let (s2, stop2, conn2, t2) = (sh.clone(), stop.clone(), conn.clone(), target.clone());
    let epoch = sh.epoch.load(Ordering::Acquire);
    let clock = sh.env.clock.clone();
    let thread = clock
        .spawn("nvmedb-forward", move || {
            while !stop2.load(Ordering::Acquire) && s2.epoch.load(Ordering::Acquire) == epoch {
                if let Err(e) = forward_once(&s2, &t2, &view, epoch, &stop2, &conn2) {
                    s2.note_forward_error(&format!("forwarding to {t2}: {e}"));
                }
                *conn2.locked() = None;
                s2.env.clock.sleep(Duration::from_millis(100));
            }
        })
        .ok()?;
    Some(Forwarder { target, epoch, stop, conn, thread: Some(thread) })
}

/// Sends an acknowledgement upstream on the current log connection (after the next standby
/// reported progress).
fn relay_upstream(sh: &Shared) {
    let conn = sh.log_conn.locked().as_ref().and_then(|c| c.try_clone().ok());
    if let Some(mut c) = conn {
        let _one = sh.upstream_writes.locked();
        let p = ack_payload(sh, sh.log.durable_lsn());
        let _ = wire::write_frame(&mut c, "upstream", sh.epoch.load(Ordering::Acquire), FrameType::Ack, &p);
    }
}

fn forward_once(
    sh: &Arc<Shared>,
    target: &str,
    view: &ClusterView,
    epoch: u64,
    stop: &AtomicBool,
    conn: &Mutex<Option<Box<dyn Conn>>>,
) -> Result<(), ReplError> {
    let mut s = sh.env.net.connect(target, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| ReplError::io(target, "timeout", e))?;
    let history = sh.history.locked().encode();
    let w = wire::client_handshake_with(
        &mut s,
        target,
        &sh.cfg.secret,
        Role::Log,
        epoch,
        sh.log.durable_lsn(),
        &history,
    )?;
    s.set_read_timeout(None).map_err(|e| ReplError::io(target, "timeout", e))?;
    let mut pos = w.position;
    if w.flags & wire::WELCOME_NEEDS_BASE_BACKUP != 0 {
        // The next standby holds no usable copy: this one sends its own, as a primary does (its
        // data files, and its log from its catalog's checkpoint positions on, which its
        // restartpoints keep).
        let kept = AtomicU64::new(0);
        let log = ReplicaLogHandle(sh.log.clone());
        pos = seed::send_base_backup(
            &log,
            epoch,
            &kept,
            sh.storage.as_ref(),
            target,
            &mut s,
            sh.env.clock.as_ref(),
        )?;
    }
    if pos < sh.log.start_lsn() {
        // This log no longer holds what the next standby lacks (a restartpoint released it):
        // shipping from the first record held would leave a gap. It takes a base backup when it
        // next connects.
        let why = format!(
            "reseed: its position {pos} lies before this standby's log, which begins at {}",
            sh.log.start_lsn()
        );
        let _ = wire::write_frame(
            &mut s,
            target,
            epoch,
            FrameType::Refused,
            &wire::refuse_payload(wire::RefuseCode::Diverged, &why),
        );
        return Err(ReplError::Diverged { peer: target.into(), detail: why });
    }
    wire::write_frame(&mut s, target, epoch, FrameType::Cluster, view.encode().as_bytes())?;
    *conn.locked() = s.try_clone().ok();
    let dead = Arc::new(AtomicBool::new(false));
    let me = view.me.unwrap_or(0);
    let reader = {
        let (sh, dead, target) = (sh.clone(), dead.clone(), target.to_string());
        let mut rs = s.try_clone().map_err(|e| ReplError::io(&target, "clone", e))?;
        let clock = sh.env.clock.clone();
        clock.spawn("nvmedb-forward-acks", move || {
            let r = (|| -> Result<(), ReplError> {
                while let Some(f) = wire::read_frame(&mut rs, &target)? {
                    match f.kind {
                        FrameType::Ack if f.payload.len() >= 8 && f.payload.len() % 8 == 0 => {
                            let v: Vec<u64> = f
                                .payload
                                .chunks(8)
                                .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                                .collect();
                            // Positions of members me.. of the chain.
                            let n = v.len().min(view_len(&sh).saturating_sub(me));
                            *sh.downstream.locked() = v[..n].to_vec();
                            relay_upstream(&sh);
                        }
                        FrameType::Refused => return Err(wire::refused_error(&target, &f, epoch)),
                        k => {
                            return Err(ReplError::Protocol {
                                peer: target.clone(),
                                detail: format!("unexpected {k:?}"),
                            })
                        }
                    }
                }
                Ok(())
            })();
            dead.store(true, Ordering::Release);
            let _ = rs.shutdown(Shutdown::Both);
            r
        })
    }
    .map_err(|e| ReplError::io(target, "start the acknowledgement reader", e))?;
    let result = ship(sh, target, epoch, pos, stop, &dead, &mut s);
    let _ = s.shutdown(Shutdown::Both);
    let acks = reader.join().unwrap_or(Ok(()));
    result.and(acks)
}

fn view_len(sh: &Shared) -> usize {
    sh.cluster.locked().as_ref().map_or(0, |v| v.members.len())
}

/// Ships the durable records after `pos` as they arrive, until stopped or the link dies.
fn ship(
    sh: &Shared,
    target: &str,
    epoch: u64,
    pos: Lsn,
    stop: &AtomicBool,
    dead: &AtomicBool,
    s: &mut Box<dyn Conn>,
) -> Result<(), ReplError> {
    let local = |e: crate::error::Error| ReplError::Protocol {
        peer: target.into(),
        detail: format!("standby log: {e}"),
    };
    let mut out =
        BufWriter::with_capacity(1 << 20, s.try_clone().map_err(|e| ReplError::io(target, "clone", e))?);
    let mut tail = sh.log_tail().map_err(local)?;
    if sh.log.start_lsn() > pos {
        return Err(ReplError::Diverged {
            peer: target.into(),
            detail: format!(
                "a restartpoint released the log before its position {pos}: it needs a base backup"
            ),
        });
    }
    // Skip what the next standby holds; its position must be a record boundary of this log.
    let mut held = None;
    while let Some(r) = tail.next_record().map_err(local)? {
        if r.end > pos {
            if r.lsn < pos {
                return Err(ReplError::Diverged {
                    peer: target.into(),
                    detail: format!(
                        "its position {pos} falls inside this log's record [{}, {})",
                        r.lsn, r.end
                    ),
                });
            }
            held = Some(r);
            break;
        }
    }
    let mut frame = Vec::new();
    let mut sent_safe = 0;
    loop {
        if stop.load(Ordering::Acquire)
            || dead.load(Ordering::Acquire)
            || sh.epoch.load(Ordering::Acquire) != epoch
        {
            return Ok(());
        }
        let safe = sh.safe.load(Ordering::Acquire);
        frame.clear();
        frame.extend_from_slice(&safe.to_le_bytes());
        frame.extend_from_slice(&0u32.to_le_bytes());
        let mut count = 0u32;
        while frame.len() < 1 << 20 {
            let r = match held.take() {
                Some(r) => r,
                None => match tail.next_record().map_err(local)? {
                    Some(r) => r,
                    None => break,
                },
            };
            encode_record(&mut frame, r.lsn, r.end, r.kind, &r.payload);
            count += 1;
        }
        if count == 0 && safe <= sent_safe {
            sh.wait_for_records(Duration::from_millis(20));
            continue;
        }
        frame[8..12].copy_from_slice(&count.to_le_bytes());
        sent_safe = safe;
        wire::write_frame(&mut out, target, epoch, FrameType::Records, &frame)?;
    }
}
