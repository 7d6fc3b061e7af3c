//! The primitive experiment's summaries: min/median/max per point, the relative-performance
//! model of seed 000 §3, the seed 000 Fig. 5 targets and the device ceiling.
//!
//! Owns: [`summarise`], [`model_rows`], [`targets`], [`device_ceiling_series`] and
//! [`assemble`]. Invariants: only sweep points (tracing off) enter the summary; a device's
//! relative throughput is against its own 100 % median.

use super::{
    DeviceReport, ModelRow, PointResult, PrimitiveResults, SummaryRow, TargetRow, TraceRun, Workload,
    WAL_STATUS,
};
use crate::measure::{median, Spread};
use crate::model::ModelInput;
use crate::report::{Series, SeriesStyle};

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
            let tps = Spread::of(&ps.iter().map(|p| p.tps).collect::<Vec<_>>());
            SummaryRow {
                device: d.clone(),
                device_label: ps.first().map(|p| p.device_label.clone()).unwrap_or_default(),
                workload: w.clone(),
                buffer_pct: *pct,
                n: ps.len(),
                tps_min: tps.min,
                tps_median: tps.median,
                tps_max: tps.max,
                relative_pct: None,
                hit_ratio: col(&|p| p.hit_ratio),
                data_reads_per_s: col(&|p| p.data_reads_per_s),
                data_writes_per_s: col(&|p| p.data_writes_per_s),
                io_us_per_read: col(&|p| p.io_us_per_read),
                cpu_us_per_txn: col(&|p| p.cpu_us_per_txn),
                log_kib_per_txn: col(&|p| p.log_kib_per_txn),
                log_pad_kib_per_txn: col(&|p| p.log_pad_kib_per_txn),
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
                r.relative_pct = Some(100.0 * (r.tps_median / base));
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

/// The targets set from seed 000 Fig. 5: on emulated optane SELECT ≥ 90 % and UPDATE ≥ 80 % at
/// the smallest buffer; other devices are reported with the paper's numbers where it has them,
/// and the disk with its reads/s as a share of the QD32 page-size read limit.
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
    points: Vec<PointResult>,
    devices: Vec<DeviceReport>,
    traces: Vec<TraceRun>,
) -> PrimitiveResults {
    let summary = summarise(&points);
    let model = model_rows(&summary, &devices);
    let targets = targets(&summary, &devices);
    PrimitiveResults { wal: WAL_STATUS.into(), points, summary, devices, model, traces, targets }
}
