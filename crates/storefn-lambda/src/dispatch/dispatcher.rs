//! The dispatcher itself: deciding, recording, the fast path and the cache-state samples.

use std::time::Instant;

use super::ring::Ring;
use super::side_model::SideModel;
use super::*;

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
    /// Sample the cache state before the next request (a local sample was off its level).
    cache_resample: bool,
    /// The local sample that asked for that cache-state sample: its ratio to its level and
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
    /// the last sample reused. A local sample off its level under a reused `u` is first
    /// taken as a sign that the cache state moved: its I/O time is not attributed (it would
    /// land in the wrong ring) and the next request samples the cache state; only a sample off
    /// its level under a fresh `u` counts as a change signal.
    #[allow(clippy::cast_precision_loss)]
    fn record_sample(&mut self, d: Decision, len: u64, u: f64, fresh: bool, run: &Run) {
        self.stats.requests += 1;
        let bytes = len.max(1) as f64;
        let thr = self.cfg.change_threshold;
        let winner = self.last_winner == Some(d.side);
        match d.side {
            SideKind::Local => {
                self.stats.local += 1;
                // The change test is on the whole request, against the side's level (medians);
                // the estimate chooses.
                let level = self.local_level(u);
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
                // Off its level beyond the threshold and the side's own spread: a warm 64 KiB
                // request varies more than 25% with the machine's load alone, and each such
                // sample would pay one more cache-state sample beyond its budget.
                let outlier = self.local_outlier.take();
                let off_level = level.filter(|&e| !fresh && self.local.outside(e, wall, thr));
                if let Some(e) = off_level {
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
                let changed = changed || level.is_some_and(|e| m.judge(e, wall, thr, winner));
                match level {
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
                let level = self.server.main.median();
                let wall = run.wall_ns as f64 / bytes;
                let m = &mut self.server;
                if level.is_some_and(|e| m.judge(e, wall, thr, winner)) {
                    self.behind[1] = false;
                    m.main.clear();
                    m.tail_changed();
                    self.stats.changes += 1;
                    self.reprobe = Some(SideKind::Server);
                } else if let Some(e) = level.filter(|&e| e > 0.0) {
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
    /// before the first request, after a local sample that did not match its level, before
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
                let wall_ns = run.io_ns + run.compute_ns;
                if (st.lo_ns..=st.hi_ns).contains(&wall_ns) {
                    #[allow(clippy::cast_precision_loss)]
                    let ratio = wall_ns as f64 / st.level_ns;
                    st.tail_sum += ratio;
                    st.tail_count += 1;
                    self.settled_skipped += 1;
                    self.stats.requests += 1;
                    self.stats.local += 1;
                    self.stats.settled += 1;
                    return Ok((SideKind::Local, run));
                }
                // Off its level: the model judges it (a range gone cold re-samples the cache
                // state before the next request).
                self.end_settled();
                let u = self.cache_u.unwrap_or(1.0);
                let d = Decision { side: SideKind::Local, probe: false };
                self.record_sample(d, len, u, false, &run);
                return Ok((SideKind::Local, run));
            }
            self.end_settled();
        }
        let mut fresh = false;
        // While the local side wins, its own samples show a change of the cache state (a
        // sample off its level re-samples at once): the budgeted samples are for a local
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

    /// Ends the fast path: its samples join the local tail factor, as one sample each.
    fn end_settled(&mut self) {
        let Some(st) = self.settled.take() else { return };
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
        // The bounds of `SideModel::outside` around the level, in ns for this request length.
        let level_ns = self.local_level(u)? * len.max(1) as f64;
        let (lo, hi) = self.local.limits(self.cfg.change_threshold);
        Some(Settled {
            left: SETTLED_RUN,
            len,
            level_ns,
            tail_sum: 0.0,
            tail_count: 0,
            lo_ns: (level_ns * lo).max(0.0) as u64,
            hi_ns: (level_ns * hi).ceil() as u64,
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
