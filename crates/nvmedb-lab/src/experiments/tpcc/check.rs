//! `nvmedb lab tpcc --check DIR`: the consistency conditions and every index of a TPC-C
//! database in a directory (after a run, a crash, or a copy).
//!
//! Owns: [`check_dir`]. Invariant: the database is opened the way it was last written (its log
//! kind is found from its directory), so a crashed database is recovered before it is checked;
//! nothing is changed but what recovery does.

use crate::error::{LabError, Result};
use crate::workload::tpcc::{check_consistency, Tables};
use nvmedb::{Database, FastLogOptions, LogKind, Options};
use std::path::Path;

/// Opens (recovering it if needed) the TPC-C database in `dir`, checks the consistency
/// conditions 1–4 of §3.3.2 and that every index agrees with its table, and returns a report.
/// A failed condition is an error naming the condition, warehouse and district.
pub fn check_dir(dir: &Path) -> Result<String> {
    if !dir.join(nvmedb::db::CATALOG_FILE).exists() {
        return Err(LabError::config("--check", format!("{} holds no nvmedb database", dir.display())));
    }
    let has_files = |d: &Path| std::fs::read_dir(d).is_ok_and(|mut r| r.next().is_some());
    let log =
        if has_files(&dir.join("xlog")) { LogKind::Fast(FastLogOptions::default()) } else { LogKind::File };
    // A database loaded and never run has no log: open it without one.
    let wal = has_files(&dir.join("wal")) || has_files(&dir.join("xlog"));
    let db = Database::open(dir, Options { log, wal, create_if_missing: false, ..Options::default() })
        .map_err(LabError::engine(format!("opening {}", dir.display())))?;
    let rec = db.recovery_report().clone();
    let tables = Tables::open(&db)?;
    let report = check_consistency(&tables)?;
    let mut text = format!("{}: {}\n", dir.display(), report.describe());
    if rec.records > 0 {
        text.push_str(&format!(
            "recovery replayed {} log records ({} pages redone, {} operations of {} unfinished transactions undone)\n",
            rec.records, rec.pages_redone, rec.ops_undone, rec.losers
        ));
    }
    for (name, t) in tables.all() {
        let rows = t
            .check_integrity()
            .map_err(LabError::engine(format!("checking table `{name}` against its indexes")))?;
        text.push_str(&format!("  {name:<10} {rows:>10} rows, every index entry matches\n"));
    }
    drop(tables);
    db.close().map_err(LabError::engine("closing the database"))?;
    Ok(text)
}
