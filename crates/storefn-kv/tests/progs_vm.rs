//! The BPF-KV storage functions (progs/kv_*.bpf.c) run on the VM with a minimal in-memory chain
//! driver, on both engines (JIT and interpreter must agree), against the file's true contents.

mod common;

use common::TempDir;
use storefn_kv::bpfkv_value;
use storefn_kv::layout::tree::LOOKUP_OFF_STATE;
use storefn_kv::layout::tree::RANGE_OFF_COUNT;
use storefn_kv::layout::tree::RANGE_OFF_FLAGS;
use storefn_kv::{build_tree, create_bpfkv, NodeSize};
use storefn_vm::{load_verified, Engine, Instance, ProgType, XrpCtx};

/// Runs one chain over `file` from `start` until done; returns the hops.
fn chain(inst: &mut Instance, file: &[u8], start: u64, len: u64, scratch: &mut [u8]) -> u32 {
    let (mut addr, mut size) = (start, len);
    for hop in 1..=64 {
        let data = &file[addr as usize..(addr + size) as usize];
        let mut ctx = XrpCtx::default();
        inst.run_xrp(&mut ctx, data, scratch).unwrap();
        if ctx.done != 0 {
            return hop;
        }
        let reqs: Vec<_> = ctx.requests().collect();
        assert_eq!(reqs.len(), 1, "one request per hop");
        (addr, size) = (reqs[0].1, reqs[0].2);
    }
    panic!("chain did not finish in 64 hops");
}

fn instances(name: &str) -> Vec<Instance> {
    let prog = load_verified(storefn_progs::must(name), None, ProgType::Xrp).unwrap();
    let mut v = vec![Instance::new(prog.clone(), Engine::Interp).unwrap()];
    match Instance::new(prog, Engine::Jit) {
        Ok(i) => v.push(i),
        // The JIT lands separately (branch vm-jit); until then the interpreter alone runs.
        Err(e) => println!("skipping the JIT for {name}: {e}"),
    }
    v
}

fn lookup(inst: &mut Instance, file: &[u8], key: u64, nb: u64) -> (Option<[u8; 64]>, u32) {
    let mut s = vec![0u8; 4096];
    s[..8].copy_from_slice(&key.to_le_bytes());
    let hops = chain(inst, file, 0, nb, &mut s);
    assert_eq!(&s[LOOKUP_OFF_STATE + 24..LOOKUP_OFF_STATE + 32], &[0; 8], "err flag");
    ((s[8] == 1).then(|| s[9..73].try_into().unwrap()), hops)
}

#[test]
fn kv_lookup_finds_every_key_on_jit_and_interpreter() {
    let dir = TempDir::new("prog-lookup");
    let p = dir.join("db");
    create_bpfkv(&p, NodeSize::B512, 3, &mut common::noop()).unwrap();
    let file = std::fs::read(&p).unwrap();
    for mut inst in instances("kv_lookup") {
        for key in (0..29791u64).step_by(7).chain([29790]) {
            assert_eq!(lookup(&mut inst, &file, key, 512), (Some(bpfkv_value(key)), 4), "{key}");
        }
        for miss in [29791, u64::MAX] {
            assert_eq!(lookup(&mut inst, &file, miss, 512).0, None);
        }
    }
}

#[test]
fn kv_lookup_4k_and_partial_trees() {
    let dir = TempDir::new("prog-4k");
    let p = dir.join("db");
    let keys: Vec<u64> = (0..70_000u64).map(|i| i * 2).collect();
    build_tree(&p, NodeSize::B4096, keys.iter().map(|&k| (k, bpfkv_value(k))), &mut common::noop())
        .unwrap();
    let file = std::fs::read(&p).unwrap();
    for mut inst in instances("kv_lookup_4k") {
        for &k in keys.iter().step_by(97).chain([&139_998]) {
            assert_eq!(lookup(&mut inst, &file, k, 4096).0, Some(bpfkv_value(k)), "{k}");
            assert_eq!(lookup(&mut inst, &file, k + 1, 4096).0, None, "{}", k + 1);
        }
    }
}

