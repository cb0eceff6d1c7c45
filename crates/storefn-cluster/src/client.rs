//! The cluster client: watches a collection's placement in etcd, routes each lookup to a live
//! replica of its shard (fenced by the shard's version), spreads batches over the replicas,
//! and moves a batch to another replica on a connection error or a fencing refusal, within
//! [`MAX_ATTEMPTS`] and [`RETRY_BUDGET`]. With etcd down it keeps routing by the last
//! placement it read.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use storefn_kv::layout::tree::VALUE_BYTES;
use storefn_kv::{RemoteKv, RemotePath};

use crate::copy::connect;
use crate::etcd::Etcd;
use crate::layout::ROOT;
use crate::limits::{MAX_ATTEMPTS, RETRY_BACKOFF, RETRY_BACKOFF_MAX, RETRY_BUDGET, SUSPECT_FOR};
use crate::placement::Placement;
use crate::ClusterError;

/// Counters of a cluster client.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClusterStats {
    pub lookups: u64,
    /// Batches sent (one per shard per call).
    pub batches: u64,
    /// Batches moved to another replica (a connection error or refusal before).
    pub retries: u64,
    /// Of those, fencing refusals (`STALE_PLACEMENT`).
    pub refusals: u64,
}

type Value = Option<[u8; VALUE_BYTES]>;

/// A client of one collection.
#[derive(Debug)]
pub struct ClusterClient {
    collection: String,
    placement: Arc<Mutex<Arc<Placement>>>,
    stop: Arc<AtomicBool>,
    watcher: Option<JoinHandle<()>>,
    kvs: HashMap<(u32, String), RemoteKv>,
    suspect: HashMap<String, Instant>,
    rr: usize,
    cache_levels: u32,
    stats: ClusterStats,
}

