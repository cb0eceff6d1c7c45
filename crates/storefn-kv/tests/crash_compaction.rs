//! Db: puts, compaction, and recovery of compactions interrupted at each step.

use std::path::{Path, PathBuf};

use storefn_kv::bpfkv_value;
use storefn_kv::layout::tree::VALUE_BYTES;
use storefn_kv::meta_path;
use storefn_kv::{build_tree, create_bpfkv, NodeSize};
use storefn_kv::{recover, Db, MARKER_SUFFIX, NEW_SUFFIX};

fn fresh(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("crash_compaction").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("db");
    create_bpfkv(&db, NodeSize::B512, 2, &mut |_, _| {}).unwrap();
    db
}

fn with_suffix(db: &Path, s: &str) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push(s);
    PathBuf::from(p)
}

fn val(text: &str) -> [u8; VALUE_BYTES] {
    let mut v = [0u8; VALUE_BYTES];
    v[..text.len()].copy_from_slice(text.as_bytes());
    v
}

#[test]
fn puts_are_visible_survive_reopen_and_compaction() {
    let db = fresh("basic");
    {
        let d = Db::open(&db).unwrap();
        d.put(3, &val("three")).unwrap();
        d.put(5000, &val("new key")).unwrap();
        d.put(3, &val("three v2")).unwrap();
        assert_eq!(d.get(3).unwrap(), Some(val("three v2")));
        assert_eq!(d.get(4).unwrap(), Some(bpfkv_value(4)));
        assert_eq!(d.get(4999).unwrap(), None);
    }
    let d = Db::open(&db).unwrap();
    assert_eq!(d.memtable_len(), 2, "replayed from the WAL");
    d.compact().unwrap();
    assert_eq!(d.memtable_len(), 0);
    assert_eq!(std::fs::metadata(with_suffix(&db, ".wal")).unwrap().len(), 0);
    assert_eq!(d.store().meta().key_count, 962);
    drop(d);
    let d = Db::open(&db).unwrap();
    assert_eq!(d.get(3).unwrap(), Some(val("three v2")));
    assert_eq!(d.get(5000).unwrap(), Some(val("new key")));
    assert_eq!(d.get(960).unwrap(), Some(bpfkv_value(960)));
}

#[test]
fn full_memtable_triggers_compaction() {
    let db = fresh("auto");
    let d = Db::open_with(&db, 10 * storefn_kv::ENTRY_BYTES).unwrap();
    for k in 0..25u64 {
        d.put(10_000 + k, &val(&format!("k{k}"))).unwrap();
    }
    assert!(d.memtable_len() < 10);
    assert!(d.store().meta().key_count >= 961 + 20);
    for k in 0..25u64 {
        assert_eq!(d.get(10_000 + k).unwrap(), Some(val(&format!("k{k}"))));
    }
}

/// Writes a complete replacement tree as compaction step 1 would: every key's value "next".
fn build_new(db: &Path) {
    let entries = (0..961u64).map(|k| (k, val("next")));
    build_tree(&with_suffix(db, NEW_SUFFIX), NodeSize::B512, entries, &mut |_, _| {}).unwrap();
}

#[test]
fn crash_between_the_two_renames_rolls_forward() {
    let db = fresh("rollforward");
    build_new(&db);
    std::fs::write(with_suffix(&db, MARKER_SUFFIX), b"").unwrap();
    let new = with_suffix(&db, NEW_SUFFIX);
    // Step 3 half done: the new sidecar is in place, the new tree is not.
    std::fs::rename(meta_path(&new), meta_path(&db)).unwrap();
    let d = Db::open(&db).unwrap();
    assert_eq!(d.get(7).unwrap(), Some(val("next")));
    assert!(!new.exists() && !with_suffix(&db, MARKER_SUFFIX).exists());
}

#[test]
fn unfinished_build_without_marker_is_discarded() {
    let db = fresh("discard");
    {
        let d = Db::open(&db).unwrap();
        d.put(7, &val("acked")).unwrap();
    }
    build_new(&db);
    assert!(recover(&db).unwrap());
    assert!(!with_suffix(&db, NEW_SUFFIX).exists());
    let d = Db::open(&db).unwrap();
    assert_eq!(d.get(7).unwrap(), Some(val("acked")));
    assert_eq!(d.get(8).unwrap(), Some(bpfkv_value(8)));
}

// Regression guard for the streaming merge: a corrupt value pointer in the old tree fails the
// compaction with the leaf's offset, leaves no half-built tree, and loses no put.
#[test]
fn compaction_over_a_corrupt_tree_fails_cleanly_and_keeps_the_puts() {
    use std::os::unix::fs::FileExt;
    let db = fresh("corrupt");
    let d = Db::open(&db).unwrap();
    d.put(7, &val("seven")).unwrap();
    let leaf0 = d.store().leaf_range().0;
    drop(d);
    // Slot 2 of the first leaf: its pointer field, far past the value log.
    let ptr_off = leaf0 + (NodeSize::B512.off_ptrs() + 2 * 8) as u64;
    let f = std::fs::OpenOptions::new().write(true).open(&db).unwrap();
    f.write_all_at(&((1u64 << 63) | (1 << 40)).to_le_bytes(), ptr_off).unwrap();
    drop(f);
    let d = Db::open(&db).unwrap();
    let e = d.compact().unwrap_err().to_string();
    assert!(e.contains(&format!("byte offset {leaf0}")) && e.contains("value pointer"), "{e}");
    assert!(!with_suffix(&db, NEW_SUFFIX).exists(), "half-built tree removed");
    assert!(!meta_path(&with_suffix(&db, NEW_SUFFIX)).exists());
    assert_eq!(d.get(7).unwrap(), Some(val("seven")), "the put is still served");
    drop(d);
    assert_eq!(Db::open(&db).unwrap().get(7).unwrap(), Some(val("seven")), "and logged");
}
