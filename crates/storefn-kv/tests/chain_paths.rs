//! One chain contract, every path: the same storage functions (ours and ones written for BPF-KV's
//! scratch layouts, the fan-out one included) run through every way the store drives chains
//! (`xrp` one at a time, `xrp-batch` at several depths, `multiget` with up to 32 keys per chain,
//! cached levels, the block LRU) and must answer exactly as plain reads do; ranges likewise
//! through both range ABIs against a leaf scan.

mod common;

use std::sync::Arc;

use common::TempDir;
use rand::{Rng, SeedableRng};
use storefn_kv::bpfkv_value;
use storefn_kv::Abi;
use storefn_kv::Lookup;
use storefn_kv::Memtable;
use storefn_kv::{
    build_tree, create_bpfkv, Agg, LookupPath, NodeSize, ProgSource, ReadPath, Store,
};
use storefn_kv::{range, RangeVia};
use storefn_kv::{ChainOptions, XrpPath};

fn user(name: &str) -> ProgSource {
    ProgSource::User { elf: storefn_progs::must(name).to_vec(), section: None }
}

/// Every (program, ABI) pair under test.
fn programs() -> Vec<(&'static str, ProgSource, Abi)> {
    vec![
        ("kv_lookup (built-in)", ProgSource::BuiltIn, Abi::Storefn),
        ("kv_lookup (user)", user("kv_lookup"), Abi::Storefn),
        ("bpfkv_get (built-in)", ProgSource::BuiltIn, Abi::BpfKv),
        ("bpfkv_get (user)", user("bpfkv_get"), Abi::BpfKv),
        ("bpfkv_get_fanout (user)", user("bpfkv_get_fanout"), Abi::BpfKv),
    ]
}

/// Keys that hit, miss between keys, miss past the end, and repeat (LRU hits).
fn keys(present: &[u64], seed: u64) -> Vec<u64> {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut k: Vec<u64> = (0..160).map(|_| present[rng.gen_range(0..present.len())]).collect();
    k.extend((0..40).map(|_| present[rng.gen_range(0..present.len())] + 1));
    k.extend([0, u64::MAX, present[present.len() - 1], present[present.len() - 1] + 1]);
    let again = k[..60].to_vec();
    k.extend(again);
    k
}

