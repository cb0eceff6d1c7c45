//! `storefn wt`: point lookups in a WiredTiger database's own files, read-only.

use crate::CmdResult;
use clap::{Args, Subcommand, ValueEnum};
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use storefn_wiredtiger::bench::{BenchConfig, Target, Workload};
use storefn_wiredtiger::{
    Answer, ChainOptions, Format, Lookups, ReadPath, RemotePath, RemoteTable,
};

#[derive(Debug, Subcommand)]
pub enum WtCmd {
    /// Print a key's value as `wt read` does (exit 1 and `not found` if absent).
    Get(GetArgs),
    /// Look up one key per line of a file; print `key<TAB>value` lines.
    Multiget(MultigetArgs),
    /// Time lookups (db_bench habits: a workload, --seed, --threads, warm-up, p50/p99/p99.9,
    /// one summary line, --json).
    Bench(BenchArgs),
    /// The device's own bound for a table's leaves: random O_DIRECT reads of its leaf blocks
    /// (their real addresses and sizes) at queue depth 1 and --depth.
    LeafBound(LeafBoundArgs),
}

#[derive(Debug, Args)]
pub struct LeafBoundArgs {
    /// The database directory.
    dir: PathBuf,
    #[arg(long)]
    table: String,
    /// Reads in flight for the second case (at most 32).
    #[arg(long, default_value_t = 32)]
    depth: usize,
    /// Reads per case.
    #[arg(long, default_value_t = 20_000)]
    reads: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the result as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum WtPath {
    /// Plain reads, one page at a time, in this process.
    Read,
    /// The storage function progs/engines/wiredtiger: one chain per lookup, a hop per page.
    Xrp,
    /// The storage function with many chains in flight (multiget, bench).
    XrpBatch,
    /// With --remote: one round trip of READs per page.
    RpcRead,
    /// With --remote: the storage function on the server, one round trip per lookup.
    Pushdown,
}

#[derive(Debug, Args)]
pub struct TableArgs {
    /// The database directory (holds WiredTiger.turtle).
    dir: PathBuf,
    /// The table name (as in `table:NAME`).
    #[arg(long)]
    table: String,
    #[arg(long, value_enum, default_value = "read")]
    path: WtPath,
    /// A `storefn serve` server holding DIR (then relative to its served directory); --path is
    /// rpc-read or pushdown.
    #[arg(long)]
    remote: Option<String>,
    /// Token file for --remote (`TENANT SECRET`; the first line is used).
    #[arg(long, requires = "remote")]
    token_file: Option<PathBuf>,
    /// xrp, xrp-batch: O_DIRECT reads (each hop goes to the device; a `storefn serve` server
    /// reads the same way).
    #[arg(long)]
    direct: bool,
    /// xrp, xrp-batch: a block cache of this many bytes (internal pages searched on the host,
    /// leaves searched in place by the function; per reader thread).
    #[arg(long, default_value_t = 0)]
    cache_bytes: u64,
    /// pushdown: send every lookup's chain from the root (the server reads the internal pages
    /// too) instead of from the leaf the client's cache of internal pages names.
    #[arg(long)]
    no_internal_cache: bool,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(flatten)]
    t: TableArgs,
    /// The key population, one key per line.
    #[arg(long)]
    keys_file: PathBuf,
    /// uniform, zipfian (θ 0.99) or absent (keys of the file plus a byte).
    #[arg(long, default_value = "uniform")]
    workload: String,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Timed lookups per thread.
    #[arg(long, default_value_t = 20_000)]
    ops: u64,
    /// Untimed lookups per thread first.
    #[arg(long, default_value_t = 2_000)]
    warmup: u64,
    /// xrp-batch: lookups per batch.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Write the result as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct GetArgs {
    #[command(flatten)]
    t: TableArgs,
    #[arg(long)]
    key: String,
}

#[derive(Debug, Args)]
pub struct MultigetArgs {
    #[command(flatten)]
    t: TableArgs,
    /// One key per line.
    #[arg(long)]
    keys_file: PathBuf,
}

pub fn run(cmd: &WtCmd) -> CmdResult {
    match cmd {
        WtCmd::Get(a) => get(a),
        WtCmd::Multiget(a) => multiget(a),
        WtCmd::Bench(a) => bench(a),
        WtCmd::LeafBound(a) => leaf_bound(a),
    }
}

