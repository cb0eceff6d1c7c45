//! Compile- and verify-time scaling: generated xrp programs of a given size in each shape the
//! bench's workloads stand for (straight-line ALU, loads from the data block, forward
//! branches, small counted loops, BPF-to-BPF calls, loads through pointers the verifier
//! cannot bound). `storefn prog bench --shapes N` times them; the tests check that time grows
//! about linearly with size.

use crate::insn::*;
use crate::jit::JitProgram;
use crate::{ProgType, Program, VerifiedProgram};

/// The shapes, by name.
pub const SHAPES: [&str; 6] = ["straight", "loads", "branchy", "loops", "calls", "unproved"];

fn i(op: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn { op, dst, src, off, imm }
}

fn alu(op: u8, dst: u8, imm: i32) -> Insn {
    i(BPF_ALU64 | op | BPF_K, dst, 0, 0, imm)
}

fn exit() -> Insn {
    i(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)
}

/// Loads of `r2 = ctx->data`, `r3 = ctx->scratch`, and `r0 = 0`.
fn prologue() -> Vec<Insn> {
    vec![
        i(BPF_LDX | BPF_MEM | BPF_DW, 2, 1, 0, 0),
        i(BPF_LDX | BPF_MEM | BPF_DW, 3, 1, 272, 0),
        alu(BPF_MOV, 0, 0),
    ]
}

/// A verifiable program of `shape` with about `n` instruction slots (`None`: unknown shape).
#[must_use]
pub fn program(shape: &str, n: usize) -> Option<Program> {
    let mut p = prologue();
    let body = n.saturating_sub(p.len() + 1);
    match shape {
        "straight" => {
            (0..body)
                .for_each(|k| p.push(alu([BPF_ADD, BPF_XOR, BPF_MUL][k % 3], 0, k as i32 | 1)));
        }
        "loads" => (0..body / 2).for_each(|k| {
            p.push(i(BPF_LDX | BPF_MEM | BPF_DW, 4, 2, ((k * 8) % 4096) as i16, 0));
            p.push(i(BPF_ALU64 | BPF_ADD | BPF_X, 0, 4, 0, 0));
        }),
        "branchy" => (0..body / 2).for_each(|k| {
            p.push(i(BPF_JMP | BPF_JGT | BPF_K, 0, 0, 1, k as i32));
            p.push(alu(BPF_ADD, 0, 3));
        }),
        "loops" => (0..body / 4).for_each(|k| {
            // r4 = 0; L: r0 += r4; r4 += 1; if r4 < 4 + k % 8 goto L
            p.push(alu(BPF_MOV, 4, 0));
            p.push(i(BPF_ALU64 | BPF_ADD | BPF_X, 0, 4, 0, 0));
            p.push(alu(BPF_ADD, 4, 1));
            p.push(i(BPF_JMP | BPF_JLT | BPF_K, 4, 0, -3, 4 + (k % 8) as i32));
        }),
        "calls" => return Some(calls(n)),
        "unproved" => (0..body / 3).for_each(|k| {
            // r4 = scratch[0] (a value the verifier cannot bound) + data: every load checked.
            p.push(i(BPF_LDX | BPF_MEM | BPF_DW, 4, 3, 0, 0));
            p.push(i(BPF_ALU64 | BPF_ADD | BPF_X, 4, 2, 0, 0));
            p.push(i(BPF_LDX | BPF_MEM | BPF_DW, 0, 4, ((k * 8) % 4096) as i16, 0));
        }),
        _ => return None,
    }
    p.push(exit());
    Some(xrp(p))
}

/// `main` calls each of `n / 16` functions of 15 ALU slots and an exit.
fn calls(n: usize) -> Program {
    const FN_SLOTS: usize = 16;
    let fns = (n / (FN_SLOTS + 1)).max(1);
    let mut p = prologue();
    let main_len = p.len() + fns + 1;
    for f in 0..fns {
        let pc = p.len();
        let target = main_len + f * FN_SLOTS;
        p.push(i(BPF_JMP | BPF_CALL, 0, BPF_PSEUDO_CALL, 0, (target - pc - 1) as i32));
    }
    p.push(exit());
    for f in 0..fns {
        p.push(alu(BPF_MOV, 0, f as i32));
        (1..FN_SLOTS - 1).for_each(|k| p.push(alu([BPF_ADD, BPF_XOR][k % 2], 0, k as i32)));
        p.push(exit());
    }
    xrp(p)
}

fn xrp(insns: Vec<Insn>) -> Program {
    Program {
        name: "shape".into(),
        prog_type: ProgType::Xrp,
        insns,
        globals: Vec::new(),
        globals_rw_start: 0,
        global_relocs: Vec::new(),
    }
}

/// One shape's figures: medians of `samples` verifications and compiles, and the slowest
/// compile.
#[derive(Debug, Clone, PartialEq)]
pub struct ShapeTime {
    pub shape: &'static str,
    pub insns: usize,
    pub verify_us: f64,
    pub compile_us: f64,
    pub compile_max_us: f64,
}

/// Times verifying and compiling each shape at `n` slots.
///
/// # Errors
/// A generated program fails to verify or compile (a bug here, reported, not hidden).
pub fn time_shapes(n: usize, samples: usize) -> Result<Vec<ShapeTime>, String> {
    SHAPES
        .iter()
        .map(|&shape| {
            let prog = program(shape, n).expect("a known shape");
            let insns = prog.insns.len();
            let verified =
                VerifiedProgram::new(prog.clone()).map_err(|e| format!("{shape}: {e}"))?;
            let verify_us = super::time_us(shape, samples, || VerifiedProgram::new(prog.clone()))?;
            let mut compiles =
                super::samples_us(shape, samples, || JitProgram::compile(&verified))?;
            let compile_max_us = compiles.iter().copied().fold(0.0, f64::max);
            let compile_us = super::median(&mut compiles);
            Ok(ShapeTime { shape, insns, verify_us, compile_us, compile_max_us })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Engine, Instance, XrpCtx};

    /// 300 slots compile in Cranelift's optimising tier, 4,096 in its quick tier (the JIT's
    /// `QUICK_TIER_SLOTS`): both must agree with the interpreter.
    #[test]
    fn every_shape_verifies_compiles_and_runs_the_same_on_both_engines() {
        for (shape, n) in SHAPES.iter().flat_map(|&s| [(s, 300), (s, 4096)]) {
            let prog =
                std::sync::Arc::new(VerifiedProgram::new(program(shape, n).unwrap()).unwrap());
            let (data, mut scratch) = (vec![1u8; 4096], vec![0u8; 4096]);
            let mut out = Vec::new();
            for engine in [Engine::Interp, Engine::Jit] {
                let mut inst = Instance::new(std::sync::Arc::clone(&prog), engine).unwrap();
                out.push(inst.run_xrp(&mut XrpCtx::default(), &data, &mut scratch));
            }
            assert_eq!(out[0], out[1], "{shape} at {n} slots");
            assert!(out[0].is_ok(), "{shape}: {:?}", out[0]);
        }
    }
}
