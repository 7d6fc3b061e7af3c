//! The PostgreSQL v3 wire-protocol server.
//!
//! Owns: accepting connections, one thread per connection (engine calls block on locks and
//! on the group commit; a connection's thread runs its own single-threaded runtime, so one
//! waiting client never stalls another), the pgwire handlers (startup with trust or
//! SCRAM-SHA-256, simple and extended query, COPY FROM STDIN), the encoding of results, and
//! shutdown (stop accepting, close connections — their open transactions roll back —, then
//! checkpoint). Replies are buffered and flushed once per Sync or simple query, so a
//! pipelined Bind/Execute/Sync costs one write.
//!
//! A malformed message ends its own connection only (pgwire's decoder fails that socket).

use crate::error::{code, SqlError, SqlResult};
use crate::plan::{OutCol, Prepared};
use crate::session::{Engine, Outcome, Session, TxStatus};
use crate::types::{Datum, SqlType};
use async_trait::async_trait;
use futures::sink::{Sink, SinkExt};
use nvmedb::util::sync::MutexExt;
use pgwire::api::auth::sasl::scram::ScramAuth;
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::{
    finish_authentication, protocol_negotiation, save_startup_parameters_to_metadata,
    ServerParameterProvider, StartupHandler,
};
use pgwire::api::copy::CopyHandler;
use pgwire::api::portal::Format;
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{FieldInfo, Response};
use pgwire::api::stmt::QueryParser;
use pgwire::api::{ClientInfo, ClientPortalStore, PgWireConnectionState, PgWireServerHandlers, Type};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::copy::{CopyData, CopyDone, CopyFail, CopyInResponse};
use pgwire::messages::data::{DataRow, FieldDescription, NoData, ParameterDescription, RowDescription};
use pgwire::messages::extendedquery::{
    Bind, BindComplete, Close, CloseComplete, Describe, Execute, Flush, Parse, ParseComplete,
    PortalSuspended, Sync as PgSync, TARGET_TYPE_BYTE_PORTAL, TARGET_TYPE_BYTE_STATEMENT,
};
use pgwire::messages::response::{
    CommandComplete, EmptyQueryResponse, NoticeResponse, ReadyForQuery, TransactionStatus,
};
use pgwire::messages::simplequery::Query;
use pgwire::messages::startup::SecretKey;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use std::collections::{HashMap, VecDeque};
use std::fmt::Debug;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

mod cancel;
mod scram;
use scram::ScramSource;

/// How clients authenticate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    /// Anyone who can reach the port (the default: the server listens on loopback).
    Trust,
    /// SCRAM-SHA-256 against a password file: lines `user:password`, or one line with just a
    /// password for every user.
    Scram {
        /// The password file.
        password_file: PathBuf,
    },
}

/// Configuration of [`serve`] and [`Server::start`].
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Database directory (created if missing).
    pub data: PathBuf,
    /// Address to listen on (`127.0.0.1:5432`; port 0 picks a free port).
    pub listen: String,
    /// Authentication.
    pub auth: Auth,
    /// Connections served at once; more are refused with 53300.
    pub max_connections: usize,
    /// Engine options (buffer sizes, log, lock timeout).
    pub options: nvmedb::Options,
    /// Address of the Prometheus metrics endpoint (`GET /metrics`), if any (e.g.
    /// `127.0.0.1:9187`; port 0 picks a free port).
    pub metrics: Option<String>,
    /// The log archive: every finished log segment is copied there
    /// (`nvmedb::backup::archive`).
    pub archive: Option<PathBuf>,
    /// The server certificate and key: clients may then ask for TLS (`sslmode=require`).
    pub tls: Option<crate::tls::TlsFiles>,
    /// Niceness of the session threads (0: the process's priority). A standby serving reads
    /// runs its sessions below its log receipt and apply, whose acknowledgements the
    /// primary's commits wait for.
    pub session_nice: i32,
}

/// How long a statement waits for a row lock before it fails with 55P03 (the server's
/// default; the embedded engine's is shorter). PostgreSQL clients expect a lock wait to last
/// until the lock is free (PostgreSQL's `lock_timeout` is 0), and pgbench's `--max-tries`
/// retries deadlocks but not lock timeouts: with 20 clients queued on a few pgbench branch
/// rows, each holder keeping its lock through a durable commit, a 1 s wait is not rare on a
/// busy machine. Deadlocks are still detected at once.
pub const DEFAULT_LOCK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

