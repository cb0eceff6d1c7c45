//! Counted loops that reduce (`s += d[i]`, xor, or, and), which the JIT emits with partial
//! accumulators in a guarded ring: JIT against the interpreter on random loops (operation,
//! operand order, load width, step, start, trip count, exit test, budget), loads proved and
//! loads that run past their region (the fault must name the same load), and loops that must
//! not be taken for reductions (the accumulator read in another way, two operation families,
//! 64- and 32-bit arithmetic on it in one loop). The reduction's steps are 64-bit or all
//! 32-bit (`w5 op= w0`, `w5 = w0`: the fold at the exit is exact at 32 bits).

mod jit_support;

use jit_support::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use storefn_vm::insn::*;
use storefn_vm::xrp::XRP_OFF_DATA;
use storefn_vm::JitProgram;

/// A way the loop's body uses its accumulator (r5) that must keep it from being a reduction,
/// or none.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Spoiler {
    None,
    /// `*(u64 *)(r10 - 8) = r5`: a store of the partial value.
    Store,
    /// `r6 = r5; r6 += 1`, r6 read after the loop: a second register holding a partial
    /// value, made whole on the way out (a reduction still).
    Copy,
    /// `r6 = r5; r6 <<= 1`, r6 read after the loop: a shift of a partial value.
    Shift,
    /// `r5 *= 3`: another operation on it.
    Mul,
    /// `w5 += w0` in a 64-bit loop, `r5 op= r0` in a 32-bit one: a second width.
    Alu32,
    /// `r5 ^= r0` beside `r5 += r0`: two families.
    Mixed,
}

#[derive(Clone, Debug)]
struct Loop {
    op: u8,
    /// The reduction's steps (and the copy spoiler's) are 32-bit.
    narrow: bool,
    /// `r5 op= r0`, or `r0 op= r5; r5 = r0`.
    swapped: bool,
    size: u8,
    off: i16,
    start: i32,
    step: i32,
    trips: i32,
    cond: u8,
    init: u64,
    spoiler: Spoiler,
}

fn size_bytes(size: u8) -> i32 {
    match size {
        BPF_B => 1,
        BPF_H => 2,
        BPF_W => 4,
        _ => 8,
    }
}

/// `r9 = ctx.data; r5 = init; r6 = 7; r2 = start; loop { r0 = *(r9 + r2 + off); r5 op= r0;
/// r2 += step; if r2 cond N goto out } out: r0 = r5 ^ r6`.
fn program(l: &Loop) -> Vec<Insn> {
    let mut v = vec![ldx(BPF_DW, 9, 1, XRP_OFF_DATA as i16)];
    v.extend(lddw(5, l.init));
    v.push(mov64(6, 7));
    v.push(mov64(2, l.start));
    let header = v.len();
    v.push(mov64_reg(0, 9));
    v.push(alu64_reg(BPF_ADD, 0, 2));
    v.push(ldx(l.size, 0, 0, l.off));
    let class = if l.narrow { BPF_ALU } else { BPF_ALU64 };
    let alu = |op, dst, src| ins(class | op | BPF_X, dst, src, 0, 0);
    if l.swapped {
        v.push(alu(l.op, 0, 5));
        v.push(alu(BPF_MOV, 5, 0));
    } else {
        v.push(alu(l.op, 5, 0));
    }
    match l.spoiler {
        Spoiler::None => {}
        Spoiler::Store => v.push(stx(BPF_DW, 10, 5, -8)),
        Spoiler::Copy => v.extend([alu(BPF_MOV, 6, 5), ins(class | BPF_ADD | BPF_K, 6, 0, 0, 1)]),
        Spoiler::Shift => v.extend([mov64_reg(6, 5), alu64_imm(BPF_LSH, 6, 1)]),
        Spoiler::Mul => v.push(alu64_imm(BPF_MUL, 5, 3)),
        Spoiler::Alu32 if l.narrow => v.push(alu64_reg(l.op, 5, 0)),
        Spoiler::Alu32 => v.push(alu32_reg(BPF_ADD, 5, 0)),
        Spoiler::Mixed => {
            let other = if l.op == BPF_XOR { BPF_ADD } else { BPF_XOR };
            v.push(alu64_reg(other, 5, 0));
        }
    }
    v.push(alu64_imm(BPF_ADD, 2, l.step));
    close_loop(&mut v, header, l.cond, l.start + l.trips * l.step);
    v
}

