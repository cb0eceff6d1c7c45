//! The host-path benchmark behind `storefn dds host-bench`: what a read costs when the host
//! application goes through the file service over the progressive rings, next to a plain
//! `pread` of the same bytes (page cache), at one request in flight (blocking calls) and at
//! `depth` in flight (submit + poll). The service runs on its own thread of this process, over
//! the same sealed memfd channel a separate host process would use.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::{FileService, HostChannel, HostError, HostFiles};
use crate::limits::DEFAULT_CHANNEL_RING_BYTES;
use crate::limits::MAX_IO_BYTES;
use crate::limits::{MAX_DEPTH, MAX_OPS};
use crate::ring::progressive::backoff;

/// What to run.
#[derive(Debug, Clone)]
pub struct HostBenchConfig {
    /// Directory the served file is created in (removed afterwards).
    pub dir: PathBuf,
    /// Size of the file read at random offsets.
    pub file_bytes: u64,
    /// Bytes per read (<= 64 KiB).
    pub io_bytes: usize,
    /// Reads per case and round.
    pub ops: usize,
    /// In flight for the async case.
    pub depth: usize,
    /// Rounds (cases interleaved per round); the median round is reported.
    pub rounds: usize,
    /// Seed of the offsets.
    pub seed: u64,
}

/// One case (median round by throughput).
#[derive(Debug, Clone, Serialize)]
pub struct HostBenchResult {
    /// `pread` (direct), `host-sync` (blocking library call), `host-async` (submit + poll).
    pub case: &'static str,
    /// Requests in flight.
    pub depth: usize,
    /// Bytes per read.
    pub io_bytes: usize,
    /// Reads per second.
    pub ops_per_sec: f64,
    /// Latency percentiles, microseconds (async: submit to completion).
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Rounds.
    pub rounds: usize,
}

