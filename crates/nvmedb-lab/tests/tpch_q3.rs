//! TPC-H Q3 at a tiny scale factor: the loader's row counts match the TPC-H cardinalities, and
//! Q3's answer through the buffer manager equals an independent single-threaded evaluation over
//! the generator's rows, for every policy (SHR-1/16/512, SEP) and several worker counts, with a
//! buffer far smaller than the data; each query reads every page of the three tables (exactly
//! once under SEP and with one worker, counted by the pool); the device-limit probe reads
//! exactly the pages the query's scans read, in the same per-thread order and batches.

use nvmedb::buffer::BufferPolicy;
use nvmedb::io::{HookedStorage, IoHook, IoOpKind, IoResult, MemStorage, Storage};
use nvmedb::{BufferSize, Database, Options};
use nvmedb_lab::workload::tpch::{self, Q3Params};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

const SF: f64 = 0.01;

fn options(policy: BufferPolicy, frames: u64) -> Options {
    Options {
        table_page_size: 8192,
        index_page_size: 8192,
        table_buffer: BufferSize::Bytes(frames * 8192),
        index_buffer: BufferSize::Bytes(64 << 20),
        policy,
        wal: false,
        ..Options::default()
    }
}

#[test]
fn q3_matches_the_reference_under_every_policy_and_worker_count() {
    let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
    let db =
        Database::open_with_storage(storage.clone(), options(BufferPolicy::Shared { stripes: 16 }, 4096))
            .unwrap();
    let loaded = tpch::load(&db, SF, 2, false).unwrap();
    db.close().unwrap();
    let expected_rows = tpch::cardinalities(SF);
    assert_eq!(expected_rows[..2], [1500, 15_000], "TPC-H: 150 000 customers and 1 500 000 orders per SF");
    assert_eq!(loaded.rows, expected_rows);
    let params = Q3Params::default();
    let reference = tpch::q3_reference(SF, &params).unwrap();
    assert_eq!(reference.len(), 10, "{reference:?}");
    for workers in [1usize, 3, 4] {
        for policy in [
            BufferPolicy::Shared { stripes: 1 },
            BufferPolicy::Shared { stripes: 16 },
            BufferPolicy::Shared { stripes: 512 },
            BufferPolicy::Separated { partitions: workers },
        ] {
            let db =
                Database::open_with_storage(storage.clone(), options(policy, 32 * workers as u64)).unwrap();
            let pages: u64 = tpch::TABLES.iter().map(|t| db.table(t).unwrap().heap_pages().unwrap()).sum();
            assert!(pages > 32 * workers as u64 * 4, "the buffer is far smaller than the data");
            let before = db.buffer_stats().0;
            let out = tpch::q3(&db, &params, workers, 8).unwrap();
            let what = format!("{} with {workers} workers", policy.label());
            assert_eq!(out.top, reference, "{what}");
            assert_eq!(out.rows_scanned, expected_rows, "{what}");
            let reads = db.buffer_stats().0.since(&before).reads;
            if matches!(policy, BufferPolicy::Separated { .. }) || workers == 1 {
                assert_eq!(reads, pages, "{what}: each page read once");
            } else {
                // A shared pool may evict a page read ahead for a worker that is off the CPU
                // (more workers than cores) before it is used; it is then read again.
                assert!(reads >= pages, "{what}: {reads} reads of {pages} pages");
            }
            db.close().unwrap();
        }
    }
    // Another segment and date give another answer, equal to the reference too.
    let other = Q3Params { segment: "MACHINERY".into(), date: "1995-03-01".into() };
    let db =
        Database::open_with_storage(storage, options(BufferPolicy::Separated { partitions: 2 }, 64)).unwrap();
    let got = tpch::q3(&db, &other, 2, 4).unwrap().top;
    assert_eq!(got, tpch::q3_reference(SF, &other).unwrap());
    assert_ne!(got, reference);
}

/// One recorded read: (device, offset, length).
type Read = (String, u64, usize);

/// Records every read while on, in order per thread.
#[derive(Default)]
struct Recorder {
    on: AtomicBool,
    reads: Mutex<HashMap<std::thread::ThreadId, Vec<Read>>>,
}

impl IoHook for Recorder {
    fn before(&self, device: &str, op: IoOpKind, offset: u64, len: usize) -> IoResult<()> {
        if op == IoOpKind::Read && self.on.load(Ordering::Relaxed) {
            let mut m = self.reads.lock().unwrap();
            m.entry(std::thread::current().id()).or_default().push((device.to_string(), offset, len));
        }
        Ok(())
    }
}

