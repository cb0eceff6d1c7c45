//! Arbitrary instructions after a prologue that loads `ctx->data` and `ctx->scratch` -> xrp
//! verifier (whose range analysis proves data, scratch and context accesses in bounds) -> the
//! JIT (which drops exactly those checks) and the interpreter (which checks everything), on a
//! sandbox laid out as `Instance::run_xrp` does with exact-size, guarded buffers. Both must
//! agree exactly (r0 or error with its instruction, context, scratch, stack, budget left), data
//! must stay untouched, and no invocation may exceed its budget.
#![no_main]

use libfuzzer_sys::fuzz_target;
use storefn_vm::JitProgram;
use storefn_vm::{interpret, VerifiedProgram};

#[path = "sandbox.rs"]
#[allow(dead_code)]
mod sandbox;
use sandbox::*;

fuzz_target!(|data: &[u8]| {
    let Ok(prog) = VerifiedProgram::new(xrp_program(data)) else { return };
    let jit = JitProgram::compile(&prog)
        .unwrap_or_else(|e| panic!("verifier accepted what the JIT rejects: {e}"));
    let mut sb = XrpSandbox::new();
    let initial = sb.clone();
    // SAFETY (both): the env grants only the sandbox's own buffers, alive for the call, laid
    // out as the xrp run contract requires (ctx->data / ctx->scratch point at 4096 granted
    // bytes each, the fields unwritable); no host.
    let j = xrp_outcome(&mut sb, &initial, |env, ctx, top| unsafe { jit.run(env, ctx, top) });
    let i = xrp_outcome(&mut sb, &initial, |env, ctx, top| unsafe {
        interpret(&prog, env, ctx, top)
    });
    assert_eq!(j, i, "JIT and interpreter disagree on {:?}", prog.insns);
    assert!(j.left <= FUZZ_BUDGET);
});
