//! Scenario: model-based test. Random sequences of append (data and caller kinds, sizes up to
//! the segment limit), wait, truncate, read-from, clean reopen and crash-reopen, checked against
//! a plain `Vec` of records: reads return exactly the model's records from the requested LSN;
//! after a crash the log holds the confirmed records plus a prefix of the unconfirmed ones.
//! Seeds: `NVMEDB_TEST_SEED` (first) and `NVMEDB_TEST_ITERS` (count, default 150).

mod support;
mod wal_common;

use nvmedb::util::Rng;
use nvmedb::wal::{FileLog, LogRecord, LogSink, WalOptions, KIND_DATA, KIND_USER_MIN};
use wal_common::{dynp, sim_pair};

fn run(seed: u64) {
    let mut rng = Rng::new(seed);
    let (a, b) = sim_pair();
    let opts = WalOptions {
        segment_bytes: 64 * 1024,
        max_batch_bytes: rng.range(4096, 32 * 1024) as usize,
        max_queued_batches: rng.range(1, 5) as usize,
        keep_free_segments: rng.below(3) as usize,
        group_commit_wait_us: 0,
        initial_lsn: 0,
        // Both wake-up strategies of group commit.
        targeted_wakeups: seed.is_multiple_of(2),
        // The log alone: nothing acts on its checkpoint requests here.
        checkpoint_after_bytes: 0,
    };
    let max_payload = opts.max_payload_bytes();
    let mut log = FileLog::open(dynp(&a), dynp(&b), opts.clone()).unwrap();
    let mut confirmed: Vec<LogRecord> = Vec::new();
    let mut pending: Vec<LogRecord> = Vec::new();
    let mut start = 0u64;
    for step in 0..200 {
        let op = rng.below(100);
        if op < 55 {
            let len = match rng.below(20) {
                0 => max_payload - rng.below(100) as usize,
                1..=3 => rng.below(8000) as usize,
                _ => rng.below(300) as usize,
            };
            let mut p = vec![0u8; len];
            rng.fill(&mut p);
            let kind = if rng.chance(0.5) { KIND_DATA } else { rng.range(KIND_USER_MIN as u64, 256) as u8 };
            let (s, e) = log.append_record(kind, &p).unwrap();
            let prev_end = pending.last().or(confirmed.last()).map_or(start, |r| r.end_lsn);
            assert!(s >= prev_end, "step {step}: LSNs must grow");
            pending.push(LogRecord { lsn: s, end_lsn: e, kind, payload: p });
        } else if op < 70 {
            if let Some(r) = pending.get(rng.below(pending.len() as u64 + 1) as usize) {
                let d = log.wait_durable(r.end_lsn).unwrap();
                assert!(d >= r.end_lsn);
            }
        } else if op < 75 {
            promote(&mut confirmed, &mut pending, log.durable_lsn());
            if !confirmed.is_empty() {
                let i = rng.below(confirmed.len() as u64) as usize;
                if confirmed[i].lsn >= start {
                    start = confirmed[i].lsn;
                    log.truncate_before(start).unwrap();
                }
            }
        } else if op < 88 {
            promote(&mut confirmed, &mut pending, log.durable_lsn());
            let live: Vec<_> = confirmed.iter().filter(|r| r.lsn >= start).cloned().collect();
            let from = if live.is_empty() { start } else { live[rng.below(live.len() as u64) as usize].lsn };
            let got: Vec<_> = log.reader(from).unwrap().collect::<nvmedb::Result<_>>().unwrap();
            let want: Vec<_> = live.into_iter().filter(|r| r.lsn >= from).collect();
            assert!(got == want, "step {step}: reader from {from} disagrees with the model");
        } else if op < 94 {
            let end = log.close().unwrap();
            promote(&mut confirmed, &mut pending, end);
            assert!(pending.is_empty());
            log = FileLog::open(dynp(&a), dynp(&b), opts.clone()).unwrap();
            assert_eq!(log.recovered().end_lsn, end, "step {step}: clean reopen end");
        } else {
            promote(&mut confirmed, &mut pending, log.durable_lsn());
            drop(log);
            a.crash(&mut rng);
            b.crash(&mut rng);
            log = FileLog::open(dynp(&a), dynp(&b), opts.clone()).unwrap();
            let got: Vec<_> = log.reader(start).unwrap().collect::<nvmedb::Result<_>>().unwrap();
            let live: Vec<_> = confirmed.iter().filter(|r| r.lsn >= start).cloned().collect();
            assert!(got.len() >= live.len(), "step {step}: confirmed records lost");
            assert!(got[..live.len()] == live[..], "step {step}: confirmed records differ");
            let extra = &got[live.len()..];
            assert!(
                extra.len() <= pending.len() && extra == &pending[..extra.len()],
                "step {step}: tail is not a prefix of the appended records"
            );
            confirmed.extend_from_slice(extra);
            pending.clear();
        }
    }
}

/// Moves the pending records made durable (end <= `durable`) into `confirmed`.
fn promote(confirmed: &mut Vec<LogRecord>, pending: &mut Vec<LogRecord>, durable: u64) {
    let n = pending.iter().take_while(|r| r.end_lsn <= durable).count();
    confirmed.extend(pending.drain(..n));
}

#[test]
fn wal_log_matches_a_vec_of_records_under_random_operations() {
    let first = support::seed(0);
    let count = support::iters(150);
    for seed in first..first + count {
        if std::panic::catch_unwind(|| run(seed)).is_err() {
            panic!("model test failed at seed {seed}; replay: NVMEDB_TEST_SEED={seed} NVMEDB_TEST_ITERS=1 cargo test -p nvmedb --test wal_model");
        }
    }
}
