//! Arrays: the values of `integer[]`, `text[]`, … (what `array_agg` and `ARRAY[…]` make and
//! what the catalogs' `int2vector` / `oidvector` columns hold), their text and binary formats,
//! the scalar functions over them and the set-returning ones (`unnest`, `generate_subscripts`)
//! a select list may call.
//!
//! Owns: [`ArrayFunc`], [`Srf`], the byte form of an array in spilled rows ([`encode`] /
//! [`decode`]; the catalog views store arrays as their text), and the text and binary formats
//! of [`Datum::Array`]. Invariants: arrays are one-dimensional
//! with lower bound 1 (a vector's subscripts start at 0, as PostgreSQL's); an element is NULL
//! or a datum of the element type; a stored array decodes to the datums it was encoded from.

use crate::error::{code, SqlError, SqlResult};
use crate::expr::{EvalCtx, Expr};
use crate::types::{Datum, SqlType};

/// The element types an array may have, as `'static` references (so that [`SqlType`] stays
/// `Copy`); other types' arrays hold their text.
pub fn elem(t: SqlType) -> &'static SqlType {
    match t {
        SqlType::Bool => &SqlType::Bool,
        SqlType::Int2 => &SqlType::Int2,
        SqlType::Int4 => &SqlType::Int4,
        SqlType::Int8 => &SqlType::Int8,
        SqlType::Float8 => &SqlType::Float8,
        SqlType::Timestamp => &SqlType::Timestamp,
        SqlType::Date => &SqlType::Date,
        _ => &SqlType::Text,
    }
}

/// The oid of the array type whose elements are of type `e` (a vector's for vectors).
pub fn oid(e: SqlType, vector: bool) -> u32 {
    match (e, vector) {
        (SqlType::Int2, true) => 22,
        (_, true) => 30,
        (SqlType::Bool, _) => 1000,
        (SqlType::Int2, _) => 1005,
        (SqlType::Int4, _) => 1007,
        (SqlType::Int8, _) => 1016,
        (SqlType::Float8, _) => 1022,
        (SqlType::Timestamp, _) => 1115,
        (SqlType::Date, _) => 1182,
        _ => 1009,
    }
}

/// The array type of oid `oid`, if nvmedb has it.
pub fn from_oid(oid: u32) -> Option<SqlType> {
    let e = match oid {
        22 => return Some(SqlType::Vector(&SqlType::Int2)),
        30 => return Some(SqlType::Vector(&SqlType::Int8)),
        1000 => SqlType::Bool,
        1005 => SqlType::Int2,
        1007 => SqlType::Int4,
        1016 | 1028 => SqlType::Int8,
        1022 | 1021 => SqlType::Float8,
        1115 => SqlType::Timestamp,
        1182 => SqlType::Date,
        1009 | 1015 | 1014 => SqlType::Text,
        _ => return None,
    };
    Some(SqlType::Array(elem(e)))
}

/// The type name PostgreSQL gives an array type.
pub fn type_name(ty: SqlType) -> String {
    match ty {
        SqlType::Vector(SqlType::Int2) => "int2vector".into(),
        SqlType::Vector(_) => "oidvector".into(),
        SqlType::Array(e) => format!("{}[]", e.name()),
        t => t.name(),
    }
}

/// The element type of an array type (`None` for other types).
pub fn element_of(ty: SqlType) -> Option<SqlType> {
    match ty {
        SqlType::Array(e) | SqlType::Vector(e) => Some(*e),
        _ => None,
    }
}

const TAG_NULL: u8 = 0;
const TAG_INT: u8 = 1;
const TAG_TEXT: u8 = 2;
const TAG_BOOL: u8 = 3;
const TAG_FLOAT: u8 = 4;

/// The byte form of an array's elements (a tag per element, then its bytes).
pub fn encode(items: &[Datum]) -> Vec<u8> {
    let mut out = Vec::new();
    for d in items {
        match d {
            Datum::Null => out.push(TAG_NULL),
            Datum::Int(v) => {
                out.push(TAG_INT);
                out.extend_from_slice(&v.to_le_bytes());
            }
            Datum::Bool(b) => out.extend_from_slice(&[TAG_BOOL, u8::from(*b)]),
            Datum::Float(v) => {
                out.push(TAG_FLOAT);
                out.extend_from_slice(&v.to_le_bytes());
            }
            other => {
                let t = match other {
                    Datum::Text(t) => t.clone(),
                    d => d.to_text(SqlType::Text),
                };
                out.push(TAG_TEXT);
                out.extend_from_slice(&(t.len() as u32).to_le_bytes());
                out.extend_from_slice(t.as_bytes());
            }
        }
    }
    out
}