impl Recorder {
    /// The recorded per-thread read sequences of `files` (sorted, thread ids dropped), and
    /// clears the record.
    fn take(&self, files: &[String]) -> Vec<Vec<Read>> {
        let mut m = self.reads.lock().unwrap();
        let mut seqs: Vec<Vec<_>> = m
            .drain()
            .map(|(_, v)| v.into_iter().filter(|(d, _, _)| files.contains(d)).collect::<Vec<_>>())
            .filter(|v| !v.is_empty())
            .collect();
        seqs.sort();
        seqs
    }
}

#[test]
fn the_limit_probe_reads_exactly_the_pages_the_scans_read() {
    use nvmedb_lab::experiments::tpch::{replay_scan_pattern, ScanFile, ScanPattern};
    let mem: Arc<dyn Storage> = Arc::new(MemStorage::new());
    let db = Database::open_with_storage(mem.clone(), options(BufferPolicy::Shared { stripes: 16 }, 4096))
        .unwrap();
    tpch::load(&db, SF, 2, false).unwrap();
    db.close().unwrap();
    let rec = Arc::new(Recorder::default());
    let storage: Arc<dyn Storage> = Arc::new(HookedStorage::new(mem, rec.clone()));
    for (workers, batch) in [(1usize, 8u64), (3, 4), (4, 8)] {
        let db = Database::open_with_storage(
            storage.clone(),
            options(BufferPolicy::Separated { partitions: workers }, 64 * workers as u64),
        )
        .unwrap();
        let files: Vec<ScanFile> = tpch::TABLES
            .iter()
            .map(|name| {
                let t = db.table(name).unwrap();
                ScanFile {
                    table: name.to_string(),
                    file: nvmedb::db::heap_name(t.id()),
                    pages: t.heap_pages().unwrap(),
                }
            })
            .collect();
        let names: Vec<String> = files.iter().map(|f| f.file.clone()).collect();
        let pattern = ScanPattern { files, page_size: 8192, workers, batch };
        rec.on.store(true, Ordering::Relaxed);
        tpch::q3(&db, &Q3Params::default(), workers, batch).unwrap();
        rec.on.store(false, Ordering::Relaxed);
        let scans = rec.take(&names);
        db.close().unwrap();
        rec.on.store(true, Ordering::Relaxed);
        let r = replay_scan_pattern(&*storage, &pattern, 2).unwrap();
        rec.on.store(false, Ordering::Relaxed);
        let probe = rec.take(&names);
        let what = format!("{workers} workers, batches of {batch}");
        assert_eq!(r.pages, 2 * pattern.pages(), "{what}");
        // Per file, the time from the workers' meeting before it to the one after it: the
        // three add up to the replay's wall time, less only the threads' start.
        assert_eq!(r.file_iops.len(), 3, "{what}");
        let file_s: f64 =
            pattern.files.iter().zip(&r.file_iops).map(|(f, &v)| 2.0 * f.pages as f64 / v).sum();
        assert!(file_s > 0.0 && file_s <= r.seconds, "{what}: files {file_s} s of {} s", r.seconds);
        assert_eq!(scans.len(), workers, "{what}: one reading thread per worker");
        let twice: Vec<Vec<_>> = scans.iter().map(|s| [s.clone(), s.clone()].concat()).collect();
        assert_eq!(probe, twice, "{what}: two passes of the scans' reads, thread by thread, in order");
        let total: usize = scans.iter().map(Vec::len).sum();
        assert_eq!(total as u64, pattern.pages(), "{what}: every page once");
        // fio's job file names the same partitions: per file, the workers' slices in order.
        let job = pattern.fio_job(std::path::Path::new("/db"), 1);
        for (fi, f) in pattern.files.iter().enumerate() {
            for w in 0..workers {
                let part = pattern.part(fi, w);
                let section = format!(
                    "[{}-w{w}]\nfilename=/db/{}\noffset={}\nsize={}\n",
                    f.table,
                    f.file,
                    part.start * 8192,
                    (part.end - part.start) * 8192
                );
                assert_eq!(job.contains(&section), !part.is_empty(), "{what}: {section}");
            }
        }
        assert_eq!(job.matches("stonewall").count(), 2, "{what}: the files one after another");
    }
}

