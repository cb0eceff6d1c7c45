//! Damaged files RocksDB wrote: every error names the file and the offset, and no Get panics,
//! hangs or answers a wrong value.

mod support;

use std::path::Path;

use storefn_rocksdb::{Db, Lookup, RocksError};
use support::{build, key, rocksdb_gets, tool_cmd, TempDir};

fn flip(path: &Path, at: u64) {
    let mut b = std::fs::read(path).unwrap();
    b[at as usize] ^= 0x40;
    std::fs::write(path, b).unwrap();
}

fn newest_sst(db: &Db) -> std::path::PathBuf {
    db.levels()[0][0].table.path().to_path_buf()
}

#[test]
fn a_flipped_bit_in_a_data_block_is_a_checksum_error_naming_file_and_offset() {
    let d = TempDir::new("rocks-flip");
    build(&d.0, 2, 2_000, 4096, "no");
    let sst = newest_sst(&Db::open(&d.0).unwrap());
    flip(&sst, 100);
    let db = Db::open(&d.0).unwrap();
    let mut checksum_errors = 0;
    let keys: Vec<Vec<u8>> = (0..2_000).map(key).collect();
    let want = clean_twin_answers(&keys);
    for (k, w) in keys.iter().zip(want) {
        match db.get(k) {
            Ok((Lookup::Value(v), _)) => assert_eq!(Some(v), w, "{}", String::from_utf8_lossy(k)),
            Ok((Lookup::NotFound, _)) => assert_eq!(None, w),
            Ok((Lookup::Fallback(r), _)) => panic!("fallback {r:?}"),
            Err(RocksError::Checksum { file, offset, .. }) => {
                assert_eq!(file, sst);
                assert_eq!(offset, 0, "the first data block");
                checksum_errors += 1;
            }
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    assert!(checksum_errors > 0);
}

/// RocksDB's answers from an undamaged twin (the same seed writes the same keys and values;
/// RocksDB's own Get refuses the damaged block too).
fn clean_twin_answers(keys: &[Vec<u8>]) -> Vec<Option<Vec<u8>>> {
    let clean = TempDir::new("rocks-flip-clean");
    build(&clean.0, 2, 2_000, 4096, "no");
    rocksdb_gets(&clean.0, keys)
}

#[test]
fn truncated_and_damaged_tables_fail_to_open_with_their_offset() {
    let d = TempDir::new("rocks-trunc");
    build(&d.0, 4, 1_000, 4096, "no");
    let sst = newest_sst(&Db::open(&d.0).unwrap());
    let len = std::fs::metadata(&sst).unwrap().len();
    // The footer's magic.
    flip(&sst, len - 1);
    let e = Db::open(&d.0).unwrap_err();
    assert!(
        matches!(&e, RocksError::Corrupt { file, offset, .. } if *file == sst && *offset == len - 8),
        "{e}"
    );
    flip(&sst, len - 1);
    // Cut in the middle: the footer is gone.
    let f = std::fs::OpenOptions::new().write(true).open(&sst).unwrap();
    f.set_len(len / 2).unwrap();
    let e = Db::open(&d.0).unwrap_err();
    assert!(e.to_string().contains(&sst.display().to_string()), "{e}");
}

#[test]
fn a_damaged_manifest_record_is_an_error_and_a_cut_wal_tail_ends_the_log() {
    let d = TempDir::new("rocks-manifest");
    build(&d.0, 5, 1_000, 4096, "no");
    let db = Db::open(&d.0).unwrap();
    let manifest = db.manifest().to_path_buf();
    let mem = db.memtable_len();
    drop(db);
    let wal = std::fs::read_dir(&d.0)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let wal_len = std::fs::metadata(&wal).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&wal).unwrap().set_len(wal_len - 3).unwrap();
    let db = Db::open(&d.0).unwrap();
    assert!(db.memtable_len() <= mem && db.memtable_len() + 2 >= mem, "the cut record only");
    drop(db);
    flip(&manifest, 20);
    let e = Db::open(&d.0).unwrap_err();
    assert!(matches!(&e, RocksError::Corrupt { file, .. } if *file == manifest), "{e}");
}

#[test]
fn a_current_naming_nothing_and_a_missing_table_are_clean_errors() {
    let d = TempDir::new("rocks-current");
    build(&d.0, 6, 500, 4096, "no");
    std::fs::write(d.0.join("CURRENT"), "MANIFEST-../../etc\n").unwrap();
    let e = Db::open(&d.0).unwrap_err();
    assert!(e.to_string().contains("CURRENT"), "{e}");
}

/// The newest WAL of `dir` (the highest number: the one the last session wrote).
fn newest_wal(dir: &Path) -> std::path::PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .max()
        .unwrap()
}

#[test]
fn a_damaged_wal_record_is_an_error_naming_the_wal_and_its_offset() {
    let d = TempDir::new("rocks-wal-flip");
    build(&d.0, 8, 1_000, 4096, "no");
    let wal = newest_wal(&d.0);
    let len = std::fs::metadata(&wal).unwrap().len();
    // A byte of the last record's payload: its checksum no longer matches.
    flip(&wal, len - 2);
    let e = Db::open(&d.0).unwrap_err();
    assert!(
        matches!(&e, RocksError::Corrupt { file, offset, .. } if *file == wal && *offset < len),
        "{e}"
    );
}

#[test]
fn range_deletions_are_refused_naming_the_wal_then_the_table_that_holds_them() {
    let d = TempDir::new("rocks-delrange");
    build(&d.0, 9, 1_000, 4096, "no");
    tool_cmd(&d.0, &["delrange", "key00000100", "key00000200"]);
    let e = Db::open(&d.0).unwrap_err();
    let wal = newest_wal(&d.0);
    assert!(
        matches!(&e, RocksError::Unsupported { file, what } if *file == wal && what.contains("range deletion")),
        "{e}"
    );
    // Flushed, the tombstone is in a new level-0 table, which is refused at open.
    tool_cmd(&d.0, &["flush"]);
    let e = Db::open(&d.0).unwrap_err();
    assert!(
        matches!(&e, RocksError::Unsupported { file, what }
            if file.extension().is_some_and(|x| x == "sst") && what.contains("range deletions")),
        "{e}"
    );
}
