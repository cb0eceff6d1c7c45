//! `storefn lambda run ADDR:FILE` against a storage server on loopback (with token auth):
//! `--where local` (READ frames, the function here), `server` (the LAMBDA frame) and `auto`
//! all write the native baseline's bytes; errors name the limit or the missing token.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

use common::{err, ok};
use storefn_lambda::Workload;
use storefn_server::{Server, ServerConfig};

struct Dir(PathBuf);
impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_storefn")).args(args).output().unwrap()
}

/// `lambda run ADDR:FILE --prog P` with `extra` arguments.
fn run_remote(target: &str, prog: &str, extra: &[&str]) -> Output {
    let mut args = vec!["lambda", "run", target, "--prog", prog];
    args.extend_from_slice(extra);
    run(&args)
}

/// A temporary directory with `served/` served by a token-auth server on loopback; returns the
/// directory, the served directory, the server and the token file.
fn token_server(tag: &str) -> (Dir, PathBuf, Server, PathBuf) {
    let base = std::env::temp_dir().join(format!("storefn-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let served = base.join("served");
    std::fs::create_dir_all(&served).unwrap();
    let d = Dir(base);
    let tokens = d.0.join("tokens");
    std::fs::write(&tokens, "alice 0123456789abcdef0123456789abcdef\n").unwrap();
    let mut cfg = ServerConfig::new(&served);
    cfg.tokens = Some(storefn_server::load_tokens(&tokens).unwrap());
    let server = Server::start("127.0.0.1:0", cfg).unwrap();
    (d, served, server, tokens)
}

#[test]
fn remote_run_on_every_side_matches_native() {
    let (d, served, server, tokens) = token_server("lambda-remote");
    let addr = server.local_addr().to_string();
    let tok = tokens.to_str().unwrap();
    for (w, range, off, len) in [
        (Workload::Knn, "0x800:4096", 2048usize, 4096usize),
        (Workload::Stats32, "12:4000", 12, 4000),
        (Workload::Grep, "4096:4096", 4096, 4096),
        // Several 4 KiB engine reads on the server, one function run over the whole range.
        (Workload::Stats32, "12:40000", 12, 40000),
    ] {
        let data = served.join(format!("{}.dat", w.name()));
        ok(&run(&["lambda", "gen", w.name(), data.to_str().unwrap(), "--size", "256K"]));
        let input = std::fs::read(&data).unwrap();
        let mut want = vec![0u8; w.out_cap(len)];
        let n = w.native(&input[off..off + len], &mut want);
        let target = format!("{addr}:{}.dat", w.name());
        for wh in ["local", "server", "auto"] {
            let out = d.0.join(format!("{}-{wh}.out", w.name()));
            let extra = [
                "--where",
                wh,
                "--range",
                range,
                "--token-file",
                tok,
                "--out",
                out.to_str().unwrap(),
            ];
            let s = ok(&run_remote(&target, w.name(), &extra));
            assert!(s.contains(&format!("out {n} bytes")), "{w} {wh}: {s}");
            // auto with no history measures the client side first.
            let ran = if wh == "server" { "server" } else { "local" };
            assert!(s.contains(&format!("where {ran} (asked {wh})")), "{w} {wh}: {s}");
            assert_eq!(std::fs::read(&out).unwrap(), want[..n], "{w} {wh}");
        }
    }
    // The whole file (STAT for its size) over READ frames.
    let s = ok(&run_remote(&format!("{addr}:stats32.dat"), "stats32", &["--token-file", tok]));
    assert!(s.contains("range [0, +262144) where local"), "{s}");
    // A range above one LAMBDA frame's limit is refused with the limit, not split.
    let knn = format!("{addr}:knn.dat");
    let e = err(&run_remote(
        &knn,
        "knn",
        &["--where", "server", "--range", "0:2097152", "--token-file", tok],
    ));
    assert!(e.contains("range of 2097152 bytes is above the limit of 1048576 bytes"), "{e}");
    // No token for a server that requires one.
    let e = err(&run_remote(&knn, "knn", &["--where", "server", "--range", "0:2048"]));
    assert!(e.contains("AUTH"), "{e}");
    server.stop();
    server.join().unwrap();
}

#[test]
fn bench_against_a_served_directory_sweeps_rtt_cache_and_cpu() {
    let base =
        std::env::temp_dir().join(format!("storefn-cli-lambda-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let d = Dir(base.clone());
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_storefn"))
        .args(["serve", "--dir", d.0.to_str().unwrap(), "--listen", &addr])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Bounded wait for the listener.
    for _ in 0..200 {
        if std::net::TcpStream::connect(&addr).is_ok() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let json = d.0.join("b.json");
    let plot = d.0.join("b.png");
    let pid = child.id().to_string();
    let mut args = vec![
        "lambda",
        "bench",
        "--dir",
        d.0.to_str().unwrap(),
        "--server",
        &addr,
        "--workloads",
        "stats64",
        "--requests",
        "8",
        "--request-bytes",
        "4K",
        "--file-bytes",
        "256K",
        "--rtts-us",
        "0,300",
        "--changes",
        "--json",
        json.to_str().unwrap(),
        "--plot",
        plot.to_str().unwrap(),
    ];
    let capped = common::is_root();
    if !capped {
        common::skip("the server CPU cap needs root (cgroup v1 cpu); the rest runs");
    }
    if capped {
        args.extend(["--cpu-cap", "50", "--server-pid", &pid]);
    }
    let o = run(&args);
    let _ = child.kill();
    let _ = child.wait();
    let s = ok(&o);
    // 2 RTTs x (cold, warm, cold->warm, warm->cold) + the RTT rise = 9 conditions x 3 sides,
    // per CPU state; with the cap, the uncapped sweep also caps the CPU midway (one more).
    let per = if capped { 10 * 3 } else { 9 * 3 };
    let n = if capped { per + 9 * 3 } else { per };
    assert!(
        s.contains(&format!("lambda bench: {n} rows, 8 requests each, where local/server/auto")),
        "{s}"
    );
    // One goal line per (workload, condition) and a tally per goal: 4 steady conditions per
    // CPU state, and the changing ones split by whether their answer flipped (the rows' own
    // halves say), each line naming how it was judged.
    let goal_lines: Vec<&str> =
        s.lines().filter(|l| l.starts_with("lambda bench: goal workload")).collect();
    assert_eq!(goal_lines.len(), n / 3, "{s}");
    for l in &goal_lines {
        let judged = if l.contains("->") {
            ["unchanged(<=1.05)", "(auto<both)"]
        } else {
            ["steady(<=1.05)"; 2]
        };
        assert!(judged.iter().any(|j| l.contains(j)) && l.contains(" rounds "), "{l}");
        assert!(l.contains(" round_median ") && l.contains(" noise "), "{l}");
    }
    let cpu = if capped { 2 } else { 1 };
    let tally = |goal: &str| {
        let t = s.lines().find(|l| l.contains(&format!("goals {goal} "))).unwrap_or("");
        let rows = t.split_once('/').and_then(|(_, r)| r.split_once(' ')).map(|(n, _)| n);
        rows.and_then(|n| n.parse::<usize>().ok()).unwrap_or_else(|| panic!("{goal}: {s}"))
    };
    assert_eq!(tally("steady (auto within 5%)"), 4 * cpu, "{s}");
    assert!(s.contains(" within the run's noise), auto/better-fixed median "), "{s}");
    let changing = tally("changing, answer unchanged (auto within 5%)")
        + tally("changing, answer flips (auto beats both)");
    assert_eq!(changing, n / 3 - 4 * cpu, "{s}");
    let rows: Vec<serde_json::Value> = std::fs::read_to_string(&json)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), n);
    for r in &rows {
        for k in ["workload", "condition", "where", "requests", "us_per_request"] {
            assert!(!r[k].is_null(), "{k} missing: {r}");
        }
        let cond = r["condition"].as_str().unwrap();
        // Twelve rounds (six per half) of 8 requests: some rounds have none (mean 0).
        assert_eq!(r["round_us"].as_array().map(Vec::len), Some(12), "{r}");
        assert_eq!(r["half_us"].as_array().map(Vec::len), Some(2), "{r}");
        // The midway cap is the uncapped sweep's last condition.
        let at = rows.iter().position(|x| x == r).unwrap();
        assert_eq!(cond == "cold-rtt0-cpu100->50", capped && (per - 3..per).contains(&at), "{r}");
        assert_eq!(
            cond.ends_with("-cpu50"),
            capped && rows.iter().position(|x| x == r).unwrap() >= per,
            "{r}"
        );
        // The proxy holds every byte for the RTT: no server request beats it.
        if r["where"] == "server" && cond.contains("-rtt300") && !cond.contains("->") {
            assert!(r["p50_us"].as_f64().unwrap() >= 300.0, "{r}");
        }
        // A warm client cache costs no network: local beats the RTT.
        if r["where"] == "local" && cond.starts_with("warm-rtt300") {
            assert!(r["p50_us"].as_f64().unwrap() < 300.0, "{r}");
        }
    }
    assert!(std::fs::metadata(&plot).unwrap().len() > 0);
    // The cap's group is gone.
    let left = std::path::Path::new("/sys/fs/cgroup/cpu").join(format!("storefn-lambda-cap-{pid}"));
    assert!(!left.exists(), "{} left behind", left.display());
}

#[test]
fn lambda_write_local_and_remote_write_the_native_bytes() {
    let (d, served, server, tokens) = token_server("lambda-write");
    let addr = server.local_addr().to_string();
    let tok = tokens.to_str().unwrap();
    let input = d.0.join("runs.bin");
    ok(&run(&["lambda", "gen", "bitmap", input.to_str().unwrap(), "--size", "16K"]));
    let runs = std::fs::read(&input).unwrap();
    let mut want = vec![0u8; Workload::Bitmap.out_cap(runs.len())];
    let n = Workload::Bitmap.native(&runs, &mut want);
    let local = d.0.join("local.out");
    std::fs::write(served.join("remote.out"), b"").unwrap();
    let remote = format!("{addr}:remote.out");
    let args = ["--prog", "bitmap", "--input", input.to_str().unwrap(), "--offset", "0x100"];
    let s = ok(&run(&[&["lambda", "write", local.to_str().unwrap()][..], &args].concat()));
    assert!(s.contains(&format!("written {n} bytes where local")), "{s}");
    let s = ok(&run(&[&["lambda", "write", &remote][..], &args, &["--token-file", tok]].concat()));
    assert!(s.contains(&format!("written {n} bytes where server")), "{s}");
    let mut expect = vec![0u8; 0x100];
    expect.extend_from_slice(&want[..n]);
    assert!(std::fs::read(&local).unwrap() == expect, "local λ write differs from native");
    assert!(std::fs::read(served.join("remote.out")).unwrap() == expect, "remote differs");
    // The served file must exist; paths stay beneath the served directory; a token is needed.
    let e = err(&run(&[
        &["lambda", "write", &format!("{addr}:new.out")][..],
        &args,
        &["--token-file", tok],
    ]
    .concat()));
    assert!(e.contains("NOT_FOUND"), "{e}");
    let e = err(&run(&[
        &["lambda", "write", &format!("{addr}:../x.out")][..],
        &args,
        &["--token-file", tok],
    ]
    .concat()));
    assert!(e.contains("OUTSIDE_ROOT"), "{e}");
    let e = err(&run(&[&["lambda", "write", &remote][..], &args].concat()));
    assert!(e.contains("AUTH"), "{e}");
    server.stop();
    server.join().unwrap();
}

#[test]
fn lambda_overhead_reports_what_auto_adds() {
    let d =
        Dir(std::env::temp_dir().join(format!("storefn-cli-lambda-ovh-{}", std::process::id())));
    std::fs::create_dir_all(&d.0).unwrap();
    let f = d.0.join("s.dat");
    ok(&run(&["lambda", "gen", "stats64", f.to_str().unwrap(), "--size", "64K"]));
    let s = ok(&run(&[
        "lambda",
        "overhead",
        f.to_str().unwrap(),
        "--len",
        "64K",
        "--requests",
        "2000",
        "--rounds",
        "3",
    ]));
    for k in ["auto_extra_ns", "decide_record_ns", "cache_probe_ns", "samples_per_request"] {
        assert!(s.contains(k), "{k}: {s}");
    }
    // Auto runs the local side every time here and samples the cache state rarely.
    let spr: f64 =
        s.split("samples_per_request ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!(spr < 0.5, "{s}");
}
