//! The server: `--threads N` worker threads, each with its own io_uring engine (file reads and
//! storage-function chains) and its own connections, accepted from one shared listening socket.
//! Sockets are driven by `poll(2)` on the same thread, with the engine's ring fd in the same
//! poll set, so a thread sleeps until a socket or a completion needs it (docs/design/server.md,
//! "Server").

mod files;
pub mod offload;
pub mod offload_reads;
mod progs;
mod requests;
pub mod sched;
mod worker;

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::auth::Token;
use crate::confine::Root;
use crate::registry::{Registry, DEFAULT_REGISTRY_BYTES};

/// Requests outstanding per connection (queued or running); more are answered `LIMIT`, and the
/// connection is not read while it is at the limit.
pub const MAX_IN_FLIGHT_PER_CONN: u32 = 256;
/// Response bytes waiting to be sent per connection before it is no longer read.
pub const MAX_CONN_OUT_BYTES: usize = 4 << 20;
/// A connection with nothing in flight and nothing received for this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// A connection that does not finish sending a started frame, or does not take its
/// responses, for this long is closed (slow-loris and stalled readers).
pub const SLOW_CLIENT_TIMEOUT: Duration = Duration::from_secs(10);
/// Hops per chain, whatever the client asks (the engine's hop limit).
pub const SERVER_MAX_HOPS: u32 = 64;
/// Chain slots (and registered buffers) per server thread's engine.
pub const ENGINE_CHAINS: usize = 256;
/// Connections per server thread; more are refused at accept (closed at once).
pub const MAX_CONNS_PER_THREAD: usize = 8192;
/// Open files per server thread (the engine registers at most 64).
pub const MAX_OPEN_FILES_PER_THREAD: usize = 48;
/// Distinct tenant names per server thread (each has a queue); HELLO beyond it gets `LIMIT`.
pub const MAX_TENANTS_PER_THREAD: usize = 1024;
/// Compiled programs per server thread.
pub const MAX_INSTANCES_PER_THREAD: usize = 32;
/// Longest time `poll` sleeps: timeouts and the stop flag are checked at least this often.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// At shutdown, how long responses already built may take to drain before sockets close.
pub const SHUTDOWN_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);
/// Most server threads.
pub const MAX_THREADS: usize = 64;
/// DDS: how long a request forwarded to the host application may wait for its answer before
/// the client gets `HOST_TIMEOUT` (the host's late answer is then dropped). Long enough for a
/// host that replays a page before answering; short enough that a stuck host fails its
/// clients' requests instead of hanging them.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(5);

/// How to run a server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The served directory: nothing outside it is reachable.
    pub dir: PathBuf,
    /// Worker threads, 1..=`MAX_THREADS`.
    pub threads: usize,
    /// Tenants and secrets; `None` = no authentication (any tenant name is accepted).
    pub tokens: Option<Vec<Token>>,
    /// One line per connection event on stderr.
    pub log: bool,
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
    pub storage: storefn_kv::storage::StorageRef,
}

impl ServerConfig {
    #[must_use]
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
            threads: 1,
            tokens: None,
            log: false,
            registry_bytes: DEFAULT_REGISTRY_BYTES,
            fair: true,
            idle_timeout: IDLE_TIMEOUT,
            slow_client_timeout: SLOW_CLIENT_TIMEOUT,
            offload: None,
            forward_timeout: FORWARD_TIMEOUT,
            storage: storefn_kv::storage::real(),
        }
    }
}

/// Why the server could not start or a thread failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    #[error("served directory {path}: {source}")]
    Dir { path: PathBuf, source: std::io::Error },
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
    /// DDS: forwarded requests answered `HOST_TIMEOUT`.
    pub forward_timeouts: AtomicU64,
    /// DDS: host answers that arrived after their request timed out (dropped).
    pub late_answers: AtomicU64,
    /// DDS: offloaded reads that overlapped a host change and were forwarded instead.
    pub offload_raced: AtomicU64,
}

/// State every thread reads.
#[derive(Debug)]
pub(crate) struct Shared {
    pub root: Root,
    pub registry: Mutex<Registry>,
    pub cfg: ServerConfig,
    pub stop: AtomicBool,
    pub stats: ServerStats,
    pub next_conn: AtomicU64,
}

/// A running server.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<Result<(), ServerError>>>,
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
        let listener = TcpListener::bind(listen)
            .map_err(|source| ServerError::Listen { addr: listen.to_string(), source })?;
        listener
            .set_nonblocking(true)
            .map_err(|source| ServerError::Listen { addr: listen.to_string(), source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| ServerError::Listen { addr: listen.to_string(), source })?;
        let shared = Arc::new(Shared {
            root,
            registry: Mutex::new(Registry::new(cfg.registry_bytes)),
            stop: AtomicBool::new(false),
            stats: ServerStats::default(),
            next_conn: AtomicU64::new(1),
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
        let server = Self { addr, shared, threads };
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
        for (i, t) in self.threads.into_iter().enumerate() {
            let r = t.join().unwrap_or(Err(ServerError::Panicked(i)));
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}
