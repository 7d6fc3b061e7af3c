//! Segment files of the file log and how the live chain of segments is found at open.
//!
//! Owns: segment slot names (`wal-NNNNNNNN`), [`Segment`] (a header plus the device of each
//! copy), reading a segment header from every copy, and [`discover`], which turns the files of
//! the copies (one storage, or two when the log is duplexed) into the chain of live segments.
//! Invariants: a slot's header is taken from the copy whose header is valid and has the higher
//! sequence number (a recycled slot whose new header reached only one copy is the new segment);
//! a slot whose header block is zero (released by `FileLog::truncate_before`) is free; the
//! chain is the run of consecutive
//! sequence numbers ending at the highest one, with non-decreasing base LSNs; two slots never
//! claim the same sequence number, and all valid headers carry one log id (otherwise: corruption).

use crate::error::{Error, Result};
use crate::io::{AlignedBuf, Device, IoError, Storage};
use crate::wal::format::{SegmentHeader, BLOCK_BYTES, SEGMENT_HEADER_BLOCK_BYTES};
use std::collections::BTreeSet;
use std::sync::Arc;

/// File name prefix of log segment slots.
pub const SEGMENT_PREFIX: &str = "wal-";

/// The name of slot number `n`.
pub fn slot_name(n: u64) -> String {
    format!("{SEGMENT_PREFIX}{n:08}")
}

/// The slot number of a segment file name, if it is one.
pub fn parse_slot(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(SEGMENT_PREFIX)?;
    if digits.len() != 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// One live segment: its slot, header, and its device in each copy (`None`: missing there).
#[derive(Clone)]
pub(crate) struct Segment {
    pub name: String,
    pub header: SegmentHeader,
    pub devs: Vec<Option<Arc<dyn Device>>>,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("name", &self.name)
            .field("header", &self.header)
            .field("copies", &self.devs.iter().map(Option::is_some).collect::<Vec<_>>())
            .finish()
    }
}

/// A public description of a live segment, for tools and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentDesc {
    /// Slot (file) name, the same in both copies.
    pub name: String,
    /// Sequence number.
    pub seq: u64,
    /// LSN of the first data byte (file offset 4096).
    pub base_lsn: u64,
    /// File size in bytes.
    pub segment_bytes: u64,
}

impl Segment {
    pub fn desc(&self) -> SegmentDesc {
        SegmentDesc {
            name: self.name.clone(),
            seq: self.header.seq,
            base_lsn: self.header.base_lsn,
            segment_bytes: self.header.segment_bytes,
        }
    }
}

/// What [`discover`] found.
pub(crate) struct Discovery {
    /// Live segments, ascending sequence numbers.
    pub chain: Vec<Segment>,
    /// Slot names present in either copy but not in the chain: free for reuse.
    pub free_slots: Vec<String>,
    /// Highest slot number seen (to name new slots after it).
    pub max_slot: Option<u64>,
    /// The log's identifier, if any segment has a valid header.
    pub log_id: Option<u64>,
}

/// Reads `buf.len()` bytes at `offset`, treating bytes past the device's end as zeroes.
pub(crate) fn read_clamped(dev: &dyn Device, offset: u64, buf: &mut [u8]) -> Result<()> {
    let cap = dev.capacity();
    let avail = cap.saturating_sub(offset).min(buf.len() as u64) as usize;
    let avail = avail - avail % BLOCK_BYTES;
    if avail > 0 {
        dev.read_at(offset, &mut buf[..avail])?;
    }
    buf[avail..].fill(0);
    Ok(())
}

fn read_header(dev: &dyn Device) -> Result<Result<SegmentHeader, String>> {
    if dev.capacity() < SEGMENT_HEADER_BLOCK_BYTES {
        return Ok(Err("file shorter than a header block".into()));
    }
    let mut b = AlignedBuf::new(BLOCK_BYTES);
    read_clamped(dev, 0, &mut b)?;
    Ok(SegmentHeader::decode(&b))
}

/// `location/name` of a file of copy `copy`, for error messages.
pub(crate) fn file_label(storages: &[Arc<dyn Storage>], copy: usize, name: &str) -> String {
    format!("{}/{}", storages[copy].location(), name)
}

