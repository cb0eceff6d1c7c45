//! `storefn io ...`: probe what the engine can do here, and the chain microbenchmark.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use storefn_io::harness::{self, ChainFunction, IoBenchConfig};
use storefn_io::{Engine, EngineConfig, IoMode};

use crate::CmdResult;

#[derive(Debug, Subcommand)]
pub enum IoCmd {
    /// Report what the engine can do here: io_uring, O_DIRECT alignment, SQPOLL, IOPOLL.
    Probe {
        /// File to open through the engine (default: a small temp file).
        #[arg(long)]
        file: Option<PathBuf>,
    },
    /// Chains of depth D over random pointers: pread per hop, io_uring per hop, one chain,
    /// N chains in flight, and the device reference (random block reads at QD1 and QD N).
    Bench(BenchArgs),
    /// Build a file's metadata digest (FIEMAP extent map) and time lookups through it.
    Digest(crate::digest_cmd::DigestArgs),
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Hops (block reads) per chain.
    #[arg(long, default_value_t = 4)]
    depth: u32,
    /// Chains in flight for the batch case (and queue depth of the QD N reference).
    #[arg(long, default_value_t = 32)]
    chains: usize,
    /// Measured chains per case (reference cases read requests x depth blocks).
    #[arg(long, default_value_t = 2000)]
    requests: usize,
    /// Warm-up chains per case (not measured).
    #[arg(long, default_value_t = 100)]
    warmup: usize,
    /// Where to create the pointer file (default: a temp file in $TMPDIR or /tmp, removed
    /// afterwards; it must be on a file system that allows O_DIRECT unless --buffered).
    #[arg(long)]
    file: Option<PathBuf>,
    /// Size of the pointer file in MiB.
    #[arg(long, default_value_t = 256)]
    size_mb: u64,
    /// Node (block) size in bytes; nodes sit at node-aligned offsets.
    #[arg(long, default_value_t = 512)]
    node: u64,
    /// Seed of the pointer file and the chain starts.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Threads for the in-flight cases (d and QD N); each has its own engine (one ring per
    /// thread) and keeps --chains in flight.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Storage function of the chain cases: `rust` (a closure), `interp` or `jit` (the VM
    /// running progs/io_hop_chain.bpf.c).
    #[arg(long, value_enum, default_value_t = FnKind::Rust)]
    function: FnKind,
    /// Read through the page cache instead of O_DIRECT.
    #[arg(long, conflicts_with = "io")]
    buffered: bool,
    /// How the engine reads: `file` (O_DIRECT through the file system) or `raw` (the block
    /// device, each hop translated through the file's metadata digest; when raw mode cannot be
    /// set up the bench says why and runs on the file path).
    #[arg(long, value_enum, default_value_t = IoKind::File)]
    io: IoKind,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// `--io`: the engine's read path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum IoKind {
    File,
    Raw,
}

/// Who runs the chain's storage function in the bench.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FnKind {
    Rust,
    Interp,
    Jit,
}

pub fn run(cmd: &IoCmd) -> CmdResult {
    match cmd {
        IoCmd::Probe { file } => probe(file.as_deref()),
        IoCmd::Bench(a) => bench(a),
        IoCmd::Digest(a) => crate::digest_cmd::run(a),
    }
}

/// A file removed when dropped (unless the user named it).
struct BenchFile {
    path: PathBuf,
    remove: bool,
}

