//! The catalog: which tables exist, their schemas and where their trees are rooted.
//!
//! Owns: the catalog device format and its atomic update. The device holds two 64 KiB slots;
//! an update writes the slot not holding the newest version, with a sequence number one
//! higher, then syncs. Reading takes the valid slot with the highest sequence number, so a torn
//! catalog write leaves the previous version in force.
//!
//! Slot layout: magic `NVCT` u32, format version u16, reserved u16, sequence u64, payload
//! length u32, CRC32C of the payload u32, reserved 8 bytes, payload (see `encode`). A column is
//! its name, a type tag byte (1 int, 2 char, 3 bytes, 4 int32, 5 int16, 6 double, 7 bool,
//! 8 timestamp, 9 numeric, 10 text, 11 date; high bit: nullable) and a u32 argument (length, or
//! precision << 8 | scale); an index is its name, its column number (high bit: unique) and
//! its root page. A catalog whose tables all live in the default tablespace ends there (the
//! original layout); otherwise a trailer follows: the tablespaces (name, location, profile)
//! and, per table in order, the tablespace of its heap and of its indexes.

use super::schema::{Column, ColumnType, IndexDef, Schema};
use crate::error::{Error, Result};
use crate::io::{AlignedBuf, Device};
use crate::util::bytes::{u16_at, u32_at, u64_at, ByteReader, ByteWriter};

const MAGIC: u32 = 0x5443_564E;
const VERSION: u16 = 1;
const SLOT_BYTES: usize = 64 * 1024;
const SLOT_HEADER: usize = 32;
/// Set in a column's type tag: the column is nullable.
const NULLABLE_BIT: u8 = 0x80;
/// Set in an index's column number: the index is unique.
const UNIQUE_BIT: u16 = 0x8000;

/// Persistent description of one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableMeta {
    /// Table id; names its files (`t<id>.heap`, `t<id>.idx`).
    pub id: u32,
    /// Table name.
    pub name: String,
    /// Schema.
    pub schema: Schema,
    /// Root page of the primary index.
    pub primary_root: u64,
    /// Root pages of the secondary indexes, in `schema.indexes` order.
    pub index_roots: Vec<u64>,
    /// Tablespace holding the heap file ([`DEFAULT_TABLESPACE`] unless placed elsewhere).
    pub heap_space: String,
    /// Tablespace holding the index file (all of the table's indexes).
    pub index_space: String,
}

/// The tablespace every database has: its own directory (or storage).
pub const DEFAULT_TABLESPACE: &str = "default";

/// Persistent description of a named tablespace (other than the default one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TablespaceMeta {
    /// Its name.
    pub name: String,
    /// Where its files live: a directory, or the location of a storage the opener supplies.
    pub location: String,
    /// The emulated device profile in front of it: a built-in profile name followed by
    /// `key=value` overrides, separated by spaces; empty when the directory is used as it is.
    pub profile: String,
}

/// The whole catalog.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CatalogData {
    /// Page size of heap files.
    pub table_page_size: u32,
    /// Page size of index files.
    pub index_page_size: u32,
    /// Next table id to hand out.
    pub next_table_id: u32,
    /// Redo start of the last completed checkpoint (0: none; redo from the log's start).
    pub checkpoint_redo_lsn: u64,
    /// Oldest log position a transaction active at that checkpoint may need for undo.
    pub checkpoint_undo_lsn: u64,
    /// Tables.
    pub tables: Vec<TableMeta>,
    /// Named tablespaces besides the default one.
    pub tablespaces: Vec<TablespaceMeta>,
}

fn encode(c: &CatalogData) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = ByteWriter::to(&mut out);
    w.u32(c.table_page_size);
    w.u32(c.index_page_size);
    w.u32(c.next_table_id);
    w.u64(c.checkpoint_redo_lsn);
    w.u64(c.checkpoint_undo_lsn);
    w.u32(c.tables.len() as u32);
    for t in &c.tables {
        w.u32(t.id);
        w.str16(&t.name);
        w.u16(t.schema.columns.len() as u16);
        for col in &t.schema.columns {
            w.str16(&col.name);
            let (tag, arg) = col.ty.tag();
            w.u8(tag | if col.nullable { NULLABLE_BIT } else { 0 });
            w.u32(arg);
        }
        w.u16(t.schema.primary_key as u16);
        w.u16(t.schema.indexes.len() as u16);
        for (ix, root) in t.schema.indexes.iter().zip(&t.index_roots) {
            w.str16(&ix.name);
            w.u16(ix.column as u16 | if ix.unique { UNIQUE_BIT } else { 0 });
            w.u64(*root);
        }
        w.u64(t.primary_root);
    }
    let placed =
        c.tables.iter().any(|t| t.heap_space != DEFAULT_TABLESPACE || t.index_space != DEFAULT_TABLESPACE);
    if placed || !c.tablespaces.is_empty() {
        w.u16(c.tablespaces.len() as u16);
        for s in &c.tablespaces {
            w.str16(&s.name);
            w.str16(&s.location);
            w.str16(&s.profile);
        }
        for t in &c.tables {
            w.str16(&t.heap_space);
            w.str16(&t.index_space);
        }
    }
    out
}