impl ServerConfig {
    /// Defaults: loopback port 5432, trust, 100 connections, `Options::default()` except a
    /// lock timeout of [`DEFAULT_LOCK_TIMEOUT`].
    pub fn new(data: impl Into<PathBuf>) -> Self {
        let mut options = nvmedb::Options::default();
        options.lock_options.lock_timeout = DEFAULT_LOCK_TIMEOUT;
        Self {
            data: data.into(),
            listen: "127.0.0.1:5432".into(),
            auth: Auth::Trust,
            max_connections: 100,
            options,
            metrics: None,
            archive: None,
            tls: None,
            session_nice: 0,
        }
    }
}

/// Why the server could not start or stopped with an error.
#[derive(Debug)]
pub enum ServeError {
    /// The database could not be opened or closed.
    Engine(nvmedb::Error),
    /// The SQL layer failed to read the catalog.
    Sql(SqlError),
    /// Binding the address or another socket operation failed.
    Io(String, std::io::Error),
    /// The password file is unusable.
    Config(String),
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServeError::Engine(e) => write!(f, "database: {e}"),
            ServeError::Sql(e) => write!(f, "catalog: {e}"),
            ServeError::Io(what, e) => write!(f, "{what}: {e}"),
            ServeError::Config(m) => write!(f, "configuration: {m}"),
        }
    }
}

impl std::error::Error for ServeError {}

fn user_error(e: SqlError) -> PgWireError {
    PgWireError::UserError(Box::new(error_info(e, "ERROR")))
}

fn error_info(e: SqlError, severity: &str) -> ErrorInfo {
    let mut info = ErrorInfo::new(severity.to_string(), e.code.to_string(), e.message);
    info.detail = e.detail;
    info.table = e.table;
    info.column = e.column;
    info
}

fn notice(text: String) -> PgWireBackendMessage {
    PgWireBackendMessage::NoticeResponse(NoticeResponse::from(ErrorInfo::new(
        "NOTICE".into(),
        "00000".into(),
        text,
    )))
}

fn tx_status(s: TxStatus) -> TransactionStatus {
    match s {
        TxStatus::Idle => TransactionStatus::Idle,
        TxStatus::InBlock => TransactionStatus::Transaction,
        TxStatus::Failed => TransactionStatus::Error,
    }
}

fn row_description(cols: &[OutCol], formats: &dyn Fn(usize) -> i16) -> RowDescription {
    RowDescription::new(
        cols.iter()
            .enumerate()
            .map(|(i, c)| {
                FieldDescription::new(
                    c.name.clone(),
                    0,
                    0,
                    c.ty.oid(),
                    c.ty.type_size(),
                    c.ty.type_modifier(),
                    formats(i),
                )
            })
            .collect(),
    )
}

fn data_row(cols: &[OutCol], row: &[Datum], binary: &dyn Fn(usize) -> bool) -> SqlResult<DataRow> {
    let mut buf = Vec::with_capacity(16 * row.len());
    for (i, d) in row.iter().enumerate() {
        if d.is_null() {
            buf.extend_from_slice(&(-1i32).to_be_bytes());
            continue;
        }
        let at = buf.len();
        buf.extend_from_slice(&[0; 4]);
        let ty = cols.get(i).map_or(SqlType::Text, |c| c.ty);
        if binary(i) {
            d.write_binary(ty, &mut buf)?;
        } else {
            d.write_text(ty, &mut buf);
        }
        let len = (buf.len() - at - 4) as i32;
        buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
    }
    Ok(DataRow::new(bytes::BytesMut::from(&buf[..]), row.len() as i16))
}

/// A bound portal of the extended protocol.
struct Portal {
    stmt: Arc<Prepared>,
    params: Vec<Datum>,
    formats: Format,
    /// Rows left over by an Execute with a row limit.
    pending: Option<(VecDeque<Vec<Datum>>, String)>,
}