impl Drop for BenchFile {
    fn drop(&mut self) {
        if self.remove {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn probe(file: Option<&Path>) -> CmdResult {
    let mut e = Engine::new(EngineConfig::default())?;
    let cfg = e.config();
    println!("io_uring: ok (ring depth {}, {} registered buffers)", cfg.ring_depth, cfg.buffers);
    let tmp;
    let path = if let Some(p) = file {
        p.to_path_buf()
    } else {
        tmp = BenchFile {
            path: std::env::temp_dir().join(format!("storefn-probe-{}", std::process::id())),
            remove: true,
        };
        std::fs::write(&tmp.path, vec![0u8; 64 * 1024])?;
        tmp.path.clone()
    };
    println!("file: {} on {}", path.display(), harness::device_of(&path));
    match e.open(&path, IoMode::Direct) {
        Ok(id) => println!(
            "O_DIRECT: ok, offset alignment {} B, size {} B",
            e.file_align(id).unwrap_or(0),
            e.file_size(id).unwrap_or(0)
        ),
        Err(err) => println!("O_DIRECT: {err}"),
    }
    let sq = EngineConfig { sqpoll_idle_ms: Some(10), ..EngineConfig::default() };
    match Engine::new(sq).and_then(|mut e| e.open(&path, IoMode::Direct).map(drop)) {
        Ok(()) => println!("SQPOLL: available (not a default: it spins a core)"),
        Err(err) => println!("SQPOLL: {err}"),
    }
    let ip = EngineConfig { iopoll: true, ..EngineConfig::default() };
    match Engine::new(ip).and_then(|mut e| e.open(&path, IoMode::Direct).map(drop)) {
        Ok(()) => println!("IOPOLL: available"),
        Err(err) => println!("IOPOLL: {err}"),
    }
    Ok(ExitCode::SUCCESS)
}

fn bench(a: &BenchArgs) -> CmdResult {
    let bf = match &a.file {
        Some(p) => BenchFile { path: p.clone(), remove: false },
        None => BenchFile {
            path: std::env::temp_dir().join(format!("storefn-io-bench-{}", std::process::id())),
            remove: true,
        },
    };
    let function = match a.function {
        FnKind::Rust => ChainFunction::Rust,
        FnKind::Interp | FnKind::Jit => ChainFunction::Vm {
            engine: if a.function == FnKind::Jit {
                storefn_vm::Engine::Jit
            } else {
                storefn_vm::Engine::Interp
            },
            elf: storefn_progs::must("io_hop_chain"),
        },
    };
    let cfg = IoBenchConfig {
        depth: a.depth,
        chains: a.chains,
        requests: a.requests,
        warmup: a.warmup,
        file: bf.path.clone(),
        size_bytes: a.size_mb << 20,
        node_bytes: a.node,
        seed: a.seed,
        threads: a.threads,
        function,
        buffered: a.buffered,
        raw: a.io == IoKind::Raw,
    };
    eprintln!("io bench: writing {} MiB of random pointers to {}", a.size_mb, bf.path.display());
    let r = harness::run(&cfg)?;
    if let Some(why) = &r.raw_fallback {
        eprintln!("io bench: {why}; falling back to the file path");
    }
    let cases = &r.cases;
    println!(
        "{:<24} {:>10} {:>12} {:>9} {:>9} {:>9} {:>9} {:>10}",
        "case", "hops", "hops/s", "mean_us", "p50_us", "p99_us", "p99.9_us", "cpu_us/hop"
    );
    for c in cases {
        println!(
            "{:<24} {:>10} {:>12.0} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>10.2}",
            c.name,
            c.hops,
            c.hops_per_s(),
            c.mean_us(),
            c.pct_us(0.5),
            c.pct_us(0.99),
            c.pct_us(0.999),
            c.cpu_us_per_hop()
        );
    }
    let p50 = |i: usize| cases[i].pct_us(0.5);
    println!(
        "io bench summary: device {} mode {} function {} depth {} chains {} threads {} | p50 us/hop: pread {:.1} \
         uring-hop {:.1} chain {:.1} chains-{} {:.1} | mean us/hop: chain {:.2} | cpu us/hop: chain {:.2} | \
         hops/s: chain {:.0} chains-{} {:.0} | device ref: QD1 p50 {:.1} us, QD{} {:.0} reads/s | \
         stale {}",
        r.device,
        r.mode,
        function.name(),
        a.depth,
        a.chains,
        a.threads,
        p50(0),
        p50(1),
        p50(2),
        a.chains,
        p50(3),
        cases[2].mean_us(),
        cases[2].cpu_us_per_hop(),
        cases[2].hops_per_s(),
        a.chains,
        cases[3].hops_per_s(),
        p50(4),
        a.chains,
        cases[5].hops_per_s(),
        r.stale_chains,
    );
    if let Some(why) = &r.raw_fallback {
        println!("io bench: --io raw unavailable, ran on the file path: {why}");
    }
    if let Some(j) = &a.json {
        let doc = serde_json::json!({
            "bench": "storefn io bench",
            "device": r.device,
            "file": bf.path.display().to_string(),
            "mode": r.mode,
            "io_requested": if a.io == IoKind::Raw { "raw" } else { "file" },
            "raw_fallback": r.raw_fallback,
            "stale_chains": r.stale_chains,
            "function": function.name(),
            "alignment_bytes": r.alignment_bytes,
            "params": {
                "depth": a.depth, "chains": a.chains, "requests": a.requests,
                "warmup": a.warmup, "size_mb": a.size_mb, "node_bytes": a.node, "seed": a.seed,
                "threads": a.threads,
            },
            "cases": cases.iter().map(case_json).collect::<Vec<_>>(),
        });
        std::fs::write(j, serde_json::to_string_pretty(&doc)? + "\n")?;
    }
    Ok(ExitCode::SUCCESS)
}

fn case_json(c: &harness::Case) -> serde_json::Value {
    serde_json::json!({
        "case": c.name,
        "hops": c.hops,
        "elapsed_s": c.elapsed_s,
        "hops_per_s": c.hops_per_s(),
        "cpu_s": c.cpu_s,
        "cpu_us_per_hop": c.cpu_us_per_hop(),
        "hop_latency_us": {
            "mean": c.mean_us(),
            "p50": c.pct_us(0.50),
            "p99": c.pct_us(0.99),
            "p99.9": c.pct_us(0.999),
        }
    })
}
