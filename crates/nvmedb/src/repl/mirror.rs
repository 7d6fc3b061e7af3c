//! Data-page mirroring (seed 000's HA configuration): every write and sync of the primary's
//! data files is also done, synchronously, on the standby.
//!
//! Owns: [`MirrorStorage`], a delegating [`Storage`] wrapper (the pattern of `io/hooked.rs`)
//! whose devices send each write as a `PageWrite` frame and each sync as a `PageSync` frame to
//! the standby and wait for its `PageAck`, over a small pool of authenticated connections.
//!
//! A batch of writes ([`Device::submit_batch`]) is sent as one burst of frames on one
//! connection, acknowledged frame by frame: one round trip for the batch.
//!
//! Invariants: a write, batch or sync returns `Ok` only when both the local device and the standby
//! have done it (the frame is sent before the local write starts, so the two overlap); if the
//! standby cannot be reached the operation fails with an I/O error naming the standby — the
//! engine then treats it like a failed disk write (never a silent local-only write). Reads are
//! local only.

use super::env::Env;
use super::net;
use super::wire::{self, FrameType, Role};
use crate::error::ReplError;
use crate::io::{Device, DeviceInfo, IoError, IoOpKind, IoRequest, IoResult, Storage};
use crate::util::sync::MutexExt;
use std::io::Write;
use std::io::{BufReader, BufWriter};
use std::sync::{Arc, Mutex};

/// Where data pages are mirrored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorConfig {
    /// The standby's address.
    pub addr: String,
    /// The shared secret.
    pub secret: Vec<u8>,
    /// The primary's epoch.
    pub epoch: u64,
}

/// How long a mirrored write or sync waits for the standby's acknowledgement.
pub const MIRROR_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

struct Conn {
    r: BufReader<Box<dyn net::Conn>>,
    w: BufWriter<Box<dyn net::Conn>>,
}

struct Pool {
    cfg: MirrorConfig,
    env: Env,
    idle: Mutex<Vec<Conn>>,
}

impl Pool {
    fn connect(&self) -> Result<Conn, ReplError> {
        let a = &self.cfg.addr;
        let mut s = self.env.net.connect(a, MIRROR_TIMEOUT)?;
        // A standby that stops answering turns a mirrored write into an I/O error, not a hang.
        s.set_read_timeout(Some(MIRROR_TIMEOUT)).map_err(|e| ReplError::io(a, "timeout", e))?;
        wire::client_handshake(&mut s, a, &self.cfg.secret, Role::Mirror, self.cfg.epoch, 0)?;
        let r = BufReader::new(s.try_clone().map_err(|e| ReplError::io(a, "clone", e))?);
        Ok(Conn { r, w: BufWriter::with_capacity(1 << 16, s) })
    }

    /// Sends one frame, runs `local` meanwhile, and waits for the acknowledgement.
    fn call(&self, kind: FrameType, payload: &[u8], local: impl FnOnce() -> IoResult<()>) -> IoResult<()> {
        self.call_many(&[(kind, payload)], local)
    }

    /// Sends `frames` in one go (the standby handles them in order on one connection), runs
    /// `local` meanwhile, and waits for one acknowledgement per frame: a batch of page writes
    /// costs one round trip, not one per page.
    fn call_many(&self, frames: &[(FrameType, &[u8])], local: impl FnOnce() -> IoResult<()>) -> IoResult<()> {
        let a = self.cfg.addr.clone();
        let bytes: usize = frames.iter().map(|(_, p)| p.len()).sum();
        let fail = |e: ReplError| {
            IoError::os(
                &format!("mirror {a}"),
                IoOpKind::Write,
                0,
                bytes,
                std::io::Error::other(e.to_string()),
            )
        };
        let conn = self.idle.locked().pop();
        let mut conn = match conn {
            Some(c) => c,
            None => self.connect().map_err(fail)?,
        };
        let mut out = Vec::with_capacity(bytes + frames.len() * 64);
        for (kind, payload) in frames {
            wire::encode_frame(&mut out, self.cfg.epoch, *kind, payload);
        }
        let sent =
            conn.w.write_all(&out).and_then(|()| conn.w.flush()).map_err(|e| ReplError::io(&a, "send", e));
        let lr = local();
        sent.map_err(fail)?;
        for _ in frames {
            let f = wire::expect_frame(&mut conn.r, &a).map_err(fail)?;
            match f.kind {
                FrameType::PageAck => {}
                FrameType::Refused => return Err(fail(wire::refused_error(&a, &f, self.cfg.epoch))),
                k => {
                    return Err(fail(ReplError::Protocol {
                        peer: a.clone(),
                        detail: format!("unexpected {k:?}"),
                    }));
                }
            }
        }
        self.idle.locked().push(conn);
        lr
    }
}