/// The elements of an array in byte form (`column` names it in the error a damaged one gives).
pub fn decode(b: &[u8], column: &str) -> SqlResult<Vec<Datum>> {
    let bad =
        || SqlError::new(code::DATA_CORRUPTED, format!("column \"{column}\": an array's bytes are damaged"));
    let mut out = Vec::new();
    let mut i = 0;
    let take = |i: &mut usize, n: usize| -> SqlResult<&[u8]> {
        let s = b.get(*i..*i + n).ok_or_else(bad)?;
        *i += n;
        Ok(s)
    };
    while i < b.len() {
        let tag = take(&mut i, 1)?[0];
        out.push(match tag {
            TAG_NULL => Datum::Null,
            TAG_INT => Datum::Int(i64::from_le_bytes(take(&mut i, 8)?.try_into().expect("8"))),
            TAG_FLOAT => Datum::Float(f64::from_le_bytes(take(&mut i, 8)?.try_into().expect("8"))),
            TAG_BOOL => Datum::Bool(take(&mut i, 1)?[0] != 0),
            TAG_TEXT => {
                let n = u32::from_le_bytes(take(&mut i, 4)?.try_into().expect("4")) as usize;
                Datum::Text(String::from_utf8(take(&mut i, n)?.to_vec()).map_err(|_| bad())?)
            }
            _ => return Err(bad()),
        });
    }
    Ok(out)
}

/// Appends the text format of array `items` of type `ty` (`{1,2,NULL}`; a vector's `1 2`).
pub fn write_text(items: &[Datum], ty: SqlType, out: &mut Vec<u8>) {
    let e = element_of(ty).unwrap_or(SqlType::Text);
    if matches!(ty, SqlType::Vector(_)) {
        for (i, d) in items.iter().enumerate() {
            if i > 0 {
                out.push(b' ');
            }
            d.write_text(e, out);
        }
        return;
    }
    out.push(b'{');
    for (i, d) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        if d.is_null() {
            out.extend_from_slice(b"NULL");
            continue;
        }
        let t = d.to_text(e);
        let quote = t.is_empty()
            || t.eq_ignore_ascii_case("null")
            || t.bytes().any(|c| matches!(c, b'{' | b'}' | b',' | b'"' | b'\\') || c.is_ascii_whitespace());
        if quote {
            out.push(b'"');
            for c in t.bytes() {
                if c == b'"' || c == b'\\' {
                    out.push(b'\\');
                }
                out.push(c);
            }
            out.push(b'"');
        } else {
            out.extend_from_slice(t.as_bytes());
        }
    }
    out.push(b'}');
}

/// Appends PostgreSQL's binary array format of `items` (type `ty`).
pub fn write_binary(items: &[Datum], ty: SqlType, out: &mut Vec<u8>) -> SqlResult<()> {
    let e = element_of(ty).unwrap_or(SqlType::Text);
    let ndim = i32::from(!items.is_empty());
    out.extend_from_slice(&ndim.to_be_bytes());
    out.extend_from_slice(&i32::from(items.iter().any(Datum::is_null)).to_be_bytes());
    out.extend_from_slice(&e.oid().to_be_bytes());
    if ndim == 1 {
        out.extend_from_slice(&(items.len() as i32).to_be_bytes());
        let lower: i32 = if matches!(ty, SqlType::Vector(_)) { 0 } else { 1 };
        out.extend_from_slice(&lower.to_be_bytes());
    }
    for d in items {
        if d.is_null() {
            out.extend_from_slice(&(-1i32).to_be_bytes());
            continue;
        }
        let at = out.len();
        out.extend_from_slice(&[0; 4]);
        d.write_binary(e, out)?;
        let len = (out.len() - at - 4) as i32;
        out[at..at + 4].copy_from_slice(&len.to_be_bytes());
    }
    Ok(())
}

