//! Reports end to end on synthetic data: a results directory with CSV, JSON, a summary table,
//! line charts, a trace chart and the model chart, all parsed or checked back.

use nvmedb::trace::{Interval, ThreadTrace, Trace, TraceKind};
use nvmedb::util::Rng;
use nvmedb_lab::machine::RunContext;
use nvmedb_lab::model::{model_series, model_vs_measured_chart, ModelInput, ModelPoint};
use nvmedb_lab::report::{
    read_csv, read_json, trace_summary, trace_summary_table, write_csv, write_json, write_trace_csv,
    LineChart, PlotFiles, ReportError, ResultsDir, Series, SeriesStyle, TextTable, TraceChart,
    TraceSummaryRow,
};
use nvmedb_testkit::TmpDir;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Row {
    device: String,
    workload: String,
    buffer_pct: f64,
    throughput_tps: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Config {
    clients: u32,
    buffer_pcts: Vec<f64>,
    devices: Vec<String>,
}

fn out_root(name: &str) -> TmpDir {
    TmpDir::path_only(name)
}

fn assert_plot_files(f: &PlotFiles) {
    let png = std::fs::read(&f.png).expect("png");
    assert!(png.len() > 1000, "{} too small", f.png.display());
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{} is a PNG", f.png.display());
    let svg = std::fs::read_to_string(&f.svg).expect("svg");
    assert!(svg.starts_with("<svg") || svg.starts_with("<?xml"), "{} is an SVG", f.svg.display());
    assert!(svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("<text"), "SVG has text");
}

fn synthetic_rows() -> Vec<Row> {
    let mut rows = Vec::new();
    for (device, t_io) in [("optane (emulated, p50 11 µs)", 10.0), ("nand (emulated, p50 95 µs)", 100.0)] {
        for workload in ["select", "update"] {
            for pct in [1.0, 5.0, 10.0, 25.0, 50.0, 100.0] {
                let hit = pct / 100.0;
                let m = ModelInput::new(100.0, if workload == "update" { 2.5 * t_io } else { t_io });
                rows.push(Row {
                    device: device.into(),
                    workload: workload.into(),
                    buffer_pct: pct,
                    throughput_tps: 40_000.0 * m.relative_at_hit_ratio(hit),
                });
            }
        }
    }
    rows
}

fn synthetic_trace(clients: u32, seed: u64) -> Trace {
    let mut rng = Rng::new(seed);
    let threads = (0..clients)
        .map(|c| {
            let mut t = rng.next_u64() % 50_000;
            let mut ivs = Vec::new();
            while t < 2_000_000 {
                let cpu = 80_000 + rng.next_u64() % 60_000;
                ivs.push(Interval { kind: TraceKind::Cpu, start_ns: t, end_ns: t + cpu });
                let mut io_at = t + cpu / 3;
                if rng.next_u64().is_multiple_of(2) {
                    ivs.push(Interval {
                        kind: TraceKind::DataWrite,
                        start_ns: io_at,
                        end_ns: io_at + 15_000,
                    });
                    io_at += 15_000;
                }
                ivs.push(Interval {
                    kind: TraceKind::DataRead,
                    start_ns: io_at,
                    end_ns: io_at + 12_000 + rng.next_u64() % 20_000,
                });
                t += cpu;
                let wait = 5_000 + rng.next_u64() % 40_000;
                let kind =
                    if rng.next_u64().is_multiple_of(5) { TraceKind::LockWait } else { TraceKind::LogWait };
                ivs.push(Interval { kind, start_ns: t, end_ns: t + wait });
                t += wait + 2_000;
            }
            ivs.sort_by_key(|iv| iv.start_ns);
            ThreadTrace { thread_index: c, label: format!("client {c}"), intervals: ivs, dropped: 0 }
        })
        .collect();
    Trace { duration_ns: 2_000_000, threads }
}

#[test]
fn a_run_writes_every_kind_of_file() {
    let root = out_root("report-e2e");
    let dir = ResultsDir::create(&root, "primitive").expect("results dir");
    assert!(dir.path().starts_with(root.join("primitive")));
    let ctx = RunContext::capture();
    let config = Config { clients: 20, buffer_pcts: vec![1.0, 100.0], devices: vec!["optane".into()] };
    let rows = synthetic_rows();

    // CSV and JSON parse back.
    let csv = write_csv(dir.file("results.csv"), &rows).expect("csv");
    let back: Vec<Row> = read_csv(&csv).expect("read csv");
    assert_eq!(back, rows);
    let json = dir.write_json("results", &ctx, &config, &rows).expect("json");
    assert_eq!(json, write_json(dir.file("results.json"), "primitive", &ctx, &config, &rows).expect("json"));
    let doc = read_json::<Config, Vec<Row>>(&json).expect("read json");
    assert_eq!(doc.experiment, "primitive");
    assert_eq!(doc.context, ctx);
    assert_eq!(doc.config, config);
    assert_eq!(doc.results, rows);
    let raw: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).expect("read")).expect("json");
    assert!(raw["context"]["git_commit"].is_string());

    // Summary table.
    let mut table = TextTable::new(["device", "workload", "buffer %", "tps"]).title("primitive workload");
    for r in &rows {
        table.row([
            r.device.clone(),
            r.workload.clone(),
            format!("{}", r.buffer_pct),
            format!("{:.0}", r.throughput_tps),
        ]);
    }
    table.note(format!("machine: {}", ctx.one_line()));
    std::fs::write(dir.file("summary.txt"), table.to_string()).expect("summary");

    // Throughput vs buffer % per device, and normalised, for select.
    let mut chart =
        LineChart::new("SELECT throughput vs buffer size", "buffer size (% of table)", "throughput (tps)")
            .subtitle("synthetic data")
            .log_x(true)
            .x_ticks(vec![1.0, 5.0, 10.0, 25.0, 50.0, 100.0]);
    let mut norm = LineChart::new(
        "SELECT, normalised to 100 % buffer",
        "buffer size (% of table)",
        "relative throughput (%)",
    )
    .log_x(true)
    .y_range(0.0, 105.0);
    for device in ["optane (emulated, p50 11 µs)", "nand (emulated, p50 95 µs)"] {
        let pts: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| r.device == device && r.workload == "select")
            .map(|r| (r.buffer_pct, r.throughput_tps))
            .collect();
        let full = pts.last().map(|p| p.1).expect("100 %");
        let s = Series::new(device, pts.clone());
        assert_eq!(s.normalised_at(100.0).expect("100 %").points[0].1, 100.0 * pts[0].1 / full);
        norm = norm.series(s.normalised_at(100.0).expect("100 %"));
        chart = chart.series(s);
    }
    let sweep: Vec<(f64, f64)> =
        [1.0, 5.0, 10.0, 25.0, 50.0, 100.0].iter().map(|&p| (p, p / 100.0)).collect();
    norm =
        norm.series(model_series("model, t_cpu 100 µs, t_io 10 µs", &ModelInput::new(100.0, 10.0), &sweep));
    chart = chart
        .footnote("optane, nand: emulated devices (achieved p50 latency in the legend)")
        .footnote(ctx.one_line());
    assert_plot_files(&chart.write(dir.path(), "select_throughput").expect("line chart"));
    assert_plot_files(&norm.write(dir.path(), "select_normalised").expect("normalised chart"));
    let linear = LineChart::new("linear", "x", "y")
        .series(Series::new("a", vec![(0.0, 1.0), (1.0, 3.0)]).style(SeriesStyle::Dashed));
    assert_plot_files(&linear.write(dir.path(), "linear").expect("linear chart"));

    // Trace chart and its CSV.
    let trace = synthetic_trace(20, 7);
    let tc = TraceChart::from_trace("UPDATE trace, 1 % buffer (synthetic)", &trace)
        .subtitle("20 clients")
        .footnote("optane: emulated device, achieved read p50 11 µs");
    assert_plot_files(&tc.write(dir.path(), "trace_update").expect("trace chart"));
    let tcsv = write_trace_csv(dir.file("trace_update.csv"), &trace).expect("trace csv");
    let summary = trace_summary(&trace);
    let back: Vec<TraceSummaryRow> =
        read_csv(dir.write_csv("trace_update_summary", &summary).expect("csv")).expect("read");
    assert_eq!(back.len(), summary.len());
    let cpu = back.iter().find(|r| r.kind == "cpu").expect("cpu row");
    assert!(cpu.utilisation > 0.3 && cpu.utilisation < 1.0, "{cpu:?}");
    dir.write_text("trace_update_summary.txt", &trace_summary_table("trace", &trace).to_string())
        .expect("txt");
    let lines = std::fs::read_to_string(&tcsv).expect("read").lines().count();
    assert_eq!(lines, 1 + trace.threads.iter().map(|t| t.intervals.len()).sum::<usize>());

    // Model vs measured.
    let pts = vec![
        ModelPoint {
            device: "optane (emulated)".into(),
            input: ModelInput::new(120.0, 12.0),
            measured_relative: 0.9,
        },
        ModelPoint {
            device: "nand (emulated)".into(),
            input: ModelInput::new(120.0, 100.0),
            measured_relative: 0.55,
        },
        ModelPoint {
            device: "from trace".into(),
            input: ModelInput::from_trace(&trace).expect("reads"),
            measured_relative: 0.8,
        },
    ];
    let mc = model_vs_measured_chart("Model vs measured (synthetic)", &pts).footnote(ctx.one_line());
    assert_plot_files(&mc.write(dir.path(), "model_vs_measured").expect("model chart"));

    let names: Vec<String> = std::fs::read_dir(dir.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    for f in [
        "results.csv",
        "results.json",
        "summary.txt",
        "select_throughput.png",
        "trace_update.svg",
        "model_vs_measured.png",
    ] {
        assert!(names.iter().any(|n| n == f), "{f} missing in {names:?}");
    }
}

