//! Failover under kill -9: a child process is the primary, replicating over loopback to
//! standbys that live in this (the parent) process. The child runs transactions from several
//! threads (insert a row into `acks`, update a row of `t` to the same id) and prints every
//! commit it was told succeeded. The parent kills it with SIGKILL at a random moment, promotes
//! a standby, and checks:
//! - eager, quorum and eager with data-page mirroring: every acknowledged commit is on the
//!   promoted standby;
//! - always: no transaction is half there (each `t` row holds an id whose `acks` row exists),
//!   and the tables' indexes agree with their rows;
//! - lazy: counts and prints the acknowledged commits that were lost (may be non-zero).
//!
//! Iterations: `NVMEDB_TEST_ITERS` (default 20 per mode); seed: `NVMEDB_TEST_SEED`.

mod support;

use nvmedb::repl::{
    open_primary, parse_mode, seed_standby, MirrorConfig, ReplConfig, Standby, StandbyConfig, StandbyPolicy,
};
use nvmedb::util::Rng;
use nvmedb::{BufferSize, ColumnType, Database, Options, Schema, Value};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::kill;

const ROWS: i64 = 100;
const SECRET: &[u8] = b"failover-secret";

fn options() -> Options {
    Options {
        table_page_size: 4096,
        index_page_size: 4096,
        table_buffer: BufferSize::Bytes(8 * 4096),
        index_buffer: BufferSize::Bytes(16 * 4096),
        pin_indexes: false,
        ..Options::default()
    }
}

fn roomy() -> Options {
    Options {
        table_buffer: BufferSize::Bytes(32 << 20),
        index_buffer: BufferSize::Bytes(32 << 20),
        ..options()
    }
}

