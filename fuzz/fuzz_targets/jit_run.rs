//! Arbitrary instruction stream -> verifier -> JIT: every verified program compiles; running it
//! in the sandbox ends with a value or a fault, never harming the host, and never executes more
//! instructions than its budget (a stop must say so, naming the budget).
#![no_main]

use libfuzzer_sys::fuzz_target;
use storefn_vm::JitProgram;
use storefn_vm::{VerifiedProgram, VmError};

#[path = "sandbox.rs"]
#[allow(dead_code)]
mod sandbox;
use sandbox::*;

fuzz_target!(|data: &[u8]| {
    let Ok(prog) = VerifiedProgram::new(program(data)) else { return };
    let jit = JitProgram::compile(&prog)
        .unwrap_or_else(|e| panic!("verifier accepted what the JIT rejects: {e}"));
    let mut sb = Sandbox::new();
    let initial = sb.clone();
    // SAFETY: the env grants only the sandbox's own buffers, alive for the call; no host.
    let o = outcome(&mut sb, &initial, |env, ctx, top| unsafe { jit.run(env, ctx, top) });
    assert!(o.left <= FUZZ_BUDGET);
    if let Err(VmError::BudgetExhausted { budget, .. }) = o.result {
        assert_eq!(budget, FUZZ_BUDGET);
    }
});
