//! `storefn rocks get|multiget` against RocksDB's own `ldb get` on a database `ldb` wrote:
//! flushed and compacted keys, an overwrite and a delete left in the WAL, absent keys.

mod common;

use common::{storefn, temp_dir};

fn ldb(args: &[&str]) -> (i32, String) {
    let o = std::process::Command::new("ldb")
        .args(args)
        .output()
        .expect("ldb runs (apt-get install rocksdb-tools: ./run.sh installs it)");
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stdout).into_owned())
}

#[test]
fn get_and_multiget_answer_as_ldb_does() {
    let d = temp_dir("storefn-rocks-cli", "get");
    let db = format!("--db={}", d.0.display());
    let dir = d.0.to_str().unwrap();
    assert_eq!(
        ldb(&[
            &db,
            "--create_if_missing",
            "--compression_type=no",
            "batchput",
            "a",
            "1",
            "b",
            "2",
            "c",
            "3"
        ])
        .0,
        0
    );
    assert_eq!(ldb(&[&db, "compact"]).0, 0);
    assert_eq!(ldb(&[&db, "put", "b", "22"]).0, 0);
    assert_eq!(ldb(&[&db, "delete", "c"]).0, 0);
    let keys = ["a", "b", "c", "zz"];
    let ours: Vec<(i32, String)> = keys
        .iter()
        .map(|k| {
            let (code, out, err) = storefn(&["rocks", "get", dir, "--key", k]);
            assert!(err.is_empty(), "{err}");
            (code, out)
        })
        .collect();
    let keys_file = d.0.join("keys");
    std::fs::write(&keys_file, "a\nb\nc\nzz\n").unwrap();
    let (code, multi, _) =
        storefn(&["rocks", "multiget", dir, "--keys-file", keys_file.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert_eq!(multi, "a\t1\nb\t22\n");
    // RocksDB's answers, asked after ours: ldb opens the database for writing.
    for (k, (code, out)) in keys.iter().zip(&ours) {
        let (lcode, lout) = ldb(&[&db, "get", k]);
        assert_eq!(*code, lcode, "exit code for {k}");
        if lcode == 0 {
            assert_eq!(*out, lout, "value of {k}");
        } else {
            assert_eq!(out, "not found\n");
        }
    }
}

#[test]
fn a_directory_that_is_not_a_database_is_a_clean_error() {
    let d = temp_dir("storefn-rocks-cli", "empty");
    let (code, _, err) = storefn(&["rocks", "get", d.0.to_str().unwrap(), "--key", "a"]);
    assert_eq!(code, 1);
    assert!(err.contains("CURRENT"), "{err}");
}
