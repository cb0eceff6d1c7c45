//! Fair admission of queued requests to the engine between tenants (BPF-for-storage's
//! per-process chain accounting): the tenant with queued work that has used the least CPU time
//! of the worker thread goes first (ties in round-robin order), and no tenant holds more than
//! its share of the engine's chain slots while another tenant waits. CPU time is charged for
//! everything the worker does for a tenant (program runs, STAT, LOAD_PROG, λ runs, writes);
//! a tenant that becomes active starts at the least usage of the tenants already waiting, so a
//! long-idle tenant cannot take the thread for as long as it was idle. A tenant
//! running 64-hop chains therefore cannot starve one doing point lookups: the point lookup is
//! admitted at the next free slot, and the long chains never hold every slot.

use std::collections::VecDeque;
use std::time::Instant;

use crate::limits::{
    CONTENDED_LAMBDA_READS, CONTENTION_WINDOW, MAX_STAGED_RUNS_PER_TENANT, PASS_CPU_NS, RESERVE_DIV,
};

/// What each tenant's λ jobs hold besides their engine slots, by tenant entry: a tenant at
/// either bound gets no job admitted until it is under it again.
#[derive(Debug, Clone, Copy, Default)]
pub struct LambdaLoad<'a> {
    /// Piece reads in flight (`CONTENDED_LAMBDA_READS`, while another tenant shares the thread).
    pub reads: &'a [u32],
    /// Runs whose range landed, waiting for or on the runner (`MAX_STAGED_RUNS_PER_TENANT`).
    pub runs: &'a [u32],
}

/// Queued jobs per tenant.
#[derive(Debug)]
pub struct Sched {
    queues: Vec<VecDeque<u32>>,
    inflight: Vec<u32>,
    /// Tenants with queued jobs, in round-robin order.
    active: VecDeque<u32>,
    /// Engine chain slots in all.
    slots: u32,
    /// `false`: one FIFO for everyone (the unfair baseline the fairness bench compares).
    fair: bool,
    fifo: VecDeque<(u32, u32)>,
    queued: usize,
    /// CPU time each tenant used, ns (a virtual clock: see `push`).
    used: Vec<u64>,
    /// Each tenant's recent CPU cost per job, ns (moving average, 1/8 weight per job).
    job_cost: Vec<u64>,
    /// CPU time each tenant used in the current pass of the worker, ns: a tenant at
    /// `PASS_CPU_NS` gets no more of this pass (its frames and queued jobs wait for the next).
    pass: Vec<u64>,
    /// Some tenant's work was cut short in this pass (the next pass must not sleep).
    carried: bool,
    /// The tenants that queued work within `CONTENTION_WINDOW`, with when they last did.
    recent: Vec<(u32, Instant)>,
}

impl Sched {
    #[must_use]
    pub fn new(slots: u32, fair: bool) -> Self {
        Self {
            queues: Vec::new(),
            inflight: Vec::new(),
            active: VecDeque::with_capacity(64),
            slots,
            fair,
            fifo: VecDeque::with_capacity(1024),
            queued: 0,
            used: Vec::new(),
            job_cost: Vec::new(),
            pass: Vec::new(),
            carried: false,
            recent: Vec::new(),
        }
    }

    fn ensure(&mut self, tenant: u32) {
        let t = tenant as usize;
        if self.queues.len() <= t {
            self.queues.resize_with(t + 1, || VecDeque::with_capacity(256));
            self.inflight.resize(t + 1, 0);
            self.used.resize(t + 1, 0);
            self.job_cost.resize(t + 1, 0);
            self.pass.resize(t + 1, 0);
        }
    }

    /// Queues `job` for `tenant`.
    pub fn push(&mut self, tenant: u32, job: u32) {
        self.ensure(tenant);
        self.queued += 1;
        let now = Instant::now();
        match self.recent.iter_mut().find(|r| r.0 == tenant) {
            Some(r) => r.1 = now,
            None => self.recent.push((tenant, now)),
        }
        if !self.fair {
            self.fifo.push_back((tenant, job));
            return;
        }
        if self.queues[tenant as usize].is_empty() {
            let floor = self.active.iter().map(|&t| self.used[t as usize]).min();
            if let Some(floor) = floor {
                let u = &mut self.used[tenant as usize];
                *u = (*u).max(floor);
            }
            self.active.push_back(tenant);
        }
        self.queues[tenant as usize].push_back(job);
    }

