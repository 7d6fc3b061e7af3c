//! nvmedb: a transactional storage engine for microsecond-latency NVMe storage.
//!
//! The crate is layered, arrows pointing down: the public API ([`Database`], [`Table`]) sits on
//! tables and B+trees, which sit on the buffer manager, which does all its I/O through
//! [`io::Device`]. See `docs/ARCHITECTURE.md` in the repository for the data flow.
//!
//! ```
//! use nvmedb::{ColumnType, Database, Options, Schema, Value};
//! use nvmedb::io::MemStorage;
//! use std::sync::Arc;
//!
//! # fn main() -> nvmedb::Result<()> {
//! let db = Database::open_with_storage(Arc::new(MemStorage::new()), Options::default())?;
//! let schema = Schema::new(vec![("sid", ColumnType::Int), ("c1", ColumnType::Int), ("data1", ColumnType::Char(64))])
//!     .with_index("by_c1", "c1")?;
//! let t = db.create_table("t1", schema)?;
//! t.insert(&[Value::Int(1), Value::Int(10), Value::from("hello")])?;
//! assert_eq!(t.read(&Value::Int(1), |row| row.int(1))?, Some(10));
//! t.update_int(&Value::Int(1), 1, 11)?;
//! assert_eq!(t.lookup("by_c1", &Value::Int(11))?.len(), 1);
//! db.close()?;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod backup;
pub mod btree;
pub mod buffer;
pub mod db;
pub mod error;
pub mod ids;
pub mod inspect;
pub mod io;
pub mod metrics;
pub mod page;
pub mod repl;
pub mod table;
pub mod trace;
pub mod txn;
pub mod util;
pub mod wal;
pub mod xlog;

pub use buffer::{BufferPolicy, BufferStats};
pub use db::{
    convert_row, BufferSize, BulkLoad, Database, FastLogOptions, Isolation, LogKind, Options, TableAccess,
    TablespaceSpec, Tablespaces, TornPageProtection, Transaction, LOAD_PROGRESS_EVERY,
};
pub use error::{Error, Result};
pub use table::{ColumnType, RowView, Schema, Table, Value, READ_BATCH};
