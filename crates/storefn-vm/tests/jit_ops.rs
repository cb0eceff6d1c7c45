//! JIT: every opcode class on hand-assembled programs, against values computed here from
//! RFC 9669's definitions.

mod jit_support;

use jit_support::*;
use storefn_vm::insn::*;
use storefn_vm::JitProgram;
use storefn_vm::RegionName;
use storefn_vm::{Place, VerifiedProgram, VmError};

fn run_with(insns: Vec<Insn>, sb: &mut Sandbox) -> Result<u64, VmError> {
    let jit = JitProgram::compile(&verified(insns)).expect("compiles");
    let mut env = sb.env(DEFAULT_INSN_BUDGET);
    run_jit(&jit, &mut env, sb.ctx_addr(), sb.stack_top())
}

fn run(insns: Vec<Insn>) -> Result<u64, VmError> {
    run_with(insns, &mut Sandbox::new())
}

/// r0 = a; r1 = b; r0 op= r1 (or imm b); exit.
fn alu(class64: bool, op: u8, off: i16, a: u64, b: u64, use_reg: bool) -> u64 {
    let mut p = Vec::new();
    p.extend(lddw(0, a));
    p.extend(lddw(1, b));
    let class = if class64 { BPF_ALU64 } else { BPF_ALU };
    // `neg` has only the K form (the verifier refuses NEG | X).
    if use_reg && op != BPF_NEG {
        p.push(ins(class | op | BPF_X, 0, 1, off, 0));
    } else {
        p.push(ins(class | op | BPF_K, 0, 0, off, b as u32 as i32));
    }
    p.push(exit());
    run(p).unwrap()
}

/// RFC 9669 semantics, written out for the test, for either width: `$u`/`$i` are the
/// unsigned/signed operand types and `$shift_mask` the width minus one.
macro_rules! model {
    ($op:expr, $signed:expr, $a:expr, $b:expr, $u:ty, $i:ty, $shift_mask:expr) => {{
        let (a, b): ($u, $u) = ($a, $b);
        match $op {
            BPF_ADD => a.wrapping_add(b),
            BPF_SUB => a.wrapping_sub(b),
            BPF_MUL => a.wrapping_mul(b),
            BPF_DIV if $signed => match b as $i {
                0 => 0,
                -1 => (a as $i).wrapping_neg() as $u,
                d => ((a as $i) / d) as $u,
            },
            BPF_DIV => a.checked_div(b).unwrap_or(0),
            BPF_MOD if $signed => match b as $i {
                0 => a,
                -1 => 0,
                d => ((a as $i) % d) as $u,
            },
            BPF_MOD => a.checked_rem(b).unwrap_or(a),
            BPF_OR => a | b,
            BPF_AND => a & b,
            BPF_XOR => a ^ b,
            BPF_LSH => a << (b & $shift_mask),
            BPF_RSH => a >> (b & $shift_mask),
            BPF_ARSH => ((a as $i) >> (b & $shift_mask)) as $u,
            BPF_MOV => b,
            BPF_NEG => a.wrapping_neg(),
            _ => unreachable!(),
        }
    }};
}

/// 64-bit operands already prepared.
fn model64(op: u8, signed: bool, a: u64, b: u64) -> u64 {
    model!(op, signed, a, b, u64, i64, 63)
}

fn model32(op: u8, signed: bool, a: u32, b: u32) -> u64 {
    u64::from(model!(op, signed, a, b, u32, i32, 31))
}

const OPS: &[u8] = &[
    BPF_ADD, BPF_SUB, BPF_MUL, BPF_DIV, BPF_OR, BPF_AND, BPF_LSH, BPF_RSH, BPF_NEG, BPF_MOD,
    BPF_XOR, BPF_MOV, BPF_ARSH,
];

const VALUES: &[u64] = &[
    0,
    1,
    2,
    3,
    7,
    31,
    32,
    63,
    64,
    65,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    0x1_0000_0000,
    0x8000_0000_0000_0000,
    u64::MAX,
    u64::MAX - 1,
    0xdead_beef_cafe_f00d,
];

