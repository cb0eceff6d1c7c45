//! Shared by the run targets: a sandbox of regions and a comparison of engine outcomes.

use storefn_vm::insn::Insn;
use storefn_vm::mem::{Region, RegionSet};
use storefn_vm::program::{FaultInfo, STACK_BYTES};
use storefn_vm::{ProgType, Program, RunEnv, VmError};

/// Instructions per fuzzed invocation: small, so loops end fast.
pub const FUZZ_BUDGET: u64 = 2_000;
/// Words of the read-only context and of the read-write data region.
const CTX_WORDS: usize = 8;
const DATA_WORDS: usize = 64;

/// Cloning copies the contents (pointers in `ctx` still point at the original's buffers), which
/// is what `reset` needs: the same addresses, the initial bytes.
#[derive(Clone)]
pub struct Sandbox {
    pub ctx: Vec<u64>,
    pub data: Vec<u64>,
    pub stack: Vec<u64>,
}

fn region(v: &[u64]) -> Region {
    let start = v.as_ptr() as u64;
    Region { start, end: start + 8 * v.len() as u64 }
}

impl Sandbox {
    pub fn new() -> Self {
        let mut s = Self {
            ctx: vec![0; CTX_WORDS],
            data: (0..DATA_WORDS as u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15)).collect(),
            stack: vec![0; STACK_BYTES / 8],
        };
        // A λ-style context: buf_o = buf_i = data, size_i = its length.
        s.ctx[0] = s.data.as_ptr() as u64;
        s.ctx[1] = s.data.as_ptr() as u64;
        s.ctx[2] = 8 * DATA_WORDS as u64;
        s
    }

    pub fn reset(&mut self, from: &Sandbox) {
        self.ctx.copy_from_slice(&from.ctx);
        self.data.copy_from_slice(&from.data);
        self.stack.copy_from_slice(&from.stack);
    }

    pub fn env(&self) -> RunEnv {
        let mut read = RegionSet::default();
        read.push(region(&self.ctx));
        read.push(region(&self.data));
        read.push(region(&self.stack));
        let mut write = RegionSet::default();
        write.push(region(&self.data));
        write.push(region(&self.stack));
        RunEnv {
            read,
            write,
            globals_base: 0,
            insns_left: FUZZ_BUDGET,
            insn_budget: FUZZ_BUDGET,
            fault: FaultInfo::default(),
            host: std::ptr::null_mut(),
        }
    }

    pub fn ctx_addr(&self) -> u64 {
        self.ctx.as_ptr() as u64
    }

    pub fn stack_top(&self) -> u64 {
        self.stack.as_ptr() as u64 + STACK_BYTES as u64
    }
}

pub fn program(bytes: &[u8]) -> Program {
    let insns: Vec<Insn> =
        bytes.chunks_exact(8).map(|c| Insn::decode(c.try_into().unwrap())).collect();
    Program {
        name: "fuzz".into(),
        prog_type: ProgType::Lambda,
        insns,
        globals: Vec::new(),
        globals_rw_start: 0,
        global_relocs: Vec::new(),
    }
}

/// What an engine did: result, memory after, instructions left of the budget.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    pub result: Result<u64, VmError>,
    pub data: Vec<u64>,
    pub stack: Vec<u64>,
    pub left: u64,
}

pub fn outcome(
    sb: &mut Sandbox,
    initial: &Sandbox,
    run: impl FnOnce(&mut RunEnv, u64, u64) -> Result<u64, VmError>,
) -> Outcome {
    let mut env = sb.env();
    let result = run(&mut env, sb.ctx_addr(), sb.stack_top());
    let out =
        Outcome { result, data: sb.data.clone(), stack: sb.stack.clone(), left: env.insns_left };
    sb.reset(initial);
    out
}
