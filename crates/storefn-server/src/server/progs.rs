//! The thread's programs: one slot per program hash, shared by the thread's jobs, with the
//! program's instance compiled where the loop runs it (XRP hops, LAMBDA_WRITE; a LAMBDA runs on
//! the runner thread, which compiles its own); as the engine's storage function it runs the
//! program of each chain's job.

use std::sync::Arc;

use storefn_io::{StorageFn, VmError, XrpCtx};
use storefn_vm::{Instance, ProgType, VerifiedProgram};

use super::files::FileFail;
use super::{Shared, MAX_INSTANCES_PER_THREAD};
use crate::registry::ProgHash;
use storefn_wire::StatusCode;

pub(super) struct InstSlot {
    pub(super) hash: ProgHash,
    pub(super) prog: Arc<VerifiedProgram>,
    /// Compiled on the loop's first run of it (`Progs::instance`).
    inst: Option<Instance>,
    pub(super) refs: u32,
    pub(super) last_used: u64,
}

/// An instance of `prog` for the server: the JIT, else the interpreter, its budget capped at
/// `SERVER_INSN_BUDGET` (each run sets its tenant's).
pub(super) fn compile(prog: &Arc<VerifiedProgram>) -> Result<Instance, FileFail> {
    let mut inst = match Instance::new(Arc::clone(prog), storefn_vm::Engine::Jit) {
        Ok(i) => i,
        Err(_) => Instance::new(Arc::clone(prog), storefn_vm::Engine::Interp)
            .map_err(|e| (StatusCode::ProgRejected, e.to_string()))?,
    };
    inst.set_insn_budget(inst.insn_budget().min(crate::limits::SERVER_INSN_BUDGET));
    Ok(inst)
}

impl std::fmt::Debug for InstSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InstSlot").field("refs", &self.refs).finish_non_exhaustive()
    }
}

/// The thread's compiled programs; as the engine's storage function it runs the program of
/// the chain's job (the token is the job index).
#[derive(Debug, Default)]
pub(super) struct Progs {
    pub(super) slots: Vec<Option<InstSlot>>,
    /// Program slot of each job index.
    pub(super) job_inst: Vec<u32>,
    /// Instruction budget of each job index (its tenant's).
    pub(super) job_budget: Vec<u64>,
    /// CPU time each job's program runs took so far, ns (charged to its tenant at the end).
    pub(super) job_cpu: Vec<u64>,
    /// Instructions each job's program runs were charged so far (its tenant's count).
    pub(super) job_insns: Vec<u64>,
    /// When each job was queued (its answer's latency, for the metrics).
    pub(super) job_started: Vec<std::time::Instant>,
    pub(super) clock: u64,
}

impl StorageFn for Progs {
    fn invoke(
        &mut self,
        token: u64,
        ctx: &mut XrpCtx,
        data: &[u8],
        scratch: &mut [u8],
    ) -> Result<u64, VmError> {
        let ti = usize::try_from(token).expect("job index");
        let si = self.job_inst[ti] as usize;
        let s = self.slots[si].as_mut().expect("a running job's program stays loaded");
        let inst = s.inst.as_mut().expect("an XRP slot is compiled when acquired");
        inst.set_insn_budget(self.job_budget[ti]);
        let t0 = std::time::Instant::now();
        let r = inst.run_xrp(ctx, data, scratch);
        let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.job_cpu[ti] = self.job_cpu[ti].saturating_add(ns);
        self.job_insns[ti] = self.job_insns[ti].saturating_add(inst.insns_used());
        r
    }
}

impl Progs {
    /// The slot of `hash` for a `ty` request (compiled now for XRP, whose hops run on the
    /// loop; a λ program is compiled where it first runs).
    pub(super) fn acquire(
        &mut self,
        shared: &Shared,
        hash: &ProgHash,
        ty: ProgType,
    ) -> Result<u32, FileFail> {
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
            let inst = if ty == ProgType::Xrp { Some(compile(&prog)?) } else { None };
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
            self.slots[si] = Some(InstSlot { hash: *hash, prog, inst, refs: 0, last_used: 0 });
            si
        };
        let s = self.slots[si].as_mut().expect("present");
        if s.prog.prog_type != ty {
            return Err((StatusCode::BadRequest, "program type does not match the op".into()));
        }
        s.refs += 1;
        s.last_used = self.clock;
        Ok(u32::try_from(si).expect("small"))
    }

    /// Slot `si`'s instance, compiled on first use.
    pub(super) fn instance(&mut self, si: u32) -> Result<&mut Instance, FileFail> {
        let s = self.slots[si as usize].as_mut().expect("held slot");
        if s.inst.is_none() {
            s.inst = Some(compile(&s.prog)?);
        }
        Ok(s.inst.as_mut().expect("compiled"))
    }

    pub(super) fn release(&mut self, si: u32) {
        let s = self.slots[si as usize].as_mut().expect("held slot");
        s.refs -= 1;
    }
}