/// Every (op, signed, a, b) the ALU tests try: the signed flag only for DIV and MOD.
fn op_cases() -> impl Iterator<Item = (u8, bool, u64, u64)> {
    OPS.iter().flat_map(|&op| {
        [false, true]
            .into_iter()
            .filter(move |&signed| !signed || op == BPF_DIV || op == BPF_MOD)
            .flat_map(move |signed| {
                VALUES.iter().flat_map(move |&a| VALUES.iter().map(move |&b| (op, signed, a, b)))
            })
    })
}

#[test]
fn alu64_every_op_reg_and_imm() {
    for (op, signed, a, b) in op_cases() {
        let got = alu(true, op, i16::from(signed), a, b, true);
        assert_eq!(got, model64(op, signed, a, b), "op {op:#x} s={signed} {a:#x},{b:#x}");
        // K form: imm is sign-extended to 64 bits.
        let bk = i64::from(b as u32 as i32) as u64;
        let got = alu(true, op, i16::from(signed), a, b, false);
        assert_eq!(got, model64(op, signed, a, bk), "K op {op:#x} {a:#x},{b:#x}");
    }
}

#[test]
fn alu32_every_op_zero_extends() {
    for (op, signed, a, b) in op_cases() {
        let want = model32(op, signed, a as u32, b as u32);
        let got = alu(false, op, i16::from(signed), a, b, true);
        assert_eq!(got, want, "op32 {op:#x} s={signed} {a:#x},{b:#x}");
        let got = alu(false, op, i16::from(signed), a, b, false);
        assert_eq!(got, want, "K op32 {op:#x} {a:#x},{b:#x}");
    }
}

#[test]
fn division_edge_cases_never_trap() {
    let min = 0x8000_0000_0000_0000u64;
    let m1 = u64::MAX;
    assert_eq!(alu(true, BPF_DIV, 1, min, m1, true), min);
    assert_eq!(alu(true, BPF_MOD, 1, min, m1, true), 0);
    assert_eq!(alu(true, BPF_DIV, 1, min, m1, false), min);
    assert_eq!(alu(true, BPF_DIV, 0, 5, 0, true), 0);
    assert_eq!(alu(true, BPF_MOD, 0, 5, 0, true), 5);
    assert_eq!(alu(false, BPF_DIV, 1, 0x8000_0000, 0xffff_ffff, true), 0x8000_0000);
    assert_eq!(alu(false, BPF_MOD, 1, 0x8000_0000, 0xffff_ffff, true), 0);
    // 32-bit x % 0 = x zero-extended from 32 bits.
    assert_eq!(alu(false, BPF_MOD, 0, 0xffff_ffff_0000_0005, 0, true), 5);
    assert_eq!(alu(false, BPF_MOD, 1, 0xffff_ffff_8000_0005, 0, false), 0x8000_0005);
    // Signed modulo takes the sign of the dividend.
    assert_eq!(alu(true, BPF_MOD, 1, (-7i64) as u64, 2, true), (-1i64) as u64);
}

#[test]
fn movsx_sign_extends() {
    let cases: &[(bool, i16, u64, u64)] = &[
        (true, 8, 0x80, 0xffff_ffff_ffff_ff80),
        (true, 16, 0x1234_8001, 0xffff_ffff_ffff_8001),
        (true, 32, 0x8000_0000, 0xffff_ffff_8000_0000),
        (true, 32, 0x7fff_ffff, 0x7fff_ffff),
        (false, 8, 0xff, 0xffff_ffff),
        (false, 16, 0x7fff, 0x7fff),
    ];
    for &(is64, off, v, want) in cases {
        let mut p = Vec::new();
        p.extend(lddw(1, v));
        let class = if is64 { BPF_ALU64 } else { BPF_ALU };
        p.push(ins(class | BPF_MOV | BPF_X, 0, 1, off, 0));
        p.push(exit());
        assert_eq!(run(p).unwrap(), want, "movsx{off} 64={is64} {v:#x}");
    }
}

