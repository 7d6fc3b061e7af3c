//! Seeding a standby while its primary runs (online base backup, both sides), and turning a
//! former primary's directory into a standby's.
//!
//! Owns: [`send_base_backup`] (the primary copies its catalog and data files over the log
//! connection: `BaseFile` frames, then `BaseDone` with the log start), [`receive_base_backup`]
//! (the standby writes them, the catalog last), [`wipe`] (a standby that cannot follow its
//! primary drops its copy), and [`adopt_primary_log`] (a former primary's file log, from its
//! last checkpoint on, becomes the replica log at the same LSNs).
//!
//! Invariants:
//! - The backup's log start S comes from the catalog read before any data file is copied:
//!   every change before S is in the data files as they were then, so the files copied after it
//!   (each page at least that new) plus the log from S make a consistent copy (redo skips what a
//!   page already holds). A page torn by a concurrent write-back fails its checksum and is
//!   read again. The primary keeps its log from S on: the standby's shadow counter is S while
//!   the files are copied.
//! - On the standby the catalog is written last and removed first: a directory with a catalog
//!   holds a complete copy; one without is copied again from scratch.
//! - A former primary's log is copied into the replica log, whose start record is written
//!   last, before the file log is removed: a crash in between leaves either the file log alone
//!   or the complete replica log.

use super::clock::Clock;
use super::disk::Disk;
use super::link::Shared as StandbyShared;
use super::net::Conn;
use super::replica_log::ReplicaLog;
use super::wire::{self, FrameType};
use crate::db::{heap_name, index_name, CATALOG_FILE};
use crate::error::ReplError;
use crate::error::{Error, Result};
use crate::io::{AlignedBuf, Device, Storage};
use crate::page::PageHeader;
use crate::table::catalog::{decode_catalog, encode_catalog, CatalogData, CatalogStore};
use crate::util::bytes::u64_at;
use crate::wal::{FileLogOpener, LogOpener, Lsn, RecordLog};
use std::collections::HashMap;
use std::io::{BufWriter, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Pages per `BaseFile` frame.
const PAGES_PER_FRAME: usize = 64;

/// A data file of the database: (table id, true for the heap, false for the index).
fn data_file(name: &str) -> Option<(u32, bool)> {
    let id: u32 = name.strip_prefix('t')?.split('.').next()?.parse().ok()?;
    if name == heap_name(id) {
        Some((id, true))
    } else if name == index_name(id) {
        Some((id, false))
    } else {
        None
    }
}

fn io_peer<'a>(peer: &'a str, what: &str) -> impl Fn(crate::error::Error) -> ReplError + 'a {
    let what = what.to_string();
    move |e| ReplError::Protocol { peer: peer.into(), detail: format!("{what}: {e}") }
}

/// The primary's side: copies `storage` (catalog, heap and index files) to the standby at
/// `addr` over `s` and returns the LSN its log must be shipped from. `log` is the primary's
/// log, `epoch` its epoch, `shadow` the standby's shadow counter (set to the backup's log start,
/// so the primary keeps its log from there on).
pub(super) fn send_base_backup(
    log: &dyn RecordLog,
    epoch: u64,
    shadow: &AtomicU64,
    storage: &dyn Storage,
    addr: &str,
    s: &mut Box<dyn Conn>,
    clock: &dyn Clock,
) -> std::result::Result<Lsn, ReplError> {
    let local = io_peer(addr, "base backup");
    let (_, cat) = CatalogStore::load(storage.open(CATALOG_FILE, false).map_err(|e| local(e.into()))?)
        .map_err(&local)?;
    let cat = cat.ok_or_else(|| local(Error::InvalidArgument("the primary's catalog is empty".into())))?;
    let start = cat.checkpoint_undo_lsn.min(cat.checkpoint_redo_lsn);
    // Keep the log from `start` on while the files are copied.
    shadow.store(start, Ordering::Release);
    if start < log.recovered().start_lsn {
        return Err(ReplError::Diverged {
            peer: addr.into(),
            detail: format!(
                "base backup needs the log from LSN {start}, the primary's starts at {}",
                log.recovered().start_lsn
            ),
        });
    }
    let mut names: Vec<String> =
        storage.list().map_err(|e| local(e.into()))?.into_iter().filter(|n| data_file(n).is_some()).collect();
    names.sort();
    eprintln!(
        "nvmedb repl: base backup to {addr}: {} data files of {}, log from LSN {start}",
        names.len(),
        storage.location()
    );
    let mut w =
        BufWriter::with_capacity(1 << 20, s.try_clone().map_err(|e| ReplError::io(addr, "clone", e))?);
    let mut bytes = 0u64;
    for name in &names {
        let (id, heap) = data_file(name).expect("filtered");
        let ps = if heap { cat.table_page_size } else { cat.index_page_size } as usize;
        let dev = storage.open(name, false).map_err(|e| local(e.into()))?;
        let pages = dev.capacity() / ps as u64;
        let mut page = 0u64;
        // One buffer per file, in huge pages (see `AlignedBuf::large`).
        let mut frame_buf = AlignedBuf::large(PAGES_PER_FRAME * ps);
        while page < pages {
            let n = PAGES_PER_FRAME.min((pages - page) as usize);
            let buf = &mut frame_buf[..n * ps];
            dev.read_at(page * ps as u64, buf).map_err(|e| local(e.into()))?;
            for k in 0..n {
                let off = (page + k as u64) * ps as u64;
                read_whole_page(
                    dev.as_ref(),
                    name,
                    off,
                    id,
                    page + k as u64,
                    &mut buf[k * ps..(k + 1) * ps],
                    clock,
                )
                .map_err(&local)?;
            }
            let mut p = (name.len() as u16).to_le_bytes().to_vec();
            p.extend_from_slice(name.as_bytes());
            p.extend_from_slice(&(page * ps as u64).to_le_bytes());
            p.extend_from_slice(buf);
            wire::write_frame(&mut w, addr, epoch, FrameType::BaseFile, &p)?;
            bytes += buf.len() as u64;
            page += n as u64;
        }
    }
    let mut p = start.to_le_bytes().to_vec();
    p.extend_from_slice(&encode_catalog(&cat));
    wire::write_frame(&mut w, addr, epoch, FrameType::BaseDone, &p)?;
    drop(w);
    let f = wire::expect_frame(s, addr)?;
    match f.kind {
        FrameType::Welcome if f.payload.len() >= 8 => {
            let pos = u64_at(&f.payload, 0);
            eprintln!(
                "nvmedb repl: base backup to {addr} done: {bytes} bytes; shipping the log from LSN {pos}"
            );
            Ok(pos)
        }
        FrameType::Refused => Err(wire::refused_error(addr, &f, epoch)),
        k => Err(ReplError::Protocol { peer: addr.into(), detail: format!("expected a welcome, got {k:?}") }),
    }
}

