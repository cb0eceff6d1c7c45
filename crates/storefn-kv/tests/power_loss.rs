//! Power loss at every operation of put, group commit and compaction, through the crash model
//! (storefn_io::CrashSim): unsynced writes lost or torn, unsynced directory entries gone.
//! After each crash the disk image is opened with the real storage: it must open without error,
//! hold every acknowledged put with its exact value, and its tree must pass a full compaction
//! (every leaf, key order and value pointer checked) and a full scan equal to the model.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use common::TempDir;
use storefn_io::CrashSim;
use storefn_kv::bpfkv_value;
use storefn_kv::layout::tree::VALUE_BYTES;
use storefn_kv::RangeScan;
use storefn_kv::ENTRY_BYTES;
use storefn_kv::{create_bpfkv, NodeSize};
use storefn_kv::{Db, DbOptions};

type Value = [u8; VALUE_BYTES];

fn val(text: &str) -> Value {
    let mut v = [0u8; VALUE_BYTES];
    v[..text.len()].copy_from_slice(text.as_bytes());
    v
}

/// Keys of the 2-layer base tree: 0..961.
const BASE_KEYS: u64 = 961;

/// The workload: single puts (one group commit each), multi-put batches (one or two group
/// commits), a memtable of 8 entries so puts trigger compactions, and an explicit compaction.
fn workload() -> Vec<Vec<(u64, Value)>> {
    let mut steps = Vec::new();
    let mut n = 0u64;
    let mut next = |k: u64| {
        n += 1;
        (k, val(&format!("v{n}-k{k}")))
    };
    for round in 0..3u64 {
        steps.push(vec![next(round * 7)]);
        steps.push(vec![next(5000 + round)]);
        steps.push((0..4).map(|i| next(100 + round * 10 + i)).collect());
        steps.push(vec![next(round * 7)]); // an update of a key put above
        steps.push((0..3).map(|i| next(6000 + round * 3 + i)).collect());
    }
    steps.push(Vec::new()); // the explicit compaction
    steps.push(vec![next(1)]);
    steps
}

/// What the model says after a run: key -> acceptable values (the last acknowledged one, or
/// the base value, plus those of the batch in flight when the power went).
#[derive(Debug, Default)]
struct Model {
    acked: BTreeMap<u64, Value>,
    in_flight: Vec<(u64, Value)>,
}

fn run(base: &Path, work: &Path, crash_at: Option<u64>, seed: u64) -> (CrashSim, Model) {
    let _ = std::fs::remove_dir_all(work);
    std::fs::create_dir_all(work).unwrap();
    for f in ["db", "db.meta"] {
        std::fs::copy(base.join(f), work.join(f)).unwrap();
    }
    let sim = CrashSim::new(work, crash_at, seed).unwrap();
    let mut model = Model::default();
    let opts = DbOptions {
        memtable_limit_bytes: 8 * ENTRY_BYTES,
        storage: Arc::new(sim.clone()),
        ..DbOptions::default()
    };
    let Ok(d) = Db::open_opts(&work.join("db"), opts) else {
        assert!(sim.image().is_some(), "open fails only from the crash");
        return (sim, model);
    };
    for step in workload() {
        let r = if step.is_empty() { d.compact() } else { d.put_batch(&step) };
        if let Err(e) = r {
            assert!(e.to_string().contains("simulated power loss"), "only the crash fails: {e}");
            model.in_flight = step;
            break;
        }
        model.acked.extend(step);
    }
    (sim, model)
}

fn check(image_dir: &Path, model: &Model, point: &str) {
    let d = Db::open(&image_dir.join("db")).unwrap_or_else(|e| panic!("{point}: open: {e}"));
    let allowed = |k: u64, got: Option<Value>| {
        let base = (k < BASE_KEYS).then(|| bpfkv_value(k));
        let want = model.acked.get(&k).copied().or(base);
        got == want || model.in_flight.iter().any(|&(fk, fv)| fk == k && got == Some(fv))
    };
    for (&k, v) in &model.acked {
        let got = d.get(k).unwrap_or_else(|e| panic!("{point}: get {k}: {e}"));
        assert!(allowed(k, got), "{point}: acknowledged key {k}: {got:?}, want {v:?}");
    }
    // The tree passes a full compaction, then a full scan equals the model exactly.
    d.compact().unwrap_or_else(|e| panic!("{point}: compaction of the recovered tree: {e}"));
    let store = d.store();
    let all = RangeScan::new(&store).collect(0, u64::MAX).unwrap();
    let keys: std::collections::BTreeSet<u64> = all.iter().map(|e| e.0).collect();
    for (k, v) in all {
        assert!(allowed(k, Some(v)), "{point}: scan: key {k} has a value never put");
    }
    for k in (0..BASE_KEYS).chain(model.acked.keys().copied()) {
        assert!(keys.contains(&k), "{point}: key {k} lost from the tree");
    }
}

