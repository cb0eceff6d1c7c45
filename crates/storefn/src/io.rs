//! `storefn io ...`: probe what the engine can do here, and the chain microbenchmark.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Args, Subcommand};
use storefn_io::{func, Engine, EngineConfig, EngineError, FileId, IoMode, NoFunction, StorageFn};

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
    #[arg(long)]
    buffered: bool,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// Who runs the chain's storage function in the bench.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FnKind {
    Rust,
    Interp,
    Jit,
}

impl FnKind {
    fn name(self) -> &'static str {
        match self {
            Self::Rust => "rust",
            Self::Interp => "interp",
            Self::Jit => "jit",
        }
    }
}

/// The bench's chain function, built once per case (and per thread).
fn chain_fn(kind: FnKind) -> Result<Box<dyn StorageFn>, String> {
    let vm = match kind {
        FnKind::Rust => return Ok(Box::new(hop_counter())),
        FnKind::Interp => storefn_vm::Engine::Interp,
        FnKind::Jit => storefn_vm::Engine::Jit,
    };
    let elf = storefn_progs::must("io_hop_chain");
    let prog = storefn_vm::load_verified(elf, None, storefn_vm::ProgType::Xrp)
        .map_err(|e| format!("io_hop_chain: {e}"))?;
    let inst = storefn_vm::Instance::new(prog, vm).map_err(|e| format!("io_hop_chain: {e}"))?;
    Ok(Box::new(inst))
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
    println!("file: {} on {}", path.display(), device_of(&path));
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

/// The block device holding `path`, from /sys (e.g. "vda (virtio)"), or "unknown".
fn device_of(path: &Path) -> String {
    let Ok(meta) = std::fs::metadata(path) else { return "unknown".into() };
    let dev = meta.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let uevent = std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/uevent"));
    let name = uevent
        .ok()
        .and_then(|u| u.lines().find_map(|l| l.strip_prefix("DEVNAME=").map(str::to_owned)))
        .unwrap_or_else(|| format!("{major}:{minor}"));
    let driver = std::fs::read_link(format!("/sys/dev/block/{major}:{minor}/device/driver"))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    match driver {
        Some(d) => format!("/dev/{name} ({d})"),
        None => format!("/dev/{name}"),
    }
}

/// splitmix64: the bench's deterministic generator (no dependency, identical across runs).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Writes `size_bytes` of nodes; node i's first u64 is the offset of a random node.
fn make_file(path: &Path, size_bytes: u64, node: u64, seed: u64) -> std::io::Result<()> {
    let nodes = size_bytes / node;
    let mut rng = Rng(seed);
    let mut f = File::create(path)?;
    let chunk_nodes = (1 << 20) / node;
    let mut buf = vec![0u8; (chunk_nodes * node) as usize];
    let mut i = 0;
    while i < nodes {
        let n = chunk_nodes.min(nodes - i);
        for k in 0..n {
            let at = (k * node) as usize;
            buf[at..at + 8].copy_from_slice(&(rng.below(nodes) * node).to_le_bytes());
            buf[at + 8..at + 16].copy_from_slice(&(i + k).to_le_bytes());
        }
        f.write_all(&buf[..(n * node) as usize])?;
        i += n;
    }
    f.sync_all()
}

/// Latency samples of one case, in ns per hop (or per read).
struct Case {
    name: &'static str,
    hops: u64,
    elapsed_s: f64,
    samples_ns: Vec<u64>,
}

impl Case {
    fn pct(&self, p: f64) -> f64 {
        let s = &self.samples_ns;
        if s.is_empty() {
            return 0.0;
        }
        let idx = ((s.len() as f64 * p).ceil() as usize).clamp(1, s.len()) - 1;
        s[idx] as f64 / 1000.0
    }

    fn mean_us(&self) -> f64 {
        let n = self.samples_ns.len().max(1) as f64;
        self.samples_ns.iter().sum::<u64>() as f64 / n / 1000.0
    }

    fn hops_per_s(&self) -> f64 {
        self.hops as f64 / self.elapsed_s
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "case": self.name,
            "hops": self.hops,
            "elapsed_s": self.elapsed_s,
            "hops_per_s": self.hops_per_s(),
            "hop_latency_us": {
                "mean": self.mean_us(),
                "p50": self.pct(0.50),
                "p99": self.pct(0.99),
                "p99.9": self.pct(0.999),
            }
        })
    }
}

