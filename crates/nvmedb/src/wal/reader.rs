//! Reading the file log back: [`LogReader`].
//!
//! Owns: iteration over the records of the live segment chain from a given LSN, choosing per
//! record whichever copy holds it intact (a duplexed log has two), and the decision between
//! "clean end of the log" and
//! "corruption". A copy is read in windows of [`WINDOW_BYTES`]; once a reader has gone through
//! a few windows of a segment in order, a helper thread reads the next window while the records
//! of the current one are checked and returned, so a long read (recovery) waits for the disk
//! only when it parses faster than the disk reads. Invariants:
//! - a record is returned only if its CRC32C matches and its header names the LSN at which it
//!   was found (stale bytes of a recycled segment never match);
//! - when no copy holds a valid record at position `p`, the reader ends cleanly only if no
//!   evidence shows that a later flush completed: the next segment must start exactly at `p`
//!   (segment switch), or, in the last segment, no position after `p` may hold a valid record
//!   whose flush began after `p`. Because the writer starts a flush only after the
//!   previous one is durable on every copy, such a record proves that `p` was once durable, so
//!   the reader reports [`Error::Corruption`] naming the file and offset instead of truncating.

use crate::error::{Error, Result};
use crate::io::AlignedBuf;
use crate::io::Storage;
use crate::util::bytes::u64_at;
use crate::wal::format::{
    check_crc, check_header, log_tag, RecordFault, RecordHeader, BLOCK_BYTES, KIND_FILLER,
    RECORD_HEADER_BYTES, SEGMENT_HEADER_BLOCK_BYTES,
};
use crate::wal::segment::{discover, file_label, read_clamped, Segment};
use crate::wal::Lsn;
use std::sync::Arc;

/// Candidate record starts checked per step when looking for a later flush.
const SCAN_BYTES: usize = 256 << 10;

/// Bytes read from a copy at a time.
const WINDOW_BYTES: usize = 4 << 20;

/// Room kept in front of a window read ahead, for the tail of the window before it (the start
/// of a record that crosses into it). A record that begins further back is read again.
const AHEAD_HEAD_BYTES: usize = 1 << 20;
/// Windows at least this long are read into huge pages ([`AlignedBuf::large`]): a multi-page
/// read into 4 KiB pages reaches the device as one segment per page, which a virtio disk serves
/// at a half to a third of the rate.
const LARGE_BUFFER_BYTES: usize = 1 << 20;

/// Windows read in order from one segment before the next one is read ahead (short reads, such
/// as finding the end of the log, read nothing they do not use).
const AHEAD_AFTER_WINDOWS: u32 = 2;

/// One record read back from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    /// LSN of the record's first byte (what `append` returned as the start).
    pub lsn: Lsn,
    /// LSN just past the record (what `append` returned as the end).
    pub end_lsn: Lsn,
    /// Record kind ([`KIND_DATA`](crate::wal::KIND_DATA) or a caller's kind).
    pub kind: u8,
    /// The payload bytes.
    pub payload: Vec<u8>,
}

/// A cached run of blocks of one segment in one copy: bytes `[start, start + len)` of the
/// segment file are `buf[base..base + len]`.
struct Window {
    seg: usize,
    start: u64,
    len: usize,
    base: usize,
    buf: Option<AlignedBuf>,
    /// Windows read one after the other so far (read-ahead starts at [`AHEAD_AFTER_WINDOWS`]).
    in_order: u32,
    /// The next window, being read by a helper thread.
    ahead: Option<Ahead>,
    /// The buffer of the window before, for the next read-ahead.
    spare: Option<AlignedBuf>,
}

impl Window {
    fn empty() -> Self {
        Self { seg: usize::MAX, start: 0, len: 0, base: 0, buf: None, in_order: 0, ahead: None, spare: None }
    }
}

/// A window being read ahead: bytes `[start, start + len)` of segment `seg` into
/// `buf[AHEAD_HEAD_BYTES..]`, by a thread that sends the buffer back with the read's result.
struct Ahead {
    seg: usize,
    start: u64,
    len: usize,
    done: std::sync::mpsc::Receiver<(AlignedBuf, Result<()>)>,
}

/// Iterates the records of a file log (single or duplexed) from a starting LSN.
///
/// Create one with [`LogReader::open`] (from the storages, e.g. during recovery) or
/// `FileLog::reader` (while the log is open; it stops at the durable position).
pub struct LogReader {
    storages: Vec<Arc<dyn Storage>>,
    chain: Vec<Segment>,
    tag: u32,
    idx: usize,
    pos: Lsn,
    limit: Option<Lsn>,
    windows: Vec<Window>,
    ended: bool,
}

