//! The summary and plot of `nvmedb lab peers`.
//!
//! Owns: the rates table (every workload and engine, nvmedb's ratio to each peer), the
//! 1 %-cache lines beside fio, the configuration lines (a page size other than the default is
//! said), the ratio bar chart, `ratios.csv` and the figures.

use super::engines::{Kind, KINDS};
use super::{PeersBench, PeersConfig, PeersResults, Rate, Ratio};
use crate::error::Result;
use crate::experiment::{Experiment, RunEnv, Summary};
use crate::measure::Spread;
use crate::report::{BarChart, Figure, TextTable};

pub(super) fn report(cfg: &PeersConfig, r: &PeersResults, env: &RunEnv) -> Result<Summary> {
    let kinds: Vec<Kind> = KINDS.iter().copied().filter(|k| cfg.engines.contains(k)).collect();
    let ratios = r.ratios();
    let (table, workloads) = rates_table(r, &kinds, &ratios);
    let mut text = format!(
        "{}\n\n{table}\nratios: nvmedb's median rate / the peer's (load: the peer's time / nvmedb's); above 1: nvmedb ahead\n\
         fio 4 KiB write + fdatasync, 1 job: {}\n\
         1 % cache = {:.1} MiB; {} repetitions of {} s windows, engines interleaved in each\n",
        <PeersBench as Experiment>::TITLE,
        if cfg.wants("commits") {
            format!("{} IOPS", spread(&r.fio_fdatasync_iops))
        } else {
            "not measured (the commits part did not run)".to_string()
        },
        r.miss_cache_bytes as f64 / (1 << 20) as f64,
        cfg.reps,
        cfg.duration_s,
    );
    miss_lines(r, &mut text);
    text.push_str("\nconfiguration:\n");
    for k in &kinds {
        text.push_str(&format!("  {}: {}\n", k.name(), k.configuration()));
        if let (Kind::Nvmedb, Some(p)) = (*k, cfg.table_page_size) {
            text.push_str(&format!(
                "  nvmedb: NOT the default table page size: {} KiB (--table-page), to compare page sizes\n",
                p / 1024
            ));
        }
    }
    text.push_str(&format!("machine: {}\n", env.context.one_line()));
    let groups: Vec<String> = workloads.iter().map(|(w, _)| w.clone()).collect();
    if kinds.len() > 1 && !groups.is_empty() {
        ratio_chart(cfg, env, &kinds, &groups, &ratios)?;
        text.push_str("plot: ratios.png / ratios.svg\n");
    }
    env.dir.write_csv("ratios", &ratios)?;
    Ok(Summary { text, figures: figures(r, &ratios) })
}

