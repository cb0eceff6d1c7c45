//! The fairness measurement: one tenant keeps long chains in flight while another does point
//! reads; the point tenant's latency shows what the server's per-tenant queues buy.

use std::time::Instant;

use storefn_wire::{Client, ClientConfig, ClientError, Request, PROG_TYPE_XRP};

/// Nearest-rank percentile of ascending ns samples in µs, 0 for none (storefn-stats).
fn percentile(sorted: &[u64], p: f64) -> f64 {
    storefn_stats::percentile_us(sorted, p).unwrap_or(0.0)
}

/// The fairness measurement: tenant `long` keeps `long_conns` connections each with
/// `long_depth` 64-hop chains in flight; tenant `point` does single reads one at a time.
#[derive(Debug, Clone)]
pub struct FairnessConfig {
    pub addr: String,
    pub long_conns: usize,
    pub long_depth: usize,
    /// A file of linked 512 B blocks for `xrp_follow` (each block: next offset, payload).
    pub chain_file: String,
    /// Any file of at least `point_blocks` x 512 bytes.
    pub point_file: String,
    pub point_blocks: u64,
    pub duration: std::time::Duration,
    /// Time the long tenant gets to fill the server before point reads start.
    pub ramp: std::time::Duration,
}

/// What the point tenant saw while the long tenant ran.
#[derive(Debug, Clone, Default)]
pub struct FairnessResult {
    pub point_ops: u64,
    pub point_p50_us: f64,
    pub point_p99_us: f64,
    pub long_chains: u64,
    pub long_hops: u64,
}

/// Writes `blocks` linked 512 B blocks for `xrp_follow` (block i points at i + 1; the last
/// ends the chain).
///
/// # Errors
/// I/O errors.
pub fn write_chain_file(path: &std::path::Path, blocks: u64) -> std::io::Result<()> {
    let mut v = vec![0u8; usize::try_from(blocks * 512).expect("small")];
    for i in 0..blocks {
        let next = if i + 1 < blocks { (i + 1) * 512 } else { 0 };
        let at = usize::try_from(i * 512).expect("small");
        v[at..at + 8].copy_from_slice(&next.to_le_bytes());
        v[at + 8..at + 16].copy_from_slice(&1u64.to_le_bytes());
    }
    std::fs::write(path, v)
}

/// Runs the fairness measurement against a server.
///
/// # Errors
/// Connection errors; a chain or read that fails.
pub fn fairness(cfg: &FairnessConfig) -> Result<FairnessResult, ClientError> {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let stop = AtomicBool::new(false);
    let (chains, hops) = (AtomicU64::new(0), AtomicU64::new(0));
    let tenant = |t: &str| ClientConfig { tenant: t.into(), ..ClientConfig::default() };
    std::thread::scope(|s| {
        let mut hs = Vec::new();
        for _ in 0..cfg.long_conns {
            hs.push(s.spawn(|| -> Result<(), ClientError> {
                let mut c = Client::connect(&cfg.addr, tenant("long"))?;
                let h = c.load_prog(PROG_TYPE_XRP, b"", storefn_progs::must("xrp_follow"))?;
                let req = Request::Xrp {
                    path: cfg.chain_file.as_bytes(),
                    offset: 0,
                    len: 512,
                    hash: &h,
                    scratch: &[],
                    out_len: 16,
                };
                let reqs = vec![req; cfg.long_depth];
                // Bounded by `stop`, which the point thread sets after `duration`.
                while !stop.load(Ordering::Relaxed) {
                    for r in c.call(&reqs)? {
                        let r = r.ok("XRP")?;
                        // Relaxed: counters read after the threads are joined.
                        chains.fetch_add(1, Ordering::Relaxed);
                        hops.fetch_add(u64::from(r.hops), Ordering::Relaxed);
                    }
                }
                Ok(())
            }));
        }
        let point = s.spawn(|| -> Result<Vec<u64>, ClientError> {
            let mut c = Client::connect(&cfg.addr, tenant("point"));
            std::thread::sleep(cfg.ramp);
            let mut lat = Vec::new();
            let t0 = Instant::now();
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            while t0.elapsed() < cfg.duration {
                let Ok(cl) = c.as_mut() else { break };
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let off = (x % cfg.point_blocks) * 512;
                let t = Instant::now();
                cl.one(&Request::Read { path: cfg.point_file.as_bytes(), offset: off, len: 512 })?;
                lat.push(u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX));
            }
            stop.store(true, Ordering::Relaxed);
            c.map(|_| lat)
        });
        let lat = point.join().expect("point thread");
        stop.store(true, Ordering::Relaxed);
        for h in hs {
            h.join().expect("long thread")?;
        }
        let mut lat = lat?;
        lat.sort_unstable();
        Ok(FairnessResult {
            point_ops: lat.len() as u64,
            point_p50_us: percentile(&lat, 0.5),
            point_p99_us: percentile(&lat, 0.99),
            long_chains: chains.load(Ordering::Relaxed),
            long_hops: hops.load(Ordering::Relaxed),
        })
    })
}
