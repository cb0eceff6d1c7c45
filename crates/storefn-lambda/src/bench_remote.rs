//! The λ bench with a storage server: every read workload under each client-cache condition and
//! each RTT (through a [`DelayProxy`] in front of the server), run always-local, always-server
//! and auto (a fresh [`Dispatcher`] per run) taking turns request by request, plus runs whose
//! conditions change midway (the cache warms or is evicted; the RTT rises; the server's CPU is
//! capped); [`goals`] judges auto against the better fixed side. Generic over the [`LambdaTransport`], so storefn-server's client
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

use crate::bench::{ensure_data, row, storefn_progs_elf, warm, BenchConfig, BenchRow, Condition};
use crate::cache::drop_cached;
use crate::dispatch::{DispatchConfig, Dispatcher, Side, SideKind, Where};
use crate::error::LambdaError;
use crate::limits::{ROUNDS_PER_HALF, WARMUP_REQUESTS};
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
    /// Also run the changing conditions: `cold->warm` (the cache warms) and `warm->cold` (the
    /// cache is evicted) at each RTT, the RTT rising from the first to the last of `rtts_us`
    /// with a warm cache, and (with a [`MidwayCap`]) the server's CPU capped midway.
    pub changes: bool,
    pub dispatch: DispatchConfig,
}

/// How one run's conditions evolve: cache dropped per request in the first/second half, the
/// proxy's RTT in each half, and whether the server's CPU is capped in the second half.
#[derive(Debug, Clone, Copy)]
struct Plan {
    cold: [bool; 2],
    rtt_us: [u64; 2],
    cap_second_half: bool,
}

/// Caps the server's CPU from the middle of a run to its end (the guard is dropped then): the
/// changing condition `cold-rttR-cpu100->P`, where a compute-heavy function's answer flips
/// from the server to the client. `percent` names the condition.
pub struct MidwayCap<'a> {
    pub percent: u32,
    pub cap: &'a dyn Fn() -> Result<crate::cpu_cap::CpuCap, LambdaError>,
}

impl std::fmt::Debug for MidwayCap<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MidwayCap").field("percent", &self.percent).finish_non_exhaustive()
    }
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
        None,
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
/// side, both through the proxy at `addr`; `midway_cap` adds the run whose server CPU is
/// capped midway (with `cfg.changes`).
///
/// # Errors
/// Generating data, the proxy, the transport, the cap, or a failed request.
pub fn run_remote_with<T: LambdaTransport>(
    cfg: &RemoteBenchConfig,
    midway_cap: Option<&MidwayCap<'_>>,
    mut connect: impl FnMut(SocketAddr) -> Result<T, LambdaError>,
    mut client: impl FnMut(
        Workload,
        &std::path::Path,
        &LambdaProg,
        SocketAddr,
    ) -> Result<Box<dyn ClientSide>, LambdaError>,
    mut progress: impl FnMut(&BenchRow),
) -> Result<Vec<BenchRow>, LambdaError> {
    let plan = |cold, rtt_us, cap_second_half| Plan { cold, rtt_us, cap_second_half };
    let mut plans: Vec<(String, Plan)> = Vec::new();
    for &rtt in &cfg.rtts_us {
        for &c in &cfg.base.conditions {
            let cold = c == Condition::Cold;
            plans.push((format!("{}-rtt{rtt}", c.as_str()), plan([cold; 2], [rtt; 2], false)));
        }
        if cfg.changes {
            plans.push((format!("cold->warm-rtt{rtt}"), plan([true, false], [rtt; 2], false)));
            plans.push((format!("warm->cold-rtt{rtt}"), plan([false, true], [rtt; 2], false)));
        }
    }
    if let (true, Some(&a), Some(&b)) = (cfg.changes, cfg.rtts_us.first(), cfg.rtts_us.last()) {
        if a != b {
            plans.push((format!("warm-rtt{a}->{b}"), plan([false; 2], [a, b], false)));
        }
        if let Some(m) = midway_cap {
            plans.push((
                format!("cold-rtt{a}-cpu100->{}", m.percent),
                plan([true; 2], [a; 2], true),
            ));
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
            let cap = midway_cap.filter(|_| plan.cap_second_half).map(|m| m.cap);
            for mut r in run_plan(cfg, w, &proxy, &mut *local, &mut server, *plan, cap)? {
                r.condition.clone_from(name);
                rows.push(r);
                progress(rows.last().unwrap());
            }
        }
        proxy.shutdown();
    }
    Ok(rows)
}

