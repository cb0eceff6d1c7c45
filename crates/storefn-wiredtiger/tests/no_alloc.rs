//! No allocation per lookup in the steady state of the chain paths (one chain, a batch of
//! chains, and `Lookups` on `xrp`): the host's checksum of every block runs over the engine's
//! buffer in place.

mod common;

use common::TempDir;
use std::sync::{Arc, Mutex};
use storefn_testkit::CountingAlloc;
use storefn_wiredtiger::native::Native;
use storefn_wiredtiger::{
    Answer, Lookups, Outcome, ReadPath, Table, TreeCache, XrpOptions, XrpTree, HOP_BYTES,
};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

#[test]
fn chain_lookups_allocate_nothing_per_lookup() {
    let dir = TempDir::new("noalloc");
    {
        let wt = Native::open(&dir.0, "create").unwrap();
        // WiredTiger's default page sizes: 32 KiB leaves, whole-block checksums.
        wt.create("table:t", "key_format=S,value_format=S").unwrap();
        let mut c = wt.cursor("table:t").unwrap();
        for i in 0..20_000 {
            c.insert(format!("key{i:06}\0").as_bytes(), format!("value {i} {i:>40}\0").as_bytes())
                .unwrap();
        }
    }
    let keys: Vec<Vec<u8>> = (0..32).map(|i| format!("key{:06}\0", i * 611).into_bytes()).collect();
    let t = Table::open(&dir.0, "t").unwrap();
    let mut x = XrpTree::open(t.tree()).unwrap();
    let mut value = Vec::with_capacity(4096);
    let mut found = 0;
    let mut run = |x: &mut XrpTree, value: &mut Vec<u8>| {
        for k in &keys {
            assert_eq!(x.get(t.tree(), k, value).unwrap(), Outcome::Found);
        }
        x.get_batch(t.tree(), &keys, |_, o, _| {
            assert!(matches!(o, Ok(Outcome::Found)));
            found += 1;
        })
        .unwrap();
    };
    run(&mut x, &mut value); // warm-up: the engine's and the VM's first-use state
    let before = CountingAlloc::thread_allocs();
    for _ in 0..50 {
        run(&mut x, &mut value);
    }
    let n = CountingAlloc::thread_allocs() - before;
    assert_eq!(n, 0, "{n} allocations in 3,200 chain lookups");
    assert!(x.hops >= 2 * 51 * 64, "two hops a lookup at least: {}", x.hops);

    // The block cache: warm (every leaf cached: the function runs in place), and two slots
    // (every lookup reads its leaf, evicts, and waits for a chain of the batch reading it).
    for slots in [64, 2] {
        let alloc = t.tree().allocation_size();
        let cache = TreeCache::new(slots * u64::from(HOP_BYTES), alloc);
        let opts = XrpOptions { cache: Some(Arc::new(Mutex::new(cache))), direct: true };
        let mut x = XrpTree::open_with(t.tree(), opts).unwrap();
        run(&mut x, &mut value);
        let before = CountingAlloc::thread_allocs();
        for _ in 0..50 {
            run(&mut x, &mut value);
        }
        let n = CountingAlloc::thread_allocs() - before;
        assert_eq!(n, 0, "{n} allocations in 3,200 cached lookups ({slots} slots)");
    }

    let mut l = Lookups::open(&dir.0, "t", ReadPath::Xrp).unwrap();
    let user: Vec<&[u8]> = keys.iter().map(|k| &k[..k.len() - 1]).collect();
    for u in &user {
        assert_eq!(l.get(u, &mut value).unwrap(), Answer::Found);
    }
    let before = CountingAlloc::thread_allocs();
    for _ in 0..50 {
        for u in &user {
            assert_eq!(l.get(u, &mut value).unwrap(), Answer::Found);
        }
    }
    let n = CountingAlloc::thread_allocs() - before;
    assert_eq!(n, 0, "{n} allocations in 1,600 lookups (staleness checks included)");
}
