//! Differential tests: the JIT against the reference interpreter on generated random programs
//! (straight-line ALU, loads/stores/atomics over a sandbox, forward and backward jumps) and on
//! the compiled program corpus. Same r0, same error (a budget stop at the same instruction),
//! same memory effects, same budget left.
//!
//! The interpreter lives on the vm-core branch; the comparisons against it are compiled only
//! with `--features differential`. The generator and harness are always built and exercised
//! JIT-against-JIT (determinism; every generated program must compile).

mod jit_support;
// Loops with jumps emitted as conditional moves (and jumps that must stay branches).
mod jit_selects;

use jit_support::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use storefn_vm::insn::*;
use storefn_vm::JitProgram;
use storefn_vm::{Program, RunEnv, VerifiedProgram, VmError};

/// Budget for generated programs: small, so loops end quickly and the limit itself is tested.
const GEN_BUDGET: u64 = 300;
/// Body instructions per generated program (upper bound).
const GEN_MAX_BODY: usize = 60;

/// An engine: runs a program once on an environment (ctx address, stack top).
pub type EngineFn = dyn FnMut(&VerifiedProgram, &mut RunEnv, u64, u64) -> Result<u64, VmError>;

/// What one engine did: r0 or error, then memory and the budget left.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    pub result: Result<u64, VmError>,
    pub data: Vec<u64>,
    pub stack: Vec<u64>,
    pub globals: Vec<u64>,
    pub insns_left: u64,
}

/// Runs `engine` once on `sb`, then restores `sb`'s memory to `initial` (same addresses, so
/// pointers and fault addresses compare exactly across engines).
pub fn outcome(
    prog: &VerifiedProgram,
    budget: u64,
    sb: &mut Sandbox,
    initial: &Sandbox,
    engine: &mut EngineFn,
) -> Outcome {
    let mut env = sb.env(budget);
    let result = engine(prog, &mut env, sb.ctx_addr(), sb.stack_top());
    let left = env.insns_left;
    let out = Outcome {
        result,
        data: sb.data.clone(),
        stack: sb.stack.clone(),
        globals: sb.globals.clone(),
        insns_left: left,
    };
    sb.ctx.copy_from_slice(&initial.ctx);
    sb.data.copy_from_slice(&initial.data);
    sb.stack.copy_from_slice(&initial.stack);
    sb.globals.copy_from_slice(&initial.globals);
    out
}

/// Compact comparison: which part differs, and where.
pub fn assert_same(a: &Outcome, b: &Outcome, what: &str) {
    assert_eq!(a.result, b.result, "{what}: result");
    assert_eq!(a.insns_left, b.insns_left, "{what}: budget left");
    for (name, x, y) in [
        ("data", &a.data, &b.data),
        ("stack", &a.stack, &b.stack),
        ("globals", &a.globals, &b.globals),
    ] {
        if let Some(i) = x.iter().zip(y.iter()).position(|(p, q)| p != q) {
            panic!("{what}: {name}[{i}] differs: {:#x} vs {:#x}", x[i], y[i]);
        }
    }
}

/// Prepares one sandbox with `setup` and runs `engines` on it in turn, memory reset between.
pub fn run_engines(
    prog: &VerifiedProgram,
    budget: u64,
    setup: &dyn Fn(&mut Sandbox),
    engines: &mut [&mut EngineFn],
) -> Vec<Outcome> {
    let mut sb = Sandbox::new();
    setup(&mut sb);
    let initial = sb.clone();
    engines.iter_mut().map(|e| outcome(prog, budget, &mut sb, &initial, *e)).collect()
}

fn jit_engine(
    prog: &VerifiedProgram,
    env: &mut RunEnv,
    ctx: u64,
    top: u64,
) -> Result<u64, VmError> {
    let jit = JitProgram::compile(prog).unwrap_or_else(|e| panic!("JIT rejects {prog:?}: {e}"));
    run_jit(&jit, env, ctx, top)
}