#[test]
fn errors_name_the_file() {
    let root = out_root("report-errors");
    std::fs::create_dir_all(&root).expect("root");
    let missing = root.join("no-such-dir").join("x.csv");
    let e = write_csv(&missing, &[1u32]).expect_err("parent missing");
    assert!(matches!(e, ReportError::Io { .. }));
    assert!(e.to_string().contains("no-such-dir/x.csv"), "{e}");

    let empty = LineChart::new("empty", "x", "y");
    let e = empty.write(&root, "empty").expect_err("no data");
    assert!(e.to_string().contains("empty.png") && e.to_string().contains("no data"), "{e}");

    let bad = LineChart::new("bad", "x", "y").log_x(true).series(Series::new("s", vec![(0.0, 1.0)]));
    assert!(bad.write(&root, "bad").expect_err("log of 0").to_string().contains("x > 0"));

    let e = TraceChart::from_trace("none", &Trace::default()).write(&root, "t").expect_err("empty trace");
    assert!(e.to_string().contains("t.png"), "{e}");

    // A plot into a missing directory names the plot file.
    let c = LineChart::new("c", "x", "y").series(Series::new("s", vec![(1.0, 1.0), (2.0, 2.0)]));
    let e = c.write(root.join("missing"), "c").expect_err("missing dir");
    assert!(e.to_string().contains("missing/c.png"), "{e}");
}

