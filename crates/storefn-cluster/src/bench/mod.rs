//! The cluster's benchmark (feature `bench`, `storefn cluster bench`): aggregate pushdown
//! throughput of a collection spread over 1, 2, 3 ... servers, and lookup latency across a
//! kill -9 of one server.
//!
//! Honest bottleneck: every server is a `storefn serve` child process held to its own CPU
//! quota by its own cgroup v1 `cpu` group (`cpu.cfs_quota_us`), removed after; the client's
//! own CPU use is measured beside the throughput, so a reader sees it was not the limit.
//! Each server count runs its own etcd and servers, all started before the first round, and
//! the rounds alternate the order of the counts (forward, then backward); a count's figure is
//! the median of its rounds. Everything started is stopped and its directory removed, also
//! when a step fails.

mod procs;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use storefn_kv::RemotePath;

use crate::{create, run_load, ClusterError, CreateSpec, LoadReport, LoadSpec};
use procs::{cpu_secs_of, self_cpu_secs, CpuGroup, EtcdChild, ServerChild, TempDir};

/// What the bench runs.
#[derive(Debug, Clone)]
pub struct BenchSpec {
    /// The `storefn` binary whose `serve` runs each server.
    pub exe: PathBuf,
    /// Server counts to measure, e.g. [1, 2, 3].
    pub servers: Vec<usize>,
    pub threads: usize,
    pub batch: usize,
    pub seed: u64,
    pub layers: u32,
    pub shards: u32,
    pub warmup: Duration,
    pub run: Duration,
    pub rounds: usize,
    /// Each server's CPU: `quota_us` per `period_us` (cgroup v1 `cpu`).
    pub quota_us: u64,
    pub period_us: u64,
    /// Also measure lookups across a kill -9 (3 servers, R = 2).
    pub failover: bool,
}

/// One server count's figures.
#[derive(Debug, Clone, Serialize)]
pub struct ScalePoint {
    pub servers: usize,
    /// Lookups per second: the median of the rounds.
    pub throughput: f64,
    pub rounds: Vec<f64>,
    /// Batch latency of the median round, microseconds.
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    /// The client process's CPU use during the median round, in cores.
    pub client_cpu_cores: f64,
    /// Each server's CPU use during the median round, in cores (its quota is the cap).
    pub server_cpu_cores: Vec<f64>,
}

/// Lookups across a kill -9 of one of 3 servers.
#[derive(Debug, Clone, Serialize)]
pub struct Failover {
    pub killed_at_us: u64,
    pub lookups: u64,
    pub wrong: u64,
    /// Batches that failed after the retry budget: lookups lost.
    pub failed_batches: u64,
    pub retries: u64,
    pub refusals: u64,
    /// Batches sent from 1 s before the kill to 5 s after it.
    pub window_p50_us: f64,
    pub window_p99_us: f64,
    pub window_max_us: f64,
    /// (µs since the load's start, batch latency µs) of every batch.
    pub timeline_us: Vec<[u64; 2]>,
}

/// The bench's result.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub bench: &'static str,
    pub path: &'static str,
    pub batch: usize,
    pub threads: usize,
    pub seed: u64,
    pub layers: u32,
    pub shards: u32,
    pub quota_us: u64,
    pub period_us: u64,
    pub cpus_online: usize,
    pub loadavg_before: String,
    pub loadavg_after: String,
    pub scaling: Vec<ScalePoint>,
    /// The last count's throughput over the first's.
    pub ratio_last_to_first: f64,
    pub failover: Option<Failover>,
    /// The lease TTL, seconds: the failover goal is p99 <= TTL + one RTT.
    pub lease_ttl_secs: i64,
}

/// One server count's rig: its etcd and servers (each in its cpu group).
struct Rig {
    n: usize,
    servers: Vec<ServerChild>,
    groups: Vec<CpuGroup>,
    etcd: EtcdChild,
    _work: TempDir,
}

fn rig(spec: &BenchSpec, n: usize, tag: &str, replicas: u32) -> Result<Rig, ClusterError> {
    let etcd = EtcdChild::start(tag)?;
    let mut servers = Vec::with_capacity(n);
    let mut groups = Vec::with_capacity(n);
    for i in 1..=n {
        let s = ServerChild::start(&spec.exe, &format!("{tag}n{i}"), &etcd.endpoint)?;
        groups.push(CpuGroup::new(&s.node, s.pid(), spec.quota_us, spec.period_us)?);
        servers.push(s);
    }
    let work = TempDir::new(&format!("{tag}-work"))?;
    let cs = CreateSpec {
        collection: "bench".into(),
        layers: spec.layers,
        shards: spec.shards,
        replicas,
    };
    create(&etcd.client()?, &cs, &work.0)?;
    Ok(Rig { n, servers, groups, etcd, _work: work })
}

fn load_spec(spec: &BenchSpec, endpoint: &str, threads: usize, max: Duration) -> LoadSpec {
    LoadSpec {
        endpoints: endpoint.to_string(),
        collection: "bench".into(),
        threads,
        requests: None,
        batch: spec.batch,
        path: RemotePath::Pushdown,
        seed: spec.seed,
        max_time: max,
        creds: crate::Creds::default(),
    }
}

