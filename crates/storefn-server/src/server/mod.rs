//! The server: `--threads N` worker threads, each with its own io_uring engine (file reads and
//! storage-function chains) and its own connections, accepted from one shared listening socket.
//! Sockets are driven by `poll(2)` on the same thread, with the engine's ring fd in the same
//! poll set, so a thread sleeps until a socket or a completion needs it (docs/design/server.md,
//! "Server").

mod conns;
pub mod fence;
mod files;

pub mod offload;
mod progs;
pub mod sched;
mod scopes;
mod worker;

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::auth::Token;
use crate::confine::Root;
use crate::log::Logger;
use crate::metrics::Metrics;
use crate::registry::Registry;
pub use scopes::PolicyError;

// The server's modules name its bounds `super::X` and `crate::server::X`.
pub(crate) use crate::limits::*;
pub(crate) use worker::{LARGEST_RANGE_BUF, SPARE_RANGE_BUF_BYTES};

/// How to run a server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The served directory: nothing outside it is reachable.
    pub dir: PathBuf,
    /// Worker threads, 1..=`MAX_THREADS`.
    pub threads: usize,
    /// Tenants and secrets; `None` = no authentication (any tenant name is accepted).
    pub tokens: Option<Vec<Token>>,
    /// One line per connection event and per refused request on stderr.
    pub log: bool,
    /// How those lines are written (text, or one JSON object per line).
    pub log_format: crate::log::LogFormat,
    /// Serve Prometheus metrics on this address (`GET /metrics`); `None` = no endpoint.
    pub metrics: Option<String>,
    /// Program registry bound, bytes.
    pub registry_bytes: usize,
    /// Fair admission between tenants (default); `false` = one FIFO (the baseline).
    pub fair: bool,
    /// Timeouts (tests shorten them).
    pub idle_timeout: Duration,
    pub slow_client_timeout: Duration,
    /// DDS: the offload engine OFFLOAD requests go through; `None` = OFFLOAD is refused.
    pub offload: Option<std::sync::Arc<dyn offload::OffloadHook>>,
    /// DDS: per forwarded request ([`FORWARD_TIMEOUT`]; tests shorten it).
    pub forward_timeout: Duration,
    /// What WRITE and LAMBDA_WRITE write through once the file is open (confined beneath
    /// `dir`): the real file system, or a crash model in the power-loss tests.
    pub storage: storefn_io::StorageRef,
    /// Connections in all, per thread, per peer address, before authentication.
    pub conn_limits: ConnLimits,
    /// Instructions per program invocation for tenants not in `tenant_insn_budgets` and
    /// whose token line names no `insns=` ([`DEFAULT_TENANT_INSN_BUDGET`]).
    pub insn_budget: u64,
    /// Per-tenant instruction budgets (tenant name, instructions per invocation); one here
    /// overrides the tenant's token line (`insns=`).
    pub tenant_insn_budgets: Vec<(String, u64)>,
    /// Largest block one hop of a pushed-down chain may read ([`SERVER_HOP_BYTES`] by
    /// default, so real engines' pages fit; a program still asks for each hop's size).
    pub hop_bytes: usize,
    /// A cluster's fencing of shard files ([`fence::Fence`]); `None` = every request for an
    /// existing file is answered, fenced or not.
    pub fence: Option<std::sync::Arc<dyn fence::Fence>>,
}

impl ServerConfig {
    #[must_use]
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
            threads: 1,
            tokens: None,
            log: false,
            log_format: crate::log::LogFormat::Text,
            metrics: None,
            registry_bytes: DEFAULT_REGISTRY_BYTES,
            fair: true,
            idle_timeout: IDLE_TIMEOUT,
            slow_client_timeout: SLOW_CLIENT_TIMEOUT,
            offload: None,
            forward_timeout: FORWARD_TIMEOUT,
            storage: storefn_io::real_storage(),
            conn_limits: ConnLimits::default(),
            insn_budget: DEFAULT_TENANT_INSN_BUDGET,
            tenant_insn_budgets: Vec::new(),
            hop_bytes: SERVER_HOP_BYTES,
            fence: None,
        }
    }
}

fn bind_metrics(addr: &str) -> Result<(TcpListener, SocketAddr), ServerError> {
    let err = |source| ServerError::Metrics { addr: addr.to_string(), source };
    let l = TcpListener::bind(addr).map_err(err)?;
    l.set_nonblocking(true).map_err(err)?;
    let a = l.local_addr().map_err(err)?;
    Ok((l, a))
}

