//! A loaded, linked program and the per-invocation run environment.
//!
//! Shared by the loader (which builds [`Program`]), the verifier (which checks it), the
//! interpreter and the JIT (which run it against a [`RunEnv`]).

use crate::insn::Insn;
use crate::mem::RegionSet;

/// Frames a program may nest (entry + BPF-to-BPF calls).
pub const MAX_CALL_DEPTH: usize = 8;
/// Stack bytes per frame (eBPF's 512).
pub const STACK_FRAME_BYTES: usize = 512;
/// One stack block serves every frame; frame k's r10 is `stack_top - k * STACK_FRAME_BYTES`.
pub const STACK_BYTES: usize = MAX_CALL_DEPTH * STACK_FRAME_BYTES;
/// Instruction slots a program may have after linking.
pub const MAX_INSNS: usize = 65_536;
/// Default instruction budget per invocation: every executed instruction costs one (charged
/// per basic block on entry, calls included), helpers cost what [`crate::helpers`] charges.
/// Chosen so the slowest verified program shape (deep call fan-outs, where every instruction
/// is a call) stops within about 10 ms on this machine's JIT (docs/design/vm.md, "Budget").
pub const DEFAULT_INSN_BUDGET: u64 = 1 << 20;

/// Extra instructions a λ invocation may execute per byte of its input, on top of the
/// instance's budget. A λ function runs once over its whole range (λ-IO), so its work grows
/// with the range the caller asked for (a 200 KiB knn range needs ~6 per byte, grep ~10); the
/// bound stays linear in that request (64 MiB, the largest λ range, allows ~4 G instructions:
/// seconds, not forever).
pub const LAMBDA_INSNS_PER_INPUT_BYTE: u64 = 64;
/// Extra instructions per byte of a λ invocation's output buffer: an expanding function
/// (bitmap's run-length decode, ~32x) does its work per output byte, not per input byte.
pub const LAMBDA_INSNS_PER_OUTPUT_BYTE: u64 = 8;

/// What a program is for: fixes its context layout, region rights and helper table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProgType {
    /// `struct bpf_xrp` (crate::xrp::XrpCtx): runs on each I/O completion of a chain.
    Xrp,
    /// λ-IO `struct context` (crate::xrp::LambdaCtx): runs over an input buffer into an output.
    Lambda,
    /// DDS offload functions (crate::offload::OffloadCtx): pred, func, cache, invalidate.
    Offload,
}

/// A program after loading and linking: the entry function first, subprograms appended.
#[derive(Debug, Clone)]
pub struct Program {
    /// Section or symbol it was loaded from, for messages.
    pub name: String,
    pub prog_type: ProgType,
    /// Linked instruction slots. BPF-to-BPF calls are `call` with src = 1 and a pc-relative
    /// `imm` into this same vector; helper calls have src = 0 and the helper id in `imm`.
    pub insns: Vec<Insn>,
    /// Image of the program's globals: `.rodata*` first (read-only), then `.data`, `.bss`.
    pub globals: Vec<u8>,
    /// `globals[..globals_rw_start]` is read-only, `globals[globals_rw_start..]` writable.
    pub globals_rw_start: usize,
    /// `lddw` slots that load a global's address: (insn index, byte offset into `globals`).
    /// At run time the register receives `RunEnv::globals_base + offset`.
    pub global_relocs: Vec<(usize, u64)>,
}

/// Kinds of run-time fault an engine records in [`RunEnv::fault`].
pub mod fault {
    pub const NONE: u32 = 0;
    pub const BAD_READ: u32 = 1;
    pub const BAD_WRITE: u32 = 2;
    pub const BUDGET: u32 = 3;
    pub const HELPER: u32 = 4;
    pub const CALL_DEPTH: u32 = 5;
}

/// Where an engine reports a fault without unwinding (the JIT cannot return a Rust `Result`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct FaultInfo {
    pub kind: u32,
    pub insn: u32,
    pub addr: u64,
    pub len: u64,
}

/// Everything one invocation may touch, in a fixed `repr(C)` layout the JIT addresses by offset.
#[repr(C)]
#[derive(Debug)]
pub struct RunEnv {
    pub read: RegionSet,
    pub write: RegionSet,
    pub globals_base: u64,
    /// Instructions this invocation may still execute (both engines charge a basic block's
    /// length on entry and abort when it does not fit).
    pub insns_left: u64,
    /// The invocation's whole budget, for the error message.
    pub insn_budget: u64,
    pub fault: FaultInfo,
    /// Opaque host state for helpers (trace log, ...); owned by the instance.
    pub host: *mut std::ffi::c_void,
}
