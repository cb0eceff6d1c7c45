//! Range queries and aggregates against a plain scan of the file's leaves.

mod common;

use common::TempDir;
use rand::{Rng, SeedableRng};
use storefn_kv::layout::tree::FILE_MASK;
use storefn_kv::limits::RANGE_BATCH;
use storefn_kv::NodeView;
use storefn_kv::{aggregate, Agg, RangeScan};
use storefn_kv::{build_tree, create_bpfkv, NodeSize, Store};

/// Every (key, value) by walking the leaf level in file order: independent of `next` links.
fn plain_scan(p: &std::path::Path, store: &Store) -> Vec<(u64, [u8; 64])> {
    let bytes = std::fs::read(p).unwrap();
    let (lo, hi) = store.leaf_range();
    let nb = store.node_size().bytes();
    let mut out = Vec::new();
    for off in (lo as usize..hi as usize).step_by(nb) {
        let v = NodeView::new(&bytes[off..off + nb], store.node_size());
        for i in 0..store.node_size().fanout() {
            if v.ptr(i) & FILE_MASK != 0 {
                let vo = (v.ptr(i) & !FILE_MASK) as usize;
                out.push((v.key(i), bytes[vo..vo + 64].try_into().unwrap()));
            }
        }
    }
    out
}

fn check(p: &std::path::Path, seed: u64) {
    let store = Store::open(p, 0).unwrap();
    let all = plain_scan(p, &store);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let max = all.last().unwrap().0;
    let mut scan = RangeScan::new(&store);
    let mut cases = vec![(0, max), (0, 0), (max, max), (max + 1, u64::MAX), (5, 4)];
    for _ in 0..40 {
        let a = rng.gen_range(0..=max);
        let len = if rng.gen_bool(0.5) { rng.gen_range(0..100) } else { rng.gen_range(0..5000) };
        cases.push((a, a.saturating_add(len)));
    }
    for (a, b) in cases {
        let want: Vec<_> = all.iter().filter(|(k, _)| (a..=b).contains(k)).copied().collect();
        let got = scan.collect(a, b).unwrap();
        if store.node_size() == NodeSize::B512 && want.len() <= 1500 {
            // The kv_range storage function as engine chains (short ranges: slow in debug).
            let inst = storefn_kv::instance(storefn_progs::must("kv_range"), None).unwrap();
            let mut ch = storefn_kv::EngineChain::new(&store, inst, None).unwrap();
            let mut run = |start: u64, s: &mut [u8]| ch.run(start, 512, s);
            let o = storefn_kv::range_xrp(&store, &mut run, a, b, None).unwrap();
            assert!(o.entries == want, "xrp [{a}, {b}] entries differ");
            for agg in [Agg::Sum, Agg::Min, Agg::Max, Agg::Count] {
                let o = storefn_kv::range_xrp(&store, &mut run, a, b, Some(agg)).unwrap();
                assert_eq!(
                    o.agg,
                    aggregate(agg, want.iter().map(|(_, v)| v)),
                    "xrp [{a}, {b}] {agg:?}"
                );
            }
        }
        assert_eq!(got.len(), want.len(), "[{a}, {b}] count");
        assert!(got == want, "[{a}, {b}] entries differ");
        for agg in [Agg::Sum, Agg::Min, Agg::Max, Agg::Count] {
            let w = want.iter().map(|(_, v)| v);
            assert_eq!(aggregate(agg, got.iter().map(|(_, v)| v)), aggregate(agg, w));
        }
    }
}

#[test]
fn range_matches_plain_scan_dense_3_layers() {
    let dir = TempDir::new("range3");
    let p = dir.join("db");
    create_bpfkv(&p, NodeSize::B512, 3, &mut common::noop()).unwrap();
    check(&p, 1);
}

#[test]
fn range_matches_plain_scan_sparse_and_4096() {
    let dir = TempDir::new("range-sparse");
    let p = dir.join("db");
    let val = |k: u64| {
        let mut v = [0u8; 64];
        v[..8].copy_from_slice(&(k * 7).to_le_bytes());
        v
    };
    let it = (0..5000u64).map(|i| (i * 5 + 2, val(i * 5 + 2)));
    build_tree(&p, NodeSize::B512, it.clone(), &mut common::noop()).unwrap();
    check(&p, 2);
    let q = dir.join("db4k");
    build_tree(&q, NodeSize::B4096, it, &mut common::noop()).unwrap();
    check(&q, 3);
    // Aggregates of known values: keys 7..=27 -> 7, 12, 17, 22, 27 -> words 49..189.
    let store = Store::open(&p, 0).unwrap();
    let got = RangeScan::new(&store).collect(7, 27).unwrap();
    let vs = || got.iter().map(|(_, v)| v);
    assert_eq!(aggregate(Agg::Count, vs()), Some(5));
    assert_eq!(aggregate(Agg::Sum, vs()), Some(7 * (7 + 12 + 17 + 22 + 27)));
    assert_eq!(aggregate(Agg::Min, vs()), Some(49));
    assert_eq!(aggregate(Agg::Max, vs()), Some(189));
}

#[test]
fn range_calls_resume_after_32_results() {
    let dir = TempDir::new("resume");
    let p = dir.join("db");
    create_bpfkv(&p, NodeSize::B512, 2, &mut common::noop()).unwrap();
    let store = Store::open(&p, 0).unwrap();
    let mut scan = RangeScan::new(&store);
    let mut st = scan.begin(10).unwrap();
    let mut calls = 0;
    let mut out = Vec::new();
    while !st.done {
        let before = out.len();
        st = scan.call(10, 109, st, &mut out).unwrap();
        assert!(out.len() - before <= RANGE_BATCH);
        calls += 1;
    }
    assert_eq!(out.len(), 100);
    assert_eq!(calls, 4); // 32 + 32 + 32 + 4
    assert!(out.iter().enumerate().all(|(i, (k, _))| *k == 10 + i as u64));
}

/// Regression: a corrupt file whose leaf `next` link points back along the chain made the
/// pread range scan loop forever (no key order check, no bound on the leaves it followed).
/// Now the scan stops at the first key that does not rise, naming the leaf.
#[test]
fn a_cycle_of_leaf_links_is_a_corrupt_node_not_a_hang() {
    let dir = TempDir::new("range-cycle");
    let p = dir.join("db");
    create_bpfkv(&p, NodeSize::B512, 2, &mut |_, _| {}).unwrap();
    let (lo, hi) = Store::open(&p, 0).unwrap().leaf_range();
    let nb = NodeSize::B512.bytes() as u64;
    // The third leaf links back to the first; every key is in range, so before the fix the
    // scan produced entries without end.
    let third = lo + 2 * nb;
    assert!(third < hi);
    let mut bytes = std::fs::read(&p).unwrap();
    let at = usize::try_from(third).unwrap() + storefn_kv::layout::tree::NODE_OFF_NEXT;
    bytes[at..at + 8].copy_from_slice(&lo.to_le_bytes());
    std::fs::write(&p, &bytes).unwrap();
    let store = Store::open(&p, 0).unwrap();
    let e = RangeScan::new(&store).collect(0, u64::MAX).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains(&format!("offset {lo}")) || msg.contains(&lo.to_string()), "{msg}");
    assert!(msg.contains("does not follow"), "{msg}");
    // A range that ends before the cycle closes is still answered.
    let ok = RangeScan::new(&store).collect(0, 40).unwrap();
    assert_eq!(ok.len(), 41);
}
