//! `storefn kv recover DB --point-in-time`: a WAL damaged before its last commit is an
//! error naming the offset for every command; point-in-time recovery drops the damaged batch and
//! every batch after it, printing what it dropped, and the database opens again.

use std::path::PathBuf;
use std::process::Command;

fn storefn(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_storefn")).args(args).output().unwrap();
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (o.status.code().unwrap_or(-1), s(&o.stdout), s(&o.stderr))
}

/// Bytes of a one-record WAL batch: 32 B header + 72 B record + 16 B commit (docs/FORMAT.md).
const ONE_RECORD_BATCH: usize = 32 + 72 + 16;

#[test]
fn corruption_before_the_last_commit_is_named_and_point_in_time_recovery_drops_it() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kv_recover");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("db");
    let dbs = db.to_str().unwrap();
    assert_eq!(storefn(&["kv", "create", dbs, "--layers", "2"]).0, 0);
    for (k, v) in [("1", "one"), ("2", "two"), ("3", "three"), ("4", "four")] {
        let (code, _, err) = storefn(&["kv", "put", dbs, "--key", k, "--value", v]);
        assert_eq!(code, 0, "{err}");
    }
    // Damage batch 1 (key 2's): a value byte.
    let wal = dir.join("db.wal");
    let mut bytes = std::fs::read(&wal).unwrap();
    assert_eq!(bytes.len(), 4 * ONE_RECORD_BATCH);
    bytes[ONE_RECORD_BATCH + 32 + 8] ^= 0x20;
    std::fs::write(&wal, &bytes).unwrap();
    let at = format!("corrupt batch at offset {ONE_RECORD_BATCH}");
    for args in [
        &["kv", "get", dbs, "--key", "1"][..],
        &["kv", "put", dbs, "--key", "9", "--value", "x"],
        &["kv", "recover", dbs],
    ] {
        let (code, _, err) = storefn(args);
        assert_eq!(code, 1, "{args:?}");
        assert!(err.contains(&at) && err.contains("--point-in-time"), "{args:?}: {err}");
    }
    assert_eq!(std::fs::read(&wal).unwrap(), bytes, "nothing was cut without --point-in-time");
    let (code, out, err) = storefn(&["kv", "recover", dbs, "--point-in-time"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!(
            "dropped {} bytes of the WAL from offset {ONE_RECORD_BATCH} (bad batch checksum): \
             2 committed batches after it, 2 records, sequence numbers 3..=4",
            3 * ONE_RECORD_BATCH
        )),
        "{out}"
    );
    let get = |k: &str| storefn(&["kv", "get", dbs, "--key", k]).1;
    assert_eq!(get("1"), "one\n", "before the damage: kept");
    assert_eq!(get("2"), format!("{:>63}\n", 2), "the damaged put: dropped");
    assert_eq!(get("4"), format!("{:>63}\n", 4), "after it: dropped");
    let (_, out, _) = storefn(&["kv", "recover", dbs, "--point-in-time"]);
    assert!(out.contains("nothing dropped"), "{out}");
}
