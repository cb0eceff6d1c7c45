use super::*;
use crate::insn::{
    BPF_ALU64, BPF_AND, BPF_B, BPF_DW, BPF_EXIT, BPF_JA, BPF_JEQ, BPF_JLT, BPF_JMP, BPF_JNE, BPF_K,
    BPF_LDX, BPF_MEM, BPF_MOV, BPF_STX, BPF_SUB, BPF_X, BPF_XOR,
};
use crate::testutil::{ins, xrp_program};
use crate::{ProgType, VerifiedProgram, VmError};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn jit(p: &VerifiedProgram) -> JitProgram {
    JitProgram::compile(p).unwrap()
}

#[test]
fn greps_scan_is_bounded_and_runs_behind_the_guard() {
    let p = crate::load_verified(storefn_progs::must("bench/grep"), None, ProgType::Xrp).unwrap();
    let cfg = p.cfg();
    // `for (i = 0; i < at; i++)` with at < 4000: i in [0, 3999] at the header (#14) as the
    // analysis bounds it, the latch `if r3 < r4 goto -14` (#27); four ways out, so not
    // exact, and 3,999 x 14 slots is past what is charged before a loop.
    let l = CountedLoop { header: 14, latch: 27, trips: 4000, exact: false };
    assert_eq!(cfg.bounded_loops(), &[l]);
    assert!(cfg.counted_loops().is_empty());
    assert_eq!(cfg.charge(14), 22);
    // The header's block (#14..#17) jumps to the latch's block (#26) on a mismatch: #18..#25
    // (the rest of the compare) go out of line; the loop leaves to #28.
    assert_eq!(unlikely_slots(&p.insns, cfg, l), 18..26);
    assert_eq!(exit_targets(&p.insns, cfg, l), [28]);
    // `if r3 < r4 goto header`, r3 stepped by 1 and r4 not written: the ring's copies but
    // the last drop the test.
    let skip = LatchSkip { counter: 3, step: 1, bound: Ok(4) };
    assert_eq!(latch_skip(&p.insns, cfg, l), Some(skip));
    assert_eq!(jit(&p).guarded_loops(), 1);
}