/// (JIT outcome, interpreter outcome) on the same sandbox addresses.
pub fn both(
    prog: &VerifiedProgram,
    budget: u64,
    setup: &dyn Fn(&mut Sandbox),
) -> (Outcome, Outcome) {
    let mut interp = |p: &VerifiedProgram, env: &mut RunEnv, ctx: u64, top: u64| {
        // SAFETY: the env grants only the sandbox's own buffers, alive for the call; no host.
        unsafe { storefn_vm::interpret(p, env, ctx, top) }
    };
    let mut v = run_engines(prog, budget, setup, &mut [&mut jit_engine, &mut interp]);
    let i = v.pop().unwrap();
    (v.pop().unwrap(), i)
}

/// Sandbox for generated programs: the context's `data` field holds the data address and its
/// `scratch` field the second half of it (as the JIT's run contract requires); data holds a
/// pattern.
fn gen_setup(sb: &mut Sandbox) {
    use storefn_vm::xrp::{XRP_OFF_DATA, XRP_OFF_SCRATCH};
    sb.ctx[XRP_OFF_DATA / 8] = sb.data_addr();
    sb.ctx[XRP_OFF_SCRATCH / 8] = sb.data_addr() + DATA_BYTES as u64 / 2;
    for (i, w) in sb.data.iter_mut().enumerate() {
        *w = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5555;
    }
}

const ALU_OPS: &[u8] = &[
    BPF_ADD, BPF_SUB, BPF_MUL, BPF_DIV, BPF_OR, BPF_AND, BPF_LSH, BPF_RSH, BPF_NEG, BPF_MOD,
    BPF_XOR, BPF_MOV, BPF_ARSH,
];
const JMP_OPS: &[u8] = &[
    BPF_JEQ, BPF_JGT, BPF_JGE, BPF_JSET, BPF_JNE, BPF_JSGT, BPF_JSGE, BPF_JLT, BPF_JLE, BPF_JSLT,
    BPF_JSLE,
];
const SIZES: &[u8] = &[BPF_B, BPF_H, BPF_W, BPF_DW];
/// Registers a generated body may write: r0..r8 (r9 = data base, r10 = frame).
const GEN_REGS: u8 = 9;
/// Data base register in generated programs.
const DATA_REG: u8 = 9;

/// One body instruction, jumps kept symbolic until the layout is known.
enum Slot {
    Plain(Insn),
    /// Conditional jump to body index `to` (may be backward).
    Jump {
        insn: Insn,
        to: usize,
    },
}

fn rand_imm(rng: &mut SmallRng) -> i32 {
    match rng.gen_range(0..6) {
        0 => 0,
        1 => -1,
        2 => rng.gen_range(-4..64),
        3 => i32::MIN,
        4 => i32::MAX,
        _ => rng.gen(),
    }
}

fn gen_alu(rng: &mut SmallRng) -> Insn {
    let class = if rng.gen_bool(0.5) { BPF_ALU64 } else { BPF_ALU };
    let dst = rng.gen_range(0..GEN_REGS);
    if rng.gen_range(0..12) == 0 {
        // Byte swaps: le/be on ALU, bswap on ALU64.
        let width = [16, 32, 64][rng.gen_range(0..3)];
        let src_bit = if class == BPF_ALU && rng.gen_bool(0.5) { BPF_X } else { 0 };
        return ins(class | BPF_END | src_bit, dst, 0, 0, width);
    }
    let op = ALU_OPS[rng.gen_range(0..ALU_OPS.len())];
    let use_x = op != BPF_NEG && rng.gen_bool(0.6);
    let mut off = 0;
    if (op == BPF_DIV || op == BPF_MOD) && rng.gen_bool(0.5) {
        off = 1;
    }
    if op == BPF_MOV && use_x && rng.gen_bool(0.3) {
        off = if class == BPF_ALU64 {
            [8, 16, 32][rng.gen_range(0..3)]
        } else {
            [8, 16][rng.gen_range(0..2)]
        };
    }
    let src_bit = if use_x { BPF_X } else { BPF_K };
    let src = if use_x { rng.gen_range(0..GEN_REGS) } else { 0 };
    let imm = if use_x { 0 } else { rand_imm(rng) };
    ins(class | op | src_bit, dst, src, off, imm)
}

/// Offsets mostly inside the data region, sometimes just outside (to compare faults).
fn data_off(rng: &mut SmallRng, size: i16) -> i16 {
    let max = DATA_BYTES as i16;
    if rng.gen_range(0..20) == 0 {
        rng.gen_range(-16..max + 16)
    } else {
        rng.gen_range(0..=max - size)
    }
}

