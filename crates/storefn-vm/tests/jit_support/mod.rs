//! Shared by the jit_* tests: a tiny assembler and a sandbox (regions + RunEnv).
#![allow(dead_code, unused_imports)]

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use storefn_vm::insn::*;
pub use storefn_vm::limits::DEFAULT_INSN_BUDGET;
use storefn_vm::limits::STACK_BYTES;
use storefn_vm::xrp::{XRP_OFF_DATA, XRP_OFF_DONE, XRP_OFF_SCRATCH};
use storefn_vm::FaultInfo;
use storefn_vm::JitProgram;
use storefn_vm::{ProgType, Program, RunEnv, VerifiedProgram, VmError};
use storefn_vm::{Region, RegionSet};

#[path = "../asm/mod.rs"]
mod asm;
pub use asm::*;

pub fn mov64(dst: u8, imm: i32) -> Insn {
    alu64_imm(BPF_MOV, dst, imm)
}
pub fn jmp32_imm(op: u8, dst: u8, imm: i32, off: i16) -> Insn {
    ins(BPF_JMP32 | op | BPF_K, dst, 0, off, imm)
}
pub fn jmp32_reg(op: u8, dst: u8, src: u8, off: i16) -> Insn {
    ins(BPF_JMP32 | op | BPF_X, dst, src, off, 0)
}
pub fn ldsx(size: u8, dst: u8, src: u8, off: i16) -> Insn {
    ins(BPF_LDX | BPF_MEMSX | size, dst, src, off, 0)
}
pub fn atomic(size: u8, dst: u8, src: u8, off: i16, op: i32) -> Insn {
    ins(BPF_STX | BPF_ATOMIC | size, dst, src, off, op)
}
/// BPF-to-BPF call, `rel` = target - (pc + 1).
/// Bytes of a load/store size field (`BPF_B` .. `BPF_DW`).
pub fn size_bytes(size: u8) -> i16 {
    match size {
        BPF_B => 1,
        BPF_H => 2,
        BPF_W => 4,
        _ => 8,
    }
}

pub fn call_local(rel: i32) -> Insn {
    ins(BPF_JMP | BPF_CALL, 0, BPF_PSEUDO_CALL, 0, rel)
}

/// Builds a Program from slots (lddw pairs flattened by the caller).
pub fn program(insns: Vec<Insn>) -> Program {
    Program {
        name: "test".into(),
        prog_type: ProgType::Xrp,
        insns,
        globals: Vec::new(),
        globals_rw_start: 0,
        global_relocs: Vec::new(),
    }
}

/// [`program`], verified (panics with the verifier's message if rejected).
pub fn verified(insns: Vec<Insn>) -> VerifiedProgram {
    VerifiedProgram::new(program(insns)).unwrap_or_else(|e| panic!("test program: {e}"))
}

/// Runs `jit` once on `env` (r1 = `ctx`, r10 = `top`).
pub fn run_jit(jit: &JitProgram, env: &mut RunEnv, ctx: u64, top: u64) -> Result<u64, VmError> {
    // SAFETY: every env in these tests grants only a Sandbox's own buffers (or nothing), which
    // the test keeps alive and does not borrow during the call; `env.host` is null.
    unsafe { jit.run(env, ctx, top) }
}

/// Bytes of the read-only "context" region in tests (room for `struct bpf_xrp`).
pub const CTX_BYTES: usize = 288;
/// Bytes of the read/write data region in tests: room for an xrp `data` view and a `scratch`
/// buffer behind it (the JIT's run contract: the context's `data` and `scratch` fields point
/// at that many bytes of granted memory, see `VerifiedProgram::xrp_min_bytes`).
pub const DATA_BYTES: usize = 8192;

/// Memory one test invocation may touch: ctx (read-only), data (rw), stack (rw), plus globals.
#[derive(Debug, Clone)]
pub struct Sandbox {
    pub ctx: Vec<u64>,
    pub data: Vec<u64>,
    pub stack: Vec<u64>,
    pub globals: Vec<u64>,
    /// `globals[..globals_ro_words]` is read-only.
    pub globals_ro_words: usize,
    /// Byte range of `ctx` that is also writable (XRP's done..size fields), if any.
    pub ctx_writable: Option<(usize, usize)>,
}

