//! The worker's side of the metrics and the log: one call at each choke point of the loop
//! (a job released, an inline request answered, a write synced, a loop pass ended).

use std::net::SocketAddr;
use std::time::Instant;

use super::job::{Job, JobHead};
use super::{Conn, Worker};
use crate::log::Event;
use crate::metrics::ThreadValues;
use crate::server::ENGINE_CHAINS;
use storefn_wire::op;

impl Worker<'_> {
    /// A connection event (connected, hello, authenticated, closed).
    pub(super) fn log_conn(&self, c: &Conn, event: &str, reason: &str) {
        let tenant = c.hello.as_ref().map(super::TenantName::as_bytes);
        let e = Event {
            thread: self.id,
            event,
            conn: Some(c.id),
            peer: Some(c.peer),
            tenant,
            reason,
            ..Event::default()
        };
        self.shared.logger().log(&e);
    }

    /// An event of the thread not tied to an accepted connection.
    pub(super) fn log_thread(&self, event: &str, peer: Option<SocketAddr>, reason: &str) {
        let e = Event { thread: self.id, event, peer, reason, ..Event::default() };
        self.shared.logger().log(&e);
    }

    /// Job `ji` was queued now.
    pub(super) fn job_queued(&mut self, ji: u32) {
        let s = &mut self.progs.job_started;
        let i = ji as usize;
        if s.len() <= i {
            s.resize(i + 1, Instant::now());
            self.progs.job_insns.resize(i + 1, 0);
        }
        s[i] = Instant::now();
        self.progs.job_insns[i] = 0;
    }

    /// Job `ji` (taken out of its slot) is released: its tenant's program CPU, chains and
    /// bytes read, its op's latency.
    pub(super) fn meter_job(&self, ji: u32, head: &JobHead, kind: &Job, cpu_ns: u64) {
        if let Some(t0) = self.progs.job_started.get(ji as usize) {
            self.shared.metrics.latency(kind.op(), t0.elapsed());
        }
        let Some(m) = self.tenants.meter(head.tenant) else { return };
        m.program_cpu(cpu_ns);
        m.instructions(self.progs.job_insns.get(ji as usize).copied().unwrap_or(0));
        match kind {
            Job::Xrp(..) if head.admitted => m.chain(),
            Job::Read(..) if head.admitted => m.read(u64::from(head.len)),
            Job::Lambda(_, l) => m.read(u64::from(l.landed_ok())),
            _ => {}
        }
    }

    /// A request answered inline (`t0`: when its handling began).
    pub(super) fn meter_inline(&self, code: u8, t0: Instant) {
        // WRITE and LAMBDA_WRITE are answered after their sync, LOAD_PROG after its
        // verification: their latency is taken then (`meter_write`, `poll_loads`).
        if code != op::WRITE && code != op::LAMBDA_WRITE && code != op::LOAD_PROG {
            self.shared.metrics.latency(code, t0.elapsed());
        }
    }

    /// CPU time of an inline request of tenant entry `t`.
    pub(super) fn meter_request_cpu(&self, t: u32, ns: u64) {
        if let Some(m) = self.tenants.meter(t) {
            m.request_cpu(ns);
        }
    }

    /// A write (`code`: WRITE or LAMBDA_WRITE, handled from `started` on) of tenant entry `t`
    /// synced (`written`: bytes, `None` when it failed): its answer's latency, its tenant's
    /// writer time and bytes.
    pub(super) fn meter_write(
        &self,
        t: u32,
        code: u8,
        started: Instant,
        ns: u64,
        written: Option<u64>,
    ) {
        self.shared.metrics.latency(code, started.elapsed());
        if let Some(m) = self.tenants.meter(t) {
            m.request_cpu(ns);
            if let Some(n) = written {
                m.written(n);
            }
        }
    }

    /// The thread's gauges, at the end of a loop pass.
    pub(super) fn publish_metrics(&self) {
        let mut v = ThreadValues {
            slots_in_use: ENGINE_CHAINS - self.engine.free_slots(),
            in_flight: self.engine.live(),
            ..ThreadValues::default()
        };
        for c in self.conns.iter().flatten() {
            v.conns += 1;
            v.rx_bytes += c.rx.capacity();
            v.tx_bytes += c.held_bytes() - c.rx.capacity();
        }
        self.shared.metrics.thread(self.id, &v);
    }
}
