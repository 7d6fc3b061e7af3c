//! Schemas, values and the row encoding.
//!
//! Owns: column types, [`Schema`], [`Value`], how a row becomes bytes in a heap page, and how
//! a value becomes an order-preserving index key.
//!
//! Row layout: when any column is nullable, a null bitmap of `ceil(columns / 8)` bytes comes
//! first (bit `i % 8` of byte `i / 8` set: column `i` is NULL, and takes no bytes); then the
//! columns in schema order: `Int`, `Timestamp` and `Double` as 8 bytes little-endian (a
//! `Double` as its IEEE-754 bits), `Int32` as 4, `Int16` as 2, `Bool` as 1 byte (0 or 1),
//! `Numeric` as a 16-byte little-endian `i128` holding the value times 10^scale, `Char(n)` as
//! exactly `n` bytes (shorter values are zero-padded), `Bytes(max)` and `Text(max)` as a u32
//! length then the bytes. A schema without nullable columns has no bitmap, so rows written
//! before nullable columns existed read unchanged.
//!
//! Index keys (see [`Schema::key_bytes`]): integers of every width and timestamps as
//! [`key::encode_i64`], doubles and numerics as order-preserving big-endian bits, booleans as
//! one byte; byte strings raw in a primary key and as a self-delimiting component in a
//! secondary key. A nullable column's secondary-key component starts with a tag byte (1: a
//! value follows, 2: NULL), so NULLs sort after every value, as in PostgreSQL.
//!
//! Invariant: a row is validated against its schema before it is encoded; errors name the
//! table, the column and what was expected.

use crate::btree::key;
use crate::error::{Error, Result};
use crate::util::bytes::u64_at;

/// A column's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    /// 64-bit signed integer.
    Int,
    /// Fixed-length byte string of exactly `n` bytes (shorter values are zero-padded), like
    /// SQL `char(n)`.
    Char(u32),
    /// Variable-length byte string of at most `max` bytes.
    Bytes(u32),
    /// 32-bit signed integer (SQL `integer`); values are [`Value::Int`] within range.
    Int32,
    /// 16-bit signed integer (SQL `smallint`); values are [`Value::Int`] within range.
    Int16,
    /// 64-bit IEEE-754 floating point (SQL `double precision`); values are [`Value::Double`].
    Double,
    /// A boolean; values are [`Value::Bool`].
    Bool,
    /// Microseconds since 1970-01-01 00:00:00 (SQL `timestamp`, no time zone); values are
    /// [`Value::Timestamp`].
    Timestamp,
    /// Fixed-point decimal (SQL `numeric(precision, scale)`), at most 38 digits of which
    /// `scale` follow the point; values are [`Value::Numeric`] holding the value times
    /// 10^scale.
    Numeric {
        /// Total number of significant digits allowed (1..=38).
        precision: u8,
        /// Digits after the decimal point (0..=precision).
        scale: u8,
    },
    /// UTF-8 text of at most `max` characters (SQL `varchar(max)`; `u32::MAX` for `text`);
    /// values are [`Value::Bytes`] holding valid UTF-8. Its length is checked against the
    /// page when a row is stored, not when the table is created.
    Text(u32),
    /// Days since 1970-01-01 (SQL `date`, proleptic Gregorian); values are [`Value::Int`]
    /// within the 32-bit range, stored in 4 bytes, keyed like integers.
    Date,
}

impl ColumnType {
    /// True for the integer types (`Int`, `Int32`, `Int16`): their values are [`Value::Int`]
    /// and their keys are all [`key::encode_i64`].
    pub fn is_integer(self) -> bool {
        matches!(self, ColumnType::Int | ColumnType::Int32 | ColumnType::Int16)
    }

    /// Bytes a value of this type takes in a row when its size is fixed.
    pub fn fixed_size(self) -> Option<usize> {
        match self {
            ColumnType::Int | ColumnType::Double | ColumnType::Timestamp => Some(8),
            ColumnType::Int32 | ColumnType::Date => Some(4),
            ColumnType::Int16 => Some(2),
            ColumnType::Bool => Some(1),
            ColumnType::Numeric { .. } => Some(16),
            ColumnType::Char(n) => Some(n as usize),
            ColumnType::Bytes(_) | ColumnType::Text(_) => None,
        }
    }
}

/// A column: name, type and whether it may hold NULL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// Column name.
    pub name: String,
    /// Column type.
    pub ty: ColumnType,
    /// Whether the column may hold [`Value::Null`] (never the primary key).
    pub nullable: bool,
}

/// A secondary index on one column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexDef {
    /// Index name, unique within the table.
    pub name: String,
    /// Position of the indexed column.
    pub column: usize,
    /// No two rows may hold the same non-NULL value in the column.
    pub unique: bool,
}

/// A table's schema: columns, the primary-key column and secondary indexes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema {
    /// Columns in row order.
    pub columns: Vec<Column>,
    /// Position of the primary-key column (unique, never NULL).
    pub primary_key: usize,
    /// Secondary indexes.
    pub indexes: Vec<IndexDef>,
}

/// A typed value.
///
/// Doubles compare, hash and order by their IEEE-754 total order, with every NaN equal to
/// every other and `-0.0` equal to `0.0`, so values can be keys of maps.
#[derive(Debug, Clone)]
pub enum Value {
    /// An integer (for `Int`, `Int32` and `Int16` columns).
    Int(i64),
    /// A byte string (for `Char`, `Bytes` and `Text` columns).
    Bytes(Vec<u8>),
    /// SQL NULL (for nullable columns).
    Null,
    /// A floating-point number (for `Double` columns).
    Double(f64),
    /// A boolean (for `Bool` columns).
    Bool(bool),
    /// Microseconds since 1970-01-01 00:00:00 (for `Timestamp` columns).
    Timestamp(i64),
    /// A fixed-point number: the value times 10^scale of its column (for `Numeric`
    /// columns; see [`parse_decimal`] and [`format_decimal`]).
    Numeric(i128),
}

/// `f64` bits made comparable: NaNs are one value, `-0.0` is `0.0`, then the sign-flip trick
/// turns IEEE order into unsigned order.
fn double_order_bits(v: f64) -> u64 {
    let v = if v.is_nan() {
        f64::NAN
    } else if v == 0.0 {
        0.0
    } else {
        v
    };
    let b = v.to_bits();
    if b >> 63 == 1 {
        !b
    } else {
        b ^ (1 << 63)
    }
}

