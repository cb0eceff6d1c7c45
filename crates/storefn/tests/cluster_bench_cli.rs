//! `storefn cluster bench` (feature `bench`): a short run over 1 and 2 servers reports a
//! throughput per count, the client's and servers' CPU, draws its figures, and leaves no
//! cgroup, process or directory behind.
#![cfg(feature = "bench")]

use std::process::Command;

use storefn_testkit::etcd::Etcd;

fn leftover_groups() -> Vec<String> {
    std::fs::read_dir("/sys/fs/cgroup/cpu")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("storefn-cbench-"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn cluster_bench_reports_each_server_count_and_cleans_up() {
    if let Some(why) = Etcd::available() {
        storefn_testkit::skip(&why);
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !std::path::Path::new("/sys/fs/cgroup/cpu").exists() {
        storefn_testkit::skip("needs root and the cgroup v1 cpu controller");
        return;
    }
    let dir = std::env::temp_dir().join(format!("storefn-cbench-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prefix = dir.join("fig");
    let before = leftover_groups();
    let out = Command::new(env!("CARGO_BIN_EXE_storefn"))
        .args(["cluster", "bench", "--servers", "1,2", "--secs", "0.5", "--rounds", "1"])
        .args(["--warmup", "0", "--threads", "2", "--no-failover", "--json", "--plot"])
        .arg(&prefix)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = j["scaling"].as_array().unwrap();
    assert_eq!(s.len(), 2);
    for (p, n) in s.iter().zip([1, 2]) {
        assert_eq!(p["servers"], n);
        assert!(p["throughput"].as_f64().unwrap() > 0.0, "{p}");
        assert!(p["client_cpu_cores"].as_f64().unwrap() > 0.0);
        assert_eq!(p["server_cpu_cores"].as_array().unwrap().len(), n);
    }
    assert!(j["failover"].is_null());
    assert!(std::fs::metadata(dir.join("fig-scaling.png")).unwrap().len() > 1000, "{stderr}");
    let after = leftover_groups();
    assert!(after.iter().all(|g| before.contains(g)), "cgroups left: {after:?}");
    assert_eq!(s[1]["server_cpu_cores"].as_array().unwrap().len(), 2);
    let _ = std::fs::remove_dir_all(&dir);
}
