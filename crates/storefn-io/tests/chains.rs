//! Chains against a model: random pointer structures in real O_DIRECT files, walked by Rust
//! storage functions through the engine, compared with a plain-Rust walk of the same bytes.

mod common;

use common::*;
use storefn_io::{func, ChainError, Completion, EngineConfig, SubmitError, VmError, XrpCtx};
use storefn_vm::Place;

#[test]
fn read_xrp_follows_linked_lists_like_the_model() {
    let lists = random_lists(1, 2000, 40, 512);
    let f = tmp_file("lists", &lists.bytes);
    let (mut e, id) = engine(&f);
    let mut walker = list_walker();
    for &head in &lists.heads {
        let mut scratch = [0u8; 16];
        let stats = e.read_xrp(id, head, 16, &mut walker, &mut scratch).expect("chain");
        let (sum, n) = walk_list(&lists.bytes, head);
        assert_eq!((get_u64(&scratch, 0), get_u64(&scratch, 8)), (sum, n), "head {head}");
        assert_eq!(u64::from(stats.hops), n);
        assert_eq!(u64::from(stats.invocations), n);
    }
}

#[test]
fn misaligned_nodes_across_block_boundaries_are_widened() {
    // Stride 200: nodes start at unaligned offsets and some straddle a 512 B block boundary.
    let lists = random_lists(2, 600, 12, 200);
    let f = tmp_file("unaligned", &lists.bytes);
    let (mut e, id) = engine(&f);
    assert!(e.file_align(id).unwrap() >= 512, "O_DIRECT on a block device");
    let mut walker = list_walker();
    for &head in &lists.heads {
        let mut scratch = [0u8; 16];
        e.read_xrp(id, head, 16, &mut walker, &mut scratch).expect("chain");
        assert_eq!((get_u64(&scratch, 0), get_u64(&scratch, 8)), walk_list(&lists.bytes, head));
    }
}

#[test]
fn data_points_at_the_requested_byte_with_a_view_to_the_end_of_the_read() {
    let mut bytes = vec![0u8; 8192];
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    let f = tmp_file("view", &bytes);
    let (mut e, id) = engine(&f);
    let align = e.file_align(id).unwrap() as usize;
    let mut seen = Vec::new();
    let mut prog = func(|ctx, data, _s| {
        seen.push((data.len(), data[0], ctx.slot));
        ctx.done = 1;
        Ok(0)
    });
    let mut scratch = [0u8; 0];
    e.read_xrp(id, 700, 8, &mut prog, &mut scratch).unwrap();
    // Read [align_down(700), align_up(708)): the view runs from byte 700 to the read's end.
    let end = 708usize.next_multiple_of(align);
    assert_eq!(seen, vec![(end - 700, (700 % 251) as u8, 0)]);
}

#[test]
fn batch_of_thousands_of_chains_matches_the_model() {
    let lists = random_lists(3, 20_000, 5000, 512);
    let f = tmp_file("batch", &lists.bytes);
    let cfg = EngineConfig { chains: 4096, ..EngineConfig::default() };
    let (mut e, id) = engine_with(cfg, &f);
    let mut walker = list_walker();
    let mut results = vec![None; lists.heads.len()];
    let mut next = 0;
    let mut max_live = 0;
    while next < lists.heads.len() || e.live() > 0 {
        while next < lists.heads.len() {
            match e.submit_chain(id, lists.heads[next], 16, next as u64, |_| {}) {
                Ok(()) => next += 1,
                Err(SubmitError::Full { .. }) => break,
                Err(other) => panic!("{other}"),
            }
        }
        max_live = max_live.max(e.live());
        e.wait(1, &mut walker, |c: Completion<'_>| {
            c.result.expect("chain ok");
            results[c.token as usize] = Some((get_u64(c.scratch, 0), get_u64(c.scratch, 8)));
        })
        .unwrap();
    }
    assert!(max_live >= 4000, "thousands in flight: {max_live}");
    for (i, &head) in lists.heads.iter().enumerate() {
        assert_eq!(results[i], Some(walk_list(&lists.bytes, head)), "chain {i}");
    }
}

/// Scratch layout of the multi-key lookup: started flag, key count, outstanding branches,
/// keys[16], found[16], values[16].
const MK_KEYS: usize = 64;
const MK_FOUND: usize = 256;
const MK_VALS: usize = 384;

