//! A runnable program: the API the io engine, the KV store and the CLI use.
//!
//! An [`Instance`] owns everything one invocation touches besides the caller's buffers: its own
//! copy of the globals image (writable globals persist across invocations of one instance, as
//! in the kernel), a [`STACK_BYTES`] stack, the helpers' [`HostState`] and the compiled code (or
//! the interpreter) and a prebuilt [`RunEnv`]. The constant regions (stack, globals) are laid
//! out once in [`Instance::new`]; `run_*` overwrite only the per-call slots (context and the
//! caller's buffers), every one of them on every call (`run_xrp` skips the stores when the
//! context, buffers and lengths are the last call's, whose regions the slots then already
//! hold exactly), so no region of an earlier call survives. No allocation and no re-zeroing
//! per call.

use std::sync::Arc;

use crate::elf::{self, LoadError};
use crate::helpers::HostState;
use crate::jit::{JitError, JitProgram, Preloaded};
use crate::mem::{Region, RegionName, RegionSet, MAX_REGIONS};
use crate::program::{
    FaultInfo, ProgType, RunEnv, DEFAULT_INSN_BUDGET, LAMBDA_INSNS_PER_INPUT_BYTE,
    LAMBDA_INSNS_PER_OUTPUT_BYTE, STACK_BYTES,
};
use crate::verifier::{VerifiedProgram, VerifyError};
use crate::xrp::{
    LambdaCtx, XrpCtx, LAMBDA_CTX_BYTES, XRP_CTX_BYTES, XRP_OFF_DONE, XRP_OFF_NEXT_ADDR,
    XRP_OFF_SCRATCH, XRP_OFF_SLOT,
};
use crate::{interp, VmError};

/// Which engine runs the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Engine {
    /// Cranelift-compiled native code.
    Jit,
    /// The reference interpreter.
    Interp,
}

/// Why a program could not be prepared to run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Verify(#[from] VerifyError),
    #[error(transparent)]
    Jit(#[from] JitError),
}

/// Loads program `select` from `elf` and verifies it.
///
/// # Errors
/// [`Error::Load`] or [`Error::Verify`].
pub fn load_verified(
    elf: &[u8],
    select: Option<&str>,
    prog_type: ProgType,
) -> Result<Arc<VerifiedProgram>, Error> {
    let prog = elf::load(elf, select, prog_type)?;
    Ok(Arc::new(VerifiedProgram::new(prog)?))
}

#[derive(Debug)]
// One Exec per instance, built once: its size does not matter, an extra indirection per call
// would. A tag byte of its own (not a niche in a pointer-sized field) makes `run_xrp`'s test
// for the JIT one compare with an immediate.
#[allow(clippy::large_enum_variant)]
#[repr(u8)]
enum Exec {
    Jit(JitProgram),
    Interp,
}

/// A program ready to run, with its own globals, stack and host state.
#[derive(Debug)]
pub struct Instance {
    prog: Arc<VerifiedProgram>,
    /// Instructions each invocation may execute ([`DEFAULT_INSN_BUDGET`] unless set). For
    /// `xrp` and `offload` instances `env.insn_budget` always equals it (`new`,
    /// `set_insn_budget` and `exec` write both), so `run_xrp`'s in-line path stores neither.
    insn_budget: u64,
    /// `prog.xrp_min_bytes()` for the JIT (kept here: read on every `run_xrp`); `(0, 0)` for
    /// the interpreter, which needs nothing.
    jit_min_bytes: (u64, u64),
    exec: Exec,
    /// Globals image, 8-byte aligned (`u64` backing); `globals_len` bytes are meaningful.
    globals: Box<[u64]>,
    globals_len: usize,
    /// Stack for every frame; `u64` backing keeps it 8-byte aligned.
    stack: Box<[u64]>,
    /// The stack region's end (r10 of the entry frame): the box never moves, so it is
    /// computed once in `new` rather than on every call.
    stack_top: u64,
    /// Boxed so `RunEnv::host` stays valid if the instance moves between invocations.
    host: Box<HostState>,
    lambda_ctx: Box<LambdaCtx>,
    /// The program type's per-call slots first ([`XRP_CALL_READ`] / [`XRP_CALL_WRITE`], or
    /// the `LAMBDA_` / `OFFLOAD_` ones: constant indices, patched without a bounds check), then
    /// the stack and globals regions. Both sets' `len` never change after `new`.
    env: OwnedEnv,
    /// What `run_xrp` last patched the per-call slots from: (context address, data address,
    /// data length, scratch address, scratch length); `[0; 5]` (no context is at address 0)
    /// until the first call.
    xrp_slots_key: [u64; 5],
    /// `xrp_slots_key` when the JIT may run on it directly (the instance has a JIT and those
    /// buffers are at least `jit_min_bytes` long), else `[0; 5]`: a call whose key equals it
    /// runs the compiled code with no other bookkeeping (`run_xrp`). Cleared whenever the
    /// slots are patched; stored only by `run_xrp_slow`, after its assertion that the program
    /// is an xrp program, so it stays all zero on any other instance.
    xrp_jit_key: [u64; 5],
}

