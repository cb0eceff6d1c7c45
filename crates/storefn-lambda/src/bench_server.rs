//! The λ bench against a real storefn-server: [`bench_remote::run_remote_with`] with the
//! server side on the LAMBDA frame ([`ServerTransport`]) and the client side reading over READ
//! frames through its own block cache ([`RemoteReadSide`]), both through the delay proxy; and
//! each sweep repeated with the server's CPU capped (cgroup v1, [`CpuCap`]), whose rows carry
//! `-cpuP` in their condition.

use storefn_wire::ClientConfig;

use crate::bench::BenchRow;
use crate::bench_remote::{run_remote_with, MidwayCap, RemoteBenchConfig};
use crate::cpu_cap::CpuCap;
use crate::error::LambdaError;
use crate::server_transport::{RemoteReadSide, ServerTransport};

/// What to run against a storefn-server.
#[derive(Debug, Clone)]
pub struct ServerBenchConfig {
    pub remote: RemoteBenchConfig,
    pub client: ClientConfig,
    /// The client's block cache, bytes (must hold a data file for `warm` to mean warm).
    pub client_cache_bytes: u64,
    /// Server CPU conditions, each a whole sweep: `None` uncapped, `Some(p)` p% of one CPU.
    pub cpu_caps: Vec<Option<u32>>,
    /// The server's process (required for a cap).
    pub server_pid: Option<u32>,
}

/// Runs every CPU condition's sweep.
///
/// # Errors
/// A cap without a server pid or without root (the group is removed on every path), and as
/// [`run_remote_with`].
pub fn run_server(
    cfg: &ServerBenchConfig,
    mut progress: impl FnMut(&BenchRow),
) -> Result<Vec<BenchRow>, LambdaError> {
    let mut rows = Vec::new();
    // The uncapped sweep's changing runs include the cap set midway, at the sweep's cap.
    let midway_percent = cfg.cpu_caps.iter().flatten().next().copied();
    for &cap in &cfg.cpu_caps {
        let _cap = cap.map(|p| cap_server(cfg, p)).transpose()?;
        let midway_fn = |p| move || cap_server(cfg, p);
        let midway_fn = midway_percent.filter(|_| cap.is_none()).map(midway_fn);
        let midway = midway_fn
            .as_ref()
            .map(|f| MidwayCap { percent: midway_percent.expect("set with the closure"), cap: f });
        let suffix = cap.map(|p| format!("-cpu{p}")).unwrap_or_default();
        let connect = |addr: std::net::SocketAddr| {
            ServerTransport::connect(&addr.to_string(), cfg.client.clone())
        };
        let engine = cfg.remote.base.engine;
        let part = run_remote_with(
            &cfg.remote,
            midway.as_ref(),
            connect,
            |w, _, prog, addr| {
                let served = format!("{}{}.dat", cfg.remote.served_prefix, w.name());
                Ok(Box::new(RemoteReadSide::with_cache(
                    connect(addr)?,
                    &served,
                    prog.instance(engine)?,
                    cfg.client_cache_bytes,
                )))
            },
            |r| {
                let mut r = r.clone();
                r.condition.push_str(&suffix);
                progress(&r);
            },
        )?;
        rows.extend(part.into_iter().map(|mut r| {
            r.condition.push_str(&suffix);
            r
        }));
    }
    Ok(rows)
}

/// Caps the server's CPU to `percent` of one CPU until the guard is dropped.
fn cap_server(cfg: &ServerBenchConfig, percent: u32) -> Result<CpuCap, LambdaError> {
    let pid = cfg.server_pid.ok_or_else(|| LambdaError::Io {
        path: cfg.remote.server.to_string().into(),
        what: "cpu cap",
        source: std::io::Error::other("capping the server's CPU needs its pid"),
    })?;
    CpuCap::new(pid, percent).map_err(|source| LambdaError::Io {
        path: format!("pid {pid}").into(),
        what: "cpu cap (cgroup v1, root)",
        source,
    })
}
