//! The placement advisor: which tier each table should live on for the best throughput per
//! cost, predicted with seed 000's relative-performance model (§3, Fig. 1) from a workload's
//! measured per-table access statistics, and seed 003's two heuristics (by size, by access
//! count, three tables per device).
//!
//! The model, per transaction and client (all µs): a transaction spends `t_cpu` on the CPU and
//! waits `io(P) = Σ_tables reads_t · read_us(tier_t) + writes_t · write_us(tier_t)` for the
//! device reads and write-backs of its tables on placement `P`; with `clients` clients on
//! `cores` cores, throughput is `min(cores / t_cpu, clients / (t_cpu + io(P)), min_k iops_k /
//! ops_k(P))`, where `ops_k` are the page I/Os per transaction placed on tier `k` and `iops_k` what
//! that device sustains (a disk arm serves one I/O at a time, whatever the clients). With one client
//! and no CPU cap this is seed 000's relative performance (t_cpu + t_mem)/(t_cpu + t_io) times
//! the in-memory throughput. The reads and writes per transaction are the buffer's misses and
//! write-backs, which depend on the buffer size and the workload, not on where the files are.
//! The database's cost is `Σ_tables bytes_t · price(tier_t)`.
//!
//! Owns: [`Tier`], [`TableLoad`], [`Workload`], [`Placement`], [`predict`], [`advise`] (exact:
//! a Pareto frontier of (I/O time, cost, bytes per tier) over the tables, then the best
//! throughput per cost on it, within the budget and the tiers' capacities), [`by_size`] and
//! [`by_access`] (seed 003's heuristics) and [`brute_force`] (the reference the tests compare
//! with). Invariants: a placement names one tier per table, in the workload's table order; a
//! placement over budget or over a tier's capacity is never recommended.

use serde::{Deserialize, Serialize};

/// A storage tier: a device's latency, price and capacity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tier {
    /// Its name (`hdd`, `nand`, `optane`, `dram`).
    pub name: String,
    /// Latency of a page read, µs (measured by iobench or taken from the profile).
    pub read_us: f64,
    /// Latency of a page write, µs.
    pub write_us: f64,
    /// Price per GB (any currency; the seeds' are R$ and relative costs).
    pub price_per_gb: f64,
    /// Capacity, bytes (`None`: unlimited).
    pub capacity_bytes: Option<u64>,
    /// Page I/Os per second the device sustains however many clients wait (`None`: no limit
    /// below what the latency allows; an emulated disk with one arm: 1 / latency).
    #[serde(default)]
    pub iops: Option<f64>,
}

/// Seed 003 Table 1's prices, R$/GB: HDD 1.99, SSD NVM (Intel Optane) 20.27, DRAM 43.75. The
/// seeds give no price for a NAND SSD: 8.00 R$/GB is our assumption (between the HDD and the
/// Optane SSD), to be overridden.
pub const SEED_PRICES: [(&str, f64); 4] = [("hdd", 1.99), ("nand", 8.00), ("optane", 20.27), ("dram", 43.75)];

/// The default price per GB of tier `name` ([`SEED_PRICES`]).
pub fn seed_price(name: &str) -> Option<f64> {
    SEED_PRICES.iter().find(|(n, _)| *n == name).map(|(_, p)| *p)
}

/// One table's share of a workload: its size and its device accesses per transaction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableLoad {
    /// Table name.
    pub name: String,
    /// Bytes of its heap and indexes.
    pub bytes: u64,
    /// Device page reads (buffer misses) per transaction.
    pub reads_per_txn: f64,
    /// Device page writes (write-backs) per transaction.
    pub writes_per_txn: f64,
    /// Logical page reads (hits + misses) per transaction: seed 003's "access count".
    pub accesses_per_txn: f64,
}

/// A workload measured on one placement: per-transaction CPU time and the tables' loads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    /// CPU time per transaction, µs.
    pub t_cpu_us: f64,
    /// Concurrent clients.
    pub clients: u32,
    /// CPU cores they share.
    pub cores: u32,
    /// The tables.
    pub tables: Vec<TableLoad>,
}

