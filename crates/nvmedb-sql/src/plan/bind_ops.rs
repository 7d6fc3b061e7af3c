//! Binding of operators: SQL's binary operators to [`BinOp`], and the result type of
//! arithmetic on two types (integers widen, numeric scales combine, dates and intervals as in
//! PostgreSQL). Invariant: an operator with no rule for its operand types is 42883, naming
//! the types, never a silent coercion.

use crate::error::{code, SqlError, SqlResult};
use crate::expr::func::common_type;
use crate::expr::BinOp;
use crate::types::{SqlType, DEFAULT_NUMERIC_SCALE};
use sqlparser::ast;

/// The operator `op` names.
pub(crate) fn bin_op(op: &ast::BinaryOperator) -> SqlResult<BinOp> {
    Ok(match op {
        ast::BinaryOperator::Plus => BinOp::Add,
        ast::BinaryOperator::Minus => BinOp::Sub,
        ast::BinaryOperator::Multiply => BinOp::Mul,
        ast::BinaryOperator::Divide => BinOp::Div,
        ast::BinaryOperator::Modulo => BinOp::Mod,
        ast::BinaryOperator::BitwiseAnd => BinOp::BitAnd,
        ast::BinaryOperator::BitwiseOr => BinOp::BitOr,
        ast::BinaryOperator::Eq => BinOp::Eq,
        ast::BinaryOperator::NotEq => BinOp::Ne,
        ast::BinaryOperator::Lt => BinOp::Lt,
        ast::BinaryOperator::LtEq => BinOp::Le,
        ast::BinaryOperator::Gt => BinOp::Gt,
        ast::BinaryOperator::GtEq => BinOp::Ge,
        ast::BinaryOperator::And => BinOp::And,
        ast::BinaryOperator::Or => BinOp::Or,
        ast::BinaryOperator::StringConcat => BinOp::Concat,
        other => return Err(SqlError::unsupported(format!("operator {other}"))),
    })
}

/// Result type of arithmetic on `a` and `b`.
pub(crate) fn arith_type(op: BinOp, a: SqlType, b: SqlType) -> SqlResult<SqlType> {
    use SqlType as T;
    let int = |t: T| if t == T::Unknown { T::Int4 } else { t };
    let (a, b) = (int(a), int(b));
    Ok(match (op, a, b) {
        (_, x, y) if x.is_integer() && y.is_integer() => common_type(x, y).expect("integers"),
        (BinOp::BitAnd | BinOp::BitOr, x, y) => {
            return Err(SqlError::new(
                code::UNDEFINED_FUNCTION,
                format!(
                    "operator does not exist: {} {} {}",
                    x.name(),
                    if op == BinOp::BitAnd { "&" } else { "|" },
                    y.name()
                ),
            ))
        }
        (_, T::Float8, y) | (_, y, T::Float8) if y.is_numeric() => T::Float8,
        (_, T::Numeric { scale: s1, .. }, T::Numeric { scale: s2, .. }) => {
            let scale = match op {
                BinOp::Mul => (s1 + s2).min(30),
                BinOp::Div => s1.max(s2).max(DEFAULT_NUMERIC_SCALE),
                _ => s1.max(s2),
            };
            T::Numeric { precision: 38, scale }
        }
        (_, T::Numeric { scale, .. }, y) | (_, y, T::Numeric { scale, .. }) if y.is_integer() => {
            let scale = if op == BinOp::Div { scale.max(DEFAULT_NUMERIC_SCALE) } else { scale };
            T::Numeric { precision: 38, scale }
        }
        (BinOp::Add | BinOp::Sub, T::Date, y) if y.is_integer() => T::Date,
        (BinOp::Add, x, T::Date) if x.is_integer() => T::Date,
        (BinOp::Sub, T::Date, T::Date) => T::Int4,
        (BinOp::Add | BinOp::Sub, T::Date | T::Timestamp, T::Interval) => T::Timestamp,
        (BinOp::Add, T::Interval, T::Date | T::Timestamp) => T::Timestamp,
        (BinOp::Sub, T::Timestamp, T::Timestamp) => T::Interval,
        (BinOp::Add | BinOp::Sub, T::Interval, T::Interval) => T::Interval,
        (BinOp::Mul, T::Interval, y) | (BinOp::Mul, y, T::Interval) if y.is_numeric() => T::Interval,
        (BinOp::Div, T::Interval, y) if y.is_numeric() => T::Interval,
        (_, x, y) => {
            return Err(SqlError::new(
                code::UNDEFINED_FUNCTION,
                format!("operator does not exist: {} {op:?} {}", x.name(), y.name()),
            ))
        }
    })
}