fn gen_mem(rng: &mut SmallRng) -> Insn {
    let size = SIZES[rng.gen_range(0..SIZES.len())];
    let n = size_bytes(size);
    let on_stack = rng.gen_range(0..4) == 0;
    let (base, off) = if on_stack {
        (10, -rng.gen_range(n..=512))
    } else if rng.gen_range(0..30) == 0 {
        (rng.gen_range(0..GEN_REGS), rng.gen_range(-64..64)) // a computed pointer: likely a fault
    } else {
        (DATA_REG, data_off(rng, n))
    };
    let r = rng.gen_range(0..GEN_REGS);
    match rng.gen_range(0..7) {
        0 | 1 => ldx(size, r, base, off),
        2 if size != BPF_DW => ldsx(size, r, base, off),
        2 | 3 => stx(size, base, r, off),
        4 => st(size, base, off, rand_imm(rng)),
        _ => {
            let size = if rng.gen_bool(0.5) { BPF_W } else { BPF_DW };
            let op =
                [0x00, 0x01, 0x40, 0x41, 0x50, 0x51, 0xa0, 0xa1, 0xe1, 0xf1][rng.gen_range(0..10)];
            let off = if on_stack { off & !7 } else { data_off(rng, 8) };
            atomic(size, base, r, off, op)
        }
    }
}

fn gen_jump(rng: &mut SmallRng, at: usize, body_len: usize) -> Slot {
    let op = JMP_OPS[rng.gen_range(0..JMP_OPS.len())];
    let class = if rng.gen_bool(0.5) { BPF_JMP } else { BPF_JMP32 };
    let use_x = rng.gen_bool(0.5);
    let dst = rng.gen_range(0..GEN_REGS);
    let insn = if use_x {
        ins(class | op | BPF_X, dst, rng.gen_range(0..GEN_REGS), 0, 0)
    } else {
        ins(class | op | BPF_K, dst, 0, 0, rand_imm(rng))
    };
    let to = if rng.gen_range(0..3) == 0 {
        rng.gen_range(0..=at)
    } else {
        rng.gen_range(at + 1..=body_len)
    };
    Slot::Jump { insn, to }
}

/// A random program: prologue (r9 = data base from ctx, r0..r8 = constants), a body, `exit`.
pub fn gen_program(seed: u64) -> Program {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut insns = vec![ldx(BPF_DW, DATA_REG, 1, 0)];
    for r in 0..GEN_REGS {
        if rng.gen_bool(0.3) {
            insns.extend(lddw(r, rng.gen()));
        } else {
            insns.push(mov64(r, rand_imm(&mut rng)));
        }
    }
    let body_len = rng.gen_range(1..=GEN_MAX_BODY);
    let slots: Vec<Slot> = (0..body_len)
        .map(|at| match rng.gen_range(0..10) {
            0..=3 => Slot::Plain(gen_alu(&mut rng)),
            4..=6 => Slot::Plain(gen_mem(&mut rng)),
            7 if rng.gen_bool(0.3) => Slot::Plain(ja_placeholder()),
            _ => gen_jump(&mut rng, at, body_len),
        })
        .collect();
    let base = insns.len();
    for (at, slot) in slots.into_iter().enumerate() {
        let pc = base + at;
        insns.push(match slot {
            Slot::Plain(i) => i,
            Slot::Jump { mut insn, to } => {
                insn.off = i16::try_from((base + to) as i64 - pc as i64 - 1).unwrap();
                insn
            }
        });
    }
    insns.push(exit());
    program(insns)
}

/// [`gen_program`], verified; `None` when the verifier rejects it (an uninitialised read on
/// some path, a stack access outside the frame).
pub fn gen_verified(seed: u64) -> Option<VerifiedProgram> {
    VerifiedProgram::new(gen_program(seed)).ok()
}

/// `ja +0`: a no-op jump, exercises JA lowering.
fn ja_placeholder() -> Insn {
    ja(0)
}