impl Value {
    fn rank(&self) -> u8 {
        match self {
            Value::Int(_) => 0,
            Value::Bytes(_) => 1,
            Value::Null => 2,
            Value::Double(_) => 3,
            Value::Bool(_) => 4,
            Value::Timestamp(_) => 5,
            Value::Numeric(_) => 6,
        }
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}
impl Eq for Value {}
impl PartialOrd for Value {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Value {
    /// Values of one variant in their natural order (doubles by IEEE total order with NaN
    /// last); values of different variants by variant.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        match (self, other) {
            (Value::Int(a), Value::Int(b)) => a.cmp(b),
            (Value::Bytes(a), Value::Bytes(b)) => a.cmp(b),
            (Value::Null, Value::Null) => std::cmp::Ordering::Equal,
            (Value::Double(a), Value::Double(b)) => double_order_bits(*a).cmp(&double_order_bits(*b)),
            (Value::Bool(a), Value::Bool(b)) => a.cmp(b),
            (Value::Timestamp(a), Value::Timestamp(b)) => a.cmp(b),
            (Value::Numeric(a), Value::Numeric(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}
impl std::hash::Hash for Value {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.rank().hash(state);
        match self {
            Value::Int(v) | Value::Timestamp(v) => v.hash(state),
            Value::Bytes(b) => b.hash(state),
            Value::Null => {}
            Value::Double(d) => double_order_bits(*d).hash(state),
            Value::Bool(b) => b.hash(state),
            Value::Numeric(n) => n.hash(state),
        }
    }
}

impl std::fmt::Display for Value {
    /// A short human-readable form (byte strings as lossy UTF-8 without trailing zero
    /// padding, numerics as their scaled integer).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Int(v) => write!(f, "{v}"),
            Value::Bytes(b) => write!(f, "'{}'", String::from_utf8_lossy(b).trim_end_matches('\0')),
            Value::Null => write!(f, "NULL"),
            Value::Double(d) => write!(f, "{d}"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Timestamp(t) => write!(f, "{t}µs"),
            Value::Numeric(n) => write!(f, "{n}e-scale"),
        }
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Bytes(v.as_bytes().to_vec())
    }
}
impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Self {
        Value::Bytes(v)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Double(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}

impl Value {
    /// The integer, if this is an `Int`.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(v) => Some(*v),
            _ => None,
        }
    }
    /// The bytes, if this is a `Bytes`.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Bytes(b) => Some(b),
            _ => None,
        }
    }
    /// True for [`Value::Null`].
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }
    fn kind(&self) -> &'static str {
        match self {
            Value::Int(_) => "an integer",
            Value::Bytes(_) => "bytes",
            Value::Null => "NULL",
            Value::Double(_) => "a double",
            Value::Bool(_) => "a boolean",
            Value::Timestamp(_) => "a timestamp",
            Value::Numeric(_) => "a numeric",
        }
    }
}

/// Largest precision of a `Numeric` column (what an `i128` holds).
pub const NUMERIC_MAX_PRECISION: u8 = 38;

/// Parses a decimal literal (`-12.345`, `+7`, `.5`, `1e3`) into its value times 10^scale,
/// rounding half away from zero like PostgreSQL; `None` if it is not a number or does not fit.
pub fn parse_decimal(s: &str, scale: u8) -> Option<i128> {
    let s = s.trim();
    let (neg, s) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let (mant, exp) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], s[i + 1..].parse::<i32>().ok()?),
        None => (s, 0),
    };
    let (int_part, frac_part) = match mant.find('.') {
        Some(i) => (&mant[..i], &mant[i + 1..]),
        None => (mant, ""),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return None;
    }
    if !int_part.bytes().chain(frac_part.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    // digits × 10^(exp - frac_len), then × 10^scale.
    let mut digits: Vec<u8> = int_part.bytes().chain(frac_part.bytes()).map(|b| b - b'0').collect();
    let shift = exp as i64 - frac_part.len() as i64 + i64::from(scale);
    let mut round_up = false;
    if shift < 0 {
        let cut = (-shift) as usize;
        if cut > digits.len() {
            digits.clear();
        } else {
            let keep = digits.len() - cut;
            round_up = digits[keep] >= 5;
            digits.truncate(keep);
        }
    }
    let mut v: i128 = 0;
    for d in digits {
        v = v.checked_mul(10)?.checked_add(i128::from(d))?;
    }
    if shift > 0 {
        v = v.checked_mul(10i128.checked_pow(u32::try_from(shift).ok()?)?)?;
    }
    if round_up {
        v = v.checked_add(1)?;
    }
    Some(if neg { -v } else { v })
}

/// Formats a value times 10^scale as a decimal with exactly `scale` digits after the point.
pub fn format_decimal(v: i128, scale: u8) -> String {
    let digits = v.unsigned_abs().to_string();
    let scale = scale as usize;
    let sign = if v < 0 { "-" } else { "" };
    if scale == 0 {
        return format!("{sign}{digits}");
    }
    let padded = if digits.len() <= scale {
        format!("{}{digits}", "0".repeat(scale + 1 - digits.len()))
    } else {
        digits
    };
    let (i, f) = padded.split_at(padded.len() - scale);
    format!("{sign}{i}.{f}")
}

impl Schema {
    /// A schema whose primary key is column 0, whose columns are all NOT NULL, and which has
    /// no secondary indexes.
    pub fn new(columns: Vec<(&str, ColumnType)>) -> Self {
        Self {
            columns: columns
                .into_iter()
                .map(|(n, ty)| Column { name: n.to_string(), ty, nullable: false })
                .collect(),
            primary_key: 0,
            indexes: Vec::new(),
        }
    }

    /// Makes the named column nullable.
    pub fn with_nullable(mut self, column: &str) -> Result<Self> {
        let col = self.column_index(column)?;
        self.columns[col].nullable = true;
        Ok(self)
    }

    /// Makes the named column the primary key.
    pub fn with_primary_key(mut self, column: &str) -> Result<Self> {
        self.primary_key = self.column_index(column)?;
        Ok(self)
    }

