//! `storefn serve` as a process: remote `kv get|multiget|bench` against it, clean shutdown on
//! SIGTERM, and a server killed mid-request (clients fail within their timeout, no hang) then
//! restarted (clients reconnect). Loopback only; bounded loops.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use storefn_kv::{RemoteKv, RemotePath};
use storefn_wire::{Client, ClientConfig};

mod common;
use common::{storefn, Dir};

fn dir(tag: &str) -> Dir {
    common::temp_dir("storefn-serve", tag)
}

/// A loopback port nobody listens on right now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A `storefn serve` child and its stderr lines.
struct Serve {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Serve {
    fn start(dir: &std::path::Path, addr: &str) -> Serve {
        Self::start_with(dir, addr, &[])
    }

    fn start_with(dir: &std::path::Path, addr: &str, extra: &[&str]) -> Serve {
        let mut child = Command::new(env!("CARGO_BIN_EXE_storefn"))
            .args(["serve", "--dir", dir.to_str().unwrap(), "--listen", addr, "--threads", "2"])
            .args(extra)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, rx) = mpsc::channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        let s = Serve { child, lines: rx };
        s.wait_for("listening on", Duration::from_secs(10));
        s
    }

    fn wait_for(&self, what: &str, limit: Duration) -> Vec<String> {
        let t0 = Instant::now();
        let mut seen = Vec::new();
        while t0.elapsed() < limit {
            if let Ok(l) = self.lines.recv_timeout(Duration::from_millis(100)) {
                let hit = l.contains(what);
                seen.push(l);
                if hit {
                    return seen;
                }
            }
        }
        panic!("no {what:?} from storefn serve within {limit:?}: {seen:?}");
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(i32::try_from(self.child.id()).unwrap(), sig) };
    }

    fn wait_exit(&mut self, limit: Duration) -> std::process::ExitStatus {
        let t0 = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(t0.elapsed() < limit, "storefn serve did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn remote_commands_match_local_ones_and_sigterm_stops_cleanly() {
    let d = dir("cli");
    let db = d.0.join("db");
    let (code, _, e) = storefn(&["kv", "create", db.to_str().unwrap(), "--layers", "3"]);
    assert_eq!(code, 0, "{e}");
    let addr = format!("127.0.0.1:{}", free_port());
    let mut s = Serve::start(&d.0, &addr);
    for key in ["0", "12345", "29790", "29791"] {
        let local = storefn(&["kv", "get", db.to_str().unwrap(), "--key", key]);
        for path in ["rpc-read", "pushdown"] {
            let remote = storefn(&[
                "kv",
                "get",
                "db",
                "--key",
                key,
                "--remote",
                &addr,
                "--path",
                path,
                "--cache-levels",
                "1",
            ]);
            assert_eq!(remote, local, "key {key} {path}");
        }
    }
    let local = storefn(&["kv", "multiget", db.to_str().unwrap(), "--random", "50", "--seed", "3"]);
    let remote = storefn(&[
        "kv", "multiget", "db", "--random", "50", "--seed", "3", "--remote", &addr, "--path",
        "pushdown",
    ]);
    assert_eq!(remote, local);
    let (code, _, e) =
        storefn(&["kv", "get", "../db", "--key", "1", "--remote", &addr, "--path", "pushdown"]);
    assert_ne!(code, 0);
    assert!(e.contains("OUTSIDE_ROOT"), "{e}");
    let json = d.0.join("b.json");
    let pid = s.child.id().to_string();
    let (code, out, e) = storefn(&[
        "kv",
        "bench",
        "db",
        "--remote",
        &addr,
        "--path",
        "pushdown",
        "--requests",
        "512",
        "--warmup",
        "48",
        "--batch",
        "8",
        "--server-pid",
        &pid,
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{e}");
    assert!(out.contains("round_trips_per_op="), "{out}");
    let j: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&json).unwrap().trim()).unwrap();
    assert_eq!(j["path"], "pushdown");
    // --batch 8: 8 lookups in flight, in frames of 8 / PIPELINE_FRAMES = 2 lookups.
    assert_eq!(j["round_trips_per_op"].as_f64().unwrap(), 0.5);
    assert!(j["rtt_us"].as_f64().unwrap() > 0.0);
    assert!(j["server_cpu_us_per_op"].as_f64().is_some(), "{j}");
    assert_eq!(j["ios_per_op"].as_f64().unwrap(), 4.0, "3 levels + the value block");
    s.signal(libc::SIGTERM);
    let seen = s.wait_for("stopped", Duration::from_secs(10));
    assert!(s.wait_exit(Duration::from_secs(10)).success(), "{seen:?}");
}

#[test]
fn server_killed_mid_request_then_restarted() {
    let d = dir("kill");
    let db = d.0.join("db");
    let (code, _, e) = storefn(&["kv", "create", db.to_str().unwrap(), "--layers", "3"]);
    assert_eq!(code, 0, "{e}");
    let addr = format!("127.0.0.1:{}", free_port());
    let mut s = Serve::start(&d.0, &addr);
    let timeout = Duration::from_secs(2);
    let cfg = ClientConfig { timeout, ..ClientConfig::default() };
    let mut kv = RemoteKv::open(Client::connect(&addr, cfg).unwrap(), "db", 1).unwrap();
    let keys: Vec<u64> = (0..64).map(|i| i * 401).collect();
    assert!(kv.get_many(&keys, RemotePath::Pushdown).unwrap().iter().all(Option::is_some));
    // Kill it while lookups are running on another thread.
    let (tx, rx) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        let mut n = 0;
        let t0 = Instant::now();
        // Bounded: stops at the first error, or after 30 s.
        while t0.elapsed() < Duration::from_secs(30) {
            match kv.get_many(&keys, RemotePath::Pushdown) {
                Ok(v) => {
                    assert!(v.iter().all(Option::is_some));
                    n += 1;
                    if n == 3 {
                        tx.send(()).unwrap();
                    }
                }
                Err(e) => return (kv, Instant::now(), e.to_string(), n),
            }
        }
        panic!("lookups never failed after the kill");
    });
    rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let killed_at = Instant::now();
    s.signal(libc::SIGKILL);
    let (mut kv, failed_at, err, _) = worker.join().unwrap();
    assert!(failed_at.duration_since(killed_at) <= timeout + Duration::from_secs(1), "{err}");
    let _ = s.wait_exit(Duration::from_secs(5));
    // While it is down: an error, not a hang.
    let t0 = Instant::now();
    assert!(kv.get(5, RemotePath::Pushdown).is_err());
    assert!(t0.elapsed() <= timeout + Duration::from_secs(1));
    // Restarted on the same address: the same client reconnects and re-loads its program.
    let _s2 = Serve::start(&d.0, &addr);
    let v = kv.get(5, RemotePath::Pushdown).unwrap().unwrap();
    assert_eq!(v, storefn_kv::bpfkv_value(5));
    assert!(kv.client().connects >= 2);
}

