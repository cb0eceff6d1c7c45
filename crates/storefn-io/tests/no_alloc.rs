//! The hot path allocates nothing: a counting global allocator sees zero allocations on this
//! thread while thousands of chains (and plain reads) run in steady state.

mod common;
mod digest_support;

use std::fs::File;

use common::*;
use storefn_io::limits::{range_buf_bytes, MAX_RANGE_BYTES};
use storefn_io::{EngineConfig, NoFunction, RangeBuf};
use storefn_testkit::CountingAlloc;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

fn allocs() -> u64 {
    CountingAlloc::thread_allocs()
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
    for vm in [storefn_vm::Engine::Interp, storefn_vm::Engine::Jit] {
        let inst = storefn_vm::Instance::new(prog.clone(), vm).unwrap();
        vm_steady_state(&lists, &mut e, id, inst, vm);
    }
}

fn vm_steady_state(
    lists: &Lists,
    e: &mut storefn_io::Engine,
    id: storefn_io::FileId,
    mut inst: storefn_vm::Instance,
    vm: storefn_vm::Engine,
) {
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
    run(e, &mut inst);
    let before = allocs();
    let hops = run(e, &mut inst);
    assert_eq!(allocs() - before, 0, "allocations during {hops} VM hops ({vm:?})");
    assert_eq!(hops, 4000);
}

#[test]
fn steady_state_raw_mode_chains_allocate_nothing() {
    // Raw mode adds a digest lookup per hop and a lease + fstat check per chain.
    let Some(fs) = digest_support::LoopFs::new(digest_support::FsKind::Ext4, 256, &[]) else {
        return;
    };
    let lists = random_lists(23, 8000, 400, 512);
    let path = fs.path("lists");
    std::fs::write(&path, &lists.bytes).unwrap();
    File::open(&path).unwrap().sync_all().unwrap();
    let cfg = EngineConfig { chains: 256, buffers: 64, ..EngineConfig::default() };
    let mut e = storefn_io::Engine::new(cfg).unwrap();
    let mut id = None;
    for _ in 0..200 {
        match e.open(&path, storefn_io::IoMode::Raw) {
            Ok(i) => {
                id = Some(i);
                break;
            }
            // Lease refused while another test thread's child holds a writable fd copy.
            Err(storefn_io::EngineError::RawUnavailable { .. }) => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(other) => panic!("{other}"),
        }
    }
    let id = id.expect("raw mode");
    let mut walker = list_walker();
    let heads = lists.heads.clone();
    let mut run = |e: &mut storefn_io::Engine| {
        let (mut device, mut next, mut done) = (0u64, 0usize, 0usize);
        while done < heads.len() {
            while next < heads.len() && e.free_slots() > 0 {
                e.submit_chain(id, heads[next], 16, next as u64, |_| {}).unwrap();
                next += 1;
            }
            done += e
                .wait(1, &mut walker, |c| device += u64::from(c.result.unwrap().device_hops))
                .unwrap();
        }
        let mut buf = [0u8; 512];
        for t in 0..50u64 {
            e.read(id, t * 512, &mut buf).unwrap();
        }
        device
    };
    run(&mut e);
    let before = allocs();
    let device = run(&mut e);
    assert_eq!(allocs() - before, 0, "allocations during {device} raw device hops");
    assert_eq!(device, 8000);
}

#[test]
fn steady_state_range_reads_allocate_nothing() {
    let bytes: Vec<u8> = (0..3 * MAX_RANGE_BYTES + 777).map(|i| (i % 253) as u8).collect();
    let f = tmp_file("noalloc-range", &bytes);
    let (mut e, id) = engine_with(EngineConfig::default(), &f);
    let span = 2 * MAX_RANGE_BYTES + 4097;
    let mut buf = RangeBuf::new(range_buf_bytes(span)).unwrap();
    let mut unreg = RangeBuf::new(range_buf_bytes(MAX_RANGE_BYTES)).unwrap();
    assert!(e.register_range_buf(&buf).unwrap());
    let mut run = |e: &mut storefn_io::Engine, rounds: u64| {
        let mut sum = 0u64;
        for r in 0..rounds {
            // 1 MiB requests (one read) at aligned and unaligned offsets, and a span of three.
            for off in [0u64, 4096 * r, 511 + r] {
                let rg = e.read_range(id, off, MAX_RANGE_BYTES as u64, &mut buf).unwrap();
                sum += u64::from(buf.as_slice()[rg.start]);
                let rg = e.read_range(id, off + 3, 70_000, &mut unreg).unwrap();
                sum += u64::from(unreg.as_slice()[rg.end - 1]);
            }
            let rg = e.read_range(id, 333, span as u64, &mut buf).unwrap();
            assert_eq!(buf.as_slice()[rg.end - 1], bytes[333 + span - 1]);
            // Asynchronous reads of 64 KiB, several in flight, reaped in batches.
            for t in 0..8u64 {
                let at = (t as usize) * (68 << 10);
                // SAFETY: `buf` is untouched until the wait below delivered all eight.
                unsafe { e.submit_range(id, t * 4096, 64 << 10, &mut buf, at, t) }.unwrap();
            }
            e.wait(8, &mut NoFunction, |c| sum += u64::from(c.data[0])).unwrap();
        }
        sum
    };
    run(&mut e, 1);
    let before = allocs();
    let sum = run(&mut e, 20);
    let after = allocs();
    assert!(sum > 0);
    assert_eq!(after - before, 0, "allocations during range reads");
}