    /// Adds a secondary index on the named column.
    pub fn with_index(mut self, name: &str, column: &str) -> Result<Self> {
        let col = self.column_index(column)?;
        self.indexes.push(IndexDef { name: name.to_string(), column: col, unique: false });
        Ok(self)
    }

    /// Adds a unique secondary index on the named column (NULLs do not conflict).
    pub fn with_unique_index(mut self, name: &str, column: &str) -> Result<Self> {
        let col = self.column_index(column)?;
        self.indexes.push(IndexDef { name: name.to_string(), column: col, unique: true });
        Ok(self)
    }

    /// Position of the column called `name`.
    pub fn column_index(&self, name: &str) -> Result<usize> {
        self.columns
            .iter()
            .position(|c| c.name == name)
            .ok_or_else(|| Error::NotFound(format!("column `{name}`")))
    }

    /// True when some column is nullable (rows then start with a null bitmap).
    pub fn has_nullable(&self) -> bool {
        self.columns.iter().any(|c| c.nullable)
    }

    fn bitmap_bytes(&self) -> usize {
        if self.has_nullable() {
            self.columns.len().div_ceil(8)
        } else {
            0
        }
    }

    /// Checks the schema itself (names, types, key).
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidArgument(m));
        if self.columns.is_empty() {
            return bad("a schema needs at least one column".into());
        }
        if self.primary_key >= self.columns.len() {
            return bad(format!("primary key column {} does not exist", self.primary_key));
        }
        if self.columns[self.primary_key].nullable {
            return bad(format!(
                "primary key column `{}` cannot be nullable",
                self.columns[self.primary_key].name
            ));
        }
        for (i, c) in self.columns.iter().enumerate() {
            if c.name.is_empty() || c.name.len() > 255 {
                return bad(format!("column {i} needs a name of 1 to 255 bytes"));
            }
            if self.columns[..i].iter().any(|o| o.name == c.name) {
                return bad(format!("column `{}` appears twice", c.name));
            }
            match c.ty {
                ColumnType::Char(0) | ColumnType::Bytes(0) | ColumnType::Text(0) => {
                    return bad(format!("column `{}` has zero length", c.name));
                }
                ColumnType::Numeric { precision, scale }
                    if precision == 0 || precision > NUMERIC_MAX_PRECISION || scale > precision =>
                {
                    return bad(format!(
                        "column `{}`: numeric({precision}, {scale}) needs 1 <= precision <= {NUMERIC_MAX_PRECISION} and scale <= precision",
                        c.name
                    ));
                }
                _ => {}
            }
        }
        for (i, ix) in self.indexes.iter().enumerate() {
            if ix.column >= self.columns.len() {
                return bad(format!("index `{}` names column {} which does not exist", ix.name, ix.column));
            }
            if self.indexes[..i].iter().any(|o| o.name == ix.name) {
                return bad(format!("index `{}` appears twice", ix.name));
            }
        }
        Ok(())
    }

    /// Largest encoded row this schema allows (`Text` columns count only their length
    /// prefix: their rows are checked against the page when stored).
    pub fn max_row_bytes(&self) -> usize {
        self.bitmap_bytes()
            + self
                .columns
                .iter()
                .map(|c| match c.ty {
                    ColumnType::Bytes(max) => 4 + max as usize,
                    ColumnType::Text(_) => 4,
                    ty => ty.fixed_size().expect("fixed-size type"),
                })
                .sum::<usize>()
    }

    /// Checks `value` against column `col`; `table` is for the message.
    pub fn check_value(&self, table: &str, col: usize, value: &Value) -> Result<()> {
        let c = &self.columns[col];
        let wrong = |what: String| {
            Err(Error::InvalidArgument(format!("table `{table}`, column `{}`: {what}", c.name)))
        };
        match (c.ty, value) {
            (_, Value::Null) if c.nullable => Ok(()),
            (_, Value::Null) => wrong("NULL in a NOT NULL column".into()),
            (ColumnType::Int, Value::Int(_)) => Ok(()),
            (ColumnType::Int32, Value::Int(v)) if i32::try_from(*v).is_err() => {
                wrong(format!("{v} is out of range for a 32-bit integer"))
            }
            (ColumnType::Date, Value::Int(v)) if i32::try_from(*v).is_err() => {
                wrong(format!("{v} days is out of range for a date"))
            }
            (ColumnType::Date, Value::Int(_)) => Ok(()),
            (ColumnType::Int16, Value::Int(v)) if i16::try_from(*v).is_err() => {
                wrong(format!("{v} is out of range for a 16-bit integer"))
            }
            (ColumnType::Int32 | ColumnType::Int16, Value::Int(_)) => Ok(()),
            (ColumnType::Double, Value::Double(_)) => Ok(()),
            (ColumnType::Bool, Value::Bool(_)) => Ok(()),
            (ColumnType::Timestamp, Value::Timestamp(_)) => Ok(()),
            (ColumnType::Numeric { precision, scale }, Value::Numeric(v)) => {
                if v.unsigned_abs() >= 10u128.pow(u32::from(precision)) {
                    wrong(format!(
                        "{} needs more than the column's precision {precision}",
                        format_decimal(*v, scale)
                    ))
                } else {
                    Ok(())
                }
            }
            (ColumnType::Char(n) | ColumnType::Bytes(n), Value::Bytes(b)) if b.len() > n as usize => {
                wrong(format!("value of {} bytes exceeds the column's {n}", b.len()))
            }
            (ColumnType::Char(_) | ColumnType::Bytes(_), Value::Bytes(_)) => Ok(()),
            (ColumnType::Text(n), Value::Bytes(b)) => match std::str::from_utf8(b) {
                Err(e) => wrong(format!("text is not valid UTF-8: {e}")),
                Ok(s) if n != u32::MAX && s.chars().count() > n as usize => {
                    wrong(format!("value of {} characters exceeds the column's {n}", s.chars().count()))
                }
                Ok(_) => Ok(()),
            },
            (ty, v) => wrong(format!("expected {ty:?}, got {}", v.kind())),
        }
    }

    /// Validates and encodes a full row.
    pub fn encode_row(&self, table: &str, row: &[Value], out: &mut Vec<u8>) -> Result<()> {
        if row.len() != self.columns.len() {
            return Err(Error::InvalidArgument(format!(
                "table `{table}` has {} columns, the row has {} values",
                self.columns.len(),
                row.len()
            )));
        }
        out.clear();
        let bitmap = self.bitmap_bytes();
        out.resize(bitmap, 0);
        for (i, v) in row.iter().enumerate() {
            self.check_value(table, i, v)?;
            match (self.columns[i].ty, v) {
                (_, Value::Null) => out[i / 8] |= 1 << (i % 8),
                (ColumnType::Int | ColumnType::Timestamp, Value::Int(x) | Value::Timestamp(x)) => {
                    out.extend_from_slice(&x.to_le_bytes())
                }
                (ColumnType::Int32 | ColumnType::Date, Value::Int(x)) => {
                    out.extend_from_slice(&(*x as i32).to_le_bytes())
                }
                (ColumnType::Int16, Value::Int(x)) => out.extend_from_slice(&(*x as i16).to_le_bytes()),
                (ColumnType::Double, Value::Double(x)) => out.extend_from_slice(&x.to_bits().to_le_bytes()),
                (ColumnType::Bool, Value::Bool(x)) => out.push(u8::from(*x)),
                (ColumnType::Numeric { .. }, Value::Numeric(x)) => out.extend_from_slice(&x.to_le_bytes()),
                (ColumnType::Char(n), Value::Bytes(b)) => {
                    out.extend_from_slice(b);
                    out.resize(out.len() + n as usize - b.len(), 0);
                }
                (ColumnType::Bytes(_) | ColumnType::Text(_), Value::Bytes(b)) => {
                    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
                    out.extend_from_slice(b);
                }
                _ => unreachable!("check_value accepted a mismatched type"),
            }
        }
        Ok(())
    }

    /// Appends the order-preserving key encoding of non-NULL `v` (of column type `ty`) to
    /// `out`; byte strings raw when `raw_bytes`, else as a self-delimiting component.
    fn push_key(ty: ColumnType, v: &Value, raw_bytes: bool, out: &mut Vec<u8>) {
        match v {
            Value::Int(x) | Value::Timestamp(x) => out.extend_from_slice(&key::encode_i64(*x)),
            Value::Double(d) => out.extend_from_slice(&double_order_bits(*d).to_be_bytes()),
            Value::Bool(b) => out.push(u8::from(*b)),
            Value::Numeric(n) => out.extend_from_slice(&((*n as u128) ^ (1 << 127)).to_be_bytes()),
            Value::Bytes(b) if raw_bytes => out.extend_from_slice(b),
            Value::Bytes(b) => {
                // A char(n) value is stored zero-padded: key it the way it is stored.
                if let ColumnType::Char(n) = ty {
                    let mut padded = b.clone();
                    padded.resize(n as usize, 0);
                    key::push_bytes_component(out, &padded);
                } else {
                    key::push_bytes_component(out, b);
                }
            }
            Value::Null => unreachable!("NULL has no key encoding of its own"),
        }
    }

    /// Encodes a primary-key value as a B+tree key.
    pub fn primary_key_bytes(&self, table: &str, v: &Value) -> Result<Vec<u8>> {
        self.check_value(table, self.primary_key, v)?;
        let ty = self.columns[self.primary_key].ty;
        let mut out = Vec::with_capacity(16);
        match v {
            Value::Bytes(b) if b.is_empty() => {
                return Err(Error::InvalidArgument(format!("table `{table}`: empty primary key")));
            }
            Value::Bytes(b) if matches!(ty, ColumnType::Char(_)) => {
                // Stored zero-padded; the key is what the row holds.
                out.extend_from_slice(b);
                out.resize(ty.fixed_size().expect("char"), 0);
            }
            Value::Null => {
                return Err(Error::InvalidArgument(format!("table `{table}`: NULL primary key")));
            }
            _ => Self::push_key(ty, v, true, &mut out),
        }
        Ok(out)
    }

    /// The primary key of the row `row` (encoded, as [`Schema::primary_key_bytes`]).
    pub fn primary_key_of(&self, row: &RowView<'_>, out: &mut Vec<u8>) {
        self.try_primary_key_of(row, out).unwrap_or_else(|e| panic!("Schema::primary_key_of: {e}"))
    }

    /// [`Schema::primary_key_of`], with an error for a row that does not match the schema.
    pub fn try_primary_key_of(&self, row: &RowView<'_>, out: &mut Vec<u8>) -> Result<()> {
        let col = self.primary_key;
        let ty = self.columns[col].ty;
        match ty {
            ColumnType::Char(_) | ColumnType::Bytes(_) | ColumnType::Text(_) => {
                out.extend_from_slice(row.try_bytes(col)?)
            }
            _ => Self::push_key(ty, &row.try_value(col)?, true, out),
        }
        Ok(())
    }

    /// Encodes a secondary-index key of column `col`: the indexed value as an
    /// order-preserving component, followed by the primary key (which makes entries unique).
    pub fn secondary_key_bytes(&self, col: usize, v: &Value, pk: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + pk.len());
        self.secondary_prefix(col, v, &mut out);
        out.extend_from_slice(pk);
        out
    }

    /// The prefix all secondary keys of value `v` in column `col` share.
    pub fn secondary_prefix(&self, col: usize, v: &Value, out: &mut Vec<u8>) {
        let c = &self.columns[col];
        if c.nullable {
            if v.is_null() {
                out.push(2);
                return;
            }
            out.push(1);
        }
        Self::push_key(c.ty, v, false, out);
    }

    /// Length of the value component at the start of secondary key `k` of column `col`
    /// (`None` if `k` is malformed).
    pub fn secondary_value_len(&self, col: usize, k: &[u8]) -> Option<usize> {
        let c = &self.columns[col];
        let (tag, rest) = if c.nullable {
            match k.first()? {
                2 => return Some(1),
                1 => (1, &k[1..]),
                _ => return None,
            }
        } else {
            (0, k)
        };
        let len = match c.ty {
            ColumnType::Int
            | ColumnType::Int32
            | ColumnType::Int16
            | ColumnType::Timestamp
            | ColumnType::Date => 8,
            ColumnType::Double => 8,
            ColumnType::Bool => 1,
            ColumnType::Numeric { .. } => 16,
            ColumnType::Char(_) | ColumnType::Bytes(_) | ColumnType::Text(_) => {
                let (_, after) = key::pop_bytes_component(rest)?;
                rest.len() - after.len()
            }
        };
        (rest.len() >= len).then_some(tag + len)
    }
}

