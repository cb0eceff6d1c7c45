//! `storefn demo`: the README's main job, every system once on an embedded default. XRP: creates
//! a 3-layer BPF-KV database, runs every local lookup path on the same random keys, checks they
//! return the same bytes (and the bytes BPF-KV's `create` wrote), and prints a comparison table.
//! Then a loopback storefn server over the same directory: BPF-oF (pushdown vs rpc-read), λ-IO
//! (auto on a cold and a warm range) and DDS (offloaded vs forwarded GetPages), a table each.

mod bpfof;
mod dds;
mod lambda;

use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use storefn_kv::bpfkv_value;
use storefn_kv::harness::bench::{open_path, BenchConfig, Dist, Load, PathOptions, PATH_NAMES};
use storefn_kv::{create_bpfkv, NodeSize, Store};

use crate::CmdResult;

/// The demo database's name in the demo directory (and on the demo server).
const DEMO_DB: &str = "bpfkv.db";
/// Layers of the demo database (2.4 MB: created in well under a second).
const DEMO_LAYERS: u32 = 3;
/// Keys checked for agreement across paths.
const DEMO_CHECK_KEYS: u64 = 2000;
/// Measured lookups per path (one thread); keeps the whole demo to a few seconds.
const DEMO_REQUESTS: u64 = 3000;
/// Lookups in flight on batching paths.
const DEMO_BATCH: usize = 32;

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Directory for the demo database (default: a fresh temporary directory, removed after).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// A temporary directory removed on drop.
struct Scratch(std::path::PathBuf, bool);
impl Drop for Scratch {
    fn drop(&mut self) {
        if self.1 {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

pub fn run(args: &DemoArgs) -> CmdResult {
    let dir = match &args.dir {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
            Scratch(d.clone(), false)
        }
        None => {
            let d = std::env::temp_dir().join(format!("storefn-demo-{}", std::process::id()));
            std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
            Scratch(d, true)
        }
    };
    let db = dir.0.join(DEMO_DB);
    let t0 = std::time::Instant::now();
    let meta = create_bpfkv(&db, NodeSize::B512, DEMO_LAYERS, &mut |_, _| {})?;
    println!(
        "created {} ({} layers, {} keys, {} bytes) in {:.2} s",
        db.display(),
        meta.layers,
        meta.key_count,
        meta.file_bytes,
        t0.elapsed().as_secs_f64()
    );
    let store = Arc::new(Store::open(&db, 0)?);
    let keys = crate::kv::random_keys(DEMO_CHECK_KEYS, args.seed, meta.key_count);
    let opts = PathOptions { batch: DEMO_BATCH, ..PathOptions::default() };

    let mut available = Vec::new();
    for name in PATH_NAMES {
        match open_path(name, &store, &opts) {
            Ok(mut p) if *name != "device" => {
                let mut out = Vec::new();
                p.get_many(&keys, &mut out)?;
                for (k, l) in keys.iter().zip(&out) {
                    if l.value != Some(bpfkv_value(*k)) {
                        return Err(format!("path {name}: key {k} returned wrong bytes").into());
                    }
                }
                available.push(*name);
            }
            Ok(_) => available.push(*name),
            Err(e) => println!("skipping {name}: {e}"),
        }
    }
    println!(
        "{} keys: every lookup path returned the same bytes as BPF-KV's create ({})",
        keys.len(),
        available.iter().filter(|n| **n != "device").copied().collect::<Vec<_>>().join(", ")
    );
    println!();
    println!("XRP: BPF-KV lookups on this machine's file system (1 thread each)");
    println!(
        "{:<10} {:>7} {:>12} {:>10} {:>10} {:>10} {:>11}",
        "path", "batch", "ops/s", "mean µs", "p99 µs", "I/Os/op", "CPU µs/op"
    );
    for name in available {
        let batch = if matches!(name, "xrp-batch" | "device") { DEMO_BATCH } else { 1 };
        let cfg = BenchConfig {
            path: name.to_string(),
            load: Load {
                threads: 1,
                requests: DEMO_REQUESTS,
                batch,
                warmup: 200,
                dist: Dist::Uniform,
                seed: args.seed,
            },
            cache_bytes: 0,
            raw: false,
            prog: storefn_kv::ProgSource::BuiltIn,
            abi: storefn_kv::Abi::Storefn,
        };
        let r = storefn_kv::harness::bench::run(&store, &cfg)?;
        println!(
            "{:<10} {:>7} {:>12.0} {:>10.1} {:>10.1} {:>10.2} {:>11.2}",
            r.path, r.batch, r.ops_per_sec, r.mean_us, r.p99_us, r.ios_per_op, r.cpu_us_per_op
        );
    }
    println!("(device = random single-block reads, the physical reference; 1 thread each)");
    if let Some(e) = storefn_kv::engine_used() {
        println!("(storage functions ran on the VM's {e} engine)");
    }
    served(&dir.0, args.seed)?;
    dds::run(&dir.0, args.seed)?;
    println!();
    println!("demo: every system ran in {:.1} s", t0.elapsed().as_secs_f64());
    Ok(ExitCode::SUCCESS)
}

/// The systems that run against a server: one loopback `storefn serve` over the demo directory.
fn served(dir: &std::path::Path, seed: u64) -> CmdResult {
    const LAMBDA_FILE: &str = "stats64.dat";
    lambda::make_file(&dir.join(LAMBDA_FILE), seed)?;
    let server =
        storefn_server::Server::start("127.0.0.1:0", storefn_server::ServerConfig::new(dir))?;
    let addr = server.local_addr();
    let r = bpfof::run(addr, DEMO_DB, seed).and_then(|_| lambda::run(addr, LAMBDA_FILE));
    server.stop();
    server.join()?;
    r
}
