//! Cranelift JIT: translates a linked [`Program`] to native code with the interpreter's exact
//! semantics (crate::interp is the reference; docs/DESIGN.md, "JIT").
//!
//! Shape of the generated code:
//! - every BPF function (insn 0 plus every BPF-to-BPF call target) becomes one Cranelift
//!   function `fn(env, aux, r1, r2, r3, r4, r5, r10) -> r0` (System V); eBPF registers are
//!   Cranelift variables, so they live in machine registers;
//! - every load/store is checked against the invocation's regions. The fast path compares the
//!   address with a cached window of the last region that matched (two variables per access
//!   kind); a miss calls [`resolve_region`], which performs the exact contract check of
//!   [`crate::mem`], refreshes the window, or records the fault;
//! - entering a basic block ([`crate::cfg`]) subtracts its length from the instruction budget
//!   (a variable, spilled to `RunEnv::insns_left` around calls) and aborts when it does not fit;
//! - faults are written to `RunEnv::fault` and the function returns; callers check the fault
//!   kind after every call, so nothing unwinds and nothing traps.

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
use crate::mem::{Region, RegionSet, MAX_REGIONS};
use crate::program::{fault, FaultInfo, MAX_CALL_DEPTH, STACK_FRAME_BYTES};
use crate::{ProgType, Program, RunEnv, VerifiedProgram, VmError};

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

/// Per-invocation state the generated code shares with its Rust callbacks. Lives on `run`'s
/// stack: nothing is allocated per invocation unless a helper fails.
#[repr(C)]
#[derive(Debug)]
struct RunAux {
    /// The invocation's environment. Generated code reaches `RunEnv` only through here (on
    /// slow paths), which keeps one register free in loops.
    env: *mut RunEnv,
    /// Read window refreshed by [`resolve_region`]: region start and `size - 7` (saturating).
    hot_lo: u64,
    hot_span: u64,
    /// Write window: kept in memory (not variables) to save registers; same meaning.
    wr_lo: u64,
    wr_span: u64,
    /// The program's hint table (`JitProgram::hints`).
    hints: *const Cell<u8>,
    /// [`resolve_region`]'s answer, stored by the preserve-all shim (which returns nothing).
    found: u64,
    /// Frames currently live below the entry frame (0 in the entry function).
    depth: u64,
    prog_type: ProgType,
    /// The helper's error when `fault.kind == HELPER` (VmError carries a message).
    helper_err: Option<VmError>,
}

/// Signature of every compiled BPF function, callable from Rust.
type CompiledFn = unsafe extern "C" fn(*mut RunAux, u64, u64, u64, u64, u64, u64) -> u64;

