//! One server thread: its connections, its engine, its compiled programs, its open files.
//!
//! A pass of the loop: `poll` the listener, every connection and the engine's ring fd; accept;
//! read and parse whole frames, answering what needs no I/O at once and queueing the rest per
//! tenant; admit queued requests to the engine (fairly); reap completions into response
//! frames; run λ programs over their completed reads; send. Buffers (receive, frames, job
//! scratch) are reused, so a request allocates nothing once the buffers have grown.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Instant;

use storefn_io::{Completion, Engine, EngineConfig};

use super::files::{FileFail, Files};
use super::progs::Progs;
mod lambda;
mod offload;
mod requests;
mod tenants;
mod writes;
use super::sched::Sched;
use super::{
    ServerError, Shared, CONN_KEEP_BYTES, CONN_RX_START_BYTES, ENGINE_CHAINS, MAX_CONN_OUT_BYTES,
    MAX_IN_FLIGHT_PER_CONN, MAX_PENDING_WRITE_BYTES, MAX_PREAUTH_FRAME_BYTES,
    MAX_SPARE_LAMBDA_INPUTS, POLL_INTERVAL, SERVER_MAX_HOPS, SHUTDOWN_FLUSH_TIMEOUT,
};
use lambda::{submit_lambda_chunks, token_chunk, token_job};
use offload::OffloadState;
use storefn_wire::layout::FRAME_HEADER_BYTES;
use storefn_wire::limits::{
    MAX_FRAME_BYTES, MAX_LAMBDA_OUT_BYTES, MAX_MSGS_PER_FRAME, MAX_READ_BYTES, MAX_TENANT_BYTES,
};
use storefn_wire::{
    decode_header, op, put_response, put_status, FileVersion, FrameBuf, ProtoError, Response,
    StatusCode, HASH_BYTES, KIND_REQUEST, KIND_RESPONSE,
};

/// Connections accepted per pass, so a connection storm cannot stall the served ones.
const ACCEPTS_PER_PASS: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum JobKind {
    Read,
    Xrp,
    Lambda,
}

/// A request waiting for or running on the engine. `buf` holds the XRP scratch going in, and a
/// λ's input coming out of the read.
#[derive(Debug)]
pub(super) struct Job {
    pub(super) conn: u32,
    pub(super) conn_gen: u32,
    pub(super) tenant: u32,
    pub(super) req_id: u64,
    pub(super) kind: JobKind,
    pub(super) file_slot: u32,
    pub(super) file: storefn_io::FileId,
    pub(super) version: FileVersion,
    pub(super) offset: u64,
    pub(super) len: u32,
    /// The program instance (XRP and λ; `None` for READ).
    pub(super) inst: Option<u32>,
    pub(super) out_len: u32,
    pub(super) scratch_len: u32,
    pub(super) buf: Box<[u8]>,
    /// λ: the range, `len` bytes, filled as its chunk reads land (staging buffer taken from
    /// the thread's pool when the job is admitted, so at most `ENGINE_CHAINS` exist per
    /// thread; empty for other kinds).
    pub(super) input: Vec<u8>,
    /// λ: a read of the range failed (its error is already answered).
    pub(super) failed: bool,
    /// λ: bytes of the range whose reads were submitted, and that landed.
    pub(super) submitted: u32,
    pub(super) landed: u32,
    /// λ: chunk reads in flight (the job is released only when none is: each carries its
    /// index in the token).
    pub(super) reads_in_flight: u32,
    /// Admitted to the engine by the scheduler (counts against the tenant's share).
    pub(super) admitted: bool,
    /// λ: in the worker's `lambda_more` queue (chunks left to submit).
    pub(super) more_queued: bool,
}

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
    /// DDS: whole response frames an offloaded read filled in place, sent from their own
    /// buffers after (or between) `tx`'s bytes; `out_pos` bytes of the front one are sent.
    pub(super) out_frames: std::collections::VecDeque<FrameBuf>,
    pub(super) out_pos: usize,
    /// Sent frames kept for the next offloaded reads (at most `MAX_SPARE_FRAMES`).
    pub(super) spare_frames: Vec<FrameBuf>,
    pub(super) in_flight: u32,
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
}

