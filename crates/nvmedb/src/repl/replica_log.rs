//! [`ReplicaLog`]: the standby's own log, holding the primary's records at the primary's LSNs.
//!
//! Owns: one device `log.dat` of checksummed records (header `crc:u32 | lsn:u64 | end:u64 |
//! kind:u8 | len:u32`, then the payload; the CRC32C covers everything after the crc field) and
//! `log.start` (where the log begins: the LSN and offset of its first record, a two-slot state
//! record), both in the node's replica-log storage ([`Disk::replica`](super::disk::Disk::replica):
//! `<dir>/standby/` through the page cache, or the simulator's crash-simulated disk). Records
//! are written in whole aligned blocks — the block holding the end of the durable records is
//! written again with the new records after them, zero-padded — and made durable with the
//! device's sync (group commit: one sync covers every record appended before it). Rewriting
//! that block is safe under torn writes: its durable bytes are written again unchanged, so any
//! prefix of the write that reaches the medium leaves them intact.
//!
//! A file on a real file system is kept filled with zeroes ahead of the writes ([`Preparer`], as
//! the primary's log segments are: a background thread fills the next 8 MiB, block-aligned,
//! while the group commits write below): a write that extends a file makes its `fdatasync`
//! also write the file's size and allocation, a second device write per group commit (storage
//! in RAM has nothing to prepare). So the file is longer than its records, and its end is where
//! the records end (the first short or damaged record), never its length; readers read only up
//! to the durable end ([`TailReader`]), so none holds zeroes that records later overwrite. What
//! follows the end (a torn tail at open, records dropped by [`ReplicaLog::truncate_after`]) is
//! overwritten with zeroes before anything is appended, so no stale record can ever pass for a
//! continuation of the log.
//!
//! On an emulated device (the lab's standby on emulated optane, its bytes on tmpfs),
//! [`ReplicaLog::set_device`] charges every group-commit write to that device's latency model
//! before it counts as durable.
//!
//! Invariants:
//! - Records are stored at the LSNs the primary gave them ([`ReplicaLog::append_at`]), so page
//!   LSNs written by redo on the standby compare correctly with this log, before and after
//!   promotion. `lsn < end`, and each record starts at or after the previous one's end (the
//!   primary's filler records are not shipped, so gaps are normal).
//! - After promotion, [`RecordLog::append_record`] continues the stream at the end of the last
//!   record, so LSNs keep increasing across the change of role.
//! - `durable_lsn` covers only records that are written and synced. At open, the first record
//!   that is short or fails its checksum ends the log and the file is cut there (a torn tail:
//!   the primary re-ships from the standby's position; nothing past it was acknowledged by
//!   this standby).
//! - [`ReplicaLog::truncate_after`] is the only way the end moves backwards; the standby uses it
//!   before promotion, for records past what a reconnecting primary holds durably (records the
//!   primary never made durable, so no commit depending on them was acknowledged).

use super::state::{read_record, write_record};
use crate::error::{Error, Result};
use crate::io::{AlignedBuf, Device, EmulatedDevice, MemDevice, Storage};
use crate::util::bytes::{u32_at, u64_at};
use crate::util::sync::MutexExt;
use crate::wal::prepare::Preparer;
use crate::wal::{LogRecord, Lsn, RecordReader, RecoveredLog, WalStats};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Bytes of a replica record header.
pub const REPLICA_HEADER_BYTES: usize = 4 + 8 + 8 + 1 + 4;
const LOG_FILE: &str = "log.dat";
const START_FILE: &str = "log.start";

/// Bytes read from the device at a time by a reader (a reader allocates its window at its
/// first read).
const READ_WINDOW: usize = 128 << 10;

/// One record as it is stored and shipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShippedRecord {
    /// Start LSN (the primary's).
    pub lsn: Lsn,
    /// End LSN (the primary's); the page LSN of pages this record changes.
    pub end: Lsn,
    /// Record kind.
    pub kind: u8,
    /// Payload.
    pub payload: Vec<u8>,
}

/// Encodes a record in the replica (and wire) layout, appending to `out`; returns its CRC.
pub fn encode_record(out: &mut Vec<u8>, lsn: Lsn, end: Lsn, kind: u8, payload: &[u8]) -> u32 {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&lsn.to_le_bytes());
    out.extend_from_slice(&end.to_le_bytes());
    out.push(kind);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    let crc = crate::util::crc32c(&out[start + 4..]);
    out[start..start + 4].copy_from_slice(&crc.to_le_bytes());
    crc
}

/// The CRC a record has in the replica layout (what [`encode_record`] returns).
pub fn record_crc(r: &ShippedRecord) -> u32 {
    let mut b = Vec::with_capacity(REPLICA_HEADER_BYTES + r.payload.len());
    encode_record(&mut b, r.lsn, r.end, r.kind, &r.payload)
}

/// A record decoded in place (see [`decode_record_ref`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecordRef<'a> {
    /// Start LSN (the primary's).
    pub lsn: Lsn,
    /// End LSN (the primary's).
    pub end: Lsn,
    /// Record kind.
    pub kind: u8,
    /// Its stored CRC (checked).
    pub crc: u32,
    /// Payload.
    pub payload: &'a [u8],
    /// The whole encoded record (header and payload), as [`encode_record`] wrote it.
    pub encoded: &'a [u8],
}

/// Decodes one record from the front of `b`, in place (the record borrows from `b`):
/// `Ok(Some((record, bytes used)))`, `Ok(None)` when `b` is too short, `Err(detail)` when the
/// bytes are not a valid record.
pub(crate) fn decode_record_ref(b: &[u8]) -> std::result::Result<Option<(RecordRef<'_>, usize)>, String> {
    if b.len() < REPLICA_HEADER_BYTES {
        return Ok(None);
    }
    let len = u32_at(b, 21) as usize;
    if b.len() < REPLICA_HEADER_BYTES + len {
        return Ok(None);
    }
    let total = REPLICA_HEADER_BYTES + len;
    let (lsn, end) = check_record(&b[..REPLICA_HEADER_BYTES], &b[REPLICA_HEADER_BYTES..total])?;
    let r =
        RecordRef { lsn, end, kind: b[20], crc: u32_at(b, 0), payload: &b[25..total], encoded: &b[..total] };
    Ok(Some((r, total)))
}