/// Parses the text format of an array of type `ty` (`{1,2}`, `{"a b",NULL}`; a vector's `1 2`).
pub fn parse(text: &str, ty: SqlType) -> SqlResult<Datum> {
    let e = element_of(ty).unwrap_or(SqlType::Text);
    let bad =
        || SqlError::new(code::INVALID_TEXT_REPRESENTATION, format!("malformed array literal: \"{text}\""));
    let t = text.trim();
    if matches!(ty, SqlType::Vector(_)) {
        return t.split_whitespace().map(|x| Datum::parse(x, e)).collect::<SqlResult<_>>().map(Datum::Array);
    }
    let inner = t.strip_prefix('{').and_then(|x| x.strip_suffix('}')).ok_or_else(bad)?;
    let mut items = Vec::new();
    let mut chars = inner.chars().peekable();
    while chars.peek().is_some() {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let (mut s, quoted) = (String::new(), chars.next_if_eq(&'"').is_some());
        loop {
            match chars.next() {
                None if quoted => return Err(bad()),
                None => break,
                Some('"') if quoted => break,
                Some('\\') => s.push(chars.next().ok_or_else(bad)?),
                Some(',') if !quoted => break,
                Some(c) => s.push(c),
            }
        }
        if quoted {
            while chars.next_if(|c| c.is_whitespace()).is_some() {}
            if chars.next().is_some_and(|c| c != ',') {
                return Err(bad());
            }
        }
        let s = if quoted { s } else { s.trim().to_string() };
        items.push(if !quoted && s.eq_ignore_ascii_case("null") {
            Datum::Null
        } else {
            Datum::parse(&s, e)?
        });
    }
    Ok(Datum::Array(items))
}

/// Scalar functions over arrays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArrayFunc {
    /// `ARRAY[a, b, …]` (not strict: elements may be NULL).
    Build,
    /// `cardinality(a)`: the number of elements.
    Cardinality,
    /// `array_length(a, dim)`: the number of elements of dimension 1 (NULL for others or empty).
    Length,
    /// `array_lower(a, dim)`
    Lower,
    /// `array_upper(a, dim)`
    Upper,
    /// `array_to_string(a, sep [, null])`
    ToString,
    /// `x = ANY (a)`: SQL's three-valued membership (not strict in the elements).
    Any,
    /// `array_position(a, x)`: the first subscript whose element equals `x`.
    Position,
    /// `a[i]`: the element at subscript `i` (NULL outside the array).
    Subscript,
}

impl ArrayFunc {
    /// The function `name` over arguments `args`, if it is an array function: the function,
    /// its result type, the types its arguments are given.
    pub fn resolve(name: &str, args: &[SqlType]) -> Option<SqlResult<(ArrayFunc, SqlType, Vec<SqlType>)>> {
        let arr = args.first().copied().filter(|t| element_of(*t).is_some());
        let undefined = || {
            let list: Vec<String> = args.iter().map(|t| t.name()).collect();
            SqlError::new(
                code::UNDEFINED_FUNCTION,
                format!("function {name}({}) does not exist", list.join(", ")),
            )
        };
        let f = match name {
            "cardinality" => ArrayFunc::Cardinality,
            "array_length" => ArrayFunc::Length,
            "array_lower" => ArrayFunc::Lower,
            "array_upper" => ArrayFunc::Upper,
            "array_to_string" => ArrayFunc::ToString,
            "array_position" => ArrayFunc::Position,
            _ => return None,
        };
        let Some(a) = arr else { return Some(Err(undefined())) };
        let e = element_of(a).expect("an array");
        Some(Ok(match (f, args.len()) {
            (ArrayFunc::Cardinality, 1) => (f, SqlType::Int4, vec![a]),
            (ArrayFunc::Length | ArrayFunc::Lower | ArrayFunc::Upper, 2) => {
                (f, SqlType::Int4, vec![a, SqlType::Int4])
            }
            (ArrayFunc::ToString, 2 | 3) => {
                (f, SqlType::Text, [a, SqlType::Text, SqlType::Text][..args.len()].to_vec())
            }
            (ArrayFunc::Position, 2) => (f, SqlType::Int4, vec![a, e]),
            _ => return Some(Err(undefined())),
        }))
    }

