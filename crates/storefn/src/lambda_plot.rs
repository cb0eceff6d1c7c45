//! `storefn lambda bench --plot F.png`: time per request, one group of bars per (workload,
//! condition), one bar per side (local / server / auto) with the median marked.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use storefn_lambda::bench::BenchRow;
use storefn_lambda::Where;

use crate::plot::{colour, load_font};

/// Figure size in pixels.
const FIGURE_PX: (u32, u32) = (1400, 700);
/// Bars' share of a group's width (the rest separates groups).
const GROUP_FILL: f64 = 0.8;
const SIDES: [Where; 3] = [Where::Local, Where::Server, Where::Auto];

/// Draws `rows` into `out` (PNG).
///
/// # Errors
/// No rows, not a .png path, a missing font, or a drawing/encoding failure.
pub fn render(rows: &[BenchRow], out: &Path) -> Result<(), String> {
    if rows.is_empty() {
        return Err("no bench rows to plot".into());
    }
    if out.extension().and_then(|e| e.to_str()) != Some("png") {
        return Err(format!("{}: output must be a .png file", out.display()));
    }
    load_font()?;
    let e = |e: &dyn std::fmt::Display| format!("{}: {e}", out.display());
    let mut groups: Vec<(String, &str)> = Vec::new();
    for r in rows {
        let g = (r.workload.to_string(), r.condition.as_str());
        if !groups.contains(&g) {
            groups.push(g);
        }
    }
    let sides: Vec<Where> =
        SIDES.into_iter().filter(|s| rows.iter().any(|r| r.r#where == *s)).collect();
    // Log scale: a write of 8 MiB and a warm 256 KiB read differ by 100x and more.
    let ymax = rows.iter().map(|r| r.us_per_request.max(r.p50_us)).fold(1.0, f64::max) * 2.0;
    let ymin =
        rows.iter().map(|r| r.us_per_request.min(r.p50_us)).fold(ymax, f64::min).max(0.01) / 2.0;
    let root = BitMapBackend::new(out, FIGURE_PX).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut chart = ChartBuilder::on(&root)
        .caption("λ time per request (bar: mean, dot: median)", ("sans-serif", 26))
        .margin(20)
        .x_label_area_size(70)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..groups.len() as f64, (ymin..ymax).log_scale())
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc("µs per request (log)")
        .draw()
        .map_err(|x| e(&x))?;
    let w = GROUP_FILL / sides.len() as f64;
    for (k, side) in sides.iter().enumerate() {
        let c = colour(k);
        let bars: Vec<_> = rows
            .iter()
            .filter(|r| r.r#where == *side)
            .filter_map(|r| {
                let key = (r.workload.to_string(), r.condition.as_str());
                let g = groups.iter().position(|g| *g == key)?;
                let x0 = g as f64 + (1.0 - GROUP_FILL) / 2.0 + k as f64 * w;
                Some((x0, r))
            })
            .collect();
        chart
            .draw_series(bars.iter().map(|(x0, r)| {
                Rectangle::new([(*x0, ymin), (x0 + w, r.us_per_request)], c.filled())
            }))
            .map_err(|x| e(&x))?
            .label(side.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 12, y + 6)], c.filled()));
        chart
            .draw_series(
                bars.iter().map(|(x0, r)| Circle::new((x0 + w / 2.0, r.p50_us), 4, BLACK.filled())),
            )
            .map_err(|x| e(&x))?;
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|x| e(&x))?;
    // Group labels under the axis, centred on each group.
    for (i, (wl, cond)) in groups.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(i as f64 + 0.5, ymin));
        for (line, text) in [wl.as_str(), *cond].into_iter().enumerate() {
            let style =
                ("sans-serif", 16).into_text_style(&root).pos(Pos::new(HPos::Center, VPos::Top));
            root.draw(&Text::new(text.to_string(), (px, py + 8 + 18 * line as i32), style))
                .map_err(|x| e(&x))?;
        }
    }
    root.present().map_err(|x| e(&x))
}
