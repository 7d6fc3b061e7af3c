//! Options, counters and the recovery summary of the file log.
//!
//! Owns: [`WalOptions`] (with validation that names the offending key), [`WalStats`] and
//! [`RecoveredLog`]. Invariant: options that pass `validate` let every record of at most
//! `max_payload_bytes` fit in one segment together with the largest filler.

use crate::error::{Error, Result};
use crate::wal::format::{BLOCK_BYTES, MAX_FILLER_BYTES, RECORD_HEADER_BYTES, SEGMENT_HEADER_BLOCK_BYTES};
use crate::wal::Lsn;

/// Options of a [`FileLog`](crate::wal::FileLog).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalOptions {
    /// Size of each segment file in bytes (multiple of 4096, at least 64 KiB).
    pub segment_bytes: u64,
    /// Upper bound, in microseconds, on how long a flush leader waits for more committers to
    /// join its batch. It waits only while fewer committers wait than at the end of recent
    /// flushes and the batch is below `max_batch_bytes`, so a lone committer never waits, and
    /// never longer than the average flush takes (so on a 10 µs device it waits at most ~10 µs).
    /// 0 (the default): a flush starts as soon as the device is free — no flush runs — and
    /// commits that arrive while one runs share the next one (`nvmedb lab commit --logs
    /// single,single+wait200` compares the two).
    pub group_commit_wait_us: u64,
    /// A batch is sealed (and its flush may start without waiting) once it holds this many
    /// bytes; one flush writes at most this plus one record and the filler.
    pub max_batch_bytes: usize,
    /// Sealed batches that may wait for the flusher; appenders block beyond it.
    pub max_queued_batches: usize,
    /// Segments freed by `truncate_before` kept for recycling; the rest are deleted.
    pub keep_free_segments: usize,
    /// LSN at which a log that does not exist yet starts (an existing log keeps its own). A new
    /// log for an existing database must start above every page LSN already on disk.
    pub initial_lsn: u64,
    /// When a flush ends, wake only the committers it made durable, plus one that is not yet
    /// covered to lead the next flush (instead of waking every waiter, most of which would go
    /// back to sleep). Saves context switches on machines with few cores.
    pub targeted_wakeups: bool,
    /// Log bytes written since the last checkpoint after which the log asks the database for
    /// another (like PostgreSQL's `max_wal_size`): it bounds the log's size on disk and the
    /// redo work of a recovery. 0: never ask (checkpoints only at open, close and on demand).
    pub checkpoint_after_bytes: u64,
}

impl Default for WalOptions {
    fn default() -> Self {
        Self {
            segment_bytes: 64 << 20,
            group_commit_wait_us: 0,
            max_batch_bytes: 1 << 20,
            max_queued_batches: 4,
            keep_free_segments: 4,
            initial_lsn: 0,
            targeted_wakeups: true,
            checkpoint_after_bytes: 1 << 30,
        }
    }
}

impl WalOptions {
    /// Checks every option; the error names the offending key.
    pub fn validate(&self) -> Result<()> {
        let cfg = |key: &str, detail: String| Err(Error::Config { key: format!("wal.{key}"), detail });
        if !self.segment_bytes.is_multiple_of(BLOCK_BYTES as u64) || self.segment_bytes < 64 * 1024 {
            return cfg(
                "segment_bytes",
                format!("{} must be a multiple of 4096 and >= 65536", self.segment_bytes),
            );
        }
        if self.max_batch_bytes < BLOCK_BYTES || self.max_batch_bytes as u64 > self.segment_bytes / 2 {
            return cfg(
                "max_batch_bytes",
                format!("{} must be between 4096 and half the segment size", self.max_batch_bytes),
            );
        }
        if self.max_queued_batches == 0 || self.max_queued_batches > 1024 {
            return cfg("max_queued_batches", format!("{} must be in 1..=1024", self.max_queued_batches));
        }
        if self.group_commit_wait_us > 1_000_000 {
            return cfg("group_commit_wait_us", format!("{} must be at most 1 s", self.group_commit_wait_us));
        }
        Ok(())
    }

    /// Largest payload one record may carry with these options.
    pub fn max_payload_bytes(&self) -> usize {
        let room = self.segment_bytes - SEGMENT_HEADER_BLOCK_BYTES - MAX_FILLER_BYTES as u64;
        (room as usize - RECORD_HEADER_BYTES).min(u32::MAX as usize)
    }
}

/// Counters of a [`FileLog`](crate::wal::FileLog) since it was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WalStats {
    /// Records appended (fillers excluded).
    pub records_appended: u64,
    /// Calls of `wait_durable` that returned `Ok` ("commits").
    pub commits: u64,
    /// Flushes performed (each writes both copies and syncs both).
    pub flushes: u64,
    /// Records made durable by those flushes (fillers excluded).
    pub records_flushed: u64,
    /// Bytes written to the device per copy (segment header blocks included, and each flush's
    /// whole blocks: the re-written start of its first block and the zeroes after its end).
    pub bytes_written: u64,
    /// Bytes of the log stream the flushes made durable (the records; the LSN advance): the
    /// log's volume, which it keeps, ships to standbys and recovery reads.
    pub durable_bytes: u64,
    /// Bytes of filler records written per copy (the file log no longer pads its flushes; the
    /// fast log pads its pages).
    pub filler_bytes: u64,
    /// Segments started in a new slot file.
    pub segments_created: u64,
    /// Segments started in a recycled slot file.
    pub segments_recycled: u64,
    /// Mini-transactions that waited at the log's space gate for a checkpoint to free space
    /// ([`RecordLog::wait_for_space`](crate::wal::RecordLog::wait_for_space); the fast log).
    pub space_gate_waits: u64,
    /// Group-commit sizes: how many waiting committers each flush released, counted per
    /// flush that released any, in the buckets of [`COUNT_BOUNDS`](crate::util::hist::COUNT_BOUNDS)
    /// (1, 2, 4, ... 1024, then more).
    pub group_commit_sizes: [u64; GROUP_BUCKETS],
}

/// Buckets of [`WalStats::group_commit_sizes`].
pub const GROUP_BUCKETS: usize = crate::util::hist::COUNT_BOUNDS.len() + 1;

impl WalStats {
    /// Counts one flush that released `n` waiting committers (none: not counted).
    pub(crate) fn count_group(&mut self, n: usize) {
        if n > 0 {
            let i = crate::util::hist::COUNT_BOUNDS.partition_point(|&b| b < n as u64);
            self.group_commit_sizes[i] += 1;
        }
    }

    /// [`WalStats::group_commit_sizes`] as a histogram snapshot (the sum is not kept: each
    /// flush's size counts as its bucket's upper bound, the overflow bucket's as 2048).
    pub fn group_commit_histogram(&self) -> crate::util::hist::HistogramSnapshot {
        let bounds = crate::util::hist::COUNT_BOUNDS.to_vec();
        let sum = self
            .group_commit_sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| n * bounds.get(i).copied().unwrap_or(2 * bounds[bounds.len() - 1]))
            .sum();
        crate::util::hist::HistogramSnapshot { bounds, counts: self.group_commit_sizes.to_vec(), sum }
    }
}

/// What open found in the storages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveredLog {
    /// Identifier of the log (random, fixed at creation).
    pub log_id: u64,
    /// Base LSN of the oldest live segment (0 for a new log).
    pub start_lsn: Lsn,
    /// End of the recovered log: appends continue here.
    pub end_lsn: Lsn,
    /// Live segments found.
    pub segments: usize,
    /// True when nothing was found and a new log was started.
    pub created: bool,
}