    /// The name EXPLAIN shows.
    pub fn name(self) -> &'static str {
        match self {
            ArrayFunc::Build => "array",
            ArrayFunc::Cardinality => "cardinality",
            ArrayFunc::Length => "array_length",
            ArrayFunc::Lower => "array_lower",
            ArrayFunc::Upper => "array_upper",
            ArrayFunc::ToString => "array_to_string",
            ArrayFunc::Any => "any",
            ArrayFunc::Position => "array_position",
            ArrayFunc::Subscript => "subscript",
        }
    }

    /// Evaluates the call over `row` (`ty`: the planned result type).
    /// `vector`: the array argument is a vector (its subscripts start at 0).
    pub fn eval(
        self,
        vector: bool,
        args: &[Expr],
        ty: SqlType,
        row: &[Datum],
        ctx: &EvalCtx<'_>,
    ) -> SqlResult<Datum> {
        let vals = args.iter().map(|a| a.eval(row, ctx)).collect::<SqlResult<Vec<_>>>()?;
        let e = element_of(ty).unwrap_or(SqlType::Text);
        if self == ArrayFunc::Build {
            return Ok(Datum::Array(
                vals.into_iter().map(|v| v.coerce(e, "ARRAY")).collect::<SqlResult<_>>()?,
            ));
        }
        let items = match vals.first() {
            Some(Datum::Array(items)) => items,
            _ => return Ok(Datum::Null),
        };
        let lower = i64::from(!vector);
        let dim1 = || vals.get(1) == Some(&Datum::Int(1));
        Ok(match self {
            ArrayFunc::Build => unreachable!("handled above"),
            ArrayFunc::Cardinality => Datum::Int(items.len() as i64),
            _ if vals.iter().skip(1).take(2).any(Datum::is_null) && self != ArrayFunc::Any => Datum::Null,
            ArrayFunc::Length if dim1() && !items.is_empty() => Datum::Int(items.len() as i64),
            ArrayFunc::Lower if dim1() && !items.is_empty() => Datum::Int(lower),
            ArrayFunc::Upper if dim1() && !items.is_empty() => Datum::Int(lower + items.len() as i64 - 1),
            ArrayFunc::Length | ArrayFunc::Lower | ArrayFunc::Upper => Datum::Null,
            ArrayFunc::ToString => {
                let sep = vals[1].to_text(SqlType::Text);
                let null = vals.get(2).map(|n| n.to_text(SqlType::Text));
                let parts: Vec<String> = items
                    .iter()
                    .filter_map(
                        |d| if d.is_null() { null.clone() } else { Some(d.to_text(SqlType::Unknown)) },
                    )
                    .collect();
                Datum::Text(parts.join(&sep))
            }
            ArrayFunc::Position => items
                .iter()
                .position(|d| d.compare(&vals[1]) == Some(std::cmp::Ordering::Equal) && !d.is_null())
                .map_or(Datum::Null, |i| Datum::Int(lower + i as i64)),
            ArrayFunc::Any => any(&vals[1], items),
            ArrayFunc::Subscript => match vals[1] {
                Datum::Int(i) => {
                    usize::try_from(i - lower).ok().and_then(|i| items.get(i)).cloned().unwrap_or(Datum::Null)
                }
                _ => Datum::Null,
            },
        })
    }
}

/// `x = ANY (items)`: true if an element equals `x`, else NULL if `x` or an element is NULL,
/// else false.
fn any(x: &Datum, items: &[Datum]) -> Datum {
    if x.is_null() {
        return if items.is_empty() { Datum::Bool(false) } else { Datum::Null };
    }
    let mut unknown = false;
    for d in items {
        if d.is_null() {
            unknown = true;
        } else if d.compare(x) == Some(std::cmp::Ordering::Equal) {
            return Datum::Bool(true);
        }
    }
    if unknown {
        Datum::Null
    } else {
        Datum::Bool(false)
    }
}

/// Set-returning functions a select list may call (PostgreSQL 10's rules: the calls of one
/// select list run in step, as many rows as the longest, the shorter ones padded with NULL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Srf {
    /// `unnest(array)`: its elements.
    Unnest,
    /// `generate_subscripts(array, dim)`: its subscripts.
    Subscripts,
    /// `generate_series(start, stop [, step])` over integers.
    Series,
}

impl Srf {
    /// The set-returning function called `name`, if it is one.
    pub fn lookup(name: &str) -> Option<Srf> {
        Some(match name {
            "unnest" => Srf::Unnest,
            "generate_subscripts" => Srf::Subscripts,
            "generate_series" => Srf::Series,
            _ => return None,
        })
    }

    /// Checks the argument types; the result type and the types the arguments are given.
    pub fn resolve(self, name: &str, args: &[SqlType]) -> SqlResult<(SqlType, Vec<SqlType>)> {
        let undefined = || {
            let list: Vec<String> = args.iter().map(|t| t.name()).collect();
            SqlError::new(
                code::UNDEFINED_FUNCTION,
                format!("function {name}({}) does not exist", list.join(", ")),
            )
        };
        let e = args.first().copied().and_then(element_of);
        Ok(match (self, args.len(), e) {
            (Srf::Unnest, 1, Some(e)) => (e, args.to_vec()),
            (Srf::Subscripts, 2, Some(_)) => (SqlType::Int4, vec![args[0], SqlType::Int4]),
            (Srf::Series, 2 | 3, _) if args.iter().all(|t| t.is_integer() || *t == SqlType::Unknown) => {
                let ty = if args.contains(&SqlType::Int8) { SqlType::Int8 } else { SqlType::Int4 };
                (ty, vec![ty; args.len()])
            }
            _ => return Err(undefined()),
        })
    }

