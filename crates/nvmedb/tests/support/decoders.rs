//! Every decoder that reads bytes from disk or the network, fed arbitrary bytes: what the
//! seeded mutation test (`tests/fuzz_decoders.rs`) and the coverage-guided fuzz targets
//! (`fuzz/`, outside the workspace) both run. Each `feed_*` takes any bytes and must return
//! (an error is fine) without panicking, hanging or allocating without bound; each `valid_*`
//! returns a valid encoding to mutate from.
//!
//! Decoders: catalog slots, page headers with heap (slotted) and B+tree node bodies, the
//! page-change records of the log (mini-transactions and the transaction operation they
//! carry), the duplexed file log's segments as its reader and recovery see them, the fast
//! log's conventional ring and metadata, and replication frames.

use nvmedb::btree::node;
use nvmedb::buffer::mtr::{
    apply_page_change, decode_mtr, decode_mtr_compact, encode_compact_annotation, encode_compact_change,
    encode_compact_start, ChangeRef, MtrRecord,
};
use nvmedb::buffer::PageId;
use nvmedb::io::{AlignedBuf, MemStorage, Storage};
use nvmedb::page::{slotted, PageHeader, PageType};
use nvmedb::table::catalog::{decode_catalog, encode_catalog, validate, CatalogData, TableMeta};
use nvmedb::util::Rng;
use nvmedb::wal::engine::TxnOp;
use nvmedb::wal::{FileLog, LogReader, LogSink, WalOptions};
use nvmedb::{ColumnType, Schema};
use std::sync::Arc;

/// Page size of the page decoders.
pub const PAGE: usize = 4096;

/// A catalog of two tables.
pub fn valid_catalog() -> Vec<u8> {
    let schema = Schema::new(vec![
        ("id", ColumnType::Int),
        ("c", ColumnType::Char(40)),
        ("b", ColumnType::Bytes(900)),
    ])
    .with_index("by_c", "c")
    .unwrap();
    let t = |id: u32| TableMeta {
        id,
        name: format!("t{id}"),
        schema: schema.clone(),
        primary_root: 0,
        index_roots: vec![1],
        heap_space: "default".into(),
        index_space: if id == 1 { "fast".into() } else { "default".into() },
    };
    encode_catalog(&CatalogData {
        table_page_size: 16384,
        index_page_size: 4096,
        next_table_id: 2,
        checkpoint_redo_lsn: 4096,
        checkpoint_undo_lsn: 4000,
        tables: vec![t(0), t(1)],
        tablespaces: vec![nvmedb::table::catalog::TablespaceMeta {
            name: "fast".into(),
            location: "/mnt/fast".into(),
            profile: "optane".into(),
        }],
    })
}

/// The catalog decoder and its validation.
pub fn feed_catalog(b: &[u8]) {
    if let Some(c) = decode_catalog(b) {
        let _ = validate(&c);
    }
}

/// A heap page with rows and a B+tree leaf, both sealed.
pub fn valid_pages(seed: u64) -> (Vec<u8>, Vec<u8>) {
    let mut rng = Rng::new(seed);
    let mut heap = vec![0u8; PAGE];
    PageHeader::init(&mut heap, PageType::Heap, 3, 7);
    slotted::init(&mut heap);
    while slotted::insert(&mut heap, &vec![rng.below(256) as u8; rng.range(1, 300) as usize]).is_some() {}
    let mut leaf = vec![0u8; PAGE];
    PageHeader::init(&mut leaf, PageType::BtreeLeaf, 3, 8);
    node::init(&mut leaf, 0, node::NO_PAGE);
    for i in 0..rng.range(10, 150) {
        let k = (i * 17 + rng.below(10)).to_be_bytes();
        if let Err(at) = node::search(&leaf, &k) {
            if node::fits(&leaf, &k, &[1; 8]) {
                node::insert_at(&mut leaf, at, &k, &[i as u8; 8]);
            }
        }
    }
    PageHeader::seal(&mut heap);
    PageHeader::seal(&mut leaf);
    (heap, leaf)
}

