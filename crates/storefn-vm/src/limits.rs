//! Every bound of the VM in one place (docs/DESIGN.md, "Named limits"; a test checks the table).
//! Each is defined, with its reason, beside the code that enforces it and named here; the
//! crates above (the io engine, the server, the applications) derive theirs from these.
//!
//! Two families of bounds stay private to the stage that uses them: the verifier's range
//! analysis (states per instruction slot, arrivals in all) and the JIT's loop unrolling (trips,
//! body slots); DESIGN.md's table names them with their values.

pub use crate::elf::MAX_GLOBALS_BYTES;
pub use crate::error::PLACE_NEAR_BYTES;
pub use crate::helpers::{
    CRC32C_BYTES_PER_INSN, HELPER_BYTES_PER_INSN, HELPER_CALL_INSNS, MAX_FORMAT_BYTES,
    MAX_TRACE_LINES, MAX_TRACE_LINE_BYTES, TRACE_PRINTK_INSNS,
};
pub use crate::jit::QUICK_TIER_SLOTS;
pub use crate::loops::MAX_LOOP_PRECHARGE_INSNS;
pub use crate::mem::MAX_REGIONS;
pub use crate::program::{
    DEFAULT_INSN_BUDGET, LAMBDA_INSNS_PER_INPUT_BYTE, LAMBDA_INSNS_PER_OUTPUT_BYTE, MAX_CALL_DEPTH,
    MAX_INSNS, STACK_BYTES, STACK_FRAME_BYTES,
};
pub use crate::xrp::{XRP_DATA_VIEW_BYTES, XRP_MAX_FANOUT, XRP_SCRATCH_BYTES};
