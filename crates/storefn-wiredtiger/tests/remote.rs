//! The remote paths against a `storefn serve` server on loopback: `rpc-read` (READs, one round
//! trip per page) and `pushdown` (the lookup function on the server, one round trip per lookup,
//! checking every block's CRC-32C itself), every table against WiredTiger's own cursor; a
//! damaged block is a named error on both paths.

mod common;

use common::{absent_keys, build, cut_near_a_leaf, native_rows, user, TempDir};
use storefn_server::{Server, ServerConfig};
use storefn_wire::{Client, ClientConfig};
use storefn_wiredtiger::{Answer, RemotePath, RemoteTable, WtError};

fn server(root: &std::path::Path) -> Server {
    let mut cfg = ServerConfig::new(root);
    cfg.threads = 1;
    // A 32 KiB leaf's scan and checksum take more than the default tenant budget per hop.
    cfg.insn_budget = 1 << 20;
    Server::start("127.0.0.1:0", cfg).unwrap()
}

fn open(s: &Server, table: &str) -> RemoteTable {
    let c = Client::connect(&s.local_addr().to_string(), ClientConfig::default()).unwrap();
    RemoteTable::open(c, "db", table).unwrap()
}

#[test]
fn remote_paths_answer_as_wiredtiger_does() {
    let root = TempDir::new("remote");
    let db = root.0.join("db");
    std::fs::create_dir_all(&db).unwrap();
    build(&db);
    let s = server(&root.0);
    let mut value = Vec::new();
    for name in ["small", "pfx", "raw", "ovfl", "del", "dict", "big", "pfx32", "empty", "words"] {
        let rows = native_rows(&db, name);
        // Pushdown twice: from the leaf the client's cached internal pages name, and from the
        // root (the server reads the internal pages too).
        for (path, cached) in [
            (RemotePath::RpcRead, true),
            (RemotePath::Pushdown, true),
            (RemotePath::Pushdown, false),
        ] {
            let mut t = open(&s, name);
            if !cached {
                t.without_internal_cache();
            }
            let f = t.formats().0;
            let mut unsupported = 0;
            for (k, v) in rows.iter().step_by(13) {
                match t.get(&user(f, k), path, &mut value) {
                    Ok(a) => {
                        assert_eq!(a, Answer::Found, "{name} {path:?}: {k:?}");
                        assert_eq!(&value, v, "{name} {path:?}: {k:?}");
                    }
                    // Overflow items: only WiredTiger's own API reads them.
                    Err(WtError::Unsupported { .. }) if name == "ovfl" => unsupported += 1,
                    Err(e) => panic!("{name} {path:?}: {k:?}: {e}"),
                }
            }
            for k in absent_keys(f, &rows).iter().step_by(7) {
                match t.get(k, path, &mut value) {
                    Ok(a) => assert_eq!(a, Answer::NotFound, "{name} {path:?}: {k:?}"),
                    Err(WtError::Unsupported { .. }) if name == "ovfl" => unsupported += 1,
                    Err(e) => panic!("{name} {path:?}: {k:?}: {e}"),
                }
            }
            let st = t.stats;
            eprintln!("{name} {path:?}: {st:?}, {unsupported} overflow");
            if name != "ovfl" {
                assert_eq!(unsupported, 0);
            }
            if path == RemotePath::Pushdown && name != "ovfl" && name != "empty" {
                assert_eq!(st.fallbacks, 0, "{name}: {st:?}");
                // One round trip per lookup (nothing changed, so no reload), and one READ per
                // internal page the first time the client's cache meets it.
                assert_eq!(st.round_trips, st.lookups + st.internal_reads, "{name}: {st:?}");
                if cached {
                    assert!(st.internal_reads > 0 && st.internal_reads < 40, "{name}: {st:?}");
                } else {
                    assert_eq!(st.internal_reads, 0, "{name}: {st:?}");
                }
            }
            if name != "empty" {
                assert!(st.pages >= st.lookups, "{name} {path:?}: {st:?}");
                // Hops bounded: three levels at most, again for a lookup redone with READs.
                let walks = st.lookups + st.fallbacks + st.retries + st.internal_reads;
                assert!(st.pages <= 3 * walks, "hops bounded: {name} {path:?}: {st:?}");
            }
        }
    }
    s.stop();
    s.join().unwrap();
}

