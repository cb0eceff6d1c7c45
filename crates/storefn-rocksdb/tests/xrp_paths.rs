//! The storage-function paths against RocksDB's own Get, on databases RocksDB wrote: one chain
//! per candidate file (index cached or read by the function), rounds of chains for many keys,
//! and the function's own CRC-32C check; compressed files through the fallback.

mod support;

use storefn_rocksdb::{DataCache, Db, Lookup, XrpConfig, XrpDb};
use support::{build, build_with, key, rocksdb_gets, tool_cmd, TempDir};

fn lookup_value(l: Lookup, k: &[u8]) -> Option<Vec<u8>> {
    match l {
        Lookup::Value(v) => Some(v),
        Lookup::NotFound => None,
        Lookup::Fallback(r) => panic!("{}: fallback {r:?}", String::from_utf8_lossy(k)),
    }
}

fn check(dir: &std::path::Path, n: u64, cfg: XrpConfig) -> storefn_rocksdb::XrpStats {
    let db = Db::open(dir).unwrap();
    let keys: Vec<Vec<u8>> = (0..n + 50).map(key).collect();
    let want = rocksdb_gets(dir, &keys);
    let mut x = XrpDb::new(&db, cfg).unwrap();
    for (k, w) in keys.iter().zip(&want) {
        let (l, _) = x.get(&db, k).unwrap();
        assert_eq!(&lookup_value(l, k), w, "get {}", String::from_utf8_lossy(k));
    }
    let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let mut out = Vec::new();
    for (chunk, wants) in refs.chunks(32).zip(want.chunks(32)) {
        x.multi_get(&db, chunk, &mut out).unwrap();
        for ((l, _), (k, w)) in out.drain(..).zip(chunk.iter().zip(wants)) {
            assert_eq!(&lookup_value(l, k), w, "multi_get {}", String::from_utf8_lossy(k));
        }
    }
    x.stats
}

#[test]
fn chains_equal_rocksdb_with_the_index_cached_or_read_by_the_function() {
    let d = TempDir::new("rocks-xrp-4k");
    build_with(&d.0, 11, 8_000, 4096, "no", "crc32c");
    for index_cached in [true, false] {
        for verify_in_function in [false, true] {
            let cfg = XrpConfig { index_cached, verify_in_function, ..XrpConfig::default() };
            let st = check(&d.0, 8_000, cfg);
            assert!(st.chains > 8_000, "{cfg:?}: {st:?}");
            // Only values larger than the scratch go back to plain reads (1 in 8 is > 5000 B).
            assert!(st.fallbacks * 4 < st.chains, "{cfg:?}: {st:?}");
            let per = if index_cached { 1 } else { 2 };
            assert!(st.hops >= st.chains * per, "{cfg:?}: {st:?}");
        }
    }
}

#[test]
fn chains_read_16_and_32_kib_blocks_in_one_hop() {
    for bs in [16 * 1024, 32 * 1024] {
        let d = TempDir::new(&format!("rocks-xrp-{bs}"));
        build_with(&d.0, 5, 4_000, bs, "no", "crc32c");
        // The server's default per-hop budget covers the function's walk and its CRC-32C
        // (the runtime's helper, charged a byte in 8) over blocks of either size.
        let server_default = storefn_server::ServerConfig::new(&d.0).insn_budget;
        let cfg = XrpConfig {
            index_cached: false,
            verify_in_function: true,
            insn_budget: Some(server_default),
            ..XrpConfig::default()
        };
        let st = check(&d.0, 4_000, cfg);
        assert!(st.chains > 4_000 && st.fallbacks * 4 < st.chains, "{bs}: {st:?}");
    }
}

#[test]
fn compressed_files_are_answered_through_the_fallback_and_counted() {
    let d = TempDir::new("rocks-xrp-snappy");
    build(&d.0, 3, 3_000, 4096, "snappy");
    let st = check(&d.0, 3_000, XrpConfig { index_cached: false, ..XrpConfig::default() });
    assert!(st.fallbacks > st.chains / 2, "{st:?}");
}

