//! Lookups: every key through every path and cache setting, misses, partial trees, corruption.

mod common;

use std::sync::Arc;

use common::TempDir;
use storefn_kv::bpfkv_value;
use storefn_kv::layout::tree::FILE_MASK;
use storefn_kv::meta_path;
use storefn_kv::BlockLru;
use storefn_kv::{build_tree, create_bpfkv, KvError, LookupPath, NodeSize, ReadPath, Store};

fn paths(store: &Arc<Store>) -> Vec<Box<dyn LookupPath>> {
    vec![
        Box::new(ReadPath::new(Arc::clone(store), 0)),
        Box::new(ReadPath::new(Arc::clone(store), 64 << 10)),
    ]
}

#[test]
fn every_key_found_on_every_path_and_cache_depth_3_layers() {
    let dir = TempDir::new("every");
    let p = dir.join("db");
    create_bpfkv(&p, NodeSize::B512, 3, &mut common::noop()).unwrap();
    for cache in 0..=3 {
        let store = Arc::new(Store::open(&p, cache).unwrap());
        for (n, mut path) in paths(&store).into_iter().enumerate() {
            // Every key once (cache 0, first path); a stride elsewhere keeps the test short.
            let stride = if cache == 0 && n == 0 { 1 } else { 13 };
            for key in (0..29791u64).step_by(stride).chain([29790]) {
                assert_eq!(
                    path.get(key).unwrap(),
                    Some(bpfkv_value(key)),
                    "key {key} cache {cache}"
                );
            }
            for key in [29791, 29792, 1 << 40, u64::MAX] {
                assert_eq!(path.get(key).unwrap(), None, "miss {key}");
            }
            let s = path.stats();
            let hits = (0..29791u64).step_by(stride).count() as u64 + 1;
            assert_eq!(s.lookups, hits + 4);
            // Uncached reads: (3 - cache) node reads + 1 value read per hit.
            if s.cache_hits == 0 {
                let hits_ios = hits * (3 - u64::from(cache) + 1);
                assert!(s.ios >= hits_ios, "{} ios < {hits_ios}", s.ios);
            }
        }
    }
}

#[test]
fn node_4096_every_key_found() {
    let dir = TempDir::new("n4096");
    let p = dir.join("db");
    create_bpfkv(&p, NodeSize::B4096, 2, &mut common::noop()).unwrap();
    for cache in [0, 1, 2] {
        let store = Arc::new(Store::open(&p, cache).unwrap());
        let mut path = ReadPath::new(Arc::clone(&store), 0);
        for key in (0..65025u64).step_by(7).chain([65024]) {
            assert_eq!(path.get(key).unwrap(), Some(bpfkv_value(key)), "key {key}");
        }
        assert_eq!(path.get(65025).unwrap(), None);
    }
}

/// Sparse keys, partial last nodes at every level, a key of u64::MAX.
#[test]
fn partial_tree_hits_and_misses() {
    let dir = TempDir::new("sparse");
    let p = dir.join("db");
    let mut keys: Vec<u64> = (0..1000u64).map(|i| i * 3 + 1).collect();
    keys.push(u64::MAX);
    let val = |k: u64| {
        let mut v = [0u8; 64];
        v[..8].copy_from_slice(&k.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes());
        v
    };
    let meta =
        build_tree(&p, NodeSize::B512, keys.iter().map(|&k| (k, val(k))), &mut common::noop())
            .unwrap();
    assert_eq!(meta.layers, 3); // 1001 keys: 33 leaves, 2 internal, 1 root
    for cache in 0..=3 {
        let store = Arc::new(Store::open(&p, cache).unwrap());
        let mut path = ReadPath::new(Arc::clone(&store), 0);
        for &k in &keys {
            assert_eq!(path.get(k).unwrap(), Some(val(k)), "key {k}");
        }
        for miss in [0, 2, 3, 3000, 3002, 1 << 50, u64::MAX - 1] {
            assert_eq!(path.get(miss).unwrap(), None, "miss {miss}");
        }
    }
    // An empty tree is one leaf of unused slots.
    let e = dir.join("empty");
    let m = build_tree(&e, NodeSize::B512, std::iter::empty(), &mut common::noop()).unwrap();
    assert_eq!((m.layers, m.total_nodes, m.key_count), (1, 1, 0));
    let store = Arc::new(Store::open(&e, 0).unwrap());
    assert_eq!(ReadPath::new(store, 0).get(u64::MAX).unwrap(), None);
}

