//! `storefn wt get|multiget` as a user runs them, checked against WiredTiger's own `wt read`.

mod common;
use common::storefn;
use storefn_wiredtiger::native::Native;

/// A database with a small-page table, overflow values (fallbacks) and a raw-bytes table.
fn build(dir: &std::path::Path) {
    let wt = Native::open(dir, "create").unwrap();
    let pages = "internal_page_max=4KB,leaf_page_max=4KB,allocation_size=4KB";
    wt.create("table:s", &format!("key_format=S,value_format=S,{pages},leaf_value_max=300B"))
        .unwrap();
    wt.create("table:r", &format!("key_format=u,value_format=u,{pages}")).unwrap();
    let mut c = wt.cursor("table:s").unwrap();
    for i in 0..2000 {
        let v = if i % 100 == 1 { "o".repeat(1000) } else { format!("v{i}") };
        c.insert(format!("k{i:05}\0").as_bytes(), format!("{v}\0").as_bytes()).unwrap();
    }
    drop(c);
    let mut c = wt.cursor("table:r").unwrap();
    c.insert(b"raw-key", b"raw\x01value").unwrap();
    drop(c);
}

/// `wt read` of WiredTiger's own tool, on a copy (the tool opens the database read-write).
fn wt_read(dir: &std::path::Path, table: &str, key: &str) -> Option<(i32, String)> {
    let copy = dir.with_extension("copy");
    let _ = std::fs::remove_dir_all(&copy);
    std::fs::create_dir_all(&copy).unwrap();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), copy.join(e.file_name())).unwrap();
    }
    let o = std::process::Command::new("wt")
        .args(["-h", copy.to_str().unwrap(), "read", &format!("table:{table}"), key])
        .output()
        .ok()?;
    let _ = std::fs::remove_dir_all(&copy);
    Some((o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stdout).into_owned()))
}

#[test]
fn get_and_multiget_answer_as_wiredtiger_does() {
    let d = common::temp_dir("storefn-wt", "cli");
    let db = d.0.join("db");
    std::fs::create_dir_all(&db).unwrap();
    build(&db);
    let dbs = db.to_str().unwrap();
    for key in ["k00000", "k00001", "k01999", "k00101", "k1", "zzz", ""] {
        let (code, out, err) = storefn(&["wt", "get", dbs, "--table", "s", "--key", key]);
        match wt_read(&db, "s", key) {
            Some((wt_code, wt_out)) => {
                assert_eq!(code, wt_code, "{key}: {err}");
                if code == 0 {
                    assert_eq!(out, wt_out, "{key}");
                }
            }
            None => {
                storefn_testkit::skip(
                    "the `wt` tool (apt-get install wiredtiger) is not installed",
                );
            }
        }
        if code == 1 {
            assert_eq!(out, "not found\n", "{err}");
        }
    }
    let (code, out, _) = storefn(&["wt", "get", dbs, "--table", "s", "--key", "k00001"]);
    assert_eq!((code, out.len()), (0, 1001), "an overflow value, answered by WiredTiger");
    let (code, out, _) = storefn(&["wt", "get", dbs, "--table", "r", "--key", "raw-key"]);
    assert_eq!((code, out.as_str()), (0, "raw\x01value\n"));

    let keys = d.0.join("keys");
    std::fs::write(&keys, "k00007\nk00101\nnope\nk01500\n").unwrap();
    let (code, out, err) =
        storefn(&["wt", "multiget", dbs, "--table", "s", "--keys-file", keys.to_str().unwrap()]);
    assert_eq!(code, 1, "one key is absent: {err}");
    let ovfl = "o".repeat(1000);
    assert_eq!(out, format!("k00007\tv7\nk00101\t{ovfl}\nnope\tnot found\nk01500\tv1500\n"));
    assert!(err.contains("4 lookups, 1 not found, 1 answered by WiredTiger's own API"), "{err}");

    let (code, out2, err) = storefn(&[
        "wt",
        "multiget",
        dbs,
        "--table",
        "s",
        "--keys-file",
        keys.to_str().unwrap(),
        "--path",
        "xrp",
    ]);
    assert_eq!((code, out2), (1, out), "the chain answers as the plain reader: {err}");
    assert!(err.contains("1 handed back by the storage function"), "{err}");
    for key in ["k01999", "k00000", "nope"] {
        let read = storefn(&["wt", "get", dbs, "--table", "s", "--key", key]);
        let xrp = storefn(&["wt", "get", dbs, "--table", "s", "--key", key, "--path", "xrp"]);
        assert_eq!((read.0, read.1), (xrp.0, xrp.1), "{key}: {}", xrp.2);
    }

    let (code, _, err) = storefn(&["wt", "get", dbs, "--table", "nope", "--key", "x"]);
    assert_eq!(code, 1);
    assert!(err.contains("no table \"nope\""), "{err}");
}

