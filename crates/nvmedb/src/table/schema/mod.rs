//! Schemas, values and the row encoding.
//!
//! Owns: column types, [`Schema`], [`Value`], how a row becomes bytes in a heap page, and how
//! a value becomes an order-preserving index key. By seam: this file defines a schema and
//! validates schemas and values; `value.rs` the column types and values (with decimals);
//! `row.rs` the row codec (encoding, [`RowView`], `RowLayout`); `keys.rs` the index-key
//! encodings.
//!
//! Invariant: a row is validated against its schema before it is encoded; errors name the
//! table, the column and what was expected.

use crate::error::{Error, Result};

mod keys;
mod row;
mod value;

pub(crate) use row::RowLayout;
pub use row::RowView;
pub use value::{format_decimal, parse_decimal, ColumnType, Value, NUMERIC_MAX_PRECISION};

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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::btree::key;

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