/// Where the columns of a schema's rows start when that does not depend on the row: for a
/// schema without nullable columns, every column that only fixed-size columns precede starts
/// at the same offset in every row. A table keeps one for its (immutable) schema, so reading
/// such a column is one bounds check instead of a walk over the columns before it.
#[derive(Debug)]
pub(crate) struct RowLayout {
    /// Where each column lies when that is constant; `start` is [`RowLayout::VARIES`] for the
    /// others (the slow path finds them).
    cols: Box<[ColAt]>,
}

/// Where a column lies in every row of a [`RowLayout`]'s schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ColAt {
    /// Offset of its first byte ([`RowLayout::VARIES`]: not constant).
    start: u32,
    /// Its bytes.
    len: u32,
    /// An integer or timestamp column (read by [`RowView::try_int`]'s fast path).
    int: bool,
}

impl RowLayout {
    const VARIES: u32 = u32::MAX;

    /// The layout of `schema`'s rows.
    pub(crate) fn of(schema: &Schema) -> Self {
        let varies = ColAt { start: Self::VARIES, len: 0, int: false };
        let mut cols = vec![varies; schema.columns.len()];
        if !schema.has_nullable() {
            let mut off = 0usize;
            for (c, at) in schema.columns.iter().zip(cols.iter_mut()) {
                let Some(n) = c.ty.fixed_size() else { break };
                let int = c.ty.is_integer() || matches!(c.ty, ColumnType::Timestamp | ColumnType::Date);
                *at = ColAt { start: off as u32, len: n as u32, int };
                off += n;
            }
        }
        Self { cols: cols.into() }
    }
}

