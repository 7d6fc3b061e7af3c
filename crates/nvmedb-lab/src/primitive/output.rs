//! Turning the primitive experiment's measurements into summaries, result files, plots, the
//! model comparison and trace charts.
//!
//! Owns: [`summarise`] (min/median/max per point, relative to the device's 100 % median),
//! [`model_rows`], [`targets`], [`assemble`], [`write_all`] (results.csv, results.json,
//! summary.txt, throughput / normalised / model plots) and [`trace_runs`]. Invariants: only
//! sweep points (tracing off) enter the summary; every plot and table names emulated devices as
//! EMULATED (the device label carries it) and the WAL status.

use super::{
    DeviceReport, ModelRow, PointResult, PrimitiveConfig, PrimitiveError, PrimitiveResults, SummaryRow,
    TargetRow, TraceRun, Workload, WAL_STATUS,
};
use crate::machine::RunContext;
use crate::model::{self, ModelInput, ModelPoint};
use crate::report::{
    trace_summary, write_trace_csv, Align, LegendPosition, LineChart, ResultsDir, Series, SeriesStyle,
    TextTable, TraceChart,
};
use nvmedb::trace::Trace;

/// Median of `v` (mean of the middle two for even lengths); 0 for an empty slice.
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// min/median/max of the sweep points (tracing off), in device → workload → buffer order.
pub fn summarise(points: &[PointResult]) -> Vec<SummaryRow> {
    let sweep: Vec<&PointResult> = points.iter().filter(|p| p.phase == "sweep").collect();
    let mut keys: Vec<(String, String, f64)> = Vec::new();
    for p in &sweep {
        let k = (p.device.clone(), p.workload.clone(), p.buffer_pct);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let dev_order: Vec<String> = {
        let mut v: Vec<String> = Vec::new();
        for p in &sweep {
            if !v.contains(&p.device) {
                v.push(p.device.clone());
            }
        }
        v
    };
    keys.sort_by(|a, b| {
        let da = dev_order.iter().position(|d| *d == a.0);
        let db = dev_order.iter().position(|d| *d == b.0);
        da.cmp(&db).then(a.1.cmp(&b.1)).then(a.2.total_cmp(&b.2))
    });
    let mut rows: Vec<SummaryRow> = keys
        .iter()
        .map(|(d, w, pct)| {
            let ps: Vec<&&PointResult> =
                sweep.iter().filter(|p| p.device == *d && p.workload == *w && p.buffer_pct == *pct).collect();
            let col = |f: &dyn Fn(&PointResult) -> f64| median(&ps.iter().map(|p| f(p)).collect::<Vec<_>>());
            let tps: Vec<f64> = ps.iter().map(|p| p.tps).collect();
            SummaryRow {
                device: d.clone(),
                device_label: ps.first().map(|p| p.device_label.clone()).unwrap_or_default(),
                workload: w.clone(),
                buffer_pct: *pct,
                n: ps.len(),
                tps_min: tps.iter().cloned().fold(f64::INFINITY, f64::min),
                tps_median: median(&tps),
                tps_max: tps.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
                relative_pct: None,
                hit_ratio: col(&|p| p.hit_ratio),
                data_reads_per_s: col(&|p| p.data_reads_per_s),
                data_writes_per_s: col(&|p| p.data_writes_per_s),
                io_us_per_read: col(&|p| p.io_us_per_read),
                cpu_us_per_txn: col(&|p| p.cpu_us_per_txn),
                log_kib_per_txn: col(&|p| p.log_kib_per_txn),
                latency_p99_us: col(&|p| p.latency_p99_us),
            }
        })
        .collect();
    let bases: Vec<(String, String, f64)> = rows
        .iter()
        .filter(|r| r.buffer_pct == 100.0)
        .map(|r| (r.device.clone(), r.workload.clone(), r.tps_median))
        .collect();
    for r in &mut rows {
        if let Some((_, _, base)) = bases.iter().find(|(d, w, _)| *d == r.device && *w == r.workload) {
            if *base > 0.0 {
                r.relative_pct = Some(100.0 * r.tps_median / base);
            }
        }
    }
    rows
}

fn smallest_and_full<'a>(
    summary: &'a [SummaryRow],
    device: &str,
    workload: &str,
) -> Option<(&'a SummaryRow, &'a SummaryRow)> {
    let rows: Vec<&SummaryRow> =
        summary.iter().filter(|r| r.device == device && r.workload == workload).collect();
    let small = rows.iter().min_by(|a, b| a.buffer_pct.total_cmp(&b.buffer_pct))?;
    let full = rows.iter().find(|r| r.buffer_pct == 100.0)?;
    (small.buffer_pct < 100.0).then_some((*small, *full))
}

