//! Stack slots kept in SSA variables (`jit/slots.rs`): JIT against the interpreter on random
//! programs that spill to and reload from a few `r10 + off` slots, with loops, calls (inlined
//! and real, each with its own frame), slots used at two sizes or overlapping (kept in
//! memory), sign-extending loads and atomics on a slot, reads of slots this call never wrote
//! (the stack holds a pattern: they read what memory holds), and stores that reach a slot
//! through a frame pointer the program read from data (a checked store into the frame, which
//! the promoted slot must see). Same r0, error, data, stack and budget left.

mod jit_support;

use jit_support::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use storefn_vm::insn::*;
use storefn_vm::{JitProgram, Program, RunEnv, VerifiedProgram, VmError};

/// Data base register (from the context's `data` field).
const DATA_REG: u8 = 9;
/// Byte offset in data of a word holding the entry frame's r10 (the stack's top), so a
/// program can write its frame without r10 escaping.
const FP_WORD: i16 = 4096;
/// Registers the generated code writes: r0..r5 (r6 = loop counter, r8 = frame pointer from
/// data, r9 = data).
const REGS: u8 = 6;
/// Loop counter of each generated function (the JIT keeps only slots loaded in loops).
const LOOP_REG: u8 = 6;
/// Slot offsets the generated code uses (a frame of 64 bytes).
const SLOT_OFFS: &[i16] = &[-8, -16, -24, -32, -40, -48, -56, -64];

/// What one engine did: r0 or the fault, then data, stack and the budget left.
type Outcome = (Result<u64, VmError>, Vec<u64>, Vec<u64>, u64);

/// A sandbox: data holds a pattern and, at [`FP_WORD`], the frame pointer; the stack holds a
/// pattern too (an earlier call's bytes: a slot read before this call writes it reads them).
fn sandbox() -> Sandbox {
    let mut sb = Sandbox::new();
    use storefn_vm::xrp::{XRP_OFF_DATA, XRP_OFF_SCRATCH};
    sb.ctx[XRP_OFF_DATA / 8] = sb.data_addr();
    sb.ctx[XRP_OFF_SCRATCH / 8] = sb.data_addr() + DATA_BYTES as u64 / 2;
    for (i, w) in sb.data.iter_mut().enumerate() {
        *w = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x0123_4567_89ab_cdef;
    }
    for (i, w) in sb.stack.iter_mut().enumerate() {
        *w = (i as u64).wrapping_mul(0xd6e8_feb8_6659_fd93) ^ 0x5a5a;
    }
    sb.data[FP_WORD as usize / 8] = sb.stack_top();
    sb
}

/// Runs the JIT (or, with `None`, the interpreter) once on `sb`, then restores `sb` to
/// `initial` (same addresses in both engines' runs, so stored pointers compare).
fn outcome(
    prog: &VerifiedProgram,
    budget: u64,
    jit: Option<&JitProgram>,
    sb: &mut Sandbox,
    initial: &Sandbox,
) -> Outcome {
    let mut env: RunEnv = sb.env(budget);
    let (ctx, top) = (sb.ctx_addr(), sb.stack_top());
    let result = match jit {
        Some(j) => run_jit(j, &mut env, ctx, top),
        // SAFETY: the env grants only the sandbox's own buffers, alive for the call; no host.
        None => unsafe { storefn_vm::interpret(prog, &mut env, ctx, top) },
    };
    let out = (result, sb.data.clone(), sb.stack.clone(), env.insns_left);
    sb.data.copy_from_slice(&initial.data);
    sb.stack.copy_from_slice(&initial.stack);
    out
}

