//! The worker's requests in flight, one variant of [`Job`] per kind, each holding only its own
//! state: READ, XRP and LAMBDA are queued per tenant and run on the engine over a file the
//! worker holds ([`JobHead`]); DDS's offloaded reads run on the engine over the hook's files;
//! WRITE and LAMBDA_WRITE run on the writer thread. Every kind lives in one table, and an
//! engine request's token (or a write's order to the writer) is its index there. The queued
//! kinds are created here and released here once answered; each kind's submit/complete/finish
//! sits in its own module (`read`, `xrp`, `lambda`, `offloaded`, `writes`).

use storefn_io::{Completion, FileId};
use storefn_vm::ProgType;

use super::lambda::LambdaJob;
use super::offloaded::OffloadedRead;
use super::read::ReadJob;
use super::writes::WriteJob;
use super::xrp::XrpJob;
use super::{Conn, Worker};
use crate::access::Intent;
use crate::registry::ProgHash;
use crate::server::files::FileFail;
use crate::server::{MAX_CONN_READ_BYTES, MAX_IN_FLIGHT_PER_CONN};
use storefn_wire::{op, FileVersion, StatusCode};

/// What every queued engine job (READ, XRP, LAMBDA) carries: who asked, the file it holds and
/// the range, its scheduling state.
#[derive(Debug, Clone, Copy)]
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
    /// Bytes of its connection's answer budget (`MAX_CONN_READ_BYTES`) the job holds: set when
    /// it leaves the connection's waiting jobs for the scheduler, given back at its release.
    pub(super) budget: usize,
}

/// A request in flight, by kind.
#[derive(Debug)]
pub(super) enum Job {
    Read(JobHead, ReadJob),
    Xrp(JobHead, XrpJob),
    Lambda(JobHead, LambdaJob),
    Offloaded(OffloadedRead),
    Write(WriteJob),
}

/// The engine token of job `ji`: its index in the table (the XRP programs' `StorageFn` reads
/// it as such).
pub(super) fn token(ji: u32) -> u64 {
    u64::from(ji)
}

/// The job an engine token names.
pub(super) fn job_of(token: u64) -> u32 {
    u32::try_from(token).expect("the worker's tokens are job indexes")
}

impl Job {
    pub(super) fn op(&self) -> u8 {
        match self {
            Self::Read(..) => op::READ,
            Self::Xrp(..) => op::XRP,
            Self::Lambda(..) => op::LAMBDA,
            Self::Offloaded(_) => op::OFFLOAD,
            Self::Write(w) => w.op,
        }
    }

    /// Who asked: the connection, its generation, the request id.
    pub(super) fn origin(&self) -> (u32, u32, u64) {
        match self {
            Self::Read(h, _) | Self::Xrp(h, _) | Self::Lambda(h, _) => {
                (h.conn, h.conn_gen, h.req_id)
            }
            Self::Offloaded(o) => (o.conn, o.conn_gen, o.req_id),
            Self::Write(w) => (w.conn, w.conn_gen, w.req_id),
        }
    }

    /// Bytes of its connection's answer budget the job needs from its admission until its
    /// answer is queued on the connection: a READ's range buffer (its pool class), a λ's output
    /// with its answer's head; XRP answers are small and not budgeted.
    pub(super) fn answer_bytes(&self) -> usize {
        match self {
            Self::Read(h, _) => {
                let need = super::ranges::place(h.offset, h.len, super::read::READ_HEAD_BYTES).1;
                super::ranges::RangePool::class_of(need)
            }
            Self::Lambda(_, l) => l.out_cap as usize + super::lambda::LAMBDA_HEAD_BYTES,
            Self::Xrp(..) | Self::Offloaded(_) | Self::Write(_) => 0,
        }
    }

    fn head_mut(&mut self) -> Option<&mut JobHead> {
        match self {
            Self::Read(h, _) | Self::Xrp(h, _) | Self::Lambda(h, _) => Some(h),
            Self::Offloaded(_) | Self::Write(_) => None,
        }
    }

