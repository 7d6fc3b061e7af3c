//! The page's HTML: the summary table, the runs, one section per seed figure, the other runs.
//!
//! Owns: [`page`]. Invariants: all text is escaped; plots are inline SVG inside
//! `<figure class="plot">` (a plot that cannot be embedded is named with its error in its
//! place); the document declares a content security policy that allows no network access and no
//! script; every section names the run's machine, commit, date and command.

use super::extract::num;
use super::{pretty_utc, Filled, Finding, Run, Section, Status};
use crate::report::{escape, inline_svg};
use std::fmt::Write;
use std::path::Path;

const STYLE: &str = "
body{font-family:'DejaVu Sans',sans-serif;margin:1.5em auto;max-width:1200px;padding:0 1em;color:#222;line-height:1.4}
h1{font-size:1.6em;margin-bottom:.2em} h2{margin-top:1.8em;border-bottom:1px solid #ccc} h3{font-size:1em;margin:1em 0 .3em}
table{border-collapse:collapse;margin:.5em 0;width:100%} th,td{border:1px solid #ddd;padding:.3em .5em;vertical-align:top;text-align:left}
th{background:#f4f4f4} small{color:#555} code{background:#f4f4f4;padding:0 .2em;font-size:.9em;word-break:break-all}
td.st{font-weight:bold;white-space:nowrap} td.st small{font-weight:normal;white-space:normal;display:block;max-width:28em}
.ok{color:#11632a;background:#e9f7ee} .differs{color:#8a4b00;background:#fff4e0} .notrun{color:#666;background:#f2f2f2}
.bad{color:#9b1111;background:#fdeaea} .shown{color:#1f4e8a;background:#eaf1fb}
figure.plot{margin:1em 0;overflow-x:auto} figure.plot svg{max-width:100%;height:auto;display:block}
figure.plot figcaption{font-size:.85em;color:#555}
p.prov{font-size:.85em;color:#444;border-left:3px solid #ccc;padding-left:.6em}
table.cmp th{width:9em} table.details td:first-child{width:40%}
";

/// The whole document.
pub(super) fn page(root: &Path, filled: &[Filled], other: &[&Run]) -> crate::error::Result<String> {
    let mut h = String::new();
    let count = |f: fn(&Status) -> bool| filled.iter().filter(|x| f(&x.finding.status)).count();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src 'none'\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>nvmedb laboratory: the papers' figures beside ours</title>\n<style>{STYLE}</style>\n</head>\n<body>\n\
         <h1>nvmedb laboratory: the papers' figures beside ours</h1>\n\
         <p>Built from the latest run of every experiment under <code>{}</code>. {} of {} figures reproduced, {} differ, {} not yet run{}.\n\
         Emulated devices are labelled EMULATED with the latency they achieved in the run. The paper's numbers are quoted from the seeds; every other number is read from the runs' <code>summary.json</code> and <code>results.json</code>.</p>\n",
        escape(&root.display().to_string()),
        count(|s| *s == Status::Reproduced),
        filled.len(),
        count(|s| matches!(s, Status::Differs(_))),
        count(|s| matches!(s, Status::NotRun(_))),
        match count(|s| matches!(s, Status::Unreadable(_) | Status::Shown)) {
            0 => String::new(),
            n => format!(", {n} shown without a comparison or unreadable"),
        }
    );
    summary_table(&mut h, filled);
    runs_table(&mut h, root, filled, other);
    for f in filled {
        section(&mut h, f.section, f.run, &f.finding);
    }
    for r in other {
        let finding = super::extract::generic(r);
        let _ = write!(
            h,
            "<section id=\"run-{0}\">\n<h2>Other run: {0}</h2>\n<p>{1}</p>\n",
            escape(r.experiment()),
            escape(&r.summary.title)
        );
        body(&mut h, r, &finding);
        provenance(&mut h, r, &format!("nvmedb lab {}", r.experiment()));
        h.push_str("</section>\n");
    }
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let _ = write!(h, "<footer><p class=\"prov\">Generated {} by <code>nvmedb lab report</code>.</p></footer>\n</body>\n</html>\n", pretty_utc(now));
    Ok(h)
}

fn status_cell(s: &Status) -> String {
    let mut c = format!("<td class=\"st {}\">{}", s.class(), escape(s.label()));
    if let Some(d) = s.detail() {
        let _ = write!(c, "<small>{}</small>", escape(d));
    }
    c.push_str("</td>");
    c
}

fn summary_table(h: &mut String, filled: &[Filled]) {
    h.push_str(
        "<h2 id=\"summary\">Summary</h2>\n<table class=\"summary\">\n<thead><tr><th>Figure</th><th>Paper</th><th>Ours</th><th>Status</th></tr></thead>\n<tbody>\n",
    );
    for f in filled {
        let s = f.section;
        let _ = writeln!(
            h,
            "<tr><td><a href=\"#{}\">{}</a><br><small>{}</small></td><td>{}</td><td>{}</td>{}</tr>",
            s.id,
            escape(&s.figure_name()),
            escape(s.title),
            escape(s.paper),
            escape(&f.finding.ours),
            status_cell(&f.finding.status)
        );
    }
    h.push_str("</tbody>\n</table>\n");
}

fn runs_table(h: &mut String, root: &Path, filled: &[Filled], other: &[&Run]) {
    let mut runs: Vec<&Run> = filled.iter().filter_map(|f| f.run).collect();
    runs.extend(other.iter().copied());
    runs.sort_by(|a, b| a.experiment().cmp(b.experiment()));
    runs.dedup_by(|a, b| a.experiment() == b.experiment());
    h.push_str("<h2 id=\"runs\">Runs</h2>\n");
    if runs.is_empty() {
        h.push_str("<p>No experiment has a finished run under the results root yet: run <code>./scripts/lab-all.sh</code>.</p>\n");
        return;
    }
    h.push_str("<table class=\"runs\"><thead><tr><th>Experiment</th><th>Date</th><th>Commit</th><th>Machine</th><th>Directory</th></tr></thead><tbody>\n");
    for r in runs {
        let c = r.context();
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td><code>{}</code></td></tr>",
            escape(r.experiment()),
            escape(&r.date()),
            escape(&c.git_commit),
            escape(&machine(r)),
            escape(&r.dir_under(root).display().to_string())
        );
    }
    h.push_str("</tbody></table>\n");
}

fn machine(r: &Run) -> String {
    let c = r.context();
    format!(
        "{}: {} CPUs ({}), {} GiB RAM, kernel {}",
        c.hostname,
        c.cpus,
        c.cpu_model,
        num(c.memory_bytes as f64 / (1u64 << 30) as f64),
        c.kernel
    )
}

fn section(h: &mut String, s: &Section, run: Option<&Run>, f: &Finding) {
    let _ = write!(
        h,
        "<section id=\"{}\">\n<h2>{} — {}</h2>\n<table class=\"cmp\">\n<tr><th>Paper</th><td>{}</td></tr>\n<tr><th>Ours</th><td>{}</td></tr>\n",
        s.id,
        escape(&s.figure_name()),
        escape(s.title),
        escape(s.paper),
        escape(&f.ours)
    );
    if !f.comparison.is_empty() {
        let _ = writeln!(h, "<tr><th>Comparison</th><td>{}</td></tr>", escape(&f.comparison));
    }
    let _ = writeln!(h, "<tr><th>Status</th>{}</tr>\n</table>", status_cell(&f.status));
    match run {
        Some(r) => {
            body(h, r, f);
            provenance(h, r, s.command);
        }
        None => {
            let _ = writeln!(
                h,
                "<p class=\"prov\">Reproduce: <code>{}</code>, then <code>nvmedb lab report</code>.</p>",
                escape(s.command)
            );
        }
    }
    h.push_str("</section>\n");
}

fn body(h: &mut String, r: &Run, f: &Finding) {
    if !f.details.is_empty() {
        h.push_str("<h3>Measured</h3>\n<table class=\"details\">\n");
        for (k, v) in &f.details {
            let _ = writeln!(h, "<tr><td>{}</td><td>{}</td></tr>", escape(k), escape(v));
        }
        h.push_str("</table>\n");
    }
    if !f.devices.is_empty() {
        h.push_str("<h3>Devices</h3>\n<ul class=\"devices\">\n");
        for d in &f.devices {
            let _ = writeln!(h, "<li>{}</li>", escape(d));
        }
        h.push_str("</ul>\n");
    }
    for stem in &f.plots {
        let Some(path) = r.plot(stem) else { continue };
        match inline_svg(&path) {
            Ok(svg) => {
                let _ = write!(
                    h,
                    "<figure class=\"plot\" data-plot=\"{0}\">\n{1}\n<figcaption>{0}.svg</figcaption>\n</figure>\n",
                    escape(stem),
                    svg
                );
            }
            Err(e) => {
                let _ = writeln!(h, "<p class=\"bad\">plot {}: {}</p>", escape(stem), escape(&e.to_string()));
            }
        }
    }
}

fn provenance(h: &mut String, r: &Run, command: &str) {
    let c = r.context();
    let _ = writeln!(
        h,
        "<p class=\"prov\">Reproduce: <code>{}</code>. This run: <code>{}</code> on {}, commit <code>{}</code>, {}.</p>",
        escape(command),
        escape(&c.command),
        escape(&machine(r)),
        escape(&c.git_commit),
        escape(&r.date())
    );
}
