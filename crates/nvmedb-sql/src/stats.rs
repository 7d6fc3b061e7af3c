//! The SQL server's own counters and the statistics views (`nvmedb_stat_database`,
//! `nvmedb_stat_replication`, in the spirit of PostgreSQL's `pg_stat_*`), whose database also
//! holds the system catalogs clients read ([`pgcatalog`]).
//!
//! Owns: [`SqlStats`] (statements, errors by SQLSTATE, connections), [`StatViews`] and the
//! server's metrics page ([`metrics_page`]). The views are tables of a small in-memory
//! database of their own, refilled from the same snapshots the metrics page reads just before
//! a statement that names one runs; the statement is planned and run on a session of that
//! database ([`Session`](crate::Session) routes it there), so the planner and executor need no
//! knowledge of them and a view can never be changed from SQL (42809).
//!
//! Invariants: a view's rows are a snapshot taken when its statement started; the counters
//! only grow while the server runs.

use crate::error::{SqlError, SqlResult};
use crate::parse::{self, Parsed};
use crate::pgcatalog;
use crate::plan::{Binder, Prepared};
use crate::session::{Engine, Outcome, Session};
use crate::types::Datum;
use nvmedb::metrics::{Exposition, Replication};
use nvmedb::util::sync::MutexExt;
use nvmedb::{ColumnType, Database, Schema, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// The name every statistics view starts with.
pub const VIEW_PREFIX: &str = "nvmedb_stat_";

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

/// Whether statement text names a statistics view (what routes it to [`StatViews`]).
pub fn names_a_view(sql: &str) -> bool {
    crate::parse::holds_ignoring_case(sql, VIEW_PREFIX)
}

/// The statistics views: an in-memory database holding them, and one session on it.
pub struct StatViews {
    engine: Arc<Engine>,
    session: Mutex<Session>,
}

impl std::fmt::Debug for StatViews {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StatViews")
    }
}

