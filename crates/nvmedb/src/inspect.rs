//! Inspection: human-readable views of a database's catalog and of raw pages.
//!
//! Owns: the text `nvmedb inspect` prints. Pages are read straight from the device, not
//! through the buffer pool, so a corrupt page can still be shown together with what is wrong
//! with it.

use crate::btree::node;
use crate::db::{heap_name, index_name, Database};
use crate::error::{Error, Result};
use crate::io::{AlignedBuf, Storage};
use crate::page::{slotted, PageHeader, PageType};
use crate::table::{RowView, Schema};
use std::fmt::Write;

fn hex(b: &[u8]) -> String {
    let mut s: String = b.iter().take(24).map(|x| format!("{x:02x}")).collect();
    if b.len() > 24 {
        s.push('…');
    }
    s
}

/// The catalog: tablespaces, and per table its columns, indexes, placement and file sizes.
pub fn describe_database(db: &Database) -> Result<String> {
    let cat = db.catalog();
    let mut out = String::new();
    let _ = writeln!(out, "database {}", db.location());
    let _ = writeln!(
        out,
        "  table page size {} B, index page size {} B",
        cat.table_page_size, cat.index_page_size
    );
    let _ = writeln!(out, "tablespace `{}`: {}", crate::db::DEFAULT_TABLESPACE, db.location());
    for s in &cat.tablespaces {
        let profile = if s.profile.is_empty() { String::new() } else { format!(" (profile {})", s.profile) };
        let _ = writeln!(out, "tablespace `{}`: {}{profile}", s.name, s.location);
    }
    for t in &cat.tables {
        let heap = db.tablespace_storage(&t.heap_space)?.open(&heap_name(t.id), false)?.capacity();
        let idx = db.tablespace_storage(&t.index_space)?.open(&index_name(t.id), false)?.capacity();
        let _ = writeln!(out, "table `{}` (id {})", t.name, t.id);
        for (i, c) in t.schema.columns.iter().enumerate() {
            let pk = if i == t.schema.primary_key { "  PRIMARY KEY" } else { "" };
            let _ = writeln!(out, "    column {i}: {} {:?}{pk}", c.name, c.ty);
        }
        let _ = writeln!(out, "    primary index root: page {}", t.primary_root);
        for (ix, root) in t.schema.indexes.iter().zip(&t.index_roots) {
            let _ = writeln!(
                out,
                "    index `{}` on `{}`: root page {root}",
                ix.name, t.schema.columns[ix.column].name
            );
        }
        let _ = writeln!(
            out,
            "    {} in tablespace `{}`: {} pages ({} B); {} in tablespace `{}`: {} pages ({} B)",
            heap_name(t.id),
            t.heap_space,
            heap / u64::from(cat.table_page_size),
            heap,
            index_name(t.id),
            t.index_space,
            idx / u64::from(cat.index_page_size),
            idx
        );
    }
    Ok(out)
}

/// Per-table access statistics (heap and indexes): logical page reads (hits + misses), misses,
/// device reads and writes with their bytes, and I/O wait, as a table.
pub fn describe_access(stats: &[crate::db::TableAccess]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<20} {:<6} {:<12} {:>12} {:>10} {:>10} {:>10} {:>12} {:>12} {:>10}",
        "table",
        "file",
        "tablespace",
        "page reads",
        "misses",
        "dev reads",
        "dev writes",
        "read B",
        "written B",
        "I/O ms"
    );
    for s in stats {
        for (file, space, st, ps) in [
            ("heap", &s.heap_space, &s.heap, s.heap_page_size),
            ("index", &s.index_space, &s.index, s.index_page_size),
        ] {
            let _ = writeln!(
                out,
                "{:<20} {:<6} {:<12} {:>12} {:>10} {:>10} {:>10} {:>12} {:>12} {:>10.1}",
                s.table,
                file,
                space,
                st.hits + st.misses,
                st.misses,
                st.reads,
                st.writes,
                st.reads * ps,
                st.writes * ps,
                st.io_wait_ns as f64 / 1e6
            );
        }
    }
    out
}

