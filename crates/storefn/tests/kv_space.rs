//! Out of space: `kv create` and compaction compare the bytes they will write with
//! the file system's free space first, refuse with both figures, and leave nothing behind. On a
//! small tmpfs this test mounts (root) and always unmounts.

mod common;

use std::path::PathBuf;
use std::process::Command;
use storefn_testkit::dir_names;

fn storefn(args: &[&str]) -> (bool, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_storefn")).args(args).output().unwrap();
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (o.status.success(), s(&o.stdout), s(&o.stderr))
}

/// A tmpfs of `size` mounted on a fresh directory; unmounted and removed on drop.
struct SmallFs(PathBuf);

impl SmallFs {
    fn mount(tag: &str, size: &str) -> Option<SmallFs> {
        if !common::is_root() {
            common::skip("mounting a small tmpfs needs root");
            return None;
        }
        let p = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("kv-space-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&p)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = std::fs::remove_dir(&p);
            common::skip("mount -t tmpfs failed");
            return None;
        }
        Some(SmallFs(p))
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn create_refuses_what_does_not_fit_and_leaves_nothing() {
    let Some(fs) = SmallFs::mount("create", "1m") else { return };
    let db = fs.0.join("big.db");
    // 3 layers of 512 B nodes: 993 nodes + 29792 values = 2,415,104 bytes + a 64 B sidecar.
    let (ok, _, err) = storefn(&["kv", "create", db.to_str().unwrap(), "--layers", "3"]);
    assert!(!ok);
    assert!(err.contains("needs 2415168 bytes") && err.contains("1048576 bytes free"), "{err}");
    assert!(dir_names(&fs.0).is_empty(), "left behind: {:?}", dir_names(&fs.0));
    // What fits is made.
    let (ok, out, err) = storefn(&["kv", "create", db.to_str().unwrap(), "--layers", "2"]);
    assert!(ok, "{err}");
    assert!(out.contains("961 keys"), "{out}");
}

#[test]
fn compaction_refuses_what_does_not_fit_and_keeps_the_puts() {
    // Room for the 78 KB tree and its companions, not for a second tree beside it (962 keys:
    // 79,872 bytes of tree + the 64 B sidecar).
    let Some(fs) = SmallFs::mount("compact", "120k") else { return };
    let db = fs.0.join("db");
    let dbs = db.to_str().unwrap();
    let (ok, _, err) = storefn(&["kv", "create", dbs, "--layers", "2"]);
    assert!(ok, "{err}");
    let (ok, _, err) = storefn(&["kv", "put", dbs, "--key", "5000", "--value", "kept"]);
    assert!(ok, "{err}");
    let before = dir_names(&fs.0);
    let (ok, _, err) = storefn(&["kv", "compact", dbs]);
    assert!(!ok);
    assert!(err.contains("db.new: needs 79936 bytes") && err.contains("bytes free"), "{err}");
    assert_eq!(dir_names(&fs.0), before, "nothing left behind");
    let (ok, out, _) = storefn(&["kv", "get", dbs, "--key", "5000"]);
    assert!(ok && out == "kept\n", "{out}");
}
