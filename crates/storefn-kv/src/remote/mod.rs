//! BPF-KV lookups against a remote server: `rpc-read` (one READ per hop: disaggregated storage
//! without pushdown) and `pushdown` (one XRP request per lookup running the same `kv_lookup`
//! program as the local `--path xrp`, batched for many keys).
//!
//! Staleness (BPF-oF): the client keeps the file's version with its sidecar and cached top
//! levels. Every reply carries the version it was served from; a reply from another version
//! (the tree was compacted and renamed over) drops the cache, reloads the sidecar and levels,
//! and redoes the lookup, so a lookup never mixes two trees and never returns a wrong value.

#[cfg(feature = "bench")]
pub mod bench;
mod split;

pub use split::PushSent;

use std::path::Path;

use crate::format::{
    Meta, NodeSize, LOOKUP_OFF_FOUND, LOOKUP_OFF_KEY, LOOKUP_OFF_VALUE, META_BYTES, VALUE_BYTES,
};
use crate::store::{Shape, Step};
use crate::xrp_paths::LOOKUP_OFF_ERR;
use crate::KvError;

use crate::limits::MAX_STALE_RETRIES;
use storefn_wire::limits::MAX_READ_BYTES;
use storefn_wire::{Client, ClientError, FileVersion, ProgHash, Request, PROG_TYPE_XRP};

/// Bytes of final scratch an XRP lookup returns: key, found, value and our program's state
/// through its `err` word.
pub const LOOKUP_OUT_BYTES: u32 = (LOOKUP_OFF_ERR + 8) as u32;

/// Scratch an XRP lookup sends: the key at its offset.
const LOOKUP_SCRATCH_BYTES: usize = LOOKUP_OFF_KEY + 8;

/// The scratch of a lookup of `key`.
fn lookup_scratch(key: u64) -> [u8; LOOKUP_SCRATCH_BYTES] {
    let mut s = [0u8; LOOKUP_SCRATCH_BYTES];
    s[LOOKUP_OFF_KEY..].copy_from_slice(&key.to_le_bytes());
    s
}

/// The XRP request of one lookup: the chain starts at the node at `offset` (`len` bytes).
fn xrp_req<'a>(
    db: &'a str,
    len: u32,
    offset: u64,
    hash: &'a ProgHash,
    scratch: &'a [u8; LOOKUP_SCRATCH_BYTES],
) -> Request<'a> {
    Request::Xrp { path: db.as_bytes(), offset, len, hash, scratch, out_len: LOOKUP_OUT_BYTES }
}

/// Which remote path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemotePath {
    /// One READ per hop.
    RpcRead,
    /// One XRP request per lookup (a batch of lookups per frame).
    Pushdown,
}

impl std::str::FromStr for RemotePath {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "rpc-read" => Ok(Self::RpcRead),
            "pushdown" => Ok(Self::Pushdown),
            _ => Err(format!("--path {s}: expected rpc-read or pushdown with --remote")),
        }
    }
}

/// Why a remote lookup failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteKvError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("{db}: {why}")]
    Corrupt { db: String, why: String },
    /// A node the shape's checks refused (the store's `CorruptNode`, naming its offset).
    #[error(transparent)]
    Node(#[from] KvError),
    #[error("{db}: the file kept changing ({MAX_STALE_RETRIES} reloads in one lookup)")]
    Unstable { db: String },
}

/// Counters of a remote store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RemoteStats {
    pub lookups: u64,
    /// Request frames sent for lookups (each one network round trip).
    pub round_trips: u64,
    /// Cache reloads after a version change.
    pub reloads: u64,
    /// Pushdown lookups redone with READs (the program flagged an inconsistency).
    pub fallbacks: u64,
    /// Block reads on the server: one per READ, a chain's hops per XRP.
    pub hops: u64,
}

/// A remote BPF-KV database.
#[derive(Debug)]
pub struct RemoteKv {
    client: Client,
    db: String,
    meta_path: String,
    /// The tree the cache describes, and the node checks every lookup path applies.
    shape: Shape,
    version: FileVersion,
    cache_levels: u32,
    /// Levels `0..cache_levels`, exactly the file's first bytes (levels are contiguous).
    cache: Vec<u8>,
    hash: Option<ProgHash>,
    stats: RemoteStats,
}

fn stale() -> ClientError {
    ClientError::Status { op: "lookup", status: u16::MAX, name: "STALE", message: String::new() }
}

fn is_stale(e: &RemoteKvError) -> bool {
    matches!(e, RemoteKvError::Client(ClientError::Status { status: u16::MAX, .. }))
}

