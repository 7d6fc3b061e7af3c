//! The report of `lab ops`: the text tables, the headline figures and the plots (commit and
//! read throughput per point, the apply lag over time, backup and restore rates beside fio).
//!
//! Owns: [`report`] and [`Medians`]. Invariant: every figure is a median over the run's
//! repetitions, compared with its peer measured in the same run (the primary without readers,
//! fio on the same disk) or with the goal it is held to.

use super::{OpsConfig, OpsResults, ReadPoint};
use crate::error::Result;
use crate::experiment::{RunEnv, Summary};
use crate::measure::{median, Spread};
use crate::report::{Align, BarChart, Figure, LineChart, Series, TextTable};

/// The commit-throughput goal: with readers on the standby, at most this much lower, %.
pub const GOAL_OVERHEAD_PCT: f64 = 5.0;

/// The medians the summary and the figures report.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Medians {
    /// Primary commits/s without readers.
    pub tps_without: f64,
    /// Primary commits/s with readers.
    pub tps_with: f64,
    /// 100 × (1 − with / without).
    pub overhead_pct: f64,
    /// Standby reads/s.
    pub read_tps: f64,
    /// Median of the points' median apply lag, ms: without readers, with.
    pub lag_ms: (f64, f64),
    /// Median of the points' largest apply lag, ms: without readers, with.
    pub lag_max_ms: (f64, f64),
}

impl Medians {
    /// Computes them from the points.
    pub fn of(points: &[ReadPoint]) -> Self {
        let of = |with: bool, f: &dyn Fn(&ReadPoint) -> f64| {
            median(&points.iter().filter(|p| p.with_reads == with).map(f).collect::<Vec<_>>())
        };
        let (without, with) = (of(false, &|p| p.tps), of(true, &|p| p.tps));
        Self {
            tps_without: without,
            tps_with: with,
            overhead_pct: if without > 0.0 { 100.0 * (1.0 - with / without) } else { 0.0 },
            read_tps: of(true, &|p| p.read_tps),
            lag_ms: (of(false, &|p| p.lag_summary().0), of(true, &|p| p.lag_summary().0)),
            lag_max_ms: (of(false, &|p| p.lag_summary().1), of(true, &|p| p.lag_summary().1)),
        }
    }
}

fn opt(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1}"))
}

/// Writes the tables and plots and returns the summary.
pub fn report(cfg: &OpsConfig, r: &OpsResults, env: &RunEnv) -> Result<Summary> {
    let mut text = format!(
        "Operations on {}\n{}\ndevice: {}\n{} tables x {} rows of 4 KiB ({:.0} MiB); Options::default() on both nodes; eager replication\n",
        env.context.hostname,
        env.context.one_line(),
        r.device,
        cfg.tables,
        cfg.rows,
        r.data_bytes as f64 / (1 << 20) as f64
    );
    let mut figures = Vec::new();
    if !r.reads.is_empty() {
        reads_section(cfg, r, env, &mut text, &mut figures)?;
    }
    if !r.backups.is_empty() {
        backup_section(r, env, &mut text, &mut figures)?;
    }
    for n in &r.notes {
        text.push_str(&format!("note: {n}\n"));
    }
    Ok(Summary { text, figures })
}