/// Ends a generated loop whose counter r2 was just stepped: clang's latch `if r2 <cond> bound
/// goto out; goto header` for a counter that reaches `end`, then `r0 = r5 ^ r6; exit`.
fn close_loop(v: &mut Vec<Insn>, header: usize, cond: u8, end: i32) {
    let bound = if cond == BPF_JGT { end - 1 } else { end };
    v.push(jmp_imm(cond, 2, bound, 1));
    let back = i16::try_from(header).unwrap() - i16::try_from(v.len()).unwrap() - 1;
    v.push(ja(back));
    v.extend([mov64_reg(0, 5), alu64_reg(BPF_XOR, 0, 6), exit()]);
}

fn random_loop(rng: &mut SmallRng) -> Loop {
    const OPS: [u8; 5] = [BPF_ADD, BPF_SUB, BPF_XOR, BPF_OR, BPF_AND];
    const SIZES: [u8; 4] = [BPF_B, BPF_H, BPF_W, BPF_DW];
    let op = OPS[rng.gen_range(0..OPS.len())];
    let size = SIZES[rng.gen_range(0..SIZES.len())];
    let step = [1, 2, 4, 8, 12][rng.gen_range(0..5)];
    let start = rng.gen_range(0..64) * step;
    // Most loops stay inside the data (proved loads); some run up to a few words past it
    // (checked loads that fault on the way).
    let room = (DATA_BYTES as i32 - start - size_bytes(size)) / step;
    let trips = if rng.gen_bool(0.8) {
        rng.gen_range(1..=room.min(700))
    } else {
        room + rng.gen_range(1..4)
    };
    let spoilers = [
        Spoiler::Store,
        Spoiler::Copy,
        Spoiler::Shift,
        Spoiler::Mul,
        Spoiler::Alu32,
        Spoiler::Mixed,
    ];
    Loop {
        op,
        narrow: rng.gen_bool(0.4),
        swapped: op != BPF_SUB && rng.gen_bool(0.4),
        size,
        off: 0,
        start,
        step,
        trips,
        cond: [BPF_JEQ, BPF_JGT, BPF_JGE][rng.gen_range(0..3)],
        init: rng.gen(),
        spoiler: if rng.gen_bool(0.75) {
            Spoiler::None
        } else {
            spoilers[rng.gen_range(0..spoilers.len())]
        },
    }
}

#[test]
fn reductions_jit_equals_interp() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0001);
    let (mut reduced, mut narrow, mut faulted, mut exhausted) = (0, 0, 0, 0);
    for case in 0..400 {
        let l = random_loop(&mut rng);
        let prog = verified(program(&l));
        let jit = JitProgram::compile(&prog).unwrap_or_else(|e| panic!("{l:?}: {e}"));
        if !matches!(l.spoiler, Spoiler::None | Spoiler::Copy) {
            assert_eq!(jit.reduction_loops(), 0, "{l:?}: taken for a reduction");
        }
        reduced += jit.reduction_loops();
        narrow += if l.narrow { jit.reduction_loops() } else { 0 };
        // A 32-bit reduction is vector code (32-bit lanes) only over u32 words, consecutive.
        let words = l.size == BPF_W && l.step == 4;
        assert!(!l.narrow || words || jit.vector_loops() == 0, "{l:?}: vectorised");
        let (fault, budget) = compare_once(&prog, &jit, &mut rng, &format!("case {case}: {l:?}"));
        faulted += usize::from(fault);
        exhausted += usize::from(budget);
    }
    // The generator reaches every kind of case.
    assert!(reduced > 150, "only {reduced} loops taken for reductions");
    assert!(narrow > 60, "only {narrow} 32-bit loops taken for reductions");
    assert!(faulted > 10 && exhausted > 10, "faults {faulted}, budget {exhausted}");
}

