//! Cranelift JIT: translates a linked [`Program`] to native code with the interpreter's exact
//! semantics (crate::interp is the reference; docs/design/vm.md, "JIT").
//!
//! Shape of the generated code:
//! - every BPF function (insn 0 plus every BPF-to-BPF call target) becomes one Cranelift
//!   function `fn(env, aux, r1, r2, r3, r4, r5, r10) -> r0` (System V); eBPF registers are
//!   Cranelift variables, so they live in machine registers;
//! - every load/store the verifier did not prove in bounds (proofs.rs) is checked against the
//!   invocation's regions. The fast path compares the
//!   address with a cached window of the last region that matched (two variables per access
//!   kind); a miss calls `abi::resolve_region`, which performs the exact contract check of
//!   [`crate::mem`], refreshes the window, or records the fault;
//! - reaching a charge point ([`crate::cfg`]: function entries, loop headers) subtracts its
//!   charge from the instruction budget (a variable, spilled to `RunEnv::insns_left` around
//!   calls) and aborts when it does not fit;
//! - faults are written to `RunEnv::fault` and the function returns; callers check the fault
//!   kind after every call, so nothing unwinds and nothing traps.
//!
//! Files: `abi.rs` (the run-time structures generated code addresses, the signatures and the
//! Rust trampolines it calls), `translate.rs` (eBPF to Cranelift IR: functions, blocks and the
//! budget, ALU, jumps, calls), `unroll.rs` (counted loops as copies of their body),
//! `bytes.rs` (byte loads recomposed into a word, loaded at once), `memcheck.rs` (loads,
//! stores and atomics with their region checks), `slots.rs` (stack slots kept in SSA
//! variables), `blocks.rs` (blocks the quick tier merges), `scratch.rs` (Cranelift's working
//! memory, kept per thread between compiles).

mod abi;
mod blocks;
mod bytes;
mod calls;
mod guard;
mod idioms;
mod inline;
mod memcheck;
mod reduce;
mod rmw;
mod scratch;
mod select;
mod slots;
mod translate;
mod unroll;
mod vector;

use std::cell::Cell;
use std::mem::offset_of;

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{I16, I32, I64, I8};
use cranelift_codegen::ir::{
    AbiParam, Block, BlockArg, FuncRef, InstBuilder, MemFlagsData, SigRef, Signature, Type,
    UserFuncName, Value,
};
use cranelift_codegen::isa::CallConv;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, FuncId, Linkage, Module};

use crate::cfg::Cfg;
use crate::insn::{
    Insn, BPF_ADD, BPF_ALU, BPF_ALU64, BPF_AND, BPF_ARSH, BPF_ATOMIC, BPF_B, BPF_CALL, BPF_DIV,
    BPF_DW, BPF_END, BPF_EXIT, BPF_H, BPF_JA, BPF_JEQ, BPF_JGE, BPF_JGT, BPF_JLE, BPF_JLT, BPF_JMP,
    BPF_JMP32, BPF_JNE, BPF_JSET, BPF_JSGE, BPF_JSGT, BPF_JSLE, BPF_JSLT, BPF_LD, BPF_LDX, BPF_LSH,
    BPF_MEM, BPF_MEMSX, BPF_MOD, BPF_MOV, BPF_MUL, BPF_NEG, BPF_OR, BPF_PSEUDO_CALL, BPF_RSH,
    BPF_ST, BPF_STX, BPF_SUB, BPF_W, BPF_X, BPF_XOR,
};
use crate::mem::{RegionSet, MAX_REGIONS};
use crate::program::{fault, FaultInfo, MAX_CALL_DEPTH, STACK_FRAME_BYTES};
use crate::proofs::Preload;
use crate::xrp::XRP_OFF_SCRATCH;
use crate::{ProgType, Program, RunEnv, VerifiedProgram, VmError};

use abi::{
    bpf_signature, define_check_read_shim, define_resolve_shim, entry_signature, EntryFn, RunAux,
};
use translate::{translate_function, Counts};

pub(crate) use abi::Preloaded;

