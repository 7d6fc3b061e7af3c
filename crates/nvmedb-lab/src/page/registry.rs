//! The registry of the page: one [`Section`] per seed figure or table the lab reproduces.
//!
//! Owns: [`SECTIONS`]. Invariants: the paper's numbers here are quoted from the seeds (the only
//! numbers on the page not read from a result file); every section names the experiment whose
//! latest run it reads and the command that reproduces it. A new experiment's figure is one entry
//! (or, for the placeholders below, its extractor filled in); until its experiment has a run, the
//! section is a "not run" row.

use super::extract::{engine, ha, primitive, tpcc, xlog};
use super::{Finding, Run};
use crate::error::Result;

/// Reads what a section shows from the experiment's latest run.
pub type Extractor = fn(&Run) -> Result<Finding>;

/// One seed figure or table on the page.
#[derive(Debug)]
pub struct Section {
    /// Anchor on the page (stable).
    pub id: &'static str,
    /// The seed ("Seed 000").
    pub seed: &'static str,
    /// The figure or table ("Fig. 5").
    pub figure: &'static str,
    /// What it shows.
    pub title: &'static str,
    /// The paper's number(s) or shape, quoted from the seed.
    pub paper: &'static str,
    /// The experiment whose latest run reproduces it (`results/<experiment>/latest`).
    pub experiment: &'static str,
    /// The command that reproduces it at the default scale (and the papers' scale).
    pub command: &'static str,
    /// Reads the finding from the run; `None` shows the run's headline figures as they are.
    pub extract: Option<Extractor>,
}

impl Section {
    /// "Seed 000 Fig. 5".
    pub fn figure_name(&self) -> String {
        format!("{} {}", self.seed, self.figure)
    }
}

