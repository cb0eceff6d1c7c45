//! Test support: a tiny assembler for raw instruction vectors and runners.
#![allow(dead_code)]

use std::sync::Arc;

use storefn_vm::insn::*;
use storefn_vm::limits::DEFAULT_INSN_BUDGET;
use storefn_vm::{Engine, Instance, Place, ProgType, Program, VerifiedProgram, VmError, XrpCtx};

#[path = "../asm/mod.rs"]
mod asm;
pub use asm::ins as i;
pub use asm::*;

pub fn mov64_imm(dst: u8, imm: i32) -> Insn {
    i(BPF_ALU64 | BPF_MOV | BPF_K, dst, 0, 0, imm)
}
pub fn call_pc(rel: i32) -> Insn {
    i(BPF_JMP | BPF_CALL, 0, BPF_PSEUDO_CALL, 0, rel)
}

/// Flattens pieces (single insns and lddw pairs) into one vector.
#[macro_export]
macro_rules! asm {
    ($($x:expr),* $(,)?) => {{
        let mut v: Vec<storefn_vm::insn::Insn> = Vec::new();
        $( common::Piece::push($x, &mut v); )*
        v
    }};
}

pub trait Piece {
    fn push(self, v: &mut Vec<Insn>);
}
impl Piece for Insn {
    fn push(self, v: &mut Vec<Insn>) {
        v.push(self);
    }
}
impl Piece for [Insn; 2] {
    fn push(self, v: &mut Vec<Insn>) {
        v.extend_from_slice(&self);
    }
}

pub fn program(insns: Vec<Insn>, prog_type: ProgType) -> Program {
    Program {
        name: "test".into(),
        prog_type,
        insns,
        globals: Vec::new(),
        globals_rw_start: 0,
        global_relocs: Vec::new(),
    }
}

/// Verifies and runs an xrp program once on the interpreter with a zeroed 4 KiB data block
/// and scratch.
pub fn run_xrp(insns: Vec<Insn>) -> Result<u64, VmError> {
    run_with_budget(program(insns, ProgType::Xrp), DEFAULT_INSN_BUDGET)
}

/// Verifies `prog` (panics if rejected) and runs it once on the interpreter with `budget`.
pub fn run_with_budget(prog: Program, budget: u64) -> Result<u64, VmError> {
    run_on(prog, budget, Engine::Interp)
}

/// [`run_with_budget`] on either engine.
pub fn run_on(prog: Program, budget: u64, engine: Engine) -> Result<u64, VmError> {
    let prog = VerifiedProgram::new(prog).expect("test program must verify");
    let mut inst = Instance::new(Arc::new(prog), engine).unwrap();
    inst.set_insn_budget(budget);
    let data = vec![0u8; 4096];
    let mut scratch = vec![0u8; 4096];
    let mut ctx = XrpCtx::default();
    inst.run_xrp(&mut ctx, &data, &mut scratch)
}

/// The verifier's message for a program, or "ok".
pub fn verdict(insns: Vec<Insn>, prog_type: ProgType) -> String {
    match storefn_vm::verify(&program(insns, prog_type)) {
        Ok(_) => "ok".into(),
        Err(e) => e.to_string(),
    }
}

/// A result with its fault's place left out, for comparing two engines' runs: each instance
/// has its own stack, so the region nearest a wild address (which names the place) differs.
pub fn without_place(r: Result<u64, VmError>) -> Result<u64, VmError> {
    match r {
        Err(VmError::BadRead { insn, len, .. }) => {
            Err(VmError::BadRead { insn, at: Place::Wild, len })
        }
        Err(VmError::BadWrite { insn, len, .. }) => {
            Err(VmError::BadWrite { insn, at: Place::Wild, len })
        }
        r => r,
    }
}
