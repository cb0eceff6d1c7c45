//! Out-of-line read checks (src/jit/memcheck.rs, `Tx::check_out_of_line`): a program with
//! many checked loads outside loops calls a shim per load and tests for a fault only before
//! the next instruction that is not register arithmetic or a load. Random such programs
//! (80-140 checked loads through pointers taken from scratch words, chains of loads through
//! loaded values, stores, branches, helper calls) run on the JIT and the interpreter over the
//! same buffers, with a few scratch words pointing outside the data block (just past its end,
//! before it, or far from every region, where a load would crash the process): the result
//! and the faulting instruction, the scratch bytes and the instructions charged must agree.
//! It fails when the fault test before a store or call is left out (the store lands), when a
//! later failed check overwrites the first fault (another instruction is named), or when a
//! failed load reads its own address instead of the sink (the far address crashes).

mod common;

use std::sync::Arc;

use common::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use storefn_vm::insn::*;
use storefn_vm::{Engine, Instance, ProgType, VerifiedProgram, VmError, XrpCtx};

/// r6 = ctx->data, r7 = ctx->scratch (callee-saved: they survive helper calls).
const DATA: u8 = 6;
const SCRATCH: u8 = 7;
const SIZES: [u8; 4] = [BPF_B, BPF_H, BPF_W, BPF_DW];
/// Unmapped-at-guard distance around each buffer (both engines run over the same buffers).
const GUARD: usize = 80 << 10;
const DATA_LEN: usize = 4096;
const SCRATCH_LEN: usize = 4096;
/// Scratch words 0..POINTERS hold data offsets the program loads through.
const POINTERS: i16 = 256;
/// `storefn_crc32c`.
const CRC32C: i32 = 0x1003;

/// A random program of many checked loads outside loops (module documentation).
fn gen(rng: &mut SmallRng) -> Vec<Insn> {
    let mut p = vec![
        ldx(BPF_DW, DATA, 1, 0),
        ldx(BPF_DW, SCRATCH, 1, 272),
        mov64_imm(0, 0),
        mov64_imm(8, 0),
        mov64_imm(9, 0),
    ];
    for _ in 0..rng.gen_range(100..160) {
        let size = SIZES[rng.gen_range(0..4)];
        let dst = [8, 9][rng.gen_range(0..2)];
        match rng.gen_range(0..16) {
            // A pointer from a scratch word: data + word + off (the word is unbounded).
            0..=8 => {
                p.push(ldx(BPF_DW, 4, SCRATCH, 8 * rng.gen_range(0..POINTERS)));
                p.push(alu64_reg(BPF_ADD, 4, DATA));
                p.push(ldx(size, dst, 4, rng.gen_range(-2..10)));
                p.push(alu64_reg([BPF_ADD, BPF_XOR][rng.gen_range(0..2)], 0, dst));
            }
            // Through a loaded value (the sink's 0 after a failed check), masked past data.
            9..=11 => {
                p.push(mov64_reg(4, dst));
                let mask =
                    if rng.gen_bool(0.02) { 8191 } else { [4095, 0x7ff][rng.gen_range(0..2)] };
                p.push(alu64_imm(BPF_AND, 4, mask));
                p.push(alu64_reg(BPF_ADD, 4, DATA));
                p.push(ldx(size, dst, 4, 0));
                p.push(alu64_reg(BPF_ADD, 0, dst));
            }
            12 => p.push(stx(BPF_DW, SCRATCH, 0, 2048 + 8 * rng.gen_range(0..64))),
            13 => p.push(st(size, SCRATCH, 3072 + 8 * rng.gen_range(0..64), rng.gen())),
            14 => {
                p.push(jmp_imm(BPF_JGT, 0, rng.gen(), 1));
                p.push(alu64_imm(BPF_ADD, 0, 1));
            }
            _ => {
                p.push(mov64_reg(1, 0));
                p.push(mov64_reg(2, SCRATCH));
                p.push(mov64_imm(3, 8));
                p.push(call_helper(CRC32C));
            }
        }
    }
    p.push(stx(BPF_DW, SCRATCH, 0, 4088));
    p.push(exit());
    p
}