/// What one entry of the poll array watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PollSlot {
    Listener,
    /// The engine's ring fd: completions are reaped after every poll anyway.
    Engine,
    /// DDS: the hook's eventfd (host answers may be ready).
    HostAnswers,
    /// DDS: the offloaded-read ring's fd.
    OffloadReads,
    /// The writer thread's eventfd: writes were synced and wait for their answers.
    Writes,
    Conn(u32),
}

pub(super) struct Worker<'a> {
    pub(super) id: usize,
    pub(super) shared: &'a Shared,
    pub(super) engine: Engine,
    pub(super) conns: Vec<Option<Conn>>,
    pub(super) gens: Vec<u32>,
    pub(super) files: Files,
    pub(super) progs: Progs,
    pub(super) jobs: Vec<Option<Job>>,
    pub(super) free_jobs: Vec<u32>,
    pub(super) spare_bufs: Vec<Box<[u8]>>,
    /// λ staging buffers of finished jobs, kept with their capacity (AIOS: reused, not freed).
    pub(super) spare_inputs: Vec<Vec<u8>>,
    /// LAMBDA_WRITE: the program's output before it is written (grows to the largest
    /// `out_cap` asked, at most `MAX_LAMBDA_WRITE_OUT_BYTES`, and is reused).
    pub(super) write_staging: Vec<u8>,
    pub(super) sched: Sched,
    tenants: tenants::Tenants,
    pub(super) pollfds: Vec<libc::pollfd>,
    pub(super) poll_slots: Vec<PollSlot>,
    /// Jobs finished in the current reap.
    pub(super) finished: Vec<u32>,
    /// λ jobs with chunks of their range left to submit, in the order they asked: served
    /// before new jobs are admitted, whenever the engine has a free slot.
    pub(super) lambda_more: std::collections::VecDeque<u32>,
    /// DDS: this frame's OFFLOAD requests (messages, batched at the end of the frame) and the
    /// requests forwarded to the host application, by token.
    offload: OffloadState,
    /// WRITE and LAMBDA_WRITE: the thread's writer thread (writes and syncs off the loop).
    writes: writes::Writes,
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
    let writes = match writes::Writes::start(id) {
        Ok(w) => w,
        Err(source) => {
            let msg = source.to_string();
            let _ = ready.send(Err(ServerError::Io { thread: id, source }));
            return Err(ServerError::Io { thread: id, source: std::io::Error::other(msg) });
        }
    };
    let _ = ready.send(Ok(()));
    let mut w = Worker {
        writes,
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
        spare_inputs: Vec::new(),
        write_staging: Vec::new(),
        sched: Sched::new(u32::try_from(ENGINE_CHAINS).expect("small"), shared.cfg.fair),
        tenants: tenants::Tenants::default(),
        pollfds: Vec::new(),
        poll_slots: Vec::new(),
        finished: Vec::with_capacity(ENGINE_CHAINS),
        lambda_more: std::collections::VecDeque::with_capacity(ENGINE_CHAINS),
        offload: OffloadState::default(),
    };
    w.serve(listener)
}

