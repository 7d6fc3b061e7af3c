//! Planning: a parsed statement (sqlparser's AST) becomes a [`Prepared`] plan against the
//! catalog.
//!
//! The stages, one module each: the binder ([`bind`], with [`bind_expr`], [`bind_query`],
//! [`bind_dml`] and [`bind_ddl`]) resolves names against the catalog, infers parameter types
//! and builds a [`logical`] plan over column ids; [`rewrite`] decorrelates subqueries into
//! joins; the physical planner ([`physical`], with [`joins`] for join order and method and
//! [`cost`] for the estimates, from the statistics in [`stats`]) chooses access paths and
//! operators; [`explain`] prints the result. Execution is [`crate::exec`].
//!
//! Invariant: a plan records the catalog version it was made at; a plan of an older version is
//! made again before it runs. A prepared statement keeps its physical plan: running it again
//! only binds parameter values.

pub mod bind;
pub mod bind_alter;
pub mod bind_array;
pub mod bind_case;
pub mod bind_constraint;
pub mod bind_create_as;
pub mod bind_ddl;
pub mod bind_dml;
pub mod bind_expr;
pub(crate) mod bind_ops;
pub mod bind_query;
pub mod cost;
pub mod explain;
pub mod joins;
pub mod logical;
pub mod physical;
pub mod physical_calls;
pub mod rewrite;
pub mod stats;

pub use bind::{object_name, sql_type, Binder};
pub use physical::{Path, PhysNode, PhysOp, ScanSpec};

use crate::catalog::TableInfo;
use crate::expr::Expr;
use crate::types::SqlType;
use logical::Cols;
use std::sync::Arc;

/// A transaction isolation level as SQL names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsolationLevel {
    /// READ COMMITTED (PostgreSQL's default): each statement sees only committed rows.
    ReadCommitted,
    /// REPEATABLE READ: run as SERIALIZABLE (it promises less).
    RepeatableRead,
    /// SERIALIZABLE: strict two-phase locking on the rows read and written. No key-range
    /// locks yet: a row inserted into a range another transaction scanned is not waited for
    /// (a phantom).
    Serializable,
}

impl IsolationLevel {
    /// The level named `s` (`read committed`, `read uncommitted` is read committed as in
    /// PostgreSQL).
    pub fn parse(s: &str) -> Option<IsolationLevel> {
        let s = s.trim().trim_matches(['\'', '"']).to_ascii_lowercase();
        let words: Vec<&str> = s.split_whitespace().collect();
        Some(match words.as_slice() {
            ["read", "committed"] | ["read", "uncommitted"] => IsolationLevel::ReadCommitted,
            ["repeatable", "read"] => IsolationLevel::RepeatableRead,
            ["serializable"] => IsolationLevel::Serializable,
            _ => return None,
        })
    }

    /// The name SHOW gives it.
    pub fn name(self) -> &'static str {
        match self {
            IsolationLevel::ReadCommitted => "read committed",
            IsolationLevel::RepeatableRead => "repeatable read",
            IsolationLevel::Serializable => "serializable",
        }
    }
}

/// A result column.
#[derive(Debug, Clone)]
pub struct OutCol {
    /// Column name.
    pub name: String,
    /// Type.
    pub ty: SqlType,
}

/// A planned query: the operator tree and what runs before it.
#[derive(Debug, Clone)]
pub struct QueryPlan {
    /// The operator tree.
    pub root: PhysNode,
    /// Uncorrelated scalar subqueries, computed in order before the tree runs (a later one
    /// may use an earlier one's value: [`Expr::Subquery`]).
    pub initplans: Vec<PhysNode>,
    /// FOR UPDATE: rows are read under exclusive locks.
    pub for_update: bool,
    /// The statement's columns (names for EXPLAIN).
    pub cols: Arc<Cols>,
    /// Number of operators in the tree and the init plans (EXPLAIN ANALYZE's counters).
    pub nodes: usize,
}

/// Where an INSERT's rows come from.
#[derive(Debug, Clone)]
pub enum InsertSource {
    /// VALUES rows, one expression per target column.
    Values(Vec<Vec<Expr>>),
    /// A query whose output columns map to the target columns.
    Query(Box<QueryPlan>),
}

