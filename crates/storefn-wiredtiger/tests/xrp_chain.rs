//! The storage function (progs/engines/wiredtiger/lookup.bpf.c) as a chain on the io engine:
//! every key of the 4 KiB-page tables, present and absent, against WiredTiger's own cursor.

mod common;

use common::{absent_keys, build, native_rows, user, TempDir};
use storefn_wiredtiger::{Answer, Lookups, ReadPath};

#[test]
fn chains_answer_as_wiredtiger_does() {
    let dir = TempDir::new("xrp");
    build(&dir.0);
    let mut value = Vec::new();
    for name in ["small", "pfx", "raw", "ovfl", "del", "dict", "deep", "empty"] {
        let rows = native_rows(&dir.0, name);
        let mut l = Lookups::open(&dir.0, name, ReadPath::Xrp).unwrap();
        let f = l.table().key_format;
        for (k, v) in rows.iter().step_by(3) {
            assert_eq!(l.get(&user(f, k), &mut value).unwrap(), Answer::Found, "{name}: {k:?}");
            assert_eq!(&value, v, "{name}: {k:?}");
        }
        for k in absent_keys(f, &rows) {
            assert_eq!(l.get(&k, &mut value).unwrap(), Answer::NotFound, "{name}: {k:?}");
        }
        let s = l.stats;
        eprintln!("{name}: {s:?}");
        if name == "ovfl" {
            assert!(s.function_fallbacks > 0, "overflow items go back to the plain reader");
        } else {
            assert_eq!(s.function_fallbacks, 0, "{name}: {s:?}");
        }
    }
}
