//! Write-ahead logging.
//!
//! Owns: the [`LogSink`] seam — append bytes, ask for the persisted position, wait until a
//! position is persisted — that the duplexed file log, the `xlog` fast path and replication all
//! implement; and its first implementation, [`FileLog`]: CRC32C-checked records with LSNs,
//! segment files with recycling (also across opens), group commit, and optional log duplexing
//! (every flush goes to two storages in parallel, a commit waits for both, and [`LogReader`]
//! uses whichever copy is intact). The byte format is documented in `docs/format-wal.md`.
//!
//! # Using the file log
//!
//! - Open (or create) with [`FileLog::open_single`]`(storage, `[`WalOptions`]`)`, or duplexed
//!   with [`FileLog::open`]`(primary, secondary, options)` on two [`Storage`]s, ideally on two
//!   devices. Open finds the end of the log (using whichever copy is intact) and
//!   [`FileLog::recovered`] says where it is.
//! - Recovery reads with [`FileLog::reader`]`(from_lsn)` (or [`LogReader::open_copies`] on the
//!   storages): an iterator of [`LogRecord`] `{ lsn, end_lsn, kind, payload }` in LSN order.
//!   A damaged record in the middle of the log is `Error::Corruption { file, offset, .. }`.
//! - Log with [`LogSink::append`] (kind [`KIND_DATA`]) or [`FileLog::append_record`]`(kind,
//!   payload)` with kinds `>= KIND_USER_MIN`; both return `[start, end)`. Commit with
//!   [`LogSink::wait_durable`]`(end)`; concurrent commits share flushes (group commit).
//!   A page changed by a record may be written back once `durable_lsn() >= end`.
//! - After a checkpoint, [`FileLog::truncate_before`]`(redo_start_lsn)` releases old segments
//!   for recycling. [`FileLog::stats`] counts commits, flushes and bytes.
//!
//! Invariant of every sink: `durable_lsn()` never runs ahead of bytes that would survive a
//! crash, and it never goes backwards.
//!
//! Files: `format.rs` (record and segment header encoding), `segment.rs` (slots and finding the
//! live chain), `reader.rs` (reading back, torn tail vs corruption), `filelog/` (the writer:
//! batching, group commit, segment switch), `duplex.rs` (the second copy's writer thread, for
//! copies on devices whose writes do not overlap in one thread, such as real files),
//! `options.rs` (options, counters).

mod duplex;
pub mod engine;
mod filelog;
mod format;
mod options;
pub(crate) mod prepare;
mod reader;
mod segment;
mod txnop;
pub mod volume;

pub use filelog::FileLog;
pub use format::{
    SegmentHeader, BLOCK_BYTES, FORMAT_VERSION, KIND_DATA, KIND_FILLER, KIND_USER_MIN, RECORD_HEADER_BYTES,
    SEGMENT_HEADER_BLOCK_BYTES,
};
pub use options::{RecoveredLog, WalOptions, WalStats};
pub use reader::{LogReader, LogRecord};
pub(crate) use segment::read_clamped;
pub use segment::{
    cut_at, live_segments, parse_slot, read_segment_header, slot_name, SegmentDesc, SEGMENT_PREFIX,
};
pub use volume::{log_volume, thread_log_bytes, LogVolume};

use crate::error::Result;
use crate::io::Storage;
use std::sync::Arc;

/// A log sequence number: the byte position just past a record in the logical log stream.
pub type Lsn = u64;

/// Reads records of a [`RecordLog`] in LSN order.
pub trait RecordReader: Send {
    /// The next record, `None` at the end of the readable log. A damaged record in the middle
    /// of the log is [`Error::Corruption`](crate::Error::Corruption) naming the file and offset.
    fn next_record(&mut self) -> Result<Option<LogRecord>>;
}

impl RecordReader for LogReader {
    fn next_record(&mut self) -> Result<Option<LogRecord>> {
        LogReader::next_record(self)
    }
}