#[test]
fn the_bench_reductions_are_taken() {
    // sum64 and popcount shapes: `r0 = r4; r0 += r2; r0 = *(u64 *)(r0 + 0); r0 += r5; ...`.
    for swapped in [false, true] {
        let l = Loop {
            op: BPF_ADD,
            narrow: false,
            swapped,
            size: BPF_DW,
            off: 0,
            start: 0,
            step: 8,
            trips: 512,
            cond: BPF_JEQ,
            init: 3,
            spoiler: Spoiler::None,
        };
        let prog = verified(program(&l));
        let jit = JitProgram::compile(&prog).unwrap();
        assert_eq!(jit.reduction_loops(), 1, "{l:?}");
        let (r, _) = outcome(&prog, DEFAULT_INSN_BUDGET, Some(&jit), 9);
        assert_eq!(r, outcome(&prog, DEFAULT_INSN_BUDGET, None, 9).0);
    }
}

#[test]
fn narrow_reductions_fold_exactly_at_32_bits() {
    // Every family, with an accumulator whose upper half starts set (the 32-bit steps clear
    // it) and sums that carry past 32 bits (the fold must drop the carry).
    for (op, swapped) in [(BPF_ADD, false), (BPF_SUB, false), (BPF_XOR, true), (BPF_AND, false)] {
        let l = Loop {
            op,
            narrow: true,
            swapped,
            size: BPF_W,
            off: 0,
            start: 0,
            step: 4,
            trips: 512,
            cond: BPF_JEQ,
            init: 0xdead_beef_0000_0001,
            // `w6 = w5; w6 += 1`: a second partial register (same family for add and sub).
            spoiler: if matches!(op, BPF_ADD | BPF_SUB) { Spoiler::Copy } else { Spoiler::None },
        };
        let prog = verified(program(&l));
        let jit = JitProgram::compile(&prog).unwrap();
        // In 32-bit lanes, the accumulator's upper half dropped at the start of the ring.
        assert_eq!((jit.reduction_loops(), jit.vector_loops()), (1, 1), "{l:?}");
        for seed in 0..4 {
            let (r, _) = outcome(&prog, DEFAULT_INSN_BUDGET, Some(&jit), seed);
            assert_eq!(r, outcome(&prog, DEFAULT_INSN_BUDGET, None, seed).0, "{l:?}");
        }
    }
    // `w6 = w5; w6 ^= w0` with r5 never written: r5 keeps its upper half, which a 32-bit
    // fold would clear, so the loop is refused.
    let mut v = vec![ldx(BPF_DW, 9, 1, XRP_OFF_DATA as i16)];
    v.extend(lddw(5, 0xdead_beef_0000_0001));
    v.extend([mov64(6, 7), mov64(2, 0)]);
    v.extend([mov64_reg(0, 9), alu64_reg(BPF_ADD, 0, 2), ldx(BPF_W, 0, 0, 0)]);
    v.extend([ins(BPF_ALU | BPF_MOV | BPF_X, 6, 5, 0, 0), alu32_reg(BPF_XOR, 6, 0)]);
    v.extend([alu64_imm(BPF_ADD, 2, 4), jmp_imm(BPF_JEQ, 2, 2048, 1), ja(-8)]);
    v.extend([mov64_reg(0, 5), alu64_reg(BPF_XOR, 0, 6), exit()]);
    let prog = verified(v);
    let jit = JitProgram::compile(&prog).unwrap();
    assert_eq!(jit.reduction_loops(), 0);
    let (r, _) = outcome(&prog, DEFAULT_INSN_BUDGET, Some(&jit), 1);
    assert_eq!(r, outcome(&prog, DEFAULT_INSN_BUDGET, None, 1).0);
}

