//! Expressions as text, the way PostgreSQL's EXPLAIN prints them (`(a.x = 5)`,
//! `((l_extendedprice * (1 - l_discount)))`).
//!
//! Owns: [`Shown`]. Invariant: the text names columns through the caller's namer, so the same
//! expression prints with table-qualified names in a join and bare names in a scan.

use super::{BinOp, Expr};
use crate::types::{Datum, SqlType};
use std::fmt;

/// An expression with the namer of its columns, printable.
pub struct Shown<'a> {
    /// The expression.
    pub expr: &'a Expr,
    /// Names column `n`.
    pub name: &'a dyn Fn(usize) -> String,
}

fn op_text(op: BinOp) -> &'static str {
    match op {
        BinOp::Add => "+",
        BinOp::Sub => "-",
        BinOp::Mul => "*",
        BinOp::Div => "/",
        BinOp::Mod => "%",
        BinOp::BitAnd => "&",
        BinOp::BitOr => "|",
        BinOp::Eq => "=",
        BinOp::Ne => "<>",
        BinOp::Lt => "<",
        BinOp::Le => "<=",
        BinOp::Gt => ">",
        BinOp::Ge => ">=",
        BinOp::And => "AND",
        BinOp::Or => "OR",
        BinOp::Concat => "||",
        BinOp::IsDistinct => "IS DISTINCT FROM",
        BinOp::NotDistinct => "IS NOT DISTINCT FROM",
    }
}

fn literal(d: &Datum, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match d {
        Datum::Null => write!(f, "NULL"),
        Datum::Bool(b) => write!(f, "{b}"),
        Datum::Int(_) | Datum::Float(_) | Datum::Numeric(..) => write!(f, "{}", d.to_text(SqlType::Unknown)),
        Datum::Date(_) => write!(f, "'{}'::date", d.to_text(SqlType::Date)),
        Datum::Timestamp(_) => write!(f, "'{}'::timestamp without time zone", d.to_text(SqlType::Timestamp)),
        Datum::Interval(_) => write!(f, "'{}'::interval", d.to_text(SqlType::Interval)),
        other => write!(f, "'{}'::text", other.to_text(SqlType::Text).replace('\'', "''")),
    }
}

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_expr(self.expr, self.name, f)
    }
}

fn sh<'x>(expr: &'x Expr, name: &'x dyn Fn(usize) -> String) -> Shown<'x> {
    Shown { expr, name }
}

fn write_expr(e: &Expr, name: &dyn Fn(usize) -> String, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    {
        match e {
            Expr::Const(d) => literal(d, f),
            Expr::Column(c) => write!(f, "{}", name(*c)),
            Expr::Outer(i) => write!(f, "$outer{}", i + 1),
            Expr::Param(i) => write!(f, "${}", i + 1),
            Expr::Subquery(i) => write!(f, "$InitPlan{}", i + 1),
            Expr::Neg(e) => write!(f, "(- {})", sh(e, name)),
            Expr::Not(e) => write!(f, "(NOT {})", sh(e, name)),
            Expr::Binary(op, a, b, _) => write!(f, "({} {} {})", sh(a, name), op_text(*op), sh(b, name)),
            Expr::IsNull(e, neg) => write!(f, "({} IS {}NULL)", sh(e, name), if *neg { "NOT " } else { "" }),
            Expr::InList(e, l, neg) => {
                write!(f, "({} {}IN (", sh(e, name), if *neg { "NOT " } else { "" })?;
                for (i, x) in l.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{}", sh(x, name))?;
                }
                write!(f, "))")
            }
            Expr::Like(e, p, neg, ci) => write!(
                f,
                "({} {}{} {})",
                sh(e, name),
                if *neg { "!" } else { "" },
                if *ci { "~~*" } else { "~~" },
                sh(p, name)
            ),
            Expr::Cast(e, ty) => write!(f, "({})::{}", sh(e, name), ty.name()),
            Expr::Func(func, args, _) => {
                write!(f, "{}(", func.name())?;
                for (i, x) in args.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{}", sh(x, name))?;
                }
                write!(f, ")")
            }
            Expr::Case(op, whens, else_) => {
                write!(f, "CASE")?;
                if let Some(o) = op {
                    write!(f, " {}", sh(o, name))?;
                }
                for (w, t) in whens {
                    write!(f, " WHEN {} THEN {}", sh(w, name), sh(t, name))?;
                }
                if let Some(e) = else_ {
                    write!(f, " ELSE {}", sh(e, name))?;
                }
                write!(f, " END")
            }
        }
    }
}
