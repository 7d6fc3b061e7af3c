//! The primitive experiment end to end at a tiny scale (RAM and an emulated profile, a temp
//! directory for the disk device, short windows): every result file is written and parses
//! back, and the summary, model and trace code paths run. No timing is asserted.

use nvmedb::util::sync::MutexExt;
use nvmedb_lab::experiment::{self, Outcome, RunOptions};
use nvmedb_lab::experiments::primitive::summary::{device_ceiling_series, model_rows, summarise, targets};
use nvmedb_lab::experiments::primitive::{
    DeviceKind, DeviceReport, PointResult, Primitive, PrimitiveConfig, PrimitiveResults, Workload, WAL_STATUS,
};
use nvmedb_lab::report::{read_csv, read_json, ResultFile};
use nvmedb_lab::LabError;
use nvmedb_testkit::TmpDir;
use std::path::Path;

fn temp_dir(name: &str) -> TmpDir {
    TmpDir::path_only(&format!("prim-{name}"))
}

/// The engine's tracer is one per process: two runs tracing at once would drain each other's
/// intervals, so this binary's runs take turns.
static RUNS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn run(root: &Path, cfg: &PrimitiveConfig) -> Result<Outcome<Primitive>, LabError> {
    let _turn = RUNS.locked();
    experiment::run::<Primitive>(cfg, &RunOptions { results_root: root.join("results"), progress: false })
}

fn tiny(root: &Path) -> PrimitiveConfig {
    PrimitiveConfig::tiny(root.join("data"))
}

#[test]
fn tiny_run_writes_every_file_and_they_parse() {
    if !nvmedb_lab::report::font_path().exists() {
        eprintln!("skipping: no plot font at {}", nvmedb_lab::report::font_path().display());
        return;
    }
    let root = temp_dir("e2e");
    let cfg = tiny(&root);
    let out = run(&root, &cfg).expect("the tiny experiment runs");
    for f in [
        "results.csv",
        "summary.csv",
        "results.json",
        "summary.txt",
        "summary.json",
        "select_throughput.png",
        "select_throughput.svg",
        "update_throughput.png",
        "update_relative.svg",
        "select_relative.png",
        "select_model.png",
        "update_model.svg",
        "trace_select_optane.png",
        "trace_update_optane.svg",
        "trace_select_optane.csv",
        "trace_update_optane_summary.csv",
    ] {
        let p = out.dir.join(f);
        assert!(p.exists() && std::fs::metadata(&p).unwrap().len() > 0, "missing or empty {}", p.display());
    }
    let rows: Vec<PointResult> = read_csv(out.dir.join("results.csv")).unwrap();
    // 2 devices × 2 reps × 2 buffers × 2 workloads, plus 3 traced-point runs per workload.
    assert_eq!(rows.len(), 16 + 6);
    assert!(rows.iter().all(|r| r.transactions > 0 && r.tps > 0.0));
    assert!(rows.iter().filter(|r| r.workload == "update").all(|r| r.wal == WAL_STATUS));
    // Updates write log, selects none.
    assert!(rows.iter().filter(|r| r.workload == "update").all(|r| r.log_kib_per_txn > 0.0));
    assert!(rows.iter().filter(|r| r.workload == "select").all(|r| r.log_kib_per_txn == 0.0));
    let doc: ResultFile<PrimitiveConfig, PrimitiveResults> = read_json(out.dir.join("results.json")).unwrap();
    assert_eq!(doc.experiment, "primitive");
    assert_eq!(doc.config.rows_per_table, 60);
    assert_eq!(doc.results.points.len(), out.results.points.len());
    assert_eq!(doc.results.summary.len(), out.results.summary.len());
    assert_eq!(doc.results.wal, WAL_STATUS);
    assert_eq!(rows.iter().filter(|r| r.phase == "trace").count(), 6);
    assert_eq!(doc.results.summary.len(), 8);
    assert!(doc
        .results
        .summary
        .iter()
        .all(|s| s.n == 2 && s.tps_min <= s.tps_median && s.tps_median <= s.tps_max));
    let opt = doc.results.devices.iter().find(|d| d.device == "optane").unwrap();
    assert!(opt.label.contains("EMULATED") && opt.read_qd1_p50_us > 0.0 && opt.profile.is_some());
    assert_eq!(doc.results.traces.len(), 2);
    assert!(doc.results.traces.iter().all(|t| t.intervals > 0 && t.tps_tracing_on > 0.0));
    let text = &out.summary.text;
    assert!(text.contains("EMULATED") && text.contains(WAL_STATUS));
    assert!(text.contains("model (device t_io) %"));
    assert!(text.contains("Seed 000 Fig. 5 targets") && !text.to_lowercase().contains("issue"));
    assert!(out
        .summary
        .figures
        .iter()
        .any(|f| f.name == "select/optane/smallest_over_full_pct" && f.reference.is_some()));
    // The 100 % point of every device and workload is its own reference.
    assert!(doc
        .results
        .summary
        .iter()
        .filter(|s| s.buffer_pct == 100.0)
        .all(|s| s.relative_pct == Some(100.0)));
    // The whole-lab page reads the run: seed 000 Fig. 5's share is the summary's figure.
    let page = nvmedb_lab::page::build(&root.join("results")).expect("lab page");
    let fig5 = page.rows.iter().find(|r| r.id == "seed000-fig5").expect("row");
    let share =
        out.summary.figures.iter().find(|f| f.name == "select/optane/smallest_over_full_pct").unwrap();
    assert!(fig5.ours.contains(&format!("optane SELECT {}", nvmedb_lab::page::pct(share.value))), "{fig5:?}");
}

