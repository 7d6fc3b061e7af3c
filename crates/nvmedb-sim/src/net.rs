//! The simulated network: nvmedb's [`Transport`] in memory, under the nemesis's control.
//!
//! Owns: every listener and connection of a simulation, the links between nodes (cut or up,
//! extra delay), and per-node liveness. Each node incarnation gets a [`NodeNet`] (its
//! `Transport`); a connection's two ends belong to the incarnations that made them.
//!
//! The model is TCP's (see `nvmedb::repl::net`): each direction of a connection is an ordered
//! stream of the byte chunks written into it, each delivered at its send time plus a seeded
//! latency, never before the chunk before it (so chunks of different connections are
//! reordered, those of one connection never are). A cut link holds what is sent across it
//! until it heals (TCP retransmits), a connection attempt across a cut link (or to a host that
//! is down) sends its SYN again after 1, 2, 4, … s and goes through at the first one after the
//! link healed, or times out; one to an address nobody listens on is refused after a round
//! trip. A reset (the nemesis's "drop",
//! or the crash of a node) breaks a connection: both ends' reads and writes fail from one
//! latency later. A node that crashes loses its listeners and connections; the peers see their
//! connections reset (as when the node's kernel, or its restarted kernel, answers with a reset:
//! a half-open connection that lingers until TCP gives up is not modelled).

use crate::sched::{Group, Sim};
use nvmedb::error::ReplError;
use nvmedb::repl::clock::Sched;
use nvmedb::repl::net::{Conn, Listener, Transport};
use nvmedb::util::Rng;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::{Read, Write};
use std::net::Shutdown;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// One direction of a connection: what end `to` will read.
#[derive(Default)]
struct Dir {
    /// (delivery time, bytes, bytes already read).
    chunks: VecDeque<(Duration, Vec<u8>, usize)>,
    /// The writer shut down or closed: end of stream after the chunks, not before this time.
    fin_at: Option<Duration>,
    /// The delivery time of the last chunk (the next is not delivered before it).
    last_at: Duration,
    /// The task parked reading this direction.
    reader: Option<u64>,
}

struct End {
    node: String,
    group: Group,
    /// Live handles of this end.
    handles: usize,
    read_shut: bool,
    write_shut: bool,
    read_timeout: Option<Duration>,
}

struct ConnState {
    ends: [End; 2],
    /// `dirs[i]`: the bytes end `i` reads (written by end `1 - i`).
    dirs: [Dir; 2],
    /// From this time on both ends fail.
    reset_at: Option<Duration>,
}

struct Lst {
    node: String,
    group: Group,
    /// Connections waiting to be accepted: (arrival, connection).
    backlog: VecDeque<(Duration, usize)>,
    waiter: Option<u64>,
    closed: bool,
}

struct NetState {
    rng: Rng,
    listeners: BTreeMap<String, Lst>,
    conns: Vec<ConnState>,
    /// Directed links that are cut: (from, to).
    cut: BTreeSet<(String, String)>,
    /// Extra delay on a directed link.
    slow: BTreeMap<(String, String), Duration>,
    /// Live incarnation of each node.
    alive: BTreeMap<String, Group>,
    /// Base one-way latency range.
    latency: (Duration, Duration),
    /// Chunks and connections so far (for the schedule's summary).
    sent: u64,
    resets: u64,
}

/// The network of one simulation (see the module documentation).
#[derive(Clone)]
pub struct SimNet {
    sim: Sim,
    st: Arc<Mutex<NetState>>,
}

