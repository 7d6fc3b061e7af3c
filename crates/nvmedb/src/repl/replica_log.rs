//! [`ReplicaLog`]: the standby's own log, holding the primary's records at the primary's LSNs.
//!
//! Owns: one file `log.dat` of checksummed records (header `crc:u32 | lsn:u64 | end:u64 |
//! kind:u8 | len:u32`, then the payload; the CRC32C covers everything after the crc field) and
//! `log.start` (the LSN at which the log begins, fixed at creation). Records are written with
//! ordinary buffered writes and made durable with `fdatasync` (group commit: one sync covers
//! every record appended before it).
//!
//! The file is kept filled with zeroes ahead of the writes ([`Preparer`], as the primary's log
//! segments are: a background thread fills the next 8 MiB, block-aligned, while the group
//! commits write below): a write that extends a file makes its `fdatasync` also write the
//! file's size and allocation, a second device write per group commit. So the file is longer
//! than its records, and its end is where the records end (the first short or damaged record),
//! never its length; readers read only up to the durable end ([`TailReader`]), so none holds
//! zeroes that records later overwrite.
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

use crate::error::{Error, Result};
use crate::io::{Device, EmulatedDevice, FileDevice, MemDevice};
use crate::util::bytes::{u32_at, u64_at};
use crate::util::sync::MutexExt;
use crate::wal::prepare::Preparer;
use crate::wal::{LogRecord, Lsn, RecordReader, RecoveredLog, WalStats};
use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Bytes of a replica record header.
pub const REPLICA_HEADER_BYTES: usize = 4 + 8 + 8 + 1 + 4;
const LOG_FILE: &str = "log.dat";
const START_FILE: &str = "log.start";

fn io_err(path: &Path, what: &str, e: std::io::Error) -> Error {
    Error::Io(crate::io::IoError::os(
        &format!("{} ({what})", path.display()),
        crate::io::IoOpKind::Setup,
        0,
        0,
        e,
    ))
}

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
    file: File,
    /// Bytes of the file that are written and synced (offsets below `start_off` are a hole).
    len: u64,
    /// The [`Preparer`]'s number for the file as it is now: a truncation that cuts the file
    /// starts a new one, so no fill of the old range lands after the cut.
    gen: u64,
}

/// Filling the log file with zeroes ahead of the group-commit writes: the preparer, its
/// background thread, and the file opened as a [`Device`] for it.
struct Ahead {
    preparer: Arc<Preparer>,
    dev: Arc<dyn Device>,
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
    dir: PathBuf,
    start: Mutex<Start>,
    pending: Mutex<Pending>,
    flushed: Mutex<Flushed>,
    durable: AtomicU64,
    durable_len: AtomicU64,
    recovered: RecoveredLog,
    stats: Mutex<WalStats>,
    /// The emulated device the log's writes are charged to (None: the file's own sync).
    device: Mutex<Option<Arc<EmulatedDevice<MemDevice>>>>,
    ahead: Ahead,
}

impl Drop for ReplicaLog {
    fn drop(&mut self) {
        self.ahead.preparer.stop();
        if let Some(t) = self.ahead.thread.locked().take() {
            let _ = t.join();
        }
    }
}

impl std::fmt::Debug for ReplicaLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ReplicaLog({}, end {})", self.dir.display(), self.end_lsn())
    }
}

