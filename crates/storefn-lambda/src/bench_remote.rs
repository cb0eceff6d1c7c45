//! The λ bench with a storage server: every read workload under each client-cache condition and
//! each RTT (through a [`DelayProxy`] in front of the server), run always-local, always-server
//! and auto (a fresh [`Dispatcher`] per run) taking turns in rounds, plus runs whose conditions
//! change midway (the cache warms; the RTT rises); [`goals`] judges auto against the better
//! fixed side. Generic over the [`LambdaTransport`], so storefn-server's client
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

/// The client side of a remote bench: a [`Side`] whose cache the harness can drop or fill.
pub trait ClientSide: Side {
    /// Bytes of the file the side reads.
    ///
    /// # Errors
    /// As the side's file access.
    fn size_bytes(&mut self) -> Result<u64, LambdaError>;
    /// Makes `[off, off + len)` uncached for the next request.
    ///
    /// # Errors
    /// As the side's cache control.
    fn drop_range(&mut self, off: u64, len: u64) -> Result<(), LambdaError>;
    /// Caches the whole file.
    ///
    /// # Errors
    /// As the side's reads.
    fn warm_all(&mut self) -> Result<(), LambdaError>;
}

/// The local file through the page cache (shared with a server on the same machine).
impl ClientSide for LocalSide {
    fn size_bytes(&mut self) -> Result<u64, LambdaError> {
        Ok(self.file.size_bytes())
    }

    fn drop_range(&mut self, off: u64, len: u64) -> Result<(), LambdaError> {
        drop_cached(self.file.file(), off, len).map_err(|source| LambdaError::Io {
            path: self.file.path().to_path_buf(),
            what: "fadvise",
            source,
        })
    }

    fn warm_all(&mut self) -> Result<(), LambdaError> {
        warm(&mut self.file)
    }
}

/// Runs the sweep with the client reading the data file directly (a [`LocalSide`]);
/// `connect(addr)` opens a transport to the server through the proxy at `addr`.
///
/// # Errors
/// Generating data, the proxy, the transport, or a failed request.
pub fn run_remote<T: LambdaTransport>(
    cfg: &RemoteBenchConfig,
    connect: impl FnMut(SocketAddr) -> Result<T, LambdaError>,
    progress: impl FnMut(&BenchRow),
) -> Result<Vec<BenchRow>, LambdaError> {
    let engine = cfg.base.engine;
    run_remote_with(
        cfg,
        connect,
        |_, path, prog, _| {
            Ok(Box::new(LocalSide {
                file: LocalFile::open(path, IoMode::Buffered)?,
                prog: prog.instance(engine)?,
            }))
        },
        progress,
    )
}

/// Runs the sweep; `connect(addr)` opens the server transport and `client(...)` the client
/// side, both through the proxy at `addr`.
///
/// # Errors
/// Generating data, the proxy, the transport, or a failed request.
pub fn run_remote_with<T: LambdaTransport>(
    cfg: &RemoteBenchConfig,
    mut connect: impl FnMut(SocketAddr) -> Result<T, LambdaError>,
    mut client: impl FnMut(
        Workload,
        &std::path::Path,
        &LambdaProg,
        SocketAddr,
    ) -> Result<Box<dyn ClientSide>, LambdaError>,
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
        let served = format!("{}{}.dat", cfg.served_prefix, w.name());
        let proxy =
            DelayProxy::spawn("127.0.0.1:0".parse().expect("literal address"), cfg.server, 0, None)
                .map_err(|source| LambdaError::Io {
                    path: path.clone(),
                    what: "delay proxy",
                    source,
                })?;
        let mut local = client(w, &path, &prog, proxy.local_addr())?;
        let mut server = RemoteSide::new(connect(proxy.local_addr())?, &served, &prog)?;
        for (name, plan) in &plans {
            for mut r in run_plan(cfg, w, &proxy, &mut *local, &mut server, *plan)? {
                r.condition.clone_from(name);
                rows.push(r);
                progress(rows.last().unwrap());
            }
        }
        proxy.shutdown();
    }
    Ok(rows)
}

/// Rounds each half of a run is cut into: local, server and auto take turns round by round,
/// so load from elsewhere on the machine falls on all three alike (ratios inside one run).
/// Each round runs them in one of the six orders ([`ORDERS`]): each side goes first, and
/// follows each other side, equally often (the requests right after the server's, whose
/// thread shares the client's CPUs, are slower).
pub const ROUNDS_PER_HALF: u32 = 6;

/// The orders of the sides (indices into local, server, auto) the rounds run them in.
const ORDERS: [[usize; 3]; 6] = [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 2, 1], [2, 1, 0], [1, 0, 2]];

