//! Scenario: segment recycling. As the log advances and `truncate_before` releases old
//! segments, their files are reused for new segments (or deleted beyond the configured spare
//! count), the number of files stays bounded, and the stale records left in a recycled file are
//! never read as live ones, before or after a reopen.

mod wal_common;

use nvmedb::io::Storage;
use nvmedb::wal::{FileLog, LogReader, LogSink, Lsn, WalOptions};
use nvmedb::Error;
use std::sync::Arc;
use wal_common::{dynp, payload, sim_pair};

#[test]
fn wal_truncated_segments_are_recycled_and_stale_records_never_resurface() {
    let (a, b) = sim_pair();
    let opts = WalOptions {
        segment_bytes: 64 * 1024,
        max_batch_bytes: 16 * 1024,
        keep_free_segments: 2,
        ..WalOptions::default()
    };
    let log = FileLog::open(dynp(&a), dynp(&b), opts.clone()).unwrap();
    let mut recs: Vec<(Lsn, Vec<u8>)> = Vec::new();
    let mut trunc = 0;
    let mut max_files = 0;
    for i in 0..3000u64 {
        let p = payload(3, i, 100 + (i as usize * 13) % 900);
        let (s, e) = log.append(&p).unwrap();
        recs.push((s, p));
        if i % 7 == 0 {
            log.wait_durable(e).unwrap();
        }
        if i % 200 == 199 {
            log.wait_durable(e).unwrap();
            trunc = recs[recs.len() - 150].0;
            log.truncate_before(trunc).unwrap();
            // Files beyond the spares are deleted in the background: read what is left to
            // delete first, so that a deletion between the two reads only lowers the count.
            let deleting = log.files_to_delete();
            let (files, files_b) = (a.list().unwrap().len(), b.list().unwrap().len());
            max_files = max_files.max((files + files_b).saturating_sub(deleting));
            assert!(
                files + files_b <= 2 * (log.segments().len() + 2) + deleting,
                "{files} + {files_b} files for {} live segments and {deleting} files being deleted",
                log.segments().len()
            );
        }
    }
    let stats = log.stats();
    assert!(stats.segments_recycled > 10, "recycling did not happen: {stats:?}");
    assert!(max_files <= 16, "file count (both copies) not bounded: {max_files}");
    let err = log.truncate_before(u64::MAX).expect_err("truncating past the durable end");
    assert!(matches!(err, Error::InvalidArgument(_)));
    let live_segments = log.segments().len();
    let end = log.close().unwrap();
    // Closing finishes the deletions: both copies hold the same files, no more than the live
    // segments and the spares.
    assert_eq!(a.list().unwrap(), b.list().unwrap(), "both copies hold the same files");
    assert!(a.list().unwrap().len() <= live_segments + 2, "{:?}", a.list().unwrap());
    let live: Vec<_> = recs.iter().filter(|r| r.0 >= trunc).collect();
    for pass in 0..2 {
        let got: Vec<_> =
            LogReader::open(dynp(&a), dynp(&b), trunc).unwrap().collect::<nvmedb::Result<_>>().unwrap();
        assert_eq!(got.len(), live.len(), "pass {pass}");
        for (r, (s, p)) in got.iter().zip(&live) {
            assert_eq!(r.lsn, *s);
            assert!(r.payload == *p);
        }
        let log = FileLog::open(dynp(&a), dynp(&b), opts.clone()).unwrap();
        assert_eq!(log.recovered().end_lsn, end);
    }
}

#[test]
fn wal_reading_before_the_oldest_segment_is_not_found() {
    let (a, b) = sim_pair();
    let opts = WalOptions {
        segment_bytes: 64 * 1024,
        max_batch_bytes: 16 * 1024,
        keep_free_segments: 0,
        ..WalOptions::default()
    };
    let log = FileLog::open(dynp(&a), dynp(&b), opts).unwrap();
    let mut last = (0, 0);
    for i in 0..400 {
        last = log.append(&payload(4, i, 1000)).unwrap();
    }
    log.wait_durable(last.1).unwrap();
    assert!(log.truncate_before(last.0).unwrap() > 0);
    let oldest = log.segments()[0].base_lsn;
    assert!(oldest > 0);
    let a2: Arc<dyn Storage> = a.clone();
    match LogReader::open(a2, dynp(&b), 0) {
        Err(Error::NotFound(_)) => {}
        other => panic!("expected NotFound, got {other:?}"),
    }
    let r = log.reader(oldest).unwrap().count();
    assert!(r > 0);
}

