use super::*;
use crate::insn::{BPF_JA, BPF_JEQ, BPF_JMP, BPF_K, BPF_MUL, BPF_X};
use crate::testutil::{ins, xrp_program};
use crate::JitProgram;
use crate::{ProgType, VerifiedProgram};

const LD_W: u8 = BPF_LDX | BPF_MEM | BPF_W;
const ST_W: u8 = BPF_STX | BPF_MEM | BPF_W;

/// `r0 = *(u32 *)(r6 + 4); w0 += 1; *(u32 *)(r6 + 4) = r0`.
fn bump() -> Vec<Insn> {
    vec![ins(LD_W, 0, 6, 4, 0), ins(BPF_ALU | BPF_ADD | BPF_K, 0, 0, 0, 1), ins(ST_W, 6, 0, 4, 0)]
}

#[test]
fn a_load_op_store_on_one_address_is_a_triple() {
    assert_eq!(triple(&bump(), 0), Some(Rmw { len: 4, op: BPF_ADD, src: Err(1) }));
    // 64 bits, a register operand, each foldable op.
    for op in [BPF_ADD, BPF_SUB, BPF_AND, BPF_OR, BPF_XOR] {
        let v = vec![
            ins(BPF_LDX | BPF_MEM | BPF_DW, 3, 7, -8, 0),
            ins(BPF_ALU64 | op | BPF_X, 3, 2, 0, 0),
            ins(BPF_STX | BPF_MEM | BPF_DW, 7, 3, -8, 0),
        ];
        assert_eq!(triple(&v, 0), Some(Rmw { len: 8, op, src: Ok(2) }));
    }
}

#[test]
fn near_triples_are_not() {
    let variants: [(usize, Insn); 12] = [
        // A 64-bit op on a 32-bit access (the register keeps the carry the store drops).
        (1, ins(BPF_ALU64 | BPF_ADD | BPF_K, 0, 0, 0, 1)),
        // Another store offset, base, value register or size.
        (2, ins(ST_W, 6, 0, 8, 0)),
        (2, ins(ST_W, 7, 0, 4, 0)),
        (2, ins(ST_W, 6, 1, 4, 0)),
        (2, ins(BPF_STX | BPF_MEM | BPF_DW, 6, 0, 4, 0)),
        // The op on another register, an op x86 has no memory form of here, `x += x`.
        (1, ins(BPF_ALU | BPF_ADD | BPF_K, 1, 0, 0, 1)),
        (1, ins(BPF_ALU | BPF_MUL | BPF_K, 0, 0, 0, 3)),
        (1, ins(BPF_ALU | BPF_ADD | BPF_X, 0, 0, 0, 0)),
        // A byte or sign-extending load, a load that overwrites its own base.
        (0, ins(BPF_LDX | BPF_MEM | crate::insn::BPF_B, 0, 6, 4, 0)),
        (0, ins(BPF_LDX | crate::insn::BPF_MEMSX | BPF_W, 0, 6, 4, 0)),
        (0, ins(LD_W, 6, 6, 4, 0)),
        // A jump in the middle.
        (1, ins(BPF_JMP | BPF_JA, 0, 0, 0, 0)),
    ];
    for (k, (at, i)) in variants.into_iter().enumerate() {
        let mut v = bump();
        v[at] = i;
        assert_eq!(triple(&v, 0), None, "variant {k}");
    }
    // Past the end.
    assert_eq!(triple(&bump()[..2], 0), None);
}

/// `r6 = r10 - 64 + ((r2 & 15) << 2)` (proved in the frame), then `prefix`, a bump at
/// `*(u32 *)(r6 + 0)`, `r0 = 0; exit`.
fn frame_bump(prefix: Vec<Insn>) -> VerifiedProgram {
    let mut v = vec![
        ins(BPF_ALU64 | BPF_MOV | BPF_K, 2, 0, 0, 7),
        ins(BPF_ALU64 | BPF_AND | BPF_K, 2, 0, 0, 15),
        ins(BPF_ALU64 | crate::insn::BPF_LSH | BPF_K, 2, 0, 0, 2),
        ins(BPF_ALU64 | BPF_MOV | BPF_X, 6, 10, 0, 0),
        ins(BPF_ALU64 | BPF_ADD | BPF_K, 6, 0, 0, -64),
        ins(BPF_ALU64 | BPF_ADD | BPF_X, 6, 2, 0, 0),
        ins(BPF_STX | BPF_MEM | BPF_DW, 10, 2, -8, 0),
    ];
    v.extend(prefix);
    v.extend(bump().into_iter().map(|mut i| {
        i.off = 0;
        i
    }));
    v.push(ins(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 0));
    v.push(ins(BPF_JMP | crate::insn::BPF_EXIT, 0, 0, 0, 0));
    VerifiedProgram::new(xrp_program(v)).unwrap()
}

#[test]
fn only_triples_in_one_block_are_fused() {
    let jit = |p: &VerifiedProgram| JitProgram::compile(p).unwrap().rmw_triples();
    assert_eq!(jit(&frame_bump(vec![])), 1);
    // `if r2 == 0 goto +1` lands on the op: the op and the store run without the load on
    // one path, so the three are not one block.
    let p = frame_bump(vec![
        ins(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 0),
        ins(BPF_JMP | BPF_JEQ | BPF_K, 2, 0, 1, 0),
    ]);
    assert_eq!(p.insns[9].op, LD_W);
    assert_eq!(jit(&p), 0);
    // Histogram's `h[d[i] >> 4]++`, in a counted loop on the stack.
    let h = crate::load_verified(storefn_progs::must("bench/histogram"), None, ProgType::Xrp);
    assert!(jit(&h.unwrap()) >= 1);
}
