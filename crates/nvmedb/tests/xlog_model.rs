//! Fast log path (xlog): model-based and crash-simulation tests.
//!
//! Every randomised test prints its seed on failure (`NVMEDB_TEST_SEED=<n>` replays it). Stream content
//! is a pure function of the stream position (`byte_at`), so any writer interleaving can be
//! checked byte for byte.

use nvmedb::io::{CrashSimDevice, Device, MemDevice};
use nvmedb::util::sync::MutexExt;
use nvmedb::util::Rng;
use nvmedb::wal::LogSink;
use nvmedb::xlog::{
    IoScheduler, Mirror, Replication, ReplicationMode, SchedMode, ShadowCounters, XLog, XLogConfig,
};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod support;
use support::TmpDir;

fn byte_at(pos: u64) -> u8 {
    let x = pos.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> 56) as u8 ^ (pos as u8)
}

fn fill(buf: &mut [u8], pos: u64) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = byte_at(pos + i as u64);
    }
}

fn check_stream(bytes: &[u8], from: u64, ctx: &str) {
    for (i, &b) in bytes.iter().enumerate() {
        let p = from + i as u64;
        assert_eq!(b, byte_at(p), "{ctx}: stream byte {p} differs");
    }
}

fn seed() -> u64 {
    support::seed_or_random()
}

/// Aborts the test process with the seed if the test has not finished after two minutes: a bug
/// that leaves a gap (a frame never completed) would otherwise block writers forever. Not a
/// timing assertion: healthy runs take well under a second.
struct Watchdog(Option<std::sync::mpsc::Sender<()>>);

fn watchdog(name: &'static str, seed: u64) -> Watchdog {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(Duration::from_secs(120)) {
            eprintln!("{name}: no progress for 120 s, aborting (replay with NVMEDB_TEST_SEED={seed})");
            std::process::abort();
        }
    });
    Watchdog(Some(tx))
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

fn small_cfg(ring: &TmpDir) -> XLogConfig {
    let mut c = XLogConfig::new(ring.path());
    c.ring_bytes = 64 << 10;
    c.queue_bytes = 8 << 10;
    c.conv_pages = 2048;
    c.destage_batch_pages = 4;
    c.destage_latency = Duration::from_micros(100);
    c.spin_iters = 50;
    c
}

