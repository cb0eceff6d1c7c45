//! `Instance::run_xrp` / `run_lambda` allocate nothing (the io engine runs them per I/O).

use storefn_testkit::CountingAlloc;
use storefn_vm::{load_verified, Engine, Instance, ProgType, XrpCtx};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

fn allocs() -> u64 {
    CountingAlloc::thread_allocs()
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
