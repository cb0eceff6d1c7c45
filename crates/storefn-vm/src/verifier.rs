//! Static checks run before a program may be compiled or interpreted.
//!
//! The verifier does not prove memory safety in general (accesses are checked at run time
//! against the invocation's regions, except the stack and context accesses `proofs` proves in
//! bounds) nor termination (the instruction budget bounds every run). It proves the
//! properties the engines rely on to stay simple and identical:
//! - every opcode is in the RFC 9669 allow-list with valid fields (registers r0-r10, offsets
//!   meaningful for the operation, known atomic operations, `lddw` with src = 0 only);
//! - `lddw` pairs are intact; global relocations point at `lddw` slots inside the image;
//! - jumps stay inside their function and never land on the second half of an `lddw`;
//! - no function falls through its end; r10 is never written;
//! - no register is read before it is written on some path (forward dataflow over the CFG,
//!   interprocedural for the argument registers of BPF-to-BPF calls);
//! - static call depth <= [`MAX_CALL_DEPTH`], no recursion; stack accesses through r10 stay in
//!   the 512-byte frame; at most [`MAX_INSNS`] slots; helper ids in the program type's table.
//!
//! Every rejection reads `insn #N: <reason>`.

use crate::cfg::{self, is_pseudo_call, rel_target, Cfg};
use crate::helpers;
use crate::insn::{
    Insn, BPF_ALU, BPF_ALU64, BPF_ATOMIC, BPF_CALL, BPF_DIV, BPF_DW, BPF_END, BPF_EXIT, BPF_JA,
    BPF_JMP, BPF_JMP32, BPF_LD, BPF_LDX, BPF_MEM, BPF_MEMSX, BPF_MOD, BPF_MOV, BPF_NEG,
    BPF_PSEUDO_CALL, BPF_ST, BPF_STX, BPF_W, BPF_X,
};
use crate::interp::{atomic, size_bytes};
use crate::program::{ProgType, Program, MAX_CALL_DEPTH, MAX_INSNS, STACK_FRAME_BYTES};

/// The frame pointer register.
const R10: u8 = 10;
/// Argument registers r1-r5 as a bit set.
const ARGS: u16 = 0b11_1110;
/// What a program passed the verifier with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifyStats {
    /// Instruction slots (an `lddw` counts two).
    pub insns: usize,
    /// Entry function plus BPF-to-BPF subprograms.
    pub functions: usize,
    /// Deepest static call chain, in frames (1 = no calls).
    pub max_call_depth: usize,
}

/// A rejection: the instruction index and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("insn #{insn}: {reason}")]
#[non_exhaustive]
pub struct VerifyError {
    pub insn: usize,
    pub reason: String,
}

fn err<T>(insn: usize, reason: impl Into<String>) -> Result<T, VerifyError> {
    Err(VerifyError { insn, reason: reason.into() })
}

/// Lower-case name used in messages and the CLI.
#[must_use]
pub fn type_name(t: ProgType) -> &'static str {
    match t {
        ProgType::Xrp => "xrp",
        ProgType::Lambda => "lambda",
        ProgType::Offload => "offload",
    }
}

/// Checks `prog`; see the module documentation for the list.
///
/// # Errors
/// The first violation found, as `insn #N: reason`.
pub fn verify(prog: &Program) -> Result<VerifyStats, VerifyError> {
    analyze(prog).map(|(stats, _)| stats)
}

