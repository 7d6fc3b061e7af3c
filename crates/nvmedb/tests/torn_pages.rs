//! Torn pages: a crash in the middle of a write-back leaves a page with some sectors new and
//! the rest old. Each protection (`Options::torn_page_protection`) is run through the same
//! crash on a simulated disk: pages changed after a checkpoint are written back, every
//! in-place write is torn by the power cut before the data files are synced, and the database
//! is reopened. The double-write area (the default) repairs them with no full page image in
//! the log; full page images repair them from the log; no protection cannot. Also: a torn
//! double-write batch is ignored, a missing or damaged double-write file is handled, and a
//! read-only open refuses pages it would have to restore.

mod support;

use nvmedb::buffer::mtr::PageChange;
use nvmedb::io::{Device, IoError, IoHook, IoOpKind, IoResult, Storage, WriteFate};
use nvmedb::wal::engine::EngineRecord;
use nvmedb::wal::LogReader;
use nvmedb::{BufferSize, ColumnType, Database, Options, Schema, TornPageProtection, Value};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use support::SimDisks;

const ROWS: i64 = 400;
const DW: &str = nvmedb::buffer::DOUBLEWRITE_FILE;

/// Fails syncs of the data files once `data_syncs_left` syncs have passed, or of the
/// double-write file (when `dw`): the power is cut just before them, so the writes they would
/// have made durable are torn.
struct CutBeforeSync {
    data_syncs_left: AtomicI64,
    dw: AtomicBool,
}

impl Default for CutBeforeSync {
    fn default() -> Self {
        Self { data_syncs_left: AtomicI64::new(i64::MAX), dw: AtomicBool::new(false) }
    }
}

impl IoHook for CutBeforeSync {
    fn before(&self, device: &str, op: IoOpKind, offset: u64, len: usize) -> IoResult<()> {
        let is_dw = device.ends_with(DW);
        let is_data = device.ends_with(".heap") || device.ends_with(".idx");
        if op == IoOpKind::Sync
            && ((is_data && self.data_syncs_left.fetch_sub(1, Ordering::SeqCst) <= 0)
                || (is_dw && self.dw.load(Ordering::SeqCst)))
        {
            return Err(IoError::os(device, op, offset, len, std::io::Error::from_raw_os_error(5)));
        }
        Ok(())
    }
}

/// The disks (`support::SimDisks`), the data behind the power cut of [`CutBeforeSync`].
struct Disks {
    sim: SimDisks,
    hook: Arc<CutBeforeSync>,
}

impl Disks {
    fn new() -> Self {
        Self { sim: SimDisks::new(), hook: Arc::new(CutBeforeSync::default()) }
    }

    fn open(&self, options: Options) -> nvmedb::Result<Database> {
        self.sim.open(Some(self.hook.clone()), None, options)
    }

    /// The power fails: every unsynced write to the data files keeps only its first sector,
    /// every unsynced write to the double-write file only its first three, logs lose theirs.
    fn crash(&self) {
        for name in self.sim.data.list().unwrap() {
            let dev = self.sim.data.device(&name).unwrap();
            let keep = if name == DW { 3 } else { 1 };
            dev.crash_with(|_, _, _| WriteFate::Torn(keep));
        }
        for s in [&self.sim.log_a, &self.sim.log_b] {
            for name in s.list().unwrap() {
                s.device(&name).unwrap().crash_with(|_, _, _| WriteFate::Dropped);
            }
        }
        self.hook.data_syncs_left.store(i64::MAX, Ordering::SeqCst);
        self.hook.dw.store(false, Ordering::SeqCst);
    }

    /// Pages of the table's heap and index files (`t0.heap`, `t0.idx`) that fail their checks.
    fn torn_pages(&self) -> usize {
        let mut page = nvmedb::io::AlignedBuf::new(4096);
        let mut torn = 0;
        for name in ["t0.heap", "t0.idx"] {
            let dev = self.sim.data.device(name).unwrap();
            for p in 0..dev.capacity() / 4096 {
                dev.read_at(p * 4096, &mut page).unwrap();
                torn += usize::from(nvmedb::page::PageHeader::verify(&page, name, p * 4096, 0, p).is_err());
            }
        }
        torn
    }

