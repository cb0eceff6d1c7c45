//! `storefn kv ...`: create BPF-KV databases, look keys up through every path, range, bench.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::{Args, Subcommand};
use storefn_kv::bench::{open_path, BenchConfig, BenchResult, Dist, PathOptions};
use storefn_kv::format::value_text;
use storefn_kv::range::{aggregate, Agg, RangeScan};
use storefn_kv::{create_bpfkv, LookupPath, NodeSize, Store};

use crate::CmdResult;

/// Chains in flight per thread for `--path xrp-batch` when `--batch` is not given.
const DEFAULT_XRP_BATCH: usize = 32;

#[derive(Debug, Subcommand)]
pub enum KvCmd {
    /// Create a BPF-KV database (keys 0..F^layers, values sprintf("%63lu", key)) and DB.meta.
    Create {
        db: PathBuf,
        #[arg(long)]
        layers: u32,
        /// 512 (BPF-KV, fan-out 31) or 4096 (fan-out 255, for 4 KiB-block devices).
        #[arg(long, default_value_t = 512)]
        node_size: u64,
    },
    /// Insert or update a key (durable on return); value: text, NUL-padded to 64 bytes.
    Put {
        db: PathBuf,
        #[arg(long)]
        key: u64,
        #[arg(long)]
        value: String,
    },
    /// Merge the WAL's memtable into a new tree file and swap it in atomically.
    Compact { db: PathBuf },
    /// Crash-test driver: `count` random puts, printing `ack KEY` once each is durable.
    #[command(hide = true)]
    PutStream {
        db: PathBuf,
        #[arg(long)]
        count: u64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Memtable limit in bytes (small values force frequent compactions).
        #[arg(long, default_value_t = storefn_kv::memtable::DEFAULT_MEMTABLE_LIMIT_BYTES)]
        memtable_bytes: usize,
        /// Puts submitted together per group commit.
        #[arg(long, default_value_t = 1)]
        batch: usize,
    },
    /// Look one key up; prints the value as text, or `not found` (exit 1).
    Get {
        db: PathBuf,
        #[arg(long)]
        key: u64,
        #[command(flatten)]
        opts: PathOpts,
        /// Run this XRP-style program (ELF .o) instead of the built-in one (scratch ABI:
        /// docs/FORMAT.md, "Lookup scratch ABI"): over the io engine with --path xrp|xrp-batch,
        /// else over pread. A failing program is an error (no fallback).
        #[arg(long)]
        prog: Option<PathBuf>,
        /// ELF section of the program in --prog (default: the first XRP section).
        #[arg(long, requires = "prog")]
        section: Option<String>,
    },
    /// Look many keys up; prints `KEY VALUE` or `KEY not found` per key.
    Multiget {
        db: PathBuf,
        /// Comma-separated keys.
        #[arg(long, value_delimiter = ',', conflicts_with = "random")]
        keys: Vec<u64>,
        /// N random keys in 0..key count (with --seed).
        #[arg(long)]
        random: Option<u64>,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[command(flatten)]
        opts: PathOpts,
    },
    /// Entries with keys in [begin, end] (inclusive), or an aggregate of them. `sum`, `min` and
    /// `max` read the first 8 bytes of each value as a u64, little-endian, as BPF-KV does
    /// (for create's values those bytes are ASCII spaces/digits).
    Range {
        db: PathBuf,
        #[arg(long)]
        begin: u64,
        #[arg(long)]
        end: u64,
        /// sum|min|max|count (sum wraps at 2^64).
        #[arg(long)]
        agg: Option<String>,
        /// xrp: the resumable kv_range storage function (32 results per call; 512 B nodes);
        /// read: leaf scan with pread. Default: xrp for 512 B nodes, read for 4096 B.
        #[arg(long)]
        path: Option<String>,
    },
    /// Lookup benchmark; prints BPF-KV's driver lines, then p50, CPU per lookup, fallbacks.
    Bench(BenchArgs),
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    pub db: PathBuf,
    /// Measured lookups in all (split over threads).
    #[arg(long, default_value_t = 100_000)]
    pub requests: u64,
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// read | uring | xrp | xrp-batch | device (random single-block reads: the physical reference)
    #[arg(long, default_value = "read")]
    pub path: String,
    /// Lookups (device: block reads) in flight per thread on batching paths
    /// [default: 32 for xrp-batch, else 1].
    #[arg(long)]
    pub batch: Option<usize>,
    #[arg(long, default_value_t = 0)]
    pub cache_levels: u32,
    /// LRU block cache per thread, bytes, on the read and uring paths (0 = off).
    #[arg(long, default_value_t = 0)]
    pub cache_bytes: u64,
    /// uniform | zipf:THETA
    #[arg(long, default_value = "uniform")]
    pub dist: String,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Unmeasured lookups per thread before the run.
    #[arg(long, default_value_t = 1000)]
    pub warmup: u64,
    /// file | raw | file,raw: raw reads the block device through the metadata digest on the
    /// read, uring, xrp and xrp-batch paths; when it cannot be set up the path says why and uses
    /// the file. file,raw runs both, interleaved in --rounds, and compares them.
    #[arg(long, default_value = "file", value_parser = parse_bench_io)]
    pub io: BenchIo,
    /// With --io file,raw: rounds; each looks the same keys up in both modes, the order
    /// alternating between rounds [default: 20].
    #[arg(long)]
    pub rounds: Option<u32>,
    /// Append one JSON object (one line) per run to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    #[command(flatten)]
    pub remote: crate::kv_remote::RemoteOpts,
}