/// [`verify`], keeping the control-flow analysis for [`VerifiedProgram`].
fn analyze(prog: &Program) -> Result<(VerifyStats, Cfg), VerifyError> {
    let insns = &prog.insns;
    if insns.is_empty() {
        return err(0, "empty program");
    }
    if insns.len() > MAX_INSNS {
        return err(
            MAX_INSNS,
            format!("program has {} slots, the limit is {MAX_INSNS}", insns.len()),
        );
    }
    let second = cfg::lddw_halves(insns)?;
    for (pc, i) in insns.iter().enumerate() {
        if !second[pc] {
            check_insn(prog.prog_type, pc, *i)?;
        }
    }
    check_relocs(prog, &second)?;
    let cfg = Cfg::new(insns, second)?;
    let (order, depth) = call_graph(insns, &cfg)?;
    let nfuncs = cfg.functions().len();
    let mut needs = vec![0u16; nfuncs];
    let mut returns = vec![false; nfuncs];
    for f in order {
        let (n, r) = dataflow(insns, &cfg, f, &needs, &returns)?;
        needs[f] = n;
        returns[f] = r;
    }
    let stats = VerifyStats { insns: insns.len(), functions: nfuncs, max_call_depth: depth };
    Ok((stats, cfg))
}

/// A program that passed [`verify`], with the control-flow analysis the engines share.
///
/// The only way to get one is [`VerifiedProgram::new`] (or [`crate::load_verified`]), so an
/// [`crate::Instance`] or [`crate::jit::JitProgram`] built from it runs only what the verifier
/// accepted. It dereferences to the (read-only) [`Program`].
///
/// ```compile_fail
/// // An unverified Program is not accepted by Instance::new.
/// let prog = storefn_vm::load(&[], None, storefn_vm::ProgType::Xrp).unwrap();
/// let _ = storefn_vm::Instance::new(std::sync::Arc::new(prog), storefn_vm::Engine::Jit);
/// ```
///
/// ```compile_fail
/// // Nor can a VerifiedProgram be assembled around an unverified one.
/// let prog = storefn_vm::load(&[], None, storefn_vm::ProgType::Xrp).unwrap();
/// let _ = storefn_vm::VerifiedProgram { prog, cfg: todo!(), stats: todo!(), in_bounds: todo!() };
/// ```
///
/// ```no_run
/// // The accepted shape.
/// let prog = storefn_vm::load(&[], None, storefn_vm::ProgType::Xrp).unwrap();
/// let prog = storefn_vm::VerifiedProgram::new(prog).unwrap();
/// let _ = storefn_vm::Instance::new(std::sync::Arc::new(prog), storefn_vm::Engine::Jit);
/// ```
#[derive(Debug, Clone)]
pub struct VerifiedProgram {
    prog: Program,
    cfg: Cfg,
    stats: VerifyStats,
    /// Per slot: the access there is proved in bounds, and what those proofs need
    /// (`proofs.rs`).
    in_bounds: crate::proofs::InBounds,
}

impl VerifiedProgram {
    /// Verifies `prog`.
    ///
    /// # Errors
    /// The first violation found, as `insn #N: reason`.
    pub fn new(prog: Program) -> Result<Self, VerifyError> {
        let (stats, mut cfg) = analyze(&prog)?;
        let states = crate::callees::analyze(&prog, &cfg);
        let in_bounds = crate::proofs::in_bounds(&prog, &cfg, &states);
        let counted = crate::loops::counted_loops(&prog, &cfg, &states);
        let blocks = crate::loops::block_loops(&prog, &cfg, &states, &counted);
        cfg.precharge(&prog.insns, &counted, &blocks);
        Ok(Self { prog, cfg, stats, in_bounds })
    }

    /// Did the verifier prove the load, store or atomic at `pc` in bounds of memory every
    /// invocation is granted (its stack frame through r10, its context, or for xrp the first
    /// [`VerifiedProgram::xrp_min_bytes`] of `data` / `scratch`)? The JIT drops the run-time
    /// check exactly there (`proofs.rs`).
    #[must_use]
    pub fn access_in_bounds(&self, pc: usize) -> bool {
        self.in_bounds.at.get(pc).copied().unwrap_or(false)
    }

    /// Per-slot [`VerifiedProgram::access_in_bounds`].
    #[must_use]
    pub(crate) fn in_bounds(&self) -> &[bool] {
        &self.in_bounds.at
    }

