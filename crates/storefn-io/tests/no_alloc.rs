//! The hot path allocates nothing: a counting global allocator sees zero allocations on this
//! thread while thousands of chains (and plain reads) run in steady state.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use common::*;
use storefn_io::{EngineConfig, NoFunction};

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; the counter is a const-initialised thread-local
// (touching it never allocates).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.with(|a| a.set(a.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.with(|a| a.set(a.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

#[test]
fn steady_state_chains_and_reads_allocate_nothing() {
    let lists = random_lists(21, 8000, 400, 512);
    let f = tmp_file("noalloc", &lists.bytes);
    // Few buffers so chains also queue for buffers (the waiting path) during the run.
    let cfg = EngineConfig { chains: 256, buffers: 64, ..EngineConfig::default() };
    let (mut e, id) = engine_with(cfg, &f);
    let mut walker = list_walker();
    let heads = lists.heads.clone();
    let mut run = |e: &mut storefn_io::Engine, rounds: usize| {
        let (mut hops, mut next, mut done) = (0u64, 0usize, 0usize);
        let total = heads.len() * rounds;
        while done < total {
            while next < total && e.free_slots() > 0 {
                e.submit_chain(id, heads[next % heads.len()], 16, next as u64, |_| {}).unwrap();
                next += 1;
            }
            done += e
                .wait(1, &mut walker, |c| {
                    hops += u64::from(c.result.expect("chain ok").hops);
                    assert_eq!(get_u64(c.scratch, 8), 20);
                })
                .unwrap();
        }
        for t in 0..200u64 {
            e.submit_read(id, t * 512, 512, t).unwrap();
        }
        e.wait(200, &mut NoFunction, |c| assert_eq!(c.data.len(), 512)).unwrap();
        let mut buf = [0u8; 512];
        for t in 0..50u64 {
            e.read(id, t * 512, &mut buf).unwrap();
            let mut s = [0u8; 16];
            e.read_xrp(id, heads[t as usize], 16, &mut walker, &mut s).unwrap();
        }
        hops
    };
    // Warm-up: the first pass may touch lazily initialised runtime state.
    run(&mut e, 1);
    let before = allocs();
    let hops = run(&mut e, 5);
    let after = allocs();
    assert_eq!(hops, 5 * 8000);
    // The counter is live: one allocation shows up.
    let probe = std::hint::black_box(vec![1u8; 64]);
    assert_eq!(allocs() - after, 1);
    drop(probe);
    assert_eq!(after - before, 0, "allocations during {hops} hops");
}

#[test]
fn steady_state_vm_chains_allocate_nothing() {
    let lists = random_lists(22, 4000, 200, 512);
    let f = tmp_file("noalloc-vm", &lists.bytes);
    let (mut e, id) = engine_with(EngineConfig { chains: 128, ..EngineConfig::default() }, &f);
    let elf = storefn_progs::must("xrp_follow");
    let prog = storefn_vm::load_verified(elf, None, storefn_vm::ProgType::Xrp).unwrap();
    let mut inst = storefn_vm::Instance::new(prog, storefn_vm::Engine::Interp).unwrap();
    let run = |e: &mut storefn_io::Engine, inst: &mut storefn_vm::Instance| {
        let (mut next, mut done, mut hops) = (0usize, 0usize, 0u64);
        while done < lists.heads.len() {
            while next < lists.heads.len() && e.free_slots() > 0 {
                e.submit_chain(id, lists.heads[next], 512, next as u64, |_| {}).unwrap();
                next += 1;
            }
            done += e.wait(1, inst, |c| hops += u64::from(c.result.unwrap().hops)).unwrap();
        }
        hops
    };
    run(&mut e, &mut inst);
    let before = allocs();
    let hops = run(&mut e, &mut inst);
    assert_eq!(allocs() - before, 0, "allocations during {hops} VM hops");
    assert_eq!(hops, 4000);
}
