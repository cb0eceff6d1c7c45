//! Accesses the verifier proves in bounds, so the JIT may drop their run-time region check.
//!
//! Each proof rests on what every invocation is guaranteed (the `# Safety` contract of
//! [`crate::interp::run`] / [`crate::jit::JitProgram::run`], which [`crate::Instance`]
//! upholds):
//! - **stack**: an access through r10 itself. The verifier checked `off` keeps it inside the
//!   current 512-byte frame; the engines keep r10 at `stack_top - k * 512` with `k` below
//!   `MAX_CALL_DEPTH`; the whole stack block is in both region sets.
//! - **context**: on every path of the range analysis ([`crate::ranges`]) the base register
//!   points into the context at an offset range such that the whole access lies inside the
//!   program type's context (loads), or inside one of the xrp context's writable fields,
//!   `done` or `next_addr[]`+`size[]` (plain stores; λ and offload contexts are read-only).
//! - **xrp data / scratch**: on every path the base register is `ctx.data` (resp.
//!   `ctx.scratch`) plus an offset range such that the access lies in the first
//!   [`XRP_DATA_VIEW_BYTES`] (resp. [`XRP_SCRATCH_BYTES`]) bytes; loads only for `data`
//!   (read-only), loads and plain stores for `scratch`. The largest end offset over these
//!   proofs is the program's [`InBounds::data_bytes`] / [`InBounds::scratch_bytes`]: the JIT's
//!   contract is that `data` / `scratch` are at least that long, and `run_xrp` runs a call
//!   whose buffers are shorter on the interpreter (which checks every access) instead.
//!
//! - **stack through a copy**: on every path the base register is the function's own r10
//!   plus an offset range such that the access lies inside its 512-byte frame (a function
//!   runs in frame k < `MAX_CALL_DEPTH`, the engines check the depth before every call; the
//!   whole stack block is in both region sets). A pointer into a caller's frame passed as an
//!   argument is forgotten at the call ([`crate::ranges::State::callee_entry`]), so it is never
//!   taken for one into the callee's.
//!
//! Every function is analysed, a BPF-to-BPF callee from the states at its call sites
//! ([`crate::callees`]). Anything else (atomics outside the stack, globals, pointers the
//! analysis lost, pointers into a caller's frame) keeps the run-time check.

use crate::cfg::Cfg;
use crate::insn::{BPF_DW, BPF_JMP, BPF_JMP32, BPF_LDX, BPF_MEM, BPF_ST, BPF_STX};
use crate::interp::size_bytes;
use crate::program::{ProgType, Program, STACK_FRAME_BYTES};
use crate::ranges::{self, Base, Val};
use crate::xrp::{
    LAMBDA_CTX_BYTES, XRP_CTX_BYTES, XRP_DATA_VIEW_BYTES, XRP_OFF_DONE, XRP_OFF_NEXT_ADDR,
    XRP_OFF_SCRATCH, XRP_OFF_SLOT, XRP_SCRATCH_BYTES,
};

/// The frame pointer register.
const R10: u8 = 10;

/// What the verifier proved about a program's accesses.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct InBounds {
    /// `at[pc]`: the load, store or atomic at `pc` is in bounds (module documentation).
    pub(crate) at: Vec<bool>,
    /// Bytes of `data` the proved data loads need (0: none proved).
    pub(crate) data_bytes: u64,
    /// Bytes of `scratch` the proved scratch accesses need (0: none proved).
    pub(crate) scratch_bytes: u64,
    /// `preload[pc]`: the load at `pc` reads a value the caller of an xrp entry function
    /// passes in a register ([`Preload`]).
    pub(crate) preload: Vec<Option<Preload>>,
}

/// A load of the entry function whose value an xrp invocation already holds when it calls
/// the compiled code, so the JIT takes it from a register of the entry function instead of
/// reading memory the caller has just written (the key a node search compares with is then
/// not a store-to-load forward away, twice, on every call).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Preload {
    /// `ctx.scratch` (8 bytes): on every path the base is the context at a fixed offset
    /// that puts the load on [`XRP_OFF_SCRATCH`]. The field is read-only to the program (not
    /// in [`ctx_writable`]) and does not change during a call (the run contract), so this
    /// holds anywhere in the entry function.
    ScratchAddr,
    /// The first 8 bytes of `scratch`, proved in bounds: on every path the base is
    /// `ctx.scratch` at a fixed offset that puts the load at 0, and the load is in the entry
    /// function's straight-line start (no store, call or jump before it, nothing jumps into
    /// it), so nothing the program does can have changed those bytes since the call began.
    ScratchWord0,
}

/// Bytes of the context every invocation of `t` may read.
pub(crate) fn ctx_bytes(t: ProgType) -> i64 {
    match t {
        ProgType::Xrp => XRP_CTX_BYTES as i64,
        ProgType::Lambda => LAMBDA_CTX_BYTES as i64,
        ProgType::Offload => crate::offload::OFFLOAD_CTX_BYTES as i64,
    }
}

