//! Shared by the run targets: a sandbox of regions and a comparison of engine outcomes.

use storefn_vm::insn::Insn;
use storefn_vm::{Region, RegionSet};
use storefn_vm::FaultInfo;
use storefn_vm::limits::STACK_BYTES;
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
        budget_env(read, write)
    }

    pub fn ctx_addr(&self) -> u64 {
        self.ctx.as_ptr() as u64
    }

    pub fn stack_top(&self) -> u64 {
        stack_top(&self.stack)
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

/// Words around the xrp `data` and `scratch` buffers that no region grants: a JIT access a
/// wrong range proof let through lands there and reads or writes what the interpreter faults on.
const XRP_GUARD_WORDS: usize = 2048;

/// An xrp invocation's memory, as `Instance::run_xrp` lays it out: the context (its `data` and
/// `scratch` fields pointing at exactly `XRP_DATA_VIEW_BYTES` / `XRP_SCRATCH_BYTES` of granted
/// memory, each inside a guard), read-only data, read-write scratch, the stack.
#[derive(Clone)]
pub struct XrpSandbox {
    pub ctx: Vec<u64>,
    pub data: Vec<u64>,
    pub scratch: Vec<u64>,
    pub stack: Vec<u64>,
}

impl XrpSandbox {
    pub fn new() -> Self {
        use storefn_vm::xrp::{XRP_CTX_BYTES, XRP_DATA_VIEW_BYTES, XRP_OFF_DATA, XRP_OFF_SCRATCH};
        let words = |n: usize, salt: u64| -> Vec<u64> {
            (0..(2 * XRP_GUARD_WORDS + n / 8) as u64)
                .map(|i| (i ^ salt).wrapping_mul(0x9e37_79b9_7f4a_7c15))
                .collect()
        };
        let mut s = Self {
            ctx: vec![0; XRP_CTX_BYTES / 8],
            data: words(XRP_DATA_VIEW_BYTES, 1),
            scratch: words(storefn_vm::xrp::XRP_SCRATCH_BYTES, 2),
            stack: vec![0; STACK_BYTES / 8],
        };
        s.ctx[XRP_OFF_DATA / 8] = s.data_region().start;
        s.ctx[XRP_OFF_SCRATCH / 8] = s.scratch_region().start;
        s
    }

    fn data_region(&self) -> Region {
        let start = self.data.as_ptr() as u64 + 8 * XRP_GUARD_WORDS as u64;
        Region { start, end: start + storefn_vm::xrp::XRP_DATA_VIEW_BYTES as u64 }
    }

    fn scratch_region(&self) -> Region {
        let start = self.scratch.as_ptr() as u64 + 8 * XRP_GUARD_WORDS as u64;
        Region { start, end: start + storefn_vm::xrp::XRP_SCRATCH_BYTES as u64 }
    }

    pub fn reset(&mut self, from: &XrpSandbox) {
        self.ctx.copy_from_slice(&from.ctx);
        self.data.copy_from_slice(&from.data);
        self.scratch.copy_from_slice(&from.scratch);
        self.stack.copy_from_slice(&from.stack);
    }

    /// The regions `Instance::run_xrp` grants (the JIT's run contract for xrp programs).
    pub fn env(&self) -> RunEnv {
        use storefn_vm::xrp::{XRP_OFF_DONE, XRP_OFF_NEXT_ADDR, XRP_OFF_SCRATCH, XRP_OFF_SLOT};
        let c = self.ctx.as_ptr() as u64;
        let mut read = RegionSet::default();
        for r in [region(&self.ctx), self.data_region(), self.scratch_region(), region(&self.stack)]
        {
            read.push(r);
        }
        let mut write = RegionSet::default();
        for r in [
            Region { start: c + XRP_OFF_DONE as u64, end: c + XRP_OFF_SLOT as u64 },
            Region { start: c + XRP_OFF_NEXT_ADDR as u64, end: c + XRP_OFF_SCRATCH as u64 },
            self.scratch_region(),
            region(&self.stack),
        ] {
            write.push(r);
        }
        budget_env(read, write)
    }

    pub fn ctx_addr(&self) -> u64 {
        self.ctx.as_ptr() as u64
    }

    pub fn stack_top(&self) -> u64 {
        stack_top(&self.stack)
    }
}

/// An environment over `read` / `write` with the fuzz budget, no globals, no host.
fn budget_env(read: RegionSet, write: RegionSet) -> RunEnv {
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

fn stack_top(stack: &[u64]) -> u64 {
    stack.as_ptr() as u64 + STACK_BYTES as u64
}

/// An xrp program: a prologue (r2 = ctx->data, r3 = ctx->scratch, every other register
/// written) so arbitrary bytes after it index data and scratch, then the fuzzed instructions.
pub fn xrp_program(bytes: &[u8]) -> Program {
    use storefn_vm::insn::{BPF_ALU64, BPF_DW, BPF_LDX, BPF_MEM, BPF_MOV};
    let ldx = |dst, off| Insn { op: BPF_LDX | BPF_MEM | BPF_DW, dst, src: 1, off, imm: 0 };
    let mut insns = vec![ldx(2, 0), ldx(3, 272)];
    for r in [0u8, 4, 5, 6, 7, 8, 9] {
        insns.push(Insn { op: BPF_ALU64 | BPF_MOV, dst: r, src: 0, off: 0, imm: 0 });
    }
    insns.extend(bytes.chunks_exact(8).map(|c| Insn::decode(c.try_into().unwrap())));
    Program { prog_type: ProgType::Xrp, insns, ..program(&[]) }
}

/// What an engine did on an [`XrpSandbox`].
#[derive(Debug, PartialEq, Eq)]
pub struct XrpOutcome {
    pub result: Result<u64, VmError>,
    pub ctx: Vec<u64>,
    pub scratch: Vec<u64>,
    pub stack: Vec<u64>,
    pub left: u64,
}

pub fn xrp_outcome(
    sb: &mut XrpSandbox,
    initial: &XrpSandbox,
    run: impl FnOnce(&mut RunEnv, u64, u64) -> Result<u64, VmError>,
) -> XrpOutcome {
    let mut env = sb.env();
    let result = run(&mut env, sb.ctx_addr(), sb.stack_top());
    let out = XrpOutcome {
        result,
        ctx: sb.ctx.clone(),
        scratch: sb.scratch.clone(),
        stack: sb.stack.clone(),
        left: env.insns_left,
    };
    // Data is read-only: a write there (through a wrong proof) shows up as a difference too.
    assert_eq!(sb.data, initial.data, "data changed");
    sb.reset(initial);
    out
}
