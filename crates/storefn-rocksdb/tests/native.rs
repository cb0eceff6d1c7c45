//! RocksDB's own C API as this crate binds it (the `native` feature): its Get and batched
//! MultiGet answer as the tests' rocks_tool (RocksDB through C) does, and its writes are seen
//! by this crate's reader.

mod support;

use storefn_rocksdb::{Db, Lookup, Native, NativeOptions};
use support::{build, key, rocksdb_gets, TempDir};

const KEYS: u64 = 5_000;

fn sample() -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = (0..KEYS + 200).map(key).collect();
    keys.extend([b"".to_vec(), b"zzz".to_vec()]);
    keys
}

#[test]
fn native_get_and_multiget_equal_rocksdb_over_levels_l0_and_the_wal() {
    let d = TempDir::new("rocks-native");
    build(&d.0, 3, KEYS, 4096, "no");
    let keys = sample();
    let want = rocksdb_gets(&d.0, &keys);
    let n = Native::open(&d.0, &NativeOptions::default()).unwrap();
    let mut v = Vec::new();
    let mut present = 0;
    for (k, w) in keys.iter().zip(&want) {
        let found = n.get(k, &mut v).unwrap();
        assert_eq!(found.then_some(&v), w.as_ref(), "key {}", String::from_utf8_lossy(k));
        present += usize::from(found);
    }
    assert!(present > 0 && present < keys.len(), "present and absent keys: {present}");
    for (chunk, want) in keys.chunks(32).zip(want.chunks(32)) {
        let refs: Vec<&[u8]> = chunk.iter().map(Vec::as_slice).collect();
        let mut out = vec![Vec::new(); refs.len()];
        let mut found = vec![false; refs.len()];
        n.multi_get(&refs, &mut out, &mut found).unwrap();
        for i in 0..refs.len() {
            assert_eq!(found[i].then_some(&out[i]), want[i].as_ref());
        }
    }
    assert!(n.cache_usage() > 0, "blocks went through the block cache");
}

#[test]
fn native_writes_are_seen_by_the_reader_after_close() {
    let d = TempDir::new("rocks-native-write");
    let o = NativeOptions { create: true, read_only: false, ..NativeOptions::default() };
    {
        let n = Native::open(&d.0, &o).unwrap();
        let pairs: Vec<(Vec<u8>, Vec<u8>)> =
            (0..2000).map(|i| (key(i), format!("v{i}").into_bytes())).collect();
        n.put_unlogged(pairs.iter().map(|(k, v)| (k.as_slice(), v.as_slice()))).unwrap();
        n.flush().unwrap();
        n.put(&key(5), b"five").unwrap();
        n.delete(&key(6)).unwrap();
        assert_eq!(n.scan(&key(1990), 100).unwrap(), 10);
    }
    let db = Db::open(&d.0).unwrap();
    let get = |i| match db.get(&key(i)).unwrap().0 {
        Lookup::Value(v) => Some(v),
        Lookup::NotFound => None,
        Lookup::Fallback(r) => panic!("fallback {r:?}"),
    };
    assert_eq!(get(5).as_deref(), Some(&b"five"[..]));
    assert_eq!(get(6), None);
    assert_eq!(get(7).as_deref(), Some(&b"v7"[..]));
    assert_eq!(get(2001), None);
}

#[test]
fn a_missing_database_is_a_named_error() {
    let d = TempDir::new("rocks-native-none");
    let e = Native::open(&d.0.join("nothing"), &NativeOptions::default()).unwrap_err();
    let s = e.to_string();
    assert!(s.contains("nothing") && s.contains("RocksDB open"), "{s}");
}
