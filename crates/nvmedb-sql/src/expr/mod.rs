//! Compiled expressions and their evaluation.
//!
//! Owns: [`Expr`] (column references by position in the row being evaluated — by column id
//! while the plan is logical —, parameters by number, constants, operators, functions) and
//! its evaluation over a row with SQL's three-valued logic; [`func`] holds the scalar
//! functions (one table of names, argument and result types), [`agg`] the aggregates,
//! [`display`] the text EXPLAIN shows. Invariant: types were checked when the expression was
//! planned, so evaluation only fails on data (overflow, division by zero, a bad cast), with a
//! SQLSTATE.

pub mod agg;
pub mod display;
pub mod func;

pub use agg::{Acc, AggFunc, AggOrder};
pub use func::Func;

use crate::datetime::{add_interval_us, Interval, DAY_US};
use crate::error::{code, SqlError, SqlResult};
use crate::types::{check_int_range, rescale, Datum, SqlType, DEFAULT_NUMERIC_SCALE};
use std::borrow::Cow;
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
    /// `&` (integers)
    BitAnd,
    /// `|` (integers)
    BitOr,
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
    /// `IS DISTINCT FROM`
    IsDistinct,
    /// `IS NOT DISTINCT FROM`
    NotDistinct,
}

impl BinOp {
    /// True for the comparisons.
    pub fn is_comparison(self) -> bool {
        matches!(self, BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge)
    }

    /// The comparison with its operands swapped (`a < b` ⇔ `b > a`).
    pub fn flipped(self) -> BinOp {
        match self {
            BinOp::Lt => BinOp::Gt,
            BinOp::Le => BinOp::Ge,
            BinOp::Gt => BinOp::Lt,
            BinOp::Ge => BinOp::Le,
            o => o,
        }
    }
}

/// A compiled expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// A constant.
    Const(Datum),
    /// Column `n` of the row evaluated (a column id in a logical plan).
    Column(usize),
    /// Value `n` of the correlation values an enclosing query passes to a subquery run per
    /// row (physical plans only).
    Outer(usize),
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
    /// A scalar function call; the type is the result's.
    Func(Func, Vec<Expr>, SqlType),
    /// `CASE [operand] WHEN .. THEN .. ELSE .. END`
    Case(Option<Box<Expr>>, Vec<(Expr, Expr)>, Option<Box<Expr>>),
    /// The value of uncorrelated scalar subquery `n` (computed once, before the statement).
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
    /// The connected user.
    pub user: &'a str,
    /// The database name the client connected to.
    pub database: &'a str,
    /// The id of the server process serving the session (`pg_backend_pid()`; the pid the
    /// protocol's BackendKeyData gave the client).
    pub backend_pid: i32,
    /// Values of the statement's uncorrelated scalar subqueries.
    pub subs: Vec<Datum>,
    /// Correlation values of the subquery being run per row ([`Expr::Outer`]).
    pub outer: Vec<Datum>,
    /// The sequences `nextval`, `currval` and `setval` call (`None`: they fail).
    pub seqs: Option<&'a dyn crate::sequence::SequenceCalls>,
}

/// The `version()` string.
pub fn version_string() -> String {
    format!(
        "PostgreSQL 15.0 (nvmedb {}, a storage engine for microsecond-latency NVMe; SQL over the PostgreSQL protocol)",
        env!("CARGO_PKG_VERSION")
    )
}

pub(crate) fn overflow(ty: SqlType) -> SqlError {
    SqlError::new(code::NUMERIC_VALUE_OUT_OF_RANGE, format!("{} out of range", ty.name()))
}

