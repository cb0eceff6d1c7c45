//! The page parsers on random and mutated pages (the fuzz target's property, run in CI):
//! damage is an error, never a panic or a read out of bounds.

use proptest::prelude::*;
use storefn_wiredtiger::format::{config_entries, CheckpointCookie, PageHeader, PAGE_PREFIX_BYTES};
use storefn_wiredtiger::{search_internal, search_leaf};

/// A row-store leaf as WiredTiger lays it out: short key/value pairs, one prefix-compressed.
fn leaf() -> Vec<u8> {
    let mut p = vec![0u8; PAGE_PREFIX_BYTES];
    p[24] = 7;
    let cells: &[&[u8]] = &[b"\x19apple\0", b"\x13red\0", b"\x1a\x02ricot\0", b"\x03"];
    for c in cells {
        p.extend_from_slice(c);
    }
    let n = p.len() as u32;
    p[16..20].copy_from_slice(&n.to_le_bytes());
    p[20..24].copy_from_slice(&4u32.to_le_bytes());
    p
}

fn run(page: &[u8], key: &[u8]) {
    let mut scratch = Vec::new();
    if let Ok(h) = PageHeader::parse(page) {
        let _ = search_internal(page, &h, key, 4096, &mut scratch);
        let _ = search_leaf(page, &h, key, &mut scratch);
    }
    let _ = CheckpointCookie::parse(page, 4096);
    let _ = config_entries(&String::from_utf8_lossy(page));
}

#[test]
fn the_hand_built_leaf_parses() {
    let p = leaf();
    let h = PageHeader::parse(&p).unwrap();
    let mut k = Vec::new();
    assert!(
        matches!(search_leaf(&p, &h, b"apricot\0", &mut k), Ok(storefn_wiredtiger::LeafHit::Found(r)) if r.is_empty())
    );
    assert!(
        matches!(search_leaf(&p, &h, b"apple\0", &mut k), Ok(storefn_wiredtiger::LeafHit::Found(r)) if &p[r.clone()] == b"red\0")
    );
}

proptest! {
    #[test]
    fn random_bytes(page in proptest::collection::vec(any::<u8>(), 0..600), key in proptest::collection::vec(any::<u8>(), 0..12)) {
        run(&page, &key);
    }

    #[test]
    fn mutated_leaf(flips in proptest::collection::vec((0usize..80, any::<u8>()), 1..6), cut in 0usize..80) {
        let mut p = leaf();
        for (at, v) in flips {
            if let Some(b) = p.get_mut(at) {
                *b ^= v;
            }
        }
        p.truncate(cut.max(PAGE_PREFIX_BYTES - 4));
        run(&p, b"apricot\0");
    }
}