/// The SWAR population count of the word at `data + 8`, in 64- or 32-bit arithmetic, with
/// constant or shift number `spoil` (0..7) off by one bit (`None`: the exact sequence), and
/// an intermediate value read after it when `reuse`.
fn popcount_program(w64: bool, spoil: Option<usize>, reuse: bool) -> Vec<Insn> {
    let mut k: [u64; 8] = [1, M1, M2, 2, 4, M4, H01, 56];
    if !w64 {
        k = [1, M1 & 0xffff_ffff, M2 & 0xffff_ffff, 2, 4, M4 & 0xffff_ffff, H01 & 0xffff_ffff, 24];
    }
    if let Some(s) = spoil {
        k[s] ^= if s == 0 || s == 3 || s == 4 || s == 7 { 1 } else { 1 << 9 };
    }
    let imm = |v: u64| i32::try_from(v).unwrap();
    let (alu_k, alu_x, mov) = if w64 {
        (alu64_imm as fn(u8, u8, i32) -> Insn, alu64_reg as fn(u8, u8, u8) -> Insn, mov64_reg(3, 2))
    } else {
        (
            alu32_imm as fn(u8, u8, i32) -> Insn,
            alu32_reg as fn(u8, u8, u8) -> Insn,
            alu32_reg(BPF_MOV, 3, 2),
        )
    };
    // A mask `m` applied to r`dst`: through r4 at 64 bits (the masks need lddw).
    let and_mask = |v: &mut Vec<Insn>, dst: u8, m: u64| {
        if w64 {
            v.extend(lddw(4, m));
            v.push(alu_x(BPF_AND, dst, 4));
        } else {
            v.push(alu_k(BPF_AND, dst, imm(m)));
        }
    };
    let mut v = vec![ldx(BPF_DW, 9, 1, XRP_OFF_DATA as i16), ldx(BPF_DW, 2, 9, 8)];
    v.extend([mov, alu_k(BPF_RSH, 3, imm(k[0]))]);
    and_mask(&mut v, 3, k[1]);
    v.push(alu_x(BPF_SUB, 2, 3));
    v.push(if w64 { mov64_reg(3, 2) } else { alu32_reg(BPF_MOV, 3, 2) });
    and_mask(&mut v, 3, k[2]);
    v.push(alu_k(BPF_RSH, 2, imm(k[3])));
    and_mask(&mut v, 2, k[2]);
    v.push(alu_x(BPF_ADD, 3, 2));
    v.push(if w64 { mov64_reg(2, 3) } else { alu32_reg(BPF_MOV, 2, 3) });
    v.push(alu_k(BPF_RSH, 2, imm(k[4])));
    v.push(alu_x(BPF_ADD, 3, 2));
    and_mask(&mut v, 3, k[5]);
    if w64 {
        v.extend(lddw(4, k[6]));
        v.push(alu_x(BPF_MUL, 3, 4));
    } else {
        v.push(alu_k(BPF_MUL, 3, imm(k[6])));
    }
    v.push(alu_k(BPF_RSH, 3, imm(k[7])));
    v.push(mov64_reg(0, 3));
    if reuse {
        v.push(alu64_reg(BPF_XOR, 0, 2));
    }
    v.push(exit());
    v
}

const M1: u64 = 0x5555_5555_5555_5555;
const M2: u64 = 0x3333_3333_3333_3333;
const M4: u64 = 0x0f0f_0f0f_0f0f_0f0f;
const H01: u64 = 0x0101_0101_0101_0101;

#[test]
fn swar_popcounts_jit_equals_interp_and_only_exact_ones_are_replaced() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0002);
    for w64 in [true, false] {
        for spoil in std::iter::once(None).chain((0..8).map(Some)) {
            for reuse in [false, true] {
                let prog = verified(popcount_program(w64, spoil, reuse));
                let jit = JitProgram::compile(&prog).unwrap();
                let what = format!("w64 {w64}, spoil {spoil:?}, reuse {reuse}");
                assert_eq!(jit.idioms(), usize::from(spoil.is_none()), "{what}");
                for _ in 0..20 {
                    let seed = rng.gen();
                    let j = outcome(&prog, DEFAULT_INSN_BUDGET, Some(&jit), seed);
                    assert_eq!(j, outcome(&prog, DEFAULT_INSN_BUDGET, None, seed), "{what}");
                }
            }
        }
    }
}

