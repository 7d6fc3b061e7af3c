//! Compiled expressions and their evaluation.
//!
//! Owns: [`Expr`] (column references by position in the row being evaluated, parameters by
//! number, constants, operators, functions) and its evaluation over a row with SQL's
//! three-valued logic. Invariant: types were checked when the expression was planned, so
//! evaluation only fails on data (overflow, division by zero, a bad cast), with a SQLSTATE.

use crate::error::{code, SqlError, SqlResult};
use crate::types::{check_int_range, now_micros, rescale, Datum, SqlType, DEFAULT_NUMERIC_SCALE};
use std::cmp::Ordering;

/// Binary operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Mod,
    /// `=`
    Eq,
    /// `<>`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `AND`
    And,
    /// `OR`
    Or,
    /// `||`
    Concat,
}

/// Built-in scalar functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Func {
    /// `now()`, `CURRENT_TIMESTAMP`, `LOCALTIMESTAMP`
    Now,
    /// `version()`
    Version,
    /// `current_setting(name)`
    CurrentSetting,
    /// `coalesce(a, b, ...)`
    Coalesce,
    /// `abs(x)`
    Abs,
    /// `lower(s)`
    Lower,
    /// `upper(s)`
    Upper,
    /// `length(s)`, `char_length(s)`
    Length,
    /// `current_database()`
    CurrentDatabase,
    /// `current_user`, `session_user`, `user`
    CurrentUser,
    /// `random()`
    Random,
}

/// Aggregate functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggFunc {
    /// `count(*)`
    CountStar,
    /// `count(x)`
    Count,
    /// `sum(x)`
    Sum,
    /// `min(x)`
    Min,
    /// `max(x)`
    Max,
    /// `avg(x)`
    Avg,
}

/// A compiled expression.
#[derive(Debug, Clone)]
pub enum Expr {
    /// A constant.
    Const(Datum),
    /// Column `n` of the row evaluated.
    Column(usize),
    /// Parameter `$n+1`.
    Param(usize),
    /// Arithmetic negation.
    Neg(Box<Expr>),
    /// Logical NOT.
    Not(Box<Expr>),
    /// A binary operator; the type is the result's.
    Binary(BinOp, Box<Expr>, Box<Expr>, SqlType),
    /// `IS [NOT] NULL`
    IsNull(Box<Expr>, bool),
    /// `x [NOT] IN (list)`
    InList(Box<Expr>, Vec<Expr>, bool),
    /// `x [NOT] LIKE pattern` (case-insensitive for ILIKE)
    Like(Box<Expr>, Box<Expr>, bool, bool),
    /// A cast to a type.
    Cast(Box<Expr>, SqlType),
    /// A scalar function call.
    Func(Func, Vec<Expr>),
    /// `CASE [operand] WHEN .. THEN .. ELSE .. END`
    Case(Option<Box<Expr>>, Vec<(Expr, Expr)>, Option<Box<Expr>>),
    /// The value of uncorrelated scalar subquery `n` (computed before the statement runs).
    Subquery(usize),
}

/// What evaluation may consult besides the row.
pub struct EvalCtx<'a> {
    /// Bound parameters.
    pub params: &'a [Datum],
    /// Session settings (`current_setting`).
    pub settings: &'a dyn Fn(&str) -> Option<String>,
    /// The statement's timestamp.
    pub now: i64,
    /// The connected user and database.
    pub user: &'a str,
    /// The database name the client connected to.
    pub database: &'a str,
    /// Values of the statement's scalar subqueries.
    pub subs: &'a [Datum],
}

/// The `version()` string.
pub fn version_string() -> String {
    format!(
        "PostgreSQL 15.0 (nvmedb {}, a storage engine for microsecond-latency NVMe; SQL over the PostgreSQL protocol)",
        env!("CARGO_PKG_VERSION")
    )
}

fn overflow(ty: SqlType) -> SqlError {
    SqlError::new(code::NUMERIC_VALUE_OUT_OF_RANGE, format!("{} out of range", ty.name()))
}

