//! Reports: turning an experiment's measurements into files a person can read or re-plot.
//!
//! Owns: the results directory layout ([`ResultsDir`], [`latest_runs`]), CSV and JSON writers
//! (every JSON result file embeds the [`crate::machine::RunContext`] and the configuration), the
//! machine-readable run summary (`summary.json`: [`Figure`]s), plain-text summary tables, and
//! plots in PNG and SVG (line charts, grouped bar charts, trace charts, model-vs-measured
//! charts), and HTML pages (escaping, inline SVG, the file writer).
//! Invariants: every failure is a [`ReportError`] naming the file it concerns; a plot is always
//! written in both formats from the same drawing code; every plot can carry footnote lines
//! (emulated-device labels with their achieved latency, the machine).

mod bar_chart;
mod csv;
mod dir;
mod error;
mod flame;
mod glyph;
mod html;
mod json;
mod plot;
mod summary;
mod table;
mod trace_chart;

pub use self::csv::{read_csv, write_csv, CsvWriter};
pub use bar_chart::BarChart;
pub use dir::{latest_runs, utc_timestamp, LatestRun, ResultsDir, SUMMARY_FILE};
pub use error::ReportError;
pub use flame::{
    layer_of, layer_shares, profile_tables, sample_count, top_functions, write_flame_graph, FunctionShare,
};
pub use html::{escape, inline_svg, write_html};
pub use json::{read_doc, read_json, write_json, write_pretty, ResultFile};
pub use plot::{
    font_path, LegendPosition, LineChart, PlotFiles, Series, SeriesStyle, DEFAULT_FONT_PATH, FONT_ENV,
};
pub use summary::{read_summary, write_summary, Figure, Reference, SummaryFile};
pub use table::{Align, TextTable};
pub use trace_chart::{
    kind_color, trace_summary, trace_summary_table, transaction_window, write_trace_csv, TraceChart,
    TraceRow, TraceSummaryRow, TxnWindow,
};

/// Result type of report operations.
pub type Result<T, E = ReportError> = std::result::Result<T, E>;