    /// The most slots one tenant may hold while `waiting` tenants have queued work.
    fn share(&self) -> u32 {
        let busy = self
            .inflight
            .iter()
            .enumerate()
            .filter(|&(t, &n)| n > 0 || !self.queues[t].is_empty())
            .count();
        if busy <= 1 {
            return (self.slots - self.slots / RESERVE_DIV).max(1);
        }
        (self.slots / u32::try_from(busy).expect("few tenants")).max(1)
    }

    /// The next job to admit as `(tenant, job)`, or `None` if nothing may be admitted now
    /// (nothing queued, or every tenant with queued work is at its share).
    /// A tenant also waits while its λ jobs are at a bound of `lambda` (see [`LambdaLoad`]):
    /// its next job's reads would join a device queue that already holds its share, or its
    /// range would wait, staged, behind its runs.
    pub fn admit(&mut self, lambda: LambdaLoad<'_>) -> Option<(u32, u32)> {
        if !self.fair {
            let (t, j) = self.fifo.pop_front()?;
            self.queued -= 1;
            self.inflight[t as usize] += 1;
            return Some((t, j));
        }
        let share = self.share();
        let lambda_full = |t: u32| {
            let at = |v: &[u32], max: u32| v.get(t as usize).is_some_and(|&n| n >= max);
            at(lambda.runs, MAX_STAGED_RUNS_PER_TENANT)
                || (at(lambda.reads, CONTENDED_LAMBDA_READS) && self.contended(t))
        };
        // The least-used tenant under its share (one over it waits: another tenant may be
        // waiting, or the reserve is kept for one that arrives); the first of equals.
        let picked = self
            .active
            .iter()
            .enumerate()
            .filter(|&(_, &t)| {
                let (n, cost) = (self.inflight[t as usize], self.job_cost[t as usize]);
                n < share
                    && u64::from(n) < (PASS_CPU_NS / cost.max(1)).max(1)
                    && self.pass[t as usize] < PASS_CPU_NS
                    && !lambda_full(t)
            })
            .min_by_key(|&(k, &t)| (self.used[t as usize], k))
            .map(|(k, &t)| (k, t));
        let Some((k, t)) = picked else {
            // Work held back by this pass's budget is carried to the next pass.
            self.carried |= self.active.iter().any(|&t| self.pass[t as usize] >= PASS_CPU_NS);
            return None;
        };
        self.active.remove(k);
        let ti = t as usize;
        let j = self.queues[ti].pop_front().expect("active tenants have queued jobs");
        if !self.queues[ti].is_empty() {
            self.active.push_back(t);
        }
        self.queued -= 1;
        self.inflight[ti] += 1;
        Some((t, j))
    }

    /// Charges `tenant` `ns` of CPU time spent for it off the worker thread (its λ runs): it
    /// counts in the order tenants are served, not in the worker's pass or job costs.
    pub fn charge_elsewhere(&mut self, tenant: u32, ns: u64) {
        self.ensure(tenant);
        let u = &mut self.used[tenant as usize];
        *u = u.saturating_add(ns);
    }

    /// Charges `tenant` `ns` of the worker thread's CPU time.
    pub fn charge(&mut self, tenant: u32, ns: u64) {
        self.ensure(tenant);
        let u = &mut self.used[tenant as usize];
        *u = u.saturating_add(ns);
        let p = &mut self.pass[tenant as usize];
        *p = p.saturating_add(ns);
    }

    /// A new pass of the worker: every tenant's pass budget is whole again. Returns whether
    /// the previous pass carried work over (the poll must not sleep).
    pub fn new_pass(&mut self) -> bool {
        self.pass.fill(0);
        if !self.recent.is_empty() {
            let now = Instant::now();
            self.recent.retain(|r| now.duration_since(r.1) < CONTENTION_WINDOW);
        }
        std::mem::take(&mut self.carried)
    }

