//! Operational metrics in the Prometheus text exposition format (version 0.0.4), and the small
//! HTTP endpoint that serves them (`GET /metrics`).
//!
//! Owns: [`Exposition`] (the one writer of the format: `# HELP`/`# TYPE` once per family,
//! label values escaped, histograms as cumulative `_bucket{le=..}` lines with `_sum` and
//! `_count`), the engine's metric families ([`database`], [`primary`], [`standby`]) and
//! [`MetricsServer`]. The counters themselves live where they are counted (the buffer pools'
//! `BufferStats`, the lock manager's `LockStats`, the transactions' `TxnStats`, the log's
//! `WalStats`, replication's status): rendering only reads snapshots, so a scrape costs the
//! hot paths nothing.
//!
//! Invariants: names follow Prometheus conventions (`nvmedb_` prefix, base units in the name —
//! `_seconds`, `_bytes` — and `_total` on every counter); a counter only ever grows while its
//! database is open; a histogram's buckets are cumulative and its `+Inf` bucket equals its
//! `_count`.

use crate::db::Database;
use crate::error::{Error, Result};
use crate::repl::{ReplStatus, StandbyPositions};
use crate::util::hist::HistogramSnapshot;
use std::collections::HashSet;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// A metrics page being written in the Prometheus text format.
#[derive(Debug, Default)]
pub struct Exposition {
    out: String,
    families: HashSet<String>,
    current: String,
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n").replace('"', "\\\"")
}

fn labels_text(labels: &[(&str, &str)], extra: Option<(&str, &str)>) -> String {
    let all: Vec<String> =
        labels.iter().chain(extra.as_ref()).map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
    if all.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", all.join(","))
    }
}

fn number(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.is_nan() {
        "NaN".into()
    } else {
        format!("{v}")
    }
}

impl Exposition {
    /// An empty page.
    pub fn new() -> Self {
        Self::default()
    }

