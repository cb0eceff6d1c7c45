//! Read-modify-write triples (`jit/rmw.rs`: `rX = *(uN *)(rA + off); rX op= s;
//! *(uN *)(rA + off) = rX` emitted as one instruction on memory): JIT against the interpreter
//! on random programs whose triples hit the data region at offsets read from data (checked:
//! just inside its end, and straddling it, which faults at the load), the read-only context
//! (the load passes and the store faults, at the store), its writable fields, and a stack
//! array indexed by data (proved), in straight code and in a counted loop (a ring of copies),
//! with the register used after the store or dead, the address a sum with a constant in
//! each of the places the JIT moves it into the displacement from. Same r0, error, data, stack and budget.

mod jit_support;

use jit_support::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use storefn_vm::insn::*;
use storefn_vm::xrp::{XRP_OFF_DATA, XRP_OFF_DONE, XRP_OFF_SCRATCH};
use storefn_vm::{JitProgram, VerifiedProgram, VmError};

/// Data words the program reads its offsets from.
const OFF_WORD: usize = 0;
const IDX_WORD: usize = 1;

/// Where a triple's base points.
#[derive(Clone, Copy, Debug)]
enum Target {
    /// data + (word 0): checked; the sandbox puts it anywhere around the end.
    Data,
    /// ctx + (word 0): readable, writable only in XRP's `done .. scratch` fields.
    Ctx,
    /// r10 - 64 + ((word 1 & 15) << 2): a stack array, proved.
    Stack,
}