/// Bench errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostBenchError {
    /// A bad setting, named.
    #[error("host bench: {0}")]
    Config(String),
    /// The host path failed.
    #[error(transparent)]
    Host(#[from] HostError),
    /// Creating or reading the file failed.
    #[error("host bench: {0}")]
    Io(#[from] std::io::Error),
}

struct Case {
    ops_per_sec: f64,
    lat_ns: Vec<u64>,
}

/// Runs the three cases.
///
/// # Errors
/// `Config` for bad settings, `Host`/`Io` when the path fails.
pub fn run(cfg: &HostBenchConfig) -> Result<Vec<HostBenchResult>, HostBenchError> {
    if cfg.io_bytes == 0 || cfg.io_bytes > MAX_IO_BYTES || cfg.file_bytes < cfg.io_bytes as u64 {
        return Err(HostBenchError::Config(format!(
            "--io-bytes {} must be 1..={MAX_IO_BYTES} and at most --file-bytes {}",
            cfg.io_bytes, cfg.file_bytes
        )));
    }
    if !(1..=MAX_DEPTH).contains(&cfg.depth) || !(1..=MAX_OPS).contains(&cfg.ops) || cfg.rounds == 0
    {
        return Err(HostBenchError::Config(format!(
            "--depth 1..={MAX_DEPTH}, --ops 1..={MAX_OPS}, --rounds >= 1"
        )));
    }
    let dir = cfg.dir.join(format!("storefn-host-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = run_in(cfg, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn run_in(cfg: &HostBenchConfig, dir: &Path) -> Result<Vec<HostBenchResult>, HostBenchError> {
    let channel = HostChannel::create(DEFAULT_CHANNEL_RING_BYTES)?;
    let mut service = FileService::new(dir, &channel)?;
    let host_channel =
        HostChannel::attach(channel.fd().try_clone_to_owned().map_err(HostBenchError::Io)?)?;
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let server = s.spawn(|| service.serve_until(&channel, &stop));
        let r = measure(cfg, dir, HostFiles::new(host_channel));
        stop.store(true, Ordering::Relaxed);
        server.join().expect("service thread panicked")?;
        r
    })
}

fn measure(
    cfg: &HostBenchConfig,
    dir: &Path,
    mut host: HostFiles,
) -> Result<Vec<HostBenchResult>, HostBenchError> {
    let f = host.create("bench.dat")?;
    let chunk: Vec<u8> = (0..MAX_IO_BYTES).map(|i| (i * 7) as u8).collect();
    let mut at = 0;
    while at < cfg.file_bytes {
        let n = (cfg.file_bytes - at).min(chunk.len() as u64) as usize;
        host.write(f, at, &chunk[..n])?;
        at += n as u64;
    }
    host.flush(f)?;
    let direct = File::open(dir.join("bench.dat"))?;
    let slots = cfg.file_bytes / cfg.io_bytes as u64;
    let mut rng = SmallRng::seed_from_u64(cfg.seed);
    let offsets: Vec<u64> =
        (0..cfg.ops).map(|_| rng.gen_range(0..slots) * cfg.io_bytes as u64).collect();
    let mut buf = vec![0u8; cfg.io_bytes];
    let names = ["pread", "host-sync", "host-async"];
    let mut rounds: Vec<Vec<Case>> = names.iter().map(|_| Vec::new()).collect();
    for _ in 0..cfg.rounds {
        rounds[0].push(timed(&offsets, |off| Ok(direct.read_at(&mut buf, off)?))?);
        rounds[1].push(timed(&offsets, |off| Ok(host.read(f, off, &mut buf)?))?);
        rounds[2].push(async_case(&mut host, f, &offsets, cfg)?);
    }
    let mut out = Vec::new();
    for (i, mut cases) in rounds.into_iter().enumerate() {
        cases.sort_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
        let mut mid = cases.swap_remove(cases.len() / 2);
        mid.lat_ns.sort_unstable();
        let tail = storefn_stats::Tail::of(&mid.lat_ns);
        out.push(HostBenchResult {
            case: names[i],
            depth: if i == 2 { cfg.depth } else { 1 },
            io_bytes: cfg.io_bytes,
            ops_per_sec: mid.ops_per_sec,
            p50_us: tail.p50_us,
            p99_us: tail.p99_us,
            p999_us: tail.p999_us,
            rounds: cfg.rounds,
        });
    }
    Ok(out)
}

/// One read at a time; latency per call.
fn timed(
    offsets: &[u64],
    mut read: impl FnMut(u64) -> Result<usize, HostBenchError>,
) -> Result<Case, HostBenchError> {
    let mut lat_ns = Vec::with_capacity(offsets.len());
    let start = Instant::now();
    for &off in offsets {
        let t = Instant::now();
        read(off)?;
        lat_ns.push(t.elapsed().as_nanos() as u64);
    }
    Ok(Case { ops_per_sec: offsets.len() as f64 / start.elapsed().as_secs_f64(), lat_ns })
}

/// `depth` reads in flight through submit + poll; latency from submit to completion.
fn async_case(
    host: &mut HostFiles,
    f: u32,
    offsets: &[u64],
    cfg: &HostBenchConfig,
) -> Result<Case, HostBenchError> {
    let mut lat_ns = Vec::with_capacity(offsets.len());
    let mut submitted_at: Vec<Option<Instant>> = vec![None; offsets.len()];
    let mut first_id = None;
    let (mut next, mut done) = (0, 0);
    let start = Instant::now();
    let mut spins = 0;
    while done < offsets.len() {
        while next < offsets.len() && next - done < cfg.depth {
            let id = host.submit_read(f, offsets[next], cfg.io_bytes as u32)?;
            let first = *first_id.get_or_insert(id);
            submitted_at[(id - first) as usize] = Some(Instant::now());
            next += 1;
        }
        let first = first_id.expect("submitted at least one");
        let mut failed = None;
        let n = host.poll(|c| {
            if let Err(errno) = c.result {
                failed.get_or_insert(HostError::File { op: "read", errno });
            }
            if let Some(t) = submitted_at.get((c.id - first) as usize).copied().flatten() {
                lat_ns.push(t.elapsed().as_nanos() as u64);
            }
        })?;
        if let Some(e) = failed {
            return Err(e.into());
        }
        done += n;
        if n == 0 {
            if start.elapsed() > Duration::from_secs(600) {
                return Err(HostBenchError::Config("async case stalled for 600 s".into()));
            }
            backoff(&mut spins);
        } else {
            spins = 0;
        }
    }
    Ok(Case { ops_per_sec: offsets.len() as f64 / start.elapsed().as_secs_f64(), lat_ns })
}