/// Finds the live chain of segments in the copies.
pub(crate) fn discover(storages: &[Arc<dyn Storage>]) -> Result<Discovery> {
    let mut names = BTreeSet::new();
    for s in storages.iter() {
        for n in s.list()? {
            if parse_slot(&n).is_some() {
                names.insert(n);
            }
        }
    }
    let max_slot = names.iter().filter_map(|n| parse_slot(n)).max();
    let mut found: Vec<Segment> = Vec::new();
    let mut headerless = Vec::new();
    for name in &names {
        let mut devs: Vec<Option<Arc<dyn Device>>> = vec![None; storages.len()];
        let mut best: Option<SegmentHeader> = None;
        for (c, s) in storages.iter().enumerate() {
            if !s.exists(name) {
                continue;
            }
            let dev = match s.open(name, false) {
                Ok(d) => d,
                // A free slot deleted in the background between the listing and here.
                Err(IoError::Os { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e.into()),
            };
            if let Ok(h) = read_header(&*dev)? {
                if let Some(b) = best.filter(|b| b.log_id != h.log_id) {
                    return Err(Error::Corruption {
                        file: file_label(storages, c, name),
                        offset: 0,
                        detail: format!(
                            "the two copies of this segment belong to different logs ({:#x} and {:#x})",
                            b.log_id, h.log_id
                        ),
                    });
                }
                if best.is_none_or(|b| h.seq > b.seq) {
                    best = Some(h);
                }
            }
            devs[c] = Some(dev);
        }
        match best {
            Some(header) => found.push(Segment { name: name.clone(), header, devs }),
            None => headerless.push(name.clone()),
        }
    }
    // A log's segments all carry its id (recycling keeps it; a new id is drawn only when no
    // valid header exists). A segment of another log means the paths are misconfigured: refuse
    // rather than recycle (overwrite) another log's files.
    let log_id = found.iter().max_by_key(|s| s.header.seq).map(|s| s.header.log_id);
    if let (Some(id), Some(other)) = (log_id, found.iter().find(|s| Some(s.header.log_id) != log_id)) {
        return Err(Error::Corruption {
            file: file_label(storages, 0, &other.name),
            offset: 0,
            detail: format!(
                "segment belongs to log {:#x}, but the newest segment belongs to log {id:#x}: the two \
                 log paths hold files of different logs",
                other.header.log_id
            ),
        });
    }
    let free_slots = headerless;
    let mut mine = found;
    mine.sort_by_key(|s| s.header.seq);
    for w in mine.windows(2) {
        if w[0].header.seq == w[1].header.seq {
            return Err(Error::Corruption {
                file: file_label(storages, 0, &w[1].name),
                offset: 0,
                detail: format!(
                    "segments {} and {} both claim sequence number {}",
                    w[0].name, w[1].name, w[1].header.seq
                ),
            });
        }
    }
    // The chain: consecutive sequence numbers ending at the newest segment.
    let mut start = mine.len();
    while start > 0 && (start == mine.len() || mine[start - 1].header.seq + 1 == mine[start].header.seq) {
        start -= 1;
    }
    let chain: Vec<Segment> = mine.split_off(start);
    let mut free_slots = free_slots;
    free_slots.extend(mine.into_iter().map(|s| s.name));
    for w in chain.windows(2) {
        if w[1].header.base_lsn < w[0].header.base_lsn {
            return Err(Error::Corruption {
                file: file_label(storages, 0, &w[1].name),
                offset: 0,
                detail: format!(
                    "segment {} (seq {}) starts at LSN {} before its predecessor {} (LSN {})",
                    w[1].name, w[1].header.seq, w[1].header.base_lsn, w[0].name, w[0].header.base_lsn
                ),
            });
        }
    }
    free_slots.sort();
    Ok(Discovery { chain, free_slots, max_slot, log_id })
}

/// The live segments of the log kept in `copies` (one storage, or two for a duplexed log),
/// oldest first (for inspection tools; opening a log or a reader finds them itself).
pub fn live_segments(copies: &[Arc<dyn Storage>]) -> Result<Vec<SegmentDesc>> {
    let d = discover(copies)?;
    Ok(d.chain.iter().map(Segment::desc).collect())
}

/// The header of segment file `name` of `storage` (its first block), checked (magic, version,
/// CRC).
pub fn read_segment_header(storage: &dyn Storage, name: &str) -> Result<SegmentHeader> {
    let dev = storage.open(name, false)?;
    let mut b = AlignedBuf::new(BLOCK_BYTES);
    read_clamped(dev.as_ref(), 0, &mut b)?;
    SegmentHeader::decode(&b).map_err(|detail| Error::Corruption {
        file: format!("{}/{name}", storage.location()),
        offset: 0,
        detail,
    })
}

/// Makes the log kept in `copies` end at `lsn`, which must be a record end (a durable position
/// the log reported, or the end of a record a reader returned): every byte of the segment
/// holding `lsn` from there on is zeroed (a reader then finds its end there, as after a torn
/// write) and the segments after it are removed. Used to restore a log to a point in time.
pub fn cut_at(copies: &[Arc<dyn Storage>], lsn: u64) -> Result<()> {
    let segs = live_segments(copies)?;
    for (i, s) in segs.iter().enumerate() {
        let next_base = segs.get(i + 1).map(|n| n.base_lsn);
        for st in copies {
            if !st.exists(&s.name) {
                continue;
            }
            if s.base_lsn > lsn || (s.base_lsn == lsn && i > 0) {
                st.remove(&s.name)?;
                continue;
            }
            if next_base.is_some_and(|b| b <= lsn) {
                continue; // wholly before the cut
            }
            let dev = st.open(&s.name, false)?;
            let from = SEGMENT_HEADER_BLOCK_BYTES + (lsn - s.base_lsn);
            if from >= dev.capacity() {
                continue;
            }
            let block = from / BLOCK_BYTES as u64 * BLOCK_BYTES as u64;
            let mut buf = AlignedBuf::new(BLOCK_BYTES);
            read_clamped(dev.as_ref(), block, &mut buf)?;
            buf[(from - block) as usize..].fill(0);
            dev.write_at(block, &buf)?;
            let zeros = AlignedBuf::new(1 << 20);
            let mut at = block + BLOCK_BYTES as u64;
            while at < dev.capacity() {
                let n = (zeros.len() as u64).min(dev.capacity() - at) as usize;
                dev.write_at(at, &zeros[..n])?;
                at += n as u64;
            }
            dev.sync()?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_names_roundtrip() {
        assert_eq!(slot_name(12), "wal-00000012");
        assert_eq!(parse_slot("wal-00000012"), Some(12));
        assert_eq!(parse_slot("wal-12"), None);
        assert_eq!(parse_slot("data-00000012"), None);
    }

    /// A storage that lists a slot which is deleted before it can be opened (a free slot the
    /// background thread removes while another thread lists the log).
    struct Vanishing(crate::io::MemStorage);

    impl Storage for Vanishing {
        fn open(&self, name: &str, create: bool) -> crate::io::IoResult<Arc<dyn Device>> {
            if name == "wal-00000099" {
                return Err(IoError::Os {
                    device: name.into(),
                    op: crate::io::IoOpKind::Setup,
                    offset: 0,
                    len: 0,
                    source: std::io::Error::new(std::io::ErrorKind::NotFound, "deleted"),
                });
            }
            self.0.open(name, create)
        }
        fn exists(&self, name: &str) -> bool {
            name == "wal-00000099" || self.0.exists(name)
        }
        fn list(&self) -> crate::io::IoResult<Vec<String>> {
            let mut l = self.0.list()?;
            l.push("wal-00000099".into());
            Ok(l)
        }
        fn remove(&self, name: &str) -> crate::io::IoResult<()> {
            self.0.remove(name)
        }
        fn location(&self) -> String {
            "vanishing".into()
        }
    }

    #[test]
    fn a_slot_deleted_between_listing_and_opening_is_skipped() {
        let other: Arc<dyn Storage> = Arc::new(Vanishing(crate::io::MemStorage::new()));
        let d = discover(std::slice::from_ref(&other)).expect("a vanished free slot is not an error");
        assert!(d.chain.is_empty());
        assert!(live_segments(&[other]).unwrap().is_empty());
    }
}
