//! The instruction assembler the interpreter/verifier tests (common) and the JIT tests
//! (jit_support) share; each re-exports it.
#![allow(dead_code)]

use storefn_vm::insn::*;

pub fn ins(op: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn { op, dst, src, off, imm }
}
pub fn alu64_imm(op: u8, dst: u8, imm: i32) -> Insn {
    ins(BPF_ALU64 | op | BPF_K, dst, 0, 0, imm)
}
pub fn alu64_reg(op: u8, dst: u8, src: u8) -> Insn {
    ins(BPF_ALU64 | op | BPF_X, dst, src, 0, 0)
}
pub fn alu32_imm(op: u8, dst: u8, imm: i32) -> Insn {
    ins(BPF_ALU | op | BPF_K, dst, 0, 0, imm)
}
pub fn alu32_reg(op: u8, dst: u8, src: u8) -> Insn {
    ins(BPF_ALU | op | BPF_X, dst, src, 0, 0)
}
pub fn mov64_reg(dst: u8, src: u8) -> Insn {
    ins(BPF_ALU64 | BPF_MOV | BPF_X, dst, src, 0, 0)
}
/// `lddw dst, v`: two slots.
pub fn lddw(dst: u8, v: u64) -> [Insn; 2] {
    [
        ins(BPF_LD | BPF_IMM | BPF_DW, dst, 0, 0, v as u32 as i32),
        ins(0, 0, 0, 0, (v >> 32) as u32 as i32),
    ]
}
pub fn jmp_imm(op: u8, dst: u8, imm: i32, off: i16) -> Insn {
    ins(BPF_JMP | op | BPF_K, dst, 0, off, imm)
}
pub fn jmp_reg(op: u8, dst: u8, src: u8, off: i16) -> Insn {
    ins(BPF_JMP | op | BPF_X, dst, src, off, 0)
}
pub fn ja(off: i16) -> Insn {
    ins(BPF_JMP | BPF_JA, 0, 0, off, 0)
}
pub fn ldx(size: u8, dst: u8, src: u8, off: i16) -> Insn {
    ins(BPF_LDX | BPF_MEM | size, dst, src, off, 0)
}
pub fn stx(size: u8, dst: u8, src: u8, off: i16) -> Insn {
    ins(BPF_STX | BPF_MEM | size, dst, src, off, 0)
}
pub fn st(size: u8, dst: u8, off: i16, imm: i32) -> Insn {
    ins(BPF_ST | BPF_MEM | size, dst, 0, off, imm)
}
pub fn call_helper(id: i32) -> Insn {
    ins(BPF_JMP | BPF_CALL, 0, 0, 0, id)
}
pub fn exit() -> Insn {
    ins(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)
}
