//! Clang-built programs from progs/ run through the Instance API (interpreter engine unless a
//! test loops over both engines).

use std::sync::Arc;

use storefn_vm::RegionName;
use storefn_vm::{
    load_verified, Engine, Instance, Place, ProgType, VerifiedProgram, VmError, XrpCtx,
};

fn prog(name: &str, t: ProgType) -> Arc<VerifiedProgram> {
    load_verified(storefn_progs::must(name), None, t).unwrap()
}

fn xrp(name: &str) -> Instance {
    Instance::new(prog(name, ProgType::Xrp), Engine::Interp).unwrap()
}

fn block(words: &[u64]) -> Vec<u8> {
    let mut b = vec![0u8; 4096];
    for (k, w) in words.iter().enumerate() {
        b[k * 8..k * 8 + 8].copy_from_slice(&w.to_le_bytes());
    }
    b
}

fn word(b: &[u8], k: usize) -> u64 {
    u64::from_le_bytes(b[k * 8..k * 8 + 8].try_into().unwrap())
}

/// Follows a linked list of blocks in a "file" like the io engine would: one invocation per
/// block, resubmitting next_addr[0] until done.
#[test]
fn xrp_follow_walks_a_linked_list() {
    let mut inst = xrp("xrp_follow");
    // Blocks at offsets 0, 1024, 512: next pointers 1024 -> 512 -> end; payloads 1, 10, 100.
    let mut file = vec![0u8; 2048];
    for (off, next, payload) in [(0usize, 1024u64, 1u64), (1024, 512, 10), (512, 0, 100)] {
        file[off..off + 8].copy_from_slice(&next.to_le_bytes());
        file[off + 8..off + 16].copy_from_slice(&payload.to_le_bytes());
    }
    let mut scratch = vec![0u8; 4096];
    let mut ctx = XrpCtx::default();
    let mut addr = 0usize;
    let mut steps = 0;
    loop {
        let mut data = vec![0u8; 4096];
        data[..512].copy_from_slice(&file[addr..addr + 512]);
        ctx.reset_outputs();
        assert_eq!(inst.run_xrp(&mut ctx, &data, &mut scratch).unwrap(), 0);
        steps += 1;
        if ctx.done != 0 {
            break;
        }
        let reqs: Vec<_> = ctx.requests().collect();
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0].2, 512);
        addr = usize::try_from(reqs[0].1).unwrap();
    }
    assert_eq!(steps, 3);
    assert_eq!(word(&scratch, 0), 111);
    assert_eq!(word(&scratch, 1), 3);
}

#[test]
fn subprograms_compute_through_calls() {
    let mut inst = xrp("test/subprog");
    let mut s = vec![0u8; 4096];
    let r0 = inst.run_xrp(&mut XrpCtx::default(), &block(&[21]), &mut s).unwrap();
    assert_eq!(r0, 7);
    assert_eq!(word(&s, 0), 47);
    assert_eq!(word(&s, 1), 1021);
}

#[test]
fn globals_rodata_and_persistent_bss() {
    let mut inst = xrp("test/globals");
    let mut s = vec![0u8; 4096];
    for (k, idx) in [5u64, 13].iter().enumerate() {
        inst.run_xrp(&mut XrpCtx::default(), &block(&[*idx]), &mut s).unwrap();
        assert_eq!(word(&s, 0), [66, 66][k] + 100);
        assert_eq!(word(&s, 1), k as u64 + 1, "the .bss counter persists in one instance");
    }
    // A fresh instance starts from the image again.
    let mut other = xrp("test/globals");
    other.run_xrp(&mut XrpCtx::default(), &block(&[0]), &mut s).unwrap();
    assert_eq!(word(&s, 1), 1);
}

#[test]
fn bounded_loop_sums_the_block() {
    let mut inst = xrp("test/loop_sum");
    let words: Vec<u64> = (1..=512).collect();
    let mut s = block(&[512]);
    let r0 = inst.run_xrp(&mut XrpCtx::default(), &block(&words), &mut s).unwrap();
    assert_eq!(r0, 512);
    assert_eq!(word(&s, 1), 512 * 513 / 2);
}

#[test]
fn spinning_program_exhausts_the_budget() {
    let mut inst = Instance::new(prog("test/spin", ProgType::Xrp), Engine::Interp).unwrap();
    inst.set_insn_budget(1000);
    let mut s = vec![0u8; 4096];
    let e = inst.run_xrp(&mut XrpCtx::default(), &block(&[1]), &mut s).unwrap_err();
    assert!(matches!(e, VmError::BudgetExhausted { budget: 1000, .. }), "{e}");
    // Every instruction of an iteration is charged (the loop header pays for the 5-7
    // instruction body and the longest way out of it), not only the backward jump (which
    // would allow 1000 iterations).
    let n = word(&s, 0);
    assert!((1000 / 16..=1000 / 4).contains(&n), "{n} iterations");
    // With the magic word it stops at once; the budget was reset for the new invocation.
    let mut ctx = XrpCtx::default();
    inst.run_xrp(&mut ctx, &block(&[0x5350_494e]), &mut s).unwrap();
    assert_eq!(ctx.done, 1);
}

