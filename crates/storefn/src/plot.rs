//! `storefn plot FILE.json... -o FIG.png`: XRP-style figures from `storefn kv bench --json` runs.
//!
//! Panels: throughput and mean latency against layers (threads = 1), throughput and mean latency
//! against threads (at the layer count with the most thread counts). One series per path. When
//! the same (path, layers, threads) was run more than once the last run in the input wins, so a
//! JSON file that runs were appended to plots its newest figures.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use plotters::prelude::*;
use serde::Deserialize;

use crate::CmdResult;

/// Figure size in pixels: 2 x 2 panels.
const FIGURE_PX: (u32, u32) = (1400, 1000);
/// Text needs a TrueType font; Debian's fonts-dejavu-core ships this one (run.sh installs it).
pub const DEFAULT_FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
/// Environment variable naming another .ttf file to use instead.
pub const FONT_ENV: &str = "STOREFN_FONT";
/// Largest input file accepted (bench output is a few hundred bytes per run).
const MAX_INPUT_BYTES: u64 = 64 << 20;

#[derive(Debug, Args)]
pub struct PlotArgs {
    /// JSON written by `storefn kv bench --json`: one object per line, or arrays.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Output PNG.
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
    /// Remote lookups: mean latency against RTT per remote path, with the physical bound
    /// (`kv bench --remote` runs and one local `xrp` run; see bench/remote.sh).
    #[arg(long)]
    pub rtt: bool,
}

/// The fields of one bench run the figures use (others in the object are ignored).
#[derive(Debug, Clone, Deserialize)]
pub struct Run {
    pub path: String,
    pub layers: u32,
    pub threads: u32,
    pub ops_per_sec: f64,
    pub mean_us: f64,
}

/// One line on a panel: label and (x, y) points sorted by x.
type Series = Vec<(String, Vec<(f64, f64)>)>;

pub fn run(args: &PlotArgs) -> CmdResult {
    if args.rtt {
        let mut runs = Vec::new();
        for f in &args.files {
            runs.extend(read_runs::<crate::plot_rtt::RttRun>(f)?);
        }
        crate::plot_rtt::render(&runs, &args.output)?;
        println!("plot: {} runs -> {}", runs.len(), args.output.display());
        return Ok(ExitCode::SUCCESS);
    }
    let mut runs = Vec::new();
    for f in &args.files {
        runs.extend(read_runs(f)?);
    }
    render(&runs, &args.output)?;
    println!("plot: {} runs -> {}", runs.len(), args.output.display());
    Ok(ExitCode::SUCCESS)
}

/// Parses a file of bench runs: a stream of JSON values, each an object or an array of objects.
///
/// # Errors
/// Unreadable file, bad JSON or a run missing a field, naming the file and line.
pub fn read_runs<T: serde::de::DeserializeOwned>(file: &Path) -> Result<Vec<T>, String> {
    let len = std::fs::metadata(file).map_err(|e| format!("{}: {e}", file.display()))?.len();
    if len > MAX_INPUT_BYTES {
        return Err(format!(
            "{}: {len} bytes exceeds the {MAX_INPUT_BYTES}-byte limit",
            file.display()
        ));
    }
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let mut runs = Vec::new();
    let stream = serde_json::Deserializer::from_str(&text).into_iter::<serde_json::Value>();
    for value in stream {
        let value = value.map_err(|e| format!("{}: {e}", file.display()))?;
        let items = match value {
            serde_json::Value::Array(items) => items,
            other => vec![other],
        };
        for item in items {
            let run: T = serde_json::from_value(item)
                .map_err(|e| format!("{}: run #{}: {e}", file.display(), runs.len() + 1))?;
            runs.push(run);
        }
    }
    if runs.is_empty() {
        return Err(format!("{}: no bench runs in the file", file.display()));
    }
    Ok(runs)
}

