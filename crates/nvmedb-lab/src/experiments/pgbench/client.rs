//! pgbench as the client of both servers: `pgbench -i` and timed runs, and the reading of what
//! pgbench prints.
//!
//! Owns: [`Workload`], [`Mode`] and the command lines of the built-in scripts (running pgbench
//! and reading its output is `measure::pgbench`). Invariant: both engines get exactly the same
//! command line but for the port.

use crate::error::Result;
use crate::measure::pgbench::{Pgbench, Run};
use serde::{Deserialize, Serialize};

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

/// The built-in scripts' runs (an inherent impl beside the one in `measure::pgbench`).
impl Pgbench<'_> {
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
        self.run_args(&args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_names_parse() {
        assert_eq!(Workload::parse("tpcb-like"), Some(Workload::TpcbLike));
        assert_eq!(Mode::parse("prepared"), Some(Mode::Prepared));
        assert_eq!(Mode::parse("extended"), None);
    }
}