    /// Per slot: the load there reads a value an xrp call passes the entry function in a
    /// register (`proofs.rs`, [`crate::proofs::Preload`]).
    #[must_use]
    pub(crate) fn preloads(&self) -> &[Option<crate::proofs::Preload>] {
        &self.in_bounds.preload
    }

    /// `(proved, all)`: the program's loads, stores and atomics, and how many of them
    /// [`VerifiedProgram::access_in_bounds`] holds for (`storefn prog verify --proofs`).
    #[must_use]
    pub fn proved_accesses(&self) -> (usize, usize) {
        let access = |pc: &usize| {
            !self.cfg.is_second_half(*pc)
                && matches!(self.prog.insns[*pc].class(), BPF_LDX | BPF_ST | BPF_STX)
        };
        let all: Vec<usize> = (0..self.prog.insns.len()).filter(access).collect();
        (all.iter().filter(|&&pc| self.access_in_bounds(pc)).count(), all.len())
    }

    /// `(data, scratch)` bytes an xrp invocation must be lent for the proved accesses to hold
    /// (0 when none rests on that buffer). `Instance::run_xrp` runs a call with shorter buffers
    /// on the interpreter.
    #[must_use]
    pub fn xrp_min_bytes(&self) -> (u64, u64) {
        (self.in_bounds.data_bytes, self.in_bounds.scratch_bytes)
    }

    /// What the program passed the verifier with.
    #[must_use]
    pub fn stats(&self) -> VerifyStats {
        self.stats
    }

    /// Its control flow (functions, basic blocks).
    #[must_use]
    pub fn cfg(&self) -> &Cfg {
        &self.cfg
    }

    /// The verified program.
    #[must_use]
    pub fn program(&self) -> &Program {
        &self.prog
    }
}

impl std::ops::Deref for VerifiedProgram {
    type Target = Program;
    fn deref(&self) -> &Program {
        &self.prog
    }
}

fn check_reg(pc: usize, r: u8) -> Result<(), VerifyError> {
    if r > R10 {
        return err(pc, format!("invalid register r{r}"));
    }
    Ok(())
}

fn check_dst_writable(pc: usize, r: u8) -> Result<(), VerifyError> {
    check_reg(pc, r)?;
    if r == R10 {
        return err(pc, "r10 is read-only");
    }
    Ok(())
}

fn unknown(pc: usize, i: Insn) -> Result<(), VerifyError> {
    err(pc, format!("unknown opcode {:#04x}", i.op))
}

/// The opcode allow-list (RFC 9669) and field checks of one instruction.
fn check_insn(t: ProgType, pc: usize, i: Insn) -> Result<(), VerifyError> {
    // Unused register fields must be valid too: the engines rely on every field being <= r10.
    check_reg(pc, i.dst)?;
    check_reg(pc, i.src)?;
    match i.class() {
        BPF_ALU | BPF_ALU64 => check_alu(pc, i),
        BPF_JMP | BPF_JMP32 => check_jmp(t, pc, i),
        BPF_LD => {
            if !i.is_lddw() {
                return err(pc, format!("unsupported legacy load {:#04x}", i.op));
            }
            if i.src != 0 {
                return err(
                    pc,
                    format!("lddw with src={} (map and pseudo loads are not supported)", i.src),
                );
            }
            check_dst_writable(pc, i.dst)
        }
        BPF_LDX => {
            let sx_ok = i.op & 0x18 != BPF_DW;
            match i.op & 0xe0 {
                BPF_MEM => {}
                BPF_MEMSX if sx_ok => {}
                _ => return unknown(pc, i),
            }
            check_reg(pc, i.src)?;
            check_dst_writable(pc, i.dst)?;
            check_stack(pc, i.src, i.off, size_bytes(i.op))
        }
        BPF_ST => {
            if i.op & 0xe0 != BPF_MEM {
                return unknown(pc, i);
            }
            check_reg(pc, i.dst)?;
            check_stack(pc, i.dst, i.off, size_bytes(i.op))
        }
        _ => check_stx(pc, i),
    }
}