/// A compiled program. Dropping it frees its code.
#[derive(Debug)]
pub struct JitProgram {
    code: CodeMemory,
    entry: CompiledFn,
    /// Per access site, the index of the region that matched last time (validated on use).
    /// Written by the generated code's slow path; Cell keeps JitProgram !Sync.
    hints: Box<[Cell<u8>]>,
    prog_type: ProgType,
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
// JitProgram holds immutable machine code and a function pointer into it. Invocations keep all
// mutable state in the caller's RunEnv and a stack-local RunAux, so moving the program to another
// thread is sound. (It is not Sync-shared: `run` takes &self but callers keep one per thread.)
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
        let funcs: Vec<(usize, usize)> =
            (0..cfg.functions().len()).map(|f| cfg.func_range(f)).collect();
        let mut module = new_module()?;
        let ptr_ty = module.target_config().pointer_type();
        if ptr_ty != I64 {
            return Err(JitError::Host("the JIT needs a 64-bit host".into()));
        }
        let mut code = CodeMemory(None);
        // Region hints, one byte per (instruction, access kind); the code addresses them
        // directly, `resolve_region` through `aux.hints`.
        let hints: Box<[Cell<u8>]> = (0..prog.insns.len() * 2).map(|_| Cell::new(0)).collect();
        // Baked into the code as an immediate: the boxed table never moves and lives as long
        // as the code (both owned by the JitProgram), and the hint load needs no `aux` load.
        let hints_addr = hints.as_ptr() as u64;
        let sig = bpf_signature(&module);
        let mut ids = Vec::with_capacity(funcs.len());
        // Declaring allocates no code memory, so an early return here leaks nothing; from the
        // first definition on, `code` owns the module and frees it on every path.
        for &(start, _) in &funcs {
            let id = module
                .declare_function(&format!("bpf_fn_{start}"), Linkage::Local, &sig)
                .map_err(|e| JitError::Codegen(e.to_string()))?;
            ids.push((start, id));
        }
        let mut ctx = module.make_context();
        let mut fctx = FunctionBuilderContext::new();
        let shim = define_resolve_shim(&mut module, &mut ctx, &mut fctx);
        let mut result = shim.as_ref().map(|_| ()).map_err(Clone::clone);
        let shim = shim.unwrap_or(ids[0].1);
        for (i, &(start, end)) in funcs.iter().enumerate() {
            if result.is_err() {
                break;
            }
            ctx.func.signature = sig.clone();
            ctx.func.name = UserFuncName::user(0, ids[i].1.as_u32());
            let disasm = std::env::var_os(DISASM_ENV).is_some();
            ctx.set_disasm(disasm);
            let r = translate_function(
                prog,
                cfg,
                (start, end),
                shim,
                hints_addr,
                &ids,
                &mut module,
                &mut ctx,
                &mut fctx,
            )
            .and_then(|()| {
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
        let finalized = result.and_then(|()| {
            module.finalize_definitions().map_err(|e| JitError::Codegen(e.to_string()))
        });
        let entry_ptr = finalized.as_ref().ok().map(|()| module.get_finalized_function(ids[0].1));
        code.0 = Some(module);
        finalized?;
        let entry_ptr = entry_ptr.expect("finalized module has the entry function");
        // SAFETY: `entry_ptr` is the finalized code of a function declared with `bpf_signature`,
        // which is the System V equivalent of `CompiledFn` on this (64-bit) host.
        let entry = unsafe { std::mem::transmute::<*const u8, CompiledFn>(entry_ptr) };
        Ok(Self { code, entry, hints, prog_type: prog.prog_type })
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
    /// them, `env.host` is null or an unborrowed `HostState`. [`crate::Instance`] upholds it.
    #[inline]
    pub unsafe fn run(
        &self,
        env: &mut RunEnv,
        ctx_addr: u64,
        stack_top: u64,
    ) -> Result<u64, VmError> {
        debug_assert!(self.code.0.is_some());
        env.fault = FaultInfo::default();
        debug_assert!(!self.hints.is_empty());
        let mut aux = RunAux {
            env: std::ptr::from_mut(env),
            hot_lo: 0,
            hot_span: 0,
            wr_lo: 0,
            wr_span: 0,
            hints: self.hints.as_ptr(),
            found: 0,
            depth: 0,
            prog_type: self.prog_type,
            helper_err: None,
        };
        // SAFETY: `entry` points at live code (owned by `self.code`) with the `CompiledFn` ABI.
        // The generated code dereferences only `env`/`aux` (valid, exclusively borrowed here) at
        // fixed field offsets, and program memory only after a region check against `env`'s
        // region sets, whose validity is the caller's contract for RunEnv.
        let r0 = unsafe { (self.entry)(&raw mut aux, ctx_addr, 0, 0, 0, 0, stack_top) };
        if env.fault.kind == fault::NONE {
            return Ok(r0);
        }
        fault_to_result(env.fault, r0, &mut aux, env.insn_budget)
    }
}

#[cold]
fn fault_to_result(f: FaultInfo, r0: u64, aux: &mut RunAux, budget: u64) -> Result<u64, VmError> {
    let insn = f.insn as usize;
    match f.kind {
        fault::NONE => Ok(r0),
        fault::BAD_READ => Err(VmError::BadRead { insn, addr: f.addr, len: f.len }),
        fault::BAD_WRITE => Err(VmError::BadWrite { insn, addr: f.addr, len: f.len }),
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

fn new_module() -> Result<JITModule, JitError> {
    let mut flags = settings::builder();
    let set = |f: &mut settings::Builder, k: &str, v: &str| {
        f.set(k, v).map_err(|e| JitError::Host(format!("cranelift flag {k}: {e}")))
    };
    set(&mut flags, "opt_level", "speed")?;
    set(&mut flags, "use_colocated_libcalls", "false")?;
    set(&mut flags, "is_pic", "false")?;
    // The IR verifier costs compile time; debug builds keep it as a check on this translator.
    set(&mut flags, "enable_verifier", if cfg!(debug_assertions) { "true" } else { "false" })?;
    let isa = cranelift_native::builder()
        .map_err(|e| JitError::Host(e.to_string()))?
        .finish(settings::Flags::new(flags))
        .map_err(|e| JitError::Host(e.to_string()))?;
    Ok(JITModule::new(JITBuilder::with_isa(isa, default_libcall_names())))
}

fn bpf_signature(module: &JITModule) -> Signature {
    let mut sig = module.make_signature();
    // aux, r1..r5, r10
    for _ in 0..7 {
        sig.params.push(AbiParam::new(I64));
    }
    sig.returns.push(AbiParam::new(I64));
    sig
}

/// Defines `fn(aux, addr, site)` with the preserve-all convention: it calls [`resolve_region`]
/// (System V) and stores its answer in `aux.found`. Call sites in hot code then clobber no
/// register, so a rarely taken slow path does not force the loop around it to spill.
fn define_resolve_shim(
    module: &mut JITModule,
    ctx: &mut cranelift_codegen::Context,
    fctx: &mut FunctionBuilderContext,
) -> Result<FuncId, JitError> {
    let mut sig = module.make_signature();
    sig.call_conv = CallConv::PreserveAll;
    for _ in 0..3 {
        sig.params.push(AbiParam::new(I64));
    }
    let id = module
        .declare_function("storefn_resolve_shim", Linkage::Local, &sig)
        .map_err(|e| JitError::Codegen(e.to_string()))?;
    ctx.func.signature = sig;
    ctx.func.name = UserFuncName::user(0, id.as_u32());
    let rsig = ctx.func.import_signature(sig_of(module, 3));
    let mut b = FunctionBuilder::new(&mut ctx.func, fctx);
    let blk = b.create_block();
    b.append_block_params_for_function_params(blk);
    b.switch_to_block(blk);
    let p = b.block_params(blk).to_vec();
    let f = b.ins().iconst(I64, resolve_region as *const () as usize as i64);
    let call = b.ins().call_indirect(rsig, f, &p);
    let r = b.inst_results(call)[0];
    b.ins().store(MemFlagsData::trusted(), r, p[0], OFF_AUX_FOUND);
    b.ins().return_(&[]);
    b.seal_all_blocks();
    b.finalize(module.target_config());
    let r = module.define_function(id, ctx).map_err(|e| JitError::Codegen(format!("{e:?}")));
    module.clear_context(ctx);
    r.map(|()| id)
}

fn sig_of(module: &JITModule, params: usize) -> Signature {
    let mut sig = module.make_signature();
    for _ in 0..params {
        sig.params.push(AbiParam::new(I64));
    }
    sig.returns.push(AbiParam::new(I64));
    sig
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

const fn env_off(field: usize) -> i32 {
    assert!(field < i32::MAX as usize);
    #[allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap)]
    {
        field as i32
    }
}

const OFF_INSNS_LEFT: i32 = env_off(offset_of!(RunEnv, insns_left));
const OFF_GLOBALS: i32 = env_off(offset_of!(RunEnv, globals_base));
const OFF_FAULT_KIND: i32 = env_off(offset_of!(RunEnv, fault) + offset_of!(FaultInfo, kind));
const OFF_FAULT_INSN: i32 = env_off(offset_of!(RunEnv, fault) + offset_of!(FaultInfo, insn));
const OFF_FAULT_ADDR: i32 = env_off(offset_of!(RunEnv, fault) + offset_of!(FaultInfo, addr));
const OFF_FAULT_LEN: i32 = env_off(offset_of!(RunEnv, fault) + offset_of!(FaultInfo, len));
const OFF_READ_REGIONS: i32 = env_off(offset_of!(RunEnv, read) + offset_of!(RegionSet, regions));
const OFF_WRITE_REGIONS: i32 = env_off(offset_of!(RunEnv, write) + offset_of!(RegionSet, regions));
const OFF_READ_LEN: i32 = env_off(offset_of!(RunEnv, read) + offset_of!(RegionSet, len));
const OFF_WRITE_LEN: i32 = env_off(offset_of!(RunEnv, write) + offset_of!(RegionSet, len));
const _: () = assert!(std::mem::size_of::<Region>() == 16, "hint path scales the index by 16");
const OFF_AUX_ENV: i32 = env_off(offset_of!(RunAux, env));
const OFF_AUX_FOUND: i32 = env_off(offset_of!(RunAux, found));
const OFF_AUX_WR_LO: i32 = env_off(offset_of!(RunAux, wr_lo));
const OFF_AUX_WR_SPAN: i32 = env_off(offset_of!(RunAux, wr_span));
const OFF_AUX_LO: i32 = env_off(offset_of!(RunAux, hot_lo));
const OFF_AUX_SPAN: i32 = env_off(offset_of!(RunAux, hot_span));
const OFF_AUX_DEPTH: i32 = env_off(offset_of!(RunAux, depth));

/// Which region set an access is checked against; the value is also the fault kind.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    Write,
}

/// Exact region check when both the window and the site's hint missed (the contract of
/// crate::mem). On success stores the matching region's index in the site's hint, refreshes
/// `aux`'s window and returns 1; otherwise records the fault and returns 0.
/// `site` = instruction index << 8 | is_write << 4 | access bytes. Reached from generated code
/// through the preserve-all shim (see `define_resolve_shim`).
extern "C" fn resolve_region(aux: *mut RunAux, addr: u64, site: u64) -> u64 {
    // SAFETY: the generated code passes the `aux` pointer `run` gave it; it and the `env` it
    // points to are valid and not otherwise borrowed while generated code runs.
    let aux = unsafe { &mut *aux };
    // SAFETY: as above.
    let env = unsafe { &mut *aux.env };
    let pc = site >> 8;
    let len = site & 0xf;
    let write = site & 0x10 != 0;
    let set: &RegionSet = if write { &env.write } else { &env.read };
    // A corrupt `len` must not make us index out of bounds (that would abort the process).
    let count = usize::try_from(set.len).unwrap_or(MAX_REGIONS).min(MAX_REGIONS);
    if let Some((i, r)) =
        set.regions[..count].iter().enumerate().find(|(_, r)| r.contains(addr, len))
    {
        let span = (r.end - r.start).saturating_sub(MAX_ACCESS_BYTES - 1);
        if write {
            (aux.wr_lo, aux.wr_span) = (r.start, span);
        } else {
            (aux.hot_lo, aux.hot_span) = (r.start, span);
        }
        let slot = usize::try_from(pc * 2).unwrap_or(0) + usize::from(write);
        // SAFETY: `aux.hints` is the owning JitProgram's hint table (alive: `run` borrows it),
        // which has 2 entries per instruction and `pc` is an instruction index of the program;
        // the table is only accessed from the thread running this invocation.
        unsafe { (*aux.hints.add(slot)).set(u8::try_from(i).unwrap_or(0)) };
        return 1;
    }
    env.fault = FaultInfo {
        kind: if write { fault::BAD_WRITE } else { fault::BAD_READ },
        insn: u32::try_from(pc).unwrap_or(u32::MAX),
        addr,
        len,
    };
    0
}

/// Helper call from generated code: forwards to the helper table; on error stores the error in
/// `aux`, records a HELPER fault and returns 0 (the generated code then returns).
#[allow(clippy::too_many_arguments)]
extern "C" fn helper_trampoline(
    aux: *mut RunAux,
    id: u64,
    a1: u64,
    a2: u64,
    a3: u64,
    a4: u64,
    a5: u64,
    insn: u64,
) -> u64 {
    // SAFETY: as in `resolve_region`: the pointer `run` passed down, valid and unaliased.
    let aux = unsafe { &mut *aux };
    // SAFETY: as above.
    let env = unsafe { &mut *aux.env };
    let id = u32::try_from(id).unwrap_or(u32::MAX);
    let insn_idx = usize::try_from(insn).unwrap_or(usize::MAX);
    // A panic must not unwind into JIT frames (that would abort the process): turn it into an
    // error naming the helper.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: `env` is the invocation's environment, valid by `JitProgram::run`'s contract.
        unsafe { crate::helpers::call(env, aux.prog_type, id, [a1, a2, a3, a4, a5], insn_idx) }
    }));
    let err = match r {
        Ok(Ok(v)) => return v,
        Ok(Err(e)) => e,
        Err(_) => VmError::Helper { insn: insn_idx, helper: id, reason: "helper panicked".into() },
    };
    aux.helper_err = Some(err);
    env.fault = FaultInfo {
        kind: fault::HELPER,
        insn: u32::try_from(insn).unwrap_or(u32::MAX),
        addr: u64::from(id),
        len: 0,
    };
    0
}

/// Translation state for one BPF function.
struct Tx<'a, 'f> {
    b: FunctionBuilder<'f>,
    insns: &'a [Insn],
    prog: &'a Program,
    /// Instructions charged on entering the block at each slot (0: no block starts there).
    block_len: &'a [u32],
    regs: [Variable; NUM_REGS],
    /// Fast-path windows: (lo, span) for reads and for writes.
    win_read: (Variable, Variable),
    /// `env.insns_left`, kept in a register between calls and returns.
    budget: Variable,
    aux: Value,
    /// Block starting at each instruction index that is a jump target (or follows a branch).
    block_at: Vec<Option<Block>>,
    /// Shared exit path after a callee or helper recorded a fault: return 0.
    exit_block: Block,
    /// Shared fault path: params (kind, insn, addr, len) stored into env.fault, then return 0.
    fault_block: Block,
    /// The preserve-all shim in front of [`resolve_region`].
    resolve_shim: FuncRef,
    helper_sig: SigRef,
    /// (function start, FuncRef) for every BPF function.
    callees: Vec<(usize, FuncRef)>,
    func_range: (usize, usize),
    /// Address of the program's hint table (`JitProgram::hints`), a code immediate.
    hints_addr: u64,
}

#[allow(clippy::too_many_arguments)]
fn translate_function(
    prog: &Program,
    cfg: &Cfg,
    (start, end): (usize, usize),
    shim: FuncId,
    hints_addr: u64,
    ids: &[(usize, FuncId)],
    module: &mut JITModule,
    ctx: &mut cranelift_codegen::Context,
    fctx: &mut FunctionBuilderContext,
) -> Result<(), JitError> {
    let insns = &prog.insns[..];
    // One Cranelift block per basic block (the verifier checked every jump lands on one).
    let needs_callee =
        (start..end).any(|pc| !cfg.is_second_half(pc) && crate::cfg::is_pseudo_call(insns[pc]));
    let callees: Vec<(usize, FuncRef)> = if needs_callee {
        ids.iter().map(|&(s, id)| (s, module.declare_func_in_func(id, &mut ctx.func))).collect()
    } else {
        Vec::new()
    };
    let resolve_shim = module.declare_func_in_func(shim, &mut ctx.func);
    let helper_sig = ctx.func.import_signature(sig_of(module, 8));

    let mut b = FunctionBuilder::new(&mut ctx.func, fctx);
    let regs: [Variable; NUM_REGS] = std::array::from_fn(|_| b.declare_var(I64));
    let win_read = (b.declare_var(I64), b.declare_var(I64));
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let params = b.block_params(entry).to_vec();
    let aux = params[0];
    let zero = b.ins().iconst(I64, 0);
    b.def_var(regs[0], zero);
    for r in 1..=5 {
        b.def_var(regs[r], params[r]);
    }
    for r in &regs[6..10] {
        b.def_var(*r, zero);
    }
    b.def_var(regs[10], params[6]);
    for v in [win_read.0, win_read.1] {
        b.def_var(v, zero);
    }
    let budget = b.declare_var(I64);
    let env = b.ins().load(I64, MemFlagsData::trusted(), aux, OFF_AUX_ENV);
    let left = b.ins().load(I64, MemFlagsData::trusted(), env, OFF_INSNS_LEFT);
    b.def_var(budget, left);
    let block_at: Vec<Option<Block>> = (0..insns.len())
        .map(|pc| {
            let here = (start..end).contains(&pc) && cfg.is_block_start(pc);
            here.then(|| b.create_block())
        })
        .collect();
    let exit_block = b.create_block();
    b.set_cold_block(exit_block);
    let fault_block = b.create_block();
    b.set_cold_block(fault_block);
    for _ in 0..4 {
        b.append_block_param(fault_block, I64);
    }
    let first = block_at[start].expect("start is a target");
    b.ins().jump(first, &[]);

    let mut tx = Tx {
        b,
        insns,
        prog,
        block_len: cfg.block_lens(),
        regs,
        win_read,
        budget,
        aux,
        block_at,
        exit_block,
        fault_block,
        resolve_shim,
        helper_sig,
        callees,
        func_range: (start, end),
        hints_addr,
    };
    tx.body()?;
    tx.finish_shared_blocks();
    tx.b.seal_all_blocks();
    tx.b.finalize(module.target_config());
    Ok(())
}

/// Whether control continues to the next instruction.
#[derive(PartialEq, Eq)]
enum Flow {
    Next,
    Stop,
}

impl Tx<'_, '_> {
    fn body(&mut self) -> Result<(), JitError> {
        let (start, end) = self.func_range;
        let mut pc = start;
        let mut open = false; // is there a current, unterminated block?
        while pc < end {
            if let Some(blk) = self.block_at[pc] {
                if open {
                    self.b.ins().jump(blk, &[]);
                }
                self.b.switch_to_block(blk);
                open = true;
            }
            let width = if self.insns[pc].is_lddw() { 2 } else { 1 };
            if open {
                if self.block_len[pc] != 0 {
                    self.charge(pc, self.block_len[pc]);
                }
                open = self.insn(pc)? == Flow::Next;
                if open && pc + width >= end {
                    return Err(invalid(pc, "falls through past the end of its function"));
                }
            }
            // else: unreachable code (no jump lands here); nothing to emit.
            pc += width;
        }
        Ok(())
    }

    fn finish_shared_blocks(&mut self) {
        self.b.switch_to_block(self.exit_block);
        self.spill_budget();
        let zero = self.b.ins().iconst(I64, 0);
        self.b.ins().return_(&[zero]);

        self.b.switch_to_block(self.fault_block);
        let p = self.b.block_params(self.fault_block).to_vec();
        let env = self.env();
        let f = MemFlagsData::trusted();
        let kind = self.b.ins().ireduce(I32, p[0]);
        let insn = self.b.ins().ireduce(I32, p[1]);
        self.b.ins().store(f, kind, env, OFF_FAULT_KIND);
        self.b.ins().store(f, insn, env, OFF_FAULT_INSN);
        self.b.ins().store(f, p[2], env, OFF_FAULT_ADDR);
        self.b.ins().store(f, p[3], env, OFF_FAULT_LEN);
        self.spill_budget();
        let zero = self.b.ins().iconst(I64, 0);
        self.b.ins().return_(&[zero]);
    }

    /// A block laid out away from the hot code (region-check slow paths).
    fn cold_block(&mut self) -> Block {
        let blk = self.b.create_block();
        self.b.set_cold_block(blk);
        blk
    }

    /// `aux.env`, loaded where needed (slow paths) instead of occupying a register.
    fn env(&mut self) -> Value {
        self.b.ins().load(I64, MemFlagsData::trusted(), self.aux, OFF_AUX_ENV)
    }

    fn reg(&mut self, pc: usize, r: u8) -> Result<Value, JitError> {
        if usize::from(r) >= NUM_REGS {
            return Err(invalid(pc, format!("register r{r} does not exist")));
        }
        Ok(self.b.use_var(self.regs[usize::from(r)]))
    }

    fn set_reg(&mut self, pc: usize, r: u8, v: Value) -> Result<(), JitError> {
        if r >= FRAME_REG {
            return Err(invalid(pc, format!("r{r} is not writable")));
        }
        self.b.def_var(self.regs[usize::from(r)], v);
        Ok(())
    }

    fn iconst(&mut self, v: i64) -> Value {
        self.b.ins().iconst(I64, v)
    }

    /// Jumps to the shared fault block with constant kind/insn and the given addr/len.
    fn jump_fault(&mut self, kind: u32, pc: usize, addr: Value, len: Value) {
        let k = self.iconst(i64::from(kind));
        let i = self.iconst(i64::try_from(pc).unwrap_or(i64::MAX));
        let args = [BlockArg::Value(k), BlockArg::Value(i), addr.into(), len.into()];
        self.b.ins().jump(self.fault_block, &args);
    }

    fn insn(&mut self, pc: usize) -> Result<Flow, JitError> {
        let insn = self.insns[pc];
        match insn.class() {
            BPF_ALU | BPF_ALU64 => self.alu(pc, insn).map(|()| Flow::Next),
            BPF_JMP | BPF_JMP32 => self.jmp(pc, insn),
            BPF_LD => self.lddw(pc, insn).map(|()| Flow::Next),
            BPF_LDX => self.ldx(pc, insn).map(|()| Flow::Next),
            BPF_ST | BPF_STX => self.store(pc, insn).map(|()| Flow::Next),
            _ => unreachable!("3-bit class"),
        }
    }

    // ---- ALU ----------------------------------------------------------------------------

    fn alu(&mut self, pc: usize, insn: Insn) -> Result<(), JitError> {
        let is64 = insn.class() == BPF_ALU64;
        let op = insn.op & 0xf0;
        let use_x = insn.op & BPF_X != 0;
        if op == BPF_END {
            return self.endian(pc, insn, is64);
        }
        let ty = if is64 { I64 } else { I32 };
        let dst64 = self.reg(pc, insn.dst)?;
        let dst = if is64 { dst64 } else { self.b.ins().ireduce(I32, dst64) };
        let src = if use_x {
            let s = self.reg(pc, insn.src)?;
            if is64 {
                s
            } else {
                self.b.ins().ireduce(I32, s)
            }
        } else if is64 {
            self.iconst(i64::from(insn.imm))
        } else {
            self.b.ins().iconst(I32, i64::from(insn.imm.cast_unsigned()))
        };
        let signed = match (op, insn.off) {
            (BPF_DIV | BPF_MOD, 1) => true,
            (BPF_MOV, 8 | 16) if use_x => true,
            (BPF_MOV, 32) if use_x && is64 => true,
            (_, 0) => false,
            _ => return Err(invalid(pc, format!("bad offset {} for ALU op {op:#x}", insn.off))),
        };
        let ins = self.b.ins();
        let r = match op {
            BPF_ADD => ins.iadd(dst, src),
            BPF_SUB => ins.isub(dst, src),
            BPF_MUL => ins.imul(dst, src),
            BPF_OR => ins.bor(dst, src),
            BPF_AND => ins.band(dst, src),
            BPF_XOR => ins.bxor(dst, src),
            // Cranelift shifts take the amount modulo the type width, as eBPF requires.
            BPF_LSH => ins.ishl(dst, src),
            BPF_RSH => ins.ushr(dst, src),
            BPF_ARSH => ins.sshr(dst, src),
            BPF_NEG => ins.ineg(dst),
            BPF_MOV if signed => {
                let narrow = match insn.off {
                    8 => I8,
                    16 => I16,
                    _ => I32,
                };
                let t = ins.ireduce(narrow, src);
                self.b.ins().sextend(ty, t)
            }
            BPF_MOV => src,
            BPF_DIV | BPF_MOD => self.divmod(ty, op == BPF_MOD, signed, dst, src, use_x, insn.imm),
            _ => return Err(invalid(pc, format!("unknown ALU op {:#04x}", insn.op))),
        };
        let r = if is64 { r } else { self.b.ins().uextend(I64, r) };
        self.set_reg(pc, insn.dst, r)
    }

    /// eBPF division: x/0 = 0, x%0 = x, INT_MIN/-1 = INT_MIN, INT_MIN%-1 = 0; never traps.
    #[allow(clippy::too_many_arguments)]
    fn divmod(
        &mut self,
        ty: Type,
        is_mod: bool,
        signed: bool,
        x: Value,
        d: Value,
        use_x: bool,
        imm: i32,
    ) -> Value {
        if !use_x {
            // Constant divisor: the special cases are decided now.
            return match (imm, is_mod, signed) {
                (0, false, _) => self.b.ins().iconst(ty, 0),
                (0, true, _) => x,
                (-1, false, true) => self.b.ins().ineg(x),
                (-1, true, true) => self.b.ins().iconst(ty, 0),
                (_, false, false) => self.b.ins().udiv(x, d),
                (_, true, false) => self.b.ins().urem(x, d),
                (_, false, true) => self.b.ins().sdiv(x, d),
                (_, true, true) => self.b.ins().srem(x, d),
            };
        }
        let one = self.b.ins().iconst(ty, 1);
        let zero = self.b.ins().iconst(ty, 0);
        let is_zero = self.b.ins().icmp(IntCC::Equal, d, zero);
        if !signed {
            let safe = self.b.ins().select(is_zero, one, d);
            return if is_mod {
                let r = self.b.ins().urem(x, safe);
                self.b.ins().select(is_zero, x, r)
            } else {
                let q = self.b.ins().udiv(x, safe);
                self.b.ins().select(is_zero, zero, q)
            };
        }
        let m1 = self.b.ins().iconst(ty, if ty == I32 { 0xffff_ffff } else { -1 });
        let is_m1 = self.b.ins().icmp(IntCC::Equal, d, m1);
        let special = self.b.ins().bor(is_zero, is_m1);
        let safe = self.b.ins().select(special, one, d);
        if is_mod {
            let r = self.b.ins().srem(x, safe);
            let r = self.b.ins().select(is_m1, zero, r);
            self.b.ins().select(is_zero, x, r)
        } else {
            let q = self.b.ins().sdiv(x, safe);
            let neg = self.b.ins().ineg(x);
            let q = self.b.ins().select(is_m1, neg, q);
            self.b.ins().select(is_zero, zero, q)
        }
    }

    /// `le16/32/64`, `be16/32/64` (class ALU) and `bswap16/32/64` (class ALU64, src = 0).
    fn endian(&mut self, pc: usize, insn: Insn, is64: bool) -> Result<(), JitError> {
        let to_be = insn.op & BPF_X != 0;
        if is64 && to_be {
            return Err(invalid(pc, "bswap with the source bit set"));
        }
        let swap = to_be || is64;
        let v = self.reg(pc, insn.dst)?;
        let r = match (insn.imm, swap) {
            (16, false) => self.b.ins().band_imm_u(v, 0xffff),
            (32, false) => self.b.ins().band_imm_u(v, 0xffff_ffff),
            (64, false) => v,
            (16 | 32, true) => {
                let t = if insn.imm == 16 { I16 } else { I32 };
                let n = self.b.ins().ireduce(t, v);
                let s = self.b.ins().bswap(n);
                self.b.ins().uextend(I64, s)
            }
            (64, true) => self.b.ins().bswap(v),
            _ => return Err(invalid(pc, format!("byte swap width {} is not 16/32/64", insn.imm))),
        };
        self.set_reg(pc, insn.dst, r)
    }

    // ---- jumps, calls, exit ----------------------------------------------------------------

    fn jmp(&mut self, pc: usize, insn: Insn) -> Result<Flow, JitError> {
        let is32 = insn.class() == BPF_JMP32;
        let op = insn.op & 0xf0;
        if matches!(op, BPF_JA | BPF_CALL | BPF_EXIT) && insn.op & BPF_X != 0 {
            return Err(invalid(pc, format!("{:#04x} is not a valid jump op", insn.op)));
        }
        match op {
            BPF_EXIT if !is32 => {
                let r0 = self.reg(pc, 0)?;
                self.spill_budget();
                self.b.ins().return_(&[r0]);
                return Ok(Flow::Stop);
            }
            BPF_CALL if !is32 => return self.call(pc, insn).map(|()| Flow::Next),
            BPF_EXIT | BPF_CALL => {
                return Err(invalid(pc, format!("{:#04x} is not a valid JMP32 op", insn.op)))
            }
            _ => {}
        }
        let n = self.insns.len();
        let target = jump_target(pc, &insn, n)?.expect("a jump op has a target");
        if op == BPF_JA {
            self.goto(target)?;
            return Ok(Flow::Stop);
        }
        let cc = match op {
            BPF_JEQ => IntCC::Equal,
            BPF_JGT => IntCC::UnsignedGreaterThan,
            BPF_JGE => IntCC::UnsignedGreaterThanOrEqual,
            BPF_JNE | BPF_JSET => IntCC::NotEqual,
            BPF_JSGT => IntCC::SignedGreaterThan,
            BPF_JSGE => IntCC::SignedGreaterThanOrEqual,
            BPF_JLT => IntCC::UnsignedLessThan,
            BPF_JLE => IntCC::UnsignedLessThanOrEqual,
            BPF_JSLT => IntCC::SignedLessThan,
            BPF_JSLE => IntCC::SignedLessThanOrEqual,
            _ => return Err(invalid(pc, format!("unknown jump op {:#04x}", insn.op))),
        };
        let ty = if is32 { I32 } else { I64 };
        let a = self.reg(pc, insn.dst)?;
        let a = if is32 { self.b.ins().ireduce(I32, a) } else { a };
        let b = if insn.op & BPF_X != 0 {
            let s = self.reg(pc, insn.src)?;
            if is32 {
                self.b.ins().ireduce(I32, s)
            } else {
                s
            }
        } else if is32 {
            self.b.ins().iconst(I32, i64::from(insn.imm.cast_unsigned()))
        } else {
            self.iconst(i64::from(insn.imm))
        };
        let cond = if op == BPF_JSET {
            let m = self.b.ins().band(a, b);
            let z = self.b.ins().iconst(ty, 0);
            self.b.ins().icmp(cc, m, z)
        } else {
            self.b.ins().icmp(cc, a, b)
        };
        let Some(fall) = self.block_at.get(pc + 1).copied().flatten() else {
            return Err(invalid(pc, "conditional jump at the end of its function"));
        };
        let Some(blk) = self.block_at.get(target).copied().flatten() else {
            return Err(invalid(pc, format!("jump target {target} is not a block start")));
        };
        self.b.ins().brif(cond, blk, &[], fall, &[]);
        Ok(Flow::Stop)
    }

    /// Unconditional transfer to `target` (the target block charges itself on entry).
    fn goto(&mut self, target: usize) -> Result<(), JitError> {
        let Some(blk) = self.block_at.get(target).copied().flatten() else {
            return Err(invalid(target, "jump target is not a block start"));
        };
        self.b.ins().jump(blk, &[]);
        Ok(())
    }

    /// Entering the basic block at `pc`: spend its `len` instructions, or fault there when they
    /// do not fit (the interpreter does exactly the same).
    fn charge(&mut self, pc: usize, len: u32) {
        // The budget lives in a variable (a register in loops); see `spill_budget`.
        let left = self.b.use_var(self.budget);
        let fits = self.b.ins().icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, left, i64::from(len));
        let ok = self.b.create_block();
        let fail = self.cold_block();
        self.b.ins().brif(fits, ok, &[], fail, &[]);
        self.b.switch_to_block(fail);
        let z = self.iconst(0);
        self.jump_fault(fault::BUDGET, pc, z, z);
        self.b.switch_to_block(ok);
        let rest = self.b.ins().iadd_imm_s(left, -i64::from(len));
        self.b.def_var(self.budget, rest);
    }

    /// Writes the budget variable back to `env.insns_left` (before calls and returns).
    fn spill_budget(&mut self) {
        let left = self.b.use_var(self.budget);
        let env = self.env();
        self.b.ins().store(MemFlagsData::trusted(), left, env, OFF_INSNS_LEFT);
    }

    /// Reloads the budget variable from `env` (after a call, which may have spent some).
    fn reload_budget(&mut self) {
        let env = self.env();
        let left = self.b.ins().load(I64, MemFlagsData::trusted(), env, OFF_INSNS_LEFT);
        self.b.def_var(self.budget, left);
    }

    /// After a call: reload the budget, and leave through `exit_block` if the callee recorded a
    /// fault.
    fn check_fault_after_call(&mut self) {
        self.reload_budget();
        let env = self.env();
        let kind = self.b.ins().load(I32, MemFlagsData::trusted(), env, OFF_FAULT_KIND);
        let cont = self.b.create_block();
        self.b.ins().brif(kind, self.exit_block, &[], cont, &[]);
        self.b.switch_to_block(cont);
    }

    fn call(&mut self, pc: usize, insn: Insn) -> Result<(), JitError> {
        let mut args = Vec::with_capacity(9);
        args.push(self.aux);
        let r0 = match insn.src {
            CALL_HELPER => {
                let id = self.iconst(i64::from(insn.imm.cast_unsigned()));
                args.push(id);
                for r in 1..=5 {
                    args.push(self.reg(pc, r)?);
                }
                args.push(self.iconst(i64::try_from(pc).unwrap_or(i64::MAX)));
                let f = self.iconst(helper_trampoline as *const () as usize as i64);
                self.spill_budget();
                let call = self.b.ins().call_indirect(self.helper_sig, f, &args);
                let r0 = self.b.inst_results(call)[0];
                self.check_fault_after_call();
                r0
            }
            BPF_PSEUDO_CALL => {
                let target = rel_target(pc, i64::from(insn.imm), self.insns.len())?;
                let Some(&(_, fref)) = self.callees.iter().find(|(s, _)| *s == target) else {
                    return Err(invalid(pc, format!("call target {target} is not a function")));
                };
                let f = MemFlagsData::trusted();
                let depth = self.b.ins().load(I64, f, self.aux, OFF_AUX_DEPTH);
                let deeper = self.b.ins().iadd_imm_s(depth, 1);
                let limit = i64::try_from(MAX_CALL_DEPTH).unwrap_or(i64::MAX);
                let too_deep =
                    self.b.ins().icmp_imm_s(IntCC::UnsignedGreaterThanOrEqual, deeper, limit);
                let ok = self.b.create_block();
                let fail = self.b.create_block();
                self.b.set_cold_block(fail);
                self.b.ins().brif(too_deep, fail, &[], ok, &[]);
                self.b.switch_to_block(fail);
                let z = self.iconst(0);
                self.jump_fault(fault::CALL_DEPTH, pc, z, z);
                self.b.switch_to_block(ok);
                self.b.ins().store(f, deeper, self.aux, OFF_AUX_DEPTH);
                for r in 1..=5 {
                    args.push(self.reg(pc, r)?);
                }
                let fp = self.reg(pc, FRAME_REG)?;
                let frame = i64::try_from(STACK_FRAME_BYTES).unwrap_or(i64::MAX);
                args.push(self.b.ins().iadd_imm_s(fp, -frame));
                self.spill_budget();
                let call = self.b.ins().call(fref, &args);
                let r0 = self.b.inst_results(call)[0];
                self.check_fault_after_call();
                self.b.ins().store(f, depth, self.aux, OFF_AUX_DEPTH);
                r0
            }
            s => return Err(invalid(pc, format!("call with src {s} is not supported"))),
        };
        self.set_reg(pc, 0, r0)?;
        // r1-r5 are caller-saved: their values after a call are undefined; zero them so the
        // generated code need not keep the old values alive across the call.
        let z = self.iconst(0);
        for r in 1..=5 {
            self.set_reg(pc, r, z)?;
        }
        Ok(())
    }

    // ---- memory ------------------------------------------------------------------------------

    fn lddw(&mut self, pc: usize, insn: Insn) -> Result<(), JitError> {
        if !insn.is_lddw() {
            return Err(invalid(pc, format!("unsupported load op {:#04x}", insn.op)));
        }
        let Some(hi) = self.insns.get(pc + 1) else {
            return Err(invalid(pc, "lddw without its second slot"));
        };
        let v = if let Some(&(_, off)) = self.prog.global_relocs.iter().find(|(i, _)| *i == pc) {
            let env = self.env();
            let base = self.b.ins().load(I64, MemFlagsData::trusted(), env, OFF_GLOBALS);
            self.b.ins().iadd_imm_s(base, off.cast_signed())
        } else if insn.src == 0 {
            let imm =
                (u64::from(hi.imm.cast_unsigned()) << 32) | u64::from(insn.imm.cast_unsigned());
            self.iconst(imm.cast_signed())
        } else {
            return Err(invalid(pc, format!("lddw with src {} and no relocation", insn.src)));
        };
        self.set_reg(pc, insn.dst, v)
    }

    /// Emits the region check for `len` bytes at `addr`; on return the builder is positioned
    /// where the access may be performed. Three tiers: (1) the window variables (last region
    /// this function matched for this access kind); (2) the site's hint, a region index that
    /// persists across invocations, re-validated against the current RunEnv; (3) a call to
    /// [`resolve_region`], which scans every region and updates the hint.
    fn check(&mut self, pc: usize, addr: Value, len: u64, access: Access) {
        debug_assert!((1..=MAX_ACCESS_BYTES).contains(&len));
        let (lo_v, span_v) = self.win_read;
        let fl = MemFlagsData::trusted();
        // Reads use window variables (registers); writes keep theirs in `aux` (two L1 loads).
        let (lo, span) = match access {
            Access::Read => (self.b.use_var(lo_v), self.b.use_var(span_v)),
            Access::Write => (
                self.b.ins().load(I64, fl, self.aux, OFF_AUX_WR_LO),
                self.b.ins().load(I64, fl, self.aux, OFF_AUX_WR_SPAN),
            ),
        };
        let off = self.b.ins().isub(addr, lo);
        let inside = self.b.ins().icmp(IntCC::UnsignedLessThan, off, span);
        let cont = self.b.create_block();
        let hinted = self.b.create_block();
        let refill = self.b.create_block();
        let miss = self.b.create_block();
        let refill_aux = self.b.create_block();
        for blk in [hinted, refill, miss, refill_aux] {
            self.b.set_cold_block(blk);
        }
        self.b.append_block_param(refill, I64);
        self.b.append_block_param(refill, I64);
        self.b.ins().brif(inside, cont, &[], hinted, &[]);

        // Tier 2: regions[hint], exactly as Region::contains, as a chain of compare-and-branch
        // (each test needs no temporaries, so the cold path does not push the function into
        // saving more callee-saved registers): idx < len, start <= addr, addr <= end and
        // end - addr >= len, the last two being `addr + len <= end` without overflow.
        self.b.switch_to_block(hinted);
        let slot = pc * 2 + usize::from(access == Access::Write);
        let hint_addr = self.hints_addr + u64::try_from(slot).unwrap_or(0);
        let hint = self.iconst(hint_addr.cast_signed());
        let idx = self.b.ins().uload8(I64, fl, hint, 0);
        let env = self.env();
        let (base, count_off) = match access {
            Access::Read => (OFF_READ_REGIONS, OFF_READ_LEN),
            Access::Write => (OFF_WRITE_REGIONS, OFF_WRITE_LEN),
        };
        // Entries past `len` are stale: a hint pointing there grants nothing.
        let count = self.b.ins().load(I64, fl, env, count_off);
        let live = self.b.ins().icmp(IntCC::UnsignedLessThan, idx, count);
        let in_use = self.cold_block();
        self.b.ins().brif(live, in_use, &[], miss, &[]);
        self.b.switch_to_block(in_use);
        let scaled = self.b.ins().ishl_imm_u(idx, 4);
        let rptr = self.b.ins().iadd(env, scaled);
        let start = self.b.ins().load(I64, fl, rptr, base);
        let end = self.b.ins().load(I64, fl, rptr, base + 8);
        let above_start = self.cold_block();
        let ge = self.b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, addr, start);
        self.b.ins().brif(ge, above_start, &[], miss, &[]);
        self.b.switch_to_block(above_start);
        let below_end = self.cold_block();
        let le = self.b.ins().icmp(IntCC::UnsignedLessThanOrEqual, addr, end);
        self.b.ins().brif(le, below_end, &[], miss, &[]);
        self.b.switch_to_block(below_end);
        let room = self.b.ins().isub(end, addr);
        // Immediates only on this path: constants would be hoisted and occupy registers.
        let fits =
            self.b.ins().icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, room, len.cast_signed());
        let size = self.b.ins().isub(end, start);
        self.b.ins().brif(fits, refill, &[start.into(), size.into()], miss, &[]);