/// Checks a record's header (`head`, [`REPLICA_HEADER_BYTES`]) against its payload: the CRC
/// and `lsn < end`. Returns `(lsn, end)`.
fn check_record(head: &[u8], payload: &[u8]) -> std::result::Result<(Lsn, Lsn), String> {
    if crate::util::crc32c_append(crate::util::crc32c(&head[4..]), payload) != u32_at(head, 0) {
        return Err("record checksum mismatch".into());
    }
    let (lsn, end) = (u64_at(head, 4), u64_at(head, 12));
    if end <= lsn {
        return Err(format!("record end {end} not after its start {lsn}"));
    }
    Ok((lsn, end))
}

struct Pending {
    buf: Vec<u8>,
    /// End LSN of the last appended record (or the start).
    end: Lsn,
    /// Start LSN and CRC of the last appended record.
    last: Option<(Lsn, u32)>,
    records: u64,
}

struct Flushed {
    /// Bytes of the device that are written and synced (offsets below `start_off` are released).
    len: u64,
    /// The bytes of the block that holds offset `len`, up to `len` (written again, unchanged,
    /// with the next records after them).
    tail: Vec<u8>,
    /// The [`Preparer`]'s number for the file as it is now: a truncation that cuts the file
    /// starts a new one, so no fill of the old range lands after the cut.
    gen: u64,
}

/// Filling the log file with zeroes ahead of the group-commit writes: the preparer and its
/// background thread (a file on a real file system only).
struct Ahead {
    preparer: Arc<Preparer>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// Block size the prepared range is aligned to: a background fill never touches a block a
/// group commit writes.
const PREPARE_ALIGN: u64 = 4096;

/// Where the log begins: the LSN of its first record and that record's byte offset (the
/// bytes before it were released by [`ReplicaLog::truncate_before`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Start {
    lsn: Lsn,
    off: u64,
}

/// The standby's log. See the module documentation.
pub struct ReplicaLog {
    storage: Arc<dyn Storage>,
    /// `log.dat` (replaced by [`ReplicaLog::reset`]).
    dev: Mutex<Arc<dyn Device>>,
    start: Mutex<Start>,
    pending: Mutex<Pending>,
    flushed: Mutex<Flushed>,
    durable: AtomicU64,
    durable_len: AtomicU64,
    recovered: RecoveredLog,
    stats: Mutex<WalStats>,
    /// The emulated device the log's writes are charged to (None: the device's own sync).
    device: Mutex<Option<Arc<EmulatedDevice<MemDevice>>>>,
    ahead: Option<Ahead>,
}

impl Drop for ReplicaLog {
    fn drop(&mut self) {
        if let Some(a) = &self.ahead {
            a.preparer.stop();
            if let Some(t) = a.thread.locked().take() {
                let _ = t.join();
            }
        }
    }
}

impl std::fmt::Debug for ReplicaLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ReplicaLog({}, end {})", self.storage.location(), self.end_lsn())
    }
}

/// `log.start`: lsn u64 | offset u64.
fn read_start(st: &dyn Storage) -> Result<Option<Start>> {
    match read_record(st, START_FILE)? {
        None => Ok(None),
        Some(b) if b.len() == 16 => Ok(Some(Start { lsn: u64_at(&b, 0), off: u64_at(&b, 8) })),
        Some(_) => Err(Error::Corruption {
            file: format!("{}/{START_FILE}", st.location()),
            offset: 0,
            detail: "replica log start record is damaged".into(),
        }),
    }
}

fn write_start(st: &dyn Storage, s: Start) -> Result<()> {
    let mut b = s.lsn.to_le_bytes().to_vec();
    b.extend_from_slice(&s.off.to_le_bytes());
    write_record(st, START_FILE, &b)
}

/// What [`scan`] found: the end LSN, the last record's (LSN, CRC), and the file length the
/// records take.
type Scanned = (Lsn, Option<(Lsn, u32)>, u64);

/// Reads the device from `st.off` and returns what the records that follow each other from
/// there cover; the first short or damaged record ends them (a torn tail). `stop_after` keeps
/// only records ending at or below it.
fn scan(dev: &Arc<dyn Device>, st: Start, stop_after: Lsn) -> Result<Scanned> {
    let mut r = BlockReader::new(dev.clone());
    let (mut off, mut end, mut last) = (st.off, st.lsn, None);
    let cap = dev.capacity();
    loop {
        let mut head = [0u8; REPLICA_HEADER_BYTES];
        if off + REPLICA_HEADER_BYTES as u64 > cap {
            break;
        }
        r.read(off, &mut head, cap)?;
        let len = u32_at(&head, 21) as u64;
        if off + REPLICA_HEADER_BYTES as u64 + len > cap {
            break;
        }
        let mut payload = vec![0u8; len as usize];
        r.read(off + REPLICA_HEADER_BYTES as u64, &mut payload, cap)?;
        let Ok((lsn, rend)) = check_record(&head, &payload) else { break };
        if lsn < end || rend > stop_after {
            break;
        }
        end = rend;
        last = Some((lsn, u32_at(&head, 0)));
        off += REPLICA_HEADER_BYTES as u64 + len;
    }
    Ok((end, last, off))
}

/// Aligned reads of a device through a window (records are not aligned).
struct BlockReader {
    dev: Arc<dyn Device>,
    /// The window (allocated at the first read).
    buf: Option<AlignedBuf>,
    /// Device offset of `buf[0]`.
    at: u64,
    /// Bytes of `buf` that hold the device's bytes as they were when read.
    valid: usize,
}

impl BlockReader {
    fn new(dev: Arc<dyn Device>) -> Self {
        Self { dev, buf: None, at: 0, valid: 0 }
    }

    /// Forgets what the window holds (the bytes may have changed).
    fn invalidate(&mut self) {
        self.valid = 0;
    }

    /// Copies `out.len()` bytes at `off` into `out`; bytes at or past `limit` are never read
    /// into the window (they may still change).
    fn read(&mut self, mut off: u64, mut out: &mut [u8], limit: u64) -> Result<()> {
        let align = self.dev.alignment().max(1) as u64;
        while !out.is_empty() {
            if off >= self.at && off < self.at + self.valid as u64 {
                let buf = self.buf.as_ref().expect("a valid window is allocated");
                let from = (off - self.at) as usize;
                let n = (self.valid - from).min(out.len());
                out[..n].copy_from_slice(&buf[from..from + n]);
                out = &mut out[n..];
                off += n as u64;
                continue;
            }
            let at = off / align * align;
            let cap = self.dev.capacity();
            let len = (READ_WINDOW as u64).min(cap.saturating_sub(at)) / align * align;
            if len == 0 || at + len <= off {
                return Err(Error::Corruption {
                    file: self.dev.info().name,
                    offset: off,
                    detail: format!("replica log read past the device's end ({cap} bytes)"),
                });
            }
            let buf = self.buf.get_or_insert_with(|| AlignedBuf::new(READ_WINDOW));
            self.dev.read_at(at, &mut buf[..len as usize])?;
            self.at = at;
            self.valid = (len.min(limit.saturating_sub(at))) as usize;
            if self.valid == 0 || at + self.valid as u64 <= off {
                return Err(Error::Corruption {
                    file: self.dev.info().name,
                    offset: off,
                    detail: format!("replica log read past its durable end {limit}"),
                });
            }
        }
        Ok(())
    }
}

