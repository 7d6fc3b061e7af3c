//! Scenario: group commit. Commits that arrive while a flush runs share the next flush (shown
//! deterministically with a gate that holds the first flush's sync until every other committer
//! has appended), many threads commit concurrently with fewer flushes than commits, and bounded
//! queues make appenders flush themselves rather than block forever.

mod wal_common;

use nvmedb::io::{Device, DeviceInfo, IoResult, MemStorage, Storage};
use nvmedb::wal::{FileLog, LogReader, LogSink, WalOptions};
use std::sync::{Arc, Condvar, Mutex};
use wal_common::payload;

/// Holds `sync` calls while closed; counts the callers it holds.
#[derive(Default)]
struct Gate {
    state: Mutex<(bool, usize)>,
    cv: Condvar,
}

impl Gate {
    fn set_closed(&self, closed: bool) {
        self.state.lock().unwrap().0 = closed;
        self.cv.notify_all();
    }
    fn pass(&self) {
        let mut st = self.state.lock().unwrap();
        st.1 += 1;
        self.cv.notify_all();
        while st.0 {
            st = self.cv.wait(st).unwrap();
        }
        st.1 -= 1;
    }
    fn wait_held(&self, n: usize) {
        let mut st = self.state.lock().unwrap();
        while st.1 < n {
            st = self.cv.wait(st).unwrap();
        }
    }
    /// Like `wait_held`, but gives up after a generous deadlock guard; returns success.
    fn wait_held_guarded(&self, n: usize) -> bool {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut st = self.state.lock().unwrap();
        while st.1 < n {
            let now = std::time::Instant::now();
            if now >= deadline {
                return false;
            }
            st = self.cv.wait_timeout(st, deadline - now).unwrap().0;
        }
        true
    }
}

struct GateStorage {
    inner: MemStorage,
    gate: Arc<Gate>,
}

struct GateDevice {
    inner: Arc<dyn Device>,
    gate: Arc<Gate>,
}

impl Device for GateDevice {
    fn info(&self) -> DeviceInfo {
        self.inner.info()
    }
    fn alignment(&self) -> usize {
        self.inner.alignment()
    }
    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }
    fn ensure_capacity(&self, len: u64) -> IoResult<()> {
        self.inner.ensure_capacity(len)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> IoResult<()> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> IoResult<()> {
        self.inner.write_at(offset, buf)
    }
    fn sync(&self) -> IoResult<()> {
        self.gate.pass();
        self.inner.sync()
    }
}

impl Storage for GateStorage {
    fn open(&self, name: &str, create: bool) -> IoResult<Arc<dyn Device>> {
        Ok(Arc::new(GateDevice { inner: self.inner.open(name, create)?, gate: self.gate.clone() }))
    }
    fn exists(&self, name: &str) -> bool {
        self.inner.exists(name)
    }
    fn list(&self) -> IoResult<Vec<String>> {
        self.inner.list()
    }
    fn remove(&self, name: &str) -> IoResult<()> {
        self.inner.remove(name)
    }
    fn location(&self) -> String {
        "gated memory".into()
    }
}

#[test]
fn wal_commits_arriving_during_a_flush_share_the_next_one() {
    // Both wake-up strategies: waking every waiter, and waking only covered ones plus a leader.
    for targeted_wakeups in [false, true] {
        commits_arriving_during_a_flush_share_the_next_one(targeted_wakeups);
    }
}

fn commits_arriving_during_a_flush_share_the_next_one(targeted_wakeups: bool) {
    let gate = Arc::new(Gate::default());
    let a: Arc<dyn Storage> = Arc::new(GateStorage { inner: MemStorage::new(), gate: gate.clone() });
    let b: Arc<dyn Storage> = Arc::new(MemStorage::new());
    let opts = WalOptions { targeted_wakeups, ..WalOptions::default() };
    let log = Arc::new(FileLog::open(a.clone(), b.clone(), opts).unwrap());
    gate.set_closed(true);
    let first = {
        let log = log.clone();
        std::thread::spawn(move || {
            let (_, e) = log.append(b"first").unwrap();
            log.wait_durable(e).unwrap();
        })
    };
    gate.wait_held(1); // the first flush is now stuck in its sync
    let followers = 15;
    let handles: Vec<_> = (0..followers)
        .map(|i| {
            let log = log.clone();
            std::thread::spawn(move || {
                let (_, e) = log.append(&payload(7, i, 100)).unwrap();
                log.wait_durable(e).unwrap();
            })
        })
        .collect();
    while log.stats().records_appended < followers + 1 {
        std::thread::yield_now(); // waiting for a condition, not for time
    }
    gate.set_closed(false);
    first.join().unwrap();
    for h in handles {
        h.join().unwrap();
    }
    let s = log.stats();
    assert_eq!(s.records_flushed, followers + 1);
    assert_eq!(s.commits, followers + 1);
    assert_eq!(s.flushes, 2, "the {followers} followers must share one flush ({targeted_wakeups}): {s:?}");
}

