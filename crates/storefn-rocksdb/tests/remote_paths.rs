//! Remote Gets through a storefn server on loopback, against RocksDB's own Get: pushdown (one
//! XRP request per candidate file, a Get's in one frame) and rpc-read (every block over the
//! network through the client cache), at client caches of 1%, 10% and 100% of the index and
//! filter bytes; a compaction that replaces files under an open client.

mod support;

use std::path::Path;

use storefn_rocksdb::remote::{RemoteConfig, RemoteDb, RemotePath};
use storefn_rocksdb::Lookup;
use storefn_server::{Server, ServerConfig};
use storefn_wire::{Client, ClientConfig};
use support::{build, build_with, key, rocksdb_gets, tool_cmd, TempDir};

struct Served(Server);
impl Drop for Served {
    fn drop(&mut self) {
        self.0.stop();
    }
}

fn serve(dir: &Path) -> (Served, String) {
    let s = Server::start("127.0.0.1:0", ServerConfig::new(dir)).unwrap();
    let a = s.local_addr().to_string();
    (Served(s), a)
}

fn open(addr: &str, path: RemotePath, cache_fraction: f64) -> RemoteDb {
    let c = Client::connect(addr, ClientConfig::default()).unwrap();
    let cfg = RemoteConfig { path, cache_fraction, ..RemoteConfig::default() };
    RemoteDb::open(c, addr, "db", cfg).unwrap()
}

fn value(l: Lookup, k: &[u8]) -> Option<Vec<u8>> {
    match l {
        Lookup::Value(v) => Some(v),
        Lookup::NotFound => None,
        Lookup::Fallback(r) => panic!("{}: fallback {r:?}", String::from_utf8_lossy(k)),
    }
}

#[test]
fn pushdown_and_rpc_read_equal_rocksdb_at_every_cache_size() {
    let d = TempDir::new("rocks-remote");
    let db = d.0.join("db");
    std::fs::create_dir_all(&db).unwrap();
    build_with(&db, 21, 4_000, 4096, "no", "crc32c");
    let keys: Vec<Vec<u8>> = (0..4_050).step_by(3).map(key).collect();
    let want = rocksdb_gets(&db, &keys);
    let (_s, addr) = serve(&d.0);
    for path in [RemotePath::Pushdown, RemotePath::RpcRead] {
        for frac in [0.01, 0.1, 1.0] {
            let mut r = open(&addr, path, frac);
            let rt0 = r.round_trips();
            for (k, w) in keys.iter().zip(&want) {
                let got = value(r.get(k).unwrap().0, k);
                assert_eq!(&got, w, "{path:?} {frac}: {}", String::from_utf8_lossy(k));
            }
            let per_get = (r.round_trips() - rt0) as f64 / keys.len() as f64;
            let st = r.stats();
            if path == RemotePath::Pushdown {
                // One frame per Get, plus the rpc-read fallbacks of values past the scratch.
                assert!(per_get < 1.3, "{frac}: {per_get} round trips per Get, {st:?}");
                assert!(st.fallbacks * 5 < st.chains, "{st:?}");
            } else if frac < 0.5 {
                assert!(per_get > 1.5, "rpc-read at {frac}: {per_get} round trips per Get");
            }
        }
    }
}

#[test]
fn a_compaction_under_an_open_client_is_seen_and_no_dropped_file_answers() {
    let d = TempDir::new("rocks-remote-stale");
    let db = d.0.join("db");
    std::fs::create_dir_all(&db).unwrap();
    build_with(&db, 4, 2_000, 4096, "no", "crc32c");
    let (_s, addr) = serve(&d.0);
    for path in [RemotePath::Pushdown, RemotePath::RpcRead] {
        let mut r = open(&addr, path, 0.1);
        tool_cmd(&db, &["put", "key00000007", "after-compaction"]);
        tool_cmd(&db, &["delete", "key00000009"]);
        tool_cmd(&db, &["compact"]);
        let keys: Vec<Vec<u8>> = (0..2_000).step_by(7).map(key).collect();
        let want = rocksdb_gets(&db, &keys);
        for (k, w) in keys.iter().zip(&want) {
            assert_eq!(&value(r.get(k).unwrap().0, k), w, "{path:?}");
        }
        assert_eq!(
            value(r.get(b"key00000007").unwrap().0, b"k"),
            Some(b"after-compaction".to_vec())
        );
        assert_eq!(value(r.get(b"key00000009").unwrap().0, b"k"), None);
        assert!(r.stats().reopens >= 1, "{path:?}: {:?}", r.stats());
    }
}

#[test]
fn xxh3_tables_are_answered_the_rpc_read_way_and_counted() {
    let d = TempDir::new("rocks-remote-xxh3");
    let db = d.0.join("db");
    std::fs::create_dir_all(&db).unwrap();
    build(&db, 8, 1_000, 4096, "no");
    let keys: Vec<Vec<u8>> = (0..1_000).step_by(5).map(key).collect();
    let want = rocksdb_gets(&db, &keys);
    let (_s, addr) = serve(&d.0);
    let mut r = open(&addr, RemotePath::Pushdown, 0.01);
    for (k, w) in keys.iter().zip(&want) {
        assert_eq!(&value(r.get(k).unwrap().0, k), w);
    }
    let st = r.stats();
    assert!(st.chains == 0 && st.fallbacks > 0, "{st:?}");
}

#[test]
fn the_client_holds_index_and_filters_only_in_its_budgeted_cache_and_refreshes_it_by_samples() {
    let d = TempDir::new("rocks-remote-budget");
    let db = d.0.join("db");
    std::fs::create_dir_all(&db).unwrap();
    build_with(&db, 22, 4_000, 4096, "no", "crc32c");
    let keys: Vec<Vec<u8>> = (0..4_050).step_by(2).map(key).collect();
    let want = rocksdb_gets(&db, &keys);
    let (_s, addr) = serve(&d.0);
    for path in [RemotePath::Pushdown, RemotePath::RpcRead] {
        for frac in [0.01, 0.3, 1.0] {
            let mut r = open(&addr, path, frac);
            let meta = r.meta_bytes();
            let (cap, used) = r.cache_bytes();
            assert_eq!(cap, (meta as f64 * frac).ceil() as u64, "{path:?} {frac}");
            assert!(used <= cap, "{path:?} {frac}: {used} > {cap}");
            assert_eq!(r.held_meta_bytes(), 0, "index and filters held outside the cache");
            for (k, w) in keys.iter().zip(&want) {
                let got = value(r.get(k).unwrap().0, k);
                assert_eq!(&got, w, "{path:?} {frac}: {}", String::from_utf8_lossy(k));
            }
            let (_, used) = r.cache_bytes();
            assert!(used <= cap, "{path:?} {frac} after the Gets: {used} > {cap}");
            assert_eq!(r.held_meta_bytes(), 0);
            let st = r.stats();
            if path == RemotePath::Pushdown && frac == 0.3 {
                assert!(st.cache_refreshes > 0, "sampled refreshes: {st:?}");
            }
            if path == RemotePath::RpcRead {
                assert_eq!(st.cache_refreshes, 0, "rpc-read reads every block anyway: {st:?}");
            }
        }
    }
}
