//! Chains driven by clang-built storage functions (progs/) in the VM, against the model and
//! against the same walk written as a Rust closure.

mod common;

use common::*;
use storefn_io::{ChainError, EngineConfig, StorageFn};
use storefn_vm::{load_verified, Engine as VmEngine, Instance, ProgType, VmError};

/// The program in every engine available: the interpreter always, the JIT once it compiles.
fn instances(name: &str) -> Vec<Instance> {
    let prog = load_verified(storefn_progs::must(name), None, ProgType::Xrp).expect(name);
    let mut v = vec![Instance::new(prog.clone(), VmEngine::Interp).unwrap()];
    match Instance::new(prog, VmEngine::Jit) {
        Ok(jit) => v.push(jit),
        Err(e) => println!("{name}: JIT skipped: {e}"),
    }
    v
}

#[test]
fn xrp_follow_walks_lists_like_the_model() {
    // xrp_follow reads 512 B per hop: nodes on a 512 B stride keep every read in the file.
    let lists = random_lists(41, 1500, 30, 512);
    let f = tmp_file("vm-follow", &lists.bytes);
    let (mut e, id) = engine(&f);
    for mut inst in instances("xrp_follow") {
        for &head in &lists.heads {
            let mut scratch = [0u8; 16];
            let stats = e.read_xrp(id, head, 512, &mut inst, &mut scratch).unwrap();
            let (sum, n) = walk_list(&lists.bytes, head);
            assert_eq!((get_u64(&scratch, 0), get_u64(&scratch, 8)), (sum, n));
            assert_eq!(u64::from(stats.hops), n);
        }
    }
}

#[test]
fn thousands_of_vm_chains_in_flight_match_the_model() {
    let lists = random_lists(42, 12_000, 3000, 512);
    let f = tmp_file("vm-batch", &lists.bytes);
    let cfg = EngineConfig { chains: 4096, ..EngineConfig::default() };
    let (mut e, id) = engine_with(cfg, &f);
    for mut inst in instances("xrp_follow") {
        for (i, &head) in lists.heads.iter().enumerate() {
            e.submit_chain(id, head, 512, i as u64, |_| {}).unwrap();
        }
        assert_eq!(e.live(), lists.heads.len());
        let mut seen = 0;
        e.wait(lists.heads.len(), &mut inst, |c| {
            c.result.unwrap();
            let head = lists.heads[c.token as usize];
            let got = (get_u64(c.scratch, 0), get_u64(c.scratch, 8));
            assert_eq!(got, walk_list(&lists.bytes, head), "chain {}", c.token);
            seen += 1;
        })
        .unwrap();
        assert_eq!(seen, lists.heads.len());
    }
}

#[test]
fn c_multi_key_lookup_matches_the_model_and_the_rust_closure() {
    let tree = random_tree(43, 4000, 7);
    let f = tmp_file("vm-tree", &tree.bytes);
    let cfg = EngineConfig { max_hops: 256, ..EngineConfig::default() };
    let (mut e, id) = engine_with(cfg, &f);
    let present: Vec<u64> = tree.map.keys().copied().collect();
    let mut rust = rust_multi_lookup();
    for mut inst in instances("io_multi_lookup") {
        let mut x = 99u64;
        for round in 0..40usize {
            let nkeys = 1 + round % 16;
            let mut args = vec![0u8; 512];
            put_u64(&mut args, 8, nkeys as u64);
            for i in 0..nkeys {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                let k =
                    if i % 3 == 0 { x >> 30 } else { present[(x >> 33) as usize % present.len()] };
                put_u64(&mut args, 64 + i * 8, k);
            }
            let mut by_c = args.clone();
            let mut by_rust = args.clone();
            let sc = e.read_xrp(id, tree.root, 512, &mut inst, &mut by_c).unwrap();
            let sr = e.read_xrp(id, tree.root, 512, &mut rust, &mut by_rust).unwrap();
            assert_eq!(by_c, by_rust, "C and Rust scratch differ");
            assert_eq!(sc, sr);
            for i in 0..nkeys {
                let k = get_u64(&args, 64 + i * 8);
                let got = (get_u64(&by_c, 256 + i * 8) == 1).then(|| get_u64(&by_c, 384 + i * 8));
                assert_eq!(got, tree.map.get(&k).copied(), "key {k}");
            }
        }
    }
}

/// The Rust twin of progs/io_multi_lookup.bpf.c (same scratch layout).
fn rust_multi_lookup() -> impl StorageFn {
    storefn_io::func(|ctx, data, s| {
        let step = |i: usize, ctx: &mut storefn_io::XrpCtx, s: &mut [u8]| match node_step(
            data,
            get_u64(s, 64 + i * 8),
        ) {
            Ok(child) => {
                ctx.next_addr[i] = child;
                ctx.size[i] = 512;
            }
            Err(v) => {
                put_u64(s, 256 + i * 8, u64::from(v.is_some()));
                put_u64(s, 384 + i * 8, v.unwrap_or(0));
                put_u64(s, 16, get_u64(s, 16) - 1);
            }
        };
        if get_u64(s, 0) == 0 {
            let n = get_u64(s, 8).min(16) as usize;
            put_u64(s, 0, 1);
            put_u64(s, 16, n as u64);
            for i in 0..n {
                step(i, ctx, s);
            }
        } else {
            step(ctx.slot as usize & 15, ctx, s);
        }
        if get_u64(s, 16) == 0 {
            ctx.done = 1;
        }
        Ok(0)
    })
}

#[test]
fn vm_fault_fails_only_its_chain_with_the_fault() {
    let lists = random_lists(44, 400, 40, 512);
    let f = tmp_file("vm-fault", &lists.bytes);
    let (mut e, id) = engine(&f);
    for mut inst in instances("test/bad_read") {
        // Offsets in scratch[0]: 8 is inside the view; 1 TiB is outside every region.
        for (i, &head) in lists.heads.iter().enumerate() {
            let off: u64 = if i % 2 == 0 { 8 } else { 1 << 40 };
            e.submit_chain_args(id, head, 512, i as u64, &off.to_le_bytes()).unwrap();
        }
        let mut faults = 0;
        e.wait(lists.heads.len(), &mut inst, |c| {
            let head = lists.heads[c.token as usize];
            if c.token % 2 == 0 {
                c.result.unwrap();
                assert_eq!(get_u64(c.scratch, 8), get_u64(&lists.bytes, head as usize + 8));
            } else {
                match c.result {
                    Err(ChainError::Fault { at, fault: VmError::BadRead { .. } }) => {
                        assert_eq!((at.start, at.hop, at.addr), (head, 1, head));
                        faults += 1;
                    }
                    other => panic!("{other:?}"),
                }
            }
        })
        .unwrap();
        assert_eq!(faults, lists.heads.len() / 2);
    }
}
