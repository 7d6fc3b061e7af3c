//! pgbench as a client: `pgbench -i` and timed runs against a server on loopback, and the
//! reading of what pgbench prints.
//!
//! Owns: [`Pgbench`], [`parse`], [`Parsed`], [`Run`], the role and database every lab server is
//! reached as ([`USER`], [`DATABASE`]). Invariants: a run that pgbench reports as failed, or
//! whose output lacks tps or the latency average, is an error carrying pgbench's output; the
//! client's CPU time is that of the pgbench process alone (it is the only child the lab waits
//! for during the run).

use crate::error::{LabError, Result};
use crate::measure::children_cpu_ns;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// The role the lab's servers are reached as.
pub const USER: &str = "bench";
/// The database the lab's servers are reached in (the one PostgreSQL's `initdb` makes).
pub const DATABASE: &str = "postgres";

/// What pgbench printed about a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Parsed {
    /// `tps = ...` (without initial connection time).
    pub tps: f64,
    /// `latency average = ... ms`.
    pub latency_ms: f64,
    /// `number of transactions actually processed`.
    pub transactions: u64,
    /// `number of failed transactions` (after retries), 0 when not printed.
    pub failed: u64,
}

/// Reads pgbench's summary; `None` when tps or the latency average is missing.
pub fn parse(stdout: &str) -> Option<Parsed> {
    let value = |prefix: &str| {
        stdout.lines().find_map(|l| l.trim().strip_prefix(prefix)).and_then(|rest| {
            rest.split(|c: char| c.is_whitespace() || c == '/').find(|t| !t.is_empty())?.parse::<f64>().ok()
        })
    };
    Some(Parsed {
        tps: value("tps = ")?,
        latency_ms: value("latency average = ")?,
        transactions: value("number of transactions actually processed: ")? as u64,
        failed: value("number of failed transactions: ").unwrap_or(0.0) as u64,
    })
}

/// A measured pgbench run.
#[derive(Debug, Clone, Copy)]
pub struct Run {
    /// What pgbench printed.
    pub parsed: Parsed,
    /// Wall seconds of the pgbench process (connections, the run, disconnection).
    pub wall_s: f64,
    /// CPU time of pgbench, ns.
    pub client_cpu_ns: u64,
}

/// pgbench against one server.
#[derive(Debug, Clone)]
pub struct Pgbench<'a> {
    /// The program.
    pub bin: &'a Path,
    /// The server's loopback port.
    pub port: u16,
    /// The server, for messages ("nvmedb", "PostgreSQL").
    pub server: &'a str,
}

impl Pgbench<'_> {
    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(self.bin);
        c.args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", USER]);
        c.args(args).arg(DATABASE);
        c.env("PGCONNECT_TIMEOUT", "30");
        c
    }

    fn output(&self, args: &[&str]) -> Result<(String, f64, u64)> {
        let what = || format!("pgbench {} against {}", args.join(" "), self.server);
        let cpu0 = children_cpu_ns();
        let t0 = Instant::now();
        let out =
            self.command(args).output().map_err(|e| LabError::tool(what(), format!("cannot start: {e}")))?;
        let wall_s = t0.elapsed().as_secs_f64();
        let cpu = children_cpu_ns().saturating_sub(cpu0);
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        if !out.status.success() {
            return Err(LabError::tool(
                what(),
                format!("exited with {}:\n{stdout}{}", out.status, String::from_utf8_lossy(&out.stderr)),
            ));
        }
        Ok((stdout, wall_s, cpu))
    }

    /// `pgbench -i -s <scale>` (tables, rows by COPY, vacuum, primary keys); returns seconds.
    pub fn init(&self, scale: u32) -> Result<f64> {
        self.output(&["-i", "-s", &scale.to_string()]).map(|(_, s, _)| s)
    }

    /// A timed run with these arguments (clients, threads, duration, script); its summary.
    pub fn run_args(&self, args: &[&str]) -> Result<Run> {
        let (stdout, wall_s, client_cpu_ns) = self.output(args)?;
        let parsed = parse(&stdout).ok_or_else(|| {
            LabError::tool(
                format!("pgbench {} against {}", args.join(" "), self.server),
                format!("no tps or latency average in its output:\n{stdout}"),
            )
        })?;
        Ok(Run { parsed, wall_s, client_cpu_ns })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pgbench_15_output_is_read() {
        let out = "pgbench (15.14 (Debian 15.14-0+deb12u1))\n\
            transaction type: <builtin: TPC-B (sort of)>\n\
            scaling factor: 10\nquery mode: prepared\nnumber of clients: 20\nnumber of threads: 2\n\
            maximum number of tries: 10\nduration: 15 s\n\
            number of transactions actually processed: 24501\n\
            number of failed transactions: 3 (0.012%)\n\
            number of transactions retried: 40 (0.163%)\n\
            latency average = 12.236 ms\ninitial connection time = 21.570 ms\n\
            tps = 1634.522113 (without initial connection time)\n";
        let p = parse(out).expect("parsed");
        assert_eq!(p, Parsed { tps: 1634.522113, latency_ms: 12.236, transactions: 24501, failed: 3 });
        assert!(parse("tps = 12 (without initial connection time)\n").is_none(), "no latency");
    }
}
