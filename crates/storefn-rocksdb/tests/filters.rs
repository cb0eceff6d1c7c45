//! The full filters RocksDB wrote, applied by the reader: no key a file holds is ever filtered
//! out (a false negative would be a wrong answer), and most files are skipped for absent keys.

mod support;

use storefn_rocksdb::{Db, Found};
use support::{build, key, TempDir};

#[test]
fn filters_never_hide_a_key_and_skip_most_files_for_absent_ones() {
    let d = TempDir::new("rocks-filters");
    build(&d.0, 11, 8_000, 4096, "no");
    let db = Db::open(&d.0).unwrap();
    let files: Vec<_> = db.levels().iter().flatten().collect();
    let bare: Vec<_> =
        files.iter().filter(|f| !f.table.has_filter()).map(|f| f.table.path()).collect();
    assert!(bare.is_empty(), "bloom_bits 10 gives every file a filter: {bare:?}");
    let mut held = 0u64;
    for i in 0..8_000 {
        let k = key(i);
        for f in &files {
            if matches!(f.table.get(&k).unwrap(), Found::Entry { .. }) {
                held += 1;
                assert!(
                    f.table.may_contain(&k),
                    "{} filtered out of {}",
                    i,
                    f.table.path().display()
                );
            }
        }
    }
    assert!(held > 8_000, "keys held by files: {held}");
    let (mut asked, mut passed) = (0u64, 0u64);
    for i in 1_000_000..1_010_000 {
        for f in &files {
            asked += 1;
            passed += u64::from(f.table.may_contain(&key(i)));
        }
    }
    // 10 bits per key: about 1% false positives.
    assert!(passed * 100 < asked * 3, "{passed} of {asked} absent probes passed");
}

/// Keys of every length class the filter hash has (0 to 300 bytes), written by `ldb` with
/// 10-bit Bloom filters: no key is filtered out of the file that holds it.
#[test]
fn filters_agree_with_rocksdb_for_keys_of_every_length() {
    let d = TempDir::new("rocks-filter-lengths");
    let db_arg = format!("--db={}", d.0.display());
    let mut args = vec![
        db_arg.clone(),
        "--create_if_missing".into(),
        "--bloom_bits=10".into(),
        "--compression_type=no".into(),
        "batchput".into(),
    ];
    let keys: Vec<String> = (1..=300usize)
        .flat_map(|len| {
            (0..3).map(move |r| {
                (0..len).map(|i| char::from(b'a' + ((i * 7 + r * 13 + len) % 26) as u8)).collect()
            })
        })
        .collect();
    for k in &keys {
        args.push(k.clone());
        args.push(format!("v{}", k.len()));
    }
    let ldb = |a: &[String]| {
        std::process::Command::new("ldb").args(a).status().expect("ldb runs (rocksdb-tools)")
    };
    assert!(ldb(&args).success());
    assert!(ldb(&[db_arg, "--bloom_bits=10".into(), "compact".into()]).success());
    let db = Db::open(&d.0).unwrap();
    let files: Vec<_> = db.levels().iter().flatten().collect();
    assert!(!files.is_empty() && files.iter().all(|f| f.table.has_filter()));
    for k in &keys {
        let holder = files
            .iter()
            .find(|f| matches!(f.table.get(k.as_bytes()).unwrap(), Found::Entry { .. }));
        let holder = holder.unwrap_or_else(|| panic!("no file holds {k}"));
        assert!(holder.table.may_contain(k.as_bytes()), "key of {} bytes filtered out", k.len());
        assert_eq!(
            db.get(k.as_bytes()).unwrap().0,
            storefn_rocksdb::Lookup::Value(format!("v{}", k.len()).into_bytes())
        );
    }
}
