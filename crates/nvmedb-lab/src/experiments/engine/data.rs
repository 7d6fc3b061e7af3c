//! The engine benchmark's table: its schema, the options each part opens it with, and its load.
//!
//! Owns: [`schema`], [`options`], [`load`], [`TABLE`]. Invariant: the table in the data directory
//! holds exactly rows `0..rows` in pages of the configured size; a directory holding another row
//! count or page size is reloaded.

use super::EngineConfig;
use crate::error::{LabError, Result};
use crate::measure::progress;
use nvmedb::buffer::BufferPolicy;
use nvmedb::{BufferSize, ColumnType, Database, Options, Schema, Value};

/// Name of the benchmark table.
pub const TABLE: &str = "bench";

/// `id` int primary key, `c1` int (= id), `payload` char(`payload`).
pub fn schema(payload: u32) -> Schema {
    Schema::new(vec![
        ("id", ColumnType::Int),
        ("c1", ColumnType::Int),
        ("payload", ColumnType::Char(payload)),
    ])
}

/// Options of a read-only part: the configured page size, `table_buffer`, `policy`, indexes
/// cached and pinned, no log.
pub fn options(cfg: &EngineConfig, table_buffer: BufferSize, policy: BufferPolicy) -> Options {
    Options {
        table_page_size: cfg.page_size,
        index_page_size: cfg.page_size,
        table_buffer,
        // Indexes stay cached (seeds 000/001); frame memory is only touched when used.
        index_buffer: BufferSize::Bytes(1 << 30),
        policy,
        pin_indexes: true,
        background_writer: None,
        create_if_missing: true,
        // Read-only benchmarks: no log (the load would otherwise sync every row).
        wal: false,
        ..Options::default()
    }
}

/// Loads the table unless the directory already holds it with the right row count.
pub fn load(cfg: &EngineConfig, show_progress: bool) -> Result<()> {
    let opts = options(cfg, BufferSize::Bytes(256 << 20), BufferPolicy::Shared { stripes: 16 });
    let open = LabError::engine(format!("opening {}", cfg.data_dir.display()));
    if cfg.data_dir.join(nvmedb::db::CATALOG_FILE).exists() {
        let db = Database::open(&cfg.data_dir, opts.clone()).map_err(open)?;
        let c = db.catalog();
        let same_pages =
            (c.table_page_size as usize, c.index_page_size as usize) == (cfg.page_size, cfg.page_size);
        if let (true, Ok(t)) = (same_pages, db.table(TABLE)) {
            let has = |k: u64| -> Result<bool> {
                Ok(t.read(&Value::Int(k as i64), |_| ())
                    .map_err(LabError::engine("checking the loaded rows"))?
                    .is_some())
            };
            if has(cfg.rows - 1)? && !has(cfg.rows)? {
                return Ok(());
            }
        }
        drop(db);
        std::fs::remove_dir_all(&cfg.data_dir).map_err(LabError::io(&cfg.data_dir, "remove"))?;
    }
    let db = Database::open(&cfg.data_dir, opts)
        .map_err(LabError::engine(format!("creating {}", cfg.data_dir.display())))?;
    let t =
        db.create_table(TABLE, schema(cfg.payload_bytes)).map_err(LabError::engine("creating the table"))?;
    let pb = progress::bar(show_progress, cfg.rows, "loading rows");
    let payload = vec![b'x'; cfg.payload_bytes as usize];
    for id in 0..cfg.rows {
        t.insert(&[Value::Int(id as i64), Value::Int(id as i64), Value::Bytes(payload.clone())])
            .map_err(LabError::engine(format!("loading row {id}")))?;
        if id % 4096 == 0 {
            pb.set_position(id);
        }
    }
    pb.finish_and_clear();
    db.close().map_err(LabError::engine("closing the loaded database"))
}
