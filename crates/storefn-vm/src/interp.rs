//! The reference interpreter: the semantics the JIT must match, instruction by instruction.
//!
//! Semantics (RFC 9669): 32-bit ALU results are zero-extended; shift amounts are masked to the
//! operand width; `x / 0 = 0` and `x % 0 = x`; signed division `INT_MIN / -1 = INT_MIN` and
//! `INT_MIN % -1 = 0` (wrapping). Every load and store is checked against the invocation's
//! regions ([`crate::mem`]); reaching a charge point (function entry, loop header) spends its
//! charge from the instruction budget ([`crate::cfg`]), a helper what it costs
//! ([`crate::helpers`]); callee-saved
//! r6-r9 and the frame pointer r10 are restored when a BPF-to-BPF call returns.
//!
//! Details the JIT must match (differential tests compare r0, memory effects and the error):
//! - at entry r1 = ctx, r10 = `stack_top`, every other register is 0;
//! - after a helper call r1-r5 keep their values, after a BPF-to-BPF call they hold what the
//!   callee left (the verifier forbids reading them either way, so this is unobservable);
//! - a fault names the faulting instruction: the load/store/atomic, the helper `call`, the
//!   charge point whose charge did not fit in the budget left (budget in the
//!   error = `RunEnv::insn_budget`), the `call` that would exceed [`MAX_CALL_DEPTH`] frames;
//! - atomics check the write regions first (`BadWrite`); every instance's write regions lie
//!   inside its read regions, so an atomic never reports `BadRead`;
//! - an `lddw` listed in `Program::global_relocs` loads `RunEnv::globals_base + offset`; any
//!   other `lddw` loads its 64-bit immediate.

use crate::helpers;
use crate::insn::{
    Insn, BPF_ADD, BPF_ALU, BPF_ALU64, BPF_AND, BPF_ARSH, BPF_ATOMIC, BPF_B, BPF_CALL, BPF_DIV,
    BPF_END, BPF_EXIT, BPF_H, BPF_JA, BPF_JEQ, BPF_JGE, BPF_JGT, BPF_JLE, BPF_JLT, BPF_JMP,
    BPF_JMP32, BPF_JNE, BPF_JSET, BPF_JSGE, BPF_JSGT, BPF_JSLE, BPF_JSLT, BPF_LD, BPF_LDX, BPF_LSH,
    BPF_MEM, BPF_MEMSX, BPF_MOD, BPF_MOV, BPF_MUL, BPF_NEG, BPF_OR, BPF_PSEUDO_CALL, BPF_RSH,
    BPF_ST, BPF_STX, BPF_SUB, BPF_W, BPF_X, BPF_XOR,
};
use crate::program::{RunEnv, MAX_CALL_DEPTH, STACK_FRAME_BYTES};
use crate::{VerifiedProgram, VmError};

/// Atomic operation codes (the `imm` of `STX | ATOMIC`), RFC 9669 section 5.3.
pub mod atomic {
    pub const ADD: i32 = 0x00;
    pub const OR: i32 = 0x40;
    pub const AND: i32 = 0x50;
    pub const XOR: i32 = 0xa0;
    /// Modifier: also load the old value into `src`.
    pub const FETCH: i32 = 0x01;
    pub const XCHG: i32 = 0xe0 | FETCH;
    pub const CMPXCHG: i32 = 0xf0 | FETCH;
}

/// Registers saved by a BPF-to-BPF call and restored by its `exit`.
#[derive(Debug, Clone, Copy, Default)]
struct Frame {
    ret_pc: usize,
    callee_saved: [u64; 4],
    fp: u64,
}

/// Bytes moved by a load/store of this size code.
#[must_use]
pub fn size_bytes(op: u8) -> u64 {
    match op & 0x18 {
        BPF_W => 4,
        BPF_H => 2,
        BPF_B => 1,
        _ => 8,
    }
}