/// The instance's prebuilt [`RunEnv`]; a wrapper only to state why it may cross threads.
#[derive(Debug)]
struct OwnedEnv(RunEnv);

// SAFETY: the only pointer-typed field, `RunEnv::host`, points at the owning instance's boxed
// HostState (it moves with the instance) and is dereferenced only while a `run_*` call holds
// the instance mutably; the region addresses are plain integers. So the env carries no access
// to anything another thread could be using.
unsafe impl Send for OwnedEnv {}

/// Per-call read slots of an `xrp` run: the context, `data`, `scratch`.
const XRP_CALL_READ: usize = 3;
/// Per-call write slots of an `xrp` run: `done`, `next_addr[]`+`size[]`, `scratch`.
const XRP_CALL_WRITE: usize = 3;
/// Per-call read slots of a `lambda` run: the context, `input`, `output`.
const LAMBDA_CALL_READ: usize = 3;
/// Per-call write slots of a `lambda` run: `output`.
const LAMBDA_CALL_WRITE: usize = 1;
/// Per-call read slots of an `offload` run: the context, `msg`, `out`.
const OFFLOAD_CALL_READ: usize = 3;
/// Per-call write slots of an `offload` run: `out`.
const OFFLOAD_CALL_WRITE: usize = 1;
/// Constant slots after the per-call ones: the stack, then at most one globals region.
const FIXED_SLOTS_MAX: usize = 2;
const _: () = assert!(
    FIXED_SLOTS_MAX + XRP_CALL_READ <= MAX_REGIONS
        && FIXED_SLOTS_MAX + XRP_CALL_WRITE <= MAX_REGIONS
        && FIXED_SLOTS_MAX + LAMBDA_CALL_READ <= MAX_REGIONS
        && FIXED_SLOTS_MAX + LAMBDA_CALL_WRITE <= MAX_REGIONS
        && FIXED_SLOTS_MAX + OFFLOAD_CALL_READ <= MAX_REGIONS
        && FIXED_SLOTS_MAX + OFFLOAD_CALL_WRITE <= MAX_REGIONS,
    "every prebuilt env fits in a RegionSet"
);

/// Bytes of a `u64`-backed buffer.
const WORD: usize = 8;

impl Instance {
    /// Prepares a verified program (see [`load_verified`]) for `engine`, with the default
    /// instruction budget ([`DEFAULT_INSN_BUDGET`]; see [`Instance::set_insn_budget`]).
    ///
    /// # Errors
    /// [`Error::Jit`] when the JIT cannot compile the program; there is no silent fallback.
    pub fn new(prog: Arc<VerifiedProgram>, engine: Engine) -> Result<Self, Error> {
        let exec = match engine {
            Engine::Jit => Exec::Jit(JitProgram::compile(&prog)?),
            Engine::Interp => Exec::Interp,
        };
        let globals_len = prog.globals.len();
        let mut globals = vec![0u64; globals_len.div_ceil(WORD)].into_boxed_slice();
        for (w, chunk) in globals.iter_mut().zip(prog.globals.chunks(WORD)) {
            let mut b = [0u8; WORD];
            b[..chunk.len()].copy_from_slice(chunk);
            *w = u64::from_le_bytes(b);
        }
        let jit_min_bytes = if engine == Engine::Jit { prog.xrp_min_bytes() } else { (0, 0) };
        let mut inst = Self {
            prog,
            insn_budget: DEFAULT_INSN_BUDGET,
            jit_min_bytes,
            exec,
            globals,
            globals_len,
            stack: vec![0u64; STACK_BYTES / WORD].into_boxed_slice(),
            stack_top: 0,
            host: Box::default(),
            lambda_ctx: Box::default(),
            env: OwnedEnv(RunEnv {
                read: RegionSet::default(),
                write: RegionSet::default(),
                globals_base: 0,
                insns_left: 0,
                insn_budget: DEFAULT_INSN_BUDGET,
                fault: FaultInfo::default(),
                host: std::ptr::null_mut(),
            }),
            xrp_slots_key: [0; 5],
            xrp_jit_key: [0; 5],
        };
        inst.lay_out_env();
        Ok(inst)
    }

