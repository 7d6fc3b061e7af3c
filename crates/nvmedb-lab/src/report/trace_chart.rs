//! Trace charts like seed 000 Figs. 8/10 and seed 001 Figs. 7/8: one row per client over time,
//! coloured intervals per kind, a legend of the kinds, and footnotes; plus the trace's CSV.
//!
//! Owns: `TraceChart`, the colour of each `TraceKind`, `write_trace_csv`, and
//! [`transaction_window`], which picks the window a chart shows. Invariants: rows keep the
//! trace's thread order (first client on top); within a row intervals are drawn by rising
//! priority so a read inside a CPU span stays visible; an interval narrower than a pixel is
//! widened to one pixel so short I/Os still show; a chosen window shows every client's
//! `want` whole transactions, or names each client that has fewer and why.

use super::plot::{err, fmt_tick, page, write_plot, DrawResult, Figure, PlotFiles};
use super::{CsvWriter, ReportError, Result, TextTable};
use nvmedb::trace::{Interval, Trace, TraceKind};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::{Path, PathBuf};

/// Colour of each kind, following seed 000 Fig. 9 where it has one (red read I/O, light blue
/// write I/O, deep blue log wait) and seed 001 Fig. 7 for CPU (purple).
pub fn kind_color(kind: TraceKind) -> RGBColor {
    match kind {
        TraceKind::Cpu => RGBColor(170, 140, 210),
        TraceKind::DataRead => RGBColor(220, 30, 30),
        TraceKind::DataWrite => RGBColor(110, 200, 245),
        TraceKind::LogWrite => RGBColor(0, 160, 150),
        TraceKind::LogWait => RGBColor(20, 40, 150),
        TraceKind::LockWait => RGBColor(245, 165, 20),
        _ => RGBColor(120, 120, 120),
    }
}

/// One row of the chart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceRow {
    /// Row label (client id).
    pub label: String,
    /// Intervals, ns since the chart's origin.
    pub intervals: Vec<Interval>,
}

/// A chart of one trace window.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceChart {
    /// Title at the top.
    pub title: String,
    /// Optional line under the title.
    pub subtitle: Option<String>,
    /// Lines under the chart (device with achieved latency, machine, dropped intervals).
    pub footnotes: Vec<String>,
    /// One row per client.
    pub rows: Vec<TraceRow>,
    /// Length of the time axis, ns.
    pub duration_ns: u64,
    /// Canvas width in pixels; the height follows from the number of rows.
    pub width: u32,
    /// Write each I/O and wait interval's duration (µs) on it where it fits, as in seed 001
    /// Figs. 7/8.
    pub annotate_durations: bool,
    /// Draw a thin black tick where each interval of this kind starts (a transaction's start,
    /// when each transaction is recorded as one interval of it).
    pub mark_starts: Option<TraceKind>,
}

impl TraceChart {
    /// A chart of every thread of `trace`, time axis from 0 to the last interval's end. Adds a
    /// footnote when intervals were dropped.
    pub fn from_trace(title: impl Into<String>, trace: &Trace) -> Self {
        let rows: Vec<TraceRow> = trace
            .threads
            .iter()
            .map(|t| TraceRow { label: t.label.clone(), intervals: t.intervals.clone() })
            .collect();
        let end = rows.iter().flat_map(|r| r.intervals.iter()).map(|iv| iv.end_ns).max().unwrap_or(0);
        let mut c = Self {
            title: title.into(),
            subtitle: None,
            footnotes: Vec::new(),
            rows,
            duration_ns: end,
            width: 1200,
            annotate_durations: false,
            mark_starts: None,
        };
        if trace.dropped() > 0 {
            c.footnotes.push(format!("{} intervals dropped (trace buffers full)", trace.dropped()));
        }
        c
    }

    /// Sets the subtitle.
    pub fn subtitle(mut self, s: impl Into<String>) -> Self {
        self.subtitle = Some(s.into());
        self
    }