/// Atomic `imm` values (RFC 9669 §5.3): the ALU op, optionally with FETCH.
const ATOMIC_FETCH: i32 = 0x01;
const ATOMIC_XCHG: i32 = 0xe0 | ATOMIC_FETCH;
const ATOMIC_CMPXCHG: i32 = 0xf0 | ATOMIC_FETCH;
/// `call` with src = 0: a helper by id.
const CALL_HELPER: u8 = 0;
/// eBPF registers r0..r10.
const NUM_REGS: usize = 11;
/// The frame pointer register, read-only to programs.
const FRAME_REG: u8 = 10;
/// Set this environment variable to print the machine code of every compiled function to
/// stderr (a diagnostic for JIT work; off in normal runs).
pub const DISASM_ENV: &str = "STOREFN_JIT_DISASM";
/// Programs of more slots than this compile in Cranelift's quick tier ([`new_module`]): the
/// optimising tier costs several microseconds per slot (measured 4-11 on a loaded machine,
/// most for blocks and run-time checks), tens of milliseconds at `MAX_INSNS`; the quick tier
/// a few times less. Every bench workload is below it (the largest, `straight`, 906 slots).
pub const QUICK_TIER_SLOTS: usize = 1024;
/// Compiled functions start at multiples of 2^this bytes: a 64-byte instruction-cache line
/// ([`new_module`]); Cranelift's own minimum on x86-64 is 1.
const FUNCTION_ALIGN_LOG2: u8 = 6;
/// Widest access: the fast-path window guarantees this many bytes past the address.
const MAX_ACCESS_BYTES: u64 = 8;

/// Why a program could not be compiled. The verifier runs first, so these mean either a
/// verifier gap or a program the JIT does not support; they never panic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JitError {
    #[error("JIT unsupported: {0}")]
    Unsupported(String),
    #[error("insn #{insn}: {reason}")]
    Invalid { insn: usize, reason: String },
    #[error("program has {len} instruction slots; limit is 1..={max}")]
    Size { len: usize, max: usize },
    #[error("JIT host: {0}")]
    Host(String),
    #[error("JIT code generation: {0}")]
    Codegen(String),
}

fn invalid(insn: usize, reason: impl Into<String>) -> JitError {
    JitError::Invalid { insn, reason: reason.into() }
}

/// A compiled program. Dropping it frees its code.
#[derive(Debug)]
pub struct JitProgram {
    code: CodeMemory,
    entry: EntryFn,
    /// Per access site, the index of the region that matched last time (validated on use).
    /// Written by the generated code's slow path; Cell keeps JitProgram !Sync.
    hints: Box<[Cell<u8>]>,
    /// The per-invocation state the generated code shares with its callbacks, kept here so a
    /// call writes only what changes (env, windows, depth); UnsafeCell keeps JitProgram
    /// !Sync, and `run` is never re-entered (the code calls back only into `resolve_region`
    /// and `helper_trampoline`, neither of which runs a program).
    aux: std::cell::UnsafeCell<RunAux>,
    /// [`JitProgram::compiled_functions`].
    compiled_functions: usize,
    /// Which [`Preloaded`] values the entry function takes from its parameters (a caller that
    /// has only the context reads those for it): `ctx.scratch`, and `scratch`'s first word.
    preloads: (bool, bool),
    /// [`JitProgram::out_of_line_loads`].
    out_of_line_loads: usize,
    /// [`JitProgram::promoted_accesses`].
    promoted_accesses: usize,
    /// What the translation emitted, summed over the compiled functions
    /// ([`JitProgram::fused_loads`], [`JitProgram::reduction_loops`], ...).
    counts: Counts,
}

/// Owns the JIT module; frees the executable memory on drop.
struct CodeMemory(Option<JITModule>);

impl std::fmt::Debug for CodeMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CodeMemory")
    }
}

impl Drop for CodeMemory {
    fn drop(&mut self) {
        if let Some(module) = self.0.take() {
            // SAFETY: the only pointers into this module's code are `JitProgram::entry` (dropped
            // with us) and the call graph inside the module itself; no invocation can be running
            // because `run` borrows the JitProgram.
            unsafe { module.free_memory() };
        }
    }
}

// SAFETY: the module is only touched at compile time and on drop; after `compile` returns, the
// JitProgram holds immutable machine code and a function pointer into it. Invocations keep
// their mutable state in the caller's RunEnv and in `aux`, whose pointers (`env`, `hints`) are
// set or owned by the program itself and only dereferenced during a call on the calling
// thread, so moving the program to another thread is sound. (It is not Sync: `run` takes &self
// but callers keep one per thread.)
unsafe impl Send for JitProgram {}

