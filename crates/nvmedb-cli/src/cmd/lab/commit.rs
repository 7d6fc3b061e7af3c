//! `nvmedb lab commit`: the flags of the commit benchmark.
//!
//! Owns: [`CommitArgs`] and its translation into a [`CommitConfig`]. Invariant: the thread
//! counts are a flag.

use super::LabArgs;
use crate::cmd::args::{parse_size, with_default, CommonArgs, DurationArg, RepsArg};
use crate::cmd::CliError;
use clap::Args;
use nvmedb_lab::experiments::commit::{CommitBench, CommitConfig, LogSetup};
use std::path::PathBuf;

/// Flags of `nvmedb lab commit`.
#[derive(Args, Debug)]
#[command(mut_arg("duration", |a| with_default(a, CommitConfig::default().duration_s)))]
#[command(mut_arg("reps", |a| with_default(a, CommitConfig::default().reps)))]
pub struct CommitArgs {
    /// Database directory on the disk under test (recreated).
    #[arg(long, default_value = "nvmedb-data/commitbench")]
    pub data_dir: PathBuf,
    /// Rows in the table.
    #[arg(long, default_value_t = 100_000)]
    pub rows: u64,
    #[command(flatten)]
    pub duration: DurationArg,
    #[command(flatten)]
    pub reps: RepsArg,
    /// Log size for the recovery measurement (e.g. 1G; 0 skips it).
    #[arg(long, default_value = "1G")]
    pub recovery_log: String,
    /// Log set-ups to compare in the same run (comma-separated): `single` (the default options'
    /// log) or `duplexed` (a mirror directory on the same disk), each optionally followed by
    /// `+wait<µs>` (group-commit wait bound) and `+wakeall` (wake every waiter after a flush),
    /// e.g. `single,duplexed+wait200`.
    #[arg(long, value_delimiter = ',', default_value = "single")]
    pub logs: Vec<String>,
    /// Client thread counts (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,4,20")]
    pub threads: Vec<usize>,
    /// Parts to run (comma-separated): commits (through the engine), log (the file log alone:
    /// append + wait for durability), recovery (of the first log set-up).
    #[arg(long, value_delimiter = ',', default_value = "commits,recovery")]
    pub parts: Vec<String>,
    /// Bytes per record of the `log` part.
    #[arg(long = "log-payload", default_value_t = 100)]
    pub log_payload: usize,
    /// Results root and progress.
    #[command(flatten)]
    pub common: CommonArgs,
}

impl LabArgs for CommitArgs {
    type Exp = CommitBench;

    fn common(&self) -> &CommonArgs {
        &self.common
    }

    fn config(&self) -> Result<CommitConfig, CliError> {
        let d = CommitConfig::default();
        let (mut duration_s, mut reps) = (d.duration_s, d.reps);
        self.duration.apply(&mut duration_s);
        self.reps.apply(&mut reps);
        Ok(CommitConfig {
            data_dir: self.data_dir.clone(),
            rows: self.rows,
            duration_s,
            threads: self.threads.clone(),
            reps,
            recovery_log_bytes: parse_size("--recovery-log", &self.recovery_log)?,
            logs: self.logs.iter().map(|s| LogSetup::parse(s)).collect::<Result<_, _>>()?,
            parts: self.parts.clone(),
            log_payload_bytes: self.log_payload,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::parse;
    use super::super::LabCommand;
    use super::*;

    #[test]
    fn thread_counts_are_a_flag() {
        let LabCommand::Commit(a) = parse(&["commit"]) else { panic!("not lab commit") };
        assert_eq!(a.config().unwrap().threads, [1, 4, 20]);
        let LabCommand::Commit(a) = parse(&["commit", "--threads", "2,8", "--recovery-log", "0"]) else {
            panic!()
        };
        let c = a.config().unwrap();
        assert_eq!((c.threads.as_slice(), c.recovery_log_bytes), (&[2, 8][..], 0));
    }

    #[test]
    fn log_set_ups_are_parsed_and_bad_ones_named() {
        let LabCommand::Commit(a) = parse(&["commit", "--logs", "single,duplexed+wait200+wakeall"]) else {
            panic!("not lab commit")
        };
        let logs = a.config().unwrap().logs;
        assert_eq!((logs[0].duplexed, logs[1].duplexed), (false, true));
        assert_eq!((logs[1].group_commit_wait_us, logs[1].targeted_wakeups), (200, false));
        assert_eq!(logs[1].name, "duplexed+wait200+wakeall");
        for bad in ["triple", "single+wait", "single+fast"] {
            let LabCommand::Commit(a) = parse(&["commit", "--logs", bad]) else { panic!() };
            let e = a.config().unwrap_err().to_string();
            assert!(e.contains("--logs") && e.contains(bad.rsplit('+').next().unwrap()), "{bad}: {e}");
        }
    }
}