struct Bench<'a> {
    a: &'a BenchArgs,
    cfg: EngineConfig,
    mode: IoMode,
    e: Engine,
    id: FileId,
    nodes: u64,
    align: u64,
    path: PathBuf,
}

fn bench(a: &BenchArgs) -> CmdResult {
    if a.depth == 0 || a.chains == 0 || a.requests == 0 || a.threads == 0 {
        return Err("--depth, --chains, --requests and --threads must be at least 1".into());
    }
    if a.node < 16 || a.node > 4096 || !a.node.is_power_of_two() {
        return Err(format!("--node {}: must be a power of two in 16..=4096", a.node).into());
    }
    let size_bytes = a.size_mb << 20;
    if size_bytes < a.node * 2 {
        return Err(format!("--size-mb {}: too small", a.size_mb).into());
    }
    let bf = match &a.file {
        Some(p) => BenchFile { path: p.clone(), remove: false },
        None => BenchFile {
            path: std::env::temp_dir().join(format!("storefn-io-bench-{}", std::process::id())),
            remove: true,
        },
    };
    eprintln!("io bench: writing {} MiB of random pointers to {}", a.size_mb, bf.path.display());
    make_file(&bf.path, size_bytes, a.node, a.seed)?;
    let chains_cfg = a.chains.max(1).next_power_of_two().max(64);
    let cfg = EngineConfig {
        chains: chains_cfg,
        buffers: chains_cfg.min(16384),
        ring_depth: (chains_cfg as u32).clamp(256, 16384),
        max_hops: a.depth.max(64),
        ..EngineConfig::default()
    };
    let mut e = Engine::new(cfg)?;
    let mode = if a.buffered { IoMode::Buffered } else { IoMode::Direct };
    let id = e.open(&bf.path, mode).map_err(|err| match err {
        EngineError::DirectRefused { .. } => format!("{err}"),
        other => other.to_string(),
    })?;
    let align = e.file_align(id).unwrap_or(1);
    let mut b =
        Bench { a, cfg, mode, e, id, nodes: size_bytes / a.node, align, path: bf.path.clone() };
    let device = device_of(&bf.path);
    let cases = vec![
        b.case_pread()?,
        b.case_uring_hop()?,
        b.case_one_chain()?,
        b.case_chains_in_flight()?,
        b.case_reference(1)?,
        b.case_reference(a.chains)?,
    ];
    println!(
        "{:<24} {:>10} {:>12} {:>9} {:>9} {:>9} {:>9}",
        "case", "hops", "hops/s", "mean_us", "p50_us", "p99_us", "p99.9_us"
    );
    for c in &cases {
        println!(
            "{:<24} {:>10} {:>12.0} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
            c.name,
            c.hops,
            c.hops_per_s(),
            c.mean_us(),
            c.pct(0.5),
            c.pct(0.99),
            c.pct(0.999)
        );
    }
    let p50 = |i: usize| cases[i].pct(0.5);
    println!(
        "io bench summary: device {device} mode {} function {} depth {} chains {} threads {} | p50 us/hop: pread {:.1} \
         uring-hop {:.1} chain {:.1} chains-{} {:.1} | hops/s: chain {:.0} chains-{} {:.0} | \
         device ref: QD1 p50 {:.1} us, QD{} {:.0} reads/s",
        if a.buffered { "buffered" } else { "direct" },
        a.function.name(),
        a.depth,
        a.chains,
        a.threads,
        p50(0),
        p50(1),
        p50(2),
        a.chains,
        p50(3),
        cases[2].hops_per_s(),
        a.chains,
        cases[3].hops_per_s(),
        p50(4),
        a.chains,
        cases[5].hops_per_s(),
    );
    if let Some(j) = &a.json {
        let doc = serde_json::json!({
            "bench": "storefn io bench",
            "device": device,
            "file": b.path.display().to_string(),
            "mode": if a.buffered { "buffered" } else { "direct" },
            "function": a.function.name(),
            "alignment_bytes": b.align,
            "params": {
                "depth": a.depth, "chains": a.chains, "requests": a.requests,
                "warmup": a.warmup, "size_mb": a.size_mb, "node_bytes": a.node, "seed": a.seed,
                "threads": a.threads,
            },
            "cases": cases.iter().map(Case::json).collect::<Vec<_>>(),
        });
        std::fs::write(j, serde_json::to_string_pretty(&doc)? + "\n")?;
    }
    Ok(ExitCode::SUCCESS)
}