    /// Page changes in the log: (full images, new pages, diffs or page operations).
    fn logged_changes(&self) -> (usize, usize, usize) {
        let copies: Vec<Arc<dyn Storage>> = vec![self.sim.log_a.clone(), self.sim.log_b.clone()];
        let first = nvmedb::wal::live_segments(&copies).unwrap()[0].base_lsn;
        let mut reader = LogReader::open_copies(copies, first).unwrap();
        let mut counts = (0, 0, 0);
        while let Some(rec) = reader.next_record().unwrap() {
            if let Ok(Some(EngineRecord::Pages { mtr, format, .. })) =
                EngineRecord::decode(rec.kind, &rec.payload)
            {
                for (_, change) in format.decode(mtr, 4096).expect("page changes decode").changes {
                    match change {
                        PageChange::FullImage(_) => counts.0 += 1,
                        PageChange::NewPage(_) => counts.1 += 1,
                        PageChange::Ranges(_) | PageChange::Ops(_) => counts.2 += 1,
                    }
                }
            }
        }
        counts
    }
}

fn options(protection: TornPageProtection) -> Options {
    Options {
        table_page_size: 4096,
        index_page_size: 4096,
        // Every page stays in memory: pages are written back only by the flushes below.
        table_buffer: BufferSize::Bytes(1 << 20),
        index_buffer: BufferSize::Bytes(1 << 20),
        background_writer: None,
        torn_page_protection: protection,
        doublewrite_bytes: 1 << 20,
        wal_options: nvmedb::wal::WalOptions {
            segment_bytes: 1 << 20,
            max_batch_bytes: 64 << 10,
            ..Default::default()
        },
        ..Options::default()
    }
}

fn pad(id: i64, round: i64) -> Vec<u8> {
    vec![(id + round) as u8; 300]
}

/// Loads the table and checkpoints, changes every row (each page's first change after the
/// checkpoint), then writes the pages back and cuts the power before the data files are
/// synced (every in-place write torn; with `tear_dw` the power is cut before the double-write
/// file's sync instead, so its batch is torn and no in-place write begins). Returns the disks.
fn crash_after_checkpoint(protection: TornPageProtection, tear_dw: bool) -> Disks {
    let disks = Disks::new();
    let db = disks.open(options(protection)).unwrap();
    let schema =
        Schema::new(vec![("id", ColumnType::Int), ("n", ColumnType::Int), ("pad", ColumnType::Bytes(400))])
            .with_index("by_n", "n")
            .unwrap();
    let t = db.create_table("t", schema).unwrap();
    for id in 0..ROWS {
        t.insert(&[Value::Int(id), Value::Int(0), Value::Bytes(pad(id, 0))]).unwrap();
    }
    db.checkpoint().unwrap();
    for id in 0..ROWS {
        let vals = [Value::Int(id), Value::Int(1), Value::Bytes(pad(id, 1))];
        assert!(t.update(&vals).unwrap());
    }
    if tear_dw {
        disks.hook.dw.store(true, Ordering::SeqCst);
    } else {
        disks.hook.data_syncs_left.store(0, Ordering::SeqCst);
    }
    assert!(db.flush().is_err(), "the power cut fails the flush");
    drop(t);
    drop(db);
    disks.crash();
    disks
}

/// Every row holds its second version and heap and indexes agree.
fn check(db: &Database) {
    let t = db.table("t").unwrap();
    assert_eq!(t.check_integrity().unwrap(), ROWS as u64);
    for id in 0..ROWS {
        let got = t.read(&Value::Int(id), |r| (r.int(1), r.bytes(2).to_vec())).unwrap();
        assert_eq!(got, Some((1, pad(id, 1))), "row {id}");
    }
}

#[test]
fn a_page_torn_after_a_checkpoint_is_restored_from_the_double_write_area_not_the_log() {
    let disks = crash_after_checkpoint(TornPageProtection::DoubleWrite, false);
    let torn = disks.torn_pages();
    assert!(torn > 10, "the crash tore the heap pages written back ({torn})");
    let (full, new, diffs) = disks.logged_changes();
    assert_eq!(full, 0, "the log holds no full page image");
    assert!(new > 0 && diffs > 2 * ROWS as usize, "new pages {new}, diffs {diffs}");
    let db = disks.open(options(TornPageProtection::DoubleWrite)).unwrap();
    let rep = db.recovery_report().clone();
    eprintln!("torn {torn}, log: {full} full images, {new} new pages, {diffs} diffs; {rep:?}");
    assert!(rep.pages_restored >= torn as u64, "{rep:?}");
    assert_eq!(rep.full_images_applied, 0, "{rep:?}");
    check(&db);
    let stats = db.doublewrite_stats().expect("the default protection has a double-write area");
    assert_eq!(stats.area_bytes, 1 << 20);
    drop(db);
    assert_eq!(disks.torn_pages(), 0);
}

