//! Scalar functions: the one table of names, argument types, result types and
//! implementations.
//!
//! Owns: [`Func`]. A new function is a variant, a line in [`Func::resolve`] (its names and
//! how its argument types decide its result type and the types its arguments are given) and
//! an arm in [`Func::eval`]. Invariant: functions are strict (a NULL argument gives NULL)
//! unless `resolve` says otherwise (`coalesce`, `nullif`, `greatest`, `least`, `concat`).

use super::{overflow, EvalCtx, Expr};
use crate::datetime::{date_trunc, extract, DAY_US};
use crate::error::{code, SqlError, SqlResult};
use crate::types::{now_micros, rescale, Datum, SqlType, DEFAULT_NUMERIC_SCALE};
use std::cmp::Ordering;

/// Built-in scalar functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Func {
    Now,
    CurrentDate,
    Version,
    CurrentSetting,
    CurrentDatabase,
    CurrentUser,
    CurrentSchema,
    Random,
    Coalesce,
    Nullif,
    Greatest,
    Least,
    Abs,
    Round,
    Trunc,
    Floor,
    Ceil,
    Mod,
    Power,
    Sqrt,
    Sign,
    Ln,
    Log10,
    Exp,
    Lower,
    Upper,
    Length,
    OctetLength,
    Substring,
    Position,
    Replace,
    Btrim,
    Ltrim,
    Rtrim,
    Concat,
    Left,
    Right,
    Lpad,
    Rpad,
    Repeat,
    Reverse,
    Initcap,
    SplitPart,
    /// `extract(field from x)` / `date_part(field, x)`: the field is the first argument.
    Extract,
    /// `date_trunc(field, x)`
    DateTrunc,
    /// `nextval(sequence)`
    Nextval,
    /// `currval(sequence)`
    Currval,
    /// `setval(sequence, value [, is_called])`
    Setval,
    /// `format_type(type oid, typmod)`: a type's SQL name (not strict in its modifier).
    FormatType,
    /// `pg_backend_pid()`: the id of the server process (connection) serving the session.
    BackendPid,
    /// `x ~ pattern` (POSIX regular expression match); the third argument is true for `~*`.
    RegexMatch,
    /// `json_build_object(key, value, …)`: a JSON object as text (not strict: NULL is `null`).
    JsonBuildObject,
    /// A function over arrays; true when its array argument is a vector.
    Array(crate::array::ArrayFunc, bool),
}

fn undefined(name: &str, args: &[SqlType]) -> SqlError {
    let list: Vec<String> = args.iter().map(|t| t.name()).collect();
    SqlError::new(code::UNDEFINED_FUNCTION, format!("function {name}({}) does not exist", list.join(", ")))
}

/// The type both of two types convert to (for CASE, COALESCE, UNION ...), if any.
pub fn common_type(a: SqlType, b: SqlType) -> Option<SqlType> {
    use SqlType as T;
    Some(match (a, b) {
        (x, y) if x == y => x,
        (T::Unknown, y) => y,
        (x, T::Unknown) => x,
        (x, y) if x.is_integer() && y.is_integer() => {
            if x == T::Int8 || y == T::Int8 {
                T::Int8
            } else if x == T::Int4 || y == T::Int4 {
                T::Int4
            } else {
                T::Int2
            }
        }
        (T::Float8, y) | (y, T::Float8) if y.is_numeric() => T::Float8,
        (T::Numeric { precision: p1, scale: s1 }, T::Numeric { precision: p2, scale: s2 }) => {
            T::Numeric { precision: p1.max(p2), scale: s1.max(s2) }
        }
        (n @ T::Numeric { .. }, y) | (y, n @ T::Numeric { .. }) if y.is_integer() => n,
        (x, y) if x.is_text() && y.is_text() => T::Text,
        (T::Date, T::Timestamp) | (T::Timestamp, T::Date) => T::Timestamp,
        _ => return None,
    })
}

