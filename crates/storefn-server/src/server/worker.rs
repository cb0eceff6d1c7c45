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

use storefn_io::{Completion, Engine, EngineConfig, StorageFn, VmError, XrpCtx};
use storefn_vm::{Instance, ProgType};

use super::files::{FileFail, Files};
#[path = "worker_offload.rs"]
mod offload;
use super::sched::Sched;
use super::{
    ServerError, Shared, ENGINE_CHAINS, MAX_CONNS_PER_THREAD, MAX_CONN_OUT_BYTES,
    MAX_INSTANCES_PER_THREAD, MAX_IN_FLIGHT_PER_CONN, MAX_TENANTS_PER_THREAD, POLL_INTERVAL,
    SERVER_MAX_HOPS, SHUTDOWN_FLUSH_TIMEOUT,
};
use crate::auth;
use crate::proto::msg::HELLO_FLAG_AUTH_REQUIRED;
use crate::proto::{
    decode_header, op, put_response, put_status, FileVersion, FrameBuf, Messages, ProtoError,
    Request, Response, StatusCode, FRAME_HEADER_BYTES, HASH_BYTES, KIND_REQUEST, KIND_RESPONSE,
    MAX_FRAME_BYTES, MAX_LAMBDA_OUT_BYTES, MAX_MSGS_PER_FRAME, SCRATCH_BYTES,
};
use crate::registry::ProgHash;
use offload::OffloadState;

/// Receive buffer a connection starts with; it grows up to `MAX_FRAME_BYTES` for big frames.
const INITIAL_RX_BYTES: usize = 64 * 1024;
/// Connections accepted per pass, so a connection storm cannot stall the served ones.
const ACCEPTS_PER_PASS: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JobKind {
    Read,
    Xrp,
    Lambda,
}

/// A request waiting for or running on the engine. `buf` holds the XRP scratch going in, and a
/// λ's input coming out of the read.
#[derive(Debug)]
struct Job {
    conn: u32,
    conn_gen: u32,
    tenant: u32,
    req_id: u64,
    kind: JobKind,
    file_slot: u32,
    file: storefn_io::FileId,
    version: FileVersion,
    offset: u64,
    len: u32,
    inst: u32,
    out_len: u32,
    scratch_len: u32,
    buf: Box<[u8]>,
    /// λ: bytes of input in `buf` once the read completed (`u32::MAX`: the read failed).
    input_len: u32,
    /// Admitted to the engine by the scheduler (counts against the tenant's share).
    admitted: bool,
}

struct InstSlot {
    hash: ProgHash,
    inst: Instance,
    refs: u32,
    last_used: u64,
}

impl std::fmt::Debug for InstSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InstSlot").field("refs", &self.refs).finish_non_exhaustive()
    }
}

/// The thread's compiled programs; as the engine's storage function it runs the program of
/// the chain's job (the token is the job index).
#[derive(Debug, Default)]
struct Progs {
    slots: Vec<Option<InstSlot>>,
    /// Program slot of each job index.
    job_inst: Vec<u32>,
    clock: u64,
}

impl StorageFn for Progs {
    fn invoke(&mut self, _: &mut XrpCtx, _: &[u8], _: &mut [u8]) -> Result<u64, VmError> {
        unreachable!("the engine calls invoke_chain")
    }

    fn invoke_chain(
        &mut self,
        token: u64,
        ctx: &mut XrpCtx,
        data: &[u8],
        scratch: &mut [u8],
    ) -> Result<u64, VmError> {
        let ti = usize::try_from(token).expect("job index");
        let si = self.job_inst[ti] as usize;
        let s = self.slots[si].as_mut().expect("a running job's program stays loaded");
        s.inst.run_xrp(ctx, data, scratch)
    }
}