    fn family(&mut self, name: &str, help: &str, kind: &str) {
        if self.current == name {
            return;
        }
        assert!(
            self.families.insert(name.to_string()),
            "metric family {name} written in two places: a family's samples must be together"
        );
        self.current = name.to_string();
        let _ = writeln!(self.out, "# HELP {name} {}", help.replace('\\', "\\\\").replace('\n', "\\n"));
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    /// A counter family's `# HELP` and `# TYPE` lines, for a family that may have no samples
    /// yet (errors by SQLSTATE before the first error); samples may follow.
    pub fn counter_family(&mut self, name: &str, help: &str) {
        debug_assert!(name.ends_with("_total"), "counter {name} must end in _total");
        self.family(name, help, "counter");
    }

    /// A counter sample (`name` ends in `_total`).
    pub fn counter(&mut self, name: &str, help: &str, labels: &[(&str, &str)], v: u64) {
        debug_assert!(name.ends_with("_total"), "counter {name} must end in _total");
        self.family(name, help, "counter");
        let _ = writeln!(self.out, "{name}{} {v}", labels_text(labels, None));
    }

    /// A gauge sample.
    pub fn gauge(&mut self, name: &str, help: &str, labels: &[(&str, &str)], v: f64) {
        self.family(name, help, "gauge");
        let _ = writeln!(self.out, "{name}{} {}", labels_text(labels, None), number(v));
    }

    /// A histogram: `h`'s bounds and sum are divided by `divisor` (1e9 turns nanoseconds into
    /// the seconds Prometheus expects; 1.0 keeps counts).
    pub fn histogram(
        &mut self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        h: &HistogramSnapshot,
        divisor: f64,
    ) {
        self.family(name, help, "histogram");
        let mut cumulative = 0;
        for (i, c) in h.counts.iter().enumerate() {
            cumulative += c;
            let le = h.bounds.get(i).map_or("+Inf".to_string(), |&b| number(b as f64 / divisor));
            let _ =
                writeln!(self.out, "{name}_bucket{} {cumulative}", labels_text(labels, Some(("le", &le))));
        }
        if h.counts.is_empty() {
            let _ = writeln!(self.out, "{name}_bucket{} 0", labels_text(labels, Some(("le", "+Inf"))));
        }
        let l = labels_text(labels, None);
        let _ = writeln!(self.out, "{name}_sum{l} {}", number(h.sum as f64 / divisor));
        let _ = writeln!(self.out, "{name}_count{l} {cumulative}");
    }

    /// The page.
    pub fn finish(self) -> String {
        self.out
    }
}

/// The engine's metrics of an open database: transactions (commits, aborts, commit latency),
/// locks (waits, deadlocks, timeouts, wait time), both buffer pools (hits, misses, reads,
/// write-backs, evictions), the log (bytes, flushes, records, group-commit sizes), checkpoint
/// durations and the last recovery's.
pub fn database(out: &mut Exposition, db: &Database) {
    let t = db.txn_stats();
    out.counter(
        "nvmedb_commits_total",
        "Transactions committed (auto-commit changes included).",
        &[],
        t.commits,
    );
    out.counter("nvmedb_aborts_total", "Transactions rolled back.", &[], t.aborts);
    out.histogram(
        "nvmedb_commit_duration_seconds",
        "From a writing transaction's commit to its acknowledgement (commit record durable).",
        &[],
        &t.commit_ns,
        1e9,
    );
    let l = db.lock_stats();
    out.counter("nvmedb_lock_waits_total", "Lock requests that had to wait.", &[], l.waits);
    out.counter("nvmedb_deadlocks_total", "Deadlock victims chosen.", &[], l.deadlocks);
    out.counter("nvmedb_lock_timeouts_total", "Lock waits that timed out.", &[], l.timeouts);
    let wait = HistogramSnapshot {
        bounds: (0..l.wait_hist.len() as u32 - 1).map(|i| 1u64 << (i + 1)).collect(),
        counts: l.wait_hist.to_vec(),
        sum: l.wait_ns_total,
    };
    out.histogram(
        "nvmedb_lock_wait_duration_seconds",
        "Time lock requests waited (bucket bounds within a factor of two).",
        &[],
        &wait,
        1e9,
    );
    let (table, index) = db.buffer_stats();
    let pools = [("table", table), ("index", index)];
    type Field = fn(&crate::BufferStats) -> u64;
    let families: [(&str, &str, Field); 5] = [
        ("nvmedb_buffer_hits_total", "Page fixes served from a buffer frame.", |s| s.hits),
        ("nvmedb_buffer_misses_total", "Page fixes that had to load the page.", |s| s.misses),
        ("nvmedb_buffer_reads_total", "Pages read from devices into the pool.", |s| s.reads),
        ("nvmedb_buffer_writes_total", "Dirty pages written back to devices.", |s| s.writes),
        ("nvmedb_buffer_evictions_total", "Frames taken from one page for another.", |s| s.evictions),
    ];
    for (name, help, f) in families {
        for (pool, s) in &pools {
            out.counter(name, help, &[("pool", pool)], f(s));
        }
    }
    if let Some(log) = db.engine_log() {
        let w = log.record_log().stats();
        out.counter("nvmedb_wal_bytes_total", "Bytes written to the log (per copy).", &[], w.bytes_written);
        out.counter("nvmedb_wal_flushes_total", "Log flushes (writes and syncs).", &[], w.flushes);
        out.counter("nvmedb_wal_records_total", "Log records appended.", &[], w.records_appended);
        out.histogram(
            "nvmedb_wal_group_commit_size",
            "Committers (log waiters) each flush released; the sum counts each flush at its bucket's bound.",
            &[],
            &w.group_commit_histogram(),
            1.0,
        );
    }
    out.histogram(
        "nvmedb_checkpoint_duration_seconds",
        "How long each checkpoint took (write-back of dirty pages, catalog, log release).",
        &[],
        &db.checkpoint_stats(),
        1e9,
    );
    out.gauge(
        "nvmedb_recovery_duration_seconds",
        "How long recovery took when the database was opened.",
        &[],
        db.recovery_report().micros as f64 * 1e-6,
    );
}

/// Replication metrics of a primary: its role, epoch and positions, and per standby the
/// persisted position it acknowledged and its lag in bytes and seconds.
pub fn primary(out: &mut Exposition, s: &ReplStatus) {
    role(out, "primary", s.epoch);
    out.gauge(
        "nvmedb_replication_durable_lsn",
        "The primary's local durable log position.",
        &[],
        s.local_durable as f64,
    );
    for sb in &s.standbys {
        let l = [("standby", sb.addr.as_str())];
        out.gauge(
            "nvmedb_replication_standby_persisted_lsn",
            "The log position a standby acknowledged as persisted.",
            &l,
            sb.shadow as f64,
        );
    }
    for sb in &s.standbys {
        out.gauge(
            "nvmedb_replication_standby_lag_bytes",
            "Log bytes appended here that a standby has not acknowledged.",
            &[("standby", sb.addr.as_str())],
            sb.lag_bytes as f64,
        );
    }
    for sb in &s.standbys {
        out.gauge(
            "nvmedb_replication_standby_lag_seconds",
            "How long ago the first record a standby has not acknowledged was appended.",
            &[("standby", sb.addr.as_str())],
            sb.lag.as_secs_f64(),
        );
    }
    for sb in &s.standbys {
        out.gauge(
            "nvmedb_replication_standby_connected",
            "1 while the link to a standby is up.",
            &[("standby", sb.addr.as_str())],
            if sb.link == crate::repl::LinkState::Up { 1.0 } else { 0.0 },
        );
    }
}

/// Replication metrics of a standby: role, epoch, persisted and applied positions, and how far
/// its applied state is behind what it received (bytes) and what the primary acknowledged.
pub fn standby(out: &mut Exposition, p: &StandbyPositions) {
    role(out, "standby", p.epoch);
    out.gauge(
        "nvmedb_replication_persisted_lsn",
        "The persisted end of the received log.",
        &[],
        p.persisted as f64,
    );
    out.gauge("nvmedb_replication_applied_lsn", "The end of the last record applied.", &[], p.applied as f64);
    out.gauge(
        "nvmedb_replication_apply_lag_bytes",
        "Log bytes the primary acknowledged that this standby has not applied yet.",
        &[],
        p.primary_acknowledged.saturating_sub(p.applied) as f64,
    );
}

/// A node's replication state at one moment, whichever role it has.
#[derive(Debug, Clone)]
pub enum Replication {
    /// A primary's status (its standbys' positions and lags).
    Primary(ReplStatus),
    /// A standby's positions.
    Standby(StandbyPositions),
}

/// What reads a node's replication state when a page is rendered (`None`: not replicating).
#[derive(Clone)]
pub struct ReplicationSource(pub Arc<dyn Fn() -> Option<Replication> + Send + Sync>);

impl ReplicationSource {
    /// The state now.
    pub fn read(&self) -> Option<Replication> {
        (self.0)()
    }
}

impl std::fmt::Debug for ReplicationSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReplicationSource")
    }
}

