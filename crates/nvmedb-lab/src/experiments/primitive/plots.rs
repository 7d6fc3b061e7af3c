//! The primitive experiment's plots: throughput and relative throughput against the buffer size
//! per workload (with the model at the achieved hit ratio and the device ceiling), and seed 000
//! Fig. 1 with the measured points.
//!
//! Owns: [`write`]. Invariant: every plot names emulated devices as EMULATED (the device label
//! carries it), the WAL status and the machine.

use super::summary::device_ceiling_series;
use super::text::app_cpu_note;
use super::{PrimitiveConfig, PrimitiveResults, Workload, WAL_STATUS};
use crate::machine::RunContext;
use crate::model::{self, ModelInput, ModelPoint};
use crate::report::{LegendPosition, LineChart, ResultsDir, Series};

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
            "{} tables × {} rows, {} clients, median of {} (min–max in CSV){}",
            cfg.tables,
            cfg.rows_per_table,
            cfg.clients,
            cfg.repetitions,
            app_cpu_note(cfg)
        ))
        .log_x(true)
        .x_ticks(cfg.buffer_pcts.clone())
        .legend(LegendPosition::LowerRight)
        .footnote(if w == Workload::Update { WAL_STATUS } else { "SELECT: read only, no log" })
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

/// Writes every plot of the workloads that ran.
pub fn write(
    cfg: &PrimitiveConfig,
    ctx: &RunContext,
    dir: &ResultsDir,
    r: &PrimitiveResults,
) -> crate::report::Result<()> {
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
    Ok(())
}