impl Progs {
    /// The slot of `hash` for a `ty` request, compiling it from the registry on first use.
    fn acquire(&mut self, shared: &Shared, hash: &ProgHash, ty: ProgType) -> Result<u32, FileFail> {
        self.clock += 1;
        let found = self.slots.iter().position(|s| s.as_ref().is_some_and(|s| &s.hash == hash));
        let si = if let Some(i) = found {
            i
        } else {
            let prog = shared
                .registry
                .lock()
                .map_err(|_| (StatusCode::Io, "registry poisoned".to_string()))?
                .get(hash)
                .ok_or((StatusCode::UnknownProg, "unknown program hash: send LOAD_PROG".into()))?;
            if prog.prog_type != ty {
                return Err((StatusCode::BadRequest, "program type does not match the op".into()));
            }
            let mut inst = match Instance::new(prog.clone(), storefn_vm::Engine::Jit) {
                Ok(i) => i,
                Err(_) => Instance::new(prog, storefn_vm::Engine::Interp)
                    .map_err(|e| (StatusCode::ProgRejected, e.to_string()))?,
            };
            inst.set_insn_budget(inst.insn_budget().min(crate::registry::SERVER_INSN_BUDGET));
            let si = match self.slots.iter().position(Option::is_none) {
                Some(i) => i,
                None if self.slots.len() < MAX_INSTANCES_PER_THREAD => {
                    self.slots.push(None);
                    self.slots.len() - 1
                }
                None => self
                    .slots
                    .iter()
                    .enumerate()
                    .filter_map(|(i, s)| {
                        s.as_ref().filter(|s| s.refs == 0).map(|s| (i, s.last_used))
                    })
                    .min_by_key(|&(_, t)| t)
                    .map(|(i, _)| i)
                    .ok_or((
                        StatusCode::Limit,
                        "every program slot of this thread is busy".into(),
                    ))?,
            };
            self.slots[si] = Some(InstSlot { hash: *hash, inst, refs: 0, last_used: 0 });
            si
        };
        let s = self.slots[si].as_mut().expect("present");
        if s.inst.program().prog_type != ty {
            return Err((StatusCode::BadRequest, "program type does not match the op".into()));
        }
        s.refs += 1;
        s.last_used = self.clock;
        Ok(u32::try_from(si).expect("small"))
    }

    fn release(&mut self, si: u32) {
        let s = self.slots[si as usize].as_mut().expect("held slot");
        s.refs -= 1;
    }
}

/// One client connection.
#[derive(Debug)]
struct Conn {
    stream: TcpStream,
    peer: SocketAddr,
    id: u64,
    gen: u32,
    rx: Vec<u8>,
    rx_len: usize,
    frames_in: u64,
    /// Responses being collected this pass.
    frame: FrameBuf,
    /// Bytes ready to send, and how many of them went out.
    tx: Vec<u8>,
    tx_pos: usize,
    in_flight: u32,
    tenant: Option<u32>,
    challenge: [u8; HASH_BYTES],
    authed: bool,
    last_rx: Instant,
    /// When a partly received frame started waiting for the rest.
    partial_since: Option<Instant>,
    /// When pending output stopped draining.
    tx_stalled_since: Option<Instant>,
    /// Close once the output is sent (auth failure, protocol error).
    closing: Option<&'static str>,
}

struct Worker<'a> {
    id: usize,
    shared: &'a Shared,
    engine: Engine,
    conns: Vec<Option<Conn>>,
    gens: Vec<u32>,
    files: Files,
    progs: Progs,
    jobs: Vec<Option<Job>>,
    free_jobs: Vec<u32>,
    spare_bufs: Vec<Box<[u8]>>,
    sched: Sched,
    tenants: Vec<Vec<u8>>,
    pollfds: Vec<libc::pollfd>,
    poll_conn: Vec<u32>,
    /// Jobs finished in the current reap.
    finished: Vec<u32>,
    /// DDS: this frame's OFFLOAD requests (messages, batched at the end of the frame) and the
    /// requests forwarded to the host application, by token.
    offload: OffloadState,
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
    let _ = ready.send(Ok(()));
    let mut w = Worker {
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
        sched: Sched::new(u32::try_from(ENGINE_CHAINS).expect("small"), shared.cfg.fair),
        tenants: Vec::new(),
        pollfds: Vec::new(),
        poll_conn: Vec::new(),
        finished: Vec::with_capacity(ENGINE_CHAINS),
        offload: OffloadState::default(),
    };
    w.serve(listener)
}

