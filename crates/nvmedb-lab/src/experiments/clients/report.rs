//! The clients experiment's report: per buffer configuration, a table of both servers'
//! throughput, latency, retries and CPU per transaction with the nvmedb/PostgreSQL ratio; CSV
//! of the samples, points and ratios; a bar chart of the ratios; the headline figures.
//!
//! Owns: [`report`], [`sample_line`], [`buffer_line`]. Invariant: every table and chart says
//! what the two servers' memory and durability were and names the machine.

use super::{ClientsConfig, ClientsResults, Point, Sample, Server};
use crate::error::Result;
use crate::experiment::{RunEnv, Summary};
use crate::experiments::pgbench::BufferPoint;
use crate::report::{BarChart, Figure, TextTable};
use serde::Serialize;

/// One line per measured run, printed as soon as it is measured.
pub fn sample_line(s: &Sample) -> String {
    let tpmc = if s.workload == "tpcc" { format!(", tpmC {:.0}", s.tpmc) } else { String::new() };
    format!(
        "{} {} ({}, rep {}): {:.0} tps{tpmc}, latency {:.2} ms, {} retried, server {:.0} µs CPU/txn, client {:.0} µs CPU/txn",
        s.server.label(),
        s.workload,
        s.buffer.label(),
        s.rep + 1,
        s.tps,
        s.latency_ms,
        s.retries,
        s.server_cpu_ns as f64 / 1e3 / s.transactions.max(1) as f64,
        s.client_cpu_ns as f64 / 1e3 / s.transactions.max(1) as f64,
    )
}

/// The memory both servers get in one buffer configuration.
pub fn buffer_line(b: &BufferPoint) -> String {
    format!(
        "{}: nvmedb table buffer {:.1} MiB + its indexes cached = {:.1} % of its data; PostgreSQL shared_buffers {:.1} MiB = {:.1} % of its data",
        b.spec.label(),
        b.nvmedb_table_buffer_bytes as f64 / (1 << 20) as f64,
        b.pct_of_nvmedb_data,
        b.postgres_shared_buffers_bytes as f64 / (1 << 20) as f64,
        b.pct_of_postgres_data
    )
}

/// nvmedb against PostgreSQL in one (buffer, workload).
#[derive(Debug, Clone, Serialize)]
struct Ratio {
    buffer: String,
    workload: String,
    nvmedb_tps: f64,
    postgres_tps: f64,
    /// nvmedb tps / PostgreSQL tps (medians).
    tps_ratio: f64,
    nvmedb_tpmc: f64,
    postgres_tpmc: f64,
    nvmedb_latency_ms: f64,
    postgres_latency_ms: f64,
    nvmedb_retries: u64,
    postgres_retries: u64,
    nvmedb_server_cpu_us_per_txn: f64,
    postgres_server_cpu_us_per_txn: f64,
}

/// Flat CSV row of a sample.
#[derive(Debug, Clone, Serialize)]
struct SampleRow {
    rep: usize,
    buffer: String,
    workload: String,
    server: &'static str,
    tps: f64,
    tpmc: f64,
    latency_ms: f64,
    transactions: u64,
    retries: u64,
    wall_s: f64,
    server_cpu_ms: f64,
    client_cpu_ms: f64,
}

/// Flat CSV row of a point.
#[derive(Debug, Clone, Serialize)]
struct Row {
    buffer: String,
    workload: String,
    server: &'static str,
    tps_median: f64,
    tps_min: f64,
    tps_max: f64,
    tpmc: f64,
    latency_ms: f64,
    retries: u64,
    server_cpu_us_per_txn: f64,
    client_cpu_us_per_txn: f64,
}

fn peer<'a>(r: &'a ClientsResults, p: &Point) -> Option<&'a Point> {
    r.points.iter().find(|q| q.buffer == p.buffer && q.workload == p.workload && q.server == Server::Postgres)
}

fn ratios(r: &ClientsResults) -> Vec<Ratio> {
    r.points
        .iter()
        .filter(|p| p.server == Server::Nvmedb)
        .filter_map(|nv| {
            let pg = peer(r, nv)?;
            Some(Ratio {
                buffer: nv.buffer.label(),
                workload: nv.workload.clone(),
                nvmedb_tps: nv.tps.median,
                postgres_tps: pg.tps.median,
                tps_ratio: nv.tps.median / pg.tps.median.max(1e-9),
                nvmedb_tpmc: nv.tpmc,
                postgres_tpmc: pg.tpmc,
                nvmedb_latency_ms: nv.latency_ms,
                postgres_latency_ms: pg.latency_ms,
                nvmedb_retries: nv.retries,
                postgres_retries: pg.retries,
                nvmedb_server_cpu_us_per_txn: nv.server_cpu_us_per_txn,
                postgres_server_cpu_us_per_txn: pg.server_cpu_us_per_txn,
            })
        })
        .collect()
}

