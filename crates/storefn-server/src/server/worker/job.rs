//! Requests that run on the engine, one type per kind: what every job has ([`JobHead`]) and
//! the kind's own state ([`JobKind`]), created here when a request is queued and released
//! here when it was answered. Each kind's submit/complete/finish sits in its own module
//! (`read`, `xrp`, `lambda`).

use storefn_io::{Completion, FileId};
use storefn_vm::ProgType;

use super::lambda::LambdaJob;
use super::read::ReadJob;
use super::xrp::XrpJob;
use super::{Conn, Worker};
use crate::access::Intent;
use crate::registry::ProgHash;
use crate::server::files::FileFail;
use crate::server::MAX_IN_FLIGHT_PER_CONN;
use storefn_wire::{op, FileVersion, StatusCode};

/// What every engine job carries: who asked, the file range, its scheduling state.
#[derive(Debug)]
pub(super) struct JobHead {
    pub(super) conn: u32,
    pub(super) conn_gen: u32,
    pub(super) tenant: u32,
    pub(super) req_id: u64,
    pub(super) file_slot: u32,
    pub(super) file: FileId,
    pub(super) version: FileVersion,
    pub(super) offset: u64,
    pub(super) len: u32,
    /// Admitted to the engine by the scheduler (counts against the tenant's share).
    pub(super) admitted: bool,
}

/// A job's own state, by kind.
#[derive(Debug)]
pub(super) enum JobKind {
    Read(ReadJob),
    Xrp(XrpJob),
    Lambda(LambdaJob),
}

/// A request waiting for or running on the engine.
#[derive(Debug)]
pub(super) struct Job {
    pub(super) head: JobHead,
    pub(super) kind: JobKind,
}

impl JobKind {
    pub(super) fn op(&self) -> u8 {
        match self {
            Self::Read(_) => op::READ,
            Self::Xrp(_) => op::XRP,
            Self::Lambda(_) => op::LAMBDA,
        }
    }

    /// The program instance the job holds (XRP and λ).
    fn inst(&self) -> Option<u32> {
        match self {
            Self::Read(_) => None,
            Self::Xrp(x) => Some(x.inst),
            Self::Lambda(l) => Some(l.inst),
        }
    }
}

impl Job {
    /// Records the job's engine completion (its connection `conn` if still open): errors are
    /// answered here, results are answered by [`Worker::finish_landed`] after the reap.
    pub(super) fn complete(&mut self, c: &Completion<'_>, conn: Option<&mut Conn>) {
        let code = self.kind.op();
        match &mut self.kind {
            JobKind::Read(r) => r.complete(&self.head, c, conn, code),
            JobKind::Xrp(x) => x.complete(&self.head, c, conn),
            JobKind::Lambda(l) => l.complete(&self.head, c, conn, code),
        }
    }
}

/// A request about to be queued: where it reads.
#[derive(Debug, Clone, Copy)]
pub(super) struct Target<'r> {
    pub(super) path: &'r [u8],
    pub(super) offset: u64,
    pub(super) len: u32,
}