/// Regression guard for the harness itself: every generated program compiles on the JIT and
/// two runs on fresh sandboxes agree exactly (no hidden state between invocations).
#[test]
fn generated_programs_compile_and_run_deterministically() {
    let mut faults = 0;
    let mut budget = 0;
    let mut verified = 0;
    for seed in 0..300 {
        let Some(prog) = gen_verified(seed) else { continue };
        verified += 1;
        let mut jit2 = jit_engine;
        let v = run_engines(&prog, GEN_BUDGET, &gen_setup, &mut [&mut jit_engine, &mut jit2]);
        assert_same(&v[0], &v[1], &format!("seed {seed}"));
        let a = &v[0];
        match &a.result {
            Err(VmError::BudgetExhausted { .. }) => budget += 1,
            Err(_) => faults += 1,
            Ok(_) => {}
        }
    }
    // The generator must exercise the interesting paths, not only clean runs.
    assert!(verified > 200, "only {verified} of 300 generated programs verify");
    assert!(faults > 10, "faults {faults}");
    assert!(budget > 3, "budget {budget}");
}

/// Same result everywhere, and with small budgets the same stopping instruction: the engines
/// charge the same blocks in the same order.
#[test]
fn random_programs_jit_equals_interp() {
    let mut stops = 0;
    for seed in 0..3000 {
        let Some(prog) = gen_verified(seed) else { continue };
        for budget in [3, 17, GEN_BUDGET] {
            let (jit, interp) = both(&prog, budget, &gen_setup);
            assert_same(&jit, &interp, &format!("seed {seed} budget {budget}: {:?}", prog.insns));
            stops += usize::from(matches!(jit.result, Err(VmError::BudgetExhausted { .. })));
        }
    }
    assert!(stops > 1000, "only {stops} budget stops compared");
}

