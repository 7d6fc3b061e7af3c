//! Fig. 9 of seed 002: single-row update transactions through the engine vs workers, with four
//! logs — none, memory-only, the fast log (tmpfs ring) and the duplexed fdatasync file log.
//!
//! Owns: [`run`] and the database each log opens. Invariant: every log kind starts from the same
//! freshly loaded table, and each point's durability statement is the one its log gives.

use super::memlog::MemLogOpener;
use super::{remove, run_threads, TxnPoint, XlogConfig, XlogResults};
use crate::error::{LabError, Result};
use indicatif::ProgressBar;
use nvmedb::io::{DirStorage, FileOptions};
use nvmedb::xlog::MsyncPolicy;
use nvmedb::{BufferSize, ColumnType, Database, FastLogOptions, LogKind, Options, Schema, Value};
use std::path::Path;
use std::sync::Arc;

/// The logs compared, in the order they run.
pub const LOGS: [&str; 4] = ["none", "memory", "fast", "file"];

fn db_options(log: LogKind, wal: bool) -> Options {
    Options {
        table_page_size: 4096,
        index_page_size: 4096,
        table_buffer: BufferSize::Bytes(32 << 20),
        index_buffer: BufferSize::Bytes(32 << 20),
        wal,
        log,
        ..Options::default()
    }
}

fn open_db(cfg: &XlogConfig, kind: &str, dir: &Path) -> Result<Database> {
    let open = LabError::engine(format!("opening the database with the {kind} log"));
    match kind {
        "none" => Database::open(dir, db_options(LogKind::File, false)).map_err(open),
        "memory" => {
            let storage = DirStorage::new(dir, FileOptions::default())
                .map_err(LabError::engine("opening the data directory"))?;
            Database::open_with_log(
                Arc::new(storage),
                Some(Box::new(MemLogOpener)),
                db_options(LogKind::File, true),
            )
            .map_err(open)
        }
        "fast" => {
            let fast = LogKind::Fast(FastLogOptions {
                ring_path: Some(cfg.ring_path("fig9")),
                msync: MsyncPolicy::Never,
                ..FastLogOptions::default()
            });
            Database::open(dir, db_options(fast, true)).map_err(open)
        }
        _ => Database::open(dir, db_options(LogKind::File, true)).map_err(open),
    }
}

/// A fresh table of `cfg.rows` accounts in `dir`, loaded without a log.
fn load(cfg: &XlogConfig, dir: &Path) -> Result<()> {
    let schema = Schema::new(vec![
        ("id", ColumnType::Int),
        ("balance", ColumnType::Int),
        ("filler", ColumnType::Char(100)),
    ]);
    let db = Database::open(dir, db_options(LogKind::File, false))
        .map_err(LabError::engine("creating the database"))?;
    let t = db.create_table("acct", schema).map_err(LabError::engine("creating the table"))?;
    for id in 0..cfg.rows as i64 {
        t.insert(&[Value::Int(id), Value::Int(1000), Value::from("x")])
            .map_err(LabError::engine(format!("loading row {id}")))?;
    }
    db.close().map_err(LabError::engine("closing the loaded database"))
}

/// One log kind at every worker count.
fn one_log(cfg: &XlogConfig, kind: &str, pb: &ProgressBar, out: &mut XlogResults) -> Result<()> {
    let dir = cfg.data_dir.join(format!("fig9-{kind}"));
    remove(&dir);
    remove(&cfg.ring_path("fig9"));
    load(cfg, &dir)?;
    let db = open_db(cfg, kind, &dir)?;
    let durability = match db.engine_log() {
        Some(l) => l.record_log().describe(),
        None => "no log: a commit is durable only after the next flush; a crash loses it".into(),
    };
    out.durability.push((kind.to_string(), durability.clone()));
    let t = db.table("acct").map_err(LabError::engine("opening the table"))?;
    for &w in &cfg.workers {
        pb.set_message(format!("fig9 {kind} log, {w} workers"));
        let rows = cfg.rows;
        let (txns, secs, h) = run_threads(&format!("fig9 {kind} log, {w} workers"), w, cfg.secs, |rng| {
            let k = rng.below(rows) as i64;
            loop {
                let mut tx = db.begin();
                let r = (|| {
                    let Some(mut row) = tx.get_for_update(&t, &Value::Int(k))? else {
                        return Err(nvmedb::Error::NotFound(format!("row {k} of table acct")));
                    };
                    row[1] = Value::Int(row[1].as_int().unwrap_or(0) + 1);
                    tx.update(&t, &row)
                })();
                match r {
                    Ok(_) => return tx.commit(),
                    Err(e) if e.is_retryable() => tx.abort()?,
                    Err(e) => return Err(e),
                }
            }
        })?;
        out.fig9.push(TxnPoint {
            log: kind.into(),
            workers: w,
            txns,
            secs,
            txn_per_s: txns as f64 / secs,
            p50_us: h.quantile_us(0.5),
            p99_us: h.quantile_us(0.99),
            p999_us: h.quantile_us(0.999),
            durability: durability.clone(),
        });
        pb.inc(1);
    }
    drop(t);
    db.close().map_err(LabError::engine("closing the database"))?;
    remove(&dir);
    remove(&cfg.ring_path("fig9"));
    Ok(())
}

/// Runs Fig. 9: every log kind, then the file-log p99 over the fast-log p99 per worker count.
pub fn run(cfg: &XlogConfig, pb: &ProgressBar, out: &mut XlogResults) -> Result<()> {
    for kind in LOGS {
        one_log(cfg, kind, pb, out).map_err(LabError::in_part(format!("{kind} log")))?;
    }
    for &w in &cfg.workers {
        let p = |k: &str| out.fig9.iter().find(|x| x.log == k && x.workers == w).map(|x| x.p99_us);
        if let (Some(f), Some(x)) = (p("file"), p("fast")) {
            out.p99_ratio_file_over_fast.push((w, f / x));
        }
    }
    Ok(())
}
