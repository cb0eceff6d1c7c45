//! The dispatcher: run each λ request on the client ("local") or the storage server, chosen by
//! λ-IO's measured cost model (docs/design/lambda.md, "λ-IO").
//!
//! **Model.** Every request that runs is a sample of its side (ns per input byte). A side's
//! *level* is the median of its last samples (32), its *tail factor* the running mean of
//! sample / level (over [`TAIL_SAMPLES`]), and its estimate `level x tail`: the mean cost, its
//! own stalls included, from a level that a few stalls do not move. The server's level is the
//! median of its wall times. The local level is `compute + hit x (1 - u) + miss x u` per byte
//! (each a median of its own samples), where `u` is the uncached fraction of the request's
//! range (the client's cache state), `compute` the function's time, `hit` the I/O time of a
//! cached range and `miss` of an uncached one. λ-IO's "I/O time scaled by the uncached
//! fraction" is the case `hit = 0`. So a change of the cache state moves the local estimate at
//! once, without a probe. A tail factor from fewer than [`TAIL_TRUSTED`] samples counts at most
//! as much as the other side's.
//!
//! **Cache-state samples.** Asking for `u` costs a syscall (cachestat) or a walk of the client
//! block cache: 1-4 µs, more than a warm 4 KiB request. [`Dispatcher::run`] samples it only when
//! due (first request, a local sample off its level, a local probe, or, while the server wins,
//! the credit of [`CACHE_SAMPLE_BUDGET`] = 1% of the requests' time covering one more sample)
//! and reuses the last sample otherwise. Cache changes still show: on the local side as
//! samples off their level (which re-sample at once), on the server side through the budgeted
//! samples.
//!
//! **Profiling.** λ-IO profiles 5 of every 200 requests on both sides ([`Profiling::Fixed`]).
//! A probe of the losing side costs `(slow - fast)`, so that costs `5/200 x (slow/fast - 1)`:
//! 22% when the sides differ 10x. [`Profiling::Adaptive`] (the default) keeps a credit: each
//! request adds `budget x` the winner's estimate, a probe of the loser spends its expected
//! excess `loser - winner`; so probes of a loser twice as slow come often, of one 100x slower
//! rarely, and their cost stays within `budget` of the winner's time whatever the ratio, and
//! never more often than once in [`MIN_PROBE_INTERVAL`] requests (a loser 7% behind costs
//! little to lose to, and little to learn about). The dispatcher's own per-request cost
//! (deciding, recording; timed on one decided request in [`OWN_COST_EVERY`]) and the
//! cache-state samples are paid from the same budget first.
//!
//! **Fast path.** While the local side wins with the server more than [`FAR_BEHIND`] behind,
//! [`SETTLED_RUN`] requests in a row run locally without the model, checking only that their
//! time is within the bounds the model would not react to; one outside goes through the model.
//!
//! **Change signals** re-probe at once: a sample (of either side) more than `change_threshold`
//! away from its side's level, and outside the side's own recent spread (the ratios of its
//! last samples to their levels: a bimodal side does not signal on each mode), is confirmed
//! by one more sample (at once for a loser's sample that says it got faster; a loser that got
//! slower is left to the budgeted probes), and two in a row in the same direction replace the
//! side's history; an estimate the model cannot make (the range went cold and no uncached
//! local sample exists) probes that side. Samples are judged against the level, not the
//! estimate: a side that stalls now and then has its usual samples well under its mean.
//!
//! **Cold start.** Before a side has [`MIN_SAMPLES`] its preliminary estimate (the cold
//! start's far-behind test) is the mean of the samples it has, never its best one: a side
//! measured far behind needs more than one fast sample to win back.

use std::fmt;
use std::str::FromStr;
use std::time::Instant;

use crate::error::LambdaError;

/// Most samples kept per quantity (a fixed ring: no allocation per request).
pub const MAX_SAMPLES: usize = 32;
/// Samples a side needs before its estimate is trusted (cold start probes until then).
pub const MIN_SAMPLES: usize = 3;
/// Share of the winner's time always left for probing the loser, even when the dispatcher's
/// own per-request cost uses up the budget: without probes a recovered loser is never seen.
pub const MIN_PROBE_BUDGET: f64 = 0.005;
/// Weight of the newest measurement in the running mean of the dispatcher's own cost.
const OVERHEAD_EWMA: f64 = 1.0 / 8.0;
/// The dispatcher times its own work (deciding, recording) on one request in this many: four
/// clock reads on every request were a visible share of a 1 µs warm request.
pub const OWN_COST_EVERY: u64 = 32;
/// Share of the requests' time spent sampling the client's cache state (`cachestat(2)` for a
/// local file, the block cache's lookups for a remote one) when nothing signals a change. The
/// uncached fraction last sampled stands for the file's cache state in between: a local
/// sample off its estimate, a local probe, or this credit sampling it again.
pub const CACHE_SAMPLE_BUDGET: f64 = 0.01;
/// Weight of the newest sample in the running mean of a cache-state sample's cost.
const CACHE_SAMPLE_EWMA: f64 = 1.0 / 4.0;
/// A cache-state sample's measured cost counts at most this many times the running cost (a
/// preempted sample is not what sampling costs).
const CACHE_SAMPLE_OUTLIER: f64 = 2.0;

/// A side whose first samples (fewer than [`MIN_SAMPLES`]) are more than this many times the
/// other side's is taken as losing at once: measuring a side 500x slower three times before
/// deciding is the whole overhead of a short run (a warm client cache against a network round
/// trip; a cold 1 MiB range read over the network against the server's answer). The cold
/// start therefore runs one request on each side first. Budgeted probes add the loser's
/// remaining samples; a first sample that was an outlier is corrected by them.
pub const FAR_BEHIND: f64 = 4.0;