impl ClusterClient {
    /// Connects to etcd at `endpoints`, reads collection `c`'s placement and starts watching it.
    ///
    /// # Errors
    /// etcd unreachable, no such collection.
    pub fn connect(endpoints: &str, c: &str) -> Result<ClusterClient, ClusterError> {
        let etcd = Etcd::connect(endpoints)?;
        let first = Placement::load(&etcd, c, None)?;
        let placement = Arc::new(Mutex::new(Arc::new(first)));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s, name) = (Arc::clone(&placement), Arc::clone(&stop), c.to_string());
        let watcher = std::thread::Builder::new()
            .name("cluster-watch".into())
            .spawn(move || watch(&etcd, &name, &p, &s))
            .map_err(|e| ClusterError::Invalid(format!("watch thread: {e}")))?;
        Ok(ClusterClient {
            collection: c.to_string(),
            placement,
            stop,
            watcher: Some(watcher),
            kvs: HashMap::new(),
            suspect: HashMap::new(),
            rr: 0,
            cache_levels: 1,
            stats: ClusterStats::default(),
        })
    }

    /// The placement lookups are routed by now.
    #[must_use]
    pub fn placement(&self) -> Arc<Placement> {
        Arc::clone(&self.placement.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    #[must_use]
    pub fn stats(&self) -> ClusterStats {
        self.stats
    }

    /// One lookup.
    ///
    /// # Errors
    /// As [`ClusterClient::get_many`].
    pub fn get(&mut self, key: u64, path: RemotePath) -> Result<Value, ClusterError> {
        Ok(self.get_many(&[key], path)?.remove(0))
    }

    /// Looks `keys` up: one batch per shard, each sent to one replica.
    ///
    /// # Errors
    /// A key outside the keyspace; a shard none of whose replicas answered within the budget.
    pub fn get_many(&mut self, keys: &[u64], path: RemotePath) -> Result<Vec<Value>, ClusterError> {
        self.stats.lookups += keys.len() as u64;
        let p = self.placement();
        let mut groups: HashMap<u32, Vec<usize>> = HashMap::new();
        for (i, &k) in keys.iter().enumerate() {
            let s = p.route(k).ok_or_else(|| ClusterError::NoRoute {
                collection: self.collection.clone(),
                key: k,
                why: p.problems.join("; "),
            })?;
            groups.entry(s.id).or_default().push(i);
        }
        let mut out = vec![None; keys.len()];
        let mut ids: Vec<u32> = groups.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let idx = &groups[&id];
            let ks: Vec<u64> = idx.iter().map(|&i| keys[i]).collect();
            let vals = self.shard_batch(id, &ks, path)?;
            for (&i, v) in idx.iter().zip(vals) {
                out[i] = v;
            }
        }
        Ok(out)
    }

    /// One shard's batch, moved between replicas until one answers or the budget is spent.
    fn shard_batch(
        &mut self,
        id: u32,
        keys: &[u64],
        path: RemotePath,
    ) -> Result<Vec<Value>, ClusterError> {
        let t0 = Instant::now();
        let mut errors = Vec::new();
        self.rr = self.rr.wrapping_add(1);
        for attempt in 0..MAX_ATTEMPTS {
            if attempt > 0 {
                self.stats.retries += 1;
                // Give the watch a moment to bring the placement that routes around the failure.
                let pause = RETRY_BACKOFF.saturating_mul(1 << (attempt - 1).min(16));
                std::thread::sleep(pause.min(RETRY_BACKOFF_MAX));
            }
            if t0.elapsed() > RETRY_BUDGET {
                break;
            }
            let p = self.placement();
            let Some(s) = p.shards.get(id as usize).and_then(Option::as_ref) else {
                errors.push(format!("shard {id} has no usable record"));
                continue;
            };
            let Some((node, addr)) = self.pick(&p, s, attempt) else {
                errors.push(format!("shard {id}: no live replica"));
                continue;
            };
            self.stats.batches += 1;
            match self.try_on(id, &node, &addr, &s.file, s.version, keys, path) {
                Ok(v) => return Ok(v),
                Err(e) => {
                    if e.contains("STALE_PLACEMENT") {
                        self.stats.refusals += 1;
                    }
                    self.kvs.remove(&(id, node.clone()));
                    self.suspect.insert(node.clone(), Instant::now());
                    errors.push(format!("{node} ({addr}): {e}"));
                }
            }
        }
        Err(ClusterError::Exhausted {
            collection: self.collection.clone(),
            shard: id,
            attempts: errors.len() as u32,
            errors: errors.join("; "),
        })
    }

    /// The replica of attempt `attempt`: round robin from the batch's turn, suspects last.
    fn pick(
        &self,
        p: &Placement,
        s: &crate::layout::ShardRecord,
        attempt: u32,
    ) -> Option<(String, String)> {
        let mut live = p.live_replicas(s);
        if live.is_empty() {
            return None;
        }
        let n = live.len();
        live.rotate_left(self.rr % n);
        let fresh = |id: &str| self.suspect.get(id).is_none_or(|t| t.elapsed() > SUSPECT_FOR);
        live.sort_by_key(|r| !fresh(&r.id)); // stable: keeps the rotation among equals
        let r = live[attempt as usize % n];
        Some((r.id.clone(), r.addr.clone()))
    }

    #[allow(clippy::too_many_arguments)]
    fn try_on(
        &mut self,
        id: u32,
        node: &str,
        addr: &str,
        file: &str,
        version: u64,
        keys: &[u64],
        path: RemotePath,
    ) -> Result<Vec<Value>, String> {
        let key = (id, node.to_string());
        if !self.kvs.contains_key(&key) {
            let mut cl = connect(addr).map_err(|e| e.to_string())?;
            cl.set_fence(Some(version));
            let kv = RemoteKv::open(cl, file, self.cache_levels).map_err(|e| e.to_string())?;
            self.kvs.insert(key.clone(), kv);
        }
        let kv = self.kvs.get_mut(&key).expect("inserted");
        kv.client().set_fence(Some(version));
        kv.get_many(keys, path).map_err(|e| e.to_string())
    }
}

impl Drop for ClusterClient {
    fn drop(&mut self) {
        // Relaxed: a stop flag the watch thread polls.
        self.stop.store(true, Ordering::Relaxed);
        if let Some(w) = self.watcher.take() {
            let _ = w.join();
        }
    }
}

/// The watch thread: a new snapshot after every change under the cluster's keys.
fn watch(etcd: &Etcd, c: &str, out: &Mutex<Arc<Placement>>, stop: &AtomicBool) {
    let (tx, rx) = channel();
    etcd.watch_prefix(ROOT, tx);
    while !stop.load(Ordering::Relaxed) {
        if rx.recv_timeout(Duration::from_millis(200)).is_err() {
            continue;
        }
        while rx.try_recv().is_ok() {}
        let prev = Arc::clone(&out.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        // etcd down: keep routing by the last snapshot.
        if let Ok(p) = Placement::load(etcd, c, Some(&prev)) {
            *out.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(p);
        }
    }
}
