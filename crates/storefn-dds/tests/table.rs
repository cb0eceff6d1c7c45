//! The cache table against a model (proptest vs HashMap) and under concurrent readers + writer.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use proptest::prelude::*;
use storefn_dds::{CacheTable, Inserted, Item, Lookup, TableError};

#[derive(Debug, Clone)]
enum Op {
    Insert { key: u64, version: u64, offset: u64 },
    Remove { key: u64 },
    RemoveAtMost { key: u64, max_version: u64 },
    Get { key: u64, min_version: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    // A small key space so keys repeat (replace, stale, remove of present keys).
    let key = 0u64..96;
    prop_oneof![
        4 => (key.clone(), 0u64..8, any::<u64>()).prop_map(|(key, version, offset)| Op::Insert { key, version, offset }),
        1 => key.clone().prop_map(|key| Op::Remove { key }),
        1 => (key.clone(), 0u64..8).prop_map(|(key, max_version)| Op::RemoveAtMost { key, max_version }),
        2 => (key, 0u64..8).prop_map(|(key, min_version)| Op::Get { key, min_version }),
    ]
}

fn item(key: u64, version: u64, offset: u64) -> Item {
    Item { key, version, file: (offset % 13) as u32, offset, size: (offset % 4097) as u32 }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Single-threaded, the table is exactly a map with versioned replace: every operation's
    /// result and the final contents agree with a HashMap. The table is small (64 slots
    /// for up to 96 keys) so displacement and Full are exercised too.
    #[test]
    fn table_matches_hashmap_model(ops in proptest::collection::vec(op(), 1..400)) {
        let table = CacheTable::with_capacity(40).unwrap();
        prop_assert_eq!(table.capacity(), 64);
        let mut model: HashMap<u64, Item> = HashMap::new();
        for op in ops {
            match op {
                Op::Insert { key, version, offset } => {
                    let new = item(key, version, offset);
                    let got = table.insert(new);
                    match model.get(&key).copied() {
                        Some(old) if old.version > version => {
                            prop_assert_eq!(got, Ok(Inserted::Stale { current_version: old.version }));
                        }
                        Some(old) => {
                            prop_assert_eq!(got, Ok(Inserted::Replaced { previous_version: old.version }));
                            model.insert(key, new);
                        }
                        None => match got {
                            Ok(Inserted::New { .. }) => { model.insert(key, new); }
                            Err(TableError::Full { key: k, len, .. }) => {
                                prop_assert_eq!(k, key);
                                prop_assert_eq!(len, model.len());
                            }
                            other => prop_assert!(false, "insert of new key {}: {:?}", key, other),
                        },
                    }
                }
                Op::Remove { key } => prop_assert_eq!(table.remove(key), model.remove(&key)),
                Op::RemoveAtMost { key, max_version } => {
                    let expect = match model.get(&key) {
                        Some(i) if i.version <= max_version => model.remove(&key),
                        _ => None,
                    };
                    prop_assert_eq!(table.remove_at_most(key, max_version), expect);
                }
                Op::Get { key, min_version } => {
                    let expect = match model.get(&key) {
                        Some(&i) if i.version >= min_version => Lookup::Hit(i),
                        Some(&i) => Lookup::Stale(i),
                        None => Lookup::Miss,
                    };
                    prop_assert_eq!(table.get_at_least(key, min_version), expect);
                }
            }
            prop_assert_eq!(table.len(), model.len());
        }
        for key in 0..96 {
            prop_assert_eq!(table.get(key), model.get(&key).copied());
        }
    }
}

/// Every field of an item written by the stress writer is a function of (key, version), so a
/// reader can tell a torn item (fields from two different writes) from a whole one.
fn stamped(key: u64, version: u64) -> Item {
    let x = key.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ version;
    Item { key, version, file: (x >> 40) as u32, offset: x, size: x as u32 }
}

/// One writer replaces resident keys in place and swaps two churn populations in and out (the
/// table near full, so churn inserts walk cuckoo paths and move resident items) while readers
/// check every item they see is whole and that a key's version never goes backwards for a
/// reader. Bounded: fixed writer rounds; readers stop when the writer finishes.
#[test]
fn concurrent_readers_never_see_a_torn_item() {
    const RESIDENT: u64 = 700;
    const CHURN: u64 = 200; // two populations of CHURN keys after the resident ones
    const KEYS: u64 = RESIDENT + 2 * CHURN;
    const WRITER_ROUNDS: u64 = 60;
    let table = Arc::new(CacheTable::with_capacity(900).unwrap());
    assert!(table.capacity() >= (RESIDENT + CHURN) as usize);
    let churn = |round: u64| (RESIDENT + (round % 2) * CHURN)..(RESIDENT + (round % 2 + 1) * CHURN);
    for key in (0..RESIDENT).chain(churn(0)) {
        table.insert(stamped(key, 0)).unwrap();
    }
    let done = Arc::new(AtomicBool::new(false));
    let checked = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..3)
        .map(|r| {
            let (table, done, checked) =
                (Arc::clone(&table), Arc::clone(&done), Arc::clone(&checked));
            std::thread::spawn(move || {
                let mut last_version = vec![0u64; KEYS as usize];
                let mut key = r as u64;
                let mut seen = 0u64;
                while !done.load(Ordering::Acquire) {
                    key = (key * 31 + 7) % KEYS;
                    if let Some(got) = table.get(key) {
                        assert_eq!(got, stamped(key, got.version), "torn item for key {key}");
                        assert!(
                            got.version >= last_version[key as usize],
                            "key {key} went back from version {} to {}",
                            last_version[key as usize],
                            got.version
                        );
                        last_version[key as usize] = got.version;
                        seen += 1;
                    }
                }
                checked.fetch_add(seen, Ordering::Relaxed);
            })
        })
        .collect();
    let mut displaced = 0;
    for round in 1..=WRITER_ROUNDS {
        for key in churn(round - 1) {
            assert_eq!(table.remove(key).map(|i| i.key), Some(key));
        }
        for key in churn(round) {
            match table.insert(stamped(key, round)).unwrap() {
                Inserted::New { displaced: d } => displaced += d,
                other => panic!("churn insert of {key}: {other:?}"),
            }
        }
        for key in 0..RESIDENT {
            assert_eq!(
                table.insert(stamped(key, round)).unwrap(),
                Inserted::Replaced { previous_version: round - 1 }
            );
        }
    }
    done.store(true, Ordering::Release);
    for r in readers {
        r.join().expect("a reader saw a torn or regressed item");
    }
    assert!(checked.load(Ordering::Relaxed) > 0, "readers never hit");
    assert!(displaced > 0, "the stress never displaced an item: it did not test moves");
    for key in (0..RESIDENT).chain(churn(WRITER_ROUNDS)) {
        assert_eq!(table.get(key), Some(stamped(key, WRITER_ROUNDS)));
    }
    for key in churn(WRITER_ROUNDS + 1) {
        assert_eq!(table.get(key), None);
    }
}
