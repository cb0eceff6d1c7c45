//! storefn-vm: run untrusted eBPF storage functions in user space, safely and fast.
//!
//! Pipeline: [`load`] reads a clang-built object into a [`Program`]; [`verify`] checks it
//! statically; [`jit`] (Cranelift) or [`interp`] (the reference) runs it against a [`RunEnv`]
//! whose regions bound every memory access at run time (sBPF-style, docs/design/vm.md), and whose
//! instruction budget bounds the work of every invocation.
//!
//! Safe use goes through [`load_verified`] (or [`VerifiedProgram::new`]) and [`Instance`]: an
//! instance runs only verified programs, over memory it lays out itself from the buffers the
//! caller lends it. The lower-level entry points that take a caller-built [`RunEnv`]
//! ([`interpret`], [`JitProgram::run`]) are `unsafe fn`: the regions are trusted.
//!
//! Public modules are the byte-level contracts: [`insn`] (the instruction encoding), [`xrp`]
//! and [`offload`] (the program types' context layouts, docs/FORMAT.md) and [`limits`] (every
//! bound). The benchmark harness behind `storefn prog bench` is `harness` (feature `harness`).
//!
//! ```compile_fail
//! // A RunEnv granting arbitrary memory cannot be run from safe code.
//! # fn f(p: &storefn_vm::VerifiedProgram, env: &mut storefn_vm::RunEnv) {
//! let _ = storefn_vm::interpret(p, env, 0, 0);
//! # }
//! ```
//!
//! ```no_run
//! # fn f(p: &storefn_vm::VerifiedProgram, env: &mut storefn_vm::RunEnv) {
//! // SAFETY: (the caller's contract would be stated here)
//! let _ = unsafe { storefn_vm::interpret(p, env, 0, 0) };
//! # }
//! ```

mod callees;
mod cfg;
mod disasm;
mod elf;
mod error;
#[cfg(feature = "harness")]
pub mod harness;
mod helpers;
pub mod insn;
mod instance;
mod interp;
mod jit;
pub mod limits;
mod loops;
mod mem;
pub mod offload;
mod program;
mod proofs;
mod ranges;
#[cfg(test)]
mod testutil;
mod verifier;
pub mod xrp;

pub use disasm::disassemble;
pub use elf::{load, LoadError};
pub use error::{Place, VmError};
pub use helpers::HostState;
pub use instance::{load_verified, Engine, Error, Instance};
pub use interp::run as interpret;
pub use jit::{JitError, JitProgram, DISASM_ENV as JIT_DISASM_ENV};
pub use mem::{Region, RegionName, RegionSet};
pub use program::{FaultInfo, ProgType, Program, RunEnv};
pub use verifier::{verify, VerifiedProgram, VerifyError, VerifyStats};
pub use xrp::{LambdaCtx, XrpCtx};