    /// Turns duration labels on I/O and wait intervals on or off.
    pub fn annotate_durations(mut self, on: bool) -> Self {
        self.annotate_durations = on;
        self
    }

    /// Draws a tick at the start of every interval of `kind`.
    pub fn mark_starts(mut self, kind: TraceKind) -> Self {
        self.mark_starts = Some(kind);
        self
    }

    /// Sets the canvas width in pixels.
    pub fn width(mut self, px: u32) -> Self {
        self.width = px;
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
        if self.rows.is_empty() || self.duration_ns == 0 {
            return Err(ReportError::InvalidData {
                path: dir.join(format!("{stem}.png")),
                detail: format!("trace chart `{}`: no intervals", self.title),
            });
        }
        write_plot(self, dir, stem)
    }

    /// Time unit of the axis: (divisor from ns, name).
    fn unit(&self) -> (f64, &'static str) {
        if self.duration_ns <= 20_000_000 {
            (1e3, "µs")
        } else {
            (1e6, "ms")
        }
    }
}

const ROW_PX: u32 = 22;
const LEGEND_PX: u32 = 28;

impl Figure for TraceChart {
    fn size(&self) -> (u32, u32) {
        let rows = self.rows.len() as u32;
        let chrome = 70 + 60 + LEGEND_PX + 20 * (self.footnotes.len() as u32 + 1);
        (self.width, (rows * ROW_PX + chrome).max(300))
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult {
        let area = page(root, &self.title, self.subtitle.as_deref(), &self.footnotes)?;
        let (w, h) = area.dim_in_pixel();
        let (legend_area, plot_area) = area.split_vertically(LEGEND_PX);
        draw_legend(&legend_area)?;
        let (div, unit) = self.unit();
        let t_end = self.duration_ns as f64 / div;
        let n = self.rows.len();
        let label_w = 20 + 8 * self.rows.iter().map(|r| r.label.chars().count()).max().unwrap_or(4) as u32;
        let mut chart = ChartBuilder::on(&plot_area)
            .margin(10)
            .margin_right(32)
            .x_label_area_size(40)
            .y_label_area_size(label_w)
            .build_cartesian_2d(0.0..t_end, 0.0..n as f64)
            .map_err(err)?;
        let font = ("sans-serif", 14.0);
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .x_desc(format!("elapsed time ({unit})"))
            .x_label_formatter(&fmt_tick)
            .label_style(font)
            .axis_desc_style(font)
            .draw()
            .map_err(err)?;
        // Widen sub-pixel intervals to one pixel.
        let plot_w = w.saturating_sub(label_w + 20).max(1) as f64;
        let min_w = t_end / plot_w;
        let mut kinds_by_priority = TraceKind::ALL;
        kinds_by_priority.sort_by_key(|k| k.priority());
        for (row, r) in self.rows.iter().enumerate() {
            // Row 0 on top.
            let y_top = (n - row) as f64 - 0.12;
            let y_bot = (n - row - 1) as f64 + 0.12;
            for kind in kinds_by_priority {
                let style = kind_color(kind).filled();
                let rects = r.intervals.iter().filter(|iv| iv.kind == kind).map(|iv| {
                    let s = iv.start_ns as f64 / div;
                    let e = (iv.end_ns as f64 / div).max(s + min_w);
                    Rectangle::new([(s, y_top), (e, y_bot)], style)
                });
                chart.draw_series(rects).map_err(err)?;
            }
        }
        if let Some(kind) = self.mark_starts {
            for (row, r) in self.rows.iter().enumerate() {
                let (y_top, y_bot) = ((n - row) as f64 - 0.02, (n - row - 1) as f64 + 0.02);
                let ticks = r.intervals.iter().filter(|iv| iv.kind == kind && iv.start_ns > 0).map(|iv| {
                    let x = iv.start_ns as f64 / div;
                    PathElement::new(vec![(x, y_top), (x, y_bot)], BLACK.stroke_width(2))
                });
                chart.draw_series(ticks).map_err(err)?;
            }
        }
        // Row labels at the left of each row.
        let label_style = TextStyle::from(font.into_font()).pos(Pos::new(HPos::Right, VPos::Center));
        for (row, r) in self.rows.iter().enumerate() {
            let (px, py) = chart.backend_coord(&(0.0, (n - row) as f64 - 0.5));
            root.draw_text(&r.label, &label_style, (px - 6, py)).map_err(err)?;
        }
        let _ = h;
        if self.annotate_durations {
            let small =
                TextStyle::from(("sans-serif", 11.0).into_font()).pos(Pos::new(HPos::Center, VPos::Center));
            for (row, r) in self.rows.iter().enumerate() {
                let y_mid = (n - row) as f64 - 0.5;
                for iv in r.intervals.iter().filter(|iv| iv.kind != TraceKind::Cpu) {
                    let text = format!("{:.0}", iv.duration_ns() as f64 / 1e3);
                    let (x0, py) = chart.backend_coord(&(iv.start_ns as f64 / div, y_mid));
                    let (x1, _) = chart.backend_coord(&(iv.end_ns as f64 / div, y_mid));
                    let (tw, _) = root.estimate_text_size(&text, &small).map_err(err)?;
                    if x1 - x0 >= tw as i32 + 4 {
                        let c = kind_color(iv.kind);
                        let light = u32::from(c.0) * 3 + u32::from(c.1) * 6 + u32::from(c.2) > 1300;
                        let style = small.color(if light { &BLACK } else { &WHITE });
                        root.draw_text(&text, &style, ((x0 + x1) / 2, py)).map_err(err)?;
                    }
                }
            }
        }
        Ok(())
    }
}

fn draw_legend<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>) -> DrawResult {
    let style = TextStyle::from(("sans-serif", 14.0).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    let y = (LEGEND_PX / 2) as i32;
    let mut x = 20i32;
    for kind in TraceKind::ALL {
        area.draw(&Rectangle::new([(x, y - 7), (x + 24, y + 7)], kind_color(kind).filled())).map_err(err)?;
        area.draw_text(kind.label(), &style, (x + 30, y)).map_err(err)?;
        let (text_w, _) = area.estimate_text_size(kind.label(), &style).map_err(err)?;
        x += 30 + text_w as i32 + 28;
    }
    Ok(())
}

/// The window a trace chart shows, and what it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct TxnWindow {
    /// Start, ns since the trace epoch.
    pub from_ns: u64,
    /// End, ns since the trace epoch.
    pub to_ns: u64,
    /// Fewest whole transactions any client has inside the window (0 without clients).
    pub min_whole: usize,
    /// Clients with fewer than the wanted whole transactions inside the window, each with the
    /// reason (ready to print as a footnote).
    pub short: Vec<String>,
}

