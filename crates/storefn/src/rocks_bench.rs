//! `storefn rocks bench`: db_bench's readrandom over keys sampled from a file, on one or more
//! paths (and, remote, through a delay proxy at several round-trip times and client cache
//! sizes), rounds interleaved so every configuration sees the same machine; the median round's
//! Gets/s and the latency tail of every Get, as db_bench-like lines or JSON.

use std::io::BufRead;
use std::net::ToSocketAddrs;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Args, ValueEnum};
use storefn_netdelay::DelayProxy;
use storefn_rocksdb::Lookup;

use crate::rocks::{open_remote, Getter, RocksPath, Where};
use crate::CmdResult;

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub at: Where,
    /// Keys to sample from, one per line (the database's keys; absent ones are fine too).
    #[arg(long)]
    keys_file: PathBuf,
    /// Gets per round and configuration.
    #[arg(long, default_value_t = 20_000)]
    reads: usize,
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Keys per multi-get call on xrp-batch.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Paths to compare in one run (default: --path).
    #[arg(long, value_delimiter = ',', value_enum)]
    paths: Vec<RocksPath>,
    /// Remote: round-trip times to add with a delay proxy in front of --remote, µs each.
    #[arg(long, value_delimiter = ',', requires = "remote")]
    rtt_us: Vec<u64>,
    /// Remote: client cache fractions to run (default: --cache-fraction).
    #[arg(long, value_delimiter = ',', requires = "remote")]
    cache: Vec<f64>,
    /// Run the whole bench (every path) in a cgroup v1 memory group of this many bytes (it
    /// counts the page cache; the database's cached pages are dropped first); RocksDB's block
    /// cache (native paths) gets storefn-ycsb's share of it unless --native-cache-bytes is given.
    #[arg(long)]
    memory_limit: Option<u64>,
    #[arg(long)]
    json: bool,
}

struct Config {
    path: RocksPath,
    rtt_us: Option<u64>,
    cache: f64,
    getter: Getter,
    rounds_gets_per_s: Vec<f64>,
    lat_ns: Vec<u64>,
    found: u64,
    gets: u64,
    rt0: u64,
    cpu_ns: u64,
}

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

fn round_trips(g: &Getter) -> u64 {
    match g {
        Getter::Remote(r) => r.round_trips(),
        _ => 0,
    }
}

/// CPU time this thread has used (user + system), ns: the thread's CPU clock, exact where
/// getrusage counts in scheduler ticks.
fn cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn run_round(
    c: &mut Config,
    keys: &[Vec<u8>],
    reads: usize,
    batch: usize,
    seed: &mut u64,
) -> CmdResult {
    let mut out = Vec::new();
    let t0 = Instant::now();
    let cpu0 = cpu_ns();
    if matches!(
        (c.path, &c.getter),
        (RocksPath::XrpBatch, Getter::Xrp(..)) | (RocksPath::NativeMultiget, Getter::Native(..))
    ) {
        let mut done = 0;
        while done < reads {
            let n = batch.min(reads - done);
            let ks: Vec<&[u8]> =
                (0..n).map(|_| keys[xorshift(seed) as usize % keys.len()].as_slice()).collect();
            let s = Instant::now();
            c.getter.multi_get(&ks, &mut out)?;
            let ns = s.elapsed().as_nanos() as u64;
            for (l, _) in out.drain(..) {
                c.found += u64::from(matches!(l, Lookup::Value(_)));
                c.lat_ns.push(ns);
            }
            done += n;
        }
    } else {
        for _ in 0..reads {
            let k = &keys[xorshift(seed) as usize % keys.len()];
            let s = Instant::now();
            let (l, _) = c.getter.get(k)?;
            c.lat_ns.push(s.elapsed().as_nanos() as u64);
            c.found += u64::from(matches!(l, Lookup::Value(_)));
        }
    }
    c.gets += reads as u64;
    c.cpu_ns += cpu_ns().saturating_sub(cpu0);
    c.rounds_gets_per_s.push(reads as f64 / t0.elapsed().as_secs_f64());
    Ok(ExitCode::SUCCESS)
}

