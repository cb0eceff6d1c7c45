//! The remote lookup benchmark behind `storefn kv bench DB --remote ADDR --path
//! rpc-read|pushdown`: threads, each with its own connection; the local benchmark's key
//! distributions and result shape, plus the network figures (`rtt_us`, `round_trips_per_op`,
//! `server_cpu_us_per_op`).

use std::sync::{Arc, Barrier};
use std::time::Instant;

use crate::harness::bench::{BenchResult, KeyGen, Load};

use storefn_wire::{Client, ClientConfig, Request};

use super::{RemoteKv, RemoteKvError, RemotePath};
use crate::limits::{PIPELINE_FRAMES, RTT_PROBES};

/// A remote benchmark's parameters.
#[derive(Debug, Clone)]
pub struct RemoteBenchConfig {
    pub addr: String,
    pub client: ClientConfig,
    /// The database, relative to the served directory.
    pub db: String,
    pub path: RemotePath,
    /// `batch` is the lookups per frame on `pushdown` (1 = one lookup per round trip); the
    /// other paths run one lookup per round trip.
    pub load: Load,
    pub cache_levels: u32,
    /// The server's pid, when it runs on this machine: its CPU time is read from /proc.
    pub server_pid: Option<u32>,
}

/// Results: the local shape plus the network figures.
#[derive(Debug, Clone, Default)]
pub struct RemoteBenchResult {
    pub base: BenchResult,
    /// Median round-trip time of a STAT before the run, µs (network + server request cost).
    pub rtt_us: f64,
    pub round_trips_per_op: f64,
    /// Server CPU (user + system) per lookup, µs; `None` without `server_pid`.
    pub server_cpu_us_per_op: Option<f64>,
    pub reloads: u64,
}

/// CPU seconds of process `pid` from `/proc/PID/stat` (utime + stime).
#[must_use]
pub fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let (u, st): (f64, f64) = (f.get(11)?.parse().ok()?, f.get(12)?.parse().ok()?);
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    #[allow(clippy::cast_precision_loss)]
    Some((u + st) / hz.max(1) as f64)
}

/// Nearest-rank percentile of ascending ns samples in µs, 0 for none (storefn-stats).
fn percentile(sorted: &[u64], p: f64) -> f64 {
    storefn_stats::percentile_us(sorted, p).unwrap_or(0.0)
}

/// Median STAT round trip, µs.
///
/// # Errors
/// Connection errors.
pub fn measure_rtt(client: &mut Client, db: &str, probes: usize) -> Result<f64, RemoteKvError> {
    let mut t = Vec::with_capacity(probes);
    for _ in 0..probes {
        let t0 = Instant::now();
        client.one(&Request::Stat { path: db.as_bytes() })?;
        t.push(u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX));
    }
    t.sort_unstable();
    Ok(percentile(&t, 0.5))
}

struct ThreadOut {
    lat_ns: Vec<u64>,
    round_trips: u64,
    hops: u64,
    misses: u64,
    fallbacks: u64,
    reloads: u64,
}

fn run_thread(
    cfg: &RemoteBenchConfig,
    t: usize,
    n: u64,
    barrier: &Barrier,
) -> Result<ThreadOut, RemoteKvError> {
    let client = Client::connect(&cfg.addr, cfg.client.clone())?;
    let mut kv = RemoteKv::open(client, &cfg.db, cfg.cache_levels)?;
    let mut keys =
        KeyGen::new(cfg.load.dist, kv.meta().key_count, cfg.load.seed.wrapping_add(t as u64));
    let batch = if cfg.path == RemotePath::Pushdown { cfg.load.batch.max(1) } else { 1 };
    let warm: Vec<u64> = (0..cfg.load.warmup).map(|_| keys.next_key()).collect();
    let measured: Vec<u64> = (0..n).map(|_| keys.next_key()).collect();
    let mut lat_ns = Vec::with_capacity(measured.len());
    let mut misses = 0;
    let before;
    if batch > 1 {
        // `batch` lookups in flight, refilled as replies come (frames of batch / 4).
        let per_frame = (batch / PIPELINE_FRAMES).max(1);
        kv.pushdown_pipelined(&warm, batch, per_frame, &mut lat_ns)?;
        before = kv.stats();
        barrier.wait();
        let got = kv.pushdown_pipelined(&measured, batch, per_frame, &mut lat_ns)?;
        misses = got.iter().filter(|v| v.is_none()).count() as u64;
    } else {
        for &k in &warm {
            kv.get(k, cfg.path)?;
        }
        before = kv.stats();
        barrier.wait();
        for &k in &measured {
            let t0 = Instant::now();
            let got = kv.get(k, cfg.path)?;
            lat_ns.push(u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX));
            misses += u64::from(got.is_none());
        }
    }
    let after = kv.stats();
    Ok(ThreadOut {
        lat_ns,
        round_trips: after.round_trips - before.round_trips,
        hops: after.hops - before.hops,
        misses,
        fallbacks: after.fallbacks - before.fallbacks,
        reloads: after.reloads - before.reloads,
    })
}