fn multi_key_lookup() -> impl FnMut(&mut XrpCtx, &[u8], &mut [u8]) -> Result<u64, VmError> {
    func(|ctx, data, s| {
        let nkeys = get_u64(s, 8) as usize;
        let mut outstanding = get_u64(s, 16);
        let step = |i: usize, ctx: &mut XrpCtx, s: &mut [u8], out: &mut u64| match node_step(
            data,
            get_u64(s, MK_KEYS + i * 8),
        ) {
            Ok(child) => {
                ctx.next_addr[i] = child;
                ctx.size[i] = NODE as u64;
            }
            Err(v) => {
                put_u64(s, MK_FOUND + i * 8, u64::from(v.is_some()));
                put_u64(s, MK_VALS + i * 8, v.unwrap_or(0));
                *out -= 1;
            }
        };
        if get_u64(s, 0) == 0 {
            // The root is read once and descends every key: one branch per key, pair = key.
            put_u64(s, 0, 1);
            outstanding = nkeys as u64;
            for i in 0..nkeys {
                step(i, ctx, s, &mut outstanding);
            }
        } else {
            step(ctx.slot as usize, ctx, s, &mut outstanding);
        }
        put_u64(s, 16, outstanding);
        if outstanding == 0 {
            ctx.done = 1;
        }
        Ok(0)
    })
}

#[test]
fn multi_key_lookup_descends_subtrees_concurrently() {
    let tree = random_tree(4, 3000, 6);
    assert!(tree.depth >= 4, "depth {}", tree.depth);
    let f = tmp_file("tree", &tree.bytes);
    // Up to 16 keys x depth reads in one chain: above the default hop limit of 64.
    let cfg = EngineConfig { max_hops: 256, ..EngineConfig::default() };
    let (mut e, id) = engine_with(cfg, &f);
    let mut prog = multi_key_lookup();
    let present: Vec<u64> = tree.map.keys().copied().collect();
    let mut rng = 12345u64;
    for round in 0..50 {
        let nkeys = 1 + round % 16;
        let mut scratch = vec![0u8; 512];
        let mut keys = Vec::new();
        for i in 0..nkeys {
            rng =
                rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            // Half present keys, half (almost surely) absent ones.
            let k =
                if i % 2 == 0 { present[(rng >> 33) as usize % present.len()] } else { rng >> 24 };
            keys.push(k);
            put_u64(&mut scratch, MK_KEYS + i * 8, k);
        }
        put_u64(&mut scratch, 8, nkeys as u64);
        let stats = e.read_xrp(id, tree.root, NODE as u64, &mut prog, &mut scratch).unwrap();
        for (i, k) in keys.iter().enumerate() {
            let got = (get_u64(&scratch, MK_FOUND + i * 8) == 1)
                .then(|| get_u64(&scratch, MK_VALS + i * 8));
            assert_eq!(got, tree.map.get(k).copied(), "key {k}");
        }
        // The root once, then depth-1 reads per key.
        assert_eq!(stats.hops, 1 + nkeys as u32 * (tree.depth - 1));
    }
}

#[test]
fn fan_out_invokes_once_per_block_with_its_slot() {
    // Block b (512 B) holds b in its first u64.
    let mut bytes = vec![0u8; 64 * 512];
    for b in 0..64 {
        put_u64(&mut bytes, b * 512, b as u64);
    }
    let f = tmp_file("fanout", &bytes);
    let (mut e, id) = engine(&f);
    let mut prog = func(|ctx, data, s| {
        let block = get_u64(data, 0);
        if block == 0 {
            for i in 0..16 {
                ctx.next_addr[i] = (10 + 3 * i as u64) * 512;
                ctx.size[i] = 512;
            }
            return Ok(0);
        }
        // Record which block arrived on which slot; done after the 16th.
        let slot = ctx.slot as usize;
        put_u64(s, 8 + slot * 8, block);
        let n = get_u64(s, 0) + 1;
        put_u64(s, 0, n);
        if n == 16 {
            ctx.done = 1;
        }
        Ok(0)
    });
    let mut scratch = [0u8; 8 + 16 * 8];
    let stats = e.read_xrp(id, 0, 512, &mut prog, &mut scratch).unwrap();
    for i in 0..16 {
        assert_eq!(get_u64(&scratch, 8 + i * 8), 10 + 3 * i as u64, "slot {i}");
    }
    assert_eq!((stats.hops, stats.invocations, stats.dropped_requests), (17, 17, 0));
}