/// Gives the blocks below `upto` back to the file system when `dev` is a file (hole punching;
/// offsets do not change, and nothing reads the released range). Devices in memory keep them.
fn release_blocks(dev: &dyn Device, upto: u64) -> Result<()> {
    let info = dev.info();
    if upto == 0 || !(info.backend.contains("pread") || info.backend.contains("io_uring")) {
        return Ok(());
    }
    let path = std::path::Path::new(&info.name);
    let io = |e: std::io::Error| {
        Error::Io(crate::io::IoError::os(&info.name, crate::io::IoOpKind::Setup, 0, upto as usize, e))
    };
    let file = std::fs::OpenOptions::new().write(true).open(path).map_err(io)?;
    use std::os::fd::AsRawFd;
    // SAFETY: fallocate on an open file descriptor with a valid range; it only frees blocks of
    // the file (reads of the range return zeros, which nothing reads: the log begins after it).
    let r = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            0,
            upto as libc::off_t,
        )
    };
    if r != 0 {
        // Not every file system punches holes: the log is still correct, only larger.
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EOPNOTSUPP) {
            return Err(io(e));
        }
    }
    Ok(())
}

/// Overwrites `[from, to)` of `dev` with zeroes, keeping `keep` (the bytes of `from`'s block
/// before `from`), and syncs: what followed the log's end can no longer pass for records.
fn zero_after(dev: &dyn Device, from: u64, keep: &[u8], to: u64) -> Result<()> {
    let align = dev.alignment().max(1) as u64;
    let block = from / align * align;
    debug_assert_eq!(keep.len() as u64, from - block);
    let to = to.min(dev.capacity()).next_multiple_of(align);
    let mut at = block;
    while at < to {
        let n = (to - at).min(READ_WINDOW as u64) as usize;
        let mut buf = AlignedBuf::new(n);
        if at == block {
            buf[..keep.len()].copy_from_slice(keep);
        }
        dev.write_at(at, &buf)?;
        at += n as u64;
    }
    dev.sync()?;
    Ok(())
}

/// The end of the last block at or after `from` that holds a non-zero byte (`from` if none):
/// how far a torn or cut tail reaches.
fn dirty_end(dev: &Arc<dyn Device>, from: u64) -> Result<u64> {
    let align = dev.alignment().max(1) as u64;
    let cap = dev.capacity();
    let mut at = from / align * align;
    let mut end = from;
    let mut buf = AlignedBuf::new(READ_WINDOW);
    while at < cap {
        let n = (cap - at).min(READ_WINDOW as u64) as usize / align as usize * align as usize;
        if n == 0 {
            break;
        }
        dev.read_at(at, &mut buf[..n])?;
        match buf[..n].iter().rposition(|&b| b != 0) {
            Some(p) => end = (at + p as u64 + 1).next_multiple_of(align),
            // A whole window of zeroes: the prepared (or never written) part begins.
            None => break,
        }
        at += n as u64;
    }
    Ok(end.max(from))
}

impl ReplicaLog {
    /// True when `storage` holds a replica log.
    pub fn exists(storage: &dyn Storage) -> bool {
        storage.exists(START_FILE)
    }

    /// Opens the replica log in `storage`, creating it (beginning at `start_if_new`) when absent.
    /// Cuts a torn tail.
    pub fn open(storage: Arc<dyn Storage>, start_if_new: Lsn) -> Result<Arc<Self>> {
        Self::open_inner(storage, start_if_new, true)
    }

    /// A new, empty replica log in `storage` beginning at `start`, whose start record is written
    /// only by [`ReplicaLog::finish_copy`]: until then a crash leaves no log (a former primary's
    /// log copied into it is copied again).
    pub(super) fn create_for_copy(storage: Arc<dyn Storage>, start: Lsn) -> Result<Arc<Self>> {
        if storage.exists(START_FILE) {
            storage.remove(START_FILE)?;
        }
        Self::open_inner(storage, start, false)
    }

    /// Syncs the copied records and writes the start record: the log exists from now on.
    pub(super) fn finish_copy(&self) -> Result<Lsn> {
        let end = self.sync()?;
        write_start(self.storage.as_ref(), *self.start.locked())?;
        Ok(end)
    }

    fn open_inner(storage: Arc<dyn Storage>, start_if_new: Lsn, mark: bool) -> Result<Arc<Self>> {
        let st = match read_start(storage.as_ref())? {
            Some(st) => st,
            None => {
                let st = Start { lsn: start_if_new, off: 0 };
                // An empty log: whatever an interrupted copy left is dropped first.
                if storage.exists(LOG_FILE) {
                    storage.remove(LOG_FILE)?;
                }
                if mark {
                    write_start(storage.as_ref(), st)?;
                }
                st
            }
        };
        let dev = storage.open(LOG_FILE, true)?;
        // A torn write can leave a size that is not a whole number of blocks (a power cut keeps
        // a prefix of a write's sectors): round it up with zeroes, so every block can be read.
        let align = dev.alignment().max(1) as u64;
        if dev.capacity() % align != 0 {
            dev.ensure_capacity(dev.capacity().next_multiple_of(align))?;
        }
        let (end, last, len) = scan(&dev, st, Lsn::MAX)?;
        let block = len / align * align;
        let mut tail = vec![0u8; (len - block) as usize];
        if !tail.is_empty() {
            BlockReader::new(dev.clone()).read(block, &mut tail, len)?;
        }
        let dirty = dirty_end(&dev, len)?;
        if dirty > len {
            // A torn tail (or records a cut dropped): zeroed before anything is appended.
            zero_after(dev.as_ref(), len, &tail, dirty)?;
        }
        let recovered =
            RecoveredLog { log_id: 0, start_lsn: st.lsn, end_lsn: end, segments: 1, created: false };
        let ahead = if storage.in_ram() {
            None
        } else {
            let preparer = Arc::new(Preparer::new());
            preparer.restart(0, len - len % PREPARE_ALIGN);
            let p2 = preparer.clone();
            let thread = std::thread::Builder::new()
                .name("nvmedb-replica-prepare".into())
                .spawn(move || p2.run())
                .map_err(|e| {
                    Error::Io(crate::io::IoError::os(
                        &storage.location(),
                        crate::io::IoOpKind::Setup,
                        0,
                        0,
                        e,
                    ))
                })?;
            Some(Ahead { preparer, thread: Mutex::new(Some(thread)) })
        };
        Ok(Arc::new(Self {
            storage,
            dev: Mutex::new(dev),
            start: Mutex::new(st),
            pending: Mutex::new(Pending { buf: Vec::new(), end, last, records: 0 }),
            flushed: Mutex::new(Flushed { len, tail, gen: 0 }),
            durable: AtomicU64::new(end),
            durable_len: AtomicU64::new(len),
            recovered,
            stats: Mutex::new(WalStats::default()),
            device: Mutex::new(None),
            ahead,
        }))
    }

