//! Verifier: every rejection message is pinned.

mod common;

use common::*;
use storefn_vm::insn::*;
use storefn_vm::limits::{MAX_CALL_DEPTH, MAX_INSNS};
use storefn_vm::ProgType;

fn v(insns: Vec<Insn>) -> String {
    verdict(insns, ProgType::Xrp)
}

#[test]
fn accepts_minimal_and_div_by_immediate_zero() {
    assert_eq!(v(asm![mov64_imm(0, 0), exit()]), "ok");
    assert_eq!(
        v(asm![mov64_imm(0, 5), alu64_imm(BPF_DIV, 0, 0), alu32_imm(BPF_MOD, 0, 0), exit()]),
        "ok"
    );
}

#[test]
fn rejects_empty_and_too_long() {
    assert_eq!(v(vec![]), "insn #0: empty program");
    let mut long = vec![mov64_imm(0, 0); MAX_INSNS];
    long.push(exit());
    assert_eq!(v(long), "insn #65536: program has 65537 slots, the limit is 65536");
}

#[test]
fn rejects_unknown_opcodes() {
    assert_eq!(v(asm![i(0x20, 0, 0, 0, 0), exit()]), "insn #0: unsupported legacy load 0x20");
    assert_eq!(
        v(asm![i(0xf7, 0, 0, 0, 0), exit()]),
        "insn #0: invalid ALU instruction 0xf7 (off=0, imm=0)"
    );
    assert_eq!(v(asm![i(0x8e, 0, 0, 0, 0), exit()]), "insn #0: unknown opcode 0x8e");
    assert_eq!(v(asm![mov64_imm(0, 0), i(0x96, 0, 0, 0, 0)]), "insn #1: unknown opcode 0x96");
    assert_eq!(v(asm![i(0xe5, 0, 0, 0, 0), exit()]), "insn #0: unknown opcode 0xe5");
    // LDX | MEMSX | DW does not exist.
    assert_eq!(v(asm![i(0x99, 0, 1, 0, 0), exit()]), "insn #0: unknown opcode 0x99");
    assert_eq!(
        v(asm![i(0x82, 1, 0, 0, 0), mov64_imm(0, 0), exit()]),
        "insn #0: unknown opcode 0x82"
    );
}

#[test]
fn rejects_bad_alu_fields() {
    // sdiv/smod take off = 1 only; off = 2 is not an operation.
    assert_eq!(
        v(asm![mov64_imm(0, 1), i(0x3f, 0, 0, 2, 0), exit()]),
        "insn #1: invalid ALU instruction 0x3f (off=2, imm=0)"
    );
    // movsx: 32-bit ALU has no off = 32.
    assert_eq!(
        v(asm![i(0xbc, 0, 1, 32, 0), exit()]),
        "insn #0: invalid ALU instruction 0xbc (off=32, imm=0)"
    );
    assert_eq!(
        v(asm![mov64_imm(0, 1), i(0xd7, 0, 0, 0, 8), exit()]),
        "insn #1: invalid ALU instruction 0xd7 (off=0, imm=8)"
    );
    assert_eq!(
        v(asm![mov64_imm(0, 1), alu64_imm(BPF_ADD, 0, 1).with_off(3), exit()]),
        "insn #1: invalid ALU instruction 0x07 (off=3, imm=1)"
    );
    assert_eq!(v(asm![mov64_reg(0, 11), exit()]), "insn #0: invalid register r11");
    assert_eq!(v(asm![mov64_imm(12, 0), exit()]), "insn #0: invalid register r12");
    // Unused register fields are checked too (the engines index registers by every field).
    assert_eq!(v(asm![i(0xb7, 0, 13, 0, 0), exit()]), "insn #0: invalid register r13");
}

trait WithOff {
    fn with_off(self, off: i16) -> Self;
}
impl WithOff for Insn {
    fn with_off(mut self, off: i16) -> Self {
        self.off = off;
        self
    }
}

