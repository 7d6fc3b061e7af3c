//! A client session: transaction state, settings, cached plans, COPY, and DDL.
//!
//! Owns: [`Engine`] (the database, its SQL catalog and the DDL gate every session shares) and
//! [`Session`] (one client's state machine: idle, in a transaction block, or in a failed block
//! that only ROLLBACK leaves). Statements outside a block run as their own transaction;
//! changes commit durably before the command completes. A session dropped in the middle of
//! a block (the client went away) rolls it back.
//!
//! DDL (CREATE/DROP/TRUNCATE/CREATE INDEX/DROP INDEX/ALTER TABLE, see `alter` and `reshape`)
//! takes effect at once
//! and is not undone by ROLLBACK; it waits, through the gate, until no other statement or
//! transaction block is running, and is refused inside a block that has already changed
//! rows.
//!
//! COPY FROM STDIN into an empty table, as its own transaction or into a table this same
//! block created or truncated (what `pgbench -i` does), is a bulk load
//! ([`Database::load_table_replacing`]: pages and B+trees built bottom-up, logged once as
//! page images, switched in at the end in one step) instead of row-by-row inserts. It holds
//! the gate exclusively, as DDL does, from the start of the data to the switch, and like the
//! DDL before it in the block it takes effect at once: a later ROLLBACK of the block does not
//! undo it. Any other COPY inserts its rows in the transaction.

use crate::catalog::Catalog;
use crate::error::{code, SqlError, SqlResult};
use crate::exec::{self, ExecCtx};
use crate::expr::EvalCtx;
use crate::parse::{self, Parsed};
use crate::plan::{Binder, CopyPlan, IsolationLevel, OutCol, Prepared, Stmt};
use crate::sequence::SessionSequences;
use crate::stats::{names_a_view, SqlStats, StatViews};
use crate::types::{now_micros, Datum, SqlType};
use nvmedb::metrics::ReplicationSource;
use nvmedb::util::sync::{CondvarExt, MutexExt};
use nvmedb::{Database, Transaction};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

mod alter;
mod copy_binary;
mod create_as;
mod named;
mod reshape;
use reshape::rebuild_copy;
mod settings;
pub use settings::is_settable;
use settings::{lookup_setting, parse_memory, SETTINGS};

/// Bit of [`Gate`]'s state word: a DDL statement holds or wants the gate.
const EXCLUSIVE: u64 = 1 << 63;

/// Lets DDL run alone: statements and transaction blocks hold it shared (one atomic add), a
/// DDL statement exclusively (new shared holders wait while it waits or runs).
#[derive(Debug, Default)]
pub struct Gate {
    state: AtomicU64,
    writer: Mutex<()>,
    lock: Mutex<()>,
    cv: Condvar,
}

impl Gate {
    fn enter_shared(&self) {
        loop {
            let s = self.state.load(Ordering::Acquire);
            if s & EXCLUSIVE == 0 {
                if self.state.compare_exchange_weak(s, s + 1, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                    return;
                }
                continue;
            }
            let g = self.lock.locked();
            if self.state.load(Ordering::Acquire) & EXCLUSIVE != 0 {
                let _ = self.cv.wait_timeout(g, Duration::from_millis(50));
            }
        }
    }

    fn leave_shared(&self) {
        let s = self.state.fetch_sub(1, Ordering::AcqRel);
        if s & EXCLUSIVE != 0 && (s & !EXCLUSIVE) == 1 {
            let _g = self.lock.locked();
            self.cv.notify_all();
        }
    }

    /// Waits (up to `timeout`) until no shared holder remains; the guard releases the gate.
    fn enter_exclusive(&self, timeout: Duration) -> SqlResult<GateGuard<'_>> {
        let w = self.writer.locked();
        self.state.fetch_or(EXCLUSIVE, Ordering::AcqRel);
        let deadline = Instant::now() + timeout;
        let mut g = self.lock.locked();
        while self.state.load(Ordering::Acquire) & !EXCLUSIVE != 0 {
            let now = Instant::now();
            if now >= deadline {
                self.state.fetch_and(!EXCLUSIVE, Ordering::AcqRel);
                self.cv.notify_all();
                return Err(SqlError::new(
                    code::LOCK_NOT_AVAILABLE,
                    format!(
                        "DDL waited {timeout:?} for other sessions' statements and transaction blocks to finish; \
                         end them and try again"
                    ),
                ));
            }
            g = self.cv.wait_timeout_locked(g, (deadline - now).min(Duration::from_millis(50))).0;
        }
        drop(g);
        Ok(GateGuard { gate: self, _writer: w })
    }
}

struct GateGuard<'a> {
    gate: &'a Gate,
    _writer: std::sync::MutexGuard<'a, ()>,
}

impl Drop for GateGuard<'_> {
    fn drop(&mut self) {
        self.gate.state.fetch_and(!EXCLUSIVE, Ordering::AcqRel);
        let _g = self.gate.lock.locked();
        self.gate.cv.notify_all();
    }
}

/// What every session shares: the database, the SQL catalog, the DDL gate.
#[derive(Debug)]
pub struct Engine {
    /// The database.
    pub db: Database,
    /// Tables as SQL sees them.
    pub catalog: Catalog,
    gate: Gate,
    /// How long DDL waits for other sessions.
    pub ddl_timeout: Duration,
    /// Settings SHOW reports that describe the server (buffer size, durability).
    pub server_settings: Vec<(String, String)>,
    /// The server's counters (statements, errors, connections).
    pub sql_stats: SqlStats,
    /// Reads the node's replication state for the metrics and `nvmedb_stat_replication`
    /// (`None`: the database does not replicate).
    pub replication: Option<ReplicationSource>,
    /// The statistics views, made at their first use (`None` in the views' own engine).
    stat_views: Option<OnceLock<StatViews>>,
}

impl Engine {
    /// Wraps an open database.
    pub fn new(db: Database) -> SqlResult<Arc<Self>> {
        Self::with_replication(db, None)
    }

    /// Wraps an open database whose replication state `replication` reads.
    pub fn with_replication(db: Database, replication: Option<ReplicationSource>) -> SqlResult<Arc<Self>> {
        Self::build(db, replication, true)
    }

    fn build(db: Database, replication: Option<ReplicationSource>, views: bool) -> SqlResult<Arc<Self>> {
        let catalog = Catalog::load(&db)?;
        let buffer_mb = db.table_pool().memory_bytes() / (1 << 20);
        Ok(Arc::new(Self {
            db,
            catalog,
            gate: Gate::default(),
            ddl_timeout: Duration::from_secs(30),
            server_settings: vec![("shared_buffers".into(), format!("{buffer_mb}MB"))],
            sql_stats: SqlStats::default(),
            replication,
            stat_views: views.then(OnceLock::new),
        }))
    }

