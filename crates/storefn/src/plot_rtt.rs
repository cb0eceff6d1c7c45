//! `storefn plot --rtt FILE.json... -o FIG.png`: remote lookup latency against round-trip time
//! (BPF-oF's latency-vs-RTT figure), from `storefn kv bench --remote --json` runs and one local `xrp` run.
//!
//! One line per remote path (`rpc-read`, `pushdown` with batch 1) through the points
//! (measured `rtt_us`, `mean_us`), and the physical bound of a pushed-down lookup,
//! R + k x (device QD1 read), drawn dashed: k x (device QD1 read) is the local `xrp` mean on the
//! same file (k reads in series, no network), so the bound at R is R + that mean.

use std::path::Path;

use plotters::prelude::*;
use serde::Deserialize;

use crate::plot::{colour, draw_line, linear_chart, load_font, Axes};

/// Figure size in pixels: one panel.
const FIGURE_PX: (u32, u32) = (1000, 700);

/// The fields of a run this figure uses.
#[derive(Debug, Clone, Deserialize)]
pub struct RttRun {
    pub path: String,
    #[serde(default)]
    pub batch: Option<u64>,
    pub mean_us: f64,
    #[serde(default)]
    pub rtt_us: Option<f64>,
}

/// Series of the figure: (label, points sorted by RTT, dashed).
type Lines = Vec<(String, Vec<(f64, f64)>, bool)>;

/// The remote paths' points and the bound (needs a local `xrp` run; the last one wins).
///
/// # Errors
/// No remote run or no local `xrp` run to derive the bound from.
pub fn lines(runs: &[RttRun]) -> Result<Lines, String> {
    let local = runs.iter().rev().find(|r| r.path == "xrp" && r.rtt_us.is_none());
    let local_us = local.ok_or("no local `xrp` run (it gives k x device QD1 read)")?.mean_us;
    let mut out = Lines::new();
    for path in ["rpc-read", "pushdown"] {
        let mut pts: Vec<(f64, f64)> = runs
            .iter()
            .filter(|r| r.path == path && r.batch.unwrap_or(1) == 1)
            .filter_map(|r| Some((r.rtt_us?, r.mean_us)))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        if !pts.is_empty() {
            out.push((path.to_string(), pts, false));
        }
    }
    let pushdown = out.iter().find(|l| l.0 == "pushdown").or(out.first());
    let xs: Vec<f64> =
        pushdown.ok_or("no remote runs (rtt_us) to plot")?.1.iter().map(|p| p.0).collect();
    let bound = xs.iter().map(|&r| (r, r + local_us)).collect();
    out.push(("bound R + k x device read".to_string(), bound, true));
    Ok(out)
}

/// Draws the figure into `out` (PNG).
///
/// # Errors
/// Missing font, nothing to plot, or a drawing/encoding failure.
pub fn render(runs: &[RttRun], out: &Path) -> Result<(), String> {
    if out.extension().and_then(|e| e.to_str()) != Some("png") {
        return Err(format!("{}: output must be a .png file", out.display()));
    }
    let lines = lines(runs)?;
    load_font()?;
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", out.display());
    let (mut x_max, mut y_max) = (1.0f64, 1.0f64);
    for (x, y) in lines.iter().flat_map(|l| l.1.iter().copied()) {
        x_max = x_max.max(x);
        y_max = y_max.max(y);
    }
    let root = BitMapBackend::new(out, FIGURE_PX).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let axes = Axes {
        title: "Remote lookup latency vs round-trip time",
        x: 0.0..x_max * 1.05,
        y: 0.0..y_max * 1.15,
        x_desc: "measured RTT (us)",
        y_desc: "mean latency (us)",
    };
    let mut chart = linear_chart(&root, &axes).map_err(|e| err(&e))?;
    for (i, (name, pts, dashed)) in lines.iter().enumerate() {
        draw_line(&mut chart, name, pts, *dashed, colour(i)).map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(path: &str, batch: u64, mean_us: f64, rtt_us: Option<f64>) -> RttRun {
        RttRun { path: path.into(), batch: Some(batch), mean_us, rtt_us }
    }

    #[test]
    fn bound_is_rtt_plus_local_xrp_mean_and_batched_runs_are_left_out() {
        let runs = [
            run("xrp", 1, 600.0, None),
            run("pushdown", 1, 850.0, Some(210.0)),
            run("pushdown", 1, 640.0, Some(15.0)),
            run("pushdown", 32, 5000.0, Some(15.0)),
            run("rpc-read", 1, 2000.0, Some(210.0)),
        ];
        let l = lines(&runs).unwrap();
        assert_eq!(l[0].0, "rpc-read");
        assert_eq!(l[1].1, vec![(15.0, 640.0), (210.0, 850.0)]);
        assert_eq!(l[2].1, vec![(15.0, 615.0), (210.0, 810.0)]);
        assert!(l[2].2);
        let e = lines(&runs[1..]).unwrap_err();
        assert!(e.contains("no local `xrp` run"), "{e}");
    }
}
