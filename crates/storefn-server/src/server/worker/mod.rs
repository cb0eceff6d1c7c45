//! One server thread: its connections, its engine, its compiled programs, its open files.
//!
//! A pass of the loop: `poll` the listener, every connection and the engine's ring fd; accept;
//! read and parse whole frames, answering what needs no I/O at once and queueing the rest per
//! tenant; admit queued requests to the engine (fairly); reap completions into response
//! frames; run λ programs over their completed reads; send. Buffers (receive, frames, job
//! scratch) are reused, so a request allocates nothing once the buffers have grown.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Instant;

use storefn_io::{Completion, Engine, EngineConfig};

use super::files::Files;
use super::progs::Progs;
mod job;
mod lambda;
mod loads;
mod meter;
mod offload;
mod offloaded;
mod out;
mod ranges;
mod read;
mod requests;
mod runs;
mod side;
mod tenants;
mod writes;
mod xrp;
use super::sched::Sched;
use super::{
    ServerError, Shared, CONN_KEEP_BYTES, CONN_RX_START_BYTES, ENGINE_CHAINS, MAX_CONN_OUT_BYTES,
    MAX_IN_FLIGHT_PER_CONN, MAX_PENDING_WRITE_BYTES, MAX_PREAUTH_FRAME_BYTES, POLL_INTERVAL,
    SERVER_MAX_HOPS, SHUTDOWN_FLUSH_TIMEOUT,
};
use job::{job_of, Job};
use offload::OffloadState;
pub(crate) use ranges::{LARGEST_RANGE_BUF, SPARE_RANGE_BUF_BYTES};
use storefn_wire::layout::FRAME_HEADER_BYTES;
use storefn_wire::limits::{MAX_FRAME_BYTES, MAX_TENANT_BYTES};
use storefn_wire::{decode_header, FrameBuf, ProtoError, StatusCode, HASH_BYTES, KIND_REQUEST};

/// Connections accepted per pass, so a connection storm cannot stall the served ones.
const ACCEPTS_PER_PASS: usize = 64;

/// A tenant name as HELLO sent it (at most `MAX_TENANT_BYTES`), kept in the connection.
#[derive(Debug, Clone, Copy)]
pub(super) struct TenantName {
    bytes: [u8; MAX_TENANT_BYTES],
    len: u8,
}

impl TenantName {
    pub(super) fn new(name: &[u8]) -> Self {
        let mut bytes = [0; MAX_TENANT_BYTES];
        bytes[..name.len()].copy_from_slice(name);
        Self { bytes, len: u8::try_from(name.len()).expect("HELLO checks MAX_TENANT_BYTES") }
    }