#[test]
fn corpus_programs_jit_equals_interp() {
    use storefn_vm::xrp::{XRP_OFF_DATA, XRP_OFF_DONE, XRP_OFF_SCRATCH};
    use storefn_vm::ProgType;
    let mut ran_ok = 0;
    let mut compared = 0;
    for (name, elf) in storefn_progs::ALL {
        let t = if name.contains("lambda") { ProgType::Lambda } else { ProgType::Xrp };
        {
            let Ok(prog) = storefn_vm::load(elf, None, t) else { continue };
            let Ok(prog) = VerifiedProgram::new(prog) else { continue };
            // Context pointers into the sandbox: XRP data and scratch, or λ's buf_o/buf_i.
            let setup = |sb: &mut Sandbox| {
                gen_setup(sb);
                // The program's globals image; read-only part first.
                let mut g = prog.globals.clone();
                g.resize(g.len().div_ceil(8).max(1) * 8, 0);
                sb.globals =
                    g.chunks(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
                sb.globals_ro_words = prog.globals_rw_start.div_ceil(8);
                let (data, half) = (sb.data_addr(), DATA_BYTES as u64 / 2);
                match t {
                    ProgType::Xrp => {
                        sb.ctx_writable = Some((XRP_OFF_DONE, XRP_OFF_SCRATCH));
                        sb.ctx[XRP_OFF_DATA / 8] = data;
                        sb.ctx[XRP_OFF_SCRATCH / 8] = data + half;
                    }
                    _ => {
                        sb.ctx[0] = data + half;
                        sb.ctx[1] = data;
                        sb.ctx[2] = half;
                    }
                }
            };
            let (jit, interp) = both(&prog, DEFAULT_INSN_BUDGET, &setup);
            assert_same(&jit, &interp, name);
            compared += 1;
            ran_ok += usize::from(jit.result.is_ok());
            eprintln!("{name} {t:?}: {:?}", jit.result);
        }
    }
    assert!(compared >= 10 && ran_ok >= 6, "compared {compared}, ran to completion {ran_ok}");
}

/// Generated programs with a few random bytes flipped: compiling never panics, and whatever
/// compiles runs to a value or a fault inside the sandbox (the process survives).
#[test]
fn mutated_programs_never_panic_or_escape() {
    let mut compiled = 0;
    for seed in 0..400u64 {
        let mut prog = gen_program(seed);
        let mut rng = SmallRng::seed_from_u64(seed ^ 0xdead_beef);
        for _ in 0..rng.gen_range(1..4) {
            let i = rng.gen_range(0..prog.insns.len());
            let mut bytes = prog.insns[i].encode();
            bytes[rng.gen_range(0..8)] ^= 1 << rng.gen_range(0..8);
            prog.insns[i] = Insn::decode(&bytes);
        }
        let Ok(prog) = VerifiedProgram::new(prog) else { continue };
        let jit = JitProgram::compile(&prog).expect("a verified program compiles");
        compiled += 1;
        let mut sb = Sandbox::new();
        gen_setup(&mut sb);
        let before_stack_len = sb.stack.len();
        let mut env = sb.env(GEN_BUDGET);
        let _ = run_jit(&jit, &mut env, sb.ctx_addr(), sb.stack_top());
        assert!(env.insns_left <= GEN_BUDGET);
        assert_eq!(sb.stack.len(), before_stack_len);
    }
    assert!(compiled > 100, "only {compiled} mutated programs compiled");
}

/// Programs that read and write their context through r1 and through a copy in r6 while
/// random arithmetic, loads and jumps overwrite either register on some paths. The JIT drops
/// the region check exactly where the verifier proved the access (src/proofs.rs); a wrong proof
/// would let the JIT touch memory where the interpreter faults, and show up here as a
/// difference (or a crash).
#[test]
fn context_accesses_jit_equals_interp_where_checks_are_elided() {
    let (mut proved, mut checked) = (0, 0);
    for seed in 0..1500u64 {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0xc0ff_ee00);
        let mut insns = vec![mov64_reg(6, 1)];
        for r in [0u8, 2, 3, 4, 5, 7, 8, 9] {
            insns.push(mov64(r, rng.gen_range(-4..300)));
        }
        let base = insns.len();
        let body_len = rng.gen_range(1..=30usize);
        for at in 0..body_len {
            let pc = base + at;
            let reg = |rng: &mut SmallRng| [0u8, 1, 2, 6, 7][rng.gen_range(0..5)];
            let insn = match rng.gen_range(0..10) {
                0..=3 => {
                    let size = SIZES[rng.gen_range(0..SIZES.len())];
                    let from = if rng.gen_bool(0.5) { 1 } else { 6 };
                    ldx(size, reg(&mut rng), from, rng.gen_range(-16..300))
                }
                8 | 9 => {
                    // Stores around the writable fields (done at 8, next_addr/size 16..272).
                    let size = SIZES[rng.gen_range(0..SIZES.len())];
                    let to = if rng.gen_bool(0.5) { 1 } else { 6 };
                    stx(size, to, reg(&mut rng), rng.gen_range(-8..290))
                }
                4 => alu64_imm(BPF_ADD, reg(&mut rng), rng.gen_range(-8..8)),
                5 => mov64_reg(reg(&mut rng), if rng.gen_bool(0.5) { 1 } else { 6 }),
                _ => {
                    let to = rng.gen_range(base..=base + body_len);
                    let off = i16::try_from(to as i64 - pc as i64 - 1).unwrap();
                    jmp_imm(BPF_JGT, reg(&mut rng), rng.gen_range(0..300), off)
                }
            };
            insns.push(insn);
        }
        insns.push(exit());
        let Ok(prog) = VerifiedProgram::new(program(insns)) else { continue };
        for pc in 0..prog.insns.len() {
            if matches!(prog.insns[pc].class(), BPF_LDX | BPF_STX) {
                if prog.access_in_bounds(pc) {
                    proved += 1;
                } else {
                    checked += 1;
                }
            }
        }
        for budget in [17, GEN_BUDGET] {
            let (jit, interp) = both(&prog, budget, &gen_setup);
            assert_same(&jit, &interp, &format!("seed {seed} budget {budget}: {:?}", prog.insns));
        }
    }
    assert!(proved > 2000 && checked > 2000, "proved {proved}, checked {checked} context accesses");
}

/// A body for [`gen_program_with_calls`]: `len` random ALU, memory and jump slots; jumps
/// land inside the body or on the slot right after it.
fn gen_body(rng: &mut SmallRng, len: usize) -> Vec<Insn> {
    let slots: Vec<Slot> = (0..len)
        .map(|at| match rng.gen_range(0..10) {
            0..=4 => Slot::Plain(gen_alu(rng)),
            5..=7 => Slot::Plain(gen_mem(rng)),
            _ => gen_jump(rng, at, len),
        })
        .collect();
    slots
        .into_iter()
        .enumerate()
        .map(|(at, slot)| match slot {
            Slot::Plain(i) => i,
            Slot::Jump { mut insn, to } => {
                insn.off = i16::try_from(to as i64 - at as i64 - 1).unwrap();
                insn
            }
        })
        .collect()
}