impl Worker<'_> {
    pub(super) fn log(&self, conn: &Conn, what: &str) {
        if self.shared.cfg.log {
            eprintln!("storefn serve: [t{}] conn {} {}: {what}", self.id, conn.id, conn.peer);
        }
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
        if let Some(fd) = self.offload.reads_fd() {
            self.pollfds.push(libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
            self.poll_slots.push(PollSlot::OffloadReads);
        }
        for (i, c) in self.conns.iter().enumerate() {
            let Some(c) = c else { continue };
            let mut ev = 0;
            let backlog = c.out_backlog();
            if c.closing.is_none()
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
        let timeout = if self.offload.forwarded_live > 0 && wake.is_none() {
            0
        } else {
            i32::try_from(POLL_INTERVAL.as_millis()).expect("small")
        };
        let nfds = libc::nfds_t::try_from(self.pollfds.len()).expect("bounded");
        // SAFETY: pollfds is a valid array of nfds entries that lives across the call.
        let n = unsafe { libc::poll(self.pollfds.as_mut_ptr(), nfds, timeout) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
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
                PollSlot::Engine | PollSlot::OffloadReads | PollSlot::Writes => {}
                PollSlot::Conn(ci) => {
                    if re & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
                        self.on_readable(ci);
                    }
                }
            }
        }
        // Completions free slots and shares: admit queued jobs again at once rather than after
        // the next poll, which sleeps up to POLL_INTERVAL when nothing else is in flight. A
        // λ range's next chunk is queued after the reap that completed the previous one: reap
        // again (which submits it) until no chunk was queued. Then admit what the reaps freed,
        // and repeat while anything was admitted (each pass admits a queued job: bounded).
        // Regression: dispatching only before the reap left jobs beyond one tenant's share
        // (the 225th READ of a 256-READ frame) queued until the poll timed out, 50 ms.
        // Regression: a λ job whose next chunks found the engine full (other jobs' chunks of the
        // same reap took the slots) and that had no read in flight was never revisited.
        loop {
            self.reap()?;
            if self.resume_lambdas() > 0 {
                continue; // reap again: it submits them and may complete them at once
            }
            if self.dispatch() == 0 {
                break;
            }
        }
        self.poll_writes();
        self.poll_forwarded();
        self.poll_offload_reads();
        self.flush_all();
        self.check_timeouts();
        Ok(())
    }

    fn accept(&mut self, l: &TcpListener) {
        for _ in 0..ACCEPTS_PER_PASS {
            let (stream, peer) = match l.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    if self.shared.cfg.log {
                        eprintln!("storefn serve: [t{}] accept: {e}", self.id);
                    }
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
                if self.shared.cfg.log {
                    eprintln!("storefn serve: [t{}] {peer}: refused by {why}", self.id);
                }
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
            let c = Conn {
                stream,
                peer,
                id: self.shared.next_conn.fetch_add(1, Ordering::Relaxed),
                gen: self.gens[ci],
                rx: vec![0; CONN_RX_START_BYTES],
                rx_len: 0,
                frames_in: 0,
                frame: FrameBuf::default(),
                tx: Vec::new(),
                tx_pos: 0,
                out_frames: std::collections::VecDeque::new(),
                out_pos: 0,
                spare_frames: Vec::new(),
                in_flight: 0,
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
            };
            self.shared.stats.connections.fetch_add(1, Ordering::Relaxed);
            self.log(&c, "connected");
            self.conns[ci] = Some(c);
        }
    }

    fn close(&mut self, ci: u32, why: &str) {
        if let Some(c) = self.conns[ci as usize].take() {
            self.log(&c, &format!("closed: {why}"));
            if let Some(t) = c.tenant {
                self.tenants.release(t);
            }
            let mut counts = self.shared.conn_counts();
            counts.closed(c.peer.ip(), c.authed);
            // Jobs still queued or running for it are dropped at completion (gen mismatch).
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

    /// Handles every whole frame in the connection's receive buffer.
    fn parse_frames(&mut self, ci: u32) {
        loop {
            let Some(c) = self.conns[ci as usize].as_mut() else { return };
            if c.closing.is_some() {
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
            let h = match decode_header(&h, c.frames_in, KIND_REQUEST) {
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
            let frame_no = c.frames_in;
            c.frames_in += 1;
            // Take the buffer out so messages can borrow it while the worker changes.
            let rx = std::mem::take(&mut c.rx);
            let res = self.handle_frame(ci, &rx[FRAME_HEADER_BYTES..total], h.count, frame_no);
            let Some(c) = self.conns[ci as usize].as_mut() else { return };
            c.rx = rx;
            c.rx.copy_within(total..c.rx_len, 0);
            c.rx_len -= total;
            if let Err(e) = res {
                return self.protocol_error(ci, &e);
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
        while self.engine.free_slots() > 0 {
            let Some((_, ji)) = self.sched.admit() else { break };
            n += 1;
            let j = self.jobs[ji as usize].as_mut().expect("queued job exists");
            j.admitted = true;
            let token = u64::from(ji);
            let r = match j.kind {
                JobKind::Read => self.engine.submit_read(j.file, j.offset, u64::from(j.len), token),
                JobKind::Lambda => {
                    j.input = self.spare_inputs.pop().unwrap_or_default();
                    debug_assert!(j.input.is_empty());
                    j.input.resize(j.len as usize, 0);
                    let r = submit_lambda_chunks(&mut self.engine, j, ji);
                    if r.is_ok() && j.reads_in_flight == 0 {
                        j.more_queued = true;
                        self.lambda_more.push_back(ji);
                    }
                    r
                }
                JobKind::Xrp => {
                    let n = j.scratch_len as usize;
                    let src = &j.buf[..n];
                    self.engine.submit_chain(j.file, j.offset, u64::from(j.len), token, |s| {
                        s[..n].copy_from_slice(src);
                    })
                }
            };
            if let Err(e) = r {
                if j.kind == JobKind::Lambda {
                    self.lambda_submit_failed(ji, &e);
                } else {
                    self.finish_job(ji, Err((StatusCode::Io, format!("submit: {e}"))));
                }
            } else if j.kind == JobKind::Xrp {
                self.shared.stats.chains.fetch_add(1, Ordering::Relaxed);
            }
        }
        n
    }

    /// Reaps completed chains and reads; builds their responses.
    fn reap(&mut self) -> std::io::Result<()> {
        if self.engine.live() == 0 {
            return Ok(());
        }
        let Self { engine, progs, jobs, conns, finished, .. } = self;
        finished.clear();
        engine
            .reap(progs, |c: Completion<'_>| {
                let ji = token_job(c.token);
                let j = jobs[ji as usize].as_mut().expect("completed job exists");
                if j.kind == JobKind::Lambda {
                    j.reads_in_flight -= 1;
                }
                let live = conns[j.conn as usize].as_ref().is_some_and(|cn| cn.gen == j.conn_gen);
                if live {
                    complete_into(j, &c, conns[j.conn as usize].as_mut().expect("live"));
                }
                finished.push(ji);
            })
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        // λ programs run here, outside the reap (their input was copied out of the buffer),
        // once the whole range is staged; until then the job asks for more chunk reads
        // (`resume_lambdas`). A job with reads in flight is never released: their tokens name
        // it. One reap may hold several completions of the same job.
        for k in 0..self.finished.len() {
            let ji = self.finished[k];
            let Some(j) = self.jobs[ji as usize].as_mut() else { continue };
            let live = self.conns[j.conn as usize].as_ref().is_some_and(|cn| cn.gen == j.conn_gen);
            if j.kind == JobKind::Lambda {
                if !j.failed && live && j.landed < j.len {
                    if j.submitted < j.len && !j.more_queued {
                        j.more_queued = true;
                        self.lambda_more.push_back(ji);
                    }
                    continue;
                }
                if j.reads_in_flight > 0 || j.more_queued {
                    continue;
                }
                if !j.failed && live {
                    self.run_lambda(ji);
                }
            }
            self.release_job(ji);
        }
        Ok(())
    }

    fn finish_job(&mut self, ji: u32, r: Result<(), FileFail>) {
        if let Err((st, m)) = r {
            let j = self.jobs[ji as usize].as_ref().expect("job");
            let (conn, gen, req_id, kind) = (j.conn, j.conn_gen, j.req_id, j.kind);
            let code = match kind {
                JobKind::Read => op::READ,
                JobKind::Xrp => op::XRP,
                JobKind::Lambda => op::LAMBDA,
            };
            if self.conns[conn as usize].as_ref().is_some_and(|c| c.gen == gen) {
                self.respond_err(conn, req_id, code, st, &m);
            }
        }
        self.release_job(ji);
    }

    /// Returns a finished job's resources: file and program references, the buffer, the slot.
    fn release_job(&mut self, ji: u32) {
        let j = self.jobs[ji as usize].take().expect("job exists");
        self.files.release(j.file_slot);
        if let Some(i) = j.inst {
            self.progs.release(i);
        }
        let cpu = std::mem::take(&mut self.progs.job_cpu[ji as usize]);
        if j.admitted {
            self.sched.done(j.tenant);
            self.sched.job_done(j.tenant, cpu);
        }
        self.tenants.release(j.tenant);
        if let Some(c) = self.conns[j.conn as usize].as_mut().filter(|c| c.gen == j.conn_gen) {
            c.in_flight -= 1;
        }
        self.spare_bufs.push(j.buf);
        if j.input.capacity() > 0 && self.spare_inputs.len() < MAX_SPARE_LAMBDA_INPUTS {
            let mut input = j.input;
            input.clear();
            self.spare_inputs.push(input);
        }
        self.free_jobs.push(ji);
    }

    /// Moves each connection's collected responses to its send buffer and sends what it can.
    fn flush_all(&mut self) {
        for ci in 0..self.conns.len() {
            let ci = u32::try_from(ci).expect("bounded");
            let Some(c) = self.conns[ci as usize].as_mut() else { continue };
            if !c.frame.is_empty() {
                move_frame_to_tx(c);
            }
            if let Err(why) = send(c) {
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
        for ji in queued {
            self.finish_job(ji, Err((StatusCode::ShuttingDown, "server is stopping".into())));
        }
        let deadline = Instant::now() + SHUTDOWN_FLUSH_TIMEOUT;
        while Instant::now() < deadline {
            let pending = self.engine.live() > 0
                || self.writes.pending > 0
                || self.offload.forwarded_live > 0
                || self.offload.reads_live() > 0
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

/// Writes a completed job's response into its connection's frame (λ: copies the input into
/// the job, the program runs after the reap).
fn complete_into(j: &mut Job, c: &Completion<'_>, conn: &mut Conn) {
    let code = match j.kind {
        JobKind::Read => op::READ,
        JobKind::Xrp => op::XRP,
        JobKind::Lambda => op::LAMBDA,
    };
    if j.kind == JobKind::Lambda && j.failed {
        return; // an earlier chunk failed and was answered
    }
    open_frame(conn);
    match &c.result {
        Err(e) => {
            j.failed = true;
            let (st, m) = super::files::chain_fail(e);
            put_status(&mut conn.frame, j.req_id, code, st, &m);
        }
        Ok(st) => match j.kind {
            JobKind::Read => {
                put_response(
                    &mut conn.frame,
                    j.req_id,
                    code,
                    &Response::Read { version: j.version, data: c.data },
                );
            }
            JobKind::Xrp => {
                let n = j.out_len as usize;
                let r =
                    Response::Xrp { version: j.version, hops: st.hops, scratch: &c.scratch[..n] };
                put_response(&mut conn.frame, j.req_id, code, &r);
            }
            JobKind::Lambda => {
                if j.failed {
                    return; // an earlier chunk failed and was answered
                }
                let at = token_chunk(c.token) as usize * MAX_READ_BYTES as usize;
                let want = (j.len as usize - at).min(MAX_READ_BYTES as usize);
                if c.data.len() != want {
                    // The range was checked against the file's size: a short read means the
                    // file shrank under the request; never loop on it.
                    j.failed = true;
                    let m = format!(
                        "short read at {}: {} of {want} bytes",
                        j.offset + at as u64,
                        c.data.len()
                    );
                    put_status(&mut conn.frame, j.req_id, code, StatusCode::Io, &m);
                } else {
                    j.input[at..at + want].copy_from_slice(c.data);
                    j.landed += u32::try_from(want).expect("<= MAX_READ_BYTES");
                }
            }
        },
    }
}

/// A response frame is closed (moved to the send buffer) before it could pass
/// `MAX_FRAME_BYTES` with the largest message or `MAX_MSGS_PER_FRAME` messages.
const ROLL_FRAME_BYTES: usize = MAX_FRAME_BYTES - MAX_LAMBDA_OUT_BYTES as usize - 1024;

/// Makes the connection's response frame ready for one more message of any size.
pub(super) fn open_frame(c: &mut Conn) {
    if !c.frame.is_empty()
        && (c.frame.len() > ROLL_FRAME_BYTES || c.frame.count() >= MAX_MSGS_PER_FRAME)
    {
        move_frame_to_tx(c);
    }
    if c.frame.is_empty() {
        c.frame.begin(KIND_RESPONSE);
    }
}

/// Appends the connection's finished response frame to its send buffer, dropping the bytes
/// already sent first once they are half of it: the buffer holds unsent bytes (and at most as
/// many sent ones), never everything since it was last empty. A client that reads steadily
/// but never drains its responses fully used to grow it without bound, as only the unsent
/// bytes were counted against `MAX_CONN_OUT_BYTES`.
fn move_frame_to_tx(c: &mut Conn) {
    if c.tx_pos > 0 && c.tx_pos * 2 >= c.tx.len() {
        c.tx.drain(..c.tx_pos);
        c.tx_pos = 0;
    }
    let bytes = c.frame.finish();
    c.tx.extend_from_slice(bytes);
    c.frame.begin(KIND_RESPONSE); // count 0 again: the next response restarts it
    if c.frame.buf.capacity() > CONN_KEEP_BYTES {
        c.frame.buf.shrink_to(CONN_KEEP_BYTES);
    }
}

/// Sent offloaded-read frames a connection keeps for reuse.
const MAX_SPARE_FRAMES: usize = 16;

impl Conn {
    /// Bytes waiting to be sent: `tx`'s and the queued frames'.
    pub(super) fn out_backlog(&self) -> usize {
        let frames: usize = self.out_frames.iter().map(|f| f.buf.len()).sum();
        self.tx.len() - self.tx_pos + frames - self.out_pos
    }

    /// Response bytes the connection holds, sent or not: what `MAX_CONN_OUT_BYTES` bounds.
    pub(super) fn out_held(&self) -> usize {
        let frames: usize = self.out_frames.iter().map(|f| f.buf.len()).sum();
        self.tx.len() + frames + self.frame.len()
    }

    /// Bytes of memory the connection's buffers hold (their capacities).
    pub(super) fn held_bytes(&self) -> usize {
        let frames: usize = self.out_frames.iter().map(|f| f.buf.capacity()).sum();
        let spare: usize = self.spare_frames.iter().map(|f| f.buf.capacity()).sum();
        self.rx.capacity() + self.tx.capacity() + self.frame.buf.capacity() + frames + spare
    }
}

/// Writes `bytes[*pos..]`; Ok(true) when all of it went out, Ok(false) when the socket is full.
fn write_some(stream: &mut TcpStream, bytes: &[u8], pos: &mut usize) -> Result<bool, String> {
    while *pos < bytes.len() {
        match stream.write(&bytes[*pos..]) {
            Ok(0) => return Err("write returned 0".into()),
            Ok(n) => *pos += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("write: {e}")),
        }
    }
    Ok(true)
}

/// Sends what the socket takes; `Err` = the connection is broken. A frame is never split by
/// another: a partly sent queued frame finishes before `tx` resumes, and `tx` (once started)
/// before the next queued frame.
fn send(c: &mut Conn) -> Result<(), String> {
    loop {
        let frame_first = c.out_pos > 0 || (c.tx_pos == c.tx.len() && !c.out_frames.is_empty());
        let before = c.out_backlog();
        let done = if frame_first {
            let f = c.out_frames.front().expect("checked");
            let done = write_some(&mut c.stream, &f.buf, &mut c.out_pos)?;
            if done {
                let f = c.out_frames.pop_front().expect("checked");
                c.out_pos = 0;
                if c.spare_frames.len() < MAX_SPARE_FRAMES {
                    c.spare_frames.push(f);
                }
            }
            done
        } else if c.tx_pos < c.tx.len() {
            let done = write_some(&mut c.stream, &c.tx, &mut c.tx_pos)?;
            if done {
                c.tx.clear();
                c.tx_pos = 0;
                if c.tx.capacity() > CONN_KEEP_BYTES {
                    c.tx.shrink_to(CONN_KEEP_BYTES);
                }
            }
            done
        } else {
            c.tx_stalled_since = None;
            return Ok(());
        };
        if c.out_backlog() < before {
            c.tx_stalled_since = None;
        }
        if !done {
            c.tx_stalled_since = Some(c.tx_stalled_since.unwrap_or_else(Instant::now));
            return Ok(());
        }
    }
}
