//! The replica record layout (also the wire's): `crc:u32 | lsn:u64 | end:u64 | kind:u8 |
//! len:u32 | payload`, the CRC32C covering everything after the crc field.
//!
//! Owns encoding, checking and in-place decoding of one record. Invariant: a record that passes
//! `check_record` has a matching CRC and `lsn < end`.

use crate::util::bytes::{u32_at, u64_at};
use crate::wal::Lsn;

/// Bytes of a replica record header.
pub const REPLICA_HEADER_BYTES: usize = 4 + 8 + 8 + 1 + 4;

/// One record as it is stored and shipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShippedRecord {
    /// Start LSN (the primary's).
    pub lsn: Lsn,
    /// End LSN (the primary's); the page LSN of pages this record changes.
    pub end: Lsn,
    /// Record kind.
    pub kind: u8,
    /// Payload.
    pub payload: Vec<u8>,
}

/// Encodes a record in the replica (and wire) layout, appending to `out`; returns its CRC.
pub fn encode_record(out: &mut Vec<u8>, lsn: Lsn, end: Lsn, kind: u8, payload: &[u8]) -> u32 {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&lsn.to_le_bytes());
    out.extend_from_slice(&end.to_le_bytes());
    out.push(kind);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    let crc = crate::util::crc32c(&out[start + 4..]);
    out[start..start + 4].copy_from_slice(&crc.to_le_bytes());
    crc
}

/// The CRC a record has in the replica layout (what [`encode_record`] returns).
pub fn record_crc(r: &ShippedRecord) -> u32 {
    let mut b = Vec::with_capacity(REPLICA_HEADER_BYTES + r.payload.len());
    encode_record(&mut b, r.lsn, r.end, r.kind, &r.payload)
}

/// A record decoded in place (see [`decode_record_ref`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecordRef<'a> {
    /// Start LSN (the primary's).
    pub lsn: Lsn,
    /// End LSN (the primary's).
    pub end: Lsn,
    /// Record kind.
    pub kind: u8,
    /// Its stored CRC (checked).
    pub crc: u32,
    /// Payload.
    pub payload: &'a [u8],
    /// The whole encoded record (header and payload), as [`encode_record`] wrote it.
    pub encoded: &'a [u8],
}

/// Decodes one record from the front of `b`, in place (the record borrows from `b`):
/// `Ok(Some((record, bytes used)))`, `Ok(None)` when `b` is too short, `Err(detail)` when the
/// bytes are not a valid record.
pub(crate) fn decode_record_ref(b: &[u8]) -> std::result::Result<Option<(RecordRef<'_>, usize)>, String> {
    if b.len() < REPLICA_HEADER_BYTES {
        return Ok(None);
    }
    let len = u32_at(b, 21) as usize;
    if b.len() < REPLICA_HEADER_BYTES + len {
        return Ok(None);
    }
    let total = REPLICA_HEADER_BYTES + len;
    let (lsn, end) = check_record(&b[..REPLICA_HEADER_BYTES], &b[REPLICA_HEADER_BYTES..total])?;
    let r =
        RecordRef { lsn, end, kind: b[20], crc: u32_at(b, 0), payload: &b[25..total], encoded: &b[..total] };
    Ok(Some((r, total)))
}

/// Checks a record's header (`head`, [`REPLICA_HEADER_BYTES`]) against its payload: the CRC
/// and `lsn < end`. Returns `(lsn, end)`.
pub(super) fn check_record(head: &[u8], payload: &[u8]) -> std::result::Result<(Lsn, Lsn), String> {
    if crate::util::crc32c_append(crate::util::crc32c(&head[4..]), payload) != u32_at(head, 0) {
        return Err("record checksum mismatch".into());
    }
    let (lsn, end) = (u64_at(head, 4), u64_at(head, 12));
    if end <= lsn {
        return Err(format!("record end {end} not after its start {lsn}"));
    }
    Ok((lsn, end))
}