/// The model of seed 000 §3 per (device, workload): t_cpu is the client CPU per transaction at
/// 100 % buffer (no I/O), t_io the device time per table-page read at the smallest buffer.
/// A second model value uses the device's unloaded latency from iobench (`devices`), since the
/// in-run wait also holds time spent queued for a CPU or the device.
pub fn model_rows(summary: &[SummaryRow], devices: &[DeviceReport]) -> Vec<ModelRow> {
    let mut out = Vec::new();
    let mut seen: Vec<(String, String)> = Vec::new();
    for r in summary {
        let k = (r.device.clone(), r.workload.clone());
        if seen.contains(&k) {
            continue;
        }
        seen.push(k);
        let Some((small, full)) = smallest_and_full(summary, &r.device, &r.workload) else { continue };
        if small.io_us_per_read <= 0.0 {
            continue;
        }
        let input = ModelInput::new(full.cpu_us_per_txn, small.io_us_per_read);
        let dev_io = devices.iter().find(|d| d.device == r.device).map_or(0.0, |d| d.read_qd1_mean_us);
        out.push(ModelRow {
            device_label: small.device_label.clone(),
            workload: r.workload.clone(),
            t_cpu_us: input.t_cpu_us,
            t_io_us: input.t_io_us,
            hit_ratio: small.hit_ratio,
            model_pct: 100.0 * input.relative(),
            model_at_hit_ratio_pct: 100.0 * input.relative_at_hit_ratio(small.hit_ratio),
            measured_pct: small.relative_pct.unwrap_or(0.0),
            t_io_device_us: dev_io,
            model_device_pct: (dev_io > 0.0)
                .then(|| 100.0 * ModelInput::new(input.t_cpu_us, dev_io).relative()),
        });
    }
    out
}

/// Issue 5's targets: on emulated optane SELECT ≥ 90 % and UPDATE ≥ 80 % at the smallest
/// buffer; other devices are reported with the paper's numbers where it has them, and the disk
/// with its reads/s as a share of the QD32 page-size read limit.
pub fn targets(summary: &[SummaryRow], devices: &[DeviceReport]) -> Vec<TargetRow> {
    let mut out = Vec::new();
    for d in devices {
        for w in ["select", "update"] {
            let Some((small, full)) = smallest_and_full(summary, &d.device, w) else { continue };
            let (target, paper) = match (d.device.as_str(), w) {
                ("optane", "select") => (Some(90.0), Some(90.0)),
                ("optane", "update") => (Some(80.0), Some(78.0)),
                ("nand", "select") => (None, Some(54.0)),
                ("nand", "update") => (None, Some(34.0)),
                _ => (None, None),
            };
            let limit = read_limit(d);
            out.push(TargetRow {
                device_label: small.device_label.clone(),
                workload: w.into(),
                measured_pct: small.relative_pct.unwrap_or(0.0),
                target_pct: target,
                paper_pct: paper,
                iops_share_of_limit_pct: (d.device == "disk" && limit > 0.0)
                    .then(|| 100.0 * small.data_reads_per_s / limit),
                device_ceiling_pct: device_ceiling_pct(limit, full.tps_median, small),
            });
        }
    }
    out
}

/// A device's page-size random-read limit measured in the run: fio at QD32 where it ran,
/// else iobench at QD32.
fn read_limit(d: &DeviceReport) -> f64 {
    d.fio_read_qd32_iops.unwrap_or(d.read_qd32_iops)
}

/// See [`TargetRow::device_ceiling_pct`]: `None` without a limit, a 100 % throughput or reads.
fn device_ceiling_pct(limit_reads_per_s: f64, full_tps: f64, small: &SummaryRow) -> Option<f64> {
    let reads_per_txn = small.data_reads_per_s / small.tps_median.max(1e-9);
    (limit_reads_per_s > 0.0 && full_tps > 0.0 && reads_per_txn > 0.0)
        .then(|| (100.0 * limit_reads_per_s / (full_tps * reads_per_txn)).min(100.0))
}

