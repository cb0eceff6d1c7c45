//! `storefn ycsb load|run|plot` as a user runs them: the summary line, the JSON's keys, the
//! memory group removed after the run, and the figure.

mod common;
use common::{is_root, skip, storefn, temp_dir};

fn load(store: &str) {
    let (code, out, err) = storefn(&[
        "ycsb",
        "load",
        "--store",
        store,
        "--records",
        "2000",
        "--fields",
        "2",
        "--field-length",
        "50",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("loaded 2000 records of 100 bytes"), "{out}");
}

fn run(store: &str, workload: &str, json: &std::path::Path, extra: &[&str]) -> String {
    let mut args = vec![
        "ycsb",
        "run",
        "--workload",
        workload,
        "--store",
        store,
        "--records",
        "2000",
        "--fields",
        "2",
        "--field-length",
        "50",
        "--operations",
        "600",
        "--threads",
        "2",
        "--checkpoint-ms",
        "100",
        "--json",
        json.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let (code, out, err) = storefn(&args);
    assert_eq!(code, 0, "{err}");
    out
}

#[test]
fn ycsb_cli_runs_every_store_and_writes_json() {
    let d = temp_dir("storefn-ycsb-cli", "all");
    let json = d.0.join("runs.json");
    let stores = [
        ("wiredtiger", format!("wiredtiger:{}:usertable", d.0.join("wt").display())),
        ("wiredtiger-native", format!("wiredtiger-native:{}:usertable", d.0.join("wtn").display())),
        ("bpfkv", format!("bpfkv:{}", d.0.join("kv").display())),
    ];
    for (kind, store) in &stores {
        load(store);
        let out = run(store, "b", &json, &[]);
        assert!(out.starts_with(&format!("ycsb-b {kind} threads=2: ")), "{out}");
        assert!(out.contains("read p50/p99/p99.9"), "{out}");
        assert!(!out.contains("found no record"), "{out}");
    }
    let text = std::fs::read_to_string(&json).unwrap();
    let runs: Vec<serde_json::Value> =
        text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(runs.len(), 3);
    for (r, (kind, _)) in runs.iter().zip(&stores) {
        assert_eq!(r["store"], *kind);
        assert_eq!(r["workload"], "b");
        assert_eq!(r["threads"], 2);
        assert_eq!(r["read_misses"], 0);
        for k in ["ops_per_sec", "read_p50_us", "read_p99_us", "cpu_us_per_op"] {
            assert!(r[k].as_f64().unwrap() > 0.0, "{kind}: {k} in {r}");
        }
        assert!(r["memory_limit_bytes"].is_null());
    }
    assert!(runs[0]["function_reads"].as_u64().unwrap() > 0, "{}", runs[0]);
    let png = d.0.join("ycsb.png");
    let (code, out, err) =
        storefn(&["ycsb", "plot", json.to_str().unwrap(), "-o", png.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("3 runs"), "{out}");
    assert!(std::fs::metadata(&png).unwrap().len() > 1000);
}

#[test]
fn ycsb_cli_memory_limit_runs_in_a_group_it_removes() {
    if !is_root() || !std::path::Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists() {
        skip("needs root and the cgroup v1 memory controller");
        return;
    }
    let d = temp_dir("storefn-ycsb-cli", "cg");
    let json = d.0.join("runs.json");
    let store = format!("wiredtiger-native:{}:usertable", d.0.join("wt").display());
    load(&store);
    let limit = 64u64 << 20;
    let out = run(&store, "c", &json, &["--memory-limit", &limit.to_string()]);
    assert!(out.contains("budget 64 MiB"), "{out}");
    let r: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&json).unwrap().trim()).unwrap();
    assert_eq!(r["memory_limit_bytes"], limit);
    let peak = r["memory_peak_bytes"].as_u64().unwrap();
    assert!(peak > 0 && peak <= limit, "{peak}");
    // The run's group (named by its pid) is gone; any left are of live processes.
    for e in std::fs::read_dir("/sys/fs/cgroup/memory").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(pid) = name.strip_prefix("storefn-ycsb-") {
            assert!(std::path::Path::new("/proc").join(pid).exists(), "{name} left behind");
        }
    }
    let (code, _, err) =
        storefn(&["ycsb", "run", "--store", &store, "--records", "2000", "--memory-limit", "1000"]);
    assert_ne!(code, 0);
    assert!(err.contains("--memory-limit 1000"), "{err}");
}

#[test]
fn ycsb_cli_names_bad_arguments() {
    let (code, _, err) = storefn(&["ycsb", "run", "--store", "nosuch:x"]);
    assert_ne!(code, 0);
    assert!(err.contains("unknown store kind \"nosuch\""), "{err}");
    let (code, _, err) = storefn(&["ycsb", "run", "--store", "bpfkv:/x", "--workload", "z"]);
    assert_ne!(code, 0);
    assert!(err.contains("core workloads are a-f"), "{err}");
}
