//! A checked lookup load over a collection: threads, each with its own [`ClusterClient`],
//! look random keys up in batches and check every answer against BPF-KV's value for the key
//! (`sprintf("%63lu", key)`). Used by `kv bench --cluster`, the failover tests and the bench.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use storefn_kv::bpfkv_value;
use storefn_kv::RemotePath;

use crate::client::ClusterClient;
use crate::copy::Creds;
use crate::create::keyspace;
use crate::ClusterError;

/// What a load runs.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    pub endpoints: String,
    pub collection: String,
    pub threads: usize,
    /// Lookups per thread; `None` = until `stop` is set (bounded by `max_time`).
    pub requests: Option<u64>,
    pub batch: usize,
    pub path: RemotePath,
    pub seed: u64,
    /// A hard bound on the run's length.
    pub max_time: Duration,
    /// Who the clients are to servers started with a token file.
    pub creds: Creds,
}

/// One batch's outcome, in time order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSample {
    /// Nanoseconds from the load's start to the batch's send.
    pub at_ns: u64,
    /// Nanoseconds the batch took (retries included).
    pub lat_ns: u64,
    pub keys: u32,
    pub ok: bool,
}

/// What a load saw.
#[derive(Debug, Clone, Default)]
pub struct LoadReport {
    pub lookups: u64,
    /// Answers that were not the key's value (or not found): must be 0.
    pub wrong: u64,
    /// Batches that failed after the whole retry budget.
    pub failed: u64,
    pub retries: u64,
    pub refusals: u64,
    pub elapsed: Duration,
    pub samples: Vec<BatchSample>,
    /// The first failures' messages.
    pub errors: Vec<String>,
}

impl LoadReport {
    /// Lookups per second.
    #[must_use]
    pub fn throughput(&self) -> f64 {
        self.lookups as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The `q` quantile (0..=1) of batch latency, microseconds.
    #[must_use]
    pub fn latency_us(&self, q: f64) -> f64 {
        let mut v: Vec<u64> = self.samples.iter().map(|s| s.lat_ns).collect();
        if v.is_empty() {
            return 0.0;
        }
        v.sort_unstable();
        let i = ((v.len() - 1) as f64 * q).round() as usize;
        v[i] as f64 / 1e3
    }
}

/// xorshift64*: a seeded key stream with no allocation.
fn next(s: &mut u64) -> u64 {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    s.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

/// Runs `spec` until every thread did its requests, `stop` is set, or `max_time` passed.
///
/// # Errors
/// A thread's client could not connect (etcd, collection).
pub fn run_load(spec: &LoadSpec, stop: &AtomicBool) -> Result<LoadReport, ClusterError> {
    let mut clients = Vec::new();
    let mut keys = 0;
    for _ in 0..spec.threads.max(1) {
        let c = ClusterClient::connect_as(&spec.endpoints, &spec.collection, spec.creds.clone())?;
        keys = keyspace(c.placement().collection.layers)?;
        clients.push(c);
    }
    let out = Arc::new(Mutex::new(LoadReport::default()));
    let t0 = Instant::now();
    std::thread::scope(|sc| {
        for (t, mut c) in clients.into_iter().enumerate() {
            let out = Arc::clone(&out);
            sc.spawn(move || {
                let r = one_thread(spec, &mut c, keys, t as u64, t0, stop);
                let mut o = out.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                o.lookups += r.lookups;
                o.wrong += r.wrong;
                o.failed += r.failed;
                o.retries += c.stats().retries;
                o.refusals += c.stats().refusals;
                o.samples.extend(r.samples);
                o.errors.extend(r.errors.into_iter().take(8));
            });
        }
    });
    let mut r = std::mem::take(&mut *out.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    r.elapsed = t0.elapsed();
    r.samples.sort_by_key(|s| s.at_ns);
    Ok(r)
}

fn one_thread(
    spec: &LoadSpec,
    c: &mut ClusterClient,
    keys: u64,
    t: u64,
    t0: Instant,
    stop: &AtomicBool,
) -> LoadReport {
    let mut r = LoadReport::default();
    let mut seed = spec.seed ^ (t + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let batch = spec.batch.max(1);
    let mut ks = vec![0u64; batch];
    while spec.requests.is_none_or(|n| r.lookups < n)
        && !stop.load(Ordering::Relaxed)
        && t0.elapsed() < spec.max_time
    {
        for k in &mut ks {
            *k = next(&mut seed) % keys;
        }
        let at = t0.elapsed();
        let res = c.get_many(&ks, spec.path);
        let lat = t0.elapsed() - at;
        let ok = res.is_ok();
        match res {
            Ok(vals) => {
                for (k, v) in ks.iter().zip(&vals) {
                    if v.as_ref() != Some(&bpfkv_value(*k)) {
                        r.wrong += 1;
                    }
                }
            }
            Err(e) => {
                r.failed += 1;
                if r.errors.len() < 8 {
                    r.errors.push(e.to_string());
                }
            }
        }
        r.lookups += batch as u64;
        r.samples.push(BatchSample {
            at_ns: u64::try_from(at.as_nanos()).unwrap_or(u64::MAX),
            lat_ns: u64::try_from(lat.as_nanos()).unwrap_or(u64::MAX),
            keys: batch as u32,
            ok,
        });
    }
    r
}