impl JitProgram {
    /// Compiles a verified program. Never panics: an instruction the translator does not know
    /// is reported as [`JitError`] (a verifier gap, not a crash).
    ///
    /// # Errors
    /// An instruction the JIT cannot translate, or a Cranelift failure.
    pub fn compile(verified: &VerifiedProgram) -> Result<Self, JitError> {
        let prog: &Program = verified;
        let cfg = verified.cfg();
        // Only the entry and the functions some compiled code calls without inlining them.
        let plan = inline::Plan::new(verified);
        let in_loop = translate::loop_slots(verified);
        let is_target = translate::jump_targets(verified);
        let out_of_line = memcheck::out_of_line_loads(verified, &in_loop);
        let slot_plan = slots::plan(verified, &in_loop);
        let funcs: Vec<(usize, usize)> = plan.compiled.iter().map(|&f| cfg.func_range(f)).collect();
        let quick = prog.insns.len() > QUICK_TIER_SLOTS;
        let mergeable = blocks::mergeable(verified, quick);
        let mut module = new_module(quick)?;
        let ptr_ty = module.target_config().pointer_type();
        if ptr_ty != I64 {
            return Err(JitError::Host("the JIT needs a 64-bit host".into()));
        }
        let mut code = CodeMemory(None);
        // Region hints, one byte per (instruction, access kind), read and written by
        // `resolve_region` through `aux.hints`.
        let hints: Box<[Cell<u8>]> = (0..prog.insns.len() * 2).map(|_| Cell::new(0)).collect();
        let sig = bpf_signature(&module);
        let entry_sig = entry_signature(&module);
        let sig_of_fn = |start: usize| if start == 0 { &entry_sig } else { &sig };
        let mut ids = Vec::with_capacity(funcs.len());
        // Declaring allocates no code memory, so an early return here leaks nothing; from the
        // first definition on, `code` owns the module and frees it on every path.
        for &(start, _) in &funcs {
            let id = module
                .declare_function(&format!("bpf_fn_{start}"), Linkage::Local, sig_of_fn(start))
                .map_err(|e| JitError::Codegen(e.to_string()))?;
            ids.push((start, id));
        }
        let (mut ctx, mut fctx) = scratch::take(&module);
        let shims = define_resolve_shim(&mut module, &mut ctx, &mut fctx).and_then(|hint| {
            let check = match out_of_line.iter().any(|&o| o) {
                true => Some(define_check_read_shim(&mut module, &mut ctx, &mut fctx, hint)?),
                false => None,
            };
            Ok((hint, check))
        });
        let mut result = shims.as_ref().map(|_| ()).map_err(Clone::clone);
        let shims = shims.unwrap_or((ids[0].1, None));
        let disasm = std::env::var_os(DISASM_ENV).is_some();
        let mut counts = Counts::default();
        for (i, &(start, end)) in funcs.iter().enumerate() {
            if result.is_err() {
                break;
            }
            ctx.func.signature = sig_of_fn(start).clone();
            ctx.func.name = UserFuncName::user(0, ids[i].1.as_u32());
            ctx.set_disasm(disasm);
            let r = translate_function(
                verified,
                quick,
                (&plan.inline_at, &in_loop, &is_target, &out_of_line),
                (&slot_plan, &mergeable),
                (start, end),
                shims,
                &ids,
                &mut module,
                &mut ctx,
                &mut fctx,
            )
            .and_then(|c| {
                counts.add(&c);
                module
                    .define_function(ids[i].1, &mut ctx)
                    .map_err(|e| JitError::Codegen(format!("{e:?}")))
            });
            if disasm {
                if let Some(code) = ctx.compiled_code() {
                    eprintln!("{}", code.vcode.as_deref().unwrap_or(""));
                }
            }
            module.clear_context(&mut ctx);
            if let Err(e) = r {
                result = Err(e);
                break;
            }
        }
        scratch::keep(ctx, fctx, prog.insns.len());
        let finalized = result.and_then(|()| {
            module.finalize_definitions().map_err(|e| JitError::Codegen(e.to_string()))
        });
        let entry_ptr = finalized.as_ref().ok().map(|()| module.get_finalized_function(ids[0].1));
        code.0 = Some(module);
        finalized?;
        let entry_ptr = entry_ptr.expect("finalized module has the entry function");
        // SAFETY: `entry_ptr` is the finalized code of the function declared with
        // `entry_signature`, the System V equivalent of `EntryFn` on this (64-bit) host.
        let entry = unsafe { std::mem::transmute::<*const u8, EntryFn>(entry_ptr) };
        let aux = std::cell::UnsafeCell::new(RunAux {
            env: std::ptr::null_mut(),
            hot_lo: 0,
            hot_span: 0,
            wr_lo: 0,
            wr_span: 0,
            hints: hints.as_ptr(),
            found: 0,
            checked: 0,
            sink: 0,
            depth: 0,
            prog_type: prog.prog_type,
            helper_err: None,
        });
        let out_of_line_loads = out_of_line.iter().filter(|&&o| o).count();
        Ok(Self {
            code,
            entry,
            hints,
            aux,
            compiled_functions: funcs.len(),
            preloads: (
                verified.preloads().contains(&Some(Preload::ScratchAddr)),
                verified.preloads().contains(&Some(Preload::ScratchWord0)),
            ),
            out_of_line_loads,
            promoted_accesses: slot_plan.at.iter().filter(|&&a| a).count(),
            counts,
        })
    }

