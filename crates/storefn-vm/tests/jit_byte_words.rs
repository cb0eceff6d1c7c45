//! Byte loads recomposed into a word (`p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3]`), which the
//! JIT loads as one word (plus a byte swap): JIT against the interpreter on random
//! recompositions, big- and little-endian, 2/4/8 bytes, 32- and 64-bit arithmetic, over
//! proved and checked addresses, with stores, jumps and base changes between the byte loads
//! and words that run one byte past their region (the fault must name the same byte load).

mod jit_support;

use jit_support::*;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use storefn_vm::insn::*;
use storefn_vm::{JitProgram, Program, RunEnv, VerifiedProgram, VmError};

/// Data base register (from the context's `data` field, so the range analysis proves what it
/// can) and a second base, `r8 = r9 + k`.
const DATA_REG: u8 = 9;
const PTR_REG: u8 = 8;

/// What the JIT and the interpreter did: r0 or the fault, the data and the budget left.
fn outcome(
    prog: &VerifiedProgram,
    budget: u64,
    jit: Option<&JitProgram>,
) -> (Result<u64, VmError>, Vec<u64>, u64) {
    let mut sb = Sandbox::new();
    use storefn_vm::xrp::{XRP_OFF_DATA, XRP_OFF_SCRATCH};
    sb.ctx[XRP_OFF_DATA / 8] = sb.data_addr();
    sb.ctx[XRP_OFF_SCRATCH / 8] = sb.data_addr() + DATA_BYTES as u64 / 2;
    for (i, w) in sb.data.iter_mut().enumerate() {
        *w = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x0123_4567_89ab_cdef;
    }
    let mut env: RunEnv = sb.env(budget);
    let (ctx, top) = (sb.ctx_addr(), sb.stack_top());
    let result = match jit {
        Some(j) => run_jit(j, &mut env, ctx, top),
        // SAFETY: the env grants only the sandbox's own buffers, alive for the call; no host.
        None => unsafe { storefn_vm::interpret(prog, &mut env, ctx, top) },
    };
    let left = env.insns_left;
    (result, sb.data.clone(), left)
}

/// One recomposition: `n` byte loads from `base + off ..`, each shifted to its lane
/// (big-endian: the first byte highest) and ORed into `acc`, in 32-bit arithmetic when the
/// word fits and `w32`. `order` is the load order (a permutation of the bytes). `between`
/// is put after the first byte load (a store, a jump, a base change: each must stop the
/// fusion or keep it correct).
struct Word {
    base: u8,
    off: i16,
    n: i16,
    big: bool,
    w32: bool,
    acc: u8,
    from_zero: bool,
    order: Vec<i16>,
    between: Vec<Insn>,
}

fn emit(w: &Word, out: &mut Vec<Insn>) {
    let (alu_or, alu_lsh) = if w.w32 {
        (BPF_ALU | BPF_OR | BPF_X, BPF_ALU | BPF_LSH | BPF_K)
    } else {
        (BPF_ALU64 | BPF_OR | BPF_X, BPF_ALU64 | BPF_LSH | BPF_K)
    };
    // From zero (`acc = 0; acc |= ...`) or from the first byte (`acc = byte << k; acc |= ...`).
    if w.from_zero {
        out.push(mov64(w.acc, 0));
    }
    for (k, &byte) in w.order.iter().enumerate() {
        let lane = if w.big { w.n - 1 - byte } else { byte };
        let t = if w.acc == 6 { 7 } else { 6 };
        out.push(ldx(BPF_B, t, w.base, w.off + byte));
        if lane > 0 {
            out.push(ins(alu_lsh, t, 0, 0, i32::from(lane) * 8));
        }
        if k == 0 && !w.from_zero {
            out.push(ins(BPF_ALU64 | BPF_MOV | BPF_X, w.acc, t, 0, 0));
        } else {
            out.push(ins(alu_or, w.acc, t, 0, 0));
        }
        if k == 0 {
            out.extend(w.between.iter().copied());
        }
    }
    out.push(ins(BPF_ALU64 | BPF_XOR | BPF_X, 0, w.acc, 0, 0));
    out.push(ins(BPF_ALU64 | BPF_MUL | BPF_K, 0, 0, 0, 0x1003));
}