/// Makes `page` a page that passes its checksum (or an all-zero, never written page): a page
/// torn by a concurrent write-back is read again until the write has finished.
pub(crate) fn read_whole_page(
    dev: &dyn Device,
    name: &str,
    off: u64,
    id: u32,
    page_no: u64,
    page: &mut [u8],
    clock: &dyn Clock,
) -> Result<()> {
    for attempt in 0..1000 {
        if page.iter().all(|&b| b == 0) || PageHeader::verify(page, name, off, id, page_no).is_ok() {
            return Ok(());
        }
        if attempt > 0 {
            clock.sleep(Duration::from_millis(1));
        }
        let mut one = AlignedBuf::new(page.len());
        dev.read_at(off, &mut one)?;
        page.copy_from_slice(&one);
    }
    // Damaged on the primary itself: redo from the backup's start repairs it if it changed
    // since; otherwise the standby's copy is as damaged as the primary's.
    eprintln!(
        "nvmedb repl: base backup: page {page_no} of {name} (offset {off}) fails its checksum; sent as it is"
    );
    Ok(())
}

/// The standby's side, after it answered the handshake with `WELCOME_NEEDS_BASE_BACKUP` (and
/// [`wipe`]d its copy): writes the files, then the log start and the catalog, and answers with
/// a `Welcome` at the log start. Returns the log start and the catalog.
pub(super) fn receive_base_backup(
    sh: &StandbyShared,
    r: &mut impl Read,
    w: &mut impl Write,
    peer: &str,
) -> std::result::Result<(Lsn, CatalogData), ReplError> {
    let local = io_peer(peer, "base backup on the standby");
    let bad = |d: &str| ReplError::Corrupt { peer: peer.into(), detail: format!("base backup frame: {d}") };
    let mut devs: HashMap<String, Arc<dyn Device>> = HashMap::new();
    let mut bytes = 0u64;
    loop {
        let f = wire::expect_frame(r, peer)?;
        match f.kind {
            FrameType::BaseFile => {
                let nl = u16::from_le_bytes(
                    f.payload.get(..2).ok_or_else(|| bad("short"))?.try_into().expect("2 bytes"),
                ) as usize;
                let name = std::str::from_utf8(f.payload.get(2..2 + nl).ok_or_else(|| bad("short"))?)
                    .map_err(|_| bad("file name"))?
                    .to_string();
                if data_file(&name).is_none() {
                    return Err(bad(&format!("not a data file name: {name:?}")));
                }
                let rest = &f.payload[2 + nl..];
                let off = u64::from_le_bytes(
                    rest.get(..8).ok_or_else(|| bad("short"))?.try_into().expect("8 bytes"),
                );
                let data = &rest[8..];
                let dev = match devs.get(&name) {
                    Some(d) => d.clone(),
                    None => {
                        let d = sh.storage.open(&name, true).map_err(|e| local(e.into()))?;
                        devs.insert(name.clone(), d.clone());
                        d
                    }
                };
                let mut buf = AlignedBuf::new(data.len());
                buf.copy_from_slice(data);
                dev.write_at(off, &buf).map_err(|e| local(e.into()))?;
                bytes += data.len() as u64;
            }
            FrameType::BaseDone => {
                let start = u64::from_le_bytes(
                    f.payload.get(..8).ok_or_else(|| bad("short"))?.try_into().expect("8 bytes"),
                );
                let cat = decode_catalog(&f.payload[8..]).ok_or_else(|| bad("catalog does not decode"))?;
                for d in devs.values() {
                    d.sync().map_err(|e| local(e.into()))?;
                }
                sh.log.reset(start).map_err(&local)?;
                // The catalog last: from here on the directory holds a complete copy.
                let (mut store, _) =
                    CatalogStore::load(sh.storage.open(CATALOG_FILE, true).map_err(|e| local(e.into()))?)
                        .map_err(&local)?;
                store.store(&cat).map_err(&local)?;
                eprintln!(
                    "nvmedb standby: base backup received from {peer}: {bytes} bytes in {} files, log from LSN {start}",
                    devs.len()
                );
                wire::write_frame(
                    w,
                    peer,
                    sh.epoch.load(Ordering::Acquire),
                    FrameType::Welcome,
                    &start.to_le_bytes(),
                )?;
                return Ok((start, cat));
            }
            k => {
                return Err(ReplError::Protocol {
                    peer: peer.into(),
                    detail: format!("expected base backup frames, got {k:?}"),
                })
            }
        }
    }
}