#[test]
fn c_programs_that_touch_forbidden_memory_fault() {
    // Far past the block: a small overrun may land inside another granted region (scratch or
    // stack), which region-level checking allows by design.
    let mut s = block(&[1 << 40]);
    let e = xrp("test/bad_read").run_xrp(&mut XrpCtx::default(), &block(&[]), &mut s).unwrap_err();
    assert!(matches!(e, VmError::BadRead { len: 8, .. }), "{e}");
    let mut s = block(&[4088]);
    xrp("test/bad_read").run_xrp(&mut XrpCtx::default(), &block(&[]), &mut s).unwrap();
    let e =
        xrp("test/write_data").run_xrp(&mut XrpCtx::default(), &block(&[]), &mut s).unwrap_err();
    assert!(matches!(e, VmError::BadWrite { len: 1, .. }), "{e}");
    let mut ctx = XrpCtx::default();
    let e = xrp("test/write_ctx_ptr").run_xrp(&mut ctx, &block(&[]), &mut s).unwrap_err();
    let at = Place::Region {
        name: RegionName::Context,
        offset: 272,
        len: storefn_vm::xrp::XRP_CTX_BYTES as _,
    };
    assert_eq!(e, VmError::BadWrite { insn: e_insn(&e), at, len: 8 });
}

#[test]
fn trace_printk_goes_to_the_host_log() {
    let mut inst = xrp("test/trace");
    let mut s = vec![0u8; 4096];
    inst.run_xrp(&mut XrpCtx::default(), &block(&[12345]), &mut s).unwrap();
    assert_eq!(inst.host().trace, vec!["v=12345 neg=-3 hex=ff".to_string()]);
}

#[test]
fn atomics_program() {
    let mut inst = xrp("test/atomics");
    let mut s = block(&[4096, 0, 0, 0, 0x10, 0, 0]);
    inst.run_xrp(&mut XrpCtx::default(), &block(&[]), &mut s).unwrap();
    assert_eq!(word(&s, 0), 4111);
    assert_eq!(word(&s, 1), 4101);
    assert_eq!(word(&s, 2), 0);
    assert_eq!(word(&s, 3), 77);
    assert_eq!(word(&s, 4), 0x110);
    assert_eq!(word(&s, 5), 0);
    assert_eq!(word(&s, 6), 9);
}

#[test]
fn lambda_sum_and_memcpy_helper() {
    for engine in [Engine::Interp, Engine::Jit] {
        let p = prog("test/lambda_sum", ProgType::Lambda);
        let mut inst = Instance::new(p, engine).unwrap();
        let input: Vec<u8> = (1..=4u64).flat_map(u64::to_le_bytes).collect();
        let mut out = vec![0u8; 64];
        assert_eq!(inst.run_lambda(&input, &mut out).unwrap(), 24);
        assert_eq!(word(&out, 0), 10);
        assert_eq!(&out[8..24], &input[..16]);
        // An output buffer too small for the memcpy, right after a call with a large one (the
        // earlier output must not stay granted): the helper's pointer check names the call.
        let mut small = vec![0u8; 16];
        let e = inst.run_lambda(&input, &mut small).unwrap_err();
        assert!(matches!(e, VmError::BadWrite { len: 16, .. }), "{engine:?}: {e}");
        assert_eq!(word(&small, 0), 10, "{engine:?}");
    }
}

#[test]
fn jit_engine_is_reported_not_silently_replaced() {
    // Until the JIT lands this documents the no-fallback rule: either it compiles, or new fails.
    match Instance::new(prog("xrp_follow", ProgType::Xrp), Engine::Jit) {
        Ok(i) => assert_eq!(i.engine(), Engine::Jit),
        Err(e) => assert!(e.to_string().contains("JIT"), "{e}"),
    }
}

/// The io engine moves instances to its worker threads.
#[test]
fn instance_is_send() {
    fn assert_send<T: Send>() {}
    assert_send::<Instance>();
}

