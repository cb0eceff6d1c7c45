//! Narrow (32-bit) reductions as vector code in 32-bit lanes: JIT against the interpreter on
//! random loops over u32 words whose bodies mix 32-bit and 64-bit operations the lanes do
//! (and, or, xor, add, sub, neg, moves, shifts by constants in and past range, byte swaps,
//! the counter read by 32-bit operations) and ones they must refuse (arithmetic shifts,
//! multiplies, 64-bit adds of loaded values, shifts by a register, 64-bit operations mixing
//! loaded values and the counter), with starts, trip counts, data too short (the pass's check
//! misses and the scalar copy faults at the same load) and budgets running out.

mod jit_support;

use jit_support::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use storefn_vm::insn::*;
use storefn_vm::xrp::XRP_OFF_DATA;
use storefn_vm::JitProgram;

/// How the loop finds its word: the counter steps by 4 bytes, or counts words beside a
/// pointer stepped by 4.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Address {
    Offset,
    Pointer,
}

#[derive(Clone, Debug)]
struct NarrowLoop {
    op: u8,
    swapped: bool,
    signed: bool,
    address: Address,
    /// The body between the load (into r0) and the reduction (of w0 into w5); r3 is a
    /// temporary it writes before reading.
    body: Vec<Insn>,
    /// Whether every slot of `body` is one the lanes do.
    lane_wise: bool,
    start: i32,
    trips: i32,
    cond: u8,
    init: u64,
    /// Slots of padding before the loop: past `QUICK_TIER_SLOTS`, the quick tier compiles it
    /// (its read windows live in memory, not in variables).
    pad: usize,
}

/// One random body slot on r0 or r3 (both written before) the lanes do, but for a 64-bit
/// operation between a loaded value and the counter (`false`).
fn random_slot(rng: &mut SmallRng) -> (Insn, bool) {
    const OPS: [u8; 5] = [BPF_ADD, BPF_SUB, BPF_XOR, BPF_OR, BPF_AND];
    let dst = if rng.gen_bool(0.5) { 0 } else { 3 };
    // Sources: the other temporary, an invariant (r8), the counter (r2).
    let src = [0, 3, 8, 2][rng.gen_range(0..4)];
    let imm: i32 = match rng.gen_range(0..3) {
        0 => rng.gen_range(-4..4),
        _ => rng.gen(),
    };
    let op = OPS[rng.gen_range(0..OPS.len())];
    match rng.gen_range(0..14) {
        0..=3 => (alu32_imm(op, dst, imm), true),
        4..=5 => (alu32_reg(op, dst, src), true),
        6 => (alu32_reg(BPF_MOV, dst, src), true),
        7 => {
            let op = [BPF_LSH, BPF_RSH][rng.gen_range(0..2)];
            (alu32_imm(op, dst, rng.gen_range(0..40)), true)
        }
        8 => {
            let imm = [16, 32, 64][rng.gen_range(0..3)];
            let (class, x) = match rng.gen_range(0..3) {
                0 => (BPF_ALU, BPF_K),
                1 => (BPF_ALU, BPF_X),
                _ => (BPF_ALU64, BPF_K),
            };
            (ins(class | BPF_END | x, dst, 0, 0, imm), true)
        }
        9 => {
            let op = [BPF_LSH, BPF_RSH][rng.gen_range(0..2)];
            (alu64_imm(op, dst, rng.gen_range(0..70)), true)
        }
        10 => {
            let op = [BPF_AND, BPF_OR, BPF_XOR][rng.gen_range(0..3)];
            (alu64_imm(op, dst, imm), true)
        }
        11 => {
            // 64-bit logic between loaded values, or with the counter (refused).
            let op = [BPF_AND, BPF_OR, BPF_XOR][rng.gen_range(0..3)];
            (alu64_reg(op, dst, src), src != 2)
        }
        12 => (ins(BPF_ALU | BPF_NEG, dst, 0, 0, 0), true),
        _ => (mov64_reg(dst, [0, 3, 8][rng.gen_range(0..3)]), true),
    }
}