/// Writes samples.csv, points.csv, ratios.csv and the chart; returns the summary.
pub fn report(cfg: &ClientsConfig, r: &ClientsResults, env: &RunEnv) -> Result<Summary> {
    let samples: Vec<SampleRow> = r
        .samples
        .iter()
        .map(|s| SampleRow {
            rep: s.rep,
            buffer: s.buffer.label(),
            workload: s.workload.clone(),
            server: s.server.label(),
            tps: s.tps,
            tpmc: s.tpmc,
            latency_ms: s.latency_ms,
            transactions: s.transactions,
            retries: s.retries,
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
            workload: p.workload.clone(),
            server: p.server.label(),
            tps_median: p.tps.median,
            tps_min: p.tps.min,
            tps_max: p.tps.max,
            tpmc: p.tpmc,
            latency_ms: p.latency_ms,
            retries: p.retries,
            server_cpu_us_per_txn: p.server_cpu_us_per_txn,
            client_cpu_us_per_txn: p.client_cpu_us_per_txn,
        })
        .collect();
    env.dir.write_csv("points", &rows)?;
    let ratios = ratios(r);
    env.dir.write_csv("ratios", &ratios)?;

    let mut text = header(cfg, r, env);
    let mut figures = Vec::new();
    for b in &r.buffers {
        let mut t = TextTable::new([
            "workload",
            "nvmedb tps",
            "PostgreSQL tps",
            "nvmedb/PG",
            "tpmC nv|PG",
            "lat ms nv|PG",
            "retried nv|PG",
            "srv µs/txn nv|PG",
            "client µs/txn nv|PG",
        ])
        .title(buffer_line(b));
        for nv in r.points.iter().filter(|p| p.buffer == b.spec && p.server == Server::Nvmedb) {
            let Some(pg) = peer(r, nv) else { continue };
            let ratio = nv.tps.median / pg.tps.median.max(1e-9);
            let tpmc =
                if nv.workload == "tpcc" { format!("{:.0}|{:.0}", nv.tpmc, pg.tpmc) } else { "-".into() };
            t.row([
                nv.workload.clone(),
                format!("{:.0} [{:.0}..{:.0}]", nv.tps.median, nv.tps.min, nv.tps.max),
                format!("{:.0} [{:.0}..{:.0}]", pg.tps.median, pg.tps.min, pg.tps.max),
                format!("{ratio:.2}x"),
                tpmc,
                format!("{:.2}|{:.2}", nv.latency_ms, pg.latency_ms),
                format!("{}|{}", nv.retries, pg.retries),
                format!("{:.0}|{:.0}", nv.server_cpu_us_per_txn, pg.server_cpu_us_per_txn),
                format!("{:.0}|{:.0}", nv.client_cpu_us_per_txn, pg.client_cpu_us_per_txn),
            ]);
            let name = format!("{}/{}", b.spec.stem(), nv.workload);
            let what = format!("{}, {}", nv.workload, b.spec.label());
            figures.push(
                Figure::repeated(format!("{name}/nvmedb_tps"), format!("nvmedb tps, {what}"), nv.tps, "tps")
                    .against(
                        "PostgreSQL 15 in the same run (equal durability and buffer memory)",
                        pg.tps.median,
                    ),
            );
            figures.push(Figure::new(
                format!("{name}/ratio"),
                format!("nvmedb / PostgreSQL tps, {what}"),
                ratio,
                "x",
            ));
        }
        text.push_str(&format!(
            "\n{t}after its runs {:.0} % of PostgreSQL's data files were in the OS page cache, {:.0} % of nvmedb's (it reads O_DIRECT)\n",
            b.postgres_page_cache_pct, b.nvmedb_page_cache_pct
        ));
    }
    text.push_str(&format!(
        "\ntps: transactions committed per second (tpcc: all five types; tpmC: New-Orders per minute); retried: serialization failures and deadlocks retried by the client; srv µs/txn: CPU time of the server per transaction; client µs/txn: the client's (sysbench, or the kit's Python terminals)\nthe TPC-C kit's consistency conditions 1-4 held on both servers after every buffer configuration ({} checks)\n",
        r.consistency_checks
    ));
    if !ratios.is_empty() {
        ratio_chart(cfg, r, env, &ratios)?;
    }
    Ok(Summary { text, figures })
}

fn header(cfg: &ClientsConfig, r: &ClientsResults, env: &RunEnv) -> String {
    let mut text = format!(
        "# nvmedb lab clients — {}\nsysbench {} tables x {} rows, {} threads; TPC-C kit {} warehouse(s), {} items, {} customers per district, {} terminals, no think time; {} s per run, {} repetitions interleaved (median [min..max]); {}; {}\ndurability: both servers wait at commit for fdatasync of their log (PostgreSQL: fsync=on, synchronous_commit=on; nvmedb: its default log); both at their default isolation, READ COMMITTED\nmemory: PostgreSQL 15 reads through the OS page cache, so what misses its shared_buffers is served from RAM; nvmedb reads O_DIRECT from the disk\n",
        env.context.one_line(),
        cfg.tables,
        cfg.table_size,
        cfg.threads,
        cfg.warehouses,
        cfg.items,
        cfg.customers,
        cfg.terminals,
        cfg.secs,
        cfg.reps,
        r.postgres_version,
        r.sysbench_version,
    );
    for l in &r.loads {
        text.push_str(&format!("load of {}: {:.1} s, {}\n", l.server.label(), l.seconds, l.size_text()));
    }
    text
}

fn ratio_chart(cfg: &ClientsConfig, r: &ClientsResults, env: &RunEnv, ratios: &[Ratio]) -> Result<()> {
    let mut chart =
        BarChart::new("nvmedb / PostgreSQL 15 throughput (1 = equal)", "tps ratio", cfg.workloads.clone())
            .subtitle(format!(
                "{} s x {} interleaved repetitions (median), equal durability (fdatasync at commit)",
                cfg.secs, cfg.reps
            ))
            .footnote(env.context.one_line());
    for b in &r.buffers {
        let label = b.spec.label();
        let values: Vec<f64> = cfg
            .workloads
            .iter()
            .map(|w| {
                ratios.iter().find(|x| x.buffer == label && &x.workload == w).map_or(0.0, |x| x.tps_ratio)
            })
            .collect();
        chart = chart.series(label, values);
    }
    chart.write(env.dir.path(), "ratio")?;
    Ok(())
}
