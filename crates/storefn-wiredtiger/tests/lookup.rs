//! Differential: every key of every test table, present and absent, read by the Rust reader
//! and by WiredTiger's own cursor.

mod common;

use common::{absent_keys, build, native_rows, user, TempDir};
use storefn_wiredtiger::native::Native;
use storefn_wiredtiger::{Fallback, Outcome, Table};

#[test]
fn every_key_matches_wiredtiger() {
    let dir = TempDir::new("lookup");
    let tables = build(&dir.0);
    let mut fallbacks = std::collections::BTreeMap::new();
    let mut value = Vec::new();
    for name in tables {
        let rows = native_rows(&dir.0, name);
        let mut t = Table::open(&dir.0, name).unwrap();
        for (k, v) in &rows {
            match t.get(&user(t.key_format, k), &mut value).unwrap() {
                Outcome::Found => assert_eq!(&value, v, "{name}: key {k:?}"),
                Outcome::NotFound => panic!("{name}: key {k:?} present in WiredTiger, not found"),
                Outcome::Fallback(f) => {
                    *fallbacks.entry((name, format!("{f:?}"))).or_insert(0) += 1;
                }
            }
        }
        for k in absent_keys(t.key_format, &rows) {
            match t.get(&k, &mut value).unwrap() {
                Outcome::NotFound => {}
                Outcome::Fallback(f) => {
                    *fallbacks.entry((name, format!("{f:?}"))).or_insert(0) += 1;
                }
                Outcome::Found => panic!("{name}: absent key {k:?} found: {value:?}"),
            }
        }
        if name == "empty" {
            assert!(rows.is_empty());
        } else {
            assert!(rows.len() > 100, "{name}: {} rows", rows.len());
        }
    }
    eprintln!("fallbacks: {fallbacks:?}");
    // Overflow items exist only in "ovfl"; everything else is read by the Rust reader.
    assert!(fallbacks.keys().all(|(t, _)| *t == "ovfl"), "{fallbacks:?}");
    assert!(
        fallbacks.contains_key(&("ovfl", format!("{:?}", Fallback::OverflowValue))),
        "{fallbacks:?}"
    );
}

#[test]
fn deletes_and_updates_follow_the_newest_checkpoint() {
    let dir = TempDir::new("del");
    build(&dir.0);
    let mut value = Vec::new();
    let mut t = Table::open(&dir.0, "del").unwrap();
    assert!(t.checkpoint_order >= 2, "several checkpoints: {}", t.checkpoint_order);
    assert_eq!(t.get(b"d00000", &mut value).unwrap(), Outcome::NotFound);
    assert_eq!(t.get(b"d00001", &mut value).unwrap(), Outcome::Found);
    assert_eq!(t.get(b"d03299", &mut value).unwrap(), Outcome::Found);
    let mut s = Table::open(&dir.0, "small").unwrap();
    assert_eq!(s.get(b"key000007", &mut value).unwrap(), Outcome::Found);
    assert_eq!(value, b"updated 7\0");
    assert!(t.is_current().unwrap());
    // A newer checkpoint is seen by re-reading the turtle and metadata.
    {
        let wt = Native::open(&dir.0, "").unwrap();
        wt.cursor("table:del").unwrap().insert(b"d99999\0", b"new\0").unwrap();
        wt.checkpoint().unwrap();
    }
    assert!(!t.is_current().unwrap());
    let mut t2 = Table::open(&dir.0, "del").unwrap();
    assert!(t2.checkpoint_order > t.checkpoint_order);
    assert_eq!(t2.get(b"d99999", &mut value).unwrap(), Outcome::Found);
    assert_eq!(value, b"new\0");
}