fn reads_section(
    cfg: &OpsConfig,
    r: &OpsResults,
    env: &RunEnv,
    text: &mut String,
    figures: &mut Vec<Figure>,
) -> Result<()> {
    let m = Medians::of(&r.reads);
    let mut t = TextTable::new([
        "rep",
        "point",
        "commits/s",
        "standby reads/s",
        "read ms",
        "lag median ms",
        "lag max ms",
        "lag median KiB",
        "primary cores",
        "standby cores",
    ])
    .title(format!(
        "\nstandby reads: {} writers on the primary (single-row UPDATEs of 4 KiB rows, each replicated before it is acknowledged); {} pgbench clients ({} threads) running point SELECTs on `nvmedb standby --serve`; {}",
        cfg.writers, cfg.readers, cfg.reader_threads, r.cpu_placement
    ))
    .align(1, Align::Left);
    for p in &r.reads {
        let (l50, lmax, b50, _) = p.lag_summary();
        t.row([
            p.rep.to_string(),
            p.label().to_string(),
            format!("{:.0}", p.tps),
            format!("{:.0}", p.read_tps),
            format!("{:.2}", p.read_latency_ms),
            format!("{l50:.1}"),
            format!("{lmax:.1}"),
            format!("{:.1}", b50 / 1024.0),
            format!("{:.2}", p.primary_cores),
            format!("{:.2}", p.standby_cores),
        ]);
    }
    text.push_str(&t.to_string());
    text.push_str(&format!(
        "primary commits/s: {:.0} without readers, {:.0} with ({:.1} % {}; goal: at most {GOAL_OVERHEAD_PCT} % lower); standby reads/s: {:.0}; apply lag median {:.1} ms without readers, {:.1} ms with (largest {:.1} / {:.1} ms)\n",
        m.tps_without, m.tps_with, m.overhead_pct.abs(), if m.overhead_pct >= 0.0 { "lower" } else { "higher" }, m.read_tps, m.lag_ms.0, m.lag_ms.1, m.lag_max_ms.0, m.lag_max_ms.1
    ));
    let spread = |with: bool, f: fn(&ReadPoint) -> f64| {
        Spread::of(&r.reads.iter().filter(|p| p.with_reads == with).map(f).collect::<Vec<_>>())
    };
    figures.push(Figure::repeated(
        "reads/primary_tps_without",
        "primary commits/s, standby not serving reads",
        spread(false, |p| p.tps),
        "commits/s",
    ));
    figures.push(
        Figure::repeated(
            "reads/primary_tps_with",
            format!("primary commits/s, standby serving {} readers", cfg.readers),
            spread(true, |p| p.tps),
            "commits/s",
        )
        .against("without readers", m.tps_without),
    );
    figures.push(
        Figure::new("reads/overhead_pct", "primary throughput lost to standby reads", m.overhead_pct, "%")
            .against("goal", GOAL_OVERHEAD_PCT),
    );
    figures.push(Figure::repeated(
        "reads/standby_read_tps",
        format!("standby reads/s ({} pgbench clients, point SELECTs)", cfg.readers),
        spread(true, |p| p.read_tps),
        "reads/s",
    ));
    figures.push(
        Figure::repeated(
            "reads/apply_lag_ms_with",
            "standby apply lag (median of samples) with readers",
            spread(true, |p| p.lag_summary().0),
            "ms",
        )
        .against("without readers", m.lag_ms.0),
    );
    let cats: Vec<String> = (0..cfg.reps).map(|i| format!("rep {i}")).collect();
    let per = |with: bool, f: fn(&ReadPoint) -> f64| {
        (0..cfg.reps)
            .map(|i| r.reads.iter().find(|p| p.rep == i && p.with_reads == with).map_or(f64::NAN, f))
            .collect::<Vec<_>>()
    };
    BarChart::new("Primary commits/s with and without reads on the standby", "commits/s", cats)
        .subtitle(format!(
            "{} writers; {} pgbench readers on the standby; {}",
            cfg.writers, cfg.readers, r.cpu_placement
        ))
        .series("no reads", per(false, |p| p.tps))
        .series("with reads", per(true, |p| p.tps))
        .footnote(env.context.one_line())
        .footnote(r.device.clone())
        .write(env.dir.path(), "commits")?;
    let mut chart =
        LineChart::new("Standby apply lag over each point", "seconds into the point", "apply lag (ms)")
            .subtitle("time since the primary's durable position passed the standby's applied one")
            .footnote(env.context.one_line());
    for (i, p) in r.reads.iter().enumerate() {
        let pts = p.lag.iter().map(|s| (s.t_s, s.ms)).collect();
        chart = chart.series(Series::new(format!("rep {} {}", p.rep, p.label()), pts).color(i));
    }
    chart.write(env.dir.path(), "apply_lag")?;
    env.dir.write_csv(
        "reads",
        &r.reads
            .iter()
            .map(|p| {
                let (l50, lmax, b50, bmax) = p.lag_summary();
                (p.rep, p.with_reads, p.commits, p.tps, p.reads, p.read_tps, l50, lmax, b50, bmax)
            })
            .collect::<Vec<_>>(),
    )?;
    Ok(())
}