fn div_zero() -> SqlError {
    SqlError::new(code::DIVISION_BY_ZERO, "division by zero")
}

/// Result scale of a numeric operation.
fn numeric_scale(op: BinOp, a: u8, b: u8) -> u8 {
    match op {
        BinOp::Mul => (a + b).min(30),
        BinOp::Div => a.max(b).max(DEFAULT_NUMERIC_SCALE),
        _ => a.max(b),
    }
}

/// Applies an arithmetic operator to two non-NULL datums; `ty` is the planned result type.
pub fn arith(op: BinOp, a: &Datum, b: &Datum, ty: SqlType) -> SqlResult<Datum> {
    Ok(match (a, b) {
        (Datum::Int(x), Datum::Int(y)) => {
            let r = match op {
                BinOp::Add => x.checked_add(*y),
                BinOp::Sub => x.checked_sub(*y),
                BinOp::Mul => x.checked_mul(*y),
                BinOp::Div if *y == 0 => return Err(div_zero()),
                BinOp::Div => x.checked_div(*y),
                BinOp::Mod if *y == 0 => return Err(div_zero()),
                BinOp::Mod => x.checked_rem(*y),
                _ => None,
            }
            .ok_or_else(|| overflow(ty))?;
            check_int_range(r, if ty.is_integer() { ty } else { SqlType::Int8 })?;
            Datum::Int(r)
        }
        (Datum::Float(_), _) | (_, Datum::Float(_)) => {
            let (x, y) = (a.as_f64().unwrap_or(f64::NAN), b.as_f64().unwrap_or(f64::NAN));
            Datum::Float(match op {
                BinOp::Add => x + y,
                BinOp::Sub => x - y,
                BinOp::Mul => x * y,
                BinOp::Div if y == 0.0 => return Err(div_zero()),
                BinOp::Div => x / y,
                BinOp::Mod if y == 0.0 => return Err(div_zero()),
                BinOp::Mod => x % y,
                _ => {
                    return Err(SqlError::new(
                        code::UNDEFINED_FUNCTION,
                        format!("operator {op:?} on doubles"),
                    ))
                }
            })
        }
        (Datum::Numeric(..) | Datum::Int(_), Datum::Numeric(..) | Datum::Int(_)) => {
            let as_num = |d: &Datum| match d {
                Datum::Numeric(v, s) => (*v, *s),
                Datum::Int(v) => (i128::from(*v), 0),
                _ => unreachable!("numeric or int"),
            };
            let ((x, sx), (y, sy)) = (as_num(a), as_num(b));
            let s = sx.max(sy);
            let (xs, ys) = (
                rescale(x, sx, s).ok_or_else(|| overflow(ty))?,
                rescale(y, sy, s).ok_or_else(|| overflow(ty))?,
            );
            let out_scale = numeric_scale(op, sx, sy);
            let r = match op {
                BinOp::Add => xs.checked_add(ys).map(|v| (v, s)),
                BinOp::Sub => xs.checked_sub(ys).map(|v| (v, s)),
                BinOp::Mul => x.checked_mul(y).map(|v| (v, sx + sy)),
                BinOp::Div if y == 0 => return Err(div_zero()),
                BinOp::Div => {
                    // x/10^sx ÷ y/10^sy at out_scale = x·10^(out_scale + sy - sx) / y, rounded.
                    let shift = i32::from(out_scale) + i32::from(sy) - i32::from(sx);
                    let num = if shift >= 0 {
                        x.checked_mul(10i128.checked_pow(shift as u32).ok_or_else(|| overflow(ty))?)
                    } else {
                        rescale(x, (-shift) as u8, 0)
                    }
                    .ok_or_else(|| overflow(ty))?;
                    let (q, r) = (num / y, num % y);
                    let q = if r.abs() * 2 >= y.abs() { q + (num.signum() * y.signum()) } else { q };
                    Some((q, out_scale))
                }
                BinOp::Mod if ys == 0 => return Err(div_zero()),
                BinOp::Mod => xs.checked_rem(ys).map(|v| (v, s)),
                _ => None,
            }
            .ok_or_else(|| overflow(ty))?;
            let v = rescale(r.0, r.1, out_scale).ok_or_else(|| overflow(ty))?;
            Datum::Numeric(v, out_scale)
        }
        (a, b) => {
            return Err(SqlError::new(
                code::UNDEFINED_FUNCTION,
                format!("operator does not exist: {a:?} {op:?} {b:?}"),
            ))
        }
    })
}

