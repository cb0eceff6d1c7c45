//! Arbitrary instruction stream -> verifier; an accepted program must compile on the JIT, and
//! the JIT (which drops the checks the verifier proved) and the interpreter (which checks
//! everything) must agree exactly (r0 or error incl. the instruction a budget stop names,
//! memory, instructions left) on the same sandbox, within the budget. Any accepted program
//! faulting the host shows up as a crash here.
#![no_main]

use libfuzzer_sys::fuzz_target;
use storefn_vm::JitProgram;
use storefn_vm::{interpret, VerifiedProgram};

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
    // SAFETY (both): the env grants only the sandbox's own buffers, alive for the call; no host.
    let j = outcome(&mut sb, &initial, |env, ctx, top| unsafe { jit.run(env, ctx, top) });
    let i =
        outcome(&mut sb, &initial, |env, ctx, top| unsafe { interpret(&prog, env, ctx, top) });
    assert_eq!(j, i, "JIT and interpreter disagree on {:?}", prog.insns);
    assert!(j.left <= FUZZ_BUDGET);
});