fn decode(b: &[u8]) -> Option<CatalogData> {
    let mut r = ByteReader::new(b);
    let mut c = CatalogData {
        table_page_size: r.u32()?,
        index_page_size: r.u32()?,
        next_table_id: r.u32()?,
        checkpoint_redo_lsn: r.u64()?,
        checkpoint_undo_lsn: r.u64()?,
        tables: Vec::new(),
        tablespaces: Vec::new(),
    };
    let n = r.u32()?;
    for _ in 0..n {
        let id = r.u32()?;
        let name = r.str16()?;
        let ncols = r.u16()?;
        let mut columns = Vec::new();
        for _ in 0..ncols {
            let cname = r.str16()?;
            let tag = r.u8()?;
            let arg = r.u32()?;
            let nullable = tag & NULLABLE_BIT != 0;
            let ty = ColumnType::from_tag(tag & !NULLABLE_BIT, arg)?;
            columns.push(Column { name: cname, ty, nullable });
        }
        let primary_key = r.u16()? as usize;
        let nix = r.u16()?;
        let mut indexes = Vec::new();
        let mut index_roots = Vec::new();
        for _ in 0..nix {
            let iname = r.str16()?;
            let column = r.u16()?;
            index_roots.push(r.u64()?);
            indexes.push(IndexDef {
                name: iname,
                column: usize::from(column & !UNIQUE_BIT),
                unique: column & UNIQUE_BIT != 0,
            });
        }
        let primary_root = r.u64()?;
        c.tables.push(TableMeta {
            id,
            name,
            schema: Schema { columns, primary_key, indexes },
            primary_root,
            index_roots,
            heap_space: DEFAULT_TABLESPACE.into(),
            index_space: DEFAULT_TABLESPACE.into(),
        });
    }
    if r.remaining() > 0 {
        for _ in 0..r.u16()? {
            c.tablespaces.push(TablespaceMeta {
                name: r.str16()?,
                location: r.str16()?,
                profile: r.str16()?,
            });
        }
        for t in &mut c.tables {
            t.heap_space = r.str16()?;
            t.index_space = r.str16()?;
        }
    }
    if r.remaining() != 0 {
        return None;
    }
    Some(c)
}

/// Checks what the decoder cannot: page sizes the engine supports, schemas that are valid and
/// whose rows fit the row limit, table ids below the next id and names that are unique.
pub fn validate(c: &CatalogData) -> std::result::Result<(), String> {
    for (what, ps) in [("table page size", c.table_page_size), ("index page size", c.index_page_size)] {
        if ps % 4096 != 0 || !(4096..=65536).contains(&ps) {
            return Err(format!("{what} {ps} is not a multiple of 4096 from 4096 to 65536"));
        }
    }
    let max_row = crate::table::heap::MAX_ROW_BYTES;
    for (i, s) in c.tablespaces.iter().enumerate() {
        if s.name.is_empty()
            || s.name == DEFAULT_TABLESPACE
            || c.tablespaces[..i].iter().any(|o| o.name == s.name)
        {
            return Err(format!(
                "tablespace {i} (`{}`) is unnamed, not unique or named `{DEFAULT_TABLESPACE}`",
                s.name
            ));
        }
    }
    for (i, t) in c.tables.iter().enumerate() {
        let name = &t.name;
        if name.is_empty() || c.tables[..i].iter().any(|o| o.name == *name || o.id == t.id) {
            return Err(format!("table {i} (`{name}`, id {}) is unnamed or not unique", t.id));
        }
        if t.id >= c.next_table_id {
            return Err(format!("table `{name}` has id {} but the next id is {}", t.id, c.next_table_id));
        }
        t.schema.validate().map_err(|e| format!("table `{name}`: {e}"))?;
        if t.schema.max_row_bytes() > max_row {
            return Err(format!(
                "table `{name}`: rows of up to {} bytes exceed the {max_row}-byte row limit",
                t.schema.max_row_bytes(),
            ));
        }
        for space in [&t.heap_space, &t.index_space] {
            if space != DEFAULT_TABLESPACE && !c.tablespaces.iter().any(|s| s.name == *space) {
                return Err(format!(
                    "table `{name}` is placed in tablespace `{space}`, which the catalog does not name"
                ));
            }
        }
        if t.index_roots.len() != t.schema.indexes.len() {
            return Err(format!(
                "table `{name}`: {} index roots for {} indexes",
                t.index_roots.len(),
                t.schema.indexes.len()
            ));
        }
    }
    Ok(())
}

