//! [`FileLog`]: the segmented, group-committing log on one [`Storage`], or duplexed on two.
//!
//! Owns: LSN assignment, batching of appended records into flushes (group commit), writing
//! each flush to every copy (two copies in parallel) and syncing them, segment switching and
//! recycling (also across opens: `truncate_before` zeroes the header of a released segment, so
//! the next open finds its slot free), keeping the segment backed by storage ahead of the
//! flushes (`wal::prepare`, so a flush's sync writes no allocation metadata), and the durable
//! position. Invariants:
//! - LSNs are byte positions of one continuous stream: record `n + 1` starts where record `n`
//!   ends; a segment's base LSN is exactly where the previous segment's records end.
//! - Batches are not padded: a flush writes whole 4 KiB blocks from the block holding its first
//!   record, whose first part (the end of the previous flush, already durable) it re-writes with
//!   the same bytes, kept in `State::tail`; the rest of its last block is zero. So the log
//!   grows by its records' bytes only, and a torn write (whole 512-byte sectors, old or new)
//!   leaves every earlier record as it was, in each copy: only records of the flush being
//!   written, none of them acknowledged, can be damaged.
//! - At most one flush runs at a time, and a flush starts only after the previous one is
//!   durable on every copy; `durable_lsn` advances only after every copy synced, and never
//!   goes backwards. Records carry the LSN at which their flush began, which lets the reader
//!   tell a torn tail from mid-log corruption.
//! - After open, appends go to a new segment starting at the recovered end, so bytes recovery
//!   may have seen are never overwritten (a recycled slot's stale records carry other LSNs).
//! - A new segment's header is written and synced before any of its records: a slot never
//!   holds records of a segment whose header a crash lost (they would carry the LSNs of the
//!   segment the next open starts at the recovered end).
//! - Queues are bounded: at most `max_queued_batches` sealed batches wait; appenders block.
//! - After an I/O error the log is poisoned: every later call returns `Error::Poisoned`.

//!
//! By seam: this file opens the log (finding the recovered end, recycling slots) and holds the
//! handle and its state; `commit.rs` appends records to the open batch and waits for
//! durability (group commit); `flush.rs` runs one flush (writing a batch to every copy,
//! segment switch, acknowledging the committers it covered).

use crate::error::{Error, Result};
use crate::io::{AlignedBuf, IoError, Storage};
use crate::util::Rng;
use crate::wal::duplex::Helper;
use crate::wal::format::{log_tag, SegmentHeader, KIND_DATA, KIND_USER_MIN, SEGMENT_HEADER_BLOCK_BYTES};
use crate::wal::options::{RecoveredLog, WalOptions, WalStats};
use crate::wal::prepare::Preparer;
use crate::wal::reader::LogReader;
use crate::wal::segment::{discover, Segment, SegmentDesc};
use crate::wal::{LogSink, Lsn};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

mod commit;
mod flush;

/// One batch of records that one flush writes.
#[derive(Debug)]
struct Batch {
    seq: u64,
    new_segment: Option<SegmentHeader>,
    file_off: u64,
    start_lsn: Lsn,
    buf: Vec<u8>,
    records: u64,
}

impl Batch {
    fn end_lsn(&self) -> Lsn {
        self.start_lsn + self.buf.len() as u64
    }
}

/// Where the open batch lives.
#[derive(Debug, Clone, Copy)]
struct Layout {
    seq: u64,
    segment_bytes: u64,
}

