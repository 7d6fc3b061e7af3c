//! Write-ahead logging.
//!
//! Owns: the [`LogSink`] seam — append bytes, ask for the persisted position, wait until a
//! position is persisted — that the duplexed file log, the `xlog` fast path and replication all
//! implement; and its first implementation, [`FileLog`]: CRC32C-checked records with LSNs,
//! segment files with recycling, group commit, and log duplexing (every flush goes to two
//! storages in parallel, a commit waits for both, and [`LogReader`] uses whichever copy is
//! intact). The byte format is documented in `docs/format-wal.md`.
//!
//! # Using the file log
//!
//! - Open (or create) with [`FileLog::open`]`(primary, secondary, `[`WalOptions`]`)`: two
//!   [`Storage`](crate::io::Storage)s, ideally on two devices. Open finds the end of the log
//!   (using whichever copy is intact) and [`FileLog::recovered`] says where it is.
//! - Recovery reads with [`FileLog::reader`]`(from_lsn)` (or [`LogReader::open`] on the
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
//! live chain), `reader.rs` (reading back, torn tail vs corruption), `filelog.rs` (the writer:
//! batching, group commit, segment switch), `duplex.rs` (the second copy's writer thread),
//! `options.rs` (options, counters).

mod duplex;
mod filelog;
mod format;
mod options;
mod reader;
mod segment;

pub use filelog::FileLog;
pub use format::{
    BLOCK_BYTES, FORMAT_VERSION, KIND_DATA, KIND_FILLER, KIND_USER_MIN, RECORD_HEADER_BYTES,
    SEGMENT_HEADER_BLOCK_BYTES,
};
pub use options::{RecoveredLog, WalOptions, WalStats};
pub use reader::{LogReader, LogRecord};
pub use segment::{live_segments, SegmentDesc, SEGMENT_PREFIX};

use crate::Result;

/// A log sequence number: the byte position just past a record in the logical log stream.
pub type Lsn = u64;

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
