use crate::insn::{
    Insn, BPF_ADD, BPF_ALU, BPF_ALU64, BPF_DW, BPF_EXIT, BPF_JA, BPF_JEQ, BPF_JGT, BPF_JLT,
    BPF_JMP, BPF_JNE, BPF_K, BPF_LDX, BPF_MEM, BPF_MOV, BPF_STX, BPF_XOR,
};
use crate::jit::JitProgram;
use crate::loops::random::around_the_entry_charge;
use crate::loops::CountedLoop;
use crate::program::ProgType;
use crate::testutil::{ins, xrp_program};
use crate::VerifiedProgram;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const MOV: u8 = BPF_ALU64 | BPF_MOV | BPF_K;
const ADD: u8 = BPF_ALU64 | BPF_ADD | BPF_K;
const XOR: u8 = BPF_ALU64 | BPF_XOR | BPF_K;
const JA: u8 = BPF_JMP | BPF_JA;
const EXIT: u8 = BPF_JMP | BPF_EXIT;

fn verified(insns: Vec<Insn>) -> VerifiedProgram {
    VerifiedProgram::new(xrp_program(insns)).expect("verifies")
}

/// Both engines under budgets around the entry charge: same result, same budget left.
fn agree(p: &VerifiedProgram) {
    around_the_entry_charge(p, &JitProgram::compile(p).unwrap(), 0);
}

/// classify's shape: `h: r4 ^= 3; if r4 > 4 goto b; r0 += 1; step: r3 += 1; if r3 < 10 goto h;
/// exit; b: <b>; goto step` (two back edges in slot order, one to the header).
fn two_paths(b: Insn) -> Vec<Insn> {
    vec![
        ins(MOV, 0, 0, 0, 0),
        ins(MOV, 3, 0, 0, 0),
        ins(MOV, 4, 0, 0, 5),
        ins(XOR, 4, 0, 0, 3),                         // 3: header
        ins(BPF_JMP | BPF_JGT | BPF_K, 4, 0, 4, 4),   // 4: -> 9
        ins(ADD, 0, 0, 0, 1),                         // 5
        ins(ADD, 3, 0, 0, 1),                         // 6: the counter step
        ins(BPF_JMP | BPF_JLT | BPF_K, 3, 0, -5, 10), // 7: -> 3
        ins(EXIT, 0, 0, 0, 0),                        // 8
        b,                                            // 9
        ins(JA, 0, 0, -5, 0),                         // 10: -> 6
    ]
}

#[test]
fn a_loop_whose_paths_jump_back_to_a_shared_counter_step_is_charged_once() {
    let p = verified(two_paths(ins(ADD, 0, 0, 0, 2)));
    assert!(p.cfg().counted_loops().is_empty());
    assert_eq!(
        p.cfg().block_loops(),
        &[CountedLoop { header: 3, latch: 10, trips: 10, exact: true }]
    );
    // #0..#2, 9 iterations of the longest one (#3, #4, #9, #10, #6, #7), then the longest
    // pass: that path and out through #8.
    assert_eq!(p.cfg().charge(0), 3 + 9 * 6 + 7);
    assert!((3..=10).all(|pc| p.cfg().charge(pc) == 0));
    agree(&p);
}

#[test]
fn a_counter_stepped_on_one_path_only_or_twice_is_not_a_count() {
    // The other path steps the counter again: two writes.
    let p = verified(two_paths(ins(ADD, 3, 0, 0, 1)));
    assert!(p.cfg().block_loops().is_empty());
    assert_ne!(p.cfg().charge(6), 0, "the shared step is a charge point again");
    agree(&p);
    // The step only on one path: the other path jumps back to the header, skipping it
    // (`b: r0 += 2; goto header`), so the loop may run forever; the budget stops it.
    let mut v = two_paths(ins(ADD, 0, 0, 0, 2));
    v[10] = ins(JA, 0, 0, -8, 0); // -> 3
    let p = verified(v);
    assert!(p.cfg().block_loops().is_empty() && p.cfg().counted_loops().is_empty());
    assert_ne!(p.cfg().charge(3), 0);
    agree(&p);
}

/// `r3 = 0; goto test; body: r0 += 3; r3 += 1; r0 ^= 1; test: if r3 < 10 goto body; exit`.
fn rotated() -> Vec<Insn> {
    vec![
        ins(MOV, 0, 0, 0, 0),
        ins(MOV, 3, 0, 0, 0),
        ins(JA, 0, 0, 3, 0),                          // 2: -> 6
        ins(ADD, 0, 0, 0, 3),                         // 3
        ins(ADD, 3, 0, 0, 1),                         // 4
        ins(XOR, 0, 0, 0, 1),                         // 5
        ins(BPF_JMP | BPF_JLT | BPF_K, 3, 0, -4, 10), // 6: -> 3
        ins(EXIT, 0, 0, 0, 0),
    ]
}

