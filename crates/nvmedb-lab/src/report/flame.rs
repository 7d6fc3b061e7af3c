//! CPU profiles as a person reads them: a flame graph (SVG, drawn by `inferno`) and the table of
//! the functions with the most samples.
//!
//! Owns: [`write_flame_graph`], [`top_functions`] (self and total share of every function in
//! folded stacks), [`layer_shares`] (self samples by the engine layer or library a leaf frame
//! belongs to) and their text tables. Invariants: shares are of all samples in the folded
//! stacks; a function counts once per stack in its total, however often it recurs; a flame
//! graph is written only from a non-empty profile (an empty one is an error naming the file).

use super::{Align, ReportError, Result, TextTable};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// One function's share of a profile.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FunctionShare {
    /// The symbol as perf named it.
    pub function: String,
    /// Samples with it as the innermost frame, % of all.
    pub self_pct: f64,
    /// Samples with it anywhere in the stack, % of all.
    pub total_pct: f64,
}

/// Splits a folded line into its frames and count.
fn parse(line: &str) -> Option<(Vec<&str>, u64)> {
    let (stack, count) = line.rsplit_once(' ')?;
    Some((stack.split(';').collect(), count.trim().parse().ok()?))
}

/// Samples in folded stacks.
pub fn sample_count(folded: &[String]) -> u64 {
    folded.iter().filter_map(|l| parse(l)).map(|(_, n)| n).sum()
}

/// The `n` functions with the most self samples, with their total shares.
pub fn top_functions(folded: &[String], n: usize) -> Vec<FunctionShare> {
    let total = sample_count(folded).max(1) as f64;
    let mut own: HashMap<&str, u64> = HashMap::new();
    let mut all: HashMap<&str, u64> = HashMap::new();
    for (frames, count) in folded.iter().filter_map(|l| parse(l)) {
        if let Some(leaf) = frames.last() {
            *own.entry(leaf).or_default() += count;
        }
        let mut seen: Vec<&str> = Vec::with_capacity(frames.len());
        for f in frames {
            if !seen.contains(&f) {
                seen.push(f);
                *all.entry(f).or_default() += count;
            }
        }
    }
    let mut rows: Vec<FunctionShare> = own
        .iter()
        .map(|(f, s)| FunctionShare {
            function: f.to_string(),
            self_pct: *s as f64 * 100.0 / total,
            total_pct: all.get(f).copied().unwrap_or(*s) as f64 * 100.0 / total,
        })
        .collect();
    rows.sort_by(|a, b| b.self_pct.total_cmp(&a.self_pct).then_with(|| a.function.cmp(&b.function)));
    rows.truncate(n);
    rows
}

/// The layer or library a frame belongs to: `nvmedb::<module>` for the engine's modules,
/// `nvmedb_lab`, `allocator` (malloc and free), `kernel`, `libc` (other C library symbols),
/// `std`, or `other`.
pub fn layer_of(frame: &str) -> String {
    let f = frame.trim_start_matches('<');
    if let Some(rest) = f.strip_prefix("nvmedb::") {
        let module = rest.split("::").next().unwrap_or(rest);
        return format!("nvmedb::{module}");
    }
    if f.starts_with("nvmedb_lab::") {
        return "nvmedb_lab (workload)".into();
    }
    if f.starts_with("nvmedb_sql::") {
        return "nvmedb_sql".into();
    }
    let alloc = ["malloc", "free", "realloc", "calloc", "cfree", "_int_malloc", "_int_free", "_int_realloc"];
    if alloc.iter().any(|a| f == *a || f.starts_with(&format!("{a}@")))
        || f.contains("malloc_consolidate")
        || f.starts_with("unlink_chunk")
        || f.starts_with("__rust_alloc")
        || f.starts_with("__rust_dealloc")
        || f.starts_with("alloc::alloc::")
    {
        return "allocator".into();
    }
    if f.ends_with("_[k]") || f.starts_with("[kernel") {
        return "kernel".into();
    }
    if f.starts_with("core::")
        || f.starts_with("std::")
        || f.starts_with("alloc::")
        || f.starts_with("hashbrown::")
    {
        return "std".into();
    }
    if f.starts_with("__") || f.contains("@GLIBC") || f.starts_with("pthread_") || f == "syscall" {
        return "libc".into();
    }
    "other".into()
}

