//! The storage function (progs/engines/wiredtiger/lookup.bpf.c) as a chain on the io engine:
//! every key of every table (4 KiB pages and WiredTiger's defaults: 32 KiB leaves), present and
//! absent, against WiredTiger's own cursor, one chain at a time and batched.

mod common;

use common::{absent_keys, build, cut_near_a_leaf, native_rows, user, TempDir};
use storefn_wiredtiger::{Answer, Lookups, ReadPath};

#[test]
fn chains_answer_as_wiredtiger_does() {
    let dir = TempDir::new("xrp");
    build(&dir.0);
    let mut value = Vec::new();
    for name in
        ["small", "pfx", "raw", "ovfl", "del", "dict", "deep", "empty", "big", "pfx32", "words"]
    {
        let rows = native_rows(&dir.0, name);
        let mut l = Lookups::open(&dir.0, name, ReadPath::Xrp).unwrap();
        let leaf = l.table().tree().checkpoint().root.map_or(0, |r| r.size);
        let f = l.table().key_format;
        for (k, v) in rows.iter().step_by(3) {
            assert_eq!(l.get(&user(f, k), &mut value).unwrap(), Answer::Found, "{name}: {k:?}");
            assert_eq!(&value, v, "{name}: {k:?}");
        }
        for k in absent_keys(f, &rows) {
            assert_eq!(l.get(&k, &mut value).unwrap(), Answer::NotFound, "{name}: {k:?}");
        }
        let s = l.stats;
        eprintln!("{name}: {s:?} (root block {leaf} bytes)");
        // Hop count bounded: these trees are at most three levels deep.
        assert!(s.hops <= 3 * s.lookups, "{name}: {s:?}");
        if name == "ovfl" {
            assert!(s.function_fallbacks > 0, "overflow items go back to the plain reader");
        } else {
            assert_eq!(s.function_fallbacks, 0, "{name}: {s:?}");
        }
    }
}