    /// Whether `tenant` used up this pass's budget (`PASS_CPU_NS`); its further work waits for
    /// the next pass, which is then not put to sleep.
    pub fn pass_spent(&mut self, tenant: u32) -> bool {
        let spent = self.pass.get(tenant as usize).is_some_and(|&p| p >= PASS_CPU_NS);
        self.carried |= spent;
        spent
    }

    /// Whether another tenant than `tenant` queued work within `CONTENTION_WINDOW` (the
    /// device is then shared: `CONTENDED_LAMBDA_READS`).
    pub fn contended(&self, tenant: u32) -> bool {
        let now = Instant::now();
        self.recent.iter().any(|r| r.0 != tenant && now.duration_since(r.1) < CONTENTION_WINDOW)
    }

    /// Whether some tenant's work was carried over to the next pass so far.
    #[must_use]
    pub fn carried(&self) -> bool {
        self.carried
    }

    /// One of `tenant`'s engine jobs finished having cost `ns` of CPU: charged, and folded
    /// into its cost per job.
    pub fn job_done(&mut self, tenant: u32, ns: u64) {
        self.charge(tenant, ns);
        let c = &mut self.job_cost[tenant as usize];
        *c = *c - *c / 8 + ns / 8;
    }

    /// A tenant entry now names another tenant: its usage starts again.
    pub fn forget(&mut self, tenant: u32) {
        self.ensure(tenant);
        self.used[tenant as usize] = 0;
        self.job_cost[tenant as usize] = 0;
        self.pass[tenant as usize] = 0;
        self.recent.retain(|r| r.0 != tenant);
    }

    /// CPU time `tenant` was charged, ns (virtual: raised to the least usage of the waiting
    /// tenants when it becomes active).
    #[must_use]
    pub fn used(&self, tenant: u32) -> u64 {
        self.used.get(tenant as usize).copied().unwrap_or(0)
    }

    /// Takes every queued job out (shutdown: they are answered without running).
    pub fn drain(&mut self, mut f: impl FnMut(u32)) {
        for (_, j) in self.fifo.drain(..) {
            f(j);
        }
        for q in &mut self.queues {
            for j in q.drain(..) {
                f(j);
            }
        }
        self.active.clear();
        self.queued = 0;
    }