/// Settings SHOW reports for a snapshot (its LSN and lag).
pub type SnapshotSettings = Vec<(&'static str, String)>;

/// Where a server serving reads of a standby gets the engine each statement runs on
/// ([`crate::standby::StandbyReads`]).
pub trait ReadSnapshots: Send + Sync {
    /// The engine of a snapshot holding at least LSN `at_least`, and the settings SHOW then
    /// reports.
    fn engine(&self, at_least: u64) -> SqlResult<(Arc<Engine>, SnapshotSettings)>;
}

/// One connection's state behind its handlers.
struct ConnState {
    session: Session,
    portals: HashMap<String, Portal>,
}

/// Shared across connections.
struct Shared {
    engine: Arc<Engine>,
    /// A standby serving reads: idle sessions move to its latest snapshot before each message.
    reads: Option<Arc<dyn ReadSnapshots>>,
    active: AtomicUsize,
    max: usize,
    next_pid: AtomicI32,
    scram: Option<Arc<ScramSource>>,
    shutting_down: AtomicBool,
    conns: Mutex<HashMap<u64, TcpStream>>,
    next_conn: AtomicU64,
    tls: Option<pgwire::tokio::TlsAcceptor>,
    cancels: cancel::Cancels,
    session_nice: i32,
}

/// The per-connection handler (every pgwire role).
struct Conn {
    shared: Arc<Shared>,
    state: Mutex<Option<ConnState>>,
    refuse: Option<SqlError>,
    /// The session's cancel flag ([`cancel`]).
    cancel: Arc<AtomicBool>,
}

impl Conn {
    fn with<R>(&self, client: &dyn ClientInfoLike, f: impl FnOnce(&mut ConnState) -> R) -> R {
        let mut g = self.state.locked();
        let st = g.get_or_insert_with(|| {
            let (pid, key) = client.key();
            self.shared.cancels.register(pid, key, self.cancel.clone());
            ConnState {
                session: Session::new(self.shared.engine.clone(), &client.user(), &client.database())
                    .with_backend_pid(pid)
                    .with_cancel(self.cancel.clone()),
                portals: HashMap::new(),
            }
        });
        if let Some(reads) = &self.shared.reads {
            if st.session.status() == TxStatus::Idle {
                let min =
                    st.session.setting("nvmedb.min_lsn").and_then(|v| v.trim().parse().ok()).unwrap_or(0);
                match reads.engine(min) {
                    Ok((engine, settings)) => {
                        st.session.use_engine(engine, &settings);
                    }
                    Err(e) => {
                        return self.with_error(st, e, f);
                    }
                }
            }
        }
        f(st)
    }
}

impl Conn {
    /// Runs `f` after a standby could not give the snapshot the session asked for: its next
    /// statement fails with that error instead of running.
    fn with_error<R>(&self, st: &mut ConnState, e: SqlError, f: impl FnOnce(&mut ConnState) -> R) -> R {
        st.session.fail_next(e);
        f(st)
    }
}

/// The startup metadata a session needs.
trait ClientInfoLike {
    fn user(&self) -> String;
    fn database(&self) -> String;
    fn key(&self) -> (i32, SecretKey);
}

impl<C: ClientInfo> ClientInfoLike for C {
    fn user(&self) -> String {
        self.metadata().get(pgwire::api::METADATA_USER).cloned().unwrap_or_else(|| "nvmedb".into())
    }
    fn database(&self) -> String {
        let u = self.user();
        self.metadata().get(pgwire::api::METADATA_DATABASE).cloned().unwrap_or(u)
    }
    fn key(&self) -> (i32, SecretKey) {
        self.pid_and_secret_key()
    }
}

/// Server parameters sent at startup.
#[derive(Debug)]
struct Params {
    shared_buffers: String,
}

impl ServerParameterProvider for Params {
    fn server_parameters<C>(&self, client: &C) -> Option<HashMap<String, String>>
    where
        C: ClientInfo,
    {
        let mut p = HashMap::new();
        for (k, v) in [
            ("server_version", format!("15.0 (nvmedb {})", env!("CARGO_PKG_VERSION"))),
            ("server_encoding", "UTF8".into()),
            ("client_encoding", "UTF8".into()),
            ("DateStyle", "ISO, MDY".into()),
            ("IntervalStyle", "postgres".into()),
            ("TimeZone", "UTC".into()),
            ("integer_datetimes", "on".into()),
            ("standard_conforming_strings", "on".into()),
            ("is_superuser", "on".into()),
            ("in_hot_standby", "off".into()),
            ("default_transaction_read_only", "off".into()),
            ("shared_buffers", self.shared_buffers.clone()),
        ] {
            p.insert(k.to_string(), v);
        }
        p.insert("session_authorization".into(), client.user());
        if let Some(a) = client.metadata().get(pgwire::api::METADATA_APPLICATION_NAME) {
            p.insert("application_name".into(), a.clone());
        }
        Some(p)
    }
}

/// Startup: connection limit, then trust or SCRAM.
struct Startup {
    conn: Arc<Conn>,
    params: Arc<Params>,
    scram: Option<SASLAuthStartupHandler<Params>>,
}

#[async_trait]
impl StartupHandler for Startup {
    async fn on_startup<C>(&self, client: &mut C, message: PgWireFrontendMessage) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if let Some(e) = &self.conn.refuse {
            return Err(PgWireError::UserError(Box::new(error_info(e.clone(), "FATAL"))));
        }
        if let Some(s) = &self.scram {
            return s.on_startup(client, message).await;
        }
        if let PgWireFrontendMessage::Startup(ref startup) = message {
            protocol_negotiation(client, startup).await?;
            save_startup_parameters_to_metadata(client, startup);
            let pid = self.conn.shared.next_pid.fetch_add(1, Ordering::Relaxed);
            client.set_pid_and_secret_key(pid, cancel::secret_key(pid));
            finish_authentication(client, self.params.as_ref()).await?;
        }
        Ok(())
    }
}

