//! Which statements go to the catalog views: the words that route one there (the schema
//! names, every view's name, the catalog functions), found as whole words in its text.
//!
//! Owns: [`names_catalog`] and the routing words. Invariant: every routing word holds one of
//! [`ROUTING_MARKS`], so a statement holding none is refused without a search per word.

use super::{ALWAYS_EMPTY, VIEW_DDL};

/// Words that route a statement to the catalog views: the schema names and every view name.
pub(super) fn routing_words() -> impl Iterator<Item = &'static str> {
    // (The nvmedb_* helper tables are reached only through the rewrite.)
    ["pg_catalog", "information_schema"]
        .into_iter()
        .chain(VIEW_DDL.iter().map(|(n, _)| *n).filter(|n| n.starts_with("pg_")))
        .chain(ALWAYS_EMPTY.iter().copied())
        .chain([
            "to_regclass",
            "to_regtype",
            "to_regnamespace",
            "pg_get_indexdef",
            "pg_get_constraintdef",
            "regclass",
        ])
}

/// Fragments one of which every routing word holds (see [`names_catalog`]).
const ROUTING_MARKS: [&str; 3] = ["pg_", "information_schema", "reg"];

/// Whether statement text names a catalog view (what routes it to the views' database):
/// `pg_catalog.` or `information_schema.` anywhere, or a `pg_*` view name as a whole word.
pub fn names_catalog(sql: &str) -> bool {
    // Every routing word holds one of these (a test checks it): most statements hold none, and
    // are answered without lower-casing the text or searching it for every word.
    if !ROUTING_MARKS.iter().any(|m| crate::parse::holds_ignoring_case(sql, m)) {
        return false;
    }
    let lower = sql.to_ascii_lowercase();
    let b = lower.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    routing_words().any(|w| {
        lower.match_indices(w).any(|(i, _)| {
            let end = i + w.len();
            (i == 0 || !word(b[i - 1])) && (end == b.len() || !word(b[end]))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_finds_catalog_names_as_words() {
        assert!(names_catalog("select * from pg_catalog.pg_class"));
        assert!(names_catalog("SELECT t.oid FROM pg_type t"));
        assert!(names_catalog("select * from information_schema.tables"));
        assert!(!names_catalog("select pg_backend_pid()"));
        assert!(!names_catalog("select * from my_pg_class_copy"));
        assert!(names_catalog("SELECT 't'::REGCLASS"));
        assert!(names_catalog("select TO_REGTYPE('int4')"));
        assert!(!names_catalog("SELECT c FROM sbtest1 WHERE id BETWEEN $1 AND $2 ORDER BY c"));
    }

    /// The quick refusal of `names_catalog` may not miss a routing word.
    #[test]
    fn every_routing_word_holds_a_routing_mark() {
        for w in routing_words() {
            assert!(ROUTING_MARKS.iter().any(|m| w.contains(m)), "{w} holds none of {ROUTING_MARKS:?}");
            assert!(names_catalog(&format!("select * from {}", w.to_uppercase())), "{w}");
        }
    }
}
