//! The server's fencing plug-in ([`storefn_server::Fence`]) as the node agent
//! keeps it: which shard files this server may answer for, at which placement version, and
//! until when its lease is known to hold.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;
use std::time::Instant;

use storefn_server::Fence;

use crate::copy::meta_of;
use crate::layout::SHARD_DIR;

/// What this server holds of one shard file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holding {
    /// A complete replica listed in the placement at `version`.
    Replica { version: u64 },
    /// A copy being written to it: only unfenced requests (the copier's) are answered.
    Pending,
}

/// The fencing state of one server.
#[derive(Debug)]
pub struct NodeFence {
    node: String,
    base: Instant,
    /// Milliseconds after `base` until which the lease is known to hold (0 = not live).
    /// Relaxed: a lone deadline, written by the agent and compared by the server threads; a
    /// stale read moves the refusal by one renewal at most, and the deadline already keeps a
    /// margin below the lease's TTL for that.
    live_until_ms: AtomicU64,
    files: RwLock<HashMap<String, Holding>>,
}

impl NodeFence {
    #[must_use]
    pub fn new(node: &str) -> Self {
        Self {
            node: node.to_string(),
            base: Instant::now(),
            live_until_ms: AtomicU64::new(0),
            files: RwLock::new(HashMap::new()),
        }
    }

    /// The lease holds until `t`.
    pub fn live_until(&self, t: Instant) {
        let ms = u64::try_from(t.saturating_duration_since(self.base).as_millis()).unwrap_or(0);
        self.live_until_ms.store(ms.max(1), Ordering::Relaxed);
    }

    /// The lease is lost: answer for nothing until re-registered and the placement re-read.
    pub fn lost(&self) {
        self.live_until_ms.store(0, Ordering::Relaxed);
        self.files.write().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
    }

    /// Whether the lease is known to hold now.
    #[must_use]
    pub fn is_live(&self) -> bool {
        let now = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        now < self.live_until_ms.load(Ordering::Relaxed)
    }

    /// Replaces the held files (from a fresh placement).
    pub fn set_files(&self, files: HashMap<String, Holding>) {
        *self.files.write().unwrap_or_else(std::sync::PoisonError::into_inner) = files;
    }

    /// What the server holds of `file`.
    #[must_use]
    pub fn holding(&self, file: &str) -> Option<Holding> {
        self.files.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(file).copied()
    }
}

/// `p` with empty and `.` components dropped and `..` applied; `None` when it leaves the root.
fn normalize(p: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for c in p.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            c => parts.push(c),
        }
    }
    Some(parts.join("/"))
}

impl Fence for NodeFence {
    fn admit(&self, path: &[u8], fence: Option<u64>) -> Result<(), String> {
        // The file a path names, lexically (`a/../cluster//x` is `cluster/x`): an alias of a
        // shard file is fenced like the file. A path leaving the root is the server's to refuse.
        let Some(path) = std::str::from_utf8(path).ok().and_then(normalize) else { return Ok(()) };
        let path = path.as_str();
        if !path.starts_with(SHARD_DIR) || !path[SHARD_DIR.len()..].starts_with('/') {
            return Ok(()); // not a cluster file: the server's usual rules apply
        }
        if !self.is_live() {
            return Err(format!("node {}: no live cluster lease", self.node));
        }
        let base = path.strip_suffix(storefn_kv::layout::tree::META_SUFFIX).unwrap_or(path);
        let held = self.holding(base).or_else(|| self.holding(&meta_of(base)));
        match (held, fence) {
            (Some(Holding::Replica { version }), Some(v)) if v > version => Err(format!(
                "node {}: {base} routed by placement version {v}, this server knows {version}",
                self.node
            )),
            (Some(Holding::Replica { .. }), _) | (Some(Holding::Pending), None) => Ok(()),
            (Some(Holding::Pending), Some(v)) => {
                Err(format!("node {}: {base} is still being copied (fence {v})", self.node))
            }
            (None, _) => Err(format!("node {}: not a current replica of {base}", self.node)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_of_shard_files_are_fenced_like_the_files() {
        let f = NodeFence::new("n");
        let file = "cluster/c/shard-00000.kv".to_string();
        f.set_files([(file.clone(), Holding::Replica { version: 4 })].into_iter().collect());
        // Not live: every alias refused; other files untouched.
        for p in [&file[..], "./cluster/c/shard-00000.kv", "x/../cluster//c/./shard-00000.kv"] {
            assert!(f.admit(p.as_bytes(), Some(4)).is_err(), "{p}");
        }
        assert!(f.admit(b"plain/file", None).is_ok());
        f.live_until(Instant::now() + std::time::Duration::from_secs(60));
        assert!(f.admit(b"x/../cluster/c/shard-00000.kv", Some(4)).is_ok());
        assert!(f.admit(b"cluster/c/shard-00000.kv.meta", Some(3)).is_ok());
        assert!(f.admit(b"cluster/c/shard-00000.kv", Some(5)).is_err(), "newer than known");
        assert!(f.admit(b"cluster/c/shard-00001.kv", None).is_err(), "not a replica");
        f.lost();
        assert!(f.admit(file.as_bytes(), Some(4)).is_err());
    }
}
