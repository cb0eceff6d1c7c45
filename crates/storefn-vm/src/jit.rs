//! Cranelift JIT (placeholder until the JIT lands: compile always reports Unsupported).

use crate::{Program, RunEnv, VmError};

/// Why a program could not be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JitError {
    #[error("JIT unsupported: {0}")]
    Unsupported(String),
}

/// A compiled program.
#[derive(Debug)]
pub struct JitProgram {
    _private: (),
}

impl JitProgram {
    /// Compiles a verified program.
    ///
    /// # Errors
    /// Always, for now.
    pub fn compile(_prog: &Program) -> Result<Self, JitError> {
        Err(JitError::Unsupported("the JIT is not built yet".into()))
    }

    /// Runs once. `ctx_addr` goes in r1, r10 = `stack_top` for the entry frame.
    ///
    /// # Errors
    /// The fault that aborted the invocation.
    pub fn run(&self, _env: &mut RunEnv, _ctx_addr: u64, _stack_top: u64) -> Result<u64, VmError> {
        unreachable!("JitProgram cannot be constructed yet")
    }
}
