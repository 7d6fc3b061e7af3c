//! A standby's mirror connection (a primary's data-page writes, in mirroring mode) and its
//! admin connection (status, promotion, fencing, fetching records for a promoting peer).
//!
//! Invariant: a mirrored page write is acknowledged only after it is written; mirrored writes
//! wait for no promotion of this node (they are refused as fenced instead), and a double-write
//! area's new generation first repairs the pages torn here.

use super::conn::{fenced_frame, refuse};
use super::status_text;
use crate::error::{Error, ReplError};
use crate::io::{AlignedBuf, Device};
use crate::repl::env::Env;
use crate::repl::link::{repair_torn_pages, PromoteOptions, Shared};
use crate::repl::net::Conn;
use crate::repl::promote;
use crate::repl::wire::{self, FrameType, RefuseCode};
use crate::util::sync::MutexExt;
use std::collections::HashMap;
use std::io::{BufReader, BufWriter, Write};
use std::sync::atomic::Ordering;
use std::sync::{Arc, TryLockError};
use std::time::Duration;

/// Accepts a mirror or admin connection (its `Welcome` carries no position).
fn welcome(sh: &Shared, w: &mut impl Write, peer: &str) -> std::result::Result<(), ReplError> {
    wire::write_frame(w, peer, sh.epoch.load(Ordering::Acquire), FrameType::Welcome, &0u64.to_le_bytes())
}

pub(super) fn serve_mirror(
    sh: &Arc<Shared>,
    mut r: BufReader<Box<dyn Conn>>,
    mut w: BufWriter<Box<dyn Conn>>,
    peer: &str,
) -> std::result::Result<(), ReplError> {
    welcome(sh, &mut w, peer)?;
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

pub(super) fn serve_admin(
    sh: &Arc<Shared>,
    mut r: BufReader<Box<dyn Conn>>,
    mut w: BufWriter<Box<dyn Conn>>,
    peer: &str,
) -> std::result::Result<(), ReplError> {
    welcome(sh, &mut w, peer)?;
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