/// Why the server could not start or a thread failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    #[error("served directory {path}: {source}")]
    Dir { path: PathBuf, source: std::io::Error },
    #[error("metrics endpoint on {addr}: {source}")]
    Metrics { addr: String, source: std::io::Error },
    #[error("listen on {addr}: {source}")]
    Listen { addr: String, source: std::io::Error },
    #[error("--threads {0}: expected 1..={MAX_THREADS}")]
    Threads(usize),
    #[error("server thread {thread}: engine: {source}")]
    Engine { thread: usize, source: storefn_io::EngineError },
    #[error("server thread {thread}: {source}")]
    Io { thread: usize, source: std::io::Error },
    #[error("server thread {0} panicked")]
    Panicked(usize),
    /// A tenant's scope in the token file is wrong, or names a directory that cannot be opened.
    #[error("{0}")]
    Scope(#[from] PolicyError),
}

/// Counters shared by the threads. Relaxed: statistics, read after the threads are joined or
/// as approximate progress.
#[derive(Debug, Default)]
pub struct ServerStats {
    pub connections: AtomicU64,
    pub requests: AtomicU64,
    pub chains: AtomicU64,
    pub protocol_errors: AtomicU64,
    pub auth_failures: AtomicU64,
    pub closed_idle: AtomicU64,
    pub closed_slow: AtomicU64,
    /// DDS: requests forwarded to the host application.
    pub forwarded: AtomicU64,
    /// DDS: forwarded requests answered `HOST_TIMEOUT`.
    pub forward_timeouts: AtomicU64,
    /// DDS: host answers that arrived after their request timed out (dropped).
    pub late_answers: AtomicU64,
    /// DDS: offloaded reads that overlapped a host change and were forwarded instead.
    pub offload_raced: AtomicU64,
    /// The engines' registered-file slots in use (all threads; updated when a request opens a
    /// file).
    pub engine_files: AtomicU64,
    /// Open-file table entries (all threads): equal to `engine_files` when no slot leaked.
    pub cached_files: AtomicU64,
    /// Files opened and registered (a request whose file was already open opens none).
    pub files_opened: AtomicU64,
    /// The most memory one connection's buffers held (receive, response frame, send, queued
    /// frames), bytes, as seen after each send.
    pub peak_conn_bytes: AtomicU64,
    /// Connections closed at accept by a connection limit.
    pub refused_connections: AtomicU64,
    /// Connections closed because they did not authenticate within the auth timeout.
    pub closed_unauthenticated: AtomicU64,
}

/// State every thread reads.
#[derive(Debug)]
pub(crate) struct Shared {
    pub root: Root,
    /// Tenants' scopes and quotas.
    pub policy: scopes::Policy,
    pub registry: Mutex<Registry>,
    pub cfg: ServerConfig,
    pub stop: AtomicBool,
    pub stats: ServerStats,
    pub next_conn: AtomicU64,
    pub conn_counts: Mutex<conns::ConnCounts>,
    pub metrics: Metrics,
}

impl Shared {
    /// The instruction budget of tenant `name` with scope `scope` (its token's index): its own
    /// from the configuration (`--tenant-insn-budget`), else its token line's `insns=`, else
    /// the server's default (`--insn-budget`).
    pub(crate) fn insn_budget(&self, name: &[u8], scope: u32) -> u64 {
        let own = self.cfg.tenant_insn_budgets.iter().find(|(t, _)| t.as_bytes() == name);
        own.map(|&(_, b)| b)
            .or_else(|| self.policy.insn_budget(scope))
            .unwrap_or(self.cfg.insn_budget)
    }

    /// The logger every log line of the server goes through.
    pub(crate) fn logger(&self) -> Logger {
        Logger { on: self.cfg.log, format: self.cfg.log_format }
    }

    /// What a scrape of the metrics endpoint answers.
    pub(crate) fn metrics_text(&self) -> String {
        let registry = self.registry.lock().ok().map(|r| {
            let (loaded, evicted) = r.churn();
            (loaded, evicted, r.len())
        });
        let inputs = crate::metrics::ScrapeInputs {
            stats: &self.stats,
            conns: self.conn_counts().totals(),
            registry,
            host_alive: self.cfg.offload.as_ref().and_then(|h| h.host_alive()),
        };
        self.metrics.encode(&inputs)
    }