impl Func {
    /// The names [`Func::resolve`] knows (what `pg_proc` lists).
    pub const NAMES: &[&str] = &[
        "now",
        "current_timestamp",
        "localtimestamp",
        "statement_timestamp",
        "transaction_timestamp",
        "clock_timestamp",
        "current_date",
        "version",
        "current_setting",
        "current_database",
        "current_catalog",
        "current_user",
        "session_user",
        "user",
        "current_role",
        "current_schema",
        "random",
        "coalesce",
        "greatest",
        "least",
        "nullif",
        "abs",
        "sign",
        "floor",
        "ceil",
        "ceiling",
        "round",
        "trunc",
        "mod",
        "power",
        "pow",
        "sqrt",
        "ln",
        "log",
        "log10",
        "exp",
        "lower",
        "upper",
        "initcap",
        "reverse",
        "length",
        "char_length",
        "character_length",
        "octet_length",
        "substring",
        "substr",
        "position",
        "strpos",
        "replace",
        "btrim",
        "trim",
        "ltrim",
        "rtrim",
        "concat",
        "left",
        "right",
        "lpad",
        "rpad",
        "repeat",
        "split_part",
        "date_part",
        "extract",
        "date_trunc",
        "format_type",
        "pg_backend_pid",
        "regexp_like",
        "json_build_object",
    ];

