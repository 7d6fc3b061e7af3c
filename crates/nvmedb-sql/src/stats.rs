//! The SQL server's own counters and its metrics page.
//!
//! Owns: [`SqlStats`] (statements, errors by SQLSTATE, connections) and the server's metrics
//! page ([`metrics_page`]).
//!
//! Invariant: the counters only grow while the server runs.

use crate::session::Engine;
use nvmedb::metrics::Exposition;
use nvmedb::util::sync::MutexExt;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Counters of the SQL server (relaxed atomics; errors under a mutex, they are rare).
#[derive(Debug, Default)]
pub struct SqlStats {
    statements: AtomicU64,
    connections: AtomicU64,
    active: AtomicU64,
    errors: Mutex<BTreeMap<&'static str, u64>>,
}

impl SqlStats {
    /// Counts one statement run (simple query statement or extended Execute).
    pub fn statement(&self) {
        self.statements.fetch_add(1, Relaxed);
    }

    /// Counts an error sent to a client.
    pub fn error(&self, sqlstate: &'static str) {
        *self.errors.locked().entry(sqlstate).or_insert(0) += 1;
    }

    /// Counts a connection accepted (and served until [`SqlStats::disconnected`]).
    pub fn connected(&self) {
        self.connections.fetch_add(1, Relaxed);
        self.active.fetch_add(1, Relaxed);
    }

    /// A connection ended.
    pub fn disconnected(&self) {
        self.active.fetch_sub(1, Relaxed);
    }

    /// Statements run so far.
    pub fn statements(&self) -> u64 {
        self.statements.load(Relaxed)
    }

    /// Connections open now.
    pub fn active(&self) -> u64 {
        self.active.load(Relaxed)
    }

    /// Errors sent to clients, by SQLSTATE.
    pub fn errors(&self) -> BTreeMap<&'static str, u64> {
        self.errors.locked().clone()
    }

    fn write(&self, out: &mut Exposition) {
        out.counter("nvmedb_sql_statements_total", "SQL statements run.", &[], self.statements());
        out.counter_family("nvmedb_sql_errors_total", "Errors sent to clients, by SQLSTATE.");
        for (state, n) in self.errors() {
            out.counter(
                "nvmedb_sql_errors_total",
                "Errors sent to clients, by SQLSTATE.",
                &[("sqlstate", state)],
                n,
            );
        }
        out.counter(
            "nvmedb_sql_connections_total",
            "Client connections accepted.",
            &[],
            self.connections.load(Relaxed),
        );
        out.gauge("nvmedb_sql_connections", "Client connections open now.", &[], self.active() as f64);
    }
}

/// The whole metrics page of a SQL server: the engine's families, replication's when
/// `repl` reports a state, and the server's own.
pub fn metrics_page(engine: &Engine) -> String {
    let mut out = Exposition::new();
    nvmedb::metrics::database(&mut out, &engine.db);
    if let Some(r) = engine.replication.as_ref().and_then(|f| f.read()) {
        nvmedb::metrics::replication(&mut out, &r);
    }
    engine.sql_stats.write(&mut out);
    out.finish()
}
