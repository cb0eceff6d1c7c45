//! `storefn wt bench`: lookups of a table's keys on one path, db_bench style: a named workload,
//! a seed, threads, a warm-up, p50/p99/p99.9, one summary line and JSON. Remote paths also
//! report round trips and pages per lookup and the RTT a STAT probe measures.

use crate::error::WtError;
use crate::lookup::{Answer, Lookups, ReadPath};
use crate::remote::{RemotePath, RemoteTable};
use std::path::PathBuf;
use std::time::Instant;
use storefn_stats::Tail;
use storefn_wire::{Client, ClientConfig, Request};

/// Which keys the lookups ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// Uniformly over the key list.
    Uniform,
    /// Zipfian (θ = 0.99, YCSB's) over the key list: a few hot keys.
    Zipfian,
    /// Keys of the list with a byte appended: absent (not-found lookups).
    Absent,
}

impl std::str::FromStr for Workload {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "uniform" => Ok(Self::Uniform),
            "zipfian" => Ok(Self::Zipfian),
            "absent" => Ok(Self::Absent),
            _ => Err(format!("--workload {s}: expected uniform, zipfian or absent")),
        }
    }
}

/// Where the lookups run.
#[derive(Debug, Clone)]
pub enum Target {
    Local {
        dir: PathBuf,
        path: ReadPath,
        chains: crate::lookup::ChainOptions,
    },
    Remote {
        addr: String,
        cfg: ClientConfig,
        dir: String,
        path: RemotePath,
        /// Pushdown: the client keeps the internal pages (the chain starts at the leaf).
        internal_cache: bool,
    },
}

#[derive(Debug, Clone)]
pub struct BenchConfig {
    pub target: Target,
    pub table: String,
    /// The key population (users' keys).
    pub keys: Vec<Vec<u8>>,
    pub workload: Workload,
    pub seed: u64,
    pub threads: usize,
    /// Lookups per thread, timed.
    pub ops: u64,
    /// Lookups per thread before timing.
    pub warmup: u64,
    /// `xrp-batch`: lookups per batch.
    pub batch: usize,
}

