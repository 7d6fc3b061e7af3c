//! Binding of arrays: `ARRAY[…]`, `x = ANY (array)`, the select list's set-returning functions
//! (`unnest`, `generate_subscripts`, `generate_series`) and the `ORDER BY` of an ordered
//! aggregate (`array_agg(x ORDER BY k)`).
//!
//! Owns: [`Binder::array`], [`Binder::any_array`], [`Binder::subscript`], [`Binder::srf_call`],
//! [`Binder::aggregate_order_keys`]. Invariant: a set-returning call is bound only where the
//! select list allows it (elsewhere 0A000, as in PostgreSQL), and becomes a column of the
//! query level's `ProjectSet`.

use super::bind::Binder;
use super::bind_expr::{sort_options, BindCx};
use super::logical::SrfCall;
use crate::array::{elem, element_of, ArrayFunc, Srf};
use crate::error::{code, SqlError, SqlResult};
use crate::expr::func::common_type;
use crate::expr::{AggFunc, AggOrder, Expr, Func};
use crate::types::SqlType;
use sqlparser::ast::{self, Expr as AstExpr};

/// The `ORDER BY` inside an aggregate call's parentheses (other clauses are refused).
pub(crate) fn aggregate_order(
    clauses: &[ast::FunctionArgumentClause],
    name: &str,
) -> SqlResult<Vec<ast::OrderByExpr>> {
    let mut order = Vec::new();
    for c in clauses {
        match c {
            ast::FunctionArgumentClause::OrderBy(o) => order.extend(o.iter().cloned()),
            other => return Err(SqlError::unsupported(format!("`{other}` in the call of {name}"))),
        }
    }
    Ok(order)
}

