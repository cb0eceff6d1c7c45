//! `storefn kv get|multiget|bench DB --remote ADDR`: the same commands against a server
//! (crates/storefn-server), DB named relative to the served directory.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use storefn_kv::harness::remote::{run as bench_run, RemoteBenchConfig};
use storefn_kv::{RemoteKv, RemotePath};
use storefn_wire::{Client, ClientConfig};

use crate::CmdResult;

/// Options that send a lookup command to a server.
#[derive(Debug, Args)]
pub struct RemoteOpts {
    /// Server address; `--path` is then rpc-read (one READ per hop) or pushdown (one XRP
    /// request per lookup, batched).
    #[arg(long)]
    pub remote: Option<String>,
    /// Token file (`TENANT SECRET`; the first line is used), with --remote or --cluster.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// bench: the server's pid on this machine, to report its CPU per lookup.
    #[arg(long, requires = "remote")]
    pub server_pid: Option<u32>,
    /// etcd endpoints (`host:port,...`) of a cluster: instead of `--remote ADDR`, each lookup
    /// goes to a live replica of its shard (collection from --collection, else DB).
    #[arg(long, conflicts_with = "remote")]
    pub cluster: Option<String>,
    /// The cluster's collection (with --cluster) [default: DB].
    #[arg(long, requires = "cluster")]
    pub collection: Option<String>,
}

impl RemoteOpts {
    /// `--remote` or `--cluster` given.
    pub fn any(&self) -> bool {
        self.remote.is_some() || self.cluster.is_some()
    }
}

fn client_cfg(o: &RemoteOpts) -> Result<ClientConfig, Box<dyn std::error::Error>> {
    Ok(match &o.token_file {
        Some(t) => storefn_server::client_config(t)?,
        None => ClientConfig::default(),
    })
}

fn db_name(db: &Path) -> Result<String, Box<dyn std::error::Error>> {
    Ok(db.to_str().ok_or("DB must be UTF-8 with --remote")?.to_string())
}

fn open(
    db: &Path,
    o: &RemoteOpts,
    addr: &str,
    cache_levels: u32,
) -> Result<RemoteKv, Box<dyn std::error::Error>> {
    let c = Client::connect(addr, client_cfg(o)?)?;
    Ok(RemoteKv::open(c, &db_name(db)?, cache_levels)?)
}

pub fn get(
    db: &Path,
    key: u64,
    path: &str,
    cache_levels: u32,
    o: &RemoteOpts,
    addr: &str,
) -> CmdResult {
    let p: RemotePath = path.parse()?;
    let found = open(db, o, addr, cache_levels)?.get(key, p)?;
    Ok(crate::kv::print_get(found.as_ref()))
}

pub fn multiget(
    db: &Path,
    keys: &[u64],
    random: Option<(u64, u64)>,
    path: &str,
    cache_levels: u32,
    o: &RemoteOpts,
    addr: &str,
) -> CmdResult {
    let p: RemotePath = path.parse()?;
    let mut kv = open(db, o, addr, cache_levels)?;
    let keys = crate::kv::pick_keys(keys, random, kv.meta().key_count)?;
    let got = kv.get_many(&keys, p)?;
    Ok(crate::kv::print_multiget(&keys, &got))
}

