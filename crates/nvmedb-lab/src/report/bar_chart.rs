//! Grouped bar charts (PNG and SVG), e.g. each peer engine's throughput relative to nvmedb per
//! workload.
//!
//! Owns: [`BarChart`]. Invariants: every group has one value per series (a missing value is
//! `None` and draws no bar); values are finite and non-negative, or the write fails naming the
//! chart; a reference line (e.g. ratio 1) is drawn when set.

use super::plot::{err, fmt_tick, page, write_plot, DrawResult, Figure, PlotFiles, SERIES_COLORS};
use super::{ReportError, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// A grouped bar chart: one group per label, one bar per series in each group.
#[derive(Debug, Clone)]
pub struct BarChart {
    title: String,
    y_label: String,
    subtitle: Option<String>,
    footnotes: Vec<String>,
    groups: Vec<String>,
    series: Vec<(String, Vec<Option<f64>>)>,
    reference: Option<f64>,
    size: (u32, u32),
}

impl BarChart {
    /// An empty chart with these groups (x axis labels).
    pub fn new(title: impl Into<String>, y_label: impl Into<String>, groups: Vec<String>) -> Self {
        Self {
            title: title.into(),
            y_label: y_label.into(),
            subtitle: None,
            footnotes: Vec::new(),
            groups,
            series: Vec::new(),
            reference: None,
            size: (1100, 620),
        }
    }

    /// A line under the title.
    pub fn subtitle(mut self, s: impl Into<String>) -> Self {
        self.subtitle = Some(s.into());
        self
    }

    /// A footnote line (configuration, machine).
    pub fn footnote(mut self, s: impl Into<String>) -> Self {
        self.footnotes.push(s.into());
        self
    }

    /// A horizontal reference line at `y`.
    pub fn reference(mut self, y: f64) -> Self {
        self.reference = Some(y);
        self
    }

    /// One series: a value per group, in group order.
    pub fn series(mut self, name: impl Into<String>, values: Vec<Option<f64>>) -> Self {
        self.series.push((name.into(), values));
        self
    }

    /// Writes `<dir>/<stem>.png` and `<dir>/<stem>.svg`.
    pub fn write(&self, dir: impl AsRef<Path>, stem: &str) -> Result<PlotFiles> {
        let dir = dir.as_ref();
        let invalid = |detail: String| ReportError::InvalidData {
            path: dir.join(format!("{stem}.png")),
            detail: format!("bar chart `{}`: {detail}", self.title),
        };
        if self.groups.is_empty() || self.series.is_empty() {
            return Err(invalid("no groups or no series".into()));
        }
        for (name, v) in &self.series {
            if v.len() != self.groups.len() {
                return Err(invalid(format!(
                    "series `{name}` has {} values for {} groups",
                    v.len(),
                    self.groups.len()
                )));
            }
            if v.iter().flatten().any(|y| !y.is_finite() || *y < 0.0) {
                return Err(invalid(format!("series `{name}` has a negative, NaN or infinite value")));
            }
        }
        write_plot(self, dir, stem)
    }
}

impl Figure for BarChart {
    fn size(&self) -> (u32, u32) {
        self.size
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult {
        let area = page(root, &self.title, self.subtitle.as_deref(), &self.footnotes)?;
        let top = self
            .series
            .iter()
            .flat_map(|(_, v)| v.iter().flatten().copied())
            .chain(self.reference)
            .fold(0.0f64, f64::max);
        let y_hi = if top > 0.0 { top * 1.15 } else { 1.0 };
        let n = self.groups.len();
        let groups = self.groups.clone();
        let label_font = ("sans-serif", 15.0);
        let mut chart = ChartBuilder::on(&area)
            .margin(12)
            .margin_right(32)
            .x_label_area_size(45)
            .y_label_area_size(90)
            .build_cartesian_2d(0.0..n as f64, 0.0..y_hi)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n * 2 + 1)
            .x_label_formatter(&|x: &f64| {
                let i = x.floor() as usize;
                if (x - i as f64 - 0.5).abs() < 1e-6 && i < groups.len() {
                    groups[i].clone()
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&fmt_tick)
            .y_desc(self.y_label.as_str())
            .label_style(label_font)
            .axis_desc_style(label_font)
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(err)?;
        let k = self.series.len() as f64;
        let width = 0.8 / k;
        for (si, (name, values)) in self.series.iter().enumerate() {
            let c = SERIES_COLORS[si % SERIES_COLORS.len()];
            let bars = values.iter().enumerate().filter_map(|(g, v)| {
                let x0 = g as f64 + 0.1 + si as f64 * width;
                v.map(|y| Rectangle::new([(x0, 0.0), (x0 + width * 0.92, y)], c.filled()))
            });
            chart
                .draw_series(bars)
                .map_err(err)?
                .label(name.as_str())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], c.filled()));
            let labels = values.iter().enumerate().filter_map(|(g, v)| {
                let x = g as f64 + 0.1 + (si as f64 + 0.5) * width;
                v.map(|y| Text::new(fmt_tick(&y), (x - width * 0.4, y + y_hi * 0.03), ("sans-serif", 12.0)))
            });
            chart.draw_series(labels).map_err(err)?;
        }
        if let Some(r) = self.reference {
            let style = ShapeStyle::from(&BLACK).stroke_width(1);
            chart.draw_series(LineSeries::new(vec![(0.0, r), (n as f64, r)], style)).map_err(err)?;
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