/// Reads page `page_no` of device `file` (of `page_size` bytes) and decodes it. `schema`
/// decodes heap rows when given.
pub fn describe_page(
    storage: &dyn Storage,
    file: &str,
    page_size: usize,
    page_no: u64,
    schema: Option<&Schema>,
) -> Result<String> {
    let dev = storage.open(file, false)?;
    let offset = page_no * page_size as u64;
    if offset + page_size as u64 > dev.capacity() {
        return Err(Error::InvalidArgument(format!(
            "{file} has {} pages of {page_size} B; page {page_no} does not exist",
            dev.capacity() / page_size as u64
        )));
    }
    let mut buf = AlignedBuf::new(page_size);
    dev.read_at(offset, &mut buf)?;
    let mut out = String::new();
    let _ = writeln!(out, "{file} page {page_no} (offset {offset}, {page_size} B)");
    let file_id = PageHeader::read(&buf).map_or(0, |h| h.file_id);
    match PageHeader::verify(&buf, file, offset, file_id, page_no) {
        Ok(_) => {
            let _ = writeln!(out, "  checksum: ok");
        }
        Err(e) => {
            let _ = writeln!(out, "  CHECK FAILED: {e}");
        }
    }
    let Some(h) = PageHeader::read(&buf) else {
        let _ = writeln!(out, "  no valid header (magic or type unknown): first bytes {}", hex(&buf[..32]));
        return Ok(out);
    };
    let _ = writeln!(
        out,
        "  type {:?}, file id {}, page number {}, LSN {}",
        h.page_type, h.file_id, h.page_no, h.lsn
    );
    match h.page_type {
        PageType::Heap => describe_heap_page(&mut out, &buf, schema),
        PageType::Overflow => describe_overflow_page(&mut out, &buf),
        PageType::BtreeLeaf | PageType::BtreeInner => describe_node(&mut out, &buf),
        PageType::Meta => {}
    }
    Ok(out)
}

/// The slot directory and the first rows of a heap page (decoded with `schema` when given).
fn describe_heap_page(out: &mut String, buf: &[u8], schema: Option<&Schema>) {
    if let Err(e) = slotted::check(buf) {
        // A damaged slot directory: its sizes and rows cannot be trusted.
        let _ = writeln!(out, "  slots {}, layout {e}", slotted::slot_count(buf));
        return;
    }
    let live: Vec<usize> = slotted::live_slots(buf).collect();
    let _ = writeln!(
        out,
        "  slots {}, live rows {}, free {} B, layout ok",
        slotted::slot_count(buf),
        live.len(),
        slotted::free_space(buf),
    );
    for &slot in live.iter().take(8) {
        let row = slotted::get(buf, slot).unwrap_or_default();
        match schema {
            Some(s) => {
                let v = RowView::new(s, row);
                let vals: Vec<String> = (0..s.columns.len())
                    .map(|c| match v.try_value(c) {
                        Ok(crate::Value::Bytes(b)) => format!(
                            "'{}'",
                            String::from_utf8_lossy(&b[..b.len().min(24)]).trim_end_matches('\0')
                        ),
                        Ok(other) => other.to_string(),
                        Err(e) => format!("<{e}>"),
                    })
                    .collect();
                let _ = writeln!(out, "    slot {slot}: ({})", vals.join(", "));
            }
            None => {
                let _ = writeln!(out, "    slot {slot}: {} B {}", row.len(), hex(row));
            }
        }
    }
    if live.len() > 8 {
        let _ = writeln!(out, "    … {} more rows", live.len() - 8);
    }
}

/// One page of a row larger than a slotted page, field by field.
fn describe_overflow_page(out: &mut String, buf: &[u8]) {
    // A page of a row larger than a slotted page: shown field by field (the row is
    // decoded from its first page only by a read, which follows the chain).
    use crate::page::overflow;
    match overflow::check(buf) {
        Err(e) => {
            let _ = writeln!(out, "  overflow page, layout {e}");
        }
        Ok(()) => {
            let next = overflow::next(buf);
            let next = if next == overflow::NO_PAGE { "none".to_string() } else { next.to_string() };
            let chunk = overflow::chunk(buf).unwrap_or_default();
            let _ = match overflow::state(buf) {
                Some(overflow::State::First) => writeln!(
                    out,
                    "  overflow row of {} B starts here (row id slot {}), {} B in this page, next page {next}",
                    overflow::total_len(buf),
                    crate::table::heap::OVERFLOW_SLOT,
                    chunk.len()
                ),
                Some(overflow::State::Next) => {
                    writeln!(out, "  overflow row continued: {} B, next page {next}", chunk.len())
                }
                _ => writeln!(out, "  overflow page, free"),
            };
        }
    }
}

/// A B+tree node's header and its first and last entries.
fn describe_node(out: &mut String, buf: &[u8]) {
    // A damaged node is shown without trusting it: sizes and entries only where they
    // lie inside the page.
    let n = node::count(buf);
    let leaf = node::is_leaf(buf);
    let link = node::link(buf);
    let link = if link == node::NO_PAGE { "none".to_string() } else { link.to_string() };
    let layout = node::check(buf);
    let free = match layout {
        Ok(()) => format!("{} B", node::free_space(buf)),
        Err(_) => "unknown".into(),
    };
    let _ = writeln!(
        out,
        "  level {}, {} entries, free {free}, {} {link}, layout {}",
        node::level(buf),
        n,
        if leaf { "right sibling" } else { "leftmost child" },
        layout.err().unwrap_or_else(|| "ok".into())
    );
    for i in (0..n).take(6).chain(n.saturating_sub(2).max(6)..n) {
        let Some((k, v)) = node::entry_checked(buf, i) else {
            let _ = writeln!(out, "    [{i}] (outside the page)");
            continue;
        };
        let val = match (leaf, v.get(..8)) {
            (false, Some(c)) if v.len() == 8 => {
                format!("child {}", u64::from_le_bytes(c.try_into().expect("8 bytes")))
            }
            _ => hex(v),
        };
        let _ = writeln!(out, "    [{i}] key {} -> {val}", hex(k));
    }
}

