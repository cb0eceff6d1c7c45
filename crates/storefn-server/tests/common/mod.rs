//! Test helpers: a self-deleting directory with a BPF-KV database, a server on loopback.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use storefn_kv::format::NodeSize;
use storefn_server::{Server, ServerConfig};
use storefn_wire::{Client, ClientConfig};

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
