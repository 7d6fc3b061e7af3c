//! The network as the replication code sees it, behind one seam.
//!
//! Owns: the [`Transport`] trait (connect to an address, listen on one), the connection and
//! listener traits ([`Conn`], [`Listener`]), and their real implementation over TCP
//! ([`TcpTransport`]: Nagle's algorithm off, as every replication connection wants). The
//! deterministic simulator implements the same traits over an in-memory network it controls
//! (`crate::sim::net`); `tests/seam_conformance.rs` runs one suite against both.
//!
//! Invariants (of every implementation; they are TCP's):
//! - A connection is a reliable, ordered byte stream in each direction: bytes are delivered
//!   once, in the order written, or the connection breaks (a read then fails or returns end of
//!   stream, a write fails).
//! - A write never waits for the peer to read (it fails once the connection is broken); a read
//!   waits for bytes, the end of the stream, a broken connection, or its read timeout
//!   (`TimedOut`/`WouldBlock`).
//! - `shutdown(Read)` makes this side's blocked and later reads return end of stream;
//!   `shutdown(Both)` also makes the peer's reads end.

use crate::error::ReplError;
use std::io::{Read, Write};
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// One end of a connection (see the module documentation). Every clone made with
/// [`Conn::try_clone`] is the same end: reading on one and writing on another is the usual use.
pub trait Conn: Read + Write + Send + Sync {
    /// Another handle of this end.
    fn try_clone(&self) -> std::io::Result<Box<dyn Conn>>;
    /// Shuts reading, writing or both down, for every handle of this end.
    fn shutdown(&self, how: Shutdown) -> std::io::Result<()>;
    /// Reads give up after `timeout` (`None`: never).
    fn set_read_timeout(&self, timeout: Option<Duration>) -> std::io::Result<()>;
    /// Writes give up after `timeout` (`None`: never).
    fn set_write_timeout(&self, timeout: Option<Duration>) -> std::io::Result<()>;
    /// The peer's address, for messages (`?` when unknown).
    fn peer(&self) -> String;
    /// False once the connection is known to be closed (a dead entry of a connection list).
    fn is_connected(&self) -> bool;
}

/// A listening address (see the module documentation).
pub trait Listener: Send + Sync {
    /// Waits for the next connection. Fails once [`Listener::close`] was called.
    fn accept(&self) -> std::io::Result<Box<dyn Conn>>;
    /// The address peers connect to (with the port picked when listening on port 0).
    fn local_addr(&self) -> String;
    /// Stops listening: a blocked [`Listener::accept`] returns an error, and so does every later
    /// one.
    fn close(&self);
}

/// Connections and listeners (see the module documentation).
pub trait Transport: Send + Sync + 'static {
    /// Connects to `addr`, waiting at most `timeout`.
    fn connect(&self, addr: &str, timeout: Duration) -> Result<Box<dyn Conn>, ReplError>;
    /// Listens on `addr` (`host:0` picks a free port; see [`Listener::local_addr`]).
    fn listen(&self, addr: &str) -> std::io::Result<Box<dyn Listener>>;
}

/// The real network: TCP.
#[derive(Debug, Default, Clone, Copy)]
pub struct TcpTransport;

impl TcpTransport {
    /// TCP as the shared handle the replication code takes.
    pub fn shared() -> Arc<dyn Transport> {
        static SHARED: std::sync::OnceLock<Arc<dyn Transport>> = std::sync::OnceLock::new();
        SHARED.get_or_init(|| Arc::new(TcpTransport)).clone()
    }
}

struct TcpConn(std::net::TcpStream);

