//! `storefn kv bench --io file,raw`: the file path and raw mode (metadata digest) side by side
//! in one run. This VM's latency drifts by 10-20% over seconds, more than the difference being
//! measured, so the two modes are interleaved: the run is cut into rounds, each round draws its
//! keys once and looks them all up in both modes, and the order alternates between rounds (the
//! second mode of a round may find the device's structures warmer). Every thread holds both
//! paths and all threads run the same mode at the same time (a barrier between halves).

use std::sync::{Arc, Barrier};
use std::time::Instant;

use crate::harness::bench::{
    chunk_len, cpu_seconds, draw, join_all, measure, open_path, path_options, summarize,
    thread_share, BenchConfig, BenchResult, KeyGen, ThreadOut,
};
use crate::limits::MAX_ROUNDS;
use crate::path::LookupPath;
use crate::store::Store;
use crate::KvError;

/// The two modes compared, in the order of the even rounds.
const MODES: [Mode; 2] = [Mode::File, Mode::Raw];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    File = 0,
    Raw = 1,
}

/// One round's mean lookup latency in each mode.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoundMeans {
    pub file_mean_us: f64,
    pub raw_mean_us: f64,
}

impl RoundMeans {
    /// How much lower raw mode's mean was than the file path's this round, percent.
    #[must_use]
    pub fn raw_lower_pct(&self) -> f64 {
        lower_pct(self.file_mean_us, self.raw_mean_us)
    }
}

/// Both modes' results from one interleaved run.
#[derive(Debug, Clone)]
pub struct CompareResult {
    pub file: BenchResult,
    pub raw: BenchResult,
    pub rounds: Vec<RoundMeans>,
}

impl CompareResult {
    /// Raw mode's mean latency over the whole run, percent below the file path's.
    #[must_use]
    pub fn raw_mean_lower_pct(&self) -> f64 {
        lower_pct(self.file.mean_us, self.raw.mean_us)
    }

    /// The median over rounds of raw mode's per-round percent below the file path.
    #[must_use]
    pub fn median_round_lower_pct(&self) -> f64 {
        let mut v: Vec<f64> = self.rounds.iter().map(RoundMeans::raw_lower_pct).collect();
        v.sort_by(f64::total_cmp);
        match v.len() {
            0 => 0.0,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        }
    }

    /// Raw mode's CPU per lookup, percent below the file path's.
    #[must_use]
    pub fn raw_cpu_lower_pct(&self) -> f64 {
        lower_pct(self.file.cpu_us_per_op, self.raw.cpu_us_per_op)
    }

    /// True when the raw side really read the block device (raw mode can decline and stay on
    /// the file path; then this run compared the file path with itself).
    #[must_use]
    pub fn raw_in_use(&self) -> bool {
        self.raw.device_ios_per_op > 0.0
    }
}

fn lower_pct(file: f64, raw: f64) -> f64 {
    if file > 0.0 {
        100.0 * (file - raw) / file
    } else {
        0.0
    }
}

/// One thread's measurements: per mode, its lookups; per round and mode, wall and CPU time.
struct PairOut {
    modes: [ThreadOut; 2],
    /// `[round][mode]` wall seconds of this thread's half-round.
    wall_s: Vec<[f64; 2]>,
    cpu_s: [f64; 2],
    /// `[round][mode]` (sum of latencies ns, lookups) for per-round means.
    round_sums: Vec<[(u64, u64); 2]>,
}

