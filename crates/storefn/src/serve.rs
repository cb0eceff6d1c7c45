//! `storefn serve`: the storage server (crates/storefn-server). Parses, starts, waits for
//! SIGTERM/SIGINT, stops cleanly.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Args;
use storefn_server::{Server, ServerConfig};

use crate::CmdResult;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The served directory: nothing outside it is reachable.
    #[arg(long)]
    pub dir: PathBuf,
    /// Address to listen on, e.g. 127.0.0.1:7070 or [::1]:7070.
    #[arg(long)]
    pub listen: String,
    /// `TENANT SECRET [ro|rw] [dir=SUB ...] [write_quota=SIZE] [grow_quota=SIZE] [insns=N]`
    /// lines: every connection must authenticate (HMAC-SHA256) and each tenant reaches only
    /// its scope (default: rw, the whole directory, no write quota, 1G growth, the server's
    /// instruction budget; docs/FORMAT.md).
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// Server threads (each with its own io_uring engine).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// One FIFO for every tenant instead of fair admission (for comparisons).
    #[arg(long, hide = true)]
    pub unfair: bool,
    /// Instructions per program invocation for tenants without their own budget (neither
    /// --tenant-insn-budget nor the token file's insns=; default
    /// storefn_server::limits::DEFAULT_TENANT_INSN_BUDGET, a quarter of the VM's default).
    #[arg(long)]
    pub insn_budget: Option<u64>,
    /// A tenant's own instruction budget, `TENANT=INSNS` (repeatable; over its token line's
    /// insns=).
    #[arg(long = "tenant-insn-budget", value_parser = parse_tenant_budget)]
    pub tenant_insn_budgets: Vec<(String, u64)>,
    /// Largest block one hop of a pushed-down chain may read: 4096..=65536, a multiple of
    /// 4096 (default 65536, so real engines' pages are one hop).
    #[arg(long)]
    pub hop_bytes: Option<usize>,
    /// etcd endpoints (`host:port,...`): join that cluster (a lease, fencing of shard files,
    /// re-replication when a server leaves); needs --node and --advertise.
    #[arg(long, requires_all = ["node", "advertise"])]
    pub cluster: Option<String>,
    /// This server's id in the cluster.
    #[arg(long, requires = "cluster")]
    pub node: Option<String>,
    /// The address clients reach this server at.
    #[arg(long, requires = "cluster")]
    pub advertise: Option<String>,
    /// Serve Prometheus metrics on this address (`GET /metrics`), e.g. 127.0.0.1:9464.
    #[arg(long)]
    pub metrics: Option<String>,
    /// Connection and refused-request log lines: text, or one JSON object per line.
    #[arg(long, default_value = "text")]
    pub log_format: storefn_server::LogFormat,
}

fn parse_tenant_budget(s: &str) -> Result<(String, u64), String> {
    let (t, n) = s.split_once('=').ok_or_else(|| format!("{s:?}: expected TENANT=INSNS"))?;
    let n: u64 = n.parse().map_err(|e| format!("{s:?}: instructions: {e}"))?;
    if t.is_empty() || n == 0 {
        return Err(format!("{s:?}: expected a tenant name and a budget above 0"));
    }
    Ok((t.to_string(), n))
}

/// Set by the signal handler; polled by the main thread.
pub(crate) static STOP: AtomicBool = AtomicBool::new(false);

pub(crate) extern "C" fn on_signal(_: libc::c_int) {
    // Async-signal-safe: one atomic store. Relaxed: the main thread only polls the flag.
    STOP.store(true, Ordering::Relaxed);
}

pub fn run(a: &ServeArgs) -> CmdResult {
    let mut cfg = ServerConfig::new(&a.dir);
    cfg.threads = a.threads;
    cfg.log = true;
    cfg.log_format = a.log_format;
    cfg.metrics.clone_from(&a.metrics);
    cfg.fair = !a.unfair;
    if let Some(b) = a.insn_budget {
        cfg.insn_budget = b;
    }
    cfg.tenant_insn_budgets.clone_from(&a.tenant_insn_budgets);
    if let Some(h) = a.hop_bytes {
        cfg.hop_bytes = h;
    }
    if let Some(t) = &a.token_file {
        // Scopes checked here too, so a bad one is reported with the file's name.
        let tokens = storefn_server::load_token_file(t)?;
        cfg.tokens = Some(tokens.into_iter().map(|(t, _)| t).collect());
    }
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
    let agent = match &a.cluster {
        Some(ep) => {
            let agent = storefn_cluster::NodeAgent::start(storefn_cluster::NodeConfig {
                endpoints: ep.clone(),
                id: a.node.clone().expect("clap requires it"),
                advertise: a.advertise.clone().expect("clap requires it"),
                dir: a.dir.clone(),
                // The leader's copies reach the other servers with this server's own token.
                creds: match &a.token_file {
                    Some(t) => storefn_cluster::Creds::from_token_file(t)?,
                    None => storefn_cluster::Creds::default(),
                },
            })?;
            cfg.fence = Some(agent.fence());
            Some(agent)
        }
        None => None,
    };
    let server = Server::start(&a.listen, cfg)?;
    eprintln!(
        "storefn serve: listening on {} (dir {}, {} thread(s), auth {})",
        server.local_addr(),
        a.dir.display(),
        a.threads,
        if a.token_file.is_some() { "on" } else { "off" }
    );
    if let Some(m) = server.metrics_addr() {
        eprintln!("storefn serve: metrics on http://{m}/metrics");
    }
    while !STOP.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("storefn serve: stopping");
    if let Some(agent) = agent {
        // Leave first: the lease is revoked, so clients route elsewhere before we stop.
        agent.leave();
        eprintln!("storefn serve: left the cluster");
    }
    server.stop();
    server.join()?;
    eprintln!("storefn serve: stopped");
    Ok(ExitCode::SUCCESS)
}
