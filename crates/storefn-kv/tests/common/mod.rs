//! Test helpers: a self-deleting temporary directory and BPF-KV's `create`, reimplemented
//! independently from its published algorithm (not from our builder).
#![allow(dead_code)]

#[allow(unused_imports)] // not every test binary skips
pub use storefn_testkit::skip;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A directory removed on drop (even when the test panics).
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        // Relaxed: only uniqueness of the counter value matters.
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("storefn-kv-{tag}-{}-{n}", std::process::id()));
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

/// `DIR/db`: a BPF-KV tree of `layers` levels of 512 B nodes.
pub fn make_db(dir: &TempDir, layers: u32) -> PathBuf {
    let p = dir.join("db");
    storefn_kv::create_bpfkv(&p, storefn_kv::NodeSize::B512, layers, &mut |_, _| {}).unwrap();
    p
}

/// A server on loopback over `dir` (the remote lookups' tests).
pub fn serve(dir: &Path, threads: usize) -> storefn_server::Server {
    let mut cfg = storefn_server::ServerConfig::new(dir);
    cfg.threads = threads;
    storefn_server::Server::start("127.0.0.1:0", cfg).unwrap()
}

/// A client of `server` without a token.
pub fn client(server: &storefn_server::Server) -> storefn_wire::Client {
    let addr = server.local_addr().to_string();
    storefn_wire::Client::connect(&addr, storefn_wire::ClientConfig::default()).unwrap()
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// BPF-KV's `create` for `layers` levels of 512 B nodes, written as its C code does it: a
/// running `next_pos` slot counter, `extent = max_key / layer_cap`, `sub_extent = extent / 31`,
/// internal pointers `encode(next_pos * 512)`, leaf pointers
/// `encode(total_node * 512 + (next_pos - total_node) * 64)`, then 8 values per 512 B block
/// formatted with "%63lu" until all max_key keys are covered.
#[allow(clippy::needless_range_loop)] // mirrors the C loop indices on purpose
pub fn reference_create(layers: u32) -> Vec<u8> {
    const CAP: u64 = 31;
    const MASK: u64 = 1 << 63;
    let layer_cap: Vec<u64> = (0..layers).map(|i| CAP.pow(i)).collect();
    let total_node: u64 = layer_cap.iter().sum();
    let max_key = CAP.pow(layers);
    let mut out = Vec::new();
    let mut next_pos: u64 = 1;
    let mut next_node_offset: u64 = 1;
    for i in 0..layers as usize {
        let extent = max_key / layer_cap[i];
        let mut start_key = 0;
        for j in 0..layer_cap[i] {
            let leaf = i == layers as usize - 1;
            let next = if j == layer_cap[i] - 1 { 0 } else { next_node_offset * 512 };
            let mut keys = Vec::new();
            let mut ptrs = Vec::new();
            let sub = extent / CAP;
            for k in 0..CAP {
                keys.push(start_key + k * sub);
                ptrs.push(if leaf {
                    MASK | (total_node * 512 + (next_pos - total_node) * 64)
                } else {
                    MASK | (next_pos * 512)
                });
                next_pos += 1;
            }
            out.extend_from_slice(&next.to_le_bytes());
            out.extend_from_slice(&u64::from(leaf).to_le_bytes());
            for k in keys {
                out.extend_from_slice(&k.to_le_bytes());
            }
            for p in ptrs {
                out.extend_from_slice(&p.to_le_bytes());
            }
            start_key += extent;
            next_node_offset += 1;
        }
    }
    let mut i = 0;
    while i < max_key {
        for j in 0..8 {
            let s = format!("{:>63}\0", i + j);
            out.extend_from_slice(s.as_bytes());
        }
        i += 8;
    }
    out
}

pub fn noop() -> impl FnMut(u64, u64) {
    |_, _| {}
}

pub fn file_bytes(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap()
}