pub fn bench(a: &crate::kv::BenchArgs, addr: &str) -> CmdResult {
    let cfg = RemoteBenchConfig {
        addr: addr.to_string(),
        client: client_cfg(&a.remote)?,
        db: db_name(&a.db)?,
        path: a.path.parse()?,
        load: a.load(1)?,
        cache_levels: a.cache_levels,
        server_pid: a.remote.server_pid,
    };
    let r = bench_run(&cfg)?;
    crate::kv::print_bench(&r.base, "remote");
    let cpu = r.server_cpu_us_per_op.map_or("n/a".to_string(), |c| format!("{c:.3}"));
    println!(
        "remote rtt_us={:.3} round_trips_per_op={:.3} server_cpu_us_per_op={cpu} reloads={}",
        r.rtt_us, r.round_trips_per_op, r.reloads
    );
    if r.base.misses > 0 {
        eprintln!("warning: {} lookups found nothing", r.base.misses);
    }
    if let Some(p) = &a.json {
        let mut obj = crate::kv::bench_json(&r.base, a.cache_levels, "remote");
        obj["remote"] = serde_json::json!(addr);
        obj["rtt_us"] = serde_json::json!(r.rtt_us);
        obj["round_trips_per_op"] = serde_json::json!(r.round_trips_per_op);
        obj["server_cpu_us_per_op"] = serde_json::json!(r.server_cpu_us_per_op);
        crate::kv::append_line(p, &obj)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `--cluster`: the collection and a client of it.
fn cluster_client(
    db: &Path,
    o: &RemoteOpts,
) -> Result<storefn_cluster::ClusterClient, Box<dyn std::error::Error>> {
    let ep = o.cluster.as_deref().expect("checked");
    let c = match &o.collection {
        Some(c) => c.clone(),
        None => db_name(db)?,
    };
    Ok(storefn_cluster::ClusterClient::connect_as(ep, &c, cluster_creds(o)?)?)
}

/// `--token-file` with `--cluster`: the servers' tenant.
fn cluster_creds(o: &RemoteOpts) -> Result<storefn_cluster::Creds, storefn_cluster::ClusterError> {
    o.token_file.as_deref().map_or_else(
        || Ok(storefn_cluster::Creds::default()),
        storefn_cluster::Creds::from_token_file,
    )
}

/// `kv get --cluster`.
pub fn cluster_get(db: &Path, key: u64, path: &str, o: &RemoteOpts) -> CmdResult {
    let p: RemotePath = path.parse()?;
    let found = cluster_client(db, o)?.get(key, p)?;
    Ok(crate::kv::print_get(found.as_ref()))
}

/// `kv multiget --cluster`.
pub fn cluster_multiget(
    db: &Path,
    keys: &[u64],
    random: Option<(u64, u64)>,
    path: &str,
    o: &RemoteOpts,
) -> CmdResult {
    let p: RemotePath = path.parse()?;
    let mut c = cluster_client(db, o)?;
    let n = storefn_cluster::keyspace(c.placement().collection.layers)?;
    let keys = crate::kv::pick_keys(keys, random, n)?;
    let got = c.get_many(&keys, p)?;
    Ok(crate::kv::print_multiget(&keys, &got))
}

/// `kv bench --cluster`: a checked lookup load over the collection.
pub fn cluster_bench(a: &crate::kv::BenchArgs) -> CmdResult {
    let o = &a.remote;
    let collection = match &o.collection {
        Some(c) => c.clone(),
        None => db_name(&a.db)?,
    };
    let spec = storefn_cluster::LoadSpec {
        endpoints: o.cluster.clone().expect("checked"),
        collection,
        threads: a.threads,
        // `--requests` counts all lookups; the load counts per thread.
        requests: Some(a.requests.div_ceil(a.threads.max(1) as u64)),
        batch: a.batch.unwrap_or(1),
        path: a.path.parse()?,
        seed: a.seed,
        max_time: std::time::Duration::from_secs(3600),
        creds: cluster_creds(o)?,
    };
    let r = storefn_cluster::run_load(&spec, &std::sync::atomic::AtomicBool::new(false))?;
    println!(
        "Average throughput: {:.6} op/s latency: {:.6} usec",
        r.throughput(),
        r.latency_us(0.5)
    );
    println!("99%   latency: {:.6} us", r.latency_us(0.99));
    println!(
        "cluster lookups={} wrong={} failed_batches={} retries={} refusals={}",
        r.lookups, r.wrong, r.failed, r.retries, r.refusals
    );
    for e in r.errors.iter().take(3) {
        eprintln!("error: {e}");
    }
    Ok(if r.wrong == 0 && r.failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