/// Fewest requests between two budgeted probes of the loser. Where the sides are close the
/// budget alone would probe very often (a loser 7% behind, every second request: the whole
/// budget spent where a wrong choice costs little, and a cold row's auto 3.5% over the better
/// side with only noise left for the margin). Once in 32 requests keeps the loser's level
/// (the median of its last [`MAX_SAMPLES`]) fresh over 1,024 requests and costs at most
/// `(loser/winner - 1) / 32`: 1% for a loser 1.33x behind (every 16 requests: 2%, and
/// 1.031x instead of 1.022x the better side for sides with rare stalls, in virtual time). A
/// loser more than `1 + 32 x budget` behind (2.1x at 3.5%) is probed less often anyway.
pub const MIN_PROBE_INTERVAL: u32 = 32;

/// Requests the local side runs without the model after one it decided, while it wins with
/// the server more than [`FAR_BEHIND`] behind (a warm client cache): they check only that
/// their time is within the bounds the model would not react to (its estimate, the change
/// threshold, the side's spread), and one off them goes through the model at once. Deciding
/// and recording, with the model's state out of the CPU cache after the function streamed
/// its range, cost 0.3-0.6 µs: 3-6% of a warm 64 KiB request. The estimates then follow one
/// request in eight, and probes and confirmations wait at most this many requests.
pub const SETTLED_RUN: u32 = 7;

/// An uncached fraction at or below this makes a local sample a "cached" I/O sample.
pub const CACHED_BELOW: f64 = 0.1;

/// Where a request runs: the `--where` argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Where {
    /// In this process: read the range (through the client's cache), run the function here.
    Local,
    /// On the storage server: only the function's output crosses the network.
    Server,
    /// Per request, by the dispatcher's model.
    Auto,
}

impl Where {
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Where::Local => "local",
            Where::Server => "server",
            Where::Auto => "auto",
        }
    }
}

impl fmt::Display for Where {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Where {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "local" => Ok(Where::Local),
            "server" => Ok(Where::Server),
            "auto" => Ok(Where::Auto),
            _ => Err(format!("unknown --where {s:?}: expected local, server or auto")),
        }
    }
}

/// One of the two sides a request can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SideKind {
    Local,
    Server,
}

impl SideKind {
    #[must_use]
    pub fn as_where(self) -> Where {
        match self {
            SideKind::Local => Where::Local,
            SideKind::Server => Where::Server,
        }
    }

    fn other(self) -> Self {
        match self {
            SideKind::Local => SideKind::Server,
            SideKind::Server => SideKind::Local,
        }
    }
}

/// What one request cost on the side that ran it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Run {
    /// Output bytes the function returned.
    pub out_bytes: usize,
    /// The request's wall time, as the caller saw it.
    pub wall_ns: u64,
    /// Local side only: reading the range (0 elsewhere).
    pub io_ns: u64,
    /// Local side only: running the function (0 elsewhere).
    pub compute_ns: u64,
}

/// A place a λ request can run: the local file, or the server's LAMBDA frame.
pub trait Side {
    fn kind(&self) -> SideKind;

    /// Runs the side's function over `[off, off + len)` of its file into `out`.
    ///
    /// # Errors
    /// The request's failure, naming the file and range.
    fn run(&mut self, off: u64, len: u64, out: &mut [u8]) -> Result<Run, LambdaError>;

    /// Fraction of `[off, off + len)` not in the client's cache; `None` for a side that does
    /// not read through it (the server).
    fn uncached_fraction(&mut self, _off: u64, _len: u64) -> Option<f64> {
        None
    }
}

/// How the dispatcher profiles.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Profiling {
    /// λ-IO's: the first `probes` requests of every `window` run on the local side, the next
    /// `probes` on the server, the rest on the predicted winner.
    Fixed { window: u32, probes: u32 },
    /// Probe the loser only as often as `budget` (fraction of the winner's time) pays for,
    /// after the dispatcher's own per-request cost (deciding, recording) and the cache-state
    /// samples ([`CACHE_SAMPLE_BUDGET`]) have been paid from it; at least [`MIN_PROBE_BUDGET`]
    /// stays for probes.
    Adaptive { budget: f64 },
}

/// Dispatcher settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DispatchConfig {
    pub profiling: Profiling,
    /// Samples kept per quantity (<= [`MAX_SAMPLES`]): its level is their median.
    pub samples: usize,
    /// Relative distance from the estimate that makes a sample a change signal.
    pub change_threshold: f64,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        Self {
            // 4.5%, bookkeeping included: half a point of margin under the 5% goal for
            // estimates that are a little off.
            profiling: Profiling::Adaptive { budget: 0.045 },
            // Levels are medians of the last 32 samples; estimates are level x tail factor, so
            // a side's tail counts (a capped server's throttling stalls, one request in twenty
            // 20x slower, are its own cost: trimming them away chose such a server over a
            // client 1.46x better on average, `tails_that_are_a_sides_own_cost_count`).
            samples: MAX_SAMPLES,
            change_threshold: 0.25,
        }
    }
}

/// A fixed ring of the latest samples with their mean and a sorted copy (median, bounds),
/// kept up to date when a sample arrives
/// (the model reads the means on every request; samples arrive once per request on one side).
/// The mean keeps a running sum (exact again at every wrap); the sorted copy takes one removal
/// and one insertion per sample. Sorting on every sample was most of the dispatcher's own time
/// on 1 µs requests.
#[derive(Debug, Clone, Copy)]
struct Ring {
    v: [f64; MAX_SAMPLES],
    /// `v[..len]` in ascending order.
    sorted: [f64; MAX_SAMPLES],
    /// Sum of `v[..len]`.
    sum: f64,

    len: usize,
    next: usize,
    cap: usize,
    mean: Option<f64>,
}

