//! Seeded random mutation of valid encodings, fed to every decoder that reads bytes from disk
//! or the network (`support::decoders`): no input may panic, hang or allocate without bound.
//! Each decoder gets `NVMEDB_TEST_ITERS` mutated inputs (default: as many as fit half a second,
//! at least 200), from `NVMEDB_TEST_SEED`; a failure prints the seed and input number that
//! replay it. The coverage-guided fuzzer runs the same `feed_*` functions (`fuzz/`).

mod support;

use nvmedb::util::Rng;
use std::time::{Duration, Instant};
use support::decoders::{self as d, mutate};

/// Runs `one(rng, i)` for the iteration budget; a panic names the seed and input that replay it.
fn run(name: &str, default_time: Duration, mut one: impl FnMut(&mut Rng, u64)) {
    let seed = support::seed(1);
    let fixed = std::env::var(support::ITERS_ENV).is_ok();
    let iters = support::iters(u64::MAX);
    let started = Instant::now();
    let mut n = 0;
    while n < iters && (fixed || n < 200 || started.elapsed() < default_time) {
        let case_seed = seed.wrapping_mul(1_000_003).wrapping_add(n);
        let mut rng = Rng::new(case_seed);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| one(&mut rng, n)));
        if r.is_err() {
            panic!(
                "{name}: input {n} panicked ({} cargo test -p nvmedb --test fuzz_decoders)",
                support::replay(seed, n + 1)
            );
        }
        n += 1;
    }
    eprintln!("{name}: {n} mutated inputs in {:.2} s, no panic", started.elapsed().as_secs_f64());
}

const BUDGET: Duration = Duration::from_millis(400);

#[test]
fn catalog() {
    let valid = d::valid_catalog();
    run("catalog", BUDGET, |rng, _| {
        let mut b = valid.clone();
        mutate(rng, &mut b);
        d::feed_catalog(&b);
    });
}

#[test]
fn pages() {
    let valid: Vec<(Vec<u8>, Vec<u8>)> = (0..16).map(d::valid_pages).collect();
    run("pages", BUDGET, |rng, n| {
        let (heap, leaf) = &valid[n as usize % 16];
        let mut b = if rng.chance(0.5) { heap.clone() } else { leaf.clone() };
        mutate(rng, &mut b);
        d::feed_page(&b);
    });
}

#[test]
fn log_page_changes() {
    let valid: Vec<Vec<u8>> = (0..16).map(d::valid_mtr).collect();
    run("log page changes", BUDGET, |rng, n| {
        let mut b = valid[n as usize % 16].clone();
        mutate(rng, &mut b);
        d::feed_mtr(&b);
    });
}

#[test]
fn file_log_segments() {
    let (a, b) = d::valid_file_log(3);
    let total: usize = {
        use nvmedb::io::Storage;
        a.list().unwrap().iter().map(|n| a.open(n, false).unwrap().capacity() as usize).sum()
    };
    run("file log segments", BUDGET, |rng, _| {
        let (a2, b2) = (support::snapshot(a.as_ref()), support::snapshot(b.as_ref()));
        // Damage one copy or both, at the same place or not.
        for (copy, other) in [(&a2, false), (&b2, true)] {
            if other && rng.chance(0.5) {
                continue;
            }
            let at = rng.below(total as u64) as usize;
            let mut bytes = vec![0u8; rng.range(1, 64) as usize];
            rng.fill(&mut bytes);
            if rng.chance(0.3) {
                // Plausible values in a record header: lengths, LSNs, kinds.
                let k = bytes.len().min(4);
                bytes[..k].copy_from_slice(&u32::MAX.to_le_bytes()[..k]);
            }
            d::overwrite(copy.as_ref(), at, &bytes);
        }
        d::feed_file_log(a2, b2);
    });
}

#[test]
fn replication_frames() {
    run("replication frames", BUDGET, |rng, n| {
        let mut b = d::valid_frames(n);
        mutate(rng, &mut b);
        d::feed_frames(&b);
    });
}

/// The fast log's record log reopened over a damaged conventional ring and metadata.
#[test]
fn fast_log_ring_and_metadata() {
    use nvmedb::io::{MemStorage, Storage};
    use nvmedb::wal::RecordLog;
    use nvmedb::xlog::{XLogConfig, XRecordLog};
    use std::sync::Arc;
    let ring = support::TmpDir::on_tmpfs("fuzz-xlog");
    let cfg = || {
        let mut c = XLogConfig::new(ring.path());
        c.ring_bytes = 64 << 10;
        c.queue_bytes = 8 << 10;
        c.conv_pages = 128;
        c.destage_batch_pages = 4;
        c.destage_latency = Duration::from_micros(100);
        c
    };
    let storage = Arc::new(MemStorage::new());
    {
        let log = XRecordLog::open(storage.clone(), cfg(), 1000).expect("open");
        let mut rng = Rng::new(5);
        for i in 0..60u64 {
            let (_, end) = log
                .append_record(nvmedb::wal::KIND_USER_MIN, &vec![i as u8; rng.below(2000) as usize])
                .unwrap();
            log.wait_durable(end).unwrap();
        }
    }
    let ring_image = std::fs::read(ring.path()).unwrap();
    let total: usize =
        storage.list().unwrap().iter().map(|n| storage.open(n, false).unwrap().capacity() as usize).sum();
    run("fast log", BUDGET, |rng, _| {
        let s = support::snapshot(storage.as_ref());
        let mut bytes = vec![0u8; rng.range(1, 48) as usize];
        rng.fill(&mut bytes);
        d::overwrite(s.as_ref(), rng.below(total as u64) as usize, &bytes);
        let mut ring_bytes = ring_image.clone();
        if rng.chance(0.5) {
            let at = rng.below(ring_bytes.len() as u64) as usize;
            ring_bytes[at] ^= 1 << rng.below(8);
        }
        std::fs::write(ring.path(), &ring_bytes).unwrap();
        if let Ok(log) = XRecordLog::open(s, cfg(), 0) {
            let start = log.recovered().start_lsn;
            if let Ok(mut r) = log.reader(start) {
                for _ in 0..10_000 {
                    match r.next_record() {
                        Ok(Some(_)) => {}
                        _ => break,
                    }
                }
            }
        }
    });
}
