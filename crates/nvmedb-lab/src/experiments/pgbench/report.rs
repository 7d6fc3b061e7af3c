//! The pgbench experiment's report: per buffer configuration, a table of tps, latency and CPU
//! per transaction of both servers with the nvmedb/PostgreSQL ratio per run; CSV of the samples,
//! points and ratios; a bar chart of tps per buffer configuration and one of the ratios; the
//! headline figures (nvmedb's tps against PostgreSQL's in the same run).
//!
//! Owns: [`report`] and [`sample_line`]. Invariant: every table and chart says what the two
//! servers' memory and durability were (PostgreSQL reads through the OS page cache, nvmedb
//! does not), and names the machine.

use super::{BufferPoint, Mode, PgbenchConfig, PgbenchResults, Point, Sample, Server, Workload};
use crate::error::Result;
use crate::experiment::{RunEnv, Summary};
use crate::report::{BarChart, Figure, TextTable};
use serde::Serialize;

/// One line per measured run, printed as soon as it is measured.
pub fn sample_line(s: &Sample) -> String {
    format!(
        "{} {} -M {} ({}, rep {}): {:.0} tps, latency {:.2} ms, {} failed, server {:.0} µs CPU/txn, pgbench {:.0} µs CPU/txn",
        s.server.label(),
        s.workload.name(),
        s.mode.name(),
        s.buffer.label(),
        s.rep + 1,
        s.tps,
        s.latency_ms,
        s.failed,
        s.server_cpu_ns as f64 / 1e3 / s.transactions.max(1) as f64,
        s.client_cpu_ns as f64 / 1e3 / s.transactions.max(1) as f64,
    )
}

/// nvmedb against PostgreSQL in one (buffer, workload, mode).
#[derive(Debug, Clone, Serialize)]
struct Ratio {
    buffer: String,
    workload: &'static str,
    mode: &'static str,
    nvmedb_tps: f64,
    postgres_tps: f64,
    /// nvmedb tps / PostgreSQL tps (medians).
    tps_ratio: f64,
    nvmedb_latency_ms: f64,
    postgres_latency_ms: f64,
    nvmedb_server_cpu_us_per_txn: f64,
    postgres_server_cpu_us_per_txn: f64,
    nvmedb_client_cpu_us_per_txn: f64,
    postgres_client_cpu_us_per_txn: f64,
}

/// Flat CSV row of a point.
#[derive(Debug, Clone, Serialize)]
struct Row {
    buffer: String,
    workload: &'static str,
    mode: &'static str,
    server: &'static str,
    tps_median: f64,
    tps_min: f64,
    tps_max: f64,
    latency_ms_median: f64,
    latency_ms_min: f64,
    latency_ms_max: f64,
    failed: u64,
    server_cpu_us_per_txn: f64,
    client_cpu_us_per_txn: f64,
    cpu_cores: f64,
}

/// Flat CSV row of a sample.
#[derive(Debug, Clone, Serialize)]
struct SampleRow {
    rep: usize,
    buffer: String,
    workload: &'static str,
    mode: &'static str,
    server: &'static str,
    tps: f64,
    latency_ms: f64,
    transactions: u64,
    failed: u64,
    wall_s: f64,
    server_cpu_ms: f64,
    client_cpu_ms: f64,
}

fn find(r: &PgbenchResults, p: &Point, server: Server) -> Option<Point> {
    r.points
        .iter()
        .find(|q| q.buffer == p.buffer && q.workload == p.workload && q.mode == p.mode && q.server == server)
        .cloned()
}

fn ratios(r: &PgbenchResults) -> Vec<Ratio> {
    r.points
        .iter()
        .filter(|p| p.server == Server::Nvmedb)
        .filter_map(|nv| {
            let pg = find(r, nv, Server::Postgres)?;
            Some(Ratio {
                buffer: nv.buffer.label(),
                workload: nv.workload.name(),
                mode: nv.mode.name(),
                nvmedb_tps: nv.tps.median,
                postgres_tps: pg.tps.median,
                tps_ratio: nv.tps.median / pg.tps.median.max(1e-9),
                nvmedb_latency_ms: nv.latency_ms.median,
                postgres_latency_ms: pg.latency_ms.median,
                nvmedb_server_cpu_us_per_txn: nv.server_cpu_us_per_txn,
                postgres_server_cpu_us_per_txn: pg.server_cpu_us_per_txn,
                nvmedb_client_cpu_us_per_txn: nv.client_cpu_us_per_txn,
                postgres_client_cpu_us_per_txn: pg.client_cpu_us_per_txn,
            })
        })
        .collect()
}

fn category(w: Workload, m: Mode) -> String {
    let w = match w {
        Workload::SelectOnly => "-S",
        Workload::TpcbLike => "TPC-B-like",
    };
    format!("{w} {}", m.name())
}