#[test]
fn wal_many_threads_commit_with_fewer_flushes_than_commits() {
    let a: Arc<dyn Storage> = Arc::new(MemStorage::new());
    let b: Arc<dyn Storage> = Arc::new(MemStorage::new());
    let opts = WalOptions { segment_bytes: 256 * 1024, max_batch_bytes: 32 * 1024, ..WalOptions::default() };
    let log = Arc::new(FileLog::open(a.clone(), b.clone(), opts).unwrap());
    let (threads, per) = (20u64, 100u64);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                for i in 0..per {
                    let p = payload(t, i, 50 + (i as usize % 200));
                    let (s, e) = log.append(&p).unwrap();
                    assert!(log.wait_durable(e).unwrap() >= e);
                    mine.push((s, p));
                }
                mine
            })
        })
        .collect();
    let mut all: Vec<_> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
    all.sort_by_key(|r| r.0);
    let s = log.stats();
    eprintln!(
        "{} commits in {} flushes ({:.2} commits per flush), {} segments",
        s.commits,
        s.flushes,
        s.records_flushed as f64 / s.flushes as f64,
        log.segments().len()
    );
    assert_eq!(s.commits, threads * per);
    assert_eq!(s.records_flushed, threads * per);
    assert!(s.flushes <= s.commits);
    let got: Vec<_> = LogReader::open(a, b, 0).unwrap().collect::<nvmedb::Result<_>>().unwrap();
    assert_eq!(got.len(), all.len());
    for (r, (s, p)) in got.iter().zip(&all) {
        assert_eq!(r.lsn, *s);
        assert!(r.payload == *p);
    }
}

#[test]
fn wal_bounded_queue_appenders_flush_themselves_when_nobody_waits() {
    let a: Arc<dyn Storage> = Arc::new(MemStorage::new());
    let b: Arc<dyn Storage> = Arc::new(MemStorage::new());
    let opts = WalOptions {
        segment_bytes: 64 * 1024,
        max_batch_bytes: 4096,
        max_queued_batches: 1,
        group_commit_wait_us: 50,
        ..WalOptions::default()
    };
    let log = Arc::new(FileLog::open(a.clone(), b.clone(), opts).unwrap());
    let handles: Vec<_> = (0..4u64)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || {
                for i in 0..300 {
                    log.append(&payload(t, i, 700)).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let log = Arc::into_inner(log).unwrap();
    let end = log.close().unwrap();
    let got: Vec<_> = LogReader::open(a, b, 0).unwrap().collect::<nvmedb::Result<_>>().unwrap();
    assert_eq!(got.len(), 1200);
    assert!(got.last().unwrap().end_lsn <= end);
}

#[test]
fn wal_both_copies_are_written_and_synced_in_parallel() {
    // Copy A's sync is held; copy B must still reach its own sync, which it could not if the
    // copies were written one after the other.
    let gate_a = Arc::new(Gate::default());
    let gate_b = Arc::new(Gate::default());
    let a: Arc<dyn Storage> = Arc::new(GateStorage { inner: MemStorage::new(), gate: gate_a.clone() });
    let b: Arc<dyn Storage> = Arc::new(GateStorage { inner: MemStorage::new(), gate: gate_b.clone() });
    let log = Arc::new(FileLog::open(a, b, WalOptions::default()).unwrap());
    gate_a.set_closed(true);
    gate_b.set_closed(true);
    let t = {
        let log = log.clone();
        std::thread::spawn(move || {
            let (_, e) = log.append(b"both").unwrap();
            log.wait_durable(e).unwrap()
        })
    };
    gate_a.wait_held(1);
    let parallel = gate_b.wait_held_guarded(1);
    gate_a.set_closed(false);
    gate_b.set_closed(false);
    t.join().unwrap();
    assert!(parallel, "copy B was not written while copy A's sync was in progress");
    assert_eq!(log.stats().flushes, 1);
}

/// Flushes are not padded to the block boundary: a run of small commits, one flush each, grows
/// the log by its records' bytes only, and each flush writes just the blocks its records touch
/// (the first of them re-written: the end of the flush before).
#[test]
fn small_flushes_grow_the_log_by_their_record_bytes_only() {
    let (a, b): (Arc<dyn Storage>, Arc<dyn Storage>) =
        (Arc::new(MemStorage::new()), Arc::new(MemStorage::new()));
    let log = FileLog::open(a.clone(), b.clone(), WalOptions::default()).unwrap();
    let n = 200u64;
    let (mut record_bytes, mut device_bytes) = (0u64, 4096u64);
    for i in 0..n {
        let (s, e) = log.append(&payload(3, i, 100 + (i as usize % 7) * 40)).unwrap();
        log.wait_durable(e).unwrap();
        record_bytes += e - s;
        device_bytes += ((4096 + s) % 4096 + (e - s)).div_ceil(4096) * 4096;
    }
    let st = log.stats();
    assert_eq!(st.flushes, n, "one flush per commit");
    assert_eq!(log.end_lsn(), record_bytes, "no padding between the flushes");
    assert_eq!((st.durable_bytes, st.filler_bytes), (record_bytes, 0));
    assert_eq!(st.bytes_written, device_bytes, "each flush writes the blocks its records touch");
    assert!(st.bytes_written <= st.durable_bytes + (n + 1) * 8192);
    let recs: Vec<_> = LogReader::open(a, b, 0).unwrap().collect::<Result<_, _>>().unwrap();
    assert_eq!(recs.len() as u64, n);
    for (i, r) in recs.iter().enumerate() {
        assert!(r.payload == payload(3, i as u64, 100 + (i % 7) * 40), "record {i} read back wrong");
    }
}
