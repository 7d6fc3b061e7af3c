//! Schemas, values and the row encoding.
//!
//! Owns: column types, [`Schema`], [`Value`], and how a row becomes bytes in a heap page.
//! Row layout: columns in schema order; `Int` as 8 bytes little-endian; `Char(n)` as exactly
//! `n` bytes (shorter values are zero-padded); `Bytes(max)` as a u32 length then the bytes.
//! Invariant: a row is validated against its schema before it is encoded; errors name the
//! table, the column and what was expected.

use crate::btree::key;
use crate::error::{Error, Result};

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
}

/// A column: name and type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// Column name.
    pub name: String,
    /// Column type.
    pub ty: ColumnType,
}

/// A secondary (non-unique) index on one column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexDef {
    /// Index name, unique within the table.
    pub name: String,
    /// Position of the indexed column.
    pub column: usize,
}

/// A table's schema: columns, the primary-key column and secondary indexes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema {
    /// Columns in row order.
    pub columns: Vec<Column>,
    /// Position of the primary-key column (unique; `Int` or `Bytes`/`Char`).
    pub primary_key: usize,
    /// Secondary indexes.
    pub indexes: Vec<IndexDef>,
}

/// A typed value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Value {
    /// An integer.
    Int(i64),
    /// A byte string (for `Char` and `Bytes` columns).
    Bytes(Vec<u8>),
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

impl Value {
    /// The integer, if this is an `Int`.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(v) => Some(*v),
            Value::Bytes(_) => None,
        }
    }
    /// The bytes, if this is a `Bytes`.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Bytes(b) => Some(b),
            Value::Int(_) => None,
        }
    }
}

impl Schema {
    /// A schema whose primary key is column 0 and which has no secondary indexes.
    pub fn new(columns: Vec<(&str, ColumnType)>) -> Self {
        Self {
            columns: columns.into_iter().map(|(n, ty)| Column { name: n.to_string(), ty }).collect(),
            primary_key: 0,
            indexes: Vec::new(),
        }
    }

    /// Adds a secondary index on the named column.
    pub fn with_index(mut self, name: &str, column: &str) -> Result<Self> {
        let col = self.column_index(column)?;
        self.indexes.push(IndexDef { name: name.to_string(), column: col });
        Ok(self)
    }

