//! The commit benchmark's measurements: engine commits, the log alone, fio's fdatasync rate and
//! recovery.
//!
//! Owns: [`run`] and the parts it calls. Invariants: a commit counts only when the engine
//! acknowledged it (a retryable lock conflict is retried, any other error fails the run); the
//! recovery part leaves the database without a checkpoint, as a crash would; each log set-up
//! has its own database (`<data_dir>/<set-up>`), loaded the same way.

use super::{CommitConfig, CommitPoint, CommitResults, LogSetup, RecoveryResult};
use crate::error::{LabError, Result};
use crate::experiment::RunEnv;
use crate::measure::{fio, progress, Spread, WindowRun, Workers};
use nvmedb::io::{DirStorage, FileOptions, Storage};
use nvmedb::util::Rng;
use nvmedb::wal::{FileLog, LogSink, WalOptions};
use nvmedb::{BufferSize, ColumnType, Database, Options, Schema, Table, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

fn schema(payload: u32) -> Schema {
    Schema::new(vec![
        ("id", ColumnType::Int),
        ("c1", ColumnType::Int),
        ("payload", ColumnType::Char(payload)),
    ])
}

fn wal_options(setup: &LogSetup) -> WalOptions {
    WalOptions {
        group_commit_wait_us: setup.group_commit_wait_us,
        targeted_wakeups: setup.targeted_wakeups,
        // The recovery part grows the log to a set size without checkpoints.
        checkpoint_after_bytes: 0,
        ..Default::default()
    }
}

/// The database directory of a log set-up.
fn db_dir(cfg: &CommitConfig, setup: &LogSetup) -> PathBuf {
    let name: String = setup.name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    cfg.data_dir.join(format!("db-{name}"))
}

/// Options::default() with the set-up's log changes, 64 MiB buffers and no checkpoints by log
/// volume (the recovery part grows the log to a set size).
fn options(cfg: &CommitConfig, setup: &LogSetup) -> Options {
    Options {
        wal_options: wal_options(setup),
        log_mirror_dir: setup.duplexed.then(|| db_dir(cfg, setup).join("wal-mirror")),
        table_page_size: 16384,
        index_page_size: 4096,
        table_buffer: BufferSize::Bytes(64 << 20),
        index_buffer: BufferSize::Bytes(64 << 20),
        ..Options::default()
    }
}

/// Creates the table of `cfg.rows` rows for `setup` (without a log, then closed).
fn load(cfg: &CommitConfig, setup: &LogSetup) -> Result<()> {
    let dir = db_dir(cfg, setup);
    let db = Database::open(&dir, Options { wal: false, ..options(cfg, setup) })
        .map_err(LabError::engine(format!("creating {}", dir.display())))?;
    let t = db.create_table("bench", schema(100)).map_err(LabError::engine("creating the table"))?;
    for id in 0..cfg.rows {
        t.insert(&[Value::Int(id as i64), Value::Int(0), Value::Bytes(vec![b'x'; 100])])
            .map_err(LabError::engine(format!("loading row {id}")))?;
    }
    db.close().map_err(LabError::engine("closing the loaded database"))
}

/// Points per thread count, filled over the repetitions.
#[derive(Default)]
struct Points(BTreeMap<(String, usize), Samples>);

/// Commits/s of each repetition, then commits per flush, p50 and p99 of the last one.
type Samples = (Vec<f64>, f64, f64, f64);

impl Points {
    fn add<S>(&mut self, log: &str, threads: usize, run: &WindowRun<S>, flushes: u64) {
        let e = self.0.entry((log.to_string(), threads)).or_default();
        e.0.push(run.ops_per_s());
        e.1 = run.ops as f64 / flushes.max(1) as f64;
        e.2 = run.latency.quantile_us(0.5);
        e.3 = run.latency.quantile_us(0.99);
    }

    /// The points, in the order of `logs`, then by thread count.
    fn finish(self, logs: &[LogSetup]) -> Vec<CommitPoint> {
        let mut v: Vec<_> = self.0.into_iter().collect();
        v.sort_by_key(|((log, threads), _)| (logs.iter().position(|l| &l.name == log), *threads));
        v.into_iter()
            .map(|((log, threads), (v, per_flush, p50, p99))| CommitPoint {
                log,
                threads,
                commits_per_s: Spread::of(&v),
                commits_per_flush: per_flush,
                p50_us: p50,
                p99_us: p99,
            })
            .collect()
    }
}

/// `threads` clients updating random rows, each update a durable transaction.
fn engine_commits(
    cfg: &CommitConfig,
    db: &Database,
    t: &Table,
    threads: usize,
    rep: usize,
) -> Result<(WindowRun<Rng>, u64)> {
    let log = db.engine_log().ok_or_else(|| LabError::config("wal", "the database has no log"))?;
    let before = log.record_log().stats();
    let workers = Workers::new(
        format!("{threads} committing clients"),
        threads,
        Duration::ZERO,
        Duration::from_secs_f64(cfg.duration_s),
    )
    .with_latency();
    let run = workers.run(
        |th| Ok(Rng::new((rep * 1000 + th) as u64)),
        |rng, _| {
            let k = rng.below(cfg.rows) as i64;
            match t.update_int(&Value::Int(k), 1, rng.next_u64() as i64) {
                Ok(true) => Ok(1),
                Ok(false) => Err(LabError::MissingRow { table: "bench".into(), key: k.to_string() }),
                Err(e) if e.is_retryable() => Ok(0),
                Err(e) => Err(LabError::engine("a durable update")(e)),
            }
        },
        &mut (),
    )?;
    let flushes = log.record_log().stats().flushes - before.flushes;
    Ok((run, flushes))
}

/// A fresh file log of `setup` in `<data_dir>/log-alone/copy-a` (and `copy-b` when duplexed).
fn fresh_log(cfg: &CommitConfig, setup: &LogSetup) -> Result<FileLog> {
    let dir = cfg.data_dir.join("log-alone");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(LabError::io(&dir, "remove"))?;
    }
    let copy = |c: &str| -> Result<Arc<dyn Storage>> {
        let p = dir.join(c);
        Ok(Arc::new(
            DirStorage::new(&p, FileOptions::default())
                .map_err(LabError::engine(format!("opening {}", p.display())))?,
        ))
    };
    let mut copies = vec![copy("copy-a")?];
    if setup.duplexed {
        copies.push(copy("copy-b")?);
    }
    FileLog::open_copies(copies, wal_options(setup)).map_err(LabError::engine("opening the log alone"))
}

