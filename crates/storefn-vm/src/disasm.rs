//! Disassembly in the style of `llvm-objdump -d` for `storefn prog dump`.

use crate::insn::{
    Insn, BPF_ALU, BPF_ALU64, BPF_ATOMIC, BPF_CALL, BPF_END, BPF_EXIT, BPF_JA, BPF_JMP, BPF_JMP32,
    BPF_LD, BPF_LDX, BPF_MEM, BPF_MEMSX, BPF_MOV, BPF_NEG, BPF_PSEUDO_CALL, BPF_ST, BPF_X,
};
use crate::interp::{atomic, size_bytes};
use crate::program::Program;

const ALU_OPS: [&str; 14] =
    ["+=", "-=", "*=", "/=", "|=", "&=", "<<=", ">>=", "neg", "%=", "^=", "=", "s>>=", "end"];
const JMP_OPS: [&str; 14] =
    ["ja", "==", ">", ">=", "&", "!=", "s>", "s>=", "call", "exit", "<", "<=", "s<", "s<="];

/// One line per instruction: `(slot index, text)`; an `lddw` is one line covering two slots.
#[must_use]
pub fn disassemble(prog: &Program) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut pc = 0;
    while pc < prog.insns.len() {
        let i = prog.insns[pc];
        let mut text = insn_text(&prog.insns, pc);
        if let Ok(k) = prog.global_relocs.binary_search_by_key(&pc, |r| r.0) {
            text.push_str(&format!(" ; globals+{:#x}", prog.global_relocs[k].1));
        }
        out.push((pc, text));
        pc += if i.is_lddw() { 2 } else { 1 };
    }
    out
}

fn size_name(op: u8) -> &'static str {
    match size_bytes(op) {
        1 => "u8",
        2 => "u16",
        4 => "u32",
        _ => "u64",
    }
}

/// Text of the instruction at `pc` (reads the next slot for `lddw`).
#[must_use]
pub fn insn_text(insns: &[Insn], pc: usize) -> String {
    let i = insns[pc];
    let (d, s, off, imm) = (i.dst, i.src, i.off, i.imm);
    let bad = || format!("<invalid {:#04x} dst={d} src={s} off={off} imm={imm}>", i.op);
    match i.class() {
        BPF_ALU | BPF_ALU64 => {
            let r = if i.class() == BPF_ALU64 { 'r' } else { 'w' };
            let op = usize::from(i.op >> 4);
            let Some(name) = ALU_OPS.get(op) else { return bad() };
            let src = if i.op & BPF_X != 0 { format!("{r}{s}") } else { format!("{imm:#x}") };
            match i.op & 0xf0 {
                BPF_NEG => format!("{r}{d} = -{r}{d}"),
                BPF_END if i.class() == BPF_ALU64 => format!("r{d} = bswap{imm} r{d}"),
                BPF_END if i.op & BPF_X != 0 => format!("r{d} = be{imm} r{d}"),
                BPF_END => format!("r{d} = le{imm} r{d}"),
                BPF_MOV if off != 0 => format!("{r}{d} = (s{off}){r}{s}"),
                _ if off == 1 => format!("{r}{d} s{name} {src}"),
                _ => format!("{r}{d} {name} {src}"),
            }
        }
        BPF_LD if i.is_lddw() => {
            let hi = insns.get(pc + 1).map_or(0, |h| h.imm);
            let v = u64::from(imm as u32) | (u64::from(hi as u32) << 32);
            format!("r{d} = {v:#x} ll")
        }
        BPF_LDX => {
            let sx = if i.op & 0xe0 == BPF_MEMSX { "s" } else { "" };
            format!("r{d} = *({sx}{} *)(r{s} {off:+})", size_name(i.op))
        }
        BPF_ST if i.op & 0xe0 == BPF_MEM => {
            format!("*({} *)(r{d} {off:+}) = {imm:#x}", size_name(i.op))
        }
        crate::insn::BPF_STX => match i.op & 0xe0 {
            BPF_MEM => format!("*({} *)(r{d} {off:+}) = r{s}", size_name(i.op)),
            BPF_ATOMIC => {
                let name = match imm {
                    atomic::XCHG => "xchg",
                    atomic::CMPXCHG => "cmpxchg",
                    x => match x & !atomic::FETCH {
                        atomic::ADD => "add",
                        atomic::OR => "or",
                        atomic::AND => "and",
                        atomic::XOR => "xor",
                        _ => "?",
                    },
                };
                let fetch = if imm & atomic::FETCH != 0 { "fetch_" } else { "" };
                format!("lock {fetch}{name} *({} *)(r{d} {off:+}), r{s}", size_name(i.op))
            }
            _ => bad(),
        },
        BPF_JMP | BPF_JMP32 => {
            let r = if i.class() == BPF_JMP { 'r' } else { 'w' };
            let Some(name) = JMP_OPS.get(usize::from(i.op >> 4)) else { return bad() };
            match i.op & 0xf0 {
                BPF_JA if i.class() == BPF_JMP32 => format!("gotol {imm:+}"),
                BPF_JA => format!("goto {off:+}"),
                BPF_CALL if s == BPF_PSEUDO_CALL => format!("call pc{imm:+}"),
                BPF_CALL => format!("call {imm}"),
                BPF_EXIT => "exit".to_string(),
                _ => {
                    let src =
                        if i.op & BPF_X != 0 { format!("{r}{s}") } else { format!("{imm:#x}") };
                    format!("if {r}{d} {name} {src} goto {off:+}")
                }
            }
        }
        _ => bad(),
    }
}
