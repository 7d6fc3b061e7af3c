//! The on-disk format of the write-ahead log (described byte by byte in `docs/format-wal.md`).
//!
//! Owns: the record header (32 bytes: CRC32C, payload length, LSN, flush LSN, kind, log tag),
//! the segment header (block 0 of every segment file), filler records, and their encoding and
//! validation. Invariants: every integer is little-endian; a record's CRC32C covers header bytes
//! 4..32 and the payload, so a record is accepted only if every one of its bytes is what was
//! written; a record is accepted only at the position its LSN names, so bytes left over from an
//! earlier use of a recycled segment can never pass for live records.

use crate::util::bytes::{u32_at, u64_at};
use crate::util::{crc32c, crc32c_append};
use crate::wal::Lsn;

/// Size of the block unit of the log files: every flush writes whole blocks of this size.
pub const BLOCK_BYTES: usize = 4096;
/// Bytes of a record header.
pub const RECORD_HEADER_BYTES: usize = 32;
/// Bytes of block 0 of a segment file, which holds the segment header.
pub const SEGMENT_HEADER_BLOCK_BYTES: u64 = BLOCK_BYTES as u64;
/// Meaningful bytes of the segment header (the rest of block 0 is zero).
pub const SEGMENT_HEADER_BYTES: usize = 64;
/// Magic number at the start of every segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"NVMEDBWL";
/// Format version written into every segment header. Version 2 adds lean update records
/// (transaction operations logged as row patches, see `docs/format-wal.md`); version 3 adds
/// compact mini-transaction records with page operations, new-page changes (a new page's bytes
/// as ranges over a zeroed page) and, with the double-write area, no full page images after
/// checkpoints; version 4 stops padding flushes with fillers (a flush starts right after the
/// previous one's last record and re-writes the start of that block). Older logs are read as
/// well.
pub const FORMAT_VERSION: u32 = 4;
/// The oldest segment format version this build reads.
pub const MIN_READ_VERSION: u32 = 1;

/// Kind of a filler record that padded a flush to the block boundary (format versions 1–3;
/// version 4 writes none); readers skip it.
pub const KIND_FILLER: u8 = 1;
/// Kind [`LogSink::append`](crate::wal::LogSink::append) gives its payloads.
pub const KIND_DATA: u8 = 2;
/// Smallest kind a caller may choose with `FileLog::append_record`; kinds below are reserved.
pub const KIND_USER_MIN: u8 = 16;

/// Largest filler: when fewer than a header's bytes remain in a block, the filler runs to the
/// end of the next block.
pub const MAX_FILLER_BYTES: usize = BLOCK_BYTES + RECORD_HEADER_BYTES - 1;

const _: () = assert!(SEGMENT_HEADER_BYTES <= BLOCK_BYTES);
const _: () = assert!(RECORD_HEADER_BYTES < BLOCK_BYTES);

/// Decoded header of one log record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// Payload bytes following the header.
    pub payload_len: u32,
    /// Position of the record's first byte in the log stream.
    pub lsn: Lsn,
    /// LSN at which the flush that wrote this record began (its first record; block-aligned in
    /// format versions 1–3).
    pub flush_lsn: Lsn,
    /// Record kind: [`KIND_FILLER`], [`KIND_DATA`] or a caller kind >= [`KIND_USER_MIN`].
    pub kind: u8,
    /// Low 32 bits of the log's identifier.
    pub log_tag: u32,
}

impl RecordHeader {
    /// Total bytes of the record, header included.
    pub fn record_bytes(&self) -> u64 {
        RECORD_HEADER_BYTES as u64 + u64::from(self.payload_len)
    }
}

/// Appends one encoded record (header and payload) to `out`.
pub fn encode_record(out: &mut Vec<u8>, h: &RecordHeader, payload: &[u8]) {
    assert_eq!(payload.len(), h.payload_len as usize, "payload length disagrees with the header");
    let start = out.len();
    push_header_without_crc(out, h);
    out.extend_from_slice(payload);
    seal_crc(out, start);
}

/// Appends a filler record of exactly `bytes` bytes (at least a header) at `lsn`. (Format
/// versions 1–3 padded each flush with one; kept for the tests of reading them.)
#[cfg(test)]
pub fn encode_filler(out: &mut Vec<u8>, bytes: usize, lsn: Lsn, flush_lsn: Lsn, log_tag: u32) {
    assert!(bytes >= RECORD_HEADER_BYTES, "filler of {bytes} bytes cannot hold a header");
    let payload_len = (bytes - RECORD_HEADER_BYTES) as u32;
    let h = RecordHeader { payload_len, lsn, flush_lsn, kind: KIND_FILLER, log_tag };
    let start = out.len();
    push_header_without_crc(out, &h);
    out.resize(start + bytes, 0);
    seal_crc(out, start);
}