/// The orders of the sides (indices into local, server, auto): the three take turns request
/// by request, each turn in the next of the six orders, so each side goes first, and follows
/// each other side, equally often (requests right after the server's, whose thread shares the
/// client's CPUs, are slower), and load from elsewhere on the machine, which changes over
/// milliseconds, falls on all three alike.
const ORDERS: [[usize; 3]; 6] = [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 2, 1], [2, 1, 0], [1, 0, 2]];

/// One plan, always-local, always-server and auto (a fresh dispatcher kept for the whole run)
/// taking turns request by request ([`ORDERS`]); every side sees the same offsets and the same
/// conditions (the change at the half is made once, between the halves, for all three).
/// Returns the three rows, local, server, auto, each with its per-round and per-half means.
#[allow(clippy::too_many_lines)]
fn run_plan<T: LambdaTransport>(
    cfg: &RemoteBenchConfig,
    w: Workload,
    proxy: &DelayProxy,
    local: &mut dyn ClientSide,
    server: &mut RemoteSide<T>,
    plan: Plan,
    cap: Option<&dyn Fn() -> Result<crate::cpu_cap::CpuCap, LambdaError>>,
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
    // Per side: (sum, count) of each round's and each half's latencies.
    let mut rounds = [[(0.0f64, 0u32); 2 * ROUNDS_PER_HALF as usize]; 3];
    let mut half_sums = [[(0.0f64, 0u32); 2]; 3];
    let mut _capped = None;
    for (h, &half) in halves.iter().enumerate() {
        proxy.set_rtt_us(plan.rtt_us[h]).map_err(|e| io("delay proxy", e))?;
        if !plan.cold[h] {
            local.warm_all()?;
        }
        if h == 1 {
            if let Some(cap) = cap {
                _capped = Some(cap()?);
            }
        }
        // Untimed warm-up for each side before the first timed requests.
        let warm = if h == 0 { WARMUP_REQUESTS } else { 0 };
        for i in 0..warm + half {
            let timed = i.checked_sub(warm);
            for &k in &ORDERS[i as usize % ORDERS.len()] {
                let off = rngs[k].gen_range(0..=(size - len) / unit) * unit;
                if plan.cold[h] {
                    local.drop_range(off, len)?;
                }
                let t = Instant::now();
                let (side, run) = match WHERES[k] {
                    Where::Local => (SideKind::Local, local.run(off, len, &mut out)?),
                    Where::Server => (SideKind::Server, server.run(off, len, &mut out)?),
                    Where::Auto => disp.run(local, server, off, len, &mut out)?,
                };
                let us = t.elapsed().as_secs_f64() * 1e6;
                out_bytes[k] = run.out_bytes;
                let Some(j) = timed else { continue };
                lat_us[k].push(us);
                on_server[k] += u32::from(side == SideKind::Server);
                // Rounds for the spread: ROUNDS_PER_HALF consecutive stretches of the half.
                let ri = h * ROUNDS_PER_HALF as usize
                    + (j * ROUNDS_PER_HALF / half.max(1)).min(ROUNDS_PER_HALF - 1) as usize;
                for acc in [&mut rounds[k][ri], &mut half_sums[k][h]] {
                    acc.0 += us;
                    acc.1 += 1;
                }
            }
        }
    }
    let mut rows = Vec::with_capacity(3);
    for (k, &wh) in WHERES.iter().enumerate() {
        let mut r = row(w, String::new(), wh, len, &mut lat_us[k], out_bytes[k]);
        r.server_share = f64::from(on_server[k]) / f64::from(cfg.base.requests.max(1));
        r.dispatch = (wh == Where::Auto).then(|| disp.stats());
        let mean = |(sum, n): (f64, u32)| if n == 0 { 0.0 } else { sum / f64::from(n) };
        r.round_us = rounds[k].iter().map(|&a| mean(a)).collect();
        r.half_us = half_sums[k].map(mean);
        rows.push(r);
    }
    Ok(rows)
}