#[test]
fn damaged_pages_stop_the_chain_with_a_named_error() {
    use storefn_wiredtiger::native::Native;
    use storefn_wiredtiger::WtError;
    let dir = TempDir::new("xrp-damage");
    {
        let wt = Native::open(&dir.0, "create").unwrap();
        wt.create("table:t", &format!("key_format=S,value_format=S,{}", common::SMALL_PAGES))
            .unwrap();
        let mut c = wt.cursor("table:t").unwrap();
        for i in 0..3000 {
            c.insert(format!("key{i:06}\0").as_bytes(), format!("value {i}\0").as_bytes()).unwrap();
        }
    }
    let rows = native_rows(&dir.0, "t");
    let file = dir.0.join("t.wt");
    let pristine = std::fs::read(&file).unwrap();
    let mut errors = 0;
    let mut value = Vec::new();
    for at in (4096 + 100..pristine.len()).step_by(4096 * 3 + 211) {
        let mut b = pristine.clone();
        b[at] ^= 0x10;
        std::fs::write(&file, &b).unwrap();
        let Ok(mut l) = Lookups::open(&dir.0, "t", ReadPath::Xrp) else { continue };
        for (k, v) in rows.iter().step_by(17) {
            match l.get(&k[..k.len() - 1], &mut value) {
                Ok(Answer::Found) => assert_eq!(&value, v),
                Ok(Answer::NotFound) => panic!("{k:?}: not found on a damaged file"),
                Err(WtError::Corrupt { path, .. }) => {
                    assert_eq!(path, file);
                    errors += 1;
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
    assert!(errors > 0);
}

#[test]
fn batched_chains_answer_as_wiredtiger_does() {
    let dir = TempDir::new("xrp-batch");
    build(&dir.0);
    let (mut value, mut stored) = (Vec::new(), Vec::new());
    for name in ["big", "pfx32", "ovfl", "raw", "empty", "words"] {
        let rows = native_rows(&dir.0, name);
        let mut l = Lookups::open(&dir.0, name, ReadPath::XrpBatch).unwrap();
        let f = l.table().key_format;
        let mut keys: Vec<Vec<u8>> = rows.keys().step_by(2).map(|k| user(f, k)).collect();
        let absent = absent_keys(f, &rows);
        keys.extend(absent.iter().cloned());
        let mut seen = vec![false; keys.len()];
        for (c, chunk) in keys.chunks(100).enumerate() {
            l.get_many(chunk, &mut stored, &mut value, |i, a, v| {
                let k = &chunk[i];
                let mut sk = Vec::new();
                f.encode(k, &mut sk).unwrap();
                match rows.get(&sk) {
                    Some(want) => {
                        assert_eq!(a, Answer::Found, "{name}: {k:?}");
                        assert_eq!(v, &want[..], "{name}: {k:?}");
                    }
                    None => assert_eq!(a, Answer::NotFound, "{name}: {k:?}"),
                }
                assert!(!seen[c * 100 + i], "{name}: answered twice");
                seen[c * 100 + i] = true;
            })
            .unwrap();
        }
        assert!(seen.iter().all(|&s| s), "{name}: every key answered");
        eprintln!("{name}: {:?}", l.stats);
    }
}

// Regression: WiredTiger truncates free blocks at a file's end while it checkpoints, before its
// metadata names the new checkpoint, so a live checkpoint's recorded file size can exceed the
// file. A chain read a leaf with the function's whole 32 KiB view past the new end, the read
// came back short, and the lookup failed as damage no newer checkpoint repaired.
#[test]
fn a_leaf_near_a_file_cut_below_its_checkpoint_size_is_still_answered() {
    let dir = TempDir::new("xrp-cut");
    build(&dir.0);
    let view = u64::from(storefn_wiredtiger::HOP_BYTES);
    let mut value = Vec::new();
    let mut checked = 0;
    // Tables at WiredTiger's default page sizes; which leaves lie where is WiredTiger's choice.
    // pfx32's layout varies from run to run with its checkpoints' timing (one build in three had
    // no leaf in the window, and the test failed in CI); words, small enough to be written whole
    // at its checkpoint, has one in every build seen, so the test no longer rests on luck.
    for name in ["pfx32", "big", "words"] {
        let rows = native_rows(&dir.0, name);
        let Some((leaves, cut)) = cut_near_a_leaf(&dir.0, name, &rows, false) else { continue };
        let file = dir.0.join(format!("{name}.wt"));
        let pristine = std::fs::read(&file).unwrap();
        for path in [ReadPath::Xrp, ReadPath::XrpBatch] {
            let mut l = Lookups::open(&dir.0, name, path).unwrap();
            let f = l.table().key_format;
            std::fs::OpenOptions::new().write(true).open(&file).unwrap().set_len(cut).unwrap();
            for ((k, v), a) in rows.iter().zip(&leaves) {
                if a.offset + a.size <= cut && a.offset + view > cut {
                    let r = l.get(&user(f, k), &mut value);
                    assert!(
                        matches!(r, Ok(Answer::Found)),
                        "{name} {path:?} {k:?} in {a:?}: {r:?}"
                    );
                    assert_eq!(&value, v, "{name} {path:?}: {k:?}");
                    checked += 1;
                }
            }
            std::fs::write(&file, &pristine).unwrap();
        }
    }
    assert!(checked > 0, "no table has a short leaf near its end");
}

/// Regression: a leaf-scan change pushed the function to 1,056 instruction slots, past the
/// JIT's optimising-tier threshold, and the quick tier's code ran the scan of a 32 KiB leaf
/// about 2x slower.
#[test]
fn the_function_fits_the_jits_optimising_tier() {
    use storefn_vm::limits::QUICK_TIER_SLOTS;
    let elf = storefn_progs::must(storefn_wiredtiger::PROGRAM);
    let prog = storefn_vm::load(elf, None, storefn_vm::ProgType::Xrp).unwrap();
    assert!(prog.insns.len() <= QUICK_TIER_SLOTS, "{} slots", prog.insns.len());
}
