//! Damaged files (bit flips, truncation, addresses pointing past the file) give an error naming
//! the file and offset, never a panic, a hang or a wrong value; and a reader leaves the database
//! directory byte-identical and unlocked.

mod common;

use common::{native_rows, TempDir};
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use storefn_wiredtiger::format::{
    crc32c, BlockAddr, BlockHeader, Cell, CellKind, PageHeader, PAGE_PREFIX_BYTES,
};
use storefn_wiredtiger::native::Native;
use storefn_wiredtiger::{Outcome, Table, Tree, WtError};

/// One small table ("t", 4 KiB pages, three levels) in a fresh database.
fn small_db(rows: usize) -> TempDir {
    let dir = TempDir::new("damage");
    let wt = Native::open(&dir.0, "create").unwrap();
    wt.create("table:t", &format!("key_format=S,value_format=S,{}", common::SMALL_PAGES)).unwrap();
    let mut c = wt.cursor("table:t").unwrap();
    for i in 0..rows {
        c.insert(
            format!("key{i:06}\0").as_bytes(),
            format!("value {i} {}\0", "v".repeat(i % 200)).as_bytes(),
        )
        .unwrap();
    }
    drop(c);
    drop(wt);
    dir
}

/// Checks every key: the pristine answer or an error naming `file`; returns the errors seen.
fn check_all(dir: &Path, file: &Path, rows: &BTreeMap<Vec<u8>, Vec<u8>>) -> usize {
    let mut t = match Table::open(dir, "t") {
        Ok(t) => t,
        Err(WtError::Corrupt { .. }) => return 1,
        Err(e) => panic!("open: {e}"),
    };
    let (mut errors, mut value) = (0, Vec::new());
    for (k, v) in rows.iter().step_by(13) {
        match t.get(&k[..k.len() - 1], &mut value) {
            Ok(Outcome::Found) => assert_eq!(&value, v, "wrong value for {k:?}"),
            Ok(other) => panic!("{k:?}: {other:?} on a damaged file, present in the pristine one"),
            Err(WtError::Corrupt { path, offset, what }) => {
                assert_eq!(path, file, "{what}");
                assert!(offset < 1 << 30, "{offset}");
                errors += 1;
            }
            Err(e) => panic!("{k:?}: {e}"),
        }
    }
    errors
}

#[test]
fn bit_flips_and_truncation_are_named_errors() {
    let dir = small_db(4000);
    let rows = native_rows(&dir.0, "t");
    let file = dir.0.join("t.wt");
    let pristine = std::fs::read(&file).unwrap();
    let mut seen = 0;
    // A flip in each 4 KiB block (header, cells, padding), one at a time.
    for (n, at) in (0..pristine.len()).step_by(4096 + 517).enumerate() {
        let mut b = pristine.clone();
        b[at] ^= 1 << (n % 8);
        std::fs::write(&file, &b).unwrap();
        seen += check_all(&dir.0, &file, &rows);
    }
    assert!(seen > 0, "no flip was on a lookup path");
    let root = Table::open(&dir.0, "t").unwrap().tree().checkpoint().root.unwrap();
    for len in [pristine.len() / 2, (root.offset + 100) as usize, 4000, 0] {
        std::fs::write(&file, &pristine[..len]).unwrap();
        assert!(check_all(&dir.0, &file, &rows) > 0, "truncated to {len}");
    }
}

