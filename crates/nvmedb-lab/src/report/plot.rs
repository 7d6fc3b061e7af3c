//! Plots in PNG and SVG with `plotters`: the font, the shared page layout (title, subtitle,
//! footnotes), and line charts.
//!
//! Owns: loading the one font all plot text uses, `LineChart`, and `write_plot`, which draws
//! the same figure on a bitmap and an SVG backend. Invariants: a plot is written in both
//! formats or an error names the file that failed; a missing font fails with an error naming
//! the font file and the package that provides it, before any file is created.

use super::glyph::PngText;
use super::{ReportError, Result};
use ab_glyph::FontRef;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Font used when [`FONT_ENV`] is not set (Debian/Ubuntu package `fonts-dejavu-core`).
pub const DEFAULT_FONT_PATH: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
/// Environment variable naming another TrueType/OpenType font file for plot text.
pub const FONT_ENV: &str = "NVMEDB_PLOT_FONT";

/// The font file plots use: `$NVMEDB_PLOT_FONT`, else [`DEFAULT_FONT_PATH`].
pub fn font_path() -> PathBuf {
    std::env::var_os(FONT_ENV).map(PathBuf::from).unwrap_or_else(|| PathBuf::from(DEFAULT_FONT_PATH))
}

/// Reads and checks a font file for plot text. The error names the file and how to get it.
pub fn load_font(path: &Path) -> Result<&'static [u8]> {
    let bytes = std::fs::read(path).map_err(|e| ReportError::Font {
        path: path.to_path_buf(),
        detail: format!(
            "cannot read the plot font ({e}); install it (Debian: apt-get install fonts-dejavu-core) \
             or set {FONT_ENV} to a .ttf file"
        ),
    })?;
    if FontRef::try_from_slice(&bytes).is_err() {
        return Err(ReportError::Font {
            path: path.to_path_buf(),
            detail: format!("not a TrueType/OpenType font file; set {FONT_ENV} to a .ttf file"),
        });
    }
    // plotters keeps a &'static reference to its fonts; this happens once per process.
    Ok(Box::leak(bytes.into_boxed_slice()))
}

/// Registers the plot font with plotters once per process and returns it for [`PngText`].
pub(crate) fn ensure_font() -> Result<FontRef<'static>> {
    static LOADED: OnceLock<std::result::Result<FontRef<'static>, (PathBuf, String)>> = OnceLock::new();
    let r = LOADED.get_or_init(|| {
        let path = font_path();
        let as_pair = |e: ReportError| match e {
            ReportError::Font { path, detail } => (path, detail),
            other => (path.clone(), other.to_string()),
        };
        let bytes = load_font(&path).map_err(as_pair)?;
        let bad = || (path.clone(), "not a TrueType/OpenType font file".to_string());
        let font = FontRef::try_from_slice(bytes).map_err(|_| bad())?;
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).map_err(|_| bad())?;
        Ok(font)
    });
    r.clone().map_err(|(path, detail)| ReportError::Font { path, detail })
}

/// The two files of one plot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlotFiles {
    /// The bitmap.
    pub png: PathBuf,
    /// The vector version.
    pub svg: PathBuf,
}

/// Why drawing on a plotters backend failed (the backend's error, as text: plotters' errors are
/// generic over the backend).
#[derive(Debug)]
pub(crate) struct DrawError(String);

pub(crate) type DrawResult = std::result::Result<(), DrawError>;

/// A figure that can draw itself on any plotters backend.
pub(crate) trait Figure {
    /// Canvas size in pixels.
    fn size(&self) -> (u32, u32);
    /// Draws the whole figure on `root`.
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult;
}

pub(crate) fn err<E: std::fmt::Display>(e: E) -> DrawError {
    DrawError(e.to_string())
}

/// Draws `fig` into `<dir>/<stem>.png` and `<dir>/<stem>.svg`.
pub(crate) fn write_plot(fig: &impl Figure, dir: &Path, stem: &str) -> Result<PlotFiles> {
    let font = ensure_font()?;
    let files = PlotFiles { png: dir.join(format!("{stem}.png")), svg: dir.join(format!("{stem}.svg")) };
    let plot_err = |path: &Path| {
        let path = path.to_path_buf();
        move |e: DrawError| ReportError::Plot { path, detail: e.0 }
    };
    {
        let root = PngText::new(BitMapBackend::new(&files.png, fig.size()), font).into_drawing_area();
        fig.draw(&root).map_err(plot_err(&files.png))?;
        root.present().map_err(err).map_err(plot_err(&files.png))?;
    }
    {
        let root = SVGBackend::new(&files.svg, fig.size()).into_drawing_area();
        fig.draw(&root).map_err(plot_err(&files.svg))?;
        root.present().map_err(err).map_err(plot_err(&files.svg))?;
    }
    // The backends report some write failures only on drop; check the files exist.
    for p in [&files.png, &files.svg] {
        let meta = std::fs::metadata(p).map_err(ReportError::io(p, "write"))?;
        if meta.len() == 0 {
            return Err(ReportError::Plot { path: p.clone(), detail: "empty file written".into() });
        }
    }
    Ok(files)
}