impl std::fmt::Debug for LogReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogReader").field("pos", &self.pos).field("segment", &self.idx).finish()
    }
}

impl LogReader {
    /// Opens the log kept in `primary` and `secondary` and positions the reader at `from`, which
    /// must be a record start returned by `append`, a segment's base, or the end of the log.
    ///
    /// Errors: `NotFound` if `from` precedes the oldest live segment; `Corruption` if the
    /// segment headers contradict each other.
    pub fn open(primary: Arc<dyn Storage>, secondary: Arc<dyn Storage>, from: Lsn) -> Result<LogReader> {
        Self::open_copies(vec![primary, secondary], from)
    }

    /// Opens the log kept in `copies` (one storage for a single log, two for a duplexed one) and
    /// positions the reader at `from`, as [`LogReader::open`] does.
    pub fn open_copies(copies: Vec<Arc<dyn Storage>>, from: Lsn) -> Result<LogReader> {
        let d = discover(&copies)?;
        let tag = d.log_id.map(log_tag).unwrap_or(0);
        Self::from_chain(copies, d.chain, tag, from, None)
    }

    pub(crate) fn from_chain(
        storages: Vec<Arc<dyn Storage>>,
        chain: Vec<Segment>,
        tag: u32,
        from: Lsn,
        limit: Option<Lsn>,
    ) -> Result<LogReader> {
        let mut r = LogReader {
            windows: storages.iter().map(|_| Window::empty()).collect(),
            storages,
            chain,
            tag,
            idx: 0,
            pos: from,
            limit,
            ended: false,
        };
        if r.chain.is_empty() {
            if from != 0 {
                return Err(Error::NotFound(format!("log position {from}: the log is empty")));
            }
            r.ended = true;
            return Ok(r);
        }
        let first = r.chain[0].header.base_lsn;
        if from < first {
            return Err(Error::NotFound(format!(
                "log position {from} precedes the oldest live segment ({} starts at {first})",
                r.chain[0].name
            )));
        }
        r.idx = r.chain.iter().rposition(|s| s.header.base_lsn <= from).unwrap_or(0);
        Ok(r)
    }

    /// The LSN of the next record to be read; after the end was reached, the end of the log.
    pub fn position(&self) -> Lsn {
        self.pos
    }

    /// True once [`next_record`](Self::next_record) has returned `Ok(None)`.
    pub fn at_end(&self) -> bool {
        self.ended
    }

    /// The next record, `Ok(None)` at the end of the log.
    pub fn next_record(&mut self) -> Result<Option<LogRecord>> {
        loop {
            if self.ended {
                return Ok(None);
            }
            if self.limit.is_some_and(|l| self.pos >= l) {
                self.ended = true;
                return Ok(None);
            }
            let pos = self.pos;
            let mut faults = vec![RecordFault::NoRoom; self.storages.len()];
            let mut got = None;
            for (copy, fault) in faults.iter_mut().enumerate() {
                match self.try_record(copy, self.idx, pos)? {
                    Ok(r) => {
                        got = Some(r);
                        break;
                    }
                    Err(f) => *fault = f,
                }
            }
            if let Some((h, payload)) = got {
                let end = h.lsn + h.record_bytes();
                assert!(end > pos, "record did not advance the log position");
                self.pos = end;
                if h.kind == KIND_FILLER {
                    continue;
                }
                return Ok(Some(LogRecord { lsn: h.lsn, end_lsn: end, kind: h.kind, payload }));
            }
            // No copy holds a record at `pos`: segment switch, clean end, or corruption.
            let seg = self.chain[self.idx].clone();
            let off = SEGMENT_HEADER_BLOCK_BYTES + (pos - seg.header.base_lsn);
            let file = file_label(&self.storages, 0, &seg.name);
            if self.idx + 1 < self.chain.len() {
                let next = &self.chain[self.idx + 1];
                if next.header.base_lsn == pos {
                    self.idx += 1;
                    continue;
                }
                return Err(Error::Corruption {
                    file,
                    offset: off,
                    detail: format!(
                        "no intact record at LSN {pos} in any copy ({faults:?}), but the next segment {} starts \
                         at LSN {}",
                        next.name, next.header.base_lsn
                    ),
                });
            }
            if self.limit.is_some_and(|l| pos < l) {
                return Err(Error::Corruption {
                    file,
                    offset: off,
                    detail: format!("no intact record at durable LSN {pos} in any copy ({faults:?})"),
                });
            }
            if let Some((copy, later_off, later)) = self.find_later_flush(pos)? {
                return Err(Error::Corruption {
                    file,
                    offset: off,
                    detail: format!(
                        "no intact record at LSN {pos} in any copy ({faults:?}), yet a later flush (record \
                         at LSN {later}, offset {later_off} of {}) is intact",
                        file_label(&self.storages, copy, &seg.name)
                    ),
                });
            }
            self.ended = true;
            return Ok(None);
        }
    }