/// The log asks for a checkpoint once `checkpoint_after_bytes` were written since it was
/// opened or last truncated, and stops asking when a checkpoint's truncate ends.
#[test]
fn wal_asks_for_a_checkpoint_after_its_checkpoint_volume() {
    let (a, b) = sim_pair();
    let opts = WalOptions { checkpoint_after_bytes: 256 * 1024, ..wal_common::small_opts() };
    let log = FileLog::open(dynp(&a), dynp(&b), opts).unwrap();
    let start = log.end_lsn();
    let mut asked_at = None;
    for i in 0..2000u64 {
        let (_, e) = log.append(&payload(4, i, 700)).unwrap();
        if log.wants_checkpoint() {
            log.wait_durable(e).unwrap();
            asked_at = Some(e - start);
            break;
        }
    }
    let asked_at = asked_at.expect("the log never asked for a checkpoint");
    assert!((256 * 1024..256 * 1024 + 4096).contains(&asked_at), "asked after {asked_at} bytes");
    log.truncate_before(log.durable_lsn()).unwrap();
    assert!(!log.wants_checkpoint(), "a checkpoint just ended");
    let never = WalOptions { checkpoint_after_bytes: 0, ..wal_common::small_opts() };
    let (c, d) = sim_pair();
    let log = FileLog::open(dynp(&c), dynp(&d), never).unwrap();
    for i in 0..1000u64 {
        log.append(&payload(5, i, 700)).unwrap();
    }
    assert!(!log.wants_checkpoint(), "0 means never");
}

/// A single (one-copy) log reuses across opens the slots that `truncate_before` released: each
/// open's new segment goes into the slot released by the previous open, so the file count stays
/// at two, and the records kept read back intact after every reopen.
#[test]
fn wal_single_log_reuses_released_slots_across_opens() {
    let (a, _) = sim_pair();
    let opts = WalOptions { segment_bytes: 64 * 1024, max_batch_bytes: 16 * 1024, ..WalOptions::default() };
    let mut recs: Vec<(Lsn, Vec<u8>)> = Vec::new();
    for round in 0..8u64 {
        let log = FileLog::open_single(dynp(&a), opts.clone()).unwrap();
        assert_eq!(log.copies(), 1);
        let mut last = 0;
        for i in 0..20 {
            let p = payload(6, round * 100 + i, 300);
            let (s, e) = log.append(&p).unwrap();
            recs.push((s, p));
            last = e;
        }
        log.wait_durable(last).unwrap();
        let st = log.stats();
        if round >= 2 {
            assert_eq!(
                (st.segments_created, st.segments_recycled),
                (0, 1),
                "round {round}: the new segment must reuse the slot the last open released"
            );
        }
        // Keep this open's records only.
        let first = recs[recs.len() - 20].0;
        log.truncate_before(first).unwrap();
        log.close().unwrap();
        let files = a.list().unwrap().len();
        assert!(files <= 2, "round {round}: {files} segment files");
        let got: Vec<_> =
            LogReader::open_copies(vec![dynp(&a)], first).unwrap().collect::<nvmedb::Result<_>>().unwrap();
        assert_eq!(got.len(), 20, "round {round}");
        for (r, (s, p)) in got.iter().zip(&recs[recs.len() - 20..]) {
            assert_eq!((r.lsn, &r.payload), (*s, p), "round {round}");
        }
    }
}

/// The log keeps its segment file backed by storage ahead of its flushes: after the first
/// durable records in a new segment on a real directory, the file is allocated well past them
/// (a flush into a hole would make its sync write allocation metadata too), the records read
/// back, and a reopen (which takes a new slot) does the same.
#[test]
fn wal_segments_are_backed_by_storage_ahead_of_the_flushes() {
    use nvmedb::io::{DirStorage, FileOptions};
    use std::os::unix::fs::MetadataExt;
    let dir = nvmedb_testkit::TmpDir::new("wal-prepare");
    let st: Arc<dyn Storage> = Arc::new(DirStorage::new(dir.path(), FileOptions::default()).unwrap());
    let segment_bytes = 16u64 << 20;
    let opts = WalOptions { segment_bytes, ..WalOptions::default() };
    let mut recs = Vec::new();
    for round in 0..2u64 {
        let log = FileLog::open_single(st.clone(), opts.clone()).unwrap();
        let mut last = 0;
        for i in 0..50 {
            let p = payload(9, round * 100 + i, 700);
            let (s, e) = log.append(&p).unwrap();
            recs.push((s, p));
            last = e;
            log.wait_durable(e).unwrap();
        }
        log.wait_durable(last).unwrap();
        log.close().unwrap();
        let allocated: Vec<(String, u64)> = st
            .list()
            .unwrap()
            .into_iter()
            .map(|f| {
                let blocks = std::fs::metadata(dir.path().join(&f)).unwrap().blocks();
                (f, blocks * 512)
            })
            .collect();
        assert!(
            allocated.iter().filter(|(_, b)| *b >= 4 << 20).count() == round as usize + 1,
            "round {round}: every segment used so far is allocated at least 4 MiB ahead: {allocated:?}"
        );
    }
    let got: Vec<_> =
        LogReader::open_copies(vec![st.clone()], recs[0].0).unwrap().collect::<nvmedb::Result<_>>().unwrap();
    assert_eq!(got.len(), recs.len());
    for (r, (s, p)) in got.iter().zip(&recs) {
        assert_eq!((r.lsn, &r.payload), (*s, p));
    }
}

