//! Shared helpers for the engine's integration tests: temp files on a real file system (O_DIRECT
//! needs one; target/ is on ext4 here), random pointer structures and their plain-Rust model.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

#[allow(unused_imports)] // not every test binary skips
pub use storefn_testkit::skip;

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use storefn_io::{Engine, EngineConfig, FileId, IoMode};

/// A file removed when dropped.
#[derive(Debug)]
pub struct TmpFile {
    pub path: PathBuf,
}

impl Drop for TmpFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

// Relaxed: only uniqueness of the returned values matters.
static NEXT: AtomicU32 = AtomicU32::new(0);

pub fn tmp_file(name: &str, bytes: &[u8]) -> TmpFile {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let path = dir.join(format!("io-{name}-{}-{n}", std::process::id()));
    std::fs::write(&path, bytes).expect("write temp file");
    TmpFile { path }
}

pub fn engine_with(cfg: EngineConfig, f: &TmpFile) -> (Engine, FileId) {
    let mut e = Engine::new(cfg).expect("engine");
    let id = e.open(&f.path, IoMode::Direct).expect("open O_DIRECT");
    (e, id)
}

pub fn engine(f: &TmpFile) -> (Engine, FileId) {
    engine_with(EngineConfig::default(), f)
}

pub fn get_u64(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}

pub fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// Linked lists of 16-byte nodes `{u64 next; u64 payload}` at `stride`-spaced offsets (a stride
/// that is not a block multiple puts nodes across block boundaries). Offset 0 is never a node, so
/// next == 0 ends a list.
#[derive(Debug)]
pub struct Lists {
    pub bytes: Vec<u8>,
    pub heads: Vec<u64>,
}

pub fn random_lists(seed: u64, nodes: usize, lists: usize, stride: usize) -> Lists {
    assert!(stride >= 16);
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut bytes = vec![0u8; (nodes + 1) * stride];
    let mut order: Vec<usize> = (1..=nodes).collect();
    order.shuffle(&mut rng);
    let per = nodes / lists;
    let mut heads = Vec::new();
    for l in 0..lists {
        let members = &order[l * per..(l + 1) * per];
        heads.push((members[0] * stride) as u64);
        for (i, &m) in members.iter().enumerate() {
            let next = members.get(i + 1).map_or(0, |&n| (n * stride) as u64);
            put_u64(&mut bytes, m * stride, next);
            put_u64(&mut bytes, m * stride + 8, rng.gen::<u32>().into());
        }
    }
    Lists { bytes, heads }
}

/// The model: (sum of payloads, node count) of the list at `head`.
pub fn walk_list(bytes: &[u8], head: u64) -> (u64, u64) {
    let (mut at, mut sum, mut n) = (head as usize, 0u64, 0u64);
    loop {
        sum = sum.wrapping_add(get_u64(bytes, at + 8));
        n += 1;
        let next = get_u64(bytes, at);
        if next == 0 {
            return (sum, n);
        }
        at = next as usize;
    }
}

/// The list walk as a storage function: scratch[0..8] += payload, scratch[8..16] += 1.
pub fn list_walker(
) -> impl FnMut(&mut storefn_io::XrpCtx, &[u8], &mut [u8]) -> Result<u64, storefn_io::VmError> {
    storefn_io::func(|ctx, data, s| {
        let sum = get_u64(s, 0).wrapping_add(get_u64(data, 8));
        put_u64(s, 0, sum);
        put_u64(s, 8, get_u64(s, 8) + 1);
        let next = get_u64(data, 0);
        if next == 0 {
            ctx.done = 1;
        } else {
            ctx.next_addr[0] = next;
            ctx.size[0] = 16;
        }
        Ok(0)
    })
}

/// Search tree node (512 B): `{u64 leaf; u64 n; u64 key[30]; u64 ptr_or_val[30]}` — an internal
/// node's key[i] is the smallest key under ptr[i].
pub const NODE: usize = 512;
pub const NODE_MAX: usize = 30;

/// A node being built: (smallest key, entries (key, value or child id), leaf?).
type Pending = (u64, Vec<(u64, u64)>, bool);

#[derive(Debug)]
pub struct Tree {
    pub bytes: Vec<u8>,
    pub root: u64,
    pub map: BTreeMap<u64, u64>,
    pub depth: u32,
}

/// A random search tree over `keys` random keys with node fan-out 2..=max_fan, nodes placed at
/// shuffled 512 B slots (slot 0 unused).
pub fn random_tree(seed: u64, keys: usize, max_fan: usize) -> Tree {
    assert!((2..=NODE_MAX).contains(&max_fan));
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut map = BTreeMap::new();
    while map.len() < keys {
        map.insert(rng.gen_range(0..1u64 << 40), rng.gen::<u64>());
    }
    let mut level: Vec<Pending> = Vec::new();
    let entries: Vec<(u64, u64)> = map.iter().map(|(&k, &v)| (k, v)).collect();
    let mut i = 0;
    while i < entries.len() {
        let n = rng.gen_range(2..=max_fan).min(entries.len() - i);
        level.push((entries[i].0, entries[i..i + n].to_vec(), true));
        i += n;
    }
    let mut all: Vec<(Vec<(u64, u64)>, bool)> = Vec::new();
    let mut depth = 1;
    // Node ids are assigned as nodes are pushed into `all`; internal entries hold child ids.
    loop {
        let base = all.len();
        for (_, content, leaf) in &level {
            all.push((content.clone(), *leaf));
        }
        if level.len() == 1 {
            break;
        }
        let mut up = Vec::new();
        let mut j = 0;
        while j < level.len() {
            let n = rng.gen_range(2..=max_fan).min(level.len() - j);
            let content = (j..j + n).map(|c| (level[c].0, (base + c) as u64)).collect();
            up.push((level[j].0, content, false));
            j += n;
        }
        level = up;
        depth += 1;
    }
    let mut slots: Vec<u64> = (1..=all.len() as u64).collect();
    slots.shuffle(&mut rng);
    let mut bytes = vec![0u8; (all.len() + 1) * NODE];
    for (id, (content, leaf)) in all.iter().enumerate() {
        let at = slots[id] as usize * NODE;
        put_u64(&mut bytes, at, u64::from(*leaf));
        put_u64(&mut bytes, at + 8, content.len() as u64);
        for (e, &(k, v)) in content.iter().enumerate() {
            put_u64(&mut bytes, at + 16 + e * 8, k);
            let v = if *leaf { v } else { slots[v as usize] * NODE as u64 };
            put_u64(&mut bytes, at + 16 + NODE_MAX * 8 + e * 8, v);
        }
    }
    let root = slots[all.len() - 1] * NODE as u64;
    Tree { bytes, root, map, depth }
}

/// One step of a lookup in a node: Ok(Some(child offset)), or at a leaf Err(value if found).
pub fn node_step(node: &[u8], key: u64) -> Result<u64, Option<u64>> {
    let leaf = get_u64(node, 0) == 1;
    let n = get_u64(node, 8) as usize;
    let key_at = |e: usize| get_u64(node, 16 + e * 8);
    let val_at = |e: usize| get_u64(node, 16 + NODE_MAX * 8 + e * 8);
    if leaf {
        return Err((0..n.min(NODE_MAX)).find(|&e| key_at(e) == key).map(val_at));
    }
    let mut child = 0;
    for e in 1..n.min(NODE_MAX) {
        if key >= key_at(e) {
            child = e;
        }
    }
    Ok(val_at(child))
}