impl Ring {
    fn new(cap: usize) -> Self {
        let cap = cap.clamp(1, MAX_SAMPLES);
        let v = [0.0; MAX_SAMPLES];
        Self { v, sorted: v, sum: 0.0, len: 0, next: 0, cap, mean: None }
    }

    fn push(&mut self, x: f64) {
        debug_assert!(x.is_finite(), "a sample is a finite cost: {x}");
        if self.len == self.cap {
            let old = self.v[self.next];
            self.sum -= old;
            // Remove the sample this one replaces (same bits: it was stored as is).
            let at = self.sorted[..self.len]
                .iter()
                .position(|s| s.to_bits() == old.to_bits())
                .expect("every ring sample is in the sorted copy");
            self.sorted.copy_within(at + 1..self.len, at);
            self.len -= 1;
        }
        let at = self.sorted[..self.len].partition_point(|s| *s <= x);
        self.sorted.copy_within(at..self.len, at + 1);
        self.sorted[at] = x;
        debug_assert!(self.sorted[..=self.len].windows(2).all(|w| w[0] <= w[1]));
        self.len += 1;
        self.v[self.next] = x;
        self.sum += x;
        self.next += 1;
        if self.next == self.cap {
            self.next = 0;
            // Once per wrap: no rounding drift from the running sum.
            self.sum = self.v[..self.len].iter().sum();
        }
        self.mean = self.plain_mean();
    }

    fn clear(&mut self) {
        self.len = 0;
        self.next = 0;
        self.sum = 0.0;
        self.mean = None;
    }

    /// Mean of the samples, `None` below [`MIN_SAMPLES`].
    fn mean(&self) -> Option<f64> {
        self.mean
    }

    /// The smallest and largest sample kept (`None` when empty).
    fn bounds(&self) -> Option<(f64, f64)> {
        (self.len > 0).then(|| (self.sorted[0], self.sorted[self.len - 1]))
    }

    /// The median (upper middle) of the samples, `None` when empty: a side's level, which
    /// its own tail does not move (the change signals' reference, not the estimate's).
    fn median(&self) -> Option<f64> {
        (self.len > 0).then(|| self.sorted[self.len / 2])
    }

    /// The side's preliminary estimate, even below [`MIN_SAMPLES`]: the mean once
    /// there are enough samples, the plain mean of the one or two there are before (`None`
    /// when empty). Never the best sample: one fast outlier of a side measured far behind
    /// (a bimodal 5 ms among 50 ms requests) must not win it back on its own.
    fn mean_any(&self) -> Option<f64> {
        if self.len == 0 {
            return None;
        }
        #[allow(clippy::cast_precision_loss)]
        self.mean.or_else(|| Some(self.sum / self.len as f64))
    }

    fn plain_mean(&self) -> Option<f64> {
        if self.len < MIN_SAMPLES.min(self.cap) {
            return None;
        }
        #[allow(clippy::cast_precision_loss)]
        Some(self.sum / self.len as f64)
    }
}

/// Pending confirmation of a change: direction (+1 slower, -1 faster, 0 none), how many
/// samples in a row said so, and the first one's ratio to its estimate (it joins the side's
/// spread if not confirmed).
#[derive(Debug, Clone, Copy, Default)]
struct Suspect {
    dir: i8,
    seen: u8,
    ratio: f64,
}

/// Samples in a row that confirm a change. The winner getting slower needs one more: its
/// samples come on every request, so a burst of load on the machine (a few slow requests in a
/// row, on both sides alike) would otherwise drop its history and send the next requests to
/// the other side until probes win it back; a real slowdown costs one request more to see.
const CONFIRM_SAMPLES: u8 = 2;
const CONFIRM_WINNER_SLOWER: u8 = 3;

/// The quantities one side's estimate is made of (ns per input byte).
#[derive(Debug, Clone, Copy)]
struct SideModel {
    /// Server: wall time. Local: the function's time.
    main: Ring,
    /// Local: I/O time of cached ranges.
    hit: Ring,
    /// Local: I/O time of uncached ranges, normalized to a fully uncached range.
    miss: Ring,
    /// The latest samples over the estimate they were judged against: the side's own spread.
    /// A sample is a change signal only outside it (and outside the threshold), so a bimodal
    /// side (5 ms now and then among 50 ms requests) does not signal on each mode.
    spread: Ring,
    suspect: Suspect,
    /// The side's mean over its level (median): a running mean of sample / level, so the
    /// estimate is `level x tail`. The level follows the side within a few samples and its
    /// own tail does not move it; the tail is the shape of the side's noise, averaged over
    /// [`TAIL_SAMPLES`]. A plain mean of the last 32 samples of a side that stalls once in
    /// twenty for 10x holds 1.6 stalls on average and moved by a quarter either way: two
    /// sides 1.3x apart swapped places in their estimates every few dozen requests (auto
    /// 1.2x the better side on a capped server's cold rows).
    tail: f64,
    /// Samples in `tail` (its weight is `1/n` until [`TAIL_SAMPLES`]).
    tail_n: u32,
}

/// Samples the tail factor of a side averages over (the weight of the newest is at least
/// `1 / TAIL_SAMPLES`).
pub const TAIL_SAMPLES: u32 = 128;
/// Samples a side's tail factor needs before it is trusted beyond the other side's.
pub const TAIL_TRUSTED: u32 = 16;
/// After a confirmed change the tail factor keeps its value but weighs the next samples as
/// if it had only this many: a change of level often comes with a change of shape (a server
/// capped midway starts to stall).
const TAIL_AFTER_CHANGE: u32 = 8;

impl SideModel {
    fn new(n: usize) -> Self {
        Self {
            main: Ring::new(n),
            hit: Ring::new(n),
            miss: Ring::new(n),
            spread: Ring::new(n),
            suspect: Suspect::default(),
            tail: 1.0,
            tail_n: 0,
        }
    }