/// A catalog stored on a device, with its current sequence number.
pub struct CatalogStore {
    device: std::sync::Arc<dyn Device>,
    seq: u64,
}

impl CatalogStore {
    /// Reads the newest valid catalog version. `Ok(None)` for an empty device.
    pub fn load(device: std::sync::Arc<dyn Device>) -> Result<(Self, Option<CatalogData>)> {
        let name = device.info().name;
        if device.capacity() == 0 {
            return Ok((Self { device, seq: 0 }, None));
        }
        let mut best: Option<(u64, CatalogData)> = None;
        let mut problems = Vec::new();
        for slot in 0..2u64 {
            let mut buf = AlignedBuf::new(SLOT_BYTES);
            if device.capacity() < (slot + 1) * SLOT_BYTES as u64 {
                continue;
            }
            device.read_at(slot * SLOT_BYTES as u64, &mut buf)?;
            match parse_slot(&buf) {
                Ok((seq, data)) => {
                    if let Err(why) = validate(&data) {
                        // Intact bytes (the checksum matches) with impossible contents: not a torn
                        // write to step over, but a catalog this build must not act on.
                        return Err(Error::Corruption {
                            file: name,
                            offset: slot * SLOT_BYTES as u64,
                            detail: format!("catalog version {seq} (slot {slot}) is impossible: {why}"),
                        });
                    }
                    if best.as_ref().is_none_or(|(s, _)| seq > *s) {
                        best = Some((seq, data));
                    }
                }
                Err(why) => {
                    problems.push(format!("slot {slot} at offset {}: {why}", slot * SLOT_BYTES as u64))
                }
            }
        }
        match best {
            Some((seq, data)) => Ok((Self { device, seq }, Some(data))),
            None => Err(Error::Corruption {
                file: name,
                offset: 0,
                detail: format!("no valid catalog version: {}", problems.join("; ")),
            }),
        }
    }

    /// Writes `data` as the next version and syncs it.
    pub fn store(&mut self, data: &CatalogData) -> Result<()> {
        let seq = self.seq + 1;
        let image = slot_image(data, seq)?;
        self.device.write_at((seq % 2) * SLOT_BYTES as u64, &image)?;
        self.device.sync()?;
        self.seq = seq;
        Ok(())
    }
}

/// The catalog as bytes (the payload of a catalog slot and of a `KIND_CATALOG` log record).
pub fn encode_catalog(c: &CatalogData) -> Vec<u8> {
    encode(c)
}

/// Decodes [`encode_catalog`]; `None` if the bytes are not a catalog.
pub fn decode_catalog(b: &[u8]) -> Option<CatalogData> {
    decode(b)
}

