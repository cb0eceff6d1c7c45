//! LOAD_PROG off the event loop: each server thread hands the programs it is sent to its own
//! verifier thread (hash, ELF parse, verification), through a bounded queue, and answers when
//! the verification is done. The registry's mutex is held only to look a hash up and to add a
//! verified program, never across a verification, so one tenant's large programs delay no
//! other connection of the thread and no other thread's program lookups. The verifier's time
//! is charged to the tenant that sent the program, as the loop's own work is.

use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Instant;

use super::side::{Side, Wake};
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
    side: Side<SyncSender<LoadJob>>,
    rx: Receiver<LoadDone>,
    /// Raised when answers are ready (once per program).
    wake: Arc<Wake>,
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
        let wake = Wake::new()?;
        let (tx, jobs) = std::sync::mpsc::sync_channel::<LoadJob>(MAX_PENDING_LOADS);
        let (done_tx, rx) = std::sync::mpsc::channel::<LoadDone>();
        let (w, shared) = (Arc::clone(&wake), Arc::clone(shared));
        let side = Side::spawn(format!("storefn-verify-{id}"), tx, move || {
            verifier(&jobs, &done_tx, &w, &shared);
        })?;
        Ok(Self { side, rx, wake, pending: 0 })
    }

    /// The eventfd the worker polls while programs are pending.
    pub(super) fn fd(&self) -> std::os::fd::RawFd {
        self.wake.fd()
    }
}

/// The verifier thread: one program at a time, answered as soon as it is verified.
fn verifier(
    jobs: &Receiver<LoadJob>,
    done: &std::sync::mpsc::Sender<LoadDone>,
    wake: &Wake,
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
        wake.raise();
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
        let tx = self.loads.side.tx();
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
        self.loads.wake.clear();
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