#[test]
fn byte_swaps() {
    let v = 0x0102_0304_0506_0708u64;
    let cases: &[(u8, i32, u64)] = &[
        (BPF_ALU | BPF_END | BPF_K, 16, 0x0708), // le16: truncate
        (BPF_ALU | BPF_END | BPF_K, 32, 0x0506_0708), // le32
        (BPF_ALU | BPF_END | BPF_K, 64, v),      // le64: no-op
        (BPF_ALU | BPF_END | BPF_X, 16, 0x0807), // be16
        (BPF_ALU | BPF_END | BPF_X, 32, 0x0807_0605), // be32
        (BPF_ALU | BPF_END | BPF_X, 64, v.swap_bytes()), // be64
        (BPF_ALU64 | BPF_END, 16, 0x0807),       // bswap16
        (BPF_ALU64 | BPF_END, 32, 0x0807_0605),
        (BPF_ALU64 | BPF_END, 64, v.swap_bytes()),
    ];
    for &(op, width, want) in cases {
        let mut p = Vec::from(lddw(0, v));
        p.push(ins(op, 0, 0, 0, width));
        p.push(exit());
        assert_eq!(run(p).unwrap(), want, "op {op:#x} width {width}");
    }
}

fn cond64(op: u8, a: u64, b: u64) -> bool {
    let (sa, sb) = (a as i64, b as i64);
    match op {
        BPF_JEQ => a == b,
        BPF_JGT => a > b,
        BPF_JGE => a >= b,
        BPF_JSET => a & b != 0,
        BPF_JNE => a != b,
        BPF_JSGT => sa > sb,
        BPF_JSGE => sa >= sb,
        BPF_JLT => a < b,
        BPF_JLE => a <= b,
        BPF_JSLT => sa < sb,
        BPF_JSLE => sa <= sb,
        _ => unreachable!(),
    }
}

fn cond32(op: u8, a: u64, b: u64) -> bool {
    let (a, b) = (a as u32, b as u32);
    let (sa, sb) = (i64::from(a as i32) as u64, i64::from(b as i32) as u64);
    match op {
        BPF_JSGT | BPF_JSGE | BPF_JSLT | BPF_JSLE => cond64(op, sa, sb),
        _ => cond64(op, u64::from(a), u64::from(b)),
    }
}

const JOPS: &[u8] = &[
    BPF_JEQ, BPF_JGT, BPF_JGE, BPF_JSET, BPF_JNE, BPF_JSGT, BPF_JSGE, BPF_JLT, BPF_JLE, BPF_JSLT,
    BPF_JSLE,
];

#[test]
fn conditional_jumps_64_and_32_reg_and_imm() {
    for &op in JOPS {
        for &a in VALUES {
            for &b in VALUES {
                for (is32, use_reg) in [(false, true), (false, false), (true, true), (true, false)]
                {
                    let mut p = Vec::new();
                    p.extend(lddw(1, a));
                    p.extend(lddw(2, b));
                    let bimm = b as u32 as i32;
                    let j = match (is32, use_reg) {
                        (false, true) => jmp_reg(op, 1, 2, 2),
                        (false, false) => jmp_imm(op, 1, bimm, 2),
                        (true, true) => jmp32_reg(op, 1, 2, 2),
                        (true, false) => jmp32_imm(op, 1, bimm, 2),
                    };
                    p.push(j);
                    p.push(mov64(0, 0));
                    p.push(exit());
                    p.push(mov64(0, 1));
                    p.push(exit());
                    let bb = if use_reg || is32 { b } else { i64::from(bimm) as u64 };
                    let want = if is32 { cond32(op, a, bb) } else { cond64(op, a, bb) };
                    let got = run(p).unwrap();
                    assert_eq!(
                        got,
                        u64::from(want),
                        "op {op:#x} 32={is32} reg={use_reg} {a:#x} {b:#x}"
                    );
                }
            }
        }
    }
}

#[test]
fn gotol_and_ja() {
    // ja +1 skips r0=1; JMP32 ja (gotol) uses imm.
    let p = vec![
        mov64(0, 7),
        ja(1),
        mov64(0, 1),
        ins(BPF_JMP32 | BPF_JA, 0, 0, 0, 1),
        mov64(0, 2),
        exit(),
    ];
    assert_eq!(run(p).unwrap(), 7);
}

/// Sum 1..=n with a backward conditional jump. Charge points: entry (0, 1) and the loop header
/// 2, which pays for 2, 3, 4 and the exit: 2 + 4n charged.
fn loop_prog(n: i32) -> Vec<Insn> {
    vec![
        mov64(0, 0),
        mov64(1, n),
        alu64_reg(BPF_ADD, 0, 1),   // 2: r0 += r1
        alu64_imm(BPF_SUB, 1, 1),   // 3
        jmp_imm(BPF_JNE, 1, 0, -3), // 4: back to 2 while r1 != 0
        exit(),
    ]
}

