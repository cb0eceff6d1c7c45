//! `storefn kv ...` and `storefn demo` as a user runs them: output lines and exit codes.

mod common;
use common::{storefn, Dir};

fn dir(tag: &str) -> Dir {
    common::temp_dir("storefn-cli", tag)
}

#[test]
fn create_get_multiget_range_bench() {
    let d = dir("kv");
    let db = d.0.join("db");
    let db = db.to_str().unwrap();
    let (code, out, _) = storefn(&["kv", "create", db, "--layers", "2"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("2 layers, 961 keys, 32 nodes"), "{out}");

    let (code, out, _) = storefn(&["kv", "get", db, "--key", "960"]);
    assert_eq!((code, out.as_str()), (0, format!("{:>63}\n", 960).as_str()));
    let (code, out, _) = storefn(&["kv", "get", db, "--key", "961", "--cache-levels", "1"]);
    assert_eq!((code, out.as_str()), (1, "not found\n"));

    let (code, out, _) = storefn(&["kv", "multiget", db, "--keys", "3,5000"]);
    assert_eq!(code, 1);
    assert_eq!(
        out.lines().map(str::trim_end).collect::<Vec<_>>(),
        [format!("3 {:>63}", 3).as_str(), "5000 not found"]
    );

    let (code, out, _) =
        storefn(&["kv", "range", db, "--begin", "10", "--end", "99", "--agg", "count"]);
    assert_eq!((code, out.as_str()), (0, "90\n"));
    let (_, out, _) = storefn(&["kv", "range", db, "--begin", "958", "--end", "2000"]);
    assert_eq!(out.lines().count(), 3);

    let json = d.0.join("r.json");
    let j = json.to_str().unwrap();
    for _ in 0..2 {
        let (code, out, err) =
            storefn(&["kv", "bench", db, "--requests", "300", "--threads", "2", "--json", j]);
        assert_eq!(code, 0, "{err}");
        let lines: Vec<&str> = out.lines().collect();
        assert!(
            lines[0].starts_with("Average throughput: ") && lines[0].contains(" op/s latency: ")
        );
        assert!(lines[0].ends_with(" usec"));
        assert!(lines[1].starts_with("95%   latency: ") && lines[1].ends_with(" us"));
        assert!(lines[2].starts_with("99%   latency: "));
        assert!(lines[3].starts_with("99.9% latency: "));
        assert!(lines[4].starts_with("Percentage of requests with latency >= 1ms: "));
        assert!(lines[4].ends_with('%'));
    }
    let text = std::fs::read_to_string(&json).unwrap();
    assert_eq!(text.lines().count(), 2, "appends one object per run");
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        for k in [
            "path",
            "layers",
            "threads",
            "batch",
            "requests",
            "ops_per_sec",
            "mean_us",
            "p50_us",
            "p99_us",
            "p999_us",
            "cpu_us_per_op",
            "ios_per_op",
            "fallbacks",
        ] {
            assert!(v.get(k).is_some(), "missing {k} in {line}");
        }
        assert_eq!(v["requests"], 300);
        assert_eq!(v["ios_per_op"], 3.0); // 2 levels + value
    }
    // The engine paths and the device reference, with their I/O counts.
    for (path, batch, ios) in [("xrp-batch", "16", 3.0), ("xrp", "1", 3.0), ("device", "8", 1.0)] {
        let (code, out, err) = storefn(&[
            "kv",
            "bench",
            db,
            "--requests",
            "200",
            "--path",
            path,
            "--batch",
            batch,
            "--json",
            j,
        ]);
        assert_eq!(code, 0, "{path}: {err}");
        assert!(out.contains(&format!("summary path={path} layers=2 threads=1 batch={batch}")));
        let last = std::fs::read_to_string(&json).unwrap();
        let v: serde_json::Value = serde_json::from_str(last.lines().last().unwrap()).unwrap();
        assert_eq!((v["path"].as_str(), v["ios_per_op"].as_f64()), (Some(path), Some(ios)));
        assert_eq!(v["fallbacks"], 0);
    }
}

