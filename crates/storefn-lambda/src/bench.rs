//! `storefn lambda bench`'s harness: each workload under each client-cache condition, timed per
//! request. Local side only in this build; the server and auto rows come with the server's
//! LAMBDA frame (the conditions through the delay proxy then add RTT and the server's CPU cap).

use std::fs::{File, OpenOptions};
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use storefn_io::IoMode;
use storefn_vm::Engine;

use crate::cache::drop_cached;
use crate::dispatch::Where;
use crate::error::LambdaError;
use crate::limits::MAX_RANGE_BYTES;
use crate::limits::WARMUP_REQUESTS;
use crate::local::{pwrite_lambda, LocalFile};
use crate::prog::LambdaProg;
use crate::workloads::Workload;

/// The client's cache state a run is measured in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Condition {
    /// Every request's range is dropped from the page cache first (untimed).
    Cold,
    /// The whole file is read into the page cache before the run.
    Warm,
}

impl Condition {
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Condition::Cold => "cold",
            Condition::Warm => "warm",
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Data files live (and are generated) here: `<dir>/<workload>.dat`.
    pub dir: PathBuf,
    pub workloads: Vec<Workload>,
    pub conditions: Vec<Condition>,
    /// Timed requests per (workload, condition).
    pub requests: u32,
    /// Bytes per request (rounded down to whole records, at least one).
    pub request_bytes: u64,
    /// Size of each generated data file.
    pub file_bytes: u64,
    pub seed: u64,
    pub engine: Engine,
}

/// One (workload, condition, where) result.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchRow {
    pub workload: Workload,
    /// `cold`/`warm` for reads, `write` for the write path; remote runs add the RTT
    /// (`warm-rtt200`) and name a change midway with `->` (`cold->warm-rtt200`).
    pub condition: String,
    pub r#where: Where,
    pub requests: u32,
    pub request_bytes: u64,
    pub us_per_request: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// Output bytes of the last request (a check that the function did its work).
    pub out_bytes: usize,
    /// Mean time of the uncached-fraction probe (cachestat) on the request's range: the
    /// per-request cost the dispatcher adds before it decides (0 on the write path).
    pub cache_probe_us: f64,
    /// Fraction of the requests that ran on the server (0 for `local`, 1 for `server`).
    pub server_share: f64,
    /// Auto only: the dispatcher's counters over the whole run (warm-up included).
    pub dispatch: Option<crate::dispatch::DispatchStats>,
    /// Remote runs: mean µs per request of each round, in run order (the sides take turns
    /// round by round, so per-round ratios between them show the run's noise).
    pub round_us: Vec<f64>,
    /// Remote runs: mean µs per request of each half (a changing run changes between them).
    pub half_us: [f64; 2],
}

/// Writes `<dir>/<workload>.dat` of `file_bytes` unless a file of that size is there.
///
/// # Errors
/// [`LambdaError::Io`].
pub fn ensure_data(
    dir: &Path,
    w: Workload,
    file_bytes: u64,
    seed: u64,
) -> Result<PathBuf, LambdaError> {
    let path = dir.join(format!("{}.dat", w.name()));
    let want = file_bytes / w.unit_bytes() * w.unit_bytes();
    if std::fs::metadata(&path).is_ok_and(|m| m.len() == want) {
        return Ok(path);
    }
    let io = |what, source| LambdaError::Io { path: path.clone(), what, source };
    let f = File::create(&path).map_err(|e| io("create", e))?;
    let mut bw = BufWriter::new(f);
    w.generate(&mut bw, file_bytes, seed).map_err(|e| io("write", e))?;
    let f = bw.into_inner().map_err(|e| io("write", e.into_error()))?;
    f.sync_all().map_err(|e| io("fsync", e))?;
    Ok(path)
}

