//! Every store answers as written: the runner's operations against WiredTiger's own cursor
//! (differential), reads after updates, the JSON's keys, and the memory group's cleanup.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use storefn_wiredtiger::native::Connection;
use storefn_ycsb::{
    load, open, run, Key, OpKind, OpenOptions, RecordShape, RunConfig, Store, StoreSpec, Workload,
};

const SHAPE: RecordShape = RecordShape { fields: 4, field_length: 30 };
const RECORDS: u64 = 3000;

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("storefn-ycsb-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Checkpoints often enough that every run sees several: a run of 1,500 operations can take
/// under 200 ms, and a differential run with no checkpoint would not test the function reading
/// a checkpoint while WiredTiger writes the next.
fn opts() -> OpenOptions {
    OpenOptions { memory_limit: None, checkpoint_interval: Duration::from_millis(10) }
}

fn cfg(letter: char, operations: u64, threads: usize) -> RunConfig {
    RunConfig {
        workload: Workload::core(letter).unwrap(),
        records: RECORDS,
        operations,
        threads,
        seed: 42,
        warmup: 100,
        shape: SHAPE,
        read_batch: 1,
        batch_updates: false,
    }
}

/// Every record through WiredTiger's own cursor (the store must be closed).
fn wt_dump(dir: &Path, table: &str) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let conn = Connection::open(dir, "").unwrap();
    let s = conn.session().unwrap();
    let mut c = s.cursor(&format!("table:{table}"), "").unwrap();
    let (mut k, mut v, mut m) = (Vec::new(), Vec::new(), BTreeMap::new());
    while c.next(&mut k, &mut v).unwrap() {
        m.insert(k.clone(), v.clone());
    }
    m
}

fn stored_key(num: u64) -> Vec<u8> {
    let mut k = Key::new(num).name.into_bytes();
    k.push(0);
    k
}

