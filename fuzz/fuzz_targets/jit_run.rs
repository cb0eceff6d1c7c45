//! Arbitrary instruction stream -> JIT (no verifier): compiling never panics; a compiled
//! program runs in the sandbox and ends with a value or a fault, never harming the host, and
//! never spends more than its budget.
#![no_main]

use libfuzzer_sys::fuzz_target;
use storefn_vm::jit::JitProgram;

#[path = "sandbox.rs"]
mod sandbox;
use sandbox::*;

fuzz_target!(|data: &[u8]| {
    let prog = program(data);
    if let Ok(jit) = JitProgram::compile(&prog) {
        let mut sb = Sandbox::new();
        let initial = sb.clone();
        let o = outcome(&mut sb, &initial, |env, ctx, top| jit.run(env, ctx, top));
        assert!(o.left <= FUZZ_BUDGET);
    }
});