    /// How many of the program's functions have machine code of their own: the entry and
    /// every function some compiled code calls without inlining it (a diagnostic: inlined
    /// functions cost no compile of their own).
    #[must_use]
    pub fn compiled_functions(&self) -> usize {
        self.compiled_functions
    }

    /// How many of the program's loads are checked out of line (a call per load, a fault
    /// test before the next instruction that is not arithmetic or a load: programs with many
    /// checked loads outside loops; a diagnostic).
    #[must_use]
    pub fn out_of_line_loads(&self) -> usize {
        self.out_of_line_loads
    }

    /// How many recompositions of byte loads into a word (`p[0] << 24 | ... | p[3]`) were
    /// emitted as one wider load (a diagnostic; counted per emitted copy, so an unrolled
    /// loop counts once per copy).
    #[must_use]
    pub fn fused_loads(&self) -> usize {
        self.counts.fused_loads
    }

    /// Loads and stores of stack slots kept in SSA variables (`jit/slots.rs`: every access of
    /// the slot is a plain `r10 + off` access of one size, and r10 escapes nowhere); a
    /// diagnostic, counted per instruction.
    #[must_use]
    pub fn promoted_accesses(&self) -> usize {
        self.promoted_accesses
    }

    /// How many counted loops were emitted as reductions with partial accumulators (a
    /// diagnostic; `reduce.rs`).
    #[must_use]
    pub fn reduction_loops(&self) -> usize {
        self.counts.reductions
    }

    /// How many of those reduction loops run as vector code first (a diagnostic;
    /// `vector.rs`).
    #[must_use]
    pub fn vector_loops(&self) -> usize {
        self.counts.vectors
    }

    /// How many bit-trick idioms (SWAR population counts) were emitted as one instruction
    /// (a diagnostic; `idioms.rs`).
    #[must_use]
    pub fn idioms(&self) -> usize {
        self.counts.idioms
    }

    /// How many bounded loops charged per iteration were emitted behind one budget guard,
    /// with copies whose headers charge without a test (a diagnostic; `guard.rs`).
    #[must_use]
    pub fn guarded_loops(&self) -> usize {
        self.counts.guarded_loops
    }

    /// How many conditional jumps over a short run of register arithmetic were emitted as
    /// conditional moves instead of a branch (a diagnostic; `select.rs::Tx::if_convert`:
    /// counted per emitted copy, so a jump in an unrolled loop counts once per copy).
    #[must_use]
    pub fn if_converted(&self) -> usize {
        self.counts.if_converted
    }

    /// How many load / ALU op / store triples on one address were emitted so that the
    /// backend can fold them into one instruction on memory (a diagnostic; `rmw.rs`).
    #[must_use]
    pub fn rmw_triples(&self) -> usize {
        self.counts.rmw_triples
    }

