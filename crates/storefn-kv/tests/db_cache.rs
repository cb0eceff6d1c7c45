//! Caches on the chain paths across writes: a `DbPath` (an xrp-batch path with a block LRU)
//! answers puts from the memtable and, after a compaction rewrote every block, is rebuilt over
//! the new tree instead of serving the old tree's blocks from its LRU.

mod common;

use common::TempDir;
use storefn_kv::bpfkv_value;
use storefn_kv::DbPath;
use storefn_kv::{create_bpfkv, Db, LookupPath, NodeSize, ProgSource};
use storefn_kv::{ChainOptions, XrpPath};

fn value(s: &str) -> [u8; 64] {
    let mut v = [0u8; 64];
    v[..s.len()].copy_from_slice(s.as_bytes());
    v
}

#[test]
fn compaction_rebuilds_the_cached_path_and_puts_are_seen_at_once() {
    let dir = TempDir::new("db-cache");
    let p = dir.join("db");
    create_bpfkv(&p, NodeSize::B512, 3, &mut common::noop()).unwrap();
    let db = Db::open(&p).unwrap();
    let mut path = DbPath::new(Box::new(|store| {
        let opts =
            ChainOptions { batch: true, chains: 8, cache_bytes: 4 << 20, ..Default::default() };
        Ok(Box::new(XrpPath::new(store, &ProgSource::BuiltIn, opts)?) as Box<dyn LookupPath>)
    }));
    let warm: Vec<u64> = (0..29_791).step_by(97).collect();
    let want: Vec<_> = warm.iter().map(|&k| Some(bpfkv_value(k))).collect();
    assert_eq!(db.multiget_via(&mut path, &warm).unwrap(), want);
    assert_eq!(db.multiget_via(&mut path, &warm).unwrap(), want);
    let s = path.stats().unwrap();
    assert!(s.cache_hits >= warm.len() as u64 * 4, "second pass served by the LRU: {s:?}");
    assert_eq!(path.builds(), 1);

    // A put: the memtable answers at once; the cached blocks are still the tree's.
    db.put(97, &value("updated")).unwrap();
    assert_eq!(db.get_via(&mut path, 97).unwrap(), Some(value("updated")));
    // New keys past the end make compaction write a larger tree: every offset moves (more
    // leaves, a value log further out), so a block cached from the old tree would be wrong.
    let added: Vec<(u64, [u8; 64])> =
        (0..2_000u64).map(|i| (40_000 + i, value(&format!("new{i}")))).collect();
    db.put_batch(&added).unwrap();
    db.compact().unwrap();
    assert_eq!(db.memtable_len(), 0, "everything is in the new tree");
    let mut want2 = want.clone();
    want2[1] = Some(value("updated")); // warm[1] == 97
    assert_eq!(db.multiget_via(&mut path, &warm).unwrap(), want2, "answers from the new tree");
    assert_eq!(path.builds(), 2, "the compaction rebuilt the path (and dropped its LRU)");
    let s = path.stats().unwrap();
    assert_eq!(s.lookups, warm.len() as u64, "a fresh path");
    assert_eq!(db.get_via(&mut path, 41_999).unwrap(), Some(value("new1999")));
    assert_eq!(db.get_via(&mut path, 42_000).unwrap(), None);
}