impl RemoteKv {
    /// Opens `db` (a path relative to the served directory) through `client`.
    ///
    /// # Errors
    /// Connection errors, a missing or corrupt sidecar, a file whose size disagrees.
    pub fn open(client: Client, db: &str, cache_levels: u32) -> Result<Self, RemoteKvError> {
        let mut kv = Self {
            client,
            db: db.to_string(),
            meta_path: format!("{db}.meta"),
            shape: Shape::new(
                Path::new(db),
                Meta::plan(NodeSize::B512, 1)
                    .map_err(|e| RemoteKvError::Corrupt { db: db.into(), why: e.to_string() })?,
            ),
            version: FileVersion::default(),
            cache_levels,
            cache: Vec::new(),
            hash: None,
            stats: RemoteStats::default(),
        };
        kv.load()?;
        Ok(kv)
    }

    fn corrupt(&self, why: String) -> RemoteKvError {
        RemoteKvError::Corrupt { db: self.db.clone(), why }
    }

    fn read_meta(&mut self) -> Result<Meta, RemoteKvError> {
        let r = self.client.one(&Request::Read {
            path: self.meta_path.as_bytes(),
            offset: 0,
            len: META_BYTES as u32,
        })?;
        Meta::decode(&r.data, std::path::Path::new(&self.meta_path))
            .map_err(|e| self.corrupt(e.to_string()))
    }

    /// Loads the sidecar, the file's version and the cached levels, consistently: the sidecar
    /// is read before and after, and every level read must carry the same version.
    fn load(&mut self) -> Result<(), RemoteKvError> {
        for _ in 0..MAX_STALE_RETRIES {
            let m1 = self.read_meta()?;
            let st = self.client.one(&Request::Stat { path: self.db.as_bytes() })?;
            if st.value != m1.file_bytes {
                continue; // between the two renames of a compaction
            }
            let nb = m1.node_size.bytes() as u64;
            let starts = m1.level_starts();
            let k = self.cache_levels.min(m1.layers) as usize;
            let bytes = starts.get(k).copied().unwrap_or(m1.total_nodes) * nb;
            let reqs: Vec<Request<'_>> = (0..bytes.div_ceil(u64::from(MAX_READ_BYTES)))
                .map(|i| {
                    let off = i * u64::from(MAX_READ_BYTES);
                    Request::Read {
                        path: self.db.as_bytes(),
                        offset: off,
                        len: (bytes - off).min(u64::from(MAX_READ_BYTES)) as u32,
                    }
                })
                .collect();
            let replies = if reqs.is_empty() { Vec::new() } else { self.client.call(&reqs)? };
            let mut cache = Vec::with_capacity(usize::try_from(bytes).expect("cache fits memory"));
            let mut same = true;
            for r in replies {
                let r = r.ok("READ")?;
                same &= r.version == st.version;
                cache.extend_from_slice(&r.data);
            }
            let m2 = self.read_meta()?;
            if !same || m2 != m1 {
                continue;
            }
            self.shape = Shape::new(Path::new(&self.db), m1);
            self.version = st.version;
            self.cache = cache;
            return Ok(());
        }
        Err(RemoteKvError::Unstable { db: self.db.clone() })
    }

    /// The sidecar of the tree the cache describes.
    #[must_use]
    pub fn meta(&self) -> &Meta {
        self.shape.meta()
    }

    #[must_use]
    pub fn stats(&self) -> RemoteStats {
        self.stats
    }

    /// The client (its counters, or to send other requests).
    pub fn client(&mut self) -> &mut Client {
        &mut self.client
    }

    /// Walks the cached levels in memory (the file's own bytes) with the store's node checks:
    /// the first step that needs the server.
    fn start(&self, key: u64) -> Result<Step, RemoteKvError> {
        let nb = self.meta().node_size.bytes() as u64;
        let (mut offset, mut level) = (0u64, 0u32);
        while offset + nb <= self.cache.len() as u64 {
            let node = &self.cache[offset as usize..(offset + nb) as usize];
            match self.shape.on_node(key, offset, level, node)? {
                Step::Node { offset: o, level: l } => (offset, level) = (o, l),
                other => return Ok(other),
            }
        }
        Ok(Step::Node { offset, level })
    }

    fn node_len(&self) -> u32 {
        u32::try_from(self.meta().node_size.bytes()).expect("node sizes are small")
    }

    fn check(&self, v: FileVersion) -> Result<(), RemoteKvError> {
        if v == self.version {
            Ok(())
        } else {
            Err(RemoteKvError::Client(stale()))
        }
    }

    fn read_one(&mut self, offset: u64, len: u32) -> Result<Vec<u8>, RemoteKvError> {
        let r = self.client.one(&Request::Read { path: self.db.as_bytes(), offset, len })?;
        self.stats.round_trips += 1;
        self.stats.hops += 1;
        self.check(r.version)?;
        Ok(r.data)
    }

