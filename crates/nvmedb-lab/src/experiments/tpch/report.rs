//! The TPC-H experiment's report: one table per device (query time, pages/s, MiB/s, hit ratio,
//! latch waits, CPU, share of the device limit), the SEP/SHR-k ratios, the headline figures, and
//! seed 004's plots — pages read per second and query time vs workers per policy, and SEP's
//! speed-up over each SHR-k — plus the share of the device limit vs workers, for every device,
//! as PNG and SVG, with CSV/JSON of the points and of every limit probe.
//!
//! Owns: [`report`] and [`point_line`]. Invariant: emulated devices carry EMULATED and their
//! achieved latency in every table row, plot title and figure label.

use super::{Point, TpchConfig, TpchResults};
use crate::error::Result;
use crate::experiment::{RunEnv, Summary};
use crate::report::{Figure, LineChart, Series, SeriesStyle, TextTable};
use serde::Serialize;

/// One line per point, printed as soon as it is measured.
pub fn point_line(p: &Point) -> String {
    format!(
        "{} [{}] {:>7} x{:<2}: {:.3} s [{:.3}..{:.3}], {:.0} pages/s ({:.0} MiB/s, {:.0} % of the device limit {:.0}; probe before the queries {}, after {}), hit ratio {:.3}, latch waits {:.0} ({:.1} ms, {:.2} % of worker time), {:.2} CPU cores, {:.0} pages per CPU-s{}",
        p.device,
        p.kind,
        p.policy,
        p.workers,
        p.seconds.median,
        p.seconds.min,
        p.seconds.max,
        p.pages_per_s.median,
        p.mib_per_s,
        p.share_of_limit * 100.0,
        p.limit_iops,
        opt(p.limit_probe_first_iops),
        opt(p.limit_probe_after_iops),
        p.hit_ratio,
        p.latch_waits,
        p.latch_wait_ms,
        p.latch_wait_share * 100.0,
        p.cpu_cores,
        p.pages_per_cpu_s,
        p.pages_per_engine_cpu_s.map_or(String::new(), |v| format!(" ({v:.0} net of the emulator)")),
    )
}

/// Where a point's rate falls short: each phase's pages/s against the engine replay's over the
/// same file, both timed from the workers' meeting before the table to the one after it.
pub fn phase_line(p: &Point) -> String {
    let parts: Vec<String> = crate::workload::tpch::TABLES
        .iter()
        .zip(p.phase_pages_per_s.iter().zip(&p.phase_limit_iops).zip(&p.phase_cpu_cores))
        .map(|(t, ((&q, &l), &cpu))| {
            if l > 0.0 {
                format!("{t} {q:.0} pages/s = {:.1} % of the replay's {l:.0} ({cpu:.2} cores)", q / l * 100.0)
            } else {
                format!("{t} {q:.0} pages/s ({cpu:.2} cores)")
            }
        })
        .collect();
    format!("  per phase (scan and hash build, meeting to meeting): {}", parts.join(", "))
}

fn opt(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |v| format!("{v:.0}"))
}

/// A SEP/SHR-k ratio at one worker count.
#[derive(Debug, Clone, Serialize)]
struct Ratio {
    device: String,
    workers: usize,
    shared: String,
    /// SHR-k query time / SEP query time (> 1: SEP faster).
    speedup: f64,
    /// SEP pages/s / SHR-k pages/s.
    iops_ratio: f64,
    shared_latch_wait_ms: f64,
    sep_latch_wait_ms: f64,
}

/// Flat CSV row of a point.
#[derive(Debug, Clone, Serialize)]
struct Row<'a> {
    device: &'a str,
    kind: &'a str,
    policy: &'a str,
    workers: usize,
    buffer_mib: f64,
    seconds_median: f64,
    seconds_min: f64,
    seconds_max: f64,
    pages_per_s: f64,
    mib_per_s: f64,
    hit_ratio: f64,
    reads_per_page: f64,
    overlapped: f64,
    latch_waits: f64,
    latch_wait_ms: f64,
    latch_wait_share: f64,
    cpu_cores: f64,
    pages_per_cpu_s: f64,
    limit_iops: f64,
    limit_probe_first_iops: Option<f64>,
    limit_probe_after_iops: Option<f64>,
    share_of_limit: f64,
    customer_pages_per_s: f64,
    customer_limit_iops: f64,
    orders_pages_per_s: f64,
    orders_limit_iops: f64,
    lineitem_pages_per_s: f64,
    lineitem_limit_iops: f64,
    customer_cpu_cores: f64,
    orders_cpu_cores: f64,
    lineitem_cpu_cores: f64,
}

