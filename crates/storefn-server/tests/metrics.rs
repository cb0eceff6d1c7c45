//! The metrics endpoint (`ServerConfig::metrics`, `--metrics`): Prometheus text that parses,
//! counters that move with the requests made, split by tenant, and an HTTP side that answers
//! only `GET /metrics`.

mod common;

use common::{make_db, metric, parse_metrics, scrape, scrape_http, TempDir};
use storefn_server::{Server, ServerConfig};
use storefn_wire::{Client, ClientConfig, Request, PROG_TYPE_XRP};

const SECRET_A: &str = "alice-secret-0123456789";
const SECRET_B: &str = "bob-secret-0123456789ab";

fn start(dir: &TempDir) -> Server {
    let tok = dir.join("tokens");
    std::fs::write(&tok, format!("alice {SECRET_A}\nbob {SECRET_B} ro\n")).unwrap();
    let mut cfg = ServerConfig::new(dir.path());
    cfg.tokens = Some(storefn_server::load_tokens(&tok).unwrap());
    cfg.metrics = Some("127.0.0.1:0".into());
    Server::start("127.0.0.1:0", cfg).unwrap()
}

fn connect(server: &Server, tenant: &str, secret: &str) -> Client {
    let cfg = ClientConfig::with_secret(tenant, secret);
    Client::connect(&server.local_addr().to_string(), cfg).unwrap()
}

#[test]
fn counters_move_with_requests_and_split_by_tenant() {
    let dir = TempDir::new("metrics");
    make_db(&dir, 3);
    let server = start(&dir);
    let before = scrape(&server);
    assert_eq!(metric(&before, "storefn_requests_total", &[("op", "READ")]), 0.0);
    let mut a = connect(&server, "alice", SECRET_A);
    let mut b = connect(&server, "bob", SECRET_B);
    for i in 0..5u64 {
        let r = a.one(&Request::Read { path: b"db", offset: i * 512, len: 512 }).unwrap();
        assert_eq!(r.data.len(), 512);
    }
    b.one(&Request::Read { path: b"db", offset: 0, len: 100 }).unwrap();
    assert!(b.one(&Request::Read { path: b"missing", offset: 0, len: 1 }).is_err());
    assert!(b.one(&Request::Write { path: b"db", offset: 0, data: b"x" }).is_err());
    // One pushed-down lookup for alice: a chain and program CPU on her account.
    let hash = a.load_prog(PROG_TYPE_XRP, b"", storefn_progs::must("kv_lookup")).unwrap();
    let key = 77u64.to_le_bytes();
    let xrp =
        Request::Xrp { path: b"db", offset: 0, len: 512, hash: &hash, scratch: &key, out_len: 160 };
    a.one(&xrp).unwrap();
    let m = scrape(&server);
    let req = |op: &str, st: &str, t: &str| {
        metric(&m, "storefn_requests_total", &[("op", op), ("status", st), ("tenant", t)])
    };
    assert_eq!(req("READ", "OK", "alice"), 5.0);
    assert_eq!(req("READ", "OK", "bob"), 1.0);
    assert_eq!(req("READ", "NOT_FOUND", "bob"), 1.0);
    assert_eq!(req("WRITE", "FORBIDDEN", "bob"), 1.0, "bob's token is read-only");
    assert_eq!(req("XRP", "OK", "alice"), 1.0);
    assert_eq!(req("AUTH", "OK", "alice") + req("AUTH", "OK", "bob"), 2.0);
    // HELLO is answered before AUTH proves the name: it counts as unauthenticated.
    assert_eq!(metric(&m, "storefn_requests_total", &[("op", "HELLO"), ("tenant", "-")]), 2.0);
    let bytes =
        |t: &str| metric(&m, "storefn_tenant_bytes_total", &[("dir", "read"), ("tenant", t)]);
    assert_eq!(bytes("alice"), 5.0 * 512.0);
    assert_eq!(bytes("bob"), 100.0);
    assert_eq!(metric(&m, "storefn_tenant_chains_total", &[("tenant", "alice")]), 1.0);
    assert_eq!(metric(&m, "storefn_tenant_chains_total", &[("tenant", "bob")]), 0.0);
    let insns = |t: &str| metric(&m, "storefn_tenant_instructions_total", &[("tenant", t)]);
    assert!(insns("alice") > 0.0, "the VM counted her chain's instructions");
    assert_eq!(insns("bob"), 0.0);
    let cpu = |t: &str| {
        metric(&m, "storefn_tenant_cpu_seconds_total", &[("work", "program"), ("tenant", t)])
    };
    assert!(cpu("alice") > 0.0, "alice's chain ran her program");
    assert_eq!(cpu("bob"), 0.0, "bob ran no program");
    let reads = metric(&m, "storefn_request_duration_seconds_count", &[("op", "READ")]);
    // The missing file's READ was refused before it became a job: six ran.
    assert_eq!(reads, 6.0, "every READ run has its latency");
    let inf =
        metric(&m, "storefn_request_duration_seconds_bucket", &[("op", "READ"), ("le", "+Inf")]);
    assert_eq!(inf, 6.0);
    assert_eq!(metric(&m, "storefn_connections", &[("state", "authenticated")]), 2.0);
    assert_eq!(metric(&m, "storefn_connections", &[("state", "unauthenticated")]), 0.0);
    assert_eq!(metric(&m, "storefn_programs_total", &[("event", "loaded")]), 1.0);
    assert_eq!(metric(&m, "storefn_programs_held", &[]), 1.0);
    assert!(metric(&m, "storefn_engine_files", &[("kind", "slots")]) >= 1.0);
    assert_eq!(metric(&m, "storefn_dds_host_alive", &[]), -1.0, "no DDS hook");
    assert!(metric(&m, "storefn_thread", &[("kind", "rx_buffer_bytes"), ("thread", "0")]) > 0.0);
    assert_eq!(metric(&m, "storefn_thread", &[("kind", "conns")]), 2.0);
    assert_eq!(metric(&m, "storefn_events_total", &[("event", "accepted")]), 2.0);
    // A wrong secret: an AUTH_FAILED under the unauthenticated label, an auth failure event.
    let bad = ClientConfig::with_secret("alice", "not-alice-secret-01234");
    assert!(Client::connect(&server.local_addr().to_string(), bad).is_err());
    std::thread::sleep(std::time::Duration::from_millis(100));
    let m = scrape(&server);
    let failed = &[("op", "AUTH"), ("status", "AUTH_FAILED"), ("tenant", "-")];
    assert_eq!(metric(&m, "storefn_requests_total", failed), 1.0);
    assert_eq!(metric(&m, "storefn_events_total", &[("event", "auth_failure")]), 1.0);
    drop((a, b));
    server.stop();
    server.join().unwrap();
}