/// `threads` clients appending a record and waiting for it to be durable, on the log alone.
fn log_commits(cfg: &CommitConfig, setup: &LogSetup, threads: usize) -> Result<(WindowRun<Vec<u8>>, u64)> {
    let log = fresh_log(cfg, setup)?;
    let before = log.stats();
    let workers = Workers::new(
        format!("{threads} log clients"),
        threads,
        Duration::from_millis(300),
        Duration::from_secs_f64(cfg.duration_s),
    )
    .with_latency();
    let run = workers.run(
        |th| Ok(vec![th as u8; cfg.log_payload_bytes]),
        |payload, _| {
            let (_, end) = log.append(payload).map_err(LabError::engine("appending to the log"))?;
            log.wait_durable(end).map_err(LabError::engine("waiting for the log"))?;
            Ok(1)
        },
        &mut (),
    )?;
    let flushes = log.stats().flushes - before.flushes;
    log.close().map_err(LabError::engine("closing the log"))?;
    Ok((run, flushes))
}

/// Grows the log by `cfg.recovery_log_bytes` without checkpoints, leaves as a crash would, and
/// times the reopen.
fn recovery(cfg: &CommitConfig, setup: &LogSetup, env: &RunEnv, db: Database) -> Result<RecoveryResult> {
    let log = db.engine_log().ok_or_else(|| LabError::config("wal", "the database has no log"))?;
    let start = log.record_log().end_lsn();
    let pb = progress::bar(env.progress, cfg.recovery_log_bytes >> 20, "log MiB");
    let tb = db.create_table("big", schema(8000)).map_err(LabError::engine("creating the recovery table"))?;
    std::thread::scope(|s| -> Result<()> {
        let hs: Vec<_> = (0..8)
            .map(|th| {
                let (tb, log) = (&tb, &log);
                s.spawn(move || -> Result<()> {
                    let mut i = th as i64;
                    while log.record_log().end_lsn() - start < cfg.recovery_log_bytes {
                        tb.insert(&[Value::Int(i), Value::Int(i), Value::Bytes(vec![(i % 251) as u8; 8000])])
                            .map_err(LabError::engine("growing the log"))?;
                        i += 8;
                    }
                    Ok(())
                })
            })
            .collect();
        while hs.iter().any(|h| !h.is_finished()) {
            pb.set_position((log.record_log().end_lsn() - start) >> 20);
            std::thread::sleep(Duration::from_millis(200));
        }
        for h in hs {
            h.join().map_err(|_| LabError::WorkerPanicked { what: "growing the log".into() })??;
        }
        Ok(())
    })?;
    pb.finish_and_clear();
    let log_bytes = log.record_log().end_lsn() - start;
    drop(tb);
    // Leave without a checkpoint, like a crash (dropping an open database writes nothing).
    drop(db);
    // The disk's own rate for reading a log: fio over one of the segment files just written.
    let segment = std::fs::read_dir(db_dir(cfg, setup).join("wal"))
        .ok()
        .and_then(|d| d.flatten().map(|e| e.path()).find(|p| p.is_file()));
    let fio_seq_read_mib_s = segment.and_then(|f| fio::seqread_mib_s(&f, 2.0));
    let t0 = std::time::Instant::now();
    let db = Database::open(db_dir(cfg, setup), options(cfg, setup))
        .map_err(LabError::engine("recovering the database"))?;
    let open_s = t0.elapsed().as_secs_f64();
    let rep = db.recovery_report().clone();
    db.close().map_err(LabError::engine("closing the recovered database"))?;
    Ok(RecoveryResult {
        log_bytes,
        replayed_bytes: rep.log_end.saturating_sub(rep.redo_from),
        open_s,
        records: rep.records,
        pages_redone: rep.pages_redone,
        redo_s: rep.micros as f64 / 1e6,
        redo_split_s: [rep.redo_wait_log_micros, rep.redo_read_pages_micros, rep.redo_write_back_micros]
            .map(|us| us as f64 / 1e6),
        fio_seq_read_mib_s,
    })
}