/// Runs the benchmark.
///
/// # Errors
/// Connection errors, a corrupt remote tree.
#[allow(clippy::cast_precision_loss)]
pub fn run(cfg: &RemoteBenchConfig) -> Result<RemoteBenchResult, RemoteKvError> {
    let mut probe = Client::connect(&cfg.addr, cfg.client.clone())?;
    let rtt_us = measure_rtt(&mut probe, &cfg.db, RTT_PROBES)?;
    let threads = cfg.load.threads.max(1);
    let per = cfg.load.requests / threads as u64;
    let barrier = Arc::new(Barrier::new(threads + 1));
    let outs = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let b = Arc::clone(&barrier);
                s.spawn(move || {
                    let r = run_thread(cfg, t, per, &b);
                    if r.is_err() {
                        // Do not leave the others waiting at the barrier forever.
                        std::thread::spawn(move || b.wait());
                    }
                    r
                })
            })
            .collect();
        barrier.wait();
        let cpu0 = cfg.server_pid.and_then(process_cpu_seconds);
        let me0 = process_cpu_seconds(std::process::id());
        let t0 = Instant::now();
        let outs: Vec<_> =
            hs.into_iter().map(|h| h.join().expect("bench thread panicked")).collect();
        let secs = t0.elapsed().as_secs_f64();
        let cpu1 = cfg.server_pid.and_then(process_cpu_seconds);
        let me1 = process_cpu_seconds(std::process::id());
        (outs, secs, cpu0.zip(cpu1).map(|(a, b)| b - a), me0.zip(me1).map_or(0.0, |(a, b)| b - a))
    });
    let (outs, secs, server_cpu, client_cpu) = outs;
    let mut lat = Vec::new();
    let (mut rt, mut hops, mut misses, mut fallbacks, mut reloads) = (0, 0, 0, 0, 0);
    for o in outs {
        let o = o?;
        lat.extend(o.lat_ns);
        rt += o.round_trips;
        hops += o.hops;
        misses += o.misses;
        fallbacks += o.fallbacks;
        reloads += o.reloads;
    }
    lat.sort_unstable();
    let n = lat.len().max(1) as f64;
    let mean_us = lat.iter().map(|&x| x as f64).sum::<f64>() / n / 1000.0;
    let over = lat.iter().filter(|&&x| x >= 1_000_000).count() as f64;
    let path = match cfg.path {
        RemotePath::RpcRead => "rpc-read",
        RemotePath::Pushdown => "pushdown",
    };
    let layers = {
        let c = Client::connect(&cfg.addr, cfg.client.clone())?;
        RemoteKv::open(c, &cfg.db, 0)?.meta().layers
    };
    let base = BenchResult {
        path: path.to_string(),
        layers,
        threads,
        batch: if cfg.path == RemotePath::Pushdown { cfg.load.batch.max(1) } else { 1 },
        requests: lat.len() as u64,
        ops_per_sec: lat.len() as f64 / secs.max(1e-9),
        mean_us,
        p50_us: percentile(&lat, 0.5),
        p95_us: percentile(&lat, 0.95),
        p99_us: percentile(&lat, 0.99),
        p999_us: percentile(&lat, 0.999),
        pct_over_1ms: over * 100.0 / n,
        // This (client) process; the server's is `server_cpu_us_per_op`.
        cpu_us_per_op: client_cpu * 1e6 / n,
        ios_per_op: hops as f64 / n,
        fallbacks,
        device_ios_per_op: 0.0,
        misses,
    };
    Ok(RemoteBenchResult {
        base,
        rtt_us,
        round_trips_per_op: rt as f64 / n,
        server_cpu_us_per_op: server_cpu.map(|c| c * 1e6 / n),
        reloads,
    })
}