/// A random program whose entry calls functions: small leaves (inlined by the JIT), leaves
/// longer than the JIT inlines (real calls), and a middle function that calls a leaf (a real
/// call whose own call is inlined below depth 0). Every function sets its registers first
/// (r9 = the data base its caller passed in r1) and may loop, fault and write its own frame.
pub fn gen_program_with_calls(seed: u64) -> Program {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0xca11_ca11);
    // (body length, calls the first leaf) per function; function 0 is a short leaf.
    let funcs: Vec<(usize, bool)> = (0..rng.gen_range(1..=4))
        .map(|k| match k {
            0 => (rng.gen_range(1..=20), false),
            _ if rng.gen_bool(0.3) => (rng.gen_range(1..=10), true),
            _ if rng.gen_bool(0.5) => (rng.gen_range(70..=90), false),
            _ => (rng.gen_range(1..=40), false),
        })
        .collect();
    let prologue = |rng: &mut SmallRng, v: &mut Vec<Insn>, data_from: u8| {
        v.push(mov64_reg(DATA_REG, data_from));
        for r in 0..GEN_REGS {
            v.push(mov64(r, rand_imm(rng)));
        }
    };
    // The entry: prologue (r9 from ctx->data), then body chunks separated by calls.
    let mut main = vec![ldx(BPF_DW, 1, 1, 0)];
    prologue(&mut rng, &mut main, 1);
    let mut call_sites = Vec::new();
    for _ in 0..rng.gen_range(1..=4) {
        let len = rng.gen_range(0..=12);
        main.extend(gen_body(&mut rng, len));
        main.push(mov64_reg(1, DATA_REG));
        call_sites.push((main.len(), rng.gen_range(0..funcs.len())));
        main.push(call_local(0));
        // r1-r5 are unset after a call: set them again before the body reads them.
        for r in 1..=5 {
            main.push(mov64(r, rand_imm(&mut rng)));
        }
    }
    main.push(exit());
    let mut insns = main;
    let mut starts = Vec::new();
    for &(len, calls_leaf) in &funcs {
        starts.push(insns.len());
        let mut f = Vec::new();
        prologue(&mut rng, &mut f, 1);
        if calls_leaf {
            f.push(mov64_reg(1, DATA_REG));
            call_sites.push((insns.len() + f.len(), 0));
            f.push(call_local(0));
            for r in 1..=5 {
                f.push(mov64(r, rand_imm(&mut rng)));
            }
        }
        f.extend(gen_body(&mut rng, len));
        f.push(exit());
        insns.extend(f);
    }
    for (pc, g) in call_sites {
        insns[pc].imm = i32::try_from(starts[g] as i64 - pc as i64 - 1).unwrap();
    }
    program(insns)
}

/// BPF-to-BPF calls, inlined or not, give the same result, memory, error and budget left on
/// the JIT as on the interpreter: an inlined callee charges at its first slot, keeps its own
/// registers and frame, and its faults stop the run where the interpreter stops.
#[test]
fn random_programs_with_calls_jit_equals_interp() {
    let (mut inlined, mut real, mut stops, mut compared) = (0, 0, 0, 0);
    for seed in 0..600 {
        let Ok(prog) = VerifiedProgram::new(gen_program_with_calls(seed)) else { continue };
        let jit = JitProgram::compile(&prog).expect("a verified program compiles");
        let funcs = prog.cfg().functions().len();
        // Every function but the entry that is not compiled was inlined at all its calls.
        inlined += funcs - jit.compiled_functions();
        real += jit.compiled_functions() - 1;
        for budget in [3, 17, GEN_BUDGET, 100_000] {
            let (j, i) = both(&prog, budget, &gen_setup);
            assert_same(&j, &i, &format!("seed {seed} budget {budget}: {:?}", prog.insns));
            stops += usize::from(matches!(j.result, Err(VmError::BudgetExhausted { .. })));
            compared += 1;
        }
    }
    eprintln!("compared {compared}, inlined {inlined}, compiled callees {real}, stops {stops}");
    assert!(compared > 1000, "only {compared} runs compared");
    assert!(inlined > 150 && real > 100, "inlined {inlined}, compiled callees {real}");
    assert!(stops > 250, "only {stops} budget stops compared");
}