/// Groups runs into series: `key` picks x, `y` the value; later runs replace earlier ones.
fn series(runs: &[&Run], x: impl Fn(&Run) -> u32, y: impl Fn(&Run) -> f64) -> Series {
    let mut by_path: BTreeMap<&str, BTreeMap<u32, f64>> = BTreeMap::new();
    for r in runs {
        by_path.entry(r.path.as_str()).or_default().insert(x(r), y(r));
    }
    by_path
        .into_iter()
        .map(|(p, pts)| (p.to_owned(), pts.into_iter().map(|(x, y)| (f64::from(x), y)).collect()))
        .collect()
}

/// The layer count with the most distinct thread counts (ties: the larger layer count).
fn threads_layers(runs: &[Run]) -> Option<u32> {
    let mut counts: BTreeMap<u32, std::collections::BTreeSet<u32>> = BTreeMap::new();
    for r in runs {
        counts.entry(r.layers).or_default().insert(r.threads);
    }
    counts.into_iter().max_by_key(|(layers, t)| (t.len(), *layers)).map(|(l, _)| l)
}

pub(crate) fn load_font() -> Result<(), String> {
    let path = std::env::var(FONT_ENV).unwrap_or_else(|_| DEFAULT_FONT.to_owned());
    let bytes = std::fs::read(&path).map_err(|e| {
        format!("font {path}: {e} (install Debian's fonts-dejavu-core or set {FONT_ENV})")
    })?;
    // plotters keeps fonts for the process's lifetime; a figure needs one font, loaded once.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| format!("font {path}: not a TrueType/OpenType font"))
}

/// Draws the four panels into `out` (PNG).
///
/// # Errors
/// Missing font, nothing to plot, or a drawing/encoding failure.
pub fn render(runs: &[Run], out: &Path) -> Result<(), String> {
    if runs.is_empty() {
        return Err("no bench runs to plot".into());
    }
    if out.extension().and_then(|e| e.to_str()) != Some("png") {
        return Err(format!("{}: output must be a .png file", out.display()));
    }
    load_font()?;
    let single: Vec<&Run> = runs.iter().filter(|r| r.threads == 1).collect();
    let tl = threads_layers(runs).expect("runs is not empty");
    let multi: Vec<&Run> = runs.iter().filter(|r| r.layers == tl).collect();
    let root = BitMapBackend::new(out, FIGURE_PX).into_drawing_area();
    root.fill(&WHITE).map_err(|e| format!("{}: {e}", out.display()))?;
    let panels = root.split_evenly((2, 2));
    let t_title = format!("Throughput vs threads ({tl} layers)");
    let l_title = format!("Mean latency vs threads ({tl} layers)");
    // Legends go where the curves usually are not: throughput falls with layers, latency rises.
    let (ur, ul, lr) = (
        SeriesLabelPosition::UpperRight,
        SeriesLabelPosition::UpperLeft,
        SeriesLabelPosition::LowerRight,
    );
    let jobs: [(&str, &str, &str, Series, SeriesLabelPosition); 4] = [
        (
            "Throughput vs layers (1 thread)",
            "layers (I/Os per lookup)",
            "ops/s",
            series(&single, |r| r.layers, |r| r.ops_per_sec),
            ur,
        ),
        (
            "Mean latency vs layers (1 thread)",
            "layers (I/Os per lookup)",
            "mean latency (us)",
            series(&single, |r| r.layers, |r| r.mean_us),
            ul,
        ),
        (&t_title, "threads", "ops/s", series(&multi, |r| r.threads, |r| r.ops_per_sec), lr),
        (
            &l_title,
            "threads",
            "mean latency (us)",
            series(&multi, |r| r.threads, |r| r.mean_us),
            SeriesLabelPosition::LowerRight,
        ),
    ];
    for (area, (title, xl, yl, s, legend)) in panels.iter().zip(jobs) {
        panel(area, title, xl, yl, &s, legend)
            .map_err(|e| format!("{}: {title}: {e}", out.display()))?;
    }
    root.present().map_err(|e| format!("{}: {e}", out.display()))
}

