//! `nvmedb inspect`: a database's catalog and page counts, one decoded page, or the decoded
//! write-ahead log.
//!
//! Owns: the flags and [`run`]. Invariant: inspection changes nothing — the database is opened
//! without its log (no recovery, no checkpoint).

use super::CliError;
use clap::Args;
use std::path::PathBuf;

/// Flags of `nvmedb inspect`.
#[derive(Args, Debug)]
pub struct InspectArgs {
    /// Database directory.
    pub dir: PathBuf,
    /// Table whose page to decode (with --heap-page or --index-page).
    #[arg(long)]
    pub table: Option<String>,
    /// Decode this page of the table's heap file.
    #[arg(long)]
    pub heap_page: Option<u64>,
    /// Decode this page of the table's index file.
    #[arg(long)]
    pub index_page: Option<u64>,
    /// Decode the write-ahead log (segments and records).
    #[arg(long)]
    pub log: bool,
    /// With --log: the LSN of the first record to show.
    #[arg(long)]
    pub from: Option<u64>,
    /// With --log: how many records to show.
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    /// Per-table access statistics (page reads, misses, device reads and writes, bytes, I/O
    /// wait), summed over the sessions that closed the database cleanly.
    #[arg(long)]
    pub stats: bool,
    /// With --log: the log mirror directory of a duplexed log (default: <dir>/wal-mirror when it
    /// holds files).
    #[arg(long)]
    pub log_mirror_dir: Option<PathBuf>,
}

/// The text `nvmedb inspect` prints.
pub fn describe(a: &InspectArgs) -> Result<String, CliError> {
    if !a.dir.join(nvmedb::db::CATALOG_FILE).exists() {
        return Err(CliError::NotADatabase { dir: a.dir.clone() });
    }
    if a.log {
        let o = nvmedb::Options {
            log_mirror_dir: a.log_mirror_dir.clone(),
            read_only: true,
            ..Default::default()
        };
        let copies = o.file_log_copies(&a.dir).map_err(CliError::engine("opening the log"))?;
        return nvmedb::inspect::describe_log(copies, a.from, a.limit)
            .map_err(CliError::engine("decoding the log"));
    }
    let db = open_without_log(&a.dir)?;
    let cat = db.catalog();
    if a.stats {
        let stats = db.access_stats_total().map_err(CliError::engine("reading the access statistics"))?;
        return Ok(format!(
            "access statistics of {} (sessions closed cleanly, summed)\n{}",
            a.dir.display(),
            nvmedb::inspect::describe_access(&stats)
        ));
    }
    let Some(name) = &a.table else {
        return nvmedb::inspect::describe_database(&db).map_err(CliError::engine("describing the database"));
    };
    let t = cat
        .tables
        .iter()
        .find(|t| &t.name == name)
        .ok_or_else(|| CliError::NoSuchTable { table: name.clone(), dir: a.dir.clone() })?;
    let space = |heap: bool| {
        db.tablespace_storage(if heap { &t.heap_space } else { &t.index_space })
            .map_err(CliError::engine(format!("opening the tablespace of `{name}`")))
    };
    match (a.heap_page, a.index_page) {
        (Some(p), None) => nvmedb::inspect::describe_page(
            space(true)?.as_ref(),
            &nvmedb::db::heap_name(t.id),
            cat.table_page_size as usize,
            p,
            Some(&t.schema),
        ),
        (None, Some(p)) => nvmedb::inspect::describe_page(
            space(false)?.as_ref(),
            &nvmedb::db::index_name(t.id),
            cat.index_page_size as usize,
            p,
            None,
        ),
        _ => {
            return Err(CliError::flag(
                "--table",
                "give exactly one of --heap-page N or --index-page N with it",
            ))
        }
    }
    .map_err(CliError::engine(format!("decoding a page of `{name}`")))
}

/// Opens the database in `dir` read-only and without its log, with small buffers: nothing
/// changes (no recovery, no checkpoint, no lock file created where it cannot be), for commands
/// that only read (`inspect`, `advise`); works on a read-only file system or a backup's copy.
pub fn open_without_log(dir: &std::path::Path) -> Result<nvmedb::Database, CliError> {
    use nvmedb::io::{DirStorage, FileOptions};
    if !dir.join(nvmedb::db::CATALOG_FILE).exists() {
        return Err(CliError::NotADatabase { dir: dir.to_path_buf() });
    }
    let storage = std::sync::Arc::new(
        DirStorage::new(dir, FileOptions { read_only: true, ..FileOptions::default() })
            .map_err(CliError::engine(format!("opening {}", dir.display())))?,
    );
    let opts = nvmedb::Options {
        create_if_missing: false,
        read_only: true,
        table_buffer: nvmedb::BufferSize::Bytes(1 << 20),
        index_buffer: nvmedb::BufferSize::Bytes(1 << 20),
        ..Default::default()
    };
    nvmedb::Database::open_with_storage(storage, opts)
        .map_err(CliError::engine(format!("opening {}", dir.display())))
}

/// Prints the description.
pub fn run(a: &InspectArgs) -> Result<(), CliError> {
    print!("{}", describe(a)?);
    Ok(())
}
