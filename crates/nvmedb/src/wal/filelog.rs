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
//! - Every flush writes whole, fresh 4 KiB blocks: a batch is padded with a filler record to
//!   the block boundary when it is sealed, so no flush ever rewrites a block that holds records
//!   of an earlier flush, and a torn write can only damage records of the flush being written,
//!   none of which has been acknowledged.
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

use crate::error::{Error, Result};
use crate::io::{AlignedBuf, Device, IoError, Storage};
use crate::util::sync::{CondvarExt, MutexExt};
use crate::util::Rng;
use crate::wal::duplex::{Helper, Job};
use crate::wal::format::{
    encode_filler, encode_record, filler_bytes_for, log_tag, RecordHeader, SegmentHeader, BLOCK_BYTES,
    KIND_DATA, KIND_USER_MIN, MAX_FILLER_BYTES, RECORD_HEADER_BYTES, SEGMENT_HEADER_BLOCK_BYTES,
};
use crate::wal::options::{RecoveredLog, WalOptions, WalStats};
use crate::wal::prepare::Preparer;
use crate::wal::reader::LogReader;
use crate::wal::segment::{discover, slot_name, Segment, SegmentDesc};
use crate::wal::{LogSink, Lsn};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One batch of records that one flush writes.
#[derive(Debug)]
struct Batch {
    seq: u64,
    new_segment: Option<SegmentHeader>,
    file_off: u64,
    start_lsn: Lsn,
    buf: Vec<u8>,
    records: u64,
    filler: u64,
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
}

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
            filler: 0,
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

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.locked()
    }

    /// Zeroes the header block of a released segment in every copy that has its file, and
    /// syncs, so a later open sees a free slot.
    fn release_header(&self, seg: &Segment) -> Result<()> {
        let zero = AlignedBuf::new(BLOCK_BYTES);
        for (c, s) in self.storages.iter().enumerate() {
            let dev = match &seg.devs[c] {
                Some(d) => d.clone(),
                None if s.exists(&seg.name) => s.open(&seg.name, false)?,
                None => continue,
            };
            if dev.capacity() >= BLOCK_BYTES as u64 {
                dev.write_at(0, &zero)?;
                dev.sync()?;
            }
        }
        Ok(())
    }

    /// Seals the open batch (pads it to a block boundary) into the queue. Returns false when the
    /// queue is full.
    fn seal_open(&self, st: &mut State) -> bool {
        if st.open.buf.is_empty() {
            return true;
        }
        if st.sealed.len() >= self.opts.max_queued_batches {
            return false;
        }
        let end_off = st.open.file_off + st.open.buf.len() as u64;
        let fill = filler_bytes_for(end_off);
        if fill > 0 {
            let lsn = st.next_lsn;
            encode_filler(&mut st.open.buf, fill, lsn, st.open.start_lsn, self.tag);
            st.next_lsn += fill as u64;
            st.open.filler += fill as u64;
        }
        let next_off = st.open.file_off + st.open.buf.len() as u64;
        assert_eq!(next_off % BLOCK_BYTES as u64, 0, "sealed batch does not end on a block boundary");
        assert!(next_off <= st.layout.segment_bytes, "sealed batch overruns its segment");
        assert_eq!(st.open.end_lsn(), st.next_lsn, "batch and stream disagree on the end LSN");
        let next = Batch {
            seq: st.layout.seq,
            new_segment: None,
            file_off: next_off,
            start_lsn: st.next_lsn,
            buf: Vec::new(),
            records: 0,
            filler: 0,
        };
        let sealed = std::mem::replace(&mut st.open, next);
        st.sealed.push_back(sealed);
        self.batch_cv.notify_all();
        true
    }

    /// Waits for queue space: leads a flush when none runs, else waits for the running one.
    fn make_space<'a>(&'a self, st: MutexGuard<'a, State>) -> Result<MutexGuard<'a, State>> {
        if st.flushing {
            return Ok(self.space_cv.wait_locked(st));
        }
        let (st, r) = self.flush_one(st, false);
        r.map(|()| st)
    }

    fn append(&self, kind: u8, payload: &[u8]) -> Result<(Lsn, Lsn)> {
        let rec = (RECORD_HEADER_BYTES + payload.len()) as u64;
        let mut st = self.lock();
        loop {
            if let Some(p) = &st.poisoned {
                return Err(Error::Poisoned(p.clone()));
            }
            let open_len = st.open.buf.len() as u64;
            if open_len > 0 && open_len + rec > self.opts.max_batch_bytes as u64 && !self.seal_open(&mut st) {
                st = self.make_space(st)?;
                continue;
            }
            let end_off = st.open.file_off + st.open.buf.len() as u64 + rec;
            if end_off + MAX_FILLER_BYTES as u64 > st.layout.segment_bytes {
                if !self.seal_open(&mut st) {
                    st = self.make_space(st)?;
                    continue;
                }
                // Switch to a new segment starting exactly where the stream is.
                let seq = st.layout.seq + 1;
                let segment_bytes = self.opts.segment_bytes;
                st.layout = Layout { seq, segment_bytes };
                let base_lsn = st.next_lsn;
                st.open = Batch {
                    seq,
                    new_segment: Some(SegmentHeader { log_id: self.log_id, seq, base_lsn, segment_bytes }),
                    file_off: SEGMENT_HEADER_BLOCK_BYTES,
                    start_lsn: base_lsn,
                    buf: Vec::new(),
                    records: 0,
                    filler: 0,
                };
                continue;
            }
            break;
        }
        let lsn = st.next_lsn;
        let h = RecordHeader {
            payload_len: payload.len() as u32,
            lsn,
            flush_lsn: st.open.start_lsn,
            kind,
            log_tag: self.tag,
        };
        encode_record(&mut st.open.buf, &h, payload);
        st.open.records += 1;
        st.next_lsn += rec;
        st.stats.records_appended += 1;
        assert_eq!(st.open.end_lsn(), st.next_lsn, "batch and stream disagree on the end LSN");
        if st.open.buf.len() >= self.opts.max_batch_bytes {
            self.batch_cv.notify_all();
        }
        Ok((lsn, lsn + rec))
    }

    fn wait_durable(&self, lsn: Lsn) -> Result<Lsn> {
        let mut st = self.lock();
        let mut registered = false;
        let r = loop {
            if let Some(p) = &st.poisoned {
                break Err(Error::Poisoned(p.clone()));
            }
            let d = self.durable.load(Ordering::Acquire);
            if d >= lsn {
                st.stats.commits += 1;
                break Ok(d);
            }
            if lsn > st.next_lsn {
                break Err(Error::InvalidArgument(format!(
                    "wait_durable({lsn}) beyond the end of the log {}",
                    st.next_lsn
                )));
            }
            if !registered {
                registered = true;
                *st.waiters.entry(lsn).or_insert(0) += 1;
                st.waiter_count += 1;
                self.batch_cv.notify_all();
            }
            if st.flushing {
                if self.opts.targeted_wakeups {
                    // Park until the flush that covers us acknowledges us, or we are chosen to
                    // lead the next one (see `wake_after_flush`). Spurious wake-ups loop.
                    let acked = Arc::new(AtomicU64::new(0));
                    st.sleepers.push(Sleeper { lsn, thread: std::thread::current(), acked: acked.clone() });
                    drop(st);
                    loop {
                        std::thread::park();
                        let d = acked.load(Ordering::Acquire);
                        if d != 0 {
                            // Acknowledged (and counted, and unregistered) by the flusher.
                            return Ok(d);
                        }
                        st = self.lock();
                        // Acknowledged between the load and the lock?
                        let d = acked.load(Ordering::Acquire);
                        if d != 0 {
                            return Ok(d);
                        }
                        let me = std::thread::current().id();
                        let still_parked = st.sleepers.iter().any(|s| s.thread.id() == me);
                        if !still_parked
                            || !st.flushing
                            || self.durable.load(Ordering::Acquire) >= lsn
                            || st.poisoned.is_some()
                        {
                            // Chosen to lead, no flush runs, or woken after an error: back to
                            // the loop (which leads a flush when none runs).
                            st.sleepers.retain(|s| s.thread.id() != me);
                            break;
                        }
                        // A spurious wake-up: park again.
                        drop(st);
                    }
                } else {
                    st = self.flushed_cv.wait_locked(st);
                }
                continue;
            }
            let (g, r) = self.flush_one(st, true);
            st = g;
            if let Err(e) = r {
                break Err(e);
            }
        };
        // A flush that made `lsn` durable already removed this waiter; otherwise remove it now.
        if registered && lsn > self.durable.load(Ordering::Acquire) {
            let st = &mut *st;
            if let Some(c) = st.waiters.get_mut(&lsn) {
                *c -= 1;
                st.waiter_count -= 1;
                if *c == 0 {
                    st.waiters.remove(&lsn);
                }
            }
        }
        r
    }

    /// Leads one flush: takes the oldest sealed batch (or seals the open one, after waiting up
    /// to `group_commit_wait_us` for company), writes it to every copy and syncs them.
    /// Precondition: no flush runs and something is pending.
    ///
    /// With `may_wait` (a committer leads) and `group_commit_wait_us > 0`, the leader waits until
    /// as many committers wait as did at the end of recent flushes (`expected_company`), the
    /// batch reaches `max_batch_bytes`, or the time bound passes (the smaller of
    /// `group_commit_wait_us` and the average flush time), whichever comes first. This
    /// merges the committers released by one flush with those that arrived during it, instead of
    /// letting two half-size groups alternate.
    fn flush_one<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        may_wait: bool,
    ) -> (MutexGuard<'a, State>, Result<()>) {
        assert!(!st.flushing, "two flush leaders");
        st.flushing = true;
        if may_wait && st.sealed.is_empty() && self.opts.group_commit_wait_us > 0 {
            let bound_ns = (self.opts.group_commit_wait_us * 1000).min(st.flush_ewma_ns);
            let deadline = Instant::now() + Duration::from_nanos(bound_ns);
            while st.sealed.is_empty()
                && st.open.buf.len() < self.opts.max_batch_bytes
                && st.waiter_count < st.expected_company
            {
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                st = self.batch_cv.wait_timeout_locked(st, deadline - now).0;
            }
        }
        if st.sealed.is_empty() {
            let ok = self.seal_open(&mut st);
            assert!(ok, "sealing into an empty queue cannot fail");
        }
        let Some(batch) = st.sealed.pop_front() else {
            unreachable!("flush_one called with nothing pending");
        };
        self.space_cv.notify_all();
        let target = match batch.new_segment {
            Some(_) => {
                let name = match st.free_slots.pop() {
                    Some(n) => n,
                    None => {
                        st.next_slot += 1;
                        slot_name(st.next_slot - 1)
                    }
                };
                Target::New(name)
            }
            None => match st.chain.last() {
                Some(last) if last.header.seq == batch.seq => Target::Existing(last.clone()),
                _ => unreachable!("a batch without a new segment targets the newest segment"),
            },
        };
        drop(st);
        let started = Instant::now();
        let result = self.write_batch(&batch, target);
        let took_ns = started.elapsed().as_nanos().min(u128::from(u32::MAX)) as u64;
        let mut st = self.lock();
        st.flushing = false;
        let r = match result {
            Ok(new_seg) => {
                if let Some(seg) = new_seg {
                    if let Some(last) = st.chain.last() {
                        assert_eq!(last.header.seq + 1, seg.header.seq, "segment sequence gap");
                        assert!(last.header.base_lsn <= seg.header.base_lsn, "segment base went backwards");
                    }
                    st.chain.push(seg);
                }
                let prev = self.durable.swap(batch.end_lsn(), Ordering::AcqRel);
                assert_eq!(prev, batch.start_lsn, "flushes must make the stream durable in order");
                // Committers waiting now = the concurrency to expect for the next flush.
                let sample = st.waiter_count;
                st.expected_company = sample.max(st.expected_company.saturating_sub(1)).max(1);
                let durable = batch.end_lsn();
                let done: Vec<Lsn> = st.waiters.range(..=durable).map(|(k, _)| *k).collect();
                for k in done {
                    if let Some(c) = st.waiters.remove(&k) {
                        st.waiter_count -= c;
                    }
                }
                st.flush_ewma_ns =
                    if st.flush_ewma_ns == 0 { took_ns } else { (7 * st.flush_ewma_ns + took_ns) / 8 };
                st.stats.flushes += 1;
                st.stats.records_flushed += batch.records;
                st.stats.filler_bytes += batch.filler;
                st.stats.bytes_written += batch.buf.len() as u64
                    + if batch.new_segment.is_some() { SEGMENT_HEADER_BLOCK_BYTES } else { 0 };
                Ok(())
            }
            Err(e) => {
                st.poisoned = Some(format!("log flush at LSN {} failed: {e}", batch.start_lsn));
                Err(e)
            }
        };
        let wake = self.wake_after_flush(&mut st);
        self.flushed_cv.notify_all();
        self.space_cv.notify_all();
        if !wake.is_empty() {
            // Unpark outside the lock: each unpark is a system call, and the woken committers
            // need the lock at once.
            drop(st);
            for t in wake {
                t.unpark();
            }
            st = self.lock();
        }
        (st, r)
    }

    /// Takes out of the sleeper list the committers a finished flush made durable —
    /// acknowledging each (its commit is counted here, its waiter entry was removed with the
    /// flush) — or all of them after an error, and the earliest of the rest, which leads the
    /// next flush: nobody else would be awake to. The next leader comes first in the returned
    /// list, so it is woken first. The caller unparks them after releasing the lock.
    fn wake_after_flush(&self, st: &mut State) -> Vec<std::thread::Thread> {
        if st.sleepers.is_empty() {
            return Vec::new();
        }
        let durable = self.durable.load(Ordering::Acquire);
        let failed = st.poisoned.is_some();
        let mut wake = Vec::with_capacity(st.sleepers.len() + 1);
        let mut rest = Vec::with_capacity(st.sleepers.len());
        let mut acked = Vec::with_capacity(st.sleepers.len());
        let sleepers = std::mem::take(&mut st.sleepers);
        for s in sleepers {
            if failed {
                wake.push(s.thread);
            } else if s.lsn <= durable {
                s.acked.store(durable, Ordering::Release);
                st.stats.commits += 1;
                acked.push(s.thread);
            } else {
                rest.push(s);
            }
        }
        if let Some(i) = (0..rest.len()).min_by_key(|&i| rest[i].lsn) {
            wake.push(rest.swap_remove(i).thread);
        }
        wake.extend(acked);
        st.sleepers = rest;
        wake
    }

    /// Writes one batch to every copy (two in parallel: copy B on the helper thread) and syncs
    /// them; a batch that starts a segment writes and syncs the segment's header first, on its
    /// own. Returns the new segment when the batch started one.
    fn write_batch(&self, batch: &Batch, target: Target) -> Result<Option<Segment>> {
        assert_eq!(batch.buf.len() % BLOCK_BYTES, 0, "flush of a partial block");
        assert_eq!(batch.file_off % BLOCK_BYTES as u64, 0, "flush at an unaligned offset");
        let mut buf = AlignedBuf::new(batch.buf.len());
        buf.copy_from_slice(&batch.buf);
        let offset = batch.file_off;
        let (devs, new_seg, segment_bytes): (Vec<Arc<dyn Device>>, Option<Segment>, u64) = match target {
            Target::Existing(seg) => {
                let mut devs = Vec::with_capacity(self.storages.len());
                for (c, s) in self.storages.iter().enumerate() {
                    match &seg.devs[c] {
                        Some(d) => devs.push(d.clone()),
                        None => devs.push(s.open(&seg.name, true)?),
                    }
                }
                let segment_bytes = seg.header.segment_bytes;
                (devs, None, segment_bytes)
            }
            Target::New(name) => {
                let Some(header) = batch.new_segment else { unreachable!() };
                let mut devs = Vec::with_capacity(self.storages.len());
                for s in &self.storages {
                    devs.push(s.open(&name, true)?);
                }
                let recycled = devs.iter().any(|d| d.capacity() >= header.segment_bytes);
                for d in &devs {
                    d.ensure_capacity(header.segment_bytes)?;
                }
                {
                    let mut st = self.lock();
                    if recycled {
                        st.stats.segments_recycled += 1;
                    } else {
                        st.stats.segments_created += 1;
                    }
                }
                let seg = Segment { name, header, devs: devs.iter().cloned().map(Some).collect() };
                (devs, Some(seg), header.segment_bytes)
            }
        };
        self.prepare.before_write(batch.seq, &devs, offset + buf.len() as u64, segment_bytes)?;
        if let Some(h) = &batch.new_segment {
            // The header is durable before any record of the segment is written. A recycled
            // slot may hold records of an earlier segment; had a crash kept records of this
            // segment but lost its header, the next open would start its new segment at these
            // very LSNs (the recovered end) in some slot, and could later read this segment's
            // lost records as its own. With the header first, a slot holds records only of the
            // segment its header names (or of older ones, at other LSNs).
            assert_eq!(batch.file_off, SEGMENT_HEADER_BLOCK_BYTES);
            let mut block = AlignedBuf::new(BLOCK_BYTES);
            h.encode(&mut block);
            self.write_synced(&devs, 0, block)?;
        }
        self.write_synced(&devs, offset, buf)?;
        Ok(new_seg)
    }

    /// Writes `buf` at `offset` of every copy's device and syncs them (two copies in parallel:
    /// copy B on the helper thread).
    fn write_synced(&self, devs: &[Arc<dyn Device>], offset: u64, buf: AlignedBuf) -> Result<()> {
        match (&self.helper, devs) {
            (None, [a]) => a.write_at(offset, &buf).and_then(|()| a.sync())?,
            (Some(helper), [a, b]) => {
                let buf = Arc::new(buf);
                helper.submit(Job { dev: b.clone(), offset, buf: buf.clone() });
                let r0 = a.write_at(offset, &buf).and_then(|()| a.sync());
                let r1 = helper.wait();
                r0?;
                r1?;
            }
            _ => unreachable!("a helper exactly when there are two copies"),
        }
        Ok(())
    }
}

enum Target {
    Existing(Segment),
    New(String),
}
