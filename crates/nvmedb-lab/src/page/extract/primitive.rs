//! Seed 000 Figs. 1 and 5 and seed 001's traces, from a run of `nvmedb lab primitive`.
//!
//! Owns: [`fig1`], [`fig5`], [`traces`]. The paper's low-latency device is the emulated
//! `optane` profile and its mid-latency device the emulated `nand` profile (the real disk and
//! other profiles are listed beside them). Shares of the 100 % throughput come from the
//! `<workload>/<device>/smallest_over_full_pct` figures of `summary.json`; the model, the
//! device ceilings and the traces from `results.json`.

use super::{buffer, num, pct, ratio, Finding, Run, Status, TOLERANCE_POINTS};
use crate::error::Result;
use crate::experiments::primitive::{PrimitiveConfig, PrimitiveResults};
use crate::model::{relative_performance, PAPER_T_MEM_US};
use crate::report::ResultFile;

/// The profile standing for the paper's low-latency SSD (Optane).
pub const LOW_LATENCY: &str = "optane";
/// The profile standing for the paper's mid-latency NVMe NAND SSD.
pub const MID_LATENCY: &str = "nand";

/// Seed 000 Fig. 5 at 1 % buffer, % of 100 %: (device, workload, paper).
const FIG5_PAPER: [(&str, &str, f64); 4] = [
    (LOW_LATENCY, "select", 90.0),
    (LOW_LATENCY, "update", 78.0),
    (MID_LATENCY, "select", 54.0),
    (MID_LATENCY, "update", 34.0),
];

type Doc = ResultFile<PrimitiveConfig, PrimitiveResults>;

fn smallest(doc: &Doc) -> f64 {
    doc.config.buffer_pcts.iter().copied().fold(f64::INFINITY, f64::min)
}

fn label_of(doc: &Doc, device: &str) -> String {
    doc.results
        .devices
        .iter()
        .find(|d| d.device == device)
        .map_or_else(|| device.to_string(), |d| d.label.clone())
}

fn devices(doc: &Doc) -> Vec<String> {
    doc.results
        .devices
        .iter()
        .map(|d| {
            if d.read_qd32_iops <= 0.0 {
                return format!("{}: no device reference measured", d.label);
            }
            let mut s = format!(
                "{}: page read QD1 p50 {} µs, p99 {} µs",
                d.label,
                num(d.read_qd1_p50_us),
                num(d.read_qd1_p99_us)
            );
            s.push_str(&format!(", QD32 {} IOPS", num(d.read_qd32_iops)));
            if let Some(f) = d.fio_read_qd32_iops {
                s.push_str(&format!(" (fio {} IOPS)", num(f)));
            }
            s
        })
        .collect()
}

fn upper(w: &str) -> String {
    w.to_ascii_uppercase()
}

/// Seed 000 Fig. 5: each device's smallest-buffer throughput as a share of its 100 %.
pub fn fig5(run: &Run) -> Result<Finding> {
    let doc: Doc = run.results()?;
    let small = smallest(&doc);
    let mut details = Vec::new();
    for d in &doc.results.devices {
        for w in ["select", "update"] {
            if let Some(f) = run.figure(&format!("{w}/{}/smallest_over_full_pct", d.device)) {
                let mut v = pct(f.value);
                if let Some(r) = &f.reference {
                    v.push_str(&format!("  ({}: {})", r.label, pct(r.value)));
                }
                details.push((
                    format!("{} on {} at {} % buffer, % of 100 %", upper(w), d.label, buffer(small)),
                    v,
                ));
            }
        }
    }
    for s in &doc.results.summary {
        details.push((
            format!("{} on {} at {} % buffer", upper(&s.workload), s.device_label, buffer(s.buffer_pct)),
            format!(
                "{} tps median (min {}, max {}, n {}), hit ratio {}",
                num(s.tps_median),
                num(s.tps_min),
                num(s.tps_max),
                s.n,
                num(s.hit_ratio)
            ),
        ));
    }
    let mut ours = Vec::new();
    let mut compared = Vec::new();
    let mut misses = Vec::new();
    for (dev, w, paper) in FIG5_PAPER {
        let Some(f) = run.figure(&format!("{w}/{dev}/smallest_over_full_pct")) else { continue };
        ours.push(format!("{dev} {} {}", upper(w), pct(f.value)));
        compared.push(format!(
            "{dev} {} {} vs {} ({})",
            upper(w),
            pct(f.value),
            pct(paper),
            ratio(f.value, paper)
        ));
        if (f.value - paper).abs() > TOLERANCE_POINTS {
            misses.push((dev, w, paper, f.value));
        }
    }
    let status = if ours.is_empty() {
        Status::NotRun(format!("the run measured neither `{LOW_LATENCY}` nor `{MID_LATENCY}` (--devices)"))
    } else if let Some(&(dev, w, paper, value)) =
        misses.iter().max_by(|a, b| (a.3 - a.2).abs().total_cmp(&(b.3 - b.2).abs()))
    {
        Status::Differs(fig5_reason(&doc, dev, w, paper, value, small))
    } else if small > 1.0 {
        Status::Differs(format!(
            "the shares match within {TOLERANCE_POINTS} points, but the smallest buffer here is {} %, not 1 %",
            buffer(small)
        ))
    } else {
        Status::Reproduced
    };
    let mut f = Finding::new(ours.join("; "), compared.join("; "), status);
    f.details = details;
    f.devices = devices(&doc);
    f.plots =
        run.plots_present(&["select_relative", "update_relative", "select_throughput", "update_throughput"]);
    Ok(f)
}

