//! TPC-H over SQL: the eight tables' DDL, their rows (from the `tpchgen` crate, in the
//! `|`-separated text `COPY … WITH (DELIMITER '|')` reads), and the specification's 22
//! queries with its validation parameters, as text any PostgreSQL-compatible server runs.
//!
//! Owns: [`SCHEMA`], [`INDEXES`], [`QUERIES`], [`write_tables`]. Q15's view is written as a CTE
//! (the same query without DDL). The indexes are the foreign keys' (PostgreSQL kits create
//! them too; without them PostgreSQL runs Q17 and Q20 for hours); composite primary keys are
//! left out as nvmedb's are single-column. Invariant: both servers of a comparison get the
//! same DDL, the same rows and the same query text.

use crate::error::{LabError, Result};
use std::fmt::Display;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use tpchgen::generators::{
    CustomerGenerator, LineItemGenerator, NationGenerator, OrderGenerator, PartGenerator, PartSuppGenerator,
    RegionGenerator, SupplierGenerator,
};

/// CREATE TABLE statements of the eight tables.
pub const SCHEMA: &str = include_str!("tpch_sql/schema.sql");

/// CREATE INDEX statements on the foreign keys.
pub const INDEXES: &str = include_str!("tpch_sql/indexes.sql");

/// The tables, in load order.
pub const TABLES: [&str; 8] =
    ["region", "nation", "part", "supplier", "partsupp", "customer", "orders", "lineitem"];

/// The 22 queries, Q1 first.
pub const QUERIES: [&str; 22] = [
    include_str!("tpch_sql/q01.sql"),
    include_str!("tpch_sql/q02.sql"),
    include_str!("tpch_sql/q03.sql"),
    include_str!("tpch_sql/q04.sql"),
    include_str!("tpch_sql/q05.sql"),
    include_str!("tpch_sql/q06.sql"),
    include_str!("tpch_sql/q07.sql"),
    include_str!("tpch_sql/q08.sql"),
    include_str!("tpch_sql/q09.sql"),
    include_str!("tpch_sql/q10.sql"),
    include_str!("tpch_sql/q11.sql"),
    include_str!("tpch_sql/q12.sql"),
    include_str!("tpch_sql/q13.sql"),
    include_str!("tpch_sql/q14.sql"),
    include_str!("tpch_sql/q15.sql"),
    include_str!("tpch_sql/q16.sql"),
    include_str!("tpch_sql/q17.sql"),
    include_str!("tpch_sql/q18.sql"),
    include_str!("tpch_sql/q19.sql"),
    include_str!("tpch_sql/q20.sql"),
    include_str!("tpch_sql/q21.sql"),
    include_str!("tpch_sql/q22.sql"),
];

/// The statements of a script (split at `;`).
pub fn statements(script: &str) -> impl Iterator<Item = &str> {
    script.split(';').map(str::trim).filter(|s| !s.is_empty())
}

fn write_rows<T: Display>(dir: &Path, table: &str, rows: impl Iterator<Item = T>) -> Result<PathBuf> {
    let path = dir.join(format!("{table}.tbl"));
    let file = std::fs::File::create(&path).map_err(LabError::io(&path, "create"))?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    let mut line = String::new();
    for r in rows {
        line.clear();
        use std::fmt::Write as _;
        let _ = write!(line, "{r}");
        // dbgen's lines end with a separator; COPY wants none.
        let l = line.strip_suffix('|').unwrap_or(&line);
        w.write_all(l.as_bytes()).and_then(|()| w.write_all(b"\n")).map_err(LabError::io(&path, "write"))?;
    }
    w.flush().map_err(LabError::io(&path, "write"))?;
    Ok(path)
}

/// Writes the eight tables at scale factor `sf` as `<dir>/<table>.tbl` (`|`-separated, one
/// row a line); their paths, in [`TABLES`] order.
pub fn write_tables(dir: &Path, sf: f64) -> Result<Vec<PathBuf>> {
    Ok(vec![
        write_rows(dir, "region", RegionGenerator::default().iter())?,
        write_rows(dir, "nation", NationGenerator::default().iter())?,
        write_rows(dir, "part", PartGenerator::new(sf, 1, 1).iter())?,
        write_rows(dir, "supplier", SupplierGenerator::new(sf, 1, 1).iter())?,
        write_rows(dir, "partsupp", PartSuppGenerator::new(sf, 1, 1).iter())?,
        write_rows(dir, "customer", CustomerGenerator::new(sf, 1, 1).iter())?,
        write_rows(dir, "orders", OrderGenerator::new(sf, 1, 1).iter())?,
        write_rows(dir, "lineitem", LineItemGenerator::new(sf, 1, 1).iter())?,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_written_without_trailing_separators() {
        let dir = nvmedb_testkit::TmpDir::new("tpch-sql");
        let paths = write_tables(dir.path(), 0.001).unwrap();
        assert_eq!(paths.len(), TABLES.len());
        let nation = std::fs::read_to_string(&paths[1]).unwrap();
        assert_eq!(nation.lines().count(), 25);
        let first = nation.lines().next().unwrap();
        assert_eq!(first.split('|').count(), 4, "{first}");
        let lineitem = std::fs::read_to_string(&paths[7]).unwrap();
        assert_eq!(lineitem.lines().next().unwrap().split('|').count(), 16);
        assert_eq!(statements(SCHEMA).count(), 8);
        assert!(QUERIES.iter().all(|q| q.to_lowercase().contains("select")));
    }
}
