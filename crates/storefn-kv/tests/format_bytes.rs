//! The builder's output against an independent reimplementation of BPF-KV's `create`.

mod common;

use common::{reference_create, TempDir};
use storefn_kv::format::{bpfkv_value, meta_path, Meta, META_BYTES};
use storefn_kv::{build_tree, create_bpfkv, NodeSize};

#[test]
fn create_is_byte_identical_to_bpfkv_for_1_to_3_layers() {
    let dir = TempDir::new("bytes");
    for layers in 1..=3 {
        let p = dir.join(&format!("db{layers}"));
        let meta = create_bpfkv(&p, NodeSize::B512, layers, &mut common::noop()).unwrap();
        let ours = std::fs::read(&p).unwrap();
        let theirs = reference_create(layers);
        assert_eq!(ours.len(), theirs.len(), "{layers} layers: length");
        if let Some(i) = ours.iter().zip(&theirs).position(|(a, b)| a != b) {
            panic!("{layers} layers: first differing byte at offset {i} (node {})", i / 512);
        }
        assert_eq!(meta.file_bytes, ours.len() as u64);
        let sidecar = std::fs::read(meta_path(&p)).unwrap();
        assert_eq!(sidecar.len(), META_BYTES);
        assert_eq!(Meta::decode(&sidecar, &meta_path(&p)).unwrap(), meta);
    }
}

#[test]
fn build_tree_of_dense_stream_equals_create() {
    let dir = TempDir::new("dense");
    let a = dir.join("a");
    let b = dir.join("b");
    create_bpfkv(&a, NodeSize::B512, 2, &mut common::noop()).unwrap();
    // A stream without an exact size hint goes through the collecting branch.
    let unhinted = (0..961u64).filter(|_| true).map(|k| (k, bpfkv_value(k)));
    build_tree(&b, NodeSize::B512, unhinted, &mut common::noop()).unwrap();
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
}

#[test]
fn node_4096_layout_has_fanout_255() {
    let dir = TempDir::new("n4096");
    let p = dir.join("db");
    let meta = create_bpfkv(&p, NodeSize::B4096, 2, &mut common::noop()).unwrap();
    assert_eq!(meta.key_count, 255 * 255);
    assert_eq!(meta.total_nodes, 256);
    let bytes = std::fs::read(&p).unwrap();
    let rd = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap());
    // Root: internal, key[1] = 255, ptr[0] -> node 1 with bit 63.
    assert_eq!(rd(8), 0);
    assert_eq!(rd(16 + 8), 255);
    assert_eq!(rd(2056), (1 << 63) | 4096);
    // First leaf: next -> node 2, type 1, ptr[3] -> value 3.
    assert_eq!(rd(4096), 2 * 4096);
    assert_eq!(rd(4096 + 8), 1);
    assert_eq!(rd(4096 + 2056 + 3 * 8), (1 << 63) | (256 * 4096 + 3 * 64));
    let v = 256 * 4096 + 3 * 64;
    assert_eq!(&bytes[v..v + 64], &bpfkv_value(3));
}