/// An INSERT.
#[derive(Debug, Clone)]
pub struct InsertPlan {
    /// Table.
    pub table: Arc<TableInfo>,
    /// Engine positions of the target columns.
    pub targets: Vec<usize>,
    /// Rows.
    pub source: InsertSource,
    /// RETURNING expressions over the new row (engine positions).
    pub returning: Vec<Expr>,
    /// The DEFAULTs of the columns not among the targets: (engine position, expression),
    /// evaluated for each row.
    pub defaults: Vec<(usize, Expr)>,
    /// Uncorrelated scalar subqueries of the VALUES rows and RETURNING.
    pub initplans: Vec<PhysNode>,
    /// ON CONFLICT on the primary key or a unique index.
    pub on_conflict: Option<OnConflict>,
    /// The table's CHECK constraints: (name, expression over the engine row).
    pub checks: Vec<(String, Expr)>,
}

/// `INSERT … ON CONFLICT (key) DO NOTHING | DO UPDATE SET … [WHERE …]`: a proposed row whose
/// value of an arbiter key exists is skipped, or the existing row is updated.
#[derive(Debug, Clone)]
pub struct OnConflict {
    /// The keys a conflict is looked for on (one for a target; without a target, DO NOTHING's,
    /// every unique key of the table).
    pub arbiters: Vec<Arbiter>,
    /// DO UPDATE (false: DO NOTHING).
    pub update: bool,
    /// DO UPDATE's SET: (engine column, value over the existing row followed by the proposed
    /// one, `EXCLUDED`, both in engine order).
    pub sets: Vec<(usize, Expr)>,
    /// DO UPDATE's WHERE over the same pair of rows (the row is left as it is when false).
    pub filter: Option<Expr>,
}

/// A key ON CONFLICT looks for a conflict on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arbiter {
    /// The primary key.
    PrimaryKey,
    /// The unique secondary index at this position of [`TableInfo::indexes`] (the index of a
    /// multi-column key is on its hidden column).
    Index(usize),
}

/// An UPDATE or DELETE: a query that finds the rows (whole table rows, engine order), then a
/// change per row.
#[derive(Debug, Clone)]
pub struct ModifyPlan {
    /// The table changed.
    pub table: Arc<TableInfo>,
    /// Finds the candidate rows (output: every engine column of the table).
    pub input: QueryPlan,
    /// The WHERE conjuncts, re-checked on each row once it is locked (over the table row).
    pub recheck: Option<Expr>,
    /// UPDATE: (engine column, new value over the old row); empty for DELETE.
    pub sets: Vec<(usize, Expr)>,
    /// RETURNING over the new (UPDATE) or old (DELETE) row.
    pub returning: Vec<Expr>,
    /// UPDATE: the table's CHECK constraints (name, expression over the engine row).
    pub checks: Vec<(String, Expr)>,
}

/// `COPY table [(cols)] FROM STDIN` in text format.
#[derive(Debug, Clone)]
pub struct CopyPlan {
    /// Table.
    pub table: Arc<TableInfo>,
    /// Engine positions of the columns in each line.
    pub targets: Vec<usize>,
    /// Field delimiter.
    pub delimiter: u8,
    /// The NULL marker.
    pub null: String,
    /// The data is in PostgreSQL's binary COPY format.
    pub binary: bool,
}

/// A CREATE TABLE.
#[derive(Debug, Clone)]
pub struct CreateTablePlan {
    /// Table name.
    pub name: String,
    /// The engine schema.
    pub schema: nvmedb::Schema,
    /// IF NOT EXISTS.
    pub if_not_exists: bool,
    /// DEFAULTs and multi-column keys.
    pub meta: crate::meta::TableMeta,
    /// The sequences of its SERIAL and identity columns (owned by the table).
    pub sequences: Vec<(String, crate::sequence::SeqDef)>,
}

