//! `storefn kv ...`: create BPF-KV databases, look keys up through every path, range, bench.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::{Args, Subcommand};
use storefn_kv::harness::bench::{open_path, BenchConfig, BenchResult, Dist, Load, PathOptions};
use storefn_kv::value_text;
use storefn_kv::Agg;
use storefn_kv::RangeVia;
use storefn_kv::{open_read, Db, DbOptions};
use storefn_kv::{Abi, LookupPath, NodeSize, ProgSource, Store};

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
        /// Wait up to SECS for another writer's lock instead of failing at once.
        #[arg(long, value_name = "SECS")]
        wait_lock: Option<f64>,
    },
    /// Insert or update a key (durable on return); value: text, NUL-padded to 64 bytes.
    Put {
        db: PathBuf,
        #[arg(long)]
        key: u64,
        #[arg(long)]
        value: String,
        #[command(flatten)]
        write: WriteOpts,
    },
    /// Merge the WAL's memtable into a new tree file and swap it in atomically.
    Compact {
        db: PathBuf,
        #[command(flatten)]
        write: WriteOpts,
    },
    /// As the writer: finish an interrupted compaction and cut a torn WAL tail; with
    /// --point-in-time also drop a corrupt WAL batch and everything after it, printing what went.
    Recover {
        db: PathBuf,
        #[arg(long)]
        point_in_time: bool,
        #[command(flatten)]
        write: WriteOpts,
    },
    /// Crash-test driver: prints `locked NS` once it holds the writer's lock, then makes `count`
    /// random puts, printing `ack KEY VALUE` once each is durable.
    #[command(hide = true)]
    PutStream {
        db: PathBuf,
        #[arg(long)]
        count: u64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Memtable limit in bytes (small values force frequent compactions).
        #[arg(long, default_value_t = storefn_kv::limits::DEFAULT_MEMTABLE_LIMIT_BYTES)]
        memtable_bytes: usize,
        /// Puts submitted together per group commit.
        #[arg(long, default_value_t = 1)]
        batch: usize,
        #[command(flatten)]
        write: WriteOpts,
    },
    /// Look one key up; prints the value as text, or `not found` (exit 1).
    Get {
        db: PathBuf,
        #[arg(long)]
        key: u64,
        #[command(flatten)]
        opts: PathOpts,
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
        /// xrp: a resumable range storage function on the io engine (32 results per call;
        /// 512 B nodes): the built-in one, or --prog; read: leaf scan with pread.
        /// Default: xrp for 512 B nodes, read for 4096 B.
        #[arg(long)]
        path: Option<String>,
        #[command(flatten)]
        shape: ShapeOpts,
        #[command(flatten)]
        prog: ProgOpts,
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
    /// LRU block cache per thread, bytes, on the read, uring, xrp and xrp-batch paths (0 = off).
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
    pub shape: ShapeOpts,
    #[command(flatten)]
    pub prog: ProgOpts,
    #[command(flatten)]
    pub remote: crate::kv_remote::RemoteOpts,
}

impl BenchArgs {
    /// The offered load; `--batch` defaults to `default_batch`.
    pub fn load(&self, default_batch: usize) -> Result<Load, storefn_kv::KvError> {
        Ok(Load {
            threads: self.threads,
            requests: self.requests,
            batch: self.batch.unwrap_or(default_batch),
            warmup: self.warmup,
            dist: self.dist.parse::<Dist>()?,
            seed: self.seed,
        })
    }
}

/// `--layers`, taken by every command that opens a database.
#[derive(Debug, Args)]
pub struct ShapeOpts {
    /// Depth of a BPF-KV file without DB.meta (default: inferred from size and root); a
    /// command that writes then creates DB.meta.
    #[arg(long)]
    pub layers: Option<u32>,
}

/// Options of every command that writes a database.
#[derive(Debug, Args)]
pub struct WriteOpts {
    /// Wait up to SECS for another writer's lock instead of failing at once.
    #[arg(long, value_name = "SECS")]
    pub wait_lock: Option<f64>,
    #[command(flatten)]
    pub shape: ShapeOpts,
}

impl WriteOpts {
    fn db_options(&self, memtable_limit_bytes: usize) -> Result<DbOptions, String> {
        Ok(DbOptions {
            memtable_limit_bytes,
            wait_lock: wait_secs(self.wait_lock)?,
            layers: self.shape.layers,
            ..DbOptions::default()
        })
    }
}

/// `--wait-lock SECS` as a duration.
fn wait_secs(secs: Option<f64>) -> Result<Option<std::time::Duration>, String> {
    secs.map(|s| {
        std::time::Duration::try_from_secs_f64(s).map_err(|e| format!("--wait-lock {s}: {e}"))
    })
    .transpose()
}