#[test]
fn engines_sized_to_the_largest_block_answer_like_64_kib_hops_and_direct_reads_agree() {
    let d = TempDir::new("rocks-xrp-sized");
    build_with(&d.0, 13, 4_000, 4096, "no", "crc32c");
    let db = Db::open(&d.0).unwrap();
    // Values up to 8 KB overflow the 4 KiB target: the largest block is past one page.
    let largest = db.largest_data_block();
    assert!(largest > 4096, "{largest}");
    let sized = XrpConfig::default().sized_for(&db, 4);
    assert_eq!(sized.chains, 4);
    assert!(sized.hop_bytes as u64 >= largest + 5 && (sized.hop_bytes as u64) < largest + 5 + 4096);
    let full = check(&d.0, 4_000, XrpConfig::default());
    let st = check(&d.0, 4_000, sized);
    assert_eq!(st, full, "sizing the hops to the largest block changes nothing");
    let direct = check(&d.0, 4_000, XrpConfig { direct: true, ..sized });
    assert_eq!(direct, full, "O_DIRECT chains: the same answers and chains");
    // Hops shorter than some blocks: those files' lookups go to plain reads, still equal.
    let short = check(&d.0, 4_000, XrpConfig { hop_bytes: 4096, ..sized });
    assert!(short.fallbacks > full.fallbacks, "{short:?} vs {full:?}");
}

#[test]
fn a_data_cache_answers_repeated_lookups_without_chains_and_equal_to_rocksdb() {
    let d = TempDir::new("rocks-xrp-cache");
    build_with(&d.0, 17, 3_000, 4096, "no", "crc32c");
    let db = Db::open(&d.0).unwrap();
    let keys: Vec<Vec<u8>> = (0..3_050).map(key).collect();
    let want = rocksdb_gets(&d.0, &keys);
    let cache = DataCache::new(64 << 20);
    let mut x = XrpDb::new(&db, XrpConfig::default().sized_for(&db, 8)).unwrap();
    x.set_data_cache(Some(cache.clone()));
    let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let mut out = Vec::new();
    // Three passes: a block is admitted at its second miss (the cache's doorkeeper), so by the
    // third every block a chain answered from is cached.
    for pass in 0..3 {
        let before = x.stats;
        for (chunk, wants) in refs.chunks(16).zip(want.chunks(16)) {
            x.multi_get(&db, chunk, &mut out).unwrap();
            for ((l, _), (k, w)) in out.drain(..).zip(chunk.iter().zip(wants)) {
                assert_eq!(&lookup_value(l, k), w, "pass {pass}: {}", String::from_utf8_lossy(k));
            }
        }
        let chains = x.stats.chains - before.chains;
        let hits = x.stats.cache_hits - before.cache_hits;
        let fallbacks = x.stats.fallbacks - before.fallbacks;
        if pass == 0 {
            // Neighbouring keys share blocks: some hit already.
            assert!(chains > 1_000 && hits > 0 && cache.used() > 0, "{:?}", x.stats);
        } else if pass == 2 {
            // Every block a chain answered from is cached: the only chains left are those the
            // function hands back (values past the scratch), which are not cached.
            assert_eq!(chains, fallbacks, "{:?}", x.stats);
            assert!(hits > 2_500, "{:?}", x.stats);
        }
    }
    // A second engine sharing the cache answers from it too.
    let mut y = XrpDb::new(&db, XrpConfig::default().sized_for(&db, 1)).unwrap();
    y.set_data_cache(Some(cache));
    for (k, w) in keys.iter().zip(&want).take(500) {
        assert_eq!(&lookup_value(y.get(&db, k).unwrap().0, k), w);
    }
    assert_eq!(y.stats.chains, y.stats.fallbacks, "{:?}", y.stats);
}

/// Every key through `x` against `want`, in batches of 16; the cache's bytes checked against
/// its budget after every batch.
fn batches_equal(
    x: &mut XrpDb,
    db: &Db,
    keys: &[Vec<u8>],
    want: &[Option<Vec<u8>>],
    cache: &DataCache,
    cap: u64,
) {
    let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let mut out = Vec::new();
    for (chunk, wants) in refs.chunks(16).zip(want.chunks(16)) {
        x.multi_get(db, chunk, &mut out).unwrap();
        for ((l, _), (k, w)) in out.drain(..).zip(chunk.iter().zip(wants)) {
            assert_eq!(&lookup_value(l, k), w, "{}", String::from_utf8_lossy(k));
        }
        assert!(cache.used() <= cap, "{} bytes cached in a {cap}-byte budget", cache.used());
    }
}