fn buffer_line(b: &BufferPoint) -> String {
    format!(
        "{}: nvmedb table buffer {:.1} MiB + its indexes cached (index buffer limit {:.1} MiB) = {:.1} % of its data; PostgreSQL shared_buffers {:.1} MiB = {:.1} % of its data",
        b.spec.label(),
        b.nvmedb_table_buffer_bytes as f64 / (1 << 20) as f64,
        b.nvmedb_index_buffer_bytes as f64 / (1 << 20) as f64,
        b.pct_of_nvmedb_data,
        b.postgres_shared_buffers_bytes as f64 / (1 << 20) as f64,
        b.pct_of_postgres_data
    )
}

/// How much of each server's data files the OS page cache held after the runs of one buffer.
pub fn page_cache_line(b: &BufferPoint) -> String {
    format!(
        "{}: after its runs {:.0} % of PostgreSQL's data files were in the OS page cache (its shared_buffers misses are memory copies), {:.0} % of nvmedb's (it reads O_DIRECT: its misses are disk reads)",
        b.spec.label(),
        b.postgres_page_cache_pct,
        b.nvmedb_page_cache_pct
    )
}

/// Writes samples.csv, points.csv, ratios.csv, the charts, and returns the summary.
pub fn report(cfg: &PgbenchConfig, r: &PgbenchResults, env: &RunEnv) -> Result<Summary> {
    let ratios = write_csvs(r, env)?;
    let mut text = header(cfg, r, env);
    let mut figures = Vec::new();
    for b in &r.buffers {
        let t = buffer_table(r, b, &mut figures);
        text.push_str(&format!("\n{t}{}\n", page_cache_line(b)));
        charts(cfg, r, env, b)?;
    }
    text.push_str("\nsrv µs/txn: CPU time of the server (nvmedb: its process; PostgreSQL: postmaster and backends) per transaction; pgbench µs/txn: the client's\n");
    if !ratios.is_empty() {
        ratio_chart(cfg, r, env, &ratios)?;
    }
    Ok(Summary { text, figures })
}

/// Writes `samples.csv`, `points.csv` and `ratios.csv`; returns the ratios.
fn write_csvs(r: &PgbenchResults, env: &RunEnv) -> Result<Vec<Ratio>> {
    let samples: Vec<SampleRow> = r
        .samples
        .iter()
        .map(|s| SampleRow {
            rep: s.rep,
            buffer: s.buffer.label(),
            workload: s.workload.name(),
            mode: s.mode.name(),
            server: s.server.label(),
            tps: s.tps,
            latency_ms: s.latency_ms,
            transactions: s.transactions,
            failed: s.failed,
            wall_s: s.wall_s,
            server_cpu_ms: s.server_cpu_ns as f64 / 1e6,
            client_cpu_ms: s.client_cpu_ns as f64 / 1e6,
        })
        .collect();
    env.dir.write_csv("samples", &samples)?;
    let rows: Vec<Row> = r
        .points
        .iter()
        .map(|p| Row {
            buffer: p.buffer.label(),
            workload: p.workload.name(),
            mode: p.mode.name(),
            server: p.server.label(),
            tps_median: p.tps.median,
            tps_min: p.tps.min,
            tps_max: p.tps.max,
            latency_ms_median: p.latency_ms.median,
            latency_ms_min: p.latency_ms.min,
            latency_ms_max: p.latency_ms.max,
            failed: p.failed,
            server_cpu_us_per_txn: p.server_cpu_us_per_txn,
            client_cpu_us_per_txn: p.client_cpu_us_per_txn,
            cpu_cores: p.cpu_cores,
        })
        .collect();
    env.dir.write_csv("points", &rows)?;
    let ratios = ratios(r);
    env.dir.write_csv("ratios", &ratios)?;
    Ok(ratios)
}

/// The report's opening lines: the run, the durability and memory settings, the loads.
fn header(cfg: &PgbenchConfig, r: &PgbenchResults, env: &RunEnv) -> String {
    let durability = "durability: both servers wait at commit for fdatasync of their log (PostgreSQL: fsync=on, synchronous_commit=on; nvmedb: its default single file log, fdatasync'd, on the same disk)";
    let page_cache = "memory: PostgreSQL 15 reads through the OS page cache (it has no direct I/O), so what misses its shared_buffers is served from RAM; nvmedb reads O_DIRECT from the disk";
    let mut text = format!(
        "# nvmedb lab pgbench — {}\npgbench scale {} ({} accounts), {} clients on {} threads, {} s per run after a {} s select-only warm-up per server start, {} repetitions interleaved (median [min..max]), --max-tries {}; {}\n{durability}\n{page_cache}; PostgreSQL autovacuum off (pgbench vacuums before each run)\n",
        env.context.one_line(),
        cfg.scale,
        cfg.scale as u64 * 100_000,
        cfg.clients,
        cfg.threads,
        cfg.secs,
        cfg.warmup_secs,
        cfg.reps,
        cfg.max_tries,
        r.postgres_version,
    );
    for l in &r.loads {
        text.push_str(&format!(
            "load of {}: pgbench -i -s {} in {:.1} s, {}\n",
            l.server.label(),
            cfg.scale,
            l.seconds,
            l.size_text()
        ));
    }
    text
}