    /// Runs once. `ctx_addr` goes in r1, r10 = `stack_top` for the entry frame.
    /// `env.insns_left` must hold the budget for this invocation; `env.fault` is reset.
    ///
    /// # Errors
    /// The fault that aborted the invocation.
    ///
    /// # Safety
    /// The contract of [`crate::interp::run`]: `env`'s regions are valid memory for the whole
    /// call (writable ones not borrowed elsewhere), the stack below `stack_top` is inside
    /// them, `env.host` is null or an unborrowed `HostState`; and, if the program uses its
    /// context, `[ctx_addr, ctx_addr + context size of its type)` is inside `env.read` and,
    /// for `xrp`, its `done` and `next_addr[]`+`size[]` fields inside `env.write` (the JIT
    /// accesses the context at offsets the verifier proved without a run-time check); and, for
    /// `xrp`, with `(d, s)` = [`VerifiedProgram::xrp_min_bytes`], the context's `data` field
    /// holds an address whose first `d` bytes are inside `env.read` and its `scratch` field
    /// one whose first `s` bytes are inside both `env.read` and `env.write`, neither field
    /// changing during the call (the proved data and scratch accesses are not checked).
    /// [`crate::Instance`] upholds all of it.
    #[inline]
    pub unsafe fn run(
        &self,
        env: &mut RunEnv,
        ctx_addr: u64,
        stack_top: u64,
    ) -> Result<u64, VmError> {
        // Only `kind` says whether a fault happened; every writer of a fault sets all fields.
        env.fault.kind = fault::NONE;
        // SAFETY: `run`'s contract is what `preloaded_from` needs.
        let pre = unsafe { self.preloaded_from(ctx_addr) };
        // SAFETY: the caller upholds `run`'s contract, which is `run_with_budget`'s with the
        // budget taken from `env.insns_left`, the fault kind just reset and `pre` read from
        // the context and scratch this call runs on.
        unsafe { self.run_with_budget(env, ctx_addr, stack_top, env.insns_left, pre) }
    }

    /// The [`Preloaded`] values of a call on the context at `ctx_addr`, read from it; zero
    /// where the program has no such load ([`Preload`]: only xrp programs have them), and then
    /// nothing is read.
    ///
    /// # Safety
    /// [`JitProgram::run`]'s contract for a call on `ctx_addr`: a program with such loads reads
    /// its context (which is then valid memory holding `scratch`), and a `ScratchWord0` load is
    /// a proved 8-byte scratch access (`scratch` then holds at least 8 bytes).
    pub(crate) unsafe fn preloaded_from(&self, ctx_addr: u64) -> Preloaded {
        let (addr, word0) = self.preloads;
        if !addr && !word0 {
            return Preloaded::default();
        }
        // SAFETY: see the function's contract; the reads do not assume alignment.
        unsafe {
            let at = (ctx_addr + XRP_OFF_SCRATCH as u64) as *const u64;
            let scratch = std::ptr::read_unaligned(at);
            let word0 = if word0 { std::ptr::read_unaligned(scratch as *const u64) } else { 0 };
            Preloaded { scratch, word0 }
        }
    }