    /// One lookup with READs from `step` (rpc-read, or a pushdown fallback).
    fn walk_reads(
        &mut self,
        key: u64,
        mut step: Step,
    ) -> Result<Option<[u8; VALUE_BYTES]>, RemoteKvError> {
        let nb = u32::try_from(self.meta().node_size.bytes()).expect("small");
        for _ in 0..=self.meta().layers {
            step = match step {
                Step::Done(v) => return Ok(v),
                Step::Value { offset: off } => {
                    let d = self.read_one(off, VALUE_BYTES as u32)?;
                    return Ok(Some(d[..VALUE_BYTES].try_into().expect("64 bytes")));
                }
                Step::Node { offset, level } => {
                    let d = self.read_one(offset, nb)?;
                    self.shape.on_node(key, offset, level, &d)?
                }
            };
        }
        Err(self.corrupt("lookup deeper than the tree".into()))
    }

    /// Loads the built-in lookup program for this tree's node size (once per client).
    fn prog(&mut self) -> Result<ProgHash, RemoteKvError> {
        if let Some(h) = self.hash {
            return Ok(h);
        }
        // The storefn ABI has a program for every node size: this cannot fail.
        let elf = crate::program::builtin_lookup_elf(self.meta().node_size, crate::Abi::Storefn)
            .expect("storefn lookup programs exist for every node size");
        let h = self.client.load_prog(PROG_TYPE_XRP, b"", elf)?;
        self.hash = Some(h);
        Ok(h)
    }

    /// Parses a pushdown reply: `None` = the program flagged an inconsistency (fall back).
    fn parse_xrp(&self, data: &[u8]) -> Result<Option<Option<[u8; VALUE_BYTES]>>, RemoteKvError> {
        if data.len() < LOOKUP_OUT_BYTES as usize {
            return Err(self.corrupt("short XRP scratch".into()));
        }
        if data[LOOKUP_OFF_ERR..LOOKUP_OFF_ERR + 8] != [0; 8] {
            return Ok(None);
        }
        if data[LOOKUP_OFF_FOUND] == 0 {
            return Ok(Some(None));
        }
        Ok(Some(Some(
            data[LOOKUP_OFF_VALUE..LOOKUP_OFF_VALUE + VALUE_BYTES].try_into().expect("64"),
        )))
    }

    /// Looks `keys` up on `path`; pushdown sends every lookup of the batch in one frame.
    ///
    /// # Errors
    /// Connection errors, a corrupt tree, a file that keeps changing.
    pub fn get_many(
        &mut self,
        keys: &[u64],
        path: RemotePath,
    ) -> Result<Vec<Option<[u8; VALUE_BYTES]>>, RemoteKvError> {
        self.stats.lookups += keys.len() as u64;
        let mut out = vec![None; keys.len()];
        let mut todo: Vec<usize> = (0..keys.len()).collect();
        for _ in 0..MAX_STALE_RETRIES {
            let res = match path {
                RemotePath::RpcRead => self.rpc_many(keys, &mut todo, &mut out),
                RemotePath::Pushdown => self.push_many(keys, &mut todo, &mut out),
            };
            match res {
                Ok(()) if todo.is_empty() => return Ok(out),
                Ok(()) => {}
                Err(e) if is_stale(&e) => {}
                Err(e) => return Err(e),
            }
            self.stats.reloads += 1;
            self.load()?;
        }
        Err(RemoteKvError::Unstable { db: self.db.clone() })
    }

    /// One lookup.
    ///
    /// # Errors
    /// As [`RemoteKv::get_many`].
    pub fn get(
        &mut self,
        key: u64,
        path: RemotePath,
    ) -> Result<Option<[u8; VALUE_BYTES]>, RemoteKvError> {
        Ok(self.get_many(&[key], path)?.remove(0))
    }