/// One measured round on `r`: the load, the client's and each server's CPU use in cores.
fn round(spec: &BenchSpec, r: &Rig) -> Result<(LoadReport, f64, Vec<f64>), ClusterError> {
    let s0: Vec<f64> = r.servers.iter().map(|s| cpu_secs_of(s.pid())).collect();
    let (c0, t0) = (self_cpu_secs(), Instant::now());
    let rep = run_load(
        &load_spec(spec, &r.etcd.endpoint, spec.threads, spec.run),
        &AtomicBool::new(false),
    )?;
    let wall = t0.elapsed().as_secs_f64();
    let client = (self_cpu_secs() - c0) / wall;
    let servers =
        r.servers.iter().zip(s0).map(|(s, a)| (cpu_secs_of(s.pid()) - a) / wall).collect();
    if rep.wrong > 0 || rep.failed > 0 {
        return Err(ClusterError::Invalid(format!(
            "{} servers: {} wrong answers, {} failed batches: {:?}",
            r.n, rep.wrong, rep.failed, rep.errors
        )));
    }
    Ok((rep, client, servers))
}

/// Throughput at each server count: rounds alternate the counts' order.
fn scaling(spec: &BenchSpec) -> Result<Vec<ScalePoint>, ClusterError> {
    let rigs: Vec<Rig> = spec
        .servers
        .iter()
        .map(|&n| rig(spec, n, &format!("s{n}"), 1))
        .collect::<Result<_, _>>()?;
    for r in &rigs {
        let ls = load_spec(spec, &r.etcd.endpoint, spec.threads, spec.warmup);
        run_load(&ls, &AtomicBool::new(false))?;
    }
    let mut got: Vec<Vec<(LoadReport, f64, Vec<f64>)>> = rigs.iter().map(|_| Vec::new()).collect();
    for k in 0..spec.rounds.max(1) {
        let order: Vec<usize> =
            if k % 2 == 0 { (0..rigs.len()).collect() } else { (0..rigs.len()).rev().collect() };
        for i in order {
            got[i].push(round(spec, &rigs[i])?);
        }
    }
    Ok(rigs.iter().zip(got).map(|(r, mut rs)| point(r.n, &mut rs)).collect())
}

fn point(n: usize, rs: &mut [(LoadReport, f64, Vec<f64>)]) -> ScalePoint {
    let rounds: Vec<f64> = rs.iter().map(|r| r.0.throughput()).collect();
    rs.sort_by(|a, b| a.0.throughput().total_cmp(&b.0.throughput()));
    let (rep, client, servers) = &rs[rs.len() / 2];
    ScalePoint {
        servers: n,
        throughput: rep.throughput(),
        rounds,
        p50_us: rep.latency_us(0.5),
        p99_us: rep.latency_us(0.99),
        p999_us: rep.latency_us(0.999),
        client_cpu_cores: *client,
        server_cpu_cores: servers.clone(),
    }
}

/// Lookups across a kill -9 of one of 3 servers (R = 2): 3 s before, 6 s after.
fn failover(spec: &BenchSpec) -> Result<Failover, ClusterError> {
    let mut r = rig(spec, 3, "fo", 2)?;
    let stop = AtomicBool::new(false);
    let ls = load_spec(spec, &r.etcd.endpoint, spec.threads.min(4), Duration::from_secs(30));
    let mut killed_at = Duration::ZERO;
    let rep = std::thread::scope(|sc| {
        let t0 = Instant::now();
        let h = sc.spawn(|| run_load(&ls, &stop));
        std::thread::sleep(Duration::from_secs(3));
        r.servers[0].kill9();
        killed_at = t0.elapsed();
        std::thread::sleep(Duration::from_secs(6));
        stop.store(true, Ordering::Relaxed);
        h.join().expect("the load thread does not panic")
    })?;
    drop(r.groups);
    let k = u64::try_from(killed_at.as_nanos()).unwrap_or(u64::MAX);
    let mut w: Vec<u64> = rep
        .samples
        .iter()
        .filter(|s| s.at_ns + 1_000_000_000 >= k && s.at_ns <= k + 5_000_000_000)
        .map(|s| s.lat_ns)
        .collect();
    w.sort_unstable();
    let q = |p: f64| {
        w.get(((w.len().max(1) - 1) as f64 * p).round() as usize).map_or(0.0, |&v| v as f64 / 1e3)
    };
    Ok(Failover {
        killed_at_us: k / 1000,
        lookups: rep.lookups,
        wrong: rep.wrong,
        failed_batches: rep.failed,
        retries: rep.retries,
        refusals: rep.refusals,
        window_p50_us: q(0.5),
        window_p99_us: q(0.99),
        window_max_us: q(1.0),
        timeline_us: rep.samples.iter().map(|s| [s.at_ns / 1000, s.lat_ns / 1000]).collect(),
    })
}

/// Runs the bench.
///
/// # Errors
/// No cgroup v1 cpu controller, etcd or a server that does not start, a wrong answer or a
/// lost lookup in a scaling round, etcd errors.
pub fn run(spec: &BenchSpec) -> Result<BenchReport, ClusterError> {
    if spec.servers.is_empty() {
        return Err(ClusterError::Invalid("--servers: at least one count".into()));
    }
    procs::check_cgroup()?;
    let loadavg_before = procs::loadavg();
    let scaling = scaling(spec)?;
    let failover = if spec.failover { Some(failover(spec)?) } else { None };
    let first = scaling[0].throughput.max(1e-9);
    Ok(BenchReport {
        bench: "cluster",
        path: "pushdown",
        batch: spec.batch,
        threads: spec.threads,
        seed: spec.seed,
        layers: spec.layers,
        shards: spec.shards,
        quota_us: spec.quota_us,
        period_us: spec.period_us,
        cpus_online: std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
        loadavg_before,
        loadavg_after: procs::loadavg(),
        ratio_last_to_first: scaling[scaling.len() - 1].throughput / first,
        scaling,
        failover,
        lease_ttl_secs: crate::limits::LEASE_TTL_SECS,
    })
}