const TITLE_PX: u32 = 22;
const TEXT_PX: u32 = 15;
const NOTE_PX: u32 = 13;

/// Fills white, draws the title, subtitle and footnotes, and returns the area left for the
/// chart itself.
pub(crate) fn page<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    subtitle: Option<&str>,
    footnotes: &[String],
) -> std::result::Result<DrawingArea<DB, Shift>, DrawError> {
    root.fill(&WHITE).map_err(err)?;
    let (w, h) = root.dim_in_pixel();
    let top = 8 + TITLE_PX + 6 + subtitle.map_or(0, |_| TEXT_PX + 4);
    let bottom = 6 + footnotes.len() as u32 * (NOTE_PX + 4);
    let centre = Pos::new(HPos::Center, VPos::Top);
    let title_style = TextStyle::from(("sans-serif", TITLE_PX as f64).into_font()).pos(centre);
    root.draw_text(title, &title_style, (w as i32 / 2, 8)).map_err(err)?;
    if let Some(s) = subtitle {
        let style = TextStyle::from(("sans-serif", TEXT_PX as f64).into_font())
            .color(&RGBColor(60, 60, 60))
            .pos(centre);
        root.draw_text(s, &style, (w as i32 / 2, (8 + TITLE_PX + 6) as i32)).map_err(err)?;
    }
    let note_style = TextStyle::from(("sans-serif", NOTE_PX as f64).into_font()).color(&RGBColor(70, 70, 70));
    for (i, n) in footnotes.iter().enumerate() {
        let y = h.saturating_sub(bottom) + 4 + i as u32 * (NOTE_PX + 4);
        root.draw_text(n, &note_style, (10, y as i32)).map_err(err)?;
    }
    let (_, rest) = root.split_vertically(top);
    let (chart, _) = rest.split_vertically(h.saturating_sub(top + bottom));
    Ok(chart)
}

/// A tick label without needless digits: 40000, 2.5, 0.125.
pub(crate) fn fmt_tick(v: &f64) -> String {
    let a = v.abs();
    let s = if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Distinct colours for series, in order (twelve: `lab tier` plots eleven configurations, each
/// of which must be told apart).
pub(crate) const SERIES_COLORS: [RGBColor; 12] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(0, 0, 128),
    RGBColor(0, 0, 0),
];

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeriesStyle {
    /// A line through the points, with a marker on each.
    LineMarkers,
    /// A plain line (model curves).
    Line,
    /// A dashed line.
    Dashed,
    /// Markers only (measured points).
    Markers,
}

/// One named series of (x, y) points.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// Points, drawn in the given order.
    pub points: Vec<(f64, f64)>,
    /// How to draw it.
    pub style: SeriesStyle,
    /// Colour index into the palette; `None` takes the series' position.
    pub color: Option<usize>,
}

impl Series {
    /// A line-with-markers series.
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Self { name: name.into(), points, style: SeriesStyle::LineMarkers, color: None }
    }
    /// Sets the drawing style.
    pub fn style(mut self, style: SeriesStyle) -> Self {
        self.style = style;
        self
    }
    /// The same series in percent of its y at `x` (e.g. each device's 100 % buffer value).
    /// `None` if no point has that x or its y is 0.
    pub fn normalised_at(&self, x: f64) -> Option<Series> {
        let base = self.points.iter().find(|p| p.0 == x)?.1;
        if base == 0.0 || !base.is_finite() {
            return None;
        }
        let points = self.points.iter().map(|&(px, py)| (px, 100.0 * py / base)).collect();
        Some(Series { points, ..self.clone() })
    }
    /// Sets the palette colour index (to pair a model curve with its measured points).
    pub fn color(mut self, index: usize) -> Self {
        self.color = Some(index);
        self
    }
}

/// Where the legend goes inside the plotting area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LegendPosition {
    /// Top left corner.
    UpperLeft,
    /// Top right corner.
    UpperRight,
    /// Bottom left corner.
    LowerLeft,
    /// Bottom right corner.
    LowerRight,
}

