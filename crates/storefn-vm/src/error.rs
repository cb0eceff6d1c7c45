//! Run-time errors: what aborted an invocation, with the instruction index.

use crate::mem::RegionName;

/// Why an invocation was aborted. Every variant names the instruction (`insn #N`). Faulting
/// accesses say where they pointed in the program's terms ([`Place`]), never as a host
/// address: messages reach remote clients, and a host address would help exploit any
/// future memory bug.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VmError {
    #[error("insn #{insn}: read of {len} bytes at {at} outside the program's regions")]
    BadRead { insn: usize, at: Place, len: u64 },
    #[error("insn #{insn}: write of {len} bytes at {at} outside the program's writable regions")]
    BadWrite { insn: usize, at: Place, len: u64 },
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

/// Addresses within this distance of a region's edges are named from that region; farther
/// ones are [`Place::Wild`]. Generous (a program's index past a 64 KiB block still reads
/// `data+N`), small next to the gaps between host allocations it must not reveal.
pub const PLACE_NEAR_BYTES: u64 = 1 << 16;

/// Where a faulting access pointed, in the program's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Place {
    /// `offset` bytes from the start of the region named `name` (negative: before it; at or
    /// past `len`: beyond its end), the nearest readable region within
    /// [`PLACE_NEAR_BYTES`] of the address.
    Region { name: RegionName, offset: i64, len: u64 },
    /// An address below [`PLACE_NEAR_BYTES`], which no host mapping has (null pointers and
    /// small integers used as pointers): the program's own number, shown as is.
    Low(u64),
    /// Far from every region of the invocation: not shown.
    Wild,
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Place::Region { name, offset, len } => {
                write!(f, "{name}{offset:+} ({name} is {len} bytes)")
            }
            Place::Low(a) => write!(f, "address {a:#x}"),
            Place::Wild => f.write_str("an address far from every region"),
        }
    }
}
