//! `storefn cluster status` and `drain`.

use serde::Serialize;

use crate::etcd::Etcd;
use crate::layout::check_name;
use crate::leader::PlanReport;
use crate::placement::Placement;
use crate::ClusterError;

/// One shard as `cluster status --json` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatusShard {
    pub id: u32,
    /// `[lo, hi]`, inclusive.
    pub range: [u64; 2],
    /// The live replicas' node ids.
    pub replicas: Vec<String>,
    pub version: u64,
}

/// One server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatusNode {
    pub id: String,
    pub addr: String,
    pub alive: bool,
}

/// A collection's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Status {
    pub collection: String,
    pub shards: Vec<StatusShard>,
    pub nodes: Vec<StatusNode>,
    /// Placement records refused (they are reported, not followed).
    pub problems: Vec<String>,
}

/// Collection `c`'s status.
///
/// # Errors
/// etcd unreachable; no such collection.
pub fn status(etcd: &Etcd, c: &str) -> Result<Status, ClusterError> {
    let p = Placement::load(etcd, c, None)?;
    let shards = p
        .shards
        .iter()
        .flatten()
        .map(|s| StatusShard {
            id: s.id,
            range: [s.lo, s.hi],
            replicas: p.live_replicas(s).into_iter().map(|n| n.id.clone()).collect(),
            version: s.version,
        })
        .collect();
    let nodes = p
        .members
        .values()
        .map(|m| StatusNode {
            id: m.id.clone(),
            addr: p.nodes.get(&m.id).map_or_else(|| m.addr.clone(), |n| n.addr.clone()),
            alive: p.nodes.contains_key(&m.id),
        })
        .collect();
    Ok(Status { collection: c.to_string(), shards, nodes, problems: p.problems })
}

/// Drains server `node`: every shard it holds is copied to another live server (keeping R
/// copies), then the server is dropped from the shard. Planning passes repeat until nothing
/// is left on it (bounded).
///
/// # Errors
/// etcd unreachable; a shard that could not be moved.
pub fn drain(etcd: &Etcd, node: &str) -> Result<PlanReport, ClusterError> {
    drain_as(etcd, node, &crate::copy::Creds::default())
}

/// [`drain`], copying as `creds` (servers started with a token file).
///
/// # Errors
/// As [`drain`].
pub fn drain_as(
    etcd: &Etcd,
    node: &str,
    creds: &crate::copy::Creds,
) -> Result<PlanReport, ClusterError> {
    check_name("--node", node)?;
    let drained = [node.to_string()];
    etcd.put(&crate::layout::drained_key(node), b"", None)?;
    let mut all = PlanReport::default();
    for _ in 0..64 {
        let rep = crate::leader::plan_as(etcd, &drained, creds)?;
        let idle = rep.copied.is_empty() && rep.dropped.is_empty();
        all.copied.extend(rep.copied);
        all.dropped.extend(rep.dropped);
        all.problems = rep.problems;
        if idle {
            return Ok(all);
        }
    }
    Err(ClusterError::Invalid(format!("drain {node}: still moving after 64 passes")))
}