/// Runs `prog` once: r1 = `ctx_addr`, r10 = `stack_top`; returns r0. `env.insns_left` holds
/// the instruction budget for this invocation.
///
/// # Errors
/// The fault that aborted the invocation (bad access, budget, helper failure, ...).
///
/// # Safety
/// Every range in `env.read` must be memory that stays valid for reads, and every range in
/// `env.write` memory valid for writes and not borrowed by any Rust reference, for the whole
/// call; `[stack_top - STACK_BYTES, stack_top)` must be inside both sets (and, for the JIT,
/// the program type's context at `ctx_addr` inside `env.read`, an `xrp` context's writable
/// fields inside `env.write`); `env.host` must be
/// null or point at a `HostState` not otherwise borrowed during the call. (The program itself
/// can only reach memory through these regions.) [`crate::Instance`] upholds all of this.
pub unsafe fn run(
    prog: &VerifiedProgram,
    env: &mut RunEnv,
    ctx_addr: u64,
    stack_top: u64,
) -> Result<u64, VmError> {
    // SAFETY: forwarded from the caller.
    unsafe { run_counted(prog, env, ctx_addr, stack_top, &mut 0) }
}

/// [`run`], adding every instruction it executes to `executed` (tests check the budget against
/// it: no run executes more instructions than it was charged).
///
/// # Safety
/// As [`run`].
pub(crate) unsafe fn run_counted(
    prog: &VerifiedProgram,
    env: &mut RunEnv,
    ctx_addr: u64,
    stack_top: u64,
    executed: &mut u64,
) -> Result<u64, VmError> {
    let insns = &prog.insns[..];
    let charge = prog.cfg().charges();
    let mut r = [0u64; 11];
    r[1] = ctx_addr;
    r[10] = stack_top;
    let mut frames = [Frame::default(); MAX_CALL_DEPTH];
    let mut depth = 0usize;
    let mut pc = 0usize;
    loop {
        let Some(&i) = insns.get(pc) else {
            return Err(VmError::Invalid { insn: pc, reason: "execution ran off the end" });
        };
        let cost = u64::from(charge[pc]);
        if cost != 0 {
            if env.insns_left < cost {
                return Err(VmError::BudgetExhausted { insn: pc, budget: env.insn_budget });
            }
            env.insns_left -= cost;
        }
        *executed += 1;
        if i.dst > 10 || i.src > 10 {
            return Err(VmError::Invalid { insn: pc, reason: "register number above r10" });
        }
        let d = usize::from(i.dst);
        let s = usize::from(i.src);
        match i.class() {
            BPF_ALU64 | BPF_ALU => {
                r[d] =
                    alu(i, r[d], r[s]).ok_or(VmError::Invalid { insn: pc, reason: "bad ALU" })?;
            }
            BPF_LD => {
                let hi = insns.get(pc + 1).filter(|_| i.is_lddw()).ok_or(VmError::Invalid {
                    insn: pc,
                    reason: "legacy load or truncated lddw",
                })?;
                r[d] = match prog.global_relocs.binary_search_by_key(&pc, |x| x.0) {
                    Ok(k) => env.globals_base.wrapping_add(prog.global_relocs[k].1),
                    Err(_) => u64::from(i.imm as u32) | (u64::from(hi.imm as u32) << 32),
                };
                pc += 2;
                continue;
            }
            BPF_LDX => {
                let addr = r[s].wrapping_add_signed(i64::from(i.off));
                let n = size_bytes(i.op);
                let v = load(env, pc, addr, n)?;
                r[d] = match i.op & 0xe0 {
                    BPF_MEM => v,
                    BPF_MEMSX => sign_extend(v, n),
                    _ => return Err(VmError::Invalid { insn: pc, reason: "bad load mode" }),
                };
            }
            BPF_ST | BPF_STX => {
                let addr = r[d].wrapping_add_signed(i64::from(i.off));
                let n = size_bytes(i.op);
                let val = if i.class() == BPF_ST { i64::from(i.imm) as u64 } else { r[s] };
                match i.op & 0xe0 {
                    BPF_MEM => store(env, pc, addr, n, val)?,
                    BPF_ATOMIC if i.class() == BPF_STX => {
                        atomic_op(env, &mut r, pc, i, addr, n)?;
                    }
                    _ => return Err(VmError::Invalid { insn: pc, reason: "bad store mode" }),
                }
            }
            BPF_JMP | BPF_JMP32 => match i.op & 0xf0 {
                BPF_EXIT if i.op == BPF_JMP | BPF_EXIT => {
                    if depth == 0 {
                        return Ok(r[0]);
                    }
                    depth -= 1;
                    let f = frames[depth];
                    r[6..10].copy_from_slice(&f.callee_saved);
                    r[10] = f.fp;
                    pc = f.ret_pc;
                    continue;
                }
                BPF_CALL if i.op == BPF_JMP | BPF_CALL => {
                    if i.src == BPF_PSEUDO_CALL {
                        if depth + 1 >= MAX_CALL_DEPTH {
                            return Err(VmError::CallDepth { insn: pc, max: MAX_CALL_DEPTH });
                        }
                        let mut callee_saved = [0u64; 4];
                        callee_saved.copy_from_slice(&r[6..10]);
                        frames[depth] = Frame { ret_pc: pc + 1, callee_saved, fp: r[10] };
                        depth += 1;
                        r[10] = r[10].wrapping_sub(STACK_FRAME_BYTES as u64);
                        pc = target(insns, pc, i64::from(i.imm))?;
                        continue;
                    }
                    let args = [r[1], r[2], r[3], r[4], r[5]];
                    // SAFETY: `env` is this call's environment, valid by `run`'s contract.
                    r[0] = unsafe { helpers::call(env, prog.prog_type, i.imm as u32, args, pc)? };
                }
                op => {
                    let (jump, rel) = if op == BPF_JA {
                        // `gotol` (JMP32 | JA) carries its offset in imm.
                        (
                            true,
                            if i.class() == BPF_JMP { i64::from(i.off) } else { i64::from(i.imm) },
                        )
                    } else {
                        let b = if i.op & BPF_X != 0 { r[s] } else { i64::from(i.imm) as u64 };
                        let c = cond(op, r[d], b, i.class() == BPF_JMP32)
                            .ok_or(VmError::Invalid { insn: pc, reason: "bad jump" })?;
                        (c, i64::from(i.off))
                    };
                    if jump {
                        pc = target(insns, pc, rel)?;
                        continue;
                    }
                }
            },
            _ => return Err(VmError::Invalid { insn: pc, reason: "unknown class" }),
        }
        pc += 1;
    }
}