/// [`primary`] or [`standby`], as the state says.
pub fn replication(out: &mut Exposition, r: &Replication) {
    match r {
        Replication::Primary(s) => primary(out, s),
        Replication::Standby(p) => standby(out, p),
    }
}

fn role(out: &mut Exposition, role: &str, epoch: u64) {
    for r in ["primary", "standby"] {
        out.gauge(
            "nvmedb_replication_role",
            "1 for the role this node has now (primary or standby).",
            &[("role", r)],
            if r == role { 1.0 } else { 0.0 },
        );
    }
    out.gauge("nvmedb_replication_epoch", "The replication epoch of this node.", &[], epoch as f64);
}

/// What renders a metrics page.
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// The HTTP endpoint: `GET /metrics` answers `render()` as `text/plain; version=0.0.4`, any other
/// path 404. One thread, one request per connection (Prometheus scrapes every few seconds).
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listens on `addr` (e.g. `127.0.0.1:9187`; port 0 picks a free one).
    pub fn start(addr: &str, render: Render) -> Result<Self> {
        let listener = TcpListener::bind(addr).map_err(|e| Error::Config {
            key: "metrics".into(),
            detail: format!("cannot listen on {addr} for metrics: {e}"),
        })?;
        let local = listener.local_addr().map_err(|e| Error::Config {
            key: "metrics".into(),
            detail: format!("the metrics listener on {addr}: {e}"),
        })?;
        listener.set_nonblocking(true).map_err(|e| Error::Config {
            key: "metrics".into(),
            detail: format!("the metrics listener on {addr}: {e}"),
        })?;
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("nvmedb-metrics".into())
            .spawn(move || {
                while !s2.load(Ordering::Acquire) {
                    match listener.accept() {
                        Ok((c, _)) => {
                            let _ = answer(c, &render);
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(20))
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            })
            .map_err(|e| Error::Config {
                key: "metrics".into(),
                detail: format!("cannot start its thread: {e}"),
            })?;
        Ok(Self { addr: local, stop, thread: Some(thread) })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn answer(c: TcpStream, render: &Render) -> std::io::Result<()> {
    c.set_nonblocking(false)?;
    c.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut r = BufReader::new(c.try_clone()?);
    let mut line = String::new();
    r.read_line(&mut line)?;
    // Skip the headers.
    let mut h = String::new();
    while r.read_line(&mut h)? > 2 {
        h.clear();
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, ctype, body) = if method != "GET" {
        ("405 Method Not Allowed", "text/plain", "GET /metrics\n".to_string())
    } else if path == "/metrics" {
        ("200 OK", "text/plain; version=0.0.4; charset=utf-8", render())
    } else {
        ("404 Not Found", "text/plain", "nvmedb serves its metrics at /metrics\n".to_string())
    };
    let mut w = c;
    write!(
        w,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    w.write_all(body.as_bytes())?;
    w.flush()
}

/// `GET http://addr/metrics` with a plain TCP client (for `nvmedb status --metrics` and tests):
/// the body of a 200 answer, else an error naming the status.
pub fn scrape(addr: &str) -> std::io::Result<String> {
    let mut c = TcpStream::connect(addr)?;
    c.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(c, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")?;
    let mut all = String::new();
    std::io::Read::read_to_string(&mut c, &mut all)?;
    let (head, body) = all
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "no HTTP header end"))?;
    let status = head.lines().next().unwrap_or("");
    if !status.contains(" 200 ") {
        return Err(std::io::Error::other(format!("{addr}/metrics answered {status}")));
    }
    Ok(body.to_string())
}

/// A metrics page for people (`nvmedb status --metrics`): one line per sample, histogram
/// buckets left out and a mean added after each `_count`.
pub fn summary(page: &str) -> String {
    let mut out = String::new();
    let mut sums: std::collections::HashMap<String, f64> = std::collections::HashMap::new();
    for line in page.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let Some((name, value)) = line.rsplit_once(' ') else { continue };
        let base = name.split('{').next().unwrap_or(name);
        if base.ends_with("_bucket") {
            continue;
        }
        let _ = writeln!(out, "{name:<72} {value}");
        let v: f64 = value.parse().unwrap_or(f64::NAN);
        if let Some(stem) = base.strip_suffix("_sum") {
            sums.insert(format!("{stem}{}", &name[base.len()..]), v);
        } else if let Some(stem) = base.strip_suffix("_count") {
            if let Some(sum) = sums.get(&format!("{stem}{}", &name[base.len()..])) {
                if v > 0.0 {
                    let _ = writeln!(out, "{:<72} {}", format!("{stem} (mean)"), number(sum / v));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_families_written_once() {
        let mut e = Exposition::new();
        e.counter("nvmedb_x_total", "X.", &[("pool", "a\"b")], 3);
        e.counter("nvmedb_x_total", "X.", &[("pool", "c")], 4);
        let h = HistogramSnapshot { bounds: vec![1000, 2000], counts: vec![1, 2, 3], sum: 9000 };
        e.histogram("nvmedb_d_seconds", "D.", &[], &h, 1e9);
        let text = e.finish();
        assert_eq!(text.matches("# TYPE nvmedb_x_total counter").count(), 1, "{text}");
        assert!(text.contains("nvmedb_x_total{pool=\"a\\\"b\"} 3"), "{text}");
        assert!(text.contains("nvmedb_d_seconds_bucket{le=\"0.000001\"} 1"), "{text}");
        assert!(text.contains("nvmedb_d_seconds_bucket{le=\"0.000002\"} 3"), "{text}");
        assert!(text.contains("nvmedb_d_seconds_bucket{le=\"+Inf\"} 6"), "{text}");
        assert!(text.contains("nvmedb_d_seconds_count 6"), "{text}");
        assert!(text.contains("nvmedb_d_seconds_sum 0.000009"), "{text}");
    }

    #[test]
    #[should_panic(expected = "written in two places")]
    fn a_family_split_in_two_is_a_bug() {
        let mut e = Exposition::new();
        e.counter("nvmedb_a_total", "A.", &[], 1);
        e.counter("nvmedb_b_total", "B.", &[], 1);
        e.counter("nvmedb_a_total", "A.", &[], 2);
    }
}
