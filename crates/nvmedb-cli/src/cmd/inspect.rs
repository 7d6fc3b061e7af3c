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
    /// With --log: the log mirror directory of a duplexed log (default: <dir>/wal-mirror when it
    /// holds files).
    #[arg(long)]
    pub log_mirror_dir: Option<PathBuf>,
}

/// The text `nvmedb inspect` prints.
pub fn describe(a: &InspectArgs) -> Result<String, CliError> {
    use nvmedb::io::{DirStorage, FileOptions, Storage};
    use std::sync::Arc;
    if !a.dir.join(nvmedb::db::CATALOG_FILE).exists() {
        return Err(CliError::NotADatabase { dir: a.dir.clone() });
    }
    if a.log {
        let o = nvmedb::Options { log_mirror_dir: a.log_mirror_dir.clone(), ..Default::default() };
        let copies = o.file_log_copies(&a.dir).map_err(CliError::engine("opening the log"))?;
        return nvmedb::inspect::describe_log(copies, a.from, a.limit)
            .map_err(CliError::engine("decoding the log"));
    }
    // Opened without the log: inspection changes nothing (no recovery, no checkpoint).
    let storage: Arc<dyn Storage> = Arc::new(
        DirStorage::new(&a.dir, FileOptions::default())
            .map_err(CliError::engine(format!("opening {}", a.dir.display())))?,
    );
    let opts = nvmedb::Options {
        create_if_missing: false,
        table_buffer: nvmedb::BufferSize::Bytes(1 << 20),
        index_buffer: nvmedb::BufferSize::Bytes(1 << 20),
        ..Default::default()
    };
    let db = nvmedb::Database::open_with_storage(storage.clone(), opts)
        .map_err(CliError::engine(format!("opening {}", a.dir.display())))?;
    let cat = db.catalog();
    let Some(name) = &a.table else {
        return nvmedb::inspect::describe_database(&db, storage.as_ref())
            .map_err(CliError::engine("describing the database"));
    };
    let t = cat
        .tables
        .iter()
        .find(|t| &t.name == name)
        .ok_or_else(|| CliError::NoSuchTable { table: name.clone(), dir: a.dir.clone() })?;
    match (a.heap_page, a.index_page) {
        (Some(p), None) => nvmedb::inspect::describe_page(
            storage.as_ref(),
            &nvmedb::db::heap_name(t.id),
            cat.table_page_size as usize,
            p,
            Some(&t.schema),
        ),
        (None, Some(p)) => nvmedb::inspect::describe_page(
            storage.as_ref(),
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

/// Prints the description.
pub fn run(a: &InspectArgs) -> Result<(), CliError> {
    print!("{}", describe(a)?);
    Ok(())
}