fn target(insns: &[Insn], pc: usize, rel: i64) -> Result<usize, VmError> {
    let t = i64::try_from(pc).unwrap_or(i64::MAX).saturating_add(rel).saturating_add(1);
    usize::try_from(t)
        .ok()
        .filter(|&t| t < insns.len())
        .ok_or(VmError::Invalid { insn: pc, reason: "jump target out of range" })
}

fn sign_extend(v: u64, n: u64) -> u64 {
    match n {
        1 => i64::from(v as u8 as i8) as u64,
        2 => i64::from(v as u16 as i16) as u64,
        4 => i64::from(v as u32 as i32) as u64,
        _ => v,
    }
}

/// Loads `n` bytes at `addr` after checking the read regions (`run`'s safety contract makes
/// them valid).
fn load(env: &RunEnv, pc: usize, addr: u64, n: u64) -> Result<u64, VmError> {
    if !env.read.allows(addr, n) {
        return Err(VmError::BadRead { insn: pc, at: env.read.place(addr), len: n });
    }
    let p = addr as usize;
    // SAFETY: `[addr, addr+n)` lies inside a read region, which `run`'s contract makes valid
    // for reads for the whole invocation. Unaligned reads are used because programs may compute any address.
    let v = unsafe {
        match n {
            1 => u64::from((p as *const u8).read()),
            2 => u64::from((p as *const u16).read_unaligned()),
            4 => u64::from((p as *const u32).read_unaligned()),
            _ => (p as *const u64).read_unaligned(),
        }
    };
    Ok(v)
}