fn check_stx(pc: usize, i: Insn) -> Result<(), VerifyError> {
    match i.op & 0xe0 {
        BPF_MEM => {}
        BPF_ATOMIC => {
            let size = i.op & 0x18;
            if size != BPF_W && size != BPF_DW {
                return err(pc, "atomic operation must be 32 or 64 bits wide");
            }
            let base = i.imm & !atomic::FETCH;
            let known = [atomic::ADD, atomic::OR, atomic::AND, atomic::XOR].contains(&base)
                || i.imm == atomic::XCHG
                || i.imm == atomic::CMPXCHG;
            if !known {
                return err(pc, format!("unknown atomic operation {:#x}", i.imm));
            }
            if i.imm & atomic::FETCH != 0 && i.imm != atomic::CMPXCHG {
                check_dst_writable(pc, i.src)?;
            }
        }
        _ => return unknown(pc, i),
    }
    check_reg(pc, i.src)?;
    check_reg(pc, i.dst)?;
    check_stack(pc, i.dst, i.off, size_bytes(i.op))
}

/// Accesses through r10 must stay inside the current 512-byte frame.
fn check_stack(pc: usize, base: u8, off: i16, n: u64) -> Result<(), VerifyError> {
    if base != R10 {
        return Ok(());
    }
    let off = i64::from(off);
    let frame = STACK_FRAME_BYTES as i64;
    let n = n as i64;
    if off < -frame || off + n > 0 {
        return err(
            pc,
            format!("stack access r10{off:+} of {n} bytes is outside the {frame}-byte frame"),
        );
    }
    Ok(())
}

fn check_alu(pc: usize, i: Insn) -> Result<(), VerifyError> {
    let is64 = i.class() == BPF_ALU64;
    let x = i.op & BPF_X != 0;
    let ok = match i.op & 0xf0 {
        BPF_DIV | BPF_MOD => i.off == 0 || i.off == 1,
        BPF_NEG => !x && i.off == 0,
        BPF_MOV if x => matches!(i.off, 0 | 8 | 16) || (is64 && i.off == 32),
        BPF_END => !(is64 && x) && i.off == 0 && matches!(i.imm, 16 | 32 | 64),
        0xe0 | 0xf0 => false,
        _ => i.off == 0,
    };
    if !ok {
        return err(
            pc,
            format!("invalid ALU instruction {:#04x} (off={}, imm={})", i.op, i.off, i.imm),
        );
    }
    if x && i.op & 0xf0 != BPF_END {
        check_reg(pc, i.src)?;
    }
    check_dst_writable(pc, i.dst)
}

fn check_jmp(t: ProgType, pc: usize, i: Insn) -> Result<(), VerifyError> {
    let is32 = i.class() == BPF_JMP32;
    match i.op & 0xf0 {
        BPF_JA => {
            if i.op & BPF_X != 0 {
                return unknown(pc, i);
            }
        }
        BPF_CALL => {
            if is32 || i.op & BPF_X != 0 {
                return unknown(pc, i);
            }
            match i.src {
                0 if !helpers::allowed(t, i.imm as u32) => {
                    return err(
                        pc,
                        format!("unknown helper {} for {} programs", i.imm, type_name(t)),
                    );
                }
                0 | BPF_PSEUDO_CALL => {}
                s => return err(pc, format!("unsupported call kind src={s}")),
            }
        }
        BPF_EXIT => {
            if is32 || i.op & BPF_X != 0 {
                return unknown(pc, i);
            }
        }
        0xe0 | 0xf0 => return unknown(pc, i),
        _ => {
            check_reg(pc, i.dst)?;
            if i.op & BPF_X != 0 {
                check_reg(pc, i.src)?;
            }
        }
    }
    Ok(())
}