/// JIT and interpreter agree under budgets that stop the run anywhere; whether it stopped on
/// a budget past its entry's charge.
fn assert_same(prog: &VerifiedProgram, jit: &JitProgram, what: &str) -> bool {
    let mut sb = sandbox();
    let initial = sb.clone();
    let mut stopped = false;
    for budget in [3, 17, 300, 100_000] {
        let j = outcome(prog, budget, Some(jit), &mut sb, &initial);
        let i = outcome(prog, budget, None, &mut sb, &initial);
        assert_eq!(j.0, i.0, "{what} budget {budget}: result; {:?}", prog.insns);
        assert_eq!(j.3, i.3, "{what} budget {budget}: budget left; {:?}", prog.insns);
        assert!(j.1 == i.1, "{what} budget {budget}: data differs; {:?}", prog.insns);
        assert!(j.2 == i.2, "{what} budget {budget}: stack differs; {:?}", prog.insns);
        stopped |= budget > 3 && matches!(j.0, Err(VmError::BudgetExhausted { .. }));
    }
    stopped
}

fn check(insns: Vec<Insn>, what: &str) -> (usize, Result<u64, VmError>) {
    let prog = verified(insns);
    let jit = JitProgram::compile(&prog).expect("a verified program compiles");
    assert_same(&prog, &jit, what);
    let mut sb = sandbox();
    let initial = sb.clone();
    (jit.promoted_accesses(), outcome(&prog, 100_000, Some(&jit), &mut sb, &initial).0)
}

const SIZES: &[u8] = &[BPF_B, BPF_H, BPF_W, BPF_DW];

/// One random instruction of a body over `slots` (offset, size); jumps are placed later.
fn gen_insn(rng: &mut SmallRng, slots: &[(i16, u8)], calls: bool) -> Vec<Insn> {
    let r = rng.gen_range(0..REGS);
    let (off, size) = slots[rng.gen_range(0..slots.len())];
    match rng.gen_range(0..40) {
        0..=9 => vec![stx(size, 10, r, off)],
        10..=11 => vec![st(size, 10, off, rng.gen_range(-300..300))],
        12..=21 => vec![ldx(size, r, 10, off)],
        22..=27 => {
            let op = [BPF_ADD, BPF_SUB, BPF_MUL, BPF_XOR, BPF_LSH, BPF_RSH][rng.gen_range(0..6)];
            if rng.gen_bool(0.5) {
                vec![alu64_reg(op, r, rng.gen_range(0..REGS))]
            } else {
                vec![alu32_imm(op, r, rng.gen_range(1..40))]
            }
        }
        // A store into the frame through a pointer read from data: checked, and it lands
        // on a slot (or next to it) behind the variable's back.
        28..=29 => vec![
            ldx(BPF_DW, 8, DATA_REG, FP_WORD),
            stx(size, 8, r, off + rng.gen_range(-1..=1) * i16::from(rng.gen_bool(0.3))),
        ],
        // The slot at another size or one byte off: it stays in memory.
        30 => {
            let other = SIZES[rng.gen_range(0..SIZES.len())];
            let o = (off + rng.gen_range(0..2)).min(-size_bytes(other));
            vec![ldx(other, r, 10, o)]
        }
        31 => vec![ldsx(if size == BPF_DW { BPF_W } else { size }, r, 10, off)],
        32 => vec![atomic(BPF_DW, 10, r, off & !7, BPF_ADD.into())],
        33..=34 if calls => vec![mov64_reg(1, DATA_REG), call_local(0)],
        // r10 copied: nothing of the program is promoted.
        35 if rng.gen_range(0..4) == 0 => vec![mov64_reg(r, 10), alu64_imm(BPF_ADD, r, 1)],
        _ => vec![alu64_imm(BPF_ADD, r, rng.gen_range(-5..5))],
    }
}

