//! A server's membership agent: registers the server under a lease, renews it, re-reads the
//! placement on every change (a watch), keeps the fencing state ([`NodeFence`]) in step,
//! prepares the files copies are written to, campaigns for leadership (the leader re-plans
//! the copies, [`crate::leader`]) and, on [`NodeAgent::leave`], revokes the lease so its
//! records vanish at once.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use crate::copy::meta_of;
use crate::etcd::Etcd;
use crate::fence::{Holding, NodeFence};
use crate::layout::{
    check_name, encode, member_key, node_key, ready_key, shard_file, NodeRecord, ROOT,
};
use crate::limits::{KEEPALIVE_INTERVAL, LEASE_TTL_SECS, RENEW_RETRY, SELF_FENCE_AFTER};
use crate::placement::{collections, Placement};
use crate::ClusterError;

/// How a server joins a cluster.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// etcd endpoints, comma-separated `host:port`.
    pub endpoints: String,
    pub id: String,
    /// The address clients reach this server at.
    pub advertise: String,
    /// The served directory (shard files live in its `cluster/` directory).
    pub dir: PathBuf,
    /// Who this server's leader copies as (the server's own first token when it has a token
    /// file: the other servers hold the same file).
    pub creds: crate::copy::Creds,
}

/// State shared by the agent's threads.
#[derive(Debug)]
struct Shared {
    cfg: NodeConfig,
    fence: Arc<NodeFence>,
    /// The current lease (0 = none). Relaxed: read by the leader thread to campaign with; a
    /// stale id only makes one campaign fail and retry.
    lease: AtomicI64,
    /// Relaxed: a stop flag polled by the agent's loops.
    stop: AtomicBool,
}

/// A running agent; [`NodeAgent::leave`] stops it and removes the server from the cluster.
#[derive(Debug)]
pub struct NodeAgent {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl NodeAgent {
    /// Connects, registers (lease, node and member records), reads the placement, and starts
    /// the renewal/watch thread and the leader thread.
    ///
    /// # Errors
    /// A bad id, etcd unreachable.
    pub fn start(cfg: NodeConfig) -> Result<NodeAgent, ClusterError> {
        check_name("--node", &cfg.id)?;
        let fence = Arc::new(NodeFence::new(&cfg.id));
        let shared =
            Arc::new(Shared { cfg, fence, lease: AtomicI64::new(0), stop: AtomicBool::new(false) });
        let etcd = Etcd::connect(&shared.cfg.endpoints)?;
        let mut st = AgentState { prepared: HashSet::new(), prev: HashMap::new() };
        register(&etcd, &shared, &mut st)?;
        let s = Arc::clone(&shared);
        let agent = std::thread::Builder::new()
            .name(format!("cluster-agent-{}", shared.cfg.id))
            .spawn(move || agent_loop(&etcd, &s, st))
            .map_err(|e| ClusterError::Invalid(format!("agent thread: {e}")))?;
        let s = Arc::clone(&shared);
        let leader = std::thread::Builder::new()
            .name(format!("cluster-leader-{}", shared.cfg.id))
            .spawn(move || {
                crate::leader::leader_loop(
                    &s.cfg.endpoints,
                    &s.cfg.id,
                    &s.cfg.creds,
                    &s.lease,
                    &s.stop,
                );
            })
            .map_err(|e| ClusterError::Invalid(format!("leader thread: {e}")))?;
        Ok(NodeAgent { shared, threads: vec![agent, leader] })
    }

    /// The fencing plug-in to hand the server (`ServerConfig::fence`).
    #[must_use]
    pub fn fence(&self) -> Arc<NodeFence> {
        Arc::clone(&self.shared.fence)
    }

    /// Leaves the cluster: revokes the lease (the node record vanishes now, not after the
    /// TTL) and stops the agent's threads.
    pub fn leave(mut self) {
        self.stop_threads();
    }