#[test]
fn disk_device_loads_once_and_is_reused() {
    let root = temp_dir("disk");
    let mut cfg = tiny(&root);
    cfg.devices = vec![DeviceKind::Disk];
    cfg.workloads = vec![Workload::Update];
    cfg.repetitions = 1;
    cfg.trace = false;
    cfg.iobench_s = 0.0;
    if !nvmedb_lab::report::font_path().exists() {
        return;
    }
    let first = run(&root, &cfg).expect("first run loads");
    assert!(first.results.devices[0].load_s > 0.0);
    let second = run(&root, &cfg).expect("second run reuses the data");
    assert_eq!(second.results.devices[0].load_s, 0.0);
    assert!(cfg.disk_db_dir().join("catalog.nvdb").exists());
}

#[test]
fn bad_configurations_are_named() {
    let root = temp_dir("bad");
    let mut cfg = tiny(&root);
    cfg.buffer_pcts = vec![0.0];
    assert!(run(&root, &cfg).unwrap_err().to_string().contains("buffer_pcts"));
    let mut cfg = tiny(&root);
    cfg.policy = "LRU".into();
    assert!(cfg.validate().unwrap_err().to_string().contains("LRU"));
    let mut cfg = tiny(&root);
    cfg.profile_overrides = vec!["warp_speed=9".into()];
    assert!(cfg.validate().unwrap_err().to_string().contains("warp_speed"));
    assert_eq!(DeviceKind::parse("floppy"), None);
    assert_eq!(Workload::parse("UPDATE"), Some(Workload::Update));
}

fn point(device: &str, workload: &str, pct: f64, rep: usize, tps: f64) -> PointResult {
    PointResult {
        device: device.into(),
        device_label: format!("{device} (EMULATED)"),
        workload: workload.into(),
        buffer_pct: pct,
        buffer_bytes: 0,
        repetition: rep,
        phase: "sweep".into(),
        tracing: false,
        clients: 20,
        window_s: 1.0,
        transactions: tps as u64,
        tps,
        hit_ratio: if pct == 100.0 { 1.0 } else { 0.0 },
        index_hit_ratio: 1.0,
        data_reads_per_s: if pct == 100.0 { 0.0 } else { tps },
        data_writes_per_s: 0.0,
        io_us_per_read: if pct == 100.0 { 0.0 } else { 10.0 },
        cpu_us_per_txn: 100.0,
        log_kib_per_txn: 0.0,
        log_pad_kib_per_txn: 0.0,
        process_cpu_cores: 2.0,
        latency_p50_us: 1.0,
        latency_p99_us: 2.0,
        wal: String::new(),
    }
}