#[test]
fn a_crash_during_recoverys_write_back_is_repaired_at_the_next_open() {
    let disks = crash_after_checkpoint(TornPageProtection::DoubleWrite, false);
    assert!(disks.torn_pages() > 10);
    // The repair's sync of the heap file passes; the power fails before recovery's write-back
    // (through the new generation of the area) is synced: it wrote the index pages the crash
    // kept from being flushed.
    disks.hook.data_syncs_left.store(1, Ordering::SeqCst);
    assert!(disks.open(options(TornPageProtection::DoubleWrite)).is_err());
    disks.crash();
    let torn = disks.torn_pages();
    assert!(torn > 0, "recovery's write-back was torn too ({torn})");
    let db = disks.open(options(TornPageProtection::DoubleWrite)).unwrap();
    assert!(db.recovery_report().pages_restored >= torn as u64, "{:?}", db.recovery_report());
    check(&db);
}

#[test]
fn full_page_images_repair_from_the_log_and_no_protection_cannot() {
    let disks = crash_after_checkpoint(TornPageProtection::FullPageImages, false);
    assert!(disks.torn_pages() > 10);
    let (full, _, _) = disks.logged_changes();
    assert!(full > 10, "each page's first change after the checkpoint is a full image ({full})");
    assert!(!disks.sim.data.exists(DW), "no double-write file without the double-write protection");
    let db = disks.open(options(TornPageProtection::FullPageImages)).unwrap();
    let rep = db.recovery_report().clone();
    assert!(rep.full_images_applied > 10 && rep.pages_restored == 0, "{rep:?}");
    check(&db);
    drop(db);

    // The same crash without protection: the torn pages cannot be repaired.
    let disks = crash_after_checkpoint(TornPageProtection::None, false);
    assert!(disks.torn_pages() > 10);
    assert_eq!(disks.logged_changes().0, 0);
    let e = disks.open(options(TornPageProtection::None)).unwrap_err().to_string();
    assert!(e.contains("unreadable (torn or missing)") && e.contains(DW), "{e}");
}

#[test]
fn a_torn_double_write_batch_is_ignored() {
    let disks = crash_after_checkpoint(TornPageProtection::DoubleWrite, true);
    // The batch's write tore (its sync never happened), so no in-place write began.
    assert_eq!(disks.torn_pages(), 0);
    let db = disks.open(options(TornPageProtection::DoubleWrite)).unwrap();
    let rep = db.recovery_report().clone();
    assert_eq!(rep.pages_restored, 0, "{rep:?}");
    assert!(rep.pages_redone > 0, "{rep:?}");
    check(&db);
}

#[test]
fn a_missing_or_damaged_double_write_file() {
    // Damaged header: its batches are still checked one by one and used; the file is rebuilt.
    let disks = crash_after_checkpoint(TornPageProtection::DoubleWrite, false);
    let dw = disks.sim.data.device(DW).unwrap();
    let mut head = nvmedb::io::AlignedBuf::new(4096);
    dw.read_at(0, &mut head).unwrap();
    head[0] ^= 0xFF;
    dw.write_at(0, &head).unwrap();
    dw.sync().unwrap();
    let db = disks.open(options(TornPageProtection::DoubleWrite)).unwrap();
    assert!(db.recovery_report().pages_restored > 10);
    check(&db);
    drop(db);
    dw.read_at(0, &mut head).unwrap();
    assert_eq!(&head[..8], b"NVMEDBDW", "the header is rebuilt");

    // Missing with torn pages: nothing can restore them, and the error says which page and why.
    let disks = crash_after_checkpoint(TornPageProtection::DoubleWrite, false);
    disks.sim.data.remove(DW).unwrap();
    let e = disks.open(options(TornPageProtection::DoubleWrite)).unwrap_err().to_string();
    assert!(e.contains("page") && e.contains("torn") && e.contains(DW), "{e}");

    // Missing after a clean close: rebuilt, and the database opens.
    let disks = Disks::new();
    let db = disks.open(options(TornPageProtection::DoubleWrite)).unwrap();
    db.create_table("t", Schema::new(vec![("id", ColumnType::Int)])).unwrap();
    db.close().unwrap();
    disks.sim.data.remove(DW).unwrap();
    let db = disks.open(options(TornPageProtection::DoubleWrite)).unwrap();
    assert!(disks.sim.data.exists(DW));
    db.close().unwrap();
}

#[test]
fn a_read_only_open_refuses_pages_it_would_restore() {
    let disks = crash_after_checkpoint(TornPageProtection::DoubleWrite, false);
    let ro = Options { read_only: true, ..options(TornPageProtection::DoubleWrite) };
    let e = disks.open(ro.clone()).unwrap_err().to_string();
    // Refused for the crash (its log holds changes to write), before any torn page is read.
    assert!(e.contains("read-only") && e.contains("open it read-write once"), "{e}");
    disks.open(options(TornPageProtection::DoubleWrite)).unwrap().close().unwrap();
    let db = disks.open(ro).unwrap();
    check(&db);
}