/// Drops the standby's copy of the database (catalog first, then the data files); the log is
/// reset when a base backup arrives. The apply thread must be stopped.
pub(super) fn wipe(storage: &dyn Storage) -> Result<()> {
    if storage.exists(CATALOG_FILE) {
        storage.remove(CATALOG_FILE)?;
    }
    for name in storage.list()? {
        // The double-write copies are of the dropped copy's pages: they must never be restored
        // into the next one.
        if data_file(&name).is_some() || name == crate::buffer::DOUBLEWRITE_FILE {
            storage.remove(&name)?;
        }
    }
    Ok(())
}

/// Copies device `name` of storage `from` into `to` (replacing it) and syncs it.
pub(super) fn copy_device(from: &dyn Storage, to: &dyn Storage, name: &str) -> Result<()> {
    let src = from.open(name, false)?;
    if to.exists(name) {
        to.remove(name)?;
    }
    let dst = to.open(name, true)?;
    let cap = src.capacity();
    let align = src.alignment().max(dst.alignment()).max(1) as u64;
    let mut buf = AlignedBuf::new(1 << 20);
    let mut at = 0;
    while at < cap {
        // Whole aligned blocks (data files are whole pages); an unaligned end is only sized.
        let n = ((cap - at).min(1 << 20) / align * align) as usize;
        if n == 0 {
            break;
        }
        src.read_at(at, &mut buf[..n])?;
        dst.write_at(at, &buf[..n])?;
        at += n as u64;
    }
    dst.ensure_capacity(cap)?;
    dst.sync()?;
    Ok(())
}

/// If `disk` holds a former primary's file log and no replica log, copies the file log's
/// records from the catalog's checkpoint on into a replica log at the same LSNs, then removes
/// the file log. The replica log's start record is written last (after its records are
/// synced), so a crash in between leaves the file log alone (the copy is made again) or the
/// complete replica log. Returns what was copied.
pub(super) fn adopt_primary_log(
    disk: &dyn Disk,
    options: &crate::Options,
    cat: &CatalogData,
) -> Result<Option<(Lsn, Lsn, u64)>> {
    let replica = disk.replica()?;
    if ReplicaLog::exists(replica.as_ref()) {
        // An earlier conversion got as far as the start record.
        disk.remove_file_log(options)?;
        return Ok(None);
    }
    let opener = FileLogOpener { copies: disk.file_log(options)?, options: options.wal_options.clone() };
    if opener.is_empty()? {
        disk.remove_file_log(options)?;
        return Ok(None);
    }
    let log = Box::new(opener).open(0)?;
    let start = cat.checkpoint_undo_lsn.min(cat.checkpoint_redo_lsn).max(log.recovered().start_lsn);
    let rl = ReplicaLog::create_for_copy(replica, start)?;
    let mut rd = log.reader(start)?;
    let mut n = 0u64;
    while let Some(rec) = rd.next_record()? {
        rl.append_at(rec.lsn, rec.end_lsn, rec.kind, &rec.payload)?;
        n += 1;
        if n.is_multiple_of(4096) {
            rl.sync()?;
        }
    }
    let end = rl.finish_copy()?;
    drop(rd);
    drop(rl);
    drop(log);
    disk.remove_file_log(options)?;
    Ok(Some((start, end, n)))
}
