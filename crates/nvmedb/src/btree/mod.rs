//! B+tree indexes on buffer-pool pages.
//!
//! Owns: `BTree`, a map from byte-string keys to byte-string values (integer keys are encoded
//! order-preservingly by [`key`]). Lookups descend with shared latch coupling; modifications
//! first try optimistically (shared latches down to the leaf's parent, the leaf exclusive) and,
//! when a leaf must split, retry pessimistically holding exclusive latches from the deepest
//! node that cannot split downwards (`split.rs`). The root page never moves (a root split moves its entries
//! into two new children), so a tree is named by its root page for its whole life.
//!
//! Invariants: latches are taken top-down, and across leaves only left to right, so latching
//! cannot deadlock; keys in every node strictly increase; every key in a subtree lies within
//! the separator keys of its parent; all leaves are at level 0 and linked left to right.
//! Deletion does not merge nodes (underfull nodes are allowed, as in many production trees).

pub mod build;
pub mod key;
pub mod node;
mod redo;
mod split;

use crate::buffer::{BufferPool, PageClass, PageId, PageMut, PageRef};
use crate::error::{Error, Result};
use crate::page::{PageHeader, PageType};
use node::NO_PAGE;
pub use redo::apply_page_ops;

/// Inserts `(k, v)` at position `i` of a leaf, logged as the node operation.
fn insert_logged(leaf: &mut PageMut<'_>, i: usize, k: &[u8], v: &[u8]) {
    leaf.change_logged(|p| node::insert_at(p, i, k, v), |_, out| node::op::insert(out, i, k, v));
}

/// Removes the entry at position `i` of a leaf, logged as the node operation.
fn remove_logged(leaf: &mut PageMut<'_>, i: usize) {
    leaf.change_logged(|p| node::remove_at(p, i), |_, out| node::op::remove(out, i));
}
use std::ops::Bound;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::Arc;

/// A B+tree stored in file `file` of a buffer pool, rooted at page `root`.
pub struct BTree {
    pool: Arc<BufferPool>,
    file: u32,
    root: u64,
    /// Length of a value a lookup found (0: none yet): lets a descent guess where a leaf
    /// entry lies (see [`node::likely_offsets`]). A hint only, set once.
    value_len_hint: AtomicU32,
}

impl Clone for BTree {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            file: self.file,
            root: self.root,
            value_len_hint: AtomicU32::new(self.value_len_hint.load(Relaxed)),
        }
    }
}

impl std::fmt::Debug for BTree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BTree {{ file: {}, root: {} }}", self.file, self.root)
    }
}

/// Where [`BTree::locate_leaves`] found a key's leaf (or, inside it, a node on the way): its
/// page number and the key bounds its parent gave. A hint: the tree may have changed since.
#[derive(Debug, Clone, Copy)]
pub struct LeafHint {
    page: u64,
    bounds: Option<(u64, u64)>,
}

/// Result of [`BTree::check`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TreeShape {
    /// Entries in leaves.
    pub entries: u64,
    /// Levels (1 = the root is a leaf).
    pub height: usize,
    /// Leaf pages.
    pub leaves: u64,
    /// Inner pages.
    pub inner: u64,
}

enum LeafOutcome<R> {
    Done(R),
    NeedsSplit,
}

impl BTree {
    /// Creates an empty tree (allocates its root leaf) in `file`.
    pub fn create(pool: Arc<BufferPool>, file: u32) -> Result<Self> {
        let mut root = pool.allocate(file, PageClass::Index, PageType::BtreeLeaf)?;
        node::init(&mut root, 0, NO_PAGE);
        let root_no = root.page_id().page;
        drop(root);
        Ok(Self { pool, file, root: root_no, value_len_hint: AtomicU32::new(0) })
    }

    /// Opens an existing tree.
    pub fn open(pool: Arc<BufferPool>, file: u32, root: u64) -> Self {
        Self { pool, file, root, value_len_hint: AtomicU32::new(0) }
    }

    /// Root page number.
    pub fn root(&self) -> u64 {
        self.root
    }

    /// Largest key + value an entry may have.
    pub fn max_entry_bytes(&self) -> usize {
        node::max_entry_payload(self.pool.page_size())
    }

    fn pid(&self, page: u64) -> PageId {
        PageId::new(self.file, page)
    }