#[test]
fn requests_set_with_or_after_done_are_dropped_and_in_flight_blocks_still_run() {
    let mut bytes = vec![0u8; 64 * 512];
    for b in 0..64 {
        put_u64(&mut bytes, b * 512, b as u64);
    }
    let f = tmp_file("done", &bytes);
    let (mut e, id) = engine(&f);
    let mut prog = func(|ctx, data, s| {
        let block = get_u64(data, 0);
        put_u64(s, 0, get_u64(s, 0) + 1);
        if block == 0 {
            for i in 0..4 {
                ctx.next_addr[i] = (1 + i as u64) * 512;
                ctx.size[i] = 512;
            }
            return Ok(0);
        }
        // Every child sets done AND asks for another block: the request is dropped.
        ctx.done = 1;
        ctx.next_addr[0] = 40 * 512;
        ctx.size[0] = 512;
        Ok(0)
    });
    let mut scratch = [0u8; 8];
    let stats = e.read_xrp(id, 0, 512, &mut prog, &mut scratch).unwrap();
    // Root + 4 children all invoked; the 4 follow-up requests were dropped, not read.
    assert_eq!(get_u64(&scratch, 0), 5);
    assert_eq!((stats.hops, stats.invocations, stats.dropped_requests), (5, 5, 4));
}

#[test]
fn no_request_and_no_done_stalls_the_chain() {
    let f = tmp_file("stall", &vec![0u8; 4096]);
    let (mut e, id) = engine(&f);
    let mut prog = func(|_ctx, _d, _s| Ok(0));
    let err = e.read_xrp(id, 512, 16, &mut prog, &mut []).unwrap_err();
    assert!(matches!(err, ChainError::Stalled { at } if at.hop == 1 && at.addr == 512), "{err}");
}

#[test]
fn cycle_hits_the_hop_limit() {
    // Block 1 points at itself.
    let mut bytes = vec![0u8; 4096];
    put_u64(&mut bytes, 512, 512);
    let f = tmp_file("cycle", &bytes);
    let (mut e, id) = engine(&f);
    let err = e.read_xrp(id, 512, 16, &mut list_walker(), &mut [0u8; 16]).unwrap_err();
    match err {
        ChainError::ChainTooLong { at, max } => {
            assert_eq!((max, at.hop, at.addr, at.start), (64, 65, 512, 512));
        }
        other => panic!("{other}"),
    }
    let cfg = EngineConfig { max_hops: 5, ..EngineConfig::default() };
    let (mut e, id) = engine_with(cfg, &f);
    let err = e.read_xrp(id, 512, 16, &mut list_walker(), &mut [0u8; 16]).unwrap_err();
    assert!(matches!(err, ChainError::ChainTooLong { max: 5, at } if at.hop == 6), "{err}");
}

#[test]
fn function_fault_fails_the_chain_with_the_fault() {
    let f = tmp_file("fault", &vec![0u8; 4096]);
    let (mut e, id) = engine(&f);
    let fault = VmError::BadRead { insn: 7, at: Place::Low(0xdead), len: 8 };
    let mut prog =
        func(|_c, _d, _s| Err(VmError::BadRead { insn: 7, at: Place::Low(0xdead), len: 8 }));
    let err = e.read_xrp(id, 1024, 8, &mut prog, &mut []).unwrap_err();
    assert!(err.to_string().contains("insn #7"), "{err}");
    assert!(matches!(err, ChainError::Fault { fault: ref f, at } if *f == fault && at.hop == 1));
}

#[test]
fn out_of_range_and_oversized_requests_are_refused_before_io() {
    let f = tmp_file("range", &vec![0u8; 4096]);
    let (mut e, id) = engine(&f);
    let mut stop = func(|ctx, _d, _s| {
        ctx.done = 1;
        Ok(0)
    });
    let err = e.read_xrp(id, 4090, 8, &mut stop, &mut []).unwrap_err();
    assert!(
        matches!(err, ChainError::OutOfRange { at, size: 8, file_size: 4096 } if at.hop == 1),
        "{err}"
    );
    let err = e.read_xrp(id, 0, 8192, &mut stop, &mut []).unwrap_err();
    assert!(matches!(err, ChainError::RequestTooLarge { size: 8192, .. }), "{err}");
    // A function pointing outside the file: the second hop is refused with its address.
    let mut bad = func(|ctx, _d, _s| {
        ctx.next_addr[3] = 1 << 40;
        ctx.size[3] = 512;
        Ok(0)
    });
    let err = e.read_xrp(id, 0, 512, &mut bad, &mut []).unwrap_err();
    assert!(matches!(err, ChainError::OutOfRange { at, .. } if at.hop == 2 && at.addr == 1 << 40));
    // The engine is still usable.
    e.read_xrp(id, 0, 512, &mut stop, &mut []).unwrap();
}