/// Regression (prebuilt run environment, stale per-call regions): after a call with large
/// buffers, a call with different, smaller buffers must not grant the earlier call's context,
/// data or scratch — on either engine, with the JIT's region hints warm from the first call.
#[test]
fn previous_calls_buffers_are_not_granted() {
    for engine in [Engine::Interp, Engine::Jit] {
        let mut reader = Instance::new(prog("test/bad_read", ProgType::Xrp), engine).unwrap();
        let mut writer = Instance::new(prog("test/write_at", ProgType::Xrp), engine).unwrap();
        let (mut ctx1, mut ctx2) = (XrpCtx::default(), XrpCtx::default());
        let data1 = block(&[0, 0, 77]);
        let mut scratch1 = block(&[16]);
        let data2 = vec![0u8; 64];
        let mut scratch2 = vec![0u8; 16];
        // Call 1: the same instructions succeed on the large buffers (and warm the hints).
        reader.run_xrp(&mut ctx1, &data1, &mut scratch1).unwrap();
        assert_eq!(word(&scratch1, 1), 77, "{engine:?}");
        scratch1[..8].copy_from_slice(&64u64.to_le_bytes());
        writer.run_xrp(&mut ctx1, &data1, &mut scratch1).unwrap();
        assert_eq!(word(&scratch1, 8), 1, "{engine:?}");
        // Call 2 reads at absolute addresses of call 1's buffers (all still alive).
        let d2 = data2.as_ptr() as u64;
        let stale_reads = [
            data1.as_ptr() as u64 + 16,
            scratch1.as_ptr() as u64 + 8,
            std::ptr::from_ref(&ctx1) as u64,
        ];
        for addr in stale_reads {
            scratch2[..8].copy_from_slice(&addr.wrapping_sub(d2).to_le_bytes());
            let e = reader.run_xrp(&mut ctx2, &data2, &mut scratch2).unwrap_err();
            // Named from whatever region lies nearest now; never the stale buffer.
            assert!(matches!(e, VmError::BadRead { insn: 4, len: 8, .. }), "{engine:?} {addr}");
        }
        let s2 = scratch2.as_ptr() as u64;
        let stale = scratch1.as_ptr() as u64 + 64;
        scratch2[..8].copy_from_slice(&stale.wrapping_sub(s2).to_le_bytes());
        let e = writer.run_xrp(&mut ctx2, &data2, &mut scratch2).unwrap_err();
        assert!(matches!(e, VmError::BadWrite { len: 8, .. }), "{e} {stale}");
        assert_eq!(word(&scratch1, 8), 1, "{engine:?}: call 1's scratch unchanged");
        // The same buffers again, but data lent shorter: its tail is no longer granted
        // (run_xrp skips re-patching only when context, buffers and lengths all repeat).
        scratch2[..8].copy_from_slice(&40u64.to_le_bytes());
        reader.run_xrp(&mut ctx2, &data2, &mut scratch2).unwrap();
        let e = reader.run_xrp(&mut ctx2, &data2[..40], &mut scratch2).unwrap_err();
        let at = Place::Region { name: RegionName::Data, offset: 40, len: 40 };
        assert_eq!(e, VmError::BadRead { insn: 4, at, len: 8 }, "{engine:?}");
        reader.run_xrp(&mut ctx2, &data2, &mut scratch2).unwrap();
        // An empty data buffer grants nothing, not even its own (dangling) address.
        scratch2[..8].copy_from_slice(&0u64.to_le_bytes());
        let e = reader.run_xrp(&mut ctx2, &[], &mut scratch2).unwrap_err();
        assert!(matches!(e, VmError::BadRead { len: 8, .. }), "{engine:?}: {e}");
    }
}

/// Regression: a loop-free program of seven functions, each calling the next 64
/// times, passed the verifier and then ran for minutes, because only backward jumps were
/// charged. Every instruction is charged now: both engines stop on the default budget, at the
/// same instruction, with the same error.
#[test]
fn call_fanout_stops_on_the_instruction_budget() {
    let p = prog("test/fanout", ProgType::Xrp);
    assert_eq!(p.stats().functions, 7);
    let mut stops = Vec::new();
    for engine in [Engine::Jit, Engine::Interp] {
        let mut inst = Instance::new(Arc::clone(&p), engine).unwrap();
        assert_eq!(inst.insn_budget(), storefn_vm::limits::DEFAULT_INSN_BUDGET);
        let mut s = vec![0u8; 4096];
        let e = inst.run_xrp(&mut XrpCtx::default(), &block(&[0]), &mut s).unwrap_err();
        let VmError::BudgetExhausted { insn, budget } = e else { panic!("{engine:?}: {e}") };
        assert_eq!(budget, storefn_vm::limits::DEFAULT_INSN_BUDGET);
        stops.push(insn);
        // A smaller budget per instance stops it sooner, at a different point.
        inst.set_insn_budget(1000);
        let e = inst.run_xrp(&mut XrpCtx::default(), &block(&[0]), &mut s).unwrap_err();
        assert!(matches!(e, VmError::BudgetExhausted { budget: 1000, .. }), "{e}");
        stops.push(match e {
            VmError::BudgetExhausted { insn, .. } => insn,
            _ => unreachable!(),
        });
    }
    assert_eq!(stops[..2], stops[2..], "JIT and interpreter stop at the same instructions");
}

