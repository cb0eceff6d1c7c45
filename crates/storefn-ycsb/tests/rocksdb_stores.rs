//! The RocksDB stores answer as RocksDB does: after workloads A, D and F (updates, inserts,
//! read-modify-writes) every record the store answers equals RocksDB's own Get over the same
//! directory once the store is closed; writes after the reader's snapshot are seen at once.

use std::path::PathBuf;
use std::time::Duration;
use storefn_rocksdb::{Native, NativeOptions};
use storefn_ycsb::{load, open, run, Key, OpenOptions, RecordShape, RunConfig, Store, StoreSpec};

const SHAPE: RecordShape = RecordShape { fields: 4, field_length: 30 };
const RECORDS: u64 = 3000;

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("storefn-ycsb-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn opts(every: Duration) -> OpenOptions {
    OpenOptions { memory_limit: None, checkpoint_interval: every }
}

fn cfg(letter: char, operations: u64, threads: usize, read_batch: usize) -> RunConfig {
    RunConfig {
        workload: storefn_ycsb::Workload::core(letter).unwrap(),
        records: RECORDS,
        operations,
        threads,
        seed: 42,
        warmup: 100,
        shape: SHAPE,
        read_batch,
        batch_updates: false,
    }
}

fn counter(st: &dyn Store, name: &str) -> u64 {
    st.counters().iter().find(|c| c.0 == name).map_or_else(|| panic!("no {name}"), |c| c.1)
}

