//! Sequences: the generators of CREATE SEQUENCE, SERIAL and identity columns, and
//! `nextval`/`currval`/`setval`.
//!
//! Owns: [`Sequences`] (every sequence of a database, with its definition and state) and the
//! hidden engine table [`SEQUENCES_TABLE`] that keeps them durably, one row per sequence.
//!
//! Invariant: no value is handed out twice (without CYCLE), also across a crash. A sequence's
//! row records the last value that may have been handed out; `nextval` takes values from a
//! block of [`BLOCK`] values whose end it first writes to the row in a transaction of its own,
//! committed (durably) before the first value of the block is returned — PostgreSQL's
//! `log_cnt` pre-logging. A crash loses at most the rest of a block (a gap, never a repeat).
//! A sequence's state changes under its own mutex, so values are handed out in order. Like
//! PostgreSQL, `nextval` is not undone when the caller's transaction rolls back.

use crate::error::{code, SqlError, SqlResult};
use nvmedb::util::sync::{MutexExt, RwLockExt};
use nvmedb::{ColumnType, Database, Schema, Table, Value};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

/// The hidden engine table holding every sequence's definition and last reserved value.
pub const SEQUENCES_TABLE: &str = "$sequences";

/// Values a `nextval` reserves durably at a time (one commit per block).
pub const BLOCK: i64 = 32;

/// A sequence's definition (CREATE SEQUENCE's options).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeqDef {
    /// START WITH.
    pub start: i64,
    /// INCREMENT BY (never 0).
    pub increment: i64,
    /// MINVALUE.
    pub min: i64,
    /// MAXVALUE.
    pub max: i64,
    /// CYCLE: wrap around at the end instead of failing.
    pub cycle: bool,
    /// The table whose SERIAL or identity column owns the sequence (dropped with it).
    pub owner: Option<String>,
}

impl SeqDef {
    /// PostgreSQL's defaults for a sequence of values up to `type_max` (`i32::MAX` for
    /// SERIAL, `i64::MAX` for BIGSERIAL and plain sequences) stepping by `increment`.
    pub fn with_defaults(
        increment: i64,
        start: Option<i64>,
        min: Option<i64>,
        max: Option<i64>,
        type_max: i64,
    ) -> SqlResult<Self> {
        if increment == 0 {
            return Err(SqlError::new(code::INVALID_PARAMETER_VALUE, "INCREMENT must not be zero"));
        }
        let min = min.unwrap_or(if increment > 0 { 1 } else { -type_max - 1 });
        let max = max.unwrap_or(if increment > 0 { type_max } else { -1 });
        if min >= max {
            return Err(SqlError::new(
                code::INVALID_PARAMETER_VALUE,
                format!("MINVALUE ({min}) must be less than MAXVALUE ({max})"),
            ));
        }
        let start = start.unwrap_or(if increment > 0 { min } else { max });
        if start < min || start > max {
            return Err(SqlError::new(
                code::INVALID_PARAMETER_VALUE,
                format!("START value ({start}) cannot be outside [{min}, {max}]"),
            ));
        }
        Ok(Self { start, increment, min, max, cycle: false, owner: None })
    }
}

#[derive(Debug)]
struct SeqState {
    /// The last value handed out (or the next one, while `called` is false).
    last: i64,
    called: bool,
    /// The end of the block on disk: values up to it (in the increment's direction) may be
    /// handed out without writing; `None` after an open or a `setval`.
    reserved: Option<i64>,
}

#[derive(Debug)]
struct Sequence {
    def: SeqDef,
    state: Mutex<SeqState>,
}

/// Every sequence of a database (see the module documentation).
#[derive(Debug)]
pub struct Sequences {
    db: Database,
    table: Mutex<Option<Table>>,
    seqs: RwLock<HashMap<String, Arc<Sequence>>>,
}

fn seq_schema() -> Schema {
    let mut s = Schema::new(vec![
        ("name", ColumnType::Text(u32::MAX)),
        ("start", ColumnType::Int),
        ("increment", ColumnType::Int),
        ("min", ColumnType::Int),
        ("max", ColumnType::Int),
        ("cycle", ColumnType::Bool),
        ("value", ColumnType::Int),
        ("called", ColumnType::Bool),
        ("owner", ColumnType::Text(u32::MAX)),
    ]);
    s.columns[8].nullable = true;
    s
}

fn eng(e: nvmedb::Error) -> SqlError {
    SqlError::from_engine(e, Some(SEQUENCES_TABLE))
}

fn undefined(name: &str) -> SqlError {
    SqlError::new(code::UNDEFINED_TABLE, format!("relation \"{name}\" does not exist")).with_table(name)
}

