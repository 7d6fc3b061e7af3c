//! The common page header.
//!
//! Owns: the 32-byte header at offset 0 of every page and the checksum rules.
//!
//! Layout (little-endian):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `0x4750_564E` ("NVPG") |
//! | 4 | 2 | format version |
//! | 6 | 1 | page type ([`PageType`]) |
//! | 7 | 1 | flags (reserved, 0) |
//! | 8 | 4 | file id |
//! | 12 | 4 | reserved (0) |
//! | 16 | 8 | page number within the file |
//! | 24 | 8 | page LSN: log position of the last change |
//! | 32.. | | body (the CRC is stored in the last 4 bytes of the page) |
//!
//! The CRC32C is stored in the page's last 4 bytes and covers every byte before them, so a torn
//! write (a prefix of new sectors, a suffix of old ones) fails the check.

use crate::error::{Error, Result};
use crate::util::bytes::{u16_at, u32_at, u64_at};

/// Size of the common header in bytes.
pub const PAGE_HEADER_BYTES: usize = 32;
/// Size of the trailing checksum in bytes.
pub const PAGE_TRAILER_BYTES: usize = 4;
/// Byte range of the page LSN (the log position of the page's latest change) in the header.
pub const PAGE_LSN_RANGE: std::ops::Range<usize> = 24..32;
/// Current on-disk page format version.
pub const FORMAT_VERSION: u16 = 1;
const MAGIC: u32 = 0x4750_564E;

/// What a page holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum PageType {
    /// File metadata (page 0 of every file).
    Meta = 1,
    /// Slotted heap page holding table rows.
    Heap = 2,
    /// B+tree leaf.
    BtreeLeaf = 3,
    /// B+tree inner node.
    BtreeInner = 4,
    /// A page of a heap row too large for a slotted page (`page::overflow`).
    Overflow = 5,
}

impl PageType {
    /// Decodes a page type byte.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => PageType::Meta,
            2 => PageType::Heap,
            3 => PageType::BtreeLeaf,
            4 => PageType::BtreeInner,
            5 => PageType::Overflow,
            _ => return None,
        })
    }
}

/// Decoded header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageHeader {
    /// Page type.
    pub page_type: PageType,
    /// File the page belongs to.
    pub file_id: u32,
    /// Page number within the file.
    pub page_no: u64,
    /// LSN of the last change.
    pub lsn: u64,
}