    /// Fills `self.env` once: the program type's per-call slots as [`Region::EMPTY`] until a
    /// run patches them, then the stack and globals regions (their boxes never move).
    fn lay_out_env(&mut self) {
        let env = &mut self.env.0;
        // The per-call slots' names (fixed per slot: `run_*` patch only the addresses).
        use RegionName::{Context, Data, Input, Msg, Out, Output, Scratch};
        const XRP_READ: [RegionName; XRP_CALL_READ] = [Context, Data, Scratch];
        const XRP_WRITE: [RegionName; XRP_CALL_WRITE] = [Context, Context, Scratch];
        const LAMBDA_READ: [RegionName; LAMBDA_CALL_READ] = [Context, Input, Output];
        const LAMBDA_WRITE: [RegionName; LAMBDA_CALL_WRITE] = [Output];
        const OFFLOAD_READ: [RegionName; OFFLOAD_CALL_READ] = [Context, Msg, Out];
        const OFFLOAD_WRITE: [RegionName; OFFLOAD_CALL_WRITE] = [Out];
        let (reads, writes): (&[RegionName], &[RegionName]) = match self.prog.prog_type {
            ProgType::Xrp => (&XRP_READ, &XRP_WRITE),
            ProgType::Lambda => (&LAMBDA_READ, &LAMBDA_WRITE),
            ProgType::Offload => (&OFFLOAD_READ, &OFFLOAD_WRITE),
        };
        for &name in reads {
            env.read.push_named(Region::EMPTY, name);
        }
        for &name in writes {
            env.write.push_named(Region::EMPTY, name);
        }
        let (reads, writes) = (reads.len(), writes.len());
        env.globals_base = self.globals.as_mut_ptr() as u64;
        let stack = self.stack.as_mut_ptr() as u64;
        let stack = Region { start: stack, end: stack + STACK_BYTES as u64 };
        self.stack_top = stack.end;
        env.read.push_named(stack, RegionName::Stack);
        env.write.push_named(stack, RegionName::Stack);
        if self.globals_len > 0 {
            let (g, end) = (env.globals_base, env.globals_base + self.globals_len as u64);
            env.read.push_named(Region { start: g, end }, RegionName::Globals);
            if self.prog.globals_rw_start < self.globals_len {
                let rw = Region { start: g + self.prog.globals_rw_start as u64, end };
                env.write.push_named(rw, RegionName::Globals);
            }
        }
        debug_assert!(env.read.len as usize <= reads + FIXED_SLOTS_MAX);
        debug_assert!(env.write.len as usize <= writes + FIXED_SLOTS_MAX);
    }

    #[must_use]
    pub fn program(&self) -> &Arc<VerifiedProgram> {
        &self.prog
    }

    /// Instructions each invocation may execute before it aborts with
    /// [`VmError::BudgetExhausted`].
    #[must_use]
    pub fn insn_budget(&self) -> u64 {
        self.insn_budget
    }

    /// Sets the per-invocation instruction budget (from the next run on). A chain of `h` hops
    /// executes at most `h * insns` instructions.
    pub fn set_insn_budget(&mut self, insns: u64) {
        self.insn_budget = insns;
        self.env.0.insn_budget = insns;
    }

    /// Instructions the last run charged against its budget (as the budget counts them:
    /// helpers at their cost). A run stopped by [`VmError::BudgetExhausted`] reports what it
    /// had charged before the instruction that would have exceeded the budget.
    #[must_use]
    pub fn insns_used(&self) -> u64 {
        let env = &self.env.0;
        env.insn_budget.saturating_sub(env.insns_left)
    }

    #[must_use]
    pub fn engine(&self) -> Engine {
        match self.exec {
            Exec::Jit(_) => Engine::Jit,
            Exec::Interp => Engine::Interp,
        }
    }

