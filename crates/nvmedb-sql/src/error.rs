//! SQL errors with PostgreSQL's SQLSTATE codes.
//!
//! Owns: [`SqlError`] (code, message, and the table, column or value at fault) and the mapping
//! from engine errors to SQLSTATEs. Invariant: every error a client sees carries the code a
//! PostgreSQL client would branch on (retry on 40P01/55P03, report 23505 as a duplicate, ...).

use std::fmt;

/// SQLSTATE codes this server reports.
pub mod code {
    /// The relation (table) does not exist.
    pub const UNDEFINED_TABLE: &str = "42P01";
    /// The column does not exist.
    pub const UNDEFINED_COLUMN: &str = "42703";
    /// The table or index already exists.
    pub const DUPLICATE_TABLE: &str = "42P07";
    /// A unique or primary key would hold the same value twice.
    pub const UNIQUE_VIOLATION: &str = "23505";
    /// NULL in a NOT NULL column.
    pub const NOT_NULL_VIOLATION: &str = "23502";
    /// The statement does not parse.
    pub const SYNTAX_ERROR: &str = "42601";
    /// A value's text is not valid for its type.
    pub const INVALID_TEXT_REPRESENTATION: &str = "22P02";
    /// A value does not fit its type (integer out of range, numeric precision).
    pub const NUMERIC_VALUE_OUT_OF_RANGE: &str = "22003";
    /// A string is longer than its column allows.
    pub const STRING_DATA_RIGHT_TRUNCATION: &str = "22001";
    /// Division by zero.
    pub const DIVISION_BY_ZERO: &str = "22012";
    /// A value has the wrong binary format, or a datetime is malformed.
    pub const INVALID_BINARY_REPRESENTATION: &str = "22P03";
    /// Malformed datetime text.
    pub const INVALID_DATETIME_FORMAT: &str = "22007";
    /// The transaction was chosen as a deadlock victim (retry it).
    pub const DEADLOCK_DETECTED: &str = "40P01";
    /// A lock wait timed out (retry it).
    pub const LOCK_NOT_AVAILABLE: &str = "55P03";
    /// The statement is valid SQL that nvmedb does not support.
    pub const FEATURE_NOT_SUPPORTED: &str = "0A000";
    /// An expression has the wrong type for where it is used.
    pub const DATATYPE_MISMATCH: &str = "42804";
    /// An operator or function does not exist for the argument types.
    pub const UNDEFINED_FUNCTION: &str = "42883";
    /// A parameter ($n) is used inconsistently or missing.
    pub const UNDEFINED_PARAMETER: &str = "42P02";
    /// A column reference matches more than one table.
    pub const AMBIGUOUS_COLUMN: &str = "42702";
    /// A GROUP BY / aggregate misuse.
    pub const GROUPING_ERROR: &str = "42803";
    /// Statements other than ROLLBACK in a failed transaction block.
    pub const IN_FAILED_SQL_TRANSACTION: &str = "25P02";
    /// A prepared statement or portal does not exist.
    pub const INVALID_SQL_STATEMENT_NAME: &str = "26000";
    /// An unknown configuration parameter.
    pub const UNDEFINED_OBJECT: &str = "42704";
    /// A protocol violation (e.g. bad COPY data framing).
    pub const PROTOCOL_VIOLATION: &str = "08P01";
    /// Bad COPY data.
    pub const BAD_COPY_FILE_FORMAT: &str = "22P04";
    /// Too many connections.
    pub const TOO_MANY_CONNECTIONS: &str = "53300";
    /// Authentication failed.
    pub const INVALID_PASSWORD: &str = "28P01";
    /// The engine reported an I/O error or corruption.
    pub const IO_ERROR: &str = "58030";
    /// Data corruption.
    pub const DATA_CORRUPTED: &str = "XX001";
    /// Anything else.
    pub const INTERNAL_ERROR: &str = "XX000";
    /// Invalid parameter value (e.g. a bad SET value).
    pub const INVALID_PARAMETER_VALUE: &str = "22023";
    /// The server is shutting down.
    pub const ADMIN_SHUTDOWN: &str = "57P01";
    /// A transaction-control statement where it makes no sense.
    pub const ACTIVE_SQL_TRANSACTION: &str = "25001";
    /// A negative LIMIT or OFFSET.
    pub const INVALID_ROW_COUNT: &str = "2201W";
    /// A scalar subquery returned more than one row.
    pub const CARDINALITY_VIOLATION: &str = "21000";
    /// A statement asked for more than nvmedb allows (rows of a set-returning function, …).
    pub const PROGRAM_LIMIT_EXCEEDED: &str = "54000";
    /// A serialization failure (retry the transaction).
    pub const SERIALIZATION_FAILURE: &str = "40001";
    /// A temporary file (a spilled sort or hash) could not be written or read.
    pub const DISK_FULL_OR_TEMP: &str = "53100";
    /// A statement waited too long (a standby that did not apply `nvmedb.min_lsn` in time).
    pub const QUERY_CANCELED: &str = "57014";
    /// A change on a read-only server (a standby serving reads).
    pub const READ_ONLY_SQL_TRANSACTION: &str = "25006";
    /// The object is of the wrong kind for the statement (a change to a statistics view).
    pub const WRONG_OBJECT_TYPE: &str = "42809";
    /// A sequence reached its MAXVALUE or MINVALUE (without CYCLE).
    pub const SEQUENCE_GENERATOR_LIMIT_EXCEEDED: &str = "2200H";
    /// The object is not in the state the call needs (currval before any nextval).
    pub const OBJECT_NOT_IN_PREREQUISITE_STATE: &str = "55000";
    /// A relation (sequence, index) of that name already exists.
    pub const DUPLICATE_OBJECT: &str = "42710";
    /// A column named twice in a key or index.
    pub const DUPLICATE_COLUMN: &str = "42701";
    /// An invalid table or sequence definition (a bad sequence option, a second primary key).
    pub const INVALID_TABLE_DEFINITION: &str = "42P16";
    /// invalid_regular_expression
    pub const INVALID_REGULAR_EXPRESSION: &str = "2201B";
    /// cant_change_runtime_param (a setting that cannot be changed now)
    pub const CANT_CHANGE_RUNTIME_PARAM: &str = "55P02";
    /// invalid_savepoint_specification (no savepoint of that name)
    pub const INVALID_SAVEPOINT: &str = "3B001";
    /// no_active_sql_transaction (a statement that needs a transaction block outside one)
    pub const NO_ACTIVE_SQL_TRANSACTION: &str = "25P01";
    /// invalid_column_reference (an ON CONFLICT target no unique constraint matches)
    pub const INVALID_COLUMN_REFERENCE: &str = "42P10";
    /// duplicate_prepared_statement (PREPARE of a name already prepared)
    pub const DUPLICATE_PREPARED_STATEMENT: &str = "42P05";
    /// foreign_key_violation (a row whose parent key does not exist, or a parent still referenced)
    pub const FOREIGN_KEY_VIOLATION: &str = "23503";
    /// check_violation (a row a CHECK constraint is false for)
    pub const CHECK_VIOLATION: &str = "23514";
    /// invalid_foreign_key (the referenced columns have no unique constraint)
    pub const INVALID_FOREIGN_KEY: &str = "42830";
    /// dependent_objects_still_exist (DROP of a table another one references)
    pub const DEPENDENT_OBJECTS_STILL_EXIST: &str = "2BP01";
}