#[test]
fn loop_runs_on_exactly_its_instruction_count() {
    let jit = JitProgram::compile(&verified(loop_prog(100))).unwrap();
    let mut sb = Sandbox::new();
    let mut env = sb.env(402);
    assert_eq!(run_jit(&jit, &mut env, sb.ctx_addr(), sb.stack_top()), Ok(5050));
    assert_eq!(env.insns_left, 0, "2 + 4 * 100 instructions charged");
}

#[test]
fn budget_exhaustion_names_the_charge_point_that_did_not_fit() {
    let jit = JitProgram::compile(&verified(loop_prog(100))).unwrap();
    let mut sb = Sandbox::new();
    let mut env = sb.env(401);
    let e = run_jit(&jit, &mut env, sb.ctx_addr(), sb.stack_top()).unwrap_err();
    assert_eq!(e, VmError::BudgetExhausted { insn: 2, budget: 401 }, "100th iteration");
    assert_eq!(e.to_string(), "insn #2: instruction budget exhausted (401 instructions)");
    assert_eq!(env.insns_left, 3, "a charge that does not fit is not taken");
    let mut env = sb.env(1);
    let e = run_jit(&jit, &mut env, sb.ctx_addr(), sb.stack_top()).unwrap_err();
    assert_eq!(e, VmError::BudgetExhausted { insn: 0, budget: 1 }, "the entry");
}

#[test]
fn infinite_loop_terminates() {
    // `ja -1` jumps to itself forever; the budget stops it.
    let jit = JitProgram::compile(&verified(vec![mov64(0, 0), ja(-1), exit()])).unwrap();
    let mut sb = Sandbox::new();
    let mut env = sb.env(1000);
    let e = run_jit(&jit, &mut env, sb.ctx_addr(), sb.stack_top()).unwrap_err();
    assert!(matches!(e, VmError::BudgetExhausted { insn: 1, .. }), "{e:?}");
}

#[test]
fn loads_every_size_and_sign() {
    let mut sb = Sandbox::new();
    sb.data[0] = 0x8182_8384_8586_8788;
    let data = sb.data_addr();
    let cases: &[(Insn, u64)] = &[
        (ldx(BPF_B, 0, 1, 0), 0x88),
        (ldx(BPF_H, 0, 1, 0), 0x8788),
        (ldx(BPF_W, 0, 1, 0), 0x8586_8788),
        (ldx(BPF_DW, 0, 1, 0), 0x8182_8384_8586_8788),
        (ldx(BPF_B, 0, 1, 7), 0x81),
        (ldsx(BPF_B, 0, 1, 0), 0xffff_ffff_ffff_ff88),
        (ldsx(BPF_H, 0, 1, 0), 0xffff_ffff_ffff_8788),
        (ldsx(BPF_W, 0, 1, 0), 0xffff_ffff_8586_8788),
        (ldx(BPF_H, 0, 1, 1), 0x8687), // unaligned
    ];
    for &(l, want) in cases {
        let mut p = Vec::from(lddw(1, data));
        p.push(l);
        p.push(exit());
        assert_eq!(run_with(p, &mut sb).unwrap(), want, "{l:?}");
    }
}

#[test]
fn stores_every_size() {
    let mut sb = Sandbox::new();
    let data = sb.data_addr();
    let mut p = Vec::from(lddw(1, data));
    p.extend(lddw(2, 0x1122_3344_5566_7788));
    p.push(stx(BPF_DW, 1, 2, 0));
    p.push(stx(BPF_W, 1, 2, 8));
    p.push(stx(BPF_H, 1, 2, 16));
    p.push(stx(BPF_B, 1, 2, 24));
    p.push(st(BPF_DW, 1, 32, -2));
    p.push(st(BPF_W, 1, 40, -2));
    p.push(st(BPF_H, 1, 48, 0x1234));
    p.push(st(BPF_B, 1, 56, 0x1ff));
    p.push(stx(BPF_DW, 10, 2, -8)); // stack
    p.push(ldx(BPF_DW, 0, 10, -8));
    p.push(exit());
    assert_eq!(run_with(p, &mut sb).unwrap(), 0x1122_3344_5566_7788);
    assert_eq!(
        &sb.data[..8],
        &[
            0x1122_3344_5566_7788,
            0x5566_7788,
            0x7788,
            0x88,
            u64::MAX - 1,
            0xffff_fffe,
            0x1234,
            0xff
        ]
    );
}