/// A little-endian integer of 8, 4 or 2 bytes, sign-extended (0 for none: a NULL).
#[inline]
fn int_le(b: &[u8]) -> i64 {
    match *b {
        [a0, a1, a2, a3, a4, a5, a6, a7] => i64::from_le_bytes([a0, a1, a2, a3, a4, a5, a6, a7]),
        [a0, a1, a2, a3] => i64::from(i32::from_le_bytes([a0, a1, a2, a3])),
        [a0, a1] => i64::from(i16::from_le_bytes([a0, a1])),
        _ => 0,
    }
}

/// A row as stored, decoded lazily column by column.
#[derive(Clone, Copy)]
pub struct RowView<'a> {
    schema: &'a Schema,
    bytes: &'a [u8],
    /// Constant column places of the schema ([`RowLayout`]); empty when not known.
    cols: &'a [ColAt],
}

impl std::fmt::Debug for RowView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.try_values() {
            Ok(v) => f.debug_list().entries(v).finish(),
            Err(e) => write!(f, "<{} row bytes: {e}>", self.bytes.len()),
        }
    }
}

impl<'a> RowView<'a> {
    /// Wraps encoded row bytes.
    pub fn new(schema: &'a Schema, bytes: &'a [u8]) -> Self {
        Self { schema, bytes, cols: &[] }
    }

    /// Wraps encoded row bytes of `schema`, whose [`RowLayout`] is `layout`.
    pub(crate) fn with_layout(schema: &'a Schema, layout: &'a RowLayout, bytes: &'a [u8]) -> Self {
        debug_assert_eq!(layout.cols.len(), schema.columns.len(), "layout of another schema");
        Self { schema, bytes, cols: &layout.cols }
    }

    /// True if column `col` holds NULL (false for a column the schema does not have, or a row
    /// too short to hold its null bitmap).
    pub fn is_null(&self, col: usize) -> bool {
        self.schema.has_nullable()
            && col < self.schema.columns.len()
            && self.bytes.get(col / 8).is_some_and(|b| b & (1 << (col % 8)) != 0)
    }

    /// A row that does not hold what its schema says.
    fn mismatch(&self, detail: String) -> Error {
        Error::Corruption {
            file: "row".into(),
            offset: 0,
            detail: format!("{detail}: the row does not match its schema"),
        }
    }

    /// Where column `col` lies in the row: `(offset, length)`, length 0 for a NULL. Errors: a
    /// column the schema does not have (`InvalidArgument`), or row bytes that do not hold the
    /// schema's columns (`Corruption`).
    fn span(&self, col: usize) -> Result<(usize, usize)> {
        if let Some(at) = self.cols.get(col).filter(|at| at.start != RowLayout::VARIES) {
            let (start, len) = (at.start as usize, at.len as usize);
            if start + len <= self.bytes.len() {
                return Ok((start, len));
            }
            // A short row: the walk below names the column it ends in.
        }
        let cols = &self.schema.columns;
        if col >= cols.len() {
            return Err(Error::InvalidArgument(format!(
                "column {col} does not exist (the row has {} columns)",
                cols.len()
            )));
        }
        let short = |c: &Column, need: usize| {
            self.mismatch(format!(
                "a row of {} bytes ends inside column `{}` (it needs {need} bytes)",
                self.bytes.len(),
                c.name
            ))
        };
        let nullable = self.schema.has_nullable();
        let mut off = if nullable { cols.len().div_ceil(8) } else { 0 };
        if off > self.bytes.len() {
            return Err(self.mismatch(format!(
                "a row of {} bytes is shorter than its null bitmap ({off} bytes)",
                self.bytes.len()
            )));
        }
        for (i, c) in cols.iter().enumerate() {
            if nullable && self.bytes[i / 8] & (1 << (i % 8)) != 0 {
                if i == col {
                    return Ok((off, 0));
                }
                continue;
            }
            let (start, len) = match (c.ty.fixed_size(), c.ty) {
                (Some(n), _) => (off, n),
                (None, ColumnType::Bytes(max) | ColumnType::Text(max)) => {
                    let l = self.bytes.get(off..off + 4).ok_or_else(|| short(c, off + 4))?;
                    let l = u32::from_le_bytes(l.try_into().expect("4 bytes")) as usize;
                    // Text's maximum counts characters, each at most 4 bytes of UTF-8.
                    let limit = match c.ty {
                        ColumnType::Text(_) => (max as usize).saturating_mul(4),
                        _ => max as usize,
                    };
                    if l > limit {
                        return Err(self.mismatch(format!(
                            "column `{}` holds {l} bytes, more than its maximum of {limit}",
                            c.name
                        )));
                    }
                    (off + 4, l)
                }
                (None, ty) => unreachable!("{ty:?} has no fixed size and no length prefix"),
            };
            let end = start
                .checked_add(len)
                .filter(|&e| e <= self.bytes.len())
                .ok_or_else(|| short(c, start.saturating_add(len)))?;
            if i == col {
                return Ok((start, len));
            }
            off = end;
        }
        unreachable!("col < columns.len()")
    }

