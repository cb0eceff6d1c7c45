//! `storefn cluster create`: one BPF-KV keyspace (keys `0..31^L`, BPF-KV's values) split into
//! S key-range shards, each a complete BPF-KV tree over its range, recorded in etcd with one
//! transaction and copied to R live servers each.

use std::path::Path;

use storefn_kv::bpfkv_value;
use storefn_kv::meta_path;
use storefn_kv::NodeSize;

use crate::copy::{copy_to, update_shard, Creds, ShardBytes};
use crate::etcd::{Etcd, Guard, Op};
use crate::layout::{
    check_name, coll_key, encode, shard_file, shard_key, CollectionRecord, NodeRecord, Routing,
    ShardRecord,
};
use crate::limits::{MAX_REPLICAS, MAX_SHARDS};
use crate::placement::load_nodes;
use crate::ClusterError;

/// Keys of an `layers`-level BPF-KV keyspace (31^layers).
///
/// # Errors
/// `layers` outside 1..=the builder's maximum.
pub fn keyspace(layers: u32) -> Result<u64, ClusterError> {
    if !(1..=storefn_kv::limits::MAX_CREATE_LAYERS).contains(&layers) {
        return Err(ClusterError::Invalid(format!(
            "--layers {layers}: must be 1..={}",
            storefn_kv::limits::MAX_CREATE_LAYERS
        )));
    }
    Ok(31u64.pow(layers))
}

/// The key ranges (`lo..=hi`) of `shards` near-equal shards of `keys` keys.
#[must_use]
pub fn split(keys: u64, shards: u32) -> Vec<(u64, u64)> {
    let s = u64::from(shards);
    (0..s).map(|i| (keys * i / s, keys * (i + 1) / s - 1)).collect()
}

/// What `cluster create` makes.
#[derive(Debug, Clone)]
pub struct CreateSpec {
    pub collection: String,
    pub layers: u32,
    pub shards: u32,
    pub replicas: u32,
}

impl CreateSpec {
    fn check(&self) -> Result<u64, ClusterError> {
        check_name("collection", &self.collection)?;
        let keys = keyspace(self.layers)?;
        if !(1..=MAX_SHARDS).contains(&self.shards) || u64::from(self.shards) > keys {
            return Err(ClusterError::Invalid(format!(
                "--shards {}: must be 1..={MAX_SHARDS} and at most the {keys} keys",
                self.shards
            )));
        }
        if !(1..=MAX_REPLICAS).contains(&self.replicas) {
            return Err(ClusterError::Invalid(format!(
                "--replicas {}: must be 1..={MAX_REPLICAS}",
                self.replicas
            )));
        }
        Ok(keys)
    }
}

/// Builds the tree of keys `lo..=hi` in `dir` and returns its bytes.
///
/// # Errors
/// The builder's errors.
pub fn build_shard(dir: &Path, lo: u64, hi: u64) -> Result<ShardBytes, ClusterError> {
    let path = dir.join(format!("shard-{lo}-{hi}.kv"));
    let entries = (lo..=hi).map(|k| (k, bpfkv_value(k)));
    storefn_kv::build_tree(&path, NodeSize::B512, entries, &mut |_, _| {})
        .map_err(|e| ClusterError::Invalid(format!("building shard {lo}..={hi}: {e}")))?;
    let read = |p: &Path| {
        std::fs::read(p).map_err(|e| ClusterError::Invalid(format!("{}: {e}", p.display())))
    };
    let out = ShardBytes { file: read(&path)?, meta: read(&meta_path(&path))? };
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(meta_path(&path));
    Ok(out)
}

/// Creates collection `spec` and places every shard on `replicas` live servers (spread round
/// robin from the shard's id); `work` is a scratch directory for the shard files.
///
/// # Errors
/// Bad arguments, fewer live servers than replicas, a collection that exists, etcd or copy
/// failures (the records written stay: `cluster place` finishes them).
pub fn create(
    etcd: &Etcd,
    spec: &CreateSpec,
    work: &Path,
) -> Result<Vec<ShardRecord>, ClusterError> {
    create_as(etcd, spec, work, &Creds::default())
}

/// [`create`], copying as `creds` (servers started with a token file).
///
/// # Errors
/// As [`create`]; a server that refuses `creds`.
pub fn create_as(
    etcd: &Etcd,
    spec: &CreateSpec,
    work: &Path,
    creds: &Creds,
) -> Result<Vec<ShardRecord>, ClusterError> {
    let keys = spec.check()?;
    let (nodes, _) = load_nodes(etcd)?;
    if (nodes.len() as u32) < spec.replicas {
        return Err(ClusterError::Invalid(format!(
            "--replicas {}: only {} live servers ({:?})",
            spec.replicas,
            nodes.len(),
            nodes.keys().collect::<Vec<_>>()
        )));
    }
    let c = &spec.collection;
    let mut built = Vec::new();
    let mut ops = vec![Op::Put {
        key: coll_key(c),
        value: encode(&CollectionRecord {
            name: c.clone(),
            routing: Routing::KeyRange,
            shards: spec.shards,
            replicas: spec.replicas,
            layers: spec.layers,
        }),
        lease: None,
    }];
    for (id, (lo, hi)) in split(keys, spec.shards).into_iter().enumerate() {
        let id = id as u32;
        let b = build_shard(work, lo, hi)?;
        let rec = ShardRecord {
            id,
            lo,
            hi,
            file: shard_file(c, id),
            bytes: b.file.len() as u64,
            meta_bytes: b.meta.len() as u64,
            crc32: crc32fast::hash(&b.file),
            meta_crc32: crc32fast::hash(&b.meta),
            replicas: Vec::new(),
            pending: Vec::new(),
            version: 1,
        };
        ops.push(Op::Put { key: shard_key(c, id), value: encode(&rec), lease: None });
        built.push(b);
    }
    // Mod revision 0: the collection must not exist yet.
    if !etcd.txn(&[Guard { key: coll_key(c), mod_revision: 0 }], &ops)? {
        return Err(ClusterError::Invalid(format!("collection {c:?} exists already")));
    }
    let live: Vec<&NodeRecord> = nodes.values().collect();
    let mut out = Vec::new();
    for (id, b) in built.iter().enumerate() {
        let targets: Vec<&NodeRecord> =
            (0..spec.replicas as usize).map(|k| live[(id + k) % live.len()]).collect();
        // Every target pending at once: the leader counts copies under way and adds none.
        update_shard(etcd, &shard_key(c, id as u32), &[], |s| {
            s.pending.extend(targets.iter().map(|t| t.id.clone()));
            true
        })?;
        let mut last = None;
        for t in targets {
            last = Some(copy_to(etcd, c, id as u32, t, b, creds)?);
        }
        out.extend(last);
    }
    Ok(out)
}
