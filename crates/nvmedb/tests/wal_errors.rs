//! Scenario: failures. A flush that fails on either copy fails the waiting commit with the I/O
//! error and poisons the log (every later call says so); nothing unacknowledged is reported
//! durable, and a reopen recovers everything acknowledged before the failure. Bad options are
//! rejected with the key named; reserved kinds and oversize records are refused.

mod wal_common;

use nvmedb::wal::{FileLog, LogSink, WalOptions};
use nvmedb::Error;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use wal_common::{dynp, payload, read_all, sim_pair, small_opts, CutStorage};

#[test]
fn wal_a_failed_flush_poisons_the_log_and_loses_no_acknowledged_record() {
    for failing_copy in 0..2 {
        let (a, b) = sim_pair();
        let budget_a = Arc::new(AtomicI64::new(i64::MAX));
        let budget_b = Arc::new(AtomicI64::new(i64::MAX));
        let ca = Arc::new(CutStorage::new(dynp(&a), budget_a.clone()));
        let cb = Arc::new(CutStorage::new(dynp(&b), budget_b.clone()));
        let log = FileLog::open(ca, cb, small_opts()).unwrap();
        let mut acked = Vec::new();
        for i in 0..20 {
            let p = payload(9, i, 200);
            let (s, e) = log.append(&p).unwrap();
            log.wait_durable(e).unwrap();
            acked.push((s, p));
        }
        let durable = log.durable_lsn();
        [&budget_a, &budget_b][failing_copy].store(0, Ordering::SeqCst);
        let (_, e) = log.append(b"doomed").unwrap();
        match log.wait_durable(e) {
            Err(Error::Io(_)) => {}
            other => panic!("copy {failing_copy}: expected an I/O error, got {other:?}"),
        }
        assert_eq!(log.durable_lsn(), durable, "a failed flush must not advance durability");
        assert!(matches!(log.append(b"more"), Err(Error::Poisoned(_))));
        assert!(matches!(log.wait_durable(e), Err(Error::Poisoned(_))));
        drop(log);
        let got = read_all(dynp(&a), dynp(&b), 0).unwrap();
        assert!(got.len() >= acked.len());
        for (r, (s, p)) in got.iter().zip(&acked) {
            assert_eq!(r.lsn, *s);
            assert!(r.payload == *p);
        }
    }
}

#[test]
fn wal_invalid_options_and_arguments_are_named() {
    let (a, b) = sim_pair();
    let bad = WalOptions { segment_bytes: 10_000, ..WalOptions::default() };
    match FileLog::open(dynp(&a), dynp(&b), bad) {
        Err(Error::Config { key, .. }) => assert_eq!(key, "wal.segment_bytes"),
        other => panic!("expected a config error, got {other:?}"),
    }
    let bad = WalOptions { max_queued_batches: 0, ..small_opts() };
    assert!(matches!(FileLog::open(dynp(&a), dynp(&b), bad), Err(Error::Config { .. })));
    let log = FileLog::open(dynp(&a), dynp(&b), small_opts()).unwrap();
    assert!(matches!(log.append_record(1, b"x"), Err(Error::InvalidArgument(_))));
    let too_big = vec![0u8; small_opts().max_payload_bytes() + 1];
    assert!(matches!(log.append(&too_big), Err(Error::InvalidArgument(_))));
    let max = vec![7u8; small_opts().max_payload_bytes()];
    let (_, e) = log.append(&max).unwrap();
    log.wait_durable(e).unwrap();
    assert!(matches!(log.wait_durable(e + 1_000_000), Err(Error::InvalidArgument(_))));
}