    /// Bytes `[off, off + len)` of segment `seg` in `copy`, or `None` if the copy lacks the file.
    fn bytes(&mut self, copy: usize, seg: usize, off: u64, len: usize) -> Result<Option<&[u8]>> {
        let Some(dev) = self.chain[seg].devs[copy].clone() else {
            return Ok(None);
        };
        let seg_bytes = self.chain[seg].header.segment_bytes;
        assert!(off + len as u64 <= seg_bytes, "read past the end of the segment");
        let w = &mut self.windows[copy];
        let covered = w.seg == seg && w.start <= off && off + len as u64 <= w.start + w.len as u64;
        if !covered {
            let start = off - off % BLOCK_BYTES as u64;
            let need = (off + len as u64).div_ceil(BLOCK_BYTES as u64) * BLOCK_BYTES as u64 - start;
            if !Self::take_ahead(w, seg, start, need)? {
                let want = (need as usize).max(WINDOW_BYTES).min((seg_bytes - start) as usize);
                let in_order = if w.seg == seg && start >= w.start { w.in_order + 1 } else { 0 };
                // Windows of a megabyte or more go in huge pages (see `AlignedBuf::large`).
                let mut buf = if want >= LARGE_BUFFER_BYTES {
                    AlignedBuf::reuse_or_large(w.buf.take(), want)
                } else {
                    AlignedBuf::reuse_or_new(w.buf.take(), want)
                };
                read_clamped(&*dev, start, &mut buf[..want])?;
                let spare = w.spare.take();
                *w = Window { seg, start, len: want, base: 0, buf: Some(buf), in_order, ahead: None, spare };
            }
            if w.in_order >= AHEAD_AFTER_WINDOWS && w.ahead.is_none() {
                let from = w.start + w.len as u64;
                let len = (WINDOW_BYTES as u64).min(seg_bytes - from) as usize;
                if len > 0 {
                    w.ahead = Self::read_ahead(dev, seg, from, len, w.spare.take());
                }
            }
        }
        let w = &self.windows[copy];
        let at = w.base + (off - w.start) as usize;
        Ok(w.buf.as_ref().map(|b| &b[at..at + len]))
    }

    /// Makes the window read ahead into `w` the current window when it holds bytes
    /// `[start, start + need)` of segment `seg` together with the tail of the current window.
    /// Returns false (dropping a read-ahead that does not fit) when the caller must read.
    fn take_ahead(w: &mut Window, seg: usize, start: u64, need: u64) -> Result<bool> {
        let Some(a) = w.ahead.take() else { return Ok(false) };
        let tail = a.start.saturating_sub(start);
        let fits = a.seg == seg
            && w.seg == seg
            && a.start == w.start + w.len as u64
            && start <= a.start
            && start >= w.start
            && tail <= AHEAD_HEAD_BYTES as u64
            && start + need <= a.start + a.len as u64;
        if !fits {
            return Ok(false);
        }
        let Ok((mut buf, read)) = a.done.recv() else { return Ok(false) };
        read?;
        // The bytes of the current window from `start` on go in front of the new ones.
        let tail = tail as usize;
        let base = AHEAD_HEAD_BYTES - tail;
        if tail > 0 {
            let cur = w.buf.as_ref().expect("a window holding `start` has a buffer");
            let from = w.base + (start - w.start) as usize;
            buf[base..AHEAD_HEAD_BYTES].copy_from_slice(&cur[from..from + tail]);
        }
        *w = Window {
            seg,
            start,
            len: tail + a.len,
            base,
            spare: w.buf.take(),
            buf: Some(buf),
            in_order: w.in_order + 1,
            ahead: None,
        };
        Ok(true)
    }

    /// Starts reading bytes `[from, from + len)` of segment `seg` on `dev` in a helper thread,
    /// into `spare` when it is large enough; `None` when no thread can be started (the bytes are
    /// then read when needed).
    fn read_ahead(
        dev: Arc<dyn crate::io::Device>,
        seg: usize,
        from: u64,
        len: usize,
        spare: Option<AlignedBuf>,
    ) -> Option<Ahead> {
        let (tx, done) = std::sync::mpsc::channel();
        let mut buf = AlignedBuf::reuse_or_large(spare, AHEAD_HEAD_BYTES + WINDOW_BYTES);
        std::thread::Builder::new()
            .name("nvmedb-wal-readahead".into())
            .spawn(move || {
                let r = read_clamped(&*dev, from, &mut buf[AHEAD_HEAD_BYTES..AHEAD_HEAD_BYTES + len]);
                // The reader may have moved on and dropped the receiver: nothing to do then.
                let _ = tx.send((buf, r));
            })
            .ok()?;
        Some(Ahead { seg, start: from, len, done })
    }

