//! The names of the files in a data directory.
//!
//! Owns: every file name the engine gives a data directory's devices: table `id` keeps its rows
//! in `t<id>.heap` (file `id` of the table pool) and its indexes in `t<id>.idx` (file `id` of
//! the index pool); [`CATALOG_FILE`] holds the catalog. Invariant: nothing else in the
//! workspace spells these names (the engine, `inspect`, the CLI and the lab call these; `db`
//! re-exports them).

/// The catalog's file in a data directory.
pub const CATALOG_FILE: &str = "catalog.nvdb";

/// The double-write file of a data directory (torn-page protection; named in the buffer layer,
/// which writes it and lies below this one).
pub use crate::buffer::DOUBLEWRITE_FILE;

/// The heap file of table `id`.
pub fn heap_name(id: u32) -> String {
    format!("t{id}.heap")
}

/// The index file of table `id` (its primary and secondary B+trees).
pub fn index_name(id: u32) -> String {
    format!("t{id}.idx")
}

/// The table id of a heap (`Some((id, true))`) or index (`Some((id, false))`) file name, `None`
/// for any other name.
pub fn parse_table_file(name: &str) -> Option<(u32, bool)> {
    let rest = name.strip_prefix('t')?;
    let (id, heap) = match rest.strip_suffix(".heap") {
        Some(id) => (id, true),
        None => (rest.strip_suffix(".idx")?, false),
    };
    id.parse().ok().map(|id| (id, heap))
}

/// True for a table's heap file (as named by [`heap_name`]).
pub fn is_heap_file(name: &str) -> bool {
    parse_table_file(name).is_some_and(|(_, heap)| heap)
}

/// True for a table's index file (as named by [`index_name`]).
pub fn is_index_file(name: &str) -> bool {
    parse_table_file(name).is_some_and(|(_, heap)| !heap)
}

/// True for the files that hold a database's data (catalog, heaps, indexes), as opposed to
/// logs and lock files.
pub fn is_data_file(name: &str) -> bool {
    name == CATALOG_FILE || is_heap_file(name) || is_index_file(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_as_data_files() {
        assert_eq!(heap_name(7), "t7.heap");
        assert_eq!(index_name(7), "t7.idx");
        for n in [heap_name(3), index_name(3), CATALOG_FILE.to_string()] {
            assert!(is_data_file(&n), "{n}");
        }
        assert!(is_heap_file(&heap_name(3)) && !is_heap_file(&index_name(3)));
        assert!(is_index_file(&index_name(3)) && !is_index_file(&heap_name(3)));
        assert!(!is_data_file("LOCK") && !is_data_file("wal.0001"));
        assert_eq!(parse_table_file(&heap_name(12)), Some((12, true)));
        assert_eq!(parse_table_file(&index_name(0)), Some((0, false)));
        for other in [CATALOG_FILE, "tx.heap", "t1.heapx", "wal.0001", "t.idx"] {
            assert_eq!(parse_table_file(other), None, "{other}");
        }
    }
}