impl TxnWindow {
    /// Length, ns.
    pub fn len_ns(&self) -> u64 {
        self.to_ns - self.from_ns
    }
}

/// Chooses a window of `trace` in which every client shows `want` whole transactions. A
/// transaction is one interval of `txn_kind` (the experiment wraps each transaction in one);
/// a client is a thread that recorded at least one. The window starts in the middle of the
/// trace (`min_ns` before its midpoint's half) and is at least `min_ns` long; it ends when the
/// slowest client has completed `want` transactions after its start. When a client has too few
/// after the middle, the window starts at the beginning of the trace instead; a client with
/// fewer than `want` in the whole trace is named in [`TxnWindow::short`] with the number it
/// completed and the longest interval it was in (what it waited for).
pub fn transaction_window(trace: &Trace, txn_kind: TraceKind, want: usize, min_ns: u64) -> TxnWindow {
    let want = want.max(1);
    let first =
        trace.threads.iter().flat_map(|t| t.intervals.iter()).map(|iv| iv.start_ns).min().unwrap_or(0);
    let mid = first + trace.span_ns() / 2;
    let clients: Vec<(&str, Vec<&Interval>)> = trace
        .threads
        .iter()
        .map(|t| (t.label.as_str(), t.intervals.iter().filter(|iv| iv.kind == txn_kind).collect::<Vec<_>>()))
        .filter(|(_, txns)| !txns.is_empty())
        .collect();
    // The end of each client's `want`-th transaction starting at or after `from` (None: fewer).
    let ends = |from: u64| -> Vec<Option<u64>> {
        clients
            .iter()
            .map(|(_, txns)| {
                let i = txns.partition_point(|iv| iv.start_ns < from);
                txns.get(i + want - 1).map(|iv| iv.end_ns)
            })
            .collect()
    };
    let centred = mid.saturating_sub(min_ns / 2).max(first);
    let (from, e) = match ends(centred) {
        e if e.iter().all(Option::is_some) => (centred, e),
        _ => (first, ends(first)),
    };
    let mut to = from + min_ns;
    let mut short = Vec::new();
    for ((label, txns), end) in clients.iter().zip(&e) {
        match end {
            Some(end) => to = to.max(*end),
            None => {
                // Show all this client did: its last transaction ends the window at the latest.
                if let Some(last) = txns.last() {
                    to = to.max(last.end_ns);
                }
                short.push((*label, txns.len()));
            }
        }
    }
    let window = trace.window(from, to);
    let min_whole = clients
        .iter()
        .map(|(_, txns)| txns.iter().filter(|iv| iv.start_ns >= from && iv.end_ns <= to).count())
        .min()
        .unwrap_or(0);
    let short = short
        .into_iter()
        .map(|(label, n)| {
            let longest = trace
                .threads
                .iter()
                .find(|t| t.label == label)
                .and_then(|t| {
                    t.intervals.iter().filter(|iv| iv.kind != txn_kind).max_by_key(|iv| iv.duration_ns())
                })
                .map(|iv| {
                    format!(
                        "; longest interval: {}, {:.2} ms",
                        iv.kind.label(),
                        iv.duration_ns() as f64 / 1e6
                    )
                })
                .unwrap_or_default();
            format!(
                "{label}: only {n} whole transaction(s) in the whole {:.2} s traced run{longest}",
                trace.span_ns() as f64 / 1e9
            )
        })
        .collect();
    debug_assert!(window.duration_ns == to - from);
    TxnWindow { from_ns: from, to_ns: to, min_whole, short }
}