/// Tier index per table (in the workload's table order).
pub type Placement = Vec<usize>;

/// A placement's prediction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// Tier name per table.
    pub tiers: Vec<String>,
    /// I/O wait per transaction, µs.
    pub io_us: f64,
    /// Predicted transactions per second.
    pub txn_per_s: f64,
    /// The database's cost.
    pub cost: f64,
    /// Throughput per cost.
    pub txn_per_s_per_cost: f64,
}

fn io_of(w: &Workload, tiers: &[Tier], t: usize, tier: usize) -> f64 {
    let (l, k) = (&w.tables[t], &tiers[tier]);
    l.reads_per_txn * k.read_us + l.writes_per_txn * k.write_us
}

fn cost_of(w: &Workload, tiers: &[Tier], t: usize, tier: usize) -> f64 {
    w.tables[t].bytes as f64 / 1e9 * tiers[tier].price_per_gb
}

fn ops_of(w: &Workload, t: usize) -> f64 {
    w.tables[t].reads_per_txn + w.tables[t].writes_per_txn
}

fn throughput(w: &Workload, tiers: &[Tier], io_us: f64, ops: &[f64]) -> f64 {
    let t_cpu = w.t_cpu_us.max(1e-3);
    let cpu_cap = f64::from(w.cores.max(1)) / t_cpu * 1e6;
    let clients = f64::from(w.clients.max(1)) / (t_cpu + io_us) * 1e6;
    let device_cap = tiers
        .iter()
        .zip(ops)
        .filter_map(|(k, &o)| k.iops.filter(|_| o > 0.0).map(|iops| iops / o))
        .fold(f64::INFINITY, f64::min);
    cpu_cap.min(clients).min(device_cap)
}

/// The model's prediction for placement `p`.
pub fn predict(w: &Workload, tiers: &[Tier], p: &[usize]) -> Prediction {
    let io_us: f64 = p.iter().enumerate().map(|(t, &k)| io_of(w, tiers, t, k)).sum();
    let cost: f64 = p.iter().enumerate().map(|(t, &k)| cost_of(w, tiers, t, k)).sum();
    let mut ops = vec![0.0; tiers.len()];
    for (t, &k) in p.iter().enumerate() {
        ops[k] += ops_of(w, t);
    }
    let txn_per_s = throughput(w, tiers, io_us, &ops);
    Prediction {
        tiers: p.iter().map(|&k| tiers[k].name.clone()).collect(),
        io_us,
        txn_per_s,
        cost,
        txn_per_s_per_cost: if cost > 0.0 { txn_per_s / cost } else { f64::INFINITY },
    }
}

/// Whether `p` fits the budget and every tier's capacity.
pub fn feasible(w: &Workload, tiers: &[Tier], p: &[usize], budget: Option<f64>) -> bool {
    let cost: f64 = p.iter().enumerate().map(|(t, &k)| cost_of(w, tiers, t, k)).sum();
    if budget.is_some_and(|b| cost > b * (1.0 + 1e-12)) {
        return false;
    }
    tiers.iter().enumerate().all(|(k, tier)| {
        let used: u64 = p.iter().enumerate().filter(|(_, &x)| x == k).map(|(t, _)| w.tables[t].bytes).sum();
        tier.capacity_bytes.is_none_or(|c| used <= c)
    })
}

/// A partial placement on the frontier.
#[derive(Clone)]
struct State {
    io: f64,
    cost: f64,
    used: Vec<u64>,
    /// Page I/Os per transaction per tier (only tiers with an IOPS limit matter).
    ops: Vec<f64>,
    p: Placement,
}

fn dominates(a: &State, b: &State, tiers: &[Tier]) -> bool {
    a.io <= b.io
        && a.cost <= b.cost
        && a.used.iter().zip(&b.used).all(|(x, y)| x <= y)
        && tiers.iter().zip(a.ops.iter().zip(&b.ops)).all(|(k, (x, y))| k.iops.is_none() || x <= y)
}