#[test]
fn a_loop_entered_at_its_test_is_counted_from_there() {
    let p = verified(rotated());
    // The header is the entry, #6: r3 is 0..=10 there (10 leaves).
    let l = p.cfg().block_loops();
    assert_eq!(l, &[CountedLoop { header: 6, latch: 6, trips: 11, exact: true }]);
    // #0..#2, then 10 iterations of #6, #3, #4, #5, then #6 and the exit.
    assert_eq!(p.cfg().charge(0), 3 + 10 * 4 + 4);
    agree(&p);
}

#[test]
fn a_loop_with_two_entries_is_not_counted() {
    // #2 may fall into #3 or jump to #6: two entries.
    let mut v = rotated();
    v[2] = ins(BPF_JMP | BPF_JNE | BPF_K, 0, 0, 3, 1);
    let p = verified(v);
    assert!(p.cfg().block_loops().is_empty() && p.cfg().counted_loops().is_empty());
    assert_ne!(p.cfg().charge(3), 0);
    agree(&p);
}

#[test]
fn a_break_path_makes_a_loop_inexact_but_still_counted() {
    // `b: if r0 == 7 goto out` before going back to the step.
    let mut v = two_paths(ins(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 2, 7));
    v.push(ins(JA, 0, 0, -6, 0)); // 11: -> 6
    v.push(ins(EXIT, 0, 0, 0, 0)); // 12: out
    v[10] = ins(ADD, 0, 0, 0, 2);
    let p = verified(v);
    let l = p.cfg().block_loops();
    assert_eq!(l.len(), 1, "{l:?}");
    assert!(!l[0].exact && l[0].trips == 10 && l[0].header == 3);
    agree(&p);
}

#[test]
fn a_loop_holding_another_loop_is_not_counted_as_blocks() {
    // The shared step is preceded by an inner loop `in: r5 += 1; if r5 < 3 goto in` on one
    // path: the body has a cycle that avoids the header.
    let mut v = two_paths(ins(ADD, 5, 0, 0, 1));
    v.insert(2, ins(MOV, 5, 0, 0, 0));
    // Shift: header #4, step #7, test #8, exit #9, b #10, goto step #11.
    v[11] = ins(BPF_JMP | BPF_JLT | BPF_K, 5, 0, -2, 3); // -> 10 (self-loop region)
    v.push(ins(JA, 0, 0, -6, 0)); // 12: -> 7
    let p = verified(v);
    assert!(p.cfg().block_loops().is_empty(), "{:?}", p.cfg().block_loops());
    agree(&p);
}

#[test]
fn classify_and_stats64_are_charged_once_before_their_loop() {
    let load = |name| {
        crate::load_verified(storefn_progs::must(name), None, ProgType::Xrp).expect("verifies")
    };
    // classify: header #7, the counter step #15 shared by the four classes' back jumps.
    let p = load("bench/classify");
    let l = p.cfg().block_loops();
    assert!(l.len() == 1 && l[0].header == 7 && l[0].trips == 1024 && l[0].exact, "{l:?}");
    assert!((7..=38).all(|pc| p.cfg().charge(pc) == 0));
    // stats64: entered at #12 past its step (`goto +6` from #5).
    let p = load("bench/stats64");
    let l = p.cfg().block_loops();
    assert!(l.len() == 1 && l[0].header == 12 && l[0].trips >= 512 && l[0].exact, "{l:?}");
    assert!((6..=21).all(|pc| p.cfg().charge(pc) == 0));
}

