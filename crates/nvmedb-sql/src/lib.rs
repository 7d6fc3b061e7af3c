//! nvmedb-sql: SQL over nvmedb, and a PostgreSQL wire-protocol server.
//!
//! A statement flows down: the client's message (pgwire) → [`parse`] (sqlparser, PostgreSQL
//! dialect, plus the utility statements it lacks) → [`plan`] (bound to the catalog, cached per
//! prepared statement) → [`exec`] (the same [`nvmedb::Transaction`] API an embedded user
//! calls) → rows encoded back ([`types`]). [`session`] keeps a client's transaction state and
//! runs DDL; [`server`] speaks the protocol, one thread per connection ([`tls`] when the
//! client asks for it).
//!
//! ```no_run
//! let mut config = nvmedb_sql::ServerConfig::new("/tmp/nvmedb-data");
//! config.listen = "127.0.0.1:5433".into();
//! nvmedb_sql::serve(config)?; // until SIGTERM or Ctrl-C; then psql -h 127.0.0.1 -p 5433
//! # Ok::<(), nvmedb_sql::ServeError>(())
//! ```
//!
//! Isolation: see [`session`]. READ COMMITTED (the default, as in PostgreSQL) reads committed
//! rows without locks; REPEATABLE READ and SERIALIZABLE run as strict two-phase locking on
//! the rows read and written; outside a block each row read is the last committed version.

#![warn(missing_docs)]

pub mod array;
pub mod catalog;
pub mod constraint;
pub mod datetime;
pub mod error;
pub mod exec;
pub mod expr;
pub mod meta;
pub mod parse;
pub mod pgcatalog;
pub mod plan;
pub mod rename;
pub mod sequence;
pub mod server;
pub mod session;
pub mod standby;
pub mod stats;
pub mod tls;
pub mod types;

pub use error::{SqlError, SqlResult};
pub use server::{serve, Auth, ServeError, Server, ServerConfig};
pub use session::{Engine, Outcome, Session, TxStatus};