/// Self samples by [`layer_of`] their innermost frame, % of all, largest first.
pub fn layer_shares(folded: &[String]) -> Vec<(String, f64)> {
    let total = sample_count(folded).max(1) as f64;
    let mut by: HashMap<String, u64> = HashMap::new();
    for (frames, count) in folded.iter().filter_map(|l| parse(l)) {
        if let Some(leaf) = frames.last() {
            *by.entry(layer_of(leaf)).or_default() += count;
        }
    }
    let mut rows: Vec<(String, f64)> = by.into_iter().map(|(l, n)| (l, n as f64 * 100.0 / total)).collect();
    rows.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    rows
}

/// The top-function and layer tables as text.
pub fn profile_tables(folded: &[String], n: usize) -> String {
    let mut t =
        TextTable::new(["self %", "total %", "function"]).align(0, Align::Right).align(2, Align::Left);
    for r in top_functions(folded, n) {
        t.row([format!("{:.1}", r.self_pct), format!("{:.1}", r.total_pct), r.function]);
    }
    let mut l = TextTable::new(["self %", "layer"]).align(0, Align::Right).align(1, Align::Left);
    for (layer, pct) in layer_shares(folded) {
        l.row([format!("{pct:.1}"), layer]);
    }
    format!(
        "{} samples\n\nfunctions by self samples:\n{}\nself samples by layer:\n{}",
        sample_count(folded),
        t,
        l
    )
}

/// Writes a flame graph of `folded` to `path` (SVG) with `title` and `subtitle`.
pub fn write_flame_graph(path: &Path, title: &str, subtitle: &str, folded: &[String]) -> Result<PathBuf> {
    let err = |detail: String| ReportError::Plot { path: path.to_path_buf(), detail };
    if sample_count(folded) == 0 {
        return Err(err("the profile has no samples".into()));
    }
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = title.to_string();
    opts.subtitle = Some(subtitle.to_string());
    opts.count_name = "samples".into();
    opts.deterministic = true;
    let mut out = Vec::new();
    inferno::flamegraph::from_lines(&mut opts, folded.iter().map(String::as_str), &mut out)
        .map_err(|e| err(format!("drawing the flame graph: {e}")))?;
    std::fs::write(path, out).map_err(|e| err(format!("writing: {e}")))?;
    Ok(path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folded() -> Vec<String> {
        vec![
            "main;nvmedb::table::Table::insert;nvmedb::btree::BTree::insert 6".into(),
            "main;nvmedb::table::Table::insert;malloc 2".into(),
            "main;rec;rec;nvmedb::wal::engine::EngineLog::append 2".into(),
        ]
    }

    #[test]
    fn shares_count_self_at_the_leaf_and_total_once_per_stack() {
        let f = folded();
        assert_eq!(sample_count(&f), 10);
        let top = top_functions(&f, 10);
        assert_eq!(top[0].function, "nvmedb::btree::BTree::insert");
        assert_eq!(top[0].self_pct, 60.0);
        let all = top_functions(&f, 100);
        assert!(all.iter().all(|r| r.function != "main"), "no function without self samples is listed");
        // `rec` recurs in one stack but counts once there.
        let t = top_functions(&["a;rec;rec 4".to_string(), "a;x 1".to_string()], 10);
        let rec = t.iter().find(|r| r.function == "rec").unwrap();
        assert_eq!((rec.self_pct, rec.total_pct), (80.0, 80.0));
        let layers = layer_shares(&f);
        assert_eq!(layers[0], ("nvmedb::btree".to_string(), 60.0));
        assert!(layers.contains(&("allocator".to_string(), 20.0)));
        assert!(profile_tables(&f, 5).contains("nvmedb::btree::BTree::insert"));
    }

    #[test]
    fn a_flame_graph_is_an_svg_of_the_stacks_and_an_empty_profile_is_an_error() {
        let dir = nvmedb_testkit::TmpDir::new("flame");
        let p = dir.join("f.svg");
        write_flame_graph(&p, "t", "s", &folded()).unwrap();
        let svg = std::fs::read_to_string(&p).unwrap();
        assert!(svg.starts_with("<?xml") && svg.contains("BTree::insert"));
        assert!(write_flame_graph(&p, "t", "s", &[]).is_err());
    }
}
