//! Splits: the B+tree's pessimistic write path, taken when a leaf lacks room for an entry.
//!
//! Owns: latch coupling from the deepest safe node (one that can absorb a separator without
//! splitting), leaf and inner-node splits, and the choice of split point.
//!
//! Invariants: every page a split needs is allocated before anything changes (an I/O error
//! while finding frames leaves the tree as it was); a split and the entry that caused it are
//! one mini-transaction; after a split each half holds about half the bytes, and the stack's
//! top is the half that covers the key.

use super::node::{self, NO_PAGE};
use super::{child_of, BTree, LeafOutcome};
use crate::buffer::{PageClass, PageMut};
use crate::error::Result;
use crate::page::{PageHeader, PageType};

impl BTree {
    /// Pessimistic path: exclusive latches from the deepest safe node; runs `op` at the leaf
    /// and, while it reports that the entry does not fit, splits the leaf (and ancestors).
    pub(super) fn with_leaf_mut_splitting<R>(
        &self,
        key: &[u8],
        op: &mut dyn FnMut(&mut PageMut<'_>) -> LeafOutcome<R>,
    ) -> Result<R> {
        let worst = node::entry_space(&vec![0u8; self.max_entry_bytes().saturating_sub(8)], &[0u8; 8]);
        loop {
            // Each attempt is one mini-transaction: a split and the entry that caused it are
            // logged together, and an attempt that fails half-way leaves no trace.
            let mtr = self.pool.begin_mtr();
            let attempt = self.split_attempt(key, worst, op)?;
            mtr.commit()?;
            if let Some(r) = attempt {
                return Ok(r);
            }
            // Pathological sizes: the half still lacks room. Start over; the tree has grown.
        }
    }

    fn split_attempt<R>(
        &self,
        key: &[u8],
        worst: usize,
        op: &mut dyn FnMut(&mut PageMut<'_>) -> LeafOutcome<R>,
    ) -> Result<Option<R>> {
        {
            let mut stack: Vec<PageMut<'_>> = vec![self.fix_mut(self.root)?];
            loop {
                let top = stack.last().expect("stack holds the current node");
                if node::is_leaf(top) {
                    break;
                }
                let child = node::child_for(top, key);
                let next = self.fix_mut(child)?;
                if !node::is_leaf(&next) && node::free_space(&next) >= worst {
                    stack.clear(); // `next` can absorb a separator: ancestors are safe to release
                }
                stack.push(next);
            }
            if let LeafOutcome::Done(r) = op(stack.last_mut().expect("leaf")) {
                return Ok(Some(r));
            }
            self.split_leaf(&mut stack, key)?;
            if let LeafOutcome::Done(r) = op(stack.last_mut().expect("leaf")) {
                return Ok(Some(r));
            }
            Ok(None)
        }
    }

    /// Splits the leaf on top of `stack` in two, pushing separators up as needed. Afterwards
    /// the stack's top is the half that covers `key`.
    fn split_leaf<'a>(&'a self, stack: &mut Vec<PageMut<'a>>, key: &[u8]) -> Result<()> {
        // Allocate every page the splits will need before changing anything, so an I/O error
        // while finding frames leaves the tree exactly as it was.
        let needed = self.pages_needed_to_split(stack)?;
        let mut fresh = Vec::with_capacity(needed);
        for _ in 0..needed {
            fresh.push(self.pool.allocate(self.file, PageClass::Index, PageType::BtreeLeaf)?);
        }
        let mut take_page = |page_type: PageType| {
            let mut g = fresh.pop().expect("pages_needed_to_split counted every new page");
            PageHeader::set_page_type(&mut g, page_type);
            g
        };
        let mut idx = stack.len() - 1;
        let mut pending: Option<(Vec<u8>, Vec<u8>)> = None;
        loop {
            let n = &mut stack[idx];
            if let Some((k, v)) = &pending {
                let pos = match node::search(n, k) {
                    Ok(_) => return Err(self.corrupt(n.page_id().page, "separator key already present")),
                    Err(i) => i,
                };
                if node::fits(n, k, v) {
                    node::insert_at(n, pos, k, v);
                    return Ok(());
                }
            }
            // The node's entries, borrowed from a copy of it (the node itself is rebuilt).
            let copy = n.to_vec();
            let mut entries = node::entries(&copy);
            let level = node::level(n);
            let leaf = level == 0;
            // Appending at the right edge (ascending keys, e.g. a sequential load): keep the
            // left node full and start the right one nearly empty, instead of leaving every
            // left node half empty.
            let mut appending =
                leaf && node::link(n) == NO_PAGE && entries.last().is_some_and(|(last, _)| key > *last);
            let taken = pending.take();
            if let Some((k, v)) = &taken {
                let pos = entries.binary_search_by(|e| e.0.cmp(k.as_slice())).unwrap_or_else(|i| i);
                appending = pos == entries.len();
                entries.insert(pos, (k, v));
            }
            if entries.len() < 2 {
                return Err(self.corrupt(n.page_id().page, "node to split holds fewer than two entries"));
            }
            let mid = if appending && entries.len() >= 4 {
                // A leaf keeps all but its last entry; an inner node all but its last two (the
                // right node needs one separator besides the child it starts with).
                entries.len() - if leaf { 1 } else { 2 }
            } else {
                split_point(&entries)
            };
            let sep = entries[mid].0.to_vec();
            let right_start = if leaf { mid } else { mid + 1 };
            let page_type = if leaf { PageType::BtreeLeaf } else { PageType::BtreeInner };
            if n.page_id().page == self.root {
                let mut left = take_page(page_type);
                let mut right = take_page(page_type);
                let right_no = right.page_id().page;
                let left_no = left.page_id().page;
                if leaf {
                    node::init(&mut left, 0, right_no);
                    node::init(&mut right, 0, NO_PAGE);
                } else {
                    node::init(&mut left, level, node::link(n));
                    node::init(&mut right, level, child_of(entries[mid].1));
                }
                node::rebuild(&mut left, &entries[..mid]);
                node::rebuild(&mut right, &entries[right_start..]);
                let root = &mut stack[idx];
                PageHeader::set_page_type(root, PageType::BtreeInner);
                node::init(root, level + 1, left_no);
                node::insert_at(root, 0, &sep, &right_no.to_le_bytes());
                if leaf {
                    stack.truncate(idx + 1);
                    stack.push(if key >= sep.as_slice() { right } else { left });
                }
                return Ok(());
            }
            let mut right = take_page(page_type);
            let right_no = right.page_id().page;
            let n = &mut stack[idx];
            if leaf {
                node::init(&mut right, 0, node::link(n));
                node::set_link(n, right_no);
            } else {
                node::init(&mut right, level, child_of(entries[mid].1));
            }
            node::rebuild(&mut right, &entries[right_start..]);
            node::rebuild(n, &entries[..mid]);
            if leaf && key >= sep.as_slice() {
                stack[idx] = right;
            } else {
                drop(right);
            }
            assert!(idx > 0, "split reached a released ancestor: the safe-node rule was broken");
            idx -= 1;
            pending = Some((sep, right_no.to_le_bytes().to_vec()));
        }
    }

    /// How many new pages splitting the leaf on top of `stack` takes (the same decisions
    /// `split_leaf` makes, without changing anything).
    fn pages_needed_to_split(&self, stack: &[PageMut<'_>]) -> Result<usize> {
        let mut pending: Option<Vec<u8>> = None;
        for (pages, n) in stack.iter().rev().enumerate() {
            if let Some(k) = &pending {
                if node::fits(n, k, &[0u8; 8]) {
                    return Ok(pages);
                }
            }
            let mut entries = node::entries(n);
            let taken = pending.take();
            if let Some(k) = &taken {
                let pos = entries.binary_search_by(|e| e.0.cmp(k.as_slice())).unwrap_or_else(|i| i);
                entries.insert(pos, (k, &[0u8; 8]));
            }
            if entries.len() < 2 {
                return Err(self.corrupt(n.page_id().page, "node to split holds fewer than two entries"));
            }
            if n.page_id().page == self.root {
                return Ok(pages + 2);
            }
            pending = Some(entries[split_point(&entries)].0.to_vec());
        }
        Err(self.corrupt(self.root, "split reached a released ancestor: the safe-node rule was broken"))
    }
}

/// Index at which to split `entries` so both halves hold about the same number of bytes.
fn split_point(entries: &[(&[u8], &[u8])]) -> usize {
    let total: usize = entries.iter().map(|(k, v)| node::entry_space(k, v)).sum();
    let mut acc = 0;
    for (i, (k, v)) in entries.iter().enumerate() {
        acc += node::entry_space(k, v);
        if acc * 2 >= total {
            return (i + 1).clamp(1, entries.len() - 1);
        }
    }
    entries.len() / 2
}