/// One random slot the lanes refuse on r0 holding the loaded word (an operation they do
/// not model on a value per element; on scalars it would be the scalar code).
fn refused_slot(rng: &mut SmallRng) -> Insn {
    let dst = 0;
    let refused = [
        alu32_imm(BPF_ARSH, dst, 3),
        alu64_imm(BPF_ARSH, dst, 3),
        alu32_imm(BPF_MUL, dst, 3),
        alu64_imm(BPF_MUL, dst, 3),
        alu64_reg(BPF_ADD, dst, 0),
        alu64_imm(BPF_SUB, dst, 1),
        alu32_reg(BPF_LSH, dst, 8),
        alu64_reg(BPF_RSH, dst, 8),
        ins(BPF_ALU64 | BPF_NEG, dst, 0, 0, 0),
        alu32_imm(BPF_DIV, dst, 7),
        ins(BPF_ALU | BPF_MOV | BPF_X, dst, 0, 8, 0),
    ];
    refused[rng.gen_range(0..refused.len())]
}

fn random_loop(rng: &mut SmallRng) -> NarrowLoop {
    const OPS: [u8; 5] = [BPF_ADD, BPF_SUB, BPF_XOR, BPF_OR, BPF_AND];
    let op = OPS[rng.gen_range(0..OPS.len())];
    // r3's first write: a copy of the word at either width, or the counter's low half.
    let first = [mov64_reg(3, 0), alu32_reg(BPF_MOV, 3, 0), alu32_reg(BPF_MOV, 3, 2)];
    let mut body = vec![first[rng.gen_range(0..3)]];
    let mut lane_wise = true;
    if rng.gen_bool(0.15) {
        body.push(refused_slot(rng));
        lane_wise = false;
    }
    for _ in 0..rng.gen_range(0..12) {
        let (i, ok) = random_slot(rng);
        body.push(i);
        lane_wise &= ok;
    }
    // The value reduced mixes both temporaries (32-bit: what the reduction reads anyway).
    body.push(alu32_reg(BPF_XOR, 0, 3));
    let start = rng.gen_range(0..50) * 4;
    let room = (DATA_BYTES as i32 - start) / 4;
    let trips = match rng.gen_range(0..10) {
        0..=1 => room + rng.gen_range(1..12),
        2 => rng.gen_range(1..40),
        _ => rng.gen_range(40..=room.min(900)),
    };
    NarrowLoop {
        op,
        swapped: op != BPF_SUB && rng.gen_bool(0.4),
        signed: rng.gen_bool(0.3),
        address: if rng.gen_bool(0.5) { Address::Offset } else { Address::Pointer },
        body,
        lane_wise,
        start,
        trips,
        cond: [BPF_JEQ, BPF_JGT, BPF_JGE][rng.gen_range(0..3)],
        init: rng.gen(),
        pad: if rng.gen_bool(0.15) { QUICK_TIER_PAD } else { 0 },
    }
}

/// `r9 = ctx.data; r5 = init; r6 = 7 (pad + 1 times); r8 = invariant; r2 = first; [r7 = r9 + start]; loop
/// { r0 = word; body; w5 op= w0; r2 += step; [r7 += 4]; if r2 cond N goto out } out:
/// r0 = r5 ^ r6`.
fn program(l: &NarrowLoop) -> Vec<Insn> {
    let mut v = vec![ldx(BPF_DW, 9, 1, XRP_OFF_DATA as i16)];
    v.extend(lddw(5, l.init));
    v.extend(std::iter::repeat_n(mov64(6, 7), l.pad + 1));
    v.extend(lddw(8, 0x8765_4321_0ff0_f00f));
    let (first, step) = match l.address {
        Address::Offset => (l.start, 4),
        Address::Pointer => (0, 1),
    };
    v.push(mov64(2, first));
    if l.address == Address::Pointer {
        v.extend([mov64_reg(7, 9), alu64_imm(BPF_ADD, 7, l.start)]);
    }
    let header = v.len();
    let load = |src| if l.signed { ldsx(BPF_W, 0, src, 0) } else { ldx(BPF_W, 0, src, 0) };
    match l.address {
        Address::Offset => v.extend([mov64_reg(0, 9), alu64_reg(BPF_ADD, 0, 2), load(0)]),
        Address::Pointer => v.push(load(7)),
    }
    v.extend(&l.body);
    if l.swapped {
        v.extend([alu32_reg(l.op, 0, 5), alu32_reg(BPF_MOV, 5, 0)]);
    } else {
        v.push(alu32_reg(l.op, 5, 0));
    }
    v.push(alu64_imm(BPF_ADD, 2, step));
    if l.address == Address::Pointer {
        v.push(alu64_imm(BPF_ADD, 7, 4));
    }
    let end = first + l.trips * step;
    let bound = if l.cond == BPF_JGT { end - 1 } else { end };
    v.push(jmp_imm(l.cond, 2, bound, 1));
    let back = i16::try_from(header).unwrap() - i16::try_from(v.len()).unwrap() - 1;
    v.push(ja(back));
    v.extend([mov64_reg(0, 5), alu64_reg(BPF_XOR, 0, 6), exit()]);
    v
}