/// The per-connection handler set given to pgwire.
struct Handlers {
    conn: Arc<Conn>,
    startup: Arc<Startup>,
}

impl PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.conn.clone()
    }
    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        self.conn.clone()
    }
    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        self.startup.clone()
    }
    fn copy_handler(&self) -> Arc<impl CopyHandler> {
        self.conn.clone()
    }
    fn cancel_handler(&self) -> Arc<impl pgwire::api::cancel::CancelHandler> {
        Arc::new(cancel::Canceller(self.conn.shared.clone()))
    }
}

/// Appends the messages of one outcome.
fn outcome_messages(
    out: &mut Vec<PgWireBackendMessage>,
    o: Outcome,
    describe: bool,
    binary: &dyn Fn(usize) -> bool,
    max_rows: usize,
) -> SqlResult<Option<(VecDeque<Vec<Datum>>, String)>> {
    match o {
        Outcome::Empty => out.push(PgWireBackendMessage::EmptyQueryResponse(EmptyQueryResponse::new())),
        Outcome::Done(tag) => out.push(PgWireBackendMessage::CommandComplete(CommandComplete::new(tag))),
        Outcome::Rows(cols, rows, tag) => {
            if describe {
                let fmt = |i| i16::from(binary(i));
                out.push(PgWireBackendMessage::RowDescription(row_description(&cols, &fmt)));
            }
            let mut rows: VecDeque<Vec<Datum>> = rows.into();
            let mut sent = 0;
            while let Some(r) = rows.pop_front() {
                out.push(PgWireBackendMessage::DataRow(data_row(&cols, &r, binary)?));
                sent += 1;
                if max_rows > 0 && sent == max_rows && !rows.is_empty() {
                    out.push(PgWireBackendMessage::PortalSuspended(PortalSuspended::new()));
                    return Ok(Some((rows, tag)));
                }
            }
            let tag = if tag.starts_with("SELECT") { format!("SELECT {sent}") } else { tag };
            out.push(PgWireBackendMessage::CommandComplete(CommandComplete::new(tag)));
        }
        Outcome::CopyIn(n) => {
            out.push(PgWireBackendMessage::CopyInResponse(CopyInResponse::new(0, n as i16, vec![0; n])));
        }
    }
    Ok(None)
}

async fn send_all<C>(client: &mut C, msgs: Vec<PgWireBackendMessage>, flush: bool) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    for m in msgs {
        client.feed(m).await?;
    }
    if flush {
        client.flush().await?;
    }
    Ok(())
}

#[async_trait]
impl SimpleQueryHandler for Conn {
    async fn on_query<C>(&self, client: &mut C, query: Query) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: pgwire::api::store::PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let (msgs, status, copy) = self.with(client, |st| {
            let mut msgs = Vec::new();
            let mut copy = false;
            for r in st.session.simple_query(&query.query) {
                for n in st.session.take_notices() {
                    msgs.push(notice(n));
                }
                self.shared.engine.sql_stats.statement();
                match r.and_then(|o| {
                    copy |= matches!(o, Outcome::CopyIn(_));
                    outcome_messages(&mut msgs, o, true, &|_| false, 0)
                }) {
                    Ok(_) => {}
                    Err(e) => {
                        self.shared.engine.sql_stats.error(e.code);
                        msgs.push(PgWireBackendMessage::ErrorResponse(error_info(e, "ERROR").into()))
                    }
                }
            }
            (msgs, st.session.status(), copy)
        });
        client.set_transaction_status(tx_status(status));
        if copy {
            client.set_state(PgWireConnectionState::CopyInProgress(false));
            return send_all(client, msgs, true).await;
        }
        let mut msgs = msgs;
        msgs.push(PgWireBackendMessage::ReadyForQuery(ReadyForQuery::new(tx_status(status))));
        client.set_state(PgWireConnectionState::ReadyForQuery);
        send_all(client, msgs, true).await
    }

    async fn do_query<C>(&self, _client: &mut C, _query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: pgwire::api::store::PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        unreachable!("on_query handles simple queries itself")
    }
}