/// The feasible placement with the best predicted throughput per cost (ties: higher
/// throughput), `None` when nothing fits. Exact: throughput per cost falls as I/O time, cost or
/// the I/Os on an IOPS-limited tier grow, so the best placement is on the Pareto frontier of
/// (I/O time, cost, bytes per tier, I/Os per limited tier), which is built table by table,
/// dropping dominated partial placements.
pub fn advise(w: &Workload, tiers: &[Tier], budget: Option<f64>) -> Option<Prediction> {
    let mut frontier = vec![State {
        io: 0.0,
        cost: 0.0,
        used: vec![0; tiers.len()],
        ops: vec![0.0; tiers.len()],
        p: Vec::new(),
    }];
    for t in 0..w.tables.len() {
        let mut next: Vec<State> = Vec::new();
        for s in &frontier {
            for k in 0..tiers.len() {
                let mut n = s.clone();
                n.io += io_of(w, tiers, t, k);
                n.cost += cost_of(w, tiers, t, k);
                n.used[k] += w.tables[t].bytes;
                n.ops[k] += ops_of(w, t);
                n.p.push(k);
                if budget.is_some_and(|b| n.cost > b * (1.0 + 1e-12))
                    || tiers[k].capacity_bytes.is_some_and(|c| n.used[k] > c)
                {
                    continue;
                }
                next.push(n);
            }
        }
        next.sort_by(|a, b| a.io.total_cmp(&b.io).then(a.cost.total_cmp(&b.cost)));
        let mut kept: Vec<State> = Vec::new();
        for n in next {
            if !kept.iter().any(|k| dominates(k, &n, tiers)) {
                kept.push(n);
            }
        }
        frontier = kept;
    }
    best(frontier.into_iter().map(|s| predict(w, tiers, &s.p)))
}

fn best(it: impl Iterator<Item = Prediction>) -> Option<Prediction> {
    it.fold(None, |b: Option<Prediction>, p| match &b {
        Some(q)
            if q.txn_per_s_per_cost > p.txn_per_s_per_cost
                || (q.txn_per_s_per_cost == p.txn_per_s_per_cost && q.txn_per_s >= p.txn_per_s) =>
        {
            b
        }
        _ => Some(p),
    })
}

/// Every placement tried in turn (tiers^tables of them): the reference for [`advise`].
pub fn brute_force(w: &Workload, tiers: &[Tier], budget: Option<f64>) -> Option<Prediction> {
    let (n, k) = (w.tables.len() as u32, tiers.len());
    let all = (0..k.pow(n)).map(|mut code| {
        (0..n)
            .map(|_| {
                let d = code % k;
                code /= k;
                d
            })
            .collect::<Placement>()
    });
    best(all.filter(|p| feasible(w, tiers, p, budget)).map(|p| predict(w, tiers, &p)))
}

/// Splits the tables ranked by `key` (descending) into as many even groups as `order` has tiers:
/// the first group goes to `order[0]`, and so on (seed 003: three tables per device).
fn ranked(w: &Workload, order: &[usize], key: impl Fn(&TableLoad) -> f64) -> Placement {
    let mut idx: Vec<usize> = (0..w.tables.len()).collect();
    idx.sort_by(|&a, &b| key(&w.tables[b]).total_cmp(&key(&w.tables[a])).then(a.cmp(&b)));
    let per = w.tables.len().div_ceil(order.len().max(1));
    let mut p = vec![0; w.tables.len()];
    for (rank, &t) in idx.iter().enumerate() {
        p[t] = order[(rank / per.max(1)).min(order.len() - 1)];
    }
    p
}

/// Seed 003's first heuristic: tables by size, the smallest third on `order[0]` (the fastest
/// device), the next on `order[1]`, ... (`order` lists tier indexes).
pub fn by_size(w: &Workload, order: &[usize]) -> Placement {
    ranked(w, order, |t| -(t.bytes as f64))
}

