//! eBPF to Cranelift IR: one Cranelift function per BPF function, one block per basic block of
//! the shared [`crate::cfg::Cfg`] (charge points start with their budget charge), ALU, jumps,
//! calls.

use super::abi::*;
use super::bytes::OrBytes;
use super::*;

/// Translation state for one BPF function.
pub(super) struct Tx<'a, 'f> {
    pub(super) b: FunctionBuilder<'f>,
    pub(super) insns: &'a [Insn],
    pub(super) prog: &'a Program,
    /// Budget charge at each slot (0: not a charge point; [`crate::cfg::Cfg::charge`]).
    pub(super) charges: &'a [u32],
    /// Accesses the verifier proved in bounds: no run-time region check there.
    pub(super) in_bounds: &'a [bool],
    /// Per slot: a load whose value the entry function receives as a parameter.
    pub(super) preload: &'a [Option<Preload>],
    /// In the entry function: its `scratch` and `scratch word 0` parameters ([`EntryFn`]).
    pub(super) preloaded: Option<[Value; 2]>,
    pub(super) regs: [Variable; NUM_REGS],
    /// The read window (lo, span) in variables ([`Tx::check`]); `None`: in `aux`, like the
    /// write window (the quick tier: there every value that crosses a block lives in a stack
    /// slot anyway).
    pub(super) win_read: Option<(Variable, Variable)>,
    /// Read windows of their own for checked loads inside loops ([`Tx::read_window`]): up
    /// to [`SITE_WINDOWS`] per function, zeroed at its start, handed out in translation
    /// order; `site_windows` says which load holds which.
    pub(super) window_pool: Vec<(Variable, Variable)>,
    pub(super) site_windows: Vec<(usize, (Variable, Variable))>,
    /// Per slot of the program: inside some loop (between a backward jump's target and it).
    pub(super) in_loop: &'a [bool],
    /// Per slot of the program: some jump lands there.
    pub(super) is_target: &'a [bool],
    /// `env.insns_left`, kept in a register between calls and returns.
    pub(super) budget: Variable,
    pub(super) aux: Value,
    /// Block starting at each slot of the function (`block_at[pc - start]`) that is a jump
    /// target or follows a branch; read through [`Tx::block`].
    pub(super) block_at: Vec<Option<Block>>,
    /// Shared exit path after a callee or helper recorded a fault: return 0.
    pub(super) exit_block: Block,
    /// Shared fault path for the faults without an address (budget, call depth): one param,
    /// `kind << 32 | insn` ([`Tx::jump_fault`]), stored into env.fault, then return 0.
    pub(super) fault_block: Block,
    /// The preserve-all shim in front of [`resolve_region`].
    pub(super) resolve_shim: FuncRef,
    /// The out-of-line read check ([`define_check_read_shim`]), where this function uses it.
    pub(super) check_read_shim: Option<FuncRef>,
    /// Per slot of the program: a checked load that calls the out-of-line check
    /// ([`super::memcheck::out_of_line_loads`]).
    pub(super) out_of_line: &'a [bool],
    /// An out-of-line check was emitted since the last fault test ([`Tx::flush_pending`]).
    pub(super) pending: bool,
    pub(super) helper_sig: SigRef,
    /// (function start, FuncRef) for every BPF function.
    pub(super) callees: Vec<(usize, FuncRef)>,
    pub(super) func_range: (usize, usize),
    /// Counted loops ([`crate::cfg::Cfg::counted_loops`]): the short ones are unrolled.
    pub(super) counted: &'a [crate::cfg::CountedLoop],
    /// Body slots this function may still emit as unrolled copies.
    pub(super) unroll_left: u64,
    /// `back_target[pc - start]`: some jump at `pc` or later lands on `pc`, so its block
    /// gains a predecessor after it is entered and is sealed only at the end.
    pub(super) back_target: Vec<bool>,
    pub(super) cfg: &'a Cfg,
    /// Per slot: the BPF-to-BPF call there is inlined ([`super::inline::Plan`]).
    pub(super) inline_at: &'a [bool],
    /// Whether this Cranelift function is the program's entry (depth 0, returns the budget).
    pub(super) is_entry: bool,
    /// While an inlined callee is translated: where its `exit`s go.
    pub(super) inline_exit: Option<Block>,
    /// Values recomposed from byte loads ([`super::bytes`]).
    pub(super) bytes: super::bytes::ByteFacts,
    /// Stack slots kept in variables ([`super::slots`]), and those of the frame being
    /// translated (this function's, or an inlined callee's): `(off, len, variable)`.
    pub(super) slot_plan: &'a super::slots::SlotPlan,
    pub(super) slot_vars: Vec<(i16, u8, Variable)>,
    /// What this function's translation emitted, for [`JitProgram`]'s diagnostics.
    pub(super) counts: Counts,
    /// While a guarded loop's unchecked copies are emitted ([`super::guard`]), its header
    /// (charged there without a test).
    pub(super) unchecked_header: Option<usize>,
    /// While a guarded ring's copies are emitted: the latch whose test its guard decided.
    pub(super) skip_latch: Option<usize>,
    /// The body of the loop whose copies are being emitted in line (all its trips, or a ring
    /// without a latch skip: `Tx::unroll`), if any: a copy's conditional exits leave through an
    /// out-of-line block of their own (`Tx::jmp`).
    pub(super) exit_edges: Option<std::ops::RangeInclusive<usize>>,
    /// Per slot: its block may continue the one before it ([`super::blocks::mergeable`]).
    pub(super) mergeable: &'a [bool],
}