    /// The engine of the statistics views' own database (which has no views of its own).
    pub(crate) fn for_views(db: Database) -> SqlResult<Arc<Self>> {
        Self::build(db, None, false)
    }

    /// The statistics views, when a statement names one (`Ok(None)`: it names none, or this is
    /// the views' own engine).
    fn views_for(&self, sql: &str) -> SqlResult<Option<&StatViews>> {
        let Some(slot) = &self.stat_views else { return Ok(None) };
        if !names_a_view(sql) && !crate::pgcatalog::names_catalog(sql) {
            return Ok(None);
        }
        if let Some(v) = slot.get() {
            return Ok(Some(v));
        }
        let v = StatViews::new()?;
        Ok(Some(slot.get_or_init(|| v)))
    }
}

/// Transaction status as the protocol reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxStatus {
    /// Not in a transaction block.
    Idle,
    /// In a transaction block.
    InBlock,
    /// In a failed transaction block (only ROLLBACK or COMMIT end it).
    Failed,
}

/// The result of one statement.
#[derive(Debug)]
pub enum Outcome {
    /// Rows (with the columns they have), and the command tag.
    Rows(Arc<Vec<OutCol>>, Vec<Vec<Datum>>, String),
    /// A command tag.
    Done(String),
    /// COPY FROM STDIN started: the client now sends this many columns per line.
    CopyIn(usize),
    /// An empty query.
    Empty,
}

/// A notice for the client (e.g. "there is no transaction in progress").
pub type Notice = String;

enum TxnState {
    Idle,
    Active(Box<Transaction>),
    Failed,
}

struct CopyIn {
    plan: CopyPlan,
    own: Option<Box<Transaction>>,
    buf: Vec<u8>,
    rows: u64,
    line: u64,
    err: Option<SqlError>,
    done: bool,
    started: Instant,
    /// The engine row being built (reused from line to line).
    row: Vec<nvmedb::Value>,
    /// The bulk load the rows go to instead of the transaction, if any.
    load: Option<CopyLoad>,
}

/// Rows a COPY sends its bulk-load thread at a time.
const LOAD_BATCH: usize = 1024;

/// A rows batch for a bulk load; an error makes the load fail (the old table stays).
type LoadBatch = Vec<nvmedb::Result<Vec<nvmedb::Value>>>;

/// A COPY filling an empty table through [`Database::load_table_replacing`] on a thread that
/// holds the gate exclusively until the new table is switched in.
struct CopyLoad {
    rows: mpsc::SyncSender<LoadBatch>,
    batch: LoadBatch,
    thread: std::thread::JoinHandle<SqlResult<()>>,
}

impl CopyLoad {
    /// Starts the load of table `name` if it is empty once the gate is held exclusively;
    /// `None` (the gate released again) if it is not, or the gate could not be had.
    fn start(engine: &Arc<Engine>, name: &str) -> Option<Self> {
        let (ready_tx, ready_rx) = mpsc::channel::<bool>();
        let (rows, rows_rx) = mpsc::sync_channel::<LoadBatch>(4);
        let (engine, name) = (engine.clone(), name.to_string());
        let thread = std::thread::spawn(move || -> SqlResult<()> {
            let Ok(_x) = engine.gate.enter_exclusive(engine.ddl_timeout) else {
                let _ = ready_tx.send(false);
                return Ok(());
            };
            let empty = engine.catalog.get(&name).ok().is_some_and(|info| {
                let mut empty = true;
                let r =
                    info.table.primary_keys(std::ops::Bound::Unbounded, std::ops::Bound::Unbounded, |_| {
                        empty = false;
                        Ok(false)
                    });
                r.is_ok() && empty
            });
            let _ = ready_tx.send(empty);
            if !empty {
                return Ok(());
            }
            let schema = engine.catalog.get(&name)?.table.schema().clone();
            let t = engine
                .db
                .load_table_replacing(&name, schema, rows_rx.into_iter().flatten(), |_| {})
                .map_err(|e| SqlError::from_engine(e, Some(&name)))?;
            engine.catalog.put(t)?;
            Ok(())
        });
        if ready_rx.recv().unwrap_or(false) {
            Some(Self { rows, batch: Vec::with_capacity(LOAD_BATCH), thread })
        } else {
            let _ = thread.join();
            None
        }
    }

    fn push(&mut self, row: nvmedb::Result<Vec<nvmedb::Value>>) -> SqlResult<()> {
        self.batch.push(row);
        if self.batch.len() >= LOAD_BATCH {
            let b = std::mem::replace(&mut self.batch, Vec::with_capacity(LOAD_BATCH));
            if self.rows.send(b).is_err() {
                // The load stopped (it failed): its error comes with the finish.
                return Err(SqlError::new(code::INTERNAL_ERROR, "the COPY's bulk load stopped"));
            }
        }
        Ok(())
    }

    /// Ends the input (`failed`: with an error, so nothing is switched in) and waits for the
    /// load; the gate is free again when this returns.
    fn finish(mut self, failed: bool) -> SqlResult<()> {
        if failed {
            self.batch.push(Err(nvmedb::Error::InvalidArgument("the COPY failed".into())));
        }
        let _ = self.rows.send(std::mem::take(&mut self.batch));
        drop(self.rows);
        self.thread
            .join()
            .unwrap_or_else(|_| Err(SqlError::new(code::INTERNAL_ERROR, "the COPY's bulk load panicked")))
    }
}

/// One client's session.
pub struct Session {
    engine: Arc<Engine>,
    state: TxnState,
    /// The transaction block has changed rows.
    dirty: bool,
    /// The isolation level of the open transaction block.
    level: IsolationLevel,
    /// The transaction block has run a statement (its isolation can no longer change).
    ran: bool,
    /// This session holds the gate shared for its transaction block.
    holds_gate: bool,
    settings: HashMap<String, String>,
    user: String,
    database: String,
    cache: HashMap<String, Arc<Prepared>>,
    /// Named prepared statements, SQL's and the protocol's ([`named`]).
    named: HashMap<String, Arc<Prepared>>,
    copy: Option<CopyIn>,
    notices: Vec<Notice>,
    /// Tables this session's transaction block created or truncated (a COPY into one of
    /// them, still empty, is a bulk load).
    fresh: HashSet<String>,
    /// The error the next statement fails with instead of running ([`Session::fail_next`]).
    pending: Option<SqlError>,
    /// The last value `nextval` gave this session, per sequence (`currval`).
    currvals: std::cell::RefCell<HashMap<String, i64>>,
    /// The server process id the client was given (`pg_backend_pid()`).
    backend_pid: i32,
    /// Statements of the transaction block that changed (or may have changed) rows.
    changes: u64,
    /// Set by a CancelRequest naming this session; cleared when a statement starts.
    cancel: Arc<std::sync::atomic::AtomicBool>,
    /// `statement_timeout` (`None`: off).
    statement_timeout: Option<Duration>,
    /// When the running statement's `statement_timeout` ends it.
    deadline: Option<Instant>,
    /// The block's savepoints, oldest first, with `changes` when each was set.
    savepoints: Vec<(String, u64)>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Session({}@{}, {:?})", self.user, self.database, self.status())
    }
}