/// The bytes of a catalog slot holding `data` as version `seq`.
fn slot_image(data: &CatalogData, seq: u64) -> Result<AlignedBuf> {
    let payload = encode(data);
    if payload.len() > SLOT_BYTES - SLOT_HEADER {
        return Err(Error::ResourceExhausted(format!(
            "catalog of {} bytes exceeds the {} bytes a catalog slot holds (too many tables or columns)",
            payload.len(),
            SLOT_BYTES - SLOT_HEADER
        )));
    }
    let mut buf = AlignedBuf::new(SLOT_BYTES);
    buf[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    buf[4..6].copy_from_slice(&VERSION.to_le_bytes());
    buf[8..16].copy_from_slice(&seq.to_le_bytes());
    buf[16..20].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    buf[20..24].copy_from_slice(&crate::util::crc32c(&payload).to_le_bytes());
    buf[SLOT_HEADER..SLOT_HEADER + payload.len()].copy_from_slice(&payload);
    Ok(buf)
}

fn parse_slot(buf: &[u8]) -> std::result::Result<(u64, CatalogData), String> {
    let magic = u32_at(buf, 0);
    if magic != MAGIC {
        return Err(format!("bad magic {magic:#010x}"));
    }
    let version = u16_at(buf, 4);
    if version != VERSION {
        return Err(format!("catalog format version {version}, this build reads {VERSION}"));
    }
    let seq = u64_at(buf, 8);
    let len = u32_at(buf, 16) as usize;
    let crc = u32_at(buf, 20);
    if len > SLOT_BYTES - SLOT_HEADER {
        return Err(format!("payload length {len} too large"));
    }
    let payload = &buf[SLOT_HEADER..SLOT_HEADER + len];
    if crate::util::crc32c(payload) != crc {
        return Err("checksum mismatch".into());
    }
    decode(payload).map(|d| (seq, d)).ok_or_else(|| "payload does not decode".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{CrashSimDevice, MemDevice};
    use crate::util::Rng;
    use std::sync::Arc;

    fn sample(n: u32) -> CatalogData {
        let schema = Schema::new(vec![
            ("id", ColumnType::Int),
            ("v", ColumnType::Bytes(100)),
            ("i4", ColumnType::Int32),
            ("i2", ColumnType::Int16),
            ("d", ColumnType::Double),
            ("b", ColumnType::Bool),
            ("ts", ColumnType::Timestamp),
            ("n", ColumnType::Numeric { precision: 12, scale: 2 }),
            ("t", ColumnType::Text(u32::MAX)),
        ])
        .with_nullable("t")
        .unwrap()
        .with_index("by_v", "v")
        .unwrap()
        .with_unique_index("by_i4", "i4")
        .unwrap();
        CatalogData {
            table_page_size: 16384,
            index_page_size: 4096,
            next_table_id: n,
            checkpoint_redo_lsn: 7,
            checkpoint_undo_lsn: 5,
            tables: (0..n)
                .map(|i| TableMeta {
                    id: i,
                    name: format!("t{i}"),
                    schema: schema.clone(),
                    primary_root: 0,
                    index_roots: vec![1, 2],
                    heap_space: if i % 2 == 1 { "fast".into() } else { DEFAULT_TABLESPACE.into() },
                    index_space: DEFAULT_TABLESPACE.into(),
                })
                .collect(),
            tablespaces: if n > 1 {
                vec![TablespaceMeta {
                    name: "fast".into(),
                    location: "/mnt/fast".into(),
                    profile: "optane".into(),
                }]
            } else {
                Vec::new()
            },
        }
    }

    #[test]
    fn store_and_load_round_trip() {
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new("catalog"));
        let (mut store, none) = CatalogStore::load(dev.clone()).unwrap();
        assert!(none.is_none());
        for n in 1..5 {
            store.store(&sample(n)).unwrap();
            let (_, got) = CatalogStore::load(dev.clone()).unwrap();
            assert_eq!(got, Some(sample(n)));
        }
    }

    #[test]
    fn torn_update_keeps_the_previous_version() {
        for seed in 0..100 {
            let sim = Arc::new(CrashSimDevice::new("catalog"));
            let dev: Arc<dyn Device> = sim.clone();
            let (mut store, _) = CatalogStore::load(dev.clone()).unwrap();
            store.store(&sample(1)).unwrap();
            store.store(&sample(2)).unwrap();
            // Write version 3 without its sync, then crash.
            dev.write_at(SLOT_BYTES as u64, &slot_image(&sample(3), 3).unwrap()).unwrap();
            sim.crash(&mut Rng::new(seed));
            let (_, got) = CatalogStore::load(dev.clone()).unwrap();
            let got = got.unwrap();
            assert!(got == sample(2) || got == sample(3), "seed {seed}: {got:?}");
        }
    }

    #[test]
    fn garbage_is_reported_as_corruption() {
        let dev = Arc::new(MemDevice::new("catalog"));
        let mut junk = AlignedBuf::new(2 * SLOT_BYTES);
        junk.fill(0xAB);
        dev.write_at(0, &junk).unwrap();
        let err = CatalogStore::load(dev).err().unwrap().to_string();
        assert!(err.contains("catalog") && err.contains("bad magic"), "{err}");
    }
}