pub(crate) fn div_zero() -> SqlError {
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

fn no_operator(a: &Datum, op: BinOp, b: &Datum) -> SqlError {
    SqlError::new(code::UNDEFINED_FUNCTION, format!("operator does not exist: {a:?} {op:?} {b:?}"))
}

/// The base-10000 weight and first digit of |v| / 10^s (PostgreSQL's numeric layout).
fn nbase_head(v: i128, s: u8) -> (i32, u128) {
    let pad = (4 - u32::from(s) % 4) % 4;
    let mut m = v.unsigned_abs() * 10u128.pow(pad);
    let frac_groups = ((u32::from(s) + pad) / 4) as i32;
    if m == 0 {
        return (0, 0);
    }
    let mut groups = 0i32;
    let mut first = 0;
    while m > 0 {
        first = m % 10_000;
        m /= 10_000;
        groups += 1;
    }
    (groups - 1 - frac_groups, first)
}

/// The scale of a numeric quotient, as PostgreSQL chooses it (`select_div_scale`): at least
/// 16 significant digits, at least either operand's scale; capped so the value fits 38 digits.
fn div_scale(x: i128, sx: u8, y: i128, sy: u8) -> u8 {
    let (w1, f1) = nbase_head(x, sx);
    let (w2, f2) = nbase_head(y, sy);
    let mut qweight = w1 - w2;
    if f1 <= f2 {
        qweight -= 1;
    }
    let rscale = (16 - qweight * 4).max(i32::from(sx)).max(i32::from(sy)).max(0);
    // Integer digits of the quotient, about (qweight + 1) * 4: keep the total within 38.
    let int_digits = ((qweight + 1) * 4).max(1);
    rscale.min(38 - int_digits.min(37)).min(30) as u8
}

/// [`arith`] of two integers: overflow and division by zero are errors, and the result must
/// fit `ty` (or 64 bits when `ty` is not an integer type).
fn int_arith(op: BinOp, x: i64, y: i64, ty: SqlType) -> SqlResult<i64> {
    let r = match op {
        BinOp::Add => x.checked_add(y),
        BinOp::Sub => x.checked_sub(y),
        BinOp::Mul => x.checked_mul(y),
        BinOp::Div | BinOp::Mod if y == 0 => return Err(div_zero()),
        BinOp::Div => x.checked_div(y),
        BinOp::Mod => x.checked_rem(y),
        BinOp::BitAnd => Some(x & y),
        BinOp::BitOr => Some(x | y),
        _ => None,
    }
    .ok_or_else(|| overflow(ty))?;
    check_int_range(r, if ty.is_integer() { ty } else { SqlType::Int8 })?;
    Ok(r)
}

/// Applies an arithmetic operator to two non-NULL datums; `ty` is the planned result type.
pub fn arith(op: BinOp, a: &Datum, b: &Datum, ty: SqlType) -> SqlResult<Datum> {
    Ok(match (a, b) {
        (Datum::Int(x), Datum::Int(y)) => Datum::Int(int_arith(op, *x, *y, ty)?),
        (Datum::Float(_), Datum::Float(_) | Datum::Int(_) | Datum::Numeric(..))
        | (Datum::Int(_) | Datum::Numeric(..), Datum::Float(_)) => {
            let (x, y) = (a.as_f64().unwrap_or(f64::NAN), b.as_f64().unwrap_or(f64::NAN));
            Datum::Float(match op {
                BinOp::Add => x + y,
                BinOp::Sub => x - y,
                BinOp::Mul => x * y,
                BinOp::Div if y == 0.0 => return Err(div_zero()),
                BinOp::Div => x / y,
                BinOp::Mod if y == 0.0 => return Err(div_zero()),
                BinOp::Mod => x % y,
                _ => return Err(no_operator(a, op, b)),
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
            let out_scale = match op {
                BinOp::Div => div_scale(x, sx, y, sy),
                _ => numeric_scale(op, sx, sy),
            };
            let r = match op {
                BinOp::Add | BinOp::Sub | BinOp::Mod => {
                    let (xs, ys) = (
                        rescale(x, sx, s).ok_or_else(|| overflow(ty))?,
                        rescale(y, sy, s).ok_or_else(|| overflow(ty))?,
                    );
                    match op {
                        BinOp::Add => xs.checked_add(ys),
                        BinOp::Sub => xs.checked_sub(ys),
                        _ if ys == 0 => return Err(div_zero()),
                        _ => xs.checked_rem(ys),
                    }
                    .map(|v| (v, s))
                }
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
                _ => None,
            }
            .ok_or_else(|| overflow(ty))?;
            let v = rescale(r.0, r.1, out_scale).ok_or_else(|| overflow(ty))?;
            if ty.is_integer() {
                Datum::Int(i64::try_from(v).map_err(|_| overflow(ty))?)
            } else {
                Datum::Numeric(v, out_scale)
            }
        }
        (Datum::Date(d), Datum::Int(n)) if matches!(op, BinOp::Add | BinOp::Sub) => {
            let n = if op == BinOp::Sub { -n } else { *n };
            Datum::Date(i32::try_from(i64::from(*d) + n).map_err(|_| overflow(SqlType::Date))?)
        }
        (Datum::Int(n), Datum::Date(d)) if op == BinOp::Add => {
            Datum::Date(i32::try_from(i64::from(*d) + n).map_err(|_| overflow(SqlType::Date))?)
        }
        (Datum::Date(x), Datum::Date(y)) if op == BinOp::Sub => Datum::Int(i64::from(*x) - i64::from(*y)),
        (Datum::Date(_) | Datum::Timestamp(_), Datum::Interval(iv))
            if matches!(op, BinOp::Add | BinOp::Sub) =>
        {
            let ts = match a {
                Datum::Date(d) => i64::from(*d) * DAY_US,
                Datum::Timestamp(t) => *t,
                _ => unreachable!(),
            };
            let iv = if op == BinOp::Sub { iv.negated() } else { *iv };
            Datum::Timestamp(add_interval_us(ts, iv).ok_or_else(|| overflow(SqlType::Timestamp))?)
        }
        (Datum::Interval(iv), Datum::Date(_) | Datum::Timestamp(_)) if op == BinOp::Add => {
            return arith(op, b, a, ty)
        }
        (Datum::Timestamp(x), Datum::Timestamp(y)) if op == BinOp::Sub => {
            let us = x - y;
            Datum::Interval(Interval { months: 0, days: (us / DAY_US) as i32, micros: us % DAY_US })
        }
        (Datum::Interval(x), Datum::Interval(y)) if matches!(op, BinOp::Add | BinOp::Sub) => {
            let y = if op == BinOp::Sub { y.negated() } else { *y };
            Datum::Interval(x.checked_add(y).ok_or_else(|| overflow(SqlType::Interval))?)
        }
        (Datum::Interval(iv), n) | (n, Datum::Interval(iv)) if op == BinOp::Mul && n.as_f64().is_some() => {
            Datum::Interval(
                iv.scaled(n.as_f64().expect("number")).ok_or_else(|| overflow(SqlType::Interval))?,
            )
        }
        (Datum::Interval(iv), n) if op == BinOp::Div && n.as_f64().is_some() => {
            let f = n.as_f64().expect("number");
            if f == 0.0 {
                return Err(div_zero());
            }
            Datum::Interval(iv.scaled(1.0 / f).ok_or_else(|| overflow(SqlType::Interval))?)
        }
        (a, b) => return Err(no_operator(a, op, b)),
    })
}

/// SQL LIKE (`\` escapes the next character; `ci`: ILIKE).
pub fn like(text: &str, pattern: &str, ci: bool) -> bool {
    if !ci && text.is_ascii() && pattern.is_ascii() {
        return like_bytes(text.as_bytes(), pattern.as_bytes());
    }
    let (t, p): (Vec<char>, Vec<char>) = if ci {
        (text.to_lowercase().chars().collect(), pattern.to_lowercase().chars().collect())
    } else {
        (text.chars().collect(), pattern.chars().collect())
    };
    like_slice(&t, &p)
}

fn like_bytes(t: &[u8], p: &[u8]) -> bool {
    like_slice(t, p)
}

fn like_slice<T: Copy + PartialEq + From<u8>>(t: &[T], p: &[T]) -> bool {
    let (pct, under, esc) = (T::from(b'%'), T::from(b'_'), T::from(b'\\'));
    // Iterative matcher with backtracking on the last '%'.
    let (mut ti, mut pi) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ti < t.len() {
        if pi < p.len() && p[pi] == esc && pi + 1 < p.len() && p[pi + 1] == t[ti] {
            ti += 1;
            pi += 2;
        } else if pi < p.len() && p[pi] != pct && (p[pi] == under || p[pi] == t[ti]) {
            ti += 1;
            pi += 1;
        } else if pi < p.len() && p[pi] == pct {
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
    while pi < p.len() && p[pi] == pct {
        pi += 1;
    }
    pi == p.len()
}

/// The truth value of a datum (`None`: NULL).
pub fn truth(d: &Datum) -> Option<bool> {
    match d {
        Datum::Bool(b) => Some(*b),
        Datum::Null => None,
        Datum::Int(v) => Some(*v != 0),
        _ => None,
    }
}

/// Compares two non-NULL datums with a comparison operator.
pub fn compare(op: BinOp, x: &Datum, y: &Datum) -> SqlResult<bool> {
    let o = x
        .compare(y)
        .ok_or_else(|| SqlError::new(code::UNDEFINED_FUNCTION, format!("cannot compare {x:?} with {y:?}")))?;
    Ok(match op {
        BinOp::Eq => o == Ordering::Equal,
        BinOp::Ne => o != Ordering::Equal,
        BinOp::Lt => o == Ordering::Less,
        BinOp::Le => o != Ordering::Greater,
        BinOp::Gt => o == Ordering::Greater,
        _ => o != Ordering::Less,
    })
}

impl Expr {
    /// A boolean AND of `a` and `b`.
    pub fn and(a: Expr, b: Expr) -> Expr {
        Expr::Binary(BinOp::And, Box::new(a), Box::new(b), SqlType::Bool)
    }

    /// The AND of all of `es` (None for none).
    pub fn and_all(es: impl IntoIterator<Item = Expr>) -> Option<Expr> {
        es.into_iter().reduce(Expr::and)
    }

    /// Splits an AND tree into its conjuncts (appended to `out`).
    pub fn conjuncts(self, out: &mut Vec<Expr>) {
        match self {
            Expr::Binary(BinOp::And, a, b, _) => {
                a.conjuncts(out);
                b.conjuncts(out);
            }
            Expr::Const(Datum::Bool(true)) => {}
            other => out.push(other),
        }
    }

    /// True if the expression reads no column and no correlation value (constants,
    /// parameters, functions of them).
    pub fn is_row_independent(&self) -> bool {
        let mut ok = true;
        self.walk(&mut |e| {
            ok &= match e {
                Expr::Column(_) | Expr::Outer(_) => false,
                Expr::Func(f, _, _) => !f.is_volatile(),
                _ => true,
            }
        });
        ok
    }

    /// Calls `f` on this expression and every subexpression.
    pub fn walk(&self, f: &mut dyn FnMut(&Expr)) {
        f(self);
        match self {
            Expr::Const(_) | Expr::Column(_) | Expr::Outer(_) | Expr::Param(_) | Expr::Subquery(_) => {}
            Expr::Neg(e) | Expr::Not(e) | Expr::IsNull(e, _) | Expr::Cast(e, _) => e.walk(f),
            Expr::Binary(_, a, b, _) | Expr::Like(a, b, _, _) => {
                a.walk(f);
                b.walk(f);
            }
            Expr::InList(e, l, _) => {
                e.walk(f);
                l.iter().for_each(|x| x.walk(f));
            }
            Expr::Func(_, args, _) => args.iter().for_each(|x| x.walk(f)),
            Expr::Case(o, w, e) => {
                if let Some(o) = o {
                    o.walk(f);
                }
                for (a, b) in w {
                    a.walk(f);
                    b.walk(f);
                }
                if let Some(e) = e {
                    e.walk(f);
                }
            }
        }
    }

    /// Calls `f` on every subexpression, children first, letting it replace them.
    pub fn walk_mut(&mut self, f: &mut dyn FnMut(&mut Expr)) {
        match self {
            Expr::Const(_) | Expr::Column(_) | Expr::Outer(_) | Expr::Param(_) | Expr::Subquery(_) => {}
            Expr::Neg(e) | Expr::Not(e) | Expr::IsNull(e, _) | Expr::Cast(e, _) => e.walk_mut(f),
            Expr::Binary(_, a, b, _) | Expr::Like(a, b, _, _) => {
                a.walk_mut(f);
                b.walk_mut(f);
            }
            Expr::InList(e, l, _) => {
                e.walk_mut(f);
                l.iter_mut().for_each(|x| x.walk_mut(f));
            }
            Expr::Func(_, args, _) => args.iter_mut().for_each(|x| x.walk_mut(f)),
            Expr::Case(o, w, e) => {
                if let Some(o) = o {
                    o.walk_mut(f);
                }
                for (a, b) in w {
                    a.walk_mut(f);
                    b.walk_mut(f);
                }
                if let Some(e) = e {
                    e.walk_mut(f);
                }
            }
        }
        f(self);
    }

    /// Calls `f` with every column the expression reads.
    pub fn columns(&self, f: &mut dyn FnMut(usize)) {
        self.walk(&mut |e| {
            if let Expr::Column(c) = e {
                f(*c)
            }
        });
    }

    /// True if every column the expression reads satisfies `p` (and it reads at least one
    /// when `nonempty`).
    pub fn columns_all(&self, p: &dyn Fn(usize) -> bool) -> bool {
        let mut ok = true;
        self.columns(&mut |c| ok &= p(c));
        ok
    }

    /// Renumbers the column references (`f` maps each column to its new number).
    pub fn map_columns(&mut self, f: &mut dyn FnMut(usize) -> Expr) {
        self.walk_mut(&mut |e| {
            if let Expr::Column(c) = e {
                *e = f(*c);
            }
        });
    }

    /// The value of the expression as a borrowed datum where it is one (a column, a constant,
    /// a parameter), else evaluated.
    #[inline]
    pub fn operand<'r>(&'r self, row: &'r [Datum], ctx: &'r EvalCtx<'_>) -> SqlResult<Cow<'r, Datum>> {
        Ok(match self {
            Expr::Column(c) => Cow::Borrowed(&row[*c]),
            Expr::Const(d) => Cow::Borrowed(d),
            Expr::Param(i) => Cow::Borrowed(ctx.params.get(*i).ok_or_else(|| {
                SqlError::new(code::UNDEFINED_PARAMETER, format!("there is no parameter ${}", i + 1))
            })?),
            Expr::Outer(i) => Cow::Borrowed(&ctx.outer[*i]),
            other => Cow::Owned(other.eval(row, ctx)?),
        })
    }

    /// Evaluates over `row`.
    pub fn eval(&self, row: &[Datum], ctx: &EvalCtx<'_>) -> SqlResult<Datum> {
        Ok(match self {
            Expr::Const(d) => d.clone(),
            Expr::Column(c) => row[*c].clone(),
            Expr::Outer(i) => ctx.outer[*i].clone(),
            Expr::Subquery(i) => ctx.subs.get(*i).cloned().unwrap_or(Datum::Null),
            Expr::Param(i) => ctx.params.get(*i).cloned().ok_or_else(|| {
                SqlError::new(code::UNDEFINED_PARAMETER, format!("there is no parameter ${}", i + 1))
            })?,
            Expr::Neg(e) => match e.eval(row, ctx)? {
                Datum::Int(v) => Datum::Int(v.checked_neg().ok_or_else(|| overflow(SqlType::Int8))?),
                Datum::Float(v) => Datum::Float(-v),
                Datum::Numeric(v, s) => Datum::Numeric(-v, s),
                Datum::Interval(iv) => Datum::Interval(iv.negated()),
                Datum::Null => Datum::Null,
                d => return Err(SqlError::new(code::UNDEFINED_FUNCTION, format!("cannot negate {d:?}"))),
            },
            Expr::Not(e) => match truth(&e.eval(row, ctx)?) {
                Some(b) => Datum::Bool(!b),
                None => Datum::Null,
            },
            Expr::Binary(op, a, b, ty) => {
                match op {
                    BinOp::And => {
                        let l = truth(&a.eval(row, ctx)?);
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
                        let l = truth(&a.eval(row, ctx)?);
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
                let x = a.operand(row, ctx)?;
                let y = b.operand(row, ctx)?;
                if matches!(op, BinOp::IsDistinct | BinOp::NotDistinct) {
                    let same = match (x.is_null(), y.is_null()) {
                        (true, true) => true,
                        (false, false) => compare(BinOp::Eq, &x, &y)?,
                        _ => false,
                    };
                    return Ok(Datum::Bool(same == (*op == BinOp::NotDistinct)));
                }
                if x.is_null() || y.is_null() {
                    return Ok(Datum::Null);
                }
                match op {
                    BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
                        Datum::Bool(compare(*op, &x, &y)?)
                    }
                    BinOp::Concat => {
                        let mut s = x.to_text(SqlType::Text);
                        s.push_str(&y.to_text(SqlType::Text));
                        Datum::Text(s)
                    }
                    _ => arith(*op, &x, &y, *ty)?,
                }
            }
            Expr::IsNull(e, negated) => Datum::Bool(e.operand(row, ctx)?.is_null() != *negated),
            Expr::InList(e, list, negated) => {
                let x = e.operand(row, ctx)?;
                if x.is_null() {
                    return Ok(Datum::Null);
                }
                let mut saw_null = false;
                for item in list {
                    let y = item.operand(row, ctx)?;
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
            Expr::Like(e, p, negated, ci) => {
                match (e.operand(row, ctx)?.as_ref(), p.operand(row, ctx)?.as_ref()) {
                    (Datum::Text(t), Datum::Text(p)) => {
                        Datum::Bool(like(t.trim_end_matches('\0'), p, *ci) != *negated)
                    }
                    (Datum::Null, _) | (_, Datum::Null) => Datum::Null,
                    (a, b) => {
                        return Err(SqlError::new(
                            code::UNDEFINED_FUNCTION,
                            format!("LIKE needs text, got {a:?} and {b:?}"),
                        ))
                    }
                }
            }
            Expr::Cast(e, ty) => e.eval(row, ctx)?.coerce(*ty, "cast")?,
            Expr::Func(f, args, ty) => f.eval(args, *ty, row, ctx)?,
            Expr::Case(operand, whens, else_) => {
                let op = match operand {
                    Some(o) => Some(o.eval(row, ctx)?),
                    None => None,
                };
                for (w, then) in whens {
                    let v = w.eval(row, ctx)?;
                    let hit = match &op {
                        Some(o) => !o.is_null() && !v.is_null() && o.compare(&v) == Some(Ordering::Equal),
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
        // Comparisons of plain operands, the common filter, without building a datum.
        if let Expr::Binary(op, a, b, _) = self {
            if op.is_comparison() {
                let x = a.operand(row, ctx)?;
                let y = b.operand(row, ctx)?;
                if x.is_null() || y.is_null() {
                    return Ok(false);
                }
                return compare(*op, &x, &y);
            }
            if *op == BinOp::And {
                return Ok(a.test(row, ctx)? && b.test(row, ctx)?);
            }
        }
        Ok(truth(&self.eval(row, ctx)?) == Some(true))
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
        assert!(like("special requests here", "%special%requests%", false));
        assert!(!like("specialrequest", "%special%requests%", false));
        assert!(like("żółw", "ż_łw", false));
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
        let n = |scale| SqlType::Numeric { precision: 38, scale };
        assert_eq!(
            arith(BinOp::Add, &Datum::Numeric(150, 2), &Datum::Int(1), n(2)).unwrap(),
            Datum::Numeric(250, 2)
        );
        assert_eq!(
            arith(BinOp::Mul, &Datum::Numeric(150, 2), &Datum::Numeric(20, 1), n(3)).unwrap(),
            Datum::Numeric(3000, 3)
        );
        // Quotients keep PostgreSQL's scale: 16 significant digits at least.
        assert_eq!(
            arith(BinOp::Div, &Datum::Int(1), &Datum::Numeric(3, 0), n(6)).unwrap().to_text(SqlType::Text),
            "0.33333333333333333333"
        );
        assert_eq!(
            arith(BinOp::Div, &Datum::Numeric(70, 1), &Datum::Int(2), n(6)).unwrap().to_text(SqlType::Text),
            "3.5000000000000000"
        );
    }

    #[test]
    fn dates_and_intervals_add_as_postgres_does() {
        let d = Datum::Date(crate::datetime::parse_date("1995-03-15").unwrap());
        let plus = arith(BinOp::Add, &d, &Datum::Int(10), SqlType::Date).unwrap();
        assert_eq!(plus.to_text(SqlType::Date), "1995-03-25");
        let iv = Datum::Interval(Interval { months: 3, ..Default::default() });
        let ts = arith(BinOp::Add, &d, &iv, SqlType::Timestamp).unwrap();
        assert_eq!(ts.to_text(SqlType::Timestamp), "1995-06-15 00:00:00");
        assert_eq!(d.compare(&ts), Some(Ordering::Less));
        let e = Datum::Date(crate::datetime::parse_date("1995-04-14").unwrap());
        assert_eq!(arith(BinOp::Sub, &e, &d, SqlType::Int4).unwrap(), Datum::Int(30));
    }
}
