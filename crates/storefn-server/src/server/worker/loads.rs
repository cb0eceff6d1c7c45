//! LOAD_PROG off the event loop: each server thread hands the programs it is sent to its own
//! verifier thread (hash, ELF parse, verification), through a bounded queue, and answers when
//! the verification is done. The registry's mutex is held only to look a hash up and to add a
//! verified program, never across a verification, so one tenant's large programs delay no
//! other connection of the thread and no other thread's program lookups. The verifier's time
//! is charged to the tenant that sent the program, as the loop's own work is.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use super::Worker;
use crate::limits::MAX_PENDING_LOADS;
use crate::registry::{prog_hash, LoadError, ProgHash, Registry};
use crate::server::files::FileFail;
use crate::server::{Shared, MAX_IN_FLIGHT_PER_CONN};
use storefn_wire::{op, Response, StatusCode};

/// One program handed to the verifier.
struct LoadJob {
    tenant: u32,
    conn: u32,
    conn_gen: u32,
    req_id: u64,
    prog_type: u8,
    section: Vec<u8>,
    elf: Vec<u8>,
    started: Instant,
}

/// A program verified (or refused).
struct LoadDone {
    tenant: u32,
    conn: u32,
    conn_gen: u32,
    req_id: u64,
    /// The verifier's time for it, charged to its tenant.
    ns: u64,
    started: Instant,
    result: Result<(ProgHash, u32), FileFail>,
}

/// The worker's side of its verifier thread.
pub(super) struct Loads {
    tx: Option<SyncSender<LoadJob>>,
    rx: Receiver<LoadDone>,
    /// Readable when answers are ready (the verifier adds 1 per program).
    efd: Arc<OwnedFd>,
    thread: Option<JoinHandle<()>>,
    /// Programs handed over and not answered.
    pub(super) pending: usize,
}

impl std::fmt::Debug for Loads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loads").field("pending", &self.pending).finish_non_exhaustive()
    }
}

impl Loads {
    /// Starts the verifier thread of server thread `id`.
    pub(super) fn start(id: usize, shared: &Arc<Shared>) -> std::io::Result<Self> {
        // SAFETY: eventfd has no memory preconditions; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd was just created and is owned by nothing else.
        let efd = Arc::new(unsafe { OwnedFd::from_raw_fd(fd) });
        let (tx, jobs) = std::sync::mpsc::sync_channel::<LoadJob>(MAX_PENDING_LOADS);
        let (done_tx, rx) = std::sync::mpsc::channel::<LoadDone>();
        let (wake, shared) = (Arc::clone(&efd), Arc::clone(shared));
        let thread = std::thread::Builder::new()
            .name(format!("storefn-verify-{id}"))
            .spawn(move || verifier(&jobs, &done_tx, &wake, &shared))?;
        Ok(Self { tx: Some(tx), rx, efd, thread: Some(thread), pending: 0 })
    }

    /// The eventfd the worker polls while programs are pending.
    pub(super) fn fd(&self) -> std::os::fd::RawFd {
        self.efd.as_raw_fd()
    }
}

impl Drop for Loads {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The verifier thread: one program at a time, answered as soon as it is verified.
fn verifier(
    jobs: &Receiver<LoadJob>,
    done: &std::sync::mpsc::Sender<LoadDone>,
    wake: &OwnedFd,
    shared: &Shared,
) {
    while let Ok(j) = jobs.recv() {
        let t0 = Instant::now();
        let result = load(&shared.registry, j.prog_type, &j.section, &j.elf);
        let d = LoadDone {
            tenant: j.tenant,
            conn: j.conn,
            conn_gen: j.conn_gen,
            req_id: j.req_id,
            ns: u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX),
            started: j.started,
            result,
        };
        if done.send(d).is_err() {
            return;
        }
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to the eventfd this thread shares.
        unsafe { libc::write(wake.as_raw_fd(), one.as_ptr().cast(), 8) };
    }
}

/// Looks the program up, verifies it without the registry's lock if it is new, adds it.
fn load(
    registry: &std::sync::Mutex<Registry>,
    prog_type: u8,
    section: &[u8],
    elf: &[u8],
) -> Result<(ProgHash, u32), FileFail> {
    let poisoned = || (StatusCode::Io, "registry poisoned".to_string());
    let hash = prog_hash(prog_type, section, elf);
    let known = registry.lock().map_err(|_| poisoned())?.get(&hash);
    let refused = |e: LoadError| {
        let st = match e {
            LoadError::TooLarge { .. } => StatusCode::Limit,
            _ => StatusCode::ProgRejected,
        };
        (st, e.to_string())
    };
    let prog = match known {
        Some(p) => p,
        None => {
            let (p, bytes) = Registry::verify(prog_type, section, elf).map_err(refused)?;
            registry.lock().map_err(|_| poisoned())?.insert(hash, p, bytes).map_err(refused)?
        }
    };
    Ok((hash, u32::try_from(prog.insns.len()).unwrap_or(u32::MAX)))
}

impl Worker<'_> {
    /// LOAD_PROG: hands the program to the verifier thread; answered by `poll_loads`.
    pub(super) fn submit_load(
        &mut self,
        ci: u32,
        req_id: u64,
        prog_type: u8,
        section: &[u8],
        elf: &[u8],
    ) -> Result<(), FileFail> {
        let c = self.conn(ci);
        if c.in_flight >= MAX_IN_FLIGHT_PER_CONN {
            return Err((StatusCode::Limit, "too many requests in flight".into()));
        }
        let (conn_gen, tenant) = (c.gen, c.tenant.expect("authenticated"));
        let job = LoadJob {
            tenant,
            conn: ci,
            conn_gen,
            req_id,
            prog_type,
            section: section.to_vec(),
            elf: elf.to_vec(),
            started: self.req_started,
        };
        let tx = self.loads.tx.as_ref().expect("the verifier runs while the worker does");
        match tx.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                let m = "this server thread's verifier queue is full";
                return Err((StatusCode::Limit, m.into()));
            }
            Err(TrySendError::Disconnected(_)) => {
                return Err((StatusCode::Io, "the verifier thread stopped".into()));
            }
        }
        self.conn(ci).in_flight += 1;
        self.tenants.hold(tenant);
        self.loads.pending += 1;
        Ok(())
    }

    /// Answers the programs the verifier finished.
    pub(super) fn poll_loads(&mut self) {
        if self.loads.pending == 0 {
            return;
        }
        let mut n = [0u8; 8];
        // SAFETY: reads 8 bytes into a live buffer from the non-blocking eventfd; it only
        // resets the counter, the answers come from the channel.
        unsafe { libc::read(self.loads.fd(), n.as_mut_ptr().cast(), 8) };
        while let Ok(d) = self.loads.rx.try_recv() {
            self.loads.pending -= 1;
            self.sched.charge(d.tenant, d.ns);
            self.meter_request_cpu(d.tenant, d.ns);
            self.shared.metrics.latency(op::LOAD_PROG, d.started.elapsed());
            self.tenants.release(d.tenant);
            let live = self.conns[d.conn as usize].as_ref().is_some_and(|c| c.gen == d.conn_gen);
            if !live {
                continue;
            }
            self.conn(d.conn).in_flight -= 1;
            let code = op::LOAD_PROG;
            match d.result {
                Ok((hash, insns)) => {
                    self.respond(
                        d.conn,
                        d.req_id,
                        code,
                        &Response::LoadProg { hash: &hash, insns },
                    );
                }
                Err((st, m)) => self.respond_err(d.conn, d.req_id, code, st, &m),
            }
        }
    }
}
