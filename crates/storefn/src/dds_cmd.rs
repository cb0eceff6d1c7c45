//! `storefn ring ...` and `storefn dds ...`: the DDS pieces' benchmarks (storefn-dds). The
//! harnesses live in the library (`storefn_dds::bench::ring`, `storefn_dds::bench::table`);
//! this module parses and prints.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use storefn_dds::bench::host::{self as host_bench, HostBenchConfig};
use storefn_dds::bench::ring::{self as ring_bench, RingBenchConfig};
use storefn_dds::bench::table::{self as table_bench, TableBenchConfig};

use crate::CmdResult;

#[derive(Debug, Subcommand)]
pub enum RingCmd {
    /// Messages/s through the progressive ring (shared memory) vs a mutex ring vs a
    /// flag-per-slot ring, P producer threads and one consumer.
    Bench(RingBenchArgs),
}

#[derive(Debug, Args)]
pub struct RingBenchArgs {
    /// Rings, comma-separated: progressive, mutex, flag.
    #[arg(long, value_delimiter = ',', default_value = "progressive,mutex,flag")]
    ring: Vec<String>,
    /// Producer-thread counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,8,64")]
    producers: Vec<usize>,
    /// Messages per case (split over the producers).
    #[arg(long, default_value_t = 1_000_000)]
    messages: u64,
    /// Payload bytes per message (>= 8).
    #[arg(long, default_value_t = 64)]
    message_bytes: usize,
    /// Ring data bytes (a power of two, 4096..=2^28).
    #[arg(long, default_value_t = 1 << 16)]
    ring_bytes: usize,
    /// Rounds per case (the median is reported).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Write the results as a JSON array here (keys ring, producers, ops_per_sec, ...).
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum DdsCmd {
    /// Cache-table throughput: inserts/s, and lookups/s from N readers while one writer
    /// inserts and removes.
    TableBench(TableBenchArgs),
    /// Host path: random reads through the host file library and the file service over the
    /// progressive rings, next to plain pread of the same file.
    HostBench(HostBenchArgs),
}

#[derive(Debug, Args)]
pub struct HostBenchArgs {
    /// Directory for the served file (default: $TMPDIR or /tmp; removed afterwards).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// File size in MiB.
    #[arg(long, default_value_t = 64)]
    file_mb: u64,
    /// Bytes per read (<= 65536).
    #[arg(long, default_value_t = 4096)]
    io_bytes: usize,
    /// Reads per case and round.
    #[arg(long, default_value_t = 50_000)]
    ops: usize,
    /// Reads in flight for the async case.
    #[arg(long, default_value_t = 16)]
    depth: usize,
    /// Rounds (cases interleaved); the median round is reported.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Seed of the offsets.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the results as a JSON array here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct TableBenchArgs {
    /// Items the table is sized for.
    #[arg(long, default_value_t = 1 << 20)]
    capacity: usize,
    /// Occupancy kept during the lookup phase, percent of --capacity (1..=90).
    #[arg(long, default_value_t = 80)]
    fill: u32,
    /// Reader-thread counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    readers: Vec<usize>,
    /// Milliseconds per lookup phase.
    #[arg(long, default_value_t = 1000)]
    duration_ms: u64,
    /// Rounds per case (the median is reported).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Seed of the readers' key choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the results as a JSON array here.
    #[arg(long)]
    json: Option<PathBuf>,
}

pub fn run_ring(cmd: &RingCmd) -> CmdResult {
    let RingCmd::Bench(a) = cmd;
    let cfg = RingBenchConfig {
        rings: a.ring.clone(),
        producers: a.producers.clone(),
        messages: a.messages,
        message_bytes: a.message_bytes,
        ring_bytes: a.ring_bytes,
        rounds: a.rounds,
    };
    let results = ring_bench::run(&cfg)?;
    for r in &results {
        println!(
            "ring {:<11} producers {:>4}: {:>12.0} msg/s (min {:.0}, max {:.0}; mean batch {:.1}; {} B messages, {} CPUs)",
            r.ring, r.producers, r.ops_per_sec, r.min_ops_per_sec, r.max_ops_per_sec, r.mean_batch,
            r.message_bytes, r.cpus
        );
    }
    let top = results.iter().map(|r| r.producers).max().unwrap_or(0);
    let at_top = |name: &str| {
        results.iter().find(|r| r.ring == name && r.producers == top).map(|r| r.ops_per_sec)
    };
    if let (Some(p), Some(m), Some(f)) = (at_top("progressive"), at_top("mutex"), at_top("flag")) {
        println!(
            "summary: producers={top} progressive/mutex={:.2} progressive/flag={:.2}",
            p / m,
            p / f
        );
    }
    write_json(a.json.as_ref(), &results)
}

pub fn run_dds(cmd: &DdsCmd) -> CmdResult {
    let a = match cmd {
        DdsCmd::TableBench(a) => a,
        DdsCmd::HostBench(h) => return host_bench(h),
    };
    let cfg = TableBenchConfig {
        capacity_items: a.capacity,
        fill_percent: a.fill,
        readers: a.readers.clone(),
        duration: Duration::from_millis(a.duration_ms),
        rounds: a.rounds,
        seed: a.seed,
    };
    let results = table_bench::run(&cfg)?;
    for r in &results {
        if r.workload == "insert" {
            println!(
                "table insert: {:.0} inserts/s ({} items into {} slots, one thread)",
                r.ops_per_sec, r.items, r.capacity
            );
        } else {
            println!(
                "table lookup: readers {:>3}: {:>12.0} lookups/s, hits {:.3}, writer {:.0} ops/s ({} items, {} slots)",
                r.readers, r.ops_per_sec, r.hit_share, r.writer_ops_per_sec, r.items, r.capacity
            );
        }
    }
    write_json(a.json.as_ref(), &results)
}

fn host_bench(a: &HostBenchArgs) -> CmdResult {
    let cfg = HostBenchConfig {
        dir: a.dir.clone().unwrap_or_else(std::env::temp_dir),
        file_bytes: a.file_mb << 20,
        io_bytes: a.io_bytes,
        ops: a.ops,
        depth: a.depth,
        rounds: a.rounds,
        seed: a.seed,
    };
    let results = host_bench::run(&cfg)?;
    for r in &results {
        println!(
            "host {:<10} depth {:>3}: {:>10.0} reads/s  p50 {:.1} us  p99 {:.1} us  p99.9 {:.1} us ({} B)",
            r.case, r.depth, r.ops_per_sec, r.p50_us, r.p99_us, r.p999_us, r.io_bytes
        );
    }
    if let (Some(p), Some(h)) =
        (results.iter().find(|r| r.case == "pread"), results.iter().find(|r| r.case == "host-sync"))
    {
        println!(
            "summary: host-sync p50 {:.1} us vs pread p50 {:.1} us: the rings and the service add {:.1} us",
            h.p50_us,
            p.p50_us,
            h.p50_us - p.p50_us
        );
    }
    write_json(a.json.as_ref(), &results)
}

/// `--json F`: the results as a pretty JSON array.
fn write_json(path: Option<&PathBuf>, results: &impl serde::Serialize) -> CmdResult {
    if let Some(j) = path {
        std::fs::write(j, serde_json::to_string_pretty(results)? + "\n")?;
    }
    Ok(ExitCode::SUCCESS)
}