/// Model-based: concurrent writers using x_alloc/x_free; a sampler checks at every step that the
/// credit counter never exceeds the contiguous prefix of filled allocations; a tail reader checks
/// that the conventional side returns exactly the stream.
#[test]
fn xlog_credit_never_exceeds_contiguous_filled_bytes() {
    let seed = seed();
    eprintln!("xlog model seed {seed}");
    let _wd = watchdog("model", seed);
    let ring = TmpDir::on_tmpfs("model");
    let log = Arc::new(XLog::open(small_cfg(&ring), Arc::new(MemDevice::new("conv"))).expect("open"));
    let filled: Arc<Mutex<BTreeMap<u64, u64>>> = Arc::new(Mutex::new(BTreeMap::new()));
    let prefix = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    const THREADS: u64 = 3;
    const PER_THREAD: usize = 300;
    // Writers start only once the sampler runs, so the samples interleave with the writes.
    let start = Arc::new(std::sync::Barrier::new(THREADS as usize + 1));
    let mut hs = Vec::new();
    for t in 0..THREADS {
        let (log, filled, prefix, start) =
            (Arc::clone(&log), Arc::clone(&filled), Arc::clone(&prefix), Arc::clone(&start));
        hs.push(std::thread::spawn(move || {
            start.wait();
            let mut rng = Rng::new(seed ^ (t + 1));
            let w = log.writer().expect("writer");
            for _ in 0..PER_THREAD {
                let len = rng.range(1, 1500) as usize;
                let mut a = w.x_alloc(len).expect("x_alloc");
                let pos = a.stream_pos();
                // Fill in two halves in random order, yielding between them.
                let cut = rng.below(len as u64) as usize;
                let buf = a.buf();
                if rng.chance(0.5) {
                    fill(&mut buf[cut..], pos + cut as u64);
                    std::thread::yield_now();
                    fill(&mut buf[..cut], pos);
                } else {
                    fill(&mut buf[..cut], pos);
                    std::thread::yield_now();
                    fill(&mut buf[cut..], pos + cut as u64);
                }
                {
                    let mut f = filled.locked();
                    f.insert(pos, len as u64);
                    let mut p = prefix.load(Ordering::SeqCst);
                    while let Some(l) = f.remove(&p) {
                        p += l;
                    }
                    prefix.store(p, Ordering::SeqCst);
                }
                let end = w.x_free(a).expect("x_free");
                if rng.chance(0.2) {
                    assert!(w.x_fsync().expect("x_fsync") >= end, "seed {seed}");
                }
            }
            w.x_fsync().expect("x_fsync");
            assert_eq!(w.counter(), w.written(), "seed {seed}: per-writer counter after x_fsync");
            w.written()
        }));
    }
    // Sampler: credit <= contiguous filled prefix, and monotone.
    let sampler = {
        let (log, prefix, stop, start) =
            (Arc::clone(&log), Arc::clone(&prefix), Arc::clone(&stop), Arc::clone(&start));
        std::thread::spawn(move || {
            let mut last = 0;
            let mut samples = 0u64;
            start.wait();
            loop {
                let finished = stop.load(Ordering::SeqCst);
                let c = log.status().credit;
                let p = prefix.load(Ordering::SeqCst);
                assert!(c <= p, "seed {seed}: credit {c} ahead of the contiguous filled prefix {p}");
                assert!(c >= last, "seed {seed}: credit went backwards {last} -> {c}");
                let st = log.status();
                assert!(st.destaged <= st.credit && st.credit <= st.allocated, "seed {seed}: {st:?}");
                assert!(st.ring_used_bytes <= st.ring_bytes, "seed {seed}: {st:?}");
                last = c;
                samples += 1;
                if finished {
                    break;
                }
                std::thread::yield_now();
            }
            samples
        })
    };
    // Tail reader: exactly the stream, in order (polls; the blocking x_pread has its own test).
    let target = Arc::new(AtomicU64::new(u64::MAX));
    let reader = {
        let (log, target) = (Arc::clone(&log), Arc::clone(&target));
        std::thread::spawn(move || {
            let mut r = log.tail_reader(0);
            let mut buf = vec![0u8; 3000];
            let mut total = 0u64;
            loop {
                let n = r.try_pread(&mut buf).expect("try_pread");
                check_stream(&buf[..n], total, &format!("seed {seed}: tail reader"));
                total += n as u64;
                if n == 0 {
                    if total == target.load(Ordering::SeqCst) {
                        return total;
                    }
                    assert!(log.status().destage_error.is_none(), "seed {seed}: destage failed");
                    std::thread::yield_now();
                }
            }
        })
    };
    let mut total = 0;
    for h in hs {
        total += h.join().expect("writer");
    }
    stop.store(true, Ordering::SeqCst);
    target.store(total, Ordering::SeqCst);
    let samples = sampler.join().expect("sampler");
    assert!(samples > 0);
    log.destage_now().expect("destage_now");
    let read = reader.join().expect("reader");
    assert_eq!(read, total, "seed {seed}");
    let st = log.status();
    assert_eq!((st.credit, st.destaged, st.allocated), (total, total, total), "seed {seed}");
    let s = log.stats();
    assert!(s.max_outstanding.load(Ordering::Relaxed) <= st.queue_bytes, "seed {seed}: queue exceeded");
    let all = log.read_stream(0, total).expect("read_stream");
    check_stream(&all, 0, &format!("seed {seed}: read_stream"));
}