/// The sandbox's data block, in the terms of a hand-built env (no region names).
fn unnamed(offset: i64) -> Place {
    Place::Region { name: RegionName::Unnamed, offset, len: DATA_BYTES as u64 }
}

#[test]
fn read_outside_regions_faults_with_insn_and_place() {
    let mut sb = Sandbox::new();
    let end = sb.data_addr() + DATA_BYTES as u64;
    let mut p = Vec::from(lddw(1, end - 4));
    p.push(ldx(BPF_W, 0, 1, 0)); // 2: last 4 bytes: fine
    p.push(ldx(BPF_DW, 0, 1, 0)); // 3: straddles the end
    p.push(exit());
    let e = run_with(p, &mut sb).unwrap_err();
    assert_eq!(e, VmError::BadRead { insn: 3, at: unnamed(DATA_BYTES as i64 - 4), len: 8 });
}

#[test]
fn null_and_wrapping_addresses_fault() {
    let e = run(vec![mov64(1, 0), ldx(BPF_B, 0, 1, 0), exit()]).unwrap_err();
    assert_eq!(e, VmError::BadRead { insn: 1, at: Place::Low(0), len: 1 });
    let mut p = Vec::from(lddw(1, u64::MAX - 2));
    p.push(ldx(BPF_DW, 0, 1, 0));
    p.push(exit());
    assert_eq!(run(p).unwrap_err(), VmError::BadRead { insn: 2, at: Place::Wild, len: 8 });
}

#[test]
fn write_to_read_only_region_faults() {
    // ctx->data (offset 0) is readable, not writable: reading works, writing is BadWrite.
    let mut sb = Sandbox::new();
    let ctx = sb.ctx_addr();
    let p = vec![ldx(BPF_DW, 0, 1, 0), st(BPF_W, 1, 0, 1), exit()];
    assert_eq!(
        run_with(p, &mut sb).unwrap_err(),
        VmError::BadWrite { insn: 1, at: sb.env(0).read.place(ctx), len: 4 }
    );
    assert_eq!(sb.ctx[0], 0x1111_0000, "the rejected store did not happen");
}

#[test]
fn stack_below_the_frame_block_faults() {
    // r10 - 4096 - 8 is below the whole stack block (through a copy of r10: the verifier
    // refuses a constant r10 offset outside the frame).
    let mut sb = Sandbox::new();
    let top = sb.stack_top();
    let p = vec![
        mov64_reg(1, 10),
        alu64_imm(BPF_ADD, 1, -4104),
        st(BPF_DW, 1, 0, 1),
        mov64(0, 0),
        exit(),
    ];
    let e = run_with(p, &mut sb).unwrap_err();
    assert_eq!(e, VmError::BadWrite { insn: 2, at: sb.env(0).read.place(top - 4104), len: 8 });
}

#[test]
fn atomics_all_ops() {
    // (imm, initial, src, memory after, src reg after, 64-bit)
    let fetch = 1;
    let cases: &[(i32, u64, u64, u64, u64, bool)] = &[
        (0x00, 5, 3, 8, 3, true),
        (fetch, 5, 3, 8, 5, true),
        (0x40, 0b1010, 0b0101, 0b1111, 0b0101, true),
        (0x40 | fetch, 0b1010, 0b0101, 0b1111, 0b1010, true),
        (0x50 | fetch, 0b1110, 0b0111, 0b0110, 0b1110, true),
        (0xa0 | fetch, 0b1110, 0b0111, 0b1001, 0b1110, true),
        (0xe1, 9, 4, 4, 9, true),
        (0x00, 0xffff_ffff, 1, 0, 1, false),
        (fetch, 0x1_ffff_ffff, 1, 0x1_0000_0000, 0xffff_ffff, false),
        (
            0xe1,
            0xaaaa_bbbb_cccc_dddd,
            0x1111_2222_3333_4444,
            0xaaaa_bbbb_3333_4444,
            0xcccc_dddd,
            false,
        ),
    ];
    for &(op, init, src, mem_after, src_after, is64) in cases {
        let mut sb = Sandbox::new();
        sb.data[0] = init;
        let data = sb.data_addr();
        let mut p = Vec::from(lddw(1, data));
        p.extend(lddw(2, src));
        p.push(atomic(if is64 { BPF_DW } else { BPF_W }, 1, 2, 0, op));
        p.push(mov64_reg(0, 2));
        p.push(exit());
        let got = run_with(p, &mut sb).unwrap();
        assert_eq!(sb.data[0], mem_after, "op {op:#x} 64={is64}");
        assert_eq!(got, src_after, "op {op:#x} 64={is64}");
    }
}

