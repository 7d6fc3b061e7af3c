//! The engine's record log over the fast log: [`XRecordLog`] implements
//! [`RecordLog`](crate::wal::RecordLog) on an [`XLog`], and [`XLogOpener`] lets
//! [`Database`](crate::Database) open it.
//!
//! Owns: the record framing in the XLog stream, the log's metadata device (`xlog.meta`), the
//! reader, and the retention of records the last checkpoint still needs.
//!
//! - **Framing**: each record is `crc32c u32 | payload_len u32 | lsn u64 | kind u8 | 3 zero
//!   bytes` ([`XRECORD_HEADER`] bytes) followed by the payload; the CRC covers the header after
//!   itself and the payload. The LSN of a record is `base + stream position` of its first byte
//!   (`base` is fixed when the log is created, so a new log for an existing database starts
//!   above every page LSN). A record that fits one XLog frame is written with `x_alloc`/`x_free`
//!   (all or nothing after a crash); a larger one with `x_pwrite_at` (several frames, so a crash
//!   can leave a prefix of it).
//! - **Commit** waits on the credit counter (`wait_durable` = `XWriter::wait_for`), never on
//!   fdatasync; what that survives is [`XLog::durability`] (tmpfs ring: kill -9, not power loss).
//! - **Metadata** (`xlog.meta`, two 4 KiB slots written alternately with a sequence number and a
//!   CRC, the newer valid one wins): `base`, the retained stream position (the last
//!   `truncate_before`, a record start) and the *skips*: stream ranges `[a, b)` holding the torn
//!   prefix of a record a crash interrupted. Open finds a torn tail (the stream ends inside a
//!   record), records it as a skip durably, and only then accepts appends, so new records never
//!   follow garbage the reader would take for a record.
//! - **Reader**: from a record start up to the stream end at that moment, in order, jumping over
//!   skips. A record extending past the end (torn tail) ends the log; a record inside the end
//!   whose CRC, LSN or length is wrong is [`Error::Corruption`] naming the conventional ring file
//!   and the byte offset of the record in it.
//! - **Retention**: `truncate_before(lsn)` persists the new retained position in the metadata and
//!   then raises [`XLog::set_retain_from`]; the destager never overwrites conventional pages
//!   holding bytes at or after it (it holds, visibly in the status register, and writers fail
//!   after `retention_timeout` instead of hanging). [`RecordLog::wants_checkpoint`] turns true
//!   when half the conventional ring is retained, and the database checkpoints at the next
//!   transaction start, so in normal operation the hold never happens.
//!
//! Invariants: `durable_lsn()` never exceeds `base + credit counter` and never goes backwards;
//! the metadata's retained position never exceeds the catalog's checkpoint undo LSN (it is
//! written after it) and is always a record start; skips are disjoint, sorted and above the
//! retained position when written.

use super::{XLog, XLogConfig, XWriter};
use crate::error::{Error, Result};
use crate::io::{AlignedBuf, Device, Storage};
use crate::util::bytes::{u32_at, u64_at};
use crate::util::sync::MutexExt;
use crate::wal::{LogOpener, LogRecord, Lsn, RecordLog, RecordReader, RecoveredLog, WalStats, KIND_USER_MIN};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Bytes of a record header in the XLog stream.
pub const XRECORD_HEADER: usize = 20;
/// Name of the metadata device in the fast log's storage.
pub const XLOG_META: &str = "xlog.meta";
/// Name of the conventional log ring device in the fast log's storage.
pub const XLOG_CONV: &str = "xlog.conv";

const META_MAGIC: &[u8; 8] = b"NVXLMETA";
const META_SLOT: usize = 4096;
const META_MAX_SKIPS: usize = 200;
/// Largest record payload (the header's length field is a u32; keep well below).
const MAX_PAYLOAD: usize = 64 << 20;

/// What the metadata device holds.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Meta {
    seq: u64,
    log_id: u64,
    base: u64,
    retain: u64,
    skips: Vec<(u64, u64)>,
}

