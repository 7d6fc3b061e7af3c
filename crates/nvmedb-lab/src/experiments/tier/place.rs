//! The tier experiment's configurations and its placed databases.
//!
//! Owns: [`TIER_NAMES`], [`CONFIG_NAMES`], which tier each configuration puts each TPC-C table on
//! ([`fixed`], [`hybrid`], [`choose`]), the tiers' iobench measurements ([`measure_tiers`]) and
//! one point of a configuration ([`run_point`]): a fresh copy of the loaded database on tmpfs
//! (the DRAM tier, the default tablespace), opened with its log on the emulated log device, one
//! tablespace per other tier used (the tier's profile over a tmpfs directory), every table moved
//! to its tier while the database is open, then measured by the TPC-C terminals.
//!
//! Seed 003 names only H1 (warehouse, district and customer in DRAM; order-line, orders and
//! stock on the SSD; history, item and new-order on the HDD) and says H2 and H5 were chosen by
//! size, H1, H3 and H4 by access counts, three tables per device. We take H2 = by size over
//! DRAM/Optane/HDD (smallest in DRAM), H3 = by access count over DRAM/Optane/HDD, and — for the
//! cheaper pair the paper's H4 stands for (close to the SSD's throughput at half its cost) —
//! H4 = by access count and H5 = by size over Optane/NAND/HDD.

use super::{TierConfig, TierDevice};
use crate::advisor::{self, Workload};
use crate::error::{LabError, Result};
use crate::experiment::RunEnv;
use crate::experiments::tpcc::point::{self, PointOutcome};
use crate::experiments::tpcc::setup::{self, OpenPoint, PreparedDevice, Template};
use crate::experiments::tpcc::TpccConfig;
use crate::files;
use crate::measure::DeviceKind;
use crate::workload::tpcc::schema::TABLE_NAMES;
use nvmedb::io::{EmulatedStorage, Storage};
use nvmedb::wal::FileLogOpener;
use nvmedb::{Database, TablespaceSpec};
use std::path::Path;
use std::sync::Arc;

/// The tiers, cheapest first; their index is a placement's value. `dram` is the default
/// tablespace (tmpfs, no emulated latency).
pub const TIER_NAMES: [&str; 4] = ["hdd", "nand", "optane", "dram"];
/// Index of the real disk in a placement (after the tiers): only the `disk` configuration.
pub const DISK: usize = TIER_NAMES.len();
const DRAM: usize = 3;

/// The configurations, in the order they are reported.
pub const CONFIG_NAMES: [&str; 11] =
    ["all-hdd", "all-nand", "all-optane", "all-dram", "H1", "H2", "H3", "H4", "H5", "advisor", "disk"];

fn tier(name: &str) -> usize {
    TIER_NAMES.iter().position(|t| *t == name).unwrap_or(DRAM)
}

/// The placements that need no measurement: all on one tier, seed 003's H1, the real disk.
pub fn fixed(name: &str) -> Option<(String, Vec<usize>)> {
    let all = |k: usize| vec![k; TABLE_NAMES.len()];
    Some(match name {
        "all-hdd" | "all-nand" | "all-optane" | "all-dram" => {
            let t = &name[4..];
            (format!("every table on {t}"), all(tier(t)))
        }
        "H1" => {
            let p = TABLE_NAMES
                .iter()
                .map(|t| match *t {
                    "warehouse" | "district" | "customer" => tier("dram"),
                    "order_line" | "orders" | "stock" => tier("optane"),
                    _ => tier("hdd"),
                })
                .collect();
            ("seed 003's H1 (by access counts)".into(), p)
        }
        "disk" => ("every table and the log on the real disk".into(), all(DISK)),
        _ => return None,
    })
}

/// Seed 003's heuristic configurations H2–H5 on workload `w` (see the module comment).
pub fn hybrid(name: &str, w: &Workload) -> Option<(String, Vec<usize>)> {
    let fast = [tier("dram"), tier("optane"), tier("hdd")];
    let cheap = [tier("optane"), tier("nand"), tier("hdd")];
    Some(match name {
        "H2" => (
            "by size: smallest third in DRAM, next on Optane, largest on HDD".into(),
            advisor::by_size(w, &fast),
        ),
        "H3" => (
            "by access count: most accessed third in DRAM, next on Optane, least on HDD".into(),
            advisor::by_access(w, &fast),
        ),
        "H4" => (
            "by access count: most accessed third on Optane, next on NAND, least on HDD".into(),
            advisor::by_access(w, &cheap),
        ),
        "H5" => (
            "by size: smallest third on Optane, next on NAND, largest on HDD".into(),
            advisor::by_size(w, &cheap),
        ),
        _ => return None,
    })
}