/// An error reported to a SQL client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlError {
    /// SQLSTATE (see [`code`]).
    pub code: &'static str,
    /// Primary message, naming the object or value at fault.
    pub message: String,
    /// Optional detail line.
    pub detail: Option<String>,
    /// Table at fault, if any.
    pub table: Option<String>,
    /// Column at fault, if any.
    pub column: Option<String>,
}

impl SqlError {
    /// An error with `code` and `message`.
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), detail: None, table: None, column: None }
    }

    /// Adds a detail line.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// Names the table at fault.
    pub fn with_table(mut self, table: impl Into<String>) -> Self {
        self.table = Some(table.into());
        self
    }

    /// Names the column at fault.
    pub fn with_column(mut self, column: impl Into<String>) -> Self {
        self.column = Some(column.into());
        self
    }

    /// `feature not supported`, naming what.
    pub fn unsupported(what: impl fmt::Display) -> Self {
        Self::new(code::FEATURE_NOT_SUPPORTED, format!("{what} is not supported by nvmedb"))
    }

    /// A syntax error.
    pub fn syntax(message: impl Into<String>) -> Self {
        Self::new(code::SYNTAX_ERROR, message)
    }

    /// True for errors after which a client should retry the transaction.
    pub fn is_retryable(&self) -> bool {
        self.code == code::DEADLOCK_DETECTED || self.code == code::LOCK_NOT_AVAILABLE
    }

    /// Maps an engine error met while working on `table` (if known).
    pub fn from_engine(e: nvmedb::Error, table: Option<&str>) -> Self {
        use nvmedb::Error as E;
        let mut err = match &e {
            E::Deadlock { .. } => Self::new(code::DEADLOCK_DETECTED, "deadlock detected")
                .with_detail(format!("{e}; the transaction was rolled back, run it again")),
            E::LockTimeout { .. } => Self::new(code::LOCK_NOT_AVAILABLE, "lock timeout")
                .with_detail(format!("{e}; the transaction was rolled back, run it again")),
            E::AlreadyExists(m) => Self::new(
                code::UNIQUE_VIOLATION,
                format!("duplicate key value violates unique constraint: {m}"),
            ),
            E::NotFound(m) if m.starts_with("table") => {
                Self::new(code::UNDEFINED_TABLE, format!("{m} does not exist"))
            }
            E::InvalidArgument(m) if m.contains("NOT NULL") || m.contains("NULL primary key") => {
                Self::new(code::NOT_NULL_VIOLATION, format!("null value violates not-null constraint: {m}"))
            }
            E::InvalidArgument(m) if m.contains("out of range") || m.contains("precision") => {
                Self::new(code::NUMERIC_VALUE_OUT_OF_RANGE, m.clone())
            }
            E::InvalidArgument(m) if m.contains("exceeds") || m.contains("does not fit") => {
                Self::new(code::STRING_DATA_RIGHT_TRUNCATION, m.clone())
            }
            E::InvalidArgument(m) => Self::new(code::INVALID_PARAMETER_VALUE, m.clone()),
            E::ReadOnly(m) => Self::new(code::READ_ONLY_SQL_TRANSACTION, m.clone()),
            E::Io(_) => Self::new(code::IO_ERROR, e.to_string()),
            E::Corruption { .. } => Self::new(code::DATA_CORRUPTED, e.to_string()),
            _ => Self::new(code::INTERNAL_ERROR, e.to_string()),
        };
        if let Some(t) = table {
            err.table = Some(t.to_string());
        }
        err
    }
}

impl fmt::Display for SqlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)?;
        if let Some(d) = &self.detail {
            write!(f, ": {d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for SqlError {}

impl From<nvmedb::Error> for SqlError {
    fn from(e: nvmedb::Error) -> Self {
        Self::from_engine(e, None)
    }
}

/// Result of SQL operations.
pub type SqlResult<T> = Result<T, SqlError>;