fn like(text: &str, pattern: &str, ci: bool) -> bool {
    let (t, p): (Vec<char>, Vec<char>) = if ci {
        (text.to_lowercase().chars().collect(), pattern.to_lowercase().chars().collect())
    } else {
        (text.chars().collect(), pattern.chars().collect())
    };
    // Iterative matcher with backtracking on the last '%'.
    let (mut ti, mut pi) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ti < t.len() {
        if pi < p.len() && p[pi] == '\\' && pi + 1 < p.len() && p[pi + 1] == t[ti] {
            ti += 1;
            pi += 2;
        } else if pi < p.len() && (p[pi] == '_' || (p[pi] == t[ti] && p[pi] != '%')) {
            ti += 1;
            pi += 1;
        } else if pi < p.len() && p[pi] == '%' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '%' {
        pi += 1;
    }
    pi == p.len()
}

fn truth(d: &Datum) -> Option<bool> {
    match d {
        Datum::Bool(b) => Some(*b),
        Datum::Null => None,
        Datum::Int(v) => Some(*v != 0),
        _ => None,
    }
}

impl Expr {
    /// True if the expression reads no column (constants, parameters, functions of them).
    pub fn is_row_independent(&self) -> bool {
        match self {
            Expr::Const(_) | Expr::Param(_) | Expr::Subquery(_) => true,
            Expr::Column(_) => false,
            Expr::Neg(e) | Expr::Not(e) | Expr::IsNull(e, _) | Expr::Cast(e, _) => e.is_row_independent(),
            Expr::Binary(_, a, b, _) | Expr::Like(a, b, _, _) => {
                a.is_row_independent() && b.is_row_independent()
            }
            Expr::InList(e, l, _) => e.is_row_independent() && l.iter().all(Expr::is_row_independent),
            Expr::Func(f, args) => *f != Func::Random && args.iter().all(Expr::is_row_independent),
            Expr::Case(o, w, e) => {
                o.as_ref().is_none_or(|o| o.is_row_independent())
                    && w.iter().all(|(a, b)| a.is_row_independent() && b.is_row_independent())
                    && e.as_ref().is_none_or(|e| e.is_row_independent())
            }
        }
    }

    /// Calls `f` with every column position the expression reads.
    pub fn columns(&self, f: &mut dyn FnMut(usize)) {
        match self {
            Expr::Column(c) => f(*c),
            Expr::Const(_) | Expr::Param(_) | Expr::Subquery(_) => {}
            Expr::Neg(e) | Expr::Not(e) | Expr::IsNull(e, _) | Expr::Cast(e, _) => e.columns(f),
            Expr::Binary(_, a, b, _) | Expr::Like(a, b, _, _) => {
                a.columns(f);
                b.columns(f);
            }
            Expr::InList(e, l, _) => {
                e.columns(f);
                l.iter().for_each(|x| x.columns(f));
            }
            Expr::Func(_, args) => args.iter().for_each(|x| x.columns(f)),
            Expr::Case(o, w, e) => {
                if let Some(o) = o {
                    o.columns(f);
                }
                for (a, b) in w {
                    a.columns(f);
                    b.columns(f);
                }
                if let Some(e) = e {
                    e.columns(f);
                }
            }
        }
    }

    /// Evaluates over `row`.
    pub fn eval(&self, row: &[Datum], ctx: &EvalCtx<'_>) -> SqlResult<Datum> {
        Ok(match self {
            Expr::Const(d) => d.clone(),
            Expr::Column(c) => row[*c].clone(),
            Expr::Subquery(i) => ctx.subs.get(*i).cloned().unwrap_or(Datum::Null),
            Expr::Param(i) => ctx.params.get(*i).cloned().ok_or_else(|| {
                SqlError::new(code::UNDEFINED_PARAMETER, format!("there is no parameter ${}", i + 1))
            })?,
            Expr::Neg(e) => match e.eval(row, ctx)? {
                Datum::Int(v) => Datum::Int(v.checked_neg().ok_or_else(|| overflow(SqlType::Int8))?),
                Datum::Float(v) => Datum::Float(-v),
                Datum::Numeric(v, s) => Datum::Numeric(-v, s),
                Datum::Null => Datum::Null,
                d => return Err(SqlError::new(code::UNDEFINED_FUNCTION, format!("cannot negate {d:?}"))),
            },
            Expr::Not(e) => match truth(&e.eval(row, ctx)?) {
                Some(b) => Datum::Bool(!b),
                None => Datum::Null,
            },
            Expr::Binary(op, a, b, ty) => {
                let x = a.eval(row, ctx)?;
                match op {
                    BinOp::And => {
                        let l = truth(&x);
                        if l == Some(false) {
                            return Ok(Datum::Bool(false));
                        }
                        let r = truth(&b.eval(row, ctx)?);
                        return Ok(match (l, r) {
                            (_, Some(false)) => Datum::Bool(false),
                            (Some(true), Some(true)) => Datum::Bool(true),
                            _ => Datum::Null,
                        });
                    }
                    BinOp::Or => {
                        let l = truth(&x);
                        if l == Some(true) {
                            return Ok(Datum::Bool(true));
                        }
                        let r = truth(&b.eval(row, ctx)?);
                        return Ok(match (l, r) {
                            (_, Some(true)) => Datum::Bool(true),
                            (Some(false), Some(false)) => Datum::Bool(false),
                            _ => Datum::Null,
                        });
                    }
                    _ => {}
                }
                let y = b.eval(row, ctx)?;
                if x.is_null() || y.is_null() {
                    return Ok(Datum::Null);
                }
                match op {
                    BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
                        let o = x.compare(&y).ok_or_else(|| {
                            SqlError::new(
                                code::UNDEFINED_FUNCTION,
                                format!("cannot compare {x:?} with {y:?}"),
                            )
                        })?;
                        Datum::Bool(match op {
                            BinOp::Eq => o == Ordering::Equal,
                            BinOp::Ne => o != Ordering::Equal,
                            BinOp::Lt => o == Ordering::Less,
                            BinOp::Le => o != Ordering::Greater,
                            BinOp::Gt => o == Ordering::Greater,
                            _ => o != Ordering::Less,
                        })
                    }
                    BinOp::Concat => {
                        let mut s = x.to_text(SqlType::Text);
                        s.push_str(&y.to_text(SqlType::Text));
                        Datum::Text(s)
                    }
                    _ => arith(*op, &x, &y, *ty)?,
                }
            }
            Expr::IsNull(e, negated) => Datum::Bool(e.eval(row, ctx)?.is_null() != *negated),
            Expr::InList(e, list, negated) => {
                let x = e.eval(row, ctx)?;
                if x.is_null() {
                    return Ok(Datum::Null);
                }
                let mut saw_null = false;
                for item in list {
                    let y = item.eval(row, ctx)?;
                    if y.is_null() {
                        saw_null = true;
                    } else if x.compare(&y) == Some(Ordering::Equal) {
                        return Ok(Datum::Bool(!negated));
                    }
                }
                if saw_null {
                    Datum::Null
                } else {
                    Datum::Bool(*negated)
                }
            }
            Expr::Like(e, p, negated, ci) => match (e.eval(row, ctx)?, p.eval(row, ctx)?) {
                (Datum::Text(t), Datum::Text(p)) => {
                    Datum::Bool(like(t.trim_end_matches('\0'), &p, *ci) != *negated)
                }
                (Datum::Null, _) | (_, Datum::Null) => Datum::Null,
                (a, b) => {
                    return Err(SqlError::new(
                        code::UNDEFINED_FUNCTION,
                        format!("LIKE needs text, got {a:?} and {b:?}"),
                    ))
                }
            },
            Expr::Cast(e, ty) => e.eval(row, ctx)?.coerce(*ty, "cast")?,
            Expr::Func(f, args) => {
                let arg = |i: usize| args[i].eval(row, ctx);
                match f {
                    Func::Now => Datum::Timestamp(ctx.now),
                    Func::Version => Datum::Text(version_string()),
                    Func::CurrentSetting => match arg(0)? {
                        Datum::Text(name) => {
                            Datum::Text((ctx.settings)(&name.to_ascii_lowercase()).ok_or_else(|| {
                                SqlError::new(
                                    code::UNDEFINED_OBJECT,
                                    format!("unrecognized configuration parameter \"{name}\""),
                                )
                            })?)
                        }
                        _ => Datum::Null,
                    },
                    Func::Coalesce => {
                        for a in args {
                            let v = a.eval(row, ctx)?;
                            if !v.is_null() {
                                return Ok(v);
                            }
                        }
                        Datum::Null
                    }
                    Func::Abs => match arg(0)? {
                        Datum::Int(v) => Datum::Int(v.checked_abs().ok_or_else(|| overflow(SqlType::Int8))?),
                        Datum::Float(v) => Datum::Float(v.abs()),
                        Datum::Numeric(v, s) => Datum::Numeric(v.abs(), s),
                        d => d,
                    },
                    Func::Lower => match arg(0)? {
                        Datum::Text(t) => Datum::Text(t.to_lowercase()),
                        d => d,
                    },
                    Func::Upper => match arg(0)? {
                        Datum::Text(t) => Datum::Text(t.to_uppercase()),
                        d => d,
                    },
                    Func::Length => match arg(0)? {
                        Datum::Text(t) => Datum::Int(t.trim_end_matches('\0').chars().count() as i64),
                        Datum::Bytes(b) => Datum::Int(b.len() as i64),
                        Datum::Null => Datum::Null,
                        d => Datum::Int(d.to_text(SqlType::Text).chars().count() as i64),
                    },
                    Func::CurrentDatabase => Datum::Text(ctx.database.to_string()),
                    Func::CurrentUser => Datum::Text(ctx.user.to_string()),
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
                }
            }
            Expr::Case(operand, whens, else_) => {
                let op = match operand {
                    Some(o) => Some(o.eval(row, ctx)?),
                    None => None,
                };
                for (w, then) in whens {
                    let v = w.eval(row, ctx)?;
                    let hit = match &op {
                        Some(o) => o.compare(&v) == Some(Ordering::Equal) && !o.is_null() && !v.is_null(),
                        None => truth(&v) == Some(true),
                    };
                    if hit {
                        return then.eval(row, ctx);
                    }
                }
                match else_ {
                    Some(e) => e.eval(row, ctx)?,
                    None => Datum::Null,
                }
            }
        })
    }

    /// Evaluates a predicate: true only for TRUE (NULL and FALSE reject the row).
    pub fn test(&self, row: &[Datum], ctx: &EvalCtx<'_>) -> SqlResult<bool> {
        Ok(truth(&self.eval(row, ctx)?) == Some(true))
    }
}

