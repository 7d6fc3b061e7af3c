//! Grouped bar charts in PNG and SVG: one group of bars per category (a workload), one bar per
//! series (an engine) in each group, each bar labelled with its value.
//!
//! Owns: [`BarChart`]. Invariants: every series has one value per category (checked before any
//! file is written, naming the chart; NaN marks a missing value and draws no bar); a logarithmic
//! y axis needs positive values; a reference line (e.g. ratio 1), when set, is inside the y
//! range; the figure is drawn by the same page layout (title, subtitle, footnotes) as the line
//! charts.

use super::plot::{err, fmt_tick, page, write_plot, DrawResult, Figure, PlotFiles, SERIES_COLORS};
use super::{ReportError, Result};
use plotters::coord::ranged1d::{AsRangedCoord, SegmentValue, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

/// A grouped bar chart: categories along x, one bar per series in each.
#[derive(Debug, Clone, PartialEq)]
pub struct BarChart {
    /// Title at the top.
    pub title: String,
    /// Optional line under the title.
    pub subtitle: Option<String>,
    /// Y axis label.
    pub y_label: String,
    /// Category names, left to right.
    pub categories: Vec<String>,
    /// (series name, one value per category; NaN: no value, no bar).
    pub series: Vec<(String, Vec<f64>)>,
    /// A horizontal reference line across the chart (e.g. 1 on a ratio chart).
    pub reference: Option<f64>,
    /// Logarithmic y axis (values must be > 0).
    pub log_y: bool,
    /// Lines under the chart (the machine, what a peer's memory means).
    pub footnotes: Vec<String>,
    /// Canvas size in pixels.
    pub size: (u32, u32),
}

impl BarChart {
    /// An empty chart over `categories`.
    pub fn new(
        title: impl Into<String>,
        y_label: impl Into<String>,
        categories: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self {
            title: title.into(),
            subtitle: None,
            y_label: y_label.into(),
            categories: categories.into_iter().map(Into::into).collect(),
            series: Vec::new(),
            reference: None,
            log_y: false,
            footnotes: Vec::new(),
            size: (1000, 600),
        }
    }
    /// Sets the subtitle.
    pub fn subtitle(mut self, s: impl Into<String>) -> Self {
        self.subtitle = Some(s.into());
        self
    }
    /// Adds a series: one value per category.
    pub fn series(mut self, name: impl Into<String>, values: Vec<f64>) -> Self {
        self.series.push((name.into(), values));
        self
    }
    /// Makes the y axis logarithmic.
    pub fn log_y(mut self, on: bool) -> Self {
        self.log_y = on;
        self
    }
    /// Draws a horizontal reference line at `y`.
    pub fn reference(mut self, y: f64) -> Self {
        self.reference = Some(y);
        self
    }

    /// Adds a footnote line.
    pub fn footnote(mut self, note: impl Into<String>) -> Self {
        self.footnotes.push(note.into());
        self
    }

    /// Writes `<dir>/<stem>.png` and `<dir>/<stem>.svg`.
    pub fn write(&self, dir: impl AsRef<Path>, stem: &str) -> Result<PlotFiles> {
        let dir = dir.as_ref();
        let invalid = |detail: String| ReportError::InvalidData {
            path: dir.join(format!("{stem}.png")),
            detail: format!("bar chart `{}`: {detail}", self.title),
        };
        if self.categories.is_empty() || self.series.is_empty() {
            return Err(invalid("no categories or no series".into()));
        }
        for (name, values) in &self.series {
            if values.len() != self.categories.len() {
                return Err(invalid(format!(
                    "series `{name}` has {} values for {} categories",
                    values.len(),
                    self.categories.len()
                )));
            }
            if values.iter().any(|v| v.is_infinite() || (self.log_y && *v <= 0.0)) {
                let want = if self.log_y { "positive (log axis)" } else { "finite" };
                return Err(invalid(format!("series `{name}` has a value that is not {want}")));
            }
        }
        write_plot(self, dir, stem)
    }

    fn y_range(&self) -> (f64, f64) {
        let values = || {
            self.series
                .iter()
                .flat_map(|(_, v)| v.iter().copied())
                .chain(self.reference)
                .filter(|v| !v.is_nan())
        };
        let hi = values().fold(f64::MIN, f64::max);
        if self.log_y {
            let lo = values().fold(f64::MAX, f64::min);
            (lo / 3.0, hi * 3.0)
        } else {
            (values().fold(0.0, f64::min) * 1.1, if hi > 0.0 { hi * 1.15 } else { 1.0 })
        }
    }

    fn draw_in<DB, Y>(&self, root: &DrawingArea<DB, Shift>, area: &DrawingArea<DB, Shift>, y: Y) -> DrawResult
    where
        DB: DrawingBackend,
        Y: AsRangedCoord<Value = f64>,
        Y::CoordDescType: ValueFormatter<f64>,
    {
        let n = self.categories.len();
        let label_font = ("sans-serif", 15.0);
        let mut chart = ChartBuilder::on(area)
            .margin(12)
            .margin_right(32)
            .x_label_area_size(45)
            .y_label_area_size(90)
            .build_cartesian_2d((0..n).into_segmented(), y)
            .map_err(err)?;
        let cats = self.categories.clone();
        let x_fmt = move |v: &SegmentValue<usize>| match v {
            SegmentValue::CenterOf(i) => cats.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        };
        chart
            .configure_mesh()
            .disable_x_mesh()
            .y_desc(self.y_label.as_str())
            .x_labels(n)
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&fmt_tick)
            .label_style(label_font)
            .axis_desc_style(label_font)
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(err)?;
        // Bars are drawn in backend pixels: a segmented axis places only whole segments.
        let (y_lo, _) = self.y_range();
        let base = chart.backend_coord(&(SegmentValue::Exact(0), y_lo)).1;
        let k = self.series.len();
        let value_style = TextStyle::from(("sans-serif", 12.0).into_font())
            .color(&RGBColor(40, 40, 40))
            .pos(Pos::new(HPos::Center, VPos::Bottom));
        for (si, (name, values)) in self.series.iter().enumerate() {
            let c = SERIES_COLORS[si % SERIES_COLORS.len()];
            for (i, v) in values.iter().enumerate().filter(|(_, v)| !v.is_nan()) {
                let left = chart.backend_coord(&(SegmentValue::Exact(i), *v)).0;
                let right = chart.backend_coord(&(SegmentValue::Exact(i + 1), *v)).0;
                let top = chart.backend_coord(&(SegmentValue::Exact(i), *v)).1;
                let width = (right - left) as f64 * 0.8 / k as f64;
                let x0 = left + ((right - left) as f64 * 0.1 + width * si as f64) as i32;
                let x1 = x0 + width.max(1.0) as i32 - 1;
                root.draw(&Rectangle::new([(x0, top), (x1, base)], c.filled())).map_err(err)?;
                root.draw_text(&fmt_value(*v), &value_style, ((x0 + x1) / 2, top - 2)).map_err(err)?;
            }
            // An empty series carries the legend entry.
            chart
                .draw_series(std::iter::empty::<Circle<(SegmentValue<usize>, f64), i32>>())
                .map_err(err)?
                .label(name.as_str())
                .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], c.filled()));
        }
        if let Some(r) = self.reference {
            let (x0, y) = chart.backend_coord(&(SegmentValue::Exact(0), r));
            let x1 = chart.backend_coord(&(SegmentValue::Exact(n), r)).0;
            root.draw(&PathElement::new(vec![(x0, y), (x1, y)], RGBColor(60, 60, 60).stroke_width(2)))
                .map_err(err)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .label_font(label_font)
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(150, 150, 150))
            .draw()
            .map_err(err)
    }
}

