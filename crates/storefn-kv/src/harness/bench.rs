//! The lookup benchmark behind `storefn kv bench` and `storefn demo`: threads, a key
//! distribution, warm-up, per-lookup latencies, CPU time from getrusage.

use std::sync::{Arc, Barrier};
use std::time::Instant;

use rand::{Rng, SeedableRng};

use crate::abi::Abi;
use crate::harness::device::DevicePath;
use crate::path::{Lookup, LookupPath, PathStats};
use crate::store::Store;
use crate::xrp_paths::ProgSource;
use crate::KvError;
pub use crate::{PathOptions, LOOKUP_PATHS};

/// Every `--path` name, in the order the demo shows them: the store's lookup paths and the
/// device reference.
pub const PATH_NAMES: &[&str] = &["read", "uring", "xrp", "xrp-batch", "device"];
const _: () = assert!(PATH_NAMES.len() == crate::LOOKUP_PATHS.len() + 1);

/// Builds the lookup path called `name`: one of the store's ([`crate::open_path`]) or the
/// device reference.
///
/// # Errors
/// `Invalid` for an unknown name or a path this build cannot run.
pub fn open_path(
    name: &str,
    store: &Arc<Store>,
    opts: &PathOptions,
) -> Result<Box<dyn LookupPath>, KvError> {
    if name == "device" && opts.prog.is_builtin() {
        return Ok(Box::new(
            DevicePath::new(Arc::clone(store), opts.batch.max(1))?.with_io(opts.raw)?,
        ));
    }
    match crate::open_path(name, store, opts) {
        Err(KvError::Invalid(m)) if m.starts_with("--path ") => Err(KvError::Invalid(format!(
            "--path {name}: expected one of {}",
            PATH_NAMES.join("|")
        ))),
        r => r,
    }
}

/// Key distributions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Dist {
    Uniform,
    /// Scrambled Zipfian with this theta (0 < theta < 1), as YCSB generates.
    Zipf(f64),
}

impl std::str::FromStr for Dist {
    type Err = KvError;
    fn from_str(s: &str) -> Result<Dist, KvError> {
        if s == "uniform" {
            return Ok(Dist::Uniform);
        }
        let bad =
            || KvError::Invalid(format!("--dist {s}: expected uniform or zipf:THETA (0<THETA<1)"));
        let t: f64 = s.strip_prefix("zipf:").ok_or_else(bad)?.parse().map_err(|_| bad())?;
        if t > 0.0 && t < 1.0 {
            Ok(Dist::Zipf(t))
        } else {
            Err(bad())
        }
    }
}

/// Generates keys in `0..n`.
#[derive(Debug)]
pub struct KeyGen {
    rng: rand::rngs::SmallRng,
    n: u64,
    zipf: Option<(f64, f64, f64, f64)>, // theta, alpha, zetan, eta
}

/// Largest key space for which the Zipf normaliser is summed exactly; above it the tail is
/// approximated by an integral (error < 1e-6 relative).
const ZIPF_EXACT_TERMS: u64 = 10_000_000;

#[allow(clippy::cast_precision_loss)] // key counts are far below 2^52
fn zeta(n: u64, theta: f64) -> f64 {
    let exact = n.min(ZIPF_EXACT_TERMS);
    let mut s: f64 = (1..=exact).map(|i| 1.0 / (i as f64).powf(theta)).sum();
    if n > exact {
        let (a, b) = (exact as f64 + 0.5, n as f64 + 0.5);
        s += (b.powf(1.0 - theta) - a.powf(1.0 - theta)) / (1.0 - theta);
    }
    s
}

impl KeyGen {
    #[must_use]
    pub fn new(dist: Dist, n: u64, seed: u64) -> Self {
        let zipf = match dist {
            Dist::Uniform => None,
            Dist::Zipf(theta) => {
                let zetan = zeta(n, theta);
                let zeta2 = zeta(2, theta);
                #[allow(clippy::cast_precision_loss)]
                let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
                Some((theta, 1.0 / (1.0 - theta), zetan, eta))
            }
        };
        Self { rng: rand::rngs::SmallRng::seed_from_u64(seed), n: n.max(1), zipf }
    }

    #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    pub fn next_key(&mut self) -> u64 {
        let Some((theta, alpha, zetan, eta)) = self.zipf else {
            return self.rng.gen_range(0..self.n);
        };
        let u: f64 = self.rng.gen();
        let uz = u * zetan;
        let rank = if uz < 1.0 {
            0
        } else if uz < 1.0 + 0.5f64.powf(theta) {
            1
        } else {
            ((self.n as f64) * (eta * u - eta + 1.0).powf(alpha)) as u64
        };
        // Scramble so hot keys spread over the tree (YCSB's scrambled Zipfian).
        crate::format::fnv1a64(&rank.min(self.n - 1).to_le_bytes()) % self.n
    }
}