/// A chart of several named (x, y) series: throughput vs buffer % per device, normalised
/// curves, model curves with measured points.
#[derive(Debug, Clone, PartialEq)]
pub struct LineChart {
    /// Title at the top.
    pub title: String,
    /// Optional line under the title.
    pub subtitle: Option<String>,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// Logarithmic x axis (x values must be > 0).
    pub log_x: bool,
    /// Y range; `None` is 0 to 110 % of the largest y (or the smallest y if negative).
    pub y_range: Option<(f64, f64)>,
    /// X range; `None` fits the data.
    pub x_range: Option<(f64, f64)>,
    /// Labelled x positions on a log x axis (e.g. the buffer percentages swept); `None`, or a
    /// linear axis, lets plotters choose.
    pub x_ticks: Option<Vec<f64>>,
    /// The series.
    pub series: Vec<Series>,
    /// Lines under the chart: emulated-device labels with achieved latency, the machine.
    pub footnotes: Vec<String>,
    /// Legend placement.
    pub legend: LegendPosition,
    /// Canvas size in pixels.
    pub size: (u32, u32),
}

impl LineChart {
    /// An empty chart with a title and axis labels.
    pub fn new(title: impl Into<String>, x_label: impl Into<String>, y_label: impl Into<String>) -> Self {
        Self {
            title: title.into(),
            subtitle: None,
            x_label: x_label.into(),
            y_label: y_label.into(),
            log_x: false,
            y_range: None,
            x_range: None,
            x_ticks: None,
            series: Vec::new(),
            footnotes: Vec::new(),
            legend: LegendPosition::LowerRight,
            size: (900, 600),
        }
    }
    /// Sets the subtitle.
    pub fn subtitle(mut self, s: impl Into<String>) -> Self {
        self.subtitle = Some(s.into());
        self
    }
    /// Makes the x axis logarithmic.
    pub fn log_x(mut self, on: bool) -> Self {
        self.log_x = on;
        self
    }
    /// Fixes the y range.
    pub fn y_range(mut self, lo: f64, hi: f64) -> Self {
        self.y_range = Some((lo, hi));
        self
    }
    /// Fixes the x range.
    pub fn x_range(mut self, lo: f64, hi: f64) -> Self {
        self.x_range = Some((lo, hi));
        self
    }
    /// Labels the x axis at exactly these values.
    pub fn x_ticks(mut self, ticks: Vec<f64>) -> Self {
        self.x_ticks = Some(ticks);
        self
    }
    /// Adds a series.
    pub fn series(mut self, s: Series) -> Self {
        self.series.push(s);
        self
    }
    /// Adds a footnote line.
    pub fn footnote(mut self, note: impl Into<String>) -> Self {
        self.footnotes.push(note.into());
        self
    }
    /// Sets the legend position.
    pub fn legend(mut self, pos: LegendPosition) -> Self {
        self.legend = pos;
        self
    }

    /// Writes `<dir>/<stem>.png` and `<dir>/<stem>.svg`.
    pub fn write(&self, dir: impl AsRef<Path>, stem: &str) -> Result<PlotFiles> {
        let dir = dir.as_ref();
        let invalid = |detail: &str| ReportError::InvalidData {
            path: dir.join(format!("{stem}.png")),
            detail: format!("chart `{}`: {detail}", self.title),
        };
        let pts = || self.series.iter().flat_map(|s| s.points.iter());
        if pts().next().is_none() {
            return Err(invalid("no data points"));
        }
        if pts().any(|(x, y)| !x.is_finite() || !y.is_finite()) {
            return Err(invalid("a point is NaN or infinite"));
        }
        if self.log_x && pts().any(|(x, _)| *x <= 0.0) {
            return Err(invalid("log x axis needs x > 0"));
        }
        write_plot(self, dir, stem)
    }

    fn ranges(&self) -> ((f64, f64), (f64, f64)) {
        let pts: Vec<(f64, f64)> = self.series.iter().flat_map(|s| s.points.iter().copied()).collect();
        let (mut x0, mut x1) = pts.iter().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
        let (y0, y1) = pts.iter().fold((0.0f64, f64::MIN), |(a, b), p| (a.min(p.1), b.max(p.1)));
        if self.log_x {
            x0 /= 1.3;
            x1 *= 1.3;
        } else {
            let pad = ((x1 - x0) * 0.03).max(1e-9);
            x0 -= pad;
            x1 += pad;
        }
        let y_hi = if y1 > 0.0 { y1 * 1.1 } else { 1.0 };
        (self.x_range.unwrap_or((x0, x1)), self.y_range.unwrap_or((y0 * 1.1, y_hi)))
    }

