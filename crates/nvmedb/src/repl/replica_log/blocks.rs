//! Device access under the replica log: scanning the records from the start at open, aligned
//! reads through a window ([`BlockReader`]), releasing the blocks of a truncated prefix, and
//! zeroing what follows the end.
//!
//! Invariant: a reader never keeps in its window bytes at or past the limit it is given (the
//! durable end), so it never holds bytes that records written later overwrite.

use super::record::{check_record, REPLICA_HEADER_BYTES};
use super::{Start, READ_WINDOW};
use crate::error::{Error, Result};
use crate::io::{AlignedBuf, Device};
use crate::util::bytes::u32_at;
use crate::wal::Lsn;
use std::sync::Arc;

/// What [`scan`] found: the end LSN, the last record's (LSN, CRC), and the file length the
/// records take.
type Scanned = (Lsn, Option<(Lsn, u32)>, u64);

/// Reads the device from `st.off` and returns what the records that follow each other from
/// there cover; the first short or damaged record ends them (a torn tail). `stop_after` keeps
/// only records ending at or below it.
pub(super) fn scan(dev: &Arc<dyn Device>, st: Start, stop_after: Lsn) -> Result<Scanned> {
    let mut r = BlockReader::new(dev.clone());
    let (mut off, mut end, mut last) = (st.off, st.lsn, None);
    let cap = dev.capacity();
    loop {
        let mut head = [0u8; REPLICA_HEADER_BYTES];
        if off + REPLICA_HEADER_BYTES as u64 > cap {
            break;
        }
        r.read(off, &mut head, cap)?;
        let len = u32_at(&head, 21) as u64;
        if off + REPLICA_HEADER_BYTES as u64 + len > cap {
            break;
        }
        let mut payload = vec![0u8; len as usize];
        r.read(off + REPLICA_HEADER_BYTES as u64, &mut payload, cap)?;
        let Ok((lsn, rend)) = check_record(&head, &payload) else { break };
        if lsn < end || rend > stop_after {
            break;
        }
        end = rend;
        last = Some((lsn, u32_at(&head, 0)));
        off += REPLICA_HEADER_BYTES as u64 + len;
    }
    Ok((end, last, off))
}

/// Aligned reads of a device through a window (records are not aligned).
pub(super) struct BlockReader {
    dev: Arc<dyn Device>,
    /// The window (allocated at the first read).
    buf: Option<AlignedBuf>,
    /// Device offset of `buf[0]`.
    at: u64,
    /// Bytes of `buf` that hold the device's bytes as they were when read.
    valid: usize,
}

impl BlockReader {
    pub(super) fn new(dev: Arc<dyn Device>) -> Self {
        Self { dev, buf: None, at: 0, valid: 0 }
    }

    /// Forgets what the window holds (the bytes may have changed).
    pub(super) fn invalidate(&mut self) {
        self.valid = 0;
    }

    /// Copies `out.len()` bytes at `off` into `out`; bytes at or past `limit` are never read
    /// into the window (they may still change).
    pub(super) fn read(&mut self, mut off: u64, mut out: &mut [u8], limit: u64) -> Result<()> {
        let align = self.dev.alignment().max(1) as u64;
        while !out.is_empty() {
            if off >= self.at && off < self.at + self.valid as u64 {
                let buf = self.buf.as_ref().expect("a valid window is allocated");
                let from = (off - self.at) as usize;
                let n = (self.valid - from).min(out.len());
                out[..n].copy_from_slice(&buf[from..from + n]);
                out = &mut out[n..];
                off += n as u64;
                continue;
            }
            let at = off / align * align;
            let cap = self.dev.capacity();
            let len = (READ_WINDOW as u64).min(cap.saturating_sub(at)) / align * align;
            if len == 0 || at + len <= off {
                return Err(Error::Corruption {
                    file: self.dev.info().name,
                    offset: off,
                    detail: format!("replica log read past the device's end ({cap} bytes)"),
                });
            }
            let buf = self.buf.get_or_insert_with(|| AlignedBuf::new(READ_WINDOW));
            self.dev.read_at(at, &mut buf[..len as usize])?;
            self.at = at;
            self.valid = (len.min(limit.saturating_sub(at))) as usize;
            if self.valid == 0 || at + self.valid as u64 <= off {
                return Err(Error::Corruption {
                    file: self.dev.info().name,
                    offset: off,
                    detail: format!("replica log read past its durable end {limit}"),
                });
            }
        }
        Ok(())
    }
}

/// Gives the blocks below `upto` back to the file system when `dev` is a file (hole punching;
/// offsets do not change, and nothing reads the released range). Devices in memory keep them.
pub(super) fn release_blocks(dev: &dyn Device, upto: u64) -> Result<()> {
    let info = dev.info();
    if upto == 0 || !(info.backend.contains("pread") || info.backend.contains("io_uring")) {
        return Ok(());
    }
    let path = std::path::Path::new(&info.name);
    let io = |e: std::io::Error| {
        Error::Io(crate::io::IoError::os(&info.name, crate::io::IoOpKind::Setup, 0, upto as usize, e))
    };
    let file = std::fs::OpenOptions::new().write(true).open(path).map_err(io)?;
    use std::os::fd::AsRawFd;
    // SAFETY: fallocate on an open file descriptor with a valid range; it only frees blocks of
    // the file (reads of the range return zeros, which nothing reads: the log begins after it).
    let r = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            0,
            upto as libc::off_t,
        )
    };
    if r != 0 {
        // Not every file system punches holes: the log is still correct, only larger.
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EOPNOTSUPP) {
            return Err(io(e));
        }
    }
    Ok(())
}

/// Overwrites `[from, to)` of `dev` with zeroes, keeping `keep` (the bytes of `from`'s block
/// before `from`), and syncs: what followed the log's end can no longer pass for records.
pub(super) fn zero_after(dev: &dyn Device, from: u64, keep: &[u8], to: u64) -> Result<()> {
    let align = dev.alignment().max(1) as u64;
    let block = from / align * align;
    debug_assert_eq!(keep.len() as u64, from - block);
    let to = to.min(dev.capacity()).next_multiple_of(align);
    let mut at = block;
    while at < to {
        let n = (to - at).min(READ_WINDOW as u64) as usize;
        let mut buf = AlignedBuf::new(n);
        if at == block {
            buf[..keep.len()].copy_from_slice(keep);
        }
        dev.write_at(at, &buf)?;
        at += n as u64;
    }
    dev.sync()?;
    Ok(())
}

/// The end of the last block at or after `from` that holds a non-zero byte (`from` if none):
/// how far a torn or cut tail reaches.
pub(super) fn dirty_end(dev: &Arc<dyn Device>, from: u64) -> Result<u64> {
    let align = dev.alignment().max(1) as u64;
    let cap = dev.capacity();
    let mut at = from / align * align;
    let mut end = from;
    let mut buf = AlignedBuf::new(READ_WINDOW);
    while at < cap {
        let n = (cap - at).min(READ_WINDOW as u64) as usize / align as usize * align as usize;
        if n == 0 {
            break;
        }
        dev.read_at(at, &mut buf[..n])?;
        match buf[..n].iter().rposition(|&b| b != 0) {
            Some(p) => end = (at + p as u64 + 1).next_multiple_of(align),
            // A whole window of zeroes: the prepared (or never written) part begins.
            None => break,
        }
        at += n as u64;
    }
    Ok(end.max(from))
}