    /// The rows the call returns for argument values `vals` (`vector`: the array argument is a
    /// vector, whose subscripts start at 0).
    pub fn rows(self, vals: &[Datum], vector: bool) -> SqlResult<Vec<Datum>> {
        let items = match vals.first() {
            Some(Datum::Array(items)) => items.as_slice(),
            _ if self != Srf::Series => return Ok(vec![]),
            _ => &[],
        };
        let lower = i64::from(!vector);
        Ok(match self {
            Srf::Unnest => items.to_vec(),
            Srf::Subscripts if vals.get(1) == Some(&Datum::Int(1)) => {
                (0..items.len() as i64).map(|i| Datum::Int(lower + i)).collect()
            }
            Srf::Subscripts => vec![],
            Srf::Series => {
                let int = |k: usize| match vals.get(k) {
                    Some(Datum::Int(v)) => Some(*v),
                    None if k == 2 => Some(1),
                    _ => None,
                };
                let (Some(a), Some(b), Some(step)) = (int(0), int(1), int(2)) else { return Ok(vec![]) };
                if step == 0 {
                    return Err(SqlError::new(code::INVALID_PARAMETER_VALUE, "step size cannot equal zero"));
                }
                let mut out = Vec::new();
                let mut v = a;
                while (step > 0 && v <= b) || (step < 0 && v >= b) {
                    out.push(Datum::Int(v));
                    if out.len() > 10_000_000 {
                        return Err(SqlError::new(
                            code::PROGRAM_LIMIT_EXCEEDED,
                            "generate_series would return more than 10 million rows",
                        ));
                    }
                    v = match v.checked_add(step) {
                        Some(n) => n,
                        None => break,
                    };
                }
                out
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_round_trip_through_storage_and_text() {
        let items =
            vec![Datum::Int(3), Datum::Null, Datum::Text("a b".into()), Datum::Bool(true), Datum::Float(0.5)];
        assert_eq!(decode(&encode(&items), "c").unwrap(), items);
        assert!(decode(&[9], "c").is_err());
        let ty = SqlType::Array(&SqlType::Text);
        let d = Datum::Array(vec![Datum::Text("x".into()), Datum::Null, Datum::Text("a \"b\"".into())]);
        let text = d.to_text(ty);
        assert_eq!(text, r#"{x,NULL,"a \"b\""}"#);
        assert_eq!(parse(&text, ty).unwrap(), d);
        let v = Datum::Array(vec![Datum::Int(1), Datum::Int(3)]);
        assert_eq!(v.to_text(SqlType::Vector(&SqlType::Int2)), "1 3");
        assert_eq!(parse("1 3", SqlType::Vector(&SqlType::Int2)).unwrap(), v);
        assert_eq!(parse("{1,3}", SqlType::Array(&SqlType::Int4)).unwrap(), v);
        assert_eq!(
            parse("{1,", SqlType::Array(&SqlType::Int4)).unwrap_err().code,
            code::INVALID_TEXT_REPRESENTATION
        );
    }

    #[test]
    fn set_returning_functions_and_any() {
        let a = [Datum::Array(vec![Datum::Int(4), Datum::Int(2)]), Datum::Int(1)];
        assert_eq!(Srf::Unnest.rows(&a[..1], false).unwrap(), vec![Datum::Int(4), Datum::Int(2)]);
        assert_eq!(Srf::Subscripts.rows(&a, false).unwrap(), vec![Datum::Int(1), Datum::Int(2)]);
        assert_eq!(Srf::Subscripts.rows(&a, true).unwrap(), vec![Datum::Int(0), Datum::Int(1)]);
        assert_eq!(Srf::Series.rows(&[Datum::Int(1), Datum::Int(5), Datum::Int(2)], false).unwrap().len(), 3);
        assert_eq!(any(&Datum::Int(2), &[Datum::Int(4), Datum::Int(2)]), Datum::Bool(true));
        assert_eq!(any(&Datum::Int(3), &[Datum::Int(4), Datum::Null]), Datum::Null);
        assert_eq!(any(&Datum::Int(3), &[Datum::Int(4)]), Datum::Bool(false));
    }
}