/// Byte ranges of the context every invocation of `t` may write.
fn ctx_writable(t: ProgType) -> &'static [(i64, i64)] {
    match t {
        ProgType::Xrp => &[
            (XRP_OFF_DONE as i64, XRP_OFF_SLOT as i64),
            (XRP_OFF_NEXT_ADDR as i64, XRP_OFF_SCRATCH as i64),
        ],
        // λ's context is read-only; the offload context's fields are read-only pointers and
        // lengths (crate::offload).
        ProgType::Lambda | ProgType::Offload => &[],
    }
}

/// The proofs for `prog` (module documentation), given the range analysis' states per slot of
/// the program ([`crate::callees::analyze`]; none where it gave up).
pub(crate) fn in_bounds(prog: &Program, cfg: &Cfg, states: &[Vec<ranges::State>]) -> InBounds {
    let insns = &prog.insns;
    let mut out = InBounds { at: vec![false; insns.len()], ..InBounds::default() };
    for (pc, i) in insns.iter().enumerate() {
        if cfg.is_second_half(pc) {
            continue;
        }
        out.at[pc] = match i.class() {
            BPF_LDX => i.src == R10,
            BPF_ST | BPF_STX => i.dst == R10,
            _ => false,
        };
    }
    let (mut data, mut scratch) = (0u64, 0u64);
    for (pc, reaching) in states.iter().enumerate() {
        let i = insns[pc];
        let load = i.class() == BPF_LDX;
        let store = (i.class() == BPF_ST || i.class() == BPF_STX) && i.op & 0xe0 == BPF_MEM;
        let base = if load { i.src } else { i.dst };
        if matches!(i.class(), BPF_ST | BPF_STX) {
            // Every scratch store the analysis took to miss the frame (proved or not).
            let ends = reaching.iter().filter_map(|st| ranges::scratch_store_end(i, st));
            scratch = scratch.max(ends.max().unwrap_or(0).unsigned_abs());
        }
        if out.at[pc] || reaching.is_empty() || !(load || store) || base >= R10 {
            continue;
        }
        let n = size_bytes(i.op) as i64;
        let mut need = (0u64, 0u64);
        let proved = reaching.iter().all(|st| {
            let Val::Ptr(b, o) = st[usize::from(base)] else { return false };
            let (Some(lo), Some(hi)) = (
                o.lo.checked_add(i64::from(i.off)),
                o.hi.checked_add(i64::from(i.off)).and_then(|h| h.checked_add(n)),
            ) else {
                return false;
            };
            let within = |end: usize| lo >= 0 && hi <= end as i64;
            match b {
                Base::Ctx if load => lo >= 0 && hi <= ctx_bytes(prog.prog_type),
                Base::Ctx => ctx_writable(prog.prog_type).iter().any(|&(a, z)| lo >= a && hi <= z),
                Base::Data if load && within(XRP_DATA_VIEW_BYTES) => {
                    need.0 = need.0.max(hi.unsigned_abs());
                    true
                }
                Base::Scratch if within(XRP_SCRATCH_BYTES) => {
                    need.1 = need.1.max(hi.unsigned_abs());
                    true
                }
                // The function's own frame, reached through a copy of its r10 moved by a
                // bounded offset (a stack array indexed by data).
                Base::Stack => lo >= -(STACK_FRAME_BYTES as i64) && hi <= 0,
                Base::Data | Base::Scratch => false,
            }
        });
        if proved {
            out.at[pc] = true;
            data = data.max(need.0);
            scratch = scratch.max(need.1);
        }
    }
    out.data_bytes = data;
    out.scratch_bytes = scratch;
    out.preload = preloads(prog, cfg, states, &out.at);
    out
}

