//! The two client programs `lab clients` drives, unchanged against either server: sysbench's
//! OLTP Lua scripts over its pgsql driver, and the TPC-C kit (a Python program over psycopg2,
//! `crates/nvmedb-sql/tests/clients/tpcc_kit.py`, built into this program and written into the
//! run's scratch directory).
//!
//! Owns: [`Sysbench`], [`TpccKit`], [`Measured`] and the reading of what each prints.
//! Invariants: a client that exits with a failure, or whose output lacks its counts, is an
//! error carrying its output; the client's CPU time is that of the processes the lab waited
//! for during the run (the kit's terminals are its children, waited for by it).

use crate::error::{LabError, Result};
use crate::measure::children_cpu_ns;
use crate::measure::pgbench::{DATABASE, USER};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The kit's source, written to the scratch directory at the start of a run.
pub const TPCC_KIT: &str = include_str!("../../../../nvmedb-sql/tests/clients/tpcc_kit.py");

/// How to install what is missing (Debian 12 packages).
pub const CLIENTS_HINT: &str = "apt-get install sysbench python3-psycopg2";

/// One timed run of a client, as it reported it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    /// Transactions committed per second.
    pub tps: f64,
    /// Mean latency of a transaction, ms (for the kit: of every type, retries included).
    pub latency_ms: f64,
    /// Transactions committed.
    pub transactions: u64,
    /// Retried serialization failures and deadlocks (sysbench: its "ignored errors").
    pub retries: u64,
    /// New-Orders committed per minute (the kit only; 0 for sysbench).
    pub tpmc: f64,
    /// Wall seconds of the client process.
    pub wall_s: f64,
    /// CPU time of the client (and its children), ns.
    pub client_cpu_ns: u64,
}

/// Runs `cmd` to completion: its standard output, wall seconds and CPU time; an error (with
/// its output) when it fails.
fn output(what: &str, mut cmd: Command) -> Result<(String, f64, u64)> {
    let cpu0 = children_cpu_ns();
    let t0 = Instant::now();
    let out =
        cmd.output().map_err(|e| LabError::tool(what, format!("cannot start: {e} ({CLIENTS_HINT})")))?;
    let wall_s = t0.elapsed().as_secs_f64();
    let cpu = children_cpu_ns().saturating_sub(cpu0);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    if !out.status.success() {
        return Err(LabError::tool(
            what,
            format!("exited with {}:\n{stdout}{}", out.status, String::from_utf8_lossy(&out.stderr)),
        ));
    }
    Ok((stdout, wall_s, cpu))
}

/// sysbench's pgsql driver against one server.
#[derive(Debug, Clone)]
pub struct Sysbench<'a> {
    /// The server's loopback port.
    pub port: u16,
    /// The server, for messages.
    pub server: &'a str,
    /// `--tables`.
    pub tables: u32,
    /// `--table-size`.
    pub table_size: u64,
}

impl Sysbench<'_> {
    fn command(&self, script: &str, threads: usize, secs: u32, cmd: &str) -> Command {
        let mut c = Command::new("sysbench");
        c.args([
            "--db-driver=pgsql",
            "--pgsql-host=127.0.0.1",
            &format!("--pgsql-port={}", self.port),
            &format!("--pgsql-user={USER}"),
            &format!("--pgsql-db={DATABASE}"),
            &format!("--tables={}", self.tables),
            &format!("--table-size={}", self.table_size),
            &format!("--threads={threads}"),
            &format!("--time={secs}"),
            "--db-ps-mode=auto",
            "--report-interval=0",
            script,
            cmd,
        ]);
        c
    }

    /// `sysbench oltp_read_write prepare` (the tables every OLTP script uses); returns seconds.
    pub fn prepare(&self) -> Result<f64> {
        let what = format!("sysbench prepare against {}", self.server);
        output(&what, self.command("oltp_read_write", 1, 1, "prepare")).map(|(_, s, _)| s)
    }

    /// A timed run of `script` with `threads` threads for `secs` seconds.
    pub fn run(&self, script: &str, threads: usize, secs: u32) -> Result<Measured> {
        let what = format!("sysbench {script} run against {}", self.server);
        let (stdout, wall_s, client_cpu_ns) = output(&what, self.command(script, threads, secs, "run"))?;
        let m = parse_sysbench(&stdout).ok_or_else(|| {
            LabError::tool(&what, format!("no transactions or latency in its output:\n{stdout}"))
        })?;
        Ok(Measured { wall_s, client_cpu_ns, ..m })
    }
}

/// Reads sysbench's report: `transactions: N (X per sec.)`, `ignored errors: N`, and the
/// latency's `avg:`.
pub fn parse_sysbench(stdout: &str) -> Option<Measured> {
    let line = |label: &str| stdout.lines().find_map(|l| l.trim().strip_prefix(label).map(str::trim));
    let tx = line("transactions:")?;
    let transactions: u64 = tx.split_whitespace().next()?.parse().ok()?;
    let tps: f64 = tx.split('(').nth(1)?.split_whitespace().next()?.parse().ok()?;
    let retries: u64 = line("ignored errors:")?.split_whitespace().next()?.parse().ok()?;
    let latency_ms: f64 = line("avg:")?.parse().ok()?;
    Some(Measured { tps, latency_ms, transactions, retries, tpmc: 0.0, wall_s: 0.0, client_cpu_ns: 0 })
}