    /// The log's device.
    fn dev(&self) -> Arc<dyn Device> {
        self.dev.locked().clone()
    }

    /// Starts a new preparation of the file from `len` (after a cut): waits for a fill in
    /// progress, so none lands past the cut.
    fn restart_preparation(&self, f: &mut Flushed, len: u64) {
        f.gen += 1;
        if let Some(a) = &self.ahead {
            a.preparer.restart(f.gen, len - len % PREPARE_ALIGN);
        }
    }

    /// Puts the log "on" an emulated device: from now on each group-commit write (made durable in
    /// the file, which must be in RAM for a device faster than the disk) also waits out
    /// `device`'s write latency before it counts as durable.
    pub fn set_device(&self, device: Arc<EmulatedDevice<MemDevice>>) {
        *self.device.locked() = Some(device);
    }

    /// Where the log begins (the first record still held starts at or after it).
    pub fn start_lsn(&self) -> Lsn {
        self.start.locked().lsn
    }

    fn start_off(&self) -> u64 {
        self.start.locked().off
    }

    /// Appends a record shipped by the primary, at the primary's LSNs. Records already held
    /// (`end <= end_lsn()`) are skipped (a re-shipment after reconnecting); a record that
    /// overlaps the end is an error.
    pub fn append_at(&self, lsn: Lsn, end: Lsn, kind: u8, payload: &[u8]) -> Result<bool> {
        let mut p = self.pending.locked();
        if end <= p.end {
            return Ok(false);
        }
        if lsn < p.end || end <= lsn {
            return Err(Error::InvalidArgument(format!(
                "shipped record [{lsn}, {end}) overlaps the replica log end {}",
                p.end
            )));
        }
        let crc = encode_record(&mut p.buf, lsn, end, kind, payload);
        p.end = end;
        p.last = Some((lsn, crc));
        p.records += 1;
        Ok(true)
    }

    /// [`ReplicaLog::append_at`] of a record already in the replica layout (a shipped frame's
    /// bytes, checked by [`decode_record_ref`]): stored as it is, without encoding it again.
    pub(crate) fn append_encoded(&self, r: &RecordRef<'_>) -> Result<bool> {
        let mut p = self.pending.locked();
        if r.end <= p.end {
            return Ok(false);
        }
        if r.lsn < p.end || r.end <= r.lsn {
            return Err(Error::InvalidArgument(format!(
                "shipped record [{}, {}) overlaps the replica log end {}",
                r.lsn, r.end, p.end
            )));
        }
        p.buf.extend_from_slice(r.encoded);
        p.end = r.end;
        p.last = Some((r.lsn, r.crc));
        p.records += 1;
        Ok(true)
    }

    /// Writes and syncs everything appended; returns the durable end.
    pub fn sync(&self) -> Result<Lsn> {
        self.sync_to(Lsn::MAX)
    }

    /// Makes everything appended durable unless `lsn` already is (group commit: a caller that
    /// waited for another's sync finds its record durable and does not sync again).
    pub fn sync_to(&self, lsn: Lsn) -> Result<Lsn> {
        let mut f = self.flushed.locked();
        let d = self.durable.load(Ordering::Acquire);
        if d >= lsn {
            return Ok(d);
        }
        let (buf, end, n) = {
            let mut p = self.pending.locked();
            (std::mem::take(&mut p.buf), p.end, std::mem::take(&mut p.records))
        };
        if buf.is_empty() {
            return Ok(self.durable.load(Ordering::Acquire));
        }
        let device = self.device.locked().clone();
        let dev = self.dev();
        let align = dev.alignment().max(1) as u64;
        let block = f.len / align * align;
        let new_len = f.len + buf.len() as u64;
        if let (None, Some(a)) = (&device, &self.ahead) {
            // Backed up to the next block boundary past this write, and 8 MiB ahead of it.
            let write_end = new_len.next_multiple_of(PREPARE_ALIGN);
            a.preparer.before_write(f.gen, std::slice::from_ref(&dev), write_end, u64::MAX)?;
        }
        // The block holding the durable end again, unchanged, then the new records, zero-padded.
        let mut out = AlignedBuf::new((new_len - block).next_multiple_of(align) as usize);
        out[..f.tail.len()].copy_from_slice(&f.tail);
        out[f.tail.len()..f.tail.len() + buf.len()].copy_from_slice(&buf);
        let submitted = std::time::Instant::now();
        if let Err(e) = dev.write_at(block, &out).and_then(|()| dev.sync()) {
            // Nothing more is durable than before: the records go back in front of those appended
            // since, and the next sync writes them again (their block included, so a sync that
            // failed after the kernel dropped the written pages is repaired too). Dropping them
            // would leave a gap that the records after it hide (and acknowledge).
            let mut p = self.pending.locked();
            let mut again = buf;
            again.extend_from_slice(&p.buf);
            p.buf = again;
            p.records += n;
            return Err(e.into());
        }
        if let Some(d) = device {
            d.charge_write(f.len, buf.len(), submitted);
        }
        let new_block = new_len / align * align;
        f.tail = out[(new_block - block) as usize..(new_len - block) as usize].to_vec();
        f.len = new_len;
        self.durable_len.store(f.len, Ordering::Release);
        let prev = self.durable.swap(end, Ordering::AcqRel);
        assert!(prev <= end, "replica log durable position went backwards");
        let mut s = self.stats.locked();
        s.flushes += 1;
        s.records_flushed += n;
        s.bytes_written += buf.len() as u64;
        Ok(end)
    }

