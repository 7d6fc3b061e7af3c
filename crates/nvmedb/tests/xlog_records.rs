//! The engine's record log over the fast log (`XRecordLog`): the reader returns exactly the
//! appended records (seeded model test), recovery after a simulated crash with a gap and a torn
//! record, a corrupt record in the middle reported with file and offset, retention of the
//! conventional ring (destage holds, visibly, instead of overwriting what the last checkpoint
//! needs), and a database that checkpoints before retention would hold.
//!
//! Seeded tests print their seed on failure; replay with `NVMEDB_TEST_SEED=<seed>`.

use nvmedb::io::{AlignedBuf, Device, MemStorage, Storage};
use nvmedb::util::Rng;
use nvmedb::wal::{LogRecord, RecordLog, KIND_USER_MIN};
use nvmedb::xlog::{XLogConfig, XRecordLog, XLOG_CONV, XRECORD_HEADER};
use nvmedb::{ColumnType, Database, Error, FastLogOptions, LogKind, Options, Schema, Value};
use std::sync::Arc;
use std::time::Duration;

mod support;
use support::TmpDir;

fn seed() -> u64 {
    support::seed_or_random()
}

fn cfg(ring: &TmpDir) -> XLogConfig {
    let mut c = XLogConfig::new(ring.path());
    c.ring_bytes = 256 << 10;
    c.queue_bytes = 16 << 10;
    c.conv_pages = 512;
    c.destage_batch_pages = 8;
    c.destage_latency = Duration::from_micros(100);
    c.spin_iters = 50;
    c
}

fn payload(rng: &mut Rng, max: usize) -> Vec<u8> {
    let n = rng.below(max as u64 + 1) as usize;
    (0..n).map(|_| rng.below(256) as u8).collect()
}

fn read_all(log: &XRecordLog, from: u64) -> Vec<LogRecord> {
    let mut r = log.reader(from).expect("reader");
    let mut v = Vec::new();
    while let Some(rec) = r.next_record().expect("read") {
        v.push(rec);
    }
    v
}

fn same(got: &[LogRecord], want: &[(u64, u64, u8, Vec<u8>)], ctx: &str) {
    assert_eq!(got.len(), want.len(), "{ctx}: record count");
    for (g, w) in got.iter().zip(want) {
        assert_eq!((g.lsn, g.end_lsn, g.kind), (w.0, w.1, w.2), "{ctx}: record at {}", w.0);
        assert!(g.payload == w.3, "{ctx}: payload of the record at {} differs", w.0);
    }
}

/// Three threads append records of random kinds and sizes (some larger than one frame); the
/// reader returns exactly them in LSN order, before and after a clean reopen, and from a
/// truncation point.
#[test]
fn xrecord_reader_returns_exactly_the_appended_records() {
    let seed = seed();
    println!("NVMEDB_TEST_SEED={seed}");
    let ring = TmpDir::on_tmpfs("model");
    let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
    let base = 1_000_000 + seed % 1000;
    let log = XRecordLog::open(storage.clone(), cfg(&ring), base).expect("open");
    assert!(log.recovered().created, "seed {seed}");
    assert_eq!(log.end_lsn(), base, "seed {seed}: a new log starts at initial_lsn");
    let all = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..3u64 {
            let (log, all) = (&log, &all);
            s.spawn(move || {
                let mut rng = Rng::new(seed ^ ((t + 1) * 0x9E37));
                for _ in 0..150 {
                    let kind = KIND_USER_MIN + rng.below(8) as u8;
                    let max = if rng.below(10) == 0 { 40_000 } else { 600 };
                    let p = payload(&mut rng, max);
                    let (a, z) = log.append_record(kind, &p).expect("append");
                    assert_eq!(z - a, (XRECORD_HEADER + p.len()) as u64, "seed {seed}");
                    if rng.below(4) == 0 {
                        assert!(log.wait_durable(z).expect("wait") >= z, "seed {seed}");
                    }
                    all.lock().unwrap().push((a, z, kind, p));
                }
            });
        }
    });
    let mut want = all.into_inner().unwrap();
    want.sort_by_key(|w| w.0);
    for w in want.windows(2) {
        assert_eq!(w[0].1, w[1].0, "seed {seed}: records are not adjacent");
    }
    let end = want.last().unwrap().1;
    log.wait_durable(end).expect("wait");
    same(&read_all(&log, base), &want, &format!("seed {seed}, live"));
    let cut = want[want.len() / 2].0;
    log.truncate_before(cut).expect("truncate");
    drop(log);
    let log = XRecordLog::open(storage, cfg(&ring), 0).expect("reopen");
    let rec = log.recovered();
    assert!(!rec.created, "seed {seed}");
    assert_eq!((rec.start_lsn, rec.end_lsn), (cut, end), "seed {seed}: recovered range");
    assert_eq!(log.base_lsn(), base, "seed {seed}: the base survives reopening");
    let from = want.iter().position(|w| w.0 == cut).unwrap();
    same(&read_all(&log, cut), &want[from..], &format!("seed {seed}, reopened"));
}