struct State {
    next_lsn: Lsn,
    open: Batch,
    layout: Layout,
    sealed: VecDeque<Batch>,
    flushing: bool,
    poisoned: Option<String>,
    chain: Vec<Segment>,
    free_slots: Vec<String>,
    next_slot: u64,
    stats: WalStats,
    /// Committers blocked in `wait_durable`, by the LSN each waits for.
    waiters: BTreeMap<Lsn, usize>,
    /// Sum of the counts in `waiters`.
    waiter_count: usize,
    /// Estimated number of concurrent committers: how many were waiting when the last flushes
    /// ended (decays by one per flush). A leader waits for this much company.
    expected_company: usize,
    /// Moving average of the time a flush takes (write and sync of every copy), in ns. A
    /// leader never waits for company longer than this: past that point, letting the late
    /// committers form the next batch while this one flushes is at least as good.
    flush_ewma_ns: u64,
    /// Committers parked until a flush covers their LSN (with `targeted_wakeups`).
    sleepers: Vec<Sleeper>,
    /// Threads waiting on `flushed_cv`, `space_cv` and `batch_cv`: each is signalled only
    /// while some thread waits on it (a signal is a system call even with nobody to wake).
    /// Counted under this state's lock, which every wait and every signal holds.
    cv_waiting: [usize; 3],
    /// The buffer of the last batch flushed, emptied, for the next open batch (no reallocation
    /// as a batch fills), and the aligned buffer its flush wrote from.
    spare_buf: Vec<u8>,
    spare_aligned: Option<AlignedBuf>,
    /// The bytes of the last flushed block up to the end of the stream (shorter than a block;
    /// empty when the stream ends on a block boundary or a new segment begins): the next flush
    /// re-writes them in front of its records.
    tail: Vec<u8>,
}

/// Indexes of [`State::cv_waiting`].
const FLUSHED: usize = 0;
const SPACE: usize = 1;
const BATCH: usize = 2;

/// A committer parked in `wait_durable`. The thread that finishes the flush covering `lsn`
/// acknowledges it (sets `acked` to the durable position, under the state lock, and counts
/// the commit) and unparks it: the woken committer returns without taking the lock again.
struct Sleeper {
    lsn: Lsn,
    thread: std::thread::Thread,
    /// 0 until acknowledged; then the durable position reached.
    acked: Arc<AtomicU64>,
}

struct Inner {
    /// The copies: one storage, or two for a duplexed log.
    storages: Vec<Arc<dyn Storage>>,
    opts: WalOptions,
    log_id: u64,
    tag: u32,
    st: Mutex<State>,
    /// Signalled when a flush ends (waiters re-check durability or take the lead).
    flushed_cv: Condvar,
    /// Signalled when a sealed batch leaves the queue (blocked appenders retry).
    space_cv: Condvar,
    /// Signalled when the open batch fills up (a leader waiting for company stops waiting).
    batch_cv: Condvar,
    durable: AtomicU64,
    /// The second copy's writer (duplexed logs only).
    helper: Option<Arc<Helper>>,
    /// Keeps the segment the flushes write backed by storage ahead of them.
    prepare: Arc<Preparer>,
    /// The log end when it was opened or when the last checkpoint truncated it (see
    /// [`WalOptions::checkpoint_after_bytes`]).
    checkpoint_mark: AtomicU64,
}

/// The segmented, group-committing write-ahead log, on one storage or duplexed on two.
///
/// ```
/// use nvmedb::io::{MemStorage, Storage};
/// use nvmedb::wal::{FileLog, LogSink, WalOptions};
/// use std::sync::Arc;
/// let (a, b): (Arc<dyn Storage>, Arc<dyn Storage>) = (Arc::new(MemStorage::new()), Arc::new(MemStorage::new()));
/// let log = FileLog::open(a.clone(), b.clone(), WalOptions::default()).unwrap();
/// let (_start, end) = log.append(b"commit 1").unwrap();
/// log.wait_durable(end).unwrap();
/// let recs: Vec<_> = log.reader(0).unwrap().collect::<Result<_, _>>().unwrap();
/// assert_eq!(recs[0].payload, b"commit 1");
/// ```
pub struct FileLog {
    inner: Arc<Inner>,
    recovered: RecoveredLog,
    helper_thread: Option<JoinHandle<()>>,
    prepare_thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for FileLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileLog").field("recovered", &self.recovered).finish()
    }
}

impl FileLog {
    /// Opens (or creates) the duplexed log whose two copies live in `primary` and `secondary`
    /// (ideally on two devices): every flush is written to both in parallel, and a commit waits
    /// for both. See [`FileLog::open_copies`].
    pub fn open(primary: Arc<dyn Storage>, secondary: Arc<dyn Storage>, opts: WalOptions) -> Result<FileLog> {
        Self::open_copies(vec![primary, secondary], opts)
    }