    /// [`JitProgram::run`] with the budget `insns` passed in (`env.insns_left` is neither read
    /// nor needs to be set: the entry function takes the budget in a register); on return
    /// `env.insns_left` holds what is left, as after `run`. Leaves `env.fault.kind` at
    /// [`fault::NONE`] on every return (the fault is in the error), so a caller that keeps one
    /// env (`Instance`) stores nothing per call for it.
    ///
    /// # Safety
    /// [`JitProgram::run`]'s contract, `env.fault.kind` is [`fault::NONE`] (the generated
    /// code reads it as "a check failed in this call"), and `pre` holds what
    /// [`JitProgram::preloaded_from`] reads for this call: the context's `scratch` field and,
    /// when the program has a `ScratchWord0` load, the 8 bytes it points to as they are when
    /// the call begins (the generated code takes them instead of reading memory, and accesses
    /// through the scratch address unchecked where the verifier proved them).
    // Always inlined: `Instance::run_xrp` is the per-block hot path; a call here costs it a
    // frame and the register saves around it.
    #[inline(always)]
    pub(crate) unsafe fn run_with_budget(
        &self,
        env: &mut RunEnv,
        ctx_addr: u64,
        stack_top: u64,
        insns: u64,
        pre: Preloaded,
    ) -> Result<u64, VmError> {
        debug_assert!(self.code.0.is_some());
        debug_assert_eq!(env.fault.kind, fault::NONE);
        debug_assert!(!self.hints.is_empty());
        let aux = self.aux.get();
        // SAFETY: no other reference to `aux` exists during this call (JitProgram is !Sync and
        // `run` is not re-entered, see the field). Of what an earlier call may have left
        // behind, only `env` is set here; the generated code trusts nothing else it did not
        // write in this call: the entry function zeroes the windows kept in `aux` (the write
        // window; the read window in the quick tier) when the program has a checked access
        // of that kind (a stale window would grant an earlier call's region), a read window
        // in variables is zeroed at every function start (its `aux` copy is then read only
        // right after `resolve_region` wrote it), and the entry function, at
        // depth 0 by construction (no call targets it: the verifier refuses recursion),
        // stores the depth before each of its calls. `helper_err` is None (taken on every
        // HELPER fault); `hints` and `prog_type` are the program's own.
        unsafe {
            (*aux).env = std::ptr::from_mut(env);
            debug_assert!((*aux).helper_err.is_none());
        }
        // SAFETY: `entry` points at live code (owned by `self.code`) with the `EntryFn` ABI.
        // The generated code dereferences only `env`/`aux` (valid, exclusively used here) at
        // fixed field offsets, and program memory only after a region check against `env`'s
        // region sets or where the verifier proved the access inside memory this function's
        // contract guarantees (the stack frame, the context, xrp's data/scratch views).
        let ret = unsafe { (self.entry)(aux, ctx_addr, stack_top, insns, pre.scratch, pre.word0) };
        env.insns_left = ret.insns_left;
        let r0 = ret.r0;
        if env.fault.kind == fault::NONE {
            return Ok(r0);
        }
        // SAFETY: the call has returned; this is again the only reference to `aux`.
        fault_to_result(env, r0, unsafe { &mut *aux })
    }
}

/// The error of the fault recorded in `env` (if any), which it then clears (the next call's
/// generated code must start from [`fault::NONE`]).
#[cold]
fn fault_to_result(env: &mut RunEnv, r0: u64, aux: &mut RunAux) -> Result<u64, VmError> {
    let (f, budget) = (env.fault, env.insn_budget);
    env.fault.kind = fault::NONE;
    let insn = f.insn as usize;
    match f.kind {
        fault::NONE => Ok(r0),
        fault::BAD_READ => Err(VmError::BadRead { insn, at: env.read.place(f.addr), len: f.len }),
        fault::BAD_WRITE => Err(VmError::BadWrite { insn, at: env.read.place(f.addr), len: f.len }),
        fault::BUDGET => Err(VmError::BudgetExhausted { insn, budget }),
        fault::CALL_DEPTH => Err(VmError::CallDepth { insn, max: MAX_CALL_DEPTH }),
        fault::HELPER => Err(aux.helper_err.take().unwrap_or_else(|| VmError::Helper {
            insn,
            helper: u32::try_from(f.addr).unwrap_or(u32::MAX),
            reason: "failed".into(),
        })),
        other => Err(VmError::Helper {
            insn,
            helper: u32::MAX,
            reason: format!("unknown fault kind {other}"),
        }),
    }
}

/// Cranelift settings for a program: the quick tier (no IR optimisation, the single-pass
/// register allocator) when `quick`, else the optimising tier.
fn new_module(quick: bool) -> Result<JITModule, JitError> {
    let mut flags = settings::builder();
    let set = |f: &mut settings::Builder, k: &str, v: &str| {
        f.set(k, v).map_err(|e| JitError::Host(format!("cranelift flag {k}: {e}")))
    };
    // Cranelift's optimising tier costs several microseconds per slot (its e-graph pass and
    // the backtracking register allocator); past `QUICK_TIER_SLOTS` a program gets the quick
    // tier instead, whose cost per slot is a few times lower, so compiling any program
    // within `MAX_INSNS` stays within a few milliseconds.
    let (opt, regalloc) = if quick { ("none", "single_pass") } else { ("speed", "backtracking") };
    set(&mut flags, "opt_level", opt)?;
    set(&mut flags, "regalloc_algorithm", regalloc)?;
    set(&mut flags, "use_colocated_libcalls", "false")?;
    set(&mut flags, "is_pic", "false")?;
    // Every function starts on a cache line: where a call enters and where its unrolled
    // search's branches fall within lines is then the same on every compile (unaligned, the
    // fixed cost of a call moved by 10% between builds with the same code).
    set(&mut flags, "log2_min_function_alignment", &FUNCTION_ALIGN_LOG2.to_string())?;
    // The IR verifier costs compile time; debug builds keep it as a check on this translator.
    set(&mut flags, "enable_verifier", if cfg!(debug_assertions) { "true" } else { "false" })?;
    let isa = cranelift_native::builder()
        .map_err(|e| JitError::Host(e.to_string()))?
        .finish(settings::Flags::new(flags))
        .map_err(|e| JitError::Host(e.to_string()))?;
    Ok(JITModule::new(JITBuilder::with_isa(isa, default_libcall_names())))
}

