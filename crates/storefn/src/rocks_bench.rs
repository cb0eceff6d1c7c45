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
    /// A memory budget of this many bytes, a cgroup v1 memory group that counts the page cache
    /// (the database's cached pages are dropped first). Local: every path and round runs in a
    /// process of its own in its own group of this limit (like with like: no path's memory
    /// counts against another's), rounds still interleaved. RocksDB's block cache (native
    /// paths) gets storefn-ycsb's share of it unless --native-cache-bytes is given.
    #[arg(long)]
    memory_limit: Option<u64>,
    /// Untimed Gets per configuration before its measured rounds (fills caches to their steady
    /// state; with --memory-limit, before each round, as each runs in a fresh process).
    #[arg(long, default_value_t = 0)]
    warmup: usize,
    #[arg(long)]
    json: bool,
    /// Internal (--memory-limit's children): run only round R of the one path given, write
    /// every Get's latency (u64 ns, native endian) to --latency-file.
    #[arg(long, hide = true, requires = "latency_file")]
    child_round: Option<usize>,
    #[arg(long, hide = true)]
    latency_file: Option<PathBuf>,
}

struct Config {
    path: RocksPath,
    rtt_us: Option<u64>,
    cache: f64,
    /// `None` for a path measured in child processes (its counters below come from them).
    getter: Option<Getter>,
    rounds_gets_per_s: Vec<f64>,
    lat_ns: Vec<u64>,
    found: u64,
    gets: u64,
    rt0: u64,
    cpu_ns: u64,
    chains: u64,
    hops: u64,
    fallbacks: u64,
    /// The peak charge of the path's memory group (the largest over its processes).
    max_usage: Option<u64>,
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

/// The seed of round `r` (the same keys for every configuration in a round).
fn round_seed(seed: u64, r: u64) -> u64 {
    seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(r) | 1
}

/// `reads` Gets on `g` (batches of `batch` on the batched paths), each Get's latency (a
/// batch's for every key of it) pushed to `lat_ns`; returns the keys found.
fn gets(
    path: RocksPath,
    g: &mut Getter,
    keys: &[Vec<u8>],
    reads: usize,
    batch: usize,
    seed: &mut u64,
    lat_ns: &mut Vec<u64>,
) -> Result<u64, Box<dyn std::error::Error>> {
    let mut out = Vec::new();
    let mut found = 0;
    if matches!(
        (path, &*g),
        (RocksPath::XrpBatch, Getter::Xrp(..)) | (RocksPath::NativeMultiget, Getter::Native(..))
    ) {
        let mut done = 0;
        while done < reads {
            let n = batch.min(reads - done);
            let ks: Vec<&[u8]> =
                (0..n).map(|_| keys[xorshift(seed) as usize % keys.len()].as_slice()).collect();
            let s = Instant::now();
            g.multi_get(&ks, &mut out)?;
            let ns = s.elapsed().as_nanos() as u64;
            for (l, _) in out.drain(..) {
                found += u64::from(matches!(l, Lookup::Value(_)));
                lat_ns.push(ns);
            }
            done += n;
        }
    } else {
        for _ in 0..reads {
            let k = &keys[xorshift(seed) as usize % keys.len()];
            let s = Instant::now();
            let (l, _) = g.get(k)?;
            lat_ns.push(s.elapsed().as_nanos() as u64);
            found += u64::from(matches!(l, Lookup::Value(_)));
        }
    }
    Ok(found)
}

fn run_round(
    c: &mut Config,
    keys: &[Vec<u8>],
    reads: usize,
    batch: usize,
    seed: &mut u64,
) -> CmdResult {
    let g = c.getter.as_mut().ok_or("a round of a path measured in child processes")?;
    let t0 = Instant::now();
    let cpu0 = cpu_ns();
    c.found += gets(c.path, g, keys, reads, batch, seed, &mut c.lat_ns)?;
    c.gets += reads as u64;
    c.cpu_ns += cpu_ns().saturating_sub(cpu0);
    c.rounds_gets_per_s.push(reads as f64 / t0.elapsed().as_secs_f64());
    Ok(ExitCode::SUCCESS)
}

/// Untimed Gets on every configuration (keys from a seed no round uses).
fn warm_up(a: &BenchArgs, configs: &mut [Config], keys: &[Vec<u8>]) -> CmdResult {
    for c in configs.iter_mut().filter(|_| a.warmup > 0) {
        let g = c.getter.as_mut().ok_or("warm-up of a path measured in child processes")?;
        let mut seed = round_seed(a.seed ^ 0x5741_524d, u64::MAX);
        gets(c.path, g, keys, a.warmup, a.batch.max(1), &mut seed, &mut Vec::new())?;
    }
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
    if let (Some(m), None, None) = (a.memory_limit, &a.at.remote, a.child_round) {
        return isolated(a, &paths, m);
    }
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
                Some(Getter::open(&Where { path, ..clone_where(&at) })?),
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
                        configs.push(config(path, rtt, cache, Some(g)));
                    }
                }
            }
        }
    }
    warm_up(a, &mut configs, &keys)?;
    for c in &mut configs {
        c.rt0 = c.getter.as_ref().map_or(0, round_trips);
    }
    let rounds: Vec<usize> = match a.child_round {
        Some(r) => vec![r],
        None => (0..a.rounds).collect(),
    };
    for r in rounds {
        // Odd rounds run the configurations in reverse: neither order's position (a cache
        // warmed by the one before, the machine's drift) favours one path.
        let mut order: Vec<&mut Config> = configs.iter_mut().collect();
        if r % 2 == 1 {
            order.reverse();
        }
        for c in order {
            let mut seed = round_seed(a.seed, r as u64);
            run_round(c, &keys, a.reads, a.batch.max(1), &mut seed)?;
        }
    }
    let max_usage = group.as_ref().and_then(storefn_ycsb::MemoryGroup::max_usage);
    if let Some(g) = group {
        g.remove()?;
    }
    for c in &mut configs {
        harvest(c);
        c.max_usage = max_usage;
    }
    if let (Some(f), [c]) = (&a.latency_file, &configs[..]) {
        let bytes: Vec<u8> = c.lat_ns.iter().flat_map(|n| n.to_ne_bytes()).collect();
        std::fs::write(f, bytes).map_err(|e| format!("{}: {e}", f.display()))?;
    }
    report(a, &at, max_usage, &mut configs)
}