#[test]
fn summary_model_and_targets_on_synthetic_points() {
    let mut pts = Vec::new();
    for rep in 0..3 {
        pts.push(point("optane", "select", 1.0, rep, 900.0 + rep as f64 * 10.0));
        pts.push(point("optane", "select", 100.0, rep, 1000.0));
    }
    let mut traced = point("optane", "select", 1.0, 0, 1.0);
    traced.tracing = true;
    traced.phase = "trace".into();
    pts.push(traced);
    let s = summarise(&pts);
    assert_eq!(s.len(), 2);
    assert_eq!(
        (s[0].buffer_pct, s[0].n, s[0].tps_min, s[0].tps_median, s[0].tps_max),
        (1.0, 3, 900.0, 910.0, 920.0)
    );
    assert_eq!(s[0].relative_pct, Some(91.0));
    let m = model_rows(&s, &[]);
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].model_device_pct, None);
    // t_cpu 100 µs (CPU per transaction at 100 %), t_io 10 µs: the paper's 91 %.
    assert_eq!((m[0].t_cpu_us, m[0].t_io_us), (100.0, 10.0));
    assert_eq!(m[0].model_pct.round(), 91.0);
    assert_eq!(m[0].measured_pct, 91.0);
    let dev = DeviceReport {
        device: "optane".into(),
        label: "optane (EMULATED)".into(),
        location: "memory".into(),
        table_bytes: 0,
        index_bytes: 0,
        load_s: 0.0,
        read_qd1_mean_us: 10.0,
        read_qd1_p50_us: 10.0,
        read_qd1_p99_us: 12.0,
        read_qd_clients_iops: 0.0,
        read_qd32_iops: 0.0,
        fio_read_qd32_iops: None,
        profile: None,
    };
    let t = targets(&s, std::slice::from_ref(&dev));
    assert_eq!(t.len(), 1);
    assert_eq!((t[0].target_pct, t[0].paper_pct), (Some(90.0), Some(90.0)));
    assert_eq!(t[0].device_ceiling_pct, None, "no device limit measured");
    // One table-page read per transaction at 1 %, 1000 tps at 100 %: a device of 500 reads/s
    // allows at most 50 %; one of 5000 reads/s does not limit (capped at 100 %).
    for (iops, ceiling) in [(500.0, 50.0), (5000.0, 100.0)] {
        let d = DeviceReport { read_qd32_iops: iops, ..dev.clone() };
        assert_eq!(targets(&s, &[d])[0].device_ceiling_pct, Some(ceiling), "{iops} IOPS");
    }
    // The same ceiling as a plot line over the sweep, 100 % at the full buffer.
    let r = PrimitiveResults {
        wal: String::new(),
        points: Vec::new(),
        summary: s.clone(),
        devices: vec![DeviceReport { read_qd32_iops: 500.0, ..dev.clone() }],
        model: Vec::new(),
        traces: Vec::new(),
        targets: Vec::new(),
    };
    let line = device_ceiling_series(&r, "optane", Workload::Select).expect("a ceiling line");
    assert_eq!(line.points, vec![(1.0, 50.0), (100.0, 100.0)]);
    assert!(device_ceiling_series(&r, "optane", Workload::Update).is_none(), "no update points");
}

/// Memory and every emulated profile share one RAM image of the database, each writing it
/// under its own log. Tracing a device after another one has written the image must still
/// open it (a new log per open): pairing the image with the traced device's earlier log would
/// end the log before the catalog's last checkpoint, which the engine refuses as lost records.
#[test]
fn tracing_a_device_after_another_wrote_the_shared_image_opens_it() {
    if !nvmedb_lab::report::font_path().exists() {
        eprintln!("skipping: no plot font at {}", nvmedb_lab::report::font_path().display());
        return;
    }
    let root = temp_dir("shared-image");
    let mut cfg = tiny(&root);
    cfg.devices = vec![DeviceKind::Emulated("optane".into()), DeviceKind::Memory];
    cfg.repetitions = 1;
    cfg.trace_device = Some("optane".into());
    let out = run(&root, &cfg).expect("traces optane after memory wrote the image");
    assert!(out.dir.join("trace_update_optane.svg").exists());
}