#[derive(Debug, Clone, Default)]
pub struct BenchResult {
    pub lookups: u64,
    pub found: u64,
    pub secs: f64,
    pub ops_per_sec: f64,
    pub mean_us: f64,
    pub tail: Tail,
    /// Lookups the storefn reader handed to WiredTiger's API (local) or to READs (pushdown).
    pub fallbacks: u64,
    /// Remote: request frames per lookup.
    pub round_trips_per_lookup: f64,
    /// Pages read per lookup (chains' hops, READ pages).
    pub pages_per_lookup: f64,
    /// Remote: median STAT round trip, probed before and after the run, µs (the bound of a
    /// lookup's median).
    pub rtt_us: f64,
    /// Remote: mean of the same probes, µs: the bound of a lookup's mean, which a delay
    /// proxy's jitter lifts above the median by as much as it lifts the lookups'.
    pub rtt_mean_us: f64,
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The cumulative weights of a zipfian over `n` ranks.
fn zipf_cdf(n: usize) -> Vec<f64> {
    let mut c = Vec::with_capacity(n);
    let mut sum = 0.0;
    for i in 1..=n {
        sum += 1.0 / (i as f64).powf(0.99);
        c.push(sum);
    }
    c.iter_mut().for_each(|x| *x /= sum);
    c
}

fn pick(cfg: &BenchConfig, cdf: &[f64], rng: &mut Rng, out: &mut Vec<u8>) {
    let n = cfg.keys.len();
    let i = match cfg.workload {
        Workload::Zipfian => {
            let u = rng.unit();
            // Ranks scattered over the list so hot keys are not neighbours.
            let r = cdf.partition_point(|&c| c < u).min(n - 1);
            (r as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) as usize % n
        }
        _ => rng.next() as usize % n,
    };
    out.clear();
    out.extend_from_slice(&cfg.keys[i]);
    if cfg.workload == Workload::Absent {
        out.push(b'~');
    }
}

enum Reader {
    Local(Box<Lookups>),
    Remote(Box<RemoteTable>, RemotePath),
}

impl Reader {
    fn get(&mut self, key: &[u8], value: &mut Vec<u8>) -> Result<Answer, WtError> {
        match self {
            Reader::Local(l) => l.get(key, value),
            Reader::Remote(t, p) => t.get(key, *p, value),
        }
    }
}

fn open(cfg: &BenchConfig) -> Result<Reader, WtError> {
    Ok(match &cfg.target {
        Target::Local { dir, path, chains } => {
            Reader::Local(Box::new(Lookups::open_with(dir, &cfg.table, *path, *chains)?))
        }
        Target::Remote { addr, cfg: c, dir, path, internal_cache } => {
            let client = Client::connect(addr, c.clone())
                .map_err(|e| WtError::Invalid(format!("{addr}: {e}")))?;
            let mut t = RemoteTable::open(client, dir, &cfg.table)?;
            if !internal_cache {
                t.without_internal_cache();
            }
            Reader::Remote(Box::new(t), *path)
        }
    })
}

struct Thread {
    lat: Vec<u64>,
    found: u64,
    fallbacks: u64,
    round_trips: u64,
    pages: u64,
}

fn run_thread(cfg: &BenchConfig, t: usize, cdf: &[f64]) -> Result<Thread, WtError> {
    let mut r = open(cfg)?;
    let mut rng = Rng(cfg.seed.wrapping_mul(2 * t as u64 + 1) | 1);
    let (mut key, mut value) = (Vec::new(), Vec::new());
    for _ in 0..cfg.warmup {
        pick(cfg, cdf, &mut rng, &mut key);
        r.get(&key, &mut value)?;
    }
    let before = counters(&r);
    let mut out = Thread {
        lat: Vec::with_capacity(cfg.ops as usize),
        found: 0,
        fallbacks: 0,
        round_trips: 0,
        pages: 0,
    };
    if let (Reader::Local(l), true) = (&mut r, cfg.batch > 1) {
        let mut keys: Vec<Vec<u8>> = vec![Vec::new(); cfg.batch];
        let mut stored = Vec::new();
        let mut done = 0;
        while done < cfg.ops {
            let n = (cfg.ops - done).min(cfg.batch as u64) as usize;
            for k in &mut keys[..n] {
                pick(cfg, cdf, &mut rng, k);
            }
            let t0 = Instant::now();
            let mut found = 0;
            l.get_many(&keys[..n], &mut stored, &mut value, |_, a, _| {
                found += u64::from(a == Answer::Found);
            })?;
            // A batch's lookups overlap: each is charged the batch's time over its size.
            let per = t0.elapsed().as_nanos() as u64 / n as u64;
            out.lat.extend(std::iter::repeat_n(per, n));
            out.found += found;
            done += n as u64;
        }
    } else {
        for _ in 0..cfg.ops {
            pick(cfg, cdf, &mut rng, &mut key);
            let t0 = Instant::now();
            let a = r.get(&key, &mut value)?;
            out.lat.push(t0.elapsed().as_nanos() as u64);
            out.found += u64::from(a == Answer::Found);
        }
    }
    let after = counters(&r);
    out.fallbacks = after.0 - before.0;
    out.round_trips = after.1 - before.1;
    out.pages = after.2 - before.2;
    Ok(out)
}

/// (fallbacks, round trips, pages) so far.
fn counters(r: &Reader) -> (u64, u64, u64) {
    match r {
        Reader::Local(l) => (l.stats.fallbacks + l.stats.function_fallbacks, 0, l.stats.hops),
        Reader::Remote(t, _) => (t.stats.fallbacks, t.stats.round_trips, t.stats.pages),
    }
}

/// Appends `n` STAT round trips, µs.
fn probe_rtt(
    addr: &str,
    cfg: &ClientConfig,
    dir: &str,
    n: usize,
    out: &mut Vec<f64>,
) -> Result<(), WtError> {
    let err = |e: storefn_wire::ClientError| WtError::Invalid(format!("{addr}: {e}"));
    let mut c = Client::connect(addr, cfg.clone()).map_err(err)?;
    let path = if dir.is_empty() {
        "WiredTiger.turtle".to_string()
    } else {
        format!("{dir}/WiredTiger.turtle")
    };
    for _ in 0..n {
        let t0 = Instant::now();
        c.one(&Request::Stat { path: path.as_bytes() }).map_err(err)?;
        out.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    Ok(())
}

/// STAT round trips probed per side of a run (before and after it, so a drift of the link
/// during the run shows in the bound as much as in the lookups).
const RTT_PROBES: usize = 100;

/// Runs the bench.
///
/// # Errors
/// An empty key list, no thread, or a lookup's error.
pub fn run(cfg: &BenchConfig) -> Result<BenchResult, WtError> {
    if cfg.keys.is_empty() || cfg.threads == 0 || cfg.ops == 0 {
        return Err(WtError::Invalid("bench needs keys, threads >= 1 and ops >= 1".into()));
    }
    let mut rtts = Vec::new();
    if let Target::Remote { addr, cfg: c, dir, .. } = &cfg.target {
        probe_rtt(addr, c, dir, RTT_PROBES, &mut rtts)?;
    }
    let cdf = if cfg.workload == Workload::Zipfian { zipf_cdf(cfg.keys.len()) } else { Vec::new() };
    let t0 = Instant::now();
    let results: Vec<Result<Thread, WtError>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..cfg.threads)
            .map(|t| {
                let cdf = &cdf;
                s.spawn(move || run_thread(cfg, t, cdf))
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("bench thread")).collect()
    });
    let secs = t0.elapsed().as_secs_f64();
    if let Target::Remote { addr, cfg: c, dir, .. } = &cfg.target {
        probe_rtt(addr, c, dir, RTT_PROBES, &mut rtts)?;
    }
    let rtt_mean_us = rtts.iter().sum::<f64>() / rtts.len().max(1) as f64;
    let rtt_us = storefn_stats::median(&mut rtts).unwrap_or(0.0);
    let mut lat = Vec::new();
    let mut r = BenchResult { rtt_us, rtt_mean_us, ..BenchResult::default() };
    let (mut rt, mut pages) = (0u64, 0u64);
    for t in results {
        let t = t?;
        r.found += t.found;
        r.fallbacks += t.fallbacks;
        rt += t.round_trips;
        pages += t.pages;
        lat.extend(t.lat);
    }
    lat.sort_unstable();
    r.lookups = lat.len() as u64;
    r.secs = secs;
    r.ops_per_sec = r.lookups as f64 / secs;
    r.mean_us = lat.iter().sum::<u64>() as f64 / lat.len() as f64 / 1e3;
    r.tail = Tail::of(&lat);
    r.round_trips_per_lookup = rt as f64 / r.lookups as f64;
    r.pages_per_lookup = pages as f64 / r.lookups as f64;
    Ok(r)
}

