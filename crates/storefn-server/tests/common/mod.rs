//! Test helpers: a self-deleting directory with a BPF-KV database, a server on loopback.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use storefn_kv::NodeSize;
use storefn_server::{Server, ServerConfig};
use storefn_wire::{Client, ClientConfig};

/// Writes `loop` in `dir`: two 512 B blocks, the second pointing at itself. `test/spin` spins to
/// its instruction budget on the first; `xrp_follow` never ends on its own from the second.
pub fn loop_file(dir: &Path) {
    let mut blocks = vec![0u8; 1024];
    blocks[512..520].copy_from_slice(&512u64.to_le_bytes());
    std::fs::write(dir.join("loop"), &blocks).unwrap();
}

/// One run of `test/spin` (loaded as `spin`) on `loop`'s first block, to its budget.
pub fn spin_request(spin: &[u8; storefn_wire::HASH_BYTES]) -> storefn_wire::Request<'_> {
    storefn_wire::Request::Xrp {
        path: b"loop",
        offset: 0,
        len: 512,
        hash: spin,
        scratch: &[],
        out_len: 0,
    }
}

/// A directory removed on drop (even when the test panics).
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        // Relaxed: only uniqueness of the counter value matters.
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("storefn-srv-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `DIR/db`: a BPF-KV tree of `layers` levels of 512 B nodes.
pub fn make_db(dir: &TempDir, layers: u32) -> PathBuf {
    let p = dir.join("db");
    storefn_kv::create_bpfkv(&p, NodeSize::B512, layers, &mut |_, _| {}).unwrap();
    p
}

pub fn serve(dir: &Path, threads: usize) -> Server {
    let mut cfg = ServerConfig::new(dir);
    cfg.threads = threads;
    Server::start("127.0.0.1:0", cfg).unwrap()
}

pub fn client(server: &Server) -> Client {
    Client::connect(&server.local_addr().to_string(), ClientConfig::default()).unwrap()
}

/// `GET /metrics` from a server's metrics endpoint: (status line, content type, body).
pub fn scrape_http(addr: std::net::SocketAddr, request: &str) -> (String, String, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").expect("an HTTP head");
    let status = head.lines().next().unwrap().to_string();
    let ctype =
        head.lines().find_map(|l| l.strip_prefix("Content-Type: ")).unwrap_or_default().to_string();
    (status, ctype, body.to_string())
}

/// The metrics text of a server started with `ServerConfig::metrics`, over HTTP.
pub fn scrape(server: &Server) -> String {
    let addr = server.metrics_addr().expect("started with a metrics endpoint");
    let (status, _, body) = scrape_http(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status, "HTTP/1.1 200 OK");
    body
}

/// One parsed sample line: name, labels, value.
pub type Sample = (String, Vec<(String, String)>, f64);

/// Parses Prometheus text format (0.0.4), panicking on any line that is not a comment
/// (`# HELP`, `# TYPE` of a known type) or a sample (`name{k="v",...} value`), and on a
/// sample whose family has no `# TYPE` line before it.
pub fn parse_metrics(text: &str) -> Vec<Sample> {
    let mut typed: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').expect("# TYPE name type");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped", "info"].contains(&ty),
                "type {ty:?} in {line:?}"
            );
            typed.push(name.to_string());
            continue;
        }
        if line.starts_with("# HELP ") || line.starts_with("# EOF") {
            continue;
        }
        assert!(!line.starts_with('#'), "unknown comment {line:?}");
        let (series, value) = line.rsplit_once(' ').expect("series value");
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|e| panic!("value {v:?} in {line:?}: {e}")),
        };
        let (name, labels) = match series.split_once('{') {
            None => (series.to_string(), Vec::new()),
            Some((n, l)) => {
                let l = l.strip_suffix('}').unwrap_or_else(|| panic!("labels of {line:?}"));
                let labels = l
                    .split(',')
                    .filter(|kv| !kv.is_empty())
                    .map(|kv| {
                        let (k, v) = kv.split_once('=').expect("k=v");
                        let v = v.strip_prefix('"').and_then(|v| v.strip_suffix('"'));
                        (k.to_string(), v.expect("quoted value").to_string())
                    })
                    .collect();
                (n.to_string(), labels)
            }
        };
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "name {name:?}"
        );
        let family_typed = typed.iter().any(|t| {
            name == *t
                || ["_total", "_bucket", "_sum", "_count"].iter().any(|s| name == format!("{t}{s}"))
        });
        assert!(family_typed, "{name} has no # TYPE line before it");
        out.push((name, labels, value));
    }
    out
}

/// The sum of the samples named `name` whose labels include every pair of `labels`.
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    parse_metrics(text)
        .into_iter()
        .filter(|(n, l, _)| {
            n == name && labels.iter().all(|(k, v)| l.iter().any(|(a, b)| a == k && b == v))
        })
        .map(|(_, _, v)| v)
        .sum()
}