/// The extended protocol parses through [`Session::prepare`]; pgwire's parser is unused.
#[derive(Debug)]
struct NoParser;

#[async_trait]
impl QueryParser for NoParser {
    type Statement = Arc<Prepared>;

    async fn parse_sql<C>(
        &self,
        _client: &C,
        _sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<Self::Statement>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        Err(PgWireError::ApiError("statements are parsed by the session".into()))
    }

    fn get_parameter_types(&self, _stmt: &Self::Statement) -> PgWireResult<Vec<Type>> {
        Ok(vec![])
    }

    fn get_result_schema(
        &self,
        _stmt: &Self::Statement,
        _f: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        Ok(vec![])
    }
}

fn format_of(codes: &[i16]) -> Format {
    match codes {
        [] => Format::UnifiedText,
        [c] => Format::from(*c),
        cs => Format::Individual(cs.to_vec()),
    }
}

fn is_binary(f: &Format, i: usize) -> bool {
    match f {
        Format::UnifiedText => false,
        Format::UnifiedBinary => true,
        Format::Individual(v) => v.get(i).copied() == Some(1),
    }
}

impl Conn {
    /// Runs `f` on the connection state; an error fails the session's transaction block and
    /// carries the resulting status to pgwire (which answers and waits for Sync).
    fn extended<C: ClientInfo, R>(
        &self,
        client: &mut C,
        f: impl FnOnce(&mut ConnState) -> SqlResult<R>,
    ) -> PgWireResult<(R, Vec<String>)> {
        let (r, status, notices) = self.with(client, |st| {
            let r = f(st);
            if let Err(e) = &r {
                self.shared.engine.sql_stats.error(e.code);
                st.session.fail_current_block();
            }
            (r, st.session.status(), st.session.take_notices())
        });
        client.set_transaction_status(tx_status(status));
        r.map(|v| (v, notices)).map_err(user_error)
    }
}

#[async_trait]
impl ExtendedQueryHandler for Conn {
    type Statement = Arc<Prepared>;
    type QueryParser = NoParser;

    fn query_parser(&self) -> Arc<Self::QueryParser> {
        Arc::new(NoParser)
    }