/// The sequence a `nextval('…')` argument names: `public.` dropped, unquoted names folded to
/// lower case, as PostgreSQL reads a `regclass`.
pub fn seq_name(arg: &str) -> String {
    let arg = arg.trim();
    let arg = arg.strip_prefix("public.").unwrap_or(arg);
    match arg.strip_prefix('"').and_then(|a| a.strip_suffix('"')) {
        Some(q) => q.replace("\"\"", "\""),
        None => arg.to_lowercase(),
    }
}

impl Sequences {
    /// Reads the sequences of `db` (none if it has no sequence table yet).
    pub fn load(db: &Database) -> SqlResult<Self> {
        let mut seqs = HashMap::new();
        let table = if db.table_names().iter().any(|n| n == SEQUENCES_TABLE) {
            let t = db.table(SEQUENCES_TABLE)?;
            t.scan(|r| {
                let text = |c: usize| r.try_bytes(c).map(|b| String::from_utf8_lossy(b).into_owned());
                let name = text(0)?;
                let def = SeqDef {
                    start: r.try_int(1)?,
                    increment: r.try_int(2)?,
                    min: r.try_int(3)?,
                    max: r.try_int(4)?,
                    cycle: r.try_boolean(5)?,
                    owner: if r.is_null(8) { None } else { Some(text(8)?) },
                };
                let state = SeqState { last: r.try_int(6)?, called: r.try_boolean(7)?, reserved: None };
                seqs.insert(name, Arc::new(Sequence { def, state: Mutex::new(state) }));
                Ok(true)
            })
            .map_err(eng)?;
            Some(t)
        } else {
            None
        };
        Ok(Self { db: db.clone(), table: Mutex::new(table), seqs: RwLock::new(seqs) })
    }

    fn table(&self) -> SqlResult<Table> {
        let mut t = self.table.locked();
        if let Some(t) = &*t {
            return Ok(t.clone());
        }
        let created = self.db.create_table(SEQUENCES_TABLE, seq_schema()).map_err(eng)?;
        *t = Some(created.clone());
        Ok(created)
    }

    fn row(name: &str, def: &SeqDef, value: i64, called: bool) -> Vec<Value> {
        vec![
            Value::Bytes(name.as_bytes().to_vec()),
            Value::Int(def.start),
            Value::Int(def.increment),
            Value::Int(def.min),
            Value::Int(def.max),
            Value::Bool(def.cycle),
            Value::Int(value),
            Value::Bool(called),
            def.owner.as_ref().map_or(Value::Null, |o| Value::Bytes(o.as_bytes().to_vec())),
        ]
    }

    /// Writes a sequence's row in a transaction of its own, durable when this returns.
    fn persist(&self, name: &str, def: &SeqDef, value: i64, called: bool) -> SqlResult<()> {
        let t = self.table()?;
        let mut tx = self.db.begin();
        tx.update(&t, &Self::row(name, def, value, called)).map_err(eng)?;
        tx.commit().map_err(eng)
    }

    /// True if sequence `name` exists.
    pub fn exists(&self, name: &str) -> bool {
        self.seqs.read_locked().contains_key(name)
    }

    /// The definition of sequence `name`.
    pub fn def(&self, name: &str) -> Option<SeqDef> {
        self.seqs.read_locked().get(name).map(|s| s.def.clone())
    }