/// The device's own bound for a table's leaves: random O_DIRECT reads of its leaf blocks, at
/// their real addresses and sizes, one at a time and `depth` in flight (no function work: each
/// read is a one-hop chain whose function stops at once).
#[derive(Debug, Clone, Default)]
pub struct LeafBound {
    pub leaves: u64,
    pub mean_leaf_bytes: f64,
    /// Queue depth 1: latency per read.
    pub qd1_mean_us: f64,
    pub qd1_p50_us: f64,
    pub depth: usize,
    /// `depth` in flight: reads and bytes per second.
    pub qdn_reads_per_sec: f64,
    pub qdn_mib_per_sec: f64,
    /// The internal pages' blocks at queue depth 1 (a chain from the root reads them first).
    pub internal_blocks: u64,
    pub internal_qd1_mean_us: f64,
}

/// Every (internal, leaf) block address of `tree`'s checkpoint, by plain reads of its internal
/// pages.
type Addrs = (Vec<crate::format::BlockAddr>, Vec<crate::format::BlockAddr>);
fn tree_addrs(tree: &crate::tree::Tree) -> Result<Addrs, WtError> {
    use crate::page::Child;
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(tree.path()).map_err(|source| WtError::Io {
        path: tree.path().into(),
        op: "open",
        source,
    })?;
    let corrupt =
        |offset: u64, what: String| WtError::Corrupt { path: tree.path().into(), offset, what };
    let Some(root) = tree.checkpoint().root else { return Ok((Vec::new(), Vec::new())) };
    let (mut internal, mut leaves, mut seen) = (vec![root], Vec::new(), Vec::new());
    let mut block = Vec::new();
    while let Some(a) = internal.pop() {
        block.resize(a.size as usize, 0);
        file.read_exact_at(&mut block, a.offset).map_err(|source| WtError::Io {
            path: tree.path().into(),
            op: "read",
            source,
        })?;
        let children = crate::cache::internal_children(&block, a.offset, tree.allocation_size())
            .map_err(|m| corrupt(a.offset + m.at as u64, m.what))?;
        let Some(children) = children else {
            // A root that is a leaf, or a page the cache does not parse: read as a leaf.
            leaves.push(a);
            continue;
        };
        seen.push(a);
        for c in &children {
            match *c {
                Child::Internal(a) => internal.push(a),
                Child::Leaf(a) => leaves.push(a),
                _ => {}
            }
        }
    }
    Ok((seen, leaves))
}