/// Back-pressure: with the queue full of an unfilled allocation, another writer is held back
/// (status register shows back-pressure) until the first one frees; x_pwrite never puts more
/// than the negotiated queue in flight.
#[test]
fn xlog_backpressure_is_honoured() {
    let _wd = watchdog("backpressure", 0);
    let ring = TmpDir::on_tmpfs("bp");
    let cfg = small_cfg(&ring);
    let q = cfg.queue_bytes;
    let log = Arc::new(XLog::open(cfg, Arc::new(MemDevice::new("conv"))).expect("open"));
    let w1 = log.writer().expect("writer");
    let mut a = w1.x_alloc(log.max_alloc()).expect("alloc");
    let pos = a.stream_pos();
    assert!(w1.credits() < 64 + 1, "queue should be (almost) exhausted: {}", w1.credits());
    let t = {
        let log = Arc::clone(&log);
        std::thread::spawn(move || {
            let w2 = log.writer().expect("writer");
            let mut b = w2.x_alloc(100).expect("alloc 2");
            let p = b.stream_pos();
            fill(b.buf(), p);
            w2.x_free(b).expect("free 2");
            w2.x_fsync().expect("fsync 2")
        })
    };
    // Without sleeping: wait until the second writer reports being held back.
    while !log.status().backpressure {
        std::thread::yield_now();
    }
    assert_eq!(log.status().credit, pos, "nothing may be credited past the unfilled allocation");
    fill(a.buf(), pos);
    let end = w1.x_free(a).expect("free");
    let c = t.join().expect("writer 2");
    assert!(c >= end + 100);
    // x_pwrite of a large buffer honours the queue.
    let w = log.writer().expect("writer");
    let mut big = vec![0u8; 200_000];
    let start = log.status().allocated;
    fill(&mut big, start);
    let (s, e) = w.x_pwrite(&big).expect("pwrite");
    assert_eq!((s, e), (start, start + big.len() as u64));
    w.x_fsync().expect("fsync");
    assert!(log.stats().max_outstanding.load(Ordering::Relaxed) <= q as u64);
    log.destage_now().expect("destage");
    check_stream(&log.read_stream(0, e).expect("read"), 0, "after back-pressure");
}

/// Crash protocol, simulated: a gap (allocation never filled) stops recovery; everything before
/// it reaches the conventional side; frames after it are dropped; a stale frame of an earlier
/// incarnation at the right ring position is not mistaken for new data.
#[test]
fn xlog_simulated_crash_stops_at_first_gap() {
    let seed = seed();
    eprintln!("xlog crash seed {seed}");
    let _wd = watchdog("crash", seed);
    let mut rng = Rng::new(seed);
    let ring = TmpDir::on_tmpfs("crash");
    let dev = Arc::new(CrashSimDevice::new("conv"));
    let mut cfg = small_cfg(&ring);
    // A long latency threshold keeps partial data in the ring at the crash.
    cfg.destage_latency = Duration::from_secs(3600);
    let log = XLog::open(cfg.clone(), Arc::clone(&dev) as Arc<dyn Device>).expect("open");
    assert!(log.recovery().created);
    let w = log.writer().expect("writer");
    // A prefix of random records, some destaged, the tail still in the ring.
    for _ in 0..rng.range(20, 60) {
        let len = rng.range(1, 3000) as usize;
        let mut a = w.x_alloc(len).expect("alloc");
        let p = a.stream_pos();
        fill(a.buf(), p);
        w.x_free(a).expect("free");
    }
    let good_end = w.x_fsync().expect("fsync");
    // Gap: allocated, half filled, never freed.
    let mut gap = w.x_alloc(500).expect("alloc gap");
    let gp = gap.stream_pos();
    fill(&mut gap.buf()[..250], gp);
    std::mem::forget(gap);
    // A complete frame after the gap: must not be recovered.
    let mut after = w.x_alloc(700).expect("alloc after");
    let ap = after.stream_pos();
    fill(after.buf(), ap);
    w.x_free(after).expect("free after");
    assert_eq!(log.status().credit, good_end, "credit stops at the gap");
    drop(w);
    log.crash();
    let lost = dev.crash(&mut rng);
    eprintln!("device crash outcome {lost:?}");

    let log = XLog::open(cfg.clone(), Arc::clone(&dev) as Arc<dyn Device>).expect("reopen");
    let rep = log.recovery().clone();
    assert_eq!(rep.stream_end, good_end, "seed {seed}: {rep:?}");
    let all = log.read_stream(0, good_end).expect("read");
    check_stream(&all, 0, &format!("seed {seed}: recovered stream"));
    // New incarnation: same sizes as before the crash, so the next allocation after the gap
    // lands exactly where the stale complete frame `after` lies (same ring and stream position).
    let w = log.writer().expect("writer");
    let mut g2 = w.x_alloc(500).expect("alloc");
    assert_eq!(g2.stream_pos(), gp);
    let p = g2.stream_pos();
    fill(g2.buf(), p);
    let e2 = w.x_free(g2).expect("free");
    let gap2 = w.x_alloc(700).expect("alloc over the stale frame");
    assert_eq!(gap2.stream_pos(), ap);
    std::mem::forget(gap2);
    drop(w);
    log.crash();
    let log = XLog::open(cfg, Arc::clone(&dev) as Arc<dyn Device>).expect("reopen 2");
    assert_eq!(log.recovery().stream_end, e2, "seed {seed}: the stale frame of the old epoch was recovered");
    check_stream(&log.read_stream(0, e2).expect("read"), 0, &format!("seed {seed}: second recovery"));
    log.close().expect("close");
}