/// Why `dev`'s `w` share differs from the paper's, from the run: the device ceiling when it
/// caps the share, else the model with this run's inputs.
fn fig5_reason(doc: &Doc, dev: &str, w: &str, paper: f64, value: f64, small: f64) -> String {
    let label = label_of(doc, dev);
    let head = format!("{} on {label}: {} vs the paper's {}", upper(w), pct(value), pct(paper));
    let target = doc.results.targets.iter().find(|t| t.device_label == label && t.workload == w);
    if let Some(c) = target.and_then(|t| t.device_ceiling_pct).filter(|c| *c < paper - TOLERANCE_POINTS / 2.0)
    {
        return format!(
            "{head}. Device ceiling: this device's QD32 page-read rate allows at most {} here",
            pct(c)
        );
    }
    let mut s = head;
    if let Some(m) = doc.results.model.iter().find(|m| m.device_label == label && m.workload == w) {
        let t_io = if m.t_io_device_us > 0.0 { m.t_io_device_us } else { m.t_io_us };
        let model = m.model_device_pct.unwrap_or(m.model_pct);
        s.push_str(&format!(
            ". The model with this run's t_cpu {} µs and t_io {} µs predicts {} (the paper's t_cpu was 100–150 µs, t_io 20–30 µs)",
            num(m.t_cpu_us),
            num(t_io),
            pct(model)
        ));
    }
    s.push_str(&format!("; {} clients on {} CPUs", doc.config.clients, doc.context.cpus));
    if small > 1.0 {
        s.push_str(&format!("; smallest buffer {} %", buffer(small)));
    }
    s
}