/// A function body: r9 = r1 (the data base), registers set, a loop of 1-5 trips around random
/// instructions with forward and backward conditional jumps (the budget bounds those loops),
/// `exit`; its calls (when `calls`) are patched by [`gen_program`].
fn gen_function(rng: &mut SmallRng, slots: &[(i16, u8)], calls: bool) -> Vec<Insn> {
    let mut v = vec![mov64_reg(DATA_REG, 1)];
    for r in 0..REGS {
        v.push(mov64(r, rng.gen_range(-1000..1000)));
    }
    let len = rng.gen_range(4..40);
    v.push(mov64(LOOP_REG, rng.gen_range(1..6)));
    let body_start = v.len();
    for _ in 0..len {
        if rng.gen_range(0..8) == 0 {
            // A jump, patched below: forward, or backward (a loop the budget bounds).
            v.push(jmp_imm(BPF_JGT, rng.gen_range(0..REGS), rng.gen_range(-50..50), 0));
        } else {
            let is = gen_insn(rng, slots, calls);
            let after_call = is.iter().any(|i| i.op == BPF_JMP | BPF_CALL);
            v.extend(is);
            if after_call {
                // r1-r5 are unset after a call.
                for r in 1..=5 {
                    v.push(mov64(r, rng.gen_range(0..100)));
                }
            }
        }
    }
    v.push(alu64_imm(BPF_SUB, LOOP_REG, 1));
    let at = v.len();
    v.push(jmp_imm(
        BPF_JNE,
        LOOP_REG,
        0,
        i16::try_from(body_start as i64 - at as i64 - 1).unwrap(),
    ));
    let end = v.len();
    for (pc, i) in v.iter_mut().enumerate().take(end - 2).skip(body_start) {
        if i.op == BPF_JMP | BPF_JGT | BPF_K {
            let to = rng.gen_range(body_start..=end) as i64;
            i.off = i16::try_from(to - pc as i64 - 1).unwrap();
        }
    }
    v.push(exit());
    v
}

/// A program: the entry (r1 = ctx; r9 = ctx->data) and, sometimes, a callee (short: inlined;
/// long: a real call) with slots of its own.
fn gen_program(seed: u64) -> Program {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x0005_1075);
    let slots = |rng: &mut SmallRng| -> Vec<(i16, u8)> {
        (0..rng.gen_range(1..=6))
            .map(|_| {
                let size = SIZES[rng.gen_range(0..SIZES.len())];
                let off = SLOT_OFFS[rng.gen_range(0..SLOT_OFFS.len())];
                (off, size)
            })
            .collect()
    };
    let calls = rng.gen_bool(0.4);
    let main_slots = slots(&mut rng);
    let mut main = vec![ldx(BPF_DW, 1, 1, 0)];
    main.extend(gen_function(&mut rng, &main_slots, calls));
    let start = main.len();
    if calls {
        let callee_slots = slots(&mut rng);
        main.extend(gen_function(&mut rng, &callee_slots, false));
        if rng.gen_bool(0.3) {
            // Past the JIT's inlining size: a real call.
            let at = main.len() - 1;
            main.splice(at..at, (0..70).map(|k| alu64_imm(BPF_ADD, 0, k)));
        }
        for (pc, i) in main.iter_mut().enumerate().take(start) {
            if i.op == BPF_JMP | BPF_CALL {
                i.imm = i32::try_from(start as i64 - pc as i64 - 1).unwrap();
            }
        }
    }
    program(main)
}

/// A store into a promoted slot through a frame pointer read from data (a checked store the
/// JIT cannot see aiming at the slot) is what a later load of the slot returns.
#[test]
fn a_store_through_a_frame_pointer_from_data_reaches_a_promoted_slot() {
    let (promoted, r) = check(
        vec![
            ldx(BPF_DW, DATA_REG, 1, 0),
            mov64(7, 2),
            mov64(2, 1),
            stx(BPF_DW, 10, 2, -8),
            // Twice: r0 = slot; *(fp - 8) = 2 through the pointer from data; r4 = slot.
            ldx(BPF_DW, 0, 10, -8),
            ldx(BPF_DW, 8, DATA_REG, FP_WORD),
            mov64(3, 2),
            stx(BPF_DW, 8, 3, -8),
            ldx(BPF_DW, 4, 10, -8),
            alu64_imm(BPF_SUB, 7, 1),
            jmp_imm(BPF_JNE, 7, 0, -7),
            alu64_imm(BPF_LSH, 0, 8),
            alu64_reg(BPF_OR, 0, 4),
            exit(),
        ],
        "frame store",
    );
    assert_eq!(promoted, 3);
    assert_eq!(r, Ok(0x202));
}