    /// Names of all sequences, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.seqs.read_locked().keys().cloned().collect();
        v.sort();
        v
    }

    /// Names of the sequences table `table` owns (its SERIAL and identity columns').
    pub fn owned_by(&self, table: &str) -> Vec<String> {
        let mut v: Vec<String> = self
            .seqs
            .read_locked()
            .iter()
            .filter(|(_, s)| s.def.owner.as_deref() == Some(table))
            .map(|(n, _)| n.clone())
            .collect();
        v.sort();
        v
    }

    /// Creates sequence `name` (durably); 42P07 if a sequence of that name exists.
    pub fn create(&self, name: &str, def: SeqDef) -> SqlResult<()> {
        if self.exists(name) {
            return Err(SqlError::new(code::DUPLICATE_TABLE, format!("relation \"{name}\" already exists"))
                .with_table(name));
        }
        let t = self.table()?;
        let mut tx = self.db.begin();
        tx.insert(&t, &Self::row(name, &def, def.start, false)).map_err(eng)?;
        tx.commit().map_err(eng)?;
        let state = SeqState { last: def.start, called: false, reserved: None };
        self.seqs
            .write_locked()
            .insert(name.to_string(), Arc::new(Sequence { def, state: Mutex::new(state) }));
        Ok(())
    }

    /// Drops sequence `name` (durably); 42P01 if there is none.
    pub fn drop_sequence(&self, name: &str) -> SqlResult<()> {
        if !self.exists(name) {
            return Err(undefined(name));
        }
        let t = self.table()?;
        let mut tx = self.db.begin();
        tx.delete(&t, &Value::Bytes(name.as_bytes().to_vec())).map_err(eng)?;
        tx.commit().map_err(eng)?;
        self.seqs.write_locked().remove(name);
        Ok(())
    }

    /// Makes table `owner` the owner of sequence `name` (durably; ALTER TABLE … RENAME TO).
    /// The row keeps the value reserved on disk, so no value is handed out twice.
    pub fn set_owner(&self, name: &str, owner: &str) -> SqlResult<()> {
        let seq = self.get(name)?;
        let st = seq.state.locked();
        let def = SeqDef { owner: Some(owner.to_string()), ..seq.def.clone() };
        let (value, called) = match st.reserved {
            Some(r) => (r, true),
            None => (st.last, st.called),
        };
        self.persist(name, &def, value, called)?;
        let state = SeqState { last: st.last, called: st.called, reserved: st.reserved };
        self.seqs
            .write_locked()
            .insert(name.to_string(), Arc::new(Sequence { def, state: Mutex::new(state) }));
        Ok(())
    }

    fn get(&self, name: &str) -> SqlResult<Arc<Sequence>> {
        self.seqs.read_locked().get(name).cloned().ok_or_else(|| undefined(name))
    }

    /// The next value of sequence `name` (see the module documentation).
    pub fn nextval(&self, name: &str) -> SqlResult<i64> {
        let seq = self.get(name)?;
        let d = &seq.def;
        let mut st = seq.state.locked();
        let mut wrapped = false;
        let next = if !st.called {
            st.last
        } else {
            match st.last.checked_add(d.increment).filter(|v| (d.min..=d.max).contains(v)) {
                Some(v) => v,
                None if d.cycle => {
                    wrapped = true;
                    if d.increment > 0 {
                        d.min
                    } else {
                        d.max
                    }
                }
                None => {
                    let (which, v) = if d.increment > 0 { ("maximum", d.max) } else { ("minimum", d.min) };
                    return Err(SqlError::new(
                        code::SEQUENCE_GENERATOR_LIMIT_EXCEEDED,
                        format!("nextval: reached {which} value of sequence \"{name}\" ({v})"),
                    ));
                }
            }
        };
        let covered =
            !wrapped && st.reserved.is_some_and(|r| if d.increment > 0 { next <= r } else { next >= r });
        if !covered {
            let span = d.increment.saturating_mul(BLOCK - 1);
            let end = next.saturating_add(span).clamp(d.min, d.max);
            self.persist(name, d, end, true)?;
            st.reserved = Some(end);
        }
        st.last = next;
        st.called = true;
        Ok(next)
    }

    /// Sets sequence `name` to `value` (the next `nextval` returns the value after it, or it
    /// when `called` is false); durable when this returns.
    pub fn setval(&self, name: &str, value: i64, called: bool) -> SqlResult<i64> {
        let seq = self.get(name)?;
        let d = &seq.def;
        if value < d.min || value > d.max {
            return Err(SqlError::new(
                code::NUMERIC_VALUE_OUT_OF_RANGE,
                format!(
                    "setval: value {value} is out of bounds for sequence \"{name}\" ({}..{})",
                    d.min, d.max
                ),
            ));
        }
        let mut st = seq.state.locked();
        self.persist(name, d, value, called)?;
        st.last = value;
        st.called = called;
        st.reserved = None;
        Ok(value)
    }
}

/// What expressions call sequences through: the database's sequences and the session's
/// `currval` memory.
pub trait SequenceCalls {
    /// `nextval(name)`.
    fn nextval(&self, name: &str) -> SqlResult<i64>;
    /// `currval(name)`: the value this session's last `nextval` of it returned.
    fn currval(&self, name: &str) -> SqlResult<i64>;
    /// `setval(name, value, called)`.
    fn setval(&self, name: &str, value: i64, called: bool) -> SqlResult<i64>;
}

/// A session's view of the sequences: remembers the last value it got from each.
#[derive(Debug)]
pub struct SessionSequences<'a> {
    /// The database's sequences.
    pub all: &'a Sequences,
    /// The session's last value of each sequence.
    pub current: &'a RefCell<HashMap<String, i64>>,
}

impl SequenceCalls for SessionSequences<'_> {
    fn nextval(&self, name: &str) -> SqlResult<i64> {
        let name = seq_name(name);
        let v = self.all.nextval(&name)?;
        self.current.borrow_mut().insert(name, v);
        Ok(v)
    }

    fn currval(&self, name: &str) -> SqlResult<i64> {
        let name = seq_name(name);
        if !self.all.exists(&name) {
            return Err(undefined(&name));
        }
        self.current.borrow().get(&name).copied().ok_or_else(|| {
            SqlError::new(
                code::OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!("currval of sequence \"{name}\" is not yet defined in this session"),
            )
        })
    }

    fn setval(&self, name: &str, value: i64, called: bool) -> SqlResult<i64> {
        let name = seq_name(name);
        let v = self.all.setval(&name, value, called)?;
        if called {
            self.current.borrow_mut().insert(name, v);
        }
        Ok(v)
    }
}
