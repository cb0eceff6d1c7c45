//! `storefn pageserver bench --spawn`: the whole page server on this machine, the host
//! application in its own process, as DDS deploys it. The storage server (with the DDS front
//! end and the file service) runs in this process; the host application is started from
//! [`HostCommand`] (the CLI re-executes itself as `storefn pageserver host`), connects to a
//! Unix socket and receives its two channels; then the load runs over loopback. The child is
//! always stopped and reaped: SIGTERM after the run (SIGKILL after [`HOST_STOP_TIMEOUT`]),
//! SIGKILL on every error path (the guard's `Drop`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use storefn_wire::{Client, ClientConfig, ClientError, StatusCode};

use super::bench::{add_time_split, host_stats, run, PageBenchConfig, PageBenchReport};
use super::{DeployOptions, Deployment};
use crate::host::ChannelListener;

/// The command that runs the host application (`storefn pageserver host`); the spawner appends
/// `--channel SOCKET --file pages --pages N --updates-per-sec U --seed S`.
#[derive(Debug, Clone)]
pub struct HostCommand {
    /// The program.
    pub program: PathBuf,
    /// Its first arguments (e.g. `pageserver host`).
    pub args: Vec<OsString>,
}

/// The host process: stopped and reaped when dropped.
struct Child(Option<std::process::Child>);

impl Child {
    fn alive(&mut self) -> Result<(), String> {
        match self.0.as_mut().map(std::process::Child::try_wait) {
            Some(Ok(None)) => Ok(()),
            Some(Ok(Some(st))) => Err(format!("host application exited early ({st})")),
            Some(Err(e)) => Err(format!("host application: {e}")),
            None => Err("host application already reaped".into()),
        }
    }

    /// SIGTERM, wait up to [`HOST_STOP_TIMEOUT`], then SIGKILL; always reaps.
    fn stop(&mut self) -> Result<(), String> {
        let Some(mut c) = self.0.take() else { return Ok(()) };
        if let Ok(pid) = libc::pid_t::try_from(c.id()) {
            // SAFETY: kill(2) on our own child, which is not reaped yet (so the pid is its).
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let deadline = Instant::now() + HOST_STOP_TIMEOUT;
        loop {
            match c.try_wait() {
                Ok(Some(st)) if st.success() => return Ok(()),
                Ok(Some(st)) => return Err(format!("host application: {st}")),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Ok(None) | Err(_) => {
                    let _ = c.kill();
                    let _ = c.wait();
                    return Err(format!(
                        "host application did not stop within {HOST_STOP_TIMEOUT:?}; killed"
                    ));
                }
            }
        }
    }
}

impl Drop for Child {
    /// Error paths: the run failed already, so no grace period: SIGKILL, then reap.
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A private directory for the channel socket, removed when dropped.
struct SocketDir(PathBuf);

impl SocketDir {
    fn new() -> Result<Self, String> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let d = std::env::temp_dir().join(format!("storefn-ps-{}-{nanos}", std::process::id()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&d)
            .map_err(|e| format!("{}: {e}", d.display()))?;
        Ok(Self(d))
    }
}

impl Drop for SocketDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

use crate::limits::DEFAULT_CHANNEL_RING_BYTES;
use crate::limits::{HOST_CONNECT_TIMEOUT, HOST_READY_TIMEOUT, HOST_STOP_TIMEOUT};
use std::os::unix::fs::DirBuilderExt;

/// Waits until the host answers a stats request with all `pages` stored (a forwarded request
/// may time out while it is still storing them: retried).
fn wait_ready(
    addr: &str,
    client: ClientConfig,
    pages: u64,
    child: &mut Child,
) -> Result<(), String> {
    let deadline = Instant::now() + HOST_READY_TIMEOUT;
    let mut c = Client::connect(addr, client).map_err(|e| e.to_string())?;
    loop {
        child.alive()?;
        match host_stats(&mut c) {
            Ok(s) if s.pages == pages => return Ok(()),
            Ok(s) => return Err(format!("host application stores {} pages, not {pages}", s.pages)),
            Err(ClientError::Status { status, .. })
                if status == StatusCode::HostTimeout as u16 && Instant::now() < deadline => {}
            Err(e) => return Err(format!("waiting for the host application: {e}")),
        }
    }
}

/// `--spawn`: a page server on loopback (storefn-server with the DDS front end over files
/// beneath `dir`, offload per `cfg.offload`), the host application as a separate process
/// (`host`) storing `pages` pages and replaying `updates_per_sec` random page updates, then
/// the load; everything stopped after, the host process reaped on every path.
///
/// # Errors
/// Start-up failures, named; the load's errors; a host that did not exit cleanly.
pub fn spawn_and_run(
    dir: &Path,
    elf: &[u8],
    pages: u64,
    updates_per_sec: u64,
    host: &HostCommand,
    cfg: &PageBenchConfig,
) -> Result<PageBenchReport, String> {
    let table_items = usize::try_from(pages).map_err(|e| e.to_string())?.max(64) * 2;
    let sock_dir = SocketDir::new()?;
    let sock = sock_dir.0.join("host.sock");
    let listener = ChannelListener::bind(&sock).map_err(|e| e.to_string())?;
    let child = Command::new(&host.program)
        .args(&host.args)
        .arg("--channel")
        .arg(&sock)
        .args(["--file", "pages", "--pages", &pages.to_string()])
        .args(["--updates-per-sec", &updates_per_sec.to_string()])
        .args(["--seed", &cfg.seed.to_string()])
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| format!("start the host application {}: {e}", host.program.display()))?;
    let mut child = Child(Some(child));
    let mut accept = || -> Result<crate::host::HostChannel, String> {
        let deadline = Instant::now() + HOST_CONNECT_TIMEOUT;
        loop {
            child.alive()?;
            match listener.accept_timeout(DEFAULT_CHANNEL_RING_BYTES, Duration::from_millis(100)) {
                Ok(ch) => return Ok(ch),
                Err(crate::host::HostError::Dir { source, .. })
                    if source.kind() == std::io::ErrorKind::TimedOut
                        && Instant::now() < deadline => {}
                Err(e) => return Err(format!("host application handoff: {e}")),
            }
        }
    };
    let files = accept()?;
    let forward = accept()?;
    drop(listener);
    let mut opts = DeployOptions::new(table_items, cfg.offload);
    opts.threads = cfg.threads.max(1);
    let d = Deployment::start_with_opts("127.0.0.1:0", dir, elf, &opts, files, forward)
        .map_err(|e| format!("start the page server: {e}"))?;
    let mut cfg = cfg.clone();
    cfg.addr = d.server.local_addr().to_string();
    cfg.client = d.client_config();
    let r = wait_ready(&cfg.addr, cfg.client.clone(), pages, &mut child).and_then(|()| {
        d.front.set_timing(true);
        let r = run(&cfg).map_err(|e| e.to_string());
        d.front.set_timing(false);
        r.map(|mut rep| {
            add_time_split(&mut rep, d.front.take_timing());
            rep.function_faults = Some(d.front.stats().faults.load(Ordering::Relaxed));
            rep.last_fault = d.front.last_fault();
            rep.raced_reads = Some(d.server.stats().offload_raced.load(Ordering::Relaxed));
            rep
        })
    });
    // The host first (its answers need the server), then the server.
    let stopped = child.stop();
    let down = d.stop().map_err(|e| format!("stop the page server: {e}"));
    let rep = r?;
    stopped?;
    down?;
    Ok(rep)
}
