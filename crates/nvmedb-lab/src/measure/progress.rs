//! Progress bars: the one look of every long-running step in the lab.
//!
//! Owns: [`bar`] and [`bytes_bar`]. Invariant: a hidden bar (`show == false`) costs nothing and
//! prints nothing, so tests and `--no-progress` runs stay quiet.

use indicatif::{ProgressBar, ProgressStyle};

/// A bar of `len` steps: `<prefix> <pos>/<len> [=====>   ] eta <eta> <message>`.
pub fn bar(show: bool, len: u64, prefix: impl Into<String>) -> ProgressBar {
    styled(show, len, prefix, "{prefix} {pos}/{len} [{wide_bar}] eta {eta} {msg}")
}

/// A bar of `len` bytes: `<prefix> <bytes>/<total> [=====>   ] eta <eta> <message>`.
pub fn bytes_bar(show: bool, len: u64, prefix: impl Into<String>) -> ProgressBar {
    styled(show, len, prefix, "{prefix} {bytes}/{total_bytes} [{wide_bar}] eta {eta} {msg}")
}

fn styled(show: bool, len: u64, prefix: impl Into<String>, template: &str) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template(template) {
        b.set_style(style.progress_chars("=> "));
    }
    b.set_prefix(prefix.into());
    b
}