/// Runs `cfg` (its `raw` field is ignored) once per mode, interleaved over `rounds`.
///
/// # Errors
/// `Invalid` for zero threads/requests/rounds or fewer requests per thread than rounds;
/// path construction and lookup errors (the first from any thread).
pub fn run(store: &Arc<Store>, cfg: &BenchConfig, rounds: u32) -> Result<CompareResult, KvError> {
    if cfg.load.threads == 0 || cfg.load.requests == 0 {
        return Err(KvError::Invalid("--threads and --requests must be > 0".into()));
    }
    if rounds == 0 || rounds > MAX_ROUNDS {
        return Err(KvError::Invalid(format!("--rounds {rounds}: expected 1..={MAX_ROUNDS}")));
    }
    if cfg.load.requests / (cfg.load.threads as u64) < u64::from(rounds) {
        return Err(KvError::Invalid(format!(
            "--requests {} over {} threads is fewer than one lookup per round (--rounds {rounds})",
            cfg.load.requests, cfg.load.threads
        )));
    }
    drop(open_path(&cfg.path, store, &path_options(cfg, false))?);
    let barrier = Arc::new(Barrier::new(cfg.load.threads));
    let n = store.meta().key_count;
    let handles: Vec<_> = (0..cfg.load.threads)
        .map(|t| {
            let (cfg, barrier, store) = (cfg.clone(), Arc::clone(&barrier), Arc::clone(store));
            let share = thread_share(cfg.load.requests, cfg.load.threads, t);
            std::thread::spawn(move || {
                let mut keys = KeyGen::new(cfg.load.dist, n, cfg.load.seed.wrapping_add(t as u64));
                let mut arrivals = Arrivals { barrier: &barrier, made: 0 };
                let r = pair_thread(&store, &cfg, &mut keys, share, rounds, &mut arrivals);
                if r.is_err() {
                    arrivals.pay_rest(rounds);
                }
                r
            })
        })
        .collect();
    let outs = join_all(handles)?;
    Ok(combine(store, cfg, rounds, outs))
}

/// Barrier arrivals one thread makes in a run: one after warm-up, two per round.
fn barrier_arrivals(rounds: u32) -> u32 {
    1 + 2 * rounds
}

/// Counts a thread's barrier arrivals, so that a thread that fails can still make the ones it
/// owes (a `Barrier` cannot be cancelled: the others would wait forever).
struct Arrivals<'a> {
    barrier: &'a Barrier,
    made: u32,
}

impl Arrivals<'_> {
    fn arrive(&mut self) {
        self.barrier.wait();
        self.made += 1;
    }

    fn pay_rest(&mut self, rounds: u32) {
        while self.made < barrier_arrivals(rounds) {
            self.arrive();
        }
    }
}

fn pair_thread(
    store: &Arc<Store>,
    cfg: &BenchConfig,
    keys: &mut KeyGen,
    share: u64,
    rounds: u32,
    arrivals: &mut Arrivals<'_>,
) -> Result<PairOut, KvError> {
    let chunk = chunk_len(cfg);
    let mut paths: Vec<Box<dyn LookupPath>> = MODES
        .iter()
        .map(|&m| open_path(&cfg.path, store, &path_options(cfg, m == Mode::Raw)))
        .collect::<Result<_, _>>()?;
    let warm = draw(keys, cfg.load.warmup);
    for p in &mut paths {
        measure(p.as_mut(), &warm, chunk, None)?;
    }
    let before = [paths[0].stats(), paths[1].stats()];
    let mut out = PairOut {
        modes: [empty_out(share), empty_out(share)],
        wall_s: Vec::with_capacity(rounds as usize),
        cpu_s: [0.0; 2],
        round_sums: Vec::with_capacity(rounds as usize),
    };
    arrivals.arrive();
    for r in 0..rounds {
        let per_round =
            share / u64::from(rounds) + u64::from(r + 1 == rounds) * (share % u64::from(rounds));
        let round_keys = draw(keys, per_round);
        let order = if r % 2 == 0 { MODES } else { [MODES[1], MODES[0]] };
        let (mut wall, mut sums) = ([0.0; 2], [(0, 0); 2]);
        for m in order {
            let i = m as usize;
            let half = measure_half(paths[i].as_mut(), &round_keys, chunk, &mut out.modes[i])?;
            (wall[i], sums[i]) = (half.wall_s, (half.sum_ns, half.lookups));
            out.cpu_s[i] += half.cpu_s;
            arrivals.arrive();
        }
        out.wall_s.push(wall);
        out.round_sums.push(sums);
    }
    for (i, p) in paths.iter().enumerate() {
        out.modes[i].stats = p.stats().since(&before[i]);
    }
    Ok(out)
}

/// One mode's half of a round on one thread.
struct Half {
    wall_s: f64,
    cpu_s: f64,
    sum_ns: u64,
    lookups: u64,
}

