//! Programs past the JIT's quick-tier threshold (1,024 slots: Cranelift's quick tier, with
//! the block merging of src/jit/blocks.rs) run exactly as on the interpreter. Random programs
//! of 1,100-1,600 slots mix conditional jumps over short runs of arithmetic (if-converted,
//! their targets continuing the jump's block), targets two jumps land on (not merged), runs
//! ended by a `goto`, branches over loads, checked loads through pointers that sometimes lie
//! outside every region, stores, loops with a budget charge per trip, and calls to functions
//! of converted runs (short ones inlined, long ones compiled on their own); each runs on both
//! engines over the same buffers with the default budget and with one that runs out part
//! way: the result (the faulting instruction and error included), the scratch bytes and the
//! instructions charged must agree. It fails when a block that another jump enters is merged
//! (the compile panics in Cranelift: tried).

mod common;

use std::sync::Arc;

use common::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use storefn_vm::insn::*;
use storefn_vm::{Engine, Instance, JitProgram, ProgType, VerifiedProgram, VmError, XrpCtx};

/// r6 = ctx->data, r7 = ctx->scratch.
const DATA: u8 = 6;
const SCRATCH: u8 = 7;
const DATA_LEN: usize = 4096;
const SCRATCH_LEN: usize = 4096;
/// Scratch words 0..POINTERS hold data offsets the program loads through.
const POINTERS: i32 = 128;
/// The quick tier starts past 1,024 slots.
const MIN_SLOTS: usize = 1100;
const SIZES: [u8; 4] = [BPF_B, BPF_H, BPF_W, BPF_DW];
const CONDS: [u8; 6] = [BPF_JGT, BPF_JEQ, BPF_JSET, BPF_JSLT, BPF_JNE, BPF_JLE];
const ALUS: [u8; 5] = [BPF_ADD, BPF_XOR, BPF_MUL, BPF_OR, BPF_SUB];

/// A conditional jump on r0, r8 or r9 over `off` slots (64- or 32-bit compare).
fn cond(rng: &mut SmallRng, off: i16) -> Insn {
    let class = if rng.gen_bool(0.25) { BPF_JMP32 } else { BPF_JMP };
    let (op, dst) = (CONDS[rng.gen_range(0..CONDS.len())], [0, 8, 9][rng.gen_range(0..3)]);
    ins(class | op | BPF_K, dst, 0, off, rng.gen_range(-64..1 << 12))
}

/// Register arithmetic on r0, r8 or r9.
fn arith(rng: &mut SmallRng) -> Insn {
    let (op, dst) = (ALUS[rng.gen_range(0..ALUS.len())], [0, 8, 9][rng.gen_range(0..3)]);
    match rng.gen_range(0..3) {
        0 => alu64_reg(op, dst, [0, 8, 9][rng.gen_range(0..3)]),
        1 => alu32_imm(op, dst, rng.gen_range(1..1000)),
        _ => alu64_imm(op, dst, rng.gen_range(1..1000)),
    }
}

/// One piece of a generated program (module documentation).
fn piece(rng: &mut SmallRng, p: &mut Vec<Insn>) {
    match rng.gen_range(0..16) {
        // Over 1-4 slots of arithmetic: if-converted, the target merged.
        0..=5 => {
            let k = rng.gen_range(1..=4);
            p.push(cond(rng, k));
            (0..k).for_each(|_| p.push(arith(rng)));
        }
        // Two jumps landing on one target: it keeps its block.
        6 => {
            p.push(cond(rng, 3));
            p.push(cond(rng, 2));
            p.push(arith(rng));
            p.push(arith(rng));
        }
        // A run ended by a `goto` to the jump's target.
        7 => {
            p.push(cond(rng, 2));
            p.push(arith(rng));
            p.push(ja(0));
        }
        // A branch over a proved load.
        8 => {
            p.push(cond(rng, 1));
            p.push(ldx(BPF_W, 9, DATA, 4 * rng.gen_range(0..1024)));
        }
        // A checked load through a scratch word (some point outside data).
        9..=11 => {
            p.push(ldx(BPF_DW, 4, SCRATCH, 8 * rng.gen_range(0..POINTERS) as i16));
            p.push(alu64_reg(BPF_ADD, 4, DATA));
            p.push(ldx(SIZES[rng.gen_range(0..4)], 8, 4, rng.gen_range(-2..8)));
            p.push(alu64_reg(BPF_ADD, 0, 8));
        }
        12 => p.push(stx(BPF_DW, SCRATCH, 0, 2048 + 8 * rng.gen_range(0..64))),
        // A loop of 1-8 trips, charged per trip (its header is a charge point).
        13 => {
            p.push(mov64_reg(4, 0));
            p.push(alu64_imm(BPF_AND, 4, 7));
            p.push(alu64_imm(BPF_ADD, 4, 1));
            p.push(alu64_reg(BPF_ADD, 0, 4));
            p.push(alu64_imm(BPF_SUB, 4, 1));
            p.push(jmp_imm(BPF_JNE, 4, 0, -3));
        }
        _ => p.push(arith(rng)),
    }
}

