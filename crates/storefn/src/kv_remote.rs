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
    /// Token file (`TENANT SECRET`; the first line is used).
    #[arg(long, requires = "remote")]
    pub token_file: Option<PathBuf>,
    /// bench: the server's pid on this machine, to report its CPU per lookup.
    #[arg(long, requires = "remote")]
    pub server_pid: Option<u32>,
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