/// Runs `letter` on `kind` with snapshots every 10 ms (reads in batches of `batch`; batched
/// runs under a 64 MiB budget, so `rocksdb` reads with O_DIRECT chains and its data cache), then
/// checks every record the store answers against RocksDB's own Get over the same directory.
fn differential(kind: &str, letter: char, threads: usize, batch: usize) {
    let dir = temp(&format!("{kind}-{letter}-{batch}"));
    let spec: StoreSpec = format!("{kind}:{}", dir.display()).parse().unwrap();
    load(&spec, RECORDS, SHAPE).unwrap();
    // Often enough that every run refreshes several times: a run of 1,500 operations can take
    // under 100 ms, and the differential asserts the store moved to a newer snapshot.
    let mut o = opts(Duration::from_millis(10));
    if batch > 1 {
        o.memory_limit = Some(64 << 20);
    }
    let store = open(&spec, &o).unwrap();
    let report = run(store.as_ref(), spec.kind(), &cfg(letter, 1500, threads, batch)).unwrap();
    assert_eq!(report.read_misses, 0, "{}", report.summary());
    let mut answers = Vec::new();
    {
        let mut s = store.session().unwrap();
        let mut v = Vec::new();
        for n in 0..RECORDS + 400 {
            let found = s.get(&Key::new(n), &mut v).unwrap();
            answers.push(found.then(|| v.clone()));
        }
    }
    if kind == "rocksdb" {
        assert!(counter(store.as_ref(), "function_reads") > 0, "{:?}", store.counters());
        assert!(counter(store.as_ref(), "refreshes") > 0, "{:?}", store.counters());
        assert_eq!(counter(store.as_ref(), "fallbacks"), 0);
        if batch > 1 {
            assert!(counter(store.as_ref(), "data_cache_hits") > 0, "{:?}", store.counters());
        }
    }
    drop(store);
    let truth = Native::open(&dir, &NativeOptions::default()).unwrap();
    let mut v = Vec::new();
    let mut present = 0;
    for (n, a) in (0..RECORDS + 400).zip(&answers) {
        let found = truth.get(Key::new(n).name.as_bytes(), &mut v).unwrap();
        assert_eq!(a.as_ref(), found.then_some(&v), "{kind} {letter}: key {n}");
        present += u64::from(found);
    }
    assert!(present >= RECORDS, "{present}");
    drop(truth);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn rocksdb_function_store_matches_rocksdb_after_workload_a() {
    differential("rocksdb", 'a', 2, 1);
}

#[test]
fn rocksdb_function_store_batches_match_rocksdb_after_workload_a() {
    differential("rocksdb", 'a', 2, 16);
}

#[test]
fn rocksdb_function_store_matches_rocksdb_after_workload_d_inserts() {
    differential("rocksdb", 'd', 1, 1);
}

#[test]
fn rocksdb_function_store_matches_rocksdb_after_workload_f() {
    differential("rocksdb", 'f', 2, 1);
}

#[test]
fn rocksdb_native_store_matches_rocksdb_after_workloads_a_d_f() {
    differential("rocksdb-native", 'a', 2, 1);
    differential("rocksdb-native", 'a', 2, 16);
    differential("rocksdb-native", 'd', 1, 1);
    differential("rocksdb-native", 'f', 2, 1);
}

#[test]
fn rocksdb_reads_see_writes_before_and_after_a_snapshot() {
    let dir = temp("rocks-rw");
    let spec: StoreSpec = format!("rocksdb:{}", dir.display()).parse().unwrap();
    load(&spec, RECORDS, SHAPE).unwrap();
    let store = storefn_ycsb::RocksFnStore::open(&dir, &opts(Duration::from_secs(3600))).unwrap();
    let mut s = store.session().unwrap();
    let (mut got, mut want) = (Vec::new(), Vec::new());
    for n in [0, 1, 77, RECORDS - 1] {
        SHAPE.fill(n, 0, &mut want);
        assert!(s.get(&Key::new(n), &mut got).unwrap());
        assert_eq!(got, want, "loaded record {n}");
    }
    assert!(!s.get(&Key::new(RECORDS + 5), &mut got).unwrap(), "never written");
    let reads = counter(&store, "function_reads");
    assert_eq!(reads, 5, "the function served the loaded records");
    // Written after the snapshot: RocksDB answers.
    SHAPE.fill(77, 9, &mut want);
    s.update(&Key::new(77), &want).unwrap();
    s.insert(&Key::new(RECORDS + 5), &want).unwrap();
    for n in [77, RECORDS + 5] {
        assert!(s.get(&Key::new(n), &mut got).unwrap());
        assert_eq!(got, want, "key {n} right after its write");
    }
    assert_eq!(counter(&store, "dirty_reads"), 2);
    // A batch mixing loaded, written-since and absent keys: the function answers the first
    // and the last, RocksDB the written ones.
    let keys: Vec<Key> = [0, 77, RECORDS + 5, RECORDS + 6, 1].into_iter().map(Key::new).collect();
    let (mut outs, mut found) = (vec![Vec::new(); keys.len()], vec![false; keys.len()]);
    let fn_reads = counter(&store, "function_reads");
    s.get_batch(&keys, &mut outs, &mut found).unwrap();
    assert_eq!(found, [true, true, true, false, true]);
    for (k, o) in keys.iter().zip(&outs) {
        if [77, RECORDS + 5].contains(&k.num) {
            assert_eq!(o, &want, "batch key {}", k.num);
        } else if k.num < RECORDS {
            let mut w = Vec::new();
            SHAPE.fill(k.num, 0, &mut w);
            assert_eq!(o, &w, "batch key {}", k.num);
        }
    }
    assert_eq!(counter(&store, "dirty_reads"), 4);
    assert_eq!(counter(&store, "function_reads"), fn_reads + 3);
    // After a new snapshot the function reads them from RocksDB's files.
    store.refresh_now().unwrap();
    for n in [77, RECORDS + 5] {
        assert!(s.get(&Key::new(n), &mut got).unwrap());
        assert_eq!(got, want, "key {n} after the snapshot");
    }
    assert_eq!(counter(&store, "dirty_reads"), 4, "no longer dirty");
    assert_eq!(counter(&store, "function_reads"), reads + 3 + 2);
    assert_eq!(s.scan(&Key::new(10), 50).unwrap(), 50);
    drop(s);
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn rocksdb_store_specs_parse_and_bad_ones_are_named() {
    let s: StoreSpec = "rocksdb:/x/y".parse().unwrap();
    assert_eq!((s.kind(), s.to_string()), ("rocksdb", "rocksdb:/x/y".to_string()));
    let s: StoreSpec = "rocksdb-native:d".parse().unwrap();
    assert_eq!((s.kind(), s.to_string()), ("rocksdb-native", "rocksdb-native:d".to_string()));
    for bad in ["rocksdb:", "rocksdb-native:", "rocks:x"] {
        let e = bad.parse::<StoreSpec>().unwrap_err().to_string();
        assert!(e.contains("--store"), "{bad}: {e}");
    }
    let dir = temp("rocks-twice");
    let spec: StoreSpec = format!("rocksdb:{}", dir.display()).parse().unwrap();
    load(&spec, 10, SHAPE).unwrap();
    let e = load(&spec, 10, SHAPE).unwrap_err().to_string();
    assert!(e.contains("exists already"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