#[test]
fn wide_swaps_of_narrow_words_jit_equals_interp() {
    // `r0 = *(u32 *)(data + 4); r0 = be64 r0; r0 >>= k`: narrowed to a 32-bit swap for
    // 32 <= k < 64 of a 32-bit load only.
    for size in [BPF_W, BPF_DW] {
        for k in [0, 8, 31, 32, 36, 40, 63] {
            let prog = verified(vec![
                ldx(BPF_DW, 9, 1, XRP_OFF_DATA as i16),
                ldx(size, 0, 9, 4),
                ins(BPF_ALU | BPF_END | BPF_X, 0, 0, 0, 64),
                alu64_imm(BPF_RSH, 0, k),
                exit(),
            ]);
            let jit = JitProgram::compile(&prog).unwrap();
            let narrowed = size == BPF_W && k >= 32;
            assert_eq!(jit.idioms(), usize::from(narrowed), "size {size:#x}, k {k}");
            for seed in 0..8 {
                let j = outcome(&prog, DEFAULT_INSN_BUDGET, Some(&jit), seed);
                assert_eq!(j, outcome(&prog, DEFAULT_INSN_BUDGET, None, seed), "k {k}");
            }
        }
    }
}

/// How a vector loop's body finds its element.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Address {
    /// `r0 = r9; r0 += r2`: the counter steps by the element's size.
    Offset,
    /// `r0 = r2; r0 <<= log2(size); r0 += r9`: the counter counts elements.
    Index,
    /// `r7` stepped by the element's size beside the counter, which counts elements.
    Pointer,
}

/// What a vector loop's body does to the loaded value before reducing it: an operation the
/// lanes can do, or one that must keep the loop scalar (`Alu32`, `Mul`, `Arsh`, `Carried`).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Value {
    Plain,
    Xor,
    AddK,
    Shl,
    Shr,
    Neg,
    AndInvariant,
    /// `w0 += 1`: 32-bit arithmetic on a lane.
    Alu32,
    /// `r0 *= 3`.
    Mul,
    /// `r0 s>>= 3`.
    Arsh,
    /// `r0 ^= r6; r6 = r2`: r6 carries the iteration before's counter.
    Carried,
}

impl Value {
    fn lane_wise(self) -> bool {
        !matches!(self, Value::Alu32 | Value::Mul | Value::Arsh | Value::Carried)
    }
}

#[derive(Clone, Debug)]
struct VectorLoop {
    op: u8,
    swapped: bool,
    size: u8,
    signed: bool,
    address: Address,
    value: Value,
    /// Byte offset of the first element in the data (any alignment).
    start: i32,
    trips: i32,
    cond: u8,
    init: u64,
    /// Slots of padding before the loop: past `QUICK_TIER_SLOTS`, the quick tier compiles it
    /// (its read windows live in memory, not in variables).
    pad: usize,
}