/// The device ceiling of device `d` at every buffer size of workload `w` (see
/// [`TargetRow::device_ceiling_pct`]), as a plain line; `None` without a measured limit or a
/// 100 % point.
pub fn device_ceiling_series(r: &PrimitiveResults, d: &str, w: Workload) -> Option<Series> {
    let dev = r.devices.iter().find(|x| x.device == d)?;
    let limit = read_limit(dev);
    let rows: Vec<&SummaryRow> =
        r.summary.iter().filter(|x| x.workload == w.name() && x.device == d).collect();
    let full = rows.iter().find(|x| x.buffer_pct == 100.0)?;
    let pts: Vec<(f64, f64)> = rows
        .iter()
        .filter_map(|x| {
            let c = if x.buffer_pct == 100.0 {
                Some(100.0)
            } else {
                device_ceiling_pct(limit, full.tps_median, x)
            };
            c.map(|c| (x.buffer_pct, c))
        })
        .collect();
    (pts.len() > 1 && limit > 0.0)
        .then(|| Series::new(format!("device ceiling, {d}"), pts).style(SeriesStyle::Line))
}

/// Builds the results document from the raw points.
pub fn assemble(
    _cfg: &PrimitiveConfig,
    points: Vec<PointResult>,
    devices: Vec<DeviceReport>,
    traces: Vec<TraceRun>,
) -> PrimitiveResults {
    let summary = summarise(&points);
    let model = model_rows(&summary, &devices);
    let targets = targets(&summary, &devices);
    PrimitiveResults { wal: WAL_STATUS.into(), points, summary, devices, model, traces, targets }
}

/// ", + N µs simulated application CPU per transaction" when that knob is on.
pub fn app_cpu_note(cfg: &PrimitiveConfig) -> String {
    if cfg.app_cpu_us > 0.0 {
        format!(", + {} µs simulated application CPU per transaction", cfg.app_cpu_us)
    } else {
        String::new()
    }
}

fn fmt0(v: f64) -> String {
    format!("{v:.0}")
}

