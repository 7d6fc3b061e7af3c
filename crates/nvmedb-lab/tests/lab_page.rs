//! The whole-lab page (`nvmedb lab report`): it builds from an empty results root and from tiny
//! runs of the primitive and HA experiments; every number of ours is read from the result files
//! (a value changed in `summary.json` or `results.json` shows up on the page); a run whose
//! results no longer parse is shown as unreadable, not dropped; and the page renders in a real
//! headless browser (Debian's `chromium`) with no console message and every plot drawn at a
//! non-zero size. Nothing about speed is asserted.

use nvmedb_lab::experiment::{self, RunOptions};
use nvmedb_lab::experiments::ha::{Ha, HaConfig};
use nvmedb_lab::experiments::primitive::{Primitive, PrimitiveConfig};
use nvmedb_lab::page::{self, Status, SECTIONS};
use nvmedb_testkit::TmpDir;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn scratch(name: &str) -> TmpDir {
    TmpDir::new(&format!("lab-page-{name}"))
}

/// Copies directory `from` into `to` (symbolic links as links), so a test can edit a copy.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let ty = e.file_type().unwrap();
        if ty.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src).unwrap(), &dst).unwrap();
        } else if ty.is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// One results root with a tiny primitive run (RAM and emulated optane, traced) and a tiny HA
/// run, made once for every test of this file; `None` without the plot font.
fn fixture() -> Option<&'static Path> {
    // Shared by every test of this binary for its whole life: a static is never dropped, so
    // the fixture's results stay under target/tmp (removed with `cargo clean`).
    static ROOT: OnceLock<Option<TmpDir>> = OnceLock::new();
    ROOT.get_or_init(|| {
        if !nvmedb_lab::report::font_path().exists() {
            eprintln!("skipping: no plot font at {}", nvmedb_lab::report::font_path().display());
            return None;
        }
        let dir = scratch("fixture");
        let opts = RunOptions { results_root: dir.join("results"), progress: false };
        let prim = PrimitiveConfig { repetitions: 1, ..PrimitiveConfig::tiny(dir.join("data")) };
        experiment::run::<Primitive>(&prim, &opts).expect("tiny primitive run");
        let ha = HaConfig {
            tables: 1,
            rows: 300,
            buffers: vec![10.0, 100.0],
            clients: 2,
            warmup_s: 0.05,
            duration_s: 0.2,
            reps: 1,
            delay_s: 0.2,
            iobench_s: 0.2,
            ram_dir: PathBuf::from(format!("/dev/shm/nvmedb-lab-page-ha-{}", std::process::id())),
            ..HaConfig::default_scale(dir.join("hadata"))
        };
        experiment::run::<Ha>(&ha, &opts).expect("tiny ha run");
        let _ = std::fs::remove_dir_all(dir.join("data"));
        let _ = std::fs::remove_dir_all(dir.join("hadata"));
        Some(dir)
    })
    .as_ref()
    .map(|d| -> &'static Path { Box::leak(d.join("results").into_boxed_path()) })
}

fn row<'a>(page: &'a page::LabPage, id: &str) -> &'a page::PageRow {
    page.rows.iter().find(|r| r.id == id).unwrap_or_else(|| panic!("no row {id}"))
}

#[test]
fn an_empty_results_root_gives_a_page_of_not_run_rows() {
    let dir = scratch("empty");
    for root in [dir.join("results"), dir.join("missing")] {
        if root.ends_with("results") {
            std::fs::create_dir_all(&root).unwrap();
        }
        let (page, path) = page::write(&root, Some(&dir.join("page.html"))).expect("page");
        assert_eq!(page.rows.len(), SECTIONS.len());
        assert!(page.rows.iter().all(|r| matches!(r.status, Status::NotRun(_)) && r.ours == "—"));
        let html = std::fs::read_to_string(path).unwrap();
        for s in SECTIONS {
            assert!(html.contains(&format!("id=\"{}\"", s.id)), "section {}", s.id);
        }
        assert!(html.contains("not yet run") && !html.contains("<figure"));
    }
    let (_, path) = page::write(&dir.join("results"), None).expect("default file");
    assert_eq!(path, dir.join("results").join(page::DEFAULT_FILE));
}

#[test]
fn tiny_runs_fill_their_sections_and_the_rest_stay_not_run() {
    let Some(root) = fixture() else { return };
    let page = page::build(root).expect("page");
    for id in ["seed000-fig1", "seed000-fig5", "seed001-traces", "seed000-fig6", "seed002-fig13"] {
        let r = row(&page, id);
        assert!(
            matches!(r.status, Status::Reproduced | Status::Differs(_)),
            "{id} should compare with the paper: {:?} {}",
            r.status,
            r.ours
        );
        assert_ne!(r.ours, "—", "{id}");
    }
    for id in ["seed000-fig7", "seed003-fig4", "seed004-q3", "seed002-fig9", "peers"] {
        assert!(matches!(row(&page, id).status, Status::NotRun(_)), "{id}");
    }
    // Emulated devices are labelled with the latency they achieved; plots are inline SVG.
    assert!(page.html.contains("optane (EMULATED, read p50"));
    assert!(page.html.contains("<figure class=\"plot\" data-plot=\"select_relative\">"));
    assert!(page.html.contains("<figure class=\"plot\" data-plot=\"throughput\">"));
    assert!(page.html.contains("data-plot=\"trace_select_optane\""));
    assert!(!page.html.to_lowercase().contains("issue"));
    // Every section with a run names its machine, commit and date.
    assert!(page.html.matches("class=\"prov\">Reproduce: <code>nvmedb lab primitive").count() >= 3);
    assert!(page.other_runs.is_empty());
}

