//! The format documents and the README agree with the code: every column type tag the catalog
//! decodes is in `docs/format.md`'s tag table (with its name) and nothing else is; every engine
//! log record kind is in `docs/format-wal.md`'s kind table and nothing else is; the README's
//! minimum Rust version is the workspace's `rust-version`, which every crate inherits.

use nvmedb::wal::engine::EngineRecord;
use nvmedb::ColumnType;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(rel: &str) -> String {
    let p = root().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The rows `| <number> | <name> | …` of the first table after the heading line that starts
/// with `heading`: number → second cell.
fn numbered_rows(doc: &str, file: &str, heading: &str) -> BTreeMap<u32, String> {
    let start =
        doc.lines().position(|l| l.starts_with(heading)).unwrap_or_else(|| panic!("{file}: no `{heading}`"));
    let mut rows = BTreeMap::new();
    let mut in_table = false;
    for line in doc.lines().skip(start + 1) {
        let is_row = line.starts_with('|');
        if in_table && !is_row {
            break;
        }
        in_table |= is_row;
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        if let (true, Some(Ok(n)), Some(name)) =
            (is_row, cells.first().map(|c| c.parse::<u32>()), cells.get(1))
        {
            assert!(rows.insert(n, name.to_string()).is_none(), "{file}: {n} listed twice");
        }
    }
    assert!(!rows.is_empty(), "{file}: no numbered table after `{heading}`");
    rows
}

#[test]
fn format_md_lists_exactly_the_column_type_tags() {
    let doc = read("docs/format.md");
    let listed = numbered_rows(&doc, "docs/format.md", "Column type tags");
    let mut code = BTreeMap::new();
    for tag in 0..=u8::MAX {
        // Bit 7 marks a nullable column: no tag uses it.
        if let Some(ty) = ColumnType::from_tag(tag, 0x0c02) {
            assert!(tag < 0x80, "tag {tag} collides with the nullable bit");
            assert_eq!(ColumnType::from_tag(ty.tag().0, ty.tag().1), Some(ty), "tag {tag} round trip");
            let debug = format!("{ty:?}");
            let name = debug.split(['(', ' ', '{']).next().unwrap().to_string();
            code.insert(u32::from(tag), name);
        }
    }
    assert_eq!(listed, code, "docs/format.md's column type tags (left) and ColumnType::from_tag (right)");
}

#[test]
fn format_wal_md_lists_exactly_the_engine_record_kinds() {
    let doc = read("docs/format-wal.md");
    let listed = numbered_rows(&doc, "docs/format-wal.md", "## Engine records");
    let payload = [0u8; 64];
    let code: Vec<u32> = (0..=u8::MAX)
        .filter(|&k| EngineRecord::decode(k, &payload).expect("64 bytes fit every kind").is_some())
        .map(u32::from)
        .collect();
    let docs: Vec<u32> = listed.keys().copied().collect();
    assert_eq!(
        docs, code,
        "docs/format-wal.md's engine record kinds (left) and EngineRecord::decode (right)"
    );
    for (k, name) in &listed {
        let code_name = nvmedb::wal::engine::kind_name(*k as u8);
        let word = code_name.split(' ').next().unwrap();
        assert!(
            name.contains(word) || (word == "table" && name.contains("heap")),
            "kind {k}: the doc says `{name}`, the code `{code_name}`"
        );
    }
}

#[test]
fn readme_states_the_workspace_rust_version() {
    let manifest = read("Cargo.toml");
    let version = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("rust-version = "))
        .expect("the workspace declares rust-version")
        .trim_matches('"')
        .to_string();
    let readme = read("README.md");
    assert!(readme.contains(&format!("≥ {version}")), "README.md does not state Rust ≥ {version}");
    for e in std::fs::read_dir(root().join("crates")).unwrap() {
        let toml = e.unwrap().path().join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&toml) else { continue };
        if let Some(l) = text.lines().find(|l| l.starts_with("rust-version")) {
            assert_eq!(
                l.trim(),
                "rust-version.workspace = true",
                "{}: inherit the workspace's",
                toml.display()
            );
        }
    }
}
