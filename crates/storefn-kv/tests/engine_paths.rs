//! The io-engine paths (`uring`, `xrp`, `xrp-batch`): same bytes as `read` for every key, cache
//! depths, misses; failing chains fall back to `read` and are counted; user programs fail loudly.

mod common;

use std::sync::Arc;

use common::TempDir;
use storefn_kv::bpfkv_value;
use storefn_kv::harness::bench::{open_path, PathOptions};
use storefn_kv::Lookup;
use storefn_kv::{build_tree, create_bpfkv, LookupPath, NodeSize, Store};
use storefn_kv::{ChainOptions, ProgSource, XrpPath};

#[test]
fn every_key_via_every_engine_path_and_cache_depth() {
    let dir = TempDir::new("engine-every");
    let p = dir.join("db");
    create_bpfkv(&p, NodeSize::B512, 3, &mut common::noop()).unwrap();
    let keys: Vec<u64> = (0..29791u64).step_by(5).chain([29790, 29791, 1 << 33]).collect();
    for cache in 0..=3 {
        let store = Arc::new(Store::open(&p, cache).unwrap());
        for name in ["uring", "xrp", "xrp-batch"] {
            let opts = PathOptions { batch: 16, ..PathOptions::default() };
            let mut path = open_path(name, &store, &opts).unwrap();
            let mut out: Vec<Lookup> = Vec::new();
            path.get_many(&keys, &mut out).unwrap();
            assert_eq!(out.len(), keys.len());
            for (k, l) in keys.iter().zip(&out) {
                let want = (*k < 29791).then(|| bpfkv_value(*k));
                assert_eq!(l.value, want, "{name} cache {cache} key {k}");
            }
            let s = path.stats();
            assert_eq!(s.fallbacks, 0, "{name}");
            // Hits cost (3 - cache) node reads + 1 value read; misses up to the leaf.
            let hits = keys.len() as u64 - 2;
            assert!(s.ios >= hits * (4 - u64::from(cache)), "{name} cache {cache}: {} ios", s.ios);
            assert_eq!(path.get(7).unwrap(), Some(bpfkv_value(7)));
        }
    }
}

#[test]
fn uring_lru_serves_repeated_blocks() {
    let dir = TempDir::new("engine-lru");
    let p = dir.join("db");
    create_bpfkv(&p, NodeSize::B512, 3, &mut common::noop()).unwrap();
    let store = Arc::new(Store::open(&p, 0).unwrap());
    let mut path = open_path(
        "uring",
        &store,
        &PathOptions { cache_bytes: 1 << 20, batch: 1, ..Default::default() },
    )
    .unwrap();
    for _ in 0..3 {
        assert_eq!(path.get(4242).unwrap(), Some(bpfkv_value(4242)));
    }
    let s = path.stats();
    assert_eq!((s.ios, s.cache_hits), (4, 8), "first lookup reads 4 blocks, then all hit");
}

#[test]
fn node_4096_and_partial_tree_via_xrp() {
    let dir = TempDir::new("engine-4k");
    let p = dir.join("db");
    let keys: Vec<u64> = (0..70_000u64).map(|i| i * 2 + 1).collect();
    build_tree(&p, NodeSize::B4096, keys.iter().map(|&k| (k, bpfkv_value(k))), &mut common::noop())
        .unwrap();
    let store = Arc::new(Store::open(&p, 0).unwrap());
    for name in ["uring", "xrp", "xrp-batch"] {
        let mut path =
            open_path(name, &store, &PathOptions { batch: 8, ..Default::default() }).unwrap();
        for &k in keys.iter().step_by(211) {
            assert_eq!(path.get(k).unwrap(), Some(bpfkv_value(k)), "{name} {k}");
            assert_eq!(path.get(k + 1).unwrap(), None, "{name} {}", k + 1);
        }
    }
}

#[test]
fn failing_chains_fall_back_to_read_and_are_counted() {
    let dir = TempDir::new("engine-fallback");
    let p = dir.join("db");
    create_bpfkv(&p, NodeSize::B512, 3, &mut common::noop()).unwrap();
    let store = Arc::new(Store::open(&p, 0).unwrap());
    // A 3-layer lookup needs 4 hops; a limit of 2 fails every chain.
    for batch in [false, true] {
        let mut path = XrpPath::new(
            Arc::clone(&store),
            &ProgSource::BuiltIn,
            ChainOptions { batch, chains: 8, max_hops: Some(2), ..Default::default() },
        )
        .unwrap();
        let keys: Vec<u64> = (0..100u64).map(|i| i * 297).collect();
        let mut out = Vec::new();
        path.get_many(&keys, &mut out).unwrap();
        for (k, l) in keys.iter().zip(&out) {
            assert_eq!(l.value, Some(bpfkv_value(*k)), "batch {batch} key {k}");
        }
        assert_eq!(path.stats().fallbacks, 100, "batch {batch}");
    }
}

#[test]
fn user_programs_fail_loudly_without_fallback() {
    let dir = TempDir::new("engine-user");
    let p = dir.join("db");
    create_bpfkv(&p, NodeSize::B512, 2, &mut common::noop()).unwrap();
    let store = Arc::new(Store::open(&p, 0).unwrap());
    let good = ProgSource::User { elf: storefn_progs::must("kv_lookup").to_vec(), section: None };
    let mut path = XrpPath::new(Arc::clone(&store), &good, ChainOptions::default()).unwrap();
    assert_eq!(path.get(960).unwrap(), Some(bpfkv_value(960)));
    assert_eq!(path.get(961).unwrap(), None);
    let bad =
        ProgSource::User { elf: storefn_progs::must("test/write_data").to_vec(), section: None };
    let mut path = XrpPath::new(Arc::clone(&store), &bad, ChainOptions::default()).unwrap();
    let e = path.get(1).unwrap_err();
    // The chain's own error, typed: a fault of the program, not raw mode's Stale.
    assert!(matches!(e.chain_error(), Some(storefn_io::ChainError::Fault { .. })), "{e:?}");
    assert!(e.to_string().contains("write of 1 bytes"), "{e}");
    assert_eq!(path.stats().fallbacks, 0);
}
