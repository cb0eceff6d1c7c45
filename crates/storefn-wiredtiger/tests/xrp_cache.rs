//! The function's block cache (internal pages parsed on the host, leaves searched in place):
//! every key of every table, present and absent, against WiredTiger's own cursor, cold and
//! warm, with a cache large enough for the table and one of two slots (every lookup evicts);
//! and a cache shared across checkpoints never answers with a block of an older one.

mod common;

use common::{absent_keys, build, native_rows, TempDir};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use storefn_wiredtiger::native::Native;
use storefn_wiredtiger::{Outcome, Table, TreeCache, XrpOptions, XrpTree, HOP_BYTES};

/// Looks every stored key of `keys` up in batches of 100; checks each answer against `rows`.
fn check_all(x: &mut XrpTree, t: &Table, keys: &[Vec<u8>], rows: &BTreeMap<Vec<u8>, Vec<u8>>) {
    let mut seen = vec![false; keys.len()];
    for (c, chunk) in keys.chunks(100).enumerate() {
        x.get_batch(t.tree(), chunk, |i, o, v| {
            let k = &chunk[i];
            match (o.unwrap(), rows.get(k)) {
                (Outcome::Found, Some(want)) => assert_eq!(v, &want[..], "{k:?}"),
                // Overflow items come back as a fallback: the caller's plain reader or
                // WiredTiger answers them.
                (Outcome::NotFound, None) | (Outcome::Fallback(_), _) => {}
                (o, want) => panic!("{k:?}: {o:?}, WiredTiger has {want:?}"),
            }
            assert!(!seen[c * 100 + i], "answered twice");
            seen[c * 100 + i] = true;
        })
        .unwrap();
    }
    assert!(seen.iter().all(|&s| s), "every key answered");
}

fn stored_keys(t: &Table, rows: &BTreeMap<Vec<u8>, Vec<u8>>) -> Vec<Vec<u8>> {
    let f = t.key_format;
    let mut keys: Vec<Vec<u8>> = rows.keys().cloned().collect();
    for u in absent_keys(f, rows) {
        let mut k = Vec::new();
        f.encode(&u, &mut k).unwrap();
        keys.push(k);
    }
    keys
}

#[test]
fn cached_lookups_answer_as_wiredtiger_does() {
    let dir = TempDir::new("xrp-cache");
    build(&dir.0);
    for name in
        ["small", "pfx", "raw", "ovfl", "del", "dict", "deep", "empty", "big", "pfx32", "words"]
    {
        let rows = native_rows(&dir.0, name);
        let t = Table::open(&dir.0, name).unwrap();
        let keys = stored_keys(&t, &rows);
        let alloc = t.tree().allocation_size();
        // Two slots (every lookup evicts) on a few tables, every third key: the eviction and
        // waiting paths, kept short.
        let tiny = ["ovfl", "deep", "pfx32"].contains(&name);
        let small_keys: Vec<Vec<u8>> = keys.iter().step_by(3).cloned().collect();
        for slots in if tiny { &[4096, 2][..] } else { &[4096][..] } {
            let slots = *slots;
            let keys = if slots == 2 { &small_keys } else { &keys };
            let cache = Arc::new(Mutex::new(TreeCache::new(slots * u64::from(HOP_BYTES), alloc)));
            let opts = XrpOptions { cache: Some(Arc::clone(&cache)), direct: true };
            let mut x = XrpTree::open_with(t.tree(), opts).unwrap();
            check_all(&mut x, &t, keys, &rows); // cold
            let cold = cache.lock().unwrap().stats;
            let hops = x.hops;
            let warm_keys: Vec<Vec<u8>> = keys.iter().step_by(2).cloned().collect();
            check_all(&mut x, &t, &warm_keys, &rows); // warm
            let warm = cache.lock().unwrap().stats;
            eprintln!("{name} ({slots} slots): cold {cold:?}, warm {warm:?}, hops {}", x.hops);
            if rows.is_empty() {
                continue;
            }
            // Every lookup that reached a leaf went through it once, hit or miss.
            let leaf_lookups =
                warm.leaf_hits + warm.leaf_misses - cold.leaf_hits - cold.leaf_misses;
            if slots > 2 {
                // Warm: every internal page parsed, every leaf cached: no read at all.
                assert_eq!(warm.leaf_misses, cold.leaf_misses, "{name}: warm lookups read");
                assert_eq!(x.hops - hops, leaf_lookups, "{name}: one hop per warm lookup");
                assert!(warm.leaf_hits > 0, "{name}");
            }
            // Hops stay bounded: these trees are at most three levels deep.
            assert!(x.hops - hops <= 3 * warm_keys.len() as u64, "{name}: {}", x.hops - hops);
        }
    }
}

#[test]
fn a_cache_shared_across_checkpoints_answers_from_the_newest() {
    let dir = TempDir::new("xrp-cache-ckpt");
    // WiredTiger's own answers, kept here: the writer holds the database open.
    let mut rows = BTreeMap::new();
    let put = |wt: &Native, rows: &mut BTreeMap<Vec<u8>, Vec<u8>>, round: u32| {
        let mut c = wt.cursor("table:t").unwrap();
        for i in (0..8_000u32).filter(|i| round == 0 || i % 97 == round % 97) {
            let (k, v) = (format!("key{i:06}\0"), format!("round {round} value {i:>60}\0"));
            c.insert(k.as_bytes(), v.as_bytes()).unwrap();
            rows.insert(k.into_bytes(), v.into_bytes());
        }
    };
    let wt = Native::open(&dir.0, "create").unwrap();
    wt.create("table:t", "key_format=S,value_format=S").unwrap();
    put(&wt, &mut rows, 0);
    wt.checkpoint().unwrap();
    let alloc = Table::open(&dir.0, "t").unwrap().tree().allocation_size();
    let cache = Arc::new(Mutex::new(TreeCache::new(8 << 20, alloc)));
    for round in 0..3 {
        if round > 0 {
            put(&wt, &mut rows, round);
            wt.checkpoint().unwrap();
        }
        let t = Table::open(&dir.0, "t").unwrap();
        let opts = XrpOptions { cache: Some(Arc::clone(&cache)), direct: false };
        let mut x = XrpTree::open_with(t.tree(), opts).unwrap();
        check_all(&mut x, &t, &stored_keys(&t, &rows), &rows);
    }
    let s = cache.lock().unwrap().stats;
    assert!(s.leaf_hits > 0 && s.internal_parsed > 0, "{s:?}");
}
