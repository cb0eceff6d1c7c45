//! `storefn cluster bench --servers 1,2,3 [--json] [--plot PREFIX]`: aggregate pushdown
//! throughput over 1..N servers (each held to its own cgroup CPU quota) and lookups across
//! a kill -9 (storefn_cluster::bench); prints one summary line or the JSON, and draws
//! PREFIX-scaling.png and PREFIX-failover.png.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use plotters::prelude::*;
use storefn_cluster::bench::{run, BenchReport, BenchSpec};

use crate::plot::{colour, draw_line, format_si, linear_chart, load_font, Axes};
use crate::CmdResult;

/// Figure size in pixels: one panel.
const FIGURE_PX: (u32, u32) = (1000, 650);
/// The failover figure draws the slowest batch of each bucket this long.
const BUCKET_US: u64 = 50_000;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Server counts, comma-separated (each gets its own etcd and servers).
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    pub servers: Vec<usize>,
    /// Client threads, each with its own cluster client.
    #[arg(long, default_value_t = 16)]
    pub threads: usize,
    /// Lookups per call (spread over the shards).
    #[arg(long, default_value_t = 16)]
    pub batch: usize,
    #[arg(long, default_value_t = 11)]
    pub seed: u64,
    /// BPF-KV levels of the collection (keys 0..31^L).
    #[arg(long, default_value_t = 3)]
    pub layers: u32,
    #[arg(long, default_value_t = 6)]
    pub shards: u32,
    /// Seconds of warm-up per server count (not measured).
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Seconds per measured round.
    #[arg(long, default_value_t = 4.0)]
    pub secs: f64,
    /// Rounds per server count (alternating order; the median counts).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Each server's CPU as a percentage of one core (cgroup v1 cpu quota per 100 ms).
    #[arg(long, default_value_t = 10)]
    pub cpu_pct: u64,
    /// Skip the kill -9 measurement.
    #[arg(long)]
    pub no_failover: bool,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Draw PREFIX-scaling.png and PREFIX-failover.png.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

