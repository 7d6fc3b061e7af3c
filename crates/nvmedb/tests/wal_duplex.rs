//! Scenario: log duplexing. One copy destroyed, torn or corrupted: no acknowledged record is
//! lost and the log continues. The same record corrupted in both copies in the middle of the
//! log: `Error::Corruption` naming the segment file and the record's offset, never a silent
//! truncation.

mod wal_common;

use nvmedb::io::{AlignedBuf, CrashSimStorage, Device, Storage};
use nvmedb::wal::{FileLog, LogReader, LogSink, Lsn, SegmentDesc, WalOptions};
use nvmedb::Error;
use std::sync::Arc;
use wal_common::{dynp, open, payload, read_all, sim_pair, small_opts};

struct Written {
    a: Arc<CrashSimStorage>,
    b: Arc<CrashSimStorage>,
    /// (lsn, end, payload) of every acknowledged record.
    recs: Vec<(Lsn, Lsn, Vec<u8>)>,
    segments: Vec<SegmentDesc>,
    /// Durable position when the writer stopped (the last flush's end, filler included).
    durable: Lsn,
}

/// Writes `n` records, each acknowledged in its own flush, over several 64 KiB segments.
fn write_log(n: u64) -> Written {
    let (a, b) = sim_pair();
    let log = open(&a, &b, small_opts());
    let mut recs = Vec::new();
    for i in 0..n {
        let p = payload(1, i, 300 + (i as usize * 37) % 2000);
        let (s, e) = log.append(&p).expect("append");
        log.wait_durable(e).expect("wait");
        recs.push((s, e, p));
    }
    let segments = log.segments();
    assert!(segments.len() >= 3, "test wants several segments, got {}", segments.len());
    let durable = log.durable_lsn();
    Written { a, b, recs, segments, durable }
}

fn check_all(w: &Written, a: Arc<dyn Storage>, b: Arc<dyn Storage>) {
    let got = read_all(a, b, 0).expect("read back");
    assert_eq!(got.len(), w.recs.len(), "record count");
    for (r, (s, e, p)) in got.iter().zip(&w.recs) {
        assert_eq!((r.lsn, r.end_lsn), (*s, *e));
        assert!(r.payload == *p, "payload of record {s}");
    }
}

/// Segment file name and offset of the record at `lsn`.
fn locate(segments: &[SegmentDesc], lsn: Lsn) -> (String, u64) {
    let s = segments.iter().rev().find(|s| s.base_lsn <= lsn).expect("segment of lsn");
    (s.name.clone(), 4096 + lsn - s.base_lsn)
}

/// XORs the byte at `offset` of device `name` in `st` (durably).
fn flip(st: &CrashSimStorage, name: &str, offset: u64) {
    let dev = st.device(name).expect("device");
    let block = offset - offset % 4096;
    let mut buf = AlignedBuf::new(4096);
    dev.read_at(block, &mut buf).unwrap();
    buf[(offset - block) as usize] ^= 0x5a;
    dev.write_at(block, &buf).unwrap();
    dev.sync().unwrap();
}

fn destroy(st: &CrashSimStorage) {
    for n in st.list().unwrap() {
        st.remove(&n).unwrap();
    }
}

#[test]
fn wal_destroying_either_copy_loses_nothing_and_the_log_continues() {
    for victim in 0..2 {
        let w = write_log(150);
        destroy(if victim == 0 { &w.a } else { &w.b });
        check_all(&w, dynp(&w.a), dynp(&w.b));
        // Reopen on the surviving copy, append more, then lose the *other* copy: the records
        // written after the loss are on both copies, the old ones only on the survivor.
        let log = open(&w.a, &w.b, small_opts());
        assert_eq!(log.recovered().end_lsn, w.durable, "victim {victim}");
        let (s, e) = log.append(b"after the loss").unwrap();
        log.wait_durable(e).unwrap();
        drop(log);
        let got = read_all(dynp(&w.a), dynp(&w.b), s).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].payload, b"after the loss");
    }
}

#[test]
fn wal_a_torn_or_corrupt_copy_is_bypassed_record_by_record() {
    let w = write_log(150);
    // Damage copy A in the middle of several records and wipe copy B's tail blocks.
    for (i, (s, _, _)) in w.recs.iter().enumerate().filter(|(i, _)| i % 10 == 3) {
        let (name, off) = locate(&w.segments, *s);
        flip(&w.a, &name, off + 40 + i as u64 % 50);
    }
    let last = w.segments.last().unwrap();
    let dev = w.b.device(&last.name).unwrap();
    let zero = AlignedBuf::new(8192);
    let (_, tail_off) = locate(&w.segments, w.recs.last().unwrap().0);
    dev.write_at(tail_off - tail_off % 4096, &zero).unwrap();
    dev.sync().unwrap();
    check_all(&w, dynp(&w.a), dynp(&w.b));
    let log = open(&w.a, &w.b, small_opts());
    assert_eq!(log.recovered().end_lsn, w.durable);
}