    async fn on_parse<C>(&self, client: &mut C, message: Parse) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: pgwire::api::store::PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let types: Vec<Option<SqlType>> = message.type_oids.iter().map(|&o| SqlType::from_oid(o)).collect();
        let name = message.name.clone().unwrap_or_default();
        self.extended(client, |st| {
            let parts = crate::parse::split(&message.query);
            if parts.len() > 1 {
                return Err(SqlError::syntax("cannot insert multiple commands into a prepared statement"));
            }
            let p = st.session.prepare(parts.first().copied().unwrap_or(""), &types)?;
            st.session.define_statement(&name, p);
            Ok(())
        })?;
        client.feed(PgWireBackendMessage::ParseComplete(ParseComplete::new())).await?;
        Ok(())
    }

    async fn on_bind<C>(&self, client: &mut C, message: Bind) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: pgwire::api::store::PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let stmt_name = message.statement_name.clone().unwrap_or_default();
        let portal_name = message.portal_name.clone().unwrap_or_default();
        self.extended(client, |st| {
            let stmt = st.session.statement(&stmt_name)?;
            let pf = format_of(&message.parameter_format_codes);
            let raw: Vec<Option<&[u8]>> = message.parameters.iter().map(|p| p.as_deref()).collect();
            let params = Session::decode_params(&stmt, &raw, |i| is_binary(&pf, i))?;
            let formats = format_of(&message.result_column_format_codes);
            st.portals.insert(portal_name, Portal { stmt, params, formats, pending: None });
            Ok(())
        })?;
        client.feed(PgWireBackendMessage::BindComplete(BindComplete::new())).await?;
        Ok(())
    }

    async fn on_execute<C>(&self, client: &mut C, message: Execute) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: pgwire::api::store::PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.name.clone().unwrap_or_default();
        let max_rows = message.max_rows.max(0) as usize;
        let ((msgs, copy), notices) = self.extended(client, |st| {
            let portal = st.portals.get_mut(&name).ok_or_else(|| {
                SqlError::new(code::INVALID_SQL_STATEMENT_NAME, format!("portal \"{name}\" does not exist"))
            })?;
            let mut msgs = Vec::new();
            let formats = portal.formats.clone();
            let bin = |i| is_binary(&formats, i);
            let outcome = match portal.pending.take() {
                Some((rows, tag)) => Outcome::Rows(portal.stmt.columns.clone(), rows.into(), tag),
                None => {
                    self.shared.engine.sql_stats.statement();
                    st.session.execute(&portal.stmt, &portal.params)?
                }
            };
            let copy = matches!(outcome, Outcome::CopyIn(_));
            let portal = st.portals.get_mut(&name).expect("looked up above");
            portal.pending = outcome_messages(&mut msgs, outcome, false, &bin, max_rows)?;
            Ok((msgs, copy))
        })?;
        let mut all: Vec<PgWireBackendMessage> = notices.into_iter().map(notice).collect();
        all.extend(msgs);
        if copy {
            client.set_state(PgWireConnectionState::CopyInProgress(true));
            return send_all(client, all, true).await;
        }
        send_all(client, all, false).await
    }

    async fn on_describe<C>(&self, client: &mut C, message: Describe) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: pgwire::api::store::PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.name.clone().unwrap_or_default();
        let (msgs, _) = self.extended(client, |st| {
            let mut msgs = Vec::new();
            match message.target_type {
                TARGET_TYPE_BYTE_STATEMENT => {
                    let s = st.session.statement(&name)?;
                    msgs.push(PgWireBackendMessage::ParameterDescription(ParameterDescription::new(
                        s.params.iter().map(|t| t.oid()).collect(),
                    )));
                    if s.columns.is_empty() {
                        msgs.push(PgWireBackendMessage::NoData(NoData::new()));
                    } else {
                        msgs.push(PgWireBackendMessage::RowDescription(row_description(&s.columns, &|_| 0)));
                    }
                }
                TARGET_TYPE_BYTE_PORTAL => {
                    let p = st.portals.get(&name).ok_or_else(|| {
                        SqlError::new(
                            code::INVALID_SQL_STATEMENT_NAME,
                            format!("portal \"{name}\" does not exist"),
                        )
                    })?;
                    if p.stmt.columns.is_empty() {
                        msgs.push(PgWireBackendMessage::NoData(NoData::new()));
                    } else {
                        let f = p.formats.clone();
                        msgs.push(PgWireBackendMessage::RowDescription(row_description(
                            &p.stmt.columns,
                            &|i| i16::from(is_binary(&f, i)),
                        )));
                    }
                }
                t => {
                    return Err(SqlError::new(
                        code::PROTOCOL_VIOLATION,
                        format!("invalid Describe target {t}"),
                    ))
                }
            }
            Ok(msgs)
        })?;
        send_all(client, msgs, false).await
    }

    async fn on_flush<C>(&self, client: &mut C, _message: Flush) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        client.flush().await?;
        Ok(())
    }

    async fn on_sync<C>(&self, client: &mut C, _message: PgSync) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: pgwire::api::store::PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let status = self.with(client, |st| {
            st.portals.remove("");
            st.session.status()
        });
        client.set_transaction_status(tx_status(status));
        client.feed(PgWireBackendMessage::ReadyForQuery(ReadyForQuery::new(tx_status(status)))).await?;
        client.flush().await?;
        Ok(())
    }

    async fn on_close<C>(&self, client: &mut C, message: Close) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: pgwire::api::store::PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.name.clone().unwrap_or_default();
        self.with(client, |st| match message.target_type {
            TARGET_TYPE_BYTE_STATEMENT => {
                st.session.close_statement(&name);
            }
            TARGET_TYPE_BYTE_PORTAL => {
                st.portals.remove(&name);
            }
            _ => {}
        });
        client.feed(PgWireBackendMessage::CloseComplete(CloseComplete::new())).await?;
        Ok(())
    }

    async fn do_query<C>(
        &self,
        _client: &mut C,
        _portal: &pgwire::api::portal::Portal<Self::Statement>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: pgwire::api::store::PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        unreachable!("on_execute handles portals itself")
    }
}

#[async_trait]
impl CopyHandler for Conn {
    async fn on_copy_data<C>(&self, client: &mut C, copy_data: CopyData) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.with(client, |st| st.session.copy_data(&copy_data.data));
        Ok(())
    }

    async fn on_copy_done<C>(&self, client: &mut C, _done: CopyDone) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let (r, status) = self.with(client, |st| (st.session.copy_done(), st.session.status()));
        client.set_transaction_status(tx_status(status));
        match r {
            Ok(Outcome::Done(tag)) => {
                client.feed(PgWireBackendMessage::CommandComplete(CommandComplete::new(tag))).await?;
                Ok(())
            }
            Ok(_) => Ok(()),
            Err(e) => Err(user_error(e)),
        }
    }

    async fn on_copy_fail<C>(&self, client: &mut C, fail: CopyFail) -> PgWireError
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let (e, status) = self.with(client, |st| (st.session.copy_fail(&fail.message), st.session.status()));
        client.set_transaction_status(tx_status(status));
        user_error(e)
    }
}

