//! Arbitrary instruction stream -> verifier; an accepted program must compile on the JIT, and
//! the JIT and the interpreter must agree exactly (r0 or error, memory, budget left) on the same
//! sandbox. Any accepted program faulting the host shows up as a crash here.
#![no_main]

use libfuzzer_sys::fuzz_target;
use storefn_vm::jit::JitProgram;
use storefn_vm::{interp, verifier};

#[path = "sandbox.rs"]
mod sandbox;
use sandbox::*;

fuzz_target!(|data: &[u8]| {
    let prog = program(data);
    if prog.insns.is_empty() || verifier::verify(&prog).is_err() {
        return;
    }
    let jit = JitProgram::compile(&prog)
        .unwrap_or_else(|e| panic!("verifier accepted what the JIT rejects: {e}"));
    let mut sb = Sandbox::new();
    let initial = sb.clone();
    let j = outcome(&mut sb, &initial, |env, ctx, top| jit.run(env, ctx, top));
    let i = outcome(&mut sb, &initial, |env, ctx, top| interp::run(&prog, env, ctx, top));
    assert_eq!(j, i, "JIT and interpreter disagree on {:?}", prog.insns);
    assert!(j.left <= FUZZ_BUDGET);
});