    /// Opens (or creates) a single (not duplexed) log in `storage`. See [`FileLog::open_copies`].
    pub fn open_single(storage: Arc<dyn Storage>, opts: WalOptions) -> Result<FileLog> {
        Self::open_copies(vec![storage], opts)
    }

    /// Opens (or creates) the log kept in `copies` — one storage, or two for a duplexed log:
    /// finds the live segments, reads the newest one to its end (using whichever copy is
    /// intact), and prepares to append after it in a new segment (in a free slot when there is
    /// one).
    ///
    /// Errors: `Config` for bad options or a number of copies other than one or two;
    /// `Corruption` (file and offset) when a record in the middle of the newest segment is
    /// damaged in every copy; `Io` from the storages.
    pub fn open_copies(copies: Vec<Arc<dyn Storage>>, opts: WalOptions) -> Result<FileLog> {
        opts.validate()?;
        if !(1..=2).contains(&copies.len()) {
            return Err(Error::Config {
                key: "wal.copies".into(),
                detail: format!("a file log keeps one or two copies, not {}", copies.len()),
            });
        }
        let storages = copies;
        let d = discover(&storages)?;
        let created = d.log_id.is_none();
        let log_id = d.log_id.unwrap_or_else(|| Rng::new(Rng::seed_from_time()).next_u64() | 1);
        let tag = log_tag(log_id);
        let (start_lsn, end_lsn, last_seq) = match d.chain.last() {
            None => (opts.initial_lsn, opts.initial_lsn, 0),
            Some(last) => {
                let start = d.chain[0].header.base_lsn;
                let from = last.header.base_lsn;
                let mut r = LogReader::from_chain(storages.clone(), d.chain.clone(), tag, from, None)?;
                while r.next_record()?.is_some() {}
                (start, r.position(), last.header.seq)
            }
        };
        let recovered = RecoveredLog { log_id, start_lsn, end_lsn, segments: d.chain.len(), created };
        let layout = Layout { seq: last_seq + 1, segment_bytes: opts.segment_bytes };
        let open = Batch {
            seq: layout.seq,
            new_segment: Some(SegmentHeader {
                log_id,
                seq: layout.seq,
                base_lsn: end_lsn,
                segment_bytes: opts.segment_bytes,
            }),
            file_off: SEGMENT_HEADER_BLOCK_BYTES,
            start_lsn: end_lsn,
            buf: Vec::new(),
            records: 0,
        };
        let state = State {
            next_lsn: end_lsn,
            open,
            layout,
            sealed: VecDeque::new(),
            flushing: false,
            poisoned: None,
            chain: d.chain,
            free_slots: d.free_slots,
            next_slot: d.max_slot.map_or(0, |m| m + 1),
            stats: WalStats::default(),
            waiters: BTreeMap::new(),
            waiter_count: 0,
            sleepers: Vec::new(),
            cv_waiting: [0; 3],
            spare_buf: Vec::new(),
            spare_aligned: None,
            tail: Vec::new(),
            expected_company: 1,
            flush_ewma_ns: 0,
        };
        let (helper, helper_thread) = if storages.len() == 2 {
            let helper = Arc::new(Helper::new());
            let h2 = helper.clone();
            let t =
                std::thread::Builder::new().name("nvmedb-wal-copy2".into()).spawn(move || h2.run()).map_err(
                    |e| Error::Io(IoError::os("wal helper thread", crate::io::IoOpKind::Setup, 0, 0, e)),
                )?;
            (Some(helper), Some(t))
        } else {
            (None, None)
        };
        let prepare = Arc::new(Preparer::new());
        let p2 = prepare.clone();
        let prepare_thread = std::thread::Builder::new()
            .name("nvmedb-wal-prepare".into())
            .spawn(move || p2.run())
            .map_err(|e| Error::Io(IoError::os("wal prepare thread", crate::io::IoOpKind::Setup, 0, 0, e)))?;
        let inner = Arc::new(Inner {
            storages,
            opts,
            log_id,
            tag,
            st: Mutex::new(state),
            flushed_cv: Condvar::new(),
            space_cv: Condvar::new(),
            batch_cv: Condvar::new(),
            durable: AtomicU64::new(end_lsn),
            helper,
            prepare,
            checkpoint_mark: AtomicU64::new(end_lsn),
        });
        Ok(FileLog { inner, recovered, helper_thread, prepare_thread: Some(prepare_thread) })
    }

