//! The kv-files fuzz property (`storefn_kv::fuzz::check_files`, also the cargo-fuzz target
//! `kv_files`) over random mutations of a small database: a read-only open, lookups and range
//! scans answer or fail with a typed error, never panic or hang.

use proptest::prelude::*;

/// One patch: which file, where, what byte.
fn patch() -> impl Strategy<Value = Vec<u8>> {
    (0u8..3, any::<u32>(), any::<u8>()).prop_map(|(f, off, v)| {
        let mut p = vec![f];
        p.extend_from_slice(&off.to_le_bytes());
        p.push(v);
        p
    })
}

#[test]
fn the_unmutated_base_reads_back_exactly() {
    // No patches: check_files asserts every key, the full range and the WAL's puts.
    storefn_kv::fuzz::check_files(&[]);
    storefn_kv::fuzz::check_files(&[3]);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn mutated_files_never_panic_or_hang(flags in any::<u8>(), patches in proptest::collection::vec(patch(), 1..12)) {
        let mut data = vec![flags];
        for p in patches {
            data.extend(p);
        }
        storefn_kv::fuzz::check_files(&data);
    }

    /// Mutations aimed at the tree's node headers and slots (the `next` links, types, keys and
    /// pointers), where a walk would go astray.
    #[test]
    fn mutated_node_fields_never_panic_or_hang(node in 0u32..40, field in 0u32..64, v in any::<u8>(), more in 0u8..4) {
        let mut data = vec![more];
        for k in 0..=u32::from(more) {
            data.push(0);
            data.extend_from_slice(&(node * 512 + field * 8 + k).to_le_bytes());
            data.push(v.wrapping_add(u8::try_from(k).unwrap()));
        }
        storefn_kv::fuzz::check_files(&data);
    }
}