pub fn run(a: &BenchArgs) -> CmdResult {
    let f =
        std::fs::File::open(&a.keys_file).map_err(|e| format!("{}: {e}", a.keys_file.display()))?;
    let keys: Vec<Vec<u8>> = std::io::BufReader::new(f).split(b'\n').collect::<Result<_, _>>()?;
    if keys.is_empty() {
        return Err(format!("{}: no keys", a.keys_file.display()).into());
    }
    let paths = if a.paths.is_empty() { vec![a.at.path] } else { a.paths.clone() };
    let group = match a.memory_limit {
        Some(m) => {
            storefn_ycsb::drop_cache(&a.at.dir)?;
            Some(storefn_ycsb::MemoryGroup::enter(m)?)
        }
        None => None,
    };
    let mut at = clone_where(&a.at);
    if let (Some(m), false) = (a.memory_limit, native_cache_given()) {
        at.native_cache_bytes = (m / 1000 * storefn_ycsb::limits::ROCKS_CACHE_PER_MILLE) as usize;
    }
    let caches = if a.cache.is_empty() { vec![a.at.cache_fraction] } else { a.cache.clone() };
    let mut proxies: Vec<(u64, DelayProxy)> = Vec::new();
    let mut configs = Vec::new();
    for &path in &paths {
        match &a.at.remote {
            None => configs.push(config(
                path,
                None,
                0.0,
                Getter::open(&Where { path, ..clone_where(&at) })?,
            )),
            Some(addr) => {
                let rtts: Vec<Option<u64>> = if a.rtt_us.is_empty() {
                    vec![None]
                } else {
                    a.rtt_us.iter().map(|r| Some(*r)).collect()
                };
                for rtt in rtts {
                    let via = match rtt {
                        None => addr.clone(),
                        Some(r) => proxy_for(&mut proxies, addr, r)?,
                    };
                    for &cache in &caches {
                        let g = Getter::Remote(Box::new(open_remote(&a.at, &via, path, cache)?));
                        configs.push(config(path, rtt, cache, g));
                    }
                }
            }
        }
    }
    for c in &mut configs {
        c.rt0 = round_trips(&c.getter);
    }
    for r in 0..a.rounds {
        // Odd rounds run the configurations in reverse: neither order's position (a cache
        // warmed by the one before, the machine's drift) favours one path.
        let mut order: Vec<&mut Config> = configs.iter_mut().collect();
        if r % 2 == 1 {
            order.reverse();
        }
        for c in order {
            // The same keys for every configuration in a round.
            let mut seed = a.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(r as u64) | 1;
            run_round(c, &keys, a.reads, a.batch.max(1), &mut seed)?;
        }
    }
    let max_usage = group.as_ref().and_then(storefn_ycsb::MemoryGroup::max_usage);
    if let Some(g) = group {
        g.remove()?;
    }
    report(a, &at, max_usage, &mut configs)
}

/// Whether --native-cache-bytes was given (clap's default otherwise).
fn native_cache_given() -> bool {
    std::env::args().any(|a| a.starts_with("--native-cache-bytes"))
}

fn clone_where(w: &Where) -> Where {
    Where {
        dir: w.dir.clone(),
        path: w.path,
        remote: w.remote.clone(),
        token_file: w.token_file.clone(),
        cache_fraction: w.cache_fraction,
        index_in_file: w.index_in_file,
        native_cache_bytes: w.native_cache_bytes,
    }
}

fn config(path: RocksPath, rtt_us: Option<u64>, cache: f64, getter: Getter) -> Config {
    Config {
        path,
        rtt_us,
        cache,
        getter,
        rounds_gets_per_s: Vec::new(),
        lat_ns: Vec::new(),
        found: 0,
        gets: 0,
        rt0: 0,
        cpu_ns: 0,
    }
}

fn proxy_for(
    proxies: &mut Vec<(u64, DelayProxy)>,
    addr: &str,
    rtt: u64,
) -> Result<String, Box<dyn std::error::Error>> {
    if let Some((_, p)) = proxies.iter().find(|(r, _)| *r == rtt) {
        return Ok(p.local_addr().to_string());
    }
    let to = addr.to_socket_addrs()?.next().ok_or("--remote resolves to no address")?;
    let p = DelayProxy::spawn("127.0.0.1:0".parse()?, to, rtt, None)?;
    let a = p.local_addr().to_string();
    proxies.push((rtt, p));
    Ok(a)
}

