//! `storefn pageserver bench`: GetPage load against a page server with DDS offload.
//!
//! Each client thread sends one GetPage at a time (so a request's latency is its own round
//! trip, not its batch's). A request is made offloadable or not by the LSN it asks: the last
//! LSN this client saw for the page (the cached version satisfies it) or one past it (only the
//! host can answer, after replaying the page) — `host_share` of requests are the latter. The
//! table may have lost a page to a concurrent replay, so the share actually offloaded is
//! measured, not assumed. Every answer is checked: a page older than asked is a stale page.

use std::time::Instant;

use rand::{Rng, SeedableRng};
use serde::Serialize;
use storefn_wire::SERVED_BY_OFFLOAD;
use storefn_wire::{Client, ClientConfig, ClientError, Request};

use super::{get_page, page_lsn, HostStats, PAGE_BYTES, STATS_PAGE};

/// How to load.
#[derive(Debug, Clone)]
pub struct PageBenchConfig {
    /// Server address (loopback for `--spawn`).
    pub addr: String,
    /// Measured GetPages (over all threads).
    pub requests: u64,
    /// Unmeasured GetPages first (per thread).
    pub warmup: u64,
    /// Client threads, each one connection with one request outstanding.
    pub clients: usize,
    /// Server threads (`--spawn` starts the server with them; `--remote`: recorded).
    pub threads: usize,
    /// How the clients authenticate (`--spawn` sets the spawned server's).
    pub client: ClientConfig,
    /// Share of requests that ask a version newer than the cached one (only the host can
    /// answer them): 0.1 for a 90% offloadable mix.
    pub host_share: f64,
    pub seed: u64,
    /// Recorded in the report (what the server was started with).
    pub offload: bool,
}

/// The report (`--json` keys).
#[derive(Debug, Clone, Serialize)]
pub struct PageBenchReport {
    pub offload: bool,
    pub requests: u64,
    pub offloaded_share: f64,
    /// Host-application CPU (answering forwarded requests) per GetPage, µs.
    pub host_cpu_us_per_op: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub stale_pages: u64,
    pub offloaded_p50_us: Option<f64>,
    pub offloaded_p99_us: Option<f64>,
    pub forwarded_p50_us: Option<f64>,
    pub forwarded_p99_us: Option<f64>,
    /// Time split of a forwarded request: host CPU per forwarded answer (its replay and its
    /// read through the host library, i.e. ring to the file service + device), µs; the rest of
    /// the forwarded latency is network, server and forwarding ring.
    pub host_us_per_forwarded: Option<f64>,
    /// Time split (µs, p50 and p99 of each part; `--spawn` only, where the front end is in
    /// this process; warm-up included). Offloaded: the read next to the data (device); its
    /// ring and host parts are zero by construction.
    pub offloaded_device_p50_us: Option<f64>,
    pub offloaded_device_p99_us: Option<f64>,
    /// Forwarded: forwarding rings both ways and the host's wake-up (server round trip minus
    /// the host's wall time).
    pub forwarded_ring_p50_us: Option<f64>,
    pub forwarded_ring_p99_us: Option<f64>,
    /// Forwarded: the host application's wall time minus its device time.
    pub forwarded_host_p50_us: Option<f64>,
    pub forwarded_host_p99_us: Option<f64>,
    /// Forwarded: the file service's system calls for the request (device).
    pub forwarded_device_p50_us: Option<f64>,
    pub forwarded_device_p99_us: Option<f64>,
    /// Batches whose offload functions faulted or returned a bad output (forwarded whole) and
    /// the last such error (`--spawn` only). 0 expected with the built-in page-server program.
    pub function_faults: Option<u64>,
    pub last_fault: Option<String>,
    /// Offloaded reads that overlapped a host write (or open/close) and were forwarded
    /// instead of served (`--spawn` only; whole run including warm-up).
    pub raced_reads: Option<u64>,
    pub ops_per_sec: f64,
    /// Server threads.
    pub threads: usize,
    /// Client threads (one connection each).
    pub clients: usize,
    pub host_share: f64,
    pub seed: u64,
}

use storefn_stats::percentile_us as percentile;

/// The host's counters, through a forwarded GetPage of [`STATS_PAGE`].
///
/// # Errors
/// Connection errors; `Status` when the answer is not a stats record.
pub fn host_stats(c: &mut Client) -> Result<HostStats, ClientError> {
    let r = c.one(&Request::Offload { msg: &get_page(STATS_PAGE, 0) })?;
    HostStats::decode(&r.data).ok_or_else(|| ClientError::Status {
        op: "OFFLOAD",
        status: 0,
        name: "OK",
        message: format!("host stats: {} bytes", r.data.len()),
    })
}

struct Sample {
    ns: u64,
    offloaded: bool,
    stale: bool,
}

