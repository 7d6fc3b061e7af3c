//! The system catalogs PostgreSQL clients read: `pg_catalog` (pg_class, pg_namespace,
//! pg_attribute, pg_type, pg_index, pg_constraint, pg_database, pg_settings, pg_am, pg_proc,
//! pg_roles, …) and `information_schema` (schemata, tables, columns, table_constraints,
//! key_column_usage, views), derived from the SQL [`Catalog`](crate::catalog::Catalog).
//!
//! Owns: the catalog views' definitions ([`VIEW_DDL`]), their rows ([`refill`]), the object
//! ids clients see ([`rel_oid`]: a table's is `16384 + 256 × its engine id`, its primary-key
//! index's the next, its secondary indexes' after that), and the rewrite of a catalog query
//! into one the planner knows ([`rewrite`]). The views are tables of the statistics views'
//! in-memory database ([`StatViews`](crate::stats::StatViews)): a statement that names one is
//! planned and run there, its views refilled from the real catalog just before it runs, so a
//! view always shows the catalog as of its statement's start and can never be changed.
//!
//! The rewrite (applied to the parsed statement before it is bound): `pg_catalog.` and
//! `information_schema.` qualifiers are dropped; `OPERATOR(pg_catalog.~)` is `~`; `COLLATE`
//! is dropped; `x::regclass`/`regtype`/`regnamespace` become look-ups in the views (a literal
//! or parameter gives the object's oid, anything else the object's name), `::oid` is
//! `::bigint`, `::name` and `::"char"` are `::text`; the functions that read the catalog
//! (`pg_get_indexdef`, `pg_get_constraintdef`, `to_regclass`, `to_regtype`) become scalar
//! subqueries on the views; visibility and privilege tests (`pg_table_is_visible`,
//! `has_table_privilege`, …) are true (one schema, `public`, always on the search path; no
//! privileges: every user may do everything); comments (`obj_description`, `col_description`)
//! are NULL (nvmedb keeps none); `pg_get_userbyid` names the one role, the connected user (nvmedb has no roles).
//!
//! A query over relations nvmedb never has rows in ([`ALWAYS_EMPTY`]: row-level policies,
//! publications, inheritance, extended statistics, triggers, rules) whose every branch
//! inner-joins one of them has no rows; when the planner cannot bind such a query, it is
//! answered with its columns and no rows.
//!
//! Invariants: every view row is built from one catalog snapshot per statement; object ids
//! are stable while a table exists (they follow its engine id, not its name or position).

use crate::catalog::TableInfo;
use crate::error::{code, SqlError, SqlResult};
use crate::session::{Engine, Session};
use crate::types::SqlType;
use nvmedb::Value;
use sqlparser::ast::{
    visit_expressions_mut, visit_relations_mut, BinaryOperator, DataType, Expr, ObjectName, ObjectNamePart,
    Query, SetExpr, Statement, TableFactor,
};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;
use std::ops::ControlFlow;
use std::sync::Arc;

/// OID of the `pg_catalog` schema.
pub const PG_CATALOG_OID: i64 = 11;
/// OID of the `public` schema.
pub const PUBLIC_OID: i64 = 2200;
/// OID of the `information_schema` schema.
pub const INFORMATION_SCHEMA_OID: i64 = 13_000;
/// OID of the btree access method.
pub const BTREE_AM: i64 = 403;
/// OID of the default btree operator class every index column shows.
const DEFAULT_BTREE_OPCLASS: i64 = 1978;
/// OID of the heap access method.
pub const HEAP_AM: i64 = 2;
/// OID of the one role (every user connects as it).
pub const ROLE_OID: i64 = 10;
/// OID of the one database.
pub const DATABASE_OID: i64 = 16_383;
/// The first object id of user relations (as in PostgreSQL).
pub const FIRST_USER_OID: i64 = 16_384;
/// Object ids each table reserves: itself, its primary-key index, its secondary indexes.
pub const OIDS_PER_TABLE: i64 = 256;

/// The oid of a table (engine id `id`).
pub fn rel_oid(id: u32) -> i64 {
    FIRST_USER_OID + i64::from(id) * OIDS_PER_TABLE
}

/// The oid of the primary-key index of table `id`.
pub fn pk_index_oid(id: u32) -> i64 {
    rel_oid(id) + 1
}

/// The oid of secondary index `k` of table `id`.
pub fn index_oid(id: u32, k: usize) -> i64 {
    rel_oid(id) + 2 + k as i64
}

/// The oid of the primary-key constraint of table `id` (the constraint shares its index's
/// number space: PostgreSQL keeps constraints in their own catalog).
pub fn pk_constraint_oid(id: u32) -> i64 {
    pk_index_oid(id)
}

/// Relations nvmedb never has rows in (see the module documentation).
pub const ALWAYS_EMPTY: &[&str] = &[
    "pg_policy",
    "pg_policies",
    "pg_statistic_ext",
    "pg_publication",
    "pg_publication_rel",
    "pg_publication_namespace",
    "pg_inherits",
    "pg_trigger",
    "pg_rewrite",
    "pg_partitioned_table",
    "pg_foreign_table",
    "pg_event_trigger",
];