    /// Adds one sample's `x / level` to the tail factor.
    fn add_tail(&mut self, ratio: f64) {
        debug_assert!(ratio.is_finite() && ratio >= 0.0, "{ratio}");
        self.tail_n = self.tail_n.saturating_add(1);
        let w = 1.0 / f64::from(self.tail_n.min(TAIL_SAMPLES));
        self.tail += w * (ratio - self.tail);
    }

    /// After a confirmed change ([`TAIL_AFTER_CHANGE`]).
    fn tail_changed(&mut self) {
        self.tail_n = self.tail_n.min(TAIL_AFTER_CHANGE);
    }

    /// Is `x` off `est` by more than `thr` and outside the side's spread?
    fn outside(&self, est: f64, x: f64, thr: f64) -> bool {
        let (lo, hi) = self.spread.bounds().unwrap_or((1.0, 1.0));
        let ratio = if est > 0.0 { x / est } else { 1.0 };
        ratio > (1.0 + thr).max(hi) || ratio < (1.0 - thr).min(lo)
    }

    /// Judges `x` against `est` ([`signal`]) and the side's spread; true = a confirmed change.
    ///
    /// A suspect sample joins the spread only once the next sample did not confirm it (an
    /// outlier of the side's own noise); a confirmed change starts the spread afresh. So a
    /// mode seen twice in a row stays a change (a server recovering), and a mode that comes
    /// and goes widens the spread (a bimodal side).
    fn judge(&mut self, est: f64, x: f64, thr: f64, winner: bool) -> bool {
        let (lo, hi) = self.spread.bounds().unwrap_or((1.0, 1.0));
        let before = self.suspect;
        let ratio = if est > 0.0 { x / est } else { 1.0 };
        let (lo, hi) = ((1.0 - thr).min(lo), (1.0 + thr).max(hi));
        let changed = signal(&mut self.suspect, ratio, lo, hi, winner);
        if changed {
            self.spread.clear();
            return true;
        }
        if before.dir != 0 && self.suspect.dir != before.dir {
            self.spread.push(before.ratio);
        }
        if self.suspect.dir == 0 {
            self.spread.push(ratio);
        }
        false
    }
}

/// Counters a caller reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DispatchStats {
    pub requests: u64,
    pub local: u64,
    pub server: u64,
    /// Requests run on the side the model did not pick (profiling), cold start included.
    pub probes: u64,
    /// Change signals confirmed (a side's history replaced).
    pub changes: u64,
    /// Times the predicted winner changed.
    pub switches: u64,
    /// Requests before which the client's cache state was sampled (the rest reused the last
    /// sample: [`CACHE_SAMPLE_BUDGET`]).
    pub cache_samples: u64,
    /// Requests the local side ran on the fast path, without the model ([`SETTLED_RUN`]).
    pub settled: u64,
}

/// The fast path of [`SETTLED_RUN`] requests.
#[derive(Debug, Clone, Copy)]
struct Settled {
    /// Requests left on the fast path.
    left: u32,
    /// The request length the bounds were made for.
    len: u64,
    /// A local request whose I/O + compute time (ns) is outside `lo_ns..=hi_ns` is recorded.
    lo_ns: u64,
    hi_ns: u64,
    /// The local level for this length, ns, and the sum of the fast-path samples over it:
    /// they join the tail factor (outliers go through the model and join it there).
    level_ns: f64,
    tail_sum: f64,
    tail_count: u32,
}

/// A decision for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub side: SideKind,
    /// Run to measure, not because the model picked it.
    pub probe: bool,
}

/// λ-IO's dispatcher with adaptive profiling (module docs).
#[derive(Debug, Clone)]
pub struct Dispatcher {
    cfg: DispatchConfig,
    local: SideModel,
    server: SideModel,
    /// Adaptive profiling's credit, in ns.
    credit_ns: f64,
    /// Requests run on a side because its estimate was missing (cold start, or history
    /// dropped after a change), indexed local 0 / server 1, not yet charged to the credit.
    unpriced: [u32; 2],
    /// Position in the current fixed window.
    in_window: u32,
    /// Local wall times per byte since the local history was last dropped: their mean is the
    /// cold start's far-behind test before the local estimate exists ([`Ring::mean_any`]).
    local_wall: Ring,
    /// Whether `local_wall`'s samples were of a cached range (`u <= CACHED_BELOW`): a sample
    /// of the other cache state starts it afresh (a cold range's 405 µs and a warm one's
    /// 10 µs are not one side's noise: the cache state explains them).
    local_wall_cached: Option<bool>,
    /// A side (local 0, server 1) taken as far behind before it had an estimate: it stays
    /// behind while its preliminary estimate is above the other side's, not only while above
    /// [`FAR_BEHIND`] times it (hysteresis: a 5x gap measured under noise must not send 40 ms
    /// requests to the loser each time the winner's estimate wobbles).
    behind: [bool; 2],
    /// A side a change signal asked to measure again, once, at the next request.
    reprobe: Option<SideKind>,
    last_winner: Option<SideKind>,
    /// Requests decided since the last budgeted probe ([`MIN_PROBE_INTERVAL`]).
    since_probe: u32,
    /// The fast path, while the local side wins far ahead ([`SETTLED_RUN`]).
    settled: Option<Settled>,
    /// Requests run on the fast path since the last decision: each adds to the probe credit
    /// as a decided one does.
    settled_skipped: u32,
    /// Requests that went through the model (its own cost is timed on one in
    /// [`OWN_COST_EVERY`] of these).
    decided: u64,
    /// Running mean of the dispatcher's own cost per request as a fraction of the request's
    /// time (measured by [`Dispatcher::run`] on one request in [`OWN_COST_EVERY`]).
    overhead_frac: f64,
    /// The uncached fraction last sampled by [`Dispatcher::run`] (`None`: never).
    cache_u: Option<f64>,
    /// Sample the cache state before the next request (a local sample was off its estimate).
    cache_resample: bool,
    /// The local sample that asked for that cache-state sample: its ratio to its estimate and
    /// whether it was judged as cached. If the fresh sample finds the same cache state, the
    /// cache does not explain it and it is judged as the side's own (noise joins the spread;
    /// a real change is confirmed by the next sample). Without this the spread never saw the
    /// warm rows' noise, and one local sample in five paid a cache-state sample.
    local_outlier: Option<(f64, bool)>,
    /// Credit for cache-state samples, ns: [`CACHE_SAMPLE_BUDGET`] of each request's time.
    cache_credit_ns: f64,
    /// Running mean of one cache-state sample's cost, ns.
    cache_sample_ns: f64,
    stats: DispatchStats,
}