#[test]
fn errors_are_clear_and_exit_1() {
    let d = dir("err");
    let db = d.0.join("db");
    let dbs = db.to_str().unwrap();
    storefn(&["kv", "create", dbs, "--layers", "1"]);
    std::fs::write(d.0.join("db.meta"), b"garbage").unwrap();
    let (code, _, err) = storefn(&["kv", "get", dbs, "--key", "1"]);
    assert_eq!(code, 1);
    assert!(err.starts_with("error: ") && err.contains("corrupt sidecar"), "{err}");
    let (code, _, err) = storefn(&["kv", "get", d.0.join("nope").to_str().unwrap(), "--key", "1"]);
    assert_eq!(code, 1);
    assert!(err.contains("nope: open: No such file"), "{err}");
    let (code, _, err) = storefn(&["kv", "create", dbs, "--layers", "1", "--node-size", "1024"]);
    assert_eq!(code, 1);
    assert!(err.contains("--node-size 1024"), "{err}");
}

#[test]
fn demo_runs_and_paths_agree() {
    let d = dir("demo");
    let (code, out, err) = storefn(&["demo", "--dir", d.0.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("every lookup path returned the same bytes"), "{out}");
    for path in ["read ", "uring ", "xrp ", "xrp-batch ", "device "] {
        assert!(out.lines().any(|l| l.starts_with(path)), "no {path}row: {out}");
    }
    assert!(!out.contains("skipping"), "{out}");
}

#[test]
fn get_with_user_programs() {
    let d = dir("prog");
    let db = d.0.join("db");
    let dbs = db.to_str().unwrap();
    storefn(&["kv", "create", dbs, "--layers", "3"]);
    let good = d.0.join("lookup.o");
    std::fs::write(&good, storefn_progs::must("kv_lookup")).unwrap();
    let g = good.to_str().unwrap();
    let (code, out, err) = storefn(&["kv", "get", dbs, "--key", "12345", "--prog", g]);
    assert_eq!((code, out.as_str()), (0, format!("{:>63}\n", 12345).as_str()), "{err}");
    let (code, out, _) =
        storefn(&["kv", "get", dbs, "--key", "12345", "--prog", g, "--cache-levels", "2"]);
    assert_eq!((code, out.as_str()), (0, format!("{:>63}\n", 12345).as_str()));
    let (code, out, _) = storefn(&["kv", "get", dbs, "--key", "99999", "--prog", g]);
    assert_eq!((code, out.as_str()), (1, "not found\n"));
    let (code, out, err) =
        storefn(&["kv", "get", dbs, "--key", "12345", "--prog", g, "--path", "xrp"]);
    assert_eq!((code, out.as_str()), (0, format!("{:>63}\n", 12345).as_str()), "{err}");

    // A program that faults (writes the read-only block): an error, exit 1, no crash.
    let bad = d.0.join("bad.o");
    std::fs::write(&bad, storefn_progs::must("test/write_data")).unwrap();
    let (code, out, err) =
        storefn(&["kv", "get", dbs, "--key", "1", "--prog", bad.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(err.starts_with("error: ") && err.contains("hop 1"), "{err}");
    let (code, _, err) = storefn(&[
        "kv",
        "get",
        dbs,
        "--key",
        "1",
        "--prog",
        bad.to_str().unwrap(),
        "--path",
        "xrp",
    ]);
    assert_eq!(code, 1);
    assert!(err.starts_with("error: ") && err.contains("write of 1 bytes"), "{err}");
    // Not an ELF at all.
    let (code, _, err) = storefn(&["kv", "get", dbs, "--key", "1", "--prog", dbs]);
    assert_eq!(code, 1);
    assert!(err.starts_with("error: "), "{err}");
    // A missing section.
    let (code, _, err) =
        storefn(&["kv", "get", dbs, "--key", "1", "--prog", g, "--section", "nope"]);
    assert_eq!(code, 1);
    assert!(err.starts_with("error: "), "{err}");
}

#[test]
fn io_raw_on_the_engine_paths_answers_and_reports_device_reads() {
    let d = dir("kv-raw");
    let db = d.0.join("db");
    let db = db.to_str().unwrap();
    assert_eq!(storefn(&["kv", "create", db, "--layers", "2"]).0, 0);
    for path in ["uring", "xrp", "xrp-batch"] {
        let (code, out, err) =
            storefn(&["kv", "get", db, "--key", "77", "--path", path, "--io", "raw"]);
        assert_eq!((code, out.as_str()), (0, format!("{:>63}\n", 77).as_str()), "{path}: {err}");
    }
    let j = d.0.join("raw.jsonl");
    let j = j.to_str().unwrap();
    let (code, out, err) = storefn(&[
        "kv",
        "bench",
        db,
        "--path",
        "xrp",
        "--io",
        "raw",
        "--requests",
        "200",
        "--json",
        j,
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("Device reads per lookup: "), "{out}");
    let line: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(j).unwrap().trim()).unwrap();
    assert_eq!(line["io"], "raw");
    assert_eq!(line["fallbacks"], 0);
    // The temp dir is on /dev/vda here (EPERM even for root): the path says why and uses the
    // file; where the device opens, every read goes to it.
    let device = line["device_ios_per_op"].as_f64().unwrap();
    if device == 0.0 {
        assert!(err.contains("--io raw: ") && err.contains("raw mode unavailable"), "{err}");
    } else {
        assert!((device - line["ios_per_op"].as_f64().unwrap()).abs() < 1e-9, "{line}");
    }
}

#[test]
fn bench_io_file_raw_runs_both_modes_and_one_compare_line() {
    let d = dir("kv-compare");
    let db = d.0.join("db");
    let db = db.to_str().unwrap();
    assert_eq!(storefn(&["kv", "create", db, "--layers", "2"]).0, 0);
    let j = d.0.join("c.jsonl");
    let j = j.to_str().unwrap();
    let args = ["kv", "bench", db, "--path", "xrp", "--io", "file,raw", "--requests", "120"];
    let (code, out, err) = storefn(&[&args[..], &["--rounds", "4", "--json", j]].concat());
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out.lines().filter(|l| l.starts_with("== io=")).count(), 2, "{out}");
    assert!(out.contains("io=file\n") && out.contains("io=raw\n"), "{out}");
    let compare: Vec<_> = out.lines().filter(|l| l.starts_with("compare ")).collect();
    assert_eq!(compare.len(), 1, "{out}");
    assert!(compare[0].starts_with("compare path=xrp layers=2 threads=1 rounds=4 requests=120 "));
    let line: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(j).unwrap().trim()).unwrap();
    assert_eq!(line["rounds"], 4);
    assert_eq!(line["round_mean_us_file_raw"].as_array().unwrap().len(), 4);
    assert_eq!(
        (line["file"]["io"].as_str(), line["raw"]["io"].as_str()),
        (Some("file"), Some("raw"))
    );
    if line["raw_in_use"] == false {
        assert!(err.contains("raw mode was not in use"), "{err}");
    }
    for (bad, want) in [
        (&["--io", "both"][..], "expected file, raw or file,raw"),
        (&["--io", "file,raw", "--rounds", "0"][..], "--rounds 0"),
        (&["--io", "raw", "--rounds", "5"][..], "--rounds applies to --io file,raw only"),
    ] {
        let (code, _, err) = storefn(&[&["kv", "bench", db, "--path", "xrp"][..], bad].concat());
        assert_ne!(code, 0);
        assert!(err.contains(want), "{err}");
    }
}

/// The first 8 bytes of a value, little-endian: what `--agg` folds.
fn word(v: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = v.len().min(8);
    b[..n].copy_from_slice(&v[..n]);
    u64::from_le_bytes(b)
}

// Regression: range and multiget read the tree alone and missed puts not yet compacted.
#[test]
fn range_and_multiget_see_uncompacted_puts() {
    let d = dir("overlay");
    let db = d.0.join("db");
    let db = db.to_str().unwrap();
    assert_eq!(storefn(&["kv", "create", db, "--layers", "2"]).0, 0);
    for (k, v) in [("959", "upd"), ("1500", "new"), ("3000", "outside")] {
        let (code, _, err) = storefn(&["kv", "put", db, "--key", k, "--value", v]);
        assert_eq!(code, 0, "{err}");
    }
    let tree = |k: u64| format!("{k} {k:>63}");
    for path in ["read", "xrp"] {
        let (code, out, err) =
            storefn(&["kv", "range", db, "--begin", "958", "--end", "2000", "--path", path]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(
            out.lines().collect::<Vec<_>>(),
            [tree(958), "959 upd".into(), tree(960), "1500 new".into()],
            "--path {path}"
        );
        let agg = |a: &str| {
            let args = ["kv", "range", db, "--begin", "958", "--end", "2000", "--path", path];
            let (code, out, err) = storefn(&[&args[..], &["--agg", a]].concat());
            assert_eq!(code, 0, "{err}");
            out.trim().to_string()
        };
        let spaces = word(b"        ");
        let want_sum = (2 * spaces).wrapping_add(word(b"upd")).wrapping_add(word(b"new"));
        assert_eq!(agg("count"), "4", "--path {path}");
        assert_eq!(agg("sum"), want_sum.to_string(), "--path {path}");
        let want_min = word(b"upd").min(word(b"new"));
        assert_eq!(agg("min"), want_min.to_string(), "--path {path}");
        assert_eq!(agg("max"), spaces.to_string(), "--path {path}");
        // No logged key inside: the tree's answer, unchanged.
        let (_, out, _) = storefn(&[
            "kv", "range", db, "--begin", "10", "--end", "99", "--agg", "count", "--path", path,
        ]);
        assert_eq!(out, "90\n");
    }
    let (code, out, _) = storefn(&["kv", "multiget", db, "--keys", "3,959,1500,3001"]);
    assert_eq!(code, 1, "3001 is missing");
    assert_eq!(
        out.lines().map(str::trim_end).collect::<Vec<_>>(),
        [tree(3), "959 upd".into(), "1500 new".into(), "3001 not found".into()]
    );
    // After compaction the same answers come from the tree.
    assert_eq!(storefn(&["kv", "compact", db]).0, 0);
    let (_, out, _) = storefn(&["kv", "multiget", db, "--keys", "959,1500"]);
    assert_eq!(out, "959 upd\n1500 new\n");
    let (_, out, _) = storefn(&["kv", "range", db, "--begin", "958", "--end", "2000"]);
    assert_eq!(out.lines().count(), 4);
}

// Regression: multiget, range and bench opened the tree without finishing an interrupted
// compaction, so they read the old tree (or a tree and sidecar that disagreed).
#[test]
fn every_tree_reader_reads_an_interrupted_compaction_as_recovery_would_and_repairs_nothing() {
    let d = dir("recover");
    let db = d.0.join("db");
    let new = d.0.join("db.new");
    let marker = d.0.join("db.compacting");
    let (db, new_s) = (db.to_str().unwrap(), new.to_str().unwrap());
    let cases: [&[&str]; 3] = [
        &["kv", "range", db, "--begin", "0", "--end", "5000", "--agg", "count"],
        &["kv", "multiget", db, "--keys", "30,31"],
        &["kv", "bench", db, "--requests", "50", "--warmup", "0"],
    ];
    let wants = ["31\n", "31 not found", "layers=1 "];
    for (args, want) in cases.iter().zip(wants) {
        // A 2-layer tree with a complete 1-layer replacement marked for installation.
        assert_eq!(storefn(&["kv", "create", db, "--layers", "2"]).0, 0);
        assert_eq!(storefn(&["kv", "create", new_s, "--layers", "1"]).0, 0);
        std::fs::write(&marker, b"").unwrap();
        let (_, out, err) = storefn(args);
        assert!(out.contains(want), "{args:?}: {out} {err}");
        // Issue 11: only the writer repairs; a reader must not race a live writer's files.
        assert!(marker.exists() && new.exists(), "{args:?} (a reader) touched the swap");
        let (code, out, err) = storefn(&["kv", "recover", db]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("finished an interrupted compaction"), "{out}");
        assert!(!marker.exists() && !new.exists(), "kv recover left the swap unfinished");
        assert!(storefn(args).1.contains(want), "{args:?} after recovery");
    }
}