impl Worker<'_> {
    fn log(&self, conn: &Conn, what: &str) {
        if self.shared.cfg.log {
            eprintln!("storefn serve: [t{}] conn {} {}: {what}", self.id, conn.id, conn.peer);
        }
    }

    fn stopping(&self) -> bool {
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
        self.poll_conn.clear();
        if let Some(l) = listener {
            self.pollfds.push(libc::pollfd { fd: l.as_raw_fd(), events: libc::POLLIN, revents: 0 });
            self.poll_conn.push(u32::MAX);
        }
        self.pollfds.push(libc::pollfd {
            fd: self.engine.ring_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        self.poll_conn.push(u32::MAX - 1);
        for (i, c) in self.conns.iter().enumerate() {
            let Some(c) = c else { continue };
            let mut ev = 0;
            let backlog = c.tx.len() - c.tx_pos;
            if c.closing.is_none()
                && listener.is_some()
                && c.in_flight < MAX_IN_FLIGHT_PER_CONN
                && backlog < MAX_CONN_OUT_BYTES
            {
                ev |= libc::POLLIN;
            }
            if backlog > 0 {
                ev |= libc::POLLOUT;
            }
            self.pollfds.push(libc::pollfd { fd: c.stream.as_raw_fd(), events: ev, revents: 0 });
            self.poll_conn.push(u32::try_from(i).expect("bounded"));
        }
        // Host answers arrive over shared memory, not an fd: while any are awaited, poll
        // without sleeping.
        let timeout = if self.offload.forwarded_live > 0 {
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
            match self.poll_conn[k] {
                u32::MAX => {
                    if let Some(l) = listener {
                        self.accept(l);
                    }
                }
                x if x == u32::MAX - 1 => {}
                ci => {
                    if re & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
                        self.on_readable(ci);
                    }
                }
            }
        }
        self.dispatch();
        self.reap()?;
        self.poll_forwarded();
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
            if live >= MAX_CONNS_PER_THREAD {
                if self.shared.cfg.log {
                    eprintln!("storefn serve: [t{}] {peer}: refused, {live} connections", self.id);
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
                rx: vec![0; INITIAL_RX_BYTES],
                rx_len: 0,
                frames_in: 0,
                frame: FrameBuf::with_capacity(INITIAL_RX_BYTES),
                tx: Vec::with_capacity(INITIAL_RX_BYTES),
                tx_pos: 0,
                in_flight: 0,
                tenant: None,
                challenge: [0; HASH_BYTES],
                authed: false,
                last_rx: Instant::now(),
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
                return;
            }
            let h: [u8; FRAME_HEADER_BYTES] = c.rx[..FRAME_HEADER_BYTES].try_into().expect("16");
            let h = match decode_header(&h, c.frames_in, KIND_REQUEST) {
                Ok(h) => h,
                Err(e) => return self.protocol_error(ci, &e),
            };
            let total = h.frame_bytes();
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

    fn handle_frame(
        &mut self,
        ci: u32,
        body: &[u8],
        count: u32,
        frame: u64,
    ) -> Result<(), ProtoError> {
        // Validate the whole frame before acting on any of it: a malformed frame does nothing.
        for m in Messages::new(body, count, frame) {
            Request::parse(&m?)?;
        }
        for m in Messages::new(body, count, frame) {
            let m = m.expect("validated");
            let r = Request::parse(&m).expect("validated");
            self.shared.stats.requests.fetch_add(1, Ordering::Relaxed);
            self.handle_request(ci, m.req_id, &r);
            if self.conns[ci as usize].as_ref().is_none_or(|c| c.closing.is_some()) {
                break;
            }
        }
        self.run_offload_batch(ci);
        Ok(())
    }

    fn conn(&mut self, ci: u32) -> &mut Conn {
        self.conns[ci as usize].as_mut().expect("live connection")
    }

    fn respond_err(&mut self, ci: u32, req_id: u64, op_code: u8, st: StatusCode, msg: &str) {
        let c = self.conn(ci);
        open_frame(c);
        put_status(&mut c.frame, req_id, op_code, st, msg);
    }

    fn respond(&mut self, ci: u32, req_id: u64, op_code: u8, r: &Response<'_>) {
        let c = self.conn(ci);
        open_frame(c);
        put_response(&mut c.frame, req_id, op_code, r);
    }

    fn handle_request(&mut self, ci: u32, req_id: u64, r: &Request<'_>) {
        let code = r.op();
        let auth_needed = self.shared.cfg.tokens.is_some();
        let c = self.conns[ci as usize].as_mut().expect("live connection");
        let (c_tenant, c_authed, challenge) = (c.tenant, c.authed, c.challenge);
        match *r {
            Request::Hello { tenant } => {
                if c_tenant.is_some() {
                    return self.respond_err(
                        ci,
                        req_id,
                        code,
                        StatusCode::BadRequest,
                        "HELLO sent twice",
                    );
                }
                let t = match self.tenants.iter().position(|t| t == tenant) {
                    Some(t) => t,
                    None if self.tenants.len() >= MAX_TENANTS_PER_THREAD => {
                        let m = "too many tenants on this server thread";
                        self.respond_err(ci, req_id, code, StatusCode::Limit, m);
                        self.conn(ci).closing = Some(m);
                        return;
                    }
                    None => {
                        self.tenants.push(tenant.to_vec());
                        self.tenants.len() - 1
                    }
                };
                let challenge = if auth_needed { auth::challenge() } else { [0; HASH_BYTES] };
                let c = self.conn(ci);
                c.tenant = Some(u32::try_from(t).expect("few tenants"));
                c.challenge = challenge;
                c.authed = !auth_needed;
                let name = String::from_utf8_lossy(tenant).into_owned();
                let c = self.conns[ci as usize].as_ref().expect("live");
                self.log(c, &format!("hello, tenant {name:?}"));
                let flags = if auth_needed { HELLO_FLAG_AUTH_REQUIRED } else { 0 };
                let resp = Response::Hello {
                    challenge: &challenge,
                    flags,
                    max_frame_bytes: u32::try_from(MAX_FRAME_BYTES).expect("1 MiB"),
                    max_in_flight: MAX_IN_FLIGHT_PER_CONN,
                };
                return self.respond(ci, req_id, code, &resp);
            }
            Request::Auth { mac } => {
                let Some(t) = c_tenant else {
                    return self.respond_err(
                        ci,
                        req_id,
                        code,
                        StatusCode::BadRequest,
                        "HELLO first",
                    );
                };
                let name = &self.tenants[t as usize];
                let ok = self.shared.cfg.tokens.as_ref().is_some_and(|toks| {
                    toks.iter().any(|k| {
                        k.tenant.as_bytes() == name.as_slice()
                            && auth::verify(&k.secret, &challenge, name, mac)
                    })
                });
                if ok {
                    self.conn(ci).authed = true;
                    let c = self.conns[ci as usize].as_ref().expect("live");
                    self.log(c, "authenticated");
                    return self.respond(ci, req_id, code, &Response::Auth);
                }
                self.shared.stats.auth_failures.fetch_add(1, Ordering::Relaxed);
                self.respond_err(
                    ci,
                    req_id,
                    code,
                    StatusCode::AuthFailed,
                    "wrong MAC or unknown tenant",
                );
                self.conn(ci).closing = Some("authentication failed");
                return;
            }
            _ => {}
        }
        if c_tenant.is_none() {
            return self.respond_err(ci, req_id, code, StatusCode::BadRequest, "HELLO first");
        }
        if !c_authed {
            return self.respond_err(ci, req_id, code, StatusCode::AuthRequired, "AUTH first");
        }
        match *r {
            Request::LoadProg { prog_type, section, elf } => {
                let res = match self.shared.registry.lock() {
                    Ok(mut reg) => reg.load(prog_type, section, elf),
                    Err(_) => {
                        return self.respond_err(
                            ci,
                            req_id,
                            code,
                            StatusCode::Io,
                            "registry poisoned",
                        )
                    }
                };
                match res {
                    Ok((hash, prog)) => {
                        let insns = u32::try_from(prog.insns.len()).unwrap_or(u32::MAX);
                        self.respond(ci, req_id, code, &Response::LoadProg { hash: &hash, insns });
                    }
                    Err(e) => {
                        let st = match e {
                            crate::registry::LoadError::TooLarge { .. } => StatusCode::Limit,
                            _ => StatusCode::ProgRejected,
                        };
                        self.respond_err(ci, req_id, code, st, &e.to_string());
                    }
                }
            }
            Request::Stat { path } => {
                match self.files.acquire(&self.shared.root, &mut self.engine, path) {
                    Ok(o) => {
                        self.files.release(o.slot);
                        self.respond(
                            ci,
                            req_id,
                            code,
                            &Response::Stat { version: o.version, size: o.size },
                        );
                    }
                    Err((st, m)) => self.respond_err(ci, req_id, code, st, &m),
                }
            }
            Request::Write { path, offset, data } => {
                match write_file(&self.shared.root, path, offset, data) {
                    Ok(version) => {
                        let written = u32::try_from(data.len()).expect("bounded");
                        self.respond(ci, req_id, code, &Response::Write { version, written });
                    }
                    Err((st, m)) => self.respond_err(ci, req_id, code, st, &m),
                }
            }
            Request::Read { path, offset, len } => {
                self.queue(ci, req_id, JobKind::Read, path, offset, len, None, &[], 0);
            }
            Request::Xrp { path, offset, len, hash, scratch, out_len } => {
                self.queue(
                    ci,
                    req_id,
                    JobKind::Xrp,
                    path,
                    offset,
                    len,
                    Some(hash),
                    scratch,
                    out_len,
                );
            }
            Request::Lambda { path, offset, len, hash, out_cap } => {
                self.queue(
                    ci,
                    req_id,
                    JobKind::Lambda,
                    path,
                    offset,
                    len,
                    Some(hash),
                    &[],
                    out_cap,
                );
            }
            Request::Offload { msg } => self.queue_offload(ci, req_id, msg),
            Request::Hello { .. } | Request::Auth { .. } => unreachable!("handled above"),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn queue(
        &mut self,
        ci: u32,
        req_id: u64,
        kind: JobKind,
        path: &[u8],
        offset: u64,
        len: u32,
        hash: Option<&ProgHash>,
        scratch: &[u8],
        out_len: u32,
    ) {
        let code = match kind {
            JobKind::Read => op::READ,
            JobKind::Xrp => op::XRP,
            JobKind::Lambda => op::LAMBDA,
        };
        if self.stopping() {
            return self.respond_err(
                ci,
                req_id,
                code,
                StatusCode::ShuttingDown,
                "server is stopping",
            );
        }
        let c = self.conn(ci);
        if c.in_flight >= MAX_IN_FLIGHT_PER_CONN {
            return self.respond_err(
                ci,
                req_id,
                code,
                StatusCode::Limit,
                "too many requests in flight",
            );
        }
        let (conn_gen, tenant) = (c.gen, c.tenant.expect("HELLO checked"));
        let inst = match hash {
            None => u32::MAX,
            Some(h) => {
                let ty = if kind == JobKind::Xrp { ProgType::Xrp } else { ProgType::Lambda };
                match self.progs.acquire(self.shared, h, ty) {
                    Ok(i) => i,
                    Err((st, m)) => return self.respond_err(ci, req_id, code, st, &m),
                }
            }
        };
        let f = match self.files.acquire(&self.shared.root, &mut self.engine, path) {
            Ok(f) => f,
            Err((st, m)) => {
                if inst != u32::MAX {
                    self.progs.release(inst);
                }
                return self.respond_err(ci, req_id, code, st, &m);
            }
        };
        if offset.checked_add(u64::from(len)).is_none_or(|e| e > f.size) {
            self.files.release(f.slot);
            if inst != u32::MAX {
                self.progs.release(inst);
            }
            let m = format!("[{offset}, +{len}) is outside the file ({} bytes)", f.size);
            return self.respond_err(ci, req_id, code, StatusCode::OutOfRange, &m);
        }
        let mut buf =
            self.spare_bufs.pop().unwrap_or_else(|| vec![0u8; SCRATCH_BYTES].into_boxed_slice());
        buf[..scratch.len()].copy_from_slice(scratch);
        let job = Job {
            conn: ci,
            conn_gen,
            tenant,
            req_id,
            kind,
            file_slot: f.slot,
            file: f.id,
            version: f.version,
            offset,
            len,
            inst,
            out_len,
            scratch_len: u32::try_from(scratch.len()).expect("<= 4096"),
            buf,
            input_len: 0,
            admitted: false,
        };
        let ji = match self.free_jobs.pop() {
            Some(j) => j,
            None => {
                self.jobs.push(None);
                self.progs.job_inst.push(0);
                u32::try_from(self.jobs.len() - 1).expect("bounded by connections x in-flight")
            }
        };
        self.progs.job_inst[ji as usize] = inst;
        self.jobs[ji as usize] = Some(job);
        self.conn(ci).in_flight += 1;
        self.sched.push(tenant, ji);
    }

    /// Admits queued jobs while the engine has free slots.
    fn dispatch(&mut self) {
        while self.engine.free_slots() > 0 {
            let Some((_, ji)) = self.sched.admit() else { return };
            let j = self.jobs[ji as usize].as_mut().expect("queued job exists");
            j.admitted = true;
            let token = u64::from(ji);
            let r = match j.kind {
                JobKind::Read | JobKind::Lambda => {
                    self.engine.submit_read(j.file, j.offset, u64::from(j.len), token)
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
                self.finish_job(ji, Err((StatusCode::Io, format!("submit: {e}"))));
            } else if j.kind == JobKind::Xrp {
                self.shared.stats.chains.fetch_add(1, Ordering::Relaxed);
            }
        }
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
                let ji = u32::try_from(c.token).expect("job index");
                let j = jobs[ji as usize].as_mut().expect("completed job exists");
                let live = conns[j.conn as usize].as_ref().is_some_and(|cn| cn.gen == j.conn_gen);
                if live {
                    complete_into(j, &c, conns[j.conn as usize].as_mut().expect("live"));
                }
                finished.push(ji);
            })
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        // λ programs run here, outside the reap (their input was copied out of the buffer).
        for k in 0..self.finished.len() {
            let ji = self.finished[k];
            let j = self.jobs[ji as usize].as_ref().expect("finished job exists");
            if j.kind == JobKind::Lambda && j.input_len != u32::MAX {
                self.run_lambda(ji);
            }
            self.release_job(ji);
        }
        Ok(())
    }

    /// Runs a λ job's program over its input, writing the output straight into the response.
    fn run_lambda(&mut self, ji: u32) {
        let j = self.jobs[ji as usize].as_ref().expect("job");
        let live = self.conns[j.conn as usize].as_ref().is_some_and(|cn| cn.gen == j.conn_gen);
        if !live {
            return;
        }
        let (conn, req_id, version, cap, inst) = (j.conn, j.req_id, j.version, j.out_len, j.inst);
        let input_len = j.input_len as usize;
        let Self { jobs, conns, progs, .. } = self;
        let j = jobs[ji as usize].as_ref().expect("job");
        let c = conns[conn as usize].as_mut().expect("live");
        open_frame(c);
        let start = c.frame.begin_msg(req_id, op::LAMBDA, StatusCode::Ok as u16);
        let hdr = c.frame.buf.len();
        c.frame.buf.extend_from_slice(&version.dev.to_le_bytes());
        c.frame.buf.extend_from_slice(&version.ino.to_le_bytes());
        c.frame.buf.extend_from_slice(&version.change.to_le_bytes());
        c.frame.buf.extend_from_slice(&0u64.to_le_bytes());
        let out_at = c.frame.buf.len();
        c.frame.buf.resize(out_at + cap as usize, 0);
        let s = progs.slots[inst as usize].as_mut().expect("held");
        let res = s.inst.run_lambda(&j.buf[..input_len], &mut c.frame.buf[out_at..]);
        match res {
            Ok(ret) => {
                let keep = usize::try_from(ret.min(u64::from(cap))).expect("<= cap");
                c.frame.buf.truncate(out_at + keep);
                c.frame.buf[hdr + 24..hdr + 32].copy_from_slice(&ret.to_le_bytes());
                c.frame.end_msg(start);
            }
            Err(e) => {
                c.frame.buf.truncate(start);
                put_status(
                    &mut c.frame,
                    req_id,
                    op::LAMBDA,
                    StatusCode::ChainFailed,
                    &e.to_string(),
                );
            }
        }
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
        if j.inst != u32::MAX {
            self.progs.release(j.inst);
        }
        if j.admitted {
            self.sched.done(j.tenant);
        }
        if let Some(c) = self.conns[j.conn as usize].as_mut().filter(|c| c.gen == j.conn_gen) {
            c.in_flight -= 1;
        }
        self.spare_bufs.push(j.buf);
        self.free_jobs.push(ji);
    }

    /// Moves each connection's collected responses to its send buffer and sends what it can.
    fn flush_all(&mut self) {
        for ci in 0..self.conns.len() {
            let ci = u32::try_from(ci).expect("bounded");
            let Some(c) = self.conns[ci as usize].as_mut() else { continue };
            if !c.frame.is_empty() {
                let bytes = c.frame.finish();
                c.tx.extend_from_slice(bytes);
                c.frame.begin(KIND_RESPONSE); // count 0 again: the next response restarts it
            }
            if let Err(why) = send(c) {
                self.close(ci, &why);
                continue;
            }
            let c = self.conns[ci as usize].as_ref().expect("live");
            if c.tx_pos == c.tx.len() {
                if let Some(why) = c.closing {
                    self.close(ci, why);
                }
            }
        }
    }

    fn check_timeouts(&mut self) {
        let now = Instant::now();
        let (idle, slow) = (self.shared.cfg.idle_timeout, self.shared.cfg.slow_client_timeout);
        for ci in 0..self.conns.len() {
            let Some(c) = self.conns[ci].as_ref() else { continue };
            let quiet = c.in_flight == 0 && c.tx_pos == c.tx.len() && c.partial_since.is_none();
            let why = if quiet && now - c.last_rx > idle {
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
                || self.offload.forwarded_live > 0
                || self
                    .conns
                    .iter()
                    .flatten()
                    .any(|c| !c.frame.is_empty() || c.tx_pos < c.tx.len());
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
    open_frame(conn);
    match &c.result {
        Err(e) => {
            j.input_len = u32::MAX;
            let st = match e {
                storefn_io::ChainError::Io { .. } | storefn_io::ChainError::ShortRead { .. } => {
                    StatusCode::Io
                }
                _ => StatusCode::ChainFailed,
            };
            put_status(&mut conn.frame, j.req_id, code, st, &e.to_string());
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
                j.buf[..c.data.len()].copy_from_slice(c.data);
                j.input_len = u32::try_from(c.data.len()).expect("<= 4096");
            }
        },
    }
}

/// A response frame is closed (moved to the send buffer) before it could pass
/// `MAX_FRAME_BYTES` with the largest message or `MAX_MSGS_PER_FRAME` messages.
const ROLL_FRAME_BYTES: usize = MAX_FRAME_BYTES - MAX_LAMBDA_OUT_BYTES as usize - 1024;

/// Makes the connection's response frame ready for one more message of any size.
fn open_frame(c: &mut Conn) {
    if !c.frame.is_empty()
        && (c.frame.len() > ROLL_FRAME_BYTES || c.frame.count() >= MAX_MSGS_PER_FRAME)
    {
        let bytes = c.frame.finish();
        c.tx.extend_from_slice(bytes);
        c.frame.begin(KIND_RESPONSE);
    }
    if c.frame.is_empty() {
        c.frame.begin(KIND_RESPONSE);
    }
}

/// Sends what the socket takes; `Err` = the connection is broken.
fn send(c: &mut Conn) -> Result<(), String> {
    while c.tx_pos < c.tx.len() {
        match c.stream.write(&c.tx[c.tx_pos..]) {
            Ok(0) => return Err("write returned 0".into()),
            Ok(n) => {
                c.tx_pos += n;
                c.tx_stalled_since = None;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                c.tx_stalled_since = Some(c.tx_stalled_since.unwrap_or_else(Instant::now));
                return Ok(());
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("write: {e}")),
        }
    }
    c.tx.clear();
    c.tx_pos = 0;
    Ok(())
}

/// WRITE: open beneath the root for writing, write everything, `fdatasync`, then the version.
fn write_file(
    root: &crate::confine::Root,
    path: &[u8],
    offset: u64,
    data: &[u8],
) -> Result<FileVersion, FileFail> {
    use std::os::unix::fs::FileExt;
    let f = root.open_beneath(path, libc::O_WRONLY).map_err(|e| (e.status(), e.to_string()))?;
    f.write_all_at(data, offset).map_err(|e| (StatusCode::Io, format!("write: {e}")))?;
    f.sync_data().map_err(|e| (StatusCode::Io, format!("fdatasync: {e}")))?;
    let (dev, ino, change, _) =
        crate::confine::identity(&f).map_err(|e| (StatusCode::Io, e.to_string()))?;
    Ok(FileVersion { dev, ino, change })
}