/// A [`Storage`] whose devices mirror writes and syncs to a standby.
pub struct MirrorStorage {
    inner: Arc<dyn Storage>,
    pool: Arc<Pool>,
}

impl MirrorStorage {
    /// Wraps `inner`; connections are made on first use.
    pub fn new(inner: Arc<dyn Storage>, cfg: MirrorConfig) -> Self {
        Self::new_in(inner, cfg, Env::system())
    }

    /// [`MirrorStorage::new`] whose connections are made through `env`.
    pub fn new_in(inner: Arc<dyn Storage>, cfg: MirrorConfig, env: Env) -> Self {
        Self { inner, pool: Arc::new(Pool { cfg, env, idle: Mutex::new(Vec::new()) }) }
    }
}

struct MirrorDevice {
    inner: Arc<dyn Device>,
    name: String,
    pool: Arc<Pool>,
}

impl MirrorDevice {
    fn header(&self) -> Vec<u8> {
        let mut p = (self.name.len() as u16).to_le_bytes().to_vec();
        p.extend_from_slice(self.name.as_bytes());
        p
    }

    /// A `PageWrite` frame's payload: the file name, the offset, the bytes.
    fn write_payload(&self, offset: u64, buf: &[u8]) -> Vec<u8> {
        let mut p = Vec::with_capacity(2 + self.name.len() + 8 + buf.len());
        p.extend_from_slice(&(self.name.len() as u16).to_le_bytes());
        p.extend_from_slice(self.name.as_bytes());
        p.extend_from_slice(&offset.to_le_bytes());
        p.extend_from_slice(buf);
        p
    }
}

impl Device for MirrorDevice {
    fn info(&self) -> DeviceInfo {
        self.inner.info()
    }
    fn alignment(&self) -> usize {
        self.inner.alignment()
    }
    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }
    fn ensure_capacity(&self, len: u64) -> IoResult<()> {
        self.inner.ensure_capacity(len)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> IoResult<()> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> IoResult<()> {
        self.pool
            .call(FrameType::PageWrite, &self.write_payload(offset, buf), || self.inner.write_at(offset, buf))
    }
    fn submit_batch(&self, reqs: &mut [IoRequest<'_>]) -> IoResult<()> {
        // Writes are mirrored as one pipelined burst while the local device does the batch;
        // reads are local only.
        let payloads: Vec<Vec<u8>> = reqs
            .iter()
            .filter_map(|r| match r {
                IoRequest::Write { offset, buf } => Some(self.write_payload(*offset, buf)),
                IoRequest::Read { .. } => None,
            })
            .collect();
        if payloads.is_empty() {
            return self.inner.submit_batch(reqs);
        }
        let frames: Vec<(FrameType, &[u8])> =
            payloads.iter().map(|p| (FrameType::PageWrite, &p[..])).collect();
        self.pool.call_many(&frames, || self.inner.submit_batch(reqs))
    }
    fn sync(&self) -> IoResult<()> {
        self.pool.call(FrameType::PageSync, &self.header(), || self.inner.sync())
    }
}

impl Storage for MirrorStorage {
    fn open(&self, name: &str, create: bool) -> IoResult<Arc<dyn Device>> {
        let inner = self.inner.open(name, create)?;
        Ok(Arc::new(MirrorDevice { inner, name: name.to_string(), pool: self.pool.clone() }))
    }
    fn exists(&self, name: &str) -> bool {
        self.inner.exists(name)
    }
    fn list(&self) -> IoResult<Vec<String>> {
        self.inner.list()
    }
    fn remove(&self, name: &str) -> IoResult<()> {
        self.inner.remove(name)
    }
    fn location(&self) -> String {
        format!("{} (mirrored to {})", self.inner.location(), self.pool.cfg.addr)
    }
    fn in_ram(&self) -> bool {
        self.inner.in_ram()
    }
}