    /// Drops every record that ends after `lsn` (see the module documentation for when this is
    /// legal): the bytes after the last kept record are overwritten with zeroes. Returns the new
    /// end.
    pub fn truncate_after(&self, lsn: Lsn) -> Result<Lsn> {
        let mut f = self.flushed.locked();
        let mut p = self.pending.locked();
        p.buf.clear();
        p.records = 0;
        let st = *self.start.locked();
        let dev = self.dev();
        let (end, last, len) = scan(&dev, st, lsn)?;
        let len = len.min(f.len);
        self.restart_preparation(&mut f, len);
        let align = dev.alignment().max(1) as u64;
        let block = len / align * align;
        let mut tail = vec![0u8; (len - block) as usize];
        if !tail.is_empty() {
            BlockReader::new(dev.clone()).read(block, &mut tail, len)?;
        }
        let dirty = dirty_end(&dev, len)?.max(f.len);
        zero_after(dev.as_ref(), len, &tail, dirty)?;
        f.len = len;
        f.tail = tail;
        p.end = end;
        p.last = last;
        self.durable_len.store(f.len, Ordering::Release);
        self.durable.store(end, Ordering::Release);
        Ok(end)
    }

    /// Releases the records that start before `lsn` (a restartpoint no longer needs them): the
    /// log then begins at the first record at or after `lsn`, and the disk blocks before it are
    /// given back to the file system (hole punching; offsets of later records do not change).
    /// Returns the bytes released.
    pub fn truncate_before(self: &Arc<Self>, lsn: Lsn) -> Result<u64> {
        let _f = self.flushed.locked();
        let st = *self.start.locked();
        if lsn <= st.lsn {
            return Ok(0);
        }
        let mut t = self.tail()?;
        let mut new = Start {
            lsn: self.durable.load(Ordering::Acquire),
            off: self.durable_len.load(Ordering::Acquire),
        };
        loop {
            let off = t.offset();
            match t.next_record()? {
                Some(r) if r.lsn >= lsn => {
                    new = Start { lsn: r.lsn, off };
                    break;
                }
                Some(_) => {}
                None => break,
            }
        }
        if new.off <= st.off {
            return Ok(0);
        }
        write_start(self.storage.as_ref(), new)?;
        *self.start.locked() = new;
        release_blocks(self.dev().as_ref(), new.off / 4096 * 4096)?;
        Ok(new.off - st.off)
    }

    /// Empties the log and makes it begin at `start` (a base backup replaces the standby's data
    /// and log): the old records go with their device, then the new start is stored (a crash in
    /// between leaves the old start over an empty log).
    pub fn reset(&self, start: Lsn) -> Result<()> {
        let mut f = self.flushed.locked();
        let mut p = self.pending.locked();
        self.restart_preparation(&mut f, 0);
        self.storage.remove(LOG_FILE)?;
        *self.dev.locked() = self.storage.open(LOG_FILE, true)?;
        let st = Start { lsn: start, off: 0 };
        write_start(self.storage.as_ref(), st)?;
        *self.start.locked() = st;
        f.len = 0;
        f.tail.clear();
        *p = Pending { buf: Vec::new(), end: start, last: None, records: 0 };
        self.durable_len.store(0, Ordering::Release);
        self.durable.store(start, Ordering::Release);
        Ok(())
    }

    /// A reader that follows the log as it grows, from its first record.
    pub fn tail(self: &Arc<Self>) -> Result<TailReader> {
        let mut t = TailReader { log: self.clone(), r: BlockReader::new(self.dev()), offset: 0 };
        t.seek_to(self.start_off())?;
        Ok(t)
    }
}

/// Reads a [`ReplicaLog`] sequentially, only as far as it is durable, resuming where it left off.
pub struct TailReader {
    log: Arc<ReplicaLog>,
    r: BlockReader,
    offset: u64,
}

impl TailReader {
    /// Byte offset of the next record in the file.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Repositions at byte offset `off` (a record start this reader returned before).
    pub fn seek_to(&mut self, off: u64) -> Result<()> {
        self.r.invalidate();
        self.offset = off;
        Ok(())
    }

    /// The next durable record, `None` when the reader has caught up with the durable end.
    pub fn next_record(&mut self) -> Result<Option<ShippedRecord>> {
        let limit = self.log.durable_len.load(Ordering::Acquire);
        if self.offset + REPLICA_HEADER_BYTES as u64 > limit {
            return Ok(None);
        }
        let off = self.offset;
        let mut head = [0u8; REPLICA_HEADER_BYTES];
        self.r.read(off, &mut head, limit)?;
        let len = u32_at(&head, 21) as usize;
        let n = (REPLICA_HEADER_BYTES + len) as u64;
        let corrupt = |detail: String| Error::Corruption {
            file: format!("{}/{LOG_FILE}", self.log.storage.location()),
            offset: off,
            detail,
        };
        if off + n > limit {
            return Err(corrupt(format!("record of {len} bytes crosses the durable end {limit}")));
        }
        // The payload is read straight into the record's own buffer (one copy).
        let mut payload = vec![0u8; len];
        self.r.read(off + REPLICA_HEADER_BYTES as u64, &mut payload, limit)?;
        let (lsn, end) = check_record(&head, &payload).map_err(corrupt)?;
        self.offset += n;
        Ok(Some(ShippedRecord { lsn, end, kind: head[20], payload }))
    }
}

/// A [`RecordReader`] over a replica log from an LSN.
struct FromReader {
    tail: TailReader,
    from: Lsn,
}

impl RecordReader for FromReader {
    fn next_record(&mut self) -> Result<Option<LogRecord>> {
        while let Some(r) = self.tail.next_record()? {
            if r.lsn >= self.from {
                return Ok(Some(LogRecord { lsn: r.lsn, end_lsn: r.end, kind: r.kind, payload: r.payload }));
            }
        }
        Ok(None)
    }
}

/// Lets a promoted standby's [`ReplicaLog`] be the log of a [`Database`](crate::Database).
pub struct ReplicaLogHandle(pub Arc<ReplicaLog>);