#[test]
fn unsorted_or_duplicate_input_is_rejected() {
    let dir = TempDir::new("unsorted");
    let p = dir.join("db");
    let v = [0u8; 64];
    let e = build_tree(&p, NodeSize::B512, [(1, v), (1, v)].into_iter(), &mut common::noop());
    assert!(matches!(e, Err(KvError::Unsorted { index: 1, key: 1, prev: 1 })), "{e:?}");
    let e = build_tree(&p, NodeSize::B512, [(5, v), (2, v)].into_iter(), &mut common::noop());
    assert!(matches!(e, Err(KvError::Unsorted { index: 1, key: 2, prev: 5 })), "{e:?}");
    assert!(!meta_path(&p).exists(), "no sidecar for a failed build");
}

#[test]
fn missing_or_corrupt_sidecar_is_a_clear_error() {
    let dir = TempDir::new("sidecar");
    let p = dir.join("db");
    create_bpfkv(&p, NodeSize::B512, 2, &mut common::noop()).unwrap();
    let mp = meta_path(&p);
    let good = std::fs::read(&mp).unwrap();

    let mut bad = good.clone();
    bad[20] ^= 1; // fan-out field
    std::fs::write(&mp, &bad).unwrap();
    let e = Store::open(&p, 0).unwrap_err();
    assert!(matches!(e, KvError::MetaCorrupt { .. }), "{e}");
    assert!(e.to_string().contains("checksum"), "{e}");

    std::fs::write(&mp, &good[..32]).unwrap();
    let e = Store::open(&p, 0).unwrap_err();
    assert!(e.to_string().contains("32 bytes, expected 64"), "{e}");

    // Without a sidecar, BPF-KV's `create` shape is inferred from the size and root.
    std::fs::remove_file(&mp).unwrap();
    assert_eq!(Store::open(&p, 0).unwrap().meta().encode().to_vec(), good);

    // A sidecar for a different file: size mismatch.
    std::fs::write(&mp, &good).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    f.set_len(good.len() as u64 * 1000).unwrap();
    let e = Store::open(&p, 0).unwrap_err();
    assert!(matches!(e, KvError::SizeMismatch { .. }), "{e}");
}

#[test]
fn corrupt_node_pointer_is_reported_with_its_offset() {
    let dir = TempDir::new("corrupt");
    let p = dir.join("db");
    create_bpfkv(&p, NodeSize::B512, 2, &mut common::noop()).unwrap();
    let mut bytes = std::fs::read(&p).unwrap();
    // Root ptr[0] (offset 264): clear bit 63; root ptr[1]: point back at the root.
    bytes[264..272].copy_from_slice(&512u64.to_le_bytes());
    bytes[272..280].copy_from_slice(&FILE_MASK.to_le_bytes());
    // Leaf 3's ptr[0]: value pointer past the log.
    let o = 3 * 512 + 264;
    bytes[o..o + 8].copy_from_slice(&(FILE_MASK | (1 << 40)).to_le_bytes());
    std::fs::write(&p, &bytes).unwrap();
    let store = Arc::new(Store::open(&p, 0).unwrap());
    let mut path = ReadPath::new(Arc::clone(&store), 0);
    let e = path.get(0).unwrap_err();
    assert!(matches!(e, KvError::CorruptNode { offset: 0, .. }), "{e}");
    assert!(e.to_string().contains("lacks bit 63"), "{e}");
    let e = path.get(31).unwrap_err();
    assert!(e.to_string().contains("outside level 1"), "{e}");
    let e = path.get(62).unwrap_err();
    assert!(matches!(e, KvError::CorruptNode { offset: 1536, .. }), "{e}");
    assert_eq!(path.get(100).unwrap(), Some(bpfkv_value(100)));
    // The cache refuses the same root when it is loaded.
    let e = Store::open(&p, 2).unwrap_err();
    assert!(matches!(e, KvError::CorruptNode { offset: 0, .. }), "{e}");
}

#[test]
fn lru_evicts_least_recently_used() {
    let mut lru = BlockLru::new(2 * 512, 512);
    let mut out = [0u8; 512];
    lru.put(0, &[1; 512]);
    lru.put(512, &[2; 512]);
    assert!(lru.get(0, &mut out)); // 0 is now most recent
    lru.put(1024, &[3; 512]); // evicts 512
    assert!(!lru.get(512, &mut out));
    assert!(lru.get(0, &mut out) && out[0] == 1);
    assert!(lru.get(1024, &mut out) && out[0] == 3);
    assert_eq!(lru.len(), 2);
}
