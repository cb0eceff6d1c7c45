//! The builder's output against an independent reimplementation of BPF-KV's `create`.

mod common;

use common::{reference_create, TempDir};
use storefn_kv::bpfkv_value;
use storefn_kv::layout::tree::META_BYTES;
use storefn_kv::meta_path;
use storefn_kv::Meta;
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

/// Issue 11: a file written by BPF-KV's `create` (here its independent reimplementation) has
/// no sidecar; it opens with its shape inferred (or with `layers` given), a wrong `layers` is
/// refused, reading writes nothing, and the first writer adds the sidecar `create` would write.
#[test]
fn bpfkv_files_without_a_sidecar_open_with_the_inferred_shape() {
    use storefn_kv::{open_read, Db, DbOptions};
    use storefn_kv::{KvError, LookupPath, Store};
    let dir = TempDir::new("nosidecar");
    for layers in 1..=3 {
        let theirs = dir.join(&format!("theirs{layers}"));
        std::fs::write(&theirs, reference_create(layers)).unwrap();
        let ours = dir.join(&format!("ours{layers}"));
        let meta = create_bpfkv(&ours, NodeSize::B512, layers, &mut common::noop()).unwrap();
        let s = Store::open(&theirs, 0).unwrap();
        assert_eq!(*s.meta(), meta, "{layers} layers inferred");
        assert_eq!(
            *Store::open_as(&theirs, &meta_path(&theirs), Some(layers), 1).unwrap().meta(),
            meta
        );
        let e = Store::open_as(&theirs, &meta_path(&theirs), Some(layers + 1), 0).unwrap_err();
        assert!(matches!(e, KvError::ShapeUnknown { .. }), "{e}");
        let last = 31u64.pow(layers) - 1;
        let view = open_read(&theirs, 0, None).unwrap();
        let mut path = storefn_kv::ReadPath::new(std::sync::Arc::new(view.store), 0);
        assert_eq!(path.get(last).unwrap(), Some(bpfkv_value(last)));
        assert!(!meta_path(&theirs).exists(), "a reader wrote no sidecar");
        let d = Db::open_opts(&theirs, DbOptions::default()).unwrap();
        drop(d);
        assert_eq!(
            std::fs::read(meta_path(&theirs)).unwrap(),
            std::fs::read(meta_path(&ours)).unwrap()
        );
    }
    // A file of no BPF-KV shape: an error naming its size.
    let odd = dir.join("odd");
    std::fs::write(&odd, vec![0u8; 5000]).unwrap();
    let e = Store::open(&odd, 0).unwrap_err().to_string();
    assert!(e.contains("5000 bytes") && e.contains("no BPF-KV `create` shape"), "{e}");
    // The right size with a wrong root is refused too.
    let mut bad = reference_create(2);
    bad[8] = 1; // the root's type: a leaf
    std::fs::write(&odd, &bad).unwrap();
    assert!(matches!(Store::open(&odd, 0).unwrap_err(), KvError::ShapeUnknown { .. }));
}