#[test]
fn no_acknowledged_put_is_lost_at_any_crash_point() {
    let t = TempDir::new("power-loss");
    let base = t.join("base");
    std::fs::create_dir_all(&base).unwrap();
    create_bpfkv(&base.join("db"), NodeSize::B512, 2, &mut |_, _| {}).unwrap();
    let work = t.join("work");
    let image = t.join("image");

    // Torn-write choices per crash point: each seed keeps/loses/tears differently.
    const SEEDS: u64 = 3;
    let (mut explored, mut ops_per_run) = (0u64, 0u64);
    let mut crash_at = 0u64;
    loop {
        let mut finished = false;
        for seed in 0..SEEDS {
            let (sim, model) = run(&base, &work, Some(crash_at), seed);
            let Some(img) = sim.image() else {
                // The workload ended before this operation: every point was explored.
                finished = true;
                ops_per_run = sim.ops();
                break;
            };
            let _ = std::fs::remove_dir_all(&image);
            std::fs::create_dir_all(&image).unwrap();
            for (name, bytes) in &img {
                std::fs::write(image.join(name), bytes).unwrap();
            }
            check(&image, &model, &format!("crash at op {crash_at} seed {seed}"));
            explored += 1;
        }
        if finished {
            break;
        }
        crash_at += 1;
        assert!(crash_at < 100_000, "bounded: the workload issues a few hundred operations");
    }
    // And a crash after the workload finished (everything synced must be there).
    let (sim, model) = run(&base, &work, None, 0);
    let img = sim.crash_now();
    let _ = std::fs::remove_dir_all(&image);
    std::fs::create_dir_all(&image).unwrap();
    for (name, bytes) in &img {
        std::fs::write(image.join(name), bytes).unwrap();
    }
    check(&image, &model, "crash after the workload");
    assert_eq!(model.acked.len(), 28, "the whole workload was acknowledged");
    println!(
        "power loss: {explored} crash points explored ({ops_per_run} storage operations per run \
         x {SEEDS} torn-write seeds, + 1 after the end); 0 acknowledged puts lost"
    );
    assert!(ops_per_run > 100, "the workload reaches compaction: {ops_per_run} operations");
}

/// Concurrent putters: group commits carry several threads' records, compactions start while
/// other threads wait. Every key is put once, so an acknowledged key must hold exactly its
/// value; the put in flight in each thread when the power went may or may not be there.
#[test]
fn concurrent_group_commits_lose_nothing_at_any_crash_point() {
    const THREADS: u64 = 4;
    const PUTS: u64 = 12;
    let t = TempDir::new("power-loss-concurrent");
    let base = t.join("base");
    std::fs::create_dir_all(&base).unwrap();
    create_bpfkv(&base.join("db"), NodeSize::B512, 1, &mut |_, _| {}).unwrap();
    let (work, image) = (t.join("work"), t.join("image"));
    let mut explored = 0u64;
    for crash_at in 0u64.. {
        assert!(crash_at < 100_000, "bounded");
        let _ = std::fs::remove_dir_all(&work);
        std::fs::create_dir_all(&work).unwrap();
        for f in ["db", "db.meta"] {
            std::fs::copy(base.join(f), work.join(f)).unwrap();
        }
        let sim = CrashSim::new(&work, Some(crash_at), crash_at).unwrap();
        let opts = DbOptions {
            memtable_limit_bytes: 10 * ENTRY_BYTES,
            storage: Arc::new(sim.clone()),
            ..DbOptions::default()
        };
        let acked: Vec<(u64, Value)> = match Db::open_opts(&work.join("db"), opts) {
            Err(_) => Vec::new(),
            Ok(d) => {
                let d = Arc::new(d);
                let threads: Vec<_> = (0..THREADS)
                    .map(|th| {
                        let d = Arc::clone(&d);
                        std::thread::spawn(move || {
                            let mut acked = Vec::new();
                            for i in 0..PUTS {
                                let k = 1000 + th * 100 + i;
                                let v = val(&format!("t{th}-{i}"));
                                if d.put(k, &v).is_err() {
                                    break;
                                }
                                acked.push((k, v));
                            }
                            acked
                        })
                    })
                    .collect();
                threads.into_iter().flat_map(|h| h.join().unwrap()).collect()
            }
        };
        let Some(img) = sim.image() else {
            assert_eq!(acked.len() as u64, THREADS * PUTS);
            break;
        };
        let _ = std::fs::remove_dir_all(&image);
        std::fs::create_dir_all(&image).unwrap();
        for (name, bytes) in &img {
            std::fs::write(image.join(name), bytes).unwrap();
        }
        let d = Db::open(&image.join("db"))
            .unwrap_or_else(|e| panic!("crash at op {crash_at}: open: {e}"));
        for (k, v) in &acked {
            assert_eq!(d.get(*k).unwrap(), Some(*v), "crash at op {crash_at}: key {k}");
        }
        d.compact().unwrap_or_else(|e| panic!("crash at op {crash_at}: compaction: {e}"));
        for k in 0..31u64 {
            assert_eq!(
                d.get(k).unwrap(),
                Some(bpfkv_value(k)),
                "crash at op {crash_at}: tree key {k}"
            );
        }
        explored += 1;
    }
    println!("power loss, {THREADS} concurrent putters: {explored} crash points explored; 0 acknowledged puts lost");
    assert!(explored > 50, "the workload reaches compaction: {explored} operations");
}