/// Lists the segments of the log kept in `copies` (its directory, and its mirror when
/// duplexed) and decodes up to `limit` records from the oldest one (or from
/// `from` when given): kind, LSN, size, and for page changes the pages touched and the
/// transaction operation they carry.
pub fn describe_log(
    copies: Vec<std::sync::Arc<dyn Storage>>,
    from: Option<u64>,
    limit: usize,
) -> Result<String> {
    use crate::buffer::mtr::PageChange;
    use crate::wal::engine::{EngineRecord, TxnOp, TAG_TABLE};
    let segs = crate::wal::live_segments(&copies)?;
    let mut out = String::new();
    let place = match copies.as_slice() {
        [one] => one.location(),
        [a, b, ..] => format!("{} (mirror {})", a.location(), b.location()),
        [] => {
            return Err(crate::error::Error::InvalidArgument("describe_log needs the log's storage".into()))
        }
    };
    let _ = writeln!(out, "log in {place}: {} segment(s)", segs.len());
    for s in &segs {
        let _ = writeln!(out, "  {} seq {} base LSN {} ({} B)", s.name, s.seq, s.base_lsn, s.segment_bytes);
    }
    let Some(first) = segs.first() else { return Ok(out) };
    let start = from.unwrap_or(first.base_lsn);
    let mut reader = crate::wal::LogReader::open_copies(copies, start)?;
    let mut n = 0;
    while let Some(rec) = reader.next_record()? {
        if n == limit {
            let _ = writeln!(out, "  … (more records; use --from {} to continue)", rec.lsn);
            break;
        }
        n += 1;
        let what = match EngineRecord::decode(rec.kind, &rec.payload) {
            Ok(Some(EngineRecord::Pages { tag, format, mtr })) => match format.decode(mtr, 0) {
                Some(m) => {
                    let pages: Vec<String> = m
                        .changes
                        .iter()
                        .map(|(pid, c)| match c {
                            PageChange::FullImage(_) => format!("{pid} full"),
                            PageChange::NewPage(r) => {
                                format!("{pid} new, {} B in {} range(s)", r.iter().map(|x| x.1.len()).sum::<usize>(), r.len())
                            }
                            PageChange::Ranges(r) => {
                                format!(
                                    "{pid} {} B in {} range(s)",
                                    r.iter().map(|x| x.1.len()).sum::<usize>(),
                                    r.len()
                                )
                            }
                            PageChange::Ops(o) => format!("{pid} {} B of page operations", o.len()),
                        })
                        .collect();
                    let op = m.annotation.as_deref().and_then(|a| TxnOp::decode(a).ok()).map(|op| {
                        let kind = match (&op.patch, &op.before, &op.after) {
                            (Some(p), ..) => format!(
                                "update ({} of {} row bytes changed, in {} range(s))",
                                p.changed_bytes() / 2,
                                p.len,
                                p.ranges.len()
                            ),
                            (None, None, _) => "insert".into(),
                            (None, Some(_), Some(_)) => "update (whole rows)".into(),
                            (None, Some(_), None) => "delete".into(),
                        };
                        format!("; txn {} {kind} table {} key {}", op.txn, op.table, hex(&op.pk))
                    });
                    format!(
                        "{} pages: {}{}",
                        if tag == TAG_TABLE { "heap" } else { "index" },
                        pages.join(", "),
                        op.unwrap_or_default()
                    )
                }
                None => "page changes (DO NOT DECODE)".into(),
            },
            Ok(Some(EngineRecord::Commit { txn })) => format!("commit txn {txn}"),
            Ok(Some(EngineRecord::Abort { txn })) => format!("abort txn {txn}"),
            Ok(Some(EngineRecord::Checkpoint { redo, undo })) => format!("checkpoint redo from {redo} undo from {undo}"),
            Ok(Some(EngineRecord::Recovery(r))) => format!(
                "recovery: redo from {} to {}, {} records, {} page changes redone ({} full images), {} unfinished \
                 transactions ({} operations undone), {:.1} ms",
                r.redo_from,
                r.log_end,
                r.records,
                r.pages_redone,
                r.full_images,
                r.losers,
                r.ops_undone,
                r.micros as f64 / 1000.0
            ),
            Ok(Some(EngineRecord::Catalog(c))) => match crate::table::catalog::decode_catalog(c) {
                Some(c) => format!(
                    "catalog: {} table(s): {}",
                    c.tables.len(),
                    c.tables.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")
                ),
                None => format!("catalog ({} bytes, does not decode)", rec.payload.len()),
            },
            Ok(None) => format!("kind {}, {} payload bytes", rec.kind, rec.payload.len()),
            Err(e) => format!("{e} (DOES NOT DECODE)"),
        };
        let _ = writeln!(out, "  LSN {:>10} +{:<6} {what}", rec.lsn, rec.end_lsn - rec.lsn);
    }
    Ok(out)
}
