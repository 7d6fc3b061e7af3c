//! pgbench as the client of both servers: `pgbench -i` and timed runs, and the reading of what
//! pgbench prints.
//!
//! Owns: [`Workload`], [`Mode`], the pgbench command lines, [`parse`] and [`Run`]. Invariants:
//! both engines get exactly the same command line but for the port; a run that pgbench reports
//! as failed, or whose output lacks tps or the latency average, is an error carrying pgbench's
//! output; the client's CPU time is that of the pgbench process alone (it is the only child
//! the lab waits for during the run).

use crate::error::{LabError, Result};
use crate::measure::children_cpu_ns;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// pgbench's built-in scripts the experiment runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Workload {
    /// `-S`: one SELECT of an account's balance by key.
    SelectOnly,
    /// The default script: three UPDATEs, a SELECT and an INSERT in one transaction.
    TpcbLike,
}

impl Workload {
    /// Every workload, in report order.
    pub const ALL: [Workload; 2] = [Workload::SelectOnly, Workload::TpcbLike];

    /// The flag name (`select-only`, `tpcb-like`).
    pub fn name(self) -> &'static str {
        match self {
            Workload::SelectOnly => "select-only",
            Workload::TpcbLike => "tpcb-like",
        }
    }

    /// Parses a flag name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|w| w.name() == s)
    }

    fn args(self) -> &'static [&'static str] {
        match self {
            Workload::SelectOnly => &["-S"],
            Workload::TpcbLike => &[],
        }
    }
}

/// pgbench's query protocol (`-M`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mode {
    /// One Query message per statement, parsed every time.
    Simple,
    /// Statements prepared once per connection, then Bind/Execute.
    Prepared,
}

impl Mode {
    /// Every mode, in report order.
    pub const ALL: [Mode; 2] = [Mode::Simple, Mode::Prepared];

    /// pgbench's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Simple => "simple",
            Mode::Prepared => "prepared",
        }
    }

    /// Parses pgbench's name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == s)
    }
}

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
        c.args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", super::servers::USER]);
        c.args(args).arg(super::servers::DATABASE);
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

    /// A timed run of `clients` clients on `threads` threads for `secs` seconds; failed
    /// transactions (deadlocks, serialization failures) are retried up to `max_tries` times.
    pub fn run(
        &self,
        workload: Workload,
        mode: Mode,
        clients: usize,
        threads: usize,
        secs: u32,
        max_tries: u32,
    ) -> Result<Run> {
        let (c, j, t, tries) =
            (clients.to_string(), threads.to_string(), secs.to_string(), max_tries.to_string());
        let mut args = vec!["-M", mode.name(), "-c", &c, "-j", &j, "-T", &t, "--max-tries", &tries];
        args.extend_from_slice(workload.args());
        let (stdout, wall_s, client_cpu_ns) = self.output(&args)?;
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
        assert_eq!(Workload::parse("tpcb-like"), Some(Workload::TpcbLike));
        assert_eq!(Mode::parse("prepared"), Some(Mode::Prepared));
        assert_eq!(Mode::parse("extended"), None);
    }
}