    /// Pushdown lookups kept `window` in flight on one connection (frames of `per_frame`
    /// lookups, refilled as replies arrive), like the local `xrp-batch` keeps chains in
    /// flight. `lat_ns[i]` is lookup i's time from its frame's send to its reply. Lookups
    /// that need more (a version change, the program's `err` flag, all levels cached) are
    /// redone afterwards with [`RemoteKv::get_many`] and their time added.
    ///
    /// # Errors
    /// As [`RemoteKv::get_many`].
    pub fn pushdown_pipelined(
        &mut self,
        keys: &[u64],
        window: usize,
        per_frame: usize,
        lat_ns: &mut Vec<u64>,
    ) -> Result<Vec<Option<[u8; VALUE_BYTES]>>, RemoteKvError> {
        use std::collections::HashMap;
        use std::time::Instant;
        let hash = self.prog()?;
        let window = window.clamp(1, self.client.max_in_flight());
        let per_frame = per_frame.clamp(1, window);
        self.stats.lookups += keys.len() as u64;
        let mut out = vec![None; keys.len()];
        lat_ns.clear();
        lat_ns.resize(keys.len(), 0);
        let mut sent_at: HashMap<u64, (usize, Instant)> = HashMap::with_capacity(window);
        let mut redo = Vec::new();
        let mut got = Vec::with_capacity(window);
        let mut next = 0;
        let before = self.client.round_trips;
        while next < keys.len() || !sent_at.is_empty() {
            while next < keys.len() && sent_at.len() + per_frame <= window.max(per_frame) {
                let mut batch: Vec<(usize, u64)> = Vec::with_capacity(per_frame);
                while next < keys.len() && batch.len() < per_frame {
                    match self.start(keys[next])? {
                        Step::Node { offset, .. } => batch.push((next, offset)),
                        _ => redo.push(next),
                    }
                    next += 1;
                }
                if batch.is_empty() {
                    continue;
                }
                let scratch: Vec<_> = batch.iter().map(|&(i, _)| lookup_scratch(keys[i])).collect();
                let len = self.node_len();
                let reqs: Vec<Request<'_>> = batch
                    .iter()
                    .zip(&scratch)
                    .map(|(&(_, off), s)| xrp_req(&self.db, len, off, &hash, s))
                    .collect();
                let first = self.client.send(&reqs)?;
                let t = Instant::now();
                for (k, &(i, _)) in batch.iter().enumerate() {
                    sent_at.insert(first + k as u64, (i, t));
                }
            }
            if sent_at.is_empty() {
                break;
            }
            got.clear();
            self.client.recv(|id, r| got.push((id, r)))?;
            for (id, r) in got.drain(..) {
                let (i, t) = sent_at.remove(&id).ok_or(ClientError::UnknownId(id))?;
                lat_ns[i] = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
                if r.status != 0 || r.version != self.version {
                    redo.push(i);
                    continue;
                }
                self.stats.hops += u64::from(r.hops);
                match self.parse_xrp(&r.data)? {
                    Some(v) => out[i] = v,
                    None => redo.push(i),
                }
            }
        }
        self.stats.round_trips += self.client.round_trips - before;
        for i in redo {
            let t = Instant::now();
            out[i] = self.get(keys[i], RemotePath::Pushdown)?;
            self.stats.lookups -= 1; // counted above already
            lat_ns[i] += u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
        }
        Ok(out)
    }

    /// Lookups with READs; finished ones leave `todo`. Stops at the first stale reply.
    fn rpc_many(
        &mut self,
        keys: &[u64],
        todo: &mut Vec<usize>,
        out: &mut [Option<[u8; VALUE_BYTES]>],
    ) -> Result<(), RemoteKvError> {
        while let Some(&i) = todo.last() {
            let step = self.start(keys[i])?;
            out[i] = self.walk_reads(keys[i], step)?;
            todo.pop();
        }
        Ok(())
    }

    /// Pushdown lookups of `todo`, one frame; replies from another version stay in `todo`.
    fn push_many(
        &mut self,
        keys: &[u64],
        todo: &mut Vec<usize>,
        out: &mut [Option<[u8; VALUE_BYTES]>],
    ) -> Result<(), RemoteKvError> {
        let hash = self.prog()?;
        let mut sent: Vec<(usize, u64)> = Vec::with_capacity(todo.len());
        let mut left = Vec::new();
        for &i in todo.iter() {
            match self.start(keys[i])? {
                Step::Node { offset, .. } => sent.push((i, offset)),
                step => match self.walk_reads(keys[i], step) {
                    Ok(v) => out[i] = v,
                    Err(e) if is_stale(&e) => left.push(i),
                    Err(e) => return Err(e),
                },
            }
        }
        if !sent.is_empty() {
            let scratch: Vec<_> = sent.iter().map(|&(i, _)| lookup_scratch(keys[i])).collect();
            let len = self.node_len();
            let reqs: Vec<Request<'_>> = sent
                .iter()
                .zip(&scratch)
                .map(|(&(_, off), s)| xrp_req(&self.db, len, off, &hash, s))
                .collect();
            let before = self.client.round_trips;
            let replies = self.client.call(&reqs)?;
            self.stats.round_trips += self.client.round_trips - before;
            for (k, r) in replies.into_iter().enumerate() {
                let (i, _) = sent[k];
                let r = r.ok("XRP")?;
                self.stats.hops += u64::from(r.hops);
                if r.version != self.version {
                    left.push(i);
                    continue;
                }
                match self.parse_xrp(&r.data)? {
                    Some(v) => out[i] = v,
                    None => {
                        self.stats.fallbacks += 1;
                        let step = self.start(keys[i])?;
                        match self.walk_reads(keys[i], step) {
                            Ok(v) => out[i] = v,
                            Err(e) if is_stale(&e) => left.push(i),
                            Err(e) => return Err(e),
                        }
                    }
                }
            }
        }
        *todo = left;
        Ok(())
    }
}
