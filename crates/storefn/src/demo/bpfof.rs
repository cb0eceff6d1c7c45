//! The demo's BPF-oF table: a loopback server over the demo database, BPF-KV lookups by
//! `rpc-read` (one READ per tree level) and `pushdown` (one XRP request per lookup), with no
//! added delay and through the delay proxy at 200 µs RTT.

use std::net::SocketAddr;

use storefn_kv::harness::bench::{Dist, Load};
use storefn_kv::harness::remote::{run as remote_run, RemoteBenchConfig};
use storefn_kv::RemotePath;
use storefn_netdelay::DelayProxy;
use storefn_wire::ClientConfig;

use crate::CmdResult;

/// Lookups per row (one thread, one lookup per round trip).
const LOOKUPS: u64 = 600;
/// The RTTs shown: loopback as it is, and a data-center link through the delay proxy.
const RTTS_US: [u64; 2] = [0, 200];

/// Prints the table for the database `db` (relative to the served directory) on `server`.
pub fn run(server: SocketAddr, db: &str, seed: u64) -> CmdResult {
    println!();
    println!(
        "BPF-oF: BPF-KV lookups on a loopback storefn server (1 thread, 1 lookup per round trip)"
    );
    println!(
        "{:<10} {:>7} {:>16} {:>14} {:>10}",
        "path", "rtt µs", "round trips/op", "mean µs/op", "p99 µs"
    );
    for rtt in RTTS_US {
        let proxy = (rtt > 0)
            .then(|| DelayProxy::spawn(([127, 0, 0, 1], 0).into(), server, rtt, None))
            .transpose()?;
        let addr = proxy.as_ref().map_or(server, DelayProxy::local_addr);
        for path in [RemotePath::RpcRead, RemotePath::Pushdown] {
            let cfg = RemoteBenchConfig {
                addr: addr.to_string(),
                client: ClientConfig::default(),
                db: db.to_string(),
                path,
                load: Load {
                    threads: 1,
                    requests: LOOKUPS,
                    batch: 1,
                    warmup: 50,
                    dist: Dist::Uniform,
                    seed,
                },
                cache_levels: 0,
                server_pid: None,
            };
            let r = remote_run(&cfg)?;
            println!(
                "{:<10} {:>7} {:>16.2} {:>14.1} {:>10.1}",
                r.base.path, rtt, r.round_trips_per_op, r.base.mean_us, r.base.p99_us
            );
        }
    }
    println!(
        "(rpc-read pays one round trip per tree level; pushdown walks the tree next to the data)"
    );
    Ok(std::process::ExitCode::SUCCESS)
}