/// A page as the engine reads it: header and checksum, then the body's layout check, then —
/// only for a body that passed — what reads do with it. (The checksum is recomputed first, so
/// that mutations reach the body decoders instead of stopping at the checksum.)
pub fn feed_page(b: &[u8]) {
    let mut page = vec![0u8; PAGE];
    let n = b.len().min(PAGE);
    page[..n].copy_from_slice(&b[..n]);
    PageHeader::seal(&mut page);
    let _ = PageHeader::verify(&page, "fuzz", 0, 3, 7);
    match PageHeader::page_type_of(&page) {
        Some(PageType::Heap) if slotted::check(&page).is_ok() => {
            for i in slotted::live_slots(&page) {
                let _ = slotted::get(&page, i);
            }
            let _ = slotted::free_space(&page);
            let mut copy = page.clone();
            let _ = slotted::insert(&mut copy, &[9; 40]);
        }
        Some(PageType::BtreeLeaf | PageType::BtreeInner) => {
            for i in 0..node::count(&page).min(PAGE) {
                let _ = node::entry_checked(&page, i);
            }
            if node::check(&page).is_ok() {
                let _ = node::search(&page, &42u64.to_be_bytes());
                let _ = node::free_space(&page);
                if !node::is_leaf(&page) {
                    let _ = node::child_for_bounded(&page, &7u64.to_be_bytes(), None);
                }
            }
        }
        _ => {}
    }
}

/// A mini-transaction record (page operations, changed ranges, a full image as older logs hold
/// them, a new page, and a transaction operation), as logged (compact format).
pub fn valid_mtr(seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    encode_compact_start(&mut out, 4);
    let mut ops = Vec::new();
    slotted::op::insert(&mut ops, 0, &[rng.below(256) as u8; 24]);
    slotted::op::update(&mut ops, 0, &[0; 24], &[rng.below(256) as u8; 24]);
    slotted::op::delete(&mut ops, 0);
    node::op::insert(&mut ops, 0, b"key", &[1; 8]);
    encode_compact_change(&mut out, PageId::new(1, 2), ChangeRef::Ops(&ops));
    let before = vec![0u8; PAGE];
    let mut after = before.clone();
    for i in 0..rng.range(1, 5) as usize {
        after[40 + i * 100..60 + i * 100].fill(rng.below(256) as u8);
    }
    encode_compact_change(&mut out, PageId::new(1, 4), ChangeRef::Diff { before: &before, after: &after });
    encode_compact_change(&mut out, PageId::new(1, 3), ChangeRef::FullImage(&[7; PAGE - 4]));
    encode_compact_change(&mut out, PageId::new(1, 5), ChangeRef::NewPage(&after));
    // Every other seed annotates a same-length update, which is logged as a row patch.
    let op = if seed.is_multiple_of(2) {
        TxnOp {
            txn: 9,
            table: 1,
            pk: vec![1, 2, 3],
            rid: 77,
            before: Some(vec![5; 30]),
            after: None,
            patch: None,
        }
    } else {
        let before = vec![5u8; 64];
        let mut after = before.clone();
        after[rng.below(64) as usize] = 6;
        after[rng.below(64) as usize] = 7;
        TxnOp {
            txn: 9,
            table: 1,
            pk: vec![1, 2, 3],
            rid: 77,
            before: Some(before),
            after: Some(after),
            patch: None,
        }
    };
    encode_compact_annotation(&mut out, Some(&op.encode()));
    out
}

/// The page-change decoders (compact and fixed-width), then what redo does with a record for
/// pages of this size: page operations on an empty heap page and an empty leaf.
pub fn feed_mtr(b: &[u8]) {
    for m in [decode_mtr_compact(b, PAGE), decode_mtr(b)].into_iter().flatten() {
        feed_decoded_mtr(&m);
    }
}

fn feed_decoded_mtr(m: &MtrRecord) {
    if let Some(a) = &m.annotation {
        // What undo does with a patch: apply it to a row of its length.
        if let Ok(op) = TxnOp::decode(a) {
            if let Some(p) = op.patch.as_ref().filter(|p| p.len <= 1 << 16) {
                let row = vec![0u8; p.len as usize];
                let _ = op.resolve(Some(&row));
            }
        }
    }
    if m.page_size == PAGE {
        let mut heap = vec![0u8; PAGE];
        PageHeader::init(&mut heap, PageType::Heap, 1, 2);
        slotted::init(&mut heap);
        let mut leaf = vec![0u8; PAGE];
        PageHeader::init(&mut leaf, PageType::BtreeLeaf, 1, 2);
        node::init(&mut leaf, 0, node::NO_PAGE);
        for page in [&mut heap, &mut leaf] {
            for (_, change) in &m.changes {
                let _ = apply_page_change(page, change, 1, &nvmedb::btree::apply_page_ops);
            }
        }
    }
}

