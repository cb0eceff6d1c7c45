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

use crate::error::LambdaError;
use crate::limits::{
    CACHE_SAMPLE_BUDGET, MAX_SAMPLES, MIN_PROBE_BUDGET, MIN_PROBE_INTERVAL, MIN_SAMPLES,
    OWN_COST_EVERY, SETTLED_RUN, TAIL_SAMPLES, TAIL_TRUSTED,
};

mod dispatcher;
mod ring;
mod side_model;

pub use dispatcher::Dispatcher;

/// Weight of the newest measurement in the running mean of the dispatcher's own cost.
const OVERHEAD_EWMA: f64 = 1.0 / 8.0;
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

/// An uncached fraction at or below this makes a local sample a "cached" I/O sample.
pub const CACHED_BELOW: f64 = 0.1;

/// After a confirmed change the tail factor keeps its value but weighs the next samples as
/// if it had only this many: a change of level often comes with a change of shape (a server
/// capped midway starts to stall).
const TAIL_AFTER_CHANGE: u32 = 8;

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
    /// Relative distance from the side's level that makes a sample a change signal.
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

/// A decision for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub side: SideKind,
    /// Run to measure, not because the model picked it.
    pub probe: bool,
}
