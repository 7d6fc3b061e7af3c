//! The engine's layers import downwards only: every `crate::` path in a layer's non-test code
//! names a module below it in [`ORDER`], the order `docs/ARCHITECTURE.md` draws. A strict
//! order also means the import graph has no cycle.
//!
//! Paths through the crate root's re-exports (`crate::{Error, Database}`) count as imports of
//! the module the root takes them from (read from `lib.rs`). Comments and `#[cfg(test)] mod`
//! blocks (unit tests may build a whole database) are not imports of the layer.
//!
//! Inside a layer whose files must not import each other in a circle ([`ACYCLIC_DIRS`]: `repl/`),
//! every `super::` and `crate::<layer>::` path is an import of the sibling file it names, or of
//! `mod.rs` when it names an item `mod.rs` re-exports; `mod.rs`'s `pub use` lines import the
//! files they name. No file may import a file that imports it back, directly or around a
//! longer circle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Bottom to top: a module may import only modules listed before it.
const ORDER: &[&str] = &[
    "util", "ids", "io", "error", "page", "trace", "buffer", "btree", "wal", "xlog", "txn", "table", "db",
    "repl", "inspect", "backup", "metrics",
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.expect("directory entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The source without comments and without the `#[cfg(test)]` modules (inline ones cut at
/// their attribute; files `tests.rs`/`testing.rs` are test modules as a whole).
fn code_of(name: &str, text: &str) -> String {
    if name == "tests.rs" || name == "testing.rs" {
        return String::new();
    }
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < lines.len() {
        let t = lines[i].trim_start();
        if t.starts_with("#[cfg(test)]")
            && lines.get(i + 1).is_some_and(|n| n.trim_start().starts_with("mod "))
        {
            // An inline test module runs to the end of the file in this code base's style; a
            // declaration (`mod tests;`) is just skipped.
            if lines[i + 1].trim_end().ends_with(';') {
                i += 2;
                continue;
            }
            break;
        }
        if !t.starts_with("//") {
            out.push_str(lines[i]);
            out.push('\n');
        }
        i += 1;
    }
    out
}

/// Names at the top level of a `{...}` group starting at `s[0] == '{'`.
fn group_heads(s: &str) -> Vec<String> {
    let mut depth = 0;
    let mut heads = Vec::new();
    let mut cur = String::new();
    let mut at_head = true;
    for c in s.chars() {
        match c {
            '{' => {
                depth += 1;
                if depth > 1 {
                    at_head = false;
                }
            }
            '}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            ',' if depth == 1 => {
                heads.push(std::mem::take(&mut cur));
                at_head = true;
            }
            ':' if depth == 1 => at_head = false,
            c if depth == 1 && at_head && (c.is_alphanumeric() || c == '_') => cur.push(c),
            c if depth == 1 && at_head && !c.is_whitespace() => at_head = false,
            _ => {}
        }
    }
    heads.push(cur);
    heads.into_iter().filter(|h| !h.is_empty()).collect()
}

/// Every crate-level name a piece of code reaches through `crate::`.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        if code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue; // `mycrate::`, not the crate root
        }
        let rest = &code[at + "crate::".len()..];
        if rest.starts_with('{') {
            names.extend(group_heads(rest));
        } else {
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            names.insert(name);
        }
    }
    names
}

/// The module each crate-root re-export comes from (`pub use db::{Database, ...};`).
fn root_reexports() -> BTreeMap<String, String> {
    let lib = std::fs::read_to_string(src().join("lib.rs")).expect("lib.rs");
    let mut map = BTreeMap::new();
    for stmt in lib.split(';') {
        let Some(u) = stmt.trim().strip_prefix("pub use ") else { continue };
        let Some((module, rest)) = u.split_once("::") else { continue };
        let rest = rest.trim();
        let items = if rest.starts_with('{') { group_heads(rest) } else { vec![rest.to_string()] };
        for item in items {
            map.insert(item, module.to_string());
        }
    }
    map
}

