//! Scans: the table's walks in key order ([`Table::scan`], [`Table::range`],
//! [`Table::primary_keys`], [`Table::index_keys`], [`Table::lookup`]) and in heap order
//! ([`Table::scan_partition`] and its read-ahead forms), over key ranges of its primary and
//! secondary indexes (also walked by the scans that lock row by row).
//!
//! Owns: the table's scan methods, the heap-order partitioning ([`scan_partition_pages`]),
//! turning value bounds into index-key bounds ([`KeyRange`]), collecting the primary keys
//! of a range a bounded batch at a time (no latch is held once a batch is returned, so the
//! caller may wait for locks between batches), and the row-side re-check that a row found
//! through an index still lies in the range. Invariants: a batch holds at most the number of
//! keys asked for, in index order, each strictly after the previous batch's last entry; a
//! secondary range yields primary keys, never index entries, so callers lock and read exactly
//! what point operations lock and read. Batches and lock-free walks
//! ([`KeyRange::for_each_committed`]) decide each key of the range exactly once, merging the
//! before-images of keys in flight under each leaf's latch (the argument is in the `table`
//! module's documentation): a key whose delete is in flight is in its batch, so a locking scan
//! waits for it rather than passing over a row that a rollback or a crash may bring back.

use super::{RowId, RowView, Table, Value};
use crate::error::{Error, Result};
use crate::txn::pending::BeforeImage;
use crate::txn::{LockManager, PendingWriters, RangeCover};
use std::cell::RefCell;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

/// Which index a [`KeyRange`] walks.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RangeIndex {
    /// The primary index (entries: primary key → row id).
    Primary,
    /// Secondary index number `n` (entries: value component ++ primary key → row id).
    Secondary(usize),
}

/// A range of one index in encoded-key form, walked a batch at a time.
pub(crate) struct KeyRange {
    index: RangeIndex,
    /// Where the next batch starts.
    from: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    done: bool,
}

/// The smallest byte string greater than every string that starts with `prefix`, or `None` if
/// there is none (the prefix is all 0xFF bytes).
fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut s = prefix.to_vec();
    while let Some(last) = s.pop() {
        if last != 0xFF {
            s.push(last + 1);
            return Some(s);
        }
    }
    None
}

impl KeyRange {
    /// The primary key in index entry `k` (a secondary entry is its value component followed
    /// by the primary key).
    fn primary_key<'k>(&self, table: &Table, k: &'k [u8]) -> Result<&'k [u8]> {
        let RangeIndex::Secondary(n) = self.index else { return Ok(k) };
        let s = &table.inner.schema;
        let ix = &s.indexes[n];
        s.secondary_value_len(ix.column, k).and_then(|len| k.get(len..)).ok_or_else(|| Error::Corruption {
            file: super::files::index_name(table.inner.id),
            offset: 0,
            detail: format!("index `{}` of `{}` holds a malformed entry", ix.name, table.inner.name),
        })
    }

    fn tree<'t>(&self, table: &'t Table) -> &'t crate::btree::BTree {
        match self.index {
            RangeIndex::Primary => &table.inner.primary,
            RangeIndex::Secondary(n) => &table.inner.secondaries[n],
        }
    }

    /// The next at most `max` primary keys of the range, in index order (empty when the range
    /// is exhausted), as a committed walk ([`KeyRange::for_each_committed`]) finds them for
    /// transaction `me`: a key another transaction has in flight is among them where its
    /// before-image puts it (a row whose delete is in flight too, so that a locking scan waits
    /// for that delete and does not pass over the row as if it were already gone), and a key it
    /// inserts is not. No latch is held on return.
    pub(crate) fn next_batch(
        &mut self,
        table: &Table,
        me: Option<u64>,
        max: usize,
        out: &mut KeyBatch,
    ) -> Result<()> {
        out.clear();
        if self.done || max == 0 {
            return Ok(());
        }
        let mut last: Option<Vec<u8>> = None;
        self.walk_committed(table, me, |ik, pk, _| {
            out.push(pk, pk);
            if out.len() == max {
                last = Some(ik.to_vec());
            }
            Ok(out.len() < max)
        })?;
        match last {
            Some(k) => self.from = Bound::Excluded(k),
            None => self.done = true,
        }
        Ok(())
    }
}