/// The storage function of the chain paths and its scratch layout.
#[derive(Debug, Args)]
pub struct ProgOpts {
    /// Run this XRP-style program (ELF .o) instead of the built-in one, as chains on the io
    /// engine (--path xrp|xrp-batch). A failing program is an error (no fallback).
    #[arg(long)]
    pub prog: Option<PathBuf>,
    /// ELF section of the program in --prog (default: the first XRP section).
    #[arg(long, requires = "prog")]
    pub section: Option<String>,
    /// Scratch layout of the program: storefn (docs/FORMAT.md, "Lookup scratch ABI" / "Range
    /// scratch ABI") or bpfkv (BPF-KV's ScatterGatherQuery / RangeQuery, as XRP's get.c and
    /// range.c expect; up to 32 keys per chain in multiget). Without --prog, bpfkv runs our
    /// built-in programs written for those layouts.
    #[arg(long, default_value = "storefn", value_parser = parse_abi)]
    pub abi: Abi,
}

fn parse_abi(s: &str) -> Result<Abi, String> {
    s.parse::<Abi>().map_err(|e| e.to_string())
}

impl ProgOpts {
    /// The program source: the --prog file's bytes, or the built-in program.
    fn source(&self) -> Result<ProgSource, Box<dyn std::error::Error>> {
        match &self.prog {
            None => Ok(ProgSource::BuiltIn),
            Some(p) => Ok(ProgSource::User {
                elf: std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?,
                section: self.section.clone(),
            }),
        }
    }
}

/// Options shared by every lookup command.
#[derive(Debug, Args)]
pub struct PathOpts {
    /// read | uring | xrp | xrp-batch [default: read, or xrp with --prog or --abi bpfkv]
    #[arg(long)]
    pub path: Option<String>,
    /// Keep the top k levels in memory and start reads below them.
    #[arg(long, default_value_t = 0)]
    pub cache_levels: u32,
    /// LRU block cache per thread, in bytes, on the read, uring, xrp and xrp-batch paths
    /// (0 = off).
    #[arg(long, default_value_t = 0)]
    pub cache_bytes: u64,
    /// file | raw (read and engine paths; see `kv bench --help`).
    #[arg(long, value_enum, default_value_t = IoArg::File)]
    pub io: IoArg,
    #[command(flatten)]
    pub shape: ShapeOpts,
    #[command(flatten)]
    pub prog: ProgOpts,
    #[command(flatten)]
    pub remote: crate::kv_remote::RemoteOpts,
}