fn check_lookups(db: &std::path::Path, present: &[u64]) {
    let keys = keys(present, 7);
    for cache_levels in [0, 1, 2] {
        let store = Arc::new(Store::open(db, cache_levels).unwrap());
        let mut model = ReadPath::new(Arc::clone(&store), 0);
        let want: Vec<_> = keys.iter().map(|&k| model.get(k).unwrap()).collect();
        assert!(want.iter().filter(|v| v.is_some()).count() >= 160, "the keys mostly hit");
        for (name, src, abi) in programs() {
            let kpcs: &[usize] = if abi == Abi::BpfKv { &[1, 5, 32] } else { &[1] };
            for &kpc in kpcs {
                for (batch, chains) in [(false, 1), (true, 1), (true, 7), (true, 32)] {
                    for cache_bytes in [0, 256 << 10] {
                        let opts = ChainOptions {
                            batch,
                            chains,
                            abi,
                            keys_per_chain: kpc,
                            cache_bytes,
                            ..ChainOptions::default()
                        };
                        let what = format!(
                            "{name}: levels {cache_levels} kpc {kpc} batch {batch}x{chains} \
                             lru {cache_bytes}"
                        );
                        let mut p = XrpPath::new(Arc::clone(&store), &src, opts).unwrap();
                        let mut out: Vec<Lookup> = Vec::new();
                        p.get_many(&keys, &mut out).unwrap();
                        let got: Vec<_> = out.iter().map(|l| l.value).collect();
                        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                            assert_eq!(g, w, "{what}: key {}", keys[i]);
                        }
                        let s = p.stats();
                        assert_eq!(s.fallbacks, 0, "{what}");
                        assert_eq!(s.lookups, keys.len() as u64, "{what}");
                        if cache_bytes > 0 {
                            // Blocks chains read are cached; a second pass is served from them.
                            assert!(p.cached_blocks() > 0, "{what}: {s:?}");
                            out.clear();
                            p.get_many(&keys, &mut out).unwrap();
                            let again: Vec<_> = out.iter().map(|l| l.value).collect();
                            assert!(again == want, "{what}: second pass");
                            let s2 = p.stats().since(&s);
                            assert!(s2.cache_hits > 0, "{what}: {s2:?}");
                            assert!(s2.ios < s.ios, "{what}: {s2:?} vs {s:?}");
                        }
                        // And one key at a time (the synchronous chain).
                        for &k in keys.iter().step_by(37) {
                            assert_eq!(p.get(k).unwrap(), model.get(k).unwrap(), "{what}: {k}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn every_program_on_every_chain_path_answers_as_reads_do_bpfkv_file() {
    let dir = TempDir::new("chain-paths-dense");
    let p = dir.join("db");
    create_bpfkv(&p, NodeSize::B512, 3, &mut common::noop()).unwrap();
    let present: Vec<u64> = (0..29_791).collect();
    check_lookups(&p, &present);
}

#[test]
fn every_program_on_every_chain_path_answers_as_reads_do_partial_tree() {
    let dir = TempDir::new("chain-paths-partial");
    let p = dir.join("db");
    // Sparse keys: partial last nodes, unused slots, misses between keys.
    let present: Vec<u64> = (0..5_000u64).map(|i| i * 3 + 1).collect();
    build_tree(
        &p,
        NodeSize::B512,
        present.iter().map(|&k| (k, bpfkv_value(k))),
        &mut common::noop(),
    )
    .unwrap();
    check_lookups(&p, &present);
}

#[test]
fn ranges_through_both_range_abis_and_a_user_program_match_the_leaf_scan() {
    let dir = TempDir::new("chain-paths-range");
    let p = dir.join("db");
    let present: Vec<u64> = (0..2_000u64).map(|i| i * 2 + 1).collect();
    build_tree(
        &p,
        NodeSize::B512,
        present.iter().map(|&k| (k, bpfkv_value(k * 7))),
        &mut common::noop(),
    )
    .unwrap();
    let store = Store::open(&p, 0).unwrap();
    let vias = [
        RangeVia::Chain { prog: ProgSource::BuiltIn, abi: Abi::Storefn },
        RangeVia::Chain { prog: ProgSource::BuiltIn, abi: Abi::BpfKv },
        RangeVia::Chain { prog: user("bpfkv_range"), abi: Abi::BpfKv },
    ];
    let mut rng = rand::rngs::SmallRng::seed_from_u64(3);
    let max = present[present.len() - 1];
    let mut cases = vec![(0, max), (0, 0), (1, 1), (max, max), (max + 1, u64::MAX), (9, 4)];
    for _ in 0..6 {
        let a = rng.gen_range(0..=max);
        cases.push((a, a + rng.gen_range(0..200)));
    }
    let mut logged = Memtable::new(usize::MAX);
    logged.insert(101, 1, [b'x'; 64]); // an update inside some ranges
    logged.insert(102, 2, [b'y'; 64]); // a new key
    for mem in [Memtable::new(usize::MAX), logged] {
        for &(a, b) in &cases {
            for agg in [None, Some(Agg::Sum), Some(Agg::Min), Some(Agg::Max), Some(Agg::Count)] {
                let want = range(&store, &mem, a, b, agg, &RangeVia::Read).unwrap();
                for via in &vias {
                    let got = range(&store, &mem, a, b, agg, via).unwrap();
                    assert_eq!(got.agg, want.agg, "{via:?} [{a}, {b}] {agg:?}");
                    if agg.is_none() {
                        assert!(got.entries == want.entries, "{via:?} [{a}, {b}] entries");
                    }
                }
            }
        }
    }
}

#[test]
fn bpfkv_abi_refuses_4096_byte_nodes_by_name() {
    let dir = TempDir::new("chain-paths-4k");
    let p = dir.join("db");
    let keys: Vec<u64> = (0..1000u64).collect();
    build_tree(&p, NodeSize::B4096, keys.iter().map(|&k| (k, bpfkv_value(k))), &mut common::noop())
        .unwrap();
    let store = Arc::new(Store::open(&p, 0).unwrap());
    let opts = ChainOptions { abi: Abi::BpfKv, ..ChainOptions::default() };
    let e = XrpPath::new(store, &ProgSource::BuiltIn, opts).unwrap_err().to_string();
    assert!(e.contains("512 B nodes") && e.contains("4096 B"), "{e}");
}

#[test]
fn more_keys_per_chain_than_the_abi_carries_is_refused() {
    let dir = TempDir::new("chain-paths-kpc");
    let p = dir.join("db");
    create_bpfkv(&p, NodeSize::B512, 2, &mut common::noop()).unwrap();
    let store = Arc::new(Store::open(&p, 0).unwrap());
    for (abi, kpc) in [(Abi::Storefn, 2), (Abi::BpfKv, 33), (Abi::BpfKv, 0)] {
        let opts = ChainOptions { abi, keys_per_chain: kpc, ..ChainOptions::default() };
        let e = XrpPath::new(Arc::clone(&store), &ProgSource::BuiltIn, opts).unwrap_err();
        assert!(e.to_string().contains("keys per chain"), "{e}");
    }
}
