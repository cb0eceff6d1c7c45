//! `storefn io probe` and `storefn io bench` run end to end and report what they promise.

use std::process::Command;

fn storefn() -> Command {
    Command::new(env!("CARGO_BIN_EXE_storefn"))
}

/// Runs `storefn io bench <args> <more>` on a scratch file named after `stem`, asserts it exits
/// 0 and returns its stdout and parsed `--json` document (both scratch files removed).
fn io_bench(stem: &str, args: &[&str], more: &[&str]) -> (String, serde_json::Value) {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let json = dir.join(format!("{stem}-{}.json", std::process::id()));
    let file = dir.join(format!("{stem}-{}.dat", std::process::id()));
    let out = storefn()
        .args(["io", "bench"])
        .args(args)
        .args(more)
        .arg("--file")
        .arg(&file)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&file);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    (stdout, doc)
}

#[test]
fn io_bench_reports_every_case_with_a_summary_and_json() {
    for function in ["rust", "interp", "jit"] {
        bench_once(function);
    }
}

fn bench_once(function: &str) {
    let (stdout, doc) = io_bench(
        "io-bench",
        &["--size-mb", "2", "--requests", "20", "--warmup", "2", "--depth", "3", "--chains", "4"],
        &["--seed", "9", "--function", function],
    );
    assert_eq!(stdout.lines().filter(|l| l.starts_with("io bench summary: ")).count(), 1);
    assert_eq!(doc["function"], function);
    let cases = doc["cases"].as_array().unwrap();
    let names: Vec<&str> = cases.iter().map(|c| c["case"].as_str().unwrap()).collect();
    // The measuring itself is tested beside it (storefn-io's tests/harness.rs); here: the
    // CLI writes every case the harness ran, in order.
    assert_eq!(names, storefn_io::harness::CASE_NAMES);
    for c in cases {
        let hops = c["hops"].as_u64().unwrap();
        assert!(hops == 60, "{c}");
        assert!(c["hop_latency_us"]["p50"].as_f64().unwrap() > 0.0, "{c}");
        assert!(c["hop_latency_us"]["p99"].as_f64() >= c["hop_latency_us"]["p50"].as_f64());
    }
}

#[test]
fn io_bench_refuses_bad_arguments_by_name() {
    let out = storefn().args(["io", "bench", "--node", "100"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--node 100: must be a power of two"), "{err}");
}

#[test]
fn io_probe_reports_o_direct_and_polling_modes() {
    let out = storefn().args(["io", "probe"]).output().unwrap();
    assert!(out.status.success());
    let s = String::from_utf8_lossy(&out.stdout);
    for what in ["io_uring: ok", "O_DIRECT: ", "SQPOLL: ", "IOPOLL: "] {
        assert!(s.contains(what), "{what} missing in {s}");
    }
}

#[test]
fn io_bench_io_raw_falls_back_to_the_file_with_the_reason_when_the_device_is_refused() {
    let (stdout, doc) = io_bench(
        "io-bench-raw",
        &["--io", "raw", "--size-mb", "2", "--requests", "20"],
        &["--warmup", "2", "--depth", "3", "--chains", "4"],
    );
    assert_eq!(doc["io_requested"], "raw");
    assert_eq!(doc["stale_chains"], 0);
    if doc["mode"] == "raw" {
        println!("note: the target dir's device opens here; raw mode ran");
        assert!(doc["raw_fallback"].is_null());
    } else {
        // On this machine target/ is on /dev/vda, which refuses opens (EPERM) even for root.
        assert_eq!(doc["mode"], "direct");
        let why = doc["raw_fallback"].as_str().unwrap();
        assert!(why.contains("raw mode unavailable"), "{why}");
        assert!(stdout.contains("--io raw unavailable, ran on the file path"), "{stdout}");
    }
}
