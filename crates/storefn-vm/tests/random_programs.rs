//! Random instruction streams either fail verification or run to completion / a clean fault in
//! the interpreter: never a panic, never an access outside the regions (those are faults).

mod common;

use common::*;
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use storefn_vm::insn::*;
use storefn_vm::{ProgType, VmError};

/// Opcodes the generator draws from: every valid one plus a few invalid ones.
const OPS: &[u8] = &[
    0x07, 0x0f, 0x17, 0x1f, 0x27, 0x2f, 0x37, 0x3f, 0x47, 0x4f, 0x57, 0x5f, 0x67, 0x6f, 0x77, 0x7f,
    0x87, 0x97, 0x9f, 0xa7, 0xaf, 0xb7, 0xbf, 0xc7, 0xcf, 0xd7, 0x04, 0x0c, 0x14, 0x1c, 0x24, 0x2c,
    0x34, 0x3c, 0x44, 0x4c, 0x54, 0x5c, 0x64, 0x6c, 0x74, 0x7c, 0x84, 0x94, 0x9c, 0xa4, 0xac, 0xb4,
    0xbc, 0xc4, 0xcc, 0xd4, 0xdc, 0x05, 0x15, 0x1d, 0x25, 0x2d, 0x35, 0x3d, 0x45, 0x4d, 0x55, 0x5d,
    0x65, 0x6d, 0x75, 0x7d, 0xa5, 0xad, 0xb5, 0xbd, 0xc5, 0xcd, 0xd5, 0xdd, 0x16, 0x1e, 0x26, 0x2e,
    0x36, 0x3e, 0xa6, 0xae, 0xc6, 0xce, 0x06, 0x85, 0x95, 0x61, 0x69, 0x71, 0x79, 0x81, 0x89, 0x91,
    0x62, 0x6a, 0x72, 0x7a, 0x63, 0x6b, 0x73, 0x7b, 0xc3, 0xdb, 0x18, 0x20, 0xff, 0x8e,
];

fn random_insn(rng: &mut SmallRng, pc: usize, len: usize) -> Insn {
    let op = OPS[rng.gen_range(0..OPS.len())];
    let reg = |rng: &mut SmallRng| {
        if rng.gen_ratio(1, 50) {
            rng.gen_range(11..16)
        } else {
            rng.gen_range(0..11)
        }
    };
    let mut ins = Insn { op, dst: reg(rng), src: reg(rng), off: 0, imm: 0 };
    ins.imm = match rng.gen_range(0..4) {
        0 => rng.gen(),
        1 => rng.gen_range(-4..70),
        2 => *[16, 32, 64, 6, 0x1000, 0x01, 0xe1, 0xf1, 0x41].get(rng.gen_range(0..9)).unwrap(),
        _ => 0,
    };
    ins.off = match ins.class() {
        BPF_JMP | BPF_JMP32 => {
            rng.gen_range(-(pc as i64) - 1..len.saturating_sub(pc).max(1) as i64) as i16
        }
        BPF_LDX | BPF_ST | BPF_STX => {
            if rng.gen_bool(0.5) {
                rng.gen_range(-520..300)
            } else {
                *[0i16, 8, 16, 272, -8].get(rng.gen_range(0..5)).unwrap()
            }
        }
        _ => *[0i16, 0, 0, 1, 8, 16, 32].get(rng.gen_range(0..7)).unwrap(),
    };
    if op == 0x85 && rng.gen_bool(0.3) {
        ins.src = 1;
        ins.imm = rng.gen_range(-(pc as i32) - 1..len.saturating_sub(pc).max(1) as i32);
    }
    ins
}

/// A program biased toward acceptance: all registers written first, then random instructions,
/// then `exit`.
fn random_program(rng: &mut SmallRng) -> Vec<Insn> {
    let body = rng.gen_range(1..40);
    let mut v = Vec::new();
    for r in 0..10u8 {
        if r == 1 {
            continue; // r1 = ctx
        }
        v.push(mov64_imm(r, rng.gen_range(-8..300)));
    }
    if rng.gen_bool(0.5) {
        v.push(mov64_reg(2, 10)); // a stack pointer
        v.push(alu64_imm(BPF_ADD, 2, -16));
    }
    let len = v.len() + body + 1;
    for _ in 0..body {
        let pc = v.len();
        let ins = random_insn(rng, pc, len);
        if ins.is_lddw() {
            v.extend(lddw(ins.dst, rng.gen()));
        } else {
            v.push(ins);
        }
    }
    v.push(exit());
    v
}

/// 0 = rejected, 1 = ran to `exit`, 2 = faulted cleanly.
fn check(insns: Vec<Insn>) -> usize {
    let p = program(insns, ProgType::Xrp);
    if storefn_vm::verify(&p).is_err() {
        return 0;
    }
    match run_with_budget(p, 600) {
        Ok(_) => 1,
        // `Invalid` means the verifier let through something the engines cannot run.
        Err(e @ VmError::Invalid { .. }) => panic!("verified program hit {e}"),
        Err(_) => 2,
    }
}

#[test]
fn seeded_random_programs_never_panic_and_some_are_accepted() {
    let mut rng = SmallRng::seed_from_u64(0x5eed);
    let mut outcomes = [0usize; 3];
    for _ in 0..20_000 {
        outcomes[check(random_program(&mut rng))] += 1;
    }
    // The generator must exercise the interpreter (both clean exits and faults), not only the
    // verifier's rejections.
    assert!(outcomes[1] > 200 && outcomes[2] > 200, "outcomes {outcomes:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_slots_never_panic(raw in proptest::collection::vec(any::<[u8; 8]>(), 1..48)) {
        let insns: Vec<Insn> = raw.iter().map(Insn::decode).collect();
        let _ = check(insns);
    }

    #[test]
    fn generated_programs_never_panic(seed in any::<u64>()) {
        let _ = check(random_program(&mut SmallRng::seed_from_u64(seed)));
    }
}