    /// Helper state: the trace log of `bpf_trace_printk`.
    #[must_use]
    pub fn host(&self) -> &HostState {
        &self.host
    }

    pub fn host_mut(&mut self) -> &mut HostState {
        // The unique borrow handed out here ends the validity of the `env.host` pointer the
        // last run derived; `run_xrp`'s in-line path does not derive it again, so a cleared key
        // sends the next call through `run_xrp_slow`, which does.
        self.xrp_jit_key = [0; 5];
        &mut self.host
    }

    /// The instance's current globals image (read-only part first).
    #[must_use]
    pub fn globals(&self) -> Vec<u8> {
        let mut v: Vec<u8> = self.globals.iter().flat_map(|w| w.to_le_bytes()).collect();
        v.truncate(self.globals_len);
        v
    }

    /// Resets the per-invocation scalars of the prebuilt env and runs; the caller has just
    /// overwritten every per-call slot (`run_xrp`'s in-line path does without it: see there).
    /// `interp`: run this call on the interpreter even when the instance has a JIT (the JIT's
    /// proofs need more memory than the call lends; see `run_xrp`).
    #[inline(always)]
    fn exec(&mut self, ctx_addr: u64, insn_budget: u64, interp: bool) -> Result<u64, VmError> {
        let env = &mut self.env.0;
        env.insns_left = insn_budget;
        env.insn_budget = insn_budget;
        // Derived afresh each call (not kept from `new`): `host_mut` may have handed out a
        // unique borrow of the HostState since.
        env.host = std::ptr::from_mut::<HostState>(&mut self.host).cast();
        let stack_top = self.stack_top;
        // SAFETY: `env` (whose fault kind is NONE: see `run_xrp`) was laid out by
        // `lay_out_env` from this instance's own stack and
        // globals boxes (alive and not borrowed while `self` is mutably borrowed here) and the
        // caller of `run_*` patched the per-call slots from slices it lends us exclusively
        // (writable ones as `&mut`) for this call; `env.host` was just derived from our boxed
        // HostState; `stack_top` is the end of the stack region. The JIT runs only when the
        // caller checked its xrp buffers against `xrp_min_bytes` (run_xrp; other types prove
        // nothing about their buffers), which is also what `preloaded_from` reads under.
        unsafe {
            match &self.exec {
                Exec::Jit(j) if !interp => {
                    let pre = j.preloaded_from(ctx_addr);
                    j.run_with_budget(env, ctx_addr, stack_top, insn_budget, pre)
                }
                _ => interp::run(&self.prog, env, ctx_addr, stack_top),
            }
        }
    }

    /// Runs an XRP program on one completed block.
    ///
    /// Sets `ctx.data` / `ctx.scratch` to the slices; the program may read the whole context,
    /// `data`, `scratch`, its stack and globals, and write `done`, `next_addr[]`, `size[]`,
    /// `scratch`, its stack and the writable globals. `data` is read-only. Outputs in `ctx` are
    /// NOT cleared here: call [`XrpCtx::reset_outputs`] first when starting a new step.
    ///
    /// # Panics
    /// If the program is not an xrp program.
    ///
    /// # Errors
    /// The fault that aborted the invocation.
    // Inline (also across crates): the io engine calls this once per completed block, and a
    // call here costs the caller a frame, register saves and a Result through memory. Only the
    // path of a call lending the last call's context and buffers to the JIT is in line (a
    // compare of five words, then the compiled code); the rest is `run_xrp_slow`.
    #[inline(always)]
    pub fn run_xrp(
        &mut self,
        ctx: &mut XrpCtx,
        data: &[u8],
        scratch: &mut [u8],
    ) -> Result<u64, VmError> {
        ctx.data = data.as_ptr() as u64;
        ctx.data_len = data.len() as u64;
        ctx.scratch = scratch.as_mut_ptr() as u64;
        let c = std::ptr::from_mut::<XrpCtx>(ctx) as u64;
        let key = xrp_key(c, data, scratch);
        if !same_key(&key, &self.xrp_jit_key) {
            // The key is rebuilt there, not passed: passing it would make this path spill it.
            return self.run_xrp_slow(ctx, data, scratch);
        }
        // The in-line path tests nothing else: a key equal to `xrp_jit_key` (never all zero
        // here: `c` is a reference's address) was stored by `run_xrp_slow`, and only after its
        // assertion that the program is an xrp program and only when the instance has a JIT
        // (`exec` never changes after `new`).
        let Exec::Jit(j) = &self.exec else {
            // SAFETY: unreachable by the invariant just stated (`xrp_jit_key` is all zero
            // on an interpreting instance, and `key[0]` is not).
            unsafe { std::hint::unreachable_unchecked() }
        };
        // What the compiled code's preloaded loads take instead of reading them: this call's
        // `ctx.scratch` (set above) and scratch's first word (the program's proof of that
        // load made `xrp_min_bytes` at least 8, so the word is there whenever it is used).
        let pre = Preloaded {
            scratch: ctx.scratch,
            word0: scratch.first_chunk::<8>().map_or(0, |w| u64::from_le_bytes(*w)),
        };
        // SAFETY: `xrp_jit_key` equals this call's key, so (its invariant) the per-call slots
        // hold exactly this call's context and buffer regions, lent to us for this call (the
        // writable ones as `&mut`), and the buffers are at least `xrp_min_bytes` long; the
        // program is an xrp program (see above), whose context proofs fit `ctx`; the fixed
        // slots come from our own stack and globals boxes (`lay_out_env`); `env.host` was
        // derived from our boxed HostState by the `exec` that followed storing the key, and no
        // unique borrow of it was handed out since (`host_mut` clears the key, so the next
        // call takes `run_xrp_slow`, which derives it again); `env.insn_budget` is
        // `self.insn_budget` (kept so by `set_insn_budget`; the budget itself goes in a
        // register), `stack_top` is the stack region's end and `env.fault.kind` is NONE (from
        // `new`; the interpreter never sets it and the JIT's every return leaves it so); `pre`
        // holds this call's context's scratch address and first word.
        unsafe { j.run_with_budget(&mut self.env.0, c, self.stack_top, self.insn_budget, pre) }
    }