#[test]
fn batch_remote_paths_and_bench_answer_as_the_plain_reader() {
    let d = common::temp_dir("storefn-wt", "paths");
    let db = d.0.join("db");
    std::fs::create_dir_all(&db).unwrap();
    build(&db);
    let dbs = db.to_str().unwrap();
    let keys = d.0.join("keys");
    std::fs::write(&keys, "k00007\nk00102\nnope\nk01500\nk00000\n").unwrap();
    let kf = keys.to_str().unwrap();
    let mg = |extra: &[&str]| {
        let mut a = vec!["wt", "multiget", "--table", "s", "--keys-file", kf];
        a.extend_from_slice(extra);
        storefn(&a)
    };
    let (code, want, _) = mg(&[dbs]);
    assert_eq!(code, 1);
    let (code, out, err) = mg(&[dbs, "--path", "xrp-batch"]);
    assert_eq!((code, &out), (1, &want), "{err}");

    let mut cfg = storefn_server::ServerConfig::new(&d.0);
    cfg.threads = 1;
    cfg.insn_budget = 1 << 20;
    let s = storefn_server::Server::start("127.0.0.1:0", cfg).unwrap();
    let addr = s.local_addr().to_string();
    for path in ["rpc-read", "pushdown"] {
        let (code, out, err) = mg(&["db", "--remote", &addr, "--path", path]);
        assert_eq!((code, &out), (1, &want), "{path}: {err}");
        assert!(err.contains("5 lookups, 1 not found"), "{err}");
        let (code, out, err) = storefn(&[
            "wt", "get", "db", "--table", "s", "--key", "k01999", "--remote", &addr, "--path", path,
        ]);
        assert_eq!((code, out.as_str()), (0, "v1999\n"), "{err}");
    }
    let (code, _, err) =
        storefn(&["wt", "get", dbs, "--table", "s", "--key", "k1", "--path", "pushdown"]);
    assert_eq!(code, 1, "pushdown without --remote: {err}");
    assert!(err.contains("needs --remote"), "{err}");

    let json = d.0.join("bench.json");
    for args in
        [vec![dbs, "--path", "xrp-batch"], vec!["db", "--remote", &addr, "--path", "pushdown"]]
    {
        let mut a = vec![
            "wt",
            "bench",
            "--table",
            "s",
            "--keys-file",
            kf,
            "--ops",
            "300",
            "--warmup",
            "20",
        ];
        a.extend(args.iter().copied());
        a.extend(["--workload", "zipfian", "--json", json.to_str().unwrap()]);
        let (code, out, err) = storefn(&a);
        assert_eq!(code, 0, "{err}");
        assert!(out.starts_with("wt bench ") && out.contains("ops/s"), "{out}");
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        assert_eq!(v["lookups"], 300);
        assert!(v["p99_us"].as_f64().unwrap() > 0.0);
        if args.contains(&"pushdown") {
            let rt = v["round_trips_per_lookup"].as_f64().unwrap();
            assert!((1.0..1.1).contains(&rt), "one round trip per lookup: {rt}");
        }
    }
    s.stop();
    s.join().unwrap();
}