/// A crash with a gap (an allocation never completed) and a torn multi-frame record: recovery
/// keeps every record before the gap, none after it, and new records appended after recovery
/// read back behind the old ones (the torn prefix is skipped durably).
#[test]
fn xrecord_recovery_after_crash_with_gap_and_torn_record() {
    let seed = seed();
    println!("NVMEDB_TEST_SEED={seed}");
    let mut rng = Rng::new(seed);
    let ring = TmpDir::on_tmpfs("gap");
    let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
    let log = XRecordLog::open(storage.clone(), cfg(&ring), 500).expect("open");
    let mut want = Vec::new();
    for _ in 0..(20 + rng.below(40)) {
        let kind = KIND_USER_MIN + 1;
        let p = payload(&mut rng, 3000);
        let (a, z) = log.append_record(kind, &p).unwrap();
        want.push((a, z, kind, p));
    }
    let durable = log.wait_durable(want.last().unwrap().1).unwrap();
    // A torn record: a valid header claiming more payload than follows, then a gap (an
    // allocation that is never completed), then complete records after the gap.
    let w = log.xlog().writer().unwrap();
    let start = log.end_lsn();
    let mut torn = vec![0u8; XRECORD_HEADER + 100];
    torn[4..8].copy_from_slice(&5000u32.to_le_bytes());
    torn[8..16].copy_from_slice(&start.to_le_bytes());
    torn[16] = KIND_USER_MIN;
    w.x_pwrite(&torn).unwrap();
    let gap = w.x_alloc(64).unwrap();
    std::mem::forget(gap); // never completed: the counter and recovery stop here
    let after = log.append_record(KIND_USER_MIN, b"after the gap").unwrap();
    assert!(log.durable_lsn() < after.1, "seed {seed}: the counter passed a gap");
    drop(w);
    log.crash();

    let log = XRecordLog::open(storage.clone(), cfg(&ring), 0).expect("recover");
    let rec = log.recovered();
    assert!(rec.end_lsn >= durable, "seed {seed}: recovery lost acknowledged bytes");
    assert_eq!(rec.end_lsn, start + torn.len() as u64, "seed {seed}: recovery did not stop at the gap");
    assert_eq!(log.skipped(), vec![(start, rec.end_lsn)], "seed {seed}: the torn record is skipped");
    same(&read_all(&log, 500), &want, &format!("seed {seed}, recovered"));
    let p = payload(&mut rng, 2000);
    let (a, z) = log.append_record(KIND_USER_MIN + 2, &p).unwrap();
    assert_eq!(a, rec.end_lsn, "seed {seed}: new records continue at the recovered end");
    log.wait_durable(z).unwrap();
    want.push((a, z, KIND_USER_MIN + 2, p));
    drop(log);
    let log = XRecordLog::open(storage, cfg(&ring), 0).expect("reopen");
    same(&read_all(&log, 500), &want, &format!("seed {seed}, after the skip"));
}