/// Every section, in page order.
pub static SECTIONS: &[Section] = &[
    Section {
        id: "seed000-fig1",
        seed: "Seed 000",
        figure: "Fig. 1",
        title: "Relative performance estimated from CPU time between I/Os and I/O latency",
        paper: "(t_cpu + 0.1 µs) / (t_cpu + t_io): 91 % at t_cpu 100 µs, t_io 10 µs; 50 % at t_io 100 µs; \
                Case A matched it (t_cpu 100–150 µs, t_io 20–30 µs → 80–90 %)",
        experiment: "primitive",
        command: "nvmedb lab primitive   (papers' scale: --full-scale)",
        extract: Some(primitive::fig1),
    },
    Section {
        id: "seed000-fig5",
        seed: "Seed 000",
        figure: "Fig. 5",
        title: "Case A: SELECT and UPDATE throughput vs table buffer, low- and mid-latency devices",
        paper: "at 1 % buffer, % of 100 %: low-latency SELECT 90 %, UPDATE 78 %; mid-latency SELECT 54 %, UPDATE 34 %",
        experiment: "primitive",
        command: "nvmedb lab primitive   (papers' scale: --full-scale)",
        extract: Some(primitive::fig5),
    },
    Section {
        id: "seed000-fig6",
        seed: "Seed 000",
        figure: "Fig. 6",
        title: "Case B: update throughput, single vs HA with synchronous data and log duplication",
        paper: "HA / single: 88 % at 100 % buffer, 93 % at 1 % buffer",
        experiment: "ha",
        command: "nvmedb lab ha   (papers' scale: --full)",
        extract: Some(ha::fig6),
    },
    Section {
        id: "seed000-fig7",
        seed: "Seed 000",
        figure: "Fig. 7",
        title: "Case C: TPC-C-like mixed workload on HA, low-latency vs mid-latency vs external storage",
        paper: "low-latency vs external storage: 1.1× at 100 % buffer, 6.1× at 5 %; vs mid-latency: 1.4× at both; low-latency at 5 % keeps 70 % of its 100 % throughput",
        experiment: "tpcc",
        command: "nvmedb lab tpcc",
        extract: Some(tpcc::fig7),
    },
    Section {
        id: "seed000-fig8-10",
        seed: "Seed 000",
        figure: "Figs. 8/10",
        title: "Traces of the mixed workload at 100 % and 5 % buffer",
        paper: "100 % buffer: CPU and log-write waits; 5 % buffer: data reads dominate, most on external storage",
        experiment: "tpcc",
        command: "nvmedb lab tpcc",
        extract: Some(tpcc::traces),
    },
    Section {
        id: "seed000-fig11",
        seed: "Seed 000",
        figure: "Fig. 11",
        title: "Relative server cost: in-memory vs low-latency SSDs with a 5 % buffer",
        paper: "low-latency configuration costs 51 % of the in-memory one; 1.4× the cost performance",
        experiment: "tiers",
        command: "nvmedb lab tiers",
        extract: None,
    },
    Section {
        id: "seed001-traces",
        seed: "Seed 001",
        figure: "Figs. 7/8",
        title: "Execution traces of SELECT and UPDATE at 1 % buffer, 20 clients",
        paper: "SELECT: CPU ≈ 400 µs per transaction, data read ≈ 30 µs (low-latency) vs ≈ 400 µs (NVMe) → 93 % vs 50 %",
        experiment: "primitive",
        command: "nvmedb lab primitive   (traced device: --trace-device)",
        extract: Some(primitive::traces),
    },
    Section {
        id: "seed002-fig9",
        seed: "Seed 002",
        figure: "Fig. 9",
        title: "Transaction throughput and latency vs workers: no log, memory log, fast side, conventional side",
        paper: "all four equal up to 4 workers; at 8 the conventional side stalls near 200 k txn/s while the fast side keeps pace with no log",
        experiment: "xlog",
        command: "nvmedb lab xlog --parts fig9   (longer: --long)",
        extract: Some(xlog::fig9),
    },
    Section {
        id: "seed002-fig10",
        seed: "Seed 002",
        figure: "Fig. 10",
        title: "Fast-side throughput vs write size",
        paper: "throughput rises with write size: best at 64 B (SRAM), flat from 16 B (DRAM)",
        experiment: "xlog",
        command: "nvmedb lab xlog --parts fig10",
        extract: Some(xlog::fig10),
    },
    Section {
        id: "seed002-fig11",
        seed: "Seed 002",
        figure: "Fig. 11",
        title: "Commit latency and throughput vs group-commit size and device queue size",
        paper: "a 32 KB queue gives the best throughput at every group-commit size",
        experiment: "xlog",
        command: "nvmedb lab xlog --parts fig11",
        extract: Some(xlog::fig11),
    },
    Section {
        id: "seed002-fig12",
        seed: "Seed 002",
        figure: "Fig. 12",
        title: "Opportunistic destaging: conventional workload at 50 % of the device with a growing fast workload",
        paper: "neutral priority: both workloads lose bandwidth past the device's capacity; conventional priority keeps the conventional 50 %",
        experiment: "xlog",
        command: "nvmedb lab xlog --parts fig12",
        extract: Some(xlog::fig12),
    },
    Section {
        id: "seed002-fig13",
        seed: "Seed 002",
        figure: "Fig. 13",
        title: "Replication delay: write on the primary until the standby's acknowledgement covers it",
        paper: "4.5–5.2 µs with counter updates every 0.4 µs; 4.6–7.3 µs every 1.6 µs",
        experiment: "ha",
        command: "nvmedb lab ha",
        extract: Some(ha::fig13),
    },
    Section {
        id: "seed003-fig4",
        seed: "Seed 003",
        figure: "Fig. 4",
        title: "TPC-C throughput on PostgreSQL per device and hybrid placement",
        paper: "the device alone speeds TPC-C up to 24× (HDD → RAM); SSD 7× HDD; hybrid H1 ≈ 20× HDD",
        experiment: "tiers",
        command: "nvmedb lab tiers",
        extract: None,
    },
    Section {
        id: "seed003-fig6",
        seed: "Seed 003",
        figure: "Fig. 6",
        title: "Cost-benefit of HDD, SSD, RAM and hybrid placements",
        paper: "H1 cost-benefit 6 vs RAM 4; H4 near SSD throughput at half its cost",
        experiment: "tiers",
        command: "nvmedb lab tiers",
        extract: None,
    },
    Section {
        id: "seed004-q3",
        seed: "Seed 004",
        figure: "Q3",
        title: "Modified TPC-H Q3 under shared (SHR-1/16/512) and separated (SEP) buffers",
        paper: "SEP 6.37× faster than SHR; up to 1.48 M IOPS, 98 % of the devices' potential",
        experiment: "tpch",
        command: "nvmedb lab tpch",
        extract: None,
    },
    Section {
        id: "seed004-scan",
        seed: "Seed 004",
        figure: "SEP vs SHR (full scan)",
        title: "The buffer policies of seed 004 on a full table scan (the engine part `scan`)",
        paper: "SEP 6.37× faster than SHR; up to 98 % of the devices' potential",
        experiment: "engine",
        command: "nvmedb lab engine --parts scan",
        extract: Some(engine::seed004_scan),
    },
    Section {
        id: "peers",
        seed: "Peers",
        figure: "(no seed figure)",
        title: "Other engines on the same workloads on this machine",
        paper: "— (the papers compare with a commercial DBMS and PostgreSQL)",
        experiment: "peers",
        command: "nvmedb lab peers",
        extract: None,
    },
    Section {
        id: "peers-pgbench",
        seed: "Peers",
        figure: "(no seed figure)",
        title: "pgbench select-only and TPC-B-like: nvmedb serve against PostgreSQL 15 on this machine",
        paper: "— (seed 003 drives PostgreSQL with pgbench and OLTP-Bench)",
        experiment: "pgbench",
        command: "nvmedb lab pgbench   (the documented comparison: --scale 10 --secs 15)",
        extract: None,
    },
    Section {
        id: "ops",
        seed: "Operations",
        figure: "(no seed figure)",
        title: "Standby reads (the primary's commits with and without them, the standby's apply lag), backup beside fio, restore per GiB of log",
        paper: "— (the goal: with 8 readers on the standby the primary commits at most 5 % less)",
        experiment: "ops",
        command: "nvmedb lab ops   (larger scale: --full)",
        extract: None,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_every_seed_is_covered() {
        let mut ids: Vec<_> = SECTIONS.iter().map(|s| s.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), SECTIONS.len());
        for seed in ["Seed 000", "Seed 001", "Seed 002", "Seed 003", "Seed 004"] {
            assert!(SECTIONS.iter().any(|s| s.seed == seed), "{seed}");
        }
    }
}