/// A log of typed records, which is what the engine writes (`wal::engine::EngineLog`) and what
/// recovery reads. The [`FileLog`] implements it; so can the `xlog` fast path and a
/// replicating wrapper that adds the standbys' positions to `durable_lsn`.
///
/// Invariants every implementation keeps: LSNs of appended records increase; `durable_lsn()`
/// never runs ahead of records that would survive a crash and never goes backwards; a reader
/// returns exactly the records appended (and made durable) in order.
pub trait RecordLog: Send + Sync {
    /// Appends one record of `kind` (>= [`KIND_USER_MIN`]); returns `[start, end)`.
    fn append_record(&self, kind: u8, payload: &[u8]) -> Result<(Lsn, Lsn)>;
    /// The LSN the next appended record will get.
    fn end_lsn(&self) -> Lsn;
    /// The position up to which every appended record is durable.
    fn durable_lsn(&self) -> Lsn;
    /// Blocks until `durable_lsn() >= lsn` (group commit shares the work); returns the durable
    /// position reached.
    fn wait_durable(&self, lsn: Lsn) -> Result<Lsn>;
    /// What open found: where the readable log starts and ends, and whether it was new.
    fn recovered(&self) -> RecoveredLog;
    /// A reader from `from` (a record start) up to the durable position at this moment.
    fn reader(&self, from: Lsn) -> Result<Box<dyn RecordReader>>;
    /// Releases space of records before `lsn` (which must be durable). Returns how many units
    /// (segments, pages) were freed.
    fn truncate_before(&self, lsn: Lsn) -> Result<usize>;
    /// Counters since open (fields that do not apply stay zero).
    fn stats(&self) -> WalStats;
    /// One line saying what the log is and what durability it gives (for result files).
    fn describe(&self) -> String;
    /// True when the log wants a checkpoint (and the `truncate_before` that ends it): it is
    /// running short of space only a checkpoint frees (the fast log's ring), or it has grown by
    /// its checkpoint volume (the file log, [`WalOptions::checkpoint_after_bytes`]). The
    /// database then checkpoints at the next transaction start.
    fn wants_checkpoint(&self) -> bool {
        false
    }
    /// True when the log ships its records to standbys, which rebuild their files from the
    /// records alone: a page must then be in the log to reach them (a bulk load logs its pages
    /// as images instead of writing them around the log). Default: false.
    fn ships_records(&self) -> bool {
        false
    }
    /// The space gate a mini-transaction passes before it latches pages: a log whose space
    /// only a checkpoint frees (the fast log under retention) makes new mini-transactions
    /// wait here, holding no latch, while it is nearly full, so that neither the checkpoint's
    /// page flush nor its record ever waits for a writer that waits for space
    /// ([`XLog::wait_for_headroom`](crate::xlog::XLog::wait_for_headroom)). Default: no gate.
    fn wait_for_space(&self) -> Result<()> {
        Ok(())
    }
}

/// Opens the log a database uses. Lets [`Database`](crate::Database) open any [`RecordLog`]
/// while still starting a brand-new log above every page LSN of an existing database.
pub trait LogOpener: Send {
    /// True when the log holds no records yet (it will be created).
    fn is_empty(&self) -> Result<bool>;
    /// Opens (or creates) the log; a new log starts at `initial_lsn`.
    fn open(self: Box<Self>, initial_lsn: Lsn) -> Result<Arc<dyn RecordLog>>;
}

/// Opens a [`FileLog`] on its copies: one storage, or two for a duplexed log.
pub struct FileLogOpener {
    /// The copies: one storage, or two (ideally on two devices) for a duplexed log.
    pub copies: Vec<Arc<dyn Storage>>,
    /// Options (`initial_lsn` is set by [`LogOpener::open`]).
    pub options: WalOptions,
}