/// The getter's counters into its configuration, for the report.
fn harvest(c: &mut Config) {
    match &c.getter {
        Some(Getter::Remote(r)) => {
            let st = r.stats();
            (c.chains, c.fallbacks) = (st.chains, st.fallbacks);
        }
        Some(Getter::Xrp(_, x, _)) => {
            (c.chains, c.hops, c.fallbacks) = (x.stats.chains, x.stats.hops, x.stats.fallbacks);
        }
        _ => {}
    }
}

/// `--memory-limit` locally: every (round, path) in a child process of this program that
/// enters its own memory group of the same limit, rounds interleaved as in one process (odd
/// rounds reversed); the children's rows and latencies merged into one report.
fn isolated(a: &BenchArgs, paths: &[RocksPath], limit: u64) -> CmdResult {
    let exe = std::env::current_exe().map_err(|e| format!("current executable: {e}"))?;
    let lat_file =
        std::env::temp_dir().join(format!("storefn-rocks-bench-{}.lat", std::process::id()));
    let mut configs: Vec<Config> = paths.iter().map(|&p| config(p, None, 0.0, None)).collect();
    let mut native_cache = 0;
    for r in 0..a.rounds {
        let mut order: Vec<&mut Config> = configs.iter_mut().collect();
        if r % 2 == 1 {
            order.reverse();
        }
        for c in order {
            let row = child_round(a, &exe, c.path, r, &lat_file, limit)?;
            merge_child(c, &row, &lat_file)?;
            native_cache = row["native_cache_bytes"].as_u64().unwrap_or(0) as usize;
        }
    }
    let _ = std::fs::remove_file(&lat_file);
    let at = Where { native_cache_bytes: native_cache, ..clone_where(&a.at) };
    let max_usage = configs.iter().filter_map(|c| c.max_usage).max();
    report(a, &at, max_usage, &mut configs)
}