/// What a [`Recording`] storage saw, per file, in order: writes (offset, length, whether every
/// byte was zero) and syncs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Write { offset: u64, len: usize, zeros: bool },
    Sync,
}

type OpLog = Arc<std::sync::Mutex<Vec<(String, Op)>>>;

/// A storage that records every write and sync of the devices it opens.
struct Recording {
    inner: nvmedb::io::MemStorage,
    ops: OpLog,
}

struct RecordingDevice {
    name: String,
    inner: Arc<dyn nvmedb::io::Device>,
    ops: OpLog,
}

impl nvmedb::io::Device for RecordingDevice {
    fn info(&self) -> nvmedb::io::DeviceInfo {
        self.inner.info()
    }
    fn alignment(&self) -> usize {
        self.inner.alignment()
    }
    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }
    fn ensure_capacity(&self, len: u64) -> nvmedb::io::IoResult<()> {
        self.inner.ensure_capacity(len)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> nvmedb::io::IoResult<()> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> nvmedb::io::IoResult<()> {
        let op = Op::Write { offset, len: buf.len(), zeros: buf.iter().all(|&b| b == 0) };
        self.ops.lock().unwrap().push((self.name.clone(), op));
        self.inner.write_at(offset, buf)
    }
    fn sync(&self) -> nvmedb::io::IoResult<()> {
        self.ops.lock().unwrap().push((self.name.clone(), Op::Sync));
        self.inner.sync()
    }
}

impl Storage for Recording {
    fn open(&self, name: &str, create: bool) -> nvmedb::io::IoResult<Arc<dyn nvmedb::io::Device>> {
        let inner = self.inner.open(name, create)?;
        Ok(Arc::new(RecordingDevice { name: name.to_string(), inner, ops: self.ops.clone() }))
    }
    fn exists(&self, name: &str) -> bool {
        self.inner.exists(name)
    }
    fn list(&self) -> nvmedb::io::IoResult<Vec<String>> {
        self.inner.list()
    }
    fn remove(&self, name: &str) -> nvmedb::io::IoResult<()> {
        self.inner.remove(name)
    }
    fn location(&self) -> String {
        self.inner.location()
    }
}

/// A new segment's header is written and synced on its own before any record of the segment is
/// written, also in a recycled slot and in the first segment after a reopen. Otherwise a crash
/// could keep a segment's records and lose its header; the next open, finding the log's end
/// where that segment began, would start its own new segment at the same LSNs, and a later
/// crash losing that segment's records could expose the lost segment's records in their place
/// (a power-cut test found it: records of a lost flush read back after the next crash).
#[test]
fn wal_a_new_segments_header_is_durable_before_its_records() {
    let ops: OpLog = Arc::default();
    let st: Arc<dyn Storage> = Arc::new(Recording { inner: nvmedb::io::MemStorage::new(), ops: ops.clone() });
    let opts = WalOptions {
        segment_bytes: 64 * 1024,
        max_batch_bytes: 16 * 1024,
        keep_free_segments: 2,
        ..WalOptions::default()
    };
    let mut first_kept = 0;
    for round in 0..3u64 {
        let log = FileLog::open_single(st.clone(), opts.clone()).unwrap();
        for i in 0..400u64 {
            let (s, e) = log.append(&payload(9, round * 1000 + i, 300 + (i as usize * 37) % 700)).unwrap();
            if i % 7 == 0 {
                log.wait_durable(e).unwrap();
            }
            // Keep about two segments: the released slots are recycled.
            if i % 50 == 49 {
                log.truncate_before(first_kept).unwrap();
                first_kept = s;
            }
        }
        log.close().unwrap();
    }
    let ops = ops.lock().unwrap();
    let mut awaiting: std::collections::HashMap<&str, bool> = Default::default();
    let (mut headers, mut recycled) = (0, 0);
    let mut written: std::collections::HashSet<&str> = Default::default();
    for (name, op) in ops.iter() {
        match *op {
            Op::Write { offset: 0, len, zeros: false } => {
                assert_eq!(len, 4096, "{name}: a segment header written together with records");
                awaiting.insert(name, true);
                headers += 1;
                recycled += usize::from(!written.insert(name));
            }
            Op::Write { offset, zeros: false, .. } => {
                assert!(
                    !awaiting.get(name.as_str()).copied().unwrap_or(false),
                    "{name}: a record written at offset {offset} before the segment's header was synced"
                );
            }
            Op::Write { .. } => {}
            Op::Sync => {
                awaiting.insert(name, false);
            }
        }
    }
    assert!(headers >= 8 && recycled >= 3, "{headers} segment headers, {recycled} in recycled slots");
}