impl crate::wal::RecordLog for ReplicaLogHandle {
    fn append_record(&self, kind: u8, payload: &[u8]) -> Result<(Lsn, Lsn)> {
        let mut p = self.0.pending.locked();
        let lsn = p.end;
        let end = lsn + (REPLICA_HEADER_BYTES + payload.len()) as u64;
        let crc = encode_record(&mut p.buf, lsn, end, kind, payload);
        p.end = end;
        p.last = Some((lsn, crc));
        p.records += 1;
        drop(p);
        self.0.stats.locked().records_appended += 1;
        Ok((lsn, end))
    }

    fn end_lsn(&self) -> Lsn {
        self.0.pending.locked().end
    }

    fn durable_lsn(&self) -> Lsn {
        self.0.durable.load(Ordering::Acquire)
    }

    fn wait_durable(&self, lsn: Lsn) -> Result<Lsn> {
        let d = self.0.durable.load(Ordering::Acquire);
        if d >= lsn {
            return Ok(d);
        }
        let d = self.0.sync_to(lsn)?;
        self.0.stats.locked().commits += 1;
        Ok(d)
    }

    fn recovered(&self) -> RecoveredLog {
        // Where the log begins and ends now (it may have been truncated since it was opened).
        RecoveredLog {
            start_lsn: self.0.start_lsn(),
            end_lsn: self.0.durable_lsn(),
            ..self.0.recovered.clone()
        }
    }

    fn reader(&self, from: Lsn) -> Result<Box<dyn RecordReader>> {
        Ok(Box::new(FromReader { tail: self.0.tail()?, from }))
    }

    fn truncate_before(&self, lsn: Lsn) -> Result<usize> {
        Ok(self.0.truncate_before(lsn)? as usize)
    }

    fn stats(&self) -> WalStats {
        *self.0.stats.locked()
    }

    fn describe(&self) -> String {
        format!(
            "standby replica log (aligned block writes + sync, primary's LSNs) in {}",
            self.0.storage.location()
        )
    }
}

impl ReplicaLog {
    /// The LSN after the last appended record.
    pub fn end_lsn(&self) -> Lsn {
        self.pending.locked().end
    }

    /// The end of what is written and synced.
    pub fn durable_lsn(&self) -> Lsn {
        self.durable.load(Ordering::Acquire)
    }

    /// Start LSN and CRC of the last appended record (`None` for an empty log).
    pub fn last_record(&self) -> Option<(Lsn, u32)> {
        self.pending.locked().last
    }

    /// True when the durable log holds a record at `lsn` whose CRC is `crc` (the two logs
    /// agree up to there: the check a promoting standby makes before taking a peer's records).
    pub fn holds(self: &Arc<Self>, lsn: Lsn, crc: u32) -> Result<bool> {
        let mut t = self.tail()?;
        while let Some(r) = t.next_record()? {
            if r.lsn >= lsn {
                return Ok(r.lsn == lsn && record_crc(&r) == crc);
            }
        }
        Ok(false)
    }
}

/// Opens a database over an already open replica log (promotion).
pub struct ReplicaLogOpener(pub Arc<ReplicaLog>);

impl crate::wal::LogOpener for ReplicaLogOpener {
    fn is_empty(&self) -> Result<bool> {
        Ok(false)
    }

