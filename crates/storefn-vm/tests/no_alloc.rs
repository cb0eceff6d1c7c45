//! `Instance::run_xrp` / `run_lambda` allocate nothing (the io engine runs them per I/O).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use storefn_vm::{load_verified, Engine, Instance, ProgType, XrpCtx};

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

struct Counting;

// SAFETY: forwards to the system allocator unchanged; only counts calls on this thread.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from `System.alloc` with layout `l`.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

#[test]
fn runs_do_not_allocate() {
    for engine in [Engine::Interp, Engine::Jit] {
        let p = load_verified(storefn_progs::must("test/subprog"), None, ProgType::Xrp).unwrap();
        let mut inst = Instance::new(p, engine).unwrap();
        let data = vec![7u8; 4096];
        let mut scratch = vec![0u8; 4096];
        let mut ctx = XrpCtx::default();
        inst.run_xrp(&mut ctx, &data, &mut scratch).unwrap();
        let before = allocs();
        for _ in 0..100 {
            inst.run_xrp(&mut ctx, &data, &mut scratch).unwrap();
        }
        assert_eq!(allocs(), before, "{engine:?}");

        let p =
            load_verified(storefn_progs::must("test/lambda_sum"), None, ProgType::Lambda).unwrap();
        let mut inst = Instance::new(p, engine).unwrap();
        let mut out = vec![0u8; 64];
        let before = allocs();
        for _ in 0..100 {
            inst.run_lambda(&data, &mut out).unwrap();
        }
        assert_eq!(allocs(), before, "{engine:?}");
    }
}