fn report(a: &BenchArgs, at: &Where, max_usage: Option<u64>, configs: &mut [Config]) -> CmdResult {
    let mut rows = Vec::new();
    for c in configs.iter_mut() {
        c.lat_ns.sort_unstable();
        let tail = storefn_stats::Tail::of(&c.lat_ns);
        let mut r = c.rounds_gets_per_s.clone();
        let gets_per_s = storefn_stats::median(&mut r).unwrap_or(0.0);
        let mean_us = c.lat_ns.iter().sum::<u64>() as f64 / c.lat_ns.len().max(1) as f64 / 1e3;
        let mut refreshes = None;
        let (rt, fallbacks, chains, cache_bytes, hops) = match &c.getter {
            Getter::Remote(r) => {
                let st = r.stats();
                refreshes = Some(st.cache_refreshes);
                let rt = (r.round_trips() - c.rt0) as f64 / c.gets.max(1) as f64;
                (Some(rt), st.fallbacks, st.chains, Some(r.cache_bytes()), 0)
            }
            Getter::Xrp(_, x, _) => (None, x.stats.fallbacks, x.stats.chains, None, x.stats.hops),
            Getter::Read(_) | Getter::Native(..) => (None, 0, 0, None, 0),
        };
        let cpu_us = c.cpu_ns as f64 / c.gets.max(1) as f64 / 1e3;
        let path = c.path.to_possible_value().map_or("?".into(), |v| v.get_name().to_string());
        if !a.json {
            println!(
                "readrandom : {:10.3} micros/op {:9.0} ops/sec; path={path}{}{} p50={:.1}us p99={:.1}us cpu/get={cpu_us:.2}us found={}/{}{} fallbacks={fallbacks}/{}",
                mean_us,
                gets_per_s,
                c.rtt_us.map_or(String::new(), |r| format!(" rtt={r}us")),
                cache_bytes.map_or(String::new(), |(cap, _)| format!(" cache={}%({cap}B)", c.cache * 100.0)),
                tail.p50_us,
                tail.p99_us,
                c.found,
                c.gets,
                rt.map_or(String::new(), |r| format!(" round_trips/get={r:.3}")),
                chains.max(1),
            );
        }
        rows.push(serde_json::json!({
            "path": path,
            "rtt_us": c.rtt_us,
            "cache_fraction": cache_bytes.map(|_| c.cache),
            "cache_bytes": cache_bytes.map(|b| b.0),
            "gets_per_s": gets_per_s,
            "rounds_gets_per_s": c.rounds_gets_per_s,
            "mean_us": mean_us,
            "p50_us": tail.p50_us,
            "p99_us": tail.p99_us,
            "p999_us": tail.p999_us,
            "cpu_us_per_get": cpu_us,
            "round_trips_per_get": rt,
            "cache_refreshes": refreshes,
            "chains": chains,
            "hops": hops,
            "fallbacks": fallbacks,
            "fallback_share": if chains > 0 { fallbacks as f64 / chains as f64 } else { 0.0 },
            "found": c.found,
            "gets": c.gets,
        }));
    }
    if !a.json && a.memory_limit.is_some() {
        println!(
            "memory group: limit={}B max_usage={}B native block cache={}B",
            a.memory_limit.unwrap_or(0),
            max_usage.map_or("?".into(), |u| u.to_string()),
            at.native_cache_bytes
        );
    }
    if a.json {
        let out = serde_json::json!({
            "bench": "storefn rocks bench",
            "dir": a.at.dir,
            "reads_per_round": a.reads,
            "rounds": a.rounds,
            "batch": a.batch,
            "memory_limit_bytes": a.memory_limit,
            "memory_max_usage_bytes": max_usage,
            "native_cache_bytes": at.native_cache_bytes,
            "results": rows,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    }
    Ok(ExitCode::SUCCESS)
}