/// Runs round `r` of `path` in a child process; its JSON report.
fn child_round(
    a: &BenchArgs,
    exe: &std::path::Path,
    path: RocksPath,
    r: usize,
    lat_file: &std::path::Path,
    limit: u64,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let name = path.to_possible_value().map_or("?".into(), |v| v.get_name().to_string());
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("rocks").arg("bench").arg(&a.at.dir);
    cmd.arg("--keys-file").arg(&a.keys_file).arg("--paths").arg(&name);
    for (k, v) in [
        ("--reads", a.reads.to_string()),
        ("--batch", a.batch.to_string()),
        ("--seed", a.seed.to_string()),
        ("--warmup", a.warmup.to_string()),
        ("--memory-limit", limit.to_string()),
        ("--child-round", r.to_string()),
    ] {
        cmd.arg(k).arg(v);
    }
    cmd.arg("--latency-file").arg(lat_file).arg("--json");
    if native_cache_given() {
        cmd.arg("--native-cache-bytes").arg(a.at.native_cache_bytes.to_string());
    }
    if a.at.index_in_file {
        cmd.arg("--index-in-file");
    }
    if a.at.direct {
        cmd.arg("--direct");
    }
    let out = cmd.stderr(std::process::Stdio::inherit()).output()?;
    if !out.status.success() {
        return Err(format!("round {r} of path {name}: the child process {}", out.status).into());
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let mut row = v["results"][0].clone();
    row["native_cache_bytes"] = v["native_cache_bytes"].clone();
    row["memory_max_usage_bytes"] = v["memory_max_usage_bytes"].clone();
    Ok(row)
}

/// Adds a child's round (its JSON row and latency file) to `c`.
fn merge_child(c: &mut Config, row: &serde_json::Value, lat_file: &std::path::Path) -> CmdResult {
    let u = |k: &str| row[k].as_u64().unwrap_or(0);
    let gets = u("gets");
    c.rounds_gets_per_s.push(row["gets_per_s"].as_f64().unwrap_or(0.0));
    c.found += u("found");
    c.gets += gets;
    c.cpu_ns += (row["cpu_us_per_get"].as_f64().unwrap_or(0.0) * gets as f64 * 1e3) as u64;
    c.chains += u("chains");
    c.hops += u("hops");
    c.fallbacks += u("fallbacks");
    c.max_usage = c.max_usage.max(row["memory_max_usage_bytes"].as_u64());
    let bytes = std::fs::read(lat_file).map_err(|e| format!("{}: {e}", lat_file.display()))?;
    c.lat_ns.extend(bytes.chunks_exact(8).map(|b| u64::from_ne_bytes(b.try_into().expect("8"))));
    Ok(ExitCode::SUCCESS)
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
        direct: w.direct,
        native_cache_bytes: w.native_cache_bytes,
    }
}

fn config(path: RocksPath, rtt_us: Option<u64>, cache: f64, getter: Option<Getter>) -> Config {
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
        chains: 0,
        hops: 0,
        fallbacks: 0,
        max_usage: None,
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
        let (mut refreshes, mut rt, mut cache_bytes) = (None, None, None);
        if let Some(Getter::Remote(r)) = &c.getter {
            refreshes = Some(r.stats().cache_refreshes);
            rt = Some((r.round_trips() - c.rt0) as f64 / c.gets.max(1) as f64);
            cache_bytes = Some(r.cache_bytes());
        }
        let (fallbacks, chains, hops) = (c.fallbacks, c.chains, c.hops);
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
            "memory_max_usage_bytes": c.max_usage,
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
            "memory_groups": match (a.memory_limit, &a.at.remote) {
                (None, _) => "none",
                (Some(_), None) => "one per path and round (a child process each)",
                (Some(_), Some(_)) => "one for the whole run",
            },
            "warmup": a.warmup,
            "memory_max_usage_bytes": max_usage,
            "native_cache_bytes": at.native_cache_bytes,
            "results": rows,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    }
    Ok(ExitCode::SUCCESS)
}
