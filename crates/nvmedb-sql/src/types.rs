//! SQL types and values: what each engine column type is in SQL, PostgreSQL type OIDs, and
//! the text and binary wire formats.
//!
//! Owns: [`SqlType`] (the one mapping from engine [`ColumnType`]s to SQL types: the engine's
//! catalog is the only schema store), [`Datum`] (a value during execution), and their
//! conversions to and from engine [`Value`]s and wire bytes. Invariant: a datum converted to
//! an engine value has been checked against the column's type (range, length, precision), so
//! the engine only ever sees values it accepts, and a failure names the column and value.

use crate::datetime::{format_date, format_interval, parse_date, parse_interval, Interval};
use crate::error::{code, SqlError, SqlResult};
use nvmedb::table::schema::{format_decimal, parse_decimal};
use nvmedb::{ColumnType, RowView, Value};
use std::cmp::Ordering;

mod pgnumeric;
use pgnumeric::{decode_pg_numeric, encode_pg_numeric};

/// A SQL type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SqlType {
    /// `boolean`
    Bool,
    /// `smallint`
    Int2,
    /// `integer`
    Int4,
    /// `bigint`
    Int8,
    /// `double precision` (and `real`, `float`)
    Float8,
    /// `numeric(precision, scale)`
    Numeric {
        /// Total digits.
        precision: u8,
        /// Digits after the point.
        scale: u8,
    },
    /// `text`
    Text,
    /// `varchar(n)`
    Varchar(u32),
    /// `char(n)`
    Bpchar(u32),
    /// `bytea`
    Bytea,
    /// `timestamp` (without time zone)
    Timestamp,
    /// `date`
    Date,
    /// `interval`
    Interval,
    /// A parameter or literal whose type is not known yet (text until decided).
    Unknown,
    /// A one-dimensional array of the element type (`integer[]`; see [`crate::array`]).
    Array(&'static SqlType),
    /// The catalogs' `int2vector` (elements `Int2`) and `oidvector` (elements `Int8`).
    Vector(&'static SqlType),
}

/// Scale given to numeric results of division and `avg` when nothing else decides it.
pub const DEFAULT_NUMERIC_SCALE: u8 = 6;
/// Microseconds between 1970-01-01 and 2000-01-01 (PostgreSQL's binary timestamp epoch).
const PG_EPOCH_OFFSET_US: i64 = 946_684_800_000_000;
/// Days between 1970-01-01 and 2000-01-01 (PostgreSQL's binary date epoch).
const PG_EPOCH_OFFSET_DAYS: i32 = 10_957;

impl SqlType {
    /// The SQL type of an engine column.
    pub fn of_column(ty: ColumnType) -> SqlType {
        match ty {
            ColumnType::Int => SqlType::Int8,
            ColumnType::Int32 => SqlType::Int4,
            ColumnType::Int16 => SqlType::Int2,
            ColumnType::Double => SqlType::Float8,
            ColumnType::Bool => SqlType::Bool,
            ColumnType::Timestamp => SqlType::Timestamp,
            ColumnType::Numeric { precision, scale } => SqlType::Numeric { precision, scale },
            ColumnType::Text(u32::MAX) => SqlType::Text,
            ColumnType::Text(n) => SqlType::Varchar(n),
            ColumnType::Char(n) => SqlType::Bpchar(n),
            ColumnType::Bytes(_) => SqlType::Bytea,
            ColumnType::Date => SqlType::Date,
        }
    }

    /// The engine column type storing this SQL type (`None` for `Unknown`).
    pub fn column_type(self) -> Option<ColumnType> {
        Some(match self {
            SqlType::Int8 => ColumnType::Int,
            SqlType::Int4 => ColumnType::Int32,
            SqlType::Int2 => ColumnType::Int16,
            SqlType::Float8 => ColumnType::Double,
            SqlType::Bool => ColumnType::Bool,
            SqlType::Timestamp => ColumnType::Timestamp,
            SqlType::Numeric { precision, scale } => ColumnType::Numeric { precision, scale },
            SqlType::Date => ColumnType::Date,
            // Not stored yet: values only (expressions and results).
            SqlType::Interval => return None,
            SqlType::Text => ColumnType::Text(u32::MAX),
            SqlType::Varchar(n) => ColumnType::Text(n),
            SqlType::Bpchar(n) => ColumnType::Char(n),
            // Byte strings up to what a 16 KiB page row holds comfortably.
            SqlType::Bytea => ColumnType::Bytes(8000),
            SqlType::Unknown | SqlType::Array(_) | SqlType::Vector(_) => return None,
        })
    }

    /// PostgreSQL type OID.
    pub fn oid(self) -> u32 {
        match self {
            SqlType::Bool => 16,
            SqlType::Bytea => 17,
            SqlType::Int8 => 20,
            SqlType::Int2 => 21,
            SqlType::Int4 => 23,
            SqlType::Text => 25,
            SqlType::Float8 => 701,
            SqlType::Bpchar(_) => 1042,
            SqlType::Varchar(_) => 1043,
            SqlType::Timestamp => 1114,
            SqlType::Date => 1082,
            SqlType::Interval => 1186,
            SqlType::Numeric { .. } => 1700,
            SqlType::Unknown => 705,
            SqlType::Array(e) => crate::array::oid(*e, false),
            SqlType::Vector(e) => crate::array::oid(*e, true),
        }
    }

    /// The type of OID `oid` as a parameter type (`None`: unsupported or unspecified).
    pub fn from_oid(oid: u32) -> Option<SqlType> {
        Some(match oid {
            16 => SqlType::Bool,
            17 => SqlType::Bytea,
            20 => SqlType::Int8,
            21 => SqlType::Int2,
            23 => SqlType::Int4,
            25 => SqlType::Text,
            700 | 701 => SqlType::Float8,
            1042 => SqlType::Bpchar(u32::MAX),
            1043 => SqlType::Varchar(u32::MAX),
            1114 | 1184 => SqlType::Timestamp,
            1082 => SqlType::Date,
            1186 => SqlType::Interval,
            1700 => SqlType::Numeric { precision: 38, scale: DEFAULT_NUMERIC_SCALE },
            _ => return crate::array::from_oid(oid),
        })
    }

    /// `pg_type.typlen`: fixed width, or -1 for variable width.
    pub fn type_size(self) -> i16 {
        match self {
            SqlType::Bool => 1,
            SqlType::Int2 => 2,
            SqlType::Int4 | SqlType::Date => 4,
            SqlType::Int8 | SqlType::Float8 | SqlType::Timestamp => 8,
            SqlType::Interval => 16,
            _ => -1,
        }
    }

    /// `atttypmod`: declared length or precision/scale, -1 if none.
    pub fn type_modifier(self) -> i32 {
        match self {
            SqlType::Varchar(n) | SqlType::Bpchar(n) if n != u32::MAX => n as i32 + 4,
            SqlType::Numeric { precision, scale } => ((i32::from(precision) << 16) | i32::from(scale)) + 4,
            _ => -1,
        }
    }

    /// The type's name as PostgreSQL writes it.
    pub fn name(self) -> String {
        match self {
            SqlType::Bool => "boolean".into(),
            SqlType::Int2 => "smallint".into(),
            SqlType::Int4 => "integer".into(),
            SqlType::Int8 => "bigint".into(),
            SqlType::Float8 => "double precision".into(),
            SqlType::Numeric { precision, scale } => format!("numeric({precision},{scale})"),
            SqlType::Text => "text".into(),
            SqlType::Varchar(u32::MAX) => "character varying".into(),
            SqlType::Varchar(n) => format!("character varying({n})"),
            SqlType::Bpchar(u32::MAX) => "character".into(),
            SqlType::Bpchar(n) => format!("character({n})"),
            SqlType::Bytea => "bytea".into(),
            SqlType::Timestamp => "timestamp without time zone".into(),
            SqlType::Date => "date".into(),
            SqlType::Interval => "interval".into(),
            SqlType::Unknown => "unknown".into(),
            SqlType::Array(_) | SqlType::Vector(_) => crate::array::type_name(self),
        }
    }

    /// True for the integer types.
    pub fn is_integer(self) -> bool {
        matches!(self, SqlType::Int2 | SqlType::Int4 | SqlType::Int8)
    }

    /// True for integers, numerics and doubles.
    pub fn is_numeric(self) -> bool {
        self.is_integer() || matches!(self, SqlType::Float8 | SqlType::Numeric { .. })
    }

    /// True for the character types.
    pub fn is_text(self) -> bool {
        matches!(self, SqlType::Text | SqlType::Varchar(_) | SqlType::Bpchar(_) | SqlType::Unknown)
    }
}

/// A value during execution.
#[derive(Debug, Clone, PartialEq)]
pub enum Datum {
    /// SQL NULL.
    Null,
    /// A boolean.
    Bool(bool),
    /// An integer (any width).
    Int(i64),
    /// A double.
    Float(f64),
    /// A fixed-point number: value times 10^scale, and the scale.
    Numeric(i128, u8),
    /// Text.
    Text(String),
    /// Bytes (`bytea`).
    Bytes(Vec<u8>),
    /// Microseconds since 1970-01-01 00:00:00.
    Timestamp(i64),
    /// Days since 1970-01-01.
    Date(i32),
    /// An interval.
    Interval(Interval),
    /// An array's elements (see [`crate::array`]).
    Array(Vec<Datum>),
}

fn invalid(ty: SqlType, text: &str) -> SqlError {
    SqlError::new(
        code::INVALID_TEXT_REPRESENTATION,
        format!("invalid input syntax for type {}: \"{text}\"", ty.name()),
    )
}

fn out_of_range(ty: SqlType, what: impl std::fmt::Display) -> SqlError {
    SqlError::new(
        code::NUMERIC_VALUE_OUT_OF_RANGE,
        format!("value {what} is out of range for type {}", ty.name()),
    )
}

/// Rescales a fixed-point value, rounding half away from zero.
pub fn rescale(v: i128, from: u8, to: u8) -> Option<i128> {
    match from.cmp(&to) {
        Ordering::Equal => Some(v),
        Ordering::Less => v.checked_mul(10i128.checked_pow(u32::from(to - from))?),
        Ordering::Greater => {
            let d = 10i128.checked_pow(u32::from(from - to))?;
            let (q, r) = (v / d, v % d);
            Some(if r.abs() * 2 >= d { q + v.signum() } else { q })
        }
    }
}

impl Datum {
    /// True for NULL.
    pub fn is_null(&self) -> bool {
        matches!(self, Datum::Null)
    }

    /// The datum as a double (integers and numerics convert).
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Datum::Int(v) => Some(*v as f64),
            Datum::Float(v) => Some(*v),
            Datum::Numeric(v, s) => Some(*v as f64 / 10f64.powi(i32::from(*s))),
            _ => None,
        }
    }

    /// Parses text as a value of type `ty`.
    pub fn parse(text: &str, ty: SqlType) -> SqlResult<Datum> {
        let t = text.trim();
        Ok(match ty {
            SqlType::Bool => match t.to_ascii_lowercase().as_str() {
                "t" | "true" | "y" | "yes" | "on" | "1" => Datum::Bool(true),
                "f" | "false" | "n" | "no" | "off" | "0" => Datum::Bool(false),
                _ => return Err(invalid(ty, text)),
            },
            SqlType::Int2 | SqlType::Int4 | SqlType::Int8 => {
                let v: i64 = t.parse().map_err(|_| {
                    if !t.is_empty() && t.trim_start_matches(['-', '+']).bytes().all(|b| b.is_ascii_digit()) {
                        out_of_range(ty, t)
                    } else {
                        invalid(ty, text)
                    }
                })?;
                check_int_range(v, ty)?;
                Datum::Int(v)
            }
            SqlType::Float8 => Datum::Float(match t.to_ascii_lowercase().as_str() {
                "infinity" | "+infinity" | "inf" => f64::INFINITY,
                "-infinity" | "-inf" => f64::NEG_INFINITY,
                "nan" => f64::NAN,
                _ => t.parse().map_err(|_| invalid(ty, text))?,
            }),
            SqlType::Numeric { scale, .. } => {
                let v = parse_decimal(t, scale).ok_or_else(|| invalid(ty, text))?;
                let d = Datum::Numeric(v, scale);
                d.check_numeric(ty)?;
                d
            }
            SqlType::Timestamp => Datum::Timestamp(parse_timestamp(t).ok_or_else(|| {
                SqlError::new(
                    code::INVALID_DATETIME_FORMAT,
                    format!("invalid input syntax for type timestamp: \"{text}\""),
                )
            })?),
            SqlType::Date => Datum::Date(parse_date(t).ok_or_else(|| {
                SqlError::new(
                    code::INVALID_DATETIME_FORMAT,
                    format!("invalid input syntax for type date: \"{text}\""),
                )
            })?),
            SqlType::Interval => Datum::Interval(parse_interval(t)?),
            SqlType::Bytea => Datum::Bytes(parse_bytea(text).ok_or_else(|| invalid(ty, text))?),
            SqlType::Array(_) | SqlType::Vector(_) => crate::array::parse(text, ty)?,
            SqlType::Text | SqlType::Varchar(_) | SqlType::Bpchar(_) | SqlType::Unknown => {
                Datum::Text(text.to_string())
            }
        })
    }

    fn check_numeric(&self, ty: SqlType) -> SqlResult<()> {
        if let (Datum::Numeric(v, s), SqlType::Numeric { precision, .. }) = (self, ty) {
            if v.unsigned_abs() >= 10u128.pow(u32::from(precision)) {
                return Err(SqlError::new(
                    code::NUMERIC_VALUE_OUT_OF_RANGE,
                    format!(
                        "numeric field overflow: {} needs more than precision {precision}",
                        format_decimal(*v, *s)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Decodes a binary-format parameter of type `ty`.
    pub fn from_binary(b: &[u8], ty: SqlType) -> SqlResult<Datum> {
        let bad = || {
            SqlError::new(
                code::INVALID_BINARY_REPRESENTATION,
                format!("incorrect binary data format for type {} ({} bytes)", ty.name(), b.len()),
            )
        };
        let arr = |n: usize| -> SqlResult<&[u8]> { (b.len() == n).then_some(b).ok_or_else(bad) };
        Ok(match ty {
            SqlType::Bool => Datum::Bool(arr(1)?[0] != 0),
            SqlType::Int2 => Datum::Int(i64::from(i16::from_be_bytes(arr(2)?.try_into().expect("2")))),
            SqlType::Int4 => Datum::Int(i64::from(i32::from_be_bytes(arr(4)?.try_into().expect("4")))),
            SqlType::Int8 => Datum::Int(i64::from_be_bytes(arr(8)?.try_into().expect("8"))),
            SqlType::Float8 => match b.len() {
                4 => Datum::Float(f64::from(f32::from_be_bytes(b.try_into().expect("4")))),
                _ => Datum::Float(f64::from_be_bytes(arr(8)?.try_into().expect("8"))),
            },
            SqlType::Timestamp => {
                Datum::Timestamp(i64::from_be_bytes(arr(8)?.try_into().expect("8")) + PG_EPOCH_OFFSET_US)
            }
            SqlType::Date => {
                Datum::Date(i32::from_be_bytes(arr(4)?.try_into().expect("4")) + PG_EPOCH_OFFSET_DAYS)
            }
            SqlType::Interval => {
                let b = arr(16)?;
                Datum::Interval(Interval {
                    micros: i64::from_be_bytes(b[0..8].try_into().expect("8")),
                    days: i32::from_be_bytes(b[8..12].try_into().expect("4")),
                    months: i32::from_be_bytes(b[12..16].try_into().expect("4")),
                })
            }
            SqlType::Numeric { scale, .. } => {
                let (v, s) = decode_pg_numeric(b).ok_or_else(bad)?;
                let v = rescale(v, s, scale).ok_or_else(|| out_of_range(ty, "numeric"))?;
                Datum::Numeric(v, scale)
            }
            SqlType::Bytea => Datum::Bytes(b.to_vec()),
            _ => Datum::Text(String::from_utf8(b.to_vec()).map_err(|_| {
                SqlError::new(code::INVALID_BINARY_REPRESENTATION, "invalid UTF-8 in a text parameter")
            })?),
        })
    }

    /// Appends the text format of the datum (as a value of type `ty`) to `out`; NULL is the
    /// caller's business.
    pub fn write_text(&self, ty: SqlType, out: &mut Vec<u8>) {
        use std::io::Write;
        match self {
            Datum::Null => {}
            Datum::Bool(b) => out.push(if *b { b't' } else { b'f' }),
            Datum::Int(v) => {
                let _ = write!(out, "{v}");
            }
            Datum::Float(v) => write_float(*v, out),
            Datum::Numeric(v, s) => out.extend_from_slice(format_decimal(*v, *s).as_bytes()),
            Datum::Text(t) => {
                if let SqlType::Bpchar(n) = ty {
                    // Stored zero-padded; shown blank-padded like PostgreSQL.
                    let t = t.trim_end_matches('\0');
                    out.extend_from_slice(t.as_bytes());
                    if n != u32::MAX {
                        let chars = t.chars().count();
                        out.resize(out.len() + (n as usize).saturating_sub(chars), b' ');
                    }
                } else {
                    out.extend_from_slice(t.as_bytes());
                }
            }
            Datum::Bytes(b) => {
                out.extend_from_slice(b"\\x");
                for x in b {
                    let _ = write!(out, "{x:02x}");
                }
            }
            Datum::Timestamp(us) => out.extend_from_slice(format_timestamp(*us).as_bytes()),
            Datum::Date(d) => out.extend_from_slice(format_date(*d).as_bytes()),
            Datum::Interval(iv) => out.extend_from_slice(format_interval(*iv).as_bytes()),
            Datum::Array(items) => crate::array::write_text(items, ty, out),
        }
    }

    /// The text format of the datum.
    pub fn to_text(&self, ty: SqlType) -> String {
        let mut v = Vec::new();
        self.write_text(ty, &mut v);
        String::from_utf8(v).unwrap_or_default()
    }

    /// Appends the binary format of the datum as type `ty` to `out`.
    pub fn write_binary(&self, ty: SqlType, out: &mut Vec<u8>) -> SqlResult<()> {
        match (self, ty) {
            (Datum::Null, _) => {}
            (Datum::Bool(b), _) => out.push(u8::from(*b)),
            (Datum::Int(v), SqlType::Int2) => out.extend_from_slice(&(*v as i16).to_be_bytes()),
            (Datum::Int(v), SqlType::Int4) => out.extend_from_slice(&(*v as i32).to_be_bytes()),
            (Datum::Int(v), SqlType::Int8) => out.extend_from_slice(&v.to_be_bytes()),
            (Datum::Float(v), SqlType::Float8) => out.extend_from_slice(&v.to_bits().to_be_bytes()),
            (Datum::Timestamp(v), SqlType::Timestamp) => {
                out.extend_from_slice(&(v - PG_EPOCH_OFFSET_US).to_be_bytes())
            }
            (Datum::Numeric(v, s), SqlType::Numeric { .. }) => encode_pg_numeric(*v, *s, out),
            (Datum::Date(d), SqlType::Date) => {
                out.extend_from_slice(&(d - PG_EPOCH_OFFSET_DAYS).to_be_bytes())
            }
            (Datum::Interval(iv), SqlType::Interval) => {
                out.extend_from_slice(&iv.micros.to_be_bytes());
                out.extend_from_slice(&iv.days.to_be_bytes());
                out.extend_from_slice(&iv.months.to_be_bytes());
            }
            (Datum::Text(t), _) if ty.is_text() => {
                let mut tmp = Vec::new();
                self.write_text(ty, &mut tmp);
                let _ = t;
                out.extend_from_slice(&tmp);
            }
            (Datum::Bytes(b), SqlType::Bytea) => out.extend_from_slice(b),
            (Datum::Array(items), SqlType::Array(_) | SqlType::Vector(_)) => {
                crate::array::write_binary(items, ty, out)?
            }
            (d, ty) => {
                return Err(SqlError::new(
                    code::DATATYPE_MISMATCH,
                    format!("cannot send {d:?} in the binary format of {}", ty.name()),
                ))
            }
        }
        Ok(())
    }

    /// Converts to type `ty` (an assignment or explicit cast), checking range and length;
    /// `column` names the target in messages.
    pub fn coerce(self, ty: SqlType, column: &str) -> SqlResult<Datum> {
        let d = match (self, ty) {
            (Datum::Null, _) => Datum::Null,
            (d, SqlType::Unknown) => d,
            (Datum::Text(t), ty) if !ty.is_text() => Datum::parse(&t, ty)?,
            (Datum::Int(v), t) if t.is_integer() => {
                check_int_range(v, t)?;
                Datum::Int(v)
            }
            (Datum::Int(v), SqlType::Float8) => Datum::Float(v as f64),
            (Datum::Int(v), SqlType::Numeric { scale, .. }) => {
                Datum::Numeric(rescale(i128::from(v), 0, scale).ok_or_else(|| out_of_range(ty, v))?, scale)
            }
            (Datum::Float(v), t) if t.is_integer() => {
                let r = v.round();
                if !(-9.2e18..9.2e18).contains(&r) {
                    return Err(out_of_range(ty, v));
                }
                check_int_range(r as i64, t)?;
                Datum::Int(r as i64)
            }
            (Datum::Float(v), SqlType::Numeric { scale, .. }) => {
                let d = parse_decimal(&format!("{v}"), scale).ok_or_else(|| out_of_range(ty, v))?;
                Datum::Numeric(d, scale)
            }
            (Datum::Numeric(v, s), SqlType::Numeric { scale, .. }) => {
                Datum::Numeric(rescale(v, s, scale).ok_or_else(|| out_of_range(ty, "numeric"))?, scale)
            }
            (Datum::Numeric(v, s), t) if t.is_integer() => {
                let r = rescale(v, s, 0).ok_or_else(|| out_of_range(ty, "numeric"))?;
                let r = i64::try_from(r).map_err(|_| out_of_range(ty, r))?;
                check_int_range(r, t)?;
                Datum::Int(r)
            }
            (d @ Datum::Numeric(..), SqlType::Float8) => Datum::Float(d.as_f64().expect("numeric")),
            (Datum::Float(v), SqlType::Float8) => Datum::Float(v),
            (Datum::Bool(b), SqlType::Bool) => Datum::Bool(b),
            (Datum::Int(v), SqlType::Bool) => Datum::Bool(v != 0),
            (Datum::Timestamp(v), SqlType::Timestamp) => Datum::Timestamp(v),
            (Datum::Date(d), SqlType::Date) => Datum::Date(d),
            (Datum::Date(d), SqlType::Timestamp) => Datum::Timestamp(i64::from(d) * crate::datetime::DAY_US),
            (Datum::Timestamp(v), SqlType::Date) => Datum::Date(
                i32::try_from(v.div_euclid(crate::datetime::DAY_US)).map_err(|_| out_of_range(ty, v))?,
            ),
            (Datum::Interval(iv), SqlType::Interval) => Datum::Interval(iv),
            (Datum::Bytes(b), SqlType::Bytea) => Datum::Bytes(b),
            (Datum::Array(items), SqlType::Array(e) | SqlType::Vector(e)) => {
                Datum::Array(items.into_iter().map(|d| d.coerce(*e, column)).collect::<SqlResult<_>>()?)
            }
            (Datum::Text(t), SqlType::Bytea) => Datum::Bytes(t.into_bytes()),
            (Datum::Text(t), ty) => {
                let max = match ty {
                    SqlType::Varchar(n) | SqlType::Bpchar(n) => n,
                    _ => u32::MAX,
                };
                let t =
                    if matches!(ty, SqlType::Bpchar(_)) { t.trim_end_matches(' ').to_string() } else { t };
                if max != u32::MAX && t.chars().count() > max as usize {
                    return Err(SqlError::new(
                        code::STRING_DATA_RIGHT_TRUNCATION,
                        format!("value too long for type {} in column \"{column}\"", ty.name()),
                    )
                    .with_column(column));
                }
                Datum::Text(t)
            }
            (d, ty) if ty.is_text() => Datum::Text(d.to_text(SqlType::Unknown)),
            (d, ty) => {
                return Err(SqlError::new(
                    code::DATATYPE_MISMATCH,
                    format!("column \"{column}\" is of type {} but the value {d:?} is not", ty.name()),
                )
                .with_column(column))
            }
        };
        d.check_numeric(ty)?;
        Ok(d)
    }

    /// Converts to the engine value of a column of type `ty` (coercing first).
    pub fn to_value(self, ty: SqlType, column: &str) -> SqlResult<Value> {
        Ok(match self.coerce(ty, column)? {
            Datum::Null => Value::Null,
            Datum::Bool(b) => Value::Bool(b),
            Datum::Int(v) => Value::Int(v),
            Datum::Float(v) => Value::Double(v),
            Datum::Numeric(v, _) => Value::Numeric(v),
            Datum::Text(t) => Value::Bytes(t.into_bytes()),
            Datum::Bytes(b) => Value::Bytes(b),
            Datum::Timestamp(v) => Value::Timestamp(v),
            Datum::Date(d) => Value::Int(i64::from(d)),
            d @ Datum::Array(_) => Value::Bytes(d.to_text(ty).into_bytes()),
            d @ Datum::Interval(_) => {
                return Err(SqlError::unsupported(format!("storing {d:?} in column \"{column}\"")))
            }
        })
    }

    /// Column `col` of a stored row, as a datum of SQL type `ty`.
    pub fn from_row(row: &RowView<'_>, col: usize, ty: SqlType) -> Datum {
        if row.is_null(col) {
            return Datum::Null;
        }
        match ty {
            SqlType::Int2 | SqlType::Int4 | SqlType::Int8 => Datum::Int(row.int(col)),
            SqlType::Timestamp => Datum::Timestamp(row.int(col)),
            SqlType::Date => Datum::Date(row.int(col) as i32),
            SqlType::Float8 => Datum::Float(row.double(col)),
            SqlType::Bool => Datum::Bool(row.boolean(col)),
            SqlType::Numeric { scale, .. } => Datum::Numeric(row.numeric(col), scale),
            SqlType::Bytea => Datum::Bytes(row.bytes(col).to_vec()),
            // Stored as text (the catalog views' arrays); one that does not parse reads as NULL.
            SqlType::Array(_) | SqlType::Vector(_) => {
                crate::array::parse(&String::from_utf8_lossy(row.bytes(col)), ty).unwrap_or(Datum::Null)
            }
            SqlType::Bpchar(_) => {
                let b = row.bytes(col);
                let end = b.iter().rposition(|&c| c != 0).map_or(0, |i| i + 1);
                Datum::Text(String::from_utf8_lossy(&b[..end]).into_owned())
            }
            _ => Datum::Text(String::from_utf8_lossy(row.bytes(col)).into_owned()),
        }
    }

    /// Orders two datums of comparable types (NULLs last); `None` if they cannot be compared.
    pub fn compare(&self, other: &Datum) -> Option<Ordering> {
        Some(match (self, other) {
            (Datum::Null, Datum::Null) => Ordering::Equal,
            (Datum::Null, _) => Ordering::Greater,
            (_, Datum::Null) => Ordering::Less,
            (Datum::Int(a), Datum::Int(b)) => a.cmp(b),
            (Datum::Numeric(a, sa), Datum::Numeric(b, sb)) => {
                let s = (*sa).max(*sb);
                rescale(*a, *sa, s)?.cmp(&rescale(*b, *sb, s)?)
            }
            (Datum::Int(a), Datum::Numeric(..)) => Datum::Numeric(i128::from(*a), 0).compare(other)?,
            (Datum::Numeric(..), Datum::Int(b)) => self.compare(&Datum::Numeric(i128::from(*b), 0))?,
            (Datum::Text(a), Datum::Text(b)) => a.trim_end_matches('\0').cmp(b.trim_end_matches('\0')),
            (Datum::Bytes(a), Datum::Bytes(b)) => a.cmp(b),
            (Datum::Bool(a), Datum::Bool(b)) => a.cmp(b),
            (Datum::Timestamp(a), Datum::Timestamp(b)) => a.cmp(b),
            (Datum::Date(a), Datum::Date(b)) => a.cmp(b),
            (Datum::Date(a), Datum::Timestamp(b)) => (i64::from(*a) * crate::datetime::DAY_US).cmp(b),
            (Datum::Timestamp(a), Datum::Date(b)) => a.cmp(&(i64::from(*b) * crate::datetime::DAY_US)),
            (Datum::Interval(a), Datum::Interval(b)) => a.sort_key().cmp(&b.sort_key()),
            (Datum::Array(a), Datum::Array(b)) => {
                for (x, y) in a.iter().zip(b) {
                    match x.compare(y)? {
                        Ordering::Equal => {}
                        o => return Some(o),
                    }
                }
                a.len().cmp(&b.len())
            }
            (a, b) => a.as_f64()?.total_cmp(&b.as_f64()?),
        })
    }
}

/// Fails unless `v` fits integer type `ty`.
pub fn check_int_range(v: i64, ty: SqlType) -> SqlResult<()> {
    let ok = match ty {
        SqlType::Int2 => i16::try_from(v).is_ok(),
        SqlType::Int4 => i32::try_from(v).is_ok(),
        _ => true,
    };
    if ok {
        Ok(())
    } else {
        Err(SqlError::new(code::NUMERIC_VALUE_OUT_OF_RANGE, format!("{} out of range: {v}", ty.name())))
    }
}

fn write_float(v: f64, out: &mut Vec<u8>) {
    use std::io::Write;
    if v.is_nan() {
        out.extend_from_slice(b"NaN");
    } else if v.is_infinite() {
        out.extend_from_slice(if v > 0.0 { b"Infinity" } else { b"-Infinity" });
    } else if v != 0.0 && (v.abs() >= 1e16 || v.abs() < 1e-4) {
        let _ = write!(out, "{v:e}");
        // PostgreSQL writes an explicit exponent sign (1e+20).
        if let Some(p) = out.iter().rposition(|&c| c == b'e') {
            if out.get(p + 1) != Some(&b'-') {
                out.insert(p + 1, b'+');
            }
        }
    } else {
        let _ = write!(out, "{v}");
    }
}

use crate::datetime::{civil_from_days, days_from_civil};

/// Parses `YYYY-MM-DD[( |T)HH:MM[:SS[.ffffff]]][zone]` (a zone suffix is ignored: timestamps
/// have no time zone) into microseconds since 1970-01-01.
pub fn parse_timestamp(s: &str) -> Option<i64> {
    let s = s.trim();
    let num = |t: &str| -> Option<i64> {
        (!t.is_empty() && t.bytes().all(|b| b.is_ascii_digit())).then(|| t.parse().ok())?
    };
    let (date, time) = match s.find([' ', 'T']) {
        Some(i) => (&s[..i], s[i + 1..].trim()),
        None => (s, ""),
    };
    let mut dp = date.splitn(3, '-');
    let (y, m, d) = (num(dp.next()?)?, num(dp.next()?)?, num(dp.next()?)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    let mut us = days_from_civil(y, m, d) * 86_400_000_000;
    if !time.is_empty() {
        let end = time.find(['+', '-', 'Z', ' ']).unwrap_or(time.len());
        let mut tp = time[..end].splitn(3, ':');
        let h = num(tp.next()?)?;
        let mi = num(tp.next()?)?;
        let (sec, frac) = match tp.next() {
            Some(sf) => match sf.split_once('.') {
                Some((a, f)) => {
                    let f = &f[..f.len().min(6)];
                    (num(a)?, num(f)? * 10i64.pow(6 - f.len() as u32))
                }
                None => (num(sf)?, 0),
            },
            None => (0, 0),
        };
        if h > 24 || mi > 59 || sec > 60 {
            return None;
        }
        us += ((h * 60 + mi) * 60 + sec) * 1_000_000 + frac;
    }
    Some(us)
}

/// Formats microseconds since 1970-01-01 as PostgreSQL's ISO text.
pub fn format_timestamp(us: i64) -> String {
    let days = us.div_euclid(86_400_000_000);
    let rem = us.rem_euclid(86_400_000_000);
    let (y, m, d) = civil_from_days(days);
    let secs = rem / 1_000_000;
    let frac = rem % 1_000_000;
    let mut s = format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60);
    if frac != 0 {
        let f = format!(".{frac:06}");
        s.push_str(f.trim_end_matches('0'));
    }
    s
}

/// The current time as microseconds since 1970-01-01 (UTC).
pub fn now_micros() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64)
}

fn parse_bytea(s: &str) -> Option<Vec<u8>> {
    match s.strip_prefix("\\x") {
        Some(hex) => {
            if hex.len() % 2 != 0 {
                return None;
            }
            (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok()).collect()
        }
        None => Some(s.as_bytes().to_vec()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_round_trip() {
        for s in [
            "2024-02-29 13:45:07.123456",
            "1999-12-31 23:59:59",
            "1970-01-01 00:00:00",
            "1900-03-01 00:00:00.5",
        ] {
            let us = parse_timestamp(s).unwrap();
            assert_eq!(format_timestamp(us), s);
        }
        assert_eq!(parse_timestamp("2000-01-01"), Some(PG_EPOCH_OFFSET_US));
        assert_eq!(parse_timestamp("2000-01-01T00:00:01+02"), Some(PG_EPOCH_OFFSET_US + 1_000_000));
        assert_eq!(parse_timestamp("2000-13-01"), None);
        assert_eq!(parse_timestamp("yesterday"), None);
    }

    #[test]
    fn text_parsing_reports_the_right_codes() {
        assert_eq!(Datum::parse("42", SqlType::Int4).unwrap(), Datum::Int(42));
        assert_eq!(Datum::parse("abc", SqlType::Int4).unwrap_err().code, code::INVALID_TEXT_REPRESENTATION);
        assert_eq!(
            Datum::parse("99999999999", SqlType::Int4).unwrap_err().code,
            code::NUMERIC_VALUE_OUT_OF_RANGE
        );
        assert_eq!(
            Datum::parse("1.239", SqlType::Numeric { precision: 5, scale: 2 }).unwrap(),
            Datum::Numeric(124, 2)
        );
        assert_eq!(
            Datum::parse("12345.6", SqlType::Numeric { precision: 5, scale: 2 }).unwrap_err().code,
            code::NUMERIC_VALUE_OUT_OF_RANGE
        );
        assert_eq!(Datum::parse("yes", SqlType::Bool).unwrap(), Datum::Bool(true));
        assert_eq!(Datum::parse("\\x00ff", SqlType::Bytea).unwrap(), Datum::Bytes(vec![0, 255]));
        assert_eq!(Datum::Float(1e20).to_text(SqlType::Float8), "1e+20");
        assert_eq!(Datum::Float(0.5).to_text(SqlType::Float8), "0.5");
        assert_eq!(Datum::Text("ab".into()).to_text(SqlType::Bpchar(4)), "ab  ");
        let long = Datum::Text("abcdef".into()).coerce(SqlType::Varchar(3), "v").unwrap_err();
        assert_eq!(long.code, code::STRING_DATA_RIGHT_TRUNCATION);
    }
}
