//! Interpreter semantics (RFC 9669) on raw instruction vectors, and run-time faults.

mod common;

use common::*;
use storefn_vm::insn::*;
use storefn_vm::limits::STACK_FRAME_BYTES;
use storefn_vm::{Place, ProgType, VmError};

/// r0 = a; r1 = b; r0 <op>= r1 (64- or 32-bit, off selects signed/movsx); exit.
fn binop(op: u8, is64: bool, off: i16, a: u64, b: u64) -> u64 {
    let class = if is64 { BPF_ALU64 } else { BPF_ALU };
    run_xrp(asm![lddw(0, a), lddw(1, b), i(class | op | BPF_X, 0, 1, off, 0), exit()]).unwrap()
}

const MIN64: u64 = i64::MIN as u64;
const NEG1: u64 = u64::MAX;

#[test]
fn division_and_modulo_by_zero() {
    assert_eq!(binop(BPF_DIV, true, 0, 7, 0), 0);
    assert_eq!(binop(BPF_MOD, true, 0, 7, 0), 7);
    assert_eq!(binop(BPF_DIV, false, 0, 7, 0), 0);
    // 32-bit mod by zero keeps the low half of dst, zero-extended.
    assert_eq!(binop(BPF_MOD, false, 0, 0xffff_ffff_0000_0007, 0), 7);
    assert_eq!(binop(BPF_DIV, true, 1, 7, 0), 0);
    assert_eq!(binop(BPF_MOD, true, 1, NEG1, 0), NEG1);
    // By immediate zero too.
    let r = run_xrp(asm![mov64_imm(0, 9), alu64_imm(BPF_MOD, 0, 0), exit()]).unwrap();
    assert_eq!(r, 9);
}

#[test]
fn signed_division_overflow_and_signs() {
    assert_eq!(binop(BPF_DIV, true, 1, MIN64, NEG1), MIN64);
    assert_eq!(binop(BPF_MOD, true, 1, MIN64, NEG1), 0);
    assert_eq!(binop(BPF_DIV, false, 1, 0x8000_0000, NEG1), 0x8000_0000);
    assert_eq!(binop(BPF_MOD, false, 1, 0x8000_0000, NEG1), 0);
    assert_eq!(binop(BPF_DIV, true, 1, (-7i64) as u64, 2), (-3i64) as u64);
    assert_eq!(binop(BPF_MOD, true, 1, (-7i64) as u64, 2), (-1i64) as u64);
    assert_eq!(binop(BPF_MOD, false, 1, u64::from((-7i32) as u32), 2), u64::from((-1i32) as u32));
    // Unsigned division treats the same bits as huge.
    assert_eq!(binop(BPF_DIV, true, 0, (-7i64) as u64, 2), ((-7i64) as u64) / 2);
    // ALU64 unsigned division by an immediate sign-extends it first.
    let r = run_xrp(asm![lddw(0, u64::MAX), alu64_imm(BPF_DIV, 0, -1), exit()]).unwrap();
    assert_eq!(r, 1);
}

#[test]
fn shifts_are_masked() {
    assert_eq!(binop(BPF_LSH, true, 0, 1, 65), 2);
    assert_eq!(binop(BPF_RSH, true, 0, 0x8000_0000_0000_0000, 127), 1);
    assert_eq!(binop(BPF_ARSH, true, 0, MIN64, 63), NEG1);
    assert_eq!(binop(BPF_LSH, false, 0, 1, 33), 2);
    assert_eq!(binop(BPF_ARSH, false, 0, 0x8000_0000, 31), 0xffff_ffff);
    assert_eq!(binop(BPF_RSH, false, 0, 0xffff_ffff_8000_0000, 4), 0x0800_0000);
}