/// `r9 = ctx.data; r5 = init; r6 = 7; r8 = invariant; r2 = first; [r7 = r9 + start]; loop
/// { r0 = element; r0 = value(r0); r5 op= r0; r2 += step; [r7 += size]; if r2 cond N goto
/// out } out: r0 = r5 ^ r6`.
fn vector_program(l: &VectorLoop) -> Vec<Insn> {
    let bytes = size_bytes(l.size);
    let mut v = vec![ldx(BPF_DW, 9, 1, XRP_OFF_DATA as i16)];
    v.extend(lddw(5, l.init));
    v.extend(std::iter::repeat_n(mov64(6, 7), l.pad));
    v.extend([mov64(6, 7), mov64(8, 0x0ff0_f00f)]);
    let (first, step) = match l.address {
        Address::Offset => (l.start, bytes),
        Address::Index | Address::Pointer => (0, 1),
    };
    v.push(mov64(2, first));
    if l.address == Address::Pointer {
        v.extend([mov64_reg(7, 9), alu64_imm(BPF_ADD, 7, l.start)]);
    }
    let header = v.len();
    let load = if l.signed { ldsx(l.size, 0, 0, 0) } else { ldx(l.size, 0, 0, 0) };
    match l.address {
        Address::Offset => v.extend([mov64_reg(0, 9), alu64_reg(BPF_ADD, 0, 2), load]),
        Address::Index => v.extend([
            mov64_reg(0, 2),
            alu64_imm(BPF_LSH, 0, bytes.trailing_zeros() as i32),
            alu64_reg(BPF_ADD, 0, 9),
            alu64_imm(BPF_ADD, 0, l.start),
            load,
        ]),
        Address::Pointer => {
            let p = if l.signed { ldsx(l.size, 0, 7, 0) } else { ldx(l.size, 0, 7, 0) };
            v.push(p);
        }
    }
    v.extend(match l.value {
        Value::Plain => vec![],
        Value::Xor => vec![alu64_imm(BPF_XOR, 0, -0x1234_5679)],
        Value::AddK => vec![alu64_imm(BPF_ADD, 0, 77)],
        Value::Shl => vec![alu64_imm(BPF_LSH, 0, 13)],
        Value::Shr => vec![alu64_imm(BPF_RSH, 0, 29)],
        Value::Neg => vec![ins(BPF_ALU64 | BPF_NEG, 0, 0, 0, 0)],
        Value::AndInvariant => vec![alu64_reg(BPF_AND, 0, 8)],
        Value::Alu32 => vec![alu32_imm(BPF_ADD, 0, 1)],
        Value::Mul => vec![alu64_imm(BPF_MUL, 0, 3)],
        Value::Arsh => vec![alu64_imm(BPF_ARSH, 0, 3)],
        Value::Carried => vec![alu64_reg(BPF_XOR, 0, 6), mov64_reg(6, 2)],
    });
    if l.swapped {
        v.extend([alu64_reg(l.op, 0, 5), mov64_reg(5, 0)]);
    } else {
        v.push(alu64_reg(l.op, 5, 0));
    }
    v.push(alu64_imm(BPF_ADD, 2, step));
    if l.address == Address::Pointer {
        v.push(alu64_imm(BPF_ADD, 7, bytes));
    }
    close_loop(&mut v, header, l.cond, first + l.trips * step);
    v
}

fn random_vector_loop(rng: &mut SmallRng) -> VectorLoop {
    const OPS: [u8; 5] = [BPF_ADD, BPF_SUB, BPF_XOR, BPF_OR, BPF_AND];
    const VALUES: [Value; 11] = [
        Value::Plain,
        Value::Xor,
        Value::AddK,
        Value::Shl,
        Value::Shr,
        Value::Neg,
        Value::AndInvariant,
        Value::Alu32,
        Value::Mul,
        Value::Arsh,
        Value::Carried,
    ];
    let op = OPS[rng.gen_range(0..OPS.len())];
    let size = if rng.gen_bool(0.5) { BPF_W } else { BPF_DW };
    let bytes = size_bytes(size);
    let start = rng.gen_range(0..200);
    // Most loops stay inside the data; some run a few elements past it (the pass's check
    // fails, and the scalar copy faults at the load).
    let room = (DATA_BYTES as i32 - start) / bytes;
    let trips = match rng.gen_range(0..10) {
        0..=1 => room + rng.gen_range(1..12),
        2 => rng.gen_range(1..40),
        _ => rng.gen_range(40..=room.min(900)),
    };
    let value = if rng.gen_bool(0.7) {
        VALUES[rng.gen_range(0..7)]
    } else {
        VALUES[rng.gen_range(0..VALUES.len())]
    };
    VectorLoop {
        op,
        swapped: op != BPF_SUB && rng.gen_bool(0.4),
        size,
        signed: size == BPF_W && rng.gen_bool(0.3),
        address: [Address::Offset, Address::Index, Address::Pointer][rng.gen_range(0..3)],
        value,
        start,
        trips,
        cond: [BPF_JEQ, BPF_JGT, BPF_JGE][rng.gen_range(0..3)],
        init: rng.gen(),
        pad: if rng.gen_bool(0.15) { QUICK_TIER_PAD } else { 0 },
    }
}

