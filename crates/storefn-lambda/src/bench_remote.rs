//! The λ bench with a storage server: every read workload under each client-cache condition and
//! each RTT (through a [`DelayProxy`] in front of the server), run always-local, always-server
//! and auto (a fresh [`Dispatcher`] per run), plus runs whose conditions change midway (the
//! cache warms; the RTT rises). Generic over the [`LambdaTransport`], so storefn-server's client
//! plugs in unchanged; `tests/bench_remote.rs` drives it with an in-test server.
//!
//! The client and the server here share one machine and so one page cache: "cold" drops the
//! range for both, "warm" has it cached for both. What differs between the sides is where the
//! function runs and what crosses the (emulated) network.

use std::net::SocketAddr;
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use storefn_io::IoMode;
use storefn_netdelay::DelayProxy;

use crate::bench::{
    ensure_data, row, storefn_progs_elf, warm, BenchConfig, BenchRow, Condition, WARMUP_REQUESTS,
};
use crate::cache::drop_cached;
use crate::dispatch::{DispatchConfig, Dispatcher, Side, SideKind, Where};
use crate::error::LambdaError;
use crate::local::{LocalFile, LocalSide};
use crate::prog::LambdaProg;
use crate::remote::{LambdaTransport, RemoteSide};
use crate::workloads::Workload;

/// What to run against a server.
#[derive(Debug, Clone)]
pub struct RemoteBenchConfig {
    /// Workloads, cache conditions, requests per run, sizes, seed, engine; `dir` holds the
    /// data files, which the server must serve as `<served_prefix><workload>.dat`.
    pub base: BenchConfig,
    /// The server (the proxies forward to it).
    pub server: SocketAddr,
    pub served_prefix: String,
    /// Round-trip times added by the proxy, µs.
    pub rtts_us: Vec<u64>,
    /// Also run the changing conditions: `cold->warm` at each RTT, and the RTT rising from the
    /// first to the last of `rtts_us` with a warm cache.
    pub changes: bool,
    pub dispatch: DispatchConfig,
}

/// How one run's conditions evolve: cache dropped per request in the first/second half, and
/// the proxy's RTT in each half.
#[derive(Debug, Clone, Copy)]
struct Plan {
    cold: [bool; 2],
    rtt_us: [u64; 2],
}

/// Runs the sweep; `connect(addr)` opens a transport to the server through the proxy at `addr`.
///
/// # Errors
/// Generating data, the proxy, the transport, or a failed request.
pub fn run_remote<T: LambdaTransport>(
    cfg: &RemoteBenchConfig,
    mut connect: impl FnMut(SocketAddr) -> Result<T, LambdaError>,
    mut progress: impl FnMut(&BenchRow),
) -> Result<Vec<BenchRow>, LambdaError> {
    let mut plans: Vec<(String, Plan)> = Vec::new();
    for &rtt in &cfg.rtts_us {
        for &c in &cfg.base.conditions {
            let cold = c == Condition::Cold;
            plans.push((
                format!("{}-rtt{rtt}", c.as_str()),
                Plan { cold: [cold; 2], rtt_us: [rtt; 2] },
            ));
        }
        if cfg.changes {
            plans.push((
                format!("cold->warm-rtt{rtt}"),
                Plan { cold: [true, false], rtt_us: [rtt; 2] },
            ));
        }
    }
    if let (true, Some(&a), Some(&b)) = (cfg.changes, cfg.rtts_us.first(), cfg.rtts_us.last()) {
        if a != b {
            plans.push((format!("warm-rtt{a}->{b}"), Plan { cold: [false; 2], rtt_us: [a, b] }));
        }
    }
    let mut rows = Vec::new();
    for &w in cfg.base.workloads.iter().filter(|w| !w.is_write()) {
        let path = ensure_data(&cfg.base.dir, w, cfg.base.file_bytes, cfg.base.seed)?;
        let prog = LambdaProg::from_elf(w.prog_name(), storefn_progs_elf(w), None);
        let mut local = LocalSide {
            file: LocalFile::open(&path, IoMode::Buffered)?,
            prog: prog.instance(cfg.base.engine)?,
        };
        let served = format!("{}{}.dat", cfg.served_prefix, w.name());
        let proxy =
            DelayProxy::spawn("127.0.0.1:0".parse().expect("literal address"), cfg.server, 0, None)
                .map_err(|source| LambdaError::Io {
                    path: path.clone(),
                    what: "delay proxy",
                    source,
                })?;
        let mut server = RemoteSide::new(connect(proxy.local_addr())?, &served, &prog)?;
        for (name, plan) in &plans {
            for wh in [Where::Local, Where::Server, Where::Auto] {
                let mut r = one_run(cfg, w, &proxy, &mut local, &mut server, *plan, wh)?;
                r.condition.clone_from(name);
                rows.push(r);
                progress(rows.last().unwrap());
            }
        }
        proxy.shutdown();
    }
    Ok(rows)
}

fn one_run<T: LambdaTransport>(
    cfg: &RemoteBenchConfig,
    w: Workload,
    proxy: &DelayProxy,
    local: &mut LocalSide,
    server: &mut RemoteSide<T>,
    plan: Plan,
    wh: Where,
) -> Result<BenchRow, LambdaError> {
    let path = local.file.path().to_path_buf();
    let io = |what, source| LambdaError::Io { path: path.clone(), what, source };
    let unit = w.unit_bytes();
    let size = local.file.size_bytes();
    let len = (cfg.base.request_bytes / unit).max(1) * unit;
    if len > size {
        return Err(LambdaError::OutsideFile { path: local.file.path().into(), off: 0, len, size });
    }
    let mut out = vec![0u8; w.out_cap(usize::try_from(len).unwrap_or(usize::MAX))];
    let mut disp = Dispatcher::new(cfg.dispatch);
    // The same offsets for every `where`, so the rows compare like with like.
    let mut rng = SmallRng::seed_from_u64(cfg.base.seed ^ 0x5eed);
    let total = WARMUP_REQUESTS + cfg.base.requests;
    let half = WARMUP_REQUESTS + cfg.base.requests / 2;
    let mut lat_us = Vec::with_capacity(cfg.base.requests as usize);
    let (mut on_server, mut out_bytes) = (0u32, 0);
    for i in 0..total {
        let h = usize::from(i >= half);
        if i == 0 || i == half {
            proxy.set_rtt_us(plan.rtt_us[h]).map_err(|e| io("delay proxy", e))?;
            if !plan.cold[h] {
                warm(&mut local.file)?;
            }
        }
        let off = rng.gen_range(0..=(size - len) / unit) * unit;
        if plan.cold[h] {
            drop_cached(local.file.file(), off, len).map_err(|e| io("fadvise", e))?;
        }
        let t = Instant::now();
        let (side, run) = match wh {
            Where::Local => (SideKind::Local, local.run(off, len, &mut out)?),
            Where::Server => (SideKind::Server, server.run(off, len, &mut out)?),
            Where::Auto => disp.run(local, server, off, len, &mut out)?,
        };
        let us = t.elapsed().as_secs_f64() * 1e6;
        out_bytes = run.out_bytes;
        if i >= WARMUP_REQUESTS {
            lat_us.push(us);
            on_server += u32::from(side == SideKind::Server);
        }
    }
    let mut r = row(w, String::new(), wh, len, &mut lat_us, out_bytes);
    r.server_share = f64::from(on_server) / f64::from(cfg.base.requests.max(1));
    Ok(r)
}
