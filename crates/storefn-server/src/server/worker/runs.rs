//! λ runs off the event loop. A λ function runs once over its whole range (up to 1 MiB) in one
//! call that nothing can cut short, so run on the loop it stalled every other connection of the
//! thread for its length (~150 µs for a 1 MiB column sum here, up to the instruction budget for
//! a hostile one), and the per-pass CPU slice could not split it. Each server thread therefore
//! hands its λ runs to its own runner thread: a job whose range has landed waits in its
//! tenant's queue, the queues go to the runner least-used tenant first, at most
//! [`MAX_QUEUED_RUNS`] at a time (so a tenant arriving later is not stuck behind a long queue),
//! and the runner's CPU time is charged to the job's tenant as the loop's own work is. The
//! range buffer travels to the runner and back with the run (owned, so nothing else can touch
//! it meanwhile); the output is written into a buffer of the runner's and copied into the
//! response (at most `MAX_LAMBDA_OUT_BYTES`). The runner compiles and keeps its own instances,
//! by program hash (at most `MAX_INSTANCES_PER_THREAD`, least recently used replaced).

use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::Arc;

use storefn_io::RangeBuf;
use storefn_vm::{Instance, VerifiedProgram};

use super::job::Job;
use super::out::open_frame;
use super::side::{Side, Wake};
use super::Worker;
use crate::limits::MAX_QUEUED_RUNS;
use crate::registry::ProgHash;
use crate::server::MAX_INSTANCES_PER_THREAD;
use storefn_wire::{op, put_status, StatusCode};

/// One λ run handed to the runner: the program, its budget, the range's buffer with where the
/// range lies in it, and a buffer of the output's size.
struct RunOrder {
    job: u32,
    hash: ProgHash,
    prog: Arc<VerifiedProgram>,
    budget: u64,
    input: RangeBuf,
    range: std::ops::Range<usize>,
    out: Vec<u8>,
}

/// A run done: the program's return value (or its fault, in the program's terms), the CPU time
/// and instructions it took, and both buffers back.
struct RunDone {
    job: u32,
    result: Result<u64, String>,
    ns: u64,
    insns: u64,
    input: RangeBuf,
    out: Vec<u8>,
}

/// The worker's side of its runner thread.
pub(super) struct Runs {
    side: Side<SyncSender<RunOrder>>,
    rx: Receiver<RunDone>,
    /// Raised when runs are done (once per run).
    wake: Arc<Wake>,
    /// Runs handed to the runner and not answered.
    pub(super) pending: usize,
    /// λ jobs whose range landed, waiting for the runner, by tenant entry.
    queues: Vec<VecDeque<u32>>,
    /// Jobs in `queues`, in all.
    pub(super) queued: usize,
    /// Output buffers of answered runs, for reuse (at most `MAX_QUEUED_RUNS`).
    spare_out: Vec<Vec<u8>>,
}

impl std::fmt::Debug for Runs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runs")
            .field("pending", &self.pending)
            .field("queued", &self.queued)
            .finish_non_exhaustive()
    }
}

impl Runs {
    /// Starts the runner thread of server thread `id`.
    pub(super) fn start(id: usize) -> std::io::Result<Self> {
        let wake = Wake::new()?;
        let (tx, orders) = std::sync::mpsc::sync_channel::<RunOrder>(MAX_QUEUED_RUNS);
        // Bounded as well: an unbounded channel allocates a block every few dozen messages, and
        // no more than MAX_QUEUED_RUNS runs are ever outstanding, so the runner never waits.
        let (done_tx, rx) = std::sync::mpsc::sync_channel::<RunDone>(MAX_QUEUED_RUNS);
        let w = Arc::clone(&wake);
        let side = Side::spawn(format!("storefn-run-{id}"), tx, move || {
            runner(&orders, &done_tx, &w);
        })?;
        Ok(Self {
            side,
            rx,
            wake,
            pending: 0,
            queues: Vec::new(),
            queued: 0,
            spare_out: Vec::new(),
        })
    }

    /// The eventfd the worker polls while runs are pending.
    pub(super) fn fd(&self) -> std::os::fd::RawFd {
        self.wake.fd()
    }
}

