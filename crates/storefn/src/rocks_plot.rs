//! `storefn rocks plot BENCH.json -o FIG.png`: remote Gets/s and p99 against round-trip time,
//! one line per (path, client cache) from a `storefn rocks bench --remote --rtt-us ... --json`
//! run, and on the p99 panel the bound of a pushed-down Get drawn dashed: one round trip plus the
//! server's work, R + (the best pushdown p99 at the smallest RTT minus that RTT).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use plotters::prelude::*;

use crate::plot::{colour, draw_line, linear_chart, load_font, Axes};
use crate::CmdResult;

#[derive(Debug, Args)]
pub struct PlotArgs {
    /// The bench's JSON output.
    input: PathBuf,
    /// Output PNG.
    #[arg(short = 'o', long = "output")]
    output: PathBuf,
}

/// A point: (rtt µs, Gets/s, p99 µs).
type Point = (f64, f64, f64);
/// (label, points, dashed).
type Line = (String, Vec<Point>, bool);

/// The lines of the figure from the bench's rows.
///
/// # Errors
/// No remote rows with an RTT.
pub fn lines(rows: &[serde_json::Value]) -> Result<Vec<Line>, String> {
    let mut by: BTreeMap<(String, u64), Vec<Point>> = BTreeMap::new();
    for r in rows {
        let (Some(p), Some(rtt), Some(c)) =
            (r["path"].as_str(), r["rtt_us"].as_f64(), r["cache_fraction"].as_f64())
        else {
            continue;
        };
        let pt =
            (rtt, r["gets_per_s"].as_f64().unwrap_or(0.0), r["p99_us"].as_f64().unwrap_or(0.0));
        by.entry((p.to_string(), (c * 1000.0).round() as u64)).or_default().push(pt);
    }
    let mut out: Vec<Line> = Vec::new();
    for ((p, c), mut pts) in by {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        out.push((format!("{p}, cache {}%", c as f64 / 10.0), pts, false));
    }
    let base = out
        .iter()
        .filter(|l| l.0.starts_with("pushdown"))
        .filter_map(|l| l.1.first().copied())
        .map(|(rtt, _, p99)| p99 - rtt)
        .fold(f64::INFINITY, f64::min);
    let xs: Vec<f64> =
        out.first().ok_or("no remote rows with rtt_us to plot")?.1.iter().map(|p| p.0).collect();
    if base.is_finite() {
        let bound = xs.iter().map(|&r| (r, 1e6 / (r + base.max(1.0)), r + base)).collect();
        out.push(("bound: one round trip + server work".into(), bound, true));
    }
    Ok(out)
}

pub fn run(a: &PlotArgs) -> CmdResult {
    let text =
        std::fs::read_to_string(&a.input).map_err(|e| format!("{}: {e}", a.input.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", a.input.display()))?;
    let rows = v["results"].as_array().ok_or("no `results` array")?;
    let lines = lines(rows)?;
    load_font()?;
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", a.output.display());
    let root = BitMapBackend::new(&a.output, (1400, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let panels = root.split_evenly((1, 2));
    let x_max = lines.iter().flat_map(|l| l.1.iter().map(|p| p.0)).fold(1.0, f64::max);
    for (k, panel) in panels.iter().enumerate() {
        let y = |p: &(f64, f64, f64)| if k == 0 { p.1 } else { p.2 };
        let y_max = lines.iter().flat_map(|l| l.1.iter().map(y)).fold(1.0, f64::max);
        let (title, ydesc) = if k == 0 {
            ("Remote Gets/s vs RTT", "Gets/s")
        } else {
            ("Remote p99 vs RTT", "p99 (us)")
        };
        let axes = Axes {
            title,
            x: 0.0..x_max * 1.05,
            y: 0.0..y_max * 1.15,
            x_desc: "added RTT (us)",
            y_desc: ydesc,
        };
        let mut chart = linear_chart(panel, &axes).map_err(|e| err(&e))?;
        for (i, (name, pts, dashed)) in lines.iter().enumerate() {
            // The bound is a latency bound: drawn on the p99 panel only.
            if *dashed && k == 0 {
                continue;
            }
            let xy: Vec<(f64, f64)> = pts.iter().map(|p| (p.0, y(p))).collect();
            draw_line(&mut chart, name, &xy, *dashed, colour(i)).map_err(|e| err(&e))?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    println!("plot: {} lines -> {}", lines.len(), a.output.display());
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_per_path_and_cache_and_the_bound_from_pushdowns_smallest_rtt() {
        let row = |p: &str, rtt: f64, c: f64, g: f64, p99: f64| serde_json::json!({"path": p, "rtt_us": rtt, "cache_fraction": c, "gets_per_s": g, "p99_us": p99});
        let rows = [
            row("pushdown", 200.0, 0.01, 2000.0, 450.0),
            row("pushdown", 0.0, 0.01, 5000.0, 250.0),
            row("rpc-read", 0.0, 0.01, 1000.0, 900.0),
            serde_json::json!({"path": "xrp", "rtt_us": null}),
        ];
        let l = lines(&rows).unwrap();
        assert_eq!(l.len(), 3);
        assert_eq!(l[0].0, "pushdown, cache 1%");
        assert_eq!(l[0].1[0], (0.0, 5000.0, 250.0));
        assert!(l[2].2);
        assert_eq!(l[2].1[1], (200.0, 1e6 / 450.0, 450.0));
        assert!(lines(&rows[3..]).is_err());
    }
}