    /// Checks that column `col` exists and has a type `ok` accepts (`want` names them).
    fn expect_type(&self, col: usize, ok: fn(ColumnType) -> bool, want: &str) -> Result<()> {
        match self.schema.columns.get(col) {
            Some(c) if !ok(c.ty) => {
                Err(Error::InvalidArgument(format!("column `{}` is {:?}, not {want}", c.name, c.ty)))
            }
            _ => Ok(()),
        }
    }

    /// Integer value of column `col` (an integer of any width, or a timestamp's microseconds;
    /// 0 for NULL); an error if the column does not exist, is of another type, or the row bytes
    /// do not match the schema.
    #[inline]
    pub fn try_int(&self, col: usize) -> Result<i64> {
        // The fast path: an integer at a constant offset (one bounds check; scans read these
        // per row).
        if let Some(&ColAt { start, len, int: true }) = self.cols.get(col) {
            if let Some(b) = self.bytes.get(start as usize..start as usize + len as usize) {
                return Ok(int_le(b));
            }
        }
        self.try_int_walk(col)
    }

    /// [`RowView::try_int`] for a column not at a constant offset, or in error.
    fn try_int_walk(&self, col: usize) -> Result<i64> {
        self.expect_type(
            col,
            |t| t.is_integer() || matches!(t, ColumnType::Timestamp | ColumnType::Date),
            "an integer, timestamp or date",
        )?;
        let (o, l) = self.span(col)?;
        Ok(int_le(&self.bytes[o..o + l]))
    }

    /// Value of `Double` column `col` (0.0 for NULL); errors as [`RowView::try_int`].
    pub fn try_double(&self, col: usize) -> Result<f64> {
        self.expect_type(col, |t| t == ColumnType::Double, "Double")?;
        let (o, l) = self.span(col)?;
        if l == 0 {
            return Ok(0.0);
        }
        Ok(f64::from_bits(u64_at(self.bytes, o)))
    }

    /// Value of `Bool` column `col` (false for NULL); errors as [`RowView::try_int`].
    pub fn try_boolean(&self, col: usize) -> Result<bool> {
        self.expect_type(col, |t| t == ColumnType::Bool, "Bool")?;
        let (o, l) = self.span(col)?;
        Ok(l == 1 && self.bytes[o] != 0)
    }

    /// Value of `Numeric` column `col` times 10^scale (0 for NULL); errors as
    /// [`RowView::try_int`].
    pub fn try_numeric(&self, col: usize) -> Result<i128> {
        self.expect_type(col, |t| matches!(t, ColumnType::Numeric { .. }), "Numeric")?;
        let (o, l) = self.span(col)?;
        if l == 0 {
            return Ok(0);
        }
        Ok(i128::from_le_bytes(self.bytes[o..o + 16].try_into().expect("16 bytes")))
    }