/// `r9 = data; r2 = data[0]; r3 = base (per target); r0 = c; r4 = c`, then the triple
/// (`len` bytes, `op`, an immediate or r4) at `r3 + off`, in a counted loop of `trips` when
/// some, then `r0 += rX` when `live`, `exit`.
fn gen(rng: &mut SmallRng, target: Target, len: u8, trips: Option<i32>, live: bool) -> Vec<Insn> {
    let (size, class) = if len == 4 { (BPF_W, BPF_ALU) } else { (BPF_DW, BPF_ALU64) };
    let off = if matches!(target, Target::Stack) { 0 } else { rng.gen_range(-8..8i16) };
    let mut v =
        vec![ldx(BPF_DW, 9, 1, XRP_OFF_DATA as i16), ldx(BPF_DW, 2, 9, (OFF_WORD * 8) as i16)];
    match target {
        Target::Data => v.extend([alu64_reg(BPF_MOV, 3, 9), alu64_reg(BPF_ADD, 3, 2)]),
        // `r1 + (r2 - 8)`, which the JIT's address split reads as `(r1 + r2) - 8`; the
        // offsets tried are 8 higher.
        Target::Ctx => v.extend([
            alu64_reg(BPF_MOV, 8, 2),
            alu64_imm(BPF_ADD, 8, -8),
            alu64_reg(BPF_MOV, 3, 1),
            alu64_reg(BPF_ADD, 3, 8),
        ]),
        Target::Stack => v.extend([
            ldx(BPF_DW, 2, 9, (IDX_WORD * 8) as i16),
            alu64_imm(BPF_AND, 2, 15),
            alu64_imm(BPF_LSH, 2, 2),
            alu64_reg(BPF_MOV, 3, 10),
            alu64_imm(BPF_ADD, 3, -64),
            alu64_reg(BPF_ADD, 3, 2),
        ]),
    }
    v.extend([mov64(0, rng.gen_range(0..100)), mov64(4, rng.gen())]);
    let x = [0, 5, 6][rng.gen_range(0..3)];
    let op = [BPF_ADD, BPF_SUB, BPF_AND, BPF_OR, BPF_XOR][rng.gen_range(0..5)];
    let alu = if rng.gen_bool(0.5) {
        ins(class | op | BPF_K, x, 0, 0, rng.gen_range(-3..1000))
    } else {
        ins(class | op | BPF_X, x, 4, 0, 0)
    };
    let triple = [ldx(size, x, 3, off), alu, stx(size, 3, x, off)];
    match trips {
        Some(n) => {
            // `r7 = 0; loop: triple; r7 += 1; if r7 != n goto loop`.
            v.push(mov64(7, 0));
            v.extend(triple);
            v.push(alu64_imm(BPF_ADD, 7, 1));
            v.push(ins(BPF_JMP | BPF_JNE | BPF_K, 7, 0, -5, n));
        }
        None => v.extend(triple),
    }
    if live {
        v.push(alu64_reg(BPF_ADD, 0, x));
    }
    v.push(ins(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
    v
}

/// A sandbox whose data word 0 holds `off` and word 1 `idx`, the rest a pattern.
fn sandbox(off: u64, idx: u64) -> Sandbox {
    let mut sb = Sandbox::new();
    sb.ctx[XRP_OFF_DATA / 8] = sb.data_addr();
    sb.ctx[XRP_OFF_SCRATCH / 8] = sb.data_addr() + DATA_BYTES as u64 / 2;
    for (i, w) in sb.data.iter_mut().enumerate() {
        *w = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x0123_4567;
    }
    sb.data[OFF_WORD] = off;
    sb.data[IDX_WORD] = idx;
    sb
}

/// What one engine did: r0 or the fault, then data, stack, context and the budget left.
type Outcome = (Result<u64, VmError>, Vec<u64>, Vec<u64>, Vec<u64>, u64);

/// Runs the JIT (or, with `None`, the interpreter) once on `sb`, then restores `sb` to
/// `initial` (same addresses in both engines' runs: the context holds data's address).
fn outcome(
    prog: &VerifiedProgram,
    jit: Option<&JitProgram>,
    sb: &mut Sandbox,
    initial: &Sandbox,
    budget: u64,
) -> Outcome {
    let mut env = sb.env(budget);
    let (ctx, top) = (sb.ctx_addr(), sb.stack_top());
    let result = match jit {
        Some(j) => run_jit(j, &mut env, ctx, top),
        // SAFETY: the env grants only the sandbox's own buffers, alive for the call; no host.
        None => unsafe { storefn_vm::interpret(prog, &mut env, ctx, top) },
    };
    let out = (result, sb.data.clone(), sb.stack.clone(), sb.ctx.clone(), env.insns_left);
    sb.ctx.copy_from_slice(&initial.ctx);
    sb.data.copy_from_slice(&initial.data);
    sb.stack.copy_from_slice(&initial.stack);
    out
}

/// Offsets of `target`'s base (before the triple's own `off`, in -8..8) to try: around the
/// region's ends, and inside it.
fn offsets(rng: &mut SmallRng, target: Target, len: u64) -> Vec<u64> {
    let (size, inside) = match target {
        Target::Data => (DATA_BYTES as u64, rng.gen_range(8..DATA_BYTES as u64 - 16)),
        Target::Ctx => {
            (CTX_BYTES as u64, rng.gen_range(XRP_OFF_DONE as u64 + 8..XRP_OFF_SCRATCH as u64 - 16))
        }
        Target::Stack => return vec![0],
    };
    let mut v = vec![inside, 0u64.wrapping_sub(8)];
    for k in 0..=16 {
        v.push(size - len - 8 + k);
    }
    if matches!(target, Target::Ctx) {
        v.iter_mut().for_each(|o| *o = o.wrapping_add(8));
    }
    v
}

#[test]
fn fused_triples_fault_and_count_where_the_interpreter_does() {
    let (mut fused, mut finished, mut reads, mut writes) = (0, 0, 0, 0);
    for seed in 0..400u64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let target = [Target::Data, Target::Ctx, Target::Stack][seed as usize % 3];
        let len = if rng.gen_bool(0.5) { 4 } else { 8 };
        let trips = rng.gen_bool(0.5).then(|| rng.gen_range(1..300));
        let live = rng.gen_bool(0.5);
        let Ok(prog) = VerifiedProgram::new(program_of(gen(&mut rng, target, len, trips, live)))
        else {
            panic!("seed {seed}: {target:?} program refused");
        };
        let jit = JitProgram::compile(&prog).unwrap();
        fused += jit.rmw_triples();
        for off in offsets(&mut rng, target, u64::from(len)) {
            let mut sb = sandbox(off, rng.gen());
            let initial = sb.clone();
            for budget in [6, 12, 300, 100_000] {
                let want = outcome(&prog, None, &mut sb, &initial, budget);
                let what = format!("seed {seed} {target:?} off {off:#x} budget {budget}");
                let got = outcome(&prog, Some(&jit), &mut sb, &initial, budget);
                assert_eq!((&got.0, got.4), (&want.0, want.4), "{what}: result, budget left");
                assert!(got == want, "{what}: memory differs");
                match want.0 {
                    Ok(_) => finished += 1,
                    Err(VmError::BadRead { .. }) => reads += 1,
                    Err(VmError::BadWrite { .. }) => writes += 1,
                    Err(VmError::BudgetExhausted { .. }) => {}
                    Err(e) => panic!("{what}: {e}"),
                }
            }
        }
    }
    assert!(
        fused >= 350 && finished > 1000 && reads > 500 && writes > 500,
        "fused {fused}, finished {finished}, bad reads {reads}, bad writes {writes}"
    );
}

fn program_of(insns: Vec<Insn>) -> storefn_vm::Program {
    jit_support::program(insns)
}