/// Options shared by every lookup command.
#[derive(Debug, Args)]
pub struct PathOpts {
    /// read | uring | xrp | xrp-batch
    #[arg(long, default_value = "read")]
    pub path: String,
    /// Keep the top k levels in memory and start reads below them.
    #[arg(long, default_value_t = 0)]
    pub cache_levels: u32,
    /// LRU block cache per thread, in bytes, on the read and uring paths (0 = off).
    #[arg(long, default_value_t = 0)]
    pub cache_bytes: u64,
    /// file | raw (read and engine paths; see `kv bench --help`).
    #[arg(long, value_enum, default_value_t = IoArg::File)]
    pub io: IoArg,
    #[command(flatten)]
    pub remote: crate::kv_remote::RemoteOpts,
}

/// `kv bench --io`: one mode, or both side by side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BenchIo {
    One(IoArg),
    Both,
}

fn parse_bench_io(s: &str) -> Result<BenchIo, String> {
    match s {
        "file" => Ok(BenchIo::One(IoArg::File)),
        "raw" => Ok(BenchIo::One(IoArg::Raw)),
        "file,raw" | "raw,file" => Ok(BenchIo::Both),
        _ => Err(format!("expected file, raw or file,raw (got {s:?})")),
    }
}

impl IoArg {
    fn name(self) -> &'static str {
        match self {
            IoArg::File => "file",
            IoArg::Raw => "raw",
        }
    }
}

/// `--io`: how the read and engine paths read the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum IoArg {
    File,
    Raw,
}

/// The lookup path called `name` over `store`.
pub fn make_path(
    name: &str,
    store: &Arc<Store>,
    opts: &PathOpts,
) -> Result<Box<dyn LookupPath>, Box<dyn std::error::Error>> {
    let raw = opts.io == IoArg::Raw;
    Ok(open_path(name, store, PathOptions { cache_bytes: opts.cache_bytes, batch: 32, raw })?)
}