#[test]
fn vector_reductions_jit_equals_interp() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0003);
    let (mut vectors, mut faulted, mut exhausted) = (0, 0, 0);
    for case in 0..300 {
        let l = random_vector_loop(&mut rng);
        let prog = verified(vector_program(&l));
        let jit = JitProgram::compile(&prog).unwrap_or_else(|e| panic!("{l:?}: {e}"));
        assert!(jit.vector_loops() <= jit.reduction_loops(), "{l:?}");
        if !l.value.lane_wise() {
            assert_eq!(jit.vector_loops(), 0, "{l:?}: vectorised");
        }
        if l.value.lane_wise() && l.trips >= 100 {
            assert_eq!(jit.vector_loops(), 1, "{l:?}: not vectorised");
        }
        vectors += jit.vector_loops();
        let (fault, budget) = compare_once(&prog, &jit, &mut rng, &format!("case {case}: {l:?}"));
        faulted += usize::from(fault);
        exhausted += usize::from(budget);
    }
    assert!(vectors > 120, "only {vectors} loops vectorised");
    assert!(faulted > 20 && exhausted > 10, "faults {faulted}, budget {exhausted}");
}

#[test]
fn partial_values_in_an_address_or_a_store_keep_the_loop_scalar() {
    let base = VectorLoop {
        op: BPF_ADD,
        swapped: false,
        size: BPF_DW,
        signed: false,
        address: Address::Offset,
        value: Value::Plain,
        start: 0,
        trips: 512,
        cond: BPF_JEQ,
        init: 5,
        pad: 0,
    };
    let jit = JitProgram::compile(&verified(vector_program(&base))).unwrap();
    assert_eq!((jit.reduction_loops(), jit.vector_loops()), (1, 1));
    // The accumulator stored to the stack in the body: no reduction at all.
    let mut stored = vector_program(&base);
    let at = stored.iter().position(|i| i.op == BPF_ALU64 | BPF_ADD | BPF_X && i.dst == 5);
    stored.insert(at.unwrap() + 1, stx(BPF_DW, 10, 5, -8));
    let jit = JitProgram::compile(&verified(fix_back_edge(stored))).unwrap();
    assert_eq!((jit.reduction_loops(), jit.vector_loops()), (0, 0));
    // A second load whose address is the counter plus a constant stride of another size
    // (not consecutive elements): a reduction, kept scalar.
    let mut strided = vector_program(&base);
    let at = strided.iter().position(|i| i.op == BPF_ALU64 | BPF_ADD | BPF_X && i.dst == 5);
    strided.splice(
        at.unwrap() + 1..at.unwrap() + 1,
        [mov64_reg(3, 2), alu64_imm(BPF_LSH, 3, 1), alu64_reg(BPF_ADD, 3, 9), ldx(BPF_DW, 3, 3, 0)],
    );
    strided.splice(at.unwrap() + 5..at.unwrap() + 5, [alu64_reg(BPF_ADD, 5, 3)]);
    let prog = verified(fix_back_edge(strided));
    let jit = JitProgram::compile(&prog).unwrap();
    assert_eq!((jit.reduction_loops(), jit.vector_loops()), (1, 0));
    for seed in 0..4 {
        let j = outcome(&prog, DEFAULT_INSN_BUDGET, Some(&jit), seed);
        assert_eq!(j, outcome(&prog, DEFAULT_INSN_BUDGET, None, seed));
    }
}

/// `insns` with the loop's back edge (the one `ja`) retargeted at the header (slot 6).
fn fix_back_edge(mut insns: Vec<Insn>) -> Vec<Insn> {
    let at = insns.iter().position(|i| i.op == BPF_JMP | BPF_JA).unwrap();
    insns[at] = ja(6 - i16::try_from(at).unwrap() - 1);
    insns
}
