//! Write-ahead logging.
//!
//! Owns: the [`LogSink`] seam — append bytes, ask for the persisted position, wait until a
//! position is persisted — that the duplexed file log, the `xlog` fast path and replication all
//! implement. Invariant of every sink: `durable_lsn()` never runs ahead of bytes that would
//! survive a crash, and it never goes backwards.

use crate::Result;

/// A log sequence number: the byte position just past a record in the logical log stream.
pub type Lsn = u64;

/// Where log bytes go.
pub trait LogSink: Send + Sync {
    /// Appends `bytes` (one or more whole records) to the log. Returns the LSN range
    /// `[start, end)` the bytes occupy. The bytes are not durable until `durable_lsn() >= end`.
    fn append(&self, bytes: &[u8]) -> Result<(Lsn, Lsn)>;

    /// The position up to which every appended byte is durable.
    fn durable_lsn(&self) -> Lsn;

    /// Blocks until `durable_lsn() >= lsn`, starting a flush if none covers it, and returns the
    /// durable position reached.
    fn wait_durable(&self, lsn: Lsn) -> Result<Lsn>;
}