impl SimNet {
    /// A network whose latencies follow `seed`, one-way latency in `latency`.
    pub fn new(sim: &Sim, seed: u64, latency: (Duration, Duration)) -> Self {
        Self {
            sim: sim.clone(),
            st: Arc::new(Mutex::new(NetState {
                rng: Rng::new(seed ^ 0x0e70_0e70_0e70_0e70),
                listeners: BTreeMap::new(),
                conns: Vec::new(),
                cut: BTreeSet::new(),
                slow: BTreeMap::new(),
                alive: BTreeMap::new(),
                latency,
                sent: 0,
                resets: 0,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, NetState> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The transport of node `node`'s incarnation `group` (which is the node's live one from now
    /// on).
    pub fn node(&self, node: &str, group: Group) -> Arc<NodeNet> {
        self.lock().alive.insert(node.to_string(), group);
        Arc::new(NodeNet { net: self.clone(), node: node.to_string(), group })
    }

    /// Node `node`'s incarnation died: its listeners close, its connections reset.
    pub fn kill_node(&self, node: &str) {
        let now = self.sim.now();
        let mut st = self.lock();
        st.alive.remove(node);
        let mut wake: Vec<(u64, Duration)> = Vec::new();
        for l in st.listeners.values_mut().filter(|l| l.node == node) {
            l.closed = true;
            wake.extend(l.waiter.take().map(|w| (w, now)));
        }
        st.listeners.retain(|_, l| l.node != node);
        let lat = st.latency.0;
        for c in st.conns.iter_mut() {
            if c.reset_at.is_none() && c.ends.iter().any(|e| e.node == node) {
                c.reset_at = Some(now + lat);
                for d in c.dirs.iter_mut() {
                    wake.extend(d.reader.take().map(|r| (r, now + lat)));
                }
            }
        }
        drop(st);
        for (r, at) in wake {
            self.sim.unpark_at(r, at);
        }
    }

    /// Cuts (or heals) the directed link `from` → `to`.
    pub fn set_cut(&self, from: &str, to: &str, cut: bool) {
        let mut st = self.lock();
        let k = (from.to_string(), to.to_string());
        if cut {
            st.cut.insert(k);
            return;
        }
        if !st.cut.remove(&k) {
            return;
        }
        // Healed: what waited on the link is delivered now (TCP retransmits).
        let now = self.sim.now();
        let mut wake = Vec::new();
        for c in st.conns.iter_mut() {
            for i in 0..2 {
                if c.ends[1 - i].node == from && c.ends[i].node == to {
                    if let Some(r) = c.dirs[i].reader.take() {
                        wake.push(r);
                    }
                }
            }
        }
        drop(st);
        for r in wake {
            self.sim.unpark_at(r, now);
        }
    }

    /// True when the directed link `from` → `to` is cut.
    pub fn is_cut(&self, from: &str, to: &str) -> bool {
        self.lock().cut.contains(&(from.to_string(), to.to_string()))
    }

    /// Heals every link.
    pub fn heal_all(&self) {
        let cuts: Vec<(String, String)> = self.lock().cut.iter().cloned().collect();
        for (a, b) in cuts {
            self.set_cut(&a, &b, false);
        }
        self.lock().slow.clear();
    }

    /// Adds `extra` delay to the directed link `from` → `to` (zero removes it).
    pub fn set_slow(&self, from: &str, to: &str, extra: Duration) {
        let mut st = self.lock();
        let k = (from.to_string(), to.to_string());
        if extra.is_zero() {
            st.slow.remove(&k);
        } else {
            st.slow.insert(k, extra);
        }
    }

    /// Resets one live connection of `node` (the `pick`-th, modulo their number); returns
    /// whether there was one.
    pub fn reset_one(&self, node: &str, pick: u64) -> bool {
        let now = self.sim.now();
        let mut st = self.lock();
        let live: Vec<usize> = st
            .conns
            .iter()
            .enumerate()
            .filter(|(_, c)| c.reset_at.is_none() && c.ends.iter().any(|e| e.node == node && e.handles > 0))
            .map(|(i, _)| i)
            .collect();
        if live.is_empty() {
            return false;
        }
        let i = live[(pick % live.len() as u64) as usize];
        let lat = st.latency.0;
        st.resets += 1;
        let c = &mut st.conns[i];
        c.reset_at = Some(now + lat);
        let wake: Vec<u64> = c.dirs.iter_mut().filter_map(|d| d.reader.take()).collect();
        drop(st);
        for r in wake {
            self.sim.unpark_at(r, now + lat);
        }
        true
    }

    /// (chunks sent, connections made, connections reset) so far.
    pub fn counts(&self) -> (u64, usize, u64) {
        let st = self.lock();
        (st.sent, st.conns.len(), st.resets)
    }
}

/// One node incarnation's [`Transport`] (see [`SimNet::node`]).
pub struct NodeNet {
    net: SimNet,
    node: String,
    group: Group,
}

impl NodeNet {
    fn dead(&self, st: &NetState) -> bool {
        st.alive.get(&self.node) != Some(&self.group)
    }
}

fn latency(st: &mut NetState, from: &str, to: &str) -> Duration {
    let (lo, hi) = st.latency;
    let span = hi.saturating_sub(lo).as_nanos() as u64;
    let mut d = lo + Duration::from_nanos(st.rng.below(span.max(1)));
    if let Some(x) = st.slow.get(&(from.to_string(), to.to_string())) {
        d += *x;
    }
    d
}

fn io_err(kind: std::io::ErrorKind, what: &str) -> std::io::Error {
    std::io::Error::new(kind, what.to_string())
}

/// A failed connection attempt, as the TCP transport reports it.
fn refused(addr: &str, e: std::io::Error) -> ReplError {
    ReplError::Disconnected { peer: addr.into(), detail: format!("connect: {e}") }
}

impl Transport for NodeNet {
    fn connect(&self, addr: &str, timeout: Duration) -> Result<Box<dyn Conn>, ReplError> {
        let sim = &self.net.sim;
        let deadline = sim.now() + timeout;
        let host = addr.split(':').next().unwrap_or(addr).to_string();
        // TCP's SYN retransmissions: the first after 1 s, then after 2, 4, … s more.
        let mut rto = Duration::from_secs(1);
        let mut syn_at = sim.now();
        let (mut st, target, to) = loop {
            let st = self.net.lock();
            if self.dead(&st) {
                return Err(refused(addr, io_err(std::io::ErrorKind::NotConnected, "this node is down")));
            }
            let target = st.listeners.get(addr).map(|l| (l.node.clone(), l.group));
            let to = target.as_ref().map_or(host.clone(), |t| t.0.clone());
            let cut = st.cut.contains(&(self.node.clone(), to.clone()))
                || st.cut.contains(&(to.clone(), self.node.clone()));
            if !cut && st.alive.contains_key(&to) {
                break (st, target, to);
            }
            // The SYN is lost (or nobody answers): it is sent again, until the attempt times
            // out (an attempt across a link that heals meanwhile goes through).
            drop(st);
            syn_at += rto;
            rto *= 2;
            let until = syn_at.min(deadline);
            while sim.now() < until {
                sim.park(Some(until - sim.now()));
            }
            if sim.now() >= deadline {
                return Err(refused(addr, io_err(std::io::ErrorKind::TimedOut, "connection timed out")));
            }
        };
        let now = sim.now();
        let rtt = latency(&mut st, &self.node, &to) + latency(&mut st, &to, &self.node);
        let Some((node, group)) = target else {
            drop(st);
            sim.park(Some(rtt));
            return Err(refused(addr, io_err(std::io::ErrorKind::ConnectionRefused, "connection refused")));
        };
        let id = st.conns.len();
        let end = |node: &str, group| End {
            node: node.to_string(),
            group,
            handles: 1,
            read_shut: false,
            write_shut: false,
            read_timeout: None,
        };
        st.conns.push(ConnState {
            ends: [end(&self.node, self.group), end(&node, group)],
            dirs: [Dir::default(), Dir::default()],
            reset_at: None,
        });
        let arrive = now + rtt / 2;
        let l = st.listeners.get_mut(addr).expect("listener found above");
        l.backlog.push_back((arrive, id));
        let waiter = l.waiter.take();
        drop(st);
        if let Some(w) = waiter {
            sim.unpark_at(w, arrive);
        }
        // The handshake's round trip.
        let until = now + rtt;
        while sim.now() < until {
            sim.park(Some(until - sim.now()));
        }
        Ok(Box::new(SimConn { net: self.net.clone(), conn: id, end: 0 }))
    }

    fn listen(&self, addr: &str) -> std::io::Result<Box<dyn Listener>> {
        let mut st = self.net.lock();
        if self.dead(&st) {
            return Err(io_err(std::io::ErrorKind::NotConnected, "this node is down"));
        }
        if st.listeners.contains_key(addr) {
            return Err(io_err(std::io::ErrorKind::AddrInUse, "address in use"));
        }
        st.listeners.insert(
            addr.to_string(),
            Lst {
                node: self.node.clone(),
                group: self.group,
                backlog: VecDeque::new(),
                waiter: None,
                closed: false,
            },
        );
        Ok(Box::new(SimListener { net: self.net.clone(), addr: addr.to_string() }))
    }
}

struct SimListener {
    net: SimNet,
    addr: String,
}

impl Listener for SimListener {
    fn accept(&self) -> std::io::Result<Box<dyn Conn>> {
        let sim = &self.net.sim;
        loop {
            let now = sim.now();
            let mut st = self.net.lock();
            let Some(l) = st.listeners.get_mut(&self.addr) else {
                return Err(io_err(std::io::ErrorKind::NotConnected, "stopped listening"));
            };
            if l.closed {
                return Err(io_err(std::io::ErrorKind::NotConnected, "stopped listening"));
            }
            let next = l.backlog.front().map(|b| b.0);
            match next {
                Some(at) if at <= now => {
                    let (_, id) = l.backlog.pop_front().expect("front");
                    return Ok(Box::new(SimConn { net: self.net.clone(), conn: id, end: 1 }));
                }
                _ => {
                    l.waiter = Some(sim.current());
                    drop(st);
                    sim.park(next.map(|at| at - now));
                }
            }
        }
    }

    fn local_addr(&self) -> String {
        self.addr.clone()
    }

    fn close(&self) {
        let mut st = self.net.lock();
        let mut wake = None;
        let mut pending = Vec::new();
        if let Some(l) = st.listeners.get_mut(&self.addr) {
            l.closed = true;
            wake = l.waiter.take();
            pending = l.backlog.drain(..).map(|b| b.1).collect();
        }
        st.listeners.remove(&self.addr);
        let now = self.net.sim.now();
        let lat = st.latency.0;
        for id in pending {
            st.conns[id].ends[1].handles = 0;
            st.conns[id].reset_at = Some(now + lat);
        }
        drop(st);
        if let Some(w) = wake {
            self.net.sim.unpark(w);
        }
    }
}

impl Drop for SimListener {
    fn drop(&mut self) {
        self.close();
    }
}

/// One handle of one end of a simulated connection.
struct SimConn {
    net: SimNet,
    conn: usize,
    end: usize,
}

impl SimConn {
    fn broken(&self, st: &NetState, now: Duration) -> Option<std::io::Error> {
        let c = &st.conns[self.conn];
        let me = &c.ends[self.end];
        if st.alive.get(&me.node) != Some(&me.group) {
            return Some(io_err(std::io::ErrorKind::ConnectionAborted, "this node is down"));
        }
        if c.reset_at.is_some_and(|r| r <= now) {
            return Some(io_err(std::io::ErrorKind::ConnectionReset, "connection reset by peer"));
        }
        None
    }
}

impl Read for SimConn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let sim = self.net.sim.clone();
        let mut deadline: Option<Duration> = None;
        loop {
            let now = sim.now();
            let mut st = self.net.lock();
            if st.conns[self.conn].ends[self.end].read_shut {
                return Ok(0);
            }
            if let Some(e) = self.broken(&st, now) {
                return Err(e);
            }
            let peer_node = st.conns[self.conn].ends[1 - self.end].node.clone();
            let my_node = st.conns[self.conn].ends[self.end].node.clone();
            let link_up = !st.cut.contains(&(peer_node, my_node));
            if deadline.is_none() {
                deadline = st.conns[self.conn].ends[self.end].read_timeout.map(|t| now + t);
            }
            let c = &mut st.conns[self.conn];
            let reset_at = c.reset_at;
            let d = &mut c.dirs[self.end];
            if let Some((at, bytes, used)) = d.chunks.front_mut() {
                if *at <= now && link_up {
                    let n = (bytes.len() - *used).min(buf.len());
                    buf[..n].copy_from_slice(&bytes[*used..*used + n]);
                    *used += n;
                    if *used == bytes.len() {
                        d.chunks.pop_front();
                    }
                    return Ok(n);
                }
            } else if d.fin_at.is_some_and(|f| f <= now) {
                return Ok(0);
            }
            if deadline.is_some_and(|dl| dl <= now) {
                return Err(io_err(std::io::ErrorKind::WouldBlock, "read timed out"));
            }
            // Wait for the next chunk (if the link is up), the end of stream, a reset or the
            // read timeout; a write, a heal or a reset wakes us too.
            let mut wake: Option<Duration> = deadline;
            let mut at_most = |t: Option<Duration>| {
                if let Some(t) = t {
                    wake = Some(wake.map_or(t, |w| w.min(t)));
                }
            };
            if link_up {
                at_most(d.chunks.front().map(|c| c.0));
            }
            if d.chunks.is_empty() {
                at_most(d.fin_at);
            }
            at_most(reset_at);
            d.reader = Some(sim.current());
            drop(st);
            sim.park(wake.map(|w| w.saturating_sub(now)));
            let mut st = self.net.lock();
            let d = &mut st.conns[self.conn].dirs[self.end];
            if d.reader == Some(sim.current()) {
                d.reader = None;
            }
        }
    }
}

impl Write for SimConn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let now = self.net.sim.now();
        let mut st = self.net.lock();
        if let Some(e) = self.broken(&st, now) {
            return Err(e);
        }
        let (me, peer) = (self.end, 1 - self.end);
        if st.conns[self.conn].ends[me].write_shut {
            return Err(io_err(std::io::ErrorKind::BrokenPipe, "write after shutdown"));
        }
        if st.conns[self.conn].ends[peer].handles == 0 {
            return Err(io_err(std::io::ErrorKind::BrokenPipe, "the peer closed the connection"));
        }
        let (from, to) =
            (st.conns[self.conn].ends[me].node.clone(), st.conns[self.conn].ends[peer].node.clone());
        let lat = latency(&mut st, &from, &to);
        st.sent += 1;
        let d = &mut st.conns[self.conn].dirs[peer];
        let at = (now + lat).max(d.last_at);
        d.last_at = at;
        d.chunks.push_back((at, buf.to_vec(), 0));
        let reader = d.reader;
        drop(st);
        if let Some(r) = reader {
            self.net.sim.unpark_at(r, at);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl SimConn {
    /// End of stream for the peer after what was written (FIN), from one latency on.
    fn send_fin(&self, st: &mut NetState, now: Duration) {
        let peer = 1 - self.end;
        let (from, to) =
            (st.conns[self.conn].ends[self.end].node.clone(), st.conns[self.conn].ends[peer].node.clone());
        let lat = latency(st, &from, &to);
        let d = &mut st.conns[self.conn].dirs[peer];
        if d.fin_at.is_none() {
            let at = (now + lat).max(d.last_at);
            d.fin_at = Some(at);
            if let Some(r) = d.reader {
                self.net.sim.unpark_at(r, at);
            }
        }
    }
}

impl Conn for SimConn {
    fn try_clone(&self) -> std::io::Result<Box<dyn Conn>> {
        self.net.lock().conns[self.conn].ends[self.end].handles += 1;
        Ok(Box::new(SimConn { net: self.net.clone(), conn: self.conn, end: self.end }))
    }

    fn shutdown(&self, how: Shutdown) -> std::io::Result<()> {
        let now = self.net.sim.now();
        let mut st = self.net.lock();
        if matches!(how, Shutdown::Read | Shutdown::Both) {
            let e = &mut st.conns[self.conn].ends[self.end];
            e.read_shut = true;
            if let Some(r) = st.conns[self.conn].dirs[self.end].reader.take() {
                self.net.sim.unpark(r);
            }
        }
        if matches!(how, Shutdown::Write | Shutdown::Both) {
            st.conns[self.conn].ends[self.end].write_shut = true;
            self.send_fin(&mut st, now);
        }
        Ok(())
    }

    fn set_read_timeout(&self, timeout: Option<Duration>) -> std::io::Result<()> {
        self.net.lock().conns[self.conn].ends[self.end].read_timeout = timeout;
        Ok(())
    }

    fn set_write_timeout(&self, _timeout: Option<Duration>) -> std::io::Result<()> {
        // Writes never wait (see the module documentation).
        Ok(())
    }

    fn peer(&self) -> String {
        let st = self.net.lock();
        st.conns[self.conn].ends[1 - self.end].node.clone()
    }

    fn is_connected(&self) -> bool {
        let now = self.net.sim.now();
        let st = self.net.lock();
        self.broken(&st, now).is_none() && st.conns[self.conn].ends[1 - self.end].handles > 0
    }
}

impl Drop for SimConn {
    fn drop(&mut self) {
        let now = self.net.sim.now();
        let mut st = self.net.lock();
        let e = &mut st.conns[self.conn].ends[self.end];
        e.handles = e.handles.saturating_sub(1);
        if e.handles == 0 {
            self.send_fin(&mut st, now);
            // Nobody reads this end any more.
            st.conns[self.conn].dirs[self.end].chunks.clear();
        }
    }
}