/// Plans kept per session for repeated simple-query texts.
const PLAN_CACHE: usize = 256;

impl Session {
    /// A new session for `user` on `database`.
    pub fn new(engine: Arc<Engine>, user: &str, database: &str) -> Self {
        Self {
            engine,
            state: TxnState::Idle,
            dirty: false,
            level: IsolationLevel::ReadCommitted,
            ran: false,
            holds_gate: false,
            settings: HashMap::new(),
            user: user.to_string(),
            database: database.to_string(),
            cache: HashMap::new(),
            named: HashMap::new(),
            copy: None,
            notices: Vec::new(),
            fresh: HashSet::new(),
            pending: None,
            currvals: Default::default(),
            backend_pid: 0,
            changes: 0,
            savepoints: Vec::new(),
            cancel: Arc::default(),
            statement_timeout: None,
            deadline: None,
        }
    }

    /// The session with `pid` as its server process id (what `pg_backend_pid()` returns: the
    /// id the protocol's BackendKeyData gave the client).
    pub fn with_backend_pid(mut self, pid: i32) -> Self {
        self.backend_pid = pid;
        self
    }

    /// What the system catalogs show this session: its user, database and settings.
    fn asker(&self) -> crate::pgcatalog::Asker {
        let mut settings: Vec<(String, String, &'static str)> = SETTINGS
            .iter()
            .map(|(name, _, _)| {
                let source = if self.settings.contains_key(*name) { "session" } else { "default" };
                (name.to_string(), self.setting(name).unwrap_or_default(), source)
            })
            .collect();
        for (k, v) in &self.settings {
            if !SETTINGS.iter().any(|(n, _, _)| *n == k.as_str()) {
                settings.push((k.clone(), v.clone(), "session"));
            }
        }
        for (k, v) in &self.engine.server_settings {
            if !settings.iter().any(|(n, _, _)| n == k) {
                settings.push((k.clone(), v.clone(), "configuration file"));
            }
        }
        settings.sort();
        crate::pgcatalog::Asker { user: self.user.clone(), database: self.database.clone(), settings }
    }

    /// The engine.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Makes the next statement fail with `e` instead of running (a standby that could not
    /// give the snapshot the session asked for).
    pub fn fail_next(&mut self, e: SqlError) {
        self.pending = Some(e);
    }

    /// Moves an idle session (no transaction block, no COPY) to `engine`, with `settings` set
    /// as SHOW reports them (a standby serving reads gives each statement the latest snapshot
    /// and its position and lag); its cached plans go. Returns false, changing nothing, when
    /// the session is not idle.
    pub fn use_engine(&mut self, engine: Arc<Engine>, settings: &[(&str, String)]) -> bool {
        if !matches!(self.state, TxnState::Idle) || self.copy.is_some() || self.holds_gate {
            return false;
        }
        if !Arc::ptr_eq(&self.engine, &engine) {
            self.engine = engine;
            self.cache.clear();
            self.fresh.clear();
        }
        for (k, v) in settings {
            self.settings.insert(k.to_string(), v.clone());
        }
        true
    }

    /// Transaction status.
    pub fn status(&self) -> TxStatus {
        match self.state {
            TxnState::Idle => TxStatus::Idle,
            TxnState::Active(_) => TxStatus::InBlock,
            TxnState::Failed => TxStatus::Failed,
        }
    }

    /// Notices produced since the last call.
    pub fn take_notices(&mut self) -> Vec<Notice> {
        std::mem::take(&mut self.notices)
    }

    /// A setting's value (as SHOW and `current_setting` give it).
    pub fn setting(&self, name: &str) -> Option<String> {
        if name.eq_ignore_ascii_case("transaction_isolation") {
            return Some(self.current_level().name().to_string());
        }
        lookup_setting(&self.settings, &self.engine, name)
    }

    /// The isolation level new transaction blocks get (`default_transaction_isolation`).
    fn default_level(&self) -> IsolationLevel {
        lookup_setting(&self.settings, &self.engine, "default_transaction_isolation")
            .and_then(|v| IsolationLevel::parse(&v))
            .unwrap_or(IsolationLevel::ReadCommitted)
    }

    /// The level of the open block, or the one a block would get.
    fn current_level(&self) -> IsolationLevel {
        match self.state {
            TxnState::Active(_) => self.level,
            _ => self.default_level(),
        }
    }

    /// Plans one statement of text (as [`parse::split`] yields them).
    pub fn prepare(&self, text: &str, param_types: &[Option<SqlType>]) -> SqlResult<Arc<Prepared>> {
        if !parse::names_statement(text) {
            if let Some(v) = self.engine.views_for(text)? {
                return v.prepare(text, param_types);
            }
        }
        let version = self.engine.catalog.version();
        let mk = |stmt: Stmt| Prepared {
            sql: text.to_string(),
            stmt,
            params: param_types.iter().map(|t| t.unwrap_or(SqlType::Text)).collect(),
            columns: Arc::default(),
            version,
        };
        Ok(Arc::new(match parse::parse_one(text)? {
            Parsed::Empty => mk(Stmt::Empty),
            Parsed::Begin => mk(Stmt::Begin(None)),
            Parsed::Commit => mk(Stmt::Commit),
            Parsed::Rollback => mk(Stmt::Rollback),
            Parsed::Checkpoint => mk(Stmt::Checkpoint),
            Parsed::Vacuum => mk(Stmt::NoOp("VACUUM")),
            Parsed::Savepoint(op) => mk(Stmt::Savepoint(op)),
            Parsed::Deallocate(name) => mk(Stmt::Deallocate(name)),
            Parsed::Copy(spec) => {
                let info = self.engine.catalog.get(&spec.table)?;
                if !info.composite.is_empty() {
                    return Err(SqlError::unsupported(format!(
                        "COPY into \"{}\", a table with a key or index of more than one column (use INSERT)",
                        info.name
                    )));
                }
                let targets = if spec.columns.is_empty() {
                    info.visible().collect()
                } else {
                    spec.columns.iter().map(|c| info.column(c)).collect::<SqlResult<_>>()?
                };
                mk(Stmt::Copy(Box::new(CopyPlan {
                    table: info,
                    targets,
                    delimiter: spec.delimiter,
                    null: spec.null,
                    binary: spec.binary,
                })))
            }
            Parsed::Sql(st) => match self.plan_named(text, &st, param_types) {
                Some(p) => p?,
                None => Binder::new(&self.engine.catalog, param_types).plan(text, &st)?,
            },
        }))
    }

    /// A plan made at the current catalog version (re-planned after DDL).
    fn current(&self, p: &Arc<Prepared>) -> SqlResult<Arc<Prepared>> {
        if p.version == self.engine.catalog.version() {
            return Ok(p.clone());
        }
        let types: Vec<Option<SqlType>> = p.params.iter().map(|t| Some(*t)).collect();
        let fresh = self.prepare(&p.sql, &types)?;
        if fresh.columns.len() != p.columns.len()
            || fresh.columns.iter().zip(p.columns.iter()).any(|(a, b)| a.ty != b.ty)
        {
            return Err(SqlError::new(
                code::FEATURE_NOT_SUPPORTED,
                "cached plan must not change result type",
            ));
        }
        Ok(fresh)
    }

    /// Runs a query string of the simple protocol: one outcome per statement, stopping after
    /// the first error or at a COPY (whose data comes next).
    pub fn simple_query(&mut self, sql: &str) -> Vec<SqlResult<Outcome>> {
        let parts = parse::split(sql);
        if parts.is_empty() {
            return vec![Ok(Outcome::Empty)];
        }
        let mut out = Vec::new();
        for text in parts {
            let r = self.simple_one(text);
            let stop = matches!(r, Err(_) | Ok(Outcome::CopyIn(_)));
            out.push(r);
            if stop {
                break;
            }
        }
        out
    }

    fn simple_one(&mut self, text: &str) -> SqlResult<Outcome> {
        if let Some(e) = self.pending.take() {
            return Err(e);
        }
        let cached = self.cache.get(text).cloned();
        let p = match cached {
            Some(p) => p,
            None => {
                if matches!(self.state, TxnState::Failed) {
                    // Parse only what can end the block.
                    if let Ok(
                        Parsed::Commit
                        | Parsed::Rollback
                        | Parsed::Savepoint(parse::SavepointOp::RollbackTo(_)),
                    ) = parse::parse_one(text)
                    {
                    } else {
                        return Err(failed_block());
                    }
                }
                let p = self.prepare(text, &[]).inspect_err(|_| self.fail_block())?;
                if !matches!(p.stmt, Stmt::Copy(_)) {
                    if self.cache.len() >= PLAN_CACHE {
                        self.cache.clear();
                    }
                    self.cache.insert(text.to_string(), p.clone());
                }
                p
            }
        };
        self.execute(&p, &[])
    }

    /// Decodes bound parameters of `p` (text or binary, per `binary(i)`).
    pub fn decode_params(
        p: &Prepared,
        raw: &[Option<&[u8]>],
        binary: impl Fn(usize) -> bool,
    ) -> SqlResult<Vec<Datum>> {
        if raw.len() != p.params.len() {
            return Err(SqlError::new(
                code::PROTOCOL_VIOLATION,
                format!(
                    "bind message supplies {} parameters, but prepared statement requires {}",
                    raw.len(),
                    p.params.len()
                ),
            ));
        }
        raw.iter()
            .enumerate()
            .map(|(i, r)| match r {
                None => Ok(Datum::Null),
                Some(b) if binary(i) => Datum::from_binary(b, p.params[i]),
                Some(b) => {
                    let s = std::str::from_utf8(b).map_err(|_| {
                        SqlError::new(
                            code::INVALID_TEXT_REPRESENTATION,
                            format!("parameter ${} is not UTF-8", i + 1),
                        )
                    })?;
                    Datum::parse(s, p.params[i])
                }
            })
            .collect()
    }

    /// Fails the transaction block after an error met outside [`Session::execute`] (e.g. a
    /// bad Parse or Bind of the extended protocol).
    pub fn fail_current_block(&mut self) {
        self.fail_block();
    }

    fn fail_block(&mut self) {
        if let TxnState::Active(tx) = std::mem::replace(&mut self.state, TxnState::Idle) {
            let _ = tx.abort();
            self.state = TxnState::Failed;
            self.release_gate();
        }
    }

    /// Takes the gate shared again for the transaction block, if one is open (after a COPY's
    /// bulk load, which held it exclusively).
    fn rejoin_gate(&mut self) {
        if matches!(self.state, TxnState::Active(_)) && !self.holds_gate {
            self.engine.gate.enter_shared();
            self.holds_gate = true;
        }
    }

    fn release_gate(&mut self) {
        if self.holds_gate {
            self.engine.gate.leave_shared();
            self.holds_gate = false;
        }
    }

    /// Runs a prepared statement with bound parameters.
    pub fn execute(&mut self, p: &Arc<Prepared>, params: &[Datum]) -> SqlResult<Outcome> {
        if let Some(e) = self.pending.take() {
            return Err(e);
        }
        self.cancel.store(false, Ordering::Relaxed);
        self.deadline = self.statement_timeout.map(|t| Instant::now() + t);
        if self.copy.is_some() {
            return Err(SqlError::new(code::PROTOCOL_VIOLATION, "a COPY is in progress"));
        }
        if matches!(self.state, TxnState::Failed)
            && !matches!(
                p.stmt,
                Stmt::Commit | Stmt::Rollback | Stmt::Savepoint(parse::SavepointOp::RollbackTo(_))
            )
        {
            return Err(failed_block());
        }
        if let Some(v) = self.engine.views_for(&p.sql)?.filter(|_| !parse::names_statement(&p.sql)) {
            let asker = self.asker();
            return v.execute(&self.engine, &asker, p, params).inspect_err(|_| self.fail_block());
        }
        let p = self.current(p).inspect_err(|_| self.fail_block())?;
        let r = self.run(&p, params);
        if r.is_err() {
            self.fail_block();
        }
        r
    }

    fn run(&mut self, p: &Prepared, params: &[Datum]) -> SqlResult<Outcome> {
        match &p.stmt {
            Stmt::Empty => Ok(Outcome::Empty),
            Stmt::Begin(level) => {
                if matches!(self.state, TxnState::Active(_)) {
                    self.notices.push("there is already a transaction in progress".into());
                } else {
                    self.engine.gate.enter_shared();
                    self.holds_gate = true;
                    self.level = level.unwrap_or_else(|| self.default_level());
                    self.state =
                        TxnState::Active(Box::new(self.engine.db.begin_with(engine_isolation(self.level))));
                    self.dirty = false;
                    self.ran = false;
                    self.fresh.clear();
                    self.changes = 0;
                    self.savepoints.clear();
                }
                Ok(Outcome::Done("BEGIN".into()))
            }
            Stmt::SetTransaction(level) => {
                match &mut self.state {
                    TxnState::Active(tx) if !self.ran => {
                        // Nothing ran in the block yet: its transaction starts over at the level.
                        let fresh = self.engine.db.begin_with(engine_isolation(*level));
                        let old = std::mem::replace(tx, Box::new(fresh));
                        old.abort()?;
                        self.level = *level;
                    }
                    TxnState::Active(_) => {
                        return Err(SqlError::new(
                            code::ACTIVE_SQL_TRANSACTION,
                            "SET TRANSACTION ISOLATION LEVEL must be called before any query",
                        ))
                    }
                    _ => self.notices.push("SET TRANSACTION can only be used in transaction blocks".into()),
                }
                Ok(Outcome::Done("SET".into()))
            }
            Stmt::Analyze(tables) => {
                let names = if tables.is_empty() { self.engine.catalog.names() } else { tables.clone() };
                for n in names {
                    let info = self.engine.catalog.get(&n)?;
                    let a = crate::plan::stats::analyze(&info)?;
                    info.stats.set(a);
                }
                Ok(Outcome::Done("ANALYZE".into()))
            }
            Stmt::Commit => match std::mem::replace(&mut self.state, TxnState::Idle) {
                TxnState::Active(tx) => {
                    let r = tx.commit();
                    self.release_gate();
                    r.map_err(SqlError::from)?;
                    Ok(Outcome::Done("COMMIT".into()))
                }
                TxnState::Failed => Ok(Outcome::Done("ROLLBACK".into())),
                TxnState::Idle => {
                    self.notices.push("there is no transaction in progress".into());
                    Ok(Outcome::Done("COMMIT".into()))
                }
            },
            Stmt::Rollback => match std::mem::replace(&mut self.state, TxnState::Idle) {
                TxnState::Active(tx) => {
                    let r = tx.abort();
                    self.release_gate();
                    r.map_err(SqlError::from)?;
                    Ok(Outcome::Done("ROLLBACK".into()))
                }
                TxnState::Failed => Ok(Outcome::Done("ROLLBACK".into())),
                TxnState::Idle => {
                    self.notices.push("there is no transaction in progress".into());
                    Ok(Outcome::Done("ROLLBACK".into()))
                }
            },
            Stmt::Set(name, value) => self.set(name, value.as_deref()),
            Stmt::Show(name) => {
                let v = self.setting(name).ok_or_else(|| {
                    SqlError::new(
                        code::UNDEFINED_OBJECT,
                        format!("unrecognized configuration parameter \"{name}\""),
                    )
                })?;
                Ok(Outcome::Rows(p.columns.clone(), vec![vec![Datum::Text(v)]], "SHOW".into()))
            }
            Stmt::Savepoint(op) => self.savepoint(op),
            Stmt::Checkpoint => {
                self.engine.db.checkpoint()?;
                Ok(Outcome::Done("CHECKPOINT".into()))
            }
            Stmt::NoOp(tag) => Ok(Outcome::Done((*tag).into())),
            Stmt::Copy(plan) => self.start_copy(plan),
            Stmt::PrepareNamed(..) | Stmt::ExecuteNamed(..) | Stmt::Deallocate(_) => {
                self.run_named(&p.stmt, params)
            }
            Stmt::CreateTable(..)
            | Stmt::CreateSequence(..)
            | Stmt::DropSequence(..)
            | Stmt::DropTable(..)
            | Stmt::Truncate(..)
            | Stmt::CreateIndex { .. }
            | Stmt::DropIndex(..)
            | Stmt::Alter(..) => self.ddl(&p.stmt),
            Stmt::CreateTableAs(plan) => self.create_table_as(plan, p),
            Stmt::Query(_) | Stmt::Insert(_) | Stmt::Update(_) | Stmt::Delete(_) | Stmt::Explain(_) => {
                self.dml(p, params)
            }
        }
    }

    /// Starts COPY FROM STDIN: a bulk load into an empty table (see the module documentation)
    /// or inserts in the transaction.
    fn start_copy(&mut self, plan: &CopyPlan) -> SqlResult<Outcome> {
        if !plan.table.meta.fks.is_empty() || !plan.table.meta.checks.is_empty() {
            return Err(SqlError::unsupported(format!(
                "COPY into \"{}\", a table with FOREIGN KEY or CHECK constraints (use INSERT)",
                plan.table.name
            )));
        }
        let in_block = matches!(self.state, TxnState::Active(_));
        let load = if !in_block || self.fresh.contains(&plan.table.name) {
            // The load takes the gate exclusively: this block's shared hold goes first.
            let held = self.holds_gate;
            self.release_gate();
            let load = CopyLoad::start(&self.engine, &plan.table.name);
            if held && load.is_none() {
                self.engine.gate.enter_shared();
                self.holds_gate = true;
            }
            load
        } else {
            None
        };
        let own = match (&load, in_block) {
            (_, true) => {
                self.dirty = true;
                None
            }
            (Some(_), false) => None,
            (None, false) => Some(Box::new(self.engine.db.begin())),
        };
        if own.is_some() {
            self.engine.gate.enter_shared();
        }
        let n = plan.targets.len();
        self.copy = Some(CopyIn {
            plan: plan.clone(),
            own,
            buf: Vec::new(),
            rows: 0,
            line: 0,
            err: None,
            done: false,
            started: Instant::now(),
            row: Vec::new(),
            load,
        });
        Ok(Outcome::CopyIn(n))
    }

    /// SAVEPOINT, RELEASE, ROLLBACK TO. nvmedb's transactions cannot undo part of their
    /// changes, so ROLLBACK TO is done only when it is exact: no statement changed rows since
    /// the savepoint (then there is nothing to undo), or, in a block an error failed, when the
    /// block changed nothing at all and reads without locks (READ COMMITTED): its transaction
    /// starts over, which is all the block was. Otherwise it is refused (0A000) and the block
    /// is as before (a failed block still needs ROLLBACK).
    fn savepoint(&mut self, op: &parse::SavepointOp) -> SqlResult<Outcome> {
        use parse::SavepointOp as Op;
        if matches!(self.state, TxnState::Idle) {
            let what = match op {
                Op::Set(_) => "SAVEPOINT",
                Op::Release(_) => "RELEASE SAVEPOINT",
                Op::RollbackTo(_) => "ROLLBACK TO SAVEPOINT",
            };
            return Err(SqlError::new(
                code::NO_ACTIVE_SQL_TRANSACTION,
                format!("{what} can only be used in transaction blocks"),
            ));
        }
        let find = |name: &str, sp: &[(String, u64)]| {
            sp.iter().rposition(|(n, _)| n == name).ok_or_else(|| {
                SqlError::new(code::INVALID_SAVEPOINT, format!("savepoint \"{name}\" does not exist"))
            })
        };
        match op {
            Op::Set(name) => {
                self.savepoints.push((name.clone(), self.changes));
                Ok(Outcome::Done("SAVEPOINT".into()))
            }
            Op::Release(name) => {
                let i = find(name, &self.savepoints)?;
                self.savepoints.truncate(i);
                Ok(Outcome::Done("RELEASE".into()))
            }
            Op::RollbackTo(name) => {
                let i = find(name, &self.savepoints)?;
                let at = self.savepoints[i].1;
                match self.state {
                    TxnState::Active(_) if self.changes == at => {}
                    TxnState::Failed if self.changes == 0 && self.level == IsolationLevel::ReadCommitted => {
                        self.engine.gate.enter_shared();
                        self.holds_gate = true;
                        self.state =
                            TxnState::Active(Box::new(self.engine.db.begin_with(engine_isolation(self.level))));
                    }
                    _ => {
                        return Err(SqlError::new(
                            code::FEATURE_NOT_SUPPORTED,
                            format!(
                                "ROLLBACK TO SAVEPOINT \"{name}\" after rows were changed since it (or, in a failed \
                                 block, at all) is not supported: nvmedb cannot undo part of a transaction; \
                                 ROLLBACK the whole block"
                            ),
                        ))
                    }
                }
                self.savepoints.truncate(i + 1);
                Ok(Outcome::Done("ROLLBACK".into()))
            }
        }
    }

    fn dml(&mut self, p: &Prepared, params: &[Datum]) -> SqlResult<Outcome> {
        let engine = self.engine.clone();
        let level = self.current_level();
        let work_mem =
            self.setting("work_mem").and_then(|v| parse_memory(&v)).unwrap_or(exec::DEFAULT_WORK_MEM);
        let (settings, user, database) = (&self.settings, &self.user, &self.database);
        let lookup = |n: &str| {
            if n == "transaction_isolation" {
                return Some(level.name().to_string());
            }
            lookup_setting(settings, &engine, n)
        };
        let in_block = matches!(self.state, TxnState::Active(_));
        if !in_block {
            engine.gate.enter_shared();
        }
        let read_only = match &p.stmt {
            Stmt::Query(q) => !q.for_update,
            Stmt::Explain(e) => !e.analyze || matches!(e.stmt.as_ref(), Stmt::Query(q) if !q.for_update),
            _ => false,
        };
        let dirty = &mut self.dirty;
        let changes = &mut self.changes;
        let (cancel, deadline) = (self.cancel.clone(), self.deadline);
        self.ran = true;
        let seqs = SessionSequences { all: &engine.catalog.sequences, current: &self.currvals };
        let result = (|| -> SqlResult<Outcome> {
            let mut own = None;
            let tx: Option<&mut Transaction> = match &mut self.state {
                TxnState::Active(tx) => {
                    *dirty |= !read_only;
                    *changes += u64::from(!read_only);
                    Some(tx)
                }
                _ if read_only => None,
                // A statement outside a block runs at the session's level, as in PostgreSQL.
                _ => Some(own.insert(engine.db.begin_with(engine_isolation(level)))),
            };
            let eval = EvalCtx {
                params,
                settings: &lookup,
                now: now_micros(),
                user,
                database,
                backend_pid: self.backend_pid,
                subs: Vec::new(),
                outer: Vec::new(),
                seqs: Some(&seqs),
            };
            let mut cx = ExecCtx::new(eval, tx);
            cx.work_mem = work_mem;
            cx.interrupt = exec::Interrupt { cancel: Some(cancel), deadline };
            cx.catalog = Some(&engine.catalog);
            let (tag, rows) = exec::run_statement(&mut cx, &p.stmt)?;
            drop(cx);
            if let Some(tx) = own {
                tx.commit()?;
            }
            if p.columns.is_empty() {
                Ok(Outcome::Done(tag))
            } else {
                Ok(Outcome::Rows(p.columns.clone(), rows, tag))
            }
        })();
        if !in_block {
            engine.gate.leave_shared();
        }
        result
    }

    /// Runs a DDL statement alone (see the module documentation).
    fn ddl(&mut self, stmt: &Stmt) -> SqlResult<Outcome> {
        self.ddl_with(|s| s.ddl_locked(stmt))
    }

    /// 0A000 in a transaction block that has already changed rows (DDL runs at once).
    fn refuse_ddl_in_dirty_block(&self) -> SqlResult<()> {
        if matches!(self.state, TxnState::Active(_)) && self.dirty {
            return Err(SqlError::new(
                code::FEATURE_NOT_SUPPORTED,
                "DDL in a transaction block that has already changed rows is not supported (nvmedb runs DDL at once, outside transactions)",
            ));
        }
        Ok(())
    }

    /// Runs `f` alone, holding the gate exclusively (see the module documentation).
    fn ddl_with(&mut self, f: impl FnOnce(&mut Self) -> SqlResult<Outcome>) -> SqlResult<Outcome> {
        self.refuse_ddl_in_dirty_block()?;
        let held = self.holds_gate;
        if held {
            self.engine.gate.leave_shared();
            self.holds_gate = false;
        }
        let engine = self.engine.clone();
        let r = {
            let _x = engine.gate.enter_exclusive(engine.ddl_timeout)?;
            f(self)
        };
        if held {
            self.engine.gate.enter_shared();
            self.holds_gate = true;
        }
        r
    }

    fn ddl_locked(&mut self, stmt: &Stmt) -> SqlResult<Outcome> {
        let e = &self.engine;
        let eng = |err: nvmedb::Error, t: &str| SqlError::from_engine(err, Some(t));
        match stmt {
            Stmt::CreateTable(ct) => {
                let (name, if_not_exists) = (&ct.name, &ct.if_not_exists);
                if e.catalog.exists(name) {
                    if *if_not_exists {
                        self.notices.push(format!("relation \"{name}\" already exists, skipping"));
                        return Ok(Outcome::Done("CREATE TABLE".into()));
                    }
                    return Err(SqlError::new(
                        code::DUPLICATE_TABLE,
                        format!("relation \"{name}\" already exists"),
                    )
                    .with_table(name));
                }
                e.catalog.create_table_parts(ct)?;
                let t = e.db.create_table(name, ct.schema.clone()).map_err(|err| eng(err, name))?;
                e.catalog.put(t)?;
                if matches!(self.state, TxnState::Active(_)) {
                    self.fresh.insert(name.clone());
                }
                Ok(Outcome::Done("CREATE TABLE".into()))
            }
            Stmt::DropTable(names, if_exists) => {
                for n in names {
                    if !e.catalog.exists(n) && !*if_exists {
                        return Err(SqlError::new(
                            code::UNDEFINED_TABLE,
                            format!("table \"{n}\" does not exist"),
                        )
                        .with_table(n));
                    }
                }
                alter::refuse_if_referenced(&e.catalog, names, false)?;
                for n in names {
                    if !e.catalog.exists(n) {
                        self.notices.push(format!("table \"{n}\" does not exist, skipping"));
                        continue;
                    }
                    e.db.drop_table(n).map_err(|err| eng(err, n))?;
                    e.catalog.remove(n);
                    e.catalog.drop_table_parts(n)?;
                }
                Ok(Outcome::Done("DROP TABLE".into()))
            }
            Stmt::CreateSequence(name, def, if_not_exists) => {
                if e.catalog.sequences.exists(name) || e.catalog.exists(name) {
                    if *if_not_exists {
                        self.notices.push(format!("relation \"{name}\" already exists, skipping"));
                        return Ok(Outcome::Done("CREATE SEQUENCE".into()));
                    }
                    return Err(SqlError::new(
                        code::DUPLICATE_TABLE,
                        format!("relation \"{name}\" already exists"),
                    ));
                }
                e.catalog.sequences.create(name, def.clone())?;
                Ok(Outcome::Done("CREATE SEQUENCE".into()))
            }
            Stmt::DropSequence(names, if_exists) => {
                for n in names {
                    if !e.catalog.sequences.exists(n) && !*if_exists {
                        return Err(SqlError::new(
                            code::UNDEFINED_TABLE,
                            format!("sequence \"{n}\" does not exist"),
                        ));
                    }
                }
                for n in names {
                    if !e.catalog.sequences.exists(n) {
                        self.notices.push(format!("sequence \"{n}\" does not exist, skipping"));
                        continue;
                    }
                    e.catalog.sequences.drop_sequence(n)?;
                }
                Ok(Outcome::Done("DROP SEQUENCE".into()))
            }
            Stmt::Truncate(names) => {
                alter::refuse_if_referenced(&e.catalog, names, true)?;
                for n in names {
                    let info = e.catalog.get(n)?;
                    let t =
                        e.db.rebuild_table(n, info.table.schema().clone(), |_, _| Ok(()))
                            .map_err(|err| eng(err, n))?;
                    e.catalog.put(t)?;
                    if matches!(self.state, TxnState::Active(_)) {
                        self.fresh.insert(n.clone());
                    }
                }
                Ok(Outcome::Done("TRUNCATE TABLE".into()))
            }
            Stmt::CreateIndex { name, table, columns, unique, if_not_exists } => {
                let info = e.catalog.get(table)?;
                if info.indexes.iter().any(|(n, _, _)| n == name)
                    || info.composite.iter().any(|k| k.def.name == *name)
                {
                    if *if_not_exists {
                        self.notices.push(format!("relation \"{name}\" already exists, skipping"));
                        return Ok(Outcome::Done("CREATE INDEX".into()));
                    }
                    return Err(SqlError::new(
                        code::DUPLICATE_TABLE,
                        format!("relation \"{name}\" already exists"),
                    ));
                }
                let s = info.table.schema().clone();
                let t = if let [column] = columns.as_slice() {
                    let s =
                        if *unique { s.with_unique_index(name, column) } else { s.with_index(name, column) }
                            .map_err(|err| eng(err, table))?;
                    rebuild_copy(&e.db, table, s, None)?
                } else {
                    // A hidden column holding the encoded key, filled from each row as the table
                    // is copied, with an index on it.
                    let (s, def) = crate::meta::add_key_column(s, name, columns, *unique)
                        .map_err(|err| eng(err, table))?;
                    let mut meta = info.meta.clone();
                    meta.keys.push(def.clone());
                    let key_cols: Vec<usize> =
                        columns.iter().map(|c| s.column_index(c).expect("bound")).collect();
                    let hidden = s.column_index(&def.column).expect("just added");
                    let schema = s.clone();
                    let fill = move |row: &mut [nvmedb::Value]| {
                        row[hidden] = crate::meta::encode_key(&schema, &key_cols, row)
                            .map_or(nvmedb::Value::Null, nvmedb::Value::Bytes);
                    };
                    let from = (0..info.columns.len())
                        .map(reshape::Source::Old)
                        .chain(std::iter::once(reshape::Source::Const(nvmedb::Value::Null)))
                        .collect();
                    self.reshape(&info, s, from, meta, Some(Box::new(fill)))?;
                    return Ok(Outcome::Done("CREATE INDEX".into()));
                };
                e.catalog.put(t)?;
                Ok(Outcome::Done("CREATE INDEX".into()))
            }
            Stmt::Alter(table, op) => self.alter(table, op),
            Stmt::DropIndex(names, if_exists) => self.drop_indexes(names, *if_exists),
            _ => unreachable!("ddl() runs DDL statements"),
        }
    }

    /// COPY data from the client (any split of the stream).
    pub fn copy_data(&mut self, data: &[u8]) {
        let Some(c) = &mut self.copy else { return };
        if c.err.is_some() || c.done {
            return;
        }
        c.buf.extend_from_slice(data);
        let engine = self.engine.clone();
        let mut tx: Option<&mut Transaction> = match (&mut c.own, &mut self.state) {
            _ if c.load.is_some() => None,
            (Some(own), _) => Some(own),
            (None, TxnState::Active(tx)) => Some(tx),
            (None, _) => {
                c.err = Some(SqlError::new(code::INTERNAL_ERROR, "COPY lost its transaction"));
                return;
            }
        };
        let mut start = 0;
        loop {
            let r = if c.plan.binary {
                match copy_binary::next(&c.plan, &c.buf[start..], c.line == 0, &mut c.row) {
                    Ok(copy_binary::Step::More) => break,
                    Ok(copy_binary::Step::Header(n)) => {
                        start += n;
                        c.line += 1;
                        continue;
                    }
                    Ok(copy_binary::Step::End(n)) => {
                        start += n;
                        c.done = true;
                        break;
                    }
                    Ok(copy_binary::Step::Row(n)) => {
                        start += n;
                        c.line += 1;
                        Ok(())
                    }
                    Err(e) => {
                        c.line += 1;
                        Err(e)
                    }
                }
            } else {
                let Some(nl) = c.buf[start..].iter().position(|&b| b == b'\n') else { break };
                let line = &c.buf[start..start + nl];
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                start += nl + 1;
                c.line += 1;
                if line == b"\\." {
                    c.done = true;
                    break;
                }
                copy_row(&c.plan, line, &mut c.row)
            };
            let r = r.and_then(|()| match (&mut c.load, &mut tx) {
                (Some(load), _) => load.push(Ok(c.row.clone())),
                (None, Some(tx)) => tx
                    .insert(&c.plan.table.table, &c.row)
                    .map_err(|e| SqlError::from_engine(e, Some(&c.plan.table.name))),
                (None, None) => unreachable!("a COPY without a load has a transaction"),
            });
            if let Err(e) = r {
                c.err = Some(e.with_detail(format!("COPY {}, line {}", c.plan.table.name, c.line)));
                break;
            }
            c.rows += 1;
            if c.rows % 1_000_000 == 0 {
                eprintln!(
                    "nvmedb: COPY {}: {} rows ({:.0} rows/s)",
                    c.plan.table.name,
                    c.rows,
                    c.rows as f64 / c.started.elapsed().as_secs_f64()
                );
            }
        }
        c.buf.drain(..start);
        let _ = engine;
    }

    /// The client finished its COPY data: commits (outside a block) and reports `COPY n`.
    pub fn copy_done(&mut self) -> SqlResult<Outcome> {
        let Some(mut c) = self.copy.take() else {
            return Err(SqlError::new(code::PROTOCOL_VIOLATION, "no COPY in progress"));
        };
        if c.err.is_none() && !c.buf.is_empty() && !c.done {
            // A last line without its newline.
            let mut last = std::mem::take(&mut c.buf);
            last.push(b'\n');
            self.copy = Some(c);
            self.copy_data(&last);
            c = self.copy.take().expect("put back above");
        }
        let own = c.own.take();
        if own.is_some() {
            self.engine.gate.leave_shared();
        }
        if let Some(load) = c.load.take() {
            let r = load.finish(c.err.is_some());
            self.rejoin_gate();
            if let Err(e) = c.err.map_or(r, Err) {
                self.fail_block();
                return Err(e);
            }
            return Ok(Outcome::Done(format!("COPY {}", c.rows)));
        }
        if let Some(e) = c.err {
            drop(own); // rolls back
            self.fail_block();
            return Err(e);
        }
        if let Some(tx) = own {
            tx.commit()?;
        }
        Ok(Outcome::Done(format!("COPY {}", c.rows)))
    }

    /// The client abandoned its COPY.
    pub fn copy_fail(&mut self, why: &str) -> SqlError {
        if let Some(c) = self.copy.take() {
            if c.own.is_some() {
                self.engine.gate.leave_shared();
            }
            if let Some(load) = c.load {
                let _ = load.finish(true);
                self.rejoin_gate();
            }
        }
        self.fail_block();
        SqlError::new("57014", format!("COPY from stdin failed: {why}"))
    }

    /// True while a COPY FROM STDIN is receiving data.
    pub fn in_copy(&self) -> bool {
        self.copy.is_some()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // A client gone mid-transaction: its transaction rolls back when dropped.
        if let Some(c) = self.copy.take() {
            if c.own.is_some() {
                self.engine.gate.leave_shared();
            }
            if let Some(load) = c.load {
                let _ = load.finish(true);
            }
        }
        self.state = TxnState::Idle;
        self.release_gate();
    }
}

/// The engine isolation a SQL level runs as (REPEATABLE READ runs as SERIALIZABLE).
fn engine_isolation(level: IsolationLevel) -> nvmedb::Isolation {
    match level {
        IsolationLevel::ReadCommitted => nvmedb::Isolation::ReadCommitted,
        IsolationLevel::RepeatableRead | IsolationLevel::Serializable => nvmedb::Isolation::Serializable,
    }
}

fn failed_block() -> SqlError {
    SqlError::new(
        code::IN_FAILED_SQL_TRANSACTION,
        "current transaction is aborted, commands ignored until end of transaction block",
    )
}

/// Unescapes one field of the COPY text format (borrowed when it has no backslash, as most
/// fields have none).
fn unescape(f: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if !f.contains(&b'\\') {
        return std::borrow::Cow::Borrowed(f);
    }
    let mut out = Vec::with_capacity(f.len());
    let mut i = 0;
    while i < f.len() {
        if f[i] == b'\\' && i + 1 < f.len() {
            i += 1;
            let c = f[i];
            match c {
                b'b' => out.push(8),
                b'f' => out.push(12),
                b'n' => out.push(b'\n'),
                b'r' => out.push(b'\r'),
                b't' => out.push(b'\t'),
                b'v' => out.push(11),
                b'0'..=b'7' => {
                    let mut v = 0u32;
                    let mut n = 0;
                    while n < 3 && i < f.len() && (b'0'..=b'7').contains(&f[i]) {
                        v = v * 8 + u32::from(f[i] - b'0');
                        i += 1;
                        n += 1;
                    }
                    out.push(v as u8);
                    continue;
                }
                b'x' if i + 1 < f.len() && f[i + 1].is_ascii_hexdigit() => {
                    let mut v = 0u32;
                    let mut n = 0;
                    i += 1;
                    while n < 2 && i < f.len() && f[i].is_ascii_hexdigit() {
                        v = v * 16 + (f[i] as char).to_digit(16).expect("hex digit");
                        i += 1;
                        n += 1;
                    }
                    out.push(v as u8);
                    continue;
                }
                other => out.push(other),
            }
            i += 1;
        } else {
            out.push(f[i]);
            i += 1;
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Decodes one line of COPY text into `row` (a buffer reused from line to line).
fn copy_row(plan: &CopyPlan, line: &[u8], row: &mut Vec<nvmedb::Value>) -> SqlResult<()> {
    let t = &plan.table;
    row.clear();
    row.resize(t.columns.len(), nvmedb::Value::Null);
    if t.hidden_rowid {
        row[0] = nvmedb::Value::Int(t.next_rowid());
    }
    let mut fields = line.split(|&b| b == plan.delimiter);
    for &col in &plan.targets {
        let c = &t.columns[col];
        let Some(f) = fields.next() else {
            return Err(SqlError::new(
                code::BAD_COPY_FILE_FORMAT,
                format!("missing data for column \"{}\"", c.name),
            ));
        };
        let d = if f == plan.null.as_bytes() {
            Datum::Null
        } else {
            let s = unescape(f);
            let s = std::str::from_utf8(&s).map_err(|_| {
                SqlError::new(code::BAD_COPY_FILE_FORMAT, format!("invalid UTF-8 in column \"{}\"", c.name))
            })?;
            match c.ty {
                SqlType::Text | SqlType::Varchar(_) | SqlType::Bpchar(_) => Datum::Text(s.to_string()),
                ty => Datum::parse(s, ty).map_err(|e| e.with_column(&c.name))?,
            }
        };
        if d.is_null() && !c.nullable {
            return Err(crate::exec::modify::not_null_violation(&t.name, &c.name));
        }
        row[col] = d.to_value(c.ty, &c.name)?;
    }
    if fields.next().is_some() {
        return Err(SqlError::new(code::BAD_COPY_FILE_FORMAT, "extra data after last expected column"));
    }
    Ok(())
}
