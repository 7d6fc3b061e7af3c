//! `COPY … FROM STDIN` in PostgreSQL's binary format (what pgx's `CopyFrom` and psycopg's
//! binary copy send): the 19-byte header (`PGCOPY\n\377\r\n\0`, flags, header extension), then
//! per row a 16-bit field count and each field as a 32-bit length (-1 for NULL) and its bytes
//! in the column type's binary format, then the trailer (a field count of -1).
//!
//! Owns: [`next`], which reads one step from the buffered data. Invariant: a step is taken
//! only when its bytes are all buffered (`Step::More` otherwise), so data split across CopyData
//! messages anywhere is read the same.

use crate::error::{code, SqlError, SqlResult};
use crate::plan::CopyPlan;
use crate::types::Datum;

/// The signature every binary COPY stream starts with.
const SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";

/// What [`next`] read.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// Not enough data buffered for the next step.
    More,
    /// The header (this many bytes).
    Header(usize),
    /// A row (this many bytes), in the row buffer.
    Row(usize),
    /// The trailer (this many bytes): the data is complete.
    End(usize),
}

fn bad(what: impl Into<String>) -> SqlError {
    SqlError::new(code::BAD_COPY_FILE_FORMAT, what.into())
}

/// Reads the next step of `buf` (`header`: the header is still to come) into `row`.
pub(super) fn next(
    plan: &CopyPlan,
    buf: &[u8],
    header: bool,
    row: &mut Vec<nvmedb::Value>,
) -> SqlResult<Step> {
    let i32_at = |at: usize| buf.get(at..at + 4).map(|b| i32::from_be_bytes(b.try_into().expect("4")));
    if header {
        if buf.len() < SIGNATURE.len() + 8 {
            return Ok(Step::More);
        }
        if &buf[..SIGNATURE.len()] != SIGNATURE {
            return Err(bad("COPY file signature not recognized"));
        }
        let flags = i32_at(11).expect("checked");
        if flags & (1 << 16) != 0 {
            return Err(bad("COPY with OIDs is not supported"));
        }
        let ext =
            usize::try_from(i32_at(15).expect("checked")).map_err(|_| bad("invalid COPY file header"))?;
        return Ok(if buf.len() < 19 + ext { Step::More } else { Step::Header(19 + ext) });
    }
    let Some(count) = buf.get(0..2).map(|b| i16::from_be_bytes([b[0], b[1]])) else { return Ok(Step::More) };
    if count == -1 {
        return Ok(Step::End(2));
    }
    if count as usize != plan.targets.len() {
        return Err(bad(format!("row field count is {count}, expected {}", plan.targets.len())));
    }
    // Every field buffered?
    let mut at = 2;
    let mut fields = Vec::with_capacity(plan.targets.len());
    for _ in 0..count {
        let Some(len) = i32_at(at) else { return Ok(Step::More) };
        at += 4;
        if len < 0 {
            fields.push(None);
            continue;
        }
        let len = len as usize;
        if buf.len() < at + len {
            return Ok(Step::More);
        }
        fields.push(Some(&buf[at..at + len]));
        at += len;
    }
    let t = &plan.table;
    row.clear();
    row.resize(t.columns.len(), nvmedb::Value::Null);
    if t.hidden_rowid {
        row[0] = nvmedb::Value::Int(t.next_rowid());
    }
    for (&col, f) in plan.targets.iter().zip(fields) {
        let c = &t.columns[col];
        let d = match f {
            None if !c.nullable => return Err(crate::exec::modify::not_null_violation(&t.name, &c.name)),
            None => Datum::Null,
            Some(b) => Datum::from_binary(b, c.ty).map_err(|e| e.with_column(&c.name))?,
        };
        row[col] = d.to_value(c.ty, &c.name)?;
    }
    Ok(Step::Row(at))
}