#[test]
fn accepts_v4_alu_forms() {
    let ok = asm![
        mov64_imm(0, -7),
        mov64_imm(1, 2),
        i(0x3f, 0, 1, 1, 0),  // sdiv r0, r1
        i(0x9f, 0, 1, 1, 0),  // smod r0, r1
        i(0xbf, 0, 1, 8, 0),  // movsx r0, (s8) r1
        i(0xbf, 0, 1, 32, 0), // movsx r0, (s32) r1
        i(0xbc, 0, 1, 16, 0), // movsx w0, (s16) w1
        i(0xd7, 0, 0, 0, 64), // bswap64
        i(0xdc, 0, 0, 0, 16), // be16
        i(0xd4, 0, 0, 0, 32), // le32
        exit(),
    ];
    assert_eq!(v(ok), "ok");
}

#[test]
fn rejects_broken_lddw() {
    assert_eq!(
        v(asm![mov64_imm(0, 0), i(0x18, 1, 0, 0, 0)]),
        "insn #1: lddw is missing its second slot"
    );
    assert_eq!(
        v(asm![i(0x18, 1, 0, 0, 0), i(0x07, 0, 0, 0, 0), mov64_imm(0, 0), exit()]),
        "insn #1: malformed second slot of lddw"
    );
    assert_eq!(
        v(asm![i(0x18, 1, 1, 0, 0), i(0, 0, 0, 0, 0), mov64_imm(0, 0), exit()]),
        "insn #0: lddw with src=1 (map and pseudo loads are not supported)"
    );
}

#[test]
fn rejects_bad_jumps() {
    assert_eq!(
        v(asm![mov64_imm(0, 0), jmp_imm(BPF_JEQ, 0, 0, 5), exit()]),
        "insn #1: jump target 7 is outside the function"
    );
    assert_eq!(
        v(asm![mov64_imm(0, 0), ja(-3), exit()]),
        "insn #1: jump target -1 is outside the function"
    );
    assert_eq!(
        v(asm![mov64_imm(0, 0), jmp_imm(BPF_JEQ, 0, 0, 1), lddw(2, 7), exit()]),
        "insn #1: jump into the middle of lddw at #2"
    );
    // A jump from the entry function into a subprogram's body leaves the function.
    assert_eq!(
        v(asm![call_pc(2), ja(2), exit(), mov64_imm(0, 1), exit()]),
        "insn #1: jump target 4 is outside the function"
    );
}

#[test]
fn rejects_fall_through() {
    assert_eq!(v(asm![mov64_imm(0, 0)]), "insn #0: falls through past the end of the function");
    assert_eq!(
        v(asm![mov64_imm(0, 0), jmp_imm(BPF_JEQ, 0, 0, -2)]),
        "insn #1: falls through past the end of the function"
    );
    // Subprogram body running into the next function.
    assert_eq!(
        v(asm![call_pc(1), exit(), mov64_imm(0, 1)]),
        "insn #2: falls through past the end of the function"
    );
    assert_eq!(
        v(asm![mov64_imm(0, 0), exit(), lddw(1, 5)]),
        "insn #2: falls through past the end of the function"
    );
}

#[test]
fn rejects_writes_to_r10() {
    assert_eq!(v(asm![mov64_imm(10, 0), exit()]), "insn #0: r10 is read-only");
    assert_eq!(v(asm![ldx(BPF_DW, 10, 1, 0), exit()]), "insn #0: r10 is read-only");
    assert_eq!(v(asm![lddw(10, 1), exit()]), "insn #0: r10 is read-only");
    assert_eq!(
        v(asm![mov64_imm(0, 0), i(BPF_STX | BPF_ATOMIC | BPF_DW, 1, 10, 8, 0x01), exit()]),
        "insn #1: r10 is read-only"
    );
    // Reading r10 is fine.
    assert_eq!(v(asm![mov64_reg(0, 10), exit()]), "ok");
}