    /// [`Instance::run_xrp`] when this call's context or buffers are not the last JIT call's,
    /// or the instance interprets: patches the per-call slots (unless the last call's key is
    /// this one's), decides whether the JIT may run on these buffers and remembers the key
    /// for the in-line path when it may.
    #[inline(never)]
    fn run_xrp_slow(
        &mut self,
        ctx: &mut XrpCtx,
        data: &[u8],
        scratch: &mut [u8],
    ) -> Result<u64, VmError> {
        // Not a debug assertion: the verifier's context proofs (proofs.rs) are per program
        // type, so running a program on another type's (smaller) context would let an elided
        // load leave it. Checked here only: the in-line path runs only on a key this path
        // stored after the check passed.
        assert_eq!(self.prog.prog_type, ProgType::Xrp, "run_xrp on a non-xrp program");
        let c = std::ptr::from_mut::<XrpCtx>(ctx) as u64;
        let key = xrp_key(c, data, scratch);
        if !same_key(&key, &self.xrp_slots_key) {
            // The slots change: whatever key the in-line path trusted no longer describes them.
            self.xrp_jit_key = [0; 5];
            let scratch_region = region_or_empty(scratch);
            *self.env.0.read.first_mut::<XRP_CALL_READ>() = [
                Region { start: c, end: c + XRP_CTX_BYTES as u64 },
                region_or_empty(data),
                scratch_region,
            ];
            *self.env.0.write.first_mut::<XRP_CALL_WRITE>() = [
                Region { start: c + XRP_OFF_DONE as u64, end: c + XRP_OFF_SLOT as u64 },
                Region { start: c + XRP_OFF_NEXT_ADDR as u64, end: c + XRP_OFF_SCRATCH as u64 },
                scratch_region,
            ];
            self.xrp_slots_key = key;
        }
        // The JIT's data/scratch proofs hold for buffers at least this long; a call lending
        // less (a short block) runs on the interpreter, which checks every access and stops
        // at the same instruction with the same error.
        let (need_data, need_scratch) = self.jit_min_bytes;
        let short = (data.len() as u64) < need_data || (scratch.len() as u64) < need_scratch;
        if !short && matches!(self.exec, Exec::Jit(_)) {
            // The slots hold `key`'s regions (just patched or already so) and its buffers are
            // long enough: what the in-line path needs to run the JIT on a call of this key.
            self.xrp_jit_key = key;
        }
        self.exec(c, self.insn_budget, short)
    }

