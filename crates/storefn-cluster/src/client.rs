//! The cluster client: watches a collection's placement in etcd, routes each lookup to a live
//! replica of its shard (fenced by the shard's version), spreads batches over the replicas,
//! and moves a batch to another replica on a connection error or a fencing refusal, within
//! [`MAX_ATTEMPTS`] and [`RETRY_BUDGET`]. With etcd down it keeps routing by the last
//! placement it read.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use storefn_kv::layout::tree::VALUE_BYTES;
use storefn_kv::{RemoteKv, RemotePath};

use crate::copy::{connect_as, Creds};
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
    /// The most shard batches one call had in flight at once.
    pub most_in_flight: u64,
}

type Value = Option<[u8; VALUE_BYTES]>;

/// A client of one collection. Not shared between threads: a thread (or a load's worker)
/// has its own, each with its own connections.
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
    creds: Creds,
}

impl ClusterClient {
    /// Connects to etcd at `endpoints`, reads collection `c`'s placement and starts watching it.
    ///
    /// # Errors
    /// etcd unreachable, no such collection.
    pub fn connect(endpoints: &str, c: &str) -> Result<ClusterClient, ClusterError> {
        Self::connect_as(endpoints, c, Creds::default())
    }

    /// [`ClusterClient::connect`], reaching the servers as `creds` (servers started with a
    /// token file).
    ///
    /// # Errors
    /// etcd unreachable, no such collection.
    pub fn connect_as(
        endpoints: &str,
        c: &str,
        creds: Creds,
    ) -> Result<ClusterClient, ClusterError> {
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
            creds,
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

    /// Looks `keys` up: one batch per shard, each sent to one replica, every shard's batch in
    /// flight at once (pushdown: all sent before the first answer is awaited; rpc-read: one
    /// thread per shard); a batch whose replica failed moves to another one.
    ///
    /// # Errors
    /// A key outside the keyspace; a shard none of whose replicas answered within the budget.
    pub fn get_many(&mut self, keys: &[u64], path: RemotePath) -> Result<Vec<Value>, ClusterError> {
        self.stats.lookups += keys.len() as u64;
        let p = self.placement();
        let mut groups: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, &k) in keys.iter().enumerate() {
            let s = p.route(k).ok_or_else(|| ClusterError::NoRoute {
                collection: self.collection.clone(),
                key: k,
                why: p.problems.join("; "),
            })?;
            groups.entry(s.id).or_default().push(i);
        }
        let batches: Vec<Batch> = groups
            .into_iter()
            .map(|(id, idx)| {
                let keys = idx.iter().map(|&i| keys[i]).collect();
                Batch { id, idx, keys }
            })
            .collect();
        let mut vals: Vec<Option<Vec<Value>>> = vec![None; batches.len()];
        let mut errs: Vec<Option<String>> = vec![None; batches.len()];
        self.rr = self.rr.wrapping_add(1);
        match path {
            RemotePath::Pushdown => self.push_all(&p, &batches, &mut vals, &mut errs),
            RemotePath::RpcRead => self.rpc_all(&p, &batches, &mut vals, &mut errs),
        }
        let mut out = vec![None; keys.len()];
        for ((b, v), e) in batches.iter().zip(vals).zip(errs) {
            let v = match v {
                Some(v) => v,
                None => self.shard_batch(b.id, &b.keys, path, e.unwrap_or_default())?,
            };
            for (&i, v) in b.idx.iter().zip(v) {
                out[i] = v;
            }
        }
        Ok(out)
    }

    /// The first attempt of every batch, pushdown: each sent on its replica's connection,
    /// then each answer gathered.
    fn push_all(
        &mut self,
        p: &Placement,
        batches: &[Batch],
        vals: &mut [Option<Vec<Value>>],
        errs: &mut [Option<String>],
    ) {
        let mut pending = Vec::with_capacity(batches.len());
        for (b, batch) in batches.iter().enumerate() {
            let sent = self.open_first(p, batch.id).and_then(|(node, addr)| {
                let kv = self.kvs.get_mut(&(batch.id, node.clone())).expect("opened");
                match kv.push_send(&batch.keys) {
                    Ok(s) => Ok((node, s)),
                    Err(e) => Err(self.failed(batch.id, &node, &addr, &e.to_string())),
                }
            });
            match sent {
                Ok((node, s)) => pending.push((b, node, s)),
                Err(e) => errs[b] = Some(e),
            }
        }
        self.stats.most_in_flight = self.stats.most_in_flight.max(pending.len() as u64);
        for (b, node, s) in pending {
            let batch = &batches[b];
            let kv = self.kvs.get_mut(&(batch.id, node.clone())).expect("opened");
            let addr = kv.client().addr().to_string();
            match kv.push_finish(&batch.keys, s) {
                Ok(v) => vals[b] = Some(v),
                Err(e) => errs[b] = Some(self.failed(batch.id, &node, &addr, &e.to_string())),
            }
        }
    }

