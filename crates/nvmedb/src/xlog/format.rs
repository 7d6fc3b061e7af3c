//! On-media formats of the fast log path: the region header, ring frames and conventional pages.
//!
//! Owns: byte layouts and their checks. Every structure carries a magic, a version where it is
//! a root, position stamps and a CRC-32C, so recovery tells a complete structure from a stale,
//! torn or never-written one. All integers are little-endian.
//!
//! Region file: `[header slot 0 @0][header slot 1 @512] ... [ring @HEADER_AREA]`. The header is
//! written alternately into the two slots with an increasing `slot_seq`; the valid slot with the
//! larger `slot_seq` wins, so a torn header update leaves the previous one intact.
//!
//! Ring frame (64-byte aligned, never straddles the ring end):
//! `magic u32 | payload_len u32 | stream_pos u64 | ring_pos u64 | epoch u32 | crc u32 | pad 32`
//! then the payload. `crc` covers bytes 0..24 of the header and the payload. A frame counts only
//! if its `ring_pos` and `epoch` match where and when recovery expects it: that rejects data of
//! an earlier lap of the ring and of an earlier incarnation.
//!
//! Conventional page (`page_bytes`, a multiple of the device alignment):
//! `magic u32 | version u16 | flags u16 | page_seq u64 | stream_pos u64 | payload_len u32 |
//! crc u32` then the payload and zero filler up to the page end.

use crate::util::bytes::{u32_at, u64_at, ByteReader, ByteWriter};
use crate::util::{crc32c, crc32c_append};

/// Bytes reserved at the start of the region file for the two header slots.
pub const HEADER_AREA: usize = 4096;
/// Offset of header slot `i`.
pub const HEADER_SLOT: [usize; 2] = [0, 512];
/// Magic of a region header.
pub const REGION_MAGIC: u64 = 0x5847_4F4C_5245_4731; // "XGOLREG1"
/// Format version of the region and the conventional pages. Version 2: the engine records they
/// carry include the compact page-change kinds of log format 3 (`docs/format-wal.md`), which a
/// version-1 build would not know; the region's own layout is unchanged.
pub const FORMAT_VERSION: u32 = 2;
/// The oldest version this build reads.
pub const MIN_READ_VERSION: u32 = 1;

/// True when this build reads regions and pages of `version`.
fn readable(version: u32) -> bool {
    (MIN_READ_VERSION..=FORMAT_VERSION).contains(&version)
}

/// Alignment and granule of ring frames.
pub const FRAME_ALIGN: usize = 64;
/// Size of a frame header.
pub const FRAME_HEADER: usize = 64;
/// Magic of a data frame.
pub const FRAME_MAGIC: u32 = 0x3146_4D58; // "XMF1"
/// Magic of a padding frame that skips to the ring end (carries no stream bytes).
pub const PAD_MAGIC: u32 = 0x3144_5058; // "XPD1"

/// Size of a conventional page header.
pub const PAGE_HEADER: usize = 32;
/// Magic of a conventional page.
pub const PAGE_MAGIC: u32 = 0x3150_4358; // "XCP1"

/// Ring bytes a frame with `payload` bytes occupies.
pub fn frame_bytes(payload: usize) -> usize {
    (FRAME_HEADER + payload).div_ceil(FRAME_ALIGN) * FRAME_ALIGN
}

/// The persistent root of the fast side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionHeader {
    /// Increases with every header write; picks the newer slot.
    pub slot_seq: u64,
    /// Incarnation: incremented at every open; frames carry the epoch they were written in.
    pub epoch: u32,
    /// Ring capacity in bytes.
    pub ring_bytes: u64,
    /// Conventional page size.
    pub page_bytes: u32,
    /// Conventional ring length in pages.
    pub conv_pages: u64,
    /// Virtual ring position of the first frame not fully on the conventional side.
    pub head_ring_pos: u64,
    /// Stream position where that frame's payload starts.
    pub head_stream_pos: u64,
    /// Stream position up to which bytes are durable on the conventional side.
    pub conv_stream_end: u64,
    /// Sequence number of the next conventional page to write.
    pub conv_next_seq: u64,
}

const HEADER_LEN: usize = 8 + 4 + 8 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 8 + 4;

impl RegionHeader {
    /// Serialised length.
    pub const LEN: usize = HEADER_LEN;

    /// Serialises with magic, version and CRC.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut v = Vec::with_capacity(HEADER_LEN);
        let mut w = ByteWriter::to(&mut v);
        w.u64(REGION_MAGIC);
        w.u32(FORMAT_VERSION);
        w.u64(self.slot_seq);
        w.u32(self.epoch);
        w.u64(self.ring_bytes);
        w.u64(self.conv_pages);
        w.u32(self.page_bytes);
        w.u64(self.head_ring_pos);
        w.u64(self.head_stream_pos);
        w.u64(self.conv_stream_end);
        w.u64(self.conv_next_seq);
        w.u64(0);
        let at = v.len();
        let mut b = [0u8; HEADER_LEN];
        b[..at].copy_from_slice(&v);
        let crc = crc32c(&b[..at]);
        b[at..at + 4].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parses a slot; `None` if it is not a valid header (never written, torn, other format).
    pub fn decode(b: &[u8]) -> Option<Self> {
        if b.len() < HEADER_LEN {
            return None;
        }
        let body = HEADER_LEN - 4;
        if crc32c(&b[..body]) != u32_at(b, body) {
            return None;
        }
        let mut r = ByteReader::new(b);
        if r.u64()? != REGION_MAGIC || !readable(r.u32()?) {
            return None;
        }
        Some(Self {
            slot_seq: r.u64()?,
            epoch: r.u32()?,
            ring_bytes: r.u64()?,
            conv_pages: r.u64()?,
            page_bytes: r.u32()?,
            head_ring_pos: r.u64()?,
            head_stream_pos: r.u64()?,
            conv_stream_end: r.u64()?,
            conv_next_seq: r.u64()?,
        })
    }
}