/// The printed summary: the sweep table, devices, model, tracing and targets.
pub fn summary_text(cfg: &PrimitiveConfig, ctx: &RunContext, r: &PrimitiveResults) -> String {
    let mut s = String::new();
    let mut t = TextTable::new([
        "device", "workload", "buffer %", "tps min", "tps median", "tps max", "rel. %", "hit ratio", "reads/s",
        "writes/s", "io µs/read", "cpu µs/txn", "log KiB/txn", "p99 µs",
    ])
    .title(format!(
        "Primitive workload: {} tables × {} rows, {} clients, {} s warm-up + {} s window, {} repetitions (interleaved){}",
        cfg.tables,
        cfg.rows_per_table,
        cfg.clients,
        cfg.warmup_s,
        cfg.duration_s,
        cfg.repetitions,
        app_cpu_note(cfg)
    ));
    for c in 2..14 {
        t = t.align(c, Align::Right);
    }
    for row in &r.summary {
        t.row([
            row.device_label.clone(),
            row.workload.to_uppercase(),
            format!("{}", row.buffer_pct),
            fmt0(row.tps_min),
            fmt0(row.tps_median),
            fmt0(row.tps_max),
            row.relative_pct.map(|v| format!("{v:.1}")).unwrap_or_else(|| "-".into()),
            format!("{:.4}", row.hit_ratio),
            fmt0(row.data_reads_per_s),
            fmt0(row.data_writes_per_s),
            format!("{:.1}", row.io_us_per_read),
            format!("{:.1}", row.cpu_us_per_txn),
            format!("{:.1}", row.log_kib_per_txn),
            fmt0(row.latency_p99_us),
        ]);
    }
    t.note(format!("UPDATE: {WAL_STATUS}; SELECT writes no log."));
    t.note(
        "log KiB/txn: an UPDATE logs the row's before and after images (2 × 4 KiB here) and its page changes: \
         the whole page for the first change of a page after a checkpoint (each point reopens the database, \
         which checkpoints), diffs afterwards.",
    );
    t.note("rel. % = median tps / the device's 100 % median tps; the machine is a shared 2-vCPU VM, so spreads are wide.");
    t.note(format!("machine: {}", ctx.one_line()));
    s.push_str(&t.to_string());
    s.push('\n');
    let mut d = TextTable::new([
        "device",
        "table MiB",
        "index MiB",
        "load s",
        "read QD1 mean µs",
        "p50 µs",
        "p99 µs",
        "IOPS @clients",
        "IOPS QD32",
        "fio IOPS QD32",
    ])
    .title(format!("Devices: iobench {} KiB random reads measured in this run", cfg.table_page_size / 1024));
    for c in 1..10 {
        d = d.align(c, Align::Right);
    }
    for dv in &r.devices {
        d.row([
            dv.label.clone(),
            format!("{:.0}", dv.table_bytes as f64 / (1u64 << 20) as f64),
            format!("{:.1}", dv.index_bytes as f64 / (1u64 << 20) as f64),
            format!("{:.1}", dv.load_s),
            format!("{:.1}", dv.read_qd1_mean_us),
            format!("{:.1}", dv.read_qd1_p50_us),
            format!("{:.1}", dv.read_qd1_p99_us),
            fmt0(dv.read_qd_clients_iops),
            fmt0(dv.read_qd32_iops),
            dv.fio_read_qd32_iops.map(fmt0).unwrap_or_else(|| "-".into()),
        ]);
    }
    d.note("Emulated profiles run over RAM; their latency is the emulator's, measured above.");
    s.push_str(&d.to_string());
    s.push('\n');
    if !r.model.is_empty() {
        let mut m = TextTable::new([
            "device",
            "workload",
            "t_cpu µs",
            "t_io µs",
            "hit ratio",
            "model %",
            "model@hit %",
            "measured %",
            "device t_io µs",
            "model (device t_io) %",
        ])
        .title(
            "Relative-performance model (seed 000 §3): (t_cpu + 0.1) / (t_cpu + t_io) at the smallest buffer",
        );
        for c in 2..10 {
            m = m.align(c, Align::Right);
        }
        for row in &r.model {
            m.row([
                row.device_label.clone(),
                row.workload.to_uppercase(),
                format!("{:.1}", row.t_cpu_us),
                format!("{:.1}", row.t_io_us),
                format!("{:.4}", row.hit_ratio),
                format!("{:.1}", row.model_pct),
                format!("{:.1}", row.model_at_hit_ratio_pct),
                format!("{:.1}", row.measured_pct),
                format!("{:.1}", row.t_io_device_us),
                row.model_device_pct.map(|v| format!("{v:.1}")).unwrap_or_else(|| "-".into()),
            ]);
        }
        m.note("t_cpu: client CPU per transaction at 100 % buffer; t_io: wall time per table-page read (write-back included) at the smallest buffer, as the clients saw it (queueing for the device and for a CPU included); device t_io: iobench QD1 mean read latency.");
        s.push_str(&m.to_string());
        s.push('\n');
    }
    if !r.traces.is_empty() {
        let mut tr = TextTable::new([
            "device",
            "workload",
            "buffer %",
            "tps tracing off",
            "tps tracing on",
            "on/off %",
            "intervals",
            "dropped",
        ])
        .title("Tracing cost (off = mean of the runs before and after)");
        for c in 2..8 {
            tr = tr.align(c, Align::Right);
        }
        for row in &r.traces {
            tr.row([
                row.device_label.clone(),
                row.workload.to_uppercase(),
                format!("{}", row.buffer_pct),
                fmt0(row.tps_tracing_off),
                fmt0(row.tps_tracing_on),
                format!("{:.1}", 100.0 * row.tps_tracing_on / row.tps_tracing_off.max(1e-9)),
                row.intervals.to_string(),
                row.dropped.to_string(),
            ]);
        }
        s.push_str(&tr.to_string());
        s.push('\n');
    }
    if !r.targets.is_empty() {
        let mut tg = TextTable::new([
            "device",
            "workload",
            "smallest/100 % %",
            "target %",
            "paper %",
            "met",
            "reads/s vs QD32 limit %",
            "device ceiling %",
        ])
        .title("Issue 5 targets");
        for c in 2..8 {
            tg = tg.align(c, Align::Right);
        }
        for row in &r.targets {
            tg.row([
                row.device_label.clone(),
                row.workload.to_uppercase(),
                format!("{:.1}", row.measured_pct),
                row.target_pct.map(|v| format!("{v:.0}")).unwrap_or_else(|| "-".into()),
                row.paper_pct.map(|v| format!("{v:.0}")).unwrap_or_else(|| "-".into()),
                match row.target_pct {
                    Some(t) if row.measured_pct >= t => "yes".into(),
                    Some(_) => "NO".into(),
                    None => "-".into(),
                },
                row.iops_share_of_limit_pct.map(|v| format!("{v:.1}")).unwrap_or_else(|| "-".into()),
                row.device_ceiling_pct.map(|v| format!("{v:.1}")).unwrap_or_else(|| "-".into()),
            ]);
        }
        tg.note("paper: seed 000 Fig. 5 (Optane 10 µs class; NAND 100 µs class).");
        tg.note(
            "device ceiling: the share of the 100 % throughput the smallest buffer could keep if the device's \
             page-size QD32 read rate measured in this run were the only limit (a target above it needs a \
             slower engine or a faster device).",
        );
        s.push_str(&tg.to_string());
    }
    s
}

