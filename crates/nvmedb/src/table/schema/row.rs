//! The row codec: how a row becomes bytes in a heap page, and [`RowView`], which reads them
//! back column by column.
//!
//! Row layout: when any column is nullable, a null bitmap of `ceil(columns / 8)` bytes comes
//! first (bit `i % 8` of byte `i / 8` set: column `i` is NULL, and takes no bytes); then the
//! columns in schema order: `Int`, `Timestamp` and `Double` as 8 bytes little-endian (a
//! `Double` as its IEEE-754 bits), `Int32` and `Date` as 4, `Int16` as 2, `Bool` as 1 byte (0 or 1),
//! `Numeric` as a 16-byte little-endian `i128` holding the value times 10^scale, `Char(n)` as
//! exactly `n` bytes (shorter values are zero-padded), `Bytes(max)` and `Text(max)` as a u32
//! length then the bytes. A schema without nullable columns has no bitmap, so rows written
//! before nullable columns existed read unchanged.
//!
//! Owns: [`Schema::encode_row`], [`RowLayout`] (the constant column offsets of a schema's
//! rows) and [`RowView`]. Invariants: every value is checked before a byte is written; a
//! view reads only within its row's bytes and reports a row that does not match its schema
//! as corruption, naming the column.

use super::{Column, ColumnType, Schema, Value};
use crate::error::{Error, Result};
use crate::util::bytes::u64_at;

impl Schema {
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
        // One allocation for the row (at most 8 bytes a fixed-size column; exact for the rest).
        let need: usize = row
            .iter()
            .zip(&self.columns)
            .map(|(v, c)| match (c.ty, v) {
                (_, Value::Null) => 0,
                (ColumnType::Char(n), _) => n as usize,
                (_, Value::Bytes(b)) => 4 + b.len(),
                _ => 8,
            })
            .sum();
        out.reserve(bitmap + need);
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
        self.walk(col, |_, _| {})
    }

    /// Walks the row once over columns `0..=last` (which exist), calling `f(i, (offset,
    /// length))` for each in order (length 0 for a NULL), and returns column `last`'s span.
    /// Errors as [`RowView::span`].
    fn walk(&self, last: usize, mut f: impl FnMut(usize, (usize, usize))) -> Result<(usize, usize)> {
        let cols = &self.schema.columns;
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
                f(i, (off, 0));
                if i == last {
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
            f(i, (start, len));
            if i == last {
                return Ok((start, len));
            }
            off = end;
        }
        unreachable!("last < columns.len()")
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
            // Integers at a constant offset without walking the row (`try_int`'s fast path).
            ColumnType::Int | ColumnType::Int32 | ColumnType::Int16 | ColumnType::Date => {
                Value::Int(self.try_int(col)?)
            }
            ColumnType::Timestamp => Value::Timestamp(self.try_int(col)?),
            ty => {
                let (o, l) = self.span(col)?;
                let mut v = Value::Null;
                decode_into(ty, &self.bytes[o..o + l], &mut v);
                v
            }
        })
    }

    /// All columns as values; an error if the row bytes do not match the schema.
    pub fn try_values(&self) -> Result<Vec<Value>> {
        // Allocated once at its final size.
        let mut values = Vec::with_capacity(self.schema.columns.len());
        self.values_into(&mut values)?;
        Ok(values)
    }

    /// All columns decoded into `out` (made as long as the row has columns), walking the row
    /// once and reusing the buffers `out`'s `Bytes` values already hold: a caller that decodes
    /// rows of one table into the same vector allocates nothing once it holds one. On an error
    /// (the row bytes do not match the schema) `out` holds no meaningful row.
    pub fn values_into(&self, out: &mut Vec<Value>) -> Result<()> {
        let n = self.schema.columns.len();
        out.resize(n, Value::Null);
        if n == 0 {
            return Ok(());
        }
        let (bytes, cols) = (self.bytes, &self.schema.columns);
        self.walk(n - 1, |i, (o, l)| {
            if self.is_null(i) {
                out[i] = Value::Null;
            } else {
                decode_into(cols[i].ty, &bytes[o..o + l], &mut out[i]);
            }
        })?;
        Ok(())
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

/// The value of a non-NULL column of type `ty` whose bytes in the row are `b` (its span), into
/// `slot`; a `Bytes` value already in `slot` keeps its buffer.
fn decode_into(ty: ColumnType, b: &[u8], slot: &mut Value) {
    *slot = match ty {
        ColumnType::Int | ColumnType::Int32 | ColumnType::Int16 | ColumnType::Date => Value::Int(int_le(b)),
        ColumnType::Timestamp => Value::Timestamp(int_le(b)),
        ColumnType::Double => Value::Double(f64::from_bits(int_le(b) as u64)),
        ColumnType::Bool => Value::Bool(b.first().is_some_and(|&x| x != 0)),
        ColumnType::Numeric { .. } => {
            Value::Numeric(b.try_into().map(i128::from_le_bytes).unwrap_or_default())
        }
        ColumnType::Char(_) | ColumnType::Bytes(_) | ColumnType::Text(_) => {
            if let Value::Bytes(v) = slot {
                v.clear();
                v.extend_from_slice(b);
                return;
            }
            Value::Bytes(b.to_vec())
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn values_into_reuses_buffers_and_reads_what_try_value_reads() {
        let mut schema = Schema::new(vec![
            ("a", ColumnType::Int),
            ("t", ColumnType::Text(20)),
            ("c", ColumnType::Char(4)),
            ("n", ColumnType::Int16),
            ("d", ColumnType::Double),
        ]);
        schema.columns[3].nullable = true;
        let rows = [
            vec![
                Value::Int(-1),
                Value::from("a longer text"),
                Value::from("wxyz"),
                Value::Int(-3),
                Value::Double(0.0),
            ],
            vec![Value::Int(7), Value::from("hello"), Value::from("ab"), Value::Null, Value::Double(1.5)],
        ];
        let mut out = Vec::new();
        let mut text_ptr = None;
        for row in &rows {
            let mut buf = Vec::new();
            schema.encode_row("t", row, &mut buf).unwrap();
            let view = RowView::new(&schema, &buf);
            view.values_into(&mut out).unwrap();
            let want: Vec<Value> = (0..row.len()).map(|c| view.try_value(c).unwrap()).collect();
            assert_eq!(out, want);
            let Value::Bytes(t) = &out[1] else { panic!("text decodes as bytes") };
            // The second row's (shorter) text goes into the first row's buffer.
            assert_eq!(*text_ptr.get_or_insert(t.as_ptr()), t.as_ptr(), "the text buffer was reused");
        }
        // A row cut short is an error naming the column it ends in.
        let mut buf = Vec::new();
        schema.encode_row("t", &rows[0], &mut buf).unwrap();
        let e = RowView::new(&schema, &buf[..12]).values_into(&mut out).unwrap_err().to_string();
        assert!(e.contains("`t`"), "{e}");
    }
}