/// `log.start`: lsn u64 | offset u64 | crc u32 (an older 12-byte form without the offset is
/// read as offset 0).
fn read_start(dir: &Path) -> Result<Option<Start>> {
    let sp = dir.join(START_FILE);
    match std::fs::read(&sp) {
        Ok(b) if b.len() == 20 && crate::util::crc32c(&b[..16]).to_le_bytes() == b[16..20] => {
            Ok(Some(Start { lsn: u64_at(&b, 0), off: u64_at(&b, 8) }))
        }
        Ok(b) if b.len() == 12 && crate::util::crc32c(&b[..8]).to_le_bytes() == b[8..12] => {
            Ok(Some(Start { lsn: u64_at(&b, 0), off: 0 }))
        }
        Ok(_) => Err(Error::Corruption {
            file: sp.display().to_string(),
            offset: 0,
            detail: "replica log start file is damaged".into(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(&sp, "read", e)),
    }
}

fn write_start(dir: &Path, st: Start) -> Result<()> {
    let sp = dir.join(START_FILE);
    let mut b = st.lsn.to_le_bytes().to_vec();
    b.extend_from_slice(&st.off.to_le_bytes());
    b.extend_from_slice(&crate::util::crc32c(&b).to_le_bytes());
    let tmp = dir.join("log.start.tmp");
    let mut f = File::create(&tmp).map_err(|e| io_err(&tmp, "create", e))?;
    f.write_all(&b).and_then(|()| f.sync_all()).map_err(|e| io_err(&tmp, "write", e))?;
    std::fs::rename(&tmp, &sp).map_err(|e| io_err(&sp, "rename", e))?;
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io_err(dir, "sync dir", e))
}

/// What [`scan`] found: the end LSN, the last record's (LSN, CRC), and the file length the
/// records take.
type Scanned = (Lsn, Option<(Lsn, u32)>, u64);

/// Reads the file from `st.off` and returns what the records that follow each other from there
/// cover; the first short or damaged record ends them (a torn tail). `stop_after` keeps only
/// records ending at or below it.
fn scan(file: &mut File, path: &Path, st: Start, stop_after: Lsn) -> Result<Scanned> {
    file.seek(SeekFrom::Start(st.off)).map_err(|e| io_err(path, "seek", e))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(|e| io_err(path, "read", e))?;
    let (mut off, mut end, mut last) = (0usize, st.lsn, None);
    while let Ok(Some((r, n))) = decode_record_ref(&bytes[off..]) {
        if r.lsn < end || r.end > stop_after {
            break;
        }
        end = r.end;
        last = Some((r.lsn, r.crc));
        off += n;
    }
    Ok((end, last, st.off + off as u64))
}

impl ReplicaLog {
    /// Opens the replica log in `dir`, creating it (beginning at `start_if_new`) when absent.
    /// Cuts a torn tail.
    pub fn open(dir: &Path, start_if_new: Lsn) -> Result<Arc<Self>> {
        std::fs::create_dir_all(dir).map_err(|e| io_err(dir, "create", e))?;
        let st = match read_start(dir)? {
            Some(st) => st,
            None => {
                let st = Start { lsn: start_if_new, off: 0 };
                write_start(dir, st)?;
                st
            }
        };
        let lp = dir.join(LOG_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lp)
            .map_err(|e| io_err(&lp, "open", e))?;
        let (end, last, len) = scan(&mut file, &lp, st, Lsn::MAX)?;
        let file_len = file.metadata().map_err(|e| io_err(&lp, "stat", e))?.len();
        if len < file_len {
            file.set_len(len).and_then(|()| file.sync_all()).map_err(|e| io_err(&lp, "cut torn tail", e))?;
        }
        file.seek(SeekFrom::Start(len)).map_err(|e| io_err(&lp, "seek", e))?;
        let recovered =
            RecoveredLog { log_id: 0, start_lsn: st.lsn, end_lsn: end, segments: 1, created: false };
        let dev: Arc<dyn Device> = Arc::new(FileDevice::open(&lp).map_err(Error::Io)?);
        let preparer = Arc::new(Preparer::new());
        preparer.restart(0, len - len % PREPARE_ALIGN);
        let p2 = preparer.clone();
        let thread = std::thread::Builder::new()
            .name("nvmedb-replica-prepare".into())
            .spawn(move || p2.run())
            .map_err(|e| io_err(&lp, "start the thread that prepares the log file", e))?;
        Ok(Arc::new(Self {
            dir: dir.to_path_buf(),
            start: Mutex::new(st),
            pending: Mutex::new(Pending { buf: Vec::new(), end, last, records: 0 }),
            flushed: Mutex::new(Flushed { file, len, gen: 0 }),
            durable: AtomicU64::new(end),
            durable_len: AtomicU64::new(len),
            recovered,
            stats: Mutex::new(WalStats::default()),
            device: Mutex::new(None),
            ahead: Ahead { preparer, dev, thread: Mutex::new(Some(thread)) },
        }))
    }

    /// Starts a new preparation of the file from `len` (after a cut): waits for a fill in
    /// progress, so none lands past the cut.
    fn restart_preparation(&self, f: &mut Flushed, len: u64) {
        f.gen += 1;
        self.ahead.preparer.restart(f.gen, len - len % PREPARE_ALIGN);
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
        let lp = self.dir.join(LOG_FILE);
        let device = self.device.locked().clone();
        if device.is_none() {
            // Backed up to the next block boundary past this write, and 8 MiB ahead of it.
            let write_end = (f.len + buf.len() as u64).next_multiple_of(PREPARE_ALIGN);
            self.ahead.preparer.before_write(
                f.gen,
                std::slice::from_ref(&self.ahead.dev),
                write_end,
                u64::MAX,
            )?;
        }
        let submitted = std::time::Instant::now();
        f.file.write_all(&buf).and_then(|()| f.file.sync_data()).map_err(|e| io_err(&lp, "write", e))?;
        if let Some(d) = device {
            d.charge_write(f.len, buf.len(), submitted);
        }
        f.len += buf.len() as u64;
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
    /// legal). Returns the new end.
    pub fn truncate_after(&self, lsn: Lsn) -> Result<Lsn> {
        let mut f = self.flushed.locked();
        let mut p = self.pending.locked();
        p.buf.clear();
        p.records = 0;
        let lp = self.dir.join(LOG_FILE);
        let st = *self.start.locked();
        let mut rf = File::open(&lp).map_err(|e| io_err(&lp, "open", e))?;
        let (end, last, len) = scan(&mut rf, &lp, st, lsn)?;
        let len = len.min(f.len);
        self.restart_preparation(&mut f, len);
        f.file.set_len(len).and_then(|()| f.file.sync_all()).map_err(|e| io_err(&lp, "truncate", e))?;
        f.file.seek(SeekFrom::Start(len)).map_err(|e| io_err(&lp, "seek", e))?;
        f.len = len;
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
        write_start(&self.dir, new)?;
        *self.start.locked() = new;
        let hole = new.off / 4096 * 4096;
        if hole > 0 {
            let lp = self.dir.join(LOG_FILE);
            let file = OpenOptions::new().write(true).open(&lp).map_err(|e| io_err(&lp, "open", e))?;
            use std::os::fd::AsRawFd;
            // SAFETY: fallocate on an open file descriptor with a valid range; it only frees
            // blocks of the file (reads of the range return zeros, which nothing reads: the log
            // begins after it).
            let r = unsafe {
                libc::fallocate(
                    file.as_raw_fd(),
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    0,
                    hole as libc::off_t,
                )
            };
            if r != 0 {
                // Not every file system punches holes: the log is still correct, only larger.
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EOPNOTSUPP) {
                    return Err(io_err(&lp, "punch hole", e));
                }
            }
        }
        Ok(new.off - st.off)
    }

    /// Empties the log and makes it begin at `start` (a base backup replaces the standby's data
    /// and log).
    pub fn reset(&self, start: Lsn) -> Result<()> {
        let mut f = self.flushed.locked();
        let mut p = self.pending.locked();
        let lp = self.dir.join(LOG_FILE);
        self.restart_preparation(&mut f, 0);
        f.file.set_len(0).and_then(|()| f.file.sync_all()).map_err(|e| io_err(&lp, "truncate", e))?;
        f.file.seek(SeekFrom::Start(0)).map_err(|e| io_err(&lp, "seek", e))?;
        let st = Start { lsn: start, off: 0 };
        write_start(&self.dir, st)?;
        *self.start.locked() = st;
        f.len = 0;
        *p = Pending { buf: Vec::new(), end: start, last: None, records: 0 };
        self.durable_len.store(0, Ordering::Release);
        self.durable.store(start, Ordering::Release);
        Ok(())
    }

    /// A reader that follows the log as it grows, from its first record.
    pub fn tail(self: &Arc<Self>) -> Result<TailReader> {
        let lp = self.dir.join(LOG_FILE);
        let file = File::open(&lp).map_err(|e| io_err(&lp, "open", e))?;
        let mut t = TailReader {
            log: self.clone(),
            file: BufReader::with_capacity(1 << 20, Durable { file, pos: 0, log: self.clone() }),
            offset: 0,
            path: lp,
        };
        t.seek_to(self.start_off())?;
        Ok(t)
    }
}

/// The log file read only below its durable length: the file holds zeroes past its records
/// (prepared ahead), which a buffered reader must never keep, since records later replace them.
struct Durable {
    file: File,
    pos: u64,
    log: Arc<ReplicaLog>,
}

impl Read for Durable {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let limit = self.log.durable_len.load(Ordering::Acquire);
        let n = (limit.saturating_sub(self.pos)).min(buf.len() as u64) as usize;
        if n == 0 {
            return Ok(0);
        }
        let got = self.file.read(&mut buf[..n])?;
        self.pos += got as u64;
        Ok(got)
    }
}