/// `r0 = 0; r3 = 0; loop: r0 ^= 5; [extra]; r3 += 1; if r3 < end goto loop; exit`.
fn simple(end: i32, extra: Option<Insn>) -> VerifiedProgram {
    let mut v = vec![ins(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 0)];
    v.push(ins(BPF_ALU64 | BPF_MOV | BPF_K, 3, 0, 0, 0));
    v.push(ins(BPF_ALU64 | BPF_XOR | BPF_K, 0, 0, 0, 5));
    v.extend(extra);
    v.push(ins(BPF_ALU64 | BPF_ADD | BPF_K, 3, 0, 0, 1));
    let back = 1 - i16::try_from(v.len()).unwrap();
    v.push(ins(BPF_JMP | BPF_JLT | BPF_K, 3, 0, back, end));
    v.push(ins(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
    VerifiedProgram::new(xrp_program(v)).unwrap()
}

#[test]
fn only_bounded_loops_charged_per_iteration_get_the_guard() {
    // Charged whole before the loop: nothing to guard.
    let p = simple(100, None);
    assert_eq!((p.cfg().counted_loops().len(), p.cfg().bounded_loops().len()), (1, 0));
    assert_eq!(jit(&p).guarded_loops(), 0);
    // An exact loop too long to charge whole (3 x 30,000 slots): guarded.
    let p = simple(30_000, None);
    assert_eq!(p.cfg().bounded_loops().len(), 1);
    assert_eq!(jit(&p).guarded_loops(), 1);
    // An early exit (`if r0 == 3 goto +2`, onto the exit) and 2,000 trips of 4: guarded.
    let p = simple(2000, Some(ins(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 2, 3)));
    assert_eq!(p.cfg().bounded_loops()[0].trips, 2000);
    assert_eq!(jit(&p).guarded_loops(), 1);
    // No bound on the counter (compared with a register): charged per iteration, unguarded.
    let p = simple(0, Some(ins(BPF_ALU64 | BPF_MOV | BPF_K, 4, 0, 0, 7)));
    let mut v = p.insns.clone();
    let latch = v.len() - 2;
    v[latch] = ins(BPF_JMP | BPF_JNE | BPF_X, 3, 4, v[latch].off, 0);
    v[1] = ins(BPF_ALU64 | BPF_MOV | BPF_K, 3, 0, 0, 8);
    let p = VerifiedProgram::new(xrp_program(v)).unwrap();
    assert!(p.cfg().bounded_loops().is_empty() && p.cfg().counted_loops().is_empty());
    assert_eq!(jit(&p).guarded_loops(), 0);
}

/// A random bounded loop with early exits: constants in r0-r9, `r = a`, a body mixing
/// arithmetic (on the counter too, now and then), stack traffic, a byte load `r10 - r - 1`
/// that leaves the stack once the counter passes its size (a checked load that faults), and
/// forward jumps (inside the body, onto the latch, out of the loop), then the latch block
/// `r += c; if r < K goto header` (`K` sometimes in a register) or clang's `r += c; if r == K goto out; goto header` with
/// hundreds to thousands of trips, then a tail.
fn gen(seed: u64) -> Vec<Insn> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut v: Vec<Insn> =
        (0..10).map(|r| ins(BPF_ALU64 | BPF_MOV | BPF_K, r, 0, 0, rng.gen_range(0..40))).collect();
    let r = rng.gen_range(0..10u8);
    let a = rng.gen_range(0..20);
    let other = |rng: &mut SmallRng| (r + rng.gen_range(1..10u8)) % 10;
    let k = rng.gen_range(600..3000);
    // Now and then `r < b` with `b = k` set here (the body may write it).
    let in_reg = rng.gen_bool(0.3).then(|| other(&mut rng));
    v.push(ins(BPF_ALU64 | BPF_MOV | BPF_K, in_reg.unwrap_or(r), 0, 0, k));
    v.push(ins(BPF_ALU64 | BPF_MOV | BPF_K, r, 0, 0, a));
    let header = v.len();
    // Items of the body: 0-4 and 6 (a jump out) one slot each, 5 the three-slot probe.
    let mut items: Vec<u8> = (0..rng.gen_range(2..9)).map(|_| rng.gen_range(0..7)).collect();
    // At least one way out of the body besides the counter's test.
    items.insert(rng.gen_range(0..=items.len()), 6);
    let body: usize = items.iter().map(|&k| [1, 1, 1, 1, 1, 3, 6][usize::from(k)]).sum();
    let clang = rng.gen_bool(0.3);
    let latch = header + body + 1 + usize::from(clang);
    let exit = latch + 3;
    for k in items {
        let pc = v.len();
        let q = if rng.gen_bool(0.1) { r } else { other(&mut rng) };
        match k {
            0 | 1 => v.push(ins(BPF_ALU64 | BPF_XOR | BPF_K, q, 0, 0, rng.gen_range(0..8))),
            2 => v.push(ins(BPF_STX | BPF_MEM | BPF_DW, 10, q, -8 * rng.gen_range(1..4), 0)),
            3 => v.push(ins(BPF_LDX | BPF_MEM | BPF_DW, q, 10, -8 * rng.gen_range(1..4), 0)),
            4 => {
                let to = rng.gen_range(pc + 1..=exit);
                let k = rng.gen_range(0..8);
                v.push(ins(BPF_JMP | BPF_JNE | BPF_K, q, 0, (to - pc - 1) as i16, k));
            }
            6 => {
                // A byte of the stack below `r10 - (r & 511)` (proved inside it) against a
                // constant: a way out the analysis cannot decide.
                let s = other(&mut rng);
                let u = (1..10u8).map(|d| (s + d) % 10).find(|&u| u != r).expect("10 registers");
                v.push(ins(BPF_ALU64 | BPF_MOV | BPF_X, u, r, 0, 0));
                v.push(ins(BPF_ALU64 | BPF_AND | BPF_K, u, 0, 0, 511));
                v.push(ins(BPF_ALU64 | BPF_MOV | BPF_X, s, 10, 0, 0));
                v.push(ins(BPF_ALU64 | BPF_SUB | BPF_X, s, u, 0, 0));
                v.push(ins(BPF_LDX | BPF_MEM | BPF_B, s, s, -1, 0));
                let to = rng.gen_range(latch + 1..=exit);
                let k = rng.gen_range(0..40);
                v.push(ins(BPF_JMP | BPF_JEQ | BPF_K, s, 0, (to - pc - 6) as i16, k));
            }
            _ => {
                let s = other(&mut rng);
                v.push(ins(BPF_ALU64 | BPF_MOV | BPF_X, s, 10, 0, 0));
                v.push(ins(BPF_ALU64 | BPF_SUB | BPF_X, s, r, 0, 0));
                v.push(ins(BPF_LDX | BPF_MEM | BPF_B, s, s, -1, 0));
            }
        }
    }
    let step = rng.gen_range(1..4);
    let class = if rng.gen_bool(0.3) { BPF_ALU } else { BPF_ALU64 };
    v.push(ins(class | BPF_ADD | BPF_K, r, 0, 0, step));
    let back = (header as i16) - (latch as i16) - 1;
    if clang {
        v.push(ins(BPF_JMP | BPF_JEQ | BPF_K, r, 0, 1, a + step * (k / step)));
        v.push(ins(BPF_JMP | BPF_JA, 0, 0, back, 0));
    } else {
        match in_reg {
            Some(b) => v.push(ins(BPF_JMP | BPF_JLT | BPF_X, r, b, back, 0)),
            None => v.push(ins(BPF_JMP | BPF_JLT | BPF_K, r, 0, back, k)),
        }
    }
    // The tail: two adds and the exit.
    let tail = (0..2).map(|_| ins(BPF_ALU64 | BPF_ADD | BPF_K, rng.gen_range(0..10), 0, 0, 1));
    v.extend(tail.chain([ins(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)]));
    assert_eq!(v.len(), exit + 1, "seed {seed}");
    v
}

/// (result, instructions charged) of one run on the interpreter, or on `jit`.
fn run(
    prog: &VerifiedProgram,
    budget: u64,
    jit: Option<&JitProgram>,
) -> (Result<u64, VmError>, u64) {
    let (r, charged, _) = crate::loops::random::run(prog, budget, jit);
    (r, charged)
}

#[test]
fn guarded_loops_stop_where_the_interpreter_does_under_budgets_around_the_guard() {
    let (mut guarded, mut finished, mut budget_stops, mut faults) = (0, 0, 0, 0);
    for seed in 0..1500u64 {
        let Ok(prog) = VerifiedProgram::new(xrp_program(gen(seed))) else { continue };
        assert_eq!(prog.xrp_min_bytes(), (0, 0));
        let jit = jit(&prog);
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x9e37);
        let entry = u64::from(prog.cfg().charge(0));
        let mut budgets = vec![rng.gen_range(1..entry + 5000), 1 << 20];
        if let Some(l) = prog.cfg().bounded_loops().first() {
            guarded += jit.guarded_loops();
            // The guard's threshold at the loop's entry: just short of it, exactly, one over,
            // and somewhere below.
            let whole = l.trips * u64::from(prog.cfg().charge(l.header));
            budgets
                .extend([whole - 1, whole, whole + 1, rng.gen_range(0..whole)].map(|w| entry + w));
        }
        for budget in budgets {
            let want = run(&prog, budget, None);
            assert_eq!(run(&prog, budget, Some(&jit)), want, "seed {seed} budget {budget}");
            match want.0 {
                Ok(_) => finished += 1,
                Err(VmError::BudgetExhausted { .. }) => budget_stops += 1,
                Err(VmError::BadRead { .. }) => faults += 1,
                Err(e) => panic!("seed {seed}: {e}"),
            }
        }
    }
    assert!(
        guarded > 300 && finished > 500 && budget_stops > 500 && faults > 200,
        "guarded {guarded}, finished {finished}, budget stops {budget_stops}, faults {faults}"
    );
}