        self.b.switch_to_block(refill);
        let p = self.b.block_params(refill).to_vec();
        let z = self.iconst(0);
        let big = self.b.ins().icmp_imm_u(IntCC::UnsignedGreaterThan, p[1], 7i64);
        let span = self.b.ins().iadd_imm_s(p[1], -i64::try_from(MAX_ACCESS_BYTES - 1).unwrap_or(0));
        let span = self.b.ins().select(big, span, z);
        match access {
            Access::Read => {
                self.b.def_var(lo_v, p[0]);
                self.b.def_var(span_v, span);
            }
            Access::Write => {
                self.b.ins().store(fl, p[0], self.aux, OFF_AUX_WR_LO);
                self.b.ins().store(fl, span, self.aux, OFF_AUX_WR_SPAN);
            }
        }
        self.b.ins().jump(cont, &[]);

        // Tier 3: full scan in Rust.
        self.b.switch_to_block(miss);
        let site =
            (u64::try_from(pc).unwrap_or(0) << 8) | (u64::from(access == Access::Write) << 4) | len;
        let site = self.iconst(site.cast_signed());
        // Preserve-all call: the hot code around it keeps its registers.
        self.b.ins().call(self.resolve_shim, &[self.aux, addr, site]);
        let found = self.b.ins().load(I64, fl, self.aux, OFF_AUX_FOUND);
        self.b.ins().brif(found, refill_aux, &[], self.exit_block, &[]);

