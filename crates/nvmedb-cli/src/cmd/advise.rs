//! `nvmedb advise`: which tier each table should live on, by the placement advisor
//! (`nvmedb_lab::advisor`): seed 000's relative-performance model over the tables' measured
//! access statistics, the tiers' latencies, IOPS and prices per GB.
//!
//! Owns: [`AdviseArgs`] and [`run`]. Two sources of the workload: `--from RUN`, a `nvmedb lab
//! tier` run (its all-DRAM configuration's statistics and the tiers as iobench measured them),
//! or a database directory (its access statistics saved at clean closes, summed, with the
//! transactions and throughput of that workload given as flags; the tiers are the built-in
//! device profiles, and each table's current tier is its tablespace's profile). Invariant:
//! advice reads and changes nothing (the database is opened without its log).

use super::lab::tier::parse_prices;
use super::CliError;
use clap::Args;
use nvmedb_lab::advisor::{self, Placement, TableLoad, Tier, Workload};
use nvmedb_lab::experiments::tier::{TierConfig, TierResults};
use nvmedb_lab::report::{read_json, TextTable};
use std::path::PathBuf;

/// Flags of `nvmedb advise`.
#[derive(Args, Debug)]
pub struct AdviseArgs {
    /// Database directory whose saved access statistics are the workload (see --transactions).
    pub dir: Option<PathBuf>,
    /// Take the workload and tiers from a `nvmedb lab tier` run instead (its directory).
    #[arg(long, value_name = "RUN")]
    pub from: Option<PathBuf>,
    /// With DIR: transactions the saved statistics cover.
    #[arg(long)]
    pub transactions: Option<u64>,
    /// With DIR: the workload's measured throughput on the current placement, txn/s.
    #[arg(long = "txn-per-s")]
    pub txn_per_s: Option<f64>,
    /// With DIR: concurrent clients of the workload.
    #[arg(long, default_value_t = 1)]
    pub clients: u32,
    /// With DIR: the tier of tables in the default tablespace or in a tablespace without a
    /// profile (hdd, nand, optane, dram).
    #[arg(long = "default-tier", default_value = "nand")]
    pub default_tier: String,
    /// Price per GB of a tier, e.g. --price nand=6.5 (repeatable; defaults: seed 003's R$/GB).
    #[arg(long = "price")]
    pub prices: Vec<String>,
    /// The database's cost may not exceed this.
    #[arg(long)]
    pub budget: Option<f64>,
    /// Also evaluate a placement: `table=tier,table=tier,...` (tables not named stay on their
    /// current tier, or the cheapest); repeatable.
    #[arg(long)]
    pub placement: Vec<String>,
}

fn tier_index(tiers: &[Tier], name: &str, flag: &'static str) -> Result<usize, CliError> {
    tiers.iter().position(|t| t.name == name).ok_or_else(|| {
        let names: Vec<&str> = tiers.iter().map(|t| t.name.as_str()).collect();
        CliError::flag(flag, format!("`{name}` is not a tier ({})", names.join(", ")))
    })
}

/// The workload, the tiers (cheapest first) and the current placement from a database's saved
/// access statistics.
fn from_database(
    a: &AdviseArgs,
    dir: &std::path::Path,
) -> Result<(Workload, Vec<Tier>, Placement), CliError> {
    let (Some(txns), Some(tps)) = (a.transactions, a.txn_per_s) else {
        return Err(CliError::flag(
            "--transactions",
            "with a database directory, give --transactions N and --txn-per-s X (what the saved statistics cover), or use --from RUN",
        ));
    };
    if txns == 0 || tps.is_nan() || tps <= 0.0 {
        return Err(CliError::flag("--transactions", "--transactions and --txn-per-s must be > 0"));
    }
    let db = super::inspect::open_without_log(dir)?;
    let stats = db.access_stats_total().map_err(CliError::engine("reading the access statistics"))?;
    let tiers: Vec<Tier> = ["hdd", "nand", "optane", "dram"]
        .iter()
        .filter_map(|n| nvmedb::io::DeviceProfile::builtin(n))
        .map(|p| advisor::profile_tier(&p))
        .collect();
    let default = tier_index(&tiers, &a.default_tier, "--default-tier")?;
    let cat = db.catalog();
    let tier_of_space = |space: &str| {
        cat.tablespaces
            .iter()
            .find(|s| s.name == space)
            .and_then(|s| s.profile.split_whitespace().next())
            .and_then(|p| tiers.iter().position(|t| t.name == p))
            .unwrap_or(default)
    };
    let n = txns as f64;
    let mut current = Vec::new();
    let loads = stats
        .iter()
        .map(|t| {
            current.push(tier_of_space(&t.heap_space));
            TableLoad {
                name: t.table.clone(),
                bytes: t.heap_pages * t.heap_page_size + t.index_pages * t.index_page_size,
                reads_per_txn: (t.heap.reads + t.index.reads) as f64 / n,
                writes_per_txn: (t.heap.writes + t.index.writes) as f64 / n,
                accesses_per_txn: (t.heap.hits + t.heap.misses + t.index.hits + t.index.misses) as f64 / n,
            }
        })
        .collect();
    let mut w = Workload { t_cpu_us: 0.0, clients: a.clients, cores: a.clients, tables: loads };
    let io = advisor::predict(&w, &tiers, &current).io_us;
    w.t_cpu_us = (f64::from(a.clients) * 1e6 / tps - io).max(1.0);
    Ok((w, tiers, current))
}

