//! `storefn kv ...`: create BPF-KV databases, look keys up through every path, range, bench.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::{Args, Subcommand};
use storefn_kv::format::value_text;
use storefn_kv::range::{aggregate, Agg, RangeScan};
use storefn_kv::{create_bpfkv, LookupPath, NodeSize, ReadPath, Store};

use crate::CmdResult;

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
    /// Look one key up; prints the value as text, or `not found` (exit 1).
    Get {
        db: PathBuf,
        #[arg(long)]
        key: u64,
        #[command(flatten)]
        opts: PathOpts,
        /// Run this XRP-style program (ELF .o) instead of the built-in one (scratch ABI:
        /// docs/FORMAT.md, "Lookup scratch ABI").
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
    /// `max` read the first 8 bytes of each value as a u64, little-endian, as BPF-KV does.
    Range {
        db: PathBuf,
        #[arg(long)]
        begin: u64,
        #[arg(long)]
        end: u64,
        /// sum|min|max|count (sum wraps at 2^64).
        #[arg(long)]
        agg: Option<String>,
    },
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
    /// LRU block cache per thread, in bytes (0 = off).
    #[arg(long, default_value_t = 0)]
    pub cache_bytes: u64,
}

/// The lookup path called `name` over `store`.
pub fn make_path(
    name: &str,
    store: &Arc<Store>,
    cache_bytes: u64,
) -> Result<Box<dyn LookupPath>, Box<dyn std::error::Error>> {
    match name {
        "read" => Ok(Box::new(ReadPath::new(Arc::clone(store), cache_bytes))),
        "uring" | "xrp" | "xrp-batch" => {
            Err(format!("--path {name}: not in this build yet (needs the io engine)").into())
        }
        _ => Err(format!("--path {name}: expected read|uring|xrp|xrp-batch").into()),
    }
}

pub fn run(cmd: &KvCmd) -> CmdResult {
    match cmd {
        KvCmd::Create { db, layers, node_size } => create(db, *layers, *node_size),
        KvCmd::Get { db, key, opts, prog, section } => {
            if prog.is_some() || section.is_some() {
                return Err("--prog: not in this build yet (needs the VM)".into());
            }
            let store = Arc::new(Store::open(db, opts.cache_levels)?);
            let mut path = make_path(&opts.path, &store, opts.cache_bytes)?;
            match path.get(*key)? {
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
            let store = Arc::new(Store::open(db, opts.cache_levels)?);
            let keys = match random {
                Some(n) => random_keys(*n, *seed, store.meta().key_count),
                None if keys.is_empty() => return Err("give --keys or --random".into()),
                None => keys.clone(),
            };
            let mut path = make_path(&opts.path, &store, opts.cache_bytes)?;
            let mut out = Vec::with_capacity(keys.len());
            path.get_many(&keys, &mut out)?;
            let mut missing = 0;
            for (k, l) in keys.iter().zip(&out) {
                match &l.value {
                    Some(v) => println!("{k} {}", value_text(v)),
                    None => {
                        missing += 1;
                        println!("{k} not found");
                    }
                }
            }
            Ok(if missing == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
        KvCmd::Range { db, begin, end, agg } => {
            let store = Store::open(db, 0)?;
            let agg = agg.as_deref().map(str::parse::<Agg>).transpose()?;
            let entries = RangeScan::new(&store).collect(*begin, *end)?;
            match agg {
                None => {
                    for (k, v) in &entries {
                        println!("{k} {}", value_text(v));
                    }
                }
                Some(a) => match aggregate(a, entries.iter().map(|(_, v)| v)) {
                    Some(x) => println!("{x}"),
                    None => println!("empty range"),
                },
            }
            Ok(ExitCode::SUCCESS)
        }
    }
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