#[test]
fn alu32_zero_extends() {
    assert_eq!(binop(BPF_ADD, false, 0, 0xffff_ffff, 1), 0);
    assert_eq!(binop(BPF_SUB, false, 0, 0, 1), 0xffff_ffff);
    assert_eq!(binop(BPF_MOV, false, 0, 0, 0xdead_beef_1234_5678), 0x1234_5678);
    assert_eq!(binop(BPF_MUL, false, 0, 0x1_0000_0003, 0x1_0000_0005), 15);
    let r = run_xrp(asm![lddw(0, u64::MAX), alu32_imm(BPF_NEG, 0, 0), exit()]).unwrap();
    assert_eq!(r, 1);
    let r = run_xrp(asm![mov64_imm(0, -1), exit()]).unwrap();
    assert_eq!(r, u64::MAX, "64-bit mov of an immediate sign-extends");
    let r = run_xrp(asm![i(0xb4, 0, 0, 0, -1), exit()]).unwrap();
    assert_eq!(r, 0xffff_ffff, "32-bit mov zero-extends");
}

#[test]
fn movsx_and_byte_swaps() {
    assert_eq!(binop(BPF_MOV, true, 8, 0, 0x80), 0xffff_ffff_ffff_ff80);
    assert_eq!(binop(BPF_MOV, true, 16, 0, 0x1_7fff), 0x7fff);
    assert_eq!(binop(BPF_MOV, true, 32, 0, 0x8000_0000), 0xffff_ffff_8000_0000);
    assert_eq!(binop(BPF_MOV, false, 8, 0, 0xff), 0xffff_ffff);
    assert_eq!(binop(BPF_MOV, false, 16, 0, 0x8000), 0xffff_8000);
    let swap = |op: u8, imm: i32| {
        run_xrp(asm![lddw(0, 0x1122_3344_5566_7788), i(op, 0, 0, 0, imm), exit()]).unwrap()
    };
    assert_eq!(swap(0xd7, 16), 0x8877);
    assert_eq!(swap(0xd7, 32), 0x8877_6655);
    assert_eq!(swap(0xd7, 64), 0x8877_6655_4433_2211);
    assert_eq!(swap(0xdc, 16), 0x8877);
    assert_eq!(swap(0xd4, 16), 0x7788);
    assert_eq!(swap(0xd4, 64), 0x1122_3344_5566_7788);
}

#[test]
fn jumps_signed_unsigned_and_32bit() {
    // r0 = 1 if (a <op> b) else 0
    let j = |class: u8, op: u8, a: u64, b: u64| {
        run_xrp(asm![
            lddw(1, a),
            lddw(2, b),
            mov64_imm(0, 1),
            i(class | op | BPF_X, 1, 2, 1, 0),
            mov64_imm(0, 0),
            exit()
        ])
        .unwrap()
    };
    assert_eq!(j(BPF_JMP, BPF_JGT, NEG1, 1), 1);
    assert_eq!(j(BPF_JMP, BPF_JSGT, NEG1, 1), 0);
    assert_eq!(j(BPF_JMP, BPF_JSLT, MIN64, 0), 1);
    assert_eq!(j(BPF_JMP32, BPF_JEQ, 0x1_0000_0005, 5), 1);
    assert_eq!(j(BPF_JMP, BPF_JEQ, 0x1_0000_0005, 5), 0);
    assert_eq!(j(BPF_JMP32, BPF_JSLT, 0xffff_ffff, 0), 1);
    assert_eq!(j(BPF_JMP, BPF_JSET, 6, 2), 1);
    assert_eq!(j(BPF_JMP, BPF_JLE, 3, 3), 1);
    // JMP with an immediate compares against it sign-extended.
    let r = run_xrp(asm![
        mov64_imm(0, 1),
        lddw(1, NEG1),
        jmp_imm(BPF_JEQ, 1, -1, 1),
        mov64_imm(0, 0),
        exit()
    ]);
    assert_eq!(r.unwrap(), 1);
}