/// The text `nvmedb advise` prints.
pub fn describe(a: &AdviseArgs) -> Result<String, CliError> {
    let (w, mut tiers, current, source) = match (&a.from, &a.dir) {
        (Some(run), None) => {
            let doc = read_json::<TierConfig, TierResults>(run.join("results.json"))
                .map_err(nvmedb_lab::LabError::from)?;
            let tiers: Vec<Tier> = doc
                .results
                .devices
                .iter()
                .filter(|d| d.name != "disk")
                .map(|d| d.as_advisor_tier())
                .collect();
            let src = format!("the all-DRAM configuration of the `nvmedb lab tier` run in {}", run.display());
            (doc.results.workload, tiers, None, src)
        }
        (None, Some(dir)) => {
            let (w, t, c) = from_database(a, dir)?;
            (w, t, Some(c), format!("the saved access statistics of {}", dir.display()))
        }
        _ => return Err(CliError::flag("--from", "give a database directory or --from RUN, not both")),
    };
    for (name, price) in parse_prices("--price", &a.prices)? {
        let k = tier_index(&tiers, &name, "--price")?;
        tiers[k].price_per_gb = price;
    }
    let mut named: Vec<(String, Placement)> = Vec::new();
    if let Some(c) = &current {
        named.push(("current".into(), c.clone()));
    }
    for (i, spec) in a.placement.iter().enumerate() {
        let mut p = current.clone().unwrap_or_else(|| vec![0; w.tables.len()]);
        for part in spec.split(',').filter(|s| !s.trim().is_empty()) {
            let (table, tier) = part
                .split_once('=')
                .ok_or_else(|| CliError::flag("--placement", format!("`{part}` is not table=tier")))?;
            let t = w.tables.iter().position(|x| x.name == table.trim()).ok_or_else(|| {
                CliError::flag("--placement", format!("no table `{}` in the workload", table.trim()))
            })?;
            p[t] = tier_index(&tiers, tier.trim(), "--placement")?;
        }
        named.push((format!("placement {}", i + 1), p));
    }
    let rows = advisor::compare(&w, &tiers, a.budget, &named);
    let mut out = format!(
        "workload: {source}\n{:.0} µs per transaction besides device I/O, {} clients\n\n",
        w.t_cpu_us, w.clients
    );
    let mut tt = TextTable::new(["tier", "read µs", "write µs", "IOPS limit", "price / GB"]).title("Tiers");
    for t in &tiers {
        tt.row([
            t.name.clone(),
            format!("{:.1}", t.read_us),
            format!("{:.1}", t.write_us),
            t.iops.map_or("-".into(), |v| format!("{v:.0}")),
            format!("{:.2}", t.price_per_gb),
        ]);
    }
    out.push_str(&tt.to_string());
    let mut header = vec!["placement".to_string(), "txn/s".into(), "cost".into(), "txn/s per cost".into()];
    header.extend(w.tables.iter().map(|t| t.name.clone()));
    let mut pt = TextTable::new(header).title(format!(
        "Predicted throughput and cost{}",
        a.budget.map_or(String::new(), |b| format!(" (budget {b})"))
    ));
    for r in &rows {
        let mut row = vec![
            r.name.clone(),
            format!("{:.0}", r.prediction.txn_per_s),
            format!("{:.3}", r.prediction.cost),
            format!("{:.0}", r.prediction.txn_per_s_per_cost),
        ];
        row.extend(r.prediction.tiers.iter().cloned());
        pt.row(row);
    }
    out.push('\n');
    out.push_str(&pt.to_string());
    match rows.iter().find(|r| r.name == "advisor") {
        Some(adv) => out.push_str(&format!(
            "\nrecommended: {} ({:.0} txn/s predicted, cost {:.3})\n",
            w.tables
                .iter()
                .zip(&adv.prediction.tiers)
                .map(|(t, k)| format!("{}={k}", t.name))
                .collect::<Vec<_>>()
                .join(","),
            adv.prediction.txn_per_s,
            adv.prediction.cost
        )),
        None => out.push_str("\nno placement fits the budget\n"),
    }
    Ok(out)
}

/// Prints the advice.
pub fn run(a: &AdviseArgs) -> Result<(), CliError> {
    print!("{}", describe(a)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: AdviseArgs,
    }

    fn args(v: &[&str]) -> AdviseArgs {
        Cli::try_parse_from(std::iter::once("advise").chain(v.iter().copied())).expect("parses").a
    }

    /// A database's saved statistics give a workload; the advice and the named placements are
    /// listed, and bad flags name themselves.
    #[test]
    fn advice_from_a_databases_saved_statistics() {
        use nvmedb::{ColumnType, Database, Options, Schema, Value};
        let dir = std::env::temp_dir().join(format!("nvmedb-advise-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let db = Database::open(&dir, Options::default()).unwrap();
        let schema = Schema::new(vec![("id", ColumnType::Int), ("pad", ColumnType::Bytes(500))]);
        for name in ["hot", "cold"] {
            let t = db.create_table(name, schema.clone()).unwrap();
            for k in 0..300 {
                t.insert(&[Value::Int(k), Value::Bytes(vec![1; 400])]).unwrap();
            }
        }
        db.close().unwrap();
        let d = dir.to_str().unwrap();
        let out =
            describe(&args(&[d, "--transactions", "600", "--txn-per-s", "2000", "--placement", "hot=dram"]))
                .unwrap();
        assert!(
            out.contains("recommended: ") && out.contains("placement 1") && out.contains("current"),
            "{out}"
        );
        assert!(out.contains("cold") && out.contains("all optane"), "{out}");
        let e = describe(&args(&[d])).unwrap_err().to_string();
        assert!(e.starts_with("--transactions"), "{e}");
        let e = describe(&args(&[d, "--transactions", "6", "--txn-per-s", "2", "--price", "floppy=1"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("floppy"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