#[test]
fn wal_corruption_in_both_copies_mid_log_is_reported_with_file_and_offset() {
    // In the newest segment (found by open) and in an older one (found by a reader).
    for which in ["last segment", "older segment"] {
        let w = write_log(150);
        let seg = if which == "last segment" { w.segments.last().unwrap() } else { &w.segments[1] };
        let in_seg: Vec<_> = w.recs.iter().filter(|r| locate(&w.segments, r.0).0 == seg.name).collect();
        assert!(in_seg.len() >= 3, "{which}: want records after the damaged one");
        let victim = in_seg[in_seg.len() / 2].0;
        let (name, off) = locate(&w.segments, victim);
        flip(&w.a, &name, off + 35);
        flip(&w.b, &name, off + 36);
        let err = LogReader::open(dynp(&w.a), dynp(&w.b), 0)
            .and_then(|r| r.collect::<nvmedb::Result<Vec<_>>>())
            .expect_err("corruption must not read as a clean end");
        match &err {
            Error::Corruption { file, offset, .. } => {
                assert!(file.ends_with(&name), "{which}: file {file} should name {name}");
                assert_eq!(*offset, off, "{which}: offset of the damaged record");
            }
            other => panic!("{which}: expected corruption, got {other}"),
        }
        if which == "last segment" {
            match FileLog::open(dynp(&w.a), dynp(&w.b), small_opts()) {
                Err(Error::Corruption { offset, .. }) => assert_eq!(offset, off),
                other => panic!("open should report corruption, got {other:?}"),
            }
        }
        // Records before the damage are still readable.
        let first = LogReader::open(dynp(&w.a), dynp(&w.b), 0).unwrap().next().unwrap().unwrap();
        assert_eq!(first.lsn, 0);
    }
}

#[test]
fn wal_a_lost_newest_segment_in_one_copy_is_served_by_the_other() {
    let w = write_log(150);
    let last = w.segments.last().unwrap();
    w.a.remove(&last.name).unwrap();
    check_all(&w, dynp(&w.a), dynp(&w.b));
    let log = open(&w.a, &w.b, small_opts());
    assert_eq!(log.recovered().end_lsn, w.durable);
}

#[test]
fn wal_copies_of_two_different_logs_are_refused_not_recycled() {
    let x = write_log(150);
    let y = write_log(150);
    match FileLog::open(dynp(&x.a), dynp(&y.b), small_opts()) {
        Err(Error::Corruption { detail, .. }) => assert!(detail.contains("different logs"), "{detail}"),
        other => panic!("expected corruption, got {other:?}"),
    }
    // Nothing was overwritten: each log still reads back whole.
    check_all(&x, dynp(&x.a), dynp(&x.b));
    check_all(&y, dynp(&y.a), dynp(&y.b));
}

/// A log many times longer than the reader's 4 MiB windows (which it reads ahead in the
/// background), with records of up to 1.6 MiB (some longer than the room a window read ahead
/// keeps for the end of the one before), over segment switches: read back whole and in order;
/// and again with a different record damaged in each copy every few records, so that the
/// reader keeps switching copies, each with its own windows.
#[test]
fn a_log_longer_than_many_read_windows_reads_back_whole_from_either_copy() {
    let (a, b) = sim_pair();
    let opts = WalOptions { segment_bytes: 32 << 20, max_batch_bytes: 2 << 20, ..WalOptions::default() };
    let log = open(&a, &b, opts);
    let mut rng = nvmedb::util::Rng::new(7);
    let mut recs = Vec::new();
    let mut i = 0u64;
    while log.end_lsn() < 72 << 20 {
        let len = if i % 40 == 39 {
            1_200_000 + rng.below(400_000) as usize
        } else {
            100 + rng.below(60_000) as usize
        };
        let p = payload(9, i, len);
        let (s, e) = log.append(&p).expect("append");
        recs.push((s, e, p));
        i += 1;
    }
    log.wait_durable(recs.last().expect("records").1).expect("wait");
    let segments = log.segments();
    assert!(segments.len() >= 3, "test wants segment switches, got {} segments", segments.len());
    let durable = log.durable_lsn();
    log.close().expect("close");
    let w = Written { a, b, recs, segments, durable };
    check_all(&w, dynp(&w.a), dynp(&w.b));
    for (n, (s, _, _)) in w.recs.iter().enumerate() {
        let (name, off) = locate(&w.segments, *s);
        match n % 11 {
            3 => flip(&w.a, &name, off + 40),
            7 => flip(&w.b, &name, off + 40),
            _ => {}
        }
    }
    check_all(&w, dynp(&w.a), dynp(&w.b));
}

/// On devices whose writes overlap (emulated ones), the flushing committer writes both copies
/// itself, with no hand-off to the second copy's writer thread: each copy alone holds every
/// acknowledged record, under concurrent commits.
#[test]
fn wal_on_emulated_devices_each_copy_holds_every_acknowledged_record() {
    use nvmedb::io::{DeviceProfile, EmulatedStorage, MemStorage};
    let emu = |seed| -> Arc<dyn Storage> {
        let optane = DeviceProfile::builtin("optane").expect("a built-in profile");
        Arc::new(EmulatedStorage::new(Arc::new(MemStorage::new()), optane, seed).expect("emulated storage"))
    };
    let (a, b) = (emu(1), emu(2));
    assert!(emu(3).open("probe", true).expect("open").overlaps_writes());
    let log = Arc::new(FileLog::open(a.clone(), b.clone(), small_opts()).expect("open"));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                for i in 0..40 {
                    let p = payload(t, i, 50 + (i as usize * 37) % 3000);
                    let (s, e) = log.append(&p).expect("append");
                    log.wait_durable(e).expect("commit");
                    mine.push((s, e, p));
                }
                mine
            })
        })
        .collect();
    let mut recs: Vec<(Lsn, Lsn, Vec<u8>)> =
        threads.into_iter().flat_map(|t| t.join().expect("committer")).collect();
    recs.sort_by_key(|r| r.0);
    drop(log);
    for copy in [a, b] {
        let got: Vec<_> =
            LogReader::open_copies(vec![copy], 0).expect("open").collect::<Result<_, _>>().expect("read");
        assert_eq!(got.len(), recs.len(), "a copy lacks records");
        for (g, (s, e, p)) in got.iter().zip(&recs) {
            assert_eq!((g.lsn, g.end_lsn), (*s, *e));
            assert!(g.payload == *p, "record at {s} differs");
        }
    }
}
