//! The kill -9 harness: a child process runs TPC-B-like transfers (two balance updates and a
//! history row per transaction) from several threads against a database on real O_DIRECT
//! files with a buffer of a few frames (dirty pages are evicted constantly), printing every
//! commit it was told succeeded. The parent kills it with SIGKILL at a random moment, reopens
//! the database (recovery), and checks: every acknowledged transfer is present, nothing
//! unacknowledged is half-there (each account's balance is its initial balance plus the
//! history rows that touch it), money is conserved, and every index agrees with its table.
//!
//! It runs once per log kind: the duplexed file log (commit = fdatasync) and the fast log
//! (commit = the credit counter of a tmpfs ring, which survives kill -9).
//!
//! Iterations: `NVMEDB_KILL_ITERS` (default 20 per log kind); seed: `NVMEDB_KILL_SEED`.

use nvmedb::util::Rng;
use nvmedb::xlog::XLogOpener;
use nvmedb::{BufferSize, ColumnType, Database, FastLogOptions, LogKind, Options, Schema, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

const ACCOUNTS: i64 = 200;
const INITIAL: i64 = 1000;
const CHILD_ENV: &str = "NVMEDB_KILL_CHILD_DIR";
const CHILD_LOG_ENV: &str = "NVMEDB_KILL_CHILD_LOG";

/// The log of each run: `"file"` or `"fast"` (a small ring and conventional ring, so the
/// conventional ring wraps and checkpoints are forced by retention during the run).
fn log_kind(name: &str) -> LogKind {
    match name {
        "fast" => LogKind::Fast(FastLogOptions {
            ring_bytes: 256 << 10,
            queue_bytes: 32 << 10,
            conv_pages: 320,
            ..FastLogOptions::default()
        }),
        _ => LogKind::Duplexed,
    }
}

fn options(log: &str) -> Options {
    Options {
        log: log_kind(log),
        table_page_size: 4096,
        index_page_size: 4096,
        table_buffer: BufferSize::Bytes(8 * 4096),
        index_buffer: BufferSize::Bytes(12 * 4096),
        pin_indexes: false,
        // Checkpoints by log volume happen during the run, so kills land inside them too.
        wal_options: nvmedb::wal::WalOptions { checkpoint_after_bytes: 128 << 10, ..Default::default() },
        ..Options::default()
    }
}

fn accounts_schema() -> Schema {
    Schema::new(vec![
        ("id", ColumnType::Int),
        ("balance", ColumnType::Int),
        ("filler", ColumnType::Char(300)),
    ])
    .with_index("by_balance", "balance")
    .unwrap()
}

fn history_schema() -> Schema {
    Schema::new(vec![
        ("hid", ColumnType::Int),
        ("src", ColumnType::Int),
        ("dst", ColumnType::Int),
        ("amount", ColumnType::Int),
    ])
    .with_index("by_src", "src")
    .unwrap()
}

/// Child mode: runs transfers until killed.
#[test]
fn kill9_child_entry() {
    let Ok(dir) = std::env::var(CHILD_ENV) else { return };
    let seed: u64 = std::env::var("NVMEDB_KILL_CHILD_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let log = std::env::var(CHILD_LOG_ENV).unwrap_or_default();
    let db = Database::open(&dir, options(&log)).expect("child opens the database");
    let acct = db.table("accounts").unwrap();
    let hist = db.table("history").unwrap();
    let out = std::sync::Mutex::new(std::io::stdout());
    std::thread::scope(|s| {
        for th in 0..4u64 {
            let (db, acct, hist, out) = (&db, &acct, &hist, &out);
            s.spawn(move || {
                let mut rng = Rng::new(seed * 100 + th);
                for seq in 0.. {
                    let hid = ((seed as i64 % 1000) * 1_000_000_000) + th as i64 * 100_000_000 + seq;
                    let a = rng.below(ACCOUNTS as u64) as i64;
                    let b = (a + 1 + rng.below(ACCOUNTS as u64 - 1) as i64) % ACCOUNTS;
                    let amount = 1 + rng.below(100) as i64;
                    loop {
                        let mut tx = db.begin();
                        let r = (|| -> nvmedb::Result<()> {
                            let (x, y) = if a < b { (a, b) } else { (b, a) };
                            let rx = tx.get_for_update(acct, &Value::Int(x))?.expect("account");
                            let ry = tx.get_for_update(acct, &Value::Int(y))?.expect("account");
                            let (ra, rb) = if a < b { (rx, ry) } else { (ry, rx) };
                            let mut ra = ra;
                            let mut rb = rb;
                            ra[1] = Value::Int(ra[1].as_int().unwrap() - amount);
                            rb[1] = Value::Int(rb[1].as_int().unwrap() + amount);
                            tx.update(acct, &ra)?;
                            tx.update(acct, &rb)?;
                            tx.insert(
                                hist,
                                &[Value::Int(hid), Value::Int(a), Value::Int(b), Value::Int(amount)],
                            )?;
                            Ok(())
                        })();
                        match r {
                            Ok(()) => {
                                tx.commit().expect("commit");
                                use std::io::Write;
                                let mut o = out.lock().unwrap();
                                writeln!(o, "ACK {hid}").unwrap();
                                o.flush().unwrap();
                                break;
                            }
                            Err(e) if e.is_retryable() => tx.abort().expect("abort"),
                            Err(e) => panic!("child: {e}"),
                        }
                    }
                }
            });
        }
    });
}

fn verify(dir: &std::path::Path, log: &str, acked: &BTreeSet<i64>, ctx: &str) -> usize {
    // Recovery and the checks run with a roomy buffer (the child's is tiny on purpose): the
    // history grows with every iteration and the checks look up every row.
    let roomy = Options {
        table_buffer: BufferSize::Bytes(64 << 20),
        index_buffer: BufferSize::Bytes(64 << 20),
        ..options(log)
    };
    let db = Database::open(dir, roomy).unwrap_or_else(|e| panic!("{ctx}: recovery failed: {e}"));
    let acct = db.table("accounts").unwrap();
    let hist = db.table("history").unwrap();
    acct.check_integrity().unwrap_or_else(|e| panic!("{ctx}: accounts: {e}"));
    let transfers = hist.check_integrity().unwrap_or_else(|e| panic!("{ctx}: history: {e}"));
    let mut delta: BTreeMap<i64, i64> = BTreeMap::new();
    let mut present = BTreeSet::new();
    hist.scan(|r| {
        present.insert(r.int(0));
        *delta.entry(r.int(1)).or_default() -= r.int(3);
        *delta.entry(r.int(2)).or_default() += r.int(3);
        Ok(true)
    })
    .unwrap();
    let missing: Vec<_> = acked.difference(&present).take(5).collect();
    assert!(missing.is_empty(), "{ctx}: acknowledged transfers lost, e.g. {missing:?}");
    let mut total = 0;
    for id in 0..ACCOUNTS {
        let bal = acct
            .read(&Value::Int(id), |r| r.int(1))
            .unwrap()
            .unwrap_or_else(|| panic!("{ctx}: account {id} gone"));
        assert_eq!(
            bal,
            INITIAL + delta.get(&id).copied().unwrap_or(0),
            "{ctx}: account {id} disagrees with history"
        );
        total += bal;
    }
    assert_eq!(total, ACCOUNTS * INITIAL, "{ctx}: money not conserved");
    db.close().unwrap();
    transfers as usize
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
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let iters: u64 = std::env::var("NVMEDB_KILL_ITERS").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    let seed: u64 = std::env::var("NVMEDB_KILL_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(7);
    let base = std::env::var("CARGO_TARGET_TMPDIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir());
    let dir = base.join(format!("nvmedb-kill9-{log}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let ring = XLogOpener::default_ring_path(&dir);
    {
        let db = Database::open(&dir, options(log)).unwrap();
        let acct = db.create_table("accounts", accounts_schema()).unwrap();
        db.create_table("history", history_schema()).unwrap();
        let mut tx = db.begin();
        for id in 0..ACCOUNTS {
            tx.insert(&acct, &[Value::Int(id), Value::Int(INITIAL), Value::from("x")]).unwrap();
        }
        tx.commit().unwrap();
        db.close().unwrap();
    }
    let mut rng = Rng::new(seed);
    let mut acked = BTreeSet::new();
    let mut total_acks = 0;
    for iter in 0..iters {
        let ctx = format!(
            "{log} log, iteration {iter} (replay: NVMEDB_KILL_SEED={seed} NVMEDB_KILL_ITERS={})",
            iter + 1
        );
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["kill9_child_entry", "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, &dir)
            .env(CHILD_LOG_ENV, log)
            .env("NVMEDB_KILL_CHILD_SEED", (seed * 1000 + iter).to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let kill_after = rng.range(1, 300);
        let mut lines = BufReader::new(stdout).lines();
        let mut n = 0;
        while let Some(Ok(line)) = lines.next() {
            if let Some(h) = line.strip_prefix("ACK ") {
                acked.insert(h.parse::<i64>().unwrap());
                n += 1;
                if n >= kill_after {
                    break;
                }
            }
        }
        child.kill().unwrap(); // SIGKILL
                               // Acknowledgements already in the pipe count too.
        for line in lines.map_while(Result::ok) {
            if let Some(h) = line.strip_prefix("ACK ") {
                acked.insert(h.parse::<i64>().unwrap());
                n += 1;
            }
        }
        child.wait().unwrap();
        assert!(n > 0, "{ctx}: the child acknowledged nothing (did it fail to start?)");
        total_acks += n;
        let present = verify(&dir, log, &acked, &ctx);
        assert!(present >= acked.len(), "{ctx}");
        if (iter + 1) % 25 == 0 {
            eprintln!(
                "kill -9 ({log} log): {} iterations, {total_acks} acknowledged transfers verified so far",
                iter + 1
            );
        }
    }
    eprintln!(
        "kill -9 ({log} log): {iters} iterations, {total_acks} acknowledged transfers, all present after recovery"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&ring);
}