#[test]
fn more_than_sixteen_outstanding_reads_fail_the_chain() {
    let f = tmp_file("fan17", &vec![0u8; 64 * 512]);
    let (mut e, id) = engine(&f);
    let mut calls = 0;
    let mut prog = func(|ctx, _d, _s| {
        calls += 1;
        // Every invocation asks for two more blocks: outstanding grows by one each time.
        for i in 0..2 {
            ctx.next_addr[i] = 512 * (1 + i as u64);
            ctx.size[i] = 512;
        }
        Ok(0)
    });
    let err = e.read_xrp(id, 0, 512, &mut prog, &mut []).unwrap_err();
    assert!(matches!(err, ChainError::FanOutExceeded { max: 16, .. }), "{err}");
}

#[test]
fn an_error_fails_only_its_own_chain() {
    let lists = random_lists(5, 3000, 300, 512);
    let f = tmp_file("mixed", &lists.bytes);
    let (mut e, id) = engine(&f);
    let size = lists.bytes.len() as u64;
    let mut walker = list_walker();
    let mut outcomes = Vec::new();
    for (i, &head) in lists.heads.iter().enumerate() {
        // Every third chain starts past the end of the file.
        let start = if i.is_multiple_of(3) { size + 512 * i as u64 } else { head };
        e.submit_chain(id, start, 16, i as u64, |_| {}).unwrap();
    }
    e.wait(lists.heads.len(), &mut walker, |c| {
        outcomes.push((
            c.token,
            c.result.clone().map(|_| (get_u64(c.scratch, 0), get_u64(c.scratch, 8))),
        ));
    })
    .unwrap();
    assert_eq!(outcomes.len(), lists.heads.len());
    for (token, r) in outcomes {
        let i = token as usize;
        if i.is_multiple_of(3) {
            assert!(matches!(r, Err(ChainError::OutOfRange { at, .. }) if at.token == token));
        } else {
            assert_eq!(r.unwrap(), walk_list(&lists.bytes, lists.heads[i]));
        }
    }
}

#[test]
fn truncating_the_file_fails_exactly_the_chains_that_cross_the_new_end() {
    let lists = random_lists(6, 4000, 400, 512);
    let f = tmp_file("trunc", &lists.bytes);
    let (mut e, id) = engine(&f);
    let new_size = (lists.bytes.len() / 2) as u64;
    let mut walker = list_walker();
    for (i, &head) in lists.heads.iter().enumerate() {
        e.submit_chain(id, head, 16, i as u64, |_| {}).unwrap();
    }
    // SQEs are queued, not yet submitted: every read happens after the truncation.
    std::fs::OpenOptions::new().write(true).open(&f.path).unwrap().set_len(new_size).unwrap();
    let (mut ok, mut failed) = (0, 0);
    e.wait(lists.heads.len(), &mut walker, |c| {
        let head = lists.heads[c.token as usize];
        // Model: the first node at or beyond the new end fails the chain.
        let mut at = head;
        let mut hop = 1;
        let mut fail_at = None;
        loop {
            if at + 16 > new_size {
                fail_at = Some((hop, at));
                break;
            }
            at = get_u64(&lists.bytes, at as usize);
            if at == 0 {
                break;
            }
            hop += 1;
        }
        match (fail_at, c.result) {
            (None, Ok(_)) => {
                assert_eq!(
                    (get_u64(c.scratch, 0), get_u64(c.scratch, 8)),
                    walk_list(&lists.bytes, head)
                );
                ok += 1;
            }
            (Some((hop, addr)), Err(ChainError::ShortRead { at, got: 0, want: 16 })) => {
                assert_eq!((at.hop, at.addr, at.start), (hop, addr, head));
                failed += 1;
            }
            (want, got) => panic!("chain at {head}: model {want:?}, engine {got:?}"),
        }
    })
    .unwrap();
    assert!(ok > 0 && failed > 0, "ok {ok} failed {failed}");
}