#[test]
fn narrow_vector_reductions_jit_equals_interp() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0004);
    let (mut vectors, mut refused) = (0, 0);
    // Faults and budgets running out in vectorised loops.
    let (mut faulted, mut exhausted) = (0, 0);
    for case in 0..400 {
        let l = random_loop(&mut rng);
        let prog = verified(program(&l));
        let jit = JitProgram::compile(&prog).unwrap_or_else(|e| panic!("{l:?}: {e}"));
        assert!(jit.vector_loops() <= jit.reduction_loops(), "{l:?}");
        if !l.lane_wise {
            assert_eq!(jit.vector_loops(), 0, "{l:?}: vectorised");
            refused += 1;
        }
        if l.trips >= 100 {
            assert_eq!(jit.reduction_loops(), 1, "{l:?}: not a reduction");
            assert_eq!(jit.vector_loops(), usize::from(l.lane_wise), "{l:?}");
        }
        vectors += jit.vector_loops();
        let (fault, budget) = compare_once(&prog, &jit, &mut rng, &format!("case {case}: {l:?}"));
        faulted += usize::from(fault) * jit.vector_loops();
        exhausted += usize::from(budget) * jit.vector_loops();
    }
    assert!(vectors > 120 && refused > 40, "vectorised {vectors}, refused {refused}");
    assert!(faulted > 15 && exhausted > 10, "faults {faulted}, budget {exhausted}");
}

#[test]
fn registers_stepped_beside_the_counter_wrap_in_32_bit_lanes_as_the_scalar_code() {
    // `w3 = w4; w3 <<= 3; w0 += w3` with r4 stepped beside the counter from near 2^32 or
    // 2^64, down, or by large strides: the low half of `v + e * stride` per lane.
    let starts = [0, 0xffff_ff80, 0xffff_ffff_ffff_ffc0, 0x1234_5678_9abc_def0];
    for (start, stride) in starts.into_iter().flat_map(|s| [1, 3, -5, 0x7fff_ffff].map(|k| (s, k)))
    {
        let mut v = vec![ldx(BPF_DW, 9, 1, XRP_OFF_DATA as i16)];
        v.extend(lddw(5, 1));
        v.push(mov64(6, 7));
        v.extend(lddw(4, start));
        v.push(mov64(2, 0));
        let header = v.len();
        v.extend([mov64_reg(0, 9), alu64_reg(BPF_ADD, 0, 2), ldx(BPF_W, 0, 0, 0)]);
        v.extend([alu32_reg(BPF_MOV, 3, 4), alu32_imm(BPF_LSH, 3, 3)]);
        v.extend([alu32_reg(BPF_ADD, 0, 3), alu32_reg(BPF_XOR, 5, 0)]);
        v.extend([alu64_imm(BPF_ADD, 2, 4), alu64_imm(BPF_ADD, 4, stride)]);
        v.push(jmp_imm(BPF_JEQ, 2, 2048, 1));
        let back = i16::try_from(header).unwrap() - i16::try_from(v.len()).unwrap() - 1;
        v.push(ja(back));
        v.extend([mov64_reg(0, 5), alu64_reg(BPF_XOR, 0, 4), exit()]);
        let prog = verified(v);
        let jit = JitProgram::compile(&prog).unwrap();
        let what = format!("start {start:#x}, stride {stride}");
        assert_eq!((jit.reduction_loops(), jit.vector_loops()), (1, 1), "{what}");
        for seed in 0..3 {
            let j = outcome(&prog, DEFAULT_INSN_BUDGET, Some(&jit), seed);
            assert_eq!(j, outcome(&prog, DEFAULT_INSN_BUDGET, None, seed), "{what}");
        }
    }
}
