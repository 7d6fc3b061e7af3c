//! `nvmedb lab commit`: the flags of the commit benchmark.
//!
//! Owns: [`CommitArgs`] and its translation into a [`CommitConfig`]. Invariant: the thread
//! counts are a flag.

use super::LabArgs;
use crate::cmd::args::{parse_size, CommonArgs};
use crate::cmd::CliError;
use clap::Args;
use nvmedb_lab::experiments::commit::{CommitBench, CommitConfig};
use std::path::PathBuf;

/// Flags of `nvmedb lab commit`.
#[derive(Args, Debug)]
pub struct CommitArgs {
    /// Database directory on the disk under test (recreated).
    #[arg(long, default_value = "nvmedb-data/commitbench")]
    pub data_dir: PathBuf,
    /// Rows in the table.
    #[arg(long, default_value_t = 100_000)]
    pub rows: u64,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Repetitions.
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Log size for the recovery measurement (e.g. 1G; 0 skips it).
    #[arg(long, default_value = "1G")]
    pub recovery_log: String,
    /// Upper bound of the group-commit wait, µs (the log's `group_commit_wait_us`).
    #[arg(long, default_value_t = 200)]
    pub group_commit_wait_us: u64,
    /// Wake only the committers a flush covered plus the next leader (false: wake all).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub targeted_wakeups: bool,
    /// Client thread counts (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,4,20")]
    pub threads: Vec<usize>,
    /// Parts to run (comma-separated): commits (through the engine), log (the duplexed file log
    /// alone: append + wait for durability), recovery.
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
        Ok(CommitConfig {
            data_dir: self.data_dir.clone(),
            rows: self.rows,
            duration_s: self.duration,
            threads: self.threads.clone(),
            reps: self.reps,
            recovery_log_bytes: parse_size("--recovery-log", &self.recovery_log)?,
            group_commit_wait_us: self.group_commit_wait_us,
            targeted_wakeups: self.targeted_wakeups,
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
}
