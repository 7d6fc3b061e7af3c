//! Point reads: [`Table::read`], [`Table::read_many`] and the transactions' reads.
//!
//! Owns: the lock-free committed read of one key (row-id hint, primary index, heap page,
//! before-images of writers in flight) and its batched form, which interleaves the lookups of
//! up to [`READ_BATCH`] keys and reads the heap pages they miss together (one device
//! submission for the batch). Invariants: a row is passed only if, under its page latch, it
//! holds the key asked for and the key's stripe of `PendingWriters` is idle (else the
//! writer's before-image is passed); an absence counts only when the stripe was idle and
//! unchanged across the lookup; a row-id hint is checked like any row id and never trusted;
//! a read is acknowledged only once every commit it can have seen is durable.

use super::locks::LockedRow;
use super::scan::Found;
use super::{files, ColumnType, RowId, RowView, Table, Value};
use crate::error::{Error, Result};
use crate::txn::PendingWriters;
use std::sync::Arc;

/// Keys whose lookups [`Table::read_many`] interleaves.
pub const READ_BATCH: usize = 16;
/// Attempts at following an index entry that a concurrent writer keeps moving.
const READ_RETRIES: usize = 10_000;

impl Table {
    /// Reads the row with primary key `key`, passing a zero-copy view to `f`. A key read before
    /// usually goes straight to its row's page, by the row-id hint its last read left (see
    /// [`Options::row_hint_bytes`](crate::Options::row_hint_bytes)); other keys descend the
    /// primary index.
    ///
    /// The read sees only committed data (read committed), takes no lock and never waits for
    /// a writer: when a transaction has the key's change in flight, the read sees the row as
    /// it was before that change (the before-image the writer published), until the change
    /// commits. A change committed with early lock release is seen once its commit record is
    /// logged; the read then returns only once that commit is durable. Once the database is
    /// closed it fails with [`Error::Closed`].
    pub fn read<R>(&self, key: &Value, f: impl FnOnce(RowView<'_>) -> R) -> Result<Option<R>> {
        self.check_poisoned()?;
        self.inner.txn.check_open()?;
        // Integer keys are encoded on the stack: a point read allocates nothing.
        let (int_pk, owned_pk);
        let pk: &[u8] = match key {
            Value::Int(x) if self.inner.schema.columns[self.inner.schema.primary_key].ty.is_integer() => {
                int_pk = crate::btree::key::encode_i64(*x);
                &int_pk
            }
            _ => {
                owned_pk = self.pk_bytes(key)?;
                &owned_pk
            }
        };
        self.acknowledged_key(pk, self.read_committed(pk, None, f))
    }

    /// [`Table::read`] by encoded primary key (as [`Table::primary_keys`] and
    /// [`Table::index_keys`] give them).
    pub fn read_encoded<R>(&self, pk: &[u8], f: impl FnOnce(RowView<'_>) -> R) -> Result<Option<R>> {
        self.check_poisoned()?;
        self.inner.txn.check_open()?;
        self.acknowledged_key(pk, self.read_committed(pk, None, f))
    }

    /// Reads a row inside read-committed transaction `txn`: as last committed, without a lock
    /// (`Table::read`), except that `txn` sees its own changes.
    pub(crate) fn txn_read_committed<R>(
        &self,
        txn: u64,
        key_bytes: &[u8],
        f: impl FnOnce(RowView<'_>) -> R,
    ) -> Result<Option<R>> {
        self.check_poisoned()?;
        self.read_committed(key_bytes, Some(txn), f)
    }

    /// Reads a row inside a transaction (the caller holds at least a shared lock on the key).
    pub(crate) fn txn_read<R>(
        &self,
        key_bytes: &[u8],
        f: impl FnOnce(RowView<'_>) -> R,
    ) -> Result<Option<R>> {
        self.check_poisoned()?;
        self.read_pk(key_bytes, f)
    }

    /// The committed row of `pk`, without a lock and without waiting (see
    /// [`PendingWriters`]): the row under its page latch while no writer of the key's stripe
    /// is in flight; else the key's before-image when another transaction has the key in
    /// flight; else (no writer of this key, or only transaction `me`, whose own changes it
    /// sees) the row the page holds.
    pub(super) fn read_committed<R>(
        &self,
        pk: &[u8],
        me: Option<u64>,
        f: impl FnOnce(RowView<'_>) -> R,
    ) -> Result<Option<R>> {
        let pending = &self.inner.txn.pending;
        let (table, stripe) = (self.inner.id, PendingWriters::stripe(self.inner.id, pk));
        let s = &self.inner.schema;
        let mut f = Some(f);
        let mut last = None;
        // Where the row was last found: tried first, and dropped for the index at any failure.
        let mut hint = self.inner.hints.get(pk);
        for _ in 0..READ_RETRIES {
            let before = pending.load(stripe);
            let located = match hint.take() {
                Some(rid) => Some((rid, true)),
                None => self.rid_for(pk)?.map(|rid| (rid, false)),
            };
            let Some((rid, hinted)) = located else {
                // No entry, and no writer entered or left meanwhile: a committed absence.
                if PendingWriters::idle(before) && pending.load(stripe) == before {
                    return Ok(None);
                }
                // Another writer has the key in flight (a delete, or an insert): its
                // before-image is the committed state. No image, and no writer entered or
                // left since the lookup began: the absence is committed. Else look again.
                match pending.before_image_at(stripe, table, pk, me) {
                    (Some(image), _) => {
                        return Ok(image.map(|row| {
                            (f.take().expect("called once"))(RowView::with_layout(
                                s,
                                &self.inner.layout,
                                &row,
                            ))
                        }))
                    }
                    (None, now) if now == before => return Ok(None),
                    (None, _) => {
                        std::thread::yield_now();
                        continue;
                    }
                }
            };
            let seen = self.inner.heap.read(rid, |b| {
                let v = self.view(b);
                if !self.has_pk(&v, pk)? {
                    return Ok(None);
                }
                // Under the page latch: a writer that changed this row entered first, so an
                // idle stripe, or no other writer of this key, means the row is committed.
                let f = f.take().expect("called once");
                if !PendingWriters::idle(pending.load(stripe)) {
                    if let Some(image) = pending.before_image(stripe, table, pk, me) {
                        return Ok(Some(image.map(|row| f(self.view(&row)))));
                    }
                }
                Ok::<_, Error>(Some(Some(f(v))))
            });
            match seen.and_then(|s| s.transpose()) {
                Ok(Some(Some(r))) => {
                    if !hinted {
                        self.inner.hints.put(pk, rid);
                    }
                    return Ok(r);
                }
                // A hint that failed in any way (the row moved or went, its page is no longer
                // this heap's): the index decides, at once.
                _ if hinted => continue,
                Err(e) => return Err(e),
                Ok(_) => {}
            }
            // The row moved or went since its entry was read: look again.
            last = Some(rid);
            std::thread::yield_now();
        }
        Err(match last {
            Some(rid) => self.dangling(rid),
            None => Error::ResourceExhausted(format!(
                "table `{}`: a read of a key found no row {READ_RETRIES} times while writers of its \
                 stripe kept entering and leaving; retry",
                self.inner.name
            )),
        })
    }

    /// Reads the rows of several primary keys: calls `f(i, row)` for each `keys[i]` in turn,
    /// with `None` for a key that has no row. Each read is exactly a [`Table::read`] (it sees
    /// only committed data); it is faster, because the lookups of up to [`READ_BATCH`] keys are
    /// interleaved so that their cache misses overlap: the index leaves of the keys without a
    /// row-id hint (see [`Options::row_hint_bytes`]) are located in one descent in key order
    /// (each inner node fixed once per batch) and prefetched, then every key's row (its cache
    /// lines if its page is in the buffer; the pages that are not are read from the device
    /// together, in one submission, so one thread keeps the batch's misses in flight at once),
    /// then the rows are read.
    ///
    /// [`Options::row_hint_bytes`]: crate::Options::row_hint_bytes
    ///
    /// ```
    /// # use nvmedb::{ColumnType, Database, Options, Schema, Value};
    /// # fn main() -> nvmedb::Result<()> {
    /// # let db = Database::open_with_storage(std::sync::Arc::new(nvmedb::io::MemStorage::new()), Options::default())?;
    /// let t = db.create_table("t", Schema::new(vec![("id", ColumnType::Int), ("v", ColumnType::Int)]))?;
    /// t.insert(&[Value::Int(1), Value::Int(10)])?;
    /// let mut got = vec![];
    /// t.read_many(&[Value::Int(1), Value::Int(2)], |i, row| got.push((i, row.map(|r| r.int(1)))))?;
    /// assert_eq!(got, [(0, Some(10)), (1, None)]);
    /// # Ok(()) }
    /// ```
    pub fn read_many(&self, keys: &[Value], f: impl FnMut(usize, Option<RowView<'_>>)) -> Result<()> {
        let released = self.read_many_staged(keys, f, &mut || {})?;
        self.inner.txn.wait_released_upto(released)
    }

    /// [`Table::read_many`], calling `between_stages` after each batch has located its leaves
    /// and before it reads them (tests change the table there). Returns the highest commit
    /// LSN released early by writers of the keys' stripes, loaded after the rows were seen:
    /// what the reads must wait for before they are acknowledged (see `acknowledged_key`).
    pub(super) fn read_many_staged(
        &self,
        keys: &[Value],
        mut f: impl FnMut(usize, Option<RowView<'_>>),
        between_stages: &mut dyn FnMut(),
    ) -> Result<u64> {
        let mut released = 0;
        self.inner.txn.check_open()?;
        self.check_poisoned()?;
        let pending = &self.inner.txn.pending;
        let mut pks = Vec::with_capacity(READ_BATCH * 8);
        let mut ends = [0usize; READ_BATCH];
        let mut rids = [None; READ_BATCH];
        let mut leaves = [None; READ_BATCH];
        // Each key's row-id hint, if any.
        let mut hinted = [None; READ_BATCH];
        let mut stripes = [0usize; READ_BATCH];
        // Each key's stripe value before its index lookup (`None`: a writer was in flight).
        let mut before = [None; READ_BATCH];
        for (b, batch) in keys.chunks(READ_BATCH).enumerate() {
            pks.clear();
            for (j, k) in batch.iter().enumerate() {
                match k {
                    Value::Int(x)
                        if self.inner.schema.columns[self.inner.schema.primary_key].ty.is_integer() =>
                    {
                        pks.extend_from_slice(&crate::btree::key::encode_i64(*x))
                    }
                    _ => pks.extend_from_slice(&self.pk_bytes(k)?),
                }
                ends[j] = pks.len();
            }
            let pk = |j: usize| &pks[if j == 0 { 0 } else { ends[j - 1] }..ends[j]];
            // 1. The leaves of all keys, in key order: one descent for the batch, each inner
            //    node fixed once.
            let n = batch.len();
            let mut keys: [&[u8]; READ_BATCH] = [&[]; READ_BATCH];
            for (j, k) in keys[..n].iter_mut().enumerate() {
                *k = pk(j);
                stripes[j] = PendingWriters::stripe(self.inner.id, k);
            }
            // Keys whose rows have a hint skip the index (stage 3 checks the hint like any row
            // id, and reads a key whose hint failed in full).
            let mut order = [0usize; READ_BATCH];
            let mut unhinted = 0;
            for j in 0..n {
                hinted[j] = self.inner.hints.get(keys[j]);
                if hinted[j].is_none() {
                    order[unhinted] = j;
                    unhinted += 1;
                }
            }
            order[..unhinted].sort_unstable_by_key(|&j| keys[j]);
            if unhinted > 0 {
                self.inner.primary.locate_leaves(&keys[..n], &order[..unhinted], &mut leaves[..n])?;
            }
            between_stages();
            // 2. The row ids, and a prefetch of every row: its cache lines if its page is
            //    resident, else the page itself, read with the batch's other misses in one
            //    submission below. A key with a writer in flight is left to stage 3's full read.
            let mut missing = [0u64; READ_BATCH];
            let mut misses = 0;
            for (j, (leaf, rid)) in leaves.iter().zip(rids.iter_mut()).take(batch.len()).enumerate() {
                let v = pending.load(stripes[j]);
                before[j] = PendingWriters::idle(v).then_some(v);
                *rid = None;
                if before[j].is_none() {
                    continue;
                }
                if let Some(r) = hinted[j] {
                    *rid = Some(r);
                    if !self.inner.heap.prefetch_row(r) {
                        missing[misses] = r.page;
                        misses += 1;
                    }
                    continue;
                }
                let in_leaf = match *leaf {
                    Some(hint) => self.inner.primary.get_in_leaf_with(hint, pk(j), RowId::from_bytes)?,
                    None => None,
                };
                *rid = match in_leaf {
                    Some(Some(found)) => Some(found),
                    // Not in that leaf (or the tree changed): from the root.
                    _ => self.rid_for(pk(j))?,
                };
                if let Some(r) = *rid {
                    if !self.inner.heap.prefetch_row(r) {
                        missing[misses] = r.page;
                        misses += 1;
                    }
                }
            }
            // The misses together: one thread keeps them all in flight (the device's
            // queue-depth rate) instead of waiting for each in turn in stage 3. Advice only: a
            // page it could not read (no free frame, an I/O error, a bad checksum) is read by
            // the fix that needs it, which reports the error.
            if misses > 1 {
                let _ = self.inner.heap.read_pages(&missing[..misses]);
            }
            // 3. The rows, each seen only if committed (see `read_located`).
            for j in 0..batch.len() {
                let i = b * READ_BATCH + j;
                let hinted = hinted[j].is_some();
                self.read_located(pk(j), stripes[j], before[j], rids[j], hinted, &mut |row| f(i, row))?;
            }
            for &s in &stripes[..batch.len()] {
                released = released.max(pending.released(s));
            }
        }
        Ok(released)
    }

    /// Stage 3 of [`Table::read_many_staged`] for one key: passes its row to `f` if it is
    /// committed (as `read_committed` checks), or `None` for a committed absence. `before`:
    /// the key's stripe value before its index lookup (`None`: a writer was in flight);
    /// `rid`: where the lookup (or the row-id hint, if `hinted`) found the row. A key that had
    /// a writer in flight, whose row moved since its entry was read, or whose absence a writer
    /// may have caused, is read again in full.
    fn read_located(
        &self,
        pk: &[u8],
        stripe: usize,
        before: Option<u64>,
        rid: Option<RowId>,
        hinted: bool,
        f: &mut impl FnMut(Option<RowView<'_>>),
    ) -> Result<()> {
        let pending = &self.inner.txn.pending;
        let done = match (before, rid) {
            (None, _) => false,
            (Some(v), None) => {
                let unchanged = pending.load(stripe) == v;
                if unchanged {
                    f(None);
                }
                unchanged
            }
            (Some(_), Some(rid)) => {
                let found = self.inner.heap.read(rid, |bytes| {
                    let v = self.view(bytes);
                    let ok = self.has_pk(&v, pk)? && PendingWriters::idle(pending.load(stripe));
                    if ok {
                        f(Some(v));
                    }
                    Ok::<_, Error>(ok)
                });
                match found.and_then(|r| r.transpose()) {
                    Ok(Some(true)) => {
                        if !hinted {
                            self.inner.hints.put(pk, rid);
                        }
                        true
                    }
                    // A failed hint: read in full below, through the index.
                    _ if hinted => false,
                    Err(e) => return Err(e),
                    Ok(_) => false,
                }
            }
        };
        if !done && self.read_committed(pk, None, |v| f(Some(v)))?.is_none() {
            f(None);
        }
        Ok(())
    }

    /// True if the row `v` has primary key `pk` (encoded); an error for a row that does not
    /// match the schema.
    pub(super) fn has_pk(&self, v: &RowView<'_>, pk: &[u8]) -> Result<bool> {
        let s = &self.inner.schema;
        Ok(match s.columns[s.primary_key].ty {
            ColumnType::Int
            | ColumnType::Int32
            | ColumnType::Int16
            | ColumnType::Timestamp
            | ColumnType::Date => crate::btree::key::encode_i64(v.try_int(s.primary_key)?) == pk,
            ColumnType::Char(_) | ColumnType::Bytes(_) | ColumnType::Text(_) => {
                v.try_bytes(s.primary_key)? == pk
            }
            _ => {
                let mut k = Vec::with_capacity(16);
                s.try_primary_key_of(v, &mut k)?;
                k == pk
            }
        })
    }

    /// Follows the row's hint, else the primary index, to the row and checks it is the row
    /// asked for. Readers take no key lock, so a writer may move or delete the row between the
    /// lookup and the heap read (and the slot may even hold another row by then): look again, a
    /// bounded number of times; a hint that fails is dropped for the index at once.
    pub(super) fn read_pk<R>(&self, pk: &[u8], f: impl FnOnce(RowView<'_>) -> R) -> Result<Option<R>> {
        self.read_pk_at(pk, |_, v| f(v))
    }

    /// [`Table::read_pk`], passing `f` the row's id too.
    fn read_pk_at<R>(&self, pk: &[u8], f: impl FnOnce(RowId, RowView<'_>) -> R) -> Result<Option<R>> {
        let mut f = Some(f);
        let mut last = None;
        let mut hint = self.inner.hints.get(pk);
        for _ in 0..READ_RETRIES {
            let (rid, hinted) = match hint.take() {
                Some(rid) => (rid, true),
                None => match self.rid_for(pk)? {
                    Some(rid) => (rid, false),
                    None => return Ok(None),
                },
            };
            let got = self.inner.heap.read(rid, |b| {
                let v = self.view(b);
                Ok::<_, Error>(self.has_pk(&v, pk)?.then(|| (f.take().expect("called once"))(rid, v)))
            });
            match got.and_then(|g| g.transpose()) {
                Ok(Some(Some(r))) => {
                    if !hinted {
                        self.inner.hints.put(pk, rid);
                    }
                    return Ok(Some(r));
                }
                _ if hinted => continue,
                Err(e) => return Err(e),
                Ok(_) => {}
            }
            last = Some(rid);
            std::thread::yield_now();
        }
        Err(self.dangling(last.expect("at least one attempt")))
    }

    /// [`Table::txn_read`] for a writer that holds the key's exclusive lock and is about to
    /// change the row: `f`'s result with the row's id and bytes ([`LockedRow`]), which the
    /// change then takes instead of looking for the row again.
    pub(crate) fn txn_read_locked<R>(
        &self,
        key_bytes: &[u8],
        f: impl FnOnce(RowView<'_>) -> R,
    ) -> Result<Option<(R, LockedRow)>> {
        self.check_poisoned()?;
        self.read_pk_at(key_bytes, |rid, v| {
            let row = Arc::from(v.raw());
            (f(v), LockedRow { rid, row })
        })
    }

    /// The row id and a copy of the row of key `pk`, for a writer that holds the key's
    /// physical lock (no other writer moves it meanwhile): through the row's hint when it
    /// holds the key, else the primary index. `None` if the key has no entry.
    pub(super) fn locate_for_change(&self, pk: &[u8]) -> Result<Option<(RowId, Vec<u8>)>> {
        if let Some(rid) = self.inner.hints.get(pk) {
            let got = self
                .inner
                .heap
                .read(rid, |b| Ok::<_, Error>(self.has_pk(&self.view(b), pk)?.then(|| b.to_vec())));
            if let Ok(Some(Ok(Some(row)))) = got {
                return Ok(Some((rid, row)));
            }
        }
        let Some(rid) = self.rid_for(pk)? else { return Ok(None) };
        let Some(row) = self.inner.heap.read(rid, |b| b.to_vec())? else { return Err(self.dangling(rid)) };
        self.inner.hints.put(pk, rid);
        Ok(Some((rid, row)))
    }

    /// The row with primary key `key`, decoded, as last committed (like [`Table::read`]); a
    /// row that does not match the schema is [`Error::Corruption`].
    pub fn get(&self, key: &Value) -> Result<Option<Vec<Value>>> {
        self.read(key, |r| r.try_values())?.transpose()
    }

    /// The committed row of key `pk` as a committed walk found it: its before-image, or the
    /// row its entry points at, read under the page latch while no writer of its stripe is in
    /// flight and the slot still holds the key (else as [`Table::read`] reads it).
    pub(super) fn read_found<R>(
        &self,
        pk: &[u8],
        found: Found<'_>,
        me: Option<u64>,
        f: impl FnOnce(RowView<'_>) -> R,
    ) -> Result<Option<R>> {
        let rid = match found {
            Found::Image(row) => return Ok(Some(f(self.view(row)))),
            Found::Entry(rid) => rid,
        };
        let pending = &self.inner.txn.pending;
        let stripe = PendingWriters::stripe(self.inner.id, pk);
        let mut f = Some(f);
        let fast = self.inner.heap.read(rid, |b| {
            let v = self.view(b);
            // Under the page latch: the key's row, and no writer of its stripe in flight.
            if self.has_pk(&v, pk)? && PendingWriters::idle(pending.load(stripe)) {
                return Ok(Some((f.take().expect("called once"))(v)));
            }
            Ok::<_, Error>(None)
        })?;
        if let Some(r) = fast.transpose()?.flatten() {
            return Ok(Some(r));
        }
        self.read_committed(pk, me, f.take().expect("not called"))
    }

    pub(super) fn rid_for(&self, pk: &[u8]) -> Result<Option<RowId>> {
        self.inner.primary.get_with(pk, RowId::from_bytes)?.map_or(Ok(None), |r| {
            r.map(Some).ok_or_else(|| Error::Corruption {
                file: files::index_name(self.inner.id),
                offset: 0,
                detail: format!("primary index of `{}` holds a malformed row id", self.inner.name),
            })
        })
    }

    pub(super) fn dangling(&self, rid: RowId) -> Error {
        Error::Corruption {
            file: files::heap_name(self.inner.id),
            offset: rid.page,
            detail: format!(
                "table `{}`: index points at empty slot {} of page {}",
                self.inner.name, rid.slot, rid.page
            ),
        }
    }
}