fn check_relocs(prog: &Program, second: &[bool]) -> Result<(), VerifyError> {
    let mut last = None;
    for &(pc, off) in &prog.global_relocs {
        if last.is_some_and(|l| l >= pc) {
            return err(pc, "global relocations are not sorted by instruction");
        }
        last = Some(pc);
        if !prog.insns.get(pc).is_some_and(Insn::is_lddw) || second[pc] {
            return err(pc, "global relocation on an instruction that is not lddw");
        }
        if off > prog.globals.len() as u64 {
            return err(
                pc,
                format!("global offset {off} is outside the {}-byte image", prog.globals.len()),
            );
        }
    }
    Ok(())
}

/// Checks recursion and depth; returns functions callees-first and the deepest chain.
fn call_graph(insns: &[Insn], cfg: &Cfg) -> Result<(Vec<usize>, usize), VerifyError> {
    let funcs = cfg.functions();
    let callees: Vec<Vec<(usize, usize)>> = (0..funcs.len())
        .map(|f| {
            let (s, e) = cfg.func_range(f);
            (s..e)
                .filter(|&pc| is_pseudo_call(insns[pc]) && !cfg.is_second_half(pc))
                .filter_map(|pc| {
                    let t = rel_target(insns, pc, i64::from(insns[pc].imm))?;
                    Some((pc, cfg.func_of(t)))
                })
                .collect()
        })
        .collect();
    // Iterative DFS: 0 = unvisited, 1 = on the stack, 2 = done.
    let mut state = vec![0u8; funcs.len()];
    let mut height = vec![1usize; funcs.len()];
    let mut order = Vec::new();
    let mut stack = vec![(0usize, 0usize)];
    state[0] = 1;
    while let Some(&mut (f, ref mut k)) = stack.last_mut() {
        if let Some(&(pc, g)) = callees[f].get(*k) {
            *k += 1;
            match state[g] {
                1 => return err(pc, format!("recursive call to the function at #{}", funcs[g])),
                0 => {
                    state[g] = 1;
                    stack.push((g, 0));
                }
                _ => {}
            }
            if stack.len() > MAX_CALL_DEPTH {
                return err(pc, format!("call depth exceeds {MAX_CALL_DEPTH} frames"));
            }
        } else {
            height[f] = 1 + callees[f].iter().map(|&(_, g)| height[g]).max().unwrap_or(0);
            state[f] = 2;
            order.push(f);
            stack.pop();
        }
    }
    // A finished callee reached again through another path can still make a chain too deep.
    check_depth(&callees, &height, 0, 1)?;
    // Functions never called from the entry are still checked (they may be called via a path
    // the entry does not take; cheap to be thorough).
    for f in 0..funcs.len() {
        if state[f] == 0 {
            order.insert(0, f);
            height[f] = 1;
        }
    }
    Ok((order, height[0]))
}

fn check_depth(
    callees: &[Vec<(usize, usize)>],
    height: &[usize],
    f: usize,
    level: usize,
) -> Result<(), VerifyError> {
    if level + height[f] - 1 <= MAX_CALL_DEPTH {
        return Ok(());
    }
    for &(pc, g) in &callees[f] {
        if level + height[g] > MAX_CALL_DEPTH {
            if level + 1 > MAX_CALL_DEPTH {
                return err(pc, format!("call depth exceeds {MAX_CALL_DEPTH} frames"));
            }
            return check_depth(callees, height, g, level + 1);
        }
    }
    Ok(())
}