#[test]
fn addresses_past_the_file_are_named_errors() {
    // Small enough that allocation unit 64 lies past the file's end.
    let dir = small_db(1000);
    let t = Table::open(&dir.0, "t").unwrap();
    let ck = *t.tree().checkpoint();
    let root = ck.root.unwrap();
    let file = dir.0.join("t.wt");
    let size = std::fs::metadata(&file).unwrap().len();
    assert!(size < 64 * 4096, "{size}");
    let past = BlockAddr { offset: size + 4096, size: 4096, checksum: root.checksum };
    // A root beyond the file, as the checkpoint's size bound sees it and as a short read does.
    for file_size in [size, u64::MAX] {
        let ck2 =
            storefn_wiredtiger::format::CheckpointCookie { root: Some(past), file_size, ..ck };
        let mut tree = Tree::open(&file, 4096, ck2).unwrap();
        match tree.get(b"key000001\0", &mut Vec::new()) {
            Err(WtError::Corrupt { path, offset, .. }) => {
                assert_eq!((path, offset), (file.clone(), past.offset));
            }
            other => panic!("{other:?}"),
        }
    }
    // The root's first child address rewritten past the file, with the root's checksum made
    // valid again, so only the address check stands between the reader and the bad read.
    let mut bytes = std::fs::read(&file).unwrap();
    let page = &mut bytes[root.offset as usize..(root.offset + root.size) as usize];
    let hdr = PageHeader::parse(page).unwrap();
    let key = Cell::parse(page, PAGE_PREFIX_BYTES).unwrap();
    let addr = Cell::parse(page, key.end).unwrap();
    let (CellKind::AddrInternal { cookie } | CellKind::AddrLeaf { cookie, .. }) = addr.kind else {
        panic!("{addr:?}")
    };
    assert!(hdr.entries >= 2);
    page[cookie.start] = 0xbf; // unit 63: far past this small file
    page[BlockHeader::CHECKSUM_AT..BlockHeader::CHECKSUM_AT + 4].fill(0);
    let sum = crc32c(page);
    page[BlockHeader::CHECKSUM_AT..BlockHeader::CHECKSUM_AT + 4]
        .copy_from_slice(&sum.to_le_bytes());
    std::fs::write(&file, &bytes).unwrap();
    let ck3 = storefn_wiredtiger::format::CheckpointCookie {
        root: Some(BlockAddr { checksum: sum, ..root }),
        ..ck
    };
    let mut tree = Tree::open(&file, 4096, ck3).unwrap();
    match tree.get(b"key000000\0", &mut Vec::new()) {
        Err(WtError::Corrupt { path, offset, what }) => {
            assert_eq!(path, file);
            assert_eq!(offset, 64 * 4096, "{what}");
        }
        other => panic!("{other:?}"),
    }
}

/// Every file's bytes and modification time, by name.
fn snapshot(dir: &Path) -> BTreeMap<String, (Vec<u8>, i64, i64)> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                (std::fs::read(e.path()).unwrap(), m.mtime(), m.mtime_nsec()),
            )
        })
        .collect()
}

/// Inodes with a lock in /proc/locks.
fn locked_inodes() -> Vec<u64> {
    let text = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split_whitespace().find(|f| f.matches(':').count() == 2))
        .filter_map(|f| f.rsplit(':').next()?.parse().ok())
        .collect()
}

#[test]
fn reading_writes_and_locks_nothing() {
    let dir = small_db(4000);
    let before = snapshot(&dir.0);
    let mut t = Table::open(&dir.0, "t").unwrap();
    let mut value = Vec::new();
    for i in (0..4000).step_by(97) {
        assert_eq!(t.get(format!("key{i:06}").as_bytes(), &mut value).unwrap(), Outcome::Found);
    }
    assert!(t.is_current().unwrap());
    let inodes: Vec<u64> =
        std::fs::read_dir(&dir.0).unwrap().map(|e| e.unwrap().metadata().unwrap().ino()).collect();
    let locked = locked_inodes();
    assert!(
        inodes.iter().all(|i| !locked.contains(i)),
        "a file of the database is locked while the reader is open"
    );
    drop(t);
    assert_eq!(snapshot(&dir.0), before, "the database directory changed");
}

#[test]
fn other_releases_are_refused_by_name() {
    let dir = small_db(10);
    let turtle = dir.0.join("WiredTiger.turtle");
    let text = std::fs::read_to_string(&turtle).unwrap();
    assert!(text.contains("major=3,minor=2,patch=1"), "{text}");
    std::fs::write(&turtle, text.replace("major=3,minor=2,patch=1", "major=10,minor=0,patch=2"))
        .unwrap();
    match Table::open(&dir.0, "t") {
        Err(e @ WtError::Version { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("10.0.2")
                    && msg.contains("3.2.1")
                    && msg.contains("WiredTiger.turtle"),
                "{msg}"
            );
        }
        other => panic!("{other:?}"),
    }
    std::fs::write(&turtle, "not a turtle").unwrap();
    assert!(matches!(Table::open(&dir.0, "t"), Err(WtError::Corrupt { .. })));
    std::fs::write(&turtle, text).unwrap();
    assert!(matches!(Table::open(&dir.0, "nope"), Err(WtError::NoTable { .. })));
}
