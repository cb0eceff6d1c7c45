//! The `device` reference path (storefn_kv::harness::device): reads through the engine (the same
//! registered buffers and file as the engine paths), and a failed read returns an error only
//! after every read in flight was reaped, leaving the path usable.

mod common;

use std::sync::Arc;

use common::TempDir;
use storefn_kv::harness::device::DevicePath;
use storefn_kv::Lookup;
use storefn_kv::{create_bpfkv, LookupPath, NodeSize, Store};

#[test]
fn failed_reads_drain_the_batch_and_the_path_stays_usable() {
    let dir = TempDir::new("device-drain");
    let p = dir.join("db");
    create_bpfkv(&p, NodeSize::B512, 3, &mut common::noop()).unwrap();
    let store = Arc::new(Store::open(&p, 0).unwrap());
    let blocks = store.meta().file_bytes / 512;
    let mut path = DevicePath::new(Arc::clone(&store), 16).unwrap();
    let keys: Vec<u64> = (0..200u64).map(|i| i * 37 % blocks).collect();
    let mut out: Vec<Lookup> = Vec::new();
    path.get_many(&keys, &mut out).unwrap();
    assert_eq!(out.len(), keys.len());
    assert_eq!((path.stats().ios, path.stats().lookups), (200, 200));

    // Cut the file to half under the path: reads of the upper half come back short.
    let half = blocks / 2 * 512;
    std::fs::OpenOptions::new().write(true).open(&p).unwrap().set_len(half).unwrap();
    let mixed: Vec<u64> = (0..64u64).map(|i| if i % 4 == 0 { blocks - 1 - i } else { i }).collect();
    out.clear();
    let e = path.get_many(&mixed, &mut out).unwrap_err();
    assert!(
        matches!(e.chain_error(), Some(storefn_io::ChainError::ShortRead { .. })),
        "the read's own error, typed: {e:?}"
    );
    // Submissions stopped at the error but every read already submitted was reaped: the
    // counts agree and the engine takes a full batch again.
    let s = path.stats();
    assert_eq!(s.ios, s.lookups, "{s:?}");
    assert!(s.ios < 200 + 64, "submissions stopped at the first error: {s:?}");
    out.clear();
    let low: Vec<u64> = (0..100).collect();
    path.get_many(&low, &mut out).unwrap();
    assert_eq!(out.len(), 100);
}
