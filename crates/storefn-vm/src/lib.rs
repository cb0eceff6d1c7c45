//! storefn-vm: run untrusted eBPF storage functions in user space, safely and fast.
//!
//! Pipeline: [`elf`] loads a clang-built object into a [`Program`]; [`verifier`] checks it
//! statically; [`jit`] (Cranelift) or [`interp`] (the reference) runs it against a [`RunEnv`]
//! whose regions bound every memory access at run time (sBPF-style, docs/DESIGN.md).

pub mod disasm;
pub mod elf;
pub mod error;
pub mod helpers;
pub mod insn;
pub mod instance;
pub mod interp;
pub mod jit;
pub mod mem;
pub mod offload;
pub mod program;
pub mod verifier;
pub mod xrp;

pub use elf::LoadError;
pub use error::VmError;
pub use helpers::HostState;
pub use instance::{load_verified, Engine, Error, Instance};
pub use program::{ProgType, Program, RunEnv};
pub use verifier::{verify, VerifyError, VerifyStats};
pub use xrp::{LambdaCtx, XrpCtx};