impl PathOpts {
    /// The path name: as given, else xrp when a program or the BPF-KV ABI asks for chains.
    fn path_name(&self) -> &str {
        match &self.path {
            Some(p) => p,
            None if self.prog.prog.is_some() || self.prog.abi == Abi::BpfKv => "xrp",
            None => "read",
        }
    }
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

/// The lookup path `opts` names over `store`; `keys_per_chain` keys ride one chain (BPF-KV ABI).
pub fn make_path(
    store: &Arc<Store>,
    opts: &PathOpts,
    keys_per_chain: usize,
) -> Result<Box<dyn LookupPath>, Box<dyn std::error::Error>> {
    let o = PathOptions {
        cache_bytes: opts.cache_bytes,
        batch: 32,
        raw: opts.io == IoArg::Raw,
        prog: opts.prog.source()?,
        abi: opts.prog.abi,
        keys_per_chain,
    };
    open_path(opts.path_name(), store, &o).map_err(|e| prog_err(&opts.prog, e))
}

pub fn run(cmd: &KvCmd) -> CmdResult {
    match cmd {
        KvCmd::Create { db, layers, node_size, wait_lock } => {
            create(db, *layers, *node_size, wait_secs(*wait_lock)?)
        }
        KvCmd::Put { db, key, value, write } => {
            let v = put_value(value)?;
            let limit = storefn_kv::limits::DEFAULT_MEMTABLE_LIMIT_BYTES;
            Db::open_opts(db, write.db_options(limit)?)?.put(*key, &v)?;
            Ok(ExitCode::SUCCESS)
        }
        KvCmd::Compact { db, write } => {
            let limit = storefn_kv::limits::DEFAULT_MEMTABLE_LIMIT_BYTES;
            Db::open_opts(db, write.db_options(limit)?)?.compact()?;
            Ok(ExitCode::SUCCESS)
        }
        KvCmd::Recover { db, point_in_time, write } => {
            recover(db, *point_in_time, wait_secs(write.wait_lock)?)
        }
        KvCmd::PutStream { db, count, seed, memtable_bytes, batch, write } => {
            let d = Db::open_opts(db, write.db_options(*memtable_bytes)?)?;
            put_stream(&d, *count, *seed, *batch)
        }
        KvCmd::Get { opts, .. } if opts.remote.any() && opts.prog.prog.is_some() => {
            Err("--prog runs a program locally; with --remote use --path pushdown".into())
        }
        KvCmd::Get { db, key, opts } if opts.remote.cluster.is_some() => {
            let path = opts.path.as_deref().unwrap_or("pushdown");
            crate::kv_remote::cluster_get(db, *key, path, &opts.remote)
        }
        KvCmd::Multiget { db, keys, random, seed, opts } if opts.remote.cluster.is_some() => {
            let path = opts.path.as_deref().unwrap_or("pushdown");
            crate::kv_remote::cluster_multiget(
                db,
                keys,
                random.map(|n| (n, *seed)),
                path,
                &opts.remote,
            )
        }
        KvCmd::Bench(a) if a.remote.cluster.is_some() => crate::kv_remote::cluster_bench(a),
        KvCmd::Get { db, key, opts } if opts.remote.remote.is_some() => {
            let addr = opts.remote.remote.as_deref().expect("checked");
            let path = opts.path.as_deref().unwrap_or("pushdown");
            crate::kv_remote::get(db, *key, path, opts.cache_levels, &opts.remote, addr)
        }
        KvCmd::Multiget { db, keys, random, seed, opts } if opts.remote.remote.is_some() => {
            let addr = opts.remote.remote.as_deref().expect("checked");
            let r = random.map(|n| (n, *seed));
            let path = opts.path.as_deref().unwrap_or("pushdown");
            crate::kv_remote::multiget(db, keys, r, path, opts.cache_levels, &opts.remote, addr)
        }
        KvCmd::Bench(a) if a.remote.remote.is_some() => {
            crate::kv_remote::bench(a, a.remote.remote.as_deref().expect("checked"))
        }
        KvCmd::Get { db, key, opts } => {
            // Puts not yet compacted live in the WAL (the memtable): they win over the tree.
            // A user program answers from the tree alone.
            let view = open_read(db, opts.cache_levels, opts.shape.layers)?;
            if let (None, Some(v)) = (&opts.prog.prog, view.mem.get(*key)) {
                println!("{}", value_text(v));
                return Ok(ExitCode::SUCCESS);
            }
            let store = Arc::new(view.store);
            let found =
                make_path(&store, opts, 1)?.get(*key).map_err(|e| prog_err(&opts.prog, e))?;
            Ok(print_get(found.as_ref()))
        }
        KvCmd::Multiget { db, keys, random, seed, opts } => {
            let view = open_read(db, opts.cache_levels, opts.shape.layers)?;
            let (mem, store) = (view.mem, Arc::new(view.store));
            let keys = pick_keys(keys, random.map(|n| (n, *seed)), store.meta().key_count)?;
            let kpc = opts.prog.abi.max_keys_per_chain();
            let mut path = make_path(&store, opts, kpc)?;
            let found = storefn_kv::multiget(path.as_mut(), &mem, &keys)
                .map_err(|e| prog_err(&opts.prog, e))?;
            Ok(print_multiget(&keys, &found))
        }
        KvCmd::Range { db, begin, end, agg, path, shape, prog } => {
            let view = open_read(db, 0, shape.layers)?;
            let (mem, store) = (view.mem, view.store);
            let agg = agg.as_deref().map(str::parse::<Agg>).transpose()?;
            let chain = || -> Result<RangeVia, Box<dyn std::error::Error>> {
                Ok(RangeVia::Chain { prog: prog.source()?, abi: prog.abi })
            };
            let via = match path.as_deref() {
                None if prog.prog.is_some() || prog.abi == Abi::BpfKv => chain()?,
                None => RangeVia::default_for(store.node_size()),
                Some("xrp") => chain()?,
                Some("read") if prog.prog.is_none() => RangeVia::Read,
                Some("read") => return Err("--prog runs on --path xrp".into()),
                Some(p) => return Err(format!("--path {p}: expected read|xrp").into()),
            };
            let o = storefn_kv::range(&store, &mem, *begin, *end, agg, &via)
                .map_err(|e| prog_err(prog, e))?;
            let (entries, value) = (o.entries, o.agg);
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
    // Lookups measure the tree alone (read-only: an interrupted compaction is read as recovery
    // would finish it, and left for the next writer to finish).
    let store = Arc::new(open_read(&a.db, a.cache_levels, a.shape.layers)?.store);
    let cfg = BenchConfig {
        path: a.path.clone(),
        load: a.load(if a.path == "xrp-batch" { DEFAULT_XRP_BATCH } else { 1 })?,
        cache_bytes: a.cache_bytes,
        raw: a.io == BenchIo::One(IoArg::Raw),
        prog: a.prog.source()?,
        abi: a.prog.abi,
    };
    let io = match a.io {
        BenchIo::One(_) if a.rounds.is_some() => {
            return Err("--rounds applies to --io file,raw only".into());
        }
        BenchIo::One(io) => io,
        BenchIo::Both => return bench_compare(a, &store, &cfg),
    };
    let r = storefn_kv::harness::bench::run(&store, &cfg)?;
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
    let c = storefn_kv::harness::compare::run(
        store,
        cfg,
        a.rounds.unwrap_or(storefn_kv::limits::DEFAULT_ROUNDS),
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
        println!("VM engine: {}", storefn_kv::engine_used().unwrap_or("none"));
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

/// A lookup error, prefixed with the --prog file when one ran.
fn prog_err(prog: &ProgOpts, e: storefn_kv::KvError) -> Box<dyn std::error::Error> {
    match &prog.prog {
        Some(p) => format!("{}: {e}", p.display()).into(),
        None => e.into(),
    }
}

/// `n` keys drawn uniformly from `0..key_count` with a seeded generator.
/// `kv get`'s output, local or remote: the value as text, or `not found` (exit 1).
pub(crate) fn print_get(found: Option<&[u8; storefn_kv::layout::tree::VALUE_BYTES]>) -> ExitCode {
    match found {
        Some(v) => {
            println!("{}", value_text(v));
            ExitCode::SUCCESS
        }
        None => {
            println!("not found");
            ExitCode::FAILURE
        }
    }
}

/// `kv multiget`'s output, local or remote: `KEY VALUE` or `KEY not found` per key; exit 1 if
/// any key was missing.
pub(crate) fn print_multiget(
    keys: &[u64],
    found: &[Option<[u8; storefn_kv::layout::tree::VALUE_BYTES]>],
) -> ExitCode {
    let mut missing = 0;
    for (k, v) in keys.iter().zip(found) {
        match v {
            Some(v) => println!("{k} {}", value_text(v)),
            None => {
                missing += 1;
                println!("{k} not found");
            }
        }
    }
    if missing == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `kv multiget`'s keys: `--random N --seed S` over `key_count` keys, else `--keys`.
pub(crate) fn pick_keys(
    keys: &[u64],
    random: Option<(u64, u64)>,
    key_count: u64,
) -> Result<Vec<u64>, Box<dyn std::error::Error>> {
    match random {
        Some((n, seed)) => Ok(random_keys(n, seed, key_count)),
        None if keys.is_empty() => Err("give --keys or --random".into()),
        None => Ok(keys.to_vec()),
    }
}

pub fn random_keys(n: u64, seed: u64, key_count: u64) -> Vec<u64> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen_range(0..key_count.max(1))).collect()
}

/// `kv recover`: prints what it repaired and, with --point-in-time, what it dropped.
fn recover(
    db: &std::path::Path,
    point_in_time: bool,
    wait: Option<std::time::Duration>,
) -> CmdResult {
    let (repaired, dropped) = storefn_kv::recover_db(db, point_in_time, wait)?;
    if repaired {
        println!("finished an interrupted compaction of {}", db.display());
    }
    match dropped {
        Some(d) => println!(
            "dropped {} bytes of the WAL from offset {} ({}): {} committed batches after it, \
             {} records{}",
            d.bytes,
            d.offset,
            d.reason,
            d.batches,
            d.records,
            d.seqs.map_or_else(String::new, |(a, b)| format!(", sequence numbers {a}..={b}"))
        ),
        None if point_in_time => println!("WAL has no corruption: nothing dropped"),
        None => {}
    }
    println!("recovered {}", db.display());
    Ok(ExitCode::SUCCESS)
}

fn create(
    db: &std::path::Path,
    layers: u32,
    node_size: u64,
    wait: Option<std::time::Duration>,
) -> CmdResult {
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
    let meta = storefn_kv::create_db(db, ns, layers, wait, &mut |done, total| {
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
fn put_stream(d: &Db, count: u64, seed: u64, batch: usize) -> CmdResult {
    use rand::{Rng, SeedableRng};
    use std::io::Write as _;
    let span = d.store().meta().key_count.max(1) * 2;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut out = std::io::stdout().lock();
    // When this writer got the lock (wall clock, ns): orders writer processes in tests.
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
    writeln!(out, "locked {}", since.as_nanos())?;
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