/// The rates of every workload and engine, min–max, with nvmedb's ratio to each peer; and
/// the workloads in table order with their units.
fn rates_table(
    r: &PeersResults,
    kinds: &[Kind],
    ratios: &[Ratio],
) -> (TextTable, Vec<(String, &'static str)>) {
    let sections: [(&str, &Vec<Rate>, &str); 4] = [
        ("bulk load (durable batches of 10 000 rows)", &r.load_s, "s"),
        ("in-memory lookups, 1 thread", &r.memory, "/s"),
        ("durable single-row updates", &r.commits, "/s"),
        ("lookups through a 1 % cache", &r.miss, "/s"),
    ];
    let mut header = vec!["workload".to_string()];
    for k in kinds {
        header.push(format!("{} (min–max)", k.name()));
    }
    for k in kinds.iter().skip(1) {
        header.push(format!("nvmedb/{}", k.name()));
    }
    let mut table = TextTable::new(header);
    let mut workloads: Vec<(String, &'static str)> = Vec::new();
    for (_, rates, unit) in &sections {
        for rate in rates.iter() {
            if !workloads.iter().any(|(w, _)| *w == rate.workload) {
                workloads.push((rate.workload.clone(), unit));
            }
        }
    }
    let fmt = |v: f64, unit: &str| {
        if unit == "s" {
            format!("{v:.1} s")
        } else if v >= 1e6 {
            format!("{:.2} M", v / 1e6)
        } else if v >= 1e3 {
            format!("{:.1} K", v / 1e3)
        } else {
            format!("{v:.0}")
        }
    };
    let all: Vec<&Rate> = sections.iter().flat_map(|(_, v, _)| v.iter()).collect();
    for (w, unit) in &workloads {
        let mut row = vec![w.clone()];
        for k in kinds {
            row.push(match all.iter().find(|r| r.workload == *w && r.engine == *k) {
                Some(r) => format!(
                    "{} ({}–{})",
                    fmt(r.per_s.median, unit),
                    fmt(r.per_s.min, unit),
                    fmt(r.per_s.max, unit)
                ),
                None => "–".into(),
            });
        }
        for k in kinds.iter().skip(1) {
            row.push(match ratios.iter().find(|x| x.workload == *w && x.peer == *k) {
                Some(x) => format!("{:.2}×", x.nvmedb_over_peer),
                None => "–".into(),
            });
        }
        table.row(row);
    }
    (table, workloads)
}

/// A spread of IOPS, or that fio did not run.
fn spread(s: &Option<Spread>) -> String {
    s.map_or("fio did not run".to_string(), |s| {
        format!("{:.0} (min {:.0}, max {:.0})", s.median, s.min, s.max)
    })
}

/// Per 1 %-cache workload: fio's rate on nvmedb's data file at its page size and at 4 KiB
/// with nvmedb's share of each, then the CPU per lookup.
fn miss_lines(r: &PeersResults, text: &mut String) {
    for f in &r.miss_fio {
        let nv = r.miss.iter().find(|x| x.workload == f.workload && x.engine == Kind::Nvmedb);
        let over = |fio: &Option<Spread>| match (nv, fio) {
            (Some(n), Some(f)) if f.median > 0.0 => format!("{:.2}×", n.per_s.median / f.median),
            _ => "–".into(),
        };
        text.push_str(&format!(
            "{}: fio on nvmedb's data file ({}): {} KiB {} IOPS ({} CPU µs per read; nvmedb {}), 4 KiB {} IOPS (nvmedb {})\n",
            f.workload,
            f.shape,
            r.miss_page_bytes / 1024,
            spread(&f.page_iops),
            f.page_cpu_us_per_read.map_or("–".into(), |c| format!("{:.1}", c.median)),
            over(&f.page_iops),
            spread(&f.iops_4k),
            over(&f.iops_4k),
        ));
    }
    let cpu: Vec<String> = r
        .miss
        .iter()
        .filter_map(|x| {
            x.cpu_us_per_op.map(|c| format!("{} {}: {:.1}", x.workload, x.engine.name(), c.median))
        })
        .collect();
    if !cpu.is_empty() {
        text.push_str(&format!("CPU µs per lookup through the 1 % cache: {}\n", cpu.join("; ")));
    }
}

/// One bar chart: nvmedb / peer per workload, one bar per peer.
fn ratio_chart(
    cfg: &PeersConfig,
    env: &RunEnv,
    kinds: &[Kind],
    groups: &[String],
    ratios: &[Ratio],
) -> Result<()> {
    let mut chart = BarChart::new(
        "nvmedb vs peers (ratio of medians; above 1: nvmedb ahead)",
        "nvmedb / peer",
        groups.to_vec(),
    )
    .reference(1.0)
    .subtitle(format!("{} repetitions, engines interleaved; load: peer time / nvmedb time", cfg.reps))
    .footnote(env.context.one_line());
    for k in kinds.iter().skip(1) {
        let v = groups
            .iter()
            .map(|w| {
                ratios
                    .iter()
                    .find(|x| x.workload == *w && x.peer == *k)
                    .map_or(f64::NAN, |x| x.nvmedb_over_peer)
            })
            .collect();
        chart = chart.series(k.name(), v);
    }
    chart.write(env.dir.path(), "ratios")?;
    Ok(())
}

/// nvmedb's rate per workload, against its ratio to LMDB where LMDB ran.
fn figures(r: &PeersResults, ratios: &[Ratio]) -> Vec<Figure> {
    let all = r.load_s.iter().chain(&r.memory).chain(&r.commits).chain(&r.miss);
    let mut figures = Vec::new();
    for rate in all.filter(|r| r.engine == Kind::Nvmedb) {
        let unit = if r.load_s.iter().any(|x| x.workload == rate.workload) { "s" } else { "ops/s" };
        let mut f =
            Figure::repeated(format!("nvmedb {}", rate.workload), rate.workload.clone(), rate.per_s, unit);
        if let Some(x) = ratios.iter().find(|x| x.workload == rate.workload && x.peer == Kind::Lmdb) {
            f = f.against("nvmedb / LMDB", x.nvmedb_over_peer);
        }
        figures.push(f);
    }
    figures
}