/// A record in the middle of the log whose own CRC is wrong (its conventional pages are
/// intact) is a corruption error naming the conventional ring file and the record's offset in
/// it; a damaged conventional page is a corruption error at that page. Never a silent end.
#[test]
fn xrecord_corrupt_mid_log_record_is_reported_with_offset() {
    let ring = TmpDir::on_tmpfs("corrupt");
    let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
    let log = XRecordLog::open(storage.clone(), cfg(&ring), 0).expect("open");
    for i in 0..20u32 {
        log.append_record(KIND_USER_MIN, &vec![i as u8; 900]).unwrap();
    }
    // A record with a plausible header (right length and LSN) but a wrong checksum.
    let victim = log.end_lsn();
    let mut bad = vec![0x11u8; XRECORD_HEADER + 300];
    bad[4..8].copy_from_slice(&300u32.to_le_bytes());
    bad[8..16].copy_from_slice(&victim.to_le_bytes());
    bad[16] = KIND_USER_MIN;
    bad[17..20].fill(0);
    let w = log.xlog().writer().unwrap();
    assert_eq!(w.x_pwrite(&bad).unwrap().0, victim);
    drop(w);
    let mut last = (0, 0);
    for i in 0..20u32 {
        last = log.append_record(KIND_USER_MIN, &vec![i as u8; 900]).unwrap();
    }
    log.wait_durable(last.1).unwrap();
    log.xlog().destage_now().unwrap();
    let rec_off = log.xlog().tail_reader(victim).device_offset().unwrap();
    let byte_off = log.xlog().tail_reader(last.0 + 100).device_offset().unwrap();
    drop(log); // clean close: everything destaged
    match XRecordLog::open(storage.clone(), cfg(&ring), 0) {
        Err(Error::Corruption { file, offset, detail }) => {
            assert!(file.contains(XLOG_CONV), "file {file}");
            assert_eq!(offset, rec_off, "offset of the damaged record ({detail})");
            assert!(detail.contains(&format!("LSN {victim}")), "{detail}");
        }
        other => panic!("expected corruption, got {other:?}"),
    }
    // Damage a conventional page as well: that page is named.
    let dev = storage.open(XLOG_CONV, false).unwrap();
    let page = byte_off / 4096 * 4096;
    let mut b = AlignedBuf::new(4096);
    dev.read_at(page, &mut b).unwrap();
    b[(byte_off - page) as usize] ^= 0x5a;
    dev.write_at(page, &b).unwrap();
    let log = XRecordLog::open(storage, cfg(&ring), 0);
    match log {
        Err(Error::Corruption { file, offset, .. }) => {
            assert!(file.contains(XLOG_CONV), "file {file}");
            assert!(offset == rec_off || offset == page, "offset {offset}");
        }
        other => panic!("expected corruption, got {other:?}"),
    }
}

/// With a small conventional ring and no checkpoint, destage holds instead of overwriting the
/// retained records (visible in the status register), the log asks for a checkpoint first,
/// a writer out of ring space fails with a clear error after the retention timeout, and
/// `truncate_before` releases the hold.
#[test]
fn xrecord_retention_holds_destage_until_truncate() {
    let ring = TmpDir::on_tmpfs("retain");
    let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
    let mut c = cfg(&ring);
    c.ring_bytes = 32 << 10;
    c.queue_bytes = 8 << 10;
    c.conv_pages = 48;
    c.destage_batch_pages = 2;
    c.retention_timeout = Duration::from_millis(200);
    let log = XRecordLog::open(storage, c, 0).expect("open");
    let mut asked_at = None;
    let mut appended = Vec::new();
    let err = loop {
        match log.append_record(KIND_USER_MIN, &[7u8; 1000]) {
            Ok(r) => appended.push(r),
            Err(e) => break e,
        }
        if asked_at.is_none() && log.wants_checkpoint() {
            asked_at = Some(appended.len());
        }
        assert!(appended.len() < 10_000, "the retained ring never filled");
        assert_eq!(log.xlog().oldest_stream_pos().unwrap(), 0, "retained bytes were overwritten");
    };
    assert!(matches!(err, Error::ResourceExhausted(_)), "{err}");
    assert!(err.to_string().contains("checkpoint"), "{err}");
    assert!(asked_at.is_some_and(|n| n < appended.len()), "the log never asked for a checkpoint");
    let st = log.xlog().status();
    assert!(st.destage_held, "{st:?}");
    assert_eq!(st.retain_from, Some(0));
    assert_eq!(log.xlog().oldest_stream_pos().unwrap(), 0, "retained bytes were overwritten");
    // The checkpoint's truncate releases the hold.
    let cut = appended[appended.len() - 3].0;
    log.truncate_before(cut).unwrap();
    let more = log.append_record(KIND_USER_MIN, &[8u8; 1000]).expect("append after the truncate");
    log.wait_durable(more.1).unwrap();
    let got = read_all(&log, cut);
    assert_eq!(got.len(), 4);
    assert_eq!(got.last().unwrap().end_lsn, more.1);
    assert!(!log.xlog().status().destage_held);
}