/// The TPC-C kit against one server.
#[derive(Debug, Clone)]
pub struct TpccKit<'a> {
    /// The kit's file (written from [`TPCC_KIT`]).
    pub script: &'a Path,
    /// The server's loopback port.
    pub port: u16,
    /// The server, for messages.
    pub server: &'a str,
}

impl TpccKit<'_> {
    /// Writes the kit into `dir`; its path.
    pub fn write(dir: &Path) -> Result<PathBuf> {
        let path = dir.join("tpcc_kit.py");
        std::fs::write(&path, TPCC_KIT).map_err(LabError::io(&path, "write"))?;
        Ok(path)
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new("python3");
        let dsn = format!("host=127.0.0.1 port={} user={USER} dbname={DATABASE} sslmode=disable", self.port);
        c.arg(self.script).args(["--dsn", &dsn]).args(args);
        c
    }

    fn what(&self, args: &[&str]) -> String {
        format!("tpcc_kit.py {} against {}", args.join(" "), self.server)
    }

    /// `load <warehouses> --items <items> --customers <customers>`; returns seconds.
    pub fn load(&self, warehouses: u32, items: u32, customers: u32) -> Result<f64> {
        let (w, i, c) = (warehouses.to_string(), items.to_string(), customers.to_string());
        let args = ["load", &w, "--items", &i, "--customers", &c];
        output(&self.what(&args), self.command(&args)).map(|(_, s, _)| s)
    }

    /// `run --seconds <secs> --terminals <terminals>`: the mix; an error when a transaction
    /// failed with anything but a retried serialization failure or deadlock.
    pub fn run(&self, terminals: usize, secs: u32) -> Result<Measured> {
        let (s, t) = (secs.to_string(), terminals.to_string());
        let args = ["run", "--seconds", &s, "--terminals", &t];
        let what = self.what(&args);
        let (stdout, wall_s, client_cpu_ns) = output(&what, self.command(&args))?;
        let m =
            parse_kit(&stdout).ok_or_else(|| LabError::tool(&what, format!("no RESULT line:\n{stdout}")))?;
        Ok(Measured { wall_s, client_cpu_ns, ..m })
    }

    /// `check`: the consistency conditions 1-4; an error naming the condition that failed.
    pub fn check(&self) -> Result<()> {
        output(&self.what(&["check"]), self.command(&["check"])).map(|_| ())
    }
}

/// Reads the kit's `RESULT {json}` line.
pub fn parse_kit(stdout: &str) -> Option<Measured> {
    let json = stdout.lines().find_map(|l| l.strip_prefix("RESULT "))?;
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let types = v["types"].as_object()?;
    let (mut commits, mut done, mut latency_s) = (0u64, 0u64, 0.0);
    for t in types.values() {
        let n = |k: &str| t[k].as_u64().unwrap_or(0);
        commits += n("commits");
        done += n("commits") + n("rollbacks") + n("errors");
        latency_s += t["latency_s"].as_f64().unwrap_or(0.0);
    }
    Some(Measured {
        tps: v["tps"].as_f64()?,
        latency_ms: 1e3 * latency_s / done.max(1) as f64,
        transactions: commits,
        retries: v["retries"].as_u64()?,
        tpmc: v["tpmc"].as_f64()?,
        wall_s: 0.0,
        client_cpu_ns: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysbench_and_kit_reports_are_read() {
        let sb = "SQL statistics:\n    transactions:                        1234   (123.40 per sec.)\n    ignored errors:                      3      (0.30 per sec.)\nLatency (ms):\n         min:                                    0.50\n         avg:                                    8.12\n";
        let m = parse_sysbench(sb).unwrap();
        assert_eq!((m.transactions, m.retries), (1234, 3));
        assert_eq!((m.tps, m.latency_ms), (123.4, 8.12));
        assert!(parse_sysbench("transactions: 5\n").is_none());
        let kit = "x\nRESULT {\"seconds\": 10.0, \"terminals\": 4, \"tpmc\": 600.0, \"tps\": 22.5, \"retries\": 2, \"errors\": 0, \"types\": {\"new_order\": {\"commits\": 100, \"rollbacks\": 1, \"retries\": 2, \"errors\": 0, \"latency_s\": 2.02}, \"payment\": {\"commits\": 125, \"rollbacks\": 0, \"retries\": 0, \"errors\": 0, \"latency_s\": 1.0}}}\n";
        let m = parse_kit(kit).unwrap();
        assert_eq!((m.transactions, m.retries, m.tpmc, m.tps), (225, 2, 600.0, 22.5));
        assert!((m.latency_ms - 1e3 * 3.02 / 226.0).abs() < 1e-9);
        assert!(parse_kit("no result").is_none());
    }
}