/// Child mode: the primary, running transactions until killed.
#[test]
fn failover_child_entry() {
    let Some(dir) = kill::child_role() else { return };
    let addrs: Vec<String> =
        std::env::var("NVMEDB_FAILOVER_ADDRS").unwrap().split(',').map(String::from).collect();
    let mode_name = std::env::var("NVMEDB_FAILOVER_MODE").unwrap();
    let mirror = mode_name == "mirror";
    let mode = if mirror { parse_mode("eager").unwrap() } else { parse_mode(&mode_name).unwrap() };
    let seed: u64 = std::env::var("NVMEDB_FAILOVER_CHILD_SEED").unwrap().parse().unwrap();
    let cfg = ReplConfig {
        standbys: addrs,
        secret: SECRET.to_vec(),
        mode,
        policy: StandbyPolicy::Fail { timeout: Duration::from_secs(60) },
        ..ReplConfig::default()
    };
    let m = mirror.then(|| MirrorConfig { addr: cfg.standbys[0].clone(), secret: SECRET.to_vec(), epoch: 1 });
    let (db, _log) = open_primary(Path::new(&dir), options(), cfg, m).expect("child opens the primary");
    let t = db.table("t").unwrap();
    let acks = db.table("acks").unwrap();
    let out = std::sync::Mutex::new(std::io::stdout());
    std::thread::scope(|s| {
        for th in 0..4i64 {
            let (db, t, acks, out) = (&db, &t, &acks, &out);
            s.spawn(move || {
                let mut rng = Rng::new(seed * 10 + th as u64);
                for seq in 0.. {
                    let id = th * 1_000_000_000 + seq;
                    let k = rng.below(ROWS as u64) as i64;
                    loop {
                        let mut tx = db.begin();
                        let r = (|| -> nvmedb::Result<()> {
                            tx.insert(acks, &[Value::Int(id), Value::Int(k)])?;
                            tx.update_int(t, &Value::Int(k), 1, id)?;
                            Ok(())
                        })();
                        match r {
                            Ok(()) => {
                                tx.commit().expect("commit");
                                use std::io::Write;
                                let mut o = out.lock().unwrap();
                                writeln!(o, "ACK {id}").unwrap();
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

fn tmp(name: &str) -> support::TmpDir {
    support::TmpDir::path_only(&format!("failover-{name}"))
}

fn create_primary(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    let db = Database::open(dir, options()).unwrap();
    let t = db
        .create_table(
            "t",
            Schema::new(vec![
                ("sid", ColumnType::Int),
                ("c1", ColumnType::Int),
                ("data", ColumnType::Char(300)),
            ]),
        )
        .unwrap();
    db.create_table(
        "acks",
        Schema::new(vec![("id", ColumnType::Int), ("k", ColumnType::Int)]).with_index("by_k", "k").unwrap(),
    )
    .unwrap();
    for i in 0..ROWS {
        t.insert(&[Value::Int(i), Value::Int(-1), Value::from("x")]).unwrap();
    }
    db.close().unwrap();
}

/// Checks the promoted database; returns how many acknowledged commits are missing.
fn verify(db: &Database, acked: &BTreeSet<i64>, ctx: &str) -> usize {
    let t = db.table("t").unwrap();
    let acks = db.table("acks").unwrap();
    t.check_integrity().unwrap_or_else(|e| panic!("{ctx}: t: {e}"));
    acks.check_integrity().unwrap_or_else(|e| panic!("{ctx}: acks: {e}"));
    let mut present = BTreeSet::new();
    acks.scan(|r| {
        present.insert(r.int(0));
        Ok(true)
    })
    .unwrap();
    for k in 0..ROWS {
        let v =
            t.read(&Value::Int(k), |r| r.int(1)).unwrap().unwrap_or_else(|| panic!("{ctx}: row {k} gone"));
        assert!(
            v == -1 || present.contains(&v),
            "{ctx}: row {k} holds id {v} whose transaction is not there (half a transaction)"
        );
    }
    acked.difference(&present).count()
}

/// Runs `iters` kill-and-promote rounds in `mode` with `n` standbys; returns (acknowledged,
/// lost) summed over the rounds.
fn rounds(mode: &str, n: usize, iters: u64, seed: u64) -> (usize, usize) {
    let mut rng = Rng::new(seed);
    let (mut total_acked, mut total_lost) = (0, 0);
    for iter in 0..iters {
        let ctx = format!(
            "{mode} iteration {iter} ({} cargo test -p nvmedb --test repl_failover)",
            support::replay(seed, iter + 1)
        );
        let p_dir = tmp(&format!("{mode}-p"));
        let p = p_dir.path().to_path_buf();
        create_primary(&p);
        let dir_guards: Vec<support::TmpDir> = (0..n).map(|i| tmp(&format!("{mode}-s{i}"))).collect();
        let dirs: Vec<PathBuf> = dir_guards.iter().map(|d| d.path().to_path_buf()).collect();
        let standbys: Vec<Standby> = dirs
            .iter()
            .map(|d| {
                seed_standby(&p, d).unwrap();
                Standby::start(StandbyConfig {
                    listen: "127.0.0.1:0".into(),
                    data_dir: d.clone(),
                    secret: SECRET.to_vec(),
                    apply: mode != "mirror",
                    options: roomy(),
                })
                .unwrap()
            })
            .collect();
        let addrs: Vec<String> = standbys.iter().map(|s| s.addr().to_string()).collect();
        let child = kill::spawn(
            "failover_child_entry",
            p.to_str().expect("utf-8 path"),
            &[
                ("NVMEDB_FAILOVER_ADDRS", addrs.join(",")),
                ("NVMEDB_FAILOVER_MODE", mode.to_string()),
                ("NVMEDB_FAILOVER_CHILD_SEED", (seed * 1000 + iter).to_string()),
            ],
        );
        let kill_after = rng.range(1, 400) as usize;
        let mut acked = BTreeSet::new();
        let note = |line: &str| {
            if let Some(h) = line.strip_prefix("ACK ") {
                acked.insert(h.parse::<i64>().unwrap());
            }
            acked.len()
        };
        // Acknowledgements still in the pipe at the kill count too.
        child.kill_after(kill_after, note).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert!(!acked.is_empty(), "{ctx}: the child acknowledged nothing");
        // Promote the standby that holds the most (for quorum, the one the quorum guarantees).
        let best = (0..n).max_by_key(|&i| standbys[i].position()).unwrap();
        let (db, rep) = standbys[best].promote().unwrap_or_else(|e| panic!("{ctx}: promotion failed: {e}"));
        assert_eq!(rep.epoch, 2, "{ctx}");
        let lost = verify(&db, &acked, &ctx);
        if mode != "lazy" {
            assert_eq!(
                lost,
                0,
                "{ctx}: {lost} of {} acknowledged commits missing after failover",
                acked.len()
            );
        }
        total_acked += acked.len();
        total_lost += lost;
        drop(db);
        drop(standbys);
        drop((p_dir, dir_guards));
    }
    (total_acked, total_lost)
}

fn iters() -> u64 {
    support::iters(20)
}

fn seed() -> u64 {
    support::seed_or_random()
}

#[test]
fn eager_failover_loses_no_acknowledged_commit() {
    let seed = seed();
    let (acked, lost) = rounds("eager", 1, iters(), seed);
    println!("eager: {acked} acknowledged commits over {} failovers, {lost} lost (seed {seed})", iters());
}

#[test]
fn quorum_failover_loses_no_acknowledged_commit() {
    let seed = seed();
    let (acked, lost) = rounds("quorum:1", 2, iters(), seed);
    println!(
        "quorum 1 of 2: {acked} acknowledged commits over {} failovers, {lost} lost (seed {seed})",
        iters()
    );
}

#[test]
fn lazy_failover_loss_is_measured() {
    let seed = seed();
    let n = iters().div_ceil(4);
    // Every round asserts the promoted standby is whole (no half transaction, indexes agree
    // with rows) and that the child acknowledged commits; what lazy mode may lose is counted.
    let (acked, lost) = rounds("lazy", 1, n, seed);
    println!("lazy: {lost} of {acked} acknowledged commits lost over {n} failovers (seed {seed})");
    assert!(acked > 0, "no commit was acknowledged over {n} failovers ({})", support::replay(seed, n));
    assert!(lost <= acked, "{lost} lost of {acked} acknowledged: the count is wrong");
}

#[test]
fn mirrored_failover_loses_no_acknowledged_commit() {
    let seed = seed();
    let n = iters().div_ceil(2);
    let (acked, lost) = rounds("mirror", 1, n, seed);
    println!("eager + data-page mirroring: {acked} acknowledged commits over {n} failovers, {lost} lost (seed {seed})");
}
