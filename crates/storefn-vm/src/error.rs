//! Run-time errors: what aborted an invocation, with the instruction index.

/// Why an invocation was aborted. Every variant names the instruction (`insn #N`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VmError {
    #[error("insn #{insn}: read of {len} bytes at {addr:#x} outside the program's regions")]
    BadRead { insn: usize, addr: u64, len: u64 },
    #[error(
        "insn #{insn}: write of {len} bytes at {addr:#x} outside the program's writable regions"
    )]
    BadWrite { insn: usize, addr: u64, len: u64 },
    /// The basic block starting at `insn` (or the helper called there) did not fit in what was
    /// left of the invocation's instruction budget of `budget`.
    #[error("insn #{insn}: instruction budget exhausted ({budget} instructions)")]
    BudgetExhausted { insn: usize, budget: u64 },
    #[error("insn #{insn}: call depth exceeds {max}")]
    CallDepth { insn: usize, max: usize },
    #[error("insn #{insn}: helper {helper}: {reason}")]
    Helper { insn: usize, helper: u32, reason: String },
    /// Only reachable by running a program the verifier would reject (the interpreter stays
    /// safe on any input).
    #[error("insn #{insn}: invalid instruction: {reason}")]
    Invalid { insn: usize, reason: &'static str },
}