    fn draw_in<DB, X>(&self, area: &DrawingArea<DB, Shift>, x_spec: X, y: (f64, f64)) -> DrawResult
    where
        DB: DrawingBackend,
        X: AsRangedCoord<Value = f64>,
        X::CoordDescType: ValueFormatter<f64>,
    {
        let mut chart = ChartBuilder::on(area)
            .margin(12)
            .margin_right(32)
            .x_label_area_size(45)
            .y_label_area_size(90)
            .build_cartesian_2d(x_spec, y.0..y.1)
            .map_err(err)?;
        let label_font = ("sans-serif", TEXT_PX as f64);
        chart
            .configure_mesh()
            .x_desc(self.x_label.as_str())
            .y_desc(self.y_label.as_str())
            .x_label_formatter(&fmt_tick)
            .y_label_formatter(&fmt_tick)
            .label_style(label_font)
            .axis_desc_style(label_font)
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(err)?;
        for (i, s) in self.series.iter().enumerate() {
            let c = SERIES_COLORS[s.color.unwrap_or(i) % SERIES_COLORS.len()];
            let line = ShapeStyle::from(&c).stroke_width(2);
            let pts = s.points.clone();
            let legend_style = line;
            let anno = match s.style {
                SeriesStyle::Line | SeriesStyle::LineMarkers => {
                    chart.draw_series(LineSeries::new(pts.clone(), line)).map_err(err)?
                }
                SeriesStyle::Dashed => {
                    chart.draw_series(DashedLineSeries::new(pts.clone(), 8, 5, line)).map_err(err)?
                }
                SeriesStyle::Markers => {
                    chart.draw_series(pts.iter().map(|p| Circle::new(*p, 5, c.filled()))).map_err(err)?
                }
            };
            let marker = s.style == SeriesStyle::Markers;
            let path_style = if marker { ShapeStyle::from(&TRANSPARENT) } else { legend_style };
            let radius = if s.style == SeriesStyle::Line || s.style == SeriesStyle::Dashed { 0 } else { 4 };
            // A gap in the legend line marks a dashed series.
            let second_from = if s.style == SeriesStyle::Dashed { 13 } else { 8 };
            anno.label(s.name.as_str()).legend(move |(x, y)| {
                EmptyElement::at((x, y))
                    + PathElement::new(vec![(0, 0), (8, 0)], path_style)
                    + PathElement::new(vec![(second_from, 0), (21, 0)], path_style)
                    + Circle::new((10, 0), radius, c.filled())
            });
            if s.style == SeriesStyle::LineMarkers {
                chart.draw_series(pts.iter().map(|p| Circle::new(*p, 4, c.filled()))).map_err(err)?;
            }
        }
        let pos = match self.legend {
            LegendPosition::UpperLeft => SeriesLabelPosition::UpperLeft,
            LegendPosition::UpperRight => SeriesLabelPosition::UpperRight,
            LegendPosition::LowerLeft => SeriesLabelPosition::LowerLeft,
            LegendPosition::LowerRight => SeriesLabelPosition::LowerRight,
        };
        chart
            .configure_series_labels()
            .position(pos)
            .label_font(label_font)
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(150, 150, 150))
            .draw()
            .map_err(err)
    }
}

impl Figure for LineChart {
    fn size(&self) -> (u32, u32) {
        self.size
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult {
        let area = page(root, &self.title, self.subtitle.as_deref(), &self.footnotes)?;
        let ((x0, x1), y) = self.ranges();
        match (self.log_x, &self.x_ticks) {
            (true, None) => self.draw_in(&area, (x0..x1).log_scale(), y),
            (true, Some(t)) => self.draw_in(&area, (x0..x1).log_scale().with_key_points(t.clone()), y),
            // plotters cannot format a linear axis with key points; it picks its own ticks.
            (false, _) => self.draw_in(&area, x0..x1, y),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_bad_font_is_named() {
        let missing = Path::new("/nonexistent/fonts/NoSuch.ttf");
        let e = load_font(missing).expect_err("missing font");
        let msg = e.to_string();
        assert!(msg.contains("/nonexistent/fonts/NoSuch.ttf") && msg.contains("fonts-dejavu-core"), "{msg}");
        let not_font = nvmedb_testkit::TmpDir::path_only("not-a-font.ttf");
        std::fs::write(&not_font, b"hello").expect("write");
        let msg = load_font(&not_font).expect_err("not a font").to_string();
        assert!(msg.contains("not a TrueType"), "{msg}");
    }

    #[test]
    fn normalising_a_series() {
        let s = Series::new("d", vec![(1.0, 50.0), (100.0, 200.0)]);
        assert_eq!(s.normalised_at(100.0).expect("has x=100").points, vec![(1.0, 25.0), (100.0, 100.0)]);
        assert!(s.normalised_at(7.0).is_none());
        assert!(Series::new("z", vec![(1.0, 0.0)]).normalised_at(1.0).is_none());
    }

    #[test]
    fn tick_labels_drop_needless_digits() {
        assert_eq!(fmt_tick(&40000.0), "40000");
        assert_eq!(fmt_tick(&0.0), "0");
        assert_eq!(fmt_tick(&2.5), "2.5");
        assert_eq!(fmt_tick(&10.0), "10");
        assert_eq!(fmt_tick(&0.125), "0.125");
        assert_eq!(fmt_tick(&-150.4), "-150");
    }
}