/// The runner's nice value: λ runs are throughput work, the loop answers every connection, so
/// where the two share a core the loop goes first (as storage engines run compaction threads at
/// a lower CPU priority). An idle core still runs λs at full speed.
const RUNNER_NICE: libc::c_int = 10;

/// The CPU time the calling thread has used, ns: what a run costs, whether or not the thread
/// was preempted meanwhile.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into the live local.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &raw mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// The runner thread: one run at a time, answered as soon as it is done.
fn runner(orders: &Receiver<RunOrder>, done: &SyncSender<RunDone>, wake: &Wake) {
    // SAFETY: gettid and setpriority take no pointers; lowering one's own priority needs no
    // privilege, and a refusal only leaves the thread at the loop's priority.
    unsafe {
        let tid = libc::id_t::try_from(libc::gettid()).unwrap_or(0);
        libc::setpriority(libc::PRIO_PROCESS, tid, RUNNER_NICE);
    }
    // Compiled instances by program hash, with when each was last used.
    let mut insts: Vec<(ProgHash, Instance, u64)> = Vec::new();
    let mut clock = 0u64;
    while let Ok(mut o) = orders.recv() {
        clock += 1;
        let t0 = thread_cpu_ns();
        let (result, insns) = match instance(&mut insts, &o.hash, &o.prog, clock) {
            Ok(inst) => {
                inst.set_insn_budget(o.budget);
                let r = inst.run_lambda(&o.input.as_slice()[o.range.clone()], &mut o.out);
                (r.map_err(|e| e.to_string()), inst.insns_used())
            }
            Err(e) => (Err(e), 0),
        };
        let d = RunDone {
            job: o.job,
            result,
            ns: thread_cpu_ns().saturating_sub(t0),
            insns,
            input: o.input,
            out: o.out,
        };
        if done.send(d).is_err() {
            return;
        }
        wake.raise();
    }
}

/// The runner's instance of `prog`, compiled on first use.
fn instance<'a>(
    insts: &'a mut Vec<(ProgHash, Instance, u64)>,
    hash: &ProgHash,
    prog: &Arc<VerifiedProgram>,
    clock: u64,
) -> Result<&'a mut Instance, String> {
    let k = match insts.iter().position(|(h, _, _)| h == hash) {
        Some(k) => k,
        None => {
            let inst = crate::server::progs::compile(prog).map_err(|(_, m)| m)?;
            if insts.len() < MAX_INSTANCES_PER_THREAD {
                insts.push((*hash, inst, 0));
                insts.len() - 1
            } else {
                let (k, _) = insts
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, (_, _, used))| *used)
                    .expect("MAX_INSTANCES_PER_THREAD > 0");
                insts[k] = (*hash, inst, 0);
                k
            }
        }
    };
    insts[k].2 = clock;
    Ok(&mut insts[k].1)
}