/// A database on the fast log with a tiny conventional ring runs transactions until the ring
/// was written three times over (explicit and auto-commit transactions): it checkpoints when
/// the log asks, never holds, and reopens with every row.
#[test]
fn database_on_fast_log_checkpoints_before_the_ring_fills() {
    let dir = TmpDir::path_only("xrec-db");
    let ring = TmpDir::on_tmpfs("dbring");
    let opts = || Options {
        table_page_size: 4096,
        index_page_size: 4096,
        log: LogKind::Fast(FastLogOptions {
            ring_path: Some(ring.path().to_path_buf()),
            ring_bytes: 128 << 10,
            queue_bytes: 16 << 10,
            conv_pages: 160,
            ..FastLogOptions::default()
        }),
        ..Options::default()
    };
    let db = Database::open(dir.path(), opts()).unwrap();
    let desc = db.engine_log().unwrap().record_log().describe();
    assert!(desc.contains("fast log") && desc.to_lowercase().contains("not a power loss"), "{desc}");
    let t = db.create_table("t", Schema::new(vec![("k", ColumnType::Int), ("v", ColumnType::Int)])).unwrap();
    let log = db.engine_log().unwrap().record_log().clone();
    // Run until the conventional ring (160 pages) has been written three times over.
    let mut n = 0;
    while log.stats().bytes_written / 4096 < 3 * 160 {
        if n < 100 {
            let mut tx = db.begin();
            tx.insert(&t, &[Value::Int(n), Value::Int(n * 3)]).unwrap();
            tx.commit().unwrap();
        } else {
            // Auto-commit only from here: the checkpoints the log asks for must come from the
            // auto-commit path (otherwise destage would hold and an insert would fail).
            t.insert(&[Value::Int(n), Value::Int(n * 3)]).unwrap();
        }
        n += 1;
        assert!(n < 200_000, "the conventional ring never wrapped");
    }
    db.close().unwrap();
    drop((log, t));
    let db = Database::open(dir.path(), opts()).unwrap();
    let t = db.table("t").unwrap();
    for k in [0, n / 2, n - 1] {
        assert_eq!(t.read(&Value::Int(k), |r| r.int(1)).unwrap(), Some(k * 3));
    }
    let mut count = 0;
    t.scan(|_| {
        count += 1;
        Ok(true)
    })
    .unwrap();
    assert_eq!(count, n);
    db.close().unwrap();
}

/// A database keeps one kind of log: opening a fast-log database with the file log (or the
/// reverse) is a configuration error naming the log directory, not a new empty log that would
/// skip the existing records.
#[test]
fn database_refuses_to_switch_log_kind_silently() {
    let dir = TmpDir::path_only("xrec-switch");
    let ring = TmpDir::on_tmpfs("switchring");
    let fast = Options {
        log: LogKind::Fast(FastLogOptions {
            ring_path: Some(ring.path().to_path_buf()),
            ..FastLogOptions::default()
        }),
        ..Options::default()
    };
    let db = Database::open(dir.path(), fast.clone()).unwrap();
    db.create_table("t", Schema::new(vec![("k", ColumnType::Int)])).unwrap();
    db.close().unwrap();
    match Database::open(dir.path(), Options::default()) {
        Err(Error::Config { key, detail }) => {
            assert_eq!(key, "log");
            assert!(detail.contains("xlog"), "{detail}");
        }
        other => panic!("expected a configuration error, got {other:?}"),
    }
    let db = Database::open(dir.path(), fast).expect("the right log kind still opens");
    db.close().unwrap();
}