/// The real tracer feeding a trace chart: the only test in this binary that turns tracing on.
#[test]
fn a_real_trace_becomes_a_chart() {
    use nvmedb::trace::{self, TraceConfig};
    use std::time::Duration;
    trace::start(TraceConfig { capacity_per_thread: 4096 });
    let handles: Vec<_> = (0..3)
        .map(|c| {
            std::thread::spawn(move || {
                trace::set_thread_label(format!("client {c}"));
                for i in 0..20u64 {
                    let _cpu = trace::span(TraceKind::Cpu);
                    std::hint::black_box((0..2_000u64).sum::<u64>());
                    let kind = if i % 3 == 0 { TraceKind::DataWrite } else { TraceKind::DataRead };
                    let _io = trace::span(kind);
                    std::thread::sleep(Duration::from_micros(30));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("client");
    }
    trace::stop();
    let t = trace::collect();
    assert_eq!(t.threads.len(), 3);
    let root = out_root("report-real-trace");
    let dir = ResultsDir::create(&root, "trace").expect("dir");
    let files = TraceChart::from_trace("real tracer, 3 threads", &t)
        .annotate_durations(true)
        .write(dir.path(), "trace")
        .expect("chart");
    assert_plot_files(&files);
    assert!(ModelInput::from_trace(&t).expect("reads").t_io_us >= 30.0);
}