        // The resolver refreshed the window in `aux` (where writes keep theirs anyway).
        self.b.switch_to_block(refill_aux);
        if access == Access::Read {
            let lo = self.b.ins().load(I64, fl, self.aux, OFF_AUX_LO);
            let span = self.b.ins().load(I64, fl, self.aux, OFF_AUX_SPAN);
            self.b.def_var(lo_v, lo);
            self.b.def_var(span_v, span);
        }
        self.b.ins().jump(cont, &[]);

        self.b.switch_to_block(cont);
    }

    fn size_of(pc: usize, insn: Insn) -> Result<u64, JitError> {
        Ok(match insn.op & 0x18 {
            BPF_B => 1,
            BPF_H => 2,
            BPF_W => 4,
            BPF_DW => 8,
            _ => return Err(invalid(pc, "bad size")),
        })
    }

    fn addr(&mut self, pc: usize, base: u8, off: i16) -> Result<Value, JitError> {
        let b = self.reg(pc, base)?;
        Ok(self.b.ins().iadd_imm_s(b, i64::from(off)))
    }

    fn ldx(&mut self, pc: usize, insn: Insn) -> Result<(), JitError> {
        let mode = insn.op & 0xe0;
        let len = Self::size_of(pc, insn)?;
        let sx = match mode {
            BPF_MEM => false,
            BPF_MEMSX if len < 8 => true,
            _ => return Err(invalid(pc, format!("unsupported load op {:#04x}", insn.op))),
        };
        let addr = self.addr(pc, insn.src, insn.off)?;
        self.check(pc, addr, len, Access::Read);
        let f = MemFlagsData::new().with_notrap();
        let ins = self.b.ins();
        let v = match (len, sx) {
            (1, false) => ins.uload8(I64, f, addr, 0),
            (2, false) => ins.uload16(I64, f, addr, 0),
            (4, false) => ins.uload32(f, addr, 0),
            (1, true) => ins.sload8(I64, f, addr, 0),
            (2, true) => ins.sload16(I64, f, addr, 0),
            (4, true) => ins.sload32(f, addr, 0),
            _ => ins.load(I64, f, addr, 0),
        };
        self.set_reg(pc, insn.dst, v)
    }

    fn store(&mut self, pc: usize, insn: Insn) -> Result<(), JitError> {
        let mode = insn.op & 0xe0;
        let len = Self::size_of(pc, insn)?;
        let is_stx = insn.class() == BPF_STX;
        if mode == BPF_ATOMIC && is_stx {
            return self.atomic(pc, insn, len);
        }
        if mode != BPF_MEM {
            return Err(invalid(pc, format!("unsupported store op {:#04x}", insn.op)));
        }
        let v = if is_stx { self.reg(pc, insn.src)? } else { self.iconst(i64::from(insn.imm)) };
        let addr = self.addr(pc, insn.dst, insn.off)?;
        self.check(pc, addr, len, Access::Write);
        self.store_n(len, v, addr);
        Ok(())
    }

    fn store_n(&mut self, len: u64, v: Value, addr: Value) {
        let f = MemFlagsData::new().with_notrap();
        let ins = self.b.ins();
        match len {
            1 => ins.istore8(f, v, addr, 0),
            2 => ins.istore16(f, v, addr, 0),
            4 => ins.istore32(f, v, addr, 0),
            _ => ins.store(f, v, addr, 0),
        };
    }

    /// Atomics as plain read-modify-write (single-threaded semantics: an invocation owns the
    /// memory it writes for its duration). Checked for write first, then for read, as the
    /// interpreter does (an address in neither set reports BadWrite).
    fn atomic(&mut self, pc: usize, insn: Insn, len: u64) -> Result<(), JitError> {
        if len != 4 && len != 8 {
            return Err(invalid(pc, "atomic operations are 32- or 64-bit"));
        }
        let op = insn.imm;
        let alu = op & !ATOMIC_FETCH;
        let fetch = op & ATOMIC_FETCH != 0;
        let known =
            matches!(alu, 0x00 /* ADD */ | 0x40 /* OR */ | 0x50 /* AND */ | 0xa0 /* XOR */)
                || op == ATOMIC_XCHG
                || op == ATOMIC_CMPXCHG;
        if !known {
            return Err(invalid(pc, format!("unknown atomic op {op:#x}")));
        }
        let addr = self.addr(pc, insn.dst, insn.off)?;
        self.check(pc, addr, len, Access::Write);
        self.check(pc, addr, len, Access::Read);
        let f = MemFlagsData::new().with_notrap();
        let old = if len == 4 {
            self.b.ins().uload32(f, addr, 0)
        } else {
            self.b.ins().load(I64, f, addr, 0)
        };
        let src = self.reg(pc, insn.src)?;
        if op == ATOMIC_CMPXCHG {
            let r0 = self.reg(pc, 0)?;
            let eq = if len == 4 {
                let a = self.b.ins().ireduce(I32, old);
                let e = self.b.ins().ireduce(I32, r0);
                self.b.ins().icmp(IntCC::Equal, a, e)
            } else {
                self.b.ins().icmp(IntCC::Equal, old, r0)
            };
            let new = self.b.ins().select(eq, src, old);
            self.store_n(len, new, addr);
            return self.set_reg(pc, 0, old);
        }
        let new = match alu {
            0x00 => self.b.ins().iadd(old, src),
            0x40 => self.b.ins().bor(old, src),
            0x50 => self.b.ins().band(old, src),
            0xa0 => self.b.ins().bxor(old, src),
            _ => src, // XCHG
        };
        self.store_n(len, new, addr);
        if fetch {
            self.set_reg(pc, insn.src, old)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            depth: 0,
            prog_type: ProgType::Xrp,
            helper_err: None,
        };
        let f = |kind| FaultInfo { kind, insn: 3, addr: 0x10, len: 4 };
        assert_eq!(fault_to_result(f(fault::NONE), 9, &mut aux, 5), Ok(9));
        assert_eq!(
            fault_to_result(f(fault::BAD_READ), 0, &mut aux, 5),
            Err(VmError::BadRead { insn: 3, addr: 0x10, len: 4 })
        );
        assert_eq!(
            fault_to_result(f(fault::BUDGET), 0, &mut aux, 5),
            Err(VmError::BudgetExhausted { insn: 3, budget: 5 })
        );
        assert!(matches!(
            fault_to_result(f(99), 0, &mut aux, 5),
            Err(VmError::Helper { insn: 3, .. })
        ));
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