/// The loads the verifier did not prove (the ones the JIT checks).
fn checked_loads(prog: &VerifiedProgram) -> usize {
    let is_load = |(pc, i): &(usize, &Insn)| i.class() == BPF_LDX && !prog.access_in_bounds(*pc);
    prog.insns.iter().enumerate().filter(is_load).count()
}

/// Data and scratch inside guard bytes no region grants; scratch's pointer words in bounds
/// but for a few (past data's end, before it, or far away).
struct Buffers {
    data: Vec<u8>,
    scratch: Vec<u8>,
}

impl Buffers {
    fn new(rng: &mut SmallRng) -> Self {
        let mut data = vec![0xa5u8; 2 * GUARD + DATA_LEN];
        data[GUARD..GUARD + DATA_LEN].iter_mut().for_each(|b| *b = rng.gen());
        let mut scratch = vec![0xa5u8; 2 * GUARD + SCRATCH_LEN];
        scratch[GUARD..GUARD + SCRATCH_LEN].iter_mut().for_each(|b| *b = rng.gen());
        for w in 0..POINTERS as usize {
            let v: u64 = rng.gen_range(8..DATA_LEN as u64 - 16);
            scratch[GUARD + 8 * w..GUARD + 8 * w + 8].copy_from_slice(&v.to_le_bytes());
        }
        for _ in 0..rng.gen_range(0..4) {
            let w = rng.gen_range(0..POINTERS as usize);
            let v: u64 = match rng.gen_range(0..4) {
                0 => DATA_LEN as u64 - rng.gen_range(0..4),
                1 => (DATA_LEN + rng.gen_range(0..4096)) as u64,
                2 => (-rng.gen_range(16..4096i64)).cast_unsigned(),
                _ => 1 << 44,
            };
            scratch[GUARD + 8 * w..GUARD + 8 * w + 8].copy_from_slice(&v.to_le_bytes());
        }
        Self { data, scratch }
    }
}

/// (result without the fault's place, scratch after, instructions charged); the scratch is
/// restored for the other engine.
fn run(inst: &mut Instance, b: &mut Buffers) -> (Result<u64, VmError>, Vec<u8>, u64) {
    let before = b.scratch.clone();
    let mut ctx = XrpCtx::default();
    let r = inst.run_xrp(
        &mut ctx,
        &b.data[GUARD..GUARD + DATA_LEN],
        &mut b.scratch[GUARD..GUARD + SCRATCH_LEN],
    );
    let after = std::mem::replace(&mut b.scratch, before);
    (without_place(r), after, inst.insns_used())
}

#[test]
fn out_of_line_checks_stop_where_the_interpreter_stops() {
    let (mut faults, mut oks) = (0, 0);
    for seed in 0..300u64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let prog = Arc::new(VerifiedProgram::new(program(gen(&mut rng), ProgType::Xrp)).unwrap());
        let loads = checked_loads(&prog);
        let mut jit = Instance::new(Arc::clone(&prog), Engine::Jit).unwrap();
        let mut interp = Instance::new(prog, Engine::Interp).unwrap();
        for round in 0..3 {
            let mut b = Buffers::new(&mut rng);
            let want = run(&mut interp, &mut b);
            let got = run(&mut jit, &mut b);
            let at = format!("seed {seed} round {round} ({loads} checked loads)");
            assert_eq!(got.0, want.0, "result, {at}");
            assert!(got.1 == want.1, "scratch differs, {at}");
            assert_eq!(got.2, want.2, "instructions charged, {at}");
            if want.0.is_ok() {
                oks += 1;
            } else {
                faults += 1;
            }
        }
    }
    assert!(faults > 200 && oks > 200, "{faults} faulting and {oks} clean runs");
}

#[test]
fn the_generated_programs_take_the_out_of_line_checks() {
    let insns = gen(&mut SmallRng::seed_from_u64(7));
    let prog = VerifiedProgram::new(program(insns, ProgType::Xrp)).unwrap();
    let jit = storefn_vm::JitProgram::compile(&prog).unwrap();
    let loads = checked_loads(&prog);
    assert!(loads >= 64, "{loads}");
    assert_eq!(jit.out_of_line_loads(), loads);
}