/// Short runs of register arithmetic skipped by a conditional jump, which the JIT emits as
/// conditional moves: `if c goto T; A; T:`, `if c goto T; A; goto T` and a loop whose second
/// back edge skips such a run (`H: ...; if c goto H; A; goto H`, as clang writes a binary
/// search). Same results, memory and budget left as the interpreter, under budgets that stop
/// the loops at every point; the registers A writes differ between the two paths, so taking
/// the wrong value on either path shows here.
#[test]
fn if_converted_branches_jit_equals_interp() {
    let mut stops = 0;
    for seed in 0..800u64 {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x1f_c0de);
        let mut insns = vec![ldx(BPF_DW, DATA_REG, 1, 0)];
        for r in 0..GEN_REGS {
            insns.push(mov64(r, rand_imm(&mut rng)));
        }
        let side = |rng: &mut SmallRng, v: &mut Vec<Insn>, n: usize| {
            for _ in 0..n {
                v.push(gen_alu(rng));
            }
        };
        let cond = |rng: &mut SmallRng, off: i16| {
            let op = JMP_OPS[rng.gen_range(0..JMP_OPS.len())];
            let class = if rng.gen_bool(0.5) { BPF_JMP } else { BPF_JMP32 };
            if rng.gen_bool(0.5) {
                ins(
                    class | op | BPF_X,
                    rng.gen_range(0..GEN_REGS),
                    rng.gen_range(0..GEN_REGS),
                    off,
                    0,
                )
            } else {
                ins(class | op | BPF_K, rng.gen_range(0..GEN_REGS), 0, off, rand_imm(rng))
            }
        };
        for _ in 0..rng.gen_range(1..6) {
            let n = rng.gen_range(1..=5usize);
            match rng.gen_range(0..3) {
                0 => {
                    insns.push(cond(&mut rng, n as i16));
                    side(&mut rng, &mut insns, n);
                }
                1 => {
                    insns.push(cond(&mut rng, n as i16 + 1));
                    side(&mut rng, &mut insns, n);
                    insns.push(ja(0));
                }
                _ => {
                    // H: r8 -= 1; if r8 == 0 goto out; <k ALU>; if c goto H; A; goto H; out:
                    insns.push(mov64(8, rng.gen_range(1..40)));
                    let head = insns.len();
                    insns.push(alu64_imm(BPF_SUB, 8, 1));
                    let k = rng.gen_range(0..3usize);
                    let exit_at = insns.len();
                    insns.push(jmp_imm(BPF_JEQ, 8, 0, 0));
                    for _ in 0..k {
                        let mut a = gen_alu(&mut rng);
                        a.dst = rng.gen_range(0..8);
                        insns.push(a);
                    }
                    let back = |at: usize| i16::try_from(head as i64 - at as i64 - 1).unwrap();
                    let at = insns.len();
                    let mut c = cond(&mut rng, back(at));
                    c.dst = c.dst.min(7);
                    insns.push(c);
                    for _ in 0..n {
                        let mut a = gen_alu(&mut rng);
                        a.dst = rng.gen_range(0..8);
                        insns.push(a);
                    }
                    let at = insns.len();
                    insns.push(ja(back(at)));
                    insns[exit_at].off = i16::try_from(insns.len() - exit_at - 1).unwrap();
                }
            }
        }
        insns.push(exit());
        let Ok(prog) = VerifiedProgram::new(program(insns)) else { continue };
        for budget in [3, 17, GEN_BUDGET, 100_000] {
            let (j, i) = both(&prog, budget, &gen_setup);
            assert_same(&j, &i, &format!("seed {seed} budget {budget}: {:?}", prog.insns));
            stops += usize::from(matches!(j.result, Err(VmError::BudgetExhausted { .. })));
        }
    }
    assert!(stops > 300, "only {stops} budget stops compared");
}