#[test]
fn a_value_changed_in_a_result_file_is_on_the_page() {
    let Some(root) = fixture() else { return };
    let dir = scratch("edit");
    copy_tree(root, &dir.join("results"));
    let root = dir.join("results");
    let prim = std::fs::canonicalize(root.join("primitive/latest")).unwrap();
    // summary.json: the headline share of seed 000 Fig. 5.
    let path = prim.join("summary.json");
    let mut doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let fig = doc["figures"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|f| f["name"] == "select/optane/smallest_over_full_pct")
        .expect("the optane SELECT share");
    fig["value"] = serde_json::json!(12.345);
    std::fs::write(&path, serde_json::to_string(&doc).unwrap()).unwrap();
    // results.json: the model's CPU time per transaction (seed 000 Fig. 1).
    let path = prim.join("results.json");
    let mut doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for m in doc["results"]["model"].as_array_mut().unwrap() {
        m["t_cpu_us"] = serde_json::json!(4321.0);
    }
    std::fs::write(&path, serde_json::to_string(&doc).unwrap()).unwrap();

    let page = page::build(&root).expect("page");
    let fig5 = row(&page, "seed000-fig5");
    assert!(fig5.ours.contains("optane SELECT 12.3 %"), "{}", fig5.ours);
    assert!(matches!(&fig5.status, Status::Differs(why) if why.contains("12.3 %")), "{:?}", fig5.status);
    assert!(page.html.contains("optane SELECT 12.3 %"));
    assert!(page.html.contains("t_cpu 4\u{202f}321 µs"), "the model's input from results.json");

    // A run whose results.json no longer parses is shown as unreadable, naming the file.
    let ha = std::fs::canonicalize(root.join("ha/latest")).unwrap();
    std::fs::write(ha.join("results.json"), "{\"experiment\": \"ha\"").unwrap();
    let page = page::build(&root).expect("page");
    let fig6 = row(&page, "seed000-fig6");
    assert!(matches!(&fig6.status, Status::Unreadable(e) if e.contains("results.json")), "{:?}", fig6.status);
    assert!(matches!(row(&page, "seed000-fig5").status, Status::Differs(_)));
}

#[test]
fn the_page_renders_in_headless_chromium_without_errors() {
    let Some(root) = fixture() else { return };
    if !nvmedb_testkit::needs(nvmedb_testkit::CHROMIUM) {
        return;
    }
    let dir = scratch("chromium");
    let page = page::build(root).expect("page");
    let plots = page.html.matches("<figure class=\"plot\"").count();
    assert!(plots >= 6, "the tiny runs give plots to draw ({plots})");
    // The page allows no script; the check below is the test's own, added to a copy: it
    // writes the size of every plot into the DOM, which --dump-dom prints once the page loaded.
    let check = "<script>\nconst sizes=[...document.querySelectorAll('figure.plot')].map(f=>{const s=f.querySelector('svg');\
                 const r=s?s.getBoundingClientRect():{width:0,height:0};return [f.dataset.plot,r.width,r.height]});\n\
                 const pre=document.createElement('pre');pre.id='lab-check';pre.textContent=JSON.stringify(sizes);\
                 document.body.appendChild(pre);\n</script>\n</body>";
    assert!(page.html.contains("script-src 'none'"));
    let html = page.html.replace("script-src 'none'", "script-src 'unsafe-inline'").replace("</body>", check);
    let file = dir.join("page.html");
    std::fs::write(&file, html).unwrap();
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", file.display()))
        .output()
        .expect("chromium runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "chromium failed: {stderr}");
    // Every console message (errors, CSP violations, uncaught exceptions) is logged as CONSOLE.
    let console: Vec<&str> = stderr.lines().filter(|l| l.contains(":CONSOLE")).collect();
    assert!(console.is_empty(), "console messages: {console:#?}");
    let dom = String::from_utf8_lossy(&out.stdout);
    let json =
        dom.split("<pre id=\"lab-check\">").nth(1).and_then(|s| s.split("</pre>").next()).unwrap_or_else(
            || panic!("the check did not run; DOM ends with {}", &dom[dom.len().saturating_sub(500)..]),
        );
    let sizes: Vec<(String, f64, f64)> = serde_json::from_str(&json.replace("&amp;", "&")).expect("sizes");
    assert_eq!(sizes.len(), plots);
    for (plot, w, h) in &sizes {
        assert!(*w > 0.0 && *h > 0.0, "plot {plot} drawn at {w}×{h}");
    }
}