    /// Position of the column called `name`.
    pub fn column_index(&self, name: &str) -> Result<usize> {
        self.columns
            .iter()
            .position(|c| c.name == name)
            .ok_or_else(|| Error::NotFound(format!("column `{name}`")))
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
        for (i, c) in self.columns.iter().enumerate() {
            if c.name.is_empty() || c.name.len() > 255 {
                return bad(format!("column {i} needs a name of 1 to 255 bytes"));
            }
            if self.columns[..i].iter().any(|o| o.name == c.name) {
                return bad(format!("column `{}` appears twice", c.name));
            }
            if let ColumnType::Char(0) | ColumnType::Bytes(0) = c.ty {
                return bad(format!("column `{}` has zero length", c.name));
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

    /// Largest encoded row this schema allows.
    pub fn max_row_bytes(&self) -> usize {
        self.columns
            .iter()
            .map(|c| match c.ty {
                ColumnType::Int => 8,
                ColumnType::Char(n) => n as usize,
                ColumnType::Bytes(max) => 4 + max as usize,
            })
            .sum()
    }

    /// Checks `value` against column `col`; `table` is for the message.
    pub fn check_value(&self, table: &str, col: usize, value: &Value) -> Result<()> {
        let c = &self.columns[col];
        let wrong = |what: String| {
            Err(Error::InvalidArgument(format!("table `{table}`, column `{}`: {what}", c.name)))
        };
        match (c.ty, value) {
            (ColumnType::Int, Value::Int(_)) => Ok(()),
            (ColumnType::Char(n) | ColumnType::Bytes(n), Value::Bytes(b)) if b.len() > n as usize => {
                wrong(format!("value of {} bytes exceeds the column's {n}", b.len()))
            }
            (ColumnType::Char(_) | ColumnType::Bytes(_), Value::Bytes(_)) => Ok(()),
            (ty, v) => wrong(format!(
                "expected {ty:?}, got {}",
                if v.as_int().is_some() { "an integer" } else { "bytes" }
            )),
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
        for (i, v) in row.iter().enumerate() {
            self.check_value(table, i, v)?;
            match (self.columns[i].ty, v) {
                (ColumnType::Int, Value::Int(x)) => out.extend_from_slice(&x.to_le_bytes()),
                (ColumnType::Char(n), Value::Bytes(b)) => {
                    out.extend_from_slice(b);
                    out.resize(out.len() + n as usize - b.len(), 0);
                }
                (ColumnType::Bytes(_), Value::Bytes(b)) => {
                    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
                    out.extend_from_slice(b);
                }
                _ => unreachable!("check_value accepted a mismatched type"),
            }
        }
        Ok(())
    }

    /// Encodes a primary-key value as a B+tree key.
    pub fn primary_key_bytes(&self, table: &str, v: &Value) -> Result<Vec<u8>> {
        self.check_value(table, self.primary_key, v)?;
        Ok(match v {
            Value::Int(x) => key::encode_i64(*x).to_vec(),
            Value::Bytes(b) => {
                if b.is_empty() {
                    return Err(Error::InvalidArgument(format!("table `{table}`: empty primary key")));
                }
                b.clone()
            }
        })
    }

    /// Encodes a secondary-index key: the indexed value as an order-preserving component,
    /// followed by the primary key (which makes entries unique).
    pub fn secondary_key_bytes(v: &Value, pk: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + pk.len());
        Self::secondary_prefix(v, &mut out);
        out.extend_from_slice(pk);
        out
    }

    /// The prefix all secondary keys of value `v` share.
    pub fn secondary_prefix(v: &Value, out: &mut Vec<u8>) {
        match v {
            Value::Int(x) => out.extend_from_slice(&key::encode_i64(*x)),
            Value::Bytes(b) => key::push_bytes_component(out, b),
        }
    }
}

/// A row as stored, decoded lazily column by column.
#[derive(Clone, Copy)]
pub struct RowView<'a> {
    schema: &'a Schema,
    bytes: &'a [u8],
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
        Self { schema, bytes }
    }

    /// Where column `col` lies in the row: `(offset, length)`. Errors: a column the schema does
    /// not have (`InvalidArgument`), or row bytes that do not hold the schema's columns
    /// (`Corruption`).
    fn span(&self, col: usize) -> Result<(usize, usize)> {
        let cols = &self.schema.columns;
        if col >= cols.len() {
            return Err(Error::InvalidArgument(format!(
                "column {col} does not exist (the row has {} columns)",
                cols.len()
            )));
        }
        let short = |c: &Column, need: usize| Error::Corruption {
            file: "row".into(),
            offset: 0,
            detail: format!(
                "a row of {} bytes ends inside column `{}` (it needs {need} bytes): the row does not match \
                 its schema",
                self.bytes.len(),
                c.name
            ),
        };
        let mut off = 0usize;
        for (i, c) in cols.iter().enumerate() {
            let (start, len) = match c.ty {
                ColumnType::Int => (off, 8),
                ColumnType::Char(n) => (off, n as usize),
                ColumnType::Bytes(max) => {
                    let l = self.bytes.get(off..off + 4).ok_or_else(|| short(c, off + 4))?;
                    let l = u32::from_le_bytes(l.try_into().expect("4 bytes")) as usize;
                    if l > max as usize {
                        return Err(Error::Corruption {
                            file: "row".into(),
                            offset: 0,
                            detail: format!(
                                "column `{}` holds {l} bytes, more than its maximum {max}: the row does not \
                                 match its schema",
                                c.name
                            ),
                        });
                    }
                    (off + 4, l)
                }
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

    fn expect_type(&self, col: usize, int: bool) -> Result<()> {
        match self.schema.columns.get(col) {
            Some(c) if (c.ty == ColumnType::Int) != int => Err(Error::InvalidArgument(format!(
                "column `{}` is {:?}, not {}",
                c.name,
                c.ty,
                if int { "Int" } else { "Char or Bytes" }
            ))),
            _ => Ok(()),
        }
    }

    /// Integer value of column `col`; an error if the column does not exist, is not `Int`, or
    /// the row bytes do not match the schema.
    pub fn try_int(&self, col: usize) -> Result<i64> {
        self.expect_type(col, true)?;
        let (o, _) = self.span(col)?;
        Ok(i64::from_le_bytes(self.bytes[o..o + 8].try_into().expect("8 bytes")))
    }

    /// Bytes of column `col` (a `Char` column includes its zero padding); an error if the column
    /// does not exist, is `Int`, or the row bytes do not match the schema.
    pub fn try_bytes(&self, col: usize) -> Result<&'a [u8]> {
        self.expect_type(col, false)?;
        let (o, l) = self.span(col)?;
        Ok(&self.bytes[o..o + l])
    }

    /// Column `col` as a [`Value`]; an error if the column does not exist or the row bytes do
    /// not match the schema.
    pub fn try_value(&self, col: usize) -> Result<Value> {
        match self.schema.columns.get(col).map(|c| c.ty) {
            Some(ColumnType::Int) => self.try_int(col).map(Value::Int),
            _ => self.try_bytes(col).map(|b| Value::Bytes(b.to_vec())),
        }
    }

    /// All columns as values; an error if the row bytes do not match the schema.
    pub fn try_values(&self) -> Result<Vec<Value>> {
        (0..self.schema.columns.len()).map(|i| self.try_value(i)).collect()
    }

    /// Integer value of column `col`.
    ///
    /// # Panics
    /// If the column does not exist or is not `Int`, or the row does not match its schema
    /// (a corrupt row); [`RowView::try_int`] returns those as errors.
    pub fn int(&self, col: usize) -> i64 {
        self.try_int(col).unwrap_or_else(|e| panic!("RowView::int({col}): {e}"))
    }

    /// Bytes of column `col` (a `Char` column includes its zero padding).
    ///
    /// # Panics
    /// If the column does not exist or is `Int`, or the row does not match its schema;
    /// [`RowView::try_bytes`] returns those as errors.
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
}
