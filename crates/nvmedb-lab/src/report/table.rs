//! Plain-text summary tables for the terminal and for `summary.txt`.
//!
//! Owns: `TextTable`. Invariants: every rendered line of the table has the same width; a row
//! with fewer cells than the header is padded with empty cells, one with more is cut.

use std::fmt;

/// Horizontal alignment of a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text flush left.
    Left,
    /// Text flush right (numbers).
    Right,
}

/// A table of strings with a header row, printed with aligned columns.
#[derive(Debug, Clone, Default)]
pub struct TextTable {
    title: Option<String>,
    header: Vec<String>,
    align: Vec<Align>,
    rows: Vec<Vec<String>>,
    notes: Vec<String>,
}

impl TextTable {
    /// A table with these column headings. Columns are right-aligned except the first.
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Self {
        let header: Vec<String> = header.into_iter().map(Into::into).collect();
        let align = (0..header.len()).map(|i| if i == 0 { Align::Left } else { Align::Right }).collect();
        Self { header, align, ..Self::default() }
    }

    /// Sets a title line printed above the table.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// Sets the alignment of column `col` (ignored if out of range).
    pub fn align(mut self, col: usize, align: Align) -> Self {
        if let Some(a) = self.align.get_mut(col) {
            *a = align;
        }
        self
    }

    /// Appends a row.
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) -> &mut Self {
        let mut cells: Vec<String> = cells.into_iter().map(Into::into).collect();
        cells.resize(self.header.len(), String::new());
        self.rows.push(cells);
        self
    }

    /// Appends a note line printed under the table (emulation labels, machine).
    pub fn note(&mut self, note: impl Into<String>) -> &mut Self {
        self.notes.push(note.into());
        self
    }

    /// Number of data rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether the table has no data rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    fn widths(&self) -> Vec<usize> {
        let mut w: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate() {
                w[i] = w[i].max(c.chars().count());
            }
        }
        w
    }

    fn line(&self, cells: &[String], widths: &[usize]) -> String {
        let parts: Vec<String> = cells
            .iter()
            .zip(widths)
            .zip(&self.align)
            .map(|((c, &w), a)| match a {
                Align::Left => format!("{c:<w$}"),
                Align::Right => format!("{c:>w$}"),
            })
            .collect();
        parts.join("  ")
    }
}

impl fmt::Display for TextTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let widths = self.widths();
        if let Some(t) = &self.title {
            writeln!(f, "{t}")?;
        }
        writeln!(f, "{}", self.line(&self.header, &widths))?;
        let total = widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
        writeln!(f, "{}", "-".repeat(total))?;
        for r in &self.rows {
            writeln!(f, "{}", self.line(r, &widths))?;
        }
        for n in &self.notes {
            writeln!(f, "{n}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up() {
        let mut t = TextTable::new(["device", "buffer %", "tps"]).title("select");
        t.row(["optane (emulated)", "1", "41000"]).row(["nand", "100"]).note("machine: x");
        let s = t.to_string();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "select");
        assert_eq!(lines[1].len(), lines[3].len());
        assert_eq!(lines[3].len(), lines[4].len());
        assert!(lines[3].ends_with("41000"));
        assert!(lines[4].starts_with("nand "));
        assert_eq!(lines[5], "machine: x");
        assert_eq!(t.len(), 2);
    }
}
