//! `storefn rocks get|multiget` against RocksDB's own `ldb get` on a database `ldb` wrote:
//! flushed and compacted keys, an overwrite and a delete left in the WAL, absent keys.

mod common;

use common::{is_root, skip, storefn, temp_dir};

fn ldb(args: &[&str]) -> (i32, String) {
    let o = std::process::Command::new("ldb")
        .args(args)
        .output()
        .expect("ldb runs (apt-get install rocksdb-tools: ./run.sh installs it)");
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stdout).into_owned())
}

/// Every path's arguments: local ones, and the remote ones through `addr` (DIR relative to the
/// served directory).
fn paths(addr: &str) -> Vec<Vec<&str>> {
    vec![
        vec!["--path", "read"],
        vec!["--path", "xrp"],
        vec!["--path", "xrp", "--index-in-file"],
        vec!["--path", "xrp-batch"],
        vec!["--path", "native"],
        vec!["--path", "native-multiget"],
        vec!["--path", "pushdown", "--remote", addr],
        vec!["--path", "rpc-read", "--remote", addr],
        vec!["--path", "rpc-read", "--remote", addr, "--cache-fraction", "1"],
    ]
}

#[test]
fn get_and_multiget_answer_as_ldb_does_on_every_path() {
    let d = temp_dir("storefn-rocks-cli", "get");
    let served = d.0.clone();
    let dbdir = d.0.join("db");
    std::fs::create_dir_all(&dbdir).unwrap();
    let server =
        storefn_server::Server::start("127.0.0.1:0", storefn_server::ServerConfig::new(&served))
            .unwrap();
    let addr = server.local_addr().to_string();
    let db = format!("--db={}", dbdir.display());
    let local = dbdir.to_str().unwrap();
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
    let keys_file = d.0.join("keys");
    std::fs::write(&keys_file, "a\nb\nc\nzz\n").unwrap();
    let mut ours: Vec<(i32, String)> = Vec::new();
    for p in paths(&addr) {
        let dir = if p.contains(&"--remote") { "db" } else { local };
        let got: Vec<(i32, String)> = keys
            .iter()
            .map(|k| {
                let mut args = vec!["rocks", "get", dir, "--key", k];
                args.extend(&p);
                let (code, out, err) = storefn(&args);
                assert!(err.is_empty(), "{p:?}: {err}");
                (code, out)
            })
            .collect();
        if ours.is_empty() {
            ours = got;
        } else {
            assert_eq!(got, ours, "{p:?}");
        }
        let mut args = vec!["rocks", "multiget", dir, "--keys-file", keys_file.to_str().unwrap()];
        args.extend(&p);
        let (code, multi, _) = storefn(&args);
        assert_eq!(code, 0, "{p:?}");
        assert_eq!(multi, "a\t1\nb\t22\n", "{p:?}");
    }
    server.stop();
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

/// A database `ldb` wrote (300 keys, compacted) and a keys file of 320 keys (20 absent).
fn bench_db(d: &std::path::Path) -> std::path::PathBuf {
    let db = format!("--db={}", d.display());
    let mut put = vec![db.as_str(), "--create_if_missing", "--compression_type=no", "batchput"];
    let kv: Vec<String> = (0..300).flat_map(|i| [format!("k{i:04}"), format!("v{i}")]).collect();
    put.extend(kv.iter().map(String::as_str));
    assert_eq!(ldb(&put).0, 0);
    assert_eq!(ldb(&[&db, "compact"]).0, 0);
    let keys_file = d.join("keys");
    let keys: Vec<String> = (0..320).map(|i| format!("k{i:04}")).collect();
    std::fs::write(&keys_file, keys.join("\n")).unwrap();
    keys_file
}

#[test]
fn bench_reports_every_path_with_the_same_answers() {
    let d = temp_dir("storefn-rocks-cli", "bench");
    let keys_file = bench_db(&d.0);
    let dir = d.0.to_str().unwrap();
    let (code, out, err) = storefn(&[
        "rocks",
        "bench",
        dir,
        "--paths",
        "read,xrp,xrp-batch,native,native-multiget",
        "--keys-file",
        keys_file.to_str().unwrap(),
        "--reads",
        "400",
        "--rounds",
        "2",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), 5);
    let found: Vec<u64> = rows.iter().map(|r| r["found"].as_u64().unwrap()).collect();
    assert!(found[0] > 300 && found.iter().all(|f| *f == found[0]), "{found:?}");
    for r in rows {
        assert_eq!(r["gets"].as_u64(), Some(800));
        assert!(r["gets_per_s"].as_f64().unwrap() > 0.0);
        assert!(r["cpu_us_per_get"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(rows[3]["path"], "native");
}

#[test]
fn bench_memory_limit_runs_every_path_and_round_in_its_own_group() {
    if !is_root() || !std::path::Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists() {
        skip("needs root and the cgroup v1 memory controller");
        return;
    }
    let d = temp_dir("storefn-rocks-cli", "bench-cg");
    let keys_file = bench_db(&d.0);
    let limit = 64u64 << 20;
    let (code, out, err) = storefn(&[
        "rocks",
        "bench",
        d.0.to_str().unwrap(),
        "--paths",
        "xrp-batch,native",
        "--keys-file",
        keys_file.to_str().unwrap(),
        "--reads",
        "200",
        "--warmup",
        "50",
        "--rounds",
        "3",
        "--direct",
        "--memory-limit",
        &limit.to_string(),
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["memory_groups"], "one per path and round (a child process each)");
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    let found: Vec<u64> = rows.iter().map(|r| r["found"].as_u64().unwrap()).collect();
    assert!(found[0] > 500 && found[0] == found[1], "{found:?}");
    for r in rows {
        // Three rounds, each from its own process: their Gets and latencies merged.
        assert_eq!(r["gets"].as_u64(), Some(600), "{r}");
        assert_eq!(r["rounds_gets_per_s"].as_array().unwrap().len(), 3, "{r}");
        let peak = r["memory_max_usage_bytes"].as_u64().unwrap();
        assert!(peak > 0 && peak <= limit, "{peak}");
    }
    assert!(rows[0]["chains"].as_u64().unwrap() > 0, "xrp-batch ran its chains: {}", rows[0]);
    for e in std::fs::read_dir("/sys/fs/cgroup/memory").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(pid) = name.strip_prefix("storefn-ycsb-") {
            assert!(std::path::Path::new("/proc").join(pid).exists(), "{name} left behind");
        }
    }
}