/// A batch of `(index key, primary key)` pairs in one buffer, reused from batch to batch: a
/// scan allocates nothing per key it collects.
#[derive(Debug, Default)]
pub(crate) struct KeyBatch {
    bytes: Vec<u8>,
    /// Per pair, where its keys lie in `bytes`: the index key `start..split`, the primary key
    /// `split..end`; `split == start` when the index key is the primary key (a primary range),
    /// which is then stored once.
    pairs: Vec<(usize, usize, usize)>,
}

impl KeyBatch {
    fn clear(&mut self) {
        self.bytes.clear();
        self.pairs.clear();
    }

    fn push(&mut self, ik: &[u8], pk: &[u8]) {
        let start = self.bytes.len();
        if ik != pk {
            self.bytes.extend_from_slice(ik);
        }
        let split = self.bytes.len();
        self.bytes.extend_from_slice(pk);
        self.pairs.push((start, split, self.bytes.len()));
    }

    /// Pairs in the batch.
    pub(crate) fn len(&self) -> usize {
        self.pairs.len()
    }

    /// True when the batch holds no pair (the range is exhausted).
    pub(crate) fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// Pair `i`: (index key, primary key).
    pub(crate) fn get(&self, i: usize) -> (&[u8], &[u8]) {
        let (start, split, end) = self.pairs[i];
        let pk = &self.bytes[split..end];
        (if split == start { pk } else { &self.bytes[start..split] }, pk)
    }
}

/// What a serializable scan adds to a committed walk: its key-range lock, raised under each
/// leaf's latch to the end of the keys it is about to read, and the entries of keys other
/// transactions have in flight with no committed image at that position (new entries), so
/// the scan waits for their writers (see `txn::lock_range`).
#[derive(Clone, Copy)]
pub(crate) struct Serial<'a> {
    /// The lock manager the range lock lives in.
    pub(crate) locks: &'a LockManager,
    /// The scan's range lock.
    pub(crate) cover: &'a RangeCover,
}

impl KeyRange {
    /// The index of the range as the lock manager's range locks name it (0: primary,
    /// `n + 1`: secondary `n`) and where the next batch starts.
    pub(crate) fn lock_space(&self) -> (u32, Bound<&[u8]>) {
        let index = match self.index {
            RangeIndex::Primary => 0,
            RangeIndex::Secondary(n) => n as u32 + 1,
        };
        (index, self.from.as_ref().map(Vec::as_slice))
    }

    /// The next batch of a serializable scan: `(index key, primary key)` pairs, at least `max`
    /// unless the range ends, always up to the end of a leaf visit (the range lock covers the
    /// keys the batch's leaves were read up to, and no later batch reads them again); keys in
    /// flight are passed at their committed and at their new positions ([`Serial`]).
    pub(crate) fn next_batch_serial(
        &mut self,
        table: &Table,
        me: u64,
        max: usize,
        serial: Serial<'_>,
        out: &mut KeyBatch,
    ) -> Result<()> {
        out.clear();
        if self.done {
            return Ok(());
        }
        let leaf_end: RefCell<Option<Vec<u8>>> = RefCell::new(None);
        let mut stopped = false;
        self.walk(table, Some(me), Some((serial, &leaf_end)), |ik, pk, _| {
            out.push(ik, pk);
            stopped = out.len() >= max && leaf_end.borrow().as_deref() == Some(ik);
            Ok(!stopped)
        })?;
        match out.len().checked_sub(1) {
            Some(last) if stopped => self.from = Bound::Excluded(out.get(last).0.to_vec()),
            _ => self.done = true,
        }
        Ok(())
    }
}