    fn stop_threads(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for NodeAgent {
    fn drop(&mut self) {
        self.stop_threads();
    }
}

#[derive(Debug)]
struct AgentState {
    /// Files prepared for a copy to this server (pending in the placement).
    prepared: HashSet<String>,
    /// The last placement read of each collection (a version going backwards is refused).
    prev: HashMap<String, Placement>,
}

fn register(etcd: &Etcd, sh: &Shared, st: &mut AgentState) -> Result<(), ClusterError> {
    let (id, addr) = (sh.cfg.id.clone(), sh.cfg.advertise.clone());
    let rec = encode(&NodeRecord { id: id.clone(), addr });
    let sent = Instant::now();
    let lease = etcd.lease_grant(LEASE_TTL_SECS)?;
    etcd.put(&member_key(&id), &rec, None)?;
    // A server that (re)joins takes copies again, even if it was drained before.
    etcd.txn(&[], &[crate::etcd::Op::Delete { key: crate::layout::drained_key(&id) }])?;
    etcd.put(&node_key(&id), &rec, Some(lease))?;
    sh.lease.store(lease, Ordering::Relaxed);
    st.prepared.clear();
    refresh(etcd, sh, st, lease)?;
    sh.fence.live_until(sent + SELF_FENCE_AFTER);
    Ok(())
}

fn agent_loop(etcd: &Etcd, sh: &Shared, mut st: AgentState) {
    let (tx, rx) = channel();
    etcd.watch_prefix(ROOT, tx);
    let mut next_renew = Instant::now() + KEEPALIVE_INTERVAL;
    while !sh.stop.load(Ordering::Relaxed) {
        let wait = next_renew.saturating_duration_since(Instant::now());
        match rx.recv_timeout(wait.min(KEEPALIVE_INTERVAL)) {
            Ok(()) => {
                while rx.try_recv().is_ok() {} // one reload for a burst of events
                let lease = sh.lease.load(Ordering::Relaxed);
                if lease != 0 {
                    let _ = refresh(etcd, sh, &mut st, lease);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => std::thread::sleep(KEEPALIVE_INTERVAL),
        }
        if Instant::now() >= next_renew {
            let ok = renew(etcd, sh, &mut st);
            next_renew = Instant::now() + if ok { KEEPALIVE_INTERVAL } else { RENEW_RETRY };
        }
    }
    let lease = sh.lease.swap(0, Ordering::Relaxed);
    sh.fence.lost();
    if lease != 0 {
        let _ = etcd.lease_revoke(lease);
    }
}

/// One renewal: extends the self-fence deadline on success; on an expired lease, fences
/// everything and registers anew (which re-reads the placement before answering again).
fn renew(etcd: &Etcd, sh: &Shared, st: &mut AgentState) -> bool {
    let lease = sh.lease.load(Ordering::Relaxed);
    let sent = Instant::now();
    match etcd.lease_renew(lease) {
        Ok(true) => {
            sh.fence.live_until(sent + SELF_FENCE_AFTER);
            true
        }
        Ok(false) => {
            sh.fence.lost();
            sh.lease.store(0, Ordering::Relaxed);
            register(etcd, sh, st).is_ok()
        }
        // etcd unreachable: the deadline runs out on its own (the self-fence). Once it has,
        // the lease may be gone too (etcd answers an unknown lease with an error, not a zero
        // TTL): register anew as soon as etcd can be reached.
        Err(_) if lease == 0 || !sh.fence.is_live() => {
            sh.fence.lost();
            sh.lease.store(0, Ordering::Relaxed);
            register(etcd, sh, st).is_ok()
        }
        Err(_) => false,
    }
}

/// Re-reads every collection's placement; sets what this server holds; prepares the files of
/// copies pending to it.
fn refresh(etcd: &Etcd, sh: &Shared, st: &mut AgentState, lease: i64) -> Result<(), ClusterError> {
    let me = &sh.cfg.id;
    let mut files = HashMap::new();
    let mut pending = Vec::new();
    for c in collections(etcd)? {
        if check_name("collection", &c).is_err() {
            continue;
        }
        let Ok(p) = Placement::load(etcd, &c, st.prev.get(&c)) else { continue };
        for s in p.shards.iter().flatten() {
            // Only the file name the layout gives: a record cannot point the server elsewhere.
            let file = shard_file(&c, s.id);
            if s.replicas.contains(me) {
                files.insert(file, Holding::Replica { version: s.version });
            } else if s.pending.contains(me) {
                files.insert(file.clone(), Holding::Pending);
                pending.push((c.clone(), s.id, file));
            }
        }
        st.prev.insert(c, p);
    }
    sh.fence.set_files(files);
    st.prepared.retain(|f| pending.iter().any(|(_, _, p)| p == f));
    for (c, id, file) in pending {
        if st.prepared.contains(&file) {
            continue;
        }
        prepare(&sh.cfg.dir, &file)?;
        etcd.put(&ready_key(&c, id, me), b"", Some(lease))?;
        st.prepared.insert(file);
    }
    Ok(())
}

/// Creates (empty) the file and sidecar a copy will be written into.
fn prepare(dir: &Path, file: &str) -> Result<(), ClusterError> {
    let p = dir.join(file);
    let io = |e: std::io::Error| ClusterError::Invalid(format!("{}: {e}", p.display()));
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    std::fs::File::create(&p).map_err(io)?;
    std::fs::File::create(dir.join(meta_of(file))).map_err(io)?;
    Ok(())
}