    pub(super) fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// One client connection.
#[derive(Debug)]
pub(super) struct Conn {
    pub(super) stream: TcpStream,
    pub(super) peer: SocketAddr,
    pub(super) id: u64,
    pub(super) gen: u32,
    pub(super) rx: Vec<u8>,
    pub(super) rx_len: usize,
    pub(super) frames_in: u64,
    /// Responses being collected this pass.
    pub(super) frame: FrameBuf,
    /// Bytes ready to send, and how many of them went out.
    pub(super) tx: Vec<u8>,
    pub(super) tx_pos: usize,
    /// Whole response frames in the range buffers their data was read into (READ, DDS's
    /// offloaded reads), sent after (or between) `tx`'s bytes; `out_pos` bytes of the front one
    /// are sent.
    out_frames: std::collections::VecDeque<out::OutFrame>,
    pub(super) out_pos: usize,
    pub(super) in_flight: u32,
    /// Its READ and LAMBDA jobs not yet queued for their tenant, in arrival order: they wait
    /// for room in the connection's answer budget (`MAX_CONN_READ_BYTES`).
    pub(super) waiting: std::collections::VecDeque<u32>,
    /// Answer bytes its queued and admitted jobs hold of that budget.
    pub(super) answer_bytes: usize,
    /// Whole frames wait in `rx` for a pass in which the tenant has CPU budget left; the
    /// front one's first `resume` requests were handled.
    pub(super) held: bool,
    pub(super) resume: u32,
    /// The name HELLO gave (once HELLO was received).
    pub(super) hello: Option<TenantName>,
    /// The tenant entry it holds: after HELLO without authentication, after AUTH with it.
    pub(super) tenant: Option<u32>,
    /// The tenant's scope (`scopes::Policy`): its token's index, set by AUTH (0 without auth).
    pub(super) scope: u32,
    pub(super) challenge: [u8; HASH_BYTES],
    pub(super) authed: bool,
    pub(super) last_rx: Instant,
    /// When it was accepted (it must authenticate within the auth timeout).
    pub(super) accepted: Instant,
    /// When a partly received frame started waiting for the rest.
    pub(super) partial_since: Option<Instant>,
    /// When pending output stopped draining.
    pub(super) tx_stalled_since: Option<Instant>,
    /// Close once the output is sent (auth failure, protocol error).
    pub(super) closing: Option<&'static str>,
    /// Its tenant's metrics (the unauthenticated ones until AUTH).
    pub(super) meter: crate::metrics::ConnMeter,
}

/// What one entry of the poll array watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PollSlot {
    Listener,
    /// The engine's ring fd: completions are reaped after every poll anyway.
    Engine,
    /// DDS: the hook's eventfd (host answers may be ready).
    HostAnswers,
    /// The writer thread's eventfd: writes were synced and wait for their answers.
    Writes,
    /// The verifier thread's eventfd: programs were verified and wait for their answers.
    Loads,
    /// The runner thread's eventfd: λ runs are done and wait for their answers.
    Runs,
    Conn(u32),
}

/// Field order matters on drop: `engine` goes first and waits for every read in flight, so
/// the range buffers those reads write (held by `jobs`) outlive them.
pub(super) struct Worker<'a> {
    pub(super) id: usize,
    pub(super) shared: &'a Shared,
    pub(super) engine: Engine,
    pub(super) conns: Vec<Option<Conn>>,
    pub(super) gens: Vec<u32>,
    pub(super) files: Files,
    pub(super) progs: Progs,
    /// Every request in flight, of every kind; an engine token is an index here.
    jobs: Vec<Option<Job>>,
    pub(super) free_jobs: Vec<u32>,
    pub(super) spare_bufs: Vec<Box<[u8]>>,
    /// λ piece reads in flight, by tenant entry (`CONTENDED_LAMBDA_READS`).
    lambda_reads: Vec<u32>,
    /// λ runs staged for the runner, by tenant entry (`MAX_STAGED_RUNS_PER_TENANT`).
    lambda_runs: Vec<u32>,
    /// Range buffers for READ answers and λ ranges (AIOS: reused, not freed).
    ranges: ranges::RangePool,
    /// LAMBDA_WRITE: the program's output before it is written (grows to the largest
    /// `out_cap` asked, at most `MAX_LAMBDA_WRITE_OUT_BYTES`, and is reused).
    pub(super) write_staging: Vec<u8>,
    pub(super) sched: Sched,
    tenants: tenants::Tenants,
    pub(super) pollfds: Vec<libc::pollfd>,
    pub(super) poll_slots: Vec<PollSlot>,
    /// Jobs waiting in their connections' `waiting` queues, in all.
    waiting: usize,
    /// Jobs finished in the current reap.
    pub(super) finished: Vec<u32>,
    /// DDS: this frame's OFFLOAD requests (messages, batched at the end of the frame) and the
    /// requests forwarded to the host application, by token.
    offload: OffloadState,
    /// WRITE and LAMBDA_WRITE: the thread's writer thread (writes and syncs off the loop).
    writes: writes::Writes,
    /// LOAD_PROG: the thread's verifier thread (hash, parse, verify off the loop).
    loads: loads::Loads,
    /// λ runs: the thread's runner thread (programs run over landed ranges off the loop).
    runs: runs::Runs,
    /// This pass's connections with input to handle, as (tenant's CPU used, connection,
    /// readable): served least-used tenant first.
    ready: Vec<(u64, u32, bool)>,
    /// When the request being handled began (a write's latency runs to its answer).
    pub(super) req_started: Instant,
}

