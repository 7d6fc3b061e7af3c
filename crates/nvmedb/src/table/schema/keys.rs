//! Index keys: the order-preserving encodings of values in primary and secondary keys.
//!
//! Integers of every width and timestamps as [`key::encode_i64`], doubles and numerics as
//! order-preserving big-endian bits, booleans as one byte; byte strings raw in a primary key
//! and as a self-delimiting component in a secondary key. A nullable column's secondary-key
//! component starts with a tag byte (1: a value follows, 2: NULL), so NULLs sort after every
//! value, as in PostgreSQL.
//!
//! Owns: the key methods of [`Schema`]. Invariants: the byte order of encoded keys is the
//! order of their values; a `Char(n)` value is keyed zero-padded, as it is stored; NULL and an
//! empty byte string are never primary keys.

use super::value::double_order_bits;
use super::{ColumnType, RowView, Schema, Value};
use crate::btree::key;
use crate::error::{Error, Result};

impl Schema {
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
