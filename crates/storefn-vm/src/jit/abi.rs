//! The ABI between generated code and Rust: the per-invocation `RunAux`, the field offsets
//! generated code loads and stores, the function signatures, and the `extern "C"` callbacks
//! (region resolution behind a preserve-all shim, helper calls).

use super::*;

/// Per-invocation state the generated code shares with its Rust callbacks. Lives in the
/// `JitProgram` (built once by `compile`; `run` resets what a call changes): nothing is
/// allocated per invocation unless a helper fails.
#[repr(C)]
#[derive(Debug)]
pub(super) struct RunAux {
    /// The invocation's environment. Generated code reaches `RunEnv` only through here (on
    /// slow paths), which keeps one register free in loops.
    pub(super) env: *mut RunEnv,
    /// Read window refreshed by [`resolve_region`]: region start and `size - 7` (saturating).
    pub(super) hot_lo: u64,
    pub(super) hot_span: u64,
    /// Write window: kept in memory (not variables) to save registers; same meaning.
    pub(super) wr_lo: u64,
    pub(super) wr_span: u64,
    /// The program's hint table (`JitProgram::hints`).
    pub(super) hints: *const Cell<u8>,
    /// [`resolve_region`]'s answer, stored by the preserve-all shim (which returns nothing).
    pub(super) found: u64,
    /// The out-of-line read check's answer ([`define_check_read_shim`]): the address to load
    /// from, the checked one or, after a fault, `&sink`.
    pub(super) checked: u64,
    /// What a load whose check failed reads instead (always 0; the fault is already recorded
    /// and the code stops before anything can see the value).
    pub(super) sink: u64,
    /// Frames currently live below the entry frame (0 in the entry function).
    pub(super) depth: u64,
    pub(super) prog_type: ProgType,
    /// The helper's error when `fault.kind == HELPER` (VmError carries a message).
    pub(super) helper_err: Option<VmError>,
}

/// What the entry function returns: r0 and the budget left (System V returns a two-word
/// struct in rax:rdx, as Cranelift returns two I64 values).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(super) struct EntryRet {
    pub(super) r0: u64,
    pub(super) insns_left: u64,
}

/// What an xrp call passes the entry function besides the context: `ctx.scratch` and the
/// first 8 bytes it points to, which its [`Preload`] loads take instead of reading them
/// (both zero for a program without such loads).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Preloaded {
    pub(crate) scratch: u64,
    pub(crate) word0: u64,
}

/// Signature of the compiled entry function, callable from Rust:
/// `(aux, r1, r10, budget, scratch, scratch word 0)`. The budget comes and goes in registers
/// (no store in `run` and load in the code, nor the reverse, on the path every call takes);
/// r2-r5 are 0 at entry and not passed. The last two are an xrp call's [`Preloaded`] values
/// (0 for other program types, which have no [`Preload`] loads).
pub(super) type EntryFn = unsafe extern "C" fn(*mut RunAux, u64, u64, u64, u64, u64) -> EntryRet;

/// [`EntryFn`] as a Cranelift signature.
pub(super) fn entry_signature(module: &JITModule) -> Signature {
    let mut sig = module.make_signature();
    for _ in 0..6 {
        sig.params.push(AbiParam::new(I64));
    }
    sig.returns.push(AbiParam::new(I64));
    sig.returns.push(AbiParam::new(I64));
    sig
}

/// Signature of every other compiled BPF function (called only from generated code):
/// `(aux, r1, r2, r3, r4, r5, r10) -> r0`; the budget goes through `env.insns_left`.
pub(super) fn bpf_signature(module: &JITModule) -> Signature {
    let mut sig = module.make_signature();
    // aux, r1..r5, r10
    for _ in 0..7 {
        sig.params.push(AbiParam::new(I64));
    }
    sig.returns.push(AbiParam::new(I64));
    sig
}

/// The signature of both resolver shims: `fn(aux, addr, site)`, preserve-all.
fn shim_signature(module: &JITModule) -> Signature {
    let mut sig = module.make_signature();
    sig.call_conv = CallConv::PreserveAll;
    for _ in 0..3 {
        sig.params.push(AbiParam::new(I64));
    }
    sig
}

/// Compiles the shim built in `ctx` as `id`, leaving `ctx` clear for the next function.
fn define_shim(
    module: &mut JITModule,
    ctx: &mut cranelift_codegen::Context,
    id: FuncId,
) -> Result<FuncId, JitError> {
    let r = module.define_function(id, ctx).map_err(|e| JitError::Codegen(format!("{e:?}")));
    module.clear_context(ctx);
    r.map(|()| id)
}

