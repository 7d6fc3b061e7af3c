//! Named prepared statements: SQL's `PREPARE`, `EXECUTE` and `DEALLOCATE`, and the named
//! statements of the extended protocol (Parse with a name, Close). As in PostgreSQL the two
//! share one namespace per session: `EXECUTE` runs a statement the protocol prepared and
//! `DEALLOCATE` drops either kind (psycopg 3 sends `DEALLOCATE ALL` after a ROLLBACK to forget
//! the statements it prepared through the protocol).
//!
//! Invariant: a name holds at most one statement. SQL cannot name the protocol's unnamed
//! statement (""), and `DEALLOCATE ALL` leaves it. A statement keeps the plan it was prepared
//! with and is planned again, like any other, when DDL changed the catalog since.

use super::{lookup_setting, Outcome, Session};
use crate::error::{code, SqlError, SqlResult};
use crate::expr::EvalCtx;
use crate::parse;
use crate::plan::bind::ident;
use crate::plan::{object_name, sql_type, Binder, Prepared, Stmt};
use crate::sequence::SessionSequences;
use crate::types::{now_micros, Datum, SqlType};
use sqlparser::ast;
use std::sync::Arc;

fn missing(name: &str) -> SqlError {
    SqlError::new(code::INVALID_SQL_STATEMENT_NAME, format!("prepared statement \"{name}\" does not exist"))
}

fn wrong_count(name: &str, want: usize, got: usize) -> SqlError {
    SqlError::new(
        code::SYNTAX_ERROR,
        format!(
            "wrong number of parameters for prepared statement \"{name}\": expected {want} parameters but got {got}"
        ),
    )
}

impl Session {
    /// Keeps `p` as the prepared statement `name` (the protocol's Parse; a statement of the
    /// same name is replaced, the unnamed one "" at every Parse).
    pub fn define_statement(&mut self, name: &str, p: Arc<Prepared>) {
        self.named.insert(name.to_string(), p);
    }

    /// The prepared statement `name` (26000 if there is none).
    pub fn statement(&self, name: &str) -> SqlResult<Arc<Prepared>> {
        self.named.get(name).cloned().ok_or_else(|| missing(name))
    }

    /// Forgets the prepared statement `name` (the protocol's Close: no error if there is none).
    pub fn close_statement(&mut self, name: &str) {
        self.named.remove(name);
    }

    /// Plans `PREPARE` and `EXECUTE` (`None`: `st` is neither). `text` is the statement's text
    /// and `param_types` the types the client gave its own parameters.
    pub(super) fn plan_named(
        &self,
        text: &str,
        st: &ast::Statement,
        param_types: &[Option<SqlType>],
    ) -> Option<SqlResult<Prepared>> {
        match st {
            ast::Statement::Prepare { name, data_types, statement } => {
                Some(self.plan_prepare(text, &ident(name), data_types, statement))
            }
            ast::Statement::Execute {
                name: Some(name),
                parameters,
                immediate: false,
                into,
                using,
                output: false,
                default: false,
                ..
            } if into.is_empty() && using.is_empty() => {
                Some(self.plan_execute(text, name, parameters, param_types))
            }
            _ => None,
        }
    }

    fn plan_prepare(
        &self,
        text: &str,
        name: &str,
        data_types: &[ast::DataType],
        statement: &ast::Statement,
    ) -> SqlResult<Prepared> {
        use ast::Statement as S;
        if name.is_empty() {
            return Err(SqlError::syntax("a prepared statement needs a name"));
        }
        if !matches!(statement, S::Query(_) | S::Insert(_) | S::Update(_) | S::Delete(_)) {
            return Err(SqlError::syntax(format!(
                "PREPARE \"{name}\": only SELECT, VALUES, INSERT, UPDATE and DELETE can be prepared"
            )));
        }
        let types = data_types.iter().map(|t| sql_type(t).map(Some)).collect::<SqlResult<Vec<_>>>()?;
        let body = parse::prepare_body(text).map_or_else(|| statement.to_string(), str::to_string);
        let inner = self.prepare(&body, &types)?;
        Ok(Prepared {
            sql: text.to_string(),
            stmt: Stmt::PrepareNamed(name.to_string(), inner),
            params: vec![],
            columns: Arc::default(),
            version: self.engine.catalog.version(),
        })
    }

    fn plan_execute(
        &self,
        text: &str,
        name: &ast::ObjectName,
        args: &[ast::Expr],
        param_types: &[Option<SqlType>],
    ) -> SqlResult<Prepared> {
        let name = object_name(name)?;
        let target = self.statement(&name)?;
        if args.len() != target.params.len() {
            return Err(wrong_count(&name, target.params.len(), args.len()));
        }
        let mut b = Binder::new(&self.engine.catalog, param_types);
        let args = b.execute_args(args, &target.params)?;
        Ok(Prepared {
            sql: text.to_string(),
            stmt: Stmt::ExecuteNamed(name, args),
            params: b.param_types(),
            columns: target.columns.clone(),
            version: self.engine.catalog.version(),
        })
    }

    /// Runs PREPARE, EXECUTE or DEALLOCATE.
    pub(super) fn run_named(&mut self, stmt: &Stmt, params: &[Datum]) -> SqlResult<Outcome> {
        match stmt {
            Stmt::PrepareNamed(name, p) => {
                if self.named.contains_key(name) {
                    return Err(SqlError::new(
                        code::DUPLICATE_PREPARED_STATEMENT,
                        format!("prepared statement \"{name}\" already exists"),
                    ));
                }
                self.named.insert(name.clone(), p.clone());
                Ok(Outcome::Done("PREPARE".into()))
            }
            Stmt::ExecuteNamed(name, args) => {
                // The statement now of that name (it may have been prepared again since).
                let target = self.statement(name)?;
                if args.len() != target.params.len() {
                    return Err(wrong_count(name, target.params.len(), args.len()));
                }
                let values = self.eval_args(args, params)?;
                let values = values
                    .into_iter()
                    .zip(&target.params)
                    .map(|(v, &ty)| v.coerce(ty, "parameter"))
                    .collect::<SqlResult<Vec<_>>>()?;
                self.execute(&target, &values)
            }
            Stmt::Deallocate(None) => {
                self.named.retain(|n, _| n.is_empty());
                Ok(Outcome::Done("DEALLOCATE ALL".into()))
            }
            Stmt::Deallocate(Some(name)) => {
                self.named.remove(name).ok_or_else(|| missing(name))?;
                Ok(Outcome::Done("DEALLOCATE".into()))
            }
            _ => Err(SqlError::new(code::INTERNAL_ERROR, "not a PREPARE, EXECUTE or DEALLOCATE")),
        }
    }

    /// The values of EXECUTE's arguments (constant expressions).
    fn eval_args(&self, args: &[crate::expr::Expr], params: &[Datum]) -> SqlResult<Vec<Datum>> {
        let (settings, engine) = (&self.settings, &self.engine);
        let lookup = |n: &str| lookup_setting(settings, engine, n);
        let seqs = SessionSequences { all: &engine.catalog.sequences, current: &self.currvals };
        let cx = EvalCtx {
            params,
            settings: &lookup,
            now: now_micros(),
            user: &self.user,
            database: &self.database,
            backend_pid: self.backend_pid,
            subs: Vec::new(),
            outer: Vec::new(),
            seqs: Some(&seqs),
        };
        args.iter().map(|a| a.eval(&[], &cx)).collect()
    }
}