#[test]
fn every_layer_imports_only_layers_below_it() {
    let reexports = root_reexports();
    let rank = |m: &str| ORDER.iter().position(|o| *o == m);
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut seen_layers = BTreeSet::new();
    let mut violations = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(src()).expect("under src");
        let layer = rel.components().next().and_then(|c| c.as_os_str().to_str()).unwrap_or("");
        let layer = layer.strip_suffix(".rs").unwrap_or(layer);
        if layer == "lib" {
            continue;
        }
        let Some(own) = rank(layer) else {
            violations.push(format!("{}: module `{layer}` is missing from ORDER", rel.display()));
            continue;
        };
        seen_layers.insert(layer.to_string());
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for name in crate_paths(&code_of(name, &text)) {
            let target = if rank(&name).is_some() {
                name.clone()
            } else if let Some(m) = reexports.get(&name) {
                m.clone()
            } else {
                violations.push(format!(
                    "{}: `crate::{name}` is neither a layer nor a root re-export",
                    rel.display()
                ));
                continue;
            };
            if target == layer {
                continue;
            }
            let t = rank(&target).expect("re-exports come from layers");
            if t > own {
                violations.push(format!(
                    "{}: `{layer}` imports `crate::{name}` from `{target}`, above it",
                    rel.display()
                ));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "layering violations (order bottom to top: {ORDER:?}):\n{}",
        violations.join("\n")
    );
    // ORDER names no module that does not exist (a renamed layer must be renamed here too).
    let missing: Vec<_> = ORDER.iter().filter(|m| !seen_layers.contains(**m)).collect();
    assert!(missing.is_empty(), "ORDER names modules that are not in src/: {missing:?}");
}

/// One import style: the error types are named through `crate::error` (`crate::error::{Error,
/// Result}`), never through the crate root's re-exports, which are for the crate's users.
#[test]
fn error_types_are_imported_from_the_error_module() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut violations = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(src()).expect("under src");
        if rel == Path::new("lib.rs") {
            continue;
        }
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for n in crate_paths(&code_of(name, &text)) {
            if n == "Error" || n == "Result" {
                violations.push(format!("{}: `crate::{n}` (write `crate::error::{n}`)", rel.display()));
            }
        }
    }
    assert!(violations.is_empty(), "error types named through the crate root:\n{}", violations.join("\n"));
}

/// Layers whose files import each other one way only.
const ACYCLIC_DIRS: &[&str] = &["repl"];

/// The sibling files that `code` (the non-test code of a file of `layer/`) imports, by module
/// name (`mod` for `mod.rs`); `siblings` are the module names of the layer's files.
fn sibling_imports(layer: &str, own: &str, code: &str, siblings: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut add = |rest: &str| {
        let names = if rest.starts_with('{') {
            group_heads(rest)
        } else {
            vec![rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()]
        };
        for n in names {
            if n == "self" || n.is_empty() {
                continue;
            }
            out.insert(if siblings.contains(&n) { n } else { "mod".to_string() });
        }
    };
    // In `mod.rs`, `super::` is the layer above.
    let prefixes = if own == "mod" {
        vec![format!("crate::{layer}::")]
    } else {
        vec![format!("crate::{layer}::"), "super::".to_string()]
    };
    for p in &prefixes {
        for (at, _) in code.match_indices(p.as_str()) {
            let before = &code[..at];
            if before.ends_with(|c: char| c.is_alphanumeric() || c == '_') || before.ends_with("::") {
                continue; // `mycrate::`, or `super::super::`
            }
            // `super::super::x` (from a module nested in the file) names sibling `x` too.
            let mut rest = &code[at + p.len()..];
            while let Some(r) = rest.strip_prefix("super::") {
                rest = r;
            }
            add(rest);
        }
    }
    if own == "mod" {
        // `pub use child::{..}` / `use child::..` in mod.rs import the child.
        for line in code.lines() {
            let t = line.trim_start();
            let Some(u) = t.strip_prefix("pub use ").or_else(|| t.strip_prefix("use ")) else { continue };
            let head: String = u.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if siblings.contains(&head) {
                out.insert(head);
            }
        }
    }
    out.remove(own);
    out
}