/// A decoded ring frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// [`FRAME_MAGIC`] or [`PAD_MAGIC`].
    pub magic: u32,
    /// Payload bytes (0 for padding).
    pub payload_len: u32,
    /// Stream position of the first payload byte.
    pub stream_pos: u64,
    /// Virtual ring position of this header (lap stamp).
    pub ring_pos: u64,
    /// Incarnation that wrote the frame.
    pub epoch: u32,
}

impl FrameHeader {
    /// Serialises the header; the CRC covers the first 28 bytes and `payload`.
    pub fn encode(&self, payload: &[u8]) -> [u8; FRAME_HEADER] {
        debug_assert_eq!(payload.len(), self.payload_len as usize);
        let mut b = [0u8; FRAME_HEADER];
        b[0..4].copy_from_slice(&self.magic.to_le_bytes());
        b[4..8].copy_from_slice(&self.payload_len.to_le_bytes());
        b[8..16].copy_from_slice(&self.stream_pos.to_le_bytes());
        b[16..24].copy_from_slice(&self.ring_pos.to_le_bytes());
        b[24..28].copy_from_slice(&self.epoch.to_le_bytes());
        let crc = crc32c_append(crc32c(&b[..28]), payload);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parses the fixed fields without checking the CRC.
    pub fn decode_unchecked(b: &[u8]) -> Self {
        Self {
            magic: u32_at(b, 0),
            payload_len: u32_at(b, 4),
            stream_pos: u64_at(b, 8),
            ring_pos: u64_at(b, 16),
            epoch: u32_at(b, 24),
        }
    }

    /// True if the stored CRC matches header and `payload`.
    pub fn crc_ok(header: &[u8], payload: &[u8]) -> bool {
        crc32c_append(crc32c(&header[..28]), payload) == u32_at(header, 28)
    }
}

/// A decoded conventional page header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageHeader {
    /// Page sequence number (slot = seq mod ring pages).
    pub page_seq: u64,
    /// Stream position of the first payload byte.
    pub stream_pos: u64,
    /// Payload bytes; the rest of the page is filler.
    pub payload_len: u32,
}

impl PageHeader {
    /// Writes header and CRC into `page`, whose payload area already holds the payload.
    pub fn seal(&self, page: &mut [u8]) {
        page[0..4].copy_from_slice(&PAGE_MAGIC.to_le_bytes());
        page[4..6].copy_from_slice(&(FORMAT_VERSION as u16).to_le_bytes());
        page[6..8].copy_from_slice(&0u16.to_le_bytes());
        page[8..16].copy_from_slice(&self.page_seq.to_le_bytes());
        page[16..24].copy_from_slice(&self.stream_pos.to_le_bytes());
        page[24..28].copy_from_slice(&self.payload_len.to_le_bytes());
        let end = PAGE_HEADER + self.payload_len as usize;
        let crc = crc32c_append(crc32c(&page[..28]), &page[PAGE_HEADER..end]);
        page[28..32].copy_from_slice(&crc.to_le_bytes());
    }

    /// Parses and checks a page; `None` if magic, version, length or CRC is wrong.
    pub fn open(page: &[u8]) -> Option<Self> {
        if page.len() < PAGE_HEADER || u32_at(page, 0) != PAGE_MAGIC {
            return None;
        }
        if !readable(u32::from(u16::from_le_bytes([page[4], page[5]]))) {
            return None;
        }
        let h =
            Self { page_seq: u64_at(page, 8), stream_pos: u64_at(page, 16), payload_len: u32_at(page, 24) };
        let end = PAGE_HEADER.checked_add(h.payload_len as usize)?;
        if end > page.len() {
            return None;
        }
        if crc32c_append(crc32c(&page[..28]), &page[PAGE_HEADER..end]) != u32_at(page, 28) {
            return None;
        }
        Some(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_roundtrip_and_torn_detection() {
        let h = RegionHeader {
            slot_seq: 7,
            epoch: 3,
            ring_bytes: 1 << 20,
            page_bytes: 4096,
            conv_pages: 64,
            head_ring_pos: 4096,
            head_stream_pos: 1000,
            conv_stream_end: 1200,
            conv_next_seq: 9,
        };
        let mut b = h.encode();
        assert_eq!(RegionHeader::decode(&b), Some(h));
        b[20] ^= 1;
        assert_eq!(RegionHeader::decode(&b), None);
    }

    #[test]
    fn page_seal_and_open() {
        let mut page = vec![0u8; 4096];
        page[PAGE_HEADER..PAGE_HEADER + 5].copy_from_slice(b"hello");
        let h = PageHeader { page_seq: 4, stream_pos: 99, payload_len: 5 };
        h.seal(&mut page);
        assert_eq!(PageHeader::open(&page), Some(h));
        page[PAGE_HEADER + 1] ^= 0xff;
        assert_eq!(PageHeader::open(&page), None);
    }

    #[test]
    fn frame_sizes_are_aligned() {
        assert_eq!(frame_bytes(0), 64);
        assert_eq!(frame_bytes(1), 128);
        assert_eq!(frame_bytes(64), 128);
        assert_eq!(frame_bytes(65), 192);
    }
}