    /// The head of a queued engine job.
    pub(super) fn head(&self) -> Option<&JobHead> {
        match self {
            Self::Read(h, _) | Self::Xrp(h, _) | Self::Lambda(h, _) => Some(h),
            Self::Offloaded(_) | Self::Write(_) => None,
        }
    }

    /// The program instance the job holds (XRP and λ).
    fn inst(&self) -> Option<u32> {
        match self {
            Self::Xrp(_, x) => Some(x.inst),
            Self::Lambda(_, l) => Some(l.inst),
            Self::Read(..) | Self::Offloaded(_) | Self::Write(_) => None,
        }
    }

    /// Records the job's engine completion (its connection `conn` if still open): errors are
    /// answered here, results after the reap (`Worker::finish_landed`, `finish_offloaded`).
    pub(super) fn complete(&mut self, c: &Completion<'_>, conn: Option<&mut Conn>) {
        match self {
            Self::Read(h, r) => r.complete(h, c, conn, op::READ),
            Self::Xrp(h, x) => x.complete(h, c, conn),
            Self::Lambda(h, l) => l.complete(h, c, conn, op::LAMBDA),
            Self::Offloaded(o) => o.complete(c),
            Self::Write(_) => unreachable!("writes run on the writer thread, not the engine"),
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
        make: impl FnOnce(&mut Self, JobHead, Option<u32>) -> Job,
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
        let job = make(self, head, inst);
        self.push_job(job, inst);
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
            budget: 0,
        })
    }

    /// Puts a job of any kind in a free slot of the table; returns its index.
    pub(super) fn add_job(&mut self, job: Job) -> u32 {
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
        self.jobs[ji as usize] = Some(job);
        ji
    }

    /// Takes job `ji` out of the table and frees its slot.
    pub(super) fn take_job(&mut self, ji: u32) -> Job {
        let j = self.jobs[ji as usize].take().expect("a job in the slot");
        self.free_jobs.push(ji);
        j
    }

    /// Queues an engine job (READ, XRP, LAMBDA): behind its connection's waiting jobs, which
    /// go to their tenant's queue as the connection's answer budget allows.
    fn push_job(&mut self, job: Job, inst: Option<u32>) {
        let h = *job.head().expect("a queued engine job");
        let ji = self.add_job(job);
        self.progs.job_inst[ji as usize] = inst.unwrap_or(0);
        self.progs.job_budget[ji as usize] = self.tenants.budget(h.tenant);
        self.job_queued(ji);
        let c = self.conn(h.conn);
        c.in_flight += 1;
        c.waiting.push_back(ji);
        self.waiting += 1;
        self.tenants.hold(h.tenant);
        self.unpark_conn(h.conn);
    }

    /// Moves connection `ci`'s waiting jobs, in order, to their tenant's queue while their
    /// answers fit its budget: the answer bytes its admitted jobs hold plus the response bytes
    /// it holds stay within `MAX_CONN_READ_BYTES` (one job always goes when it holds none).
    /// Returns how many went.
    pub(super) fn unpark_conn(&mut self, ci: u32) -> usize {
        let Some(c) = self.conns[ci as usize].as_mut() else { return 0 };
        let mut n = 0;
        while let Some(&ji) = c.waiting.front() {
            let j = self.jobs[ji as usize].as_mut().expect("a waiting job");
            let cost = j.answer_bytes();
            let held = c.answer_bytes + c.out_held();
            if held > 0 && held + cost > MAX_CONN_READ_BYTES {
                break;
            }
            c.waiting.pop_front();
            self.waiting -= 1;
            c.answer_bytes += cost;
            let h = j.head_mut().expect("an engine job");
            h.budget = cost;
            self.sched.push(h.tenant, ji);
            n += 1;
        }
        n
    }

    /// Every connection's waiting jobs that now fit (answers were sent, jobs released);
    /// returns how many went.
    pub(super) fn unpark(&mut self) -> usize {
        if self.waiting == 0 {
            return 0;
        }
        let mut n = 0;
        for ci in 0..self.conns.len() {
            let ci = u32::try_from(ci).expect("bounded");
            if self.conns[ci as usize].as_ref().is_some_and(|c| !c.waiting.is_empty()) {
                n += self.unpark_conn(ci);
            }
        }
        n
    }

    /// Submits an admitted job to the engine; a refusal is answered and the job released.
    pub(super) fn submit_job(&mut self, ji: u32) {
        let r = match self.jobs[ji as usize].as_mut().expect("queued job exists") {
            Job::Read(h, _) => {
                h.admitted = true;
                self.submit_read(ji)
            }
            Job::Xrp(h, _) => {
                h.admitted = true;
                self.submit_xrp(ji)
            }
            Job::Lambda(h, _) => {
                h.admitted = true;
                self.submit_lambda(ji)
            }
            Job::Offloaded(_) | Job::Write(_) => unreachable!("only engine jobs are queued"),
        };
        match (r, self.jobs[ji as usize].as_ref().expect("job")) {
            (Ok(()), _) => {}
            (Err(e), Job::Lambda(_, l)) if l.in_flight() > 0 => {
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
        let (conn, gen, _) = j.origin();
        let live = self.conns[conn as usize].as_ref().is_some_and(|c| c.gen == gen);
        match j {
            Job::Read(_, r) => {
                if live && r.landed {
                    self.answer_read(ji);
                }
                true
            }
            Job::Xrp(..) => true,
            Job::Lambda(..) => self.finish_lambda(ji, live),
            Job::Offloaded(_) | Job::Write(_) => unreachable!("finished by their own path"),
        }
    }

    /// Answers a job's error (if its connection is still open) and releases it.
    pub(super) fn finish_job(&mut self, ji: u32, r: Result<(), FileFail>) {
        if let Err((st, m)) = r {
            let j = self.jobs[ji as usize].as_ref().expect("job");
            let ((conn, gen, req_id), code) = (j.origin(), j.op());
            if self.conns[conn as usize].as_ref().is_some_and(|c| c.gen == gen) {
                self.respond_err(conn, req_id, code, st, &m);
            }
        }
        self.release_job(ji);
    }

    /// Returns a finished engine job's resources: file and program references, buffers, the
    /// slot. Never called while the job's read is in flight (its buffer is the kernel's until
    /// then).
    pub(super) fn release_job(&mut self, ji: u32) {
        let job = self.take_job(ji);
        let head = *job.head().expect("an engine job");
        self.files.release(head.file_slot);
        if let Some(i) = job.inst() {
            self.progs.release(i);
        }
        let cpu = std::mem::take(&mut self.progs.job_cpu[ji as usize]);
        self.meter_job(ji, &head, &job, cpu);
        if let Job::Lambda(_, l) = &job {
            if l.staged() {
                self.lambda_runs[head.tenant as usize] -= 1;
            }
        }
        if head.admitted {
            self.sched.done(head.tenant);
            self.sched.job_done(head.tenant, cpu);
        }
        self.tenants.release(head.tenant);
        if let Some(c) = self.conns[head.conn as usize].as_mut().filter(|c| c.gen == head.conn_gen)
        {
            c.in_flight -= 1;
            c.answer_bytes -= head.budget;
        }
        match job {
            Job::Read(_, ReadJob { buf: Some(b), .. })
            | Job::Lambda(_, LambdaJob { buf: Some(b), .. }) => self.ranges.give(b),
            Job::Xrp(_, x) => self.spare_bufs.push(x.scratch),
            Job::Read(..) | Job::Lambda(..) | Job::Offloaded(_) | Job::Write(_) => {}
        }
    }
}