/// A circle in `graph` (module → modules it imports), if any, as the modules along it.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(n.to_string(), 1);
        stack.push(n.to_string());
        for m in graph.get(n).into_iter().flatten() {
            match state.get(m.as_str()).copied().unwrap_or(0) {
                1 => {
                    let at = stack.iter().position(|s| s == m).expect("on the stack");
                    let mut c = stack[at..].to_vec();
                    c.push(m.clone());
                    return Some(c);
                }
                0 => {
                    if let Some(c) = visit(m, graph, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in graph.keys() {
        if state.get(n.as_str()).copied().unwrap_or(0) == 0 {
            if let Some(c) = visit(n, graph, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

/// The import graph of the files directly in `src/<layer>/`.
fn layer_graph(layer: &str) -> BTreeMap<String, BTreeSet<String>> {
    let dir = src().join(layer);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    files.sort();
    let stem = |p: &Path| p.file_stem().and_then(|s| s.to_str()).unwrap_or("").to_string();
    let mut siblings: BTreeSet<String> = files.iter().map(|p| stem(p)).collect();
    // Sub-directories are modules too.
    for e in std::fs::read_dir(&dir).expect("layer dir") {
        let p = e.expect("directory entry").path();
        if p.is_dir() {
            siblings.insert(stem(&p));
        }
    }
    let mut graph = BTreeMap::new();
    for f in &files {
        let own = stem(f);
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        graph.insert(own.clone(), sibling_imports(layer, &own, &code_of(name, &text), &siblings));
    }
    // A sub-directory is one module: the union of what its files import.
    for e in std::fs::read_dir(&dir).expect("layer dir") {
        let d = e.expect("directory entry").path();
        if d.is_dir() {
            let own = stem(&d);
            let deps = subdir_imports(layer, &own, &d, &siblings);
            graph.entry(own).or_insert_with(BTreeSet::new).extend(deps);
        }
    }
    graph
}

/// What the files of sub-directory `dir` (module `own` of `layer`) import of `layer`'s other
/// modules. In its `mod.rs`, `super::` is the layer; in its other files `super::` is the
/// sub-directory itself and `super::super::` the layer.
fn subdir_imports(layer: &str, own: &str, dir: &Path, siblings: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let f = e.expect("directory entry").path();
        if f.extension().is_none_or(|x| x != "rs") {
            continue;
        }
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("").to_string();
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let code = code_of(&name, &text);
        let code = if name == "mod.rs" {
            code
        } else {
            code.replace("super::super::", &format!("crate::{layer}::"))
                .replace("super::", &format!("crate::{layer}::{own}::"))
        };
        out.extend(sibling_imports(layer, own, &code, siblings));
    }
    out
}

#[test]
fn no_file_of_repl_imports_a_file_that_imports_it_back() {
    for layer in ACYCLIC_DIRS {
        let graph = layer_graph(layer);
        let mut pairs = Vec::new();
        for (a, deps) in &graph {
            for b in deps {
                if a < b && graph.get(b).is_some_and(|d| d.contains(a)) {
                    pairs.push(format!("{layer}/{a}.rs <-> {layer}/{b}.rs"));
                }
            }
        }
        assert!(pairs.is_empty(), "files of {layer}/ that import each other:\n{}", pairs.join("\n"));
        if let Some(c) = find_cycle(&graph) {
            panic!("files of {layer}/ import each other in a circle: {}", c.join(" -> "));
        }
    }
}

#[test]
fn the_cycle_check_sees_sibling_and_re_exported_imports() {
    let siblings: BTreeSet<String> = ["mod", "a", "b", "c"].iter().map(|s| s.to_string()).collect();
    let code =
        "use super::a::X;\nuse super::{b, Item};\nfn f() { crate::repl::c::g(); super::super::x(); }\n";
    let got = sibling_imports("repl", "c", code, &siblings);
    assert_eq!(got, ["a", "b", "mod"].iter().map(|s| s.to_string()).collect());
    let modrs = "mod a;\npub use a::X;\npub use crate::error::E;\n";
    assert_eq!(
        sibling_imports("repl", "mod", modrs, &siblings),
        ["a"].iter().map(|s| s.to_string()).collect()
    );
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.insert("a".into(), ["b".to_string()].into());
    g.insert("b".into(), ["c".to_string()].into());
    g.insert("c".into(), BTreeSet::new());
    assert_eq!(find_cycle(&g), None);
    g.insert("c".into(), ["a".to_string()].into());
    assert_eq!(find_cycle(&g), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
}

#[test]
fn the_scanner_sees_grouped_and_re_exported_imports() {
    let code =
        "use crate::{error::{Error, Result}, io::Device};\nfn f() -> crate::Database { mycrate::x() }\n";
    let names = crate_paths(code);
    assert_eq!(names, ["Database", "error", "io"].iter().map(|s| s.to_string()).collect());
    assert_eq!(root_reexports().get("Database").map(String::as_str), Some("db"));
    let test_code = "use crate::io::Device;\n// crate::db in a comment\n#[cfg(test)]\nmod tests {\n    use crate::db::Database;\n}\n";
    assert_eq!(crate_paths(&code_of("x.rs", test_code)), ["io"].iter().map(|s| s.to_string()).collect());
    assert!(crate_paths(&code_of("tests.rs", test_code)).is_empty());
}