/// The file in a duplexed log's first copy that remembers where the second copy lives, so a
/// mirror that vanished is an error naming it, never a silent switch to one copy.
pub const MIRROR_MARKER: &str = "mirror";

fn read_marker(storage: &dyn Storage) -> Result<String> {
    let dev = storage.open(MIRROR_MARKER, false)?;
    let mut b = crate::io::AlignedBuf::new(BLOCK_BYTES);
    segment::read_clamped(dev.as_ref(), 0, &mut b)?;
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    Ok(String::from_utf8_lossy(&b[..end]).trim().to_string())
}

fn write_marker(storage: &dyn Storage, mirror: &str) -> Result<()> {
    let dev = storage.open(MIRROR_MARKER, true)?;
    let mut b = crate::io::AlignedBuf::new(BLOCK_BYTES);
    let text = mirror.as_bytes();
    b[..text.len().min(BLOCK_BYTES - 1)].copy_from_slice(&text[..text.len().min(BLOCK_BYTES - 1)]);
    dev.write_at(0, &b)?;
    dev.sync()?;
    Ok(())
}

impl FileLogOpener {
    /// A log that was duplexed must still have its second copy: refuses one copy (the mirror
    /// directory vanished) or an empty second copy beside a first that holds the log.
    fn check_copies(&self) -> Result<()> {
        let first = self.copies[0].as_ref();
        if !first.exists(MIRROR_MARKER) {
            return Ok(());
        }
        let mirror = read_marker(first)?;
        let here = !live_segments(&self.copies[..1])?.is_empty();
        let there = self.copies.get(1).map(|c| live_segments(std::slice::from_ref(c))).transpose()?;
        let lost = match there {
            None => here,
            Some(segs) => here && segs.is_empty(),
        };
        if lost {
            return Err(crate::error::Error::Config {
                key: "log_mirror_dir".into(),
                detail: format!(
                    "the log in {} is duplexed onto {mirror}, which is missing or holds no log files: restore                      that directory (a copy of {} will do: both copies hold the same records), or delete                      {}/{MIRROR_MARKER} to go on with one copy",
                    first.location(),
                    first.location(),
                    first.location()
                ),
            });
        }
        Ok(())
    }
}

impl LogOpener for FileLogOpener {
    fn is_empty(&self) -> Result<bool> {
        self.check_copies()?;
        Ok(live_segments(&self.copies)?.is_empty())
    }

    fn open(self: Box<Self>, initial_lsn: Lsn) -> Result<Arc<dyn RecordLog>> {
        self.check_copies()?;
        let mut options = self.options;
        options.initial_lsn = options.initial_lsn.max(initial_lsn);
        let mirror = self.copies.get(1).map(|m| m.location());
        let first = self.copies[0].clone();
        let log = FileLog::open_copies(self.copies, options)?;
        if let Some(m) = mirror {
            if !first.exists(MIRROR_MARKER) {
                // Remember the second copy (a read-only file system cannot: then nothing
                // writes this log either).
                if let Err(e) = write_marker(first.as_ref(), &m) {
                    eprintln!("nvmedb: cannot record in {} that the log is duplexed: {e}", first.location());
                }
            }
        }
        Ok(Arc::new(log))
    }
}

/// Where log bytes go.
pub trait LogSink: Send + Sync {
    /// Appends `bytes` to the log. Returns the LSN range `[start, end)` the bytes occupy. The
    /// bytes are not durable until `durable_lsn() >= end`. A sink may frame the bytes: the
    /// [`FileLog`] stores them as the payload of one record (header included in the range).
    fn append(&self, bytes: &[u8]) -> Result<(Lsn, Lsn)>;

    /// The position up to which every appended byte is durable.
    fn durable_lsn(&self) -> Lsn;

    /// Blocks until `durable_lsn() >= lsn`, starting a flush if none covers it, and returns the
    /// durable position reached.
    fn wait_durable(&self, lsn: Lsn) -> Result<Lsn>;
}