fn leaf_bound(a: &LeafBoundArgs) -> CmdResult {
    let r = storefn_wiredtiger::bench::leaf_bound(&a.dir, &a.table, a.depth, a.reads, a.seed)?;
    println!(
        "wt leaf-bound {}: {} leaves of {:.0} bytes on average; QD1 mean {:.1} us, p50 {:.1} us; \
         QD{} {:.0} reads/s, {:.0} MiB/s; {} internal pages, QD1 mean {:.1} us",
        a.table,
        r.leaves,
        r.mean_leaf_bytes,
        r.qd1_mean_us,
        r.qd1_p50_us,
        r.depth,
        r.qdn_reads_per_sec,
        r.qdn_mib_per_sec,
        r.internal_blocks,
        r.internal_qd1_mean_us
    );
    if let Some(j) = &a.json {
        let v = serde_json::json!({
            "table": a.table, "leaves": r.leaves, "mean_leaf_bytes": r.mean_leaf_bytes,
            "qd1_mean_us": r.qd1_mean_us, "qd1_p50_us": r.qd1_p50_us, "depth": r.depth,
            "qdn_reads_per_sec": r.qdn_reads_per_sec, "qdn_mib_per_sec": r.qdn_mib_per_sec,
            "internal_blocks": r.internal_blocks, "internal_qd1_mean_us": r.internal_qd1_mean_us,
            "reads": a.reads, "seed": a.seed,
        });
        std::fs::write(j, serde_json::to_vec_pretty(&v)?)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// A table opened on the path the arguments name, locally or on a server.
enum Reader {
    Local(Box<Lookups>),
    Remote(Box<RemoteTable>, RemotePath),
}

impl Reader {
    fn get(
        &mut self,
        key: &[u8],
        value: &mut Vec<u8>,
    ) -> Result<Answer, storefn_wiredtiger::WtError> {
        match self {
            Reader::Local(l) => l.get(key, value),
            Reader::Remote(t, p) => t.get(key, *p, value),
        }
    }

    fn value_format(&self) -> Format {
        match self {
            Reader::Local(l) => l.table().value_format,
            Reader::Remote(t, _) => t.formats().1,
        }
    }
}

type Dyn = Box<dyn std::error::Error>;

fn client_cfg(t: &TableArgs) -> Result<storefn_wire::ClientConfig, Dyn> {
    Ok(match &t.token_file {
        Some(f) => storefn_server::client_config(f)?,
        None => storefn_wire::ClientConfig::default(),
    })
}

fn target(t: &TableArgs) -> Result<Target, Dyn> {
    let chains = ChainOptions { direct: t.direct, cache_bytes: t.cache_bytes };
    let local = |path| Ok(Target::Local { dir: t.dir.clone(), path, chains });
    let remote = |path| -> Result<Target, Dyn> {
        let addr = t.remote.clone().ok_or("--path rpc-read|pushdown needs --remote ADDR")?;
        let dir = t.dir.to_str().ok_or("DIR must be UTF-8 with --remote")?.to_string();
        let internal_cache = !t.no_internal_cache;
        Ok(Target::Remote { addr, cfg: client_cfg(t)?, dir, path, internal_cache })
    };
    if t.remote.is_some() && !matches!(t.path, WtPath::RpcRead | WtPath::Pushdown) {
        return Err("with --remote, --path is rpc-read or pushdown".into());
    }
    match t.path {
        WtPath::Read => local(ReadPath::Read),
        WtPath::Xrp => local(ReadPath::Xrp),
        WtPath::XrpBatch => local(ReadPath::XrpBatch),
        WtPath::RpcRead => remote(RemotePath::RpcRead),
        WtPath::Pushdown => remote(RemotePath::Pushdown),
    }
}

fn open(t: &TableArgs) -> Result<Reader, Dyn> {
    Ok(match target(t)? {
        Target::Local { dir, path, chains } => {
            Reader::Local(Box::new(Lookups::open_with(&dir, &t.table, path, chains)?))
        }
        Target::Remote { addr, cfg, dir, path, internal_cache } => {
            let c = storefn_wire::Client::connect(&addr, cfg)?;
            let mut r = RemoteTable::open(c, &dir, &t.table)?;
            if !internal_cache {
                r.without_internal_cache();
            }
            Reader::Remote(Box::new(r), path)
        }
    })
}

/// The value as `wt read` prints it: an `S` value without its NUL.
fn shown(format: Format, stored: &[u8]) -> Result<&[u8], Box<dyn std::error::Error>> {
    format.decode(stored).ok_or_else(|| "a key_format=S value without its NUL byte".into())
}

fn get(a: &GetArgs) -> CmdResult {
    let mut l = open(&a.t)?;
    let mut value = Vec::new();
    let mut out = std::io::stdout().lock();
    match l.get(a.key.as_bytes(), &mut value)? {
        Answer::Found => {
            out.write_all(shown(l.value_format(), &value)?)?;
            out.write_all(b"\n")?;
            Ok(ExitCode::SUCCESS)
        }
        Answer::NotFound => {
            writeln!(out, "not found")?;
            Ok(ExitCode::from(1))
        }
    }
}

fn multiget(a: &MultigetArgs) -> CmdResult {
    let mut l = open(&a.t)?;
    let keys = std::io::BufReader::new(
        std::fs::File::open(&a.keys_file).map_err(|e| format!("{}: {e}", a.keys_file.display()))?,
    );
    let mut value = Vec::new();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut missing = 0u64;
    for line in keys.split(b'\n') {
        let mut key = line?;
        if key.last() == Some(&b'\r') {
            key.pop();
        }
        out.write_all(&key)?;
        out.write_all(b"\t")?;
        match l.get(&key, &mut value)? {
            Answer::Found => out.write_all(shown(l.value_format(), &value)?)?,
            Answer::NotFound => {
                missing += 1;
                out.write_all(b"not found")?;
            }
        }
        out.write_all(b"\n")?;
    }
    out.flush()?;
    match &l {
        Reader::Local(l) => {
            let s = l.stats;
            eprintln!(
                "{} lookups, {} not found, {} answered by WiredTiger's own API (fallbacks), {} \
                 handed back by the storage function, {} moves to a newer checkpoint",
                s.lookups, missing, s.fallbacks, s.function_fallbacks, s.reloads
            );
        }
        Reader::Remote(t, _) => {
            let s = t.stats;
            eprintln!(
                "{} lookups, {} not found, {} round trips, {} pages read, {} handed back by the \
                 storage function (answered with READs)",
                s.lookups, missing, s.round_trips, s.pages, s.fallbacks
            );
        }
    }
    Ok(if missing == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn bench(a: &BenchArgs) -> CmdResult {
    let text =
        std::fs::read(&a.keys_file).map_err(|e| format!("{}: {e}", a.keys_file.display()))?;
    let keys: Vec<Vec<u8>> = text
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l).to_vec())
        .filter(|l| !l.is_empty())
        .collect();
    let cfg = BenchConfig {
        target: target(&a.t)?,
        table: a.t.table.clone(),
        keys,
        workload: a.workload.parse::<Workload>()?,
        seed: a.seed,
        threads: a.threads,
        ops: a.ops,
        warmup: a.warmup,
        batch: if matches!(a.t.path, WtPath::XrpBatch) { a.batch.max(1) } else { 1 },
    };
    let r = storefn_wiredtiger::bench::run(&cfg)?;
    let path = format!("{:?}", a.t.path).to_lowercase();
    println!(
        "wt bench {path} {} threads {}: {:.0} ops/s, mean {:.1} us, p50 {:.1} us, p99 {:.1} us, \
         p99.9 {:.1} us, {} lookups ({} found), {} fallbacks, {:.3} round trips and {:.2} pages \
         per lookup, rtt {:.1} us (mean {:.1})",
        a.workload,
        a.threads,
        r.ops_per_sec,
        r.mean_us,
        r.tail.p50_us,
        r.tail.p99_us,
        r.tail.p999_us,
        r.lookups,
        r.found,
        r.fallbacks,
        r.round_trips_per_lookup,
        r.pages_per_lookup,
        r.rtt_us,
        r.rtt_mean_us
    );
    if let Some(j) = &a.json {
        let v = serde_json::json!({
            "path": path, "workload": a.workload, "threads": a.threads, "seed": a.seed,
            "table": a.t.table, "lookups": r.lookups, "found": r.found, "secs": r.secs,
            "ops_per_sec": r.ops_per_sec, "mean_us": r.mean_us, "p50_us": r.tail.p50_us,
            "p99_us": r.tail.p99_us, "p999_us": r.tail.p999_us, "fallbacks": r.fallbacks,
            "round_trips_per_lookup": r.round_trips_per_lookup,
            "pages_per_lookup": r.pages_per_lookup, "rtt_us": r.rtt_us,
            "rtt_mean_us": r.rtt_mean_us,
        });
        std::fs::write(j, serde_json::to_vec_pretty(&v)?)?;
    }
    Ok(ExitCode::SUCCESS)
}