/// One plan, always-local, always-server and auto (a fresh dispatcher kept for the whole run)
/// taking turns in rounds ([`ORDERS`]); every side sees the same offsets and the same
/// conditions (the change at the half is made once, between the halves, for all three).
/// Returns the three rows, local, server, auto.
fn run_plan<T: LambdaTransport>(
    cfg: &RemoteBenchConfig,
    w: Workload,
    proxy: &DelayProxy,
    local: &mut dyn ClientSide,
    server: &mut RemoteSide<T>,
    plan: Plan,
) -> Result<Vec<BenchRow>, LambdaError> {
    const WHERES: [Where; 3] = [Where::Local, Where::Server, Where::Auto];
    let io = |what, source| LambdaError::Io { path: w.name().into(), what, source };
    let unit = w.unit_bytes();
    let size = local.size_bytes()?;
    let len = (cfg.base.request_bytes / unit).max(1) * unit;
    if len > size {
        return Err(LambdaError::OutsideFile { path: w.name().into(), off: 0, len, size });
    }
    let mut out = vec![0u8; w.out_cap(usize::try_from(len).unwrap_or(usize::MAX))];
    let mut disp = Dispatcher::new(cfg.dispatch);
    // The same offsets for every `where`, so the rows compare like with like.
    let mut rngs = [0; 3].map(|_| SmallRng::seed_from_u64(cfg.base.seed ^ 0x5eed));
    let halves = [cfg.base.requests / 2, cfg.base.requests - cfg.base.requests / 2];
    let mut lat_us: [Vec<f64>; 3] = [0; 3].map(|_| Vec::with_capacity(cfg.base.requests as usize));
    let (mut on_server, mut out_bytes) = ([0u32; 3], [0usize; 3]);
    for (h, &half) in halves.iter().enumerate() {
        proxy.set_rtt_us(plan.rtt_us[h]).map_err(|e| io("delay proxy", e))?;
        if !plan.cold[h] {
            local.warm_all()?;
        }
        for round in 0..ROUNDS_PER_HALF {
            let per = half / ROUNDS_PER_HALF + u32::from(round < half % ROUNDS_PER_HALF);
            for &k in &ORDERS[round as usize % ORDERS.len()] {
                let wh = WHERES[k];
                // Untimed warm-up for each side before its first timed request.
                let warm = if h == 0 && round == 0 { WARMUP_REQUESTS } else { 0 };
                for i in 0..warm + per {
                    let off = rngs[k].gen_range(0..=(size - len) / unit) * unit;
                    if plan.cold[h] {
                        local.drop_range(off, len)?;
                    }
                    let t = Instant::now();
                    let (side, run) = match wh {
                        Where::Local => (SideKind::Local, local.run(off, len, &mut out)?),
                        Where::Server => (SideKind::Server, server.run(off, len, &mut out)?),
                        Where::Auto => disp.run(local, server, off, len, &mut out)?,
                    };
                    let us = t.elapsed().as_secs_f64() * 1e6;
                    out_bytes[k] = run.out_bytes;
                    if i >= warm {
                        lat_us[k].push(us);
                        on_server[k] += u32::from(side == SideKind::Server);
                    }
                }
            }
        }
    }
    let mut rows = Vec::with_capacity(3);
    for (k, &wh) in WHERES.iter().enumerate() {
        let mut r = row(w, String::new(), wh, len, &mut lat_us[k], out_bytes[k]);
        r.server_share = f64::from(on_server[k]) / f64::from(cfg.base.requests.max(1));
        r.dispatch = (wh == Where::Auto).then(|| disp.stats());
        rows.push(r);
    }
    Ok(rows)
}

/// Auto against the better fixed side for one (workload, condition) of a sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct GoalLine {
    pub workload: Workload,
    pub condition: String,
    pub local_us: f64,
    pub server_us: f64,
    pub auto_us: f64,
    /// `auto / min(local, server)`.
    pub ratio: f64,
    /// The conditions changed midway (`->` in the name).
    pub changing: bool,
    /// Steady: auto within 5% of the better fixed side; changing: auto below both.
    pub met: bool,
}

/// Steady rows may be this much slower than the better fixed side (the 5%).
pub const STEADY_GOAL_RATIO: f64 = 1.05;

/// The sweep's rows judged against the goals, one line per (workload, condition) that has all
/// three sides.
#[must_use]
pub fn goals(rows: &[BenchRow]) -> Vec<GoalLine> {
    let mut lines = Vec::new();
    for r in rows.iter().filter(|r| r.r#where == Where::Auto) {
        let side = |wh| {
            rows.iter()
                .find(|o| o.workload == r.workload && o.condition == r.condition && o.r#where == wh)
                .map(|o| o.us_per_request)
        };
        let (Some(l), Some(s)) = (side(Where::Local), side(Where::Server)) else { continue };
        let best = l.min(s);
        let ratio = r.us_per_request / best;
        let changing = r.condition.contains("->");
        let met = if changing { ratio < 1.0 } else { ratio <= STEADY_GOAL_RATIO };
        lines.push(GoalLine {
            workload: r.workload,
            condition: r.condition.clone(),
            local_us: l,
            server_us: s,
            auto_us: r.us_per_request,
            ratio,
            changing,
            met,
        });
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(cond: &str, wh: Where, us: f64) -> BenchRow {
        row(Workload::Knn, cond.into(), wh, 4096, &mut [us], 8)
    }

    #[test]
    fn goals_judge_auto_against_the_better_fixed_side() {
        let rows = [
            r("warm-rtt0", Where::Local, 100.0),
            r("warm-rtt0", Where::Server, 900.0),
            r("warm-rtt0", Where::Auto, 104.0),
            r("cold-rtt0", Where::Local, 900.0),
            r("cold-rtt0", Where::Server, 100.0),
            r("cold-rtt0", Where::Auto, 106.0),
            r("cold->warm-rtt0", Where::Local, 500.0),
            r("cold->warm-rtt0", Where::Server, 400.0),
            r("cold->warm-rtt0", Where::Auto, 399.0),
            r("warm-rtt0->1000", Where::Local, 100.0),
            r("warm-rtt0->1000", Where::Server, 900.0),
            r("warm-rtt0->1000", Where::Auto, 100.0),
        ];
        let g = goals(&rows);
        let met: Vec<(&str, bool, bool)> =
            g.iter().map(|g| (g.condition.as_str(), g.changing, g.met)).collect();
        assert_eq!(
            met,
            [
                ("warm-rtt0", false, true),
                ("cold-rtt0", false, false),
                ("cold->warm-rtt0", true, true),
                ("warm-rtt0->1000", true, false),
            ]
        );
        assert!((g[1].ratio - 1.06).abs() < 1e-12);
    }
}