    fn open(self: Box<Self>, _initial_lsn: Lsn) -> Result<Arc<dyn crate::wal::RecordLog>> {
        Ok(Arc::new(ReplicaLogHandle(self.0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::RecordLog;

    fn tmp(name: &str) -> nvmedb_testkit::TmpDir {
        nvmedb_testkit::TmpDir::path_only(&format!("replica-{name}"))
    }

    /// The replica log's storage in directory `d`, as a node keeps it.
    fn dir(d: &std::path::Path) -> Arc<dyn Storage> {
        super::super::disk::Disk::replica(&super::super::disk::DirDisk::new(d)).unwrap()
    }

    fn log_file(d: &std::path::Path) -> std::path::PathBuf {
        d.join(super::super::disk::REPLICA_DIR).join(LOG_FILE)
    }

    #[test]
    fn records_keep_the_primarys_lsns_and_survive_reopen_with_a_torn_tail() {
        let d = tmp("reopen");
        let log = ReplicaLog::open(dir(&d), 100).unwrap();
        assert!(log.append_at(100, 140, 9, b"a").unwrap());
        assert!(log.append_at(4096, 4200, 10, b"bb").unwrap());
        assert!(!log.append_at(100, 140, 9, b"a").unwrap(), "a re-shipped record is skipped");
        assert!(log.append_at(4100, 4300, 10, b"x").is_err(), "overlap is refused");
        assert_eq!(log.durable_lsn(), 100);
        assert_eq!(log.sync().unwrap(), 4200);
        let records_end = log.durable_len.load(Ordering::Acquire);
        drop(log);
        // Write a torn record by hand where the records end (the file is longer: prepared ahead).
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::OpenOptions::new().write(true).open(log_file(&d)).unwrap();
        assert!(f.metadata().unwrap().len() > records_end);
        f.seek(SeekFrom::Start(records_end)).unwrap();
        let mut rec = Vec::new();
        encode_record(&mut rec, 5000, 5100, 11, b"torn");
        f.write_all(&rec[..rec.len() - 2]).unwrap();
        drop(f);
        let log = ReplicaLog::open(dir(&d), 0).unwrap();
        assert_eq!(log.start_lsn(), 100);
        assert_eq!(log.end_lsn(), 4200);
        let h = ReplicaLogHandle(log.clone());
        let mut r = h.reader(0).unwrap();
        let a = r.next_record().unwrap().unwrap();
        assert_eq!((a.lsn, a.end_lsn, a.kind, a.payload.as_slice()), (100, 140, 9, &b"a"[..]));
        let b = r.next_record().unwrap().unwrap();
        assert_eq!((b.lsn, b.end_lsn), (4096, 4200));
        assert!(r.next_record().unwrap().is_none());
        // Appends after promotion continue past the end.
        let (s, e) = h.append_record(12, b"new").unwrap();
        assert_eq!(s, 4200);
        assert!(e > s);
        assert_eq!(h.wait_durable(e).unwrap(), e);
        assert_eq!(log.truncate_after(4199).unwrap(), 140);
        assert_eq!(log.end_lsn(), 140);
        drop(log);
        assert_eq!(ReplicaLog::open(dir(&d), 0).unwrap().end_lsn(), 140);
    }

    #[test]
    fn the_file_is_backed_ahead_of_the_records_and_its_end_is_where_the_records_end() {
        use std::os::unix::fs::MetadataExt;
        let d = tmp("ahead");
        let log = ReplicaLog::open(dir(&d), 0).unwrap();
        let (mut lsn, mut ends) = (0u64, Vec::new());
        for i in 0..300u64 {
            let payload = vec![(i % 251) as u8; 1000 + (i as usize * 7) % 300];
            let end = lsn + 2000;
            assert!(log.append_at(lsn, end, 9, &payload).unwrap());
            ends.push(end);
            lsn = end + 10;
            if i % 10 == 9 {
                assert_eq!(log.sync().unwrap(), end);
            }
        }
        let records = log.durable_len.load(Ordering::Acquire);
        let m = std::fs::metadata(log_file(&d)).unwrap();
        // Prepared: allocated zeroes at least half a preparation window past the records.
        assert!(
            m.len() >= records + crate::wal::prepare::PREPARE_AHEAD_BYTES / 2,
            "{} vs {records}",
            m.len()
        );
        assert!(m.blocks() * 512 >= m.len(), "the file is backed, not sparse: {m:?}");
        drop(log);
        // Reopened: the end is the last record's, and appends go on.
        let log = ReplicaLog::open(dir(&d), 0).unwrap();
        assert_eq!(log.end_lsn(), *ends.last().unwrap());
        assert_eq!(log.durable_len.load(Ordering::Acquire), records);
        assert!(log.append_at(lsn, lsn + 100, 10, b"after reopen").unwrap());
        assert_eq!(log.sync().unwrap(), lsn + 100);
        drop(log);
        let log = ReplicaLog::open(dir(&d), 0).unwrap();
        let mut t = log.tail().unwrap();
        let mut n = 0;
        while let Some(r) = t.next_record().unwrap() {
            if n < ends.len() {
                assert_eq!(r.end, ends[n]);
            } else {
                assert_eq!(r.payload, b"after reopen");
            }
            n += 1;
        }
        assert_eq!(n, ends.len() + 1);
    }

    #[test]
    fn a_tail_reader_following_the_log_never_keeps_the_zeroes_ahead_of_it() {
        let d = tmp("follow");
        let log = ReplicaLog::open(dir(&d), 0).unwrap();
        let mut t = log.tail().unwrap();
        let mut lsn = 0;
        // Small records, one group commit each: every read of the reader finds the file's
        // prepared zeroes right after the last durable record.
        for i in 0..200u64 {
            let payload = format!("record {i}").into_bytes();
            assert!(log.append_at(lsn, lsn + 50, 9, &payload).unwrap());
            assert_eq!(log.sync().unwrap(), lsn + 50);
            let r = t.next_record().unwrap().expect("the record just made durable");
            assert_eq!((r.lsn, r.payload), (lsn, payload));
            assert!(t.next_record().unwrap().is_none());
            lsn += 50;
        }
        // After a cut, the reader repositioned at the end follows the new records.
        assert_eq!(log.truncate_after(100 * 50).unwrap(), 100 * 50);
        let off = log.durable_len.load(Ordering::Acquire);
        t.seek_to(off).unwrap();
        assert!(log.append_at(100 * 50, 100 * 50 + 70, 9, b"after the cut").unwrap());
        log.sync().unwrap();
        assert_eq!(t.next_record().unwrap().unwrap().payload, b"after the cut");
    }

    #[test]
    fn shipped_bytes_are_stored_as_they_came_and_read_back() {
        let d = tmp("encoded");
        let log = ReplicaLog::open(dir(&d), 100).unwrap();
        let mut frame = Vec::new();
        encode_record(&mut frame, 100, 180, 9, &[5u8; 40]);
        encode_record(&mut frame, 200, 300, 10, b"second");
        let mut off = 0;
        while let Some((r, n)) = decode_record_ref(&frame[off..]).unwrap() {
            assert!(log.append_encoded(&r).unwrap());
            assert!(!log.append_encoded(&r).unwrap(), "a re-shipped record is skipped");
            off += n;
        }
        assert_eq!(off, frame.len());
        assert_eq!(log.last_record().map(|(l, _)| l), Some(200));
        assert_eq!(log.sync().unwrap(), 300);
        let mut t = log.tail().unwrap();
        let a = t.next_record().unwrap().unwrap();
        assert_eq!((a.lsn, a.end, a.kind, a.payload), (100, 180, 9, vec![5u8; 40]));
        let b = t.next_record().unwrap().unwrap();
        assert_eq!((b.lsn, b.end, b.kind, b.payload.as_slice()), (200, 300, 10, &b"second"[..]));
        assert!(t.next_record().unwrap().is_none());
        // A flipped payload byte fails the record's check; an overlapping record is refused.
        let mut bad = frame.clone();
        bad[REPLICA_HEADER_BYTES + 3] ^= 1;
        assert!(decode_record_ref(&bad).is_err());
        let mut over = Vec::new();
        encode_record(&mut over, 250, 400, 9, b"x");
        let (r, _) = decode_record_ref(&over).unwrap().unwrap();
        assert!(log.append_encoded(&r).is_err());
        drop(t);
        drop(log);
        assert_eq!(ReplicaLog::open(dir(&d), 0).unwrap().end_lsn(), 300);
    }

    #[test]
    fn truncate_before_releases_the_prefix_and_survives_reopen() {
        let d = tmp("trunc");
        let log = ReplicaLog::open(dir(&d), 0).unwrap();
        let payload = vec![7u8; 3000];
        let mut starts = Vec::new();
        let mut lsn = 0;
        for i in 0..40u64 {
            let end = lsn + 3100;
            assert!(log.append_at(lsn, end, 9, &payload).unwrap());
            starts.push(lsn);
            lsn = end + (i % 3) * 10; // gaps, as the primary's filler leaves them
        }
        let end = log.sync().unwrap();
        let released = log.truncate_before(60_000).unwrap();
        let first = *starts.iter().find(|&&s| s >= 60_000).unwrap();
        assert_eq!(log.start_lsn(), first);
        assert!(released > 50_000, "{released}");
        let h = ReplicaLogHandle(log.clone());
        assert_eq!(h.reader(0).unwrap().next_record().unwrap().unwrap().lsn, first);
        assert_eq!(h.recovered().start_lsn, first);
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(log_file(&d)).unwrap();
        assert!(m.blocks() * 512 < m.len(), "the prefix's blocks were not released");
        drop(h);
        drop(log);
        let log = ReplicaLog::open(dir(&d), 0).unwrap();
        assert_eq!((log.start_lsn(), log.end_lsn()), (first, end));
        assert_eq!(log.truncate_after(first + 3100).unwrap(), first + 3100);
        log.reset(500_000).unwrap();
        assert_eq!((log.start_lsn(), log.end_lsn(), log.last_record()), (500_000, 500_000, None));
        assert!(log.append_at(500_000, 500_100, 9, b"x").unwrap());
        assert_eq!(log.sync().unwrap(), 500_100);
        drop(log);
        assert_eq!(ReplicaLog::open(dir(&d), 0).unwrap().end_lsn(), 500_100);
    }

    #[test]
    fn a_power_cut_keeps_every_synced_record_and_no_stale_one() {
        use crate::io::CrashSimStorage;
        use crate::util::Rng;
        for seed in 0..100u64 {
            let mut rng = Rng::new(seed);
            let css = Arc::new(CrashSimStorage::new());
            let st: Arc<dyn Storage> = css.clone();
            let log = ReplicaLog::open(st.clone(), 0).unwrap();
            let (mut lsn, mut synced) = (0u64, 0u64);
            let mut written = Vec::new();
            for round in 0..(2 + rng.below(6)) {
                for _ in 0..(1 + rng.below(4)) {
                    let payload = vec![round as u8; 1 + rng.below(3000) as usize];
                    let end = lsn + 100 + rng.below(5000);
                    assert!(log.append_at(lsn, end, 9, &payload).unwrap());
                    written.push((lsn, end));
                    lsn = end;
                }
                if rng.chance(0.7) {
                    synced = log.sync().unwrap();
                } else if rng.chance(0.5) {
                    // A cut (as a restarted primary asks), then records of another history.
                    let keep = written.iter().map(|w| w.1).rfind(|&e| e <= synced).unwrap_or(0);
                    assert_eq!(log.truncate_after(keep).unwrap(), keep);
                    written.retain(|w| w.1 <= keep);
                    lsn = keep;
                    synced = keep;
                }
            }
            // Pending records are written (not synced) by a last sync attempt that the power
            // cut interrupts half the time.
            if rng.chance(0.5) {
                let _ = log.sync();
            }
            drop(log);
            css.crash(&mut rng);
            let log = ReplicaLog::open(st.clone(), 0).unwrap();
            let end = log.end_lsn();
            assert!(end >= synced, "seed {seed}: synced records lost ({end} < {synced})");
            let mut t = log.tail().unwrap();
            let mut got = Vec::new();
            while let Some(r) = t.next_record().unwrap() {
                got.push((r.lsn, r.end));
            }
            assert_eq!(&got[..], &written[..got.len()], "seed {seed}: a record that was never written");
            assert_eq!(got.last().map_or(0, |g| g.1), end);
            // Appending after the cut tail, then reopening, finds exactly those records.
            assert!(log.append_at(end, end + 10, 9, b"after").unwrap());
            log.sync().unwrap();
            drop(t);
            drop(log);
            assert_eq!(ReplicaLog::open(st, 0).unwrap().end_lsn(), end + 10, "seed {seed}");
        }
    }

    #[test]
    fn a_failed_sync_keeps_its_records_for_the_next_one() {
        use crate::io::{HookedStorage, IoError, IoHook, IoOpKind, IoResult, MemStorage};
        use std::sync::atomic::AtomicBool;
        /// Refuses writes (a full disk) while set.
        struct Full(AtomicBool);
        impl IoHook for Full {
            fn before(&self, device: &str, op: IoOpKind, offset: u64, len: usize) -> IoResult<()> {
                if op == IoOpKind::Write && self.0.load(Ordering::SeqCst) {
                    return Err(IoError::os(device, op, offset, len, std::io::Error::from_raw_os_error(28)));
                }
                Ok(())
            }
        }
        let full = Arc::new(Full(AtomicBool::new(false)));
        let st: Arc<dyn Storage> = Arc::new(HookedStorage::new(Arc::new(MemStorage::new()), full.clone()));
        let log = ReplicaLog::open(st.clone(), 0).unwrap();
        assert!(log.append_at(0, 100, 9, b"one").unwrap());
        assert_eq!(log.sync().unwrap(), 100);
        full.0.store(true, Ordering::SeqCst);
        assert!(log.append_at(100, 200, 9, b"two").unwrap());
        assert!(log.sync().is_err(), "the disk is full");
        assert_eq!(log.durable_lsn(), 100);
        full.0.store(false, Ordering::SeqCst);
        assert!(log.append_at(200, 300, 9, b"three").unwrap());
        // The next sync writes "two" as well: acknowledging 300 without it would hide a gap.
        assert_eq!(log.sync().unwrap(), 300);
        drop(log);
        let log = ReplicaLog::open(st, 0).unwrap();
        let mut t = log.tail().unwrap();
        let mut got = Vec::new();
        while let Some(r) = t.next_record().unwrap() {
            got.push(r.payload);
        }
        assert_eq!(got, vec![b"one".to_vec(), b"two".to_vec(), b"three".to_vec()]);
    }

    #[test]
    fn a_torn_write_that_leaves_a_partial_block_is_cut_at_open() {
        use crate::io::{CrashSimStorage, WriteFate};
        let css = Arc::new(CrashSimStorage::new());
        let st: Arc<dyn Storage> = css.clone();
        let log = ReplicaLog::open(st.clone(), 0).unwrap();
        // The first record ends a little past the first block; the second starts there.
        assert!(log.append_at(0, 100, 9, &[1u8; 4080]).unwrap());
        assert_eq!(log.sync().unwrap(), 100);
        assert!(log.append_at(100, 7000, 9, &[5u8; 3000]).unwrap());
        assert_eq!(log.sync().unwrap(), 7000);
        drop(log);
        // The same bytes, written once and not synced, as a group commit that the power cut
        // tears after 9 of its sectors (4608 bytes) leaves them.
        let dev = css.open(LOG_FILE, false).unwrap();
        let mut b = AlignedBuf::new(8192);
        dev.read_at(0, &mut b).unwrap();
        let fresh = CrashSimStorage::new();
        let d2 = fresh.open(LOG_FILE, true).unwrap();
        write_start(&fresh, Start { lsn: 0, off: 0 }).unwrap();
        d2.write_at(0, &b).unwrap();
        fresh.crash_with(|_, _, _| WriteFate::Torn(9));
        assert_eq!(d2.capacity(), 4608, "the device ends inside a block");
        let log = ReplicaLog::open(Arc::new(fresh), 0).unwrap();
        assert_eq!(log.end_lsn(), 100, "the torn record (its header in the last, partial block) is cut");
    }
}