#[test]
fn a_damaged_block_is_a_named_error_remotely() {
    let root = TempDir::new("remote-damage");
    let db = root.0.join("db");
    std::fs::create_dir_all(&db).unwrap();
    build(&db);
    let rows = native_rows(&db, "big");
    let file = db.join("big.wt");
    let pristine = std::fs::read(&file).unwrap();
    let s = server(&root.0);
    let mut value = Vec::new();
    let mut errors = [0, 0];
    // Flip a byte inside a few leaves (past the first 64 bytes: only the full-block checksum,
    // which the function computes itself on pushdown, can see it).
    for at in (8192 + 1000..pristine.len()).step_by(32768 * 5 + 4097) {
        let mut b = pristine.clone();
        b[at] ^= 0x04;
        std::fs::write(&file, &b).unwrap();
        for (pi, path) in [RemotePath::RpcRead, RemotePath::Pushdown].into_iter().enumerate() {
            let mut t = open(&s, "big");
            for (k, v) in rows.iter().step_by(29) {
                match t.get(&k[..k.len() - 1], path, &mut value) {
                    Ok(Answer::Found) => assert_eq!(&value, v, "{path:?}: {k:?} at {at}"),
                    Ok(Answer::NotFound) => panic!("{path:?}: {k:?} not found, byte {at} flipped"),
                    Err(WtError::Corrupt { path: p, .. }) => {
                        assert_eq!(p, std::path::Path::new("db/big.wt"));
                        errors[pi] += 1;
                    }
                    Err(e) => panic!("{path:?}: {e}"),
                }
            }
        }
    }
    std::fs::write(&file, &pristine).unwrap();
    assert!(errors[0] > 0 && errors[1] > 0, "{errors:?}");
    s.stop();
    s.join().unwrap();
}

// Regression: the server kept a cached file's open-time size, so READs of blocks WiredTiger
// appended at a later checkpoint were refused as past the end of the file.
#[test]
fn a_newer_checkpoint_is_followed_remotely() {
    let root = TempDir::new("remote-stale");
    let db = root.0.join("db");
    std::fs::create_dir_all(&db).unwrap();
    {
        let wt = storefn_wiredtiger::native::Native::open(&db, "create").unwrap();
        wt.create("table:t", "key_format=S,value_format=S").unwrap();
        let mut c = wt.cursor("table:t").unwrap();
        for i in 0..5000 {
            c.insert(format!("k{i:05}\0").as_bytes(), b"old\0").unwrap();
        }
    }
    let s = server(&root.0);
    let mut value = Vec::new();
    let mut old = b"old\0".to_vec();
    for path in [RemotePath::RpcRead, RemotePath::Pushdown] {
        let mut t = open(&s, "t");
        assert_eq!(t.get(b"k00042", path, &mut value).unwrap(), Answer::Found);
        assert_eq!(value, old);
        {
            let wt = storefn_wiredtiger::native::Native::open(&db, "").unwrap();
            let mut c = wt.cursor("table:t").unwrap();
            c.insert(b"k00042\0", format!("{path:?}\0").as_bytes()).unwrap();
            drop(c);
            wt.checkpoint().unwrap();
        }
        // The first lookup after the checkpoint may still read the old one (a value the key
        // had); its reply's file version sends the next to the new checkpoint.
        t.get(b"k00042", path, &mut value).unwrap();
        assert!(value == old || value == format!("{path:?}\0").as_bytes(), "{value:?}");
        assert_eq!(t.get(b"k00042", path, &mut value).unwrap(), Answer::Found);
        assert_eq!(value, format!("{path:?}\0").as_bytes(), "{path:?}: {:?}", t.stats);
        assert!(t.stats.reloads >= 1, "{:?}", t.stats);
        old = value.clone();
    }
    s.stop();
    s.join().unwrap();
}

// Regression: WiredTiger truncates free blocks at a file's end while it checkpoints, before its
// metadata names the new checkpoint, so a live checkpoint's recorded file size can exceed the
// file. A leaf pushed down with the function's whole 32 KiB view then ran past the file's end,
// the server refused it, and the lookup failed as damage no newer checkpoint repaired.
#[test]
fn a_leaf_near_a_file_cut_below_its_checkpoint_size_is_still_answered() {
    let root = TempDir::new("remote-cut");
    let db = root.0.join("db");
    std::fs::create_dir_all(&db).unwrap();
    build(&db);
    let rows = native_rows(&db, "big");
    let file = db.join("big.wt");
    let (leaves, cut) = cut_near_a_leaf(&db, "big", &rows, true).unwrap();
    let view = u64::from(storefn_wiredtiger::HOP_BYTES);
    let s = server(&root.0);
    let mut t = open(&s, "big");
    let mut value = Vec::new();
    // Every internal page into the client's cache before the cut.
    for (k, _) in rows.iter().step_by(7) {
        t.get(&k[..k.len() - 1], RemotePath::Pushdown, &mut value).unwrap();
    }
    std::fs::OpenOptions::new().write(true).open(&file).unwrap().set_len(cut).unwrap();
    let mut checked = 0;
    for ((k, v), a) in rows.iter().zip(&leaves) {
        if a.offset + a.size <= cut && a.offset + view > cut {
            match t.get(&k[..k.len() - 1], RemotePath::Pushdown, &mut value) {
                Ok(Answer::Found) => assert_eq!(&value, v, "{k:?}"),
                other => panic!("{k:?} in {a:?}, file cut at {cut}: {other:?} ({:?})", t.stats),
            }
            checked += 1;
        }
    }
    assert!(checked > 0);
    assert_eq!(t.stats.fallbacks, 0, "{:?}", t.stats);
    s.stop();
    s.join().unwrap();
}