/// Checked loads inside loops that get a read window of their own, per function (the
/// optimising tier only). Loads that take turns between regions (a page and the scratch)
/// would otherwise evict each other from the one shared window and call the resolver every
/// time. Each window is two variables live through the function: with 8, loops of several
/// loads ran out of registers (grep 1.0x -> 1.4-1.6x rbpf's JIT, matmul 1.4x -> 1.8x, while
/// 2 kept the alternating loads' gain: 'alternate' 11.4x -> 1.9x), so the first two loads get
/// one and the rest share.
const SITE_WINDOWS: usize = 2;

/// Per slot: some jump (conditional or not) lands there.
pub(super) fn jump_targets(verified: &VerifiedProgram) -> Vec<bool> {
    let (insns, cfg) = (&verified.insns, verified.cfg());
    let mut out = vec![false; insns.len()];
    for pc in (0..insns.len()).filter(|&pc| !cfg.is_second_half(pc)) {
        if let Ok(Some(t)) = jump_target(pc, &insns[pc], insns.len()) {
            out[t] = true;
        }
    }
    out
}

/// Per slot: inside a loop, i.e. between the target of a backward jump and the jump.
pub(super) fn loop_slots(verified: &VerifiedProgram) -> Vec<bool> {
    let (insns, cfg) = (&verified.insns, verified.cfg());
    // +1 where a loop starts, -1 past where it ends, then a running sum: O(slots).
    let mut delta = vec![0i64; insns.len() + 1];
    for pc in (0..insns.len()).filter(|&pc| !cfg.is_second_half(pc)) {
        if let Ok(Some(t)) = jump_target(pc, &insns[pc], insns.len()) {
            if t <= pc {
                delta[t] += 1;
                delta[pc + 1] -= 1;
            }
        }
    }
    let mut depth = 0;
    delta[..insns.len()]
        .iter()
        .map(|d| {
            depth += d;
            depth > 0
        })
        .collect()
}

/// What [`translate_function`] emitted, for [`JitProgram`]'s diagnostics (each counted per
/// emitted copy where a loop is unrolled).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Counts {
    /// Byte loads fused into one word load ([`super::bytes`]).
    pub fused_loads: usize,
    /// Reduction loops emitted with partial accumulators ([`super::reduce`]), and of them
    /// the ones emitted as vector code ([`super::vector`]).
    pub reductions: usize,
    pub vectors: usize,
    /// Idioms matched after translation (popcounts, narrow byte swaps: [`super::idioms`]).
    pub idioms: usize,
    /// Bounded loops emitted behind one budget guard ([`super::guard`]).
    pub guarded_loops: usize,
    /// Conditional jumps emitted as conditional moves ([`Tx::if_convert`]).
    pub if_converted: usize,
    /// Read-modify-write triples emitted fused ([`super::rmw`]).
    pub rmw_triples: usize,
}

