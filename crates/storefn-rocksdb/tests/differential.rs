//! The reader against RocksDB's own Get, on databases RocksDB wrote: every key, present,
//! overwritten, deleted or never written, over several levels, overlapping L0 files and the WAL.

mod support;

use storefn_rocksdb::{Db, Lookup, Source};
use support::{build, key, rocksdb_gets, snapshot, TempDir};

const KEYS: u64 = 20_000;

fn check_all(db: &Db, dir: &std::path::Path, keys: &[Vec<u8>]) -> [u64; 3] {
    let want = rocksdb_gets(dir, keys);
    let mut from = [0u64; 3]; // memtable, files, nowhere
    for (k, w) in keys.iter().zip(&want) {
        let (got, src) = db.get(k).unwrap();
        let got = match got {
            Lookup::Value(v) => Some(v),
            Lookup::NotFound => None,
            Lookup::Fallback(r) => panic!("{}: fallback {r:?}", String::from_utf8_lossy(k)),
        };
        assert_eq!(&got, w, "key {}", String::from_utf8_lossy(k));
        from[match src {
            Source::Memtable => 0,
            Source::File(..) => 1,
            Source::Nowhere => 2,
        }] += 1;
    }
    from
}

#[test]
fn every_get_equals_rocksdb_over_levels_l0_and_the_wal() {
    let d = TempDir::new("rocks-diff");
    build(&d.0, 1, KEYS, 4096, "no");
    let before = snapshot(&d.0);
    let db = Db::open(&d.0).unwrap();
    let levels = db.levels();
    assert!(levels[0].len() >= 2, "two overlapping L0 files");
    let deeper = levels.iter().skip(1).filter(|l| !l.is_empty()).count();
    assert!(deeper >= 2, "files on at least two levels below L0: {deeper}");
    assert!(db.memtable_len() > 0, "writes left in the WAL");
    let mut keys: Vec<Vec<u8>> = (0..KEYS + 500).map(key).collect();
    keys.extend([
        b"".to_vec(),
        b"a".to_vec(),
        b"key".to_vec(),
        b"key0000000".to_vec(),
        b"zzz".to_vec(),
    ]);
    let from = check_all(&db, &d.0, &keys);
    assert!(from.iter().all(|n| *n > 0), "answers from the memtable, files and nowhere: {from:?}");
    drop(db);
    assert!(snapshot(&d.0) == before, "the reader changed the database directory");
}

#[test]
fn large_blocks_and_a_second_seed_agree_too() {
    let d = TempDir::new("rocks-diff-16k");
    build(&d.0, 7, 5_000, 16 * 1024, "no");
    let db = Db::open(&d.0).unwrap();
    let keys: Vec<Vec<u8>> = (0..5_100).map(key).collect();
    check_all(&db, &d.0, &keys);
}

#[test]
fn compressed_databases_are_read_through_the_decompressing_walk() {
    for codec in ["snappy", "lz4", "zstd"] {
        let d = TempDir::new(&format!("rocks-diff-{codec}"));
        build(&d.0, 3, 3_000, 4096, codec);
        let db = Db::open(&d.0).unwrap();
        let keys: Vec<Vec<u8>> = (0..3_050).map(key).collect();
        check_all(&db, &d.0, &keys);
        let decompressed: u64 =
            db.levels().iter().flatten().map(|f| f.table.blocks_decompressed()).sum();
        assert!(decompressed > 100, "{codec}: {decompressed} blocks decompressed");
    }
}
