//! `storefn io probe` and `storefn io bench` run end to end and report what they promise.

use std::process::Command;

fn storefn() -> Command {
    Command::new(env!("CARGO_BIN_EXE_storefn"))
}

#[test]
fn io_bench_reports_every_case_with_a_summary_and_json() {
    for function in ["rust", "interp"] {
        bench_once(function);
    }
}

fn bench_once(function: &str) {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let json = dir.join(format!("io-bench-{}.json", std::process::id()));
    let file = dir.join(format!("io-bench-{}.dat", std::process::id()));
    let out = storefn()
        .args(["io", "bench", "--size-mb", "2", "--requests", "20", "--warmup", "2"])
        .args(["--depth", "3", "--chains", "4", "--seed", "9", "--function", function])
        .arg("--file")
        .arg(&file)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&file);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout.lines().filter(|l| l.starts_with("io bench summary: ")).count(), 1);
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    assert_eq!(doc["function"], function);
    let cases = doc["cases"].as_array().unwrap();
    let names: Vec<&str> = cases.iter().map(|c| c["case"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "a_pread_per_hop",
            "b_uring_per_hop",
            "c_one_chain",
            "d_chains_in_flight",
            "ref_read_qd1",
            "ref_read_qdN"
        ]
    );
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