impl Default for Sandbox {
    fn default() -> Self {
        Self::new()
    }
}

impl Sandbox {
    pub fn new() -> Self {
        Self {
            ctx: (0..CTX_BYTES as u64 / 8).map(|i| 0x1111_0000 + i).collect(),
            data: vec![0; DATA_BYTES / 8],
            stack: vec![0; STACK_BYTES / 8],
            globals: vec![0; 4],
            globals_ro_words: 2,
            // XRP's writable context fields (done .. size[]), as the run contract requires.
            ctx_writable: Some((XRP_OFF_DONE, XRP_OFF_SCRATCH)),
        }
    }

    pub fn ctx_addr(&self) -> u64 {
        self.ctx.as_ptr() as u64
    }
    pub fn data_addr(&self) -> u64 {
        self.data.as_ptr() as u64
    }
    pub fn stack_top(&self) -> u64 {
        self.stack.as_ptr() as u64 + STACK_BYTES as u64
    }
    pub fn data_bytes(&self) -> Vec<u8> {
        self.data.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    pub fn env(&mut self, budget: u64) -> RunEnv {
        let region = |v: &[u64]| Region::of(bytes_of(v));
        let ro = &self.globals[..self.globals_ro_words];
        let rw = &self.globals[self.globals_ro_words..];
        let mut read = RegionSet::default();
        let mut write = RegionSet::default();
        for r in [region(&self.ctx), region(&self.data), region(&self.stack), region(ro)] {
            read.push(r);
        }
        read.push(region(rw));
        write.push(region(&self.data));
        write.push(region(&self.stack));
        if let Some((from, to)) = self.ctx_writable {
            let c = region(&self.ctx);
            write.push(Region { start: c.start + from as u64, end: c.start + to as u64 });
        }
        write.push(region(rw));
        RunEnv {
            read,
            write,
            globals_base: self.globals.as_ptr() as u64,
            insns_left: budget,
            insn_budget: budget,
            fault: FaultInfo::default(),
            host: std::ptr::null_mut(),
        }
    }
}

fn bytes_of(v: &[u64]) -> &[u8] {
    // SAFETY: u64 has no padding and any byte pattern is a valid u8; length in bytes is exact.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

/// Slots of padding that put a test program past the JIT's `QUICK_TIER_SLOTS` (1,024).
pub const QUICK_TIER_PAD: usize = 1030;

/// r0 or the fault, and the budget left, of one engine (`jit` or the interpreter).
pub fn outcome(
    prog: &VerifiedProgram,
    budget: u64,
    jit: Option<&JitProgram>,
    seed: u64,
) -> (Result<u64, VmError>, u64) {
    let mut sb = Sandbox::new();
    sb.ctx[XRP_OFF_DATA / 8] = sb.data_addr();
    let mut rng = SmallRng::seed_from_u64(seed);
    for w in &mut sb.data {
        *w = rng.gen();
    }
    let mut env: RunEnv = sb.env(budget);
    let (ctx, top) = (sb.ctx_addr(), sb.stack_top());
    let result = match jit {
        Some(j) => run_jit(j, &mut env, ctx, top),
        // SAFETY: the env grants only the sandbox's own buffers, alive for the call; no host.
        None => unsafe { storefn_vm::interpret(prog, &mut env, ctx, top) },
    };
    (result, env.insns_left)
}

/// One run of `prog` by the JIT and the interpreter on the same random data, with the whole
/// budget or one that runs out before or inside the loop: asserts they agree, and returns
/// whether the run faulted on a read and whether it ran out of budget.
pub fn compare_once(
    prog: &VerifiedProgram,
    jit: &JitProgram,
    rng: &mut SmallRng,
    what: &str,
) -> (bool, bool) {
    let budget = match rng.gen_range(0..4) {
        0 => rng.gen_range(1..64),
        1 => rng.gen_range(1..8 * 1024),
        _ => DEFAULT_INSN_BUDGET,
    };
    let seed = rng.gen();
    let j = outcome(prog, budget, Some(jit), seed);
    let i = outcome(prog, budget, None, seed);
    assert_eq!(j, i, "{what}, budget {budget}");
    (
        matches!(i.0, Err(VmError::BadRead { .. })),
        matches!(i.0, Err(VmError::BudgetExhausted { .. })),
    )
}