#[test]
fn rejects_uninitialised_reads() {
    assert_eq!(v(asm![mov64_reg(0, 2), exit()]), "insn #0: r2 is read before it is written");
    assert_eq!(v(asm![exit()]), "insn #0: r0 is not set before exit");
    // Written on one path only.
    assert_eq!(
        v(asm![jmp_imm(BPF_JEQ, 1, 0, 1), mov64_imm(2, 1), mov64_reg(0, 2), exit()]),
        "insn #2: r2 is read before it is written"
    );
    // Written on both paths.
    assert_eq!(
        v(asm![
            jmp_imm(BPF_JEQ, 1, 0, 2),
            mov64_imm(2, 1),
            ja(1),
            mov64_imm(2, 2),
            mov64_reg(0, 2),
            exit()
        ]),
        "ok"
    );
    // Store of an unwritten register, and an ALU op reading its destination.
    assert_eq!(
        v(asm![stx(BPF_DW, 10, 3, -8), mov64_imm(0, 0), exit()]),
        "insn #0: r3 is read before it is written"
    );
    assert_eq!(
        v(asm![alu64_imm(BPF_ADD, 4, 1), mov64_imm(0, 0), exit()]),
        "insn #0: r4 is read before it is written"
    );
    // Helper calls clobber r1-r5.
    assert_eq!(
        v(asm![
            mov64_reg(1, 10),
            alu64_imm(BPF_ADD, 1, -8),
            st(BPF_DW, 10, -8, 0),
            mov64_imm(2, 8),
            call_helper(6),
            mov64_reg(0, 1),
            exit()
        ]),
        "insn #5: r1 is read before it is written"
    );
    // A helper's arguments must be written.
    assert_eq!(v(asm![call_helper(6), exit()]), "insn #0: r2 is read before it is written");
}

#[test]
fn interprocedural_arguments() {
    // The callee reads r2 as an argument; the caller never wrote it.
    assert_eq!(
        v(asm![call_pc(2), mov64_imm(0, 0), exit(), mov64_reg(0, 2), exit()]),
        "insn #0: r2 is read before it is written"
    );
    // Written before the call: fine; the callee's r0 is the call's result.
    assert_eq!(v(asm![mov64_imm(2, 4), call_pc(1), exit(), mov64_reg(0, 2), exit()]), "ok");
    // A callee that does not set r0 leaves r0 unwritten in the caller.
    assert_eq!(
        v(asm![mov64_imm(2, 4), call_pc(1), exit(), stx(BPF_DW, 10, 2, -8), exit()]),
        "insn #2: r0 is not set before exit"
    );
    // r6-r9 are not inherited by the callee.
    assert_eq!(
        v(asm![mov64_imm(6, 4), call_pc(1), exit(), mov64_reg(0, 6), exit()]),
        "insn #3: r6 is read before it is written"
    );
}

#[test]
fn call_depth_and_recursion() {
    // Function k (k = 0..n-1) calls k+1; the last returns. Each function is 3 slots:
    // call +1 / exit / (next function starts at the exit+1). Layout: f_k = [call pc+1, exit].
    let chain = |n: usize| {
        let mut v = Vec::new();
        for _ in 0..n - 1 {
            v.push(call_pc(1));
            v.push(exit());
        }
        v.push(mov64_imm(0, 1));
        v.push(exit());
        v
    };
    assert_eq!(super_v(chain(MAX_CALL_DEPTH)), "ok");
    assert_eq!(super_v(chain(MAX_CALL_DEPTH + 1)), "insn #14: call depth exceeds 8 frames");
    assert_eq!(
        v(asm![call_pc(1), exit(), call_pc(-1), exit()]),
        "insn #2: recursive call to the function at #2"
    );
    assert_eq!(
        v(asm![call_pc(5), mov64_imm(0, 0), exit()]),
        "insn #0: call target is outside the program"
    );
    assert_eq!(v(asm![call_pc(2), mov64_imm(0, 0), exit(), lddw(0, 1), exit()]), "ok");
    assert_eq!(
        v(asm![call_pc(3), mov64_imm(0, 0), exit(), lddw(0, 1), exit()]),
        "insn #0: call into the middle of lddw at #3"
    );
    assert_eq!(v(asm![i(0x85, 0, 2, 0, 7), exit()]), "insn #0: unsupported call kind src=2");
}

