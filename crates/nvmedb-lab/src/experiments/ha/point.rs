//! One point of the HA experiment: copy the template, start a standby when the configuration has
//! one, open the primary, run the UPDATE clients, tear everything down.
//!
//! Owns: [`run`] and [`options`]. Invariant: every point starts from a fresh copy of the
//! template; the standby is seeded from that copy, so it joins at the template's checkpoint.

use super::{HaConfig, HaKind};
use crate::error::{LabError, Result};
use crate::measure::Workers;
use crate::workload::primitive::{prewarm, run_update, table_name};
use nvmedb::repl::{
    open_primary, seed_standby, MirrorConfig, ReplConfig, ReplicationMode, Standby, StandbyConfig,
    StandbyPolicy,
};
use nvmedb::util::Rng;
use nvmedb::{BufferSize, Database, Options, Table};
use std::path::Path;
use std::time::Duration;

const SECRET: &[u8] = b"nvmedb-lab-ha";

/// Options of the primary (and of the standby at 100 %).
pub fn options(buffer_pct: f64) -> Options {
    Options {
        table_buffer: BufferSize::PercentOfData(buffer_pct),
        index_buffer: BufferSize::Bytes(256 << 20),
        pin_indexes: true,
        ..Options::default()
    }
}

fn copy_data(from: &Path, to: &Path) -> Result<()> {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).map_err(LabError::io(to, "create directory"))?;
    for e in std::fs::read_dir(from).map_err(LabError::io(from, "list"))? {
        let e = e.map_err(LabError::io(from, "list"))?;
        let ft = e.file_type().map_err(LabError::io(e.path(), "stat"))?;
        if ft.is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).map_err(LabError::io(e.path(), "copy"))?;
        } else if ft.is_dir() {
            // The log (wal/, wal-mirror/): the primary continues the template's log, so the
            // standby seeded from it joins at the template's checkpoint.
            copy_data(&e.path(), &to.join(e.file_name()))?;
        }
    }
    Ok(())
}

/// `cfg.clients` clients updating random rows for the warm-up and window: commits and tps.
fn clients(cfg: &HaConfig, tables: &[Table], seed: u64) -> Result<(u64, f64)> {
    let workers = Workers::new(
        "UPDATE clients",
        cfg.clients,
        Duration::from_secs_f64(cfg.warmup_s),
        Duration::from_secs_f64(cfg.duration_s),
    );
    let run = workers.run(
        |c| Ok(Rng::new(seed * 1000 + c as u64)),
        |rng, _| {
            let t = &tables[rng.below(tables.len() as u64) as usize];
            let sid = rng.below(cfg.rows) as i64;
            match run_update(t, sid, rng.next_u64() as i64 >> 1) {
                Ok(_) => Ok(1),
                Err(e) if e.is_retryable() => Ok(0),
                Err(e) => Err(LabError::engine("a client's UPDATE")(e)),
            }
        },
        &mut (),
    )?;
    Ok((run.ops, run.ops_per_s()))
}

/// Runs one point; with `delays`, also returns the replication delays recorded (ns).
pub fn run(
    cfg: &HaConfig,
    kind: HaKind,
    buffer: f64,
    seed: u64,
    delays: bool,
) -> Result<(u64, f64, Vec<u64>)> {
    let template = cfg.data_dir.join("template");
    let p = cfg.data_dir.join("primary");
    let s = cfg.data_dir.join("standby");
    copy_data(&template, &p)?;
    let _ = std::fs::remove_dir_all(&s);
    let mut standby = None;
    let (db, log) = match kind {
        HaKind::Single => {
            (Database::open(&p, options(buffer)).map_err(LabError::engine("opening the primary"))?, None)
        }
        HaKind::HaLog | HaKind::HaMirror => {
            seed_standby(&p, &s).map_err(LabError::engine("seeding the standby"))?;
            let sb = Standby::start(StandbyConfig {
                listen: "127.0.0.1:0".into(),
                data_dir: s.clone(),
                secret: SECRET.to_vec(),
                apply: kind == HaKind::HaLog,
                options: options(100.0),
            })
            .map_err(LabError::engine("starting the standby"))?;
            let addr = sb.addr().to_string();
            let rc = ReplConfig {
                standbys: vec![addr.clone()],
                secret: SECRET.to_vec(),
                mode: ReplicationMode::Eager,
                policy: StandbyPolicy::Fail { timeout: Duration::from_secs(30) },
                record_delays: delays,
                ..ReplConfig::default()
            };
            let mirror =
                (kind == HaKind::HaMirror).then(|| MirrorConfig { addr, secret: SECRET.to_vec(), epoch: 1 });
            let (db, log) = open_primary(&p, options(buffer), rc, mirror)
                .map_err(LabError::engine("opening the primary"))?;
            standby = Some(sb);
            (db, Some(log))
        }
    };
    let tables: Vec<Table> = (0..cfg.tables)
        .map(|i| db.table(&table_name(i)))
        .collect::<nvmedb::Result<_>>()
        .map_err(LabError::engine("opening the tables"))?;
    prewarm(&tables, cfg.rows, buffer / 100.0)?;
    if let Some(l) = &log {
        l.take_delays();
    }
    let (commits, tps) = clients(cfg, &tables, seed)?;
    let d = log.as_ref().map(|l| l.take_delays()).unwrap_or_default();
    drop(tables);
    drop(db);
    drop(log);
    drop(standby);
    Ok((commits, tps, d))
}