    /// The connection counts (a poisoned lock still holds consistent counts: every update is
    /// one call that cannot panic halfway).
    pub(crate) fn conn_counts(&self) -> std::sync::MutexGuard<'_, conns::ConnCounts> {
        self.conn_counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A running server.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<Result<(), ServerError>>>,
    /// The metrics endpoint's address and thread (`ServerConfig::metrics`).
    metrics: Option<(SocketAddr, JoinHandle<()>)>,
}

impl Server {
    /// Binds `listen` and starts the threads; returns once they are serving.
    ///
    /// # Errors
    /// The directory cannot be opened, the address cannot be bound, a thread's engine fails.
    pub fn start(listen: &str, cfg: ServerConfig) -> Result<Self, ServerError> {
        if cfg.threads == 0 || cfg.threads > MAX_THREADS {
            return Err(ServerError::Threads(cfg.threads));
        }
        let root = Root::open(&cfg.dir)
            .map_err(|source| ServerError::Dir { path: cfg.dir.clone(), source })?;
        let policy = scopes::Policy::new(&root, cfg.tokens.as_deref())?;
        let listener = TcpListener::bind(listen)
            .map_err(|source| ServerError::Listen { addr: listen.to_string(), source })?;
        listener
            .set_nonblocking(true)
            .map_err(|source| ServerError::Listen { addr: listen.to_string(), source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| ServerError::Listen { addr: listen.to_string(), source })?;
        let metrics_listener = match &cfg.metrics {
            Some(a) => Some(bind_metrics(a)?),
            None => None,
        };
        let log = Logger { on: cfg.log, format: cfg.log_format };
        let names = cfg.tokens.as_ref().map(|t| t.iter().map(|t| t.tenant.clone()).collect());
        let metrics = Metrics::new(cfg.threads, names, log);
        let shared = Arc::new(Shared {
            metrics,
            root,
            policy,
            registry: Mutex::new(Registry::new(cfg.registry_bytes)),
            stop: AtomicBool::new(false),
            stats: ServerStats::default(),
            next_conn: AtomicU64::new(1),
            conn_counts: Mutex::new(conns::ConnCounts::default()),
            cfg,
        });
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let mut threads = Vec::new();
        for id in 0..shared.cfg.threads {
            let l = listener
                .try_clone()
                .map_err(|source| ServerError::Listen { addr: listen.to_string(), source })?;
            let sh = Arc::clone(&shared);
            let tx = ready_tx.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("storefn-serve-{id}"))
                    .spawn(move || worker::run(id, &l, &sh, &tx))
                    .map_err(|source| ServerError::Io { thread: id, source })?,
            );
        }
        drop(ready_tx);
        let metrics = match metrics_listener {
            Some((l, a)) => {
                let sh = Arc::clone(&shared);
                let t = std::thread::Builder::new()
                    .name("storefn-metrics".into())
                    .spawn(move || crate::metrics::serve_http(&l, &sh))
                    .map_err(|source| ServerError::Metrics { addr: a.to_string(), source })?;
                Some((a, t))
            }
            None => None,
        };
        let server = Self { addr, shared, threads, metrics };
        for _ in 0..server.threads.len() {
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    server.stop();
                    let _ = server.join();
                    return Err(e);
                }
                Err(_) => break,
            }
        }
        Ok(server)
    }

    /// The bound address (useful with port 0).
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Asks every thread to stop: no new connections or requests; requests already running
    /// are answered, queued ones get `SHUTTING_DOWN`, then the sockets close.
    pub fn stop(&self) {
        // Release: pairs with the threads' Acquire load; nothing else is published with it.
        self.shared.stop.store(true, Ordering::Release);
    }

    /// The metrics endpoint's bound address (`ServerConfig::metrics`).
    #[must_use]
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(|m| m.0)
    }

    /// What the metrics endpoint answers now (Prometheus text format), without HTTP.
    #[must_use]
    pub fn metrics_text(&self) -> String {
        self.shared.metrics_text()
    }

    /// Counters.
    #[must_use]
    pub fn stats(&self) -> &ServerStats {
        &self.shared.stats
    }

    /// Programs in the registry.
    #[must_use]
    pub fn registry_len(&self) -> usize {
        self.shared.registry.lock().map_or(0, |r| r.len())
    }

    /// Waits for every thread (after [`Server::stop`]).
    ///
    /// # Errors
    /// The first thread's error.
    pub fn join(self) -> Result<(), ServerError> {
        let mut first = Ok(());
        if let Some((_, t)) = self.metrics {
            let _ = t.join();
        }
        for (i, t) in self.threads.into_iter().enumerate() {
            let r = t.join().unwrap_or(Err(ServerError::Panicked(i)));
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}