fn super_v(insns: Vec<Insn>) -> String {
    v(insns)
}

#[test]
fn stack_bounds() {
    assert_eq!(v(asm![st(BPF_DW, 10, -512, 1), mov64_imm(0, 0), exit()]), "ok");
    assert_eq!(
        v(asm![st(BPF_DW, 10, -520, 1), mov64_imm(0, 0), exit()]),
        "insn #0: stack access r10-520 of 8 bytes is outside the 512-byte frame"
    );
    assert_eq!(
        v(asm![st(BPF_W, 10, -2, 1), mov64_imm(0, 0), exit()]),
        "insn #0: stack access r10-2 of 4 bytes is outside the 512-byte frame"
    );
    assert_eq!(
        v(asm![ldx(BPF_B, 0, 10, 0), exit()]),
        "insn #0: stack access r10+0 of 1 bytes is outside the 512-byte frame"
    );
}

#[test]
fn helper_tables() {
    let trace = asm![mov64_reg(1, 10), mov64_imm(2, 0), call_helper(6), exit()];
    assert_eq!(v(trace.clone()), "ok");
    assert_eq!(verdict(trace, ProgType::Lambda), "ok");
    let memcpy = asm![mov64_imm(2, 0), mov64_imm(3, 0), call_helper(0x1000), exit()];
    assert_eq!(v(memcpy.clone()), "insn #2: unknown helper 4096 for xrp programs");
    assert_eq!(verdict(memcpy, ProgType::Lambda), "ok");
    assert_eq!(v(asm![call_helper(1), exit()]), "insn #0: unknown helper 1 for xrp programs");
}

#[test]
fn atomics() {
    let a = |imm: i32| {
        v(asm![
            mov64_imm(0, 0),
            mov64_imm(2, 1),
            i(BPF_STX | BPF_ATOMIC | BPF_DW, 10, 2, -8, imm),
            mov64_imm(0, 0),
            exit()
        ])
    };
    for ok in [0x00, 0x01, 0x40, 0x41, 0x50, 0x51, 0xa0, 0xa1, 0xe1, 0xf1] {
        assert_eq!(a(ok), "ok", "{ok:#x}");
    }
    assert_eq!(a(0x10), "insn #2: unknown atomic operation 0x10");
    assert_eq!(a(0xe0), "insn #2: unknown atomic operation 0xe0");
    assert_eq!(
        v(asm![
            mov64_imm(2, 1),
            i(BPF_STX | BPF_ATOMIC | BPF_H, 10, 2, -8, 0),
            mov64_imm(0, 0),
            exit()
        ]),
        "insn #1: atomic operation must be 32 or 64 bits wide"
    );
    // cmpxchg reads r0.
    assert_eq!(
        v(asm![mov64_imm(2, 1), i(BPF_STX | BPF_ATOMIC | BPF_DW, 10, 2, -8, 0xf1), exit()]),
        "insn #1: r0 is read before it is written"
    );
}

#[test]
fn global_relocations_are_checked() {
    let mut p = program(asm![lddw(1, 0), mov64_imm(0, 0), exit()], ProgType::Xrp);
    p.globals = vec![0; 16];
    p.global_relocs = vec![(0, 8)];
    assert!(storefn_vm::verify(&p).is_ok());
    p.global_relocs = vec![(0, 24)];
    assert_eq!(
        storefn_vm::verify(&p).unwrap_err().to_string(),
        "insn #0: global offset 24 is outside the 16-byte image"
    );
    p.global_relocs = vec![(2, 0)];
    assert_eq!(
        storefn_vm::verify(&p).unwrap_err().to_string(),
        "insn #2: global relocation on an instruction that is not lddw"
    );
}

#[test]
fn clang_reject_program() {
    let prog =
        storefn_vm::load(storefn_progs::must("test/reject_helper"), None, ProgType::Xrp).unwrap();
    assert_eq!(
        storefn_vm::verify(&prog).unwrap_err().to_string(),
        "insn #1: unknown helper 5 for xrp programs"
    );
}
