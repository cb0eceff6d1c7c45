//! Builders shared by the crate's unit tests.

use crate::insn::Insn;
use crate::mem::{Region, RegionSet};
use crate::program::{FaultInfo, ProgType, Program, RunEnv, STACK_BYTES};

pub(crate) fn ins(op: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn { op, dst, src, off, imm }
}

/// An xrp program of `insns`, no globals.
pub(crate) fn xrp_program(insns: Vec<Insn>) -> Program {
    Program {
        name: "t".into(),
        prog_type: ProgType::Xrp,
        insns,
        globals: Vec::new(),
        globals_rw_start: 0,
        global_relocs: Vec::new(),
    }
}

/// An env whose only region (read and write) is the [`STACK_BYTES`] below `stack_top`, with
/// `budget` instructions and no host state.
pub(crate) fn stack_env(stack_top: u64, budget: u64) -> RunEnv {
    let mut set = RegionSet::default();
    set.push(Region { start: stack_top - STACK_BYTES as u64, end: stack_top });
    RunEnv {
        read: set,
        write: set,
        globals_base: 0,
        insns_left: budget,
        insn_budget: budget,
        fault: FaultInfo::default(),
        host: std::ptr::null_mut(),
    }
}