#[test]
fn the_endpoint_answers_only_get_metrics_in_prometheus_text() {
    let dir = TempDir::new("metrics-http");
    let server = start(&dir);
    let addr = server.metrics_addr().unwrap();
    let (status, ctype, body) = scrape_http(addr, "GET /metrics HTTP/1.0\r\n\r\n");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(ctype.starts_with("text/plain; version=0.0.4"), "{ctype}");
    let samples = parse_metrics(&body);
    // Every family the design documents is there before any request.
    for family in [
        "storefn_connections",
        "storefn_events_total",
        "storefn_engine_files",
        "storefn_programs_held",
        "storefn_dds_host_alive",
        "storefn_thread",
        "storefn_tenant_cpu_seconds_total",
        "storefn_tenant_bytes_total",
        "storefn_tenant_chains_total",
        "storefn_tenant_instructions_total",
    ] {
        assert!(samples.iter().any(|(n, _, _)| n == family), "{family} in {body}");
    }
    // The token file's tenants have their labels; nobody else does.
    let tenants: std::collections::BTreeSet<String> = samples
        .iter()
        .flat_map(|(_, l, _)| l.iter().filter(|(k, _)| k == "tenant").map(|(_, v)| v.clone()))
        .collect();
    let want: std::collections::BTreeSet<String> =
        ["-", "_other", "alice", "bob"].iter().map(|s| (*s).to_string()).collect();
    assert_eq!(tenants, want);
    assert!(scrape_http(addr, "GET / HTTP/1.1\r\n\r\n").0.starts_with("HTTP/1.1 404"));
    assert!(scrape_http(addr, "POST /metrics HTTP/1.1\r\n\r\n").0.starts_with("HTTP/1.1 405"));
    let huge = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(8192));
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    use std::io::{Read, Write};
    let _ = s.write_all(huge.as_bytes());
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 431"), "an oversized head is refused: {out:.40}");
    // A scraper that connects and says nothing costs the endpoint its timeout, then the
    // next scrape is answered.
    let silent = std::net::TcpStream::connect(addr).unwrap();
    assert!(!scrape(&server).is_empty(), "answered after the silent one timed out");
    drop(silent);
    server.stop();
    server.join().unwrap();
}