/// Stores the low `n` bytes of `val` at `addr` after checking the write regions.
fn store(env: &RunEnv, pc: usize, addr: u64, n: u64, val: u64) -> Result<(), VmError> {
    if !env.write.allows(addr, n) {
        return Err(VmError::BadWrite { insn: pc, at: env.read.place(addr), len: n });
    }
    let p = addr as usize;
    // SAFETY: `[addr, addr+n)` lies inside a write region, which `run`'s contract makes live,
    // writable memory not borrowed elsewhere during the invocation.
    unsafe {
        match n {
            1 => (p as *mut u8).write(val as u8),
            2 => (p as *mut u16).write_unaligned(val as u16),
            4 => (p as *mut u32).write_unaligned(val as u32),
            _ => (p as *mut u64).write_unaligned(val),
        }
    }
    Ok(())
}

/// `STX | ATOMIC`: read-modify-write of 4 or 8 bytes. An invocation runs on one thread and its
/// writable regions are not shared while it runs, so a checked load + store is atomic enough.
fn atomic_op(
    env: &RunEnv,
    r: &mut [u64; 11],
    pc: usize,
    i: Insn,
    addr: u64,
    n: u64,
) -> Result<(), VmError> {
    if n != 4 && n != 8 {
        return Err(VmError::Invalid { insn: pc, reason: "atomic size must be 4 or 8" });
    }
    if !env.write.allows(addr, n) {
        return Err(VmError::BadWrite { insn: pc, at: env.read.place(addr), len: n });
    }
    let old = load(env, pc, addr, n)?;
    let mask = if n == 4 { u64::from(u32::MAX) } else { u64::MAX };
    let s = usize::from(i.src);
    let src = r[s] & mask;
    let new = match i.imm & !atomic::FETCH {
        atomic::ADD => old.wrapping_add(src) & mask,
        atomic::OR => old | src,
        atomic::AND => old & src,
        atomic::XOR => old ^ src,
        _ if i.imm == atomic::XCHG => src,
        _ if i.imm == atomic::CMPXCHG => {
            let new = if old == r[0] & mask { src } else { old };
            store(env, pc, addr, n, new)?;
            r[0] = old;
            return Ok(());
        }
        _ => return Err(VmError::Invalid { insn: pc, reason: "bad atomic operation" }),
    };
    store(env, pc, addr, n, new)?;
    if i.imm & atomic::FETCH != 0 {
        r[s] = old;
    }
    Ok(())
}

/// One ALU instruction; `None` for an encoding the verifier rejects.
#[must_use]
pub fn alu(i: Insn, dst: u64, src_reg: u64) -> Option<u64> {
    let op = i.op & 0xf0;
    let is64 = i.class() == BPF_ALU64;
    if op == BPF_END {
        return end(i, dst);
    }
    let src = if i.op & BPF_X != 0 {
        src_reg
    } else if is64 {
        i64::from(i.imm) as u64
    } else {
        u64::from(i.imm as u32)
    };
    if is64 {
        alu64(op, i.off, dst, src)
    } else {
        alu32(op, i.off, dst as u32, src as u32).map(u64::from)
    }
}

fn end(i: Insn, d: u64) -> Option<u64> {
    // ALU64 | END is `bswap`; ALU | END | K is "to little endian" (a truncation on this
    // little-endian VM); ALU | END | X is "to big endian" (a swap).
    let swap = i.class() == BPF_ALU64 || i.op & BPF_X != 0;
    if i.class() == BPF_ALU64 && i.op & BPF_X != 0 {
        return None;
    }
    Some(match (i.imm, swap) {
        (16, true) => u64::from((d as u16).swap_bytes()),
        (32, true) => u64::from((d as u32).swap_bytes()),
        (64, true) => d.swap_bytes(),
        (16, false) => d & 0xffff,
        (32, false) => d & 0xffff_ffff,
        (64, false) => d,
        _ => return None,
    })
}