/// Fills the report's time split from the front end's samples.
pub fn add_time_split(r: &mut PageBenchReport, mut t: crate::frontend::TimingSamples) {
    let p = |v: &mut Vec<u64>| {
        v.sort_unstable();
        (percentile(v, 0.5), percentile(v, 0.99))
    };
    (r.offloaded_device_p50_us, r.offloaded_device_p99_us) = p(&mut t.offloaded_device_ns);
    (r.forwarded_ring_p50_us, r.forwarded_ring_p99_us) = p(&mut t.forwarded_ring_ns);
    (r.forwarded_host_p50_us, r.forwarded_host_p99_us) = p(&mut t.forwarded_host_ns);
    (r.forwarded_device_p50_us, r.forwarded_device_p99_us) = p(&mut t.forwarded_device_ns);
}

/// Runs the load and returns the report.
///
/// # Errors
/// Connection and protocol errors; a non-OK answer.
pub fn run(cfg: &PageBenchConfig) -> Result<PageBenchReport, ClientError> {
    let mut c0 = Client::connect(&cfg.addr, cfg.client.clone())?;
    let before = host_stats(&mut c0)?;
    let pages = before.pages.max(1);
    let threads = cfg.clients.max(1);
    let per = cfg.requests.div_ceil(threads as u64);
    let t0 = Instant::now();
    let results: Vec<Result<Vec<Sample>, ClientError>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || -> Result<Vec<Sample>, ClientError> {
                    let mut c = Client::connect(&cfg.addr, cfg.client.clone())?;
                    let mut rng = rand::rngs::StdRng::seed_from_u64(cfg.seed ^ (t as u64) << 32);
                    let mut seen = vec![0u64; usize::try_from(pages).unwrap_or(0)];
                    let mut out = Vec::with_capacity(usize::try_from(per).unwrap_or(0));
                    for i in 0..cfg.warmup + per {
                        let p = rng.gen_range(0..pages);
                        let known = seen[p as usize];
                        let lsn = if rng.gen_bool(cfg.host_share) { known + 1 } else { known };
                        let start = Instant::now();
                        let r = c.one(&Request::Offload { msg: &get_page(p, lsn) })?;
                        let ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
                        let got = page_lsn(&r.data).unwrap_or(0);
                        let id_ok = r.data.len() == PAGE_BYTES && r.data[8..16] == p.to_le_bytes();
                        seen[p as usize] = seen[p as usize].max(got);
                        if i >= cfg.warmup {
                            out.push(Sample {
                                ns,
                                offloaded: r.value == u64::from(SERVED_BY_OFFLOAD),
                                stale: got < lsn || !id_ok,
                            });
                        }
                    }
                    Ok(out)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("bench thread panicked")).collect()
    });
    let secs = t0.elapsed().as_secs_f64();
    let after = host_stats(&mut c0)?;
    let mut all = Vec::new();
    for r in results {
        all.extend(r?);
    }
    let n = all.len() as u64;
    let stale = all.iter().filter(|s| s.stale).count() as u64;
    let mut lat: Vec<u64> = all.iter().map(|s| s.ns).collect();
    let mut off: Vec<u64> = all.iter().filter(|s| s.offloaded).map(|s| s.ns).collect();
    let mut fwd: Vec<u64> = all.iter().filter(|s| !s.offloaded).map(|s| s.ns).collect();
    lat.sort_unstable();
    off.sort_unstable();
    fwd.sort_unstable();
    // The host's CPU delta covers the warm-up too: divide by every GetPage sent.
    let sent = n + cfg.warmup * threads as u64;
    let cpu_us = after.busy_cpu_ns.saturating_sub(before.busy_cpu_ns) as f64 / 1000.0;
    let answered = after.answered.saturating_sub(before.answered);
    Ok(PageBenchReport {
        offload: cfg.offload,
        requests: n,
        offloaded_share: off.len() as f64 / n.max(1) as f64,
        host_cpu_us_per_op: cpu_us / sent.max(1) as f64,
        p50_us: percentile(&lat, 0.5).unwrap_or(0.0),
        p99_us: percentile(&lat, 0.99).unwrap_or(0.0),
        p999_us: percentile(&lat, 0.999).unwrap_or(0.0),
        stale_pages: stale,
        offloaded_p50_us: percentile(&off, 0.5),
        offloaded_p99_us: percentile(&off, 0.99),
        forwarded_p50_us: percentile(&fwd, 0.5),
        forwarded_p99_us: percentile(&fwd, 0.99),
        host_us_per_forwarded: (answered > 0).then(|| cpu_us / answered as f64),
        offloaded_device_p50_us: None,
        offloaded_device_p99_us: None,
        forwarded_ring_p50_us: None,
        forwarded_ring_p99_us: None,
        forwarded_host_p50_us: None,
        forwarded_host_p99_us: None,
        forwarded_device_p50_us: None,
        forwarded_device_p99_us: None,
        function_faults: None,
        last_fault: None,
        raced_reads: None,
        ops_per_sec: n as f64 / secs,
        threads: cfg.threads,
        clients: threads,
        host_share: cfg.host_share,
        seed: cfg.seed,
    })
}
