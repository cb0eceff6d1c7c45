//! The server's metrics in Prometheus text format (`--metrics ADDR`, docs/design/server.md,
//! "Metrics"): one [`Metrics`] per server, shared by every worker thread through `Shared`.
//!
//! Three kinds of values:
//! - typed handles the threads update where the work happens: per-tenant
//!   ([`TenantMeter`]: requests by op and status, CPU time, bytes, chains), per-op latency, and
//!   per-thread gauges (buffer bytes, engine slots and reads in flight) each thread sets at the
//!   end of its loop pass;
//! - the server's existing counters (`ServerStats`) and connection counts, copied into their
//!   families when the endpoint is scraped (they stay the one source of truth);
//! - the program registry's and the DDS hook's state, read at scrape.
//!
//! Every handle is a prometheus-client metric over an atomic. prometheus-client updates them
//! with `Relaxed` ordering (counters, gauges) or a `Relaxed` CAS loop (f64 counters): each
//! value is a statistic read on its own, nothing is published through it, so no ordering with
//! other memory is needed; a scrape may see one counter a request ahead of another. The copies
//! from `ServerStats` load and store `Relaxed` for the same reason.
//!
//! Cardinality is bounded: ops, statuses and threads are fixed sets; tenants are the token
//! file's (with authentication a connection is counted under its tenant only once AUTH proved
//! it, so a client cannot invent labels), and without authentication the first
//! [`MAX_METRIC_TENANTS`] names HELLO sent get their own label and later ones share `_other`.

mod http;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::log::{Event, Logger};
use storefn_wire::layout::{FRAME_HEADER_BYTES, MSG_HEADER_BYTES};
use storefn_wire::layout::{MSG_OFF_LEN, MSG_OFF_OP, MSG_OFF_STATUS};
use storefn_wire::{op, StatusCode};

pub(crate) use http::serve as serve_http;
pub use http::{MAX_METRICS_CONNS, MAX_METRICS_REQUEST_BYTES, METRICS_IO_TIMEOUT};

/// Tenants with their own label when the server runs without a token file (with one, every
/// tenant of the file has its label and no other name can get one).
pub const MAX_METRIC_TENANTS: usize = 64;

/// Refused-request log lines per tenant (the unauthenticated ones share one budget) per
/// second; the rest are counted and the next line written says how many were left out. The
/// log is written on the worker thread: without it one client's frames of bad requests could
/// fill a slow stderr and stall every connection of the thread.
pub const MAX_REFUSED_LOG_LINES_PER_SEC: u32 = 100;

/// The label of requests before authentication and of tenants past [`MAX_METRIC_TENANTS`].
pub const UNAUTHENTICATED_TENANT: &str = "-";
pub const OTHER_TENANT: &str = "_other";