pub fn run_bench(a: &BenchArgs) -> CmdResult {
    if a.cpu_pct == 0 || a.cpu_pct > 100 {
        return Err(format!("--cpu-pct {}: expected 1..=100", a.cpu_pct).into());
    }
    let spec = BenchSpec {
        exe: std::env::current_exe()?,
        servers: a.servers.clone(),
        threads: a.threads.max(1),
        batch: a.batch.max(1),
        seed: a.seed,
        layers: a.layers,
        shards: a.shards,
        warmup: Duration::from_secs_f64(a.warmup.max(0.0)),
        run: Duration::from_secs_f64(a.secs.max(0.1)),
        rounds: a.rounds.max(1),
        quota_us: a.cpu_pct * 1000,
        period_us: 100_000,
        failover: !a.no_failover,
    };
    let r = run(&spec)?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        print_text(&r);
    }
    if let Some(p) = &a.plot {
        let s = with_suffix(p, "-scaling.png");
        scaling_png(&r, &s)?;
        eprintln!("wrote {}", s.display());
        if r.failover.is_some() {
            let f = with_suffix(p, "-failover.png");
            failover_png(&r, &f)?;
            eprintln!("wrote {}", f.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn with_suffix(p: &Path, s: &str) -> PathBuf {
    let mut o = p.as_os_str().to_owned();
    o.push(s);
    PathBuf::from(o)
}

fn print_text(r: &BenchReport) {
    for p in &r.scaling {
        let srv: Vec<String> = p.server_cpu_cores.iter().map(|c| format!("{c:.3}")).collect();
        println!(
            "servers={} throughput={:.0} lookups/s rounds={:.0?} batch p50={:.0} p99={:.0} \
             p99.9={:.0} us client_cpu={:.2} cores server_cpu=[{}] cores (quota {:.2} each)",
            p.servers,
            p.throughput,
            p.rounds,
            p.p50_us,
            p.p99_us,
            p.p999_us,
            p.client_cpu_cores,
            srv.join(","),
            r.quota_us as f64 / r.period_us as f64
        );
    }
    let mut line = format!(
        "cluster bench: {} at {} servers = {:.2}x of {} (loadavg {} -> {})",
        format_si(r.scaling.last().map_or(0.0, |p| p.throughput)),
        r.scaling.last().map_or(0, |p| p.servers),
        r.ratio_last_to_first,
        r.scaling[0].servers,
        r.loadavg_before,
        r.loadavg_after
    );
    if let Some(f) = &r.failover {
        line += &format!(
            "; kill -9: {} lookups, {} lost batches, {} wrong, window p50={:.0} us p99={:.0} us \
             max={:.0} us (goal p99 <= {} s + RTT)",
            f.lookups,
            f.failed_batches,
            f.wrong,
            f.window_p50_us,
            f.window_p99_us,
            f.window_max_us,
            r.lease_ttl_secs
        );
    }
    println!("{line}");
}

fn err(out: &Path) -> impl Fn(&dyn std::fmt::Display) -> String + '_ {
    move |e| format!("{}: {e}", out.display())
}

/// Throughput against the server count, with the linear ideal from one server dashed.
fn scaling_png(r: &BenchReport, out: &Path) -> Result<(), String> {
    load_font()?;
    let err = err(out);
    let pts: Vec<(f64, f64)> = r.scaling.iter().map(|p| (p.servers as f64, p.throughput)).collect();
    let first = r.scaling[0].throughput / r.scaling[0].servers as f64;
    let ideal: Vec<(f64, f64)> = pts.iter().map(|&(n, _)| (n, n * first)).collect();
    let x_max = pts.iter().map(|p| p.0).fold(1.0, f64::max);
    let y_max = pts.iter().chain(&ideal).map(|p| p.1).fold(1.0, f64::max);
    let root = BitMapBackend::new(out, FIGURE_PX).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let caption = format!(
        "Cluster pushdown throughput (each server {:.0}% of a core)",
        r.quota_us as f64 * 100.0 / r.period_us as f64
    );
    let axes = Axes {
        title: &caption,
        x: 0.0..x_max + 0.5,
        y: 0.0..y_max * 1.15,
        x_desc: "servers",
        y_desc: "lookups/s",
    };
    let mut chart = linear_chart(&root, &axes).map_err(|e| err(&e))?;
    draw_line(&mut chart, "measured (median of rounds)", &pts, false, colour(0))?;
    draw_line(&mut chart, "linear from one server", &ideal, true, colour(1))?;
    legend(&mut chart, out)?;
    root.present().map_err(|e| err(&e))
}

/// Batch latency over time across the kill: the slowest batch per bucket, the kill and the
/// goal (lease TTL) marked.
fn failover_png(r: &BenchReport, out: &Path) -> Result<(), String> {
    let f = r.failover.as_ref().ok_or("no failover run")?;
    load_font()?;
    let err = err(out);
    let mut buckets: std::collections::BTreeMap<u64, u64> = std::collections::BTreeMap::new();
    for &[at, lat] in &f.timeline_us {
        let m = buckets.entry(at / BUCKET_US).or_insert(0);
        *m = (*m).max(lat);
    }
    let pts: Vec<(f64, f64)> =
        buckets.iter().map(|(&b, &lat)| ((b * BUCKET_US) as f64 / 1e6, lat as f64 / 1e3)).collect();
    let x_max = pts.iter().map(|p| p.0).fold(1.0, f64::max);
    let goal_ms = r.lease_ttl_secs as f64 * 1e3;
    let y_max = pts.iter().map(|p| p.1).fold(goal_ms, f64::max);
    let root = BitMapBackend::new(out, FIGURE_PX).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let axes = Axes {
        title: "Lookup latency across a kill -9 of one of 3 servers (R = 2)",
        x: 0.0..x_max * 1.02,
        y: 0.0..y_max * 1.1,
        x_desc: "seconds since the load started",
        y_desc: "batch latency (ms)",
    };
    let mut chart = linear_chart(&root, &axes).map_err(|e| err(&e))?;
    let k = f.killed_at_us as f64 / 1e6;
    draw_line(&mut chart, "slowest batch per 50 ms", &pts, false, colour(0))?;
    draw_line(&mut chart, "kill -9", &[(k, 0.0), (k, y_max)], true, colour(3))?;
    draw_line(
        &mut chart,
        "lease TTL (goal: p99 below)",
        &[(0.0, goal_ms), (x_max, goal_ms)],
        true,
        colour(1),
    )?;
    legend(&mut chart, out)?;
    root.present().map_err(|e| err(&e))
}

fn legend<'a, 'b: 'a>(
    chart: &mut crate::plot::LinearChart<'a, 'b>,
    out: &Path,
) -> Result<(), String> {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| format!("{}: {e}", out.display()))
}