impl Dispatcher {
    #[must_use]
    pub fn new(cfg: DispatchConfig) -> Self {
        Self {
            cfg,
            local: SideModel::new(cfg.samples),
            server: SideModel::new(cfg.samples),
            credit_ns: 0.0,
            unpriced: [0; 2],
            in_window: 0,
            local_wall: Ring::new(cfg.samples),
            local_wall_cached: None,
            behind: [false; 2],
            reprobe: None,
            last_winner: None,
            since_probe: 0,
            settled: None,
            settled_skipped: 0,
            decided: 0,
            overhead_frac: 0.0,
            cache_u: None,
            cache_resample: false,
            local_outlier: None,
            cache_credit_ns: 0.0,
            cache_sample_ns: 0.0,
            stats: DispatchStats::default(),
        }
    }

    #[must_use]
    pub fn stats(&self) -> DispatchStats {
        self.stats
    }

    /// The dispatcher's own cost per request (decide, record) as a running mean fraction of
    /// the requests' time; adaptive profiling pays it, and [`CACHE_SAMPLE_BUDGET`] for the
    /// cache-state samples, from its budget.
    #[must_use]
    pub fn overhead_fraction(&self) -> f64 {
        self.overhead_frac
    }

    /// The local estimate in ns per byte at uncached fraction `u`, if the model can make it.
    #[must_use]
    pub fn local_estimate(&self, u: f64) -> Option<f64> {
        // Each quantity needs MIN_SAMPLES (a cold start measures until then).
        self.local.main.mean()?;
        if u > CACHED_BELOW {
            self.local.miss.mean()?;
        } else {
            self.local.hit.mean()?;
        }
        Some(self.local_level(u)? * self.tail(SideKind::Local))
    }

    /// The tail factor a side's estimate uses: its own once it has [`TAIL_TRUSTED`] samples;
    /// before, at most the other side's (at least 1). A loser probed once in 32-50 requests
    /// whose first samples held one stall (8x) kept an estimate of 3x its level: every
    /// probe lowered it by a thirtieth, so it lost a whole 1,200-request row it was 1.2x
    /// better in (a capped server's cold row, auto 1.19x the better side).
    fn tail(&self, side: SideKind) -> f64 {
        let (own, other) = match side {
            SideKind::Local => (&self.local, &self.server),
            SideKind::Server => (&self.server, &self.local),
        };
        if own.tail_n >= TAIL_TRUSTED {
            own.tail
        } else {
            own.tail.min(other.tail.max(1.0))
        }
    }

    /// The local side's level at `u` in ns per byte: [`Dispatcher::local_estimate`] made of
    /// medians instead of means, from the first sample on. Change signals and the
    /// cache-state check judge samples against it. A capped server's throttling stalls (one
    /// request in twenty, 10x) put the mean of a side that reads through it at twice its
    /// usual sample, and the mean moved by half as a stall entered or left the last 32: usual
    /// samples fell below the spread of ratios to the mean, each pair was a "change", the
    /// history was dropped and re-measured from three samples without a stall, and the
    /// choice flipped with them (53 changes and 36 switches in 1,200 requests, auto 1.2x the
    /// better side).
    fn local_level(&self, u: f64) -> Option<f64> {
        let compute = self.local.main.median()?;
        let hit = if u < 1.0 { self.local.hit.median() } else { Some(0.0) };
        let miss = if u > CACHED_BELOW { self.local.miss.median()? } else { 0.0 };
        let hit = match hit {
            Some(h) => h,
            None if u > CACHED_BELOW => 0.0,
            None => return None,
        };
        Some(compute + hit * (1.0 - u) + miss * u)
    }

    /// The server estimate in ns per byte, if measured.
    #[must_use]
    pub fn server_estimate(&self) -> Option<f64> {
        self.server.main.mean()?;
        Some(self.server.main.median()? * self.tail(SideKind::Server))
    }