#[test]
fn cmpxchg_success_and_failure() {
    for (expected, mem, want_mem) in [(5u64, 5u64, 9u64), (4, 5, 5)] {
        let mut sb = Sandbox::new();
        sb.data[0] = mem;
        let mut p = Vec::from(lddw(1, sb.data_addr()));
        p.push(mov64(0, expected as i32));
        p.push(mov64(2, 9));
        p.push(atomic(BPF_DW, 1, 2, 0, 0xf1));
        p.push(exit());
        assert_eq!(run_with(p, &mut sb).unwrap(), mem, "r0 = old value");
        assert_eq!(sb.data[0], want_mem);
    }
    // 32-bit: compares the low halves, r0 gets the zero-extended old value.
    let mut sb = Sandbox::new();
    sb.data[0] = 0x7777_7777_0000_0005;
    let mut p = Vec::from(lddw(1, sb.data_addr()));
    p.extend(lddw(0, 0xffff_ffff_0000_0005));
    p.push(mov64(2, 9));
    p.push(atomic(BPF_W, 1, 2, 0, 0xf1));
    p.push(exit());
    assert_eq!(run_with(p, &mut sb).unwrap(), 5);
    assert_eq!(sb.data[0], 0x7777_7777_0000_0009);
}

#[test]
fn atomic_on_read_only_memory_is_bad_write() {
    let mut sb = Sandbox::new();
    let ctx = sb.ctx_addr();
    let p = vec![mov64(2, 1), atomic(BPF_DW, 1, 2, 0, 0x00), mov64(0, 0), exit()];
    assert_eq!(
        run_with(p, &mut sb).unwrap_err(),
        VmError::BadWrite { insn: 1, at: sb.env(0).read.place(ctx), len: 8 }
    );
}

#[test]
fn lddw_global_relocation() {
    let mut sb = Sandbox::new();
    sb.globals[1] = 0xfeed;
    let mut insns = Vec::from(lddw(1, 0));
    insns.push(ldx(BPF_DW, 0, 1, 0));
    insns.extend(lddw(2, 0));
    insns.push(stx(BPF_DW, 2, 0, 0)); // globals[2] = r0 (rw part)
    insns.push(exit());
    let mut prog = program(insns);
    prog.global_relocs = vec![(0, 8), (3, 16)];
    prog.globals = vec![0; 32];
    prog.globals_rw_start = 16;
    let jit = JitProgram::compile(&VerifiedProgram::new(prog).unwrap()).unwrap();
    let mut env = sb.env(10);
    assert_eq!(run_jit(&jit, &mut env, sb.ctx_addr(), sb.stack_top()), Ok(0xfeed));
    assert_eq!(sb.globals[2], 0xfeed);
}

#[test]
fn ctx_in_r1_and_frame_in_r10() {
    let mut sb = Sandbox::new();
    let p = vec![ldx(BPF_DW, 0, 1, 16), exit()];
    assert_eq!(run_with(p, &mut sb).unwrap(), 0x1111_0002);
    let top = sb.stack_top();
    assert_eq!(run_with(vec![mov64_reg(0, 10), exit()], &mut sb).unwrap(), top);
}

/// Regression: multiplying by 3, 5 or 9 is emitted as `x + (x << k)` (one `lea`); it must wrap
/// exactly as the multiply at either width, for every operand.
#[test]
fn multiply_by_two_to_the_k_plus_one_wraps_like_a_multiply() {
    for k in [3u64, 5, 9] {
        for &a in VALUES.iter().chain(&[0x5555_5555_5555_5555, 0x3333_3333]) {
            assert_eq!(alu(true, BPF_MUL, 0, a, k, false), a.wrapping_mul(k), "{a:#x} * {k}");
            let want = u64::from((a as u32).wrapping_mul(k as u32));
            assert_eq!(alu(false, BPF_MUL, 0, a, k, false), want, "w: {a:#x} * {k}");
        }
    }
}