/// The arithmetic both widths share: `$u`/`$i` are the unsigned/signed register types and
/// `$shift_mask` is the width minus one (RFC 9669 masks shift amounts to the operand width).
/// `MOV` stays with each caller because its sign-extending forms differ by width.
macro_rules! alu_arith {
    ($op:expr, $off:expr, $d:expr, $s:expr, $u:ty, $i:ty, $shift_mask:expr) => {{
        let (op, d, s): (u8, $u, $u) = ($op, $d, $s);
        let signed = $off == 1;
        Some(match op {
            BPF_ADD => d.wrapping_add(s),
            BPF_SUB => d.wrapping_sub(s),
            BPF_MUL => d.wrapping_mul(s),
            BPF_DIV if s == 0 => 0,
            BPF_DIV if signed => (d as $i).wrapping_div(s as $i) as $u,
            BPF_DIV => d / s,
            BPF_MOD if s == 0 => d,
            BPF_MOD if signed => (d as $i).wrapping_rem(s as $i) as $u,
            BPF_MOD => d % s,
            BPF_OR => d | s,
            BPF_AND => d & s,
            BPF_XOR => d ^ s,
            BPF_LSH => d << (s & $shift_mask),
            BPF_RSH => d >> (s & $shift_mask),
            BPF_ARSH => ((d as $i) >> (s & $shift_mask)) as $u,
            BPF_NEG => d.wrapping_neg(),
            _ => return None,
        })
    }};
}

fn alu64(op: u8, off: i16, d: u64, s: u64) -> Option<u64> {
    if op == BPF_MOV {
        return Some(match off {
            8 => i64::from(s as u8 as i8) as u64,
            16 => i64::from(s as u16 as i16) as u64,
            32 => i64::from(s as u32 as i32) as u64,
            _ => s,
        });
    }
    alu_arith!(op, off, d, s, u64, i64, 63)
}

fn alu32(op: u8, off: i16, d: u32, s: u32) -> Option<u32> {
    if op == BPF_MOV {
        return Some(match off {
            8 => i32::from(s as u8 as i8) as u32,
            16 => i32::from(s as u16 as i16) as u32,
            _ => s,
        });
    }
    alu_arith!(op, off, d, s, u32, i32, 31)
}