/// A duplexed file log's two copies holding records of several sizes.
pub fn valid_file_log(seed: u64) -> (Arc<MemStorage>, Arc<MemStorage>) {
    let (a, b) = (Arc::new(MemStorage::new()), Arc::new(MemStorage::new()));
    let opts = WalOptions { segment_bytes: 64 << 10, max_batch_bytes: 16 << 10, ..WalOptions::default() };
    let log = FileLog::open(a.clone(), b.clone(), opts).expect("open log");
    let mut rng = Rng::new(seed);
    for i in 0..40u64 {
        let p = vec![i as u8; rng.below(3000) as usize];
        let (_, end) = log.append_record(nvmedb::wal::KIND_USER_MIN, &p).expect("append");
        if i % 7 == 0 {
            log.wait_durable(end).expect("durable");
        }
    }
    log.close().expect("close");
    (a, b)
}

/// Overwrites the devices of `s` with `bytes`, spread over them in name order from `at`.
pub fn overwrite(s: &dyn Storage, at: usize, bytes: &[u8]) {
    let mut pos = 0usize;
    for name in s.list().expect("list") {
        let dev = s.open(&name, false).expect("open");
        let cap = dev.capacity() as usize;
        if at + bytes.len() > pos && at < pos + cap {
            let mut buf = AlignedBuf::new(cap.div_ceil(4096) * 4096);
            dev.read_at(0, &mut buf).expect("read");
            for (i, &x) in bytes.iter().enumerate() {
                let p = at + i;
                if p >= pos && p < pos + cap {
                    buf[p - pos] = x;
                }
            }
            dev.write_at(0, &buf).expect("write");
        }
        pos += cap;
    }
}

/// The file log's reader and its open (recovery's view) over two copies whose bytes were
/// damaged by the caller.
pub fn feed_file_log(a: Arc<MemStorage>, b: Arc<MemStorage>) {
    if let Ok(r) = LogReader::open(a.clone(), b.clone(), 0) {
        for rec in r.take(10_000) {
            if rec.is_err() {
                break;
            }
        }
    }
    let opts = WalOptions { segment_bytes: 64 << 10, max_batch_bytes: 16 << 10, ..WalOptions::default() };
    if let Ok(log) = FileLog::open(a, b, opts) {
        let start = log.recovered().start_lsn;
        if let Ok(r) = log.reader(start) {
            for rec in r.take(10_000) {
                if rec.is_err() {
                    break;
                }
            }
        }
    }
}

/// Replication frames: valid ones of every size class, back to back.
pub fn valid_frames(seed: u64) -> Vec<u8> {
    use nvmedb::repl::wire::{encode_frame, FrameType};
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    for kind in [FrameType::Hello, FrameType::Records, FrameType::Ack, FrameType::Records] {
        encode_frame(&mut out, rng.below(5), kind, &vec![3; rng.below(500) as usize]);
    }
    out
}

/// The replication frame decoder over a byte stream, frame after frame.
pub fn feed_frames(b: &[u8]) {
    let mut r = std::io::Cursor::new(b);
    for _ in 0..1000 {
        match nvmedb::repl::wire::read_frame(&mut r, "fuzz") {
            Ok(Some(_)) => {}
            _ => break,
        }
    }
}

/// Mutates `b` in place: flipped bits, random and boundary bytes, truncation, growth, copied
/// spans — a few of them, chosen by `rng`.
pub fn mutate(rng: &mut Rng, b: &mut Vec<u8>) {
    for _ in 0..rng.range(1, 6) {
        let len = b.len().max(1) as u64;
        match rng.below(7) {
            0 if !b.is_empty() => {
                let i = rng.below(len) as usize;
                b[i] ^= 1 << rng.below(8);
            }
            1 if !b.is_empty() => {
                let i = rng.below(len) as usize;
                b[i] = rng.next_u64() as u8;
            }
            2 if b.len() >= 4 => {
                let i = rng.below(len - 3) as usize;
                let v: [u32; 5] = [0, 1, u32::MAX, 0x8000_0000, rng.below(70_000) as u32];
                b[i..i + 4].copy_from_slice(&v[rng.below(5) as usize].to_le_bytes());
            }
            3 => b.truncate(rng.below(len + 1) as usize),
            4 => b.extend((0..rng.below(64)).map(|_| rng.next_u64() as u8)),
            5 if b.len() >= 2 => {
                let from = rng.below(len) as usize;
                let to = rng.below(len) as usize;
                let n = (rng.below(64) as usize).min(b.len() - from).min(b.len() - to);
                b.copy_within(from..from + n, to);
            }
            _ => {
                if let Some(x) = b.get_mut(rng.below(len) as usize) {
                    *x = 0;
                }
            }
        }
    }
}
