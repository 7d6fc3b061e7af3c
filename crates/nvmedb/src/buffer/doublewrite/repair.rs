//! The open-time repair of the double-write area: [`repair`] scans the area's valid batches
//! of the current generation (or of any, when the file header is damaged) and restores every
//! torn in-place page from its newest valid copy before redo.
//!
//! Invariants: a batch is used only when its header checksum holds and every copy it
//! describes lies inside the area; a copy is written back only when its own checks hold and
//! the in-place image fails its checks; nothing is written without `write`.

use super::{
    parse_file_header, PageId, BATCH_FIXED_BYTES, BATCH_MAGIC, BLOCK, DOUBLEWRITE_FILE, ENTRY_BYTES,
    MAX_BATCH_PAGES,
};
use crate::error::{Error, Result};
use crate::io::{AlignedBuf, Device, IoRequest, Storage};
use crate::page::PageHeader;
use crate::util::bytes::{u32_at, u64_at};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// A copy found in the area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Copy {
    tag: u8,
    pid: PageId,
    page_size: usize,
    lsn: u64,
    seq: u64,
    /// Offset of the image in the file.
    offset: u64,
}

/// What [`repair`] found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepairReport {
    /// The file did not exist.
    pub missing: bool,
    /// The file header was damaged: batches of any generation were considered (each is checked
    /// on its own), and the file is rebuilt by the next [`DoubleWrite::create`].
    pub header_damaged: bool,
    /// Batches whose header was valid.
    pub batches: u64,
    /// Page copies they describe.
    pub copies: u64,
    /// Distinct pages whose in-place image was checked.
    pub pages_checked: u64,
    /// Pages whose in-place image failed its checks and was restored from a copy (or, when
    /// repairing is not allowed, would have been).
    pub pages_restored: u64,
    /// Pages whose in-place image failed its checks with no valid copy in the area.
    pub pages_without_copy: u64,
}

/// Finds the pages the double-write file in `storage` protects whose in-place images are torn
/// (fail their checks, lie past the file's end, or cannot be read) and, with `write`, restores
/// each from its newest valid copy (highest LSN, then newest batch) and syncs the devices
/// written. `locate(tag, file, page_size)` gives the data device of a pool's file, or `None`
/// for a file that no longer exists or has another page size (its copies are ignored).
/// Without `write` nothing is written: the report says what a repair would restore.
pub fn repair(
    storage: &dyn Storage,
    locate: &mut dyn FnMut(u8, u32, usize) -> Result<Option<Arc<dyn Device>>>,
    write: bool,
) -> Result<RepairReport> {
    let mut report = RepairReport::default();
    if !storage.exists(DOUBLEWRITE_FILE) {
        report.missing = true;
        return Ok(report);
    }
    let dev = storage.open(DOUBLEWRITE_FILE, false)?;
    let name = dev.info().name;
    let (copies, header_damaged, batches) = scan(&*dev, &name)?;
    report.header_damaged = header_damaged;
    report.batches = batches;
    report.copies = copies.len() as u64;
    // Candidates per page, best first.
    let mut by_page: BTreeMap<(u8, u32, u64), Vec<Copy>> = BTreeMap::new();
    for c in copies {
        by_page.entry((c.tag, c.pid.file, c.pid.page)).or_default().push(c);
    }
    for v in by_page.values_mut() {
        v.sort_unstable_by_key(|c| std::cmp::Reverse((c.lsn, c.seq)));
    }
    // The in-place images, read one file at a time in one batch.
    let mut by_file: BTreeMap<(u8, u32), Vec<(u64, usize)>> = BTreeMap::new();
    for ((tag, file, page), v) in &by_page {
        by_file.entry((*tag, *file)).or_default().push((*page, v[0].page_size));
    }
    let mut touched: HashMap<(u8, u32), Arc<dyn Device>> = HashMap::new();
    for ((tag, file), pages) in by_file {
        let ps = pages[0].1;
        if pages.iter().any(|&(_, s)| s != ps) {
            return Err(Error::Corruption {
                file: name.clone(),
                offset: 0,
                detail: format!("copies of file {file} (pool {tag}) with different page sizes"),
            });
        }
        let Some(data) = locate(tag, file, ps)? else { continue };
        let data_name = data.info().name;
        let cap = data.capacity();
        let mut images = AlignedBuf::large(pages.len() * ps);
        let mut readable = vec![false; pages.len()];
        {
            let mut reqs = Vec::new();
            for ((k, &(page, _)), img) in pages.iter().enumerate().zip(images.chunks_mut(ps)) {
                if (page + 1) * ps as u64 <= cap {
                    readable[k] = true;
                    reqs.push(IoRequest::Read { offset: page * ps as u64, buf: img });
                }
            }
            if data.submit_batch(&mut reqs).is_err() {
                // Some read failed: find which, one at a time (a failed read counts as torn).
                drop(reqs);
                for (k, &(page, _)) in pages.iter().enumerate() {
                    if readable[k] {
                        readable[k] =
                            data.read_at(page * ps as u64, &mut images[k * ps..(k + 1) * ps]).is_ok();
                    }
                }
            }
        }
        let mut copy_buf = AlignedBuf::new(ps);
        for (k, &(page, _)) in pages.iter().enumerate() {
            report.pages_checked += 1;
            let offset = page * ps as u64;
            let img = &images[k * ps..(k + 1) * ps];
            if readable[k] && PageHeader::verify(img, &data_name, offset, file, page).is_ok() {
                continue;
            }
            let mut restored = false;
            for c in &by_page[&(tag, file, page)] {
                dev.read_at(c.offset, &mut copy_buf)?;
                let ok =
                    PageHeader::verify(&copy_buf, &name, c.offset, file, page).is_ok_and(|h| h.lsn == c.lsn);
                if !ok {
                    continue; // a copy whose own write tore, or overwritten since
                }
                if write {
                    data.write_at(offset, &copy_buf)?;
                    touched.insert((tag, file), data.clone());
                }
                restored = true;
                break;
            }
            if restored {
                report.pages_restored += 1;
            } else {
                report.pages_without_copy += 1;
            }
        }
    }
    for d in touched.values() {
        d.sync()?;
    }
    Ok(report)
}

