//! A standby's connections: the accept loop, the handshake and epoch check every connection
//! passes, and the dispatch to its role (log, mirror, admin).
//!
//! Invariant: a connection whose epoch is older than the standby's (or that arrives while it
//! promotes) is refused with `Refused(Fenced)` before anything it sends is acted on; a newer
//! epoch is persisted before the connection is served.

use super::admin::{serve_admin, serve_mirror};
use super::log_session::serve_log;
use crate::error::ReplError;
use crate::repl::link::{adopt_epoch, Shared};
use crate::repl::net::{Conn, Listener};
use crate::repl::wire::{self, FrameType, RefuseCode, Role};
use crate::util::sync::MutexExt;
use std::io::{BufReader, BufWriter, Write};
use std::net::Shutdown;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

pub(super) fn accept_loop(sh: Arc<Shared>, listener: Arc<dyn Listener>) {
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

pub(super) fn refuse(s: &mut impl Write, peer: &str, epoch: u64, code: RefuseCode, msg: &str) {
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

pub(super) fn fenced_frame(
    sh: &Shared,
    f: &wire::Frame,
    w: &mut impl Write,
    peer: &str,
) -> Option<ReplError> {
    let ours = sh.epoch.load(Ordering::Acquire);
    if f.epoch < ours || sh.promoting.load(Ordering::Acquire) {
        let msg = format!("frame of epoch {} refused: this node is at epoch {ours}", f.epoch);
        refuse(w, peer, ours, RefuseCode::Fenced, &msg);
        return Some(ReplError::Fenced { peer: peer.into(), our_epoch: ours, their_epoch: f.epoch });
    }
    None
}
