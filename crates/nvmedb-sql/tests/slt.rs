//! The SQL logic tests: every `tests/slt/*.slt` file (sqllogictest format) run against a
//! fresh in-memory database, through the same [`Session`] the server gives each client.
//! Errors are checked by SQLSTATE (`statement error (42P01)`); values print as PostgreSQL's
//! text format (NULL as `NULL`, an empty string as `(empty)`).

use nvmedb::io::MemStorage;
use nvmedb_sql::{Engine, Outcome, Session, SqlError};
use sqllogictest::{DBOutput, DefaultColumnType};
use std::sync::Arc;

struct Conn {
    session: Session,
}

impl sqllogictest::DB for Conn {
    type Error = SqlError;
    type ColumnType = DefaultColumnType;

    fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SqlError> {
        let mut last = None;
        for r in self.session.simple_query(sql) {
            last = Some(r?);
        }
        Ok(match last {
            Some(Outcome::Rows(cols, rows, _)) => DBOutput::Rows {
                types: cols
                    .iter()
                    .map(|c| {
                        if c.ty.is_integer() {
                            DefaultColumnType::Integer
                        } else if c.ty.is_numeric() {
                            DefaultColumnType::FloatingPoint
                        } else {
                            DefaultColumnType::Text
                        }
                    })
                    .collect(),
                rows: rows
                    .iter()
                    .map(|r| {
                        r.iter()
                            .zip(cols.iter())
                            .map(|(d, c)| {
                                if d.is_null() {
                                    "NULL".to_string()
                                } else {
                                    match d.to_text(c.ty) {
                                        s if s.is_empty() => "(empty)".to_string(),
                                        s => s,
                                    }
                                }
                            })
                            .collect()
                    })
                    .collect(),
            },
            Some(Outcome::Done(tag)) => {
                DBOutput::StatementComplete(tag.rsplit(' ').next().and_then(|n| n.parse().ok()).unwrap_or(0))
            }
            _ => DBOutput::StatementComplete(0),
        })
    }

    fn engine_name(&self) -> &str {
        "nvmedb"
    }

    fn error_sql_state(e: &SqlError) -> Option<String> {
        Some(e.code.to_string())
    }
}

#[test]
fn sql_logic_tests() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/slt");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "slt"))
        .collect();
    files.sort();
    assert!(files.len() >= 6, "the suite is missing files: {files:?}");
    let mut failed = Vec::new();
    for f in &files {
        let options = nvmedb::Options {
            table_buffer: nvmedb::BufferSize::Bytes(16 << 20),
            index_buffer: nvmedb::BufferSize::Bytes(16 << 20),
            ..Default::default()
        };
        let db = nvmedb::Database::open_with_storage(Arc::new(MemStorage::new()), options).unwrap();
        let engine = Engine::new(db).unwrap();
        let mut runner = sqllogictest::Runner::new(|| {
            let engine = engine.clone();
            async move { Ok(Conn { session: Session::new(engine, "tester", "test") }) }
        });
        runner.with_column_validator(|_, _| true);
        if let Err(e) = runner.run_file(f) {
            failed.push(format!("{}: {e}", f.display()));
        }
    }
    assert!(failed.is_empty(), "{} of {} files failed:\n{}", failed.len(), files.len(), failed.join("\n\n"));
}
