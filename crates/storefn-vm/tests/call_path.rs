//! `Instance::run_xrp` called again and again on one context and one pair of buffers (the io
//! engine's and the bench's pattern) runs the JIT with no per-call bookkeeping; these tests
//! check that such calls still fault, stop on the budget and refuse shorter buffers exactly
//! as the interpreter does, call after call.

mod common;

use std::sync::Arc;

use common::*;
use storefn_vm::insn::*;
use storefn_vm::xrp::{XRP_OFF_DATA, XRP_OFF_DONE, XRP_OFF_SCRATCH};
use storefn_vm::{Engine, Instance, ProgType, VerifiedProgram, VmError, XrpCtx};

fn instances(insns: Vec<Insn>) -> [Instance; 2] {
    let prog = Arc::new(VerifiedProgram::new(program(insns, ProgType::Xrp)).expect("verifies"));
    [Engine::Jit, Engine::Interp].map(|e| Instance::new(Arc::clone(&prog), e).unwrap())
}

/// The fault without its place (the instances' stacks differ, so the region an address is
/// named against may too).
fn kind(r: &Result<u64, VmError>) -> String {
    match r {
        Ok(v) => format!("ok {v}"),
        Err(VmError::BadRead { insn, len, .. }) => format!("bad read #{insn} len {len}"),
        Err(VmError::BadWrite { insn, len, .. }) => format!("bad write #{insn} len {len}"),
        Err(e) => e.to_string(),
    }
}

/// `r0 = data[scratch[0]]` (an unproved, checked byte load), `scratch[8] = r0`, `done = 1`.
fn load_at_arg() -> Vec<Insn> {
    asm![
        ldx(BPF_DW, 2, 1, XRP_OFF_SCRATCH as i16),
        ldx(BPF_DW, 3, 2, 0),
        ldx(BPF_DW, 4, 1, XRP_OFF_DATA as i16),
        alu64_reg(BPF_ADD, 4, 3),
        ldx(BPF_B, 0, 4, 0),
        stx(BPF_DW, 2, 0, 8),
        st(BPF_W, 1, XRP_OFF_DONE as i16, 1),
        exit()
    ]
}

#[test]
fn faults_between_repeated_calls_are_reported_like_the_interpreter() {
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 1) as u8).collect();
    let mut used = [Vec::new(), Vec::new()];
    for (n, inst) in instances(load_at_arg()).iter_mut().enumerate() {
        let mut ctx = XrpCtx::default();
        let mut scratch = vec![0u8; 64];
        for arg in [0u64, 5, 4095, 4096, 7, 1 << 40, 3, 4097, u64::MAX, 4000] {
            scratch[..8].copy_from_slice(&arg.to_le_bytes());
            let got = inst.run_xrp(&mut ctx, &data, &mut scratch);
            let want = match usize::try_from(arg).ok().and_then(|a| data.get(a)) {
                Some(&b) => format!("ok {b}"),
                None => "bad read #4 len 1".to_string(),
            };
            assert_eq!(kind(&got), want, "engine {n}, argument {arg}");
            used[n].push(inst.insns_used());
        }
    }
    assert_eq!(used[0], used[1], "instructions charged, JIT and interpreter");
}

#[test]
fn a_shorter_buffer_at_the_same_address_is_never_read_or_written_past_its_end() {
    // data[4000] is proved in bounds for blocks of at least 4001 bytes, scratch[arg] is
    // checked: after calls on a full block and scratch, the same pointers with shorter
    // lengths must fault (the JIT's instance hands the short block to the interpreter).
    let insns = asm![
        ldx(BPF_DW, 2, 1, XRP_OFF_DATA as i16),
        ldx(BPF_B, 0, 2, 4000),
        ldx(BPF_DW, 2, 1, XRP_OFF_SCRATCH as i16),
        ldx(BPF_DW, 3, 2, 0),
        alu64_reg(BPF_ADD, 3, 2),
        stx(BPF_B, 3, 0, 0),
        exit()
    ];
    let prog = VerifiedProgram::new(program(insns.clone(), ProgType::Xrp)).unwrap();
    assert_eq!(prog.xrp_min_bytes().0, 4001, "the test needs the data load proved");
    let mut data = vec![0u8; 4096];
    data[4000] = 0x5c;
    for (n, inst) in instances(insns).iter_mut().enumerate() {
        let mut ctx = XrpCtx::default();
        let mut scratch = vec![0u8; 256];
        // (data bytes, scratch bytes, argument, expected)
        // Steps 4-6: a short call between two of the same key lends a wider scratch; the
        // third must not run on the slots the short call left.
        let steps: [(usize, usize, u64, &str); 11] = [
            (4096, 256, 200, "ok 92"),
            (4096, 256, 200, "ok 92"),
            (4096, 16, 200, "bad write #5 len 1"),
            (4096, 256, 200, "ok 92"),
            (4096, 16, 200, "bad write #5 len 1"),
            (4000, 256, 200, "bad read #1 len 1"),
            (4096, 16, 200, "bad write #5 len 1"),
            (4096, 256, 100, "ok 92"),
            (4001, 256, 100, "ok 92"),
            (4096, 256, 255, "ok 92"),
            (4096, 16, 15, "ok 92"),
        ];
        for (i, &(d, s, arg, want)) in steps.iter().enumerate() {
            scratch[..8].copy_from_slice(&arg.to_le_bytes());
            let got = inst.run_xrp(&mut ctx, &data[..d], &mut scratch[..s]);
            assert_eq!(kind(&got), want, "engine {n}, step {i}");
            if got.is_ok() {
                assert_eq!(scratch[arg as usize], 0x5c, "engine {n}, step {i}");
                scratch[arg as usize] = 0;
            }
        }
    }
}