/// How a (workload, condition) is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judged {
    /// Steady conditions: auto within [`STEADY_GOAL_RATIO`] of the better fixed side.
    Steady,
    /// The conditions changed midway but the better fixed side did not (by the rows' own
    /// halves: same winner, or a winner ahead by less than [`FLIP_MARGIN`] in a half): "below
    /// both" could only be met by noise, so judged as steady.
    Unchanged,
    /// The better fixed side flipped at the change, `(first half, second half)`, each ahead
    /// by at least [`FLIP_MARGIN`]: auto must beat both fixed sides.
    Flip(SideKind, SideKind),
}

impl Judged {
    /// The goal line's label: `steady`, `unchanged`, `flip-server->local`.
    #[must_use]
    pub fn label(self) -> String {
        let s = |k: SideKind| k.as_where().as_str();
        match self {
            Judged::Steady => "steady".into(),
            Judged::Unchanged => "unchanged".into(),
            Judged::Flip(a, b) => format!("flip-{}->{}", s(a), s(b)),
        }
    }
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
    /// The smallest and largest per-round `auto / min(local, server)`: the run's noise (the
    /// three sides take turns round by round).
    pub round_ratio: (f64, f64),
    /// The median over the rounds of auto over the better fixed side in that round's half
    /// (by the half's means): a figure one preempted request (a 4 ms stall among 1,200
    /// requests of 10 µs moves a row's mean by 30%) does not move, but noisier than the
    /// means where a stretch is short (20 requests of a capped 1 MiB row). `ratio` when the
    /// row has no rounds.
    pub round_median: f64,
    /// Steady or unchanged: `round_median <= STEADY_GOAL_RATIO`, the goal judged by the
    /// median of rounds instead of the means (reported beside `met`).
    pub met_by_rounds: bool,
    /// Half-width of the ratio's 95% interval from its rounds (twice the standard error of
    /// the per-round ratios): how far the run's own noise could have moved `ratio`. 0 when
    /// the row has no rounds.
    pub noise: f64,
    /// Steady or unchanged: `ratio - noise <= STEADY_GOAL_RATIO`, a row this run cannot tell
    /// from one that meets the goal.
    pub within_noise: bool,
    /// The conditions changed midway (`->` in the name).
    pub changing: bool,
    pub judged: Judged,
    /// Steady or unchanged: auto within 5% of the better fixed side; flip: auto below both
    /// (the whole run's means: the goal is the time per request).
    pub met: bool,
}

/// Steady rows may be this much slower than the better fixed side (the goal: within 5%).
pub const STEADY_GOAL_RATIO: f64 = 1.05;

/// A changing run's answer flips when each half's better fixed side is ahead of the other by
/// at least this factor and they differ; a closer half is within the run's noise.
pub const FLIP_MARGIN: f64 = 1.10;