    /// Tries to read a valid record at `pos` (in segment `seg`) from `copy`.
    #[allow(clippy::type_complexity)]
    fn try_record(
        &mut self,
        copy: usize,
        seg: usize,
        pos: Lsn,
    ) -> Result<Result<(RecordHeader, Vec<u8>), RecordFault>> {
        let h = self.chain[seg].header;
        let off = SEGMENT_HEADER_BLOCK_BYTES + (pos - h.base_lsn);
        let room = h.segment_bytes.saturating_sub(off);
        if room < RECORD_HEADER_BYTES as u64 {
            return Ok(Err(RecordFault::NoRoom));
        }
        let tag = self.tag;
        let head = match self.bytes(copy, seg, off, RECORD_HEADER_BYTES)? {
            None => return Ok(Err(RecordFault::NoRoom)),
            Some(b) => match check_header(b, pos, room, tag) {
                Ok(h) => h,
                Err(f) => return Ok(Err(f)),
            },
        };
        let total = head.record_bytes() as usize;
        let Some(rec) = self.bytes(copy, seg, off, total)? else {
            return Ok(Err(RecordFault::NoRoom));
        };
        if let Err(f) = check_crc(rec) {
            return Ok(Err(f));
        }
        let payload = if head.kind == KIND_FILLER { Vec::new() } else { rec[RECORD_HEADER_BYTES..].to_vec() };
        Ok(Ok((head, payload)))
    }

    /// Looks, in the current (last) segment, for a valid record at any position after `pos`
    /// written by a flush that began after `pos`. Returns `(copy, offset, lsn)` of the first.
    /// Flushes start anywhere (format version 4 does not pad them to block boundaries), so
    /// every byte position is a candidate; the LSN field, which must name the position it is
    /// found at, rules out all but a few before any CRC is computed.
    fn find_later_flush(&mut self, pos: Lsn) -> Result<Option<(usize, u64, Lsn)>> {
        let seg = self.idx;
        let h = self.chain[seg].header;
        let first = SEGMENT_HEADER_BLOCK_BYTES + (pos - h.base_lsn) + 1;
        let tag = self.tag;
        // Offset `o` of the segment file holds LSN `o + delta` (wrapping: `base_lsn` may be
        // below the header block's size).
        let delta = h.base_lsn.wrapping_sub(SEGMENT_HEADER_BLOCK_BYTES);
        for copy in 0..self.storages.len() {
            let mut from = first;
            while from + RECORD_HEADER_BYTES as u64 <= h.segment_bytes {
                // A chunk of candidate starts, read with the header bytes of its last one.
                let n = SCAN_BYTES.min((h.segment_bytes - from) as usize - RECORD_HEADER_BYTES + 1);
                let mut hits = Vec::new();
                match self.bytes(copy, seg, from, n + RECORD_HEADER_BYTES - 1)? {
                    None => break,
                    Some(b) => {
                        for i in 0..n {
                            let at = from + i as u64;
                            if u64_at(b, i + 8) == at.wrapping_add(delta) {
                                hits.push(at);
                            }
                        }
                    }
                }
                for at in hits {
                    let lsn = at.wrapping_add(delta);
                    let head = match self.bytes(copy, seg, at, RECORD_HEADER_BYTES)? {
                        None => continue,
                        Some(bytes) => check_header(bytes, lsn, h.segment_bytes - at, tag),
                    };
                    let Ok(head) = head else { continue };
                    if head.flush_lsn <= pos {
                        continue;
                    }
                    let total = head.record_bytes() as usize;
                    if let Some(rec) = self.bytes(copy, seg, at, total)? {
                        if check_crc(rec).is_ok() {
                            return Ok(Some((copy, at, lsn)));
                        }
                    }
                }
                from += n as u64;
            }
        }
        Ok(None)
    }
}

impl Iterator for LogReader {
    type Item = Result<LogRecord>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.next_record() {
            Ok(Some(r)) => Some(Ok(r)),
            Ok(None) => None,
            Err(e) => {
                self.ended = true;
                Some(Err(e))
            }
        }
    }
}