fn next_of(block: &[u8]) -> u64 {
    u64::from_le_bytes(block[..8].try_into().expect("8 bytes"))
}

impl Bench<'_> {
    fn starts(&self, salt: u64, n: usize) -> Vec<u64> {
        let mut rng = Rng(self.a.seed ^ salt.wrapping_mul(0x51_7cc1_b727_220a));
        (0..n).map(|_| rng.below(self.nodes) * self.a.node).collect()
    }

    /// Runs `chain` over warm-up then measured starts; per-hop latency = chain time / depth.
    fn timed_chains(
        &mut self,
        name: &'static str,
        salt: u64,
        mut chain: impl FnMut(&mut Self, u64) -> Result<(), Box<dyn std::error::Error>>,
    ) -> Result<Case, Box<dyn std::error::Error>> {
        let (w, r) = (self.a.warmup, self.a.requests);
        let starts = self.starts(salt, w + r);
        for &s in &starts[..w] {
            chain(self, s)?;
        }
        let mut samples_ns = Vec::with_capacity(r);
        let t0 = Instant::now();
        for &s in &starts[w..] {
            let t = Instant::now();
            chain(self, s)?;
            samples_ns.push(t.elapsed().as_nanos() as u64 / u64::from(self.a.depth));
        }
        let elapsed_s = t0.elapsed().as_secs_f64();
        samples_ns.sort_unstable();
        Ok(Case { name, hops: r as u64 * u64::from(self.a.depth), elapsed_s, samples_ns })
    }

    fn case_pread(&mut self) -> Result<Case, Box<dyn std::error::Error>> {
        let mut opts = std::fs::OpenOptions::new();
        opts.read(true);
        if !self.a.buffered {
            opts.custom_flags(libc::O_DIRECT);
        }
        let f = opts.open(&self.path)?;
        let span = (self.a.node.max(self.align)) as usize;
        // An aligned buffer for O_DIRECT: over-allocate and start at a 4 KiB boundary.
        let mut raw = vec![0u8; span + 4096];
        let pad = raw.as_ptr().align_offset(4096);
        let depth = self.a.depth;
        let align = self.align;
        self.timed_chains("a_pread_per_hop", 1, |_, start| {
            let buf = &mut raw[pad..pad + span];
            let mut at = start;
            for _ in 0..depth {
                let base = at & !(align - 1);
                f.read_exact_at(buf, base)?;
                at = next_of(&buf[(at - base) as usize..]);
            }
            Ok(())
        })
    }

    fn case_uring_hop(&mut self) -> Result<Case, Box<dyn std::error::Error>> {
        let depth = self.a.depth;
        let mut buf = [0u8; 16];
        self.timed_chains("b_uring_per_hop", 2, |b, start| {
            let mut at = start;
            for _ in 0..depth {
                b.e.read(b.id, at, &mut buf)?;
                at = next_of(&buf);
            }
            Ok(())
        })
    }

    fn case_one_chain(&mut self) -> Result<Case, Box<dyn std::error::Error>> {
        let depth = u64::from(self.a.depth);
        let mut walk = chain_fn(self.a.function)?;
        self.timed_chains("c_one_chain", 3, |b, start| {
            let mut scratch = depth.to_le_bytes();
            let st = b.e.read_xrp(b.id, start, 16, &mut *walk, &mut scratch)?;
            if u64::from(st.hops) != depth {
                return Err(
                    format!("chain from {start}: {} hops, expected {depth}", st.hops).into()
                );
            }
            Ok(())
        })
    }

    fn case_chains_in_flight(&mut self) -> Result<Case, Box<dyn std::error::Error>> {
        self.batch_case("d_chains_in_flight", 4, false, self.a.requests)
    }

    fn case_reference(&mut self, qd: usize) -> Result<Case, Box<dyn std::error::Error>> {
        let reads = self.a.requests * self.a.depth as usize;
        if qd == 1 {
            let mut buf = [0u8; 16];
            let (w, r) = (self.a.warmup, reads);
            let starts = self.starts(5, w + r);
            for &s in &starts[..w] {
                self.e.read(self.id, s, &mut buf)?;
            }
            let mut samples_ns = Vec::with_capacity(r);
            let t0 = Instant::now();
            for &s in &starts[w..] {
                let t = Instant::now();
                self.e.read(self.id, s, &mut buf)?;
                samples_ns.push(t.elapsed().as_nanos() as u64);
            }
            let elapsed_s = t0.elapsed().as_secs_f64();
            samples_ns.sort_unstable();
            return Ok(Case { name: "ref_read_qd1", hops: r as u64, elapsed_s, samples_ns });
        }
        self.batch_case("ref_read_qdN", 6, true, reads)
    }

    fn batch_case(
        &mut self,
        name: &'static str,
        salt: u64,
        plain: bool,
        n: usize,
    ) -> Result<Case, Box<dyn std::error::Error>> {
        let (depth, chains, threads) = (u64::from(self.a.depth), self.a.chains, self.a.threads);
        let warm = self.starts(salt ^ 0xff, self.a.warmup);
        let starts = self.starts(salt, n);
        let mut samples_ns = Vec::with_capacity(n);
        let elapsed_s = if threads == 1 {
            let (e, id) = (&mut self.e, self.id);
            let mut f = chain_fn(self.a.function)?;
            keep_in_flight(
                e,
                Flight { id, depth, chains, plain },
                &warm,
                &mut *f,
                &mut Vec::new(),
            )?;
            let t0 = Instant::now();
            keep_in_flight(
                e,
                Flight { id, depth, chains, plain },
                &starts,
                &mut *f,
                &mut samples_ns,
            )?;
            t0.elapsed().as_secs_f64()
        } else {
            self.threaded(&warm, &starts, plain, &mut samples_ns)?
        };
        samples_ns.sort_unstable();
        let hops = if plain { n as u64 } else { n as u64 * depth };
        Ok(Case { name, hops, elapsed_s, samples_ns })
    }

    /// The in-flight case on `threads` threads, each with its own engine and share of starts.
    fn threaded(
        &self,
        warm: &[u64],
        starts: &[u64],
        plain: bool,
        samples_ns: &mut Vec<u64>,
    ) -> Result<f64, Box<dyn std::error::Error>> {
        let (depth, chains, threads) = (u64::from(self.a.depth), self.a.chains, self.a.threads);
        let barrier = std::sync::Barrier::new(threads + 1);
        let share = starts.len().div_ceil(threads);
        let (cfg, mode, path, kind) = (self.cfg, self.mode, &self.path, self.a.function);
        let run = |mine: &[u64]| -> Result<Vec<u64>, String> {
            let setup = Engine::new(cfg).and_then(|mut e| e.open(path, mode).map(|id| (e, id)));
            let res = setup.map_err(|e| e.to_string()).and_then(|(mut e, id)| {
                let mut f = chain_fn(kind)?;
                keep_in_flight(
                    &mut e,
                    Flight { id, depth, chains, plain },
                    warm,
                    &mut *f,
                    &mut Vec::new(),
                )?;
                Ok((e, id, f))
            });
            barrier.wait();
            let (mut e, id, mut f) = res?;
            let mut out = Vec::with_capacity(mine.len());
            keep_in_flight(&mut e, Flight { id, depth, chains, plain }, mine, &mut *f, &mut out)?;
            Ok(out)
        };
        let (elapsed_s, results) = std::thread::scope(|s| {
            let handles: Vec<_> = starts.chunks(share).map(|mine| s.spawn(|| run(mine))).collect();
            // Threads past the chunk count never wait: pad the barrier for them.
            for _ in handles.len()..threads {
                barrier.wait();
            }
            barrier.wait();
            let t0 = Instant::now();
            let results: Vec<_> =
                handles.into_iter().map(std::thread::ScopedJoinHandle::join).collect();
            (t0.elapsed().as_secs_f64(), results)
        });
        for r in results {
            samples_ns.extend(r.map_err(|_| "bench thread panicked")??);
        }
        Ok(elapsed_s)
    }
}