/// Measures [`LeafBound`] for `table` of `dir`: `reads` reads per case, leaves picked by
/// `seed`.
///
/// # Errors
/// The table cannot be opened or walked, or the engine fails.
pub fn leaf_bound(
    dir: &std::path::Path,
    table: &str,
    depth: usize,
    reads: u64,
    seed: u64,
) -> Result<LeafBound, WtError> {
    use storefn_io::{Engine, EngineConfig, IoMode, XrpCtx};
    let t = crate::db::Table::open(dir, table)?;
    let (internal, leaves) = tree_addrs(t.tree())?;
    let path = t.tree().path().to_path_buf();
    let chain = |e: String| WtError::Chain { path: path.clone(), what: e };
    if leaves.is_empty() || depth == 0 || reads == 0 {
        return Err(WtError::Invalid(
            "leaf bound: a table with leaves, depth and reads >= 1".into(),
        ));
    }
    let depth = depth.min(crate::xrp::BATCH_CHAINS);
    let cfg = EngineConfig {
        ring_depth: 2 * depth as u32,
        buffers: depth,
        chains: depth,
        hop_bytes: crate::xrp::HOP_BYTES as usize,
        range_reads: 0,
        range_buf_slots: 0,
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(cfg).map_err(|e| chain(e.to_string()))?;
    let file = engine.open(&path, IoMode::Direct).map_err(|e| chain(e.to_string()))?;
    let mut stop = |ctx: &mut XrpCtx, _: &[u8], _: &mut [u8]| -> Result<u64, storefn_io::VmError> {
        ctx.done = 1;
        Ok(0)
    };
    let mut rng = Rng(seed | 1);
    let mut qd1 = |blocks: &[crate::format::BlockAddr], n: u64| -> Result<Vec<u64>, WtError> {
        let mut lat = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let a = blocks[rng.next() as usize % blocks.len()];
            let t0 = Instant::now();
            engine
                .submit_chain(file, a.offset, a.size, 0, |_| {})
                .map_err(|e| chain(e.to_string()))?;
            engine.wait(1, &mut stop, |_| {}).map_err(|e| chain(e.to_string()))?;
            lat.push(t0.elapsed().as_nanos() as u64);
        }
        lat.sort_unstable();
        Ok(lat)
    };
    let lat = qd1(&leaves, reads)?;
    let ilat = if internal.is_empty() { Vec::new() } else { qd1(&internal, reads.div_ceil(4))? };
    let mean = |l: &[u64]| l.iter().sum::<u64>() as f64 / l.len().max(1) as f64 / 1e3;
    let mut rng = Rng(seed.wrapping_add(1) | 1);
    let mut pick = || leaves[rng.next() as usize % leaves.len()];
    let (mut submitted, mut done, mut bytes) = (0u64, 0u64, 0u64);
    let t0 = Instant::now();
    while done < reads {
        while submitted < reads && engine.live() < depth {
            let a = pick();
            bytes += a.size;
            engine
                .submit_chain(file, a.offset, a.size, 0, |_| {})
                .map_err(|e| chain(e.to_string()))?;
            submitted += 1;
        }
        done += engine.wait(1, &mut stop, |_| {}).map_err(|e| chain(e.to_string()))? as u64;
    }
    let secs = t0.elapsed().as_secs_f64();
    Ok(LeafBound {
        leaves: leaves.len() as u64,
        mean_leaf_bytes: leaves.iter().map(|a| a.size).sum::<u64>() as f64 / leaves.len() as f64,
        qd1_mean_us: mean(&lat),
        qd1_p50_us: Tail::of(&lat).p50_us,
        internal_blocks: internal.len() as u64,
        internal_qd1_mean_us: mean(&ilat),
        depth,
        qdn_reads_per_sec: reads as f64 / secs,
        qdn_mib_per_sec: bytes as f64 / secs / f64::from(1 << 20),
    })
}