fn ratios(r: &TpchResults) -> Vec<Ratio> {
    let mut out = Vec::new();
    for sep in r.points.iter().filter(|p| p.policy == "SEP") {
        for shr in r
            .points
            .iter()
            .filter(|p| p.policy != "SEP" && p.device == sep.device && p.workers == sep.workers)
        {
            out.push(Ratio {
                device: sep.device.clone(),
                workers: sep.workers,
                shared: shr.policy.clone(),
                speedup: shr.seconds.median / sep.seconds.median,
                iops_ratio: sep.pages_per_s.median / shr.pages_per_s.median,
                shared_latch_wait_ms: shr.latch_wait_ms,
                sep_latch_wait_ms: sep.latch_wait_ms,
            });
        }
    }
    out
}

fn stem(device: &str) -> String {
    device.replace(' ', "_")
}

/// Writes points.csv, ratios.csv, limits.csv, the plots, and returns the summary.
pub fn report(cfg: &TpchConfig, r: &TpchResults, env: &RunEnv) -> Result<Summary> {
    env.dir.write_csv("points", &point_rows(r))?;
    let ratios = ratios(r);
    env.dir.write_csv("ratios", &ratios)?;
    env.dir.write_csv("limits", &r.limits)?;
    let mut text = header_text(cfg, r, env);
    let mut figures = Vec::new();
    for (dev, label) in &r.device_labels {
        let pts: Vec<&Point> = r.points.iter().filter(|p| &p.device == dev).collect();
        text.push_str(&format!("\n{}", points_table(label, &pts)));
        if pts.iter().any(|p| p.buffer_raised) {
            text.push_str(&format!(
                "* buffer raised from the configured size to 8 read-ahead batches per worker ({} pages each)\n",
                cfg.read_ahead
            ));
        }
        text.push_str(&format!("\n{}", limits_table(cfg, r, dev, label)));
        let rs: Vec<&Ratio> = ratios.iter().filter(|x| &x.device == dev).collect();
        if !rs.is_empty() {
            text.push_str(&format!("\n{}", ratios_table(label, &rs)));
        }
        headline(dev, label, &pts, &mut text, &mut figures);
        for x in &rs {
            figures.push(Figure::new(
                format!("{}/workers{}/sep_over_{}", stem(dev), x.workers, x.shared.to_lowercase()),
                format!("SEP speed-up over {} at {} workers, {label}", x.shared, x.workers),
                x.speedup,
                "x",
            ));
        }
        plots(cfg, env, dev, label, &pts, &rs)?;
    }
    Ok(Summary { text, figures })
}

/// One CSV row per measured point.
fn point_rows(r: &TpchResults) -> Vec<Row<'_>> {
    r.points
        .iter()
        .map(|p| Row {
            device: &p.device,
            kind: &p.kind,
            policy: &p.policy,
            workers: p.workers,
            buffer_mib: p.buffer_bytes as f64 / (1 << 20) as f64,
            seconds_median: p.seconds.median,
            seconds_min: p.seconds.min,
            seconds_max: p.seconds.max,
            pages_per_s: p.pages_per_s.median,
            mib_per_s: p.mib_per_s,
            hit_ratio: p.hit_ratio,
            reads_per_page: p.reads_per_page,
            overlapped: p.overlapped,
            latch_waits: p.latch_waits,
            latch_wait_ms: p.latch_wait_ms,
            latch_wait_share: p.latch_wait_share,
            cpu_cores: p.cpu_cores,
            pages_per_cpu_s: p.pages_per_cpu_s,
            limit_iops: p.limit_iops,
            limit_probe_first_iops: p.limit_probe_first_iops,
            limit_probe_after_iops: p.limit_probe_after_iops,
            share_of_limit: p.share_of_limit,
            customer_pages_per_s: p.phase_pages_per_s[0],
            customer_limit_iops: p.phase_limit_iops[0],
            orders_pages_per_s: p.phase_pages_per_s[1],
            orders_limit_iops: p.phase_limit_iops[1],
            lineitem_pages_per_s: p.phase_pages_per_s[2],
            lineitem_limit_iops: p.phase_limit_iops[2],
            customer_cpu_cores: p.phase_cpu_cores[0],
            orders_cpu_cores: p.phase_cpu_cores[1],
            lineitem_cpu_cores: p.phase_cpu_cores[2],
        })
        .collect()
}