#[test]
fn plain_reads_return_the_requested_bytes() {
    let lists = random_lists(7, 500, 5, 100);
    let f = tmp_file("plain", &lists.bytes);
    let (mut e, id) = engine(&f);
    for &(off, len) in &[(0u64, 512usize), (100, 16), (511, 2), (1000, 4096), (5, 4000)] {
        let mut buf = vec![0u8; len];
        e.read(id, off, &mut buf).unwrap();
        assert_eq!(buf, lists.bytes[off as usize..off as usize + len], "{off}+{len}");
    }
    for t in 0..100u64 {
        e.submit_read(id, t * 300, 300, t).unwrap();
    }
    let mut n = 0;
    e.wait(100, &mut storefn_io::NoFunction, |c| {
        let off = c.token as usize * 300;
        assert_eq!(c.data, &lists.bytes[off..off + 300]);
        n += 1;
    })
    .unwrap();
    assert_eq!(n, 100);
    let mut buf = [0u8; 8];
    let err = e.read(id, lists.bytes.len() as u64, &mut buf).unwrap_err();
    assert!(matches!(err, ChainError::OutOfRange { .. }), "{err}");
}

#[test]
fn full_engine_refuses_submissions_until_reaped() {
    let f = tmp_file("full", &vec![1u8; 8192]);
    let cfg = EngineConfig { chains: 4, buffers: 2, ..EngineConfig::default() };
    let (mut e, id) = engine_with(cfg, &f);
    for t in 0..4 {
        e.submit_read(id, t * 512, 512, t).unwrap();
    }
    assert_eq!(e.submit_read(id, 0, 512, 9), Err(SubmitError::Full { chains: 4 }));
    // Two buffers serve four reads: two wait for a buffer.
    assert_eq!(e.wait(4, &mut storefn_io::NoFunction, |c| c.result.map(drop).unwrap()).unwrap(), 4);
    assert_eq!(e.live(), 0);
}

#[test]
fn synchronous_calls_need_an_idle_engine() {
    let f = tmp_file("idle", &vec![1u8; 8192]);
    let (mut e, id) = engine(&f);
    e.submit_read(id, 0, 512, 1).unwrap();
    let err = e.read(id, 0, &mut [0u8; 8]).unwrap_err();
    assert!(matches!(err, ChainError::NotIdle { active: 1 }));
    e.wait(1, &mut storefn_io::NoFunction, |_| {}).unwrap();
    e.read(id, 0, &mut [0u8; 8]).unwrap();
}

#[test]
fn refresh_size_lets_chains_reach_appended_bytes() {
    let f = tmp_file("grow", &vec![7u8; 4096]);
    let (mut e, id) = engine(&f);
    let mut buf = [0u8; 16];
    let err = e.read(id, 8192, &mut buf).unwrap_err();
    assert!(matches!(err, ChainError::OutOfRange { file_size: 4096, .. }), "{err}");
    let mut more = std::fs::OpenOptions::new().append(true).open(&f.path).unwrap();
    std::io::Write::write_all(&mut more, &vec![9u8; 8192]).unwrap();
    more.sync_all().unwrap();
    // The engine's bound is the size it last saw, until refreshed.
    assert!(e.read(id, 8192, &mut buf).is_err());
    assert_eq!(e.refresh_size(id).unwrap(), Some(12288));
    e.read(id, 8192, &mut buf).unwrap();
    assert_eq!(buf, [9u8; 16]);
}

#[test]
fn errors_carry_the_context_for_a_plain_read_fallback() {
    let lists = random_lists(8, 100, 2, 512);
    let f = tmp_file("fallback", &lists.bytes);
    let (mut e, id) = engine(&f);
    // A function that faults on its third block: the caller redoes the walk from `at.start`.
    let mut calls = 0;
    let mut inner = list_walker();
    let mut flaky = func(|ctx, data, s| {
        calls += 1;
        if calls == 3 {
            return Err(VmError::BudgetExhausted { insn: 3, budget: 10 });
        }
        inner(ctx, data, s)
    });
    let head = lists.heads[0];
    let err = e.read_xrp(id, head, 16, &mut flaky, &mut [0u8; 16]).unwrap_err();
    let at = err.at().expect("chain context");
    assert_eq!((at.start, at.hop, at.token), (head, 3, u64::MAX));
    let second = get_u64(&lists.bytes, head as usize);
    assert_eq!(at.addr, get_u64(&lists.bytes, second as usize));
    // Fallback: plain reads from the start give the model's answer.
    let (mut sum, mut n, mut node) = (0u64, 0u64, [0u8; 16]);
    let mut addr = at.start;
    loop {
        e.read(id, addr, &mut node).unwrap();
        sum = sum.wrapping_add(get_u64(&node, 8));
        n += 1;
        addr = get_u64(&node, 0);
        if addr == 0 {
            break;
        }
    }
    assert_eq!((sum, n), walk_list(&lists.bytes, head));
}