impl Seek for Durable {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        self.pos = self.file.seek(to)?;
        Ok(self.pos)
    }
}

/// Reads a [`ReplicaLog`] sequentially, only as far as it is durable, resuming where it left off.
pub struct TailReader {
    log: Arc<ReplicaLog>,
    file: BufReader<Durable>,
    offset: u64,
    path: PathBuf,
}

impl TailReader {
    /// Byte offset of the next record in the file.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Repositions at byte offset `off` (a record start this reader returned before).
    pub fn seek_to(&mut self, off: u64) -> Result<()> {
        self.file.seek(SeekFrom::Start(off)).map_err(|e| io_err(&self.path, "seek", e))?;
        self.offset = off;
        Ok(())
    }

    /// The next durable record, `None` when the reader has caught up with the durable end.
    pub fn next_record(&mut self) -> Result<Option<ShippedRecord>> {
        let limit = self.log.durable_len.load(Ordering::Acquire);
        if self.offset + REPLICA_HEADER_BYTES as u64 > limit {
            return Ok(None);
        }
        let mut head = [0u8; REPLICA_HEADER_BYTES];
        self.file.read_exact(&mut head).map_err(|e| io_err(&self.path, "read", e))?;
        let len = u32_at(&head, 21) as usize;
        // The payload is read straight into the record's own buffer (one copy).
        let mut payload = vec![0u8; len];
        self.file.read_exact(&mut payload).map_err(|e| io_err(&self.path, "read", e))?;
        let off = self.offset;
        let (lsn, end) = check_record(&head, &payload).map_err(|detail| Error::Corruption {
            file: self.path.display().to_string(),
            offset: off,
            detail,
        })?;
        let n = (REPLICA_HEADER_BYTES + len) as u64;
        assert!(off + n <= limit, "durable length cuts a record");
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
            "standby replica log (buffered writes + fdatasync, primary's LSNs) in {}",
            self.0.dir.display()
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

    #[test]
    fn records_keep_the_primarys_lsns_and_survive_reopen_with_a_torn_tail() {
        let d = tmp("reopen");
        let log = ReplicaLog::open(&d, 100).unwrap();
        assert!(log.append_at(100, 140, 9, b"a").unwrap());
        assert!(log.append_at(4096, 4200, 10, b"bb").unwrap());
        assert!(!log.append_at(100, 140, 9, b"a").unwrap(), "a re-shipped record is skipped");
        assert!(log.append_at(4100, 4300, 10, b"x").is_err(), "overlap is refused");
        assert_eq!(log.durable_lsn(), 100);
        assert_eq!(log.sync().unwrap(), 4200);
        let records_end = log.durable_len.load(Ordering::Acquire);
        drop(log);
        // Write a torn record by hand where the records end (the file is longer: prepared ahead).
        let mut f = OpenOptions::new().write(true).open(d.join(LOG_FILE)).unwrap();
        assert!(f.metadata().unwrap().len() > records_end);
        f.seek(SeekFrom::Start(records_end)).unwrap();
        let mut rec = Vec::new();
        encode_record(&mut rec, 5000, 5100, 11, b"torn");
        f.write_all(&rec[..rec.len() - 2]).unwrap();
        drop(f);
        let log = ReplicaLog::open(&d, 0).unwrap();
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
        assert_eq!(ReplicaLog::open(&d, 0).unwrap().end_lsn(), 140);
    }

    #[test]
    fn the_file_is_backed_ahead_of_the_records_and_its_end_is_where_the_records_end() {
        use std::os::unix::fs::MetadataExt;
        let d = tmp("ahead");
        let log = ReplicaLog::open(&d, 0).unwrap();
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
        let m = std::fs::metadata(d.join(LOG_FILE)).unwrap();
        // Prepared: allocated zeroes at least half a preparation window past the records.
        assert!(
            m.len() >= records + crate::wal::prepare::PREPARE_AHEAD_BYTES / 2,
            "{} vs {records}",
            m.len()
        );
        assert!(m.blocks() * 512 >= m.len(), "the file is backed, not sparse: {m:?}");
        drop(log);
        // Reopened: the end is the last record's, the zeroes past it are cut, and appends go on.
        let log = ReplicaLog::open(&d, 0).unwrap();
        assert_eq!(log.end_lsn(), *ends.last().unwrap());
        assert_eq!(std::fs::metadata(d.join(LOG_FILE)).unwrap().len(), records);
        assert!(log.append_at(lsn, lsn + 100, 10, b"after reopen").unwrap());
        assert_eq!(log.sync().unwrap(), lsn + 100);
        drop(log);
        let log = ReplicaLog::open(&d, 0).unwrap();
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
        let log = ReplicaLog::open(&d, 0).unwrap();
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
        let log = ReplicaLog::open(&d, 100).unwrap();
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
        assert_eq!(ReplicaLog::open(&d, 0).unwrap().end_lsn(), 300);
    }

    #[test]
    fn truncate_before_releases_the_prefix_and_survives_reopen() {
        let d = tmp("trunc");
        let log = ReplicaLog::open(&d, 0).unwrap();
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
        let m = std::fs::metadata(d.join(LOG_FILE)).unwrap();
        assert!(m.blocks() * 512 < m.len(), "the prefix's blocks were not released");
        drop(h);
        drop(log);
        let log = ReplicaLog::open(&d, 0).unwrap();
        assert_eq!((log.start_lsn(), log.end_lsn()), (first, end));
        assert_eq!(log.truncate_after(first + 3100).unwrap(), first + 3100);
        log.reset(500_000).unwrap();
        assert_eq!((log.start_lsn(), log.end_lsn(), log.last_record()), (500_000, 500_000, None));
        assert!(log.append_at(500_000, 500_100, 9, b"x").unwrap());
        assert_eq!(log.sync().unwrap(), 500_100);
        drop(log);
        assert_eq!(ReplicaLog::open(&d, 0).unwrap().end_lsn(), 500_100);
    }
}
