//! What the dispatcher itself costs per request (`storefn lambda overhead`): [`Dispatcher::run`]
//! against sides that do no work, so whatever auto adds over calling the winning side directly
//! is the dispatcher's: deciding, recording, its clock reads and its cache-state samples. The
//! local side's cache probe is the real one (`cachestat(2)`, or `mincore`) on a real file.

use std::fs::File;
use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

use crate::cache;
use crate::dispatch::{DispatchConfig, Dispatcher, Run, Side, SideKind};
use crate::error::LambdaError;

/// A side that does no work and reports a fixed cost; the local one asks the page cache
/// about its file like [`crate::LocalSide`] does.
#[derive(Debug)]
struct NullSide<'a> {
    kind: SideKind,
    file: Option<&'a File>,
    wall_ns: u64,
}

impl Side for NullSide<'_> {
    fn kind(&self) -> SideKind {
        self.kind
    }

    fn run(&mut self, _off: u64, _len: u64, _out: &mut [u8]) -> Result<Run, LambdaError> {
        let io_ns = if self.kind == SideKind::Local { self.wall_ns / 2 } else { 0 };
        let compute_ns = if self.kind == SideKind::Local { self.wall_ns - io_ns } else { 0 };
        Ok(Run { out_bytes: 0, wall_ns: self.wall_ns, io_ns, compute_ns })
    }

    fn uncached_fraction(&mut self, off: u64, len: u64) -> Option<f64> {
        self.file.and_then(|f| cache::uncached_fraction(f, off, len).ok()).map(|(u, _)| u)
    }
}

/// Per-request costs, ns (medians of `rounds`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DispatchOverhead {
    /// `Dispatcher::run` minus calling the winning side directly.
    pub auto_extra_ns: f64,
    /// `decide` + `record` alone, the cache state given.
    pub decide_record_ns: f64,
    /// One cache-state probe of the file's range (what sampling before every request cost).
    pub cache_probe_ns: f64,
    /// Cache-state samples per request in the auto loop.
    pub samples_per_request: f64,
    /// The dispatcher's own view of its cost (fraction of the requests' time).
    pub own_fraction: f64,
}

/// Median of the rounds (`rounds` >= 1 is checked before any round runs).
fn median(v: &mut [f64]) -> f64 {
    storefn_stats::median(v).unwrap_or(0.0)
}

/// Runs `rounds` rounds of `requests` requests of `len` bytes over `path` (must hold `len`
/// bytes) with a local side that reports `local_ns` per request and a server 100x slower, so
/// auto's answer never changes; alternates the loops inside each round.
///
/// # Errors
/// [`LambdaError::Io`] opening the file.
#[allow(clippy::cast_precision_loss)]
pub fn measure(
    path: &Path,
    len: u64,
    local_ns: u64,
    requests: u32,
    rounds: u32,
) -> Result<DispatchOverhead, LambdaError> {
    let file = File::open(path).map_err(|source| LambdaError::Io {
        path: path.to_path_buf(),
        what: "open",
        source,
    })?;
    let mut local = NullSide { kind: SideKind::Local, file: Some(&file), wall_ns: local_ns };
    let mut server = NullSide { kind: SideKind::Server, file: None, wall_ns: local_ns * 100 };
    let mut out = [0u8; 8];
    let n = f64::from(requests.max(1));
    let (mut extra, mut dr, mut probe, mut spr, mut own) = (vec![], vec![], vec![], vec![], 0.0);
    for _ in 0..rounds.max(1) {
        let t = Instant::now();
        for _ in 0..requests {
            black_box(local.run(0, len, &mut out)?);
        }
        let direct = t.elapsed().as_nanos() as f64 / n;
        let mut d = Dispatcher::new(DispatchConfig::default());
        let t = Instant::now();
        for _ in 0..requests {
            black_box(d.run(&mut local, &mut server, 0, len, &mut out)?);
        }
        extra.push(t.elapsed().as_nanos() as f64 / n - direct);
        spr.push(d.stats().cache_samples as f64 / n);
        own = d.overhead_fraction();
        let runs = [local.run(0, len, &mut out)?, server.run(0, len, &mut out)?];
        let t = Instant::now();
        for _ in 0..requests {
            let dec = d.decide(len, 0.0);
            let run = &runs[usize::from(dec.side == SideKind::Server)];
            d.record(dec, len, 0.0, black_box(run));
        }
        dr.push(t.elapsed().as_nanos() as f64 / n);
        let t = Instant::now();
        for _ in 0..requests {
            black_box(local.uncached_fraction(0, len));
        }
        probe.push(t.elapsed().as_nanos() as f64 / n);
    }
    Ok(DispatchOverhead {
        auto_extra_ns: median(&mut extra),
        decide_record_ns: median(&mut dr),
        cache_probe_ns: median(&mut probe),
        samples_per_request: median(&mut spr),
        own_fraction: own,
    })
}