    /// The first attempt of every batch, rpc-read (a lookup is several round trips): one
    /// thread per batch, each on its replica's connection.
    fn rpc_all(
        &mut self,
        p: &Placement,
        batches: &[Batch],
        vals: &mut [Option<Vec<Value>>],
        errs: &mut [Option<String>],
    ) {
        let mut taken = Vec::with_capacity(batches.len());
        for (b, batch) in batches.iter().enumerate() {
            match self.open_first(p, batch.id) {
                Ok((node, addr)) => {
                    let kv = self.kvs.remove(&(batch.id, node.clone())).expect("opened");
                    taken.push((b, node, addr, kv));
                }
                Err(e) => errs[b] = Some(e),
            }
        }
        self.stats.most_in_flight = self.stats.most_in_flight.max(taken.len() as u64);
        let done: Vec<_> = std::thread::scope(|sc| {
            let hs: Vec<_> = taken
                .into_iter()
                .map(|(b, node, addr, mut kv)| {
                    let keys = &batches[b].keys;
                    sc.spawn(move || {
                        let r = kv.get_many(keys, RemotePath::RpcRead).map_err(|e| e.to_string());
                        (b, node, addr, kv, r)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().expect("a lookup thread does not panic")).collect()
        });
        for (b, node, addr, kv, r) in done {
            let id = batches[b].id;
            self.kvs.insert((id, node.clone()), kv);
            match r {
                Ok(v) => vals[b] = Some(v),
                Err(e) => errs[b] = Some(self.failed(id, &node, &addr, &e)),
            }
        }
    }

    /// Picks shard `id`'s replica for a first attempt and opens its connection.
    fn open_first(&mut self, p: &Placement, id: u32) -> Result<(String, String), String> {
        let Some(s) = p.shards.get(id as usize).and_then(Option::as_ref) else {
            return Err(format!("shard {id} has no usable record"));
        };
        let Some((node, addr)) = self.pick(p, s, 0) else {
            return Err(format!("shard {id}: no live replica"));
        };
        self.stats.batches += 1;
        match self.open(id, &node, &addr, &s.file, s.version) {
            Ok(()) => Ok((node, addr)),
            Err(e) => Err(self.failed(id, &node, &addr, &e)),
        }
    }

    /// Notes a replica's failure (its connection dropped, the node suspected); the message.
    fn failed(&mut self, id: u32, node: &str, addr: &str, e: &str) -> String {
        if e.contains("STALE_PLACEMENT") {
            self.stats.refusals += 1;
        }
        self.kvs.remove(&(id, node.to_string()));
        self.suspect.insert(node.to_string(), Instant::now());
        format!("{node} ({addr}): {e}")
    }

    /// One shard's batch after a failed first attempt (`first`: its error), moved between
    /// replicas until one answers or the budget is spent.
    fn shard_batch(
        &mut self,
        id: u32,
        keys: &[u64],
        path: RemotePath,
        first: String,
    ) -> Result<Vec<Value>, ClusterError> {
        let t0 = Instant::now();
        let mut errors = vec![first];
        for attempt in 1..MAX_ATTEMPTS {
            self.stats.retries += 1;
            // Give the watch a moment to bring the placement that routes around the failure.
            let pause = RETRY_BACKOFF.saturating_mul(1 << (attempt - 1).min(16));
            std::thread::sleep(pause.min(RETRY_BACKOFF_MAX));
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
            let r = self.open(id, &node, &addr, &s.file, s.version).and_then(|()| {
                let kv = self.kvs.get_mut(&(id, node.clone())).expect("opened");
                kv.get_many(keys, path).map_err(|e| e.to_string())
            });
            match r {
                Ok(v) => return Ok(v),
                Err(e) => {
                    let m = self.failed(id, &node, &addr, &e);
                    errors.push(m);
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

    /// The replica of attempt `attempt`: round robin from the call's turn, suspects last.
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
        live.rotate_left(self.rr.wrapping_add(s.id as usize) % n);
        let fresh = |id: &str| self.suspect.get(id).is_none_or(|t| t.elapsed() > SUSPECT_FOR);
        live.sort_by_key(|r| !fresh(&r.id)); // stable: keeps the rotation among equals
        let r = live[attempt as usize % n];
        Some((r.id.clone(), r.addr.clone()))
    }

    /// Opens (once) shard `id`'s connection to `node`, fenced by the shard's `version`.
    fn open(
        &mut self,
        id: u32,
        node: &str,
        addr: &str,
        file: &str,
        version: u64,
    ) -> Result<(), String> {
        let key = (id, node.to_string());
        if !self.kvs.contains_key(&key) {
            let mut cl = connect_as(addr, &self.creds).map_err(|e| e.to_string())?;
            cl.set_fence(Some(version));
            let kv = RemoteKv::open(cl, file, self.cache_levels).map_err(|e| e.to_string())?;
            self.kvs.insert(key.clone(), kv);
        }
        let kv = self.kvs.get_mut(&key).expect("inserted");
        kv.client().set_fence(Some(version));
        Ok(())
    }
}

/// One shard's part of a call: the keys' positions in the call and the keys.
struct Batch {
    id: u32,
    idx: Vec<usize>,
    keys: Vec<u64>,
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
