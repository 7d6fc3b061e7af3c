//! The primitive experiment's printed summary: the sweep, the devices, the model, the tracing
//! cost and the seed 000 Fig. 5 targets, one table each.
//!
//! Owns: [`summary_text`] and [`app_cpu_note`]. Invariants: every table names emulated devices
//! as EMULATED (the device label carries it); the sweep table states the WAL status and the
//! machine.

use super::{PrimitiveConfig, PrimitiveResults, WAL_STATUS};
use crate::machine::RunContext;
use crate::report::{Align, TextTable};

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

/// The sweep: min/median/max throughput and the counters of every (device, workload, buffer).
fn sweep_table(cfg: &PrimitiveConfig, ctx: &RunContext, r: &PrimitiveResults) -> TextTable {
    let mut t = TextTable::new([
        "device", "workload", "buffer %", "tps min", "tps median", "tps max", "rel. %", "hit ratio", "reads/s",
        "writes/s", "io µs/read", "cpu µs/txn", "log KiB/txn", "pad KiB/txn", "p99 µs",
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
    for c in 2..15 {
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
            format!("{:.2}", row.log_kib_per_txn),
            format!("{:.2}", row.log_pad_kib_per_txn),
            fmt0(row.latency_p99_us),
        ]);
    }
    t.note(format!("UPDATE: {WAL_STATUS}; SELECT writes no log."));
    t.note(
        "log KiB/txn: an UPDATE logs the bytes of the row it changed, before and after (a row patch: 2 × 8 B \
         for C1, not the 4 KiB row twice), its commit, and its page changes as diffs (torn pages are repaired \
         from the double-write area, so no page is logged whole after a checkpoint). pad KiB/txn: what the device is written beyond the records: each group-commit write \
         covers whole 4 KiB blocks, re-writing the start of its first block (the end of the write before) \
         and zeroing the rest of its last one.",
    );
    t.note("rel. % = median tps / the device's 100 % median tps; the machine is a shared 2-vCPU VM, so spreads are wide.");
    t.note(format!("machine: {}", ctx.one_line()));
    t
}

/// The devices: sizes, load time and the iobench/fio references measured in the run.
fn devices_table(cfg: &PrimitiveConfig, r: &PrimitiveResults) -> TextTable {
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
    d
}

/// The relative-performance model (seed 000 §3) against the measured share.
fn model_table(r: &PrimitiveResults) -> TextTable {
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
    .title("Relative-performance model (seed 000 §3): (t_cpu + 0.1) / (t_cpu + t_io) at the smallest buffer");
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
    m
}

/// The tracing cost: throughput with the tracer on against the runs around it.
fn tracing_table(r: &PrimitiveResults) -> TextTable {
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
    tr
}

/// The targets set from seed 000 Fig. 5, the paper's values and the device ceiling.
fn targets_table(r: &PrimitiveResults) -> TextTable {
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
    .title("Seed 000 Fig. 5 targets");
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
    tg
}

/// The printed summary: the sweep table, devices, model, tracing and targets.
pub fn summary_text(cfg: &PrimitiveConfig, ctx: &RunContext, r: &PrimitiveResults) -> String {
    let mut tables = vec![sweep_table(cfg, ctx, r), devices_table(cfg, r)];
    if !r.model.is_empty() {
        tables.push(model_table(r));
    }
    if !r.traces.is_empty() {
        tables.push(tracing_table(r));
    }
    if !r.targets.is_empty() {
        tables.push(targets_table(r));
    }
    tables.iter().map(|t| t.to_string()).collect::<Vec<_>>().join("\n")
}