fn throughput_chart(
    cfg: &PrimitiveConfig,
    ctx: &RunContext,
    r: &PrimitiveResults,
    w: Workload,
    normalised: bool,
) -> LineChart {
    let (title, y) = if normalised {
        (
            format!("{} throughput relative to 100 % buffer", w.title()),
            "throughput (% of the device's 100 % value)",
        )
    } else {
        (format!("{} throughput vs table buffer size", w.title()), "throughput (transactions/s)")
    };
    let mut chart = LineChart::new(title, "table buffer (% of table size)", y)
        .subtitle(format!(
            "{} tables × {} rows, {} clients, median of {} (min–max in CSV); {}{}",
            cfg.tables,
            cfg.rows_per_table,
            cfg.clients,
            cfg.repetitions,
            if w == Workload::Update { WAL_STATUS } else { "read only" },
            app_cpu_note(cfg)
        ))
        .log_x(true)
        .x_ticks(cfg.buffer_pcts.clone())
        .legend(LegendPosition::LowerRight)
        .footnote(ctx.one_line());
    if normalised {
        // The curves rise towards 100 % at the right: the legend goes top left.
        chart = chart.y_range(0.0, 110.0).legend(LegendPosition::UpperLeft);
    }
    let mut devs: Vec<(String, String)> = Vec::new();
    for row in r.summary.iter().filter(|x| x.workload == w.name()) {
        if !devs.iter().any(|(d, _)| *d == row.device) {
            devs.push((row.device.clone(), row.device_label.clone()));
        }
    }
    for (i, (d, label)) in devs.iter().enumerate() {
        let pts: Vec<(f64, f64)> = r
            .summary
            .iter()
            .filter(|x| x.workload == w.name() && x.device == *d)
            .map(|x| (x.buffer_pct, x.tps_median))
            .collect();
        let s = Series::new(label.clone(), pts).color(i);
        let s = if normalised { s.normalised_at(100.0) } else { Some(s) };
        if let Some(s) = s {
            chart = chart.series(s);
        }
        if normalised {
            if let Some(m) = r.model.iter().find(|m| m.device_label == *label && m.workload == w.name()) {
                let sweep: Vec<(f64, f64)> = r
                    .summary
                    .iter()
                    .filter(|x| x.workload == w.name() && x.device == *d)
                    .map(|x| (x.buffer_pct, x.hit_ratio))
                    .collect();
                let input = ModelInput::new(m.t_cpu_us, m.t_io_us);
                chart = chart.series(model::model_series(format!("model, {d}"), &input, &sweep).color(i));
            }
            if let Some(ceiling) = device_ceiling_series(r, d, w) {
                chart = chart.series(ceiling.color(i));
            }
        }
    }
    if normalised {
        chart = chart.footnote(
            "dashed: model (t_cpu + t_mem)/(t_cpu + h·t_mem + (1−h)·t_io) at the achieved hit ratio h",
        );
        chart = chart.footnote(
            "plain line: device ceiling, the device's measured QD32 page-read rate as the only limit",
        );
    }
    chart
}

