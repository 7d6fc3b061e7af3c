//! Binding of `CASE [operand] WHEN … THEN … [ELSE …] END`.
//!
//! Owns: [`Binder::case`]. Invariant: every result converts to one common type (the CASE's),
//! and with an operand every WHEN value converts to the operand's type.

use super::bind::Binder;
use super::bind_expr::BindCx;
use crate::error::{code, SqlError, SqlResult};
use crate::expr::func::common_type;
use crate::expr::Expr;
use crate::types::SqlType;
use sqlparser::ast::{self, Expr as AstExpr};

impl Binder<'_> {
    /// `CASE [operand] WHEN … THEN … [ELSE …] END`.
    pub(crate) fn case(
        &mut self,
        operand: Option<&AstExpr>,
        conditions: &[ast::CaseWhen],
        else_result: Option<&AstExpr>,
        cx: &mut BindCx,
    ) -> SqlResult<(Expr, SqlType)> {
        let op = match operand {
            Some(o) => Some(self.bind(o, cx)?),
            None => None,
        };
        let mut whens = Vec::new();
        let mut ty = SqlType::Unknown;
        for cw in conditions {
            let (c, ct) = self.bind(&cw.condition, cx)?;
            let c = match &op {
                Some((_, ot)) => self.convert(c, ct, *ot)?,
                None => self.assign_type(c, ct, SqlType::Bool)?.0,
            };
            let (r, rt) = self.bind(&cw.result, cx)?;
            ty = common_type(ty, rt).ok_or_else(|| {
                SqlError::new(
                    code::DATATYPE_MISMATCH,
                    format!("CASE types {} and {} cannot be matched", ty.name(), rt.name()),
                )
            })?;
            whens.push((c, r, rt));
        }
        let else_ = match else_result {
            Some(e) => {
                let (x, xt) = self.bind(e, cx)?;
                ty = common_type(ty, xt).ok_or_else(|| {
                    SqlError::new(
                        code::DATATYPE_MISMATCH,
                        format!("CASE types {} and {} cannot be matched", ty.name(), xt.name()),
                    )
                })?;
                Some((x, xt))
            }
            None => None,
        };
        let ty = if ty == SqlType::Unknown { SqlType::Text } else { ty };
        let mut out = Vec::new();
        for (c, r, rt) in whens {
            out.push((c, self.convert(r, rt, ty)?));
        }
        let else_ = match else_ {
            Some((x, xt)) => Some(Box::new(self.convert(x, xt, ty)?)),
            None => None,
        };
        let op = match op {
            Some((o, ot)) => Some(Box::new(self.assign_type(o, ot, SqlType::Text)?.0)),
            None => None,
        };
        Ok((Expr::Case(op, out, else_), ty))
    }
}