    fn corrupt(&self, page: u64, detail: impl Into<String>) -> Error {
        Error::Corruption {
            file: format!("index file {}", self.file),
            offset: page * self.pool.page_size() as u64,
            detail: format!("B+tree page {page}: {}", detail.into()),
        }
    }

    fn check_node(&self, page: u64, bytes: &[u8]) -> Result<()> {
        match PageHeader::page_type_of(bytes) {
            Some(PageType::BtreeLeaf) if node::is_leaf(bytes) => Ok(()),
            Some(PageType::BtreeInner) if !node::is_leaf(bytes) => Ok(()),
            other => Err(self
                .corrupt(page, format!("not a B+tree node (type {other:?}, level {})", node::level(bytes)))),
        }
    }

    fn check_entry(&self, key: &[u8], value: &[u8]) -> Result<()> {
        check_entry_size(self.pool.page_size(), key, value)
    }

    fn fix(&self, page: u64) -> Result<PageRef<'_>> {
        let g = self.pool.fix(self.pid(page), PageClass::Index)?;
        self.check_node(page, &g)?;
        Ok(g)
    }

    fn fix_mut(&self, page: u64) -> Result<PageMut<'_>> {
        let g = self.pool.fix_mut(self.pid(page), PageClass::Index)?;
        self.check_node(page, &g)?;
        Ok(g)
    }

    /// Descends with shared latch coupling to the leaf covering `key` (`None`: leftmost).
    fn find_leaf(&self, key: Option<&[u8]>) -> Result<PageRef<'_>> {
        match key {
            Some(k) => self.find_leaf_bounded(k).map(|(leaf, _)| leaf),
            None => {
                let mut g = self.fix(self.root)?;
                while !node::is_leaf(&g) {
                    let child = node::link(&g);
                    g = self.fix_child(&g, child, &[0])?;
                }
                Ok(g)
            }
        }
    }

    /// Descends to the leaf covering `key`, also returning the separator heads that bound the
    /// leaf's keys (see [`node::child_for_bounded`]). On the way down, each child's header line
    /// is prefetched with the slot a dense-key search of it will probably start at, so that
    /// the two memory latencies overlap.
    fn find_leaf_bounded(&self, key: &[u8]) -> Result<(PageRef<'_>, Option<(u64, u64)>)> {
        let mut g = self.fix(self.root)?;
        let mut bounds = None;
        while !node::is_leaf(&g) {
            let (child, b) = node::child_for_bounded(&g, key, bounds);
            bounds = b;
            let (lines, n) = self.child_lines(&g, key, bounds);
            g = self.fix_child(&g, child, &lines[..n])?;
        }
        Ok((g, bounds))
    }

    /// Descends the inner nodes towards each of a batch of keys, prefetches the cache lines of
    /// the leaf that a lookup of the key will read (its frame, header and, for dense keys, the
    /// slot and entry) without waiting for them, and gives that leaf's page number with the key
    /// bounds its parent gives (see [`node::child_for_bounded`]). A batch of lookups calls this
    /// first, so that the leaves' memory latencies overlap, then [`BTree::get_in_leaf_with`]
    /// for each key. The tree may change in between (the hints are hints).
    ///
    /// Visits `keys[j]` for each `j` of `order` in turn and sets `out[j]` (`None` for every key
    /// if the root is a leaf). The inner nodes on the path of the last key stay latched
    /// (shared, top-down as in any descent) while the next key is placed, so keys that share
    /// an inner node fix it once: with `order` sorting the keys, a batch fixes each inner node
    /// it needs once instead of once per key.
    pub fn locate_leaves(&self, keys: &[&[u8]], order: &[usize], out: &mut [Option<LeafHint>]) -> Result<()> {
        let root = self.fix(self.root)?;
        if node::is_leaf(&root) {
            for &j in order {
                out[j] = None;
            }
            return Ok(());
        }
        // The latched path: each node's guard, with its page number and the bounds its parent
        // gave.
        let mut path: Vec<(PageRef<'_>, LeafHint)> = Vec::with_capacity(4);
        path.push((root, LeafHint { page: self.root, bounds: None }));
        for &j in order {
            let key = keys[j];
            let mut d = 0;
            loop {
                let (g, at) = &path[d];
                let (child, b) = node::child_for_bounded(g, key, at.bounds);
                let (lines, n) = self.child_lines(g, key, b);
                if node::level(g) == 1 {
                    self.pool.prefetch_lines(self.pid(child), &lines[..n]);
                    out[j] = Some(LeafHint { page: child, bounds: b });
                    break;
                }
                // The same child as the previous key's: it is still latched.
                if path.get(d + 1).is_some_and(|(_, at)| at.page == child) {
                    d += 1;
                    continue;
                }
                path.truncate(d + 1);
                let next = self.fix_child(&path[d].0, child, &lines[..n])?;
                path.push((next, LeafHint { page: child, bounds: b }));
                d += 1;
            }
        }
        Ok(())
    }

    /// Looks `key` up in the leaf [`BTree::locate_leaves`] gave, passing its value to `f`:
    /// `Some` if the leaf holds the key. Keys are unique and an entry lives in exactly one
    /// leaf, so a found entry is the key's current one even if the tree changed since; `None`
    /// (the key is not there, or the page is no longer a leaf) means only that the caller must
    /// look it up from the root with [`BTree::get_with`].
    pub fn get_in_leaf_with<R>(
        &self,
        hint: LeafHint,
        key: &[u8],
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>> {
        let leaf = self.pool.fix(self.pid(hint.page), PageClass::Index)?;
        if PageHeader::page_type_of(&leaf) != Some(PageType::BtreeLeaf) || !node::is_leaf(&leaf) {
            return Ok(None);
        }
        Ok(self.value_in_leaf(&leaf, key, hint.bounds, f))
    }

    /// Passes the value of `key` in `leaf` (keys bounded by `bounds`) to `f`, if the leaf holds
    /// it; the first value found sets the value-length hint (only once: no shared writes
    /// afterwards).
    fn value_in_leaf<R>(
        &self,
        leaf: &[u8],
        key: &[u8],
        bounds: Option<(u64, u64)>,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Option<R> {
        let i = node::search_bounded(leaf, key, bounds).ok()?;
        let v = node::value(leaf, i);
        if self.value_len_hint.load(Relaxed) == 0 {
            let _ = self.value_len_hint.compare_exchange(0, v.len() as u32, Relaxed, Relaxed);
        }
        Some(f(v))
    }

    /// The offsets in a child of inner node `parent` that a search for `key` will probably
    /// read (header, and for dense keys the slot and entry; see [`node::likely_offsets`]), as
    /// an array and the number used.
    fn child_lines(&self, parent: &[u8], key: &[u8], bounds: Option<(u64, u64)>) -> ([usize; 3], usize) {
        // Entries of inner nodes hold child numbers; a leaf's, values of the hinted length.
        let value_len = match node::level(parent) {
            1 => Some(self.value_len_hint.load(Relaxed) as usize).filter(|&v| v > 0),
            _ => Some(8),
        };
        match node::likely_offsets(self.pool.page_size(), key, bounds, value_len) {
            Some((slot, Some(entry))) => ([0, slot, entry], 3),
            Some((slot, None)) => ([0, slot, 0], 2),
            None => ([0; 3], 1),
        }
    }

    /// Fixes `child` of the inner node `parent`, checking that its level follows; `lines`:
    /// offsets to prefetch with it (see [`BufferPool::fix_prefetching`]).
    fn fix_child(&self, parent: &[u8], child: u64, lines: &[usize]) -> Result<PageRef<'_>> {
        let next = self.pool.fix_prefetching(self.pid(child), PageClass::Index, lines)?;
        self.check_node(child, &next)?;
        if node::level(&next) + 1 != node::level(parent) {
            return Err(self.corrupt(child, "child level does not follow its parent's"));
        }
        Ok(next)
    }

    /// Looks `key` up and passes its value to `f`.
    pub fn get_with<R>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>> {
        let (leaf, bounds) = self.find_leaf_bounded(key)?;
        Ok(self.value_in_leaf(&leaf, key, bounds, f))
    }

    /// Looks `key` up.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.get_with(key, |v| v.to_vec())
    }

    /// Runs `op` on the leaf covering `key`, latched exclusively. Optimistic path.
    fn with_leaf_mut<R>(
        &self,
        key: &[u8],
        op: &mut dyn FnMut(&mut PageMut<'_>) -> LeafOutcome<R>,
    ) -> Result<LeafOutcome<R>> {
        // One mini-transaction: the leaf's change is logged atomically (or rolled back).
        let mtr = self.pool.begin_mtr();
        let r = self.with_leaf_mut_inner(key, op)?;
        mtr.commit()?;
        Ok(r)
    }

    fn with_leaf_mut_inner<R>(
        &self,
        key: &[u8],
        op: &mut dyn FnMut(&mut PageMut<'_>) -> LeafOutcome<R>,
    ) -> Result<LeafOutcome<R>> {
        loop {
            let root = self.fix(self.root)?;
            if node::is_leaf(&root) {
                drop(root);
                let mut leaf = self.fix_mut(self.root)?;
                if !node::is_leaf(&leaf) {
                    continue; // the root split meanwhile
                }
                return Ok(op(&mut leaf));
            }
            let mut g = root;
            while node::level(&g) > 1 {
                let next = self.fix(node::child_for(&g, key))?;
                g = next;
            }
            let leaf_no = node::child_for(&g, key);
            let mut leaf = self.fix_mut(leaf_no)?;
            drop(g);
            if !node::is_leaf(&leaf) {
                return Err(self.corrupt(leaf_no, "expected a leaf below a level-1 node"));
            }
            return Ok(op(&mut leaf));
        }
    }

    /// Inserts `key` → `value` if `key` is absent. Returns false (tree unchanged) if present.
    pub fn insert(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.check_entry(key, value)?;
        let mut op = |leaf: &mut PageMut<'_>| match node::search(leaf, key) {
            Ok(_) => LeafOutcome::Done(false),
            Err(i) if node::fits(leaf, key, value) => {
                insert_logged(leaf, i, key, value);
                LeafOutcome::Done(true)
            }
            Err(_) => LeafOutcome::NeedsSplit,
        };
        match self.with_leaf_mut(key, &mut op)? {
            LeafOutcome::Done(r) => Ok(r),
            LeafOutcome::NeedsSplit => self.with_leaf_mut_splitting(key, &mut op),
        }
    }

    /// Sets `key` → `value`; returns the previous value.
    pub fn upsert(&self, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>> {
        self.check_entry(key, value)?;
        let mut op = |leaf: &mut PageMut<'_>| match node::search(leaf, key) {
            Ok(i) => {
                let old = node::value(leaf, i).to_vec();
                if old.len() == value.len() {
                    leaf.change_logged(
                        |p| node::overwrite_value(p, i, value),
                        |_, out| node::op::overwrite(out, i, value),
                    );
                    return LeafOutcome::Done(Some(old));
                }
                remove_logged(leaf, i);
                if node::fits(leaf, key, value) {
                    insert_logged(leaf, i, key, value);
                    LeafOutcome::Done(Some(old))
                } else {
                    insert_logged(leaf, i, key, &old);
                    LeafOutcome::NeedsSplit
                }
            }
            Err(i) if node::fits(leaf, key, value) => {
                insert_logged(leaf, i, key, value);
                LeafOutcome::Done(None)
            }
            Err(_) => LeafOutcome::NeedsSplit,
        };
        match self.with_leaf_mut(key, &mut op)? {
            LeafOutcome::Done(r) => Ok(r),
            LeafOutcome::NeedsSplit => self.with_leaf_mut_splitting(key, &mut op),
        }
    }

    /// Removes `key`; returns its value if it was present.
    pub fn delete(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut op = |leaf: &mut PageMut<'_>| match node::search(leaf, key) {
            Ok(i) => {
                let old = node::value(leaf, i).to_vec();
                remove_logged(leaf, i);
                LeafOutcome::Done(Some(old))
            }
            Err(_) => LeafOutcome::Done(None),
        };
        match self.with_leaf_mut(key, &mut op)? {
            LeafOutcome::Done(r) => Ok(r),
            LeafOutcome::NeedsSplit => unreachable!("delete never needs a split"),
        }
    }

    /// The largest key in the tree (`None` when it is empty): a descent along the rightmost
    /// children, or a scan when the rightmost leaf has been emptied by deletes.
    pub fn last_key(&self) -> Result<Option<Vec<u8>>> {
        let mut g = self.fix(self.root)?;
        while !node::is_leaf(&g) {
            let n = node::count(&g);
            let child = if n == 0 { node::link(&g) } else { node::child(&g, n - 1) };
            g = self.fix_child(&g, child, &[0])?;
        }
        let n = node::count(&g);
        if n > 0 {
            return Ok(Some(node::key(&g, n - 1).to_vec()));
        }
        drop(g);
        let mut last = None;
        self.range(Bound::Unbounded, Bound::Unbounded, |k, _| {
            last = Some(k.to_vec());
            Ok(true)
        })?;
        Ok(last)
    }

    /// Calls `f(key, value)` for every entry with `lo <= key <= hi` (per the bounds) in key
    /// order until `f` returns `Ok(false)`. No latch is held while `f` runs: entries are copied
    /// a leaf at a time and the next leaf is found by descending again from the last key seen.
    pub fn range(
        &self,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        mut f: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        self.range_visits(
            lo,
            hi,
            |_, _| Ok(()),
            |batch, ()| {
                for (k, v) in batch.iter() {
                    if !f(k, v)? {
                        return Ok(false);
                    }
                }
                Ok(true)
            },
        )
    }

    /// [`BTree::range`] a leaf visit at a time. Each visit copies the entries of one leaf (or
    /// of a run of empty leaves and the first non-empty one after them) and, while those
    /// leaves are still latched, calls `latched(from, upto)` with the key interval the visit
    /// accounts for: every key of the tree within it is among the visit's entries, and no
    /// writer can change that while `latched` runs. Then, with no latch held, `f(entries,
    /// latched's result)`, until it returns `Ok(false)`. The intervals of successive visits
    /// tile `lo..hi`: each begins just after the previous one's last entry, and the last ends
    /// at `hi`.
    pub fn range_visits<X>(
        &self,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        mut latched: impl FnMut(Bound<&[u8]>, Bound<&[u8]>) -> Result<X>,
        mut f: impl FnMut(&LeafEntries, X) -> Result<bool>,
    ) -> Result<()> {
        let mut from: Bound<Vec<u8>> = match lo {
            Bound::Included(k) => Bound::Included(k.to_vec()),
            Bound::Excluded(k) => Bound::Excluded(k.to_vec()),
            Bound::Unbounded => Bound::Unbounded,
        };
        let below_hi = |k: &[u8]| match hi {
            Bound::Included(h) => k <= h,
            Bound::Excluded(h) => k < h,
            Bound::Unbounded => true,
        };
        let mut batch = LeafEntries::default();
        // Empty leaves passed on the way to the visit's last leaf stay latched until
        // `latched` has run (latches go left to right only, so holding several is safe).
        let mut passed: Vec<PageRef<'_>> = Vec::new();
        loop {
            batch.clear();
            let mut leaf = match &from {
                Bound::Unbounded => self.find_leaf(None)?,
                Bound::Included(k) | Bound::Excluded(k) => self.find_leaf(Some(k))?,
            };
            let mut at_end = false;
            loop {
                let start = match &from {
                    Bound::Unbounded => 0,
                    Bound::Included(k) => node::search(&leaf, k).unwrap_or_else(|i| i),
                    Bound::Excluded(k) => node::search(&leaf, k).map_or_else(|i| i, |i| i + 1),
                };
                for i in start..node::count(&leaf) {
                    let k = node::key(&leaf, i);
                    if !below_hi(k) {
                        at_end = true;
                        break;
                    }
                    batch.push(k, node::value(&leaf, i));
                }
                let next = node::link(&leaf);
                if next == NO_PAGE {
                    at_end = true;
                }
                if at_end || !batch.is_empty() {
                    break;
                }
                // An empty leaf: move right (left-to-right coupling).
                let right = self.fix(next)?;
                passed.push(std::mem::replace(&mut leaf, right));
            }
            let upto = match batch.last() {
                Some((k, _)) if !at_end => Bound::Included(k),
                _ => hi,
            };
            let x = latched(from.as_ref().map(Vec::as_slice), upto)?;
            drop(leaf);
            passed.clear();
            if !f(&batch, x)? {
                return Ok(());
            }
            match batch.last() {
                Some((k, _)) if !at_end => from = Bound::Excluded(k.to_vec()),
                _ => return Ok(()),
            }
        }
    }

    /// Walks the whole tree and checks every structural invariant.
    pub fn check(&self) -> Result<TreeShape> {
        let mut shape = TreeShape::default();
        let root = self.fix(self.root)?;
        shape.height = node::level(&root) + 1;
        drop(root);
        self.check_subtree(self.root, None, None, &mut shape)?;
        // The leaf chain must visit every leaf in key order.
        let mut leaf = self.find_leaf(None)?;
        let mut seen = 0u64;
        let mut prev: Option<Vec<u8>> = None;
        loop {
            seen += node::count(&leaf) as u64;
            if let (Some(p), true) = (&prev, node::count(&leaf) > 0) {
                if node::key(&leaf, 0) <= p.as_slice() {
                    return Err(self.corrupt(leaf.page_id().page, "leaf chain out of key order"));
                }
            }
            if node::count(&leaf) > 0 {
                prev = Some(node::key(&leaf, node::count(&leaf) - 1).to_vec());
            }
            let next = node::link(&leaf);
            if next == NO_PAGE {
                break;
            }
            leaf = self.fix(next)?;
        }
        if seen != shape.entries {
            return Err(self.corrupt(
                self.root,
                format!("leaf chain holds {seen} entries, tree walk {}", shape.entries),
            ));
        }
        Ok(shape)
    }

    fn check_subtree(
        &self,
        page: u64,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        shape: &mut TreeShape,
    ) -> Result<usize> {
        let g = self.fix(page)?;
        node::check(&g).map_err(|e| self.corrupt(page, e))?;
        for i in 0..node::count(&g) {
            let k = node::key(&g, i);
            if lo.is_some_and(|l| k < l) || hi.is_some_and(|h| k >= h) {
                return Err(self.corrupt(page, format!("key {i} outside its parent's separators")));
            }
        }
        let level = node::level(&g);
        if level == 0 {
            shape.leaves += 1;
            shape.entries += node::count(&g) as u64;
            return Ok(0);
        }
        shape.inner += 1;
        let n = node::count(&g);
        let mut children = vec![(
            node::link(&g),
            lo.map(<[u8]>::to_vec),
            if n > 0 { Some(node::key(&g, 0).to_vec()) } else { hi.map(<[u8]>::to_vec) },
        )];
        for i in 0..n {
            let upper = if i + 1 < n { Some(node::key(&g, i + 1).to_vec()) } else { hi.map(<[u8]>::to_vec) };
            children.push((node::child(&g, i), Some(node::key(&g, i).to_vec()), upper));
        }
        drop(g);
        for (c, l, h) in children {
            let child_level = {
                let cg = self.fix(c)?;
                node::level(&cg)
            };
            if child_level + 1 != level {
                return Err(self.corrupt(c, format!("level {child_level} under a level-{level} node")));
            }
            self.check_subtree(c, l.as_deref(), h.as_deref(), shape)?;
        }
        Ok(level)
    }
}

