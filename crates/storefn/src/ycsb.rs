//! `storefn ycsb load|run|plot`: YCSB's core workloads against BPF-KV, WiredTiger through
//! storefn, and WiredTiger alone (storefn-ycsb does the work; this parses and prints).

use crate::CmdResult;
use clap::{Args, Subcommand};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use storefn_ycsb::{MemoryGroup, OpenOptions, RecordShape, RunConfig, StoreSpec, Workload};

/// glibc malloc arenas in a run with a memory budget (see `run_phase`).
const MALLOC_ARENAS: i32 = 2;

#[derive(Debug, Subcommand)]
pub enum YcsbCmd {
    /// YCSB's load phase: write records 0..N into a new store.
    Load(CommonArgs),
    /// YCSB's run phase: the workload's operation mix, measured.
    Run(RunArgs),
    /// Throughput per workload per store, from `ycsb run --json` files.
    Plot(PlotArgs),
}

#[derive(Debug, Args)]
pub struct CommonArgs {
    /// a-f: YCSB's core workloads.
    #[arg(long, default_value = "a")]
    workload: char,
    /// bpfkv:DB | wiredtiger:DIR:TABLE | wiredtiger-native:DIR:TABLE | rocksdb:DIR |
    /// rocksdb-native:DIR
    #[arg(long)]
    store: String,
    /// Records (YCSB's recordcount); `run` must be given the count `load` wrote.
    #[arg(long, default_value_t = 100_000)]
    records: u64,
    /// Fields per record (YCSB's fieldcount).
    #[arg(long, default_value_t = 10)]
    fields: usize,
    /// Bytes per field (YCSB's fieldlength).
    #[arg(long, default_value_t = 100)]
    field_length: usize,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    c: CommonArgs,
    /// Measured operations, over all threads (YCSB's operationcount).
    #[arg(long, default_value_t = 100_000)]
    operations: u64,
    /// Unmeasured operations first (default: a tenth of --operations).
    #[arg(long)]
    warmup: Option<u64>,
    #[arg(long, default_value_t = 1)]
    threads: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Reads in a row handed to the store together, up to this many (`wiredtiger` keeps them
    /// in flight as batched chains); each is timed as its whole batch.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// With --batch > 1: updates join the batch too, in flight with its reads (`wiredtiger`
    /// commits them one by one on a writer thread while the reads run as chains); each is timed
    /// as its whole batch. Other stores run updates one at a time.
    #[arg(long)]
    batch_updates: bool,
    /// Run the process in a cgroup v1 memory group of this many bytes (page cache counted);
    /// WiredTiger's cache is sized from it. Needs root.
    #[arg(long)]
    memory_limit: Option<u64>,
    /// `wiredtiger`: checkpoint interval, ms (the function reads the newest checkpoint);
    /// `rocksdb`: the interval of the reader's new snapshots of RocksDB's files.
    #[arg(long, default_value_t = 1000)]
    checkpoint_ms: u64,
    /// Append the run's JSON object (one line) to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct PlotArgs {
    /// JSON written by `storefn ycsb run --json`.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    #[arg(short = 'o', long = "output")]
    output: PathBuf,
}

fn spec_and_shape(c: &CommonArgs) -> Result<(StoreSpec, RecordShape, Workload), String> {
    let spec: StoreSpec = c.store.parse().map_err(|e: storefn_ycsb::YcsbError| e.to_string())?;
    let shape = RecordShape { fields: c.fields, field_length: c.field_length };
    Ok((spec, shape, Workload::core(c.workload)?))
}

pub fn run(cmd: &YcsbCmd) -> CmdResult {
    match cmd {
        YcsbCmd::Load(c) => {
            let (spec, shape, _) = spec_and_shape(c)?;
            let t0 = std::time::Instant::now();
            storefn_ycsb::load(&spec, c.records, shape)?;
            println!(
                "loaded {} records of {} bytes into {spec} in {:.1} s",
                c.records,
                shape.bytes(),
                t0.elapsed().as_secs_f64()
            );
            Ok(ExitCode::SUCCESS)
        }
        YcsbCmd::Run(a) => run_phase(a),
        YcsbCmd::Plot(a) => plot(a),
    }
}

fn run_phase(a: &RunArgs) -> CmdResult {
    let (spec, shape, workload) = spec_and_shape(&a.c)?;
    let cfg = RunConfig {
        workload,
        records: a.c.records,
        operations: a.operations,
        threads: a.threads,
        seed: a.seed,
        warmup: a.warmup.unwrap_or(a.operations / 10),
        shape,
        read_batch: a.batch,
        batch_updates: a.batch_updates,
    };
    let opts = OpenOptions {
        memory_limit: a.memory_limit,
        checkpoint_interval: Duration::from_millis(a.checkpoint_ms.max(1)),
    };
    if a.memory_limit.is_some() {
        // glibc gives each thread its own malloc arena, and memory freed in one is not reused
        // by the others: with 16 threads, WiredTiger's page images overshot its cache by
        // ~26 MB and the memory group's OOM killer stopped the run. Two arenas, for every
        // store alike, before any thread starts.
        // SAFETY: mallopt only sets an allocator parameter (glibc takes its own lock); no
        // pointer or memory of ours is involved.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, MALLOC_ARENAS) };
    }
    storefn_ycsb::drop_cache(&spec.data_path())?;
    // The group is entered before the store opens, so every page the run caches is charged
    // to it, and is removed when this scope ends, on error too.
    let group = a.memory_limit.map(MemoryGroup::enter).transpose()?;
    let mut report = {
        let store = storefn_ycsb::open(&spec, &opts)?;
        storefn_ycsb::run(store.as_ref(), spec.kind(), &cfg)?
    };
    if let Some(g) = group {
        report.memory_limit_bytes = Some(g.limit());
        report.memory_peak_bytes = g.max_usage();
        g.remove()?;
    }
    println!("{}", report.summary());
    if let Some(path) = &a.json {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        writeln!(f, "{}", report.json()).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The fields of a run the figure uses.
#[derive(Debug, serde::Deserialize)]
struct YcsbRun {
    store: String,
    workload: String,
    threads: u32,
    ops_per_sec: f64,
}

fn plot(a: &PlotArgs) -> CmdResult {
    let mut runs = Vec::new();
    for f in &a.files {
        runs.extend(crate::plot::read_runs::<YcsbRun>(f)?);
    }
    render(&runs, &a.output)?;
    println!("plot: {} runs -> {}", runs.len(), a.output.display());
    Ok(ExitCode::SUCCESS)
}

/// Grouped bars: one group per workload, one bar per store (and thread count); the last run of
/// a (workload, store, threads) in the input wins.
fn render(runs: &[YcsbRun], out: &Path) -> Result<(), String> {
    use plotters::prelude::*;
    if out.extension().and_then(|e| e.to_str()) != Some("png") {
        return Err(format!("{}: output must be a .png file", out.display()));
    }
    let mut cells: BTreeMap<(String, String), f64> = BTreeMap::new();
    for r in runs {
        let label =
            if r.threads == 1 { r.store.clone() } else { format!("{} x{}", r.store, r.threads) };
        cells.insert((r.workload.clone(), label), r.ops_per_sec);
    }
    let workloads: Vec<String> = cells
        .keys()
        .map(|k| k.0.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let series: Vec<String> = cells
        .keys()
        .map(|k| k.1.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let ymax = cells.values().copied().fold(0.0, f64::max) * 1.15;
    crate::plot::load_font()?;
    let e = |e: &dyn std::fmt::Display| format!("{}: {e}", out.display());
    let root = BitMapBackend::new(out, (1000, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut chart = ChartBuilder::on(&root)
        .caption("YCSB throughput per workload", ("sans-serif", 24))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..workloads.len() as f64, 0f64..ymax.max(1.0))
        .map_err(|x| e(&x))?;
    let names = workloads.clone();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(workloads.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - i as f64 - 0.5).abs() < 0.26 {
                names.get(i).map(|w| format!("YCSB-{}", w.to_uppercase())).unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("ops/s")
        .draw()
        .map_err(|x| e(&x))?;
    let width = 0.8 / series.len() as f64;
    for (si, s) in series.iter().enumerate() {
        let color = Palette99::pick(si).to_rgba();
        let bars: Vec<_> = workloads
            .iter()
            .enumerate()
            .filter_map(|(wi, w)| {
                let v = *cells.get(&(w.clone(), s.clone()))?;
                let x0 = wi as f64 + 0.1 + width * si as f64;
                Some(Rectangle::new([(x0, 0.0), (x0 + width * 0.95, v)], color.filled()))
            })
            .collect();
        chart
            .draw_series(bars)
            .map_err(|x| e(&x))?
            .label(s.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}
