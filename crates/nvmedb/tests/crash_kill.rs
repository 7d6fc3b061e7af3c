//! The kill -9 harness: a child process runs the crash workload (`support::workload`:
//! multi-table transactions inserting, updating and deleting rows of 16 B–3 KiB under
//! secondary indexes, counters shared by all clients so that transactions deadlock and retry)
//! from 2–4 threads against a database on real O_DIRECT files with a buffer of a few frames
//! (dirty pages are evicted constantly), printing every commit it was told succeeded. The
//! parent kills it with SIGKILL after a random number of acknowledgements, reopens the
//! database (recovery) and checks integrity (every heap row has exactly its index entries and
//! vice versa), every acknowledged commit, and that every table holds exactly what the
//! committed transactions wrote (so each transaction is all or nothing).
//!
//! It runs once per log kind: the file log (commit = fdatasync; the default single log and,
//! on alternate databases, the log duplexed into a mirror directory) and the fast log (commit =
//! the credit counter of a tmpfs ring, which survives kill -9). The database of a run is
//! replaced every [`EPOCH`] kills, so each one recovers from several kills in a row while the
//! tables stay small.
//!
//! Iterations per log kind: `NVMEDB_TEST_ITERS` (default 12); seed: `NVMEDB_TEST_SEED`.

mod support;

use nvmedb::util::sync::MutexExt;
use nvmedb::util::Rng;
use nvmedb::xlog::XLogOpener;
use nvmedb::{BufferSize, Database, FastLogOptions, LogKind, Options};
use std::collections::BTreeMap;
use support::workload;
use support::{kill, TmpDir};

/// Kills per database.
const EPOCH: u64 = 8;
/// Clients a child runs at most.
const MAX_THREADS: u64 = 4;

/// The log of each run: `"file"` (single), `"duplexed"` (the file log with a mirror in
/// `<dir>/wal-mirror`, configured explicitly) or `"fast"` (a small ring and conventional ring, so the
/// conventional ring wraps and checkpoints are forced by retention during the run; large enough
/// that a transaction waiting a second for a lock does not pin more log than the ring holds).
fn log_kind(name: &str) -> LogKind {
    match name {
        "fast" => LogKind::Fast(FastLogOptions {
            ring_bytes: 256 << 10,
            queue_bytes: 32 << 10,
            conv_pages: 2048,
            ..FastLogOptions::default()
        }),
        _ => LogKind::File,
    }
}

fn options(log: &str, dir: &std::path::Path) -> Options {
    Options {
        log: log_kind(log),
        log_mirror_dir: (log == "duplexed").then(|| dir.join("wal-mirror")),
        table_page_size: 4096,
        index_page_size: 4096,
        table_buffer: BufferSize::Bytes(16 * 4096),
        index_buffer: BufferSize::Bytes(24 * 4096),
        pin_indexes: false,
        // Checkpoints by log volume happen during the run, so kills land inside them too.
        wal_options: nvmedb::wal::WalOptions { checkpoint_after_bytes: 256 << 10, ..Default::default() },
        ..Options::default()
    }
}

fn env(key: &str) -> u64 {
    std::env::var(key).ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("child needs {key}"))
}

/// Child mode: runs the workload's clients until killed.
#[test]
fn kill9_child_entry() {
    let Some(dir) = kill::child_role() else { return };
    let log = std::env::var("NVMEDB_KILL_LOG").unwrap_or_default();
    let (seed, threads) = (env("NVMEDB_KILL_WORKLOAD_SEED"), env("NVMEDB_KILL_THREADS"));
    let db = Database::open(&dir, options(&log, dir.as_ref())).expect("child opens the database");
    workload::run_clients(&db, seed, threads, None);
}

#[test]
fn kill9_loses_no_acknowledged_commit() {
    run_kill9("file");
}

#[test]
fn kill9_fast_log_loses_no_acknowledged_commit() {
    run_kill9("fast");
}