/// A function of `r1` for [`gen`]'s calls: converted runs and arithmetic on r0, r8 and r9;
/// short ones are inlined, long ones (over the inliner's 64 slots) compiled on their own.
fn function(rng: &mut SmallRng, long: bool) -> Vec<Insn> {
    let mut f = vec![mov64_reg(0, 1), mov64_reg(8, 1), mov64_imm(9, 7)];
    let len = if long { rng.gen_range(80..120) } else { rng.gen_range(8..40) };
    while f.len() < len {
        if rng.gen_bool(0.6) {
            let k = rng.gen_range(1..=4);
            f.push(cond(rng, k));
            (0..k).for_each(|_| f.push(arith(rng)));
        } else {
            f.push(arith(rng));
        }
    }
    f.push(exit());
    f
}

fn gen(rng: &mut SmallRng) -> Vec<Insn> {
    let mut p = vec![
        ldx(BPF_DW, DATA, 1, 0),
        ldx(BPF_DW, SCRATCH, 1, 272),
        mov64_imm(0, 0),
        mov64_imm(8, 1),
        mov64_imm(9, 2),
    ];
    let funcs: Vec<Vec<Insn>> = (0..4).map(|k| function(rng, k % 2 == 1)).collect();
    // (call slot, function index), patched once the functions' places are known.
    let mut calls = Vec::new();
    let len = rng.gen_range(MIN_SLOTS..1600);
    while p.len() < len {
        if rng.gen_bool(0.03) {
            p.push(mov64_reg(1, 8));
            calls.push((p.len(), rng.gen_range(0..funcs.len())));
            p.push(call_pc(0));
            p.push(alu64_reg(BPF_XOR, 9, 0));
        } else {
            piece(rng, &mut p);
        }
    }
    p.push(stx(BPF_DW, SCRATCH, 0, 4088));
    p.push(exit());
    let mut starts = Vec::new();
    for f in &funcs {
        starts.push(p.len());
        p.extend_from_slice(f);
    }
    for (at, f) in calls {
        p[at] = call_pc(i32::try_from(starts[f] - at - 1).unwrap());
    }
    p
}

/// Data and scratch; scratch's pointer words in bounds but for (rarely) one.
fn buffers(rng: &mut SmallRng) -> (Vec<u8>, Vec<u8>) {
    let data: Vec<u8> = (0..DATA_LEN).map(|_| rng.gen()).collect();
    let mut scratch: Vec<u8> = (0..SCRATCH_LEN).map(|_| rng.gen()).collect();
    let bad = rng.gen_bool(0.3).then(|| rng.gen_range(0..POINTERS as usize));
    for w in 0..POINTERS as usize {
        let v: u64 = match bad {
            Some(b) if b == w => DATA_LEN as u64 + rng.gen_range(0..64),
            _ => rng.gen_range(8..DATA_LEN as u64 - 16),
        };
        scratch[8 * w..8 * w + 8].copy_from_slice(&v.to_le_bytes());
    }
    (data, scratch)
}

/// (result without the fault's place, scratch after, instructions charged).
fn run(inst: &mut Instance, data: &[u8], scratch: &[u8]) -> (Result<u64, VmError>, Vec<u8>, u64) {
    let mut scratch = scratch.to_vec();
    let r = inst.run_xrp(&mut XrpCtx::default(), data, &mut scratch);
    (without_place(r), scratch, inst.insns_used())
}

#[test]
fn quick_tier_programs_run_as_on_the_interpreter() {
    let (mut oks, mut faults, mut budget_stops, mut called) = (0, 0, 0, 0);
    for seed in 0..120u64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let insns = gen(&mut rng);
        assert!(insns.len() > MIN_SLOTS);
        let prog = Arc::new(VerifiedProgram::new(program(insns, ProgType::Xrp)).unwrap());
        if JitProgram::compile(&prog).unwrap().compiled_functions() > 1 {
            called += 1;
        }
        let mut jit = Instance::new(Arc::clone(&prog), Engine::Jit).unwrap();
        let mut interp = Instance::new(prog, Engine::Interp).unwrap();
        for round in 0..4 {
            let (data, scratch) = buffers(&mut rng);
            // Half the rounds with a budget that may run out part way.
            let budget = if round % 2 == 0 { 1 << 20 } else { rng.gen_range(200..4000) };
            jit.set_insn_budget(budget);
            interp.set_insn_budget(budget);
            let want = run(&mut interp, &data, &scratch);
            let got = run(&mut jit, &data, &scratch);
            let at = format!("seed {seed} round {round} budget {budget}");
            assert_eq!(got.0, want.0, "result, {at}");
            assert!(got.1 == want.1, "scratch differs, {at}");
            assert_eq!(got.2, want.2, "instructions charged, {at}");
            match want.0 {
                Ok(_) => oks += 1,
                Err(VmError::BudgetExhausted { .. }) => budget_stops += 1,
                Err(_) => faults += 1,
            }
        }
    }
    assert!(
        oks > 80 && faults > 30 && budget_stops > 80 && called > 60,
        "{oks} clean runs, {faults} faults, {budget_stops} budget stops, {called} programs \
         with a function compiled on its own"
    );
}
