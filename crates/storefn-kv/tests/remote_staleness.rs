//! BPF-oF staleness: clients with cached top levels look keys up while the server's tree is
//! compacted (a new file renamed over the old one, with a different shape) again and again.
//! Every reply carries the file version; a changed version drops the cache and redoes the
//! lookup, so no lookup ever returns a wrong value or misses a key that was always present.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{client, make_db, serve, TempDir};
use rand::{Rng, SeedableRng};
use storefn_kv::bpfkv_value;
use storefn_kv::layout::tree::VALUE_BYTES;
use storefn_kv::value_text;
use storefn_kv::Db;
use storefn_kv::{RemoteKv, RemotePath};

/// Compactions the writer runs (bounded), and the longest the test may take.
const ROUNDS: u64 = 12;
const DEADLINE: Duration = Duration::from_secs(120);

fn text_value(s: &str) -> [u8; VALUE_BYTES] {
    let mut v = [0u8; VALUE_BYTES];
    v[..s.len()].copy_from_slice(s.as_bytes());
    v
}

/// Whether `v` is a value key `k` ever had.
fn belongs_to(k: u64, v: &[u8; VALUE_BYTES]) -> bool {
    if *v == bpfkv_value(k) {
        return true;
    }
    let t = value_text(v);
    t.strip_prefix("upd")
        .and_then(|r| r.split_once('-'))
        .is_some_and(|(_, key)| key == k.to_string())
        || t == format!("new-{k}")
}

#[test]
fn compaction_during_lookups_never_returns_a_wrong_value() {
    let dir = TempDir::new("stale");
    let db = make_db(&dir, 3);
    let n = 31u64.pow(3);
    let server = serve(dir.path(), 2);
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let readers: Vec<_> = [
        (RemotePath::Pushdown, 2),
        (RemotePath::Pushdown, 1),
        (RemotePath::RpcRead, 2),
        (RemotePath::RpcRead, 0),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, (path, cache))| {
        let c = client(&server);
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut kv = RemoteKv::open(c, "db", cache).unwrap();
            let mut rng = rand::rngs::SmallRng::seed_from_u64(i as u64);
            let mut lookups = 0u64;
            // Bounded: the writer stops us, and so does the deadline.
            while !stop.load(Ordering::Relaxed) && t0.elapsed() < DEADLINE {
                let keys: Vec<u64> = (0..16).map(|_| rng.gen_range(0..n + ROUNDS * 40)).collect();
                let got = kv.get_many(&keys, path).unwrap();
                for (k, v) in keys.iter().zip(&got) {
                    match v {
                        Some(v) => assert!(
                            belongs_to(*k, v),
                            "{path:?} cache {cache}: key {k} got {:?}",
                            value_text(v)
                        ),
                        None => assert!(
                            *k >= n,
                            "{path:?} cache {cache}: key {k} (always present) not found"
                        ),
                    }
                }
                lookups += keys.len() as u64;
            }
            (lookups, kv.stats())
        })
    })
    .collect();
    let w = Db::open_with(&db, 1 << 30).unwrap();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(99);
    for r in 0..ROUNDS {
        // New keys past the end grow the tree (a different shape: leaves move), and updates.
        let mut batch: Vec<(u64, [u8; VALUE_BYTES])> =
            (0..40).map(|i| n + r * 40 + i).map(|k| (k, text_value(&format!("new-{k}")))).collect();
        for _ in 0..40 {
            let k = rng.gen_range(0..n);
            batch.push((k, text_value(&format!("upd{r}-{k}"))));
        }
        w.put_batch(&batch).unwrap();
        w.compact().unwrap();
        std::thread::sleep(Duration::from_millis(30));
    }
    stop.store(true, Ordering::Relaxed);
    let mut reloads = 0;
    for r in readers {
        let (lookups, st) = r.join().unwrap();
        assert!(lookups > 0);
        reloads += st.reloads;
    }
    // The version path was taken: clients saw the file change under them and reloaded.
    assert!(reloads > 0, "no reader noticed a compaction");
    server.stop();
    server.join().unwrap();
}