/// Destage ordering with partial pages and filler; the tail reader blocks until bytes arrive and
/// returns exactly the x_pwrite stream; the LogSink view agrees.
#[test]
fn xlog_tail_read_returns_exactly_the_written_stream() {
    let seed = seed();
    let _wd = watchdog("tail", seed);
    let mut rng = Rng::new(seed);
    let ring = TmpDir::on_tmpfs("tail");
    let cfg = small_cfg(&ring);
    let log = Arc::new(XLog::open(cfg, Arc::new(MemDevice::new("conv"))).expect("open"));
    let mut expect = Vec::new();
    let reader = {
        let log = Arc::clone(&log);
        std::thread::spawn(move || {
            let mut r = log.tail_reader(0);
            let mut got = Vec::new();
            let mut buf = [0u8; 777];
            while got.len() < 150_000 {
                let want = (150_000 - got.len()).min(buf.len());
                let n = r.x_pread(&mut buf[..want]).expect("x_pread");
                assert_eq!(n, want, "x_pread returns only when the buffer is full");
                got.extend_from_slice(&buf[..n]);
            }
            got
        })
    };
    while expect.len() < 150_000 {
        let len = rng.range(1, 5000) as usize;
        let mut rec = vec![0u8; len];
        rng.fill(&mut rec);
        let (s, e) = log.append(&rec).expect("append");
        assert_eq!(s, expect.len() as u64);
        assert_eq!(e, s + len as u64);
        expect.extend_from_slice(&rec);
        if rng.chance(0.3) {
            assert!(log.wait_durable(e).expect("wait") >= e);
            assert!(log.durable_lsn() >= e);
        }
    }
    let got = reader.join().expect("reader");
    assert_eq!(got[..], expect[..150_000], "seed {seed}");
    let s = log.stats();
    assert!(s.destage_pages.load(Ordering::Relaxed) > 0);
    assert!(s.pad_frames.load(Ordering::Relaxed) > 0, "the ring should have wrapped");
    // Small trailing record: only the latency threshold (or a flush) destages it, with filler.
    let (_, e) = log.append(b"tail").expect("append");
    let mut r = log.tail_reader(e - 4);
    let mut b = [0u8; 4];
    assert_eq!(r.x_pread(&mut b).expect("x_pread tail"), 4);
    assert_eq!(&b, b"tail");
    assert!(s.filler_bytes.load(Ordering::Relaxed) > 0);
}