impl Read for TcpConn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for TcpConn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.0.write_all(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl Conn for TcpConn {
    fn try_clone(&self) -> std::io::Result<Box<dyn Conn>> {
        Ok(Box::new(TcpConn(self.0.try_clone()?)))
    }
    fn shutdown(&self, how: Shutdown) -> std::io::Result<()> {
        self.0.shutdown(how)
    }
    fn set_read_timeout(&self, timeout: Option<Duration>) -> std::io::Result<()> {
        self.0.set_read_timeout(timeout)
    }
    fn set_write_timeout(&self, timeout: Option<Duration>) -> std::io::Result<()> {
        self.0.set_write_timeout(timeout)
    }
    fn peer(&self) -> String {
        self.0.peer_addr().map(|a| a.to_string()).unwrap_or_else(|_| "?".into())
    }
    fn is_connected(&self) -> bool {
        self.0.peer_addr().is_ok()
    }
}

struct TcpListen {
    l: std::net::TcpListener,
    addr: String,
    closed: AtomicBool,
}

impl Listener for TcpListen {
    fn accept(&self) -> std::io::Result<Box<dyn Conn>> {
        let closed = || {
            std::io::Error::new(std::io::ErrorKind::NotConnected, format!("{} stopped listening", self.addr))
        };
        if self.closed.load(Ordering::Acquire) {
            return Err(closed());
        }
        let (s, _) = self.l.accept()?;
        if self.closed.load(Ordering::Acquire) {
            return Err(closed());
        }
        let _ = s.set_nodelay(true);
        Ok(Box::new(TcpConn(s)))
    }

    fn local_addr(&self) -> String {
        self.addr.clone()
    }

    fn close(&self) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            // Wake a blocked accept.
            if let Ok(a) = self.l.local_addr() {
                let _ = std::net::TcpStream::connect_timeout(&a, Duration::from_secs(1));
            }
        }
    }
}

impl Transport for TcpTransport {
    fn connect(&self, addr: &str, timeout: Duration) -> Result<Box<dyn Conn>, ReplError> {
        use std::net::ToSocketAddrs;
        let sa = addr
            .to_socket_addrs()
            .map_err(|e| ReplError::io(addr, "resolve", e))?
            .next()
            .ok_or_else(|| ReplError::Disconnected { peer: addr.into(), detail: "no address".into() })?;
        let s = std::net::TcpStream::connect_timeout(&sa, timeout)
            .map_err(|e| ReplError::io(addr, "connect", e))?;
        s.set_nodelay(true).map_err(|e| ReplError::io(addr, "nodelay", e))?;
        Ok(Box::new(TcpConn(s)))
    }

    fn listen(&self, addr: &str) -> std::io::Result<Box<dyn Listener>> {
        let l = std::net::TcpListener::bind(addr)?;
        let addr = l.local_addr()?.to_string();
        Ok(Box::new(TcpListen { l, addr, closed: AtomicBool::new(false) }))
    }
}

/// The conformance suite every [`Transport`] passes (TCP on loopback, the simulator's network):
/// `server` listens on `listen` (a `host:0` address may pick the port), `client` connects; both
/// environments' clocks run the helper threads. Run it on a thread of `client.clock` (for the
/// simulator: inside a task).
pub mod conformance {
    use super::*;
    use crate::repl::clock::Clock;

    /// One side of the suite: a clock (to start threads and wait) and a network.
    pub struct Env {
        /// The side's clock.
        pub clock: Arc<dyn Clock>,
        /// The side's network.
        pub net: Arc<dyn Transport>,
    }

    /// Runs every check; panics with the first failure.
    pub fn run(client: &Env, server: &Env, listen: &str) {
        let l: Arc<dyn Listener> = Arc::from(server.net.listen(listen).expect("listen"));
        let addr = l.local_addr();
        bytes_arrive_whole_and_in_order_both_ways(client, server, &l, &addr);
        reads_end_at_a_timeout_a_shutdown_or_a_close(client, server, &l, &addr);
        a_closed_listener_refuses_and_stops_accepting(client, server, l, &addr);
    }

    fn accept_one(server: &Env, l: &Arc<dyn Listener>) -> crate::repl::clock::Task<Box<dyn Conn>> {
        let l = l.clone();
        server.clock.spawn("conformance-accept", move || l.accept().expect("accept")).expect("spawn")
    }

    fn read_all(c: &mut dyn Conn, n: usize) -> Vec<u8> {
        let mut out = vec![0u8; n];
        c.read_exact(&mut out).expect("read");
        out
    }