pub fn run(cmd: &KvCmd) -> CmdResult {
    match cmd {
        KvCmd::Create { db, layers, node_size } => create(db, *layers, *node_size),
        KvCmd::Put { db, key, value } => {
            let v = put_value(value)?;
            storefn_kv::db::Db::open(db)?.put(*key, &v)?;
            Ok(ExitCode::SUCCESS)
        }
        KvCmd::Compact { db } => {
            storefn_kv::db::Db::open(db)?.compact()?;
            Ok(ExitCode::SUCCESS)
        }
        KvCmd::PutStream { db, count, seed, memtable_bytes, batch } => {
            put_stream(db, *count, *seed, *memtable_bytes, *batch)
        }
        KvCmd::Get { prog: Some(_), opts, .. } if opts.remote.remote.is_some() => {
            Err("--prog runs a program locally; with --remote use --path pushdown".into())
        }
        KvCmd::Get { db, key, opts, prog: None, .. } if opts.remote.remote.is_some() => {
            let addr = opts.remote.remote.as_deref().expect("checked");
            crate::kv_remote::get(db, *key, &opts.path, opts.cache_levels, &opts.remote, addr)
        }
        KvCmd::Multiget { db, keys, random, seed, opts } if opts.remote.remote.is_some() => {
            let addr = opts.remote.remote.as_deref().expect("checked");
            let r = random.map(|n| (n, *seed));
            crate::kv_remote::multiget(
                db,
                keys,
                r,
                &opts.path,
                opts.cache_levels,
                &opts.remote,
                addr,
            )
        }
        KvCmd::Bench(a) if a.remote.remote.is_some() => {
            crate::kv_remote::bench(a, a.remote.remote.as_deref().expect("checked"))
        }
        KvCmd::Get { db, key, opts, prog, section } => {
            // Puts not yet compacted live in the WAL (the memtable): they win over the tree.
            // A user program answers from the tree alone, but after recovery like the rest.
            let logged = storefn_kv::db::logged_value(db, *key)?;
            if let (None, Some(v)) = (prog, logged) {
                println!("{}", value_text(&v));
                return Ok(ExitCode::SUCCESS);
            }
            let store = Arc::new(Store::open(db, opts.cache_levels)?);
            let found = match prog {
                Some(p) if matches!(opts.path.as_str(), "xrp" | "xrp-batch") => {
                    let elf = std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?;
                    let src =
                        storefn_kv::xrp_paths::ProgSource::User { elf, section: section.clone() };
                    storefn_kv::xrp_paths::XrpPath::new(Arc::clone(&store), &src, false, 1, None)
                        .and_then(|mut x| x.get(*key))
                        .map_err(|e| format!("{}: {e}", p.display()))?
                }
                Some(p) => run_user_prog(&store, *key, p, section.as_deref())?,
                None => make_path(&opts.path, &store, opts)?.get(*key)?,
            };
            match found {
                Some(v) => {
                    println!("{}", value_text(&v));
                    Ok(ExitCode::SUCCESS)
                }
                None => {
                    println!("not found");
                    Ok(ExitCode::FAILURE)
                }
            }
        }
        KvCmd::Multiget { db, keys, random, seed, opts } => {
            let mem = storefn_kv::db::logged_memtable(db)?;
            let store = Arc::new(Store::open(db, opts.cache_levels)?);
            let keys = match random {
                Some(n) => random_keys(*n, *seed, store.meta().key_count),
                None if keys.is_empty() => return Err("give --keys or --random".into()),
                None => keys.clone(),
            };
            let mut path = make_path(&opts.path, &store, opts)?;
            let mut out = Vec::with_capacity(keys.len());
            path.get_many(&keys, &mut out)?;
            let mut missing = 0;
            for (k, l) in keys.iter().zip(&out) {
                match mem.get(*k).or(l.value.as_ref()) {
                    Some(v) => println!("{k} {}", value_text(v)),
                    None => {
                        missing += 1;
                        println!("{k} not found");
                    }
                }
            }
            Ok(if missing == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
        KvCmd::Range { db, begin, end, agg, path } => {
            let mem = storefn_kv::db::logged_memtable(db)?;
            let store = Store::open(db, 0)?;
            let agg = agg.as_deref().map(str::parse::<Agg>).transpose()?;
            // Logged puts inside the range: fetch the tree's entries, overlay the puts, and
            // aggregate here (the storage function only sees the tree).
            let logged = mem.range(*begin, *end).next().is_some();
            let default = if store.node_size() == NodeSize::B512 { "xrp" } else { "read" };
            let (entries, value) = match path.as_deref().unwrap_or(default) {
                "read" => (RangeScan::new(&store).collect(*begin, *end)?, None),
                "xrp" => {
                    let mut ch = storefn_kv::xrp_paths::EngineChain::new(
                        &store,
                        storefn_progs::must("kv_range"),
                        None,
                    )?;
                    let mut run = |start: u64, s: &mut [u8]| ch.run(start, 512, s);
                    let fn_agg = if logged { None } else { agg };
                    let o =
                        storefn_kv::xrp_range::range_xrp(&store, &mut run, *begin, *end, fn_agg)?;
                    (o.entries, o.agg)
                }
                p => return Err(format!("--path {p}: expected read|xrp").into()),
            };
            let entries = storefn_kv::db::overlay_range(entries, &mem, *begin, *end);
            let value = match agg {
                Some(a) if value.is_none() || logged => {
                    aggregate(a, entries.iter().map(|(_, v)| v))
                }
                _ => value,
            };
            match agg {
                None => {
                    for (k, v) in &entries {
                        println!("{k} {}", value_text(v));
                    }
                }
                Some(_) => match value {
                    Some(x) => println!("{x}"),
                    None => println!("empty range"),
                },
            }
            Ok(ExitCode::SUCCESS)
        }
        KvCmd::Bench(a) => bench(a),
    }
}

fn bench(a: &BenchArgs) -> CmdResult {
    // Lookups measure the tree alone, but only once an interrupted compaction is finished.
    storefn_kv::db::recover(&a.db)?;
    let store = Arc::new(Store::open(&a.db, a.cache_levels)?);
    let cfg = BenchConfig {
        path: a.path.clone(),
        threads: a.threads,
        requests: a.requests,
        batch: a.batch.unwrap_or(if a.path == "xrp-batch" { DEFAULT_XRP_BATCH } else { 1 }),
        warmup: a.warmup,
        dist: a.dist.parse::<Dist>()?,
        seed: a.seed,
        cache_bytes: a.cache_bytes,
        raw: a.io == BenchIo::One(IoArg::Raw),
    };
    let io = match a.io {
        BenchIo::One(_) if a.rounds.is_some() => {
            return Err("--rounds applies to --io file,raw only".into());
        }
        BenchIo::One(io) => io,
        BenchIo::Both => return bench_compare(a, &store, &cfg),
    };
    let r = storefn_kv::bench::run(&store, &cfg)?;
    print_bench(&r, io.name());
    if r.misses > 0 {
        eprintln!("warning: {} lookups found nothing", r.misses);
    }
    if let Some(p) = &a.json {
        append_line(p, &bench_json(&r, a.cache_levels, io.name()))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `--io file,raw`: both modes interleaved (storefn_kv::compare), each mode's block, then
/// one stable `compare` line.
fn bench_compare(a: &BenchArgs, store: &Arc<Store>, cfg: &BenchConfig) -> CmdResult {
    let c = storefn_kv::compare::run(
        store,
        cfg,
        a.rounds.unwrap_or(storefn_kv::compare::DEFAULT_ROUNDS),
    )?;
    for (r, io) in [(&c.file, "file"), (&c.raw, "raw")] {
        println!("== io={io}");
        print_bench(r, io);
        if r.misses > 0 {
            eprintln!("warning: io={io}: {} lookups found nothing", r.misses);
        }
    }
    if !c.raw_in_use() {
        eprintln!(
            "warning: raw mode was not in use (see above): this compared the file path with itself"
        );
    }
    println!(
        "compare path={} layers={} threads={} rounds={} requests={} file_mean_us={:.3} \
         raw_mean_us={:.3} raw_lower_pct={:.1} median_round_lower_pct={:.1} \
         file_cpu_us_per_op={:.3} raw_cpu_us_per_op={:.3} raw_cpu_lower_pct={:.1} \
         raw_device_ios_per_op={:.3}",
        c.file.path,
        c.file.layers,
        c.file.threads,
        c.rounds.len(),
        c.file.requests,
        c.file.mean_us,
        c.raw.mean_us,
        c.raw_mean_lower_pct(),
        c.median_round_lower_pct(),
        c.file.cpu_us_per_op,
        c.raw.cpu_us_per_op,
        c.raw_cpu_lower_pct(),
        c.raw.device_ios_per_op,
    );
    if let Some(p) = &a.json {
        let rounds: Vec<_> = c.rounds.iter().map(|r| [r.file_mean_us, r.raw_mean_us]).collect();
        let obj = serde_json::json!({
            "compare": "io", "path": c.file.path, "layers": c.file.layers,
            "threads": c.file.threads, "rounds": c.rounds.len(),
            "file": bench_json(&c.file, a.cache_levels, "file"),
            "raw": bench_json(&c.raw, a.cache_levels, "raw"),
            "raw_in_use": c.raw_in_use(),
            "raw_mean_lower_pct": c.raw_mean_lower_pct(),
            "median_round_lower_pct": c.median_round_lower_pct(),
            "raw_cpu_lower_pct": c.raw_cpu_lower_pct(),
            "round_mean_us_file_raw": rounds,
        });
        append_line(p, &obj)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// BPF-KV's driver lines verbatim, then ours, then one stable summary line.
pub fn print_bench(r: &BenchResult, io: &str) {
    println!("Average throughput: {:.6} op/s latency: {:.6} usec", r.ops_per_sec, r.mean_us);
    println!("95%   latency: {:.6} us", r.p95_us);
    println!("99%   latency: {:.6} us", r.p99_us);
    println!("99.9% latency: {:.6} us", r.p999_us);
    println!("Percentage of requests with latency >= 1ms: {:.4}%", r.pct_over_1ms);
    println!("50%   latency: {:.6} us", r.p50_us);
    println!("CPU per lookup: {:.6} us", r.cpu_us_per_op);
    println!("I/Os per lookup: {:.4}", r.ios_per_op);
    println!("Fallbacks: {}", r.fallbacks);
    println!("Device reads per lookup: {:.4}", r.device_ios_per_op);
    if r.path.starts_with("xrp") {
        println!("VM engine: {}", storefn_kv::chain::engine_used().unwrap_or("none"));
    }
    println!(
        "summary path={} layers={} threads={} batch={} requests={} ops_per_sec={:.1} mean_us={:.3} \
         p50_us={:.3} p99_us={:.3} p999_us={:.3} cpu_us_per_op={:.3} ios_per_op={:.3} fallbacks={} io={io}",
        r.path,
        r.layers,
        r.threads,
        r.batch,
        r.requests,
        r.ops_per_sec,
        r.mean_us,
        r.p50_us,
        r.p99_us,
        r.p999_us,
        r.cpu_us_per_op,
        r.ios_per_op,
        r.fallbacks
    );
}

pub(crate) fn bench_json(r: &BenchResult, cache_levels: u32, io: &str) -> serde_json::Value {
    serde_json::json!({
        "path": r.path, "layers": r.layers, "threads": r.threads, "batch": r.batch,
        "requests": r.requests, "ops_per_sec": r.ops_per_sec, "mean_us": r.mean_us,
        "p50_us": r.p50_us, "p99_us": r.p99_us, "p999_us": r.p999_us,
        "cpu_us_per_op": r.cpu_us_per_op, "ios_per_op": r.ios_per_op, "fallbacks": r.fallbacks,
        "p95_us": r.p95_us, "cache_levels": cache_levels, "io": io,
        "device_ios_per_op": r.device_ios_per_op,
    })
}

/// Appends `obj` as one JSON line to `p`.
pub(crate) fn append_line(p: &std::path::Path, obj: &serde_json::Value) -> CmdResult {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(p)
        .map_err(|e| format!("{}: {e}", p.display()))?;
    writeln!(f, "{obj}").map_err(|e| format!("{}: {e}", p.display()))?;
    Ok(ExitCode::SUCCESS)
}

/// Runs a user's XRP-style program for one lookup (scratch ABI: docs/FORMAT.md).
fn run_user_prog(
    store: &Store,
    key: u64,
    prog: &std::path::Path,
    section: Option<&str>,
) -> Result<Option<[u8; 64]>, Box<dyn std::error::Error>> {
    use storefn_kv::format::{LOOKUP_OFF_FOUND, LOOKUP_OFF_KEY, LOOKUP_OFF_VALUE, SCRATCH_BYTES};
    use storefn_kv::Step;
    let elf = std::fs::read(prog).map_err(|e| format!("{}: {e}", prog.display()))?;
    let mut inst = storefn_kv::chain::instance(&elf, section)
        .map_err(|e| format!("{}: {e}", prog.display()))?;
    let Step::Node { offset, .. } = store.start(key)? else {
        return Err("--prog needs at least one uncached level (lower --cache-levels)".into());
    };
    let mut scratch = vec![0u8; SCRATCH_BYTES];
    scratch[LOOKUP_OFF_KEY..LOOKUP_OFF_KEY + 8].copy_from_slice(&key.to_le_bytes());
    let nb = store.node_size().bytes() as u64;
    storefn_kv::chain::run_pread(store, &mut inst, offset, nb, &mut scratch)
        .map_err(|e| format!("{}: {e}", prog.display()))?;
    if scratch[LOOKUP_OFF_FOUND] == 0 {
        return Ok(None);
    }
    Ok(Some(scratch[LOOKUP_OFF_VALUE..LOOKUP_OFF_VALUE + 64].try_into().expect("64 bytes")))
}

/// `n` keys drawn uniformly from `0..key_count` with a seeded generator.
pub fn random_keys(n: u64, seed: u64, key_count: u64) -> Vec<u64> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen_range(0..key_count.max(1))).collect()
}

fn create(db: &std::path::Path, layers: u32, node_size: u64) -> CmdResult {
    let ns = NodeSize::from_bytes(node_size)
        .ok_or_else(|| format!("--node-size {node_size}: expected 512 or 4096"))?;
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .expect("valid template"),
    );
    let t0 = Instant::now();
    let meta = create_bpfkv(db, ns, layers, &mut |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    })?;
    bar.finish_and_clear();
    let secs = t0.elapsed().as_secs_f64();
    #[allow(clippy::cast_precision_loss)] // reporting only
    let mbps = meta.file_bytes as f64 / secs / 1e6;
    println!(
        "created {}: {} layers, {} keys, {} nodes, {} bytes in {secs:.2} s ({mbps:.0} MB/s)",
        db.display(),
        meta.layers,
        meta.key_count,
        meta.total_nodes,
        meta.file_bytes
    );
    Ok(ExitCode::SUCCESS)
}

/// Value text NUL-padded to the 64-byte value size.
fn put_value(text: &str) -> Result<[u8; 64], String> {
    let b = text.as_bytes();
    if b.len() > 64 {
        return Err(format!("--value is {} bytes; values hold at most 64", b.len()));
    }
    let mut v = [0u8; 64];
    v[..b.len()].copy_from_slice(b);
    Ok(v)
}

/// Key space of the crash driver: twice the tree's keys, so half the puts are new keys.
fn put_stream(
    db: &std::path::Path,
    count: u64,
    seed: u64,
    memtable_bytes: usize,
    batch: usize,
) -> CmdResult {
    use rand::{Rng, SeedableRng};
    use std::io::Write as _;
    let d = storefn_kv::db::Db::open_with(db, memtable_bytes)?;
    let span = d.store().meta().key_count.max(1) * 2;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut out = std::io::stdout().lock();
    let mut done = 0u64;
    while done < count {
        let n = (count - done).min(batch.max(1) as u64);
        let entries: Vec<(u64, [u8; 64])> = (0..n)
            .map(|i| {
                let k = rng.gen_range(0..span);
                (k, put_value(&format!("s{seed}-{}", done + i)).expect("short"))
            })
            .collect();
        d.put_batch(&entries)?;
        for (k, v) in &entries {
            writeln!(out, "ack {k} {}", value_text(v))?;
        }
        out.flush()?;
        done += n;
    }
    Ok(ExitCode::SUCCESS)
}