/// Writes every interval of `trace` as `thread,label,kind,start_ns,end_ns,duration_ns`.
pub fn write_trace_csv(path: impl AsRef<Path>, trace: &Trace) -> Result<PathBuf> {
    let mut w = CsvWriter::create(path)?;
    w.write_record(["thread", "label", "kind", "start_ns", "end_ns", "duration_ns"])?;
    for t in &trace.threads {
        for iv in &t.intervals {
            w.write_record([
                t.thread_index.to_string(),
                t.label.clone(),
                iv.kind.name().to_string(),
                iv.start_ns.to_string(),
                iv.end_ns.to_string(),
                iv.duration_ns().to_string(),
            ])?;
        }
    }
    w.finish()
}

/// Per-kind summary of a trace, all threads together.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TraceSummaryRow {
    /// Kind name ([`TraceKind::name`]).
    pub kind: String,
    /// Number of intervals.
    pub count: u64,
    /// Sum of durations, ns (nested intervals counted in each kind).
    pub total_ns: u64,
    /// Exclusive time, ns (each instant to the highest-priority kind active).
    pub exclusive_ns: u64,
    /// Mean duration, ns.
    pub mean_ns: f64,
    /// Longest interval, ns.
    pub max_ns: u64,
    /// Exclusive time over (threads × the span of the trace).
    pub utilisation: f64,
}

/// One row per kind present in `trace`.
pub fn trace_summary(trace: &Trace) -> Vec<TraceSummaryRow> {
    let ex = trace.exclusive_ns();
    let util = trace.utilisation(trace.span_ns());
    TraceKind::ALL
        .into_iter()
        .filter_map(|k| {
            let s = trace.kind_stats(k);
            (s.count > 0).then(|| TraceSummaryRow {
                kind: k.name().to_string(),
                count: s.count,
                total_ns: s.total_ns,
                exclusive_ns: ex.get(k),
                mean_ns: s.mean_ns,
                max_ns: s.max_ns,
                utilisation: util[k.index()],
            })
        })
        .collect()
}

