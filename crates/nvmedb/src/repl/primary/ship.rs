//! The primary's shipping threads: one local flusher, and per standby a shipper (connect,
//! hand-shake, send commit groups) with its acknowledgement reader.
//!
//! Owns: the connection to each standby and what is sent on it; the link states and
//! fencing on refusal; the return to the configured mode when standbys catch up.
//!
//! Invariants (see the parent module for the queue's and the commit groups'):
//! - a standby's shadow counter is lowered to the local durable position before its
//!   hand-shake, so no commit is acknowledged on records it is about to drop;
//! - a shipper sends records in LSN order with no gap: from the queue when its position is
//!   in it, else read back from the local log up to the queue's start;
//! - a frame's apply limit never exceeds what this primary has acknowledged or could
//!   acknowledge now ([`apply_limit`]), so a standby's pages never hold what a new primary
//!   lacks after a failover.

use super::{combined, wake_all, wake_covered, with_shadows, ModeState, Queue, Shared};
use crate::error::ReplError;
use crate::repl::clock::Task;
use crate::repl::net::Conn;
use crate::repl::replica_log::encode_record;
use crate::repl::seed;
use crate::repl::state::ClusterView;
use crate::repl::wire::{self, FrameType, Role};
use crate::util::bytes::u64_at;
use crate::util::sync::MutexExt;
use crate::wal::Lsn;
use crate::xlog::{combine, LinkState};
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

pub(super) fn set_link(sh: &Shared, i: usize, state: LinkState, detail: String) {
    let mut l = sh.links[i].locked();
    l.state = state;
    l.detail = detail;
}

fn fence(sh: &Shared, e: ReplError) {
    let mut ms = sh.ms.locked();
    if ms.fenced.is_none() {
        eprintln!("nvmedb repl: FENCED: {e}");
        ms.events.push(format!("fenced: {e}"));
        ms.fenced = Some(e);
    }
    wake_all(&mut ms);
}

/// One standby's shipper: connect, hand-shake, ship, repeat after failures until stopped.
/// Asks the local flusher to make the local log durable up to `lsn`, waking it when parked.
pub(super) fn kick_flusher(sh: &Shared, lsn: Lsn) {
    // SeqCst on both sides (here: raise, then read idle; the flusher: set idle, then read the
    // request) so that one of the two sees the other's write: no request is left unserved.
    if sh.flush_req.fetch_max(lsn, Ordering::SeqCst) < lsn && sh.flusher_idle.load(Ordering::SeqCst) {
        if let Some(f) = sh.flusher.get() {
            f.wake();
        }
    }
}

/// The local flusher: makes the local log durable up to the highest requested LSN, then wakes
/// the commits that are now covered (those whose standbys acknowledged first); parks when
/// nothing is requested. Exits at shutdown or after a failed flush (the log is poisoned then;
/// every commit reports its error).
pub(super) fn local_flusher(sh: Arc<Shared>) {
    let _ = sh.flusher.set(sh.clock.current_waker());
    loop {
        if sh.stop.load(Ordering::Acquire) {
            return;
        }
        let target = sh.flush_req.load(Ordering::SeqCst);
        if target > sh.local.durable_lsn() {
            let failed = sh.local.wait_durable(target).is_err();
            let mut ms = sh.ms.locked();
            if failed {
                sh.flush_failed.store(true, Ordering::Release);
                wake_all(&mut ms);
                return;
            }
            wake_covered(&sh, &mut ms);
            continue;
        }
        sh.flusher_idle.store(true, Ordering::SeqCst);
        if sh.flush_req.load(Ordering::SeqCst) <= sh.local.durable_lsn() && !sh.stop.load(Ordering::Acquire) {
            sh.clock.park();
        }
        sh.flusher_idle.store(false, Ordering::SeqCst);
    }
}

pub(super) fn shipper(sh: Arc<Shared>, i: usize) {
    let addr = sh.cfg.standbys[i].clone();
    while !sh.stop.load(Ordering::Acquire) {
        match ship_once(&sh, i, &addr) {
            Ok(()) => {}
            Err(ReplError::Fenced { their_epoch, our_epoch, .. }) if their_epoch <= our_epoch => {
                // A node promoted at an older epoch (a primary this one superseded, not yet
                // stepped down) refuses log connections: not a reason to stop; it follows this
                // primary once it restarts as a standby.
                set_link(
                    &sh,
                    i,
                    LinkState::Failed,
                    format!("{addr} was promoted at epoch {their_epoch} (older than {our_epoch}): waiting for it to rejoin as a standby"),
                );
            }
            Err(e @ ReplError::Fenced { .. }) => {
                set_link(&sh, i, LinkState::Failed, e.to_string());
                fence(&sh, e);
                return;
            }
            Err(e @ ReplError::AuthFailed { .. }) => {
                set_link(&sh, i, LinkState::Failed, e.to_string());
                sh.links[i].locked().auth = Some(e);
                // Wake waiting commits: they fail now rather than at their timeout.
                wake_all(&mut sh.ms.locked());
            }
            Err(e) => set_link(&sh, i, LinkState::Failed, e.to_string()),
        }
        sh.links[i].locked().stream = None;
        let g = sh.stop_mx.locked();
        if !sh.stop.load(Ordering::Acquire) {
            drop(sh.stop_cv.wait_timeout(&sh.stop_mx, g, sh.cfg.reconnect_delay));
        }
    }
}