/// [`InBounds::preload`] (see [`Preload`]): only xrp programs, only 8-byte loads of the entry
/// function (the compiled entry function is the one that receives the values).
fn preloads(
    prog: &Program,
    cfg: &Cfg,
    states: &[Vec<ranges::State>],
    at: &[bool],
) -> Vec<Option<Preload>> {
    let insns = &prog.insns;
    let mut out = vec![None; insns.len()];
    if prog.prog_type != ProgType::Xrp || insns.is_empty() {
        return out;
    }
    let (start, end) = cfg.func_range(0);
    // True while every slot before `pc` is straight-line code that writes no memory.
    let mut prefix = true;
    for pc in start..end.min(states.len()) {
        let i = insns[pc];
        if pc > start && cfg.is_block_start(pc) {
            prefix = false;
        }
        let fixed = |want: Base, at_off: i64| {
            !states[pc].is_empty()
                && states[pc].iter().all(|st| match st[usize::from(i.src)] {
                    Val::Ptr(b, o) => {
                        b == want
                            && o.lo == o.hi
                            && o.lo.checked_add(i64::from(i.off)) == Some(at_off)
                    }
                    Val::Scalar(_) => false,
                })
        };
        if !cfg.is_second_half(pc) && i.op == BPF_LDX | BPF_MEM | BPF_DW && i.src < R10 {
            out[pc] = if fixed(Base::Ctx, XRP_OFF_SCRATCH as i64) {
                Some(Preload::ScratchAddr)
            } else if prefix && at[pc] && fixed(Base::Scratch, 0) {
                Some(Preload::ScratchWord0)
            } else {
                None
            };
        }
        if matches!(i.class(), BPF_ST | BPF_STX | BPF_JMP | BPF_JMP32) {
            prefix = false;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::insn::{
        Insn, BPF_ADD, BPF_ALU, BPF_ALU64, BPF_AND, BPF_B, BPF_DW, BPF_EXIT, BPF_H, BPF_JA,
        BPF_JEQ, BPF_JGE, BPF_JGT, BPF_JLT, BPF_JMP, BPF_JMP32, BPF_JNE, BPF_K, BPF_LSH, BPF_MEM,
        BPF_MOV, BPF_MUL, BPF_ST, BPF_STX, BPF_W, BPF_X,
    };
    use crate::VerifiedProgram;

    use crate::testutil::{ins, xrp_program};

    fn verified(insns: Vec<Insn>) -> VerifiedProgram {
        VerifiedProgram::new(xrp_program(insns)).unwrap()
    }

    fn proofs(insns: Vec<Insn>) -> Vec<bool> {
        let v = verified(insns);
        (0..v.insns.len()).map(|pc| v.access_in_bounds(pc)).collect()
    }

    #[test]
    fn stack_and_context_accesses_are_proved_where_every_path_stays_inside() {
        let ldx = BPF_LDX | BPF_MEM | BPF_DW;
        let p = vec![
            ins(ldx, 2, 1, 0, 0),                          // 0: ctx->data: proved
            ins(BPF_ALU64 | BPF_MOV | BPF_X, 6, 1, 0, 0),  // 1: r6 = ctx
            ins(ldx, 3, 6, 272, 0),                        // 2: ctx->scratch via the copy: proved
            ins(ldx, 3, 6, 288, 0),                        // 3: past the context: checked
            ins(ldx, 4, 2, 0, 0),                          // 4: data (ctx->data): proved
            ins(BPF_ST | BPF_MEM | BPF_W, 10, 0, -4, 1),   // 5: stack: proved
            ins(BPF_ST | BPF_MEM | BPF_W, 6, 0, 8, 1),     // 6: ctx->done store: proved
            ins(BPF_JMP | BPF_JEQ | BPF_K, 4, 0, 1, 0),    // 7: if r4 == 0 skip the next
            ins(BPF_ALU64 | BPF_ADD | BPF_K, 6, 0, 0, 16), // 8: r6 = ctx + 16 on one path
            ins(ldx, 0, 6, 0, 0),                          // 9: ctx+0 or ctx+16: proved
            ins(ldx, 0, 6, 272, 0),                        // 10: ctx+272 or ctx+288: checked
            ins(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
        ];
        let want = [true, false, true, false, true, true, true, false, false, true, false, false];
        assert_eq!(proofs(p), want);
    }

    const LDX_DW: u8 = BPF_LDX | BPF_MEM | BPF_DW;
    const JMP_K: u8 = BPF_JMP | BPF_K;

    fn mov(dst: u8, imm: i32) -> Insn {
        ins(BPF_ALU64 | BPF_MOV | BPF_K, dst, 0, 0, imm)
    }

    fn exit() -> [Insn; 2] {
        [mov(0, 0), ins(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)]
    }

    /// `r2 = ctx->data; r3 = ctx->scratch`, then `body`, then `r0 = 0; exit`.
    fn xrp(body: &[Insn]) -> VerifiedProgram {
        let mut p = vec![ins(LDX_DW, 2, 1, 0, 0), ins(LDX_DW, 3, 1, 272, 0)];
        p.extend_from_slice(body);
        p.extend(exit());
        verified(p)
    }

    #[test]
    fn data_and_scratch_are_proved_up_to_their_view_and_no_further() {
        let st = BPF_ST | BPF_MEM;
        let v = xrp(&[
            ins(LDX_DW, 0, 2, 4088, 0),                  // 2: data's last word: proved
            ins(LDX_DW, 0, 2, 4089, 0),                  // 3: one byte past: checked
            ins(BPF_LDX | BPF_MEM | BPF_B, 0, 2, -1, 0), // 4: before data: checked
            ins(st | BPF_DW, 2, 0, 0, 1),                // 5: data is read-only: checked
            ins(st | BPF_DW, 3, 0, 4088, 1),             // 6: scratch's last word: proved
            ins(st | BPF_B, 3, 0, 4096, 1),              // 7: past scratch: checked
            ins(BPF_STX | 0xc0 | BPF_DW, 3, 0, 0, 0),    // 8: atomic on scratch: checked
        ]);
        let got: Vec<bool> = (2..=8).map(|pc| v.access_in_bounds(pc)).collect();
        assert_eq!(got, [true, false, false, false, true, false, false]);
        assert_eq!(v.xrp_min_bytes(), (4096, 4096));
    }

    #[test]
    fn a_pointer_stepping_with_a_bounded_counter_is_proved() {
        // for (i = 0, p = data; i != 31; i++, p += 8) r0 = *p;  (BPF-KV's node scan)
        let v = xrp(&[
            mov(4, 0),                                    // 2
            ins(LDX_DW, 0, 2, 0, 0),                      // 3: loop header: proved
            ins(BPF_ALU64 | BPF_ADD | BPF_K, 2, 0, 0, 8), // 4
            ins(BPF_ALU64 | BPF_ADD | BPF_K, 4, 0, 0, 1), // 5
            ins(JMP_K | BPF_JNE, 4, 0, -4, 31),           // 6: -> 3
        ]);
        assert!(v.access_in_bounds(3));
        assert_eq!(v.xrp_min_bytes(), (31 * 8, 0));
        // The same loop running one word further than the view: the last access is outside.
        let v = xrp(&[
            mov(4, 0),
            ins(LDX_DW, 0, 2, 0, 0),
            ins(BPF_ALU64 | BPF_ADD | BPF_K, 2, 0, 0, 8),
            ins(BPF_ALU64 | BPF_ADD | BPF_K, 4, 0, 0, 1),
            ins(JMP_K | BPF_JNE, 4, 0, -4, 513),
        ]);
        assert!(!v.access_in_bounds(3));
        assert_eq!(v.xrp_min_bytes(), (0, 0));
    }

    #[test]
    fn masked_and_compared_indices_are_proved_unbounded_ones_are_not() {
        let v = xrp(&[
            ins(LDX_DW, 4, 3, 0, 0), // 2: r4 = scratch[0] (any value)
            ins(BPF_ALU64 | BPF_AND | BPF_K, 4, 0, 0, 511), // 3: r4 &= 511
            ins(BPF_ALU64 | BPF_LSH | BPF_K, 4, 0, 0, 3), // 4: r4 <<= 3
            ins(BPF_ALU64 | BPF_MOV | BPF_X, 5, 2, 0, 0), // 5: r5 = data
            ins(BPF_ALU64 | BPF_ADD | BPF_X, 5, 4, 0, 0), // 6: r5 += r4
            ins(LDX_DW, 0, 5, 0, 0), // 7: data[0..512]: proved
            ins(LDX_DW, 6, 3, 8, 0), // 8: r6 = scratch[1] (any value)
            ins(JMP_K | BPF_JGE, 6, 0, 3, 4089), // 9: if r6 >= 4089 skip the loads
            ins(BPF_ALU64 | BPF_ADD | BPF_X, 6, 2, 0, 0), // 10: r6 = data + [0, 4088]
            ins(BPF_LDX | BPF_MEM | BPF_B, 0, 6, 0, 0), // 11: proved (one byte)
            ins(BPF_LDX | BPF_MEM | BPF_W, 0, 6, 0, 0), // 12: 4 bytes at 4088..4092: proved
            ins(LDX_DW, 7, 3, 16, 0), // 13: r7 = scratch[2]
            ins(BPF_ALU64 | BPF_ADD | BPF_X, 7, 2, 0, 0), // 14: r7 = data + anything
            ins(BPF_LDX | BPF_MEM | BPF_B, 0, 7, 0, 0), // 15: checked
            ins(JMP_K | BPF_JLT, 7, 0, 1, 0), // 16: never taken (u64 < 0)
            ins(BPF_JMP | BPF_JA, 0, 0, 0, 0), // 17
        ]);
        let got: Vec<bool> = [7, 11, 12, 15].iter().map(|&pc| v.access_in_bounds(pc)).collect();
        assert_eq!(got, [true, true, true, false]);
        // Word 511 ends at 4096; the 4-byte load at 4088 ends at 4092.
        assert_eq!(v.xrp_min_bytes(), (4096, 24));
    }

    #[test]
    fn a_branch_that_cannot_be_taken_proves_nothing_behind_it_and_equality_narrows() {
        let v = xrp(&[
            ins(BPF_LDX | BPF_MEM | BPF_B, 4, 3, 0, 0), // 2: r4 = scratch byte, 0..=255
            ins(JMP_K | BPF_JEQ, 4, 0, 2, 300),         // 3: r4 == 300: impossible
            ins(BPF_ALU64 | BPF_ADD | BPF_X, 4, 2, 0, 0), // 4: r4 = data + [0, 255]
            ins(LDX_DW, 0, 4, 0, 0),                    // 5: proved
            ins(BPF_ALU64 | BPF_MOV | BPF_X, 5, 2, 0, 0), // 6: r5 = data
            ins(LDX_DW, 0, 5, 8000, 0),                 // 7: checked
        ]);
        assert!(v.access_in_bounds(5));
        assert!(!v.access_in_bounds(7));
    }

    #[test]
    fn an_analysis_past_its_state_bound_proves_nothing_but_the_stack() {
        // `diamonds` branches on a loaded value whose paths differ in r0, then a data load and
        // a stack store.
        let shape = |diamonds: i32| {
            let mut p = vec![ins(LDX_DW, 2, 1, 0, 0), mov(0, 0), ins(LDX_DW, 4, 2, 8, 0)];
            for k in 0..diamonds {
                p.push(ins(JMP_K | BPF_JGE, 4, 0, 1, k));
                p.push(ins(BPF_ALU64 | BPF_ADD | BPF_K, 0, 0, 0, 1));
            }
            p.push(ins(LDX_DW, 3, 2, 0, 0));
            p.push(ins(BPF_ST | BPF_MEM | BPF_DW, 10, 0, -8, 0));
            p.push(ins(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
            let n = p.len();
            (verified(p), n)
        };
        let (small, n) = shape(50);
        assert!(small.access_in_bounds(n - 3) && small.access_in_bounds(n - 2));
        let (big, n) = shape(6000);
        assert!(!big.access_in_bounds(0), "not even the context load: the analysis gave up");
        assert!(!big.access_in_bounds(n - 3));
        assert!(big.access_in_bounds(n - 2), "r10 accesses are proved without the analysis");
        assert_eq!(big.xrp_min_bytes(), (0, 0));
    }

    /// clang's loop over an index: `i = 0; header: r0 = *(data + i); i += step;
    /// if i == end goto out; goto header`, `trips` past the analysis' per-slot states.
    fn clang_loop(size: u8, step: i32, end: i32) -> VerifiedProgram {
        xrp(&[
            mov(4, 0),                                       // 2
            ins(BPF_ALU64 | BPF_MOV | BPF_X, 5, 2, 0, 0),    // 3: header
            ins(BPF_ALU64 | BPF_ADD | BPF_X, 5, 4, 0, 0),    // 4
            ins(BPF_LDX | BPF_MEM | size, 0, 5, 0, 0),       // 5: the access
            ins(BPF_ALU64 | BPF_ADD | BPF_K, 4, 0, 0, step), // 6
            ins(JMP_K | BPF_JEQ, 4, 0, 1, end),              // 7: -> out
            ins(BPF_JMP | BPF_JA, 0, 0, -6, 0),              // 8: -> 3
        ])
    }

    #[test]
    fn a_long_counted_index_is_bounded_by_its_exit_test_and_step() {
        // 512 words: the last ends at 4096.
        assert!(clang_loop(BPF_DW, 8, 4096).access_in_bounds(5));
        assert_eq!(clang_loop(BPF_DW, 8, 4096).xrp_min_bytes(), (4096, 0));
        // 1024 u32 words, 4096 bytes one at a time.
        assert!(clang_loop(BPF_W, 4, 4096).access_in_bounds(5));
        assert!(clang_loop(BPF_B, 1, 4096).access_in_bounds(5));
        // One step further: the last word ends at 4104.
        assert!(!clang_loop(BPF_DW, 8, 4104).access_in_bounds(5));
        // An end off the counter's class is never met: the counter runs past the view.
        assert!(!clang_loop(BPF_DW, 8, 4097).access_in_bounds(5));
        assert!(!clang_loop(BPF_W, 8, 4092).access_in_bounds(5));
        // A 2-byte load stepping by one up to 4096 reads 4095..4097 last.
        assert!(!clang_loop(BPF_H, 1, 4096).access_in_bounds(5));
    }

    #[test]
    fn a_stack_array_indexed_by_a_bounded_value_is_proved_inside_the_frame_only() {
        // r6 = r10 - below + ((scratch byte & 15) << 2); a u32 load and store there.
        let array = |below: i32| {
            xrp(&[
                ins(BPF_LDX | BPF_MEM | BPF_B, 4, 3, 0, 0),        // 2
                ins(BPF_ALU64 | BPF_AND | BPF_K, 4, 0, 0, 15),     // 3
                ins(BPF_ALU64 | BPF_LSH | BPF_K, 4, 0, 0, 2),      // 4: 0..=60
                ins(BPF_ALU64 | BPF_MOV | BPF_X, 6, 10, 0, 0),     // 5
                ins(BPF_ALU64 | BPF_ADD | BPF_K, 6, 0, 0, -below), // 6
                ins(BPF_ALU64 | BPF_ADD | BPF_X, 6, 4, 0, 0),      // 7
                ins(BPF_LDX | BPF_MEM | BPF_W, 0, 6, 0, 0),        // 8
                ins(BPF_STX | BPF_MEM | BPF_W, 6, 0, 0, 0),        // 9
            ])
        };
        let p = array(64); // the last element ends at the frame's top
        assert!(p.access_in_bounds(8) && p.access_in_bounds(9));
        let p = array(63); // one byte above the frame
        assert!(!p.access_in_bounds(8) && !p.access_in_bounds(9));
        let p = array(512); // the first element at the frame's bottom
        assert!(p.access_in_bounds(8));
        let p = array(513); // one byte below it (below lie the callees' frames)
        assert!(!p.access_in_bounds(8));
    }

    #[test]
    fn the_bench_loops_are_proved() {
        for name in [
            "bench/sum64",
            "bench/sum32",
            "bench/be32",
            "bench/stats64",
            "bench/histogram",
            "bench/crc32",
            "bench/fnv1a",
            "bench/classify",
            "bench/knn",
            // Its loads are in a called function, proved from the call's arguments.
            "bench/alternate",
            "bench/bsearch32",
            "bench/mismatch",
            "bench/matmul",
        ] {
            let p = crate::load_verified(storefn_progs::must(name), None, ProgType::Xrp).unwrap();
            let unproved: Vec<usize> = (0..p.insns.len())
                .filter(|&pc| {
                    matches!(p.insns[pc].class(), BPF_LDX | BPF_ST | BPF_STX)
                        && !p.access_in_bounds(pc)
                })
                .collect();
            assert!(unproved.is_empty(), "{name}: accesses checked: {unproved:?}");
        }
    }

    const ALU_K: u8 = BPF_ALU64 | BPF_K;
    const LDX_W: u8 = BPF_LDX | BPF_MEM | BPF_W;

    /// `r4` = any u64 (or `w4` = any u32), `r0 = r4 + c` made by `link`, `between` run, then
    /// `if r4 > 4080 goto out` and a data word at `data + r0`: proved iff `r0 <= 4088`
    /// follows from the link on every path.
    fn linked(load4: Insn, link: &[Insn], between: &[Insn], test: Insn) -> bool {
        let mut body = vec![load4];
        body.extend_from_slice(link);
        body.extend_from_slice(between);
        body.extend([
            test,                                         // if r4 > 4080 goto out
            ins(BPF_ALU64 | BPF_MOV | BPF_X, 5, 2, 0, 0), // r5 = data
            ins(BPF_ALU64 | BPF_ADD | BPF_X, 5, 0, 0, 0), // r5 += r0
            ins(LDX_DW, 6, 5, 0, 0),                      // the access
        ]);
        let n = body.len();
        // The access is the last body slot (after the two context loads of `xrp`).
        xrp(&body).access_in_bounds(n + 1)
    }

    #[test]
    fn a_branch_on_a_copy_refines_the_linked_register_with_its_offset() {
        let any = ins(LDX_DW, 4, 3, 0, 0);
        let any32 = ins(LDX_W, 4, 3, 0, 0);
        let mov = ins(BPF_ALU64 | BPF_MOV | BPF_X, 0, 4, 0, 0);
        let mov32 = ins(BPF_ALU | BPF_MOV | BPF_X, 0, 4, 0, 0);
        let add = |c| ins(ALU_K | BPF_ADD, 0, 0, 0, c);
        let add32 = |c| ins(BPF_ALU | BPF_K | BPF_ADD, 0, 0, 0, c);
        let jgt = ins(JMP_K | BPF_JGT, 4, 0, 3, 4080);
        let jgt32 = ins(BPF_JMP32 | BPF_K | BPF_JGT, 4, 0, 3, 4080);
        // r0 = r4 + 8 <= 4088: the word ends at 4096.
        assert!(linked(any, &[mov, add(8)], &[], jgt));
        let u16 = ins(BPF_LDX | BPF_MEM | BPF_H, 4, 3, 0, 0);
        assert!(linked(u16, &[mov32, add32(8)], &[], jgt32));
        // The compare's register stepped after the copy: the offset follows (r0 = r4 + 7).
        assert!(linked(any, &[mov, add(8)], &[ins(ALU_K | BPF_ADD, 4, 0, 0, 1)], jgt));
        // One byte further: r0 <= 4089.
        assert!(!linked(any, &[mov, add(9)], &[], jgt));
        // r0 = r4 - 8 wraps below zero for r4 < 8: no bound.
        assert!(!linked(any, &[mov, add(-8)], &[], jgt));
        // A 32-bit add that may wrap (w4 - 8), and a 32-bit copy of a 64-bit value: no link.
        assert!(!linked(u16, &[mov32, add32(-8)], &[], jgt32));
        assert!(!linked(any32, &[mov32, add32(8)], &[], jgt32)); // may wrap: no link
        assert!(!linked(any, &[mov32, add32(8)], &[], jgt));
        // Either register written after the copy: the link is gone.
        assert!(!linked(any, &[mov, add(8)], &[ins(LDX_DW, 4, 3, 8, 0)], jgt));
        assert!(!linked(any, &[mov, add(8)], &[ins(LDX_DW, 0, 3, 8, 0)], jgt));
        let clobber = ins(BPF_ALU64 | BPF_MUL | BPF_K, 0, 0, 0, 1);
        assert!(!linked(any, &[mov, add(8)], &[clobber], jgt));
        // The copy made on one path only (the other skips it): the join keeps no link.
        let skip = [ins(JMP_K | BPF_JEQ, 6, 0, 2, 0), mov, add(8)];
        assert!(!linked(any, &[ins(LDX_DW, 0, 3, 8, 0), ins(LDX_DW, 6, 3, 16, 0)], &skip, jgt));
    }

    #[test]
    fn a_register_compare_refines_both_sides_and_their_copies() {
        // w3 = scratch byte (<= 255); w7 = any u32; w0 = w7; if w7 >= w3 goto out;
        // then w0 <= 254 and w0 << 4 ends its word at 4072.
        let body = |shift: i32| {
            xrp(&[
                ins(BPF_LDX | BPF_MEM | BPF_B, 4, 3, 0, 0),   // 2
                ins(LDX_W, 7, 3, 4, 0),                       // 3
                ins(BPF_ALU | BPF_MOV | BPF_X, 0, 7, 0, 0),   // 4
                ins(BPF_JMP32 | BPF_X | BPF_JGE, 7, 4, 4, 0), // 5
                ins(ALU_K | BPF_LSH, 0, 0, 0, shift),         // 6
                ins(BPF_ALU64 | BPF_MOV | BPF_X, 5, 2, 0, 0), // 7
                ins(BPF_ALU64 | BPF_ADD | BPF_X, 5, 0, 0, 0), // 8
                ins(LDX_DW, 6, 5, 0, 0),                      // 9
            ])
        };
        assert!(body(4).access_in_bounds(9));
        assert!(!body(5).access_in_bounds(9)); // 254 << 5 + 8 > 4096
    }

    /// `r2` (data) spilled to `r10 - 8`, then `between`, r2 overwritten, the slot reloaded
    /// (`reload`) into r5, and the data's last word read through it.
    fn spilled(between: &[Insn], reload: Insn) -> bool {
        let mut body = vec![ins(BPF_STX | BPF_MEM | BPF_DW, 10, 2, -8, 0)];
        body.extend_from_slice(between);
        body.extend([mov(2, 0), reload, ins(LDX_DW, 6, 5, 4088, 0)]);
        let n = body.len();
        xrp(&body).access_in_bounds(n + 1)
    }

    #[test]
    fn a_spilled_pointer_is_proved_until_a_store_may_overwrite_it() {
        let reload = ins(LDX_DW, 5, 10, -8, 0);
        let st = |size, dst, off| ins(BPF_ST | BPF_MEM | size, dst, 0, off, 7);
        assert!(spilled(&[], reload));
        // Stores beside the slot, and into the context's writable fields, leave it.
        assert!(spilled(&[st(BPF_DW, 10, -16), st(BPF_B, 10, -1 - 8 - 1)], reload));
        assert!(spilled(&[st(BPF_W, 1, 8)], reload));
        // A store into it, even one byte of it, replaces it.
        assert!(!spilled(&[st(BPF_B, 10, -1)], reload));
        assert!(spilled(&[st(BPF_W, 10, -12)], reload)); // bytes -12..-8: beside it
        assert!(!spilled(&[st(BPF_DW, 10, -8)], reload));
        // A copy of r10 at -16 + (0 or 8): may hit it.
        let maybe = [
            ins(BPF_LDX | BPF_MEM | BPF_B, 4, 3, 0, 0),
            ins(ALU_K | BPF_AND, 4, 0, 0, 8),
            ins(BPF_ALU64 | BPF_MOV | BPF_X, 6, 10, 0, 0),
            ins(ALU_K | BPF_ADD, 6, 0, 0, -16),
            ins(BPF_ALU64 | BPF_ADD | BPF_X, 6, 4, 0, 0),
            st(BPF_DW, 6, 0),
        ];
        assert!(!spilled(&maybe, reload));
        // A store inside the scratch view misses it (the JIT's scratch covers every such
        // store); past the view, or through a loaded pointer, it may not.
        assert!(spilled(&[st(BPF_DW, 3, 4088)], reload));
        assert!(!spilled(&[st(BPF_DW, 3, 4096)], reload));
        assert!(!spilled(&[ins(LDX_DW, 6, 3, 0, 0), st(BPF_B, 6, 0)], reload));
        // A narrower reload reads only part of the pointer; another slot holds nothing known.
        assert!(!spilled(&[], ins(LDX_W, 5, 10, -8, 0)));
        assert!(!spilled(&[], ins(LDX_DW, 5, 10, -16, 0)));
    }

    #[test]
    fn a_scratch_store_inside_the_view_on_some_path_counts_into_the_bytes_the_jit_needs() {
        // r6 = scratch (path A) or scratch + 8000 (path B); a word stored at r6 + 4000: in
        // the view on A only. Not proved, but the analysis took A's store to miss the frame,
        // which holds only if scratch is at least 4008 bytes long on the JIT.
        let v = xrp(&[
            ins(BPF_LDX | BPF_MEM | BPF_B, 4, 3, 0, 0),    // 2
            ins(BPF_ALU64 | BPF_MOV | BPF_X, 6, 3, 0, 0),  // 3
            ins(JMP_K | BPF_JEQ, 4, 0, 1, 0),              // 4
            ins(ALU_K | BPF_ADD, 6, 0, 0, 8000),           // 5
            ins(BPF_ST | BPF_MEM | BPF_DW, 6, 0, 4000, 1), // 6
        ]);
        assert!(!v.access_in_bounds(6));
        assert_eq!(v.xrp_min_bytes(), (0, 4008));
    }

    #[test]
    fn a_narrow_spill_reloads_its_zero_extended_range_and_a_call_forgets_every_slot() {
        // *(u16 *)(r10 - 2) = (byte & 0xff) << 4; reloaded as an index into data.
        let prog = |between: &[Insn]| {
            let mut body = vec![
                ins(BPF_ALU64 | BPF_MOV | BPF_X, 7, 2, 0, 0),
                ins(BPF_LDX | BPF_MEM | BPF_B, 4, 3, 0, 0),
                ins(ALU_K | BPF_LSH, 4, 0, 0, 4),
                ins(BPF_STX | BPF_MEM | BPF_H, 10, 4, -2, 0),
                mov(4, 0),
            ];
            body.extend_from_slice(between);
            body.extend([
                ins(BPF_LDX | BPF_MEM | BPF_H, 4, 10, -2, 0),
                ins(BPF_ALU64 | BPF_ADD | BPF_X, 4, 7, 0, 0),
                ins(LDX_DW, 6, 4, 0, 0),
            ]);
            let n = body.len();
            xrp(&body).access_in_bounds(n + 1)
        };
        assert!(prog(&[]));
        // A helper call: it may write the frame through a pointer it was given.
        let call = ins(BPF_JMP | crate::insn::BPF_CALL, 0, 0, 0, 6);
        assert!(!prog(&[ins(BPF_ALU64 | BPF_MOV | BPF_X, 1, 10, 0, 0), call]));
    }

    /// `preloads()` of `prog`, as `(pc, fact)` for the slots that have one.
    fn preload_facts(prog: Program) -> Vec<(usize, Preload)> {
        let v = VerifiedProgram::new(prog).unwrap();
        v.preloads().iter().enumerate().filter_map(|(pc, p)| Some((pc, (*p)?))).collect()
    }

    #[test]
    fn the_scratch_address_anywhere_and_its_first_word_only_before_any_store_or_jump() {
        let (sa, w0) = (Preload::ScratchAddr, Preload::ScratchWord0);
        let scratch = ins(LDX_DW, 2, 1, 272, 0);
        let word0 = ins(LDX_DW, 3, 2, 0, 0);
        let with = |mid: &[Insn], tail: &[Insn]| {
            let mut p = vec![scratch];
            p.extend_from_slice(mid);
            p.push(word0);
            p.extend_from_slice(tail);
            p.extend(exit());
            preload_facts(xrp_program(p))
        };
        assert_eq!(with(&[], &[]), [(0, sa), (1, w0)]);
        // Arithmetic and other loads keep the start straight-line.
        assert_eq!(with(&[mov(5, 1), ins(LDX_DW, 4, 1, 0, 0)], &[]), [(0, sa), (3, w0)]);
        // A store anywhere (here the stack) may have written those bytes: read them.
        assert_eq!(with(&[ins(BPF_ST | BPF_MEM | BPF_DW, 10, 0, -8, 1)], &[]), [(0, sa)]);
        // After a jump the load is no longer on the one path from the call's start.
        let unknown = ins(BPF_LDX | BPF_MEM | BPF_B, 5, 2, 8, 0);
        assert_eq!(with(&[unknown, ins(JMP_K | BPF_JEQ, 5, 0, 0, 0)], &[]), [(0, sa)]);
        // Another width or offset of scratch, or the scratch address read again after a
        // store: only the address is a preload.
        let narrow = ins(BPF_LDX | BPF_MEM | BPF_W, 3, 2, 0, 0);
        let p = vec![scratch, narrow, ins(LDX_DW, 4, 2, 8, 0)];
        assert_eq!(preload_facts(xrp_program([p, exit().to_vec()].concat())), [(0, sa)]);
        let again = [ins(BPF_STX | BPF_MEM | BPF_DW, 2, 3, 0, 0), ins(LDX_DW, 6, 1, 272, 0)];
        assert_eq!(with(&[], &again), [(0, sa), (1, w0), (3, sa)]);
        // Not through a pointer that may sit elsewhere on some path.
        let maybe =
            [ins(JMP_K | BPF_JEQ, 5, 0, 1, 0), ins(BPF_ALU64 | BPF_ADD | BPF_K, 2, 0, 0, 8)];
        let p = [vec![scratch, unknown], maybe.to_vec(), vec![word0], exit().to_vec()];
        assert_eq!(preload_facts(xrp_program(p.concat())), [(0, sa)]);
    }

    #[test]
    fn no_preloads_outside_the_entry_function_or_an_xrp_program() {
        // The entry calls a function that reads scratch's address and first word.
        let p = vec![
            ins(BPF_JMP | crate::insn::BPF_CALL, 0, crate::insn::BPF_PSEUDO_CALL, 0, 2),
            mov(0, 0),
            ins(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
            ins(LDX_DW, 2, 1, 272, 0),
            ins(LDX_DW, 3, 2, 0, 0),
            mov(0, 0),
            ins(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
        ];
        assert_eq!(preload_facts(xrp_program(p)), []);
        let lambda = Program {
            prog_type: ProgType::Lambda,
            ..xrp_program([vec![ins(LDX_DW, 2, 1, 0, 0)], exit().to_vec()].concat())
        };
        assert_eq!(preload_facts(lambda), []);
    }
}