fn view_schemas() -> nvmedb::Result<[(&'static str, Schema); 2]> {
    let name = ColumnType::Bytes(200);
    Ok([
        (
            "nvmedb_stat_database",
            Schema::new(vec![
                ("datname", name),
                ("numbackends", ColumnType::Int),
                ("xact_commit", ColumnType::Int),
                ("xact_rollback", ColumnType::Int),
                ("blks_read", ColumnType::Int),
                ("blks_hit", ColumnType::Int),
                ("blks_written", ColumnType::Int),
                ("evictions", ColumnType::Int),
                ("lock_waits", ColumnType::Int),
                ("deadlocks", ColumnType::Int),
                ("statements", ColumnType::Int),
                ("errors", ColumnType::Int),
                ("wal_bytes", ColumnType::Int),
                ("wal_flushes", ColumnType::Int),
                ("commit_seconds_mean", ColumnType::Double),
                ("recovery_seconds", ColumnType::Double),
            ]),
        ),
        (
            "nvmedb_stat_replication",
            Schema::new(vec![
                ("name", name),
                ("role", ColumnType::Bytes(16)),
                ("epoch", ColumnType::Int),
                ("state", ColumnType::Bytes(64)),
                ("persisted_lsn", ColumnType::Int),
                ("applied_lsn", ColumnType::Int),
                ("lag_bytes", ColumnType::Int),
                ("lag_seconds", ColumnType::Double),
            ])
            .with_nullable("applied_lsn")?
            .with_nullable("lag_seconds")?,
        ),
    ])
}

fn engine_err(e: nvmedb::Error) -> SqlError {
    SqlError::from_engine(e, None)
}

impl StatViews {
    /// Creates the views' in-memory database.
    pub fn new() -> SqlResult<Self> {
        let options = nvmedb::Options {
            table_buffer: nvmedb::BufferSize::Bytes(1 << 20),
            index_buffer: nvmedb::BufferSize::Bytes(1 << 20),
            ..nvmedb::Options::default()
        };
        let db = Database::open_with_storage(Arc::new(nvmedb::io::MemStorage::new()), options)
            .map_err(engine_err)?;
        for (name, schema) in view_schemas().map_err(engine_err)? {
            db.create_table(name, schema).map_err(engine_err)?;
        }
        let engine = Engine::for_views(db)?;
        let mut session = Session::new(engine.clone(), "nvmedb", "nvmedb");
        pgcatalog::create_views(&mut session)?;
        Ok(Self { engine, session: Mutex::new(session) })
    }

    /// Plans `text` (which names a view) against the views; a statement naming a system
    /// catalog is rewritten first ([`pgcatalog::rewrite`]).
    pub fn prepare(
        &self,
        text: &str,
        param_types: &[Option<crate::types::SqlType>],
    ) -> SqlResult<Arc<Prepared>> {
        let s = self.session.locked();
        if !pgcatalog::names_catalog(text) {
            return s.prepare(text, param_types);
        }
        let Parsed::Sql(mut st) = parse::parse_one(text)? else { return s.prepare(text, param_types) };
        pgcatalog::rewrite(&mut st);
        let catalog = &self.engine.catalog;
        match Binder::new(catalog, param_types).plan(text, &st) {
            Ok(p) => Ok(Arc::new(p)),
            Err(e) => {
                let sqlparser::ast::Statement::Query(q) = st.as_ref() else { return Err(e) };
                let Some(empty) = pgcatalog::empty_answer(q) else { return Err(e) };
                let Parsed::Sql(alt) = parse::parse_one(&empty)? else { return Err(e) };
                let mut p = Binder::new(catalog, &[]).plan(text, &alt)?;
                // The client binds the original's parameters.
                let n = param_types.len().max(pgcatalog::placeholders(&st));
                p.params = (0..n)
                    .map(|i| param_types.get(i).copied().flatten().unwrap_or(crate::types::SqlType::Text))
                    .collect();
                Ok(Arc::new(p))
            }
        }
    }

    /// Refills the views from `of` (as `asker` sees them) and runs `p` on them; any statement
    /// but a query is refused.
    pub fn execute(
        &self,
        of: &Engine,
        asker: &pgcatalog::Asker,
        p: &Arc<Prepared>,
        params: &[Datum],
    ) -> SqlResult<Outcome> {
        if !matches!(p.stmt, crate::plan::Stmt::Query(_)) {
            return Err(pgcatalog::read_only());
        }
        let mut s = self.session.locked();
        if names_a_view(&p.sql) {
            self.refill(of).map_err(engine_err)?;
        }
        if pgcatalog::names_catalog(&p.sql) {
            pgcatalog::refill(&self.engine, of, asker)?;
        }
        s.execute(p, params)
    }

    fn refill(&self, of: &Engine) -> nvmedb::Result<()> {
        let db = &self.engine.db;
        let t = db.table("nvmedb_stat_database")?;
        let txn = of.db.txn_stats();
        let locks = of.db.lock_stats();
        let (tp, ip) = of.db.buffer_stats();
        let wal = of.db.engine_log().map(|l| l.record_log().stats()).unwrap_or_default();
        let errors: u64 = of.sql_stats.errors().values().sum();
        let mean = if txn.commit_ns.count() == 0 {
            0.0
        } else {
            txn.commit_ns.sum as f64 / txn.commit_ns.count() as f64 * 1e-9
        };
        let datname = of.db.location();
        t.delete(&Value::Bytes(datname.clone().into_bytes()))?;
        let int = |v: u64| Value::Int(v.min(i64::MAX as u64) as i64);
        t.insert(&[
            Value::Bytes(datname.into_bytes()),
            int(of.sql_stats.active()),
            int(txn.commits),
            int(txn.aborts),
            int(tp.reads + ip.reads),
            int(tp.hits + ip.hits),
            int(tp.writes + ip.writes),
            int(tp.evictions + ip.evictions),
            int(locks.waits),
            int(locks.deadlocks),
            int(of.sql_stats.statements()),
            int(errors),
            int(wal.bytes_written),
            int(wal.flushes),
            Value::Double(mean),
            Value::Double(of.db.recovery_report().micros as f64 * 1e-6),
        ])?;
        let r = db.table("nvmedb_stat_replication")?;
        let mut keys = Vec::new();
        r.scan(|row| {
            keys.push(row.try_value(0)?);
            Ok(true)
        })?;
        for k in keys {
            r.delete(&k)?;
        }
        let rows: Vec<Vec<Value>> = match of.replication.as_ref().and_then(|f| f.read()) {
            None => vec![],
            Some(Replication::Primary(s)) => s
                .standbys
                .iter()
                .map(|sb| {
                    vec![
                        Value::Bytes(sb.addr.clone().into_bytes()),
                        Value::Bytes(b"standby".to_vec()),
                        int(s.epoch),
                        Value::Bytes(format!("{:?}", sb.link).into_bytes()),
                        int(sb.shadow),
                        Value::Null,
                        int(sb.lag_bytes),
                        Value::Double(sb.lag.as_secs_f64()),
                    ]
                })
                .collect(),
            Some(Replication::Standby(p)) => vec![vec![
                Value::Bytes(b"local".to_vec()),
                Value::Bytes(b"standby".to_vec()),
                int(p.epoch),
                Value::Bytes(b"streaming".to_vec()),
                int(p.persisted),
                int(p.applied),
                int(p.primary_acknowledged.saturating_sub(p.applied)),
                Value::Null,
            ]],
        };
        for row in rows {
            r.insert(&row)?;
        }
        Ok(())
    }
}