/// Seed 003's second heuristic: tables by access count (logical page reads per transaction), the
/// most accessed third on `order[0]`, ...
pub fn by_access(w: &Workload, order: &[usize]) -> Placement {
    ranked(w, order, |t| t.accesses_per_txn)
}

/// A tier from a built-in device profile: its read and write latency, its IOPS limit (one arm:
/// one I/O per latency; else its IOPS cap, if any) and seed 003's price ([`SEED_PRICES`]).
pub fn profile_tier(p: &nvmedb::io::DeviceProfile) -> Tier {
    let iops = match p.channels {
        1 => Some(1e6 / p.read_latency_us.max(1e-3)),
        _ => (p.iops_cap > 0.0).then_some(p.iops_cap),
    };
    Tier {
        name: p.name.clone(),
        read_us: p.read_latency_us,
        write_us: p.write_latency_us,
        price_per_gb: seed_price(&p.name).unwrap_or(0.0),
        capacity_bytes: None,
        iops,
    }
}

/// One evaluated placement of [`compare`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evaluated {
    /// Its name.
    pub name: String,
    /// Where it comes from.
    pub how: String,
    /// The model's prediction.
    pub prediction: Prediction,
}

/// The advisor's recommendation (within `budget`), seed 003's two heuristics over the fastest,
/// middle and cheapest tiers (`tiers` ordered cheapest first), every table on one tier, and the
/// `named` placements, each predicted by the model.
pub fn compare(
    w: &Workload,
    tiers: &[Tier],
    budget: Option<f64>,
    named: &[(String, Placement)],
) -> Vec<Evaluated> {
    let mut out = Vec::new();
    let mut push = |name: String, how: String, p: &[usize]| {
        out.push(Evaluated { name, how, prediction: predict(w, tiers, p) });
    };
    for (n, p) in named {
        push(n.clone(), "named".into(), p);
    }
    if let Some(a) = advise(w, tiers, budget) {
        let p: Placement =
            a.tiers.iter().map(|n| tiers.iter().position(|t| t.name == *n).unwrap_or(0)).collect();
        push("advisor".into(), "best predicted throughput per cost".into(), &p);
    }
    if tiers.len() >= 3 {
        let order = [tiers.len() - 1, tiers.len() / 2, 0];
        let names = format!("{}/{}/{}", tiers[order[0]].name, tiers[order[1]].name, tiers[order[2]].name);
        push("by size".into(), format!("seed 003: smallest third on {names}"), &by_size(w, &order));
        push("by access".into(), format!("seed 003: most accessed third on {names}"), &by_access(w, &order));
    }
    for (k, t) in tiers.iter().enumerate() {
        push(format!("all {}", t.name), "every table on one tier".into(), &vec![k; w.tables.len()]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvmedb::util::Rng;

    fn tiers() -> Vec<Tier> {
        [("hdd", 8300.0, 8300.0), ("nand", 90.0, 30.0), ("optane", 12.0, 12.0), ("dram", 0.1, 0.1)]
            .iter()
            .map(|&(n, r, wr)| Tier {
                name: n.into(),
                read_us: r,
                write_us: wr,
                price_per_gb: seed_price(n).unwrap(),
                capacity_bytes: None,
                iops: (n == "hdd").then_some(1e6 / r),
            })
            .collect()
    }

    fn synthetic(rng: &mut Rng, n: usize) -> Workload {
        Workload {
            t_cpu_us: 50.0 + rng.below(400) as f64,
            clients: 1 + rng.below(8) as u32,
            cores: 1 + rng.below(4) as u32,
            tables: (0..n)
                .map(|i| TableLoad {
                    name: format!("t{i}"),
                    bytes: (1 + rng.below(2000)) << 20,
                    reads_per_txn: if rng.chance(0.3) { 0.0 } else { rng.below(1000) as f64 / 100.0 },
                    writes_per_txn: rng.below(300) as f64 / 100.0,
                    accesses_per_txn: rng.below(5000) as f64 / 100.0,
                })
                .collect(),
        }
    }

    /// On random workloads, budgets and capacities, the frontier search finds a placement as
    /// good as the best of all tiers^tables placements.
    #[test]
    fn advice_equals_brute_force() {
        let mut rng = Rng::new(15);
        for case in 0..60 {
            let n = 2 + rng.below(6) as usize;
            let w = synthetic(&mut rng, n);
            let mut tiers = tiers();
            if rng.chance(0.5) {
                tiers[3].capacity_bytes = Some(rng.below(3000) << 20);
            }
            if rng.chance(0.5) {
                tiers[1].iops = Some(1000.0 + rng.below(100_000) as f64);
            }
            let all_dram = predict(&w, &tiers, &vec![3; w.tables.len()]).cost;
            let budget = rng.chance(0.6).then(|| all_dram * rng.below(100) as f64 / 100.0);
            let (a, b) = (advise(&w, &tiers, budget), brute_force(&w, &tiers, budget));
            match (&a, &b) {
                (Some(a), Some(b)) => {
                    let rel = (a.txn_per_s_per_cost - b.txn_per_s_per_cost).abs() / b.txn_per_s_per_cost;
                    assert!(rel < 1e-9, "case {case}: advised {a:?}, brute force {b:?}");
                    let p: Vec<usize> =
                        a.tiers.iter().map(|n| tiers.iter().position(|t| t.name == *n).unwrap()).collect();
                    assert!(feasible(&w, &tiers, &p, budget), "case {case}: advice not feasible");
                }
                (None, None) => {}
                _ => panic!("case {case}: advised {a:?}, brute force {b:?}"),
            }
        }
    }

    #[test]
    fn compare_lists_the_advice_heuristics_and_uniform_placements() {
        let mut rng = Rng::new(5);
        let w = synthetic(&mut rng, 6);
        let tiers = tiers();
        let rows = compare(&w, &tiers, None, &[("mine".into(), vec![0, 1, 2, 3, 0, 1])]);
        let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            ["mine", "advisor", "by size", "by access", "all hdd", "all nand", "all optane", "all dram"]
        );
        let best = rows.iter().map(|r| r.prediction.txn_per_s_per_cost).fold(0.0, f64::max);
        assert_eq!(rows[1].prediction.txn_per_s_per_cost, best, "nothing listed beats the advice");
        let hdd = profile_tier(&nvmedb::io::DeviceProfile::builtin("hdd").unwrap());
        assert_eq!((hdd.iops, hdd.price_per_gb), (Some(125.0), 1.99));
    }

    #[test]
    fn heuristics_split_tables_in_thirds() {
        let mut rng = Rng::new(3);
        let w = synthetic(&mut rng, 9);
        let order = [3, 2, 0];
        for p in [by_size(&w, &order), by_access(&w, &order)] {
            for k in order {
                assert_eq!(p.iter().filter(|&&x| x == k).count(), 3, "{p:?}");
            }
        }
        let p = by_size(&w, &order);
        let smallest = (0..9).min_by_key(|&t| w.tables[t].bytes).unwrap();
        assert_eq!(p[smallest], 3);
    }

    /// One client and no CPU cap: seed 000's (t_cpu + t_mem) / (t_cpu + t_io).
    #[test]
    fn one_client_is_seed_000s_formula() {
        let tiers = tiers();
        let w = Workload {
            t_cpu_us: 100.0,
            clients: 1,
            cores: 1,
            tables: vec![TableLoad {
                name: "t".into(),
                bytes: 1 << 30,
                reads_per_txn: 1.0,
                writes_per_txn: 0.0,
                accesses_per_txn: 1.0,
            }],
        };
        let mem = predict(&w, &tiers, &[3]).txn_per_s;
        let opt = predict(&w, &tiers, &[2]).txn_per_s;
        let want = crate::model::relative_performance(100.0, 0.1, 12.0);
        assert!((opt / mem - want).abs() < 1e-9, "{} vs {want}", opt / mem);
    }
}
