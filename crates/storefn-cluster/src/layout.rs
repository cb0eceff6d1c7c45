//! The etcd key layout (docs/DESIGN.md, "Many servers: etcd keys") and the records stored
//! under it, as JSON. Every key is under [`ROOT`].

use serde::{Deserialize, Serialize};

use crate::limits::MAX_NAME_BYTES;
use crate::ClusterError;

/// Every key of the cluster starts with this.
pub const ROOT: &str = "/storefn/";
/// Election name of the re-replication leader.
pub const ELECTION: &str = "/storefn/leader";
/// Directory beneath each server's served directory that holds its shard files.
pub const SHARD_DIR: &str = "cluster";

/// `/storefn/nodes/<id>`: a live server (bound to its lease).
#[must_use]
pub fn node_key(id: &str) -> String {
    format!("{ROOT}nodes/{id}")
}
/// `/storefn/members/<id>`: every server that ever joined (no lease): tells an unknown node id
/// in a placement record from a dead one.
#[must_use]
pub fn member_key(id: &str) -> String {
    format!("{ROOT}members/{id}")
}
/// `/storefn/drained/<id>`: the server is being drained: it receives no new copies.
#[must_use]
pub fn drained_key(id: &str) -> String {
    format!("{ROOT}drained/{id}")
}
/// `/storefn/coll/<c>`: the collection record.
#[must_use]
pub fn coll_key(c: &str) -> String {
    format!("{ROOT}coll/{c}")
}
/// `/storefn/coll/<c>/shard/<id>`: one shard record (id zero-padded: keys sort by id).
#[must_use]
pub fn shard_key(c: &str, id: u32) -> String {
    format!("{ROOT}coll/{c}/shard/{id:05}")
}
/// `/storefn/ready/<c>/<shard>/<node>`: the node prepared an empty file for a copy (bound to
/// the node's lease).
#[must_use]
pub fn ready_key(c: &str, shard: u32, node: &str) -> String {
    format!("{ROOT}ready/{c}/{shard:05}/{node}")
}
/// The shard's file, relative to each server's served directory.
#[must_use]
pub fn shard_file(c: &str, id: u32) -> String {
    format!("{SHARD_DIR}/{c}/shard-{id:05}.kv")
}

/// A server of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub id: String,
    /// `host:port` clients reach its `storefn serve` at.
    pub addr: String,
}

/// How a collection's keys map to shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Routing {
    /// Shard i holds keys `lo..=hi` of its record; ranges are disjoint and cover the keyspace.
    KeyRange,
}

/// A collection: a set of shard files and its routing rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectionRecord {
    pub name: String,
    pub routing: Routing,
    pub shards: u32,
    /// Copies each shard should have.
    pub replicas: u32,
    /// BPF-KV layers of the keyspace (keys `0..31^layers`).
    pub layers: u32,
}

/// One shard: its key range, file, checksum, replicas and placement version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardRecord {
    pub id: u32,
    pub lo: u64,
    pub hi: u64,
    /// Relative to each server's served directory ([`shard_file`]); its sidecar is `.meta`.
    pub file: String,
    pub bytes: u64,
    pub meta_bytes: u64,
    /// CRC-32 of the file and of the sidecar: a copy is published only when they match.
    pub crc32: u32,
    pub meta_crc32: u32,
    /// Servers holding a complete, verified copy.
    pub replicas: Vec<String>,
    /// Servers a copy is being made to (not routed to).
    pub pending: Vec<String>,
    /// Moves up by one with every change of the record; requests are fenced by it.
    pub version: u64,
}

/// Checks a node id or collection name: an etcd key segment and a file name.
///
/// # Errors
/// Empty, too long, or a character other than `[A-Za-z0-9_.-]` (or a leading dot).
pub fn check_name(what: &str, s: &str) -> Result<(), ClusterError> {
    let ok = !s.is_empty()
        && s.len() <= MAX_NAME_BYTES
        && !s.starts_with('.')
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(ClusterError::Invalid(format!(
            "{what} {s:?}: 1..={MAX_NAME_BYTES} of [A-Za-z0-9_.-], not starting with '.'"
        )))
    }
}

/// Decodes a record stored at `key`.
///
/// # Errors
/// `BadRecord` naming the key.
pub fn decode<T: for<'de> Deserialize<'de>>(key: &str, v: &[u8]) -> Result<T, ClusterError> {
    serde_json::from_slice(v)
        .map_err(|e| ClusterError::BadRecord { key: key.to_string(), why: e.to_string() })
}

/// Encodes a record.
#[must_use]
pub fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).expect("records serialize")
}
