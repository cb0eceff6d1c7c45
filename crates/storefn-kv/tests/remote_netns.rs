//! Across hosts: the server in one network namespace, the client in another, joined by a veth
//! pair with addresses private to these namespaces (created and removed by this test; root).
//! Remote lookups on both paths agree with the values `create` wrote.

mod common;

use std::process::Command;
use std::sync::mpsc;

use common::{make_db, TempDir};
use storefn_kv::bpfkv_value;
use storefn_kv::{RemoteKv, RemotePath};
use storefn_server::{Server, ServerConfig};
use storefn_wire::{Client, ClientConfig};

/// Skips (or fails under STOREFN_REQUIRE_PRIVILEGED=1) when not root.
fn privileged(why: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    storefn_testkit::skip(&format!("needs root ({why})"));
    false
}

fn ip(args: &[&str]) {
    let o = Command::new("ip").args(args).output().expect("ip(8)");
    assert!(o.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

/// Two namespaces and a veth pair between them; removed on drop (the veth goes with them).
struct Net {
    a: String,
    b: String,
}

impl Net {
    fn new() -> Net {
        let id = std::process::id();
        let net = Net { a: format!("sfn-srv-{id}"), b: format!("sfn-cli-{id}") };
        let (va, vb) = (format!("sfa{}", id % 100_000), format!("sfb{}", id % 100_000));
        ip(&["netns", "add", &net.a]);
        ip(&["netns", "add", &net.b]);
        ip(&["link", "add", &va, "type", "veth", "peer", "name", &vb]);
        ip(&["link", "set", &va, "netns", &net.a]);
        ip(&["link", "set", &vb, "netns", &net.b]);
        ip(&["-n", &net.a, "addr", "add", "10.213.7.1/30", "dev", &va]);
        ip(&["-n", &net.b, "addr", "add", "10.213.7.2/30", "dev", &vb]);
        for (ns, v) in [(&net.a, &va), (&net.b, &vb)] {
            ip(&["-n", ns, "link", "set", v, "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        net
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// Moves the calling thread into namespace `ns`.
fn enter(ns: &str) {
    let f = std::fs::File::open(format!("/run/netns/{ns}")).unwrap();
    // SAFETY: setns on a namespace fd we opened; affects only this thread.
    let r = unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&f), libc::CLONE_NEWNET) };
    assert_eq!(r, 0, "setns {ns}: {}", std::io::Error::last_os_error());
}

#[test]
fn lookups_across_network_namespaces() {
    if !privileged("ip netns and veth") {
        return;
    }
    let dir = TempDir::new("netns");
    make_db(&dir, 3);
    let net = Net::new();
    let (addr_tx, addr_rx) = mpsc::channel();
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let (srv_ns, root) = (net.a.clone(), dir.path().to_path_buf());
    // The server thread (and the workers it spawns) live in namespace a.
    let server = std::thread::spawn(move || {
        enter(&srv_ns);
        let mut cfg = ServerConfig::new(&root);
        cfg.threads = 2;
        let s = Server::start("10.213.7.1:0", cfg).unwrap();
        addr_tx.send(s.local_addr()).unwrap();
        let _ = stop_rx.recv_timeout(std::time::Duration::from_secs(120));
        s.stop();
        s.join().unwrap();
    });
    let addr = addr_rx.recv().unwrap();
    let cli_ns = net.b.clone();
    let client = std::thread::spawn(move || {
        enter(&cli_ns);
        let n = 31u64.pow(3);
        let keys: Vec<u64> = (0..300).map(|i| (i * 104_729) % n).collect();
        for path in [RemotePath::RpcRead, RemotePath::Pushdown] {
            let c = Client::connect(&addr.to_string(), ClientConfig::default()).unwrap();
            let mut kv = RemoteKv::open(c, "db", 1).unwrap();
            let got = kv.get_many(&keys, path).unwrap();
            for (k, v) in keys.iter().zip(got) {
                assert_eq!(v, Some(bpfkv_value(*k)), "{path:?} key {k}");
            }
        }
    });
    let r = client.join();
    stop_tx.send(()).unwrap();
    server.join().unwrap();
    drop(net);
    r.unwrap();
}