fn backup_section(r: &OpsResults, env: &RunEnv, text: &mut String, figures: &mut Vec<Figure>) -> Result<()> {
    let mut t = TextTable::new(["rep", "backup MiB", "backup s", "backup MiB/s", "fio read MiB/s", "fio write MiB/s", "copy limit MiB/s"])
        .title("\nbase backup of the idle, open primary (data files and log, each page checked) beside fio on the same disk, back to back: 4 MiB O_DIRECT sequential reads of its largest data file, 4 MiB O_DIRECT sequential writes; copy limit = 1 / (1/read + 1/write)");
    for b in &r.backups {
        let f = r.fio.iter().find(|f| f.rep == b.rep);
        t.row([
            b.rep.to_string(),
            format!("{:.1}", b.bytes as f64 / (1 << 20) as f64),
            format!("{:.2}", b.seconds),
            format!("{:.1}", b.mib_s),
            opt(f.and_then(|f| f.read_mib_s)),
            opt(f.and_then(|f| f.write_mib_s)),
            opt(f.and_then(|f| f.copy_mib_s())),
        ]);
    }
    text.push_str(&t.to_string());
    let backup = Spread::of(&r.backups.iter().map(|b| b.mib_s).collect::<Vec<_>>());
    let fio_read = median(&r.fio.iter().filter_map(|f| f.read_mib_s).collect::<Vec<_>>());
    let fio_write = median(&r.fio.iter().filter_map(|f| f.write_mib_s).collect::<Vec<_>>());
    let copy = median(&r.fio.iter().filter_map(|f| f.copy_mib_s()).collect::<Vec<_>>());
    text.push_str(&format!(
        "backup {:.1} MiB/s (median); fio sequential read {fio_read:.1}, write {fio_write:.1}, copy limit {copy:.1} MiB/s\n",
        backup.median
    ));
    figures.push(
        Figure::repeated("backup/mib_s", "base backup rate", backup, "MiB/s")
            .against("fio copy limit on the same disk", copy),
    );
    let mut rt = TextTable::new(["rep", "log MiB", "archived segments", "copy s", "recovery s", "s per GiB of log", "log MiB/s"])
        .title("\nrestore of the last backup with the archive, to its end (copy and check, then one open: redo, undo, checkpoint)");
    for x in &r.restores {
        rt.row([
            x.rep.to_string(),
            format!("{:.1}", x.log_bytes as f64 / (1 << 20) as f64),
            x.archived_segments.to_string(),
            format!("{:.2}", x.copy_s),
            format!("{:.2}", x.recovery_s),
            format!("{:.1}", x.s_per_gib),
            format!("{:.1}", x.log_mib_s),
        ]);
    }
    text.push_str(&rt.to_string());
    if !r.restores.is_empty() {
        let per_gib = Spread::of(&r.restores.iter().map(|x| x.s_per_gib).collect::<Vec<_>>());
        let rate = median(&r.restores.iter().map(|x| x.log_mib_s).collect::<Vec<_>>());
        text.push_str(&format!(
            "restore {:.1} s per GiB of log (median; {rate:.1} MiB of log per second)\n",
            per_gib.median
        ));
        figures.push(
            Figure::repeated("restore/s_per_gib", "restore time per GiB of log", per_gib, "s/GiB").against(
                "fio sequential read of 1 GiB, s",
                if fio_read > 0.0 { 1024.0 / fio_read } else { 0.0 },
            ),
        );
    }
    let restore_rate = median(&r.restores.iter().map(|x| x.log_mib_s).collect::<Vec<_>>());
    BarChart::new("Backup and restore beside fio on the same disk", "MiB/s", ["rate"])
        .subtitle("medians over the repetitions")
        .series("backup", vec![backup.median])
        .series("restore (log replayed)", vec![restore_rate])
        .series("fio seq read", vec![fio_read])
        .series("fio seq write", vec![fio_write])
        .series("copy limit", vec![copy])
        .footnote(env.context.one_line())
        .footnote(r.device.clone())
        .write(env.dir.path(), "backup")?;
    env.dir.write_csv("backups", &r.backups)?;
    env.dir.write_csv("restores", &r.restores)?;
    Ok(())
}