/// The sweep's rows judged against the goals, one line per (workload, condition) that has all
/// three sides.
#[must_use]
pub fn goals(rows: &[BenchRow]) -> Vec<GoalLine> {
    let mut lines = Vec::new();
    for r in rows.iter().filter(|r| r.r#where == Where::Auto) {
        let side = |wh| {
            rows.iter()
                .find(|o| o.workload == r.workload && o.condition == r.condition && o.r#where == wh)
        };
        let (Some(l), Some(s)) = (side(Where::Local), side(Where::Server)) else { continue };
        let best = l.us_per_request.min(s.us_per_request);
        let ratio = r.us_per_request / best;
        let changing = r.condition.contains("->");
        let judged = if changing { flip(l.half_us, s.half_us) } else { Judged::Steady };
        let rounds = round_ratios(r, l, s);
        let round_median =
            rounds.map_or(ratio, |(mut v, n)| storefn_stats::median(&mut v[..n]).unwrap_or(ratio));
        let noise = rounds.map_or(0.0, |(v, n)| 2.0 * storefn_stats::standard_error(&v[..n]));
        let flips = matches!(judged, Judged::Flip(..));
        let met = if flips { ratio < 1.0 } else { ratio <= STEADY_GOAL_RATIO };
        let per_round = r
            .round_us
            .iter()
            .zip(l.round_us.iter().zip(&s.round_us))
            .filter(|&(&a, (&l, &s))| a > 0.0 && l > 0.0 && s > 0.0)
            .map(|(&a, (&l, &s))| a / l.min(s));
        let round_ratio =
            per_round.fold((f64::INFINITY, 0.0f64), |(lo, hi), x| (lo.min(x), hi.max(x)));
        let round_ratio = if round_ratio.1 == 0.0 { (ratio, ratio) } else { round_ratio };
        lines.push(GoalLine {
            workload: r.workload,
            condition: r.condition.clone(),
            local_us: l.us_per_request,
            server_us: s.us_per_request,
            auto_us: r.us_per_request,
            ratio,
            round_ratio,
            round_median,
            met_by_rounds: !flips && round_median <= STEADY_GOAL_RATIO,
            noise,
            within_noise: !flips && ratio - noise <= STEADY_GOAL_RATIO,
            changing,
            judged,
            met,
        });
    }
    lines
}

/// Per round, `auto` over the better fixed side of the round's half, and how many rounds
/// (`None` without complete rounds and halves).
fn round_ratios(
    auto: &BenchRow,
    local: &BenchRow,
    server: &BenchRow,
) -> Option<([f64; 2 * ROUNDS_PER_HALF as usize], usize)> {
    let n = auto.round_us.len();
    if n == 0 || local.round_us.len() != n || server.round_us.len() != n {
        return None;
    }
    let per_half = n / auto.half_us.len();
    let mut all = [0.0; 2 * ROUNDS_PER_HALF as usize];
    let ratios = all.get_mut(..n)?;
    for (i, x) in ratios.iter_mut().enumerate() {
        let h = (i / per_half.max(1)).min(auto.half_us.len() - 1);
        let better = if local.half_us[h] <= server.half_us[h] { local } else { server };
        let (a, b) = (auto.round_us[i], better.round_us[i]);
        if a <= 0.0 || b <= 0.0 {
            return None;
        }
        *x = a / b;
    }
    Some((all, n))
}

/// Did the better fixed side flip between the halves ([`FLIP_MARGIN`])?
fn flip(local: [f64; 2], server: [f64; 2]) -> Judged {
    let winner = |h: usize| {
        let (l, s) = (local[h], server[h]);
        let (w, lead) =
            if l <= s { (SideKind::Local, s / l.max(1e-9)) } else { (SideKind::Server, l / s) };
        (lead >= FLIP_MARGIN).then_some(w)
    };
    match (winner(0), winner(1)) {
        (Some(a), Some(b)) if a != b => Judged::Flip(a, b),
        _ => Judged::Unchanged,
    }
}

/// The bench's client side of a remote file: cold drops blocks from the client cache, warm
/// reads the whole file into it.
impl ClientSide for crate::RemoteReadSide {
    fn size_bytes(&mut self) -> Result<u64, LambdaError> {
        crate::RemoteReadSide::size_bytes(self)
    }

    fn drop_range(&mut self, off: u64, len: u64) -> Result<(), LambdaError> {
        self.drop_cached(off, len);
        Ok(())
    }

    fn warm_all(&mut self) -> Result<(), LambdaError> {
        let size = self.size_bytes()?;
        let mut at = 0;
        while at < size {
            let n = crate::limits::MAX_REMOTE_READ_BYTES.min(size - at);
            self.fetch(at, n)?;
            at += n;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(cond: &str, wh: Where, us: f64) -> BenchRow {
        row(Workload::Knn, cond.into(), wh, 4096, &mut [us], 8)
    }

    fn halves(cond: &str, wh: Where, us: f64, half_us: [f64; 2]) -> BenchRow {
        BenchRow { half_us, ..r(cond, wh, us) }
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
            // The server wins the cold half, the client the warm one: auto must beat both.
            halves("cold->warm-rtt0", Where::Local, 500.0, [900.0, 100.0]),
            halves("cold->warm-rtt0", Where::Server, 400.0, [400.0, 400.0]),
            halves("cold->warm-rtt0", Where::Auto, 399.0, [400.0, 398.0]),
            // The client wins both halves: judged as steady.
            halves("warm-rtt0->1000", Where::Local, 100.0, [100.0, 100.0]),
            halves("warm-rtt0->1000", Where::Server, 900.0, [400.0, 1400.0]),
            halves("warm-rtt0->1000", Where::Auto, 103.0, [103.0, 103.0]),
            // A flip by less than FLIP_MARGIN in a half is not one.
            halves("warm->cold-rtt0", Where::Local, 300.0, [100.0, 500.0]),
            halves("warm->cold-rtt0", Where::Server, 290.0, [300.0, 480.0]),
            halves("warm->cold-rtt0", Where::Auto, 300.0, [100.0, 500.0]),
        ];
        let g = goals(&rows);
        let met: Vec<(&str, bool, Judged, bool)> =
            g.iter().map(|g| (g.condition.as_str(), g.changing, g.judged, g.met)).collect();
        assert_eq!(
            met,
            [
                ("warm-rtt0", false, Judged::Steady, true),
                ("cold-rtt0", false, Judged::Steady, false),
                ("cold->warm-rtt0", true, Judged::Flip(SideKind::Server, SideKind::Local), true),
                ("warm-rtt0->1000", true, Judged::Unchanged, true),
                ("warm->cold-rtt0", true, Judged::Unchanged, true),
            ]
        );
        assert!((g[1].ratio - 1.06).abs() < 1e-12);
        assert_eq!(g[2].judged.label(), "flip-server->local");
    }

    #[test]
    fn the_round_spread_is_auto_over_the_better_side_per_round() {
        let rounds =
            |cond: &str, wh, us: [f64; 3]| BenchRow { round_us: us.to_vec(), ..r(cond, wh, 1.0) };
        let rows = [
            rounds("warm-rtt0", Where::Local, [100.0, 100.0, 200.0]),
            rounds("warm-rtt0", Where::Server, [300.0, 90.0, 300.0]),
            rounds("warm-rtt0", Where::Auto, [110.0, 99.0, 180.0]),
        ];
        let g = goals(&rows);
        assert!((g[0].round_ratio.0 - 0.9).abs() < 1e-12, "{:?}", g[0].round_ratio);
        assert!((g[0].round_ratio.1 - 1.1).abs() < 1e-12, "{:?}", g[0].round_ratio);
    }

    #[test]
    fn the_median_of_rounds_is_reported_beside_the_means() {
        // One round with a stall (auto 4x in round 2) moves the row's mean past 5% but not the
        // median of rounds; a row slower in most rounds misses either way.
        let rows = |cond: &str, auto: [f64; 4]| {
            let mk = |wh, us: [f64; 4]| BenchRow {
                round_us: us.to_vec(),
                half_us: [(us[0] + us[1]) / 2.0, (us[2] + us[3]) / 2.0],
                ..r(cond, wh, us.iter().sum::<f64>() / 4.0)
            };
            [
                mk(Where::Local, [10.0, 10.0, 10.0, 10.0]),
                mk(Where::Server, [300.0, 300.0, 300.0, 300.0]),
                mk(Where::Auto, auto),
            ]
        };
        let mut all = rows("warm-rtt0", [10.2, 40.0, 10.3, 10.1]).to_vec();
        all.extend(rows("warm-rtt200", [10.6, 10.7, 10.2, 10.8]));
        let g = goals(&all);
        assert!(g[0].ratio > 1.5 && !g[0].met, "{:?}", g[0]);
        // Ratios 1.01, 1.02, 1.03, 4: the upper middle of an even count.
        assert!((g[0].round_median - 1.03).abs() < 1e-9 && g[0].met_by_rounds, "{:?}", g[0]);
        // Their standard error is sd / 2 (four rounds), the noise twice that: sd, 1.4900.
        assert!((g[0].noise - 1.4900).abs() < 1e-4, "{:?}", g[0]);
        assert!(g[0].within_noise, "{:?}", g[0]);
        assert!(g[1].round_median > 1.05 && !g[1].met && !g[1].met_by_rounds, "{:?}", g[1]);
    }
}