#[test]
fn kv_range_matches_scan_with_resume() {
    let dir = TempDir::new("prog-range");
    let p = dir.join("db");
    create_bpfkv(&p, NodeSize::B512, 2, &mut common::noop()).unwrap();
    let file = std::fs::read(&p).unwrap();
    for mut inst in instances("kv_range") {
        let (begin, end) = (25u64, 140u64);
        let mut s = vec![0u8; 4096];
        s[0..8].copy_from_slice(&begin.to_le_bytes());
        s[8..16].copy_from_slice(&end.to_le_bytes());
        let mut got = Vec::new();
        let mut start = 0;
        let mut calls = 0;
        loop {
            calls += 1;
            chain(&mut inst, &file, start, 512, &mut s);
            let count =
                u32::from_le_bytes(s[RANGE_OFF_COUNT..RANGE_OFF_COUNT + 4].try_into().unwrap());
            for r in 0..count as usize {
                let o = 64 + r * 72;
                let k = u64::from_le_bytes(s[o..o + 8].try_into().unwrap());
                assert_eq!(&s[o + 8..o + 72], &bpfkv_value(k));
                got.push(k);
            }
            let flags =
                u32::from_le_bytes(s[RANGE_OFF_FLAGS..RANGE_OFF_FLAGS + 4].try_into().unwrap());
            if flags & 1 != 0 {
                break;
            }
            start = u64::from_le_bytes(s[24..32].try_into().unwrap());
            s[RANGE_OFF_COUNT..RANGE_OFF_COUNT + 4].fill(0);
        }
        assert_eq!(got, (begin..=end).collect::<Vec<_>>());
        assert_eq!(calls, 4); // 116 entries: 32 + 32 + 32 + 20
    }
}

#[test]
fn kv_range_aggregates_match_rust() {
    use storefn_kv::{aggregate, Agg};
    let dir = TempDir::new("prog-agg");
    let p = dir.join("db");
    let val = |k: u64| {
        let mut v = [0u8; 64];
        v[..8].copy_from_slice(&(k ^ 0x5555).wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes());
        v
    };
    let keys: Vec<u64> = (0..3000u64).map(|i| i * 3).collect();
    build_tree(&p, NodeSize::B512, keys.iter().map(|&k| (k, val(k))), &mut common::noop()).unwrap();
    let file = std::fs::read(&p).unwrap();
    for mut inst in instances("kv_range") {
        for (begin, end) in [(0u64, 8997u64), (100, 1000), (5, 5), (9000, 10_000)] {
            for agg in [Agg::Sum, Agg::Min, Agg::Max, Agg::Count] {
                let mut s = vec![0u8; 4096];
                s[0..8].copy_from_slice(&begin.to_le_bytes());
                s[8..16].copy_from_slice(&end.to_le_bytes());
                s[16..20].copy_from_slice(&u32::try_from(agg.code()).unwrap().to_le_bytes());
                let mut start = 0;
                loop {
                    chain(&mut inst, &file, start, 512, &mut s);
                    if s[RANGE_OFF_FLAGS] & 1 != 0 {
                        break;
                    }
                    start = u64::from_le_bytes(s[24..32].try_into().unwrap());
                    s[RANGE_OFF_COUNT..RANGE_OFF_COUNT + 4].fill(0);
                }
                let n = u64::from_le_bytes(s[48..56].try_into().unwrap());
                let got = u64::from_le_bytes(s[40..48].try_into().unwrap());
                let vals: Vec<[u8; 64]> =
                    keys.iter().filter(|k| (begin..=end).contains(k)).map(|&k| val(k)).collect();
                assert_eq!(n, vals.len() as u64, "[{begin}, {end}] {agg:?} n");
                let want = aggregate(agg, vals.iter());
                assert_eq!(
                    if n == 0 && matches!(agg, Agg::Min | Agg::Max) { None } else { Some(got) },
                    want,
                    "[{begin}, {end}] {agg:?}"
                );
            }
        }
    }
}