mod views;
pub use views::{ARRAY_COLUMNS, VIEW_DDL};
mod constraints;
mod routing;
pub use routing::names_catalog;

/// A session's part of the views: who asks, in which database, with which settings.
#[derive(Debug, Clone)]
pub struct Asker {
    /// The connected user.
    pub user: String,
    /// The database name the client connected with.
    pub database: String,
    /// Every setting SHOW knows, with its value for this session and where it came from.
    pub settings: Vec<(String, String, &'static str)>,
}

fn t(s: &str) -> Value {
    Value::Bytes(s.as_bytes().to_vec())
}

fn n(v: i64) -> Value {
    Value::Int(v)
}

fn b(v: bool) -> Value {
    Value::Bool(v)
}

const NULL: Value = Value::Null;

/// An array of integers as a view stores it (its text: `{1,2}`).
fn ints(v: &[i64]) -> Value {
    t(&format!("{{{}}}", v.iter().map(i64::to_string).collect::<Vec<_>>().join(",")))
}

/// An `int2vector` or `oidvector` as a view stores it (its text: `1 2`).
fn vector(v: &[i64]) -> Value {
    t(&v.iter().map(i64::to_string).collect::<Vec<_>>().join(" "))
}

/// A type PostgreSQL clients may look up: (oid, name, length, category, array oid, element
/// oid). Array types are listed so drivers find `typarray`; nvmedb stores none of them.
const TYPES: &[(i64, &str, i16, &str, i64, i64)] = &[
    (16, "bool", 1, "B", 1000, 0),
    (17, "bytea", -1, "U", 1001, 0),
    (18, "char", 1, "Z", 1002, 0),
    (19, "name", 64, "S", 1003, 0),
    (20, "int8", 8, "N", 1016, 0),
    (21, "int2", 2, "N", 1005, 0),
    (22, "int2vector", -1, "A", 1006, 21),
    (23, "int4", 4, "N", 1007, 0),
    (25, "text", -1, "S", 1009, 0),
    (26, "oid", 4, "N", 1028, 0),
    (701, "float8", 8, "N", 1022, 0),
    (705, "unknown", -2, "X", 0, 0),
    (1042, "bpchar", -1, "S", 1014, 0),
    (1043, "varchar", -1, "S", 1015, 0),
    (1082, "date", 4, "D", 1182, 0),
    (1114, "timestamp", 8, "D", 1115, 0),
    (1186, "interval", 16, "T", 1187, 0),
    (1700, "numeric", -1, "N", 1231, 0),
    (2205, "regclass", 4, "N", 2210, 0),
    (2206, "regtype", 4, "N", 2211, 0),
    (1000, "_bool", -1, "A", 0, 16),
    (1001, "_bytea", -1, "A", 0, 17),
    (1002, "_char", -1, "A", 0, 18),
    (1003, "_name", -1, "A", 0, 19),
    (1005, "_int2", -1, "A", 0, 21),
    (1006, "_int2vector", -1, "A", 0, 22),
    (1007, "_int4", -1, "A", 0, 23),
    (1009, "_text", -1, "A", 0, 25),
    (1014, "_bpchar", -1, "A", 0, 1042),
    (1015, "_varchar", -1, "A", 0, 1043),
    (1016, "_int8", -1, "A", 0, 20),
    (1022, "_float8", -1, "A", 0, 701),
    (1028, "_oid", -1, "A", 0, 26),
    (1115, "_timestamp", -1, "A", 0, 1114),
    (1182, "_date", -1, "A", 0, 1082),
    (1187, "_interval", -1, "A", 0, 1186),
    (1231, "_numeric", -1, "A", 0, 1700),
    (2210, "_regclass", -1, "A", 0, 2205),
    (2211, "_regtype", -1, "A", 0, 2206),
];

/// `format_type(oid, typmod)`: the type's SQL name, with its modifier when `typmod` gives one
/// (`None` for an oid nvmedb does not know, as PostgreSQL's `???`).
pub fn format_type(oid: i64, typmod: Option<i64>) -> Option<String> {
    let typmod = typmod.unwrap_or(-1);
    if let Some(ty) = u32::try_from(oid).ok().and_then(SqlType::from_oid) {
        let ty = match ty {
            SqlType::Varchar(_) if typmod >= 4 => SqlType::Varchar((typmod - 4) as u32),
            SqlType::Bpchar(_) if typmod >= 4 => SqlType::Bpchar((typmod - 4) as u32),
            SqlType::Bpchar(_) => return Some("character".into()),
            SqlType::Numeric { .. } if typmod >= 4 => {
                let m = typmod - 4;
                SqlType::Numeric { precision: (m >> 16) as u8, scale: (m & 0xffff) as u8 }
            }
            SqlType::Numeric { .. } => return Some("numeric".into()),
            SqlType::Float8 if oid == 700 => return Some("real".into()),
            SqlType::Timestamp if oid == 1184 => return Some("timestamp with time zone".into()),
            t => t,
        };
        return Some(ty.name());
    }
    let name = TYPES.iter().find(|t| t.0 == oid)?.1;
    Some(match name {
        "char" => "\"char\"".into(),
        a if a.starts_with('_') => {
            format!("{}[]", format_type(TYPES.iter().find(|t| t.0 == oid)?.5, Some(typmod))?)
        }
        other => other.into(),
    })
}

/// The SQL type a table column shows as, and its `pg_type` oid and modifier.
fn column_type(ty: SqlType) -> (i64, i64) {
    (i64::from(ty.oid()), i64::from(ty.type_modifier()))
}

/// One index of a table as the views show it.
struct IndexView {
    oid: i64,
    name: String,
    columns: Vec<usize>,
    unique: bool,
    primary: bool,
}

fn indexes_of(info: &TableInfo) -> Vec<IndexView> {
    let id = info.table.id();
    let mut out = Vec::new();
    if !info.hidden_rowid {
        out.push(IndexView {
            oid: pk_index_oid(id),
            name: format!("{}_pkey", info.name),
            columns: info.primary_key_columns(),
            unique: true,
            primary: true,
        });
    }
    for (k, (name, columns, unique)) in info.index_columns().into_iter().enumerate() {
        out.push(IndexView { oid: index_oid(id, k), name, columns, unique, primary: false });
    }
    out
}

/// The attribute number (1-based, as clients see it) of engine column `col`.
fn attnum(info: &TableInfo, col: usize) -> i64 {
    (col - info.visible().start + 1) as i64
}

pub(crate) fn quote_ident(s: &str) -> String {
    let plain = s.chars().next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain {
        s.to_string()
    } else {
        format!("\"{}\"", s.replace('"', "\"\""))
    }
}

fn column_list(info: &TableInfo, cols: &[usize]) -> String {
    cols.iter().map(|&c| quote_ident(&info.columns[c].name)).collect::<Vec<_>>().join(", ")
}

fn index_def(info: &TableInfo, ix: &IndexView) -> String {
    format!(
        "CREATE {}INDEX {} ON public.{} USING btree ({})",
        if ix.unique { "UNIQUE " } else { "" },
        quote_ident(&ix.name),
        quote_ident(&info.name),
        column_list(info, &ix.columns)
    )
}

/// Rows of every view, keyed by view name.
struct Rows(Vec<(&'static str, Vec<Vec<Value>>)>);

impl Rows {
    fn push(&mut self, view: &'static str, row: Vec<Value>) {
        match self.0.iter_mut().find(|(n, _)| *n == view) {
            Some((_, rows)) => rows.push(row),
            None => self.0.push((view, vec![row])),
        }
    }
}

fn catalog_rows(of: &Engine, asker: &Asker) -> Rows {
    let mut r = Rows(Vec::new());
    let db = asker.database.as_str();
    for (oid, name) in [
        (PG_CATALOG_OID, "pg_catalog"),
        (PUBLIC_OID, "public"),
        (INFORMATION_SCHEMA_OID, "information_schema"),
    ] {
        r.push("pg_namespace", vec![n(oid), t(name), n(ROLE_OID), NULL]);
        r.push("nvmedb_nspnames", vec![n(oid), t(name)]);
        r.push("schemata", vec![t(db), t(name), t(&asker.user), NULL, NULL, t("UTF8"), NULL]);
    }
    for &(oid, name, len, cat, array, elem) in TYPES {
        r.push("nvmedb_typnames", vec![n(oid), t(name)]);
        r.push(
            "pg_type",
            vec![
                n(oid),
                t(name),
                n(PG_CATALOG_OID),
                n(ROLE_OID),
                n(i64::from(len)),
                b((1..=8).contains(&len)),
                t(if cat == "X" { "p" } else { "b" }),
                t(cat),
                b(matches!(name, "bool" | "float8" | "text" | "oid" | "timestamp" | "interval")),
                b(true),
                t(","),
                n(0),
                if cat == "A" { t("array_subscript_handler") } else { t("-") },
                n(elem),
                n(array),
                t(&format!("{name}in")),
                t(&format!("{name}out")),
                t(&format!("{name}recv")),
                t(&format!("{name}send")),
                t("-"),
                t("-"),
                t("-"),
                t(if len == 8 {
                    "d"
                } else if len == 2 {
                    "s"
                } else if len == 1 {
                    "c"
                } else {
                    "i"
                }),
                t(if len > 0 { "p" } else { "x" }),
                b(false),
                n(0),
                n(-1),
                n(0),
                n(if matches!(name, "text" | "varchar" | "bpchar" | "name") { 100 } else { 0 }),
                NULL,
                NULL,
                NULL,
            ],
        );
    }
    r.push("pg_am", vec![n(HEAP_AM), t("heap"), t("heap_tableam_handler"), t("t")]);
    r.push("pg_am", vec![n(BTREE_AM), t("btree"), t("bthandler"), t("i")]);
    r.push(
        "pg_database",
        vec![
            n(DATABASE_OID),
            t(db),
            n(ROLE_OID),
            n(6),
            t("c"),
            b(false),
            b(true),
            n(-1),
            n(0),
            n(0),
            n(1663),
            t("C.UTF-8"),
            t("C.UTF-8"),
            NULL,
            NULL,
            NULL,
        ],
    );
    r.push(
        "pg_roles",
        vec![
            n(ROLE_OID),
            t(&asker.user),
            b(true),
            b(true),
            b(true),
            b(true),
            b(true),
            b(true),
            n(-1),
            t("********"),
            NULL,
            b(true),
            NULL,
        ],
    );
    r.push(
        "pg_user",
        vec![t(&asker.user), n(ROLE_OID), b(true), b(true), b(true), b(true), t("********"), NULL, NULL],
    );
    r.push(
        "pg_collation",
        vec![n(100), t("default"), n(PG_CATALOG_OID), n(ROLE_OID), t("d"), b(true), n(-1), NULL, NULL],
    );
    r.push("pg_tablespace", vec![n(1663), t("pg_default"), n(ROLE_OID), NULL, NULL]);
    for (name, value, source) in &asker.settings {
        r.push(
            "pg_settings",
            vec![
                t(name),
                t(value),
                NULL,
                t("nvmedb"),
                NULL,
                NULL,
                t(if crate::session::is_settable(name) { "user" } else { "internal" }),
                t("string"),
                t(source),
                NULL,
                NULL,
                NULL,
                t(value),
                t(value),
                NULL,
                NULL,
                b(false),
            ],
        );
    }
    for (k, name) in crate::expr::func::Func::NAMES.iter().enumerate() {
        let mut row = vec![n(10_000 + k as i64), t(name), n(PG_CATALOG_OID), n(ROLE_OID), n(12)];
        row.extend([
            Value::Double(1.0),
            Value::Double(0.0),
            n(0),
            t("-"),
            t("f"),
            b(false),
            b(false),
            b(true),
            b(false),
            t("i"),
            t("s"),
        ]);
        row.extend([n(0), n(0), n(25), t(""), NULL, NULL, NULL, NULL, NULL, t(name), NULL, NULL, NULL, NULL]);
        r.push("pg_proc", row);
    }
    for name in of.catalog.names() {
        let Ok(info) = of.catalog.get(&name) else { continue };
        table_rows(&mut r, &info, of, asker);
    }
    r
}

fn table_rows(r: &mut Rows, info: &TableInfo, of: &Engine, asker: &Asker) {
    let db = asker.database.as_str();
    let oid = rel_oid(info.table.id());
    let indexes = indexes_of(info);
    let visible = info.visible();
    let rel = |oid: i64, name: &str, kind: &str, am: i64, natts: usize, hasindex: bool| {
        vec![
            n(oid),
            t(name),
            n(PUBLIC_OID),
            n(0),
            n(0),
            n(ROLE_OID),
            n(am),
            n(oid),
            n(0),
            n(0),
            Value::Double(-1.0),
            n(0),
            n(0),
            b(hasindex),
            b(false),
            t("p"),
            t(kind),
            n(natts as i64),
            n(0),
            b(false),
            b(false),
            b(false),
            b(false),
            b(false),
            b(true),
            t(if kind == "r" { "d" } else { "n" }),
            b(false),
            n(0),
            n(0),
            n(0),
            NULL,
            NULL,
            NULL,
        ]
    };
    r.push("pg_class", rel(oid, &info.name, "r", HEAP_AM, visible.len(), !indexes.is_empty()));
    r.push("nvmedb_relnames", vec![n(oid), t(&info.name)]);
    r.push(
        "pg_tables",
        vec![
            t("public"),
            t(&info.name),
            t(&asker.user),
            NULL,
            b(!indexes.is_empty()),
            b(false),
            b(false),
            b(false),
        ],
    );
    r.push(
        "tables",
        vec![
            t(db),
            t("public"),
            t(&info.name),
            t("BASE TABLE"),
            NULL,
            NULL,
            NULL,
            NULL,
            NULL,
            t("YES"),
            t("NO"),
            NULL,
        ],
    );
    let default_of = |col: &str| info.meta.defaults.iter().find(|(c, _)| c == col).map(|(_, d)| d.as_str());
    let attr = |relid: i64, col: usize, num: i64, notnull: bool| {
        let c = &info.columns[col];
        let (ty, typmod) = column_type(c.ty);
        vec![
            n(relid),
            t(&c.name),
            n(ty),
            n(-1),
            n(i64::from(c.ty.type_size())),
            n(num),
            n(0),
            n(-1),
            n(typmod),
            b(c.ty.type_size() > 0),
            t("i"),
            t(if c.ty.type_size() > 0 { "p" } else { "x" }),
            t(""),
            b(notnull),
            b(relid == oid && default_of(&c.name).is_some()),
            b(false),
            t(""),
            t(""),
            b(false),
            b(true),
            n(0),
            n(if c.ty.is_text() { 100 } else { 0 }),
            NULL,
            NULL,
            NULL,
            NULL,
        ]
    };
    for col in visible.clone() {
        let c = &info.columns[col];
        let num = attnum(info, col);
        r.push("pg_attribute", attr(oid, col, num, !c.nullable));
        if let Some(d) = default_of(&c.name) {
            r.push("pg_attrdef", vec![n(oid + OIDS_PER_TABLE / 2 + num), n(oid), n(num), t(d)]);
        }
        let (ty, _) = column_type(c.ty);
        let udt = TYPES.iter().find(|x| x.0 == ty).map_or("unknown", |x| x.1);
        let (len, prec, radix, scale, dtprec) = match c.ty {
            SqlType::Varchar(m) | SqlType::Bpchar(m) if m != u32::MAX => {
                (n(i64::from(m)), NULL, NULL, NULL, NULL)
            }
            SqlType::Int2 => (NULL, n(16), n(2), n(0), NULL),
            SqlType::Int4 => (NULL, n(32), n(2), n(0), NULL),
            SqlType::Int8 => (NULL, n(64), n(2), n(0), NULL),
            SqlType::Float8 => (NULL, n(53), n(2), NULL, NULL),
            SqlType::Numeric { precision, scale } => {
                (NULL, n(i64::from(precision)), n(10), n(i64::from(scale)), NULL)
            }
            SqlType::Timestamp => (NULL, NULL, NULL, NULL, n(6)),
            SqlType::Date => (NULL, NULL, NULL, NULL, n(0)),
            _ => (NULL, NULL, NULL, NULL, NULL),
        };
        let data_type = match c.ty {
            SqlType::Varchar(_) => "character varying".to_string(),
            SqlType::Bpchar(_) => "character".to_string(),
            SqlType::Numeric { .. } => "numeric".to_string(),
            other => other.name(),
        };
        r.push(
            "columns",
            vec![
                t(db),
                t("public"),
                t(&info.name),
                t(&c.name),
                n(num),
                default_of(&c.name).map_or(NULL, t),
                t(if c.nullable { "YES" } else { "NO" }),
                t(&data_type),
                len.clone(),
                len,
                prec,
                radix,
                scale,
                dtprec,
                t(db),
                t("pg_catalog"),
                t(udt),
                t("NO"),
                NULL,
                t("NEVER"),
                NULL,
                t("YES"),
            ],
        );
    }
    for ix in &indexes {
        r.push("pg_class", rel(ix.oid, &ix.name, "i", BTREE_AM, ix.columns.len(), false));
        r.push("nvmedb_relnames", vec![n(ix.oid), t(&ix.name)]);
        for (k, &col) in ix.columns.iter().enumerate() {
            r.push("pg_attribute", attr(ix.oid, col, k as i64 + 1, false));
        }
        let keys: Vec<i64> = ix.columns.iter().map(|&c| attnum(info, c)).collect();
        let zeros = vector(&vec![0; keys.len()]);
        r.push(
            "pg_index",
            vec![
                n(ix.oid),
                n(oid),
                n(ix.columns.len() as i64),
                n(ix.columns.len() as i64),
                b(ix.unique),
                b(false),
                b(ix.primary),
                b(false),
                b(true),
                b(false),
                b(true),
                b(false),
                b(true),
                b(true),
                b(false),
                vector(&keys),
                zeros.clone(),
                vector(&vec![DEFAULT_BTREE_OPCLASS; keys.len()]),
                zeros,
                NULL,
                NULL,
            ],
        );
        let def = index_def(info, ix);
        r.push("pg_indexes", vec![t("public"), t(&info.name), t(&ix.name), NULL, t(&def)]);
        r.push("nvmedb_catalog_defs", vec![n(ix.oid), t(&def)]);
    }
    constraints::rows(r, info, &indexes, of, db);
}

/// Refills every catalog view of the views' engine `views` from `of`'s catalog.
pub fn refill(views: &Engine, of: &Engine, asker: &Asker) -> SqlResult<()> {
    let rows = catalog_rows(of, asker);
    for (name, _) in VIEW_DDL {
        let info = views.catalog.get(name)?;
        let fresh = rows.0.iter().find(|(n, _)| n == name).map(|(_, r)| r.as_slice()).unwrap_or(&[]);
        replace_rows(&info, fresh).map_err(|e| SqlError::from_engine(e, Some(*name)))?;
    }
    Ok(())
}

fn replace_rows(info: &Arc<TableInfo>, rows: &[Vec<Value>]) -> nvmedb::Result<()> {
    let mut keys = Vec::new();
    info.table.scan(|row| {
        keys.push(row.try_value(0)?);
        Ok(true)
    })?;
    for k in keys {
        info.table.delete(&k)?;
    }
    let width = info.visible().len();
    for row in rows {
        assert_eq!(row.len(), width, "a row of catalog view {} has the wrong width", info.name);
        let mut full = Vec::with_capacity(row.len() + 1);
        if info.hidden_rowid {
            full.push(Value::Int(info.next_rowid()));
        }
        full.extend(row.iter().cloned());
        info.table.insert(&full)?;
    }
    Ok(())
}

/// Creates the catalog views in the views' session.
pub fn create_views(session: &mut Session) -> SqlResult<()> {
    for (name, cols) in VIEW_DDL {
        for r in session.simple_query(&format!("CREATE TABLE {name} ({cols})")) {
            r?;
        }
    }
    for (view, _) in VIEW_DDL {
        let types: Vec<(&str, SqlType)> =
            ARRAY_COLUMNS.iter().filter(|c| c.0 == *view).map(|c| (c.1, c.2)).collect();
        if !types.is_empty() {
            session.engine().catalog.retype(view, &types)?;
        }
    }
    Ok(())
}

fn strip_qualifier(parts: &mut Vec<ObjectNamePart>) {
    if parts.len() >= 2 {
        if let ObjectNamePart::Identifier(i) = &parts[0] {
            let s = i.value.to_ascii_lowercase();
            if s == "pg_catalog" || s == "information_schema" {
                parts.remove(0);
            }
        }
    }
}

fn parse_expr(text: &str) -> Option<Expr> {
    Parser::new(&PostgreSqlDialect {}).try_with_sql(text).ok()?.parse_expr().ok()
}

fn is_literal(e: &Expr) -> bool {
    match e {
        Expr::Value(_) => true,
        Expr::Cast { expr, .. } | Expr::Nested(expr) => is_literal(expr),
        _ => false,
    }
}

fn type_name(dt: &DataType) -> Option<String> {
    Some(match dt {
        DataType::Regclass => "regclass".into(),
        DataType::Custom(name, _) => match name.0.last()? {
            ObjectNamePart::Identifier(i) => i.value.to_ascii_lowercase(),
            _ => return None,
        },
        _ => return None,
    })
}

/// The replacement of a cast to a catalog type (see the module documentation).
fn rewrite_cast(x: &Expr, ty: &str) -> Option<Expr> {
    let lit = is_literal(x)
        || matches!(x, Expr::Value(v) if matches!(v.value, sqlparser::ast::Value::Placeholder(_)));
    let text = match (ty, lit) {
        ("regclass", true) => format!(
            "(SELECT rel_oid FROM nvmedb_relnames WHERE rel_name = CAST({x} AS text) OR 'public.' || rel_name = CAST({x} AS text))"
        ),
        ("regclass", false) => format!("(SELECT rel_name FROM nvmedb_relnames WHERE rel_oid = {x})"),
        ("regtype", true) => format!("(SELECT type_oid FROM nvmedb_typnames WHERE type_name = CAST({x} AS text))"),
        ("regtype", false) => format!("format_type({x}, NULL)"),
        ("regnamespace", false) => format!("(SELECT nsp_name FROM nvmedb_nspnames WHERE nsp_oid = {x})"),
        ("regnamespace", true) => format!("(SELECT nsp_oid FROM nvmedb_nspnames WHERE nsp_name = CAST({x} AS text))"),
        ("regrole", _) => "current_user".to_string(),
        ("oid" | "regproc", _) => format!("CAST({x} AS bigint)"),
        ("name" | "char", _) => format!("CAST({x} AS text)"),
        _ => return None,
    };
    parse_expr(&text)
}

/// The replacement of a call of catalog function `name` (see the module documentation).
fn rewrite_call(name: &str, args: &[String]) -> Option<Expr> {
    let arg = |i: usize| args.get(i).cloned().unwrap_or_else(|| "NULL".into());
    let text = match name {
        "pg_table_is_visible"
        | "pg_type_is_visible"
        | "pg_function_is_visible"
        | "pg_collation_is_visible"
        | "pg_opclass_is_visible"
        | "pg_operator_is_visible"
        | "has_table_privilege"
        | "has_schema_privilege"
        | "has_database_privilege"
        | "has_column_privilege"
        | "has_any_column_privilege"
        | "has_function_privilege"
        | "has_sequence_privilege"
        | "pg_has_role" => "TRUE".to_string(),
        "pg_relation_is_publishable" => "FALSE".to_string(),
        "pg_get_userbyid" => format!("(SELECT rolname FROM pg_roles WHERE oid = {})", arg(0)),
        "obj_description" | "col_description" | "shobj_description" | "pg_get_serial_sequence" => {
            "CAST(NULL AS text)".to_string()
        }
        "pg_encoding_to_char" => "'UTF8'".to_string(),
        "getdatabaseencoding" => "'UTF8'".to_string(),
        "pg_get_expr" | "array_to_string" => arg(0),
        // information_schema._pg_expandarray(a): rows (x, n) of a's elements and their
        // positions; the record stands for its x (see `expand_field`).
        "_pg_expandarray" => format!("unnest({})", arg(0)),
        // pg_get_indexdef(oid, column, pretty): the name of the index's column `column` (its
        // attribute in pg_attribute), the whole definition for 0.
        "pg_get_indexdef" if args.len() >= 2 => format!(
            "CASE WHEN {n} = 0 THEN (SELECT def_text FROM nvmedb_catalog_defs WHERE def_oid = {oid}) \
             ELSE (SELECT attname FROM pg_attribute WHERE attrelid = {oid} AND attnum = {n}) END",
            oid = arg(0),
            n = arg(1)
        ),
        "pg_get_indexdef" => format!("(SELECT def_text FROM nvmedb_catalog_defs WHERE def_oid = {})", arg(0)),
        "pg_get_constraintdef" => {
            format!("(SELECT def_text FROM nvmedb_catalog_defs WHERE def_oid = -({}))", arg(0))
        }
        "to_regclass" => format!(
            "(SELECT rel_oid FROM nvmedb_relnames WHERE rel_name = CAST({a} AS text) OR 'public.' || rel_name = CAST({a} AS text))",
            a = arg(0)
        ),
        "to_regtype" => {
            format!("(SELECT type_oid FROM nvmedb_typnames WHERE type_name = CAST({a} AS text))", a = arg(0))
        }
        "to_regnamespace" => {
            format!("(SELECT nsp_oid FROM nvmedb_nspnames WHERE nsp_name = CAST({a} AS text))", a = arg(0))
        }
        _ => return None,
    };
    parse_expr(&text)
}

fn rewrite_expr(e: &mut Expr) {
    let replacement = match e {
        Expr::CompoundIdentifier(parts) if parts.len() == 3 => {
            let s = parts[0].value.to_ascii_lowercase();
            if s == "pg_catalog" || s == "information_schema" {
                parts.remove(0);
            }
            None
        }
        Expr::Collate { expr, .. } => Some((**expr).clone()),
        Expr::CompoundFieldAccess { root, access_chain } => expand_field(root, access_chain),
        Expr::BinaryOp { op: op @ BinaryOperator::PGCustomBinaryOperator(_), .. } => {
            let BinaryOperator::PGCustomBinaryOperator(parts) = &*op else { unreachable!("matched") };
            let new = match parts.last().map(String::as_str) {
                Some("~") => Some(BinaryOperator::PGRegexMatch),
                Some("~*") => Some(BinaryOperator::PGRegexIMatch),
                Some("!~") => Some(BinaryOperator::PGRegexNotMatch),
                Some("!~*") => Some(BinaryOperator::PGRegexNotIMatch),
                Some("=") => Some(BinaryOperator::Eq),
                Some("<>") => Some(BinaryOperator::NotEq),
                Some("~~") => Some(BinaryOperator::PGLikeMatch),
                _ => None,
            };
            if let Some(new) = new {
                *op = new;
            }
            None
        }
        Expr::Cast { expr, data_type, .. } => {
            let ty = type_name(data_type);
            let replaced = ty.as_deref().and_then(|ty| rewrite_cast(expr, ty));
            // `pg_catalog.text` and the like: the built-in type under its plain name.
            let plain = match &*data_type {
                DataType::Custom(_, mods) if replaced.is_none() && mods.is_empty() => ty,
                _ => None,
            };
            if let Some(plain) = plain.and_then(|ty| {
                Parser::new(&PostgreSqlDialect {})
                    .try_with_sql(&ty)
                    .ok()
                    .and_then(|mut p| p.parse_data_type().ok())
            }) {
                *data_type = plain;
            }
            replaced
        }
        Expr::Function(f) => {
            strip_qualifier(&mut f.name.0);
            let name = match f.name.0.as_slice() {
                [ObjectNamePart::Identifier(i)] => i.value.to_ascii_lowercase(),
                _ => String::new(),
            };
            let args: Vec<String> = match &f.args {
                sqlparser::ast::FunctionArguments::List(l) => l.args.iter().map(|a| a.to_string()).collect(),
                _ => vec![],
            };
            rewrite_call(&name, &args)
        }
        _ => None,
    };
    if let Some(r) = replacement {
        *e = r;
    }
}

/// A field of a `_pg_expandarray` record (rewritten to `unnest(a)` before its field, as the
/// visit is post-order): `.x` is the element, `.n` its position (`generate_series` over the
/// array's length, which runs in step with the `unnest` beside it); `(keys).x` over a column
/// that holds such a record is the column.
fn expand_field(root: &Expr, chain: &[sqlparser::ast::AccessExpr]) -> Option<Expr> {
    let [sqlparser::ast::AccessExpr::Dot(Expr::Identifier(field))] = chain else { return None };
    let inner = match root {
        Expr::Nested(x) => x.as_ref(),
        x => x,
    };
    let unnest_arg = match inner {
        Expr::Function(f) if f.name.to_string().eq_ignore_ascii_case("unnest") => match &f.args {
            sqlparser::ast::FunctionArguments::List(l) if l.args.len() == 1 => Some(l.args[0].to_string()),
            _ => None,
        },
        _ => None,
    };
    match (field.value.to_ascii_lowercase().as_str(), unnest_arg) {
        ("n", Some(a)) => parse_expr(&format!("generate_series(1, cardinality({a}))")),
        ("x", _) => Some(inner.clone()),
        _ => None,
    }
}

/// Rewrites a catalog query into one the planner binds (see the module documentation).
pub fn rewrite(st: &mut Statement) {
    let _ = visit_relations_mut(st, |name: &mut ObjectName| {
        strip_qualifier(&mut name.0);
        ControlFlow::<()>::Continue(())
    });
    let _ = visit_expressions_mut(st, |e: &mut Expr| {
        rewrite_expr(e);
        ControlFlow::<()>::Continue(())
    });
}

fn relation_names(f: &TableFactor, inner: bool, out: &mut Vec<String>) {
    if let TableFactor::Table { name, .. } = f {
        if inner {
            if let Some(ObjectNamePart::Identifier(i)) = name.0.last() {
                out.push(i.value.to_ascii_lowercase());
            }
        }
    }
}

/// Whether every branch of `body` inner-joins a relation nvmedb never has rows in.
fn branches_empty(body: &SetExpr) -> bool {
    match body {
        SetExpr::Select(s) => {
            let mut names = Vec::new();
            for twj in &s.from {
                relation_names(&twj.relation, true, &mut names);
                for j in &twj.joins {
                    let inner = matches!(
                        j.join_operator,
                        sqlparser::ast::JoinOperator::Join(_)
                            | sqlparser::ast::JoinOperator::Inner(_)
                            | sqlparser::ast::JoinOperator::CrossJoin(_)
                    );
                    relation_names(&j.relation, inner, &mut names);
                }
            }
            names.iter().any(|n| ALWAYS_EMPTY.contains(&n.as_str()))
        }
        SetExpr::SetOperation { op: sqlparser::ast::SetOperator::Union, left, right, .. } => {
            branches_empty(left) && branches_empty(right)
        }
        SetExpr::SetOperation { left, .. } => branches_empty(left),
        SetExpr::Query(q) => branches_empty(&q.body),
        _ => false,
    }
}

fn first_select(body: &SetExpr) -> Option<&sqlparser::ast::Select> {
    match body {
        SetExpr::Select(s) => Some(s.as_ref()),
        SetExpr::SetOperation { left, .. } => first_select(left),
        SetExpr::Query(q) => first_select(&q.body),
        _ => None,
    }
}

/// For a query whose every branch reads a relation nvmedb never has rows in: a query with
/// the same column names (all text) and no rows, to plan instead when the original cannot be
/// bound.
pub fn empty_answer(q: &Query) -> Option<String> {
    if !branches_empty(&q.body) {
        return None;
    }
    let s = first_select(&q.body)?;
    let mut cols = Vec::new();
    for (k, item) in s.projection.iter().enumerate() {
        let name = match item {
            sqlparser::ast::SelectItem::ExprWithAlias { alias, .. } => alias.value.clone(),
            sqlparser::ast::SelectItem::UnnamedExpr(e) => crate::plan::bind_expr::column_name(e),
            _ => return None,
        };
        let name = if name.is_empty() { format!("column{}", k + 1) } else { name };
        cols.push(format!("CAST(NULL AS text) AS \"{}\"", name.replace('"', "\"\"")));
    }
    Some(format!("SELECT {} WHERE FALSE", cols.join(", ")))
}

/// The number of parameters (`$n`, the largest n) statement `st` uses.
pub fn placeholders(st: &Statement) -> usize {
    let mut n = 0;
    let _ = sqlparser::ast::visit_expressions(st, |e: &Expr| {
        if let Expr::Value(v) = e {
            if let sqlparser::ast::Value::Placeholder(p) = &v.value {
                n = n.max(p.trim_start_matches('$').parse::<usize>().unwrap_or(0));
            }
        }
        ControlFlow::<()>::Continue(())
    });
    n
}

/// The error for a statement that changes a catalog view.
pub fn read_only() -> SqlError {
    SqlError::new(
        code::WRONG_OBJECT_TYPE,
        "the system catalogs (pg_catalog, information_schema, nvmedb_stat_*) are read-only: only SELECT reads them",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_type_names_types_with_modifiers() {
        assert_eq!(format_type(23, None).as_deref(), Some("integer"));
        assert_eq!(format_type(1043, Some(44)).as_deref(), Some("character varying(40)"));
        assert_eq!(format_type(1700, Some((10 << 16 | 2) + 4)).as_deref(), Some("numeric(10,2)"));
        assert_eq!(format_type(1007, Some(-1)).as_deref(), Some("integer[]"));
        assert_eq!(format_type(18, None).as_deref(), Some("\"char\""));
        assert_eq!(format_type(99_999, None), None);
    }

    #[test]
    fn rewrite_drops_qualifiers_and_maps_catalog_calls() {
        let mut st = Parser::parse_sql(
            &PostgreSqlDialect {},
            "SELECT pg_catalog.pg_class.relname FROM pg_catalog.pg_class \
             WHERE relname OPERATOR(pg_catalog.~) '^(t)$' COLLATE pg_catalog.default \
             AND pg_catalog.pg_table_is_visible(oid) AND oid = 't'::regclass",
        )
        .unwrap()
        .remove(0);
        rewrite(&mut st);
        let s = st.to_string();
        assert!(
            s.starts_with("SELECT pg_class.relname FROM pg_class WHERE relname ~ '^(t)$' AND true"),
            "{s}"
        );
        assert!(s.contains("(SELECT rel_oid FROM nvmedb_relnames WHERE rel_name = CAST('t' AS TEXT)"), "{s}");
    }
}