impl Meta {
    fn encode(&self) -> AlignedBuf {
        assert!(self.skips.len() <= META_MAX_SKIPS, "too many skips in the xlog metadata");
        let mut b = AlignedBuf::new(META_SLOT);
        b.fill(0);
        b[..8].copy_from_slice(META_MAGIC);
        let mut o = 12;
        for v in [self.seq, self.log_id, self.base, self.retain, self.skips.len() as u64] {
            b[o..o + 8].copy_from_slice(&v.to_le_bytes());
            o += 8;
        }
        for &(a, z) in &self.skips {
            b[o..o + 8].copy_from_slice(&a.to_le_bytes());
            b[o + 8..o + 16].copy_from_slice(&z.to_le_bytes());
            o += 16;
        }
        let crc = crate::util::crc32c(&b[12..o]);
        b[8..12].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<Self> {
        if &b[..8] != META_MAGIC {
            return None;
        }
        let u = |o: usize| u64_at(b, o);
        let n = u(44) as usize;
        if n > META_MAX_SKIPS {
            return None;
        }
        let end = 52 + 16 * n;
        let crc = u32_at(b, 8);
        if crate::util::crc32c(&b[12..end]) != crc {
            return None;
        }
        let skips = (0..n).map(|i| (u(52 + 16 * i), u(60 + 16 * i))).collect();
        Some(Self { seq: u(12), log_id: u(20), base: u(28), retain: u(36), skips })
    }
}

/// Reads the metadata: `Ok(None)` when never written (all zero), corruption when written but
/// neither slot is valid.
fn read_meta(dev: &dyn Device) -> Result<Option<Meta>> {
    dev.ensure_capacity(2 * META_SLOT as u64)?;
    let mut b = AlignedBuf::new(2 * META_SLOT);
    dev.read_at(0, &mut b)?;
    let best =
        [0, META_SLOT].iter().filter_map(|&o| Meta::decode(&b[o..o + META_SLOT])).max_by_key(|m| m.seq);
    if best.is_none() && b.iter().any(|&x| x != 0) {
        return Err(Error::Corruption {
            file: dev.info().name,
            offset: 0,
            detail: "neither xlog metadata slot is valid but the device is not empty".into(),
        });
    }
    Ok(best)
}

fn write_meta(dev: &dyn Device, m: &Meta) -> Result<()> {
    let slot = (m.seq % 2) as usize * META_SLOT;
    dev.write_at(slot as u64, &m.encode())?;
    dev.sync()?;
    Ok(())
}

fn encode_header(kind: u8, lsn: Lsn, payload: &[u8], out: &mut [u8]) {
    assert_eq!(out.len(), XRECORD_HEADER + payload.len(), "record buffer of the wrong size");
    out[4..8].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    out[8..16].copy_from_slice(&lsn.to_le_bytes());
    out[16] = kind;
    out[17..20].fill(0);
    out[XRECORD_HEADER..].copy_from_slice(payload);
    let crc = crate::util::crc32c(&out[4..]);
    out[..4].copy_from_slice(&crc.to_le_bytes());
}

/// The record log over a fast log (see the module documentation).
pub struct XRecordLog {
    log: Arc<XLog>,
    writer: XWriter,
    base: u64,
    meta_dev: Arc<dyn Device>,
    meta: Mutex<Meta>,
    conv_name: String,
    recovered: RecoveredLog,
    /// `conv_next_seq` when the retained position last moved (for `wants_checkpoint`).
    truncated_at_seq: AtomicU64,
    /// Set when a multi-frame record failed part-way (its prefix is in the stream): appending
    /// after it would put records behind garbage, so the log refuses further appends.
    poisoned: std::sync::atomic::AtomicBool,
    records: AtomicU64,
    commits: AtomicU64,
    bytes: AtomicU64,
}

impl std::fmt::Debug for XRecordLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "XRecordLog {{ base: {}, log: {:?} }}", self.base, self.log)
    }
}

