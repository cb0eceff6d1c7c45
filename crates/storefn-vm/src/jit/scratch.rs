//! Cranelift's per-function working memory, kept per thread between compiles.
//!
//! A `Context` (the IR function, its CFG and dominator tree, the register allocator's state)
//! and a `FunctionBuilderContext` grow to the largest function built with them and keep that
//! capacity when cleared. Made afresh per compile, a program of `MAX_INSNS` slots paid for
//! hundreds of page faults each time (glibc serves blocks this large from fresh pages), a
//! tenth of its compile time; kept, a thread pays for them once, holding them (a few MiB at
//! most) for its lifetime.

use std::cell::RefCell;

use cranelift_codegen::Context;
use cranelift_frontend::FunctionBuilderContext;
use cranelift_jit::JITModule;
use cranelift_module::Module;

thread_local! {
    /// `None` while a compile on this thread holds it (or before the first).
    static SCRATCH: RefCell<Option<(Context, FunctionBuilderContext)>> =
        const { RefCell::new(None) };
}

/// This thread's kept contexts (fresh ones if there are none), cleared for `module`.
pub(super) fn take(module: &JITModule) -> (Context, FunctionBuilderContext) {
    match SCRATCH.with(|s| s.borrow_mut().take()) {
        Some((mut ctx, fctx)) => {
            module.clear_context(&mut ctx);
            (ctx, fctx)
        }
        None => (module.make_context(), FunctionBuilderContext::new()),
    }
}

/// Keeps the contexts for the thread's next compile. A `FunctionBuilderContext` is left
/// clear by every finished `FunctionBuilder`; the `Context` is cleared by [`take`].
pub(super) fn keep(ctx: Context, fctx: FunctionBuilderContext) {
    // During thread teardown the slot may be gone: the contexts are then just dropped.
    let _ = SCRATCH.try_with(|s| *s.borrow_mut() = Some((ctx, fctx)));
}