    /// The function called `name` with arguments of types `args`: the function, its result
    /// type, and the type each argument is given (untyped literals and parameters take it).
    pub fn resolve(name: &str, args: &[SqlType]) -> SqlResult<(Func, SqlType, Vec<SqlType>)> {
        use SqlType as T;
        let n = args.len();
        let want = |k: usize| -> SqlResult<()> {
            if n == k {
                Ok(())
            } else {
                Err(undefined(name, args))
            }
        };
        let text = T::Text;
        let num_arg = |t: SqlType| {
            if t == T::Unknown {
                T::Numeric { precision: 38, scale: DEFAULT_NUMERIC_SCALE }
            } else {
                t
            }
        };
        let same = |f: Func| -> SqlResult<(Func, SqlType, Vec<SqlType>)> {
            let ty = args.iter().try_fold(T::Unknown, |acc, t| common_type(acc, *t)).ok_or_else(|| {
                SqlError::new(code::DATATYPE_MISMATCH, format!("{name} types do not match: {args:?}"))
            })?;
            let ty = if ty == T::Unknown { T::Text } else { ty };
            Ok((f, ty, vec![ty; n]))
        };
        if let Some(r) = crate::array::ArrayFunc::resolve(name, args) {
            let (f, ty, want) = r?;
            return Ok((Func::Array(f, matches!(args[0], T::Vector(_))), ty, want));
        }
        Ok(match name {
            "now"
            | "current_timestamp"
            | "localtimestamp"
            | "statement_timestamp"
            | "transaction_timestamp"
            | "clock_timestamp" => {
                want(0)?;
                (Func::Now, T::Timestamp, vec![])
            }
            "nextval" => {
                want(1)?;
                (Func::Nextval, T::Int8, vec![text])
            }
            "currval" => {
                want(1)?;
                (Func::Currval, T::Int8, vec![text])
            }
            "setval" if n == 2 => (Func::Setval, T::Int8, vec![text, T::Int8]),
            "setval" if n == 3 => (Func::Setval, T::Int8, vec![text, T::Int8, T::Bool]),
            "current_date" => {
                want(0)?;
                (Func::CurrentDate, T::Date, vec![])
            }
            "version" => {
                want(0)?;
                (Func::Version, text, vec![])
            }
            "current_setting" if n == 1 || n == 2 => {
                (Func::CurrentSetting, text, [text, T::Bool][..n].to_vec())
            }
            "current_database" | "current_catalog" => {
                want(0)?;
                (Func::CurrentDatabase, text, vec![])
            }
            "current_user" | "session_user" | "user" | "current_role" => {
                want(0)?;
                (Func::CurrentUser, text, vec![])
            }
            "current_schema" => {
                want(0)?;
                (Func::CurrentSchema, text, vec![])
            }
            "random" => {
                want(0)?;
                (Func::Random, T::Float8, vec![])
            }
            "coalesce" if n >= 1 => same(Func::Coalesce)?,
            "greatest" if n >= 1 => same(Func::Greatest)?,
            "least" if n >= 1 => same(Func::Least)?,
            "nullif" if n == 2 => same(Func::Nullif)?,
            "abs" | "sign" | "floor" | "ceil" | "ceiling" => {
                want(1)?;
                let t = num_arg(args[0]);
                if !t.is_numeric() {
                    return Err(undefined(name, args));
                }
                let f = match name {
                    "abs" => Func::Abs,
                    "sign" => Func::Sign,
                    "floor" => Func::Floor,
                    _ => Func::Ceil,
                };
                let ty = match (f, t) {
                    (Func::Floor | Func::Ceil, T::Numeric { precision, .. }) => {
                        T::Numeric { precision, scale: 0 }
                    }
                    _ => t,
                };
                (f, ty, vec![t])
            }
            "round" | "trunc" if n == 1 || n == 2 => {
                let t = num_arg(args[0]);
                if !t.is_numeric() {
                    return Err(undefined(name, args));
                }
                let f = if name == "round" { Func::Round } else { Func::Trunc };
                let ty = match t {
                    T::Float8 if n == 1 => T::Float8,
                    t if t.is_integer() && n == 1 => t,
                    // The result's scale depends on the digits asked for: numeric, scale of the input.
                    T::Numeric { scale, .. } => T::Numeric { precision: 38, scale },
                    _ => T::Numeric { precision: 38, scale: DEFAULT_NUMERIC_SCALE },
                };
                let arg = if t == T::Float8 && n == 2 { T::Numeric { precision: 38, scale: 15 } } else { t };
                (f, ty, [arg, T::Int4][..n].to_vec())
            }
            "mod" => {
                want(2)?;
                let ty = common_type(num_arg(args[0]), num_arg(args[1]))
                    .filter(|t| t.is_numeric())
                    .ok_or_else(|| undefined(name, args))?;
                (Func::Mod, ty, vec![ty, ty])
            }
            "power" | "pow" => {
                want(2)?;
                (Func::Power, T::Float8, vec![T::Float8, T::Float8])
            }
            "sqrt" | "ln" | "log" | "log10" | "exp" => {
                want(1)?;
                let f = match name {
                    "sqrt" => Func::Sqrt,
                    "ln" => Func::Ln,
                    "exp" => Func::Exp,
                    _ => Func::Log10,
                };
                (f, T::Float8, vec![T::Float8])
            }
            "lower" | "upper" | "initcap" | "reverse" => {
                want(1)?;
                let f = match name {
                    "lower" => Func::Lower,
                    "upper" => Func::Upper,
                    "initcap" => Func::Initcap,
                    _ => Func::Reverse,
                };
                (f, text, vec![text])
            }
            "length" | "char_length" | "character_length" => {
                want(1)?;
                let a = if args[0] == T::Bytea { T::Bytea } else { text };
                (Func::Length, T::Int4, vec![a])
            }
            "octet_length" => {
                want(1)?;
                let a = if args[0] == T::Bytea { T::Bytea } else { text };
                (Func::OctetLength, T::Int4, vec![a])
            }
            "substring" | "substr" if n == 2 || n == 3 => {
                (Func::Substring, text, [text, T::Int4, T::Int4][..n].to_vec())
            }
            "position" | "strpos" => {
                want(2)?;
                (Func::Position, T::Int4, vec![text, text])
            }
            "replace" => {
                want(3)?;
                (Func::Replace, text, vec![text; 3])
            }
            "btrim" | "trim" if n == 1 || n == 2 => (Func::Btrim, text, vec![text; n]),
            "ltrim" if n == 1 || n == 2 => (Func::Ltrim, text, vec![text; n]),
            "rtrim" if n == 1 || n == 2 => (Func::Rtrim, text, vec![text; n]),
            "concat" => (Func::Concat, text, vec![text; n]),
            "left" | "right" => {
                want(2)?;
                (if name == "left" { Func::Left } else { Func::Right }, text, vec![text, T::Int4])
            }
            "lpad" | "rpad" if n == 2 || n == 3 => (
                if name == "lpad" { Func::Lpad } else { Func::Rpad },
                text,
                [text, T::Int4, text][..n].to_vec(),
            ),
            "repeat" => {
                want(2)?;
                (Func::Repeat, text, vec![text, T::Int4])
            }
            "split_part" => {
                want(3)?;
                (Func::SplitPart, text, vec![text, text, T::Int4])
            }
            "date_part" | "extract" => {
                want(2)?;
                let t = match args[1] {
                    T::Date | T::Unknown => T::Timestamp,
                    t => t,
                };
                let ty = if name == "extract" { T::Numeric { precision: 38, scale: 0 } } else { T::Float8 };
                (Func::Extract, ty, vec![text, t])
            }
            "date_trunc" => {
                want(2)?;
                let t = if args[1] == T::Unknown { T::Timestamp } else { args[1] };
                let t = if t == T::Date { T::Timestamp } else { t };
                (Func::DateTrunc, t, vec![text, t])
            }
            "format_type" => {
                want(2)?;
                (Func::FormatType, text, vec![T::Int8, T::Int8])
            }
            "pg_backend_pid" => {
                want(0)?;
                (Func::BackendPid, T::Int4, vec![])
            }
            "regexp_like" if n == 2 || n == 3 => (Func::RegexMatch, T::Bool, vec![text; n]),
            "json_build_object" if n.is_multiple_of(2) => (
                Func::JsonBuildObject,
                text,
                args.iter()
                    .enumerate()
                    .map(|(i, t)| if i % 2 == 0 || *t == T::Unknown { text } else { *t })
                    .collect(),
            ),
            _ => return Err(undefined(name, args)),
        })
    }

