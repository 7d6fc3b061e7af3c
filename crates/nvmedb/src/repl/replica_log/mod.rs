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
use crate::util::bytes::u64_at;
use crate::util::sync::MutexExt;
use crate::wal::prepare::Preparer;
use crate::wal::{Lsn, RecoveredLog, WalStats};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

mod blocks;
mod record;
mod tail;
#[cfg(test)]
mod tests;

use blocks::{dirty_end, release_blocks, scan, zero_after, BlockReader};
pub(crate) use record::{decode_record_ref, RecordRef};
pub use record::{encode_record, record_crc, ShippedRecord};
pub use tail::{ReplicaLogHandle, ReplicaLogOpener, TailReader};

const LOG_FILE: &str = "log.dat";
const START_FILE: &str = "log.start";

/// Bytes read from the device at a time by a reader (a reader allocates its window at its
/// first read).
const READ_WINDOW: usize = 128 << 10;

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