/// Declares shim `name` with [`shim_signature`] and makes `ctx` its function's to build.
fn declare_shim(
    module: &mut JITModule,
    ctx: &mut cranelift_codegen::Context,
    name: &str,
) -> Result<FuncId, JitError> {
    let sig = shim_signature(module);
    let id = module
        .declare_function(name, Linkage::Local, &sig)
        .map_err(|e| JitError::Codegen(e.to_string()))?;
    ctx.func.signature = sig;
    ctx.func.name = UserFuncName::user(0, id.as_u32());
    Ok(id)
}

/// [`declare_shim`], and `callee` declared in the shim's function.
fn declare_shim_calling(
    module: &mut JITModule,
    ctx: &mut cranelift_codegen::Context,
    name: &str,
    callee: FuncId,
) -> Result<(FuncId, FuncRef), JitError> {
    let id = declare_shim(module, ctx, name)?;
    Ok((id, module.declare_func_in_func(callee, &mut ctx.func)))
}

/// Starts a shim's entry block; its parameters `(aux, addr, site)`.
fn shim_params(b: &mut FunctionBuilder) -> (Value, Value, Value) {
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let p = b.block_params(entry);
    (p[0], p[1], p[2])
}

/// Defines the function a window miss calls, `fn(aux, addr, site)` with the preserve-all
/// convention (call sites in hot code clobber no register, so the loop around a check does
/// not spill for it), which answers in `aux.found` and refreshes `aux`'s window like
/// [`resolve_region`]. Its fast path is generated code: the site's hint re-validated against
/// the current env exactly as `Region::contains` does (`hint < len`, `addr >= start`,
/// `len <= end`, `addr <= end - len`), touching a few registers and no Rust; accesses that
/// alternate between regions (a page and the scratch) then cost a short call each instead
/// of a trip through Rust. On a hint miss it calls the slow shim, which calls
/// [`resolve_region`] (System V: it saves every register that call clobbers, so it is kept
/// out of the fast path's frame).
pub(super) fn define_resolve_shim(
    module: &mut JITModule,
    ctx: &mut cranelift_codegen::Context,
    fctx: &mut FunctionBuilderContext,
) -> Result<FuncId, JitError> {
    let slow = define_slow_shim(module, ctx, fctx)?;
    let (id, slow_ref) = declare_shim_calling(module, ctx, "storefn_resolve_hint", slow)?;
    let mut b = FunctionBuilder::new(&mut ctx.func, fctx);
    let (aux, addr, site) = shim_params(&mut b);
    let hit = b.create_block();
    let miss = b.create_block();
    let fl = MemFlagsData::trusted();
    // slot = pc * 2 + is_write; site = pc << 8 | is_write << 4 | len.
    let write = b.ins().ushr_imm_u(site, 4);
    let write = b.ins().band_imm_u(write, 1);
    let pc2 = b.ins().ushr_imm_u(site, 7);
    let pc2 = b.ins().band_imm_u(pc2, !1);
    let slot = b.ins().bor(pc2, write);
    let hints = b.ins().load(I64, fl, aux, OFF_AUX_HINTS);
    let at = b.ins().iadd(hints, slot);
    let hint = b.ins().uload8(I64, fl, at, 0);
    let env = b.ins().load(I64, fl, aux, OFF_AUX_ENV);
    // The write set follows the read set: set = env + OFF_READ + write * SET_BYTES.
    let set_off = b.ins().imul_imm_u(write, SET_BYTES);
    let set = b.ins().iadd(env, set_off);
    let count = b.ins().load(I64, fl, set, OFF_READ + OFF_SET_LEN);
    let in_set = b.ins().icmp(IntCC::UnsignedLessThan, hint, count);
    let r_off = b.ins().imul_imm_u(hint, REGION_BYTES);
    let r = b.ins().iadd(set, r_off);
    let start = b.ins().load(I64, fl, r, OFF_READ + OFF_SET_REGIONS);
    let end = b.ins().load(I64, fl, r, OFF_READ + OFF_SET_REGIONS + 8);
    let len = b.ins().band_imm_u(site, 0xf);
    let above = b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, addr, start);
    let fits = b.ins().icmp(IntCC::UnsignedLessThanOrEqual, len, end);
    let last = b.ins().isub(end, len);
    let below = b.ins().icmp(IntCC::UnsignedLessThanOrEqual, addr, last);
    let ok = b.ins().band(in_set, above);
    let ok = b.ins().band(ok, fits);
    let ok = b.ins().band(ok, below);
    b.ins().brif(ok, hit, &[], miss, &[]);

    // The window the resolver would set: the region's start and `size - 7`, saturating.
    b.switch_to_block(hit);
    let size = b.ins().isub(end, start);
    let wide =
        b.ins().icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, size, MAX_ACCESS_BYTES as i64 - 1);
    let span = b.ins().iadd_imm_s(size, 1 - MAX_ACCESS_BYTES as i64);
    let zero = b.ins().iconst(I64, 0);
    let span = b.ins().select(wide, span, zero);
    // Read window at OFF_AUX_LO/SPAN, write window at OFF_AUX_WR_LO/SPAN.
    let w_off = b.ins().imul_imm_u(write, i64::from(OFF_AUX_WR_LO - OFF_AUX_LO));
    let w = b.ins().iadd(aux, w_off);
    b.ins().store(fl, start, w, OFF_AUX_LO);
    b.ins().store(fl, span, w, OFF_AUX_SPAN);
    let one = b.ins().iconst(I64, 1);
    b.ins().store(fl, one, aux, OFF_AUX_FOUND);
    b.ins().return_(&[]);

    b.switch_to_block(miss);
    b.ins().call(slow_ref, &[aux, addr, site]);
    b.ins().return_(&[]);
    b.seal_all_blocks();
    b.finalize(module.target_config());
    define_shim(module, ctx, id)
}