/// What an in-flight run keeps going: `chains` chains of `depth` hops, or plain reads.
#[derive(Debug, Clone, Copy)]
struct Flight {
    id: FileId,
    depth: u64,
    chains: usize,
    plain: bool,
}

/// Keeps `chains` chains (or, with `plain`, single reads) in flight until all are done;
/// per-hop latency samples (chain latency / hops) go to `samples_ns`.
fn keep_in_flight(
    e: &mut Engine,
    fl: Flight,
    starts: &[u64],
    walk: &mut dyn StorageFn,
    samples_ns: &mut Vec<u64>,
) -> Result<(), String> {
    let Flight { id, depth, chains, plain } = fl;
    let per = if plain { 1 } else { depth };
    let t0 = Instant::now();
    let mut submitted_ns = vec![0u64; starts.len()];
    let (mut next, mut done) = (0, 0);
    let mut failed = None;
    while done < starts.len() {
        while next < starts.len() && e.live() < chains {
            submitted_ns[next] = t0.elapsed().as_nanos() as u64;
            let tok = next as u64;
            let r = if plain {
                e.submit_read(id, starts[next], 16, tok)
            } else {
                e.submit_chain(id, starts[next], 16, tok, |s| {
                    s[..8].copy_from_slice(&depth.to_le_bytes());
                })
            };
            r.map_err(|e| e.to_string())?;
            next += 1;
        }
        let on_done = |c: storefn_io::Completion<'_>| {
            let now = t0.elapsed().as_nanos() as u64;
            match c.result {
                Err(e) => {
                    failed.get_or_insert(e.to_string());
                }
                Ok(st) if !plain && u64::from(st.hops) != depth => {
                    failed.get_or_insert(format!(
                        "chain {}: {} hops, expected {depth}",
                        c.token, st.hops
                    ));
                }
                Ok(_) => {}
            }
            samples_ns.push((now - submitted_ns[c.token as usize]) / per);
        };
        let got =
            if plain { e.wait(1, &mut NoFunction, on_done) } else { e.wait(1, walk, on_done) };
        done += got.map_err(|e| e.to_string())?;
    }
    failed.map_or(Ok(()), Err)
}

/// The chain's storage function: scratch[0..8] counts the hops left; follow the node's first
/// u64 until it reaches zero.
fn hop_counter(
) -> impl FnMut(&mut storefn_io::XrpCtx, &[u8], &mut [u8]) -> Result<u64, storefn_io::VmError> {
    func(|ctx, data, s| {
        let left = u64::from_le_bytes(s[..8].try_into().expect("8 bytes")).saturating_sub(1);
        s[..8].copy_from_slice(&left.to_le_bytes());
        if left == 0 {
            ctx.done = 1;
        } else {
            ctx.next_addr[0] = next_of(data);
            ctx.size[0] = 16;
        }
        Ok(0)
    })
}