fn random_word(rng: &mut SmallRng) -> Word {
    let n = [2i16, 4, 8][rng.gen_range(0..3)];
    let base = if rng.gen_bool(0.7) { DATA_REG } else { PTR_REG };
    let limit = DATA_BYTES as i16 - if base == PTR_REG { 64 } else { 0 };
    let off = match rng.gen_range(0..12) {
        // One byte past the region, or one before it: some byte load must fault.
        0 => limit - n + 1,
        1 => -1,
        _ => rng.gen_range(0..=limit - n),
    };
    let mut order: Vec<i16> = (0..n).collect();
    match rng.gen_range(0..4) {
        0 => order.reverse(),
        1 => order.shuffle(rng),
        _ => {}
    }
    if rng.gen_range(0..10) == 0 {
        // Not consecutive: a byte twice, another missing.
        order[0] = order[1];
    }
    let between = match rng.gen_range(0..10) {
        // A store into the word's bytes: the later loads see it, a word load would too.
        0 => vec![st(BPF_B, base, off + n - 1, rng.gen_range(0..256))],
        1 => vec![stx(BPF_DW, base, 1, off & !7)],
        // A jump that starts a block (skips nothing).
        2 => vec![jmp_imm(BPF_JEQ, 0, 7, 0)],
        // The base moves: the later loads are from another base value.
        3 if base == PTR_REG => vec![alu64_imm(BPF_ADD, PTR_REG, 1)],
        _ => Vec::new(),
    };
    Word {
        base,
        off,
        n,
        big: rng.gen_bool(0.5),
        w32: n <= 4 && rng.gen_bool(0.5),
        acc: [2, 3, 4, 5][rng.gen_range(0..4)],
        from_zero: rng.gen_bool(0.5),
        order,
        between,
    }
}

fn random_program(seed: u64) -> Program {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut insns = vec![ldx(BPF_DW, DATA_REG, 1, 0), mov64(0, 0)];
    insns.push(ins(BPF_ALU64 | BPF_MOV | BPF_X, PTR_REG, DATA_REG, 0, 0));
    insns.push(alu64_imm(BPF_ADD, PTR_REG, rng.gen_range(0..64)));
    for _ in 0..rng.gen_range(1..6) {
        emit(&random_word(&mut rng), &mut insns);
    }
    insns.push(exit());
    program(insns)
}

#[test]
fn recomposed_words_jit_equals_interp() {
    let (mut fused, mut faults) = (0, 0);
    for seed in 0..600u64 {
        let prog = VerifiedProgram::new(random_program(seed))
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let jit = JitProgram::compile(&prog).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        fused += jit.fused_loads();
        for budget in [5, 40, 100_000] {
            let j = outcome(&prog, budget, Some(&jit));
            let i = outcome(&prog, budget, None);
            assert_eq!(j, i, "seed {seed} budget {budget}: {:?}", prog.insns);
            faults += usize::from(matches!(j.0, Err(VmError::BadRead { .. })));
        }
    }
    assert!(fused > 500, "only {fused} recompositions loaded as words");
    assert!(faults > 50, "only {faults} faults compared");
}

/// `r0 = p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3]` at `off` from the data base, with
/// `between` after the first byte load; returns the program's slots.
fn be32_at(off: i16, between: &[Insn]) -> Vec<Insn> {
    let w = Word {
        base: DATA_REG,
        off,
        n: 4,
        big: true,
        w32: true,
        acc: 2,
        from_zero: true,
        order: vec![0, 1, 2, 3],
        between: between.to_vec(),
    };
    let mut insns = vec![ldx(BPF_DW, DATA_REG, 1, 0), mov64(0, 0)];
    insns.push(ins(BPF_ALU64 | BPF_MOV | BPF_X, PTR_REG, DATA_REG, 0, 0));
    insns.push(alu64_imm(BPF_ADD, PTR_REG, 1));
    emit(&w, &mut insns);
    insns.push(exit());
    insns
}

#[test]
fn a_word_is_loaded_only_from_one_straight_run_of_byte_loads() {
    let fused = |insns: Vec<Insn>| JitProgram::compile(&verified(insns)).unwrap().fused_loads();
    assert_eq!(fused(be32_at(16, &[])), 1);
    // A store between the byte loads, a block start, a different base value: no word load.
    assert_eq!(fused(be32_at(16, &[st(BPF_B, DATA_REG, 19, 7)])), 0);
    assert_eq!(fused(be32_at(16, &[jmp_imm(BPF_JEQ, 0, 7, 0)])), 0);
    // The first byte through r8 = r9 + 1: the same address from another base value.
    let mut moved = be32_at(16, &[]);
    assert_eq!((moved[5].class(), moved[5].off), (BPF_LDX, 16));
    (moved[5].src, moved[5].off) = (PTR_REG, 15);
    assert_eq!(fused(moved), 0);
    // Bytes 16, 17, 18, 20: not one word.
    let mut gap = be32_at(16, &[]);
    let last = gap.iter().rposition(|i| i.class() == BPF_LDX).unwrap();
    gap[last].off += 1;
    assert_eq!(fused(gap), 0);
}

#[test]
fn a_word_one_byte_past_its_region_faults_at_that_byte_load() {
    let insns = be32_at(DATA_BYTES as i16 - 3, &[]);
    let last_byte = insns.iter().rposition(|i| i.class() == BPF_LDX).unwrap();
    let prog = verified(insns);
    let jit = JitProgram::compile(&prog).unwrap();
    assert_eq!(jit.fused_loads(), 1, "the word load is emitted (after the byte loads' checks)");
    let j = outcome(&prog, 1000, Some(&jit));
    assert_eq!(j, outcome(&prog, 1000, None));
    match j.0 {
        Err(VmError::BadRead { insn, .. }) => assert_eq!(insn, last_byte),
        other => panic!("expected a BadRead at #{last_byte}, got {other:?}"),
    }
}
