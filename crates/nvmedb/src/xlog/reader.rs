//! Tail reads of the conventional log ring (`x_pread`, seed 002 §5.1).
//!
//! Owns: [`TailReader`], a cursor over the destaged stream. It remembers the page it read last
//! and continues with the next adjacent bytes; it finds a starting position by binary search over
//! page headers (stream positions grow with page sequence numbers).
//!
//! Invariants: a reader only returns bytes below the durable conventional end; each page it uses
//! has the expected sequence number, a valid CRC and continues the previous page's stream
//! exactly, otherwise it reports overrun (the ring wrapped past the reader) or corruption.

use super::fast::Inner;
use super::format::{PageHeader, PAGE_HEADER};
use crate::error::{Error, Result};
use crate::io::AlignedBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A cursor that reads the log stream from the conventional side, in order.
pub struct TailReader {
    inner: Arc<Inner>,
    pos: u64,
    page: AlignedBuf,
    loaded: Option<PageHeader>,
}

impl std::fmt::Debug for TailReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TailReader {{ pos: {} }}", self.pos)
    }
}

impl TailReader {
    pub(crate) fn new(inner: Arc<Inner>, pos: u64) -> Self {
        let align = inner.sched.device().alignment().max(512);
        let page = AlignedBuf::with_alignment(inner.page_bytes, align);
        Self { inner, pos, page, loaded: None }
    }

    /// Stream position of the next byte this reader returns.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Byte offset on the conventional device of the next byte this reader returns (for error
    /// reports; the position must be on the conventional ring).
    pub fn device_offset(&mut self) -> Result<u64> {
        let pos = self.pos;
        let h = self.page_for(pos)?;
        let slot = h.page_seq % self.inner.conv_pages;
        Ok(self.inner.conv_offset
            + slot * self.inner.page_bytes as u64
            + PAGE_HEADER as u64
            + (pos - h.stream_pos))
    }

    /// Fills `buf` with the next bytes of the stream, blocking until that many have reached the
    /// conventional side. Returns fewer bytes only when the log is closed first.
    pub fn x_pread(&mut self, buf: &mut [u8]) -> Result<usize> {
        let want = self.pos + buf.len() as u64;
        let inner = Arc::clone(&self.inner);
        inner.wait_until(|| {
            inner.destaged.load(Ordering::Acquire) >= want || inner.closed.load(Ordering::Acquire)
        })?;
        self.try_pread(buf)
    }

    /// Reads what has reached the conventional side already, up to `buf.len()` bytes.
    pub fn try_pread(&mut self, buf: &mut [u8]) -> Result<usize> {
        let end = self.inner.destaged.load(Ordering::Acquire);
        let n = (end.saturating_sub(self.pos)).min(buf.len() as u64) as usize;
        let mut done = 0;
        while done < n {
            let h = self.page_for(self.pos)?;
            let in_page = (self.pos - h.stream_pos) as usize;
            let take = (h.payload_len as usize - in_page).min(n - done);
            let src = PAGE_HEADER + in_page;
            buf[done..done + take].copy_from_slice(&self.page[src..src + take]);
            done += take;
            self.pos += take as u64;
        }
        Ok(done)
    }

    fn page_for(&mut self, pos: u64) -> Result<PageHeader> {
        if let Some(h) = self.loaded {
            let end = h.stream_pos + h.payload_len as u64;
            if pos >= h.stream_pos && pos < end {
                return Ok(h);
            }
            if pos == end {
                let next = self.load(h.page_seq + 1)?;
                if next.stream_pos != end {
                    return Err(self.corrupt(
                        next.page_seq,
                        format!("page starts at stream {} instead of {end}", next.stream_pos),
                    ));
                }
                return Ok(next);
            }
        }
        let seq = self.locate(pos)?;
        let h = self.load(seq)?;
        if pos < h.stream_pos || pos >= h.stream_pos + h.payload_len as u64 {
            return Err(self.corrupt(seq, format!("located page does not hold stream position {pos}")));
        }
        Ok(h)
    }

    fn corrupt(&self, seq: u64, detail: String) -> Error {
        let slot = seq % self.inner.conv_pages;
        Error::Corruption {
            file: self.inner.sched.device().info().name,
            offset: self.inner.conv_offset + slot * self.inner.page_bytes as u64,
            detail: format!("conventional log page {seq}: {detail}"),
        }
    }

    /// Reads page `seq` into the buffer and checks it.
    fn load(&mut self, seq: u64) -> Result<PageHeader> {
        let next = self.inner.conv_next_seq.load(Ordering::Acquire);
        let n = self.inner.conv_pages;
        if seq >= next {
            return Err(Error::InvalidArgument(format!(
                "conventional page {seq} not written yet (next is {next})"
            )));
        }
        if seq + n < next {
            return Err(Error::NotFound(format!(
                "conventional page {seq} was overwritten: the tail reader fell more than the ring ({n} pages) behind"
            )));
        }
        let off = self.inner.conv_offset + (seq % n) * self.inner.page_bytes as u64;
        self.loaded = None;
        self.inner.sched.device().read_at(off, &mut self.page)?;
        let h = PageHeader::open(&self.page);
        match h {
            Some(h) if h.page_seq == seq => {
                self.loaded = Some(h);
                Ok(h)
            }
            _ => {
                if seq + n < self.inner.conv_next_seq.load(Ordering::Acquire) + 1 {
                    Err(Error::NotFound(format!("conventional page {seq} was overwritten while being read")))
                } else {
                    Err(self.corrupt(seq, "bad header, sequence number or checksum".into()))
                }
            }
        }
    }

    /// The sequence number of the page holding stream position `pos`.
    fn locate(&mut self, pos: u64) -> Result<u64> {
        let next = self.inner.conv_next_seq.load(Ordering::Acquire);
        let lo0 = next.saturating_sub(self.inner.conv_pages);
        if next == 0 || lo0 >= next {
            return Err(Error::NotFound(format!("stream position {pos}: the conventional ring is empty")));
        }
        let first = self.load(lo0)?;
        if pos < first.stream_pos {
            return Err(Error::NotFound(format!(
                "stream position {pos} is no longer on the conventional ring (oldest is {})",
                first.stream_pos
            )));
        }
        // Last page whose stream_pos <= pos, in [lo, hi).
        let (mut lo, mut hi) = (lo0, next);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.load(mid)?.stream_pos <= pos {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }
}
