//! `storefn lambda gen|run|bench`: outputs equal the native baselines; errors name the problem;
//! the bench's JSON lines carry the documented keys.

use std::path::PathBuf;
use std::process::{Command, Output};

use storefn_lambda::Workload;

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_storefn")).args(args).output().unwrap()
}

fn tmpdir(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("storefn-cli-lambda-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "stderr: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    assert!(!o.status.success(), "stdout: {}", String::from_utf8_lossy(&o.stdout));
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn gen_then_run_matches_native() {
    let d = tmpdir("run");
    let data = d.join("knn.dat");
    let s = ok(&run(&["lambda", "gen", "knn", data.to_str().unwrap(), "--size", "1M"]));
    assert!(s.starts_with("lambda gen: knn 1048576 bytes seed 42"), "{s}");
    let out = d.join("knn.out");
    let s = ok(&run(&[
        "lambda",
        "run",
        data.to_str().unwrap(),
        "--prog",
        "knn",
        "--where",
        "local",
        "--range",
        "0x800:204800",
        "--out",
        out.to_str().unwrap(),
    ]));
    assert!(s.contains("where local out 136 bytes"), "{s}");
    let input = std::fs::read(&data).unwrap();
    let mut want = vec![0u8; 136];
    let n = Workload::Knn.native(&input[2048..2048 + 204_800], &mut want);
    assert_eq!(std::fs::read(&out).unwrap(), want[..n]);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn any_lambda_object_runs_from_a_file() {
    let d = tmpdir("obj");
    let data = d.join("s.dat");
    ok(&run(&["lambda", "gen", "stats64", data.to_str().unwrap(), "--size", "64K"]));
    let obj = d.join("sum.o");
    std::fs::write(&obj, storefn_progs::must("test/lambda_sum")).unwrap();
    let out = d.join("sum.out");
    let s = ok(&run(&[
        "lambda",
        "run",
        data.to_str().unwrap(),
        "--prog",
        obj.to_str().unwrap(),
        "--range",
        "0:64",
        "--out",
        out.to_str().unwrap(),
        "--engine",
        "interp",
    ]));
    assert!(s.contains("out 24 bytes"), "{s}");
    let input = std::fs::read(&data).unwrap();
    let sum = input[..64]
        .chunks_exact(8)
        .fold(0u64, |a, c| a.wrapping_add(u64::from_le_bytes(c.try_into().unwrap())));
    let got = std::fs::read(&out).unwrap();
    assert_eq!(u64::from_le_bytes(got[..8].try_into().unwrap()), sum);
    assert_eq!(got[8..24], input[..16]);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn bad_arguments_name_the_problem() {
    let d = tmpdir("bad");
    let data = d.join("s.dat");
    ok(&run(&["lambda", "gen", "stats32", data.to_str().unwrap(), "--size", "8K"]));
    let p = data.to_str().unwrap();
    let e = err(&run(&["lambda", "run", p, "--prog", "stats32", "--range", "4096:8192"]));
    assert!(e.contains("range [4096, +8192) is outside the file (8192 bytes)"), "{e}");
    let e = err(&run(&["lambda", "run", p, "--prog", "stats32", "--where", "server"]));
    assert!(e.contains("only --where local applies"), "{e}");
    let e = err(&run(&["lambda", "run", "127.0.0.1:9:s.dat", "--prog", "stats32"]));
    assert!(e.contains("127.0.0.1:9:s.dat: remote files need the storage server"), "{e}");
    let e = err(&run(&["lambda", "run", p, "--prog", "nope"]));
    assert!(e.contains("--prog nope: not a built-in workload or program"), "{e}");
    let e = err(&run(&["lambda", "gen", "sort", p]));
    assert!(e.contains("unknown workload \"sort\""), "{e}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn bench_writes_one_json_object_per_row() {
    let d = tmpdir("bench");
    let json = d.join("b.json");
    let s = ok(&run(&[
        "lambda",
        "bench",
        "--dir",
        d.to_str().unwrap(),
        "--workloads",
        "stats64,bitmap",
        "--requests",
        "5",
        "--file-bytes",
        "1M",
        "--request-bytes",
        "64K",
        "--json",
        json.to_str().unwrap(),
    ]));
    assert!(s.contains("lambda bench: 3 rows"), "{s}");
    let rows: Vec<serde_json::Value> = std::fs::read_to_string(&json)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let keys: Vec<_> = rows
        .iter()
        .map(|r| {
            assert_eq!(r["where"], "local");
            assert_eq!(r["requests"], 5);
            assert!(r["us_per_request"].as_f64().unwrap() > 0.0);
            (
                r["workload"].as_str().unwrap().to_string(),
                r["condition"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want = [("stats64", "cold"), ("stats64", "warm"), ("bitmap", "write")];
    assert_eq!(keys, want.map(|(a, b)| (a.to_string(), b.to_string())));
    std::fs::remove_dir_all(&d).unwrap();
}