impl Worker<'_> {
    /// λ job `ji`'s range landed (its connection is live): it waits in its tenant's queue for
    /// the runner.
    pub(super) fn queue_run(&mut self, ji: u32, tenant: u32) {
        let t = tenant as usize;
        if self.runs.queues.len() <= t {
            self.runs.queues.resize_with(t + 1, VecDeque::new);
        }
        self.runs.queues[t].push_back(ji);
        self.runs.queued += 1;
        if self.lambda_runs.len() <= t {
            self.lambda_runs.resize(t + 1, 0);
        }
        self.lambda_runs[t] += 1;
    }

    /// Hands queued runs to the runner while it has room, the least-used tenant's first.
    pub(super) fn feed_runner(&mut self) {
        while self.runs.queued > 0 && self.runs.pending < MAX_QUEUED_RUNS {
            let t = (0..self.runs.queues.len())
                .filter(|&t| !self.runs.queues[t].is_empty())
                .min_by_key(|&t| self.sched.used(u32::try_from(t).expect("small")))
                .expect("a queued run");
            let ji = self.runs.queues[t].pop_front().expect("non-empty");
            self.runs.queued -= 1;
            self.hand_to_runner(ji);
        }
    }

    /// Sends λ job `ji`'s run to the runner (its buffer goes with it); a job whose connection
    /// closed meanwhile is released instead.
    fn hand_to_runner(&mut self, ji: u32) {
        let Some(Job::Lambda(h, l)) = self.jobs[ji as usize].as_mut() else {
            unreachable!("a λ job waits for the runner")
        };
        let live = self.conns[h.conn as usize].as_ref().is_some_and(|c| c.gen == h.conn_gen);
        if !live {
            return self.release_job(ji);
        }
        let range = l.at..l.at + h.len as usize;
        let input = l.buf.take().expect("a landed λ holds its buffer");
        let s = self.progs.slots[l.inst as usize].as_ref().expect("a queued λ holds its program");
        let mut out = self.runs.spare_out.pop().unwrap_or_default();
        out.clear();
        out.resize(l.out_cap as usize, 0);
        let order = RunOrder {
            job: ji,
            hash: s.hash,
            prog: Arc::clone(&s.prog),
            budget: self.progs.job_budget[ji as usize],
            input,
            range,
            out,
        };
        let tx = self.runs.side.tx();
        match tx.try_send(order) {
            Ok(()) => self.runs.pending += 1,
            // The worker sends only while fewer than the channel's bound are pending.
            Err(TrySendError::Full(o) | TrySendError::Disconnected(o)) => {
                if let Some(Job::Lambda(_, l)) = self.jobs[ji as usize].as_mut() {
                    l.buf = Some(o.input);
                }
                self.finish_job(ji, Err((StatusCode::Io, "the λ runner thread stopped".into())));
            }
        }
    }

    /// Answers the runs the runner finished, charges their tenants, releases the jobs, and
    /// hands the runner what it has room for; returns how many runs were answered.
    pub(super) fn poll_runs(&mut self) -> usize {
        let mut answered = 0;
        if self.runs.pending > 0 {
            self.runs.wake.clear();
            while let Ok(d) = self.runs.rx.try_recv() {
                self.runs.pending -= 1;
                self.answer_run(d);
                answered += 1;
            }
        }
        self.feed_runner();
        answered
    }

    /// One finished run: its buffers back, its answer written (if its connection is still
    /// open), its CPU and instructions on the job (charged to the tenant at the release).
    fn answer_run(&mut self, d: RunDone) {
        let ji = d.job;
        let Some(Job::Lambda(h, l)) = self.jobs[ji as usize].as_mut() else {
            unreachable!("a λ job ran")
        };
        l.buf = Some(d.input);
        let (h, cap) = (*h, l.out_cap);
        let i = ji as usize;
        // The run's CPU orders the tenant's service (and is its program CPU in the metrics),
        // but is not the loop's: it neither spends the tenant's pass nor counts in the cost
        // that bounds how many of its jobs the engine holds (those bound the loop's work).
        self.sched.charge_elsewhere(h.tenant, d.ns);
        if let Some(m) = self.tenants.meter(h.tenant) {
            m.program_cpu(d.ns);
        }
        self.progs.job_insns[i] = self.progs.job_insns[i].saturating_add(d.insns);
        if let Some(c) = self.conns[h.conn as usize].as_mut().filter(|c| c.gen == h.conn_gen) {
            open_frame(c);
            match d.result {
                Ok(ret) => {
                    let start = c.frame.begin_msg(h.req_id, op::LAMBDA, StatusCode::Ok as u16);
                    c.frame.buf.extend_from_slice(&h.version.to_bytes());
                    c.frame.buf.extend_from_slice(&ret.to_le_bytes());
                    let keep = usize::try_from(ret.min(u64::from(cap))).expect("<= cap");
                    c.frame.buf.extend_from_slice(&d.out[..keep]);
                    c.frame.end_msg(start);
                }
                Err(m) => {
                    put_status(&mut c.frame, h.req_id, op::LAMBDA, StatusCode::ChainFailed, &m);
                }
            }
        }
        if self.runs.spare_out.len() < MAX_QUEUED_RUNS {
            self.runs.spare_out.push(d.out);
        }
        self.release_job(ji);
    }
}