#[test]
fn memory_sizes_and_sign_extending_loads() {
    let r = run_xrp(asm![
        lddw(1, 0x8899_aabb_ccdd_eeff),
        stx(BPF_DW, 10, 1, -8),
        i(BPF_LDX | BPF_MEMSX | BPF_B, 0, 10, -8, 0), // 0xff -> -1
        ldx(BPF_H, 2, 10, -8),                        // 0xeeff
        alu64_reg(BPF_ADD, 0, 2),
        exit()
    ]);
    assert_eq!(r.unwrap(), 0xeeff - 1);
    let r = run_xrp(asm![st(BPF_DW, 10, -8, -2), ldx(BPF_DW, 0, 10, -8), exit()]);
    assert_eq!(r.unwrap(), (-2i64) as u64, "ST DW sign-extends its immediate");
    let r =
        run_xrp(asm![st(BPF_W, 10, -8, -1), i(BPF_LDX | BPF_MEMSX | BPF_W, 0, 10, -8, 0), exit()]);
    assert_eq!(r.unwrap(), u64::MAX);
}

#[test]
fn atomics_semantics() {
    let r = run_xrp(asm![
        st(BPF_DW, 10, -8, 40),
        mov64_imm(2, 2),
        i(BPF_STX | BPF_ATOMIC | BPF_DW, 10, 2, -8, 0x01), // r2 = fetch_add(+2) -> 40
        mov64_imm(0, 42),
        mov64_imm(3, 7),
        i(BPF_STX | BPF_ATOMIC | BPF_DW, 10, 3, -8, 0xf1), // cmpxchg: 42 == 42 -> 7, r0 = 42
        ldx(BPF_DW, 4, 10, -8),
        alu64_imm(BPF_MUL, 0, 1000),
        alu64_reg(BPF_ADD, 0, 4), // 42007
        alu64_imm(BPF_MUL, 0, 100),
        alu64_reg(BPF_ADD, 0, 2), // 4200740
        exit()
    ]);
    assert_eq!(r.unwrap(), 4_200_740);
}

#[test]
fn subprogram_calls_preserve_callee_saved_and_use_a_new_frame() {
    let r = run_xrp(asm![
        mov64_imm(6, 100),
        st(BPF_DW, 10, -8, 5),
        mov64_imm(1, 3),
        call_pc(4),
        ldx(BPF_DW, 1, 10, -8),   // still 5: the callee's frame is below ours
        alu64_reg(BPF_ADD, 0, 6), // r6 restored to 100
        alu64_reg(BPF_ADD, 0, 1),
        exit(),
        // callee: clobbers r6 and its own frame slot, returns r1 * 10
        mov64_imm(6, 7),
        st(BPF_DW, 10, -8, 99),
        mov64_reg(0, 1),
        alu64_imm(BPF_MUL, 0, 10),
        exit()
    ]);
    assert_eq!(r.unwrap(), 30 + 100 + 5);
    // The callee's r10 is exactly one frame lower.
    let r = run_xrp(asm![
        call_pc(3),
        alu64_reg(BPF_SUB, 0, 10),
        alu64_imm(BPF_NEG, 0, 0),
        exit(),
        mov64_reg(0, 10),
        exit()
    ]);
    assert_eq!(r.unwrap(), STACK_FRAME_BYTES as u64);
}