impl XRecordLog {
    /// Opens (or creates, starting at LSN `initial_lsn`) the record log whose metadata and
    /// conventional ring live in `storage` and whose ring is `cfg.ring_path`. Runs the XLog crash
    /// protocol, then finds the end of the last complete record.
    pub fn open(storage: Arc<dyn Storage>, mut cfg: XLogConfig, initial_lsn: Lsn) -> Result<Self> {
        let meta_dev = storage.open(XLOG_META, true)?;
        let existing = read_meta(meta_dev.as_ref())?;
        let created = existing.is_none();
        let meta = match existing {
            Some(m) => {
                if !cfg.ring_path.exists() {
                    return Err(Error::NotFound(format!(
                        "xlog ring {} is gone but {} says the log exists: the records in the ring (not yet \
                         destaged) are lost — a tmpfs ring does not survive a reboot or power loss. Move the \
                         database's log away to start a new one, or restore the ring file",
                        cfg.ring_path.display(),
                        meta_dev.info().name
                    )));
                }
                m
            }
            None => {
                // A new log: whatever an earlier, never-completed creation left is not a log.
                if cfg.ring_path.exists() {
                    std::fs::remove_file(&cfg.ring_path).map_err(|e| {
                        Error::InvalidArgument(format!(
                            "cannot remove stale xlog ring {}: {e}",
                            cfg.ring_path.display()
                        ))
                    })?;
                }
                if storage.exists(XLOG_CONV) {
                    storage.remove(XLOG_CONV)?;
                }
                let log_id = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
                    ^ u64::from(std::process::id()) << 32;
                Meta { seq: 0, log_id, base: initial_lsn, retain: 0, skips: Vec::new() }
            }
        };
        cfg.retain_from = Some(meta.retain);
        let conv = storage.open(XLOG_CONV, true)?;
        let conv_name = conv.info().name;
        let log = Arc::new(XLog::open(cfg, conv)?);
        if created {
            // Only now is there a log: the metadata is its birth certificate.
            write_meta(meta_dev.as_ref(), &meta)?;
        }
        let stream_end = log.recovery().stream_end;
        let mut me = Self {
            writer: log.writer()?,
            log,
            base: meta.base,
            meta_dev,
            meta: Mutex::new(meta.clone()),
            conv_name,
            recovered: RecoveredLog {
                log_id: meta.log_id,
                start_lsn: meta.base + meta.retain,
                end_lsn: meta.base + stream_end,
                segments: 0,
                created,
            },
            truncated_at_seq: AtomicU64::new(0),
            poisoned: Default::default(),
            records: AtomicU64::new(0),
            commits: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        };
        // Find the end of the last complete record; a torn record after it becomes a skip.
        let mut r = me.stream_reader(meta.retain, stream_end);
        while r.next_record()?.is_some() {}
        if r.pos < stream_end {
            let mut m = meta;
            m.skips.retain(|&(_, z)| z > m.retain);
            if m.skips.len() >= META_MAX_SKIPS {
                return Err(Error::ResourceExhausted(format!(
                    "{}: {META_MAX_SKIPS} torn records since the last checkpoint; checkpoint (open and close \
                     the database) to release them",
                    me.meta_dev.info().name
                )));
            }
            m.skips.push((r.pos, stream_end));
            m.seq += 1;
            write_meta(me.meta_dev.as_ref(), &m)?;
            *me.meta.value_mut() = m;
        }
        me.truncated_at_seq.store(me.log.conv_pages_written(), Ordering::Relaxed);
        Ok(me)
    }

    /// The fast log underneath (status register, durability, scheduler).
    pub fn xlog(&self) -> &Arc<XLog> {
        &self.log
    }

    /// LSN of stream position 0 (fixed at creation).
    pub fn base_lsn(&self) -> Lsn {
        self.base
    }

    /// Stream ranges skipped as torn records (LSNs), oldest first.
    pub fn skipped(&self) -> Vec<(Lsn, Lsn)> {
        let m = self.meta.locked();
        m.skips.iter().map(|&(a, z)| (a + self.base, z + self.base)).collect()
    }

    /// Simulates a process crash (tests): nothing more is destaged or written; the ring, the
    /// conventional ring and the metadata keep what they hold.
    pub fn crash(self) {
        let Self { log, writer, .. } = self;
        drop(writer);
        match Arc::try_unwrap(log) {
            Ok(l) => l.crash(),
            Err(_) => panic!("XRecordLog::crash: a reader still holds the log"),
        }
    }

    fn stream_reader(&self, from: u64, end: u64) -> XRecordReader {
        let skips = self.meta.locked().skips.clone();
        XRecordReader {
            log: Arc::clone(&self.log),
            tail: self.log.tail_reader(from),
            pos: from,
            end,
            base: self.base,
            skips,
            file: self.conv_name.clone(),
        }
    }

    fn to_stream(&self, lsn: Lsn) -> Result<u64> {
        lsn.checked_sub(self.base)
            .ok_or_else(|| Error::InvalidArgument(format!("LSN {lsn} is below the log's base {}", self.base)))
    }
}