/// The running state of one aggregate.
#[derive(Debug, Clone)]
pub enum Acc {
    /// count
    Count(i64),
    /// sum / avg: the sum so far (None until a non-NULL value) and the count
    Sum(Option<Datum>, i64),
    /// min / max: the extreme so far
    Extreme(Option<Datum>),
}

impl AggFunc {
    /// A fresh accumulator.
    pub fn start(self) -> Acc {
        match self {
            AggFunc::CountStar | AggFunc::Count => Acc::Count(0),
            AggFunc::Sum | AggFunc::Avg => Acc::Sum(None, 0),
            AggFunc::Min | AggFunc::Max => Acc::Extreme(None),
        }
    }

    /// Adds one input value.
    pub fn add(self, acc: &mut Acc, v: Datum, arg_ty: SqlType) -> SqlResult<()> {
        match (acc, self) {
            (Acc::Count(n), AggFunc::CountStar) => *n += 1,
            (Acc::Count(n), _) => *n += i64::from(!v.is_null()),
            (Acc::Sum(s, n), _) => {
                if !v.is_null() {
                    *n += 1;
                    // Integer sums are kept exactly (as numeric) to avoid overflow.
                    let v = match v {
                        Datum::Int(x) => Datum::Numeric(i128::from(x), 0),
                        d => d,
                    };
                    *s = Some(match s.take() {
                        None => v,
                        Some(cur) => arith(BinOp::Add, &cur, &v, arg_ty)?,
                    });
                }
            }
            (Acc::Extreme(cur), f) => {
                if !v.is_null() {
                    let replace = match cur {
                        None => true,
                        Some(c) => {
                            let o = v.compare(c).unwrap_or(Ordering::Equal);
                            if f == AggFunc::Min {
                                o == Ordering::Less
                            } else {
                                o == Ordering::Greater
                            }
                        }
                    };
                    if replace {
                        *cur = Some(v);
                    }
                }
            }
        }
        Ok(())
    }