type Kv = (&'static str, &'static str);
type TenantLabel = [(&'static str, Arc<str>); 1];
type ReqLabels = ([Kv; 2], TenantLabel);
type ThreadLabels = ([Kv; 1], [(&'static str, usize); 1]);
type Seconds = Counter<f64, AtomicU64>;

fn latency_histogram() -> Histogram {
    // 10 µs .. ~42 s, x4 per bucket.
    Histogram::new(exponential_buckets(1e-5, 4.0, 12))
}

/// The server's metrics: the registry the endpoint encodes and the handles that feed it.
pub struct Metrics {
    registry: Registry,
    requests: Family<ReqLabels, Counter>,
    latency: Family<[Kv; 1], Histogram, fn() -> Histogram>,
    cpu: Family<([Kv; 1], TenantLabel), Seconds>,
    bytes: Family<([Kv; 1], TenantLabel), Counter>,
    chains: Family<TenantLabel, Counter>,
    insns: Family<TenantLabel, Counter>,
    threads: Family<ThreadLabels, Gauge>,
    /// Scrape-time copies: connections by state, the server's counters, registry, DDS.
    conns: Family<[Kv; 1], Gauge>,
    stats: Family<[Kv; 1], Counter>,
    engine_files: Family<[Kv; 1], Gauge>,
    programs: Family<[Kv; 1], Counter>,
    programs_held: Gauge,
    host_alive: Gauge,
    tenants: Mutex<Vec<Arc<TenantMeter>>>,
    /// Fixed tenant set (the token file): names outside it are never given a label.
    closed_set: bool,
    anonymous: Arc<TenantMeter>,
    other: Arc<TenantMeter>,
    log: Logger,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// One tenant's handles (cloned out of the families once, when the tenant is first seen).
pub struct TenantMeter {
    name: Arc<str>,
    requests: Family<ReqLabels, Counter>,
    cpu_program: Seconds,
    cpu_request: Seconds,
    bytes_read: Counter,
    bytes_written: Counter,
    chains: Counter,
    insns: Counter,
    log: Logger,
    /// The refused-line budget: the second it counts (since `LOG_EPOCH`), lines written in
    /// it, lines left out since the last one written. Relaxed: an approximate rate limit;
    /// two threads racing at a second's turn may write a few lines more, never fewer.
    log_second: AtomicU64,
    log_lines: std::sync::atomic::AtomicU32,
    log_dropped: AtomicU64,
}

/// The start of the log budget's seconds.
static LOG_EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

impl std::fmt::Debug for TenantMeter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantMeter").field("name", &self.name).finish_non_exhaustive()
    }
}

fn op_name(code: u8) -> &'static str {
    op::ALL.iter().find(|(c, _)| *c == code).map_or("?", |(_, n)| n)
}

fn ns_to_s(ns: u64) -> f64 {
    Duration::from_nanos(ns).as_secs_f64()
}

impl TenantMeter {
    /// Whether one more refused-request line fits this second's budget (else it is counted).
    fn log_allowed(&self) -> bool {
        let now = LOG_EPOCH.get_or_init(std::time::Instant::now).elapsed().as_secs();
        if self.log_second.swap(now, Ordering::Relaxed) != now {
            self.log_lines.store(0, Ordering::Relaxed);
        }
        if self.log_lines.fetch_add(1, Ordering::Relaxed) < MAX_REFUSED_LOG_LINES_PER_SEC {
            return true;
        }
        self.log_dropped.fetch_add(1, Ordering::Relaxed);
        false
    }

    /// CPU time of this tenant's program runs (XRP chains, λ over staged ranges).
    pub(crate) fn program_cpu(&self, ns: u64) {
        self.cpu_program.inc_by(ns_to_s(ns));
    }

    /// CPU time of requests the worker answered inline (LOAD_PROG, STAT, WRITE, LAMBDA_WRITE).
    pub(crate) fn request_cpu(&self, ns: u64) {
        self.cpu_request.inc_by(ns_to_s(ns));
    }

    pub(crate) fn read(&self, bytes: u64) {
        self.bytes_read.inc_by(bytes);
    }

    pub(crate) fn written(&self, bytes: u64) {
        self.bytes_written.inc_by(bytes);
    }

    pub(crate) fn chain(&self) {
        self.chains.inc();
    }

    /// Instructions this tenant's program runs were charged (the VM's count per run).
    pub(crate) fn instructions(&self, n: u64) {
        self.insns.inc_by(n);
    }

    /// Counts every response of a finished response frame (header included) under its op and
    /// status, and logs the refused ones with their message.
    pub(crate) fn count_frame(&self, frame: &[u8], who: &Event<'_>) {
        let mut at = FRAME_HEADER_BYTES;
        while at + MSG_HEADER_BYTES <= frame.len() {
            let m = &frame[at..];
            let op = op_name(m[MSG_OFF_OP]);
            let st = u16::from_le_bytes([m[MSG_OFF_STATUS], m[MSG_OFF_STATUS + 1]]);
            let len = u32::from_le_bytes(m[MSG_OFF_LEN..MSG_OFF_LEN + 4].try_into().expect("4"));
            let len = len as usize;
            let status = StatusCode::from_u16(st).map_or("?", StatusCode::name);
            let labels = ([("op", op), ("status", status)], [("tenant", Arc::clone(&self.name))]);
            self.requests.get_or_create(&labels).inc();
            if st != StatusCode::Ok as u16 && self.log.on && self.log_allowed() {
                let text = m.get(MSG_HEADER_BYTES..MSG_HEADER_BYTES + len).unwrap_or(&[]);
                let reason = String::from_utf8_lossy(text);
                let tenant =
                    (&*self.name != UNAUTHENTICATED_TENANT).then_some(self.name.as_bytes());
                let e =
                    Event { event: "refused", op: Some(op), status: Some(status), tenant, ..*who };
                let dropped = self.log_dropped.swap(0, Ordering::Relaxed);
                if dropped > 0 {
                    let why = format!("{reason} ({dropped} refused requests not logged before)");
                    self.log.log(&Event { reason: &why, ..e });
                } else {
                    self.log.log(&Event { reason: &reason, ..e });
                }
            }
            at += MSG_HEADER_BYTES + len;
        }
    }
}

/// What the scrape reads besides the handles.
pub(crate) struct ScrapeInputs<'a> {
    pub stats: &'a crate::server::ServerStats,
    pub conns: (usize, usize),
    pub registry: Option<(u64, u64, usize)>,
    pub host_alive: Option<bool>,
}

impl Metrics {
    /// Metrics for `threads` worker threads; `tenants`: the token file's names (every tenant
    /// gets its label now), or `None` (labels are handed out as HELLO names arrive).
    pub(crate) fn new(threads: usize, tenants: Option<Vec<String>>, log: Logger) -> Self {
        let mut r = Registry::default();
        let requests = Family::<ReqLabels, Counter>::default();
        r.register("storefn_requests", "Responses by op, status and tenant", requests.clone());
        let latency = Family::new_with_constructor(latency_histogram as fn() -> Histogram);
        let help = "Time from a request's frame to its answer, by op (engine and inline ops)";
        r.register("storefn_request_duration_seconds", help, latency.clone());
        let cpu = Family::default();
        let help = "CPU time spent on a tenant's requests: program runs, inline request work";
        r.register("storefn_tenant_cpu_seconds", help, cpu.clone());
        let bytes = Family::default();
        r.register("storefn_tenant_bytes", "Bytes read and written for a tenant", bytes.clone());
        let chains = Family::default();
        r.register("storefn_tenant_chains", "XRP chains run for a tenant", chains.clone());
        let insns = Family::default();
        let help = "Instructions a tenant's program runs executed (as the budget counts them)";
        r.register("storefn_tenant_instructions", help, insns.clone());
        let th = Family::default();
        let help = "Per server thread: connection receive/send buffer bytes, engine slots in \
                    use, engine reads and chains in flight, connections";
        r.register("storefn_thread", help, th.clone());
        let conns = Family::default();
        r.register("storefn_connections", "Open connections, by authentication", conns.clone());
        let stats = Family::default();
        let help = "Server events: accepted and refused connections, closes by reason, \
                    protocol and authentication errors, files opened, DDS forwards";
        r.register("storefn_events", help, stats.clone());
        let engine_files = Family::default();
        let help = "Engine registered-file slots in use and open-file table entries";
        r.register("storefn_engine_files", help, engine_files.clone());
        let programs = Family::default();
        r.register("storefn_programs", "Programs verified and evicted", programs.clone());
        let programs_held = Gauge::default();
        r.register("storefn_programs_held", "Programs in the registry", programs_held.clone());
        let host_alive = Gauge::default();
        let help = "DDS: 1 while the host application's heartbeat moves, 0 when it stopped, \
                    -1 without a DDS hook";
        r.register("storefn_dds_host_alive", help, host_alive.clone());
        let mk = |name: &str, requests: &Family<ReqLabels, Counter>| {
            make_meter(name, requests, &cpu, &bytes, (&chains, &insns), log)
        };
        let anonymous = mk(UNAUTHENTICATED_TENANT, &requests);
        let other = mk(OTHER_TENANT, &requests);
        let closed_set = tenants.is_some();
        let list = tenants.unwrap_or_default().iter().map(|n| mk(n, &requests)).collect();
        for t in 0..threads {
            for k in THREAD_GAUGES {
                let _ = th.get_or_create(&([("kind", k)], [("thread", t)]));
            }
        }
        Self {
            registry: r,
            requests,
            latency,
            cpu,
            bytes,
            chains,
            insns,
            threads: th,
            conns,
            stats,
            engine_files,
            programs,
            programs_held,
            host_alive,
            tenants: Mutex::new(list),
            closed_set,
            anonymous,
            other,
            log,
        }
    }

    /// The meter of requests before authentication.
    pub(crate) fn anonymous(&self) -> Arc<TenantMeter> {
        Arc::clone(&self.anonymous)
    }

    /// The meter of tenant `name` (see the module's note on cardinality).
    pub(crate) fn tenant(&self, name: &[u8]) -> Arc<TenantMeter> {
        let mut list = self.tenants.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(t) = list.iter().find(|t| t.name.as_bytes() == name) {
            return Arc::clone(t);
        }
        let Ok(name) = std::str::from_utf8(name) else { return Arc::clone(&self.other) };
        if self.closed_set || list.len() >= MAX_METRIC_TENANTS || name == OTHER_TENANT {
            return Arc::clone(&self.other);
        }
        let counts = (&self.chains, &self.insns);
        let m = make_meter(name, &self.requests, &self.cpu, &self.bytes, counts, self.log);
        list.push(Arc::clone(&m));
        m
    }

    /// One request of op `code` took `d` from its frame to its answer.
    pub(crate) fn latency(&self, code: u8, d: Duration) {
        self.latency.get_or_create(&[("op", op_name(code))]).observe(d.as_secs_f64());
    }

    /// A thread's gauges at the end of its loop pass.
    pub(crate) fn thread(&self, thread: usize, values: &ThreadValues) {
        let v =
            [values.rx_bytes, values.tx_bytes, values.slots_in_use, values.in_flight, values.conns];
        for (k, v) in THREAD_GAUGES.iter().zip(v) {
            let g = self.threads.get_or_create(&([("kind", k)], [("thread", thread)]));
            g.set(i64::try_from(v).unwrap_or(i64::MAX));
        }
    }

    /// The text a scrape answers: copies the scrape-time values in, then encodes.
    pub(crate) fn encode(&self, i: &ScrapeInputs<'_>) -> String {
        let s = i.stats;
        // Relaxed: statistics (module note).
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let set_c = |f: &Family<[Kv; 1], Counter>, k: &'static str, v: u64| {
            f.get_or_create(&[("event", k)]).inner().store(v, Ordering::Relaxed);
        };
        for (k, v) in [
            ("accepted", ld(&s.connections)),
            ("refused_connection", ld(&s.refused_connections)),
            ("closed_idle", ld(&s.closed_idle)),
            ("closed_slow", ld(&s.closed_slow)),
            ("closed_unauthenticated", ld(&s.closed_unauthenticated)),
            ("protocol_error", ld(&s.protocol_errors)),
            ("auth_failure", ld(&s.auth_failures)),
            ("file_opened", ld(&s.files_opened)),
            ("dds_forwarded", ld(&s.forwarded)),
            ("dds_forward_timeout", ld(&s.forward_timeouts)),
            ("dds_late_answer", ld(&s.late_answers)),
            ("dds_offload_raced", ld(&s.offload_raced)),
        ] {
            set_c(&self.stats, k, v);
        }
        let gauge = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let (open, pre) = i.conns;
        self.conns.get_or_create(&[("state", "unauthenticated")]).set(gauge(pre as u64));
        self.conns.get_or_create(&[("state", "authenticated")]).set(gauge((open - pre) as u64));
        self.engine_files.get_or_create(&[("kind", "slots")]).set(gauge(ld(&s.engine_files)));
        self.engine_files.get_or_create(&[("kind", "cached")]).set(gauge(ld(&s.cached_files)));
        if let Some((loaded, evicted, held)) = i.registry {
            let p = &self.programs;
            p.get_or_create(&[("event", "loaded")]).inner().store(loaded, Ordering::Relaxed);
            p.get_or_create(&[("event", "evicted")]).inner().store(evicted, Ordering::Relaxed);
            self.programs_held.set(gauge(held as u64));
        }
        self.host_alive.set(match i.host_alive {
            Some(true) => 1,
            Some(false) => 0,
            None => -1,
        });
        let mut out = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

fn make_meter(
    name: &str,
    requests: &Family<ReqLabels, Counter>,
    cpu: &Family<([Kv; 1], TenantLabel), Seconds>,
    bytes: &Family<([Kv; 1], TenantLabel), Counter>,
    (chains, insns): (&Family<TenantLabel, Counter>, &Family<TenantLabel, Counter>),
    log: Logger,
) -> Arc<TenantMeter> {
    let t: TenantLabel = [("tenant", Arc::from(name))];
    let kv = |k: &'static str| ([("work", k)], t.clone());
    let dir = |k: &'static str| ([("dir", k)], t.clone());
    // One statement per handle: a family's guard lives to the end of its statement, and a
    // second get_or_create on the same family inside it would wait for itself.
    let cpu_program = cpu.get_or_create(&kv("program")).clone();
    let cpu_request = cpu.get_or_create(&kv("request")).clone();
    let bytes_read = bytes.get_or_create(&dir("read")).clone();
    let bytes_written = bytes.get_or_create(&dir("written")).clone();
    let chains = chains.get_or_create(&t).clone();
    let insns = insns.get_or_create(&t).clone();
    Arc::new(TenantMeter {
        name: Arc::clone(&t[0].1),
        requests: requests.clone(),
        cpu_program,
        cpu_request,
        bytes_read,
        bytes_written,
        chains,
        insns,
        log,
        log_second: AtomicU64::new(0),
        log_lines: std::sync::atomic::AtomicU32::new(0),
        log_dropped: AtomicU64::new(0),
    })
}

const THREAD_GAUGES: [&str; 5] =
    ["rx_buffer_bytes", "tx_buffer_bytes", "engine_slots_in_use", "engine_in_flight", "conns"];

/// A thread's gauge values (see [`Metrics::thread`]).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ThreadValues {
    pub rx_bytes: usize,
    pub tx_bytes: usize,
    pub slots_in_use: usize,
    pub in_flight: usize,
    pub conns: usize,
}

/// A connection's meter: its tenant's (the unauthenticated one until AUTH) and the thread
/// serving it (for the log lines of refused requests).
#[derive(Debug)]
pub(crate) struct ConnMeter {
    pub tenant: Arc<TenantMeter>,
    pub thread: usize,
}

impl ConnMeter {
    pub(crate) fn new(tenant: Arc<TenantMeter>, thread: usize) -> Self {
        Self { tenant, thread }
    }

    /// [`TenantMeter::count_frame`] for this connection's finished response frame.
    pub(crate) fn count_frame(&self, frame: &[u8], conn: u64, peer: std::net::SocketAddr) {
        let who =
            Event { thread: self.thread, conn: Some(conn), peer: Some(peer), ..Event::default() };
        self.tenant.count_frame(frame, &who);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_request_lines_are_limited_per_tenant_and_second() {
        let log = Logger { on: true, format: crate::log::LogFormat::Json };
        let m = Metrics::new(1, Some(vec!["a".into()]), log);
        let a = m.tenant(b"a");
        let allowed = (0..3 * MAX_REFUSED_LOG_LINES_PER_SEC).filter(|_| a.log_allowed()).count();
        // One second's budget, or two if the second turned during the loop.
        let n = MAX_REFUSED_LOG_LINES_PER_SEC as usize;
        assert!((n..=2 * n).contains(&allowed), "{allowed}");
        assert!(a.log_dropped.load(Ordering::Relaxed) >= u64::from(MAX_REFUSED_LOG_LINES_PER_SEC));
        // Another tenant has its own budget.
        assert!(m.anonymous().log_allowed());
    }
}