/// A conditional jump's condition; `None` for an unknown operation.
#[must_use]
pub fn cond(op: u8, a: u64, b: u64, is32: bool) -> Option<bool> {
    let (a, b) = if is32 { (u64::from(a as u32), u64::from(b as u32)) } else { (a, b) };
    let (sa, sb) = if is32 {
        (i64::from(a as u32 as i32), i64::from(b as u32 as i32))
    } else {
        (a as i64, b as i64)
    };
    Some(match op {
        BPF_JEQ => a == b,
        BPF_JNE => a != b,
        BPF_JGT => a > b,
        BPF_JGE => a >= b,
        BPF_JLT => a < b,
        BPF_JLE => a <= b,
        BPF_JSET => a & b != 0,
        BPF_JSGT => sa > sb,
        BPF_JSGE => sa >= sb,
        BPF_JSLT => sa < sb,
        BPF_JSLE => sa <= sb,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ins(op: u8, off: i16, imm: i32) -> Insn {
        Insn { op, dst: 0, src: 0, off, imm }
    }

    #[test]
    fn end_to_le_truncates_and_bswap_swaps() {
        let d = 0x1122_3344_5566_7788;
        assert_eq!(alu(ins(BPF_ALU | BPF_END, 0, 16), d, 0), Some(0x7788));
        assert_eq!(alu(ins(BPF_ALU | BPF_END | BPF_X, 0, 32), d, 0), Some(0x8877_6655));
        assert_eq!(alu(ins(BPF_ALU64 | BPF_END, 0, 64), d, 0), Some(0x8877_6655_4433_2211));
        assert_eq!(alu(ins(BPF_ALU64 | BPF_END, 0, 8), d, 0), None);
    }

    /// Random verified programs (arithmetic, stack traffic, forward and backward jumps, calls)
    /// under random budgets: a run never executes more instructions than it was charged, and
    /// the charge is exact: a finished run fits in exactly what it spent and not in one less.
    #[test]
    fn no_run_executes_more_than_it_was_charged() {
        use crate::insn::{BPF_DW, BPF_JNE, BPF_K, BPF_LDX, BPF_STX};
        use crate::program::STACK_BYTES;
        use rand::rngs::SmallRng;
        use rand::{Rng, SeedableRng};

        let mut stack = vec![0u64; STACK_BYTES / 8];
        let top = stack.as_mut_ptr() as u64 + STACK_BYTES as u64;
        let run_once = |prog: &VerifiedProgram, budget: u64| {
            let mut env = crate::testutil::stack_env(top, budget);
            let mut executed = 0;
            // SAFETY: the only region is `stack`, alive and not borrowed during the call; no
            // host state; r1 is never dereferenced (the programs overwrite it first).
            let r = unsafe { run_counted(prog, &mut env, 0, top, &mut executed) };
            (r, budget - env.insns_left, executed)
        };
        let ins = |op: u8, dst: u8, src: u8, off: i16, imm: i32| Insn { op, dst, src, off, imm };
        let (mut finished, mut stopped) = (0, 0);
        for seed in 0..3000u64 {
            let mut rng = SmallRng::seed_from_u64(seed);
            let mut v: Vec<Insn> = (0..10)
                .map(|r| ins(BPF_ALU64 | BPF_MOV | BPF_K, r, 0, 0, rng.gen_range(0..40)))
                .collect();
            let base = v.len();
            let body = rng.gen_range(2..30usize);
            for at in 0..body {
                let pc = base + at;
                let r = rng.gen_range(0..10u8);
                v.push(match rng.gen_range(0..8) {
                    0..=2 => ins(BPF_ALU64 | BPF_ADD | BPF_K, r, 0, 0, rng.gen_range(-3..4)),
                    3 => ins(BPF_STX | BPF_MEM | BPF_DW, 10, r, -8 * rng.gen_range(1..8), 0),
                    4 => ins(BPF_LDX | BPF_MEM | BPF_DW, r, 10, -8 * rng.gen_range(1..8), 0),
                    5 => ins(BPF_JMP | BPF_CALL, 0, BPF_PSEUDO_CALL, 0, (base + body - pc) as i32),
                    _ => {
                        let to = rng.gen_range(base..base + body) as i64;
                        ins(BPF_JMP | BPF_JNE | BPF_K, r, 0, (to - pc as i64 - 1) as i16, 7)
                    }
                });
            }
            // The entry's exit, then a two-instruction callee.
            v.push(ins(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
            v.push(ins(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 1));
            v.push(ins(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
            let Ok(prog) = VerifiedProgram::new(crate::testutil::xrp_program(v)) else { continue };
            for budget in [rng.gen_range(1..64), 400] {
                let (r, charged, executed) = run_once(&prog, budget);
                assert!(executed <= charged, "seed {seed}: ran {executed}, charged {charged}");
                match r {
                    Ok(v) => {
                        finished += 1;
                        assert_eq!(run_once(&prog, charged).0, Ok(v), "seed {seed}: exact fit");
                        let short = run_once(&prog, charged - 1).0;
                        assert!(
                            matches!(short, Err(VmError::BudgetExhausted { .. })),
                            "seed {seed}: one short gave {short:?}"
                        );
                    }
                    Err(VmError::BudgetExhausted { .. }) => stopped += 1,
                    Err(e) => panic!("seed {seed}: {e}"),
                }
            }
        }
        assert!(finished > 500 && stopped > 500, "finished {finished}, stopped {stopped}");
    }

    #[test]
    fn sign_extend_widths() {
        assert_eq!(sign_extend(0x80, 1), 0xffff_ffff_ffff_ff80);
        assert_eq!(sign_extend(0x7fff, 2), 0x7fff);
        assert_eq!(sign_extend(0x8000_0000, 4), 0xffff_ffff_8000_0000);
        assert_eq!(size_bytes(BPF_LDX | BPF_MEM | crate::insn::BPF_DW), 8);
    }
}