/// A random loop of classify's shapes: constants, (an outer loop's counter), `r = a`, (now and then entering at the
/// counter step or the test), a header block, a chain of tests jumping to case blocks placed
/// after the exit, the fall-through path, `r += c`, the latch test, the tail and `exit`, then
/// the cases, each going back to the step (or, now and then, to the header, skipping it; or
/// out of the loop), sometimes writing the counter; with an outer loop, the tail steps its
/// counter and jumps back to `r = a` three times.
fn gen(seed: u64) -> Vec<Insn> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut v: Vec<Insn> = (0..10).map(|r| ins(MOV, r, 0, 0, rng.gen_range(0..40))).collect();
    let r = rng.gen_range(0..10u8);
    let a = rng.gen_range(0..20);
    // Now and then an outer loop around it, counting in another register (which the body
    // may clobber: then the budget stops it).
    let outer = rng.gen_bool(0.25).then(|| (r + 1 + rng.gen_range(0..9)) % 10);
    if let Some(o) = outer {
        v.push(ins(MOV, o, 0, 0, 0));
    }
    let again = v.len();
    v.push(ins(MOV, r, 0, 0, a));
    let op = |rng: &mut SmallRng, v: &mut Vec<Insn>| {
        let q = if rng.gen_bool(0.05) { r } else { rng.gen_range(0..10u8) };
        v.push(match rng.gen_range(0..4) {
            0 | 1 => ins(XOR, q, 0, 0, rng.gen_range(0..8)),
            2 => ins(BPF_STX | BPF_MEM | BPF_DW, 10, q, -8 * rng.gen_range(1..4), 0),
            _ => ins(BPF_LDX | BPF_MEM | BPF_DW, q, 10, -8 * rng.gen_range(1..4), 0),
        });
    };
    // Jumps to fix once the layout is known: (slot, target label).
    let mut fix: Vec<(usize, usize)> = Vec::new();
    // Labels: the step, the test (entry only), the header, the tail.
    const STEP: usize = 0;
    const HEADER: usize = 2;
    const TAIL: usize = 3;
    let entry = rng.gen_range(0..6);
    if entry < 2 {
        fix.push((v.len(), entry)); // rotated: enter at the step or the test
        v.push(ins(JA, 0, 0, 0, 0));
    }
    let header = v.len();
    for _ in 0..rng.gen_range(1..3) {
        op(&mut rng, &mut v);
    }
    let cases = rng.gen_range(1..4usize);
    let mut dispatch = Vec::new();
    for _ in 0..cases {
        dispatch.push(v.len());
        let q = rng.gen_range(0..10u8);
        v.push(ins(BPF_JMP | BPF_JGT | BPF_K, q, 0, 0, rng.gen_range(0..40)));
    }
    for _ in 0..rng.gen_range(0..3) {
        op(&mut rng, &mut v);
    }
    let step_at = v.len();
    let step = rng.gen_range(1..4);
    let class = if rng.gen_bool(0.3) { BPF_ALU } else { BPF_ALU64 };
    v.push(ins(class | BPF_ADD | BPF_K, r, 0, 0, step));
    let test_at = v.len();
    v.push(ins(BPF_JMP | BPF_JLT | BPF_K, r, 0, 0, rng.gen_range(0..200)));
    fix.push((test_at, HEADER));
    let tail = v.len();
    if let Some(o) = outer {
        v.push(ins(ADD, o, 0, 0, 1));
        let back = again as i64 - v.len() as i64 - 1;
        v.push(ins(BPF_JMP | BPF_JLT | BPF_K, o, 0, back as i16, 3));
    }
    v.push(ins(ADD, 0, 0, 0, 1));
    v.push(ins(EXIT, 0, 0, 0, 0));
    for d in dispatch {
        let case = v.len();
        v[d].off = (case - d - 1) as i16;
        for _ in 0..rng.gen_range(1..3) {
            op(&mut rng, &mut v);
        }
        let to = match rng.gen_range(0..10) {
            0 => HEADER,
            1 => TAIL,
            _ => STEP,
        };
        fix.push((v.len(), to));
        v.push(ins(JA, 0, 0, 0, 0));
    }
    for (at, label) in fix {
        let to = [step_at, test_at, header, tail][label];
        v[at].off = (to as i64 - at as i64 - 1) as i16;
    }
    v
}

#[test]
fn random_loops_of_blocks_stop_at_the_same_instruction_on_both_engines() {
    let (mut counted, mut rotated, mut finished, mut stopped) = (0, 0, 0, 0);
    for seed in 0..1500u64 {
        let Ok(prog) = VerifiedProgram::new(xrp_program(gen(seed))) else { continue };
        let jit = JitProgram::compile(&prog).unwrap();
        let blocks = prog.cfg().block_loops();
        counted += usize::from(!blocks.is_empty());
        let first = if prog.insns[11].op == MOV { 12 } else { 11 };
        rotated += usize::from(!blocks.is_empty() && prog.insns[first].op == JA);
        let (f, s) = around_the_entry_charge(&prog, &jit, seed);
        (finished, stopped) = (finished + f, stopped + s);
    }
    assert!(
        counted > 300 && rotated > 50 && finished > 1000 && stopped > 1000,
        "counted {counted} ({rotated} entered mid-body), finished {finished}, stopped {stopped}"
    );
}