/// The summary's opening lines: the data, the query, how the limit was measured, the answer.
fn header_text(cfg: &TpchConfig, r: &TpchResults, env: &RunEnv) -> String {
    let load = &r.load;
    let mut text = format!(
        "# nvmedb lab tpch — {}\nTPC-H SF {} ({} customers, {} orders, {} lineitems; {:.0} MiB in {} KiB pages; {}), Q3 segment {} date {}, read-ahead {} pages per worker ({}), lock-free hits {}\n",
        env.context.one_line(),
        cfg.sf,
        load.rows[0],
        load.rows[1],
        load.rows[2],
        load.heap_bytes as f64 / (1 << 20) as f64,
        cfg.page_size / 1024,
        if load.reused { "reused load".to_string() } else { format!("loaded in {:.1} s", load.load_s) },
        cfg.params.segment,
        cfg.params.date,
        cfg.read_ahead,
        if cfg.async_read_ahead {
            "the window kept in flight, topped up half a window at a time, engine default"
        } else {
            "synchronous batches"
        },
        if cfg.lock_free_hits { "on (engine default)" } else { "off (seed 004's locked hit path)" },
    );
    text.push_str(&format!(
        "device limit: {} passes of {} (at each worker count as the query's), replayed by the engine's Device and by fio on the disk; the probe runs before the queries of a point in even repetitions and after them in odd ones; limit = median over the repetitions of the higher of the two\n",
        cfg.probe_passes, r.probe_pattern
    ));
    text.push_str(&format!(
        "answer (equal to the independent evaluation over the generator's rows in every query):\n{}\n",
        r.answer.iter().map(|a| format!("  {}", a.line())).collect::<Vec<_>>().join("\n")
    ));
    text
}

/// One device's points.
fn points_table(label: &str, pts: &[&Point]) -> TextTable {
    let mut t = TextTable::new([
        "policy",
        "workers",
        "buffer MiB",
        "query s",
        "pages/s",
        "MiB/s",
        "hit ratio",
        "reads/page",
        "overlapped",
        "latch waits",
        "latch ms",
        "CPU cores",
        "pages/CPU-s",
        "limit pages/s",
        "% of limit",
    ])
    .title(label);
    for p in pts {
        t.row([
            p.policy.clone(),
            p.workers.to_string(),
            format!(
                "{:.0}{}",
                p.buffer_bytes as f64 / (1 << 20) as f64,
                if p.buffer_raised { "*" } else { "" }
            ),
            format!("{:.3} [{:.3}..{:.3}]", p.seconds.median, p.seconds.min, p.seconds.max),
            format!("{:.0}", p.pages_per_s.median),
            format!("{:.0}", p.mib_per_s),
            format!("{:.3}", p.hit_ratio),
            format!("{:.3}", p.reads_per_page),
            format!("{:.2}", p.overlapped),
            format!("{:.0}", p.latch_waits),
            format!("{:.2}", p.latch_wait_ms),
            format!("{:.2}", p.cpu_cores),
            match p.pages_per_engine_cpu_s {
                Some(v) => format!("{:.0} ({v:.0} net)", p.pages_per_cpu_s),
                None => format!("{:.0}", p.pages_per_cpu_s),
            },
            format!("{:.0}", p.limit_iops),
            format!("{:.1}", p.share_of_limit * 100.0),
        ]);
    }
    t
}

/// One device's limit probes.
fn limits_table(cfg: &TpchConfig, r: &TpchResults, dev: &str, label: &str) -> TextTable {
    let lims: Vec<_> = r.limits.iter().filter(|l| l.device == dev).collect();
    let mut lt = TextTable::new([
            "workers",
            "rep",
            "probe",
            "engine pages/s",
            "batch",
            "CPU µs/read",
            "fio pages/s",
            "fio batch",
        ])
        .title(format!(
            "{label}: device limit, Q3's reads replayed ({} KiB pages, each worker its partition of every file, synchronous batches of the read-ahead or half of it, the better)",
            cfg.page_size / 1024
        ));
    for l in &lims {
        lt.row([
            l.workers.to_string(),
            l.rep.to_string(),
            if l.probe_first { "before queries".into() } else { "after queries".to_string() },
            format!("{:.0}", l.engine_iops),
            l.engine_batch.to_string(),
            format!("{:.2}", l.engine_cpu_us_per_read),
            opt(l.fio_iops),
            if l.fio_batch > 0 { l.fio_batch.to_string() } else { "-".into() },
        ]);
    }
    lt
}

/// One device's SEP against SHR-k ratios.
fn ratios_table(label: &str, rs: &[&Ratio]) -> TextTable {
    let mut rt = TextTable::new([
        "workers",
        "vs",
        "SEP speed-up (time)",
        "SEP/SHR pages/s",
        "SHR latch ms",
        "SEP latch ms",
    ])
    .title(format!("{label}: SEP vs SHR-k"));
    for x in rs {
        rt.row([
            x.workers.to_string(),
            x.shared.clone(),
            format!("{:.2}x", x.speedup),
            format!("{:.2}", x.iops_ratio),
            format!("{:.2}", x.shared_latch_wait_ms),
            format!("{:.2}", x.sep_latch_wait_ms),
        ]);
    }
    rt
}

