//! Cranelift's per-function working memory, kept per thread between compiles.
//!
//! A `Context` (the IR function, its CFG and dominator tree, the register allocator's state)
//! and a `FunctionBuilderContext` grow to the largest function built with them and keep that
//! capacity when cleared. Made afresh per compile, a program of 4,096 slots paid for ~420
//! page faults each time (glibc serves blocks this large from fresh pages), ~290 with them
//! kept; a thread then holds them (a few MiB) for its lifetime. Only after a program of at
//! most [`KEEP_MAX_SLOTS`] slots: one larger (up to `MAX_INSNS`, tens of MiB of contexts)
//! drops them, so a thread that once compiled a huge program does not keep its memory.

use std::cell::RefCell;

use cranelift_codegen::Context;
use cranelift_frontend::FunctionBuilderContext;
use cranelift_jit::JITModule;
use cranelift_module::Module;

/// Contexts are kept after compiling a program of at most this many slots (the size the
/// compile-time bound is stated for, docs/design/vm.md), dropped after a larger one.
const KEEP_MAX_SLOTS: usize = 4096;

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

/// Keeps the contexts for the thread's next compile, after a program of `slots` slots (see
/// [`KEEP_MAX_SLOTS`]). A `FunctionBuilderContext` is left clear by every finished
/// `FunctionBuilder`; the `Context` is cleared by [`take`].
pub(super) fn keep(ctx: Context, fctx: FunctionBuilderContext, slots: usize) {
    if slots > KEEP_MAX_SLOTS {
        return;
    }
    // During thread teardown the slot may be gone: the contexts are then just dropped.
    let _ = SCRATCH.try_with(|s| *s.borrow_mut() = Some((ctx, fctx)));
}
