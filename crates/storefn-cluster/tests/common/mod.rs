//! Shared by the cluster tests: storage servers run as child processes of the test binary
//! (so a test can kill -9 one), optionally inside network namespaces the test creates; every
//! process is killed and every directory and namespace removed on drop, even when the test
//! fails.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use storefn_cluster::{Creds, Etcd, NodeAgent, NodeConfig};
use storefn_server::{Server, ServerConfig};

/// The environment a child server reads.
pub const CHILD_ENV: &str = "STOREFN_CLUSTER_CHILD";

/// Runs a server when the test binary was started as a child (see [`ServerProc::start`]);
/// otherwise returns at once. Each test file has a `#[test] fn child_serve()` calling this.
pub fn child_main() {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let f: Vec<&str> = spec.split('|').collect();
    let (dir, listen, etcd, node, advertise) = (f[0], f[1], f[2], f[3], f[4]);
    // A sixth field: a token file the server requires (and its leader copies with).
    let tokens = f.get(5).filter(|t| !t.is_empty()).map(std::path::Path::new);
    let agent = NodeAgent::start(NodeConfig {
        endpoints: etcd.into(),
        id: node.into(),
        advertise: advertise.into(),
        dir: dir.into(),
        creds: tokens.map_or_else(Creds::default, |t| Creds::from_token_file(t).expect("tokens")),
    })
    .expect("agent");
    let mut cfg = ServerConfig::new(std::path::Path::new(dir));
    if let Some(t) = tokens {
        cfg.tokens = Some(storefn_server::load_tokens(t).expect("tokens"));
    }
    cfg.fence = Some(agent.fence());
    let server = Server::start(listen, cfg).expect("server");
    println!("child ready {}", server.local_addr());
    // The parent kills us (SIGKILL, or SIGTERM for a clean leave: the agent's drop revokes).
    let stop = std::path::Path::new(dir).join(".stop");
    while !stop.exists() {
        std::thread::sleep(Duration::from_millis(20));
    }
    agent.leave();
    server.stop();
    let _ = server.join();
    std::process::exit(0);
}

/// Whether we may make namespaces; prints `skipped:` otherwise.
pub fn privileged(why: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 && std::path::Path::new("/usr/bin/etcd").exists() {
        return true;
    }
    storefn_testkit::skip(&format!("needs root and etcd ({why})"));
    false
}