impl Worker<'_> {
    /// Queues READ, XRP or LAMBDA: checks the connection and the file range, holds the
    /// program (`prog`) and the file, then `make(inst)` builds the kind's state.
    pub(super) fn queue(
        &mut self,
        ci: u32,
        req_id: u64,
        code: u8,
        t: Target<'_>,
        prog: Option<(&ProgHash, ProgType)>,
        make: impl FnOnce(&mut Self, Option<u32>) -> JobKind,
    ) {
        if let Err((st, m)) = self.queue_checks(ci) {
            return self.respond_err(ci, req_id, code, st, &m);
        }
        let inst = match prog.map(|(h, ty)| self.progs.acquire(self.shared, h, ty)).transpose() {
            Ok(i) => i,
            Err((st, m)) => return self.respond_err(ci, req_id, code, st, &m),
        };
        let head = match self.open_target(ci, req_id, t) {
            Ok(h) => h,
            Err((st, m)) => {
                if let Some(i) = inst {
                    self.progs.release(i);
                }
                return self.respond_err(ci, req_id, code, st, &m);
            }
        };
        let kind = make(self, inst);
        self.push_job(Job { head, kind }, inst);
    }

    fn queue_checks(&mut self, ci: u32) -> Result<(), FileFail> {
        if self.stopping() {
            return Err((StatusCode::ShuttingDown, "server is stopping".into()));
        }
        if self.conn(ci).in_flight >= MAX_IN_FLIGHT_PER_CONN {
            return Err((StatusCode::Limit, "too many requests in flight".into()));
        }
        Ok(())
    }

    /// Opens the target's file (held in the head) and checks the range lies inside it.
    fn open_target(&mut self, ci: u32, req_id: u64, t: Target<'_>) -> Result<JobHead, FileFail> {
        let c = self.conn(ci);
        let (conn_gen, tenant, scope) = (c.gen, c.tenant.expect("HELLO checked"), c.scope);
        let sh = self.shared;
        let at = sh.policy.resolve(&sh.root, scope, t.path, Intent::Read)?;
        let f = self.files.acquire(&mut self.engine, at, &sh.stats)?;
        let Target { offset, len, .. } = t;
        if offset.checked_add(u64::from(len)).is_none_or(|e| e > f.size) {
            self.files.release(f.slot);
            let m = format!("[{offset}, +{len}) is outside the file ({} bytes)", f.size);
            return Err((StatusCode::OutOfRange, m));
        }
        Ok(JobHead {
            conn: ci,
            conn_gen,
            tenant,
            req_id,
            file_slot: f.slot,
            file: f.id,
            version: f.version,
            offset,
            len,
            admitted: false,
        })
    }

    fn push_job(&mut self, job: Job, inst: Option<u32>) {
        let ji = match self.free_jobs.pop() {
            Some(j) => j,
            None => {
                self.jobs.push(None);
                self.progs.job_inst.push(0);
                self.progs.job_budget.push(0);
                self.progs.job_cpu.push(0);
                u32::try_from(self.jobs.len() - 1).expect("bounded by connections x in-flight")
            }
        };
        let (ci, tenant) = (job.head.conn, job.head.tenant);
        self.progs.job_inst[ji as usize] = inst.unwrap_or(0);
        self.progs.job_budget[ji as usize] = self.tenants.budget(tenant);
        self.jobs[ji as usize] = Some(job);
        self.job_queued(ji);
        self.conn(ci).in_flight += 1;
        self.tenants.hold(tenant);
        self.sched.push(tenant, ji);
    }

    /// Submits an admitted job to the engine; a refusal is answered and the job released.
    pub(super) fn submit_job(&mut self, ji: u32) {
        let j = self.jobs[ji as usize].as_mut().expect("queued job exists");
        j.head.admitted = true;
        let r = match j.kind {
            JobKind::Read(_) => self.submit_read(ji),
            JobKind::Xrp(_) => self.submit_xrp(ji),
            JobKind::Lambda(_) => self.submit_lambda(ji),
        };
        match (r, &self.jobs[ji as usize].as_ref().expect("job").kind) {
            (Ok(()), _) => {}
            (Err(e), JobKind::Lambda(l)) if l.in_flight() > 0 => {
                // Some pieces went out: answer now, release when the last one completes.
                self.fail_lambda(ji, e);
            }
            (Err(e), _) => self.finish_job(ji, Err(e)),
        }
    }

    /// After the reap that completed it: answers a job whose data landed (a READ from its
    /// buffer, a λ by running its function over it). Returns whether the job is done.
    pub(super) fn finish_landed(&mut self, ji: u32) -> bool {
        let j = self.jobs[ji as usize].as_ref().expect("job");
        let h = &j.head;
        let live = self.conns[h.conn as usize].as_ref().is_some_and(|c| c.gen == h.conn_gen);
        match &j.kind {
            JobKind::Read(r) => {
                if live && r.landed {
                    self.answer_read(ji);
                }
                true
            }
            JobKind::Xrp(_) => true,
            JobKind::Lambda(_) => self.finish_lambda(ji, live),
        }
    }

    /// Answers a job's error (if its connection is still open) and releases it.
    pub(super) fn finish_job(&mut self, ji: u32, r: Result<(), FileFail>) {
        if let Err((st, m)) = r {
            let j = self.jobs[ji as usize].as_ref().expect("job");
            let (conn, gen, req_id, code) =
                (j.head.conn, j.head.conn_gen, j.head.req_id, j.kind.op());
            if self.conns[conn as usize].as_ref().is_some_and(|c| c.gen == gen) {
                self.respond_err(conn, req_id, code, st, &m);
            }
        }
        self.release_job(ji);
    }

    /// Returns a finished job's resources: file and program references, buffers, the slot.
    /// Never called while the job's read is in flight (its buffer is the kernel's until then).
    pub(super) fn release_job(&mut self, ji: u32) {
        let Job { head, kind } = self.jobs[ji as usize].take().expect("job exists");
        self.files.release(head.file_slot);
        if let Some(i) = kind.inst() {
            self.progs.release(i);
        }
        let cpu = std::mem::take(&mut self.progs.job_cpu[ji as usize]);
        self.meter_job(ji, &head, &kind, cpu);
        if head.admitted {
            self.sched.done(head.tenant);
            self.sched.job_done(head.tenant, cpu);
        }
        self.tenants.release(head.tenant);
        if let Some(c) = self.conns[head.conn as usize].as_mut().filter(|c| c.gen == head.conn_gen)
        {
            c.in_flight -= 1;
        }
        match kind {
            JobKind::Read(ReadJob { buf: Some(b), .. })
            | JobKind::Lambda(LambdaJob { buf: Some(b), .. }) => self.ranges.give(b),
            JobKind::Xrp(x) => self.spare_bufs.push(x.scratch),
            JobKind::Read(_) | JobKind::Lambda(_) => {}
        }
        self.free_jobs.push(ji);
    }
}