/// A bar's label: 3 significant digits, with k/M for thousands and millions.
fn fmt_value(v: f64) -> String {
    let a = v.abs();
    let (x, suffix) = if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let digits = if x.abs() >= 100.0 {
        0
    } else if x.abs() >= 10.0 {
        1
    } else {
        2
    };
    format!("{x:.digits$}{suffix}")
}

impl Figure for BarChart {
    fn size(&self) -> (u32, u32) {
        self.size
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult {
        let area = page(root, &self.title, self.subtitle.as_deref(), &self.footnotes)?;
        let (lo, hi) = self.y_range();
        if self.log_y {
            self.draw_in(root, &area, (lo..hi).log_scale())
        } else {
            self.draw_in(root, &area, lo..hi)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar_labels_are_short() {
        assert_eq!(fmt_value(12345.0), "12.3k");
        assert_eq!(fmt_value(987.0), "987");
        assert_eq!(fmt_value(2.5), "2.50");
        assert_eq!(fmt_value(3_400_000.0), "3.40M");
    }

    #[test]
    fn a_chart_is_written_and_bad_data_is_named() {
        let dir = nvmedb_testkit::TmpDir::new("bar-chart");
        let chart = BarChart::new("tps", "transactions / s", ["select", "update"])
            .series("a", vec![12000.0, 300.0])
            .series("b", vec![9000.0, 450.0])
            .log_y(true)
            .footnote("a machine");
        let files = chart.write(&dir, "bars").expect("written");
        assert!(std::fs::metadata(&files.png).unwrap().len() > 0);
        let svg = std::fs::read_to_string(&files.svg).unwrap();
        assert!(svg.contains("12.0k") && svg.contains("select"), "values and categories are drawn");
        let short = BarChart::new("t", "y", ["x", "z"]).series("a", vec![1.0]);
        let e = short.write(&dir, "short").unwrap_err().to_string();
        assert!(e.contains("series `a` has 1 values for 2 categories"), "{e}");
        let zero = BarChart::new("t", "y", ["x"]).series("a", vec![0.0]).log_y(true);
        assert!(zero.write(&dir, "zero").is_err());
    }
}
