//! Redo of page operations: the one dispatcher from an operation's code to the page format that
//! owns it.
//!
//! Owns: [`apply_page_ops`], which recovery, a standby's redo and the buffer pool's debug check
//! of every mini-transaction (through the WAL's `PageLogger`) call. Codes 1–15 are slotted
//! (heap) page operations (`page::slotted::op`), 16–31 B+tree node operations (`node::op`).
//! Invariant: operations apply in the order they were logged, each to the page as the previous
//! one left it; an error names the operation that does not fit the page, and the caller treats
//! the page as corrupt.

use super::node;
use crate::page::slotted;
use crate::util::bytes::ByteReader;

/// Applies the encoded operations `ops` to `page`, in order.
pub fn apply_page_ops(page: &mut [u8], ops: &[u8]) -> Result<(), String> {
    let mut r = ByteReader::new(ops);
    while r.remaining() > 0 {
        let code = r.u8().ok_or("an empty page operation")?;
        match code {
            1..=slotted::op::LAST => slotted::op::apply(page, code, &mut r)?,
            node::op::FIRST..=node::op::LAST => node::op::apply(page, code, &mut r)?,
            _ => return Err(format!("unknown page operation code {code}")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page::{PageHeader, PageType};
    use crate::util::Rng;
    use std::collections::BTreeMap;

    fn page(ty: PageType) -> Vec<u8> {
        let mut p = vec![0u8; 4096];
        PageHeader::init(&mut p, ty, 1, 7);
        p
    }

    /// Random heap-page changes, each logged as its operation: replaying the log on the page as
    /// it started gives the page byte for byte, after every step.
    #[test]
    fn slotted_operations_redo_every_change_byte_for_byte() {
        for seed in 0..100 {
            let mut rng = Rng::new(seed);
            let mut p = page(PageType::Heap);
            slotted::init(&mut p);
            let start = p.clone();
            let mut log = Vec::new();
            let mut live: BTreeMap<usize, Vec<u8>> = BTreeMap::new();
            for step in 0..300 {
                let pick = rng.below(10);
                if pick < 5 || live.is_empty() {
                    let mut rec = vec![0u8; rng.below(200) as usize];
                    rng.fill(&mut rec);
                    if let Some(s) = slotted::insert(&mut p, &rec) {
                        slotted::op::insert(&mut log, s, &rec);
                        live.insert(s, rec);
                    }
                } else if pick < 8 {
                    let s = *live.keys().nth(rng.below(live.len() as u64) as usize).unwrap();
                    let old = live[&s].clone();
                    let mut new =
                        if rng.below(2) == 0 { old.clone() } else { vec![0u8; rng.below(200) as usize] };
                    for _ in 0..rng.below(4) {
                        if !new.is_empty() {
                            let at = rng.below(new.len() as u64) as usize;
                            new[at] = rng.below(256) as u8;
                        }
                    }
                    if slotted::update(&mut p, s, &new) {
                        slotted::op::update(&mut log, s, &old, &new);
                        live.insert(s, new);
                    }
                } else {
                    let s = *live.keys().nth(rng.below(live.len() as u64) as usize).unwrap();
                    assert!(slotted::delete(&mut p, s));
                    slotted::op::delete(&mut log, s);
                    live.remove(&s);
                }
                let mut redo = start.clone();
                apply_page_ops(&mut redo, &log).unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
                assert_eq!(redo, p, "seed {seed} step {step}");
            }
        }
    }

    #[test]
    fn node_operations_redo_every_change_byte_for_byte() {
        for seed in 0..100 {
            let mut rng = Rng::new(seed);
            let mut p = page(PageType::BtreeLeaf);
            node::init(&mut p, 0, node::NO_PAGE);
            let start = p.clone();
            let mut log = Vec::new();
            for step in 0..300 {
                let n = node::count(&p);
                let key = (rng.below(500) as u32).to_be_bytes();
                let val = vec![rng.below(256) as u8; 8];
                match (rng.below(3), node::search(&p, &key)) {
                    (0, Ok(i)) => {
                        node::remove_at(&mut p, i);
                        node::op::remove(&mut log, i);
                    }
                    (1, Ok(i)) => {
                        assert!(node::overwrite_value(&mut p, i, &val));
                        node::op::overwrite(&mut log, i, &val);
                    }
                    (_, Err(i)) if node::fits(&p, &key, &val) => {
                        node::insert_at(&mut p, i, &key, &val);
                        node::op::insert(&mut log, i, &key, &val);
                    }
                    _ => continue,
                }
                assert_ne!(node::count(&p) + usize::from(n == node::count(&p)), 0);
                let mut redo = start.clone();
                apply_page_ops(&mut redo, &log).unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
                assert_eq!(redo, p, "seed {seed} step {step}");
            }
        }
    }

    #[test]
    fn operations_that_do_not_fit_the_page_are_errors_not_panics() {
        let mut p = page(PageType::Heap);
        slotted::init(&mut p);
        let mut log = Vec::new();
        slotted::op::delete(&mut log, 3);
        assert!(apply_page_ops(&mut p, &log).unwrap_err().contains("free slot 3"));
        let mut log = Vec::new();
        slotted::op::insert(&mut log, 5, b"x");
        assert!(
            apply_page_ops(&mut p, &log).unwrap_err().contains("slot 0"),
            "the first insert takes slot 0"
        );
        let mut leaf = page(PageType::BtreeLeaf);
        node::init(&mut leaf, 0, node::NO_PAGE);
        let mut log = Vec::new();
        node::op::remove(&mut log, 0);
        assert!(apply_page_ops(&mut leaf, &log).is_err());
        let mut log = Vec::new();
        node::op::insert(&mut log, 2, b"k", b"v");
        assert!(apply_page_ops(&mut leaf, &log).is_err(), "position past the end");
        assert!(apply_page_ops(&mut leaf, &[99]).unwrap_err().contains("unknown"));
        assert!(apply_page_ops(&mut leaf, &[node::op::INSERT, 0, 5]).unwrap_err().contains("cut short"));
        // Every prefix of a valid log either applies or is an error; none panics.
        let mut log = Vec::new();
        node::op::insert(&mut log, 0, b"key", b"value");
        for cut in 0..log.len() {
            let mut l = leaf.clone();
            let _ = apply_page_ops(&mut l, &log[..cut]);
        }
    }
}