/// The placement of configuration `name` (the advisor's best throughput per cost within
/// `budget` for `advisor`).
pub fn choose(
    name: &str,
    w: &Workload,
    tiers: &[advisor::Tier],
    budget: Option<f64>,
) -> Result<(String, Vec<usize>)> {
    if let Some(p) = fixed(name).or_else(|| hybrid(name, w)) {
        return Ok(p);
    }
    let advice = advisor::advise(w, tiers, budget).ok_or_else(|| {
        LabError::config("budget", "no placement of the tables fits the budget and the tiers' capacities")
    })?;
    let p = advice.tiers.iter().map(|t| tier(t)).collect();
    Ok(("the advisor's best predicted throughput per cost".into(), p))
}

/// Measures every tier with iobench (random table-page reads at QD1 and QD32), and the real
/// disk when the `disk` configuration runs (returned ready for its points).
pub fn measure_tiers(
    cfg: &TierConfig,
    tc: &TpccConfig,
    t: &Template,
    env: &RunEnv,
) -> Result<(Vec<TierDevice>, Option<PreparedDevice>)> {
    let mut out = Vec::new();
    for name in TIER_NAMES {
        env.note(format!("tier: measuring {name} with iobench"));
        let (p50, mean, qd32) = setup::characterise(tc, name.to_string(), 256 << 20)?;
        let profile = crate::measure::device::profile(name, &cfg.profile_overrides)?;
        let label = if name == "dram" {
            format!("dram (RAM: tmpfs, no emulated latency; iobench p50 {p50:.1} µs)")
        } else {
            format!("{name} (EMULATED, read p50 {p50:.1} µs)")
        };
        let iops_limit = match profile.channels {
            1 => Some(1e6 / mean.max(1e-3)),
            _ => (profile.iops_cap > 0.0).then_some(profile.iops_cap),
        };
        out.push(TierDevice {
            name: name.to_string(),
            label,
            read_p50_us: p50,
            read_mean_us: mean,
            read_qd32_iops: qd32,
            write_us: if name == "dram" { mean } else { profile.write_latency_us },
            iops_limit,
            price_per_gb: cfg.price(name)?,
        });
    }
    let disk = if cfg.configs.iter().any(|c| c == "disk") {
        let d = setup::prepare(tc, t, &DeviceKind::Disk, env)?;
        out.push(TierDevice {
            name: "disk".into(),
            label: format!("disk (real, read p50 {:.1} µs)", d.report.read_qd1_p50_us),
            read_p50_us: d.report.read_qd1_p50_us,
            read_mean_us: d.report.read_qd1_mean_us,
            read_qd32_iops: d.report.read_qd32_iops,
            write_us: d.report.read_qd1_mean_us,
            iops_limit: None,
            price_per_gb: cfg.price("disk")?,
        });
        Some(d)
    } else {
        None
    };
    Ok((out, disk))
}

fn emulated(cfg: &TierConfig, dir: &Path, profile: &str, seed: u64) -> Result<Arc<dyn Storage>> {
    let p = crate::measure::device::profile(profile, &cfg.profile_overrides)?;
    Ok(Arc::new(
        EmulatedStorage::new(files::dir_storage(dir)?, p, seed)
            .map_err(LabError::engine(format!("putting {} behind the {profile} profile", dir.display())))?,
    ))
}