    /// Picks the side for a request of `len` bytes whose range is `u` uncached.
    pub fn decide(&mut self, len: u64, u: f64) -> Decision {
        let (l, s) = (self.local_estimate(u), self.server_estimate());
        let (l, s) = match (l, s) {
            (Some(l), Some(s)) => (l, s),
            // Even its best sample far behind: losing, without two more measurements.
            (Some(l), None) => match self.server.main.mean_any() {
                Some(p) if p > FAR_BEHIND * l || (self.behind[1] && p > l) => {
                    self.behind[1] = true;
                    (l, p)
                }
                _ => return self.measure(SideKind::Server),
            },
            (None, s) => {
                // Cold start: one local request, one server request, then the side that is
                // not far behind is measured until it has an estimate. (A local estimate
                // missing for the cache state, with enough samples, is measured at once.)
                let cold_start = self.local.main.len < MIN_SAMPLES;
                match (self.local_wall.mean_any(), s.or_else(|| self.server.main.mean_any())) {
                    (Some(lf), Some(sv))
                        if cold_start && (lf > FAR_BEHIND * sv || (self.behind[0] && lf > sv)) =>
                    {
                        self.behind[0] = true;
                        (lf, sv)
                    }
                    (Some(_), None) if cold_start => return self.measure(SideKind::Server),
                    _ => return self.measure(SideKind::Local),
                }
            }
        };
        let winner = if l <= s { SideKind::Local } else { SideKind::Server };
        if self.last_winner.is_some_and(|w| w != winner) {
            self.stats.switches += 1;
        }
        self.last_winner = Some(winner);
        if let Some(side) = self.reprobe.take() {
            if side != winner {
                return self.probe(side);
            }
        }
        #[allow(clippy::cast_precision_loss)]
        let bytes = len.max(1) as f64;
        let (win_ns, lose_ns) = if winner == SideKind::Local { (l, s) } else { (s, l) };
        let (win_ns, lose_ns) = (win_ns * bytes, lose_ns * bytes);
        match self.cfg.profiling {
            Profiling::Fixed { window, probes } => {
                let i = self.in_window;
                self.in_window = (i + 1) % window.max(1);
                if i < probes {
                    return self.pick(SideKind::Local, winner);
                }
                if i < 2 * probes {
                    return self.pick(SideKind::Server, winner);
                }
            }
            Profiling::Adaptive { budget } => {
                let budget =
                    (budget - self.overhead_frac - CACHE_SAMPLE_BUDGET).max(MIN_PROBE_BUDGET);
                let excess = lose_ns - win_ns;
                // What the measurements without an estimate cost beyond the winner is paid
                // from the same budget: a run with a 100x loser repays its cold start before
                // probing again, so the overhead stays bounded from the first request.
                let loser = usize::from(winner == SideKind::Local);
                self.credit_ns -= f64::from(self.unpriced[loser]) * excess;
                self.unpriced = [0; 2];
                // This request and those the fast path ran since the last decision.
                let n = 1 + std::mem::take(&mut self.settled_skipped);
                let earned = f64::from(n) * budget * win_ns;
                self.credit_ns += earned;
                // Never bank more than one probe's worth: after a long quiet stretch the next
                // probe is due, not a burst of them.
                self.credit_ns = self.credit_ns.min(excess.max(0.0) + earned);
                self.since_probe = self.since_probe.saturating_add(n);
                if self.credit_ns >= excess && self.since_probe >= MIN_PROBE_INTERVAL {
                    self.credit_ns -= excess;
                    self.since_probe = 0;
                    return self.probe(winner.other());
                }
            }
        }
        self.pick(winner, winner)
    }

    fn pick(&mut self, side: SideKind, winner: SideKind) -> Decision {
        if side == winner {
            Decision { side, probe: false }
        } else {
            self.probe(side)
        }
    }

    /// A request on `side` because its estimate is missing.
    fn measure(&mut self, side: SideKind) -> Decision {
        self.unpriced[usize::from(side == SideKind::Server)] += 1;
        self.probe(side)
    }

    fn probe(&mut self, side: SideKind) -> Decision {
        self.stats.probes += 1;
        Decision { side, probe: true }
    }

    /// Feeds back what the request decided by [`Dispatcher::decide`] cost; `u` was measured
    /// for this request.
    pub fn record(&mut self, d: Decision, len: u64, u: f64, run: &Run) {
        self.record_sample(d, len, u, true, run);
    }

    /// As [`Dispatcher::record`]; `fresh` says whether `u` was sampled for this request or is
    /// the last sample reused. A local sample off its estimate under a reused `u` is first
    /// taken as a sign that the cache state moved: its I/O time is not attributed (it would
    /// land in the wrong ring) and the next request samples the cache state; only a sample off
    /// its estimate under a fresh `u` counts as a change signal.
    #[allow(clippy::cast_precision_loss)]
    fn record_sample(&mut self, d: Decision, len: u64, u: f64, fresh: bool, run: &Run) {
        self.stats.requests += 1;
        let bytes = len.max(1) as f64;
        let thr = self.cfg.change_threshold;
        let winner = self.last_winner == Some(d.side);
        match d.side {
            SideKind::Local => {
                self.stats.local += 1;
                // The change test is on the whole request, against the model's own estimate.
                // Samples are judged against the side's level (medians); the estimate chooses.
                let est = self.local_level(u);
                let wall = (run.io_ns + run.compute_ns) as f64 / bytes;
                // Read only during a cold start (fewer than MIN_SAMPLES function samples).
                if self.local.main.len < MIN_SAMPLES {
                    let cached = u <= CACHED_BELOW;
                    if self.local_wall_cached.is_some_and(|c| c != cached) {
                        // The cache state moved: the side is judged afresh in it.
                        self.local_wall.clear();
                        self.behind[0] = false;
                    }
                    self.local_wall_cached = Some(cached);
                    self.local_wall.push(wall);
                }
                // Off its estimate beyond the threshold and the side's own spread: a warm
                // 64 KiB request varies more than 25% with the machine's load alone, and each
                // such sample would pay one more cache-state sample beyond its budget.
                let outlier = self.local_outlier.take();
                let off_estimate = est.filter(|&e| !fresh && self.local.outside(e, wall, thr));
                if let Some(e) = off_estimate {
                    self.local.main.push(run.compute_ns as f64 / bytes);
                    self.cache_resample = true;
                    self.local_outlier = Some((wall / e, u <= CACHED_BELOW));
                    return;
                }
                let m = &mut self.local;
                let mut changed = false;
                if let Some((ratio, _)) = outlier.filter(|o| fresh && o.1 == (u <= CACHED_BELOW)) {
                    changed = m.judge(1.0, ratio, thr, winner);
                    if !changed {
                        m.add_tail(ratio);
                    }
                }
                let changed = changed || est.is_some_and(|e| m.judge(e, wall, thr, winner));
                match est {
                    _ if changed => m.tail_changed(),
                    Some(e) if e > 0.0 => m.add_tail(wall / e),
                    _ => {}
                }
                if changed {
                    m.main.clear();
                    m.hit.clear();
                    m.miss.clear();
                    self.local_wall.clear();
                    self.local_wall.push(wall);
                    self.local_wall_cached = Some(u <= CACHED_BELOW);
                    self.behind[0] = false;
                    self.stats.changes += 1;
                    self.reprobe = Some(SideKind::Local);
                }
                m.main.push(run.compute_ns as f64 / bytes);
                let io = run.io_ns as f64 / bytes;
                if u <= CACHED_BELOW {
                    m.hit.push(io);
                } else {
                    let hit = m.hit.mean().unwrap_or(0.0);
                    m.miss.push(((io - hit * (1.0 - u)) / u).max(0.0));
                }
            }
            SideKind::Server => {
                self.stats.server += 1;
                let est = self.server.main.median();
                let wall = run.wall_ns as f64 / bytes;
                let m = &mut self.server;
                if est.is_some_and(|e| m.judge(e, wall, thr, winner)) {
                    self.behind[1] = false;
                    m.main.clear();
                    m.tail_changed();
                    self.stats.changes += 1;
                    self.reprobe = Some(SideKind::Server);
                } else if let Some(e) = est.filter(|&e| e > 0.0) {
                    m.add_tail(wall / e);
                }
                m.main.push(wall);
            }
        }
        // A suspect sample on a side the model is not running gets its confirmation now, when
        // it says that side got faster (it may now win); a loser that got slower still loses,
        // and confirming it would cost another of its slow requests.
        let m = if d.side == SideKind::Local { &self.local } else { &self.server };
        let winner = self.last_winner == Some(d.side);
        if (m.suspect.dir < 0 || (winner && m.suspect.dir > 0)) && self.reprobe.is_none() {
            self.reprobe = Some(d.side);
        }
    }