    /// Runs a λ program: `buf_i` = `input` (read-only), `buf_o` = `output` (read-write),
    /// `size_i` = `input.len()`; returns r0 (the output bytes, by the λ-IO convention).
    /// The invocation's budget is the instance's plus [`LAMBDA_INSNS_PER_INPUT_BYTE`] per input
    /// byte and [`LAMBDA_INSNS_PER_OUTPUT_BYTE`] per output byte.
    ///
    /// # Panics
    /// If the program is not a λ program.
    ///
    /// # Errors
    /// The fault that aborted the invocation.
    pub fn run_lambda(&mut self, input: &[u8], output: &mut [u8]) -> Result<u64, VmError> {
        // A real check: context proofs are per program type (see run_xrp).
        assert_eq!(self.prog.prog_type, ProgType::Lambda, "run_lambda on a non-λ program");
        *self.lambda_ctx = LambdaCtx {
            buf_o: output.as_mut_ptr() as u64,
            buf_i: input.as_ptr() as u64,
            size_i: input.len() as u64,
        };
        let c = std::ptr::from_ref::<LambdaCtx>(&self.lambda_ctx) as u64;
        *self.env.0.read.first_mut::<LAMBDA_CALL_READ>() = [
            Region { start: c, end: c + LAMBDA_CTX_BYTES as u64 },
            region_or_empty(input),
            region_or_empty(output),
        ];
        *self.env.0.write.first_mut::<LAMBDA_CALL_WRITE>() = [region_or_empty(output)];
        // Budget grows with the input: a λ function runs once over its whole range.
        let extra = LAMBDA_INSNS_PER_INPUT_BYTE
            .saturating_mul(input.len() as u64)
            .saturating_add(LAMBDA_INSNS_PER_OUTPUT_BYTE.saturating_mul(output.len() as u64));
        self.exec(c, self.insn_budget.saturating_add(extra), false)
    }

    /// Runs an `offload` entry point (pred, func, cache or invalidate; crate::offload): sets
    /// `ctx.msg`/`msg_len` to `msg` (read-only) and `ctx.out`/`out_len` to `out` (read-write);
    /// the caller sets `index`, `op`, `file`, `offset`, `io_len`. The context itself is
    /// read-only to the program. Table helpers reach [`HostState::offload_table`]. Returns r0.
    ///
    /// # Panics
    /// If the program is not an offload program.
    ///
    /// # Errors
    /// The fault that aborted the invocation.
    pub fn run_offload(
        &mut self,
        ctx: &mut crate::offload::OffloadCtx,
        msg: &[u8],
        out: &mut [u8],
    ) -> Result<u64, VmError> {
        // A real check: context proofs are per program type (see run_xrp).
        assert_eq!(self.prog.prog_type, ProgType::Offload, "run_offload on a non-offload program");
        ctx.msg = msg.as_ptr() as u64;
        ctx.msg_len = u32::try_from(msg.len()).unwrap_or(u32::MAX);
        ctx.out = out.as_mut_ptr() as u64;
        ctx.out_len = u32::try_from(out.len()).unwrap_or(u32::MAX);
        let c = std::ptr::from_mut(ctx) as u64;
        *self.env.0.read.first_mut::<OFFLOAD_CALL_READ>() = [
            Region { start: c, end: c + crate::offload::OFFLOAD_CTX_BYTES as u64 },
            region_or_empty(msg),
            region_or_empty(out),
        ];
        *self.env.0.write.first_mut::<OFFLOAD_CALL_WRITE>() = [region_or_empty(out)];
        self.exec(c, self.insn_budget, false)
    }
}

/// What the per-call slots of an `xrp` call are a function of: (context address, data
/// address, data length, scratch address, scratch length).
#[inline(always)]
fn xrp_key(ctx_addr: u64, data: &[u8], scratch: &[u8]) -> [u64; 5] {
    let (d, s) = (data.as_ptr() as u64, scratch.as_ptr() as u64);
    [ctx_addr, d, data.len() as u64, s, scratch.len() as u64]
}

/// `a == b`, word by word (an array `==` becomes a `bcmp` call).
#[inline(always)]
fn same_key(a: &[u64; 5], b: &[u64; 5]) -> bool {
    a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3] && a[4] == b[4]
}

/// The region of a caller's buffer; an empty buffer grants nothing (not even its address).
#[inline]
fn region_or_empty(bytes: &[u8]) -> Region {
    if bytes.is_empty() {
        Region::EMPTY
    } else {
        Region::of(bytes)
    }
}