    /// True for functions whose value changes from call to call.
    pub fn is_volatile(self) -> bool {
        matches!(self, Func::Random | Func::Nextval | Func::Currval | Func::Setval)
    }

    /// The name EXPLAIN shows.
    pub fn name(self) -> String {
        let s = format!("{self:?}");
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if c.is_ascii_uppercase() && i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        }
        match self {
            Func::Extract => "date_part".into(),
            Func::Log10 => "log".into(),
            Func::Array(f, _) => f.name().into(),
            _ => out,
        }
    }

    /// Evaluates the call with arguments `args` over `row`; `ty` is the planned result type.
    pub fn eval(self, args: &[Expr], ty: SqlType, row: &[Datum], ctx: &EvalCtx<'_>) -> SqlResult<Datum> {
        // Functions that look at NULL arguments themselves.
        match self {
            Func::Array(f, vector) => return f.eval(vector, args, ty, row, ctx),
            Func::Coalesce => {
                for a in args {
                    let v = a.eval(row, ctx)?;
                    if !v.is_null() {
                        return v.coerce(ty, "coalesce");
                    }
                }
                return Ok(Datum::Null);
            }
            Func::Nullif => {
                let a = args[0].eval(row, ctx)?;
                let b = args[1].eval(row, ctx)?;
                return Ok(if !a.is_null() && !b.is_null() && a.compare(&b) == Some(Ordering::Equal) {
                    Datum::Null
                } else {
                    a
                });
            }
            Func::Greatest | Func::Least => {
                let mut best: Option<Datum> = None;
                for a in args {
                    let v = a.eval(row, ctx)?;
                    if v.is_null() {
                        continue;
                    }
                    let better = match &best {
                        None => true,
                        Some(b) => {
                            let o = v.compare(b).unwrap_or(Ordering::Equal);
                            (o == Ordering::Greater) == (self == Func::Greatest) && o != Ordering::Equal
                        }
                    };
                    if better {
                        best = Some(v);
                    }
                }
                return best.map_or(Ok(Datum::Null), |b| b.coerce(ty, "greatest"));
            }
            Func::JsonBuildObject => {
                let mut out = String::from("{");
                for (i, pair) in args.chunks(2).enumerate() {
                    let (k, v) = (pair[0].eval(row, ctx)?, pair[1].eval(row, ctx)?);
                    if k.is_null() {
                        return Err(SqlError::new(
                            code::INVALID_PARAMETER_VALUE,
                            "null value not allowed for object key",
                        ));
                    }
                    let value = match &v {
                        Datum::Null => "null".to_string(),
                        Datum::Bool(b) => b.to_string(),
                        Datum::Int(x) => x.to_string(),
                        Datum::Float(x) => x.to_string(),
                        Datum::Numeric(_, scale) => {
                            v.to_text(SqlType::Numeric { precision: 38, scale: *scale })
                        }
                        Datum::Text(t) => json_string(t),
                        Datum::Timestamp(_) => json_string(&v.to_text(SqlType::Timestamp)),
                        Datum::Date(_) => json_string(&v.to_text(SqlType::Date)),
                        other => json_string(&other.to_text(SqlType::Text)),
                    };
                    out.push_str(if i == 0 { "" } else { ", " });
                    out.push_str(&format!("{} : {value}", json_string(&k.to_text(SqlType::Text))));
                }
                out.push('}');
                return Ok(Datum::Text(out));
            }
            Func::FormatType => {
                let oid = args[0].eval(row, ctx)?;
                let typmod = args[1].eval(row, ctx)?;
                let Datum::Int(oid) = oid else { return Ok(Datum::Null) };
                let typmod = if let Datum::Int(m) = typmod { Some(m) } else { None };
                return Ok(Datum::Text(
                    crate::pgcatalog::format_type(oid, typmod).unwrap_or_else(|| "???".into()),
                ));
            }
            Func::Concat => {
                let mut s = String::new();
                for a in args {
                    let v = a.eval(row, ctx)?;
                    if !v.is_null() {
                        s.push_str(&v.to_text(SqlType::Text));
                    }
                }
                return Ok(Datum::Text(s));
            }
            _ => {}
        }
        let mut vals = Vec::with_capacity(args.len());
        for a in args {
            let v = a.eval(row, ctx)?;
            if v.is_null() && !matches!(self, Func::CurrentSetting) {
                return Ok(Datum::Null);
            }
            vals.push(v);
        }
        let text = |i: usize| -> &str {
            match &vals[i] {
                Datum::Text(t) => t.trim_end_matches('\0'),
                _ => "",
            }
        };
        let int = |i: usize| -> i64 {
            match &vals[i] {
                Datum::Int(v) => *v,
                d => d.as_f64().unwrap_or(0.0) as i64,
            }
        };
        let float = |i: usize| vals[i].as_f64().unwrap_or(f64::NAN);
        let ts = |i: usize| -> i64 {
            match &vals[i] {
                Datum::Timestamp(t) => *t,
                Datum::Date(d) => i64::from(*d) * DAY_US,
                _ => 0,
            }
        };
        Ok(match self {
            Func::Nextval | Func::Currval | Func::Setval => {
                let seqs = ctx.seqs.ok_or_else(|| {
                    SqlError::new(code::FEATURE_NOT_SUPPORTED, format!("{}() here", self.name()))
                })?;
                Datum::Int(match self {
                    Func::Nextval => seqs.nextval(text(0))?,
                    Func::Currval => seqs.currval(text(0))?,
                    _ => seqs.setval(text(0), int(1), !matches!(vals.get(2), Some(Datum::Bool(false))))?,
                })
            }
            Func::Now => Datum::Timestamp(ctx.now),
            Func::CurrentDate => Datum::Date(ctx.now.div_euclid(DAY_US) as i32),
            Func::Version => Datum::Text(super::version_string()),
            Func::CurrentSetting => match &vals[0] {
                Datum::Text(name) => match (ctx.settings)(&name.to_ascii_lowercase()) {
                    Some(v) => Datum::Text(v),
                    None if matches!(vals.get(1), Some(Datum::Bool(true))) => Datum::Null,
                    None => {
                        return Err(SqlError::new(
                            code::UNDEFINED_OBJECT,
                            format!("unrecognized configuration parameter \"{name}\""),
                        ))
                    }
                },
                _ => Datum::Null,
            },
            Func::CurrentDatabase => Datum::Text(ctx.database.to_string()),
            Func::CurrentUser => Datum::Text(ctx.user.to_string()),
            Func::CurrentSchema => Datum::Text("public".into()),
            Func::BackendPid => Datum::Int(i64::from(ctx.backend_pid)),
            Func::RegexMatch => {
                let flags = if vals.len() > 2 { text(2) } else { "" };
                Datum::Bool(regex_match(text(0), text(1), flags.contains('i') || flags == "true")?)
            }
            Func::Random => {
                // A per-thread xorshift seeded from the clock: good enough for SQL's random().
                thread_local!(static STATE: std::cell::Cell<u64> = std::cell::Cell::new(now_micros() as u64 | 1));
                let x = STATE.with(|s| {
                    let mut x = s.get();
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    s.set(x);
                    x
                });
                Datum::Float((x >> 11) as f64 / (1u64 << 53) as f64)
            }
            Func::Abs => match &vals[0] {
                Datum::Int(v) => Datum::Int(v.checked_abs().ok_or_else(|| overflow(ty))?),
                Datum::Float(v) => Datum::Float(v.abs()),
                Datum::Numeric(v, s) => Datum::Numeric(v.abs(), *s),
                d => d.clone(),
            },
            Func::Sign => match &vals[0] {
                Datum::Int(v) => Datum::Int(v.signum()),
                Datum::Float(v) => Datum::Float(if *v == 0.0 { 0.0 } else { v.signum() }),
                Datum::Numeric(v, s) => Datum::Numeric(v.signum() * 10i128.pow(u32::from(*s)), *s),
                d => d.clone(),
            },
            Func::Floor | Func::Ceil => match &vals[0] {
                Datum::Float(v) => Datum::Float(if self == Func::Floor { v.floor() } else { v.ceil() }),
                Datum::Numeric(v, s) => {
                    let d = 10i128.pow(u32::from(*s));
                    let q = v.div_euclid(d);
                    let q = if self == Func::Ceil && v.rem_euclid(d) != 0 { q + 1 } else { q };
                    Datum::Numeric(q, 0)
                }
                d => d.clone(),
            },
            Func::Round | Func::Trunc => {
                let digits = if vals.len() > 1 { int(1) } else { 0 };
                match &vals[0] {
                    Datum::Float(v) if vals.len() == 1 => {
                        Datum::Float(if self == Func::Round { v.round() } else { v.trunc() })
                    }
                    Datum::Int(v) if vals.len() == 1 => Datum::Int(*v),
                    d => {
                        let (v, s) = match d {
                            Datum::Numeric(v, s) => (*v, *s),
                            Datum::Int(v) => (i128::from(*v), 0),
                            other => {
                                let t = other.to_text(SqlType::Text);
                                let n = crate::types::Datum::parse(&t, SqlType::Numeric { precision: 38, scale: 15 })?;
                                match n {
                                    Datum::Numeric(v, s) => (v, s),
                                    _ => return Err(overflow(ty)),
                                }
                            }
                        };
                        let keep = digits.clamp(-30, 30);
                        let drop = i64::from(s) - keep;
                        let r = if drop <= 0 {
                            v
                        } else {
                            let p = 10i128.checked_pow(drop as u32).ok_or_else(|| overflow(ty))?;
                            let q = v / p;
                            let q = if self == Func::Round && (v % p).abs() * 2 >= p { q + v.signum() } else { q };
                            q * p
                        };
                        let out_scale = match ty {
                            SqlType::Numeric { scale, .. } => scale,
                            _ => s,
                        };
                        let r = rescale(r, s, out_scale).ok_or_else(|| overflow(ty))?;
                        if out_scale == 0 && ty.is_integer() {
                            Datum::Int(i64::try_from(r).map_err(|_| overflow(ty))?)
                        } else {
                            Datum::Numeric(r, out_scale)
                        }
                    }
                }
            }
            Func::Mod => super::arith(super::BinOp::Mod, &vals[0], &vals[1], ty)?,
            Func::Power => Datum::Float(float(0).powf(float(1))),
            Func::Sqrt => {
                let v = float(0);
                if v < 0.0 {
                    return Err(SqlError::new("2201F", "cannot take square root of a negative number"));
                }
                Datum::Float(v.sqrt())
            }
            Func::Ln | Func::Log10 => {
                let v = float(0);
                if v <= 0.0 {
                    return Err(SqlError::new(
                        "2201E",
                        if v == 0.0 { "cannot take logarithm of zero" } else { "cannot take logarithm of a negative number" },
                    ));
                }
                Datum::Float(if self == Func::Ln { v.ln() } else { v.log10() })
            }
            Func::Exp => Datum::Float(float(0).exp()),
            Func::Lower => Datum::Text(text(0).to_lowercase()),
            Func::Upper => Datum::Text(text(0).to_uppercase()),
            Func::Initcap => {
                let mut out = String::new();
                let mut start = true;
                for c in text(0).chars() {
                    if c.is_alphanumeric() {
                        if start {
                            out.extend(c.to_uppercase());
                        } else {
                            out.extend(c.to_lowercase());
                        }
                        start = false;
                    } else {
                        out.push(c);
                        start = true;
                    }
                }
                Datum::Text(out)
            }
            Func::Reverse => Datum::Text(text(0).chars().rev().collect()),
            Func::Length => match &vals[0] {
                Datum::Bytes(b) => Datum::Int(b.len() as i64),
                _ => Datum::Int(text(0).chars().count() as i64),
            },
            Func::OctetLength => match &vals[0] {
                Datum::Bytes(b) => Datum::Int(b.len() as i64),
                _ => Datum::Int(text(0).len() as i64),
            },
            Func::Substring => {
                // SQL positions count from 1; a start before 1 shortens the length.
                let s = text(0);
                let start = int(1);
                let (from, len) = match vals.get(2) {
                    Some(_) => {
                        let len = int(2);
                        if len < 0 {
                            return Err(SqlError::new("22011", "negative substring length not allowed"));
                        }
                        (start, Some(len))
                    }
                    None => (start, None),
                };
                let skip = (from - 1).max(0) as usize;
                let take = len.map(|l| (l + from.min(1) - 1).max(0) as usize);
                let it = s.chars().skip(skip);
                Datum::Text(match take {
                    Some(t) => it.take(t).collect(),
                    None => it.collect(),
                })
            }
            Func::Position => {
                let (hay, needle) = (text(0), text(1));
                Datum::Int(match hay.find(needle) {
                    Some(b) => hay[..b].chars().count() as i64 + 1,
                    None => 0,
                })
            }
            Func::Replace => Datum::Text(if text(1).is_empty() { text(0).to_string() } else { text(0).replace(text(1), text(2)) }),
            Func::Btrim | Func::Ltrim | Func::Rtrim => {
                let set: Vec<char> = if vals.len() > 1 { text(1).chars().collect() } else { vec![' '] };
                let s = text(0);
                let f = |c: char| set.contains(&c);
                Datum::Text(
                    match self {
                        Func::Btrim => s.trim_matches(f),
                        Func::Ltrim => s.trim_start_matches(f),
                        _ => s.trim_end_matches(f),
                    }
                    .to_string(),
                )
            }
            Func::Left | Func::Right => {
                let s: Vec<char> = text(0).chars().collect();
                let n = int(1);
                let len = s.len() as i64;
                let k = if n >= 0 { n.min(len) } else { (len + n).max(0) } as usize;
                Datum::Text(if self == Func::Left { s[..k].iter().collect() } else { s[s.len() - k..].iter().collect() })
            }
            Func::Lpad | Func::Rpad => {
                let s: Vec<char> = text(0).chars().collect();
                let n = int(1).max(0) as usize;
                let fill: Vec<char> = if vals.len() > 2 { text(2).chars().collect() } else { vec![' '] };
                if s.len() >= n || fill.is_empty() {
                    Datum::Text(s[..n.min(s.len())].iter().collect())
                } else {
                    let pad: String = fill.iter().cycle().take(n - s.len()).collect();
                    let body: String = s.iter().collect();
                    Datum::Text(if self == Func::Lpad { pad + &body } else { body + &pad })
                }
            }
            Func::Repeat => Datum::Text(text(0).repeat(int(1).clamp(0, 1 << 20) as usize)),
            Func::SplitPart => {
                let n = int(2);
                if n == 0 {
                    return Err(SqlError::new(code::INVALID_PARAMETER_VALUE, "field position must not be zero"));
                }
                let parts: Vec<&str> = if text(1).is_empty() { vec![text(0)] } else { text(0).split(text(1)).collect() };
                let i = if n > 0 { n - 1 } else { parts.len() as i64 + n };
                Datum::Text(usize::try_from(i).ok().and_then(|i| parts.get(i)).map_or(String::new(), |s| s.to_string()))
            }
            Func::Extract => {
                let field = text(0).to_ascii_lowercase();
                let v = match &vals[1] {
                    Datum::Interval(iv) => match field.as_str() {
                        "year" | "years" => f64::from(iv.months / 12),
                        "month" | "months" => f64::from(iv.months % 12),
                        "day" | "days" => f64::from(iv.days),
                        "epoch" => iv.sort_key() as f64 / 1e6,
                        _ => extract(&field, iv.micros)?,
                    },
                    _ => extract(&field, ts(1))?,
                };
                match ty {
                    SqlType::Float8 => Datum::Float(v),
                    _ => {
                        let s = if v.fract() == 0.0 { 0u8 } else { 6 };
                        let scaled = (v * 10f64.powi(i32::from(s))).round() as i128;
                        Datum::Numeric(scaled, s)
                    }
                }
            }
            Func::DateTrunc => {
                let field = text(0).to_ascii_lowercase();
                Datum::Timestamp(date_trunc(&field, ts(1))?)
            }
            // Coalesce, Nullif, Greatest, Least, Concat, FormatType, JsonBuildObject, Array.
            _ => unreachable!("handled above"),
        })
        // An integer result where a double was planned (power of integers) is a double.
        .map(|d| match d {
            Datum::Int(v) if ty == SqlType::Float8 => Datum::Float(v as f64),
            d => d,
        })
    }
}

/// `s` as a JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Whether `s` matches the POSIX regular expression `pattern` (compiled regular expressions
/// are kept per thread for the pattern last used, so a scan compiles its pattern once).
fn regex_match(s: &str, pattern: &str, case_insensitive: bool) -> SqlResult<bool> {
    type Cached = Option<(String, bool, regex::Regex)>;
    thread_local!(static LAST: std::cell::RefCell<Cached> = const { std::cell::RefCell::new(None) });
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        let fresh = !matches!(&*last, Some((p, ci, _)) if p == pattern && *ci == case_insensitive);
        if fresh {
            let re = regex::RegexBuilder::new(pattern).case_insensitive(case_insensitive).build().map_err(
                |e| {
                    SqlError::new(
                        code::INVALID_REGULAR_EXPRESSION,
                        format!("invalid regular expression \"{pattern}\": {e}"),
                    )
                },
            )?;
            *last = Some((pattern.to_string(), case_insensitive, re));
        }
        Ok(last.as_ref().is_some_and(|(_, _, re)| re.is_match(s)))
    })
}

#[cfg(test)]
mod tests;
