//! CREATE TABLE … AS query: the query runs first (in the session's transaction, or alone),
//! then the table is made and filled by one bulk load ([`nvmedb::Database::load_table`]),
//! which names the table in the engine's catalog only once every row is written: after a
//! crash the table exists with all its rows or not at all.

use super::{Outcome, Session, TxnState};
use crate::error::{code, SqlError, SqlResult};
use crate::plan::{Prepared, Stmt, TableAsPlan};
use crate::types::Datum;
use std::sync::Arc;

impl Session {
    /// Runs CREATE TABLE … AS (`p` is the prepared statement, for its catalog version).
    pub(super) fn create_table_as(&mut self, plan: &TableAsPlan, p: &Prepared) -> SqlResult<Outcome> {
        self.refuse_ddl_in_dirty_block()?;
        let ct = &plan.table;
        if self.engine.catalog.exists(&ct.name) {
            if ct.if_not_exists {
                self.notices.push(format!("relation \"{}\" already exists, skipping", ct.name));
                return Ok(Outcome::Done("CREATE TABLE AS".into()));
            }
            return Err(SqlError::new(
                code::DUPLICATE_TABLE,
                format!("relation \"{}\" already exists", ct.name),
            )
            .with_table(&ct.name));
        }
        let query = Prepared {
            sql: p.sql.clone(),
            stmt: Stmt::Query(Box::new(plan.query.clone())),
            params: p.params.clone(),
            columns: Arc::new(vec![]),
            version: p.version,
        };
        let Outcome::Rows(_, rows, _) = self.dml_rows(&query)? else { unreachable!("a query returns rows") };
        self.ddl_with(|s| s.fill_new_table(ct, rows))
    }

    /// Runs `q` (a query) and returns its rows.
    fn dml_rows(&mut self, q: &Prepared) -> SqlResult<Outcome> {
        let mut with_cols = q.clone();
        // A non-empty column list makes `dml` return the rows.
        with_cols.columns =
            Arc::new(vec![crate::plan::OutCol { name: String::new(), ty: crate::types::SqlType::Text }]);
        self.dml(&with_cols, &[])
    }

    fn fill_new_table(
        &mut self,
        ct: &crate::plan::CreateTablePlan,
        rows: Vec<Vec<Datum>>,
    ) -> SqlResult<Outcome> {
        let e = self.engine.clone();
        if e.catalog.exists(&ct.name) {
            return Err(SqlError::new(
                code::DUPLICATE_TABLE,
                format!("relation \"{}\" already exists", ct.name),
            )
            .with_table(&ct.name));
        }
        let n = rows.len();
        let cols = &ct.schema.columns;
        let types: Vec<crate::types::SqlType> =
            cols.iter().map(|c| crate::types::SqlType::of_column(c.ty)).collect();
        let mut values = Vec::with_capacity(n);
        for (i, r) in rows.into_iter().enumerate() {
            let mut v = Vec::with_capacity(cols.len());
            // Column 0 is the hidden row id.
            v.push(nvmedb::Value::Int(i as i64 + 1));
            for (j, d) in r.into_iter().enumerate() {
                v.push(d.to_value(types[j + 1], &cols[j + 1].name)?);
            }
            values.push(v);
        }
        e.catalog.create_table_parts(ct)?;
        let t =
            e.db.load_table(&ct.name, ct.schema.clone(), values, |_| {})
                .map_err(|err| SqlError::from_engine(err, Some(&ct.name)))?;
        e.catalog.put(t)?;
        if matches!(self.state, TxnState::Active(_)) {
            self.fresh.insert(ct.name.clone());
        }
        Ok(Outcome::Done(format!("SELECT {n}")))
    }
}