fn measure_half(
    path: &mut dyn LookupPath,
    keys: &[u64],
    chunk: usize,
    out: &mut ThreadOut,
) -> Result<Half, KvError> {
    let (t0, cpu0, n0) = (Instant::now(), cpu_seconds(libc::RUSAGE_THREAD), out.latencies_ns.len());
    out.misses += measure(path, keys, chunk, Some(&mut out.latencies_ns))?;
    let wall_s = t0.elapsed().as_secs_f64();
    let cpu_s = cpu_seconds(libc::RUSAGE_THREAD) - cpu0;
    let new = &out.latencies_ns[n0..];
    Ok(Half { wall_s, cpu_s, sum_ns: new.iter().sum(), lookups: new.len() as u64 })
}

fn empty_out(capacity: u64) -> ThreadOut {
    ThreadOut {
        latencies_ns: Vec::with_capacity(usize::try_from(capacity).unwrap_or(0)),
        stats: crate::path::PathStats::default(),
        misses: 0,
    }
}

/// Per mode: lookups from every thread; wall time = per half-round the slowest thread, summed.
#[allow(clippy::cast_precision_loss)]
fn combine(store: &Store, cfg: &BenchConfig, rounds: u32, outs: Vec<PairOut>) -> CompareResult {
    let mut wall_s = [0.0f64; 2];
    let mut round_means = Vec::with_capacity(rounds as usize);
    for r in 0..rounds as usize {
        let mut means = [0.0; 2];
        for (i, m) in means.iter_mut().enumerate() {
            wall_s[i] += outs.iter().map(|o| o.wall_s[r][i]).fold(0.0, f64::max);
            let (sum_ns, n) = outs.iter().fold((0u64, 0u64), |(s, c), o| {
                (s + o.round_sums[r][i].0, c + o.round_sums[r][i].1)
            });
            *m = if n == 0 { 0.0 } else { sum_ns as f64 / n as f64 / 1000.0 };
        }
        round_means.push(RoundMeans { file_mean_us: means[0], raw_mean_us: means[1] });
    }
    let cpu_s = |i: usize| outs.iter().map(|o| o.cpu_s[i]).sum::<f64>();
    let (file_cpu, raw_cpu) = (cpu_s(0), cpu_s(1));
    let mut per_mode: [Vec<ThreadOut>; 2] = [Vec::new(), Vec::new()];
    for o in outs {
        let [f, r] = o.modes;
        per_mode[0].push(f);
        per_mode[1].push(r);
    }
    let file = summarize(store, cfg, &per_mode[0], wall_s[0], file_cpu);
    let raw = summarize(store, cfg, &per_mode[1], wall_s[1], raw_cpu);
    CompareResult { file, raw, rounds: round_means }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(rounds: &[(f64, f64)]) -> CompareResult {
        CompareResult {
            file: BenchResult { mean_us: 10.0, cpu_us_per_op: 4.0, ..BenchResult::default() },
            raw: BenchResult { mean_us: 8.0, cpu_us_per_op: 3.0, ..BenchResult::default() },
            rounds: rounds
                .iter()
                .map(|&(f, r)| RoundMeans { file_mean_us: f, raw_mean_us: r })
                .collect(),
        }
    }

    #[test]
    fn percentages_compare_raw_to_file() {
        let c = result(&[(10.0, 9.0), (10.0, 5.0), (20.0, 18.0)]);
        assert!((c.raw_mean_lower_pct() - 20.0).abs() < 1e-9);
        assert!((c.raw_cpu_lower_pct() - 25.0).abs() < 1e-9);
        // Per-round: 10%, 50%, 10% -> median 10%.
        assert!((c.median_round_lower_pct() - 10.0).abs() < 1e-9);
        let even = result(&[(10.0, 9.0), (10.0, 7.0)]);
        assert!((even.median_round_lower_pct() - 20.0).abs() < 1e-9);
        // Raw slower than file: negative, not clamped.
        assert!(RoundMeans { file_mean_us: 10.0, raw_mean_us: 12.0 }.raw_lower_pct() < 0.0);
    }
}