/// A running server (see [`Server::start`]).
pub struct Server {
    addr: SocketAddr,
    metrics: Option<nvmedb::metrics::MetricsServer>,
    shared: Arc<Shared>,
    acceptor: Option<std::thread::JoinHandle<()>>,
    workers: Arc<Mutex<Vec<std::thread::JoinHandle<()>>>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Server({})", self.addr)
    }
}

impl Server {
    /// Opens the database and starts accepting connections in the background.
    pub fn start(config: ServerConfig) -> Result<Server, ServeError> {
        let db = match &config.archive {
            None => nvmedb::Database::open(&config.data, config.options.clone()),
            Some(a) => nvmedb::backup::archive::open_archiving(&config.data, config.options.clone(), a),
        }
        .map_err(ServeError::Engine)?;
        Self::start_with(db, config)
    }

    /// Starts serving an already open database (`config.data` is ignored).
    pub fn start_with(db: nvmedb::Database, config: ServerConfig) -> Result<Server, ServeError> {
        Self::start_engine(Engine::new(db).map_err(ServeError::Sql)?, config)
    }

    /// Starts serving an engine (a database wrapped with what else the server reports, such as
    /// its replication state: [`Engine::with_replication`]).
    pub fn start_engine(engine: Arc<Engine>, config: ServerConfig) -> Result<Server, ServeError> {
        Self::start_inner(engine, None, config)
    }

    /// Starts serving reads of a standby: each statement of an idle session runs on the
    /// snapshot `reads` gives (see [`crate::standby`]); `config.data` and `config.options` are
    /// not used.
    pub fn start_reads(
        reads: Arc<crate::standby::StandbyReads>,
        config: ServerConfig,
    ) -> Result<Server, ServeError> {
        let engine = reads.fresh().map_err(ServeError::Sql)?;
        Self::start_inner(engine, Some(reads), config)
    }

    fn start_inner(
        engine: Arc<Engine>,
        reads: Option<Arc<dyn ReadSnapshots>>,
        config: ServerConfig,
    ) -> Result<Server, ServeError> {
        let metrics = match &config.metrics {
            None => None,
            Some(a) => {
                let e = engine.clone();
                let render: nvmedb::metrics::Render = Arc::new(move || crate::stats::metrics_page(&e));
                Some(nvmedb::metrics::MetricsServer::start(a, render).map_err(ServeError::Engine)?)
            }
        };
        let scram = match &config.auth {
            Auth::Trust => None,
            Auth::Scram { password_file } => Some(Arc::new(ScramSource::load(password_file)?)),
        };
        let tls = config.tls.as_ref().map(crate::tls::acceptor).transpose()?;
        let listener = TcpListener::bind(&config.listen)
            .map_err(|e| ServeError::Io(format!("cannot listen on {}", config.listen), e))?;
        let addr = listener.local_addr().map_err(|e| ServeError::Io("local address".into(), e))?;
        let shared = Arc::new(Shared {
            engine,
            reads,
            active: AtomicUsize::new(0),
            max: config.max_connections.max(1),
            next_pid: AtomicI32::new(std::process::id() as i32 % 100_000 * 1000),
            scram,
            shutting_down: AtomicBool::new(false),
            conns: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(1),
            tls,
            cancels: cancel::Cancels::default(),
            session_nice: config.session_nice,
        });
        let workers: Arc<Mutex<Vec<std::thread::JoinHandle<()>>>> = Arc::default();
        let (sh, wk) = (shared.clone(), workers.clone());
        let acceptor = std::thread::Builder::new()
            .name("nvmedb-accept".into())
            .spawn(move || accept_loop(listener, sh, wk))
            .map_err(|e| ServeError::Io("cannot start the acceptor thread".into(), e))?;
        Ok(Server { addr, metrics, shared, acceptor: Some(acceptor), workers })
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address of the metrics endpoint, when [`ServerConfig::metrics`] asked for one.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(|m| m.addr())
    }