#[test]
fn a_budget_set_between_repeated_calls_binds_the_next_call() {
    // r0 counts to 50 in a loop: 1 + 50 * 2 + 1 instructions.
    let insns =
        asm![mov64_imm(0, 0), alu64_imm(BPF_ADD, 0, 1), jmp_imm(BPF_JLT, 0, 50, -2), exit()];
    let mut used = Vec::new();
    for inst in &mut instances(insns) {
        let (mut ctx, data, mut scratch) = (XrpCtx::default(), vec![0u8; 64], vec![0u8; 64]);
        let mut run = |inst: &mut Instance| {
            let r = inst.run_xrp(&mut ctx, &data, &mut scratch);
            (kind(&r), inst.insns_used())
        };
        let full = run(inst);
        assert_eq!(full, ("ok 50".to_string(), 102));
        let mut seen = vec![full.clone(), run(inst)];
        inst.set_insn_budget(60);
        let short = run(inst);
        assert!(short.0.contains("(60 instructions)"), "{short:?}");
        seen.extend([short, run(inst)]);
        inst.set_insn_budget(102);
        seen.push(run(inst));
        assert_eq!(seen[4], full);
        used.push(seen);
    }
    assert_eq!(used[0], used[1], "JIT and interpreter");
}

#[test]
fn the_host_log_borrowed_between_repeated_calls_sees_every_call() {
    // Regression: the in-line path stopped deriving the helpers' HostState pointer on every
    // call; `host_mut` must send the next call back through the path that derives it.
    // trace_printk("hi") from the stack, then r0 = 0.
    let insns = asm![
        st(BPF_W, 10, -8, 0x6968),
        mov64_reg(1, 10),
        alu64_imm(BPF_ADD, 1, -8),
        mov64_imm(2, 3),
        call_helper(6),
        mov64_imm(0, 0),
        exit()
    ];
    let mut logs = Vec::new();
    for inst in &mut instances(insns) {
        let (mut ctx, data, mut scratch) = (XrpCtx::default(), vec![0u8; 64], vec![0u8; 64]);
        let mut log = Vec::new();
        for call in 0..6 {
            assert_eq!(kind(&inst.run_xrp(&mut ctx, &data, &mut scratch)), "ok 0", "call {call}");
            log.push(inst.host().trace.len());
            if call % 2 == 1 {
                inst.host_mut().trace.clear();
            }
        }
        assert_eq!(log, [1, 2, 1, 2, 1, 2], "trace lines after each call");
        logs.push(log);
    }
    assert_eq!(logs[0], logs[1], "JIT and interpreter");
}

#[test]
fn run_xrp_refuses_another_program_type_on_every_call() {
    // Regression: the in-line path no longer tests the program type; it must never be
    // reached by a program of another type, however often it is called with the same buffers.
    let prog = Arc::new(
        VerifiedProgram::new(program(asm![mov64_imm(0, 1), exit()], ProgType::Lambda)).unwrap(),
    );
    for engine in [Engine::Jit, Engine::Interp] {
        let mut inst = Instance::new(Arc::clone(&prog), engine).unwrap();
        let (mut ctx, data, mut scratch) = (XrpCtx::default(), vec![0u8; 64], vec![0u8; 64]);
        for call in 0..3 {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                inst.run_xrp(&mut ctx, &data, &mut scratch)
            }));
            assert!(r.is_err(), "{engine:?}, call {call}: ran a λ program as xrp");
        }
        assert_eq!(inst.run_lambda(&data, &mut scratch), Ok(1), "{engine:?}");
    }
}