/// The load a lookup benchmark offers, local or remote (`storefn_kv::remote::bench`): threads,
/// lookups, keys.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    pub threads: usize,
    /// Measured lookups in all (split over the threads).
    pub requests: u64,
    /// Lookups in flight per thread on batching paths (1 = one at a time).
    pub batch: usize,
    /// Unmeasured lookups per thread before the run.
    pub warmup: u64,
    pub dist: Dist,
    /// Thread t draws its keys from `seed + t`.
    pub seed: u64,
}

/// A benchmark run's parameters.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    pub path: String,
    pub load: Load,
    pub cache_bytes: u64,
    /// `--io raw` (see [`PathOptions::raw`]).
    pub raw: bool,
    /// `--prog` / `--abi` for the chain paths (see [`PathOptions`]).
    pub prog: ProgSource,
    pub abi: Abi,
}

/// A benchmark run's results (latencies in microseconds).
#[derive(Debug, Clone, Default)]
pub struct BenchResult {
    pub path: String,
    pub layers: u32,
    pub threads: usize,
    pub batch: usize,
    pub requests: u64,
    pub ops_per_sec: f64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p95_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub pct_over_1ms: f64,
    pub cpu_us_per_op: f64,
    pub ios_per_op: f64,
    pub fallbacks: u64,
    /// Block-device reads per lookup (raw mode; 0 on the file path).
    pub device_ios_per_op: f64,
    /// Lookups that found nothing (0 on a `create`d database with in-range keys).
    pub misses: u64,
}

/// CPU seconds (user + system) of `who`: `libc::RUSAGE_SELF` (the process) or
/// `libc::RUSAGE_THREAD` (the calling thread).
pub(crate) fn cpu_seconds(who: libc::c_int) -> f64 {
    // SAFETY: getrusage writes one rusage into the zeroed struct we own.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(who, &raw mut ru);
        ru
    };
    #[allow(clippy::cast_precision_loss)]
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

pub(crate) struct ThreadOut {
    pub(crate) latencies_ns: Vec<u64>,
    pub(crate) stats: PathStats,
    pub(crate) misses: u64,
}

/// Batching paths keep `batch` lookups in flight across a chunk of keys; chunks of
/// CHUNK_PER_BATCH x batch keep the pipeline full (latency is per lookup, from submission).
const CHUNK_PER_BATCH: usize = 16;

/// Keys handed to one `get_many` call.
pub(crate) fn chunk_len(cfg: &BenchConfig) -> usize {
    if cfg.load.batch > 1 {
        cfg.load.batch * CHUNK_PER_BATCH
    } else {
        1
    }
}

/// Looks `keys` up through `path` chunk by chunk; appends each lookup's latency to `lat`
/// (when given) and returns the misses.
pub(crate) fn measure(
    path: &mut dyn LookupPath,
    keys: &[u64],
    chunk: usize,
    mut lat: Option<&mut Vec<u64>>,
) -> Result<u64, KvError> {
    let mut out: Vec<Lookup> = Vec::with_capacity(chunk);
    let mut misses = 0;
    for part in keys.chunks(chunk.max(1)) {
        out.clear();
        path.get_many(part, &mut out)?;
        for l in &out {
            if let Some(lat) = lat.as_deref_mut() {
                lat.push(l.latency_ns);
            }
            misses += u64::from(l.value.is_none());
        }
    }
    Ok(misses)
}

/// `n` keys from `keys`, generated up front so key generation stays out of the timings.
pub(crate) fn draw(keys: &mut KeyGen, n: u64) -> Vec<u64> {
    (0..n).map(|_| keys.next_key()).collect()
}

fn run_thread(
    path: &mut dyn LookupPath,
    cfg: &BenchConfig,
    keys: &mut KeyGen,
    requests: u64,
    barrier: &Barrier,
    passed: &mut bool,
) -> Result<ThreadOut, KvError> {
    let chunk = chunk_len(cfg);
    measure(path, &draw(keys, cfg.load.warmup), chunk, None)?;
    let measured = draw(keys, requests);
    let before = path.stats();
    barrier.wait();
    *passed = true;
    let mut lat = Vec::with_capacity(measured.len());
    let misses = measure(path, &measured, chunk, Some(&mut lat))?;
    let stats = path.stats().since(&before);
    Ok(ThreadOut { latencies_ns: lat, stats, misses })
}