/// The two log kinds run one after the other: a child spawned by one run (fork, then exec)
/// briefly holds a copy of every file descriptor of this process, including the fast log's
/// locked ring while the other run verifies, which would make that run's next child find the
/// ring locked.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn run_kill9(log: &str) {
    let _one_at_a_time = SERIAL.locked();
    let iters = support::iters(12);
    let seed = support::seed(7);
    let test = if log == "fast" {
        "kill9_fast_log_loses_no_acknowledged_commit"
    } else {
        "kill9_loses_no_acknowledged_commit"
    };
    let mut rng = Rng::new(seed ^ u64::from(log == "fast"));
    let mut db_dir: Option<TmpDir> = None;
    let mut workload_seed = 0;
    // The file log runs single on even databases and duplexed on odd ones.
    let mut kind = log;
    let mut committed: BTreeMap<u64, u64> = BTreeMap::new();
    let (mut total_acks, mut total_commits, mut retried) = (0u64, 0u64, 0u64);
    let drop_dir = |d: Option<TmpDir>| {
        if let Some(d) = d {
            let _ = std::fs::remove_file(XLogOpener::default_ring_path(d.path()));
        }
    };
    for iter in 0..iters {
        if iter % EPOCH == 0 {
            drop_dir(db_dir.take());
            kind = if log == "file" && (iter / EPOCH) % 2 == 1 { "duplexed" } else { log };
            let dir = TmpDir::new(&format!("kill9-{kind}"));
            workload_seed = rng.next_u64() % 1_000_000;
            let db = Database::open(dir.path(), options(kind, dir.path())).unwrap();
            workload::create(&db).unwrap();
            db.close().unwrap();
            committed.clear();
            db_dir = Some(dir);
        }
        let dir = db_dir.as_ref().expect("a database").path();
        let ctx = format!(
            "{kind} log, iteration {iter} ({} cargo test -p nvmedb --test crash_kill -- {test})",
            support::replay(seed, iter + 1)
        );
        let threads = rng.range(2, MAX_THREADS + 1);
        let kill_after = rng.range(1, 120);
        let child = kill::spawn(
            "kill9_child_entry",
            dir.to_str().expect("utf-8 path"),
            &[
                ("NVMEDB_KILL_LOG", kind.to_string()),
                ("NVMEDB_KILL_WORKLOAD_SEED", workload_seed.to_string()),
                ("NVMEDB_KILL_THREADS", threads.to_string()),
            ],
        );
        let mut acks = workload::Acks::default();
        child.kill_after(kill_after, |line| acks.note(line)).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert!(acks.n > 0, "{ctx}: the child acknowledged nothing");
        total_acks += acks.n;
        let bounds = acks.bounds(&committed, MAX_THREADS, threads);
        // Recovery and the checks run with a roomy buffer (the child's is tiny on purpose).
        let roomy = Options {
            table_buffer: BufferSize::Bytes(64 << 20),
            index_buffer: BufferSize::Bytes(64 << 20),
            ..options(kind, dir)
        };
        let db = Database::open(dir, roomy).unwrap_or_else(|e| panic!("{ctx}: recovery failed: {e}"));
        // The file log is single unless a mirror is configured; duplexed, both copies hold it.
        let mirrored = std::fs::read_dir(dir.join("wal-mirror")).is_ok_and(|mut d| d.next().is_some());
        if kind != "fast" {
            assert_eq!(mirrored, kind == "duplexed", "{ctx}: log mirror files present: {mirrored}");
        }
        let rep = db.recovery_report().clone();
        if std::env::var("NVMEDB_KILL_DEBUG").is_ok() {
            eprintln!(
                "{ctx}: threads {threads}, acked {:?}, before {committed:?}, recovery {rep:?}",
                acks.acked
            );
        }
        let now = workload::verify(&db, workload_seed, &bounds).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        db.close().unwrap();
        total_commits += now.iter().map(|(c, n)| n - committed.get(c).copied().unwrap_or(0)).sum::<u64>();
        retried += rep.losers;
        committed = now;
        if (iter + 1) % 25 == 0 {
            eprintln!(
                "kill -9 ({log} log): {} iterations, {total_acks} acknowledged commits verified so far",
                iter + 1
            );
        }
    }
    drop_dir(db_dir.take());
    eprintln!(
        "kill -9 ({log} log): {iters} iterations, {total_acks} acknowledged commits (of {total_commits} committed), \
         0 lost, 0 integrity failures; {retried} unfinished transactions rolled back by recovery \
         ({})",
        support::replay(seed, iters)
    );
}