/// Seed 000 Fig. 1: the model at each device's measured t_cpu and t_io beside the measured
/// share.
pub fn fig1(run: &Run) -> Result<Finding> {
    let doc: Doc = run.results()?;
    let rows: Vec<_> = doc.results.model.iter().filter(|m| m.model_device_pct.is_some()).collect();
    let mut details = Vec::new();
    let mut worst: Option<(f64, String)> = None;
    for m in &rows {
        let model = m.model_device_pct.unwrap_or(m.model_pct);
        details.push((
            format!("{} on {}", upper(&m.workload), m.device_label),
            format!(
                "t_cpu {} µs, t_io {} µs → model {}; measured {} (hit ratio {})",
                num(m.t_cpu_us),
                num(m.t_io_device_us),
                pct(model),
                pct(m.measured_pct),
                num(m.hit_ratio)
            ),
        ));
        let gap = m.measured_pct - model;
        if gap.abs() > TOLERANCE_POINTS && worst.as_ref().is_none_or(|w| gap.abs() > w.0.abs()) {
            worst = Some((
                gap,
                format!(
                    "{} on {}: measured {} vs the model's {} at t_cpu {} µs, t_io {} µs (the model assumes every access misses; hit ratio here {})",
                    upper(&m.workload),
                    m.device_label,
                    pct(m.measured_pct),
                    pct(model),
                    num(m.t_cpu_us),
                    num(m.t_io_device_us),
                    num(m.hit_ratio)
                ),
            ));
        }
    }
    let key = rows
        .iter()
        .find(|m| m.workload == "select" && m.device_label.starts_with(LOW_LATENCY))
        .or_else(|| rows.first());
    let ours = key.map_or_else(
        || "—".to_string(),
        |m| {
            format!(
                "{} {}: model {}, measured {}",
                m.device_label.split(' ').next().unwrap_or(""),
                upper(&m.workload),
                pct(m.model_device_pct.unwrap_or(m.model_pct)),
                pct(m.measured_pct)
            )
        },
    );
    let paper_point = relative_performance(100.0, PAPER_T_MEM_US, 10.0) * 100.0;
    let comparison = match key {
        Some(m) => format!(
            "the paper's formula at this run's t_cpu {} µs and t_io {} µs gives {}; the paper's own point (100 µs, 10 µs) gives {}",
            num(m.t_cpu_us),
            num(m.t_io_device_us),
            pct(m.model_device_pct.unwrap_or(m.model_pct)),
            pct(paper_point)
        ),
        None => String::new(),
    };
    let status = match (rows.is_empty(), worst) {
        (true, _) => {
            Status::NotRun("the run measured no device reference (iobench) to put in the model".into())
        }
        (false, Some((_, reason))) => Status::Differs(reason),
        (false, None) => Status::Reproduced,
    };
    let mut f = Finding::new(ours, comparison, status);
    f.details = details;
    f.devices = devices(&doc);
    f.plots = run.plots_present(&["select_model", "update_model"]);
    Ok(f)
}

/// Seed 001 Figs. 7/8: CPU and I/O time per data read from the traced window, and the model
/// they give.
pub fn traces(run: &Run) -> Result<Finding> {
    let doc: Doc = run.results()?;
    let paper = relative_performance(400.0, PAPER_T_MEM_US, 30.0) * 100.0;
    let mut details = Vec::new();
    let mut key = None;
    for t in &doc.results.traces {
        let (Some(cpu), Some(io)) = (t.trace_t_cpu_us, t.trace_t_io_us) else { continue };
        let model = relative_performance(cpu, PAPER_T_MEM_US, io) * 100.0;
        details.push((
            format!("{} on {} at {} % buffer", upper(&t.workload), t.device_label, buffer(t.buffer_pct)),
            format!(
                "CPU {} µs and I/O {} µs per data read → model {}; {} tps traced vs {} untraced, {} intervals",
                num(cpu),
                num(io),
                pct(model),
                num(t.tps_tracing_on),
                num(t.tps_tracing_off),
                num(t.intervals as f64)
            ),
        ));
        if t.workload == "select" && key.is_none() {
            key = Some((t.device_label.clone(), cpu, io, model));
        }
    }
    let Some((dev, cpu, io, model)) = key else {
        let mut f =
            Finding::new("—", "", Status::NotRun("the run traced no SELECT window (--no-trace)".into()));
        f.details = details;
        return Ok(f);
    };
    let ours = format!("SELECT on {dev}: CPU {} µs, I/O {} µs per read → {}", num(cpu), num(io), pct(model));
    let comparison = format!(
        "I/O is {} of a read's time here vs {} in the paper (30 of 430 µs); model {} vs the paper's {}",
        pct(100.0 * io / (cpu + io)),
        pct(100.0 * 30.0 / 430.0),
        pct(model),
        pct(paper)
    );
    let status = if (model - paper).abs() <= TOLERANCE_POINTS {
        Status::Reproduced
    } else {
        Status::Differs(format!(
            "CPU per data read is {} µs here vs ≈ 400 µs in the paper and I/O {} µs vs ≈ 30 µs ({}; {} CPUs)",
            num(cpu),
            num(io),
            dev,
            doc.context.cpus
        ))
    };
    let mut f = Finding::new(ours, comparison, status);
    f.details = details;
    f.devices = devices(&doc);
    f.plots = run.plots_starting("trace_");
    Ok(f)
}