fn ship_once(sh: &Arc<Shared>, i: usize, addr: &str) -> std::result::Result<(), ReplError> {
    let (s, pos) = connect(sh, i, addr)?;
    wake_covered(sh, &mut sh.ms.locked());
    let dead = Arc::new(AtomicBool::new(false));
    let reader = start_ack_reader(sh, i, addr, s.as_ref(), &dead)?;
    let out = s.try_clone().map_err(|e| ReplError::io(addr, "clone", e))?;
    sh.sent[i].store(pos, Ordering::Release);
    let result = Outbound::new(sh, i, addr, out, pos).run(&dead);
    sh.sent[i].store(u64::MAX, Ordering::Release);
    // Commits that counted on this shipper for their local flush get it now.
    kick_flusher(sh, sh.last_end.load(Ordering::Acquire));
    let _ = s.shutdown(Shutdown::Both);
    let acks = reader.join().unwrap_or_else(|| {
        Err(ReplError::Protocol { peer: addr.into(), detail: "ack reader panicked".into() })
    });
    match (result, acks) {
        // A refusal by epoch explains whatever else went wrong on the connection.
        (_, Err(e @ ReplError::Fenced { .. })) => Err(e),
        (Err(e), _) => Err(e),
        (Ok(()), Err(e)) if !sh.stop.load(Ordering::Acquire) => Err(e),
        _ => Ok(()),
    }
}

/// Connects to standby `i`, hand-shakes, sends it a base backup when it asks for one and the
/// cluster view, and checks that this log holds its position. Returns the connection and the
/// position to ship from, with the link marked up and its shadow counter set there.
fn connect(sh: &Arc<Shared>, i: usize, addr: &str) -> std::result::Result<(Box<dyn Conn>, Lsn), ReplError> {
    let mut s = sh.cfg.env.net.connect(addr, Duration::from_secs(2))?;
    // The standby will drop records past what we hold durably; lower the shadow first so no
    // commit is acknowledged on records it is about to drop.
    let durable = sh.local.durable_lsn();
    sh.shadows[i].fetch_min(durable, Ordering::AcqRel);
    // A peer that accepts but never answers must not hang the shipper (or shutdown).
    s.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| ReplError::io(addr, "timeout", e))?;
    let w = wire::client_handshake_with(
        &mut s,
        addr,
        &sh.cfg.secret,
        Role::Log,
        sh.cfg.epoch,
        durable,
        &sh.history.encode(),
    )?;
    sh.links[i].locked().auth = None;
    s.set_read_timeout(None).map_err(|e| ReplError::io(addr, "timeout", e))?;
    let view =
        ClusterView { epoch: sh.cfg.epoch, mode: sh.cfg.mode, members: sh.cfg.standbys.clone(), me: Some(i) };
    let mut pos = w.position;
    if w.flags & wire::WELCOME_NEEDS_BASE_BACKUP != 0 {
        let Some(storage) = &sh.backup else {
            return Err(ReplError::Diverged {
                peer: addr.into(),
                detail:
                    "the standby asks for a base backup, and this primary was started without its data files"
                        .into(),
            });
        };
        pos = seed::send_base_backup(
            sh.local.as_ref(),
            sh.cfg.epoch,
            &sh.shadows[i],
            storage.as_ref(),
            addr,
            &mut s,
            sh.clock.as_ref(),
        )?;
        sh.links[i].locked().given_up = false;
    }
    wire::write_frame(&mut s, addr, sh.cfg.epoch, FrameType::Cluster, view.encode().as_bytes())?;
    check_position(sh, i, addr, &mut s, pos)?;
    sh.shadows[i].store(pos, Ordering::Release);
    let mut l = sh.links[i].locked();
    l.given_up = false;
    l.state = LinkState::Up;
    l.detail = format!("connected at LSN {pos}");
    l.connects += 1;
    l.stream = s.try_clone().ok();
    drop(l);
    Ok((s, pos))
}