impl RecordLog for XRecordLog {
    fn append_record(&self, kind: u8, payload: &[u8]) -> Result<(Lsn, Lsn)> {
        if kind < KIND_USER_MIN {
            return Err(Error::InvalidArgument(format!("log record kind {kind} is reserved")));
        }
        if payload.len() > MAX_PAYLOAD {
            return Err(Error::InvalidArgument(format!(
                "log record of {} bytes exceeds the maximum of {MAX_PAYLOAD}",
                payload.len()
            )));
        }
        if self.poisoned.load(Ordering::Acquire) {
            return Err(Error::Poisoned(
                "xlog record log: an earlier multi-frame record failed part-way; reopen the log".into(),
            ));
        }
        let total = XRECORD_HEADER + payload.len();
        let (start, end) = if total <= self.log.max_alloc() {
            let mut a = self.writer.x_alloc(total)?;
            let start = a.stream_pos();
            encode_header(kind, self.base + start, payload, a.buf());
            (start, self.writer.x_free(a)?)
        } else {
            self.writer
                .x_pwrite_at(|start| {
                    let mut b = vec![0u8; total];
                    encode_header(kind, self.base + start, payload, &mut b);
                    b
                })
                .inspect_err(|_| self.poisoned.store(true, Ordering::Release))?
        };
        assert_eq!(end - start, total as u64, "record occupies a different stream range");
        self.records.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(total as u64, Ordering::Relaxed);
        Ok((self.base + start, self.base + end))
    }

    fn end_lsn(&self) -> Lsn {
        self.base + self.log.allocated()
    }

    fn durable_lsn(&self) -> Lsn {
        self.base + self.log.counter()
    }

    fn wait_durable(&self, lsn: Lsn) -> Result<Lsn> {
        let s = self.to_stream(lsn)?;
        let r = self.base + self.writer.wait_for(s)?;
        self.commits.fetch_add(1, Ordering::Relaxed);
        Ok(r)
    }

    fn recovered(&self) -> RecoveredLog {
        self.recovered.clone()
    }

    fn reader(&self, from: Lsn) -> Result<Box<dyn RecordReader>> {
        let from = self.to_stream(from)?;
        // Everything durable now must be on the conventional side for the tail reader.
        let end = self.log.counter();
        if self.log.status().destaged < end {
            self.log.destage_now()?;
        }
        Ok(Box::new(self.stream_reader(from, end)))
    }

    fn truncate_before(&self, lsn: Lsn) -> Result<usize> {
        let s = self.to_stream(lsn)?;
        let mut m = self.meta.locked();
        if s <= m.retain {
            return Ok(0);
        }
        if s > self.log.counter() {
            return Err(Error::InvalidArgument(format!("truncate_before({lsn}): not durable yet")));
        }
        let before = self.log.status().retained_pages;
        let mut next = m.clone();
        next.seq += 1;
        next.retain = s;
        next.skips.retain(|&(_, z)| z > s);
        // Durable first, then the destager may overwrite what is below it.
        write_meta(self.meta_dev.as_ref(), &next)?;
        *m = next;
        drop(m);
        self.truncated_at_seq.store(self.log.conv_pages_written(), Ordering::Relaxed);
        self.log.set_retain_from(s);
        Ok(before as usize)
    }

    fn stats(&self) -> WalStats {
        let x = self.log.stats();
        WalStats {
            records_appended: self.records.load(Ordering::Relaxed),
            commits: self.commits.load(Ordering::Relaxed),
            flushes: x.destage_batches.load(Ordering::Relaxed),
            records_flushed: 0,
            bytes_written: x.destage_pages.load(Ordering::Relaxed) * self.log.page_bytes() as u64,
            durable_bytes: (x.destage_pages.load(Ordering::Relaxed) * self.log.page_bytes() as u64)
                .saturating_sub(x.filler_bytes.load(Ordering::Relaxed)),
            filler_bytes: x.filler_bytes.load(Ordering::Relaxed),
            segments_created: 0,
            segments_recycled: 0,
            space_gate_waits: x.gate_waits.load(Ordering::Relaxed),
            group_commit_sizes: Default::default(),
        }
    }

    fn describe(&self) -> String {
        format!(
            "fast log (software X-SSD), commit waits on the credit counter, not fdatasync; {}",
            self.log.durability()
        )
    }

    fn wait_for_space(&self) -> Result<()> {
        self.log.wait_for_headroom()
    }

