//! Building a B+tree bottom-up from entries in key order (a bulk load).
//!
//! Owns: [`TreeBuilder`]. Entries are packed into leaf nodes left to right; each node is
//! composed in memory and written once, to a freshly allocated page, in a mini-transaction of
//! its own (so, with a log, each new page is logged whole, as its bytes over a zeroed page); a
//! leaf's right-sibling link is set in the mini-transaction that writes the next leaf. Every finished node hands its
//! first key and page number to the level above, which is built the same way; the one node of
//! the top level is the root.
//!
//! Invariants: keys strictly increase (checked: an out-of-order or repeated key is an error,
//! and nothing the builder wrote is reachable, since no root exists until
//! [`TreeBuilder::finish`]); nodes are filled to [`LEAF_FILL`] of their space (inner nodes
//! fully), so that later inserts into a loaded tree do not split every leaf at once.

use super::{node, BTree};
use crate::buffer::{BufferPool, PageClass, PageId};
use crate::error::{Error, Result};
use crate::page::header::{PAGE_HEADER_BYTES, PAGE_TRAILER_BYTES};
use crate::page::PageType;
use std::sync::Arc;

/// Fraction of a leaf's entry space a bulk load fills (like PostgreSQL's B-tree fillfactor 90).
pub const LEAF_FILL: f64 = 0.9;

/// One level being built: the node under construction and the page of the last node written.
struct Level {
    /// The node being filled (a whole page image; only its body is copied to the page).
    buf: Vec<u8>,
    /// The first key of the node in `buf` (`None`: the node is empty).
    first: Option<Vec<u8>>,
    /// Page of the previous node written at this level (a leaf's left sibling).
    prev: Option<u64>,
    /// Nodes written at this level.
    written: u64,
}

/// Builds a B+tree in `file` of an index pool from entries given in strictly increasing key
/// order. Nothing else may use the file's new pages until [`TreeBuilder::finish`] returns the
/// tree.
pub struct TreeBuilder {
    pool: Arc<BufferPool>,
    file: u32,
    levels: Vec<Level>,
    last: Option<Vec<u8>>,
    entries: u64,
    /// Free bytes a leaf keeps (the part [`LEAF_FILL`] leaves empty).
    leaf_reserve: usize,
}

impl std::fmt::Debug for TreeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TreeBuilder {{ file: {}, entries: {} }}", self.file, self.entries)
    }
}

impl TreeBuilder {
    /// Starts an empty tree in `file` of `pool`.
    pub fn new(pool: Arc<BufferPool>, file: u32) -> Self {
        let ps = pool.page_size();
        let leaf_reserve =
            ((ps - PAGE_HEADER_BYTES - PAGE_TRAILER_BYTES) as f64 * (1.0 - LEAF_FILL)) as usize;
        Self { pool, file, levels: Vec::new(), last: None, entries: 0, leaf_reserve }
    }

    /// Entries added so far.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// Appends an entry; `key` must be greater than every key added before.
    pub fn push(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        super::check_entry_size(self.pool.page_size(), key, value)?;
        if self.last.as_deref().is_some_and(|l| l >= key) {
            return Err(Error::InvalidArgument(format!(
                "bulk-built B+tree in index file {}: key {:02x?} is not greater than the key before it",
                self.file, key
            )));
        }
        self.last = Some(key.to_vec());
        self.entries += 1;
        self.add(0, key, value)
    }

    /// Adds `(key, value)` to the node being built at `level` (for an inner level, `value` is
    /// a child page number), writing the node first when the entry does not fit.
    fn add(&mut self, level: usize, key: &[u8], value: &[u8]) -> Result<()> {
        if self.levels.len() == level {
            let ps = self.pool.page_size();
            self.levels.push(Level { buf: vec![0; ps], first: None, prev: None, written: 0 });
        }
        let reserve = if level == 0 { self.leaf_reserve } else { 0 };
        let l = &mut self.levels[level];
        if l.first.is_some() {
            let n = node::count(&l.buf);
            // A node built here has no holes, so its free gap is all its free space.
            debug_assert_eq!(node::free_gap(&l.buf), node::free_space(&l.buf));
            let fits = node::free_gap(&l.buf) >= node::entry_space(key, value) + reserve;
            // A node always takes two entries, whatever the reserve says.
            if fits || (n < 2 && node::fits(&l.buf, key, value)) {
                node::insert_at(&mut l.buf, n, key, value);
                return Ok(());
            }
            self.write_node(level)?;
        }
        let l = &mut self.levels[level];
        l.first = Some(key.to_vec());
        if level == 0 {
            node::init(&mut l.buf, 0, node::NO_PAGE);
            node::insert_at(&mut l.buf, 0, key, value);
        } else {
            // The first child of an inner node is its leftmost link, without a key.
            node::init(&mut l.buf, level, super::child_of(value));
        }
        Ok(())
    }

    /// Writes the node being built at `level` to a new page and hands its first key and page
    /// number to the level above.
    fn write_node(&mut self, level: usize) -> Result<()> {
        let first = self.levels[level].first.take().expect("a node to write");
        let page = self.write_page(level)?;
        self.add(level + 1, &first, &page.to_le_bytes())
    }

    /// Copies the node being built at `level` to a new page (a leaf also becomes its left
    /// sibling's right link, in the same mini-transaction); returns the page number.
    fn write_page(&mut self, level: usize) -> Result<u64> {
        let l = &mut self.levels[level];
        let page_type = if level == 0 { PageType::BtreeLeaf } else { PageType::BtreeInner };
        let mtr = self.pool.begin_mtr();
        let page = self.pool.append_page(self.file, PageClass::Index, page_type, &l.buf)?;
        if let (0, Some(prev)) = (level, l.prev) {
            let mut p = self.pool.fix_mut(PageId::new(self.file, prev), PageClass::Index)?;
            node::set_link(&mut p, page);
        }
        mtr.commit()?;
        l.prev = Some(page);
        l.written += 1;
        Ok(page)
    }

    /// Writes the last nodes and returns the tree. An empty tree is one empty leaf.
    pub fn finish(mut self) -> Result<BTree> {
        if self.levels.is_empty() {
            let l0 = Level { buf: vec![0; self.pool.page_size()], first: None, prev: None, written: 0 };
            self.levels.push(l0);
            node::init(&mut self.levels[0].buf, 0, node::NO_PAGE);
            let root = self.write_page(0)?;
            return Ok(BTree::open(self.pool, self.file, root));
        }
        let mut level = 0;
        loop {
            let top = level + 1 == self.levels.len();
            if top && self.levels[level].written == 0 {
                // The only node of the top level is the root.
                let root = self.write_page(level)?;
                return Ok(BTree::open(self.pool, self.file, root));
            }
            // Every level holds a started node (a written node always hands on an entry).
            self.write_node(level)?;
            level += 1;
        }
    }
}