/// Refuses a standby whose position this log cannot ship from (before its start, past its
/// end, or given up): it is told to take a base backup when this primary can send one.
fn check_position(
    sh: &Shared,
    i: usize,
    addr: &str,
    s: &mut Box<dyn Conn>,
    pos: Lsn,
) -> std::result::Result<(), ReplError> {
    let recovered_start = sh.local.recovered().start_lsn;
    let end = sh.local.end_lsn();
    let given_up = sh.links[i].locked().given_up;
    if pos >= recovered_start && pos <= end && !given_up {
        return Ok(());
    }
    let why = if given_up {
        format!("standby is at LSN {pos}, and the primary gave up its log (max_retained_bytes)")
    } else if pos < recovered_start {
        format!("standby is at LSN {pos}, the primary's log starts at {recovered_start}")
    } else {
        format!("standby is at LSN {pos}, past the primary's log end {end}")
    };
    if sh.backup.is_some() {
        // It takes a base backup when it next connects.
        let msg = format!("reseed: {why}");
        let _ = wire::write_frame(
            s,
            addr,
            sh.cfg.epoch,
            FrameType::Refused,
            &wire::refuse_payload(wire::RefuseCode::Diverged, &msg),
        );
    }
    Err(ReplError::Diverged { peer: addr.into(), detail: format!("{why}: it needs a base backup") })
}

/// Starts the thread that reads standby `i`'s acknowledgements from its own handle of the
/// connection; when it ends it sets `dead`, wakes the shipper and shuts the connection.
fn start_ack_reader(
    sh: &Arc<Shared>,
    i: usize,
    addr: &str,
    s: &dyn Conn,
    dead: &Arc<AtomicBool>,
) -> std::result::Result<Task<std::result::Result<(), ReplError>>, ReplError> {
    let rs = s.try_clone().map_err(|e| ReplError::io(addr, "clone", e))?;
    let (sh, dead, peer) = (sh.clone(), dead.clone(), addr.to_string());
    let clock = sh.clock.clone();
    clock
        .spawn(&format!("nvmedb-acks-{i}"), move || {
            // Buffered: a frame is one receive call, not three.
            let mut br = std::io::BufReader::with_capacity(4096, rs);
            let r = ack_reader(&sh, i, &peer, &mut br);
            dead.store(true, Ordering::Release);
            {
                let _g = sh.q.locked();
                sh.q_cv.notify_all();
            }
            let _ = br.get_ref().shutdown(Shutdown::Both);
            r
        })
        .map_err(|e| ReplError::io(addr, "start the acknowledgement reader", e))
}

/// What a shipper's sending loop keeps for one connection.
struct Outbound<'a> {
    sh: &'a Arc<Shared>,
    i: usize,
    addr: &'a str,
    out: Box<dyn Conn>,
    /// One buffer per connection: the frame header is filled in place (`wire::send_frame`), so
    /// a group of records is copied once, from the queue into the frame, and sent in one call.
    frame: Vec<u8>,
    /// The end of what was put in a frame so far.
    pos: Lsn,
    /// The apply limit last sent.
    sent_durable: Lsn,
    /// Since when nothing was left to ship (the durable position alone is sent only after a
    /// quiet spell: under load it rides on the next records frame instead).
    idle_since: Option<Duration>,
    /// Since when this shipper has been gathering a commit group.
    group_since: Option<Duration>,
}

/// What one look at the shipping queue found.
enum Take {
    /// This many records were put in the frame.
    Records(u32),
    /// Nothing to send now (waited, or sent the durable position alone): look again.
    Again,
}

const H: usize = wire::FRAME_HEADER_BYTES;

impl<'a> Outbound<'a> {
    fn new(sh: &'a Arc<Shared>, i: usize, addr: &'a str, out: Box<dyn Conn>, pos: Lsn) -> Self {
        Self {
            sh,
            i,
            addr,
            out,
            frame: Vec::with_capacity(64 << 10),
            pos,
            sent_durable: 0,
            idle_since: None,
            group_since: None,
        }
    }

