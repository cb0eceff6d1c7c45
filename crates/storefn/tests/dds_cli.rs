//! `storefn ring bench`, `storefn dds table-bench` and `storefn prog verify --type offload`:
//! the DDS pieces reachable from the command line, with the JSON keys the issue names.

use std::path::PathBuf;
use std::process::Command;

fn storefn() -> Command {
    Command::new(env!("CARGO_BIN_EXE_storefn"))
}

fn temp_json(tag: &str) -> PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("storefn-dds-cli-{tag}-{}.json", std::process::id()))
}

#[test]
fn ring_bench_writes_one_record_per_ring_and_producer_count() {
    let json = temp_json("ring");
    let out = storefn()
        .args([
            "ring",
            "bench",
            "--producers",
            "1,2",
            "--messages",
            "4000",
            "--rounds",
            "1",
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("summary: producers=2 progressive/mutex="), "{stdout}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).unwrap();
    let recs = v.as_array().unwrap();
    assert_eq!(recs.len(), 6);
    for ring in ["progressive", "mutex", "flag"] {
        for producers in [1, 2] {
            let r = recs
                .iter()
                .find(|r| r["ring"] == ring && r["producers"] == producers)
                .unwrap_or_else(|| panic!("no record for {ring} x {producers}"));
            assert!(r["ops_per_sec"].as_f64().unwrap() > 0.0);
        }
    }
}

#[test]
fn ring_bench_rejects_an_unknown_ring() {
    let out = storefn().args(["ring", "bench", "--ring", "spsc"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("--ring spsc: expected one of progressive|mutex|flag"));
}

#[test]
fn table_bench_reports_inserts_and_lookups() {
    let json = temp_json("table");
    let out = storefn()
        .args([
            "dds",
            "table-bench",
            "--capacity",
            "20000",
            "--readers",
            "1,2",
            "--duration-ms",
            "50",
        ])
        .args(["--rounds", "1", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).unwrap();
    let recs = v.as_array().unwrap();
    assert_eq!(recs.len(), 3);
    assert_eq!(recs[0]["workload"], "insert");
    assert_eq!(recs[0]["items"], 16000);
    for (r, readers) in recs[1..].iter().zip([1, 2]) {
        assert_eq!(
            (r["workload"].as_str(), r["readers"].as_u64()),
            (Some("lookup"), Some(readers))
        );
        assert!(r["ops_per_sec"].as_f64().unwrap() > 0.0);
        assert!(r["hit_share"].as_f64().unwrap() > 0.5, "{r}");
    }
}

#[test]
fn offload_programs_verify_from_the_cli() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("dds-cli-prog-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let obj = dir.join("pageserver.o");
    std::fs::write(&obj, storefn_progs::must("dds/pageserver")).unwrap();
    for section in ["offload/pred", "offload/func", "offload/cache", "offload/invalidate"] {
        let out = storefn()
            .args(["prog", "verify"])
            .arg(&obj)
            .args(["--type", "offload", "--section", section])
            .output()
            .unwrap();
        assert!(out.status.success(), "{section}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stdout).starts_with("ok: "));
    }
    // As an XRP program the table helpers are unknown.
    let out = storefn()
        .args(["prog", "verify"])
        .arg(&obj)
        .args(["--section", "offload/pred"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn host_bench_compares_the_ring_path_with_pread() {
    let json = temp_json("host");
    let out = storefn()
        .args([
            "dds",
            "host-bench",
            "--file-mb",
            "1",
            "--ops",
            "300",
            "--depth",
            "8",
            "--rounds",
            "1",
        ])
        .arg("--dir")
        .arg(env!("CARGO_TARGET_TMPDIR"))
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("summary: host-sync p50"));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).unwrap();
    let cases: Vec<&str> =
        v.as_array().unwrap().iter().map(|r| r["case"].as_str().unwrap()).collect();
    assert_eq!(cases, ["pread", "host-sync", "host-async"]);
    for r in v.as_array().unwrap() {
        assert!(
            r["ops_per_sec"].as_f64().unwrap() > 0.0 && r["p50_us"].as_f64().unwrap() > 0.0,
            "{r}"
        );
    }
    assert_eq!(v[2]["depth"], 8);
}

/// `storefn pageserver bench --spawn`: server, host application and load on loopback, with
/// the issue's JSON keys; no stale page, both paths used with offload on, none offloaded off.
#[test]
fn pageserver_bench_spawn_reports_the_issue_keys() {
    for (mode, offloaded) in [("on", true), ("off", false)] {
        let json = temp_json(&format!("pageserver-{mode}"));
        let out = storefn()
            .args(["pageserver", "bench", "--spawn", "--offload", mode, "--pages", "256"])
            .args(["--requests", "600", "--warmup", "100", "--json"])
            .arg(&json)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        std::fs::remove_file(&json).unwrap();
        for k in [
            "offload",
            "requests",
            "offloaded_share",
            "host_cpu_us_per_op",
            "p50_us",
            "p99_us",
            "stale_pages",
        ] {
            assert!(v.get(k).is_some(), "{mode}: no key {k} in {v}");
        }
        assert_eq!(v["stale_pages"], 0);
        assert_eq!(v["requests"], 600);
        assert_eq!(v["offload"], offloaded);
        let share = v["offloaded_share"].as_f64().unwrap();
        if offloaded {
            assert!(share > 0.5 && share < 1.0, "{mode}: share {share}");
        } else {
            assert_eq!(share, 0.0);
        }
        // The time split: forwarded requests (both modes) have ring, host and device parts,
        // offloaded ones (only with offload) a device part; each p50 <= its p99, and a
        // forwarded request's parts fit in its latency.
        let num = |k: &str| v[k].as_f64();
        let mut parts = vec!["forwarded_ring", "forwarded_host", "forwarded_device"];
        if offloaded {
            parts.push("offloaded_device");
        } else {
            assert!(v["offloaded_device_p50_us"].is_null(), "{mode}: {v}");
        }
        for part in parts {
            let (p50, p99) = (num(&format!("{part}_p50_us")), num(&format!("{part}_p99_us")));
            let (p50, p99) = (p50.unwrap_or(-1.0), p99.unwrap_or(-1.0));
            assert!(p50 >= 0.0 && p50 <= p99, "{mode}: {part} p50 {p50} p99 {p99}");
        }
        assert!(num("forwarded_device_p50_us").unwrap() > 0.0, "{mode}: no device time: {v}");
        let sum: f64 =
            ["forwarded_ring_p50_us", "forwarded_host_p50_us", "forwarded_device_p50_us"]
                .iter()
                .map(|k| num(k).unwrap())
                .sum();
        // Medians of parts are not parts of the median; 3x bounds them without a flaky edge.
        assert!(sum <= 3.0 * num("forwarded_p99_us").unwrap(), "{mode}: split {sum} vs {v}");
    }
}

/// Processes whose command line contains every one of `words`.
fn processes_with(words: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else { continue };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if words.iter().all(|w| cmd.contains(w)) {
            found.push(cmd);
        }
    }
    found
}

/// `--spawn` runs the host application as a separate process (`storefn pageserver host`,
/// which reports on its own stderr), stops it after the run, and reaps it on an error path too
/// (here: the page server cannot start on a missing directory after the host connected).
#[test]
fn pageserver_spawn_runs_and_reaps_a_separate_host_process() {
    let out = storefn()
        .args(["pageserver", "bench", "--spawn", "--pages", "64", "--requests", "200"])
        .args(["--warmup", "20", "--seed", "424242"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("storefn pageserver host: 64 pages stored"), "no host process: {err}");
    assert!(err.contains("storefn pageserver host: stopped"), "host not stopped cleanly: {err}");
    assert!(processes_with(&["pageserver", "host", "424242"]).is_empty());

    let missing = std::env::temp_dir().join(format!("storefn-no-such-dir-{}", std::process::id()));
    let out = storefn()
        .args(["pageserver", "bench", "--spawn", "--pages", "64", "--requests", "200"])
        .args(["--seed", "525252", "--dir"])
        .arg(&missing)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a missing directory must fail: {err}");
    assert!(err.contains("start the page server"), "{err}");
    let left = processes_with(&["pageserver", "host", "525252"]);
    assert!(left.is_empty(), "host process left behind: {left:?}");
}

/// `--threads N` runs the spawned page server on N threads (JSON key `threads`; client
/// threads are `clients`); no stale page with answers relayed by two threads.
#[test]
fn pageserver_bench_spawn_runs_on_two_server_threads() {
    let json = temp_json("pageserver-threads");
    let out = storefn()
        .args(["pageserver", "bench", "--spawn", "--threads", "2", "--clients", "4"])
        .args(["--pages", "64", "--requests", "800", "--warmup", "50", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).unwrap();
    assert_eq!((v["threads"].as_u64(), v["clients"].as_u64()), (Some(2), Some(4)), "{v}");
    assert_eq!(v["stale_pages"], 0);
    assert_eq!(v["requests"], 800);
}

/// The page server has no unauthenticated mode unless asked for by name.
#[test]
fn pageserver_serve_needs_a_token_file_or_insecure_no_auth() {
    let out = storefn()
        .args(["pageserver", "serve", "--dir", "/nonexistent", "--channel", "/nonexistent/s"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--token-file"), "{err}");
}

/// Kills and reaps the child processes it holds when dropped (every path of a test).
struct Procs(Vec<std::process::Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `pageserver serve` with a token file and two `pageserver host` processes one after the
/// other: a client without the token is refused; the bench authenticates with it; after the
/// first host is killed, a second host attaches to the running server and the bench runs
/// again (before, the server had to be restarted: the new host's handoff timed out).
#[test]
fn pageserver_serve_authenticates_and_takes_a_new_host_after_the_first_dies() {
    use std::io::BufRead;
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("storefn-dds-cli-reattach-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("data")).unwrap();
    let (tokens, sock) = (dir.join("tokens"), dir.join("host.sock"));
    std::fs::write(&tokens, "tenant1 0123456789abcdef0123456789\n").unwrap();
    let mut procs = Procs(Vec::new());
    let mut serve = storefn()
        .args(["pageserver", "serve", "--listen", "127.0.0.1:0", "--dir"])
        .arg(dir.join("data"))
        .arg("--channel")
        .arg(&sock)
        .arg("--token-file")
        .arg(&tokens)
        .args(["--metrics", "127.0.0.1:0", "--log-format", "json"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let err = serve.stderr.take().unwrap();
    procs.0.push(serve);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let wait_for = |what: &str| -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while let Ok(l) = rx.recv_timeout(deadline - std::time::Instant::now()) {
            if l.contains(what) {
                return l;
            }
        }
        panic!("pageserver serve never said `{what}`");
    };
    let host = |seed: &str| {
        storefn()
            .args(["pageserver", "host", "--pages", "64", "--updates-per-sec", "100", "--seed"])
            .arg(seed)
            .arg("--channel")
            .arg(&sock)
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    while !sock.exists() {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    procs.0.push(host("1"));
    let line = wait_for("listening on ");
    let addr = line.split("listening on ").nth(1).unwrap().split(' ').next().unwrap().to_string();
    let line = wait_for("metrics on http://");
    let metrics = line.split("http://").nth(1).unwrap().trim_end_matches("/metrics").to_string();
    // One sample of the metrics endpoint (loopback), by its exact series.
    let sample = |series: &str| -> f64 {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(&metrics).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        body.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')))
            .map_or(0.0, |v| v.parse().unwrap())
    };
    let bench = |token: bool| {
        let mut c = storefn();
        c.args(["pageserver", "bench", "--remote", &addr, "--requests", "300", "--warmup", "20"]);
        if token {
            c.arg("--token-file").arg(&tokens);
        }
        c.output().unwrap()
    };
    let out = bench(false);
    assert!(!out.status.success(), "a client without the token was served");
    let out = bench(true);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("stale_pages=0"));
    // The bench as the operator sees it: JSON log lines and metrics.
    let authed = wait_for(r#""event":"authenticated""#);
    let v: serde_json::Value = serde_json::from_str(&authed).unwrap();
    assert_eq!(v["tenant"], "tenant1", "{authed}");
    assert!(v["peer"].as_str().unwrap().starts_with("127.0.0.1:"), "{authed}");
    assert_eq!(sample("storefn_dds_host_alive"), 1.0);
    let offload = r#"storefn_requests_total{op="OFFLOAD",status="OK",tenant="tenant1"}"#;
    assert!(sample(offload) >= 300.0, "the bench's GetPages under its tenant");
    // The first host dies; once its heartbeat has been still for a second, a new one attaches.
    let mut first = procs.0.remove(1);
    first.kill().unwrap();
    first.wait().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(sample("storefn_dds_host_alive"), 0.0, "the dead host shows as dead");
    procs.0.push(host("2"));
    wait_for("a new host application attached");
    let out = bench(true);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("stale_pages=0"));
    drop(procs);
    std::fs::remove_dir_all(&dir).unwrap();
}