/// Defines the out-of-line read check, `fn(aux, addr, site)` with the preserve-all
/// convention, for checked loads outside loops in programs with many of them (a call and a
/// load in line instead of a window compare and two blocks: a fraction of the compile time).
/// It leaves in `aux.checked` the address to load from: `addr` when `[addr, addr + len)` is
/// inside `aux`'s read window or the hint shim `hint` (and behind it [`resolve_region`])
/// grants it, else `&aux.sink`, with the fault recorded in `env.fault` (the first one only).
/// The caller does not test for the fault after each load: it tests `env.fault.kind` before
/// anything but register arithmetic and further loads (`Tx::flush_pending`).
pub(super) fn define_check_read_shim(
    module: &mut JITModule,
    ctx: &mut cranelift_codegen::Context,
    fctx: &mut FunctionBuilderContext,
    hint: FuncId,
) -> Result<FuncId, JitError> {
    let (id, hint_ref) = declare_shim_calling(module, ctx, "storefn_check_read", hint)?;
    let mut b = FunctionBuilder::new(&mut ctx.func, fctx);
    let (aux, addr, site) = shim_params(&mut b);
    let done = b.create_block();
    let miss = b.create_block();
    let fl = MemFlagsData::trusted();
    let lo = b.ins().load(I64, fl, aux, OFF_AUX_LO);
    let span = b.ins().load(I64, fl, aux, OFF_AUX_SPAN);
    let off = b.ins().isub(addr, lo);
    let inside = b.ins().icmp(IntCC::UnsignedLessThan, off, span);
    b.ins().store(fl, addr, aux, OFF_AUX_CHECKED);
    b.ins().brif(inside, done, &[], miss, &[]);

    b.switch_to_block(done);
    b.ins().return_(&[]);

    b.switch_to_block(miss);
    b.ins().call(hint_ref, &[aux, addr, site]);
    let found = b.ins().load(I64, fl, aux, OFF_AUX_FOUND);
    let sink = b.ins().iadd_imm_s(aux, i64::from(OFF_AUX_SINK));
    let at = b.ins().select(found, addr, sink);
    b.ins().store(fl, at, aux, OFF_AUX_CHECKED);
    b.ins().return_(&[]);
    b.seal_all_blocks();
    b.finalize(module.target_config());
    define_shim(module, ctx, id)
}

/// `fn(aux, addr, site)`, preserve-all: calls [`resolve_region`] (System V) and stores its
/// answer in `aux.found`.
fn define_slow_shim(
    module: &mut JITModule,
    ctx: &mut cranelift_codegen::Context,
    fctx: &mut FunctionBuilderContext,
) -> Result<FuncId, JitError> {
    let id = declare_shim(module, ctx, "storefn_resolve_shim")?;
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
    define_shim(module, ctx, id)
}

pub(super) fn sig_of(module: &JITModule, params: usize) -> Signature {
    let mut sig = module.make_signature();
    for _ in 0..params {
        sig.params.push(AbiParam::new(I64));
    }
    sig.returns.push(AbiParam::new(I64));
    sig
}

pub(super) const fn env_off(field: usize) -> i32 {
    assert!(field < i32::MAX as usize);
    #[allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap)]
    {
        field as i32
    }
}

pub(super) const OFF_INSNS_LEFT: i32 = env_off(offset_of!(RunEnv, insns_left));
pub(super) const OFF_GLOBALS: i32 = env_off(offset_of!(RunEnv, globals_base));
pub(super) const OFF_FAULT_KIND: i32 =
    env_off(offset_of!(RunEnv, fault) + offset_of!(FaultInfo, kind));
pub(super) const OFF_FAULT_INSN: i32 =
    env_off(offset_of!(RunEnv, fault) + offset_of!(FaultInfo, insn));
