//! HTML output: escaping, inline SVG plots and the writer of a self-contained HTML file.
//!
//! Owns: [`escape`], [`inline_svg`] and [`write_html`]. Invariants: every piece of text that goes
//! into a page passes through [`escape`]; a plot is embedded as inline SVG (no file, font or
//! network reference is left for the browser to fetch), and an SVG that is not one (or holds a
//! script or an external reference) is refused with an error naming its file.

use super::{ReportError, Result};
use std::path::{Path, PathBuf};

/// `text` with `&`, `<`, `>`, `"` and `'` replaced by their entities.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The SVG file at `path` as an inline `<svg …>…</svg>` element (its XML prolog and any
/// comment before the root dropped), ready to place in an HTML body.
pub fn inline_svg(path: &Path) -> Result<String> {
    let text = std::fs::read_to_string(path).map_err(ReportError::io(path, "read"))?;
    let invalid = |detail: &str| ReportError::InvalidData { path: path.to_path_buf(), detail: detail.into() };
    let start = text.find("<svg").ok_or_else(|| invalid("no <svg> element"))?;
    let end = text.rfind("</svg>").ok_or_else(|| invalid("no closing </svg>"))? + "</svg>".len();
    if end <= start {
        return Err(invalid("</svg> before <svg>"));
    }
    let svg = &text[start..end];
    let lower = svg.to_ascii_lowercase();
    if lower.contains("<script") || lower.contains("href=\"http") || lower.contains("url(http") {
        return Err(invalid("holds a script or an external reference; refusing to embed it"));
    }
    Ok(svg.to_string())
}

/// Writes `html` to `path` (creating its parent directory).
pub fn write_html(path: &Path, html: &str) -> Result<PathBuf> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(ReportError::io(parent, "create directory"))?;
    }
    std::fs::write(path, html).map_err(ReportError::io(path, "write"))?;
    Ok(path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_inlines() {
        assert_eq!(escape("a<b & \"c\" 'd'>"), "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;");
        let dir = nvmedb_testkit::TmpDir::new("html");
        let ok = dir.join("ok.svg");
        std::fs::write(&ok, "<?xml version=\"1.0\"?>\n<svg width=\"10\" height=\"5\"><rect/></svg>\n")
            .unwrap();
        assert_eq!(inline_svg(&ok).unwrap(), "<svg width=\"10\" height=\"5\"><rect/></svg>");
        let bad = dir.join("bad.svg");
        std::fs::write(&bad, "<svg><script>alert(1)</script></svg>").unwrap();
        let e = inline_svg(&bad).unwrap_err().to_string();
        assert!(e.contains("bad.svg") && e.contains("script"), "{e}");
        std::fs::write(&bad, "not a plot").unwrap();
        assert!(inline_svg(&bad).unwrap_err().to_string().contains("no <svg>"));
        assert!(inline_svg(&dir.join("missing.svg")).is_err());
    }
}