impl Binder<'_> {
    /// `ARRAY[a, b, …]`: its elements converted to their common type.
    pub(crate) fn array(&mut self, elems: &[AstExpr], cx: &mut BindCx) -> SqlResult<(Expr, SqlType)> {
        let mut bound = Vec::new();
        let mut ty = SqlType::Unknown;
        for e in elems {
            let (x, t) = self.bind(e, cx)?;
            ty = common_type(ty, t).ok_or_else(|| {
                SqlError::new(
                    code::DATATYPE_MISMATCH,
                    format!("ARRAY types {} and {} cannot be matched", ty.name(), t.name()),
                )
            })?;
            bound.push((x, t));
        }
        let e = if ty == SqlType::Unknown { SqlType::Text } else { ty };
        let mut out = Vec::new();
        for (x, t) in bound {
            out.push(self.convert(x, t, e)?);
        }
        let ty = SqlType::Array(elem(e));
        Ok((Expr::Func(Func::Array(ArrayFunc::Build, false), out, ty), ty))
    }

    /// `x = ANY (a)` over an array-valued expression (a column, a parameter, a cast literal).
    pub(crate) fn any_array(
        &mut self,
        left: &AstExpr,
        right: &AstExpr,
        cx: &mut BindCx,
    ) -> SqlResult<(Expr, SqlType)> {
        let (x, xt) = self.bind(left, cx)?;
        let (a, at) = self.bind(right, cx)?;
        let (a, at) = match element_of(at) {
            Some(_) => (a, at),
            None if at == SqlType::Unknown || at.is_text() => {
                let want = SqlType::Array(elem(if xt == SqlType::Unknown { SqlType::Text } else { xt }));
                (self.convert(a, at, want)?, want)
            }
            None => {
                return Err(SqlError::new(
                    code::DATATYPE_MISMATCH,
                    format!("op ANY/ALL (array) requires array on right side, not {}", at.name()),
                ))
            }
        };
        let e = element_of(at).expect("an array");
        let ty = common_type(xt, e).ok_or_else(|| {
            SqlError::new(
                code::UNDEFINED_FUNCTION,
                format!("operator does not exist: {} = {}", xt.name(), e.name()),
            )
        })?;
        let x = self.convert(x, xt, ty)?;
        let vector = matches!(at, SqlType::Vector(_));
        Ok((Expr::Func(Func::Array(ArrayFunc::Any, vector), vec![a, x], SqlType::Bool), SqlType::Bool))
    }

    /// `a[i]`: the element of array `a` at subscript `i` (from 1, from 0 for the catalogs'
    /// `int2vector` / `oidvector`, as in PostgreSQL); NULL outside the array.
    pub(crate) fn subscript(
        &mut self,
        a: &AstExpr,
        i: &AstExpr,
        cx: &mut BindCx,
    ) -> SqlResult<(Expr, SqlType)> {
        let (a, at) = self.bind(a, cx)?;
        let Some(e) = element_of(at) else {
            return Err(SqlError::new(
                code::DATATYPE_MISMATCH,
                format!("cannot subscript type {} because it does not support subscripting", at.name()),
            ));
        };
        let (i, it) = self.bind(i, cx)?;
        let i = self.convert(i, it, SqlType::Int4)?;
        let vector = matches!(at, SqlType::Vector(_));
        Ok((Expr::Func(Func::Array(ArrayFunc::Subscript, vector), vec![a, i], e), e))
    }

    /// A set-returning function call of a select list: a new column of the query level's
    /// `ProjectSet`.
    pub(crate) fn srf_call(
        &mut self,
        srf: Srf,
        name: &str,
        args: &[AstExpr],
        cx: &mut BindCx,
    ) -> SqlResult<(Expr, SqlType)> {
        if cx.srfs.is_none() {
            return Err(SqlError::new(
                code::FEATURE_NOT_SUPPORTED,
                format!("set-returning function {name} is not allowed in {}", cx.clause),
            ));
        }
        let mut bound = Vec::new();
        for a in args {
            bound.push(self.bind(a, cx)?);
        }
        let types: Vec<SqlType> = bound.iter().map(|b| b.1).collect();
        let (ty, want) = srf.resolve(name, &types)?;
        let mut exprs = Vec::new();
        for ((x, t), w) in bound.into_iter().zip(want) {
            exprs.push(if t == w { x } else { self.convert(x, t, w)? });
        }
        let vector = matches!(types.first(), Some(SqlType::Vector(_)));
        let id = self.new_col(name, None, ty);
        let call = SrfCall { func: srf, args: exprs, ty, vector };
        cx.srfs.as_mut().expect("checked above").push((id, call));
        Ok((Expr::Column(id), ty))
    }

    /// An ordered aggregate's argument: `ARRAY[arg, key, …]` and the aggregate that sorts on
    /// the keys (bound over FROM rows); without `ORDER BY`, the aggregate and argument as they are.
    pub(crate) fn aggregate_order_keys(
        &mut self,
        func: AggFunc,
        arg: Expr,
        order: &[ast::OrderByExpr],
        row: &mut BindCx,
    ) -> SqlResult<(AggFunc, Expr)> {
        if order.is_empty() {
            return Ok((func, arg));
        }
        if !matches!(func, AggFunc::ArrayAgg(_)) || order.len() > 8 {
            return Err(SqlError::unsupported(format!(
                "ORDER BY in a call of {} (array_agg takes up to 8 keys)",
                func.name()
            )));
        }
        let mut o = AggOrder { keys: order.len() as u8, ..Default::default() };
        let mut items = vec![arg];
        for (i, k) in order.iter().enumerate() {
            let (asc, nulls_first) = sort_options(&k.options)?;
            o.desc |= u8::from(!asc) << i;
            o.nulls_first |= u8::from(nulls_first) << i;
            let (x, t) = self.bind(&k.expr, row)?;
            items.push(self.assign_type(x, t, SqlType::Text)?.0);
        }
        // Elements of unknown type: each keeps its own.
        let ty = SqlType::Array(&SqlType::Unknown);
        Ok((AggFunc::ArrayAgg(o), Expr::Func(Func::Array(ArrayFunc::Build, false), items, ty)))
    }
}
