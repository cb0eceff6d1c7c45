//! The bench's processes and groups: an etcd and `storefn serve` children on loopback, each
//! server in its own cgroup v1 `cpu` group; each is stopped (kill -9) or removed on drop,
//! its temporary directory with it.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::layout::node_key;
use crate::{ClusterError, Etcd};

/// Debian's etcd-server.
const ETCD_BIN: &str = "/usr/bin/etcd";
/// Where the cgroup v1 cpu controller is mounted.
const CPU_CGROUP: &str = "/sys/fs/cgroup/cpu";
/// How long an etcd or a server may take to come up on a loaded machine.
const START_TIMEOUT: Duration = Duration::from_secs(30);

fn invalid(what: &str, e: &dyn std::fmt::Display) -> ClusterError {
    ClusterError::Invalid(format!("{what}: {e}"))
}

/// A temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Result<TempDir, ClusterError> {
        let p = std::env::temp_dir().join(format!("storefn-cbench-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).map_err(|e| invalid(&p.display().to_string(), &e))?;
        Ok(TempDir(p))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn free_port() -> Result<u16, ClusterError> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| invalid("a free loopback port", &e))
}

fn kill(c: &mut Option<Child>) {
    if let Some(mut c) = c.take() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// A one-member etcd on loopback with a temporary data directory.
pub struct EtcdChild {
    child: Option<Child>,
    pub endpoint: String,
    _dir: TempDir,
}

impl EtcdChild {
    pub fn start(tag: &str) -> Result<EtcdChild, ClusterError> {
        let dir = TempDir::new(&format!("{tag}-etcd"))?;
        let (client, peer) = (free_port()?, free_port()?);
        let (c, p) = (format!("http://127.0.0.1:{client}"), format!("http://127.0.0.1:{peer}"));
        let log =
            std::fs::File::create(dir.0.join("etcd.log")).map_err(|e| invalid("etcd log", &e))?;
        let child = Command::new(ETCD_BIN)
            .arg(format!("--name={tag}"))
            .arg(format!("--data-dir={}", dir.0.join("data").display()))
            .arg(format!("--listen-client-urls={c}"))
            .arg(format!("--advertise-client-urls={c}"))
            .arg(format!("--listen-peer-urls={p}"))
            .arg(format!("--initial-advertise-peer-urls={p}"))
            .arg(format!("--initial-cluster={tag}={p}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| invalid(ETCD_BIN, &e))?;
        let e =
            EtcdChild { child: Some(child), endpoint: format!("127.0.0.1:{client}"), _dir: dir };
        let t0 = Instant::now();
        while t0.elapsed() < START_TIMEOUT {
            if e.client().and_then(|c| c.get("/storefn/ping")).is_ok() {
                return Ok(e);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(ClusterError::Invalid(format!(
            "etcd at {} did not answer in {START_TIMEOUT:?}",
            e.endpoint
        )))
    }

    pub fn client(&self) -> Result<Etcd, ClusterError> {
        Etcd::connect(&self.endpoint)
    }
}

impl Drop for EtcdChild {
    fn drop(&mut self) {
        kill(&mut self.child);
    }
}

/// A `storefn serve` child joined to a cluster, on loopback.
pub struct ServerChild {
    pub node: String,
    child: Option<Child>,
    pid: u32,
    _dir: TempDir,
}

impl ServerChild {
    /// Starts `exe serve` as node `node`; ready once its node record is in etcd.
    pub fn start(exe: &Path, node: &str, etcd: &str) -> Result<ServerChild, ClusterError> {
        let dir = TempDir::new(node)?;
        let addr = format!("127.0.0.1:{}", free_port()?);
        let log =
            std::fs::File::create(dir.0.join("log")).map_err(|e| invalid("server log", &e))?;
        let child = Command::new(exe)
            .arg("serve")
            .arg("--dir")
            .arg(&dir.0)
            .args(["--listen", &addr, "--cluster", etcd, "--node", node, "--advertise", &addr])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| invalid(&exe.display().to_string(), &e))?;
        let pid = child.id();
        let mut s = ServerChild { node: node.into(), child: Some(child), pid, _dir: dir };
        let et = Etcd::connect(etcd)?;
        let t0 = Instant::now();
        while t0.elapsed() < START_TIMEOUT {
            if matches!(et.get(&node_key(node)), Ok(Some(_))) {
                return Ok(s);
            }
            if let Some(Ok(Some(st))) = s.child.as_mut().map(Child::try_wait) {
                let log = std::fs::read_to_string(s._dir.0.join("log")).unwrap_or_default();
                return Err(ClusterError::Invalid(format!("server {node} exited {st}: {log}")));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(ClusterError::Invalid(format!("server {node} did not register in {START_TIMEOUT:?}")))
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn kill9(&mut self) {
        kill(&mut self.child);
    }
}

impl Drop for ServerChild {
    fn drop(&mut self) {
        kill(&mut self.child);
    }
}

/// Fails unless the cgroup v1 cpu controller is mounted and writable.
pub fn check_cgroup() -> Result<(), ClusterError> {
    let p = Path::new(CPU_CGROUP).join("cpu.cfs_quota_us");
    if p.exists() {
        Ok(())
    } else {
        Err(ClusterError::Invalid(format!(
            "{} missing: the bench holds each server to its own CPU quota through the cgroup v1 \
             cpu controller (mount it, run as root)",
            p.display()
        )))
    }
}

/// A cgroup v1 `cpu` group holding one process (every thread); removed on drop.
pub struct CpuGroup(PathBuf);

impl CpuGroup {
    pub fn new(
        tag: &str,
        pid: u32,
        quota_us: u64,
        period_us: u64,
    ) -> Result<CpuGroup, ClusterError> {
        let p = Path::new(CPU_CGROUP).join(format!("storefn-cbench-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&p).map_err(|e| invalid(&p.display().to_string(), &e))?;
        let g = CpuGroup(p);
        let put = |f: &str, v: &str| {
            std::fs::write(g.0.join(f), v)
                .map_err(|e| invalid(&g.0.join(f).display().to_string(), &e))
        };
        put("cpu.cfs_period_us", &period_us.to_string())?;
        put("cpu.cfs_quota_us", &quota_us.to_string())?;
        put("cgroup.procs", &pid.to_string())?;
        Ok(g)
    }
}

impl Drop for CpuGroup {
    fn drop(&mut self) {
        // A group with tasks cannot be removed: move any left (a live server) back to the root.
        if let Ok(procs) = std::fs::read_to_string(self.0.join("cgroup.procs")) {
            for p in procs.lines() {
                let _ = std::fs::write(Path::new(CPU_CGROUP).join("cgroup.procs"), p);
            }
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// A process's CPU time (user + system), seconds; 0 once it is gone.
pub fn cpu_secs_of(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0.0 };
    // Fields after the command (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map_or("", |r| r.1);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    // utime and stime are fields 14 and 15 of stat(5): 11 and 12 after the state field.
    (ticks(11) + ticks(12)) / hz
}

/// This process's CPU time (every thread), seconds.
pub fn self_cpu_secs() -> f64 {
    // SAFETY: an all-zero rusage is a valid value for getrusage to fill.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a pointer to a live rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &raw mut ru) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

/// The machine's load averages (`/proc/loadavg`'s first three fields).
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