pub(crate) fn run(
    id: usize,
    listener: &TcpListener,
    shared: &Arc<Shared>,
    ready: &Sender<Result<(), ServerError>>,
) -> Result<(), ServerError> {
    let cfg = EngineConfig {
        ring_depth: u32::try_from(ENGINE_CHAINS).expect("small"),
        buffers: ENGINE_CHAINS,
        chains: ENGINE_CHAINS,
        max_hops: SERVER_MAX_HOPS,
        hop_bytes: shared.cfg.hop_bytes,
        // Every chain slot may hold a range read (READ, λ): the scheduler admits by slots.
        range_reads: ENGINE_CHAINS,
        ..EngineConfig::default()
    };
    let engine = match Engine::new(cfg) {
        Ok(e) => e,
        Err(source) => {
            let msg = source.to_string();
            let _ = ready.send(Err(ServerError::Engine { thread: id, source }));
            return Err(ServerError::Io { thread: id, source: std::io::Error::other(msg) });
        }
    };
    // A side thread that cannot start fails the server's start (reported to `ready`).
    let failed = |source: std::io::Error| {
        let msg = source.to_string();
        let _ = ready.send(Err(ServerError::Io { thread: id, source }));
        ServerError::Io { thread: id, source: std::io::Error::other(msg) }
    };
    let writes = writes::Writes::start(id).map_err(&failed)?;
    let loads = loads::Loads::start(id, shared).map_err(&failed)?;
    let runs = runs::Runs::start(id).map_err(&failed)?;
    let _ = ready.send(Ok(()));
    let mut w = Worker {
        writes,
        loads,
        runs,
        id,
        shared,
        engine,
        conns: Vec::new(),
        gens: Vec::new(),
        files: Files::default(),
        progs: Progs::default(),
        jobs: Vec::new(),
        free_jobs: Vec::new(),
        spare_bufs: Vec::new(),
        ranges: ranges::RangePool::default(),
        lambda_reads: Vec::new(),
        lambda_runs: Vec::new(),
        write_staging: Vec::new(),
        sched: Sched::new(u32::try_from(ENGINE_CHAINS).expect("small"), shared.cfg.fair),
        tenants: tenants::Tenants::default(),
        pollfds: Vec::new(),
        poll_slots: Vec::new(),
        finished: Vec::with_capacity(ENGINE_CHAINS),
        waiting: 0,
        offload: OffloadState::default(),
        ready: Vec::new(),
        req_started: Instant::now(),
    };
    w.serve(listener)
}