    /// Bytes of column `col` (a `Char` column includes its zero padding; empty for NULL); an
    /// error if the column does not exist, is not `Char`, `Bytes` or `Text`, or the row bytes do
    /// not match the schema.
    pub fn try_bytes(&self, col: usize) -> Result<&'a [u8]> {
        self.expect_type(
            col,
            |t| matches!(t, ColumnType::Char(_) | ColumnType::Bytes(_) | ColumnType::Text(_)),
            "Char, Bytes or Text",
        )?;
        let (o, l) = self.span(col)?;
        Ok(&self.bytes[o..o + l])
    }

    /// Column `col` as a [`Value`]; an error if the column does not exist or the row bytes do
    /// not match the schema.
    pub fn try_value(&self, col: usize) -> Result<Value> {
        let Some(c) = self.schema.columns.get(col) else {
            return self.span(col).map(|_| Value::Null);
        };
        if self.is_null(col) {
            return Ok(Value::Null);
        }
        Ok(match c.ty {
            ColumnType::Int | ColumnType::Int32 | ColumnType::Int16 | ColumnType::Date => {
                Value::Int(self.try_int(col)?)
            }
            ColumnType::Timestamp => Value::Timestamp(self.try_int(col)?),
            ColumnType::Double => Value::Double(self.try_double(col)?),
            ColumnType::Bool => Value::Bool(self.try_boolean(col)?),
            ColumnType::Numeric { .. } => Value::Numeric(self.try_numeric(col)?),
            ColumnType::Char(_) | ColumnType::Bytes(_) | ColumnType::Text(_) => {
                Value::Bytes(self.try_bytes(col)?.to_vec())
            }
        })
    }

    /// All columns as values; an error if the row bytes do not match the schema.
    pub fn try_values(&self) -> Result<Vec<Value>> {
        (0..self.schema.columns.len()).map(|i| self.try_value(i)).collect()
    }

    /// Integer value of column `col` (0 for NULL).
    ///
    /// # Panics
    /// If the column does not exist or is not an integer or timestamp, or the row does not
    /// match its schema (a corrupt row); [`RowView::try_int`] returns those as errors.
    #[inline]
    pub fn int(&self, col: usize) -> i64 {
        match self.try_int(col) {
            Ok(v) => v,
            Err(e) => panic!("RowView::int({col}): {e}"),
        }
    }

    /// Value of `Double` column `col` (0.0 for NULL).
    ///
    /// # Panics
    /// As [`RowView::int`]; [`RowView::try_double`] returns errors.
    pub fn double(&self, col: usize) -> f64 {
        self.try_double(col).unwrap_or_else(|e| panic!("RowView::double({col}): {e}"))
    }

    /// Value of `Bool` column `col` (false for NULL).
    ///
    /// # Panics
    /// As [`RowView::int`]; [`RowView::try_boolean`] returns errors.
    pub fn boolean(&self, col: usize) -> bool {
        self.try_boolean(col).unwrap_or_else(|e| panic!("RowView::boolean({col}): {e}"))
    }

    /// Value of `Numeric` column `col` times 10^scale (0 for NULL).
    ///
    /// # Panics
    /// As [`RowView::int`]; [`RowView::try_numeric`] returns errors.
    pub fn numeric(&self, col: usize) -> i128 {
        self.try_numeric(col).unwrap_or_else(|e| panic!("RowView::numeric({col}): {e}"))
    }

    /// Bytes of column `col` (a `Char` column includes its zero padding; empty for NULL).
    ///
    /// # Panics
    /// If the column does not exist or is not `Char`, `Bytes` or `Text`, or the row does not
    /// match its schema; [`RowView::try_bytes`] returns those as errors.
    pub fn bytes(&self, col: usize) -> &'a [u8] {
        self.try_bytes(col).unwrap_or_else(|e| panic!("RowView::bytes({col}): {e}"))
    }

    /// Column `col` as a [`Value`].
    ///
    /// # Panics
    /// As [`RowView::int`] and [`RowView::bytes`]; [`RowView::try_value`] returns errors.
    pub fn value(&self, col: usize) -> Value {
        self.try_value(col).unwrap_or_else(|e| panic!("RowView::value({col}): {e}"))
    }

    /// All columns as values.
    ///
    /// # Panics
    /// If the row does not match its schema; [`RowView::try_values`] returns an error.
    pub fn to_values(&self) -> Vec<Value> {
        self.try_values().unwrap_or_else(|e| panic!("RowView::to_values: {e}"))
    }

    /// The encoded bytes.
    pub fn raw(&self) -> &'a [u8] {
        self.bytes
    }

    /// The schema the row is read with.
    pub fn schema(&self) -> &'a Schema {
        self.schema
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Schema {
        Schema::new(vec![
            ("sid", ColumnType::Int),
            ("c1", ColumnType::Int),
            ("data", ColumnType::Char(16)),
            ("note", ColumnType::Bytes(10)),
        ])
    }

    #[test]
    fn rows_round_trip() {
        let s = schema();
        let row = vec![Value::Int(-5), Value::Int(7), Value::from("abc"), Value::from("xyz")];
        let mut buf = Vec::new();
        s.encode_row("t", &row, &mut buf).unwrap();
        assert_eq!(buf.len(), 8 + 8 + 16 + 4 + 3);
        let v = RowView::new(&s, &buf);
        assert_eq!(v.int(0), -5);
        assert_eq!(v.int(1), 7);
        assert_eq!(&v.bytes(2)[..3], b"abc");
        assert_eq!(v.bytes(3), b"xyz");
    }

    #[test]
    fn constant_offsets_read_what_the_walk_reads() {
        let tail_var = Schema::new(vec![
            ("a", ColumnType::Int),
            ("b", ColumnType::Char(3)),
            ("c", ColumnType::Int32),
            ("v", ColumnType::Bytes(10)),
            ("d", ColumnType::Int),
        ]);
        let l = RowLayout::of(&tail_var);
        let v = RowLayout::VARIES;
        let starts: Vec<u32> = l.cols.iter().map(|c| c.start).collect();
        assert_eq!(starts, [0, 8, 11, v, v]);
        let ints: Vec<bool> = l.cols.iter().map(|c| c.int).collect();
        assert_eq!(ints, [true, false, true, false, false], "constant integers");
        let mut nullable = tail_var.clone();
        nullable.columns[4].nullable = true;
        assert!(RowLayout::of(&nullable).cols.iter().all(|c| c.start == v && !c.int));
        let row =
            vec![Value::Int(-3), Value::from("xyz"), Value::Int(70_000), Value::from("hello"), Value::Int(9)];
        let mut buf = Vec::new();
        tail_var.encode_row("t", &row, &mut buf).unwrap();
        let (fast, slow) = (RowView::with_layout(&tail_var, &l, &buf), RowView::new(&tail_var, &buf));
        for (col, want) in row.iter().enumerate() {
            assert_eq!(fast.span(col).unwrap(), slow.span(col).unwrap(), "column {col}");
            assert_eq!(&fast.try_value(col).unwrap(), want);
        }
        for col in [0, 2, 4] {
            assert_eq!(fast.try_int(col).unwrap(), slow.try_int(col).unwrap(), "column {col}");
        }
        assert_eq!(fast.int(2), 70_000);
        let e = fast.try_int(1).unwrap_err().to_string();
        assert!(e.contains("`b`") && e.contains("not an integer"), "{e}");
        // A row cut inside a fixed column is the walk's error, naming the column.
        let short = RowView::with_layout(&tail_var, &l, &buf[..10]);
        let e = short.try_int(2).unwrap_err().to_string();
        assert!(e.contains("`b`"), "{e}");
        assert!(short.try_int(7).is_err());
    }

    #[test]
    fn wrong_rows_name_table_and_column() {
        let s = schema();
        let mut buf = Vec::new();
        let e = s.encode_row("t", &[Value::Int(1)], &mut buf).unwrap_err().to_string();
        assert!(e.contains("4 columns") && e.contains("1 values"), "{e}");
        let e = s
            .encode_row("t", &[Value::Int(1), Value::from("x"), Value::from("a"), Value::from("b")], &mut buf)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`c1`") && e.contains("expected Int"), "{e}");
        let e = s
            .encode_row(
                "t",
                &[Value::Int(1), Value::Int(2), Value::from("a"), Value::from("01234567890")],
                &mut buf,
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("`note`") && e.contains("11 bytes"), "{e}");
    }

    #[test]
    fn schema_validation() {
        assert!(Schema::new(vec![]).validate().is_err());
        assert!(Schema::new(vec![("a", ColumnType::Int), ("a", ColumnType::Int)]).validate().is_err());
        assert!(schema().with_index("ix", "nope").is_err());
        assert!(schema().with_index("ix", "c1").unwrap().validate().is_ok());
    }

    fn typed() -> Schema {
        Schema::new(vec![
            ("id", ColumnType::Int32),
            ("small", ColumnType::Int16),
            ("d", ColumnType::Double),
            ("b", ColumnType::Bool),
            ("ts", ColumnType::Timestamp),
            ("n", ColumnType::Numeric { precision: 10, scale: 2 }),
            ("t", ColumnType::Text(5)),
            ("c", ColumnType::Char(4)),
        ])
        .with_nullable("d")
        .unwrap()
        .with_nullable("t")
        .unwrap()
    }

    #[test]
    fn typed_rows_with_nulls_round_trip() {
        let s = typed();
        s.validate().unwrap();
        let row = vec![
            Value::Int(-7),
            Value::Int(300),
            Value::Null,
            Value::Bool(true),
            Value::Timestamp(1_700_000_000_000_000),
            Value::Numeric(-12345),
            Value::Null,
            Value::from("ab"),
        ];
        let mut buf = Vec::new();
        s.encode_row("t", &row, &mut buf).unwrap();
        // bitmap + 4 + 2 + 1 + 8 + 16 + 4 (char); the NULLs take nothing.
        assert_eq!(buf.len(), 1 + 4 + 2 + 1 + 8 + 16 + 4);
        let v = RowView::new(&s, &buf);
        assert!(v.is_null(2) && v.is_null(6) && !v.is_null(0));
        assert_eq!(v.int(0), -7);
        assert_eq!(v.int(1), 300);
        let mut back = row.clone();
        back[7] = Value::Bytes(b"ab\0\0".to_vec());
        assert_eq!(v.to_values(), back);
        let row2 = vec![
            Value::Int(1),
            Value::Int(2),
            Value::Double(2.5),
            Value::Bool(false),
            Value::Timestamp(0),
            Value::Numeric(1),
            Value::from("héllo"),
            Value::from("abcd"),
        ];
        s.encode_row("t", &row2, &mut buf).unwrap();
        let v = RowView::new(&s, &buf);
        assert_eq!(v.double(2), 2.5);
        assert_eq!(v.bytes(6), "héllo".as_bytes());
        assert_eq!(v.to_values(), row2);
    }

    #[test]
    fn typed_values_are_checked() {
        let s = typed();
        let mut buf = Vec::new();
        let base = vec![
            Value::Int(1),
            Value::Int(2),
            Value::Null,
            Value::Bool(true),
            Value::Timestamp(0),
            Value::Numeric(0),
            Value::Null,
            Value::from("a"),
        ];
        let bad = |i: usize, v: Value| {
            let mut r = base.clone();
            r[i] = v;
            let mut buf = Vec::new();
            s.encode_row("t", &r, &mut buf).unwrap_err().to_string()
        };
        assert!(bad(0, Value::Int(1 << 40)).contains("out of range"));
        assert!(bad(1, Value::Int(40_000)).contains("`small`"));
        assert!(bad(3, Value::Null).contains("NOT NULL"));
        assert!(bad(5, Value::Numeric(10_000_000_000)).contains("precision 10"));
        assert!(bad(6, Value::from("toolong")).contains("7 characters"));
        assert!(bad(6, Value::Bytes(vec![0xff])).contains("UTF-8"));
        assert!(bad(2, Value::Int(1)).contains("expected Double"));
        s.encode_row("t", &base, &mut buf).unwrap();
        assert!(Schema::new(vec![("a", ColumnType::Int)]).with_nullable("a").unwrap().validate().is_err());
        let n =
            Schema::new(vec![("a", ColumnType::Int), ("n", ColumnType::Numeric { precision: 40, scale: 0 })]);
        assert!(n.validate().unwrap_err().to_string().contains("numeric(40, 0)"));
    }

    #[test]
    fn key_order_is_value_order() {
        let s = typed();
        let enc = |col: usize, v: &Value| {
            let mut out = Vec::new();
            s.secondary_prefix(col, v, &mut out);
            assert_eq!(s.secondary_value_len(col, &out), Some(out.len()), "{v:?}");
            out
        };
        let cases: Vec<(usize, Vec<Value>)> = vec![
            (0, [-5i64, -1, 0, 3, 1 << 20].map(Value::Int).to_vec()),
            (
                2,
                [f64::NEG_INFINITY, -2.5, -0.0, 1e-300, 7.0, f64::INFINITY, f64::NAN]
                    .map(Value::Double)
                    .into_iter()
                    .chain([Value::Null])
                    .collect(),
            ),
            (3, vec![Value::Bool(false), Value::Bool(true)]),
            (4, [-1i64, 0, 5].map(Value::Timestamp).to_vec()),
            (5, [-100_000i128, -1, 0, 1, 99_999].map(Value::Numeric).to_vec()),
            (6, vec![Value::from(""), Value::from("a"), Value::from("a\0"), Value::from("b"), Value::Null]),
        ];
        for (col, vals) in cases {
            for w in vals.windows(2) {
                assert!(enc(col, &w[0]) < enc(col, &w[1]), "column {col}: {:?} < {:?}", w[0], w[1]);
            }
        }
        assert_eq!(enc(2, &Value::Double(-0.0)), enc(2, &Value::Double(0.0)));
        // Integer keys of every width are the 64-bit encoding (one fast path for all).
        let pk = s.primary_key_bytes("t", &Value::Int(42)).unwrap();
        assert_eq!(pk, key::encode_i64(42));
    }

    #[test]
    fn decimals_parse_round_and_format() {
        assert_eq!(parse_decimal("12.345", 2), Some(1235));
        assert_eq!(parse_decimal("-12.345", 2), Some(-1235));
        assert_eq!(parse_decimal("12.344", 2), Some(1234));
        assert_eq!(parse_decimal(".5", 0), Some(1));
        assert_eq!(parse_decimal("+7", 3), Some(7000));
        assert_eq!(parse_decimal("1.5e2", 1), Some(1500));
        assert_eq!(parse_decimal("abc", 2), None);
        assert_eq!(parse_decimal("1.2.3", 2), None);
        assert_eq!(parse_decimal("", 2), None);
        assert_eq!(format_decimal(1235, 2), "12.35");
        assert_eq!(format_decimal(-5, 2), "-0.05");
        assert_eq!(format_decimal(0, 3), "0.000");
        assert_eq!(format_decimal(42, 0), "42");
    }
}