    /// Ships until shutdown, the acknowledgement reader's end (`dead`) or an error.
    fn run(mut self, dead: &AtomicBool) -> std::result::Result<(), ReplError> {
        let sh = self.sh;
        loop {
            if sh.stop.load(Ordering::Acquire) || dead.load(Ordering::Acquire) {
                return Ok(());
            }
            self.frame.clear();
            self.frame.resize(H, 0);
            self.frame.extend_from_slice(&0u64.to_le_bytes());
            self.frame.extend_from_slice(&0u32.to_le_bytes());
            let q = sh.q.locked();
            let count = if self.pos < q.start {
                let qstart = q.start;
                drop(q);
                self.read_back(qstart)?
            } else {
                match self.take_from_queue(q)? {
                    Take::Records(n) => n,
                    Take::Again => continue,
                }
            };
            if count == 0 {
                continue;
            }
            self.idle_since = None;
            // The local flush of these records runs while they travel.
            kick_flusher(sh, self.pos);
            let durable = apply_limit(sh);
            self.sent_durable = durable;
            self.frame[H..H + 8].copy_from_slice(&durable.to_le_bytes());
            self.frame[H + 8..H + 12].copy_from_slice(&count.to_le_bytes());
            wire::send_frame(&mut self.out, self.addr, sh.cfg.epoch, FrameType::Records, &mut self.frame)?;
            sh.sent[self.i].store(self.pos, Ordering::Release);
        }
    }

    /// Behind the queue: reads records from `pos` up to the queue's start back from the local
    /// log into the frame. Returns how many it put there.
    fn read_back(&mut self, qstart: Lsn) -> std::result::Result<u32, ReplError> {
        let sh = self.sh;
        let diverged = |e: crate::error::Error| ReplError::Diverged {
            peer: self.addr.into(),
            detail: format!("reading the local log: {e}"),
        };
        let mut r = sh.local.reader(self.pos).map_err(diverged)?;
        let mut count = 0u32;
        while self.frame.len() < sh.cfg.max_frame_bytes {
            match r.next_record().map_err(diverged)? {
                Some(rec) if rec.lsn < qstart => {
                    if rec.end_lsn > self.pos {
                        encode_record(&mut self.frame, rec.lsn, rec.end_lsn, rec.kind, &rec.payload);
                        count += 1;
                        self.pos = rec.end_lsn;
                    }
                }
                _ => {
                    self.pos = self.pos.max(qstart);
                    break;
                }
            }
        }
        if count == 0 && self.pos < qstart {
            self.pos = qstart;
        }
        Ok(count)
    }

    /// Takes the next commit group from the queue into the frame, or waits: for records while
    /// idle (after a quiet spell it sends the durable position alone), or for the group to
    /// fill (see the module's invariants) unless the queue is big.
    fn take_from_queue(&mut self, q: MutexGuard<'_, Queue>) -> std::result::Result<Take, ReplError> {
        let sh = self.sh;
        let from = q.recs.partition_point(|r| r.lsn < self.pos);
        if from == q.recs.len() {
            // Idle. After a quiet spell, tell the standby how far our own log is durable (it
            // applies only that far); otherwise wait for a committer's wake-up
            // (`kick_shippers`) or the quiet spell's end.
            let quiet =
                self.idle_since.is_some_and(|t| sh.clock.now().saturating_sub(t) >= IDLE_DURABLE_AFTER);
            if quiet {
                drop(q);
                let d = apply_limit(sh);
                if d > self.sent_durable {
                    self.sent_durable = d;
                    self.frame[H..H + 8].copy_from_slice(&d.to_le_bytes());
                    wire::send_frame(
                        &mut self.out,
                        self.addr,
                        sh.cfg.epoch,
                        FrameType::Records,
                        &mut self.frame,
                    )?;
                }
                self.idle_since = None;
                return Ok(Take::Again);
            }
            self.idle_since.get_or_insert_with(|| sh.clock.now());
            // Commits publish what they were acknowledged up to (`combined`).
            let wait = if self.sent_durable < sh.published.load(Ordering::Acquire) {
                IDLE_DURABLE_AFTER
            } else {
                IDLE_WAIT
            };
            sh.q_waiters.fetch_add(1, Ordering::AcqRel);
            let r = sh.q_cv.wait_timeout(&sh.q, q, wait);
            sh.q_waiters.fetch_sub(1, Ordering::AcqRel);
            drop(r);
            return Ok(Take::Again);
        }
        let expected = sh.expected.load(Ordering::Acquire).max(1);
        let since = *self.group_since.get_or_insert_with(|| sh.clock.now());
        let waited = sh.clock.now().saturating_sub(since);
        if sh.pending[self.i].load(Ordering::Acquire) < expected
            && waited < sh.cfg.group_wait
            && q.recs.len() - from < MAX_GROUP_RECORDS
        {
            sh.q_waiters.fetch_add(1, Ordering::AcqRel);
            sh.group_waiters.fetch_add(1, Ordering::AcqRel);
            let r = sh.q_cv.wait_timeout(&sh.q, q, sh.cfg.group_wait - waited);
            sh.group_waiters.fetch_sub(1, Ordering::AcqRel);
            sh.q_waiters.fetch_sub(1, Ordering::AcqRel);
            drop(r);
            return Ok(Take::Again);
        }
        self.group_since = None;
        sh.pending[self.i].store(0, Ordering::Release);
        let mut count = 0u32;
        for r in q.recs.range(from..) {
            encode_record(&mut self.frame, r.lsn, r.end, r.kind, &r.payload);
            count += 1;
            self.pos = r.end;
            if self.frame.len() >= sh.cfg.max_frame_bytes {
                break;
            }
        }
        Ok(Take::Records(count))
    }
}

