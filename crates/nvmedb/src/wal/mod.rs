//! Write-ahead logging.
//!
//! Owns: the [`LogSink`] seam — append bytes, ask for the persisted position, wait until a
//! position is persisted — that the duplexed file log, the `xlog` fast path and replication all
//! implement; and its first implementation, [`FileLog`]: CRC32C-checked records with LSNs,
//! segment files with recycling, group commit, and log duplexing (every flush goes to two
//! storages in parallel, a commit waits for both, and [`LogReader`] uses whichever copy is
//! intact). The byte format is documented in `docs/format-wal.md`.
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
pub use segment::{SegmentDesc, SEGMENT_PREFIX};

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