    /// The result type for an argument of type `arg`.
    pub fn result_type(self, arg: SqlType) -> SqlType {
        match self {
            AggFunc::CountStar | AggFunc::Count => SqlType::Int8,
            AggFunc::Sum => match arg {
                SqlType::Int2 | SqlType::Int4 => SqlType::Int8,
                SqlType::Int8 => SqlType::Numeric { precision: 38, scale: 0 },
                t => t,
            },
            AggFunc::Avg => match arg {
                SqlType::Float8 => SqlType::Float8,
                SqlType::Numeric { scale, .. } => {
                    SqlType::Numeric { precision: 38, scale: scale.max(DEFAULT_NUMERIC_SCALE) }
                }
                _ => SqlType::Numeric { precision: 38, scale: DEFAULT_NUMERIC_SCALE },
            },
            AggFunc::Min | AggFunc::Max => arg,
        }
    }

    /// The final value.
    pub fn finish(self, acc: Acc, result: SqlType) -> SqlResult<Datum> {
        Ok(match acc {
            Acc::Count(n) => Datum::Int(n),
            Acc::Extreme(v) => v.unwrap_or(Datum::Null),
            Acc::Sum(None, _) => Datum::Null,
            Acc::Sum(Some(s), n) => {
                if self == AggFunc::Avg {
                    arith(BinOp::Div, &s, &Datum::Int(n), result)?.coerce(result, "avg")?
                } else {
                    s.coerce(result, "sum")?
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_patterns() {
        assert!(like("pgbench_accounts", "pgbench%", false));
        assert!(like("abc", "a_c", false));
        assert!(!like("abc", "a_", false));
        assert!(like("ABC", "a%", true));
        assert!(like("50%", "50\\%", false));
        assert!(like("", "%", false));
    }

    #[test]
    fn arithmetic_checks_ranges_and_keeps_scales() {
        let i4 = SqlType::Int4;
        assert_eq!(arith(BinOp::Add, &Datum::Int(2), &Datum::Int(3), i4).unwrap(), Datum::Int(5));
        assert_eq!(
            arith(BinOp::Add, &Datum::Int(i64::from(i32::MAX)), &Datum::Int(1), i4).unwrap_err().code,
            code::NUMERIC_VALUE_OUT_OF_RANGE
        );
        assert_eq!(
            arith(BinOp::Div, &Datum::Int(1), &Datum::Int(0), i4).unwrap_err().code,
            code::DIVISION_BY_ZERO
        );
        let n = SqlType::Numeric { precision: 38, scale: 2 };
        assert_eq!(
            arith(BinOp::Add, &Datum::Numeric(150, 2), &Datum::Int(1), n).unwrap(),
            Datum::Numeric(250, 2)
        );
        assert_eq!(
            arith(BinOp::Mul, &Datum::Numeric(150, 2), &Datum::Numeric(20, 1), n).unwrap(),
            Datum::Numeric(3000, 3)
        );
        assert_eq!(
            arith(BinOp::Div, &Datum::Int(1), &Datum::Numeric(3, 0), n).unwrap(),
            Datum::Numeric(333_333, 6)
        );
    }
}