    /// The engine (database and SQL catalog) the server runs on.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.shared.engine
    }

    /// Connections being served.
    pub fn connections(&self) -> usize {
        self.shared.active.load(Ordering::Acquire)
    }

    /// Stops: no new connections, open ones are closed (their transactions roll back), then
    /// a checkpoint.
    pub fn shutdown(mut self) -> Result<(), ServeError> {
        self.stop_accepting();
        for (_, s) in self.shared.conns.locked().drain() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        let workers: Vec<_> = self.workers.locked().drain(..).collect();
        for w in workers {
            let _ = w.join();
        }
        if self.shared.reads.is_some() {
            return Ok(());
        }
        self.shared.engine.db.checkpoint().map_err(ServeError::Engine)
    }

    fn stop_accepting(&mut self) {
        self.shared.shutting_down.store(true, Ordering::Release);
        // Wake the blocking accept.
        let _ = TcpStream::connect(self.addr);
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.acceptor.is_some() {
            self.stop_accepting();
            for (_, s) in self.shared.conns.locked().drain() {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
    }
}

fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    workers: Arc<Mutex<Vec<std::thread::JoinHandle<()>>>>,
) {
    let params = Arc::new(Params { shared_buffers: shared.engine.server_settings[0].1.clone() });
    for stream in listener.incoming() {
        if shared.shutting_down.load(Ordering::Acquire) {
            break;
        }
        let Ok(stream) = stream else { continue };
        let _ = stream.set_nodelay(true);
        let id = shared.next_conn.fetch_add(1, Ordering::Relaxed);
        if let Ok(c) = stream.try_clone() {
            shared.conns.locked().insert(id, c);
        }
        let n = shared.active.fetch_add(1, Ordering::AcqRel) + 1;
        shared.engine.sql_stats.connected();
        let refuse = (n > shared.max).then(|| {
            SqlError::new(
                code::TOO_MANY_CONNECTIONS,
                format!("sorry, too many clients already (max_connections is {})", shared.max),
            )
        });
        let conn = Arc::new(Conn {
            shared: shared.clone(),
            state: Mutex::new(None),
            refuse,
            cancel: Arc::default(),
        });
        let flag = conn.cancel.clone();
        let scram = shared.scram.as_ref().map(|s| {
            let mut auth = ScramAuth::new(s.clone());
            auth.set_iterations(s.iterations);
            SASLAuthStartupHandler::new(params.clone()).with_scram(auth)
        });
        let startup = Arc::new(Startup { conn: conn.clone(), params: params.clone(), scram });
        let (sh, tls) = (shared.clone(), shared.tls.clone());
        let handle = std::thread::Builder::new().name(format!("nvmedb-conn-{id}")).spawn(move || {
            if sh.session_nice > 0 {
                // Refused: the session runs at the process's priority (a slower primary is
                // not an error).
                let _ = nvmedb::util::sched::lower_thread_priority(sh.session_nice);
            }
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build();
            if let Ok(rt) = rt {
                rt.block_on(async move {
                    if stream.set_nonblocking(true).is_ok() {
                        if let Ok(s) = tokio::net::TcpStream::from_std(stream) {
                            let _ = pgwire::tokio::process_socket(s, tls, Handlers { conn, startup }).await;
                        }
                    }
                });
            }
            sh.conns.locked().remove(&id);
            sh.cancels.forget(&flag);
            sh.active.fetch_sub(1, Ordering::AcqRel);
            sh.engine.sql_stats.disconnected();
        });
        if let Ok(h) = handle {
            let mut w = workers.locked();
            w.retain(|h| !h.is_finished());
            w.push(h);
        } else {
            shared.active.fetch_sub(1, Ordering::AcqRel);
            shared.engine.sql_stats.disconnected();
        }
    }
}

/// Runs the server until SIGTERM or Ctrl-C, then shuts down cleanly (open transactions roll
/// back, a checkpoint is taken).
pub fn serve(config: ServerConfig) -> Result<(), ServeError> {
    let server = Server::start(config.clone())?;
    if let Some(m) = server.metrics_addr() {
        eprintln!("nvmedb: metrics at http://{m}/metrics");
    }
    eprintln!(
        "nvmedb: serving {} on {} ({}; connect with: psql -h {} -p {} -U $USER nvmedb)",
        config.data.display(),
        server.addr(),
        match &config.auth {
            Auth::Trust => "trust authentication".to_string(),
            Auth::Scram { password_file } =>
                format!("SCRAM-SHA-256, passwords in {}", password_file.display()),
        },
        server.addr().ip(),
        server.addr().port()
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ServeError::Io("cannot start the signal runtime".into(), e))?;
    rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| ServeError::Io("cannot install the SIGTERM handler".into(), e))?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        Ok::<(), ServeError>(())
    })?;
    eprintln!("nvmedb: shutting down: closing {} connection(s), then a checkpoint", server.connections());
    server.shutdown()?;
    eprintln!("nvmedb: stopped cleanly");
    Ok(())
}