fn push_header_without_crc(out: &mut Vec<u8>, h: &RecordHeader) {
    out.extend_from_slice(&[0u8; 4]);
    out.extend_from_slice(&h.payload_len.to_le_bytes());
    out.extend_from_slice(&h.lsn.to_le_bytes());
    out.extend_from_slice(&h.flush_lsn.to_le_bytes());
    out.push(h.kind);
    out.extend_from_slice(&[0u8; 3]);
    out.extend_from_slice(&h.log_tag.to_le_bytes());
}

fn seal_crc(out: &mut [u8], start: usize) {
    let crc = crc32c(&out[start + 4..]);
    out[start..start + 4].copy_from_slice(&crc.to_le_bytes());
}

/// Bytes of filler needed after a record ending at file offset `end_off` so the flush ends on a
/// block boundary (0 when already aligned; format versions 1–3).
#[cfg(test)]
pub fn filler_bytes_for(end_off: u64) -> usize {
    let r = (BLOCK_BYTES as u64 - end_off % BLOCK_BYTES as u64) as usize % BLOCK_BYTES;
    if r == 0 || r >= RECORD_HEADER_BYTES {
        r
    } else {
        r + BLOCK_BYTES
    }
}

/// Why bytes at a position are not a valid record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordFault {
    /// The header does not fit before the end of the segment.
    NoRoom,
    /// The header's CRC32C does not match.
    BadCrc,
    /// The header names a different LSN (stale bytes from an earlier use, or garbage).
    WrongLsn,
    /// The kind, length, tag or reserved bytes are impossible.
    BadHeader,
}

/// Parses the 32 header bytes without checking the CRC (which needs the payload).
pub fn decode_header(b: &[u8]) -> RecordHeader {
    assert!(b.len() >= RECORD_HEADER_BYTES);
    RecordHeader {
        payload_len: u32_at(b, 4),
        lsn: u64_at(b, 8),
        flush_lsn: u64_at(b, 16),
        kind: b[24],
        log_tag: u32_at(b, 28),
    }
}

/// Checks a header found at stream position `lsn` with `room` bytes left in the segment.
/// Returns the header if it is plausible; the caller then checks the CRC with [`check_crc`].
pub fn check_header(b: &[u8], lsn: Lsn, room: u64, log_tag: u32) -> Result<RecordHeader, RecordFault> {
    if room < RECORD_HEADER_BYTES as u64 || b.len() < RECORD_HEADER_BYTES {
        return Err(RecordFault::NoRoom);
    }
    let h = decode_header(b);
    if h.lsn != lsn {
        return Err(RecordFault::WrongLsn);
    }
    let kind_ok = h.kind == KIND_FILLER || h.kind == KIND_DATA || h.kind >= KIND_USER_MIN;
    if !kind_ok || b[25..28] != [0, 0, 0] || h.log_tag != log_tag || h.flush_lsn > lsn {
        return Err(RecordFault::BadHeader);
    }
    if h.record_bytes() > room {
        return Err(RecordFault::BadHeader);
    }
    Ok(h)
}

/// Checks the CRC32C of a whole record (`rec` = header followed by the payload).
pub fn check_crc(rec: &[u8]) -> Result<(), RecordFault> {
    let stored = u32_at(rec, 0);
    if crc32c_append(0, &rec[4..]) == stored {
        Ok(())
    } else {
        Err(RecordFault::BadCrc)
    }
}

/// Decoded segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Random identifier of the log, fixed at creation; every segment of a log carries it.
    pub log_id: u64,
    /// Sequence number of the segment: 1 for the first, +1 for each next one.
    pub seq: u64,
    /// LSN of the first byte of the segment's data area (file offset 4096).
    pub base_lsn: Lsn,
    /// Size of the segment file in bytes (header block included).
    pub segment_bytes: u64,
}