/// What a committed walk ([`KeyRange::for_each_committed`]) found for one key.
pub(crate) enum Found<'a> {
    /// The key's last committed row, published by the writer that has it in flight.
    Image(&'a [u8]),
    /// The index entry's row id: no other writer had the key in flight when its leaf was
    /// latched; the row is read (as committed) from there.
    Entry(RowId),
}

/// The keys in flight that one leaf visit merges (see [`KeyRange::for_each_committed`]).
#[derive(Default)]
struct InFlightHere {
    /// Primary keys another transaction has in flight, sorted: their entries are skipped.
    keys: Vec<Box<[u8]>>,
    /// The before-images that lie within the visit's interval: (index key, row), sorted.
    images: Vec<(Vec<u8>, Arc<[u8]>)>,
}

impl KeyRange {
    /// Calls `f(primary key, found)` once for every key of the range that was committed when
    /// the walk passed it, in index order, until `f` returns `Ok(false)`; no latch is held
    /// while `f` runs. Transaction `me` (if any) sees its own changes.
    ///
    /// Under each leaf's latch the keys that other transactions have in flight are merged in:
    /// their entries are skipped and their before-images (the rows as last committed) are
    /// passed at the index position those rows have. A writer publishes the image before its
    /// first page change and withdraws it only once committed or rolled back, under the key's
    /// exclusive lock, so under the latch the leaf and the image set agree: a key in flight
    /// shows as its image, whatever its entries are at that moment (a delete that took the
    /// entry out, an insert that put one in, an update that added the new entry and has not
    /// yet removed the old one, a rollback half-way); a key not in flight shows as its entry,
    /// which is then committed (its writer finished before the latch was taken). Successive
    /// leaf visits tile the range ([`crate::btree::BTree::range_visits`]), so each key is
    /// decided exactly once, by the one visit whose interval holds it.
    pub(crate) fn for_each_committed(
        &self,
        table: &Table,
        me: Option<u64>,
        mut f: impl FnMut(&[u8], Found<'_>) -> Result<bool>,
    ) -> Result<()> {
        self.walk_committed(table, me, |_, pk, found| f(pk, found))
    }

    /// [`KeyRange::for_each_committed`], passing each key's index key (where the walk is) before
    /// its primary key.
    fn walk_committed(
        &self,
        table: &Table,
        me: Option<u64>,
        f: impl FnMut(&[u8], &[u8], Found<'_>) -> Result<bool>,
    ) -> Result<()> {
        self.walk(table, me, None, f)
    }

    /// [`KeyRange::walk_committed`], for a serializable scan with `serial` (which also records
    /// the last key of each leaf visit, `None` for the range's last visit).
    fn walk(
        &self,
        table: &Table,
        me: Option<u64>,
        serial: Option<(Serial<'_>, &RefCell<Option<Vec<u8>>>)>,
        mut f: impl FnMut(&[u8], &[u8], Found<'_>) -> Result<bool>,
    ) -> Result<()> {
        if self.done {
            return Ok(());
        }
        let (id, pending) = (table.inner.id, &table.inner.txn.pending);
        let s = &table.inner.schema;
        let (from, hi) = (self.from.as_ref().map(Vec::as_slice), self.hi.as_ref().map(Vec::as_slice));
        let mut found: Vec<(Box<[u8]>, BeforeImage)> = Vec::new();
        self.tree(table).range_visits(
            from,
            hi,
            |lo, upto| {
                if let Some((sr, leaf_end)) = serial {
                    // Under the leaf's latch, before its keys are read.
                    sr.locks.cover_range(sr.cover, upto);
                    *leaf_end.borrow_mut() = match upto {
                        Bound::Included(k) => Some(k.to_vec()),
                        _ => None,
                    };
                }
                let mut here = InFlightHere::default();
                if !pending.any_in_flight(id) {
                    return Ok(here);
                }
                found.clear();
                match self.index {
                    RangeIndex::Primary => {
                        pending.images_in(id, lo, upto, me, &mut found);
                        for (pk, image) in found.drain(..) {
                            if let Some(row) = image {
                                here.images.push((pk.to_vec(), row));
                            }
                            here.keys.push(pk);
                        }
                    }
                    RangeIndex::Secondary(n) => {
                        // Images are by primary key: each one's entry in this index is
                        // computed from its row.
                        let col = s.indexes[n].column;
                        pending.images_in(id, Bound::Unbounded, Bound::Unbounded, me, &mut found);
                        for (pk, image) in found.drain(..) {
                            if let Some(row) = image {
                                let v = RowView::new(s, &row).try_value(col)?;
                                let k = s.secondary_key_bytes(col, &v, &pk);
                                if crate::txn::pending::in_interval(lo, upto, &k) {
                                    here.images.push((k, row));
                                }
                            }
                            here.keys.push(pk);
                        }
                        here.images.sort_unstable_by(|a, b| a.0.cmp(&b.0));
                    }
                }
                Ok(here)
            },
            |entries, here| {
                let mut images = here.images.iter().peekable();
                for (k, v) in entries.iter() {
                    while let Some((ik, row)) = images.next_if(|(ik, _)| ik.as_slice() < k) {
                        if !f(ik, self.primary_key(table, ik)?, Found::Image(row))? {
                            return Ok(false);
                        }
                    }
                    let pk = self.primary_key(table, k)?;
                    if here.keys.binary_search_by(|p| (**p).cmp(pk)).is_ok()
                        && (serial.is_none()
                            || here.images.binary_search_by(|(ik, _)| ik.as_slice().cmp(k)).is_ok())
                    {
                        continue; // in flight: its image (if any) stands for it
                    }
                    let rid = RowId::from_bytes(v).ok_or_else(|| self.malformed(table))?;
                    if !f(k, pk, Found::Entry(rid))? {
                        return Ok(false);
                    }
                }
                for (ik, row) in images {
                    if !f(ik, self.primary_key(table, ik)?, Found::Image(row))? {
                        return Ok(false);
                    }
                }
                Ok(true)
            },
        )
    }

    fn malformed(&self, table: &Table) -> Error {
        Error::Corruption {
            file: super::files::index_name(table.inner.id),
            offset: 0,
            detail: format!("an index of `{}` holds a malformed row id", table.inner.name),
        }
    }
}

impl Table {
    /// The primary-key range `lo..hi` (by value) in encoded form.
    pub(crate) fn primary_range(&self, lo: Bound<&Value>, hi: Bound<&Value>) -> Result<KeyRange> {
        let enc = |b: Bound<&Value>| -> Result<Bound<Vec<u8>>> {
            Ok(match b {
                Bound::Included(v) => Bound::Included(self.pk_bytes(v)?),
                Bound::Excluded(v) => Bound::Excluded(self.pk_bytes(v)?),
                Bound::Unbounded => Bound::Unbounded,
            })
        };
        Ok(KeyRange { index: RangeIndex::Primary, from: enc(lo)?, hi: enc(hi)?, done: false })
    }

    /// Position of the secondary index called `index`.
    pub(crate) fn index_position(&self, index: &str) -> Result<usize> {
        self.inner
            .schema
            .indexes
            .iter()
            .position(|ix| ix.name == index)
            .ok_or_else(|| Error::NotFound(format!("index `{index}` on table `{}`", self.inner.name)))
    }

    /// The entries of secondary index `pos` whose value lies in `lo..hi`, in encoded form.
    /// Every entry of value `v` starts with `v`'s component, so value bounds become bounds on
    /// that prefix: the first key with a prefix, or the successor of all keys with it.
    pub(crate) fn secondary_range(
        &self,
        pos: usize,
        lo: Bound<&Value>,
        hi: Bound<&Value>,
    ) -> Result<KeyRange> {
        let s = &self.inner.schema;
        let column = s.indexes[pos].column;
        let prefix = |v: &Value| -> Result<Vec<u8>> {
            s.check_value(&self.inner.name, column, v)?;
            let mut p = Vec::new();
            s.secondary_prefix(column, v, &mut p);
            Ok(p)
        };
        let from = match lo {
            Bound::Included(v) => Bound::Included(prefix(v)?),
            Bound::Excluded(v) => match prefix_successor(&prefix(v)?) {
                Some(s) => Bound::Included(s),
                None => return Ok(KeyRange::empty(pos)),
            },
            Bound::Unbounded => Bound::Unbounded,
        };
        let hi = match hi {
            Bound::Included(v) => prefix_successor(&prefix(v)?).map_or(Bound::Unbounded, Bound::Excluded),
            Bound::Excluded(v) => Bound::Excluded(prefix(v)?),
            Bound::Unbounded => Bound::Unbounded,
        };
        Ok(KeyRange { index: RangeIndex::Secondary(pos), from, hi, done: false })
    }

    /// True if row `row`'s value in the column of secondary index `pos` lies in `lo..hi` (a row
    /// found through the index may have changed before its lock was granted).
    pub(crate) fn row_in_index_range(
        &self,
        pos: usize,
        row: &RowView<'_>,
        lo: Bound<&Value>,
        hi: Bound<&Value>,
    ) -> bool {
        let v = row.value(self.inner.schema.indexes[pos].column);
        (lo, hi).contains(&&v)
    }
}

impl Table {
    /// Encoded primary keys of the rows whose primary key lies within the bounds, in key
    /// order, until `f` returns `Ok(false)`. Only the index is read (no rows, no locks): the
    /// caller reads each row with [`Table::read_encoded`] or in a transaction. Exact like
    /// [`Table::range`]: each key committed when the walk passes it is passed once (one whose
    /// delete is in flight included), no key another transaction is inserting is passed.
    pub fn primary_keys(
        &self,
        lo: Bound<&Value>,
        hi: Bound<&Value>,
        f: impl FnMut(&[u8]) -> Result<bool>,
    ) -> Result<()> {
        self.check_poisoned()?;
        self.inner.txn.check_open()?;
        let mut f = f;
        self.acknowledged(self.primary_range(lo, hi)?.for_each_committed(self, None, |pk, _| f(pk)))
    }

    /// Encoded primary keys of the rows whose value in the column of secondary index `index`
    /// (its position in the schema) lies within the bounds, in index order (NULLs last), until
    /// `f` returns `Ok(false)`. Only the index is read; the caller reads the rows (and
    /// re-checks the value: a row may change after its entry was read). Each entry committed
    /// when the walk passes it is passed once (a key with a change in flight at the position
    /// of its committed value); a row whose indexed value a transaction commits a change of
    /// while the walk runs may be passed at both values or at neither.
    pub fn index_keys(
        &self,
        index: usize,
        lo: Bound<&Value>,
        hi: Bound<&Value>,
        f: impl FnMut(&[u8]) -> Result<bool>,
    ) -> Result<()> {
        self.check_poisoned()?;
        if index >= self.inner.schema.indexes.len() {
            return Err(Error::NotFound(format!("index number {index} on table `{}`", self.inner.name)));
        }
        self.inner.txn.check_open()?;
        let mut f = f;
        self.acknowledged(self.secondary_range(index, lo, hi)?.for_each_committed(self, None, |pk, _| f(pk)))
    }

    /// Full table scan, in primary-key order, until `f` returns `Ok(false)`: exactly
    /// [`Table::range`] over every key. Each row committed when the scan passes its key is
    /// passed once, as last committed; the scan takes no lock and never waits for a writer
    /// (see the module documentation). `f` may modify the table (no latch is held while it
    /// runs), but rows it changes may be seen again under their new keys.
    pub fn scan(&self, f: impl FnMut(RowView<'_>) -> Result<bool>) -> Result<()> {
        self.range(Bound::Unbounded, Bound::Unbounded, f)
    }

    /// Runs `f` on the committed image of each row that a heap-order scan passes (see
    /// `read_committed`):
    /// checked under the page latch, the row itself while no other writer of its key is in
    /// flight, else the key's before-image (nothing for an insert in flight).
    fn scan_committed(
        &self,
        scan: impl FnOnce(&mut dyn FnMut(RowId, &[u8]) -> Result<bool>) -> Result<()>,
        mut f: impl FnMut(RowView<'_>) -> Result<bool>,
    ) -> Result<()> {
        let s = &self.inner.schema;
        let (table, pending) = (self.inner.id, &self.inner.txn.pending);
        let mut key = Vec::with_capacity(16);
        scan(&mut |_, b| {
            let v = self.view(b);
            // Under the page latch: no writer of this table in flight means every change the
            // page shows is committed (writers enter before their first page change), so the
            // row is passed without encoding its key.
            if !pending.any_in_flight(table) {
                return f(v);
            }
            key.clear();
            s.try_primary_key_of(&v, &mut key)?;
            // Under the page latch: a writer that changed this row entered its stripe first.
            let stripe = PendingWriters::stripe(table, &key);
            if !PendingWriters::idle(pending.load(stripe)) {
                if let Some(image) = pending.before_image(stripe, table, &key, None) {
                    return image.map_or(Ok(true), |row| f(self.view(&row)));
                }
            }
            f(v)
        })
    }

    /// Part `part` of `parts` of a full scan: a contiguous share of the heap pages, so `parts`
    /// threads together scan the table once (seed 004's parallel scan). The row's page is
    /// latched while `f` runs: `f` must not modify this table.
    ///
    /// Isolation: each row passed is committed (a row with a change in flight is passed as
    /// its before-image, a row inserted by a transaction in flight is skipped), but in heap
    /// order a row that moves while the scan runs (an update that grows it, a delete or its
    /// rollback) may be passed twice or missed: for an exact scan under concurrent writers use
    /// [`Table::scan`] or [`Table::range`], which go in key order.
    pub fn scan_partition(
        &self,
        part: usize,
        parts: usize,
        f: impl FnMut(RowView<'_>) -> Result<bool>,
    ) -> Result<()> {
        self.scan_partition_ahead(part, parts, super::heap::READ_AHEAD_PAGES, f)
    }

    /// Like [`Table::scan_partition`], keeping `read_ahead` page reads in flight ahead of the
    /// page being processed (the I/O depth of one scanning thread; at least 1, at most an eighth
    /// of the pool's frames, or of the thread's partition under SEP).
    pub fn scan_partition_ahead(
        &self,
        part: usize,
        parts: usize,
        read_ahead: u64,
        f: impl FnMut(RowView<'_>) -> Result<bool>,
    ) -> Result<()> {
        self.scan_partition_after(part, parts, read_ahead, || (), f)
    }

    /// Like [`Table::scan_partition_ahead`], first starting the reads of the partition's first
    /// read-ahead window and calling `before` while they are in flight: a parallel query's
    /// worker that must wait for the others, or build what its scan probes, before its scan
    /// starts keeps the device busy meanwhile. `before` is called exactly once: before the
    /// first row is passed, or, when the scan fails before that, before the error returns.
    pub fn scan_partition_after(
        &self,
        part: usize,
        parts: usize,
        read_ahead: u64,
        before: impl FnOnce(),
        f: impl FnMut(RowView<'_>) -> Result<bool>,
    ) -> Result<()> {
        let mut before = Some(before);
        let r = self.scan_partition_started(
            part,
            parts,
            read_ahead,
            &mut || {
                if let Some(b) = before.take() {
                    b()
                }
            },
            f,
        );
        if let Some(b) = before {
            b()
        }
        r
    }

    /// The scan of [`Table::scan_partition_after`]: calls `started` once the partition's first
    /// reads are in flight, or not at all when it fails before that.
    fn scan_partition_started(
        &self,
        part: usize,
        parts: usize,
        read_ahead: u64,
        started: &mut dyn FnMut(),
        f: impl FnMut(RowView<'_>) -> Result<bool>,
    ) -> Result<()> {
        self.inner.txn.check_open()?;
        if parts == 0 || part >= parts {
            return Err(Error::InvalidArgument(format!("scan partition {part} of {parts}")));
        }
        let range = scan_partition_pages(self.inner.heap.pages()?, part, parts);
        let start = || {
            started();
            Ok(())
        };
        self.acknowledged(
            self.scan_committed(|visit| self.inner.heap.scan_pages_after(range, read_ahead, start, visit), f),
        )
    }

    /// Rows with primary key within the bounds, in key order, until `f` returns `Ok(false)`.
    /// Exact without locks or waiting: each row committed when the range passes its key is
    /// passed once, as last committed (its before-image while another transaction has a
    /// change of it in flight), and no uncommitted row is passed. Rows are read after their
    /// index leaf is released, so no latch is held while `f` runs.
    pub fn range(
        &self,
        lo: Bound<&Value>,
        hi: Bound<&Value>,
        mut f: impl FnMut(RowView<'_>) -> Result<bool>,
    ) -> Result<()> {
        self.check_poisoned()?;
        self.inner.txn.check_open()?;
        let walk = self.primary_range(lo, hi)?.for_each_committed(self, None, |pk, found| {
            Ok(self.read_found(pk, found, None, &mut f)?.transpose()?.unwrap_or(true))
        });
        self.acknowledged(walk)
    }

    /// All rows whose column indexed by `index` equals `value`, in primary-key order: the
    /// committed rows, each once, without a lock or a wait (a row with a change in flight as
    /// its before-image).
    pub fn lookup(&self, index: &str, value: &Value) -> Result<Vec<Vec<Value>>> {
        self.inner.txn.check_open()?;
        let s = &self.inner.schema;
        let pos = s
            .indexes
            .iter()
            .position(|ix| ix.name == index)
            .ok_or_else(|| Error::NotFound(format!("index `{index}` on table `{}`", self.inner.name)))?;
        let col = s.indexes[pos].column;
        let mut rows = Vec::new();
        let keys = self.secondary_range(pos, Bound::Included(value), Bound::Included(value))?;
        keys.for_each_committed(self, None, |pk, found| {
            // A row read through its entry may have changed since its leaf was read: keep it
            // only if it still has the value looked for.
            let row = self.read_found(pk, found, None, |r| match r.try_value(col) {
                Ok(v) if v == *value => Some(r.try_values()),
                Ok(_) => None,
                Err(e) => Some(Err(e)),
            })?;
            if let Some(Some(r)) = row {
                rows.push(r?);
            }
            Ok(true)
        })?;
        self.acknowledged(Ok(rows))
    }
}

/// The heap pages part `part` of `parts` of a partitioned scan reads
/// ([`Table::scan_partition`]) in a heap of `pages` pages: a contiguous share of
/// `pages.div_ceil(parts)` pages (the last part shorter, parts past the end empty). The parts
/// together cover every page once.
pub fn scan_partition_pages(pages: u64, part: usize, parts: usize) -> std::ops::Range<u64> {
    let per = pages.div_ceil(parts.max(1) as u64);
    let start = (part as u64 * per).min(pages);
    start..(start + per).min(pages)
}

impl KeyRange {
    fn empty(pos: usize) -> Self {
        KeyRange {
            index: RangeIndex::Secondary(pos),
            from: Bound::Unbounded,
            hi: Bound::Unbounded,
            done: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::prefix_successor;

    #[test]
    fn prefix_successor_bounds_every_extension() {
        assert_eq!(prefix_successor(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_successor(&[1, 0xFF, 0xFF]), Some(vec![2]));
        assert_eq!(prefix_successor(&[0xFF, 0xFF]), None);
        let p = [7u8, 0xFF];
        let s = prefix_successor(&p).unwrap();
        for ext in [&[][..], &[0], &[0xFF, 0xFF, 0xFF], &[1, 2, 3]] {
            let k: Vec<u8> = p.iter().chain(ext).copied().collect();
            assert!(k < s, "{k:?} < {s:?}");
        }
        assert!([8u8].as_slice() >= s.as_slice());
    }
}