#[test]
fn lab_tpch_runs_end_to_end_and_reuses_its_load() {
    use nvmedb_lab::experiment::{self, RunOptions};
    use nvmedb_lab::experiments::tpch::{TpchBench, TpchConfig};
    let dir = std::env::temp_dir().join(format!("nvmedb-tpch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cfg = TpchConfig {
        data_dir: dir.join("data"),
        sf: SF,
        page_size: 8192,
        workers: vec![1, 2],
        read_ahead: 4,
        policies: vec!["shr-1".into(), "sep".into()],
        devices: vec!["disk".into(), "optane-x2".into()],
        reps: 1,
        probe_passes: 1,
        use_fio: false,
        ..TpchConfig::default()
    };
    let opts = RunOptions { results_root: dir.join("results"), progress: false };
    let out = experiment::run::<TpchBench>(&cfg, &opts).expect("lab tpch");
    let r = &out.results;
    assert!(!r.load.reused);
    assert_eq!(r.load.rows, tpch::cardinalities(SF));
    assert_eq!(r.answer, tpch::q3_reference(SF, &Q3Params::default()).unwrap());
    assert_eq!(r.points.len(), 2 * 2 * 2, "devices x policies x workers");
    for p in &r.points {
        assert!(p.pages_per_s.median > 0.0 && p.limit_iops > 0.0, "{p:?}");
        assert!(
            p.phase_pages_per_s.iter().chain(&p.phase_limit_iops).chain(&p.phase_cpu_cores).all(|&v| v > 0.0),
            "{p:?}"
        );
        assert_eq!(p.kind, if p.device == "disk" { "REAL" } else { "EMULATED" });
        if p.policy == "SEP" || p.workers == 1 {
            assert_eq!(p.reads_per_page, 1.0, "{p:?}");
        }
    }
    assert!(r.device_labels.iter().any(|(_, l)| l.contains("EMULATED") && l.contains("µs")));
    for f in
        ["points.csv", "ratios.csv", "limits.csv", "iops_disk.png", "time_optane_x2.svg", "ratio_disk.png"]
    {
        assert!(out.dir.join(f).exists(), "{f}");
    }
    assert!(out.summary.text.contains("% of the device limit"));
    assert!(out.summary.text.contains("per phase"), "{}", out.summary.text);
    assert!(out.dir.join("share_disk.png").exists());
    assert_eq!(r.limits.len(), 2 * 2, "a limit probe per device and worker count and repetition");
    // Each probe kept the better of batches of the read-ahead and of half of it.
    for l in &r.limits {
        assert!([cfg.read_ahead, cfg.read_ahead / 2].contains(&l.engine_batch), "{l:?}");
        assert!(l.fio_batch == 0 || [cfg.read_ahead, cfg.read_ahead / 2].contains(&l.fio_batch), "{l:?}");
        assert_eq!(l.fio_iops.is_some(), l.fio_batch > 0, "{l:?}");
    }
    // fio replays the same pattern on the disk's files and reads exactly its bytes.
    if nvmedb_lab::measure::fio::installed() {
        use nvmedb_lab::experiments::tpch::{fio_scan_pattern, ScanPattern};
        let pattern =
            ScanPattern { files: r.load.files.clone(), page_size: 8192, workers: 2, batch: cfg.read_ahead };
        let f = fio_scan_pattern(&pattern, &r.load.dir, 2, &dir).expect("fio ran the scan pattern");
        assert_eq!(f.pages, 2 * pattern.pages());
        assert!(f.iops > 0.0);
    }
    // A second run finds the loaded database and reuses it.
    let again = TpchConfig { devices: vec!["disk".into()], workers: vec![2], ..cfg };
    let out = experiment::run::<TpchBench>(&again, &opts).expect("second run");
    assert!(out.results.load.reused);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The reference evaluation itself against the TPC-H answer set shipped with tpchgen (SF 1,
/// validation parameters). Generates 6 million lineitems: run with `--ignored`.
#[test]
#[ignore]
fn the_reference_reproduces_the_official_sf1_answer() {
    let got: Vec<String> =
        tpch::q3_reference(1.0, &Q3Params::default()).unwrap().iter().map(|r| r.line()).collect();
    let want: Vec<String> = tpchgen::q_and_a::answers_sf1::Q3_ANSWER
        .lines()
        .skip(2)
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('|').map(str::trim).collect();
            format!("{}|{}|{}|{}", f[0], f[1], f[2], f[3])
        })
        .collect();
    assert_eq!(got, want);
}