impl Counts {
    /// Adds one function's counts to a program's.
    pub fn add(&mut self, c: &Counts) {
        self.fused_loads += c.fused_loads;
        self.reductions += c.reductions;
        self.vectors += c.vectors;
        self.idioms += c.idioms;
        self.guarded_loops += c.guarded_loops;
        self.if_converted += c.if_converted;
        self.rmw_triples += c.rmw_triples;
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn translate_function(
    verified: &VerifiedProgram,
    quick: bool,
    (inline_at, in_loop, is_target, out_of_line): (&[bool], &[bool], &[bool], &[bool]),
    (slot_plan, mergeable): (&super::slots::SlotPlan, &[bool]),
    (start, end): (usize, usize),
    (shim, check_shim): (FuncId, Option<FuncId>),
    ids: &[(usize, FuncId)],
    module: &mut JITModule,
    ctx: &mut cranelift_codegen::Context,
    fctx: &mut FunctionBuilderContext,
) -> Result<Counts, JitError> {
    let (prog, cfg): (&Program, &Cfg) = (verified, verified.cfg());
    let insns = &prog.insns[..];
    // One Cranelift block per basic block (the verifier checked every jump lands on one).
    let needs_callee = (start..end).any(|pc| {
        !cfg.is_second_half(pc) && crate::cfg::is_pseudo_call(insns[pc]) && !inline_at[pc]
    });
    let callees: Vec<(usize, FuncRef)> = if needs_callee {
        ids.iter().map(|&(s, id)| (s, module.declare_func_in_func(id, &mut ctx.func))).collect()
    } else {
        Vec::new()
    };
    let resolve_shim = module.declare_func_in_func(shim, &mut ctx.func);
    // Only where this function has an out-of-line check (an unused declaration still costs).
    let check_read_shim = check_shim
        .filter(|_| out_of_line[start..end].iter().any(|&o| o))
        .map(|id| module.declare_func_in_func(id, &mut ctx.func));
    let helper_sig = ctx.func.import_signature(sig_of(module, 8));

    let mut b = FunctionBuilder::new(&mut ctx.func, fctx);
    let regs: [Variable; NUM_REGS] = std::array::from_fn(|_| b.declare_var(I64));
    let win_read = (!quick).then(|| (b.declare_var(I64), b.declare_var(I64)));
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let params = b.block_params(entry).to_vec();
    let aux = params[0];
    let zero = b.ins().iconst(I64, 0);
    b.def_var(regs[0], zero);
    let is_entry = start == 0;
    // The entry: (aux, r1, r10, budget, scratch, scratch word 0), r2-r5 zero; any other
    // function: (aux, r1..r5, r10) with the budget in `env.insns_left` (see `EntryFn`).
    let (r10, last_arg) = if is_entry { (params[2], 1) } else { (params[6], 5) };
    for r in 1..=5 {
        b.def_var(regs[r], if r <= last_arg { params[r] } else { zero });
    }
    for r in &regs[6..10] {
        b.def_var(*r, zero);
    }
    b.def_var(regs[10], r10);
    let window_pool: Vec<(Variable, Variable)> = if quick {
        Vec::new()
    } else {
        (0..SITE_WINDOWS).map(|_| (b.declare_var(I64), b.declare_var(I64))).collect()
    };
    for &(lo, span) in win_read.iter().chain(&window_pool) {
        b.def_var(lo, zero);
        b.def_var(span, zero);
    }
    let budget = b.declare_var(I64);
    let left = if is_entry {
        params[3]
    } else {
        let env = b.ins().load(I64, MemFlagsData::trusted(), aux, OFF_AUX_ENV);
        b.ins().load(I64, MemFlagsData::trusted(), env, OFF_INSNS_LEFT)
    };
    b.def_var(budget, left);
    if start == 0 {
        // A window in `aux` may hold an earlier call's region: the entry function clears it
        // before any access can be checked against it (`JitProgram::run` leaves it alone, so
        // a program without such checks pays nothing per call).
        let (loads, stores) = checked_accesses(verified);
        let mut clear = Vec::new();
        if stores {
            clear.extend([OFF_AUX_WR_LO, OFF_AUX_WR_SPAN]);
        }
        // The quick tier's read window, and the one the out-of-line checks read, are in `aux`.
        if loads && (quick || check_shim.is_some()) {
            clear.extend([OFF_AUX_LO, OFF_AUX_SPAN]);
        }
        for off in clear {
            b.ins().store(MemFlagsData::trusted(), zero, aux, off);
        }
    }
    // Only this function's slots: a table over the whole program per function would make
    // compiling a program of many small functions quadratic in its size.
    let block_at: Vec<Option<Block>> =
        (start..end).map(|pc| cfg.is_block_start(pc).then(|| b.create_block())).collect();
    let exit_block = b.create_block();
    b.set_cold_block(exit_block);
    let fault_block = b.create_block();
    b.set_cold_block(fault_block);
    b.append_block_param(fault_block, I64);
    let first = block_at[0].expect("start is a target");
    let back_target = back_targets(cfg, insns, (start, end));

    let mut tx = Tx {
        b,
        insns,
        prog,
        charges: cfg.charges(),
        in_bounds: verified.in_bounds(),
        preload: verified.preloads(),
        preloaded: is_entry.then(|| [params[4], params[5]]),
        regs,
        win_read,
        window_pool,
        site_windows: Vec::new(),
        in_loop,
        is_target,
        budget,
        aux,
        block_at,
        exit_block,
        fault_block,
        resolve_shim,
        check_read_shim,
        out_of_line,
        pending: false,
        helper_sig,
        callees,
        func_range: (start, end),
        counted: cfg.counted_loops(),
        unroll_left: super::unroll::unroll_allowance(insns.len(), quick),
        back_target,
        cfg,
        inline_at,
        is_entry: start == 0,
        inline_exit: None,
        bytes: super::bytes::ByteFacts::default(),
        slot_plan,
        slot_vars: Vec::new(),
        counts: Counts::default(),
        unchecked_header: None,
        skip_latch: None,
        exit_edges: None,
        mergeable,
    };
    // Promoted stack slots are loaded from the frame before the first block.
    tx.start_slots(start);
    tx.b.ins().jump(first, &[]);
    tx.b.seal_block(entry);
    tx.body()?;
    tx.finish_shared_blocks();
    tx.b.seal_all_blocks();
    tx.b.finalize(module.target_config());
    let (bytes, mut counts) = (tx.bytes, tx.counts);
    counts.fused_loads = bytes.fused;
    if bytes.fused > 0 {
        super::bytes::drop_dead_byte_loads(&mut ctx.func, &bytes.loads);
    }
    counts.idioms =
        super::idioms::popcounts(ctx, module.isa())? + super::idioms::narrow_swaps(&mut ctx.func);
    Ok(counts)
}

/// Per slot of `[start, end)`: whether a jump at that slot or later lands on it.
pub(super) fn back_targets(cfg: &Cfg, insns: &[Insn], (start, end): (usize, usize)) -> Vec<bool> {
    let mut back = vec![false; end - start];
    for pc in (start..end).filter(|&pc| !cfg.is_second_half(pc)) {
        if let Ok(Some(t)) = jump_target(pc, &insns[pc], insns.len()) {
            if (start..=pc).contains(&t) {
                back[t - start] = true;
            }
        }
    }
    back
}

/// Whether any load (atomics included), and whether any store, of the program keeps its
/// run-time check (and so reads a window).
fn checked_accesses(verified: &VerifiedProgram) -> (bool, bool) {
    let cfg = verified.cfg();
    let checked = |pc: usize| !cfg.is_second_half(pc) && !verified.in_bounds()[pc];
    let mut out = (false, false);
    for (pc, i) in verified.insns.iter().enumerate() {
        let atomic = i.class() == BPF_STX && i.op & 0xe0 == BPF_ATOMIC;
        if (i.class() == BPF_LDX || atomic) && checked(pc) {
            out.0 = true;
        }
        if matches!(i.class(), BPF_ST | BPF_STX) && checked(pc) {
            out.1 = true;
        }
    }
    out
}

/// Whether control continues to the next instruction.
#[derive(PartialEq, Eq)]
pub(super) enum Flow {
    Next,
    Stop,
    /// The instructions up to this slot were translated with it (an if-converted branch):
    /// continue there, in the current block.
    SkipTo(usize),
    /// As `SkipTo`, but the block ended (the if-converted side ended with a `goto`).
    Resume(usize),
}

impl Tx<'_, '_> {
    pub(super) fn body(&mut self) -> Result<(), JitError> {
        let (start, end) = self.func_range;
        let mut pc = start;
        let mut open = false; // is there a current, unterminated block?
        while pc < end {
            if let Some((l, copies)) = self.unrolled_loop_at(pc) {
                open = self.unroll(l, copies, open)?;
                pc = l.latch + 1;
                continue;
            }
            if let Some(g) = self.guarded_loop_at(pc) {
                let latch = g.latch();
                open = self.guarded(&g, open)?;
                pc = latch + 1;
                continue;
            }
            (open, pc) = self.step(pc, open)?;
        }
        Ok(())
    }

    /// Translates slot `pc` (starting its block if one starts there): whether control
    /// continues past it, and its width in slots.
    /// Translates slot `pc` (starting its block if one starts there): whether control
    /// continues, and the next slot to translate.
    pub(super) fn step(&mut self, pc: usize, mut open: bool) -> Result<(bool, usize), JitError> {
        let end = self.func_range.1;
        if let Some(blk) = self.block(pc) {
            if open {
                self.flush_pending();
                self.b.ins().jump(blk, &[]);
            }
            debug_assert!(!self.pending, "a block ended with an untested out-of-line check");
            self.bytes.clear();
            self.b.switch_to_block(blk);
            // Sealed as soon as every predecessor is emitted (everything but a loop header:
            // code is emitted in slot order, and unrolled copies only jump forward), so the
            // SSA builder resolves each register to its one reaching value instead of giving
            // the block a parameter per register to prune later (compile time per block).
            if !self.back_target[pc - self.func_range.0] {
                self.b.seal_block(blk);
            }
            open = true;
        }
        let mut next = pc + if self.insns[pc].is_lddw() { 2 } else { 1 };
        if open {
            if self.unchecked_header == Some(pc) {
                self.free_charge(self.charges[pc]);
            } else if self.charges[pc] != 0 {
                self.charge(pc, self.charges[pc]);
            }
            match self.insn_or_rmw(pc)? {
                Flow::Next => {}
                Flow::Stop => open = false,
                Flow::SkipTo(t) => next = t,
                Flow::Resume(t) => (open, next) = (false, t),
            }
            if open && next >= end {
                return Err(invalid(pc, "falls through past the end of its function"));
            }
        }
        // else: unreachable code (no jump lands here); nothing to emit.
        Ok((open, next))
    }

    /// The block starting at `pc`, if `pc` is a block start inside this function.
    pub(super) fn block(&self, pc: usize) -> Option<Block> {
        let k = pc.checked_sub(self.func_range.0)?;
        self.block_at.get(k).copied().flatten()
    }

    /// The entry of `block_at` for `pc`, a slot of this function.
    pub(super) fn block_slot(&mut self, pc: usize) -> &mut Option<Block> {
        &mut self.block_at[pc - self.func_range.0]
    }

    /// Returns `r0` from this function: the entry returns the budget beside it
    /// ([`EntryFn`]), any other function leaves it in `env.insns_left`.
    pub(super) fn ret(&mut self, r0: Value) {
        if self.is_entry {
            let left = self.b.use_var(self.budget);
            self.b.ins().return_(&[r0, left]);
        } else {
            self.spill_budget();
            self.b.ins().return_(&[r0]);
        }
    }

    /// Switches to `blk`, whose predecessors are all emitted already, and seals it.
    pub(super) fn enter(&mut self, blk: Block) {
        self.b.switch_to_block(blk);
        self.b.seal_block(blk);
    }

    pub(super) fn finish_shared_blocks(&mut self) {
        self.enter(self.exit_block);
        let zero = self.b.ins().iconst(I64, 0);
        self.ret(zero);

        self.enter(self.fault_block);
        let tag = self.b.block_params(self.fault_block)[0];
        let env = self.env();
        let f = MemFlagsData::trusted();
        let kind = self.b.ins().ushr_imm_u(tag, 32);
        let kind = self.b.ins().ireduce(I32, kind);
        let insn = self.b.ins().ireduce(I32, tag);
        let zero = self.b.ins().iconst(I64, 0);
        self.b.ins().store(f, kind, env, OFF_FAULT_KIND);
        self.b.ins().store(f, insn, env, OFF_FAULT_INSN);
        self.b.ins().store(f, zero, env, OFF_FAULT_ADDR);
        self.b.ins().store(f, zero, env, OFF_FAULT_LEN);
        self.ret(zero);
    }

    /// A block laid out away from the hot code (region-check slow paths).
    pub(super) fn cold_block(&mut self) -> Block {
        let blk = self.b.create_block();
        self.b.set_cold_block(blk);
        blk
    }

    /// `aux.env`, loaded where needed (slow paths) instead of occupying a register.
    pub(super) fn env(&mut self) -> Value {
        self.b.ins().load(I64, MemFlagsData::trusted(), self.aux, OFF_AUX_ENV)
    }

    pub(super) fn reg(&mut self, pc: usize, r: u8) -> Result<Value, JitError> {
        if usize::from(r) >= NUM_REGS {
            return Err(invalid(pc, format!("register r{r} does not exist")));
        }
        Ok(self.b.use_var(self.regs[usize::from(r)]))
    }

    pub(super) fn set_reg(&mut self, pc: usize, r: u8, v: Value) -> Result<(), JitError> {
        if r >= FRAME_REG {
            return Err(invalid(pc, format!("r{r} is not writable")));
        }
        self.b.def_var(self.regs[usize::from(r)], v);
        Ok(())
    }

    pub(super) fn iconst(&mut self, v: i64) -> Value {
        self.b.ins().iconst(I64, v)
    }

    /// Jumps to the shared fault block with the fault's kind and instruction packed in one
    /// constant. One constant per site, not a kind, an index and zeros: Cranelift merges equal
    /// constants function-wide and places the merged value where it dominates every use, so
    /// a kind or a zero shared by the cold paths of a loop's charge points was materialised
    /// before the loop and held a register through it (grep's scan spilled its budget for it).
    pub(super) fn jump_fault(&mut self, kind: u32, pc: usize) {
        let pc = u32::try_from(pc).unwrap_or(u32::MAX);
        let tag = self.iconst(((u64::from(kind) << 32) | u64::from(pc)).cast_signed());
        self.b.ins().jump(self.fault_block, &[BlockArg::Value(tag)]);
    }

    pub(super) fn insn(&mut self, pc: usize) -> Result<Flow, JitError> {
        let insn = self.insns[pc];
        // Only register arithmetic and loads may run between a failed out-of-line check and
        // its fault test: none of them can be seen, write memory, call, charge or branch.
        if !matches!(insn.class(), BPF_ALU | BPF_ALU64 | BPF_LD | BPF_LDX) {
            self.flush_pending();
            // Memory may change: byte loads before this are not recomposed with ones after.
            self.bytes.clear();
        }
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

    pub(super) fn alu(&mut self, pc: usize, insn: Insn) -> Result<(), JitError> {
        let is64 = insn.class() == BPF_ALU64;
        let op = insn.op & 0xf0;
        let use_x = insn.op & BPF_X != 0;
        if op == BPF_END {
            return self.endian(pc, insn, is64);
        }
        let ty = if is64 { I64 } else { I32 };
        let width = if is64 { 64 } else { 32 };
        // A move does not read its destination: no use of it, which in a block entered
        // before all its predecessors (a loop header) would give the block a parameter for a
        // dead value, kept live around the loop (and a counter bump's result with it, so its
        // load could not fold into the store: `super::rmw`).
        let dst64 = if op == BPF_MOV { self.iconst(0) } else { self.reg(pc, insn.dst)? };
        let mut or_lanes = None;
        if op == BPF_OR && use_x {
            let s = self.reg(pc, insn.src)?;
            match self.or_bytes(dst64, s, width) {
                Some(OrBytes::Word(r)) => return self.set_reg(pc, insn.dst, r),
                Some(OrBytes::Lanes(f)) => or_lanes = Some(f),
                None => {}
            }
        }
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
            // `x * (2^k + 1)` as `x + (x << k)`, one `lea` (collatz's `3n + 1`: a multiply's
            // 3-cycle latency on the loop's one dependency chain).
            BPF_MUL if !use_x && matches!(insn.imm, 3 | 5 | 9) => {
                let k = i64::from((insn.imm - 1).trailing_zeros());
                let shifted = ins.ishl_imm_u(dst, k);
                self.b.ins().iadd(dst, shifted)
            }
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
        if op == BPF_LSH && !use_x {
            self.bytes.shift(r, dst64, i64::from(insn.imm), width);
        }
        if let Some(f) = or_lanes {
            self.bytes.put(r, f);
        }
        self.set_reg(pc, insn.dst, r)
    }

    /// eBPF division: x/0 = 0, x%0 = x, INT_MIN/-1 = INT_MIN, INT_MIN%-1 = 0; never traps.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn divmod(
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
    pub(super) fn endian(&mut self, pc: usize, insn: Insn, is64: bool) -> Result<(), JitError> {
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

    // ---- jumps, exit (calls: calls.rs) ------------------------------------------------------

    pub(super) fn jmp(&mut self, pc: usize, insn: Insn) -> Result<Flow, JitError> {
        let is32 = insn.class() == BPF_JMP32;
        let op = insn.op & 0xf0;
        if matches!(op, BPF_JA | BPF_CALL | BPF_EXIT) && insn.op & BPF_X != 0 {
            return Err(invalid(pc, format!("{:#04x} is not a valid jump op", insn.op)));
        }
        match op {
            BPF_EXIT if !is32 => {
                if let Some(back) = self.inline_exit {
                    // An inlined callee returns to its call site (r0 is its own variable).
                    self.b.ins().jump(back, &[]);
                } else {
                    let r0 = self.reg(pc, 0)?;
                    self.ret(r0);
                }
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
        let Some(fall) = self.block(pc + 1) else {
            return Err(invalid(pc, "conditional jump at the end of its function"));
        };
        if self.block(target).is_none() {
            return Err(invalid(pc, format!("jump target {target} is not a block start")));
        }
        if let Some(side) = self.if_convertible(pc, target) {
            return self.if_convert(cond, side, target);
        }
        let blk = self.block(target).expect("checked above");
        if self.exit_edges.as_ref().is_some_and(|body| !body.contains(&target)) {
            // A copy's exit: what the copy leaves with (its own constants) is set on this edge
            // only, out of line, not before the test on the path that stays in the loop.
            let edge = self.cold_block();
            self.b.ins().brif(cond, edge, &[], fall, &[]);
            self.b.seal_block(edge);
            self.b.switch_to_block(edge);
            self.b.ins().jump(blk, &[]);
            return Ok(Flow::Stop);
        }
        self.b.ins().brif(cond, blk, &[], fall, &[]);
        Ok(Flow::Stop)
    }

    /// Unconditional transfer to `target` (the target block charges itself on entry).
    pub(super) fn goto(&mut self, target: usize) -> Result<(), JitError> {
        let Some(blk) = self.block(target) else {
            return Err(invalid(target, "jump target is not a block start"));
        };
        self.b.ins().jump(blk, &[]);
        Ok(())
    }

    /// Reaching the charge point `pc`: spend its `len` instructions, or fault there when they do
    /// not fit (the interpreter does exactly the same).
    pub(super) fn charge(&mut self, pc: usize, len: u32) {
        // The budget lives in a variable (a register in loops); see `spill_budget`.
        let left = self.b.use_var(self.budget);
        let fits = self.b.ins().icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, left, i64::from(len));
        let ok = self.b.create_block();
        let fail = self.cold_block();
        self.b.ins().brif(fits, ok, &[], fail, &[]);
        self.enter(fail);
        self.jump_fault(fault::BUDGET, pc);
        self.enter(ok);
        let rest = self.b.ins().iadd_imm_s(left, -i64::from(len));
        self.b.def_var(self.budget, rest);
    }

    // ---- memory ------------------------------------------------------------------------------

    pub(super) fn lddw(&mut self, pc: usize, insn: Insn) -> Result<(), JitError> {
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
}
