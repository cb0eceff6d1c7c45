//! `--abi bpfkv` and `--prog` as a user runs them: programs written for BPF-KV's scratch
//! layouts (ours, in progs/, the same layouts XRP's get.c and range.c use) on `kv get`,
//! `multiget`, `range` and `bench`, answering exactly what plain reads answer.

use std::path::PathBuf;

mod common;
use common::{storefn, Dir};

fn dir(tag: &str) -> Dir {
    common::temp_dir("storefn-abi-cli", tag)
}

/// Writes progs/<name>.bpf.c's object where a user would keep it.
fn prog(d: &Dir, name: &str) -> String {
    let p: PathBuf = d.0.join(format!("{name}.o"));
    std::fs::write(&p, storefn_progs::must(name)).unwrap();
    p.to_str().unwrap().to_owned()
}

fn create(d: &Dir) -> String {
    let db: PathBuf = d.0.join("db");
    let s = db.to_str().unwrap().to_owned();
    assert_eq!(storefn(&["kv", "create", &s, "--layers", "3"]).0, 0);
    s
}

#[test]
fn get_and_multiget_run_bpfkv_layout_programs() {
    let d = dir("get");
    let db = create(&d);
    let keys: Vec<String> = (0..40u64).map(|i| (i * 751 + 3).to_string()).collect();
    let mut keys = keys.join(",");
    keys.push_str(",29791,99999999");
    let (code, want, err) = storefn(&["kv", "multiget", &db, "--keys", &keys]);
    assert_eq!(code, 1, "two keys miss: {err}");
    assert_eq!(want.lines().filter(|l| l.ends_with("not found")).count(), 2, "{want}");
    for (p, extra) in [
        (None, &[][..]),
        (Some("bpfkv_get"), &[][..]),
        (Some("bpfkv_get_fanout"), &[][..]),
        (Some("bpfkv_get_fanout"), &["--path", "xrp-batch", "--cache-levels", "1"][..]),
        (Some("bpfkv_get"), &["--cache-bytes", "65536"][..]),
    ] {
        let mut args = vec!["kv", "multiget", &db, "--keys", &keys, "--abi", "bpfkv"];
        let obj = p.map(|p| prog(&d, p));
        if let Some(o) = &obj {
            args.extend(["--prog", o.as_str()]);
        }
        args.extend(extra);
        let (code, out, err) = storefn(&args);
        assert_eq!((code, out.as_str()), (1, want.as_str()), "{args:?}: {err}");
    }
    let g = prog(&d, "bpfkv_get");
    let (code, out, err) = storefn(&["kv", "get", &db, "--key", "12345", "--abi", "bpfkv"]);
    assert_eq!((code, out.as_str()), (0, format!("{:>63}\n", 12345).as_str()), "{err}");
    let (code, out, _) =
        storefn(&["kv", "get", &db, "--key", "12345", "--prog", &g, "--abi", "bpfkv"]);
    assert_eq!((code, out.as_str()), (0, format!("{:>63}\n", 12345).as_str()));
    let (code, out, _) =
        storefn(&["kv", "get", &db, "--key", "29791", "--prog", &g, "--abi", "bpfkv"]);
    assert_eq!((code, out.as_str()), (1, "not found\n"));
    // --prog is a storage-function chain: the read path cannot run it, and says so.
    let (code, _, err) = storefn(&[
        "kv", "get", &db, "--key", "1", "--prog", &g, "--abi", "bpfkv", "--path", "read",
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("--path xrp or xrp-batch"), "{err}");
    // An unknown ABI is named.
    let (code, _, err) = storefn(&["kv", "get", &db, "--key", "1", "--abi", "xrp"]);
    assert_eq!(code, 2, "clap refuses it");
    assert!(err.contains("expected storefn|bpfkv"), "{err}");
}

#[test]
fn range_runs_a_bpfkv_range_query_program() {
    let d = dir("range");
    let db = create(&d);
    let r = prog(&d, "bpfkv_range");
    for (b, e) in [("100", "177"), ("29700", "40000"), ("5", "5"), ("9", "4")] {
        let (code, want, _) =
            storefn(&["kv", "range", &db, "--begin", b, "--end", e, "--path", "read"]);
        assert_eq!(code, 0);
        for args in [
            vec!["--abi", "bpfkv"],
            vec!["--abi", "bpfkv", "--prog", r.as_str()],
            vec!["--abi", "bpfkv", "--prog", r.as_str(), "--path", "xrp"],
        ] {
            let mut a = vec!["kv", "range", &db, "--begin", b, "--end", e];
            a.extend(args.iter().copied());
            let (code, out, err) = storefn(&a);
            assert_eq!((code, out.as_str()), (0, want.as_str()), "{a:?}: {err}");
        }
        for agg in ["sum", "min", "max", "count"] {
            let (_, want, _) = storefn(&[
                "kv", "range", &db, "--begin", b, "--end", e, "--path", "read", "--agg", agg,
            ]);
            let (code, out, err) = storefn(&[
                "kv", "range", &db, "--begin", b, "--end", e, "--abi", "bpfkv", "--prog", &r,
                "--agg", agg,
            ]);
            assert_eq!((code, out.as_str()), (0, want.as_str()), "[{b}, {e}] {agg}: {err}");
        }
    }
}

#[test]
fn bench_runs_a_bpfkv_layout_program_on_both_chain_paths() {
    let d = dir("bench");
    let db = create(&d);
    let g = prog(&d, "bpfkv_get_fanout");
    for path in ["xrp", "xrp-batch"] {
        let (code, out, err) = storefn(&[
            "kv",
            "bench",
            &db,
            "--path",
            path,
            "--prog",
            &g,
            "--abi",
            "bpfkv",
            "--requests",
            "2000",
            "--warmup",
            "100",
            "--cache-bytes",
            "1048576",
        ]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains(&format!("summary path={path} ")), "{out}");
        assert!(out.contains("fallbacks=0"), "{out}");
        assert!(!err.contains("found nothing"), "every drawn key exists: {err}");
    }
    // The read path has no chains to run a program on.
    let (code, _, err) =
        storefn(&["kv", "bench", &db, "--path", "read", "--prog", &g, "--abi", "bpfkv"]);
    assert_eq!(code, 1);
    assert!(err.contains("--path xrp or xrp-batch"), "{err}");
}