/// Fails with `InvalidArgument` unless `key` is non-empty and the entry fits a node of
/// `page_size` bytes.
fn check_entry_size(page_size: usize, key: &[u8], value: &[u8]) -> Result<()> {
    let max = node::max_entry_payload(page_size);
    if key.len() + value.len() > max || key.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "index entry of {} key bytes + {} value bytes: keys must be non-empty and an entry at most \
             {max} bytes for {page_size}-byte index pages",
            key.len(),
            value.len(),
        )));
    }
    Ok(())
}

fn child_of(v: &[u8]) -> u64 {
    u64::from_le_bytes(v[..8].try_into().expect("8-byte child pointer"))
}

#[cfg(test)]
mod tests;

/// The entries one leaf visit of [`BTree::range_visits`] copied out, keys and values in one
/// buffer (two allocations per scan, reused from leaf to leaf, instead of two per entry).
#[derive(Default)]
pub struct LeafEntries {
    bytes: Vec<u8>,
    /// Per entry: where its key starts in `bytes`, its key's length, its value's length (the
    /// value follows the key).
    spans: Vec<(usize, usize, usize)>,
}

impl LeafEntries {
    fn clear(&mut self) {
        self.bytes.clear();
        self.spans.clear();
    }

    fn push(&mut self, key: &[u8], value: &[u8]) {
        self.spans.push((self.bytes.len(), key.len(), value.len()));
        self.bytes.extend_from_slice(key);
        self.bytes.extend_from_slice(value);
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// True if the visit copied no entry.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Entry `i` as (key, value).
    pub fn get(&self, i: usize) -> (&[u8], &[u8]) {
        let (at, k, v) = self.spans[i];
        (&self.bytes[at..at + k], &self.bytes[at + k..at + k + v])
    }

    /// The last entry, if any.
    pub fn last(&self) -> Option<(&[u8], &[u8])> {
        self.len().checked_sub(1).map(|i| self.get(i))
    }

    /// The entries in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }
}