    /// What open found.
    pub fn recovered(&self) -> &RecoveredLog {
        &self.recovered
    }

    /// How many copies the log keeps: 1, or 2 when duplexed.
    pub fn copies(&self) -> usize {
        self.inner.storages.len()
    }

    /// The log's identifier.
    pub fn log_id(&self) -> u64 {
        self.inner.log_id
    }

    /// Appends one record of `kind` (>= [`KIND_USER_MIN`], or [`KIND_DATA`]) carrying `payload`.
    /// Returns `[start, end)`; the record is durable once `durable_lsn() >= end`.
    pub fn append_record(&self, kind: u8, payload: &[u8]) -> Result<(Lsn, Lsn)> {
        if kind != KIND_DATA && kind < KIND_USER_MIN {
            return Err(Error::InvalidArgument(format!("log record kind {kind} is reserved")));
        }
        let max = self.inner.opts.max_payload_bytes();
        if payload.len() > max {
            return Err(Error::InvalidArgument(format!(
                "log record of {} bytes exceeds the maximum of {max} for this segment size",
                payload.len()
            )));
        }
        self.inner.append(kind, payload)
    }

    /// The LSN the next appended record will get (end of everything appended so far).
    pub fn end_lsn(&self) -> Lsn {
        self.inner.lock().next_lsn
    }

    /// Frees every segment whose records all lie before `lsn` (which must be durable): the
    /// oldest segments are kept for recycling (up to `keep_free_segments`) or deleted. The
    /// segment holding `lsn` and all later ones stay. Returns how many segments were freed.
    ///
    /// A kept segment's header block is zeroed (and synced) in every copy before its slot can be
    /// reused, so the release outlives the process: the next open recycles the slot instead of
    /// creating a new file.
    ///
    /// Reading below `lsn` afterwards is not supported: a recycled slot is overwritten. The
    /// caller no longer needs those records: after an error, some of the segments before `lsn`
    /// may be released already.
    pub fn truncate_before(&self, lsn: Lsn) -> Result<usize> {
        let released: Vec<Segment> = {
            let mut st = self.inner.lock();
            if let Some(p) = &st.poisoned {
                return Err(Error::Poisoned(p.clone()));
            }
            let durable = self.inner.durable.load(Ordering::Acquire);
            if lsn > durable {
                return Err(Error::InvalidArgument(format!(
                    "truncate_before({lsn}) beyond the durable position {durable}"
                )));
            }
            let mut released = Vec::new();
            while st.chain.len() >= 2 && st.chain[1].header.base_lsn <= lsn {
                released.push(st.chain.remove(0));
            }
            released
        };
        // Oldest first: a crash part way leaves a shorter chain that still ends at the newest
        // segment, and the zeroed slots free.
        // (On an error the segments stay out of the chain and out of the free list: no slot
        // whose release did not complete is reused in this life; the next open finds it again.)
        for seg in &released {
            self.inner.release_header(seg)?;
        }
        let freed = released.len();
        let to_delete = {
            let mut st = self.inner.lock();
            st.free_slots.extend(released.into_iter().map(|s| s.name));
            let keep = self.inner.opts.keep_free_segments;
            let excess = st.free_slots.len().saturating_sub(keep);
            let del: Vec<String> = st.free_slots.drain(..excess).collect();
            (freed, del)
        };
        // Deleted in the background: the checkpoint that truncates need not wait.
        for name in to_delete.1 {
            for s in &self.inner.storages {
                self.inner.prepare.remove_later(s.clone(), name.clone());
            }
        }
        // A checkpoint ends with this call: count the next one's log volume from here.
        self.inner.checkpoint_mark.store(self.end_lsn(), Ordering::Release);
        Ok(to_delete.0)
    }