    /// Decides, runs on the chosen side, records; returns where it ran and what it cost.
    ///
    /// The client's cache state is sampled (`local.uncached_fraction`) only when it is due:
    /// before the first request, after a local sample that did not match the estimate, before
    /// a probe of the local side, and otherwise as often as [`CACHE_SAMPLE_BUDGET`] of the
    /// requests' time pays for; in between the last sample stands. No allocation, and no
    /// clock read of its own except on one request in [`OWN_COST_EVERY`] and around a sample.
    ///
    /// # Errors
    /// The chosen side's error (nothing is recorded for a failed request).
    pub fn run(
        &mut self,
        local: &mut dyn Side,
        server: &mut dyn Side,
        off: u64,
        len: u64,
        out: &mut [u8],
    ) -> Result<(SideKind, Run), LambdaError> {
        debug_assert_eq!(local.kind(), SideKind::Local);
        debug_assert_eq!(server.kind(), SideKind::Server);
        if let Some(st) = self.settled.as_mut() {
            if st.left > 0 && st.len == len {
                st.left -= 1;
                let run = local.run(off, len, out)?;
                self.stats.requests += 1;
                let wall_ns = run.io_ns + run.compute_ns;
                if (st.lo_ns..=st.hi_ns).contains(&wall_ns) {
                    #[allow(clippy::cast_precision_loss)]
                    let ratio = wall_ns as f64 / st.level_ns;
                    st.tail_sum += ratio;
                    st.tail_count += 1;
                    self.settled_skipped += 1;
                    self.stats.local += 1;
                    self.stats.settled += 1;
                    return Ok((SideKind::Local, run));
                }
                // Off its estimate: the model judges it (a range gone cold re-samples the
                // cache state before the next request).
                let st = *st;
                self.fold_settled(&st);
                self.settled = None;
                self.stats.requests -= 1;
                let u = self.cache_u.unwrap_or(1.0);
                let d = Decision { side: SideKind::Local, probe: false };
                self.record_sample(d, len, u, false, &run);
                return Ok((SideKind::Local, run));
            }
            let st = *st;
            self.fold_settled(&st);
            self.settled = None;
        }
        let mut fresh = false;
        // While the local side wins, its own samples show a change of the cache state (a
        // sample off its estimate re-samples at once): the budgeted samples are for a local
        // side that is not running, whose range may warm while the server wins.
        if self.cache_u.is_none()
            || self.cache_resample
            || (self.cache_credit_ns >= self.cache_sample_ns
                && self.last_winner != Some(SideKind::Local))
        {
            self.sample_cache(local, off, len);
            fresh = true;
        }
        let timed = self.decided.is_multiple_of(OWN_COST_EVERY);
        self.decided += 1;
        // This decision stands for itself and the fast-path requests before it, which cost
        // the model nothing: its own cost is spread over all of them.
        #[allow(clippy::cast_precision_loss)]
        let batch = f64::from(1 + self.settled_skipped);
        let t0 = timed.then(Instant::now);
        let mut u = self.cache_u.unwrap_or(1.0);
        let d = self.decide(len, u);
        let mut own = t0.map(|t| t.elapsed());
        if d.side == SideKind::Local && d.probe && !fresh {
            // A probe's sample is attributed by its cache state: measure it.
            u = self.sample_cache(local, off, len);
            fresh = true;
        }
        let side: &mut dyn Side = if d.side == SideKind::Local { local } else { server };
        let run = side.run(off, len, out)?;
        let t2 = timed.then(Instant::now);
        self.record_sample(d, len, u, fresh, &run);
        #[allow(clippy::cast_precision_loss)]
        let wall_ns = run.wall_ns.max(1) as f64;
        if let (Some(t2), Some(o)) = (t2, own.as_mut()) {
            *o += t2.elapsed();
            #[allow(clippy::cast_precision_loss)]
            let frac = o.as_nanos() as f64 / (wall_ns * batch);
            self.overhead_frac += OVERHEAD_EWMA * (frac.min(1.0) - self.overhead_frac);
        }
        // Never bank more than one sample's worth: after a quiet stretch one sample is due,
        // not a burst of them.
        self.cache_credit_ns = (self.cache_credit_ns + CACHE_SAMPLE_BUDGET * wall_ns)
            .min(self.cache_sample_ns + CACHE_SAMPLE_BUDGET * wall_ns);
        self.settled = self.settle(d, len, u);
        Ok((d.side, run))
    }