pub(super) const OFF_FAULT_ADDR: i32 =
    env_off(offset_of!(RunEnv, fault) + offset_of!(FaultInfo, addr));
pub(super) const OFF_FAULT_LEN: i32 =
    env_off(offset_of!(RunEnv, fault) + offset_of!(FaultInfo, len));
pub(super) const OFF_AUX_ENV: i32 = env_off(offset_of!(RunAux, env));
pub(super) const OFF_AUX_FOUND: i32 = env_off(offset_of!(RunAux, found));
pub(super) const OFF_AUX_CHECKED: i32 = env_off(offset_of!(RunAux, checked));
pub(super) const OFF_AUX_SINK: i32 = env_off(offset_of!(RunAux, sink));
pub(super) const OFF_AUX_WR_LO: i32 = env_off(offset_of!(RunAux, wr_lo));
pub(super) const OFF_AUX_WR_SPAN: i32 = env_off(offset_of!(RunAux, wr_span));
pub(super) const OFF_AUX_LO: i32 = env_off(offset_of!(RunAux, hot_lo));
pub(super) const OFF_AUX_SPAN: i32 = env_off(offset_of!(RunAux, hot_span));
pub(super) const OFF_AUX_DEPTH: i32 = env_off(offset_of!(RunAux, depth));
pub(super) const OFF_AUX_HINTS: i32 = env_off(offset_of!(RunAux, hints));
/// `RunEnv::read`; `RunEnv::write` follows it at `SET_BYTES` (checked below).
const OFF_READ: i32 = env_off(offset_of!(RunEnv, read));
const OFF_SET_LEN: i32 = env_off(offset_of!(RegionSet, len));
const OFF_SET_REGIONS: i32 = env_off(offset_of!(RegionSet, regions));
const SET_BYTES: i64 = std::mem::size_of::<RegionSet>() as i64;
const REGION_BYTES: i64 = std::mem::size_of::<crate::mem::Region>() as i64;
const _: () = assert!(
    offset_of!(RunEnv, write) == offset_of!(RunEnv, read) + std::mem::size_of::<RegionSet>()
        && offset_of!(RunAux, wr_span) - offset_of!(RunAux, wr_lo)
            == offset_of!(RunAux, hot_span) - offset_of!(RunAux, hot_lo)
        && offset_of!(RunAux, wr_lo) > offset_of!(RunAux, hot_lo),
    "the hint shim addresses the write set and window from the read ones"
);

/// Exact region check when both the window and the site's hint missed (the contract of
/// crate::mem). On success stores the matching region's index in the site's hint, refreshes
/// `aux`'s window and returns 1; otherwise records the fault and returns 0.
/// `site` = instruction index << 8 | is_write << 4 | access bytes. Reached from generated code
/// through the preserve-all shim (see `define_resolve_shim`).
pub(super) extern "C" fn resolve_region(aux: *mut RunAux, addr: u64, site: u64) -> u64 {
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
    let slot = usize::try_from(pc * 2).unwrap_or(0) + usize::from(write);
    // SAFETY: `aux.hints` is the owning JitProgram's hint table (alive: `run` borrows it),
    // which has 2 entries per instruction and `pc` is an instruction index of the program;
    // the table is only accessed from the thread running this invocation.
    let hint = usize::from(unsafe { (*aux.hints.add(slot)).get() });
    // The hint first (the region this site matched last), re-validated like any other: an
    // index past `count` is stale and grants nothing.
    let hinted =
        set.regions[..count].get(hint).filter(|r| r.contains(addr, len)).map(|r| (hint, r));
    let found = hinted
        .or_else(|| set.regions[..count].iter().enumerate().find(|(_, r)| r.contains(addr, len)));
    if let Some((i, r)) = found {
        let span = (r.end - r.start).saturating_sub(MAX_ACCESS_BYTES - 1);
        if write {
            (aux.wr_lo, aux.wr_span) = (r.start, span);
        } else {
            (aux.hot_lo, aux.hot_span) = (r.start, span);
        }
        // SAFETY: as for the read of the hint above.
        unsafe { (*aux.hints.add(slot)).set(u8::try_from(i).unwrap_or(0)) };
        return 1;
    }
    // The first fault wins: after an out-of-line read check failed, the loads up to the
    // next fault test still run (from `aux.sink`) and may fail too.
    if env.fault.kind == fault::NONE {
        env.fault = FaultInfo {
            kind: if write { fault::BAD_WRITE } else { fault::BAD_READ },
            insn: u32::try_from(pc).unwrap_or(u32::MAX),
            addr,
            len,
        };
    }
    0
}

/// Helper call from generated code: forwards to the helper table; on error stores the error in
/// `aux`, records a HELPER fault and returns 0 (the generated code then returns).
#[allow(clippy::too_many_arguments)]
pub(super) extern "C" fn helper_trampoline(
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