/// Writes results.csv, results.json, summary.txt and every plot; prints nothing; returns the
/// summary text.
pub fn write_all(
    cfg: &PrimitiveConfig,
    ctx: &RunContext,
    dir: &ResultsDir,
    r: &PrimitiveResults,
) -> Result<String, PrimitiveError> {
    dir.write_csv("results", &r.points)?;
    dir.write_csv("summary", &r.summary)?;
    dir.write_json("results", ctx, cfg, r)?;
    let text = summary_text(cfg, ctx, r);
    dir.write_text("summary.txt", &text)?;
    for &w in &cfg.workloads {
        throughput_chart(cfg, ctx, r, w, false).write(dir.path(), &format!("{}_throughput", w.name()))?;
        throughput_chart(cfg, ctx, r, w, true).write(dir.path(), &format!("{}_relative", w.name()))?;
        let pts: Vec<ModelPoint> = r
            .model
            .iter()
            .filter(|m| m.workload == w.name())
            .map(|m| ModelPoint {
                device: m.device_label.clone(),
                input: ModelInput::new(m.t_cpu_us, m.t_io_us),
                measured_relative: m.measured_pct / 100.0,
            })
            .collect();
        if !pts.is_empty() {
            model::model_vs_measured_chart(
                &format!("{}: model vs measured at the smallest buffer", w.title()),
                &pts,
            )
            .footnote(ctx.one_line())
            .write(dir.path(), &format!("{}_model", w.name()))?;
        }
    }
    Ok(text)
}

/// The device traced: `trace_device` if given, else `optane`, else the first.
fn trace_device_index(cfg: &PrimitiveConfig, devices: &[super::PreparedDevice]) -> Option<usize> {
    let want = cfg.trace_device.clone().unwrap_or_else(|| "optane".into());
    devices.iter().position(|d| d.kind.name() == want).or(if devices.is_empty() { None } else { Some(0) })
}

/// For each workload, at the smallest buffer on the traced device: throughput off/on/off, the
/// trace of the traced window (CSV + summary CSV) and a chart of a short window in its middle.
pub(super) fn trace_runs(
    cfg: &PrimitiveConfig,
    dir: &ResultsDir,
    devices: &[super::PreparedDevice],
    points: &mut Vec<PointResult>,
) -> Result<Vec<TraceRun>, PrimitiveError> {
    let Some(di) = trace_device_index(cfg, devices) else { return Ok(Vec::new()) };
    let dev = &devices[di];
    let pct = cfg.buffer_pcts.iter().cloned().fold(f64::INFINITY, f64::min);
    let mut out = Vec::new();
    for &w in &cfg.workloads {
        let (off, on, trace) = super::traced_point(cfg, dev, w, pct, points)?;
        let stem = format!("trace_{}_{}", w.name(), dev.kind.name());
        // Intervals of the middle 100 ms (the whole window runs to megabytes); the summary CSV
        // covers the whole traced window.
        let from = (trace.span_ns() / 2).saturating_sub(50_000_000);
        write_trace_csv(dir.file(&format!("{stem}.csv")), &trace.window(from, from + 100_000_000))?;
        dir.write_csv(&format!("{stem}_summary"), &trace_summary(&trace))?;
        let files = trace_chart(cfg, &dev.report.label, w, pct, &trace, on).write(dir.path(), &stem)?;
        let from_trace = ModelInput::from_trace(&trace);
        out.push(TraceRun {
            device_label: dev.report.label.clone(),
            workload: w.name().into(),
            buffer_pct: pct,
            tps_tracing_off: off,
            tps_tracing_on: on,
            intervals: trace.threads.iter().map(|t| t.intervals.len()).sum(),
            dropped: trace.dropped(),
            trace_t_cpu_us: from_trace.map(|m| m.t_cpu_us),
            trace_t_io_us: from_trace.map(|m| m.t_io_us),
            chart_png: files.png.display().to_string(),
        });
    }
    Ok(out)
}

/// The chart of a `trace_window_ms` window in the middle of `trace`.
pub fn trace_chart(
    cfg: &PrimitiveConfig,
    device_label: &str,
    w: Workload,
    pct: f64,
    trace: &Trace,
    tps: f64,
) -> TraceChart {
    let win = (cfg.trace_window_ms * 1e6) as u64;
    let mid = trace.span_ns() / 2;
    let from = mid.saturating_sub(win / 2);
    let window = trace.window(from, from + win);
    TraceChart::from_trace(
        format!("{} at {pct} % buffer on {device_label}: one row per client", w.title()),
        &window,
    )
    .subtitle(format!(
        "{:.1} ms window from the middle of a {:.1} s traced run at {:.0} tps; {}",
        cfg.trace_window_ms,
        trace.span_ns() as f64 / 1e9,
        tps,
        if w == Workload::Update { WAL_STATUS } else { "read only" }
    ))
    .annotate_durations(true)
}