pub fn ip(args: &[&str]) {
    let o = Command::new("ip").args(args).output().expect("ip(8)");
    assert!(o.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

/// A temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(
            format!("storefn-cluster-{tag}-{}-{:?}", std::process::id(), Instant::now())
                .replace([' ', '{', '}', ':', ','], ""),
        );
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A storage server in a child process.
pub struct ServerProc {
    pub node: String,
    /// Where clients reach it.
    pub addr: String,
    pub dir: TempDir,
    child: Option<Child>,
}

impl ServerProc {
    /// Starts server `node` serving a fresh directory, listening on `listen` (`ip:port`), in
    /// namespace `netns` when given; waits for its ready line.
    pub fn start(
        test: &str,
        node: &str,
        listen: &str,
        etcd: &str,
        netns: Option<&str>,
    ) -> ServerProc {
        Self::start_with_tokens(test, node, listen, etcd, netns, None)
    }

    /// [`ServerProc::start`], the server requiring the tokens of `tokens` (a token file).
    pub fn start_with_tokens(
        test: &str,
        node: &str,
        listen: &str,
        etcd: &str,
        netns: Option<&str>,
        tokens: Option<&std::path::Path>,
    ) -> ServerProc {
        let dir = TempDir::new(node);
        let exe = std::env::current_exe().unwrap();
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&exe);
                c
            }
            None => Command::new(&exe),
        };
        let tokens = tokens.map(|t| t.display().to_string()).unwrap_or_default();
        let spec = format!("{}|{listen}|{etcd}|{node}|{listen}|{tokens}", dir.0.display());
        let log = std::fs::File::create(dir.0.join("log")).unwrap();
        let child = cmd
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, spec)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let mut s = ServerProc { node: node.into(), addr: listen.into(), dir, child: Some(child) };
        s.wait_ready();
        s
    }

    fn wait_ready(&mut self) {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(30) {
            let log = std::fs::read_to_string(self.dir.0.join("log")).unwrap_or_default();
            if log.contains("child ready") {
                return;
            }
            if let Some(Ok(Some(st))) = self.child.as_mut().map(Child::try_wait) {
                panic!("server {} exited {st}: {log}", self.node);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("server {} not ready", self.node);
    }

    /// The child's pid (while it runs).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// kill -9.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// A clean stop (the agent leaves: its lease is revoked).
    pub fn stop_clean(&mut self) {
        std::fs::write(self.dir.0.join(".stop"), b"").unwrap();
        if let Some(mut c) = self.child.take() {
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(10) {
                if matches!(c.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.0.join("log")).unwrap_or_default()
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Namespaces `sfc<pid>-<i>`, each joined to the root namespace by two veth pairs: a data link
/// on one bridge (clients and the other servers reach server i at 10.231.0.(10+i)) and a
/// control link (server i reaches etcd at 10.232.i.1), so a test can cut a server off etcd while
/// clients still reach it.
pub struct Netns {
    pub names: Vec<String>,
    links: Vec<String>,
    _one_at_a_time: std::sync::MutexGuard<'static, ()>,
}

/// Netns tests share addresses: one at a time.
static NET_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Netns {
    pub fn new(n: usize) -> Netns {
        let id = std::process::id() % 10_000;
        let lock = NET_LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut net = Netns { names: Vec::new(), links: Vec::new(), _one_at_a_time: lock };
        let br = format!("sfc{id}br");
        ip(&["link", "add", &br, "type", "bridge"]);
        net.links.push(br.clone());
        ip(&["addr", "add", "10.231.0.1/24", "dev", &br]);
        ip(&["link", "set", &br, "up"]);
        for i in 1..=n {
            let ns = format!("sfc{id}-{i}");
            ip(&["netns", "add", &ns]);
            net.names.push(ns.clone());
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
            let (host, inner) = (format!("sfc{id}d{i}h"), format!("sfc{id}d{i}n"));
            ip(&["link", "add", &host, "type", "veth", "peer", "name", &inner]);
            net.links.push(host.clone());
            ip(&["link", "set", &inner, "netns", &ns]);
            ip(&["link", "set", &host, "master", &br]);
            ip(&["-n", &ns, "addr", "add", &format!("{}/24", Self::data_ip(i)), "dev", &inner]);
            ip(&["link", "set", &host, "up"]);
            ip(&["-n", &ns, "link", "set", &inner, "up"]);
            let (host, inner) = (format!("sfc{id}c{i}h"), format!("sfc{id}c{i}n"));
            ip(&["link", "add", &host, "type", "veth", "peer", "name", &inner]);
            net.links.push(host.clone());
            ip(&["link", "set", &inner, "netns", &ns]);
            ip(&["addr", "add", &format!("10.232.{i}.1/24"), "dev", &host]);
            ip(&["-n", &ns, "addr", "add", &format!("10.232.{i}.2/24"), "dev", &inner]);
            ip(&["link", "set", &host, "up"]);
            ip(&["-n", &ns, "link", "set", &inner, "up"]);
        }
        net
    }

    /// Clients reach server i (1-based) here.
    pub fn data_ip(i: usize) -> String {
        format!("10.231.0.{}", 10 + i)
    }
    /// Server i reaches etcd here (the root namespace's end of its control link).
    pub fn control_ip(i: usize) -> String {
        format!("10.232.{i}.1")
    }

    /// Cuts (or restores) server i's link to etcd.
    pub fn control_link(&self, i: usize, up: bool) {
        let id = std::process::id() % 10_000;
        ip(&["link", "set", &format!("sfc{id}c{i}h"), if up { "up" } else { "down" }]);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for ns in &self.names {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        for l in &self.links {
            // The veths went with their namespaces; only the bridge is left (quietly).
            let _ = Command::new("ip").args(["link", "del", l]).stderr(Stdio::null()).status();
        }
    }
}

/// Polls `f` every 50 ms until it holds or `limit` passes; the time it took.
pub fn wait_for(limit: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if f() {
            return Some(t0.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// The etcd connection of a test.
pub fn etcd(addr: &str) -> Etcd {
    Etcd::connect(addr).expect("etcd")
}

/// A three-member etcd, each member in its own namespace on the data bridge of a [`Netns`]
/// (member j at 10.231.0.(100+j), client port 2379, peer port 2380): servers and the test
/// reach every member; a test may kill -9 one. Members are killed and their data directories
/// removed on drop; the namespaces and links go with the [`Netns`] they were added to.
pub struct EtcdMembers {
    children: Vec<Option<Child>>,
    pub ips: Vec<String>,
    pub dir: TempDir,
}

impl Netns {
    /// Adds `n` namespaces `sfc<pid>-e<j>` on the data bridge for etcd members; their IPs.
    pub fn add_etcd_namespaces(&mut self, n: usize) -> Vec<(String, String)> {
        let id = std::process::id() % 10_000;
        let br = format!("sfc{id}br");
        (1..=n)
            .map(|j| {
                let ns = format!("sfc{id}-e{j}");
                ip(&["netns", "add", &ns]);
                self.names.push(ns.clone());
                ip(&["-n", &ns, "link", "set", "lo", "up"]);
                let (host, inner) = (format!("sfc{id}e{j}h"), format!("sfc{id}e{j}n"));
                ip(&["link", "add", &host, "type", "veth", "peer", "name", &inner]);
                self.links.push(host.clone());
                ip(&["link", "set", &inner, "netns", &ns]);
                ip(&["link", "set", &host, "master", &br]);
                let addr = format!("10.231.0.{}", 100 + j);
                ip(&["-n", &ns, "addr", "add", &format!("{addr}/24"), "dev", &inner]);
                ip(&["link", "set", &host, "up"]);
                ip(&["-n", &ns, "link", "set", &inner, "up"]);
                (ns, addr)
            })
            .collect()
    }
}

impl EtcdMembers {
    /// Starts a three-member etcd in three new namespaces of `net`; waits until it is healthy.
    pub fn start(net: &mut Netns) -> EtcdMembers {
        let spots = net.add_etcd_namespaces(3);
        let dir = TempDir::new("etcd3");
        let peers: Vec<String> = spots
            .iter()
            .enumerate()
            .map(|(j, (_, a))| format!("m{}=http://{a}:2380", j + 1))
            .collect();
        let mut m = EtcdMembers {
            children: Vec::new(),
            ips: spots.iter().map(|s| s.1.clone()).collect(),
            dir,
        };
        for (j, (ns, a)) in spots.iter().enumerate() {
            let log = std::fs::File::create(m.dir.0.join(format!("m{}.log", j + 1))).unwrap();
            let (c, p) = (format!("http://{a}:2379"), format!("http://{a}:2380"));
            let child = Command::new("ip")
                .args(["netns", "exec", ns, storefn_testkit::etcd::ETCD_BIN])
                .arg(format!("--name=m{}", j + 1))
                .arg(format!("--data-dir={}", m.dir.0.join(format!("m{}", j + 1)).display()))
                .arg(format!("--listen-client-urls={c}"))
                .arg(format!("--advertise-client-urls={c}"))
                .arg(format!("--listen-peer-urls={p}"))
                .arg(format!("--initial-advertise-peer-urls={p}"))
                .arg(format!("--initial-cluster={}", peers.join(",")))
                .arg("--initial-cluster-state=new")
                .arg(format!("--initial-cluster-token=sfc{}", std::process::id()))
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap();
            m.children.push(Some(child));
        }
        let healthy = wait_for(Duration::from_secs(30), || {
            Etcd::connect(&m.endpoints())
                .and_then(|e| e.put("/storefn-test/up", b"1", None))
                .is_ok()
        });
        assert!(healthy.is_some(), "3-member etcd not healthy: {}", m.logs());
        m
    }

    /// Every member's client address, comma-separated.
    pub fn endpoints(&self) -> String {
        self.ips.iter().map(|a| format!("{a}:2379")).collect::<Vec<_>>().join(",")
    }

    /// kill -9 of member `j` (0-based).
    pub fn kill9(&mut self, j: usize) {
        if let Some(mut c) = self.children[j].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn logs(&self) -> String {
        (1..=self.ips.len())
            .map(|j| {
                std::fs::read_to_string(self.dir.0.join(format!("m{j}.log"))).unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join("\n---\n")
    }
}

impl Drop for EtcdMembers {
    fn drop(&mut self) {
        for j in 0..self.children.len() {
            self.kill9(j);
        }
    }
}