#[test]
fn budget_exhaustion_names_the_charge_point_that_did_not_fit() {
    // Charge points: 0 (entry: 1 insn before the loop), 1 (the loop header: 1, 2). Budget
    // 10 = 1 + 4 * 2, then the fifth iteration finds 1 left.
    let mut p = program(asm![mov64_imm(0, 0), alu64_imm(BPF_ADD, 0, 1), ja(-2)], ProgType::Xrp);
    p.insns.push(exit()); // unreachable; keeps the verifier's fall-through rule happy
    let e = run_with_budget(p, 10).unwrap_err();
    assert_eq!(e, VmError::BudgetExhausted { insn: 1, budget: 10 });
    assert_eq!(e.to_string(), "insn #1: instruction budget exhausted (10 instructions)");
    // A counted loop (r0 is 0..=10 at the header, one `r0 += 1` per iteration: 11 trips) is
    // charged as a whole where control enters it, at the entry: 1, then 10 iterations of 2,
    // then the longest pass (1, 2, exit): 1 + 10 * 2 + 3 = 24; one less stops at the entry.
    let looped =
        asm![mov64_imm(0, 0), alu64_imm(BPF_ADD, 0, 1), jmp_imm(BPF_JLT, 0, 11, -2), exit()];
    assert_eq!(run_with_budget(program(looped.clone(), ProgType::Xrp), 24).unwrap(), 11);
    let e = run_with_budget(program(looped, ProgType::Xrp), 23).unwrap_err();
    assert_eq!(e, VmError::BudgetExhausted { insn: 0, budget: 23 });
    // Without a proved count (the step is r0 itself), the header pays for the longest path
    // to the next charge point or exit on every iteration: 1, 2 and the exit, so r0 = 2, 4,
    // 8, 16 (4 iterations) cost 1 + 4 * 3 = 13.
    let doubling =
        asm![mov64_imm(0, 1), alu64_reg(BPF_ADD, 0, 0), jmp_imm(BPF_JLT, 0, 16, -2), exit()];
    assert_eq!(run_with_budget(program(doubling.clone(), ProgType::Xrp), 13).unwrap(), 16);
    let e = run_with_budget(program(doubling, ProgType::Xrp), 12).unwrap_err();
    assert_eq!(e, VmError::BudgetExhausted { insn: 1, budget: 12 });
}

#[test]
fn calls_and_straight_line_code_are_charged() {
    // No loop at all: main (4 insns, charged at its entry) calls f (3 insns, charged at its
    // entry) twice: 4 + 3 + 3 = 10.
    let p = asm![
        call_pc(3),      // 0: main
        call_pc(2),      // 1
        mov64_imm(0, 7), // 2
        exit(),          // 3
        mov64_imm(0, 1), // 4: f
        alu64_imm(BPF_ADD, 0, 1),
        exit()
    ];
    assert_eq!(run_with_budget(program(p.clone(), ProgType::Xrp), 10).unwrap(), 7);
    let e = run_with_budget(program(p.clone(), ProgType::Xrp), 9).unwrap_err();
    assert_eq!(e, VmError::BudgetExhausted { insn: 4, budget: 9 }, "second call's body");
    let e = run_with_budget(program(p, ProgType::Xrp), 3).unwrap_err();
    assert_eq!(e, VmError::BudgetExhausted { insn: 0, budget: 3 }, "main's own body");
}