    /// The fast path's samples join the local tail factor, as one sample each.
    fn fold_settled(&mut self, st: &Settled) {
        for _ in 0..st.tail_count {
            // The same mean for each: the order within a run of seven does not matter.
            self.local.add_tail(st.tail_sum / f64::from(st.tail_count));
        }
    }

    /// The fast path after request `d` ([`SETTLED_RUN`]): only when the local side ran as the
    /// winner with the server far behind, under adaptive profiling, and nothing is pending
    /// (a re-probe, a cache-state sample, a suspect sample waiting for its confirmation).
    #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    fn settle(&self, d: Decision, len: u64, u: f64) -> Option<Settled> {
        let quiet = self.reprobe.is_none()
            && !self.cache_resample
            && self.local.suspect.dir == 0
            && self.last_winner == Some(SideKind::Local);
        if !matches!(self.cfg.profiling, Profiling::Adaptive { .. })
            || d.probe
            || d.side != SideKind::Local
            || !quiet
        {
            return None;
        }
        let l = self.local_estimate(u)?;
        let s = self.server_estimate().or_else(|| self.server.main.mean_any())?;
        if s <= FAR_BEHIND * l {
            return None;
        }
        let l = self.local_level(u)?;
        // The bounds of `SideModel::outside` around the level, in ns for this request length.
        let (lo, hi) = self.local.spread.bounds().unwrap_or((1.0, 1.0));
        let thr = self.cfg.change_threshold;
        let est_ns = l * len.max(1) as f64;
        Some(Settled {
            left: SETTLED_RUN,
            len,
            level_ns: est_ns,
            tail_sum: 0.0,
            tail_count: 0,
            lo_ns: (est_ns * (1.0 - thr).min(lo)).max(0.0) as u64,
            hi_ns: (est_ns * (1.0 + thr).max(hi)).ceil() as u64,
        })
    }

    /// Samples the uncached fraction of `[off, off + len)` on the local side (1.0 when the
    /// side cannot tell), times the sample and pays it from the sampling credit.
    fn sample_cache(&mut self, local: &mut dyn Side, off: u64, len: u64) -> f64 {
        let t = Instant::now();
        let u = local.uncached_fraction(off, len).unwrap_or(1.0).clamp(0.0, 1.0);
        #[allow(clippy::cast_precision_loss)]
        let ns = t.elapsed().as_nanos() as f64;
        // A sample the scheduler preempted (milliseconds instead of microseconds) says nothing
        // about what a sample costs: counted at most twice the running cost, it cannot stop
        // the sampling for the next ten thousand requests.
        let ns = if self.stats.cache_samples == 0 {
            ns
        } else {
            ns.min(CACHE_SAMPLE_OUTLIER * self.cache_sample_ns)
        };
        self.cache_sample_ns = if self.stats.cache_samples == 0 {
            ns
        } else {
            self.cache_sample_ns + CACHE_SAMPLE_EWMA * (ns - self.cache_sample_ns)
        };
        self.cache_credit_ns -= ns;
        self.cache_u = Some(u);
        self.cache_resample = false;
        self.stats.cache_samples += 1;
        u
    }
}

/// Is `ratio` (a sample over its estimate) the last of [`CONFIRM_SAMPLES`] in a row below
/// `lo` or above `hi` ([`CONFIRM_WINNER_SLOWER`] above, for the side the model runs)? A sample
/// within bounds clears the suspicion.
fn signal(s: &mut Suspect, ratio: f64, lo: f64, hi: f64, winner: bool) -> bool {
    let dir = if ratio > hi {
        1
    } else if ratio < lo {
        -1
    } else {
        0
    };
    if dir == 0 {
        *s = Suspect::default();
        return false;
    }
    if s.dir != dir {
        *s = Suspect { dir, seen: 1, ratio };
        return false;
    }
    s.seen += 1;
    let need = if winner && dir > 0 { CONFIRM_WINNER_SLOWER } else { CONFIRM_SAMPLES };
    if s.seen >= need {
        *s = Suspect::default();
        return true;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The mean from the running sum, the incrementally sorted copy, its median and bounds
    /// equal the ones from sorting the ring's samples, across wrap-arounds, repeated values
    /// and clears.
    #[test]
    fn the_ring_keeps_its_sorted_copy_in_step() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            #[allow(clippy::cast_precision_loss)]
            let x = (state % 50) as f64;
            x
        };
        for cap in [16, 8, 3, 32, 1] {
            let mut r = Ring::new(cap);
            let mut all: Vec<f64> = Vec::new();
            for i in 0..500 {
                if i % 97 == 0 {
                    r.clear();
                    all.clear();
                }
                let x = next();
                r.push(x);
                all.push(x);
                let mut last: Vec<f64> = all.iter().rev().take(cap).copied().collect();
                last.sort_unstable_by(f64::total_cmp);
                assert_eq!(&r.sorted[..r.len], &last[..], "cap {cap} push {i}");
                assert_eq!(r.median(), Some(last[last.len() / 2]), "cap {cap} push {i}");
                let want = (last.len() >= MIN_SAMPLES.min(cap)).then(|| {
                    #[allow(clippy::cast_precision_loss)]
                    let m = last.iter().sum::<f64>() / last.len() as f64;
                    m
                });
                // Integers below 2^53: the running sum is exact.
                assert_eq!(r.mean(), want, "cap {cap} push {i}");
                assert_eq!(r.bounds(), Some((last[0], last[last.len() - 1])), "cap {cap}");
            }
        }
    }
}