#[test]
fn a_cached_block_never_answers_for_a_file_a_compaction_replaced() {
    let d = TempDir::new("rocks-xrp-cache-compact");
    build_with(&d.0, 23, 2_000, 4096, "no", "crc32c");
    let keys: Vec<Vec<u8>> = (0..2_050).map(key).collect();
    let cache = DataCache::new(64 << 20);
    let db = Db::open(&d.0).unwrap();
    let mut x = XrpDb::new(&db, XrpConfig::default().sized_for(&db, 8)).unwrap();
    x.set_data_cache(Some(cache.clone()));
    // Twice: the second pass answers from the cache, so the blocks of the keys changed below
    // are cached (with their old entries) when the compaction replaces their files.
    let want = rocksdb_gets(&d.0, &keys);
    for _ in 0..2 {
        batches_equal(&mut x, &db, &keys, &want, &cache, 64 << 20);
    }
    assert!(x.stats.cache_hits > 1_500, "{:?}", x.stats);
    drop(db);
    for (k, v) in [
        ("key00000007", Some("after-compaction")),
        ("key00000009", None),
        ("key00001500", Some("new")),
    ] {
        match v {
            Some(v) => tool_cmd(&d.0, &["put", k, v]),
            None => tool_cmd(&d.0, &["delete", k]),
        }
    }
    tool_cmd(&d.0, &["compact"]);
    let db = Db::open(&d.0).unwrap();
    let want = rocksdb_gets(&d.0, &keys);
    assert_eq!(want[7].as_deref(), Some(&b"after-compaction"[..]));
    assert_eq!(want[9], None);
    // The same engine and cache, the new files: every answer is the new one.
    let before = x.stats;
    batches_equal(&mut x, &db, &keys, &want, &cache, 64 << 20);
    for (k, w) in keys.iter().zip(&want).take(20) {
        assert_eq!(&lookup_value(x.get(&db, k).unwrap().0, k), w);
    }
    assert!(x.stats.chains - before.chains > 500, "the new files were read: {:?}", x.stats);
}

#[test]
fn a_data_cache_holds_to_its_budget_and_still_answers_like_rocksdb() {
    let d = TempDir::new("rocks-xrp-cache-small");
    build_with(&d.0, 29, 3_000, 4096, "no", "crc32c");
    let (cap, db) = (32 << 10, Db::open(&d.0).unwrap());
    let (cache, mut x) = (DataCache::new(cap), XrpDb::new(&db, XrpConfig::default()).unwrap());
    x.set_data_cache(Some(cache.clone()));
    let keys: Vec<Vec<u8>> = (0..3_050).map(key).collect();
    let want = rocksdb_gets(&d.0, &keys);
    for _ in 0..2 {
        batches_equal(&mut x, &db, &keys, &want, &cache, cap);
    }
    let (hits, misses) = cache.hits_and_misses();
    assert!(hits > 0 && misses > hits, "a small cache hits neighbours only: {hits} / {misses}");
    assert!(cache.used() > cap / 2, "the cache was used: {}", cache.used());
}

#[test]
fn a_reopened_version_shares_the_tables_still_live_and_answers_like_rocksdb() {
    let d = TempDir::new("rocks-reopen");
    build_with(&d.0, 31, 2_000, 4096, "no", "crc32c");
    let keys: Vec<Vec<u8>> = (0..2_050).map(key).collect();
    let old = Db::open(&d.0).unwrap();
    tool_cmd(&d.0, &["put", "key00000011", "after-flush"]);
    tool_cmd(&d.0, &["flush"]);
    let new = old.reopen().unwrap();
    let tables = |db: &Db| -> Vec<(u64, std::sync::Arc<storefn_rocksdb::Table>)> {
        db.levels().iter().flatten().map(|f| (f.meta.number, f.table.clone())).collect()
    };
    let (before, after) = (tables(&old), tables(&new));
    // The flush adds a file (and may start a compaction that replaces some): the files both
    // versions hold are one table, the others new ones.
    let (mut shared, mut fresh) = (0, 0);
    for (n, t) in &after {
        match before.iter().find(|(m, _)| m == n) {
            Some((_, o)) => {
                assert!(std::sync::Arc::ptr_eq(o, t), "file {n} read again");
                shared += 1;
            }
            None => {
                assert!(before.iter().all(|(_, o)| !std::sync::Arc::ptr_eq(o, t)));
                fresh += 1;
            }
        }
    }
    assert!(shared > 0 && fresh > 0, "{shared} shared, {fresh} new");
    let want = rocksdb_gets(&d.0, &keys);
    assert_eq!(want[11].as_deref(), Some(&b"after-flush"[..]));
    let mut x = XrpDb::new(&new, XrpConfig::default().sized_for(&new, 8)).unwrap();
    for (k, w) in keys.iter().zip(&want) {
        assert_eq!(&lookup_value(new.get(k).unwrap().0, k), w, "{}", String::from_utf8_lossy(k));
        assert_eq!(&lookup_value(x.get(&new, k).unwrap().0, k), w);
    }
}