/// Runs the benchmark on `store`.
///
/// # Errors
/// Path construction and lookup errors (the first one from any thread).
pub fn run(store: &Arc<Store>, cfg: &BenchConfig) -> Result<BenchResult, KvError> {
    if cfg.load.threads == 0 || cfg.load.requests == 0 {
        return Err(KvError::Invalid("--threads and --requests must be > 0".into()));
    }
    let opts = path_options(cfg, cfg.raw);
    // One path on this thread first, so a bad --path fails before threads start; each thread
    // then builds its own (engines stay on the thread that made them).
    drop(open_path(&cfg.path, store, &opts)?);
    let barrier = Arc::new(Barrier::new(cfg.load.threads + 1));
    let n = store.meta().key_count;
    let handles: Vec<_> = (0..cfg.load.threads)
        .map(|t| {
            let cfg = cfg.clone();
            let barrier = Arc::clone(&barrier);
            let store = Arc::clone(store);
            let opts = opts.clone();
            let share = thread_share(cfg.load.requests, cfg.load.threads, t);
            std::thread::spawn(move || {
                let mut keys = KeyGen::new(cfg.load.dist, n, cfg.load.seed.wrapping_add(t as u64));
                let mut passed = false;
                let r = open_path(&cfg.path, &store, &opts).and_then(|mut path| {
                    run_thread(path.as_mut(), &cfg, &mut keys, share, &barrier, &mut passed)
                });
                if !passed {
                    // Never leave the others waiting at the barrier.
                    barrier.wait();
                }
                r
            })
        })
        .collect();
    barrier.wait();
    let (t0, cpu0) = (Instant::now(), cpu_seconds(libc::RUSAGE_SELF));
    let outs = join_all(handles)?;
    let wall_s = t0.elapsed().as_secs_f64();
    let cpu_s = cpu_seconds(libc::RUSAGE_SELF) - cpu0;
    Ok(summarize(store, cfg, &outs, wall_s, cpu_s))
}

pub(crate) fn path_options(cfg: &BenchConfig, raw: bool) -> PathOptions {
    PathOptions {
        cache_bytes: cfg.cache_bytes,
        batch: cfg.load.batch.max(1),
        raw,
        prog: cfg.prog.clone(),
        abi: cfg.abi,
        keys_per_chain: 1,
    }
}

/// Thread `t`'s part of `requests` (the first `requests % threads` threads take one more).
pub(crate) fn thread_share(requests: u64, threads: usize, t: usize) -> u64 {
    requests / threads as u64 + u64::from((t as u64) < requests % threads as u64)
}

pub(crate) fn join_all<T>(
    handles: Vec<std::thread::JoinHandle<Result<T, KvError>>>,
) -> Result<Vec<T>, KvError> {
    let mut outs = Vec::new();
    let mut first_err = None;
    for h in handles {
        match h.join().expect("bench thread panicked") {
            Ok(o) => outs.push(o),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    first_err.map_or(Ok(outs), Err)
}

/// One result from the threads' latencies, stats and misses, over `wall_s` and `cpu_s`.
#[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub(crate) fn summarize(
    store: &Store,
    cfg: &BenchConfig,
    outs: &[ThreadOut],
    wall_s: f64,
    cpu_s: f64,
) -> BenchResult {
    let mut lat: Vec<u64> = outs.iter().flat_map(|o| o.latencies_ns.iter().copied()).collect();
    lat.sort_unstable();
    let count = lat.len() as f64;
    let pct = |p: f64| storefn_stats::percentile_us(&lat, p / 100.0).unwrap_or(0.0);
    let ios: u64 = outs.iter().map(|o| o.stats.ios).sum();
    BenchResult {
        path: cfg.path.clone(),
        layers: store.meta().layers,
        threads: cfg.load.threads,
        batch: cfg.load.batch.max(1),
        requests: lat.len() as u64,
        ops_per_sec: count / wall_s,
        mean_us: lat.iter().sum::<u64>() as f64 / count / 1000.0,
        p50_us: pct(50.0),
        p95_us: pct(95.0),
        p99_us: pct(99.0),
        p999_us: pct(99.9),
        pct_over_1ms: lat.iter().filter(|&&l| l >= 1_000_000).count() as f64 * 100.0 / count,
        cpu_us_per_op: cpu_s * 1e6 / count,
        ios_per_op: ios as f64 / count,
        fallbacks: outs.iter().map(|o| o.stats.fallbacks).sum(),
        device_ios_per_op: outs.iter().map(|o| o.stats.device_ios).sum::<u64>() as f64 / count,
        misses: if cfg.path == "device" { 0 } else { outs.iter().map(|o| o.misses).sum() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_keys_are_in_range_and_skewed() {
        let n = 29_791;
        let mut g = KeyGen::new("zipf:0.99".parse().unwrap(), n, 7);
        let mut counts = std::collections::HashMap::new();
        for _ in 0..100_000 {
            let k = g.next_key();
            assert!(k < n);
            *counts.entry(k).or_insert(0u32) += 1;
        }
        let top = counts.values().copied().max().unwrap();
        // Uniform would give ~3.4 per key; theta 0.99 puts ~9% on the hottest key.
        assert!(top > 3000, "hottest key drawn {top} times");
        let mut u = KeyGen::new(Dist::Uniform, n, 7);
        assert!((0..1000).all(|_| u.next_key() < n));
    }

    #[test]
    fn dist_parse_errors_name_the_input() {
        for bad in ["zipf", "zipf:1.5", "zipf:x", "normal"] {
            let e = bad.parse::<Dist>().unwrap_err().to_string();
            assert!(e.contains(bad), "{e}");
        }
        assert_eq!("zipf:0.5".parse::<Dist>().unwrap(), Dist::Zipf(0.5));
    }
}