#[test]
fn without_a_token_file_tenant_labels_are_bounded() {
    use storefn_server::metrics::MAX_METRIC_TENANTS;
    let dir = TempDir::new("metrics-names");
    std::fs::write(dir.join("f"), [1u8; 64]).unwrap();
    let mut cfg = ServerConfig::new(dir.path());
    cfg.metrics = Some("127.0.0.1:0".into());
    let server = Server::start("127.0.0.1:0", cfg).unwrap();
    let n = MAX_METRIC_TENANTS + 6;
    for i in 0..n {
        let cfg = ClientConfig { tenant: format!("t{i}"), ..ClientConfig::default() };
        let mut c = Client::connect(&server.local_addr().to_string(), cfg).unwrap();
        c.one(&Request::Read { path: b"f", offset: 0, len: 8 }).unwrap();
    }
    let m = scrape(&server);
    let reads = |t: &str| metric(&m, "storefn_requests_total", &[("op", "READ"), ("tenant", t)]);
    assert_eq!(reads("t0"), 1.0);
    assert_eq!(reads(&format!("t{}", MAX_METRIC_TENANTS - 1)), 1.0);
    assert_eq!(reads(&format!("t{MAX_METRIC_TENANTS}")), 0.0, "past the bound: no own label");
    assert_eq!(reads("_other"), 6.0);
    assert_eq!(metric(&m, "storefn_requests_total", &[("op", "READ")]), n as f64);
    server.stop();
    server.join().unwrap();
}

#[test]
fn program_cpu_and_chains_are_charged_to_the_tenant_that_ran_them() {
    let dir = TempDir::new("metrics-cpu");
    common::loop_file(dir.path());
    let server = start(&dir);
    let mut burner = connect(&server, "alice", SECRET_A);
    let mut reader = connect(&server, "bob", SECRET_B);
    let spin = burner.load_prog(PROG_TYPE_XRP, b"", storefn_progs::must("test/spin")).unwrap();
    let reqs: Vec<Request<'_>> = (0..8).map(|_| common::spin_request(&spin)).collect();
    let replies = burner.call(&reqs).unwrap();
    assert!(replies.iter().all(|r| r.status == storefn_wire::StatusCode::ChainFailed as u16));
    for _ in 0..20 {
        reader.one(&Request::Read { path: b"loop", offset: 0, len: 512 }).unwrap();
    }
    let m = scrape(&server);
    let cpu = |t: &str| {
        metric(&m, "storefn_tenant_cpu_seconds_total", &[("work", "program"), ("tenant", t)])
    };
    println!("program CPU: alice {:.6} s, bob {:.6} s", cpu("alice"), cpu("bob"));
    assert!(cpu("alice") > 0.0, "eight chains ran to their budget on alice's account");
    assert_eq!(cpu("bob"), 0.0, "reads run no program");
    assert_eq!(metric(&m, "storefn_tenant_chains_total", &[("tenant", "alice")]), 8.0);
    // Each chain ran to its tenant's budget: the VM's counts add up to about eight budgets.
    let budget = storefn_server::limits::DEFAULT_TENANT_INSN_BUDGET as f64;
    let insns = metric(&m, "storefn_tenant_instructions_total", &[("tenant", "alice")]);
    assert!(insns > 7.2 * budget && insns <= 8.0 * budget, "{insns} against 8 x {budget}");
    let failed = &[("op", "XRP"), ("status", "CHAIN_FAILED"), ("tenant", "alice")];
    assert_eq!(metric(&m, "storefn_requests_total", failed), 8.0);
    let read = metric(&m, "storefn_tenant_bytes_total", &[("dir", "read"), ("tenant", "bob")]);
    assert_eq!(read, 20.0 * 512.0);
    // Writes are answered after their sync, off the loop: their latency is sampled then.
    for k in 0..3u64 {
        let r = burner.one(&Request::Write { path: b"loop", offset: k, data: &[0] }).unwrap();
        assert_eq!(r.status, 0);
    }
    let m = scrape(&server);
    let writes = metric(&m, "storefn_request_duration_seconds_count", &[("op", "WRITE")]);
    assert_eq!(writes, 3.0, "every WRITE answered has its latency");
    server.stop();
    server.join().unwrap();
}