impl PageHeader {
    /// Writes a fresh header into `page` (the body is left as is).
    pub fn init(page: &mut [u8], page_type: PageType, file_id: u32, page_no: u64) {
        assert!(page.len() >= 512, "page of {} bytes is too small", page.len());
        page[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        page[4..6].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        page[6] = page_type as u8;
        page[7] = 0;
        page[8..12].copy_from_slice(&file_id.to_le_bytes());
        page[12..16].fill(0);
        page[16..24].copy_from_slice(&page_no.to_le_bytes());
        page[PAGE_LSN_RANGE].copy_from_slice(&0u64.to_le_bytes());
    }

    /// Reads the header without verifying the checksum (for pages already in memory).
    pub fn read(page: &[u8]) -> Option<Self> {
        if u32_at(page, 0) != MAGIC {
            return None;
        }
        Some(Self {
            page_type: PageType::from_u8(page[6])?,
            file_id: u32_at(page, 8),
            page_no: u64_at(page, 16),
            lsn: u64_at(page, PAGE_LSN_RANGE.start),
        })
    }

    /// The page type of an in-memory page, if the header is valid.
    #[inline]
    pub fn page_type_of(page: &[u8]) -> Option<PageType> {
        if u32_at(page, 0) != MAGIC {
            return None;
        }
        PageType::from_u8(page[6])
    }

    /// LSN stored in the page.
    pub fn lsn_of(page: &[u8]) -> u64 {
        u64_at(page, PAGE_LSN_RANGE.start)
    }

    /// Changes the page type (a B+tree root turning from leaf into inner node).
    pub fn set_page_type(page: &mut [u8], page_type: PageType) {
        page[6] = page_type as u8;
    }

    /// Stores the LSN of the latest change.
    pub fn set_lsn(page: &mut [u8], lsn: u64) {
        page[PAGE_LSN_RANGE].copy_from_slice(&lsn.to_le_bytes());
    }

    /// Computes and stores the checksum; call just before the page goes to a device.
    pub fn seal(page: &mut [u8]) {
        let n = page.len() - PAGE_TRAILER_BYTES;
        let crc = crate::util::crc32c(&page[..n]);
        page[n..].copy_from_slice(&crc.to_le_bytes());
    }

    /// Verifies a page just read from `file` (a device name, for messages) at `offset`:
    /// checksum, magic, version, and that it is the page that was asked for.
    pub fn verify(page: &[u8], file: &str, offset: u64, file_id: u32, page_no: u64) -> Result<Self> {
        let corrupt = |detail: String| Error::Corruption { file: file.to_string(), offset, detail };
        let n = page.len() - PAGE_TRAILER_BYTES;
        let stored = u32_at(page, n);
        let computed = crate::util::crc32c(&page[..n]);
        if stored != computed {
            if page.iter().all(|&b| b == 0) {
                return Err(corrupt(format!(
                    "page {page_no} of file {file_id} was never written (all zeroes)"
                )));
            }
            return Err(corrupt(format!(
                "page {page_no} of file {file_id}: checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
            )));
        }
        if u32_at(page, 0) != MAGIC {
            return Err(corrupt(format!("page {page_no}: bad magic {:#010x}", u32_at(page, 0))));
        }
        let version = u16_at(page, 4);
        if version != FORMAT_VERSION {
            return Err(corrupt(format!(
                "page {page_no}: format version {version}, this build reads version {FORMAT_VERSION}"
            )));
        }
        let h = Self::read(page)
            .ok_or_else(|| corrupt(format!("page {page_no}: unknown page type {}", page[6])))?;
        if h.file_id != file_id || h.page_no != page_no {
            return Err(corrupt(format!(
                "misdirected page: expected file {file_id} page {page_no}, found file {} page {}",
                h.file_id, h.page_no
            )));
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealed(page_no: u64) -> Vec<u8> {
        let mut p = vec![0u8; 4096];
        PageHeader::init(&mut p, PageType::Heap, 3, page_no);
        PageHeader::set_lsn(&mut p, 77);
        p[100] = 42;
        PageHeader::seal(&mut p);
        p
    }

    #[test]
    fn round_trip_verifies() {
        let p = sealed(9);
        let h = PageHeader::verify(&p, "f", 9 * 4096, 3, 9).unwrap();
        assert_eq!(h, PageHeader { page_type: PageType::Heap, file_id: 3, page_no: 9, lsn: 77 });
    }

    #[test]
    fn flipped_bit_is_corruption_naming_file_and_offset() {
        let mut p = sealed(9);
        p[2000] ^= 1;
        let e = PageHeader::verify(&p, "data.nvdb", 36864, 3, 9).unwrap_err().to_string();
        assert!(e.contains("data.nvdb") && e.contains("36864") && e.contains("checksum"), "{e}");
    }

    #[test]
    fn misdirected_page_is_detected() {
        let p = sealed(9);
        let e = PageHeader::verify(&p, "f", 0, 3, 10).unwrap_err().to_string();
        assert!(e.contains("misdirected"), "{e}");
    }

    #[test]
    fn torn_page_fails_checksum() {
        let old = sealed(9);
        let mut new = sealed(9);
        new[100] = 99;
        PageHeader::seal(&mut new);
        let mut torn = new.clone();
        torn[2048..].copy_from_slice(&old[2048..]);
        assert!(PageHeader::verify(&torn, "f", 0, 3, 9).is_err());
    }
}