/// Registers an instruction reads and writes, as bit sets (r0 = bit 0).
fn uses_defs(i: Insn) -> (u16, u16) {
    let d = 1u16 << (i.dst & 15);
    let s = 1u16 << (i.src & 15);
    let x = i.op & BPF_X != 0;
    match i.class() {
        BPF_ALU | BPF_ALU64 => {
            let op = i.op & 0xf0;
            let src = if x && op != BPF_END { s } else { 0 };
            let dst = if op == BPF_MOV { 0 } else { d };
            (src | dst, d)
        }
        BPF_LD => (0, d),
        BPF_LDX => (s, d),
        BPF_ST => (d, 0),
        BPF_STX if i.op & 0xe0 == BPF_ATOMIC => {
            if i.imm == atomic::CMPXCHG {
                (d | s | 1, 1)
            } else if i.imm & atomic::FETCH != 0 {
                (d | s, s)
            } else {
                (d | s, 0)
            }
        }
        BPF_STX => (d | s, 0),
        _ => match i.op & 0xf0 {
            BPF_JA | BPF_CALL | BPF_EXIT => (0, 0),
            _ => (d | if x { s } else { 0 }, 0),
        },
    }
}

/// Argument registers a helper reads (r1..rN).
fn helper_args(id: u32) -> u16 {
    match id {
        helpers::BPF_TRACE_PRINTK | crate::offload::STOREFN_TABLE_LOOKUP => 0b110,
        crate::offload::STOREFN_TABLE_INSERT | crate::offload::STOREFN_TABLE_DELETE => 0b10,
        _ => 0b1110,
    }
}

fn first_reg(bits: u16) -> u16 {
    bits.trailing_zeros() as u16
}

/// Forward "definitely written" dataflow over function `f`. Returns the argument registers the
/// function may read before writing (its callers must have written them) and whether r0 is
/// written on every path to `exit`.
fn dataflow(
    insns: &[Insn],
    cfg: &Cfg,
    f: usize,
    needs_of: &[u16],
    returns_of: &[bool],
) -> Result<(u16, bool), VerifyError> {
    let (start, end) = cfg.func_range(f);
    // State per slot: (definitely written, may still hold the caller's argument).
    let mut state: Vec<Option<(u16, u16)>> = vec![None; end - start];
    let entry = if f == 0 { (0b10, 0) } else { (ARGS, ARGS) };
    let entry = (entry.0 | 1 << R10, entry.1);
    state[0] = Some(entry);
    let mut work = vec![start];
    let mut needs = 0u16;
    let mut returns = true;
    while let Some(pc) = work.pop() {
        let Some((mut init, mut untouched)) = state[pc - start] else { continue };
        let i = insns[pc];
        let (mut uses, mut defs) = uses_defs(i);
        let mut clobber = 0u16;
        let is_call = i.op == BPF_JMP | BPF_CALL;
        if is_call {
            clobber = ARGS;
            if i.src == BPF_PSEUDO_CALL {
                let g = rel_target(insns, pc, i64::from(i.imm)).map_or(0, |t| cfg.func_of(t));
                uses = needs_of[g];
                defs = u16::from(returns_of[g]);
            } else {
                uses = helper_args(i.imm as u32);
                defs = 1;
            }
        }
        if i.op == BPF_JMP | BPF_EXIT {
            if init & 1 == 0 {
                if f == 0 {
                    return err(pc, "r0 is not set before exit");
                }
                returns = false;
            }
            continue;
        }
        let missing = uses & !init;
        if missing != 0 {
            return err(pc, format!("r{} is read before it is written", first_reg(missing)));
        }
        needs |= uses & untouched;
        init = (init & !clobber) | defs;
        untouched &= !(clobber | defs);
        for s in cfg.successors(insns, pc).into_iter().flatten() {
            if s < start || s >= end || cfg.is_second_half(s) {
                continue; // checked by check_function; unreachable here
            }
            let new = match state[s - start] {
                None => (init, untouched),
                Some((a, b)) => (a & init, b | untouched),
            };
            if state[s - start] != Some(new) {
                state[s - start] = Some(new);
                work.push(s);
            }
        }
    }
    Ok((needs, returns))
}
