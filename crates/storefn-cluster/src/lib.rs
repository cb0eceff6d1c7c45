//! storefn-cluster: many storage servers on etcd (docs/DESIGN.md, "Many servers").
//!
//! - Membership: [`NodeAgent`] registers a `storefn serve` under a lease, renews it, watches the
//!   placement, and hands the server its fencing plug-in ([`NodeFence`], the server's
//!   `Fence` trait); the server itself never talks to etcd.
//! - Placement: a collection is shard files with a key-range routing rule, recorded in etcd
//!   ([`layout`]) with transactions; [`create`] splits a BPF-KV keyspace into shards and copies
//!   them to their replicas over the wire ([`copy`]: checksummed, durable, then published).
//! - Failover: one server leads (etcd's election API) and re-replicates ([`plan`]).
//! - [`ClusterClient`]: routes lookups by the watched placement, fenced by shard version, with a
//!   bounded retry over replicas.
//!
//! Every bound is in [`limits`].

#[cfg(feature = "bench")]
pub mod bench;
mod client;
pub mod copy;
mod create;
mod etcd;
mod fence;
pub mod layout;
mod leader;
pub mod limits;
mod load;
mod node;
mod placement;
mod status;

pub use client::{ClusterClient, ClusterStats};
pub use copy::Creds;
pub use create::{build_shard, create, create_as, keyspace, split, CreateSpec};
pub use etcd::{endpoint_urls, Etcd, Guard, Kv, Op};
pub use fence::{Holding, NodeFence};
pub use leader::{plan, plan_as, PlanReport};
pub use load::{run_load, BatchSample, LoadReport, LoadSpec};
pub use node::{NodeAgent, NodeConfig};
pub use placement::{collections, load_nodes, Placement};
pub use status::{drain, drain_as, status, Status, StatusNode, StatusShard};

/// Why a cluster operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    #[error("etcd {endpoints}: {what}: {why}")]
    Etcd { endpoints: String, what: String, why: String },
    #[error("{0}")]
    Invalid(String),
    #[error("no collection {0:?} in etcd")]
    NoCollection(String),
    /// A record that does not decode or does not fit (the key names it).
    #[error("bad placement record {key}: {why}")]
    BadRecord { key: String, why: String },
    #[error("server {addr}: {what}: {why}")]
    Server { addr: String, what: String, why: String },
    #[error("copy {what}: {why}")]
    CopyFailed { what: String, why: String },
    #[error("{0}: changed by others too often (compare-and-swap kept failing)")]
    Conflict(String),
    #[error("collection {collection}: no shard routes key {key} ({why})")]
    NoRoute { collection: String, key: u64, why: String },
    #[error("collection {collection}, shard {shard}: no replica answered after {attempts} attempts: {errors}")]
    Exhausted { collection: String, shard: u32, attempts: u32, errors: String },
}

impl ClusterError {
    pub(crate) fn server(addr: &str, what: &str, e: &dyn std::fmt::Display) -> Self {
        Self::Server { addr: addr.to_string(), what: what.to_string(), why: e.to_string() }
    }
}