/// A slot this call never wrote reads what the stack holds (an earlier call's bytes), in a
/// slot kept in a variable as on the interpreter; a slot read at two sizes, or overlapping
/// another, stays in memory; a slot loaded only outside loops stays in memory too.
#[test]
fn unwritten_overlapping_and_loop_free_slots() {
    let looped = |body: &[Insn]| {
        let mut v = vec![mov64(7, 3)];
        v.extend_from_slice(body);
        let back = -(body.len() as i16) - 2;
        v.extend([alu64_imm(BPF_SUB, 7, 1), jmp_imm(BPF_JNE, 7, 0, back), exit()]);
        v
    };
    let (promoted, r) = check(looped(&[ldx(BPF_W, 0, 10, -12)]), "unwritten slot");
    assert_eq!(promoted, 1);
    assert!(matches!(r, Ok(v) if v != 0 && v <= u64::from(u32::MAX)), "{r:?}");
    let [lo, hi] = lddw(2, 0x1122_3344_5566_7788);
    let overlaps = [
        lo,
        hi,
        stx(BPF_DW, 10, 2, -16),
        ldx(BPF_W, 0, 10, -16),
        ldx(BPF_W, 3, 10, -12),
        alu64_reg(BPF_ADD, 0, 3),
        stx(BPF_B, 10, 2, -24),
        ldx(BPF_H, 3, 10, -24),
        alu64_reg(BPF_ADD, 0, 3),
    ];
    assert_eq!(check(looped(&overlaps), "overlaps").0, 0);
    let once = vec![mov64(2, 9), stx(BPF_DW, 10, 2, -8), ldx(BPF_DW, 0, 10, -8), exit()];
    assert_eq!(check(once, "no loop"), (0, Ok(9)));
}

/// Random programs over a few slots: the JIT (slots in variables) equals the interpreter
/// (slots in memory) on result, error, data, stack and budget left.
#[test]
fn random_slot_programs_jit_equals_interp() {
    let (mut compared, mut promoted_progs, mut stops) = (0, 0, 0);
    for seed in 0..1500 {
        let Ok(prog) = VerifiedProgram::new(gen_program(seed)) else { continue };
        let jit = JitProgram::compile(&prog).expect("a verified program compiles");
        promoted_progs += usize::from(jit.promoted_accesses() > 0);
        stops += usize::from(assert_same(&prog, &jit, &format!("seed {seed}")));
        compared += 1;
    }
    eprintln!("compared {compared}, with promoted slots {promoted_progs}, budget stops {stops}");
    assert!(compared > 1200, "only {compared} programs verified");
    assert!(promoted_progs > 600, "only {promoted_progs} programs promoted a slot");
    assert!(stops > 300, "only {stops} programs stopped on the budget");
}

/// A callee, inlined (short) or called (long), that writes its caller's promoted slot through
/// the frame pointer from data: the caller's next load of the slot sees the callee's store.
#[test]
fn a_callee_storing_into_its_callers_slot_is_seen_after_the_call() {
    for pad in [0, 70] {
        let mut insns = vec![
            ldx(BPF_DW, DATA_REG, 1, 0),
            mov64(2, 5),
            stx(BPF_DW, 10, 2, -16),
            ldx(BPF_DW, 6, 10, -16),
            mov64(7, 2),
            mov64_reg(1, DATA_REG),
            call_local(5),
            ldx(BPF_DW, 0, 10, -16),
            alu64_imm(BPF_SUB, 7, 1),
            jmp_imm(BPF_JNE, 7, 0, -5),
            alu64_reg(BPF_ADD, 0, 6),
            exit(),
            // The callee: r8 = the entry's frame pointer; *(r8 - 16) = 7.
            ldx(BPF_DW, 8, 1, FP_WORD),
            mov64(3, 7),
            stx(BPF_DW, 8, 3, -16),
        ];
        insns.extend((0..pad).map(|k| alu64_imm(BPF_ADD, 3, k)));
        insns.extend([mov64(0, 0), exit()]);
        let (promoted, r) = check(insns, &format!("callee padded by {pad}"));
        assert_eq!(promoted, 3, "pad {pad}");
        assert_eq!(r, Ok(12), "pad {pad}");
    }
}