/// The headline: the best point's share of the limit on this device, as text and figure.
fn headline(dev: &str, label: &str, pts: &[&Point], text: &mut String, figures: &mut Vec<Figure>) {
    if let Some(best) = pts.iter().max_by(|a, b| a.pages_per_s.median.total_cmp(&b.pages_per_s.median)) {
        let line = format!(
                "{label}: best {} x{}: {:.0} pages/s = {:.1} % of the device limit {:.0} pages/s (the scans' own reads at the same workers and depth; probe before the queries {}, after {})\n",
                best.policy,
                best.workers,
                best.pages_per_s.median,
                best.share_of_limit * 100.0,
                best.limit_iops,
                opt(best.limit_probe_first_iops),
                opt(best.limit_probe_after_iops),
            );
        text.push_str(&format!("\n{line}"));
        text.push_str(&format!("{}\n", phase_line(best)));
        figures.push(
            Figure::repeated(
                format!("{}/best/pages_per_s", stem(dev)),
                format!("Q3 pages read per second, {label}, {} x{}", best.policy, best.workers),
                best.pages_per_s,
                "pages/s",
            )
            .against("device limit (Q3's reads replayed by fio and the engine)", best.limit_iops),
        );
    }
}

fn plots(
    cfg: &TpchConfig,
    env: &RunEnv,
    dev: &str,
    label: &str,
    pts: &[&Point],
    rs: &[&Ratio],
) -> Result<()> {
    let ticks: Vec<f64> = cfg.workers.iter().map(|&w| w as f64).collect();
    let log = ticks.len() > 2;
    let machine = env.context.one_line();
    let sub =
        format!("TPC-H SF {}, {} KiB pages, read-ahead {}", cfg.sf, cfg.page_size / 1024, cfg.read_ahead);
    let series_of = |f: &dyn Fn(&Point) -> f64| -> Vec<Series> {
        let mut names: Vec<&str> = Vec::new();
        for p in pts {
            if !names.contains(&p.policy.as_str()) {
                names.push(&p.policy);
            }
        }
        names
            .iter()
            .map(|n| {
                Series::new(
                    *n,
                    pts.iter().filter(|p| p.policy == *n).map(|p| (p.workers as f64, f(p))).collect(),
                )
            })
            .collect()
    };
    let mut iops = LineChart::new(format!("Q3 pages read per second — {label}"), "workers", "pages read / s")
        .subtitle(sub.clone())
        .log_x(log)
        .x_ticks(ticks.clone())
        .footnote(machine.clone());
    for s in series_of(&|p| p.pages_per_s.median) {
        iops = iops.series(s);
    }
    let mut limit: Vec<(f64, f64)> = Vec::new();
    for p in pts {
        if !limit.iter().any(|&(w, _)| w == p.workers as f64) {
            limit.push((p.workers as f64, p.limit_iops));
        }
    }
    iops = iops.series(Series::new("device limit (Q3's reads replayed)", limit).style(SeriesStyle::Dashed));
    iops.write(env.dir.path(), &format!("iops_{}", stem(dev)))?;
    let mut share = LineChart::new(
        format!("Q3 pages/s as % of the device limit — {label}"),
        "workers",
        "% of the limit (Q3's reads replayed, same workers and depth)",
    )
    .subtitle(sub.clone())
    .log_x(log)
    .x_ticks(ticks.clone())
    .footnote(machine.clone());
    for s in series_of(&|p| p.share_of_limit * 100.0) {
        share = share.series(s);
    }
    let goal = ticks.iter().map(|&w| (w, 95.0)).collect();
    share = share.series(Series::new("95 % goal", goal).style(SeriesStyle::Dashed));
    share.write(env.dir.path(), &format!("share_{}", stem(dev)))?;
    let mut time = LineChart::new(format!("Q3 query time — {label}"), "workers", "seconds")
        .subtitle(sub.clone())
        .log_x(log)
        .x_ticks(ticks.clone())
        .footnote(machine.clone());
    for s in series_of(&|p| p.seconds.median) {
        time = time.series(s);
    }
    time.write(env.dir.path(), &format!("time_{}", stem(dev)))?;
    if !rs.is_empty() {
        let mut ratio =
            LineChart::new(format!("SEP speed-up over SHR-k — {label}"), "workers", "SHR-k time / SEP time")
                .subtitle(sub)
                .log_x(log)
                .x_ticks(ticks)
                .footnote(machine);
        let mut names: Vec<&str> = Vec::new();
        for x in rs {
            if !names.contains(&x.shared.as_str()) {
                names.push(&x.shared);
            }
        }
        for n in names {
            let pts = rs.iter().filter(|x| x.shared == n).map(|x| (x.workers as f64, x.speedup)).collect();
            ratio = ratio.series(Series::new(format!("SEP / {n}"), pts));
        }
        ratio.write(env.dir.path(), &format!("ratio_{}", stem(dev)))?;
    }
    Ok(())
}