/// Reads the area and returns the copies its valid batches describe, whether the file header
/// was damaged, and how many valid batches there were.
fn scan(dev: &dyn Device, name: &str) -> Result<(Vec<Copy>, bool, u64)> {
    let cap = dev.capacity() / BLOCK as u64 * BLOCK as u64;
    if cap < BLOCK as u64 {
        return Ok((Vec::new(), false, 0));
    }
    let mut head = AlignedBuf::new(BLOCK);
    dev.read_at(0, &mut head)?;
    let (generation, end, damaged) = match parse_file_header(&head) {
        Some((g, area)) => (Some(g), cap.min(BLOCK as u64 + area), false),
        // A header never written (a crash while creating the file) holds no batch; one that is
        // damaged is read with every batch checked on its own.
        None => (None, cap, head.iter().any(|&b| b != 0)),
    };
    let mut copies = Vec::new();
    let mut batches = 0;
    let chunk = 1 << 20;
    let mut buf = AlignedBuf::large(chunk);
    let mut off = BLOCK as u64;
    while off < end {
        let n = (end - off).min(chunk as u64) as usize;
        dev.read_at(off, &mut buf[..n])?;
        for (i, b) in buf[..n].chunks_exact(BLOCK).enumerate() {
            let at = off + (i * BLOCK) as u64;
            if b[0..8] != BATCH_MAGIC || u32_at(b, BLOCK - 4) != crate::util::crc32c(&b[..BLOCK - 4]) {
                continue;
            }
            if generation.is_some_and(|g| u64_at(b, 8) != g) {
                continue; // an earlier generation's batch
            }
            let count = u32_at(b, 24) as usize;
            if count == 0 || count > MAX_BATCH_PAGES {
                return Err(Error::Corruption {
                    file: name.to_string(),
                    offset: at,
                    detail: format!("double-write batch header with a valid checksum claims {count} pages"),
                });
            }
            let seq = u64_at(b, 16);
            let mut image = at + BLOCK as u64;
            let mut found = Vec::with_capacity(count);
            for k in 0..count {
                let e = &b[BATCH_FIXED_BYTES + k * ENTRY_BYTES..][..ENTRY_BYTES];
                let page_size = u32_at(e, 4) as usize;
                if page_size == 0 || !page_size.is_multiple_of(BLOCK) || page_size > 1 << 20 {
                    return Err(Error::Corruption {
                        file: name.to_string(),
                        offset: at,
                        detail: format!("double-write batch entry {k} has page size {page_size}"),
                    });
                }
                found.push(Copy {
                    tag: e[0],
                    pid: PageId::new(u32_at(e, 8), u64_at(e, 16)),
                    page_size,
                    lsn: u64_at(e, 24),
                    seq,
                    offset: image,
                });
                image += page_size as u64;
            }
            // Copies past the area's end were never written there (a batch never wraps).
            if image <= end {
                batches += 1;
                copies.extend(found);
            }
        }
        off += n as u64;
    }
    Ok((copies, damaged, batches))
}
