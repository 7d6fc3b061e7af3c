//! The tracer's global behaviour: multi-thread record and collect, bounded buffers, the off
//! switch, and its overhead (printed, never asserted). The tracer is process-wide, so every test
//! here takes `SERIAL` first.

use nvmedb::trace::{self, TraceConfig, TraceKind};
use nvmedb::util::sync::MutexExt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.locked()
}

#[test]
fn threads_record_and_collect_labelled_intervals() {
    let _g = serial();
    trace::start(TraceConfig { capacity_per_thread: 1024 });
    let handles: Vec<_> = (0..4)
        .map(|c| {
            std::thread::spawn(move || {
                trace::set_thread_label(format!("client {c}"));
                for _ in 0..10 {
                    let _cpu = trace::span(TraceKind::Cpu);
                    {
                        let _r = trace::span(TraceKind::DataRead);
                        std::thread::sleep(Duration::from_micros(20));
                    }
                }
                let t0 = Instant::now();
                trace::record(TraceKind::LogWait, t0, t0 + Duration::from_micros(5));
            })
        })
        .collect();
    for h in handles {
        h.join().expect("client thread");
    }
    trace::stop();
    let t = trace::collect();
    let mut labels: Vec<_> = t.threads.iter().map(|th| th.label.clone()).collect();
    labels.sort();
    assert_eq!(labels, vec!["client 0", "client 1", "client 2", "client 3"]);
    for th in &t.threads {
        assert_eq!(th.intervals.len(), 21, "{}", th.label);
        assert_eq!(th.dropped, 0);
        assert!(th.intervals.windows(2).all(|w| w[0].start_ns <= w[1].start_ns), "sorted");
        let log = th.intervals.iter().find(|iv| iv.kind == TraceKind::LogWait).expect("log wait");
        assert_eq!(log.duration_ns(), 5_000);
        for iv in &th.intervals {
            assert!(iv.start_ns <= iv.end_ns && iv.end_ns <= t.duration_ns);
        }
    }
    let reads = t.kind_stats(TraceKind::DataRead);
    assert_eq!(reads.count, 40);
    assert!(reads.mean_ns >= 20_000.0, "a read span covers its 20 µs sleep");
    // Exited threads are released: a second collect finds nothing.
    assert!(trace::collect().threads.is_empty());
}

#[test]
fn full_buffer_counts_drops_and_stays_bounded() {
    let _g = serial();
    trace::start(TraceConfig { capacity_per_thread: 8 });
    for _ in 0..20 {
        let _s = trace::span(TraceKind::DataWrite);
    }
    trace::stop();
    let t = trace::collect();
    let me = t.threads.iter().find(|th| th.intervals.len() + th.dropped as usize == 20).expect("this thread");
    assert_eq!(me.intervals.len(), 8);
    assert_eq!(me.dropped, 12);
    assert_eq!(t.dropped(), 12);
    // The next window starts empty.
    trace::start(TraceConfig { capacity_per_thread: 8 });
    trace::stop();
    assert_eq!(trace::collect().dropped(), 0);
}

#[test]
fn disabled_records_nothing() {
    let _g = serial();
    trace::start(TraceConfig::default());
    trace::stop();
    let _ = trace::collect();
    assert!(!trace::is_enabled());
    for _ in 0..100 {
        let _s = trace::span(TraceKind::Cpu);
        let now = Instant::now();
        trace::record(TraceKind::LockWait, now, now);
    }
    std::thread::spawn(|| {
        let _s = trace::span(TraceKind::DataRead);
    })
    .join()
    .expect("thread");
    let t = trace::collect();
    assert_eq!(t.threads.iter().map(|th| th.intervals.len()).sum::<usize>(), 0);
    assert_eq!(t.dropped(), 0);
}

#[test]
fn spans_open_across_start_are_clipped_to_the_epoch() {
    let _g = serial();
    trace::start(TraceConfig::default());
    let before = Instant::now();
    std::thread::sleep(Duration::from_millis(2));
    trace::start(TraceConfig::default()); // new epoch, after `before`
    trace::record(TraceKind::Cpu, before, Instant::now());
    trace::stop();
    let t = trace::collect();
    let iv = t.threads.iter().flat_map(|th| th.intervals.iter()).next().expect("one interval");
    assert_eq!(iv.start_ns, 0, "clipped to the epoch");
}

/// Prints the cost of a span with tracing off and on. Not a benchmark assertion: the numbers
/// are documented in docs/lab-reports.md.
#[test]
fn overhead_is_printed() {
    let _g = serial();
    const N: u32 = 200_000;
    let measure = || {
        let t0 = Instant::now();
        for _ in 0..N {
            let s = trace::span(std::hint::black_box(TraceKind::Cpu));
            std::hint::black_box(&s);
        }
        t0.elapsed().as_nanos() as f64 / f64::from(N)
    };
    trace::stop();
    let _ = measure();
    let off_ns = measure();
    trace::start(TraceConfig { capacity_per_thread: N as usize });
    let on_ns = measure();
    trace::stop();
    let t = trace::collect();
    assert_eq!(t.threads.iter().map(|th| th.intervals.len()).sum::<usize>(), N as usize);
    let t0 = Instant::now();
    for _ in 0..N {
        std::hint::black_box(Instant::now());
    }
    let clock_ns = t0.elapsed().as_nanos() as f64 / f64::from(N);
    println!(
        "trace overhead: off {off_ns:.1} ns/span, on {on_ns:.1} ns/span (Instant::now {clock_ns:.1} ns)"
    );
}

/// The engine records what a committing client waits for: the log flush (LogWait) and, when two
/// transactions want the same row, the lock (LockWait).
#[test]
fn engine_records_log_and_lock_waits() {
    use nvmedb::io::{MemStorage, Storage};
    use nvmedb::{BufferSize, Database, Options, Schema, Value};
    use std::sync::Arc;
    let _g = serial();
    let data: Arc<dyn Storage> = Arc::new(MemStorage::new());
    let log: (Arc<dyn Storage>, Arc<dyn Storage>) =
        (Arc::new(MemStorage::new()), Arc::new(MemStorage::new()));
    let opts = Options {
        table_page_size: 4096,
        index_page_size: 4096,
        table_buffer: BufferSize::Bytes(16 * 4096),
        index_buffer: BufferSize::Bytes(16 * 4096),
        ..Options::default()
    };
    let db = Database::open_with_storages(data, Some(log), opts).unwrap();
    let schema = Schema::new(vec![("id", nvmedb::ColumnType::Int), ("v", nvmedb::ColumnType::Int)]);
    let t = db.create_table("t", schema).unwrap();
    t.insert(&[Value::Int(1), Value::Int(0)]).unwrap();
    trace::start(TraceConfig { capacity_per_thread: 4096 });
    // A transaction holds the row's lock while another client asks for it.
    let mut holder = db.begin();
    holder.update_int(&t, &Value::Int(1), 1, 10).unwrap();
    let waiter = {
        let (db, t) = (db.clone(), t.clone());
        std::thread::spawn(move || {
            let mut tx = db.begin();
            tx.update_int(&t, &Value::Int(1), 1, 20).unwrap();
            tx.commit().unwrap();
        })
    };
    while db.lock_stats().waits == 0 {
        std::thread::yield_now(); // until the second client is blocked on the row lock
    }
    holder.commit().unwrap();
    waiter.join().unwrap();
    trace::stop();
    let tr = trace::collect();
    assert!(tr.kind_stats(TraceKind::LogWait).count >= 2, "each commit waits for the log: {tr:?}");
    assert!(tr.kind_stats(TraceKind::LockWait).count >= 1, "the second client waited for the lock");
}