impl SegmentHeader {
    /// Encodes into a whole header block.
    pub fn encode(&self, block: &mut [u8]) {
        assert_eq!(block.len(), BLOCK_BYTES);
        block.fill(0);
        block[0..8].copy_from_slice(&SEGMENT_MAGIC);
        block[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        block[12..16].copy_from_slice(&(SEGMENT_HEADER_BYTES as u32).to_le_bytes());
        block[16..24].copy_from_slice(&self.log_id.to_le_bytes());
        block[24..32].copy_from_slice(&self.seq.to_le_bytes());
        block[32..40].copy_from_slice(&self.base_lsn.to_le_bytes());
        block[40..48].copy_from_slice(&self.segment_bytes.to_le_bytes());
        block[48..52].copy_from_slice(&(BLOCK_BYTES as u32).to_le_bytes());
        let crc = crc32c(&block[0..60]);
        block[60..64].copy_from_slice(&crc.to_le_bytes());
    }

    /// Decodes a header block; `Err` says why it is not a valid header.
    pub fn decode(block: &[u8]) -> Result<SegmentHeader, String> {
        if block.len() < SEGMENT_HEADER_BYTES {
            return Err("short header".into());
        }
        if block[0..8] != SEGMENT_MAGIC {
            return Err("bad magic".into());
        }
        let crc = u32_at(block, 60);
        if crc32c(&block[0..60]) != crc {
            return Err("segment header checksum mismatch".into());
        }
        let version = u32_at(block, 8);
        if !(MIN_READ_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err(format!(
                "unsupported log format version {version} (this build reads {MIN_READ_VERSION} to {FORMAT_VERSION})"
            ));
        }
        let block_bytes = u32_at(block, 48);
        if block_bytes as usize != BLOCK_BYTES {
            return Err(format!("block size {block_bytes}, expected {BLOCK_BYTES}"));
        }
        let h = SegmentHeader {
            log_id: u64_at(block, 16),
            seq: u64_at(block, 24),
            base_lsn: u64_at(block, 32),
            segment_bytes: u64_at(block, 40),
        };
        if !h.segment_bytes.is_multiple_of(BLOCK_BYTES as u64)
            || h.segment_bytes < 2 * SEGMENT_HEADER_BLOCK_BYTES
        {
            return Err(format!("impossible segment size {}", h.segment_bytes));
        }
        Ok(h)
    }
}

/// The tag records carry: the low 32 bits of the log id.
pub fn log_tag(log_id: u64) -> u32 {
    log_id as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_roundtrip_and_single_bit_flips_are_caught() {
        let h = RecordHeader { payload_len: 5, lsn: 4242, flush_lsn: 4096, kind: KIND_DATA, log_tag: 7 };
        let mut v = Vec::new();
        encode_record(&mut v, &h, b"hello");
        assert_eq!(v.len(), 37);
        assert_eq!(check_header(&v, 4242, 100, 7), Ok(h));
        assert_eq!(check_crc(&v), Ok(()));
        assert_eq!(check_header(&v, 4243, 100, 7), Err(RecordFault::WrongLsn));
        assert_eq!(check_header(&v, 4242, 36, 7), Err(RecordFault::BadHeader));
        assert_eq!(check_header(&v, 4242, 100, 8), Err(RecordFault::BadHeader));
        for bit in 0..v.len() * 8 {
            let mut c = v.clone();
            c[bit / 8] ^= 1 << (bit % 8);
            let ok = check_header(&c, 4242, 100, 7).is_ok() && check_crc(&c).is_ok();
            assert!(!ok, "flip of bit {bit} not detected");
        }
    }

    #[test]
    fn filler_pads_to_the_block_boundary() {
        for end in [4096u64, 4097, 4096 + 4064, 4096 + 4065, 8191] {
            let n = filler_bytes_for(end);
            assert_eq!((end + n as u64) % BLOCK_BYTES as u64, 0);
            assert!(n == 0 || n >= RECORD_HEADER_BYTES);
            assert!(n <= MAX_FILLER_BYTES);
            if n > 0 {
                let mut v = Vec::new();
                encode_filler(&mut v, n, 99, 50, 3);
                assert_eq!(v.len(), n);
                let h = check_header(&v, 99, n as u64, 3).expect("filler header");
                assert_eq!(h.kind, KIND_FILLER);
                assert_eq!(h.record_bytes(), n as u64);
                check_crc(&v).expect("filler crc");
            }
        }
    }

    #[test]
    fn segment_header_roundtrip() {
        let h = SegmentHeader { log_id: 0xdead_beef_1234, seq: 9, base_lsn: 123_456, segment_bytes: 1 << 20 };
        let mut b = vec![0u8; BLOCK_BYTES];
        h.encode(&mut b);
        assert_eq!(SegmentHeader::decode(&b), Ok(h));
        b[30] ^= 1;
        assert!(SegmentHeader::decode(&b).is_err());
    }
}
