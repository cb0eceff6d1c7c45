//! A real etcd for the cluster tests: one member on loopback (or on an address of a network
//! namespace the test made), its data in a fresh temporary directory; stopped and the directory
//! removed when the guard drops, even when the test fails.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The Debian etcd-server binary the project's scripts install.
pub const ETCD_BIN: &str = "/usr/bin/etcd";
/// How long a member may take to answer its first request (it starts in well under a second).
pub const ETCD_START_TIMEOUT: Duration = Duration::from_secs(20);

/// A running single-member etcd.
#[derive(Debug)]
pub struct Etcd {
    child: Option<Child>,
    dir: PathBuf,
    /// `host:port` of the client URL (the first address it listens on).
    pub client_addr: String,
    /// Every address clients may use (one per listening IP).
    pub client_addrs: Vec<String>,
    peer_addr: String,
    /// `ip netns exec NS` prefix when started inside a namespace.
    netns: Option<String>,
}

/// A free loopback port (bound, then released: a race only with other binders).
#[must_use]
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(0)
}

impl Etcd {
    /// `None` (and the reason) when the etcd binary is missing: the caller skips.
    #[must_use]
    pub fn available() -> Option<String> {
        if std::path::Path::new(ETCD_BIN).exists() {
            None
        } else {
            Some(format!("{ETCD_BIN} missing (Debian etcd-server)"))
        }
    }

    /// Starts a member on `127.0.0.1`, waits until it answers. Panics (a test helper) when it
    /// does not start in [`ETCD_START_TIMEOUT`].
    #[must_use]
    pub fn start() -> Etcd {
        Self::start_at(&["127.0.0.1"], free_port(), free_port(), None)
    }

    /// Starts a member whose clients reach it on port `client` of every address in `ips`
    /// (its peer URL on the first), inside namespace `netns`.
    #[must_use]
    pub fn start_at(ips: &[&str], client: u16, peer: u16, netns: Option<&str>) -> Etcd {
        let ip = ips[0];
        let dir =
            std::env::temp_dir().join(format!("storefn-etcd-{}-{client}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("etcd temp dir");
        let mut e = Etcd {
            child: None,
            dir,
            client_addr: format!("{ip}:{client}"),
            client_addrs: ips.iter().map(|i| format!("{i}:{client}")).collect(),
            peer_addr: format!("{ip}:{peer}"),
            netns: netns.map(str::to_string),
        };
        e.spawn();
        e
    }

    fn spawn(&mut self) {
        let c: Vec<String> = self.client_addrs.iter().map(|a| format!("http://{a}")).collect();
        let (c, p) = (c.join(","), format!("http://{}", self.peer_addr));
        let mut cmd = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, ETCD_BIN]);
                c
            }
            None => Command::new(ETCD_BIN),
        };
        cmd.arg("--name=t")
            .arg(format!("--data-dir={}", self.dir.join("data").display()))
            .arg(format!("--listen-client-urls={c}"))
            .arg(format!("--advertise-client-urls={c}"))
            .arg(format!("--listen-peer-urls={p}"))
            .arg(format!("--initial-advertise-peer-urls={p}"))
            .arg(format!("--initial-cluster=t={p}"))
            .stdout(Stdio::null())
            .stderr(
                std::fs::File::create(self.dir.join("etcd.log")).map_or(Stdio::null(), Stdio::from),
            );
        self.child = Some(cmd.spawn().expect("spawn etcd"));
        self.wait_ready();
    }

    fn wait_ready(&mut self) {
        let t0 = Instant::now();
        while t0.elapsed() < ETCD_START_TIMEOUT {
            let ok = self.etcdctl(&["endpoint", "health"]).is_some(); // it reports on stderr
            if ok {
                return;
            }
            if let Some(Ok(Some(st))) = self.child.as_mut().map(Child::try_wait) {
                panic!("etcd exited ({st}); log: {}", self.log());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("etcd did not answer in {ETCD_START_TIMEOUT:?}; log: {}", self.log());
    }

    /// Runs `etcdctl --endpoints ADDR ARGS...` (in the namespace); its stdout when it succeeded.
    #[must_use]
    pub fn etcdctl(&self, args: &[&str]) -> Option<String> {
        let mut cmd = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "etcdctl"]);
                c
            }
            None => Command::new("etcdctl"),
        };
        let out = cmd
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints=http://{}", self.client_addr))
            .arg("--dial-timeout=2s")
            .args(args)
            .output()
            .ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The member's log so far.
    #[must_use]
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default()
    }

    /// Stops the member (SIGKILL: etcd's log is durable, so a kill is also its crash; the data
    /// stays) — for the restart tests.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the member again over its data (after [`Etcd::stop`]).
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