/// Replication seam: eager mode holds the writer's counter at the slowest shadow; mirrors see
/// every frame exactly once; the status register shows link states.
#[test]
fn xlog_replication_counters_and_mirror() {
    #[derive(Default)]
    struct Collect(Mutex<BTreeMap<u64, Vec<u8>>>);
    impl Mirror for Collect {
        fn on_frame(&self, pos: u64, bytes: &[u8]) -> nvmedb::Result<()> {
            let prev = self.0.locked().insert(pos, bytes.to_vec());
            assert!(prev.is_none(), "frame mirrored twice");
            Ok(())
        }
    }
    let ring = TmpDir::on_tmpfs("repl");
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new("conv"));
    let sched = Arc::new(IoScheduler::new(dev, SchedMode::Neutral, 1));
    let shadows = Arc::new(ShadowCounters::new(ReplicationMode::Eager, 2, 0));
    let mirror = Arc::new(Collect::default());
    let repl =
        Replication { shadows: Some(Arc::clone(&shadows)), mirrors: vec![mirror.clone() as Arc<dyn Mirror>] };
    let log = Arc::new(XLog::open_with(small_cfg(&ring), sched, repl).expect("open"));
    let w = log.writer().expect("writer");
    let mut data = vec![0u8; 20_000];
    fill(&mut data, 0);
    let (_, end) = w.x_pwrite(&data).expect("pwrite");
    assert_eq!(log.status().credit, end, "locally persisted");
    assert_eq!(log.counter(), 0, "eager: no secondary has it yet");
    let waiter = {
        let log = Arc::clone(&log);
        std::thread::spawn(move || {
            let w = log.writer().expect("writer");
            // Waits on the combined counter.
            let _ = &w;
            log.wait_durable(end).expect("wait")
        })
    };
    log.update_shadow(0, end);
    assert_eq!(log.counter(), 0);
    log.update_shadow(1, end / 2);
    assert_eq!(log.counter(), end / 2);
    log.update_shadow(1, end);
    assert!(waiter.join().expect("waiter") >= end);
    assert_eq!(log.status().links.len(), 2);
    let m = mirror.0.locked();
    let mut pos = 0;
    let mut joined = Vec::new();
    for (p, b) in m.iter() {
        assert_eq!(*p, pos);
        pos += b.len() as u64;
        joined.extend_from_slice(b);
    }
    assert_eq!(joined, data);
}

/// The scheduler's conventional view writes through to the device and is counted.
#[test]
fn xlog_scheduler_conventional_writers() {
    let ring = TmpDir::on_tmpfs("sched");
    let mut cfg = small_cfg(&ring);
    cfg.conv_offset = 1 << 20;
    cfg.sched_mode = SchedMode::ConventionalPriority;
    let mem = Arc::new(MemDevice::new("shared"));
    let log = XLog::open(cfg, Arc::clone(&mem) as Arc<dyn Device>).expect("open");
    let conv = log.scheduler().conventional_device();
    let mut page = nvmedb::io::AlignedBuf::new(4096);
    page.fill(7);
    conv.write_at(0, &page).expect("conventional write");
    let mut back = nvmedb::io::AlignedBuf::new(4096);
    mem.read_at(0, &mut back).expect("read");
    assert!(back.iter().all(|&b| b == 7));
    let st = log.scheduler().stats(nvmedb::xlog::WriteClass::Conventional);
    assert_eq!(st.writes.load(Ordering::Relaxed), 1);
    assert!(log.durability().contains("tmpfs") || log.durability().contains("disk"));
}

/// A live region cannot be opened twice; a region whose headers are both damaged is reported,
/// never silently reinitialised.
#[test]
fn xlog_damaged_header_is_corruption() {
    use std::os::unix::fs::FileExt;
    let ring = TmpDir::on_tmpfs("hdr");
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new("conv"));
    let log = XLog::open(small_cfg(&ring), Arc::clone(&dev)).expect("open");
    log.append(b"some bytes").expect("append");
    assert!(
        XLog::open(small_cfg(&ring), Arc::clone(&dev)).is_err(),
        "a second handle on a live region must be refused"
    );
    log.close().expect("close");
    let f = std::fs::OpenOptions::new().write(true).open(ring.path()).expect("open ring file");
    f.write_all_at(&[0xAB; 8], 24).expect("damage slot 0");
    f.write_all_at(&[0xAB; 8], 512 + 24).expect("damage slot 1");
    match XLog::open(small_cfg(&ring), dev) {
        Err(nvmedb::Error::Corruption { .. }) => {}
        other => panic!("expected corruption, got {other:?}"),
    }
}