    /// A job of `tenant` admitted by [`Sched::next`] finished.
    pub fn done(&mut self, tenant: u32) {
        let n = &mut self.inflight[tenant as usize];
        debug_assert!(*n > 0, "done without an admitted job");
        *n -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn point_lookup_is_admitted_next_behind_a_flood() {
        let mut s = Sched::new(8, true);
        for j in 0..100 {
            s.push(0, j);
        }
        // Tenant 0 takes slots while alone.
        for _ in 0..4 {
            assert_eq!(s.admit(LambdaLoad::default()).unwrap().0, 0);
        }
        s.push(1, 1000);
        // Tenant 1's single job is admitted within the next two admissions.
        let a = s.admit(LambdaLoad::default()).unwrap();
        let b = s.admit(LambdaLoad::default());
        assert!(a == (1, 1000) || b == Some((1, 1000)), "{a:?} {b:?}");
    }

    #[test]
    fn a_tenant_over_its_share_waits_while_another_has_work() {
        let mut s = Sched::new(4, true);
        for j in 0..10 {
            s.push(0, j);
            s.push(1, 100 + j);
        }
        let mut per = [0u32; 2];
        while let Some((t, _)) = s.admit(LambdaLoad::default()) {
            per[t as usize] += 1;
            if per[0] + per[1] == 4 {
                break;
            }
        }
        assert_eq!(per, [2, 2]);
    }

    #[test]
    fn a_lone_tenant_leaves_the_reserve_free() {
        let mut s = Sched::new(16, true);
        for j in 0..100 {
            s.push(0, j);
        }
        let mut n = 0;
        while s.admit(LambdaLoad::default()).is_some() {
            n += 1;
        }
        assert_eq!(n, 16 - 16 / RESERVE_DIV);
        s.push(1, 7);
        assert_eq!(s.admit(LambdaLoad::default()), Some((1, 7)));
        s.done(0);
        // Two tenants now: tenant 0 is over its share (8) and waits.
        assert_eq!(s.admit(LambdaLoad::default()), None);
    }

    #[test]
    fn the_tenant_that_used_least_cpu_goes_first() {
        let mut s = Sched::new(64, true);
        for j in 0..4 {
            s.push(0, j);
            s.push(1, 10 + j);
            s.push(2, 20 + j);
        }
        s.charge(0, 5_000_000);
        s.charge(1, 1_000);
        // Tenant 2 used nothing, then tenant 1, tenant 0 last.
        let order: Vec<u32> = (0..3).map(|_| s.admit(LambdaLoad::default()).unwrap().0).collect();
        assert_eq!(order, [2, 2, 2]);
        s.charge(2, 10_000_000);
        assert_eq!(s.admit(LambdaLoad::default()).unwrap().0, 1, "tenant 2 now used the most");
        assert_eq!(s.admit(LambdaLoad::default()).unwrap().0, 1);
        // A tenant arriving now starts at the least usage of those waiting, not at 0.
        s.push(3, 30);
        assert_eq!(s.used(3), 1_000);
    }

    #[test]
    fn a_cpu_heavy_tenant_holds_few_jobs() {
        let mut s = Sched::new(64, true);
        for j in 0..100 {
            s.push(0, j);
        }
        for _ in 0..64 {
            s.job_done(0, PASS_CPU_NS / 4);
        }
        s.new_pass();
        let mut n = 0;
        while s.admit(LambdaLoad::default()).is_some() {
            n += 1;
        }
        assert!((4..=5).contains(&n), "{n}");
        s.push(1, 1000);
        assert_eq!(
            s.admit(LambdaLoad::default()),
            Some((1, 1000)),
            "a light tenant is admitted at once"
        );
    }

    #[test]
    fn a_tenant_that_spent_its_pass_waits_for_the_next() {
        let mut s = Sched::new(64, true);
        for j in 0..10 {
            s.push(0, j);
        }
        s.push(1, 100);
        s.charge(0, PASS_CPU_NS);
        assert!(!s.carried());
        assert_eq!(
            s.admit(LambdaLoad::default()),
            Some((1, 100)),
            "the other tenant still has its pass"
        );
        assert_eq!(s.admit(LambdaLoad::default()), None, "tenant 0 spent this pass");
        assert!(s.carried(), "its queued jobs are carried over");
        assert!(s.new_pass());
        assert_eq!(s.admit(LambdaLoad::default()).unwrap().0, 0, "a new pass admits it again");
        assert!(!s.new_pass());
    }

    #[test]
    fn a_tenant_at_its_lambda_bounds_waits() {
        let mut s = Sched::new(64, true);
        for j in 0..4 {
            s.push(0, j);
        }
        let (reads, runs) = ([CONTENDED_LAMBDA_READS, 0], [0, 0]);
        let load = LambdaLoad { reads: &reads, runs: &runs };
        assert_eq!(s.admit(load).unwrap().0, 0, "alone, its λ reads are not held back");
        s.push(1, 100);
        assert_eq!(s.admit(load), Some((1, 100)));
        assert_eq!(s.admit(load), None, "tenant 0 holds its share of the device while 1 is near");
        let no_reads = [0, 0];
        assert_eq!(s.admit(LambdaLoad { reads: &no_reads, runs: &runs }).unwrap().0, 0);
        let staged = [MAX_STAGED_RUNS_PER_TENANT, 0];
        assert_eq!(s.admit(LambdaLoad { reads: &no_reads, runs: &staged }), None, "runs staged");
    }

    #[test]
    fn fifo_baseline_serves_in_arrival_order() {
        let mut s = Sched::new(8, false);
        for j in 0..10 {
            s.push(0, j);
        }
        s.push(1, 99);
        for j in 0..10 {
            assert_eq!(s.admit(LambdaLoad::default()), Some((0, j)));
        }
        assert_eq!(s.admit(LambdaLoad::default()), Some((1, 99)));
    }
}