/// Colour of the i-th series (stable across panels because series are sorted by path).
pub(crate) fn colour(i: usize) -> RGBColor {
    const PALETTE: [RGBColor; 8] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
    ];
    PALETTE[i % PALETTE.len()]
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &Series,
    legend: SeriesLabelPosition,
) -> Result<(), String> {
    let pts = series.iter().flat_map(|(_, p)| p.iter());
    let (mut x_max, mut y_max) = (1.0f64, 0.0f64);
    for &(x, y) in pts {
        x_max = x_max.max(x);
        y_max = y_max.max(y);
    }
    let y_top = if y_max > 0.0 { y_max * 1.15 } else { 1.0 };
    let caption = if series.is_empty() { format!("{title}: no runs") } else { title.to_owned() };
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(0.5f64..x_max + 0.5, 0.0f64..y_top)
        .map_err(|e| e.to_string())?;
    let x_ticks = usize::try_from(x_max as u64).unwrap_or(16).clamp(1, 16);
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .x_labels(x_ticks + 1)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| format_si(*v))
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, (name, points)) in series.iter().enumerate() {
        let c = colour(i);
        chart
            .draw_series(LineSeries::new(points.iter().copied(), c.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 4, c.filled())))
            .map_err(|e| e.to_string())?;
    }
    if !series.is_empty() {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 15))
            .position(legend)
            .draw()
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Axis numbers: 12000 -> "12k", 2500000 -> "2.5M".
pub(crate) fn format_si(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// A linear chart of the RTT figures (`plot --rtt`, `rocks plot`).
pub(crate) type LinearChart<'a, 'b> = ChartContext<
    'a,
    BitMapBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// Draws one labelled line of `pts` (dashed for a bound) with a dot at each point.
///
/// # Errors
/// A drawing failure, as text.
pub(crate) fn draw_line(
    chart: &mut LinearChart<'_, '_>,
    name: &str,
    pts: &[(f64, f64)],
    dashed: bool,
    c: RGBColor,
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let s = if dashed {
        chart.draw_series(DashedLineSeries::new(pts.iter().copied(), 8, 6, c.stroke_width(2)))
    } else {
        chart.draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
    };
    s.map_err(|e| err(&e))?
        .label(name)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled()))).map_err(|e| err(&e))?;
    Ok(())
}

/// What a linear chart shows: its title, and each axis' range and description.
pub(crate) struct Axes<'s> {
    pub(crate) title: &'s str,
    pub(crate) x: std::ops::Range<f64>,
    pub(crate) y: std::ops::Range<f64>,
    pub(crate) x_desc: &'s str,
    pub(crate) y_desc: &'s str,
}

/// A linear chart on `area` with its mesh drawn (numbers on the y axis in `format_si`), for
/// [`draw_line`] to draw on: every line figure of the CLI has the same frame.
///
/// # Errors
/// A drawing failure, as text.
pub(crate) fn linear_chart<'a, 'b>(
    area: &'a DrawingArea<BitMapBackend<'b>, plotters::coord::Shift>,
    axes: &Axes<'_>,
) -> Result<LinearChart<'a, 'b>, String> {
    let mut chart = ChartBuilder::on(area)
        .caption(axes.title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(axes.x.clone(), axes.y.clone())
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc(axes.x_desc)
        .y_desc(axes.y_desc)
        .y_label_formatter(&|v| format_si(*v))
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(|e| e.to_string())?;
    Ok(chart)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn si_labels() {
        assert_eq!(format_si(12_000.0), "12k");
        assert_eq!(format_si(2_500_000.0), "2.5M");
        assert_eq!(format_si(42.25), "42.2");
    }

    #[test]
    fn later_runs_replace_earlier_and_series_sort_by_x() {
        let mk = |path: &str, layers, ops| Run {
            path: path.into(),
            layers,
            threads: 1,
            ops_per_sec: ops,
            mean_us: 1.0,
        };
        let runs = [mk("xrp", 3, 1.0), mk("xrp", 1, 2.0), mk("xrp", 3, 5.0), mk("read", 1, 7.0)];
        let refs: Vec<&Run> = runs.iter().collect();
        let s = series(&refs, |r| r.layers, |r| r.ops_per_sec);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0], ("read".to_owned(), vec![(1.0, 7.0)]));
        assert_eq!(s[1], ("xrp".to_owned(), vec![(1.0, 2.0), (3.0, 5.0)]));
    }
}
