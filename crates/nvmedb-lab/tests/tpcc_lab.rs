//! `nvmedb lab tpcc` end to end at the reduced test scale: memory and emulated optane, HA with
//! log shipping and data mirroring, two buffer sizes, a traced window; every point passes the
//! consistency check, the result files and plots are written; `--check` passes on the loaded
//! database and names the condition, warehouse and district once a district row is broken; the
//! lab page's seed 000 Fig. 7 decides by the Case C figures of the run's summary.

use nvmedb::{Database, Options, Value};
use nvmedb_lab::experiment::{self, RunOptions};
use nvmedb_lab::experiments::tpcc::{check_dir, HaMode, Tpcc, TpccConfig};
use nvmedb_lab::measure::DeviceKind;
use nvmedb_lab::report::Figure;
use nvmedb_lab::workload::tpcc::schema as s;
use nvmedb_lab::workload::tpcc::Tables;
use nvmedb_testkit::TmpDir;
use std::path::PathBuf;

fn scratch(name: &str) -> TmpDir {
    TmpDir::path_only(&format!("tpcc-lab-{name}"))
}

#[test]
fn a_small_run_measures_checks_and_reports_every_point() {
    let root = scratch("run");
    let ram = PathBuf::from(format!("/dev/shm/nvmedb-tpcc-lab-{}", std::process::id()));
    let cfg = TpccConfig {
        warehouses: 2,
        clients: 3,
        reduced: true,
        buffer_pcts: vec![20.0, 100.0],
        devices: vec![DeviceKind::Memory, DeviceKind::Emulated("optane".into())],
        ha: HaMode::On,
        warmup_s: 0.2,
        duration_s: 0.6,
        repetitions: 1,
        data_dir: root.join("data"),
        ram_dir: ram.clone(),
        iobench_s: 0.2,
        trace_window_ms: 1.0,
        ..TpccConfig::default()
    };
    let opts = RunOptions { results_root: root.join("results"), progress: false };
    let out = experiment::run::<Tpcc>(&cfg, &opts).expect("the run succeeds");
    let r = &out.results;
    assert_eq!(r.load.scale.warehouses, 2);
    assert_eq!(r.points.len(), 4, "2 devices x 2 buffers");
    assert_eq!(r.checks_passed, 4);
    for p in &r.points {
        assert!(p.transactions > 0, "{} at {} %: no transaction", p.device, p.buffer_pct);
        assert_eq!(p.per_type.iter().sum::<u64>(), p.transactions);
        assert!(p.tpmc > 0.0 && p.per_type[0] > 0);
        assert!(p.log_bytes_per_txn > 0.0, "the log is on");
        // Per type: New-Order and Payment change rows, so they log; the read-only types log only
        // what a checkpoint taken at their start appends.
        assert!(p.log_bytes_per_type[0] > 0.0 && p.log_bytes_per_type[1] > 0.0, "{p:?}");
        assert!(p.log_bytes_per_type[2].max(p.log_bytes_per_type[4]) < p.log_bytes_per_type[1], "{p:?}");
        assert!(p.cpu_us_per_type[0] > 0.0 && p.process_cpu_us_per_txn >= p.cpu_us_per_txn * 0.5, "{p:?}");
        // The kinds add up to (at least: other tests' databases log too) the window's records.
        let kinds: f64 = p.log_bytes_by_kind.iter().map(|(_, b)| b).sum();
        assert!(p.log_bytes_by_kind.iter().any(|(k, b)| k == "commit" && *b > 0.0), "{p:?}");
        assert!(kinds > 0.0, "{p:?}");
        assert_eq!(p.ha, "HA");
        assert!(!p.limit.is_empty());
    }
    let optane = r.devices.iter().find(|d| d.device == "optane").unwrap();
    assert!(optane.label.contains("EMULATED") && optane.label.contains("µs"), "{}", optane.label);
    assert!(optane.standby_location.as_deref().is_some_and(|s| s.contains("tmpfs")));
    for d in ["memory", "optane"] {
        let at = |pct: f64| r.summary.iter().find(|s| s.device == d && s.buffer_pct == pct).unwrap();
        assert_eq!(at(100.0).relative_pct, Some(100.0));
        assert!(at(20.0).hit_ratio <= at(100.0).hit_ratio, "{d}: a smaller buffer does not hit more");
    }
    let t = r.trace.as_ref().expect("a traced window");
    assert!(t.intervals > 0 && t.chart_png.ends_with(".png"));
    for f in
        ["points.csv", "throughput.png", "relative.svg", "trace_optane.png", "summary.txt", "results.json"]
    {
        assert!(out.dir.join(f).exists(), "{f} written");
    }
    assert!(out.summary.text.contains("consistency conditions 1-4"), "{}", out.summary.text);
    assert!(out.summary.text.contains("Cost per transaction"), "{}", out.summary.text);
    // The emulated device's lateness is counted per point; the real memory device has none.
    for p in &r.points {
        assert!((0.0..=1.0).contains(&p.emulator_late_share), "{p:?}");
        if p.device == "memory" {
            assert_eq!((p.emulator_late_us, p.emulator_late_share), (0.0, 0.0));
        }
    }
    assert!(out.summary.text.contains("past their modelled completion"), "{}", out.summary.text);
    assert!(!ram.exists(), "the RAM copies are removed");

    // --check on the loaded database, then on a broken one.
    let template = std::fs::read_dir(root.join("data"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir() && p.file_name().unwrap().to_string_lossy().starts_with("tpcc-w2-reduced"))
        .expect("the loaded database stays in the data directory");
    let report = check_dir(&template).expect("the loaded database is consistent");
    assert!(report.contains("conditions 1-4") && report.contains("every index entry matches"), "{report}");
    {
        let db = Database::open(&template, Options { wal: false, ..Options::default() }).unwrap();
        let t = Tables::open(&db).unwrap();
        let key = Value::Int(s::district_key(2, 4));
        let mut d = t.district.get(&key).unwrap().unwrap();
        d[s::district::NEXT_O_ID] = Value::Int(7);
        assert!(t.district.update(&d).unwrap());
        drop(t);
        db.close().unwrap();
    }
    let e = check_dir(&template).unwrap_err().to_string();
    assert!(e.contains("condition 2") && e.contains("warehouse 2, district 4"), "{e}");
    assert!(check_dir(&root).is_err(), "not a database");
    // The whole-lab page reads the run: no Case C devices here, so Fig. 7 says what is missing,
    // and the traces of Figs. 8/10 (if any) are shown.
    let page = nvmedb_lab::page::build(&root.join("results")).expect("lab page");
    let fig7 = page.rows.iter().find(|r| r.id == "seed000-fig7").expect("row");
    assert!(
        matches!(&fig7.status, nvmedb_lab::page::Status::NotRun(why) if why.contains("Case C")),
        "{fig7:?}"
    );
    // With Case C's figures in the run's summary (as a Case C run writes them), Fig. 7 compares
    // the ratios and optane's 5 %/100 % share with the paper's and decides by them.
    let case_c = |over_san: f64, share: f64| {
        let path = out.dir.join("summary.json");
        let mut doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let figs = doc["figures"].as_array_mut().unwrap();
        figs.retain(|f| {
            !f["name"].as_str().unwrap().starts_with("case_c/") && f["name"] != "optane/HA/share_at_5pct"
        });
        for f in [
            Figure::new("case_c/optane_over_san", "optane / san at 5 %", over_san, "x")
                .against("seed 000", 6.1),
            Figure::new("case_c/optane_over_nand", "optane / nand at 5 %", 1.5, "x").against("seed 000", 1.4),
            Figure::new("optane/HA/share_at_5pct", "optane 5 %/100 %", share, "%").against("seed 000", 70.0),
        ] {
            figs.push(serde_json::to_value(f).unwrap());
        }
        std::fs::write(&path, serde_json::to_string(&doc).unwrap()).unwrap();
        let page = nvmedb_lab::page::build(&root.join("results")).expect("lab page");
        page.rows.into_iter().find(|r| r.id == "seed000-fig7").expect("row")
    };
    let fig7 = case_c(6.4, 72.0);
    assert!(fig7.ours.contains("optane / san 6.40×") && fig7.ours.contains("5 %/100 % 72"), "{fig7:?}");
    assert!(matches!(fig7.status, nvmedb_lab::page::Status::Reproduced), "{fig7:?}");
    let fig7 = case_c(6.4, 41.0);
    assert!(
        matches!(&fig7.status, nvmedb_lab::page::Status::Differs(why) if why.contains("keeps 41")),
        "{fig7:?}"
    );
    let fig7 = case_c(2.0, 72.0);
    assert!(
        matches!(&fig7.status, nvmedb_lab::page::Status::Differs(why) if why.contains("optane / san is 2.00×")),
        "{fig7:?}"
    );
}

/// `--profile`: perf samples each point's measured window; the run keeps a flame graph, the
/// folded stacks and the top functions, in which the terminals' transactions show.
#[test]
fn a_profiled_point_writes_a_flame_graph_of_its_window() {
    if !nvmedb_lab::measure::profile::perf_installed() {
        assert!(
            std::env::var_os("NVMEDB_REQUIRE_PERF").is_none(),
            "perf is missing (Debian: linux-perf) and NVMEDB_REQUIRE_PERF is set"
        );
        eprintln!("skipped: perf is not installed (Debian: linux-perf)");
        return;
    }
    if let Err(why) = nvmedb_lab::measure::profile::perf_can_sample() {
        assert!(
            std::env::var_os("NVMEDB_REQUIRE_PERF").is_none(),
            "perf cannot sample and NVMEDB_REQUIRE_PERF is set: {why}"
        );
        eprintln!("skipped: perf cannot sample on this machine: {why}");
        return;
    }
    let root = scratch("profile");
    let cfg = TpccConfig {
        warehouses: 1,
        clients: 2,
        reduced: true,
        buffer_pcts: vec![100.0],
        devices: vec![DeviceKind::Memory],
        warmup_s: 0.2,
        duration_s: 1.0,
        repetitions: 1,
        data_dir: root.join("data"),
        ram_dir: PathBuf::from(format!("/dev/shm/nvmedb-tpcc-prof-{}", std::process::id())),
        iobench_s: 0.0,
        trace: false,
        profile: true,
        ..TpccConfig::default()
    };
    let opts = RunOptions { results_root: root.join("results"), progress: false };
    let out = experiment::run::<Tpcc>(&cfg, &opts).expect("the run succeeds");
    let p = out.results.profiles.first().expect("one profile per point");
    assert!(p.samples > 50, "{} samples in a 1 s window on busy terminals", p.samples);
    let svg = std::fs::read_to_string(out.dir.join(&p.flame_svg)).unwrap();
    assert!(svg.contains("<svg") && svg.contains("execute"), "the flame graph shows the transactions");
    assert!(p.top.iter().map(|f| f.self_pct).sum::<f64>() <= 100.0 + 1e-9);
    let folded = std::fs::read_to_string(out.dir.join(&p.folded)).unwrap();
    assert!(folded.lines().any(|l| l.contains("execute_with_retries")), "terminal stacks are sampled");
    // perf samples the whole process, where the other test may be loading its database; this
    // test's threads carry its name (threads inherit it), and saw only the window.
    let mine: Vec<&str> = folded.lines().filter(|l| l.starts_with("a_profiled_poin")).collect();
    assert!(!mine.is_empty(), "the test's terminals are named after it: {folded}");
    assert!(
        !mine.iter().any(|l| l.contains("load::load") || l.contains("check_consistency")),
        "only the window is sampled"
    );
    assert!(out.summary.text.contains("CPU profile of the measured window"), "{}", out.summary.text);
    assert!(
        !std::fs::read_dir(&out.dir).unwrap().any(|e| e
            .unwrap()
            .path()
            .extension()
            .is_some_and(|x| x == "data")),
        "perf's data file is removed once folded"
    );
}