    fn bytes_arrive_whole_and_in_order_both_ways(
        client: &Env,
        server: &Env,
        l: &Arc<dyn Listener>,
        addr: &str,
    ) {
        let acc = accept_one(server, l);
        let mut c = client.net.connect(addr, Duration::from_secs(5)).expect("connect");
        let s = acc.join().expect("accepted");
        // Many writes, one large one: the reader gets exactly the bytes, in order.
        let sender = {
            let mut w = s.try_clone().expect("clone");
            server
                .clock
                .spawn("conformance-send", move || {
                    for i in 0..200u32 {
                        w.write_all(&i.to_le_bytes()).expect("write");
                    }
                    let big: Vec<u8> = (0..(1 << 20)).map(|i| (i % 251) as u8).collect();
                    w.write_all(&big).expect("write");
                    w.flush().expect("flush");
                })
                .expect("spawn")
        };
        for i in 0..200u32 {
            assert_eq!(read_all(c.as_mut(), 4), i.to_le_bytes(), "chunk {i} out of order");
        }
        let big = read_all(c.as_mut(), 1 << 20);
        assert!(big.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8), "the large write changed");
        sender.join();
        // And the other way, on a clone of the client's end.
        let mut cw = c.try_clone().expect("clone");
        cw.write_all(b"pong").expect("write");
        let mut s = s;
        assert_eq!(read_all(s.as_mut(), 4), b"pong");
        assert!(!c.peer().is_empty());
        assert!(c.is_connected());
    }

    fn reads_end_at_a_timeout_a_shutdown_or_a_close(
        client: &Env,
        server: &Env,
        l: &Arc<dyn Listener>,
        addr: &str,
    ) {
        let acc = accept_one(server, l);
        let mut c = client.net.connect(addr, Duration::from_secs(5)).expect("connect");
        let mut s = acc.join().expect("accepted");
        // Nothing comes: the read times out, not much before its timeout.
        c.set_read_timeout(Some(Duration::from_millis(50))).expect("timeout");
        let t0 = client.clock.now();
        let e = c.read(&mut [0u8; 8]).expect_err("nothing was sent");
        assert!(matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut), "{e}");
        assert!(client.clock.now() >= t0 + Duration::from_millis(40), "timed out early");
        c.set_read_timeout(None).expect("timeout");
        // The peer shuts its writing down: what it wrote arrives, then the end of the stream.
        s.write_all(b"last").expect("write");
        s.shutdown(Shutdown::Write).expect("shutdown");
        assert_eq!(read_all(c.as_mut(), 4), b"last");
        assert_eq!(c.read(&mut [0u8; 8]).expect("end of stream"), 0);
        // A blocked read ends when this side shuts its reading down.
        let reader = {
            let mut r = s.try_clone().expect("clone");
            server
                .clock
                .spawn("conformance-read", move || r.read(&mut [0u8; 8]).map_err(|e| e.kind()))
                .expect("spawn")
        };
        server.clock.sleep(Duration::from_millis(20));
        s.shutdown(Shutdown::Read).expect("shutdown");
        assert_eq!(reader.join().expect("joined"), Ok(0));
        // Closing every handle of one end ends the other's stream.
        let acc = accept_one(server, l);
        let mut c2 = client.net.connect(addr, Duration::from_secs(5)).expect("connect");
        let s2 = acc.join().expect("accepted");
        drop(s2);
        assert_eq!(c2.read(&mut [0u8; 8]).unwrap_or(0), 0);
    }

    fn a_closed_listener_refuses_and_stops_accepting(
        client: &Env,
        server: &Env,
        l: Arc<dyn Listener>,
        addr: &str,
    ) {
        let l2 = l.clone();
        let blocked = server.clock.spawn("conformance-accept", move || l2.accept().is_err()).expect("spawn");
        server.clock.sleep(Duration::from_millis(20));
        l.close();
        assert_eq!(blocked.join(), Some(true), "a blocked accept ends when the listener closes");
        assert!(l.accept().is_err());
        drop(l);
        assert!(client.net.connect(addr, Duration::from_millis(500)).is_err(), "nobody listens at {addr}");
    }
}
