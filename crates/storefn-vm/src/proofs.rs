//! Accesses the verifier proves in bounds, so the JIT may drop their run-time region check.
//!
//! Two facts are proved, each resting on what every invocation is guaranteed (the `# Safety`
//! contract of [`crate::interp::run`] / [`crate::jit::JitProgram::run`], which
//! [`crate::Instance`] upholds):
//! - **stack**: an access through r10 itself. The verifier checked `off` keeps it inside the
//!   current 512-byte frame; the engines keep r10 at `stack_top - k * 512` with `k` below
//!   `MAX_CALL_DEPTH`; the whole stack block is in both region sets.
//! - **context read**: a load at a constant offset from a register that holds the entry's r1
//!   unchanged (the context pointer) on every path, with `0 <= off` and `off + size` within the
//!   program type's context. The whole context is in the read set. Stores to the context are
//!   not proved (only some of its fields are writable) and keep their check.
//!
//! Anything else (data, scratch, globals, pointer arithmetic) keeps the run-time check.

use crate::cfg::Cfg;
use crate::insn::{Insn, BPF_ALU64, BPF_CALL, BPF_JMP, BPF_LDX, BPF_MOV, BPF_ST, BPF_STX, BPF_X};
use crate::interp::size_bytes;
use crate::program::{ProgType, Program};
use crate::xrp::{LAMBDA_CTX_BYTES, XRP_CTX_BYTES};

/// The frame pointer register.
const R10: u8 = 10;
/// r0-r5: what a call leaves undefined or overwrites.
const CALL_CLOBBERS: u16 = 0b11_1111;

/// Bytes of the context every invocation of `t` may read.
fn ctx_bytes(t: ProgType) -> i64 {
    match t {
        ProgType::Xrp => XRP_CTX_BYTES as i64,
        ProgType::Lambda => LAMBDA_CTX_BYTES as i64,
        ProgType::Offload => crate::offload::OFFLOAD_CTX_BYTES as i64,
    }
}

/// `proven[pc]`: the load, store or atomic at `pc` is in bounds (module documentation).
pub(crate) fn in_bounds(prog: &Program, cfg: &Cfg) -> Vec<bool> {
    let insns = &prog.insns;
    let mut proven = vec![false; insns.len()];
    for (pc, i) in insns.iter().enumerate() {
        if cfg.is_second_half(pc) {
            continue;
        }
        let through_r10 = match i.class() {
            BPF_LDX => i.src == R10,
            BPF_ST | BPF_STX => i.dst == R10,
            _ => false,
        };
        proven[pc] = through_r10;
    }
    let holds_ctx = ctx_registers(insns, cfg);
    let (start, end) = cfg.func_range(0);
    for pc in start..end {
        let i = insns[pc];
        let Some(ctx) = holds_ctx[pc - start] else { continue };
        if i.class() != BPF_LDX || ctx & (1 << i.src) == 0 {
            continue;
        }
        let (off, n) = (i64::from(i.off), size_bytes(i.op) as i64);
        if off >= 0 && off + n <= ctx_bytes(prog.prog_type) {
            proven[pc] = true;
        }
    }
    proven
}

/// Per slot of the entry function, the registers that hold the context pointer on every path
/// reaching it (`None`: unreachable). Forward dataflow, intersection at merges.
fn ctx_registers(insns: &[Insn], cfg: &Cfg) -> Vec<Option<u16>> {
    let (start, end) = cfg.func_range(0);
    let mut state: Vec<Option<u16>> = vec![None; end - start];
    state[0] = Some(1 << 1);
    let mut work = vec![start];
    while let Some(pc) = work.pop() {
        let Some(mut ctx) = state[pc - start] else { continue };
        let i = insns[pc];
        let copy = i.op == BPF_ALU64 | BPF_MOV | BPF_X && i.off == 0;
        if copy {
            ctx = (ctx & !(1 << i.dst)) | (u16::from(ctx & (1 << i.src) != 0) << i.dst);
        } else if i.op == BPF_JMP | BPF_CALL {
            ctx &= !CALL_CLOBBERS;
        } else {
            ctx &= !defs(i);
        }
        for s in cfg.successors(insns, pc).into_iter().flatten() {
            if s < start || s >= end {
                continue;
            }
            let new = state[s - start].map_or(ctx, |old| old & ctx);
            if state[s - start] != Some(new) {
                state[s - start] = Some(new);
                work.push(s);
            }
        }
    }
    state
}

/// Registers an instruction may write (conservative: any register it could define).
fn defs(i: Insn) -> u16 {
    let d = 1u16 << (i.dst & 15);
    let s = 1u16 << (i.src & 15);
    match i.class() {
        BPF_STX => s | 1, // atomics with fetch write src; cmpxchg writes r0
        BPF_ST => 0,
        c if c == BPF_JMP || c == crate::insn::BPF_JMP32 => 0,
        _ => d,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::insn::{BPF_ADD, BPF_DW, BPF_EXIT, BPF_JEQ, BPF_K, BPF_MEM, BPF_W};
    use crate::VerifiedProgram;

    fn ins(op: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn { op, dst, src, off, imm }
    }

    fn proofs(insns: Vec<Insn>) -> Vec<bool> {
        let prog = Program {
            name: "t".into(),
            prog_type: ProgType::Xrp,
            insns,
            globals: Vec::new(),
            globals_rw_start: 0,
            global_relocs: Vec::new(),
        };
        let v = VerifiedProgram::new(prog).unwrap();
        (0..v.insns.len()).map(|pc| v.access_in_bounds(pc)).collect()
    }

    #[test]
    fn stack_and_constant_context_reads_are_proved_nothing_else() {
        let ldx = BPF_LDX | BPF_MEM | BPF_DW;
        let p = vec![
            ins(ldx, 2, 1, 0, 0),                         // 0: ctx->data: proved
            ins(BPF_ALU64 | BPF_MOV | BPF_X, 6, 1, 0, 0), // 1: r6 = ctx
            ins(ldx, 3, 6, 272, 0),                       // 2: ctx->scratch via the copy: proved
            ins(ldx, 3, 6, 280, 0),                       // 3: past the context: checked
            ins(ldx, 4, 2, 0, 0),                         // 4: data: checked
            ins(BPF_ST | BPF_MEM | BPF_W, 10, 0, -4, 1),  // 5: stack: proved
            ins(BPF_ST | BPF_MEM | BPF_W, 6, 0, 8, 1),    // 6: ctx store: checked
            ins(BPF_JMP | BPF_JEQ | BPF_K, 4, 0, 1, 0),   // 7: if r4 == 0 skip the next
            ins(BPF_ALU64 | BPF_ADD | BPF_K, 6, 0, 0, 8), // 8: r6 no longer ctx on one path
            ins(ldx, 0, 6, 0, 0),                         // 9: checked (not ctx on every path)
            ins(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
        ];
        let want = [true, false, true, false, false, true, false, false, false, false, false];
        assert_eq!(proofs(p), want);
    }
}