/// `pc + delta + 1`, checked to lie in `0..n`.
fn rel_target(pc: usize, delta: i64, n: usize) -> Result<usize, JitError> {
    let t = i64::try_from(pc).unwrap_or(i64::MAX).saturating_add(delta).saturating_add(1);
    usize::try_from(t)
        .ok()
        .filter(|&t| t < n)
        .ok_or_else(|| invalid(pc, format!("jump/call target {t} outside the program")))
}

/// Where a conditional or unconditional jump at `pc` goes, if it is one.
fn jump_target(pc: usize, insn: &Insn, n: usize) -> Result<Option<usize>, JitError> {
    let class = insn.class();
    if class != BPF_JMP && class != BPF_JMP32 {
        return Ok(None);
    }
    match insn.op & 0xf0 {
        BPF_CALL | BPF_EXIT => Ok(None),
        BPF_JA if class == BPF_JMP32 => rel_target(pc, i64::from(insn.imm), n).map(Some),
        _ => rel_target(pc, i64::from(insn.off), n).map(Some),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Place;

    fn assert_send<T: Send>() {}

    #[test]
    fn jit_program_is_send() {
        assert_send::<JitProgram>();
    }

    #[test]
    fn fault_kinds_map_to_errors() {
        let mut aux = RunAux {
            env: std::ptr::null_mut(),
            hot_lo: 0,
            hot_span: 0,
            wr_lo: 0,
            wr_span: 0,
            hints: std::ptr::null(),
            found: 0,
            checked: 0,
            sink: 0,
            depth: 0,
            prog_type: ProgType::Xrp,
            helper_err: None,
        };
        let mut env = RunEnv {
            read: RegionSet::default(),
            write: RegionSet::default(),
            globals_base: 0,
            insns_left: 0,
            insn_budget: 5,
            fault: FaultInfo::default(),
            host: std::ptr::null_mut(),
        };
        let mut f = |kind| {
            env.fault = FaultInfo { kind, insn: 3, addr: 0x10, len: 4 };
            let r = fault_to_result(&mut env, 9, &mut aux);
            assert_eq!(env.fault.kind, fault::NONE, "a reported fault is cleared");
            r
        };
        assert_eq!(f(fault::NONE), Ok(9));
        assert_eq!(
            f(fault::BAD_READ),
            Err(VmError::BadRead { insn: 3, at: Place::Low(0x10), len: 4 })
        );
        assert_eq!(f(fault::BUDGET), Err(VmError::BudgetExhausted { insn: 3, budget: 5 }));
        assert!(matches!(f(99), Err(VmError::Helper { insn: 3, .. })));
    }

    #[test]
    fn compiling_and_dropping_many_programs_frees_code() {
        // Each JitProgram owns its code pages; 2000 compile/drop cycles must not exhaust memory.
        let prog = Program {
            name: "t".into(),
            prog_type: ProgType::Xrp,
            insns: vec![
                Insn { op: BPF_ALU64 | BPF_MOV, dst: 0, src: 0, off: 0, imm: 1 },
                Insn { op: BPF_JMP | BPF_EXIT, ..Insn::default() },
            ],
            globals: Vec::new(),
            globals_rw_start: 0,
            global_relocs: Vec::new(),
        };
        let prog = VerifiedProgram::new(prog).unwrap();
        for _ in 0..2000 {
            let jit = JitProgram::compile(&prog).unwrap();
            drop(jit);
        }
    }
}