#[test]
fn metrics_endpoint_and_json_log_lines() {
    use std::io::{Read, Write};
    let d = dir("metrics");
    std::fs::write(d.0.join("f"), [3u8; 64]).unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut s = Serve::start_with(&d.0, &addr, &["--metrics", &metrics, "--log-format", "json"]);
    s.wait_for("metrics on http://", Duration::from_secs(10));
    let cfg = ClientConfig { tenant: "cli-tenant".into(), ..ClientConfig::default() };
    let mut c = Client::connect(&addr, cfg).unwrap();
    let read = storefn_wire::Request::Read { path: b"f", offset: 0, len: 8 };
    assert_eq!(c.one(&read).unwrap().data, [3u8; 8]);
    let missing = storefn_wire::Request::Read { path: b"nope", offset: 0, len: 8 };
    assert!(c.one(&missing).is_err());
    // Prometheus text over HTTP: the READ is counted under its tenant.
    let mut h = std::net::TcpStream::connect(&metrics).unwrap();
    h.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    h.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut body = String::new();
    h.read_to_string(&mut body).unwrap();
    assert!(body.starts_with("HTTP/1.1 200 OK"), "{body:.60}");
    let want = r#"storefn_requests_total{op="READ",status="OK",tenant="cli-tenant"} 1"#;
    assert!(body.lines().any(|l| l == want), "{want} in {body}");
    // One JSON object per line: the connection's events and the refused READ.
    let seen = s.wait_for("NOT_FOUND", Duration::from_secs(10));
    let events: Vec<serde_json::Value> = seen
        .iter()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    let has = |ev: &str| events.iter().any(|e| e["event"] == ev);
    assert!(has("connected") && has("hello"), "{seen:?}");
    let refused = events.iter().find(|e| e["event"] == "refused").expect("a refused line");
    assert_eq!(refused["tenant"], "cli-tenant");
    assert_eq!(refused["op"], "READ");
    assert_eq!(refused["status"], "NOT_FOUND");
    assert!(refused["peer"].as_str().unwrap().starts_with("127.0.0.1:"));
    assert!(!refused["reason"].as_str().unwrap().is_empty());
    s.signal(libc::SIGTERM);
    assert!(s.wait_exit(Duration::from_secs(10)).success());
}