/// Runs every (workload, condition); calls `progress` with each row as it is done.
///
/// # Errors
/// Generating data, loading a program, or a failed request.
pub fn run(
    cfg: &BenchConfig,
    mut progress: impl FnMut(&BenchRow),
) -> Result<Vec<BenchRow>, LambdaError> {
    let mut rows = Vec::new();
    for &w in &cfg.workloads {
        let path = ensure_data(&cfg.dir, w, cfg.file_bytes, cfg.seed)?;
        let prog = LambdaProg::from_elf(w.prog_name(), storefn_progs_elf(w), None);
        let mut inst = prog.instance(cfg.engine)?;
        let unit = w.unit_bytes();
        let len = (cfg.request_bytes / unit).max(1) * unit;
        if w.is_write() {
            rows.push(bench_write(cfg, w, &path, &mut inst, len)?);
            progress(rows.last().unwrap());
            continue;
        }
        let mut file = LocalFile::open(&path, IoMode::Buffered)?;
        let size = file.size_bytes();
        if len > size {
            return Err(LambdaError::OutsideFile { path, off: 0, len, size });
        }
        let mut out = vec![0u8; w.out_cap(usize::try_from(len).unwrap_or(usize::MAX))];
        for &c in &cfg.conditions {
            let io = |what, source| LambdaError::Io { path: path.clone(), what, source };
            if c == Condition::Warm {
                warm(&mut file)?;
            }
            let mut rng = SmallRng::seed_from_u64(cfg.seed ^ 0x5eed);
            let mut lat_us = Vec::with_capacity(cfg.requests as usize);
            let mut out_bytes = 0;
            let mut probe_us = 0.0;
            for i in 0..WARMUP_REQUESTS + cfg.requests {
                let off = rng.gen_range(0..=(size - len) / unit) * unit;
                if c == Condition::Cold {
                    drop_cached(file.file(), off, len).map_err(|e| io("fadvise", e))?;
                }
                let t = Instant::now();
                file.uncached_fraction(off, len)?;
                if i >= WARMUP_REQUESTS {
                    probe_us += t.elapsed().as_secs_f64() * 1e6;
                }
                let t = Instant::now();
                let (n, _) = file.pread_lambda(off, len, &mut inst, &mut out)?;
                let us = t.elapsed().as_secs_f64() * 1e6;
                out_bytes = n;
                if i >= WARMUP_REQUESTS {
                    lat_us.push(us);
                }
            }
            let mut r = row(w, c.as_str().into(), Where::Local, len, &mut lat_us, out_bytes);
            r.cache_probe_us = probe_us / f64::from(cfg.requests.max(1));
            rows.push(r);
            progress(rows.last().unwrap());
        }
    }
    Ok(rows)
}

fn bench_write(
    cfg: &BenchConfig,
    w: Workload,
    path: &Path,
    inst: &mut storefn_vm::Instance,
    len: u64,
) -> Result<BenchRow, LambdaError> {
    let io = |what, source| LambdaError::Io { path: path.to_path_buf(), what, source };
    let input = std::fs::read(path).map_err(|e| io("read", e))?;
    let len = usize::try_from(len).unwrap_or(usize::MAX).min(input.len());
    let out_path = path.with_extension("out");
    let out_file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&out_path)
        .map_err(|e| io("open output", e))?;
    let mut staging = vec![0u8; w.out_cap(len)];
    let mut rng = SmallRng::seed_from_u64(cfg.seed ^ 0x5eed);
    let unit = usize::try_from(w.unit_bytes()).unwrap();
    let mut lat_us = Vec::with_capacity(cfg.requests as usize);
    let mut out_bytes = 0;
    for i in 0..WARMUP_REQUESTS + cfg.requests {
        let off = rng.gen_range(0..=(input.len() - len) / unit) * unit;
        let t = Instant::now();
        out_bytes =
            pwrite_lambda(&out_file, &out_path, 0, &input[off..off + len], inst, &mut staging)?;
        if i >= WARMUP_REQUESTS {
            lat_us.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    Ok(row(w, "write".into(), Where::Local, len as u64, &mut lat_us, out_bytes))
}

/// A row from per-request latencies (sorted here); `server_share` follows `where` (auto's
/// caller overwrites it with the measured share).
pub(crate) fn row(
    w: Workload,
    condition: String,
    r#where: Where,
    len: u64,
    lat_us: &mut [f64],
    out_bytes: usize,
) -> BenchRow {
    lat_us.sort_unstable_by(f64::total_cmp);
    let pct = |p: f64| storefn_stats::percentile(lat_us, p).unwrap_or(0.0);
    #[allow(clippy::cast_precision_loss)]
    let mean = lat_us.iter().sum::<f64>() / lat_us.len().max(1) as f64;
    BenchRow {
        workload: w,
        condition,
        r#where,
        requests: u32::try_from(lat_us.len()).unwrap_or(u32::MAX),
        request_bytes: len,
        us_per_request: mean,
        p50_us: pct(0.5),
        p99_us: pct(0.99),
        out_bytes,
        cache_probe_us: 0.0,
        server_share: if r#where == Where::Server { 1.0 } else { 0.0 },
        dispatch: None,
        round_us: Vec::new(),
        half_us: [mean; 2],
    }
}

/// Reads the whole file once so the page cache holds it.
pub(crate) fn warm(file: &mut LocalFile) -> Result<(), LambdaError> {
    let size = file.size_bytes();
    let mut at = 0;
    while at < size {
        let n = MAX_RANGE_BYTES.min(size - at);
        file.read_range(at, n)?;
        at += n;
    }
    Ok(())
}

pub(crate) fn storefn_progs_elf(w: Workload) -> &'static [u8] {
    storefn_progs::must(w.prog_name())
}