    fn wants_checkpoint(&self) -> bool {
        let (retained, pages, written) = self.log.retention();
        retained * 2 >= pages && written > self.truncated_at_seq.load(Ordering::Relaxed)
    }
}

/// Reads records of an [`XRecordLog`] (see the module documentation).
pub struct XRecordReader {
    log: Arc<XLog>,
    tail: super::TailReader,
    pos: u64,
    end: u64,
    base: u64,
    skips: Vec<(u64, u64)>,
    file: String,
}

impl XRecordReader {
    fn corrupt(&mut self, at: u64, detail: String) -> Error {
        let mut t = self.log.tail_reader(at);
        let offset = t.device_offset().unwrap_or(0);
        Error::Corruption {
            file: self.file.clone(),
            offset,
            detail: format!("xlog record at LSN {}: {detail}", self.base + at),
        }
    }
}

impl RecordReader for XRecordReader {
    fn next_record(&mut self) -> Result<Option<LogRecord>> {
        if let Some(&(_, z)) = self.skips.iter().find(|&&(a, _)| a == self.pos) {
            self.pos = z;
            self.tail = self.log.tail_reader(z);
        }
        if self.end - self.pos < XRECORD_HEADER as u64 {
            return Ok(None); // absent or torn tail
        }
        let start = self.pos;
        let mut h = [0u8; XRECORD_HEADER];
        let n = self.tail.try_pread(&mut h)?;
        assert_eq!(n, h.len(), "conventional side shorter than the durable end");
        let len = u32_at(&h, 4) as usize;
        let lsn = u64_at(&h, 8);
        let total = (XRECORD_HEADER + len) as u64;
        if start + total > self.end {
            if lsn != self.base + start || len > MAX_PAYLOAD {
                // Not even a plausible header: damage, not a record cut short by a crash.
                return Err(self.corrupt(start, format!("bad header (length {len}, LSN {lsn})")));
            }
            return Ok(None); // torn tail: the record was cut short
        }
        let mut rec = vec![0u8; total as usize];
        rec[..XRECORD_HEADER].copy_from_slice(&h);
        let n = self.tail.try_pread(&mut rec[XRECORD_HEADER..])?;
        assert_eq!(n, len, "conventional side shorter than the durable end");
        let crc = u32_at(&h, 0);
        if crate::util::crc32c(&rec[4..]) != crc {
            return Err(self.corrupt(start, "checksum mismatch".into()));
        }
        if lsn != self.base + start || h[17..20] != [0, 0, 0] {
            return Err(self.corrupt(start, format!("header says LSN {lsn}")));
        }
        self.pos = start + total;
        Ok(Some(LogRecord {
            lsn: self.base + start,
            end_lsn: self.base + self.pos,
            kind: h[16],
            payload: rec.split_off(XRECORD_HEADER),
        }))
    }
}

/// Opens an [`XRecordLog`] for a [`Database`](crate::Database): the metadata and the
/// conventional ring in `storage` (the database directory's `xlog/`), the ring at
/// `config.ring_path`.
pub struct XLogOpener {
    /// Holds `xlog.meta` and `xlog.conv`.
    pub storage: Arc<dyn Storage>,
    /// The fast log's configuration (`retain_from` is set from the metadata).
    pub config: XLogConfig,
}

impl XLogOpener {
    /// The ring file a database directory gets by default: `/dev/shm/nvmedb-xlog-<hash of the
    /// directory's absolute path>` (tmpfs: survives kill -9, not power loss).
    pub fn default_ring_path(db_dir: &std::path::Path) -> PathBuf {
        let abs = std::fs::canonicalize(db_dir).unwrap_or_else(|_| db_dir.to_path_buf());
        let h = crate::util::fnv1a64(abs.to_string_lossy().as_bytes());
        PathBuf::from(format!("/dev/shm/nvmedb-xlog-{h:016x}"))
    }
}

impl LogOpener for XLogOpener {
    fn is_empty(&self) -> Result<bool> {
        if !self.storage.exists(XLOG_META) {
            return Ok(true);
        }
        let dev = self.storage.open(XLOG_META, false)?;
        Ok(read_meta(dev.as_ref())?.is_none())
    }

    fn open(self: Box<Self>, initial_lsn: Lsn) -> Result<Arc<dyn RecordLog>> {
        Ok(Arc::new(XRecordLog::open(self.storage, self.config, initial_lsn)?))
    }
}
