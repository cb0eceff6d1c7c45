//! BPF-KV through a server on loopback: remote lookups (rpc-read and pushdown, one frame or a
//! pipelined window) agree with the values `create` wrote on every key.

mod common;

use common::{client, make_db, serve, TempDir};
use storefn_kv::bpfkv_value;
use storefn_kv::{RemoteKv, RemotePath};

#[test]
fn remote_lookups_match_local_values_on_both_paths() {
    let dir = TempDir::new("lookups");
    make_db(&dir, 3);
    let server = serve(dir.path(), 2);
    let n = 31u64.pow(3);
    let keys: Vec<u64> =
        (0..200).map(|i| (i * 7919) % n).chain([0, n - 1, n, n + 5, u64::MAX]).collect();
    for cache in [0, 1, 2, 3] {
        for path in [RemotePath::RpcRead, RemotePath::Pushdown] {
            let mut kv = RemoteKv::open(client(&server), "db", cache).unwrap();
            let got = kv.get_many(&keys, path).unwrap();
            for (k, v) in keys.iter().zip(&got) {
                let want = (*k < n).then(|| bpfkv_value(*k));
                assert_eq!(*v, want, "key {k} cache {cache} {path:?}");
            }
            let st = kv.stats();
            let hops = u64::from(3 - cache.min(3)) + 1;
            match path {
                // One frame for the whole batch.
                RemotePath::Pushdown if cache < 3 => assert_eq!(st.round_trips, 1, "{st:?}"),
                // One READ per uncached level plus the value, for hits; misses stop at the leaf.
                RemotePath::RpcRead => {
                    assert!(st.round_trips <= keys.len() as u64 * hops, "{st:?}");
                }
                RemotePath::Pushdown => {}
            }
            assert_eq!(st.fallbacks, 0);
        }
    }
    server.stop();
    server.join().unwrap();
}

#[test]
fn pipelined_pushdown_keeps_a_window_in_flight_and_matches() {
    let dir = TempDir::new("pipe");
    make_db(&dir, 3);
    let server = serve(dir.path(), 1);
    let n = 31u64.pow(3);
    let keys: Vec<u64> = (0..1000).map(|i| (i * 7919) % n).chain([n, u64::MAX]).collect();
    for cache in [0, 2, 3] {
        let mut kv = RemoteKv::open(client(&server), "db", cache).unwrap();
        let mut lat = Vec::new();
        let got = kv.pushdown_pipelined(&keys, 32, 8, &mut lat).unwrap();
        for (k, v) in keys.iter().zip(&got) {
            assert_eq!(*v, (*k < n).then(|| bpfkv_value(*k)), "key {k} cache {cache}");
        }
        assert_eq!(lat.len(), keys.len());
        assert!(lat.iter().all(|&ns| ns > 0));
        if cache < 3 {
            // Frames of 8 lookups.
            assert_eq!(kv.stats().round_trips, keys.len().div_ceil(8) as u64, "{:?}", kv.stats());
        }
    }
    server.stop();
    server.join().unwrap();
}

/// A pushdown batch split into its send and its answers: two connections' batches in flight
/// at once answer what `get_many` answers, for every cache depth (all levels cached: the
/// lookups finish without a frame).
#[test]
fn split_pushdown_batches_in_flight_together_match_get_many() {
    let dir = TempDir::new("split");
    make_db(&dir, 3);
    let server = serve(dir.path(), 1);
    let n = 31u64.pow(3);
    let a: Vec<u64> = (0..150).map(|i| (i * 7919) % n).chain([n, u64::MAX]).collect();
    let b: Vec<u64> = (0..90).map(|i| (i * 104_729 + 5) % n).collect();
    for cache in [0, 1, 3] {
        let mut x = RemoteKv::open(client(&server), "db", cache).unwrap();
        let mut y = RemoteKv::open(client(&server), "db", cache).unwrap();
        let (sx, sy) = (x.push_send(&a).unwrap(), y.push_send(&b).unwrap());
        let gy = y.push_finish(&b, sy).unwrap();
        let gx = x.push_finish(&a, sx).unwrap();
        let mut r = RemoteKv::open(client(&server), "db", cache).unwrap();
        assert_eq!(gx, r.get_many(&a, RemotePath::Pushdown).unwrap(), "cache {cache}");
        assert_eq!(gy, r.get_many(&b, RemotePath::Pushdown).unwrap(), "cache {cache}");
        assert!(a.iter().zip(&gx).all(|(k, v)| *v == (*k < n).then(|| bpfkv_value(*k))));
        assert_eq!(x.stats().lookups, a.len() as u64);
    }
    server.stop();
    server.join().unwrap();
}