impl Worker<'_> {
    pub(super) fn log(&self, conn: &Conn, event: &str, reason: &str) {
        self.log_conn(conn, event, reason);
    }

    pub(super) fn stopping(&self) -> bool {
        // Acquire: pairs with Server::stop's Release.
        self.shared.stop.load(Ordering::Acquire)
    }

    fn serve(&mut self, listener: &TcpListener) -> Result<(), ServerError> {
        while !self.stopping() {
            self.poll_once(Some(listener))
                .map_err(|source| ServerError::Io { thread: self.id, source })?;
        }
        self.shutdown();
        Ok(())
    }

    /// One pass of the loop.
    fn poll_once(&mut self, listener: Option<&TcpListener>) -> std::io::Result<()> {
        let timeout = self.fill_pollfds(listener);
        let nfds = libc::nfds_t::try_from(self.pollfds.len()).expect("bounded");
        // SAFETY: pollfds is a valid array of nfds entries that lives across the call.
        let n = unsafe { libc::poll(self.pollfds.as_mut_ptr(), nfds, timeout) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        self.sched.new_pass();
        self.on_poll_events(listener)?;
        // Completions free slots and shares: admit queued jobs again at once rather than after
        // the next poll, which sleeps up to POLL_INTERVAL when nothing else is in flight: admit
        // what the reap freed, and repeat while anything was admitted (each pass admits a
        // queued job: bounded).
        // Regression: dispatching only before the reap left jobs beyond one tenant's share
        // (the 225th READ of a 256-READ frame) queued until the poll timed out, 50 ms.
        self.run_engine()?;
        // Answered runs release their jobs' engine shares: admit what waits for them now, not
        // after the next poll (which may sleep). Ranges that land meanwhile go to the runner.
        if self.poll_runs() > 0 {
            self.run_engine()?;
            self.feed_runner();
        }
        self.poll_writes();
        self.poll_loads();
        self.poll_forwarded();
        self.flush_all();
        // What was sent made room in the connections' answer budgets: admit and submit the
        // jobs that waited for it now, not after the next poll (which may sleep).
        if self.unpark() > 0 {
            self.run_engine()?;
            self.flush_all();
        }
        self.check_timeouts();
        self.publish_metrics();
        Ok(())
    }

    /// Reaps, lets waiting jobs on to their tenants' queues and admits queued jobs until an
    /// admission round admits nothing (each round admits a queued job: bounded); the engine
    /// submits what was admitted at the next reap.
    fn run_engine(&mut self) -> std::io::Result<()> {
        // What is queued now is submitted with the reap's first submission, ahead of the
        // reads the reaped completions lead to.
        self.unpark();
        self.dispatch();
        loop {
            self.reap()?;
            self.unpark();
            if self.dispatch() == 0 {
                return Ok(());
            }
        }
    }

    /// Fills the poll array (what each entry watches in `poll_slots`); returns the timeout.
    fn fill_pollfds(&mut self, listener: Option<&TcpListener>) -> i32 {
        self.pollfds.clear();
        self.poll_slots.clear();
        if let Some(l) = listener {
            self.pollfds.push(libc::pollfd { fd: l.as_raw_fd(), events: libc::POLLIN, revents: 0 });
            self.poll_slots.push(PollSlot::Listener);
        }
        self.pollfds.push(libc::pollfd {
            fd: self.engine.ring_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        self.poll_slots.push(PollSlot::Engine);
        // DDS: host answers (the hook's eventfd) and offloaded reads (their ring's fd) wake the
        // poll like the engine's completions do.
        let wake = self.shared.cfg.offload.as_ref().and_then(|h| h.wake_fd(self.id));
        if let (Some(fd), true) = (wake, self.offload.forwarded_live > 0) {
            self.pollfds.push(libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
            self.poll_slots.push(PollSlot::HostAnswers);
        }
        if self.writes.pending > 0 {
            let fd = self.writes.fd();
            self.pollfds.push(libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
            self.poll_slots.push(PollSlot::Writes);
        }
        if self.loads.pending > 0 {
            let fd = self.loads.fd();
            self.pollfds.push(libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
            self.poll_slots.push(PollSlot::Loads);
        }
        if self.runs.pending > 0 {
            let fd = self.runs.fd();
            self.pollfds.push(libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
            self.poll_slots.push(PollSlot::Runs);
        }
        for (i, c) in self.conns.iter().enumerate() {
            let Some(c) = c else { continue };
            let mut ev = 0;
            let backlog = c.out_backlog();
            if c.closing.is_none()
                && !c.held
                && listener.is_some()
                && self.writes.pending_bytes < MAX_PENDING_WRITE_BYTES
                && c.in_flight < MAX_IN_FLIGHT_PER_CONN
                && c.out_held() < MAX_CONN_OUT_BYTES
            {
                ev |= libc::POLLIN;
            }
            if backlog > 0 {
                ev |= libc::POLLOUT;
            }
            self.pollfds.push(libc::pollfd { fd: c.stream.as_raw_fd(), events: ev, revents: 0 });
            self.poll_slots.push(PollSlot::Conn(u32::try_from(i).expect("bounded")));
        }
        // Without a wake fd, host answers arrive over shared memory only: while any are
        // awaited, poll without sleeping.
        // Work carried over from the last pass (a tenant's spent budget) is served at once.
        let carried = self.sched.carried() || self.conns.iter().flatten().any(|c| c.held);
        if carried || (self.offload.forwarded_live > 0 && wake.is_none()) {
            0
        } else {
            i32::try_from(POLL_INTERVAL.as_millis()).expect("small")
        }
    }

    /// Acts on what `poll` reported: accepts, resets the host-answer eventfd, reads; then
    /// handles the connections' input, the tenant that used least CPU first.
    fn on_poll_events(&mut self, listener: Option<&TcpListener>) -> std::io::Result<()> {
        self.ready.clear();
        for k in 0..self.pollfds.len() {
            let re = self.pollfds[k].revents;
            if re == 0 {
                continue;
            }
            match self.poll_slots[k] {
                PollSlot::Listener => {
                    if let Some(l) = listener {
                        self.accept(l);
                    }
                }
                PollSlot::HostAnswers => {
                    let mut n = [0u8; 8];
                    // SAFETY: reads 8 bytes into a live buffer from the hook's eventfd
                    // (non-blocking); it only resets the counter, the answers are polled below.
                    unsafe { libc::read(self.pollfds[k].fd, n.as_mut_ptr().cast(), 8) };
                }
                PollSlot::Engine | PollSlot::Writes | PollSlot::Loads | PollSlot::Runs => {}
                PollSlot::Conn(ci) => {
                    if re & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
                        self.ready.push((0, ci, true));
                    }
                }
            }
        }
        for (ci, c) in self.conns.iter().enumerate() {
            let ci = u32::try_from(ci).expect("bounded");
            if c.as_ref().is_some_and(|c| c.held) && !self.ready.iter().any(|r| r.1 == ci) {
                self.ready.push((0, ci, false));
            }
        }
        for r in &mut self.ready {
            let t = self.conns[r.1 as usize].as_ref().and_then(|c| c.tenant);
            r.0 = t.map_or(0, |t| self.sched.used(t));
        }
        self.ready.sort_unstable();
        let mut last = None;
        for k in 0..self.ready.len() {
            let (_, ci, readable) = self.ready[k];
            let tenant = self.conns[ci as usize].as_ref().and_then(|c| c.tenant);
            if last.is_some() && tenant != last {
                // Before another tenant's turn, what the last one queued goes to the device
                // and what completed is reaped: a point read waits for the device or for the
                // next tenant's slice, not for both one after the other.
                self.run_engine()?;
            }
            last = tenant;
            if readable {
                self.on_readable(ci);
            } else {
                self.parse_frames(ci);
            }
        }
        Ok(())
    }

    fn accept(&mut self, l: &TcpListener) {
        for _ in 0..ACCEPTS_PER_PASS {
            let (stream, peer) = match l.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    self.log_thread("accept_failed", None, &e.to_string());
                    return;
                }
            };
            let live = self.conns.iter().filter(|c| c.is_some()).count();
            let limits = &self.shared.cfg.conn_limits;
            let admitted = if live >= limits.per_thread {
                Err("this thread's connection limit")
            } else {
                let mut counts = self.shared.conn_counts();
                counts.admit(peer.ip(), limits).map_err(super::conns::Refused::why)
            };
            if let Err(why) = admitted {
                // Relaxed: a statistic.
                self.shared.stats.refused_connections.fetch_add(1, Ordering::Relaxed);
                self.log_thread("refused_connection", Some(peer), why);
                continue;
            }
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            let _ = stream.set_nodelay(true);
            let ci = match self.conns.iter().position(Option::is_none) {
                Some(i) => i,
                None => {
                    self.conns.push(None);
                    self.gens.push(0);
                    self.conns.len() - 1
                }
            };
            self.gens[ci] = self.gens[ci].wrapping_add(1);
            let c = Conn::new(
                stream,
                peer,
                self.shared.next_conn.fetch_add(1, Ordering::Relaxed),
                self.gens[ci],
                crate::metrics::ConnMeter::new(self.shared.metrics.anonymous(), self.id),
            );
            self.shared.stats.connections.fetch_add(1, Ordering::Relaxed);
            self.log(&c, "connected", "");
            self.conns[ci] = Some(c);
        }
    }
}

impl Conn {
    fn new(
        stream: TcpStream,
        peer: SocketAddr,
        id: u64,
        gen: u32,
        meter: crate::metrics::ConnMeter,
    ) -> Self {
        Self {
            stream,
            peer,
            id,
            gen,
            rx: vec![0; CONN_RX_START_BYTES],
            rx_len: 0,
            frames_in: 0,
            frame: FrameBuf::default(),
            tx: Vec::new(),
            tx_pos: 0,
            out_frames: std::collections::VecDeque::new(),
            out_pos: 0,
            in_flight: 0,
            waiting: std::collections::VecDeque::new(),
            answer_bytes: 0,
            held: false,
            resume: 0,
            hello: None,
            tenant: None,
            scope: 0,
            challenge: [0; HASH_BYTES],
            authed: false,
            last_rx: Instant::now(),
            accepted: Instant::now(),
            partial_since: None,
            tx_stalled_since: None,
            closing: None,
            meter,
        }
    }
}

impl Worker<'_> {
    fn close(&mut self, ci: u32, why: &str) {
        if let Some(c) = self.conns[ci as usize].take() {
            self.log(&c, "closed", why);
            if let Some(t) = c.tenant {
                self.tenants.release(t);
            }
            let mut counts = self.shared.conn_counts();
            counts.closed(c.peer.ip(), c.authed);
            drop(counts);
            // Jobs still queued or running for it are dropped at completion (gen mismatch);
            // those waiting for its budget are released now.
            for ji in c.waiting {
                self.waiting -= 1;
                self.release_job(ji);
            }
        }
    }

    fn on_readable(&mut self, ci: u32) {
        let Some(c) = self.conns[ci as usize].as_mut() else { return };
        if c.rx_len == c.rx.len() {
            let grown = (c.rx.len() * 2).min(MAX_FRAME_BYTES);
            c.rx.resize(grown, 0);
        }
        let r = c.stream.read(&mut c.rx[c.rx_len..]);
        match r {
            Ok(0) => {
                self.close(ci, "peer closed");
                return;
            }
            Ok(n) => {
                c.rx_len += n;
                c.last_rx = Instant::now();
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return,
            Err(e) => {
                let why = format!("read: {e}");
                self.close(ci, &why);
                return;
            }
        }
        self.parse_frames(ci);
    }

    /// Handles the whole frames in the connection's receive buffer while its tenant has CPU
    /// budget left in this pass; the rest is held for the next pass.
    fn parse_frames(&mut self, ci: u32) {
        loop {
            let Some(c) = self.conns[ci as usize].as_mut() else { return };
            c.held = false;
            if c.closing.is_some() {
                return;
            }
            if c.tenant.is_some_and(|t| self.sched.pass_spent(t)) && c.rx_len >= FRAME_HEADER_BYTES
            {
                c.held = true;
                return;
            }
            if c.rx_len < FRAME_HEADER_BYTES {
                c.partial_since =
                    (c.rx_len > 0).then(|| c.partial_since.unwrap_or_else(Instant::now));
                // A large frame is done with: its buffer is not kept for every later one.
                if c.rx.len() > CONN_KEEP_BYTES {
                    c.rx.truncate(CONN_KEEP_BYTES);
                    c.rx.shrink_to_fit();
                }
                return;
            }
            let h: [u8; FRAME_HEADER_BYTES] = c.rx[..FRAME_HEADER_BYTES].try_into().expect("16");
            // A frame held part-handled was counted when it began.
            let frame_no = c.frames_in - u64::from(c.resume > 0);
            let h = match decode_header(&h, frame_no, KIND_REQUEST) {
                Ok(h) => h,
                Err(e) => return self.protocol_error(ci, &e),
            };
            let total = h.frame_bytes();
            if !c.authed && total > MAX_PREAUTH_FRAME_BYTES && self.shared.cfg.tokens.is_some() {
                self.shared.stats.protocol_errors.fetch_add(1, Ordering::Relaxed);
                let why = format!(
                    "frame {} of {total} bytes before AUTH (at most {MAX_PREAUTH_FRAME_BYTES})",
                    c.frames_in
                );
                return self.close(ci, &why);
            }
            if c.rx_len < total {
                if c.rx.len() < total {
                    c.rx.resize(total, 0);
                }
                c.partial_since = Some(c.partial_since.unwrap_or_else(Instant::now));
                return;
            }
            c.partial_since = None;
            let from = c.resume;
            if from == 0 {
                c.frames_in += 1;
            }
            // Take the buffer out so messages can borrow it while the worker changes.
            let rx = std::mem::take(&mut c.rx);
            let body = &rx[FRAME_HEADER_BYTES..total];
            let res = self.handle_frame(ci, body, h.count, frame_no, from);
            let Some(c) = self.conns[ci as usize].as_mut() else { return };
            c.rx = rx;
            match res {
                Err(e) => return self.protocol_error(ci, &e),
                Ok(done) if done < h.count => {
                    c.resume = done;
                    c.held = true;
                    return;
                }
                Ok(_) => {
                    c.resume = 0;
                    c.rx.copy_within(total..c.rx_len, 0);
                    c.rx_len -= total;
                }
            }
        }
    }

    fn protocol_error(&mut self, ci: u32, e: &ProtoError) {
        self.shared.stats.protocol_errors.fetch_add(1, Ordering::Relaxed);
        let why = format!("protocol error: {e}");
        self.close(ci, &why);
    }

    /// Admits queued jobs while the engine has free slots; returns how many.
    fn dispatch(&mut self) -> usize {
        let mut n = 0;
        while self.engine.free_slots() > 0 && self.engine.free_range_reads() > 0 {
            let load =
                super::sched::LambdaLoad { reads: &self.lambda_reads, runs: &self.lambda_runs };
            let Some((t, ji)) = self.sched.admit(load) else { break };
            n += 1;
            // Submitting (a READ's buffer, the engine's SQE) is the tenant's work too.
            let t0 = Instant::now();
            self.submit_job(ji);
            self.sched.charge(t, u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX));
        }
        n
    }

    /// Reaps completed chains and reads; answers them.
    fn reap(&mut self) -> std::io::Result<()> {
        if self.engine.live() == 0 {
            return Ok(());
        }
        let Self { engine, progs, jobs, conns, finished, .. } = self;
        finished.clear();
        engine
            .reap(progs, |c: Completion<'_>| {
                let ji = job_of(c.token);
                let j = jobs[ji as usize].as_mut().expect("completed job exists");
                let (ci, gen, _) = j.origin();
                j.complete(&c, conns[ci as usize].as_mut().filter(|cn| cn.gen == gen));
                finished.push(ji);
            })
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        // READ and offloaded answers and λ programs go out here, outside the reap: the
        // completion's borrow of their buffer has ended, the buffer is the job's again.
        // A λ job with several pieces completed in this reap is listed once per piece (and
        // released at the first listing that finds it done); no job is added meanwhile.
        for k in 0..self.finished.len() {
            let ji = self.finished[k];
            match self.jobs[ji as usize] {
                None => {}
                Some(Job::Offloaded(_)) => self.finish_offloaded(ji),
                Some(_) => self.finish_engine_job(ji),
            }
        }
        Ok(())
    }

    /// A queued engine job some of whose reads the last reap completed: answered, and released
    /// once done.
    /// Answering (a READ's head) is charged to the job's tenant; a λ's program time is charged
    /// with the job's (`job_cpu`), not twice.
    fn finish_engine_job(&mut self, ji: u32) {
        let Some(t) = self.jobs[ji as usize].as_ref().and_then(Job::head).map(|h| h.tenant) else {
            return;
        };
        let (t0, ran0) = (Instant::now(), self.progs.job_cpu[ji as usize]);
        let done = self.finish_landed(ji);
        let ran = self.progs.job_cpu[ji as usize].saturating_sub(ran0);
        let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.sched.charge(t, ns.saturating_sub(ran));
        if done {
            self.release_job(ji);
        }
    }

    /// Moves each connection's collected responses to its send buffer and sends what it can.
    fn flush_all(&mut self) {
        for ci in 0..self.conns.len() {
            let ci = u32::try_from(ci).expect("bounded");
            let Some(c) = self.conns[ci as usize].as_mut() else { continue };
            if !c.frame.is_empty() {
                out::move_frame_to_tx(c);
            }
            if let Err(why) = out::send(c, &mut self.ranges) {
                self.close(ci, &why);
                continue;
            }
            let c = self.conns[ci as usize].as_ref().expect("live");
            // Relaxed: a statistic.
            self.shared.stats.peak_conn_bytes.fetch_max(c.held_bytes() as u64, Ordering::Relaxed);
            if c.out_backlog() == 0 {
                if let Some(why) = c.closing {
                    self.close(ci, why);
                }
            }
        }
    }

    fn check_timeouts(&mut self) {
        let now = Instant::now();
        let (idle, slow) = (self.shared.cfg.idle_timeout, self.shared.cfg.slow_client_timeout);
        let auth_timeout = self.shared.cfg.conn_limits.auth_timeout;
        for ci in 0..self.conns.len() {
            let Some(c) = self.conns[ci].as_ref() else { continue };
            let quiet = c.in_flight == 0 && c.out_backlog() == 0 && c.partial_since.is_none();
            let why = if !c.authed && now - c.accepted > auth_timeout {
                self.shared.stats.closed_unauthenticated.fetch_add(1, Ordering::Relaxed);
                "not authenticated in time"
            } else if quiet && now - c.last_rx > idle {
                self.shared.stats.closed_idle.fetch_add(1, Ordering::Relaxed);
                "idle timeout"
            } else if c.partial_since.is_some_and(|t| now - t > slow)
                || c.tx_stalled_since.is_some_and(|t| now - t > slow)
            {
                self.shared.stats.closed_slow.fetch_add(1, Ordering::Relaxed);
                "slow client timeout"
            } else {
                continue;
            };
            self.close(u32::try_from(ci).expect("bounded"), why);
        }
    }

    /// Stop: queued jobs are answered `SHUTTING_DOWN`, running ones complete and are
    /// answered, responses drain (bounded), then every connection closes.
    fn shutdown(&mut self) {
        let mut queued = Vec::new();
        self.sched.drain(|j| queued.push(j));
        for c in self.conns.iter_mut().flatten() {
            queued.extend(c.waiting.drain(..));
        }
        self.waiting = 0;
        for ji in queued {
            self.finish_job(ji, Err((StatusCode::ShuttingDown, "server is stopping".into())));
        }
        let deadline = Instant::now() + SHUTDOWN_FLUSH_TIMEOUT;
        while Instant::now() < deadline {
            let pending = self.engine.live() > 0
                || self.writes.pending > 0
                || self.loads.pending > 0
                || self.runs.pending > 0
                || self.runs.queued > 0
                || self.offload.forwarded_live > 0
                || self.offload.reads.live > 0
                || self.conns.iter().flatten().any(|c| !c.frame.is_empty() || c.out_backlog() > 0);
            if !pending {
                break;
            }
            if self.poll_once(None).is_err() {
                break;
            }
        }
        for ci in 0..self.conns.len() {
            self.close(u32::try_from(ci).expect("bounded"), "server stopped");
        }
    }
}
