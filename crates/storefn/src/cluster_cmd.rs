//! `storefn cluster create|place|status|drain --etcd ENDPOINTS ...`: a collection's placement
//! in etcd (crates/storefn-cluster).

use std::process::ExitCode;

use clap::Subcommand;
use storefn_cluster::{create_as, drain_as, plan_as, status, CreateSpec, Creds, Etcd, PlanReport};

use crate::CmdResult;

#[derive(Debug, Subcommand)]
pub enum ClusterCmd {
    /// Split a BPF-KV keyspace (keys 0..31^L) into S key-range shards, each a BPF-KV tree,
    /// and copy each to R live servers (checksummed, synced, then published).
    Create {
        collection: String,
        #[arg(long)]
        etcd: String,
        #[arg(long)]
        layers: u32,
        #[arg(long)]
        shards: u32,
        #[arg(long, default_value_t = 1)]
        replicas: u32,
        /// Token file of servers started with `--token-file` (`TENANT SECRET ...`; the first
        /// line is used): the copies authenticate as that tenant.
        #[arg(long)]
        token_file: Option<std::path::PathBuf>,
    },
    /// One planning pass, as the leader makes them: drop gone servers' replicas, copy shards
    /// with fewer than R live copies.
    Place {
        #[arg(long)]
        etcd: String,
        /// Token file of servers started with `--token-file` (`TENANT SECRET ...`; the first
        /// line is used): the copies authenticate as that tenant.
        #[arg(long)]
        token_file: Option<std::path::PathBuf>,
    },
    /// The collection's shards (range, live replicas, version) and the servers.
    Status {
        #[arg(long)]
        etcd: String,
        #[arg(long)]
        collection: String,
        /// One JSON object: `shards` [{id, range, replicas, version}], `nodes` [{id, addr,
        /// alive}], `problems`.
        #[arg(long)]
        json: bool,
    },
    /// Move every shard off a server (keeping R copies), then drop it from the placement.
    Drain {
        #[arg(long)]
        etcd: String,
        #[arg(long)]
        node: String,
        /// Token file of servers started with `--token-file` (`TENANT SECRET ...`; the first
        /// line is used): the copies authenticate as that tenant.
        #[arg(long)]
        token_file: Option<std::path::PathBuf>,
    },
    /// Aggregate pushdown throughput over 1, 2, 3 ... servers (each held to its own cgroup v1
    /// CPU quota; etcd and servers started on loopback and removed after) and lookups across
    /// a kill -9 of one of 3 servers (needs root; feature `bench`).
    #[cfg(feature = "bench")]
    Bench(crate::cluster_bench::BenchArgs),
}

fn creds(token_file: Option<&std::path::Path>) -> Result<Creds, storefn_cluster::ClusterError> {
    token_file.map_or_else(|| Ok(Creds::default()), Creds::from_token_file)
}

fn print_plan(r: &PlanReport) {
    for (c, s, n) in &r.copied {
        println!("copied {c} shard {s} to {n}");
    }
    for (c, s, n) in &r.dropped {
        println!("dropped {c} shard {s} from {n}");
    }
    for p in &r.problems {
        eprintln!("problem: {p}");
    }
}

pub fn run(c: &ClusterCmd) -> CmdResult {
    match c {
        ClusterCmd::Create { collection, etcd, layers, shards, replicas, token_file } => {
            let e = Etcd::connect(etcd)?;
            let spec = CreateSpec {
                collection: collection.clone(),
                layers: *layers,
                shards: *shards,
                replicas: *replicas,
            };
            let work =
                std::env::temp_dir().join(format!("storefn-cluster-create-{}", std::process::id()));
            std::fs::create_dir_all(&work)?;
            let res = create_as(&e, &spec, &work, &creds(token_file.as_deref())?);
            let _ = std::fs::remove_dir_all(&work);
            for s in res? {
                println!(
                    "shard {} keys {}..={} on {} (version {})",
                    s.id,
                    s.lo,
                    s.hi,
                    s.replicas.join(","),
                    s.version
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        ClusterCmd::Place { etcd, token_file } => {
            let r = plan_as(&Etcd::connect(etcd)?, &[], &creds(token_file.as_deref())?)?;
            print_plan(&r);
            Ok(ExitCode::SUCCESS)
        }
        ClusterCmd::Status { etcd, collection, json } => {
            let s = status(&Etcd::connect(etcd)?, collection)?;
            if *json {
                println!("{}", serde_json::to_string(&s)?);
            } else {
                for sh in &s.shards {
                    println!(
                        "shard {} keys {}..={} version {} replicas {}",
                        sh.id,
                        sh.range[0],
                        sh.range[1],
                        sh.version,
                        sh.replicas.join(",")
                    );
                }
                for n in &s.nodes {
                    println!("node {} {} {}", n.id, n.addr, if n.alive { "alive" } else { "gone" });
                }
                for p in &s.problems {
                    println!("problem: {p}");
                }
            }
            Ok(if s.problems.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
        ClusterCmd::Drain { etcd, node, token_file } => {
            let r = drain_as(&Etcd::connect(etcd)?, node, &creds(token_file.as_deref())?)?;
            print_plan(&r);
            Ok(ExitCode::SUCCESS)
        }
        #[cfg(feature = "bench")]
        ClusterCmd::Bench(a) => crate::cluster_bench::run_bench(a),
    }
}