    /// True once [`WalOptions::checkpoint_after_bytes`] of log were written since the log was
    /// opened or last truncated.
    pub fn wants_checkpoint(&self) -> bool {
        let limit = self.inner.opts.checkpoint_after_bytes;
        limit > 0
            && self.end_lsn().saturating_sub(self.inner.checkpoint_mark.load(Ordering::Acquire)) >= limit
    }

    /// A reader from `from` (a record start) up to the durable position at this moment.
    pub fn reader(&self, from: Lsn) -> Result<LogReader> {
        let (chain, limit) = {
            let st = self.inner.lock();
            (st.chain.clone(), self.inner.durable.load(Ordering::Acquire))
        };
        LogReader::from_chain(self.inner.storages.clone(), chain, self.inner.tag, from, Some(limit))
    }

    /// Counters since open.
    pub fn stats(&self) -> WalStats {
        self.inner.lock().stats
    }

    /// Segment files that truncations gave up and the log's background thread has not deleted
    /// yet (per copy: a duplexed log counts each file of a pair).
    pub fn files_to_delete(&self) -> usize {
        self.inner.prepare.unremoved()
    }

    /// The live segments, oldest first.
    pub fn segments(&self) -> Vec<SegmentDesc> {
        self.inner.lock().chain.iter().map(Segment::desc).collect()
    }

    /// Makes everything appended durable and closes the log.
    pub fn close(self) -> Result<Lsn> {
        let end = self.end_lsn();
        self.wait_durable(end)
    }
}

impl Drop for FileLog {
    fn drop(&mut self) {
        if let Some(h) = &self.inner.helper {
            h.stop();
        }
        if let Some(t) = self.helper_thread.take() {
            // A panic in the helper thread already surfaced as a failed flush; nothing to add.
            let _ = t.join();
        }
        self.inner.prepare.stop();
        if let Some(t) = self.prepare_thread.take() {
            // A failed preparation is redone by the flush that needs it; nothing to add.
            let _ = t.join();
        }
    }
}

impl super::RecordLog for FileLog {
    fn append_record(&self, kind: u8, payload: &[u8]) -> Result<(Lsn, Lsn)> {
        FileLog::append_record(self, kind, payload)
    }

    fn end_lsn(&self) -> Lsn {
        FileLog::end_lsn(self)
    }

    fn durable_lsn(&self) -> Lsn {
        self.inner.durable.load(Ordering::Acquire)
    }

    fn wait_durable(&self, lsn: Lsn) -> Result<Lsn> {
        self.inner.wait_durable(lsn)
    }

    fn recovered(&self) -> RecoveredLog {
        self.recovered.clone()
    }

    fn reader(&self, from: Lsn) -> Result<Box<dyn super::RecordReader>> {
        Ok(Box::new(FileLog::reader(self, from)?))
    }

    fn truncate_before(&self, lsn: Lsn) -> Result<usize> {
        FileLog::truncate_before(self, lsn)
    }

    fn stats(&self) -> WalStats {
        FileLog::stats(self)
    }

    fn describe(&self) -> String {
        let locs: Vec<String> = self.inner.storages.iter().map(|s| s.location()).collect();
        let what = if locs.len() == 2 { "duplexed file log" } else { "file log" };
        format!("{what} (O_DIRECT writes + fdatasync) on {}", locs.join(" and "))
    }

    fn wants_checkpoint(&self) -> bool {
        FileLog::wants_checkpoint(self)
    }
}

impl LogSink for FileLog {
    /// Frames `bytes` as one record of kind [`KIND_DATA`].
    fn append(&self, bytes: &[u8]) -> Result<(Lsn, Lsn)> {
        self.append_record(KIND_DATA, bytes)
    }

    fn durable_lsn(&self) -> Lsn {
        self.inner.durable.load(Ordering::Acquire)
    }

    fn wait_durable(&self, lsn: Lsn) -> Result<Lsn> {
        self.inner.wait_durable(lsn)
    }
}