/// Runs the selected parts.
pub fn run(cfg: &CommitConfig, env: &RunEnv) -> Result<CommitResults> {
    if cfg.data_dir.exists() {
        std::fs::remove_dir_all(&cfg.data_dir).map_err(LabError::io(&cfg.data_dir, "remove"))?;
    }
    let mut dbs = Vec::new();
    for setup in &cfg.logs {
        load(cfg, setup)?;
        let db = Database::open(db_dir(cfg, setup), options(cfg, setup))
            .map_err(LabError::engine(format!("opening the database of the {} log", setup.name)))?;
        let t = db.table("bench").map_err(LabError::engine("opening the table"))?;
        dbs.push((setup, db, t));
    }
    let (mut fio_runs, mut engine, mut alone) = (Vec::new(), Points::default(), Points::default());
    for rep in 0..cfg.reps {
        fio_runs.extend(fio::fdatasync_iops(&cfg.data_dir, cfg.duration_s));
        for &threads in &cfg.threads {
            for (setup, db, t) in &dbs {
                if cfg.wants("commits") {
                    let (run, flushes) = engine_commits(cfg, db, t, threads, rep)?;
                    env.note(format!(
                        "engine, {} log, {threads:>2} thread(s): {:.0} commits/s",
                        setup.name,
                        run.ops_per_s()
                    ));
                    engine.add(&setup.name, threads, &run, flushes);
                }
                if cfg.wants("log") {
                    let (run, flushes) = log_commits(cfg, setup, threads)?;
                    env.note(format!(
                        "log alone, {} log, {threads:>2} thread(s): {:.0} commits/s",
                        setup.name,
                        run.ops_per_s()
                    ));
                    alone.add(&setup.name, threads, &run, flushes);
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(cfg.data_dir.join("log-alone"));
    let mut r = CommitResults {
        fio_fdatasync_iops: Spread::of_some(&fio_runs),
        engine: engine.finish(&cfg.logs),
        log: alone.finish(&cfg.logs),
        recovery: None,
    };
    let mut dbs = dbs.into_iter();
    if let Some((setup, db, t)) = dbs.next() {
        drop(t);
        if cfg.wants("recovery") && cfg.recovery_log_bytes > 0 {
            r.recovery = Some(recovery(cfg, setup, env, db)?);
        } else {
            db.close().map_err(LabError::engine("closing the database"))?;
        }
    }
    for (_, db, t) in dbs {
        drop(t);
        db.close().map_err(LabError::engine("closing the database"))?;
    }
    Ok(r)
}