#[test]
fn wiredtiger_reads_see_updates_before_and_after_checkpoints() {
    let dir = temp("wt-rw");
    let spec: StoreSpec = format!("wiredtiger:{}:usertable", dir.display()).parse().unwrap();
    load(&spec, RECORDS, SHAPE).unwrap();
    let slow = OpenOptions { checkpoint_interval: Duration::from_secs(3600), ..opts() };
    let store = storefn_ycsb::FnStore::open(&dir, "usertable", &slow).unwrap();
    let mut s = store.session().unwrap();
    let (mut got, mut want) = (Vec::new(), Vec::new());
    for n in [0, 1, 77, RECORDS - 1] {
        SHAPE.fill(n, 0, &mut want);
        assert!(s.get(&Key::new(n), &mut got).unwrap());
        assert_eq!(got, want, "loaded record {n}");
    }
    assert!(!s.get(&Key::new(RECORDS + 5), &mut got).unwrap(), "never written");
    let c = |st: &dyn Store, name| st.counters().iter().find(|c| c.0 == name).unwrap().1;
    let function_reads = c(&store, "function_reads");
    assert!(function_reads >= 5, "the function served the loaded records");
    // Written after the checkpoint: WiredTiger answers.
    SHAPE.fill(77, 9, &mut want);
    s.update(&Key::new(77), &want).unwrap();
    s.insert(&Key::new(RECORDS + 5), &want).unwrap();
    for n in [77, RECORDS + 5] {
        assert!(s.get(&Key::new(n), &mut got).unwrap());
        assert_eq!(got, want, "key {n} right after its write");
    }
    assert_eq!(c(&store, "dirty_reads"), 2);
    // After a checkpoint the function reads them from the new checkpoint.
    store.checkpoint_now().unwrap();
    for n in [77, RECORDS + 5] {
        assert!(s.get(&Key::new(n), &mut got).unwrap());
        assert_eq!(got, want, "key {n} after the checkpoint");
    }
    assert_eq!(c(&store, "dirty_reads"), 2, "no longer dirty");
    assert_eq!(c(&store, "function_reads"), function_reads + 2);
    assert_eq!(c(&store, "fallbacks"), 0);
    drop(s);
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Runs `letter` on `spec` with checkpoints every 10 ms, then checks every record the store
/// answers against WiredTiger's own cursor over the same files.
fn differential(kind: &str, letter: char, threads: usize) {
    let dir = temp(&format!("{kind}-{letter}"));
    let spec: StoreSpec = format!("{kind}:{}:usertable", dir.display()).parse().unwrap();
    load(&spec, RECORDS, SHAPE).unwrap();
    let store = open(&spec, &opts()).unwrap();
    let report = run(store.as_ref(), spec.kind(), &cfg(letter, 1500, threads)).unwrap();
    assert_eq!(report.read_misses, 0, "{}", report.summary());
    // The store's answers now, for every key it may hold, before closing it.
    let mut answers = BTreeMap::new();
    {
        let mut s = store.session().unwrap();
        let mut v = Vec::new();
        for n in 0..RECORDS + 400 {
            if s.get(&Key::new(n), &mut v).unwrap() {
                answers.insert(stored_key(n), v.clone());
            }
        }
    }
    let counters = store.counters();
    drop(store);
    let truth = wt_dump(&dir, "usertable");
    assert_eq!(answers.len(), truth.len(), "records present");
    assert!(answers == truth, "{kind} {letter}: a read differs from WiredTiger's cursor");
    if kind == "wiredtiger" {
        let get = |name| counters.iter().find(|c| c.0 == name).unwrap().1;
        assert!(get("function_reads") > 0 && get("checkpoints") > 0, "{counters:?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn wiredtiger_function_store_matches_wiredtiger_after_workload_a() {
    differential("wiredtiger", 'a', 2);
}

#[test]
fn wiredtiger_function_store_matches_wiredtiger_after_workload_d_inserts() {
    differential("wiredtiger", 'd', 1);
}

#[test]
fn wiredtiger_native_store_matches_wiredtiger_after_workload_f() {
    differential("wiredtiger-native", 'f', 2);
}

#[test]
fn scans_return_their_length_on_every_store() {
    for kind in ["wiredtiger", "wiredtiger-native", "bpfkv"] {
        let dir = temp(&format!("scan-{kind}"));
        let spec: StoreSpec = if kind == "bpfkv" {
            format!("bpfkv:{}", dir.join("db").display()).parse().unwrap()
        } else {
            format!("{kind}:{}:usertable", dir.display()).parse().unwrap()
        };
        load(&spec, RECORDS, SHAPE).unwrap();
        let store = open(&spec, &opts()).unwrap();
        let mut s = store.session().unwrap();
        assert_eq!(s.scan(&Key::new(10), 50).unwrap(), 50, "{kind}");
        let report = run(store.as_ref(), spec.kind(), &cfg('e', 300, 1)).unwrap();
        let scans = report.ops[&OpKind::Scan].count;
        assert!(scans > 240 && report.ops[&OpKind::Insert].count == 300 - scans, "{kind}");
        drop(s);
        drop(store);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn bpfkv_reads_see_updates_and_inserts() {
    let dir = temp("bpfkv");
    let spec: StoreSpec = format!("bpfkv:{}", dir.join("db").display()).parse().unwrap();
    load(&spec, RECORDS, SHAPE).unwrap();
    let store = open(&spec, &opts()).unwrap();
    let report = run(store.as_ref(), "bpfkv", &cfg('a', 1000, 2)).unwrap();
    assert_eq!(report.read_misses, 0);
    let mut s = store.session().unwrap();
    let (mut got, mut rec) = (Vec::new(), Vec::new());
    SHAPE.fill(RECORDS - 1, 0, &mut rec);
    assert!(s.get(&Key::new(RECORDS - 1), &mut got).unwrap());
    assert!(got == store.stored(&rec) || report.ops[&OpKind::Update].count > 0);
    SHAPE.fill(5, 123, &mut rec);
    s.update(&Key::new(5), &rec).unwrap();
    s.insert(&Key::new(RECORDS), &rec).unwrap();
    for n in [5, RECORDS] {
        assert!(s.get(&Key::new(n), &mut got).unwrap());
        assert_eq!(got, store.stored(&rec), "key {n}");
    }
    drop(s);
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn json_has_the_keys_every_figure_reads() {
    let dir = temp("json");
    let spec: StoreSpec = format!("wiredtiger-native:{}:t", dir.display()).parse().unwrap();
    load(&spec, RECORDS, SHAPE).unwrap();
    let store = open(&spec, &opts()).unwrap();
    let r = run(store.as_ref(), spec.kind(), &cfg('b', 2000, 1)).unwrap();
    let j = r.json();
    for k in [
        "store",
        "workload",
        "threads",
        "ops_per_sec",
        "read_p50_us",
        "read_p99_us",
        "read_p999_us",
        "update_p99_us",
        "cpu_us_per_op",
        "memory_limit_bytes",
    ] {
        assert!(j.get(k).is_some(), "missing {k} in {j}");
    }
    assert_eq!(j["store"], "wiredtiger-native");
    assert_eq!(j["workload"], "b");
    assert!(j["ops_per_sec"].as_f64().unwrap() > 0.0);
    // B's mix in the measured counts: 5% updates, within 5 sigma of 2000 draws.
    let updates = j["update_count"].as_u64().unwrap();
    assert!((50..=150).contains(&updates), "{updates}");
    assert!(r.summary().starts_with("ycsb-b wiredtiger-native threads=1: "));
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_store_specs_are_named() {
    for bad in ["", "bpfkv:", "wiredtiger:dir", "wiredtiger::t", "rocks:x", "wiredtiger:d:a/b"] {
        let e = bad.parse::<StoreSpec>().unwrap_err().to_string();
        assert!(e.contains("--store"), "{bad}: {e}");
    }
}

#[test]
fn memory_group_is_removed_after_a_run_even_on_error() {
    let root = Path::new(storefn_ycsb::MEMORY_ROOT);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !root.join("memory.limit_in_bytes").exists() {
        storefn_testkit::skip("needs root and the cgroup v1 memory controller");
        return;
    }
    // Generous: the test harness's other threads share the group while it exists.
    let g = storefn_ycsb::MemoryGroup::enter(4 << 30).unwrap();
    let path = g.path().to_owned();
    let limit: u64 = std::fs::read_to_string(path.join("memory.limit_in_bytes"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(limit, 4 << 30);
    let me = std::process::id().to_string();
    let procs = std::fs::read_to_string(path.join("cgroup.procs")).unwrap();
    assert!(procs.lines().any(|l| l == me), "the process is in the group");
    g.remove().unwrap();
    assert!(!path.exists(), "removed after the run");
    // An error unwinding through the run drops the group too.
    let r = std::panic::catch_unwind(|| {
        let _g = storefn_ycsb::MemoryGroup::enter(4 << 30).unwrap();
        panic!("a failing run");
    });
    assert!(r.is_err());
    assert!(!path.exists(), "removed after a failed run");
    assert!(storefn_ycsb::MemoryGroup::enter(1 << 20).is_err(), "too small a budget");
}

#[test]
fn function_store_reads_through_frequent_checkpoints() {
    // Regression: a checkpoint frees the blocks of the one before it, and WiredTiger reused
    // them before the new checkpoint was published; a reader on the old one saw a checksum
    // mismatch and failed the run instead of moving to the new checkpoint.
    let dir = temp("wt-ckpt");
    let spec: StoreSpec = format!("wiredtiger:{}:usertable", dir.display()).parse().unwrap();
    load(&spec, RECORDS, SHAPE).unwrap();
    let fast = OpenOptions { checkpoint_interval: Duration::from_millis(20), ..opts() };
    let store = open(&spec, &fast).unwrap();
    let report = run(store.as_ref(), spec.kind(), &cfg('b', 3000, 2)).unwrap();
    assert_eq!(report.read_misses, 0, "{}", report.summary());
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn batched_reads_answer_as_wiredtiger_through_checkpoints() {
    // Reads in batches of 16 (batched chains) while updates and 20 ms checkpoints run, the
    // updates one at a time and then in the batches, then every key through one batch per 64
    // against WiredTiger's own cursor.
    let dir = temp("wt-batch");
    let spec: StoreSpec = format!("wiredtiger:{}:usertable", dir.display()).parse().unwrap();
    load(&spec, RECORDS, SHAPE).unwrap();
    let fast = OpenOptions { checkpoint_interval: Duration::from_millis(20), ..opts() };
    let store = open(&spec, &fast).unwrap();
    // Then with the updates in the batches too, on the sessions' writer threads.
    for batch_updates in [false, true] {
        let cfg = RunConfig { read_batch: 16, batch_updates, ..cfg('b', 2000, 2) };
        let report = run(store.as_ref(), spec.kind(), &cfg).unwrap();
        assert_eq!(report.read_misses, 0, "{}", report.summary());
        let updates = report.ops.get(&OpKind::Update).map_or(0, |o| o.count);
        assert!(updates > 0, "{}", report.summary());
    }
    let mut answers = BTreeMap::new();
    {
        let mut s = store.session().unwrap();
        let keys: Vec<Key> = (0..RECORDS + 100).map(Key::new).collect();
        let mut out = vec![Vec::new(); 64];
        let mut found = [false; 64];
        for chunk in keys.chunks(64) {
            let n = chunk.len();
            s.get_batch(chunk, &mut out[..n], &mut found[..n]).unwrap();
            for (j, k) in chunk.iter().enumerate() {
                if found[j] {
                    answers.insert(stored_key(k.num), out[j].clone());
                }
            }
        }
    }
    let counters = store.counters();
    drop(store);
    let truth = wt_dump(&dir, "usertable");
    assert_eq!(answers.len(), truth.len(), "records present");
    assert!(answers == truth, "a batched read differs from WiredTiger's cursor");
    let get = |name| counters.iter().find(|c| c.0 == name).unwrap().1;
    assert!(get("function_reads") > RECORDS, "{counters:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