/// The other worst shapes behind the default budget's stop time (docs/design/vm.md): a region
/// window miss on every load, and a helper call (`bpf_trace_printk`) per iteration. Both
/// engines stop on the budget at the same instruction with the same trace log.
#[test]
fn window_miss_and_helper_loops_stop_on_the_budget_alike() {
    for name in ["test/budget_window", "test/budget_trace"] {
        let p = prog(name, ProgType::Xrp);
        let mut outcomes = Vec::new();
        for engine in [Engine::Jit, Engine::Interp] {
            let mut inst = Instance::new(Arc::clone(&p), engine).unwrap();
            inst.set_insn_budget(100_000);
            let mut s = vec![0u8; 4096];
            let e = inst.run_xrp(&mut XrpCtx::default(), &block(&[0]), &mut s).unwrap_err();
            assert!(matches!(e, VmError::BudgetExhausted { budget: 100_000, .. }), "{name}: {e}");
            outcomes.push((e, inst.host().trace.len()));
        }
        assert_eq!(outcomes[0], outcomes[1], "{name}");
    }
}

#[test]
fn a_lambda_budget_grows_with_its_input_and_still_stops() {
    // A λ function runs once over its whole range, so its invocation may execute the
    // instance's budget plus LAMBDA_INSNS_PER_INPUT_BYTE per input byte and
    // LAMBDA_INSNS_PER_OUTPUT_BYTE per output byte, and no more.
    use storefn_vm::limits::{LAMBDA_INSNS_PER_INPUT_BYTE, LAMBDA_INSNS_PER_OUTPUT_BYTE};
    for engine in [Engine::Interp, Engine::Jit] {
        let mut inst = match Instance::new(prog("test/lambda_spin", ProgType::Lambda), engine) {
            Ok(i) => i,
            Err(e) if engine == Engine::Jit => panic!("JIT: {e}"),
            Err(e) => panic!("{e}"),
        };
        inst.set_insn_budget(1000);
        let mut out = vec![0u8; 8];
        for len in [8usize, 4096] {
            out.fill(0);
            let input = vec![1u8; len];
            let e = inst.run_lambda(&input, &mut out).unwrap_err();
            let want = 1000
                + LAMBDA_INSNS_PER_INPUT_BYTE * len as u64
                + LAMBDA_INSNS_PER_OUTPUT_BYTE * out.len() as u64;
            assert!(
                matches!(e, VmError::BudgetExhausted { budget, .. } if budget == want),
                "{engine:?} {len}: {e}"
            );
            let n = word(&out, 0);
            assert!((want / 16..=want / 4).contains(&n), "{engine:?} {len}: {n} iterations");
        }
        let mut stop = vec![0u8; 8];
        stop.copy_from_slice(&0x5350_494e_u64.to_le_bytes());
        assert_eq!(inst.run_lambda(&stop, &mut out).unwrap(), 8);
    }
}

fn e_insn(e: &VmError) -> usize {
    match e {
        VmError::BadRead { insn, .. } | VmError::BadWrite { insn, .. } => *insn,
        e => panic!("not an access fault: {e}"),
    }
}

#[test]
fn each_run_reports_the_instructions_it_was_charged() {
    // The server charges tenants by these counts: both engines report the same, a loop over
    // more data costs more, and a run stopped by its budget reports about the whole budget.
    let mut used = Vec::new();
    for engine in [Engine::Interp, Engine::Jit] {
        let mut inst = Instance::new(prog("test/loop_sum", ProgType::Xrp), engine).unwrap();
        let words: Vec<u64> = (1..=512).collect();
        let mut s = block(&[512]);
        inst.run_xrp(&mut XrpCtx::default(), &block(&words), &mut s).unwrap();
        let n = inst.insns_used();
        s = block(&[8]);
        inst.run_xrp(&mut XrpCtx::default(), &block(&words), &mut s).unwrap();
        assert!(inst.insns_used() < n, "{engine:?}: 8 words cost less than 512");
        assert!(n > 0 && n <= inst.insn_budget(), "{engine:?}: {n}");
        let mut spin = Instance::new(prog("test/spin", ProgType::Xrp), engine).unwrap();
        spin.set_insn_budget(10_000);
        let e = spin.run_xrp(&mut XrpCtx::default(), &block(&[0]), &mut s).unwrap_err();
        assert!(matches!(e, VmError::BudgetExhausted { .. }), "{e}");
        assert!(spin.insns_used() > 9_000, "{engine:?}: {}", spin.insns_used());
        used.push(n);
    }
    assert_eq!(used[0], used[1], "interpreter and JIT charge alike");
}