fn ack_reader(
    sh: &Shared,
    i: usize,
    addr: &str,
    s: &mut impl std::io::Read,
) -> std::result::Result<(), ReplError> {
    loop {
        let f = match wire::read_frame(s, addr)? {
            Some(f) => f,
            None => {
                return Err(ReplError::Disconnected {
                    peer: addr.into(),
                    detail: "standby closed the connection".into(),
                })
            }
        };
        if f.epoch > sh.cfg.epoch {
            return Err(ReplError::Fenced {
                peer: addr.into(),
                our_epoch: sh.cfg.epoch,
                their_epoch: f.epoch,
            });
        }
        match f.kind {
            FrameType::Ack if f.payload.len() >= 8 && f.payload.len() % 8 == 0 => {
                let pos = u64_at(&f.payload, 0);
                let now = sh.shadows[i].fetch_max(pos, Ordering::AcqRel).max(pos);
                // Chain mode: the positions of the standbys after this one, as they reported
                // them along the chain.
                for (j, c) in f.payload[8..].chunks(8).enumerate() {
                    if let Some(sc) = sh.shadows.get(i + 1 + j) {
                        sc.store(u64::from_le_bytes(c.try_into().expect("8 bytes")), Ordering::Release);
                        let mut l = sh.links[i + 1 + j].locked();
                        l.state = LinkState::Up;
                        l.detail = format!("through the chain via {addr}");
                    }
                }
                if i == 0 && sh.cfg.record_delays {
                    let t = sh.clock.now();
                    let mut smp = sh.samples.locked();
                    let mut d = sh.delays.locked();
                    while let Some(&(end, at)) = smp.front() {
                        if end > now {
                            break;
                        }
                        smp.pop_front();
                        if d.len() < 4_000_000 {
                            d.push(t.saturating_sub(at).as_nanos() as u64);
                        }
                    }
                }
                let mut ms = sh.ms.locked();
                restore_mode_if_caught_up(sh, &mut ms);
                wake_covered(sh, &mut ms);
            }
            FrameType::Refused => return Err(wire::refused_error(addr, &f, sh.cfg.epoch)),
            k => {
                return Err(ReplError::Protocol {
                    peer: addr.into(),
                    detail: format!("unexpected {k:?} frame"),
                })
            }
        }
    }
}

/// A shipper holding back more records than this for a commit group sends them at once.
const MAX_GROUP_RECORDS: usize = 4096;

/// An idle shipper sends the primary's durable position alone (so the standby applies the
/// last commits) after this long without records to ship.
const IDLE_DURABLE_AFTER: Duration = Duration::from_millis(1);
/// How long an idle shipper with nothing to tell waits before it looks at the queue again
/// (records appended without a commit waiting for them go out at the latest then).
const IDLE_WAIT: Duration = Duration::from_millis(5);

/// How far standbys may apply: what this primary has acknowledged (or could acknowledge now).
/// A standby never applies past it, so after a failover its pages hold nothing the new
/// primary lacks (in eager and quorum modes every acknowledged record is on the new primary).
fn apply_limit(sh: &Shared) -> Lsn {
    combined(sh, &sh.ms.locked())
}

/// Returns to the configured mode once the standbys satisfy it again for everything durable.
fn restore_mode_if_caught_up(sh: &Shared, ms: &mut ModeState) {
    if ms.degraded.is_none() || ms.fenced.is_some() {
        return;
    }
    let local = sh.local.durable_lsn();
    // Caught up: the configured combination covers everything locally durable (the durable
    // position may end in filler, which is never shipped: the last record's end is enough).
    let need = local.min(sh.last_end.load(Ordering::Acquire));
    if with_shadows(sh, |shadows| combine(sh.cfg.mode, local, shadows)) >= need {
        eprintln!("nvmedb repl: RESTORED {:?} mode: standbys caught up at LSN {local}", sh.cfg.mode);
        ms.events.push(format!("restored {:?} at LSN {local}", sh.cfg.mode));
        ms.mode = sh.cfg.mode;
        ms.degraded = None;
    }
}