/// Multi-frame x_pwrite calls racing with x_alloc writers: each x_pwrite's returned LSN range
/// holds exactly its bytes (nothing lands between its frames), and every x_alloc area holds its.
#[test]
fn xlog_pwrite_ranges_are_contiguous_under_concurrency() {
    let seed = seed();
    eprintln!("xlog pwrite seed {seed}");
    let _wd = watchdog("pwrite", seed);
    let ring = TmpDir::on_tmpfs("pw");
    let log = Arc::new(XLog::open(small_cfg(&ring), Arc::new(MemDevice::new("conv"))).expect("open"));
    type Records = Arc<Mutex<Vec<(u64, Vec<u8>)>>>;
    let records: Records = Arc::new(Mutex::new(Vec::new()));
    let mut hs = Vec::new();
    for t in 0..4u64 {
        let (log, records) = (Arc::clone(&log), Arc::clone(&records));
        hs.push(std::thread::spawn(move || {
            let mut rng = Rng::new(seed ^ (t + 11));
            let w = log.writer().expect("writer");
            for _ in 0..60 {
                if t % 2 == 0 {
                    // Larger than one frame: several frames under the order lock.
                    let len = rng.range(1, 30_000) as usize;
                    let mut rec = vec![0u8; len];
                    rng.fill(&mut rec);
                    let (s, e) = w.x_pwrite(&rec).expect("x_pwrite");
                    assert_eq!(e - s, len as u64, "seed {seed}");
                    records.locked().push((s, rec));
                } else {
                    let len = rng.range(1, 3000) as usize;
                    let mut a = w.x_alloc(len).expect("x_alloc");
                    let p = a.stream_pos();
                    rng.fill(a.buf());
                    let copy = a.buf().to_vec();
                    w.x_free(a).expect("x_free");
                    records.locked().push((p, copy));
                }
            }
            w.x_fsync().expect("x_fsync");
        }));
    }
    for h in hs {
        h.join().expect("writer");
    }
    let end = log.destage_now().expect("destage");
    let stream = log.read_stream(0, end).expect("read");
    let mut recs = records.locked().clone();
    recs.sort_by_key(|r| r.0);
    let mut pos = 0u64;
    for (s, bytes) in &recs {
        assert_eq!(*s, pos, "seed {seed}: records must tile the stream");
        assert!(
            stream[*s as usize..*s as usize + bytes.len()] == bytes[..],
            "seed {seed}: record at {s} differs"
        );
        pos += bytes.len() as u64;
    }
    assert_eq!(pos, end, "seed {seed}");
}

/// Bad configurations are refused with the option's name.
#[test]
fn xlog_config_errors_name_the_key() {
    let ring = TmpDir::on_tmpfs("cfg");
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new("conv"));
    let mut c = small_cfg(&ring);
    c.destage_batch_pages = (c.conv_pages + 1) as usize;
    match XLog::open(c, Arc::clone(&dev)) {
        Err(nvmedb::Error::Config { key, .. }) => assert_eq!(key, "xlog.destage_batch_pages"),
        other => panic!("expected a config error, got {other:?}"),
    }
    let mut c = small_cfg(&ring);
    c.ring_bytes = c.queue_bytes;
    match XLog::open(c, dev) {
        Err(nvmedb::Error::Config { key, .. }) => assert_eq!(key, "xlog.ring_bytes"),
        other => panic!("expected a config error, got {other:?}"),
    }
}