/// The summary as a printable table (times in µs).
pub fn trace_summary_table(title: &str, trace: &Trace) -> TextTable {
    let mut t =
        TextTable::new(["kind", "count", "mean µs", "max µs", "exclusive ms", "share %"]).title(title);
    for r in trace_summary(trace) {
        t.row([
            r.kind,
            r.count.to_string(),
            format!("{:.1}", r.mean_ns / 1e3),
            format!("{:.1}", r.max_ns as f64 / 1e3),
            format!("{:.2}", r.exclusive_ns as f64 / 1e6),
            format!("{:.1}", 100.0 * r.utilisation),
        ]);
    }
    t.note(format!(
        "{} threads, span {:.2} ms, {} intervals dropped",
        trace.threads.len(),
        trace.span_ns() as f64 / 1e6,
        trace.dropped()
    ));
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvmedb::trace::ThreadTrace;

    /// A client doing transactions of `txn_ns` back to back from `start` to `end`, each a CPU
    /// span with a log wait inside.
    fn client(i: u32, start: u64, end: u64, txn_ns: u64) -> ThreadTrace {
        let mut intervals = Vec::new();
        let mut t = start;
        while t + txn_ns <= end {
            intervals.push(Interval { kind: TraceKind::Cpu, start_ns: t, end_ns: t + txn_ns });
            intervals.push(Interval {
                kind: TraceKind::LogWait,
                start_ns: t + txn_ns / 4,
                end_ns: t + txn_ns,
            });
            t += txn_ns;
        }
        ThreadTrace { thread_index: i, label: format!("client {i:02}"), intervals, dropped: 0 }
    }

    #[test]
    fn the_window_grows_until_the_slowest_client_shows_its_transactions() {
        // Client 0 finishes a transaction every 0.1 ms, client 1 every 4 ms: a 3 ms window from
        // the middle shows none of client 1's.
        let trace = Trace {
            duration_ns: 100_000_000,
            threads: vec![client(0, 0, 100_000_000, 100_000), client(1, 0, 100_000_000, 4_000_000)],
        };
        let w = transaction_window(&trace, TraceKind::Cpu, 3, 3_000_000);
        assert!(w.short.is_empty(), "{w:?}");
        assert!(w.min_whole >= 3, "{w:?}");
        assert!(
            w.len_ns() >= 12_000_000 && w.len_ns() <= 16_000_000,
            "three 4 ms transactions and no more: {w:?}"
        );
        assert!(w.from_ns >= 45_000_000, "starts in the middle: {w:?}");
        // Fast clients alone: the minimum length holds.
        let fast = Trace { duration_ns: 100_000_000, threads: vec![client(0, 0, 100_000_000, 100_000)] };
        assert_eq!(transaction_window(&fast, TraceKind::Cpu, 3, 3_000_000).len_ns(), 3_000_000);
    }

    #[test]
    fn a_client_without_enough_transactions_is_named_with_its_wait() {
        let mut stuck = client(1, 0, 100_000_000, 60_000_000);
        stuck.intervals.push(Interval {
            kind: TraceKind::LogWait,
            start_ns: 60_000_000,
            end_ns: 100_000_000,
        });
        let trace =
            Trace { duration_ns: 100_000_000, threads: vec![client(0, 0, 100_000_000, 100_000), stuck] };
        let w = transaction_window(&trace, TraceKind::Cpu, 3, 3_000_000);
        assert_eq!(w.from_ns, 0, "falls back to the start of the trace");
        assert_eq!(w.short.len(), 1);
        assert!(w.short[0].starts_with("client 01: only 1 whole transaction"), "{}", w.short[0]);
        assert!(w.short[0].ends_with("longest interval: waiting for log, 45.00 ms"), "{}", w.short[0]);
    }
}