/// A fresh copy of the loaded database with every table moved to its tier of `placement`.
fn open_placed(
    cfg: &TierConfig,
    tc: &TpccConfig,
    t: &Template,
    placement: &[usize],
    root: &Path,
    seed: u64,
) -> Result<OpenPoint> {
    let ram = t.ram_copy.as_ref().ok_or_else(|| LabError::Inconsistent {
        what: "the TPC-C template".into(),
        detail: "no RAM copy for the tiers".into(),
    })?;
    files::remove_dir(root)?;
    let home = root.join("dram");
    files::copy_files(ram, &home)?;
    let log = FileLogOpener {
        copies: vec![
            emulated(cfg, &root.join("wal"), &cfg.log_device, seed ^ 1)?,
            emulated(cfg, &root.join("wal-mirror"), &cfg.log_device, seed ^ 2)?,
        ],
        options: Default::default(),
    };
    let (buffer_bytes, index_bytes) = setup::buffers(tc, t, cfg.buffer_pct);
    let db = Database::open_with_log(
        files::dir_storage(&home)?,
        Some(Box::new(log)),
        setup::options(tc, buffer_bytes, index_bytes),
    )
    .map_err(LabError::engine("opening the database"))?;
    let mut made = Vec::new();
    for (table, &k) in TABLE_NAMES.iter().zip(placement) {
        if k == DRAM {
            continue;
        }
        let name = TIER_NAMES[k];
        if !made.contains(&k) {
            let mut profile = name.to_string();
            for o in &cfg.profile_overrides {
                profile.push(' ');
                profile.push_str(o);
            }
            db.create_tablespace(name, &TablespaceSpec { dir: root.join(name), profile: Some(profile) })
                .map_err(LabError::engine(format!("creating tablespace `{name}`")))?;
            made.push(k);
        }
        db.move_table(table, name, name).map_err(LabError::engine(format!("moving `{table}` to {name}")))?;
    }
    let tables = setup::prewarm(&db, cfg.buffer_pct)?;
    Ok(OpenPoint { db, tables, buffer_bytes, repl: None })
}

/// Runs one point of configuration `name` (placement `placement`; the `disk` configuration
/// runs on `disk`, the TPC-C experiment's own disk device).
#[allow(clippy::too_many_arguments)]
pub fn run_point(
    cfg: &TierConfig,
    tc: &TpccConfig,
    t: &Template,
    name: &str,
    placement: &[usize],
    disk: Option<&PreparedDevice>,
    rep: usize,
    seed: u64,
) -> Result<PointOutcome> {
    if name == "disk" {
        let d = disk.ok_or_else(|| LabError::Inconsistent {
            what: "the disk configuration".into(),
            detail: "the disk was not prepared".into(),
        })?;
        return point::run(tc, t, d, cfg.buffer_pct, rep, seed, &point::Observe::default());
    }
    let root = cfg.ram_dir.join("point");
    let open = open_placed(cfg, tc, t, placement, &root, seed)?;
    let label = format!("{name} (EMULATED tiers)");
    let out =
        point::measure(tc, t, open, (name, &label), cfg.buffer_pct, rep, seed, &point::Observe::default())?;
    files::remove_dir(&root)?;
    Ok(out)
}

/// Removes the RAM copies of the run (the disk template stays for the next run).
pub fn clean_up(cfg: &TierConfig, disk: Option<&PreparedDevice>) {
    if let Some(d) = disk {
        let _ = d.clean_point();
    }
    let _ = std::fs::remove_dir_all(&cfg.ram_dir);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advisor::TableLoad;

    #[test]
    fn h1_is_seed_003s_and_the_heuristics_put_three_tables_per_tier() {
        let (_, h1) = fixed("H1").unwrap();
        let on = |p: &[usize], k: &str| -> Vec<&str> {
            TABLE_NAMES.iter().zip(p).filter(|(_, &x)| x == tier(k)).map(|(t, _)| *t).collect()
        };
        assert_eq!(on(&h1, "dram"), ["warehouse", "district", "customer"]);
        assert_eq!(on(&h1, "optane"), ["orders", "order_line", "stock"]);
        assert_eq!(on(&h1, "hdd"), ["history", "new_order", "item"]);
        let w = Workload {
            t_cpu_us: 100.0,
            clients: 4,
            cores: 4,
            tables: TABLE_NAMES
                .iter()
                .enumerate()
                .map(|(i, t)| TableLoad {
                    name: (*t).into(),
                    bytes: (i as u64 + 1) << 20,
                    reads_per_txn: 0.1,
                    writes_per_txn: 0.1,
                    accesses_per_txn: 10.0 - i as f64,
                })
                .collect(),
        };
        for name in ["H2", "H3", "H4", "H5"] {
            let (_, p) = hybrid(name, &w).unwrap();
            for k in 0..TIER_NAMES.len() {
                let n = p.iter().filter(|&&x| x == k).count();
                assert!(n == 0 || n == 3, "{name}: {p:?}");
            }
        }
        // By size, the smallest (warehouse) goes to the fastest tier; by access, the most accessed.
        assert_eq!(hybrid("H2", &w).unwrap().1[0], tier("dram"));
        assert_eq!(hybrid("H4", &w).unwrap().1[0], tier("optane"));
        assert_eq!(fixed("all-nand").unwrap().1, vec![tier("nand"); 9]);
        assert!(fixed("H7").is_none() && hybrid("H1", &w).is_none());
    }
}