#[test]
fn bad_accesses_name_instruction_and_address() {
    let r = run_xrp(asm![mov64_imm(2, 0x1000), ldx(BPF_DW, 0, 2, 0), exit()]);
    assert_eq!(r.unwrap_err(), VmError::BadRead { insn: 1, at: Place::Low(0x1000), len: 8 });
    // Context field `data` (offset 0) is readable, not writable.
    let r = run_xrp(asm![st(BPF_DW, 1, 0, 0), mov64_imm(0, 0), exit()]);
    assert!(matches!(r.unwrap_err(), VmError::BadWrite { insn: 0, len: 8, .. }));
    // `done` is writable; `slot` (offset 12) is not; a write straddling both is not.
    assert!(run_xrp(asm![st(BPF_W, 1, 8, 1), mov64_imm(0, 0), exit()]).is_ok());
    assert!(matches!(
        run_xrp(asm![st(BPF_W, 1, 12, 1), mov64_imm(0, 0), exit()]).unwrap_err(),
        VmError::BadWrite { insn: 0, len: 4, .. }
    ));
    assert!(matches!(
        run_xrp(asm![st(BPF_DW, 1, 8, 1), mov64_imm(0, 0), exit()]).unwrap_err(),
        VmError::BadWrite { insn: 0, len: 8, .. }
    ));
    // One byte past the context.
    assert!(matches!(
        run_xrp(asm![ldx(BPF_B, 0, 1, 288), exit()]).unwrap_err(),
        VmError::BadRead { insn: 0, len: 1, .. }
    ));
    // The data block is readable but not writable; scratch is both.
    let r =
        run_xrp(asm![ldx(BPF_DW, 2, 1, 0), ldx(BPF_DW, 0, 2, 4088), st(BPF_B, 2, 0, 1), exit()]);
    assert!(matches!(r.unwrap_err(), VmError::BadWrite { insn: 2, len: 1, .. }));
    let r = run_xrp(asm![
        ldx(BPF_DW, 2, 1, 272),
        st(BPF_DW, 2, 4088, 1),
        ldx(BPF_DW, 0, 2, 4088),
        exit()
    ]);
    assert_eq!(r.unwrap(), 1);
    let r = run_xrp(asm![ldx(BPF_DW, 2, 1, 272), st(BPF_DW, 2, 4089, 1), mov64_imm(0, 0), exit()]);
    assert!(matches!(r.unwrap_err(), VmError::BadWrite { insn: 1, len: 8, .. }));
    // Wrapping pointer arithmetic does not escape.
    let r = run_xrp(asm![lddw(2, u64::MAX), ldx(BPF_DW, 0, 2, -3), exit()]);
    assert!(matches!(r.unwrap_err(), VmError::BadRead { insn: 2, len: 8, .. }));
}

#[test]
fn deepest_stack_frame_is_inside_the_stack_region() {
    // 8 frames deep, the innermost writes the lowest byte of its frame.
    let mut v = Vec::new();
    for _ in 0..7 {
        v.push(call_pc(1));
        v.push(exit());
    }
    v.extend(asm![st(BPF_B, 10, -512, 1), mov64_imm(0, 3), exit()]);
    assert_eq!(run_xrp(v).unwrap(), 3);
}

/// r0 = storefn_crc32c(crc, stack bytes "123456789" or `ptr` when given, n).
fn crc_prog(crc: i32, ptr: Option<u64>, n: i32) -> Vec<storefn_vm::insn::Insn> {
    let src = match ptr {
        Some(p) => lddw(2, p),
        None => [mov64_reg(2, 10), alu64_imm(BPF_ADD, 2, -16)],
    };
    asm![
        lddw(3, 0x3837_3635_3433_3231),
        stx(BPF_DW, 10, 3, -16),
        st(BPF_B, 10, -8, i32::from(b'9')),
        mov64_imm(1, crc),
        src,
        mov64_imm(3, n),
        call_helper(0x1003), // storefn_crc32c,
        exit(),
    ]
}

#[test]
fn crc32c_helper_checksums_a_checked_range_on_both_engines() {
    for engine in [storefn_vm::Engine::Interp, storefn_vm::Engine::Jit] {
        let run = |p: Vec<_>, budget| run_on(program(p, ProgType::Xrp), budget, engine);
        // RFC 3720's check value; chaining over a split gives the same.
        assert_eq!(run(crc_prog(0, None, 9), 1000).unwrap(), 0xE306_9283, "{engine:?}");
        assert_eq!(run(crc_prog(0, None, 0), 1000).unwrap(), 0, "{engine:?}");
        // A range outside every region is refused like a load.
        let e = run(crc_prog(0, Some(0x1000), 9), 1000).unwrap_err();
        assert!(matches!(e, VmError::BadRead { .. }), "{engine:?}: {e}");
        // Charged by length: 16 + 1 per 8 bytes.
        let e = run(crc_prog(0, None, 9), 17).unwrap_err();
        assert!(matches!(e, VmError::BudgetExhausted { .. }), "{engine:?}: {e}");
    }
}