/// CREATE TABLE … AS query: the new table and the query that fills it.
#[derive(Debug, Clone)]
pub struct TableAsPlan {
    /// The new table (its columns are the query's result columns, after the hidden row id).
    pub table: CreateTablePlan,
    /// The query.
    pub query: QueryPlan,
}

/// What EXPLAIN shows.
#[derive(Debug, Clone)]
pub struct ExplainPlan {
    /// EXPLAIN ANALYZE: run the statement and show actual rows and times.
    pub analyze: bool,
    /// The statement explained (a query, or the query finding an UPDATE's or DELETE's rows).
    pub stmt: Box<Stmt>,
    /// How long planning took.
    pub planning: std::time::Duration,
}

/// A planned statement.
#[derive(Debug, Clone)]
pub enum Stmt {
    /// SELECT (or VALUES).
    Query(Box<QueryPlan>),
    /// INSERT.
    Insert(Box<InsertPlan>),
    /// UPDATE.
    Update(Box<ModifyPlan>),
    /// DELETE.
    Delete(Box<ModifyPlan>),
    /// EXPLAIN [ANALYZE].
    Explain(ExplainPlan),
    /// COPY FROM STDIN.
    Copy(Box<CopyPlan>),
    /// BEGIN / START TRANSACTION [ISOLATION LEVEL …].
    Begin(Option<IsolationLevel>),
    /// COMMIT / END.
    Commit,
    /// ROLLBACK / ABORT.
    Rollback,
    /// SET name = value (None: DEFAULT).
    Set(String, Option<String>),
    /// SET TRANSACTION ISOLATION LEVEL …
    SetTransaction(IsolationLevel),
    /// SHOW name.
    Show(String),
    /// CREATE TABLE.
    CreateTable(Box<CreateTablePlan>),
    /// CREATE TABLE … AS query.
    CreateTableAs(Box<TableAsPlan>),
    /// CREATE SEQUENCE name, IF NOT EXISTS.
    CreateSequence(String, crate::sequence::SeqDef, bool),
    /// DROP SEQUENCE names, IF EXISTS.
    DropSequence(Vec<String>, bool),
    /// DROP TABLE names, IF EXISTS.
    DropTable(Vec<String>, bool),
    /// TRUNCATE names.
    Truncate(Vec<String>),
    /// CREATE [UNIQUE] INDEX name ON table (columns), IF NOT EXISTS.
    CreateIndex {
        /// Index name.
        name: String,
        /// Table.
        table: String,
        /// Indexed columns, in key order.
        columns: Vec<String>,
        /// UNIQUE.
        unique: bool,
        /// IF NOT EXISTS.
        if_not_exists: bool,
    },
    /// DROP INDEX names, IF EXISTS.
    DropIndex(Vec<String>, bool),
    /// ALTER TABLE t: one change.
    Alter(String, Box<bind_alter::AlterOp>),
    /// ANALYZE [tables] (empty: all).
    Analyze(Vec<String>),
    /// CHECKPOINT.
    Checkpoint,
    /// SAVEPOINT, RELEASE or ROLLBACK TO a savepoint.
    Savepoint(crate::parse::SavepointOp),
    /// PREPARE name AS statement: the statement, planned.
    PrepareNamed(String, Arc<Prepared>),
    /// EXECUTE name (arguments): the arguments, bound to the statement's parameter types
    /// (constants; evaluated when it runs).
    ExecuteNamed(String, Vec<Expr>),
    /// DEALLOCATE [PREPARE] name (`None`: ALL).
    Deallocate(Option<String>),
    /// A statement accepted and done without effect, with its command tag (VACUUM,
    /// DISCARD ...).
    NoOp(&'static str),
    /// An empty query.
    Empty,
}

/// A statement ready to run: its plan, parameter types and result columns.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The statement text (to plan again after DDL).
    pub sql: String,
    /// The plan.
    pub stmt: Stmt,
    /// Parameter types ($1, $2, ...).
    pub params: Vec<SqlType>,
    /// Result columns (empty when the statement returns no rows).
    pub columns: Arc<Vec<OutCol>>,
    /// Catalog version the plan was made at.
    pub version: u64,
}
