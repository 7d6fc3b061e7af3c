//! The replica log's tests: reopen with torn tails, backing ahead, tail readers, truncation,
//! power cuts and failed syncs.

use super::record::REPLICA_HEADER_BYTES;
use super::*;
use crate::wal::RecordLog;

fn tmp(name: &str) -> nvmedb_testkit::TmpDir {
    nvmedb_testkit::TmpDir::path_only(&format!("replica-{name}"))
}

/// The replica log's storage in directory `d`, as a node keeps it.
fn dir(d: &std::path::Path) -> Arc<dyn Storage> {
    super::super::disk::Disk::replica(&super::super::disk::DirDisk::new(d)).unwrap()
}

fn log_file(d: &std::path::Path) -> std::path::PathBuf {
    d.join(super::super::disk::REPLICA_DIR).join(LOG_FILE)
}

#[test]
fn records_keep_the_primarys_lsns_and_survive_reopen_with_a_torn_tail() {
    let d = tmp("reopen");
    let log = ReplicaLog::open(dir(&d), 100).unwrap();
    assert!(log.append_at(100, 140, 9, b"a").unwrap());
    assert!(log.append_at(4096, 4200, 10, b"bb").unwrap());
    assert!(!log.append_at(100, 140, 9, b"a").unwrap(), "a re-shipped record is skipped");
    assert!(log.append_at(4100, 4300, 10, b"x").is_err(), "overlap is refused");
    assert_eq!(log.durable_lsn(), 100);
    assert_eq!(log.sync().unwrap(), 4200);
    let records_end = log.durable_len.load(Ordering::Acquire);
    drop(log);
    // Write a torn record by hand where the records end (the file is longer: prepared ahead).
    use std::io::{Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new().write(true).open(log_file(&d)).unwrap();
    assert!(f.metadata().unwrap().len() > records_end);
    f.seek(SeekFrom::Start(records_end)).unwrap();
    let mut rec = Vec::new();
    encode_record(&mut rec, 5000, 5100, 11, b"torn");
    f.write_all(&rec[..rec.len() - 2]).unwrap();
    drop(f);
    let log = ReplicaLog::open(dir(&d), 0).unwrap();
    assert_eq!(log.start_lsn(), 100);
    assert_eq!(log.end_lsn(), 4200);
    let h = ReplicaLogHandle(log.clone());
    let mut r = h.reader(0).unwrap();
    let a = r.next_record().unwrap().unwrap();
    assert_eq!((a.lsn, a.end_lsn, a.kind, a.payload.as_slice()), (100, 140, 9, &b"a"[..]));
    let b = r.next_record().unwrap().unwrap();
    assert_eq!((b.lsn, b.end_lsn), (4096, 4200));
    assert!(r.next_record().unwrap().is_none());
    // Appends after promotion continue past the end.
    let (s, e) = h.append_record(12, b"new").unwrap();
    assert_eq!(s, 4200);
    assert!(e > s);
    assert_eq!(h.wait_durable(e).unwrap(), e);
    assert_eq!(log.truncate_after(4199).unwrap(), 140);
    assert_eq!(log.end_lsn(), 140);
    drop(log);
    assert_eq!(ReplicaLog::open(dir(&d), 0).unwrap().end_lsn(), 140);
}

#[test]
fn the_file_is_backed_ahead_of_the_records_and_its_end_is_where_the_records_end() {
    use std::os::unix::fs::MetadataExt;
    let d = tmp("ahead");
    let log = ReplicaLog::open(dir(&d), 0).unwrap();
    let (mut lsn, mut ends) = (0u64, Vec::new());
    for i in 0..300u64 {
        let payload = vec![(i % 251) as u8; 1000 + (i as usize * 7) % 300];
        let end = lsn + 2000;
        assert!(log.append_at(lsn, end, 9, &payload).unwrap());
        ends.push(end);
        lsn = end + 10;
        if i % 10 == 9 {
            assert_eq!(log.sync().unwrap(), end);
        }
    }
    let records = log.durable_len.load(Ordering::Acquire);
    let m = std::fs::metadata(log_file(&d)).unwrap();
    // Prepared: allocated zeroes at least half a preparation window past the records.
    assert!(m.len() >= records + crate::wal::prepare::PREPARE_AHEAD_BYTES / 2, "{} vs {records}", m.len());
    assert!(m.blocks() * 512 >= m.len(), "the file is backed, not sparse: {m:?}");
    drop(log);
    // Reopened: the end is the last record's, and appends go on.
    let log = ReplicaLog::open(dir(&d), 0).unwrap();
    assert_eq!(log.end_lsn(), *ends.last().unwrap());
    assert_eq!(log.durable_len.load(Ordering::Acquire), records);
    assert!(log.append_at(lsn, lsn + 100, 10, b"after reopen").unwrap());
    assert_eq!(log.sync().unwrap(), lsn + 100);
    drop(log);
    let log = ReplicaLog::open(dir(&d), 0).unwrap();
    let mut t = log.tail().unwrap();
    let mut n = 0;
    while let Some(r) = t.next_record().unwrap() {
        if n < ends.len() {
            assert_eq!(r.end, ends[n]);
        } else {
            assert_eq!(r.payload, b"after reopen");
        }
        n += 1;
    }
    assert_eq!(n, ends.len() + 1);
}

#[test]
fn a_tail_reader_following_the_log_never_keeps_the_zeroes_ahead_of_it() {
    let d = tmp("follow");
    let log = ReplicaLog::open(dir(&d), 0).unwrap();
    let mut t = log.tail().unwrap();
    let mut lsn = 0;
    // Small records, one group commit each: every read of the reader finds the file's
    // prepared zeroes right after the last durable record.
    for i in 0..200u64 {
        let payload = format!("record {i}").into_bytes();
        assert!(log.append_at(lsn, lsn + 50, 9, &payload).unwrap());
        assert_eq!(log.sync().unwrap(), lsn + 50);
        let r = t.next_record().unwrap().expect("the record just made durable");
        assert_eq!((r.lsn, r.payload), (lsn, payload));
        assert!(t.next_record().unwrap().is_none());
        lsn += 50;
    }
    // After a cut, the reader repositioned at the end follows the new records.
    assert_eq!(log.truncate_after(100 * 50).unwrap(), 100 * 50);
    let off = log.durable_len.load(Ordering::Acquire);
    t.seek_to(off).unwrap();
    assert!(log.append_at(100 * 50, 100 * 50 + 70, 9, b"after the cut").unwrap());
    log.sync().unwrap();
    assert_eq!(t.next_record().unwrap().unwrap().payload, b"after the cut");
}

#[test]
fn shipped_bytes_are_stored_as_they_came_and_read_back() {
    let d = tmp("encoded");
    let log = ReplicaLog::open(dir(&d), 100).unwrap();
    let mut frame = Vec::new();
    encode_record(&mut frame, 100, 180, 9, &[5u8; 40]);
    encode_record(&mut frame, 200, 300, 10, b"second");
    let mut off = 0;
    while let Some((r, n)) = decode_record_ref(&frame[off..]).unwrap() {
        assert!(log.append_encoded(&r).unwrap());
        assert!(!log.append_encoded(&r).unwrap(), "a re-shipped record is skipped");
        off += n;
    }
    assert_eq!(off, frame.len());
    assert_eq!(log.last_record().map(|(l, _)| l), Some(200));
    assert_eq!(log.sync().unwrap(), 300);
    let mut t = log.tail().unwrap();
    let a = t.next_record().unwrap().unwrap();
    assert_eq!((a.lsn, a.end, a.kind, a.payload), (100, 180, 9, vec![5u8; 40]));
    let b = t.next_record().unwrap().unwrap();
    assert_eq!((b.lsn, b.end, b.kind, b.payload.as_slice()), (200, 300, 10, &b"second"[..]));
    assert!(t.next_record().unwrap().is_none());
    // A flipped payload byte fails the record's check; an overlapping record is refused.
    let mut bad = frame.clone();
    bad[REPLICA_HEADER_BYTES + 3] ^= 1;
    assert!(decode_record_ref(&bad).is_err());
    let mut over = Vec::new();
    encode_record(&mut over, 250, 400, 9, b"x");
    let (r, _) = decode_record_ref(&over).unwrap().unwrap();
    assert!(log.append_encoded(&r).is_err());
    drop(t);
    drop(log);
    assert_eq!(ReplicaLog::open(dir(&d), 0).unwrap().end_lsn(), 300);
}

#[test]
fn truncate_before_releases_the_prefix_and_survives_reopen() {
    let d = tmp("trunc");
    let log = ReplicaLog::open(dir(&d), 0).unwrap();
    let payload = vec![7u8; 3000];
    let mut starts = Vec::new();
    let mut lsn = 0;
    for i in 0..40u64 {
        let end = lsn + 3100;
        assert!(log.append_at(lsn, end, 9, &payload).unwrap());
        starts.push(lsn);
        lsn = end + (i % 3) * 10; // gaps, as the primary's filler leaves them
    }
    let end = log.sync().unwrap();
    let released = log.truncate_before(60_000).unwrap();
    let first = *starts.iter().find(|&&s| s >= 60_000).unwrap();
    assert_eq!(log.start_lsn(), first);
    assert!(released > 50_000, "{released}");
    let h = ReplicaLogHandle(log.clone());
    assert_eq!(h.reader(0).unwrap().next_record().unwrap().unwrap().lsn, first);
    assert_eq!(h.recovered().start_lsn, first);
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(log_file(&d)).unwrap();
    assert!(m.blocks() * 512 < m.len(), "the prefix's blocks were not released");
    drop(h);
    drop(log);
    let log = ReplicaLog::open(dir(&d), 0).unwrap();
    assert_eq!((log.start_lsn(), log.end_lsn()), (first, end));
    assert_eq!(log.truncate_after(first + 3100).unwrap(), first + 3100);
    log.reset(500_000).unwrap();
    assert_eq!((log.start_lsn(), log.end_lsn(), log.last_record()), (500_000, 500_000, None));
    assert!(log.append_at(500_000, 500_100, 9, b"x").unwrap());
    assert_eq!(log.sync().unwrap(), 500_100);
    drop(log);
    assert_eq!(ReplicaLog::open(dir(&d), 0).unwrap().end_lsn(), 500_100);
}

#[test]
fn a_power_cut_keeps_every_synced_record_and_no_stale_one() {
    use crate::io::CrashSimStorage;
    use crate::util::Rng;
    for seed in 0..100u64 {
        let mut rng = Rng::new(seed);
        let css = Arc::new(CrashSimStorage::new());
        let st: Arc<dyn Storage> = css.clone();
        let log = ReplicaLog::open(st.clone(), 0).unwrap();
        let (mut lsn, mut synced) = (0u64, 0u64);
        let mut written = Vec::new();
        for round in 0..(2 + rng.below(6)) {
            for _ in 0..(1 + rng.below(4)) {
                let payload = vec![round as u8; 1 + rng.below(3000) as usize];
                let end = lsn + 100 + rng.below(5000);
                assert!(log.append_at(lsn, end, 9, &payload).unwrap());
                written.push((lsn, end));
                lsn = end;
            }
            if rng.chance(0.7) {
                synced = log.sync().unwrap();
            } else if rng.chance(0.5) {
                // A cut (as a restarted primary asks), then records of another history.
                let keep = written.iter().map(|w| w.1).rfind(|&e| e <= synced).unwrap_or(0);
                assert_eq!(log.truncate_after(keep).unwrap(), keep);
                written.retain(|w| w.1 <= keep);
                lsn = keep;
                synced = keep;
            }
        }
        // Pending records are written (not synced) by a last sync attempt that the power
        // cut interrupts half the time.
        if rng.chance(0.5) {
            let _ = log.sync();
        }
        drop(log);
        css.crash(&mut rng);
        let log = ReplicaLog::open(st.clone(), 0).unwrap();
        let end = log.end_lsn();
        assert!(end >= synced, "seed {seed}: synced records lost ({end} < {synced})");
        let mut t = log.tail().unwrap();
        let mut got = Vec::new();
        while let Some(r) = t.next_record().unwrap() {
            got.push((r.lsn, r.end));
        }
        assert_eq!(&got[..], &written[..got.len()], "seed {seed}: a record that was never written");
        assert_eq!(got.last().map_or(0, |g| g.1), end);
        // Appending after the cut tail, then reopening, finds exactly those records.
        assert!(log.append_at(end, end + 10, 9, b"after").unwrap());
        log.sync().unwrap();
        drop(t);
        drop(log);
        assert_eq!(ReplicaLog::open(st, 0).unwrap().end_lsn(), end + 10, "seed {seed}");
    }
}

#[test]
fn a_failed_sync_keeps_its_records_for_the_next_one() {
    use crate::io::{HookedStorage, IoError, IoHook, IoOpKind, IoResult, MemStorage};
    use std::sync::atomic::AtomicBool;
    /// Refuses writes (a full disk) while set.
    struct Full(AtomicBool);
    impl IoHook for Full {
        fn before(&self, device: &str, op: IoOpKind, offset: u64, len: usize) -> IoResult<()> {
            if op == IoOpKind::Write && self.0.load(Ordering::SeqCst) {
                return Err(IoError::os(device, op, offset, len, std::io::Error::from_raw_os_error(28)));
            }
            Ok(())
        }
    }
    let full = Arc::new(Full(AtomicBool::new(false)));
    let st: Arc<dyn Storage> = Arc::new(HookedStorage::new(Arc::new(MemStorage::new()), full.clone()));
    let log = ReplicaLog::open(st.clone(), 0).unwrap();
    assert!(log.append_at(0, 100, 9, b"one").unwrap());
    assert_eq!(log.sync().unwrap(), 100);
    full.0.store(true, Ordering::SeqCst);
    assert!(log.append_at(100, 200, 9, b"two").unwrap());
    assert!(log.sync().is_err(), "the disk is full");
    assert_eq!(log.durable_lsn(), 100);
    full.0.store(false, Ordering::SeqCst);
    assert!(log.append_at(200, 300, 9, b"three").unwrap());
    // The next sync writes "two" as well: acknowledging 300 without it would hide a gap.
    assert_eq!(log.sync().unwrap(), 300);
    drop(log);
    let log = ReplicaLog::open(st, 0).unwrap();
    let mut t = log.tail().unwrap();
    let mut got = Vec::new();
    while let Some(r) = t.next_record().unwrap() {
        got.push(r.payload);
    }
    assert_eq!(got, vec![b"one".to_vec(), b"two".to_vec(), b"three".to_vec()]);
}

#[test]
fn a_torn_write_that_leaves_a_partial_block_is_cut_at_open() {
    use crate::io::{CrashSimStorage, WriteFate};
    let css = Arc::new(CrashSimStorage::new());
    let st: Arc<dyn Storage> = css.clone();
    let log = ReplicaLog::open(st.clone(), 0).unwrap();
    // The first record ends a little past the first block; the second starts there.
    assert!(log.append_at(0, 100, 9, &[1u8; 4080]).unwrap());
    assert_eq!(log.sync().unwrap(), 100);
    assert!(log.append_at(100, 7000, 9, &[5u8; 3000]).unwrap());
    assert_eq!(log.sync().unwrap(), 7000);
    drop(log);
    // The same bytes, written once and not synced, as a group commit that the power cut
    // tears after 9 of its sectors (4608 bytes) leaves them.
    let dev = css.open(LOG_FILE, false).unwrap();
    let mut b = AlignedBuf::new(8192);
    dev.read_at(0, &mut b).unwrap();
    let fresh = CrashSimStorage::new();
    let d2 = fresh.open(LOG_FILE, true).unwrap();
    write_start(&fresh, Start { lsn: 0, off: 0 }).unwrap();
    d2.write_at(0, &b).unwrap();
    fresh.crash_with(|_, _, _| WriteFate::Torn(9));
    assert_eq!(d2.capacity(), 4608, "the device ends inside a block");
    let log = ReplicaLog::open(Arc::new(fresh), 0).unwrap();
    assert_eq!(log.end_lsn(), 100, "the torn record (its header in the last, partial block) is cut");
}