/// The conventional ring wraps: batches split into several scheduled writes stay in order, the
/// oldest pages are overwritten, what remains reads back exactly, and a reader that fell behind
/// gets an error instead of wrong bytes.
#[test]
fn xlog_conventional_ring_wraps_in_order() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let ring = TmpDir::on_tmpfs("wrap");
    let mut cfg = small_cfg(&ring);
    cfg.conv_pages = 16;
    cfg.destage_batch_pages = 5;
    cfg.destage_write_pages = 2;
    let log = XLog::open(cfg, Arc::new(MemDevice::new("conv"))).expect("open");
    let w = log.writer().expect("writer");
    let mut total = 0u64;
    while total < 300_000 {
        let len = rng.range(1, 6000) as usize;
        let mut a = w.x_alloc(len.min(log.max_alloc())).expect("alloc");
        let p = a.stream_pos();
        fill(a.buf(), p);
        total = w.x_free(a).expect("free");
    }
    let end = log.destage_now().expect("destage");
    assert_eq!(end, total);
    let oldest = log.oldest_stream_pos().expect("oldest");
    assert!(oldest > 0 && oldest < end, "seed {seed}: ring should have wrapped ({oldest}..{end})");
    check_stream(&log.read_stream(oldest, end).expect("read"), oldest, &format!("seed {seed}: after wrap"));
    let mut behind = log.tail_reader(0);
    let mut b = [0u8; 10];
    assert!(behind.try_pread(&mut b).is_err(), "a reader behind the ring must get an error");
}

/// A ring on a disk file system is classified as such, persists with msync, and recovers; an
/// allocation dropped without x_free is zero-filled and completed instead of stalling the log.
#[test]
fn xlog_disk_file_backing_and_abandoned_allocation() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join(format!("xlog-disk-{}.ring", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let mut cfg = XLogConfig::new(&path);
    cfg.ring_bytes = 64 << 10;
    cfg.queue_bytes = 8 << 10;
    cfg.conv_pages = 64;
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new("conv"));
    let log = XLog::open(cfg.clone(), Arc::clone(&dev)).expect("open");
    match log.backing() {
        nvmedb::xlog::Backing::DiskFile { msync } => assert!(msync),
        nvmedb::xlog::Backing::Tmpfs => {
            eprintln!("CARGO_TARGET_TMPDIR is on tmpfs; msync path not exercised")
        }
        nvmedb::xlog::Backing::Dax => {}
    }
    let w = log.writer().expect("writer");
    let (_, e1) = w.x_pwrite(b"before").expect("pwrite");
    {
        let mut a = w.x_alloc(5).expect("alloc");
        a.buf()[0] = 1; // dropped without x_free
    }
    let (_, e2) = w.x_pwrite(b"after").expect("pwrite");
    assert_eq!(w.x_fsync().expect("fsync"), e2, "an abandoned allocation must not stall the counter");
    assert_eq!(log.stats().abandoned.load(Ordering::Relaxed), 1);
    drop(w);
    log.crash();
    let log = XLog::open(cfg, dev).expect("reopen");
    assert_eq!(log.recovery().stream_end, e2);
    let s = log.read_stream(0, e2).expect("read");
    assert_eq!(&s[..e1 as usize], b"before");
    assert_eq!(&s[e1 as usize..e1 as usize + 5], &[0u8; 5]);
    assert_eq!(&s[e1 as usize + 5..], b"after");
    log.close().expect("close");
    let _ = std::fs::remove_file(&path);
}

/// A failing mirror shows in the status register as a failed link; local commits go on, and
/// with lazy replication the writer's counter is the local one.
#[test]
fn xlog_mirror_failure_marks_the_link() {
    struct Broken;
    impl Mirror for Broken {
        fn on_frame(&self, _pos: u64, _bytes: &[u8]) -> nvmedb::Result<()> {
            Err(nvmedb::Error::InvalidArgument("link down".into()))
        }
    }
    let ring = TmpDir::on_tmpfs("mirrorfail");
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new("conv"));
    let sched = Arc::new(IoScheduler::new(dev, SchedMode::Neutral, 1));
    let shadows = Arc::new(ShadowCounters::new(ReplicationMode::Lazy, 1, 0));
    let repl = Replication { shadows: Some(shadows), mirrors: vec![Arc::new(Broken) as Arc<dyn Mirror>] };
    let log = XLog::open_with(small_cfg(&ring), sched, repl).expect("open");
    let (_, e) = log.append(b"hello").expect("append");
    assert_eq!(log.wait_durable(e).expect("wait"), e);
    assert_eq!(log.status().links, vec![nvmedb::xlog::LinkState::Failed]);
}
