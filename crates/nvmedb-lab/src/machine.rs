//! What ran where: machine facts and provenance recorded in every result file.
//!
//! Owns: `RunContext`, gathered once per run. Invariant: every result file written by the lab
//! embeds one, so a number can always be traced to its command, configuration, commit, machine
//! and time.

use serde::{Deserialize, Serialize};
use std::process::Command;

/// Provenance of one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunContext {
    /// The command line, as typed.
    pub command: String,
    /// Git commit of the working tree (with `-dirty` when modified), or "unknown".
    pub git_commit: String,
    /// Host name.
    pub hostname: String,
    /// Logical CPUs available.
    pub cpus: usize,
    /// CPU model name from /proc/cpuinfo.
    pub cpu_model: String,
    /// Total memory in bytes.
    pub memory_bytes: u64,
    /// Kernel release.
    pub kernel: String,
    /// Start time, seconds since the Unix epoch.
    pub started_unix_s: u64,
}

impl RunContext {
    /// Gathers the context of the current process.
    pub fn capture() -> Self {
        let command = std::env::args().collect::<Vec<_>>().join(" ");
        Self {
            command,
            git_commit: git_commit(),
            hostname: read_trimmed("/proc/sys/kernel/hostname"),
            cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            cpu_model: cpu_model(),
            memory_bytes: mem_total_bytes(),
            kernel: read_trimmed("/proc/sys/kernel/osrelease"),
            started_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
        }
    }

    /// A one-line description for printed tables.
    pub fn one_line(&self) -> String {
        format!(
            "{} | {} CPUs ({}) | {:.1} GiB RAM | kernel {} | commit {}",
            self.hostname,
            self.cpus,
            self.cpu_model,
            self.memory_bytes as f64 / (1u64 << 30) as f64,
            self.kernel,
            self.git_commit
        )
    }
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path).map(|s| s.trim().to_string()).unwrap_or_else(|_| "unknown".into())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

fn mem_total_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

fn git_commit() -> String {
    let rev = Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).output();
    let Ok(rev) = rev else { return "unknown".into() };
    if !rev.status.success() {
        return "unknown".into();
    }
    let mut s = String::from_utf8_lossy(&rev.stdout).trim().to_string();
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .map(|o| !o.stdout.is_empty())
        .unwrap_or(false);
    if dirty {
        s.push_str("-dirty");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_reads_this_machine() {
        let ctx = RunContext::capture();
        assert!(ctx.cpus >= 1);
        assert!(ctx.memory_bytes > 0, "MemTotal should be readable on Linux");
        assert!(ctx.started_unix_s > 1_600_000_000);
        let json = serde_json::to_string(&ctx).expect("serialises");
        assert!(json.contains("git_commit"));
    }
}