/// The table of one buffer size (nvmedb beside PostgreSQL per workload and mode), adding each
/// row's figures.
fn buffer_table(r: &PgbenchResults, b: &BufferPoint, figures: &mut Vec<Figure>) -> TextTable {
    let mut t = TextTable::new([
        "workload",
        "mode",
        "nvmedb tps",
        "PostgreSQL tps",
        "nvmedb/PG",
        "nvmedb lat ms",
        "PG lat ms",
        "nvmedb srv µs/txn",
        "PG srv µs/txn",
        "pgbench µs/txn nv|PG",
        "failed nv|PG",
    ])
    .title(buffer_line(b));
    for nv in r.points.iter().filter(|p| p.buffer == b.spec && p.server == Server::Nvmedb) {
        let Some(pg) = find(r, nv, Server::Postgres) else { continue };
        let ratio = nv.tps.median / pg.tps.median.max(1e-9);
        t.row([
            nv.workload.name().to_string(),
            nv.mode.name().to_string(),
            format!("{:.0} [{:.0}..{:.0}]", nv.tps.median, nv.tps.min, nv.tps.max),
            format!("{:.0} [{:.0}..{:.0}]", pg.tps.median, pg.tps.min, pg.tps.max),
            format!("{ratio:.2}x"),
            format!("{:.2}", nv.latency_ms.median),
            format!("{:.2}", pg.latency_ms.median),
            format!("{:.0}", nv.server_cpu_us_per_txn),
            format!("{:.0}", pg.server_cpu_us_per_txn),
            format!("{:.0}|{:.0}", nv.client_cpu_us_per_txn, pg.client_cpu_us_per_txn),
            format!("{}|{}", nv.failed, pg.failed),
        ]);
        let name = format!("{}/{}/{}", b.spec.stem(), nv.workload.name(), nv.mode.name());
        let what = format!("pgbench {} -M {}, {}", nv.workload.name(), nv.mode.name(), b.spec.label());
        figures.push(
            Figure::repeated(format!("{name}/nvmedb_tps"), format!("nvmedb tps, {what}"), nv.tps, "tps")
                .against("PostgreSQL 15 in the same run (equal durability and buffer memory)", pg.tps.median),
        );
        figures.push(Figure::new(
            format!("{name}/ratio"),
            format!("nvmedb / PostgreSQL tps, {what}"),
            ratio,
            "x",
        ));
    }
    t
}

fn subtitle(cfg: &PgbenchConfig) -> String {
    format!(
        "pgbench scale {}, {} clients, {} s x {} interleaved repetitions (median), equal durability (fdatasync at commit)",
        cfg.scale, cfg.clients, cfg.secs, cfg.reps
    )
}

fn charts(cfg: &PgbenchConfig, r: &PgbenchResults, env: &RunEnv, b: &BufferPoint) -> Result<()> {
    let nv: Vec<&Point> =
        r.points.iter().filter(|p| p.buffer == b.spec && p.server == Server::Nvmedb).collect();
    let pairs: Vec<(&Point, Point)> =
        nv.into_iter().filter_map(|p| Some((p, find(r, p, Server::Postgres)?))).collect();
    if pairs.is_empty() {
        return Ok(());
    }
    let chart = BarChart::new(
        format!("pgbench tps: nvmedb vs PostgreSQL 15 — {}", b.spec.label()),
        "transactions / s (log scale)",
        pairs.iter().map(|(p, _)| category(p.workload, p.mode)),
    )
    .subtitle(subtitle(cfg))
    .series("nvmedb", pairs.iter().map(|(p, _)| p.tps.median).collect())
    .series(
        r.postgres_version.split(" (Debian").next().unwrap_or("PostgreSQL"),
        pairs.iter().map(|(_, q)| q.tps.median).collect(),
    )
    .log_y(true)
    .footnote(buffer_line(b))
    .footnote("PostgreSQL reads through the OS page cache; nvmedb reads O_DIRECT")
    .footnote(env.context.one_line());
    chart.write(env.dir.path(), &format!("tps_{}", b.spec.stem()))?;
    Ok(())
}

fn ratio_chart(cfg: &PgbenchConfig, r: &PgbenchResults, env: &RunEnv, ratios: &[Ratio]) -> Result<()> {
    let mut cats: Vec<String> = Vec::new();
    for p in r.points.iter().filter(|p| p.server == Server::Nvmedb) {
        let c = category(p.workload, p.mode);
        if !cats.contains(&c) {
            cats.push(c);
        }
    }
    let mut chart = BarChart::new("nvmedb / PostgreSQL 15 tps (1 = equal)", "tps ratio", cats.clone())
        .subtitle(subtitle(cfg))
        .footnote(env.context.one_line());
    for b in &r.buffers {
        let values: Vec<f64> = r
            .points
            .iter()
            .filter(|p| p.server == Server::Nvmedb && p.buffer == b.spec)
            .map(|p| {
                let label = b.spec.label();
                ratios
                    .iter()
                    .find(|x| x.buffer == label && x.workload == p.workload.name() && x.mode == p.mode.name())
                    .map_or(0.0, |x| x.tps_ratio)
            })
            .collect();
        if values.len() == cats.len() {
            chart = chart.series(b.spec.label(), values);
        }
    }
    chart.write(env.dir.path(), "ratio")?;
    Ok(())
}
